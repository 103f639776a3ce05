// The http.fetch grant: checking, matching, secrets in headers, arguments, review (see
// fetch_grant.h).
#include "parent/http/fetch_grant.h"

#include <algorithm>
#include <array>
#include <map>
#include <set>

namespace basal::http {
namespace {

using Direction = ConstraintChange::Direction;

Error Invalid(const std::string& at, const std::string& what) {
  return MakeError(ErrorCode::kInvalidArgument, at + ": " + what);
}

// A JSON value for a message: at most 60 bytes, invalid UTF-8 replaced.
std::string Shown(const Json& value) {
  std::string text = value.dump(-1, ' ', true, Json::error_handler_t::replace);
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}
std::string Quoted(std::string_view s) { return Shown(Json(std::string(s))); }

// A JSON object key as a path element: as it is when it is a plain name, else as a JSON string
// (ASCII, escaped), so a path never carries control bytes or another element's look.
std::string PathKey(const std::string& key) {
  bool plain = !key.empty() && key.size() <= 64;
  for (char c : key) {
    plain =
        plain && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-');
  }
  return plain ? key : Json(key).dump(-1, ' ', true, Json::error_handler_t::replace);
}

char Lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }
char Upper(char c) { return c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c; }
std::string Lowered(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = Lower(c);
  return out;
}
std::string Uppered(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = Upper(c);
  return out;
}

std::string Joined(const std::vector<std::string>& items, const char* separator = ", ") {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : separator) + s;
  return out;
}

bool HasLineBreakOrNul(std::string_view value) {
  return value.find_first_of(std::string_view("\r\n\0", 3)) != std::string_view::npos;
}

struct LimitSpec {
  const char* name;
  uint64_t FetchLimits::*field;
  uint64_t min;
  uint64_t max;
};
constexpr LimitSpec kLimitSpecs[] = {
    {"connect_timeout_ms", &FetchLimits::connect_timeout_ms, 1, 60000},
    {"timeout_ms", &FetchLimits::timeout_ms, 1, 300000},
    {"max_response_bytes", &FetchLimits::max_response_bytes, 0, 8388608},
    {"max_request_bytes", &FetchLimits::max_request_bytes, 0, 8388608},
    {"max_redirects", &FetchLimits::max_redirects, 0, 5},
    {"max_in_flight", &FetchLimits::max_in_flight, 1, 64},
    {"max_requests", &FetchLimits::max_requests, 1, 100000},
};

std::optional<uint64_t> Unsigned(const Json& value) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  if (value.is_number_integer() && value.get<int64_t>() >= 0) return static_cast<uint64_t>(value.get<int64_t>());
  return std::nullopt;
}

Result<void> ParseLimits(const Json& limits, const std::string& at, FetchLimits& out) {
  if (!limits.is_object()) return Invalid(at, "must be an object {\"timeout_ms\": N, ...} (got " + Shown(limits) + ")");
  for (const auto& [key, value] : limits.items()) {
    const LimitSpec* spec = nullptr;
    for (const LimitSpec& s : kLimitSpecs) {
      if (key == s.name) spec = &s;
    }
    if (spec == nullptr) {
      std::vector<std::string> names;
      for (const LimitSpec& s : kLimitSpecs) names.emplace_back(s.name);
      return Invalid(at + "." + PathKey(key), "unknown limit (known: " + Joined(names) + ")");
    }
    const std::optional<uint64_t> v = Unsigned(value);
    if (!v || *v < spec->min || *v > spec->max) {
      return Invalid(at + "." + key, "must be an integer from " + std::to_string(spec->min) + " to " +
                                         std::to_string(spec->max) + " (got " + Shown(value) + ")");
    }
    out.*(spec->field) = *v;
  }
  return Ok();
}

bool IsSecretNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsSecretNameChar(char c) { return IsSecretNameStart(c) || (c >= '0' && c <= '9'); }

// A value template in pieces: literal text and secret names, alternating. Every "${" starts a
// reference, so "${" can never be read two ways (there is no escape: a header value needing a
// literal "${" is not supported).
struct TemplatePiece {
  bool secret;
  std::string text;  // the literal, or the secret's name
};
Result<std::vector<TemplatePiece>> SplitTemplate(std::string_view value) {
  std::vector<TemplatePiece> pieces;
  size_t at = 0;
  while (at < value.size()) {
    const size_t open = value.find("${", at);
    if (open == std::string_view::npos) {
      pieces.push_back({false, std::string(value.substr(at))});
      break;
    }
    if (open > at) pieces.push_back({false, std::string(value.substr(at, open - at))});
    constexpr std::string_view kPrefix = "${secret:";
    const size_t close = value.find('}', open);
    if (value.substr(open, kPrefix.size()) != kPrefix || close == std::string_view::npos) {
      return MakeError(
          ErrorCode::kInvalidArgument,
          "\"${\" must start a secret reference ${secret:NAME}, closed by '}' (at byte " + std::to_string(open) + ")");
    }
    const std::string_view name = value.substr(open + kPrefix.size(), close - open - kPrefix.size());
    bool ok = !name.empty() && name.size() <= kMaxSecretNameBytes && IsSecretNameStart(name[0]);
    for (char c : name) ok = ok && IsSecretNameChar(c);
    if (!ok) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "the secret reference " + Quoted(value.substr(open, close - open + 1)) +
                           " needs a NAME of a letter or '_' then up to 63 letters, digits or '_'");
    }
    pieces.push_back({true, std::string(name)});
    at = close + 1;
  }
  return pieces;
}

