// Unit tests of src/mcp/json_schema: the parent's check of a script's arguments against a
// downstream tool's input schema (every keyword accepted AND refused, the problem's path and
// wording, the bounds, malformed schemas), and the TypeScript the agent reads (types, quoting,
// JSDoc, the byte cut, list_tools' one line).
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "mcp/json_schema.h"

namespace basal::mcp {
namespace {

Json Parse(const char* text) { return Json::parse(text); }

bool HasText(const std::string& haystack, const std::string& needle) { return haystack.find(needle) != std::string::npos; }

size_t Occurrences(const std::string& haystack, const std::string& needle) {
  size_t count = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos; at = haystack.find(needle, at + 1)) ++count;
  return count;
}

// --- The check: every keyword, admitted and refused ----------------------------------------------

struct CheckCase {
  const char* schema;
  const char* value;
  const char* problem;  // nullptr: admitted; else the exact problem
};

void RunCases(const std::vector<CheckCase>& cases) {
  for (const CheckCase& c : cases) {
    std::optional<std::string> problem = CheckAgainstSchema(Parse(c.schema), Parse(c.value));
    if (!c.problem) {
      EXPECT_FALSE(problem.has_value()) << c.schema << " / " << c.value << ": " << problem.value_or("");
    } else {
      EXPECT_EQ(problem.value_or("<admitted>"), c.problem) << c.schema << " / " << c.value;
    }
  }
}

TEST(JsonSchemaCheckTest, Type) {
  RunCases({
      {R"({"type": "string"})", R"("x")", nullptr},
      {R"({"type": "string"})", "3", "args: expected string, got number (3)"},
      {R"({"type": "number"})", "3.5", nullptr},
      {R"({"type": "number"})", "-3", nullptr},
      {R"({"type": "number"})", R"("3")", R"(args: expected number, got string ("3"))"},
      {R"({"type": "integer"})", "3", nullptr},
      {R"({"type": "integer"})", "3.0", nullptr},  // a number with no fraction
      {R"({"type": "integer"})", "18446744073709551615", nullptr},
      {R"({"type": "integer"})", "3.5", "args: expected integer, got number (3.5)"},
      {R"({"type": "boolean"})", "false", nullptr},
      {R"({"type": "boolean"})", "0", "args: expected boolean, got number (0)"},
      {R"({"type": "null"})", "null", nullptr},
      {R"({"type": "null"})", "{}", "args: expected null, got object ({})"},
      {R"({"type": "object"})", R"({"a": 1})", nullptr},
      {R"({"type": "object"})", "[1]", "args: expected object, got array ([1])"},
      {R"({"type": "array"})", "[]", nullptr},
      {R"({"type": "array"})", "null", "args: expected array, got null"},
      {R"({"type": ["string", "null"]})", "null", nullptr},
      {R"({"type": ["string", "null"]})", R"("x")", nullptr},
      {R"({"type": ["string", "null"]})", "true", "args: expected string or null, got boolean (true)"},
      {R"({"type": "string", "nullable": true})", "null", nullptr},
      {R"({"type": "string", "nullable": true})", "1", "args: expected string or null, got number (1)"},
  });
}

TEST(JsonSchemaCheckTest, ObjectsNamePathsAndProperties) {
  const char* read_text_file = R"({"type": "object", "additionalProperties": false, "required": ["path"],
      "properties": {"path": {"type": "string"}, "head": {"type": "number"}, "tail": {"type": "number"}}})";
  RunCases({
      {read_text_file, R"({"path": "/srv/data/a.txt"})", nullptr},
      {read_text_file, R"({"path": "/srv/data/a.txt", "head": 10})", nullptr},
      {read_text_file, R"({"path": 3})", "args.path: expected string, got number (3)"},
      {read_text_file, R"({})", R"(args: missing required property "path")"},
      {read_text_file, R"({"pth": "/x"})", R"(args: unexpected property "pth" (allowed: path, head, tail))"},
      {read_text_file, R"({"path": "/x", "head": "10"})", R"(args.head: expected number, got string ("10"))"},
      {read_text_file, R"("/x")", R"(args: expected object, got string ("/x"))"},
      // additionalProperties as a schema: the extra members are checked against it.
      {R"({"properties": {"a": {}}, "additionalProperties": {"type": "number"}})", R"({"a": "x", "b": 2})", nullptr},
      {R"({"properties": {"a": {}}, "additionalProperties": {"type": "number"}})", R"({"b": "2"})",
       R"(args.b: expected number, got string ("2"))"},
      {R"({"additionalProperties": false})", R"({"b": 1})", R"(args: unexpected property "b" (no properties are allowed))"},
      {R"({"additionalProperties": true, "properties": {"a": {"type": "string"}}})", R"({"b": 1})", nullptr},
      // patternProperties is not checked, so neither is additionalProperties beside it.
      {R"({"patternProperties": {"^x-": {}}, "additionalProperties": false})", R"({"x-a": 1})", nullptr},
      // Names that are not identifiers are quoted in the path.
      {R"({"properties": {"my key": {"properties": {"list": {"items": {"type": "string"}}}}}})",
       R"({"my key": {"list": ["a", 2]}})", R"(args["my key"].list[1]: expected string, got number (2))"},
      {R"({"minProperties": 1})", "{}", "args: must have at least 1 property (got 0)"},
      {R"({"minProperties": 1})", R"({"a": 1})", nullptr},
      {R"({"maxProperties": 1})", R"({"a": 1, "b": 2})", "args: must have at most 1 property (got 2)"},
      {R"({"maxProperties": 2})", R"({"a": 1, "b": 2})", nullptr},
      // Object keywords say nothing about other types.
      {R"({"required": ["a"], "properties": {"a": {"type": "string"}}})", "5", nullptr},
  });
}

