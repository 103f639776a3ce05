// The Module: the public face of the parent (include/basal/module.h) and the activations it owns:
// queued, running, finished. Each loop pass ends in EndOfPass(): commit the journal batch, and only
// then answer workers and call `done` callbacks (group commit). Runs: module_runs.cpp.
// docs/architecture.md draws the rooms.
#include "basal/module.h"

#include <sched.h>
#include <sys/epoll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <unordered_set>

#include "parent/host_calls/kv.h"
#include "parent/host_calls/log.h"
#include "parent/host_calls/mcp.h"
#include "parent/host_calls/timer.h"
#include "parent/journal_value.h"
#include "parent/module_impl.h"
#include "parent/secrets/secret_store.h"
#include "parent/store/owner.h"
#include "parent/store/locator.h"
#include "parent/store/open.h"

namespace basal {

using Clock = EventLoop::Clock;

const char* ModuleEventKindName(ModuleEvent::Kind kind) {
  switch (kind) {
    case ModuleEvent::Kind::kWorkerRefused: return "worker_refused";
    case ModuleEvent::Kind::kConfinementViolation: return "confinement_violation";
    case ModuleEvent::Kind::kHandlerThrew: return "handler_threw";
    case ModuleEvent::Kind::kResultTooLarge: return "result_too_large";
    case ModuleEvent::Kind::kResultNotJson: return "result_not_json";
    case ModuleEvent::Kind::kJournalFailure: return "journal_failure";
    case ModuleEvent::Kind::kRecovered: return "recovered";
    case ModuleEvent::Kind::kIdleCpu: return "idle_cpu";
    case ModuleEvent::Kind::kRunStopped: return "run_stopped";
    case ModuleEvent::Kind::kJournalRecovered: return "journal_recovered";
  }
  return "unknown";
}

Origin JournalOrigin(FlowOrigin origin) {
  switch (origin) {
    case FlowOrigin::kAdhoc: return Origin::kAdhoc;
    case FlowOrigin::kApproved: return Origin::kApproved;
    case FlowOrigin::kCodemode: return Origin::kCodemode;
  }
  return Origin::kAdhoc;
}

std::string Shown(std::string_view name) {
  return Json(std::string(name)).dump(-1, ' ', false, Json::error_handler_t::replace);
}

Module::Impl::~Impl() {
  // Nothing is left open in the journal: what still runs or waits is ended as cancelled. The
  // completion callbacks are not called, since what they refer to may already be gone.
  if (store && pool) {
    std::vector<ActivationId> ids;
    for (auto& [id, a] : live) ids.push_back(id);
    for (ActivationId id : ids) {
      const bool on_worker = live.at(id)->worker != nullptr;
      CancelOne(id, on_worker ? "the module was closed while the activation ran: its worker was killed"
                              : "the module was closed before the activation started");
    }
    std::vector<RunId> waiting;
    for (auto& [id, w] : waiting_runs) waiting.push_back(id);
    for (RunId id : waiting) EndRunWithout(id, "cancelled", "the module was closed before the run started", nullptr);
    finished.clear();
    sends.clear();
    flight.reset();  // Commit waits for it
    if (watched_store_fd >= 0) loop_->Unwatch(watched_store_fd);
    if (journal_retry_timer) loop_->Cancel(*journal_retry_timer);
    if (group_timer) loop_->Cancel(*group_timer);
    (void)store->Commit();
  }
  gate.reset();  // replies held elsewhere now answer into nothing
  pool.reset();
}

// ---- ending activations ----

void Module::Impl::Finish(Activation& a, ActivationResult r) {
  const ActivationId id = a.id;
  if (a.budget_timer) loop_->Cancel(*a.budget_timer);
  if (a.stall_timer) loop_->Cancel(*a.stall_timer);
  if (a.load_only) return FinishLoadCheck(a, std::move(r));
  const CallUsage usage = gate->EndCalls(id);
  r.logs_dropped = static_cast<int64_t>(usage.logs_dropped);
  r.activation_id = id;
  r.run_id = a.run_id;
  const int64_t now = NowUnixUs();
  Finished f{std::move(r), std::move(a.done), true, std::move(a.run_done), {}};
  ActivationEnd end = EndRecord(id, f.result, now, options.journal_value_max_bytes);
  if (a.fenced) {
    // Its run is another host's now: nothing of it is written here, and whoever waits for the run
    // here reads it as it stands (the other host ends it).
    f.journaled = false;
    if (a.run_id != 0) f.stop = RunStop{a.run_id, RunState::kInterrupted, "", f.result, a.start_unix_us};
  } else if (auto e = store->journal().EndActivation(end); !e) {
    if (e.error().code != ErrorCode::kNotFound) FailBatch(e.error().message);
  } else if (a.run_id != 0) {
    // The run ends (or parks, or waits for its next attempt) in the batch that ends its activation:
    // one commit for both. Its error stays with the activation's end (written once).
    const std::string outcome = OutcomeName(f.result.outcome);
    std::string no_retry;
    if (auto move = ParkMove(a, f.result, now, &no_retry)) {
      if (auto moved = store->runs().MoveRun(*move); !moved) FailBatch(moved.error().message);
      f.stop = RunStop{a.run_id, move->to, "", f.result, a.start_unix_us};
    } else {
      const std::string error =
          no_retry.empty() ? "" : protocol::DumpJson(Json{{"kind", "retry_refused"}, {"message", no_retry}});
      if (auto ended = store->runs().MarkRunEnded(a.run_id, outcome, error, now); !ended) FailBatch(ended.error().message);
      f.stop = RunStop{a.run_id, RunState::kEnded, outcome, f.result, a.start_unix_us, std::move(end), error};
    }
  }
  if (auto p = parking.find(id); p != parking.end() && a.fenced) {
    parking.erase(p);
  } else if (p != parking.end()) {
    // It ended before it could park (its script returned, a deadline): the call never parked.
    if (auto u = store->journal().UpdateCall(CallUpdate{id, p->second.call_id, CallState::kAbandoned, "",
                                                        protocol::DumpJson(Json{{"name", "ActivationEnded"},
                                                                                {"message", "the activation ended before the run parked"}}),
                                                        now});
        !u && u.error().code != ErrorCode::kNotFound)
      FailBatch(u.error().message);
    parking.erase(p);
  }
  if (a.run_id != 0) running_runs_.erase(a.run_id);
  if (WantsActivity()) ended_activity[id] = EndedActivity{a.flow->name, a.start_unix_us};
  if (f.result.ok()) {
    ++health.activations_ok;
  } else if (f.result.outcome == Outcome::kParked) {
    ++health.activations_parked;
  } else {
    ++health.activations_failed[f.result.outcome];
  }
  if (a.worker) a.worker->activation = nullptr;
  // A queued one (cancelled while it waited) stays in `queue` as a stale ticket that Dispatch
  // skips: removing it there would cost a scan of the queue per cancel.
  if (a.queued) --queued;
  finished.push_back(std::move(f));
  live.erase(id);  // `a` is gone now
}

// A load check ends without the journal or the activation counters: it was no activation.
void Module::Impl::FinishLoadCheck(Activation& a, ActivationResult r) {
  const ActivationId id = a.id;
  LoadCheck c;
  c.outcome = r.outcome;
  c.message = r.message;
  c.error_name = r.error_name;
  c.stack = r.stack;
  c.budget = r.budget;
  if (a.load_error) {
    c.error_message = a.load_error->message;
    c.line = a.load_error->line;
  }
  if (a.worker) a.worker->activation = nullptr;
  if (a.queued) --queued;
  DoneCallback done = [checked = std::move(a.checked), c = std::move(c)](const ActivationResult&) {
    if (checked) checked(c);
  };
  finished.push_back({std::move(r), std::move(done), /*journaled=*/false, nullptr, {}});
  live.erase(id);  // `a` is gone now
}

// The worker loaded the flow for a load check: the check passed, and the worker waits idle for
// the flow's next activation (or retires, if the flow was removed meanwhile).
void Module::Impl::EndLoadCheck(PooledWorker& w) {
  Activation& a = *w.activation;
  const bool removed = !flows.count(a.flow->id);
  Finish(a, ActivationResult{});
  pool->Release(w, removed ? std::optional<RetireReason>(RetireReason::kFlowRemoved) : std::nullopt);
}

void Module::Impl::CancelOne(ActivationId id, const std::string& why) {
  auto it = live.find(id);
  if (it == live.end()) return;
  Activation& a = *it->second;
  if (a.worker) pool->Retire(*a.worker, RetireReason::kCancelled);
  Finish(a, Failure(Outcome::kCancelled, why));
}

// ---- PoolOwner ----

void Module::Impl::OnWorkerReady(PooledWorker& w) {
  if (w.activation->load_only) return EndLoadCheck(w);
  StartOn(w);
}

void Module::Impl::OnWorkerMessage(PooledWorker& w, protocol::WorkerMessage& msg) {
  Activation& a = *w.activation;
  if (auto* call = std::get_if<protocol::Call>(&msg)) {
    if (call->activation != a.id)
      return pool->Violation(w, "call for activation " + std::to_string(call->activation) + " during activation " +
                                    std::to_string(a.id));
    if (call->id <= a.last_call_id)
      return pool->Violation(w, "call id " + std::to_string(call->id) + " reused or out of order (last was " +
                                    std::to_string(a.last_call_id) + ")");
    a.last_call_id = call->id;
    gate->OnCall(a.id, a.flow, std::move(*call));
    EndOverBudget();
    return;
  }
  if (auto* done = std::get_if<protocol::Done>(&msg)) {
    if (done->activation != a.id)
      return pool->Violation(w, "done for activation " + std::to_string(done->activation) + " during activation " +
                                    std::to_string(a.id));
    bool retire = false;
    const bool caught_budget_failure = done->ok && done->caught_budget_failure;
    ActivationResult r = ResultFromDone(std::move(*done), retire);
    // The CPU figure is the kernel's, not the worker's: a subverted engine could say anything.
    const Pool::CpuReading cpu_now = pool->ReadCpu(w);
    const auto used = cpu_now.cpu - a.cpu_base;
    r.cpu_us = std::chrono::duration_cast<std::chrono::microseconds>(used).count();
    if (used > CpuLimit(a)) {
      r = CpuExhausted(a, used);
      retire = true;
    } else if (auto leftover = gate->ReplayLeftover(a.id)) {
      // A resumed run that ends without replaying its whole record has diverged from it.
      const int64_t cpu_us = r.cpu_us;
      r = Failure(Outcome::kDiverged, "the run diverged from its record: " + *leftover);
      r.cpu_us = cpu_us;
    }
    if (caught_budget_failure) ++health.caught_budget_failures;
    const bool removed = !flows.count(a.flow->id);
    const bool durable = a.durable.has_value();
    Finish(a, std::move(r));
    std::optional<RetireReason> why;
    if (retire) why = RetireReason::kBudget;
    else if (removed) why = RetireReason::kFlowRemoved;  // no later activation can use it
    // A durable run's worker runs one activation: the next one must start from a fresh engine, as
    // its replay will.
    else if (durable) why = RetireReason::kActivationCount;
    pool->Release(w, why, cpu_now);
    return;
  }
  pool->Violation(w, "unexpected message during an activation");
}

void Module::Impl::OnWorkerLost(PooledWorker& w, ActivationResult r) {
  if (w.activation) Finish(*w.activation, std::move(r));
}

void Module::Impl::OnEvent(ModuleEvent event) {
  if (options.observer) options.observer->OnEvent(event);
}

void Module::Impl::TellStarted(const Activation& a) {
  if (!WantsActivity() || a.load_only) return;
  ActivityEvent e;
  e.kind = ActivityEvent::Kind::kActivationStarted;
  e.activation_id = a.id;
  e.run_id = a.run_id;
  e.flow = a.flow->name;
  e.started_unix_us = a.start_unix_us;
  options.observer->OnActivity(e);
}

void Module::Impl::TellEnded(const Finished& f) {
  auto it = ended_activity.find(f.result.activation_id);
  if (it == ended_activity.end()) return;
  ActivityEvent e;
  e.kind = ActivityEvent::Kind::kActivationEnded;
  e.activation_id = f.result.activation_id;
  e.run_id = f.result.run_id;
  e.flow = std::move(it->second.flow);
  e.started_unix_us = it->second.started_unix_us;
  ended_activity.erase(it);
  e.ended_unix_us = NowUnixUs();
  e.outcome = OutcomeName(f.result.outcome);
  if (!f.result.ok()) e.error_json = f.result.ErrorJson().dump(-1, ' ', false, Json::error_handler_t::replace);
  if (WantsActivity()) options.observer->OnActivity(e);
}

// ---- budgets the parent enforces ----

// Ends the activations the gate found over a budget or diverged (never from inside the gate's own call).
void Module::Impl::EndOverBudget() {
  auto ended = std::move(over_budget);
  over_budget.clear();
  for (OverBudget& o : ended) {
    auto it = live.find(o.id);
    if (it == live.end()) continue;
    Activation& a = *it->second;
    if (a.worker) pool->Retire(*a.worker, RetireReason::kBudget);
    ActivationResult r = Failure(Outcome::kBudgetExhausted, std::move(o.message));
    r.budget = o.budget;
    if (a.worker) r.cpu_us = std::chrono::duration_cast<std::chrono::microseconds>(pool->CpuOf(*a.worker) - a.cpu_base).count();
    Finish(a, std::move(r));
  }
  if (!parking.empty()) EndParked();
  auto gone = std::move(diverged);
  diverged.clear();
  for (Diverged& d : gone) {
    auto it = live.find(d.id);
    if (it == live.end()) continue;
    Activation& a = *it->second;
    if (a.worker) pool->Retire(*a.worker, RetireReason::kCancelled);
    Finish(a, d.past_record ? Failure(Outcome::kCancelled, std::string(kReplayPastRecord) + d.message)
                            : Failure(Outcome::kDiverged, "the run diverged from its record: " + d.message));
  }
}

std::chrono::nanoseconds Module::Impl::CpuLimit(const Activation& a) const {
  return a.flow->manifest.budgets().cpu + options.cpu_grace;
}

ActivationResult Module::Impl::CpuExhausted(const Activation& a, std::chrono::nanoseconds used) {
  ActivationResult r = Failure(
      Outcome::kBudgetExhausted,
      "cpu budget exhausted: the worker used " +
          std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(used).count()) +
          " ms of CPU (measured by the parent); the budget is " + std::to_string(a.flow->manifest.budgets().cpu.count()) +
          " ms (budgets.cpu_ms) and the parent stops a worker " + std::to_string(options.cpu_grace.count()) +
          " ms past it");
  r.budget = Budget::kCpu;
  r.cpu_us = std::chrono::duration_cast<std::chrono::microseconds>(used).count();
  return r;
}

