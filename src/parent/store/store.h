// The parent's store, behind interfaces: the journal a running parent writes (JournalStore), the
// reader `basal journal` and a daemon use (JournalReader), the kv store flows use (KvStore), the
// operator's approvals (Catalog), runs (RunStore: the module's, in `basal run` and `basal serve`
// alike) and what only `basal serve` keeps (ServeTables: API tokens and schedule marks). Two
// backends implement them all: SQLite (store/sqlite/, the embedded default) and PostgreSQL
// (store/postgres/), opened from a locator (store/open.h), with the same contract tests
// (tests/unit/store_contract_test.cpp).
//
// Batches: every write joins the open batch (one transaction, opened by the first write) and
// Store::Commit() ends it. The parent's loop commits once per turn and only then answers (group
// commit). Every part of one Store shares its batch, so a kv.put and the record of the host call
// that made it commit together or not at all, and a run's row commits with the pass that accepted
// it, before its 202 goes out.
//
//   auto store = OpenStore({.locator = "journal.db"});        // Result<std::unique_ptr<Store>>
//   JournalStore& journal = (*store)->journal();
//   Result<int64_t> id = journal.BeginActivation({...});
//   journal.RecordCall({...});  (*store)->kv().Put("orders", "o-1", "{\"n\":1}");
//   if (!(*store)->Commit()) { (void)(*store)->Rollback(); /* answer nothing from this batch */ }
//
// Not thread-safe: each object has one owner thread (the parent's loop thread).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "basal/host_call.h"
#include "basal/outcome.h"
#include "basal/result.h"

