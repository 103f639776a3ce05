// Linux's death rule: SIGSYS is the seccomp filter (worker_confinement), SIGXCPU the RLIMIT_CPU
// backstop, exit 70 before the welcome the worker's refusal to run unconfined.
#include <string>

#include "parent/platform/platform.h"

#if defined(__linux__)
#include <signal.h>
static_assert(SIGSYS == basal::kLinuxSigsys && SIGXCPU == basal::kLinuxSigxcpu,
              "Linux's signal numbers are the ones the rule names");
#endif

namespace basal {

const char* LinuxSignalName(int sig) {
  switch (sig) {
    case 31: return "SIGSYS";
    case 11: return "SIGSEGV";
    case 6: return "SIGABRT";
    case 9: return "SIGKILL";
    case 7: return "SIGBUS";
    case 4: return "SIGILL";
    case 8: return "SIGFPE";
    case 15: return "SIGTERM";
    case 13: return "SIGPIPE";
    case 5: return "SIGTRAP";
    case 24: return "SIGXCPU";
    default: return "signal";
  }
}

std::string WorkerDeath::Describe() const {
  if (kind != Kind::kExited) return "killed by signal " + std::to_string(signal) + " (" + LinuxSignalName(signal) + ")";
  return "exited with status " + std::to_string(code);
}

DeathVerdict ClassifyLinuxDeath(const WorkerDeath& death, bool welcomed) {
  DeathVerdict v;
  v.description = death.Describe();
  if (death.kind == WorkerDeath::Kind::kSignalled && death.signal == kLinuxSigsys) {
    v.kind = DeathKind::kConfinementKill;
  } else if (death.kind == WorkerDeath::Kind::kExited && death.code == kExitConfinementRefused && !welcomed) {
    v.kind = DeathKind::kRefusal;
  } else if (death.kind == WorkerDeath::Kind::kSignalled && death.signal == kLinuxSigxcpu) {
    v.kind = DeathKind::kCpuLimit;
  } else if (death.kind == WorkerDeath::Kind::kExited) {
    v.crash_key = "exit " + std::to_string(death.code);
  } else {
    v.crash_key = std::string("signal ") + LinuxSignalName(death.signal);
    if (v.crash_key == "signal signal") v.crash_key += " " + std::to_string(death.signal);
  }
  return v;
}

}  // namespace basal
