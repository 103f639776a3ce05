// The triggers of basal serve's config (docs/serve.md, "Webhooks" and "Schedules"): what starts a
// run besides an API call. A webhook delivery is verified here (its signature, its timestamp's
// window) and becomes a run request whose idempotency key is the signed delivery; a schedule is
// armed on the loop, catches up after downtime, applies its overlap policy and fires. The
// decisions are schedule.h's pure functions of the time; this room performs them (journals, runs
// through the run queue, timers).
//
// Invariant: every fire of a schedule is accounted for, as a run that starts, a run buffered, or a
// run journaled as skipped or missed with the reason; and nothing starts for a delivery that fails
// its check.
//
//   Triggers triggers({.queue = queue, .marks = store.runs(), .loop = loop, ...});
//   if (auto c = triggers.Check(config); !c) ...;             // before anything changes
//   triggers.Load(config, /*at_start=*/true);                 // catches up and arms the schedules
//   auto verdict = triggers.VerifyDelivery(request, "github");  // a run to start, or the refusal
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "parent/loop/event_loop.h"
#include "parent/store/store.h"
#include "serve/config.h"
#include "serve/cron.h"
#include "parent/module_host.h"
#include "serve/http_message.h"
#include "serve/metrics.h"
#include "serve/run_queue.h"

namespace basal::serve {

class Triggers {
 public:
  struct Options {
    RunQueue& queue;
    ServeTables& marks;  // the schedule marks (ScheduleMark, SetScheduleMark)
    EventLoop& loop;
    ModuleHost& host;  // CurrentFlow: the newest approved version of a flow
    MetricsRegistry& metrics;
    const LimitsConfig& limits;  // wait_max; read at each use
    std::string secrets_dir;
    std::function<int64_t()> now_us;
    std::function<void(const std::string& line)> log;
    // Several hosts share the store (PostgreSQL): each fire's run carries the key
    // "fire:SCHEDULE:MICROSECONDS", so the unique (flow, key) index lets one host's run stand for
    // the fire and every other host's fire of it find that run instead (docs/postgres.md).
    bool several_hosts = false;
  };
  explicit Triggers(Options options);
  ~Triggers();
  Triggers(const Triggers&) = delete;
  Triggers& operator=(const Triggers&) = delete;

  // Refuses a config with a trigger that could never start a run: its flow not approved here (or
  // its newest version revoked), a webhook's secret not stored. Changes nothing.
  Result<void> Check(const ServeConfig& config);
  // Replaces the webhooks and schedules by the config's (runs still open keep counting for their
  // schedule's overlap), catches up and arms the schedules. at_start: the daemon was down since
  // the marks were stored, so the catch_up windows apply; a reload missed nothing.
  Result<void> Load(const ServeConfig& config, bool at_start);
  // At start: the recovered queued runs of schedules still count as open for their overlap policy.
  void AdoptOpenRuns(const std::vector<RunRow>& queued);
  // No schedule fires from now on.
  void Drain();

  size_t webhooks() const { return webhooks_.size(); }
  size_t schedules() const { return schedules_.size(); }

  // The body limit of a webhook trigger's deliveries; nullopt when there is no such trigger.
  std::optional<size_t> WebhookMaxBody(std::string_view trigger) const;
  // A verified delivery: the run to start, and how long its answer may wait for the result.
  struct Delivery {
    RunRequest run;
    std::optional<std::chrono::milliseconds> wait;
    WebhookTrigger::Respond respond = WebhookTrigger::Respond::kAck;
    int failure_status = 500;       // wait, flow: the answer's status for a run that did not end ok
    bool allow_set_cookie = false;  // flow
    // A trigger with "event": the event to send instead of a run (run is empty then), and the
    // delivery's identity (as its scheme names it: DeliveryVerdict::key), so that the sender's
    // retry of a delivery is not a second event.
    std::optional<NewRunEvent> event;
    std::string delivery_id;
  };
  // The delivery `req` to webhook `trigger`: a run to start, or the answer refusing it (404 no such
  // trigger, 500 its secret unreadable, 401 a failed signature check under the trigger's scheme),
  // or the answer that needs no run (200 a Slack url_verification's challenge).
  std::variant<Delivery, HttpResponse> VerifyDelivery(const HttpRequest& req, const std::string& trigger);
  // The run of a verified delivery was accepted: new, or the one the delivery already had.
  void DeliveryAccepted(const std::string& trigger, bool existing);
  // A verified delivery got no run (`verdict`: why, e.g. "queue_full").
  void DeliveryRefused(const std::string& trigger, const std::string& verdict);
  // An event delivery was journaled as a new event (the store keeps its delivery id: a retry of it
  // gets that event, on any host, after a restart too).
  void EventDelivered(const std::string& trigger);

  // The schedules as the daemon runs them now (GET /v1/schedules, `basal schedule list`).
  struct ScheduleView {
    std::string name, flow, cron, timezone, overlap;  // overlap: "skip" or "buffer_one"
    std::optional<int64_t> next_fire_us;  // the fire the timer is armed for (none while draining)
    std::optional<int64_t> last_fire_us;  // the newest fire among the schedule's runs (ran, skipped or missed)
    std::optional<int64_t> last_run_id;   // its newest run, by hand or fired
    size_t open_runs = 0;                 // its runs queued, running or buffered now
  };
  std::vector<ScheduleView> Schedules();
  // A run of schedule `name`'s flow now, by hand (POST /v1/schedules/{name}/run): trigger
  // "schedule:NAME", its detail {"by_hand": true, "by": WHO}. It starts whatever the overlap policy
  // says; once accepted (ManualRunAccepted) it counts as the schedule's open run, so fires meanwhile
  // meet the policy. 404 no such schedule, 503 draining.
  std::variant<RunRequest, HttpResponse> ManualRun(const std::string& name, const Actor& who);
  void ManualRunAccepted(const std::string& name, int64_t run_id);

 private:
  struct Schedule;

  void CatchUp(Schedule& s, bool at_start);
  void HandleDue(Schedule& s, int64_t window_us);
  void Arm(Schedule& s, int64_t after_us);
  void Fire(Schedule& s, int64_t fire_us);
  void ReleaseBuffered(Schedule& s);
  void RunEnded(int64_t run_id);
  RunRequest ScheduleRun(const Schedule& s, std::optional<int64_t> fire_us) const;
  std::variant<Delivery, HttpResponse> EventOf(const WebhookTrigger& w, const HttpRequest& req,
                                               const nlohmann::json& body, std::string_view delivery_key);
  void CancelTimers();

  Options o_;
  bool draining_ = false;
  std::map<std::string, WebhookTrigger> webhooks_;
  std::map<std::string, std::unique_ptr<Schedule>> schedules_;
  std::map<int64_t, std::string> open_run_schedule_;  // schedules' runs not ended -> the schedule's name
};

}  // namespace basal::serve