namespace basal {

// Who runs an activation: a parent process on a host. A parent that opens a journal closes the
// unfinished activations whose owner is gone (store.h: RecoverAbandoned).
struct ActivationOwner {
  std::string host;          // gethostname()
  int64_t pid = 0;           // the parent's pid
  int64_t start_ticks = 0;   // the parent's start time (/proc/PID/stat field 22): pid reuse is not the owner
};

// Where an activation's flow came from (docs/approvals.md).
enum class Origin {
  kUnrecorded,  // journaled before schema 4, which did not record it
  kAdhoc,       // a flow given with its manifest (`basal run FILE --manifest M`, Module::AddFlow)
  kApproved,    // a stored version of an approved flow (`basal run NAME`)
  kCodemode,    // an agent's script under an approved codemode policy (`basal run --policy NAME FILE`)
};
const char* OriginName(Origin origin);  // "unrecorded", "adhoc", "approved", "codemode"
std::optional<Origin> ParseOrigin(std::string_view name);

struct ActivationStart {
  std::string flow;           // flow name
  std::string source_hash;    // "sha256:<hex>" of the source text (kept in the texts table)
  std::string manifest_hash;  // "sha256:<hex>" of the manifest's canonical form
  std::string input_json;
  int64_t start_unix_us = 0;
  ActivationOwner owner;
  int64_t lease_until_unix_us = 0;  // renewed by the owner while it runs (RenewLeases)
  Origin origin = Origin::kAdhoc;
  int64_t approval_id = 0;          // the approved version (flow or codemode policy) it runs under; 0: none
  std::string manifest_text_hash;   // "sha256:<hex>" of the manifest text as written (kept in the texts table)
  // The run it executes (schema 6), 0: none (a bare activation). An activation of a run keeps no
  // input of its own: the run holds it (input_json is then ignored and stored empty).
  int64_t run_id{0};
  // A retry attempt (docs/durable.md#retries): the calls of the record from this call id on were
  // discarded (they run again); 0: the activation continues the record as it stands.
  int64_t retry_from_call{0};
};

struct ActivationEnd {
  int64_t activation_id = 0;
  int64_t end_unix_us = 0;
  Outcome outcome = Outcome::kOk;
  std::string result_json;  // when ok
  std::string error_json;   // when not ok: ActivationResult::ErrorJson()
  int64_t cpu_us = 0;       // measured by the parent from the kernel
  int64_t logs_dropped = 0; // log lines past the activation's log or journal budget
};

// A host call's record goes through these states (docs/journal.md):
//   decided   the gate decided (allow or deny); for a denied call the record is born answered.
//   started   the handler is about to run; for idempotent and external calls this is committed
//             BEFORE the handler runs (intent before effect).
//   answered  the handler answered (result or error) while the activation still ran.
//   abandoned the activation ended first (deadline, crash, cancel) or its parent died before the
//             call started; a late answer is still written into the record.
//   unknown   the parent died while the call was started: its effect may or may not have happened.
// A durable run's call also keeps (schema 6) the digest of its arguments, the order in which its
// answer reached the worker and, when the journaled result or error is not the answer itself
// (capped, redacted), the answer as the worker got it: what a resumed run is answered from
// (docs/durable.md).
enum class CallState { kDecided, kStarted, kAnswered, kAbandoned, kUnknown };
const char* CallStateName(CallState state);            // "decided", "started", ...
std::optional<CallState> ParseCallState(std::string_view name);

// EffectName (host_call.h) read back from the journal.
std::optional<Effect> ParseEffect(std::string_view name);

enum class Verdict { kAllow, kDeny, kNeedsApproval, kQuotaExceeded };
const char* VerdictName(Verdict verdict);               // "allow", "deny", "needs_approval", "quota_exceeded"
std::optional<Verdict> ParseVerdict(std::string_view name);

// What the gate decided and why: the journal stores this, not a 0/1.
struct Decision {
  Verdict verdict = Verdict::kDeny;
  std::string rule;    // what matched: "grants.kv.put", "needs no grant", "no grant", "unknown host call"
  std::string reason;  // human text; never empty
  bool allowed() const { return verdict == Verdict::kAllow; }
};

// Inserts a call's record (its first state).
struct CallRecord {
  int64_t activation_id = 0;
  int64_t call_id = 0;      // the worker's id, unique within the activation
  std::string name;         // "kv.get"
  std::string args_json;    // the journal view of the arguments (redacted by the spec if it says so)
  Decision decision;
  Effect effect = Effect::kExternal;
  CallState state = CallState::kDecided;
  std::string result_json;  // when answered with a value
  std::string error_json;   // when answered with an error (or denied): {"name":..,"message":..}
  int64_t start_unix_us = 0;
  std::optional<int64_t> end_unix_us;  // set when the record is born answered/abandoned
  // Durable runs only (empty / nullopt otherwise): see CallRow.
  std::string args_digest{};
  std::optional<int64_t> answer_seq{};
  std::string replay_json{};
};

// Moves a call's record to a later state, with what it returned (if anything).
struct CallUpdate {
  int64_t activation_id = 0;
  int64_t call_id = 0;
  CallState state = CallState::kAnswered;
  std::string result_json;
  std::string error_json;
  std::optional<int64_t> end_unix_us;
  std::optional<int64_t> answer_seq{};  // durable runs: see CallRow
  std::string replay_json{};
};

struct ActivationRow {
  int64_t id = 0;
  std::string flow, source_hash, manifest_hash, input_json;
  int64_t start_unix_us = 0;
  std::optional<int64_t> end_unix_us;
  std::string outcome;  // "" if unfinished; else OutcomeName(), including "abandoned"
  std::string result_json, error_json;
  int64_t cpu_us = 0;
  ActivationOwner owner;
  int64_t lease_until_unix_us = 0;
  int64_t logs_dropped = 0;
  Origin origin = Origin::kUnrecorded;  // schema 4
  int64_t approval_id = 0;              // 0: none
  std::string manifest_text_hash;       // "" before schema 4
  int64_t run_id = 0;                   // schema 6; 0: none
  int64_t retry_from_call = 0;          // schema 6; see ActivationStart
};

// What an operator approves: a flow (source + manifest) or a codemode policy (manifest only).
enum class ApprovalKind { kFlow, kPolicy };
const char* ApprovalKindName(ApprovalKind kind);  // "flow", "policy"
std::optional<ApprovalKind> ParseApprovalKind(std::string_view name);

// Who did it: the uid the command ran as and that uid's user name.
struct Actor {
  int64_t uid = 0;
  std::string name;
};

// One stored version of an approved flow or policy. Its texts are in the texts table, by hash.
struct ApprovalRow {
  int64_t id = 0;  // unique across kinds and names: activations reference it
  ApprovalKind kind = ApprovalKind::kFlow;
  std::string name;
  int64_t version = 0;                  // 1, 2, ... per (kind, name)
  std::string source_hash;              // flows: "sha256:<hex>" of the source text; policies: ""
  std::string manifest_text_hash;       // "sha256:<hex>" of the manifest text as approved
  std::string manifest_hash;            // the manifest's canonical hash (what activations record)
  Actor approver;
  int64_t approved_unix_us = 0;
  std::string note;
  std::optional<int64_t> revoked_unix_us;
  Actor revoker;                        // when revoked
  std::string revoke_note;
};

struct NewApproval {
  ApprovalKind kind = ApprovalKind::kFlow;
  std::string name;
  std::optional<std::string> source;    // flows only
  std::string manifest_text;
  std::string manifest_hash;            // Manifest::hash() of manifest_text, parsed by the caller
  Actor approver;
  int64_t at_unix_us = 0;
  std::string note;
  // The version the operator reviewed against (0: none). If another version was approved or
  // revoked since, Approve fails with kConflict: the review is stale.
  int64_t reviewed_version = 0;
  bool reviewed_revoked = false;
  std::string review_json;              // the review shown, kept with the approval's event
};

// An entry of the approvals' own journal: who approved or revoked which version, when.
struct ApprovalEvent {
  int64_t seq = 0;
  int64_t at_unix_us = 0;
  std::string kind;  // "approved" | "revoked"
  int64_t approval_id = 0;
  ApprovalKind subject = ApprovalKind::kFlow;
  std::string name;
  int64_t version = 0;
  Actor actor;
  std::string detail_json;  // {"note": .., "source_hash": .., "manifest_text_hash": .., "review": ..}
};

struct CallRow {
  int64_t activation_id = 0, call_id = 0;
  std::string name, args_json;
  Decision decision;
  Effect effect = Effect::kExternal;
  CallState state = CallState::kDecided;
  std::string result_json, error_json;
  int64_t start_unix_us = 0;
  std::optional<int64_t> end_unix_us;
  // Durable runs (schema 6; empty / nullopt otherwise): "sha256:<hex>" of the arguments' canonical
  // JSON (what a replay compares, whatever the journal's view of them); the position of its answer
  // in the order the worker received answers (counting answers replayed from the record); and the
  // answer exactly as sent when result_json / error_json are not (capped or redacted): a JSON
  // object {"ok": VALUE} or {"error": {"name", "message"}}.
  std::string args_digest;
  std::optional<int64_t> answer_seq;
  std::string replay_json;
};

// An operator's decision about a call in doubt (docs/durable.md): its answer as a result or an
// error, or run it again.
enum class ResolutionKind { kResult, kError, kRetry };
const char* ResolutionKindName(ResolutionKind kind);  // "result", "error", "retry"
std::optional<ResolutionKind> ParseResolutionKind(std::string_view name);

struct CallResolution {
  int64_t seq = 0;  // set by the store
  int64_t run_id = 0;
  int64_t activation_id = 0;  // the activation whose record is in doubt
  int64_t call_id = 0;
  ResolutionKind kind = ResolutionKind::kRetry;
  std::string value_json;     // kResult: the result; kError: {"name", "message"}; kRetry: ""
  Actor actor;
  int64_t at_unix_us = 0;
  std::string note;
};

struct KvEntry {
  std::string key;
  std::string value_json;
};

// What one namespace holds: bytes of its keys and values, and its keys.
struct KvUsage {
  uint64_t bytes = 0;
  uint64_t keys = 0;
};

// A bounded list: the entries, and whether it stopped at its byte limit before `limit` keys.
struct KvList {
  std::vector<KvEntry> entries;
  bool stopped_at_bytes = false;
};

// An operator's kv write from the command line (`basal kv put|rm`, docs/cli.md), journaled with who
// made it in the batch that holds the write (schema 7: the kv_audit table, docs/journal.md). The
// value itself is never kept here, only its digest, as a flow's kv values are journaled.
enum class KvAuditOp { kPut, kDelete };
const char* KvAuditOpName(KvAuditOp op);  // "put", "delete"
std::optional<KvAuditOp> ParseKvAuditOp(std::string_view name);

struct KvAuditEntry {
  // (Every member has an initializer, so a designated initializer may name any of them under -Wextra.)
  int64_t seq{0};               // set by the store
  int64_t at_unix_us{0};
  Actor actor{};                // the uid the command ran as and its user name
  std::string reason{};         // --reason TEXT; "" none
  std::string ns{}, key{};      // raw bytes, as kv's
  KvAuditOp op{KvAuditOp::kPut};
  std::string value_sha256{};   // put: "sha256:<hex>" of the value's JSON text as stored; delete: ""
  uint64_t value_bytes{0};      // put: that text's size; delete: 0
  bool existed{false};          // the key held a value before (put: an overwrite; delete: it was removed)
};

// The limits a kv write must stay within (kv.put's grant). The atomic operations check them inside
// their transaction, against what the namespace holds at that moment. Default: no limit.
struct KvLimits {
  uint64_t max_value_bytes = UINT64_MAX;  // the new value's JSON text
  uint64_t quota_bytes = UINT64_MAX;      // the namespace's keys and values after the write
  uint64_t quota_keys = UINT64_MAX;       // the namespace's keys after the write
};

// The integers KvStore::Increment counts in: those every JSON reader, JavaScript's included, reads
// exactly (Number.MAX_SAFE_INTEGER, 2^53 - 1, and its negative).
inline constexpr int64_t kKvMaxSafeInteger = (int64_t{1} << 53) - 1;

// What CompareAndSwap, Increment or PutWithin did. Nothing was written unless `status` is kWritten.
struct KvUpdate {
  enum class Status {
    kWritten,         // the new value is stored
    kMismatch,        // CompareAndSwap: the stored value does not equal `expected`
    kNotAnInteger,    // Increment: the stored value is not a number with an integral value
    kOutOfRange,      // Increment: the stored value, or the sum, is not within +-kKvMaxSafeInteger
    kValueTooLarge,   // the new value's JSON text is larger than max_value_bytes
    kOverQuota,       // the write would bring the namespace past quota_bytes or quota_keys
  };
  Status status = Status::kWritten;
  // The key's value as the operation left it: the new value when written, else the stored one
  // (nullopt: the key is absent). kValueTooLarge from CompareAndSwap reads nothing: nullopt.
  std::optional<std::string> current_json;
  uint64_t value_bytes = 0;  // the new value's JSON text (kWritten, kValueTooLarge, kOverQuota)
  KvUsage usage_after;       // what the namespace holds, or would hold, with it (kWritten, kOverQuota)
};

// The equality CompareAndSwap uses: JSON values, not their text. Numbers are equal when their
// numeric values are (1 equals 1.0 and 1e0; integers compare exactly), strings when their bytes
// are after unescaping ("\u00e9" equals "é"), arrays element by element in order, objects
// when they have the same keys with equal values in any order (a duplicate key in stored text:
// the last one counts, as in JSON.parse). An absent key and a stored null are both null.
bool KvValuesEqual(const Json& a, const Json& b);

// The integral value of `value` when it is a number with no fractional part (3, -3, 3.0, 3e2),
// saturated to int64 (a larger one reads as INT64_MAX or INT64_MIN: out of the safe range, never
// "not an integer"); nullopt for anything else (1.5, "3", true, null, [], {}).
std::optional<int64_t> KvIntegerValue(const Json& value);

// What opening a journal found and closed: activations whose owner is gone.
struct RecoveryReport {
  std::vector<int64_t> abandoned_activations;  // ended with outcome "abandoned"
  size_t unknown_calls = 0;                    // calls that were started: outcome unknown
  size_t abandoned_calls = 0;                  // calls only decided: never started
};

// ---- basal serve: runs, API tokens, schedule marks (docs/journal.md, "Runs, API tokens and schedule marks") ----

// A run is a request to run an approved flow with an input. It is journaled as queued before the
// daemon answers 202, becomes running when the daemon dispatches it (it then has an activation),
// and ends: with its activation's outcome, or without one (cancelled in the queue, a missed or
// skipped schedule fire).
//   running -> interrupted   a durable run whose activation was abandoned (its parent died): it
//                            waits to be resumed (SettleRunsOfEndedActivations)
//   interrupted -> queued    claimed for a resume (MoveRun with count_resume): resumes + 1
//   queued|running -> needs_reconciliation  a resume found an external call in doubt
//   needs_reconciliation -> interrupted     the operator resolved it (docs/durable.md)
//   interrupted|needs_reconciliation -> ended   cancelled, resume_exhausted, or an outcome
// A durable run that parks (docs/durable.md: sleep, waitForEvent, retries) leaves no worker behind:
//   running -> sleeping      sleep(ms): wake_us holds when it wakes
//   running -> waiting       waitForEvent(name): waiting_for/waiting_key name what it waits for,
//                            wake_us when the wait times out
//   running -> retrying      its activation failed with an outcome its retry policy names: wake_us
//                            holds the next attempt's time
//   sleeping|waiting|retrying -> queued        woken in this process (count_attempt for a retry)
//   sleeping|waiting|retrying -> interrupted   woken by another process (an event sent by `basal
//                            run signal`): whoever resumes interrupted runs picks it up
//   sleeping|waiting|retrying -> ended         cancelled
enum class RunState {
  kQueued,
  kRunning,
  kEnded,
  kInterrupted,
  kNeedsReconciliation,
  kSleeping,
  kWaiting,
  kRetrying,
};
// Parked: waits for a time or an event with no activation running (sleeping, waiting, retrying).
bool RunParked(RunState state);
const char* RunStateName(RunState state);  // "queued", "running", "ended"
std::optional<RunState> ParseRunState(std::string_view name);

struct NewRun {
  std::string flow;             // an approved flow's name
  std::string input_json;
  std::string trigger;          // "api", "webhook:NAME", "schedule:NAME"
  std::string idempotency_key;  // "" none; else unique per (flow, key) among unexpired keys
  int64_t created_unix_us = 0;  // also "now" for the key's expiry
  int64_t key_expires_unix_us = 0;  // when the key may be reused (ignored if no key)
  std::string state_detail;         // optional JSON text ("" none): e.g. {"scheduled_for_us": ...}
  bool durable = false;             // the flow's manifest says "durable": true (schema 6)
  // Held back by its holder (a schedule's fire behind its open run): never handed over to another
  // host while its holder lives (RunStore::ClaimQueuedRuns). Kept only where several hosts may share
  // the store (PostgreSQL, schema 8).
  bool held = false;
};

// What a run is bound to, set by its first start and kept (schema 6): the version it runs under
// (a resume under another is refused unless the operator asks), and for a durable run the clock
// and seed every execution of it sees.
struct RunBinding {
  int64_t approval_id = 0;         // 0: an ad hoc flow
  std::string source_hash, manifest_hash, manifest_text_hash;
  std::string seed;                // durable: 64 hex digits; "" otherwise
  int64_t clock_us = 0;            // durable: the run's clock at its start
};

struct RunRow {
  int64_t id = 0;
  std::string flow, input_json, trigger, idempotency_key;  // the key reads "" once it expired and was reused
  RunState state = RunState::kQueued;
  int64_t activation_id = 0;  // 0 until dispatched
  int64_t created_unix_us = 0;
  std::optional<int64_t> started_unix_us, ended_unix_us;
  std::string outcome;        // "" until ended; an outcome name (OutcomeName) or "missed", "skipped", "cancelled"
  // {"kind":..,"message":..}: when it ended without an activation (cancelled in the queue, missed),
  // or the activation's error as the daemon passed it.
  std::string error_json;
  std::string state_detail;
  bool durable = false;
  RunBinding binding;         // empty until its first start
  int64_t resumes = 0;        // activations after the first that resumed it (after an interruption)
  int64_t attempt = 1;        // its retry attempt (docs/durable.md#retries): 1 until it is retried
  std::optional<int64_t> wake_unix_us;  // parked: when it wakes (a sleep's end, a wait's timeout, a retry)
  std::string waiting_for;    // waiting: the event's name
  std::string waiting_key;    // waiting: the event's key ("" none)
};

// A move of a run between the states before its end (RunState's diagram). count_resume: the move
// claims a resume (resumes + 1). detail_json replaces state_detail ("" keeps it).
struct RunMove {
  int64_t run_id = 0;
  RunState from = RunState::kRunning;
  RunState to = RunState::kInterrupted;
  std::string detail_json;
  bool count_resume = false;
  bool count_attempt = false;  // a retry's wake: attempt + 1
  // To a parked state: when it wakes, and (waiting) what it waits for. Cleared by any other move.
  std::optional<int64_t> wake_unix_us{};
  std::string waiting_for{}, waiting_key{};
};

// An event sent to a durable run (docs/durable.md#events): to one run, or to whichever run of a
// flow waits (or will wait) for that name with that key (a webhook's delivery matched by a key in
// its payload). Kept until delivered or expired.
struct NewRunEvent {
  int64_t run_id = 0;           // 0: to the flow's run that waits for (name, event_key)
  std::string flow;             // the run's flow
  std::string name;             // what waitForEvent names
  std::string event_key;        // "" for an event to one run
  std::string payload_json;
  std::string sender;           // who sent it: a peer user, "token:NAME", "webhook:NAME", a Unix user
  int64_t received_unix_us = 0;
  int64_t expires_unix_us = 0;  // undelivered past this: dropped
  // "" for none. Else the sender's id of this delivery (a webhook's delivery id): one event per
  // (flow, delivery_id) in the store, across restarts and hosts (AddRunEvent).
  std::string delivery_id;
};

struct RunEvent {
  int64_t id = 0;
  int64_t run_id = 0;  // 0: not yet matched to a run (a keyed event)
  std::string flow, name, event_key, payload_json, sender;
  int64_t received_unix_us = 0, expires_unix_us = 0;
  int64_t delivered_activation = 0, delivered_call = 0;  // 0: undelivered
  std::optional<int64_t> delivered_unix_us;
};

// A count of runs by flow and state (the gauges of parked runs).
struct RunCount {
  std::string flow;
  RunState state = RunState::kQueued;
  size_t count = 0;
};

// existing: the key was known; `run` is the earlier run, nothing inserted.
struct EnqueueResult {
  RunRow run;
  bool existing = false;
};

// An API token of `basal serve`. Only a hash of the token is kept, never the token.
struct TokenRow {
  int64_t id = 0;
  std::string name, token_hash, scopes_json;
  Actor created_by;
  int64_t created_unix_us = 0;
  std::optional<int64_t> revoked_unix_us;
  Actor revoked_by;  // when revoked
};

// What JournalReader::ListRuns selects, newest first. (Every member has an initializer, so a
// designated initializer may name any of them under -Wextra.)
struct RunQuery {
  std::string flow{};               // "" every flow
  std::optional<RunState> state{};  // nullopt every state
  int64_t before_id = 0;            // > 0: only runs with a smaller id (the next page of a listing)
  size_t limit = 100;
  std::string outcome{};            // "" every outcome; else only ended runs with exactly this one
  // "" every trigger; a kind without a colon ("api", "webhook", "schedule") matches "KIND" and
  // every "KIND:NAME"; a text with a colon ("webhook:github") matches exactly.
  std::string trigger{};
  int64_t since_unix_us = 0;        // > 0: only runs created at or after this
  std::string idempotency_key{};    // "" any; else only the run of (flow, key) (flow required)
};

class JournalStore {
 public:
  virtual ~JournalStore() = default;
  virtual Result<int64_t> BeginActivation(const ActivationStart& start) = 0;  // the new id
  virtual Result<void> RecordCall(const CallRecord& call) = 0;  // kDatabase on a duplicate (activation, call id)
  virtual Result<void> UpdateCall(const CallUpdate& update) = 0;  // kNotFound if no such record
  virtual Result<void> EndActivation(const ActivationEnd& end) = 0;  // kNotFound unless unfinished
  // Extends the lease of every unfinished activation of `owner` to `until_unix_us`.
  virtual Result<void> RenewLeases(const ActivationOwner& owner, int64_t until_unix_us) = 0;
  // Closes, in one committed transaction, each unfinished activation whose owner is gone: on this
  // host (same `host`) when no live process has the owner's pid and start time; on another host
  // when its lease ended before `now_unix_us`. Its calls in `started` become `unknown`, in
  // `decided` become `abandoned`. Never touches `self`'s activations. Commits any open batch first.
  virtual Result<RecoveryReport> RecoverAbandoned(const ActivationOwner& self, int64_t now_unix_us) = 0;

