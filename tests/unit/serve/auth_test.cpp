// Admission (src/serve/auth.h): the Unix socket's peer check, TCP tokens and their scopes, the
// routes that need no credential, and the Origin check of /mcp. Each refusal with the allowed
// request beside it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "serve/auth.h"
#include "serve/signature.h"

namespace basal::serve {
namespace {

class AdmissionTest : public ::testing::Test {
 protected:
  AdmissionTest()
      : token_(NewApiToken()),
        admission_({4242}, [this](std::string_view hash) -> Result<std::optional<TokenRow>> {
          ++lookups_;
          if (hash != ApiTokenHash(token_)) return std::optional<TokenRow>();
          TokenRow row;
          row.name = "ci";
          row.scopes_json = scopes_;
          return std::optional<TokenRow>(row);
        }) {}

  static HttpRequest Tcp(std::string method, std::string path, std::string authorization = "") {
    HttpRequest r;
    r.method = std::move(method);
    r.path = std::move(path);
    if (!authorization.empty()) r.headers.emplace_back("authorization", std::move(authorization));
    return r;
  }
  static HttpRequest Unix(uint32_t uid, uint32_t gid, std::vector<uint32_t> groups = {}) {
    HttpRequest r;
    r.method = "GET";
    r.path = "/v1/flows";
    r.unix_socket = true;
    r.peer.known = true;
    r.peer.uid = uid;
    r.peer.gid = gid;
    r.peer.groups = std::move(groups);
    return r;
  }
  static int Status(const std::optional<HttpResponse>& r) { return r ? r->status : 0; }

