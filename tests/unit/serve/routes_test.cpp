// The API's route table (src/serve/routes.h): patterns, matching and parameters, and the 404 and
// 405 (with Allow) that only the table decides.
#include <gtest/gtest.h>

#include <string>

#include "serve/routes.h"

namespace basal::serve {
namespace {

RouteTable<std::string> Api() {
  RouteTable<std::string> t;
  EXPECT_TRUE(t.Add({"GET", "HEAD"}, "/healthz", "healthz"));
  EXPECT_TRUE(t.Add({"POST"}, "/hooks/{trigger}", "hook"));
  EXPECT_TRUE(t.Add({"GET"}, "/v1/flows", "flows"));
  EXPECT_TRUE(t.Add({"GET"}, "/v1/flows/{name}", "flow"));
  EXPECT_TRUE(t.Add({"POST"}, "/v1/flows/{name}/runs", "start"));
  EXPECT_TRUE(t.Add({"GET"}, "/v1/runs/{id}", "run"));
  EXPECT_TRUE(t.Add({"GET"}, "/v1/runs/{id}/calls", "calls"));
  EXPECT_TRUE(t.Add({"DELETE"}, "/v1/runs/{id}", "cancel"));
  return t;
}

TEST(RouteTableTest, MatchesLiteralsAndTakesParameters) {
  const auto t = Api();
  auto m = t.Find("GET", "/v1/runs/42/calls");
  ASSERT_EQ(m.kind, RouteMatch::kFound);
  EXPECT_EQ(*m.value, "calls");
  EXPECT_EQ(m.params.Get("id"), "42");
  EXPECT_EQ(m.params.Get("nope"), "");
  m = t.Find("POST", "/v1/flows/hello/runs");
  ASSERT_EQ(m.kind, RouteMatch::kFound);
  EXPECT_EQ(*m.value, "start");
  EXPECT_EQ(m.params.Get("name"), "hello");
  m = t.Find("HEAD", "/healthz");
  ASSERT_EQ(m.kind, RouteMatch::kFound);
  EXPECT_EQ(*m.value, "healthz");
  // A parameter takes any one segment, as it was decoded; checking it is the handler's business.
  m = t.Find("GET", "/v1/runs/first");
  ASSERT_EQ(m.kind, RouteMatch::kFound);
  EXPECT_EQ(m.params.Get("id"), "first");
  // Two rows of one pattern with different methods.
  m = t.Find("DELETE", "/v1/runs/7");
  ASSERT_EQ(m.kind, RouteMatch::kFound);
  EXPECT_EQ(*m.value, "cancel");
}

TEST(RouteTableTest, EmptySegmentsDoNotCount) {
  const auto t = Api();
  for (const char* path : {"/v1/flows", "//v1///flows", "/v1/flows/", "v1/flows"}) {
    auto m = t.Find("GET", path);
    ASSERT_EQ(m.kind, RouteMatch::kFound) << path;
    EXPECT_EQ(*m.value, "flows") << path;
  }
}

TEST(RouteTableTest, APathNoPatternMatchesIsNotFound) {
  const auto t = Api();
  for (const char* path : {"/", "", "/v2/anything", "/v1", "/v1/runs", "/v1/runs/1/nothing", "/v1/runs/1/calls/2",
                           "/hooks", "/hooks/a/b", "/healthz/x", "/HEALTHZ"}) {
    auto m = t.Find("GET", path);
    EXPECT_EQ(m.kind, RouteMatch::kNotFound) << path;
    EXPECT_EQ(m.value, nullptr) << path;
    EXPECT_EQ(m.path_value, nullptr) << path;
    EXPECT_TRUE(m.allow.empty()) << path;
  }
}

TEST(RouteTableTest, AMethodThePathDoesNotTakeIsNotAllowedWithEveryMethodItTakes) {
  const auto t = Api();
  auto m = t.Find("DELETE", "/v1/flows");
  ASSERT_EQ(m.kind, RouteMatch::kMethodNotAllowed);
  EXPECT_EQ(m.value, nullptr);
  ASSERT_NE(m.path_value, nullptr);
  EXPECT_EQ(*m.path_value, "flows");
  EXPECT_EQ(AllowHeader(m.allow), "GET");
  m = t.Find("POST", "/healthz");
  ASSERT_EQ(m.kind, RouteMatch::kMethodNotAllowed);
  EXPECT_EQ(AllowHeader(m.allow), "GET, HEAD");
  // Both rows of /v1/runs/{id} count, and the path's parameters are known for admission.
  m = t.Find("POST", "/v1/runs/9");
  ASSERT_EQ(m.kind, RouteMatch::kMethodNotAllowed);
  EXPECT_EQ(AllowHeader(m.allow), "GET, DELETE");
  EXPECT_EQ(m.params.Get("id"), "9");
  // The method is compared as sent: methods are case-sensitive (RFC 9110).
  m = t.Find("get", "/v1/flows");
  EXPECT_EQ(m.kind, RouteMatch::kMethodNotAllowed);
  m = t.Find("GET", "/hooks/github");
  ASSERT_EQ(m.kind, RouteMatch::kMethodNotAllowed);
  EXPECT_EQ(*m.path_value, "hook");
  EXPECT_EQ(m.params.Get("trigger"), "github");
}

TEST(RouteTableTest, BadOrRepeatedRowsAreRefused) {
  RouteTable<int> t;
  EXPECT_TRUE(t.Add({"GET"}, "/v1/runs/{id}", 1));
  EXPECT_FALSE(t.Add({"GET"}, "/v1/runs/{id}", 2));         // the same method on the same pattern
  EXPECT_FALSE(t.Add({"HEAD", "GET"}, "/v1/runs/{id}", 2));  // one of them repeated
  EXPECT_TRUE(t.Add({"POST"}, "/v1/runs/{id}", 3));
  for (const char* bad : {"", "v1/runs", "/v1//runs", "/v1/runs/", "/v1/{}", "/v1/{id", "/v1/id}", "/v1/a{id}",
                          "/v1/{a}/{a}", "/v1/{a{b}}"}) {
    EXPECT_FALSE(t.Add({"GET"}, bad, 9)) << bad;
  }
  EXPECT_FALSE(t.Add({}, "/v1/x", 9));  // no method
  EXPECT_EQ(t.size(), 2u);
  EXPECT_TRUE(t.Add({"GET"}, "/", 4));
  auto m = t.Find("GET", "/");
  ASSERT_EQ(m.kind, RouteMatch::kFound);
  EXPECT_EQ(*m.value, 4);
}

TEST(RouteTableTest, TheFirstMatchingRowWins) {
  RouteTable<std::string> t;
  ASSERT_TRUE(t.Add({"GET"}, "/v1/flows/{name}", "any"));
  ASSERT_TRUE(t.Add({"GET"}, "/v1/flows/special", "special"));
  auto m = t.Find("GET", "/v1/flows/special");
  ASSERT_EQ(m.kind, RouteMatch::kFound);
  EXPECT_EQ(*m.value, "any");
}

TEST(RouteTableTest, AllowHeaderNamesEachMethodOnceInOrder) {
  EXPECT_EQ(AllowHeader({}), "");
  EXPECT_EQ(AllowHeader({"POST"}), "POST");
  EXPECT_EQ(AllowHeader({"GET", "HEAD", "GET"}), "GET, HEAD");
}

TEST(RouteTableTest, PathSegments) {
  EXPECT_EQ(PathSegments("/v1/flows/hello/runs"), (std::vector<std::string_view>{"v1", "flows", "hello", "runs"}));
  EXPECT_TRUE(PathSegments("").empty());
  EXPECT_TRUE(PathSegments("///").empty());
}

}  // namespace
}  // namespace basal::serve
