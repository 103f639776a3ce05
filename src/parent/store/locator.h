// What a store locator names (`--db`, serve's config "db"): a file path is an SQLite journal (the
// embedded default), `postgresql://...` or `postgres://...` a PostgreSQL database
// (docs/postgres.md); any other `scheme://` is refused. Pure: basal serve's config parser uses it.
//
//   auto locator = ParseLocator("postgresql://basal:pw@db/basal");  // kind kPostgres
//   log("store " + RedactLocator(text));                             // "postgresql://basal:***@db/basal"
#pragma once

#include <string>
#include <string_view>

#include "basal/result.h"

namespace basal {

enum class StoreKind { kSqlite, kPostgres };

struct Locator {
  StoreKind kind = StoreKind::kSqlite;
  std::string text;  // the path, or the URI exactly as given (libpq reads it)
};

// kInvalidArgument for an empty locator or an unknown scheme (the message says what is accepted,
// without the locator's password).
Result<Locator> ParseLocator(std::string_view locator);

// `locator` fit to print: the password of a URI (user:PASSWORD@, ?password=..., ?sslpassword=...)
// replaced by "***". A path is returned as it is.
std::string RedactLocator(std::string_view locator);

}  // namespace basal
