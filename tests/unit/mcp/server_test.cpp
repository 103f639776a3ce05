// Unit tests of the MCP server's protocol core (src/mcp/server.h) against a stand-in ToolHost: both
// protocol revisions (the 2025 session opened by initialize, and the stateless 2026-07-28 that
// names its revision in each request's _meta), every JSON-RPC error a client can provoke, calls
// answered after OnMessage returns, cancellation, and ids echoed exactly.
#include "mcp/server.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace basal::mcp {
namespace {

// Records every call; answers only when the test says so. A tool named "throws" throws, as a bug
// in a host would.
class FakeToolHost : public ToolHost {
 public:
  struct CallMade {
    uint64_t key;
    std::string name;
    Json arguments;
    std::function<void(Json)> done;
  };

  Json ListTools() override {
    ++lists;
    return Json::array({Json{{"name", "run_script"}, {"description", "runs"}, {"inputSchema", {{"type", "object"}}}}});
  }
  bool CallTool(uint64_t call_key, const std::string& name, const Json& arguments,
                std::function<void(Json result)> done) override {
    if (name == "throws") throw std::runtime_error("host bug");
    if (name == "now") {  // answers before CallTool returns
      done(Result("now"));
      return true;
    }
    if (name != "run_script") return false;
    calls.push_back({call_key, name, arguments, std::move(done)});
    return true;
  }
  void Cancel(uint64_t call_key) override { cancelled.push_back(call_key); }

  static Json Result(const std::string& text) {
    return Json{{"content", Json::array({Json{{"type", "text"}, {"text", text}}})}};
  }

  int lists = 0;
  std::vector<CallMade> calls;
  std::vector<uint64_t> cancelled;
};

class McpServerTest : public ::testing::Test {
 protected:
  McpServerTest()
      : server_(std::make_unique<McpServer>(host_, ServerInfo{"basal", "1.2.3", "Use run_script."},
                                            [this](std::string message) { Sent(std::move(message)); })) {}

  void Sent(std::string message) {
    // One message per line on stdio: the text must hold no raw newline.
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    Json parsed = Json::parse(message, nullptr, false);
    ASSERT_FALSE(parsed.is_discarded()) << message;
    ASSERT_TRUE(parsed.is_object()) << message;
    EXPECT_EQ(parsed["jsonrpc"], "2.0") << message;
    sent_.push_back(std::move(parsed));
  }

