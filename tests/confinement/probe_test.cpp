// The confinement probe suite: each forbidden system call, made by a flow through the test-hooks
// engine (__basal_test.syscall, standing for a subverted engine), must end a worker run by a real
// parent with SIGSYS, counted under worker_confinement. Each probe is harmless if it ever succeeds
// (bad descriptors, missing paths, invalid flags, signal 0 or a default-ignored signal) and has an
// unconfined control: the same flow on a worker started with --test-skip-seccomp
// --test-skip-landlock, driven over its pipes here (the parent rightly refuses such a worker),
// must survive the call and return the kernel's answer. So a probe whose number or arguments were
// wrong (a segfault, a call that never reaches the kernel) cannot pass as a confinement death.
#include <gtest/gtest.h>

#include <errno.h>
#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <set>
#include <optional>
#include <string>
#include <vector>

#include "integration/test_support.h"
#include "parent/platform/worker_launcher.h"
#include "parent/session.h"
#include "protocol/frame.h"
#include "protocol/messages.h"

namespace basal {
namespace {

using Json = nlohmann::json;
using std::chrono::milliseconds;

// ---- Writing a probe's JS --------------------------------------------------------------------

// "sys(257, -100, '/nonexistent', 0)": an expression calling the raw system call `nr`.
std::string Sys(long nr, std::initializer_list<std::string> args = {}) {
  std::string s = "sys(" + std::to_string(nr);
  for (const auto& a : args) s += ", " + a;
  return s + ")";
}
std::string N(long long v) { return std::to_string(v); }

// Integers the JS passes as they are; glibc passes an int -1 zero-extended (see seccomp_policy.cpp),
// so the private-anonymous fd is written the same way: only the argument under test differs.
constexpr long long kFdMinusOne = 0xffffffffLL;
constexpr long long kAtFdcwd = -100;
constexpr long long kBadFd = 9999;
// A buffer for the kernel to write into: a string argument is a NUL-terminated copy that the
// worker owns, so writing into it is harmless.
const std::string kBuf = "'................................................................'";
// A private anonymous read-write page, the way the allowlist admits it.
const std::string kMapPage = "const page = " +
                             Sys(SYS_mmap, {"0", "4096", N(PROT_READ | PROT_WRITE), N(MAP_PRIVATE | MAP_ANONYMOUS),
                                            N(kFdMinusOne), "0"}) +
                             "; if (page < 0) throw new Error('private mmap failed: ' + page); ";
const std::string kUnmapPage = Sys(SYS_munmap, {"page", "4096"}) + "; ";
// make_process_cpuclock(pid, CPUCLOCK_SCHED) as the kernel defines it: ((~pid) << 3) | 2.
constexpr long long ProcessCpuClock(int pid) { return (static_cast<long long>(~pid) * 8) | 2; }
static_assert(ProcessCpuClock(1) == -14);

// Runs `statements` as the body of the flow's default export; `input.ppid` is the parent's pid.
std::string Flow(const std::string& statements) {
  return "export default function (input) { const sys = __basal_test.syscall; " + statements + " }";
}
// A flow returning one call's result.
std::string Ret(const std::string& expr) { return Flow("return " + expr + ";"); }
// A flow whose call returns a descriptor, closed again when the control gets one.
std::string RetClosingFd(const std::string& expr) {
  return Flow("const fd = " + expr + "; if (fd >= 0) " + Sys(SYS_close, {"fd"}) + "; return fd;");
}
// A flow that makes a new process: in the control the child exits at once and the worker reaps it.
std::string RetReapingChild(const std::string& expr) {
  return Flow("const r = " + expr + "; if (r === 0) " + Sys(SYS_exit_group, {"0"}) + "; if (r > 0) " +
              Sys(SYS_wait4, {"r", "0", "0", "0"}) + "; return r;");
}

// ---- The table -----------------------------------------------------------------------------

// What the unconfined control must see: the worker survives and the flow returns the call's result.
struct Control {
  enum Kind { kEquals, kNonNegative, kAnyNumber, kNotRun } kind = kAnyNumber;
  long long value = 0;
  const char* why_not_run = "";
};
Control Equals(long long v) { return {Control::kEquals, v, ""}; }
Control NonNegative() { return {Control::kNonNegative, 0, ""}; }
Control AnyNumber() { return {Control::kAnyNumber, 0, ""}; }
Control NotRun(const char* why) { return {Control::kNotRun, 0, why}; }

struct Probe {
  std::string name;    // the test name
  std::string source;  // the flow
  Control control;
  // The i386 entry exists only where the kernel emulates it: the control decides.
  bool skip_if_control_crashes = false;
};

void PrintTo(const Probe& p, std::ostream* os) { *os << p.name; }

std::vector<Probe> KilledProbes() {
  const std::string nx = "'/nonexistent'";
  const std::string self_pid = Sys(SYS_getpid);
  const std::string self_tid = Sys(SYS_gettid);
  return {
      // files: no opens, stats, links or attributes of any kind
      {"openat", Ret(Sys(SYS_openat, {N(kAtFdcwd), nx, "0"})), Equals(-ENOENT)},
      {"open", Ret(Sys(SYS_open, {nx, "0"})), Equals(-ENOENT)},
      {"openat2", Ret(Sys(SYS_openat2, {N(kAtFdcwd), nx, kBuf, "0"})), Equals(-EINVAL)},
      {"creat", Ret(Sys(SYS_creat, {"'/nonexistent/basal-probe'", "384"})), Equals(-ENOENT)},
      {"stat", Ret(Sys(SYS_stat, {nx, kBuf})), Equals(-ENOENT)},
      {"newfstatat", Ret(Sys(SYS_newfstatat, {N(kAtFdcwd), nx, kBuf, "0"})), Equals(-ENOENT)},
      {"statx", Ret(Sys(SYS_statx, {N(kAtFdcwd), nx, "0", "0x7ff", kBuf})), Equals(-ENOENT)},
      {"fstat_stdin", Ret(Sys(SYS_fstat, {"0", "0"})), Equals(-EFAULT)},
      {"access", Ret(Sys(SYS_access, {nx, "0"})), Equals(-ENOENT)},
      {"readlink", Ret(Sys(SYS_readlink, {nx, kBuf, "8"})), Equals(-ENOENT)},
      {"readlinkat", Ret(Sys(SYS_readlinkat, {N(kAtFdcwd), nx, kBuf, "8"})), Equals(-ENOENT)},
      {"getxattr", Ret(Sys(SYS_getxattr, {nx, "'user.basal'", "0", "0"})), Equals(-ENOENT)},
      {"ioctl", Ret(Sys(SYS_ioctl, {N(kBadFd), "0x5401", "0"})), Equals(-EBADF)},
      {"chroot", Ret(Sys(SYS_chroot, {nx})), Equals(-ENOENT)},
      {"mount", Ret(Sys(SYS_mount, {nx, nx, "0", "0", "0"})), AnyNumber()},

      // channel I/O: only stdin for reading, only stdout/stderr for writing, all 64 bits checked
      {"write_fd_above_stdio", Ret(Sys(SYS_write, {N(kBadFd), "'x'", "1"})), Equals(-EBADF)},
      {"write_fd_3", Ret(Sys(SYS_write, {"3", "'x'", "1"})), Equals(-EBADF)},
      // 0x1'00000002: the kernel truncates the fd to 2 (stderr), the filter must not.
      {"write_upper_32_bits_garbage", Ret(Sys(SYS_write, {N(0x100000002LL), "'x\\n'", "2"})), Equals(2)},
      // 0x1'00000000 is stdin to the kernel; count 0 reads nothing.
      {"read_upper_32_bits_garbage", Ret(Sys(SYS_read, {N(0x100000000LL), kBuf, "0"})), Equals(0)},
      {"read_fd_above_stdio", Ret(Sys(SYS_read, {N(kBadFd), kBuf, "1"})), Equals(-EBADF)},
      {"writev_stdout", Ret(Sys(SYS_writev, {"1", "0", "0"})), Equals(0)},
      // poll only as the worker's wait uses it (one descriptor, no timeout), all 64 bits checked;
      // kBuf's descriptor (0x2e2e2e2e) is not open, so the kernel answers POLLNVAL at once.
      {"poll_with_timeout", Ret(Sys(SYS_poll, {kBuf, "1", "1"})), Equals(1)},
      {"poll_two_fds", Ret(Sys(SYS_poll, {kBuf, "2", "0"})), Equals(2)},
      // 0x1'00000001 is one descriptor to the kernel (nfds is an unsigned int there), not to the filter.
      {"poll_upper_32_bits_garbage", Ret(Sys(SYS_poll, {kBuf, N(0x100000001LL), "0"})), Equals(1)},
      {"ppoll", Ret(Sys(SYS_ppoll, {kBuf, "1", "0", "0", "8"})), Equals(1)},

      // sockets of every family
      {"socket_inet_udp", RetClosingFd(Sys(SYS_socket, {N(AF_INET), N(SOCK_DGRAM), "0"})), NonNegative()},
      {"socket_inet_tcp", RetClosingFd(Sys(SYS_socket, {N(AF_INET), N(SOCK_STREAM), "0"})), NonNegative()},
      {"socket_inet6", RetClosingFd(Sys(SYS_socket, {N(AF_INET6), N(SOCK_DGRAM), "0"})), AnyNumber()},
      {"socket_netlink", RetClosingFd(Sys(SYS_socket, {N(AF_NETLINK), N(SOCK_RAW), "0"})), NonNegative()},
      {"socket_unix", RetClosingFd(Sys(SYS_socket, {N(AF_UNIX), N(SOCK_STREAM), "0"})), NonNegative()},
      {"socket_unix_then_connect",
       Flow("const fd = " + Sys(SYS_socket, {N(AF_UNIX), N(SOCK_STREAM), "0"}) + "; const r = " +
            Sys(SYS_connect, {"fd", "0", "0"}) + "; " + Sys(SYS_close, {"fd"}) + "; return r;"),
       Equals(-EINVAL)},
      {"connect", Ret(Sys(SYS_connect, {N(kBadFd), kBuf, "16"})), Equals(-EBADF)},
      {"socketpair", Ret(Sys(SYS_socketpair, {N(AF_UNIX), N(SOCK_STREAM), "0", "0"})), Equals(-EFAULT)},
      {"bind", Ret(Sys(SYS_bind, {N(kBadFd), kBuf, "16"})), Equals(-EBADF)},
      {"sendto", Ret(Sys(SYS_sendto, {N(kBadFd), kBuf, "1", "0", "0", "0"})), Equals(-EBADF)},

      // processes and threads
      {"execve", Ret(Sys(SYS_execve, {nx, "0", "0"})), Equals(-ENOENT)},
      {"execveat", Ret(Sys(SYS_execveat, {N(kAtFdcwd), nx, "0", "0", "0"})), Equals(-ENOENT)},
      {"fork", RetReapingChild(Sys(SYS_fork)), NonNegative()},
      // vfork has no argument that could make it fail; an unconfined vfork through syscall() lets
      // the child return over the stack it shares with the suspended parent.
      {"vfork", Ret(Sys(SYS_vfork)),
       NotRun("an unconfined vfork through syscall() would let the child run over the parent's stack; "
              "SYS_vfork comes from <sys/syscall.h> and the death must still be SIGSYS, not SIGSEGV")},
      {"clone_process", RetReapingChild(Sys(SYS_clone, {N(SIGCHLD), "0", "0", "0", "0"})), NonNegative()},
      {"clone_vfork_without_vm", RetReapingChild(Sys(SYS_clone, {N(CLONE_VFORK | SIGCHLD), "0", "0", "0", "0"})),
       NonNegative()},
      // CLONE_THREAD without CLONE_SIGHAND is invalid: the unconfined kernel refuses it with EINVAL.
      {"clone_thread", Ret(Sys(SYS_clone, {N(CLONE_THREAD | CLONE_VM), "0", "0", "0", "0"})), Equals(-EINVAL)},
      {"clone3", Ret(Sys(SYS_clone3, {kBuf, "0"})), Equals(-EINVAL)},
      {"unshare", Ret(Sys(SYS_unshare, {"0"})), Equals(0)},
      {"setns", Ret(Sys(SYS_setns, {N(kBadFd), "0"})), Equals(-EBADF)},

      // memory: never executable, never shared
      {"mmap_prot_exec",
       Flow("const p = " +
            Sys(SYS_mmap, {"0", "4096", N(PROT_READ | PROT_EXEC), N(MAP_PRIVATE | MAP_ANONYMOUS), N(kFdMinusOne), "0"}) +
            "; if (p > 0) " + Sys(SYS_munmap, {"p", "4096"}) + "; return p > 0 ? 0 : p;"),
       Equals(0)},
      {"mmap_prot_rwx",
       Flow("const p = " +
            Sys(SYS_mmap, {"0", "4096", N(PROT_READ | PROT_WRITE | PROT_EXEC), N(MAP_PRIVATE | MAP_ANONYMOUS),
                           N(kFdMinusOne), "0"}) +
            "; if (p > 0) " + Sys(SYS_munmap, {"p", "4096"}) + "; return p > 0 ? 0 : p;"),
       Equals(0)},
      {"mmap_shared",
       Flow("const p = " +
            Sys(SYS_mmap, {"0", "4096", N(PROT_READ | PROT_WRITE), N(MAP_SHARED | MAP_ANONYMOUS), N(kFdMinusOne), "0"}) +
            "; if (p > 0) " + Sys(SYS_munmap, {"p", "4096"}) + "; return p > 0 ? 0 : p;"),
       Equals(0)},
      // MAP_SHARED_VALIDATE (0x3) contains MAP_PRIVATE's bit: flags are compared by value. The
      // kernel itself refuses it for anonymous memory (EINVAL), so it is harmless in the control.
      {"mmap_shared_validate",
       Flow("const p = " +
            Sys(SYS_mmap, {"0", "4096", N(PROT_READ | PROT_WRITE), N(MAP_SHARED_VALIDATE | MAP_ANONYMOUS),
                           N(kFdMinusOne), "0"}) +
            "; if (p > 0) " + Sys(SYS_munmap, {"p", "4096"}) + "; return p > 0 ? 0 : p;"),
       Equals(-EINVAL)},
      // A file mapping: stdin is a pipe, which cannot be mapped.
      {"mmap_descriptor", Ret(Sys(SYS_mmap, {"0", "4096", N(PROT_READ), N(MAP_PRIVATE), "0", "0"})), Equals(-ENODEV)},
      {"mprotect_to_exec",
       Flow(kMapPage + "const r = " + Sys(SYS_mprotect, {"page", "4096", N(PROT_READ | PROT_EXEC)}) + "; " +
            kUnmapPage + "return r;"),
       Equals(0)},
      {"mprotect_to_rwx",
       Flow(kMapPage + "const r = " + Sys(SYS_mprotect, {"page", "4096", N(PROT_READ | PROT_WRITE | PROT_EXEC)}) +
            "; " + kUnmapPage + "return r;"),
       Equals(0)},
      {"pkey_mprotect",
       Flow(kMapPage + "const r = " + Sys(SYS_pkey_mprotect, {"page", "4096", N(PROT_READ | PROT_EXEC), "-1"}) +
            "; " + kUnmapPage + "return r;"),
       Equals(0)},
      {"mremap_fixed", Ret(Sys(SYS_mremap, {"0", "4096", "4096", N(MREMAP_FIXED), "0"})), Equals(-EINVAL)},
      {"madvise_willneed", Ret(Sys(SYS_madvise, {"0", "4096", N(MADV_WILLNEED)})), AnyNumber()},
      {"memfd_create", RetClosingFd(Sys(SYS_memfd_create, {"'basal-probe'", "0"})), NonNegative()},
      {"shmget", Ret(Sys(SYS_shmget, {"0", "0", "0"})), Equals(-EINVAL)},

      // signals to anything but itself (and to itself only SIGABRT, so no death can be faked)
      {"kill_pid_1", Ret(Sys(SYS_kill, {"1", "0"})), Equals(0)},
      {"kill_parent", Ret(Sys(SYS_kill, {"input.ppid", N(SIGURG)})), Equals(0)},
      {"kill_self_other_signal", Ret(Sys(SYS_kill, {self_pid, N(SIGURG)})), Equals(0)},
      {"getppid", Ret(Sys(SYS_getppid)), NonNegative()},
      {"tgkill_other_thread", Ret(Sys(SYS_tgkill, {self_pid, "1", N(SIGURG)})), Equals(-ESRCH)},
      {"tgkill_parent", Ret(Sys(SYS_tgkill, {"input.ppid", "input.ppid", N(SIGURG)})), Equals(0)},
      {"tgkill_self_other_signal", Ret(Sys(SYS_tgkill, {self_pid, self_tid, N(SIGURG)})), Equals(0)},
      {"tkill_parent", Ret(Sys(SYS_tkill, {"input.ppid", N(SIGURG)})), Equals(0)},
      {"rt_sigqueueinfo_parent", Ret(Sys(SYS_rt_sigqueueinfo, {"input.ppid", N(SIGURG), "0"})), Equals(-EFAULT)},
      {"pidfd_open_parent", RetClosingFd(Sys(SYS_pidfd_open, {"input.ppid", "0"})), NonNegative()},
      {"pidfd_send_signal", Ret(Sys(SYS_pidfd_send_signal, {N(kBadFd), "0", "0", "0"})), Equals(-EBADF)},

      // other processes' memory and state
      {"ptrace", Ret(Sys(SYS_ptrace, {"2", "1", "0", "0"})), Equals(-ESRCH)},
      {"process_vm_readv", Ret(Sys(SYS_process_vm_readv, {"1", "0", "0", "0", "0", "0"})), Equals(0)},
      {"process_vm_writev", Ret(Sys(SYS_process_vm_writev, {"1", "0", "0", "0", "0", "0"})), Equals(0)},
      {"prlimit64_parent_get_only", Ret(Sys(SYS_prlimit64, {"input.ppid", "7", "0", "0"})), Equals(0)},
      {"clock_gettime_other_process_cpu_clock", Ret(Sys(SYS_clock_gettime, {N(ProcessCpuClock(1)), kBuf})),
       AnyNumber()},
      {"clock_gettime_parent_cpu_clock", Ret(Sys(SYS_clock_gettime, {"((~input.ppid) << 3) | 2", kBuf})), Equals(0)},
      {"clock_gettime_own_process_cpu_clock", Ret(Sys(SYS_clock_gettime, {N(CLOCK_PROCESS_CPUTIME_ID), kBuf})),
       Equals(0)},

      // kernel attack surface
      {"io_uring_setup", Ret(Sys(SYS_io_uring_setup, {"0", "0"})), AnyNumber()},
      {"userfaultfd", Ret(Sys(SYS_userfaultfd, {"0x7fffffff"})), AnyNumber()},
      {"bpf", Ret(Sys(SYS_bpf, {"9999", "0", "0"})), AnyNumber()},
      {"perf_event_open", Ret(Sys(SYS_perf_event_open, {"0", "0", "-1", "-1", "0"})), Equals(-EFAULT)},
      {"keyctl", Ret(Sys(SYS_keyctl, {"9999", "0", "0", "0", "0"})), AnyNumber()},
      {"seccomp_set_mode_filter", Ret(Sys(SYS_seccomp, {"1", "0", "0"})), Equals(-EFAULT)},
      {"landlock_create_ruleset", Ret(Sys(SYS_landlock_create_ruleset, {"0", "0", "1"})), NonNegative()},
      {"arch_prctl", Ret(Sys(SYS_arch_prctl, {"0x1003", "0"})), Equals(-EFAULT)},
      {"syslog", Ret(Sys(SYS_syslog, {"10", "0", "0"})), AnyNumber()},

      // process attributes
      {"personality_query", Ret(Sys(SYS_personality, {"0xffffffff"})), NonNegative()},
      {"prctl_set_dumpable", Ret(Sys(SYS_prctl, {N(PR_SET_DUMPABLE), "0", "0", "0", "0"})), Equals(0)},

      // futexes: private wait and wake only
      {"futex_shared_wake", Ret(Sys(SYS_futex, {kBuf, N(FUTEX_WAKE), "1", "0", "0", "0"})), Equals(0)},
      {"futex_private_requeue", Ret(Sys(SYS_futex, {kBuf, N(FUTEX_REQUEUE_PRIVATE), "0", "0", kBuf, "0"})),
       Equals(0)},

      // other entries and numbers
      {"int80_getpid", Flow("return __basal_test.int80(20);"), NonNegative(), /*skip_if_control_crashes=*/true},
      {"x32_getpid", Ret(Sys(0x40000000 | SYS_getpid)), AnyNumber()},
      {"unknown_number", Ret(Sys(1000)), Equals(-ENOSYS)},
  };
}

// Admitted calls: the flow completes and nothing is counted as a confinement death.
struct Allowed {
  std::string name;
  std::string source;
  long long expected;
};
void PrintTo(const Allowed& a, std::ostream* os) { *os << a.name; }

std::vector<Allowed> AllowedCalls() {
  return {
      {"write_stderr", Ret(Sys(SYS_write, {"2", "'basal probe: allowed write to stderr\\n'", "37"})), 37},
      {"private_anonymous_mmap_and_munmap", Flow(kMapPage + "return " + Sys(SYS_munmap, {"page", "4096"}) + ";"), 0},
      {"private_anonymous_mmap_noreserve",
       Flow("const p = " +
            Sys(SYS_mmap, {"0", "8192", N(PROT_READ | PROT_WRITE), N(MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE),
                           N(kFdMinusOne), "0"}) +
            "; return p > 0 ? " + Sys(SYS_munmap, {"p", "8192"}) + " : p;"),
       0},
      {"mprotect_read_only", Flow(kMapPage + "const r = " + Sys(SYS_mprotect, {"page", "4096", N(PROT_READ)}) +
                                     "; " + kUnmapPage + "return r;"),
       0},
      {"madvise_dontneed", Flow(kMapPage + "const r = " + Sys(SYS_madvise, {"page", "4096", N(MADV_DONTNEED)}) +
                                   "; " + kUnmapPage + "return r;"),
       0},
      {"clock_gettime_monotonic", Ret(Sys(SYS_clock_gettime, {N(CLOCK_MONOTONIC), kBuf})), 0},
      {"clock_gettime_thread_cpu", Ret(Sys(SYS_clock_gettime, {N(CLOCK_THREAD_CPUTIME_ID), kBuf})), 0},
      {"getrandom", Ret(Sys(SYS_getrandom, {kBuf, "8", "0"})), 8},
      {"poll_one_fd_no_wait", Ret(Sys(SYS_poll, {kBuf, "1", "0"})), 1},
      {"sched_yield", Ret(Sys(SYS_sched_yield)), 0},
      {"futex_private_wake", Ret(Sys(SYS_futex, {kBuf, N(FUTEX_WAKE_PRIVATE), "1", "0", "0", "0"})), 0},
      {"getpid_matches_gettid", Ret(Sys(SYS_getpid) + " === " + Sys(SYS_gettid) + " ? 0 : -1"), 0},
  };
}

// ---- The unconfined control: a worker driven over its pipes, no parent welcome check ---------

struct ControlRun {
  bool completed = false;  // the flow returned and the worker then exited cleanly on EOF
  Json result;
  std::string failure;     // when !completed: what happened
  std::optional<WorkerProcess::Exit> exit;
};

ControlRun RunUnconfined(const std::string& source, const Json& input) {
  ControlRun run;
  auto spawned = WorkerProcess::Spawn(BASAL_WORKER_PATH, {"--test-skip-seccomp", "--test-skip-landlock"});
  if (!spawned) {
    run.failure = "spawn: " + spawned.error().message;
    return run;
  }
  WorkerProcess& w = **spawned;
  protocol::Load load;
  load.flow = "probe.js";
  load.source = source;
  load.profile = "flow";
  load.cpu_ms = 5'000;
  load.heap_bytes = 64ll << 20;
  load.stack_bytes = 1ll << 20;
  std::string out;
  protocol::AppendFrame(out, protocol::BuildLoad(load));
  protocol::AppendFrame(out, protocol::BuildActivate(1, protocol::DumpJson(input)));
  // Two small frames: they fit in the pipe, so one write suffices.
  if (::write(w.stdin_fd(), out.data(), out.size()) != static_cast<ssize_t>(out.size())) {
    run.failure = "could not write load and activate frames";
    return run;
  }
  WorkerSession session(std::move(*spawned));
  bool welcomed = false, loaded = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (;;) {
    auto next = session.ReadMessage(deadline);
    if (!next) {
      // The worker died (or went silent): say how it ended.
      run.exit = w.WaitFor(milliseconds(2'000));
      if (!run.exit) run.exit = w.KillAndReap();
      run.failure = "worker " + run.exit->Describe() + " before the flow returned (" + next.error().message + ")";
      return run;
    }
    protocol::WorkerMessage& msg = *next;
    if (auto* welcome = std::get_if<protocol::Welcome>(&msg)) {
      welcomed = true;
      if (!welcome->test_hooks) {
        run.failure = "the control worker is not a test-hooks build";
        return run;
      }
    } else if (auto* l = std::get_if<protocol::Loaded>(&msg)) {
      loaded = l->ok;
      if (!l->ok) {
        run.failure = "flow did not load: " + l->error.message;
        return run;
      }
    } else if (auto* done = std::get_if<protocol::Done>(&msg)) {
      if (!welcomed || !loaded) {
        run.failure = "done before welcome and load";
        return run;
      }
      if (!done->ok) {
        run.failure = "flow threw: " + done->error.name + ": " + done->error.message;
        return run;
      }
      run.result = done->result;
      // The worker must still be alive and leave cleanly when the parent goes away.
      w.CloseStdin();
      run.exit = w.WaitFor(milliseconds(5'000));
      if (!run.exit) {
        run.failure = "worker did not exit on EOF";
      } else if (run.exit->kind != WorkerDeath::Kind::kExited || run.exit->code != 0) {
        run.failure = "worker " + run.exit->Describe() + " after the flow returned";
      } else {
        run.completed = true;
      }
      return run;
    } else {
      run.failure = "unexpected message (a host call?)";
      return run;
    }
  }
}

Json ProbeInput() { return Json{{"ppid", static_cast<int64_t>(::getpid())}}; }

// ---- The confined run: a real parent ----------------------------------------------------------

class ConfinedFixture : public testing::ModuleFixture {
 protected:
  static void SetUpTestSuite() {
    // Probes signal the parent (this process) with SIGURG: ignored here, so harmless if delivered.
    ::signal(SIGURG, SIG_IGN);
  }
  int64_t Counter(const char* key) { return module_->HealthReport()[key].get<int64_t>(); }

  void ExpectKilledBySeccomp(const std::string& source) {
    const int64_t before = Counter("worker_confinement");
    const FlowRef flow = Add(source, "{}", "probe.js");
    const ActivationResult r = module_->Run(flow, ProbeInput());
    EXPECT_EQ(r.outcome, Outcome::kWorkerConfinement) << OutcomeName(r.outcome) << ": " << r.message;
    EXPECT_NE(r.message.find("SIGSYS"), std::string::npos) << r.message;
    EXPECT_EQ(Counter("worker_confinement"), before + 1);
    EXPECT_EQ(Counter("refused_welcomes"), 0);
  }
};

class KilledBySeccomp : public ConfinedFixture, public ::testing::WithParamInterface<Probe> {};

TEST_P(KilledBySeccomp, UnconfinedControlSurvivesAndConfinedWorkerDiesBySigsys) {
  const Probe& probe = GetParam();
  if (probe.control.kind == Control::kNotRun) {
    std::cout << "[ control  ] " << probe.name << ": not run: " << probe.control.why_not_run << "\n";
    RecordProperty("control", std::string("not run: ") + probe.control.why_not_run);
  } else {
    const ControlRun c = RunUnconfined(probe.source, ProbeInput());
    if (!c.completed && probe.skip_if_control_crashes && c.exit && c.exit->kind == WorkerDeath::Kind::kSignalled) {
      GTEST_SKIP() << probe.name << ": the unconfined control " << c.exit->Describe()
                   << ", so this kernel has no usable entry to probe (no IA32 emulation)";
    }
    ASSERT_TRUE(c.completed) << "control (unconfined worker): " << c.failure
                             << "; a probe whose control fails proves nothing";
    ASSERT_TRUE(c.result.is_number_integer()) << "control returned " << c.result.dump();
    const long long v = c.result.get<long long>();
    std::cout << "[ control  ] " << probe.name << " returned " << v << "\n";
    RecordProperty("control", std::to_string(v));
    switch (probe.control.kind) {
      case Control::kEquals: ASSERT_EQ(v, probe.control.value) << "control result"; break;
      case Control::kNonNegative: ASSERT_GE(v, 0) << "control result"; break;
      case Control::kAnyNumber:
      case Control::kNotRun: break;
    }
  }
  Open();
  ExpectKilledBySeccomp(probe.source);
}

INSTANTIATE_TEST_SUITE_P(Probes, KilledBySeccomp, ::testing::ValuesIn(KilledProbes()),
                         [](const ::testing::TestParamInfo<Probe>& info) { return info.param.name; });

TEST(ProbeTable, HasAtLeastFortyProbesWithUniqueNames) {
  const auto probes = KilledProbes();
  EXPECT_GE(probes.size(), 40u);
  std::set<std::string> names;
  for (const auto& p : probes) EXPECT_TRUE(names.insert(p.name).second) << "duplicate probe " << p.name;
}

class AdmittedBySeccomp : public ConfinedFixture, public ::testing::WithParamInterface<Allowed> {};

TEST_P(AdmittedBySeccomp, ConfinedWorkerCompletesAndNothingIsCounted) {
  const Allowed& call = GetParam();
  Open();
  const FlowRef flow = Add(call.source, "{}", "allowed.js");
  const ActivationResult r = module_->Run(flow, ProbeInput());
  ASSERT_EQ(r.outcome, Outcome::kOk) << OutcomeName(r.outcome) << ": " << r.message;
  EXPECT_EQ(r.result, call.expected);
  EXPECT_EQ(Counter("worker_confinement"), 0);
}

INSTANTIATE_TEST_SUITE_P(Allowed, AdmittedBySeccomp, ::testing::ValuesIn(AllowedCalls()),
                         [](const ::testing::TestParamInfo<Allowed>& info) { return info.param.name; });

TEST_F(ConfinedFixture, AbortEndsTheWorkerWithSigabrtNotSigsys) {
  Open();
  const FlowRef flow = Add(Flow("__basal_test.abort(); return 0;"), "{}", "abort.js");
  const ActivationResult r = module_->Run(flow, ProbeInput());
  EXPECT_EQ(r.outcome, Outcome::kWorkerCrashed) << OutcomeName(r.outcome) << ": " << r.message;
  EXPECT_NE(r.message.find("SIGABRT"), std::string::npos) << r.message;
  const Json h = module_->HealthReport();
  EXPECT_EQ(h["worker_confinement"], 0);
  EXPECT_EQ(h["crashes"]["signal SIGABRT"], 1);
}

// The control harness itself must notice a death, or a broken probe could pass its control.
TEST(UnconfinedControl, ReportsAWorkerThatDies) {
  const ControlRun c = RunUnconfined(Flow("__basal_test.abort(); return 0;"), ProbeInput());
  EXPECT_FALSE(c.completed);
  ASSERT_TRUE(c.exit.has_value()) << c.failure;
  EXPECT_EQ(c.exit->kind, WorkerDeath::Kind::kSignalled);
  EXPECT_EQ(c.exit->signal, SIGABRT);
}

TEST(UnconfinedControl, ReturnsTheKernelsAnswer) {
  const ControlRun c = RunUnconfined(Ret(Sys(SYS_getpid)), ProbeInput());
  ASSERT_TRUE(c.completed) << c.failure;
  EXPECT_GT(c.result.get<long long>(), 0);
}

// ---- The parent refuses a worker whose welcome reports a weakened confinement ----------------

class RefusedWelcome : public ConfinedFixture, public ::testing::WithParamInterface<const char*> {};

TEST_P(RefusedWelcome, WorkerIsKilledBeforeItSeesFlowCode) {
  ModuleOptions o;
  o.worker_args = {GetParam()};
  Open(std::move(o));
  // Were the flow ever to run, its console.log would be journaled as a host call.
  const FlowRef flow = Add(Flow("console.log('basal probe marker: flow code ran'); return 1;"), "{}", "refused.js");
  const ActivationResult r = module_->Run(flow, ProbeInput());
  EXPECT_EQ(r.outcome, Outcome::kWorkerRefused) << OutcomeName(r.outcome) << ": " << r.message;
  const Json h = module_->HealthReport();
  EXPECT_GE(h["refused_welcomes"].get<int64_t>(), 1);
  EXPECT_EQ(h["worker_confinement"], 0);
  auto calls = Reader()->Calls(r.activation_id);
  ASSERT_TRUE(static_cast<bool>(calls)) << calls.error().message;
  EXPECT_TRUE(calls->empty()) << "the refused worker's flow code ran: " << calls->size() << " calls journaled";
}

INSTANTIATE_TEST_SUITE_P(TestSwitches, RefusedWelcome,
                         ::testing::Values("--test-skip-seccomp", "--test-skip-landlock", "--test-weaken-startup-checks"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string n = info.param + 7;  // drop "--test-"
                           for (char& ch : n) ch = ch == '-' ? '_' : ch;
                           return n;
                         });

}  // namespace
}  // namespace basal
