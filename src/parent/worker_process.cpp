#include "parent/worker_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace basal {
namespace {

int PidfdOpen(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }
int PidfdSendSignal(int pidfd, int sig) { return static_cast<int>(syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0)); }

void CloseFd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

std::string Errno(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

}  // namespace

const char* SignalName(int sig) {
  switch (sig) {
    case SIGSYS: return "SIGSYS";
    case SIGSEGV: return "SIGSEGV";
    case SIGABRT: return "SIGABRT";
    case SIGKILL: return "SIGKILL";
    case SIGBUS: return "SIGBUS";
    case SIGILL: return "SIGILL";
    case SIGFPE: return "SIGFPE";
    case SIGTERM: return "SIGTERM";
    case SIGPIPE: return "SIGPIPE";
    case SIGTRAP: return "SIGTRAP";
    case SIGXCPU: return "SIGXCPU";
    default: return "signal";
  }
}

std::string WorkerProcess::Exit::Describe() const {
  if (signaled) return "killed by signal " + std::to_string(signal) + " (" + SignalName(signal) + ")";
  return "exited with status " + std::to_string(code);
}

Result<std::unique_ptr<WorkerProcess>> WorkerProcess::Spawn(const std::string& path, const std::vector<std::string>& args) {
  if (::access(path.c_str(), X_OK) != 0)
    return MakeError(ErrorCode::kSpawn, "worker " + path + " is not an executable file (" + std::strerror(errno) +
                                            "); pass --worker PATH or install ck-basal-worker beside basal");
  int in[2], out[2], err[2];
  if (pipe2(in, O_CLOEXEC) != 0) return MakeError(ErrorCode::kSpawn, Errno("pipe2"));
  if (pipe2(out, O_CLOEXEC) != 0) {
    ::close(in[0]); ::close(in[1]);
    return MakeError(ErrorCode::kSpawn, Errno("pipe2"));
  }
  if (pipe2(err, O_CLOEXEC) != 0) {
    ::close(in[0]); ::close(in[1]); ::close(out[0]); ::close(out[1]);
    return MakeError(ErrorCode::kSpawn, Errno("pipe2"));
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(path.c_str()));
  // The worker sets its parent death signal, then exits 69 unless getppid() is still this pid.
  const std::string parent_pid = std::to_string(getpid());
  argv.push_back(const_cast<char*>("--parent-pid"));
  argv.push_back(const_cast<char*>(parent_pid.c_str()));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  char* envp[] = {nullptr};
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, path.c_str(), &fa, &attr, argv.data(), envp);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  if (rc != 0) {
    ::close(in[1]); ::close(out[0]); ::close(err[0]);
    return MakeError(ErrorCode::kSpawn, "posix_spawn " + path + ": " + std::strerror(rc));
  }
  std::unique_ptr<WorkerProcess> p(new WorkerProcess());
  p->pid_ = pid;
  p->in_ = in[1];
  p->out_ = out[0];
  p->err_ = err[0];
  p->pidfd_ = PidfdOpen(pid);
  for (int fd : {p->in_, p->out_, p->err_}) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  if (p->pidfd_ < 0) {
    const std::string why = Errno("pidfd_open");
    ::kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    p->exit_ = Exit{};
    return MakeError(ErrorCode::kUnsupported, why + " (basal needs Linux 5.3 or newer)");
  }
  return p;
}

WorkerProcess::~WorkerProcess() {
  if (pid_ > 0 && !exit_) KillAndReap();
  CloseFd(in_);
  CloseFd(out_);
  CloseFd(err_);
  CloseFd(pidfd_);
}

Result<void> WorkerProcess::SetAddressSpaceLimit(uint64_t bytes) {
  rlimit lim{bytes, bytes};
  if (prlimit(pid_, RLIMIT_AS, &lim, nullptr) != 0) return MakeError(ErrorCode::kSpawn, Errno("prlimit(RLIMIT_AS) on worker"));
  return Ok();
}

void WorkerProcess::CloseStdin() { CloseFd(in_); }

void WorkerProcess::Kill() {
  if (exit_ || pidfd_ < 0) return;
  PidfdSendSignal(pidfd_, SIGKILL);
}

std::optional<WorkerProcess::Exit> WorkerProcess::TryReap() {
  if (exit_) return exit_;
  siginfo_t info{};
  if (waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd_), &info, WEXITED | WNOHANG) != 0) return std::nullopt;
  if (info.si_pid == 0) return std::nullopt;
  Exit e;
  if (info.si_code == CLD_EXITED) {
    e.code = info.si_status;
  } else {
    e.signaled = true;
    e.signal = info.si_status;
  }
  exit_ = e;
  return exit_;
}

std::optional<WorkerProcess::Exit> WorkerProcess::WaitFor(std::chrono::milliseconds limit) {
  if (auto e = TryReap()) return e;
  pollfd p{pidfd_, POLLIN, 0};
  const int n = poll(&p, 1, static_cast<int>(limit.count()));
  if (n <= 0) return std::nullopt;
  return TryReap();
}

WorkerProcess::Exit WorkerProcess::KillAndReap() {
  if (exit_) return *exit_;
  Kill();
  for (;;) {
    if (auto e = WaitFor(std::chrono::milliseconds(1000))) return *e;
    Kill();
  }
}

}  // namespace basal