Result<FetchRetry> ParseRetry(const Json& retry, const std::string& at) {
  if (!retry.is_object())
    return Invalid(at, "must be an object {\"statuses\": [503], \"max_attempts\": 3, \"backoff\": {...}} (got " +
                           Shown(retry) + ")");
  FetchRetry out;
  const auto whole = [](const Json& v, uint64_t lo, uint64_t hi) {
    return v.is_number_integer() && v.get<int64_t>() >= static_cast<int64_t>(lo) &&
           v.get<int64_t>() <= static_cast<int64_t>(hi);
  };
  for (const auto& [key, value] : retry.items()) {
    const std::string item_at = at + "." + PathKey(key);
    if (key == "statuses") {
      if (!value.is_array() || value.empty() || value.size() > 50)
        return Invalid(item_at, "must be a list of 1 to 50 HTTP statuses from 400 to 599 (got " + Shown(value) + ")");
      out.statuses.clear();
      for (const Json& s : value) {
        if (!whole(s, 400, 599)) return Invalid(item_at, Shown(s) + " is not an HTTP status from 400 to 599");
        out.statuses.push_back(s.get<int64_t>());
      }
      std::sort(out.statuses.begin(), out.statuses.end());
      out.statuses.erase(std::unique(out.statuses.begin(), out.statuses.end()), out.statuses.end());
    } else if (key == "max_attempts") {
      if (!whole(value, 2, 10))
        return Invalid(item_at, "must be an integer from 2 to 10, the first attempt included (got " + Shown(value) + ")");
      out.max_attempts = value.get<uint64_t>();
    } else if (key == "backoff") {
      if (!value.is_object()) return Invalid(item_at, "must be an object {\"initial_ms\", \"factor\", \"max_ms\"} (got " + Shown(value) + ")");
      for (const auto& [name, v] : value.items()) {
        const std::string field_at = item_at + "." + PathKey(name);
        if (name == "initial_ms" || name == "max_ms") {
          if (!whole(v, 1, 60000)) return Invalid(field_at, "must be an integer from 1 to 60000 (got " + Shown(v) + ")");
          (name == "initial_ms" ? out.initial_ms : out.max_ms) = v.get<uint64_t>();
        } else if (name == "factor") {
          if (!v.is_number() || v.get<double>() < 1 || v.get<double>() > 10)
            return Invalid(field_at, "must be a number from 1 to 10 (got " + Shown(v) + ")");
          out.factor = v.get<double>();
        } else {
          return Invalid(field_at, "unknown key (known: initial_ms, factor, max_ms)");
        }
      }
      if (out.max_ms < out.initial_ms)
        return Invalid(item_at + ".max_ms", "is " + std::to_string(out.max_ms) + ", below initial_ms (" +
                                                std::to_string(out.initial_ms) + ")");
    } else {
      return Invalid(item_at, "unknown key (known: statuses, max_attempts, backoff)");
    }
  }
  return out;
}

std::string RetryShown(const std::optional<FetchRetry>& r) {
  if (!r) return "none";
  std::string statuses;
  for (int64_t s : r->statuses) statuses += (statuses.empty() ? "" : ", ") + std::to_string(s);
  return std::to_string(r->max_attempts) + " attempts on " + statuses + " (backoff " + std::to_string(r->initial_ms) +
         " ms to " + std::to_string(r->max_ms) + " ms)";
}