// The parent's own CPU check: a worker's CPU time cannot grow faster than the wall clock (one
// thread), so the next look is due when the rest of the budget could be spent at the earliest.
void Module::Impl::SetCpuCheck(Activation& a, std::optional<std::chrono::nanoseconds> used) {
  if (!used) used = a.worker ? pool->CpuOf(*a.worker) - a.cpu_base : std::chrono::nanoseconds(0);
  const auto left = std::max<std::chrono::nanoseconds>(CpuLimit(a) - *used, std::chrono::milliseconds(1));
  a.cpu_check_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(left);
}

bool Module::Impl::CheckCpu(Activation& a) {
  a.cpu_check_at = Clock::time_point::max();  // none left unless it is set again below
  if (!a.worker) return false;
  if (pool->HasExited(*a.worker)) return false;  // how it ended (RLIMIT_CPU, a crash) is reported on this pass
  const auto spent = pool->CpuOf(*a.worker) - a.cpu_base;
  if (spent <= CpuLimit(a)) {
    SetCpuCheck(a, spent);
    return false;
  }
  ++health.cpu_kills;
  pool->Kill(*a.worker);
  Finish(a, CpuExhausted(a, spent));
  return true;
}

// ---- starting activations ----

void Module::Impl::EndAtDeadline(Activation& a) {
  ++health.deadline_kills;
  if (a.worker) pool->Kill(*a.worker);
  std::string message = std::string(a.load_only ? "loading the flow" : "activation") + " passed its deadline of " +
                        std::to_string(a.flow->manifest.budgets().deadline.count()) + " ms: worker killed";
  if (const std::string waiting = gate->ReplayWaiting(a.id); !waiting.empty()) message += " (" + waiting + ")";
  Finish(a, Failure(Outcome::kDeadline, std::move(message)));
}

// Due at the earlier of the two; both due (a loop that was held up past both) are handled in the
// order two timers would have run: the one due first first.
void Module::Impl::ArmBudgets(Activation& a) {
  const ActivationId id = a.id;
  a.budget_timer = loop_->At(std::min(a.deadline_at, a.cpu_check_at), [this, id] {
    auto it = live.find(id);
    if (it == live.end()) return;
    Activation& act = *it->second;
    act.budget_timer.reset();
    if (act.cpu_check_at <= act.deadline_at && Clock::now() >= act.cpu_check_at && CheckCpu(act)) return;
    if (Clock::now() >= act.deadline_at) return EndAtDeadline(act);
    ArmBudgets(act);
  });
}

void Module::Impl::StartOn(PooledWorker& w) {
  Activation& a = *w.activation;
  a.worker = &w;
  a.started = true;
  w.state = PooledWorker::State::kBusy;
  pool->CountActivation(w);  // at its last one, its successor is launched ahead
  pool->SendActivate(w, a.id, a.input_json, WorkerMayPoll(a));
}

void Module::Impl::Place(Activation& a, PooledWorker* idle) {
  TellStarted(a);
  if (idle) {
    const auto cpu_now = pool->Claim(*idle);
    idle->activation = &a;
    a.worker = idle;
    a.cpu_base = cpu_now;
    pool->LimitCpu(*idle, a.cpu_base, a.flow->manifest.budgets().cpu);
    a.deadline_at = Clock::now() + a.flow->manifest.budgets().deadline;
    SetCpuCheck(a, std::chrono::nanoseconds(0));  // cpu_base was read just now
    ArmBudgets(a);
    StartOn(*idle);
    return;
  }
  auto w = pool->Spawn(a.flow, &a);
  if (!w) {
    Finish(a, Failure(Outcome::kSpawnFailed, w.error().message));
    return;
  }
  a.worker = *w;
  a.cpu_base = std::chrono::nanoseconds(0);  // a new process: its CPU so far is this activation's
  a.deadline_at = Clock::now() + a.flow->manifest.budgets().deadline;
  SetCpuCheck(a);
  ArmBudgets(a);
}

namespace {
// A failure of the store itself (unreachable, refusing, full), as opposed to its answer about a
// row (not found, in another state): the first is worth trying again, the second is final.
bool StoreFailed(const Error& e) {
  return e.code == ErrorCode::kDatabase || e.code == ErrorCode::kIo || e.code == ErrorCode::kUnavailable;
}
}  // namespace

// Why an approved or codemode flow may not start: its version was revoked (read from the store
// each time: `basal flow revoke` runs in another process). A store that cannot answer refuses
// too: an approval that cannot be checked is not one.
std::optional<std::string> Module::Impl::RevokedWhy(const Flow& f, bool* store_failed) {
  if (f.approval_id == 0) return std::nullopt;
  auto revoked = store->catalog().IsRevoked(f.approval_id);
  if (!revoked && store_failed) *store_failed = StoreFailed(revoked.error());
  const std::string what = f.origin == FlowOrigin::kCodemode
                               ? "codemode policy " + f.policy + " version " + std::to_string(f.version)
                               : "flow " + f.name + " version " + std::to_string(f.version);
  if (!revoked) return what + ": cannot check whether it was revoked: " + revoked.error().message;
  if (*revoked) return what + " was revoked; approve a new version to run it again";
  return std::nullopt;
}

