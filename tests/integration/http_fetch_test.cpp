// http.fetch end to end (issue 13): real flows, real workers, a loopback HTTP server the test
// starts, and the parent's libcurl client on its loop. Each attack is shown stopped AND the allowed
// path working: the SSRF guard refuses every spelling of a loopback or metadata address unless a
// rule's allow_networks names it; secrets reach the server but never the worker or the journal.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "integration/test_support.h"
#include "protocol/messages.h"
#include "parent/secrets/secret_store.h"
#include "support/http_test_server.h"

namespace basal::testing {
namespace {

using Json = nlohmann::json;

// input: {url, method?, headers?, body_text?, redirect?} -> the wire result, or {error: {name, message}}.
constexpr const char* kFetchFlow = R"js(
export default async function (input, host) {
  const args = {url: input.url, method: input.method ?? "GET", headers: input.headers ?? [],
                body: input.body_text === undefined ? null : {base64: input.body_b64},
                redirect: input.redirect ?? "follow"};
  try {
    const r = await host.call("http.fetch", args);
    return r;
  } catch (e) {
    return {error: {name: e.name, message: e.message}};
  }
}
)js";

// input: {urls: [...]}: fetches them all at once; returns [status or error name, ...].
constexpr const char* kManyFlow = R"js(
export default async function (input, host) {
  const all = input.urls.map(url => host.call("http.fetch", {url, method: "GET", headers: [], body: null, redirect: "follow"})
      .then(r => r.status, e => e.name + ": " + e.message));
  return await Promise.all(all);
}
)js";

std::string B64(const std::string& s) {
  static const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < s.size(); i += 3) {
    const unsigned v = (static_cast<unsigned char>(s[i]) << 16) | (static_cast<unsigned char>(s[i + 1]) << 8) |
                       static_cast<unsigned char>(s[i + 2]);
    out += {a[v >> 18], a[(v >> 12) & 63], a[(v >> 6) & 63], a[v & 63]};
  }
  if (s.size() - i == 1) {
    const unsigned v = static_cast<unsigned char>(s[i]) << 16;
    out += {a[v >> 18], a[(v >> 12) & 63], '=', '='};
  } else if (s.size() - i == 2) {
    const unsigned v = (static_cast<unsigned char>(s[i]) << 16) | (static_cast<unsigned char>(s[i + 1]) << 8);
    out += {a[v >> 18], a[(v >> 12) & 63], a[(v >> 6) & 63], '='};
  }
  return out;
}

std::string UnB64(const std::string& s) {
  std::string out;
  unsigned buffer = 0;
  int bits = 0;
  for (char c : s) {
    const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const char* p = std::strchr(a, c);
    if (c == '=' || !p) break;
    buffer = (buffer << 6) | static_cast<unsigned>(p - a);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((buffer >> bits) & 0xFF);
    }
  }
  return out;
}

class HttpFetchTest : public ModuleFixture {
 protected:
  void SetUp() override {
    ModuleFixture::SetUp();
    ASSERT_TRUE(server_.Start(/*ipv6=*/false));
    server_.Handle("/hello", [](const TestRequest&) {
      TestResponse r;
      r.status = 200;
      r.headers = {{"Content-Type", "text/plain"}, {"X-Served-By", "test"}};
      r.body = "hello from the test server";
      return r;
    });
    server_.Handle("/echo-headers", [](const TestRequest& q) {
      TestResponse r;
      r.status = 200;
      std::string text;
      for (const auto& [name, value] : q.headers) text += name + ": " + value + "\n";
      r.body = text;
      r.headers = {{"X-Echo-Auth", [&] {
                      for (const auto& [name, value] : q.headers)
                        if (name == "Authorization" || name == "authorization") return value;
                      return std::string();
                    }()}};
      return r;
    });
    server_.Handle("/echo-body", [](const TestRequest& q) {
      TestResponse r;
      r.status = 201;
      r.body = q.method + " " + q.body;
      return r;
    });
    server_.Handle("/big-chunked", [](const TestRequest&) {
      TestResponse r;
      r.status = 200;
      r.chunked = true;  // unknown length: only the write callback can stop it
      r.body = std::string(64 * 1024, 'x');
      r.body_repeat = 64;  // 4 MiB
      return r;
    });
    server_.Handle("/slow", [](const TestRequest&) {
      TestResponse r;
      r.status = 200;
      r.delay_before_headers_ms = 5000;
      r.body = "late";
      return r;
    });
    port_ = std::to_string(server_.port());
  }
  void TearDown() override {
    ModuleFixture::TearDown();
    server_.Stop();
  }

  Module& OpenWith(std::function<void(ModuleOptions&)> tweak = {}) {
    ModuleOptions o;
    o.secrets_dir = dir_ + "/secrets";
    o.max_workers = 4;
    o.http_resolve_for_tests = [this](const std::string& host) -> std::vector<std::string> {
      std::lock_guard<std::mutex> lock(resolve_mu_);
      ++lookups_[host];
      auto it = names_.find(host);
      if (it == names_.end()) return {};
      auto& answers = it->second;
      const size_t n = lookups_[host] - 1;
      return {answers[std::min(n, answers.size() - 1)]};
    };
    if (tweak) tweak(o);
    return Open(std::move(o));
  }

  std::string Url(const std::string& host, const std::string& path) { return "http://" + host + ":" + port_ + path; }

  // A manifest granting http.fetch with these rules (and limits).
  static std::string Manifest(const Json& rules, const Json& limits = Json::object()) {
    Json grant = {{"rules", rules}};
    if (!limits.empty()) grant["limits"] = limits;
    return Json{{"grants", {{"http.fetch", grant}}}, {"budgets", {{"deadline_ms", 60000}}}}.dump();
  }

  Json Fetch(const FlowRef& flow, Json input) {
    ActivationResult r = module_->Run(flow, std::move(input));
    EXPECT_TRUE(r.ok()) << r.message;
    last_activation_ = r.activation_id;
    return r.result;
  }

