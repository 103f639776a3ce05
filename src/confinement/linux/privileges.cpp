#include "confinement/linux/privileges.h"

#include <signal.h>
#include <sys/prctl.h>

#include <cerrno>
#include <string>

namespace basal::confinement {

StepStatus SetParentDeathSignal() {
  if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) {
    return StepStatus::Failed(SyscallFailure("prctl(PR_SET_PDEATHSIG, SIGKILL)", errno));
  }
  int now = 0;
  if (prctl(PR_GET_PDEATHSIG, &now, 0, 0, 0) != 0) {
    return StepStatus::Failed(SyscallFailure("prctl(PR_GET_PDEATHSIG)", errno));
  }
  if (now != SIGKILL) {
    return StepStatus::Failed("PR_GET_PDEATHSIG answers " + std::to_string(now) + " after it was set, not SIGKILL");
  }
  return StepStatus::Passed();
}

StepStatus SetNoNewPrivs() {
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    return StepStatus::Failed(SyscallFailure("prctl(PR_SET_NO_NEW_PRIVS, 1)", errno));
  }
  const int now = prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0);
  if (now != 1) {
    return StepStatus::Failed("PR_GET_NO_NEW_PRIVS answers " + std::to_string(now) + " after it was set, not 1");
  }
  return StepStatus::Passed();
}

StepStatus MakeNonDumpable() {
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
    return StepStatus::Failed(SyscallFailure("prctl(PR_SET_DUMPABLE, 0)", errno));
  }
  const int now = prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
  if (now != 0) {
    return StepStatus::Failed("PR_GET_DUMPABLE answers " + std::to_string(now) + " after it was cleared, not 0");
  }
  return StepStatus::Passed();
}

}  // namespace basal::confinement
