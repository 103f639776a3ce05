// A worker's CPU time as the kernel counts it, read by the parent: the worker cannot forge it (its
// `done` frame's figure is not used), and a worker stuck where its engine's interrupt never runs
// (a regular expression backtracking, a long native builtin) still shows it. And the RLIMIT_CPU
// backstop the parent sets on a worker from outside.
//
//   auto clock = ProcessCpuClock::For(pid);            // std::optional: nullopt if the pid is gone
//   std::chrono::nanoseconds used = clock->Read();     // 0 once the process is reaped
//   SetCpuLimit(pid, /*soft=*/3s, /*hard=*/600s);      // SIGXCPU past soft, SIGKILL past hard
#pragma once

#include <sys/types.h>
#include <time.h>

#include <chrono>
#include <optional>

#include "basal/result.h"

namespace basal {

class ProcessCpuClock {
 public:
  // The CPU clock of `pid`, which must be the caller's child and not yet reaped (so the pid cannot
  // name another process).
  static std::optional<ProcessCpuClock> For(pid_t pid);
  // User + system time of every thread of the process so far; 0 if it cannot be read.
  std::chrono::nanoseconds Read() const;

 private:
  explicit ProcessCpuClock(clockid_t id) : id_(id) {}
  clockid_t id_;
};

// `t` as RLIMIT_CPU counts it: whole seconds, rounded up, at least 1.
uint64_t WholeCpuSeconds(std::chrono::nanoseconds t);

// RLIMIT_CPU of `pid` (prlimit): the kernel sends SIGXCPU at `soft` and SIGKILL at `hard` seconds
// of CPU (rounded up to whole seconds; soft <= hard). Fails (EPERM) on a worker that runs as
// another user unless this process has CAP_SYS_RESOURCE (CanChangeWorkerLimits); a worker's
// first limits are therefore set by the worker itself (WorkerLimits, worker_launcher.h).
Result<void> SetCpuLimit(pid_t pid, std::chrono::nanoseconds soft, std::chrono::nanoseconds hard);

}  // namespace basal
