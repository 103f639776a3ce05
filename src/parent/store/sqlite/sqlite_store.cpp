// The SQLite store: journal, kv, reader, catalog, runs and serve's tables on one connection and one
// batch (see sqlite_store.h).
#include "parent/store/sqlite/sqlite_store.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <string_view>
#include <utility>

#include "basal/manifest.h"
#include "parent/store/owner.h"
#include "parent/store/sqlite/checkpointer.h"
#include "parent/store/sqlite/files.h"
#include "parent/store/sqlite/read_queries.h"
#include "parent/store/sqlite/schema.h"
#include "parent/store/sqlite/sqlite_support.h"

namespace basal {

// Three equalities, not `state IN (?,?,?)`: SQLite builds a temporary b-tree for an IN list of more
// than two values at every execution of the statement (about 5 us an answer), and none for these.
const char* const kSqliteUpdateCallSql =
    "UPDATE calls SET state=?, result=coalesce(?, result), error=coalesce(?, error), end_us=coalesce(?, end_us), "
    "answer_seq=coalesce(?, answer_seq), replay=coalesce(?, replay) "
    "WHERE activation_id=? AND call_id=? AND (state=? OR state=? OR state=?)";
namespace {

using sqlite::Binder;
using sqlite::DbError;
using sqlite::JournalError;
using sqlite::Stmt;
using sqlite::Use;

// Text bound as NULL when empty (an absent result or error).
struct OrNull {
  std::string_view text;
};

void BindOne(Binder& b, const std::string& v) { b.Text(v); }
void BindOne(Binder& b, const char* v) { b.Text(v); }
void BindOne(Binder& b, OrNull v) { b.TextOrNull(v.text); }
void BindOne(Binder& b, int64_t v) { b.Int(v); }
void BindOne(Binder& b, const std::optional<int64_t>& v) { b.IntOrNull(v); }
void BindOne(Binder& b, std::string_view v) { b.Text(v); }

// A run's binding as the columns a start writes: all NULL unless it is bound (its source_hash is
// set), since only a run's first start binds it (start_run keeps a binding already there).
struct BindingColumns {
  explicit BindingColumns(const RunBinding& b) {
    if (b.source_hash.empty()) return;
    if (b.approval_id > 0) approval = b.approval_id;
    if (!b.seed.empty()) clock = b.clock_us;
    manifest_hash = {b.manifest_hash};
    manifest_text_hash = {b.manifest_text_hash};
    seed = {b.seed};
    source_hash = {b.source_hash};
  }
  std::optional<int64_t> approval, clock;
  OrNull manifest_hash, manifest_text_hash, seed, source_hash;
};

// When a run's idempotency key expires: NULL for a run without a key.
std::optional<int64_t> KeyExpires(const NewRun& run) {
  if (run.idempotency_key.empty()) return std::nullopt;
  return run.key_expires_unix_us;
}

// The states a call record may move to `to` from (store.h: CallState). A late answer may still be
// written into an abandoned record, so abandoned -> abandoned is a move too.
std::vector<const char*> AllowedFrom(CallState to) {
  switch (to) {
    case CallState::kDecided: return {};
    case CallState::kStarted: return {"decided"};
    case CallState::kAnswered: return {"decided", "started"};
    case CallState::kAbandoned: return {"decided", "started", "abandoned"};
    case CallState::kUnknown: return {"started"};
  }
  return {};
}

class SqliteStore final : public Store,
                          public JournalStore,
                          public KvStore,
                          public JournalReader,
                          public Catalog,
                          public RunStore,
                          public ServeTables {
 public:
  explicit SqliteStore(std::string path) : path_(std::move(path)) {}
  ~SqliteStore() override {
    checkpointer_.reset();  // joins its thread and closes its connection first
    if (db_ != nullptr && sqlite3_get_autocommit(db_) == 0) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    stmts_.reset();  // statements must be finalized before the connection closes
    reads_.Finalize();
    if (db_ != nullptr) sqlite3_close_v2(db_);
  }
  SqliteStore(const SqliteStore&) = delete;
  SqliteStore& operator=(const SqliteStore&) = delete;

  Result<void> Open(Durability durability);
  Result<SqliteSettings> Settings();

  // Store
  JournalStore& journal() override { return *this; }
  KvStore& kv() override { return *this; }
  JournalReader& reader() override { return *this; }
  // Opens the write lock only: a run accepted before in this batch stays pending (EnqueueRun).
  Result<void> OpenBatch() override { return OpenBatchKeepingPending(); }
  Catalog& catalog() override { return *this; }
  RunStore& runs() override { return *this; }
  ServeTables& serve() override { return *this; }
  Result<void> Commit() override;
  bool HasPendingBatch() const override { return batch_open_; }
  Result<void> Rollback() override;
  // SQLite commits in the caller's thread, and fast (docs/journal.md): the loop's commit is the
  // synchronous one, its outcome known at once.
  std::optional<Result<void>> StartCommit() override { return Commit(); }
  std::optional<Result<void>> PollCommit() override { return std::nullopt; }
  bool CommitInFlight() const override { return false; }
  StoreIo io() const override { return {}; }
  Result<void> Check() override;
  std::string journal_id() const override { return journal_id_; }
  std::string location() const override { return path_; }
  std::string ForFlow(const Error& error) const override;

  // JournalStore
  Result<int64_t> BeginActivation(const ActivationStart& start) override;
  Result<void> RecordCall(const CallRecord& call) override;
  Result<void> UpdateCall(const CallUpdate& update) override;
  Result<void> EndActivation(const ActivationEnd& end) override;
  Result<void> RenewLeases(const ActivationOwner& owner, int64_t until_unix_us) override;
  Result<RecoveryReport> RecoverAbandoned(const ActivationOwner& self, int64_t now_unix_us) override;

  // KvStore
  Result<std::optional<std::string>> Get(const std::string& ns, const std::string& key) override;
  Result<void> Put(const std::string& ns, const std::string& key, const std::string& value_json) override;
  Result<bool> Delete(const std::string& ns, const std::string& key) override;
  Result<KvList> List(const std::string& ns, const std::string& prefix, size_t limit, size_t max_bytes) override;
  Result<KvUsage> Usage(const std::string& ns) override;
  Result<std::optional<uint64_t>> ValueBytes(const std::string& ns, const std::string& key) override;
  Result<KvUpdate> CompareAndSwap(const std::string& ns, const std::string& key,
                                  const std::optional<std::string>& expected_json, const std::string& value_json,
                                  const KvLimits& limits) override;
  Result<KvUpdate> Increment(const std::string& ns, const std::string& key, int64_t by,
                             const KvLimits& limits) override;
  Result<KvUpdate> PutWithin(const std::string& ns, const std::string& key, const std::string& value_json,
                             const KvLimits& limits) override;
  Result<int64_t> RecordOperatorWrite(const KvAuditEntry& entry) override;

  // JournalReader
  Result<std::vector<ActivationRow>> Activations(std::optional<int64_t> id, size_t limit) override {
    if (auto r = CheckBatchUsable(); !r) return r.error();
    return reads_.Activations(id, limit);
  }
  Result<std::vector<CallRow>> Calls(int64_t activation_id) override {
    if (auto r = CheckBatchUsable(); !r) return r.error();
    return reads_.Calls(activation_id);
  }
  Result<std::optional<ApprovalRow>> Approval(int64_t id) override { return reads_.Approval(id); }
  Result<std::vector<ApprovalRow>> Versions(ApprovalKind kind, const std::string& name) override {
    return reads_.Versions(kind, name);
  }
  // Kept from the last read while no other connection has committed (PRAGMA data_version) and
  // this one has approved or revoked nothing since (Approve, Revoke clear it): a run's admission
  // reads the approval once per change, not once per run, and a revocation committed anywhere
  // before this batch took its lock is seen (docs/performance.md, the fifth round).
  Result<std::optional<ApprovalRow>> NewestVersion(ApprovalKind kind, const std::string& name) override;
  Result<std::vector<ApprovalRow>> Names(ApprovalKind kind) override { return reads_.Names(kind); }
  Result<std::vector<ApprovalEvent>> Events(ApprovalKind kind, const std::string& name) override {
    return reads_.Events(kind, name);
  }
  Result<std::optional<std::string>> Text(const std::string& hash) override { return reads_.Text(hash); }
  Result<std::vector<RunRow>> ListRuns(const RunQuery& query) override {
    if (auto r = CheckBatchUsable(); !r) return r.error();
    return reads_.ListRuns(query);
  }
  // JournalReader's and RunStore's: one answer, the same row.
  Result<std::optional<RunRow>> GetRun(int64_t run_id) override {
    if (auto r = CheckBatchUsable(); !r) return r.error();
    return reads_.GetRun(run_id);
  }
  Result<std::vector<TokenRow>> ListTokens() override {
    if (auto r = CheckBatchUsable(); !r) return r.error();
    return reads_.ListTokens();
  }
  Result<std::vector<KvAuditEntry>> KvAudit(const std::optional<std::string>& ns, size_t limit) override {
    if (auto r = CheckBatchUsable(); !r) return r.error();
    return reads_.KvAudit(ns, limit);
  }

  // Catalog
  Result<ApprovalRow> Approve(const NewApproval& approval) override;
  Result<ApprovalRow> Revoke(ApprovalKind kind, const std::string& name, int64_t version, const Actor& by,
                             int64_t at_unix_us, const std::string& note) override;
  Result<bool> IsRevoked(int64_t approval_id) override;
  Result<void> KeepText(const std::string& hash, std::string_view text) override;

  Result<std::vector<ActivationRow>> RunActivations(int64_t run_id) override {
    if (auto r = CheckBatchUsable(); !r) return r.error();
    return reads_.RunActivations(run_id);
  }
  Result<std::vector<CallRow>> RunCalls(int64_t run_id) override {
    if (auto r = CheckBatchUsable(); !r) return r.error();
    return reads_.RunCalls(run_id);
  }

  // RunStore (GetRun and ListTokens above)
  Result<EnqueueResult> EnqueueRun(const NewRun& run) override;
  Result<void> MarkRunStarted(int64_t run_id, int64_t activation_id, int64_t at_unix_us,
                              const RunBinding& binding = {}) override;
  Result<RunRow> MoveRun(const RunMove& move) override;
  Result<int64_t> AddResolution(const CallResolution& resolution) override;
  Result<std::vector<CallResolution>> Resolutions(int64_t run_id) override {
    if (auto r = CheckBatchUsable(); !r) return r.error();
    return reads_.Resolutions(run_id);
  }
  Result<void> MarkRunEnded(int64_t run_id, std::string_view outcome, std::string_view error_json,
                            int64_t at_unix_us) override;
  Result<std::vector<RunRow>> RunsInState(RunState state, size_t limit) override;
  Result<size_t> CountRuns(RunState state) override;
  Result<size_t> SettleRunsOfEndedActivations(int64_t at_unix_us) override;
  Result<std::vector<RunRow>> RunsDue(int64_t now_unix_us, size_t limit) override;
  Result<std::optional<int64_t>> NextWake() override;
  Result<size_t> CountParked(std::string_view flow) override;
  Result<std::vector<RunRow>> RunsWaitingFor(std::string_view flow, std::string_view name, std::string_view key,
                                             size_t limit) override;
  Result<std::vector<RunCount>> CountRunsByFlow(const std::vector<RunState>& states, size_t limit) override;
  Result<int64_t> AddRunEvent(const NewRunEvent& event) override;
  Result<std::optional<int64_t>> RunEventOfDelivery(std::string_view flow, std::string_view delivery_id) override;
  Result<std::optional<RunEvent>> TakeRunEvent(int64_t run_id, std::string_view flow, std::string_view name,
                                               std::string_view key, int64_t now_unix_us, int64_t activation_id,
                                               int64_t call_id) override;
  Result<size_t> CountPendingEvents(int64_t run_id) override;
  Result<size_t> CountPendingKeyedEvents(std::string_view flow) override;
  Result<std::vector<RunEvent>> RunEvents(int64_t run_id, size_t limit) override;
  Result<size_t> DropExpiredEvents(int64_t now_unix_us, size_t limit) override;

  // ServeTables
  Result<int64_t> AddToken(std::string_view name, std::string_view token_hash, std::string_view scopes_json,
                           const Actor& by, int64_t at_unix_us) override;
  Result<std::optional<TokenRow>> FindToken(std::string_view token_hash) override;
  Result<void> RevokeToken(std::string_view name, const Actor& by, int64_t at_unix_us) override;
  Result<std::optional<int64_t>> ScheduleMark(std::string_view trigger) override;
  Result<void> SetScheduleMark(std::string_view trigger, int64_t fire_unix_us) override;

 private:
  struct Statements {
    Stmt begin, commit, rollback;
    Stmt insert_activation, insert_pending_activation, max_activation_id, end_activation, renew_leases, unfinished;
    Stmt insert_call, update_call, call_state, calls_to_state, list_by_run;
    Stmt kv_get, kv_put, kv_delete, kv_list_bounded, kv_list_open, kv_usage, kv_value_bytes;
    Stmt keep_text, insert_approval, revoke_approval, insert_event, is_revoked;
    Stmt insert_run, insert_started_run, insert_ended_run, activation_exists, max_run_id, data_version, run_by_key,
        clear_run_key, start_run, end_run, run_state, runs_in_state, count_runs, settle_runs;
    Stmt interrupt_runs, move_run, insert_resolution, insert_kv_audit;
    Stmt runs_due, next_wake, count_parked, count_parked_flow, runs_waiting_for, insert_run_event, next_run_event,
        deliver_run_event, count_pending_events, count_pending_keyed, run_events, drop_expired_events, run_event_of_delivery;
    Stmt insert_token, token_name_unrevoked, token_hash_known, find_token, revoke_token;
    Stmt schedule_mark, set_schedule_mark;
  };
  // One catalog change in a transaction of its own (Approve, Revoke): `body` runs between BEGIN
  // IMMEDIATE and COMMIT, rolled back if it or the commit fails.
  Result<ApprovalRow> InOwnTransaction(const char* what, const std::function<Result<ApprovalRow>()>& body);

  Result<void> Prepare();
  Result<void> BeginBatchIfNone();
  Error StoredNotJson(const std::string& ns) const {
    return JournalError(ErrorCode::kDatabase, path_,
                        "a kv value in namespace " + ns +
                            " is not JSON (was the database changed by hand?); put a JSON value under that key or "
                            "delete it");
  }
  // The write half of CompareAndSwap and Increment, under the write lock they took before reading:
  // checks `limits` against the namespace's usage with `value_json` in place of `old_json`, then
  // writes. Fills `update` (status, value_bytes, usage_after, current_json when written).
  Result<void> StoreChecked(const std::string& ns, const std::string& key, std::optional<uint64_t> old_bytes,
                            const std::string& value_json, const KvLimits& limits, KvUpdate& update);
  // The open batch is usable, and every run it accepted is written (FlushPendingRuns): what any
  // statement that may read or change a run calls first.
  Result<void> CheckBatchUsable();
  Result<void> BatchUsable();  // the first half alone
  // BeginBatchIfNone without writing the pending runs: the path of a run's acceptance and start.
  Result<void> OpenBatchKeepingPending();
  // Writes the runs EnqueueRun accepted and MarkRunStarted did not start, as queued, in the order
  // accepted. A failure loses the batch (the caller answered those runs as accepted).
  Result<void> FlushPendingRuns();
  Result<void> InsertRun(const Stmt& stmt, int64_t id, const NewRun& run);
  void NoteWriteFailure();
  // A run's state under the batch's write lock; nullopt when there is no such run.
  Result<std::optional<RunState>> RunStateOf(int64_t run_id);

  // The one write path: joins (or opens) the batch, binds `args` in order, steps once. On failure
  // it notes whether SQLite dropped the batch and names the file, SQLite's code and `what()`.
  // Returns the number of rows changed.
  template <typename What, typename... Args>
  Result<int> Write(const Stmt& stmt, What&& what, const Args&... args) {
    if (auto r = BeginBatchIfNone(); !r) return r.error();
    return WriteKeepingPending(stmt, what, args...);
  }
  // Write without writing the pending runs first: only for statements that neither read nor change
  // a run's row (an activation's start), and for the pending runs' own inserts.
  template <typename What, typename... Args>
  Result<int> WriteKeepingPending(const Stmt& stmt, What&& what, const Args&... args) {
    if (auto r = OpenBatchKeepingPending(); !r) return r.error();
    Use use(stmt);
    Binder binder(use.get());
    (BindOne(binder, args), ...);
    int rc = binder.rc();
    if (rc == SQLITE_OK) rc = sqlite3_step(use.get());
    if (rc != SQLITE_DONE) {
      NoteWriteFailure();
      return DbError(path_, db_, rc, what());
    }
    return sqlite3_changes(db_);
  }

  const std::string path_;
  sqlite3* db_ = nullptr;
  std::string journal_id_;
  std::unique_ptr<Statements> stmts_;
  sqlite::ReadQueries reads_;
  std::unique_ptr<sqlite::Checkpointer> checkpointer_;  // null when SQLite is built without threads
  bool batch_open_ = false;  // we issued BEGIN and have not committed or rolled back
  // Runs accepted in the open batch and not yet written: the id reserved under the write lock, and
  // the run. Started in the same batch, a run is written once: as running when something reads or
  // changes runs before its end, or at the commit (docs/performance.md, fifth round: not inserted
  // queued and updated); as ended when its end comes first, in the same batch (MarkRunEnded; the
  // seventh round: no update of the row, and it never enters runs_unended). Every other statement
  // writes them first (CheckBatchUsable, BeginBatchIfNone), so nothing reads the store without them.
  struct PendingStart {
    int64_t activation_id = 0;
    int64_t at_unix_us = 0;
    RunBinding binding;  // bound at this first start when its source_hash is set
  };
  struct PendingRun {
    int64_t id = 0;
    NewRun run;
    std::optional<PendingStart> started;  // MarkRunStarted's, not yet written
  };
  struct PendingEnd {  // MarkRunEnded's, for a run started in the same batch
    std::string_view outcome, error_json;
    int64_t at_unix_us = 0;
  };
  // Inserts a pending run as it stands: queued, running (started), or ended with `end` (started).
  Result<void> InsertPendingRun(const PendingRun& p, const PendingEnd* end = nullptr);
  std::vector<PendingRun> pending_runs_;
  // The activations of runs pending in the open batch, not yet written: the id reserved under the
  // write lock (the largest plus one, as the insert would take: activations has no AUTOINCREMENT),
  // the start, and the end when it came in the same batch (EndActivation). Written once, ended, when
  // the run's end is inserted (MarkRunEnded), so the row never enters activations_unfinished;
  // before anything else that may read or change activations or runs, and at the commit at the
  // latest, as they stand (FlushPendingActivations, from FlushPendingRuns): every commit that makes
  // an activation durable writes it, unfinished or ended. Nothing reads the store without them.
  struct PendingActivation {
    int64_t id = 0;
    ActivationStart start;
    int64_t durable = 0;  // the run's, for listed_by_run
    std::optional<ActivationEnd> end;
  };
  std::vector<PendingActivation> pending_activations_;
  Result<void> FlushPendingActivations();
  PendingActivation* FindPendingActivation(int64_t id) {
    for (PendingActivation& p : pending_activations_) {
      if (p.id == id) return &p;
    }
    return nullptr;
  }
  int64_t reserved_run_id_ = 0;  // the last id reserved in the open batch; 0: none yet (read at the next)
  // What this connection knows of the store while no other connection commits (SeenByOthers): the
  // largest run id (0: read it), and the newest approvals read, by kind and name.
  int64_t seen_data_version_ = -1;
  bool version_read_in_batch_ = false;  // seen_data_version_ was read under the open batch's lock
  int64_t known_max_run_id_ = 0;
  // The largest activation id, as known without a read: in the open batch (-1: not known in it;
  // reserved ids and direct inserts keep it), and since this connection's last commit (0: read it).
  int64_t batch_max_activation_id_ = -1;
  int64_t known_max_activation_id_ = 0;
  std::map<std::pair<ApprovalKind, std::string>, std::optional<ApprovalRow>> newest_versions_;
  // Reads PRAGMA data_version; when another connection has committed since the last call, forgets
  // what the members above knew.
  Result<void> ForgetWhatOthersChanged();
  bool batch_lost_ = false;  // SQLite rolled the open batch back on its own; Rollback() clears
};

Result<void> SqliteStore::Open(Durability durability) {
  if (auto made = sqlite::CreatePrivateFileIfMissing(path_); !made) return made.error();
  // No SQLITE_OPEN_CREATE: the file exists now (owner-only) unless its directory does not.
  sqlite::PreferNoMemoryStatistics();
  int rc = sqlite3_open_v2(path_.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string advice = sqlite::AdviceFor(rc);
    std::filesystem::path dir = std::filesystem::path(path_).parent_path();
    if (dir.empty()) dir = ".";
    std::error_code ec;
    if ((rc & 0xff) == SQLITE_CANTOPEN && !std::filesystem::is_directory(dir, ec)) {
      advice = "directory " + dir.string() + " does not exist; create it or choose another --db";
    }
    Error error = DbError(path_, db_, rc, "cannot open", advice);
    error.code = ErrorCode::kIo;
    return error;  // the destructor closes the handle sqlite3_open_v2 may have left
  }
  sqlite3_extended_result_codes(db_, 1);
  sqlite3_busy_timeout(db_, sqlite::kBusyTimeoutMs);
  if (auto r = sqlite::InitializeForWriting(db_, path_, durability); !r) return r;
  auto id = sqlite::ReadJournalId(db_, path_);
  if (!id) return id.error();
  journal_id_ = std::move(*id);
  if (auto r = Prepare(); !r) return r;
  if (auto r = reads_.Prepare(db_, path_, sqlite::kSchemaVersion); !r) return r;
  if (sqlite3_threadsafe() != 0) checkpointer_ = std::make_unique<sqlite::Checkpointer>(path_);
  // Replaces SQLite's automatic checkpoint (which would run inside the commit).
  sqlite3_wal_hook(db_, &sqlite::Checkpointer::OnWalCommit, checkpointer_.get());
  return Ok();
}

Result<void> SqliteStore::Prepare() {
  auto s = std::make_unique<Statements>();
  const struct {
    Stmt* stmt;
    std::string sql;
  } rows[] = {
      {&s->begin, "BEGIN IMMEDIATE"},
      {&s->commit, "COMMIT"},
      {&s->rollback, "ROLLBACK"},
      {&s->insert_activation,
       "INSERT INTO activations(flow, source_hash, manifest_hash, input, start_us, owner_host, owner_pid, "
       "owner_start_ticks, lease_until_us, origin, approval_id, manifest_text_hash, run_id, retry_from, listed_by_run) "
       "VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?, CASE WHEN coalesce(?15, (SELECT durable FROM runs WHERE id=?13)) = 1 "
       "THEN 1 END)"},
      // A run's activation kept pending in the batch that accepted the run (BeginActivation), with
      // the id reserved and its end when that came in the same batch (?17..?22, else NULL and 0).
      {&s->insert_pending_activation,
       "INSERT INTO activations(flow, source_hash, manifest_hash, input, start_us, owner_host, owner_pid, "
       "owner_start_ticks, lease_until_us, origin, approval_id, manifest_text_hash, run_id, retry_from, listed_by_run, "
       "id, end_us, outcome, result, error, cpu_us, logs_dropped) "
       "VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?, CASE WHEN ?15 = 1 THEN 1 END, ?16, ?17, ?18, ?19, ?20, ?21, ?22)"},
      {&s->max_activation_id, "SELECT coalesce(max(id), 0) FROM activations"},
      {&s->list_by_run, "UPDATE activations SET listed_by_run=1 WHERE id=? AND run_id=?"},
      {&s->keep_text, "INSERT INTO texts(hash, body) VALUES(?, ?) ON CONFLICT(hash) DO NOTHING"},
      {&s->insert_approval,
       "INSERT INTO approvals(kind, name, version, source_hash, manifest_text_hash, manifest_hash, approver_uid, "
       "approver_name, approved_us, note) VALUES(?1, ?2, "
       "(SELECT coalesce(max(version), 0) + 1 FROM approvals WHERE kind=?1 AND name=?2), ?3, ?4, ?5, ?6, ?7, ?8, ?9)"},
      {&s->revoke_approval,
       "UPDATE approvals SET revoked_us=?, revoker_uid=?, revoker_name=?, revoke_note=? "
       "WHERE id=? AND revoked_us IS NULL"},
      {&s->insert_event,
       "INSERT INTO approval_events(at_us, kind, approval_id, actor_uid, actor_name, detail) VALUES(?,?,?,?,?,?)"},
      {&s->is_revoked, "SELECT revoked_us IS NOT NULL FROM approvals WHERE id=?"},
      {&s->end_activation,
       "UPDATE activations SET end_us=?, outcome=?, result=?, error=?, cpu_us=?, logs_dropped=? WHERE id=? AND outcome IS NULL"},
      {&s->renew_leases,
       "UPDATE activations SET lease_until_us=? "
       "WHERE outcome IS NULL AND owner_host=? AND owner_pid=? AND owner_start_ticks=?"},
      {&s->unfinished, sqlite::ActivationSelectSql(sqlite::kSchemaVersion) + " WHERE outcome IS NULL ORDER BY id"},
      {&s->insert_call,
       "INSERT INTO calls(activation_id, call_id, name, args, verdict, rule, reason, effect, state, result, error, "
       "start_us, end_us, args_digest, answer_seq, replay) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"},
      {&s->update_call, kSqliteUpdateCallSql},
      {&s->call_state, "SELECT state FROM calls WHERE activation_id=? AND call_id=?"},
      {&s->calls_to_state,
       "UPDATE calls SET state=?, error=coalesce(error, ?), end_us=coalesce(end_us, ?) "
       "WHERE activation_id=? AND state=?"},
      {&s->kv_get, "SELECT value FROM kv WHERE namespace=? AND key=?"},
      {&s->kv_usage, "SELECT bytes, keys FROM kv_usage WHERE namespace=?"},
      {&s->kv_value_bytes, "SELECT length(CAST(value AS BLOB)) FROM kv WHERE namespace=? AND key=?"},
      {&s->kv_put,
       "INSERT INTO kv(namespace, key, value) VALUES(?,?,?) "
       "ON CONFLICT(namespace, key) DO UPDATE SET value=excluded.value"},
      {&s->kv_delete, "DELETE FROM kv WHERE namespace=? AND key=?"},
      {&s->kv_list_bounded, "SELECT key, value FROM kv WHERE namespace=? AND key>=? AND key<? ORDER BY key LIMIT ?"},
      {&s->kv_list_open, "SELECT key, value FROM kv WHERE namespace=? AND key>=? ORDER BY key LIMIT ?"},
      // Both with the id EnqueueRun reserved: queued (FlushPendingRuns), or started in the batch
      // that accepted it (MarkRunStarted), its start's columns as start_run sets them at a first start.
      {&s->insert_run,
       "INSERT INTO runs(id, flow, input, triggered_by, idempotency_key, key_expires_us, state, created_us, "
       "state_detail, durable) VALUES(?,?,?,?,?,?,'queued',?,?,?)"},
      {&s->insert_started_run,
       "INSERT INTO runs(id, flow, input, triggered_by, idempotency_key, key_expires_us, state, created_us, "
       "state_detail, durable, activation_id, started_us, approval_id, manifest_hash, manifest_text_hash, seed, "
       "clock_us, source_hash) VALUES(?,?,?,?,?,?,'running',?,?,?,?,?,?,?,?,?,?,?)"},
      // Started and ended in the batch that accepted it: written once, ended, with what end_run would
      // have set on the running row (the parked run's columns are NULL in a new row).
      {&s->insert_ended_run,
       "INSERT INTO runs(id, flow, input, triggered_by, idempotency_key, key_expires_us, state, created_us, "
       "state_detail, durable, activation_id, started_us, approval_id, manifest_hash, manifest_text_hash, seed, "
       "clock_us, source_hash, outcome, error, ended_us) VALUES(?,?,?,?,?,?,'ended',?,?,?,?,?,?,?,?,?,?,?,?,?,?)"},
      {&s->activation_exists, "SELECT 1 FROM activations WHERE id=?"},
      {&s->max_run_id, "SELECT coalesce(max(id), 0) FROM runs"},
      {&s->data_version, "PRAGMA data_version"},
      // The key's own term `<> ''` lets SQLite use runs_idempotency (a partial index is used only when
      // the query implies its WHERE); without it the run was looked for among every run of the flow.
      {&s->run_by_key,
       "SELECT id, input, coalesce(key_expires_us, 0) FROM runs WHERE flow=? AND idempotency_key=? "
       "AND idempotency_key <> ''"},
      {&s->clear_run_key, "UPDATE runs SET idempotency_key='', key_expires_us=NULL WHERE id=?"},
      // The binding is set once, by the first start: a resume keeps it.
      {&s->start_run,
       "UPDATE runs SET state='running', activation_id=?, started_us=coalesce(started_us, ?), "
       "approval_id=CASE WHEN source_hash IS NULL THEN ? ELSE approval_id END, "
       "manifest_hash=coalesce(manifest_hash, ?), manifest_text_hash=coalesce(manifest_text_hash, ?), "
       "seed=coalesce(seed, ?), clock_us=coalesce(clock_us, ?), source_hash=coalesce(source_hash, ?) "
       "WHERE id=? AND state='queued'"},
      {&s->move_run,
       "UPDATE runs SET state=?, state_detail=coalesce(?, state_detail), resumes=resumes+?, attempt=attempt+?, "
       "wake_us=?, waiting_for=?, waiting_key=? WHERE id=? AND state=?"},
      {&s->runs_due,
       sqlite::RunSelectSql(sqlite::kSchemaVersion) +
           " WHERE wake_us IS NOT NULL AND wake_us <= ? AND state IN ('sleeping', 'waiting', 'retrying') "
           "ORDER BY wake_us, id LIMIT ?"},
      {&s->next_wake,
       "SELECT min(wake_us) FROM runs WHERE wake_us IS NOT NULL AND state IN ('sleeping', 'waiting', 'retrying')"},
      // An OR of equalities, each answered by runs_unended (an IN list would not be: schema.cpp, version 8).
      {&s->count_parked, "SELECT count(*) FROM runs WHERE state='sleeping' OR state='waiting' OR state='retrying'"},
      {&s->count_parked_flow,
       "SELECT count(*) FROM runs WHERE (state='sleeping' OR state='waiting' OR state='retrying') AND flow=?"},
      {&s->runs_waiting_for,
       sqlite::RunSelectSql(sqlite::kSchemaVersion) +
           " WHERE flow=? AND waiting_for=? AND coalesce(waiting_key, '')=? AND state='waiting' ORDER BY id LIMIT ?"},
      {&s->insert_run_event,
       "INSERT INTO run_events(run_id, flow, name, event_key, payload, sender, received_us, expires_us, delivery_id) "
       "VALUES(?,?,?,?,?,?,?,?,?) ON CONFLICT(flow, delivery_id) WHERE delivery_id <> '' DO NOTHING"},
      {&s->run_event_of_delivery, "SELECT id FROM run_events WHERE flow=? AND delivery_id=? AND delivery_id <> ''"},
      // Sent to the run, or keyed for its flow (only when the wait names a key): the oldest first.
      {&s->next_run_event,
       "SELECT id, coalesce(run_id, 0), flow, name, event_key, payload, sender, received_us, expires_us FROM run_events "
       "WHERE delivered_us IS NULL AND name=?2 AND expires_us > ?5 AND "
       "(run_id=?1 OR (?4 <> '' AND run_id IS NULL AND flow=?3 AND event_key=?4)) ORDER BY id LIMIT 1"},
      {&s->deliver_run_event,
       "UPDATE run_events SET run_id=?, delivered_activation=?, delivered_call=?, delivered_us=? "
       "WHERE id=? AND delivered_us IS NULL"},
      {&s->count_pending_events, "SELECT count(*) FROM run_events WHERE run_id=? AND delivered_us IS NULL"},
      {&s->count_pending_keyed,
       "SELECT count(*) FROM run_events WHERE run_id IS NULL AND flow=? AND delivered_us IS NULL"},
      {&s->run_events,
       "SELECT id, coalesce(run_id, 0), flow, name, event_key, payload, sender, received_us, expires_us, "
       "coalesce(delivered_activation, 0), coalesce(delivered_call, 0), delivered_us FROM run_events "
       "WHERE run_id=? ORDER BY id LIMIT ?"},
      {&s->drop_expired_events,
       "DELETE FROM run_events WHERE id IN (SELECT id FROM run_events WHERE delivered_us IS NULL AND expires_us <= ? "
       "ORDER BY expires_us LIMIT ?)"},
      {&s->insert_kv_audit,
       "INSERT INTO kv_audit(at_us, actor_uid, actor_name, reason, namespace, key, op, value_sha256, value_bytes, "
       "existed) VALUES(?,?,?,?,?,?,?,?,?,?)"},
      {&s->insert_resolution,
       "INSERT INTO call_resolutions(run_id, activation_id, call_id, kind, value, actor_uid, actor_name, at_us, note) "
       "VALUES(?,?,?,?,?,?,?,?,?)"},
      {&s->end_run,
       "UPDATE runs SET state='ended', outcome=?, error=?, ended_us=?, wake_us=NULL, waiting_for=NULL, waiting_key=NULL "
       "WHERE id=? AND state=?"},
      {&s->run_state, "SELECT state FROM runs WHERE id=?"},
      {&s->runs_in_state, sqlite::RunSelectSql(sqlite::kSchemaVersion) + " WHERE state=? ORDER BY id LIMIT ?"},
      {&s->count_runs, "SELECT count(*) FROM runs WHERE state=?"},
      // The running runs come from runs_unended, each activation by its primary key. A durable run
      // whose activation was abandoned waits to be resumed; every other one ends with its activation.
      {&s->interrupt_runs,
       "UPDATE runs SET state='interrupted', state_detail=json_object('interrupted_us', ?1, 'activation', a.id) "
       "FROM activations a WHERE a.id=runs.activation_id AND runs.state='running' AND runs.durable=1 "
       "AND a.outcome='abandoned'"},
      {&s->settle_runs,
       "UPDATE runs SET state='ended', outcome=a.outcome, error=a.error, ended_us=coalesce(a.end_us, ?) "
       "FROM activations a WHERE a.id=runs.activation_id AND runs.state='running' AND a.outcome IS NOT NULL"},
      {&s->insert_token,
       "INSERT INTO tokens(name, hash, scopes, creator_uid, creator_name, created_us) VALUES(?,?,?,?,?,?)"},
      {&s->token_name_unrevoked, "SELECT id FROM tokens WHERE name=? AND revoked_us IS NULL"},
      {&s->token_hash_known, "SELECT name FROM tokens WHERE hash=?"},
      {&s->find_token, std::string(sqlite::kTokenSelectSql) + " WHERE hash=? AND revoked_us IS NULL"},
      {&s->revoke_token,
       "UPDATE tokens SET revoked_us=?, revoker_uid=?, revoker_name=? WHERE name=? AND revoked_us IS NULL"},
      {&s->schedule_mark, "SELECT fire_us FROM schedule_marks WHERE trigger_name=?"},
      {&s->set_schedule_mark,
       "INSERT INTO schedule_marks(trigger_name, fire_us) VALUES(?,?) "
       "ON CONFLICT(trigger_name) DO UPDATE SET fire_us=excluded.fire_us"},
  };
  for (const auto& row : rows) {
    const int rc = sqlite::Prepare(db_, row.sql, row.stmt);
    if (rc != SQLITE_OK) return DbError(path_, db_, rc, "cannot prepare \"" + row.sql + "\"");
  }
  stmts_ = std::move(s);
  return Ok();
}

Result<SqliteSettings> SqliteStore::Settings() {
  SqliteSettings settings;
  int64_t synchronous = 0, busy = 0, version = 0, fk = 0;
  int rc = sqlite::QueryText(db_, "PRAGMA journal_mode", &settings.journal_mode);
  if (rc == SQLITE_OK) rc = sqlite::QueryInt(db_, "PRAGMA synchronous", &synchronous);
  if (rc == SQLITE_OK) rc = sqlite::QueryInt(db_, "PRAGMA busy_timeout", &busy);
  if (rc == SQLITE_OK) rc = sqlite::QueryInt(db_, "PRAGMA user_version", &version);
  if (rc == SQLITE_OK) rc = sqlite::QueryInt(db_, "PRAGMA foreign_keys", &fk);
  if (rc != SQLITE_OK) return DbError(path_, db_, rc, "cannot read the connection settings");
  settings.synchronous = static_cast<int>(synchronous);
  settings.busy_timeout_ms = static_cast<int>(busy);
  settings.schema_version = static_cast<int>(version);
  settings.foreign_keys = fk != 0;
  return settings;
}

std::string SqliteStore::ForFlow(const Error& error) const {
  std::string message = error.message;
  const std::string prefix = "journal " + path_ + ": ";
  if (message.rfind(prefix, 0) == 0) message.erase(0, prefix.size());
  for (size_t at = message.find(path_); !path_.empty() && at != std::string::npos; at = message.find(path_, at)) {
    message.replace(at, path_.size(), "the journal");
  }
  return message;
}

Result<void> SqliteStore::Check() {
  if (access(path_.c_str(), W_OK) != 0) {
    return JournalError(ErrorCode::kIo, path_, std::string("is not writable: ") + std::strerror(errno) +
                                                   "; give the daemon's user write access to it and its directory");
  }
  return CheckBatchUsable();
}

Result<void> SqliteStore::CheckBatchUsable() {
  if (auto r = BatchUsable(); !r) return r;
  return FlushPendingRuns();
}

Result<void> SqliteStore::FlushPendingActivations() {
  if (pending_activations_.empty()) return Ok();
  std::vector<PendingActivation> activations;
  activations.swap(pending_activations_);
  for (const PendingActivation& p : activations) {
    const ActivationStart& a = p.start;
    const ActivationEnd* e = p.end ? &*p.end : nullptr;
    auto written = WriteKeepingPending(
        stmts_->insert_pending_activation,
        [&] { return "cannot record the start of activation " + std::to_string(p.id) + " of flow " + a.flow; }, a.flow,
        a.source_hash, a.manifest_hash, std::string(), a.start_unix_us, a.owner.host, a.owner.pid,
        a.owner.start_ticks, a.lease_until_unix_us, std::string(OriginName(a.origin)),
        a.approval_id > 0 ? std::optional<int64_t>(a.approval_id) : std::optional<int64_t>(),
        OrNull{a.manifest_text_hash}, std::optional<int64_t>(a.run_id),
        a.retry_from_call > 0 ? std::optional<int64_t>(a.retry_from_call) : std::optional<int64_t>(), p.durable, p.id,
        e ? std::optional<int64_t>(e->end_unix_us) : std::optional<int64_t>(),
        OrNull{e ? std::string_view(OutcomeName(e->outcome)) : std::string_view()},
        OrNull{e ? std::string_view(e->result_json) : std::string_view()},
        OrNull{e ? std::string_view(e->error_json) : std::string_view()},
        e ? std::optional<int64_t>(e->cpu_us) : std::optional<int64_t>(), e ? e->logs_dropped : int64_t{0});
    if (!written) {
      // Its start was answered (the worker runs it): nothing of this batch may commit.
      batch_lost_ = true;
      return written.error();
    }
  }
  return Ok();
}

Result<void> SqliteStore::FlushPendingRuns() {
  // The activations first: a started run's row refers to its activation's.
  if (auto flushed = FlushPendingActivations(); !flushed) return flushed;
  if (pending_runs_.empty()) return Ok();
  std::vector<PendingRun> runs;
  runs.swap(pending_runs_);
  for (const PendingRun& p : runs) {
    if (auto inserted = InsertPendingRun(p); !inserted) {
      // Its acceptance was answered (or will be, at the commit): nothing of this batch may commit.
      batch_lost_ = true;
      return inserted;
    }
  }
  return Ok();
}

Result<void> SqliteStore::InsertPendingRun(const PendingRun& p, const PendingEnd* end) {
  if (!p.started) return InsertRun(stmts_->insert_run, p.id, p.run);
  const std::string id = std::to_string(p.id);
  const NewRun& r = p.run;
  const PendingStart& s = *p.started;
  const BindingColumns c(s.binding);
  const std::optional<int64_t> expires = KeyExpires(r);
  Result<int> written =
      end ? WriteKeepingPending(stmts_->insert_ended_run, [&] { return "cannot record the end of run " + id; }, p.id,
                                r.flow, r.input_json, r.trigger, r.idempotency_key, expires, r.created_unix_us,
                                OrNull{r.state_detail}, int64_t{r.durable ? 1 : 0}, s.activation_id, s.at_unix_us,
                                c.approval, c.manifest_hash, c.manifest_text_hash, c.seed, c.clock, c.source_hash,
                                std::string(end->outcome), OrNull{end->error_json}, end->at_unix_us)
          : WriteKeepingPending(stmts_->insert_started_run, [&] { return "cannot record the start of run " + id; },
                                p.id, r.flow, r.input_json, r.trigger, r.idempotency_key, expires, r.created_unix_us,
                                OrNull{r.state_detail}, int64_t{r.durable ? 1 : 0}, s.activation_id, s.at_unix_us,
                                c.approval, c.manifest_hash, c.manifest_text_hash, c.seed, c.clock, c.source_hash);
  if (!written) return written.error();
  return Ok();
}

Result<void> SqliteStore::InsertRun(const Stmt& stmt, int64_t id, const NewRun& run) {
  auto inserted = WriteKeepingPending(stmt, [&] { return "cannot record run " + std::to_string(id) + " of flow " + run.flow; },
                                      id, run.flow, run.input_json, run.trigger, run.idempotency_key, KeyExpires(run),
                                      run.created_unix_us, OrNull{run.state_detail}, int64_t{run.durable ? 1 : 0});
  if (!inserted) return inserted.error();
  return Ok();
}

Result<void> SqliteStore::ForgetWhatOthersChanged() {
  // Under the batch's write lock no other connection commits: once read in a batch, it holds.
  if (batch_open_ && version_read_in_batch_) return Ok();
  Use use(stmts_->data_version);
  const int rc = sqlite3_step(use.get());
  if (rc != SQLITE_ROW) return DbError(path_, db_, rc, "cannot read the data version");
  const int64_t version = sqlite3_column_int64(use.get(), 0);
  version_read_in_batch_ = batch_open_;
  if (version != seen_data_version_) {
    seen_data_version_ = version;
    known_max_run_id_ = 0;
    known_max_activation_id_ = 0;
    newest_versions_.clear();
  }
  return Ok();
}

Result<std::optional<ApprovalRow>> SqliteStore::NewestVersion(ApprovalKind kind, const std::string& name) {
  if (auto r = ForgetWhatOthersChanged(); !r) return r.error();
  auto key = std::make_pair(kind, name);
  if (auto it = newest_versions_.find(key); it != newest_versions_.end()) return it->second;
  auto row = reads_.NewestVersion(kind, name);
  if (!row) return row;
  // Bounded by the names asked for; a daemon asks for its flows' few names.
  if (newest_versions_.size() >= 1024) newest_versions_.clear();
  newest_versions_.emplace(std::move(key), *row);
  return row;
}

Result<void> SqliteStore::BatchUsable() {
  if (batch_open_ && !batch_lost_ && sqlite3_get_autocommit(db_) != 0) batch_lost_ = true;
  if (batch_lost_) {
    return JournalError(ErrorCode::kDatabase, path_,
                        "the open batch was rolled back by SQLite after an earlier error; call Rollback() and fail "
                        "every answer that depended on the batch");
  }
  return Ok();
}

Result<void> SqliteStore::BeginBatchIfNone() {
  if (auto r = OpenBatchKeepingPending(); !r) return r;
  return FlushPendingRuns();
}

Result<void> SqliteStore::OpenBatchKeepingPending() {
  if (auto r = BatchUsable(); !r) return r;
  if (batch_open_) return Ok();
  Use use(stmts_->begin);
  const int rc = sqlite3_step(use.get());
  if (rc != SQLITE_DONE) return DbError(path_, db_, rc, "cannot start a batch");
  batch_open_ = true;
  version_read_in_batch_ = false;
  return Ok();
}

void SqliteStore::NoteWriteFailure() {
  // A failed statement (constraint, too big) undoes only itself; disk full, I/O errors and
  // out-of-memory can make SQLite roll back the whole transaction.
  if (batch_open_ && sqlite3_get_autocommit(db_) != 0) batch_lost_ = true;
}

Result<void> SqliteStore::Commit() {
  if (auto r = CheckBatchUsable(); !r) return r;  // the accepted runs not started are written queued
  if (!batch_open_) return Ok();
  Use use(stmts_->commit);
  const int rc = sqlite3_step(use.get());
  if (rc != SQLITE_DONE) {
    NoteWriteFailure();
    return DbError(path_, db_, rc, "cannot commit the batch",
                   std::string(sqlite::AdviceFor(rc)) + "; call Rollback() and answer nothing from this batch");
  }
  batch_open_ = false;
  // Every id reserved is written now (FlushPendingRuns, MarkRunStarted): the largest is this one.
  if (reserved_run_id_ > known_max_run_id_) known_max_run_id_ = reserved_run_id_;
  reserved_run_id_ = 0;
  if (batch_max_activation_id_ >= 0) known_max_activation_id_ = batch_max_activation_id_;
  batch_max_activation_id_ = -1;
  version_read_in_batch_ = false;
  return Ok();
}

Result<void> SqliteStore::Rollback() {
  pending_runs_.clear();
  pending_activations_.clear();
  reserved_run_id_ = 0;
  batch_max_activation_id_ = -1;
  known_max_activation_id_ = 0;  // ids this batch took are free again: read the largest anew
  version_read_in_batch_ = false;
  batch_open_ = false;
  batch_lost_ = false;
  if (sqlite3_get_autocommit(db_) != 0) return Ok();  // nothing open, or SQLite already rolled back
  Use use(stmts_->rollback);
  const int rc = sqlite3_step(use.get());
  if (rc != SQLITE_DONE) return DbError(path_, db_, rc, "cannot roll back the batch");
  return Ok();
}

Result<int64_t> SqliteStore::BeginActivation(const ActivationStart& a) {
  // An activation's start neither reads nor changes a run's row: the run it starts stays pending,
  // to be written once, started (MarkRunStarted). A durable run's activation is listed in
  // activations_by_run (schema.cpp, version 10): whether the run is durable is known here for a
  // run pending in this batch, else the insert reads it from the run's row. An activation of no run
  // is not listed: bound as such, the insert reads no row of runs.
  std::optional<int64_t> durable;
  if (a.run_id <= 0) {
    durable = 0;
  } else {
    for (const PendingRun& p : pending_runs_) {
      if (p.id == a.run_id) durable = p.run.durable ? 1 : 0;
    }
  }
  if (a.run_id > 0 && durable) {
    // The activation of a run pending in this batch: kept pending too (PendingActivation), its id
    // reserved now, under the write lock this batch holds until it commits.
    if (auto r = OpenBatchKeepingPending(); !r) return r.error();
    // The largest id plus one (the insert's own choice, as activations has no AUTOINCREMENT): known
    // without a read while no other connection has committed since this one last did.
    if (batch_max_activation_id_ < 0) {
      if (auto r = ForgetWhatOthersChanged(); !r) return r.error();
      if (known_max_activation_id_ > 0) batch_max_activation_id_ = known_max_activation_id_;
    }
    if (batch_max_activation_id_ < 0) {
      Use use(stmts_->max_activation_id);
      const int rc = sqlite3_step(use.get());
      if (rc != SQLITE_ROW) return DbError(path_, db_, rc, "cannot reserve an id for an activation of flow " + a.flow);
      batch_max_activation_id_ = sqlite3_column_int64(use.get(), 0);
    }
    const int64_t id = ++batch_max_activation_id_;
    pending_activations_.push_back({id, a, *durable, std::nullopt});
    return id;
  }
  // Any pending one first: the insert below takes the largest id plus one.
  if (auto flushed = FlushPendingActivations(); !flushed) return flushed.error();
  auto written = WriteKeepingPending(
      stmts_->insert_activation, [&] { return "cannot record the start of an activation of flow " + a.flow; }, a.flow,
      a.source_hash, a.manifest_hash, a.run_id > 0 ? std::string() : a.input_json, a.start_unix_us, a.owner.host,
      a.owner.pid, a.owner.start_ticks, a.lease_until_unix_us, std::string(OriginName(a.origin)),
      a.approval_id > 0 ? std::optional<int64_t>(a.approval_id) : std::optional<int64_t>(),
      OrNull{a.manifest_text_hash}, a.run_id > 0 ? std::optional<int64_t>(a.run_id) : std::optional<int64_t>(),
      a.retry_from_call > 0 ? std::optional<int64_t>(a.retry_from_call) : std::optional<int64_t>(), durable);
  if (!written) return written.error();
  // Given the largest id plus one: the largest now.
  const auto id = static_cast<int64_t>(sqlite3_last_insert_rowid(db_));
  batch_max_activation_id_ = id;
  return id;
}

Result<void> SqliteStore::RecordCall(const CallRecord& c) {
  auto written = Write(
      stmts_->insert_call,
      [&] {
        return "cannot record host call " + c.name + " (call id " + std::to_string(c.call_id) + ") of activation " +
               std::to_string(c.activation_id);
      },
      c.activation_id, c.call_id, c.name, c.args_json, VerdictName(c.decision.verdict), c.decision.rule,
      c.decision.reason, EffectName(c.effect), CallStateName(c.state), OrNull{c.result_json}, OrNull{c.error_json},
      c.start_unix_us, c.end_unix_us, OrNull{c.args_digest}, c.answer_seq, OrNull{c.replay_json});
  if (!written) return written.error();
  return Ok();
}

Result<void> SqliteStore::UpdateCall(const CallUpdate& u) {
  const std::vector<const char*> from = AllowedFrom(u.state);
  auto what = [&] {
    return "cannot move host call " + std::to_string(u.call_id) + " of activation " +
           std::to_string(u.activation_id) + " to " + CallStateName(u.state);
  };
  auto from_at = [&](size_t i) { return from.empty() ? "" : from[std::min(i, from.size() - 1)]; };
  auto changed = Write(stmts_->update_call, what, CallStateName(u.state), OrNull{u.result_json},
                       OrNull{u.error_json}, u.end_unix_us, u.answer_seq, OrNull{u.replay_json}, u.activation_id,
                       u.call_id, from_at(0), from_at(1), from_at(2));
  if (!changed) return changed.error();
  if (*changed == 1) return Ok();
  Use use(stmts_->call_state);
  int rc = Binder(use.get()).Int(u.activation_id).Int(u.call_id).rc();
  if (rc == SQLITE_OK) rc = sqlite3_step(use.get());
  if (rc == SQLITE_ROW) {
    return JournalError(ErrorCode::kInternal, path_,
                        "host call " + std::to_string(u.call_id) + " of activation " +
                            std::to_string(u.activation_id) + " is " + sqlite::ColumnText(use.get(), 0) +
                            " and cannot become " + CallStateName(u.state) + " (a bug in the caller)");
  }
  if (rc != SQLITE_DONE) return DbError(path_, db_, rc, what());
  return JournalError(ErrorCode::kNotFound, path_,
                      "has no record of host call " + std::to_string(u.call_id) + " of activation " +
                          std::to_string(u.activation_id) + " (a bug in the caller)");
}

Result<void> SqliteStore::EndActivation(const ActivationEnd& e) {
  // An activation's end neither reads nor changes a run's row: a run started in this batch stays
  // pending, to be written once with its own end (MarkRunEnded), which follows. A pending activation
  // keeps its end, to be written with its start.
  if (PendingActivation* p = FindPendingActivation(e.activation_id)) {
    if (auto r = OpenBatchKeepingPending(); !r) return r.error();
    if (!p->end) {
      p->end = e;
      return Ok();
    }
  }
  auto changed = WriteKeepingPending(
      stmts_->end_activation, [&] { return "cannot record the end of activation " + std::to_string(e.activation_id); },
      e.end_unix_us, OutcomeName(e.outcome), OrNull{e.result_json}, OrNull{e.error_json}, e.cpu_us, e.logs_dropped,
      e.activation_id);
  if (!changed) return changed.error();
  if (*changed != 1) {
    return JournalError(ErrorCode::kNotFound, path_,
                        "no unfinished activation " + std::to_string(e.activation_id) +
                            " to end (unknown id, or already ended); a bug in the caller");
  }
  return Ok();
}

Result<void> SqliteStore::RenewLeases(const ActivationOwner& o, int64_t until_unix_us) {
  auto changed = Write(
      stmts_->renew_leases, [&] { return "cannot renew the leases of pid " + std::to_string(o.pid); }, until_unix_us,
      o.host, o.pid, o.start_ticks);
  if (!changed) return changed.error();
  return Ok();
}

Result<RecoveryReport> SqliteStore::RecoverAbandoned(const ActivationOwner& self, int64_t now_unix_us) {
  if (auto r = Commit(); !r) return r.error();
  // Under the write lock from the first read, so two parents recovering at once close each
  // activation once.
  if (auto r = BeginBatchIfNone(); !r) return r.error();
  std::vector<ActivationRow> gone;
  {
    Use use(stmts_->unfinished);
    int rc;
    while ((rc = sqlite3_step(use.get())) == SQLITE_ROW) {
      ActivationRow row = sqlite::ReadActivationRow(use.get());
      if (OwnerIsGone(row.owner, row.lease_until_unix_us, self, now_unix_us)) gone.push_back(std::move(row));
    }
    if (rc != SQLITE_DONE) {
      Error error = DbError(path_, db_, rc, "cannot read the unfinished activations");
      (void)Rollback();
      return error;
    }
  }
  RecoveryReport report;
  const std::string unknown_error = UnknownCallErrorJson();
  const std::string abandoned_error = AbandonedCallErrorJson();
  for (const ActivationRow& a : gone) {
    const std::string error = AbandonedActivationErrorJson(a.owner, self, now_unix_us);
    const std::string id = std::to_string(a.id);
    auto ended = Write(
        stmts_->end_activation, [&] { return "cannot close abandoned activation " + id; }, now_unix_us,
        OutcomeName(Outcome::kAbandoned), OrNull{}, error, int64_t{0}, a.logs_dropped, a.id);
    auto unknown = ended ? Write(
                               stmts_->calls_to_state, [&] { return "cannot close the calls of activation " + id; },
                               "unknown", unknown_error, now_unix_us, a.id, "started")
                         : Result<int>(ended.error());
    auto abandoned = unknown ? Write(
                                   stmts_->calls_to_state, [&] { return "cannot close the calls of activation " + id; },
                                   "abandoned", abandoned_error, now_unix_us, a.id, "decided")
                             : Result<int>(unknown.error());
    if (!abandoned) {
      (void)Rollback();
      return abandoned.error();
    }
    if (*ended == 1) report.abandoned_activations.push_back(a.id);
    report.unknown_calls += static_cast<size_t>(*unknown);
    report.abandoned_calls += static_cast<size_t>(*abandoned);
  }
  if (auto r = Commit(); !r) {
    (void)Rollback();
    return r.error();
  }
  return report;
}

Result<std::optional<std::string>> SqliteStore::Get(const std::string& ns, const std::string& key) {
  if (auto r = CheckBatchUsable(); !r) return r.error();
  Use use(stmts_->kv_get);
  int rc = Binder(use.get()).Text(ns).Text(key).rc();
  if (rc == SQLITE_OK) rc = sqlite3_step(use.get());
  if (rc == SQLITE_ROW) return std::optional<std::string>(sqlite::ColumnText(use.get(), 0));
  if (rc == SQLITE_DONE) return std::optional<std::string>();
  return DbError(path_, db_, rc, "cannot read kv key in namespace " + ns);
}

Result<void> SqliteStore::Put(const std::string& ns, const std::string& key, const std::string& value_json) {
  auto written = Write(stmts_->kv_put, [&] { return "cannot write kv key in namespace " + ns; }, ns, key, value_json);
  if (!written) return written.error();
  return Ok();
}

Result<bool> SqliteStore::Delete(const std::string& ns, const std::string& key) {
  auto changed = Write(stmts_->kv_delete, [&] { return "cannot delete kv key in namespace " + ns; }, ns, key);
  if (!changed) return changed.error();
  return *changed > 0;
}

Result<KvList> SqliteStore::List(const std::string& ns, const std::string& prefix, size_t limit, size_t max_bytes) {
  if (auto r = CheckBatchUsable(); !r) return r.error();
  KvList out;
  if (limit == 0) return out;
  // A byte range, not LIKE/GLOB: no wildcard in a key can widen the match, and the primary key
  // index serves it directly.
  const std::optional<std::string> upper = sqlite::PrefixSuccessor(prefix);
  Use use(upper ? stmts_->kv_list_bounded : stmts_->kv_list_open);
  Binder bind(use.get());
  bind.Text(ns).Text(prefix);
  if (upper) bind.Text(*upper);
  int rc = bind.Int(sqlite::LimitParam(limit)).rc();
  if (rc == SQLITE_OK) {
    size_t bytes = 0;
    while ((rc = sqlite3_step(use.get())) == SQLITE_ROW) {
      const size_t size = static_cast<size_t>(sqlite3_column_bytes(use.get(), 0)) +
                          static_cast<size_t>(sqlite3_column_bytes(use.get(), 1));
      if (bytes + size > max_bytes) {
        out.stopped_at_bytes = true;
        rc = SQLITE_DONE;
        break;
      }
      bytes += size;
      out.entries.push_back(KvEntry{sqlite::ColumnText(use.get(), 0), sqlite::ColumnText(use.get(), 1)});
    }
  }
  if (rc != SQLITE_DONE) return DbError(path_, db_, rc, "cannot list kv keys in namespace " + ns);
  return out;
}

Result<KvUsage> SqliteStore::Usage(const std::string& ns) {
  if (auto r = CheckBatchUsable(); !r) return r.error();
  Use use(stmts_->kv_usage);
  int rc = Binder(use.get()).Text(ns).rc();
  KvUsage usage;
  if (rc == SQLITE_OK) rc = sqlite3_step(use.get());
  if (rc == SQLITE_ROW) {
    usage.bytes = static_cast<uint64_t>(sqlite3_column_int64(use.get(), 0));
    usage.keys = static_cast<uint64_t>(sqlite3_column_int64(use.get(), 1));
    return usage;
  }
  if (rc == SQLITE_DONE) return usage;
  return DbError(path_, db_, rc, "cannot read the usage of kv namespace " + ns);
}

Result<std::optional<uint64_t>> SqliteStore::ValueBytes(const std::string& ns, const std::string& key) {
  if (auto r = CheckBatchUsable(); !r) return r.error();
  Use use(stmts_->kv_value_bytes);
  int rc = Binder(use.get()).Text(ns).Text(key).rc();
  if (rc == SQLITE_OK) rc = sqlite3_step(use.get());
  if (rc == SQLITE_ROW) return std::optional<uint64_t>(static_cast<uint64_t>(sqlite3_column_int64(use.get(), 0)));
  if (rc == SQLITE_DONE) return std::optional<uint64_t>();
  return DbError(path_, db_, rc, "cannot read kv key in namespace " + ns);
}

Result<void> SqliteStore::StoreChecked(const std::string& ns, const std::string& key,
                                       std::optional<uint64_t> old_bytes, const std::string& value_json,
                                       const KvLimits& limits, KvUpdate& update) {
  update.value_bytes = value_json.size();
  if (update.value_bytes > limits.max_value_bytes) {
    update.status = KvUpdate::Status::kValueTooLarge;
    return Ok();
  }
  auto usage = Usage(ns);
  if (!usage) return usage.error();
  const uint64_t freed = old_bytes ? key.size() + *old_bytes : 0;
  update.usage_after.bytes = usage->bytes - std::min(usage->bytes, freed) + key.size() + value_json.size();
  update.usage_after.keys = usage->keys + (old_bytes ? 0 : 1);
  if (update.usage_after.bytes > limits.quota_bytes || update.usage_after.keys > limits.quota_keys) {
    update.status = KvUpdate::Status::kOverQuota;
    return Ok();
  }
  if (auto put = Put(ns, key, value_json); !put) return put.error();
  update.status = KvUpdate::Status::kWritten;
  update.current_json = value_json;
  return Ok();
}

std::optional<uint64_t> SizeOf(const std::optional<std::string>& text) {
  return text ? std::optional<uint64_t>(text->size()) : std::nullopt;
}

Result<KvUpdate> SqliteStore::PutWithin(const std::string& ns, const std::string& key, const std::string& value_json,
                                        const KvLimits& limits) {
  KvUpdate update;
  if (value_json.size() > limits.max_value_bytes) {
    update.status = KvUpdate::Status::kValueTooLarge;
    update.value_bytes = value_json.size();
    return update;
  }
  // The write lock first, as in CompareAndSwap: the usage read below is what the write changes.
  if (auto r = BeginBatchIfNone(); !r) return r.error();
  auto old = ValueBytes(ns, key);
  if (!old) return old.error();
  if (auto r = StoreChecked(ns, key, *old, value_json, limits, update); !r) return r.error();
  update.current_json.reset();
  return update;
}

Result<KvUpdate> SqliteStore::CompareAndSwap(const std::string& ns, const std::string& key,
                                             const std::optional<std::string>& expected_json,
                                             const std::string& value_json, const KvLimits& limits) {
  const Json expected = expected_json ? Json::parse(*expected_json, nullptr, /*allow_exceptions=*/false) : Json();
  if (expected.is_discarded() || Json::parse(value_json, nullptr, false).is_discarded()) {
    return MakeError(ErrorCode::kInvalidArgument, "CompareAndSwap of kv key in namespace " + ns +
                                                      ": the expected value or the new value is not JSON (a bug in "
                                                      "the caller, which must validate both)");
  }
  KvUpdate update;
  if (value_json.size() > limits.max_value_bytes) {
    update.status = KvUpdate::Status::kValueTooLarge;
    update.value_bytes = value_json.size();
    return update;
  }
  // The write lock first: from here until the batch commits no other connection, in this process
  // or another, can write, so what we read is what we replace. (In WAL mode BEGIN IMMEDIATE also
  // starts the read at the newest commit.)
  if (auto r = BeginBatchIfNone(); !r) return r.error();
  auto stored = Get(ns, key);
  if (!stored) return stored.error();
  Json current;  // null for an absent key
  if (stored->has_value()) {
    current = Json::parse(**stored, nullptr, /*allow_exceptions=*/false);
    if (current.is_discarded()) return StoredNotJson(ns);
  }
  if (!KvValuesEqual(current, expected)) {
    update.status = KvUpdate::Status::kMismatch;
    update.current_json = *stored;
    return update;
  }
  if (auto r = StoreChecked(ns, key, SizeOf(*stored), value_json, limits, update); !r) return r.error();
  if (update.status != KvUpdate::Status::kWritten) update.current_json = *stored;
  return update;
}

Result<KvUpdate> SqliteStore::Increment(const std::string& ns, const std::string& key, int64_t by,
                                        const KvLimits& limits) {
  if (by > kKvMaxSafeInteger || by < -kKvMaxSafeInteger) {
    return MakeError(ErrorCode::kInvalidArgument, "Increment of kv key in namespace " + ns + " by " +
                                                      std::to_string(by) + ": outside +-" +
                                                      std::to_string(kKvMaxSafeInteger) + " (a bug in the caller)");
  }
  // The write lock before the read, as in CompareAndSwap.
  if (auto r = BeginBatchIfNone(); !r) return r.error();
  auto stored = Get(ns, key);
  if (!stored) return stored.error();
  KvUpdate update;
  update.current_json = *stored;
  int64_t now = 0;  // an absent key, or a stored null (which kv.get cannot tell from absent), counts as 0
  if (stored->has_value()) {
    const Json current = Json::parse(**stored, nullptr, /*allow_exceptions=*/false);
    if (current.is_discarded()) return StoredNotJson(ns);
    const std::optional<int64_t> n = current.is_null() ? std::optional<int64_t>(0) : KvIntegerValue(current);
    if (!n) {
      update.status = KvUpdate::Status::kNotAnInteger;
      return update;
    }
    now = *n;
  }
  if (now > kKvMaxSafeInteger || now < -kKvMaxSafeInteger) {
    update.status = KvUpdate::Status::kOutOfRange;
    return update;
  }
  const int64_t sum = now + by;  // both within +-(2^53 - 1): no int64 overflow
  if (sum > kKvMaxSafeInteger || sum < -kKvMaxSafeInteger) {
    update.status = KvUpdate::Status::kOutOfRange;
    return update;
  }
  if (auto r = StoreChecked(ns, key, SizeOf(*stored), std::to_string(sum), limits, update); !r) return r.error();
  return update;
}

// ---- Catalog: the operator's approvals ----

Result<void> SqliteStore::KeepText(const std::string& hash, std::string_view text) {
  if (hash.rfind("sha256:", 0) != 0) {
    return MakeError(ErrorCode::kInvalidArgument, "a kept text's hash must be \"sha256:<hex>\" (got " + hash + ")");
  }
  auto written = Write(stmts_->keep_text, [&] { return "cannot keep the text " + hash; }, hash, text);
  if (!written) return written.error();
  return Ok();
}

Result<bool> SqliteStore::IsRevoked(int64_t approval_id) {
  if (auto r = CheckBatchUsable(); !r) return r.error();
  Use use(stmts_->is_revoked);
  int rc = Binder(use.get()).Int(approval_id).rc();
  if (rc == SQLITE_OK) rc = sqlite3_step(use.get());
  if (rc == SQLITE_ROW) return sqlite3_column_int64(use.get(), 0) != 0;
  if (rc == SQLITE_DONE) {
    return JournalError(ErrorCode::kNotFound, path_, "has no approved version with id " + std::to_string(approval_id));
  }
  return DbError(path_, db_, rc, "cannot read whether approval " + std::to_string(approval_id) + " is revoked");
}

Result<ApprovalRow> SqliteStore::InOwnTransaction(const char* what, const std::function<Result<ApprovalRow>()>& body) {
  if (batch_open_) {
    return MakeError(ErrorCode::kInvalidArgument,
                     std::string(what) + ": a batch is open; commit it first (approvals commit on their own)");
  }
  if (auto r = BeginBatchIfNone(); !r) return r.error();
  // This connection's own approval or revocation does not move PRAGMA data_version: the newest
  // versions it knew are forgotten here, whatever the outcome.
  newest_versions_.clear();
  Result<ApprovalRow> done = body();
  if (done) {
    if (auto c = Commit(); !c) done = c.error();
  }
  if (!done) (void)Rollback();
  return done;
}

Result<ApprovalRow> SqliteStore::Approve(const NewApproval& a) {
  const bool flow = a.kind == ApprovalKind::kFlow;
  if (flow != a.source.has_value()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     flow ? "approve: a flow needs its source" : "approve: a codemode policy has no source");
  }
  return InOwnTransaction("approve", [&]() -> Result<ApprovalRow> {
    // Read under the write lock: nobody can approve or revoke between this check and the insert.
    auto versions = reads_.Versions(a.kind, a.name);
    if (!versions) return versions.error();
    const int64_t newest = versions->empty() ? 0 : versions->back().version;
    const bool newest_revoked = !versions->empty() && versions->back().revoked_unix_us.has_value();
    if (newest != a.reviewed_version || (newest > 0 && newest_revoked != a.reviewed_revoked)) {
      return MakeError(ErrorCode::kConflict,
                       std::string(ApprovalKindName(a.kind)) + " " + a.name + " changed while it was reviewed (its newest " +
                           "version is now " + std::to_string(newest) + (newest_revoked ? ", revoked" : "") +
                           "; the review was of version " + std::to_string(a.reviewed_version) +
                           "): nothing was stored; review and approve again");
    }
    const std::string manifest_text_hash = Sha256Hex(a.manifest_text);
    std::string source_hash;
    if (flow) {
      source_hash = Sha256Hex(*a.source);
      if (auto r = KeepText(source_hash, *a.source); !r) return r.error();
    }
    if (auto r = KeepText(manifest_text_hash, a.manifest_text); !r) return r.error();
    auto inserted = Write(stmts_->insert_approval, [&] { return "cannot store the approval of " + a.name; },
                          ApprovalKindName(a.kind), a.name, OrNull{source_hash}, manifest_text_hash, a.manifest_hash,
                          a.approver.uid, a.approver.name, a.at_unix_us, a.note);
    if (!inserted) return inserted.error();
    const int64_t id = static_cast<int64_t>(sqlite3_last_insert_rowid(db_));
    Json detail = {{"note", a.note}, {"manifest_text_hash", manifest_text_hash}, {"manifest_hash", a.manifest_hash}};
    if (flow) detail["source_hash"] = source_hash;
    if (!a.review_json.empty()) {
      Json review = Json::parse(a.review_json, nullptr, false);
      detail["review"] = review.is_discarded() ? Json(a.review_json) : review;
    }
    auto event = Write(stmts_->insert_event, [&] { return "cannot record the approval event of " + a.name; },
                       a.at_unix_us, "approved", id, a.approver.uid, a.approver.name,
                       detail.dump(-1, ' ', false, Json::error_handler_t::replace));
    if (!event) return event.error();
    auto row = reads_.Approval(id);
    if (!row) return row.error();
    if (!*row) return MakeError(ErrorCode::kInternal, "approve: the stored version cannot be read back");
    return **row;
  });
}

Result<ApprovalRow> SqliteStore::Revoke(ApprovalKind kind, const std::string& name, int64_t version, const Actor& by,
                                        int64_t at_unix_us, const std::string& note) {
  return InOwnTransaction("revoke", [&]() -> Result<ApprovalRow> {
    auto versions = reads_.Versions(kind, name);
    if (!versions) return versions.error();
    const ApprovalRow* found = nullptr;
    for (const ApprovalRow& v : *versions) {
      if (v.version == version) found = &v;
    }
    const std::string what = std::string(ApprovalKindName(kind)) + " " + name;
    if (versions->empty()) {
      return MakeError(ErrorCode::kNotFound, what + " has no approved version; `basal " + ApprovalKindName(kind) +
                                                 " list` shows what is approved");
    }
    if (!found) {
      return MakeError(ErrorCode::kNotFound, what + " has no version " + std::to_string(version) + " (versions 1 to " +
                                                 std::to_string(versions->back().version) + ")");
    }
    if (found->revoked_unix_us) {
      return MakeError(ErrorCode::kConflict,
                       what + " version " + std::to_string(version) + " is already revoked (by " + found->revoker.name +
                           "); nothing changed");
    }
    const int64_t id = found->id;
    auto changed = Write(stmts_->revoke_approval, [&] { return "cannot revoke " + what; }, at_unix_us, by.uid, by.name,
                         note, id);
    if (!changed) return changed.error();
    Json detail = {{"note", note}};
    auto event = Write(stmts_->insert_event, [&] { return "cannot record the revocation event of " + name; }, at_unix_us,
                       "revoked", id, by.uid, by.name, detail.dump(-1, ' ', false, Json::error_handler_t::replace));
    if (!event) return event.error();
    auto row = reads_.Approval(id);
    if (!row) return row.error();
    if (!*row) return MakeError(ErrorCode::kInternal, "revoke: the version cannot be read back");
    return **row;
  });
}


// ---- RunStore: runs; ServeTables: basal serve's API tokens and schedule marks ----

Result<std::optional<RunState>> SqliteStore::RunStateOf(int64_t run_id) {
  Use use(stmts_->run_state);
  int rc = Binder(use.get()).Int(run_id).rc();
  if (rc == SQLITE_OK) rc = sqlite3_step(use.get());
  if (rc == SQLITE_ROW) {
    // The CHECK constraint keeps other texts out; a file changed by hand reads as ended.
    return std::optional<RunState>(ParseRunState(sqlite::ColumnText(use.get(), 0)).value_or(RunState::kEnded));
  }
  if (rc == SQLITE_DONE) return std::optional<RunState>();
  return DbError(path_, db_, rc, "cannot read the state of run " + std::to_string(run_id));
}

Result<EnqueueResult> SqliteStore::EnqueueRun(const NewRun& run) {
  // The write lock first, as in CompareAndSwap: the key read below is what the insert relies on,
  // and no other process may insert a run for the same key in between. A keyed run is looked up
  // with every run this batch accepted written first (BeginBatchIfNone); an unkeyed one reads
  // nothing that they could change.
  const bool keyed = !run.idempotency_key.empty();
  if (auto r = keyed ? BeginBatchIfNone() : OpenBatchKeepingPending(); !r) return r.error();
  if (keyed) {
    int64_t earlier = 0, expires_us = 0;
    std::string earlier_input;
    {
      Use use(stmts_->run_by_key);
      int rc = Binder(use.get()).Text(run.flow).Text(run.idempotency_key).rc();
      if (rc == SQLITE_OK) rc = sqlite3_step(use.get());
      if (rc == SQLITE_ROW) {
        earlier = sqlite3_column_int64(use.get(), 0);
        earlier_input = sqlite::ColumnText(use.get(), 1);
        expires_us = sqlite3_column_int64(use.get(), 2);
      } else if (rc != SQLITE_DONE) {
        return DbError(path_, db_, rc, "cannot read the idempotency key of a run of flow " + run.flow);
      }
    }
    if (earlier != 0 && expires_us > run.created_unix_us) {
      if (earlier_input != run.input_json) {
        return MakeError(ErrorCode::kConflict,
                         "idempotency key \"" + run.idempotency_key + "\" of flow " + run.flow + " was used for run " +
                             std::to_string(earlier) +
                             " with another input; send a new key for a new request, or the same input to get run " +
                             std::to_string(earlier));
      }
      auto row = reads_.GetRun(earlier);
      if (!row) return row.error();
      if (!*row) return MakeError(ErrorCode::kInternal, "run " + std::to_string(earlier) + " cannot be read back");
      return EnqueueResult{std::move(**row), true};
    }
    if (earlier != 0) {  // expired: forgotten, so the unique index admits the new run
      auto cleared = Write(
          stmts_->clear_run_key, [&] { return "cannot clear the expired key of run " + std::to_string(earlier); },
          earlier);
      if (!cleared) return cleared.error();
    }
  }
  // The id the insert would have taken (the largest plus one: runs has no AUTOINCREMENT), reserved
  // under the write lock, which this batch holds until it commits; the row is written by
  // MarkRunStarted if the run starts in this batch, else before the next statement that may read
  // it, at the latest by the commit (FlushPendingRuns).
  // Known without a read while no other connection has written a run since this one last did.
  if (reserved_run_id_ == 0) {
    if (auto r = ForgetWhatOthersChanged(); !r) return r.error();
    reserved_run_id_ = known_max_run_id_;
  }
  if (reserved_run_id_ == 0) {
    Use use(stmts_->max_run_id);
    const int rc = sqlite3_step(use.get());
    if (rc != SQLITE_ROW) return DbError(path_, db_, rc, "cannot reserve an id for a run of flow " + run.flow);
    reserved_run_id_ = sqlite3_column_int64(use.get(), 0);
  }
  const int64_t id = ++reserved_run_id_;
  pending_runs_.push_back({id, run, std::nullopt});
  EnqueueResult result;
  RunRow& row = result.run;
  row.id = id;
  row.flow = run.flow;
  row.input_json = run.input_json;
  row.trigger = run.trigger;
  row.idempotency_key = run.idempotency_key;
  row.state = RunState::kQueued;
  row.created_unix_us = run.created_unix_us;
  row.state_detail = run.state_detail;
  row.durable = run.durable;
  return result;
}

Result<void> SqliteStore::MarkRunStarted(int64_t run_id, int64_t activation_id, int64_t at_unix_us,
                                         const RunBinding& binding) {
  const std::string id = std::to_string(run_id);
  if (activation_id <= 0) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "run " + id + " cannot start without an activation (got activation id " +
                         std::to_string(activation_id) + "; a bug in the caller)");
  }
  for (auto it = pending_runs_.begin(); it != pending_runs_.end(); ++it) {
    if (it->id != run_id) continue;
    if (it->started) {
      // Started twice: judged by the rules below, on its row as running.
      if (auto flushed = CheckBatchUsable(); !flushed) return flushed.error();
      break;
    }
    // Accepted in this batch: kept pending, started, and written once, after whatever else this pass
    // does (the activation's `activate` frame among it): as running, or as ended if its end comes in
    // this batch too (InsertPendingRun). The activation must exist now, as the row's foreign key
    // requires; refused, the run stays accepted, still queued, and the batch goes on.
    if (auto opened = OpenBatchKeepingPending(); !opened) return opened.error();
    if (FindPendingActivation(activation_id)) {  // it will be written before the run (FlushPendingRuns)
      it->started = PendingStart{activation_id, at_unix_us, binding};
      return Ok();
    }
    Use use(stmts_->activation_exists);
    int rc = Binder(use.get()).Int(activation_id).rc();
    if (rc == SQLITE_OK) rc = sqlite3_step(use.get());
    if (rc == SQLITE_DONE) {
      return JournalError(ErrorCode::kDatabase, path_,
                          "cannot record the start of run " + id + ": it has no activation " +
                              std::to_string(activation_id) + " (FOREIGN KEY constraint failed); a bug in the caller");
    }
    if (rc != SQLITE_ROW) return DbError(path_, db_, rc, "cannot record the start of run " + id);
    it->started = PendingStart{activation_id, at_unix_us, binding};
    return Ok();
  }
  const BindingColumns c(binding);
  auto changed = Write(stmts_->start_run, [&] { return "cannot record the start of run " + id; }, activation_id,
                       at_unix_us, c.approval, c.manifest_hash, c.manifest_text_hash, c.seed, c.clock, c.source_hash,
                       run_id);
  if (!changed) return changed.error();
  if (*changed == 1) return Ok();
  auto state = RunStateOf(run_id);
  if (!state) return state.error();
  if (!*state) return JournalError(ErrorCode::kNotFound, path_, "has no run " + id + " to start");
  // The run's row will not name this activation: it is listed, so its run's readers still find it.
  auto listed = Write(stmts_->list_by_run, [&] { return "cannot list activation " + std::to_string(activation_id) +
                                                        " under run " + id; }, activation_id, run_id);
  if (!listed) return listed.error();
  return MakeError(ErrorCode::kConflict,
                   "run " + id + " is " + RunStateName(**state) + ", not queued: it cannot start");
}