TEST(JsonSchemaCheckTest, Arrays) {
  RunCases({
      {R"({"items": {"type": "string"}})", R"(["a", "b"])", nullptr},
      {R"({"items": {"type": "string"}})", R"(["a", 2])", "args[1]: expected string, got number (2)"},
      {R"({"minItems": 2})", "[1]", "args: must have at least 2 items (got 1)"},
      {R"({"minItems": 2})", "[1, 2]", nullptr},
      {R"({"maxItems": 1})", "[1, 2]", "args: must have at most 1 item (got 2)"},
      {R"({"maxItems": 1})", "[1]", nullptr},
      {R"({"uniqueItems": true})", R"([1, "1", [1], {"a": 1}])", nullptr},
      {R"({"uniqueItems": true})", "[1, 2, 1.0]", "args: items 0 and 2 are equal, and the items must be unique (both 1)"},
      {R"({"uniqueItems": true})", R"([{"a": 1, "b": [2]}, {"b": [2], "a": 1}])",
       R"(args: items 0 and 1 are equal, and the items must be unique (both {"a":1,"b":[2]}))"},
      {R"({"uniqueItems": false})", "[1, 1]", nullptr},
      // Draft-07's array form, with additionalItems.
      {R"({"items": [{"type": "string"}, {"type": "number"}]})", R"(["a", 1, null])", nullptr},
      {R"({"items": [{"type": "string"}, {"type": "number"}]})", R"(["a", "b"])",
       R"(args[1]: expected number, got string ("b"))"},
      {R"({"items": [{"type": "string"}], "additionalItems": false})", R"(["a", 1])", "args: must have at most 1 item (got 2)"},
      {R"({"items": [{"type": "string"}], "additionalItems": {"type": "number"}})", R"(["a", 1, 2])", nullptr},
      {R"({"items": [{"type": "string"}], "additionalItems": {"type": "number"}})", R"(["a", 1, "2"])",
       R"(args[2]: expected number, got string ("2"))"},
      // 2020-12's prefixItems, then items for the rest.
      {R"({"prefixItems": [{"type": "string"}], "items": {"type": "number"}})", R"(["a", 1, 2])", nullptr},
      {R"({"prefixItems": [{"type": "string"}], "items": {"type": "number"}})", R"([1])",
       "args[0]: expected string, got number (1)"},
      {R"({"prefixItems": [{"type": "string"}], "items": false})", R"(["a", "b"])", "args: must have at most 1 item (got 2)"},
      {R"({"prefixItems": [{"type": "string"}, {"type": "string"}]})", R"(["a"])", nullptr},
  });
}

TEST(JsonSchemaCheckTest, EnumAndConst) {
  RunCases({
      {R"({"enum": ["r", "w"]})", R"("w")", nullptr},
      {R"({"properties": {"mode": {"enum": ["r", "w"]}}})", R"({"mode": "x"})", R"(args.mode: must be one of "r", "w" (got "x"))"},
      {R"({"enum": [1, null, {"a": [1]}]})", "1.0", nullptr},
      {R"({"enum": [1, null, {"a": [1]}]})", R"({"a": [1]})", nullptr},
      {R"({"enum": [1, null, {"a": [1]}]})", R"({"a": [2]})", R"(args: must be one of 1, null, {"a":[1]} (got {"a":[2]}))"},
      {R"({"enum": []})", "1", "args: no value is allowed here (the tool's schema has an empty enum)"},
      {R"({"const": "a"})", R"("a")", nullptr},
      {R"({"const": "a"})", R"("b")", R"(args: must be "a" (got "b"))"},
      {R"({"const": 2})", "2.0", nullptr},
      {R"({"const": null})", "false", "args: must be null (got false)"},
  });
}

TEST(JsonSchemaCheckTest, NumbersAndStrings) {
  RunCases({
      {R"({"minimum": 1})", "1", nullptr},
      {R"({"minimum": 1})", "0.5", "args: must be >= 1 (got 0.5)"},
      {R"({"maximum": 10})", "10", nullptr},
      {R"({"maximum": 10})", "11", "args: must be <= 10 (got 11)"},
      {R"({"exclusiveMinimum": 0})", "0.001", nullptr},
      {R"({"exclusiveMinimum": 0})", "0", "args: must be > 0 (got 0)"},
      {R"({"exclusiveMaximum": 1.5})", "1", nullptr},
      {R"({"exclusiveMaximum": 1.5})", "1.5", "args: must be < 1.5 (got 1.5)"},
      // Draft-04's boolean form.
      {R"({"minimum": 0, "exclusiveMinimum": true})", "0", "args: must be > 0 (got 0)"},
      {R"({"minimum": 0, "exclusiveMinimum": false})", "0", nullptr},
      {R"({"maximum": 5, "exclusiveMaximum": true})", "5", "args: must be < 5 (got 5)"},
      {R"({"maximum": 5, "exclusiveMaximum": true})", "4.99", nullptr},
      // Exact across integer kinds: the largest unsigned against a negative bound, a negative
      // against an unsigned bound, a big integer against a float just above it.
      {R"({"minimum": -1})", "18446744073709551615", nullptr},
      {R"({"maximum": 18446744073709551615})", "-9223372036854775808", nullptr},
      {R"({"maximum": 9007199254740992})", "9007199254740993", "args: must be <= 9007199254740992 (got 9007199254740993)"},
      {R"({"minLength": 2})", R"("ab")", nullptr},
      {R"({"minLength": 2})", R"("a")", "args: must be at least 2 characters long (got 1)"},
      {R"({"maxLength": 2})", R"("héé")", "args: must be at most 2 characters long (got 3)"},
      {R"({"maxLength": 3})", R"("héé")", nullptr},  // code points, not bytes
      {R"({"maxLength": 1})", R"("😀")", nullptr},
      {R"({"minLength": 1.0})", R"("")", "args: must be at least 1 character long (got 0)"},
      // String and number keywords say nothing about other types.
      {R"({"minLength": 5, "minimum": 3})", "[]", nullptr},
  });
}

