#include "protocol/messages.h"

#include <gtest/gtest.h>

#include <limits>

namespace basal::protocol {
namespace {

WorkerMessage MustParse(const std::string& s) {
  WorkerMessage m;
  std::string error;
  EXPECT_TRUE(ParseWorkerMessage(s, m, error)) << error;
  return m;
}

std::string MustFail(const std::string& s) {
  WorkerMessage m;
  std::string error;
  EXPECT_FALSE(ParseWorkerMessage(s, m, error)) << s;
  return error;
}

TEST(MessagesTest, ParsesCall) {
  auto m = MustParse(R"({"type":"call","activation":3,"id":7,"name":"kv.get","args":{"key":"k"}})");
  auto& c = std::get<Call>(m);
  EXPECT_EQ(c.activation, 3);
  EXPECT_EQ(c.id, 7);
  EXPECT_EQ(c.name, "kv.get");
  EXPECT_EQ(c.args["key"], "k");
}

TEST(MessagesTest, ParsesDoneOkAndError) {
  auto ok = std::get<Done>(MustParse(R"({"type":"done","activation":1,"cpu_us":5,"ok":[1,2]})"));
  EXPECT_TRUE(ok.ok);
  EXPECT_EQ(ok.result, Json::array({1, 2}));
  auto err = std::get<Done>(MustParse(
      R"({"type":"done","activation":1,"cpu_us":5,"error":{"kind":"budget_exhausted","budget":"cpu","name":"InternalError","message":"m"}})"));
  EXPECT_FALSE(err.ok);
  EXPECT_EQ(err.error.budget, "cpu");
}

// A failed `loaded` may say where compiling stopped (`line`); nothing else may, and the line must
// be a line QuickJS can count (1 to 2^31 - 1).
TEST(MessagesTest, ALoadErrorMayCarryTheLineOfASyntaxErrorAndNothingElseMay) {
  auto l = std::get<Loaded>(MustParse(
      R"({"type":"loaded","ok":false,"error":{"kind":"script_error","name":"SyntaxError","message":"m","line":3}})"));
  EXPECT_FALSE(l.ok);
  EXPECT_EQ(l.error.line, 3);
  auto without = std::get<Loaded>(
      MustParse(R"({"type":"loaded","ok":false,"error":{"kind":"script_error","name":"Error","message":"m"}})"));
  EXPECT_EQ(without.error.line, 0) << "no line: not a compile error";
  auto highest = std::get<Loaded>(MustParse(
      R"({"type":"loaded","ok":false,"error":{"kind":"script_error","name":"SyntaxError","message":"m","line":2147483647}})"));
  EXPECT_EQ(highest.error.line, 2147483647);

  for (const char* bad : {"0", "-1", "2147483648", "1.5", "1e3", "\"3\"", "null", "9007199254740992"}) {
    const std::string frame =
        std::string(R"({"type":"loaded","ok":false,"error":{"kind":"script_error","name":"SyntaxError","message":"m","line":)") +
        bad + "}}";
    const std::string error = MustFail(frame);
    EXPECT_NE(error.find("\"line\""), std::string::npos) << bad << ": " << error;
  }
  EXPECT_EQ(MustFail(R"({"type":"loaded","ok":false,"error":{"kind":"budget_exhausted","budget":"memory","name":"InternalError","message":"m","line":3}})"),
            "a budget_exhausted error names no line");
  EXPECT_EQ(MustFail(R"({"type":"done","activation":1,"cpu_us":5,"error":{"kind":"script_error","name":"SyntaxError","message":"m","line":3}})"),
            "unexpected field \"line\"")
      << "only a load has a source line to name";
}

// nlohmann's reader stops at a NUL byte: without the check, what follows one went unread.
TEST(MessagesTest, RefusesANulByteAnywhere) {
  using namespace std::string_literals;
  EXPECT_EQ(MustFail(R"({"type":"loaded","ok":true})"s + '\0' + R"({"smuggled":1})"), "malformed JSON (a NUL byte)");
  EXPECT_EQ(MustFail("{\"type\":\"loaded\",\"ok\":true\0}"s), "malformed JSON (a NUL byte)");
  Json value;
  std::string error;
  EXPECT_FALSE(ParseJsonValue("null\0"s, value, error));
  EXPECT_TRUE(ParseJsonValue(R"("\u0000")", value, error)) << "an escaped NUL in a string is JSON";
}

TEST(MessagesTest, RefusesMalformedAndWrongTypes) {
  EXPECT_EQ(MustFail("{not json"), "malformed JSON");
  EXPECT_EQ(MustFail("[1]"), "payload is not a JSON object");
  EXPECT_EQ(MustFail(R"({"type":"launch"})"), "unknown message type \"launch\"");
  EXPECT_EQ(MustFail(R"({"type":"call","activation":"1","id":1,"name":"x","args":null})"),
            "field \"activation\" must be an integer");
  EXPECT_EQ(MustFail(R"({"type":"call","activation":1,"id":0,"name":"x","args":null})"),
            "field \"id\" is 0, outside 1 to 9007199254740991");
  EXPECT_EQ(MustFail(R"({"type":"call","activation":1,"id":1,"name":"x"})"), "missing field \"args\"");
  EXPECT_EQ(MustFail(R"({"type":"call","activation":1,"id":1,"name":"x","args":1,"extra":2})"),
            "unexpected field \"extra\"");
  EXPECT_EQ(MustFail(R"({"type":"done","activation":1,"cpu_us":0,"ok":1,"error":{}})"),
            "done needs exactly one of \"ok\" and \"error\"");
  EXPECT_NE(MustFail(R"({"type":"done","activation":1,"cpu_us":0,"error":{"kind":"budget_exhausted","budget":"disk","name":"a","message":"b"}})")
                .find("budget"),
            std::string::npos);
  EXPECT_EQ(MustFail(R"({"type":"call","activation":99999999999999999999,"id":1,"name":"x","args":1})"),
            "field \"activation\" must be an integer");
}

// Every integer a worker sends is read whole and refused outside its range: nothing is wrapped
// into a narrower type, rounded from a float, or clamped.
TEST(MessagesTest, IntegersOutsideTheirRangeAreRefusedNeverWrapped) {
  const std::string confinement = R"("os":"linux","engine":"e","test_hooks":false,"confinement":{})";
  // protocol: kept whole (the welcome check refuses anything but 1 by its real value).
  auto w = std::get<Welcome>(MustParse(R"({"type":"welcome","protocol":4294967297,"pid":5,)" + confinement + "}"));
  EXPECT_EQ(w.protocol, 4294967297);
  EXPECT_EQ(MustFail(R"({"type":"welcome","protocol":9007199254740992,"pid":5,)" + confinement + "}"),
            "field \"protocol\" is 9007199254740992, outside 0 to 9007199254740991");
  EXPECT_EQ(MustFail(R"({"type":"welcome","protocol":-1,"pid":5,)" + confinement + "}"),
            "field \"protocol\" is -1, outside 0 to 9007199254740991");
  // pid: a pid_t, so at most 2^31 - 1 (4294967301 would read as 5 in 32 bits).
  EXPECT_EQ(MustFail(R"({"type":"welcome","protocol":1,"pid":4294967301,)" + confinement + "}"),
            "field \"pid\" is 4294967301, outside 1 to 2147483647");
  EXPECT_EQ(std::get<Welcome>(MustParse(R"({"type":"welcome","protocol":1,"pid":2147483647,)" + confinement + "}")).pid,
            2147483647);
  // activation and call ids: 1 to 2^53 - 1.
  EXPECT_EQ(std::get<Call>(MustParse(R"({"type":"call","activation":4294967297,"id":9007199254740991,"name":"x","args":1})"))
                .activation,
            4294967297);
  EXPECT_EQ(MustFail(R"({"type":"call","activation":9007199254740992,"id":1,"name":"x","args":1})"),
            "field \"activation\" is 9007199254740992, outside 1 to 9007199254740991");
  EXPECT_EQ(MustFail(R"({"type":"call","activation":1,"id":18446744073709551615,"name":"x","args":1})"),
            "field \"id\" is 18446744073709551615, outside 1 to 9007199254740991");
  EXPECT_EQ(MustFail(R"({"type":"call","activation":1,"id":-4294967295,"name":"x","args":1})"),
            "field \"id\" is -4294967295, outside 1 to 9007199254740991");
  EXPECT_EQ(MustFail(R"({"type":"done","activation":-1,"cpu_us":0,"ok":1})"),
            "field \"activation\" is -1, outside 1 to 9007199254740991");
  // cpu_us: 0 to 2^53 - 1; a fraction or an exponent is no integer.
  EXPECT_EQ(std::get<Done>(MustParse(R"({"type":"done","activation":1,"cpu_us":9007199254740991,"ok":1})")).cpu_us,
            9007199254740991);
  EXPECT_EQ(MustFail(R"({"type":"done","activation":1,"cpu_us":-1,"ok":1})"),
            "field \"cpu_us\" is -1, outside 0 to 9007199254740991");
  EXPECT_EQ(MustFail(R"({"type":"done","activation":1,"cpu_us":9223372036854775807,"ok":1})"),
            "field \"cpu_us\" is 9223372036854775807, outside 0 to 9007199254740991");
  EXPECT_EQ(MustFail(R"({"type":"done","activation":1,"cpu_us":18446744073709551615,"ok":1})"),
            "field \"cpu_us\" is 18446744073709551615, outside 0 to 9007199254740991");
  EXPECT_EQ(MustFail(R"({"type":"done","activation":1,"cpu_us":1.5,"ok":1})"), "field \"cpu_us\" must be an integer");
  EXPECT_EQ(MustFail(R"({"type":"done","activation":1,"cpu_us":1e3,"ok":1})"), "field \"cpu_us\" must be an integer");
}

TEST(MessagesTest, IntegerInReadsExactIntegersOnly) {
  EXPECT_EQ(IntegerIn(Json(7), 0, 7), 7);
  EXPECT_EQ(IntegerIn(Json(4294967303LL), 0, 7), std::nullopt);
  EXPECT_EQ(IntegerIn(Json(18446744073709551615ULL), 0, std::numeric_limits<int64_t>::max()), std::nullopt);
  EXPECT_EQ(IntegerIn(Json(-1), 0, 7), std::nullopt);
  EXPECT_EQ(IntegerIn(Json(7.0), 0, 7), std::nullopt);
  EXPECT_EQ(IntegerIn(Json("7"), 0, 7), std::nullopt);
  EXPECT_EQ(IntegerIn(Json(true), 0, 7), std::nullopt);
}

TEST(MessagesTest, RefusesHostileNestingWithoutRecursing) {
  std::string deep(100000, '[');
  deep += std::string(100000, ']');
  Json out;
  std::string error;
  EXPECT_FALSE(ParseJsonValue(deep, out, error));
  EXPECT_NE(error.find("nested deeper"), std::string::npos);
  // Brackets inside strings do not count.
  EXPECT_TRUE(ParseJsonValue("\"" + std::string(1000, '[') + "\"", out, error)) << error;
}

TEST(MessagesTest, AFieldValueLeavesRoomForItsMessage) {
  auto nested = [](int n) { return std::string(n, '[') + std::string(n, ']'); };
  std::string why;
  EXPECT_TRUE(FitsInMessage(nested(kMaxJsonDepth - 1), why)) << why;
  EXPECT_FALSE(FitsInMessage(nested(kMaxJsonDepth), why));
  EXPECT_NE(why.find("nested deeper than 199"), std::string::npos) << why;
  // The message built around a fitting value parses, with the value intact.
  ParentMessage m;
  std::string error;
  ASSERT_TRUE(ParseParentMessage(BuildActivate(3, nested(kMaxJsonDepth - 1)), m, error)) << error;
  ASSERT_TRUE(ParseParentMessage(BuildResultOk(3, 1, nested(kMaxJsonDepth - 1)), m, error)) << error;
  const std::string big = "\"" + std::string(kMaxFieldBytes, 'x') + "\"";
  EXPECT_FALSE(FitsInMessage(big, why));
  EXPECT_NE(why.find("above the limit"), std::string::npos) << why;
  EXPECT_TRUE(FitsInMessage(big.substr(0, kMaxFieldBytes - 1) + "\"", why)) << why;
}

TEST(MessagesTest, InvalidUtf8IsRefusedNotThrown) {
  EXPECT_EQ(MustFail("{\"type\":\"call\",\"activation\":1,\"id\":1,\"name\":\"\xff\",\"args\":1}"), "malformed JSON");
}

TEST(MessagesTest, ParentMessagesRoundTrip) {
  ParentMessage m;
  std::string error;
  ASSERT_TRUE(ParseParentMessage(BuildResultError(4, 2, "PermissionDenied", "no"), m, error)) << error;
  auto& r = std::get<CallResult>(m);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.error_name, "PermissionDenied");
  ASSERT_TRUE(ParseParentMessage(BuildActivate(9, R"({"a":1})"), m, error)) << error;
  EXPECT_EQ(std::get<Activate>(m).input["a"], 1);
  Load l{"f.js", "export default () => 1", "flow", 100, 1 << 20, 1 << 16, {}};
  ASSERT_TRUE(ParseParentMessage(BuildLoad(l), m, error)) << error;
  EXPECT_EQ(std::get<Load>(m).source, l.source);
}

}  // namespace
}  // namespace basal::protocol
