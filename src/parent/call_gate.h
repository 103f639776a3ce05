// The call gate: every host call a flow makes passes here, and only here are call records written.
//
//   decide (manifest) -> journal -> dispatch (handler) -> journal the answer -> answer the worker
//
// Pure calls are journaled once, with their answer; those of an unjournaled spec
// (HostCallSpec::journaled = false, e.g. timer.sleep) not at all, though they count in flight. Idempotent and external calls are journaled
// `started` first and their handler runs only after that record is committed (RunStarted, called
// by the loop right after its commit): intent before effect. A denied call is journaled with its
// decision and answered PermissionDenied. When an activation ends with calls in flight they become
// `abandoned`; an answer that still arrives is written into that record and goes no further.
// docs/journal.md has the lifecycle.
//
// A durable run's activation (docs/durable.md) is begun with BeginDurable: its calls are journaled
// with their argument digest and the position of their answer in the order the worker got them,
// every answer carries the durable clock, timer.sleep is journaled too, and a resumed activation's
// calls are first matched against the run's record (replay.h): answered from it without being
// journaled again, run live, or the run ends diverged.
//
// The gate also holds each activation to its manifest's call budgets: calls in flight (count and
// argument bytes), journal bytes (every value capped per call first: journal_value.h) and log
// bytes. A log line past its budget is answered and dropped (counted); any other call past a
// budget ends the activation (the over_budget hook), after which its further calls are ignored.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "basal/host_call.h"
#include "basal/manifest.h"
#include "basal/flow.h"
#include "basal/module_event.h"
#include "parent/loop/event_loop.h"
#include "parent/replay.h"
#include "parent/store/store.h"
#include "protocol/messages.h"

namespace basal {

// Shared by a module's replies and the gate: how an answer from any thread finds the gate, and
// how a reply learns that the module is gone.
struct ReplyLink {
  std::mutex mu;
  class CallGate* gate = nullptr;  // null once the module is gone
  EventLoop* loop = nullptr;
};

struct CallGateHooks {
  // Queue an answer frame for the activation's worker; sent after the batch commits, in the order
  // of these calls (the order the answers were journaled in).
  std::function<void(ActivationId, std::string payload)> send;
  // A handler answered a call that was in flight longer than a worker polls for its answer
  // (kLateAnswerUs): the worker is blocked in its read, and the answer still has its journaling and
  // its commit ahead. The module may tell the worker to poll now, so that its wake-up overlaps them
  // (a `poll` message; docs/protocol.md). Before the answer is journaled; absent: nothing.
  std::function<void(ActivationId)> answer_late;
  // Whether the activation's worker has room for more answers (flow control: the module holds
  // what waits for it under ModuleOptions::worker_output_budget_bytes). A call admitted while it
  // has none waits, its handler not run, until WorkerDrained says so. Absent: always room.
  std::function<bool(ActivationId)> worker_has_room;
  // A journal write failed: the batch must not commit (the loop rolls it back and fails its work).
  std::function<void(std::string why)> journal_failed;
  std::function<void(ModuleEvent)> event;
  std::function<void()> count_denied;
  // Every call's first record: the name it counts under and its verdict. `member`: the name is a
  // granted member of a family ("mcp.fs.read_file"), which the counter may fold past its cap. An
  // ungranted member counts under its family's name ("mcp.*"), a name no host call has as "unknown".
  std::function<void(const std::string& name, Verdict verdict, bool member)> count_call;
  std::function<void()> count_log_dropped;
  // A call's record reached `state` (journaled in the open batch): for the module's live activity.
  std::function<void(ActivationId, const Flow& flow, int64_t call_id, const std::string& name, const Decision&,
                     CallState state)>
      recorded;
  // A budget ran out: the module ends the activation (not from inside the gate's own call).
  std::function<void(ActivationId, Budget, std::string message)> over_budget;
  // A resumed durable activation issued a call other than the record's: the module ends it
  // diverged (not from inside the gate's own call). `past_record`: a strict replay (basal replay)
  // reached the end of the record instead, which is no divergence.
  std::function<void(ActivationId, std::string message, bool past_record)> diverged;
};

// A worker polls at most this long for an answer before it blocks (src/worker/wait_spin.h,
// WaitSpin::kMax): an answer that took longer finds it blocked.
inline constexpr int64_t kLateAnswerUs = 50;

struct CallGateLimits {
  size_t journal_value_max_bytes = 64u << 10;    // per journaled value (args, result, error)
  uint64_t in_flight_max_bytes = 32ull << 20;    // argument bytes of one activation's calls in flight
};

// What an activation's calls used, returned when it ends.
struct CallUsage {
  uint64_t journal_bytes = 0;  // estimated bytes of its call records
  uint64_t log_bytes = 0;      // bytes of its log calls' arguments
  uint64_t logs_dropped = 0;   // log lines dropped past a budget
  uint32_t in_flight = 0;      // calls waiting for an answer now
  uint64_t in_flight_bytes = 0;
  bool over = false;           // a budget ran out: the activation is ending
};

class CallGate {
 public:
  CallGate(HostCallRegistry& registry, JournalStore& journal, std::string journal_id, EventLoop& loop,
           CallGateHooks hooks, CallGateLimits limits);
  ~CallGate();  // unlinks every reply still held: they answer into nothing
  CallGate(const CallGate&) = delete;
  CallGate& operator=(const CallGate&) = delete;

