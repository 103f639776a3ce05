// JSON Schema as basal mcp uses it: the parent's check of a script's arguments against a downstream
// tool's `inputSchema` before the call is forwarded (CheckAgainstSchema), and the TypeScript the
// agent reads to write its script (TypeScriptType, DeclareTools, SummaryLine).
//
//   // in the mcp.<server>.<tool> handler, before anything reaches the downstream server:
//   if (auto problem = CheckAgainstSchema(tool.input_schema, args)) reply.Error(*problem);
//   //   -> "args.edits[0].oldText: expected string, got number (3)"
//
//   // describe_tools:
//   std::string text = DeclareTools({{"fs", "read_text_file", "Read a file as text.", schema, nullptr}});
//   //   declare const tools: {
//   //     fs: {
//   //       /** Read a file as text. */
//   //       read_text_file(args: { path: string; head?: number }): Promise<unknown>;
//   //     };
//   //   };
//
// What the check covers: the subset MCP tools declare (zod-to-json-schema and hand-written servers):
// type (a name or a list; "integer" is a number with no fraction), properties, required,
// additionalProperties (bool or schema), minProperties/maxProperties, items (a schema, the draft-07
// array form with additionalItems, and prefixItems), minItems/maxItems, uniqueItems, enum, const,
// anyOf, oneOf (exactly one), allOf, not, minimum/maximum/exclusiveMinimum/exclusiveMaximum (the
// draft-07 numbers and the draft-04 booleans), minLength/maxLength (in code points), $ref to "#",
// "#/$defs/NAME", "#/definitions/NAME" or any local JSON pointer (%XX and then ~0 and ~1
// unescaped; siblings of $ref apply too, as in 2020-12), OpenAPI's "nullable": true, and the
// schemas true and false.
//
// What it does NOT check: pattern, format, multipleOf, patternProperties, propertyNames,
// dependentRequired, dependentSchemas, if/then/else, contains, unevaluated*, remote $refs, and
// anything else. They are ignored here; the downstream server still checks them. Ignoring means
// never refusing for them: a schema with patternProperties skips the additionalProperties check,
// since a property it would call unexpected may be one a pattern admits.
//
// Trust: the schema comes from a downstream server (the operator chose it, but it is not ours), the
// value from the agent's script (hostile). Every function here takes any JSON, never throws, and
// is bounded (see the constants). A keyword whose own value is malformed ("type": 5, "required":
// "path", "minLength": -1) is treated as absent: checking is for the agent's mistakes, and the
// downstream server stays the judge of its own schema.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "basal/host_call.h"

namespace basal::mcp {

// Schema nesting along one path, $ref hops included, that the check follows. Deeper is a problem
// (so a "$ref": "#" cycle ends here).
inline constexpr int kMaxSchemaDepth = 64;
// Steps of one check: one per subschema applied, enum member compared, property or item looked at.
inline constexpr size_t kMaxCheckSteps = 1'000'000;
// A problem's length, and the length of a value shown in it (JSON, cut with "...").
inline constexpr size_t kMaxProblemBytes = 300;
inline constexpr size_t kMaxShownValueBytes = 60;

// nullopt when `value` satisfies `schema`; else the first problem found, naming its path from `root`:
//   args.path: expected string, got number (3)
//   args: missing required property "path"
//   args.mode: must be one of "r", "w" (got "x")
//   args: unexpected property "pth" (allowed: path, head, tail)
//   args: matches none of the choices (anyOf): (1) args.kind: must be "a" (got "b"); (2) ...
//   args.tree.children[0]...: schema nesting deeper than 64 ...
//   args: too complex to check ...
std::optional<std::string> CheckAgainstSchema(const Json& schema, const Json& value, std::string_view root = "args");

// Bounds of the TypeScript renderings: nesting (deeper is "unknown"), subschemas rendered and bytes
// produced by one rendering (past them, what remains is "unknown"), the literals of one enum
// (more become the members' JSON types), and a property's or a tool's description.
inline constexpr int kMaxTypeScriptDepth = 16;
inline constexpr size_t kMaxTypeScriptNodes = 20'000;
inline constexpr size_t kMaxTypeScriptBytes = 1 << 20;
inline constexpr size_t kMaxEnumLiterals = 64;
inline constexpr size_t kMaxPropertyDescriptionBytes = 400;
inline constexpr size_t kMaxToolDescriptionBytes = 4096;
// SummaryLine's description (its first sentence) and parameter list.
inline constexpr size_t kMaxSummaryDescriptionBytes = 120;
inline constexpr size_t kMaxSummaryParametersBytes = 120;

// One tool as the agent's script sees it: tools.<group>.<member>(args).
struct ToolDeclaration {
  std::string group;        // "fs"  -> tools.fs
  std::string member;       // "read_text_file" -> tools.fs.read_text_file
  std::string description;  // the tool's description (may be long, multi-line, contain "*/")
  Json input_schema;        // null: `args?: Record<string, unknown>`
  Json result_schema;       // null: Promise<unknown>
};

// The TypeScript type of a schema, on one line: "{ path: string; head?: number }",
// "\"r\" | \"w\"", "string[]", "(string | null)[]", "Record<string, number>", "unknown" for what
// it cannot express. Local $refs resolve against `schema` itself; a $ref cycle is "unknown".
// Property descriptions become inline JSDoc: "{ /** Path of the file */ path: string }".
std::string TypeScriptType(const Json& schema);

// A declaration block for these tools, grouped by `group` in their order of first appearance:
//   declare const tools: {
//     fs: {
//       /** Read a file as text. */
//       read_text_file(args: { /** Path of the file */ path: string; head?: number }): Promise<unknown>;
//     };
//   };
// Group, member and property names that are not JS identifiers are quoted ("read-file"). A
// tool's description becomes its JSDoc with "*/" made harmless ("*\/"). `args` is optional when
// nothing in it is required; an argument list longer than a line is written one property a line.
// Past `max_bytes` the block keeps the whole tools that fit (its braces still closed) and ends with
//   // ... N more bytes cut: ask describe_tools for fewer tools
// (a `max_bytes` too small for even that gives that line alone).
std::string DeclareTools(const std::vector<ToolDeclaration>& tools, size_t max_bytes = 64 << 10);

// One line for list_tools: "fs.read_text_file(path, head?, tail?): Read a file as text." The
// parameters are the input schema's top-level properties ("?" when optional), the text is the
// description's first sentence or line; each is cut with "..." past its bound. No line breaks or
// other control characters; names are shown as the tool list spells them.
std::string SummaryLine(const ToolDeclaration& tool);

}  // namespace basal::mcp
