// Unit tests of what a codemode policy says about downstream MCP servers, in the parent: the
// `mcp.*` family's grant check and argument predicates (parent/host_calls/mcp.h), the manifest's
// mcp_servers and its mcp.<server>.<tool> grants (include/basal/manifest.h), host-call families in
// the registry, and the operator's review of a change to the servers (include/basal/review.h).
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "basal/host_call.h"
#include "basal/manifest.h"
#include "basal/review.h"
#include "parent/host_calls/kv.h"
#include "parent/host_calls/log.h"
#include "parent/host_calls/mcp.h"

namespace basal {
namespace {

void NoopMcpHandler(const HostCallContext&, const Json&, HostCallReply) {}

HostCallSpec McpSpec(std::string name, std::string description = "") {
  HostCallSpec spec;
  spec.name = std::move(name);
  spec.description = std::move(description);
  spec.handler = NoopMcpHandler;
  return spec;
}

// The message of a failed Result, or "<ok>".
template <typename T>
std::string MessageOf(const Result<T>& result) {
  return result ? std::string("<ok>") : result.error().message;
}

bool Contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

// --- CheckMcpGrant: the grant's shape, checked when the policy is parsed ---------------------------

const std::string kAt = "grants.mcp.fs.read_text_file";

std::string GrantError(const char* constraints) {
  auto checked = CheckMcpGrant(Json::parse(constraints), kAt);
  if (checked) return "<ok>";
  EXPECT_EQ(checked.error().code, ErrorCode::kInvalidArgument);
  return checked.error().message;
}

TEST(McpGrantCheckTest, AcceptsEveryPredicateInItsShape) {
  EXPECT_EQ(GrantError("{}"), "<ok>");
  EXPECT_EQ(GrantError(R"({"args": {}})"), "<ok>");
  EXPECT_EQ(GrantError(R"({"args": {
      "a": {"equals": {"any": ["json", 1, null]}},
      "b": {"one_of": ["x", 2, null, {"k": true}]},
      "c": {"prefix": "acme/"},
      "d": {"prefix": ["acme/", "corp/"]},
      "e": {"path_under": "/srv/data"},
      "f": {"path_under": ["/srv/data", "/tmp/", "/"]},
      "g": {"max_length": 0},
      "h": {"min": -1.5, "max": 10},
      "i": {"min": 3, "max": 3},
      "j": {"prefix": "a", "max_length": 200}}})"),
            "<ok>");
}

TEST(McpGrantCheckTest, RefusesBadShapesNamingThePath) {
  // Each: the constraints, and the path the message must start with.
  const std::vector<std::pair<const char*, std::string>> cases = {
      {R"({"argz": {}})", kAt + ".argz: unknown constraint"},
      {R"({"args": []})", kAt + ".args: must be an object"},
      {R"({"args": {"path": "x"}})", kAt + ".args.path: must be an object of predicates"},
      {R"({"args": {"path": {}}})", kAt + ".args.path: must be an object of predicates"},
      {R"({"args": {"path": {"regex": ".*"}}})", kAt + ".args.path.regex: unknown predicate \"regex\""},
      {R"({"args": {"q": {"one_of": "x"}}})", kAt + ".args.q.one_of: must be an array of 1 to 256 values"},
      {R"({"args": {"q": {"one_of": []}}})", kAt + ".args.q.one_of: must be an array of 1 to 256 values"},
      {R"({"args": {"q": {"prefix": 3}}})", kAt + ".args.q.prefix: must be a string or an array"},
      {R"({"args": {"q": {"prefix": []}}})", kAt + ".args.q.prefix: must be a string or an array"},
      {R"({"args": {"q": {"prefix": ["a", 3]}}})", kAt + ".args.q.prefix: must hold strings only"},
      {R"({"args": {"p": {"path_under": "srv/data"}}})", kAt + ".args.p.path_under: must be an absolute directory"},
      {R"({"args": {"p": {"path_under": ""}}})", kAt + ".args.p.path_under: must be an absolute directory"},
      {R"({"args": {"p": {"path_under": ["/ok", "rel"]}}})", kAt + ".args.p.path_under: must be an absolute directory"},
      {R"({"args": {"p": {"path_under": "/srv/../etc"}}})", kAt + ".args.p.path_under: must not contain"},
      {R"({"args": {"p": {"path_under": "/srv/./data"}}})", kAt + ".args.p.path_under: must not contain"},
      {R"({"args": {"p": {"path_under": "/srv/data/.."}}})", kAt + ".args.p.path_under: must not contain"},
      {R"({"args": {"p": {"path_under": 7}}})", kAt + ".args.p.path_under: must be a string or an array"},
      {R"({"args": {"q": {"max_length": -1}}})", kAt + ".args.q.max_length: must be a non-negative integer"},
      {R"({"args": {"q": {"max_length": 1.5}}})", kAt + ".args.q.max_length: must be a non-negative integer"},
      {R"({"args": {"q": {"max_length": "3"}}})", kAt + ".args.q.max_length: must be a non-negative integer"},
      {R"({"args": {"n": {"min": "1"}}})", kAt + ".args.n.min: must be a number"},
      {R"({"args": {"n": {"max": null}}})", kAt + ".args.n.max: must be a number"},
      {R"({"args": {"n": {"min": 5, "max": 1}}})", kAt + ".args.n: min is greater than max"},
  };
  for (const auto& [constraints, want] : cases) {
    const std::string message = GrantError(constraints);
    EXPECT_EQ(message.rfind(want, 0), 0u) << constraints << "\n -> " << message << "\n want a message starting " << want;
  }
  // The unknown predicate's message says which predicates there are.
  EXPECT_TRUE(Contains(GrantError(R"({"args": {"path": {"regex": ".*"}}})"),
                       "expected equals, one_of, prefix, path_under, max_length, min or max"));
}

TEST(McpGrantCheckTest, BoundsTheArgumentsAndValuesOneGrantHolds) {
  Json args = Json::object();
  for (int i = 0; i < 64; ++i) args["a" + std::to_string(i)] = Json{{"max_length", 1u}};  // as parsed: unsigned
  EXPECT_TRUE(CheckMcpGrant(Json{{"args", args}}, kAt)) << "64 constrained arguments are allowed";
  args["a64"] = Json{{"max_length", 1u}};
  auto over = CheckMcpGrant(Json{{"args", args}}, kAt);
  ASSERT_FALSE(over);
  EXPECT_EQ(over.error().message, kAt + ".args: constrains more than 64 arguments");

  for (const char* predicate : {"one_of", "prefix", "path_under"}) {
    Json values = Json::array();
    for (int i = 0; i < 256; ++i) values.push_back("/v" + std::to_string(i));
    EXPECT_TRUE(CheckMcpGrant(Json{{"args", {{"x", {{predicate, values}}}}}}, kAt)) << predicate << " with 256 values";
    values.push_back("/v256");
    auto too_many = CheckMcpGrant(Json{{"args", {{"x", {{predicate, values}}}}}}, kAt);
    ASSERT_FALSE(too_many) << predicate << " with 257 values";
    EXPECT_TRUE(Contains(too_many.error().message, kAt + ".args.x." + predicate)) << too_many.error().message;
    EXPECT_TRUE(Contains(too_many.error().message, "256")) << too_many.error().message;
  }
}

TEST(McpGrantCheckTest, ALongBadValueIsShownCut) {
  const std::string message =
      GrantError((R"({"args": {"p": {"path_under": ")" + std::string(5000, 'x') + R"("}}})").c_str());
  EXPECT_TRUE(Contains(message, "must be an absolute directory")) << message;
  EXPECT_LT(message.size(), 300u) << "the operator's value is shown cut, not whole";
}

// --- AuthorizeMcp: a call's arguments against the grant's predicates ----------------------------

// nullopt, or the reason, of `args` under `constraints`.
std::optional<std::string> Decide(const char* constraints, const Json& args) {
  const Json grant = Json::parse(constraints);
  EXPECT_TRUE(CheckMcpGrant(grant, kAt)) << constraints;
  return AuthorizeMcp(grant, args);
}

