// ConfineWorker in a forked child of the test process: the report it gives, that the allowed
// side keeps working, how each forbidden call ends the child (one probe per line, each expecting
// a specific death), that abort() still ends it with SIGABRT, and the named exit-70 refusals.
#include "confinement/linux/confine.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <grp.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "child_process.h"
#include "confinement/linux/descriptors.h"
#include "confinement/linux/limits.h"
#include "confinement/linux/seccomp_program.h"

namespace basal::confinement {
namespace {

// What the worker passes: the build's prebuilt seccomp program and its parent's pid. Called in
// the forked child, so getppid() is the test process.
ConfineOptions WorkerOptions() {
  ConfineOptions o;
  o.seccomp_program = WorkerSeccompProgram();
  o.parent_pid = getppid();
  return o;
}

using testing::ChildResult;
using testing::ChildSetup;
using testing::RawWrite;
using testing::RunChild;
using testing::StdinKind;

constexpr char kReached[] = "confined\n";
constexpr char kSurvived[] = "survived\n";

// Confines, says so on stdout, runs the probe, says it survived, exits 0.
ChildResult RunConfined(void (*probe)()) {
  return RunChild({}, [probe] {
    ConfineWorker(WorkerOptions());
    RawWrite(STDOUT_FILENO, kReached);
    probe();
    RawWrite(STDOUT_FILENO, kSurvived);
    _exit(0);
  });
}

long Int80(long nr) {
  long ret;
  asm volatile("int $0x80" : "=a"(ret) : "a"(nr) : "memory", "r8", "r9", "r10", "r11");
  return ret;
}

class ConfineWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (testing::SanitizedBuild()) {
      GTEST_SKIP() << "the sanitizer runtimes make calls the filter rightly kills (BASAL_SANITIZE)";
    }
  }
};

// What DropCredentials reports for a process that keeps its ids (no run_as): the test process's
// uid, gid and groups, every set empty, and the bounding set emptied only by a root process.
std::string ExpectedPrivileges() {
  return "{\"uid\":" + std::to_string(getuid()) + ",\"gid\":" + std::to_string(getgid()) +
         ",\"supplementary_groups\":" + std::to_string(getgroups(0, nullptr)) +
         ",\"capabilities_empty\":true,\"ambient_empty\":true,\"bounding_set_empty\":" +
         (geteuid() == 0 ? "true" : "false") + "}";
}

std::string ExpectedReport() {
  const int kernel = KernelLandlockAbi();
  std::string landlock = "{\"abi\":" + std::to_string(std::min(kernel, kWorkerLandlockAbiMax)) +
                         ",\"kernel_abi\":" + std::to_string(kernel);
  if (kernel == 0) landlock = "{\"abi\":0,\"kernel_abi\":0,\"absent\":\"kernel lacks Landlock (ENOSYS)\"";
  return "{\"address_space_limit\":0,\"cpu_limit\":{\"soft_seconds\":0,\"hard_seconds\":0},\"privileges\":" +
         ExpectedPrivileges() +
         ",\"startup_checks\":{\"passed\":true,\"weakened\":false},\"descriptors_closed\":true,"
         "\"no_new_privs\":true,\"dumpable\":false,\"landlock\":" +
         landlock + "},\"seccomp\":{\"installed\":true,\"tsync\":true}}";
}

TEST_F(ConfineWorkerTest, ReportsEveryLayerAndStdoutStillWorks) {
  const ChildResult r = RunChild({}, [] {
    const ConfinementReport report = ConfineWorker(WorkerOptions());
    RawWrite(STDOUT_FILENO, report.ToJson());  // std::string and malloc after the filter
    _exit(0);
  });
  ASSERT_TRUE(r.ExitedWith(0)) << r.Describe();
  EXPECT_EQ(r.out, ExpectedReport());
  EXPECT_EQ(r.err, "");
}

TEST_F(ConfineWorkerTest, ForbiddenCallKillsWithSigsys) {
  const ChildResult r = RunConfined([] { syscall(SYS_getppid); });
  EXPECT_TRUE(r.KilledBy(SIGSYS)) << r.Describe();
  EXPECT_EQ(r.out, kReached);
}