Result<void> SqliteStore::MarkRunEnded(int64_t run_id, std::string_view outcome, std::string_view error_json,
                                       int64_t at_unix_us) {
  const std::string id = std::to_string(run_id);
  const std::string name(outcome);
  // Started and ending in the batch that accepted it, with its activation's outcome: written once,
  // ended (InsertPendingRun). Its acceptance was answered or will be at the commit: refused, nothing
  // of this batch may commit, as when FlushPendingRuns fails.
  if (ParseOutcome(name)) {
    for (auto it = pending_runs_.begin(); it != pending_runs_.end(); ++it) {
      if (it->id != run_id || !it->started) continue;
      if (auto r = OpenBatchKeepingPending(); !r) return r.error();
      // Its activation first (with its end, when that came in this batch): the row refers to it.
      if (auto flushed = FlushPendingActivations(); !flushed) return flushed;
      const PendingEnd end{outcome, error_json, at_unix_us};
      if (auto inserted = InsertPendingRun(*it, &end); !inserted) {
        batch_lost_ = true;
        return inserted;
      }
      pending_runs_.erase(it);
      return Ok();
    }
  }
  // Under the write lock from the read of the state to the update.
  if (auto r = BeginBatchIfNone(); !r) return r.error();
  // The common end, a running run with its activation's outcome, in one statement (as the
  // PostgreSQL backend does every end): the state the update requires is the one the rules below
  // would have read. Any other state is read and judged by them.
  if (ParseOutcome(name)) {
    auto changed = Write(stmts_->end_run, [&] { return "cannot record the end of run " + id; }, name,
                         OrNull{error_json}, at_unix_us, run_id, RunStateName(RunState::kRunning));
    if (!changed) return changed.error();
    if (*changed == 1) return Ok();
  }
  auto state = RunStateOf(run_id);
  if (!state) return state.error();
  if (!*state) return JournalError(ErrorCode::kNotFound, path_, "has no run " + id + " to end");
  switch (**state) {
    case RunState::kEnded:
      return MakeError(ErrorCode::kConflict, "run " + id + " has already ended; it cannot end again as " + name);
    case RunState::kQueued:
      // It never had an activation: only the daemon's own reasons for dropping it apply.
      if (name != "cancelled" && name != "missed" && name != "skipped") {
        return MakeError(ErrorCode::kInvalidArgument, "run " + id + " is queued: it ends as cancelled, missed or " +
                                                          "skipped, not as \"" + name + "\" (a bug in the caller)");
      }
      break;
    case RunState::kRunning:
      if (!ParseOutcome(name)) {
        return MakeError(ErrorCode::kInvalidArgument, "run " + id + " is running: it ends with its activation's " +
                                                          "outcome, and \"" + name +
                                                          "\" is not an outcome name (a bug in the caller)");
      }
      break;
    case RunState::kSleeping:
    case RunState::kWaiting:
    case RunState::kRetrying:
      // Parked: the operator cancels it (a wake or an event resumes it; it never ends parked).
      if (name != "cancelled") {
        return MakeError(ErrorCode::kInvalidArgument, "run " + id + " is " + RunStateName(**state) +
                                                          ": it ends only as cancelled, not as \"" + name +
                                                          "\" (a bug in the caller)");
      }
      break;
    case RunState::kInterrupted:
    case RunState::kNeedsReconciliation:
      // Waiting to be resumed: the operator cancels it, it ran out of resumes, or a resume ended it
      // before an activation started (its version revoked, a divergence found in its record).
      if (name != "cancelled" && name != "resume_exhausted" && !ParseOutcome(name)) {
        return MakeError(ErrorCode::kInvalidArgument, "run " + id + " is " + RunStateName(**state) +
                                                          ": it ends as cancelled, resume_exhausted or an outcome, "
                                                          "not as \"" + name + "\" (a bug in the caller)");
      }
      break;
  }
  auto changed = Write(stmts_->end_run, [&] { return "cannot record the end of run " + id; }, name,
                       OrNull{error_json}, at_unix_us, run_id, RunStateName(**state));
  if (!changed) return changed.error();
  if (*changed != 1) return MakeError(ErrorCode::kInternal, "run " + id + " changed under the write lock");
  return Ok();
}

