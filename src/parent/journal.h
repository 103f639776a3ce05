// The journal: one SQLite database (WAL) holding every activation, every host call with its
// decision, and the kv store. Journal and kv share one connection and one transaction, so a
// kv.put and the journal entry of the host call that made it commit together or not at all.
//
// Writes join a batch: one BEGIN IMMEDIATE transaction, opened lazily by the first write and
// ended by Commit(). The parent's event loop journals everything one turn of the loop produced,
// commits once, and only then sends the answers that depend on it (group commit):
//
//   auto journal = Journal::Open("/var/lib/basal/journal.db", Durability::kNormal);
//   if (!journal) return journal.error();
//   Result<int64_t> id = (*journal)->BeginActivation({flow, src_hash, manifest_hash, input, now});
//   ... (*journal)->RecordCall(call); (*journal)->KvPut("orders", "o-1", "{\"n\":1}"); ...
//   if (auto c = (*journal)->Commit(); !c) {
//     (void)(*journal)->Rollback();   // nothing of the batch happened; answer nothing from it
//     ...
//   }
//   // now send the answers
//
// Schema, durability and sqlite3 queries for reading it by hand: docs/journal.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "basal/durability.h"
#include "basal/result.h"

struct sqlite3;

namespace basal {

struct ActivationStart {
  std::string flow;           // flow name (e.g. the script's file name)
  std::string source_hash;    // "sha256:<hex>" of the flow source (computed by the caller)
  std::string manifest_hash;  // "sha256:<hex>" of the canonical manifest
  std::string input_json;     // the activation's input, JSON text
  int64_t start_unix_us;
};

struct ActivationEnd {
  int64_t activation_id;
  int64_t end_unix_us;
  std::string outcome;      // "ok" or an error kind: "script_error", "protocol_violation",
                            // "worker_crashed", "worker_confinement", "deadline", "budget_exhausted", ...
  std::string result_json;  // when ok: the result (JSON text); else empty
  std::string error_json;   // when not ok: {"kind":..,"message":..,...} JSON text; else empty
  int64_t cpu_us = 0;       // CPU the worker reported, 0 if unknown
};

struct CallRecord {
  int64_t activation_id;
  int64_t call_id;          // the worker's id for this call, unique within the activation
  std::string name;         // host-call name, e.g. "kv.get"
  std::string args_json;
  bool allowed;             // decision
  std::string reason;       // why denied (or "granted by manifest"); never empty
  std::string result_json;  // when the handler succeeded
  std::string error_json;   // when denied or the handler failed: {"name":..,"message":..}
  int64_t start_unix_us, end_unix_us;
};

struct ActivationRow {
  int64_t id;
  std::string flow, source_hash, manifest_hash, input_json;
  int64_t start_unix_us;
  std::optional<int64_t> end_unix_us;
  std::string outcome /* "" if unfinished */, result_json, error_json;
  int64_t cpu_us;
};

struct CallRow {
  int64_t activation_id, call_id;
  std::string name, args_json;
  bool allowed;
  std::string reason, result_json, error_json;
  int64_t start_unix_us, end_unix_us;
};

struct KvEntry {
  std::string key;
  std::string value_json;
};

// What the journal's own connection actually has in force (PRAGMAs read back, not assumed).
struct JournalSettings {
  std::string journal_mode;  // always "wal"
  int synchronous;           // 1 = NORMAL, 2 = FULL
  int busy_timeout_ms;
  int schema_version;        // PRAGMA user_version
  bool foreign_keys;
};

// One SQLite connection. Writes join an open batch (one transaction, BEGIN IMMEDIATE, opened
// lazily by the first write); Commit() ends it. The caller (the parent's event loop) commits a
// batch before it sends any answer that depends on it, so many activations' entries share one
// commit (group commit). Not thread-safe: one owner.
//
// Error codes: kIo when the file cannot be opened, kNotFound for an unknown activation,
// kDatabase for everything SQLite refuses (not a journal, newer schema, disk full, busy, a
// duplicate call id, a batch SQLite rolled back on its own).
//
// If SQLite rolls a batch back on its own (disk full, I/O error), every later call fails until
// Rollback(): nothing can silently land outside the batch whose answers were already promised.
class Journal {
 public:
  static constexpr int kSchemaVersion = 1;
  static constexpr int kApplicationId = 0x6261736c;  // "basl" in the SQLite header
  static constexpr int kBusyTimeoutMs = 5000;
  // WAL checkpoints (docs/journal.md). Past kCheckpointPages a checkpointer thread, on its own
  // connection, copies the WAL into the database, so the bulk of a checkpoint's fsyncs never stalls
  // a commit. The WAL starts over only once all of it is copied, which a stream of commits never
  // allows a background pass to finish; so once a pass leaves at most kInlineCheckpointMaxTailPages
  // behind, the owner's commit copies that tail itself (a short fsync). Past kWalHardLimitPages it
  // checkpoints inline whatever the tail, as SQLite would.
  static constexpr int kCheckpointPages = 1000;
  static constexpr int kInlineCheckpointMaxTailPages = 256;
  static constexpr int kWalHardLimitPages = 16000;

