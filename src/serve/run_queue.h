// The runs of basal serve, from accepted to ended (docs/serve.md, "Accepted work is never lost").
// A run is journaled as queued and its acceptance is told only once that row is committed; the
// module's one queue starts it when a worker is free (at most limits.max_workers run at once), as
// one activation, and writes its end in the batch of the activation's end (module_host.h). A
// durable run interrupted by a previous daemon's death is resumed at start. Whoever waits for a run
// (a ?wait request, a webhook that answers with the result) hears of its stop or of its wait
// passing; whoever watches runs end (a schedule's overlap policy) is told of each end.
//
// Invariant: nobody hears "accepted" of a run whose queued row did not commit, and an activation
// whose run's row was lost with its batch does not run on.
//
//   RunQueue queue({.host = module->host(), .metrics = metrics, .limits = config.limits,
//                   .now_us = SystemNowUs,
//                   .flow_for = [&](const std::string& name) { return host.CurrentFlow(name); }});
//   queue.Enqueue({.flow = "hello", .input = {{"name", "ada"}}, .trigger = "api"},
//                 [&](Result<AcceptedRun> a) {                       // after the commit
//                   if (a) queue.Wait(a->run.id, std::chrono::seconds(30), [&](Result<RunRow> run) { ... });
//                 });
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "basal/module.h"
#include "parent/loop/event_loop.h"
#include "parent/module_host.h"
#include "parent/store/store.h"
#include "serve/config.h"
#include "serve/metrics.h"

namespace basal::serve {

// A run to start: what RunStore's row holds, and whether it may start at once.
struct RunRequest {
  std::string flow;             // an approved flow's name
  nlohmann::json input;         // the flow's input
  std::string trigger;          // "api", "webhook:NAME", "schedule:NAME"
  std::string idempotency_key;  // "" none; else the same (flow, key) gives the same run for limits.idempotency_ttl
  std::string state_detail;     // "" or JSON text kept with the run (a schedule's {"scheduled_for": ...})
  // Journaled as queued, but held back until Release (a schedule's fire buffered behind its open run).
  bool hold = false;
};

// The daemon's log line for a run that stopped: one line, no control characters (journald keeps
// it as one entry), key=value after the run id:
//   run 12 ended: flow=hello outcome=script_error ms=35.2 trigger=api error="TypeError: boom"
//   run 13 waits: flow=pay state=needs_reconciliation trigger=webhook:stripe error="..."
// `ms` is the last activation's wall time (absent when none ran); the error is its message, cut at
// 300 bytes, with `"` and `\` escaped.
std::string RunStopLine(const std::string& flow, const std::string& trigger, const RunStop& stop, int64_t now_us);

struct AcceptedRun {
  RunRow run;
  bool existing = false;  // the key named an earlier run: that run, and nothing new was queued
};

class RunQueue {
 public:
  struct Options {
    ModuleHost& host;       // runs, their rows (joining the module's batch), AfterCommit, the loop
    MetricsRegistry& metrics;
    const LimitsConfig& limits;  // read at each use: a reload changes it in place
    std::function<int64_t()> now_us;
    // The flow a run of `flow` starts: the newest approved version (ApprovedFlows::Get).
    std::function<Result<FlowRef>(const std::string& flow)> flow_for;
    // The daemon's log: one line per run that stops (RunStopLine). Null: none.
    std::function<void(const std::string& line)> log = nullptr;
    // Several hosts share the store (PostgreSQL): queued runs have a holder (RunStore::ClaimQueuedRuns).
    bool several_hosts = false;
  };
  explicit RunQueue(Options options);
  ~RunQueue();
  RunQueue(const RunQueue&) = delete;
  RunQueue& operator=(const RunQueue&) = delete;

  // At start, before anything is served (the module's Open already ended the runs whose
  // activations a previous daemon left, except durable ones): durable runs it left interrupted are
  // resumed, runs still queued wait again, oldest first. With several hosts, only the queued runs
  // no live host holds (and those of this host id's previous run) are adopted here. Returns the queued ones (resumed ones
  // included) and how many resumed. A run an API client, a webhook or a schedule started is this
  // daemon's to resume; one `basal run` started is resumed by hand (basal run --resume).
  struct Recovered {
    size_t resumed = 0;
    std::vector<RunRow> queued;
    std::vector<std::string> refused;  // runs that could not be resumed, and why
  };
  Result<Recovered> Recover();

