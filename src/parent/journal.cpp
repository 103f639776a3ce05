// The journal and kv store on one SQLite connection. See journal.h and docs/journal.md.
#include "parent/journal.h"

#include <sqlite3.h>

#include <atomic>
#include <climits>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>

namespace basal {
namespace {

// The schema of version 1. calls has an explicit INTEGER PRIMARY KEY (seq) so that "record order"
// is the rowid order and survives VACUUM (implicit rowids may be renumbered by VACUUM); the
// (activation_id, call_id) key the design asks for is the UNIQUE constraint, which in a rowid table
// is exactly what a composite PRIMARY KEY would be.
constexpr const char* kCreateSchema = R"sql(
CREATE TABLE activations(
  id            INTEGER PRIMARY KEY,
  flow          TEXT NOT NULL,
  source_hash   TEXT NOT NULL,
  manifest_hash TEXT NOT NULL,
  input         TEXT NOT NULL,
  start_us      INTEGER NOT NULL,
  end_us        INTEGER,
  outcome       TEXT,
  result        TEXT,
  error         TEXT,
  cpu_us        INTEGER
);
CREATE TABLE calls(
  seq           INTEGER PRIMARY KEY,
  activation_id INTEGER NOT NULL REFERENCES activations(id),
  call_id       INTEGER NOT NULL,
  name          TEXT NOT NULL,
  args          TEXT NOT NULL,
  allowed       INTEGER NOT NULL CHECK (allowed IN (0, 1)),
  reason        TEXT NOT NULL CHECK (reason <> ''),
  result        TEXT,
  error         TEXT,
  start_us      INTEGER NOT NULL,
  end_us        INTEGER NOT NULL,
  UNIQUE (activation_id, call_id)
);
CREATE TABLE kv(
  namespace TEXT NOT NULL,
  key       TEXT NOT NULL,
  value     TEXT NOT NULL,
  PRIMARY KEY (namespace, key)
) WITHOUT ROWID;
)sql";

const char* SqliteCodeName(int rc) {
  switch (rc & 0xff) {
    case SQLITE_OK: return "SQLITE_OK";
    case SQLITE_ERROR: return "SQLITE_ERROR";
    case SQLITE_INTERNAL: return "SQLITE_INTERNAL";
    case SQLITE_PERM: return "SQLITE_PERM";
    case SQLITE_ABORT: return "SQLITE_ABORT";
    case SQLITE_BUSY: return "SQLITE_BUSY";
    case SQLITE_LOCKED: return "SQLITE_LOCKED";
    case SQLITE_NOMEM: return "SQLITE_NOMEM";
    case SQLITE_READONLY: return "SQLITE_READONLY";
    case SQLITE_INTERRUPT: return "SQLITE_INTERRUPT";
    case SQLITE_IOERR: return "SQLITE_IOERR";
    case SQLITE_CORRUPT: return "SQLITE_CORRUPT";
    case SQLITE_NOTFOUND: return "SQLITE_NOTFOUND";
    case SQLITE_FULL: return "SQLITE_FULL";
    case SQLITE_CANTOPEN: return "SQLITE_CANTOPEN";
    case SQLITE_PROTOCOL: return "SQLITE_PROTOCOL";
    case SQLITE_SCHEMA: return "SQLITE_SCHEMA";
    case SQLITE_TOOBIG: return "SQLITE_TOOBIG";
    case SQLITE_CONSTRAINT: return "SQLITE_CONSTRAINT";
    case SQLITE_MISMATCH: return "SQLITE_MISMATCH";
    case SQLITE_MISUSE: return "SQLITE_MISUSE";
    case SQLITE_NOLFS: return "SQLITE_NOLFS";
    case SQLITE_AUTH: return "SQLITE_AUTH";
    case SQLITE_RANGE: return "SQLITE_RANGE";
    case SQLITE_NOTADB: return "SQLITE_NOTADB";
    default: return "SQLITE_?";
  }
}

// What an operator can do about a failure, by SQLite's primary result code.
const char* AdviceFor(int rc) {
  switch (rc & 0xff) {
    case SQLITE_BUSY:
      return "another process held the journal's write lock for longer than the busy timeout; "
             "stop it or give this process its own --db";
    case SQLITE_FULL: return "the disk (or its quota) is full; free space and retry";
    case SQLITE_READONLY:
    case SQLITE_PERM: return "check that the file and its directory are writable by this user";
    case SQLITE_IOERR: return "the disk reported an I/O error; check the disk and the file system";
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB: return "the file is damaged or not a basal journal; move it aside";
    case SQLITE_CONSTRAINT: return "the caller broke a journal invariant (a bug in basal; please report it)";
    case SQLITE_CANTOPEN: return "check the directory exists and is writable";
    default: return "see the SQLite message above";
  }
}

struct StmtFinalizer {
  void operator()(sqlite3_stmt* s) const { sqlite3_finalize(s); }
};
using Stmt = std::unique_ptr<sqlite3_stmt, StmtFinalizer>;

// Resets a cached statement when the scope ends, so it never holds a read snapshot or dangling
// bound pointers (text is bound SQLITE_STATIC from the caller's strings) past the call.
class Use {
 public:
  explicit Use(const Stmt& stmt) : s_(stmt.get()) {}
  ~Use() {
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
  }
  Use(const Use&) = delete;
  Use& operator=(const Use&) = delete;
  sqlite3_stmt* get() const { return s_; }

