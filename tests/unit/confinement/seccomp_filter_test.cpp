// The compiled filter, evaluated in-process: the program the worker loads (the build's prebuilt
// program with the pid and tid patched in, which is libseccomp's program instruction for
// instruction: PrebuiltProgramIsLibseccompsProgram) runs in a tiny interpreter against synthetic
// seccomp_data, so each case states what the kernel would decide.
// Also the golden pseudo-code of the filter: regenerate it after a reviewed change with
//   BASAL_UPDATE_GOLDEN=1 ctest -R GoldenPfc      (or: basal-policy-dump pfc > golden/seccomp_x86_64.pfc)
#include "confinement/linux/seccomp_filter.h"

#include <fcntl.h>
#include <linux/audit.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "bpf_interpreter.h"
#include "confinement/linux/seccomp_policy.h"
#include "confinement/linux/seccomp_program.h"

namespace basal::confinement {
namespace {

using testing::RunSeccompBpf;

constexpr pid_t kPid = 4242;  // the pid and tid baked into every filter of these tests
constexpr pid_t kTid = 4242;
constexpr uint32_t kAllow = SECCOMP_RET_ALLOW;
constexpr uint32_t kKillProcess = SECCOMP_RET_KILL_PROCESS;
constexpr uint64_t kHigh = 1ULL << 32;  // garbage in an argument's upper 32 bits
constexpr uint64_t kFdMinusOne32 = 0xffffffffULL;

class SeccompFilterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string error;
    ASSERT_TRUE(PatchProgram(WorkerSeccompProgram(), {kPid, kTid}, *prog_, error)) << error;
    ASSERT_FALSE(prog_->empty());
  }

  static uint32_t Decide(int nr, std::initializer_list<uint64_t> args = {}, uint32_t arch = AUDIT_ARCH_X86_64) {
    seccomp_data d{};
    d.nr = nr;
    d.arch = arch;
    d.instruction_pointer = 0x401000;
    size_t i = 0;
    for (uint64_t a : args) d.args[i++] = a;
    const testing::BpfRun run = RunSeccompBpf(*prog_, d);
    EXPECT_TRUE(run.ok) << run.error;
    return run.ret & SECCOMP_RET_ACTION_FULL;
  }

  static inline std::vector<sock_filter>* prog_ = new std::vector<sock_filter>();
};

#define EXPECT_ALLOWED(...) EXPECT_EQ(Decide(__VA_ARGS__), kAllow)
#define EXPECT_KILLED(...) EXPECT_EQ(Decide(__VA_ARGS__), kKillProcess)

TEST_F(SeccompFilterTest, ChecksTheArchitectureFirst) {
  const std::vector<sock_filter>& p = *prog_;
  ASSERT_GE(p.size(), 3u);
  EXPECT_EQ(p[0].code, BPF_LD | BPF_W | BPF_ABS);
  EXPECT_EQ(p[0].k, offsetof(seccomp_data, arch));
  EXPECT_EQ(p[1].code, BPF_JMP | BPF_JEQ | BPF_K);
  EXPECT_EQ(p[1].k, AUDIT_ARCH_X86_64);
  const sock_filter& bad_arch = p[2 + p[1].jf];
  EXPECT_EQ(bad_arch.code, BPF_RET | BPF_K);
  EXPECT_EQ(bad_arch.k, kKillProcess);
}

TEST_F(SeccompFilterTest, KillsTheI386Entry) {
  // int 0x80 on x86_64 reaches seccomp with AUDIT_ARCH_I386 and i386 numbers (20 is getpid, 4
  // write, 3 read there): every one is killed, whatever it would mean natively.
  for (int nr : {0, 1, 3, 4, 20, 39, 60, 231}) {
    EXPECT_KILLED(nr, {1, 0, 0}, AUDIT_ARCH_I386) << nr;
  }
  EXPECT_KILLED(__NR_getpid, {}, 0);
}