Result<FetchRule> ParseRule(const Json& rule, const std::string& at) {
  if (!rule.is_object())
    return Invalid(at, "must be an object {\"url\": \"https://host/path/\", ...} (got " + Shown(rule) + ")");
  FetchRule out;
  auto url = rule.find("url");
  if (url == rule.end()) return Invalid(at, "\"url\" is missing (\"https://api.example.com/v1/\")");
  for (const auto& [key, value] : rule.items()) {
    if (key != "url" && key != "methods" && key != "headers" && key != "allow_networks" && key != "allow_plain_http" &&
        key != "idempotency_key" && key != "retry") {
      return Invalid(at + "." + PathKey(key),
                     "unknown key (known: url, methods, headers, allow_networks, allow_plain_http, idempotency_key, "
                     "retry)");
    }
  }
  if (!url->is_string()) return Invalid(at + ".url", "must be a string (got " + Shown(*url) + ")");
  auto pattern = ParseUrlPattern(url->get_ref<const std::string&>());
  if (!pattern) return Invalid(at + ".url", pattern.error().message);
  out.url = std::move(*pattern);

  if (auto m = rule.find("methods"); m != rule.end()) {
    if (!m->is_array() || m->empty() || m->size() > kMaxRuleMethods) {
      return Invalid(at + ".methods", "must be a list of 1 to " + std::to_string(kMaxRuleMethods) +
                                          " methods ([\"GET\", \"POST\"]) (got " + Shown(*m) + ")");
    }
    for (size_t i = 0; i < m->size(); ++i) {
      const std::string item_at = at + ".methods[" + std::to_string(i) + "]";
      const Json& item = (*m)[i];
      if (!item.is_string()) return Invalid(item_at, "must be a string (got " + Shown(item) + ")");
      auto method = NormalizeMethod(item.get_ref<const std::string&>());
      if (!method) return Invalid(item_at, method.error().message);
      const std::string upper = Uppered(*method);
      if (std::find(out.methods.begin(), out.methods.end(), upper) != out.methods.end()) {
        return Invalid(item_at, upper + " is listed twice");
      }
      out.methods.push_back(upper);
    }
  } else {
    out.methods = {"GET", "HEAD"};
  }

  bool has_secret = false;
  if (auto h = rule.find("headers"); h != rule.end()) {
    if (!h->is_object() || h->size() > kMaxRuleHeaders) {
      return Invalid(at + ".headers", "must be an object of at most " + std::to_string(kMaxRuleHeaders) +
                                          " headers {\"Name\": \"value\"} (got " + Shown(*h) + ")");
    }
    std::set<std::string> seen;
    for (const auto& [name, value] : h->items()) {
      const std::string item_at = at + ".headers." + PathKey(name);
      if (!IsToken(name))
        return Invalid(at + ".headers",
                       Quoted(name) + " is not a header name (an HTTP token: letters, digits, !#$%&'*+-.^_`|~)");
      if (IsControlledHeader(name)) {
        return Invalid(item_at, "basal sets this header itself (connection and framing headers, proxy-*): remove it");
      }
      if (!seen.insert(Lowered(name)).second) return Invalid(item_at, "the same header twice (names ignore case)");
      if (!value.is_string()) return Invalid(item_at, "must be a string (got " + Shown(value) + ")");
      const std::string& text = value.get_ref<const std::string&>();
      if (text.size() > kMaxRuleHeaderValueBytes) {
        return Invalid(item_at, "is " + std::to_string(text.size()) + " bytes; the limit is " +
                                    std::to_string(kMaxRuleHeaderValueBytes));
      }
      if (HasLineBreakOrNul(text)) return Invalid(item_at, "must not hold CR, LF or NUL (they would split the header)");
      auto pieces = SplitTemplate(text);
      if (!pieces) return Invalid(item_at, pieces.error().message);
      for (const TemplatePiece& p : *pieces) has_secret = has_secret || p.secret;
      out.headers.push_back({name, text});
    }
  }

  if (auto n = rule.find("allow_networks"); n != rule.end()) {
    if (!n->is_array() || n->size() > kMaxRuleNetworks) {
      return Invalid(at + ".allow_networks", "must be a list of at most " + std::to_string(kMaxRuleNetworks) +
                                                 " CIDRs ([\"127.0.0.1/32\", \"::1/128\"]) (got " + Shown(*n) + ")");
    }
    for (size_t i = 0; i < n->size(); ++i) {
      const std::string item_at = at + ".allow_networks[" + std::to_string(i) + "]";
      const Json& item = (*n)[i];
      if (!item.is_string()) return Invalid(item_at, "must be a CIDR string (got " + Shown(item) + ")");
      auto cidr = ParseCidr(item.get_ref<const std::string&>());
      if (!cidr) return Invalid(item_at, cidr.error().message);
      out.allow_networks.push_back(*cidr);
    }
  }

  if (auto p = rule.find("allow_plain_http"); p != rule.end()) {
    if (!p->is_boolean()) return Invalid(at + ".allow_plain_http", "must be true or false (got " + Shown(*p) + ")");
    out.allow_plain_http = p->get<bool>();
    if (out.allow_plain_http && out.url.scheme != "http") {
      return Invalid(at + ".allow_plain_http",
                     "applies only to an http:// url; this rule's is " + out.url.scheme + "://: remove it");
    }
  }
  if (auto k = rule.find("idempotency_key"); k != rule.end()) {
    if (!k->is_string() || !IsToken(k->get_ref<const std::string&>()) || k->get_ref<const std::string&>().size() > 64)
      return Invalid(at + ".idempotency_key",
                     "must be the name of the header that carries the call's idempotency key, e.g. \"Idempotency-Key\" "
                     "(an HTTP token of at most 64 bytes; got " + Shown(*k) + ")");
    out.idempotency_key = k->get<std::string>();
    if (IsControlledHeader(out.idempotency_key))
      return Invalid(at + ".idempotency_key", "basal sets this header itself (connection and framing headers, proxy-*)");
    for (const HeaderTemplate& h : out.headers)
      if (Lowered(h.name) == Lowered(out.idempotency_key))
        return Invalid(at + ".idempotency_key", "the rule's headers set " + h.name + " too: keep one of them");
  }
  if (auto r = rule.find("retry"); r != rule.end()) {
    auto retry = ParseRetry(*r, at + ".retry");
    if (!retry) return retry.error();
    const bool any_idempotent = std::any_of(out.methods.begin(), out.methods.end(), [&out](const std::string& m) {
      return RequestEffect(out, m) == Effect::kIdempotent;
    });
    if (!any_idempotent)
      return Invalid(at + ".retry", "none of this rule's methods (" + Joined(out.methods) +
                                        ") is idempotent, so no request of it would be retried: retry applies to GET, "
                                        "HEAD, OPTIONS, PUT and DELETE, or to any method when the rule sends an "
                                        "\"idempotency_key\"");
    out.retry = std::move(*retry);
  }
  if (has_secret && out.url.scheme == "http" && !out.allow_plain_http) {
    return Invalid(at + ".headers", "a secret would be sent over plain http:// to " + out.url.text +
                                        ", readable and changeable by anyone on the path: use https://, or set "
                                        "\"allow_plain_http\": true (meant for a test server on loopback)");
  }
  return out;
}

