// The `mcp.*` family's grant check and argument predicates (mcp.h, docs/codemode.md).
#include "parent/host_calls/mcp.h"

#include <string_view>
#include <utility>
#include <vector>

namespace basal {
namespace {

constexpr size_t kMaxPredicateArgs = 64;     // arguments one grant constrains
constexpr size_t kMaxPredicateValues = 256;  // values of one one_of / prefix / path_under
constexpr size_t kShownBytes = 60;

std::string McpShown(const Json& value) {
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > kShownBytes) {
    size_t cut = kShownBytes;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
    text = text.substr(0, cut) + "...";
  }
  return text;
}

Error InvalidMcpGrant(const std::string& path, const std::string& what) {
  return MakeError(ErrorCode::kInvalidArgument, path + ": " + what);
}

// A string or a non-empty array of strings (at most kMaxPredicateValues).
Result<void> CheckStrings(const Json& value, const std::string& path, bool absolute) {
  std::vector<const Json*> items;
  if (value.is_string()) {
    items.push_back(&value);
  } else if (value.is_array() && !value.empty() && value.size() <= kMaxPredicateValues) {
    for (const Json& item : value) items.push_back(&item);
  } else {
    return InvalidMcpGrant(path, "must be a string or an array of 1 to " + std::to_string(kMaxPredicateValues) +
                             " strings (got " + McpShown(value) + ")");
  }
  for (const Json* item : items) {
    if (!item->is_string()) return InvalidMcpGrant(path, "must hold strings only (got " + McpShown(*item) + ")");
    const std::string& text = item->get_ref<const std::string&>();
    if (absolute) {
      if (text.empty() || text[0] != '/') return InvalidMcpGrant(path, "must be an absolute directory (got " + McpShown(*item) + ")");
      for (size_t start = 1; start <= text.size();) {
        size_t end = text.find('/', start);
        if (end == std::string::npos) end = text.size();
        const std::string_view segment(text.data() + start, end - start);
        if (segment == "." || segment == "..")
          return InvalidMcpGrant(path, "must not contain \".\" or \"..\" segments (got " + McpShown(*item) + ")");
        start = end + 1;
      }
    }
  }
  return Ok();
}

std::vector<std::string> Strings(const Json& value) {
  std::vector<std::string> out;
  if (value.is_string()) {
    out.push_back(value.get<std::string>());
  } else {
    for (const Json& item : value) out.push_back(item.get<std::string>());
  }
  return out;
}

// `path` with repeated '/' collapsed and a trailing '/' dropped; nullopt when it is not absolute
// or has a "." or ".." segment (a request to climb out is refused, not resolved).
std::optional<std::string> NormalPath(std::string_view path) {
  if (path.empty() || path[0] != '/' || path.find('\0') != std::string_view::npos) return std::nullopt;
  std::string out;
  for (size_t start = 0; start < path.size();) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    const std::string_view segment = path.substr(start, end - start);
    if (segment == "." || segment == "..") return std::nullopt;
    if (!segment.empty()) {
      out += '/';
      out.append(segment);
    }
    start = end + 1;
  }
  return out.empty() ? std::string("/") : out;
}