 private:
  sqlite3_stmt* s_;
};

// Binding accumulates the first failure so a call site binds everything, then checks once.
class Binder {
 public:
  explicit Binder(sqlite3_stmt* s) : s_(s) {}
  Binder& Text(std::string_view v) {
    Keep(sqlite3_bind_text(s_, ++i_, v.data(), static_cast<int>(v.size()), SQLITE_STATIC), v.size());
    return *this;
  }
  Binder& TextOrNull(std::string_view v) {  // "" is stored as NULL (result/error absent)
    if (v.empty()) {
      Keep(sqlite3_bind_null(s_, ++i_), 0);
      return *this;
    }
    return Text(v);
  }
  Binder& Int(int64_t v) {
    Keep(sqlite3_bind_int64(s_, ++i_, v), 0);
    return *this;
  }
  int rc() const { return rc_; }

 private:
  void Keep(int rc, size_t size) {
    if (size > static_cast<size_t>(INT_MAX)) rc = SQLITE_TOOBIG;
    if (rc_ == SQLITE_OK) rc_ = rc;
  }
  sqlite3_stmt* s_;
  int i_ = 0;
  int rc_ = SQLITE_OK;
};

std::string ColumnText(sqlite3_stmt* s, int col) {
  const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(s, col));
  if (text == nullptr) return {};
  return std::string(text, static_cast<size_t>(sqlite3_column_bytes(s, col)));
}

int64_t LimitParam(size_t limit) {  // SQLite reads a negative LIMIT as "no limit"
  return limit > static_cast<size_t>(INT64_MAX) ? -1 : static_cast<int64_t>(limit);
}

// The smallest byte string greater than every string that starts with `prefix`, or nullopt
// when there is none ("" or all 0xFF): strip trailing 0xFF bytes, then increment the last byte.
std::optional<std::string> PrefixSuccessor(const std::string& prefix) {
  std::string s = prefix;
  while (!s.empty() && static_cast<unsigned char>(s.back()) == 0xff) s.pop_back();
  if (s.empty()) return std::nullopt;
  s.back() = static_cast<char>(static_cast<unsigned char>(s.back()) + 1);
  return s;
}

constexpr const char* kActivationColumns =
    "id, flow, source_hash, manifest_hash, input, start_us, end_us, outcome, result, error, cpu_us";

ActivationRow ReadActivation(sqlite3_stmt* s) {
  ActivationRow row;
  row.id = sqlite3_column_int64(s, 0);
  row.flow = ColumnText(s, 1);
  row.source_hash = ColumnText(s, 2);
  row.manifest_hash = ColumnText(s, 3);
  row.input_json = ColumnText(s, 4);
  row.start_unix_us = sqlite3_column_int64(s, 5);
  if (sqlite3_column_type(s, 6) != SQLITE_NULL) row.end_unix_us = sqlite3_column_int64(s, 6);
  row.outcome = ColumnText(s, 7);
  row.result_json = ColumnText(s, 8);
  row.error_json = ColumnText(s, 9);
  row.cpu_us = sqlite3_column_int64(s, 10);  // NULL reads as 0
  return row;
}

}  // namespace

