// Opening a store from a locator (`--db`, serve's config "db", ModuleOptions::journal_path): a file
// path is an SQLite journal (the embedded default), `postgresql://...` or `postgres://...` a
// PostgreSQL database (docs/postgres.md). Any other `scheme://` is refused with what is accepted.
//
//   auto store = OpenStore({.locator = "postgresql://basal@db.internal/basal"});
//   auto reader = OpenReader("journal.db");              // never creates, migrates or writes
//   log("store " + RedactLocator(locator));              // never prints a password
#pragma once

#include <memory>
#include <string>

#include "basal/durability.h"
#include "basal/result.h"
#include "parent/store/locator.h"
#include "parent/store/store.h"

namespace basal {

struct StoreOptions {
  std::string locator;
  Durability durability = Durability::kNormal;
};

// Opens (creating or migrating what is missing) the store `options.locator` names, for writing.
Result<std::unique_ptr<Store>> OpenStore(const StoreOptions& options);

// Opens a store for reading only: it never creates, initializes, migrates or writes (SQLite: a
// read-only connection; PostgreSQL: a read-only session). kNotFound when there is no journal there.
Result<std::unique_ptr<JournalReader>> OpenReader(const std::string& locator);

}  // namespace basal
