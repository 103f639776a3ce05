// EscapeForTerminal (include/basal/terminal_text.h): one pass over the bytes, each either kept
// or shown as an escape.
#include "basal/terminal_text.h"

#include <cstdint>

namespace basal {
namespace {

// The length of the well-formed UTF-8 sequence that starts `s`, with its code point in `cp`; 0 if
// the first byte does not start one. The ranges are the Unicode Standard's table 3-7
// (well-formed UTF-8 byte sequences), which excludes overlong forms, surrogates (ED A0..BF) and
// code points above U+10FFFF (F4 90.. and F5..FF).
size_t DecodeUtf8(std::string_view s, char32_t& cp) {
  auto byte = [&s](size_t i) { return static_cast<unsigned char>(s[i]); };
  auto in = [](unsigned char b, unsigned char lo, unsigned char hi) { return b >= lo && b <= hi; };
  const unsigned char b0 = byte(0);
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  }
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (in(b0, 0xC2, 0xDF)) {
    n = 2;
  } else if (in(b0, 0xE0, 0xEF)) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (in(b0, 0xF0, 0xF4)) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;  // a continuation byte, C0, C1 or F5..FF
  }
  if (s.size() < n || !in(byte(1), lo, hi)) return 0;
  for (size_t i = 2; i < n; ++i) {
    if (!in(byte(i), 0x80, 0xBF)) return 0;
  }
  char32_t value = b0 & (0xFF >> (n + 1));
  for (size_t i = 1; i < n; ++i) value = (value << 6) | (byte(i) & 0x3F);
  cp = value;
  return n;
}

// Characters above ASCII that are shown as \uNNNN: the C1 controls, and the invisible ones that
// reorder or break what a terminal or log viewer displays (bidi controls and marks, line and
// paragraph separators).
bool HiddenAboveAscii(char32_t cp) {
  return (cp >= 0x80 && cp <= 0x9F) || cp == 0x061C || cp == 0x200E || cp == 0x200F ||
         (cp >= 0x2028 && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
}

void AppendHex(std::string& out, const char* prefix, uint32_t value, int digits) {
  static constexpr char kDigits[] = "0123456789abcdef";
  out += prefix;
  for (int shift = 4 * (digits - 1); shift >= 0; shift -= 4) out += kDigits[(value >> shift) & 0xF];
}

}  // namespace

std::string EscapeForTerminal(std::string_view text, TerminalText as) {
  const bool json = as == TerminalText::kJson;
  std::string out;
  out.reserve(text.size() + text.size() / 16);
  size_t i = 0;
  while (i < text.size()) {
    const unsigned char b = static_cast<unsigned char>(text[i]);
    if (b >= 0x20 && b < 0x7F) {  // printable ASCII, the common case: the whole stretch of it at once
      size_t end = i;
      while (end < text.size() && text[end] >= 0x20 && text[end] < 0x7F && text[end] != '\\') ++end;
      out.append(text.data() + i, end - i);
      i = end;
      if (i < text.size() && text[i] == '\\') {
        out += json ? "\\" : "\\\\";
        ++i;
      }
      continue;
    }
    char32_t cp = 0;
    const size_t n = DecodeUtf8(text.substr(i), cp);
    if (n == 0) {  // not well-formed UTF-8: this one byte
      if (json) {
        out += "\\ufffd";
      } else {
        AppendHex(out, "\\x", b, 2);
      }
      ++i;
      continue;
    }
    if (cp == '\t') {
      out += '\t';
    } else if (cp == '\n') {
      out += as == TerminalText::kOneLine ? "\\n" : as == TerminalText::kLines ? "\n  " : "\n";
    } else if (cp == '\r' && !json) {
      out += "\\r";
    } else if (cp < 0x20 || cp == 0x7F) {
      AppendHex(out, json ? "\\u" : "\\x", cp, json ? 4 : 2);
    } else if (HiddenAboveAscii(cp)) {
      AppendHex(out, "\\u", cp, 4);
    } else {
      out.append(text.substr(i, n));
    }
    i += n;
  }
  return out;
}

}  // namespace basal