  HttpTestServer server_;
  std::string port_;
  std::mutex resolve_mu_;
  std::map<std::string, std::vector<std::string>> names_;  // host -> successive answers
  std::map<std::string, size_t> lookups_;
  int64_t last_activation_ = 0;
};

TEST_F(HttpFetchTest, AGrantedGetReturnsStatusHeadersBodyAndIsJournaled) {
  OpenWith();
  auto flow = Add(kFetchFlow, Manifest({{{"url", "http://127.0.0.1:" + port_ + "/"}, {"allow_networks", {"127.0.0.1/32"}}}}));
  Json r = Fetch(flow, {{"url", Url("127.0.0.1", "/hello")}});
  ASSERT_FALSE(r.contains("error")) << r.dump();
  EXPECT_EQ(r["status"], 200);
  EXPECT_EQ(r["status_text"], "OK");
  EXPECT_EQ(r["url"], Url("127.0.0.1", "/hello"));
  EXPECT_EQ(r["redirected"], false);
  EXPECT_EQ(UnB64(r["body_base64"]), "hello from the test server");
  bool served_by = false;
  for (const auto& h : r["headers"]) served_by |= h[0] == "x-served-by" && h[1] == "test";
  EXPECT_TRUE(served_by) << r["headers"].dump();
  EXPECT_EQ(r["basal"]["hops"][0]["address"], "127.0.0.1:" + port_);
  ASSERT_EQ(server_.requests().size(), 1u);
  auto calls = Reader()->Calls(last_activation_);
  ASSERT_TRUE(calls);
  ASSERT_EQ(calls->size(), 1u);
  EXPECT_EQ((*calls)[0].name, "http.fetch");
  EXPECT_EQ((*calls)[0].state, CallState::kAnswered);
  const Json journaled = Json::parse((*calls)[0].result_json);
  EXPECT_EQ(journaled["status"], 200);
  EXPECT_EQ(journaled["body"], "hello from the test server");
  EXPECT_EQ(journaled["basal"]["hops"][0]["address"], "127.0.0.1:" + port_);
}

// The answer is written as text and the journal's view made from that text (journal_result_text):
// byte for byte what the tree of the answer and its view (JournalResult) dumped, for a plain body,
// a body that is not UTF-8 and has quotes, backslashes and control bytes, and header values that
// need escapes.
TEST_F(HttpFetchTest, TheJournalKeepsTheAnswersTextWithItsBodyAsTextAsTheTreeViewDid) {
  OpenWith();
  auto flow = Add(kFetchFlow, Manifest({{{"url", "http://127.0.0.1:" + port_ + "/"},
                                         {"methods", {"GET", "POST"}},
                                         {"allow_networks", {"127.0.0.1/32"}}}}));
  const std::string odd = std::string("\xFF\xFE q\"\\\n\x01 caf\xC3\xA9 ", 15) + std::string(1, '\0') + "end";
  const std::vector<Json> inputs = {
      {{"url", Url("127.0.0.1", "/hello")}},
      {{"url", Url("127.0.0.1", "/echo-body")}, {"method", "POST"}, {"body_text", "x"}, {"body_b64", B64(odd)}},
      {{"url", Url("127.0.0.1", "/echo-headers")}, {"headers", Json::array({Json::array({"Authorization", "a \"quoted\" \\ value\t!"})})}},
      {{"url", Url("127.0.0.1", "/echo-body")}, {"method", "POST"}, {"body_text", ""}, {"body_b64", ""}},
  };
  for (const Json& input : inputs) {
    Json r = Fetch(flow, input);
    ASSERT_FALSE(r.contains("error")) << r.dump();
    auto calls = Reader()->Calls(last_activation_);
    ASSERT_TRUE(calls);
    ASSERT_EQ(calls->size(), 1u);
    Json view = r;
    view.erase("body_base64");
    const std::string body = UnB64(r["body_base64"]);
    view["body_bytes"] = body.size();
    view["body"] = body;
    EXPECT_EQ((*calls)[0].result_json, protocol::DumpJson(view)) << input.dump();
  }
}

TEST_F(HttpFetchTest, UrlsAndMethodsNoRuleAdmitsAreDeniedBeforeAnythingIsSent) {
  OpenWith();
  auto flow = Add(kFetchFlow, Manifest({{{"url", "http://127.0.0.1:" + port_ + "/hello"},
                                         {"methods", {"GET"}},
                                         {"allow_networks", {"127.0.0.1/32"}}}}));
  // Allowed.
  EXPECT_EQ(Fetch(flow, {{"url", Url("127.0.0.1", "/hello")}})["status"], 200);
  // Another path, another port, another method, another scheme: denied by the gate.
  for (const Json& input : {Json{{"url", Url("127.0.0.1", "/echo-body")}},
                            Json{{"url", "http://127.0.0.1:1/hello"}},
                            Json{{"url", Url("127.0.0.1", "/hello")}, {"method", "DELETE"}},
                            Json{{"url", "https://127.0.0.1:" + port_ + "/hello"}},
                            Json{{"url", "http://user:pw@127.0.0.1:" + port_ + "/hello"}},
                            Json{{"url", "file:///etc/passwd"}}}) {
    Json r = Fetch(flow, input);
    ASSERT_TRUE(r.contains("error")) << input.dump() << " -> " << r.dump();
    EXPECT_EQ(r["error"]["name"], "PermissionDenied") << input.dump() << " -> " << r.dump();
  }
  EXPECT_EQ(server_.requests().size(), 1u) << "only the granted request reached the server";
  EXPECT_EQ(module_->Health().denied_calls, 6u);
  EXPECT_EQ(module_->Health().http_refusals.at("not_granted"), 4u);
  EXPECT_EQ(module_->Health().http_refusals.at("bad_request"), 2u) << "credentials in the URL; a file: URL";
}

