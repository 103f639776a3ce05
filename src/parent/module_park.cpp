// Parked durable runs (docs/durable.md): sleep, waitForEvent and step, the retries of a failed
// attempt, waking parked runs and delivering events. Part of Module::Impl (module_impl.h).
//
// A run parks on a call: its handler keeps the reply, the gate lets go of the call (its record
// stays `started`, no answer), and once no other call of the activation waits for an answer the
// worker is let go and the activation ends `parked`. The run's row keeps when it wakes and where
// the parked call's answer falls in the order its worker gets answers. Waking writes that answer
// into the call's record (null for a sleep, the event for a wait, a TimeoutError for a wait that
// timed out) and queues the run to resume by replay: the script gets the answer exactly where it
// would have, in a new worker, days later if need be.
#include <algorithm>
#include <cmath>
#include <utility>

#include "parent/journal_value.h"
#include "parent/module_impl.h"
#include "parent/store/owner.h"
#include "protocol/messages.h"

namespace basal {

namespace {

constexpr int64_t kMaxParkMs = 365LL * 24 * 3600 * 1000;  // a sleep or a wait of at most 365 days
constexpr size_t kMaxEventNameBytes = 128;
constexpr size_t kMaxEventKeyBytes = 256;
constexpr size_t kMaxStepNameBytes = 256;

// Event names: what a sender types and an operator reads.
bool ValidEventName(std::string_view name) {
  if (name.empty() || name.size() > kMaxEventNameBytes) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == '-' || c == ':';
  });
}

std::optional<int64_t> Millis(const Json& args, const char* key) {
  auto it = args.find(key);
  if (it == args.end() || !it->is_number()) return std::nullopt;
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < 0 || v > static_cast<double>(kMaxParkMs)) return std::nullopt;
  return static_cast<int64_t>(std::ceil(v));
}

std::string NotDurable(const std::string& what) {
  return what + " parks a durable run: only a flow whose manifest says \"durable\": true may call it "
                "(docs/durable.md); in other flows use setTimeout within the activation's deadline";
}

Json EventJson(const RunEvent& e) {
  Json data = Json::parse(e.payload_json, nullptr, false);
  return Json{{"name", e.name},
              {"data", data.is_discarded() ? Json(e.payload_json) : data},
              {"sender", e.sender},
              {"received", UtcText(e.received_unix_us)},
              {"id", e.id}};
}

}  // namespace