  // An activation of durable run `run` starts: the clock its worker was loaded with, and the
  // replay of the run's record when it resumes the run (nullopt: a first execution).
  void BeginDurable(ActivationId activation, RunId run, int64_t start_clock_us, std::optional<ReplayPlan> replay,
                    bool strict = false);
  // A durable activation's replay at its end: a record the script never reached, or nullopt.
  std::optional<std::string> ReplayLeftover(ActivationId activation) const;
  // What its replay still waits for ("" when none, or not replaying).
  std::string ReplayWaiting(ActivationId activation) const;

  // A call frame of a running activation (already checked to belong to it).
  void OnCall(ActivationId activation, const FlowRef& flow, protocol::Call call);
  // After the loop's commit: runs the handlers whose `started` record is now durable, the first
  // `count` waiting (a commit in flight holds the records of the calls waiting when it started;
  // later ones are in the next batch), or, when the worker has no room for answers, leaves them
  // waiting for it.
  void RunStarted(size_t count);
  // The activation's worker read some of its answers: runs the handlers of its calls that wait for
  // room, oldest first, while worker_has_room says there is room.
  void WorkerDrained(ActivationId activation);
  bool has_started_waiting() const { return !awaiting_commit_.empty(); }
  size_t started_waiting() const { return awaiting_commit_.size(); }
  bool has_waiting_for_worker(ActivationId activation) const { return waiting_for_worker_.count(activation) != 0; }
  // The commit failed: nothing waiting for it may run. Returns their activations (to fail).
  std::vector<ActivationId> DropStartedWaiting();
  // The activation ended: its calls in flight become abandoned. Returns what its calls used.
  CallUsage EndCalls(ActivationId activation);
  // From HostCallReply, on the loop thread.
  // `text`: the answer as the handler serialized it (HostCallReply::OkText), `value` then null.
  void OnAnswer(ActivationId activation, int64_t call_id, bool ok, Json value, std::optional<std::string> text,
                std::string name, std::string message);

  size_t in_flight() const { return calls_.size(); }
  // Calls of the activation waiting for an answer (its budget's count).
  uint32_t InFlightOf(ActivationId activation) const;

  // A durable run parks on this call (docs/durable.md: sleep, waitForEvent): it leaves the calls in
  // flight without an answer, and its record stays `started` until the run wakes and its answer is
  // written (the activation ends parked meanwhile). False if the call is not in flight.
  bool Park(ActivationId activation, int64_t call_id);
  // Where the next answer of a durable activation falls in the order the worker receives them, and
  // the clock it would carry now: a parked call's answer, written when the run wakes, takes them.
  struct AnswerPosition {
    int64_t seq = 0;
    int64_t clock_us = 0;
  };
  std::optional<AnswerPosition> NextAnswer(ActivationId activation) const;