TEST_F(SeccompFilterTest, KillsX32Numbers) {
  constexpr int kX32 = 0x40000000;
  EXPECT_ALLOWED(__NR_getpid);
  EXPECT_KILLED(kX32 | __NR_getpid);
  EXPECT_KILLED(kX32 | __NR_write, {1, 0, 1});
  EXPECT_KILLED(kX32 | __NR_read, {0, 0, 1});
  EXPECT_KILLED(kX32 | __NR_exit_group, {0});
  EXPECT_KILLED(kX32 | 512);  // x32's own numbers start at 512
  EXPECT_KILLED(0x3fffffff);
  EXPECT_KILLED(-1);
}

TEST_F(SeccompFilterTest, ChannelIo) {
  EXPECT_ALLOWED(__NR_read, {0, 0x1000, 4});
  EXPECT_ALLOWED(__NR_write, {1, 0x1000, 4});
  EXPECT_ALLOWED(__NR_write, {2, 0x1000, 4});
  EXPECT_ALLOWED(__NR_writev, {2, 0x1000, 2});
  EXPECT_KILLED(__NR_write, {3, 0x1000, 4});
  EXPECT_KILLED(__NR_write, {0, 0x1000, 4});
  EXPECT_KILLED(__NR_read, {1, 0x1000, 4});
  EXPECT_KILLED(__NR_read, {3, 0x1000, 4});
  EXPECT_KILLED(__NR_writev, {1, 0x1000, 2});
  // The kernel truncates fd to an int: upper garbage must not turn "1" into a pass for fd 1.
  EXPECT_KILLED(__NR_write, {kHigh | 1, 0x1000, 4});
  EXPECT_KILLED(__NR_read, {0xdeadbeef00000000ULL, 0x1000, 4});
  EXPECT_KILLED(__NR_pread64, {0, 0x1000, 4, 0});
  EXPECT_KILLED(__NR_readv, {0, 0x1000, 1});
}