Result<void> Module::Impl::RegisterRunHostCalls() {
  HostCallSpec sleep;
  sleep.name = "run.sleep";
  sleep.description = "Parks a durable run for {ms} milliseconds (at most 365 days): sleep(ms).";
  sleep.needs_grant = false;
  // Journaled `started` before it parks: a resume after a crash finds it in doubt and parks again,
  // at the same wake time (the run's clock at the call plus ms).
  sleep.effect = Effect::kIdempotent;
  sleep.handler = [this](const HostCallContext& ctx, const Json& args, HostCallReply reply) {
    if (ctx.durable_clock_us == 0) return reply.Error("TypeError", NotDurable("sleep()"));
    auto ms = Millis(args, "ms");
    if (!ms) return reply.Error("RangeError", "sleep(ms): ms must be a number of milliseconds from 0 to 31536000000 (365 days)");
    const int64_t wake = ctx.durable_clock_us + *ms * 1000;
    if (std::chrono::milliseconds(*ms) <= options.park_after) {
      // Short: a timer inside the activation, ending when the run's clock reaches the wake time.
      const int64_t wait_us = std::max<int64_t>(0, wake - NowUnixUs());
      auto shared = std::make_shared<HostCallReply>(std::move(reply));
      loop_->At(EventLoop::Clock::now() + std::chrono::microseconds(wait_us), [shared] { shared->Ok(nullptr); });
      return;
    }
    Parking p;
    p.kind = Parking::Kind::kSleep;
    p.call_id = ctx.call_id;
    p.wake_unix_us = wake;
    p.reply.emplace(std::move(reply));
    ParkCall(ctx, std::move(p));
  };
  if (auto r = registry.Register(std::move(sleep)); !r) return r.error();

  HostCallSpec wait;
  wait.name = "run.wait_event";
  wait.description = "Parks a durable run until an event {name} arrives (or {timeout_ms} passes): waitForEvent(name).";
  wait.needs_grant = false;
  wait.effect = Effect::kIdempotent;
  wait.handler = [this](const HostCallContext& ctx, const Json& args, HostCallReply reply) {
    if (ctx.durable_clock_us == 0) return reply.Error("TypeError", NotDurable("waitForEvent()"));
    auto name = args.find("name");
    if (name == args.end() || !name->is_string() || !ValidEventName(name->get_ref<const std::string&>()))
      return reply.Error("TypeError", "waitForEvent(name): name must be 1 to 128 characters of letters, digits, "
                                      "'.', '_', '-' and ':'");
    std::string key;
    if (auto k = args.find("key"); k != args.end() && !k->is_null()) {
      if (!k->is_string() || k->get_ref<const std::string&>().empty() || k->get_ref<const std::string&>().size() > kMaxEventKeyBytes)
        return reply.Error("TypeError", "waitForEvent(name, {key}): key must be a string of 1 to 256 bytes");
      key = k->get<std::string>();
    }
    int64_t timeout_ms = kMaxParkMs;
    if (args.contains("timeout_ms") && !args["timeout_ms"].is_null()) {
      auto t = Millis(args, "timeout_ms");
      if (!t) return reply.Error("RangeError", "waitForEvent(name, {timeoutMs}): timeoutMs must be a number of "
                                               "milliseconds from 0 to 31536000000 (365 days)");
      timeout_ms = *t;
    }
    auto live_it = live.find(ctx.activation_id);
    if (live_it == live.end() || live_it->second->run_id == 0)
      return reply.Error("HostError", "waitForEvent(): the activation has no run");
    const RunId run = live_it->second->run_id;
    // An event that came first is kept for the run: delivered now.
    auto taken = store->runs().TakeRunEvent(run, ctx.flow, name->get<std::string>(), key, NowUnixUs(),
                                            ctx.activation_id, ctx.call_id);
    if (!taken) {
      FailBatch(taken.error().message);
      return reply.Error("HostError", "waitForEvent(): the journal could not be read: " + taken.error().message);
    }
    if (*taken) return reply.Ok(EventJson(**taken));
    if (timeout_ms == 0)
      return reply.Error("TimeoutError", "waitForEvent(\"" + name->get<std::string>() + "\"): no event (timeoutMs 0)");
    Parking p;
    p.kind = Parking::Kind::kWait;
    p.call_id = ctx.call_id;
    p.wake_unix_us = ctx.durable_clock_us + timeout_ms * 1000;
    p.name = name->get<std::string>();
    p.key = std::move(key);
    p.timeout_ms = timeout_ms;
    p.reply.emplace(std::move(reply));
    ParkCall(ctx, std::move(p));
  };
  if (auto r = registry.Register(std::move(wait)); !r) return r.error();

  HostCallSpec step;
  step.name = "run.step";
  step.description = "Marks where a step of a durable run begins and ends (step(name, fn)): the unit of a retry.";
  step.needs_grant = false;
  step.effect = Effect::kPure;
  step.handler = [](const HostCallContext& ctx, const Json& args, HostCallReply reply) {
    if (ctx.durable_clock_us == 0) return reply.Error("TypeError", NotDurable("step()"));
    auto name = args.find("name");
    auto phase = args.find("phase");
    if (name == args.end() || !name->is_string() || name->get_ref<const std::string&>().empty() ||
        name->get_ref<const std::string&>().size() > kMaxStepNameBytes)
      return reply.Error("TypeError", "step(name, fn): name must be a string of 1 to 256 bytes");
    if (phase == args.end() || !phase->is_string() || (*phase != "begin" && *phase != "end"))
      return reply.Error("TypeError", "run.step: phase must be \"begin\" or \"end\"");
    reply.Ok(nullptr);
  };
  return registry.Register(std::move(step));
}