  static Result<std::unique_ptr<Journal>> Open(const std::string& path, Durability durability);
  ~Journal();  // commits nothing: an uncommitted batch is rolled back (its answers were never sent)
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  Result<int64_t> BeginActivation(const ActivationStart& start);  // returns the new activation id
  Result<void> RecordCall(const CallRecord& call);
  Result<void> EndActivation(const ActivationEnd& end);  // kNotFound unless the activation is unfinished
  Result<void> Commit();  // commit the open batch; a no-op when none is open
  bool HasPendingBatch() const;
  Result<void> Rollback();  // after a failed commit: the batch is gone, nothing was answered

  // kv store: namespaces and keys are strings (compared as raw bytes); value is any JSON value as
  // text (the caller validates it). Reads see the batch's own uncommitted writes.
  Result<std::optional<std::string>> KvGet(const std::string& ns, const std::string& key);
  Result<void> KvPut(const std::string& ns, const std::string& key, const std::string& value_json);
  Result<bool> KvDelete(const std::string& ns, const std::string& key);  // true if a key was removed
  // Keys that start with `prefix` (exact bytes; "" matches all), in byte order, at most `limit`.
  Result<std::vector<KvEntry>> KvList(const std::string& ns, const std::string& prefix, size_t limit);

  // Reading (for `basal journal`). With `id`: that activation alone (kNotFound if it does not
  // exist), `limit` ignored. Without: the newest `limit` activations, oldest first (newest last).
  Result<std::vector<ActivationRow>> Activations(std::optional<int64_t> id, size_t limit);
  Result<std::vector<CallRow>> Calls(int64_t activation_id);  // in call-record order
  Result<JournalSettings> Settings();
  const std::string& path() const;

 private:
  struct Statements;
  class Checkpointer;
  explicit Journal(std::string path);
  static int OnWalCommit(void* journal, sqlite3* db, const char* schema, int wal_pages);

  Result<void> Configure(Durability durability);
  Result<void> Prepare();
  Result<void> BeginBatchIfNone();
  Result<void> CheckBatchUsable();
  void NoteWriteFailure();
  Error DbError(int rc, std::string_view what) const;
  Error DbError(int rc, std::string_view what, std::string_view advice) const;

  std::string path_;
  sqlite3* db_ = nullptr;
  std::unique_ptr<Statements> stmts_;
  std::unique_ptr<Checkpointer> checkpointer_;  // null when SQLite is built without threads
  bool batch_open_ = false;  // we issued BEGIN and have not committed or rolled back
  bool batch_lost_ = false;  // SQLite rolled the open batch back on its own; Rollback() clears
};

}  // namespace basal