TEST(JsonSchemaCheckTest, Combinators) {
  RunCases({
      // anyOf: the types wanted when no choice took the value's type.
      {R"({"anyOf": [{"type": "string"}, {"type": "null"}]})", "null", nullptr},
      {R"({"anyOf": [{"type": "string"}, {"type": "null"}]})", "3", "args: expected string or null, got number (3)"},
      // ...the one choice that took it, when one did.
      {R"({"anyOf": [{"type": "string"}, {"type": "object", "required": ["a"]}]})", R"({"b": 1})",
       R"(args: missing required property "a")"},
      // ...every choice's problem, when several did.
      {R"({"anyOf": [{"properties": {"kind": {"const": "a"}}}, {"properties": {"kind": {"const": "b"}}, "required": ["x"]}]})",
       R"({"kind": "b"})",
       R"(args: matches none of the choices (anyOf): (1) args.kind: must be "a" (got "b"); (2) args: missing required property "x")"},
      // oneOf: exactly one.
      {R"({"oneOf": [{"type": "integer"}, {"type": "string"}]})", "1", nullptr},
      {R"({"oneOf": [{"type": "integer"}, {"type": "number"}]})", "1",
       "args: matches choices 1 and 2 of oneOf, and must match exactly one (got 1)"},
      {R"({"oneOf": [{"type": "integer"}, {"type": "number"}]})", "1.5", nullptr},
      {R"({"oneOf": [{"type": "integer"}, {"type": "string"}]})", "true", "args: expected integer or string, got boolean (true)"},
      // allOf: every one, the first problem.
      {R"({"allOf": [{"type": "number"}, {"minimum": 2}]})", "3", nullptr},
      {R"({"allOf": [{"type": "number"}, {"minimum": 2}]})", "1", "args: must be >= 2 (got 1)"},
      // not.
      {R"({"not": {"type": "string"}})", "1", nullptr},
      {R"({"not": {"type": "string"}})", R"("x")", R"(args: must not match the schema under "not" (got "x"))"},
      // A combinator's problem deeper down names its own path.
      {R"({"properties": {"a": {"anyOf": [{"type": "string"}, {"items": {"type": "number"}, "type": "array"}]}}})",
       R"({"a": [1, "2"]})", R"(args.a[1]: expected number, got string ("2"))"},
  });
}

TEST(JsonSchemaCheckTest, RefsAndBooleanSchemas) {
  const char* defs = R"({"$defs": {"Edit": {"type": "object", "required": ["oldText"], "properties": {"oldText": {"type": "string"}}},
                                   "a/b": {"type": "number"}, "c~d": {"type": "boolean"}, "e f": {"type": "null"}},
                         "definitions": {"Old": {"type": "string"}},
                         "type": "object",
                         "properties": {"edits": {"type": "array", "items": {"$ref": "#/$defs/Edit"}},
                                        "slash": {"$ref": "#/$defs/a~1b"}, "tilde": {"$ref": "#/$defs/c~0d"},
                                        "space": {"$ref": "#/$defs/e%20f"}, "old": {"$ref": "#/definitions/Old"},
                                        "pointer": {"$ref": "#/properties/old"},
                                        "child": {"$ref": "#"}}})";
  RunCases({
      {defs, R"({"edits": [{"oldText": "a"}]})", nullptr},
      {defs, R"({"edits": [{"oldText": 1}]})", "args.edits[0].oldText: expected string, got number (1)"},
      {defs, R"({"edits": [{}]})", R"(args.edits[0]: missing required property "oldText")"},
      {defs, R"({"slash": 1, "tilde": true, "space": null, "old": "x", "pointer": "y"})", nullptr},
      {defs, R"({"slash": "1"})", R"(args.slash: expected number, got string ("1"))"},
      {defs, R"({"tilde": 1})", "args.tilde: expected boolean, got number (1)"},
      {defs, R"({"space": 1})", "args.space: expected null, got number (1)"},
      {defs, R"({"old": 1})", "args.old: expected string, got number (1)"},
      {defs, R"({"pointer": 1})", "args.pointer: expected string, got number (1)"},
      {defs, R"({"child": {"child": {"old": 2}}})", "args.child.child.old: expected string, got number (2)"},
      // A $ref's siblings apply too (2020-12).
      {R"({"$defs": {"S": {"type": "string"}}, "$ref": "#/$defs/S", "maxLength": 1})", R"("ab")",
       "args: must be at most 1 character long (got 2)"},
      {"true", R"({"anything": [1]})", nullptr},
      {"false", "1", "args: no value is allowed here (the tool's schema is false)"},
      {"{}", "null", nullptr},
      {R"({"properties": {"a": false}})", R"({"a": 1})", "args.a: no value is allowed here (the tool's schema is false)"},
      {R"({"properties": {"a": false}})", R"({"b": 1})", nullptr},
  });
}

TEST(JsonSchemaCheckTest, RootNamesThePath) {
  auto problem = CheckAgainstSchema(Parse(R"({"properties": {"q": {"type": "string"}}})"), Parse(R"({"q": 1})"), "tools.gh.search(args)");
  EXPECT_EQ(problem.value_or(""), "tools.gh.search(args).q: expected string, got number (1)");
}