TEST_F(SeccompFilterTest, Memory) {
  constexpr uint64_t kPA = MAP_PRIVATE | MAP_ANONYMOUS;
  EXPECT_ALLOWED(__NR_mmap, {0, 4096, PROT_READ | PROT_WRITE, kPA, kFdMinusOne32, 0});
  EXPECT_ALLOWED(__NR_mmap, {0, 4096, PROT_NONE, kPA | MAP_NORESERVE, kFdMinusOne32, 0});
  EXPECT_ALLOWED(__NR_mmap, {0, 4096, PROT_READ, kPA, kFdMinusOne32, 0});
  EXPECT_KILLED(__NR_mmap, {0, 4096, PROT_READ | PROT_EXEC, kPA, kFdMinusOne32, 0});
  EXPECT_KILLED(__NR_mmap, {0, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, kPA, kFdMinusOne32, 0});
  EXPECT_KILLED(__NR_mmap, {0, 4096, PROT_EXEC, kPA, kFdMinusOne32, 0});
  EXPECT_KILLED(__NR_mmap, {0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, kFdMinusOne32, 0});
  // MAP_SHARED_VALIDATE (0x03) contains MAP_PRIVATE's bit: only a by-value compare refuses it.
  EXPECT_KILLED(__NR_mmap, {0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED_VALIDATE | MAP_ANONYMOUS, kFdMinusOne32, 0});
  EXPECT_KILLED(__NR_mmap, {0, 4096, PROT_READ | PROT_WRITE, kPA | MAP_FIXED, kFdMinusOne32, 0});
  EXPECT_KILLED(__NR_mmap, {0, 4096, PROT_READ | PROT_WRITE, kPA | MAP_FIXED_NOREPLACE, kFdMinusOne32, 0});
  EXPECT_KILLED(__NR_mmap, {0, 4096, PROT_READ | PROT_WRITE, kPA | MAP_GROWSDOWN, kFdMinusOne32, 0});
  EXPECT_KILLED(__NR_mmap, {0, 4096, PROT_READ, MAP_PRIVATE, 3, 0});  // a file mapping
  EXPECT_KILLED(__NR_mmap, {0, 4096, PROT_READ | PROT_WRITE, kPA, 0, 0});
  EXPECT_KILLED(__NR_mmap, {0, 4096, PROT_READ | PROT_WRITE, kPA, ~0ULL, 0});  // not glibc's encoding of -1
  EXPECT_KILLED(__NR_mmap, {0, 4096, kHigh | PROT_READ, kPA, kFdMinusOne32, 0});
  EXPECT_KILLED(__NR_mmap, {0, 4096, PROT_READ, kHigh | kPA, kFdMinusOne32, 0});

  EXPECT_ALLOWED(__NR_mprotect, {0x1000, 4096, PROT_READ | PROT_WRITE});
  EXPECT_ALLOWED(__NR_mprotect, {0x1000, 4096, PROT_NONE});
  EXPECT_KILLED(__NR_mprotect, {0x1000, 4096, PROT_READ | PROT_EXEC});
  EXPECT_KILLED(__NR_mprotect, {0x1000, 4096, PROT_EXEC});
  EXPECT_KILLED(__NR_mprotect, {0x1000, 4096, PROT_READ | PROT_WRITE | PROT_EXEC});
  EXPECT_KILLED(__NR_mprotect, {0x1000, 4096, PROT_READ | PROT_GROWSDOWN});
  EXPECT_KILLED(__NR_mprotect, {0x1000, 4096, kHigh | PROT_READ});
  EXPECT_KILLED(__NR_pkey_mprotect, {0x1000, 4096, PROT_READ, 0});

  EXPECT_ALLOWED(__NR_munmap, {0x1000, 4096});
  EXPECT_ALLOWED(__NR_brk, {0});
  EXPECT_ALLOWED(__NR_mremap, {0x1000, 4096, 8192, MREMAP_MAYMOVE, 0});
  EXPECT_ALLOWED(__NR_mremap, {0x1000, 8192, 4096, 0, 0});
  EXPECT_KILLED(__NR_mremap, {0x1000, 4096, 8192, MREMAP_MAYMOVE | MREMAP_FIXED, 0x200000});
  EXPECT_KILLED(__NR_mremap, {0x1000, 4096, 4096, MREMAP_MAYMOVE | MREMAP_DONTUNMAP, 0});
  EXPECT_ALLOWED(__NR_madvise, {0x1000, 4096, MADV_DONTNEED});
  EXPECT_ALLOWED(__NR_madvise, {0x1000, 4096, MADV_FREE});
  EXPECT_KILLED(__NR_madvise, {0x1000, 4096, MADV_DONTFORK});
  EXPECT_KILLED(__NR_madvise, {0x1000, 4096, MADV_HWPOISON});
  EXPECT_KILLED(__NR_madvise, {0x1000, 4096, MADV_MERGEABLE});
  EXPECT_KILLED(__NR_memfd_create, {0x1000, 0});
  EXPECT_KILLED(__NR_shmget, {0, 4096, 0});
}

