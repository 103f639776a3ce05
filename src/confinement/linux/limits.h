// Resource limits the worker applies to itself, first thing, because its parent may not be able
// to: a root parent without CAP_SYS_RESOURCE (a container's default) cannot prlimit a process
// that already runs as another user, and the worker becomes one within microseconds of its exec.
// Lowering one's own limit needs no privilege. The parent checks the result from outside
// (/proc/PID/limits), as it checks the rest of the welcome.
//
//   StepStatus s = LimitAddressSpace(320ull << 20);   // RLIMIT_AS soft = hard = 320 MiB
//   if (!s.ok()) Fail("limits", s.reason());
#pragma once

#include <cstdint>

#include "confinement/linux/step_status.h"

namespace basal::confinement {

// setrlimit(RLIMIT_AS, {bytes, bytes}), then getrlimit must answer exactly that.
StepStatus LimitAddressSpace(uint64_t bytes);

}  // namespace basal::confinement