TEST(JsonSchemaCheckTest, IgnoredKeywordsNeverRefuse) {
  // Checked by the downstream server, not here: refusing for them would be guessing.
  RunCases({
      {R"({"pattern": "^a$", "format": "email"})", R"("zzz")", nullptr},
      {R"({"multipleOf": 3})", "4", nullptr},
      {R"({"if": {"type": "string"}, "then": {"minLength": 5}})", R"("a")", nullptr},
      {R"({"propertyNames": {"maxLength": 1}, "dependentRequired": {"a": ["b"]}})", R"({"aaa": 1, "a": 1})", nullptr},
      {R"({"contains": {"type": "string"}, "unevaluatedProperties": false})", "[1]", nullptr},
      {R"({"$ref": "https://example.com/schema.json"})", "1", nullptr},
      {R"({"$ref": "#/$defs/missing"})", "1", nullptr},
      {R"({"$ref": "#anchor"})", "1", nullptr},
  });
}

// Shown values are JSON and cut; a problem is cut as a whole.
TEST(JsonSchemaCheckTest, MessagesAreCut) {
  std::string long_text(5000, 'x');
  auto problem = CheckAgainstSchema(Parse(R"({"type": "number"})"), Json(long_text));
  ASSERT_TRUE(problem);
  EXPECT_EQ(*problem, "args: expected number, got string (\"" + std::string(kMaxShownValueBytes - 4, 'x') + "...)");

  Json big_object = Json::object();
  for (int i = 0; i < 1000; ++i) big_object["k" + std::to_string(i)] = i;
  problem = CheckAgainstSchema(Parse(R"({"type": "array"})"), big_object);
  ASSERT_TRUE(problem);
  EXPECT_TRUE(HasText(*problem, "got object ({\"k0\":0,\"k1\":1,")) << *problem;
  EXPECT_LE(problem->size(), 6 + 30 + kMaxShownValueBytes + 1);

  // A long property name, a long enum, a long allowed list: each bounded, the whole at most 300.
  Json schema = Json::object();
  for (int i = 0; i < 500; ++i) schema["properties"]["property_number_" + std::to_string(i)] = Json::object();
  schema["additionalProperties"] = false;
  Json value = {{std::string(1000, 'k'), 1}};
  problem = CheckAgainstSchema(schema, value);
  ASSERT_TRUE(problem);
  EXPECT_TRUE(HasText(*problem, "args: unexpected property \"kkk")) << *problem;
  EXPECT_TRUE(HasText(*problem, "allowed: property_number_0, ")) << *problem;
  EXPECT_LE(problem->size(), kMaxProblemBytes);

  Json choices = Json::array();
  for (int i = 0; i < 1000; ++i) choices.push_back("choice-" + std::to_string(i));
  problem = CheckAgainstSchema(Json{{"enum", choices}}, Json("nope"));
  ASSERT_TRUE(problem);
  EXPECT_TRUE(HasText(*problem, "must be one of \"choice-0\", \"choice-1\", ")) << *problem;
  EXPECT_TRUE(HasText(*problem, ", ... (got \"nope\")")) << *problem;
  EXPECT_LE(problem->size(), kMaxProblemBytes);

  // Bytes that are not UTF-8 (only a Json built in C++ can hold them) are shown, not thrown on.
  std::optional<std::string> bad;
  EXPECT_NO_THROW(bad = CheckAgainstSchema(Parse(R"({"type": "number", "properties": {}})"), Json(std::string("\xff\xfe", 2))));
  ASSERT_TRUE(bad);
  EXPECT_TRUE(HasText(*bad, "got string (")) << *bad;
  EXPECT_NO_THROW(bad = CheckAgainstSchema(Parse(R"({"additionalProperties": false})"), Json{{std::string("\xc3", 1), 1}}));
  ASSERT_TRUE(bad);
}

// --- The check: bounds ---------------------------------------------------------------------------

TEST(JsonSchemaCheckTest, RefCycleEndsAtTheDepthBound) {
  for (const char* schema : {R"({"$ref": "#"})", R"({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})",
                             R"({"allOf": [{"$ref": "#"}]})", R"({"not": {"$ref": "#"}})"}) {
    std::optional<std::string> problem;
    EXPECT_NO_THROW(problem = CheckAgainstSchema(Parse(schema), Parse("1"))) << schema;
    ASSERT_TRUE(problem) << schema;
    EXPECT_TRUE(HasText(*problem, "args: schema nesting deeper than 64")) << *problem;
  }
}

TEST(JsonSchemaCheckTest, DeepValuesEndAtTheDepthBound) {
  const char* tree = R"({"type": "object", "properties": {"name": {"type": "string"}, "child_node": {"$ref": "#"}}})";
  auto nested = [](int levels) {
    Json value = {{"name", "leaf"}};
    for (int i = 0; i < levels; ++i) value = Json{{"name", "n"}, {"child_node", value}};
    return value;
  };
  // One $ref and one property a level: 31 levels are 62 deep, within the bound.
  EXPECT_FALSE(CheckAgainstSchema(Parse(tree), nested(31)));
  std::optional<std::string> problem = CheckAgainstSchema(Parse(tree), nested(150));
  ASSERT_TRUE(problem);
  EXPECT_TRUE(HasText(*problem, "schema nesting deeper than 64")) << *problem;
  // The deep path keeps its end.
  EXPECT_EQ(problem->rfind("args...", 0), 0u) << *problem;
  EXPECT_TRUE(HasText(*problem, ".child_node.child_node: schema nesting")) << *problem;
  EXPECT_LE(problem->size(), kMaxProblemBytes);

  // A problem within the bound is still found at depth.
  Json bad = nested(20);
  Json* at = &bad;
  for (int i = 0; i < 20; ++i) at = &(*at)["child_node"];
  (*at)["name"] = 7;
  problem = CheckAgainstSchema(Parse(tree), bad);
  ASSERT_TRUE(problem);
  EXPECT_TRUE(HasText(*problem, ".child_node.name: expected string, got number (7)")) << *problem;
}

TEST(JsonSchemaCheckTest, WorkBound) {
  // A huge enum from the server: counted member by member.
  Json many = Json::array();
  for (int i = 0; i < 1'100'000; ++i) many.push_back(i);
  Json enum_schema = {{"enum", many}};
  std::optional<std::string> problem = CheckAgainstSchema(enum_schema, Json(-1));
  ASSERT_TRUE(problem);
  EXPECT_EQ(*problem, "args: too complex to check (more than 1000000 steps against the tool's input schema): send smaller arguments");
  EXPECT_FALSE(CheckAgainstSchema(enum_schema, Json(5)));  // found early: within the bound

  // A huge array from the script: counted item by item.
  Json items = Json::array();
  for (int i = 0; i < 1'100'000; ++i) items.push_back(i);
  problem = CheckAgainstSchema(Parse(R"({"items": {"type": "number"}})"), items);
  ASSERT_TRUE(problem);
  EXPECT_TRUE(HasText(*problem, "too complex to check")) << *problem;
  items.erase(items.begin() + 400'000, items.end());
  EXPECT_FALSE(CheckAgainstSchema(Parse(R"({"items": {"type": "number"}})"), items));

  // uniqueItems: n log n, spent before sorting; a moderate array is fine.
  problem = CheckAgainstSchema(Parse(R"({"uniqueItems": true})"), items);
  ASSERT_TRUE(problem);
  EXPECT_TRUE(HasText(*problem, "too complex to check")) << *problem;
  items.erase(items.begin() + 10'000, items.end());
  EXPECT_FALSE(CheckAgainstSchema(Parse(R"({"uniqueItems": true})"), items));

  // Choices that triple at every level (3^25 paths, 50 deep: within the depth bound): the work
  // bound ends it, and anyOf or not cannot turn the bound into an answer.
  Json tripling = Json::object();
  for (int i = 0; i < 25; ++i) {
    Json next = {{"$ref", "#/$defs/d" + std::to_string(i + 1)}};
    tripling["$defs"]["d" + std::to_string(i)] = {{"anyOf", {next, next, next}}};
  }
  tripling["$defs"]["d25"] = {{"type", "string"}};
  tripling["$ref"] = "#/$defs/d0";
  problem = CheckAgainstSchema(tripling, Json(1));
  ASSERT_TRUE(problem);
  EXPECT_TRUE(HasText(*problem, "too complex to check")) << *problem;
  Json negated = {{"not", tripling}, {"$defs", tripling["$defs"]}};
  problem = CheckAgainstSchema(negated, Json(1));
  ASSERT_TRUE(problem);
  EXPECT_TRUE(HasText(*problem, "too complex to check")) << *problem;
}

TEST(JsonSchemaCheckTest, MalformedSchemasAreAbsentKeywords) {
  // Each bad keyword is ignored: the value is admitted, nothing throws.
  const char* schemas[] = {
      "5", R"("string")", "null", "[]", R"({"type": 5})", R"({"type": ["strnig", 3]})", R"({"type": "strnig"})",
      R"({"required": "path"})", R"({"required": [1, null]})", R"({"properties": []})", R"({"properties": {"a": 5}})",
      R"({"additionalProperties": 5})", R"({"items": 5})", R"({"items": [5]})", R"({"prefixItems": 5})",
      R"({"enum": "x"})", R"({"anyOf": {}})", R"({"anyOf": []})", R"({"oneOf": []})", R"({"allOf": 5})", R"({"not": 5})",
      R"({"$ref": 5})", R"({"$ref": ""})", R"({"$ref": "#/$defs/a~2b"})", R"({"$ref": "#/items/01"})", R"({"$ref": "#/a%zz"})",
      R"({"minimum": "3"})", R"({"exclusiveMinimum": "3"})", R"({"minLength": -1})", R"({"maxLength": 1.5})",
      R"({"maxItems": "2"})", R"({"uniqueItems": "yes"})", R"({"minProperties": {}})", R"({"nullable": "yes"})",
      R"({"patternProperties": 5, "additionalProperties": true})",
  };
  const char* values[] = {"1", R"("abc")", "null", R"({"a": [1, 1], "path": 2})", "[1, 1, 1]", "3.5"};
  for (const char* schema : schemas) {
    for (const char* value : values) {
      std::optional<std::string> problem;
      EXPECT_NO_THROW(problem = CheckAgainstSchema(Parse(schema), Parse(value))) << schema;
      EXPECT_FALSE(problem.has_value()) << schema << " / " << value << ": " << problem.value_or("");
    }
    ToolDeclaration tool{"g", "t", "d", Parse(schema), Parse(schema)};
    EXPECT_NO_THROW(TypeScriptType(Parse(schema))) << schema;
    EXPECT_NO_THROW(DeclareTools({tool})) << schema;
    EXPECT_NO_THROW(SummaryLine(tool)) << schema;
  }
}

// --- TypeScript ----------------------------------------------------------------------------------

TEST(JsonSchemaTypeScriptTest, Types) {
  struct Case {
    const char* schema;
    const char* type;
  } cases[] = {
      {R"({"type": "string"})", "string"},
      {R"({"type": "integer"})", "number"},
      {R"({"type": ["string", "null"]})", "string | null"},
      {R"({"type": ["integer", "number"]})", "number"},
      {R"({"type": "string", "nullable": true})", "string | null"},
      {R"({"enum": ["r", "w"]})", R"("r" | "w")"},
      {R"({"enum": [1, 2.5, true, null]})", "1 | 2.5 | true | null"},
      {R"({"enum": [{"a": 1}]})", "unknown"},
      {R"({"const": "fixed"})", R"("fixed")"},
      {R"({"const": "say \"hi\"\n"})", R"("say \"hi\"\n")"},
      {R"({"type": "array", "items": {"type": "string"}})", "string[]"},
      {R"({"type": "array", "items": {"type": ["string", "null"]}})", "(string | null)[]"},
      {R"({"type": "array"})", "unknown[]"},
      {R"({"type": "array", "items": {"type": "array", "items": {"type": "number"}}})", "number[][]"},
      {R"({"prefixItems": [{"type": "string"}, {"type": "number"}], "items": false})", "[string, number]"},
      {R"({"items": [{"type": "string"}]})", "[string, ...unknown[]]"},
      {R"({"items": [{"type": "string"}], "additionalItems": {"type": "boolean"}})", "[string, ...boolean[]]"},
      {R"({"type": "object"})", "Record<string, unknown>"},
      {R"({"type": "object", "additionalProperties": {"type": "number"}})", "Record<string, number>"},
      {R"({"type": "object", "additionalProperties": false})", "Record<string, never>"},
      {R"({"type": "object", "required": ["path"], "properties": {"head": {"type": "number"}, "path": {"type": "string"}}})",
       "{ path: string; head?: number }"},
      {R"({"properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "number"}})",
       "{ a?: string; [key: string]: number }"},
      {R"({"type": "object", "required": ["x"]})", "{ x: unknown }"},
      {R"({"properties": {"read-file": {"type": "string"}, "_ok$1": {"type": "string"}, "1st": {}, "ü": {}}})",
       R"({ "1st"?: unknown; _ok$1?: string; "read-file"?: string; "ü"?: unknown })"},
      {R"({"properties": {"path": {"type": "string", "description": "Path of the file"}}, "required": ["path"]})",
       "{ /** Path of the file */ path: string }"},
      {R"({"properties": {"dryRun": {"type": "boolean", "default": false}}})", "{ /** (default: false) */ dryRun?: boolean }"},
      {R"({"anyOf": [{"type": "string"}, {"type": "number"}]})", "string | number"},
      {R"({"oneOf": [{"const": "a"}, {"const": "b"}]})", R"("a" | "b")"},
      {R"({"allOf": [{"properties": {"a": {"type": "string"}}}, {"properties": {"b": {"type": "number"}}}]})",
       "{ a?: string } & { b?: number }"},
      {R"({"allOf": [{"anyOf": [{"type": "string"}, {"type": "number"}]}, {"not": {}}]})", "string | number"},
      {R"({"type": "object", "properties": {"a": {}}, "anyOf": [{"required": ["a"]}, {"type": "string"}]})",
       "{ a?: unknown } & ({ a: unknown } | string)"},
      {R"({"type": "array", "items": {"allOf": [{"type": "object", "properties": {"a": {}}}, {"anyOf": [{"type": "string"}, {"type": "number"}]}]}})",
       "({ a?: unknown } & (string | number))[]"},
      {R"({"$defs": {"P": {"type": "string"}}, "type": "array", "items": {"$ref": "#/$defs/P"}})", "string[]"},
      {R"({"definitions": {"P": {"enum": ["x"]}}, "properties": {"p": {"$ref": "#/definitions/P"}}})", R"({ p?: "x" })"},
      {R"({"$ref": "#"})", "unknown"},
      {R"({"type": "object", "properties": {"name": {"type": "string"}, "child": {"$ref": "#"}}})",
       "{ child?: { child?: unknown; name?: string }; name?: string }"},
      {R"({"$ref": "https://example.com/x.json"})", "unknown"},
      {"true", "unknown"},
      {"false", "never"},
      {"{}", "unknown"},
      {R"({"type": "strnig"})", "unknown"},
      {R"({"anyOf": [{"type": "string"}, {}]})", "unknown"},
  };
  for (const Case& c : cases) EXPECT_EQ(TypeScriptType(Parse(c.schema)), c.type) << c.schema;
}

TEST(JsonSchemaTypeScriptTest, Bounds) {
  // Nesting deeper than the bound is unknown.
  Json deep = {{"type", "string"}};
  for (int i = 0; i < 40; ++i) deep = {{"type", "array"}, {"items", deep}};
  std::string type = TypeScriptType(deep);
  EXPECT_EQ(type, "unknown" + [] {
    std::string brackets;
    for (int i = 0; i <= kMaxTypeScriptDepth; ++i) brackets += "[]";
    return brackets;
  }());

  // A large enum becomes its members' types.
  Json many = Json::array();
  for (size_t i = 0; i <= kMaxEnumLiterals; ++i) many.push_back("v" + std::to_string(i));
  EXPECT_EQ(TypeScriptType({{"enum", many}}), "string");
  many.erase(many.begin());
  EXPECT_TRUE(HasText(TypeScriptType({{"enum", many}}), "\"v1\" | \"v2\""));

  // $refs that double at every level: the node bound keeps the rendering small.
  Json doubling = Json::object();
  for (int i = 0; i < 30; ++i) {
    std::string next = "#/$defs/d" + std::to_string(i + 1);
    doubling["$defs"]["d" + std::to_string(i)] = {{"type", "object"}, {"properties", {{"a", {{"$ref", next}}}, {"b", {{"$ref", next}}}}}};
  }
  doubling["$ref"] = "#/$defs/d0";
  type = TypeScriptType(doubling);
  EXPECT_TRUE(HasText(type, "unknown"));
  EXPECT_LE(type.size(), 2 * kMaxTypeScriptBytes);

  // A long property description is cut; "*/" in it is made harmless.
  Json described = {{"properties", {{"p", {{"description", std::string(1000, 'd') + "*/"}}}}}};
  type = TypeScriptType(described);
  EXPECT_TRUE(HasText(type, std::string(kMaxPropertyDescriptionBytes - 3, 'd') + "... */ p?: unknown")) << type;
  EXPECT_EQ(Occurrences(type, "*/"), 1u);

  // Many long descriptions count toward the byte bound.
  Json wordy = Json::object();
  for (int i = 0; i < 5000; ++i) wordy["properties"]["p" + std::to_string(i)] = {{"description", std::string(400, 'w')}};
  type = TypeScriptType(wordy);
  EXPECT_LT(type.size(), kMaxTypeScriptBytes + kMaxTypeScriptBytes / 16);
  EXPECT_TRUE(HasText(type, "p0?: unknown")) << type.substr(0, 200);
  EXPECT_FALSE(HasText(type, "p999?: unknown"));  // past the bound

  // A choice of thousands of branches: past the node bound a branch is unknown, and so the union.
  Json branches = Json::array();
  for (size_t i = 0; i < kMaxTypeScriptNodes + 10; ++i) branches.push_back({{"const", i}});
  EXPECT_EQ(TypeScriptType({{"anyOf", branches}}), "unknown");
  branches.erase(branches.begin() + 1000, branches.end());
  type = TypeScriptType({{"anyOf", branches}});
  EXPECT_EQ(type.rfind("0 | 1 | 2 | ", 0), 0u);
  EXPECT_TRUE(HasText(type, " | 999")) << type.substr(type.size() - 20);

  // A huge enum counts as its size: a second one past the bound is unknown.
  Json huge = Json::array();
  for (size_t i = 0; i < kMaxTypeScriptNodes; ++i) huge.push_back(i);
  EXPECT_EQ(TypeScriptType({{"type", "array"}, {"prefixItems", {{{"enum", huge}}, {{"enum", huge}}}}}), "[number, unknown, ...unknown[]]");
}

// The shape of @modelcontextprotocol/server-filesystem's tools (zod-to-json-schema, draft-07).
Json ReadTextFileSchema() {
  return Parse(R"({"type": "object", "additionalProperties": false, "$schema": "http://json-schema.org/draft-07/schema#",
      "required": ["path"],
      "properties": {"path": {"type": "string"},
                     "tail": {"type": "number", "description": "If provided, returns only the last N lines of the file"},
                     "head": {"type": "number", "description": "If provided, returns only the first N lines of the file"}}})");
}

Json EditFileSchema() {
  return Parse(R"({"type": "object", "additionalProperties": false, "$schema": "http://json-schema.org/draft-07/schema#",
      "required": ["path", "edits"],
      "properties": {"path": {"type": "string"},
                     "edits": {"type": "array", "items": {"type": "object", "additionalProperties": false,
                               "required": ["oldText", "newText"],
                               "properties": {"oldText": {"type": "string", "description": "Text to search for - must match exactly"},
                                              "newText": {"type": "string", "description": "Text to replace with"}}}},
                     "dryRun": {"type": "boolean", "default": false, "description": "Preview changes using git-style diff format"}}})");
}

TEST(JsonSchemaTypeScriptTest, DeclaresRealTools) {
  std::vector<ToolDeclaration> tools = {
      {"fs", "read_text_file",
       "Read the complete contents of a file from the file system as text. Handles various text encodings and provides "
       "detailed error messages if the file cannot be read.\nUse the 'head' parameter to read only the first N lines.",
       ReadTextFileSchema(), nullptr},
      {"kv", "get", "Read a key.", Parse(R"({"type": "object", "required": ["namespace", "key"],
           "properties": {"namespace": {"type": "string"}, "key": {"type": "string"}}})"),
       Parse(R"({"type": ["string", "null"]})")},
      {"fs", "edit_file", "Make line-based edits to a text file.", EditFileSchema(), nullptr},
      {"fs", "list_allowed_directories", "Returns the list of directories.", Parse(R"({"type": "object", "properties": {}})"),
       nullptr},
      {"fs", "no_schema", "", nullptr, nullptr},
  };
  EXPECT_EQ(DeclareTools(tools),
            "declare const tools: {\n"
            "  fs: {\n"
            "    /**\n"
            "     * Read the complete contents of a file from the file system as text. Handles various text encodings and provides detailed error messages if the file cannot be read.\n"
            "     * Use the 'head' parameter to read only the first N lines.\n"
            "     */\n"
            "    read_text_file(args: {\n"
            "      path: string;\n"
            "      /** If provided, returns only the first N lines of the file */\n"
            "      head?: number;\n"
            "      /** If provided, returns only the last N lines of the file */\n"
            "      tail?: number;\n"
            "    }): Promise<unknown>;\n"
            "    /** Make line-based edits to a text file. */\n"
            "    edit_file(args: {\n"
            "      edits: { /** Text to replace with */ newText: string; /** Text to search for - must match exactly */ oldText: string }[];\n"
            "      path: string;\n"
            "      /** Preview changes using git-style diff format (default: false) */\n"
            "      dryRun?: boolean;\n"
            "    }): Promise<unknown>;\n"
            "    /** Returns the list of directories. */\n"
            "    list_allowed_directories(args?: Record<string, unknown>): Promise<unknown>;\n"
            "    no_schema(args?: Record<string, unknown>): Promise<unknown>;\n"
            "  };\n"
            "  kv: {\n"
            "    /** Read a key. */\n"
            "    get(args: { key: string; namespace: string }): Promise<string | null>;\n"
            "  };\n"
            "};\n");
}

TEST(JsonSchemaTypeScriptTest, QuotesNamesThatAreNotIdentifiers) {
  std::string text = DeclareTools({{"my-server", "read-file", "Reads.",
                                    Parse(R"({"properties": {"x-y": {"type": "string"}, "ok": {}}})"), nullptr},
                                   {"gh", "search issues", "", Parse(R"({"required": ["q"], "properties": {"q": {"type": "string"}}})"),
                                    nullptr}});
  EXPECT_EQ(text,
            "declare const tools: {\n"
            "  \"my-server\": {\n"
            "    /** Reads. */\n"
            "    \"read-file\"(args?: { ok?: unknown; \"x-y\"?: string }): Promise<unknown>;\n"
            "  };\n"
            "  gh: {\n"
            "    \"search issues\"(args: { q: string }): Promise<unknown>;\n"
            "  };\n"
            "};\n");
}

TEST(JsonSchemaTypeScriptTest, DescriptionsCannotCloseTheComment) {
  std::string hostile = "Reads a file. */ declare const evil: 1; /*\r\nsecond line */ and\tmore\x01 **/";
  std::string text = DeclareTools({{"fs", "read", hostile,
                                    Parse(R"({"properties": {"p": {"type": "string", "description": "a */ b"}}})"), nullptr}});
  // Every "*/" left is one of ours: the tool's closer and the property's.
  EXPECT_EQ(Occurrences(text, "*/"), 2u) << text;
  EXPECT_TRUE(HasText(text, "     * Reads a file. *\\/ declare const evil: 1; /*\n")) << text;
  EXPECT_TRUE(HasText(text, "     * second line *\\/ and more  **\\/\n")) << text;
  EXPECT_TRUE(HasText(text, "/** a *\\/ b */ p?: string")) << text;
  EXPECT_FALSE(HasText(text, "\r")) << text;
  EXPECT_FALSE(HasText(text, "\x01")) << text;

  // A description of one short line is one JSDoc line; an empty one is none.
  EXPECT_TRUE(HasText(DeclareTools({{"a", "b", "  Short.  \n\n", nullptr, nullptr}}), "    /** Short. */\n    b(args?"));
  EXPECT_EQ(Occurrences(DeclareTools({{"a", "b", " \n ", nullptr, nullptr}}), "/**"), 0u);

  // A very long description is cut at its bound.
  std::string text_long = DeclareTools({{"a", "b", std::string(10000, 'w'), nullptr, nullptr}}, 1 << 20);
  EXPECT_TRUE(HasText(text_long, std::string(kMaxToolDescriptionBytes - 3, 'w') + "...\n")) << text_long.size();
  EXPECT_FALSE(HasText(text_long, std::string(kMaxToolDescriptionBytes, 'w')));
}

std::vector<ToolDeclaration> ManyTools(int count) {
  std::vector<ToolDeclaration> tools;
  for (int i = 0; i < count; ++i) {
    tools.push_back({i % 2 ? "fs" : "gh", "tool_" + std::to_string(i), "Tool number " + std::to_string(i) + ".",
                     ReadTextFileSchema(), nullptr});
  }
  return tools;
}

TEST(JsonSchemaTypeScriptTest, CutAtMaxBytes) {
  std::vector<ToolDeclaration> tools = ManyTools(40);
  std::string full = DeclareTools(tools, SIZE_MAX);
  ASSERT_GT(full.size(), 4000u);
  EXPECT_FALSE(HasText(full, "more bytes cut"));
  EXPECT_EQ(DeclareTools(tools, full.size()), full);  // exactly fits: no cut

  for (size_t max_bytes : {full.size() - 1, size_t{4000}, size_t{1000}, size_t{400}}) {
    std::string text = DeclareTools(tools, max_bytes);
    EXPECT_LE(text.size(), max_bytes) << max_bytes;
    const std::string tail = " more bytes cut: ask describe_tools for fewer tools\n";
    ASSERT_GE(text.size(), tail.size());
    EXPECT_EQ(text.substr(text.size() - tail.size()), tail) << text;
    size_t marker_at = text.rfind("// ... ");
    ASSERT_NE(marker_at, std::string::npos);
    size_t cut_bytes = std::stoull(text.substr(marker_at + 7));
    EXPECT_EQ(cut_bytes, full.size() - marker_at) << max_bytes;
    // Whole tools are kept, the braces closed.
    std::string kept = text.substr(0, marker_at);
    EXPECT_EQ(Occurrences(kept, "{"), Occurrences(kept, "}")) << kept;
    EXPECT_EQ(kept.substr(kept.size() - 3), "};\n");
    EXPECT_TRUE(HasText(kept, "tool_0(args:")) << kept;
  }

  // Too small for even the frame: the marker alone.
  std::string tiny = DeclareTools(tools, 10);
  EXPECT_EQ(tiny, "// ... " + std::to_string(full.size()) + " more bytes cut: ask describe_tools for fewer tools\n");

  // One tool larger than the whole budget: the lines of it that fit.
  Json wide = Json::object();
  for (int i = 0; i < 200; ++i) wide["properties"]["property_" + std::to_string(i)] = {{"type", "string"}};
  std::string one = DeclareTools({{"g", "wide", "Wide.", wide, nullptr}}, 2000);
  EXPECT_LE(one.size(), 2000u);
  EXPECT_TRUE(HasText(one, "    wide(args?: {\n      property_0?: string;\n")) << one;
  EXPECT_TRUE(HasText(one, "more bytes cut")) << one;
}

TEST(JsonSchemaTypeScriptTest, SummaryLines) {
  EXPECT_EQ(SummaryLine({"fs", "read_text_file", "Read a file as text. Handles encodings.", ReadTextFileSchema(), nullptr}),
            "fs.read_text_file({path, head?, tail?}): Read a file as text.");
  EXPECT_EQ(SummaryLine({"fs", "edit_file", "Make line-based edits\nto a text file.", EditFileSchema(), nullptr}),
            "fs.edit_file({edits, path, dryRun?}): Make line-based edits");
  EXPECT_EQ(SummaryLine({"kv", "get", "", nullptr, nullptr}), "kv.get()");
  EXPECT_EQ(SummaryLine({"kv", "get", "\n\n  Reads e.g. a key. Then more.", nullptr, nullptr}), "kv.get(): Reads e.g. a key.");
  EXPECT_EQ(SummaryLine({"a", "b", "Done!", nullptr, nullptr}), "a.b(): Done!");
  EXPECT_EQ(SummaryLine({"a", "b", "Globs like src/**/x.ts. More.", nullptr, nullptr}), "a.b(): Globs like src/**/x.ts.");
  // A top-level $ref to the arguments' definition.
  EXPECT_EQ(SummaryLine({"a", "b", "", Parse(R"({"$ref": "#/$defs/Args", "$defs": {"Args": {"properties": {"x": {}}}}})"), nullptr}),
            "a.b({x?})");

  // The description's first sentence, cut with "...".
  std::string line = SummaryLine({"fs", "t", std::string(500, 'w') + ". Next.", nullptr, nullptr});
  EXPECT_EQ(line, "fs.t(): " + std::string(kMaxSummaryDescriptionBytes - 3, 'w') + "...");
  // Cut on a character boundary, never inside one.
  line = SummaryLine({"fs", "t", std::string(200, 'e') + "\xc3\xa9", nullptr, nullptr});
  EXPECT_EQ(line.size(), 8 + kMaxSummaryDescriptionBytes);
  line = SummaryLine({"fs", "t", "x" + std::string(100, 'y') + std::string(40, '\xe2'), nullptr, nullptr});
  EXPECT_LE(line.size(), 8 + kMaxSummaryDescriptionBytes);

  // Many parameters are cut with "...".
  Json wide = Json::object();
  for (int i = 0; i < 100; ++i) wide["properties"]["parameter_" + std::to_string(i)] = Json::object();
  line = SummaryLine({"g", "t", "", wide, nullptr});
  EXPECT_LE(line.size(), 4 + kMaxSummaryParametersBytes + 8) << line;
  EXPECT_TRUE(HasText(line, "({parameter_0?, parameter_1?, ")) << line;
  EXPECT_EQ(line.substr(line.size() - 7), ", ...})") << line;

  // No line breaks or control characters, whatever the names and description hold.
  line = SummaryLine({"g\n", "t\x1b", "a\tb\x07 c\r\nd", Parse(R"({"properties": {"p\nq": {}}})"), nullptr});
  EXPECT_EQ(line, "g?.t?({p?q?}): a b c");
}

}  // namespace
}  // namespace basal::mcp