Result<std::vector<RunRow>> SqliteStore::RunsInState(RunState state, size_t limit) {
  if (auto r = CheckBatchUsable(); !r) return r.error();
  std::vector<RunRow> rows;
  if (limit == 0) return rows;
  Use use(stmts_->runs_in_state);
  int rc = Binder(use.get()).Text(RunStateName(state)).Int(sqlite::LimitParam(limit)).rc();
  if (rc == SQLITE_OK) {
    while ((rc = sqlite3_step(use.get())) == SQLITE_ROW) rows.push_back(sqlite::ReadRunRow(use.get()));
  }
  if (rc != SQLITE_DONE) {
    return DbError(path_, db_, rc, std::string("cannot read the ") + RunStateName(state) + " runs");
  }
  return rows;
}

Result<size_t> SqliteStore::CountRuns(RunState state) {
  if (auto r = CheckBatchUsable(); !r) return r.error();
  Use use(stmts_->count_runs);
  int rc = Binder(use.get()).Text(RunStateName(state)).rc();
  if (rc == SQLITE_OK) rc = sqlite3_step(use.get());
  if (rc == SQLITE_ROW) return static_cast<size_t>(sqlite3_column_int64(use.get(), 0));
  return DbError(path_, db_, rc, std::string("cannot count the ") + RunStateName(state) + " runs");
}