void Module::Impl::ParkCall(const HostCallContext& ctx, Parking p) {
  auto live_it = live.find(ctx.activation_id);
  if (live_it == live.end() || live_it->second->run_id == 0)
    return p.reply->Error("HostError", "the activation has no run to park");
  Activation& a = *live_it->second;
  if (parking.count(a.id))
    return p.reply->Error("HostError", "a run parks on one sleep() or waitForEvent() at a time: await the first "
                                       "before starting another");
  // Rows, not workers: bounded all the same (module.h).
  auto all = store->runs().CountParked("");
  auto mine = store->runs().CountParked(a.flow->name);
  if (!all || !mine) return p.reply->Error("HostError", "the journal could not count the parked runs: " +
                                                             (!all ? all.error() : mine.error()).message);
  if (*mine >= options.max_parked_runs_per_flow)
    return p.reply->Error("LimitError", std::to_string(*mine) + " runs of flow " + a.flow->name +
                                            " are parked, the most one flow may have (max_parked_runs_per_flow " +
                                            std::to_string(options.max_parked_runs_per_flow) + "); this run cannot park now");
  if (*all >= options.max_parked_runs)
    return p.reply->Error("LimitError", std::to_string(*all) + " runs are parked in this store, the most it holds " +
                                            "(max_parked_runs " + std::to_string(options.max_parked_runs) +
                                            "); this run cannot park now");
  if (!gate->Park(a.id, p.call_id)) return p.reply->Error("HostError", "the call is not in flight");
  parking.emplace(a.id, std::move(p));
}

void Module::Impl::EndParked() {
  for (auto it = parking.begin(); it != parking.end();) {
    auto live_it = live.find(it->first);
    if (live_it == live.end()) {  // ended otherwise (deadline, crash): the call stays `started`, in doubt
      it = parking.erase(it);
      continue;
    }
    if (gate->InFlightOf(it->first) > 0) {  // its other calls first: their answers are part of the record
      ++it;
      continue;
    }
    Activation& a = *live_it->second;
    const Parking& p = it->second;
    auto pos = gate->NextAnswer(a.id);
    ParkedCall parked;
    parked.wait = p.kind == Parking::Kind::kWait;
    parked.call_id = p.call_id;
    parked.wake_unix_us = p.wake_unix_us;
    parked.name = p.name;
    parked.key = p.key;
    parked.timeout_ms = p.timeout_ms;
    parked.answer_seq = pos ? pos->seq : 0;
    parked.clock_us = pos ? pos->clock_us : 0;
    a.parked = std::move(parked);
    const std::string run = std::to_string(a.run_id);
    ActivationResult r = Failure(
        Outcome::kParked,
        p.kind == Parking::Kind::kSleep
            ? "run " + run + " sleeps until " + UtcText(p.wake_unix_us) + " (basal serve wakes it then, or: basal run --resume " +
                  run + " after that time)"
            : "run " + run + " waits for event " + p.name + (p.key.empty() ? "" : " (key " + p.key + ")") + " until " +
                  UtcText(p.wake_unix_us) + " (send it: POST /v1/runs/" + run + "/events/" + p.name +
                  ", or basal run signal " + run + " " + p.name + " --data JSON)");
    if (a.worker) {
      r.cpu_us = std::chrono::duration_cast<std::chrono::microseconds>(pool->CpuOf(*a.worker) - a.cpu_base).count();
      pool->Retire(*a.worker, RetireReason::kParked);
    }
    it = parking.erase(it);  // its reply answers into nothing: the answer is written when the run wakes
    Finish(a, std::move(r));
  }
}

