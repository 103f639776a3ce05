// The module's inside (include/basal/module.h is its face): it wires the rooms together (loop, pool,
// call gate, store) and owns the activations and the runs. module.cpp holds the activations and the
// loop pass; module_runs.cpp the runs (ModuleHost). Each loop pass ends in EndOfPass(): commit the
// journal batch (under a backlog, a few passes' batch: GroupsBatch), and only then answer workers
// and call `done` callbacks (group commit). A backend
// that commits without waiting (PostgreSQL) keeps one batch in flight while the loop goes on: its
// answers go out in the pass that hears of its commit (Land).
// docs/architecture.md draws the rooms; docs/durable.md the runs.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "basal/module.h"
#include "parent/activation.h"
#include "parent/call_gate.h"
#include "parent/host_calls/http_fetch.h"
#include "parent/loop/event_loop.h"
#include "parent/module_host.h"
#include "parent/platform/worker_launcher.h"
#include "parent/pool.h"
#include "parent/replay.h"
#include "parent/store/store.h"
#include "parent/welcome_check.h"

namespace basal {

struct Module::Impl final : PoolOwner, ModuleHost {
  struct Finished {
    ActivationResult result;
    DoneCallback done;
    bool journaled = true;  // false for a load check (nothing of it is in the journal)
    RunCallback run_done;   // a run's stop, heard with `stop`
    RunStop stop;
  };

  // A run journaled as queued that waits for a worker (or, held, for ReleaseRun).
  struct WaitingRun {
    FlowRef flow;
    std::string input_json;  // as journaled: sent as is
    RunCallback done;
    bool held = false;
    bool durable = false;
    RunBinding binding;                // a resumed run's (empty for a first start)
    std::optional<ReplayPlan> replay;  // a resumed run's record
    bool strict = false;               // ReplayRecord: every effect disabled
    int64_t attempt = 1;               // its retry attempt
    int64_t retry_from_call = 0;       // a retry: the record's calls from this id on run again
  };

  // A call a durable run parks on (module_park.cpp): its reply is kept until the activation ends
  // parked, then dropped (the answer is written into the call's record when the run wakes).
  struct Parking {
    enum class Kind { kSleep, kWait } kind = Kind::kSleep;
    int64_t call_id = 0;
    int64_t wake_unix_us = 0;
    std::string name, key;   // kWait
    int64_t timeout_ms = 0;  // kWait
    std::optional<HostCallReply> reply;
  };

  // The one queue: bare activations (journaled at Submit) and runs (whose activation is journaled
  // when a worker takes them), oldest first. A ticket whose activation or run is gone is skipped.
  struct Ticket {
    ActivationId activation = 0;
    RunId run = 0;
  };