void Module::Impl::Dispatch() {
  while (!queue.empty()) {
    const Ticket t = queue.front();
    if (t.run != 0) {
      auto found = waiting_runs.find(t.run);
      if (found == waiting_runs.end() || found->second.held) {  // cancelled (or held again) while it waited
        queue.pop_front();
        continue;
      }
      WaitingRun& w = found->second;
      // A durable run's activation starts in a fresh worker, as its replay would.
      PooledWorker* idle = w.durable ? nullptr : pool->FindIdle(*w.flow);
      if (!idle && !pool->MakeRoom()) return OfferWaitingRuns();
      queue.pop_front();
      --queued;
      // Checked once, when a worker takes it, under the batch's write lock: no revocation can
      // slip in between this check and the start the same batch records. A run admitted in this
      // batch was checked by CurrentFlow under it already.
      const bool checked = std::find(unrevoked_in_batch.begin(), unrevoked_in_batch.end(), w.flow->approval_id) !=
                           unrevoked_in_batch.end();
      bool unreachable = false;
      if (auto revoked = checked ? std::nullopt : RevokedWhy(*w.flow, &unreachable)) {
        if (unreachable) {
          // A store that cannot answer now (unreachable, restarting) does not cancel the run: it
          // is queued again once the store is back (SettleOwed), as a run whose start was lost is.
          ActivationResult r = Failure(Outcome::kJournalError, "the run could not start: " + *revoked);
          r.run_id = t.run;
          owed_ends.push_back({0, t.run, r, std::move(w.done)});
          waiting_runs.erase(found);
          FailBatch(*revoked);
          continue;
        }
        RunCallback done = std::move(w.done);
        EndRunWithout(t.run, "cancelled", "cancelled before it started: " + *revoked, std::move(done));
        continue;
      }
      Activation* a = BeginRunActivation(t.run, w);  // consumes the waiting run
      if (a) Place(*a, idle);
      continue;
    }
    auto found = live.find(t.activation);
    if (found == live.end()) {  // ended while it waited
      queue.pop_front();
      continue;
    }
    Activation& a = *found->second;
    PooledWorker* idle = pool->FindIdle(*a.flow);
    if (!idle && !pool->MakeRoom()) return OfferWaitingRuns();
    queue.pop_front();
    a.queued = false;
    --queued;
    if (auto revoked = RevokedWhy(*a.flow)) {  // revoked while it waited: it never starts
      Finish(a, Failure(Outcome::kCancelled, "cancelled before it started: " + *revoked));
      continue;
    }
    if (a.load_only && idle) {  // that worker has loaded the flow already
      Finish(a, ActivationResult{});
      continue;
    }
    Place(a, idle);
  }
}

// ---- the end of every loop pass ----

// A batch's commit: Launch sends it (taking what waits for it into `flight`), Land hears how it
// ended. SQLite commits inside StartCommit, so a pass lands its batch before it ends, as a
// synchronous commit would; PostgreSQL's commit lands in a later pass, when its answer arrives on
// the store's descriptor, and the loop handles other workers' frames meanwhile (docs/postgres.md).
void Module::Impl::Launch() {
  Flight f;
  f.sends = std::move(sends);
  sends.clear();
  f.finished = std::move(finished);
  finished.clear();
  // The next batch likely ends as many: one allocation for it instead of a doubling vector's
  // several, each moving every end it holds (bounded: a batch that cancelled a whole queue is no
  // measure of the next).
  finished.reserve(std::min<size_t>(f.finished.size(), 256));
  f.waiters = std::move(commit_waiters);
  commit_waiters.clear();
  f.begun = std::move(begun_in_batch);
  begun_in_batch.clear();
  f.runs = std::move(runs_in_batch);
  runs_in_batch.clear();
  offered_in_batch = false;
  unrevoked_in_batch.clear();  // the batch they were read under is sent
  f.started = gate->started_waiting();
  if (!journal_failure.empty()) {
    const std::string why = std::move(journal_failure);
    journal_failure.clear();
    return Land(std::move(f), MakeError(ErrorCode::kDatabase, why));
  }
  if (!store->HasPendingBatch()) return Land(std::move(f), Ok());
  std::optional<Result<void>> outcome = store->StartCommit();
  if (outcome) {
    if (*outcome) NoteCommitted();
    return Land(std::move(f), *outcome);
  }
  flight = std::move(f);
  WatchStore();
}

void Module::Impl::Land(Flight f, const Result<void>& outcome) {
  if (!outcome) return FailPending(std::move(f), outcome.error().message);
  // Landed before the waiters hear of the commit, so that a run which ended in it is still live
  // to them (RunLive): its stop is told later in this pass.
  for (Finished& done : f.finished) landed.push_back(std::move(done));
  for (auto& fn : f.waiters) fn(Ok());
  SendAnswers(std::move(f.sends));
  // Handlers of idempotent and external calls run only now that their `started` record is durable.
  if (f.started > 0) {
    gate->RunStarted(f.started);
    EndOverBudget();
  }
}

// A failed commit fails everything that waits for a commit: the flight's batch and the one opened
// since, which was built on it (rolled back here).
void Module::Impl::FailPending(Flight f, const std::string& why) {
  journal_failure.clear();
  (void)store->Rollback();
  unrevoked_in_batch.clear();
  std::vector<std::function<void(const Result<void>&)>> waiters = std::move(f.waiters);
  for (auto& fn : commit_waiters) waiters.push_back(std::move(fn));
  commit_waiters.clear();
  const Result<void> failed = MakeError(ErrorCode::kDatabase, why);
  for (auto& fn : waiters) fn(failed);
  ++health.journal_failures;
  // Told once per outage (a server down fails every commit until it is back): the rest are counted.
  ++failures_in_outage;
  if (journal_down_since_us == 0) {
    journal_down_since_us = NowUnixUs();
    OnEvent({ModuleEvent::Kind::kJournalFailure,
             "journal commit failed: " + why +
                 " (further failures are counted in journal_failures, not told, until a commit succeeds: "
                 "journal_recovered)",
             0, 0});
  }
  std::vector<ActivationId> victims = gate->DropStartedWaiting();
  for (auto& [id, payload] : f.sends) victims.push_back(id);
  for (auto& [id, payload] : sends) victims.push_back(id);
  sends.clear();
  // Activations whose start was in a lost batch do not run on; runs journaled in one were never
  // accepted (whoever asked for them hears the failure from AfterCommit), so they are not queued.
  victims.insert(victims.end(), f.begun.begin(), f.begun.end());
  victims.insert(victims.end(), begun_in_batch.begin(), begun_in_batch.end());
  std::unordered_set<ActivationId> start_lost(f.begun.begin(), f.begun.end());
  start_lost.insert(begun_in_batch.begin(), begun_in_batch.end());
  const std::unordered_set<ActivationId> all_start_lost = start_lost;
  begun_in_batch.clear();
  std::vector<RunId> lost_runs = std::move(f.runs);
  lost_runs.insert(lost_runs.end(), runs_in_batch.begin(), runs_in_batch.end());
  runs_in_batch.clear();
  offered_in_batch = false;
  std::vector<Finished> pending = std::move(f.finished);
  for (Finished& done : finished) pending.push_back(std::move(done));
  finished = std::move(pending);
  for (RunId run : lost_runs) {
    auto it = waiting_runs.find(run);
    if (it == waiting_runs.end()) continue;
    if (it->second.held) {
      --held_runs;
    } else {
      --queued;
    }
    ActivationResult r = Failure(Outcome::kJournalError, "journal commit failed, the run was not recorded: " + why);
    r.run_id = run;
    finished.push_back({r, nullptr, true, std::move(it->second.done), RunStop{run, RunState::kEnded, OutcomeName(r.outcome), r}});
    waiting_runs.erase(it);
  }
  // A run accepted in an earlier batch whose start was in a lost one never ran: it is owed a
  // second start once the store takes writes again, and its callback waits for that.
  for (ActivationId id : victims) {
    auto it = live.find(id);
    if (it == live.end()) continue;
    Activation& a = *it->second;
    if (start_lost.count(id) && a.run_id != 0 &&
        std::find(lost_runs.begin(), lost_runs.end(), a.run_id) == lost_runs.end()) {
      owed_ends.push_back({id, a.run_id, {}, std::move(a.run_done)});
      a.run_done = nullptr;
      start_lost.erase(id);
    }
  }
  for (ActivationId id : victims) {
    auto it = live.find(id);
    if (it == live.end()) continue;
    if (it->second->worker) pool->Kill(*it->second->worker);
    Finish(*it->second, Failure(Outcome::kJournalError, "journal commit failed, nothing was answered: " + why));
  }
  for (auto& done : finished) {
    if (done.journaled && done.result.outcome != Outcome::kJournalError) {
      done.result.outcome = Outcome::kJournalError;
      done.result.message = "journal commit failed, the outcome was not recorded: " + why;
    }
    if (done.run_done) {
      done.stop.result = done.result;
      done.stop.outcome = OutcomeName(Outcome::kJournalError);
      if (done.stop.run_id == 0) {  // its end was never written (Finish's write failed)
        done.stop.run_id = done.result.run_id;
        done.stop.state = RunState::kEnded;
      }
    }
  }
  // What the lost batches said of the activations that ended in them is written again as
  // journal_error (with their runs' ends), with the victims' ends, in a batch of their own: now,
  // and again later until it commits (the store may still be failing).
  (void)store->Rollback();
  journal_failure.clear();
  for (Finished& done : finished) {
    if (!done.journaled || done.result.activation_id <= 0) continue;
    bool known = false;
    for (OwedEnd& o : owed_ends) {
      if (o.activation != done.result.activation_id) continue;
      o.result = done.result;
      known = true;
    }
    if (known) continue;
    // It ended in the lost batches that held its start (a failed call ended it): the same as a
    // victim whose start was lost, its run waits to be queued again.
    const RunId run = done.result.run_id;
    if (all_start_lost.count(done.result.activation_id) && run != 0 && done.run_done &&
        std::find(lost_runs.begin(), lost_runs.end(), run) == lost_runs.end()) {
      owed_ends.push_back({done.result.activation_id, run, done.result, std::move(done.run_done)});
      done.run_done = nullptr;
      continue;
    }
    owed_ends.push_back({done.result.activation_id, run, done.result, nullptr});
  }
  for (Finished& done : finished) landed.push_back(std::move(done));
  finished.clear();
  SettleOwed();
  if (journal_down_since_us != 0) ArmJournalRetry();
}

