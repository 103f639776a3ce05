// EventLoop::SpinWhileOnly, the module's short wait for a lone start's worker before it commits
// (module.cpp, ReadBegunWorker): it sees the one descriptor it waits for, and gives up at once when
// anything else wants the loop (another descriptor, posted work, a due timer) or when its time is up.
// It handles nothing: what it saw is still there for the next pass. And RunOnce's busy poll in its
// modes (BusyPollTest, below).
#include <gtest/gtest.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <thread>

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

// RunOnce's busy poll: in either polling mode the pass sees a descriptor that another thread readies
// while it polls, without the before-wait hook (which runs only when the pass found nothing and
// would sleep); with kNo the same pass finds nothing and runs the hook instead. The yielding mode
// is the one the module uses with as many busy workers as CPUs (BusyPollFor, pool_test.cpp).
class BusyPollTest : public SpinWhileOnlyTest {
 protected:
  // One pass that would wait up to 10 s, polling for up to 10 s in `mode`, while another thread
  // writes to mine_ after a millisecond. Returns how often the before-wait hook ran.
  int PassWhileAnotherThreadWrites(EventLoop::BusyPoll mode) {
    int asked = 0, before_wait = 0;
    loop_->set_busy_poll(10s, [&] {
      ++asked;
      return mode;
    });
    loop_->set_before_wait([] { return true; }, [&] { ++before_wait; });
    std::thread writer([this] {
      std::this_thread::sleep_for(1ms);
      mine_.Put();
    });
    loop_->RunOnce(10'000ms);
    writer.join();
    EXPECT_EQ(asked, 1) << "asked once, by the pass that would wait";
    return before_wait;
  }
};

TEST_F(BusyPollTest, EitherPollingModeSeesWhatArrivesWhileItPolls) {
  for (const auto mode : {EventLoop::BusyPoll::kSpin, EventLoop::BusyPoll::kYielding}) {
    mine_seen_ = 0;
    EXPECT_EQ(PassWhileAnotherThreadWrites(mode), 0) << static_cast<int>(mode) << ": it found the frame, not nothing";
    EXPECT_EQ(mine_seen_, 1) << static_cast<int>(mode);
    char c;
    ASSERT_EQ(::read(mine_.r, &c, 1), 1);
  }
}

TEST_F(BusyPollTest, WithoutPollingThePassFindsNothingAndRunsTheBeforeWaitHook) {
  EXPECT_EQ(PassWhileAnotherThreadWrites(EventLoop::BusyPoll::kNo), 1);
  EXPECT_EQ(mine_seen_, 0);
  loop_->set_before_wait(nullptr, nullptr);
  loop_->RunOnce(0ms);
  EXPECT_EQ(mine_seen_, 1) << "the next pass";
}

TEST_F(BusyPollTest, APassThatWouldNotWaitDoesNotAskOrPoll) {
  int asked = 0;
  loop_->set_busy_poll(10s, [&] {
    ++asked;
    return EventLoop::BusyPoll::kYielding;
  });
  const auto t0 = std::chrono::steady_clock::now();
  loop_->RunOnce(0ms);
  EXPECT_EQ(asked, 0);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s) << "not after its 10 s";
}

TEST_F(BusyPollTest, TheYieldingPollEndsAtItsPeriodAndTheLoopThenWaits) {
  loop_->set_busy_poll(2ms, [] { return EventLoop::BusyPoll::kYielding; });
  const auto t0 = std::chrono::steady_clock::now();
  loop_->RunOnce(5ms);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 5ms) << "polled 2 ms, then waited the rest";
  EXPECT_EQ(mine_seen_, 0);
}

// The poll window adapts (set_busy_poll): it doubles, up to its max, after a wait whose poll ran out
// and that something still ended within twice the max, stays when the poll itself finds what
// comes, and halves, not below its period, after a wait that nothing ended. The poll reads a clock
// the test moves (set_poll_clock_for_test), 100 us a read: what "comes" is written by that clock
// at the moment the poll runs out (so the wait that follows ends at once), then the clock is
// either soon after or far past twice the max. No thread races the poll (CI's first run of this
// test, with another thread writing 2-3 ms after the window on a loaded machine, failed).
TEST_F(BusyPollTest, ThePollWindowGrowsWhileWhatComesComesSoonAfterItAndShrinksWhenNothingDoes) {
  using Clock = EventLoop::Clock;
  struct Pass {
    std::optional<std::chrono::microseconds> write_after;  // write this long after the poll's start
    std::chrono::microseconds then{0};                      // and move the clock on this much
  };
  Pass pass;
  bool wrote = false;
  std::optional<Clock::time_point> poll_start;
  Clock::time_point t = Clock::now();
  loop_->set_poll_clock_for_test([&] {
    t += 100us;
    if (!poll_start) {
      poll_start = t;
    } else if (pass.write_after && t - *poll_start >= *pass.write_after) {
      pass.write_after.reset();
      mine_.Put();
      wrote = true;
      t += pass.then;
    }
    return t;
  });
  auto run = [&](Pass p, bool already_there = false) {
    pass = p;
    wrote = already_there;
    if (already_there) mine_.Put();  // the poll's first look finds it
    poll_start.reset();
    loop_->RunOnce(5ms);
    char c;
    if (wrote) {
      ASSERT_EQ(::read(mine_.r, &c, 1), 1);
    }
  };
  const auto soon = [&] { return Pass{loop_->poll_window(), 0us}; };  // just as the poll runs out
  const auto far = [&] { return Pass{loop_->poll_window(), 33ms}; };  // past twice the max (16 ms)
  loop_->set_busy_poll(1ms, [] { return EventLoop::BusyPoll::kYielding; }, 8ms);
  EXPECT_EQ(loop_->poll_window(), 1ms);
  for (const auto grown : {2ms, 4ms, 8ms, 8ms}) {  // it grows up to its max and stays there
    run(soon());
    EXPECT_EQ(loop_->poll_window(), grown);
  }
  run(Pass{}, /*already_there=*/true);
  EXPECT_EQ(loop_->poll_window(), 8ms);
  run(far());  // came, but too long after: as if nothing had
  EXPECT_EQ(loop_->poll_window(), 4ms);
  for (const auto expected : {2ms, 1ms, 1ms}) {
    run(Pass{});  // nothing comes within the pass's 5 ms
    EXPECT_EQ(loop_->poll_window(), expected);
  }
  EXPECT_EQ(mine_seen_, 6);
  loop_->set_busy_poll(2ms, [] { return EventLoop::BusyPoll::kYielding; });  // no max: the period
  run(soon());
  EXPECT_EQ(loop_->poll_window(), 2ms);
  // While `windowed` says no (the module: a worker is starting), a pass polls its period only and
  // the window neither applies nor moves.
  bool windowed = false;
  loop_->set_busy_poll(1ms, [] { return EventLoop::BusyPoll::kYielding; }, 8ms, [&] { return windowed; });
  run(soon());
  EXPECT_EQ(loop_->poll_window(), 1ms);
  windowed = true;
  run(soon());
  EXPECT_EQ(loop_->poll_window(), 2ms);
  windowed = false;
  run(Pass{});
  EXPECT_EQ(loop_->poll_window(), 2ms);
}

}  // namespace
}  // namespace basal::testing
