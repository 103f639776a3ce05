// The platform seam's vocabulary: which operating system a worker runs on, how a worker's death
// is read there, and which health counter it feeds. Pure data and pure functions, built into the
// parent on every system and into the Windows cross build, so every system's rules are unit-tested
// on Linux (tests/unit/platform_death_test.cpp). The mechanism (launch, kill, clocks, limits) is
// WorkerLauncher in worker_launcher.h, one implementation per system: linux/, windows/ (macOS:
// docs/sandbox.md says what is built).
//
//   DeathVerdict v = ClassifyDeath(WorkerOs::kWindows, death, /*welcomed=*/true);
//   if (v.kind == DeathKind::kFatalStatus) ++health.fatal_status_deaths;
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace basal {

enum class WorkerOs { kLinux, kMacos, kWindows };

// The welcome's "os" value for each system: "linux", "macos", "windows".
const char* WorkerOsName(WorkerOs os);
std::optional<WorkerOs> WorkerOsFromName(std::string_view name);

// The system this parent was built for.
#if defined(_WIN32)
inline constexpr WorkerOs kThisWorkerOs = WorkerOs::kWindows;
#elif defined(__APPLE__)
inline constexpr WorkerOs kThisWorkerOs = WorkerOs::kMacos;
#else
inline constexpr WorkerOs kThisWorkerOs = WorkerOs::kLinux;
#endif

// The worker's refusal: it could not confine itself (or, on Windows, the launcher could not) and
// will not run weaker. Only a refusal before the welcome; after it, a crash.
inline constexpr int kExitConfinementRefused = 70;

// Signal numbers as each system numbers them: a death is read with the numbers of the system it
// happened on, not those of the machine that runs the rule.
inline constexpr int kLinuxSigsys = 31;
inline constexpr int kLinuxSigxcpu = 24;
inline constexpr int kMacosSigxcpu = 24;

// Windows exit statuses the rules name. A worker that dies of an unhandled exception exits with
// the exception's status (the job sets JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION).
inline constexpr uint32_t kWindowsStatusInvalidHandle = 0xC0000008;    // strict-handle misuse
inline constexpr uint32_t kWindowsStatusAccessViolation = 0xC0000005;
// The job's per-process CPU time limit (JOB_OBJECT_LIMIT_PROCESS_TIME) ends a process with
// ERROR_NOT_ENOUGH_QUOTA.
inline constexpr uint32_t kWindowsCpuLimitExitCode = 1816;
// The status the parent gives TerminateJobObject when it kills a worker on purpose ("KILL").
inline constexpr uint32_t kWindowsParentKillExitCode = 0x4B494C4C;

// How a worker process ended, as the system reported it.
struct WorkerDeath {
  enum class Kind {
    kExited,     // exited by itself with `code` (Windows: the 32-bit exit status, as an int)
    kSignalled,  // killed by `signal` (Linux, macOS: by the parent, the kernel, or a crash)
  };
  Kind kind = Kind::kExited;
  int code = 0;    // kExited
  int signal = 0;  // kSignalled
  // Linux: "killed by signal 31 (SIGSYS)" / "exited with status 70".
  std::string Describe() const;
};

// What a death means to the parent, and the health counter it feeds.
enum class DeathKind {
  kConfinementKill,  // Linux: SIGSYS, the seccomp filter stopped a call. health: worker_confinement
  kFatalStatus,      // Windows: 0xc0000008 (invalid handle), 0xc0000005 (access violation). health: fatal_status_deaths
  kRefusal,          // exit 70 before the welcome: no confinement, no weaker run. health: confinement_refusals
  kCpuLimit,         // the system's CPU backstop (RLIMIT_CPU's SIGXCPU; the job's time limit). health: cpu_kills
  kParentKill,       // the parent ended it on purpose (Windows: its kill status). Counted by whoever killed it
  kCrash,            // anything else. health: crashes[crash_key]
};

struct DeathVerdict {
  DeathKind kind = DeathKind::kCrash;
  std::string description;  // for messages: "exited with status 0xc0000005 (STATUS_ACCESS_VIOLATION)"
  std::string crash_key;    // kCrash: "exit 1", "signal SIGSEGV", "status 0xc0000409"
};

// `welcomed`: whether the worker had sent its welcome (exit 70 is a refusal only before it).
DeathVerdict ClassifyDeath(WorkerOs os, const WorkerDeath& death, bool welcomed);
// One system's rule each (linux/death.cpp, macos/death.cpp, windows/death.cpp).
DeathVerdict ClassifyLinuxDeath(const WorkerDeath& death, bool welcomed);
DeathVerdict ClassifyMacosDeath(const WorkerDeath& death, bool welcomed);
DeathVerdict ClassifyWindowsDeath(uint32_t exit_status, bool welcomed);

// "SIGSYS", "SIGSEGV", ... for Linux's numbers; "signal" for one it does not name.
const char* LinuxSignalName(int sig);
// Windows: "0xc0000005 (STATUS_ACCESS_VIOLATION)", "70", "0x4b494c4c (killed by the parent)".
std::string DescribeWindowsStatus(uint32_t exit_status);

}  // namespace basal