void Module::Impl::SettleOwed() {
  if (owed_ends.empty()) return;
  // Never mixed with other writes: a batch open or in flight commits first.
  if (flight || store->HasPendingBatch()) return ArmJournalRetry();
  const int64_t now = NowUnixUs();
  std::vector<OwedEnd> owed = std::move(owed_ends);
  owed_ends.clear();
  std::vector<size_t> requeue;     // owed[i]: a run to queue again once this batch commits
  std::vector<size_t> ended_here;  // owed[i]: its activation's end is in this batch
  std::vector<size_t> still_owed;  // owed[i]: its run's end was refused; tried again later
  bool failed = false;
  for (size_t i = 0; i < owed.size() && !failed; ++i) {
    OwedEnd& o = owed[i];
    if (o.result.outcome != Outcome::kJournalError) {
      o.result = Failure(Outcome::kJournalError, "journal commit failed, nothing was answered");
      o.result.activation_id = o.activation;
      o.result.run_id = o.run;
    }
    Result<void> ended = MakeError(ErrorCode::kNotFound, "no activation was recorded");
    if (o.activation_ended) {
      ended = Ok();
    } else if (o.activation > 0) {
      ended = store->journal().EndActivation(EndRecord(o.activation, o.result, now, options.journal_value_max_bytes));
    }
    if (!ended && StoreFailed(ended.error())) {
      failed = true;
      break;
    }
    if (ended) {
      if (!o.activation_ended) ended_here.push_back(i);
      o.activation_ended = true;
      if (o.run == 0) continue;
      // A store that refuses only the run's end (SQLite goes on with the batch) keeps the
      // activation's end, and owes the run's.
      auto marked = store->runs().MarkRunEnded(o.run, OutcomeName(Outcome::kJournalError), "", now);
      if (!marked && StoreFailed(marked.error())) still_owed.push_back(i);
      continue;
    }
    // Not there to end: ended already, or its start was never recorded (its run is still queued).
    if (o.run == 0 || !o.done) continue;
    auto row = store->runs().GetRun(o.run);
    if (!row) {
      failed = !row && StoreFailed(row.error());
      if (failed) break;
      continue;
    }
    if (*row && (*row)->state == RunState::kQueued) requeue.push_back(i);
  }
  if (!failed) {
    if (auto c = store->Commit(); !c) failed = true;
  }
  if (failed) {
    (void)store->Rollback();
    for (size_t i : ended_here) owed[i].activation_ended = false;
    owed_ends = std::move(owed);
    return ArmJournalRetry();
  }
  for (size_t i : still_owed) owed_ends.push_back(std::move(owed[i]));
  for (size_t i : requeue) {
    OwedEnd& o = owed[i];
    auto row = store->runs().GetRun(o.run);
    if (row && *row && (*row)->state == RunState::kQueued && RequeueRun(**row, o.done)) o.done = nullptr;
  }
  for (OwedEnd& o : owed) {
    if (!o.done) continue;  // (a moved-from entry, kept in owed_ends, has none either)
    ActivationResult r = o.result;
    r.run_id = o.run;
    landed.push_back({r, nullptr, true, std::move(o.done), RunStop{o.run, RunState::kEnded, OutcomeName(r.outcome), r}});
  }
  if (!owed_ends.empty()) return ArmJournalRetry();
  NoteCommitted();
}

void Module::Impl::ArmJournalRetry() {
  if (journal_retry_timer) return;
  journal_retry_backoff = std::min<std::chrono::milliseconds>(
      std::chrono::milliseconds(2000), std::max<std::chrono::milliseconds>(std::chrono::milliseconds(100), journal_retry_backoff * 2));
  journal_retry_timer = loop_->At(Clock::now() + journal_retry_backoff, [this] {
    journal_retry_timer.reset();
    RetryJournal();
  });
}

void Module::Impl::RetryJournal() {
  if (!owed_ends.empty()) return SettleOwed();
  if (journal_down_since_us == 0) return;
  // A batch of the loop's own is open or in flight: its commit tells.
  if (flight || store->HasPendingBatch()) return ArmJournalRetry();
  if (store->Check()) return JournalBack();
  ArmJournalRetry();
}

void Module::Impl::NoteCommitted() {
  if (journal_down_since_us != 0 && owed_ends.empty()) JournalBack();
}

void Module::Impl::JournalBack() {
  if (journal_down_since_us == 0) return;
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.1f", static_cast<double>(NowUnixUs() - journal_down_since_us) / 1e6);
  OnEvent({ModuleEvent::Kind::kJournalRecovered,
           "journal commits again, " + std::string(seconds) + " s after the first of " +
               std::to_string(failures_in_outage) + " failed commits",
           0, 0});
  journal_down_since_us = 0;
  failures_in_outage = 0;
  journal_retry_backoff = std::chrono::milliseconds(0);
  if (journal_retry_timer) {
    loop_->Cancel(*journal_retry_timer);
    journal_retry_timer.reset();
  }
}

// The store's descriptor is on the loop while a commit is in flight, so the pass that hears of it
// lands it; it is off the loop otherwise (the store reads its answers itself when it waits).
void Module::Impl::WatchStore() {
  const StoreIo io = flight ? store->io() : StoreIo{};
  if (io.fd != watched_store_fd && watched_store_fd >= 0) {
    loop_->Unwatch(watched_store_fd);
    watched_store_fd = -1;
  }
  if (io.fd < 0) return;
  const uint32_t events = EPOLLIN | (io.want_write ? EPOLLOUT : 0u);
  if (watched_store_fd == io.fd) {
    loop_->Modify(io.fd, events);
    return;
  }
  // Nothing to do in the callback: the pass's end polls the commit.
  if (loop_->Watch(io.fd, events, [](uint32_t) {})) watched_store_fd = io.fd;
}

// Answers leave for a worker in the order they were journaled, and only while less than
// worker_output_budget_bytes waits for it; the rest are held until it reads (OnWorkerDrained).
void Module::Impl::SendAnswers(std::vector<std::pair<ActivationId, std::string>> batch) {
  std::vector<ActivationId> touched;
  for (auto& [id, payload] : batch) {
    auto it = live.find(id);
    if (it == live.end()) continue;
    Activation& a = *it->second;
    a.answers_in_batch_bytes -= std::min<uint64_t>(a.answers_in_batch_bytes, payload.size());
    if (!a.worker) continue;
    a.held_bytes += payload.size();
    a.held_answers.push_back(std::move(payload));
    if (touched.empty() || touched.back() != id) touched.push_back(id);
  }
  std::sort(touched.begin(), touched.end());
  touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
  for (ActivationId id : touched) {
    auto it = live.find(id);  // an earlier one's kill cannot end this one, but look again anyway
    if (it != live.end()) FlushAnswers(*it->second);
  }
}

uint64_t Module::Impl::OutgoingBytes(const Activation& a) const {
  const uint64_t sent = a.worker ? pool->PendingOutput(*a.worker) : 0;
  return a.answers_in_batch_bytes + a.held_bytes + sent;
}

bool Module::Impl::WorkerHasRoom(ActivationId id) const {
  auto it = live.find(id);
  if (it == live.end() || !it->second->worker) return true;  // ending: nothing will be sent
  return OutgoingBytes(*it->second) < options.worker_output_budget_bytes;
}

void Module::Impl::FlushAnswers(Activation& a) {
  // Judged once for the answers written now: sending them changes no worker's state.
  const bool poll = a.held_head < a.held_answers.size() && WorkerMayPoll(a);
  while (a.held_head < a.held_answers.size() && a.worker &&
         pool->PendingOutput(*a.worker) < options.worker_output_budget_bytes) {
    std::string payload = std::move(a.held_answers[a.held_head++]);
    a.held_bytes -= payload.size();
    if (poll) protocol::AddPollMember(payload);
    pool->Send(*a.worker, payload);
  }
  if (a.held_head == a.held_answers.size()) {  // all handed on: the vector starts over
    a.held_answers.clear();
    a.held_head = 0;
  } else if (a.held_head >= 64 && a.held_head * 2 >= a.held_answers.size()) {
    // A worker that reads slowly but never drains all: the handed-on prefix does not grow for life.
    a.held_answers.erase(a.held_answers.begin(), a.held_answers.begin() + static_cast<std::ptrdiff_t>(a.held_head));
    a.held_head = 0;
  }
  if (!a.worker) return;
  const uint64_t outgoing = OutgoingBytes(a);
  if (outgoing <= options.worker_output_max_bytes) a.stall.reset();
  if (outgoing < options.worker_output_budget_bytes) {
    // Calls that waited for room run in a pass of their own (their answers need its commit), not
    // here: this may be the end of a pass, after its commit.
    if (gate->has_waiting_for_worker(a.id) && !a.room_posted) {
      a.room_posted = true;
      loop_->Post([this, id = a.id] {
        auto it = live.find(id);
        if (it == live.end()) return;
        it->second->room_posted = false;
        gate->WorkerDrained(id);
        EndOverBudget();
      });
    }
    return;
  }
  if (outgoing <= options.worker_output_max_bytes) return;
  // More than the max waits (answers of handlers that were already running). A worker that reads
  // goes on; one that reads none of it for worker_output_stall is not reading at all.
  const uint64_t read = pool->WrittenBytes(*a.worker);
  const auto now = Clock::now();
  if (!a.stall || a.stall->read != read) a.stall = Activation::Stall{read, now};
  if (now - a.stall->since >= options.worker_output_stall) {
    ++health.output_overflows;
    return pool->Violation(*a.worker, "it does not read its answers: " + std::to_string(outgoing) +
                                          " bytes wait for it, past the " +
                                          std::to_string(options.worker_output_max_bytes) +
                                          " the parent holds for one worker (worker_output_max_bytes), and it read "
                                          "none of them for " + std::to_string(options.worker_output_stall.count()) +
                                          " ms (worker_output_stall)");
  }
  if (!a.stall_timer) {
    a.stall_timer = loop_->At(a.stall->since + options.worker_output_stall, [this, id = a.id] {
      auto it = live.find(id);
      if (it == live.end()) return;
      it->second->stall_timer.reset();
      FlushAnswers(*it->second);
    });
  }
}

void Module::Impl::OnWorkerDrained(PooledWorker& w) { FlushAnswers(*w.activation); }

// Group commit across passes, only under a backlog: activations wait in the queue for a worker
// (the pool is full), so whoever waits for this batch waits behind them anyway. A group is bounded
// in ends and in age. What a batch holds is answered only after its commit, grouped or not: a crash
// loses only what nobody heard of (docs/journal.md).
constexpr size_t kGroupMaxEnds = 128;
constexpr std::chrono::microseconds kGroupMaxAge{2000};

bool Module::Impl::GroupsBatch() const {
  if (queued == 0 || !journal_failure.empty() || !store->HasPendingBatch()) return false;
  if (finished.size() >= kGroupMaxEnds) return false;
  return !grouping_since || Clock::now() - *grouping_since < kGroupMaxAge;
}

// Whether a CPU is free for a worker to poll on: fewer workers busy than there are CPUs, a worker
// still starting (a successor or a codemode spare launched ahead, its start about a millisecond
// of CPU) counted as busy. Only an idle worker woken ahead of a run (WakeIdleWorker) asks this: it
// would spin for a frame that comes only after the run is accepted and journaled.
bool Module::Impl::WorkersMayPoll() const {
  return options.busy_poll.count() > 0 && pool->BusyOrStarting() < cpus;
}

