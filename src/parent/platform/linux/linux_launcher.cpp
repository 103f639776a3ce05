#include "parent/platform/worker_launcher.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <pwd.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
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

Result<std::unique_ptr<WorkerProcess>> WorkerProcess::Spawn(const std::string& path, const std::vector<std::string>& args,
                                                            const WorkerLimits& limits) {
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
  const std::string parent_pid = std::to_string(getpid());
  const std::string address_space = std::to_string(limits.address_space_bytes);
  const std::string cpu = std::to_string(limits.cpu_soft_seconds) + ":" + std::to_string(limits.cpu_hard_seconds);
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
  argv.push_back(const_cast<char*>("--parent-pid"));
  argv.push_back(const_cast<char*>(parent_pid.c_str()));
  if (limits.address_space_bytes > 0) {
    argv.push_back(const_cast<char*>("--address-space-limit"));
    argv.push_back(const_cast<char*>(address_space.c_str()));
  }
  if (limits.cpu_hard_seconds > 0) {
    argv.push_back(const_cast<char*>("--cpu-limit"));
    argv.push_back(const_cast<char*>(cpu.c_str()));
  }
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
  p->limits_ = limits;
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
    e.kind = Exit::Kind::kSignalled;  // SIGSYS included: ClassifyLinuxDeath reads it
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

namespace {

class LinuxLauncher final : public WorkerLauncher {
 public:
  WorkerOs os() const override { return WorkerOs::kLinux; }

  Result<std::unique_ptr<WorkerProcess>> Launch(const LaunchOptions& options) override {
    std::vector<std::string> args;
    if (options.credentials) {
      args = {"--uid", std::to_string(options.credentials->uid), "--gid", std::to_string(options.credentials->gid)};
    }
    args.insert(args.end(), options.args.begin(), options.args.end());
    if (options.started_ahead) args.emplace_back("--started-ahead");
    return WorkerProcess::Spawn(options.path, args, options.limits);
  }

  std::optional<ProcessCpuClock> CpuClock(const WorkerProcess& process) const override {
    if (process.reaped()) return std::nullopt;  // its pid may name another process now
    return ProcessCpuClock::For(process.pid());
  }

  Result<void> LimitCpu(const WorkerProcess& process, std::chrono::nanoseconds soft,
                        std::chrono::nanoseconds hard) const override {
    if (process.reaped()) return Ok();
    return SetCpuLimit(process.pid(), soft, hard);
  }
};

// getpwnam_r: nullopt if there is no such user; an error if the lookup itself failed.
Result<std::optional<passwd>> LookUpUser(const std::string& name, std::vector<char>& buffer) {
  passwd entry{};
  passwd* found = nullptr;
  buffer.resize(16384);
  for (;;) {
    const int rc = getpwnam_r(name.c_str(), &entry, buffer.data(), buffer.size(), &found);
    if (rc == ERANGE && buffer.size() < (1u << 20)) {
      buffer.resize(buffer.size() * 2);
      continue;
    }
    if (rc != 0) return MakeError(ErrorCode::kIo, "looking up user \"" + name + "\": " + std::strerror(rc));
    if (!found) return std::optional<passwd>();
    return std::optional<passwd>(entry);
  }
}

}  // namespace

bool CanChangeWorkerLimits(const std::optional<WorkerCredentials>& credentials) {
  if (!credentials) return true;  // the worker keeps this process's ids: prlimit needs nothing
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (syscall(SYS_capget, &header, data) != 0) return false;
  return (data[CAP_SYS_RESOURCE / 32].effective & (1u << (CAP_SYS_RESOURCE % 32))) != 0;
}

Result<std::optional<WorkerCredentials>> ResolveWorkerUser(const std::string& user) {
  const uid_t euid = geteuid();
  if (euid != 0) {
    if (user.empty()) return std::optional<WorkerCredentials>();
    return MakeError(ErrorCode::kInvalidArgument,
                     "worker user \"" + user + "\": basal runs as uid " + std::to_string(euid) +
                         ", not root, so its workers run as uid " + std::to_string(euid) +
                         " without privilege and cannot change user; drop the worker user setting");
  }
  std::vector<char> buffer;
  std::optional<passwd> entry;
  std::string name = user;
  if (name.empty()) {
    for (const char* candidate : {kDedicatedWorkerUser, "nobody"}) {
      auto found = LookUpUser(candidate, buffer);
      if (!found) return found.error();
      if (*found) {
        entry = **found;
        name = candidate;
        break;
      }
    }
    if (!entry)
      return MakeError(ErrorCode::kUnsupported,
                       std::string("basal runs as root and drops its workers' privileges, but this system has neither "
                                   "a user ") +
                           kDedicatedWorkerUser +
                           " nor nobody: create one (useradd --system --no-create-home --shell /usr/sbin/nologin " +
                           kDedicatedWorkerUser + ") or name another with --worker-user");
  } else {
    auto found = LookUpUser(name, buffer);
    if (!found) return found.error();
    if (!*found)
      return MakeError(ErrorCode::kInvalidArgument, "worker user \"" + name + "\" does not exist on this system (getpwnam)");
    entry = **found;
  }
  if (entry->pw_uid == 0 || entry->pw_gid == 0)
    return MakeError(ErrorCode::kInvalidArgument,
                     "worker user \"" + name + "\" has uid " + std::to_string(entry->pw_uid) + " and group " +
                         std::to_string(entry->pw_gid) +
                         ": workers never run as root or in group 0; name an unprivileged user");
  return std::optional<WorkerCredentials>(WorkerCredentials{entry->pw_uid, entry->pw_gid, name});
}

std::unique_ptr<WorkerLauncher> WorkerLauncher::ForThisPlatform() { return std::make_unique<LinuxLauncher>(); }

}  // namespace basal