  ModuleOptions options;
  std::unique_ptr<EventLoop> loop_;
  std::unique_ptr<WorkerLauncher> launcher;
  std::unique_ptr<Store> store;
  HostCallRegistry registry;
  HealthSnapshot health;
  size_t members_counted = 0;  // family members counted by name in health.host_calls (at most the cap)
  std::unique_ptr<CallGate> gate;
  std::unique_ptr<Pool> pool;
  ActivationOwner owner;
  ActivationStart submit_start;  // Submit's journal record, reused (Module::Submit says why)
  int kernel_landlock_abi = 0;
  WelcomePolicy welcome_policy;  // the pool's and the doctor's
  size_t cpus = 1;
  uint64_t next_flow_id = 1;
  ActivationId next_check_id = -1;  // load checks count down from -1: never a journal id
  std::unordered_map<uint64_t, FlowRef> flows;                        // approved and not removed
  std::unordered_map<ActivationId, std::unique_ptr<Activation>> live;  // queued or running
  std::deque<Ticket> queue;
  size_t queued = 0;  // tickets in `queue` that still wait (held runs are not in it)
  std::unordered_map<RunId, WaitingRun> waiting_runs;  // queued or held runs
  size_t held_runs = 0;                                // of them, held
  std::unordered_map<RunId, ActivationId> running_runs_;
  std::map<std::string, FlowRef> current_flows;        // CurrentFlow's: the newest version by name
  // Approval ids CurrentFlow found unrevoked under the open batch: a run that the same batch
  // starts needs no second look (nothing can revoke them before that batch commits). Emptied
  // whenever the open batch is sent or dropped.
  std::vector<int64_t> unrevoked_in_batch;
  std::map<int64_t, FlowRef> resumed_flows;             // resumes under a run's own version, by approval id
  std::vector<std::pair<ActivationId, std::string>> sends;  // answers waiting for the commit
  std::vector<Finished> finished;                           // callbacks waiting for the commit
  std::vector<Finished> landed;                             // their commit ended: called at the pass's end
  std::string journal_failure;
  struct OwedEnd {  // see SettleOwed
    ActivationId activation = 0;
    RunId run = 0;
    ActivationResult result;
    RunCallback done;  // held for a run whose start was lost: told when it ends or runs again
    bool activation_ended = false;  // committed already; its run's end is what is owed
  };
  std::vector<OwedEnd> owed_ends;
  std::optional<EventLoop::TimerId> journal_retry_timer;
  std::chrono::milliseconds journal_retry_backoff{0};
  int64_t journal_down_since_us = 0;  // the first failed commit of an outage; 0 when none
  uint64_t failures_in_outage = 0;
  // Begun or journaled in the open batch: if it fails, their records are lost with it, so an
  // activation among them must not run on and a run among them is not queued.
  std::vector<ActivationId> begun_in_batch;
  std::vector<RunId> runs_in_batch;
  std::vector<std::function<void(const Result<void>&)>> commit_waiters;  // AfterCommit
  // A batch whose commit is in flight (StartCommit), with what waits for it: taken from the lists
  // above when it was sent, which gather the next batch meanwhile.
  struct Flight {
    std::vector<std::pair<ActivationId, std::string>> sends;
    std::vector<Finished> finished;
    std::vector<std::function<void(const Result<void>&)>> waiters;
    std::vector<ActivationId> begun;
    std::vector<RunId> runs;
    size_t started = 0;  // the gate's calls waiting for their `started` record then
  };
  std::optional<Flight> flight;
  int watched_store_fd = -1;  // the store's descriptor on the loop while a commit is in flight
  struct OverBudget {
    ActivationId id;
    Budget budget;
    std::string message;
  };
  std::vector<OverBudget> over_budget;  // reported by the gate; ended by EndOverBudget
  struct Diverged {
    ActivationId id;
    std::string message;
    bool past_record;  // a strict replay reached the end of the record: no divergence
  };
  std::vector<Diverged> diverged;  // reported by the gate; ended by EndOverBudget
  // The activations ended in this pass, for the observer's live activity (only while it wants it):
  // their flow and start, told with their end once it is committed.
  struct EndedActivity {
    std::string flow;
    int64_t started_unix_us = 0;
  };
  std::unordered_map<ActivationId, EndedActivity> ended_activity;
  std::map<ActivationId, Parking> parking;  // activations parking their run; ended by EndParked
  bool shutting_down = false;
  bool stop_starting_runs = false;  // StopStartingRuns
  bool in_pass = false;
  bool in_callbacks = false;  // EndOfPass is calling `done` callbacks (after its Dispatch)

  ~Impl() override;

