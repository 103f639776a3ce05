// The platform seam's mechanism: how a worker process is started, killed, waited for and
// measured on this system. One WorkerLauncher per system: linux/linux_launcher.cpp (posix_spawn,
// pidfd), windows/windows_launcher.cpp (an LPAC token, a job and mitigations, the child checked
// while suspended; built by the mingw-w64 cross build). What a death means and which Welcome a
// system requires are pure rules beside it (platform.h, welcome_check.h).
//
// Linux: ck-basal-worker is spawned with a fixed argv (its parent's pid as `--parent-pid`, its
// RLIMIT_AS as `--address-space-limit BYTES` and RLIMIT_CPU as `--cpu-limit SOFT:HARD`, and
// `--uid N --gid N` when the parent runs as root), an empty environment, only the three stdio
// pipes open and a pidfd. The worker applies the limits and the ids itself, first thing (a root
// parent without CAP_SYS_RESOURCE could not prlimit a worker that already changed its uid); the
// welcome check verifies them in /proc.
//
//   std::unique_ptr<WorkerLauncher> launcher = WorkerLauncher::ForThisPlatform();
//   auto proc = launcher->Launch({.path = worker_path, .limits = {.address_space_bytes = 320 << 20}});
//   ... (*proc)->stdin_fd() ...;  WorkerDeath death = (*proc)->KillAndReap();
//   DeathVerdict v = launcher->ClassifyDeath(death, /*welcomed=*/true);
//
// RAII: destroying a WorkerProcess kills and reaps it and closes every descriptor (handle).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "basal/result.h"
#include "parent/platform/platform.h"
#include "parent/platform/process_cpu.h"

namespace basal {

// The unprivileged user and group a root parent's workers become (posix_spawn cannot change
// ids, so the worker does it itself, first thing: --uid/--gid, docs/sandbox.md).
struct WorkerCredentials {
  uint32_t uid = 0;  // never 0
  uint32_t gid = 0;  // never 0
  std::string user;  // the name it was resolved from, for messages and `basal doctor`
};

// The user a root parent picks when none is named: a dedicated one if the system has it, else
// "nobody".
inline constexpr const char* kDedicatedWorkerUser = "basal-worker";

// Resource limits a worker sets on itself before anything else (--address-space-limit,
// --cpu-limit). 0: none.
struct WorkerLimits {
  uint64_t address_space_bytes = 0;  // RLIMIT_AS, soft = hard
  uint64_t cpu_soft_seconds = 0;     // RLIMIT_CPU: SIGXCPU past it (>= 1 when hard is set)
  uint64_t cpu_hard_seconds = 0;     // RLIMIT_CPU: SIGKILL past it
};

// Whether this process may change a worker's limits from outside (prlimit) once the worker runs
// as `credentials`: always if it keeps this process's ids, else only with CAP_SYS_RESOURCE.
bool CanChangeWorkerLimits(const std::optional<WorkerCredentials>& credentials);

// Which credentials workers get. Not root (geteuid() != 0): none (workers keep the parent's ids,
// which hold no privilege), and naming a user is an error. Root: `user` (empty: basal-worker if
// it exists, else nobody) from the user database, refused if it is missing or has uid or gid 0.
Result<std::optional<WorkerCredentials>> ResolveWorkerUser(const std::string& user);

// The worker's profile: Windows gives each its own commit limit (windows/job_limits.h).
enum class WorkerProfile { kFlow, kCodemode };

struct LaunchOptions {
  std::string path;                        // the ck-basal-worker binary
  std::vector<std::string> args;           // test-hooks switches only; empty in production
  WorkerLimits limits;                     // Linux: set by the worker on itself
  std::optional<WorkerCredentials> credentials;  // passed as --uid/--gid; set iff the parent is root
  // Windows: the job's commit limit is this heap budget plus the profile's headroom.
  WorkerProfile profile = WorkerProfile::kFlow;
  uint64_t heap_budget_bytes = 0;
  // Started ahead of its script (a codemode spare): the Linux worker makes its engine while it
  // waits (--started-ahead). The Windows worker makes it at load either way.
  bool started_ahead = false;
};

class WorkerProcess {
 public:
  using Exit = WorkerDeath;

#if !defined(_WIN32)
  // Linux: nonzero `limits` are passed as --address-space-limit and --cpu-limit (the worker sets them).
  static Result<std::unique_ptr<WorkerProcess>> Spawn(const std::string& path, const std::vector<std::string>& args,
                                                      const WorkerLimits& limits = {});
#endif
  ~WorkerProcess();
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  pid_t pid() const { return pid_; }
#if defined(_WIN32)
  void* stdin_handle() const { return in_; }    // HANDLE: parent writes
  void* stdout_handle() const { return out_; }  // HANDLE: parent reads
  void* stderr_handle() const { return err_; }  // HANDLE: parent reads
  void* process_handle() const { return process_; }
  void* job_handle() const { return job_; }     // kill-on-close: closing it ends the worker
#else
  int stdin_fd() const { return in_; }    // parent writes; non-blocking
  int stdout_fd() const { return out_; }  // parent reads; non-blocking
  int stderr_fd() const { return err_; }  // parent reads; non-blocking
  int pidfd() const { return pidfd_; }
#endif
  // The limits the worker was told to set: what its /proc/PID/limits must show.
  const WorkerLimits& limits() const { return limits_; }