TEST_F(SeccompFilterTest, Time) {
  EXPECT_ALLOWED(__NR_clock_gettime, {CLOCK_REALTIME, 0x1000});
  EXPECT_ALLOWED(__NR_clock_gettime, {CLOCK_MONOTONIC, 0x1000});
  EXPECT_ALLOWED(__NR_clock_gettime, {CLOCK_THREAD_CPUTIME_ID, 0x1000});
  EXPECT_ALLOWED(__NR_clock_gettime, {CLOCK_BOOTTIME, 0x1000});
  EXPECT_ALLOWED(__NR_clock_getres, {CLOCK_MONOTONIC, 0x1000});
  // A negative clockid encodes another process's or thread's CPU clock: -2 is
  // MAKE_PROCESS_CPUCLOCK(0, CPUCLOCK_VIRT); glibc passes it zero-extended, a raw caller may not.
  EXPECT_KILLED(__NR_clock_gettime, {0xfffffffeULL, 0x1000});
  EXPECT_KILLED(__NR_clock_gettime, {static_cast<uint64_t>(-2LL), 0x1000});
  EXPECT_KILLED(__NR_clock_gettime, {static_cast<uint32_t>((~1 << 3) | 2), 0x1000});  // pid 1's sched clock
  EXPECT_KILLED(__NR_clock_gettime, {CLOCK_PROCESS_CPUTIME_ID, 0x1000});
  EXPECT_KILLED(__NR_clock_gettime, {kHigh | CLOCK_MONOTONIC, 0x1000});
  EXPECT_KILLED(__NR_clock_getres, {0xfffffffeULL, 0x1000});
  EXPECT_ALLOWED(__NR_gettimeofday, {0x1000, 0});
  EXPECT_ALLOWED(__NR_nanosleep, {0x1000, 0});
  EXPECT_ALLOWED(__NR_clock_nanosleep, {CLOCK_REALTIME, 0, 0x1000, 0});
  EXPECT_ALLOWED(__NR_clock_nanosleep, {CLOCK_MONOTONIC, TIMER_ABSTIME, 0x1000, 0});
  EXPECT_KILLED(__NR_clock_nanosleep, {CLOCK_THREAD_CPUTIME_ID, 0, 0x1000, 0});
  EXPECT_KILLED(__NR_clock_nanosleep, {CLOCK_MONOTONIC, 2, 0x1000, 0});
  EXPECT_KILLED(__NR_clock_settime, {CLOCK_REALTIME, 0x1000});
  EXPECT_KILLED(__NR_settimeofday, {0x1000, 0});
}

TEST_F(SeccompFilterTest, RandomAndFutex) {
  EXPECT_ALLOWED(__NR_getrandom, {0x1000, 16, 0});
  EXPECT_ALLOWED(__NR_getrandom, {0x1000, 16, GRND_NONBLOCK});
  EXPECT_KILLED(__NR_getrandom, {0x1000, 16, GRND_RANDOM});
  EXPECT_KILLED(__NR_getrandom, {0x1000, 16, kHigh});

  EXPECT_ALLOWED(__NR_futex, {0x1000, FUTEX_WAIT_PRIVATE, 0, 0});
  EXPECT_ALLOWED(__NR_futex, {0x1000, FUTEX_WAKE_PRIVATE, 1});
  EXPECT_ALLOWED(__NR_futex, {0x1000, FUTEX_WAIT_BITSET_PRIVATE, 0, 0, 0, FUTEX_BITSET_MATCH_ANY});
  EXPECT_ALLOWED(__NR_futex, {0x1000, FUTEX_WAIT_BITSET_PRIVATE | FUTEX_CLOCK_REALTIME, 0, 0x2000, 0, ~0U});
  EXPECT_ALLOWED(__NR_futex, {0x1000, FUTEX_WAKE_BITSET_PRIVATE, 1, 0, 0, ~0U});
  EXPECT_KILLED(__NR_futex, {0x1000, FUTEX_WAIT, 0, 0});  // shared
  EXPECT_KILLED(__NR_futex, {0x1000, FUTEX_WAKE, 1});
  EXPECT_KILLED(__NR_futex, {0x1000, FUTEX_WAIT_BITSET | FUTEX_CLOCK_REALTIME, 0, 0});
  EXPECT_KILLED(__NR_futex, {0x1000, FUTEX_REQUEUE_PRIVATE, 1, 1, 0x2000});
  EXPECT_KILLED(__NR_futex, {0x1000, FUTEX_CMP_REQUEUE_PI_PRIVATE, 1, 1, 0x2000});
  EXPECT_KILLED(__NR_futex, {0x1000, FUTEX_LOCK_PI_PRIVATE, 0, 0});
  EXPECT_KILLED(__NR_futex, {0x1000, FUTEX_WAKE_OP_PRIVATE, 1, 1, 0x2000});
  EXPECT_KILLED(__NR_futex, {0x1000, kHigh | FUTEX_WAKE_PRIVATE, 1});
  EXPECT_KILLED(__NR_futex_waitv, {0x1000, 1, 0, 0, CLOCK_MONOTONIC});
}

