// The worker's poll-before-block window (src/worker/wait_spin.h): it grows while frames come soon
// after a wait begins, shrinks to nothing while they do not, and never passes its bound.
#include "worker/wait_spin.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>

namespace basal::worker {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

TEST(WaitSpinTest, StartsWithoutPollingAndGrowsWhileFramesComeSoon) {
  WaitSpin s;
  EXPECT_EQ(s.window, microseconds(0));  // a new worker blocks at once, as before
  s.After(microseconds(40), false);      // blocked, and the frame came within 100 us
  EXPECT_EQ(s.window, WaitSpin::kGrowStart);
  s.After(microseconds(40), false);
  EXPECT_EQ(s.window, microseconds(20));
  s.After(microseconds(40), false);
  EXPECT_EQ(s.window, microseconds(40));
  s.After(microseconds(60), false);
  EXPECT_EQ(s.window, WaitSpin::kMax);  // doubled to 80, held at the bound
  s.After(microseconds(99), false);
  EXPECT_EQ(s.window, WaitSpin::kMax);
}

TEST(WaitSpinTest, AFrameCaughtWhilePollingKeepsTheWindow) {
  WaitSpin s;
  s.window = microseconds(20);
  s.After(microseconds(5), true);
  EXPECT_EQ(s.window, microseconds(20));
}

TEST(WaitSpinTest, LongWaitsShrinkItToNothing) {
  WaitSpin s;
  s.window = WaitSpin::kMax;
  s.After(milliseconds(2), false);  // an http.fetch, an idle worker: the poll was wasted
  EXPECT_EQ(s.window, microseconds(25));
  s.After(WaitSpin::kShortWait, false);  // exactly the threshold counts as long
  EXPECT_EQ(s.window, microseconds(12));
  s.After(milliseconds(1), false);
  EXPECT_EQ(s.window, microseconds(6));
  s.After(milliseconds(1), false);  // 3 us is below kGrowStart / 2: none
  EXPECT_EQ(s.window, microseconds(0));
  s.After(std::chrono::seconds(10), false);
  EXPECT_EQ(s.window, microseconds(0));
}

TEST(WaitSpinTest, NoSequenceOfWaitsTakesItPastItsBound) {
  WaitSpin s;
  uint64_t x = 0x9e3779b97f4a7c15ULL;
  for (int i = 0; i < 100000; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    const auto waited = microseconds(static_cast<int64_t>(x % 400));
    s.After(waited, (x >> 32) % 3 == 0);
    ASSERT_GE(s.window, microseconds(0));
    ASSERT_LE(s.window, WaitSpin::kMax) << "after wait " << i;
  }
}

}  // namespace
}  // namespace basal::worker
