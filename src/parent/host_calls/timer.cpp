// The `timer.sleep` host call (see timer.h).
#include "parent/host_calls/timer.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace basal {

void TimerSleeps::Sleep(const HostCallContext& context, const Json& args, HostCallReply reply) {
  const auto ms = args.is_object() && args.size() == 1 ? args.find("ms") : args.end();
  if (!args.is_object() || args.size() != 1 || ms == args.end() || !ms->is_number_integer() || *ms < 0 ||
      *ms > kMaxSleepMs) {
    return reply.Error("TypeError", "timer.sleep: arguments must be {\"ms\": an integer from 0 to " +
                                        std::to_string(kMaxSleepMs) + "} (got " +
                                        args.dump(-1, ' ', false, Json::error_handler_t::replace).substr(0, 60) + ")");
  }
  const int64_t activation = context.activation_id;
  if (auto old = sleeps_.find(activation); old != sleeps_.end()) {
    // One sleep per activation: the worker asks for a sooner wake-up; the old sleep ends now.
    Held superseded = std::move(old->second);
    sleeps_.erase(old);
    loop_.Cancel(superseded.timer);
    superseded.reply->Ok(Json{{"superseded", true}});
  }
  Held h;
  h.call_id = context.call_id;
  h.reply = std::make_unique<HostCallReply>(std::move(reply));
  // The loop's timers hold only ids: a sleep cancelled or superseded leaves nothing behind.
  std::weak_ptr<TimerSleeps> self = weak_from_this();
  const int64_t call = context.call_id;
  // In a durable run the sleep ends at a point of the run's clock (docs/durable.md): a resumed run's
  // timer that was due while its host was down fires at once.
  auto delay = std::chrono::microseconds(ms->get<int64_t>() * 1000);
  if (context.durable_clock_us > 0) {
    const int64_t now = std::chrono::duration_cast<std::chrono::microseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    delay = std::chrono::microseconds(std::max<int64_t>(0, context.durable_clock_us + ms->get<int64_t>() * 1000 - now));
  }
  h.timer = loop_.At(EventLoop::Clock::now() + delay, [self, activation, call] {
    if (auto s = self.lock()) s->Wake(activation, call);
  });
  sleeps_[activation] = std::move(h);
}

void TimerSleeps::Wake(int64_t activation_id, int64_t call_id) {
  auto it = sleeps_.find(activation_id);
  if (it == sleeps_.end() || it->second.call_id != call_id) return;
  Held h = std::move(it->second);
  sleeps_.erase(it);
  h.reply->Ok(Json::object());
}

void TimerSleeps::ActivationEnded(int64_t activation_id) {
  auto it = sleeps_.find(activation_id);
  if (it == sleeps_.end()) return;
  Held h = std::move(it->second);
  sleeps_.erase(it);
  loop_.Cancel(h.timer);
  h.reply->Error("ActivationEnded", "timer.sleep: the activation ended before the sleep did");
}

Result<void> RegisterTimerHostCall(HostCallRegistry& registry, std::shared_ptr<TimerSleeps> sleeps) {
  if (!sleeps) return MakeError(ErrorCode::kInvalidArgument, "host call \"timer.sleep\": no TimerSleeps given");
  HostCallSpec spec;
  spec.name = "timer.sleep";
  spec.effect = Effect::kPure;  // waiting changes nothing outside the activation
  spec.needs_grant = false;     // time is not an authority: the deadline bounds every wait
  spec.journaled = false;
  // Its grants are all {} (no check_grant): two of them always accept the same calls.
  spec.compare_grant = [](const Json&, const Json&) { return std::vector<ConstraintChange>{}; };
  spec.handler = [sleeps](const HostCallContext& context, const Json& args, HostCallReply reply) {
    sleeps->Sleep(context, args, std::move(reply));
  };
  spec.activation_ended = [sleeps](int64_t activation_id) { sleeps->ActivationEnded(activation_id); };
  return registry.Register(std::move(spec));
}

}  // namespace basal
