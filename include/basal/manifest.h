// A flow's manifest: the host calls it is granted (default deny) and its budgets.
//
//   {"grants": {"kv.get": {"namespaces": ["orders"]}},
//    "budgets": {"cpu_ms": 1000, "heap_mb": 64, "stack_kb": 1024, "deadline_ms": 60000,
//                "calls_in_flight": 64, "journal_kb": 4096, "log_kb": 1024}}
//
//   Result<Manifest> m = Manifest::Parse(text, registry);   // errors name the bad key's path
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "basal/host_call.h"
#include "basal/result.h"

namespace basal {

// What kind of script runs: an operator-approved flow, or an agent's script under a codemode
// policy. A profile has its own default budgets and memory headroom (docs/manifest.md).
enum class Profile { kFlow, kCodemode };
const char* ProfileName(Profile profile);  // "flow", "codemode"

// Every budget has a default (these are a flow's; DefaultBudgets(kCodemode) has codemode's);
// docs/manifest.md has the table of limits.
struct Budgets {
  std::chrono::milliseconds cpu{10'000};
  uint64_t heap_limit_bytes = 64ull << 20;
  uint64_t stack_limit_bytes = 1024ull << 10;
  std::chrono::milliseconds deadline{60'000};
  // Host calls of one activation waiting for their answer; one more ends it (budget_exhausted,
  // "calls_in_flight").
  uint32_t calls_in_flight = 64;
  // Bytes one activation may add to the journal (its call records, each already capped); past
  // it a call ends the activation (budget_exhausted, "journal") and a log line is dropped.
  uint64_t journal_bytes = 4ull << 20;
  // Bytes of log lines one activation may write; later lines are dropped and counted.
  uint64_t log_bytes = 1ull << 20;
};

// The defaults a manifest's unwritten budgets take. Codemode's suit short agent scripts that
// mostly wait on their tools: cpu_ms 5000, heap_mb 64, stack_kb 512, deadline_ms 60000,
// calls_in_flight 32, journal_kb 2048, log_kb 256.
Budgets DefaultBudgets(Profile profile);

class Manifest {
 public:
  // Parses and validates against the registry: unknown keys, wrong types, out-of-range budgets,
  // grants of unknown host calls and bad constraints are errors naming the path of the bad key.
  // `profile` chooses the defaults of unwritten budgets (DefaultBudgets).
  static Result<Manifest> Parse(std::string_view text, const HostCallRegistry& registry,
                                Profile profile = Profile::kFlow);

  // nullopt: allowed. Else the reason the call is denied (journaled, and the script's
  // PermissionDenied message).
  std::optional<std::string> Authorize(const HostCallSpec& spec, const Json& args) const;
  // The same for host call `name` as the script called it (a family spec's member:
  // "mcp.fs.read_text_file", granted by its own grant or by "mcp.fs.*").
  std::optional<std::string> Authorize(const HostCallSpec& spec, std::string_view name, const Json& args) const;
  // The key of the grant that covers host call `name` ("kv.get", or "mcp.fs.*" for
  // "mcp.fs.read_text_file" when only the wildcard is granted); empty when none does.
  std::string GrantKeyFor(std::string_view name) const;
  // That grant's constraints, or null.
  const Json* GrantFor(std::string_view name) const;
  // The grant that covers `name`, key and constraints together (one look-up, no key copied), or
  // null: what GrantKeyFor and GrantFor answer, for a caller that needs both (the call gate).
  const std::pair<const std::string, Json>* GrantEntryFor(std::string_view name) const;
  // Authorize with the grant already looked up (GrantEntryFor's constraints, or null).
  std::optional<std::string> AuthorizeWith(const HostCallSpec& spec, std::string_view name, const Json* grant,
                                           const Json& args) const;

  // A codemode policy's downstream MCP servers (docs/codemode.md), by name: each
  // {"command", "args", "env", "cwd", "call_timeout_ms", "start_timeout_ms"} with the defaults filled
  // in. Empty for a flow (a flow's manifest may not list them).
  const std::map<std::string, Json>& mcp_servers() const { return mcp_servers_; }

  // "durable": true: a run of this flow is resumed from the journal after its host died, and its
  // script sees journaled clocks and seeded randomness (docs/durable.md). Flows only.
  bool durable() const { return durable_; }
  // "retry" (durable flows only; docs/durable.md#retries): a failed attempt of a run whose outcome
  // is in `on` is retried after a backoff, up to max_attempts attempts in all. nullopt: no retry.
  struct RetryPolicy {
    int max_attempts = 1;                       // 1..100, the first attempt included
    std::chrono::milliseconds initial{1000};    // the wait before the second attempt
    double factor = 2.0;                        // each further wait is this many times the last (1..10)
    std::chrono::milliseconds max{3'600'000};   // no wait is longer (<= 365 days)
    std::vector<std::string> on;                // outcome names ("script_error", "deadline", ...)
    // The wait before attempt `next` (2, 3, ...).
    std::chrono::milliseconds Backoff(int64_t next) const;
    bool RetriesOn(std::string_view outcome) const;
  };
  const std::optional<RetryPolicy>& retry() const { return retry_; }
  const Budgets& budgets() const { return budgets_; }
  const std::map<std::string, Json>& grants() const { return grants_; }
  // What it was parsed as: a flow's manifest, or a codemode policy (its errors say "policy" then).
  Profile profile() const { return profile_; }
  // "sha256:<hex>" of the canonical form (sorted keys, defaults filled in).
  const std::string& hash() const { return hash_; }
  std::string Canonical() const;

 private:
  std::map<std::string, Json> grants_;
  std::map<std::string, Json> mcp_servers_;
  Budgets budgets_;
  bool durable_ = false;
  Profile profile_ = Profile::kFlow;
  std::optional<RetryPolicy> retry_;
  std::string hash_;
};

// "sha256:<hex>" of bytes.
std::string Sha256Hex(std::string_view data);

}  // namespace basal
