#include "parent/platform/process_cpu.h"

#include <sys/resource.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace basal {

std::optional<ProcessCpuClock> ProcessCpuClock::For(pid_t pid) {
  clockid_t id;
  if (clock_getcpuclockid(pid, &id) != 0) return std::nullopt;
  return ProcessCpuClock(id);
}

std::chrono::nanoseconds ProcessCpuClock::Read() const {
  timespec ts{};
  if (clock_gettime(id_, &ts) != 0) return std::chrono::nanoseconds(0);
  return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
}

uint64_t WholeCpuSeconds(std::chrono::nanoseconds t) {
  const auto s = std::chrono::ceil<std::chrono::seconds>(t).count();
  return static_cast<uint64_t>(s < 1 ? 1 : s);
}

Result<void> SetCpuLimit(pid_t pid, std::chrono::nanoseconds soft, std::chrono::nanoseconds hard) {
  rlimit limit{WholeCpuSeconds(soft), WholeCpuSeconds(hard)};
  if (limit.rlim_cur > limit.rlim_max) limit.rlim_cur = limit.rlim_max;
  if (prlimit(pid, RLIMIT_CPU, &limit, nullptr) != 0) {
    return MakeError(ErrorCode::kSpawn, "cannot set RLIMIT_CPU of worker " + std::to_string(pid) + ": " +
                                            std::strerror(errno));
  }
  return Ok();
}

}  // namespace basal
