#include "parent/http/redaction.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <utility>

namespace basal::http {
namespace {

constexpr char kBase64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
constexpr char kHexLower[] = "0123456789abcdef";
constexpr char kHexUpper[] = "0123456789ABCDEF";
// An encoded form shorter than this is not looked for: it would match by chance (a few base64
// characters of a one-byte secret).
constexpr size_t kMinEncodedBytes = 8;

// The base64 characters of `value` that do not depend on what surrounds it, when it starts
// `offset` bytes (0, 1 or 2) into a base64-encoded text: the characters whose six bits all come
// from the value.
std::string Base64Core(std::string_view value, size_t offset) {
  std::string bytes(offset, '\0');
  bytes.append(value);
  std::string all;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t v = static_cast<uint32_t>(static_cast<unsigned char>(bytes[i])) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8;
    if (i + 2 < bytes.size()) v |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[i + 2]));
    for (int k = 0; k < 4; ++k) all += kBase64[(v >> (18 - 6 * k)) & 63];
  }
  const size_t first = (8 * offset + 5) / 6;                 // the first character past the prefix's bits
  const size_t end = (8 * (offset + value.size())) / 6;      // characters wholly inside the value
  return end > first ? all.substr(first, end - first) : std::string();
}

std::string UrlSafe(std::string s) {
  for (char& c : s) {
    if (c == '+') c = '-';
    if (c == '/') c = '_';
  }
  return s;
}

std::string Hex(std::string_view value, const char* digits) {
  std::string out;
  for (unsigned char c : value) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

bool Unreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
         c == '_' || c == '~';
}

std::string Percent(std::string_view value, const char* digits, bool every_byte) {
  std::string out;
  for (unsigned char c : value) {
    if (!every_byte && Unreserved(c)) {
      out += static_cast<char>(c);
      continue;
    }
    out += '%';
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

// The value as the inside of a JSON string, as the common writers escape it (control characters as
// \uXXXX or their short forms, quotes and backslashes, and optionally '/' as "\/").
std::string JsonEscaped(std::string_view value, bool escape_slash) {
  std::string out;
  for (unsigned char c : value) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '/':
        out += escape_slash ? "\\/" : "/";
        break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += kHexLower[c >> 4];
          out += kHexLower[c & 15];
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}

uint64_t Window(const char* p) {
  uint64_t w;
  std::memcpy(&w, p, sizeof w);
  return w;
}

// A cheap first look before the sorted windows are searched: one bit per hashed window.
constexpr size_t kFilterBits = 1u << 16;
size_t FilterSlot(uint64_t w) { return static_cast<size_t>((w * 0x9E3779B97F4A7C15ull) >> 48); }

}  // namespace

void SecretRedactor::Add(std::string_view name, std::string_view value) {
  if (value.empty()) return;
  Secret s;
  s.mark = "[secret " + std::string(name) + "]";
  s.value = std::string(value);
  std::vector<std::string> forms;
  for (size_t offset = 0; offset < 3; ++offset) {
    const std::string core = Base64Core(value, offset);
    forms.push_back(core);
    forms.push_back(UrlSafe(core));
  }
  forms.push_back(Hex(value, kHexLower));
  forms.push_back(Hex(value, kHexUpper));
  forms.push_back(Percent(value, kHexUpper, true));
  forms.push_back(Percent(value, kHexLower, true));
  forms.push_back(Percent(value, kHexUpper, false));
  forms.push_back(Percent(value, kHexLower, false));
  forms.push_back(JsonEscaped(value, false));
  forms.push_back(JsonEscaped(value, true));
  std::sort(forms.begin(), forms.end());
  forms.erase(std::unique(forms.begin(), forms.end()), forms.end());
  for (std::string& f : forms)
    if (f.size() >= kMinEncodedBytes && f != s.value) s.encoded.push_back(std::move(f));
  static_assert(kMinSecretFragmentBytes == sizeof(uint64_t), "a fragment window is one 64-bit word");
  for (size_t i = 0; i + kMinSecretFragmentBytes <= value.size(); ++i) s.windows.push_back(Window(value.data() + i));
  std::sort(s.windows.begin(), s.windows.end());
  s.windows.erase(std::unique(s.windows.begin(), s.windows.end()), s.windows.end());
  s.filter.assign(kFilterBits, false);
  for (uint64_t w : s.windows) s.filter[FilterSlot(w)] = true;
  secrets_.push_back(std::move(s));
}

std::string SecretRedactor::Redact(std::string_view text) const {
  if (secrets_.empty()) return std::string(text);
  struct Span {
    size_t begin, end;
    const std::string* mark;
  };
  std::vector<Span> spans;
  for (const Secret& s : secrets_) {
    const auto find_all = [&](const std::string& what) {
      for (size_t at = text.find(what); at != std::string_view::npos; at = text.find(what, at + 1))
        spans.push_back({at, at + what.size(), &s.mark});
    };
    find_all(s.value);
    for (const std::string& e : s.encoded) find_all(e);
    if (s.windows.empty() || text.size() < kMinSecretFragmentBytes) continue;
    // Runs of the value's bytes: consecutive windows that are the value's make one span.
    size_t run_begin = 0, run_end = 0;
    for (size_t i = 0; i + kMinSecretFragmentBytes <= text.size(); ++i) {
      const uint64_t w = Window(text.data() + i);
      if (!s.filter[FilterSlot(w)] || !std::binary_search(s.windows.begin(), s.windows.end(), w)) continue;
      if (run_end > run_begin && i <= run_end) {
        run_end = i + kMinSecretFragmentBytes;
        continue;
      }
      if (run_end > run_begin) spans.push_back({run_begin, run_end, &s.mark});
      run_begin = i;
      run_end = i + kMinSecretFragmentBytes;
    }
    if (run_end > run_begin) spans.push_back({run_begin, run_end, &s.mark});
  }
  if (spans.empty()) return std::string(text);
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  std::string out;
  out.reserve(text.size());
  size_t at = 0;
  for (size_t k = 0; k < spans.size();) {
    Span merged = spans[k++];
    while (k < spans.size() && spans[k].begin <= merged.end) merged.end = std::max(merged.end, spans[k++].end);
    out.append(text.substr(at, merged.begin - at));
    out += *merged.mark;
    at = merged.end;
  }
  out.append(text.substr(at));
  return out;
}

}  // namespace basal::http
