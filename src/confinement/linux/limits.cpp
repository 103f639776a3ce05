#include "confinement/linux/limits.h"

#include <sys/resource.h>

#include <cerrno>
#include <string>

namespace basal::confinement {

StepStatus LimitAddressSpace(uint64_t bytes) {
  const rlimit want{bytes, bytes};
  if (setrlimit(RLIMIT_AS, &want) != 0)
    return StepStatus::Failed(SyscallFailure(("setrlimit(RLIMIT_AS, " + std::to_string(bytes) + ")").c_str(), errno));
  rlimit now{};
  if (getrlimit(RLIMIT_AS, &now) != 0) return StepStatus::Failed(SyscallFailure("getrlimit(RLIMIT_AS)", errno));
  if (now.rlim_cur != bytes || now.rlim_max != bytes)
    return StepStatus::Failed("RLIMIT_AS reads " + std::to_string(now.rlim_cur) + "/" + std::to_string(now.rlim_max) +
                              " after it was set to " + std::to_string(bytes));
  return StepStatus::Passed();
}

}  // namespace basal::confinement