std::optional<RunMove> Module::Impl::ParkMove(const Activation& a, const ActivationResult& r, int64_t now,
                                             std::string* no_retry) {
  if (a.run_id == 0 || !a.durable) return std::nullopt;
  if (r.outcome == Outcome::kParked && a.parked) {
    const ParkedCall& p = *a.parked;
    RunMove m;
    m.run_id = a.run_id;
    m.from = RunState::kRunning;
    m.to = p.wait ? RunState::kWaiting : RunState::kSleeping;
    Json detail{{"activation", a.id}, {"call", p.call_id}, {"answer_seq", p.answer_seq},
                {"since", UtcText(now)}, {"until", UtcText(p.wake_unix_us)}};
    if (p.wait) {
      detail["event"] = p.name;
      if (!p.key.empty()) detail["key"] = p.key;
      detail["timeout_ms"] = p.timeout_ms;
    }
    m.detail_json = protocol::DumpJson(detail);
    m.wake_unix_us = p.wake_unix_us;
    m.waiting_for = p.wait ? p.name : "";
    m.waiting_key = p.wait ? p.key : "";
    return m;
  }
  const auto& retry = a.flow->manifest.retry();
  if (!retry || r.ok() || !retry->RetriesOn(OutcomeName(r.outcome)) || a.attempt >= retry->max_attempts) return std::nullopt;
  const int64_t next = a.attempt + 1;
  const int64_t wake = now + retry->Backoff(next).count() * 1000;
  // A run between attempts is parked like a sleeping one (a row, no worker): the same bounds. Past
  // them the run ends with its failure, saying why it was not retried.
  auto all = store->runs().CountParked("");
  auto mine = store->runs().CountParked(a.flow->name);
  std::string refused;
  if (!all || !mine) {
    refused = "the journal could not count the parked runs: " + (!all ? all.error() : mine.error()).message;
  } else if (*mine >= options.max_parked_runs_per_flow) {
    refused = std::to_string(*mine) + " runs of flow " + a.flow->name + " are parked, the most one flow may have " +
              "(max_parked_runs_per_flow " + std::to_string(options.max_parked_runs_per_flow) + ")";
  } else if (*all >= options.max_parked_runs) {
    refused = std::to_string(*all) + " runs are parked in this store, the most it holds (max_parked_runs " +
              std::to_string(options.max_parked_runs) + ")";
  }
  if (!refused.empty()) {
    if (no_retry)
      *no_retry = "attempt " + std::to_string(a.attempt) + " failed (" + OutcomeName(r.outcome) + ": " +
                  r.message.substr(0, 512) + ") and was not retried: " + refused;
    return std::nullopt;
  }
  RunMove m;
  m.run_id = a.run_id;
  m.from = RunState::kRunning;
  m.to = RunState::kRetrying;
  std::string message = r.message.substr(0, 1024);
  m.detail_json = protocol::DumpJson(Json{{"attempt", next},
                                          {"max_attempts", retry->max_attempts},
                                          {"failed", {{"activation", a.id}, {"outcome", OutcomeName(r.outcome)}, {"message", message}}},
                                          {"since", UtcText(now)},
                                          {"until", UtcText(wake)}});
  m.wake_unix_us = wake;
  return m;
}

Result<RunRow> Module::Impl::WakeRun(const RunRow& row, int64_t now, const Json* event_answer, bool resume_here,
                                     RunCallback done) {
  const std::string id = std::to_string(row.id);
  Json detail = Json::parse(row.state_detail, nullptr, false);
  if (!detail.is_object()) detail = Json::object();
  if (row.state == RunState::kSleeping || row.state == RunState::kWaiting) {
    // The parked call's answer, where its worker would have got it.
    const int64_t activation = detail.value("activation", int64_t{0});
    const int64_t call = detail.value("call", int64_t{0});
    const int64_t seq = detail.value("answer_seq", int64_t{0});
    if (activation <= 0 || call <= 0 || seq <= 0)
      return MakeError(ErrorCode::kDatabase, "run " + id + " is " + RunStateName(row.state) +
                                                 " but its record does not say which call it parked on (state_detail " +
                                                 row.state_detail + ")");
    CallUpdate u;
    u.activation_id = activation;
    u.call_id = call;
    u.state = CallState::kAnswered;
    u.end_unix_us = now;
    u.answer_seq = seq;
    if (row.state == RunState::kSleeping) {
      u.result_json = "null";
    } else if (event_answer) {
      const std::string value = protocol::DumpJson(*event_answer);
      u.result_json = CapForJournal(value, options.journal_value_max_bytes);
      if (u.result_json != value) u.replay_json = "{\"ok\":" + value + "}";
    } else {
      u.error_json = protocol::DumpJson(Json{
          {"name", "TimeoutError"},
          {"message", "waitForEvent(\"" + row.waiting_for + "\"): no event within " +
                          std::to_string(detail.value("timeout_ms", int64_t{0})) + " ms"}});
    }
    if (auto w = store->journal().UpdateCall(u); !w) return w.error();
  }
  RunMove m;
  m.run_id = row.id;
  m.from = row.state;
  m.to = resume_here ? RunState::kQueued : RunState::kInterrupted;
  m.count_attempt = row.state == RunState::kRetrying;
  Json next{{"woke", UtcText(now)}, {"from", RunStateName(row.state)}};
  if (event_answer) next["event"] = (*event_answer)["name"];
  m.detail_json = protocol::DumpJson(next);
  auto moved = store->runs().MoveRun(m);
  if (!moved) return moved.error();
  if (!resume_here) return std::move(*moved);
  auto flow = FlowForRun(*moved, {});
  if (!flow) {
    EndRunWithout(row.id, "cancelled", "cancelled when it woke: " + flow.error().message, std::move(done));
    RunRow ended = *moved;
    ended.state = RunState::kEnded;
    ended.outcome = "cancelled";
    return ended;
  }
  auto queued_again = QueueResume(*moved, *flow, std::move(done), /*retry=*/row.state == RunState::kRetrying);
  if (!queued_again) return queued_again.error();
  return std::move(queued_again->run);
}

