// The Windows worker's job and environment (the sandbox design, Windows), as data and pure
// functions: what the launcher sets on the job it creates for each worker, the check it makes of
// the job's actual limits before it resumes the worker (QueryInformationJobObject), and the
// environment block the worker is given. Unit-tested on Linux (tests/unit/windows_rules_test.cpp).
//
// The job: kill on close (dropping or killing a worker ends every thread of it), no breakaway
// (silent or not), an active-process limit of one, every UI restriction, death on an unhandled
// exception (so an access violation ends the process with its status, never a dialog), a
// per-process commit limit of the flow's heap budget plus its profile's headroom (commit, not
// address space as Linux's RLIMIT_AS), and a per-process CPU time limit (the backstop behind the
// parent's own measurement).
//
//   auto limits = JobLimitsFor(WorkerProfile::kFlow, heap_budget_bytes, cpu_hard_seconds);
//   ... SetInformationJobObject ...; if (auto why = CheckJobLimits(shown, *limits); !why.empty()) refuse;
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "basal/result.h"
#include "parent/platform/worker_launcher.h"

namespace basal {

// JOBOBJECT_BASIC_LIMIT_INFORMATION.LimitFlags bits (winnt.h), spelled here so the rule builds anywhere.
inline constexpr uint32_t kJobLimitProcessTime = 0x00000002;
inline constexpr uint32_t kJobLimitActiveProcess = 0x00000008;
inline constexpr uint32_t kJobLimitProcessMemory = 0x00000100;
inline constexpr uint32_t kJobLimitDieOnUnhandledException = 0x00000400;
inline constexpr uint32_t kJobLimitBreakawayOk = 0x00000800;
inline constexpr uint32_t kJobLimitSilentBreakawayOk = 0x00001000;
inline constexpr uint32_t kJobLimitKillOnJobClose = 0x00002000;
// JOBOBJECT_BASIC_UI_RESTRICTIONS: JOB_OBJECT_UILIMIT_HANDLES through _EXITWINDOWS, all eight.
inline constexpr uint32_t kJobUiLimitAll = 0x000000FF;

// Commit above the JavaScript heap budget: the engine's own allocations, the stacks it touches,
// the image's private pages. Separate per profile, like Linux's address-space headroom; not yet
// measured on Windows (docs/sandbox.md).
inline constexpr uint64_t kFlowCommitHeadroomBytes = uint64_t{256} << 20;
inline constexpr uint64_t kCodemodeCommitHeadroomBytes = uint64_t{128} << 20;

struct JobLimits {
  uint32_t limit_flags = 0;             // kJobLimit* bits
  uint64_t process_memory_bytes = 0;    // ProcessMemoryLimit (commit), with kJobLimitProcessMemory
  uint32_t active_process_limit = 0;    // with kJobLimitActiveProcess
  uint64_t process_time_100ns = 0;      // PerProcessUserTimeLimit, with kJobLimitProcessTime
  uint32_t ui_restrictions = 0;         // UIRestrictionsClass
};

// The job of one worker of `profile` whose heap budget is `heap_budget_bytes`, with a CPU time
// limit of `cpu_seconds` (0: none). Refuses a zero heap budget and sums that overflow.
Result<JobLimits> JobLimitsFor(WorkerProfile profile, uint64_t heap_budget_bytes, uint64_t cpu_seconds);

// Empty when the job's actual limits are exactly `wanted`, else the first difference, named.
std::string CheckJobLimits(const JobLimits& shown, const JobLimits& wanted);

// The worker's environment: SystemRoot alone ("SystemRoot=C:\Windows"). As a block for
// CreateProcessW with CREATE_UNICODE_ENVIRONMENT: each variable, NUL, and a final NUL.
std::wstring WorkerEnvironmentBlock(std::wstring_view system_root);
// The variables of a block, in order ("SystemRoot=C:\Windows").
std::vector<std::wstring> EnvironmentVariables(std::wstring_view block);
// Empty when the block holds exactly one variable, SystemRoot, with a non-empty value.
std::string CheckWorkerEnvironment(std::wstring_view block);

}  // namespace basal
