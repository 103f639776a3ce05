// Locators: which backend a `--db` names, and how to print one (see locator.h).
#include "parent/store/locator.h"

#include <cctype>

namespace basal {
namespace {

// The scheme of "scheme://...", lowercased; "" when `locator` does not start with one (a path,
// even one holding "://" further on, like "./a://b").
std::string SchemeOf(std::string_view locator) {
  const size_t sep = locator.find("://");
  if (sep == std::string_view::npos || sep == 0) return "";
  std::string scheme;
  for (size_t i = 0; i < sep; ++i) {
    const unsigned char c = static_cast<unsigned char>(locator[i]);
    const bool ok = std::isalpha(c) || (i > 0 && (std::isdigit(c) || c == '+' || c == '-' || c == '.'));
    if (!ok) return "";
    scheme += static_cast<char>(std::tolower(c));
  }
  return scheme;
}

}  // namespace

Result<Locator> ParseLocator(std::string_view locator) {
  if (locator.empty()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "no store given: give a file path (SQLite) or a postgresql:// locator (docs/postgres.md)");
  }
  const std::string scheme = SchemeOf(locator);
  if (scheme.empty()) return Locator{StoreKind::kSqlite, std::string(locator)};
  if (scheme == "postgresql" || scheme == "postgres") return Locator{StoreKind::kPostgres, std::string(locator)};
  return MakeError(ErrorCode::kInvalidArgument,
                   "store " + RedactLocator(locator) + ": unknown scheme \"" + scheme +
                       "://\"; give a file path (an SQLite journal) or a postgresql:// (or postgres://) locator");
}

std::string RedactLocator(std::string_view locator) {
  if (SchemeOf(locator).empty()) return std::string(locator);
  std::string out(locator);
  const size_t authority = out.find("://") + 3;
  size_t authority_end = out.find_first_of("/?", authority);
  if (authority_end == std::string::npos) authority_end = out.size();
  // user:password@host: the userinfo ends at the authority's last '@'.
  const size_t at = out.rfind('@', authority_end == 0 ? 0 : authority_end - 1);
  if (at != std::string::npos && at >= authority) {
    const size_t colon = out.find(':', authority);
    if (colon != std::string::npos && colon < at) {
      out.replace(colon + 1, at - colon - 1, "***");
      authority_end = out.find_first_of("/?", authority);
      if (authority_end == std::string::npos) authority_end = out.size();
    }
  }
  // ?password=...&sslpassword=...: each such value.
  size_t query = out.find('?', authority_end == out.size() ? authority : authority_end);
  if (query == std::string::npos) return out;
  for (size_t start = query + 1; start < out.size();) {
    size_t end = out.find('&', start);
    if (end == std::string::npos) end = out.size();
    const size_t eq = out.find('=', start);
    if (eq != std::string::npos && eq < end) {
      const std::string key = out.substr(start, eq - start);
      if (key == "password" || key == "sslpassword") {
        out.replace(eq + 1, end - eq - 1, "***");
        end = eq + 4;
      }
    }
    start = end + 1;
  }
  return out;
}

}  // namespace basal