Result<size_t> SqliteStore::SettleRunsOfEndedActivations(int64_t at_unix_us) {
  auto interrupted =
      Write(stmts_->interrupt_runs, [] { return "cannot interrupt the durable runs of abandoned activations"; },
            at_unix_us);
  if (!interrupted) return interrupted.error();
  auto changed =
      Write(stmts_->settle_runs, [] { return "cannot end the runs of ended activations"; }, at_unix_us);
  if (!changed) return changed.error();
  return static_cast<size_t>(*interrupted + *changed);
}

namespace {

// The moves of RunState's diagram (store.h) that do not end a run.
bool RunMoveAllowed(RunState from, RunState to) {
  switch (to) {
    case RunState::kInterrupted:
      return from == RunState::kRunning || from == RunState::kNeedsReconciliation || RunParked(from);
    case RunState::kQueued:
      return from == RunState::kInterrupted || RunParked(from);
    case RunState::kSleeping:
    case RunState::kWaiting:
    case RunState::kRetrying:
      return from == RunState::kRunning;
    case RunState::kNeedsReconciliation:
      return from == RunState::kQueued || from == RunState::kRunning;
    case RunState::kRunning:
    case RunState::kEnded:
      return false;  // MarkRunStarted, MarkRunEnded
  }
  return false;
}

}  // namespace