// DurabilityName and ParseDurability: src/parent/store/store.cpp.

// Every statement the journal runs after Open, prepared once.
struct Journal::Statements {
  Stmt begin, commit, rollback;
  Stmt insert_activation, end_activation, insert_call;
  Stmt kv_get, kv_put, kv_delete, kv_list_bounded, kv_list_open;
  Stmt activation_by_id, activations_newest, calls_of;
};

// Copies the WAL back into the database (PASSIVE checkpoints) on its own thread and its own
// connection. SQLite's automatic checkpoint runs inside the commit that crosses the threshold and
// fsyncs even under synchronous=NORMAL: 29-207 ms commits. A passive checkpoint takes no write
// lock, so the owner keeps committing while it runs; durability is unchanged (a commit is in the
// WAL before it returns, whoever copies it later). Started on first use: readers never get one.
class Journal::Checkpointer {
 public:
  explicit Checkpointer(std::string path) : path_(std::move(path)) {}
  ~Checkpointer() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
  }
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Starts one pass (and the thread, the first time). Call only when !running().
  void Request() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      running_ = true;
      wanted_ = true;
      if (!thread_.joinable()) thread_ = std::thread([this] { Run(); });
    }
    cv_.notify_one();
  }
  bool running() const { return running_.load(); }
  // False when the thread could not open its connection: the owner checkpoints inline.
  bool usable() const { return !failed_.load(); }
  // How many WAL frames the last pass had copied; -1 before the first pass ends.
  int backfilled() const { return backfilled_.load(); }

 private:
  void Run() {
    sqlite3* db = nullptr;
    bool opened =
        sqlite3_open_v2(path_.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr) == SQLITE_OK;
    // A fresh connection knows the file is in WAL mode only once it has read it: until then a
    // checkpoint is a no-op that reports -1.
    if (opened) opened = sqlite3_exec(db, "SELECT count(*) FROM sqlite_master", nullptr, nullptr, nullptr) == SQLITE_OK;
    if (!opened) failed_ = true;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return wanted_ || stop_; });
      if (stop_) break;
      wanted_ = false;
      lock.unlock();
      int log = 0, copied = -1;
      if (!opened || sqlite3_wal_checkpoint_v2(db, nullptr, SQLITE_CHECKPOINT_PASSIVE, &log, &copied) != SQLITE_OK)
        copied = -1;
      backfilled_ = copied;
      running_ = false;
      lock.lock();
    }
    lock.unlock();
    sqlite3_close_v2(db);
  }

  const std::string path_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool wanted_ = false, stop_ = false;
  std::atomic<bool> running_{false}, failed_{false};
  std::atomic<int> backfilled_{-1};
  std::thread thread_;
};

// SQLite's WAL hook: runs on the owner's thread after every commit, with the WAL's size in pages.
// Background passes copy the bulk (and pay its fsyncs) while commits go on; once a pass leaves
// only a short tail, one inline checkpoint copies the tail (a short fsync), everything is then
// copied and the next batch starts the WAL over from its beginning.
int Journal::OnWalCommit(void* journal, sqlite3* db, const char* schema, int wal_pages) {
  auto* self = static_cast<Journal*>(journal);
  if (wal_pages < kCheckpointPages) return SQLITE_OK;
  Checkpointer* c = self->checkpointer_.get();
  bool inline_checkpoint = c == nullptr || !c->usable() || wal_pages >= kWalHardLimitPages;
  if (!inline_checkpoint) {
    if (c->running()) return SQLITE_OK;  // look again after the next commit
    // A backfilled count above the WAL's size is from before the WAL started over.
    const int backfilled = c->backfilled();
    const int tail = backfilled >= 0 && backfilled <= wal_pages ? wal_pages - backfilled : wal_pages;
    inline_checkpoint = tail <= kInlineCheckpointMaxTailPages;
    if (!inline_checkpoint) c->Request();
  }
  if (inline_checkpoint) (void)sqlite3_wal_checkpoint_v2(db, schema, SQLITE_CHECKPOINT_PASSIVE, nullptr, nullptr);
  return SQLITE_OK;
}

