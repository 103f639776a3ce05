// Opening the backend a locator names (see open.h).
#include "parent/store/open.h"

#include "parent/store/postgres/pg_store.h"
#include "parent/store/sqlite/sqlite_store.h"

namespace basal {

Result<std::unique_ptr<Store>> OpenStore(const StoreOptions& options) {
  auto locator = ParseLocator(options.locator);
  if (!locator) return locator.error();
  switch (locator->kind) {
    case StoreKind::kSqlite: return OpenSqliteStore({locator->text, options.durability});
    case StoreKind::kPostgres: return OpenPostgresStore({locator->text, options.durability});
  }
  return MakeError(ErrorCode::kInternal, "unknown store kind");
}

Result<std::unique_ptr<JournalReader>> OpenReader(const std::string& locator) {
  auto parsed = ParseLocator(locator);
  if (!parsed) return parsed.error();
  switch (parsed->kind) {
    case StoreKind::kSqlite: return OpenSqliteReader(parsed->text);
    case StoreKind::kPostgres: return OpenPostgresReader(parsed->text);
  }
  return MakeError(ErrorCode::kInternal, "unknown store kind");
}

}  // namespace basal
