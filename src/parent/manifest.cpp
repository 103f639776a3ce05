// Manifest parsing, authorization and hashing (see include/basal/manifest.h and docs/manifest.md),
// (Sha256Hex is in sha256.cpp, with the store that keeps texts by it).
#include "basal/manifest.h"

#include <algorithm>
#include <array>
#include <new>
#include <optional>
#include <cstring>
#include <set>
#include <utility>
#include <vector>

#include "parent/secrets/secret_store.h"
#include "text/strict_json.h"

namespace basal {
namespace {

constexpr size_t kShownValueBytes = 60;

// A value as the operator wrote it, for "(got ...)"; long values are cut.
std::string Shown(const Json& value) {
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > kShownValueBytes) {
    size_t cut = kShownValueBytes;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // UTF-8 boundary
    text = text.substr(0, cut) + "...";
  }
  return text;
}

Error Invalid(const std::string& path, const std::string& what) {
  return MakeError(ErrorCode::kInvalidArgument, path + ": " + what);
}

std::string Quoted(std::string_view text) {
  return Json(std::string(text)).dump(-1, ' ', false, Json::error_handler_t::replace);
}

// Path of a key below `parent` ("" is the top level). Names made of the usual characters are
// written as is (grants.kv.get); anything else is quoted so the path stays unambiguous.
std::string ChildPath(const std::string& parent, const std::string& key) {
  bool plain = !key.empty();
  for (char c : key) {
    const bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
    if (!ok) plain = false;
  }
  if (parent.empty()) return plain ? key : "manifest[" + Quoted(key) + "]";
  return plain ? parent + "." + key : parent + "[" + Quoted(key) + "]";
}

// A manifest is a few levels deep; printing and checking deeper values would recurse.
constexpr size_t kMaxManifestDepth = 64;

// The path of the first `count` containers of `where` ("manifest" for none).
std::string PathOf(const std::vector<StrictJsonWatch::Step>& where, size_t count) {
  std::string path;
  for (size_t i = 0; i < count && i < where.size(); ++i) {
    const StrictJsonWatch::Step& step = where[i];
    if (step.is_array) {
      path = (path.empty() ? "manifest" : path) + "[" + std::to_string(step.index) + "]";
    } else {
      path = ChildPath(path, step.key);
    }
  }
  return path.empty() ? "manifest" : path;
}

// Duplicate keys are an error, not "last one wins" (a second "grants" must not silently replace
// the first one the operator reviewed), and nesting is bounded: src/text/strict_json.h.
std::optional<Error> StrictJsonProblem(const StrictJsonWatch& watch) {
  const auto& where = watch.where();
  switch (watch.problem()) {
    case StrictJsonWatch::Problem::kNone:
      return std::nullopt;
    case StrictJsonWatch::Problem::kTooDeep:
      return Invalid(PathOf(where, where.size()), "nested deeper than " + std::to_string(watch.max_depth()) + " levels");
    case StrictJsonWatch::Problem::kDuplicateKey:
      return Invalid(PathOf(where, where.size() - 1),
                     "duplicate key " + Quoted(where.back().key) + " (each key may appear once)");
  }
  return std::nullopt;
}

// nlohmann's own message, without its "[json.exception.parse_error.101] " prefix.
class SyntaxErrorProbe : public nlohmann::json_sax<Json> {
 public:
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t&) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t position, const std::string& /*last_token*/,
                   const nlohmann::detail::exception& ex) override {
    std::string what = ex.what();
    if (auto close = what.find("] "); what.rfind("[json.exception.", 0) == 0 && close != std::string::npos) {
      what = what.substr(close + 2);
    }
    message = what.find("line ") != std::string::npos ? what : what + " (at byte " + std::to_string(position) + ")";
    return false;
  }
  std::string message;
};

std::string DescribeSyntaxError(std::string_view text) {
  SyntaxErrorProbe probe;
  (void)Json::sax_parse(text.begin(), text.end(), &probe);
  return probe.message.empty() ? "syntax error" : probe.message;
}