Journal::Journal(std::string path) : path_(std::move(path)) {}

Journal::~Journal() {
  checkpointer_.reset();  // joins its thread and closes its connection first
  if (db_ != nullptr && sqlite3_get_autocommit(db_) == 0) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  stmts_.reset();  // statements must be finalized before the connection closes
  if (db_ != nullptr) sqlite3_close_v2(db_);
}

const std::string& Journal::path() const { return path_; }

Error Journal::DbError(int rc, std::string_view what) const { return DbError(rc, what, AdviceFor(rc)); }

Error Journal::DbError(int rc, std::string_view what, std::string_view advice) const {
  const char* detail = (db_ != nullptr && sqlite3_extended_errcode(db_) == rc) ? sqlite3_errmsg(db_)
                                                                                : sqlite3_errstr(rc);
  std::string message = "journal " + path_ + ": " + std::string(what) + ": " + detail + " (" +
                        SqliteCodeName(rc) + "); " + std::string(advice);
  return MakeError(ErrorCode::kDatabase, std::move(message));
}

Result<std::unique_ptr<Journal>> Journal::Open(const std::string& path, Durability durability) {
  std::unique_ptr<Journal> journal(new Journal(path));
  int rc = sqlite3_open_v2(path.c_str(), &journal->db_,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string advice = AdviceFor(rc);
    std::filesystem::path dir = std::filesystem::path(path).parent_path();
    if (dir.empty()) dir = ".";
    std::error_code ec;
    if ((rc & 0xff) == SQLITE_CANTOPEN && !std::filesystem::is_directory(dir, ec)) {
      advice = "directory " + dir.string() + " does not exist; create it or choose another --db";
    }
    Error error = journal->DbError(rc, "cannot open", advice);
    error.code = ErrorCode::kIo;
    return error;  // ~Journal closes the handle sqlite3_open_v2 may have left
  }
  sqlite3_extended_result_codes(journal->db_, 1);
  sqlite3_busy_timeout(journal->db_, kBusyTimeoutMs);
  if (auto r = journal->Configure(durability); !r) return r.error();
  if (auto r = journal->Prepare(); !r) return r.error();
  if (sqlite3_threadsafe() != 0) journal->checkpointer_ = std::make_unique<Checkpointer>(path);
  // Replaces SQLite's automatic checkpoint (which would run inside the commit).
  sqlite3_wal_hook(journal->db_, &Journal::OnWalCommit, journal.get());
  return journal;
}

namespace {

// Runs a single-value query (a PRAGMA or a count) on `db`; rc is SQLite's result.
int QueryInt(sqlite3* db, const char* sql, int64_t* out) {
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v2(db, sql, -1, &raw, nullptr);
  if (rc != SQLITE_OK) return rc;
  Stmt stmt(raw);
  rc = sqlite3_step(raw);
  if (rc == SQLITE_ROW) {
    *out = sqlite3_column_int64(raw, 0);
    return SQLITE_OK;
  }
  return rc == SQLITE_DONE ? SQLITE_ERROR : rc;
}

int QueryText(sqlite3* db, const char* sql, std::string* out) {
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v2(db, sql, -1, &raw, nullptr);
  if (rc != SQLITE_OK) return rc;
  Stmt stmt(raw);
  rc = sqlite3_step(raw);
  if (rc == SQLITE_ROW) {
    *out = ColumnText(raw, 0);
    return SQLITE_OK;
  }
  return rc == SQLITE_DONE ? SQLITE_ERROR : rc;
}

struct Header {
  int64_t application_id = 0, user_version = 0, objects = 0;
};

int ReadHeader(sqlite3* db, Header* h) {
  int rc = QueryInt(db, "PRAGMA application_id", &h->application_id);
  if (rc == SQLITE_OK) rc = QueryInt(db, "PRAGMA user_version", &h->user_version);
  if (rc == SQLITE_OK) rc = QueryInt(db, "SELECT count(*) FROM sqlite_master", &h->objects);
  return rc;
}

}  // namespace