// Whether a worker may poll stdin for its next frame (src/worker/wait_spin.h) after this
// `activate` or `result`: whenever the loop may poll (busy_poll 0 turns both off), however many
// workers are busy. A polling worker yields between two looks (sched_yield), so the loop or
// another worker runnable on its CPU runs first and the poll takes only a CPU nothing else wants;
// its window shrinks to nothing while frames do not come soon. Under a backlog the next `activate`
// comes within microseconds of a `done`: at 8 workers on 2 CPUs the pool ran 72-75k trivial
// activations/s against 50-53k with workers polling only while fewer were busy than CPUs (before
// the yield, polling in every worker read 0.76x; docs/performance.md, "Issue 30: a backlog's
// workers poll too, and the host call's own work, fifteenth round"). A codemode script's worker is
// never told to: its script runs once and mostly waits on tools that answer slowly (downstream MCP
// servers), and its polling read about 50-75 us a script more at an agent's pace ("Issue 30: the
// worker polls before it blocks").
bool Module::Impl::WorkerMayPoll(const Activation& a) const {
  return a.flow && a.flow->profile != Profile::kCodemode && options.busy_poll.count() > 0;
}

void Module::Impl::WakeIdleWorker(std::string_view name) {
  if (WorkersMayPoll()) pool->WakeIdle(name);
}

// Whether the loop may block with the group open (the before-wait hook set in Open commits it
// otherwise). Only ends may wait there, for the group's age at most (group_timer): their callers
// hear of them after the commit either way. An activation's start is committed before the loop
// waits on its worker, a host call's answer and a `started` record's handler wait for the commit,
// and so does whatever AfterCommit holds (a serve run's answer): none of these waits for a timer.
bool Module::Impl::GroupMayWait() const {
  return begun_in_batch.empty() && runs_in_batch.empty() && sends.empty() && commit_waiters.empty() &&
         !gate->has_started_waiting();
}

// A batch that starts one activation on a worker: the worker may have run and written its `done`
// already, or be about to. Read then, the end joins the start's batch: one commit for both, and still
// nothing leaves before it. Woken by the `activate` write, the worker is often queued on the loop's own
// CPU (a pipe's wake-up is a sync one) without having preempted the loop: the loop yields to it first
// (sched_yield returns at once when nothing else is runnable here). A worker running on another CPU
// gets up to busy_poll (50 us) more, spent spinning on the loop's descriptors, only while nothing but
// its output can be ready (no other descriptor, no posted work, no due timer) and fewer workers are
// busy than there are CPUs: the start then commits with its end instead of alone before the loop
// waits (a start that is not yet durable has had no effect: every host call its worker makes waits
// for a commit). Only for a batch of one start (a sequential caller's, which waits for both commits):
// under a backlog this would cost a system call per start, and the ends are grouped there anyway.
void Module::Impl::ReadBegunWorker() {
  if (begun_in_batch.size() != 1) return;
  const ActivationId id = begun_in_batch.front();
  auto it = live.find(id);
  if (it == live.end() || !it->second->started || !it->second->worker) return;
  sched_yield();
  pool->ReadReady(*it->second->worker);
  it = live.find(id);
  if (it != live.end() && it->second->worker && options.busy_poll.count() > 0 && pool->Busy() < cpus) {
    PooledWorker& w = *it->second->worker;
    const int fd = pool->OutputFd(w);
    if (fd >= 0 && loop_->SpinWhileOnly(fd, options.busy_poll)) pool->ReadReady(w);
  }
  // Its worker is idle again if it ended: a run or activation queued behind it starts in this batch
  // (the loop would not wake for it).
  if (live.find(id) == live.end()) Dispatch();
}

