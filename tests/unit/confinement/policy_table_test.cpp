// Invariants of the one allowlist table, and the docs rendered from it.
#include "confinement/linux/seccomp_policy.h"

#include <sys/syscall.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "confinement/linux/policy_render.h"

namespace basal::confinement {
namespace {

TEST(PolicyTable, EveryRowHasAReasonANameAndANamedRule) {
  ASSERT_FALSE(AdmittedSyscalls().empty());
  for (const AdmittedSyscall& row : AdmittedSyscalls()) {
    EXPECT_FALSE(row.name.empty()) << row.nr;
    EXPECT_GT(row.reason.size(), 20u) << row.name << ": a reason is a sentence";
    EXPECT_EQ(row.reason.back(), '.') << row.name << ": a reason is a sentence";
    EXPECT_FALSE(row.rule.name.empty()) << row.name;
    EXPECT_FALSE(row.rule.effect.empty()) << row.name;
    EXPECT_STRNE(SyscallFamilyName(row.family), "unknown") << row.name;
  }
}

TEST(PolicyTable, NoDuplicateSyscall) {
  std::set<int> seen;
  for (const AdmittedSyscall& row : AdmittedSyscalls()) {
    EXPECT_TRUE(seen.insert(row.nr).second) << row.name << " appears twice";
  }
}

TEST(PolicyTable, NamesMatchNumbers) {
  // The table's names are what libseccomp (and strace) call those numbers.
  for (const AdmittedSyscall& row : AdmittedSyscalls()) {
    EXPECT_EQ(std::string(SyscallName(row.nr)), std::string(row.name));
  }
  EXPECT_STREQ(SyscallName(__NR_read), "read");
  EXPECT_STREQ(SyscallName(__NR_openat), "openat");
  EXPECT_STREQ(SyscallName(__NR_getppid), "getppid");
  EXPECT_STREQ(SyscallName(__NR_uname), "uname");  // in neither list: libseccomp's name
  EXPECT_STREQ(SyscallName(0x40000000 | __NR_getpid), "x32:getpid");
  EXPECT_STREQ(SyscallName(99999), "unknown");
  EXPECT_STREQ(SyscallName(-5), "unknown");
  EXPECT_EQ(SyscallName(__NR_uname), SyscallName(__NR_uname));  // stable pointer
}

TEST(PolicyTable, NeverAllowedCallsAreAbsent) {
  ASSERT_GT(NeverAllowedSyscalls().size(), 40u);
  for (const RefusedSyscall& r : NeverAllowedSyscalls()) {
    EXPECT_EQ(FindAdmitted(r.nr), nullptr) << r.name << " must never be admitted";
    EXPECT_EQ(std::string(SyscallName(r.nr)), std::string(r.name));
    EXPECT_FALSE(r.why.empty()) << r.name;
  }
}

TEST(PolicyTable, TheDesignsNeverAllowListIsCovered) {
  // The calls the design and issue 3 name; adding one to the table must fail here too.
  const int required[] = {
      __NR_ptrace, __NR_bpf, __NR_perf_event_open, __NR_userfaultfd, __NR_io_uring_setup, __NR_io_uring_enter,
      __NR_io_uring_register, __NR_socket, __NR_socketpair, __NR_connect, __NR_execve, __NR_execveat, __NR_fork,
      __NR_vfork, __NR_clone, __NR_clone3, __NR_mount, __NR_unshare, __NR_setns, __NR_keyctl, __NR_add_key,
      __NR_process_vm_readv, __NR_process_vm_writev, __NR_kill, __NR_tkill, __NR_personality, __NR_prctl, __NR_open,
      __NR_openat, __NR_openat2, __NR_memfd_create, __NR_newfstatat, __NR_statx, __NR_readlink, __NR_readlinkat,
      __NR_getxattr, __NR_pkey_mprotect,
  };
  for (int nr : required) {
    bool listed = false;
    for (const RefusedSyscall& r : NeverAllowedSyscalls()) listed = listed || r.nr == nr;
    EXPECT_TRUE(listed) << SyscallName(nr) << " is missing from kNeverAllow";
    EXPECT_EQ(FindAdmitted(nr), nullptr) << SyscallName(nr);
  }
}

TEST(PolicyTable, OnlyTheDesignsFamilies) {
  // The design's list of what a confined worker can do, and nothing beyond it. poll is the design's
  // "read stdin": one descriptor looked at without waiting (OneFdNoWait), before the worker blocks
  // in read (src/worker/wait_spin.h); the worker holds no descriptor but its three pipes.
  // sched_yield is the design's "sleep" at its shortest: between two of those looks the worker
  // gives its CPU to whatever else is runnable there, and delays nobody but itself.
  const std::set<std::string> expected = {"read", "poll", "write", "writev", "brk", "mmap", "munmap", "mremap", "mprotect",
                                          "madvise", "clock_gettime", "clock_getres", "gettimeofday", "nanosleep",
                                          "sched_yield", "clock_nanosleep", "getrandom", "futex", "rt_sigaction",
                                          "rt_sigprocmask", "rt_sigreturn", "sigaltstack", "restart_syscall",
                                          "getpid", "gettid", "tgkill", "exit", "exit_group"};
  std::set<std::string> actual;
  for (const AdmittedSyscall& row : AdmittedSyscalls()) actual.insert(std::string(row.name));
  EXPECT_EQ(actual, expected) << "a change to the allowlist needs its review in docs/syscall-admission.md";
}

TEST(PolicyTable, RenderedSectionIsReplacedBetweenLineStartMarkers) {
  std::string doc = "intro `<!-- BEGIN basal-policy-dump markdown -->\n` quoted\n" + std::string(kRenderedBeginMarker) +
                    "stale\n" + std::string(kRenderedEndMarker) + "after\n";
  std::string error;
  ASSERT_TRUE(ReplaceRenderedSection(doc, error)) << error;
  EXPECT_EQ(doc, "intro `<!-- BEGIN basal-policy-dump markdown -->\n` quoted\n" + std::string(kRenderedBeginMarker) +
                     RenderPolicyMarkdown() + std::string(kRenderedEndMarker) + "after\n");
  std::string missing = "no markers\n";
  EXPECT_FALSE(ReplaceRenderedSection(missing, error));
}

TEST(PolicyTable, DocsAreRenderedFromTheTable) {
  const std::string path = std::string(BASAL_DOCS_DIR) + "/syscall-admission.md";
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  const std::string doc = s.str();
  ASSERT_FALSE(doc.empty()) << "cannot read " << path;
  std::string rendered = doc;
  std::string error;
  ASSERT_TRUE(ReplaceRenderedSection(rendered, error)) << path << ": " << error;
  EXPECT_EQ(doc, rendered) << "docs/syscall-admission.md is out of date: regenerate it with "
                              "basal-policy-dump update-doc docs/syscall-admission.md";
}

}  // namespace
}  // namespace basal::confinement