// Checks what the file is before changing anything in it, so a foreign database is left alone;
// then WAL, synchronous, foreign keys, and the schema on first open.
Result<void> Journal::Configure(Durability durability) {
  Header h;
  int rc = ReadHeader(db_, &h);
  if ((rc & 0xff) == SQLITE_NOTADB) {
    return DbError(rc, "is not an SQLite database",
                   "point --db at a basal journal or at a file that does not exist yet");
  }
  if (rc != SQLITE_OK) return DbError(rc, "cannot read the database header");

  auto check_known = [&](const Header& hh) -> Result<void> {
    if (hh.application_id == 0 && hh.user_version == 0 && hh.objects == 0) return Ok();  // new, empty
    if (hh.application_id != kApplicationId) {
      return MakeError(ErrorCode::kDatabase,
                       "journal " + path_ + ": is an SQLite database but not a basal journal (application_id " +
                           std::to_string(hh.application_id) + ", " + std::to_string(hh.objects) +
                           " schema objects); it was left unchanged: choose another --db");
    }
    if (hh.user_version > kSchemaVersion) {
      return MakeError(ErrorCode::kDatabase,
                       "journal " + path_ + ": was written by a newer basal (schema version " +
                           std::to_string(hh.user_version) + ", this basal knows up to " +
                           std::to_string(kSchemaVersion) + "); upgrade basal or choose another --db");
    }
    if (hh.user_version < 1) {
      return MakeError(ErrorCode::kDatabase,
                       "journal " + path_ + ": is marked as a basal journal but has no schema version (" +
                           std::to_string(hh.user_version) + "); it is damaged: move it aside");
    }
    return Ok();
  };
  if (auto r = check_known(h); !r) return r;

  std::string mode;
  rc = QueryText(db_, "PRAGMA journal_mode=WAL", &mode);
  if (rc != SQLITE_OK) return DbError(rc, "cannot switch to WAL mode");
  if (mode != "wal") {
    return MakeError(ErrorCode::kDatabase, "journal " + path_ + ": SQLite refused WAL mode (journal_mode is \"" +
                                               mode + "\"); use a file on a local file system");
  }
  const char* sync_sql = durability == Durability::kFull ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL";
  rc = sqlite3_exec(db_, sync_sql, nullptr, nullptr, nullptr);
  if (rc == SQLITE_OK) rc = sqlite3_exec(db_, "PRAGMA foreign_keys=ON", nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return DbError(rc, "cannot apply connection settings");

  if (h.objects != 0) return Ok();
  // New file: create the schema under the write lock, re-checking inside it in case another
  // basal process created it first.
  rc = sqlite3_exec(db_, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return DbError(rc, "cannot start creating the schema");
  rc = ReadHeader(db_, &h);
  if (rc != SQLITE_OK) {
    Error e = DbError(rc, "cannot re-read the database header");
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    return e;
  }
  if (h.objects != 0) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    return check_known(h);
  }
  const std::string create = std::string(kCreateSchema) + "PRAGMA application_id=" +
                             std::to_string(kApplicationId) + ";PRAGMA user_version=" +
                             std::to_string(kSchemaVersion) + ";COMMIT;";
  rc = sqlite3_exec(db_, create.c_str(), nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) {
    Error e = DbError(rc, "cannot create the schema");
    if (sqlite3_get_autocommit(db_) == 0) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    return e;
  }
  return Ok();
}

Result<void> Journal::Prepare() {
  auto s = std::make_unique<Statements>();
  struct Row {
    Stmt* stmt;
    std::string sql;
  };
  const std::string activation_select = std::string("SELECT ") + kActivationColumns + " FROM activations";
  const Row rows[] = {
      {&s->begin, "BEGIN IMMEDIATE"},
      {&s->commit, "COMMIT"},
      {&s->rollback, "ROLLBACK"},
      {&s->insert_activation,
       "INSERT INTO activations(flow, source_hash, manifest_hash, input, start_us) VALUES(?,?,?,?,?)"},
      {&s->end_activation,
       "UPDATE activations SET end_us=?, outcome=?, result=?, error=?, cpu_us=? WHERE id=? AND outcome IS NULL"},
      {&s->insert_call,
       "INSERT INTO calls(activation_id, call_id, name, args, allowed, reason, result, error, start_us, end_us) "
       "VALUES(?,?,?,?,?,?,?,?,?,?)"},
      {&s->kv_get, "SELECT value FROM kv WHERE namespace=? AND key=?"},
      {&s->kv_put,
       "INSERT INTO kv(namespace, key, value) VALUES(?,?,?) "
       "ON CONFLICT(namespace, key) DO UPDATE SET value=excluded.value"},
      {&s->kv_delete, "DELETE FROM kv WHERE namespace=? AND key=?"},
      {&s->kv_list_bounded,
       "SELECT key, value FROM kv WHERE namespace=? AND key>=? AND key<? ORDER BY key LIMIT ?"},
      {&s->kv_list_open, "SELECT key, value FROM kv WHERE namespace=? AND key>=? ORDER BY key LIMIT ?"},
      {&s->activation_by_id, activation_select + " WHERE id=?"},
      {&s->activations_newest,
       "SELECT * FROM (" + activation_select + " ORDER BY id DESC LIMIT ?) ORDER BY id"},
      {&s->calls_of,
       "SELECT activation_id, call_id, name, args, allowed, reason, result, error, start_us, end_us "
       "FROM calls WHERE activation_id=? ORDER BY seq"},
  };
  for (const Row& row : rows) {
    sqlite3_stmt* raw = nullptr;
    int rc = sqlite3_prepare_v3(db_, row.sql.c_str(), static_cast<int>(row.sql.size()),
                                SQLITE_PREPARE_PERSISTENT, &raw, nullptr);
    if (rc != SQLITE_OK) return DbError(rc, "cannot prepare \"" + row.sql + "\"");
    row.stmt->reset(raw);
  }
  stmts_ = std::move(s);
  return Ok();
}

Result<void> Journal::CheckBatchUsable() {
  if (batch_open_ && !batch_lost_ && sqlite3_get_autocommit(db_) != 0) batch_lost_ = true;
  if (batch_lost_) {
    return MakeError(ErrorCode::kDatabase,
                     "journal " + path_ +
                         ": the open batch was rolled back by SQLite after an earlier error; call "
                         "Rollback() and fail every answer that depended on the batch");
  }
  return Ok();
}

Result<void> Journal::BeginBatchIfNone() {
  if (auto r = CheckBatchUsable(); !r) return r;
  if (batch_open_) return Ok();
  Use use(stmts_->begin);
  int rc = sqlite3_step(use.get());
  if (rc != SQLITE_DONE) return DbError(rc, "cannot start a batch");
  batch_open_ = true;
  return Ok();
}

void Journal::NoteWriteFailure() {
  // A failed statement (constraint, too big) undoes only itself; disk full, I/O errors and
  // out-of-memory can make SQLite roll back the whole transaction.
  if (batch_open_ && sqlite3_get_autocommit(db_) != 0) batch_lost_ = true;
}

bool Journal::HasPendingBatch() const { return batch_open_; }

Result<void> Journal::Commit() {
  if (auto r = CheckBatchUsable(); !r) return r;
  if (!batch_open_) return Ok();
  Use use(stmts_->commit);
  int rc = sqlite3_step(use.get());
  if (rc != SQLITE_DONE) {
    NoteWriteFailure();
    return DbError(rc, "cannot commit the batch",
                   std::string(AdviceFor(rc)) + "; call Rollback() and answer nothing from this batch");
  }
  batch_open_ = false;
  return Ok();
}

Result<void> Journal::Rollback() {
  batch_open_ = false;
  batch_lost_ = false;
  if (sqlite3_get_autocommit(db_) != 0) return Ok();  // nothing open, or SQLite already rolled back
  Use use(stmts_->rollback);
  int rc = sqlite3_step(use.get());
  if (rc != SQLITE_DONE) return DbError(rc, "cannot roll back the batch");
  return Ok();
}

Result<int64_t> Journal::BeginActivation(const ActivationStart& start) {
  if (auto r = BeginBatchIfNone(); !r) return r.error();
  Use use(stmts_->insert_activation);
  int rc = Binder(use.get())
               .Text(start.flow)
               .Text(start.source_hash)
               .Text(start.manifest_hash)
               .Text(start.input_json)
               .Int(start.start_unix_us)
               .rc();
  if (rc == SQLITE_OK) rc = sqlite3_step(use.get());
  if (rc != SQLITE_DONE) {
    NoteWriteFailure();
    return DbError(rc, "cannot record the start of an activation of flow " + start.flow);
  }
  return static_cast<int64_t>(sqlite3_last_insert_rowid(db_));
}

Result<void> Journal::RecordCall(const CallRecord& call) {
  if (auto r = BeginBatchIfNone(); !r) return r;
  Use use(stmts_->insert_call);
  int rc = Binder(use.get())
               .Int(call.activation_id)
               .Int(call.call_id)
               .Text(call.name)
               .Text(call.args_json)
               .Int(call.allowed ? 1 : 0)
               .Text(call.reason)
               .TextOrNull(call.result_json)
               .TextOrNull(call.error_json)
               .Int(call.start_unix_us)
               .Int(call.end_unix_us)
               .rc();
  if (rc == SQLITE_OK) rc = sqlite3_step(use.get());
  if (rc != SQLITE_DONE) {
    NoteWriteFailure();
    return DbError(rc, "cannot record host call " + call.name + " (call id " + std::to_string(call.call_id) +
                           ") of activation " + std::to_string(call.activation_id));
  }
  return Ok();
}

Result<void> Journal::EndActivation(const ActivationEnd& end) {
  if (auto r = BeginBatchIfNone(); !r) return r;
  Use use(stmts_->end_activation);
  int rc = Binder(use.get())
               .Int(end.end_unix_us)
               .Text(end.outcome)
               .TextOrNull(end.result_json)
               .TextOrNull(end.error_json)
               .Int(end.cpu_us)
               .Int(end.activation_id)
               .rc();
  if (rc == SQLITE_OK) rc = sqlite3_step(use.get());
  if (rc != SQLITE_DONE) {
    NoteWriteFailure();
    return DbError(rc, "cannot record the end of activation " + std::to_string(end.activation_id));
  }
  if (sqlite3_changes(db_) != 1) {
    return MakeError(ErrorCode::kNotFound, "journal " + path_ + ": no unfinished activation " +
                                               std::to_string(end.activation_id) +
                                               " to end (unknown id, or already ended); a bug in the caller");
  }
  return Ok();
}

Result<std::optional<std::string>> Journal::KvGet(const std::string& ns, const std::string& key) {
  if (auto r = CheckBatchUsable(); !r) return r.error();
  Use use(stmts_->kv_get);
  int rc = Binder(use.get()).Text(ns).Text(key).rc();
  if (rc == SQLITE_OK) rc = sqlite3_step(use.get());
  if (rc == SQLITE_ROW) return std::optional<std::string>(ColumnText(use.get(), 0));
  if (rc == SQLITE_DONE) return std::optional<std::string>();
  return DbError(rc, "cannot read kv key in namespace " + ns);
}

Result<void> Journal::KvPut(const std::string& ns, const std::string& key, const std::string& value_json) {
  if (auto r = BeginBatchIfNone(); !r) return r;
  Use use(stmts_->kv_put);
  int rc = Binder(use.get()).Text(ns).Text(key).Text(value_json).rc();
  if (rc == SQLITE_OK) rc = sqlite3_step(use.get());
  if (rc != SQLITE_DONE) {
    NoteWriteFailure();
    return DbError(rc, "cannot write kv key in namespace " + ns);
  }
  return Ok();
}

Result<bool> Journal::KvDelete(const std::string& ns, const std::string& key) {
  if (auto r = BeginBatchIfNone(); !r) return r.error();
  Use use(stmts_->kv_delete);
  int rc = Binder(use.get()).Text(ns).Text(key).rc();
  if (rc == SQLITE_OK) rc = sqlite3_step(use.get());
  if (rc != SQLITE_DONE) {
    NoteWriteFailure();
    return DbError(rc, "cannot delete kv key in namespace " + ns);
  }
  return sqlite3_changes(db_) > 0;
}

Result<std::vector<KvEntry>> Journal::KvList(const std::string& ns, const std::string& prefix, size_t limit) {
  if (auto r = CheckBatchUsable(); !r) return r.error();
  std::vector<KvEntry> entries;
  if (limit == 0) return entries;
  // A byte range, not LIKE/GLOB: no wildcard in a key can widen the match, and the primary key
  // index serves it directly.
  const std::optional<std::string> upper = PrefixSuccessor(prefix);
  Use use(upper ? stmts_->kv_list_bounded : stmts_->kv_list_open);
  Binder bind(use.get());
  bind.Text(ns).Text(prefix);
  if (upper) bind.Text(*upper);
  int rc = bind.Int(LimitParam(limit)).rc();
  if (rc == SQLITE_OK) {
    while ((rc = sqlite3_step(use.get())) == SQLITE_ROW) {
      entries.push_back(KvEntry{ColumnText(use.get(), 0), ColumnText(use.get(), 1)});
    }
  }
  if (rc != SQLITE_DONE) return DbError(rc, "cannot list kv keys in namespace " + ns);
  return entries;
}

Result<std::vector<ActivationRow>> Journal::Activations(std::optional<int64_t> id, size_t limit) {
  if (auto r = CheckBatchUsable(); !r) return r.error();
  std::vector<ActivationRow> rows;
  Use use(id ? stmts_->activation_by_id : stmts_->activations_newest);
  int rc = Binder(use.get()).Int(id ? *id : LimitParam(limit)).rc();
  if (rc == SQLITE_OK) {
    while ((rc = sqlite3_step(use.get())) == SQLITE_ROW) rows.push_back(ReadActivation(use.get()));
  }
  if (rc != SQLITE_DONE) return DbError(rc, "cannot read activations");
  if (id && rows.empty()) {
    return MakeError(ErrorCode::kNotFound, "journal " + path_ + ": has no activation " + std::to_string(*id) +
                                               "; `basal journal` lists the recorded ones");
  }
  return rows;
}

Result<std::vector<CallRow>> Journal::Calls(int64_t activation_id) {
  if (auto r = CheckBatchUsable(); !r) return r.error();
  std::vector<CallRow> rows;
  Use use(stmts_->calls_of);
  int rc = Binder(use.get()).Int(activation_id).rc();
  if (rc == SQLITE_OK) {
    while ((rc = sqlite3_step(use.get())) == SQLITE_ROW) {
      sqlite3_stmt* s = use.get();
      CallRow row;
      row.activation_id = sqlite3_column_int64(s, 0);
      row.call_id = sqlite3_column_int64(s, 1);
      row.name = ColumnText(s, 2);
      row.args_json = ColumnText(s, 3);
      row.allowed = sqlite3_column_int64(s, 4) != 0;
      row.reason = ColumnText(s, 5);
      row.result_json = ColumnText(s, 6);
      row.error_json = ColumnText(s, 7);
      row.start_unix_us = sqlite3_column_int64(s, 8);
      row.end_unix_us = sqlite3_column_int64(s, 9);
      rows.push_back(std::move(row));
    }
  }
  if (rc != SQLITE_DONE) return DbError(rc, "cannot read the host calls of activation " + std::to_string(activation_id));
  return rows;
}

Result<JournalSettings> Journal::Settings() {
  JournalSettings settings;
  int64_t synchronous = 0, busy = 0, version = 0, fk = 0;
  int rc = QueryText(db_, "PRAGMA journal_mode", &settings.journal_mode);
  if (rc == SQLITE_OK) rc = QueryInt(db_, "PRAGMA synchronous", &synchronous);
  if (rc == SQLITE_OK) rc = QueryInt(db_, "PRAGMA busy_timeout", &busy);
  if (rc == SQLITE_OK) rc = QueryInt(db_, "PRAGMA user_version", &version);
  if (rc == SQLITE_OK) rc = QueryInt(db_, "PRAGMA foreign_keys", &fk);
  if (rc != SQLITE_OK) return DbError(rc, "cannot read the connection settings");
  settings.synchronous = static_cast<int>(synchronous);
  settings.busy_timeout_ms = static_cast<int>(busy);
  settings.schema_version = static_cast<int>(version);
  settings.foreign_keys = fk != 0;
  return settings;
}

}  // namespace basal