// Strict RFC 4648 base64 (padded, standard alphabet, no whitespace): nullopt if not. A table
// lookup per byte: a body may be 8 MiB.
std::optional<std::string> DecodeBase64(std::string_view text) {
  static const std::array<int8_t, 256> kValue = [] {
    std::array<int8_t, 256> t{};
    t.fill(-1);
    const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i) t[static_cast<unsigned char>(alphabet[i])] = static_cast<int8_t>(i);
    return t;
  }();
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t full = text.empty() ? 0 : text.size() - 4;  // the last quantum may be padded
  for (size_t i = 0; i < full; i += 4) {
    const int a = kValue[p[i]], b = kValue[p[i + 1]], c = kValue[p[i + 2]], d = kValue[p[i + 3]];
    if ((a | b | c | d) < 0) return std::nullopt;
    const uint32_t n = (uint32_t(a) << 18) | (uint32_t(b) << 12) | (uint32_t(c) << 6) | uint32_t(d);
    out += static_cast<char>(n >> 16);
    out += static_cast<char>((n >> 8) & 0xff);
    out += static_cast<char>(n & 0xff);
  }
  if (text.empty()) return out;
  const unsigned char* q = p + full;
  const int pad = q[3] != '=' ? 0 : q[2] != '=' ? 1 : 2;
  const int a = kValue[q[0]], b = kValue[q[1]];
  const int c = pad == 2 ? 0 : kValue[q[2]];
  const int d = pad >= 1 ? 0 : kValue[q[3]];
  if ((a | b | c | d) < 0) return std::nullopt;
  const uint32_t n = (uint32_t(a) << 18) | (uint32_t(b) << 12) | (uint32_t(c) << 6) | uint32_t(d);
  // Non-canonical: bits the padding drops must be zero, so one text means one body.
  if ((pad == 1 && (n & 0xff) != 0) || (pad == 2 && (n & 0xffff) != 0)) return std::nullopt;
  out += static_cast<char>(n >> 16);
  if (pad < 2) out += static_cast<char>((n >> 8) & 0xff);
  if (pad < 1) out += static_cast<char>(n & 0xff);
  return out;
}

std::string MethodsShown(const std::vector<std::string>& methods) { return Joined(methods); }

}  // namespace

bool IsToken(std::string_view text) {
  if (text.empty()) return false;
  for (char c : text) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
    if (!ok) return false;
  }
  return true;
}

bool IsControlledHeader(std::string_view name) {
  static const char* const kControlled[] = {
      "host",    "content-length", "transfer-encoding", "connection", "keep-alive", "upgrade", "te",
      "trailer", "expect",         "http2-settings"};
  const std::string lower = Lowered(name);
  for (const char* c : kControlled) {
    if (lower == c) return true;
  }
  return lower.rfind("proxy-", 0) == 0;
}

Result<std::string> NormalizeMethod(std::string_view method) {
  if (method.size() > kMaxMethodBytes) {
    return MakeError(ErrorCode::kInvalidArgument, "a method is at most " + std::to_string(kMaxMethodBytes) + " bytes");
  }
  if (!IsToken(method)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "the method " + Quoted(method) + " is not an HTTP token (GET, POST, ...)");
  }
  const std::string upper = Uppered(method);
  if (upper == "CONNECT" || upper == "TRACE" || upper == "TRACK") {
    return MakeError(ErrorCode::kInvalidArgument, "the method " + upper + " is forbidden (fetch() refuses it too)");
  }
  for (const char* m : {"DELETE", "GET", "HEAD", "OPTIONS", "POST", "PUT"}) {
    if (upper == m) return upper;
  }
  return std::string(method);
}

