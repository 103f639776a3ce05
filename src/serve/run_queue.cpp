// The runs of basal serve, from accepted to ended (run_queue.h).
#include "serve/run_queue.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <utility>

#include "basal/outcome.h"
#include "serve/log_line.h"

namespace basal::serve {

namespace {

std::string JsonText(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

Error NotReadBack(int64_t run_id) {
  return MakeError(ErrorCode::kInternal, "run " + std::to_string(run_id) + " could not be read back");
}

// The triggers whose runs this daemon started: an API client's, a webhook's, a schedule's.
bool DaemonTrigger(const std::string& trigger) {
  return trigger == "api" || trigger.rfind("webhook:", 0) == 0 || trigger.rfind("schedule:", 0) == 0;
}

}  // namespace

RunQueue::RunQueue(Options options) : o_(std::move(options)) { o_.host.SetMaxWorkers(o_.limits.max_workers); }

RunQueue::~RunQueue() {
  WriteStopRecords();
  if (resume_timer_) o_.host.loop().Cancel(*resume_timer_);
  if (wake_timer_) o_.host.loop().Cancel(*wake_timer_);
  if (claim_timer_) o_.host.loop().Cancel(*claim_timer_);
  if (offer_timer_) o_.host.loop().Cancel(*offer_timer_);
  for (auto& [run, list] : waiters_)
    for (auto& [id, w] : list) o_.host.loop().Cancel(w.timer);
}

RunCallback RunQueue::StopCallback(const std::string& flow, const std::string& trigger) {
  return [this, flow, trigger](const RunStop& stop) { OnStop(flow, trigger, stop); };
}

Result<RunQueue::Recovered> RunQueue::Recover() {
  Recovered out;
  // Bounded: what a previous daemon could have queued (queue_max) and left running (max_workers),
  // with room for a changed config; the rest waits for the next start.
  const size_t most = o_.limits.queue_max * 2 + o_.limits.max_workers + 1000;
  // Queued first (a run a previous daemon claimed for a resume but never started is a resume
  // still), then the interrupted ones, which the resume queues behind them.
  // With several hosts a queued run another live host holds is left to it (adopting it too would
  // make both try to start it); the ones whose holder is gone are claimed for this host.
  auto queued = o_.several_hosts ? o_.host.runs().ClaimQueuedRuns(RunStore::QueuedClaim::kAtStart, most)
                                 : o_.host.runs().RunsInState(RunState::kQueued, most);
  if (!queued) return queued.error();
  for (const RunRow& r : *queued) {
    if (auto requeued = o_.host.RequeueRun(r, StopCallback(r.flow, r.trigger)); !requeued) {
      out.refused.push_back("run " + std::to_string(r.id) + ": " + requeued.error().message);
      continue;
    }
    out.queued.push_back(r);
  }
  auto interrupted = o_.host.runs().RunsInState(RunState::kInterrupted, most);
  if (!interrupted) return interrupted.error();
  for (const RunRow& r : *interrupted) {
    if (!DaemonTrigger(r.trigger)) continue;  // a `basal run`'s: resumed by hand (basal run --resume)
    auto resumed = o_.host.ResumeRun(r.id, {}, StopCallback(r.flow, r.trigger));
    if (!resumed) {
      out.refused.push_back("run " + std::to_string(r.id) + ": " + resumed.error().message);
      continue;
    }
    if (resumed->run.state == RunState::kQueued) {
      ++out.resumed;
      out.queued.push_back(resumed->run);
    }
  }
  return out;
}

void RunQueue::Enqueue(RunRequest request, std::function<void(Result<AcceptedRun>)> then) {
  const int64_t now = o_.now_us();
  if (o_.host.queued_runs() >= o_.limits.queue_max && !KeyNamesARun(request.flow, request.idempotency_key, now)) {
    then(MakeError(ErrorCode::kUnavailable, std::to_string(o_.host.queued_runs()) +
                                                " runs are queued, the limit (limits.queue_max); retry later"));
    return;
  }
  auto flow = o_.flow_for(request.flow);
  if (!flow) {
    then(flow.error());
    return;
  }
  RunOptions options;
  options.trigger = request.trigger;
  options.idempotency_key = request.idempotency_key;
  options.key_ttl = o_.limits.idempotency_ttl;
  options.state_detail = request.state_detail;
  options.hold = request.hold;
  options.created_unix_us = now;
  // The module journals the run and queues it; a worker free now starts it in the same pass, its
  // activation's start joining the same commit (the module runs nothing of the flow before that
  // commit: every effect is a host call, answered only after its own record commits).
  const std::string key = request.idempotency_key;
  auto accepted = o_.host.StartRun(*flow, std::move(request.input), std::move(options), StopCallback(request.flow, request.trigger));
  if (!accepted) {
    then(accepted.error());
    return;
  }
  AcceptedRun a{std::move(accepted->run), accepted->existing};
  // (A key this daemon knew may have expired in the store meanwhile: the run is then new, and the
  // queue one above queue_max. Rare, and bounded by the keys it knew.)
  if (!key.empty())
    RememberKey(request.flow, key, (a.existing ? a.run.created_unix_us : now) + o_.limits.idempotency_ttl.count() * 1000);
  if (!a.existing)
    o_.metrics.Add("basal_runs_accepted_total", {request.flow, request.trigger.substr(0, request.trigger.find(':'))});
  o_.host.AfterCommit([this, a = std::move(a), then = std::move(then)](const Result<void>& committed) {
    if (!committed) {
      journal_ok_ = false;
      journal_why_ = committed.error().message;
      // The batch is gone, the run's row and its activation's start with it: the module failed
      // that activation with the batch and did not queue the run.
      then(MakeError(ErrorCode::kDatabase, "the run could not be journaled: " + committed.error().message));
      return;
    }
    journal_ok_ = true;
    then(a);
  });
}

Result<void> RunQueue::Resume(int64_t run_id, bool newest_version) {
  auto row = o_.host.runs().GetRun(run_id);
  if (!row) return row.error();
  if (!*row) return MakeError(ErrorCode::kNotFound, "no run " + std::to_string(run_id) + " in this store");
  auto resumed = o_.host.ResumeRun(run_id, ResumeOptions{newest_version}, StopCallback((*row)->flow, (*row)->trigger));
  if (!resumed) return resumed.error();
  refused_resumes_.erase(run_id);
  return Ok();
}

void RunQueue::ResumeInterruptedEvery(std::chrono::milliseconds every, std::function<void(const std::string&)> log) {
  resume_every_ = every;
  log_ = std::move(log);
  resume_timer_ = o_.host.loop().At(EventLoop::Clock::now() + every, [this] { ResumeInterrupted(); });
}

// A short poll is the floor (DESIGN.md): an interrupted run of this daemon's is found within one
// period whoever resolved it. Bounded per pass: at most limits.queue_max runs are looked at.
void RunQueue::ResumeInterrupted() {
  resume_timer_.reset();
  if (draining_) return;
  if (auto interrupted = o_.host.runs().RunsInState(RunState::kInterrupted, o_.limits.queue_max + 1); interrupted) {
    for (const RunRow& r : *interrupted) {
      if (!DaemonTrigger(r.trigger) || refused_resumes_.count(r.id)) continue;
      if (o_.host.queued_runs() >= o_.limits.queue_max) break;  // the queue's bound holds for resumes too
      auto resumed = o_.host.ResumeRun(r.id, {}, StopCallback(r.flow, r.trigger));
      if (!resumed && resumed.error().code != ErrorCode::kConflict) {
        refused_resumes_[r.id] = resumed.error().message;
        if (refused_resumes_.size() > 10'000) refused_resumes_.erase(refused_resumes_.begin());
        if (log_) log_("run " + std::to_string(r.id) + " cannot resume: " + resumed.error().message);
      }
    }
  }
  resume_timer_ = o_.host.loop().At(EventLoop::Clock::now() + resume_every_, [this] { ResumeInterrupted(); });
}

void RunQueue::ClaimQueuedEvery(std::chrono::milliseconds every) {
  if (!o_.several_hosts) return;
  claim_every_ = every;
  claim_timer_ = o_.host.loop().At(EventLoop::Clock::now() + every, [this] {
    claim_timer_.reset();
    ClaimQueued(true);
  });
  // An offer is a hint: one claim of spare runs soon after, however many offers arrive meanwhile.
  o_.host.OnOffersHeard([this] {
    if (offer_timer_ || draining_) return;
    offer_timer_ = o_.host.loop().At(EventLoop::Clock::now(), [this] {
      offer_timer_.reset();
      ClaimQueued(false);
    });
  });
}

// A short poll is the floor (DESIGN.md): a dead host's queued runs are adopted within one period
// of its row lapsing, and runs another host cannot start are found without its offer.
void RunQueue::ClaimQueued(bool lapsed) {
  if (draining_) return;
  const size_t queued_now = o_.host.queued_runs();
  const size_t busy = queued_now + o_.host.running_runs();
  // Spare runs only for workers free here (taking more would only move the wait to this host).
  const size_t free = o_.limits.max_workers > busy ? o_.limits.max_workers - busy : 0;
  std::string failed;
  if (free > 0) {
    auto spare = o_.host.runs().ClaimQueuedRuns(RunStore::QueuedClaim::kSpare, free);
    if (spare) Adopt(*spare);
    if (!spare) failed = spare.error().message;
  }
  if (lapsed && failed.empty()) {
    const size_t now_queued = o_.host.queued_runs();
    const size_t room = o_.limits.queue_max > now_queued ? o_.limits.queue_max - now_queued : 0;
    if (room > 0) {
      auto gone = o_.host.runs().ClaimQueuedRuns(RunStore::QueuedClaim::kLapsed, std::min<size_t>(room, 1000));
      if (gone) Adopt(*gone);
      if (!gone) failed = gone.error().message;
    }
  }
  // Told once per outage of the store (this runs at every poll), and its end too.
  // (A claim that failed inside the open batch has failed that batch in the store: it commits
  // nothing, and the runs it claimed are started nowhere until a claim commits.)
  if (!failed.empty()) {
    if (!claim_failing_ && log_) log_("queued runs of other hosts could not be claimed: " + failed);
  } else if (claim_failing_ && log_) {
    log_("queued runs of other hosts can be claimed again");
  }
  claim_failing_ = !failed.empty();
  if (lapsed) WakeWaitersOfRunsElsewhere();
  if (lapsed && claim_every_.count() > 0)
    claim_timer_ = o_.host.loop().At(EventLoop::Clock::now() + claim_every_, [this] {
      claim_timer_.reset();
      ClaimQueued(true);
    });
}

void RunQueue::WakeWaitersOfRunsElsewhere() {
  // Bounded: the waiters are bounded by the connections (limits.max_connections), and at most
  // kMost rows are read per poll.
  constexpr size_t kMost = 1000;
  std::vector<int64_t> elsewhere;
  for (const auto& [run_id, list] : waiters_) {
    if (elsewhere.size() >= kMost) break;
    if (!o_.host.RunLive(run_id)) elsewhere.push_back(run_id);
  }
  for (int64_t run_id : elsewhere) {
    auto row = o_.host.runs().GetRun(run_id);
    if (!row || !*row) continue;  // told at the wait's end, as before
    const RunState state = (*row)->state;
    if (state == RunState::kEnded || state == RunState::kNeedsReconciliation) WakeWaiters(run_id);
  }
}

void RunQueue::Adopt(const std::vector<RunRow>& runs) {
  for (const RunRow& r : runs) {
    // The claim committed or not, the run's start is the real guard: its compare-and-set on the
    // state and the holder lets one host start it.
    if (auto requeued = o_.host.RequeueRun(r, StopCallback(r.flow, r.trigger)); !requeued && log_)
      log_("run " + std::to_string(r.id) + " could not be queued here: " + requeued.error().message);
  }
}

void RunQueue::WakeParkedRuns(std::chrono::milliseconds floor) {
  wake_floor_ = floor;
  ArmWake();
}

void RunQueue::ArmWake() {
  if (wake_floor_.count() == 0 || draining_) return;
  const auto now = EventLoop::Clock::now();
  auto at = now + wake_floor_;
  if (auto next = o_.host.NextWake(); next && *next) {
    const int64_t in_us = std::max<int64_t>(0, **next - o_.now_us());
    at = std::min(at, now + std::chrono::microseconds(in_us));
  }
  if (wake_timer_) {
    if (wake_at_ <= at) return;  // an earlier look is already due
    o_.host.loop().Cancel(*wake_timer_);
  }
  wake_at_ = at;
  wake_timer_ = o_.host.loop().At(at, [this] { WakeDue(); });
}

void RunQueue::WakeDue() {
  wake_timer_.reset();
  if (draining_) return;
  const size_t queued_now = o_.host.queued_runs();
  const size_t room = o_.limits.queue_max > queued_now ? o_.limits.queue_max - queued_now : 0;
  if (room > 0) {
    auto woke = o_.host.WakeDueRuns(o_.now_us(), std::min<size_t>(room, 1000),
                                    [this](const RunRow& row) { return StopCallback(row.flow, row.trigger); });
    // Told once per outage of the store (this runs at every wake floor), and its end too.
    if (!woke && !wake_failing_ && log_) log_("parked runs could not be woken: " + woke.error().message);
    if (woke && wake_failing_ && log_) log_("parked runs are woken again");
    wake_failing_ = !woke;
  }
  ArmWake();
}

Result<ModuleHost::EventSent> RunQueue::SendEvent(NewRunEvent event) {
  // The run resumes here whatever started it: its wait ends now.
  const std::string flow = event.flow;
  auto row = event.run_id > 0 ? o_.host.runs().GetRun(event.run_id) : Result<std::optional<RunRow>>(std::nullopt);
  if (!row) return row.error();
  const std::string run_flow = *row ? (*row)->flow : flow;
  const std::string run_trigger = *row ? (*row)->trigger : std::string();
  auto sent = o_.host.SendEvent(std::move(event), draining_ ? std::nullopt
                                                            : std::optional<RunCallback>(StopCallback(run_flow, run_trigger)));
  return sent;
}

bool RunQueue::KeyNamesARun(const std::string& flow, const std::string& key, int64_t now_us) const {
  if (key.empty()) return false;
  auto it = known_keys_.find({flow, key});
  return it != known_keys_.end() && it->second.expires_us > now_us;
}

void RunQueue::RememberKey(const std::string& flow, const std::string& key, int64_t expires_us) {
  const uint64_t seq = next_key_seq_++;
  known_keys_[{flow, key}] = KnownKey{expires_us, seq};
  known_order_.emplace_back(seq, std::make_pair(flow, key));
  while (known_order_.size() > kMaxKnownKeys) {
    const auto& [oldest_seq, oldest] = known_order_.front();
    // Forgotten only if this is the entry that counts (not one found again since).
    if (auto it = known_keys_.find(oldest); it != known_keys_.end() && it->second.seq == oldest_seq) known_keys_.erase(it);
    known_order_.pop_front();
  }
}

void RunQueue::Release(int64_t run_id) {
  if (auto r = o_.host.ReleaseRun(run_id); !r) {
    // Not held here any more (cancelled, or the daemon restarted since): nothing to release.
    return;
  }
}

Result<int64_t> RunQueue::RecordEnded(const RunRequest& request, const std::string& outcome, const nlohmann::json& error) {
  NewRun nr;
  nr.flow = request.flow;
  nr.input_json = JsonText(request.input);
  nr.trigger = request.trigger;
  nr.state_detail = request.state_detail;
  nr.created_unix_us = o_.now_us();
  auto e = o_.host.runs().EnqueueRun(nr);
  if (!e) {
    o_.host.FailBatch(e.error().message);  // what the batch holds must not commit without it
    return e.error();
  }
  if (auto m = o_.host.runs().MarkRunEnded(e->run.id, outcome, JsonText(error), nr.created_unix_us); !m) {
    o_.host.FailBatch(m.error().message);
    return m.error();
  }
  return e->run.id;
}

Result<std::optional<RunRow>> RunQueue::Get(int64_t run_id) { return o_.host.runs().GetRun(run_id); }

void RunQueue::Dispatch() {
  o_.host.SetMaxWorkers(o_.limits.max_workers);
}

std::string RunStopLine(const std::string& flow, const std::string& trigger, const RunStop& stop, int64_t now_us) {
  // One line after every run: appended into one string, no temporaries (the daemon writes it per run).
  std::string line;
  line.reserve(96 + flow.size() + trigger.size() + stop.outcome.size());
  line += "run ";
  line += std::to_string(stop.run_id);
  line += stop.state == RunState::kEnded ? " ended: flow=" : " waits: flow=";
  AppendForLog(line, flow);
  if (stop.state == RunState::kEnded) {
    line += " outcome=";
    AppendForLog(line, stop.outcome);
  } else {
    line += " state=";
    line += RunStateName(stop.state);
  }
  if (stop.started_unix_us > 0) {
    // As "%.1f" writes it: the double's exact value rounded to one decimal.
    char ms[32];
    const double value = static_cast<double>(std::max<int64_t>(0, now_us - stop.started_unix_us)) / 1000.0;
    const auto written = std::to_chars(ms, ms + sizeof ms, value, std::chars_format::fixed, 1);
    line += " ms=";
    line.append(ms, written.ptr);
  }
  line += " trigger=";
  AppendForLog(line, trigger);
  if (!stop.result.ok() && !stop.result.message.empty()) {
    std::string error = EscapeForLog(stop.result.message);
    if (error.size() > 300) {
      size_t cut = 300;
      while (cut > 0 && (static_cast<unsigned char>(error[cut]) & 0xC0) == 0x80) --cut;
      error = error.substr(0, cut) + "...";
    }
    std::string quoted;
    for (char c : error) {
      if (c == '"' || c == '\\') quoted += '\\';
      quoted += c;
    }
    line += " error=\"" + quoted + "\"";
  }
  return line;
}

void RunQueue::OnStop(const std::string& flow, const std::string& trigger, const RunStop& stop) {
  if (stop.result.outcome == Outcome::kJournalError && o_.host.journal_failing()) {
    // Its end was lost with its batch: not ready until a commit succeeds again.
    journal_ok_ = false;
    journal_why_ = stop.result.message;
  }
  // A run that waits for an operator has not ended: a schedule's overlap policy still counts it.
  if (stop.state == RunState::kEnded) RunEnded(stop.run_id);
  if (RunParked(stop.state)) ArmWake();  // its wake may be the earliest now
  WakeWaiters(stop.run_id, &stop);
  // The log line and the metrics are written after the answers: the waiters' answers are sent at
  // the start of the next pass (HttpListener's Run, posted by their Respond), and what is posted
  // here runs after them in that pass. Each keeps the time of the stop, and the order of the
  // stops. Bounded by the runs that stop in one pass (at most the workers and the queue's runs
  // ended without one).
  // What the line and the metrics read, not the result's texts (up to the journal's value cap).
  StopRecord record{flow, trigger, RunStop{}, o_.now_us()};
  record.stop.run_id = stop.run_id;
  record.stop.state = stop.state;
  record.stop.outcome = stop.outcome;
  record.stop.started_unix_us = stop.started_unix_us;
  record.stop.result.outcome = stop.result.outcome;
  record.stop.result.message = stop.result.message;
  stop_records_.push_back(std::move(record));
  if (!stop_records_posted_) {
    stop_records_posted_ = true;
    o_.host.loop().Post([this, alive = std::weak_ptr<bool>(alive_)] {
      if (!alive.expired()) WriteStopRecords();
    });
  }
}

void RunQueue::WriteStopRecords() {
  stop_records_posted_ = false;
  std::vector<StopRecord> records;
  records.swap(stop_records_);
  for (const StopRecord& r : records) {
    if (o_.log) o_.log(RunStopLine(r.flow, r.trigger, r.stop, r.now_us));
    if (r.stop.started_unix_us > 0) {
      const std::string outcome = OutcomeName(r.stop.result.outcome);
      o_.metrics.Add("basal_activations_total", {r.flow, outcome});
      o_.metrics.Observe("basal_activation_duration_seconds", {r.flow},
                         static_cast<double>(std::max<int64_t>(0, r.now_us - r.stop.started_unix_us)) / 1e6);
    }
  }
}

void RunQueue::RunEnded(int64_t run_id) {
  for (const auto& observer : ended_observers_) observer(run_id);
}

void RunQueue::OnRunEnded(std::function<void(int64_t run_id)> observer) {
  ended_observers_.push_back(std::move(observer));
}

void RunQueue::Wait(int64_t run_id, std::optional<std::chrono::milliseconds> wait,
                    std::function<void(Result<RunRow>)> then, const RunRow* known) {
  Wait(run_id, wait, WaitedFn([then = std::move(then)](const Result<RunRow>& run, const ActivationRow*) { then(run); }),
       known);
}

void RunQueue::Wait(int64_t run_id, std::optional<std::chrono::milliseconds> wait, WaitedFn then, const RunRow* known) {
  const bool waits = wait && wait->count() > 0 && !draining_;
  // One read-back per run at most: a run the caller has just queued and that is still live is read
  // when it stops (its stop callback comes later in the loop, so no end slips past this waiter), or
  // not at all when the stop carries its end (WakeWaiters).
  const bool live = waits && known && known->id == run_id && o_.host.RunLive(run_id);
  if (!live) {
    auto run = o_.host.runs().GetRun(run_id);
    // A run the caller has just heard committed is answered as it was accepted when the store
    // cannot be read now (it went away since): the run is in the store, and an error would say
    // it is not.
    if (!run && known && known->id == run_id) return then(RunRow(*known), nullptr);
    if (!run || !*run) return then(!run ? run.error() : NotReadBack(run_id), nullptr);
    const RunState state = (*run)->state;
    const bool stopped = state == RunState::kEnded || state == RunState::kNeedsReconciliation;
    if (stopped || !waits) return then(std::move(**run), nullptr);
  }
  const uint64_t id = next_waiter_++;
  Waiter& w = waiters_[run_id][id];
  w.then = std::move(then);
  if (live) w.known = *known;
  w.timer = o_.host.loop().At(EventLoop::Clock::now() + *wait, [this, run_id, id] {
    auto list = waiters_.find(run_id);
    if (list == waiters_.end()) return;
    auto it = list->second.find(id);
    if (it == list->second.end()) return;
    auto then = std::move(it->second.then);
    list->second.erase(it);
    if (list->second.empty()) waiters_.erase(list);
    auto now = o_.host.runs().GetRun(run_id);
    if (!now || !*now) return then(!now ? now.error() : NotReadBack(run_id), nullptr);
    then(std::move(**now), nullptr);
  });
}

namespace {

// The row and the activation end that a plain run's stop makes of the row accepted here: what the
// module wrote for them in the batch that committed before the stop (module.cpp, Finish): the
// start its activation recorded (a plain run has one activation), the end, the outcome and the
// run's error. Nullopt when the stop does not say all of it (no activation ended the run, a
// durable run, whose row also counts resumes and attempts, or a commit that failed).
std::optional<std::pair<RunRow, ActivationRow>> EndedInMemory(RunRow&& known, const RunStop& stop) {
  if (stop.state != RunState::kEnded || !stop.end || stop.result.outcome == Outcome::kJournalError || known.durable ||
      known.state != RunState::kQueued || known.id != stop.run_id || stop.started_unix_us <= 0)
    return std::nullopt;
  const ActivationEnd& end = *stop.end;
  std::pair<RunRow, ActivationRow> out{std::move(known), ActivationRow{}};
  RunRow& r = out.first;
  r.state = RunState::kEnded;
  r.activation_id = end.activation_id;
  r.started_unix_us = stop.started_unix_us;
  r.ended_unix_us = end.end_unix_us;
  r.outcome = stop.outcome;
  r.error_json = stop.run_error_json;
  ActivationRow& a = out.second;
  a.id = end.activation_id;
  a.flow = r.flow;
  a.start_unix_us = stop.started_unix_us;
  a.end_unix_us = end.end_unix_us;
  a.outcome = OutcomeName(end.outcome);
  a.result_json = end.result_json;
  a.error_json = end.error_json;
  a.cpu_us = end.cpu_us;
  a.logs_dropped = end.logs_dropped;
  a.run_id = r.id;
  return out;
}

}  // namespace

void RunQueue::WakeWaiters(int64_t run_id, const RunStop* stop) {
  auto it = waiters_.find(run_id);
  if (it == waiters_.end()) return;
  auto list = std::move(it->second);
  waiters_.erase(it);
  std::optional<Result<std::optional<RunRow>>> run;  // read once, for the waiters the stop does not answer
  for (auto& [id, w] : list) {
    o_.host.loop().Cancel(w.timer);
    if (stop && w.known) {
      if (auto ended = EndedInMemory(std::move(*w.known), *stop)) {  // the waiter's last use of it
        w.then(std::move(ended->first), &ended->second);
        continue;
      }
    }
    if (!run) run = o_.host.runs().GetRun(run_id);
    if (!*run || !**run) {
      w.then(!*run ? run->error() : NotReadBack(run_id), nullptr);
      continue;
    }
    w.then(***run, nullptr);
  }
}

void RunQueue::Drain() {
  draining_ = true;
  if (wake_timer_) o_.host.loop().Cancel(*wake_timer_);
  wake_timer_.reset();
  if (claim_timer_) o_.host.loop().Cancel(*claim_timer_);
  claim_timer_.reset();
  if (offer_timer_) o_.host.loop().Cancel(*offer_timer_);
  offer_timer_.reset();
  // Several hosts: this host's row lapses now, so the others adopt the runs queued here at their
  // next poll instead of when the row would have lapsed.
  if (o_.several_hosts) {
    if (auto left = o_.host.runs().LeaveHosts(); !left && log_)
      log_("the runs queued here wait for this host's row to lapse: " + left.error().message);
  }
  o_.host.StopStartingRuns();  // queued runs stay queued for the next start
}

void RunQueue::AnswerWaiters() {
  std::vector<int64_t> waiting;
  for (auto& [id, w] : waiters_) waiting.push_back(id);
  for (int64_t id : waiting) WakeWaiters(id);
}

bool RunQueue::journal_ok(std::string* why) const {
  if (!journal_ok_ && why) *why = journal_why_;
  return journal_ok_;
}

}  // namespace basal::serve
