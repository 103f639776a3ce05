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
    kResultNotJson,          // a handler answered with a text (HostCallReply::OkText) that is not JSON
    kJournalFailure,         // a journal commit failed; nothing of that batch was answered
    kRecovered,              // opening the journal closed activations whose parent had died
    kIdleCpu,                // an idle worker used CPU between activations: killed
    kRunStopped,             // a durable run stopped for an operator (needs_reconciliation) or ran out of resumes
    kJournalRecovered,       // a commit succeeded after failed ones (told once per outage, as its failure is)
  };
  Kind kind;
  std::string message;
  int64_t activation_id = 0;  // 0 when none
  int64_t worker_pid = 0;     // 0 when none
};
const char* ModuleEventKindName(ModuleEvent::Kind kind);  // "worker_refused", ...

// What happens in the activations, as it happens (basal serve's live tail, /v1/tail): each one's
// start and end, and each state a host call's record reaches. Called on the loop thread; must not
// call back into the Module. (Every member has an initializer, so a designated initializer may name
// any of them.) The journal stays the record: an activation's start and its calls are
// told when they are journaled (before their batch commits, so a failed commit can take them back:
// the end then says journal_error); an end is told once its batch has committed.
struct ActivityEvent {
  enum class Kind {
    kActivationStarted,  // handed to a worker
    kActivationEnded,    // its end is committed
    kHostCall,           // a call's record reached `state`: decided (denied or not), started, answered, abandoned
  };
  Kind kind = Kind::kActivationStarted;
  int64_t activation_id = 0;
  int64_t run_id = 0;           // the run it executes; 0: none, or not known any more (a late answer)
  std::string flow{};
  int64_t started_unix_us = 0;  // the activation's start
  // kActivationEnded
  int64_t ended_unix_us = 0;
  std::string outcome{};        // OutcomeName
  std::string error_json{};     // ActivationResult::ErrorJson() as text; "" when ok
  // kHostCall (not `log`, whose lines reach the module's log sink)
  int64_t call_id = 0;
  std::string name{};           // as the script called it
  std::string decision{};       // VerdictName: "allow", "deny", ...
  std::string rule{};           // what matched: "grants.kv.put", "no grant", ...
  std::string state{};          // CallStateName: "started", "answered", "abandoned"
};

class ModuleObserver {
 public:
  virtual ~ModuleObserver() = default;
  virtual void OnEvent(const ModuleEvent& event) = 0;
  // Activity is told only to an observer that asks for it (WantsActivity, read at each event: a
  // module with nobody tailing builds no events).
  virtual bool WantsActivity() const { return false; }
  virtual void OnActivity(const ActivityEvent& /*event*/) {}
};

}  // namespace basal
