// The platform room: how a worker process is started, killed and waited for, and how it died.
// The Linux launcher (platform/linux/) spawns ck-basal-worker with a fixed argv (its parent's pid
// as `--parent-pid`), an empty environment, only the three stdio pipes open and a pidfd; macOS
// and Windows launchers will sit beside it behind the same WorkerLauncher.
//
//   std::unique_ptr<WorkerLauncher> launcher = WorkerLauncher::ForThisPlatform();
//   auto proc = launcher->Launch({.path = worker_path, .address_space_limit_bytes = 320 << 20});
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

struct LaunchOptions {
  std::string path;                        // the ck-basal-worker binary
  std::vector<std::string> args;           // test-hooks switches only; empty in production
  uint64_t address_space_limit_bytes = 0;  // 0: none
};

class WorkerProcess {
 public:
  using Exit = WorkerDeath;

  static Result<std::unique_ptr<WorkerProcess>> Spawn(const std::string& path, const std::vector<std::string>& args);
  ~WorkerProcess();
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  pid_t pid() const { return pid_; }
  int stdin_fd() const { return in_; }    // parent writes; non-blocking
  int stdout_fd() const { return out_; }  // parent reads; non-blocking
  int stderr_fd() const { return err_; }  // parent reads; non-blocking
  int pidfd() const { return pidfd_; }

  Result<void> SetAddressSpaceLimit(uint64_t bytes);
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