  void CloseStdin();
  // Linux: SIGKILL through the pidfd (no pid-reuse race). Windows: TerminateJobObject with
  // kWindowsParentKillExitCode (every thread of the process ends).
  void Kill();
  // Non-blocking: the exit status if the process has ended.
  std::optional<Exit> TryReap();
  // Waits up to `limit` for the process to end by itself.
  std::optional<Exit> WaitFor(std::chrono::milliseconds limit);
  // Kills if still running, then reaps.
  Exit KillAndReap();
  bool reaped() const { return exit_.has_value(); }

 private:
  friend class WindowsLauncher;
  WorkerProcess() = default;
  pid_t pid_ = -1;
#if defined(_WIN32)
  void* in_ = nullptr;
  void* out_ = nullptr;
  void* err_ = nullptr;
  void* process_ = nullptr;
  void* job_ = nullptr;
#else
  int in_ = -1, out_ = -1, err_ = -1, pidfd_ = -1;
#endif
  WorkerLimits limits_;
  std::optional<Exit> exit_;
};

// The seam: everything the parent does to a worker that differs per system.
class WorkerLauncher {
 public:
  virtual ~WorkerLauncher() = default;
  // The system it launches on: the Welcome rule and the death rule follow it.
  virtual WorkerOs os() const = 0;
  // Starts one confined worker. Linux: the worker confines itself before its first read and the
  // welcome check reads /proc. Windows: the child is created suspended, in its job, under the LPAC
  // token; its tokens, job and membership are checked before it runs a single instruction, and a
  // failed check ends it and returns the named reason.
  virtual Result<std::unique_ptr<WorkerProcess>> Launch(const LaunchOptions& options) = 0;
  // The worker's CPU time as the system counts it (the worker cannot forge it); nullopt if it
  // cannot be read.
  virtual std::optional<ProcessCpuClock> CpuClock(const WorkerProcess& process) const = 0;
  // Moves a running worker's CPU backstop: `soft` for the activation at hand, `hard` for its life
  // (Linux: RLIMIT_CPU's SIGXCPU and SIGKILL; Windows: the job's per-process time limit, at `soft`).
  virtual Result<void> LimitCpu(const WorkerProcess& process, std::chrono::nanoseconds soft,
                                std::chrono::nanoseconds hard) const = 0;
  // What a death means and which health counter it feeds: this system's rule (platform.h).
  DeathVerdict ClassifyDeath(const WorkerDeath& death, bool welcomed) const {
    return basal::ClassifyDeath(os(), death, welcomed);
  }
  static std::unique_ptr<WorkerLauncher> ForThisPlatform();
};

}  // namespace basal
