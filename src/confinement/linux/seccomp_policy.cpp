// THE seccomp allowlist of ck-basal-worker on x86_64. Reviewing the Linux sandbox means reading
// this file: the argument rules, named by their effect, then one row per admitted system call
// with its family and the sentence that admits it, then the calls that must never be admitted.
// docs/syscall-admission.md is rendered from this table by basal-policy-dump.
//
// What the filter does around the table (seccomp_filter.cpp): the architecture is checked first
// and anything but AUDIT_ARCH_X86_64 (the i386 int 0x80 entry) is killed; an x32 number (bit 30
// set) matches no row, since every row is below 0x40000000, and is killed by the default; the
// default, and every admitted call whose arguments match no alternative, is
// SECCOMP_RET_KILL_PROCESS.
#include "confinement/linux/seccomp_policy.h"

#include <linux/futex.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

namespace basal::confinement {
namespace {

// glibc passes an int argument zero-extended: mmap's fd -1 reaches the kernel as 0xffffffff
// (measured on Debian 12's glibc 2.36), and a negative clockid as 0x00000000fffffffe.
constexpr uint64_t kFdMinusOne = 0xffffffffULL;

// ---- Argument rules, named by effect --------------------------------------------------------

constexpr ArgRule kAnyArguments{"AnyArguments", "no argument is checked: the call has no argument that could reach "
                                                "beyond the worker", {}};
constexpr ArgRule kOnlyStdin{"OnlyFd(0)", "fd (arg 0) is 0, stdin", {{0, {0}}}};
constexpr ArgRule kOnlyStdoutOrStderr{"OnlyFd(1|2)", "fd (arg 0) is 1 or 2, stdout or stderr", {{0, {1, 2}}}};
constexpr ArgRule kOnlyStderr{"OnlyFd(2)", "fd (arg 0) is 2, stderr", {{0, {2}}}};
constexpr ArgRule kOneFdNoWait{"OneFdNoWait",
                               "nfds (arg 1) is 1 and timeout (arg 2) is 0: one descriptor, looked at without "
                               "waiting (the descriptor itself sits in the caller's memory, which seccomp cannot "
                               "read)",
                               {{1, {1}}, {2, {0}}}};
constexpr ArgRule kPrivateAnonymousOnly{
    "PrivateAnonymousOnly",
    "prot (arg 2) is PROT_NONE, PROT_READ or PROT_READ|PROT_WRITE; flags (arg 3) are exactly "
    "MAP_PRIVATE|MAP_ANONYMOUS, optionally |MAP_NORESERVE; fd (arg 4) is -1 as glibc passes it "
    "(0x00000000ffffffff)",
    {{2, {PROT_NONE, PROT_READ, PROT_READ | PROT_WRITE}},
     {3, {MAP_PRIVATE | MAP_ANONYMOUS, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE}},
     {4, {kFdMinusOne}}}};
constexpr ArgRule kProtWithoutExec{"ProtWithoutExec",
                                   "prot (arg 2) is PROT_NONE, PROT_READ or PROT_READ|PROT_WRITE",
                                   {{2, {PROT_NONE, PROT_READ, PROT_READ | PROT_WRITE}}}};
constexpr ArgRule kMayMoveWithoutFixed{"MayMoveWithoutFixed",
                                       "flags (arg 3) are 0 or MREMAP_MAYMOVE: never MREMAP_FIXED or MREMAP_DONTUNMAP",
                                       {{3, {0, MREMAP_MAYMOVE}}}};
constexpr ArgRule kFreeingAdviceOnly{"FreeingAdviceOnly", "advice (arg 2) is MADV_DONTNEED or MADV_FREE",
                                     {{2, {MADV_DONTNEED, MADV_FREE}}}};
constexpr ArgRule kOwnClocksOnly{
    "OwnClocksOnly",
    "clock (arg 0) is CLOCK_REALTIME, _MONOTONIC, _THREAD_CPUTIME_ID, _MONOTONIC_RAW, _REALTIME_COARSE, "
    "_MONOTONIC_COARSE or _BOOTTIME; a negative id (another process's or thread's CPU clock) is refused",
    {{0,
      {CLOCK_REALTIME, CLOCK_MONOTONIC, CLOCK_THREAD_CPUTIME_ID, CLOCK_MONOTONIC_RAW, CLOCK_REALTIME_COARSE,
       CLOCK_MONOTONIC_COARSE, CLOCK_BOOTTIME}}}};
constexpr ArgRule kSleepOnOwnClocks{"SleepOnOwnClocks",
                                    "clock (arg 0) is CLOCK_REALTIME, _MONOTONIC or _BOOTTIME; flags (arg 1) are 0 "
                                    "or TIMER_ABSTIME",
                                    {{0, {CLOCK_REALTIME, CLOCK_MONOTONIC, CLOCK_BOOTTIME}}, {1, {0, TIMER_ABSTIME}}}};
constexpr ArgRule kBlockingOrNonblocking{"BlockingOrNonblocking", "flags (arg 2) are 0 or GRND_NONBLOCK",
                                         {{2, {0, GRND_NONBLOCK}}}};
constexpr ArgRule kPrivateFutexOps{
    "PrivateFutexOps",
    "op (arg 1) is FUTEX_WAIT, _WAKE, _WAIT_BITSET or _WAKE_BITSET with FUTEX_PRIVATE_FLAG, or "
    "FUTEX_WAIT_BITSET_PRIVATE|FUTEX_CLOCK_REALTIME; no shared, requeue, PI or wake-op futex",
    {{1,
      {FUTEX_WAIT_PRIVATE, FUTEX_WAKE_PRIVATE, FUTEX_WAIT_BITSET_PRIVATE, FUTEX_WAKE_BITSET_PRIVATE,
       FUTEX_WAIT_BITSET_PRIVATE | FUTEX_CLOCK_REALTIME}}}};
constexpr ArgRule kSelfAbortOnly{"SelfAbortOnly",
                                 "tgid (arg 0) is the worker's pid and tid (arg 1) its one thread's, both baked into "
                                 "the filter at install; sig (arg 2) is SIGABRT",
                                 {{0, {kOwnPid}}, {1, {kOwnTid}}, {2, {SIGABRT}}}};

using F = SyscallFamily;

// ---- THE table ------------------------------------------------------------------------------

constexpr AdmittedSyscall kAdmitted[] = {
    // channel I/O: the descriptors the worker was started with, nothing it could open later.
    {__NR_read, "read", kOnlyStdin, F::kChannelIo,
     "The worker reads its parent's frames from stdin, the only descriptor it may read."},
    {__NR_poll, "poll", kOneFdNoWait, F::kChannelIo,
     "Before it blocks on stdin, the worker polls it for up to 50 us, so that an answer that comes at once does "
     "not wait for a halted CPU to wake (src/worker/wait_spin.h); one descriptor without a timeout never sleeps, "
     "and the worker holds no descriptor but its three pipes, whose readiness tells it nothing new."},
    {__NR_write, "write", kOnlyStdoutOrStderr, F::kChannelIo,
     "The worker writes frames to its parent on stdout and one-line failure reasons on stderr."},
    {__NR_writev, "writev", kOnlyStderr, F::kChannelIo,
     "glibc's fatal-error path (e.g. detected heap corruption) writes its message to stderr with writev before it "
     "aborts, so the parent sees the reason instead of a SIGSYS."},

    // memory: private, never executable, never shared.
    {__NR_brk, "brk", kAnyArguments, F::kMemory,
     "malloc grows and shrinks the main heap with brk, which only moves the end of the worker's private, "
     "non-executable data segment."},
    {__NR_mmap, "mmap", kPrivateAnonymousOnly, F::kMemory,
     "malloc maps large blocks and, when brk fails, its heap as private anonymous memory; no file, no shared "
     "mapping and no executable page can be mapped."},
    {__NR_munmap, "munmap", kAnyArguments, F::kMemory,
     "free returns large blocks; unmapping only takes memory away from the worker."},
    {__NR_mremap, "mremap", kMayMoveWithoutFixed, F::kMemory,
     "realloc resizes large blocks in place or by moving them; a remapping keeps the old protection and sharing, "
     "and without MREMAP_FIXED it cannot replace a mapping at an address of the caller's choosing."},
    {__NR_mprotect, "mprotect", kProtWithoutExec, F::kMemory,
     "malloc commits and decommits reserved heap memory; no protection with PROT_EXEC can be set, so no page "
     "becomes executable."},
    {__NR_madvise, "madvise", kFreeingAdviceOnly, F::kMemory,
     "free and malloc_trim hand unused heap pages back to the kernel; only the two advices that discard private "
     "pages are admitted."},

    // time: realtime, monotonic and own-thread CPU clocks; sleeping only delays the worker itself.
    {__NR_clock_gettime, "clock_gettime", kOwnClocksOnly, F::kTime,
     "The CPU budget reads the engine thread's CPU clock (CLOCK_THREAD_CPUTIME_ID, which the vDSO does not "
     "serve), and the vDSO falls back to the system call for the other clocks when the clocksource needs it."},
    {__NR_clock_getres, "clock_getres", kOwnClocksOnly, F::kTime,
     "The resolution of an admitted clock tells nothing beyond the clock itself."},
    {__NR_gettimeofday, "gettimeofday", kAnyArguments, F::kTime,
     "Date.now reads the realtime clock with gettimeofday (normally served by the vDSO); it writes only into the "
     "caller's memory."},
    {__NR_nanosleep, "nanosleep", kAnyArguments, F::kTime,
     "Sleeping only delays the worker, which the parent's wall-clock deadline bounds."},
    {__NR_sched_yield, "sched_yield", kAnyArguments, F::kTime,
     "While the worker polls stdin (src/worker/wait_spin.h) it yields between two looks, so that a task runnable "
     "on its CPU (the parent it just answered) runs first; it takes no argument and, like a sleep, only delays "
     "the worker."},
    {__NR_clock_nanosleep, "clock_nanosleep", kSleepOnOwnClocks, F::kTime,
     "glibc's nanosleep and sleep use clock_nanosleep on the realtime clock; sleeping on a CPU clock is refused."},

    // random
    {__NR_getrandom, "getrandom", kBlockingOrNonblocking, F::kRandom,
     "malloc's first call seeds its tcache key with getrandom(GRND_NONBLOCK), and the engine may seed its own "
     "generators from the kernel; random bytes reveal nothing about anything else."},

    // futex
    {__NR_futex, "futex", kPrivateFutexOps, F::kFutex,
     "glibc's locks and condition variables wait and wake on futexes in the worker's own memory; only the private "
     "wait and wake operations are admitted, none of the requeue or PI operations with a history of kernel bugs."},

    // signals: its own handlers and masks; the only signal it can send is SIGABRT to itself.
    {__NR_rt_sigaction, "rt_sigaction", kAnyArguments, F::kSignals,
     "abort() resets the SIGABRT handler and the worker may handle its own signals; a handler only runs in the "
     "worker, and a seccomp kill cannot be caught."},
    {__NR_rt_sigprocmask, "rt_sigprocmask", kAnyArguments, F::kSignals,
     "abort() and raise() block and unblock signals; the mask only affects the worker's own thread."},
    {__NR_rt_sigreturn, "rt_sigreturn", kAnyArguments, F::kSignals,
     "Returning from a signal handler restores the worker's own saved registers."},
    {__NR_sigaltstack, "sigaltstack", kAnyArguments, F::kSignals,
     "A handler may run on an alternate stack in the worker's own memory (e.g. to report a stack overflow)."},
    {__NR_restart_syscall, "restart_syscall", kAnyArguments, F::kSignals,
     "The kernel itself issues restart_syscall to resume a sleep or futex wait interrupted by a stop and continue; "
     "it can only resume the interrupted, already admitted call."},
    {__NR_getpid, "getpid", kAnyArguments, F::kSignals,
     "abort() names its own process to tgkill, and the welcome reports the worker's pid; the pid is no authority."},
    {__NR_gettid, "gettid", kAnyArguments, F::kSignals,
     "abort() names its own thread to tgkill; the tid is no authority."},
    {__NR_tgkill, "tgkill", kSelfAbortOnly, F::kSignals,
     "abort() ends the worker with SIGABRT sent to itself, so the parent sees an abort and not a SIGSYS; any other "
     "target or signal (above all a self-sent SIGSYS, which would fake a confinement death) is refused."},

    // exit
    {__NR_exit, "exit", kAnyArguments, F::kExit, "Ending the worker's thread ends the worker."},
    {__NR_exit_group, "exit_group", kAnyArguments, F::kExit,
     "The worker exits when the parent closes stdin or when the protocol breaks."},
};

// ---- Never admitted -------------------------------------------------------------------------

constexpr RefusedSyscall kNeverAllow[] = {
    {__NR_ptrace, "ptrace", "controls and reads other processes"},
    {__NR_process_vm_readv, "process_vm_readv", "reads another process's memory"},
    {__NR_process_vm_writev, "process_vm_writev", "writes another process's memory"},
    {__NR_kcmp, "kcmp", "compares other processes' kernel objects"},
    {__NR_pidfd_open, "pidfd_open", "takes a handle on another process"},
    {__NR_pidfd_getfd, "pidfd_getfd", "steals another process's descriptors"},
    {__NR_pidfd_send_signal, "pidfd_send_signal", "signals another process"},
    {__NR_kill, "kill", "signals any process, or fakes a death by SIGSYS"},
    {__NR_tkill, "tkill", "signals any thread"},
    {__NR_rt_sigqueueinfo, "rt_sigqueueinfo", "signals another process with forged siginfo"},
    {__NR_rt_tgsigqueueinfo, "rt_tgsigqueueinfo", "signals another thread with forged siginfo"},
    {__NR_bpf, "bpf", "loads kernel programs; a large kernel attack surface"},
    {__NR_perf_event_open, "perf_event_open", "observes the system; a large kernel attack surface"},
    {__NR_userfaultfd, "userfaultfd", "stalls kernel accesses, a classic exploit primitive"},
    {__NR_io_uring_setup, "io_uring_setup", "performs I/O that seccomp never sees"},
    {__NR_io_uring_enter, "io_uring_enter", "performs I/O that seccomp never sees"},
    {__NR_io_uring_register, "io_uring_register", "performs I/O that seccomp never sees"},
    {__NR_socket, "socket", "opens sockets of any family: UDP, netlink, Unix"},
    {__NR_socketpair, "socketpair", "creates a channel the parent does not see"},
    {__NR_connect, "connect", "reaches other endpoints"},
    {__NR_bind, "bind", "offers an endpoint"},
    {__NR_listen, "listen", "offers an endpoint"},
    {__NR_accept, "accept", "takes connections"},
    {__NR_accept4, "accept4", "takes connections"},
    {__NR_sendto, "sendto", "sends on a socket"},
    {__NR_sendmsg, "sendmsg", "sends on a socket, can pass descriptors"},
    {__NR_recvmsg, "recvmsg", "receives on a socket, can receive descriptors"},
    {__NR_execve, "execve", "runs another program"},
    {__NR_execveat, "execveat", "runs another program"},
    {__NR_fork, "fork", "starts a process"},
    {__NR_vfork, "vfork", "starts a process"},
    {__NR_clone, "clone", "starts a process or thread"},
    {__NR_clone3, "clone3", "starts a process or thread; its flags are behind a pointer seccomp cannot read"},
    {__NR_unshare, "unshare", "enters new namespaces"},
    {__NR_setns, "setns", "enters other namespaces"},
    {__NR_mount, "mount", "changes the filesystem tree"},
    {__NR_umount2, "umount2", "changes the filesystem tree"},
    {__NR_pivot_root, "pivot_root", "changes the filesystem root"},
    {__NR_chroot, "chroot", "changes the filesystem root"},
    {__NR_open_tree, "open_tree", "clones mounts"},
    {__NR_move_mount, "move_mount", "moves mounts"},
    {__NR_fsopen, "fsopen", "creates a filesystem context"},
    {__NR_keyctl, "keyctl", "reaches the kernel keyrings"},
    {__NR_add_key, "add_key", "reaches the kernel keyrings"},
    {__NR_request_key, "request_key", "reaches the kernel keyrings and upcalls"},
    {__NR_personality, "personality", "can turn READ_IMPLIES_EXEC on"},
    {__NR_prctl, "prctl", "changes dumpable, seccomp and other process attributes"},
    {__NR_arch_prctl, "arch_prctl", "changes per-thread CPU state"},
    {__NR_seccomp, "seccomp", "stacks filters, or a user-notification listener"},
    {__NR_landlock_create_ruleset, "landlock_create_ruleset", "creates Landlock descriptors"},
    {__NR_open, "open", "opens files"},
    {__NR_openat, "openat", "opens files"},
    {__NR_openat2, "openat2", "opens files"},
    {__NR_creat, "creat", "creates files"},
    {__NR_open_by_handle_at, "open_by_handle_at", "opens files by handle, bypassing paths"},
    {__NR_name_to_handle_at, "name_to_handle_at", "probes files"},
    {__NR_stat, "stat", "probes files that Landlock does not hide"},
    {__NR_lstat, "lstat", "probes files that Landlock does not hide"},
    {__NR_fstat, "fstat", "probes descriptors"},
    {__NR_newfstatat, "newfstatat", "probes files that Landlock does not hide"},
    {__NR_statx, "statx", "probes files that Landlock does not hide"},
    {__NR_access, "access", "probes files"},
    {__NR_faccessat, "faccessat", "probes files"},
    {__NR_faccessat2, "faccessat2", "probes files"},
    {__NR_readlink, "readlink", "reads links that Landlock does not hide"},
    {__NR_readlinkat, "readlinkat", "reads links that Landlock does not hide"},
    {__NR_getxattr, "getxattr", "reads attributes that Landlock does not hide"},
    {__NR_lgetxattr, "lgetxattr", "reads attributes that Landlock does not hide"},
    {__NR_fgetxattr, "fgetxattr", "reads attributes"},
    {__NR_listxattr, "listxattr", "lists attributes that Landlock does not hide"},
    {__NR_ioctl, "ioctl", "drives devices and terminals"},
    {__NR_memfd_create, "memfd_create", "creates shareable, mappable memory"},
    {__NR_memfd_secret, "memfd_secret", "creates special memory"},
    {__NR_shmget, "shmget", "creates shared memory"},
    {__NR_shmat, "shmat", "maps shared memory"},
    {__NR_pkey_mprotect, "pkey_mprotect", "changes protection, PROT_EXEC included"},
    {__NR_pkey_alloc, "pkey_alloc", "changes memory protection keys"},
    {__NR_process_madvise, "process_madvise", "advises another process's memory"},
    {__NR_mbind, "mbind", "changes NUMA policy"},
    {__NR_migrate_pages, "migrate_pages", "moves another process's pages"},
    {__NR_move_pages, "move_pages", "moves another process's pages"},
    {__NR_kexec_load, "kexec_load", "replaces the kernel"},
    {__NR_kexec_file_load, "kexec_file_load", "replaces the kernel"},
    {__NR_init_module, "init_module", "loads kernel code"},
    {__NR_finit_module, "finit_module", "loads kernel code"},
    {__NR_delete_module, "delete_module", "unloads kernel code"},
    {__NR_iopl, "iopl", "reaches I/O ports"},
    {__NR_ioperm, "ioperm", "reaches I/O ports"},
    {__NR_modify_ldt, "modify_ldt", "changes segment descriptors"},
    {__NR_setuid, "setuid", "changes credentials"},
    {__NR_setgid, "setgid", "changes credentials"},
    {__NR_capset, "capset", "changes capabilities"},
    {__NR_getppid, "getppid", "names the parent, a first step to signalling it"},
    {__NR_sched_setaffinity, "sched_setaffinity", "changes scheduling of any process"},
    {__NR_setpriority, "setpriority", "changes scheduling of any process"},
    {__NR_prlimit64, "prlimit64", "changes another process's limits"},
    {__NR_syslog, "syslog", "reads the kernel log"},
    {__NR_reboot, "reboot", "reboots"},
};

// ---- Proofs on the table, at compile time ---------------------------------------------------

constexpr bool IsNeverAllowed(int nr) {
  for (const RefusedSyscall& r : kNeverAllow) {
    if (r.nr == nr) return true;
  }
  return false;
}

constexpr bool TableIsSound() {
  for (size_t i = 0; i < std::size(kAdmitted); ++i) {
    const AdmittedSyscall& row = kAdmitted[i];
    if (row.reason.empty() || row.name.empty() || row.rule.name.empty() || row.rule.effect.empty()) return false;
    // x32 numbers (bit 30) must never match a row; see the file comment.
    if (row.nr < 0 || row.nr >= 0x40000000) return false;
    if (IsNeverAllowed(row.nr)) return false;
    for (size_t j = i + 1; j < std::size(kAdmitted); ++j) {
      if (kAdmitted[j].nr == row.nr) return false;
    }
    for (size_t a = 0; a < row.rule.count; ++a) {
      if (row.rule.args[a].index > 5 || row.rule.args[a].count == 0) return false;
    }
  }
  return true;
}
static_assert(TableIsSound(), "the allowlist has a row without a reason, a duplicate, or a never-allowed call");

}  // namespace

const char* SyscallFamilyName(SyscallFamily family) {
  switch (family) {
    case SyscallFamily::kChannelIo: return "channel I/O";
    case SyscallFamily::kMemory: return "memory";
    case SyscallFamily::kTime: return "time";
    case SyscallFamily::kRandom: return "random";
    case SyscallFamily::kFutex: return "futex";
    case SyscallFamily::kSignals: return "signals";
    case SyscallFamily::kExit: return "exit";
  }
  return "unknown";
}

std::span<const AdmittedSyscall> AdmittedSyscalls() { return kAdmitted; }
std::span<const RefusedSyscall> NeverAllowedSyscalls() { return kNeverAllow; }

const AdmittedSyscall* FindAdmitted(long nr) {
  for (const AdmittedSyscall& row : kAdmitted) {
    if (row.nr == nr) return &row;
  }
  return nullptr;
}

const char* SyscallName(long nr) {
  // The table's names are literals: string_view::data() of each is NUL-terminated.
  if (const AdmittedSyscall* row = FindAdmitted(nr)) return row->name.data();
  for (const RefusedSyscall& r : kNeverAllow) {
    if (r.nr == nr) return r.name.data();
  }
  static std::mutex mu;
  static std::map<long, std::string> names;  // node-based: c_str() stays valid
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = names.find(nr); it != names.end()) return it->second.c_str();
  std::string name = "unknown";
  constexpr long kX32Bit = 0x40000000;
  if (nr >= 0 && nr <= 0x7fffffff) {
    const bool x32 = (nr & kX32Bit) != 0;
    char* resolved = seccomp_syscall_resolve_num_arch(x32 ? SCMP_ARCH_X32 : SCMP_ARCH_X86_64, static_cast<int>(nr));
    if (resolved != nullptr) {
      name = x32 ? std::string("x32:") + resolved : std::string(resolved);
      std::free(resolved);
    }
  }
  return names.emplace(nr, std::move(name)).first->second.c_str();
}

}  // namespace basal::confinement
