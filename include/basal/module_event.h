// What a module reports besides results (ModuleEvent), and who hears it (ModuleObserver).
#pragma once

#include <cstdint>
#include <string>

namespace basal {

// What the module tells its embedder besides results: the CLI prints these, a daemon logs or
// counts them. Called on the loop thread; must not call back into the Module.
struct ModuleEvent {
  enum class Kind {
    kWorkerRefused,          // a worker's welcome did not report the required confinement
    kConfinementViolation,   // a worker was killed by the seccomp filter
    kHandlerThrew,           // a host-call handler threw; the call was answered with HostError
    kResultTooLarge,         // a handler's result could not be sent to the flow
    kJournalFailure,         // a journal commit failed; nothing of that batch was answered
    kRecovered,              // opening the journal closed activations whose parent had died
    kIdleCpu,                // an idle worker used CPU between activations: killed
    kRunStopped,             // a durable run stopped for an operator (needs_reconciliation) or ran out of resumes
  };
  Kind kind;
  std::string message;
  int64_t activation_id = 0;  // 0 when none
  int64_t worker_pid = 0;     // 0 when none
};
const char* ModuleEventKindName(ModuleEvent::Kind kind);  // "worker_refused", ...

class ModuleObserver {
 public:
  virtual ~ModuleObserver() = default;
  virtual void OnEvent(const ModuleEvent& event) = 0;
};

}  // namespace basal
