// EscapeForTerminal: one row per case (input bytes, form, expected output), then the properties
// the table cannot show alone: every code point has the documented fate, the one-line form can be
// undone (so escaped and unescaped text cannot be confused), and JSON stays the same JSON.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "basal/terminal_text.h"

namespace basal {
namespace {

using std::string_literals::operator""s;
constexpr TerminalText kOne = TerminalText::kOneLine;
constexpr TerminalText kLines = TerminalText::kLines;
constexpr TerminalText kJson = TerminalText::kJson;

struct Row {
  const char* what;
  std::string in;
  TerminalText as;
  std::string out;
};

const Row kRows[] = {
    // Kept as it is.
    {"empty", "", kOne, ""},
    {"empty json", "", kJson, ""},
    {"plain ASCII, space to tilde", "hello, world 0123 !\"#$%&'()*+,-./:;<=>?@[]^_`{|}~", kOne,
     "hello, world 0123 !\"#$%&'()*+,-./:;<=>?@[]^_`{|}~"},
    {"2-byte UTF-8", "caf\xc3\xa9", kOne, "caf\xc3\xa9"},
    {"3-byte UTF-8", "\xe2\x9c\x93 \xe6\x97\xa5\xe6\x9c\xac", kOne, "\xe2\x9c\x93 \xe6\x97\xa5\xe6\x9c\xac"},
    {"4-byte UTF-8 (emoji)", "\xf0\x9f\x98\x80", kOne, "\xf0\x9f\x98\x80"},
    {"emoji joined by U+200D", "\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9", kOne,
     "\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9"},
    {"right-to-left letters (Hebrew)", "\xd7\xa9\xd7\x9c\xd7\x95\xd7\x9d", kOne, "\xd7\xa9\xd7\x9c\xd7\x95\xd7\x9d"},
    {"U+FFFD and U+FEFF", "\xef\xbf\xbd\xef\xbb\xbf", kOne, "\xef\xbf\xbd\xef\xbb\xbf"},
    {"tab, one line", "a\tb", kOne, "a\tb"},
    {"tab, lines", "a\tb", kLines, "a\tb"},
    {"tab, json", "{\t\"a\":1}", kJson, "{\t\"a\":1}"},

    // The backslash: doubled in text, so that every other backslash begins an escape.
    {"backslash", "a\\b", kOne, "a\\\\b"},
    {"text that looks like an escape", "\\x1b \\u202e \\n", kOne, "\\\\x1b \\\\u202e \\\\n"},
    {"backslash, lines", "C:\\tmp", kLines, "C:\\\\tmp"},
    {"backslash, json (already escaped by the serializer)", "\"a\\\\b\\n\"", kJson, "\"a\\\\b\\n\""},

    // Newlines: one line escapes them; lines keeps them behind an indent; JSON keeps them.
    {"newline, one line: no forged line", "x\nbasal: ok", kOne, "x\\nbasal: ok"},
    {"newline, lines: indented", "Error: x\n    at f (t.js:1)\nbasal: ok", kLines,
     "Error: x\n      at f (t.js:1)\n  basal: ok"},
    {"trailing newline, lines", "x\n", kLines, "x\n  "},
    {"newline, json (between tokens)", "{\n  \"a\": 1\n}", kJson, "{\n  \"a\": 1\n}"},
    {"carriage return, one line", "x\rbasal: ok", kOne, "x\\rbasal: ok"},
    {"carriage return, lines", "x\r\nbasal: ok", kLines, "x\\r\n  basal: ok"},
    {"carriage return, json", "\"x\"\r", kJson, "\"x\"\\u000d"},

    // C0 controls and DEL.
    {"NUL", "a\0b"s, kOne, "a\\x00b"},
    {"0x01 and 0x1f", "\x01\x1f", kOne, "\\x01\\x1f"},
    {"ESC [ 2 J (clear screen)", "\x1b[2J", kOne, "\\x1b[2J"},
    {"OSC title with BEL", "\x1b]0;pwned\x07", kOne, "\\x1b]0;pwned\\x07"},
    {"backspace over text", "ok\x08\x08no", kOne, "ok\\x08\\x08no"},
    {"vertical tab and form feed", "\x0b\x0c", kLines, "\\x0b\\x0c"},
    {"DEL", "a\x7f", kOne, "a\\x7f"},
    {"0x7e is printable", "~", kOne, "~"},
    {"NUL, ESC, DEL, json", "\0\x1b\x7f"s, kJson, "\\u0000\\u001b\\u007f"},

    // C1 controls: as UTF-8 (a code point) and as raw bytes (not UTF-8).
    {"U+0080", "\xc2\x80", kOne, "\\u0080"},
    {"U+0085 (next line)", "a\xc2\x85" "b", kOne, "a\\u0085b"},
    {"U+009B (CSI introducer)", "\xc2\x9b" "2J", kOne, "\\u009b2J"},
    {"U+009F, the last C1", "\xc2\x9f", kOne, "\\u009f"},
    {"U+00A0, the first after C1", "\xc2\xa0", kOne, "\xc2\xa0"},
    {"U+009B, json", "\"\xc2\x9b\"", kJson, "\"\\u009b\""},
    {"raw byte 0x9b", "\x9b" "2J", kOne, "\\x9b2J"},
    {"raw byte 0x80", "\x80", kOne, "\\x80"},

    // Bidi controls and marks; line and paragraph separators; their neighbours are kept.
    {"U+061B (kept) and U+061C (Arabic letter mark)", "\xd8\x9b\xd8\x9c", kOne, "\xd8\x9b\\u061c"},
    {"U+200D (kept), U+200E, U+200F, U+2010 (kept)", "\xe2\x80\x8d\xe2\x80\x8e\xe2\x80\x8f\xe2\x80\x90", kOne,
     "\xe2\x80\x8d\\u200e\\u200f\xe2\x80\x90"},
    {"U+2027 (kept), U+2028, U+2029", "\xe2\x80\xa7\xe2\x80\xa8\xe2\x80\xa9", kOne, "\xe2\x80\xa7\\u2028\\u2029"},
    {"U+202A, the first embedding", "\xe2\x80\xaa", kOne, "\\u202a"},
    {"U+202B U+202C U+202D", "\xe2\x80\xab\xe2\x80\xac\xe2\x80\xad", kOne, "\\u202b\\u202c\\u202d"},
    {"U+202E (right-to-left override)", "abc\xe2\x80\xae" "fed", kOne, "abc\\u202efed"},
    {"U+202F, after the overrides", "\xe2\x80\xaf", kOne, "\xe2\x80\xaf"},
    {"U+2065, before the isolates", "\xe2\x81\xa5", kOne, "\xe2\x81\xa5"},
    {"U+2066 (left-to-right isolate)", "\xe2\x81\xa6", kOne, "\\u2066"},
    {"U+2067 U+2068", "\xe2\x81\xa7\xe2\x81\xa8", kOne, "\\u2067\\u2068"},
    {"U+2069 (pop directional isolate)", "\xe2\x81\xa9", kOne, "\\u2069"},
    {"U+206A, after the isolates", "\xe2\x81\xaa", kOne, "\xe2\x81\xaa"},
    {"U+202E and U+2066, json", "\"\xe2\x80\xae\xe2\x81\xa6\"", kJson, "\"\\u202e\\u2066\""},
    {"U+202E, lines", "\xe2\x80\xae", kLines, "\\u202e"},

    // The top of Unicode.
    {"U+10FFFF (F4 8F BF BF)", "\xf4\x8f\xbf\xbf", kOne, "\xf4\x8f\xbf\xbf"},
    {"above U+10FFFF (F4 90 80 80)", "\xf4\x90\x80\x80", kOne, "\\xf4\\x90\\x80\\x80"},
    {"F5, F8, FE, FF", "\xf5\xf8\xfe\xff", kOne, "\\xf5\\xf8\\xfe\\xff"},

    // Invalid UTF-8: each byte of it shown.
    {"overlong NUL (C0 80)", "\xc0\x80", kOne, "\\xc0\\x80"},
    {"overlong (C1 BF)", "\xc1\xbf", kOne, "\\xc1\\xbf"},
    {"overlong 3-byte (E0 80 80)", "\xe0\x80\x80", kOne, "\\xe0\\x80\\x80"},
    {"overlong 3-byte U+07FF (E0 9F BF)", "\xe0\x9f\xbf", kOne, "\\xe0\\x9f\\xbf"},
    {"smallest 3-byte (E0 A0 80)", "\xe0\xa0\x80", kOne, "\xe0\xa0\x80"},
    {"overlong 4-byte (F0 8F BF BF)", "\xf0\x8f\xbf\xbf", kOne, "\\xf0\\x8f\\xbf\\xbf"},
    {"smallest 4-byte (F0 90 80 80)", "\xf0\x90\x80\x80", kOne, "\xf0\x90\x80\x80"},
    {"surrogate U+D800 (ED A0 80)", "\xed\xa0\x80", kOne, "\\xed\\xa0\\x80"},
    {"surrogate U+DFFF (ED BF BF)", "\xed\xbf\xbf", kOne, "\\xed\\xbf\\xbf"},
    {"U+D7FF, below the surrogates", "\xed\x9f\xbf", kOne, "\xed\x9f\xbf"},
    {"U+E000, above the surrogates", "\xee\x80\x80", kOne, "\xee\x80\x80"},
    {"truncated 2-byte at the end", "a\xc3", kOne, "a\\xc3"},
    {"truncated 3-byte before ASCII", "\xe2\x80" "A", kOne, "\\xe2\\x80A"},
    {"truncated 4-byte at the end", "\xf0\x9f\x98", kOne, "\\xf0\\x9f\\x98"},
    {"a lead byte followed by a lead byte", "\xc3\xc3\xa9", kOne, "\\xc3\xc3\xa9"},
    {"stray continuation byte", "\xbf" "x", kOne, "\\xbfx"},
    {"invalid bytes, lines", "\xff\n\xc0", kLines, "\\xff\n  \\xc0"},
    {"invalid bytes, json", "\"\xff\xed\xa0\x80\"", kJson, "\"\\ufffd\\ufffd\\ufffd\\ufffd\""},

    // The attack in one string.
    {"everything at once",
     "\x1b[2J\xc2\x9b\x7f\0\xe2\x80\xae\xff caf\xc3\xa9 \xe2\x9c\x93 \xe6\x97\xa5\xe6\x9c\xac\nbasal: ok\\"s, kOne,
     "\\x1b[2J\\u009b\\x7f\\x00\\u202e\\xff caf\xc3\xa9 \xe2\x9c\x93 \xe6\x97\xa5\xe6\x9c\xac\\nbasal: ok\\\\"},
};

class TerminalTextTable : public ::testing::TestWithParam<Row> {};

TEST_P(TerminalTextTable, Escapes) {
  const Row& row = GetParam();
  EXPECT_EQ(EscapeForTerminal(row.in, row.as), row.out) << row.what;
}

INSTANTIATE_TEST_SUITE_P(Rows, TerminalTextTable, ::testing::ValuesIn(kRows),
                         [](const ::testing::TestParamInfo<Row>& info) { return "row" + std::to_string(info.index); });

TEST(TerminalText, DefaultIsOneLine) { EXPECT_EQ(EscapeForTerminal("a\nb"), "a\\nb"); }

std::string Utf8(char32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// The documented fate of every Unicode scalar value, in the one-line form: escaped as the header
// says, or kept byte for byte.
TEST(TerminalText, EveryCodePointHasItsDocumentedFate) {
  auto hex = [](uint32_t v, int digits) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "%0*x", digits, static_cast<unsigned>(v));
    return std::string(buf);
  };
  size_t escaped = 0;
  for (char32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    std::string expected;
    if (cp == '\\') {
      expected = "\\\\";
    } else if (cp == '\n') {
      expected = "\\n";
    } else if (cp == '\r') {
      expected = "\\r";
    } else if (cp == '\t') {
      expected = "\t";
    } else if (cp < 0x20 || cp == 0x7F) {
      expected = "\\x" + hex(cp, 2);
    } else if ((cp >= 0x80 && cp <= 0x9F) || cp == 0x061C || cp == 0x200E || cp == 0x200F || cp == 0x2028 ||
               cp == 0x2029 || (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069)) {
      expected = "\\u" + hex(cp, 4);
    } else {
      expected = Utf8(cp);
    }
    if (expected != Utf8(cp)) ++escaped;
    const std::string got = EscapeForTerminal(Utf8(cp));
    if (got != expected) {
      ADD_FAILURE() << "U+" << hex(cp, 4) << ": got " << got << ", expected " << expected;
      return;
    }
  }
  EXPECT_EQ(escaped, 32u /*C0*/ + 1 /*backslash*/ + 1 /*DEL*/ + 32 /*C1*/ + 3 /*marks*/ + 2 /*U+2028-9*/ +
                         5 /*U+202A-E*/ + 4 /*U+2066-9*/ - 1 /*tab*/);
}

// The one-line form read back: the inverse of the escapes above.
std::string Unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\') {
      out += s[i];
      continue;
    }
    const char kind = s.at(++i);
    if (kind == '\\') {
      out += '\\';
    } else if (kind == 'n') {
      out += '\n';
    } else if (kind == 'r') {
      out += '\r';
    } else if (kind == 'x') {
      out += static_cast<char>(std::stoul(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else if (kind == 'u') {
      out += Utf8(static_cast<char32_t>(std::stoul(s.substr(i + 1, 4), nullptr, 16)));
      i += 4;
    } else {
      throw std::runtime_error("unknown escape \\" + std::string(1, kind) + " in " + s);
    }
  }
  return out;
}

// Raw bytes drawn mostly from the interesting ones, so that backslashes, escapes spelled out by
// hand, controls, C1, bidi characters and broken sequences meet in every order.
TEST(TerminalText, OneLineCanBeUndoneSoEscapedAndUnescapedTextCannotBeConfused) {
  const std::string pieces[] = {"\\",         "x",        "u",  "1b",       "202e",        "\n",          "\r",
                                "\t",         "\x1b",     "\x7f", "\0"s,    "\xc2\x9b",    "\xc2",        "\x9b",
                                "\xe2\x80\xae", "\xe2\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xff", "\xc3\xa9",
                                "\xf0\x9f\x98\x80", "a"};
  std::mt19937 random(11);
  std::uniform_int_distribution<size_t> pick(0, std::size(pieces) - 1), length(0, 12);
  for (int n = 0; n < 20000; ++n) {
    std::string text;
    for (size_t k = length(random); k > 0; --k) text += pieces[pick(random)];
    const std::string shown = EscapeForTerminal(text);
    ASSERT_EQ(shown.find('\n'), std::string::npos) << shown;
    ASSERT_EQ(Unescape(shown), text) << shown;
  }
}

// What nlohmann's serializer leaves raw (DEL, C1, bidi characters) comes out of kJson as \u
// escapes, and the JSON still parses to the very same value; ordinary non-ASCII stays as it is.
TEST(TerminalText, JsonStaysTheSameJson) {
  const std::string hostile = "\x1b[2J\xc2\x9b\x7f\0\xe2\x80\xae\xe2\x81\xa6\xe2\x80\xa8 caf\xc3\xa9 \\ \""s;
  const nlohmann::json value = {{"message", hostile}, {"list", {hostile, 1, nullptr}}};
  for (int indent : {-1, 2}) {
    const std::string raw = value.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
    ASSERT_NE(raw.find("\xc2\x9b"), std::string::npos) << "the serializer no longer emits C1 raw: revisit kJson";
    const std::string shown = EscapeForTerminal(raw, kJson);
    for (const std::string& raw_piece : {"\x1b"s, "\xc2\x9b"s, "\x7f"s, "\0"s, "\xe2\x80\xae"s, "\xe2\x81\xa6"s})
      EXPECT_EQ(shown.find(raw_piece), std::string::npos) << shown;
    for (const char* escape : {"\\u001b[2J", "\\u009b", "\\u007f", "\\u0000", "\\u202e", "\\u2066", "\\u2028"})
      EXPECT_NE(shown.find(escape), std::string::npos) << escape << " in " << shown;
    EXPECT_NE(shown.find("caf\xc3\xa9 \\\\ \\\""), std::string::npos) << shown;
    EXPECT_EQ(nlohmann::json::parse(shown), value);
  }
}

}  // namespace
}  // namespace basal
