// The PostgreSQL backend of the store (store.h; docs/postgres.md): journal, kv, approvals, runs and
// serve's tables in a schema `basal` of the operator's database, on one connection in libpq's
// pipeline mode. Its commit never blocks the loop: StartCommit sends COMMIT and returns, the
// owner's loop watches io() and PollCommit hears the outcome. Reads and the writes that answer
// something are synchronous round trips; journal writes made while a commit is in flight are sent
// without waiting (their refusal fails their batch at its commit).
//
//   auto store = basal::OpenPostgresStore({.uri = "postgresql://basal@db.internal/basal"});
//   auto reader = basal::OpenPostgresReader("postgresql://auditor@db.internal/basal");  // never writes
#pragma once

#include <memory>
#include <string>

#include "basal/durability.h"
#include "basal/result.h"
#include "parent/store/store.h"

namespace basal {

struct PostgresStoreOptions {
  std::string uri;  // postgresql://... or postgres://..., as libpq reads it
  // normal: the server's own synchronous_commit; full: synchronous_commit = on for basal's session
  // (a commit is flushed to the server's disk, whatever the server's default).
  Durability durability = Durability::kNormal;
};

// Connects, creates the schema `basal` and its tables when missing (under an advisory lock: safe
// when many processes open one new database at once), migrates an older one, refuses a newer one
// or a `basal` schema that is not basal's. kIo when it cannot connect; kDatabase for what the
// server refuses. No message ever holds the locator's password.
Result<std::unique_ptr<Store>> OpenPostgresStore(const PostgresStoreOptions& options);

// A read-only session (default_transaction_read_only): never creates or migrates anything; a role
// that may only read the schema can use it. kNotFound when the database has no basal store.
Result<std::unique_ptr<JournalReader>> OpenPostgresReader(const std::string& uri);

}  // namespace basal