TEST_F(SeccompFilterTest, SignalsOnlyToItselfAndOnlySigabrt) {
  EXPECT_ALLOWED(__NR_tgkill, {kPid, kTid, SIGABRT});
  EXPECT_KILLED(__NR_tgkill, {kPid, kTid, SIGSYS});  // would fake a confinement death
  EXPECT_KILLED(__NR_tgkill, {kPid, kTid, SIGKILL});
  EXPECT_KILLED(__NR_tgkill, {kPid, kTid, SIGSEGV});
  EXPECT_KILLED(__NR_tgkill, {kPid, kTid, 0});
  EXPECT_KILLED(__NR_tgkill, {kPid + 1, kTid, SIGABRT});
  EXPECT_KILLED(__NR_tgkill, {1, 1, SIGABRT});
  EXPECT_KILLED(__NR_tgkill, {kPid, kTid + 1, SIGABRT});
  EXPECT_KILLED(__NR_tgkill, {kHigh | kPid, kTid, SIGABRT});
  EXPECT_KILLED(__NR_tgkill, {kPid, kTid, kHigh | SIGABRT});
  EXPECT_KILLED(__NR_kill, {kPid, SIGABRT});
  EXPECT_KILLED(__NR_kill, {0, SIGSYS});
  EXPECT_KILLED(__NR_tkill, {kTid, SIGABRT});
  EXPECT_KILLED(__NR_rt_sigqueueinfo, {kPid, SIGSYS, 0x1000});
  EXPECT_KILLED(__NR_pidfd_send_signal, {3, SIGSYS, 0, 0});
  EXPECT_ALLOWED(__NR_rt_sigaction, {SIGABRT, 0x1000, 0, 8});
  EXPECT_ALLOWED(__NR_rt_sigprocmask, {SIG_BLOCK, 0x1000, 0, 8});
  EXPECT_ALLOWED(__NR_rt_sigreturn);
  EXPECT_ALLOWED(__NR_sigaltstack, {0x1000, 0});
  EXPECT_ALLOWED(__NR_getpid);
  EXPECT_ALLOWED(__NR_gettid);
  EXPECT_KILLED(__NR_getppid);
  EXPECT_ALLOWED(__NR_exit, {0});
  EXPECT_ALLOWED(__NR_exit_group, {70});
}

TEST_F(SeccompFilterTest, EverythingElseDies) {
  EXPECT_KILLED(__NR_openat, {static_cast<uint64_t>(AT_FDCWD), 0x1000, O_RDONLY});
  EXPECT_KILLED(__NR_open, {0x1000, O_RDONLY});
  EXPECT_KILLED(__NR_newfstatat, {static_cast<uint64_t>(AT_FDCWD), 0x1000, 0x2000, 0});
  EXPECT_KILLED(__NR_fstat, {0, 0x1000});
  EXPECT_KILLED(__NR_readlink, {0x1000, 0x2000, 64});
  EXPECT_KILLED(__NR_getxattr, {0x1000, 0x2000, 0x3000, 64});
  EXPECT_KILLED(__NR_socket, {2, 2, 0});
  EXPECT_KILLED(__NR_clone, {0x11, 0, 0, 0, 0});
  EXPECT_KILLED(__NR_ioctl, {0, 0x5401, 0x1000});
  EXPECT_KILLED(__NR_close, {0});
  EXPECT_KILLED(__NR_dup, {0});
  EXPECT_KILLED(__NR_uname, {0x1000});
}