namespace {

Result<FetchGrant> ParseFetchGrantOnce(const Json& grant, const std::string& path) {
  if (!grant.is_object()) {
    return Invalid(path,
                   "must be an object {\"rules\": [{\"url\": \"https://host/path/\"}]} (got " + Shown(grant) + ")");
  }
  for (const auto& [key, value] : grant.items()) {
    if (key != "rules" && key != "limits")
      return Invalid(path + "." + PathKey(key), "unknown key (known: rules, limits)");
  }
  FetchGrant out;
  auto rules = grant.find("rules");
  if (rules == grant.end()) return Invalid(path, "\"rules\" is missing: [{\"url\": \"https://api.example.com/v1/\"}]");
  if (!rules->is_array() || rules->empty() || rules->size() > kMaxRules) {
    return Invalid(path + ".rules",
                   "must be a list of 1 to " + std::to_string(kMaxRules) + " rules (got " + Shown(*rules) + ")");
  }
  std::map<std::string, size_t> seen;
  for (size_t i = 0; i < rules->size(); ++i) {
    const std::string at = path + ".rules[" + std::to_string(i) + "]";
    auto rule = ParseRule((*rules)[i], at);
    if (!rule) return rule.error();
    auto [it, fresh] = seen.emplace(rule->url.text, i);
    if (!fresh) {
      return Invalid(at + ".url", "the same url as rules[" + std::to_string(it->second) + "] (" + rule->url.text +
                                      "): merge the two rules");
    }
    out.rules.push_back(std::move(*rule));
  }
  if (auto limits = grant.find("limits"); limits != grant.end()) {
    if (auto r = ParseLimits(*limits, path + ".limits", out.limits); !r) return r.error();
  }
  return out;
}

// One http.fetch call parses its grant and its arguments three times (the journal's effect, the
// gate's decision, the handler), and a parse costs microseconds (libcurl's URL API, CIDRs, base64;
// 8-21 us each measured on the shared machine): a third of the parent's own CPU per fetch beyond
// libcurl's. Both parses are pure functions of their inputs (secrets are expanded per request,
// never here), so the last of each is kept per thread and given back for an equal input; comparing
// and copying cost about a tenth of parsing.
struct GrantMemo {
  Json grant;
  std::string path;
  std::optional<Result<std::shared_ptr<const FetchGrant>>> parsed;
};

// Arguments with a body larger than this are parsed again rather than held a second time.
constexpr size_t kMemoMaxBodyText = 64 * 1024;

struct ArgsMemo {
  Json args;
  FetchLimits limits;
  std::optional<Result<std::shared_ptr<const FetchRequest>>> parsed;
};

// The bytes of the arguments' body text ({"base64": "..."}), 0 without one.
size_t BodyText(const Json& args) {
  if (!args.is_object()) return 0;
  const auto body = args.find("body");
  if (body == args.end() || !body->is_object()) return 0;
  const auto text = body->find("base64");
  return text != body->end() && text->is_string() ? text->get_ref<const std::string&>().size() : 0;
}

bool SameLimits(const FetchLimits& a, const FetchLimits& b) {
  return a.connect_timeout_ms == b.connect_timeout_ms && a.timeout_ms == b.timeout_ms &&
         a.max_response_bytes == b.max_response_bytes && a.max_request_bytes == b.max_request_bytes &&
         a.max_redirects == b.max_redirects && a.max_in_flight == b.max_in_flight &&
         a.max_requests == b.max_requests;
}

}  // namespace

Result<std::shared_ptr<const FetchGrant>> SharedFetchGrant(const Json& grant, const std::string& path) {
  thread_local GrantMemo memo;
  if (memo.parsed && memo.path == path && memo.grant == grant) return *memo.parsed;
  Result<FetchGrant> once = ParseFetchGrantOnce(grant, path);
  Result<std::shared_ptr<const FetchGrant>> parsed =
      once ? Result<std::shared_ptr<const FetchGrant>>(std::make_shared<const FetchGrant>(std::move(*once)))
           : Result<std::shared_ptr<const FetchGrant>>(once.error());
  memo.grant = grant;
  memo.path = path;
  memo.parsed = parsed;
  return parsed;
}

Result<FetchGrant> ParseFetchGrant(const Json& grant, const std::string& path) {
  auto shared = SharedFetchGrant(grant, path);
  if (!shared) return shared.error();
  return **shared;
}

Result<void> CheckFetchGrant(const Json& grant, const std::string& path) {
  auto parsed = ParseFetchGrant(grant, path);
  if (!parsed) return parsed.error();
  return Ok();
}

RuleMatch MatchRequest(const FetchGrant& grant, const CanonicalUrl& url, std::string_view method) {
  RuleMatch result;
  const FetchRule* first_url_match = nullptr;
  std::vector<std::string> granted;
  for (const FetchRule& rule : grant.rules) {
    if (!PatternMatches(rule.url, url)) continue;
    if (std::find(rule.methods.begin(), rule.methods.end(), method) != rule.methods.end()) {
      result.rule = &rule;
      return result;
    }
    if (first_url_match == nullptr) first_url_match = &rule;
    for (const std::string& m : rule.methods) {
      if (std::find(granted.begin(), granted.end(), m) == granted.end()) granted.push_back(m);
    }
  }
  if (first_url_match != nullptr) {
    result.denial = "method " + Quoted(method).substr(1, Quoted(method).size() - 2) + " is not granted for " +
                    first_url_match->url.text + " (granted: " + MethodsShown(granted) + ")";
    return result;
  }
  std::vector<std::string> patterns;
  size_t shown_bytes = 0;
  for (const FetchRule& rule : grant.rules) {
    if (shown_bytes > 400) {
      patterns.push_back("... " + std::to_string(grant.rules.size() - patterns.size()) + " more");
      break;
    }
    patterns.push_back(rule.url.text);
    shown_bytes += rule.url.text.size();
  }
  result.denial = "no rule of grant http.fetch admits " + url.Display() + " (rules: " + Joined(patterns) + ")";
  return result;
}

std::vector<std::string> SecretRefs(const FetchRule& rule) {
  std::set<std::string> names;
  for (const HeaderTemplate& h : rule.headers) {
    auto pieces = SplitTemplate(h.value);
    if (!pieces) continue;  // ParseFetchGrant refused it
    for (const TemplatePiece& p : *pieces) {
      if (p.secret) names.insert(p.text);
    }
  }
  return {names.begin(), names.end()};
}

