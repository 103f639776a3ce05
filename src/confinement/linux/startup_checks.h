// Startup checks: step 1 of the worker's confinement. The worker refuses to start unless its
// environment is the one the later layers assume: a genuine /proc describing this process, one
// thread (seccomp's TSYNC and the CPU budget assume it), stdio as anonymous pipes in the right
// directions, READ_IMPLIES_EXEC off, and no writable-and-executable mapping or executable stack.
// They must run before non-dumpable and Landlock, which make /proc/self unreadable.
//
//   StepStatus s = RunStartupChecks();
//   if (!s.ok()) Fail("startup checks", s.reason());   // e.g. "stdin is not a pipe (regular file)"
#pragma once

#include <string_view>

#include "confinement/linux/step_status.h"

namespace basal::confinement {

// All checks below in this order; the first failure names its reason.
StepStatus RunStartupChecks();

// statfs("/proc") has PROC_SUPER_MAGIC and /proc/self/stat names getpid().
StepStatus CheckProcIsGenuine();
// /proc/self/stat's thread count (field 20, what "Threads:" in /proc/self/status shows) is 1.
StepStatus CheckSingleThreaded();
// fd 0 the read end, fd 1 and 2 write ends of anonymous pipes (fstat: a FIFO; fstatfs: on pipefs,
// so not a named FIFO, whose path /proc/self/fd/N then names in the reason).
StepStatus CheckStdioAreAnonymousPipes();
// personality(0xffffffff) lacks READ_IMPLIES_EXEC.
StepStatus CheckReadImpliesExecOff();
// /proc/self/maps has no writable-and-executable mapping and a non-executable [stack].
StepStatus CheckMappings();

// The parsers behind the checks, exposed for unit tests on synthetic /proc text.
StepStatus CheckStatThreadsText(std::string_view proc_self_stat);
StepStatus CheckStatText(std::string_view proc_self_stat, long expected_pid);
StepStatus CheckMapsText(std::string_view proc_self_maps);

}  // namespace basal::confinement
