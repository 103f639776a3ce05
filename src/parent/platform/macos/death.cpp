// macOS's death rule. Seatbelt makes a denied call fail rather than kill, so no death is a
// confinement kill and macOS has no confinement health counter (docs/sandbox.md); SIGXCPU is the
// RLIMIT_CPU backstop and exit 70 before the welcome the worker's refusal. Signals are read with
// macOS's numbers (SIGSYS is 12 there, SIGBUS 10).
#include <string>

#include "parent/platform/platform.h"

namespace basal {
namespace {

const char* MacosSignalName(int sig) {
  switch (sig) {
    case 12: return "SIGSYS";
    case 11: return "SIGSEGV";
    case 6: return "SIGABRT";
    case 9: return "SIGKILL";
    case 10: return "SIGBUS";
    case 4: return "SIGILL";
    case 8: return "SIGFPE";
    case 15: return "SIGTERM";
    case 13: return "SIGPIPE";
    case 5: return "SIGTRAP";
    case 24: return "SIGXCPU";
    default: return "signal";
  }
}

}  // namespace

DeathVerdict ClassifyMacosDeath(const WorkerDeath& death, bool welcomed) {
  DeathVerdict v;
  if (death.kind == WorkerDeath::Kind::kExited) {
    v.description = "exited with status " + std::to_string(death.code);
    if (death.code == kExitConfinementRefused && !welcomed) {
      v.kind = DeathKind::kRefusal;
    } else {
      v.crash_key = "exit " + std::to_string(death.code);
    }
    return v;
  }
  const std::string name = MacosSignalName(death.signal);
  v.description = "killed by signal " + std::to_string(death.signal) + " (" + name + ")";
  if (death.signal == kMacosSigxcpu) {
    v.kind = DeathKind::kCpuLimit;
  } else {
    v.crash_key = "signal " + name;
    if (name == "signal") v.crash_key += " " + std::to_string(death.signal);
  }
  return v;
}

}  // namespace basal