Result<std::string> ExpandSecrets(std::string_view value_template, const SecretLookup& lookup) {
  auto pieces = SplitTemplate(value_template);
  if (!pieces) return pieces.error();
  std::string out;
  for (const TemplatePiece& p : *pieces) {
    if (!p.secret) {
      out += p.text;
      continue;
    }
    std::optional<std::string> value = lookup ? lookup(p.text) : std::nullopt;
    if (!value) {
      return MakeError(ErrorCode::kNotFound, "the secret " + p.text +
                                                 " is not set: the operator must provide it (see docs/http.md, "
                                                 "\"Secrets\") before this rule can be used");
    }
    if (HasLineBreakOrNul(*value)) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "the secret " + p.text + " holds CR, LF or NUL, which would split the header: fix the secret");
    }
    out += *value;
  }
  return out;
}

Result<HeaderList> RequestHeaders(const FetchRule& rule, const HeaderList& script_headers, const SecretLookup& lookup) {
  std::set<std::string> replaced;
  for (const HeaderTemplate& h : rule.headers) replaced.insert(Lowered(h.name));
  HeaderList out;
  for (const auto& [name, value] : script_headers) {
    if (replaced.count(Lowered(name)) == 0) out.emplace_back(name, value);
  }
  for (const HeaderTemplate& h : rule.headers) {
    auto value = ExpandSecrets(h.value, lookup);
    if (!value)
      return MakeError(value.error().code,
                       "header " + h.name + " of rule " + rule.url.text + ": " + value.error().message);
    out.emplace_back(h.name, std::move(*value));
  }
  return out;
}

namespace {

Result<FetchRequest> ParseFetchArgsOnce(const Json& args, const FetchLimits& limits) {
  auto fail = [](const std::string& what) { return MakeError(ErrorCode::kInvalidArgument, "http.fetch: " + what); };
  if (!args.is_object())
    return fail("the arguments must be an object {\"url\", \"method\", ...} (got " + Shown(args) + ")");
  for (const auto& [key, value] : args.items()) {
    if (key != "url" && key != "method" && key != "headers" && key != "body" && key != "redirect") {
      return fail("unknown argument " + Quoted(key) + " (known: url, method, headers, body, redirect)");
    }
  }
  FetchRequest request;
  auto url = args.find("url");
  if (url == args.end() || !url->is_string()) return fail("\"url\" must be a string");
  auto canonical = CanonicalizeUrl(url->get_ref<const std::string&>());
  if (!canonical) return fail(canonical.error().message);
  request.url = std::move(*canonical);

  auto method = args.find("method");
  if (method == args.end() || !method->is_string()) return fail("\"method\" must be a string");
  auto normalized = NormalizeMethod(method->get_ref<const std::string&>());
  if (!normalized) return fail(normalized.error().message);
  request.method = std::move(*normalized);

  if (auto headers = args.find("headers"); headers != args.end()) {
    if (!headers->is_array()) return fail("\"headers\" must be a list of [name, value] pairs");
    if (headers->size() > kMaxRequestHeaders) {
      return fail(std::to_string(headers->size()) + " headers; the limit is " + std::to_string(kMaxRequestHeaders));
    }
    size_t bytes = 0;
    for (size_t i = 0; i < headers->size(); ++i) {
      const Json& pair = (*headers)[i];
      const std::string at = "headers[" + std::to_string(i) + "]";
      if (!pair.is_array() || pair.size() != 2 || !pair[0].is_string() || !pair[1].is_string()) {
        return fail(at + " must be a [name, value] pair of strings (got " + Shown(pair) + ")");
      }
      const std::string& name = pair[0].get_ref<const std::string&>();
      const std::string& value = pair[1].get_ref<const std::string&>();
      bytes += name.size() + value.size();
      if (bytes > kMaxRequestHeaderBytes) {
        return fail("the headers exceed " + std::to_string(kMaxRequestHeaderBytes) +
                    " bytes (names and values together)");
      }
      if (!IsToken(name)) return fail(at + ": " + Quoted(name) + " is not a header name (an HTTP token)");
      if (IsControlledHeader(name))
        return fail(at + ": basal sets the header " + Quoted(name) + " itself; do not set it");
      if (HasLineBreakOrNul(value)) return fail(at + ": the value of " + name + " holds CR, LF or NUL");
      request.headers.emplace_back(name, value);
    }
  }

  if (auto body = args.find("body"); body != args.end() && !body->is_null()) {
    if (!body->is_object() || body->size() != 1 || !body->contains("base64") || !(*body)["base64"].is_string()) {
      return fail("\"body\" must be null or {\"base64\": string}");
    }
    const std::string& text = (*body)["base64"].get_ref<const std::string&>();
    // Before decoding: the text of a body within the limit is at most 4 * ceil(limit / 3) bytes.
    const uint64_t max_text = (limits.max_request_bytes + 2) / 3 * 4;
    if (text.size() > max_text) {
      return fail("the body is about " + std::to_string(text.size() / 4 * 3) +
                  " bytes; the grant's limits.max_request_bytes is " + std::to_string(limits.max_request_bytes));
    }
    auto decoded = DecodeBase64(text);
    if (!decoded) return fail("\"body\".base64 is not strict base64 (RFC 4648, padded)");
    if (decoded->size() > limits.max_request_bytes) {
      return fail("the body is " + std::to_string(decoded->size()) +
                  " bytes; the grant's limits.max_request_bytes is " + std::to_string(limits.max_request_bytes));
    }
    if (request.method == "GET" || request.method == "HEAD")
      return fail("a " + request.method + " request cannot have a body");
    request.body = std::move(*decoded);
  }

  if (auto redirect = args.find("redirect"); redirect != args.end()) {
    const std::string r = redirect->is_string() ? redirect->get<std::string>() : "";
    if (r == "follow") {
      request.redirect = RedirectMode::kFollow;
    } else if (r == "error") {
      request.redirect = RedirectMode::kError;
    } else if (r == "manual") {
      request.redirect = RedirectMode::kManual;
    } else {
      return fail("\"redirect\" must be \"follow\", \"error\" or \"manual\" (got " + Shown(*redirect) + ")");
    }
  }
  return request;
}

}  // namespace