  // ---- several hosts on one store (PostgreSQL only; docs/postgres.md, "Several hosts") ----
  // An activation is a run's claim: its owner and lease say who holds the run, its id is the
  // fencing token (each claim begins a new activation). In this mode every lease is measured by the
  // SERVER's clock, so a host's skewed clock neither steals a live lease nor loses its own:
  // BeginActivation's lease becomes server now + `lease` (the given lease_until is ignored).
  // Every write of an activation's calls and end then commits only while the activation is
  // unfinished (nobody closed it). The SQLite store is one host: kInvalidArgument.
  virtual Result<void> UseServerClockLeases(std::chrono::milliseconds lease) {
    (void)lease;
    return MakeError(ErrorCode::kInvalidArgument,
                     "several hosts need a PostgreSQL store; an SQLite journal serves one host");
  }
  // Renews every unfinished activation of `owner` to server now + lease (one statement, joining
  // the open batch: it commits with it), then returns those of `held` that someone else closed
  // (taken over: fenced out). On the connection whose batch writes those activations: a second
  // connection of the same process would wait for that batch's row locks while the batch waits
  // for the process.
  virtual Result<std::vector<int64_t>> RenewAndCheckLeases(const ActivationOwner& owner,
                                                           const std::vector<int64_t>& held) {
    (void)owner, (void)held;
    return MakeError(ErrorCode::kInvalidArgument, "several hosts need a PostgreSQL store");
  }
  // As RecoverAbandoned, by the server's clock: closes each unfinished activation (not self's)
  // whose lease ended, or whose owner is a dead process on self's machine, and settles their runs
  // (SettleRunsOfEndedActivations) in the same transaction. Waits at most 500 ms for a row lock
  // (an owner still writing is alive; the next heartbeat tries again).
  virtual Result<RecoveryReport> TakeExpiredLeases(const ActivationOwner& self) {
    (void)self;
    return MakeError(ErrorCode::kInvalidArgument, "several hosts need a PostgreSQL store");
  }
};

class KvStore {
 public:
  virtual ~KvStore() = default;
  // Namespaces and keys compare as raw bytes; values are JSON text (the caller validated it).
  // Reads see the open batch's own writes.
  virtual Result<std::optional<std::string>> Get(const std::string& ns, const std::string& key) = 0;
  virtual Result<void> Put(const std::string& ns, const std::string& key, const std::string& value_json) = 0;
  virtual Result<bool> Delete(const std::string& ns, const std::string& key) = 0;  // true if removed
  // Keys starting with `prefix` (exact bytes; "" matches all), in byte order, at most `limit`, and
  // stopping before the entry that would bring the keys' and values' bytes past `max_bytes` (at
  // most that entry is ever read beyond the limit: nothing unbounded is materialized).
  virtual Result<KvList> List(const std::string& ns, const std::string& prefix, size_t limit, size_t max_bytes) = 0;
  // The bytes of keys and values, and the keys, that `ns` holds (with the open batch's writes).
  virtual Result<KvUsage> Usage(const std::string& ns) = 0;
  // The byte size of a key's stored value, nullopt if absent.
  virtual Result<std::optional<uint64_t>> ValueBytes(const std::string& ns, const std::string& key) = 0;