 private:
  // kWaitingForWorker: admitted (and, if idempotent or external, its `started` record committed),
  // its handler not run while the worker has no room for more answers.
  enum class Stage { kAwaitingCommit, kWaitingForWorker, kRunning, kAbandoned };
  // A durable activation's clock, answer order and replay.
  struct Durable {
    RunId run = 0;
    int64_t clock_us = 0;       // the clock the last answer carried (the load's clock at first)
    int64_t delivered = 0;      // answers sent so far, replayed ones included: the next is delivered + 1
    std::unique_ptr<Replayer> replay;  // null: not resuming
  };
  // What an answer to a durable activation carries, and what its record keeps.
  struct Stamp {
    std::optional<int64_t> clock_us;
    std::optional<int64_t> seq;
  };
  struct InFlight {
    const HostCallSpec* spec = nullptr;
    std::string name;  // as called: a family spec's member ("mcp.fs.read_text_file")
    Stage stage = Stage::kRunning;
    bool recorded = false;  // a record exists (started, or abandoned)
    bool journaled = true;  // false: its spec is unjournaled (HostCallSpec::journaled); never recorded
    FlowRef flow;              // its grants are the handler's ctx.grant
    std::string args_journal;  // kept only until the record is written
    uint64_t args_bytes = 0;   // counted in the activation's in_flight_bytes
    Decision decision;
    Json args;                 // kept only until the handler runs
    int64_t start_unix_us = 0;
    Effect effect = Effect::kExternal;  // of this call (HostCallSpec::effect_of)
    std::string args_digest;   // durable runs
    const Json* grant = nullptr;  // the grant that admitted it (in `flow`'s manifest), or null: ctx.grant
  };
  using Key = std::pair<ActivationId, int64_t>;

  using GrantEntry = std::pair<const std::string, Json>;
  // `grant`: the manifest's grant for the call's name (Manifest::GrantEntryFor), looked up once.
  Decision Decide(const Flow& flow, const protocol::Call& call, const HostCallSpec* spec, const GrantEntry* grant);
  Effect EffectOf(const HostCallSpec& spec, const protocol::Call& call, const Json* grant);
  Durable* DurableOf(ActivationId activation);
  // The clock and position of an answer about to be sent (durable activations; none otherwise).
  // A notification's answer (log) carries the clock as it is and takes no position.
  Stamp StampAnswer(ActivationId activation, bool notification, int64_t end_unix_us);
  // Queues the recorded answers a replay may deliver now.
  void DeliverReplayed(ActivationId activation, Durable& durable);
  std::string IdempotencyKey(ActivationId activation, int64_t call_id);
  void Dispatch(const Key& key, InFlight& call);
  // Dispatch now, or wait for the worker to read (flow control).
  void DispatchOrWait(const Key& key, InFlight& call);
  // `spec`: the registry's spec for the record's name (null: none), counted by name.
  void Record(const CallRecord& record, const Flow& flow, const HostCallSpec* spec);
  void Update(const CallUpdate& update, const InFlight& call);
  // The journal's view of a result: its text (`value_json`, the worker's) read by the spec's
  // journal_result_text, or its tree (`value`; parsed from the text when null) by journal_result.
  std::string ResultForJournal(const HostCallSpec& spec, const Json* value, const std::string& value_json);
  // Ends the activation's calls for a budget: later calls are ignored.
  void OverBudget(ActivationId activation, CallUsage& usage, Budget budget, std::string message);
  // Adds a record's bytes to the activation's journal bytes; false if that passes its budget.
  bool Charge(CallUsage& usage, const Flow& flow, uint64_t bytes);

  HostCallRegistry& registry_;
  JournalStore& journal_;
  const std::string journal_id_;
  CallGateHooks hooks_;
  const CallGateLimits limits_;
  std::map<ActivationId, CallUsage> usage_;  // activations that made a call and have not ended
  std::shared_ptr<ReplyLink> link_;
  std::map<Key, InFlight> calls_;  // freed when answered (or abandoned and never started)
  std::vector<Key> awaiting_commit_;
  std::map<ActivationId, std::deque<int64_t>> waiting_for_worker_;  // call ids, oldest first
  std::map<ActivationId, Durable> durable_;  // durable activations that have not ended
};

}  // namespace basal