// Every row, generically: each admitted value of each checked argument passes (the others at
// their first value), and the same call with garbage in that argument's upper 32 bits dies.
TEST_F(SeccompFilterTest, EveryRowAdmitsItsValuesAndOnlyThose) {
  for (const AdmittedSyscall& row : AdmittedSyscalls()) {
    SCOPED_TRACE(std::string(row.name));
    auto resolve = [](const ArgValue& v) -> uint64_t {
      switch (v.source) {
        case ArgValue::Source::kLiteral: return v.literal;
        case ArgValue::Source::kOwnPid: return kPid;
        case ArgValue::Source::kOwnTid: return kTid;
      }
      return 0;
    };
    seccomp_data base{};
    base.nr = row.nr;
    base.arch = AUDIT_ARCH_X86_64;
    for (size_t a = 0; a < row.rule.count; ++a) base.args[row.rule.args[a].index] = resolve(row.rule.args[a].values[0]);
    const auto decide = [](const seccomp_data& d) {
      const testing::BpfRun run = RunSeccompBpf(*prog_, d);
      EXPECT_TRUE(run.ok) << run.error;
      return run.ret & SECCOMP_RET_ACTION_FULL;
    };
    EXPECT_EQ(decide(base), kAllow);
    for (size_t a = 0; a < row.rule.count; ++a) {
      const ArgOneOf& arg = row.rule.args[a];
      for (size_t v = 0; v < arg.count; ++v) {
        seccomp_data d = base;
        d.args[arg.index] = resolve(arg.values[v]);
        EXPECT_EQ(decide(d), kAllow) << "arg " << int(arg.index) << " value " << d.args[arg.index];
        d.args[arg.index] ^= 0xffffffff00000000ULL;
        EXPECT_EQ(decide(d), kKillProcess) << "arg " << int(arg.index) << " upper garbage";
      }
    }
  }
}

TEST_F(SeccompFilterTest, EveryNeverAllowedCallDies) {
  for (const RefusedSyscall& r : NeverAllowedSyscalls()) {
    EXPECT_KILLED(r.nr, {0, 0, 0, 0, 0, 0}) << r.name;
    EXPECT_KILLED(r.nr, {1, 2, 3, 4, 5, 6}) << r.name;
  }
}

TEST_F(SeccompFilterTest, NoNumberOutsideTheTableIsAllowed) {
  for (int nr = 0; nr < 1024; ++nr) {
    if (FindAdmitted(nr) != nullptr) continue;
    EXPECT_KILLED(nr, {0, 1, 2, 3, 4, 5}) << nr << " " << SyscallName(nr);
  }
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(SeccompFilterGolden, GoldenPfc) {
  SeccompFilter filter({kPid, kTid});
  ASSERT_TRUE(filter.ok()) << filter.error();
  std::string pfc;
  std::string error;
  ASSERT_TRUE(filter.ExportPfc(pfc, error)) << error;
  const std::string path = std::string(BASAL_CONFINEMENT_GOLDEN_DIR) + "/seccomp_x86_64.pfc";
  if (const char* update = std::getenv("BASAL_UPDATE_GOLDEN"); update != nullptr && std::string(update) == "1") {
    std::ofstream(path, std::ios::binary) << pfc;
  }
  const std::string golden = ReadFile(path);
  ASSERT_FALSE(golden.empty()) << "missing " << path << "; create it with BASAL_UPDATE_GOLDEN=1";
  EXPECT_EQ(pfc, golden) << "the compiled filter changed: review the diff, then regenerate " << path
                         << " with BASAL_UPDATE_GOLDEN=1";
  // The pid is baked in where the table says: tgkill's tgid and tid.
  EXPECT_NE(golden.find("4242"), std::string::npos);
}

bool SameProgram(const std::vector<sock_filter>& a, const std::vector<sock_filter>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].code != b[i].code || a[i].jt != b[i].jt || a[i].jf != b[i].jf || a[i].k != b[i].k) return false;
  return true;
}