TEST(McpAuthorizeTest, AGrantWithoutArgsAdmitsAnyCall) {
  EXPECT_EQ(Decide("{}", Json::object()), std::nullopt);
  EXPECT_EQ(Decide("{}", Json{{"path", "/etc/shadow"}}), std::nullopt);
  EXPECT_EQ(Decide(R"({"args": {}})", Json{{"anything", 1}}), std::nullopt);
}

TEST(McpAuthorizeTest, Equals) {
  const char* grant = R"({"args": {"branch": {"equals": "main"}, "opts": {"equals": {"a": [1, 2]}}}})";
  EXPECT_EQ(Decide(grant, Json{{"branch", "main"}, {"opts", {{"a", {1, 2}}}}}), std::nullopt);
  auto denied = Decide(grant, Json{{"branch", "dev"}, {"opts", {{"a", {1, 2}}}}});
  ASSERT_TRUE(denied);
  EXPECT_EQ(*denied, R"(argument "branch" must be "main" (got "dev"))");
  EXPECT_TRUE(Decide(grant, Json{{"branch", "main"}, {"opts", {{"a", {2, 1}}}}}));  // arrays are ordered
  EXPECT_TRUE(Decide(grant, Json{{"branch", "main"}, {"opts", {{"a", {1, 2}}, {"b", 1}}}}));
  EXPECT_TRUE(Decide(R"({"args": {"n": {"equals": "1"}}})", Json{{"n", 1}}));  // JSON types count
}

TEST(McpAuthorizeTest, OneOf) {
  const char* grant = R"({"args": {"repo": {"one_of": ["acme/api", "acme/web", 7, null]}}})";
  for (const Json& v : {Json("acme/api"), Json("acme/web"), Json(7), Json(nullptr)}) {
    EXPECT_EQ(Decide(grant, Json{{"repo", v}}), std::nullopt) << v.dump();
  }
  auto denied = Decide(grant, Json{{"repo", "acme/secret"}});
  ASSERT_TRUE(denied);
  EXPECT_TRUE(Contains(*denied, R"(argument "repo" must be one of)")) << *denied;
  EXPECT_TRUE(Contains(*denied, R"((got "acme/secret"))")) << *denied;
  EXPECT_TRUE(Decide(grant, Json{{"repo", "ACME/API"}}));
  EXPECT_TRUE(Decide(grant, Json{{"repo", Json::array({"acme/api"})}}));
}

TEST(McpAuthorizeTest, PrefixAsStringAndList) {
  const char* one = R"({"args": {"q": {"prefix": "repo:acme/"}}})";
  EXPECT_EQ(Decide(one, Json{{"q", "repo:acme/api bug"}}), std::nullopt);
  EXPECT_EQ(Decide(one, Json{{"q", "repo:acme/"}}), std::nullopt);
  EXPECT_TRUE(Decide(one, Json{{"q", "repo:acme"}}));
  EXPECT_TRUE(Decide(one, Json{{"q", " repo:acme/api"}}));
  EXPECT_TRUE(Decide(one, Json{{"q", "REPO:acme/api"}}));  // byte by byte, case counts
  auto not_string = Decide(one, Json{{"q", 5}});
  ASSERT_TRUE(not_string);
  EXPECT_EQ(*not_string, R"(argument "q" must be a string (got 5))");

  const char* list = R"({"args": {"q": {"prefix": ["a/", "b/"]}}})";
  EXPECT_EQ(Decide(list, Json{{"q", "a/x"}}), std::nullopt);
  EXPECT_EQ(Decide(list, Json{{"q", "b/y"}}), std::nullopt);
  auto denied = Decide(list, Json{{"q", "c/z"}});
  ASSERT_TRUE(denied);
  EXPECT_EQ(*denied, R"(argument "q" must start with ["a/","b/"] (got "c/z"))");
}

