#include "confinement/linux/descriptors.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace basal::confinement {

std::string SyscallFailure(const char* what, int saved_errno) {
  std::string s = what;
  s += " failed: ";
  s += std::strerror(saved_errno);
  s += " (errno ";
  s += std::to_string(saved_errno);
  s += ")";
  return s;
}

StepStatus CloseDescriptorsAboveStdio() {
  // The raw system call, not glibc's wrapper, so the kernel's answer is never emulated.
  if (syscall(SYS_close_range, 3U, ~0U, 0U) != 0) {
    return StepStatus::Failed(SyscallFailure("close_range(3, ~0U, 0)", errno));
  }
  return StepStatus::Passed();
}

}  // namespace basal::confinement
