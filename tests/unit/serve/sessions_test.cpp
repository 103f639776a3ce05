// The web console's sessions (src/serve/sessions.h) and admission through them (auth.h): a session
// stands for its token and no more, ends when unused or old, is bounded in number and in streams,
// and every request of it needs its CSRF token. Each refusal beside the allowed request.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "serve/auth.h"
#include "serve/sessions.h"
#include "serve/signature.h"

namespace basal::serve {
namespace {

using std::chrono::minutes;

// A counter as the random source: distinct, so ids never collide by accident; unpredictability
// is the daemon's getrandom's, not this test's.
std::string CountingRandom(size_t n) {
  static uint64_t counter = 0;
  std::string out(n, '\0');
  const uint64_t v = ++counter;
  for (size_t i = 0; i < n && i < 8; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return out;
}

class SessionsTest : public ::testing::Test {
 protected:
  int64_t now_us_ = 1'000'000'000'000;
  ConsoleSessions sessions_{CountingRandom, [this] { return now_us_; }};
  SessionLimits limits_{.max_sessions = 3, .idle = minutes(10), .max_age = minutes(60), .max_streams = 2};
  void Advance(std::chrono::microseconds d) { now_us_ += d.count(); }
};

TEST_F(SessionsTest, ASessionStandsForItsTokenWithAnIdAndACsrfTokenOfItsOwn) {
  const ConsoleSession& a = sessions_.Open("sha256:aa", "ci", limits_);
  const std::string a_id = a.id, a_csrf = a.csrf_token;
  const ConsoleSession& b = sessions_.Open("sha256:aa", "ci", limits_);
  EXPECT_EQ(a_id.size(), 43u) << "32 bytes, base64url";
  EXPECT_NE(a_id, b.id);
  EXPECT_NE(a_csrf, b.csrf_token);
  EXPECT_NE(a_id, a_csrf);
  const ConsoleSession* found = sessions_.Find(a_id, limits_);
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(found->token_hash, "sha256:aa");
  EXPECT_EQ(found->token_name, "ci");
  EXPECT_EQ(sessions_.Find("not-" + a_id, limits_), nullptr);
  EXPECT_EQ(sessions_.Find("", limits_), nullptr);
  EXPECT_TRUE(sessions_.End(a_id));
  EXPECT_EQ(sessions_.Find(a_id, limits_), nullptr);
  EXPECT_FALSE(sessions_.End(a_id));
}

TEST_F(SessionsTest, ASessionEndsWhenUnusedForIdleAndAtMaxAgeWhateverItsUse) {
  const std::string id = sessions_.Open("sha256:aa", "ci", limits_).id;
  Advance(minutes(9));
  ASSERT_NE(sessions_.Find(id, limits_), nullptr) << "used within idle: it lives, and its idle time starts again";
  Advance(minutes(9));
  ASSERT_NE(sessions_.Find(id, limits_), nullptr);
  Advance(minutes(10));
  EXPECT_EQ(sessions_.Find(id, limits_), nullptr) << "10 minutes unused";
  EXPECT_EQ(sessions_.size(), 0u) << "an expired session is dropped when found";

  const std::string busy = sessions_.Open("sha256:aa", "ci", limits_).id;
  for (int i = 0; i < 11; ++i) {
    Advance(minutes(5));
    ASSERT_NE(sessions_.Find(busy, limits_), nullptr) << "at " << (i + 1) * 5 << " minutes";
  }
  Advance(minutes(5));
  EXPECT_EQ(sessions_.Find(busy, limits_), nullptr) << "60 minutes after sign-in, however busy";
}

TEST_F(SessionsTest, PastMaxSessionsTheLeastRecentlyUsedEnds) {
  const std::string a = sessions_.Open("sha256:aa", "a", limits_).id;
  Advance(minutes(1));
  const std::string b = sessions_.Open("sha256:bb", "b", limits_).id;
  Advance(minutes(1));
  const std::string c = sessions_.Open("sha256:cc", "c", limits_).id;
  Advance(minutes(1));
  ASSERT_NE(sessions_.Find(a, limits_), nullptr);  // a is now the most recently used
  const std::string d = sessions_.Open("sha256:dd", "d", limits_).id;
  EXPECT_EQ(sessions_.size(), 3u);
  EXPECT_EQ(sessions_.Find(b, limits_), nullptr) << "b was used longest ago";
  EXPECT_NE(sessions_.Find(a, limits_), nullptr);
  EXPECT_NE(sessions_.Find(c, limits_), nullptr);
  EXPECT_NE(sessions_.Find(d, limits_), nullptr);
  // Expired sessions make room before any live one is ended.
  Advance(minutes(10));
  const std::string e = sessions_.Open("sha256:ee", "e", limits_).id;
  EXPECT_EQ(sessions_.size(), 1u);
  EXPECT_NE(sessions_.Find(e, limits_), nullptr);
}

TEST_F(SessionsTest, ASessionHoldsAtMostMaxStreams) {
  const std::string id = sessions_.Open("sha256:aa", "ci", limits_).id;
  EXPECT_TRUE(sessions_.OpenStream(id, limits_));
  EXPECT_TRUE(sessions_.OpenStream(id, limits_));
  EXPECT_FALSE(sessions_.OpenStream(id, limits_)) << "a third stream past max_streams 2";
  sessions_.CloseStream(id);
  EXPECT_TRUE(sessions_.OpenStream(id, limits_)) << "one ended: room for one more";
  EXPECT_FALSE(sessions_.OpenStream("unknown", limits_));
  sessions_.CloseStream("unknown");  // harmless
  // Another session has streams of its own.
  const std::string other = sessions_.Open("sha256:aa", "ci", limits_).id;
  EXPECT_TRUE(sessions_.OpenStream(other, limits_));
}

TEST_F(SessionsTest, EveryEndIsToldSignOutExpiryRoomAndSweep) {
  std::vector<std::string> ended;
  sessions_.set_on_end([&](const std::string& id) { ended.push_back(id); });
  const std::string out = sessions_.Open("sha256:aa", "a", limits_).id;
  EXPECT_TRUE(sessions_.End(out));
  EXPECT_EQ(ended, std::vector<std::string>{out});

  const std::string a = sessions_.Open("sha256:aa", "a", limits_).id;
  Advance(minutes(1));
  const std::string b = sessions_.Open("sha256:bb", "b", limits_).id;
  Advance(minutes(1));
  const std::string c = sessions_.Open("sha256:cc", "c", limits_).id;
  Advance(minutes(1));
  sessions_.Open("sha256:dd", "d", limits_);  // past max_sessions 3: a, used longest ago, ends
  EXPECT_EQ(ended.back(), a);
  Advance(minutes(9));
  EXPECT_EQ(sessions_.Find(b, limits_), nullptr);  // idle for 10 minutes: found expired
  EXPECT_EQ(ended.back(), b);
  Advance(minutes(1));
  const size_t before = ended.size();
  sessions_.Sweep(limits_);  // c and d, unused since, are found by the sweep
  EXPECT_EQ(ended.size(), before + 2);
  EXPECT_EQ(sessions_.size(), 0u);
  EXPECT_NE(std::find(ended.begin(), ended.end(), c), ended.end());
}

TEST(CookieTest, TheSessionCookieIsHttpOnlyStrictAndSecureWhenAsked) {
  EXPECT_EQ(SessionCookie("abc", minutes(60), false), "basal_session=abc; Path=/; Max-Age=3600; HttpOnly; SameSite=Strict");
  EXPECT_EQ(SessionCookie("abc", minutes(60), true),
            "basal_session=abc; Path=/; Max-Age=3600; HttpOnly; SameSite=Strict; Secure");
  EXPECT_EQ(SessionCookie("", minutes(60), false), "basal_session=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict");
}

TEST(CookieTest, CookieValuesAreFoundAmongOthers) {
  EXPECT_EQ(CookieValue("basal_session=xyz", "basal_session"), "xyz");
  EXPECT_EQ(CookieValue("a=1; basal_session=xyz; b=2", "basal_session"), "xyz");
  EXPECT_EQ(CookieValue("a=1;basal_session=\"xyz\"", "basal_session"), "xyz");
  EXPECT_EQ(CookieValue("x_basal_session=no; basal_session=yes", "basal_session"), "yes");
  EXPECT_EQ(CookieValue("basal_session=first; basal_session=second", "basal_session"), "first");
  EXPECT_EQ(CookieValue("basal_session", "basal_session"), std::nullopt);
  EXPECT_EQ(CookieValue("a=1; b=2", "basal_session"), std::nullopt);
  EXPECT_EQ(CookieValue("", "basal_session"), std::nullopt);
}

TEST(EncodingTest, Base64UrlAndConstantTimeEquals) {
  EXPECT_EQ(Base64Url(""), "");
  EXPECT_EQ(Base64Url("f"), "Zg");
  EXPECT_EQ(Base64Url("fo"), "Zm8");
  EXPECT_EQ(Base64Url("foo"), "Zm9v");
  EXPECT_EQ(Base64Url("\xfb\xff\xbf"), "-_-_");
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "ab"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
}

// Admission of TCP requests that carry a session's cookie instead of a bearer token.
class SessionAdmissionTest : public ::testing::Test {
 protected:
  SessionAdmissionTest()
      : token_(NewApiToken()),
        admission_(
            {},
            [this](std::string_view hash) -> Result<std::optional<TokenRow>> {
              if (revoked_ || hash != ApiTokenHash(token_)) return std::optional<TokenRow>();
              TokenRow row;
              row.name = "console";
              row.scopes_json = scopes_;
              return std::optional<TokenRow>(row);
            },
            [this](std::string_view id) -> std::optional<SessionCredential> {
              const ConsoleSession* s = sessions_.Find(id, limits_);
              if (!s) return std::nullopt;
              return SessionCredential{s->token_hash, s->csrf_token};
            }) {
    const ConsoleSession& s = sessions_.Open(ApiTokenHash(token_), "console", limits_);
    id_ = s.id;
    csrf_ = s.csrf_token;
  }

  HttpRequest Request(std::string method, std::string cookie_id, std::string csrf = "") {
    HttpRequest r;
    r.method = std::move(method);
    r.path = "/v1/runs/1/resolve";
    r.headers.emplace_back("cookie", "theme=dark; basal_session=" + cookie_id);
    if (!csrf.empty()) r.headers.emplace_back("x-csrf-token", std::move(csrf));
    return r;
  }
  static int Status(const std::optional<HttpResponse>& r) { return r ? r->status : 0; }
  static std::string Code(const std::optional<HttpResponse>& r) {
    return r ? nlohmann::json::parse(r->body)["error"]["code"].get<std::string>() : "";
  }

  int64_t now_us_ = 1'000'000'000'000;
  SessionLimits limits_;
  ConsoleSessions sessions_{CountingRandom, [this] { return now_us_; }};
  std::string token_;
  std::string scopes_ = R"(["read","run"])";
  bool revoked_ = false;
  Admission admission_;
  std::string id_, csrf_;
  const RouteAccess read_{.scope = "read"};
};

TEST_F(SessionAdmissionTest, ACookieWithItsCsrfTokenAdmitsReadsAndChanges) {
  EXPECT_EQ(Status(admission_.Admit(Request("GET", id_, csrf_), &read_)), 0);
  EXPECT_EQ(Status(admission_.Admit(Request("HEAD", id_, csrf_), &read_)), 0);
  EXPECT_EQ(Status(admission_.Admit(Request("POST", id_, csrf_), &read_)), 0);
  EXPECT_EQ(admission_.Who(Request("POST", id_, csrf_)).name, "token:console");
}

TEST_F(SessionAdmissionTest, TheCookieAloneAdmitsNothing) {
  // What a form of another page would send (the browser adds the cookie), and what a server on
  // another port of this host is sent (cookies do not keep to a port): the cookie, no CSRF token.
  for (const char* method : {"POST", "GET", "HEAD", "DELETE"}) {
    auto none = admission_.Admit(Request(method, id_), &read_);
    EXPECT_EQ(Status(none), 403) << method;
    EXPECT_EQ(Code(none), "bad_csrf_token") << method;
  }
  EXPECT_EQ(Code(admission_.Admit(Request("POST", id_, csrf_ + "x"), &read_)), "bad_csrf_token");
  EXPECT_EQ(Code(admission_.Admit(Request("GET", id_, "guess"), &read_)), "bad_csrf_token");
  // Another session's CSRF token is not this one's.
  const std::string other_csrf = sessions_.Open(ApiTokenHash(token_), "console", limits_).csrf_token;
  EXPECT_EQ(Code(admission_.Admit(Request("POST", id_, other_csrf), &read_)), "bad_csrf_token");
}

TEST_F(SessionAdmissionTest, ASessionGivesItsTokensScopesAndNoMore) {
  scopes_ = R"(["read"])";
  EXPECT_EQ(Status(admission_.Admit(Request("GET", id_, csrf_), &read_)), 0);
  auto post = admission_.Admit(Request("POST", id_, csrf_), &read_);
  EXPECT_EQ(Status(post), 403);
  EXPECT_EQ(Code(post), "forbidden");
  const RouteAccess metrics{.scope = "metrics"};
  EXPECT_EQ(Status(admission_.Admit(Request("GET", id_, csrf_), &metrics)), 403);
  // Revoking the token ends what its sessions may do, at the next request.
  scopes_ = R"(["all"])";
  EXPECT_EQ(Status(admission_.Admit(Request("GET", id_, csrf_), &metrics)), 0);
  revoked_ = true;
  EXPECT_EQ(Status(admission_.Admit(Request("GET", id_, csrf_), &read_)), 401);
}

TEST_F(SessionAdmissionTest, AnUnknownOrExpiredSessionIsUnauthorized) {
  EXPECT_EQ(Status(admission_.Admit(Request("GET", "forged-session-id", csrf_), &read_)), 401);
  now_us_ += std::chrono::duration_cast<std::chrono::microseconds>(limits_.idle).count();
  EXPECT_EQ(Status(admission_.Admit(Request("GET", id_, csrf_), &read_)), 401);
}

TEST_F(SessionAdmissionTest, ABearerTokenIsUsedOverACookieAndOpenRoutesNeedNeither) {
  // With Authorization, the bearer token decides: a bad one is refused whatever the cookie.
  HttpRequest r = Request("GET", id_, csrf_);
  r.headers.emplace_back("authorization", "Bearer " + NewApiToken());
  EXPECT_EQ(Status(admission_.Admit(r, &read_)), 401);
  // A cookie on a route that needs no credential changes nothing.
  const RouteAccess open{.scope = ""};
  EXPECT_EQ(Status(admission_.Admit(Request("POST", "forged"), &open)), 0);
}

TEST(AdmissionWithoutConsoleTest, ACookieIsNoCredentialWhenTheConsoleIsOff) {
  Admission admission({}, [](std::string_view) -> Result<std::optional<TokenRow>> { return std::optional<TokenRow>(); });
  HttpRequest r;
  r.method = "GET";
  r.path = "/v1/flows";
  r.headers.emplace_back("cookie", "basal_session=anything");
  const RouteAccess read{.scope = "read"};
  auto refused = admission.Admit(r, &read);
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->status, 401);
  EXPECT_NE(refused->body.find("Authorization: Bearer"), std::string::npos);
}

}  // namespace
}  // namespace basal::serve