TEST(McpAuthorizeTest, PathUnder) {
  const char* grant = R"({"args": {"path": {"path_under": "/srv/data"}}})";
  for (const char* ok : {"/srv/data", "/srv/data/", "/srv/data/a", "/srv//data/a", "/srv/data//a/b.txt",
                         "//srv/data", "/srv/data/...", "/srv/data/.hidden", "/srv/data/a..b"}) {
    EXPECT_EQ(Decide(grant, Json{{"path", ok}}), std::nullopt) << ok;
  }
  for (const char* refused : {"/srv/database", "/srv/dat", "/srv", "/", "/srv/data/../etc/passwd", "/srv/data/..",
                              "/srv/./data", "/srv/data/./a", "relative", "srv/data/a", "", "./srv/data",
                              "/etc/passwd", "/SRV/data"}) {
    EXPECT_TRUE(Decide(grant, Json{{"path", refused}})) << refused;
  }
  // A NUL inside the path could end it early for the server that reads it.
  EXPECT_TRUE(Decide(grant, Json{{"path", std::string("/srv/data/a\0/../../etc", 22)}}));
  for (const Json& not_string : {Json(1), Json(nullptr), Json::array({"/srv/data"}), Json{{"p", "/srv/data"}}}) {
    auto denied = Decide(grant, Json{{"path", not_string}});
    ASSERT_TRUE(denied) << not_string.dump();
    EXPECT_TRUE(Contains(*denied, R"(argument "path" must be a path, a string)")) << *denied;
  }
  auto climb = Decide(grant, Json{{"path", "/srv/data/../etc/passwd"}});
  ASSERT_TRUE(climb);
  EXPECT_EQ(*climb, R"(argument "path" must be an absolute path without "." or ".." segments (got "/srv/data/../etc/passwd"))");
  auto outside = Decide(grant, Json{{"path", "/srv/database"}});
  ASSERT_TRUE(outside);
  EXPECT_EQ(*outside, R"(argument "path" must be a path under "/srv/data" (got "/srv/database"))");

  // A directory written with a trailing '/' or repeated '/' is the same directory.
  for (const char* dir : {"/srv/data/", "/srv//data", "//srv/data//"}) {
    const std::string g = std::string(R"({"args": {"path": {"path_under": ")") + dir + R"("}}})";
    EXPECT_EQ(Decide(g.c_str(), Json{{"path", "/srv/data/a"}}), std::nullopt) << dir;
    EXPECT_TRUE(Decide(g.c_str(), Json{{"path", "/srv/database"}})) << dir;
  }
  // Several directories: under any one of them.
  const char* two = R"({"args": {"path": {"path_under": ["/srv/data", "/tmp/work"]}}})";
  EXPECT_EQ(Decide(two, Json{{"path", "/tmp/work/x"}}), std::nullopt);
  EXPECT_EQ(Decide(two, Json{{"path", "/srv/data"}}), std::nullopt);
  EXPECT_TRUE(Decide(two, Json{{"path", "/tmp/worker"}}));
}

TEST(McpAuthorizeTest, PathUnderTheRootAdmitsEveryCleanAbsolutePath) {
  const char* grant = R"({"args": {"path": {"path_under": "/"}}})";
  for (const char* ok : {"/", "/etc/passwd", "//x", "/a/b/c/"}) {
    EXPECT_EQ(Decide(grant, Json{{"path", ok}}), std::nullopt) << ok;
  }
  for (const char* refused : {"/a/../b", "/./a", "/..", "relative", ""}) {
    EXPECT_TRUE(Decide(grant, Json{{"path", refused}})) << refused;
  }
}

TEST(McpAuthorizeTest, MaxLengthOfStringsInBytesAndArraysInItems) {
  const char* grant = R"({"args": {"q": {"max_length": 4}}})";
  EXPECT_EQ(Decide(grant, Json{{"q", ""}}), std::nullopt);
  EXPECT_EQ(Decide(grant, Json{{"q", "abcd"}}), std::nullopt);
  auto long_text = Decide(grant, Json{{"q", "abcde"}});
  ASSERT_TRUE(long_text);
  EXPECT_EQ(*long_text, R"(argument "q" is longer than 4 bytes)");
  EXPECT_EQ(Decide(grant, Json{{"q", "\xc3\xa9\xc3\xa9"}}), std::nullopt);  // "éé": 4 bytes
  EXPECT_TRUE(Decide(grant, Json{{"q", "\xc3\xa9\xc3\xa9\xc3\xa9"}}));       // 6 bytes, 3 characters
  EXPECT_EQ(Decide(grant, Json{{"q", {1, 2, 3, 4}}}), std::nullopt);
  auto long_list = Decide(grant, Json{{"q", {1, 2, 3, 4, 5}}});
  ASSERT_TRUE(long_list);
  EXPECT_EQ(*long_list, R"(argument "q" has more than 4 items)");
  for (const Json& other : {Json(12345), Json(true), Json(nullptr), Json{{"a", 1}}}) {
    auto denied = Decide(grant, Json{{"q", other}});
    ASSERT_TRUE(denied) << other.dump();
    EXPECT_TRUE(Contains(*denied, R"(argument "q" must be a string or an array)")) << *denied;
  }
  EXPECT_TRUE(Decide(R"({"args": {"q": {"max_length": 0}}})", Json{{"q", "a"}}));
  EXPECT_EQ(Decide(R"({"args": {"q": {"max_length": 0}}})", Json{{"q", ""}}), std::nullopt);
}

TEST(McpAuthorizeTest, MinAndMaxAreInclusive) {
  const char* grant = R"({"args": {"n": {"min": 1, "max": 100}}})";
  for (const Json& ok : {Json(1), Json(100), Json(50), Json(1.0), Json(99.5)}) {
    EXPECT_EQ(Decide(grant, Json{{"n", ok}}), std::nullopt) << ok.dump();
  }
  auto low = Decide(grant, Json{{"n", 0}});
  ASSERT_TRUE(low);
  EXPECT_EQ(*low, R"(argument "n" must be at least 1 (got 0))");
  auto high = Decide(grant, Json{{"n", 101}});
  ASSERT_TRUE(high);
  EXPECT_EQ(*high, R"(argument "n" must be at most 100 (got 101))");
  EXPECT_TRUE(Decide(grant, Json{{"n", 100.01}}));
  EXPECT_TRUE(Decide(grant, Json{{"n", -5}}));
  for (const Json& other : {Json("5"), Json(nullptr), Json::array({5})}) {
    auto denied = Decide(grant, Json{{"n", other}});
    ASSERT_TRUE(denied) << other.dump();
    EXPECT_TRUE(Contains(*denied, R"(argument "n" must be a number)")) << *denied;
  }
  EXPECT_EQ(Decide(R"({"args": {"n": {"min": -2.5}}})", Json{{"n", -2.5}}), std::nullopt);
  EXPECT_TRUE(Decide(R"({"args": {"n": {"max": -2.5}}})", Json{{"n", -2}}));
}

// Integers beyond 2^53 must not be compared through a double: the next integer above max is above
// max.
TEST(McpAuthorizeTest, MaxHoldsForLargeIntegers) {
  EXPECT_TRUE(Decide(R"({"args": {"id": {"max": 9007199254740992}}})", Json{{"id", 9007199254740993ull}}))
      << "9007199254740993 is above max 9007199254740992";
  EXPECT_TRUE(Decide(R"({"args": {"id": {"max": 18446744073709551614}}})", Json{{"id", 18446744073709551615ull}}))
      << "18446744073709551615 is above max 18446744073709551614";
  EXPECT_TRUE(Decide(R"({"args": {"id": {"min": -9007199254740992}}})", Json{{"id", -9007199254740993ll}}))
      << "-9007199254740993 is below min -9007199254740992";
}

TEST(McpAuthorizeTest, EveryPredicateOfEveryArgumentMustHold) {
  const char* grant = R"({"args": {"q": {"prefix": "a", "max_length": 3}, "n": {"max": 5}}})";
  EXPECT_EQ(Decide(grant, Json{{"q", "abc"}, {"n", 5}, {"extra", "free"}}), std::nullopt);
  EXPECT_TRUE(Decide(grant, Json{{"q", "abcd"}, {"n", 5}}));
  EXPECT_TRUE(Decide(grant, Json{{"q", "bbc"}, {"n", 5}}));
  EXPECT_TRUE(Decide(grant, Json{{"q", "abc"}, {"n", 6}}));
}

TEST(McpAuthorizeTest, AConstrainedArgumentTheCallDoesNotGiveIsDenied) {
  const char* grant = R"({"args": {"path": {"path_under": "/srv/data"}}})";
  auto missing = Decide(grant, Json{{"other", "/srv/data/a"}});
  ASSERT_TRUE(missing);
  EXPECT_EQ(*missing, R"(the grant constrains argument "path", which the call does not give)");
  auto empty = Decide(grant, Json::object());
  ASSERT_TRUE(empty);
  EXPECT_TRUE(Contains(*empty, R"("path")"));
  // Arguments that are not an object give no argument at all.
  for (const Json& args : {Json(nullptr), Json::array({"/srv/data"}), Json("/srv/data"), Json(1)}) {
    auto denied = Decide(grant, args);
    ASSERT_TRUE(denied) << args.dump();
    EXPECT_TRUE(Contains(*denied, R"(argument "path")")) << *denied;
  }
  // null given is given: it is checked (and is not a path).
  EXPECT_TRUE(Decide(grant, Json{{"path", nullptr}}));
}

TEST(McpAuthorizeTest, AHugeArgumentIsShownCutInTheReason) {
  auto denied = Decide(R"({"args": {"q": {"equals": "x"}}})", Json{{"q", std::string(100000, 'y')}});
  ASSERT_TRUE(denied);
  EXPECT_LT(denied->size(), 300u);
  auto utf8 = Decide(R"({"args": {"q": {"equals": "x"}}})", Json{{"q", std::string(20000, 'a') + "\xc3\xa9"}});
  ASSERT_TRUE(utf8);
}

// --- The family spec and its registration -------------------------------------------------------

TEST(McpFamilySpecTest, IsAnExternalFamilyWithTheGrantCheck) {
  HostCallSpec spec = McpFamilySpec(NoopMcpHandler);
  EXPECT_EQ(spec.name, "mcp.*");
  EXPECT_EQ(spec.effect, Effect::kExternal);
  EXPECT_TRUE(spec.needs_grant);
  EXPECT_TRUE(spec.journaled);
  ASSERT_TRUE(spec.check_grant);
  ASSERT_TRUE(spec.authorize);
  EXPECT_FALSE(spec.check_grant(Json::parse(R"({"args": {"p": {"nope": 1}}})"), "g"));
  EXPECT_TRUE(spec.authorize(Json::parse(R"({"args": {"p": {"equals": 1}}})"), Json{{"p", 2}}));

  HostCallRegistry registry;
  ASSERT_TRUE(RegisterMcpHostCalls(registry));
  EXPECT_FALSE(RegisterMcpHostCalls(registry)) << "a second registration of the family is a duplicate";
  const HostCallSpec* found = registry.Find("mcp.fs.read_text_file");
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(found->name, "mcp.*");
  EXPECT_TRUE(static_cast<bool>(found->handler));
}

// --- Host-call families in the registry ---------------------------------------------------------

TEST(HostCallFamilyTest, FindServesMembersOfAFamily) {
  HostCallRegistry registry;
  ASSERT_TRUE(registry.Register(McpSpec("mcp.*", "family")));
  ASSERT_TRUE(registry.Register(McpSpec("kv.get")));
  for (const char* member : {"mcp.fs.read", "mcp.fs.read_text_file", "mcp.x", "mcp.fs.*", "mcp.a.b.c"}) {
    const HostCallSpec* spec = registry.Find(member);
    ASSERT_NE(spec, nullptr) << member;
    EXPECT_EQ(spec->name, "mcp.*") << member;
  }
  for (const char* stranger : {"mcp.", "mcp", "mcpx.fs", "mc", "", "kv.get.x", "xmcp.fs", "MCP.fs"}) {
    EXPECT_EQ(registry.Find(stranger), nullptr) << stranger;
  }
  EXPECT_EQ(registry.Find("kv.get")->name, "kv.get");
  // The family is listed by its own name.
  EXPECT_EQ(registry.Names(), (std::vector<std::string>{"kv.get", "mcp.*"}));
}

TEST(HostCallFamilyTest, AnExactSpecBeatsTheFamily) {
  HostCallRegistry registry;
  ASSERT_TRUE(registry.Register(McpSpec("mcp.*", "family")));
  ASSERT_TRUE(registry.Register(McpSpec("mcp.special", "exact")));
  EXPECT_EQ(registry.Find("mcp.special")->description, "exact");
  EXPECT_EQ(registry.Find("mcp.special.x")->description, "family");  // an exact spec is no family
  EXPECT_EQ(registry.Find("mcp.specia")->description, "family");
}

TEST(HostCallFamilyTest, TheLongestFamilyPrefixWins) {
  // Registered in both orders: the answer must not depend on it.
  for (bool longer_first : {false, true}) {
    HostCallRegistry registry;
    if (longer_first) {
      ASSERT_TRUE(registry.Register(McpSpec("a.b.*", "a.b")));
    }
    ASSERT_TRUE(registry.Register(McpSpec("a.*", "a")));
    if (!longer_first) {
      ASSERT_TRUE(registry.Register(McpSpec("a.b.*", "a.b")));
    }
    EXPECT_EQ(registry.Find("a.b.c")->description, "a.b") << longer_first;
    EXPECT_EQ(registry.Find("a.b.c.d")->description, "a.b") << longer_first;
    EXPECT_EQ(registry.Find("a.c")->description, "a") << longer_first;
    EXPECT_EQ(registry.Find("a.b")->description, "a") << longer_first;  // "a.b" is not below "a.b."
    EXPECT_EQ(registry.Find("a.bc")->description, "a") << longer_first;
    EXPECT_EQ(registry.Find("a.b.*")->description, "a.b") << longer_first;  // a family by its own name
    EXPECT_EQ(registry.Find("a."), nullptr) << longer_first;
    EXPECT_EQ(registry.Find("ab.c"), nullptr) << longer_first;
  }
}

TEST(HostCallFamilyTest, InvalidFamilyNamesAreRefused) {
  HostCallRegistry registry;
  for (const char* bad : {"*", ".*", "a..*", "a.*.*", "*.a", "a*", "a.**", "a.*b", "a.b*", ".a.*", "a. *", "a/.*"}) {
    auto r = registry.Register(McpSpec(bad));
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument) << bad;
    EXPECT_TRUE(Contains(r.error().message, std::string("host call \"") + bad + "\"")) << r.error().message;
  }
  EXPECT_TRUE(registry.Names().empty());
  EXPECT_TRUE(registry.Register(McpSpec("a.*")));
  EXPECT_TRUE(registry.Register(McpSpec("a-b_c.D9.*")));
  // The family's prefix counts toward the name's bound like any name.
  EXPECT_FALSE(registry.Register(McpSpec(std::string(127, 'a') + ".*")));
  EXPECT_TRUE(registry.Register(McpSpec(std::string(126, 'a') + ".*")));
}

