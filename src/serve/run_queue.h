// The runs of basal serve, from accepted to ended (docs/serve.md, "Accepted work is never lost").
// A run is journaled as queued and its acceptance is told only once that row is committed; it
// waits until fewer than limits.max_workers of the runs run; it then runs as one activation of the
// module, and its end is written in the same batch as the activation's end. Whoever waits for a
// run (a ?wait request, a webhook that answers with the result) hears of its end or of its wait
// passing; whoever watches runs end (a schedule's overlap policy) is told of each end.
//
// Invariant: nobody hears "accepted" of a run whose queued row did not commit, and an activation
// whose run's row was lost with its batch does not run on.
//
// How runs wait for a worker is this room's own business: its users enqueue, release, wait and
// watch, and never see a queue. (Today the runs wait in queue_ here, in front of the module's own
// queue; Dispatch moves them to the module while fewer than max_workers run. When the module queues
// runs itself, Enqueue and Release submit at once, Dispatch has nothing left to do, queued() and
// in_flight() read the module's counts, and nothing outside this room changes.)
//
//   RunQueue queue({.module = module, .runs = store.runs(), .journal = store.journal(), .loop = loop,
//                   .metrics = metrics, .limits = config.limits, .now_us = SystemNowUs,
//                   .flow_for = [&](const std::string& name) { return flows.Get(name); }});
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
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "basal/module.h"
#include "parent/loop/event_loop.h"
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

struct AcceptedRun {
  RunRow run;
  bool existing = false;  // the key named an earlier run: that run, and nothing new was queued
};

class RunQueue {
 public:
  struct Options {
    Module& module;         // Submit, Cancel, AfterCommit
    RunStore& runs;         // the run rows (they join the module's batch)
    JournalStore& journal;  // the commit of the recovery at start
    EventLoop& loop;        // the timers of waits
    MetricsRegistry& metrics;
    const LimitsConfig& limits;  // read at each use: a reload changes it in place
    std::function<int64_t()> now_us;
    // The flow a run of `flow` starts: the newest approved version (ApprovedFlows::Get).
    std::function<Result<FlowRef>(const std::string& flow)> flow_for;
  };
  explicit RunQueue(Options options);
  ~RunQueue();
  RunQueue(const RunQueue&) = delete;
  RunQueue& operator=(const RunQueue&) = delete;

  // At start, before anything is served: runs that were running when a previous daemon died take
  // their activations' outcome (closed `abandoned` by the module's recovery), and runs still queued
  // wait again, oldest first. Returns how many ended, and the queued ones.
  struct Recovered {
    size_t ended = 0;
    std::vector<RunRow> queued;
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
  // A run that never starts (a schedule's fire missed or skipped), journaled as ended with
  // `outcome` and `error` ({"kind", "message"}). Returns its id.
  Result<int64_t> RecordEnded(const RunRequest& request, const std::string& outcome, const nlohmann::json& error);

  // The run's row as it stands; nullopt when there is none.
  Result<std::optional<RunRow>> Get(int64_t run_id);
  // Calls `then` with the run once it has ended or `wait` has passed, whichever is first; at once
  // when it has ended, when no wait (or 0) is asked, or while draining.
  void Wait(int64_t run_id, std::optional<std::chrono::milliseconds> wait, std::function<void(Result<RunRow>)> then);
  // `observer` hears of each run's end (from the loop, when the end is written, before its commit).
  void OnRunEnded(std::function<void(int64_t run_id)> observer);

  // Starts what may start now (after a reload raised max_workers).
  void Dispatch();
  // No run starts from now on; waits answer at once. What runs, runs on.
  void Drain();
  // At stop: every waiter gets its run as it stands.
  void AnswerWaiters();

  size_t queued() const { return queue_.size(); }
  size_t in_flight() const { return in_flight_; }
  // False once a commit of a run's acceptance failed, until one succeeds; `why` says what failed.
  bool journal_ok(std::string* why) const;

 private:
  struct Waiter {
    std::function<void(Result<RunRow>)> then;
    EventLoop::TimerId timer;
  };

  void OnActivationDone(int64_t run_id, const std::string& flow, int64_t started_us, const ActivationResult& r,
                        bool end_written);
  // A queued run that could not start ends `cancelled`.
  void EndUnstarted(int64_t run_id, const std::string& why);
  void RunEnded(int64_t run_id);
  void WakeWaiters(int64_t run_id);
  void PublishGauges();
  bool KeyNamesARun(const std::string& flow, const std::string& key, int64_t now_us) const;
  void RememberKey(const std::string& flow, const std::string& key, int64_t expires_us);

  Options o_;
  std::deque<int64_t> queue_;  // queued runs, oldest first
  size_t in_flight_ = 0;       // activations submitted and not done
  std::unordered_map<int64_t, ActivationId> activation_of_;  // runs started -> their activation
  std::unordered_map<int64_t, std::map<uint64_t, Waiter>> waiters_;
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
  std::string journal_why_;
};

}  // namespace basal::serve
