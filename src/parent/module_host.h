// What basal's own rooms built on a module use beyond its public API (basal serve, basal mcp, the
// CLI's run commands): the module's loop, the reader of its store, writes that join its batch, and
// runs. Embedders use include/basal/module.h only.
//
// A run (docs/durable.md) is what an operator or a client asked for: a flow, an input, a trigger.
// It is journaled as queued before anybody is told of it, and the module's one queue dispatches
// it: the run's activation starts in the batch that records it, and the run ends in the batch that
// records its activation's end. A durable flow's run outlives its host: interrupted when its
// parent died, resumed by replay (every recorded answer served from the journal), stopped as
// needs_reconciliation at an external call in doubt until an operator resolves it.
//
//   ModuleHost& host = module->host();
//   auto accepted = host.StartRun(flow, input, {.trigger = "api"}, [](const RunStop& stop) { ... });
//   host.AfterCommit([](const Result<void>& committed) { /* answer the client: its run is durable */ });
//
// Loop thread only, like everything of the module's.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "basal/flow.h"
#include "basal/outcome.h"
#include "basal/result.h"
#include "parent/replay.h"
#include "parent/store/store.h"

namespace basal {

class EventLoop;

// The message of a strict replay's end when the script reached the end of the record (ReplayRecord):
// the activation ends cancelled with this prefix, which is no divergence.
inline constexpr const char* kReplayPastRecord = "replay stopped: ";

struct RunOptions {
  std::string trigger = "embedder";  // "api", "webhook:NAME", "schedule:NAME", "cli", "embedder"
  std::string idempotency_key;       // "": none. Else one run per (flow, key) while the key lasts
  std::chrono::milliseconds key_ttl{24 * 3600 * 1000};
  std::string state_detail;          // optional JSON text kept with the run (a schedule's fire time)
  // Journaled as queued but kept out of the queue until ReleaseRun (a schedule's buffered fire).
  bool hold = false;
  // When the run was asked for, by the caller's clock (the key's expiry counts from it); 0: now.
  int64_t created_unix_us = 0;
};

// A run stopped: it ended, or it waits for an operator (needs_reconciliation). Called once per
// stop, after the batch that records it committed (or failed: then `result` says journal_error).
struct RunStop {
  RunId run_id = 0;
  RunState state = RunState::kEnded;  // kEnded, or kNeedsReconciliation, or kInterrupted (a journal
                                      // failure left it to be resumed), or parked (sleeping, waiting,
                                      // retrying: it goes on later, in a new activation)
  std::string outcome;                // the run's outcome when ended (an Outcome name, "cancelled", ...)
  ActivationResult result;            // of the activation that ended it; synthetic when none ran
  int64_t started_unix_us = 0;        // that activation's start (0: none ran)
  // When an activation ended the run (state kEnded): that activation's end as journaled, and the
  // run row's error as written with it, in the batch whose commit this stop follows. A waiter
  // answers from these instead of reading back what the module has just written. Empty when the
  // run ended without an activation, and not to be trusted once `result` says journal_error.
  std::optional<ActivationEnd> end{};
  std::string run_error_json{};
};
using RunCallback = std::function<void(const RunStop&)>;

struct RunAccepted {
  RunRow run;             // as journaled (state queued), or the earlier run of the same key
  bool existing = false;  // the idempotency key named an earlier run: nothing new was journaled
};

struct ResumeOptions {
  // Resume under the flow's newest approved version rather than the one the run started under
  // (docs/durable.md: a replay that diverges from the record then ends the run `diverged`).
  bool newest_version = false;
};

class ModuleHost {
 public:
  virtual ~ModuleHost() = default;

  virtual EventLoop& loop() = 0;
  // Reads on the module's connection: they see the open batch.
  virtual JournalReader& reader() = 0;
  // Runs, and basal serve's extension of the store (tokens, schedule marks). Writes join the
  // module's open batch: they commit with it, or are lost with it. Report a write that failed with
  // FailBatch.
  virtual RunStore& runs() = 0;
  virtual ServeTables& serve() = 0;
  // Whether the store can take writes now (Store::Check: a daemon's readiness).
  virtual Result<void> CheckStore() = 0;
  // Whether the module's commits are failing now: from a failed commit until one succeeds and
  // every end that failure left unwritten is written (journal_failure .. journal_recovered).
  virtual bool journal_failing() const = 0;
  // Where the store is, for an operator (a path, or a locator without its password).
  virtual std::string store_location() const = 0;
  // A write into the open batch failed: at the end of this pass the batch is rolled back with all
  // it holds (answers unsent, activations failed as journal_error, AfterCommit callbacks told).
  virtual void FailBatch(std::string why) = 0;
  virtual void AfterCommit(std::function<void(const Result<void>&)> fn) = 0;

  // The newest approved version of flow `name`, loaded once and kept while it stays the newest and
  // unrevoked (one read of its versions per call). kNotFound, kRefused (revoked) as LoadApprovedFlow.
  virtual Result<FlowRef> CurrentFlow(std::string_view name) = 0;
  // The same, for a run that StartRun journals next in this loop pass: the versions are read under
  // the open batch (opened now: call it only from a pass, whose end commits it), and a run that the
  // same batch starts needs no second look at its approval (SQLite: under the batch's write lock no
  // other process can revoke it before that batch commits).
  virtual Result<FlowRef> CurrentFlowForRun(std::string_view name) = 0;

