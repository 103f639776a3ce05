// Base64 and UTF-8 for the worker's web globals (codec.h).
#include "worker/codec.h"

#include <array>
#include <cstdint>

namespace basal::worker {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

constexpr std::array<int8_t, 256> MakeDecodeTable() {
  std::array<int8_t, 256> t{};
  for (auto& v : t) v = -1;
  for (int i = 0; i < 64; ++i) t[static_cast<unsigned char>(kAlphabet[i])] = static_cast<int8_t>(i);
  return t;
}
constexpr std::array<int8_t, 256> kDecode = MakeDecodeTable();

bool IsAsciiWhitespace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\r'; }

const std::string kReplacement = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace

std::string Base64Encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = (static_cast<unsigned char>(bytes[i]) << 16) | (static_cast<unsigned char>(bytes[i + 1]) << 8) |
                       static_cast<unsigned char>(bytes[i + 2]);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (const size_t rest = bytes.size() - i; rest > 0) {
    uint32_t v = static_cast<unsigned char>(bytes[i]) << 16;
    if (rest == 2) v |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += rest == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::optional<std::string> Base64Decode(std::string_view text, bool forgiving) {
  std::string data;
  data.reserve(text.size());
  for (char c : text) {
    if (forgiving && IsAsciiWhitespace(c)) continue;
    data += c;
  }
  if (forgiving) {
    // HTML: if the length is a multiple of 4, drop one or two trailing '='; then a length of
    // 1 mod 4 fails, and so does any '=' left.
    if (data.size() % 4 == 0) {
      if (!data.empty() && data.back() == '=') data.pop_back();
      if (!data.empty() && data.back() == '=') data.pop_back();
    }
    if (data.size() % 4 == 1) return std::nullopt;
  } else {
    if (data.size() % 4 != 0) return std::nullopt;
    size_t pad = 0;
    while (pad < 2 && pad < data.size() && data[data.size() - 1 - pad] == '=') ++pad;
    data.resize(data.size() - pad);
    if (data.size() % 4 == 1) return std::nullopt;
  }
  std::string out;
  out.reserve(data.size() / 4 * 3 + 2);
  uint32_t buffer = 0;
  int bits = 0;
  for (char c : data) {
    const int8_t v = kDecode[static_cast<unsigned char>(c)];
    if (v < 0) return std::nullopt;
    buffer = (buffer << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((buffer >> bits) & 0xFF);
    }
  }
  // Leftover bits must be zero in strict mode (a canonical encoding); the HTML algorithm ignores them.
  if (!forgiving && bits > 0 && (buffer & ((1u << bits) - 1)) != 0) return std::nullopt;
  return out;
}

namespace {

// Length of the well-formed sequence starting at bytes[i], or 0 when ill-formed; `subpart` gets
// the length of the maximal subpart to replace with one U+FFFD.
size_t Utf8Sequence(std::string_view bytes, size_t i, size_t& subpart) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(bytes[k]); };
  const unsigned char c = b(i);
  subpart = 1;
  if (c < 0x80) return 1;
  size_t need = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 2;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;  // at most U+10FFFF
  } else {
    return 0;
  }
  for (size_t k = 1; k <= need; ++k) {
    if (i + k >= bytes.size()) return 0;
    const unsigned char d = b(i + k);
    const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (d < l || d > h) return 0;
    subpart = k + 1;
  }
  return need + 1;
}

}  // namespace

bool IsValidUtf8(std::string_view bytes) {
  for (size_t i = 0; i < bytes.size();) {
    size_t subpart = 0;
    const size_t n = Utf8Sequence(bytes, i, subpart);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string Utf8Sanitize(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    size_t subpart = 0;
    const size_t n = Utf8Sequence(bytes, i, subpart);
    if (n == 0) {
      out += kReplacement;
      i += subpart;
    } else {
      out.append(bytes.substr(i, n));
      i += n;
    }
  }
  return out;
}

}  // namespace basal::worker