Result<RunRow> SqliteStore::MoveRun(const RunMove& move) {
  const std::string id = std::to_string(move.run_id);
  if (!RunMoveAllowed(move.from, move.to)) {
    return MakeError(ErrorCode::kInvalidArgument, std::string("run ") + id + ": no move from " +
                                                      RunStateName(move.from) + " to " + RunStateName(move.to) +
                                                      " (a bug in the caller)");
  }
  const bool parks = RunParked(move.to);
  if (parks && !move.wake_unix_us) {
    return MakeError(ErrorCode::kInvalidArgument, "run " + id + ": a move to " + RunStateName(move.to) +
                                                      " needs a wake time (a bug in the caller)");
  }
  if ((move.to == RunState::kWaiting) != !move.waiting_for.empty()) {
    return MakeError(ErrorCode::kInvalidArgument, "run " + id + ": only a waiting run names the event it waits for " +
                                                      "(a bug in the caller)");
  }
  auto changed = Write(stmts_->move_run, [&] { return "cannot move run " + id + " to " + RunStateName(move.to); },
                       RunStateName(move.to), OrNull{move.detail_json}, int64_t{move.count_resume ? 1 : 0},
                       int64_t{move.count_attempt ? 1 : 0}, parks ? move.wake_unix_us : std::optional<int64_t>(),
                       OrNull{move.waiting_for}, OrNull{move.waiting_key}, move.run_id, RunStateName(move.from));
  if (!changed) return changed.error();
  auto row = reads_.GetRun(move.run_id);
  if (!row) return row.error();
  if (!*row) return JournalError(ErrorCode::kNotFound, path_, "has no run " + id);
  if (*changed != 1) {
    return MakeError(ErrorCode::kConflict, "run " + id + " is " + RunStateName((*row)->state) + ", not " +
                                               RunStateName(move.from) + ": it was not moved to " +
                                               RunStateName(move.to));
  }
  return std::move(**row);
}

