#include "parent/loop/event_loop.h"

#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace basal {

Result<std::unique_ptr<EventLoop>> EventLoop::Create() {
  std::unique_ptr<EventLoop> loop(new EventLoop());
  loop->epfd_ = epoll_create1(EPOLL_CLOEXEC);
  if (loop->epfd_ < 0) return MakeError(ErrorCode::kIo, std::string("epoll_create1: ") + std::strerror(errno));
  loop->wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (loop->wake_fd_ < 0) return MakeError(ErrorCode::kIo, std::string("eventfd: ") + std::strerror(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 0;  // token 0: the wake-up descriptor
  if (epoll_ctl(loop->epfd_, EPOLL_CTL_ADD, loop->wake_fd_, &ev) != 0)
    return MakeError(ErrorCode::kIo, std::string("epoll_ctl(eventfd): ") + std::strerror(errno));
  return loop;
}

EventLoop::~EventLoop() {
  if (wake_fd_ >= 0) ::close(wake_fd_);
  if (epfd_ >= 0) ::close(epfd_);
}

Result<void> EventLoop::Watch(int fd, uint32_t events, FdCallback callback) {
  Unwatch(fd);
  const uint64_t token = next_token_++;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = token;
  if (epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) != 0)
    return MakeError(ErrorCode::kIo, "epoll_ctl(ADD, fd " + std::to_string(fd) + "): " + std::strerror(errno));
  by_token_[token] = Watched{fd, std::move(callback)};
  token_of_fd_[fd] = token;
  return Ok();
}

void EventLoop::Modify(int fd, uint32_t events) {
  auto it = token_of_fd_.find(fd);
  if (it == token_of_fd_.end()) return;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = it->second;
  epoll_ctl(epfd_, EPOLL_CTL_MOD, fd, &ev);
}

void EventLoop::Unwatch(int fd) {
  auto it = token_of_fd_.find(fd);
  if (it == token_of_fd_.end()) return;
  epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr);
  by_token_.erase(it->second);
  token_of_fd_.erase(it);
}

EventLoop::TimerId EventLoop::At(Clock::time_point when, std::function<void()> fn) {
  TimerId id{when, next_timer_++};
  timers_.emplace(id, std::move(fn));
  return id;
}

void EventLoop::Cancel(const TimerId& id) { timers_.erase(id); }

void EventLoop::Post(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(posted_mu_);
    posted_.push_back(std::move(fn));
  }
  // From the loop's own thread nothing needs waking: RunOnce runs what was posted before it waits
  // (at its start, and after its callbacks), so the eventfd's write and read would be for nothing.
  if (!OnLoopThread()) Wake();
}

void EventLoop::Wake() {
  const uint64_t one = 1;
  // EAGAIN means the counter is already non-zero: the loop is awake anyway.
  ssize_t n;
  do n = ::write(wake_fd_, &one, sizeof one);
  while (n < 0 && errno == EINTR);
}

void EventLoop::RunTimers() {
  const auto now = Clock::now();
  // Only timers due now; a timer a callback adds for "now" runs on the next pass.
  std::vector<std::function<void()>> due;
  while (!timers_.empty() && timers_.begin()->first.first <= now) {
    due.push_back(std::move(timers_.begin()->second));
    timers_.erase(timers_.begin());
  }
  for (auto& fn : due) fn();
}

void EventLoop::RunPosted() {
  std::vector<std::function<void()>> batch;
  {
    std::lock_guard<std::mutex> lock(posted_mu_);
    batch.swap(posted_);
  }
  for (auto& fn : batch) fn();
}

bool EventLoop::SpinWhileOnly(int fd, std::chrono::microseconds max) {
  const auto found = token_of_fd_.find(fd);
  if (found == token_of_fd_.end()) return false;
  const uint64_t token = found->second;
  const auto until = Clock::now() + max;
  epoll_event events[64];
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(posted_mu_);
      if (!posted_.empty()) return false;
    }
    const auto now = Clock::now();
    if (!timers_.empty() && timers_.begin()->first.first <= now) return false;
    const int n = epoll_wait(epfd_, events, 64, 0);
    if (n < 0 && errno != EINTR) return false;
    bool mine = false;
    for (int i = 0; i < n; ++i) {
      if (events[i].data.u64 != token) return false;
      mine = true;
    }
    if (mine) return true;
    if (now >= until) return false;
  }
}

void EventLoop::RunOnce(std::chrono::milliseconds max_wait) {
  loop_thread_.store(std::this_thread::get_id());
  RunTimers();
  RunPosted();
  if (after_pass_) after_pass_();

  auto wait = std::max(max_wait, std::chrono::milliseconds(0));
  bool posted_pending;
  {
    std::lock_guard<std::mutex> lock(posted_mu_);
    posted_pending = !posted_.empty();
  }
  if (posted_pending) wait = std::chrono::milliseconds(0);
  if (!timers_.empty()) {
    const auto until = timers_.begin()->first.first - Clock::now();
    // Round up: waking a little late is fine, waking early only spins.
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(until);
    wait = std::clamp(ms, std::chrono::milliseconds(0), wait);
  }
  epoll_event events[64];
  int n = 0;
  const BusyPoll poll =
      wait.count() > 0 && busy_poll_.count() > 0 && busy_poll_mode_ ? busy_poll_mode_() : BusyPoll::kNo;
  Clock::time_point poll_start;
  bool poll_ran_out = false;  // polled its whole window and found nothing
  const bool windowed = poll != BusyPoll::kNo && (!busy_poll_windowed_ || busy_poll_windowed_());
  if (poll != BusyPoll::kNo) {
    poll_start = PollNow();
    const auto until = poll_start + (windowed ? poll_window_ : busy_poll_);
    for (;;) {
      n = epoll_wait(epfd_, events, 64, 0);
      if (n != 0) break;
      if (PollNow() >= until) {
        poll_ran_out = windowed;
        break;
      }
      if (poll == BusyPoll::kYielding) sched_yield();
    }
  }
  if (n == 0 && wait.count() > 0 && before_wait_pending_ && before_wait_pending_()) {
    n = epoll_wait(epfd_, events, 64, 0);
    if (n == 0) {
      before_wait_();
      wait = std::chrono::milliseconds(0);
    }
  }
  if (n == 0) {
    n = epoll_wait(epfd_, events, 64, static_cast<int>(std::min<int64_t>(wait.count(), 3'600'000)));
    if (poll_ran_out && wait.count() > 0) {
      // The window's rule (set_busy_poll). A wait that ended on a timer halves it.
      if (n > 0 && PollNow() - poll_start < 2 * busy_poll_max_)
        poll_window_ = std::min(poll_window_ * 2, busy_poll_max_);
      else
        poll_window_ = std::max(poll_window_ / 2, busy_poll_);
    }
  }
  if (after_wait_) after_wait_();
  for (int i = 0; i < n; ++i) {
    const uint64_t token = events[i].data.u64;
    if (token == 0) {
      uint64_t count;
      while (::read(wake_fd_, &count, sizeof count) > 0) {
      }
      continue;
    }
    auto it = by_token_.find(token);
    if (it == by_token_.end()) continue;  // unwatched by an earlier callback of this pass
    FdCallback cb = it->second.callback;  // a copy: the callback may unwatch itself
    cb(events[i].events);
  }
  RunTimers();
  RunPosted();
  if (after_pass_) after_pass_();
}

}  // namespace basal