  // Sends `message` and returns what the server sent in answer (before OnMessage returned).
  std::vector<Json> Exchange(const Json& message) { return ExchangeText(message.dump()); }
  std::vector<Json> ExchangeText(std::string_view text) {
    sent_.clear();
    server_->OnMessage(text);
    return sent_;
  }
  // The one answer to request `id`.
  Json Answer(const Json& id, const std::string& method, const Json& params = Json::object()) {
    const std::vector<Json> out = Exchange(Json{{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", params}});
    EXPECT_EQ(out.size(), 1u) << method;
    return out.empty() ? Json() : out[0];
  }
  void Initialize(const std::string& version = "2025-11-25") {
    Json answer = Answer(0, "initialize", Json{{"protocolVersion", version}, {"capabilities", Json::object()},
                                                {"clientInfo", {{"name", "test"}, {"version", "1"}}}});
    ASSERT_TRUE(answer.contains("result")) << answer.dump();
    EXPECT_TRUE(Exchange(Json{{"jsonrpc", "2.0"}, {"method", "notifications/initialized"}}).empty());
  }
  static Json Stateless(Json params = Json::object(), const Json& version = kStatelessRevision) {
    params["_meta"] = Json{{kVersionMetaKey, version}};
    return params;
  }
  static Json CallParams(const std::string& tool = "run_script", Json arguments = Json{{"code", "return 1"}}) {
    return Json{{"name", tool}, {"arguments", std::move(arguments)}};
  }
  static void ExpectError(const Json& answer, const Json& id, int code) {
    ASSERT_TRUE(answer.contains("error")) << answer.dump();
    EXPECT_FALSE(answer.contains("result")) << answer.dump();
    EXPECT_EQ(answer["id"], id) << answer.dump();
    EXPECT_EQ(answer["error"]["code"], code) << answer.dump();
    ASSERT_TRUE(answer["error"]["message"].is_string()) << answer.dump();
    EXPECT_FALSE(answer["error"]["message"].get<std::string>().empty());
  }

  FakeToolHost host_;
  std::vector<Json> sent_;
  std::unique_ptr<McpServer> server_;
};

// --- initialize (the 2025 revisions) ---------------------------------------------------------------

TEST_F(McpServerTest, InitializeEchoesARevisionItSpeaks) {
  for (const char* version : {"2025-11-25", "2025-06-18", "2025-03-26"}) {
    Json answer = Answer(1, "initialize", Json{{"protocolVersion", version}, {"capabilities", Json::object()}});
    ASSERT_TRUE(answer.contains("result")) << answer.dump();
    EXPECT_EQ(answer["id"], 1);
    const Json& result = answer["result"];
    EXPECT_EQ(result["protocolVersion"], version);
    EXPECT_TRUE(result["capabilities"].contains("tools")) << result.dump();
    EXPECT_EQ(result["serverInfo"]["name"], "basal");
    EXPECT_EQ(result["serverInfo"]["version"], "1.2.3");
    EXPECT_EQ(result["instructions"], "Use run_script.");
    EXPECT_TRUE(server_->initialized());
  }
}

TEST_F(McpServerTest, InitializeAnswersTheNewestSessionRevisionToAnyOther) {
  for (const Json& asked : {Json("2024-11-05"), Json("1999-01-01"), Json(""), Json(20251125), Json(nullptr)}) {
    Json answer = Answer("i", "initialize", Json{{"protocolVersion", asked}});
    ASSERT_TRUE(answer.contains("result")) << asked.dump() << " -> " << answer.dump();
    EXPECT_EQ(answer["result"]["protocolVersion"], "2025-11-25") << asked.dump();
  }
  Json none = Answer("j", "initialize");
  ASSERT_TRUE(none.contains("result")) << none.dump();
  EXPECT_EQ(none["result"]["protocolVersion"], "2025-11-25");
}

TEST_F(McpServerTest, RequestsBeforeInitializeAreRefused) {
  EXPECT_FALSE(server_->initialized());
  ExpectError(Answer(1, "tools/list"), 1, kInvalidRequest);
  ExpectError(Answer(2, "tools/call", CallParams()), 2, kInvalidRequest);
  EXPECT_TRUE(host_.calls.empty());
  EXPECT_EQ(host_.lists, 0);
  const Json refused = Answer(3, "tools/list");
  EXPECT_NE(refused["error"]["message"].get<std::string>().find("initialize"), std::string::npos) << refused.dump();
  // ping is answered at any time.
  Json ping = Answer(4, "ping");
  EXPECT_EQ(ping["result"], Json::object()) << ping.dump();

  Initialize();
  Json list = Answer(5, "tools/list");
  ASSERT_TRUE(list.contains("result")) << list.dump();
  EXPECT_EQ(list["result"]["tools"][0]["name"], "run_script");
}

// --- the stateless revision (2026-07-28) -----------------------------------------------------------

TEST_F(McpServerTest, AStatelessRequestNeedsNoSession) {
  Json list = Answer(1, "tools/list", Stateless());
  ASSERT_TRUE(list.contains("result")) << list.dump();
  EXPECT_EQ(list["result"]["tools"], host_.ListTools());
  EXPECT_FALSE(server_->initialized());

  EXPECT_TRUE(Exchange(Json{{"jsonrpc", "2.0"}, {"id", 2}, {"method", "tools/call"}, {"params", Stateless(CallParams())}})
                  .empty());
  ASSERT_EQ(host_.calls.size(), 1u);
  EXPECT_EQ(host_.calls[0].name, "run_script");
  EXPECT_EQ(host_.calls[0].arguments, (Json{{"code", "return 1"}}));
  host_.calls[0].done(FakeToolHost::Result("1"));
  ASSERT_EQ(sent_.size(), 1u);
  EXPECT_EQ(sent_[0]["id"], 2);
  EXPECT_EQ(sent_[0]["result"]["content"], FakeToolHost::Result("1")["content"]) << sent_[0].dump();
  EXPECT_EQ(sent_[0]["result"]["resultType"], "complete") << sent_[0].dump();
  EXPECT_FALSE(server_->initialized());
}

TEST_F(McpServerTest, AnUnsupportedRevisionIsErrorMinus32022WithWhatIsSupported) {
  for (const Json& asked : {Json("2030-01-01"), Json("2025-11-25"), Json(5), Json(nullptr), Json("")}) {
    for (const char* method : {"tools/list", "tools/call", "server/discover"}) {
      Json answer = Answer(7, method, Stateless(std::string(method) == "tools/call" ? CallParams() : Json::object(), asked));
      ExpectError(answer, 7, kUnsupportedVersion);
      const Json& data = answer["error"]["data"];
      EXPECT_EQ(data["requested"], asked) << answer.dump();
      ASSERT_TRUE(data["supported"].is_array()) << answer.dump();
      bool stateless = false, session = false;
      for (const Json& v : data["supported"]) {
        stateless = stateless || v == kStatelessRevision;
        session = session || v == kLegacyRevision;
      }
      EXPECT_TRUE(stateless && session) << answer.dump();
    }
  }
  EXPECT_TRUE(host_.calls.empty());
}

TEST_F(McpServerTest, ServerDiscover) {
  Json answer = Answer("d", "server/discover", Stateless());
  ASSERT_TRUE(answer.contains("result")) << answer.dump();
  EXPECT_EQ(answer["id"], "d");
  const Json& result = answer["result"];
  ASSERT_TRUE(result["supportedVersions"].is_array());
  EXPECT_NE(std::find(result["supportedVersions"].begin(), result["supportedVersions"].end(), Json(kStatelessRevision)),
            result["supportedVersions"].end())
      << result.dump();
  EXPECT_TRUE(result["capabilities"].contains("tools")) << result.dump();
  EXPECT_EQ(result["serverInfo"]["name"], "basal");
  EXPECT_EQ(result["serverInfo"]["version"], "1.2.3");
  EXPECT_EQ(result["instructions"], "Use run_script.");
}

// --- tools/call --------------------------------------------------------------------------------------

TEST_F(McpServerTest, ACallIsAnsweredWhenTheHostIsDone) {
  Initialize();
  EXPECT_TRUE(Exchange(Json{{"jsonrpc", "2.0"}, {"id", 10}, {"method", "tools/call"}, {"params", CallParams()}}).empty())
      << "the answer comes when the script ends";
  EXPECT_TRUE(Exchange(Json{{"jsonrpc", "2.0"}, {"id", 11}, {"method", "tools/call"}, {"params", CallParams()}}).empty());
  EXPECT_EQ(server_->in_flight(), 2u);
  ASSERT_EQ(host_.calls.size(), 2u);
  EXPECT_NE(host_.calls[0].key, host_.calls[1].key);

  // Answered out of order, each under its own id.
  sent_.clear();
  host_.calls[1].done(FakeToolHost::Result("second"));
  ASSERT_EQ(sent_.size(), 1u);
  EXPECT_EQ(sent_[0]["id"], 11);
  EXPECT_EQ(sent_[0]["result"], FakeToolHost::Result("second"));
  host_.calls[0].done(FakeToolHost::Result("first"));
  ASSERT_EQ(sent_.size(), 2u);
  EXPECT_EQ(sent_[1]["id"], 10);
  EXPECT_EQ(server_->in_flight(), 0u);
  // A second done of the same call is dropped.
  host_.calls[0].done(FakeToolHost::Result("again"));
  EXPECT_EQ(sent_.size(), 2u);
}

TEST_F(McpServerTest, AnswerGivenBeforeCallToolReturnsIsSentOnce) {
  Initialize();
  std::vector<Json> out = Exchange(Json{{"jsonrpc", "2.0"}, {"id", 1}, {"method", "tools/call"}, {"params", CallParams("now")}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0]["result"], FakeToolHost::Result("now"));
  EXPECT_EQ(server_->in_flight(), 0u);
}

TEST_F(McpServerTest, UnknownToolIsInvalidParams) {
  Initialize();
  Json answer = Answer(3, "tools/call", CallParams("no_such_tool"));
  ExpectError(answer, 3, kInvalidParams);
  EXPECT_NE(answer["error"]["message"].get<std::string>().find("no_such_tool"), std::string::npos);
  EXPECT_EQ(server_->in_flight(), 0u);
  // The id is free again.
  EXPECT_TRUE(Exchange(Json{{"jsonrpc", "2.0"}, {"id", 3}, {"method", "tools/call"}, {"params", CallParams()}}).empty());
  EXPECT_EQ(host_.calls.size(), 1u);
}

TEST_F(McpServerTest, BadCallParamsAreInvalidParams) {
  Initialize();
  ExpectError(Answer(1, "tools/call", Json::object()), 1, kInvalidParams);
  ExpectError(Answer(2, "tools/call", Json{{"name", 5}}), 2, kInvalidParams);
  ExpectError(Answer(3, "tools/call", Json{{"name", "run_script"}, {"arguments", "code"}}), 3, kInvalidParams);
  ExpectError(Answer(4, "tools/call", Json{{"name", "run_script"}, {"arguments", Json::array()}}), 4, kInvalidParams);
  EXPECT_TRUE(host_.calls.empty());
  // No arguments: an empty object.
  EXPECT_TRUE(Exchange(Json{{"jsonrpc", "2.0"}, {"id", 5}, {"method", "tools/call"}, {"params", {{"name", "run_script"}}}}).empty());
  ASSERT_EQ(host_.calls.size(), 1u);
  EXPECT_EQ(host_.calls[0].arguments, Json::object());
}

TEST_F(McpServerTest, DuplicateInFlightIdsAreRefused) {
  Initialize();
  EXPECT_TRUE(Exchange(Json{{"jsonrpc", "2.0"}, {"id", "x"}, {"method", "tools/call"}, {"params", CallParams()}}).empty());
  ExpectError(Answer("x", "tools/call", CallParams()), "x", kInvalidRequest);
  EXPECT_EQ(host_.calls.size(), 1u);
  EXPECT_EQ(server_->in_flight(), 1u);
  // A number 1 and a string "1" are different ids.
  EXPECT_TRUE(Exchange(Json{{"jsonrpc", "2.0"}, {"id", 1}, {"method", "tools/call"}, {"params", CallParams()}}).empty());
  EXPECT_TRUE(Exchange(Json{{"jsonrpc", "2.0"}, {"id", "1"}, {"method", "tools/call"}, {"params", CallParams()}}).empty());
  EXPECT_EQ(host_.calls.size(), 3u);
  // Once the first is answered, its id may be used again.
  sent_.clear();
  host_.calls[0].done(FakeToolHost::Result("done"));
  ASSERT_EQ(sent_.size(), 1u);
  EXPECT_EQ(sent_[0]["id"], "x");
  EXPECT_TRUE(Exchange(Json{{"jsonrpc", "2.0"}, {"id", "x"}, {"method", "tools/call"}, {"params", CallParams()}}).empty());
  EXPECT_EQ(host_.calls.size(), 4u);
  // The old call's late done does not answer the new call.
  sent_.clear();
  host_.calls[0].done(FakeToolHost::Result("stale"));
  EXPECT_TRUE(sent_.empty());
  host_.calls[3].done(FakeToolHost::Result("fresh"));
  ASSERT_EQ(sent_.size(), 1u);
  EXPECT_EQ(sent_[0]["result"], FakeToolHost::Result("fresh"));
}

// A host that throws is a bug of basal's: the client hears -32603 and the server goes on, with the
// request's id free again (a leaked entry would refuse that id forever, and each throw would keep
// one more).
TEST_F(McpServerTest, AHostThatThrowsIsAnInternalErrorAndLeavesNothingBehind) {
  Initialize();
  ExpectError(Answer(9, "tools/call", CallParams("throws")), 9, kInternalError);
  EXPECT_EQ(server_->in_flight(), 0u);
  EXPECT_TRUE(Exchange(Json{{"jsonrpc", "2.0"}, {"id", 9}, {"method", "tools/call"}, {"params", CallParams()}}).empty())
      << "id 9 is free again";
  EXPECT_EQ(host_.calls.size(), 1u);
}

// --- notifications/cancelled ----------------------------------------------------------------------

TEST_F(McpServerTest, CancelledCallIsStoppedAndNeverAnswered) {
  Initialize();
  EXPECT_TRUE(Exchange(Json{{"jsonrpc", "2.0"}, {"id", 5}, {"method", "tools/call"}, {"params", CallParams()}}).empty());
  EXPECT_TRUE(Exchange(Json{{"jsonrpc", "2.0"}, {"id", "5"}, {"method", "tools/call"}, {"params", CallParams()}}).empty());
  ASSERT_EQ(host_.calls.size(), 2u);
  EXPECT_TRUE(Exchange(Json{{"jsonrpc", "2.0"},
                            {"method", "notifications/cancelled"},
                            {"params", {{"requestId", 5}, {"reason", "user gave up"}}}})
                  .empty());
  ASSERT_EQ(host_.cancelled.size(), 1u);
  EXPECT_EQ(host_.cancelled[0], host_.calls[0].key);
  EXPECT_EQ(server_->in_flight(), 1u);
  sent_.clear();
  host_.calls[0].done(FakeToolHost::Result("too late"));
  EXPECT_TRUE(sent_.empty()) << sent_[0].dump();
  // The string id "5" still runs and is answered.
  host_.calls[1].done(FakeToolHost::Result("ok"));
  ASSERT_EQ(sent_.size(), 1u);
  EXPECT_EQ(sent_[0]["id"], "5");

  // Cancelling what does not run (unknown, finished, twice, malformed) does nothing.
  for (const Json& params : {Json{{"requestId", 5}}, Json{{"requestId", 99}}, Json::object(), Json{{"requestId", nullptr}}}) {
    EXPECT_TRUE(Exchange(Json{{"jsonrpc", "2.0"}, {"method", "notifications/cancelled"}, {"params", params}}).empty());
  }
  EXPECT_EQ(host_.cancelled.size(), 1u);
}

TEST_F(McpServerTest, CancelAllStopsEveryRunningCall) {
  Initialize();
  for (int id = 1; id <= 3; ++id) {
    Exchange(Json{{"jsonrpc", "2.0"}, {"id", id}, {"method", "tools/call"}, {"params", CallParams()}});
  }
  ASSERT_EQ(host_.calls.size(), 3u);
  server_->CancelAll();
  EXPECT_EQ(server_->in_flight(), 0u);
  EXPECT_EQ(host_.cancelled.size(), 3u);
  sent_.clear();
  for (auto& call : host_.calls) call.done(FakeToolHost::Result("late"));
  EXPECT_TRUE(sent_.empty());
}

TEST_F(McpServerTest, ADoneAfterTheServerIsGoneDoesNothing) {
  Initialize();
  Exchange(Json{{"jsonrpc", "2.0"}, {"id", 1}, {"method", "tools/call"}, {"params", CallParams()}});
  ASSERT_EQ(host_.calls.size(), 1u);
  server_.reset();
  sent_.clear();
  host_.calls[0].done(FakeToolHost::Result("late"));
  EXPECT_TRUE(sent_.empty());
}

// --- malformed messages ------------------------------------------------------------------------------

TEST_F(McpServerTest, ParseErrorHasIdNull) {
  for (const char* text : {"{", "not json", "", "{\"jsonrpc\": \"2.0\", \"id\": 1,}", "\xff\xfe"}) {
    std::vector<Json> out = ExchangeText(text);
    ASSERT_EQ(out.size(), 1u) << text;
    ExpectError(out[0], nullptr, kParseError);
  }
  // A NUL byte ends nothing early: the message is malformed.
  std::string with_nul = R"({"jsonrpc":"2.0","id":1,"method":"ping"})";
  with_nul += '\0';
  with_nul += "x";
  std::vector<Json> out = ExchangeText(with_nul);
  ASSERT_EQ(out.size(), 1u);
  ExpectError(out[0], nullptr, kParseError);
}

TEST_F(McpServerTest, BatchesAreRefused) {
  Initialize();
  std::vector<Json> out = Exchange(Json::array({Json{{"jsonrpc", "2.0"}, {"id", 1}, {"method", "tools/call"}, {"params", CallParams()}},
                                                Json{{"jsonrpc", "2.0"}, {"id", 2}, {"method", "ping"}}}));
  ASSERT_EQ(out.size(), 1u);
  ExpectError(out[0], nullptr, kInvalidRequest);
  EXPECT_TRUE(host_.calls.empty());
}

TEST_F(McpServerTest, NotJsonRpcIsInvalidRequest) {
  for (const Json& message : {Json{{"id", 1}, {"method", "ping"}}, Json{{"jsonrpc", "1.0"}, {"id", 1}, {"method", "ping"}},
                              Json{{"jsonrpc", 2}, {"id", 1}, {"method", "ping"}}, Json("ping"), Json(5), Json(nullptr)}) {
    std::vector<Json> out = Exchange(message);
    ASSERT_EQ(out.size(), 1u) << message.dump();
    ExpectError(out[0], nullptr, kInvalidRequest);
  }
  // A method that is not a string: the id is still echoed.
  std::vector<Json> out = Exchange(Json{{"jsonrpc", "2.0"}, {"id", 4}, {"method", 5}});
  ASSERT_EQ(out.size(), 1u);
  ExpectError(out[0], 4, kInvalidRequest);
  // An id that is neither a string nor an integer.
  for (const Json& id : {Json(nullptr), Json(1.5), Json::array({1}), Json{{"a", 1}}, Json(true)}) {
    std::vector<Json> bad = Exchange(Json{{"jsonrpc", "2.0"}, {"id", id}, {"method", "ping"}});
    ASSERT_EQ(bad.size(), 1u) << id.dump();
    ExpectError(bad[0], nullptr, kInvalidRequest);
  }
}

TEST_F(McpServerTest, UnknownMethodIsMethodNotFound) {
  Initialize();
  for (const char* method : {"resources/list", "prompts/get", "tools/delete", "", "initialize/again"}) {
    ExpectError(Answer(1, method), 1, kMethodNotFound);
  }
}

TEST_F(McpServerTest, NotificationsAreNeverAnswered) {
  for (const char* method : {"notifications/initialized", "notifications/progress", "notifications/roots/list_changed",
                             "no/such/thing", "tools/call", "tools/list", "initialize", "ping"}) {
    EXPECT_TRUE(Exchange(Json{{"jsonrpc", "2.0"}, {"method", method}, {"params", CallParams()}}).empty()) << method;
  }
  EXPECT_TRUE(host_.calls.empty()) << "a tools/call without an id is nobody's call";
  EXPECT_EQ(host_.lists, 0);
  EXPECT_FALSE(server_->initialized()) << "an initialize without an id opens no session";
  // A client's responses (basal sends no requests) are dropped too.
  EXPECT_TRUE(Exchange(Json{{"jsonrpc", "2.0"}, {"id", 1}, {"result", Json::object()}}).empty());
  EXPECT_TRUE(Exchange(Json{{"jsonrpc", "2.0"}, {"id", 1}, {"error", {{"code", -1}, {"message", "x"}}}}).empty());
}

TEST_F(McpServerTest, DeeplyNestedMessagesAreRefusedWithoutCrashing) {
  for (size_t depth : {size_t{1000}, size_t{100000}}) {
    std::vector<Json> out = ExchangeText(std::string(depth, '[') + std::string(depth, ']'));
    ASSERT_EQ(out.size(), 1u) << depth;
    EXPECT_TRUE(out[0].contains("error")) << depth;
    std::string nested;
    for (size_t i = 0; i < depth; ++i) nested += "{\"a\":";
    nested += "1" + std::string(depth, '}');
    out = ExchangeText(R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_script","arguments":)" + nested +
                       "}}");
    ASSERT_EQ(out.size(), 1u) << depth;
    ExpectError(out[0], nullptr, kParseError);
  }
  EXPECT_TRUE(host_.calls.empty());
  // The server still serves.
  EXPECT_EQ(Answer(2, "ping")["result"], Json::object());
}

TEST_F(McpServerTest, IdsAreEchoedExactly) {
  Initialize();
  const std::vector<Json> ids = {Json("abc"), Json(""), Json("1"), Json("\xc3\xa9\xe2\x80\xa8 \"q\""), Json(0), Json(-5),
                                 Json(9007199254740993ll), Json(18446744073709551615ull), Json(-9223372036854775807ll - 1)};
  for (const Json& id : ids) {
    Json ping = Answer(id, "ping");
    EXPECT_EQ(ping["id"].dump(), id.dump());
    Json error = Answer(id, "no/such");
    EXPECT_EQ(error["id"], id) << id.dump();
    EXPECT_EQ(error["id"].dump(), id.dump());
    EXPECT_TRUE(Exchange(Json{{"jsonrpc", "2.0"}, {"id", id}, {"method", "tools/call"}, {"params", CallParams()}}).empty());
    ASSERT_FALSE(host_.calls.empty());
    sent_.clear();
    host_.calls.back().done(FakeToolHost::Result("r"));
    ASSERT_EQ(sent_.size(), 1u) << id.dump();
    EXPECT_EQ(sent_[0]["id"].dump(), id.dump());
  }
}

}  // namespace
}  // namespace basal::mcp