  // Journals the run as queued (or finds the run its key names) and calls `then` once that row is
  // committed: with the run, or with the error (kUnavailable: limits.queue_max runs wait already;
  // kConflict: the key was used with another input; kDatabase: the store refused the row or its
  // commit). A refusal is told at once. A new run that is not held may start in the same pass, its
  // activation's start joining the same commit.
  //
  // queue_max holds for every request, keyed or not, held or not: past it only a key that names a
  // run this daemon accepted or found (one of the newest kMaxKnownKeys, unexpired) still gets that
  // run, since it adds nothing. A key from before the daemon started is refused while the queue is
  // full, and gets its run once there is room.
  static constexpr size_t kMaxKnownKeys = 10'000;
  void Enqueue(RunRequest request, std::function<void(Result<AcceptedRun>)> then);
  // A held run may start now.
  void Release(int64_t run_id);
  // Resumes an interrupted durable run now (the API's resume and resolve). Errors as
  // ModuleHost::ResumeRun.
  Result<void> Resume(int64_t run_id, bool newest_version = false);
  // Every `every`, resumes the runs of this daemon's triggers that are interrupted (resolved by an
  // operator through `basal run resolve`, or left by another host): each once, a refusal logged once.
  void ResumeInterruptedEvery(std::chrono::milliseconds every, std::function<void(const std::string&)> log);
  // Several hosts: every `every` (and when another host offers runs it cannot start), takes the
  // queued runs no live host holds (a host that died or stopped) into this host's queue, within
  // limits.queue_max, and, while workers are free here, runs a live host holds but cannot start
  // yet (docs/postgres.md, "Queued runs"). Each is claimed by a compare-and-set in the store.
  void ClaimQueuedEvery(std::chrono::milliseconds every);
  // Wakes parked durable runs (docs/durable.md: a sleep's end, a wait's timeout, a retry's next
  // attempt) when their time comes, and looks again at least every `floor` (runs another process
  // parked). At most the queue's room is woken per pass.
  void WakeParkedRuns(std::chrono::milliseconds floor);
  // Sends an event to a durable run (POST /v1/runs/{id}/events/{name}): delivered to its wait now
  // (the run resumes here) or kept for its next wait. Errors as ModuleHost::SendEvent.
  Result<ModuleHost::EventSent> SendEvent(NewRunEvent event);
  // A run that never starts (a schedule's fire missed or skipped), journaled as ended with
  // `outcome` and `error` ({"kind", "message"}). Returns its id.
  Result<int64_t> RecordEnded(const RunRequest& request, const std::string& outcome, const nlohmann::json& error);

  // The run's row as it stands; nullopt when there is none.
  Result<std::optional<RunRow>> Get(int64_t run_id);
  // Calls `then` with the run once it has ended or `wait` has passed, whichever is first; at once
  // when it has ended, when no wait (or 0) is asked, or while draining. `known` is the row as the
  // caller has it (Enqueue's): a run still live in the module is then not read back until it stops,
  // and a plain (not durable) run that its activation ended is not read back at all: its row and
  // that activation's end are what the module wrote in the batch whose commit the stop follows,
  // handed to `then` as `ended` (null when the run was read back: read the activation then).
  using WaitedFn = std::function<void(const Result<RunRow>& run, const ActivationRow* ended)>;
  void Wait(int64_t run_id, std::optional<std::chrono::milliseconds> wait, WaitedFn then, const RunRow* known = nullptr);
  void Wait(int64_t run_id, std::optional<std::chrono::milliseconds> wait, std::function<void(Result<RunRow>)> then,
            const RunRow* known = nullptr);
  // `observer` hears of each run's end (from the loop, when the end is written, before its commit).
  void OnRunEnded(std::function<void(int64_t run_id)> observer);