  // The atomic read-modify-writes. Each reads the key, decides and writes in one step that no other
  // writer of the same store can interleave with: not another object on this connection, and not
  // another process writing the same database (the backend takes its write lock BEFORE it reads).
  // The write joins the open batch like Put. A refusal writes nothing; a batch the operation
  // opened to read under the lock stays open until Commit, like any other.
  //
  // Stores `value_json` when the stored value equals `expected_json` (KvValuesEqual; nullopt or
  // "null" stands for an absent key, which equals a stored null), after checking `limits`. A value
  // larger than max_value_bytes is refused before anything is read, whatever is stored.
  // kInvalidArgument if `expected_json` or `value_json` is not JSON; kDatabase if the stored value
  // is not JSON (the database was changed by hand).
  virtual Result<KvUpdate> CompareAndSwap(const std::string& ns, const std::string& key,
                                          const std::optional<std::string>& expected_json,
                                          const std::string& value_json, const KvLimits& limits) = 0;
  // Adds `by` to the integer the key holds (KvIntegerValue; an absent key or a stored null counts
  // as 0, as CompareAndSwap takes them for the same) and stores the sum as a JSON integer ("42"),
  // after checking `limits`. The stored value and the sum must be within +-kKvMaxSafeInteger
  // (kOutOfRange otherwise); a stored non-integer is kNotAnInteger. kInvalidArgument if `by`
  // itself is outside +-kKvMaxSafeInteger.
  virtual Result<KvUpdate> Increment(const std::string& ns, const std::string& key, int64_t by,
                                     const KvLimits& limits) = 0;
  // Put after checking `limits` against what the namespace holds, under the write lock (taken
  // before the usage is read), so that processes writing one namespace at once cannot together
  // pass its quota. kWritten, kValueTooLarge (nothing read) or kOverQuota; `current_json` is not
  // filled (the stored value is not read, only its size).
  virtual Result<KvUpdate> PutWithin(const std::string& ns, const std::string& key, const std::string& value_json,
                                     const KvLimits& limits) = 0;  // Journals an operator's kv write (joins the open batch, so the record commits with the write it
  // describes or not at all). Returns its seq. kInvalidArgument for a put without a digest.
  virtual Result<int64_t> RecordOperatorWrite(const KvAuditEntry& entry) = 0;
};

// Runs (docs/durable.md): the module's, whoever asked for them (`basal run`, `basal serve`, an
// embedder). Every write joins the store's open batch (Store::Commit() ends it), so a run's row
// commits in the pass that accepted it and only then is anybody told; a batch rolled back loses
// the run, and no client was told of it.
//
// Run states and the moves between them (anything else is refused and writes nothing: kConflict
// for a run that is not in the state the move needs, kInvalidArgument for an outcome its state
// cannot end with):
//   queued  -> running  MarkRunStarted: dispatched, with its activation
//   running -> ended    MarkRunEnded with the activation's outcome name (OutcomeName), or
//                       SettleRunsOfEndedActivations after recovery (outcome "abandoned", ...)
//   queued  -> ended    MarkRunEnded with "cancelled", "missed" or "skipped" (and an error_json)
class RunStore {
 public:
  virtual ~RunStore() = default;
  // Joins the open batch, taking the write lock before it reads the key (so two processes cannot
  // both insert a run for one key). Same (flow, idempotency_key) with an unexpired key (its
  // expiry after run.created_unix_us): returns the earlier run, existing=true, whatever its state.
  // Same key with a DIFFERENT input_json (compared as bytes): kConflict naming the key (the client
  // reused a key for another request). An expired key is forgotten (the old run keeps its row;
  // its key is cleared) and a new run inserted.
  virtual Result<EnqueueResult> EnqueueRun(const NewRun& run) = 0;
  // queued -> running; kConflict if not queued, kNotFound if no such run.
  // With its binding when the run has none yet (its first start): a resumed run keeps the binding of
  // its first start.
  virtual Result<void> MarkRunStarted(int64_t run_id, int64_t activation_id, int64_t at_unix_us,
                                      const RunBinding& binding = {}) = 0;
  // One of the moves of RunState's diagram that do not end the run; kConflict (nothing written) when
  // the run is not in `move.from` (another process moved it first), kInvalidArgument for a move the
  // diagram does not have.
  virtual Result<RunRow> MoveRun(const RunMove& move) = 0;
  // An operator's decision about a call in doubt (joins the open batch). Returns its seq.
  virtual Result<int64_t> AddResolution(const CallResolution& resolution) = 0;
  virtual Result<std::vector<CallResolution>> Resolutions(int64_t run_id) = 0;  // oldest first
  // running -> ended (with the activation's outcome name), or queued -> ended (outcome
  // "cancelled"/"missed"/"skipped" with error_json), or interrupted / needs_reconciliation -> ended
  // ("cancelled", "resume_exhausted" or an outcome name). kConflict if already ended; kNotFound if
  // no such run; kInvalidArgument for an outcome the run's state cannot end with.
  virtual Result<void> MarkRunEnded(int64_t run_id, std::string_view outcome, std::string_view error_json,
                                    int64_t at_unix_us) = 0;
  virtual Result<std::optional<RunRow>> GetRun(int64_t run_id) = 0;
  virtual Result<std::vector<RunRow>> RunsInState(RunState state, size_t limit) = 0;  // oldest first (by id)
  virtual Result<size_t> CountRuns(RunState state) = 0;

