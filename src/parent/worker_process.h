// One ck-basal-worker process: spawned with a fixed argv, an empty environment, only the three
// stdio pipes open (every other descriptor closed) and a pidfd. RAII: destroying it kills and
// reaps the process and closes every descriptor.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "basal/result.h"

namespace basal {

class WorkerProcess {
 public:
  struct Exit {
    bool signaled = false;
    int signal = 0;  // when signaled
    int code = 0;    // when exited
    std::string Describe() const;  // "killed by signal 31 (SIGSYS)" / "exited with status 70"
  };

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

const char* SignalName(int sig);

}  // namespace basal