TEST(HostCallFamilyTest, ReplaceAFamilyByItsName) {
  HostCallRegistry registry;
  ASSERT_TRUE(RegisterMcpHostCalls(registry));
  HostCallSpec replacement = McpFamilySpec(NoopMcpHandler);
  replacement.description = "served by basal mcp";
  ASSERT_TRUE(registry.Replace(std::move(replacement)));
  ASSERT_NE(registry.Find("mcp.fs.read"), nullptr);
  EXPECT_EQ(registry.Find("mcp.fs.read")->description, "served by basal mcp");
  EXPECT_EQ(registry.Names(), (std::vector<std::string>{"mcp.*"}));

  // A failed replacement keeps the old spec.
  HostCallSpec broken = McpFamilySpec(nullptr);
  EXPECT_FALSE(registry.Replace(std::move(broken)));
  EXPECT_EQ(registry.Find("mcp.fs.read")->description, "served by basal mcp");
  // A member's name is not the family's: nothing to replace.
  auto member = registry.Replace(McpSpec("mcp.fs.read"));
  ASSERT_FALSE(member);
  EXPECT_EQ(member.error().code, ErrorCode::kNotFound);
  auto other = registry.Replace(McpSpec("b.*"));
  ASSERT_FALSE(other);
  EXPECT_EQ(other.error().code, ErrorCode::kNotFound);
}

// --- Manifest: mcp_servers and mcp.<server>.<tool> grants ------------------------------------------

// log, kv.*, http.fetch (a stand-in: only its name matters here) and the mcp.* family, as a module
// registers them.
class McpManifestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(RegisterLogHostCall(registry_, [](const HostCallContext&, std::string_view, std::string_view) {}));
    ASSERT_TRUE(RegisterKvHostCallSpecs(registry_));
    ASSERT_TRUE(registry_.Register(McpSpec("http.fetch")));
    ASSERT_TRUE(RegisterMcpHostCalls(registry_));
  }

  Manifest MustParse(const std::string& text, Profile profile = Profile::kCodemode) {
    auto m = Manifest::Parse(text, registry_, profile);
    EXPECT_TRUE(m) << text << " -> " << MessageOf(m);
    if (!m) std::abort();
    return std::move(*m);
  }
  std::string ErrorOf(const std::string& text, Profile profile = Profile::kCodemode) {
    auto m = Manifest::Parse(text, registry_, profile);
    if (m) return "<parsed>";
    EXPECT_EQ(m.error().code, ErrorCode::kInvalidArgument) << m.error().message;
    return m.error().message;
  }
  // A policy with one server "fs" whose fields are `fields` (a JSON object's inside, after command).
  std::string WithServer(const std::string& fields, const std::string& grants = "{}") {
    return R"({"mcp_servers": {"fs": {"command": "/usr/bin/node")" + (fields.empty() ? "" : ", " + fields) +
           R"(}}, "grants": )" + grants + "}";
  }
  // The message of a policy with one server "fs", checked to start with `path`.
  void ExpectRefused(const std::string& fields, const std::string& path, std::string_view also = "") {
    const std::string message = ErrorOf(WithServer(fields));
    EXPECT_EQ(message.rfind(path + ": ", 0), 0u) << fields << "\n -> " << message << "\n want it to start " << path;
    if (!also.empty()) {
      EXPECT_TRUE(Contains(message, also)) << message << "\n want " << also;
    }
  }

  HostCallRegistry registry_;
};

constexpr const char* kPolicy = R"({
  "mcp_servers": {"fs": {"command": "/usr/bin/node", "args": ["/opt/x/dist/index.js", "/srv/data"],
                         "env": {"TOKEN": "${secret:gh_token}", "MODE": "ro"}, "cwd": "/srv", "call_timeout_ms": 30000},
                  "github": {"command": "/opt/gh/server"}},
  "grants": {"mcp.fs.read_text_file": {"args": {"path": {"path_under": "/srv/data"}}},
             "mcp.fs.list_directory": {},
             "mcp.github.*": {},
             "kv.get": {"namespaces": ["orders"]}},
  "budgets": {"deadline_ms": 60000}})";

TEST_F(McpManifestTest, ParsesServersWithTheirDefaultsFilledIn) {
  Manifest m = MustParse(kPolicy);
  ASSERT_EQ(m.mcp_servers().size(), 2u);
  EXPECT_EQ(m.mcp_servers().at("fs"), Json::parse(R"({"command": "/usr/bin/node",
      "args": ["/opt/x/dist/index.js", "/srv/data"], "env": {"TOKEN": "${secret:gh_token}", "MODE": "ro"},
      "cwd": "/srv", "call_timeout_ms": 30000, "start_timeout_ms": 30000})"));
  EXPECT_EQ(m.mcp_servers().at("github"), Json::parse(R"({"command": "/opt/gh/server", "args": [], "env": {},
      "cwd": "/", "call_timeout_ms": 60000, "start_timeout_ms": 30000})"));
  EXPECT_EQ(m.grants().size(), 4u);
  EXPECT_TRUE(m.grants().count("mcp.github.*"));
}