  // Applies limits.max_workers to the module (after a reload changed it).
  void Dispatch();
  // No run starts from now on; waits answer at once. What runs, runs on.
  void Drain();
  // At stop: every waiter gets its run as it stands.
  void AnswerWaiters();

  size_t queued() const { return o_.host.queued_runs(); }
  size_t in_flight() const { return o_.host.running_runs(); }
  // False once a commit of a run's acceptance failed, until one succeeds; `why` says what failed.
  bool journal_ok(std::string* why) const;
  // The module told that commits succeed again after failed ones (journal_recovered).
  void JournalRecovered() { journal_ok_ = true; }

 private:
  struct Waiter {
    WaitedFn then;
    EventLoop::TimerId timer;
    std::optional<RunRow> known;  // the row as accepted here (Wait's `known`)
  };

  // The module's word that a run stopped (ended, or waits for an operator), after its commit.
  void OnStop(const std::string& flow, const std::string& trigger, const RunStop& stop);
  // What OnStop leaves for after the answers of this pass have gone out: the log line and the
  // per-flow metrics of a stopped run, as they were at its stop.
  struct StopRecord {
    std::string flow, trigger;
    RunStop stop;  // its id, state, outcome, start and the result's outcome and message only
    int64_t now_us = 0;
  };
  void WriteStopRecords();
  void RunEnded(int64_t run_id);
  void WakeWaiters(int64_t run_id, const RunStop* stop = nullptr);
  RunCallback StopCallback(const std::string& flow, const std::string& trigger);

  void ResumeInterrupted();
  // `lapsed`: also the runs no live host holds (the poll; an offer asks only for spare ones).
  void ClaimQueued(bool lapsed);
  void Adopt(const std::vector<RunRow>& runs);
  // Several hosts: the waiters of runs that are not (or no longer) this host's to run (another
  // host runs them, or took one from this host's queue) are answered once their row says they
  // stopped, looked at every poll: no stop callback of this host's will tell them.
  void WakeWaitersOfRunsElsewhere();
  void WakeDue();
  // (Re)arms the wake timer for the earliest parked run's wake, or `wake_floor_` from now.
  void ArmWake();
  bool KeyNamesARun(const std::string& flow, const std::string& key, int64_t now_us) const;
  void RememberKey(const std::string& flow, const std::string& key, int64_t expires_us);

  Options o_;
  std::unordered_map<int64_t, std::map<uint64_t, Waiter>> waiters_;
  std::chrono::milliseconds resume_every_{0};
  std::optional<EventLoop::TimerId> resume_timer_;
  std::chrono::milliseconds claim_every_{0};  // 0: ClaimQueuedEvery not called
  std::optional<EventLoop::TimerId> claim_timer_;
  std::optional<EventLoop::TimerId> offer_timer_;  // a claim of spare runs after an offer, due now
  bool claim_failing_ = false;  // the claim failed: told once, until it works again
  std::chrono::milliseconds wake_floor_{0};  // 0: WakeParkedRuns not called
  std::optional<EventLoop::TimerId> wake_timer_;
  EventLoop::Clock::time_point wake_at_{};
  std::function<void(const std::string&)> log_;
  std::vector<StopRecord> stop_records_;  // OnStop's, written by the next pass (or the destructor)
  bool stop_records_posted_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  std::map<int64_t, std::string> refused_resumes_;  // run -> why (logged once, not retried by the scan)
  uint64_t next_waiter_ = 1;
  std::vector<std::function<void(int64_t)>> ended_observers_;
  // (flow, key) -> when the key expires, for the newest kMaxKnownKeys keyed runs accepted or found.
  // known_order_ holds them oldest first; a key found again is entered again, and only its newest
  // entry (by sequence number) counts.
  struct KnownKey {
    int64_t expires_us = 0;
    uint64_t seq = 0;
  };
  std::map<std::pair<std::string, std::string>, KnownKey> known_keys_;
  std::deque<std::pair<uint64_t, std::pair<std::string, std::string>>> known_order_;
  uint64_t next_key_seq_ = 1;
  bool draining_ = false;
  bool journal_ok_ = true;
  bool wake_failing_ = false;  // the parked runs' read failed: told once, until it works again
  std::string journal_why_;
};

}  // namespace basal::serve