  // Parked runs (docs/durable.md): those whose wake time is at or before `now_unix_us`, earliest
  // first; the earliest wake of any; how many are parked (of one flow, or of all for "").
  virtual Result<std::vector<RunRow>> RunsDue(int64_t now_unix_us, size_t limit) = 0;
  virtual Result<std::optional<int64_t>> NextWake() = 0;
  virtual Result<size_t> CountParked(std::string_view flow) = 0;
  // Runs of `flow` waiting for the event (name, key), oldest first.
  virtual Result<std::vector<RunRow>> RunsWaitingFor(std::string_view flow, std::string_view name,
                                                     std::string_view key, size_t limit) = 0;
  // Counts by flow and state of the runs in `states` (at most `limit` rows).
  virtual Result<std::vector<RunCount>> CountRunsByFlow(const std::vector<RunState>& states, size_t limit) = 0;

  // Events (joins the open batch). AddRunEvent returns the new id; kConflict when the event has a
  // delivery_id and the flow has an event with that id already (RunEventOfDelivery finds it).
  virtual Result<int64_t> AddRunEvent(const NewRunEvent& event) = 0;
  // The event of `flow` made from delivery `delivery_id`, if the store holds one (delivered or
  // not, until an undelivered one expires and is dropped).
  virtual Result<std::optional<int64_t>> RunEventOfDelivery(std::string_view flow, std::string_view delivery_id) = 0;
  // The oldest undelivered, unexpired event named `name` for the run: sent to it, or keyed
  // (`key` non-empty) for its flow. Marks it delivered to (activation, call) at `now_unix_us`.
  virtual Result<std::optional<RunEvent>> TakeRunEvent(int64_t run_id, std::string_view flow, std::string_view name,
                                                       std::string_view key, int64_t now_unix_us,
                                                       int64_t activation_id, int64_t call_id) = 0;
  // Undelivered events sent to the run (not keyed ones), and keyed ones waiting for a run of `flow`.
  virtual Result<size_t> CountPendingEvents(int64_t run_id) = 0;
  virtual Result<size_t> CountPendingKeyedEvents(std::string_view flow) = 0;
  // The run's events, oldest first (delivered or not), at most `limit`.
  virtual Result<std::vector<RunEvent>> RunEvents(int64_t run_id, size_t limit) = 0;
  // Deletes at most `limit` undelivered events that expired before `now_unix_us`; how many.
  virtual Result<size_t> DropExpiredEvents(int64_t now_unix_us, size_t limit) = 0;
  // Ends every running run whose activation has ended: its outcome and error copied from the
  // activation (incl. "abandoned" set by RecoverAbandoned), ended at the activation's end (or
  // at_unix_us if the activation has none); except a durable run whose activation was abandoned,
  // which becomes interrupted (it waits to be resumed). Returns how many runs moved. Joins the open
  // batch (commit it). The module calls it after Open's recovery.
  virtual Result<size_t> SettleRunsOfEndedActivations(int64_t at_unix_us) = 0;