TEST_F(McpManifestTest, OnlyACodemodePolicyListsServers) {
  const std::string message = ErrorOf(kPolicy, Profile::kFlow);
  EXPECT_EQ(message.rfind("mcp_servers: only a codemode policy lists downstream MCP servers", 0), 0u) << message;
  // Empty, too: the key has no place in a flow's manifest.
  EXPECT_NE(ErrorOf(R"({"mcp_servers": {}})", Profile::kFlow), "<parsed>");
  // A flow may not grant a downstream tool either: it has no servers.
  const std::string grant = ErrorOf(R"({"grants": {"mcp.fs.read": {}}})", Profile::kFlow);
  EXPECT_EQ(grant.rfind("grants.mcp.fs.read: no server \"fs\" in mcp_servers (none listed)", 0), 0u) << grant;
  // A flow's unknown key still names only its own keys.
  EXPECT_EQ(ErrorOf(R"({"servers": {}})", Profile::kFlow), R"(manifest: unknown key "servers" (expected "grants", "budgets", "durable" or "retry"))");
  EXPECT_EQ(ErrorOf(R"({"servers": {}})"), R"(manifest: unknown key "servers" (expected "grants", "budgets" or "mcp_servers"))");
}

TEST_F(McpManifestTest, ServerShapes) {
  EXPECT_EQ(ErrorOf(R"({"mcp_servers": []})").rfind("mcp_servers: must be an object", 0), 0u);
  EXPECT_EQ(ErrorOf(R"({"mcp_servers": {"fs": "/usr/bin/node"}})").rfind("mcp_servers.fs: must be an object", 0), 0u);
  EXPECT_EQ(ErrorOf(R"({"mcp_servers": {"fs": {}}})"),
            R"(mcp_servers.fs: needs "command": the absolute path of the server's executable)");
  EXPECT_EQ(ErrorOf(R"({"mcp_servers": {"fs": {"args": []}}})").rfind("mcp_servers.fs: needs \"command\"", 0), 0u);
  ExpectRefused(R"("argv": [])", "mcp_servers.fs.argv", "unknown key \"argv\"");
  ExpectRefused(R"("timeout_ms": 5)", "mcp_servers.fs.timeout_ms", "expected command, args, env, cwd");
}

TEST_F(McpManifestTest, CommandAndCwdAreAbsolute) {
  EXPECT_EQ(ErrorOf(R"({"mcp_servers": {"fs": {"command": "node"}}})").rfind("mcp_servers.fs.command: must be an absolute path", 0),
            0u);
  EXPECT_TRUE(Contains(ErrorOf(R"({"mcp_servers": {"fs": {"command": "node"}}})"), "basal does not search PATH"));
  EXPECT_EQ(ErrorOf(R"({"mcp_servers": {"fs": {"command": ""}}})").rfind("mcp_servers.fs.command: must be an absolute path", 0), 0u);
  EXPECT_EQ(ErrorOf(R"({"mcp_servers": {"fs": {"command": 5}}})").rfind("mcp_servers.fs.command: must be a string", 0), 0u);
  EXPECT_EQ(ErrorOf(R"({"mcp_servers": {"fs": {"command": "./bin/x"}}})").rfind("mcp_servers.fs.command:", 0), 0u);
  ExpectRefused(R"("cwd": "srv")", "mcp_servers.fs.cwd", "must be an absolute path");
  ExpectRefused(R"("cwd": "")", "mcp_servers.fs.cwd", "must be an absolute path");
  ExpectRefused(R"("cwd": ["/srv"])", "mcp_servers.fs.cwd", "must be a string");
  ExpectRefused(R"("cwd": "/srv\u0000/x")", "mcp_servers.fs.cwd", "NUL");
  EXPECT_EQ(ErrorOf(R"({"mcp_servers": {"fs": {"command": "/bin/x\u0000y"}}})").rfind("mcp_servers.fs.command: contains a NUL", 0),
            0u);
  Manifest m = MustParse(WithServer(R"("cwd": "/srv/data")"));
  EXPECT_EQ(m.mcp_servers().at("fs")["cwd"], "/srv/data");
}

TEST_F(McpManifestTest, ArgsAreBoundedStrings) {
  ExpectRefused(R"("args": "/srv")", "mcp_servers.fs.args", "must be an array of strings");
  ExpectRefused(R"("args": ["a", 5])", "mcp_servers.fs.args[1]", "must be a string");
  ExpectRefused(R"("args": ["a\u0000b"])", "mcp_servers.fs.args[0]", "NUL");
  // Arguments are not paths: relative and empty ones are the server's business.
  Manifest rel = MustParse(WithServer(R"("args": ["index.js", "", "--flag=x"])"));
  EXPECT_EQ(rel.mcp_servers().at("fs")["args"], Json::parse(R"(["index.js", "", "--flag=x"])"));

  Json args = Json::array();
  for (int i = 0; i < 256; ++i) args.push_back("a" + std::to_string(i));
  MustParse(WithServer("\"args\": " + args.dump()));
  args.push_back("one too many");
  ExpectRefused("\"args\": " + args.dump(), "mcp_servers.fs.args", "more than 256 arguments");

  MustParse(WithServer("\"args\": [\"" + std::string(4096, 'x') + "\"]"));
  ExpectRefused("\"args\": [\"" + std::string(4097, 'x') + "\"]", "mcp_servers.fs.args[0]", "longer than 4096 bytes");
  MustParse(R"({"mcp_servers": {"fs": {"command": "/)" + std::string(4095, 'c') + R"("}}})");
  EXPECT_EQ(ErrorOf(R"({"mcp_servers": {"fs": {"command": "/)" + std::string(4096, 'c') + R"("}}})")
                .rfind("mcp_servers.fs.command: is longer than 4096 bytes", 0),
            0u);
  ExpectRefused("\"cwd\": \"/" + std::string(4096, 'd') + "\"", "mcp_servers.fs.cwd", "longer than 4096 bytes");
}

TEST_F(McpManifestTest, EnvNamesValuesAndBounds) {
  Manifest m = MustParse(WithServer(R"("env": {"A": "1", "_x9": "", "LONG_NAME_2": "v w"})"));
  EXPECT_EQ(m.mcp_servers().at("fs")["env"], Json::parse(R"({"A": "1", "_x9": "", "LONG_NAME_2": "v w"})"));
  ExpectRefused(R"("env": ["A=1"])", "mcp_servers.fs.env", "must be an object");
  ExpectRefused(R"("env": {"A": 1})", "mcp_servers.fs.env.A", "must be a string");
  ExpectRefused(R"("env": {"A": "x\u0000y"})", "mcp_servers.fs.env.A", "NUL");
  for (const char* bad : {"1A", "A-B", "A.B", "A B", "A=B", "\u00e9"}) {
    const std::string message = ErrorOf(WithServer(std::string(R"("env": {)") + Json(bad).dump() + R"(: "v"})"));
    EXPECT_EQ(message.rfind("mcp_servers.fs.env", 0), 0u) << bad << " -> " << message;
    EXPECT_TRUE(Contains(message, "a variable name is letters, digits and '_', not starting with a digit")) << message;
  }
  EXPECT_NE(ErrorOf(WithServer(R"("env": {"": "v"})")), "<parsed>");
  ExpectRefused("\"env\": {\"A\": \"" + std::string(4097, 'v') + "\"}", "mcp_servers.fs.env.A", "longer than 4096 bytes");
  ExpectRefused("\"env\": {\"" + std::string(257, 'N') + "\": \"v\"}", "mcp_servers.fs.env." + std::string(257, 'N'),
                "a variable name");

  Json env = Json::object();
  for (int i = 0; i < 256; ++i) env["V" + std::to_string(i)] = "x";
  MustParse(WithServer("\"env\": " + env.dump()));
  env["V256"] = "x";
  ExpectRefused("\"env\": " + env.dump(), "mcp_servers.fs.env", "more than 256 variables");
}

