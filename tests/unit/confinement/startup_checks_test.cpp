// The startup checks' parsers on synthetic /proc text, and the live checks in this (unconfined,
// single-threaded) test process where they are meaningful.
#include "confinement/linux/startup_checks.h"

#include <unistd.h>

#include <string>
#include <string_view>

#include <gtest/gtest.h>

namespace basal::confinement {
namespace {

TEST(StartupChecks, StatMustDescribeThisProcess) {
  EXPECT_TRUE(CheckStatText("1234 (ck-basal-worker) S 1 ...", 1234).ok());
  const StepStatus s = CheckStatText("1 (init) S 0 ...", 1234);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.reason().find("describes pid 1, not this process (pid 1234)"), std::string::npos) << s.reason();
  EXPECT_FALSE(CheckStatText("", 1).ok());
  EXPECT_FALSE(CheckStatText("x (y)", 1).ok());
}

// /proc/self/stat as the kernel writes it, with `threads` in field 20 and `comm` as the name.
std::string StatLine(std::string_view comm, std::string_view threads) {
  return "4242 (" + std::string(comm) + ") R 4241 4242 4241 0 -1 4194560 120 0 0 0 0 0 0 0 20 0 " + std::string(threads) +
         " 0 123456 2990080 200 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 17 1 0 0 0 0 0\n";
}

TEST(StartupChecks, ExactlyOneThread) {
  EXPECT_TRUE(CheckStatThreadsText(StatLine("ck-basal-worker", "1")).ok());
  const StepStatus two = CheckStatThreadsText(StatLine("ck-basal-worker", "2"));
  ASSERT_FALSE(two.ok());
  EXPECT_EQ(two.reason(), "the worker has 2 threads, not exactly one");
  EXPECT_FALSE(CheckStatThreadsText(StatLine("w", "12")).ok());
  // The name may hold spaces and parentheses: fields are counted from its last ')'.
  EXPECT_TRUE(CheckStatThreadsText(StatLine("a) 1 2 3 (b", "1")).ok());
  EXPECT_FALSE(CheckStatThreadsText(StatLine("a) 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 (b", "2")).ok());
  EXPECT_FALSE(CheckStatThreadsText(StatLine("w", "1x")).ok());
  EXPECT_FALSE(CheckStatThreadsText("4242 (w) R 1 2 3\n").ok());
  EXPECT_FALSE(CheckStatThreadsText("4242 w R 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20\n").ok());
  EXPECT_FALSE(CheckStatThreadsText("").ok());
}

TEST(StartupChecks, NoWritableExecutableMappingAndNoExecutableStack) {
  const char* good =
      "55d0c0000000-55d0c0001000 r--p 00000000 fd:01 1 /usr/bin/w\n"
      "55d0c0001000-55d0c0002000 r-xp 00001000 fd:01 1 /usr/bin/w\n"
      "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]\n"
      "7ffd00100000-7ffd00102000 r-xp 00000000 00:00 0                          [vdso]\n";
  EXPECT_TRUE(CheckMapsText(good).ok());
  const StepStatus shared = CheckMapsText("7f0000000000-7f0000001000 rwxs 00000000 00:01 5 /memfd:x (deleted)\n");
  ASSERT_FALSE(shared.ok());
  EXPECT_EQ(shared.reason(), "mapping 7f0000000000-7f0000001000 is shared, writable and executable (rwxs)");
  const StepStatus priv = CheckMapsText("7f0000000000-7f0000001000 rwxp 00000000 00:00 0\n");
  ASSERT_FALSE(priv.ok());
  EXPECT_EQ(priv.reason(), "mapping 7f0000000000-7f0000001000 is writable and executable (rwxp)");
  const StepStatus stack = CheckMapsText("7ffd00000000-7ffd00021000 r-xp 00000000 00:00 0   [stack]\n");
  ASSERT_FALSE(stack.ok());
  EXPECT_EQ(stack.reason(), "the stack 7ffd00000000-7ffd00021000 is executable (r-xp)");
  EXPECT_TRUE(CheckMapsText("7f0000000000-7f0000001000 rw-s 00000000 00:01 5 /dev/shm/x\n").ok());
  EXPECT_FALSE(CheckMapsText("garbage\n").ok());
}

TEST(StartupChecks, LiveChecksThatHoldInTheTestProcess) {
  EXPECT_TRUE(CheckProcIsGenuine().ok()) << CheckProcIsGenuine().reason();
  EXPECT_TRUE(CheckReadImpliesExecOff().ok()) << CheckReadImpliesExecOff().reason();
  EXPECT_TRUE(CheckMappings().ok()) << CheckMappings().reason();
  EXPECT_TRUE(CheckSingleThreaded().ok()) << CheckSingleThreaded().reason();  // gtest starts no thread
}

}  // namespace
}  // namespace basal::confinement