  // Journals a run of `flow` as queued (in the open batch) and queues it. With an idempotency key
  // that names an unexpired earlier run: that run, existing=true, nothing queued and `done` never
  // called. Errors as Module::Submit (and kConflict: the key was used with another input).
  virtual Result<RunAccepted> StartRun(const FlowRef& flow, nlohmann::json input, RunOptions options,
                                       RunCallback done) = 0;
  // A run of flow `name` is about to be started (a request for one is being read): an idle worker
  // of that flow is told to poll for its `activate` (protocol's `poll` message), so that its
  // wake-up overlaps the run's acceptance instead of following it. Only while fewer workers are
  // busy or starting than there are CPUs (and ModuleOptions::busy_poll is not 0), and at
  // most once per worker between two of its activations: a request that starts no run costs the
  // worker at most 50 us of polling, once.
  virtual void WakeIdleWorker(std::string_view name) = 0;
  // A held run enters the queue. kNotFound if it is not held here.
  virtual Result<void> ReleaseRun(RunId run) = 0;
  // Claims an interrupted durable run (another process claiming it at the same time gets
  // kConflict) and queues it to be resumed by replay; or, when the record holds an external call in
  // doubt with no operator's decision, stops it as needs_reconciliation naming the call (`done` is
  // called); or ends it resume_exhausted past max_resumes. kRefused: its version was revoked (or is
  // not the newest, unless options.newest_version). kNotFound, kConflict (not interrupted).
  virtual Result<RunAccepted> ResumeRun(RunId run, ResumeOptions options, RunCallback done) = 0;
  // Replays a recorded run with every effect disabled (basal replay): a new run of `flow` in THIS
  // module's store (a scratch journal, not the one the record came from), with the record's input,
  // clock and seed, answered from `plan` only. It ends ok when the script replays the record to its
  // end, diverged at the first call other than the record's, or cancelled with kReplayPastRecord
  // when the script reaches a call the record does not answer (the run had not finished).
  virtual Result<RunAccepted> ReplayRecord(const FlowRef& flow, const RunRow& recorded, const ReplayPlan& plan,
                                           RunCallback done) = 0;
  // Re-queues a run journaled as queued by an earlier process (basal serve's restart).
  virtual Result<void> RequeueRun(const RunRow& run, RunCallback done) = 0;
  // An operator's decision about a call in doubt of a run that needs reconciliation: journaled with
  // who decided, and the run becomes interrupted (to be resumed). kConflict: the run does not need
  // reconciliation, or that call is not in doubt.
  virtual Result<RunRow> ResolveCall(const CallResolution& resolution) = 0;

  // Parked runs (docs/durable.md). Wakes the runs whose time has come (at most `limit`): a sleep's
  // call is answered, a wait's times out (its call throws TimeoutError), a retry's attempt begins;
  // each is queued to resume by replay, told to `done_for(run)`. Returns how many woke. A run that
  // cannot resume (its version revoked) ends cancelled, naming why.
  virtual Result<size_t> WakeDueRuns(int64_t now_unix_us, size_t limit,
                                     const std::function<RunCallback(const RunRow&)>& done_for) = 0;
  // The earliest wake time of a parked run in the store (nullopt: none parked).
  virtual Result<std::optional<int64_t>> NextWake() = 0;
  // Sends an event to a durable run (or, with run_id 0 and a key, to the run of event.flow that
  // waits for it). If the run waits for it, the event is delivered now: with `resume` set the run is
  // queued here (told to *resume); without, it becomes interrupted for whoever resumes runs (basal
  // serve within a second, or basal run --resume). Otherwise it is kept for the run's next wait,
  // until event_retention. kNotFound (no such run), kConflict (the run has ended, or is not
  // durable), kInvalidArgument (name, payload), kUnavailable (a bound: events per run or per flow).
  struct EventSent {
    int64_t event_id = 0;
    int64_t delivered_to = 0;  // the run it was delivered to now (0: kept)
    RunRow run;                // that run as it stands after (or the addressed run)
    // The event's delivery_id named an event the store holds already: that is event_id, and
    // nothing was sent (a sender's retry, through this host or another, before or after a restart).
    bool replayed = false;
  };
  virtual Result<EventSent> SendEvent(NewRunEvent event, std::optional<RunCallback> resume) = 0;
  // Ends a run that is held, queued, running, interrupted or waiting for an operator, as cancelled.
  virtual Result<void> CancelRun(RunId run, std::string why) = 0;

  virtual size_t queued_runs() const = 0;   // queued for a worker (not held)
  virtual size_t running_runs() const = 0;  // with an activation running
  // Whether `run` waits (queued or held) or runs in this module: its stop callback is still to come.
  virtual bool RunLive(RunId run) const = 0;

  // Workers alive at once from now on (basal serve's reload of limits.max_workers).
  virtual void SetMaxWorkers(size_t max_workers) = 0;
  // From now on a codemode script's worker leaves a welcomed spare behind for the next script
  // (Pool::KeepCodemodeSpares): basal mcp and serve's /mcp, whose scripts come one after another.
  virtual void KeepCodemodeSpares(bool keep) = 0;
  // Starts no run from now on (a drain): the runs waiting here stay journaled as queued for the
  // next process to start, and are forgotten here (their callbacks are not called). What runs,
  // runs on.
  virtual void StopStartingRuns() = 0;
  // Several hosts: `heard` is called (from the loop) when another host tells that runs wait in its
  // queue for want of a worker (a hint: RunStore::ClaimQueuedRuns decides who takes what).
  virtual void OnOffersHeard(std::function<void()> heard) = 0;
};

}  // namespace basal