TEST_F(McpManifestTest, ASecretReferenceIsTheWholeValue) {
  Manifest m = MustParse(WithServer(R"("env": {"TOKEN": "${secret:gh_token}", "B": "${secret:_b2}"})"));
  EXPECT_EQ(m.mcp_servers().at("fs")["env"]["TOKEN"], "${secret:gh_token}");  // resolved only when it starts
  ExpectRefused(R"("env": {"TOKEN": "${secret:gh_token"})", "mcp_servers.fs.env.TOKEN",
                "a secret reference must be the whole value, \"${secret:NAME}\"");
  ExpectRefused(R"("env": {"TOKEN": "${secret:gh_token}x"})", "mcp_servers.fs.env.TOKEN", "secret");
  ExpectRefused(R"("env": {"TOKEN": "${secret:}"})", "mcp_servers.fs.env.TOKEN", "secret");
  ExpectRefused(R"("env": {"TOKEN": "${secret:9lives}"})", "mcp_servers.fs.env.TOKEN", "secret name");
  ExpectRefused(R"("env": {"TOKEN": "${secret:a/../b}"})", "mcp_servers.fs.env.TOKEN", "secret name");
  ExpectRefused(R"("env": {"TOKEN": "${secret:a}${secret:b}"})", "mcp_servers.fs.env.TOKEN", "secret");
}

// A reference inside a longer value is not read from the secrets store: the server would be given
// the literal text "Bearer ${secret:tok}". The operator must hear that, not find out from the
// server's failures.
TEST_F(McpManifestTest, ASecretReferenceInsideAValueIsRefused) {
  ExpectRefused(R"("env": {"AUTH": "Bearer ${secret:tok}"})", "mcp_servers.fs.env.AUTH",
                "a secret reference must be the whole value");
}

TEST_F(McpManifestTest, TimeoutsAreIntegersFrom1To600000) {
  for (const char* key : {"call_timeout_ms", "start_timeout_ms"}) {
    const std::string k = std::string("\"") + key + "\": ";
    EXPECT_EQ(MustParse(WithServer(k + "1")).mcp_servers().at("fs")[key], 1);
    EXPECT_EQ(MustParse(WithServer(k + "600000")).mcp_servers().at("fs")[key], 600000);
    for (const char* bad : {"0", "-1", "600001", "1.5", "\"100\"", "null", "18446744073709551615", "1e3"}) {
      ExpectRefused(k + bad, std::string("mcp_servers.fs.") + key, "must be an integer from 1 to 600000");
    }
  }
}

TEST_F(McpManifestTest, ServerNamesAndTheirBound) {
  for (const char* ok : {"a", "fs", "GitHub", "my-server_2", "x123456789012345678901234567890y"}) {
    Manifest m = MustParse(std::string(R"({"mcp_servers": {")") + ok + R"(": {"command": "/bin/x"}}})");
    EXPECT_EQ(m.mcp_servers().count(ok), 1u) << ok;
  }
  for (const char* bad : {"", "1fs", "_fs", "-fs", "f.s", "f s", "f/s", "x1234567890123456789012345678901y", "f$"}) {
    const std::string message = ErrorOf(std::string(R"({"mcp_servers": {)") + Json(bad).dump() + R"(: {"command": "/bin/x"}}})");
    EXPECT_EQ(message.rfind("mcp_servers", 0), 0u) << bad << " -> " << message;
    EXPECT_TRUE(Contains(message, "a server name is 1 to 32 letters, digits, '_' and '-', starting with a letter")) << message;
  }
}

TEST_F(McpManifestTest, AtMost16Servers) {
  std::string servers;
  for (int i = 0; i < 16; ++i) servers += (i ? "," : "") + std::string("\"s") + std::to_string(i) + R"(": {"command": "/bin/x"})";
  EXPECT_EQ(MustParse(R"({"mcp_servers": {)" + servers + "}}").mcp_servers().size(), 16u);
  servers += R"(, "s16": {"command": "/bin/x"})";
  EXPECT_EQ(ErrorOf(R"({"mcp_servers": {)" + servers + "}}"), "mcp_servers: lists more than 16 servers");
}

TEST_F(McpManifestTest, AServerMayNotTakeTheNameOfAHostCallFamily) {
  for (const char* taken : {"kv", "http", "mcp", "log"}) {
    const std::string message = ErrorOf(std::string(R"({"mcp_servers": {")") + taken + R"(": {"command": "/bin/x"}}})");
    EXPECT_EQ(message, std::string("mcp_servers.") + taken + ": the name \"" + taken +
                           "\" is taken by basal's host calls (" + taken + ".*): name the server otherwise")
        << taken;
  }
  // Only whole group names are taken.
  MustParse(R"({"mcp_servers": {"kvstore": {"command": "/bin/x"}, "https": {"command": "/bin/x"}}})");
}

TEST_F(McpManifestTest, GrantsOfDownstreamToolsNameAListedServer) {
  MustParse(WithServer("", R"({"mcp.fs.read_text_file": {}, "mcp.fs.*": {}, "mcp.fs.a.b": {}})"));
  const std::string unlisted = ErrorOf(WithServer("", R"({"mcp.gh.search": {}})"));
  EXPECT_EQ(unlisted, R"(grants.mcp.gh.search: no server "gh" in mcp_servers (listed: fs))");
  const std::string wildcard = ErrorOf(WithServer("", R"({"mcp.gh.*": {}})"));
  // A name with '*' is quoted in the path.
  EXPECT_EQ(wildcard.rfind(R"(grants["mcp.gh.*"]: no server "gh")", 0), 0u) << wildcard;
  for (const auto& [bad, path] : std::vector<std::pair<std::string, std::string>>{
           {"mcp.fs", "grants.mcp.fs"}, {"mcp.fs.", "grants.mcp.fs."}, {"mcp.*", R"(grants["mcp.*"])"}}) {
    const std::string message = ErrorOf(WithServer("", "{\"" + bad + "\": {}}"));
    EXPECT_EQ(message.rfind(path + ": a downstream tool's grant is mcp.<server>.<tool> or mcp.<server>.*", 0), 0u)
        << bad << " -> " << message;
  }
  // A bad predicate is refused with its full path.
  const std::string predicate = ErrorOf(WithServer("", R"({"mcp.fs.read_text_file": {"args": {"path": {"path_under": "srv"}}}})"));
  EXPECT_EQ(predicate.rfind("grants.mcp.fs.read_text_file.args.path.path_under: must be an absolute directory", 0), 0u)
      << predicate;
  // Grants listed before the servers are checked all the same.
  MustParse(R"({"grants": {"mcp.fs.read": {}}, "mcp_servers": {"fs": {"command": "/bin/x"}}})");
}

TEST_F(McpManifestTest, GrantKeyForAndGrantFor) {
  Manifest m = MustParse(R"({"mcp_servers": {"fs": {"command": "/bin/x"}, "gh": {"command": "/bin/y"}, "fsx": {"command": "/bin/z"}},
    "grants": {"mcp.fs.*": {}, "mcp.fs.read_text_file": {"args": {"path": {"path_under": "/srv/data"}}},
               "mcp.gh.search": {}, "kv.get": {"namespaces": ["orders"]}}})");
  EXPECT_EQ(m.GrantKeyFor("kv.get"), "kv.get");
  EXPECT_EQ(m.GrantKeyFor("kv.put"), "");
  EXPECT_EQ(m.GrantKeyFor("mcp.fs.read_text_file"), "mcp.fs.read_text_file");  // exact wins
  EXPECT_EQ(m.GrantKeyFor("mcp.fs.write_file"), "mcp.fs.*");
  EXPECT_EQ(m.GrantKeyFor("mcp.fs.a.b"), "mcp.fs.*");
  EXPECT_EQ(m.GrantKeyFor("mcp.gh.search"), "mcp.gh.search");
  EXPECT_EQ(m.GrantKeyFor("mcp.gh.other"), "");
  EXPECT_EQ(m.GrantKeyFor("mcp.fsx.read"), "");  // fs's wildcard is not fsx's
  EXPECT_EQ(m.GrantKeyFor("mcp.fs"), "");
  EXPECT_EQ(m.GrantKeyFor("mcp.fs."), "");
  EXPECT_EQ(m.GrantKeyFor("mcp."), "");
  EXPECT_EQ(m.GrantKeyFor(""), "");

  ASSERT_NE(m.GrantFor("mcp.fs.read_text_file"), nullptr);
  EXPECT_EQ(*m.GrantFor("mcp.fs.read_text_file"), Json::parse(R"({"args": {"path": {"path_under": "/srv/data"}}})"));
  ASSERT_NE(m.GrantFor("mcp.fs.write_file"), nullptr);
  EXPECT_EQ(*m.GrantFor("mcp.fs.write_file"), Json::object());
  EXPECT_EQ(m.GrantFor("mcp.gh.other"), nullptr);
  EXPECT_EQ(m.GrantFor("kv.delete"), nullptr);
}

TEST_F(McpManifestTest, AuthorizeAMemberByItsOwnGrantOrItsServersWildcard) {
  Manifest m = MustParse(R"({"mcp_servers": {"fs": {"command": "/bin/x"}, "gh": {"command": "/bin/y"}},
    "grants": {"mcp.fs.*": {}, "mcp.fs.read_text_file": {"args": {"path": {"path_under": "/srv/data"}}},
               "mcp.gh.search": {"args": {"q": {"max_length": 10}}}, "kv.get": {"namespaces": ["orders"]}}})");
  const HostCallSpec* family = registry_.Find("mcp.fs.read_text_file");
  ASSERT_NE(family, nullptr);
  // The exact grant's predicates hold even though the wildcard admits any arguments.
  EXPECT_EQ(m.Authorize(*family, "mcp.fs.read_text_file", Json{{"path", "/srv/data/a"}}), std::nullopt);
  auto outside = m.Authorize(*family, "mcp.fs.read_text_file", Json{{"path", "/etc/passwd"}});
  ASSERT_TRUE(outside);
  EXPECT_TRUE(Contains(*outside, R"(argument "path" must be a path under)")) << *outside;
  // Any other tool of fs: the wildcard.
  EXPECT_EQ(m.Authorize(*family, "mcp.fs.write_file", Json{{"path", "/etc/passwd"}}), std::nullopt);
  // gh has no wildcard.
  EXPECT_EQ(m.Authorize(*family, "mcp.gh.search", Json{{"q", "bug"}}), std::nullopt);
  EXPECT_TRUE(m.Authorize(*family, "mcp.gh.search", Json{{"q", "a very long query"}}));
  auto other = m.Authorize(*family, "mcp.gh.delete_repo", Json::object());
  ASSERT_TRUE(other);
  // A codemode policy's denial says "policy": the agent that reads it was given a policy, not a manifest.
  EXPECT_EQ(*other, R"("mcp.gh.delete_repo" is not granted by the policy)");
  // A server that is not listed, and the family's own name, are not granted.
  EXPECT_EQ(m.Authorize(*family, "mcp.db.query", Json::object()), R"("mcp.db.query" is not granted by the policy)");
  EXPECT_EQ(m.Authorize(*family, Json::object()), R"("mcp.*" is not granted by the policy)");
  // The two-argument form is the spec's own name, as before.
  const HostCallSpec* kv = registry_.Find("kv.get");
  ASSERT_NE(kv, nullptr);
  EXPECT_EQ(m.Authorize(*kv, Json{{"namespace", "orders"}, {"key", "a"}}), std::nullopt);
  EXPECT_TRUE(m.Authorize(*kv, Json{{"namespace", "users"}, {"key", "a"}}));
}

