// Fuzz target: the JSON Schema parts of basal mcp (src/mcp/json_schema.h). CheckAgainstSchema
// reads a downstream server's input schema and the arguments an agent's script sends (hostile);
// TypeScriptType, DeclareTools and SummaryLine turn a downstream server's schemas, names and
// descriptions into the text the agent reads.
//
// Input: a schema, a NUL byte, a value, and optionally a NUL byte and a tool's "group\tmember\t
// description" (any bytes). Without a NUL the input is split in half. The schema and the value are
// read as the parent reads JSON (protocol::ParseJsonValue); a part that is not JSON is skipped (the
// value is then a schema's stand-in: null).
//
// Invariants (besides no crash, no exception, no sanitizer report, and the bounds' own timeouts):
// - a problem is non-empty, starts with its root, and is at most kMaxProblemBytes;
// - the schemas true and {} admit every value and false admits none; {"const": v} and
//   {"enum": [v]} admit v;
// - for a schema S without $ref (wrapping it would move "#"): {"allOf": [S]} decides as S does,
//   with the same problem, and {"not": S} refuses what S admits and admits what S refuses
//   (a bound reached, nesting or steps, may differ by the wrapper's one level), when S is a schema
//   (an object or a boolean);
// - TypeScriptType is one line within its byte bound (plus what the last subschema rendered adds),
//   and DeclareTools' output fits max_bytes (or is the cut marker alone, when max_bytes is too small
//   for it), and with room enough is the whole text; in both, outside comments and string
//   literals there is nothing but TypeScript's type syntax (a description or name cannot end its
//   comment or string and write code), and a whole rendering has its brackets balanced;
// - SummaryLine is one line without control characters, within its bounds.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_check.h"
#include "mcp/json_schema.h"
#include "protocol/messages.h"