struct BudgetRule {
  const char* key;
  int64_t min, max;
};
constexpr BudgetRule kCpuMs{"cpu_ms", 1, 3'600'000};
constexpr BudgetRule kHeapMb{"heap_mb", 1, 4096};
constexpr BudgetRule kStackKb{"stack_kb", 64, 4096};
constexpr BudgetRule kDeadlineMs{"deadline_ms", 1, 3'600'000};
constexpr BudgetRule kCallsInFlight{"calls_in_flight", 1, 1024};
constexpr BudgetRule kJournalKb{"journal_kb", 16, 65536};
constexpr BudgetRule kLogKb{"log_kb", 0, 65536};

Result<int64_t> BudgetValue(const Json& value, const BudgetRule& rule) {
  const std::string path = std::string("budgets.") + rule.key;
  const std::string expected =
      "must be an integer from " + std::to_string(rule.min) + " to " + std::to_string(rule.max);
  if (value.is_number_unsigned()) {
    const uint64_t v = value.get<uint64_t>();
    if (v >= static_cast<uint64_t>(rule.min) && v <= static_cast<uint64_t>(rule.max)) return static_cast<int64_t>(v);
  } else if (value.is_number_integer()) {
    const int64_t v = value.get<int64_t>();
    if (v >= rule.min && v <= rule.max) return v;
  }
  return Invalid(path, expected + " (got " + Shown(value) + ")");
}

Result<Budgets> ParseBudgets(const Json& budgets, Profile profile) {
  if (!budgets.is_object()) return Invalid("budgets", "must be an object (got " + Shown(budgets) + ")");
  Budgets out = DefaultBudgets(profile);
  bool log_given = false;
  for (const auto& [key, value] : budgets.items()) {
    if (key == kCpuMs.key) {
      auto v = BudgetValue(value, kCpuMs);
      if (!v) return v.error();
      out.cpu = std::chrono::milliseconds(*v);
    } else if (key == kHeapMb.key) {
      auto v = BudgetValue(value, kHeapMb);
      if (!v) return v.error();
      out.heap_limit_bytes = static_cast<uint64_t>(*v) << 20;
    } else if (key == kStackKb.key) {
      auto v = BudgetValue(value, kStackKb);
      if (!v) return v.error();
      out.stack_limit_bytes = static_cast<uint64_t>(*v) << 10;
    } else if (key == kDeadlineMs.key) {
      auto v = BudgetValue(value, kDeadlineMs);
      if (!v) return v.error();
      out.deadline = std::chrono::milliseconds(*v);
    } else if (key == kCallsInFlight.key) {
      auto v = BudgetValue(value, kCallsInFlight);
      if (!v) return v.error();
      out.calls_in_flight = static_cast<uint32_t>(*v);
    } else if (key == kJournalKb.key) {
      auto v = BudgetValue(value, kJournalKb);
      if (!v) return v.error();
      out.journal_bytes = static_cast<uint64_t>(*v) << 10;
    } else if (key == kLogKb.key) {
      auto v = BudgetValue(value, kLogKb);
      if (!v) return v.error();
      out.log_bytes = static_cast<uint64_t>(*v) << 10;
      log_given = true;
    } else {
      return Invalid(ChildPath("budgets", key),
                     "unknown budget " + Quoted(key) +
                         " (expected cpu_ms, heap_mb, stack_kb, deadline_ms, calls_in_flight, journal_kb or log_kb)");
    }
  }
  // The log budget's default never exceeds the journal budget (log lines are journaled too).
  if (!log_given) out.log_bytes = std::min(out.log_bytes, out.journal_bytes);
  if (out.log_bytes > out.journal_bytes)
    return Invalid("budgets.log_kb", "must not exceed budgets.journal_kb (" + std::to_string(out.journal_bytes >> 10) +
                                         "): log lines are journaled too");
  return out;
}

std::string KnownNames(const HostCallRegistry& registry) {
  std::string known;
  for (const std::string& name : registry.Names()) known += (known.empty() ? "" : ", ") + name;
  return known.empty() ? "none registered" : "known: " + known;
}

