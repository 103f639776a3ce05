// Unit tests of codemode's pure text functions (src/mcp/codemode.h): whether an agent's script is a
// module or a function body, the wrapping of a body (line numbers kept), the evidence that a
// script that failed to compile is TypeScript, and the cutting of long output at a UTF-8 boundary.
#include "mcp/codemode.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

namespace basal::mcp {
namespace {

std::vector<std::string> Lines(std::string_view text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    lines.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

// --- IsModuleSource -------------------------------------------------------------------------------

TEST(IsModuleSourceTest, ALineStartingWithExportOrImportMakesAModule) {
  for (const char* code : {
           "export default async function (input, host, tools) { return 1; }",
           "export default 1",
           "export { run as default };\nfunction run() {}",
           "function run() {}\nexport{run as default}",
           "export * from './x.js'",
           "export async function helper() {}\nexport default helper",
           "export\tdefault 1",
           "  export default 1",
           "\texport default 1",
           "// a comment first\nexport default 1",
           "\r\nexport default 1",
           "import x from 'y';\nexport default () => x",
           "import {a} from 'b'",
           "import{a}from'b'",
           "import * as m from 'm'",
           "const a = 1;\n\n    export default a;",
       }) {
    EXPECT_TRUE(IsModuleSource(code)) << code;
  }
}

TEST(IsModuleSourceTest, ABodyIsNotAModule) {
  for (const char* code : {
           "",
           "return 1",
           "const exported = 1;\nreturn exported",
           "exported = 1",
           "exports.x = 1",
           "importance = 2",
           "imported.push(1)",
           "const x = 1; export default x",         // not at the start of a line
           "return input; // export default later",
           "// export default 1\nreturn 2",
           "/* import x from 'y' */ return 1",
           "const m = await import('./m.js');",
           "import('x').then(f)",
           "return import.meta",
           "export",                                // a word alone is not a declaration
           "import",
           "const s = 'export default 1';",
       }) {
    EXPECT_FALSE(IsModuleSource(code)) << code;
  }
}

// --- WrapScript -----------------------------------------------------------------------------------

TEST(WrapScriptTest, TheAgentsLineNIsLineNOfTheWrappedText) {
  const std::string code = "const a = input.n;\nconsole.log(a);\n\nreturn a * 2;";
  const std::string wrapped = WrapScript(code);
  const std::vector<std::string> agent = Lines(code);
  const std::vector<std::string> lines = Lines(wrapped);
  ASSERT_GE(lines.size(), agent.size());
  // Line 1 is the function's head followed by the agent's first line; the rest are the agent's own.
  EXPECT_TRUE(lines[0].ends_with(agent[0])) << lines[0];
  for (size_t i = 1; i < agent.size(); ++i) EXPECT_EQ(lines[i], agent[i]) << "line " << i + 1;
  EXPECT_TRUE(IsModuleSource(wrapped)) << "the wrapped body is a module with a default export";
  EXPECT_TRUE(wrapped.starts_with("export default async function (input, host, tools) {")) << wrapped;
}

TEST(WrapScriptTest, AFinalLineCommentDoesNotSwallowTheClosingBrace) {
  const std::string wrapped = WrapScript("return 1 // done");
  const std::vector<std::string> lines = Lines(wrapped);
  ASSERT_GE(lines.size(), 2u) << wrapped;
  EXPECT_EQ(lines[0], "export default async function (input, host, tools) {return 1 // done");
  EXPECT_EQ(lines[1], "}");
  // An empty body and a body that ends with a newline wrap too.
  EXPECT_EQ(Lines(WrapScript(""))[1], "}");
  const std::vector<std::string> trailing = Lines(WrapScript("return 1\n"));
  EXPECT_EQ(trailing[1], "");
  EXPECT_EQ(trailing[2], "}");
}

// --- TypeScriptEvidence -----------------------------------------------------------------------------

TEST(TypeScriptEvidenceTest, FindsATypeAnnotationWithItsLine) {
  EXPECT_EQ(TypeScriptEvidence("const x: string = 'a';\nreturn x"), "line 1: `: string`");
  EXPECT_EQ(TypeScriptEvidence("const a = 1;\nfunction f(n: number) { return n }\nreturn f(a)"), "line 2: `: number`");
  EXPECT_EQ(TypeScriptEvidence("let ok = true;\r\nlet b: boolean = ok;"), "line 2: `: boolean`");
  EXPECT_EQ(TypeScriptEvidence("\n\n\nasync function g(): Promise<void> {}"), "line 4: `: Promise<`");
  EXPECT_EQ(TypeScriptEvidence("const v = input as any;"), "line 1: `as any`");
  EXPECT_EQ(TypeScriptEvidence("const k = ['a'] as const;"), "line 1: `as const`");
  EXPECT_EQ(TypeScriptEvidence("return input!.name"), "line 1: `!.`");
  EXPECT_EQ(TypeScriptEvidence("function id<T>(x) { return x }"), "line 1: `<T>`");
}

TEST(TypeScriptEvidenceTest, DeclarationsOnlyAtTheStartOfAStatement) {
  EXPECT_EQ(TypeScriptEvidence("type Id = string;\nreturn 1"), "line 1: `type`");
  EXPECT_EQ(TypeScriptEvidence("const a = 1;\n  interface Row { id }"), "line 2: `interface`");
  EXPECT_EQ(TypeScriptEvidence("export interface Row { id }"), "line 1: `interface`");
  EXPECT_EQ(TypeScriptEvidence("enum Color { Red }"), "line 1: `enum`");
  // The same words inside a line are JavaScript.
  EXPECT_EQ(TypeScriptEvidence("const kind = row.type + 1;"), "");
  EXPECT_EQ(TypeScriptEvidence("const type = input.type; return type"), "");
  EXPECT_EQ(TypeScriptEvidence("console.log(x, 'the type of it')"), "");
  EXPECT_EQ(TypeScriptEvidence("const interfaces = 2"), "");
}

// "type" is a common variable name: assigning to it at the start of a line is JavaScript, not a
// type alias (which is `type NAME =`).
TEST(TypeScriptEvidenceTest, AnAssignmentToAVariableNamedTypeIsNotEvidence) {
  EXPECT_EQ(TypeScriptEvidence("let type;\ntype = input.kind;\nreturn type"), "");
  EXPECT_EQ(TypeScriptEvidence("let type = 'a';\ntype += 'b';"), "");
}

TEST(TypeScriptEvidenceTest, PlainJavaScriptIsNotEvidence) {
  for (const char* code : {
           "",
           "return 1",
           "const o = {a: 1, b: 'x', c: [1, 2]};\nreturn o",
           "const p = { name: input.name, count: 3 };",
           "const v = ok ? 1 : 2;",
           "switch (x) { case 1: return 2; default: return 3 }",
           "label: for (const a of b) { continue label }",
           "const r = await tools.kv.get({namespace: 'orders', key: input.id});",
           "if (a !== b && !c) return [a < b, b > c];",
       }) {
    EXPECT_EQ(TypeScriptEvidence(code), "") << code;
  }
}

TEST(TypeScriptEvidenceTest, ALineCommentIsNotEvidence) {
  EXPECT_EQ(TypeScriptEvidence("// x: string\nreturn 1"), "");
  EXPECT_EQ(TypeScriptEvidence("   // the id: number\nreturn 1"), "");
  // The evidence is from the first line of TypeScript, not from a comment above it.
  EXPECT_EQ(TypeScriptEvidence("// type Id = string\nconst x: number = 1"), "line 2: `: number`");
}

// A comment is not code, wherever it is on its line.
TEST(TypeScriptEvidenceTest, ACommentAfterCodeOrInABlockIsNotEvidence) {
  EXPECT_EQ(TypeScriptEvidence("const n = 1; // n: number\nreturn n"), "");
  EXPECT_EQ(TypeScriptEvidence("/* returns: string */\nreturn 'a'"), "");
  EXPECT_EQ(TypeScriptEvidence("/**\n * @returns the name: string\n */\nreturn 'a'"), "");
}

// --- CutText ------------------------------------------------------------------------------------------

TEST(CutTextTest, ShortTextIsKept) {
  EXPECT_EQ(CutText("", 0), "");
  EXPECT_EQ(CutText("hello", 5), "hello");
  EXPECT_EQ(CutText("hello", 100), "hello");
}

TEST(CutTextTest, LongTextIsCutWithAMarkerCountingTheCutBytes) {
  EXPECT_EQ(CutText("hello world", 5), "hello ... [6 bytes cut]");
  EXPECT_EQ(CutText("hello", 0), " ... [5 bytes cut]");
  EXPECT_EQ(CutText(std::string(10000, 'x'), 4096), std::string(4096, 'x') + " ... [5904 bytes cut]");
}

TEST(CutTextTest, CutsAtAUtf8Boundary) {
  // "a", then U+00E9 (2 bytes), U+20AC (3 bytes), U+1F600 (4 bytes), then "z".
  const std::string text = "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80z";
  EXPECT_EQ(CutText(text, 1), "a ... [10 bytes cut]");
  EXPECT_EQ(CutText(text, 2), "a ... [10 bytes cut]");  // not half of U+00E9
  EXPECT_EQ(CutText(text, 3), "a\xc3\xa9 ... [8 bytes cut]");
  EXPECT_EQ(CutText(text, 5), "a\xc3\xa9 ... [8 bytes cut]");
  EXPECT_EQ(CutText(text, 6), "a\xc3\xa9\xe2\x82\xac ... [5 bytes cut]");
  EXPECT_EQ(CutText(text, 9), "a\xc3\xa9\xe2\x82\xac ... [5 bytes cut]");
  EXPECT_EQ(CutText(text, 10), "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80 ... [1 bytes cut]");
  EXPECT_EQ(CutText(text, 11), text);
  // Every cut of the text keeps whole characters and counts exactly what it dropped.
  for (size_t max = 0; max < text.size(); ++max) {
    const std::string cut = CutText(text, max);
    const size_t marker = cut.find(" ... [");
    ASSERT_NE(marker, std::string::npos) << max;
    EXPECT_LE(marker, max);
    EXPECT_EQ(text.compare(0, marker, cut, 0, marker), 0) << max;
    if (marker < text.size()) {
      EXPECT_NE(static_cast<unsigned char>(text[marker]) & 0xC0, 0x80) << max;
    }
    EXPECT_EQ(cut.substr(marker), " ... [" + std::to_string(text.size() - marker) + " bytes cut]") << max;
  }
}

TEST(IsModuleSourceTest, ImportAndExportInsideStringsAndCommentsDoNotMakeAModule) {
  EXPECT_FALSE(IsModuleSource("const py = `\nimport os\nprint(os.getcwd())\n`;\nreturn py;"));
  EXPECT_FALSE(IsModuleSource("// export default is how a module would say it\nreturn 1;"));
  EXPECT_FALSE(IsModuleSource("/*\nexport default 1\n*/\nreturn 2;"));
  EXPECT_TRUE(IsModuleSource("const s = 'x';\nexport default async () => s;"));
}

}  // namespace
}  // namespace basal::mcp