Result<std::shared_ptr<const FetchRequest>> SharedFetchArgs(const Json& args, const FetchLimits& limits) {
  thread_local ArgsMemo memo;
  if (memo.parsed && SameLimits(memo.limits, limits) && memo.args == args) return *memo.parsed;
  Result<FetchRequest> once = ParseFetchArgsOnce(args, limits);
  Result<std::shared_ptr<const FetchRequest>> parsed =
      once ? Result<std::shared_ptr<const FetchRequest>>(std::make_shared<const FetchRequest>(std::move(*once)))
           : Result<std::shared_ptr<const FetchRequest>>(once.error());
  if (BodyText(args) <= kMemoMaxBodyText) {
    memo.args = args;
    memo.limits = limits;
    memo.parsed = parsed;
  } else {
    memo = ArgsMemo{};
  }
  return parsed;
}

Result<FetchRequest> ParseFetchArgs(const Json& args, const FetchLimits& limits) {
  auto shared = SharedFetchArgs(args, limits);
  if (!shared) return shared.error();
  return **shared;
}

std::optional<std::string> AuthorizeFetch(const Json& constraints, const Json& args) {
  static const std::string kPath = "grants.http.fetch";
  auto grant = SharedFetchGrant(constraints, kPath);
  if (!grant) return "the grant of http.fetch is invalid: " + grant.error().message;
  auto request = SharedFetchArgs(args, (*grant)->limits);
  if (!request) return request.error().message;
  RuleMatch match = MatchRequest(**grant, (*request)->url, (*request)->method);
  if (match.rule == nullptr) return match.denial;
  // An IP literal needs no resolver: refuse it now, with its reason, rather than at connect time.
  if ((*request)->url.ip) {
    if (auto refusal = ConnectRefusal(*(*request)->url.ip, match.rule->allow_networks))
      return "http.fetch: " + *refusal;
  }
  return std::nullopt;
}

// ---- compare ----

namespace {

std::string CidrsShown(const std::vector<Cidr>& cidrs) {
  std::vector<std::string> out;
  for (const Cidr& c : cidrs) out.push_back(FormatCidr(c));
  return Joined(out);
}

// Every address of `inner` is in some CIDR of `outer`. A CIDR covered only by the union of several
// (two /25 for a /24) is not seen: the answer is then "changed", never a wrong direction.
bool Covers(const std::vector<Cidr>& outer, const std::vector<Cidr>& inner) {
  for (const Cidr& i : inner) {
    bool covered = false;
    for (const Cidr& o : outer) covered = covered || Contains(o, i);
    if (!covered) return false;
  }
  return true;
}

void CompareRule(const FetchRule& was, const FetchRule& now, std::vector<ConstraintChange>& changes) {
  const std::string at = "rules[" + now.url.text + "]";
  {
    std::vector<std::string> added, removed;
    for (const std::string& m : now.methods) {
      if (std::find(was.methods.begin(), was.methods.end(), m) == was.methods.end()) added.push_back("+" + m);
    }
    for (const std::string& m : was.methods) {
      if (std::find(now.methods.begin(), now.methods.end(), m) == now.methods.end()) removed.push_back("-" + m);
    }
    if (!added.empty() || !removed.empty()) {
      std::vector<std::string> all = added;
      all.insert(all.end(), removed.begin(), removed.end());
      changes.push_back({at + ".methods",
                         removed.empty() ? Direction::kWidened
                         : added.empty() ? Direction::kNarrowed
                                         : Direction::kChanged,
                         Joined(all, " ")});
    }
  }
  {
    const bool wider = Covers(now.allow_networks, was.allow_networks);
    const bool narrower = Covers(was.allow_networks, now.allow_networks);
    if (!(wider && narrower)) {
      changes.push_back({at + ".allow_networks",
                         wider      ? Direction::kWidened
                         : narrower ? Direction::kNarrowed
                                    : Direction::kChanged,
                         "[" + CidrsShown(was.allow_networks) + "] -> [" + CidrsShown(now.allow_networks) + "]"});
    }
  }
  if (was.idempotency_key != now.idempotency_key) {
    // With a key, a retried request of this rule is one the server can drop: not a wider grant,
    // but a change of what a resume may repeat.
    changes.push_back({at + ".idempotency_key", Direction::kChanged,
                       (was.idempotency_key.empty() ? std::string("none") : was.idempotency_key) + " -> " +
                           (now.idempotency_key.empty() ? std::string("none") : now.idempotency_key)});
  }
  if (was.retry != now.retry) {
    changes.push_back({at + ".retry", Direction::kChanged, RetryShown(was.retry) + " -> " + RetryShown(now.retry)});
  }
  if (was.allow_plain_http != now.allow_plain_http) {
    changes.push_back(
        {at + ".allow_plain_http", now.allow_plain_http ? Direction::kWidened : Direction::kNarrowed,
         std::string(was.allow_plain_http ? "true" : "false") + " -> " + (now.allow_plain_http ? "true" : "false")});
  }
  {
    std::map<std::string, const HeaderTemplate*> old_headers, new_headers;
    for (const HeaderTemplate& h : was.headers) old_headers[Lowered(h.name)] = &h;
    for (const HeaderTemplate& h : now.headers) new_headers[Lowered(h.name)] = &h;
    std::vector<std::string> parts;
    for (const auto& [key, h] : new_headers) {
      auto it = old_headers.find(key);
      if (it == old_headers.end()) {
        parts.push_back("+" + h->name);
      } else if (it->second->value != h->value || it->second->name != h->name) {
        parts.push_back("~" + h->name);
      }
    }
    for (const auto& [key, h] : old_headers) {
      if (new_headers.count(key) == 0) parts.push_back("-" + h->name);
    }
    if (!parts.empty()) changes.push_back({at + ".headers", Direction::kChanged, Joined(parts, " ")});
  }
}

}  // namespace

