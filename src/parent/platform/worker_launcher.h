// The platform room: how a worker process is started, killed and waited for, and how it died.
// The Linux launcher (platform/linux/) spawns ck-basal-worker with a fixed argv (its parent's pid
// as `--parent-pid`, its RLIMIT_AS as `--address-space-limit BYTES` and RLIMIT_CPU as
// `--cpu-limit SOFT:HARD`, and `--uid N --gid N` when the parent runs as root), an empty
// environment, only the three stdio pipes open and a pidfd; macOS and Windows launchers will sit
// beside it behind the same WorkerLauncher. The worker applies the limits and the ids itself,
// first thing (a root parent without CAP_SYS_RESOURCE could not prlimit a worker that already
// changed its uid); the welcome check verifies them in /proc.
//
//   std::unique_ptr<WorkerLauncher> launcher = WorkerLauncher::ForThisPlatform();
//   auto proc = launcher->Launch({.path = worker_path, .limits = {.address_space_bytes = 320 << 20}});
//   ... (*proc)->stdin_fd() ...;  WorkerDeath death = (*proc)->KillAndReap();
//
// RAII: destroying a WorkerProcess kills and reaps it and closes every descriptor.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "basal/result.h"

namespace basal {

// How a worker process ended.
struct WorkerDeath {
  enum class Kind {
    kExited,           // exited by itself with `code`
    kSignalled,        // killed by `signal` (by us, or a crash)
    kConfinementKill,  // killed by the confinement for a forbidden operation (Linux: SIGSYS)
  };
  Kind kind = Kind::kExited;
  int code = 0;    // kExited
  int signal = 0;  // kSignalled, kConfinementKill
  std::string Describe() const;  // "killed by signal 31 (SIGSYS)" / "exited with status 70"
};

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

struct LaunchOptions {
  std::string path;                        // the ck-basal-worker binary
  std::vector<std::string> args;           // test-hooks switches only; empty in production
  WorkerLimits limits;                     // set by the worker on itself
  std::optional<WorkerCredentials> credentials;  // passed as --uid/--gid; set iff the parent is root
};

class WorkerProcess {
 public:
  using Exit = WorkerDeath;

  // Nonzero `limits` are passed as --address-space-limit and --cpu-limit (the worker sets them).
  static Result<std::unique_ptr<WorkerProcess>> Spawn(const std::string& path, const std::vector<std::string>& args,
                                                      const WorkerLimits& limits = {});
  ~WorkerProcess();
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  pid_t pid() const { return pid_; }
  int stdin_fd() const { return in_; }    // parent writes; non-blocking
  int stdout_fd() const { return out_; }  // parent reads; non-blocking
  int stderr_fd() const { return err_; }  // parent reads; non-blocking
  int pidfd() const { return pidfd_; }
  // The limits the worker was told to set: what its /proc/PID/limits must show.
  const WorkerLimits& limits() const { return limits_; }

  void CloseStdin();
  // SIGKILL through the pidfd (no pid-reuse race).
  void Kill();
  // Non-blocking: the exit status if the process has ended.
  std::optional<Exit> TryReap();
  // Waits up to `limit` for the process to end by itself.
  std::optional<Exit> WaitFor(std::chrono::milliseconds limit);
  // Kills if still running, then reaps.
  Exit KillAndReap();
  bool reaped() const { return exit_.has_value(); }

 private:
  WorkerProcess() = default;
  pid_t pid_ = -1;
  int in_ = -1, out_ = -1, err_ = -1, pidfd_ = -1;
  WorkerLimits limits_;
  std::optional<Exit> exit_;
};

class WorkerLauncher {
 public:
  virtual ~WorkerLauncher() = default;
  virtual Result<std::unique_ptr<WorkerProcess>> Launch(const LaunchOptions& options) = 0;
  static std::unique_ptr<WorkerLauncher> ForThisPlatform();
};

const char* SignalName(int sig);

}  // namespace basal
