#include "protocol/messages.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <vector>

#include "protocol/frame.h"

namespace basal::protocol {
namespace {

// A character that continues a number or a literal (true, false, null) outside strings.
bool InScalar(char c) {
  switch (c) {
    case '{': case '}': case '[': case ']': case ',': case ':': case '"':
    case ' ': case '\t': case '\n': case '\r':
      return false;
    default:
      return true;
  }
}

std::string TooManyValues(size_t limit) {
  return "JSON of more than " + std::to_string(limit) +
         " values (objects, arrays, strings, numbers, literals; the limit is kMaxMessageValues), refused before "
         "it is parsed: a parsed tree of tiny values costs many times its text";
}

class Fields {
 public:
  Fields(const Json& obj, std::string& error) : obj_(obj), error_(error) {}

  bool Int(const char* key, int64_t& out, int64_t min = 0, int64_t max = kMaxMessageInteger) {
    auto it = obj_.find(key);
    if (it == obj_.end()) return Fail(std::string("missing field \"") + key + "\"");
    if (!it->is_number_integer()) return Fail(std::string("field \"") + key + "\" must be an integer");
    const std::optional<int64_t> v = IntegerIn(*it, min, max);
    if (!v)
      return Fail(std::string("field \"") + key + "\" is " + it->dump() + ", outside " + std::to_string(min) +
                  " to " + std::to_string(max));
    out = *v;
    return true;
  }
  bool Str(const char* key, std::string& out, bool optional = false) {
    auto it = obj_.find(key);
    if (it == obj_.end()) {
      if (optional) return true;
      return Fail(std::string("missing field \"") + key + "\"");
    }
    if (!it->is_string()) return Fail(std::string("field \"") + key + "\" must be a string");
    out = it->get<std::string>();
    return true;
  }
  bool Bool(const char* key, bool& out, bool optional = false) {
    auto it = obj_.find(key);
    if (it == obj_.end()) {
      if (optional) return true;
      return Fail(std::string("missing field \"") + key + "\"");
    }
    if (!it->is_boolean()) return Fail(std::string("field \"") + key + "\" must be a boolean");
    out = it->get<bool>();
    return true;
  }
  bool Any(const char* key, Json& out) {
    auto it = obj_.find(key);
    if (it == obj_.end()) return Fail(std::string("missing field \"") + key + "\"");
    out = *it;
    return true;
  }
  bool Has(const char* key) const { return obj_.contains(key); }
  // Refuses keys outside `allowed`, so a message cannot smuggle fields we ignore.
  bool Only(std::initializer_list<const char*> allowed) {
    for (auto it = obj_.begin(); it != obj_.end(); ++it) {
      bool known = false;
      for (const char* a : allowed) known = known || it.key() == a;
      if (!known) return Fail("unexpected field \"" + it.key() + "\"");
    }
    return true;
  }
  bool Fail(std::string message) {
    error_ = std::move(message);
    return false;
  }

