// Webhooks and schedules (triggers.h).
#include "serve/triggers.h"

#include <algorithm>
#include <utility>

#include "parent/secrets/secret_store.h"
#include "parent/store/owner.h"
#include "serve/run_filter.h"
#include "serve/schedule.h"
#include "serve/signature.h"

namespace basal::serve {

using Json = nlohmann::json;

struct Triggers::Schedule {
  ScheduleTrigger config;
  CronSchedule cron;
  TimeZone tz;
  std::optional<EventLoop::TimerId> timer;
  int64_t next_fire_us = 0;     // the fire the timer is armed for
  int64_t mark_us = 0;          // the last fire handled (the store's schedule mark)
  std::set<int64_t> open_runs;  // runs of this schedule queued, running or buffered (overlap policy)
  // buffer_one: the run journaled as queued that waits for the open one to end before it may start.
  std::optional<int64_t> buffered_run;
};

Triggers::Triggers(Options options) : o_(std::move(options)) {
  o_.queue.OnRunEnded([this](int64_t run_id) { RunEnded(run_id); });
}

Triggers::~Triggers() { CancelTimers(); }

void Triggers::CancelTimers() {
  for (auto& [name, s] : schedules_)
    if (s->timer) o_.loop.Cancel(*s->timer);
}

// ---------------------------------------------------------------- loading

Result<void> Triggers::Check(const ServeConfig& config) {
  auto flow_ok = [this](const std::string& trigger, const std::string& flow) -> Result<void> {
    if (auto f = o_.host.CurrentFlow(flow); !f)
      return MakeError(ErrorCode::kInvalidArgument, "trigger " + trigger + ": " + f.error().message +
                                                        " (approve the flow, or remove the trigger from the config)");
    return Ok();
  };
  if (!config.webhooks.empty()) {
    auto secrets = SecretStore::Open(o_.secrets_dir, /*create=*/false);
    for (const WebhookTrigger& w : config.webhooks) {
      if (auto f = flow_ok(w.name, w.flow); !f) return f;
      Result<std::string> secret = secrets ? secrets->Get(w.secret) : Result<std::string>(secrets.error());
      if (!secret)
        return MakeError(ErrorCode::kInvalidArgument, "trigger " + w.name + ": its secret " + w.secret +
                                                          " cannot be read (" + secret.error().message +
                                                          "); store it with: basal secret set " + w.secret);
    }
  }
  for (const ScheduleTrigger& sc : config.schedules)
    if (auto f = flow_ok(sc.name, sc.flow); !f) return f;
  return Ok();
}

Result<void> Triggers::Load(const ServeConfig& config, bool at_start) {
  std::map<std::string, WebhookTrigger> hooks;
  for (const WebhookTrigger& w : config.webhooks) hooks[w.name] = w;
  std::map<std::string, std::unique_ptr<Schedule>> schedules;
  for (const ScheduleTrigger& sc : config.schedules) {
    auto cron = ParseCron(sc.cron);
    if (!cron) return MakeError(ErrorCode::kInvalidArgument, "trigger " + sc.name + ": " + cron.error().message);
    auto tz = LoadTimeZone(sc.timezone);
    if (!tz) return MakeError(ErrorCode::kInvalidArgument, "trigger " + sc.name + ": " + tz.error().message);
    auto s = std::make_unique<Schedule>(Schedule{sc, *cron, *tz, std::nullopt, 0, 0, {}, std::nullopt});
    // The runs still open under this name (kept across a reload, or queued before a restart).
    for (const auto& [run_id, name] : open_run_schedule_)
      if (name == sc.name) s->open_runs.insert(run_id);
    if (auto old = schedules_.find(sc.name); old != schedules_.end()) s->buffered_run = old->second->buffered_run;
    schedules[sc.name] = std::move(s);
  }
  CancelTimers();
  // A buffered run whose schedule is gone waits for nobody now.
  for (auto& [name, s] : schedules_)
    if (s->buffered_run && !schedules.count(name)) ReleaseBuffered(*s);
  webhooks_ = std::move(hooks);
  schedules_ = std::move(schedules);
  for (auto& [name, s] : schedules_) CatchUp(*s, at_start);
  return Ok();
}

void Triggers::AdoptOpenRuns(const std::vector<RunRow>& queued) {
  for (const RunRow& r : queued)
    if (r.trigger.rfind("schedule:", 0) == 0) open_run_schedule_[r.id] = r.trigger.substr(9);
}

void Triggers::Drain() {
  draining_ = true;
  CancelTimers();
}

// ---------------------------------------------------------------- webhooks

std::optional<size_t> Triggers::WebhookMaxBody(std::string_view trigger) const {
  auto w = webhooks_.find(std::string(trigger));
  if (w == webhooks_.end()) return std::nullopt;
  return w->second.max_body_bytes;
}

std::variant<Triggers::Delivery, HttpResponse> Triggers::VerifyDelivery(const HttpRequest& req,
                                                                        const std::string& trigger) {
  auto it = webhooks_.find(trigger);
  if (it == webhooks_.end()) return JsonError(404, "trigger_not_found", "no webhook trigger named " + trigger);
  const WebhookTrigger& w = it->second;
  if (draining_) return JsonError(503, "draining", "basal serve is draining; deliver again later");
  auto store = SecretStore::Open(o_.secrets_dir, /*create=*/false);
  Result<std::string> secret = store ? store->Get(w.secret) : Result<std::string>(store.error());
  if (!secret) {
    o_.metrics.Add("basal_webhooks_total", {trigger, "no_secret"});
    o_.log("webhook " + trigger + ": its secret " + w.secret + " cannot be read: " + secret.error().message);
    return JsonError(500, "secret_unavailable",
                     "the trigger's secret cannot be read; the operator must set it (basal secret set " + w.secret + ")");
  }
  const int64_t now_s = o_.now_us() / 1'000'000;
  const DeliveryVerdict v = serve::VerifyDelivery(
      w.scheme, *secret, [&req](std::string_view name) { return req.Header(name); }, req.body, now_s,
      std::chrono::duration_cast<std::chrono::seconds>(w.window).count());
  if (!v.verdict.ok) {
    o_.metrics.Add("basal_webhooks_total", {trigger, v.verdict.reason});
    return JsonError(401, v.verdict.reason, v.verdict.message);
  }
  // Slack checks a new endpoint with a signed url_verification: answered its challenge, no run.
  if (v.challenge) {
    o_.metrics.Add("basal_webhooks_total", {trigger, "url_verification"});
    return JsonResponse(200, Json{{"challenge", *v.challenge}});
  }
  Json body = Json::parse(req.body, nullptr, false);
  // A trigger with "event" sends the delivery as an event; the delivery's key (what its scheme
  // signs) names it, so that a sender's retry is not a second event.
  if (!w.event_name.empty()) return EventOf(w, req, body, v.key);
  Delivery d;
  d.run.flow = w.flow;
  d.run.trigger = "webhook:" + trigger;
  d.run.input = Json{{"trigger", trigger},
                     {"scheme", WebhookSchemeName(w.scheme)},
                     {"body", body.is_discarded() ? Json(req.body) : body},
                     {"content_type", std::string(req.Header("content-type").value_or(""))}};
  if (v.signed_at_s) d.run.input["signed_at"] = UtcText(*v.signed_at_s * 1'000'000);
  if (w.scheme == WebhookScheme::kGithub) {
    d.run.input["event"] = std::string(req.Header("x-github-event").value_or(""));
    d.run.input["delivery"] = std::string(req.Header("x-github-delivery").value_or(""));
  }
  // The key names the delivery by what the scheme signs, or by the sender's own id for it
  // (signature.h): a delivery sent again, by the sender or by whoever captured it, gets the run it
  // has, never a second one. Nothing else unsigned is part of it: not an Idempotency-Key header,
  // nor the signature header (other values beside the good one make a different string). What
  // the input holds besides (the Content-Type) may differ in a delivery sent again: it still gets
  // the first one's run (Api::AcceptDelivery).
  d.run.idempotency_key = "delivery:" + trigger + ":" + v.key;  // keys are per flow
  if (w.respond != WebhookTrigger::Respond::kAck) d.wait = std::min(w.wait, o_.limits.wait_max);
  d.respond = w.respond;
  d.failure_status = w.failure_status;
  d.allow_set_cookie = w.allow_set_cookie;
  return d;  // the queue looks the flow up (a revoked one: 409 flow_unavailable)
}

// A verified delivery to a trigger with "event": the event for the flow's run that waits for it
// with the key at the trigger's pointer (docs/durable.md#events). The payload is the body.
std::variant<Triggers::Delivery, HttpResponse> Triggers::EventOf(const WebhookTrigger& w, const HttpRequest& req,
                                                                 const Json& body, std::string_view delivery_key) {
  const auto refuse = [&](int status, const std::string& code, const std::string& message) {
    o_.metrics.Add("basal_webhooks_total", {w.name, code});
    return JsonError(status, code, "webhook " + w.name + ": " + message);
  };
  if (body.is_discarded()) return refuse(400, "bad_event", "the payload is not JSON, so no key can be read from it");
  if (req.body.size() > o_.limits.max_event_bytes)
    return refuse(413, "event_too_large", "the payload is " + std::to_string(req.body.size()) +
                                              " bytes; an event carries at most " +
                                              std::to_string(o_.limits.max_event_bytes) + " (limits.max_event_bytes)");
  const auto tokens = ParseJsonPointer(w.event_key);  // checked when the config was read
  const Json* key = tokens ? FindByPointer(body, *tokens) : nullptr;
  std::string key_text;
  if (key && key->is_string()) key_text = key->get<std::string>();
  if (key && (key->is_number_integer() || key->is_number_unsigned())) key_text = key->dump();
  if (key_text.empty() || key_text.size() > 256)
    return refuse(400, "no_event_key", "the payload has no string or integer of 1 to 256 bytes at " + w.event_key +
                                           " (the trigger's event.key), so no run can be picked");
  Delivery d;
  NewRunEvent e;
  e.flow = w.flow;
  e.name = w.event_name;
  e.event_key = std::move(key_text);
  e.payload_json = req.body;
  e.sender = "webhook:" + w.name;
  d.event = std::move(e);
  d.delivery_id = "event:" + w.name + ":" + std::string(delivery_key);
  return d;
}

void Triggers::EventDelivered(const std::string& trigger) { o_.metrics.Add("basal_webhooks_total", {trigger, "event"}); }

void Triggers::DeliveryAccepted(const std::string& trigger, bool existing) {
  o_.metrics.Add("basal_webhooks_total", {trigger, existing ? "replayed" : "accepted"});
}

void Triggers::DeliveryRefused(const std::string& trigger, const std::string& verdict) {
  o_.metrics.Add("basal_webhooks_total", {trigger, verdict});
}

// ---------------------------------------------------------------- schedules

// The trigger's mark is the last fire it handled (ran, skipped or missed). A trigger without one
// (new) starts from now.
void Triggers::CatchUp(Schedule& s, bool at_start) {
  const int64_t now = o_.now_us();
  auto mark = o_.marks.ScheduleMark(s.config.name);
  if (!mark || !*mark) {
    s.mark_us = now;
    if (auto set = o_.marks.SetScheduleMark(s.config.name, now); !set)
      o_.log("schedule " + s.config.name + ": its mark could not be journaled: " + set.error().message);
    Arm(s, now);
    return;
  }
  s.mark_us = **mark;
  HandleDue(s, at_start ? s.config.catch_up.count() * 1000 : std::max<int64_t>(s.config.catch_up.count() * 1000, kTimerSlackUs));
}

// A run of the schedule, saying which fire it is for (nullopt: none, a run by hand).
RunRequest Triggers::ScheduleRun(const Schedule& s, std::optional<int64_t> fire_us) const {
  RunRequest r;
  r.flow = s.config.flow;
  r.input = s.config.input;
  r.trigger = "schedule:" + s.config.name;
  if (fire_us) r.state_detail = Json{{"scheduled_for", UtcText(*fire_us)}}.dump();
  return r;
}

// ---------------------------------------------------------------- schedules, seen and run by hand

namespace {

// The fire a schedule's run was for: its detail's "scheduled_for" (a skipped or missed fire), else
// its creation (a fire runs when it is due); nullopt for a run by hand, which is no fire.
std::optional<int64_t> FireOfRun(const RunRow& run) {
  if (!run.state_detail.empty()) {
    Json detail = Json::parse(run.state_detail, nullptr, false);
    if (detail.is_object() && detail.value("by_hand", false)) return std::nullopt;
    if (detail.is_object() && detail.contains("scheduled_for") && detail["scheduled_for"].is_string())
      if (auto t = ParseSinceText(detail["scheduled_for"].get<std::string>(), 0)) return *t;
  }
  return run.created_unix_us;
}

}  // namespace

std::vector<Triggers::ScheduleView> Triggers::Schedules() {
  std::vector<ScheduleView> out;
  for (const auto& [name, s] : schedules_) {
    ScheduleView v;
    v.name = name;
    v.flow = s->config.flow;
    v.cron = s->config.cron;
    v.timezone = s->config.timezone;
    v.overlap = s->config.overlap == ScheduleTrigger::Overlap::kBufferOne ? "buffer_one" : "skip";
    if (s->timer && !draining_) v.next_fire_us = s->next_fire_us;
    v.open_runs = s->open_runs.size();
    // Its newest runs, from the journal: they outlive the daemon. A few by hand may come first.
    RunQuery q;
    q.trigger = "schedule:" + name;
    q.limit = 20;
    if (auto rows = o_.host.reader().ListRuns(q); rows && !rows->empty()) {
      v.last_run_id = rows->front().id;
      for (const RunRow& r : *rows)
        if (auto fire = FireOfRun(r)) {
          v.last_fire_us = *fire;
          break;
        }
    }
    out.push_back(std::move(v));
  }
  return out;
}

std::variant<RunRequest, HttpResponse> Triggers::ManualRun(const std::string& name, const Actor& who) {
  auto it = schedules_.find(name);
  if (it == schedules_.end())
    return JsonError(404, "schedule_not_found", "no schedule named " + name + " in the config (GET /v1/schedules lists them)");
  if (draining_) return JsonError(503, "draining", "basal serve is draining; it starts no new runs. Retry later");
  RunRequest r = ScheduleRun(*it->second, std::nullopt);
  r.state_detail = Json{{"by_hand", true}, {"by", who.name}}.dump(-1, ' ', false, Json::error_handler_t::replace);
  return r;
}

void Triggers::ManualRunAccepted(const std::string& name, int64_t run_id) {
  auto row = o_.queue.Get(run_id);
  if (!row || !*row || (*row)->state == RunState::kEnded) return;  // ended already: nothing open
  open_run_schedule_[run_id] = name;
  if (auto s = schedules_.find(name); s != schedules_.end()) s->second->open_runs.insert(run_id);
  o_.metrics.Add("basal_schedule_events_total", {name, "by_hand"});
}

// Handles the fires in (mark, now] as PlanCatchUp decides: each missed one is journaled as a run
// that ended "missed" (at most kMaxMissedListed one by one, the older ones counted in the oldest
// listed one's error), the newest within the window fires (through the overlap policy), the mark
// moves to the newest fire; then the next timer is armed.
void Triggers::HandleDue(Schedule& s, int64_t window_us) {
  if (draining_) return;
  const int64_t now = o_.now_us();
  const CatchUpPlan plan = PlanCatchUp(s.cron, s.tz, s.mark_us, now, window_us);
  const std::string& name = s.config.name;
  for (size_t i = 0; i < plan.missed.size(); ++i) {
    std::string message = "the daemon was not running (or the clock jumped) at " + UtcText(plan.missed[i]) +
                          ", which is outside the trigger's catch-up window";
    if (i == 0 && plan.missed_unlisted > 0)
      message += " (and " + std::string(plan.missed_count_capped ? "at least " : "") +
                 std::to_string(plan.missed_unlisted) + " earlier fires, not journaled one by one)";
    if (auto e = o_.queue.RecordEnded(ScheduleRun(s, plan.missed[i]), "missed", Json{{"kind", "missed"}, {"message", message}}); !e)
      o_.log("schedule " + name + ": a missed fire could not be journaled: " + e.error().message);
  }
  if (plan.missed_total() > 0) {
    o_.metrics.Add("basal_schedule_events_total", {name, "missed"}, static_cast<double>(plan.missed_total()));
    o_.log("schedule " + name + ": " + (plan.missed_count_capped ? "at least " : "") +
           std::to_string(plan.missed_total()) + " fires missed" +
           (plan.run_now ? "; the newest, " + UtcText(*plan.run_now) + ", starts now" : ""));
  } else if (plan.run_now && now - *plan.run_now >= kTimerSlackUs) {
    // Late past any timer's slack: caught up after downtime (or a reload, a clock jump).
    o_.log("schedule " + name + ": the fire of " + UtcText(*plan.run_now) + ", missed while down, starts now");
  }
  if (plan.mark != s.mark_us) {
    s.mark_us = plan.mark;
    if (auto set = o_.marks.SetScheduleMark(name, plan.mark); !set)
      o_.log("schedule " + name + ": its mark could not be journaled: " + set.error().message);
  }
  if (plan.run_now) Fire(s, *plan.run_now);
  Arm(s, s.mark_us);
}

void Triggers::Arm(Schedule& s, int64_t after_us) {
  if (draining_) return;
  if (s.timer) o_.loop.Cancel(*s.timer);
  s.timer.reset();
  auto arm = PlanArm(s.cron, s.tz, after_us, o_.now_us());
  if (!arm) {
    o_.log("schedule " + s.config.name + ": no fire time within 5 years");
    return;
  }
  s.next_fire_us = arm->fire_us;
  const std::string name = s.config.name;
  // Re-armed from the wall clock at each wake (at most kMaxArmAheadUs ahead), so a clock step or a
  // suspended machine corrects itself.
  s.timer = o_.loop.At(EventLoop::Clock::now() + std::chrono::microseconds(arm->delay_us), [this, name] {
    auto it = schedules_.find(name);
    if (it == schedules_.end()) return;
    Schedule& due = *it->second;
    due.timer.reset();
    if (!TimerDue(due.next_fire_us, o_.now_us())) {
      Arm(due, due.next_fire_us - 1);  // woke early: the same fire again
      return;
    }
    // Due: normally the one fire armed for; after a clock jump or a suspend, every fire since the
    // mark, handled like downtime. A timer late by under kTimerSlackUs is on time.
    HandleDue(due, std::max<int64_t>(due.config.catch_up.count() * 1000, kTimerSlackUs));
  });
}

void Triggers::Fire(Schedule& s, int64_t fire_us) {
  const std::string name = s.config.name;
  const OverlapDecision d = DecideOverlap(s.config.overlap, s.open_runs.size());
  const bool buffer_one = s.config.overlap == ScheduleTrigger::Overlap::kBufferOne;
  if (d == OverlapDecision::kSkip) {
    const Json error{{"kind", "skipped"},
                     {"message", "the fire of " + UtcText(fire_us) + " was skipped: " +
                                     (buffer_one ? std::string("a run of schedule " + name + " runs and another waits")
                                                 : std::string("the previous run of schedule " + name + " had not ended")) +
                                     " (overlap: " + (buffer_one ? "buffer_one" : "skip") + ")"}};
    if (auto e = o_.queue.RecordEnded(ScheduleRun(s, fire_us), "skipped", error); !e)
      o_.log("schedule " + name + ": a skipped fire could not be journaled: " + e.error().message);
    o_.metrics.Add("basal_schedule_events_total", {name, "skipped"});
    o_.log("schedule " + name + ": the fire of " + UtcText(fire_us) + " was skipped (overlap)");
    return;
  }
  // kRun: may start now. kBuffer: journaled as queued now (so it survives a restart) but held back
  // until the open run ends (ReleaseBuffered).
  const bool hold = d == OverlapDecision::kBuffer;
  RunRequest run = ScheduleRun(s, fire_us);
  run.hold = hold;
  if (o_.several_hosts) run.idempotency_key = "fire:" + name + ":" + std::to_string(fire_us);
  o_.queue.Enqueue(std::move(run), [this, name, hold, fire_us](Result<AcceptedRun> a) {
    if (!a && a.error().code == ErrorCode::kUnavailable) {
      // The queue is full: the fire is accounted for as skipped, saying why.
      auto s = schedules_.find(name);
      if (s == schedules_.end()) return;
      const Json error{{"kind", "skipped"},
                       {"message", "the fire of " + UtcText(fire_us) + " was skipped: " + a.error().message}};
      if (auto e = o_.queue.RecordEnded(ScheduleRun(*s->second, fire_us), "skipped", error); !e)
        o_.log("schedule " + name + ": a skipped fire could not be journaled: " + e.error().message);
      o_.metrics.Add("basal_schedule_events_total", {name, "skipped"});
      o_.log("schedule " + name + ": the fire of " + UtcText(fire_us) + " was skipped (the queue is full)");
      return;
    }
    if (!a) {
      o_.log("schedule " + name + ": the run could not be journaled: " + a.error().message);
      return;
    }
    if (a->existing) {
      // Another host's run stands for this fire: it is that host's to run and to count open.
      o_.metrics.Add("basal_schedule_events_total", {name, "fired_elsewhere"});
      o_.log("schedule " + name + ": the fire of " + UtcText(fire_us) + " was run by another host (run " +
             std::to_string(a->run.id) + ")");
      return;
    }
    o_.metrics.Add("basal_schedule_events_total", {name, hold ? "buffered" : "run"});
    auto s = schedules_.find(name);
    // Read again: a run dispatched before this commit may have ended already (cancelled at once);
    // counted open, it would block the schedule for good.
    auto now_row = o_.queue.Get(a->run.id);
    if (!now_row || !*now_row || (*now_row)->state == RunState::kEnded) return;
    open_run_schedule_[a->run.id] = name;
    if (s == schedules_.end()) {  // the schedule was removed by a reload meanwhile
      if (hold) o_.queue.Release(a->run.id);
      return;
    }
    const bool others_open = !s->second->open_runs.empty();
    s->second->open_runs.insert(a->run.id);
    if (!hold) return;
    s->second->buffered_run = a->run.id;
    if (!others_open) ReleaseBuffered(*s->second);  // the open run ended while this was journaled
  });
}

void Triggers::ReleaseBuffered(Schedule& s) {
  if (!s.buffered_run) return;
  const int64_t id = *s.buffered_run;
  s.buffered_run.reset();
  o_.queue.Release(id);
}

// A run of a schedule ended: it is no longer open, and a run buffered behind it may start.
void Triggers::RunEnded(int64_t run_id) {
  auto t = open_run_schedule_.find(run_id);
  if (t == open_run_schedule_.end()) return;
  if (auto s = schedules_.find(t->second); s != schedules_.end()) {
    Schedule& sc = *s->second;
    sc.open_runs.erase(run_id);
    if (sc.buffered_run && *sc.buffered_run == run_id) sc.buffered_run.reset();  // ended while held
    if (sc.buffered_run) ReleaseBuffered(sc);
  }
  open_run_schedule_.erase(t);
}

}  // namespace basal::serve