namespace basal::mcp {
namespace {

std::string Head(std::string_view text) { return std::string(text.substr(0, 300)); }

std::optional<Json> Read(std::string_view text) {
  Json out;
  std::string why;
  if (!protocol::ParseJsonValue(text, out, why)) return std::nullopt;
  return out;
}

// Whether a problem says a bound of the check was reached. A value's own text could say the same
// (shown in a problem); then a check below is skipped, never failed.
bool IsBound(const std::optional<std::string>& problem) {
  return problem && (problem->find("basal does not check arguments this deep") != std::string::npos ||
                     problem->find("too complex to check") != std::string::npos);
}

void CheckProblem(const std::optional<std::string>& problem, std::string_view root, const char* what) {
  if (!problem) return;
  FUZZ_CHECK(!problem->empty() && problem->size() <= kMaxProblemBytes,
             std::string(what) + ": a problem of " + std::to_string(problem->size()) + " bytes: " + Head(*problem));
  FUZZ_CHECK(problem->compare(0, root.size(), root) == 0, std::string(what) + ": a problem that does not start with " +
                                                              std::string(root) + ": " + Head(*problem));
}

std::optional<std::string> Check(const Json& schema, const Json& value, const char* what, std::string_view root = "args") {
  std::optional<std::string> problem = CheckAgainstSchema(schema, value, root);
  CheckProblem(problem, root, what);
  return problem;
}

void CheckDecisions(const Json& schema, const Json& value, const std::string& schema_text) {
  const std::optional<std::string> problem = Check(schema, value, "the schema");
  Check(schema, value, "another root", "a.b[0]");

  FUZZ_CHECK(!Check(Json(true), value, "true"), "the schema true refused a value");
  FUZZ_CHECK(!Check(Json::object(), value, "{}"), "the schema {} refused a value");
  FUZZ_CHECK(Check(Json(false), value, "false").has_value(), "the schema false admitted a value");
  for (const Json& own : {Json{{"const", value}}, Json{{"enum", Json::array({value})}}}) {
    const std::optional<std::string> p = Check(own, value, "const or enum of the value");
    FUZZ_CHECK(!p || IsBound(p), "a value was refused by its own const or enum: " + Head(*p));
  }

  if (schema_text.find("$ref") != std::string::npos) return;
  const std::optional<std::string> all = Check(Json{{"allOf", Json::array({schema})}}, value, "allOf");
  if (!IsBound(problem) && !IsBound(all)) {
    FUZZ_CHECK(all == problem, "allOf [S] and S differ: " + Head(problem.value_or("admitted")) + " | " +
                                   Head(all.value_or("admitted")));
  }
  // "not" with a value that is no schema (a number, a string) is no keyword at all.
  if (!schema.is_object() && !schema.is_boolean()) return;
  const std::optional<std::string> negated = Check(Json{{"not", schema}}, value, "not");
  if (!problem) FUZZ_CHECK(negated.has_value(), "not S admitted what S admits");
  if (problem && !IsBound(problem)) {
    FUZZ_CHECK(!negated || IsBound(negated), "not S refused what S refuses: " + Head(*negated));
  }
}

// Reads TypeScript as basal writes it: "/** ... */" and "// ...\n" comments, JSON string literals,
// and between them only the characters of type syntax. Brackets are counted outside comments and
// strings; `balanced` says whether they close in order.
void CheckTypeScript(std::string_view text, bool whole, const char* what) {
  std::vector<char> open;
  bool balanced = true;
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (text.compare(i, 3, "/**") == 0) {
      size_t end = text.find("*/", i + 3);
      if (end == std::string_view::npos) {
        // A cut may keep the first lines of a long JSDoc block; the marker then ends the text.
        FUZZ_CHECK(!whole, std::string(what) + ": a comment that is never closed: " + Head(text.substr(i)));
        return;
      }
      i = end + 2;
      continue;
    }
    if (text.compare(i, 2, "//") == 0) {
      size_t end = text.find('\n', i);
      i = end == std::string_view::npos ? text.size() : end + 1;
      continue;
    }
    if (c == '"') {
      size_t j = i + 1;
      while (j < text.size() && text[j] != '"') {
        FUZZ_CHECK(text[j] != '\n' && static_cast<unsigned char>(text[j]) >= 0x20,
                   std::string(what) + ": a control byte in a string literal: " + Head(text.substr(i)));
        j += text[j] == '\\' ? 2 : 1;
      }
      FUZZ_CHECK(j < text.size(), std::string(what) + ": a string literal that is never closed: " + Head(text.substr(i)));
      i = j + 1;
      continue;
    }
    const bool word = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '$';
    const bool punctuation = std::string_view(" \n{}[]()<>|&:;?,.+-").find(c) != std::string_view::npos;
    FUZZ_CHECK(word || punctuation, std::string(what) + ": byte " + std::to_string(static_cast<unsigned char>(c)) +
                                        " outside a comment or string: " + Head(text.substr(i > 40 ? i - 40 : 0)));
    if (c == '{' || c == '[' || c == '(' || c == '<') open.push_back(c);
    if (c == '}' || c == ']' || c == ')' || c == '>') {
      const char want = c == '}' ? '{' : c == ']' ? '[' : c == ')' ? '(' : '<';
      if (open.empty() || open.back() != want) balanced = false;
      if (!open.empty()) open.pop_back();
    }
    ++i;
  }
  if (whole) FUZZ_CHECK(balanced && open.empty(), std::string(what) + ": brackets do not balance: " + Head(text));
}

void CheckRendering(const Json& schema, const Json& value, const ToolDeclaration& tool, size_t input_size) {
  const std::string type = TypeScriptType(schema);
  FUZZ_CHECK(!type.empty() && type.find('\n') == std::string::npos, "TypeScriptType is not one line: " + Head(type));
  // Past the bound only the subschemas already being rendered finish, each with text no longer
  // than the input they came from could make (JSON escapes at most sextuple a byte).
  FUZZ_CHECK(type.size() <= kMaxTypeScriptBytes + 8 * input_size + 4096,
             "TypeScriptType of " + std::to_string(type.size()) + " bytes");
  CheckTypeScript(type, true, "TypeScriptType");

  ToolDeclaration second = tool;
  second.member = "second tool";
  second.input_schema = value;
  second.result_schema = schema;
  ToolDeclaration other{"other group", tool.member, "", Json(true), Json()};
  const std::vector<ToolDeclaration> tools = {tool, second, other};

  const std::string full = DeclareTools(tools, SIZE_MAX);
  const bool fits = full.rfind("declare const tools: {\n", 0) == 0 && full.size() >= 3 &&
                    full.compare(full.size() - 3, 3, "};\n") == 0;
  FUZZ_CHECK(fits, "DeclareTools with no bound is not a whole block: " + Head(full));
  CheckTypeScript(full, true, "DeclareTools");
  FUZZ_CHECK(DeclareTools(tools, full.size()) == full, "DeclareTools with room for the whole text cut it");

  const std::string marker_end = "more bytes cut: ask describe_tools for fewer tools\n";
  for (size_t max_bytes : {size_t{0}, size_t{40}, size_t{100}, size_t{300}, full.size() / 2, full.size() - 1, size_t{64} << 10}) {
    const std::string out = DeclareTools(tools, max_bytes);
    if (max_bytes >= full.size()) {
      FUZZ_CHECK(out == full, "DeclareTools with room for the whole text cut it");
      continue;
    }
    FUZZ_CHECK(out.size() >= marker_end.size() && out.compare(out.size() - marker_end.size(), marker_end.size(), marker_end) == 0,
               "a cut declaration does not end with the marker: " + Head(out));
    const bool marker_alone = out.rfind("// ... ", 0) == 0 && out.find('\n') == out.size() - 1;
    FUZZ_CHECK(out.size() <= max_bytes || (marker_alone && out.size() <= 100),
               "DeclareTools(" + std::to_string(max_bytes) + ") gave " + std::to_string(out.size()) + " bytes");
    CheckTypeScript(out, false, "a cut DeclareTools");
  }

  for (const ToolDeclaration& t : tools) {
    const std::string line = SummaryLine(t);
    for (char c : line) {
      const auto b = static_cast<unsigned char>(c);
      FUZZ_CHECK(b >= 0x20 && b != 0x7f, "SummaryLine holds byte " + std::to_string(b) + ": " + Head(line));
    }
    // Group and member (64 each), the parameters, the first sentence, and the punctuation.
    FUZZ_CHECK(line.size() <= 2 * 64 + kMaxSummaryParametersBytes + 8 + kMaxSummaryDescriptionBytes + 8,
               "SummaryLine of " + std::to_string(line.size()) + " bytes: " + Head(line));
  }
}

}  // namespace
}  // namespace basal::mcp

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace basal;
  using namespace basal::mcp;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  std::string_view schema_text, value_text, tool_text;
  if (size_t nul = input.find('\0'); nul != std::string_view::npos) {
    schema_text = input.substr(0, nul);
    value_text = input.substr(nul + 1);
    if (size_t second = value_text.find('\0'); second != std::string_view::npos) {
      tool_text = value_text.substr(second + 1);
      value_text = value_text.substr(0, second);
    }
  } else {
    schema_text = input.substr(0, size / 2);
    value_text = input.substr(size / 2);
  }
  std::optional<Json> schema = Read(schema_text);
  if (!schema) return 0;
  std::optional<Json> value = Read(value_text);

  ToolDeclaration tool{"fs", "read_text_file", "Read a file as text. Then more.\n*/ evil(); /*", *schema, Json()};
  if (!tool_text.empty()) {
    size_t tab = tool_text.find('\t');
    tool.group = std::string(tool_text.substr(0, tab));
    if (tab != std::string_view::npos) {
      std::string_view rest = tool_text.substr(tab + 1);
      size_t tab2 = rest.find('\t');
      tool.member = std::string(rest.substr(0, tab2));
      tool.description = tab2 == std::string_view::npos ? "" : std::string(rest.substr(tab2 + 1));
    }
  }
  if (value) CheckDecisions(*schema, *value, schema->dump(-1, ' ', false, Json::error_handler_t::replace));
  CheckRendering(*schema, value.value_or(Json()), tool, size);
  return 0;
}