// The bypass corpus: every spelling of 127.0.0.1 is canonicalized to it, so a rule for
// 127.0.0.1 admits the URL, and the SSRF guard then refuses it (an IP-literal host is guarded when
// the call is decided: denied, nothing sent) unless allow_networks names the network. With
// allow_networks every spelling reaches the server.
TEST_F(HttpFetchTest, EverySpellingOfLoopbackIsRefusedUnlessAllowNetworksNamesIt) {
  OpenWith();
  const std::vector<std::string> spellings = {"127.0.0.1", "2130706433", "0x7f.1", "0177.0.0.1", "127.1",
                                              "0x7f000001", "127.0.0.1."};
  auto guarded = Add(kFetchFlow, Manifest({{{"url", "http://127.0.0.1:" + port_ + "/"}}}), "guarded.js");
  auto allowed = Add(kFetchFlow, Manifest({{{"url", "http://127.0.0.1:" + port_ + "/"}, {"allow_networks", {"127.0.0.1/32"}}}}),
                     "allowed.js");
  for (const std::string& host : spellings) {
    Json r = Fetch(guarded, {{"url", Url(host, "/hello")}});
    ASSERT_TRUE(r.contains("error")) << host << " -> " << r.dump();
    EXPECT_EQ(r["error"]["name"], "PermissionDenied") << host;
    EXPECT_NE(r["error"]["message"].get<std::string>().find("loopback"), std::string::npos) << host << ": " << r.dump();
  }
  EXPECT_EQ(server_.requests().size(), 0u) << "no refused request reached the server";
  for (const std::string& host : spellings) {
    Json r = Fetch(allowed, {{"url", Url(host, "/hello")}});
    EXPECT_EQ(r["status"], 200) << host << " -> " << r.dump();
  }
  EXPECT_EQ(server_.requests().size(), spellings.size());
  EXPECT_EQ(module_->Health().http_refusals.at("address_refused"), spellings.size());
  // Each refusal is journaled with its reason.
  auto rows = Reader()->Activations(std::nullopt, 1000);
  ASSERT_TRUE(rows);
  size_t journaled_refusals = 0;
  for (const auto& a : *rows) {
    auto calls = Reader()->Calls(a.id);
    ASSERT_TRUE(calls);
    for (const auto& c : *calls) {
      if (c.decision.verdict == Verdict::kDeny &&
          c.decision.reason.find("127.0.0.1 is loopback (127.0.0.0/8)") != std::string::npos)
        ++journaled_refusals;
    }
  }
  EXPECT_EQ(journaled_refusals, spellings.size());
}

TEST_F(HttpFetchTest, Ipv6FormsOfLoopbackAreUnwrappedAndRefused) {
  OpenWith();
  // [::ffff:127.0.0.1] reaches 127.0.0.1 through a dual-stack socket; 64:ff9b::7f00:1 is NAT64's
  // spelling of it; [::1] is IPv6 loopback. Each is refused as loopback.
  for (const std::string host : {"[::1]", "[::ffff:127.0.0.1]", "[64:ff9b::7f00:1]", "[::127.0.0.1]"}) {
    auto flow = Add(kFetchFlow, Manifest({{{"url", "http://" + host + ":" + port_ + "/"}}}), "v6.js");
    Json r = Fetch(flow, {{"url", Url(host, "/hello")}});
    ASSERT_TRUE(r.contains("error")) << host << " -> " << r.dump();
    EXPECT_EQ(r["error"]["name"], "PermissionDenied") << host;
    EXPECT_NE(r["error"]["message"].get<std::string>().find("loopback"), std::string::npos) << host << ": " << r.dump();
  }
  EXPECT_EQ(server_.requests().size(), 0u);
  // Allowed: the mapped form with allow_networks naming 127.0.0.1 reaches the IPv4 server.
  auto flow = Add(kFetchFlow, Manifest({{{"url", "http://[::ffff:127.0.0.1]:" + port_ + "/"}, {"allow_networks", {"127.0.0.0/8"}}}}),
                  "v6ok.js");
  Json r = Fetch(flow, {{"url", Url("[::ffff:127.0.0.1]", "/hello")}});
  EXPECT_EQ(r["status"], 200) << r.dump();
}

TEST_F(HttpFetchTest, NamesThatResolveToLoopbackOrMetadataAreRefusedAtConnect) {
  names_["internal.test"] = {"127.0.0.1"};
  names_["metadata.test"] = {"169.254.169.254"};
  names_["api.test"] = {"127.0.0.1"};
  OpenWith();
  auto flow = Add(kFetchFlow, Manifest({{{"url", "http://internal.test:" + port_ + "/"}},
                                        {{"url", "http://metadata.test:" + port_ + "/"}},
                                        {{"url", "http://api.test:" + port_ + "/"}, {"allow_networks", {"127.0.0.1/32"}}}}));
  Json r = Fetch(flow, {{"url", Url("internal.test", "/hello")}});
  ASSERT_TRUE(r.contains("error")) << r.dump();
  EXPECT_NE(r["error"]["message"].get<std::string>().find("loopback"), std::string::npos) << r.dump();
  r = Fetch(flow, {{"url", Url("metadata.test", "/latest/meta-data/")}});
  ASSERT_TRUE(r.contains("error")) << r.dump();
  EXPECT_NE(r["error"]["message"].get<std::string>().find("169.254.169.254"), std::string::npos) << r.dump();
  EXPECT_NE(r["error"]["message"].get<std::string>().find("link-local"), std::string::npos) << r.dump();
  // The hint (allow_networks, with the CIDR to write) is given once, not repeated.
  {
    const std::string message = r["error"]["message"].get<std::string>();
    const size_t first = message.find("allow_networks");
    ASSERT_NE(first, std::string::npos) << message;
    EXPECT_EQ(message.find("allow_networks", first + 1), std::string::npos) << message;
    EXPECT_NE(message.find("169.254.169.254/32"), std::string::npos) << message;
  }
  EXPECT_EQ(server_.requests().size(), 0u);
  // Allowed: the rule that names the network.
  r = Fetch(flow, {{"url", Url("api.test", "/hello")}});
  EXPECT_EQ(r["status"], 200) << r.dump();
  ASSERT_EQ(server_.requests().size(), 1u);
}

