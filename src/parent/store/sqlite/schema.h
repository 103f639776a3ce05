// The SQLite journal's file format: what a file is (header), its schema (version 10), creating it,
// and migrating version 1 to 9 files. docs/journal.md describes the schema for people.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <string>

#include "basal/durability.h"
#include "basal/result.h"

namespace basal::sqlite {

inline constexpr int kSchemaVersion = 10;
inline constexpr int kOldestReadableSchemaVersion = 1;
inline constexpr int kApplicationId = 0x6261736c;  // "basl" in the SQLite header
inline constexpr int kBusyTimeoutMs = 5000;

// The header fields that say what a file is, read in ONE statement (one read transaction): read
// field by field, a file another process was creating could show its schema without its
// application id and look foreign.
struct Header {
  int64_t application_id = 0, user_version = 0, objects = 0;
  bool empty() const { return application_id == 0 && user_version == 0 && objects == 0; }
};
int ReadHeader(sqlite3* db, Header* header);  // SQLite's result code

// Ok for an empty file or a basal journal of a version this basal reads; else why not (the file
// is left unchanged): not a basal journal, newer schema, damaged.
Result<void> CheckHeader(const std::string& path, const Header& header);

// Makes the file a current journal: WAL, `durability`, foreign keys; creates the schema in an
// empty file or migrates a version 1 to 9 file, under the write lock, re-checked inside it. Every step
// that SQLite may refuse with SQLITE_BUSY while other processes do the same is retried.
Result<void> InitializeForWriting(sqlite3* db, const std::string& path, Durability durability);

// The journal id from the meta table (schema 2).
Result<std::string> ReadJournalId(sqlite3* db, const std::string& path);

// 16 random bytes (getrandom) as 32 lowercase hex digits.
std::string NewJournalId();

// How a reader selects rows of either schema version into the same columns.
std::string ActivationSelectSql(int64_t schema_version);  // "SELECT <20 columns> FROM activations"
std::string CallSelectSql(int64_t schema_version);        // "SELECT <16 columns>, seq FROM calls"
std::string RunSelectSql(int64_t schema_version);         // "SELECT <21 columns> FROM runs" (schema 5 on)

}  // namespace basal::sqlite