struct Probe {
  const char* name;
  void (*run)();
};

// Each must die by SIGSYS. Each would be harmless if it ever succeeded.
const Probe kKilledBySeccomp[] = {
    {"getppid", [] { syscall(SYS_getppid); }},
    {"openat", [] { syscall(SYS_openat, AT_FDCWD, "/etc/hostname", O_RDONLY); }},
    {"open", [] { syscall(SYS_open, "/etc/hostname", O_RDONLY); }},
    {"newfstatat", [] { struct stat st; syscall(SYS_newfstatat, AT_FDCWD, "/", &st, 0); }},
    {"statx", [] { char buf[256]; syscall(SYS_statx, AT_FDCWD, "/", 0, 0x7ff, buf); }},
    {"fstat(0)", [] { struct stat st; syscall(SYS_fstat, 0, &st); }},
    {"readlink", [] { char buf[64]; syscall(SYS_readlink, "/proc/self/exe", buf, sizeof buf); }},
    {"getxattr", [] { char buf[64]; syscall(SYS_getxattr, "/", "user.x", buf, sizeof buf); }},
    {"socket AF_INET UDP", [] { socket(AF_INET, SOCK_DGRAM, 0); }},
    {"socket AF_INET TCP", [] { socket(AF_INET, SOCK_STREAM, 0); }},
    {"socket AF_INET6", [] { socket(AF_INET6, SOCK_STREAM, 0); }},
    {"socket AF_NETLINK", [] { socket(AF_NETLINK, SOCK_RAW, 0); }},
    {"socket AF_UNIX", [] { socket(AF_UNIX, SOCK_STREAM, 0); }},
    {"socketpair", [] { int sv[2]; socketpair(AF_UNIX, SOCK_STREAM, 0, sv); }},
    {"fork (clone)", [] { fork(); }},
    {"clone CLONE_THREAD", [] { syscall(SYS_clone, CLONE_VM | CLONE_THREAD | CLONE_SIGHAND, 0, 0, 0, 0); }},
    {"clone3", [] { syscall(SYS_clone3, nullptr, 0); }},
    {"vfork", [] { syscall(SYS_vfork); }},
    {"execve", [] { char* argv[] = {nullptr}; syscall(SYS_execve, "/bin/true", argv, argv); }},
    {"mmap PROT_EXEC", [] { mmap(nullptr, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0); }},
    {"mmap MAP_SHARED", [] { mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0); }},
    {"mprotect PROT_EXEC",
     [] {
       void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
       if (p != MAP_FAILED) mprotect(p, 4096, PROT_READ | PROT_EXEC);
     }},
    {"pkey_mprotect", [] { syscall(SYS_pkey_mprotect, nullptr, 4096, PROT_READ, 0); }},
    {"memfd_create", [] { syscall(SYS_memfd_create, "x", 0); }},
    {"write fd 3", [] { syscall(SYS_write, 3, "x", 1); }},
    {"write fd 1 with upper garbage", [] { syscall(SYS_write, (1L << 32) | 1, "x", 1); }},
    {"tgkill self SIGSYS", [] { syscall(SYS_tgkill, getpid(), gettid(), SIGSYS); }},
    {"tgkill other thread", [] { syscall(SYS_tgkill, getpid(), gettid() + 1, SIGABRT); }},
    {"kill self", [] { kill(getpid(), SIGABRT); }},
    {"kill pid 1", [] { kill(1, 0); }},
    {"kill parent", [] { kill(getppid(), 0); }},  // getppid alone already dies
    {"futex shared", [] { int w = 0; syscall(SYS_futex, &w, FUTEX_WAKE, 1, nullptr, nullptr, 0); }},
    {"clock_gettime of pid 1's CPU clock", [] { timespec ts; clock_gettime((~1 << 3) | 2, &ts); }},
    {"prctl PR_SET_DUMPABLE", [] { prctl(PR_SET_DUMPABLE, 1, 0, 0, 0); }},
    {"personality", [] { personality(READ_IMPLIES_EXEC); }},
    {"ptrace", [] { ptrace(PTRACE_TRACEME, 0, nullptr, nullptr); }},
    {"process_vm_readv", [] { syscall(SYS_process_vm_readv, 1, nullptr, 0, nullptr, 0, 0); }},
    {"io_uring_setup", [] { syscall(SYS_io_uring_setup, 1, nullptr); }},
    {"userfaultfd", [] { syscall(SYS_userfaultfd, 0); }},
    {"bpf", [] { syscall(SYS_bpf, 0, nullptr, 0); }},
    {"perf_event_open", [] { syscall(SYS_perf_event_open, nullptr, 0, -1, -1, 0); }},
    {"x32 getpid", [] { syscall(0x40000000 | SYS_getpid); }},
    {"close", [] { close(0); }},
};