namespace {

RunEvent ReadRunEvent(sqlite3_stmt* s, bool with_delivery) {
  RunEvent e;
  e.id = sqlite3_column_int64(s, 0);
  e.run_id = sqlite3_column_int64(s, 1);
  e.flow = sqlite::ColumnText(s, 2);
  e.name = sqlite::ColumnText(s, 3);
  e.event_key = sqlite::ColumnText(s, 4);
  e.payload_json = sqlite::ColumnText(s, 5);
  e.sender = sqlite::ColumnText(s, 6);
  e.received_unix_us = sqlite3_column_int64(s, 7);
  e.expires_unix_us = sqlite3_column_int64(s, 8);
  if (with_delivery) {
    e.delivered_activation = sqlite3_column_int64(s, 9);
    e.delivered_call = sqlite3_column_int64(s, 10);
    e.delivered_unix_us = sqlite::ColumnIntOrNull(s, 11);
  }
  return e;
}

}  // namespace

Result<std::vector<RunRow>> SqliteStore::RunsDue(int64_t now_unix_us, size_t limit) {
  if (auto r = CheckBatchUsable(); !r) return r.error();
  std::vector<RunRow> rows;
  if (limit == 0) return rows;
  Use use(stmts_->runs_due);
  int rc = Binder(use.get()).Int(now_unix_us).Int(sqlite::LimitParam(limit)).rc();
  if (rc == SQLITE_OK) {
    while ((rc = sqlite3_step(use.get())) == SQLITE_ROW) rows.push_back(sqlite::ReadRunRow(use.get()));
  }
  if (rc != SQLITE_DONE) return DbError(path_, db_, rc, "cannot read the parked runs that are due");
  return rows;
}