void Module::Impl::EndOfPass(bool may_group) {
  if (in_pass) return;
  in_pass = true;
  EndOverBudget();  // from answers that arrived since the last pass
  Dispatch();
  if (flight) {
    if (std::optional<Result<void>> outcome = store->PollCommit()) {
      Flight f = std::move(*flight);
      flight.reset();
      if (*outcome) NoteCommitted();
      Land(std::move(f), *outcome);
    }
  }
  if (!flight && may_group && GroupsBatch()) {
    if (!grouping_since) {
      grouping_since = Clock::now();
      // Wakes a loop that blocked with a group of ends: the pass it ends commits (GroupsBatch says no).
      group_timer = loop_->At(*grouping_since + kGroupMaxAge, [this] { group_timer.reset(); });
    }
  } else if (!flight) {
    grouping_since.reset();
    if (group_timer) loop_->Cancel(*group_timer);
    group_timer.reset();
    ReadBegunWorker();
    const bool started = gate->has_started_waiting();
    Launch();
    // A backend that committed at once ran the started handlers in Land: what they wrote commits
    // now, in a second round, as it would after a synchronous commit.
    if (started && !flight) Launch();
  }
  WatchStore();
  pool->Sweep();
  auto done = std::move(landed);
  landed.clear();
  in_pass = false;
  if (!ended_activity.empty()) {
    for (const Finished& f : done)
      if (f.journaled && f.result.activation_id > 0) TellEnded(f);
    ended_activity.clear();  // what a failed batch took back, or an observer that stopped listening
  }
  // Every callback runs even if one throws; the first exception then goes to the caller of Run*.
  std::exception_ptr first;
  in_callbacks = true;
  for (auto& f : done) {
    try {
      if (f.done) f.done(f.result);
      if (f.run_done) f.run_done(f.stop);
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  in_callbacks = false;
  if (first) std::rethrow_exception(first);
}

void Module::Impl::RenewLeases() {
  if (server_clock_leases) {
    Heartbeat();
  } else {
    (void)store->journal().RenewLeases(owner, NowUnixUs() + options.lease.count() * 1000);
  }
  loop_->At(Clock::now() + options.lease / 3, [this] { RenewLeases(); });
}

void Module::Impl::Heartbeat() {
  std::vector<int64_t> held;
  for (const auto& [id, a] : live)
    if (id > 0 && !a->load_only && !a->queued) held.push_back(id);
  const auto sent = Clock::now();
  // The renewal joins the module's batch (store.h says why); a closed activation is seen at once.
  auto taken = store->journal().RenewAndCheckLeases(owner, held);
  // Looked at again no sooner than the next heartbeat if this one fails (the server is away):
  // nothing of this host commits meanwhile anyway, and a wait must not become a reconnect each.
  leases_hold_until = sent + options.lease / 3;
  if (!taken) {
    FailBatch("the leases could not be renewed: " + taken.error().message);
    return;
  }
  // The server set each lease to its now + lease after `sent`: it holds at least until then by
  // this process's clock. Half the lease, for the rates of two clocks and a slow answer.
  leases_hold_until = sent + options.lease / 2;
  for (int64_t id : *taken) FenceOut(id);
  if (!heartbeat_store) return;  // one process of its own (`basal run`): it takes over nothing
  auto took = heartbeat_store->journal().TakeExpiredLeases(owner);
  if (!took) {
    // Tried again at every heartbeat; told once per outage, as a failed commit is.
    if (!takeover_failing)
      OnEvent({ModuleEvent::Kind::kJournalFailure, "lapsed leases could not be taken over: " + took.error().message +
                                                       " (tried again at every heartbeat; told again once it works)"});
    takeover_failing = true;
    return;
  }
  if (takeover_failing) {
    takeover_failing = false;
    OnEvent({ModuleEvent::Kind::kJournalRecovered, "lapsed leases can be taken over again"});
  }
  WatchOffers();
  if (took->abandoned_activations.empty()) return;
  health.abandoned_recovered += took->abandoned_activations.size();
  OnEvent({ModuleEvent::Kind::kRecovered,
           "took over " + std::to_string(took->abandoned_activations.size()) +
               " activation(s) whose lease lapsed (their host died or stopped renewing): their runs ended, "
               "or wait to be resumed if durable"});
}

void Module::Impl::OfferWaitingRuns() {
  // Once per batch that accepted runs (not at every pass while the queue is full): a host that
  // missed it finds the runs at its next poll.
  if (!heartbeat_store || offered_in_batch || runs_in_batch.empty() || queued_runs() == 0) return;
  offered_in_batch = true;
  if (auto r = store->runs().OfferQueuedRuns(); !r) FailBatch(r.error().message);
}

void Module::Impl::DropTakenRuns(const std::vector<RunId>& runs) {
  for (RunId run : runs) {
    auto it = waiting_runs.find(run);
    if (it == waiting_runs.end()) continue;  // started here already (its start will be refused), or never here
    if (it->second.held) {
      --held_runs;
    } else {
      --queued;  // its ticket is skipped by Dispatch
    }
    waiting_runs.erase(it);
  }
}

void Module::Impl::OnOffersHeard(std::function<void()> heard) {
  offers_heard = std::move(heard);
  WatchOffers();
}

void Module::Impl::WatchOffers() {
  if (!offers_heard || !heartbeat_store) return;
  if (watched_offers_fd >= 0) loop_->Unwatch(watched_offers_fd);
  watched_offers_fd = -1;
  auto hear = [this] {
    auto heard = heartbeat_store->runs().HeardFromHosts();
    if (!heard) {
      // Broken: not watched until the next heartbeat makes the connection again (the poll floor
      // finds the runs meanwhile).
      if (watched_offers_fd >= 0) loop_->Unwatch(watched_offers_fd);
      watched_offers_fd = -1;
      return;
    }
    if (!heard->taken.empty()) DropTakenRuns(heard->taken);
    if (heard->offered) offers_heard();
  };
  const int fd = heartbeat_store->io().fd;
  if (fd < 0) return;
  if (loop_->Watch(fd, EPOLLIN, [hear](uint32_t) { hear(); })) watched_offers_fd = fd;
  hear();  // what arrived while the heartbeat's own statements read the socket
}

void Module::Impl::FenceOut(ActivationId id) {
  auto it = live.find(id);
  if (it == live.end()) return;
  Activation& a = *it->second;
  a.fenced = true;
  const std::string why = "another host took over run " + std::to_string(a.run_id) + " (activation " +
                          std::to_string(id) + "): this host's lease lapsed; nothing more of it is written here";
  OnEvent({ModuleEvent::Kind::kRecovered, why});
  if (a.worker) pool->Retire(*a.worker, RetireReason::kCancelled);
  Finish(a, Failure(Outcome::kCancelled, why));
}

void Module::Impl::AfterCommit(std::function<void(const Result<void>&)> fn) {
  commit_waiters.push_back(std::move(fn));
  // The pass that commits may otherwise wait for other work: only when this comes from another
  // thread, or from inside EndOfPass (a `done` callback, a commit's waiter), which has launched its
  // batch already. From anywhere else on the loop's thread (a request's handler, a timer, a posted
  // task) the pass's end comes before the loop waits, and launches the batch: no eventfd write,
  // read and empty read per run (the serve run, as Submit does for an activation).
  if (in_pass || in_callbacks || !loop_->OnLoopThread()) loop_->Wake();
}

// ---- Module ----

Module::Module(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Module::~Module() = default;

HttpFetchOptions Module::Impl::HttpFetchOptionsFor() {
  HttpFetchOptions o;
  o.max_in_flight = options.http_max_in_flight;
  o.user_agent = "basal/" BASAL_VERSION;
  o.resolve_for_tests = options.http_resolve_for_tests;
  if (!options.secrets_dir.empty()) {
    // Read at each request, so `basal secret set` by another process takes effect at once.
    o.secret = [dir = options.secrets_dir](std::string_view name) -> Result<std::string> {
      auto secrets = SecretStore::Open(dir, /*create=*/false);
      if (!secrets) return secrets.error();
      return secrets->Get(name);
    };
  }
  o.count = [this](std::string_view kind, std::string_view reason) {
    auto& counts = kind == "failure" ? health.http_failures : health.http_refusals;
    ++counts[std::string(reason)];
  };
  return o;
}

Result<std::unique_ptr<Module>> Module::Open(ModuleOptions options) {
  if (options.journal_path.empty()) return MakeError(ErrorCode::kInvalidArgument, "module: journal_path is required");
  if (options.worker_path.empty()) return MakeError(ErrorCode::kInvalidArgument, "module: worker_path is required");
  if (options.max_workers == 0) return MakeError(ErrorCode::kInvalidArgument, "module: max_workers must be at least 1");
  if (options.max_activations_per_worker == 0)
    return MakeError(ErrorCode::kInvalidArgument, "module: max_activations_per_worker must be at least 1");
  if (options.lease < std::chrono::milliseconds(3))
    return MakeError(ErrorCode::kInvalidArgument, "module: lease must be at least 3 ms");
  if (options.journal_value_max_bytes < 1024)
    return MakeError(ErrorCode::kInvalidArgument, "module: journal_value_max_bytes must be at least 1024");
  if (options.calls_in_flight_max_bytes < (1u << 20))
    return MakeError(ErrorCode::kInvalidArgument, "module: calls_in_flight_max_bytes must be at least 1 MiB");
  if (options.worker_output_budget_bytes < (1u << 20))
    return MakeError(ErrorCode::kInvalidArgument, "module: worker_output_budget_bytes must be at least 1 MiB");
  if (options.worker_output_max_bytes < options.worker_output_budget_bytes + protocol::kDefaultMaxFrameBytes + 16)
    return MakeError(ErrorCode::kInvalidArgument,
                     "module: worker_output_max_bytes must hold worker_output_budget_bytes and one frame of the "
                     "largest size (" + std::to_string(protocol::kDefaultMaxFrameBytes + 16) + " bytes) beyond it");
  if (options.worker_output_stall.count() < 1)
    return MakeError(ErrorCode::kInvalidArgument, "module: worker_output_stall must be at least 1 ms");
  if (options.cpu_grace.count() < 0 || options.idle_cpu_max.count() < 0)
    return MakeError(ErrorCode::kInvalidArgument, "module: cpu_grace and idle_cpu_max must not be negative");
#ifndef BASAL_TEST_HOOKS
  if (!options.worker_args.empty())
    return MakeError(ErrorCode::kInvalidArgument,
                     "module: worker_args are test-hooks switches, and this basal is not a test-hooks build");
#endif
  // A worker that dies while we write to it must not kill the parent.
  struct sigaction old {};
  sigaction(SIGPIPE, nullptr, &old);
  if (old.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);

  auto impl = std::make_unique<Impl>();
  Impl& m = *impl;
  auto loop = EventLoop::Create();
  if (!loop) return loop.error();
  m.loop_ = std::move(*loop);
  auto store = OpenStore({options.journal_path, options.durability});
  if (!store) return store.error();
  m.store = std::move(*store);
  m.owner = ThisProcessOwner();
  m.launcher = WorkerLauncher::ForThisPlatform();
  m.kernel_landlock_abi = KernelLandlockAbi();
  auto worker_identity = ResolveWorkerUser(options.worker_user);
  if (!worker_identity) return worker_identity.error();
  if (cpu_set_t set; sched_getaffinity(0, sizeof set, &set) == 0) m.cpus = static_cast<size_t>(CPU_COUNT(&set));
  m.options = std::move(options);

  // Activations of parents that died are closed before this one starts its own; their runs end
  // with them, except durable ones, which wait to be resumed (interrupted).
  // A PostgreSQL store may be shared (several serve hosts, `basal run`s on other machines): every
  // lease in it is the server's to write and to judge, so a skewed clock here neither closes a
  // live lease of another process nor writes one of its own that others see lapsed.
  const auto where = ParseLocator(m.options.journal_path);
  m.server_clock_leases = m.options.several_hosts || (where && where->kind == StoreKind::kPostgres);
  if (m.server_clock_leases)
    if (auto r = m.store->journal().UseServerClockLeases(m.options.lease); !r) return r.error();
  auto recovered = m.server_clock_leases ? m.store->journal().TakeExpiredLeases(m.owner)
                                         : m.store->journal().RecoverAbandoned(m.owner, NowUnixUs());
  if (!recovered) return recovered.error();
  m.health.abandoned_recovered = recovered->abandoned_activations.size();
  auto settled = m.store->runs().SettleRunsOfEndedActivations(NowUnixUs());
  if (!settled) return settled.error();
  // The runs this host queues are its own from now on; its row says it lives (renewed with its leases).
  if (m.options.several_hosts && !m.options.host_id.empty())
    if (auto r = m.store->runs().HoldQueuedRunsAs(m.options.host_id); !r) return r.error();

  auto sink = m.options.log_sink;
  if (!sink) sink = [](const HostCallContext&, std::string_view, std::string_view) {};
  // The sink is looked up at each line, so SetLogSink takes effect at once.
  if (auto r = RegisterLogHostCall(m.registry,
                                   [&m](const HostCallContext& ctx, std::string_view level, std::string_view message) {
                                     if (m.options.log_sink) m.options.log_sink(ctx, level, message);
                                   });
      !r)
    return r.error();
  if (auto r = RegisterKvHostCalls(m.registry, *m.store); !r) return r.error();
  if (auto r = RegisterHttpFetch(m.registry, *m.loop_, m.HttpFetchOptionsFor()); !r) return r.error();
  if (auto r = RegisterTimerHostCall(m.registry, std::make_shared<TimerSleeps>(*m.loop_)); !r) return r.error();
  if (auto r = RegisterMcpHostCalls(m.registry); !r) return r.error();
  if (auto r = m.RegisterRunHostCalls(); !r) return r.error();

  CallGateHooks hooks;
  hooks.send = [&m](ActivationId id, std::string payload) {
    if (auto it = m.live.find(id); it != m.live.end()) it->second->answers_in_batch_bytes += payload.size();
    m.sends.emplace_back(id, std::move(payload));
  };
  hooks.answer_late = [&m](ActivationId id) {
    auto it = m.live.find(id);
    if (it != m.live.end() && it->second->worker && m.WorkerMayPoll(*it->second)) m.pool->SendPoll(*it->second->worker);
  };
  hooks.worker_has_room = [&m](ActivationId id) { return m.WorkerHasRoom(id); };
  hooks.journal_failed = [&m](std::string why) { m.FailBatch(std::move(why)); };
  hooks.event = [&m](ModuleEvent e) { m.OnEvent(std::move(e)); };
  hooks.count_denied = [&m] { ++m.health.denied_calls; };
  hooks.count_call = [&m](const std::string& name, Verdict verdict, bool member) {
    auto& counts = m.health.host_calls;
    if (member && !counts.count(name)) {
      if (m.members_counted >= kMaxHostCallNamesCounted) return void(++counts["other"][VerdictName(verdict)]);
      ++m.members_counted;
    }
    ++counts[name][VerdictName(verdict)];
  };
  hooks.count_log_dropped = [&m] { ++m.health.logs_dropped; };
  hooks.recorded = [&m](ActivationId id, const Flow& flow, int64_t call_id, const std::string& name,
                        const Decision& decision, CallState state) {
    if (!m.WantsActivity() || name == "log") return;  // a log line reaches the log sink instead
    ActivityEvent e;
    e.kind = ActivityEvent::Kind::kHostCall;
    e.activation_id = id;
    if (auto it = m.live.find(id); it != m.live.end()) {
      e.run_id = it->second->run_id;
      e.started_unix_us = it->second->start_unix_us;
    }
    e.flow = flow.name;
    e.call_id = call_id;
    e.name = name;
    e.decision = VerdictName(decision.verdict);
    e.rule = decision.rule;
    e.state = CallStateName(state);
    m.options.observer->OnActivity(e);
  };
  hooks.over_budget = [&m](ActivationId id, Budget budget, std::string message) {
    m.over_budget.push_back({id, budget, std::move(message)});
  };
  hooks.diverged = [&m](ActivationId id, std::string message, bool past_record) {
    m.diverged.push_back({id, std::move(message), past_record});
  };
  CallGateLimits limits;
  limits.journal_value_max_bytes = m.options.journal_value_max_bytes;
  limits.in_flight_max_bytes = m.options.calls_in_flight_max_bytes;
  m.gate = std::make_unique<CallGate>(m.registry, m.store->journal(), m.store->journal_id(), *m.loop_, std::move(hooks),
                                      limits);

  PoolOptions po;
  po.worker_path = m.options.worker_path;
  po.worker_args = m.options.worker_args;
  po.welcome_timeout = m.options.welcome_timeout;
  m.welcome_policy = {m.options.allow_without_landlock, m.kernel_landlock_abi, *worker_identity};
  po.welcome_policy = m.welcome_policy;
  po.can_change_worker_limits = CanChangeWorkerLimits(m.welcome_policy.worker_identity);
  po.max_workers = m.options.max_workers;
  po.max_activations_per_worker = m.options.max_activations_per_worker;
  po.idle_retire = m.options.idle_retire;
  po.flow_memory_headroom_bytes = m.options.flow_memory_headroom_bytes;
  po.codemode_memory_headroom_bytes = m.options.codemode_memory_headroom_bytes;
  po.cpu_grace = m.options.cpu_grace;
  po.idle_cpu_max = m.options.idle_cpu_max;
  m.pool = std::make_unique<Pool>(std::move(po), *m.loop_, *m.launcher, m.health, m);

  m.loop_->set_after_pass([&m] { m.EndOfPass(); });
  m.loop_->set_before_wait([&m] { return m.grouping_since.has_value() && !m.GroupMayWait(); },
                           [&m] { m.EndOfPass(false); });
  // The window grows only while no worker is starting: a start (about a millisecond of CPU) wants
  // the CPU a longer poll would take. run_script back to back, where the next codemode spare starts
  // beside each script, read 1.2x slower with the window growing through its start.
  m.loop_->set_busy_poll(
      m.options.busy_poll, [&m] { return BusyPollFor(m.pool->Busy(), m.cpus); },
      m.options.busy_poll_max, [&m] { return !m.pool->AnyStarting(); });
  if (m.options.several_hosts) {
    auto second = OpenStore({m.options.journal_path, m.options.durability});
    if (!second) return second.error();
    m.heartbeat_store = std::move(*second);
    if (auto r = m.heartbeat_store->journal().UseServerClockLeases(m.options.lease); !r) return r.error();
    if (!m.options.host_id.empty())
      if (auto r = m.heartbeat_store->runs().ListenForOffers(m.options.host_id); !r) return r.error();
  }
  if (m.server_clock_leases) {
    // A process paused past half its lease (SIGSTOP, a VM frozen, swap) renews before it handles
    // anything that arrived meanwhile: what another host took over stops here unwritten.
    m.loop_->set_after_wait([&m] {
      if (Clock::now() > m.leases_hold_until) m.Heartbeat();
    });
  }
  m.RenewLeases();
  // Nothing of Open may keep the journal's write lock until the embedder first runs the loop:
  // another process (`basal flow revoke`, a second parent) must be able to write meanwhile.
  if (m.store->HasPendingBatch()) {
    if (auto c = m.store->Commit(); !c) {
      (void)m.store->Rollback();
      return c.error();
    }
  }
  if (!recovered->abandoned_activations.empty()) {
    m.OnEvent({ModuleEvent::Kind::kRecovered,
               "closed " + std::to_string(recovered->abandoned_activations.size()) +
                   " activation(s) whose parent died as abandoned (" + std::to_string(recovered->unknown_calls) +
                   " host call(s) with an unknown outcome)" +
                   (*settled > 0 ? "; " + std::to_string(*settled) +
                                       " run(s) of theirs ended with them, or wait to be resumed if durable"
                                 : std::string()) +
                   "; `basal journal` shows them",
               0, 0});
  }
  return std::unique_ptr<Module>(new Module(std::move(impl)));
}

HostCallRegistry& Module::registry() { return impl_->registry; }

// Parses, hashes and keeps the texts of a flow; the caller sets its origin and approval.
Result<FlowRef> Module::Impl::MakeFlow(std::string name, std::string source, std::string_view manifest_text,
                                       Profile profile, const Flow& origin) {
  auto manifest = Manifest::Parse(manifest_text, registry, profile);
  if (!manifest) return manifest.error();
  auto f = std::make_shared<Flow>(origin);
  f->id = next_flow_id++;
  f->name = std::move(name);
  f->source = std::move(source);
  f->source_hash = Sha256Hex(f->source);
  f->manifest_text_hash = Sha256Hex(manifest_text);
  f->manifest = std::move(*manifest);
  f->profile = profile;
  // The journal keeps what ran: each text once, by its hash. Committed now unless a batch is
  // open (then it commits with that batch, before any answer of it goes out): an open batch holds
  // the journal's write lock, which must not wait for the embedder's next loop pass.
  const bool batch_was_open = store->HasPendingBatch();
  auto kept = store->catalog().KeepText(f->source_hash, f->source);
  if (kept) kept = store->catalog().KeepText(f->manifest_text_hash, manifest_text);
  if (kept && !batch_was_open) kept = store->Commit();
  if (!kept) {
    if (!batch_was_open) (void)store->Rollback();
    return kept.error();
  }
  flows[f->id] = f;
  health.workers_per_flow[f->name];
  return FlowRef(std::move(f));
}

// A version's texts, checked against the hashes it was approved with.
Result<std::pair<ApprovalRow, std::string>> Module::Impl::CheckedVersion(const ApprovalRow& row, std::string* source) {
  const std::string what = std::string(ApprovalKindName(row.kind)) + " " + Shown(row.name);
  const std::string command = row.kind == ApprovalKind::kFlow ? "basal flow approve" : "basal policy approve";
  if (row.revoked_unix_us) {
    return MakeError(ErrorCode::kRefused, what + " version " + std::to_string(row.version) + " was revoked by " +
                                              row.revoker.name + (row.revoke_note.empty() ? "" : " (\"" + row.revoke_note + "\")") +
                                              "; nothing of it runs until a new version is approved (" + command + ")");
  }
  auto text = [&](const std::string& hash, const char* which) -> Result<std::string> {
    auto kept = store->reader().Text(hash);
    if (!kept) return kept.error();
    if (!*kept) {
      return MakeError(ErrorCode::kDatabase, what + " version " + std::to_string(row.version) + ": its " + which +
                                                 " (" + hash + ") is missing from the journal; approve it again");
    }
    if (Sha256Hex(**kept) != hash) {
      return MakeError(ErrorCode::kDatabase, what + " version " + std::to_string(row.version) + ": its " + which +
                                                 " does not match the hash it was approved with (" + hash +
                                                 "): the journal was changed outside basal; refusing to run it");
    }
    return std::move(**kept);
  };
  auto manifest_text = text(row.manifest_text_hash, "manifest");
  if (!manifest_text) return manifest_text.error();
  if (source) {
    auto src = text(row.source_hash, "source");
    if (!src) return src.error();
    *source = std::move(*src);
  }
  return std::make_pair(row, std::move(*manifest_text));
}

// The newest version of (kind, name), checked: not revoked, its texts present and matching.
Result<std::pair<ApprovalRow, std::string>> Module::Impl::ApprovedManifest(ApprovalKind kind, std::string_view name,
                                                                            std::string* source) {
  auto versions = store->reader().Versions(kind, std::string(name));
  if (!versions) return versions.error();
  if (versions->empty()) {
    const std::string command = kind == ApprovalKind::kFlow ? "basal flow approve" : "basal policy approve";
    return MakeError(ErrorCode::kNotFound, std::string(ApprovalKindName(kind)) + " " + Shown(name) +
                                               " is not approved in this journal; approve it first (" + command + ")");
  }
  return CheckedVersion(versions->back(), source);
}

// A flow of an approved version, made and checked: its manifest must read as it did when approved.
Result<FlowRef> Module::Impl::FlowOfVersion(const ApprovalRow& row, std::string source, const std::string& manifest_text) {
  Flow origin;
  origin.origin = FlowOrigin::kApproved;
  origin.approval_id = row.id;
  origin.version = row.version;
  auto flow = MakeFlow(row.name, std::move(source), manifest_text, Profile::kFlow, origin);
  if (!flow) return flow.error();
  if ((*flow)->manifest.hash() != row.manifest_hash) {
    // The manifest parses differently now (an embedder's host call changed its grant check).
    flows.erase((*flow)->id);
    return MakeError(ErrorCode::kRefused, "flow " + Shown(row.name) + " version " + std::to_string(row.version) +
                                              ": its manifest reads differently in this basal than when it was approved (" +
                                              row.manifest_hash + "); review and approve it again");
  }
  return flow;
}

Result<FlowRef> Module::AddFlow(std::string name, std::string source, std::string_view manifest_text, Profile profile) {
  if (impl_->options.require_approval) {
    return MakeError(ErrorCode::kRefused,
                     "ad hoc flows are refused here (require_approval): approve " + Shown(name) +
                         " first (basal flow approve NAME FILE.js --manifest M.json), then run it by name");
  }
  Flow origin;
  origin.origin = FlowOrigin::kAdhoc;
  return impl_->MakeFlow(std::move(name), std::move(source), manifest_text, profile, origin);
}

Result<FlowRef> Module::LoadApprovedFlow(std::string_view name) {
  std::string source;
  auto approved = impl_->ApprovedManifest(ApprovalKind::kFlow, name, &source);
  if (!approved) return approved.error();
  auto& [row, manifest_text] = *approved;
  return impl_->FlowOfVersion(row, std::move(source), manifest_text);
}

Result<FlowRef> Module::AddCodemodeScript(std::string_view policy, std::string script_name, std::string source,
                                          std::optional<std::vector<std::string>> tools) {
  auto approved = impl_->ApprovedManifest(ApprovalKind::kPolicy, policy, nullptr);
  if (!approved) return approved.error();
  auto& [row, manifest_text] = *approved;
  Flow origin;
  origin.origin = FlowOrigin::kCodemode;
  origin.approval_id = row.id;
  origin.version = row.version;
  origin.policy = row.name;
  if (tools) {
    origin.tools = std::move(*tools);
  } else if (auto manifest = Manifest::Parse(manifest_text, impl_->registry, Profile::kCodemode)) {
    // What the policy grants by name; log and timer.sleep serve console.* and the timers.
    for (const auto& [name, constraints] : manifest->grants()) {
      if (name == "log" || name == "timer.sleep" || name.ends_with(".*") || name.find('.') == std::string::npos) continue;
      origin.tools.push_back(name);
    }
  }
  auto flow = impl_->MakeFlow(std::move(script_name), std::move(source), manifest_text, Profile::kCodemode, origin);
  if (!flow) return flow.error();
  if ((*flow)->manifest.hash() != row.manifest_hash) {
    (void)RemoveFlow(*flow);
    return MakeError(ErrorCode::kRefused, "policy " + Shown(policy) + " version " + std::to_string(row.version) +
                                              ": its manifest reads differently in this basal than when it was approved (" +
                                              row.manifest_hash + "); review and approve it again");
  }
  return flow;
}

Result<Module::PolicyVersion> Module::ApprovedPolicy(std::string_view policy) {
  auto approved = impl_->ApprovedManifest(ApprovalKind::kPolicy, policy, nullptr);
  if (!approved) return approved.error();
  auto& [row, manifest_text] = *approved;
  auto manifest = Manifest::Parse(manifest_text, impl_->registry, Profile::kCodemode);
  if (!manifest) return manifest.error();
  if (manifest->hash() != row.manifest_hash) {
    return MakeError(ErrorCode::kRefused, "policy " + Shown(policy) + " version " + std::to_string(row.version) +
                                              ": its manifest reads differently in this basal than when it was approved (" +
                                              row.manifest_hash + "); review and approve it again");
  }
  return PolicyVersion{std::move(*manifest), row.version, row.id};
}

Result<void> Module::RemoveFlow(const FlowRef& flow) {
  if (!flow || impl_->flows.erase(flow->id) == 0)
    return MakeError(ErrorCode::kNotFound, "module: flow " + (flow ? flow->name : std::string("(null)")) +
                                               " is not approved in this module (never added, or already removed)");
  impl_->pool->RetireIdle(*flow, RetireReason::kFlowRemoved);
  bool another = false;
  for (const auto& [id, f] : impl_->flows) another = another || f->name == flow->name;
  if (!another) impl_->health.workers_per_flow.erase(flow->name);
  return Ok();
}

Result<ActivationId> Module::Submit(const FlowRef& flow, nlohmann::json input, DoneCallback done) {
  Impl& m = *impl_;
  if (flow && flow->manifest.durable() && m.flows.count(flow->id)) {
    // A durable flow's activation belongs to a run, which outlives this process.
    auto accepted = m.StartRun(flow, std::move(input), RunOptions{}, [done = std::move(done)](const RunStop& stop) {
      if (!done) return;
      if (RunParked(stop.state) && stop.result.outcome != Outcome::kParked) {
        // A failed attempt whose run retries later (docs/durable.md#retries): the run goes on.
        ActivationResult r = stop.result;
        r.message = "attempt failed (" + std::string(OutcomeName(r.outcome)) + ": " + r.message + "); run " +
                    std::to_string(stop.run_id) + " retries later (basal serve retries it at its time, or: basal run "
                    "--resume " + std::to_string(stop.run_id) + ")";
        r.outcome = Outcome::kParked;
        return done(r);
      }
      done(stop.result);
    });
    if (!accepted) return accepted.error();
    return accepted->run.id;
  }
  if (m.shutting_down)
    return MakeError(ErrorCode::kUnavailable, "module: shutting down; it takes no new activations");
  if (!flow || !m.flows.count(flow->id))
    return MakeError(ErrorCode::kNotFound, "module: flow " + (flow ? flow->name : std::string("(null)")) +
                                               " is not approved in this module (never added, or removed)");
  if (auto refused = m.RevokedWhy(*flow)) return MakeError(ErrorCode::kRefused, *refused);
  auto a = std::make_unique<Activation>();
  a->flow = flow;
  a->input_json = protocol::DumpJson(input);
  if (std::string why; !protocol::FitsInMessage(a->input_json, why))
    return MakeError(ErrorCode::kInvalidArgument, "the input cannot be sent to the flow: " + why);
  a->start_unix_us = NowUnixUs();
  // One record reused for every Submit: assigned into, its strings keep their capacity, so the
  // hashes, the names and a small input are copied without an allocation each.
  ActivationStart& start = m.submit_start;
  start.flow = flow->name;
  start.source_hash = flow->source_hash;
  start.manifest_hash = flow->manifest.hash();
  if (a->input_json.size() <= m.options.journal_value_max_bytes) {
    start.input_json = a->input_json;
  } else {
    start.input_json = CapForJournal(a->input_json, m.options.journal_value_max_bytes);
  }
  start.start_unix_us = a->start_unix_us;
  start.owner = m.owner;
  start.lease_until_unix_us = a->start_unix_us + m.options.lease.count() * 1000;
  start.origin = JournalOrigin(flow->origin);
  start.approval_id = flow->approval_id;
  start.manifest_text_hash = flow->manifest_text_hash;
  start.run_id = 0;
  start.retry_from_call = 0;
  auto id = m.store->journal().BeginActivation(start);
  if (!id) return id.error();
  a->id = *id;
  a->done = std::move(done);
  a->queued = true;
  m.begun_in_batch.push_back(*id);
  m.live[a->id] = std::move(a);
  m.queue.push_back({*id, 0});
  ++m.queued;
  // Only a Submit from a `done` callback comes after its pass's Dispatch, and the loop could then wait
  // before dispatching it. From anywhere else on the loop's thread (a posted task, a descriptor's or a
  // timer's callback, between RunOnce calls) a pass's end, which dispatches, comes before the loop
  // waits: no eventfd write per Submit.
  if (m.in_callbacks) m.loop_->Wake();
  return *id;
}

Result<void> Module::Cancel(ActivationId id) {
  if (!impl_->live.count(id))
    return MakeError(ErrorCode::kNotFound, "module: activation " + std::to_string(id) + " is not queued or running");
  impl_->CancelOne(id, "cancelled by the embedder");
  return Ok();
}

void Module::CancelAll(std::string_view why) {
  std::vector<ActivationId> ids;
  for (auto& [id, a] : impl_->live) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (ActivationId id : ids) impl_->CancelOne(id, std::string(why));
  std::vector<RunId> waiting;
  for (auto& [id, w] : impl_->waiting_runs) waiting.push_back(id);
  std::sort(waiting.begin(), waiting.end());
  for (RunId id : waiting) {
    RunCallback done = std::move(impl_->waiting_runs.at(id).done);
    impl_->EndRunWithout(id, "cancelled", std::string(why), std::move(done));
  }
}

Result<LoadCheck> Module::CheckLoad(const FlowRef& flow) {
  Impl& m = *impl_;
  if (m.shutting_down) return MakeError(ErrorCode::kUnavailable, "module: shutting down; it checks no flow");
  if (!flow || !m.flows.count(flow->id))
    return MakeError(ErrorCode::kNotFound, "module: flow " + (flow ? flow->name : std::string("(null)")) +
                                               " is not approved in this module (never added, or removed)");
  auto a = std::make_unique<Activation>();
  const ActivationId id = m.next_check_id--;
  a->id = id;
  a->flow = flow;
  a->load_only = true;
  a->queued = true;
  std::optional<LoadCheck> out;
  a->checked = [&out](const LoadCheck& c) { out = c; };
  m.live[id] = std::move(a);
  m.queue.push_back({id, 0});
  ++m.queued;
  RunUntilIdle();
  if (!out) return MakeError(ErrorCode::kInternal, "module: the load check of " + flow->name + " never ended");
  return *out;
}

void Module::RunUntilIdle() {
  for (;;) {
    impl_->EndOfPass();  // dispatches what was submitted and reports what already finished
    // Idle once retired workers' processes are reaped too (Pool::Retire kills, the loop reaps).
    if (!impl_->Busy() && impl_->pool->Reaping() == 0) return;
    impl_->loop_->RunOnce(std::chrono::milliseconds(3'600'000));
  }
}

void Module::RunFor(std::chrono::milliseconds budget) {
  const auto end = Clock::now() + budget;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
    if (left.count() <= 0) break;
    impl_->loop_->RunOnce(left);
  }
  impl_->loop_->RunOnce(std::chrono::milliseconds(0));
  // The embedder may wait elsewhere now: no batch is left grouped.
  if (impl_->grouping_since) impl_->EndOfPass(false);
}

ActivationResult Module::Run(const FlowRef& flow, nlohmann::json input) {
  ActivationResult out;
  auto id = Submit(flow, std::move(input), [&out](const ActivationResult& r) { out = r; });
  if (!id) {
    out.outcome = id.error().code == ErrorCode::kDatabase      ? Outcome::kJournalError
                  : id.error().code == ErrorCode::kUnavailable ? Outcome::kCancelled
                                                               : Outcome::kInvalidInput;
    out.message = id.error().message;
    return out;
  }
  RunUntilIdle();
  return out;
}

void Module::Shutdown(std::chrono::milliseconds grace) {
  Impl& m = *impl_;
  m.shutting_down = true;
  const auto end = Clock::now() + grace;
  while (!m.live.empty()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
    if (left.count() <= 0) break;
    m.loop_->RunOnce(left);
  }
  CancelAll("cancelled: the module shut down before the activation finished");
  m.pool->RetireAllIdle(RetireReason::kShutdown);
  m.EndOfPass(false);
}

void Module::Post(std::function<void()> fn) { impl_->loop_->Post(std::move(fn)); }

void Module::AfterCommit(std::function<void(const Result<void>&)> fn) { impl_->AfterCommit(std::move(fn)); }

void Module::SetObserver(std::shared_ptr<ModuleObserver> observer) { impl_->options.observer = std::move(observer); }

void Module::SetLogSink(
    std::function<void(const HostCallContext&, std::string_view level, std::string_view message)> sink) {
  impl_->options.log_sink = std::move(sink);
}

ModuleHost& Module::host() { return *impl_; }

HealthSnapshot Module::Health() const {
  HealthSnapshot h = impl_->health;
  impl_->pool->Count(h);
  h.queue_length = impl_->queued;
  return h;
}

Module::DoctorReport Module::Doctor() {
  DoctorReport d;
  Impl& m = *impl_;
  d.kernel_landlock_abi = m.kernel_landlock_abi;
  d.required_landlock_abi = std::min(m.kernel_landlock_abi, protocol::kWorkerLandlockAbiMax);
  const WelcomePolicy& policy = m.welcome_policy;
  d.parent_uid = geteuid();
  if (policy.worker_identity)
    d.worker_user = policy.worker_identity->user + " (uid " + std::to_string(policy.worker_identity->uid) + ", gid " +
                    std::to_string(policy.worker_identity->gid) + ")";
  LaunchOptions launch;
  launch.path = m.options.worker_path;
  launch.args = m.options.worker_args;
  launch.credentials = policy.worker_identity;
  auto proc = m.launcher->Launch(launch);
  if (!proc) {
    d.verdict = proc.error().message;
    return d;
  }
  WorkerSession session(std::move(*proc));
  auto msg = session.ReadMessage(Clock::now() + m.options.welcome_timeout);
  if (!msg) {
    d.verdict = msg.error().message.rfind("nothing arrived", 0) == 0
                    ? "no welcome within " + std::to_string(m.options.welcome_timeout.count()) + " ms" + session.StderrNote()
                    : "no welcome: " + msg.error().message;
    return d;
  }
  const auto* welcome = std::get_if<protocol::Welcome>(&*msg);
  if (!welcome) {
    d.verdict = "first frame is not a welcome";
    return d;
  }
  d.welcome = welcome->raw;
  const WelcomeVerdict v = CheckWorker(*welcome, session.process(), policy);
  d.accepted = v.accepted;
  d.verdict = v.reason;
  if (v.kernel_view) {
    const ProcStatus& s = *v.kernel_view;
    for (const auto& field : s.shown)
      if (field.first != "State") d.kernel_view.push_back(field);
    d.worker_privileged = s.cap_eff != 0 || s.cap_prm != 0 || s.cap_inh != 0 || s.cap_amb != 0 ||
                          std::find(s.uid.begin(), s.uid.end(), 0u) != s.uid.end() ||
                          (policy.worker_identity && s.cap_bnd != 0);
  }
  return d;
}

}  // namespace basal
