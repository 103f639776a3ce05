// Replay of a durable run (docs/durable.md), as pure decisions the module and the call gate perform:
//
//   the run's record (its activations' calls, the operator's resolutions)
//     -> AnalyzeRun: what each call of the record is now (answered: replayed; in doubt: by its effect
//        class, or stopped for the operator) and the order the answers reached the worker
//     -> Replayer: for each call the new activation issues, answer it from the record, run it live,
//        or end the run `diverged`; the recorded answers go out in their recorded order, each once its
//        call is issued, so the script sees exactly the frames it saw before.
//
// Nothing here reads the store, the clock or a worker: unit-tested with records built by hand.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "basal/host_call.h"
#include "parent/store/store.h"

namespace basal {

// One answer of the record, as the worker got it (or, for a resolved call, as the operator gave it).
struct RecordedAnswer {
  int64_t call_id = 0;
  bool ok = false;
  std::string value_json;                 // ok: the result
  std::string error_name, error_message;  // !ok
  int64_t clock_us = 0;                   // the durable clock the answer carried
  // A notification's answer (log): it takes no place in the order and moves no clock.
  bool notification = false;
};

// What the record says a call was: a replayed call must be the same call.
struct RecordedCall {
  std::string name;
  std::string args_digest;  // "sha256:<hex>"
};

// A call the record holds as started with no answer: its effect may or may not have happened.
struct InDoubtCall {
  int64_t activation_id = 0;
  int64_t call_id = 0;
  std::string name;
  std::string args_json;    // as journaled (what the operator reads)
  std::string args_digest;
  Effect effect = Effect::kExternal;
};

struct ReplayPlan {
  std::vector<RecordedAnswer> answers;          // in the order the worker is to receive them
  // Answers to notifications (log): sent as soon as the call is made, outside that order (the
  // worker ignores them, so where they fall cannot change what the script sees).
  std::map<int64_t, RecordedAnswer> immediate;
  std::map<int64_t, RecordedCall> calls;        // every call id the record holds, answered or in doubt
  int64_t last_call_id = 0;                     // the highest of them (0: an empty record)
  uint64_t bytes = 0;                           // the answers' text held in memory
  std::vector<int64_t> reruns;                  // calls in doubt that run again (pure, store-local, idempotent, retry)
};

struct RunAnalysis {
  ReplayPlan plan;
  std::vector<InDoubtCall> needs_operator;  // external calls in doubt that no operator has decided yet
  int64_t retry_from_call = 0;              // a retry: the calls from this id on run again (0: none)
};

// Decides every call of a durable run's record. `activations` and `calls` as
// JournalReader::RunActivations / RunCalls give them (oldest first; calls by activation, then call
// id); `resolutions` oldest first (a later one for the same call replaces an earlier one).
// `store_local(name)`: whether the call's effect lives in basal's own store (kv.*): effect and answer
// commit together, so a started call with no answer did not happen.
//
// A call's newest record decides (a resumed activation's rerun of a call supersedes the older
// record). Answered (or abandoned with a late answer): replayed. Started with no answer (unknown, or
// abandoned while its handler ran): pure and store-local calls run again; idempotent ones run again
// (with the same idempotency key: it names the run and the call); external ones follow the
// operator's resolution (result or error: replayed as that answer; retry: run again), and without
// one stop the run. Decided but never started: run again.
//
// `retry` (a retry attempt, docs/durable.md#retries): the plan stops at the retry point, the
// earliest failure (the begin of a step that did not return, or a call answered with an error
// outside a step that returned) after which the failed attempt did nothing that cannot be repeated
// (an answered external call outside a failed step from that point); the calls from there on run
// again, and retry_from_call names it. An activation whose ActivationRow::retry_from_call is set
// discarded the record's calls from that id on when it began.
RunAnalysis AnalyzeRun(const std::vector<ActivationRow>& activations, const std::vector<CallRow>& calls,
                       const std::vector<CallResolution>& resolutions,
                       const std::function<bool(std::string_view name)>& store_local, bool retry = false);

// The canonical digest of a call's arguments: "sha256:<hex>" of their JSON with sorted keys, as the
// parent parsed them (so the journal's redacted view does not matter).
std::string ArgsDigest(const Json& args);

// One resumed activation's replay: fed the calls the worker issues, in order.
class Replayer {
 public:
  // `strict`: every effect disabled (basal replay): a call the record does not answer is not run,
  // the replay stops there (kPastRecord).
  explicit Replayer(ReplayPlan plan, bool strict = false);

  enum class Step {
    kFromRecord,  // answered from the record (not journaled, not dispatched)
    kLive,        // past the record, or a call in doubt that runs again: the gate runs it
    kDiverged,    // not the call the record holds: the run ends diverged
    kPastRecord,  // strict: the record ends here (the run had not finished, or a call is in doubt)
  };
  struct Verdict {
    Step step = Step::kLive;
    std::string divergence;  // kDiverged: names the call and both sides
  };
  Verdict OnCall(int64_t call_id, std::string_view name, std::string_view args_digest);

  // The recorded answers that may go out now, in order: each one's call issued, every earlier one out.
  std::vector<RecordedAnswer> TakeDeliverable();

  // At the activation's end: why the record was not replayed whole (a recorded call the script never
  // issued, an answer never delivered), or nullopt.
  std::optional<std::string> Leftover() const;
  // For a deadline's message: what the replay is still waiting for ("" when nothing).
  std::string Waiting() const;


 private:
  ReplayPlan plan_;
  bool strict_ = false;
  size_t next_answer_ = 0;        // the first answer not yet delivered
  int64_t last_issued_ = 0;       // the highest call id the worker issued
  std::map<int64_t, bool> issued_;  // recorded calls issued so far
  std::vector<RecordedAnswer> ready_notes_;  // notifications issued, not yet taken
};

}  // namespace basal