Result<std::optional<int64_t>> SqliteStore::NextWake() {
  if (auto r = CheckBatchUsable(); !r) return r.error();
  Use use(stmts_->next_wake);
  int rc = sqlite3_step(use.get());
  if (rc == SQLITE_ROW) return sqlite::ColumnIntOrNull(use.get(), 0);
  return DbError(path_, db_, rc, "cannot read the next wake time of the parked runs");
}

Result<size_t> SqliteStore::CountParked(std::string_view flow) {
  if (auto r = CheckBatchUsable(); !r) return r.error();
  Use use(flow.empty() ? stmts_->count_parked : stmts_->count_parked_flow);
  int rc = SQLITE_OK;
  if (!flow.empty()) rc = Binder(use.get()).Text(flow).rc();
  if (rc == SQLITE_OK) rc = sqlite3_step(use.get());
  if (rc == SQLITE_ROW) return static_cast<size_t>(sqlite3_column_int64(use.get(), 0));
  return DbError(path_, db_, rc, "cannot count the parked runs");
}

Result<std::vector<RunRow>> SqliteStore::RunsWaitingFor(std::string_view flow, std::string_view name,
                                                        std::string_view key, size_t limit) {
  if (auto r = CheckBatchUsable(); !r) return r.error();
  std::vector<RunRow> rows;
  if (limit == 0) return rows;
  Use use(stmts_->runs_waiting_for);
  int rc = Binder(use.get()).Text(flow).Text(name).Text(key).Int(sqlite::LimitParam(limit)).rc();
  if (rc == SQLITE_OK) {
    while ((rc = sqlite3_step(use.get())) == SQLITE_ROW) rows.push_back(sqlite::ReadRunRow(use.get()));
  }
  if (rc != SQLITE_DONE) return DbError(path_, db_, rc, "cannot read the runs waiting for an event");
  return rows;
}