TEST_F(McpManifestTest, CanonicalFormAndHash) {
  const std::string grants = R"({"grants": {"kv.get": {"namespaces": ["orders"]}}})";
  // Without servers, the canonical text is what it was before servers existed: no mcp_servers key.
  const Manifest plain = MustParse(grants);
  EXPECT_TRUE(plain.mcp_servers().empty());
  const std::string expected =
      R"({"budgets":{"calls_in_flight":32,"cpu_ms":5000,"deadline_ms":60000,"heap_mb":64,"journal_kb":2048,)"
      R"("log_kb":256,"stack_kb":512},"grants":{"kv.get":{"namespaces":["orders"]}}})";
  EXPECT_EQ(plain.Canonical(), expected);
  EXPECT_EQ(plain.hash(), Sha256Hex(expected));
  const Manifest flow = MustParse(grants, Profile::kFlow);
  EXPECT_FALSE(Contains(flow.Canonical(), "mcp_servers"));
  // An empty mcp_servers says nothing more.
  EXPECT_EQ(MustParse(R"({"mcp_servers": {}, "grants": {"kv.get": {"namespaces": ["orders"]}}})").hash(), plain.hash());

  // With servers it differs, and defaults written out or not make the same policy.
  const Manifest one = MustParse(R"({"mcp_servers": {"fs": {"command": "/bin/x"}}, "grants": {"kv.get": {"namespaces": ["orders"]}}})");
  EXPECT_NE(one.hash(), plain.hash());
  EXPECT_EQ(one.hash(), Sha256Hex(one.Canonical()));
  EXPECT_TRUE(Contains(one.Canonical(), R"("mcp_servers":{"fs":{"args":[],"call_timeout_ms":60000,"command":"/bin/x","cwd":"/",)"
                                        R"("env":{},"start_timeout_ms":30000}})"))
      << one.Canonical();
  const Manifest spelled = MustParse(R"({"grants": {"kv.get": {"namespaces": ["orders"]}}, "mcp_servers": {"fs": {
      "start_timeout_ms": 30000, "cwd": "/", "env": {}, "args": [], "call_timeout_ms": 60000, "command": "/bin/x"}}})");
  EXPECT_EQ(spelled.hash(), one.hash());
  // Every field of a server counts.
  for (const char* changed : {R"("command": "/bin/y")", R"("command": "/bin/x", "args": ["a"])",
                              R"("command": "/bin/x", "env": {"A": "1"})", R"("command": "/bin/x", "cwd": "/tmp")",
                              R"("command": "/bin/x", "call_timeout_ms": 1)", R"("command": "/bin/x", "start_timeout_ms": 1)"}) {
    const Manifest other = MustParse(std::string(R"({"mcp_servers": {"fs": {)") + changed +
                                     R"(}}, "grants": {"kv.get": {"namespaces": ["orders"]}}})");
    EXPECT_NE(other.hash(), one.hash()) << changed;
  }
  const Manifest renamed = MustParse(R"({"mcp_servers": {"fs2": {"command": "/bin/x"}}, "grants": {"kv.get": {"namespaces": ["orders"]}}})");
  EXPECT_NE(renamed.hash(), one.hash());
}

// --- Review of a change to the servers --------------------------------------------------------------

class McpReviewTest : public McpManifestTest {
 protected:
  Review Between(const std::string& a, const std::string& b) {
    before_ = std::make_unique<Manifest>(MustParse(a));
    const Manifest after = MustParse(b);
    return ReviewVersions(before_.get(), std::nullopt, a, after, std::nullopt, b, registry_);
  }
  std::unique_ptr<Manifest> before_;
};

constexpr const char* kOneServer =
    R"({"mcp_servers": {"fs": {"command": "/usr/bin/node", "args": ["/opt/fs/index.js", "/srv"],
                               "env": {"TOKEN": "${secret:gh}"}}}})";