Result<std::map<std::string, Json>> ParseGrants(const Json& grants, const HostCallRegistry& registry) {
  if (!grants.is_object()) {
    return Invalid("grants", "must be an object of host-call names to constraints (got " + Shown(grants) + ")");
  }
  std::map<std::string, Json> out;
  for (const auto& [name, constraints] : grants.items()) {
    const std::string path = ChildPath("grants", name);
    const HostCallSpec* spec = registry.Find(name);
    if (spec == nullptr) {
      return Invalid(path, "no host call named " + Quoted(name) + " (" + KnownNames(registry) + ")");
    }
    if (!constraints.is_object()) {
      return Invalid(path, "must be an object of constraints, {} for none (got " + Shown(constraints) + ")");
    }
    if (!spec->check_grant) {
      if (!constraints.empty()) {
        return Invalid(path, name + " takes no constraints; grant it with {} (got " + Shown(constraints) + ")");
      }
    } else if (auto checked = spec->check_grant(constraints, path); !checked) {
      return checked.error();
    }
    out.emplace(name, constraints);
  }
  return out;
}

// ---- mcp_servers: a codemode policy's downstream MCP servers (docs/codemode.md) ------------------

constexpr size_t kMaxMcpServers = 16;
constexpr size_t kMaxMcpServerNameBytes = 32;
constexpr size_t kMaxMcpArgs = 256;
constexpr size_t kMaxMcpTextBytes = 4096;  // the command, cwd, one argument, one env value
constexpr size_t kMaxMcpEnv = 256;
constexpr int64_t kMaxMcpTimeoutMs = 600'000;

bool IsMcpServerName(std::string_view name) {
  if (name.empty() || name.size() > kMaxMcpServerNameBytes) return false;
  if (!((name[0] >= 'a' && name[0] <= 'z') || (name[0] >= 'A' && name[0] <= 'Z'))) return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
      return false;
  }
  return true;
}

bool IsEnvName(std::string_view name) {
  if (name.empty() || name.size() > 256 || (name[0] >= '0' && name[0] <= '9')) return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}

Result<std::string> McpText(const Json& value, const std::string& path, bool absolute_path) {
  if (!value.is_string()) return Invalid(path, "must be a string (got " + Shown(value) + ")");
  const std::string& text = value.get_ref<const std::string&>();
  if (text.size() > kMaxMcpTextBytes)
    return Invalid(path, "is longer than " + std::to_string(kMaxMcpTextBytes) + " bytes");
  if (text.find('\0') != std::string::npos) return Invalid(path, "contains a NUL byte");
  if (absolute_path && (text.empty() || text[0] != '/'))
    return Invalid(path, "must be an absolute path (got " + Shown(value) + "); basal does not search PATH");
  return text;
}

Result<int64_t> McpTimeout(const Json& value, const std::string& path) {
  if (!value.is_number_integer() || value.get<int64_t>() < 1 || value.get<int64_t>() > kMaxMcpTimeoutMs)
    return Invalid(path, "must be an integer from 1 to " + std::to_string(kMaxMcpTimeoutMs) + " (got " + Shown(value) + ")");
  return value.get<int64_t>();
}