  // ---- several hosts: who holds a queued run (PostgreSQL only; docs/postgres.md, "Several hosts") ----
  // A queued run waits in the memory queue of one host, its holder (runs.queued_by). From this call
  // on, every run this store queues (EnqueueRun, MoveRun to queued) is held by `host_id`, which is
  // alive while its row in basal.hosts is renewed: now, and by every RenewAndCheckLeases (server now
  // + the lease of UseServerClockLeases, in the same statement). MarkRunStarted then starts only a
  // run this host holds (kConflict when another host took it). Joins the open batch. The SQLite
  // store is one host: kInvalidArgument.
  virtual Result<void> HoldQueuedRunsAs(std::string_view host_id) {
    (void)host_id;
    return MakeError(ErrorCode::kInvalidArgument, "several hosts need a PostgreSQL store");
  }
  // Which queued runs ClaimQueuedRuns takes (always of an API client, a webhook or a schedule, not
  // of `basal run`; never one this host holds unless kAtStart):
  //   kLapsed   those no live host holds (its row lapsed by the server's clock, or no holder);
  //   kSpare    those, and the ones a live host holds but has not held back (NewRun::held);
  //   kAtStart  kLapsed's, and those this host id held before (a host restarted with its id).
  enum class QueuedClaim { kLapsed, kSpare, kAtStart };
  // Makes this host the holder of at most `limit` such runs, oldest first, skipping rows another
  // transaction holds (FOR UPDATE SKIP LOCKED), and returns them (no longer held back). Joins the
  // open batch. kInvalidArgument before HoldQueuedRunsAs.
  virtual Result<std::vector<RunRow>> ClaimQueuedRuns(QueuedClaim which, size_t limit) {
    (void)which, (void)limit;
    return MakeError(ErrorCode::kInvalidArgument, "several hosts need a PostgreSQL store");
  }
  // A held run may be handed over from now on (joins the open batch). A no-op where runs are not held.
  virtual Result<void> ReleaseHeldRun(int64_t run_id) {
    (void)run_id;
    return Ok();
  }
  // Tells the other hosts, at the open batch's commit, that this host holds runs it cannot start
  // now (PostgreSQL NOTIFY: a hint; the claim decides). A no-op with one host.
  virtual Result<void> OfferQueuedRuns() { return Ok(); }
  // This store's connection hears what hosts other than `host_id` tell (PostgreSQL LISTEN, kept
  // across reconnections): their offers, and the runs they claimed (ClaimQueuedRuns tells them at
  // its commit, so that their former holder drops them from its queue). Then, when Store::io()'s
  // descriptor is readable, HeardFromHosts reads what arrived; an error when the connection broke
  // (it is made again at the store's next use). kInvalidArgument on SQLite.
  virtual Result<void> ListenForOffers(std::string_view host_id) {
    (void)host_id;
    return MakeError(ErrorCode::kInvalidArgument, "several hosts need a PostgreSQL store");
  }
  struct Heard {
    bool offered = false;         // another host holds runs it cannot start now
    std::vector<int64_t> taken;   // runs another host claimed
  };
  virtual Result<Heard> HeardFromHosts() { return Heard{}; }
  // At a host's stop: its row lapses now and is renewed no more, so that other hosts adopt the runs
  // it held at their next look (joins the open batch). A no-op before HoldQueuedRunsAs.
  virtual Result<void> LeaveHosts() { return Ok(); }
};

// What only `basal serve` keeps, as its extension of the store: API tokens (only their hash) and
// schedule marks. The same backend implements it on the same connection, so its writes share the
// store's batch like every other write (a token or a mark commits with the pass that wrote it).
// Reads of every token: JournalReader::ListTokens.
class ServeTables {
 public:
  virtual ~ServeTables() = default;
  // kConflict on a duplicate name among unrevoked tokens, or a hash already stored; kInvalidArgument
  // for an empty name or hash. Returns the new token's id.
  virtual Result<int64_t> AddToken(std::string_view name, std::string_view token_hash, std::string_view scopes_json,
                                   const Actor& by, int64_t at_unix_us) = 0;
  virtual Result<std::optional<TokenRow>> FindToken(std::string_view token_hash) = 0;  // unrevoked only
  // Revokes the unrevoked token of that name; kNotFound if there is none.
  virtual Result<void> RevokeToken(std::string_view name, const Actor& by, int64_t at_unix_us) = 0;

