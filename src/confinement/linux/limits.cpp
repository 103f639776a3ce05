#include "confinement/linux/limits.h"

#include <sys/resource.h>

#include <cerrno>
#include <string>

namespace basal::confinement {

namespace {

StepStatus Limit(int resource, const char* name, uint64_t soft, uint64_t hard) {
  const std::string want_text = std::to_string(soft) + "/" + std::to_string(hard);
  const rlimit want{soft, hard};
  if (setrlimit(resource, &want) != 0)
    return StepStatus::Failed(SyscallFailure(("setrlimit(" + std::string(name) + ", " + want_text + ")").c_str(), errno));
  rlimit now{};
  if (getrlimit(resource, &now) != 0)
    return StepStatus::Failed(SyscallFailure(("getrlimit(" + std::string(name) + ")").c_str(), errno));
  if (now.rlim_cur != soft || now.rlim_max != hard)
    return StepStatus::Failed(std::string(name) + " reads " + std::to_string(now.rlim_cur) + "/" +
                              std::to_string(now.rlim_max) + " after it was set to " + want_text);
  return StepStatus::Passed();
}

}  // namespace

StepStatus LimitAddressSpace(uint64_t bytes) { return Limit(RLIMIT_AS, "RLIMIT_AS", bytes, bytes); }

StepStatus LimitCpuTime(uint64_t soft_seconds, uint64_t hard_seconds) {
  if (soft_seconds == 0 || soft_seconds > hard_seconds)
    return StepStatus::Failed("RLIMIT_CPU " + std::to_string(soft_seconds) + "/" + std::to_string(hard_seconds) +
                              ": the soft limit must be from 1 s to the hard limit");
  return Limit(RLIMIT_CPU, "RLIMIT_CPU", soft_seconds, hard_seconds);
}

}  // namespace basal::confinement
