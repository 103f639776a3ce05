// The PostgreSQL store's schema: the same tables and meaning as the SQLite journal's schema 7
// (sqlite/schema.cpp, docs/journal.md), and version 8's hosts and queued runs' holders (several
// hosts, PostgreSQL only), in a schema named `basal` of the operator's database, with the version
// kept in basal.meta and migrations applied in order under an advisory lock, as SQLite's are under
// its write lock. docs/postgres.md describes it for people.
//
// Adding a column or a table (a new schema version) is one step here: append it to kMigrations
// (sql run in one transaction from the version before), raise kSchemaVersion, and select the new
// column in the row readers (read_queries.cpp).
#pragma once

#include <libpq-fe.h>

#include <string>

#include "basal/result.h"

namespace basal::pg {

inline constexpr int kSchemaVersion = 8;
// The advisory lock that creating or migrating the schema holds ("basl", as SQLite's application id).
inline constexpr int64_t kSchemaLockKey = 0x6261736c;
// The advisory lock every kv write of a batch takes (held to its commit): kv writers, on every host,
// one batch at a time, as in SQLite (docs/postgres.md, "Locks").
inline constexpr int64_t kKvLockKey = 0x6261736c6b76;

// Makes the database hold a current basal schema: creates it when missing, migrates an older one,
// refuses a newer one, a `basal` schema that is not basal's, or one that is damaged, leaving them
// unchanged. Safe when many processes open the same new database at once. With `read_only`, it
// creates and migrates nothing: kNotFound when there is no basal store, kDatabase when it is older
// than this basal reads.
Result<void> PrepareSchema(PGconn* conn, const std::string& shown, bool read_only);

// The journal id from basal.meta.
Result<std::string> ReadJournalId(PGconn* conn, const std::string& shown);

}  // namespace basal::pg
