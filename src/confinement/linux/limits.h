// Resource limits the worker applies to itself, first thing, because its parent may not be able
// to: a root parent without CAP_SYS_RESOURCE (a container's default) cannot prlimit a process
// that already runs as another user, and the worker becomes one within microseconds of its exec.
// Lowering one's own limit needs no privilege. The parent checks the result from outside
// (/proc/PID/limits), as it checks the rest of the welcome.
//
//   StepStatus s = LimitAddressSpace(320ull << 20);   // RLIMIT_AS soft = hard = 320 MiB
//   if (s.ok()) s = LimitCpuTime(2, 600);               // RLIMIT_CPU: SIGXCPU at 2 s, SIGKILL at 600 s
//   if (!s.ok()) Fail("limits", s.reason());
#pragma once

#include <cstdint>

#include "confinement/linux/step_status.h"

namespace basal::confinement {

// setrlimit(RLIMIT_AS, {bytes, bytes}), then getrlimit must answer exactly that.
StepStatus LimitAddressSpace(uint64_t bytes);
// setrlimit(RLIMIT_CPU, {soft_seconds, hard_seconds}), then getrlimit must answer exactly that.
StepStatus LimitCpuTime(uint64_t soft_seconds, uint64_t hard_seconds);

}  // namespace basal::confinement
