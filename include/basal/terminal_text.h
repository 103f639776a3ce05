// Text that a flow, a worker or a journal supplied, made safe to show an operator: no byte of it
// can move the cursor, clear the screen, start an escape sequence, reorder what is displayed or
// forge a line of basal's own, and nothing is dropped: what was hidden is shown as an escape.
//
// Whose job it is: the parent keeps untrusted text exactly as it was given, in the journal, in
// ActivationResult (message, error_name, stack, result), in ModuleEvent::message (which may quote
// a worker's stderr) and in what a log_sink receives, because only whoever prints it knows the
// medium (a terminal, JSON, HTML). Escaping belongs to the printer: the `basal` CLI passes every
// such text through EscapeForTerminal, and an embedder that writes these texts to a terminal or a
// line-oriented log should do the same.
//
//   std::cerr << "flow failed: " << basal::EscapeForTerminal(result.message) << "\n";
//   std::cerr << basal::EscapeForTerminal(result.stack, basal::TerminalText::kLines) << "\n";
//   std::cout << basal::EscapeForTerminal(value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
//                                         basal::TerminalText::kJson) << "\n";
//
// Printable text, ASCII or not (letters of every script, emoji with their joiners, a tab), is kept
// as it is. Shown as an escape, in kOneLine and kLines (docs/cli.md has the same table):
//
//   \                                          \\      (so every other backslash begins an escape)
//   newline (U+000A)                           \n      (kLines: kept, the next line indented by 2 spaces)
//   carriage return (U+000D)                   \r
//   other C0 controls, NUL, DEL (U+007F)       \xNN    e.g. \x1b, \x00, \x7f
//   C1 controls (U+0080..U+009F)               \uNNNN  e.g. \u009b (a CSI introducer)
//   bidi controls U+202A..U+202E, U+2066..U+2069,
//   bidi marks U+200E, U+200F, U+061C,
//   line and paragraph separators U+2028, U+2029 \uNNNN  e.g. \u202e
//   each byte that is not part of well-formed UTF-8
//   (overlong forms, surrogates, code points above
//   U+10FFFF, bytes C0, C1, F5..FF, truncated or
//   stray continuation bytes)                   \xNN    e.g. \xff, \xed\xa0\x80
//
// Hex digits are lowercase; \x always has two, \u four. A C1 control written as UTF-8 (C2 9B) is
// \u009b; the lone byte 9B, which is not UTF-8, is \x9b.
#pragma once

#include <string>
#include <string_view>

namespace basal {

enum class TerminalText {
  // Plain text that must stay on the caller's line (`basal: <kind>: <message>`, a field of the
  // journal listing): a newline is shown as \n, so the text cannot start a line of its own.
  kOneLine,
  // Plain text over several lines (a stack): a newline is kept and the next line starts with two
  // spaces, so no line the text starts begins where a line of the printer's own can.
  kLines,
  // JSON text as a serializer wrote it (controls inside strings already escaped; newlines only
  // between tokens). DEL, C1 controls and the bidi characters above become \u escapes, which
  // inside a JSON string mean the same character, so the output is valid JSON of the SAME value.
  // Backslashes are left alone (the serializer escaped those in strings), newlines and tabs are
  // kept (pretty-printing), any other C0 control becomes \u00NN, and each byte that is not
  // well-formed UTF-8 becomes \ufffd.
  kJson,
};

// Returns `text` with everything listed above escaped, in the form `as` says.
std::string EscapeForTerminal(std::string_view text, TerminalText as = TerminalText::kOneLine);

}  // namespace basal