  // ---- activations (module.cpp) ----
  void Finish(Activation& a, ActivationResult r);
  void FinishLoadCheck(Activation& a, ActivationResult r);
  void EndLoadCheck(PooledWorker& w);
  void CancelOne(ActivationId id, const std::string& why);
  void EndOverBudget();
  std::chrono::nanoseconds CpuLimit(const Activation& a) const;
  ActivationResult CpuExhausted(const Activation& a, std::chrono::nanoseconds used);
  // Sets when the CPU check is next due. `used`: the CPU the activation has spent so far, when the
  // caller knows it without reading the worker's clock again (0 at its start, `spent` at a check).
  void SetCpuCheck(Activation& a, std::optional<std::chrono::nanoseconds> used = std::nullopt);
  // Arms the activation's one budget timer at the earlier of its deadline and its next CPU check.
  void ArmBudgets(Activation& a);
  // The CPU check, due now: true if it ended the activation (over its budget: killed).
  bool CheckCpu(Activation& a);
  void EndAtDeadline(Activation& a);
  void StartOn(PooledWorker& w);
  // Puts `a` on `idle` (claimed), or on a new worker (MakeRoom was called).
  void Place(Activation& a, PooledWorker* idle);
  // `store_failed`, when given, says whether the store could not answer (unreachable, full).
  std::optional<std::string> RevokedWhy(const Flow& f, bool* store_failed = nullptr);
  void Dispatch();
  // Sends the open batch's commit; what waits for it moves to `flight` (or lands at once).
  void Launch();
  // The commit of `f` ended: its answers go out and its started handlers run, or everything
  // pending fails with it.
  void Land(Flight f, const Result<void>& outcome);
  void FailPending(Flight f, const std::string& why);
  // The ends the journal could not take when a commit failed (the store unreachable, its disk
  // full): written again in a batch of their own until it commits (SettleOwed), on a timer whose
  // period doubles from 100 ms to 2 s, so that no run the journal accepted stays "running" there.
  // An activation whose start was lost with the batch has nothing to end: its run, if its row is
  // still queued (it was accepted in an earlier batch), is queued again, since nothing of it ran.
  void SettleOwed();
  void ArmJournalRetry();
  void RetryJournal();
  // A commit that did commit: an outage, if one was told, ends (told once).
  void NoteCommitted();
  void JournalBack();
  void WatchStore();
  // Hands a committed batch's answers to their workers (flow-controlled, below).
  void SendAnswers(std::vector<std::pair<ActivationId, std::string>> batch);
  // Flow control of one activation's answers: what waits for its worker (in the batch, held, sent
  // and unread), handing held answers on while under the budget, and the kill of a worker that
  // reads none of them.
  uint64_t OutgoingBytes(const Activation& a) const;
  bool WorkerHasRoom(ActivationId id) const;
  void FlushAnswers(Activation& a);
  // `may_group`: the batch may wait for a later pass (GroupsBatch) instead of committing now.
  void EndOfPass(bool may_group = true);
  // Before a batch that starts one activation commits: reads its worker's frames (its `done`, if
  // written already, ends it in the same batch).
  void ReadBegunWorker();
  bool GroupsBatch() const;
  // Set while a batch waits for a later pass: the loop commits it before it blocks, unless it
  // holds only ends (GroupMayWait); then group_timer ends the group at its age.
  std::optional<EventLoop::Clock::time_point> grouping_since;
  std::optional<EventLoop::TimerId> group_timer;
  bool GroupMayWait() const;
  // Whether a CPU is free for an idle worker woken to poll (WakeIdleWorker), and whether a frame
  // written now tells `a`'s worker it may poll for the next one (protocol's `poll`; not a codemode
  // script's).
  bool WorkersMayPoll() const;
  bool WorkerMayPoll(const Activation& a) const;
  bool Busy() const {
    return !live.empty() || !finished.empty() || !waiting_runs.empty() || flight.has_value();
  }
  void RenewLeases();
  // Leases by the server's clock (every PostgreSQL store, ModuleOptions::several_hosts or not):
  // renewed and checked by Heartbeat; only several hosts take over others' lapsed ones.
  bool server_clock_leases = false;
  // Several hosts (ModuleOptions::several_hosts): the second connection the heartbeat uses, and
  // until when (this process's monotonic clock) its leases are known to hold.
  std::unique_ptr<Store> heartbeat_store;
  // The takeover on heartbeat_store fails (the server is away): told once, and its end once.
  bool takeover_failing = false;
  EventLoop::Clock::time_point leases_hold_until{};
  // Renews this process's leases, stops the activations another host took over, and closes the
  // lapsed leases of other processes (their durable runs become interrupted, to be resumed).
  void Heartbeat();
  // Several hosts: told when another host offers queued runs (ModuleHost::OnOffersHeard), through
  // heartbeat_store's connection, watched on the loop (re-watched at each heartbeat: a connection
  // made again has another descriptor).
  std::function<void()> offers_heard;
  int watched_offers_fd = -1;
  bool offered_in_batch = false;  // this batch tells the other hosts of runs waiting here
  void WatchOffers();
  void OnOffersHeard(std::function<void()> heard) override;
  // Runs wait here for want of a worker: the other hosts hear of it at this batch's commit.
  void OfferWaitingRuns();
  // Another host claimed these runs: those still waiting here are dropped (not started, their
  // callbacks not called: their waiters look at the store, RunQueue).
  void DropTakenRuns(const std::vector<RunId>& runs);
  // An activation whose run another host took over: its worker killed, nothing of it written.
  void FenceOut(ActivationId id);
  void OnEvent(ModuleEvent event) override;
  // The observer's live activity (ModuleObserver::OnActivity), built only when it wants it.
  bool WantsActivity() const { return options.observer && options.observer->WantsActivity(); }
  void TellStarted(const Activation& a);
  void TellEnded(const Finished& f);

  // PoolOwner
  void OnWorkerReady(PooledWorker& w) override;
  void OnWorkerMessage(PooledWorker& w, protocol::WorkerMessage& msg) override;
  void OnWorkerLost(PooledWorker& w, ActivationResult r) override;
  void OnWorkerDrained(PooledWorker& w) override;