// DNS rebinding: a name that first resolves to a public address and then to a private one. The
// guard judges each connection's address, never a name it resolved once.
TEST_F(HttpFetchTest, DnsRebindingToAPrivateAddressIsRefusedOnTheSecondLookup) {
  // The first answer is a public address nothing listens on here (connecting fails or times out,
  // which is not a refusal); the second is loopback.
  names_["rebind.test"] = {"93.184.216.34", "127.0.0.1"};
  OpenWith();
  auto flow = Add(kFetchFlow, Manifest({{{"url", "http://rebind.test:" + port_ + "/"}}},
                                       {{"connect_timeout_ms", 1000}, {"timeout_ms", 2000}}));
  Json first = Fetch(flow, {{"url", Url("rebind.test", "/hello")}});
  ASSERT_TRUE(first.contains("error")) << first.dump();
  EXPECT_EQ(first["error"]["message"].get<std::string>().find("SSRF"), std::string::npos)
      << "a public address is not refused by the guard: " << first.dump();
  Json second = Fetch(flow, {{"url", Url("rebind.test", "/hello")}});
  ASSERT_TRUE(second.contains("error")) << second.dump();
  EXPECT_NE(second["error"]["message"].get<std::string>().find("loopback"), std::string::npos) << second.dump();
  EXPECT_EQ(server_.requests().size(), 0u);
  EXPECT_EQ(lookups_["rebind.test"], 2u);
}

TEST_F(HttpFetchTest, RedirectsAreReturnedByDefaultAndEveryFollowedHopIsCheckedAgain) {
  names_["api.test"] = {"127.0.0.1"};
  names_["internal.test"] = {"127.0.0.1"};
  server_.Handle("/to-hello", [this](const TestRequest&) {
    TestResponse r;
    r.status = 302;
    r.headers = {{"Location", "http://api.test:" + port_ + "/hello"}};
    return r;
  });
  server_.Handle("/to-internal", [this](const TestRequest&) {
    TestResponse r;
    r.status = 307;
    r.headers = {{"Location", "http://internal.test:" + port_ + "/hello"}};
    return r;
  });
  server_.Handle("/to-ungranted", [](const TestRequest&) {
    TestResponse r;
    r.status = 301;
    r.headers = {{"Location", "/echo-body"}};
    return r;
  });
  server_.Handle("/loop", [](const TestRequest&) {
    TestResponse r;
    r.status = 302;
    r.headers = {{"Location", "/loop"}};
    return r;
  });
  OpenWith();
  const Json api = {{"url", "http://api.test:" + port_ + "/"}, {"allow_networks", {"127.0.0.1/32"}}};
  const Json api_no_echo = {{"url", "http://api.test:" + port_ + "/hello"}, {"allow_networks", {"127.0.0.1/32"}}};
  // Not followed by default: the flow gets the 302.
  auto plain = Add(kFetchFlow, Manifest(Json::array({api})), "plain.js");
  Json r = Fetch(plain, {{"url", Url("api.test", "/to-hello")}});
  EXPECT_EQ(r["status"], 302) << r.dump();
  // Followed when the grant allows it.
  auto follows = Add(kFetchFlow,
                     Manifest({api, {{"url", "http://internal.test:" + port_ + "/"}}}, {{"max_redirects", 3}}),
                     "follows.js");
  r = Fetch(follows, {{"url", Url("api.test", "/to-hello")}});
  EXPECT_EQ(r["status"], 200) << r.dump();
  EXPECT_EQ(r["redirected"], true);
  EXPECT_EQ(r["url"], Url("api.test", "/hello"));
  EXPECT_EQ(r["basal"]["hops"].size(), 2u);
  // A hop to a private address: the rule for internal.test admits the URL, the guard refuses it.
  const size_t before = server_.requests().size();
  r = Fetch(follows, {{"url", Url("api.test", "/to-internal")}});
  ASSERT_TRUE(r.contains("error")) << r.dump();
  EXPECT_NE(r["error"]["message"].get<std::string>().find("loopback"), std::string::npos) << r.dump();
  EXPECT_EQ(server_.requests().size(), before + 1) << "only the first hop was sent";
  // A hop no rule admits.
  auto narrow = Add(kFetchFlow,
                    Manifest({{{"url", "http://api.test:" + port_ + "/to-ungranted"}, {"allow_networks", {"127.0.0.1/32"}}}},
                             {{"max_redirects", 3}}),
                    "narrow.js");
  r = Fetch(narrow, {{"url", Url("api.test", "/to-ungranted")}});
  ASSERT_TRUE(r.contains("error")) << r.dump();
  EXPECT_NE(r["error"]["message"].get<std::string>().find("redirect"), std::string::npos) << r.dump();
  // Too many hops.
  r = Fetch(follows, {{"url", Url("api.test", "/loop")}});
  ASSERT_TRUE(r.contains("error")) << r.dump();
  EXPECT_NE(r["error"]["message"].get<std::string>().find("max_redirects"), std::string::npos) << r.dump();
  // redirect: "error" refuses; "manual" returns the 3xx.
  r = Fetch(follows, {{"url", Url("api.test", "/to-hello")}, {"redirect", "error"}});
  ASSERT_TRUE(r.contains("error")) << r.dump();
  r = Fetch(follows, {{"url", Url("api.test", "/to-hello")}, {"redirect", "manual"}});
  EXPECT_EQ(r["status"], 302) << r.dump();
  (void)api_no_echo;
  const auto& refusals = module_->Health().http_refusals;
  EXPECT_EQ(refusals.at("address_refused"), 1u);
  EXPECT_EQ(refusals.at("redirect_not_granted"), 1u);
  EXPECT_EQ(refusals.at("too_many_redirects"), 1u);
  EXPECT_EQ(refusals.at("redirect_refused"), 1u);
}