  // Schedule marks: per schedule trigger, the last scheduled fire time handled, so that after
  // downtime the daemon knows which fires it missed. nullopt: never set.
  virtual Result<std::optional<int64_t>> ScheduleMark(std::string_view trigger) = 0;
  virtual Result<void> SetScheduleMark(std::string_view trigger, int64_t fire_unix_us) = 0;
};

class JournalReader {
 public:
  virtual ~JournalReader() = default;
  // With `id`: that activation (kNotFound if absent), `limit` ignored. Else the newest `limit`,
  // oldest first.
  virtual Result<std::vector<ActivationRow>> Activations(std::optional<int64_t> id, size_t limit) = 0;
  virtual Result<std::vector<CallRow>> Calls(int64_t activation_id) = 0;  // in record order
  // Approved versions (schema 4; an older journal has none). Versions: oldest first; Names: the
  // newest version of every name of `kind`, by name; Events: every approval and revocation of
  // `name` (all names when empty), oldest first.
  virtual Result<std::optional<ApprovalRow>> Approval(int64_t id) = 0;
  virtual Result<std::vector<ApprovalRow>> Versions(ApprovalKind kind, const std::string& name) = 0;
  // The newest version of `name` (revoked or not); nullopt when it has none. What a run's
  // admission reads: one row however many versions were approved (SQLite), or the last of
  // Versions (a backend that does not read it apart).
  virtual Result<std::optional<ApprovalRow>> NewestVersion(ApprovalKind kind, const std::string& name) {
    auto versions = Versions(kind, name);
    if (!versions) return versions.error();
    if (versions->empty()) return std::optional<ApprovalRow>();
    return std::optional<ApprovalRow>(std::move(versions->back()));
  }
  virtual Result<std::vector<ApprovalRow>> Names(ApprovalKind kind) = 0;
  virtual Result<std::vector<ApprovalEvent>> Events(ApprovalKind kind, const std::string& name) = 0;
  // A kept text (flow source or manifest) by its "sha256:<hex>"; nullopt when not kept.
  virtual Result<std::optional<std::string>> Text(const std::string& hash) = 0;
  // basal serve's runs and API tokens (schema 5; an older journal has none). ListRuns: newest
  // first, at most query.limit. GetRun: nullopt when absent. ListTokens: every token, by id.
  virtual Result<std::vector<RunRow>> ListRuns(const RunQuery& query) = 0;
  virtual Result<std::optional<RunRow>> GetRun(int64_t run_id) = 0;
  // Schema 6: a run's activations (oldest first) and the calls of all of them, by activation then
  // call id (a resume builds its replay from these).
  virtual Result<std::vector<ActivationRow>> RunActivations(int64_t run_id) = 0;
  virtual Result<std::vector<CallRow>> RunCalls(int64_t run_id) = 0;
  virtual Result<std::vector<CallResolution>> Resolutions(int64_t run_id) = 0;  // oldest first
  virtual Result<std::vector<TokenRow>> ListTokens() = 0;
  // Schema 7: the operator's kv writes (KvStore::RecordOperatorWrite) to namespace `ns` (every
  // namespace when nullopt): the newest `limit`, oldest first. An older journal has none.
  virtual Result<std::vector<KvAuditEntry>> KvAudit(const std::optional<std::string>& ns, size_t limit) = 0;
};

// The operator's approvals, written (reads: JournalReader). Approve and Revoke each commit at
// once in a transaction of their own, so they need no open batch (kInvalidArgument if one is open).
class Catalog {
 public:
  virtual ~Catalog() = default;
  // Keeps the texts (content-addressed: a text already kept is not stored again), adds the next
  // version of (kind, name) and an "approved" event. kConflict when the newest version is not
  // the one reviewed (`reviewed_version`, `reviewed_revoked`).
  virtual Result<ApprovalRow> Approve(const NewApproval& approval) = 0;
  // Marks a version revoked and adds a "revoked" event. kNotFound: no such version;
  // kAlreadyExists: already revoked.
  virtual Result<ApprovalRow> Revoke(ApprovalKind kind, const std::string& name, int64_t version, const Actor& by,
                                     int64_t at_unix_us, const std::string& note) = 0;
  // Whether a version is revoked now (read under no batch of its own: sees other processes' revocations).
  virtual Result<bool> IsRevoked(int64_t approval_id) = 0;
  // Keeps a text by its hash (joins the open batch; no-op when already kept). `hash` must be Sha256Hex(text).
  virtual Result<void> KeepText(const std::string& hash, std::string_view text) = 0;
};

// A descriptor the owner's loop watches for a backend that talks to a server (PostgreSQL): readable
// (and writable when `want_write`) means Store::PollCommit may have news. fd -1: nothing to watch.
struct StoreIo {
  int fd = -1;
  bool want_write = false;
};

// One backend's writable store: journal, kv, runs and serve's tables share a connection and a batch.
class Store {
 public:
  virtual ~Store() = default;
  virtual JournalStore& journal() = 0;
  virtual KvStore& kv() = 0;
  virtual JournalReader& reader() = 0;  // reads on the writer's connection (sees the open batch)
  virtual Catalog& catalog() = 0;
  virtual RunStore& runs() = 0;
  virtual ServeTables& serve() = 0;     // basal serve's extension