Result<std::vector<RunCount>> SqliteStore::CountRunsByFlow(const std::vector<RunState>& states, size_t limit) {
  if (auto r = CheckBatchUsable(); !r) return r.error();
  std::vector<RunCount> out;
  if (states.empty() || limit == 0) return out;
  // A handful of states: a statement made for the set (not cached; a scrape runs it, not a run).
  // An OR of equalities: each live state is answered by runs_unended (an IN list would scan the
  // table: schema.cpp, version 8).
  std::string sql = "SELECT flow, state, count(*) FROM runs WHERE ";
  for (size_t i = 0; i < states.size(); ++i) sql += i ? " OR state=?" : "state=?";
  sql += " GROUP BY flow, state ORDER BY flow, state LIMIT ?";
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql.c_str(), -1, &raw, nullptr);
  std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt*)> stmt(raw, sqlite3_finalize);
  if (rc != SQLITE_OK) return DbError(path_, db_, rc, "cannot count the runs by flow");
  Binder b(stmt.get());
  for (RunState st : states) b.Text(RunStateName(st));
  rc = b.Int(sqlite::LimitParam(limit)).rc();
  if (rc == SQLITE_OK) {
    while ((rc = sqlite3_step(stmt.get())) == SQLITE_ROW) {
      RunCount c;
      c.flow = sqlite::ColumnText(stmt.get(), 0);
      c.state = ParseRunState(sqlite::ColumnText(stmt.get(), 1)).value_or(RunState::kEnded);
      c.count = static_cast<size_t>(sqlite3_column_int64(stmt.get(), 2));
      out.push_back(std::move(c));
    }
  }
  if (rc != SQLITE_DONE) return DbError(path_, db_, rc, "cannot count the runs by flow");
  return out;
}

Result<int64_t> SqliteStore::AddRunEvent(const NewRunEvent& e) {
  if (e.run_id <= 0 && e.event_key.empty()) {
    return MakeError(ErrorCode::kInvalidArgument, "an event names its run or carries a key (a bug in the caller)");
  }
  auto written = Write(
      stmts_->insert_run_event, [&] { return "cannot record event " + e.name + " of flow " + e.flow; },
      e.run_id > 0 ? std::optional<int64_t>(e.run_id) : std::optional<int64_t>(), e.flow, e.name, e.event_key,
      e.payload_json, e.sender, e.received_unix_us, e.expires_unix_us, e.delivery_id);
  if (!written) return written.error();
  if (sqlite3_changes(db_) == 0)
    return MakeError(ErrorCode::kConflict, "flow " + e.flow + " has an event of delivery " + e.delivery_id + " already");
  return static_cast<int64_t>(sqlite3_last_insert_rowid(db_));
}

Result<std::optional<RunEvent>> SqliteStore::TakeRunEvent(int64_t run_id, std::string_view flow, std::string_view name,
                                                          std::string_view key, int64_t now_unix_us,
                                                          int64_t activation_id, int64_t call_id) {
  // Under the write lock from the read to the update: one event goes to one wait.
  if (auto r = BeginBatchIfNone(); !r) return r.error();
  std::optional<RunEvent> found;
  {
    Use use(stmts_->next_run_event);
    int rc = Binder(use.get()).Int(run_id).Text(name).Text(flow).Text(key).Int(now_unix_us).rc();
    if (rc == SQLITE_OK) rc = sqlite3_step(use.get());
    if (rc == SQLITE_ROW) {
      found = ReadRunEvent(use.get(), false);
    } else if (rc != SQLITE_DONE) {
      return DbError(path_, db_, rc, "cannot read the events of run " + std::to_string(run_id));
    }
  }
  if (!found) return found;
  auto changed = Write(
      stmts_->deliver_run_event, [&] { return "cannot deliver event " + std::to_string(found->id); }, run_id,
      activation_id, call_id, now_unix_us, found->id);
  if (!changed) return changed.error();
  if (*changed != 1) return MakeError(ErrorCode::kInternal, "event " + std::to_string(found->id) + " changed under the write lock");
  found->run_id = run_id;
  found->delivered_activation = activation_id;
  found->delivered_call = call_id;
  found->delivered_unix_us = now_unix_us;
  return found;
}

Result<size_t> SqliteStore::CountPendingEvents(int64_t run_id) {
  if (auto r = CheckBatchUsable(); !r) return r.error();
  Use use(stmts_->count_pending_events);
  int rc = Binder(use.get()).Int(run_id).rc();
  if (rc == SQLITE_OK) rc = sqlite3_step(use.get());
  if (rc == SQLITE_ROW) return static_cast<size_t>(sqlite3_column_int64(use.get(), 0));
  return DbError(path_, db_, rc, "cannot count the events of run " + std::to_string(run_id));
}

Result<std::optional<int64_t>> SqliteStore::RunEventOfDelivery(std::string_view flow, std::string_view delivery_id) {
  if (auto r = CheckBatchUsable(); !r) return r.error();
  Use use(stmts_->run_event_of_delivery);
  int rc = Binder(use.get()).Text(flow).Text(delivery_id).rc();
  if (rc == SQLITE_OK) rc = sqlite3_step(use.get());
  if (rc == SQLITE_ROW) return std::optional<int64_t>(sqlite3_column_int64(use.get(), 0));
  if (rc == SQLITE_DONE) return std::optional<int64_t>();
  return DbError(path_, db_, rc, "cannot look up the event of delivery " + std::string(delivery_id));
}

Result<size_t> SqliteStore::CountPendingKeyedEvents(std::string_view flow) {
  if (auto r = CheckBatchUsable(); !r) return r.error();
  Use use(stmts_->count_pending_keyed);
  int rc = Binder(use.get()).Text(flow).rc();
  if (rc == SQLITE_OK) rc = sqlite3_step(use.get());
  if (rc == SQLITE_ROW) return static_cast<size_t>(sqlite3_column_int64(use.get(), 0));
  return DbError(path_, db_, rc, "cannot count the keyed events of flow " + std::string(flow));
}

Result<std::vector<RunEvent>> SqliteStore::RunEvents(int64_t run_id, size_t limit) {
  if (auto r = CheckBatchUsable(); !r) return r.error();
  std::vector<RunEvent> rows;
  if (limit == 0) return rows;
  Use use(stmts_->run_events);
  int rc = Binder(use.get()).Int(run_id).Int(sqlite::LimitParam(limit)).rc();
  if (rc == SQLITE_OK) {
    while ((rc = sqlite3_step(use.get())) == SQLITE_ROW) rows.push_back(ReadRunEvent(use.get(), true));
  }
  if (rc != SQLITE_DONE) return DbError(path_, db_, rc, "cannot read the events of run " + std::to_string(run_id));
  return rows;
}

Result<size_t> SqliteStore::DropExpiredEvents(int64_t now_unix_us, size_t limit) {
  if (limit == 0) return size_t{0};
  auto changed = Write(
      stmts_->drop_expired_events, [] { return std::string("cannot drop the expired events"); }, now_unix_us,
      sqlite::LimitParam(limit));
  if (!changed) return changed.error();
  return static_cast<size_t>(*changed);
}

Result<int64_t> SqliteStore::RecordOperatorWrite(const KvAuditEntry& e) {
  if (e.op == KvAuditOp::kPut && e.value_sha256.empty())
    return MakeError(ErrorCode::kInvalidArgument, "an operator's kv put is journaled with its value's digest (a bug in the caller)");
  const bool put = e.op == KvAuditOp::kPut;
  auto written = Write(
      stmts_->insert_kv_audit, [&] { return "cannot journal the operator's kv write in namespace " + e.ns; },
      e.at_unix_us, e.actor.uid, e.actor.name, e.reason, e.ns, e.key, KvAuditOpName(e.op),
      OrNull{put ? e.value_sha256 : std::string()},
      put ? std::optional<int64_t>(static_cast<int64_t>(e.value_bytes)) : std::nullopt, int64_t{e.existed ? 1 : 0});
  if (!written) return written.error();
  return static_cast<int64_t>(sqlite3_last_insert_rowid(db_));
}

Result<int64_t> SqliteStore::AddResolution(const CallResolution& r) {
  auto written = Write(
      stmts_->insert_resolution,
      [&] { return "cannot record the resolution of call " + std::to_string(r.call_id) + " of run " + std::to_string(r.run_id); },
      r.run_id, r.activation_id, r.call_id, ResolutionKindName(r.kind), OrNull{r.value_json}, r.actor.uid, r.actor.name,
      r.at_unix_us, r.note);
  if (!written) return written.error();
  return static_cast<int64_t>(sqlite3_last_insert_rowid(db_));
}

Result<int64_t> SqliteStore::AddToken(std::string_view name, std::string_view token_hash, std::string_view scopes_json,
                                      const Actor& by, int64_t at_unix_us) {
  const std::string n(name);
  if (name.empty() || token_hash.empty()) {
    return MakeError(ErrorCode::kInvalidArgument, "an API token needs a name and a hash (a bug in the caller)");
  }
  // Under the write lock: no other process can add the same name between the check and the insert.
  if (auto r = BeginBatchIfNone(); !r) return r.error();
  {
    Use use(stmts_->token_name_unrevoked);
    int rc = Binder(use.get()).Text(name).rc();
    if (rc == SQLITE_OK) rc = sqlite3_step(use.get());
    if (rc == SQLITE_ROW) {
      return MakeError(ErrorCode::kConflict, "an API token named " + n +
                                                 " exists; revoke it first (`basal token revoke " + n +
                                                 "`) or choose another name");
    }
    if (rc != SQLITE_DONE) return DbError(path_, db_, rc, "cannot read the API tokens named " + n);
  }
  {
    Use use(stmts_->token_hash_known);
    int rc = Binder(use.get()).Text(token_hash).rc();
    if (rc == SQLITE_OK) rc = sqlite3_step(use.get());
    if (rc == SQLITE_ROW) {
      return MakeError(ErrorCode::kConflict, "API token " + n + " has the hash of token " +
                                                 sqlite::ColumnText(use.get(), 0) +
                                                 " (the same token twice: draw a new one at random)");
    }
    if (rc != SQLITE_DONE) return DbError(path_, db_, rc, "cannot read the API token hashes");
  }
  auto inserted = Write(stmts_->insert_token, [&] { return "cannot store API token " + n; }, name, token_hash,
                        scopes_json, by.uid, by.name, at_unix_us);
  if (!inserted) return inserted.error();
  return static_cast<int64_t>(sqlite3_last_insert_rowid(db_));
}

Result<std::optional<TokenRow>> SqliteStore::FindToken(std::string_view token_hash) {
  if (auto r = CheckBatchUsable(); !r) return r.error();
  Use use(stmts_->find_token);
  int rc = Binder(use.get()).Text(token_hash).rc();
  if (rc == SQLITE_OK) rc = sqlite3_step(use.get());
  if (rc == SQLITE_ROW) return std::optional<TokenRow>(sqlite::ReadTokenRow(use.get()));
  if (rc == SQLITE_DONE) return std::optional<TokenRow>();
  return DbError(path_, db_, rc, "cannot look up an API token");
}

Result<void> SqliteStore::RevokeToken(std::string_view name, const Actor& by, int64_t at_unix_us) {
  const std::string n(name);
  auto changed = Write(stmts_->revoke_token, [&] { return "cannot revoke API token " + n; }, at_unix_us, by.uid,
                       by.name, name);
  if (!changed) return changed.error();
  if (*changed == 0) {
    return JournalError(ErrorCode::kNotFound, path_,
                        "has no unrevoked API token named " + n + "; `basal token list` shows the tokens");
  }
  return Ok();
}

Result<std::optional<int64_t>> SqliteStore::ScheduleMark(std::string_view trigger) {
  if (auto r = CheckBatchUsable(); !r) return r.error();
  Use use(stmts_->schedule_mark);
  int rc = Binder(use.get()).Text(trigger).rc();
  if (rc == SQLITE_OK) rc = sqlite3_step(use.get());
  if (rc == SQLITE_ROW) return std::optional<int64_t>(sqlite3_column_int64(use.get(), 0));
  if (rc == SQLITE_DONE) return std::optional<int64_t>();
  return DbError(path_, db_, rc, "cannot read the mark of schedule " + std::string(trigger));
}

Result<void> SqliteStore::SetScheduleMark(std::string_view trigger, int64_t fire_unix_us) {
  auto written = Write(stmts_->set_schedule_mark,
                       [&] { return "cannot record the mark of schedule " + std::string(trigger); }, trigger,
                       fire_unix_us);
  if (!written) return written.error();
  return Ok();
}

}  // namespace

Result<std::unique_ptr<Store>> OpenSqliteStore(const SqliteStoreOptions& options) {
  auto store = std::make_unique<SqliteStore>(options.path);
  if (auto r = store->Open(options.durability); !r) return r.error();
  return std::unique_ptr<Store>(std::move(store));
}

Result<SqliteSettings> ReadSqliteSettings(Store& store) {
  auto* sqlite_store = dynamic_cast<SqliteStore*>(&store);
  if (sqlite_store == nullptr) return MakeError(ErrorCode::kInvalidArgument, "not a SQLite store");
  return sqlite_store->Settings();
}

}  // namespace basal
