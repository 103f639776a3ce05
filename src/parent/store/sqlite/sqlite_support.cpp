// See sqlite_support.h.
#include "parent/store/sqlite/sqlite_support.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <mutex>
#include <thread>

namespace basal::sqlite {

Binder& Binder::Text(std::string_view v) {
  Keep(sqlite3_bind_text(s_, ++i_, v.data(), static_cast<int>(v.size()), SQLITE_STATIC), v.size());
  return *this;
}

Binder& Binder::TextOrNull(std::string_view v) {
  if (v.empty()) {
    Keep(sqlite3_bind_null(s_, ++i_), 0);
    return *this;
  }
  return Text(v);
}

Binder& Binder::Int(int64_t v) {
  Keep(sqlite3_bind_int64(s_, ++i_, v), 0);
  return *this;
}

Binder& Binder::IntOrNull(const std::optional<int64_t>& v) {
  if (!v) {
    Keep(sqlite3_bind_null(s_, ++i_), 0);
    return *this;
  }
  return Int(*v);
}

void Binder::Keep(int rc, size_t size) {
  if (size > static_cast<size_t>(INT_MAX)) rc = SQLITE_TOOBIG;
  if (rc_ == SQLITE_OK) rc_ = rc;
}

std::string ColumnText(sqlite3_stmt* s, int col) {
  const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(s, col));
  if (text == nullptr) return {};
  return std::string(text, static_cast<size_t>(sqlite3_column_bytes(s, col)));
}

std::optional<int64_t> ColumnIntOrNull(sqlite3_stmt* s, int col) {
  if (sqlite3_column_type(s, col) == SQLITE_NULL) return std::nullopt;
  return sqlite3_column_int64(s, col);
}

int Prepare(sqlite3* db, const std::string& sql, Stmt* out) {
  sqlite3_stmt* raw = nullptr;
  const int rc =
      sqlite3_prepare_v3(db, sql.c_str(), static_cast<int>(sql.size()), SQLITE_PREPARE_PERSISTENT, &raw, nullptr);
  out->reset(raw);
  return rc;
}

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

void PreferNoMemoryStatistics() {
  static std::once_flag once;
  std::call_once(once, [] { sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0); });
}

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

Error DbError(const std::string& path, sqlite3* db, int rc, std::string_view what, std::string_view advice) {
  const char* detail = (db != nullptr && sqlite3_extended_errcode(db) == rc) ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  std::string message = "journal " + path + ": " + std::string(what) + ": " + detail + " (" + SqliteCodeName(rc) +
                        "); " + std::string(advice);
  return MakeError(ErrorCode::kDatabase, std::move(message));
}

Error JournalError(ErrorCode code, const std::string& path, const std::string& message) {
  return MakeError(code, "journal " + path + ": " + message);
}

int64_t LimitParam(size_t limit) {
  return limit > static_cast<size_t>(INT64_MAX) ? -1 : static_cast<int64_t>(limit);
}

std::optional<std::string> PrefixSuccessor(const std::string& prefix) {
  std::string s = prefix;
  while (!s.empty() && static_cast<unsigned char>(s.back()) == 0xff) s.pop_back();
  if (s.empty()) return std::nullopt;
  s.back() = static_cast<char>(static_cast<unsigned char>(s.back()) + 1);
  return s;
}

void BusyBackoff(int attempt) {
  const int shift = attempt < 8 ? attempt - 1 : 7;
  const int ms = std::min(100, 1 << shift);
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

}  // namespace basal::sqlite