Result<size_t> Module::Impl::WakeDueRuns(int64_t now_unix_us, size_t limit,
                                         const std::function<RunCallback(const RunRow&)>& done_for) {
  if (shutting_down || stop_starting_runs) return size_t{0};
  auto due = store->runs().RunsDue(now_unix_us, limit);
  if (!due) return due.error();
  size_t woke = 0;
  for (const RunRow& row : *due) {
    auto woken = WakeRun(row, now_unix_us, nullptr, true, done_for ? done_for(row) : RunCallback());
    if (!woken) {
      if (woken.error().code == ErrorCode::kConflict) continue;  // another process woke or cancelled it first
      // A run whose record cannot be woken would be found again at every pass: it ends, saying why.
      EndRunWithout(row.id, "cancelled", "cancelled: it could not be woken: " + woken.error().message,
                    done_for ? done_for(row) : RunCallback());
      OnEvent({ModuleEvent::Kind::kRunStopped, "run " + std::to_string(row.id) + " could not be woken: " +
                                                   woken.error().message, 0, 0});
      continue;
    }
    ++woke;
  }
  // Events nobody waited for, past their retention (bounded per pass like the wakes).
  if (auto dropped = store->runs().DropExpiredEvents(now_unix_us, std::max<size_t>(limit, 100)); !dropped)
    FailBatch(dropped.error().message);
  loop_->Wake();
  return woke;
}

Result<std::optional<int64_t>> Module::Impl::NextWake() { return store->runs().NextWake(); }

