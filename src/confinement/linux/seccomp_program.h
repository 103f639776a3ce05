// The worker's seccomp program, compiled ahead of time. At build time basal-policy-dump has
// libseccomp compile the one table (seccomp_policy.cpp) with placeholders where the worker's pid
// and tid go, and writes the instructions out; the worker patches in its own pid and tid and
// loads the program with one seccomp(2) call. That is the program libseccomp would build at run
// time, instruction for instruction (a unit test compares them), without the 150-250 us that
// building and exporting it in every new worker cost (docs/performance.md).
//
//   std::vector<sock_filter> program;
//   std::string why;
//   if (!PatchProgram(WorkerSeccompProgram(), {getpid(), gettid()}, program, why)) Fail(...);
//   StepStatus s = LoadProgram(program);  // TSYNC; after this only the table's calls remain
#pragma once

#include <linux/filter.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "confinement/linux/seccomp_filter.h"
#include "confinement/linux/step_status.h"

namespace basal::confinement {

// Stand for the worker's pid and tid in the prebuilt program. Real ids are below pid_max
// (at most 2^22), so these never collide with one; basal-policy-dump refuses to emit a program in
// which they appear anywhere but in the pid and tid comparisons.
inline constexpr uint32_t kPidPlaceholder = 0x7b5a5a01;
inline constexpr uint32_t kTidPlaceholder = 0x7b5a5a02;

// The prebuilt program (placeholders in place). Defined in the generated worker_seccomp_program.cpp.
std::span<const sock_filter> WorkerSeccompProgram();

// Copies `prebuilt` into `out` with every comparison against a placeholder given the real pid or
// tid. Fails, naming why, if either placeholder is missing or a real id would collide with one.
bool PatchProgram(std::span<const sock_filter> prebuilt, const FilterContext& context, std::vector<sock_filter>& out,
                  std::string& why);

// Checks that the kernel has SECCOMP_RET_KILL_PROCESS, then loads `program` on every thread
// (SECCOMP_FILTER_FLAG_TSYNC). no_new_privs must be set.
StepStatus LoadProgram(const std::vector<sock_filter>& program);

// For basal-policy-dump: compiles the table with the placeholders and checks that they occur only
// where the pid and tid go, by compiling it a second time with other ids and comparing.
bool BuildPrebuiltProgram(std::vector<sock_filter>& out, std::string& why);

}  // namespace basal::confinement