TEST_F(McpReviewTest, AFirstPolicyShowsEachServersCommandLine) {
  const Manifest m = MustParse(kOneServer);
  Review r = ReviewVersions(nullptr, std::nullopt, "", m, std::nullopt, kOneServer, registry_);
  ASSERT_EQ(r.mcp_servers.size(), 1u);
  EXPECT_EQ(r.mcp_servers[0].name, "fs");
  EXPECT_EQ(r.mcp_servers[0].kind, McpServerReview::Kind::kAdded);
  EXPECT_TRUE(r.mcp_servers[0].before.is_null());
  EXPECT_EQ(r.mcp_servers[0].after, m.mcp_servers().at("fs"));
  EXPECT_TRUE(r.Widens());
  const std::string text = RenderReview(r, false);
  EXPECT_TRUE(Contains(text, "mcp_servers (programs basal starts for this policy's scripts, as its own user):\n")) << text;
  EXPECT_TRUE(Contains(text, "  + fs: \"/usr/bin/node\" \"/opt/fs/index.js\" \"/srv\" (cwd \"/\", env TOKEN=\"${secret:gh}\", "
                             "call timeout 60000 ms, start timeout 30000 ms)\n"))
      << text;
  const Json json = ReviewJson(r);
  ASSERT_TRUE(json.contains("mcp_servers")) << json.dump();
  EXPECT_EQ(json["mcp_servers"], Json::parse(R"([{"name": "fs", "kind": "added", "before": null, "after": {
      "command": "/usr/bin/node", "args": ["/opt/fs/index.js", "/srv"], "env": {"TOKEN": "${secret:gh}"}, "cwd": "/",
      "call_timeout_ms": 60000, "start_timeout_ms": 30000}}])"));
}

TEST_F(McpReviewTest, AddedRemovedAndChanged) {
  const std::string a = R"({"mcp_servers": {"fs": {"command": "/usr/bin/node", "args": ["/srv"]},
                                            "old": {"command": "/bin/old"}, "same": {"command": "/bin/same"}}})";
  const std::string b = R"({"mcp_servers": {"fs": {"command": "/usr/bin/node", "args": ["/"]},
                                            "new": {"command": "/bin/new"}, "same": {"command": "/bin/same", "cwd": "/"}}})";
  Review r = Between(a, b);
  ASSERT_EQ(r.mcp_servers.size(), 3u) << "an unchanged server (defaults written out) is not listed";
  EXPECT_EQ(r.mcp_servers[0].name, "fs");
  EXPECT_EQ(r.mcp_servers[0].kind, McpServerReview::Kind::kChanged);
  EXPECT_EQ(r.mcp_servers[0].before["args"], Json::array({"/srv"}));
  EXPECT_EQ(r.mcp_servers[0].after["args"], Json::array({"/"}));
  EXPECT_EQ(r.mcp_servers[1].name, "new");
  EXPECT_EQ(r.mcp_servers[1].kind, McpServerReview::Kind::kAdded);
  EXPECT_EQ(r.mcp_servers[2].name, "old");
  EXPECT_EQ(r.mcp_servers[2].kind, McpServerReview::Kind::kRemoved);
  EXPECT_TRUE(r.mcp_servers[2].after.is_null());
  EXPECT_TRUE(r.Widens());
  const std::string text = RenderReview(r, false);
  EXPECT_TRUE(Contains(text, "  ~ fs: changed\n    was: \"/usr/bin/node\" \"/srv\" (cwd \"/\", call timeout 60000 ms, start timeout "
                             "30000 ms)\n    now: \"/usr/bin/node\" \"/\" (cwd \"/\", call timeout 60000 ms, start timeout 30000 ms)\n"))
      << text;
  EXPECT_TRUE(Contains(text, "  + new: \"/bin/new\" (cwd \"/\", call timeout 60000 ms, start timeout 30000 ms)\n")) << text;
  EXPECT_TRUE(Contains(text, "  - old: removed (it ran \"/bin/old\" (cwd \"/\", call timeout 60000 ms, start timeout 30000 ms))\n")) << text;
  EXPECT_FALSE(Contains(text, " same:")) << text;
  // With no grant and no budget changed, the grants section still says "no change", not "differs only in form".
  EXPECT_TRUE(Contains(text, "grants:\n  no change\n")) << text;
  const Json json = ReviewJson(r);
  ASSERT_EQ(json["mcp_servers"].size(), 3u);
  EXPECT_EQ(json["mcp_servers"][0]["kind"], "changed");
  EXPECT_EQ(json["mcp_servers"][1]["kind"], "added");
  EXPECT_EQ(json["mcp_servers"][2]["kind"], "removed");
  EXPECT_EQ(json["widens"], true);
}

TEST_F(McpReviewTest, RemovingAServerAloneDoesNotWiden) {
  Review r = Between(kOneServer, "{}");
  ASSERT_EQ(r.mcp_servers.size(), 1u);
  EXPECT_EQ(r.mcp_servers[0].kind, McpServerReview::Kind::kRemoved);
  EXPECT_FALSE(r.Widens());
  EXPECT_EQ(ReviewJson(r)["widens"], false);
}

TEST_F(McpReviewTest, AnyChangeToAServerWidensEvenATimeoutLowered) {
  // A shorter timeout is a different program run differently; basal does not judge a server's fields.
  Review r = Between(R"({"mcp_servers": {"fs": {"command": "/bin/x", "call_timeout_ms": 5000}}})",
                     R"({"mcp_servers": {"fs": {"command": "/bin/x", "call_timeout_ms": 1000}}})");
  ASSERT_EQ(r.mcp_servers.size(), 1u);
  EXPECT_EQ(r.mcp_servers[0].kind, McpServerReview::Kind::kChanged);
  EXPECT_TRUE(r.Widens());
}

TEST_F(McpReviewTest, NoServersNoSectionAndNoKey) {
  Review r = Between(R"({"grants": {"kv.get": {"namespaces": ["o"]}}})", R"({"grants": {"kv.get": {"namespaces": ["o"]}}})");
  EXPECT_TRUE(r.mcp_servers.empty());
  EXPECT_FALSE(Contains(RenderReview(r, false), "mcp_servers"));
  EXPECT_FALSE(ReviewJson(r).contains("mcp_servers"));
  Review same = Between(kOneServer, kOneServer);
  EXPECT_TRUE(same.mcp_servers.empty());
  EXPECT_FALSE(same.Widens());
}

TEST_F(McpReviewTest, AGrantOfADownstreamToolIsShownAndCannotBeJudged) {
  const std::string a = R"({"mcp_servers": {"fs": {"command": "/bin/x"}},
                            "grants": {"mcp.fs.read": {"args": {"path": {"path_under": "/srv"}}}}})";
  const std::string b = R"({"mcp_servers": {"fs": {"command": "/bin/x"}},
                            "grants": {"mcp.fs.read": {"args": {"path": {"path_under": "/"}}}, "mcp.fs.*": {}}})";
  Review r = Between(a, b);
  ASSERT_EQ(r.grants.size(), 2u);
  EXPECT_EQ(r.grants[0].name, "mcp.fs.*");
  EXPECT_EQ(r.grants[0].kind, GrantReview::Kind::kAdded);
  EXPECT_EQ(r.grants[1].name, "mcp.fs.read");
  EXPECT_EQ(r.grants[1].kind, GrantReview::Kind::kChanged);
  EXPECT_FALSE(r.grants[1].comparable);
  EXPECT_TRUE(r.Widens());
}

// What the operator reads must be what basal runs: a server's text is escaped for the terminal
// once, so one backslash in an argument reads as the JSON string it is ("a\\b"), and a control
// character cannot reach the terminal.
TEST_F(McpReviewTest, TheCommandLineIsEscapedOnce) {
  const std::string text = R"({"mcp_servers": {"fs": {"command": "/bin/x", "args": ["a\\b", "c\u001b[2Jd"]}}})";
  const Manifest m = MustParse(text);
  ASSERT_EQ(m.mcp_servers().at("fs")["args"][0], "a\\b");
  Review r = ReviewVersions(nullptr, std::nullopt, "", m, std::nullopt, text, registry_);
  const std::string shown = RenderReview(r, false);
  EXPECT_EQ(shown.find('\x1b'), std::string::npos) << shown;
  EXPECT_TRUE(Contains(shown, R"("/bin/x" "a\\b" )")) << shown;
  EXPECT_FALSE(Contains(shown, R"(a\\\\b)")) << "one backslash shown as four: " << shown;
}

}  // namespace
}  // namespace basal
