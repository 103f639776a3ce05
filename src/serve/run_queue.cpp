// The runs of basal serve, from accepted to ended (run_queue.h).
#include "serve/run_queue.h"

#include <utility>

#include "basal/outcome.h"

namespace basal::serve {

namespace {

// A run's own error record (when its activation's end holds none) keeps this much of the message.
constexpr size_t kRunErrorMessageBytes = 4096;

std::string JsonText(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

Error NotReadBack(int64_t run_id) {
  return MakeError(ErrorCode::kInternal, "run " + std::to_string(run_id) + " could not be read back");
}

}  // namespace

RunQueue::RunQueue(Options options) : o_(std::move(options)) {}

RunQueue::~RunQueue() {
  for (auto& [run, list] : waiters_)
    for (auto& [id, w] : list) o_.loop.Cancel(w.timer);
}

Result<RunQueue::Recovered> RunQueue::Recover() {
  Recovered out;
  auto settled = o_.runs.SettleRunsOfEndedActivations(o_.now_us());
  if (!settled) return settled.error();
  if (auto c = o_.journal.Commit(); !c) return c.error();
  out.ended = *settled;
  auto queued = o_.runs.RunsInState(RunState::kQueued, o_.limits.queue_max * 2 + 1000);
  if (!queued) return queued.error();
  for (const RunRow& r : *queued) queue_.push_back(r.id);
  out.queued = std::move(*queued);
  return out;
}

void RunQueue::Enqueue(RunRequest request, std::function<void(Result<AcceptedRun>)> then) {
  const int64_t now = o_.now_us();
  if (queue_.size() >= o_.limits.queue_max && !KeyNamesARun(request.flow, request.idempotency_key, now)) {
    then(MakeError(ErrorCode::kUnavailable, std::to_string(queue_.size()) +
                                                " runs are queued, the limit (limits.queue_max); retry later"));
    return;
  }
  NewRun nr;
  nr.flow = request.flow;
  nr.input_json = JsonText(request.input);
  nr.trigger = request.trigger;
  nr.idempotency_key = request.idempotency_key;
  nr.state_detail = request.state_detail;
  nr.created_unix_us = now;
  nr.key_expires_unix_us = nr.created_unix_us + o_.limits.idempotency_ttl.count() * 1000;
  auto e = o_.runs.EnqueueRun(nr);
  if (!e) {
    then(e.error());
    return;
  }
  AcceptedRun a{e->run, e->existing};
  // (A key this daemon knew may have expired in the store meanwhile: the run is then new, and the
  // queue one above queue_max. Rare, and bounded by the keys it knew.)
  if (!nr.idempotency_key.empty())
    RememberKey(nr.flow, nr.idempotency_key,
                a.existing ? a.run.created_unix_us + o_.limits.idempotency_ttl.count() * 1000 : nr.key_expires_unix_us);
  if (!a.existing) {
    o_.metrics.Add("basal_runs_accepted_total", {request.flow, request.trigger.substr(0, request.trigger.find(':'))});
    // A new run starts now if a worker slot is free: its activation's start joins the run's row in
    // the open batch, so one commit covers both (the module runs nothing of the flow before that
    // commit: every effect is a host call, answered only after its own record commits).
    if (!request.hold) {
      queue_.push_back(a.run.id);
      Dispatch();
    }
  }
  o_.module.AfterCommit([this, a, then = std::move(then)](const Result<void>& committed) {
    if (!committed) {
      journal_ok_ = false;
      journal_why_ = committed.error().message;
      // The batch is gone, the run's row and its activation's start with it: the activation
      // must not run on.
      if (auto act = activation_of_.find(a.run.id); act != activation_of_.end()) (void)o_.module.Cancel(act->second);
      then(MakeError(ErrorCode::kDatabase, "the run could not be journaled: " + committed.error().message));
      return;
    }
    journal_ok_ = true;
    then(a);
  });
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
  queue_.push_back(run_id);
  Dispatch();
}

Result<int64_t> RunQueue::RecordEnded(const RunRequest& request, const std::string& outcome, const nlohmann::json& error) {
  NewRun nr;
  nr.flow = request.flow;
  nr.input_json = JsonText(request.input);
  nr.trigger = request.trigger;
  nr.state_detail = request.state_detail;
  nr.created_unix_us = o_.now_us();
  auto e = o_.runs.EnqueueRun(nr);
  if (!e) return e.error();
  if (auto m = o_.runs.MarkRunEnded(e->run.id, outcome, JsonText(error), nr.created_unix_us); !m) return m.error();
  return e->run.id;
}

Result<std::optional<RunRow>> RunQueue::Get(int64_t run_id) { return o_.runs.GetRun(run_id); }

void RunQueue::Dispatch() {
  if (draining_) return;
  while (!queue_.empty() && in_flight_ < o_.limits.max_workers) {
    const int64_t run_id = queue_.front();
    queue_.pop_front();
    // Its row may be gone (its batch lost) or ended (cancelled) since it was queued.
    auto run = o_.runs.GetRun(run_id);
    if (!run || !*run || (*run)->state != RunState::kQueued) continue;
    const std::string flow_name = (*run)->flow;
    auto flow = o_.flow_for(flow_name);
    if (!flow) {
      EndUnstarted(run_id, flow.error().message);
      continue;
    }
    nlohmann::json input = nlohmann::json::parse((*run)->input_json, nullptr, false);
    if (input.is_discarded()) input = nullptr;
    const int64_t started = o_.now_us();
    // The run's end is written in the same batch as its activation's end (journal_end), so a
    // waiter is answered after one commit; `done` then finds it written.
    auto end_written = std::make_shared<bool>(false);
    auto id = o_.module.Submit(
        *flow, std::move(input),
        [this, run_id, flow_name, started, end_written](const ActivationResult& r) {
          OnActivationDone(run_id, flow_name, started, r, *end_written);
        },
        [this, run_id, end_written](const ActivationResult& r) {
          // The error stays with the activation's end, capped there (the API reads it from
          // there): a flow's error is not written to the journal twice.
          // TODO(lead): MarkRunEnded failure must fail the batch
          (void)o_.runs.MarkRunEnded(run_id, OutcomeName(r.outcome), "", o_.now_us());
          *end_written = true;
        });
    if (!id) {
      EndUnstarted(run_id, id.error().message);
      continue;
    }
    ++in_flight_;
    activation_of_[run_id] = *id;
    (void)o_.runs.MarkRunStarted(run_id, *id, started);
  }
  PublishGauges();
}

void RunQueue::PublishGauges() {
  o_.metrics.Set("basal_queue_length", {}, static_cast<double>(queue_.size()));
  o_.metrics.Set("basal_runs_in_flight", {}, static_cast<double>(in_flight_));
}

void RunQueue::OnActivationDone(int64_t run_id, const std::string& flow, int64_t started_us, const ActivationResult& r,
                                bool end_written) {
  if (in_flight_ > 0) --in_flight_;
  activation_of_.erase(run_id);
  const std::string outcome = OutcomeName(r.outcome);
  o_.metrics.Add("basal_activations_total", {flow, outcome});
  o_.metrics.Observe("basal_activation_duration_seconds", {flow}, static_cast<double>(o_.now_us() - started_us) / 1e6);
  if (end_written && r.outcome != Outcome::kJournalError) {
    // Written with the activation's end (Submit's journal_end), and `done` runs after that batch
    // committed: waiters can hear of it now.
    RunEnded(run_id);
    WakeWaiters(run_id);
  } else {
    // The end could not be written with the activation's, or that batch was lost: write it now;
    // waiters hear of it once it is committed.
    // Only the kind and the start of the message: the flow's own error may be as long as a frame.
    const nlohmann::json error =
        r.ok() ? nlohmann::json() : nlohmann::json{{"kind", outcome}, {"message", r.message.substr(0, kRunErrorMessageBytes)}};
    (void)o_.runs.MarkRunEnded(run_id, outcome, error.is_null() ? "" : JsonText(error), o_.now_us());
    RunEnded(run_id);
    o_.module.AfterCommit([this, run_id](const Result<void>&) { WakeWaiters(run_id); });
  }
  Dispatch();
}

void RunQueue::EndUnstarted(int64_t run_id, const std::string& why) {
  const nlohmann::json error{{"kind", "cancelled"}, {"message", "cancelled before it started: " + why}};
  (void)o_.runs.MarkRunEnded(run_id, "cancelled", error.dump(), o_.now_us());
  RunEnded(run_id);
  o_.module.AfterCommit([this, run_id](const Result<void>&) { WakeWaiters(run_id); });
}

void RunQueue::RunEnded(int64_t run_id) {
  for (const auto& observer : ended_observers_) observer(run_id);
}

void RunQueue::OnRunEnded(std::function<void(int64_t run_id)> observer) {
  ended_observers_.push_back(std::move(observer));
}

void RunQueue::Wait(int64_t run_id, std::optional<std::chrono::milliseconds> wait,
                    std::function<void(Result<RunRow>)> then) {
  auto run = o_.runs.GetRun(run_id);
  if (!run || !*run) return then(!run ? run.error() : NotReadBack(run_id));
  if ((*run)->state == RunState::kEnded || !wait || wait->count() == 0 || draining_) return then(std::move(**run));
  const uint64_t id = next_waiter_++;
  Waiter& w = waiters_[run_id][id];
  w.then = std::move(then);
  w.timer = o_.loop.At(EventLoop::Clock::now() + *wait, [this, run_id, id] {
    auto list = waiters_.find(run_id);
    if (list == waiters_.end()) return;
    auto it = list->second.find(id);
    if (it == list->second.end()) return;
    auto then = std::move(it->second.then);
    list->second.erase(it);
    if (list->second.empty()) waiters_.erase(list);
    auto now = o_.runs.GetRun(run_id);
    if (!now || !*now) return then(!now ? now.error() : NotReadBack(run_id));
    then(std::move(**now));
  });
}

void RunQueue::WakeWaiters(int64_t run_id) {
  auto it = waiters_.find(run_id);
  if (it == waiters_.end()) return;
  auto list = std::move(it->second);
  waiters_.erase(it);
  auto run = o_.runs.GetRun(run_id);
  for (auto& [id, w] : list) {
    o_.loop.Cancel(w.timer);
    if (!run || !*run) {
      w.then(!run ? run.error() : NotReadBack(run_id));
      continue;
    }
    w.then(**run);
  }
}

void RunQueue::Drain() { draining_ = true; }

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