Result<ModuleHost::EventSent> Module::Impl::SendEvent(NewRunEvent e, std::optional<RunCallback> resume) {
  if (!ValidEventName(e.name))
    return MakeError(ErrorCode::kInvalidArgument, "event name \"" + e.name.substr(0, 200) +
                                                      "\" must be 1 to 128 characters of letters, digits, '.', '_', "
                                                      "'-' and ':'");
  if (e.event_key.size() > kMaxEventKeyBytes)
    return MakeError(ErrorCode::kInvalidArgument, "an event's key is at most 256 bytes");
  if (e.payload_json.size() > options.max_event_bytes)
    return MakeError(ErrorCode::kInvalidArgument, "the event's payload is " + std::to_string(e.payload_json.size()) +
                                                      " bytes; an event carries at most " +
                                                      std::to_string(options.max_event_bytes) + " (max_event_bytes)");
  Json payload;
  if (std::string why; !protocol::ParseJsonValue(e.payload_json, payload, why))
    return MakeError(ErrorCode::kInvalidArgument, "the event's payload is not JSON: " + why);
  e.payload_json = protocol::DumpJson(payload);  // one canonical text, as the script will get it
  if (e.payload_json.size() > options.max_event_bytes)  // the canonical form can be longer (1E2 is 100.0)
    return MakeError(ErrorCode::kInvalidArgument, "the event's payload is " + std::to_string(e.payload_json.size()) +
                                                      " bytes as JSON is kept; an event carries at most " +
                                                      std::to_string(options.max_event_bytes) + " (max_event_bytes)");
  // A delivery the store has made an event of already is that event, whatever the run's state now.
  if (!e.delivery_id.empty()) {
    if (e.run_id > 0) return MakeError(ErrorCode::kInvalidArgument, "a delivery id goes with a keyed event (a bug in the caller)");
    auto before = store->runs().RunEventOfDelivery(e.flow, e.delivery_id);
    if (!before) return before.error();
    if (*before) {
      EventSent sent;
      sent.event_id = **before;
      sent.replayed = true;
      return sent;
    }
  }
  const int64_t now = NowUnixUs();
  if (e.received_unix_us == 0) e.received_unix_us = now;
  e.expires_unix_us = e.received_unix_us + options.event_retention.count() * 1000;
  std::optional<RunRow> target;
  if (e.run_id > 0) {
    auto row = store->runs().GetRun(e.run_id);
    if (!row) return row.error();
    if (!*row) return MakeError(ErrorCode::kNotFound, "no run " + std::to_string(e.run_id) + " in this store");
    if (!(*row)->durable)
      return MakeError(ErrorCode::kConflict, "run " + std::to_string(e.run_id) + " is not durable: only a durable run "
                                                 "waits for events (its flow's manifest says \"durable\": true)");
    if ((*row)->state == RunState::kEnded)
      return MakeError(ErrorCode::kConflict, "run " + std::to_string(e.run_id) + " has ended (" + (*row)->outcome +
                                                 "): it waits for no event");
    // The bound is on events the run has not waited for: the one it waits for now is always taken,
    // so nobody can hold a run's wait off by sending it other names until the bound is full.
    const bool awaited = (*row)->state == RunState::kWaiting && (*row)->waiting_for == e.name;
    auto pending = store->runs().CountPendingEvents(e.run_id);
    if (!pending) return pending.error();
    if (!awaited && *pending >= options.max_pending_events_per_run)
      return MakeError(ErrorCode::kUnavailable, "run " + std::to_string(e.run_id) + " holds " + std::to_string(*pending) +
                                                    " events it has not waited for yet, the most a run holds "
                                                    "(max_pending_events_per_run); retry once it has taken some");
    e.flow = (*row)->flow;
    e.event_key.clear();
    target = std::move(**row);
  } else {
    if (e.flow.empty() || e.event_key.empty())
      return MakeError(ErrorCode::kInvalidArgument, "an event names its run, or its flow and a key");
    auto waiting = store->runs().RunsWaitingFor(e.flow, e.name, e.event_key, 1);
    if (!waiting) return waiting.error();
    if (!waiting->empty()) {
      target = std::move(waiting->front());
    } else {
      auto pending = store->runs().CountPendingKeyedEvents(e.flow);
      if (!pending) return pending.error();
      if (*pending >= options.max_pending_keyed_events_per_flow)
        return MakeError(ErrorCode::kUnavailable, "flow " + e.flow + " holds " + std::to_string(*pending) +
                                                      " keyed events no run has waited for yet, the most it holds "
                                                      "(max_pending_keyed_events_per_flow); retry later");
    }
  }
  auto id = store->runs().AddRunEvent(e);
  if (!id) return id.error();
  EventSent sent;
  sent.event_id = *id;
  const bool waits_for_it = target && target->state == RunState::kWaiting && target->waiting_for == e.name &&
                            (e.run_id > 0 || target->waiting_key == e.event_key);
  if (!waits_for_it) {
    if (target) sent.run = *target;
    return sent;
  }
  Json detail = Json::parse(target->state_detail, nullptr, false);
  const int64_t activation = detail.is_object() ? detail.value("activation", int64_t{0}) : 0;
  const int64_t call = detail.is_object() ? detail.value("call", int64_t{0}) : 0;
  auto taken = store->runs().TakeRunEvent(target->id, target->flow, e.name, target->waiting_key, now, activation, call);
  if (!taken) return taken.error();
  if (!*taken) return MakeError(ErrorCode::kInternal, "event " + std::to_string(*id) + " was not found again");
  const Json answer = EventJson(**taken);
  auto woken = WakeRun(*target, now, &answer, resume.has_value(), resume ? std::move(*resume) : RunCallback());
  if (!woken) return woken.error();
  sent.delivered_to = target->id;
  sent.run = std::move(*woken);
  return sent;
}

}  // namespace basal
