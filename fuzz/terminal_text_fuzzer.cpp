// Fuzz target: EscapeForTerminal (include/basal/terminal_text.h), which every text a script or a
// worker supplied goes through before `basal` prints it.
//
// Input: any bytes, escaped in each form.
//
// Invariants:
// - the output is well-formed UTF-8 and holds none of the characters the header lists (C0
//   controls but tab, DEL, C1 controls, bidi controls and marks, U+2028, U+2029); kLines keeps
//   newlines, each followed by two spaces, and kJson keeps newlines;
// - kOneLine and kLines lose nothing: undoing the escapes gives back the input, byte for byte,
//   and every backslash in the output begins one of the listed escapes;
// - kJson of a serializer's output (compact or indented) is JSON of the same value.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "basal/terminal_text.h"
#include "fuzz/fuzz_check.h"
#include "protocol/messages.h"

namespace basal {
namespace {

// The next code point of well-formed UTF-8 at `text[at]`, advancing `at`; nullopt if there is none.
std::optional<char32_t> NextCodePoint(std::string_view text, size_t& at) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(at);
  size_t length = 0;
  char32_t cp = 0;
  char32_t min = 0;
  if (lead < 0x80) {
    ++at;
    return lead;
  } else if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2, cp = lead & 0x1F, min = 0x80;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3, cp = lead & 0x0F, min = 0x800;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4, cp = lead & 0x07, min = 0x10000;
  } else {
    return std::nullopt;
  }
  if (at + length > text.size()) return std::nullopt;
  for (size_t i = 1; i < length; ++i) {
    if ((byte(at + i) & 0xC0) != 0x80) return std::nullopt;
    cp = (cp << 6) | (byte(at + i) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return std::nullopt;
  at += length;
  return cp;
}

bool Hidden(char32_t cp) {
  return (cp < 0x20 && cp != '\t') || (cp >= 0x7F && cp <= 0x9F) || (cp >= 0x202A && cp <= 0x202E) ||
         (cp >= 0x2066 && cp <= 0x2069) || cp == 0x200E || cp == 0x200F || cp == 0x061C || cp == 0x2028 ||
         cp == 0x2029;
}

void CheckShown(std::string_view out, TerminalText as) {
  for (size_t at = 0; at < out.size();) {
    const size_t here = at;
    const std::optional<char32_t> cp = NextCodePoint(out, at);
    FUZZ_CHECK(cp.has_value(), "output is not UTF-8 at byte " + std::to_string(here));
    if (*cp == '\n' && as != TerminalText::kOneLine) {
      if (as == TerminalText::kLines) FUZZ_CHECK(out.substr(at, 2) == "  ", "a kLines line not indented");
      continue;
    }
    FUZZ_CHECK(!Hidden(*cp), "output holds U+" + std::to_string(static_cast<uint32_t>(*cp)) + " at byte " +
                                 std::to_string(here));
  }
}

void AppendUtf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

uint32_t Hex(std::string_view digits) {
  uint32_t v = 0;
  for (char c : digits) {
    FUZZ_CHECK((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'), "an escape with digit '" + std::string(1, c) + "'");
    v = v * 16 + static_cast<uint32_t>(c <= '9' ? c - '0' : c - 'a' + 10);
  }
  return v;
}

// Undoes kOneLine or kLines.
std::string Unescape(std::string_view out, TerminalText as) {
  std::string text;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == '\n') {
      text += '\n';
      i += 2;  // the indentation CheckShown saw
      continue;
    }
    if (out[i] != '\\') {
      text += out[i];
      continue;
    }
    FUZZ_CHECK(i + 1 < out.size(), "a backslash ends the output");
    const char kind = out[++i];
    if (kind == '\\') {
      text += '\\';
    } else if (kind == 'n' && as == TerminalText::kOneLine) {
      text += '\n';
    } else if (kind == 'r') {
      text += '\r';
    } else if (kind == 'x') {
      FUZZ_CHECK(i + 2 < out.size(), "a cut \\x escape");
      text += static_cast<char>(Hex(out.substr(i + 1, 2)));
      i += 2;
    } else if (kind == 'u') {
      FUZZ_CHECK(i + 4 < out.size(), "a cut \\u escape");
      AppendUtf8(text, Hex(out.substr(i + 1, 4)));
      i += 4;
    } else {
      fuzz::Fail(__FILE__, __LINE__, "known escape", std::string("a backslash begins \\") + kind);
    }
  }
  return text;
}

}  // namespace
}  // namespace basal

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace basal;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (TerminalText as : {TerminalText::kOneLine, TerminalText::kLines}) {
    const std::string out = EscapeForTerminal(text, as);
    CheckShown(out, as);
    FUZZ_CHECK(Unescape(out, as) == text, std::string("escaping lost or changed bytes in ") +
                                              (as == TerminalText::kOneLine ? "kOneLine" : "kLines"));
  }
  CheckShown(EscapeForTerminal(text, TerminalText::kJson), TerminalText::kJson);

  protocol::Json value;
  std::string error;
  if (!protocol::ParseJsonValue(text, value, error)) return 0;
  for (const std::string& json : {protocol::DumpJson(value), value.dump(2)}) {
    const std::string out = EscapeForTerminal(json, TerminalText::kJson);
    CheckShown(out, TerminalText::kJson);
    protocol::Json again;
    FUZZ_CHECK(protocol::ParseJsonValue(out, again, error), "kJson output is not JSON (" + error + ")");
    FUZZ_CHECK(again == value, "kJson output is JSON of another value");
  }
  return 0;
}
