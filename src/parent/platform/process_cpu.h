// A worker's CPU time as the kernel counts it, read by the parent: the worker cannot forge it (its
// `done` frame's figure is not used), and a worker stuck where its engine's interrupt never runs
// (a regular expression backtracking, a long native builtin) still shows it. And the RLIMIT_CPU
// backstop the parent sets on a worker from outside (Linux). The parent gets its workers' clocks
// through the platform seam (WorkerLauncher::CpuClock): Linux clock_getcpuclockid, Windows
// GetProcessTimes on the worker's process handle (every thread, kernel plus user time).
//
//   auto clock = ProcessCpuClock::For(pid);            // std::optional: nullopt if the pid is gone
//   std::chrono::nanoseconds used = clock->Read();     // 0 once the process is reaped
//   SetCpuLimit(pid, /*soft=*/3s, /*hard=*/600s);      // SIGXCPU past soft, SIGKILL past hard
#pragma once

#include <sys/types.h>
#if !defined(_WIN32)
#include <time.h>
#endif

#include <chrono>
#include <optional>

#include "basal/result.h"

namespace basal {

class ProcessCpuClock {
 public:
#if defined(_WIN32)
  // The CPU clock of the process `process_handle` (a HANDLE with PROCESS_QUERY_LIMITED_INFORMATION,
  // owned by the caller for as long as the clock is read).
  static std::optional<ProcessCpuClock> For(void* process_handle);
#else
  // The CPU clock of `pid`, which must be the caller's child and not yet reaped (so the pid cannot
  // name another process).
  static std::optional<ProcessCpuClock> For(pid_t pid);
#endif
  // User + system time of every thread of the process so far; 0 if it cannot be read.
  std::chrono::nanoseconds Read() const;

 private:
#if defined(_WIN32)
  explicit ProcessCpuClock(void* process) : process_(process) {}
  void* process_;
#else
  explicit ProcessCpuClock(clockid_t id) : id_(id) {}
  clockid_t id_;
#endif
};

// `t` as RLIMIT_CPU counts it: whole seconds, rounded up, at least 1.
uint64_t WholeCpuSeconds(std::chrono::nanoseconds t);

#if !defined(_WIN32)
// RLIMIT_CPU of `pid` (prlimit): the kernel sends SIGXCPU at `soft` and SIGKILL at `hard` seconds
// of CPU (rounded up to whole seconds; soft <= hard). Fails (EPERM) on a worker that runs as
// another user unless this process has CAP_SYS_RESOURCE (CanChangeWorkerLimits); a worker's
// first limits are therefore set by the worker itself (WorkerLimits, worker_launcher.h).
Result<void> SetCpuLimit(pid_t pid, std::chrono::nanoseconds soft, std::chrono::nanoseconds hard);
#endif

}  // namespace basal