// One server: {"command", "args"?, "env"?, "cwd"?, "call_timeout_ms"?, "start_timeout_ms"?}, returned
// with every default written.
Result<Json> ParseMcpServer(const Json& server, const std::string& path) {
  if (!server.is_object()) return Invalid(path, "must be an object with at least \"command\" (got " + Shown(server) + ")");
  Json out = {{"command", ""}, {"args", Json::array()}, {"env", Json::object()}, {"cwd", "/"},
              {"call_timeout_ms", 60'000}, {"start_timeout_ms", 30'000}};
  bool has_command = false;
  for (const auto& [key, value] : server.items()) {
    const std::string at = ChildPath(path, key);
    if (key == "command" || key == "cwd") {
      auto text = McpText(value, at, /*absolute_path=*/true);
      if (!text) return text.error();
      out[key] = *text;
      has_command = has_command || key == "command";
    } else if (key == "args") {
      if (!value.is_array()) return Invalid(at, "must be an array of strings (got " + Shown(value) + ")");
      if (value.size() > kMaxMcpArgs) return Invalid(at, "has more than " + std::to_string(kMaxMcpArgs) + " arguments");
      for (size_t i = 0; i < value.size(); ++i) {
        auto text = McpText(value[i], at + "[" + std::to_string(i) + "]", false);
        if (!text) return text.error();
      }
      out["args"] = value;
    } else if (key == "env") {
      if (!value.is_object()) return Invalid(at, "must be an object of variable names to strings (got " + Shown(value) + ")");
      if (value.size() > kMaxMcpEnv) return Invalid(at, "has more than " + std::to_string(kMaxMcpEnv) + " variables");
      for (const auto& [name, v] : value.items()) {
        const std::string var = ChildPath(at, name);
        if (!IsEnvName(name)) return Invalid(var, "a variable name is letters, digits and '_', not starting with a digit");
        auto text = McpText(v, var, false);
        if (!text) return text.error();
        // A whole value "${secret:NAME}" is read from the secrets store when the server starts. A
        // reference inside a longer value would reach the server as literal text: refused.
        const size_t ref = text->find("${secret:");
        if (ref != std::string::npos && (ref != 0 || !text->ends_with("}") || text->find('}') != text->size() - 1))
          return Invalid(var, "a secret reference must be the whole value, \"${secret:NAME}\" (got " + Shown(v) +
                                  "); give the server the secret alone and the rest in its args or own settings");
        if (ref == 0) {
          const std::string_view secret = std::string_view(*text).substr(9, text->size() - 10);
          if (auto ok = ValidateSecretName(secret); !ok) return Invalid(var, ok.error().message);
        }
      }
      out["env"] = value;
    } else if (key == "call_timeout_ms" || key == "start_timeout_ms") {
      auto ms = McpTimeout(value, at);
      if (!ms) return ms.error();
      out[key] = *ms;
    } else {
      return Invalid(at, "unknown key " + Quoted(key) +
                             " (expected command, args, env, cwd, call_timeout_ms or start_timeout_ms)");
    }
  }
  if (!has_command) return Invalid(path, "needs \"command\": the absolute path of the server's executable");
  return out;
}

Result<std::map<std::string, Json>> ParseMcpServers(const Json& servers, const HostCallRegistry& registry) {
  if (!servers.is_object())
    return Invalid("mcp_servers", "must be an object of server names to servers (got " + Shown(servers) + ")");
  if (servers.size() > kMaxMcpServers)
    return Invalid("mcp_servers", "lists more than " + std::to_string(kMaxMcpServers) + " servers");
  // A server's tools are tools.<server>.<tool> in the script, beside tools.kv.get: a server may not
  // take the name of a host-call family.
  std::set<std::string, std::less<>> families;
  for (const std::string& name : registry.Names()) families.insert(name.substr(0, name.find('.')));
  std::map<std::string, Json> out;
  for (const auto& [name, server] : servers.items()) {
    const std::string path = ChildPath("mcp_servers", name);
    if (!IsMcpServerName(name))
      return Invalid(path, "a server name is 1 to " + std::to_string(kMaxMcpServerNameBytes) +
                               " letters, digits, '_' and '-', starting with a letter");
    if (families.count(name) != 0)
      return Invalid(path, "the name " + Quoted(name) + " is taken by basal's host calls (" + name +
                               ".*): name the server otherwise");
    auto parsed = ParseMcpServer(server, path);
    if (!parsed) return parsed.error();
    out.emplace(name, std::move(*parsed));
  }
  return out;
}