TEST_F(HttpFetchTest, AResponseOfUnknownLengthIsStoppedAtMaxResponseBytes) {
  OpenWith();
  const Json rule = {{"url", "http://127.0.0.1:" + port_ + "/"}, {"allow_networks", {"127.0.0.1/32"}}};
  auto small = Add(kFetchFlow, Manifest(Json::array({rule}), {{"max_response_bytes", 1 << 20}}), "small.js");
  Json r = Fetch(small, {{"url", Url("127.0.0.1", "/big-chunked")}});
  ASSERT_TRUE(r.contains("error")) << r.dump().substr(0, 200);
  EXPECT_EQ(r["error"]["name"], "TypeError");
  EXPECT_NE(r["error"]["message"].get<std::string>().find("max_response_bytes (1048576"), std::string::npos) << r.dump();
  EXPECT_EQ(module_->Health().http_refusals.at("too_large"), 1u);
  // Allowed: the same response within a larger limit.
  auto large = Add(kFetchFlow, Manifest(Json::array({rule}), {{"max_response_bytes", 8 << 20}}), "large.js");
  r = Fetch(large, {{"url", Url("127.0.0.1", "/big-chunked")}});
  ASSERT_FALSE(r.contains("error")) << r.dump().substr(0, 300);
  EXPECT_EQ(UnB64(r["body_base64"]).size(), 4u << 20);
}

TEST_F(HttpFetchTest, ASlowResponseFailsAtTimeoutMs) {
  OpenWith();
  const Json rule = {{"url", "http://127.0.0.1:" + port_ + "/"}, {"allow_networks", {"127.0.0.1/32"}}};
  auto flow = Add(kFetchFlow, Manifest(Json::array({rule}), {{"timeout_ms", 300}}));
  Json r = Fetch(flow, {{"url", Url("127.0.0.1", "/slow")}});
  ASSERT_TRUE(r.contains("error")) << r.dump();
  EXPECT_NE(r["error"]["message"].get<std::string>().find("timeout_ms (300 ms)"), std::string::npos) << r.dump();
  EXPECT_EQ(module_->Health().http_failures.at("timeout"), 1u);
  EXPECT_EQ(Fetch(flow, {{"url", Url("127.0.0.1", "/hello")}})["status"], 200);
}

// Four activations of 25 fetches each, at most 4 in flight per activation (the grant) and 3 across
// the module (ModuleOptions::http_max_in_flight): the rest wait their turn, none fails.
TEST_F(HttpFetchTest, ManyConcurrentFetchesFromSeveralActivationsAllComplete) {
  OpenWith([](ModuleOptions& o) { o.http_max_in_flight = 3; });
  auto flow = Add(kManyFlow, Manifest({{{"url", "http://127.0.0.1:" + port_ + "/"}, {"allow_networks", {"127.0.0.1/32"}}}},
                                      {{"max_in_flight", 4}}));
  Json urls = Json::array();
  for (int i = 0; i < 25; ++i) urls.push_back(Url("127.0.0.1", "/hello"));
  std::vector<ActivationResult> results;
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(module_->Submit(flow, {{"urls", urls}}, [&](const ActivationResult& r) { results.push_back(r); }));
  }
  module_->RunUntilIdle();
  ASSERT_EQ(results.size(), 4u);
  for (const auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.message;
    ASSERT_EQ(r.result.size(), 25u);
    for (const auto& s : r.result) EXPECT_EQ(s, 200) << s.dump();
  }
  EXPECT_EQ(server_.requests().size(), 100u);
}