// -1, 0 or 1 as a < b, a == b, a > b, for two JSON numbers. Integers are compared exactly (a
// predicate on a 64-bit id must not round 2^53 + 1 down to 2^53); a float on either side compares
// as long double.
int CompareNumbers(const Json& a, const Json& b) {
  if (a.is_number_float() || b.is_number_float()) {
    const long double x = a.get<long double>(), y = b.get<long double>();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  auto wide = [](const Json& v) -> __int128 {
    return v.is_number_unsigned() ? static_cast<__int128>(v.get<uint64_t>()) : static_cast<__int128>(v.get<int64_t>());
  };
  const __int128 x = wide(a), y = wide(b);
  return x < y ? -1 : (x > y ? 1 : 0);
}

bool Under(const std::string& path, const std::string& dir) {
  const std::optional<std::string> normal = NormalPath(dir);  // checked by CheckMcpGrant
  if (!normal) return false;
  const std::string& base = *normal;
  if (base == "/") return true;
  return path == base || (path.size() > base.size() && path.starts_with(base) && path[base.size()] == '/');
}

Result<void> CheckPredicate(const Json& predicate, const std::string& path) {
  if (!predicate.is_object() || predicate.empty())
    return InvalidMcpGrant(path, "must be an object of predicates (equals, one_of, prefix, path_under, max_length, min, max; got " +
                             McpShown(predicate) + ")");
  for (const auto& [key, value] : predicate.items()) {
    const std::string at = path + "." + key;
    if (key == "equals") {
      continue;
    } else if (key == "one_of") {
      if (!value.is_array() || value.empty() || value.size() > kMaxPredicateValues)
        return InvalidMcpGrant(at, "must be an array of 1 to " + std::to_string(kMaxPredicateValues) + " values (got " +
                               McpShown(value) + ")");
    } else if (key == "prefix" || key == "path_under") {
      if (auto ok = CheckStrings(value, at, key == "path_under"); !ok) return ok;
    } else if (key == "max_length") {
      if (!value.is_number_integer() || (!value.is_number_unsigned() && value.get<int64_t>() < 0))
        return InvalidMcpGrant(at, "must be a non-negative integer (got " + McpShown(value) + ")");
    } else if (key == "min" || key == "max") {
      if (!value.is_number()) return InvalidMcpGrant(at, "must be a number (got " + McpShown(value) + ")");
    } else {
      return InvalidMcpGrant(at, "unknown predicate \"" + key + "\" (expected equals, one_of, prefix, path_under, max_length, min or max)");
    }
  }
  if (predicate.contains("min") && predicate.contains("max") && CompareNumbers(predicate["min"], predicate["max"]) > 0)
    return InvalidMcpGrant(path, "min is greater than max");
  return Ok();
}

// nullopt when `value` (argument `name`) satisfies `predicate`.
std::optional<std::string> Check(const std::string& name, const Json& predicate, const Json& value) {
  const std::string arg = "argument \"" + name + "\"";
  for (const auto& [key, want] : predicate.items()) {
    if (key == "equals") {
      if (value != want) return arg + " must be " + McpShown(want) + " (got " + McpShown(value) + ")";
    } else if (key == "one_of") {
      bool found = false;
      for (const Json& v : want) found = found || v == value;
      if (!found) return arg + " must be one of " + McpShown(want) + " (got " + McpShown(value) + ")";
    } else if (key == "prefix") {
      if (!value.is_string()) return arg + " must be a string (got " + McpShown(value) + ")";
      bool found = false;
      for (const std::string& p : Strings(want)) found = found || value.get_ref<const std::string&>().starts_with(p);
      if (!found) return arg + " must start with " + McpShown(want) + " (got " + McpShown(value) + ")";
    } else if (key == "path_under") {
      if (!value.is_string()) return arg + " must be a path, a string (got " + McpShown(value) + ")";
      auto path = NormalPath(value.get_ref<const std::string&>());
      if (!path) return arg + " must be an absolute path without \".\" or \"..\" segments (got " + McpShown(value) + ")";
      bool found = false;
      for (const std::string& dir : Strings(want)) found = found || Under(*path, dir);
      if (!found) return arg + " must be a path under " + McpShown(want) + " (got " + McpShown(value) + ")";
    } else if (key == "max_length") {
      const uint64_t max = want.get<uint64_t>();
      if (value.is_string() && value.get_ref<const std::string&>().size() > max)
        return arg + " is longer than " + std::to_string(max) + " bytes";
      if (value.is_array() && value.size() > max) return arg + " has more than " + std::to_string(max) + " items";
      if (!value.is_string() && !value.is_array()) return arg + " must be a string or an array (got " + McpShown(value) + ")";
    } else if (key == "min" || key == "max") {
      if (!value.is_number()) return arg + " must be a number (got " + McpShown(value) + ")";
      const int order = CompareNumbers(value, want);
      if (key == "min" ? order < 0 : order > 0)
        return arg + " must be " + (key == "min" ? "at least " : "at most ") + McpShown(want) + " (got " + McpShown(value) + ")";
    }
  }
  return std::nullopt;
}

}  // namespace

Result<void> CheckMcpGrant(const Json& constraints, const std::string& path) {
  for (const auto& [key, value] : constraints.items()) {
    if (key != "args") return InvalidMcpGrant(path + "." + key, "unknown constraint (expected \"args\")");
    if (!value.is_object())
      return InvalidMcpGrant(path + ".args", "must be an object of argument names to predicates (got " + McpShown(value) + ")");
    if (value.size() > kMaxPredicateArgs)
      return InvalidMcpGrant(path + ".args", "constrains more than " + std::to_string(kMaxPredicateArgs) + " arguments");
    for (const auto& [name, predicate] : value.items()) {
      if (auto ok = CheckPredicate(predicate, path + ".args." + name); !ok) return ok;
    }
  }
  return Ok();
}

std::optional<std::string> AuthorizeMcp(const Json& constraints, const Json& args) {
  auto it = constraints.find("args");
  if (it == constraints.end()) return std::nullopt;
  for (const auto& [name, predicate] : it->items()) {
    if (!args.is_object() || !args.contains(name))
      return "the grant constrains argument \"" + name + "\", which the call does not give";
    if (auto why = Check(name, predicate, args[name])) return why;
  }
  return std::nullopt;
}

HostCallSpec McpFamilySpec(HostCallHandler handler) {
  HostCallSpec spec;
  spec.name = kMcpFamily;
  spec.description = "A tool of a downstream MCP server listed in the codemode policy.";
  spec.check_grant = CheckMcpGrant;
  spec.authorize = AuthorizeMcp;
  spec.handler = std::move(handler);
  spec.effect = Effect::kExternal;
  return spec;
}

Result<void> RegisterMcpHostCalls(HostCallRegistry& registry) {
  return registry.Register(McpFamilySpec([](const HostCallContext& ctx, const Json&, HostCallReply reply) {
    reply.Error("HostError", "host call \"" + ctx.name +
                                 "\": no downstream MCP server runs in this process; a script reaches the servers of "
                                 "its codemode policy only under `basal mcp --policy NAME`");
  }));
}

}  // namespace basal