TEST(SeccompProgram, PrebuiltProgramIsLibseccompsProgram) {
  // The main thread (pid == tid, as in the worker), another thread, and the extremes of pid_max.
  const FilterContext contexts[] = {{4242, 4242}, {100, 101}, {1, 1}, {4194303, 4194302}};
  for (const FilterContext& c : contexts) {
    std::vector<sock_filter> patched, compiled;
    std::string error;
    ASSERT_TRUE(PatchProgram(WorkerSeccompProgram(), c, patched, error)) << error;
    SeccompFilter filter(c);
    ASSERT_TRUE(filter.ok()) << filter.error();
    ASSERT_TRUE(filter.ExportBpf(compiled, error)) << error;
    EXPECT_TRUE(SameProgram(patched, compiled)) << "pid " << c.own_pid << " tid " << c.own_tid
                                                << ": the prebuilt program is stale or mis-patched";
  }
}

// The worker loads libseccomp's binary tree of syscall numbers (FilterLayout::kBinaryTree). It must
// decide every call exactly as the chain of rows in priority order did: both run here on every
// number from 0 to 1023, x32's and a few beyond, under three architectures, and for each admitted
// row on every combination of its checked arguments' values, each also off by one and with garbage
// in its upper half.
TEST(SeccompProgram, TheTreeDecidesAsTheChain) {
  std::vector<sock_filter> tree, chain;
  std::string error;
  SeccompFilter tree_filter({kPid, kTid});
  SeccompFilter chain_filter({kPid, kTid}, FilterLayout::kPriorityChain);
  ASSERT_TRUE(tree_filter.ok()) << tree_filter.error();
  ASSERT_TRUE(chain_filter.ok()) << chain_filter.error();
  ASSERT_TRUE(tree_filter.ExportBpf(tree, error)) << error;
  ASSERT_TRUE(chain_filter.ExportBpf(chain, error)) << error;
  ASSERT_FALSE(SameProgram(tree, chain)) << "the two layouts compiled to one program: this test compares nothing";

  const auto resolve = [](const ArgValue& v) -> uint64_t {
    switch (v.source) {
      case ArgValue::Source::kLiteral: return v.literal;
      case ArgValue::Source::kOwnPid: return kPid;
      case ArgValue::Source::kOwnTid: return kTid;
    }
    return 0;
  };
  size_t compared = 0, allowed = 0;
  const auto same = [&](const seccomp_data& d) {
    const testing::BpfRun a = RunSeccompBpf(tree, d);
    const testing::BpfRun b = RunSeccompBpf(chain, d);
    ASSERT_TRUE(a.ok) << a.error;
    ASSERT_TRUE(b.ok) << b.error;
    ASSERT_EQ(a.ret, b.ret) << "arch 0x" << std::hex << d.arch << " nr 0x" << d.nr << " args 0x" << d.args[0] << " 0x"
                            << d.args[1] << " 0x" << d.args[2] << " 0x" << d.args[3] << " 0x" << d.args[4] << " 0x"
                            << d.args[5];
    ++compared;
    allowed += (a.ret & SECCOMP_RET_ACTION_FULL) == kAllow;
  };

  std::vector<uint32_t> numbers;
  for (uint32_t nr = 0; nr < 1024; ++nr) numbers.push_back(nr);
  for (uint32_t nr = 0; nr < 1024; ++nr) numbers.push_back(nr | 0x40000000u);  // x32
  for (uint32_t nr : {0x3fffffffu, 0x7fffffffu, 0x80000000u, 0xfffffffeu, 0xffffffffu}) numbers.push_back(nr);
  for (const uint32_t arch : {uint32_t{AUDIT_ARCH_X86_64}, uint32_t{AUDIT_ARCH_I386}, uint32_t{0}}) {
    for (const uint32_t nr : numbers) {
      seccomp_data d{};
      d.arch = arch;
      d.nr = static_cast<int>(nr);
      d.instruction_pointer = 0x401000;
      for (const std::array<uint64_t, 6>& args : {std::array<uint64_t, 6>{0, 0, 0, 0, 0, 0},
                                                  std::array<uint64_t, 6>{1, 2, 3, 4, 5, 6},
                                                  std::array<uint64_t, 6>{kHigh, kHigh, kHigh, kHigh, kHigh, kHigh}}) {
        for (size_t i = 0; i < 6; ++i) d.args[i] = args[i];
        same(d);
      }
      const AdmittedSyscall* row = nr < 1024 ? FindAdmitted(static_cast<int>(nr)) : nullptr;
      if (row == nullptr || row->rule.count == 0) continue;
      // Every combination of the checked arguments' candidates; the unchecked ones 0, then 7.
      std::vector<std::vector<uint64_t>> candidates(row->rule.count);
      for (size_t a = 0; a < row->rule.count; ++a) {
        const ArgOneOf& arg = row->rule.args[a];
        for (size_t v = 0; v < arg.count; ++v) {
          const uint64_t x = resolve(arg.values[v]);
          for (const uint64_t c : {x, x + 1, x - 1, uint64_t{x ^ 0xffffffff00000000ULL}}) candidates[a].push_back(c);
        }
      }
      std::vector<size_t> at(row->rule.count, 0);
      for (;;) {
        for (const uint64_t unchecked : {uint64_t{0}, uint64_t{7}}) {
          for (size_t i = 0; i < 6; ++i) d.args[i] = unchecked;
          for (size_t a = 0; a < row->rule.count; ++a) d.args[row->rule.args[a].index] = candidates[a][at[a]];
          same(d);
        }
        size_t a = 0;
        while (a < at.size() && ++at[a] == candidates[a].size()) at[a++] = 0;
        if (a == at.size()) break;
      }
    }
  }
  EXPECT_GT(compared, 9000u);
  EXPECT_GT(allowed, 100u);
}

