#include "worker/parent_frames.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <variant>
#include <vector>

namespace basal::worker {
namespace {

constexpr size_t kNone = std::string_view::npos;

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

size_t SkipSpace(std::string_view t, size_t i) {
  while (i < t.size() && IsSpace(t[i])) ++i;
  return i;
}

// `i` at an opening quote: the index after the closing one, or kNone.
size_t SkipString(std::string_view t, size_t i) {
  for (++i; i < t.size(); ++i) {
    if (t[i] == '\\') {
      ++i;
    } else if (t[i] == '"') {
      return i + 1;
    }
  }
  return kNone;
}

// `i` at a value's first byte: the index after the value, or kNone. Only the brackets and the
// strings are followed; whether the value is valid JSON is the parser's question.
size_t SkipValue(std::string_view t, size_t i) {
  if (i >= t.size()) return kNone;
  if (t[i] == '"') return SkipString(t, i);
  if (t[i] == '{' || t[i] == '[') {
    size_t depth = 0;
    while (i < t.size()) {
      const char c = t[i];
      if (c == '"') {
        i = SkipString(t, i);
        if (i == kNone) return kNone;
        continue;
      }
      if (c == '{' || c == '[') {
        ++depth;
      } else if (c == '}' || c == ']') {
        if (--depth == 0) return i + 1;
      }
      ++i;
    }
    return kNone;
  }
  size_t j = i;  // a number, true, false or null
  while (j < t.size() && t[j] != ',' && t[j] != '}' && t[j] != ']' && !IsSpace(t[j])) ++j;
  return j == i ? kNone : j;
}

// A plain decimal integer in [min, kMaxMessageInteger], as ParseParentMessage reads one: no sign,
// fraction, exponent or leading zero (what has any is left to it).
std::optional<int64_t> PlainInteger(std::string_view digits, int64_t min) {
  if (digits.empty() || digits.size() > 16 || (digits[0] == '0' && digits.size() > 1)) return std::nullopt;
  int64_t v = 0;
  for (const char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  if (v < min || v > protocol::kMaxMessageInteger) return std::nullopt;
  return v;
}

// Walks a JSON object written plainly, member by member: `take(key, value, value_begin, value_end)`
// for each (the key as written, between its quotes), until `take` refuses one. True when the walk
// reached the closing brace with nothing after it. Whether the values are valid JSON is not asked
// here; what the readers below take, they check.
template <typename Take>
bool WalkPlainObject(std::string_view t, Take&& take) {
  size_t i = SkipSpace(t, 0);
  if (i >= t.size() || t[i] != '{') return false;
  i = SkipSpace(t, i + 1);
  while (i < t.size() && t[i] == '"') {
    const size_t key_end = SkipString(t, i);
    if (key_end == kNone) return false;
    const std::string_view k = t.substr(i + 1, key_end - i - 2);
    i = SkipSpace(t, key_end);
    if (i >= t.size() || t[i] != ':') return false;
    i = SkipSpace(t, i + 1);
    const size_t value_end = SkipValue(t, i);
    if (value_end == kNone) return false;
    if (!take(k, t.substr(i, value_end - i), i, value_end)) return false;
    i = SkipSpace(t, value_end);
    if (i < t.size() && t[i] == '}') return SkipSpace(t, i + 1) == t.size();
    if (i >= t.size() || t[i] != ',') return false;
    i = SkipSpace(t, i + 1);
  }
  return false;
}

// The frame of every host call's answer, {"type":"result","activation":A,"id":I,"ok":V} with an
// optional "clock_us" and "poll", read without a tree: the parent builds it (protocol::BuildResultOk), and
// parsing it into protocol::Json was about half of the worker's CPU per host call. Only a frame
// whose every member is one of those, once, with a key free of escapes, "result" written as is,
// integers written plainly in their ranges and nothing after the object is read here, to the
// message ParseParentMessage would make of it; anything else returns false and goes the general
// way, which has the last word (fuzz/parent_message_fuzzer.cpp checks both agree). `ok` is where
// the value lies.
bool ReadPlainOkResult(std::string_view t, protocol::CallResult& r, std::pair<size_t, size_t>& ok) {
  bool type = false, activation = false, id = false, has_ok = false, clock = false, poll = false;
  const bool walked = WalkPlainObject(t, [&](std::string_view k, std::string_view v, size_t begin, size_t end) {
    if (k == "type" && !type) {
      type = true;
      return v == "\"result\"";
    }
    if (k == "activation" && !activation) {
      const auto n = PlainInteger(v, 1);
      if (!n) return false;
      r.activation = *n;
      return activation = true;
    }
    if (k == "id" && !id) {
      const auto n = PlainInteger(v, 1);
      if (!n) return false;
      r.id = *n;
      return id = true;
    }
    if (k == "clock_us" && !clock) {
      const auto n = PlainInteger(v, 0);
      if (!n) return false;
      r.clock_us = *n;
      return clock = true;
    }
    if (k == "ok" && !has_ok) {
      ok = {begin, end};
      return has_ok = true;
    }
    if (k == "poll" && !poll) {
      if (v != "true" && v != "false") return false;
      r.poll = v == "true";
      return poll = true;
    }
    return false;  // "error", a member the protocol does not have, a repeated or escaped key
  });
  r.ok = true;
  return walked && type && activation && id && has_ok;
}

// The frame of every activation, {"type":"activate","activation":A,"input":V} with an optional
// "poll", read without a tree
// on the same terms as ReadPlainOkResult (protocol::BuildActivate writes it so): the shared parser's
// tree of the frame around the input was most of what the worker spent on a trivial activation's
// frame. `input` is where the value lies.
bool ReadPlainActivate(std::string_view t, protocol::Activate& a, std::pair<size_t, size_t>& input) {
  bool type = false, activation = false, has_input = false, poll = false;
  const bool walked = WalkPlainObject(t, [&](std::string_view k, std::string_view v, size_t begin, size_t end) {
    if (k == "type" && !type) {
      type = true;
      return v == "\"activate\"";
    }
    if (k == "activation" && !activation) {
      const auto n = PlainInteger(v, 1);
      if (!n) return false;
      a.activation = *n;
      return activation = true;
    }
    if (k == "input" && !has_input) {
      input = {begin, end};
      return has_input = true;
    }
    if (k == "poll" && !poll) {
      if (v != "true" && v != "false") return false;
      a.poll = v == "true";
      return poll = true;
    }
    return false;  // a member the protocol does not have, a repeated or escaped key
  });
  return walked && type && activation && has_input;
}

// The value's checks, as ParseParentMessage's bounds and parser would make them of the field.
bool CheckValue(std::string_view key, std::string_view value, std::string& error) {
  // A literal or a plain integer is valid and fits as it stands (nlohmann's accept costs about a
  // microsecond and an allocation even for `1`).
  if (protocol::Json scalar; protocol::ParsePlainScalar(value, scalar)) return true;
  std::string why;
  if (!protocol::FitsInMessage(value, why)) {
    error = "field \"" + std::string(key) + "\": " + why;
    return false;
  }
  if (!IsJsonText(value)) {
    error = "field \"" + std::string(key) + "\": malformed JSON";
    return false;
  }
  return true;
}

// Keeps the text of the value at `span` in `payload` (no second copy of it) as `value_json`.
void TakeValue(std::string& payload, std::pair<size_t, size_t> span, std::string& value_json) {
  payload.erase(span.second);
  payload.erase(0, span.first);
  value_json = std::move(payload);
}

}  // namespace

std::optional<std::pair<size_t, size_t>> FindTopLevelValue(std::string_view t, std::string_view key) {
  size_t i = SkipSpace(t, 0);
  if (i >= t.size() || t[i] != '{') return std::nullopt;
  i = SkipSpace(t, i + 1);
  std::optional<std::pair<size_t, size_t>> found;
  while (i < t.size() && t[i] == '"') {
    const size_t key_end = SkipString(t, i);
    if (key_end == kNone) return std::nullopt;
    const std::string_view k = t.substr(i + 1, key_end - i - 2);
    i = SkipSpace(t, key_end);
    if (i >= t.size() || t[i] != ':') return std::nullopt;
    i = SkipSpace(t, i + 1);
    const size_t value_end = SkipValue(t, i);
    if (value_end == kNone) return std::nullopt;
    // The whole object is walked: a second `key`, or any key written with escapes (which may spell
    // `key`), leaves the choice to the full parser, whose last member wins, so that the worker never
    // takes another member than ParseParentMessage would (fuzz/parent_message_fuzzer.cpp checks it).
    if (k.find('\\') != kNone || (k == key && found)) return std::nullopt;
    if (k == key) found = std::make_pair(i, value_end);
    i = SkipSpace(t, value_end);
    if (i < t.size() && t[i] == '}') return found;
    if (i >= t.size() || t[i] != ',') return std::nullopt;
    i = SkipSpace(t, i + 1);
  }
  return std::nullopt;
}

bool ParseParentFrame(std::string payload, protocol::ParentMessage& out, std::string& value_json,
                      std::string& error) {
  value_json.clear();
  // As protocol::ParseJsonValue refuses it: the value check below would stop at a NUL byte.
  if (payload.find('\0') != std::string::npos) {
    error = "malformed JSON (a NUL byte)";
    return false;
  }
  {
    protocol::CallResult r;
    std::pair<size_t, size_t> ok;
    if (ReadPlainOkResult(payload, r, ok)) {
      if (!CheckValue("ok", std::string_view(payload).substr(ok.first, ok.second - ok.first), error)) return false;
      out = std::move(r);
      TakeValue(payload, ok, value_json);
      return true;
    }
  }
  {
    protocol::Activate a;
    std::pair<size_t, size_t> input;
    if (ReadPlainActivate(payload, a, input)) {
      if (!CheckValue("input", std::string_view(payload).substr(input.first, input.second - input.first), error))
        return false;
      out = std::move(a);
      TakeValue(payload, input, value_json);
      return true;
    }
  }
  std::string_view key = "input";
  auto span = FindTopLevelValue(payload, key);
  if (!span) {
    key = "ok";
    span = FindTopLevelValue(payload, key);
  }
  if (span) {
    const std::string_view value(payload.data() + span->first, span->second - span->first);
    if (!CheckValue(key, value, error)) return false;
    // The rest of the message, the value replaced by null, goes through the shared parser.
    std::string rest;
    rest.reserve(payload.size() - value.size() + 4);
    rest.append(payload, 0, span->first);
    rest += "null";
    rest.append(payload, span->second);
    if (!protocol::ParseParentMessage(rest, out, error)) return false;
    auto* activate = std::get_if<protocol::Activate>(&out);
    auto* result = std::get_if<protocol::CallResult>(&out);
    if (!(activate && key == "input") && !(result && result->ok && key == "ok")) {
      error = "unexpected field \"" + std::string(key) + "\"";
      return false;
    }
    TakeValue(payload, *span, value_json);
    return true;
  }
  if (!protocol::ParseParentMessage(payload, out, error)) return false;
  // A member the scanner could not find (its key written with escapes, say) was parsed whole.
  if (auto* activate = std::get_if<protocol::Activate>(&out)) {
    value_json = protocol::DumpJson(activate->input);
    activate->input = nullptr;
  } else if (auto* result = std::get_if<protocol::CallResult>(&out); result && result->ok) {
    value_json = protocol::DumpJson(result->value);
    result->value = nullptr;
  }
  return true;
}

}  // namespace basal::worker