  std::string token_;
  std::string scopes_ = R"(["read"])";
  int lookups_ = 0;
  Admission admission_;
};

TEST_F(AdmissionTest, TheSocketAdmitsItsOwnUserRootAndAllowedGroupsOnly) {
  const RouteAccess read{.scope = "read"};
  EXPECT_EQ(Status(admission_.Admit(Unix(geteuid(), 1), &read)), 0);
  EXPECT_EQ(Status(admission_.Admit(Unix(0, 0), &read)), 0);
  EXPECT_EQ(Status(admission_.Admit(Unix(65534, 4242), &read)), 0);          // primary group
  EXPECT_EQ(Status(admission_.Admit(Unix(65534, 7, {9, 4242}), &read)), 0);  // supplementary
  const uid_t stranger = geteuid() == 65534 ? 65533 : 65534;
  auto refused = admission_.Admit(Unix(stranger, 7, {9}), &read);
  ASSERT_EQ(Status(refused), 403);
  EXPECT_NE(refused->body.find("may not use this socket"), std::string::npos) << refused->body;
  HttpRequest unknown = Unix(0, 0);
  unknown.peer.known = false;
  EXPECT_EQ(Status(admission_.Admit(unknown, &read)), 403);
  // No token is asked for on the socket, whatever the route.
  EXPECT_EQ(Status(admission_.Admit(Unix(geteuid(), 1), nullptr)), 0);
  EXPECT_EQ(lookups_, 0);
}

TEST_F(AdmissionTest, TcpNeedsAKnownTokenWithTheScope) {
  const RouteAccess read{.scope = "read"}, metrics{.scope = "metrics"};
  auto none = admission_.Admit(Tcp("GET", "/v1/flows"), &read);
  ASSERT_EQ(Status(none), 401);
  ASSERT_FALSE(none->headers.empty());
  // The challenge names the scope the request needs (a client without a token shows it).
  EXPECT_EQ(none->headers[0],
            (std::pair<std::string, std::string>{"WWW-Authenticate", R"(Bearer realm="basal", scope="read")"}));
  EXPECT_NE(none->body.find("a token of scope read (basal token create"), std::string::npos) << none->body;
  const RouteAccess mcp_route{.scope = "run"};
  auto mcp = admission_.Admit(Tcp("POST", "/mcp"), &mcp_route);
  ASSERT_EQ(Status(mcp), 401);
  EXPECT_EQ(mcp->headers[0],
            (std::pair<std::string, std::string>{"WWW-Authenticate", R"(Bearer realm="basal", scope="run")"}));
  EXPECT_NE(mcp->body.find("basal has no OAuth authorization server"), std::string::npos) << mcp->body;
  EXPECT_EQ(Status(admission_.Admit(Tcp("GET", "/v1/flows", "Bearer not-a-token"), &read)), 401);
  EXPECT_EQ(lookups_, 0) << "a malformed token is refused before any lookup";
  EXPECT_EQ(Status(admission_.Admit(Tcp("GET", "/v1/flows", "Bearer " + NewApiToken()), &read)), 401);
  EXPECT_EQ(Status(admission_.Admit(Tcp("GET", "/v1/flows", "Bearer " + token_), &read)), 0);
  auto lacks = admission_.Admit(Tcp("GET", "/metrics", "Bearer " + token_), &metrics);
  ASSERT_EQ(Status(lacks), 403);
  EXPECT_NE(lacks->body.find("lacks the scope \\\"metrics\\\""), std::string::npos) << lacks->body;
  // A POST needs "run", whatever the route's own scope; "all" grants everything.
  EXPECT_EQ(Status(admission_.Admit(Tcp("POST", "/v1/flows", "Bearer " + token_), &read)), 403);
  scopes_ = R"(["all"])";
  EXPECT_EQ(Status(admission_.Admit(Tcp("POST", "/v1/flows", "Bearer " + token_), &read)), 0);
  EXPECT_EQ(Status(admission_.Admit(Tcp("GET", "/metrics", "Bearer " + token_), &metrics)), 0);
  // A path no route has still needs a credential: nobody learns which paths exist without one.
  EXPECT_EQ(Status(admission_.Admit(Tcp("GET", "/secret-path"), nullptr)), 401);
}

// What a stream checks again at every keepalive (Check) is what the request would be answered
// (Admit): the same status, code, message and challenge; the message is what the stream's last
// event says.
TEST_F(AdmissionTest, CheckIsTheRefusalAdmitAnswers) {
  const RouteAccess read{.scope = "read"}, metrics{.scope = "metrics"};
  const HttpRequest cases[] = {Tcp("GET", "/v1/flows"), Tcp("GET", "/v1/flows", "Bearer " + NewApiToken()),
                               Tcp("GET", "/metrics", "Bearer " + token_), Unix(geteuid() == 65534 ? 65533 : 65534, 7)};
  const RouteAccess* routes[] = {&read, &read, &metrics, &read};
  for (size_t i = 0; i < std::size(cases); ++i) {
    auto refusal = admission_.Check(cases[i], routes[i]);
    auto answer = admission_.Admit(cases[i], routes[i]);
    ASSERT_TRUE(refusal.has_value()) << i;
    ASSERT_TRUE(answer.has_value()) << i;
    EXPECT_EQ(answer->status, refusal->status) << i;
    const auto body = nlohmann::json::parse(answer->body);
    EXPECT_EQ(body["error"]["code"], refusal->code) << i;
    EXPECT_EQ(body["error"]["message"], refusal->message) << i;
    EXPECT_FALSE(refusal->message.empty()) << i;
    std::string challenge;
    for (const auto& [name, value] : answer->headers)
      if (name == "WWW-Authenticate") challenge = value;
    EXPECT_EQ(challenge, refusal->www_authenticate) << i;
  }
  auto unknown = admission_.Check(Tcp("GET", "/v1/flows", "Bearer " + NewApiToken()), &read);
  ASSERT_TRUE(unknown.has_value());
  EXPECT_EQ(unknown->message, "the bearer token is not known or was revoked");
  EXPECT_EQ(unknown->www_authenticate, "Bearer error=\"invalid_token\"");
  EXPECT_FALSE(admission_.Check(Tcp("GET", "/v1/flows", "Bearer " + token_), &read).has_value());
}

TEST_F(AdmissionTest, OpenRoutesNeedNoCredential) {
  const RouteAccess open{.scope = ""};
  EXPECT_EQ(Status(admission_.Admit(Tcp("GET", "/healthz"), &open)), 0);
  EXPECT_EQ(Status(admission_.Admit(Tcp("POST", "/hooks/github"), &open)), 0);
  EXPECT_EQ(lookups_, 0);
}

TEST_F(AdmissionTest, ARouteForLocalPagesRefusesOtherOrigins) {
  const RouteAccess mcp{.scope = "run", .local_origin_only = true};
  HttpRequest r = Tcp("POST", "/mcp", "Bearer " + token_);
  scopes_ = R"(["run"])";
  EXPECT_EQ(Status(admission_.Admit(r, &mcp)), 0);  // no Origin: not a browser
  r.headers.emplace_back("origin", "http://evil.example");
  auto refused = admission_.Admit(r, &mcp);
  ASSERT_EQ(Status(refused), 403);
  EXPECT_NE(refused->body.find("forbidden_origin"), std::string::npos);
  r.headers.back().second = "http://localhost:5173";
  EXPECT_EQ(Status(admission_.Admit(r, &mcp)), 0);
  // Refused on the socket too, before the peer check: a browser reaches a socket through a proxy.
  HttpRequest u = Unix(geteuid(), 1);
  u.headers.emplace_back("origin", "https://attacker.example");
  EXPECT_EQ(Status(admission_.Admit(u, &mcp)), 403);
}

TEST(OriginTest, OnlyPagesOfThisMachine) {
  for (const char* ok : {"http://localhost", "https://localhost:8443", "http://127.0.0.1:80", "http://[::1]:3000",
                         "HTTP://LOCALHOST"})
    EXPECT_TRUE(IsLocalOrigin(ok)) << ok;
  for (const char* bad : {"null", "", "http://evil.example", "https://localhost.evil.example", "http://127.0.0.1.evil.example",
                          "http://localhost/x", "ftp://localhost", "http://localhost:", "http://localhost:1234567",
                          "http://[::1", "http://localhost:80a"})
    EXPECT_FALSE(IsLocalOrigin(bad)) << bad;
}

TEST(ScopeTest, ScopesAreAJsonArrayOfNames) {
  EXPECT_TRUE(ScopeAllows(nlohmann::json::parse(R"(["read","run"])"), "run"));
  EXPECT_TRUE(ScopeAllows(nlohmann::json::parse(R"(["all"])"), "metrics"));
  EXPECT_FALSE(ScopeAllows(nlohmann::json::parse(R"(["read"])"), "run"));
  EXPECT_FALSE(ScopeAllows(nlohmann::json::parse(R"("run")"), "run"));
  EXPECT_FALSE(ScopeAllows(nlohmann::json::parse(R"([1, null])"), "run"));
}

}  // namespace
}  // namespace basal::serve