std::vector<ConstraintChange> CompareFetchGrant(const Json& before, const Json& after) {
  std::vector<ConstraintChange> changes;
  auto was = ParseFetchGrant(before, "before");
  auto now = ParseFetchGrant(after, "after");
  if (!was || !now) {
    // compare_grant gets grants that passed check_grant; if one did not, say so rather than guess.
    if (before != after) {
      changes.push_back(
          {"rules", Direction::kChanged, "cannot compare: " + (!was ? was.error().message : now.error().message)});
    }
    return changes;
  }
  std::map<std::string, const FetchRule*> old_rules, new_rules;
  for (const FetchRule& r : was->rules) old_rules[r.url.text] = &r;
  for (const FetchRule& r : now->rules) new_rules[r.url.text] = &r;
  for (const FetchRule& r : now->rules) {
    auto it = old_rules.find(r.url.text);
    if (it == old_rules.end()) {
      changes.push_back(
          {"rules[" + r.url.text + "]", Direction::kWidened, "+" + r.url.text + " (" + MethodsShown(r.methods) + ")"});
    } else {
      CompareRule(*it->second, r, changes);
    }
  }
  for (const FetchRule& r : was->rules) {
    if (new_rules.count(r.url.text) == 0) {
      changes.push_back(
          {"rules[" + r.url.text + "]", Direction::kNarrowed, "-" + r.url.text + " (" + MethodsShown(r.methods) + ")"});
    }
  }
  std::vector<std::string> old_order, new_order;
  for (const FetchRule& r : was->rules) {
    if (new_rules.count(r.url.text)) old_order.push_back(r.url.text);
  }
  for (const FetchRule& r : now->rules) {
    if (old_rules.count(r.url.text)) new_order.push_back(r.url.text);
  }
  if (old_order != new_order) {
    changes.push_back(
        {"rules", Direction::kChanged,
         "order " + Joined(old_order) + " -> " + Joined(new_order) + " (the first matching rule sets the headers)"});
  }
  const Json* old_limits = before.contains("limits") ? &before["limits"] : nullptr;
  const Json* new_limits = after.contains("limits") ? &after["limits"] : nullptr;
  for (const LimitSpec& spec : kLimitSpecs) {
    const uint64_t a = was->limits.*(spec.field);
    const uint64_t b = now->limits.*(spec.field);
    if (a == b) continue;
    auto shown = [&](const Json* limits, uint64_t v) {
      return std::to_string(v) + (limits == nullptr || !limits->contains(spec.name) ? " (default)" : "");
    };
    changes.push_back({std::string("limits.") + spec.name, b > a ? Direction::kWidened : Direction::kNarrowed,
                       shown(old_limits, a) + " -> " + shown(new_limits, b)});
  }
  return changes;
}

uint64_t FetchRetry::DelayBefore(uint64_t next) const {
  double delay = static_cast<double>(initial_ms);
  for (uint64_t i = 2; i < next && delay < static_cast<double>(max_ms); ++i) delay *= factor;
  return std::min<uint64_t>(max_ms, static_cast<uint64_t>(delay));
}

Effect RequestEffect(const FetchRule& rule, std::string_view method) {
  if (!rule.idempotency_key.empty()) return Effect::kIdempotent;
  for (std::string_view m : {"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
    if (method == m) return Effect::kIdempotent;
  return Effect::kExternal;
}

}  // namespace basal::http
