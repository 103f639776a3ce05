// The `timer.sleep` host call: the parent, which owns time, serves a flow's setTimeout and
// setInterval (src/worker/web_timers.cpp), so the worker needs no clock to wait on and no new
// system call. It needs no grant, is pure, and is not journaled (HostCallSpec::journaled): a
// setInterval(f, 1) that runs for a minute must not write 60,000 call records.
//
//   auto sleeps = std::make_shared<basal::TimerSleeps>(loop);
//   auto r = basal::RegisterTimerHostCall(registry, sleeps);   // at Module::Open
//   // a flow: await host.call("timer.sleep", {ms: 250})  ->  {} after 250 ms
//
// `timer.sleep {"ms": 0..2147483647}` answers {} once `ms` have passed on the parent's loop. An
// activation holds at most ONE sleep: a new one answers the one in flight at once with
// {"superseded": true}. The worker keeps one sleep for its earliest timer and starts another when
// a timer due sooner appears, so however many timers a script sets, the parent holds one loop
// timer per activation (and the calls_in_flight budget is never spent on waiting). When the
// activation ends its sleep is cancelled (HostCallSpec::activation_ended): nothing outlives it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>

#include "basal/host_call.h"
#include "basal/result.h"
#include "parent/loop/event_loop.h"

namespace basal {

// The sleeps in flight, one per activation at most, each a timer on the loop. Loop thread only.
class TimerSleeps : public std::enable_shared_from_this<TimerSleeps> {
 public:
  explicit TimerSleeps(EventLoop& loop) : loop_(loop) {}
  TimerSleeps(const TimerSleeps&) = delete;
  TimerSleeps& operator=(const TimerSleeps&) = delete;

  // The handler: a TypeError for bad arguments, else the reply is kept until the time has passed.
  void Sleep(const HostCallContext& context, const Json& args, HostCallReply reply);
  // The activation ended: its sleep's loop timer is cancelled and its reply answered (into the
  // abandoned call, so it goes nowhere).
  void ActivationEnded(int64_t activation_id);
  // Loop timers held now (tests: none may outlive its activation).
  size_t held() const { return sleeps_.size(); }

 private:
  struct Held {
    int64_t call_id = 0;
    EventLoop::TimerId timer;
    std::unique_ptr<HostCallReply> reply;
  };
  void Wake(int64_t activation_id, int64_t call_id);

  EventLoop& loop_;
  std::map<int64_t, Held> sleeps_;  // by activation
};

// The largest `ms`: HTML's timer delays are 32-bit signed (setTimeout clamps to this range).
inline constexpr int64_t kMaxSleepMs = 2147483647;

// Registers `timer.sleep` served by `sleeps`. Fails if the name is taken.
Result<void> RegisterTimerHostCall(HostCallRegistry& registry, std::shared_ptr<TimerSleeps> sleeps);

}  // namespace basal