TEST(SeccompProgram, PatchingRefusesWhatCouldMislead) {
  std::vector<sock_filter> out;
  std::string why;
  EXPECT_FALSE(PatchProgram({}, {10, 10}, out, why));
  EXPECT_NE(why.find("0 instructions"), std::string::npos) << why;
  EXPECT_FALSE(PatchProgram(WorkerSeccompProgram(), {static_cast<pid_t>(kPidPlaceholder), 10}, out, why));
  EXPECT_NE(why.find("placeholder"), std::string::npos) << why;
  // A program without the tid's place (as if the table lost its tgkill row) is refused.
  std::vector<sock_filter> no_tid(WorkerSeccompProgram().begin(), WorkerSeccompProgram().end());
  for (sock_filter& insn : no_tid)
    if (insn.k == kTidPlaceholder) insn.k = 7;
  EXPECT_FALSE(PatchProgram(no_tid, {10, 10}, out, why));
  EXPECT_NE(why.find("no place for the worker's tid"), std::string::npos) << why;
}

TEST(SeccompProgram, BuildingItChecksThePlaceholdersOnlyStandForThePidAndTid) {
  std::vector<sock_filter> built;
  std::string why;
  ASSERT_TRUE(BuildPrebuiltProgram(built, why)) << why;
  const auto prebuilt = WorkerSeccompProgram();
  EXPECT_TRUE(SameProgram(built, std::vector<sock_filter>(prebuilt.begin(), prebuilt.end())))
      << "the build's prebuilt program differs from the table's: rebuild";
}

TEST(SeccompFilterGolden, PidIsBakedIn) {
  SeccompFilter a({100, 100});
  SeccompFilter b({200, 201});
  std::string pa;
  std::string pb;
  std::string error;
  ASSERT_TRUE(a.ExportPfc(pa, error)) << error;
  ASSERT_TRUE(b.ExportPfc(pb, error)) << error;
  EXPECT_NE(pa, pb);
  EXPECT_NE(pb.find("== 200"), std::string::npos);
  EXPECT_NE(pb.find("== 201"), std::string::npos);
}

}  // namespace
}  // namespace basal::confinement
