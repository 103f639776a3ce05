// Small pieces every SQLite store file uses: statement ownership (Stmt, Use), binding (Binder),
// column reads, single-value queries, and error texts that name the file, SQLite's code and what
// to do about it.
//
//   Use use(stmt);                                   // resets the statement at scope end
//   int rc = Binder(use.get()).Text(ns).Int(n).rc();  // first failure wins
//   if (rc == SQLITE_OK) rc = sqlite3_step(use.get());
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "basal/result.h"

namespace basal::sqlite {

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
  Binder& Text(std::string_view v);
  Binder& TextOrNull(std::string_view v);  // "" is stored as NULL (result/error absent)
  Binder& Int(int64_t v);
  Binder& IntOrNull(const std::optional<int64_t>& v);
  int rc() const { return rc_; }

 private:
  void Keep(int rc, size_t size);
  sqlite3_stmt* s_;
  int i_ = 0;
  int rc_ = SQLITE_OK;
};

std::string ColumnText(sqlite3_stmt* s, int col);  // NULL reads as ""
std::optional<int64_t> ColumnIntOrNull(sqlite3_stmt* s, int col);

// Runs a single-value query (a PRAGMA or a count); returns SQLite's result code.
int QueryInt(sqlite3* db, const char* sql, int64_t* out);
int QueryText(sqlite3* db, const char* sql, std::string* out);
int Prepare(sqlite3* db, const std::string& sql, Stmt* out);  // persistent statement

// Called before every sqlite3_open_v2 of ours. SQLite keeps process-wide memory statistics by
// default: each of its allocations and frees then takes a global mutex and updates counters
// (about 19 of each per activation, docs/performance.md). basal reads none of them (no
// sqlite3_memory_used, sqlite3_status or heap limit), so the first connection a process opens
// turns them off, before SQLite initializes. A process that initialized SQLite before keeps its
// setting: sqlite3_config then refuses, and nothing changes.
void PreferNoMemoryStatistics();

const char* SqliteCodeName(int rc);
// What an operator can do about a failure, by SQLite's primary result code.
const char* AdviceFor(int rc);
// "journal <path>: <what>: <sqlite message> (<SQLITE_CODE>); <advice>", code kDatabase.
Error DbError(const std::string& path, sqlite3* db, int rc, std::string_view what, std::string_view advice);
inline Error DbError(const std::string& path, sqlite3* db, int rc, std::string_view what) {
  return DbError(path, db, rc, what, AdviceFor(rc));
}
// "journal <path>: <message>" with `code`.
Error JournalError(ErrorCode code, const std::string& path, const std::string& message);

// SQLite reads a negative LIMIT as "no limit".
int64_t LimitParam(size_t limit);
// The smallest byte string greater than every string that starts with `prefix`, or nullopt
// when there is none ("" or all 0xFF).
std::optional<std::string> PrefixSuccessor(const std::string& prefix);

// Runs `step` until it returns something other than SQLITE_BUSY (primary code) or about 10 s of
// backoff (1 ms doubling to 100 ms) have passed. For the few operations SQLite does not retry
// through its busy handler: switching to WAL, and taking locks while another process creates or
// converts the same file.
template <typename Step>
int RetryWhileBusy(Step&& step);
void BusyBackoff(int attempt);  // sleeps before attempt `attempt` (1-based)
inline constexpr int kBusyRetries = 110;

template <typename Step>
int RetryWhileBusy(Step&& step) {
  int rc = step();
  for (int attempt = 1; (rc & 0xff) == SQLITE_BUSY && attempt <= kBusyRetries; ++attempt) {
    BusyBackoff(attempt);
    rc = step();
  }
  return rc;
}

}  // namespace basal::sqlite