// Every grant below "mcp." names a listed server: mcp.<server>.<tool> or mcp.<server>.*.
Result<void> CheckMcpGrants(const std::map<std::string, Json>& grants, const std::map<std::string, Json>& servers) {
  for (const auto& [name, constraints] : grants) {
    if (!name.starts_with("mcp.")) continue;
    const std::string path = ChildPath("grants", name);
    const size_t dot = name.find('.', 4);
    const std::string server = name.substr(4, dot == std::string::npos ? std::string::npos : dot - 4);
    if (dot == std::string::npos || dot + 1 >= name.size())
      return Invalid(path, "a downstream tool's grant is mcp.<server>.<tool> or mcp.<server>.* (got " + Quoted(name) + ")");
    if (servers.count(server) == 0) {
      std::string listed;
      for (const auto& entry : servers) listed += (listed.empty() ? "" : ", ") + entry.first;
      return Invalid(path, "no server " + Quoted(server) + " in mcp_servers (" +
                               (listed.empty() ? std::string("none listed") : "listed: " + listed) + ")");
    }
  }
  return Ok();
}

}  // namespace

const char* ProfileName(Profile profile) { return profile == Profile::kFlow ? "flow" : "codemode"; }

Budgets DefaultBudgets(Profile profile) {
  Budgets b;
  if (profile == Profile::kCodemode) {
    b.cpu = std::chrono::milliseconds(5'000);
    b.heap_limit_bytes = 64ull << 20;
    b.stack_limit_bytes = 512ull << 10;
    b.deadline = std::chrono::milliseconds(60'000);
    b.calls_in_flight = 32;
    b.journal_bytes = 2048ull << 10;
    b.log_bytes = 256ull << 10;
  }
  return b;
}

namespace {

// The outcomes a retry may name: those of a failed attempt that a new attempt can cure. Not
// cancelled (someone stopped it), diverged (the script changed), protocol_violation or
// worker_confinement (a subverted worker), invalid_input, journal_error.
constexpr std::string_view kRetryableOutcomes[] = {"script_error", "deadline", "worker_crashed", "budget_exhausted",
                                                   "spawn_failed"};
constexpr int64_t kMaxRetryWaitMs = 365LL * 24 * 3600 * 1000;

Result<Manifest::RetryPolicy> ParseRetry(const Json& value) {
  if (!value.is_object()) return Invalid("retry", "must be an object such as {\"max_attempts\": 3} (got " + Shown(value) + ")");
  Manifest::RetryPolicy p;
  p.on = {"script_error", "deadline", "worker_crashed"};
  bool has_attempts = false;
  for (const auto& [key, v] : value.items()) {
    if (key == "max_attempts") {
      if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > 100)
        return Invalid("retry.max_attempts", "must be an integer from 1 to 100, the first attempt included (got " + Shown(v) + ")");
      p.max_attempts = static_cast<int>(v.get<int64_t>());
      has_attempts = true;
    } else if (key == "backoff") {
      if (!v.is_object()) return Invalid("retry.backoff", "must be an object {\"initial_ms\", \"factor\", \"max_ms\"} (got " + Shown(v) + ")");
      for (const auto& [bk, bv] : v.items()) {
        if (bk == "initial_ms" || bk == "max_ms") {
          if (!bv.is_number_integer() || bv.get<int64_t>() < 0 || bv.get<int64_t>() > kMaxRetryWaitMs)
            return Invalid("retry.backoff." + bk, "must be an integer of milliseconds from 0 to 31536000000 (365 days) (got " + Shown(bv) + ")");
          (bk == "initial_ms" ? p.initial : p.max) = std::chrono::milliseconds(bv.get<int64_t>());
        } else if (bk == "factor") {
          if (!bv.is_number() || bv.get<double>() < 1.0 || bv.get<double>() > 10.0)
            return Invalid("retry.backoff.factor", "must be a number from 1 to 10 (got " + Shown(bv) + ")");
          p.factor = bv.get<double>();
        } else {
          return Invalid("retry.backoff", "unknown key " + Quoted(bk) + " (expected \"initial_ms\", \"factor\" or \"max_ms\")");
        }
      }
    } else if (key == "on") {
      if (!v.is_array() || v.empty())
        return Invalid("retry.on", "must be a non-empty list of outcomes such as [\"script_error\", \"deadline\"] (got " + Shown(v) + ")");
      p.on.clear();
      for (const Json& o : v) {
        const bool known = o.is_string() && std::find(std::begin(kRetryableOutcomes), std::end(kRetryableOutcomes),
                                                      o.get<std::string>()) != std::end(kRetryableOutcomes);
        if (!known)
          return Invalid("retry.on", Shown(o) + " is not an outcome a retry can cure (script_error, deadline, "
                                                "worker_crashed, budget_exhausted, spawn_failed)");
        if (std::find(p.on.begin(), p.on.end(), o.get<std::string>()) == p.on.end()) p.on.push_back(o.get<std::string>());
      }
      std::sort(p.on.begin(), p.on.end());
    } else {
      return Invalid("retry", "unknown key " + Quoted(key) + " (expected \"max_attempts\", \"backoff\" or \"on\")");
    }
  }
  if (!has_attempts) return Invalid("retry.max_attempts", "is required (1 to 100, the first attempt included)");
  if (p.max < p.initial) return Invalid("retry.backoff.max_ms", "is shorter than initial_ms");
  std::sort(p.on.begin(), p.on.end());
  return p;
}

}  // namespace

Result<Manifest> Manifest::Parse(std::string_view text, const HostCallRegistry& registry, Profile profile) {
  StrictJsonWatch watch(kMaxManifestDepth);
  Json root = Json::parse(
      text.begin(), text.end(),
      [&watch](int /*depth*/, Json::parse_event_t event, Json& parsed) { return watch.OnEvent(event, parsed); },
      /*allow_exceptions=*/false);
  if (root.is_discarded()) return Invalid("manifest", "not valid JSON: " + DescribeSyntaxError(text));
  if (auto problem = StrictJsonProblem(watch)) return *problem;
  if (!root.is_object()) return Invalid("manifest", "must be a JSON object (got " + Shown(root) + ")");

  Manifest manifest;
  manifest.profile_ = profile;
  manifest.budgets_ = DefaultBudgets(profile);
  for (const auto& [key, value] : root.items()) {
    if (key == "mcp_servers") {
      if (profile != Profile::kCodemode)
        return Invalid("mcp_servers", "only a codemode policy lists downstream MCP servers (basal policy approve; "
                                      "they run under basal mcp); a flow's manifest may not");
      auto servers = ParseMcpServers(value, registry);
      if (!servers) return servers.error();
      manifest.mcp_servers_ = std::move(*servers);
      continue;
    }
    if (key == "durable") {
      // docs/durable.md: a run of the flow outlives its host (resumed from the journal).
      if (profile == Profile::kCodemode)
        return Invalid("durable", "only a flow's runs are durable; a codemode policy's scripts are not resumed");
      if (!value.is_boolean()) return Invalid("durable", "must be true or false (got " + Shown(value) + ")");
      manifest.durable_ = value.get<bool>();
      continue;
    }
    if (key == "retry") {
      if (profile == Profile::kCodemode)
        return Invalid("retry", "only a durable flow's runs are retried; a codemode policy's scripts are not");
      auto retry = ParseRetry(value);
      if (!retry) return retry.error();
      manifest.retry_ = std::move(*retry);
      continue;
    }
    if (key == "grants") {
      auto grants = ParseGrants(value, registry);
      if (!grants) return grants.error();
      manifest.grants_ = std::move(*grants);
    } else if (key == "budgets") {
      auto budgets = ParseBudgets(value, profile);
      if (!budgets) return budgets.error();
      manifest.budgets_ = *budgets;
    } else {
      return Invalid("manifest", "unknown key " + Quoted(key) +
                                     (profile == Profile::kCodemode ? " (expected \"grants\", \"budgets\" or \"mcp_servers\")"
                                                                    : " (expected \"grants\", \"budgets\", \"durable\" or \"retry\")"));
    }
  }
  if (manifest.retry_ && !manifest.durable_)
    return Invalid("retry", "only a durable flow's runs are retried (each attempt resumes from the journal): add "
                            "\"durable\": true");
  if (auto ok = CheckMcpGrants(manifest.grants_, manifest.mcp_servers_); !ok) return ok.error();
  manifest.hash_ = Sha256Hex(manifest.Canonical());
  return manifest;
}

std::optional<std::string> Manifest::Authorize(const HostCallSpec& spec, const Json& args) const {
  return Authorize(spec, spec.name, args);
}

std::optional<std::string> Manifest::Authorize(const HostCallSpec& spec, std::string_view name, const Json& args) const {
  return AuthorizeWith(spec, name, GrantFor(name), args);
}

std::optional<std::string> Manifest::AuthorizeWith(const HostCallSpec& spec, std::string_view name, const Json* grant,
                                                   const Json& args) const {
  // Said in the words of who reads it: a flow's author wrote a manifest; an agent was given a policy.
  if (grant == nullptr && spec.needs_grant)
    return Quoted(name) + " is not granted by the " + (profile_ == Profile::kCodemode ? "policy" : "manifest");
  if (!spec.authorize) return std::nullopt;
  static const Json kNoConstraints = Json::object();
  return spec.authorize(grant == nullptr ? kNoConstraints : *grant, args);
}

const std::pair<const std::string, Json>* Manifest::GrantEntryFor(std::string_view name) const {
  if (auto it = grants_.find(std::string(name)); it != grants_.end()) return &*it;
  // A downstream server's wildcard: "mcp.fs.*" covers "mcp.fs.<any tool>".
  if (name.starts_with("mcp.")) {
    const size_t dot = name.find('.', 4);
    if (dot != std::string_view::npos && dot + 1 < name.size()) {
      if (auto it = grants_.find(std::string(name.substr(0, dot)) + ".*"); it != grants_.end()) return &*it;
    }
  }
  return nullptr;
}

std::string Manifest::GrantKeyFor(std::string_view name) const {
  const auto* entry = GrantEntryFor(name);
  return entry ? entry->first : std::string();
}

const Json* Manifest::GrantFor(std::string_view name) const {
  const auto* entry = GrantEntryFor(name);
  return entry ? &entry->second : nullptr;
}

std::string Manifest::Canonical() const {
  Json grants = Json::object();
  for (const auto& [name, constraints] : grants_) grants[name] = constraints;
  Json budgets = {
      {"cpu_ms", budgets_.cpu.count()},
      {"heap_mb", budgets_.heap_limit_bytes >> 20},
      {"stack_kb", budgets_.stack_limit_bytes >> 10},
      {"deadline_ms", budgets_.deadline.count()},
      {"calls_in_flight", budgets_.calls_in_flight},
      {"journal_kb", budgets_.journal_bytes >> 10},
      {"log_kb", budgets_.log_bytes >> 10},
  };
  // nlohmann's default object is a std::map: keys come out sorted at every level. A manifest
  // without servers reads as it did before they existed (its hash is unchanged).
  Json canonical = {{"grants", std::move(grants)}, {"budgets", std::move(budgets)}};
  if (durable_) canonical["durable"] = true;  // absent when false: older manifests keep their hash
  if (retry_) {
    canonical["retry"] = {{"max_attempts", retry_->max_attempts},
                          {"backoff", {{"initial_ms", retry_->initial.count()},
                                       {"factor", retry_->factor},
                                       {"max_ms", retry_->max.count()}}},
                          {"on", retry_->on}};
  }
  if (!mcp_servers_.empty()) {
    Json servers = Json::object();
    for (const auto& [name, server] : mcp_servers_) servers[name] = server;
    canonical["mcp_servers"] = std::move(servers);
  }
  return canonical.dump(-1, ' ', false,
                                                                                   Json::error_handler_t::replace);
}

// ---- SHA-256, from OpenSSL's libcrypto ------------------------------------------------------


}  // namespace basal

namespace basal {

std::chrono::milliseconds Manifest::RetryPolicy::Backoff(int64_t next) const {
  double wait = static_cast<double>(initial.count());
  for (int64_t i = 2; i < next && wait < static_cast<double>(max.count()); ++i) wait *= factor;
  return std::chrono::milliseconds(static_cast<int64_t>(std::min(wait, static_cast<double>(max.count()))));
}

bool Manifest::RetryPolicy::RetriesOn(std::string_view outcome) const {
  return std::find(on.begin(), on.end(), outcome) != on.end();
}

}  // namespace basal