TEST_F(ConfineWorkerTest, EachForbiddenCallDiesBySigsys) {
  for (const Probe& p : kKilledBySeccomp) {
    const ChildResult r = RunConfined(p.run);
    EXPECT_TRUE(r.KilledBy(SIGSYS)) << p.name << ": " << r.Describe();
    EXPECT_EQ(r.out, kReached) << p.name;
  }
}

TEST_F(ConfineWorkerTest, I386EntryDiesBySigsysWhereTheControlWorks) {
  // The control: unconfined, int 0x80 getpid (20 on i386) must return, else this kernel has no
  // usable i386 entry (it gives SIGSEGV) and there is nothing for the filter to stop.
  const ChildResult control = RunChild({}, [] { _exit(Int80(20) > 0 ? 0 : 1); });
  if (!control.ExitedWith(0)) GTEST_SKIP() << "no usable i386 entry on this kernel: " << control.Describe();
  const ChildResult r = RunConfined([] { Int80(20); });
  EXPECT_TRUE(r.KilledBy(SIGSYS)) << r.Describe();
}

// Each must survive confined.
const Probe kAllowed[] = {
    {"write stdout and stderr", [] { RawWrite(STDOUT_FILENO, ""); RawWrite(STDERR_FILENO, ""); }},
    {"read stdin (EOF)", [] { char c; if (read(STDIN_FILENO, &c, 1) != 0) _exit(1); }},
    {"malloc, realloc and free, small and large",
     [] {
       std::vector<void*> blocks;
       for (int i = 0; i < 1000; ++i) blocks.push_back(std::malloc(static_cast<size_t>(i) * 37 + 1));
       void* big = std::malloc(8 << 20);
       if (big == nullptr) _exit(1);
       static_cast<char*>(big)[4 << 20] = 1;
       big = std::realloc(big, 32 << 20);  // mremap of an mmapped chunk
       if (big == nullptr) _exit(1);
       std::free(big);
       for (void* b : blocks) std::free(b);
       std::string s(100000, 'x');
       s += s;
     }},
    {"private anonymous mmap",
     [] {
       void* p = mmap(nullptr, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
       if (p == MAP_FAILED || mprotect(p, 4096, PROT_READ) != 0 || madvise(p, 1 << 20, MADV_DONTNEED) != 0) _exit(1);
       munmap(p, 1 << 20);
     }},
    {"clocks",
     [] {
       timespec ts;
       for (clockid_t c : {CLOCK_REALTIME, CLOCK_MONOTONIC, CLOCK_THREAD_CPUTIME_ID, CLOCK_BOOTTIME}) {
         if (syscall(SYS_clock_gettime, c, &ts) != 0 || clock_gettime(c, &ts) != 0) _exit(1);
       }
       timeval tv;
       if (syscall(SYS_gettimeofday, &tv, nullptr) != 0) _exit(1);
     }},
    {"sleep",
     [] {
       timespec ts{0, 1000000};
       if (nanosleep(&ts, nullptr) != 0 || syscall(SYS_nanosleep, &ts, nullptr) != 0) _exit(1);
     }},
    {"localtime after TZ was primed",
     [] {
       const time_t now = time(nullptr);
       tm parts;
       if (localtime_r(&now, &parts) == nullptr || localtime(&now) == nullptr || mktime(&parts) == -1) _exit(1);
     }},
    {"getrandom",
     [] {
       char buf[32];
       if (getrandom(buf, sizeof buf, 0) != sizeof buf || getrandom(buf, 1, GRND_NONBLOCK) != 1) _exit(1);
     }},
    {"private futex",
     [] {
       int w = 0;
       if (syscall(SYS_futex, &w, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0) != 0) _exit(1);
       // A wait whose value does not match returns EAGAIN at once.
       if (syscall(SYS_futex, &w, FUTEX_WAIT_PRIVATE, 1, nullptr, nullptr, 0) != -1 || errno != EAGAIN) _exit(1);
     }},
    {"own signal handlers and mask",
     [] {
       struct sigaction sa {};
       sa.sa_handler = SIG_IGN;
       if (sigaction(SIGUSR1, &sa, nullptr) != 0) _exit(1);
       sigset_t set;
       sigemptyset(&set);
       sigaddset(&set, SIGUSR1);
       if (sigprocmask(SIG_BLOCK, &set, nullptr) != 0) _exit(1);
       static char stack[65536];
       stack_t ss{};
       ss.ss_sp = stack;
       ss.ss_size = sizeof stack;
       if (sigaltstack(&ss, nullptr) != 0) _exit(1);
       if (getpid() <= 0 || gettid() <= 0) _exit(1);
     }},
};

TEST_F(ConfineWorkerTest, TheAllowedSideKeepsWorking) {
  for (const Probe& p : kAllowed) {
    const ChildResult r = RunConfined(p.run);
    EXPECT_TRUE(r.ExitedWith(0)) << p.name << ": " << r.Describe();
    EXPECT_EQ(r.out, std::string(kReached) + kSurvived) << p.name;
  }
}

TEST_F(ConfineWorkerTest, AbortStillEndsWithSigabrt) {
  const ChildResult r = RunConfined([] { std::abort(); });
  EXPECT_TRUE(r.KilledBy(SIGABRT)) << r.Describe();
}

TEST_F(ConfineWorkerTest, AbortWithAReturningHandlerStillEndsWithSigabrt) {
  const ChildResult r = RunConfined([] {
    signal(SIGABRT, [](int) {});
    std::abort();
  });
  EXPECT_TRUE(r.KilledBy(SIGABRT)) << r.Describe();
}

TEST_F(ConfineWorkerTest, GlibcFatalErrorPathReportsAndAborts) {
  // Heap corruption detected by glibc: its message goes to stderr with writev, then abort.
  const ChildResult r = RunConfined([] {
    void* volatile p = std::malloc(32);
    std::free(p);
    std::free(p);
  });
  EXPECT_TRUE(r.KilledBy(SIGABRT)) << r.Describe();
  EXPECT_NE(r.err.find("double free"), std::string::npos) << r.err;
}

TEST_F(ConfineWorkerTest, WithoutASeccompProgramItExits70RatherThanRunUnfiltered) {
  const ChildResult r = RunChild({}, [] {
    ConfineOptions o;
    o.parent_pid = getppid();
    ConfineWorker(o);
    RawWrite(STDOUT_FILENO, "unfiltered");
    _exit(0);
  });
  EXPECT_TRUE(r.ExitedWith(kExitConfinementFailed)) << r.Describe();
  EXPECT_EQ(r.err, "ck-basal-worker: confinement failed: seccomp: the prebuilt seccomp program has 0 instructions\n");
  EXPECT_EQ(r.out, "");
}

TEST_F(ConfineWorkerTest, WithoutAParentPidItExits70) {
  const ChildResult r = RunChild({}, [] {
    ConfineOptions o = WorkerOptions();
    o.parent_pid = 0;
    ConfineWorker(o);
    RawWrite(STDOUT_FILENO, "confined");
    _exit(0);
  });
  EXPECT_TRUE(r.ExitedWith(kExitConfinementFailed)) << r.Describe();
  EXPECT_EQ(r.err,
            "ck-basal-worker: confinement failed: options: no parent pid (ck-basal-worker is started with "
            "--parent-pid)\n");
  EXPECT_EQ(r.out, "");
}

// A parent that died before the death signal was set: getppid() is a reaper's, not the pid the
// worker was started with. The child's own pid stands in for a parent that is gone.
TEST_F(ConfineWorkerTest, AnotherParentThanTheOneThatStartedItExitsParentGone) {
  const ChildResult r = RunChild({}, [] {
    ConfineOptions o = WorkerOptions();
    o.parent_pid = getpid();
    ConfineWorker(o);
    RawWrite(STDOUT_FILENO, "confined");
    _exit(0);
  });
  EXPECT_TRUE(r.ExitedWith(kExitParentGone)) << r.Describe();
  EXPECT_EQ(r.err.rfind("ck-basal-worker: parent ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(" is gone (the parent is now " + std::to_string(getpid()) + "): exiting\n"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.out, "");
}

// ---- privileges (credentials.h) ----

// The lines of /proc/self/status that show ids and capability sets, read with raw calls.
std::string OwnStatusLines() {
  const int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  std::string text;
  char buf[4096];
  ssize_t n;
  while (fd >= 0 && (n = read(fd, buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
  if (fd >= 0) close(fd);
  std::string out;
  size_t at = 0;
  while (at < text.size()) {
    const size_t eol = text.find('\n', at);
    const std::string line = text.substr(at, eol - at);
    at = eol == std::string::npos ? text.size() : eol + 1;
    for (const char* key : {"Uid:", "Gid:", "Groups:", "CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"})
      if (line.rfind(key, 0) == 0) out += line + "\n";
  }
  return out;
}

class CredentialsTest : public ConfineWorkerTest {
 protected:
  void SetUp() override {
    ConfineWorkerTest::SetUp();
    if (geteuid() != 0) GTEST_SKIP() << "needs root: only a root process can become another user";
  }
};

TEST_F(CredentialsTest, ARootWorkerBecomesTheNamedUserWithEveryCapabilitySetEmpty) {
  const ChildResult r = RunChild({}, [] {
    CredentialReport report;
    const StepStatus s = DropCredentials(WorkerIdentity{65534, 65534}, report);
    if (!s.ok()) {
      RawWrite(STDERR_FILENO, s.reason());
      _exit(1);
    }
    const int securebits = prctl(PR_GET_SECUREBITS, 0, 0, 0, 0);
    RawWrite(STDOUT_FILENO, OwnStatusLines() + "securebits " + std::to_string(securebits) + "\n");
    // Root powers are gone for good: nothing brings uid 0 back.
    if (setresuid(0, 0, 0) == 0 || setuid(0) == 0) RawWrite(STDOUT_FILENO, "became root again\n");
    _exit(report.uid == 65534 && report.gid == 65534 && report.supplementary_groups == 0 &&
                  report.capabilities_empty && report.ambient_empty && report.bounding_set_empty
              ? 0
              : 2);
  });
  ASSERT_TRUE(r.ExitedWith(0)) << r.Describe();
  EXPECT_NE(r.out.find("Uid:\t65534\t65534\t65534\t65534\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Gid:\t65534\t65534\t65534\t65534\n"), std::string::npos) << r.out;
  for (const char* set : {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"})
    EXPECT_NE(r.out.find(std::string(set) + ":\t0000000000000000\n"), std::string::npos) << set << "\n" << r.out;
  // SECBIT_NOROOT|NOROOT_LOCKED|NO_SETUID_FIXUP_LOCKED|KEEP_CAPS_LOCKED|NO_CAP_AMBIENT_RAISE(_LOCKED)
  EXPECT_NE(r.out.find("securebits 235\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("became root again"), std::string::npos) << r.out;
}

// Why ConfineWorker sets the parent death signal after the credential change: the kernel resets
// it on a change of credentials (this is what the order in confine.cpp relies on).
TEST_F(CredentialsTest, TheCredentialChangeClearsTheParentDeathSignal) {
  const ChildResult r = RunChild({}, [] {
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) _exit(1);
    CredentialReport report;
    if (!DropCredentials(WorkerIdentity{65534, 65534}, report).ok()) _exit(2);
    int now = -1;
    if (prctl(PR_GET_PDEATHSIG, &now, 0, 0, 0) != 0) _exit(3);
    _exit(now == 0 ? 0 : 4);
  });
  EXPECT_TRUE(r.ExitedWith(0)) << r.Describe();
}

TEST_F(CredentialsTest, ConfinedAsTheNamedUserTheReportSaysSo) {
  const ChildResult r = RunChild({}, [] {
    ConfineOptions o = WorkerOptions();
    o.run_as = WorkerIdentity{65534, 65534};
    RawWrite(STDOUT_FILENO, ConfineWorker(o).ToJson());
    _exit(0);
  });
  ASSERT_TRUE(r.ExitedWith(0)) << r.Describe();
  EXPECT_EQ(r.out.rfind("{\"address_space_limit\":0,\"cpu_limit\":{\"soft_seconds\":0,\"hard_seconds\":0},"
                        "\"privileges\":{\"uid\":65534,\"gid\":65534,\"supplementary_groups\":0,"
                        "\"capabilities_empty\":true,\"ambient_empty\":true,\"bounding_set_empty\":true},",
                        0),
            0u)
      << r.out;
}

TEST_F(CredentialsTest, RootAsTheWorkerUserExits70) {
  const ChildResult r = RunChild({}, [] {
    ConfineOptions o = WorkerOptions();
    o.run_as = WorkerIdentity{0, 0};
    ConfineWorker(o);
    RawWrite(STDOUT_FILENO, "confined");
    _exit(0);
  });
  EXPECT_TRUE(r.ExitedWith(kExitConfinementFailed)) << r.Describe();
  EXPECT_EQ(r.err,
            "ck-basal-worker: confinement failed: privileges: asked to run as uid 0 gid 0: a worker never runs as root\n");
  EXPECT_EQ(r.out, "");
}

// A worker that cannot become the user its parent named (here: it already lost root) refuses
// to run, naming the call that failed, rather than run with ids its parent did not expect.
TEST_F(CredentialsTest, AWorkerThatCannotDropExits70NamingTheCall) {
  const ChildResult r = RunChild({}, [] {
    if (setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0) _exit(1);
    ConfineOptions o = WorkerOptions();
    o.run_as = WorkerIdentity{1000, 1000};
    ConfineWorker(o);
    RawWrite(STDOUT_FILENO, "confined");
    _exit(0);
  });
  EXPECT_TRUE(r.ExitedWith(kExitConfinementFailed)) << r.Describe();
  EXPECT_EQ(r.err,
            "ck-basal-worker: confinement failed: privileges: prctl(PR_CAPBSET_DROP)(capability 0) failed: Operation "
            "not permitted (errno 1)\n");
  EXPECT_EQ(r.out, "");
}

// Without run_as an unprivileged process keeps its ids and its bounding set (it may not drop it
// without CAP_SETPCAP, and holds no capability anyway); its other sets are empty.
TEST_F(CredentialsTest, WithoutRunAsAnUnprivilegedProcessKeepsItsIds) {
  const ChildResult r = RunChild({}, [] {
    if (setgroups(0, nullptr) != 0 || setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0)
      _exit(1);
    CredentialReport report;
    const StepStatus s = DropCredentials(std::nullopt, report);
    if (!s.ok()) {
      RawWrite(STDERR_FILENO, s.reason());
      _exit(2);
    }
    _exit(report.uid == 65534 && report.capabilities_empty && report.ambient_empty && !report.bounding_set_empty ? 0 : 3);
  });
  EXPECT_TRUE(r.ExitedWith(0)) << r.Describe();
}

// The worker sets its own RLIMIT_AS and RLIMIT_CPU before it drops its privileges (limits.h), and
// reports them.
TEST_F(ConfineWorkerTest, TheLimitsAreSetAndReported) {
  const ChildResult r = RunChild({}, [] {
    ConfineOptions o = WorkerOptions();
    o.address_space_limit_bytes = 320ull << 20;
    o.cpu_limit_soft_seconds = 2;
    o.cpu_limit_hard_seconds = 343;
    RawWrite(STDOUT_FILENO, ConfineWorker(o).ToJson());  // getrlimit is prlimit64: killed under the filter
    _exit(0);
  });
  ASSERT_TRUE(r.ExitedWith(0)) << r.Describe();
  EXPECT_EQ(r.out.rfind("{\"address_space_limit\":335544320,\"cpu_limit\":{\"soft_seconds\":2,\"hard_seconds\":343},", 0),
            0u)
      << r.out;
  const ChildResult limited = RunChild({}, [] {
    if (!LimitAddressSpace(320ull << 20).ok() || !LimitCpuTime(2, 343).ok()) _exit(1);
    rlimit as{}, cpu{};
    if (getrlimit(RLIMIT_AS, &as) != 0 || getrlimit(RLIMIT_CPU, &cpu) != 0) _exit(2);
    _exit(as.rlim_cur == (320ull << 20) && as.rlim_max == (320ull << 20) && cpu.rlim_cur == 2 && cpu.rlim_max == 343
              ? 0
              : 3);
  });
  EXPECT_TRUE(limited.ExitedWith(0)) << limited.Describe();
}

TEST_F(ConfineWorkerTest, ASoftCpuLimitAboveTheHardOneExits70) {
  const ChildResult r = RunChild({}, [] {
    ConfineOptions o = WorkerOptions();
    o.cpu_limit_soft_seconds = 5;
    o.cpu_limit_hard_seconds = 4;
    ConfineWorker(o);
    _exit(0);
  });
  EXPECT_TRUE(r.ExitedWith(kExitConfinementFailed)) << r.Describe();
  EXPECT_EQ(r.err,
            "ck-basal-worker: confinement failed: limits: RLIMIT_CPU 5/4: the soft limit must be from 1 s to the hard "
            "limit\n");
}

TEST(Credentials, LastCapabilityIsWhatTheKernelSays) {
  const int fd = open("/proc/sys/kernel/cap_last_cap", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  char buf[16] = {};
  ASSERT_GT(read(fd, buf, sizeof buf - 1), 0);
  close(fd);
  EXPECT_EQ(LastCapability(), std::atoi(buf));
}

TEST_F(ConfineWorkerTest, RegularFileStdinExits70) {
  const ChildResult r = RunChild({.stdin_kind = StdinKind::kRegularFile}, [] { ConfineWorker(WorkerOptions()); });
  EXPECT_TRUE(r.ExitedWith(kExitConfinementFailed)) << r.Describe();
  EXPECT_EQ(r.err, "ck-basal-worker: confinement failed: startup checks: stdin is not a pipe (regular file)\n");
  EXPECT_EQ(r.out, "");
}

TEST_F(ConfineWorkerTest, NamedFifoStdinExits70) {
  const ChildResult r = RunChild({.stdin_kind = StdinKind::kNamedFifo}, [] { ConfineWorker(WorkerOptions()); });
  EXPECT_TRUE(r.ExitedWith(kExitConfinementFailed)) << r.Describe();
  EXPECT_EQ(r.err.rfind("ck-basal-worker: confinement failed: startup checks: stdin is a named FIFO (", 0), 0u)
      << r.err;
}

TEST_F(ConfineWorkerTest, StdoutReadEndExits70) {
  const ChildResult r = RunChild({.stdout_is_read_end = true}, [] { ConfineWorker(WorkerOptions()); });
  EXPECT_TRUE(r.ExitedWith(kExitConfinementFailed)) << r.Describe();
  EXPECT_EQ(r.err,
            "ck-basal-worker: confinement failed: startup checks: stdout is open read-only, not write-only "
            "(a write end)\n");
}

TEST_F(ConfineWorkerTest, SecondThreadExits70) {
  const ChildResult r = RunChild({}, [] {
    std::thread t([] { pause(); });
    t.detach();
    ConfineWorker(WorkerOptions());
  });
  EXPECT_TRUE(r.ExitedWith(kExitConfinementFailed)) << r.Describe();
  EXPECT_EQ(r.err, "ck-basal-worker: confinement failed: startup checks: the worker has 2 threads, not exactly one\n");
}

#ifdef BASAL_TEST_HOOKS
TEST_F(ConfineWorkerTest, WeakenedStartupChecksAreReported) {
  const ChildResult r = RunChild({.stdin_kind = StdinKind::kRegularFile}, [] {
    ConfineOptions o = WorkerOptions();
    o.weaken_startup_checks = true;
    o.skip_landlock = true;
    RawWrite(STDOUT_FILENO, ConfineWorker(o).ToJson());
    _exit(0);
  });
  ASSERT_TRUE(r.ExitedWith(0)) << r.Describe();
  EXPECT_NE(r.out.find("\"startup_checks\":{\"passed\":false,\"weakened\":true}"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"abi\":0,"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"absent\":\"skipped by test switch\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"seccomp\":{\"installed\":true,\"tsync\":true}"), std::string::npos) << r.out;
}
#else
TEST_F(ConfineWorkerTest, WeakeningSwitchesAreRefusedWithoutTestHooks) {
  const ChildResult r = RunChild({}, [] {
    ConfineOptions o = WorkerOptions();
    o.skip_seccomp = true;
    ConfineWorker(o);
  });
  EXPECT_TRUE(r.ExitedWith(kExitConfinementFailed)) << r.Describe();
  EXPECT_EQ(r.err.rfind("ck-basal-worker: confinement failed: options: ", 0), 0u) << r.err;
}
#endif

TEST(Descriptors, CloseRangeClosesEverythingAboveStdio) {
  if (testing::SanitizedBuild()) GTEST_SKIP() << "forked tests are skipped in sanitizer builds";
  const ChildResult r = RunChild({}, [] {
    const int a = open("/dev/null", O_RDONLY);
    const int b = dup2(a, 100);
    if (a < 3 || b != 100) _exit(1);
    if (!CloseDescriptorsAboveStdio().ok()) _exit(2);
    if (fcntl(a, F_GETFD) != -1 || fcntl(100, F_GETFD) != -1) _exit(3);
    if (fcntl(0, F_GETFD) == -1 || fcntl(1, F_GETFD) == -1 || fcntl(2, F_GETFD) == -1) _exit(4);
    _exit(0);
  });
  EXPECT_TRUE(r.ExitedWith(0)) << r.Describe();
}

TEST(ConfinementReportJson, ExactShape) {
  ConfinementReport r;
  r.startup_checks_passed = true;
  r.descriptors_closed = true;
  r.no_new_privs = true;
  r.dumpable = false;
  r.landlock_abi = 7;
  r.landlock_kernel_abi = 8;
  r.seccomp_installed = true;
  r.seccomp_tsync = true;
  r.address_space_limit_bytes = 335544320;
  r.cpu_limit_soft_seconds = 2;
  r.cpu_limit_hard_seconds = 343;
  r.privileges.uid = 65534;
  r.privileges.gid = 65533;
  r.privileges.supplementary_groups = 0;
  r.privileges.capabilities_empty = true;
  r.privileges.ambient_empty = true;
  r.privileges.bounding_set_empty = true;
  EXPECT_EQ(r.ToJson(),
            "{\"address_space_limit\":335544320,\"cpu_limit\":{\"soft_seconds\":2,\"hard_seconds\":343},"
            "\"privileges\":{\"uid\":65534,\"gid\":65533,\"supplementary_groups\":0,\"capabilities_empty\":true,"
            "\"ambient_empty\":true,\"bounding_set_empty\":true},"
            "\"startup_checks\":{\"passed\":true,\"weakened\":false},\"descriptors_closed\":true,"
            "\"no_new_privs\":true,\"dumpable\":false,\"landlock\":{\"abi\":7,\"kernel_abi\":8},"
            "\"seccomp\":{\"installed\":true,\"tsync\":true}}");
  ConfinementReport absent;
  absent.landlock_absent_reason = "kernel lacks \"Landlock\"\\\n";
  EXPECT_NE(absent.ToJson().find("\"landlock\":{\"abi\":0,\"kernel_abi\":0,\"absent\":\"kernel lacks "
                                 "\\\"Landlock\\\"\\\\\\u000a\"}"),
            std::string::npos)
      << absent.ToJson();
  EXPECT_NE(absent.ToJson().find("\"dumpable\":true"), std::string::npos);
}

}  // namespace
}  // namespace basal::confinement
