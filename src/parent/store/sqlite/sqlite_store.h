// The SQLite backend of the store (store.h): one file holds the journal, the kv store, the
// approvals and basal serve's runs, tokens and schedule marks.
//
//   auto store = basal::OpenSqliteStore({.path = "/var/lib/basal/journal.db"});
//   if (!store) return store.error();
//   (*store)->journal().RecoverAbandoned(basal::ThisProcessOwner(), now_us);
//
//   auto reader = basal::OpenSqliteReader("/var/lib/basal/journal.db");   // never writes
//
// Files: a new journal file is created 0600 before SQLite opens it, so its -wal and -shm (which
// SQLite creates with the database file's mode) are 0600 too. EnsurePrivateDirectory makes
// missing directories 0700. The schema, WAL, checkpoints and reading by hand: docs/journal.md.
#pragma once

#include <memory>
#include <string>

#include "basal/durability.h"
#include "basal/result.h"
#include "parent/store/store.h"

namespace basal {

struct SqliteStoreOptions {
  std::string path;
  Durability durability = Durability::kNormal;
};

// Opens (creating it if missing) the journal at `options.path` for writing: refuses a file that
// is not SQLite, an SQLite file that is not a basal journal, or a newer schema, all left
// unchanged; migrates an older schema (1 to 4) in one transaction. Safe when many processes open the
// same new file at once. Error codes: kIo when the file cannot be opened or created, kDatabase
// for what SQLite or the file refuses.
//
// If SQLite rolls a batch back on its own (disk full, I/O error), every later call fails until
// Rollback(): nothing can silently land outside the batch whose answers were already promised.
Result<std::unique_ptr<Store>> OpenSqliteStore(const SqliteStoreOptions& options);

// Opens a journal for reading only: it never creates, initializes, migrates or changes the file
// (SQLITE_OPEN_READONLY, no pragma writes, no checkpoints). Works for a user who may only read the
// file and its directory (docs/journal.md, "Reading it"). Reads schema 1 to 5 files as they are.
// kNotFound when the file does not exist; kDatabase when it is empty, not SQLite, not a basal
// journal, or newer.
Result<std::unique_ptr<JournalReader>> OpenSqliteReader(const std::string& path);

// The statement that moves a host call's record on (JournalStore::UpdateCall: the answer of every
// external call), named for its test: its program builds no ephemeral table.
extern const char* const kSqliteUpdateCallSql;

// mkdir -p where every directory it creates gets mode 0700; existing ones are left as they are.
// kIo naming the directory when one cannot be made or `dir` is not a directory.
Result<void> EnsurePrivateDirectory(const std::string& dir);

// WAL checkpoints (docs/journal.md). Past kCheckpointPages a checkpointer thread, on its own
// connection, copies the WAL into the database, so the bulk of a checkpoint's fsyncs never stalls
// a commit. The WAL starts over only once all of it is copied, which a stream of commits never
// allows a background pass to finish; so once a pass leaves at most kInlineCheckpointMaxTailPages
// behind, the owner's commit copies that tail itself (a short fsync). Past kWalHardLimitPages it
// checkpoints inline whatever the tail, as SQLite would.
inline constexpr int kCheckpointPages = 1000;
inline constexpr int kInlineCheckpointMaxTailPages = 256;
inline constexpr int kWalHardLimitPages = 16000;

// What a SQLite store's own connection actually has in force (PRAGMAs read back, not assumed).
struct SqliteSettings {
  std::string journal_mode;  // always "wal"
  int synchronous = 0;       // 1 = NORMAL, 2 = FULL
  int busy_timeout_ms = 0;
  int schema_version = 0;    // PRAGMA user_version
  bool foreign_keys = false;
};
// kInvalidArgument if `store` is not a SQLite store.
Result<SqliteSettings> ReadSqliteSettings(Store& store);

}  // namespace basal