  // ---- flows (module.cpp) ----
  Result<FlowRef> MakeFlow(std::string name, std::string source, std::string_view manifest_text, Profile profile,
                           const Flow& origin);
  // (kind, name)'s newest version (or the given one), checked: not revoked, its texts present and
  // matching their hashes.
  Result<std::pair<ApprovalRow, std::string>> ApprovedManifest(ApprovalKind kind, std::string_view name,
                                                               std::string* source);
  Result<std::pair<ApprovalRow, std::string>> CheckedVersion(const ApprovalRow& row, std::string* source);
  Result<FlowRef> FlowOfVersion(const ApprovalRow& row, std::string source, const std::string& manifest_text);
  HttpFetchOptions HttpFetchOptionsFor();

  // ---- runs (module_runs.cpp) ----
  // The activation of a waiting run that a worker takes now: journaled, bound, begun.
  Activation* BeginRunActivation(RunId run, WaitingRun& w);
  // Ends a run that has no activation running (waiting, interrupted, needs reconciliation), in the
  // open batch; its callback hears of it after the commit.
  void EndRunWithout(RunId run, const std::string& outcome, const std::string& message, RunCallback done);
  Result<FlowRef> FlowForRun(const RunRow& run, const ResumeOptions& options);
  // `retry`: a retry attempt (docs/durable.md#retries): the record is replayed up to its retry
  // point and the rest runs again.
  Result<RunAccepted> QueueResume(RunRow run, const FlowRef& flow, RunCallback done, bool retry = false);

  // ---- parked runs (module_park.cpp) ----
  Result<void> RegisterRunHostCalls();
  void ParkCall(const HostCallContext& ctx, Parking p);
  // Ends the activations whose run parks once nothing else of theirs waits for an answer.
  void EndParked();
  // The move of a durable run whose activation ended with `r`: parked, or retrying (its retry
  // policy names the outcome and attempts are left); nullopt: the run ends.
  std::optional<RunMove> ParkMove(const Activation& a, const ActivationResult& r, int64_t now, std::string* no_retry);
  // Wakes a parked run: writes its parked call's answer (`event_answer` for a wait an event ends;
  // null: a sleep's null, a wait's TimeoutError) and queues it here (resume_here) or leaves it
  // interrupted for whoever resumes runs.
  Result<RunRow> WakeRun(const RunRow& row, int64_t now, const Json* event_answer, bool resume_here, RunCallback done);

  // ModuleHost
  EventLoop& loop() override { return *loop_; }
  JournalReader& reader() override { return store->reader(); }
  RunStore& runs() override { return store->runs(); }
  ServeTables& serve() override { return store->serve(); }
  Result<void> CheckStore() override { return store->Check(); }
  bool journal_failing() const override { return journal_down_since_us != 0; }
  std::string store_location() const override { return store->location(); }
  void FailBatch(std::string why) override {
    if (journal_failure.empty()) journal_failure = std::move(why);
  }
  void AfterCommit(std::function<void(const Result<void>&)> fn) override;
  Result<FlowRef> CurrentFlow(std::string_view name) override { return NewestFlow(name, false); }
  Result<FlowRef> CurrentFlowForRun(std::string_view name) override { return NewestFlow(name, true); }
  Result<FlowRef> NewestFlow(std::string_view name, bool under_batch);
  Result<RunAccepted> StartRun(const FlowRef& flow, nlohmann::json input, RunOptions options,
                               RunCallback done) override;
  Result<void> ReleaseRun(RunId run) override;
  void WakeIdleWorker(std::string_view name) override;
  Result<RunAccepted> ResumeRun(RunId run, ResumeOptions options, RunCallback done) override;
  Result<void> RequeueRun(const RunRow& run, RunCallback done) override;
  Result<RunRow> ResolveCall(const CallResolution& resolution) override;
  Result<size_t> WakeDueRuns(int64_t now_unix_us, size_t limit,
                             const std::function<RunCallback(const RunRow&)>& done_for) override;
  Result<std::optional<int64_t>> NextWake() override;
  Result<EventSent> SendEvent(NewRunEvent event, std::optional<RunCallback> resume) override;
  Result<RunAccepted> ReplayRecord(const FlowRef& flow, const RunRow& recorded, const ReplayPlan& plan,
                                   RunCallback done) override;
  Result<void> CancelRun(RunId run, std::string why) override;
  size_t queued_runs() const override;
  size_t running_runs() const override { return running_runs_.size(); }
  bool RunLive(RunId run) const override;
  void SetMaxWorkers(size_t max_workers) override { pool->SetMaxWorkers(max_workers); }
  void KeepCodemodeSpares(bool keep) override { pool->KeepCodemodeSpares(keep); }
  void StopStartingRuns() override;
};

// The journal's name for where a flow came from.
Origin JournalOrigin(FlowOrigin origin);
// A name as JSON text, for messages.
std::string Shown(std::string_view name);

}  // namespace basal
