// Landlock: the rights an empty ruleset handles at each ABI, and allow/deny pairs in a forked
// child: each operation succeeds unconfined (the control) and is denied after the ruleset.
#include "confinement/linux/landlock.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include <gtest/gtest.h>

#include "child_process.h"
#include "confinement/linux/confine.h"
#include "confinement/linux/privileges.h"

namespace basal::confinement {
namespace {

using namespace landlock_rights;
using testing::ChildResult;
using testing::RunChild;

TEST(LandlockRights, EachAbiHandlesEverythingItKnows) {
  EXPECT_EQ(EmptyRulesetForAbi(1).attr.handled_access_fs, 0x1fffULL);
  EXPECT_EQ(EmptyRulesetForAbi(1).attr_size, 8u);
  EXPECT_EQ(EmptyRulesetForAbi(2).attr.handled_access_fs, 0x3fffULL);
  EXPECT_EQ(EmptyRulesetForAbi(3).attr.handled_access_fs, 0x7fffULL);
  EXPECT_EQ(EmptyRulesetForAbi(3).attr_size, 8u);
  EXPECT_EQ(EmptyRulesetForAbi(4).attr.handled_access_fs, 0x7fffULL);
  EXPECT_EQ(EmptyRulesetForAbi(4).attr.handled_access_net, kNetBindTcp | kNetConnectTcp);
  EXPECT_EQ(EmptyRulesetForAbi(4).attr_size, 16u);
  EXPECT_EQ(EmptyRulesetForAbi(5).attr.handled_access_fs, 0xffffULL);
  EXPECT_EQ(EmptyRulesetForAbi(5).attr.scoped, 0u);
  EXPECT_EQ(EmptyRulesetForAbi(6).attr.scoped, kScopeAbstractUnixSocket | kScopeSignal);
  EXPECT_EQ(EmptyRulesetForAbi(6).attr_size, 24u);
  // ABI 7 adds only restrict_self logging flags: the same rights as ABI 6.
  EXPECT_EQ(EmptyRulesetForAbi(7).attr.handled_access_fs, 0xffffULL);
  EXPECT_EQ(EmptyRulesetForAbi(7).attr.handled_access_net, 0x3ULL);
  EXPECT_EQ(EmptyRulesetForAbi(7).attr.scoped, 0x3ULL);
  EXPECT_EQ(EmptyRulesetForAbi(7).attr_size, 24u);
  EXPECT_EQ(EmptyRulesetForAbi(0).attr_size, 0u);
  EXPECT_EQ(EmptyRulesetForAbi(8).attr_size, 0u);
}

TEST(LandlockRights, KernelAbiIsReported) {
  const LandlockProbe probe = ProbeKernelLandlock();
  EXPECT_EQ(KernelLandlockAbi(), probe.abi);
  if (probe.abi == 0) {
    EXPECT_TRUE(probe.lacks_landlock) << probe.why_absent;
    GTEST_SKIP() << "this kernel has no Landlock: " << probe.why_absent;
  }
  EXPECT_TRUE(probe.why_absent.empty());
}

// Runs `op` (which returns 0 or an errno) unconfined and after the empty ruleset.
struct PairResult {
  int control;
  int confined;
};
PairResult RunPair(int (*op)()) {
  PairResult r{-1, -1};
  for (int confine = 0; confine < 2; ++confine) {
    const ChildResult c = RunChild({}, [&] {
      if (confine) {
        if (!SetNoNewPrivs().ok()) _exit(101);
        const int abi = std::min(KernelLandlockAbi(), kWorkerLandlockAbiMax);
        if (!RestrictSelfWithEmptyRuleset(abi).ok()) _exit(102);
      }
      _exit(op());
    });
    EXPECT_TRUE(WIFEXITED(c.status)) << c.Describe();
    (confine ? r.confined : r.control) = WEXITSTATUS(c.status);
  }
  return r;
}

class LandlockPairs : public ::testing::Test {
 protected:
  void Need(int abi) {
    if (testing::SanitizedBuild()) GTEST_SKIP() << "forked confinement tests are skipped in sanitizer builds";
    if (KernelLandlockAbi() < abi) GTEST_SKIP() << "needs Landlock ABI " << abi << ", kernel has " << KernelLandlockAbi();
  }
};

TEST_F(LandlockPairs, FileReadIsDenied) {
  Need(1);
  const PairResult r = RunPair([] {
    const int fd = open("/etc/passwd", O_RDONLY | O_CLOEXEC);
    return fd >= 0 ? 0 : errno;
  });
  EXPECT_EQ(r.control, 0);
  EXPECT_EQ(r.confined, EACCES);
}

TEST_F(LandlockPairs, FileCreateIsDenied) {
  Need(1);
  const PairResult r = RunPair([] {
    char path[] = "/tmp/basal-landlock-XXXXXX";
    const int fd = mkstemp(path);
    if (fd < 0) return errno;
    unlink(path);
    return 0;
  });
  EXPECT_EQ(r.control, 0);
  EXPECT_EQ(r.confined, EACCES);
}

TEST_F(LandlockPairs, TcpBindIsDenied) {
  Need(4);
  const PairResult r = RunPair([] {
    const int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) return errno;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 ? 0 : errno;
  });
  EXPECT_EQ(r.control, 0);
  EXPECT_EQ(r.confined, EACCES);
}

TEST_F(LandlockPairs, SignalOutsideTheDomainIsDenied) {
  Need(6);
  const PairResult r = RunPair([] { return kill(getppid(), 0) == 0 ? 0 : errno; });
  EXPECT_EQ(r.control, 0);
  EXPECT_EQ(r.confined, EPERM);
}

TEST_F(LandlockPairs, SignalToItselfIsAllowed) {
  Need(6);
  const PairResult r = RunPair([] { return kill(getpid(), 0) == 0 ? 0 : errno; });
  EXPECT_EQ(r.control, 0);
  EXPECT_EQ(r.confined, 0);
}

}  // namespace
}  // namespace basal::confinement