  // ---- the batch ----
  // Commits the open batch and returns when it is durable; a no-op when no batch is open. If a
  // commit started by StartCommit is still in flight, waits for it first (and fails if it failed).
  virtual Result<void> Commit() = 0;
  virtual bool HasPendingBatch() const = 0;
  // Opens the batch now if none is open (a no-op if one is), so that the reads after it happen
  // under the batch: SQLite takes its write lock here (BEGIN IMMEDIATE), so nothing another
  // process commits can come between those reads and the batch's writes.
  virtual Result<void> OpenBatch() = 0;
  // Drops the open batch (after a failed commit, or to abandon it). A commit in flight is not
  // touched: it ends as it ends (PollCommit).
  virtual Result<void> Rollback() = 0;

  // The loop's commit, which never waits for the disk or the server (docs/postgres.md): the open
  // batch is sent to be committed, and writes from now on join the next batch. Returns its outcome
  // when the backend knows it at once (SQLite commits here), else nullopt; PollCommit then returns
  // it, once, when it is known (call it when io() is ready, or at any time). One commit is in
  // flight at a time: StartCommit while one is returns kInternal (a bug in the caller).
  //
  // While a commit is in flight a backend may accept a write without hearing the server's answer
  // first (PostgreSQL: JournalStore's writes, which answer nothing but success): such a write's
  // refusal then fails its batch at that batch's commit instead of failing the call. A write that
  // answers something (an id the backend has not reserved, a kv value, a run's state) and every
  // read wait for the commit in flight.
  virtual std::optional<Result<void>> StartCommit() = 0;
  virtual std::optional<Result<void>> PollCommit() = 0;
  virtual bool CommitInFlight() const = 0;
  virtual StoreIo io() const = 0;

  // Whether the store can take writes now (a daemon's readiness): the file is writable, or the
  // server is reachable and not read only (a standby). The error says what is wrong and what to do.
  // Never touches the open batch or a commit in flight.
  virtual Result<void> Check() = 0;

  // This journal's identity: 32 hex digits drawn at random when the journal was created (or
  // migrated from schema 1), never changed. Idempotency keys are "<journal id>:<activation>:<call>".
  virtual std::string journal_id() const = 0;
  // Where the store is, for an operator: the file's path, or the locator without its password.
  virtual std::string location() const = 0;
  // Strips the backend's own location from an error message meant for a flow (it must not learn
  // where the parent keeps its data).
  virtual std::string ForFlow(const Error& error) const = 0;
};

}  // namespace basal