 private:
  const Json& obj_;
  std::string& error_;
};

// `in_loaded`: the error of a failed `loaded`, which alone may carry `line` (where compiling the
// flow stopped); a `done` error with a `line` is refused like any unknown field.
bool ParseScriptError(const Json& j, ScriptError& out, std::string& error, bool in_loaded) {
  if (!j.is_object()) {
    error = "field \"error\" must be an object";
    return false;
  }
  Fields f(j, error);
  const bool only = in_loaded ? f.Only({"kind", "budget", "name", "message", "stack", "line"})
                              : f.Only({"kind", "budget", "name", "message", "stack"});
  if (!only || !f.Str("kind", out.kind) || !f.Str("name", out.name) || !f.Str("message", out.message) ||
      !f.Str("stack", out.stack, true) || !f.Str("budget", out.budget, true))
    return false;
  // QuickJS counts lines in an int: a line beyond that names no place in any source it compiled.
  if (f.Has("line") && !f.Int("line", out.line, 1, std::numeric_limits<int32_t>::max())) return false;
  if (out.kind == "script_error") {
    if (!out.budget.empty()) return f.Fail("a script_error names no budget");
    return true;
  }
  if (out.kind == "budget_exhausted") {
    if (out.budget != "cpu" && out.budget != "memory" && out.budget != "stack")
      return f.Fail("budget_exhausted must name budget \"cpu\", \"memory\" or \"stack\"");
    if (out.line != 0) return f.Fail("a budget_exhausted error names no line");
    return true;
  }
  return f.Fail("unknown error kind \"" + out.kind + "\"");
}

int64_t ClampToMessageInteger(int64_t v) { return v < 0 ? 0 : v > kMaxMessageInteger ? kMaxMessageInteger : v; }

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;  // uppercase too: one spelling per seed, so a journaled seed compares as text
}

// load's "durable": {"clock_us": INT, "seed": "64 lowercase hex digits"}, both required, nothing else.
bool ParseDurable(const Json& j, DurableStart& out, std::string& error) {
  if (!j.is_object()) {
    error = "field \"durable\" must be an object {\"clock_us\", \"seed\"}";
    return false;
  }
  std::string inner;
  Fields f(j, inner);
  std::string seed;
  bool ok = f.Only({"clock_us", "seed"}) && f.Int("clock_us", out.clock_us) && f.Str("seed", seed);
  if (ok && seed.size() != 2 * kDurableSeedBytes) {
    ok = f.Fail("field \"seed\" must be " + std::to_string(2 * kDurableSeedBytes) + " lowercase hex digits (" +
                std::to_string(kDurableSeedBytes) + " bytes), not " + std::to_string(seed.size()) + " characters");
  }
  for (size_t i = 0; ok && i < kDurableSeedBytes; ++i) {
    const int hi = HexDigit(seed[2 * i]);
    const int lo = HexDigit(seed[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      ok = f.Fail("field \"seed\" must be lowercase hex digits (0-9, a-f): character " +
                  std::to_string(hi < 0 ? 2 * i + 1 : 2 * i + 2) + " is not one");
    } else {
      out.seed[i] = static_cast<uint8_t>(hi << 4 | lo);
    }
  }
  if (!ok) error = "field \"durable\": " + inner;
  return ok;
}

}  // namespace

std::optional<int64_t> IntegerIn(const Json& value, int64_t min, int64_t max) {
  int64_t v = 0;
  if (value.is_number_unsigned()) {
    const auto u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    v = static_cast<int64_t>(u);
  } else if (value.is_number_integer()) {
    v = value.get<int64_t>();
  } else {
    return std::nullopt;
  }
  if (v < min || v > max) return std::nullopt;
  return v;
}

size_t CountJsonValues(std::string_view text, size_t stop_after) {
  size_t values = 0;
  bool in_string = false;
  bool escape = false;
  bool scalar = false;  // inside a number or literal
  for (char c : text) {
    if (in_string) {
      if (escape) {
        escape = false;
      } else if (c == '\\') {
        escape = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    const bool starts = c == '"' || c == '{' || c == '[' || (InScalar(c) && !scalar);
    scalar = InScalar(c);
    in_string = c == '"';
    if (starts && ++values > stop_after) return values;
  }
  return values;
}

namespace {

// What ParseJsonValue and FitsInMessage check of a text before any tree is built, in one pass over
// it (a host call's frame and its result are each read once, not three times): a raw NUL, the
// nesting past max_depth, the values as CountJsonValues counts them. The whole text is read
// whatever it finds, so the checks' order decides which one is reported, as before.
struct JsonScan {
  bool nul = false;
  bool too_deep = false;
  size_t values = 0;
};
JsonScan ScanJson(std::string_view text, int max_depth) {
  JsonScan out;
  int depth = 0;
  bool in_string = false;
  bool escape = false;
  bool scalar = false;
  for (char c : text) {
    if (c == '\0') out.nul = true;
    if (in_string) {
      if (escape) {
        escape = false;
      } else if (c == '\\') {
        escape = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    const bool in_scalar = InScalar(c);
    if (c == '"' || c == '{' || c == '[' || (in_scalar && !scalar)) ++out.values;
    scalar = in_scalar;
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) out.too_deep = true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return out;
}

}  // namespace

namespace {

constexpr size_t kNoIndex = std::string_view::npos;

size_t SkipJsonSpace(std::string_view t, size_t i) {
  while (i < t.size() && (t[i] == ' ' || t[i] == '\t' || t[i] == '\n' || t[i] == '\r')) ++i;
  return i;
}

size_t HexDigits4(std::string_view t, size_t i, uint32_t& v) {
  if (i + 4 > t.size()) return kNoIndex;
  v = 0;
  for (size_t k = i; k < i + 4; ++k) {
    const char c = t[k];
    uint32_t d = 0;
    if (c >= '0' && c <= '9') {
      d = static_cast<uint32_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      d = static_cast<uint32_t>(c - 'a' + 10);
    } else if (c >= 'A' && c <= 'F') {
      d = static_cast<uint32_t>(c - 'A' + 10);
    } else {
      return kNoIndex;
    }
    v = v << 4 | d;
  }
  return i + 4;
}

bool Between(std::string_view t, size_t i, unsigned lo, unsigned hi) {
  if (i >= t.size()) return false;
  const auto c = static_cast<unsigned char>(t[i]);
  return c >= lo && c <= hi;
}

// `i` at an opening quote: the index after the closing one if the string is JSON as the shared
// parser reads it (no control character, the escapes JSON has, a high surrogate escape followed by
// a low one and no lone low one, UTF-8 without overlong forms, surrogates or code points past
// U+10FFFF), else kNoIndex.
size_t ValidString(std::string_view t, size_t i) {
  for (++i; i < t.size();) {
    const auto c = static_cast<unsigned char>(t[i]);
    if (c == '"') return i + 1;
    if (c < 0x20) return kNoIndex;
    if (c == '\\') {
      if (i + 1 >= t.size()) return kNoIndex;
      const char e = t[i + 1];
      if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't') {
        i += 2;
        continue;
      }
      if (e != 'u') return kNoIndex;
      uint32_t u = 0;
      i = HexDigits4(t, i + 2, u);
      if (i == kNoIndex || (u >= 0xDC00 && u <= 0xDFFF)) return kNoIndex;
      if (u >= 0xD800 && u <= 0xDBFF) {
        if (i + 1 >= t.size() || t[i] != '\\' || t[i + 1] != 'u') return kNoIndex;
        i = HexDigits4(t, i + 2, u);
        if (i == kNoIndex || u < 0xDC00 || u > 0xDFFF) return kNoIndex;
      }
      continue;
    }
    if (c < 0x80) {
      ++i;
    } else if (c >= 0xC2 && c <= 0xDF) {
      if (!Between(t, i + 1, 0x80, 0xBF)) return kNoIndex;
      i += 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      const unsigned lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
      if (!Between(t, i + 1, lo, hi) || !Between(t, i + 2, 0x80, 0xBF)) return kNoIndex;
      i += 3;
    } else if (c >= 0xF0 && c <= 0xF4) {
      const unsigned lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
      if (!Between(t, i + 1, lo, hi) || !Between(t, i + 2, 0x80, 0xBF) || !Between(t, i + 3, 0x80, 0xBF))
        return kNoIndex;
      i += 4;
    } else {
      return kNoIndex;
    }
  }
  return kNoIndex;
}

bool Digit(std::string_view t, size_t i) { return i < t.size() && t[i] >= '0' && t[i] <= '9'; }

// `i` at a number's first byte: the index after it if it is a JSON number the shared parser keeps
// (one too large for a double is refused there, as "number overflow"), else kNoIndex.
size_t ValidNumber(std::string_view t, size_t i) {
  const size_t begin = i;
  if (i < t.size() && t[i] == '-') ++i;
  if (!Digit(t, i)) return kNoIndex;
  if (t[i] == '0') {
    ++i;
  } else {
    while (Digit(t, i)) ++i;
  }
  bool integer = true;
  if (i < t.size() && t[i] == '.') {
    integer = false;
    if (!Digit(t, ++i)) return kNoIndex;
    while (Digit(t, i)) ++i;
  }
  if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    integer = false;
    ++i;
    if (i < t.size() && (t[i] == '+' || t[i] == '-')) ++i;
    if (!Digit(t, i)) return kNoIndex;
    while (Digit(t, i)) ++i;
  }
  // An integer of up to 18 digits is an int64 (or a uint64); anything else the parser reads as a
  // double, and refuses when that overflows.
  if (!integer || i - begin > 18) {
    const std::string text(t.substr(begin, i - begin));
    if (!std::isfinite(std::strtod(text.c_str(), nullptr))) return kNoIndex;
  }
  return i;
}

}  // namespace

bool IsJsonText(std::string_view t) {
  // Iterative: what each open bracket expects next is kept on a stack of its own, never the call
  // stack. `true` below an array, `false` below an object.
  std::vector<bool> open;
  size_t i = SkipJsonSpace(t, 0);
  for (;;) {
    // A value at `i`.
    if (i >= t.size()) return false;
    const char c = t[i];
    if (c == '{' || c == '[') {
      i = SkipJsonSpace(t, i + 1);
      if (i < t.size() && t[i] == (c == '{' ? '}' : ']')) {
        ++i;  // empty: a whole value, closed below
      } else {
        open.push_back(c == '[');
        if (c == '{') {
          if (i >= t.size() || t[i] != '"' || (i = ValidString(t, i)) == kNoIndex) return false;
          i = SkipJsonSpace(t, i);
          if (i >= t.size() || t[i] != ':') return false;
          i = SkipJsonSpace(t, i + 1);
        }
        continue;
      }
    } else if (c == '"') {
      if ((i = ValidString(t, i)) == kNoIndex) return false;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      if ((i = ValidNumber(t, i)) == kNoIndex) return false;
    } else if (t.substr(i, 4) == "true" || t.substr(i, 4) == "null") {
      i += 4;
    } else if (t.substr(i, 5) == "false") {
      i += 5;
    } else {
      return false;
    }
    // After a whole value: a separator, a closing bracket, or the end.
    for (;;) {
      i = SkipJsonSpace(t, i);
      if (open.empty()) return i == t.size();
      const bool array = open.back();
      if (i >= t.size()) return false;
      if (t[i] == (array ? ']' : '}')) {
        open.pop_back();
        ++i;
        continue;
      }
      if (t[i] != ',') return false;
      i = SkipJsonSpace(t, i + 1);
      if (!array) {
        if (i >= t.size() || t[i] != '"' || (i = ValidString(t, i)) == kNoIndex) return false;
        i = SkipJsonSpace(t, i);
        if (i >= t.size() || t[i] != ':') return false;
        i = SkipJsonSpace(t, i + 1);
      }
      break;
    }
  }
}

bool FitsInMessage(std::string_view value_json, std::string& why) {
  const JsonScan scan = ScanJson(value_json, kMaxJsonDepth - 1);
  if (scan.too_deep) {
    why = "nested deeper than " + std::to_string(kMaxJsonDepth - 1) + " levels";
    return false;
  }
  if (value_json.size() > kMaxFieldBytes) {
    why = std::to_string(value_json.size()) + " bytes of JSON, above the limit of " + std::to_string(kMaxFieldBytes);
    return false;
  }
  if (scan.values > kMaxFieldValues) {
    why = "more than " + std::to_string(kMaxFieldValues) +
          " JSON values (objects, arrays, strings, numbers, literals), the limit of one message's field "
          "(kMaxFieldValues); send fewer, larger values (a string, say) or split it over several calls";
    return false;
  }
  return true;
}

bool ParseJsonValue(std::string_view text, Json& out, std::string& error, size_t max_values) {
  // nlohmann's reader takes a NUL byte for the end of its input, so "{...}<NUL>anything" would pass
  // with the rest unread. JSON has no raw NUL (a string writes \u0000): one is malformed.
  const JsonScan scan = ScanJson(text, kMaxJsonDepth);
  if (scan.nul) {
    error = "malformed JSON (a NUL byte)";
    return false;
  }
  if (scan.too_deep) {
    error = "JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels";
    return false;
  }
  if (scan.values > max_values) {
    error = TooManyValues(max_values);
    return false;
  }
  out = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (out.is_discarded()) {
    error = "malformed JSON";
    return false;
  }
  return true;
}

bool ParseJsonObject(std::string_view payload, Json& out, std::string& error) {
  if (!ParseJsonValue(payload, out, error)) return false;
  if (!out.is_object()) {
    error = "payload is not a JSON object";
    return false;
  }
  return true;
}

std::string DumpJson(const Json& value) {
  // A scalar without a string is written as dump writes it, without dump's serializer (an
  // allocation for its output adapter on every call): most results and inputs are one.
  switch (value.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return value.get<bool>() ? "true" : "false";
    case Json::value_t::number_unsigned:
      return std::to_string(value.get<uint64_t>());
    case Json::value_t::number_integer:
      return std::to_string(value.get<int64_t>());
    default:
      return value.dump(-1, ' ', false, Json::error_handler_t::replace);
  }
}

void AppendJsonString(std::string& out, std::string_view s) {
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') {
      out += DumpJson(Json(std::string(s)));
      return;
    }
  }
  out += '"';
  out += s;
  out += '"';
}

bool ParsePlainScalar(std::string_view text, Json& out) {
  if (text == "null") {
    out = nullptr;
    return true;
  }
  if (text == "true" || text == "false") {
    out = text[0] == 't';
    return true;
  }
  const bool negative = !text.empty() && text[0] == '-';
  const std::string_view digits = text.substr(negative ? 1 : 0);
  if (digits.empty() || digits.size() > 15 || (digits[0] == '0' && digits.size() > 1)) return false;
  uint64_t v = 0;
  for (const char c : digits) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  // As nlohmann reads them: a number with a minus is signed (-0 too), one without is unsigned.
  if (negative) {
    out = -static_cast<int64_t>(v);
  } else {
    out = v;
  }
  return true;
}

namespace {

constexpr std::string_view kDoneHead = R"({"type":"done","activation":)";

bool TakeText(std::string_view s, size_t& p, std::string_view text) {
  if (s.substr(p, text.size()) != text) return false;
  p += text.size();
  return true;
}

// 1 to 16 digits, no sign, no leading zero, no fraction or exponent, from `min` to
// kMaxMessageInteger; anything else is left to the general path.
bool TakeInteger(std::string_view s, size_t& p, int64_t min, int64_t& out) {
  const size_t start = p;
  int64_t v = 0;
  while (p < s.size() && p - start < 16 && s[p] >= '0' && s[p] <= '9') v = v * 10 + (s[p++] - '0');
  const size_t n = p - start;
  if (n == 0 || (n > 1 && s[start] == '0') || v < min || v > kMaxMessageInteger) return false;
  out = v;
  return true;
}

// The `done` of a result as the worker writes it, {"type":"done","activation":N,"cpu_us":N,"ok":V}
// (src/worker/engine.cpp), read without building the message's tree: only V is parsed. False for
// any other spelling (another order, spaces, an error, a number out of range, V not one value),
// which then takes the general path, so both accept and refuse alike (messages_test compares
// them). The caller has scanned the whole payload as the general path does (NUL, depth, values).
bool ParseResultDone(std::string_view payload, Done& d) {
  size_t p = 0;
  if (!TakeText(payload, p, kDoneHead) || !TakeInteger(payload, p, 1, d.activation) ||
      !TakeText(payload, p, R"(,"cpu_us":)") || !TakeInteger(payload, p, 0, d.cpu_us) ||
      !TakeText(payload, p, R"(,"ok":)"))
    return false;
  if (payload.size() <= p + 1 || payload.back() != '}') return false;
  const std::string_view value = payload.substr(p, payload.size() - 1 - p);
  if (!ParsePlainScalar(value, d.result)) {
    d.result = Json::parse(value.begin(), value.end(), nullptr, /*allow_exceptions=*/false);
    if (d.result.is_discarded()) return false;
  }
  d.ok = true;
  return true;
}

constexpr std::string_view kCallHead = R"({"type":"call","activation":)";

// A host call as the worker writes it, {"type":"call","activation":A,"id":I,"name":"N","args":V}
// (StartCall in src/worker/engine.cpp), read on the same terms as ParseResultDone: only V is
// parsed into a tree (the gate needs it as one), not the frame around it, whose tree cost as much
// again. N of 1 to 128 bytes of printable ASCII without a quote or a backslash (every host call's
// name); V not starting with a byte-order mark (nlohmann would skip it, the general path refuses
// it). Anything else takes the general path, which accepts and refuses alike (messages_test and
// fuzz/worker_message_fuzzer.cpp compare them).
bool ParseCallFrame(std::string_view payload, Call& c) {
  size_t p = 0;
  if (!TakeText(payload, p, kCallHead) || !TakeInteger(payload, p, 1, c.activation) ||
      !TakeText(payload, p, R"(,"id":)") || !TakeInteger(payload, p, 1, c.id) || !TakeText(payload, p, R"(,"name":")"))
    return false;
  const size_t name = p;
  while (p < payload.size() && payload[p] >= 0x20 && payload[p] < 0x7f && payload[p] != '"' && payload[p] != '\\') ++p;
  if (p == name || p - name > 128) return false;
  const std::string_view name_text = payload.substr(name, p - name);
  if (!TakeText(payload, p, R"(","args":)")) return false;
  if (payload.size() <= p + 1 || payload.back() != '}' || static_cast<unsigned char>(payload[p]) == 0xEF) return false;
  const std::string_view value = payload.substr(p, payload.size() - 1 - p);
  // null, a boolean or a small integer (a call without arguments, a count) without the parser.
  if (!ParsePlainScalar(value, c.args)) {
    c.args = Json::parse(value.begin(), value.end(), nullptr, /*allow_exceptions=*/false);
    if (c.args.is_discarded()) return false;
  }
  c.name = std::string(name_text);
  c.frame_bytes = payload.size();
  return true;
}

// A frame in the worker's own spelling (it starts with `head`), read by `parse` without a tree of
// the whole frame, within the general path's bounds. False leaves the frame to the general path.
template <typename Message>
bool ReadOwnSpelling(std::string_view payload, std::string_view head, bool (*parse)(std::string_view, Message&),
                     WorkerMessage& out) {
  if (payload.substr(0, head.size()) != head) return false;
  const JsonScan scan = ScanJson(payload, kMaxJsonDepth);
  Message m;
  if (scan.nul || scan.too_deep || scan.values > kMaxMessageValues || !parse(payload, m)) return false;
  out = std::move(m);
  return true;
}

}  // namespace

bool ParseWorkerMessage(std::string_view payload, WorkerMessage& out, std::string& error) {
  if (ReadOwnSpelling(payload, kDoneHead, ParseResultDone, out) || ReadOwnSpelling(payload, kCallHead, ParseCallFrame, out))
    return true;
  Json j;
  if (!ParseJsonObject(payload, j, error)) return false;
  Fields f(j, error);
  std::string type;
  if (!f.Str("type", type)) return false;
  if (type == "welcome") {
    Welcome w;
    // pid_t is a 32-bit int: a larger pid is no process at all.
    if (!f.Only({"type", "protocol", "os", "engine", "pid", "test_hooks", "confinement"}) ||
        !f.Int("protocol", w.protocol) || !f.Str("os", w.os) || !f.Str("engine", w.engine) ||
        !f.Int("pid", w.pid, 1, std::numeric_limits<int32_t>::max()) ||
        !f.Bool("test_hooks", w.test_hooks) || !f.Any("confinement", w.confinement))
      return false;
    if (!w.confinement.is_object()) return f.Fail("field \"confinement\" must be an object");
    w.raw = std::move(j);
    out = std::move(w);
    return true;
  }
  if (type == "loaded") {
    Loaded l;
    if (!f.Only({"type", "ok", "error"}) || !f.Bool("ok", l.ok)) return false;
    if (l.ok == f.Has("error")) return f.Fail(l.ok ? "a successful load carries no error" : "a failed load needs \"error\"");
    if (!l.ok && !ParseScriptError(j["error"], l.error, error, /*in_loaded=*/true)) return false;
    out = std::move(l);
    return true;
  }
  if (type == "call") {
    Call c;
    if (!f.Only({"type", "activation", "id", "name", "args"}) || !f.Int("activation", c.activation, 1) ||
        !f.Int("id", c.id, 1) || !f.Str("name", c.name) || !f.Has("args"))
      return f.Has("args") ? false : f.Fail("missing field \"args\"");
    c.args = std::move(j["args"]);  // moved, not copied: a frame's tree can be many times its size
    if (c.name.empty() || c.name.size() > 128) return f.Fail("call name must be 1 to 128 bytes");
    c.frame_bytes = payload.size();
    out = std::move(c);
    return true;
  }
  if (type == "done") {
    Done d;
    if (!f.Only({"type", "activation", "ok", "error", "cpu_us", "caught_budget_failure"}) ||
        !f.Int("activation", d.activation, 1) || !f.Int("cpu_us", d.cpu_us) ||
        !f.Bool("caught_budget_failure", d.caught_budget_failure, true))
      return false;
    const bool has_ok = f.Has("ok");
    if (has_ok == f.Has("error")) return f.Fail("done needs exactly one of \"ok\" and \"error\"");
    d.ok = has_ok;
    if (has_ok) {
      d.result = std::move(j["ok"]);
    } else if (!ParseScriptError(j["error"], d.error, error, /*in_loaded=*/false)) {
      return false;
    }
    out = std::move(d);
    return true;
  }
  return f.Fail("unknown message type \"" + type + "\"");
}

bool ParseParentMessage(std::string_view payload, ParentMessage& out, std::string& error) {
  Json j;
  if (!ParseJsonObject(payload, j, error)) return false;
  Fields f(j, error);
  std::string type;
  if (!f.Str("type", type)) return false;
  if (type == "load") {
    Load l;
    if (!f.Only({"type", "flow", "source", "profile", "cpu_ms", "heap_bytes", "stack_bytes", "tools", "durable"}) ||
        !f.Str("flow", l.flow) || !f.Str("source", l.source) || !f.Str("profile", l.profile) ||
        !f.Int("cpu_ms", l.cpu_ms, 1) || !f.Int("heap_bytes", l.heap_bytes, 1) || !f.Int("stack_bytes", l.stack_bytes, 1))
      return false;
    if (f.Has("tools")) {
      const Json& tools = j["tools"];
      if (!tools.is_array() || tools.size() > kMaxToolBindings)
        return f.Fail("field \"tools\" must be an array of at most " + std::to_string(kMaxToolBindings) + " bindings");
      for (const Json& t : tools) {
        if (!t.is_array() || t.size() != 3 || !t[0].is_string() || !t[1].is_string() || !t[2].is_string())
          return f.Fail("each of \"tools\" must be [group, member, host-call name]");
        l.tools.push_back({t[0].get<std::string>(), t[1].get<std::string>(), t[2].get<std::string>()});
      }
    }
    if (f.Has("durable") && !ParseDurable(j["durable"], l.durable.emplace(), error)) return false;
    out = std::move(l);
    return true;
  }
  if (type == "poll") {
    if (!f.Only({"type"})) return false;
    out = Poll{};
    return true;
  }
  if (type == "activate") {
    Activate a;
    if (!f.Only({"type", "activation", "input", "poll"}) || !f.Int("activation", a.activation, 1) ||
        !f.Any("input", a.input) || !f.Bool("poll", a.poll, true))
      return false;
    out = std::move(a);
    return true;
  }
  if (type == "result") {
    CallResult r;
    if (!f.Only({"type", "activation", "id", "ok", "error", "clock_us", "poll"}) ||
        !f.Int("activation", r.activation, 1) || !f.Int("id", r.id, 1) || !f.Bool("poll", r.poll, true))
      return false;
    if (f.Has("clock_us") && !f.Int("clock_us", r.clock_us.emplace())) return false;
    const bool has_ok = f.Has("ok");
    if (has_ok == f.Has("error")) return f.Fail("result needs exactly one of \"ok\" and \"error\"");
    r.ok = has_ok;
    if (has_ok) {
      r.value = j["ok"];
    } else {
      const Json& e = j["error"];
      if (!e.is_object() || !e.contains("name") || !e["name"].is_string() || !e.contains("message") ||
          !e["message"].is_string())
        return f.Fail("result error must be {\"name\": string, \"message\": string}");
      r.error_name = e["name"].get<std::string>();
      r.error_message = e["message"].get<std::string>();
    }
    out = std::move(r);
    return true;
  }
  return f.Fail("unknown message type \"" + type + "\"");
}

ToolBinding BindingFor(const std::string& name) {
  std::string_view rest = name;
  if (rest.starts_with("mcp.")) rest.remove_prefix(4);
  const size_t dot = rest.find('.');
  if (dot == std::string_view::npos) return {std::string(rest), "call", name};
  return {std::string(rest.substr(0, dot)), std::string(rest.substr(dot + 1)), name};
}

std::string BuildLoad(const Load& m) {
  Json j = {{"type", "load"},       {"flow", m.flow},         {"source", m.source},           {"profile", m.profile},
            {"cpu_ms", m.cpu_ms}, {"heap_bytes", m.heap_bytes}, {"stack_bytes", m.stack_bytes}};
  if (!m.tools.empty()) {
    Json tools = Json::array();
    for (const ToolBinding& t : m.tools) tools.push_back(Json::array({t.group, t.member, t.name}));
    j["tools"] = std::move(tools);
  }
  if (m.durable) j["durable"] = {{"clock_us", ClampToMessageInteger(m.durable->clock_us)}, {"seed", SeedHex(m.durable->seed)}};
  return DumpJson(j);
}

std::string SeedHex(const std::array<uint8_t, kDurableSeedBytes>& seed) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * seed.size());
  for (const uint8_t b : seed) {
    hex += kDigits[b >> 4];
    hex += kDigits[b & 0xF];
  }
  return hex;
}

namespace {
constexpr std::string_view kActivateHead = R"({"type":"activate","activation":)";
constexpr std::string_view kActivateInput = R"(,"input":)";
constexpr std::string_view kPollTrue = R"(,"poll":true)";
}  // namespace

std::string BuildActivate(int64_t activation, std::string_view input_json, bool poll) {
  std::string out;
  AppendActivateFrame(out, activation, input_json, poll);
  return out.substr(kFrameHeaderBytes);
}

void AppendActivateFrame(std::string& out, int64_t activation, std::string_view input_json, bool poll) {
  char digits[24];
  const auto [end, ec] = std::to_chars(digits, digits + sizeof digits, activation);
  (void)ec;  // 24 characters hold every int64_t
  const std::string_view id(digits, static_cast<size_t>(end - digits));
  const std::string_view poll_member = poll ? kPollTrue : std::string_view();
  const size_t n = kActivateHead.size() + id.size() + poll_member.size() + kActivateInput.size() + input_json.size() + 1;
  const auto len = static_cast<uint32_t>(n);
  const char header[kFrameHeaderBytes] = {static_cast<char>(len & 0xff), static_cast<char>((len >> 8) & 0xff),
                                          static_cast<char>((len >> 16) & 0xff), static_cast<char>((len >> 24) & 0xff)};
  out.reserve(out.size() + kFrameHeaderBytes + n);
  out.append(header, kFrameHeaderBytes);
  out.append(kActivateHead);
  out.append(id);
  out.append(poll_member);
  out.append(kActivateInput);
  out.append(input_json);
  out += '}';
}

std::string BuildResultOk(int64_t activation, int64_t id, std::string_view value_json, std::optional<int64_t> clock_us) {
  char digits[3][24];
  const auto number = [&digits](int i, int64_t v) {
    return std::string_view(digits[i], static_cast<size_t>(std::to_chars(digits[i], digits[i] + 24, v).ptr - digits[i]));
  };
  const std::string_view a = number(0, activation), c = number(1, id);
  const std::string_view clock = clock_us ? number(2, ClampToMessageInteger(*clock_us)) : std::string_view();
  std::string out;
  // One allocation, with room for the poll member FlushAnswers may add (AddPollMember).
  out.reserve(64 + a.size() + c.size() + clock.size() + value_json.size() + kPollTrue.size());
  out.append("{\"type\":\"result\",\"activation\":").append(a).append(",\"id\":").append(c);
  if (clock_us) out.append(",\"clock_us\":").append(clock);
  out.append(",\"ok\":").append(value_json).push_back('}');
  return out;
}

std::string BuildResultError(int64_t activation, int64_t id, std::string_view name, std::string_view message,
                             std::optional<int64_t> clock_us) {
  Json j{{"type", "result"},
         {"activation", activation},
         {"id", id},
         {"error", {{"name", std::string(name)}, {"message", std::string(message)}}}};
  if (clock_us) j["clock_us"] = ClampToMessageInteger(*clock_us);
  return DumpJson(j);
}

std::string BuildPoll() { return R"({"type":"poll"})"; }

void AddPollMember(std::string& result_message) {
  if (result_message.size() < 3 || result_message.back() != '}') return;  // not one of the builders' objects
  result_message.insert(result_message.size() - 1, kPollTrue);
}

}  // namespace basal::protocol
