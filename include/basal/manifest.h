// A flow's manifest: the host calls it is granted (default deny) and its budgets.
//
//   {"grants": {"kv.get": {"namespaces": ["orders"]}},
//    "budgets": {"cpu_ms": 1000, "heap_mb": 64, "stack_kb": 1024, "deadline_ms": 60000}}
//
//   Result<Manifest> m = Manifest::Parse(text, registry);   // errors name the bad key's path
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "basal/host_call.h"
#include "basal/result.h"

namespace basal {

struct Budgets {
  std::chrono::milliseconds cpu{10'000};
  uint64_t heap_limit_bytes = 64ull << 20;
  uint64_t stack_limit_bytes = 1024ull << 10;
  std::chrono::milliseconds deadline{60'000};
};

class Manifest {
 public:
  // Parses and validates against the registry: unknown keys, wrong types, out-of-range budgets,
  // grants of unknown host calls and bad constraints are errors naming the path of the bad key.
  static Result<Manifest> Parse(std::string_view text, const HostCallRegistry& registry);

  // nullopt: allowed. Else the reason the call is denied (journaled, and the script's
  // PermissionDenied message).
  std::optional<std::string> Authorize(const HostCallSpec& spec, const Json& args) const;

  const Budgets& budgets() const { return budgets_; }
  const std::map<std::string, Json>& grants() const { return grants_; }
  // "sha256:<hex>" of the canonical form (sorted keys, defaults filled in).
  const std::string& hash() const { return hash_; }
  std::string Canonical() const;

 private:
  std::map<std::string, Json> grants_;
  Budgets budgets_;
  std::string hash_;
};

// "sha256:<hex>" of bytes.
std::string Sha256Hex(std::string_view data);

}  // namespace basal
