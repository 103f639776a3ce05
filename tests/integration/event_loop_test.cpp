// EventLoop::SpinWhileOnly, the module's short wait for a lone start's worker before it commits
// (module.cpp, ReadBegunWorker): it sees the one descriptor it waits for, and gives up at once when
// anything else wants the loop (another descriptor, posted work, a due timer) or when its time is up.
// It handles nothing: what it saw is still there for the next pass.
#include <gtest/gtest.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <chrono>

#include "parent/loop/event_loop.h"

namespace basal::testing {
namespace {

using namespace std::chrono_literals;

struct Pipe {
  int r = -1, w = -1;
  Pipe() {
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    r = fds[0];
    w = fds[1];
  }
  ~Pipe() {
    ::close(r);
    ::close(w);
  }
  void Put() { EXPECT_EQ(::write(w, "x", 1), 1); }
};

class SpinWhileOnlyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto l = EventLoop::Create();
    ASSERT_TRUE(l) << l.error().message;
    loop_ = std::move(*l);
    ASSERT_TRUE(loop_->Watch(mine_.r, EPOLLIN, [this](uint32_t) { ++mine_seen_; }));
    ASSERT_TRUE(loop_->Watch(other_.r, EPOLLIN, [this](uint32_t) { ++other_seen_; }));
  }
  std::unique_ptr<EventLoop> loop_;
  Pipe mine_, other_;
  int mine_seen_ = 0, other_seen_ = 0;
};

TEST_F(SpinWhileOnlyTest, SeesItsDescriptorAndLeavesItForTheNextPass) {
  mine_.Put();
  EXPECT_TRUE(loop_->SpinWhileOnly(mine_.r, 50ms));
  EXPECT_EQ(mine_seen_, 0) << "it handles nothing";
  loop_->RunOnce(0ms);
  EXPECT_EQ(mine_seen_, 1) << "the next pass still finds it ready";
}

TEST_F(SpinWhileOnlyTest, GivesUpWhenAnotherDescriptorIsReadyEvenWithItsOwn) {
  other_.Put();
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(loop_->SpinWhileOnly(mine_.r, 10s));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s) << "at once, not after its 10 s";
  mine_.Put();
  EXPECT_FALSE(loop_->SpinWhileOnly(mine_.r, 10s));
  loop_->RunOnce(0ms);
  EXPECT_EQ(other_seen_, 1);
  EXPECT_EQ(mine_seen_, 1);
}

TEST_F(SpinWhileOnlyTest, GivesUpForPostedWorkAndForADueTimer) {
  bool ran = false;
  loop_->Post([&] { ran = true; });
  EXPECT_FALSE(loop_->SpinWhileOnly(mine_.r, 10s));
  loop_->RunOnce(0ms);
  EXPECT_TRUE(ran);
  bool fired = false;
  loop_->At(std::chrono::steady_clock::now(), [&] { fired = true; });
  EXPECT_FALSE(loop_->SpinWhileOnly(mine_.r, 10s));
  loop_->RunOnce(0ms);
  EXPECT_TRUE(fired);
}

TEST_F(SpinWhileOnlyTest, ReturnsFalseOnceItsTimeIsUpAndForAnUnwatchedDescriptor) {
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(loop_->SpinWhileOnly(mine_.r, 2ms));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 2ms);
  Pipe unwatched;
  unwatched.Put();
  EXPECT_FALSE(loop_->SpinWhileOnly(unwatched.r, 10s));
}

}  // namespace
}  // namespace basal::testing
