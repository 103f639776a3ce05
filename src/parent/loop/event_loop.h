// The parent's event loop: descriptors, timers, and work posted from any thread, on one thread.
//
//   auto loop = EventLoop::Create();                       // Result<std::unique_ptr<EventLoop>>
//   (*loop)->Watch(fd, EPOLLIN, [](uint32_t events) { ... });
//   (*loop)->At(EventLoop::Clock::now() + 1s, [] { ... });
//   std::thread([&] { (*loop)->Post([] { ... }); }).detach();   // wakes the loop (eventfd)
//   (*loop)->RunOnce(std::chrono::milliseconds(100));
//
// A pass (RunOnce) first runs due timers, posted work and the `after_pass` hook, then waits, then
// runs the ready descriptors' callbacks, due timers, posted work and `after_pass` again. The module
// commits the journal in `after_pass` and only then answers (group commit). Every room of
// the parent runs on the thread that calls RunOnce; only Post() and Wake() may be called from
// other threads. A callback may watch, unwatch and post freely, including for its own descriptor.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "basal/result.h"

namespace basal {

class EventLoop {
 public:
  using Clock = std::chrono::steady_clock;
  using FdCallback = std::function<void(uint32_t events)>;
  using TimerId = std::pair<Clock::time_point, uint64_t>;

  static Result<std::unique_ptr<EventLoop>> Create();
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Level-triggered epoll events (EPOLLIN, EPOLLOUT). One watch per descriptor.
  Result<void> Watch(int fd, uint32_t events, FdCallback callback);
  void Modify(int fd, uint32_t events);
  void Unwatch(int fd);  // safe for a descriptor that is not watched
  TimerId At(Clock::time_point when, std::function<void()> fn);
  void Cancel(const TimerId& id);  // safe for a timer that already ran

  // Any thread. Runs `fn` on the loop thread during its next pass, and wakes the loop for it.
  void Post(std::function<void()> fn);
  // Any thread. Makes a waiting RunOnce return soon.
  void Wake();

  // How a pass may poll before it sleeps (set_busy_poll's `mode`, asked at each pass that would wait).
  enum class BusyPoll {
    kNo,
    // epoll_wait without waiting, back to back, for up to the period: the loop keeps its CPU.
    kSpin,
    // The same with sched_yield between two looks: a task runnable on the loop's CPU (a worker the
    // loop woke there) runs first, and the loop looks again when it stops or at once when none is
    // there. For a loop that would otherwise sleep while every CPU runs a worker (module.cpp).
    kYielding,
  };

  // Waits up to `max_wait` (less if a timer is due sooner) for something to do, does it, then runs
  // after_pass. Busy-polls first for up to its poll window, as busy_poll_mode() says.
  void RunOnce(std::chrono::milliseconds max_wait);

  void set_after_pass(std::function<void()> fn) { after_pass_ = std::move(fn); }
  // Work the pass left for later that must be done before the loop blocks (the module's commit
  // of a batch it grouped across passes). While pending() says so, RunOnce first looks without
  // waiting; only when nothing is ready does it run run() and, instead of blocking, return (run()
  // may have made work: the next pass sees it).
  void set_before_wait(std::function<bool()> pending, std::function<void()> run) {
    before_wait_pending_ = std::move(pending);
    before_wait_ = std::move(run);
  }
  // Called when a wait ends, before its events are handled (a process paused past a lease learns
  // it before it acts on anything that arrived meanwhile).
  void set_after_wait(std::function<void()> fn) { after_wait_ = std::move(fn); }
  // The poll window starts at `period` and adapts between it and `max` as the worker's does
  // (src/worker/wait_spin.h, haltpoll's rule): a wait that polled its whole window and then blocked
  // doubles it when something still came within twice `max` of the wait's start, and halves it (not
  // below `period`) when nothing did; a wait that found something while polling leaves it. So the
  // loop polls through an exchange whose events come a little apart (a loopback http.fetch: its
  // connect, its request, its answer) and back at `period` once they come far apart (a remote
  // server, a timer). `max` below `period` is `period`. While `windowed` says no (asked with
  // `mode`), a pass polls for `period` only and leaves the window as it is.
  void set_busy_poll(std::chrono::microseconds period, std::function<BusyPoll()> mode,
                     std::chrono::microseconds max = std::chrono::microseconds(0),
                     std::function<bool()> windowed = nullptr) {
    busy_poll_ = period;
    busy_poll_max_ = std::max(max, period);
    poll_window_ = period;
    busy_poll_mode_ = std::move(mode);
    busy_poll_windowed_ = std::move(windowed);
  }
  std::chrono::microseconds poll_window() const { return poll_window_; }
  // Tests only: the clock the busy poll reads (its window's end, and how soon after its start a
  // wait ended), so that a test decides what the poll sees instead of racing a thread against it.
  // Null: steady_clock.
  void set_poll_clock_for_test(std::function<Clock::time_point()> clock) { poll_clock_ = std::move(clock); }
  // Spins (epoll_wait without waiting) for up to `max` while nothing but `fd` can be ready: true
  // once `fd` is readable and nothing else is, false as soon as any other descriptor is ready, work
  // is posted or a timer is due, or when `max` has passed. Handles nothing (the loop's descriptors
  // are level-triggered: whatever was seen is reported again to the next pass). For the module's
  // end of pass, which may wait this long for a lone start's worker before it commits.
  bool SpinWhileOnly(int fd, std::chrono::microseconds max);
  // The thread that last ran a pass (or created the loop): where loop-only calls belong.
  bool OnLoopThread() const { return std::this_thread::get_id() == loop_thread_.load(); }

 private:
  EventLoop() = default;
  struct Watched {
    int fd;
    FdCallback callback;
  };
  void RunTimers();
  void RunPosted();

  int epfd_ = -1;
  int wake_fd_ = -1;
  uint64_t next_token_ = 1;  // epoll data: a token, never a pointer, so an unwatched fd's stale event is dropped
  std::unordered_map<uint64_t, Watched> by_token_;
  std::unordered_map<int, uint64_t> token_of_fd_;
  std::map<TimerId, std::function<void()>> timers_;
  uint64_t next_timer_ = 1;
  std::mutex posted_mu_;
  std::vector<std::function<void()>> posted_;
  std::function<void()> after_pass_;
  std::function<bool()> before_wait_pending_;
  std::function<void()> before_wait_;
  std::function<void()> after_wait_;
  std::chrono::microseconds busy_poll_{0};
  std::chrono::microseconds busy_poll_max_{0};
  std::chrono::microseconds poll_window_{0};  // busy_poll_ <= poll_window_ <= busy_poll_max_
  std::function<BusyPoll()> busy_poll_mode_;
  std::function<bool()> busy_poll_windowed_;
  std::function<Clock::time_point()> poll_clock_;  // set_poll_clock_for_test
  Clock::time_point PollNow() const { return poll_clock_ ? poll_clock_() : Clock::now(); }
  std::atomic<std::thread::id> loop_thread_{std::this_thread::get_id()};  // read by other threads
};

}  // namespace basal