TEST_F(HttpFetchTest, MaxRequestsBoundsTheFetchesOfOneActivation) {
  OpenWith();
  auto flow = Add(kManyFlow, Manifest({{{"url", "http://127.0.0.1:" + port_ + "/"}, {"allow_networks", {"127.0.0.1/32"}}}},
                                      {{"max_requests", 3}}));
  Json urls = Json::array();
  for (int i = 0; i < 5; ++i) urls.push_back(Url("127.0.0.1", "/hello"));
  ActivationResult r = module_->Run(flow, {{"urls", urls}});
  ASSERT_TRUE(r.ok()) << r.message;
  int ok = 0, refused = 0;
  for (const auto& s : r.result) {
    if (s == 200) ++ok;
    else if (s.get<std::string>().find("max_requests (3)") != std::string::npos) ++refused;
  }
  EXPECT_EQ(ok, 3);
  EXPECT_EQ(refused, 2);
  // The next activation has its own count.
  r = module_->Run(flow, {{"urls", Json::array({Url("127.0.0.1", "/hello")})}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.result[0], 200);
}

TEST_F(HttpFetchTest, ASecretReachesTheServerButNeverTheWorkerNorTheJournal) {
  const std::string secret = "s3cr3t-t0ken-value-4242";
  {
    auto store = SecretStore::Open(dir_ + "/secrets", /*create=*/true);
    ASSERT_TRUE(store) << store.error().message;
    ASSERT_TRUE(store->Set("example_token", secret));
  }
  OpenWith();
  auto flow = Add(kFetchFlow, Manifest({{{"url", "http://127.0.0.1:" + port_ + "/echo-headers"},
                                         {"headers", {{"Authorization", "Bearer ${secret:example_token}"}}},
                                         {"allow_plain_http", true},
                                         {"allow_networks", {"127.0.0.1/32"}}}}));
  // The script tries to set its own Authorization: the rule's value wins.
  Json r = Fetch(flow, {{"url", Url("127.0.0.1", "/echo-headers")}, {"headers", Json::array({Json::array({"authorization", "Bearer mine"})})}});
  ASSERT_FALSE(r.contains("error")) << r.dump();
  ASSERT_EQ(server_.requests().size(), 1u);
  std::string auth;
  const std::vector<TestRequest> seen = server_.requests();
  for (const auto& [name, value] : seen[0].headers)
    if (name == "Authorization" || name == "authorization") auth += value + ";";
  EXPECT_EQ(auth, "Bearer " + secret + ";") << "the server got the secret, once";
  // The server echoed it in its body and a header: the worker sees the redaction mark.
  const std::string body = UnB64(r["body_base64"]);
  EXPECT_EQ(body.find(secret), std::string::npos) << body;
  EXPECT_NE(body.find("Bearer [secret example_token]"), std::string::npos) << body;
  EXPECT_EQ(r.dump().find(secret), std::string::npos);
  EXPECT_EQ(r["basal"]["secrets"], Json::array({"example_token"}));
  // The redaction changed the body's length; Content-Length says the length the flow got.
  std::string length;
  for (const Json& h : r["headers"])
    if (h[0].get<std::string>() == "Content-Length" || h[0].get<std::string>() == "content-length") length = h[1];
  ASSERT_FALSE(length.empty()) << "the test server sends Content-Length: " << r["headers"].dump();
  EXPECT_EQ(length, std::to_string(body.size())) << r["headers"].dump();
  // Nothing in the journal's files holds the value.
  module_.reset();
  for (const char* suffix : {"/journal.db", "/journal.db-wal"}) {
    std::ifstream f(dir_ + suffix, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    EXPECT_EQ(bytes.find(secret), std::string::npos) << suffix;
  }
}

// Issue 25 point 9: redaction missed the hops' URLs (a redirect to a URL holding the secret), error
// texts naming such a URL, header names, and encoded or partial echoes (a flow that asks for byte
// ranges gets halves it can join); the journal then held copies a read-scoped token could fetch.
TEST_F(HttpFetchTest, NoEchoOfASecretReachesTheFlowOrTheJournalEncodedSplitOrInAUrl) {
  const std::string secret = "s3cr3t-t0ken-value-4242";
  {
    auto store = SecretStore::Open(dir_ + "/secrets", /*create=*/true);
    ASSERT_TRUE(store) << store.error().message;
    ASSERT_TRUE(store->Set("example_token", secret));
  }
  const auto token_of = [](const TestRequest& q) {
    std::string auth = q.header("authorization").value_or("");
    return auth.rfind("Bearer ", 0) == 0 ? auth.substr(7) : std::string();
  };
  const auto hex = [](const std::string& bytes, bool upper) {
    std::string out;
    for (unsigned char c : bytes) {
      char two[3];
      std::snprintf(two, sizeof two, upper ? "%02X" : "%02x", c);
      out += two;
    }
    return out;
  };
  const auto percent = [](const std::string& bytes) {  // every byte, as an encoder that takes no chances
    std::string out;
    for (unsigned char c : bytes) {
      char three[4];
      std::snprintf(three, sizeof three, "%%%02X", c);
      out += three;
    }
    return out;
  };
  // Redirects to a URL that carries the token, twice: once to a page of this server, once to an
  // address no rule admits (an error that names the URL).
  server_.Handle("/to-landing", [&](const TestRequest& q) {
    TestResponse r;
    r.status = 302;
    r.headers = {{"Location", "/landing?token=" + token_of(q)}};
    return r;
  });
  server_.Handle("/to-elsewhere", [&](const TestRequest& q) {
    TestResponse r;
    r.status = 302;
    r.headers = {{"Location", "http://192.0.2.1/?token=" + token_of(q)}};
    return r;
  });
  server_.Handle("/landing", [&](const TestRequest& q) {
    const std::string t = token_of(q);
    TestResponse r;
    r.status = 200;
    r.headers = {{"X-Echo-" + t, "1"}, {"X-B64", B64(t)}, {"X-Hex", hex(t, false)}};
    r.body = "path " + q.target + "\nhex " + hex(t, true) + "\nbasic " + B64("Bearer " + t) + "\nurl " + percent(t) +
             "\nfirst " + t.substr(0, 11) + "\nsecond " + t.substr(11) + "\n";
    return r;
  });
  OpenWith();
  auto flow = Add(kFetchFlow, Manifest({{{"url", "http://127.0.0.1:" + port_ + "/"},
                                         {"headers", {{"Authorization", "Bearer ${secret:example_token}"}}},
                                         {"allow_plain_http", true},
                                         {"allow_networks", {"127.0.0.1/32"}}}},
                                       {{"max_redirects", 3}}));
  const std::vector<std::string> echoes = {
      secret, B64(secret), B64(secret).substr(0, 30), hex(secret, false), hex(secret, true),
      percent(secret), secret.substr(0, 11), secret.substr(11), B64("Bearer " + secret).substr(12, 16)};
  const auto leaks = [&](const std::string& text) {
    std::string found;
    for (const std::string& e : echoes)
      if (text.find(e) != std::string::npos) found += " [" + e + "]";
    return found;
  };
  Json r = Fetch(flow, {{"url", Url("127.0.0.1", "/to-landing")}});
  ASSERT_FALSE(r.contains("error")) << r.dump();
  EXPECT_EQ(r["status"], 200);
  EXPECT_EQ(leaks(r.dump()), "") << r.dump();
  EXPECT_EQ(leaks(UnB64(r["body_base64"])), "") << UnB64(r["body_base64"]);
  EXPECT_NE(r["basal"]["hops"][1]["url"].get<std::string>().find("token=[secret example_token]"), std::string::npos)
      << r["basal"]["hops"].dump();
  EXPECT_NE(UnB64(r["body_base64"]).find("first [secret example_token]"), std::string::npos) << "a half is redacted too";
  bool named = false;
  for (const auto& h : r["headers"]) named |= h[0].get<std::string>().find("[secret example_token]") != std::string::npos;
  EXPECT_TRUE(named) << r["headers"].dump();
  // The error of a hop no rule admits names the hop's URL: redacted too.
  Json refused = Fetch(flow, {{"url", Url("127.0.0.1", "/to-elsewhere")}});
  ASSERT_TRUE(refused.contains("error")) << refused.dump();
  EXPECT_EQ(leaks(refused.dump()), "") << refused.dump();
  // A byte range of a response under a rule that sends a secret is refused: halves are what a
  // flow would join.
  Json ranged = Fetch(flow, {{"url", Url("127.0.0.1", "/landing")},
                            {"headers", Json::array({Json::array({"Range", "bytes=0-10"})})}});
  ASSERT_TRUE(ranged.contains("error")) << ranged.dump();
  EXPECT_NE(ranged["error"]["message"].get<std::string>().find("Range"), std::string::npos) << ranged.dump();
  EXPECT_EQ(module_->Health().http_refusals.at("range_with_secret"), 1u);
  // Allowed: a range on a rule without a secret.
  auto plain = Add(kFetchFlow, Manifest({{{"url", "http://127.0.0.1:" + port_ + "/"}, {"allow_networks", {"127.0.0.1/32"}}}}),
                   "plain.js");
  Json range_ok = Fetch(plain, {{"url", Url("127.0.0.1", "/hello")}, {"headers", Json::array({Json::array({"Range", "bytes=0-4"})})}});
  EXPECT_FALSE(range_ok.contains("error")) << range_ok.dump();
  // Nothing in the journal's files holds the value or an echo of it.
  module_.reset();
  for (const char* suffix : {"/journal.db", "/journal.db-wal"}) {
    std::ifstream f(dir_ + suffix, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    EXPECT_EQ(leaks(bytes), "") << suffix;
  }
}

TEST_F(HttpFetchTest, AMissingSecretFailsTheRequestNamingIt) {
  OpenWith();
  auto flow = Add(kFetchFlow, Manifest({{{"url", "http://127.0.0.1:" + port_ + "/"},
                                         {"headers", {{"Authorization", "Bearer ${secret:never_set}"}}},
                                         {"allow_plain_http", true},
                                         {"allow_networks", {"127.0.0.1/32"}}}}));
  Json r = Fetch(flow, {{"url", Url("127.0.0.1", "/hello")}});
  ASSERT_TRUE(r.contains("error")) << r.dump();
  EXPECT_NE(r["error"]["message"].get<std::string>().find("never_set"), std::string::npos) << r.dump();
  EXPECT_EQ(server_.requests().size(), 0u);
  EXPECT_EQ(module_->Health().http_refusals.at("secret_missing"), 1u);
}

TEST_F(HttpFetchTest, ASecretOverPlainHttpNeedsAllowPlainHttp) {
  OpenWith();
  auto refused = module_->AddFlow("t.js", kFetchFlow,
                                  Manifest({{{"url", "http://127.0.0.1:" + port_ + "/"},
                                             {"headers", {{"Authorization", "Bearer ${secret:example_token}"}}}}}));
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("allow_plain_http"), std::string::npos) << refused.error().message;
}

TEST_F(HttpFetchTest, ABodyIsSentAndTheDeadlineAbortsAFetchInFlight) {
  OpenWith();
  const Json rule = {{"url", "http://127.0.0.1:" + port_ + "/"}, {"methods", {"GET", "POST"}}, {"allow_networks", {"127.0.0.1/32"}}};
  auto flow = Add(kFetchFlow, Manifest(Json::array({rule})));
  Json r = Fetch(flow, {{"url", Url("127.0.0.1", "/echo-body")}, {"method", "POST"}, {"body_text", "x"}, {"body_b64", B64("payload")}});
  EXPECT_EQ(r["status"], 201) << r.dump();
  EXPECT_EQ(UnB64(r["body_base64"]), "POST payload");
  // A deadline shorter than the server's delay: the activation ends, the transfer is aborted.
  auto deadline = Add(kFetchFlow,
                      Json{{"grants", {{"http.fetch", {{"rules", Json::array({rule})}}}}}, {"budgets", {{"deadline_ms", 300}}}}.dump(),
                      "deadline.js");
  ActivationResult d = module_->Run(deadline, {{"url", Url("127.0.0.1", "/slow")}});
  EXPECT_EQ(d.outcome, Outcome::kDeadline) << d.message;
  auto calls = Reader()->Calls(d.activation_id);
  ASSERT_TRUE(calls);
  ASSERT_EQ(calls->size(), 1u);
  EXPECT_EQ((*calls)[0].state, CallState::kAbandoned);
  // The module still serves fetches afterwards.
  EXPECT_EQ(Fetch(flow, {{"url", Url("127.0.0.1", "/hello")}})["status"], 200);
}

// A rule's "retry" (issue 26): an idempotent request that answered a listed status is sent again in
// the same activation; the flow sees the last answer, the journal one call with every attempt in
// its hops; a POST is sent once; the deadline ends a wait between attempts.
TEST_F(HttpFetchTest, ARuleWithRetrySendsAnIdempotentRequestAgainAndAPostOnce) {
  std::atomic<int> flaky{0};
  server_.Handle("/flaky", [&flaky](const TestRequest&) {
    TestResponse r;
    r.status = ++flaky <= 2 ? 503 : 200;
    if (r.status == 503) r.headers = {{"Retry-After", "30"}};  // longer than max_ms: capped
    r.body = r.status == 200 ? "at last" : "busy";
    return r;
  });
  std::atomic<int> down{0};
  server_.Handle("/down", [&down](const TestRequest&) {
    ++down;
    TestResponse r;
    r.status = 502;
    return r;
  });
  OpenWith();
  const Json rule = {{"url", "http://127.0.0.1:" + port_ + "/"},
                     {"methods", {"GET", "POST"}},
                     {"allow_networks", {"127.0.0.1/32"}},
                     {"retry", {{"statuses", {502, 503}}, {"max_attempts", 3},
                                {"backoff", {{"initial_ms", 20}, {"factor", 2}, {"max_ms", 50}}}}}};
  auto flow = Add(kFetchFlow, Manifest(Json::array({rule})));

  Json r = Fetch(flow, {{"url", Url("127.0.0.1", "/flaky")}});
  EXPECT_EQ(r["status"], 200) << r.dump();
  EXPECT_EQ(UnB64(r["body_base64"]), "at last");
  EXPECT_EQ(flaky.load(), 3);
  const Json hops = r["basal"]["hops"];
  ASSERT_EQ(hops.size(), 3u) << hops.dump();
  EXPECT_EQ(hops[0]["status"], 503);
  EXPECT_EQ(hops[0]["attempt"], 1);
  EXPECT_EQ(hops[0]["retry_in_ms"], 50);  // Retry-After: 30 (s), capped at max_ms
  EXPECT_EQ(hops[1]["attempt"], 2);
  EXPECT_EQ(hops[2]["status"], 200);
  EXPECT_EQ(hops[2]["attempt"], 3);
  auto calls = Reader()->Calls(last_activation_);
  ASSERT_TRUE(calls);
  ASSERT_EQ(calls->size(), 1u) << "one call, however many attempts";
  EXPECT_EQ(Json::parse((*calls)[0].result_json)["basal"]["hops"].size(), 3u);

  // Attempts spent: the last answer is the flow's.
  Json spent = Fetch(flow, {{"url", Url("127.0.0.1", "/down")}});
  EXPECT_EQ(spent["status"], 502) << spent.dump();
  EXPECT_EQ(down.load(), 3);
  EXPECT_EQ(spent["basal"]["hops"][1]["retry_in_ms"], 40);  // 20, then 20 * 2

  // A POST under the same rule is not idempotent: sent once, its 502 answered as is.
  Json post = Fetch(flow, {{"url", Url("127.0.0.1", "/down")}, {"method", "POST"}, {"body_text", "x"}, {"body_b64", B64("p")}});
  EXPECT_EQ(post["status"], 502) << post.dump();
  EXPECT_EQ(down.load(), 4);
  EXPECT_EQ(post["basal"]["hops"].size(), 1u);

  // The activation's deadline ends a wait between attempts: the fetch is aborted, the module goes on.
  Json slow_rule = rule;
  slow_rule["retry"]["backoff"] = {{"initial_ms", 60000}, {"max_ms", 60000}};
  auto waiting = Add(kFetchFlow,
                     Json{{"grants", {{"http.fetch", {{"rules", Json::array({slow_rule})}}}}}, {"budgets", {{"deadline_ms", 500}}}}.dump(),
                     "waiting.js");
  ActivationResult d = module_->Run(waiting, {{"url", Url("127.0.0.1", "/down")}});
  EXPECT_EQ(d.outcome, Outcome::kDeadline) << d.message;
  EXPECT_EQ(down.load(), 5) << "one attempt, then the wait the deadline cut";
  EXPECT_EQ(Fetch(flow, {{"url", Url("127.0.0.1", "/hello")}})["status"], 200);
}

// The script's side: fetch(), Response and Headers over the real http.fetch (the worker's
// src/worker/js/fetch.js), against the loopback server.
TEST_F(HttpFetchTest, FetchInAScriptGetsAResponseAndARefusalIsATypeError) {
  server_.Handle("/json", [](const TestRequest& q) {
    TestResponse r;
    r.status = 200;
    r.headers = {{"Content-Type", "application/json"}, {"Set-Cookie", "a=1"}, {"Set-Cookie", "b=2"}};
    r.body = R"({"method":")" + q.method + R"(","got":)" + (q.body.empty() ? std::string("null") : q.body) + "}";
    return r;
  });
  OpenWith();
  auto flow = Add(R"js(
export default async function (input) {
  const r = await fetch(input.url, {method: "POST", headers: {"Content-Type": "application/json"},
                                    body: JSON.stringify({n: 1})});
  const data = await r.json();
  let refused;
  try { await fetch(input.refused); } catch (e) { refused = [e.name, e.message, e.cause && e.cause.name]; }
  let ungranted;
  try { await fetch(input.ungranted); } catch (e) { ungranted = [e.name, e.cause && e.cause.name]; }
  return {status: r.status, ok: r.ok, type: r.headers.get("content-type"), cookies: r.headers.getSetCookie(),
          data, refused, ungranted};
}
)js",
                  Manifest({{{"url", "http://127.0.0.1:" + port_ + "/json"}, {"methods", {"POST"}},
                             {"allow_networks", {"127.0.0.1/32"}}},
                            {{"url", "http://169.254.169.254/"}}}));
  ActivationResult r = module_->Run(flow, {{"url", Url("127.0.0.1", "/json")},
                                           {"refused", "http://169.254.169.254/latest/meta-data/"},
                                           {"ungranted", Url("127.0.0.1", "/elsewhere")}});
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.result["status"], 200) << r.result.dump();
  EXPECT_EQ(r.result["ok"], true);
  EXPECT_EQ(r.result["type"], "application/json");
  EXPECT_EQ(r.result["cookies"], Json::array({"a=1", "b=2"}));
  EXPECT_EQ(r.result["data"], Json::parse(R"({"method":"POST","got":{"n":1}})"));
  ASSERT_TRUE(r.result["refused"].is_array()) << r.result.dump();
  EXPECT_EQ(r.result["refused"][0], "TypeError");
  EXPECT_NE(r.result["refused"][1].get<std::string>().find("link-local"), std::string::npos) << r.result.dump();
  EXPECT_EQ(r.result["ungranted"], Json::array({"TypeError", "PermissionDenied"}));
  EXPECT_EQ(server_.requests().size(), 1u);
}

}  // namespace
}  // namespace basal::testing
