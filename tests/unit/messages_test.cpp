#include "protocol/messages.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "protocol/frame.h"

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

// A frame as the worker spells it may be read by a path of its own; the same frame with one space
// after its `{` takes the general path. Both must accept and refuse every case alike, with the same
// error; `same` compares what both read of an accepted one.
template <typename Message, typename Same>
void ExpectOwnAndGeneralPathsAgree(const std::vector<std::string>& cases, Same same) {
  for (const std::string& own : cases) {
    const std::string general = "{ " + own.substr(1);
    WorkerMessage a, b;
    std::string ea, eb;
    const bool ra = ParseWorkerMessage(own, a, ea);
    const bool rb = ParseWorkerMessage(general, b, eb);
    ASSERT_EQ(ra, rb) << own.substr(0, 160) << ": " << ea << " / " << eb;
    EXPECT_EQ(ea, eb) << own.substr(0, 160);
    if (ra) same(std::get<Message>(a), std::get<Message>(b), own);
  }
}

// A host call as the worker spells it is read by a path of its own (only its arguments are parsed
// into a tree).
TEST(MessagesTest, ACallInTheWorkersSpellingParsesAsTheGeneralPathDoes) {
  const std::string too_deep = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  std::string many = "[";
  for (size_t i = 0; i < kMaxMessageValues; ++i) many += i ? ",0" : "0";
  many += "]";
  const std::string head = R"({"type":"call","activation":1,"id":2,"name":"http.fetch","args":)";
  const std::vector<std::string> cases = {
      head + R"({"url":"http://127.0.0.1:8080/item","method":"GET","headers":[],"body":null,"redirect":"follow"}})",
      head + "null}",
      head + "true}",
      head + "false}",
      head + "-3}",
      head + "-0}",
      head + "123456789012345}",
      head + "1234567890123456}",
      head + "1.5}",
      head + "1e3}",
      head + "01}",
      head + "-}",
      head + "nul}",
      head + R"( {"a": [1, "}"]} })",
      R"({"type":"call","activation":9007199254740991,"id":9007199254740991,"name":"kv.get","args":1})",
      R"({"type":"call","activation":9007199254740992,"id":1,"name":"kv.get","args":1})",
      R"({"type":"call","activation":0,"id":1,"name":"kv.get","args":1})",
      R"({"type":"call","activation":1,"id":01,"name":"kv.get","args":1})",
      R"({"type":"call","activation":1,"id":1,"name":"","args":1})",
      R"({"type":"call","activation":1,"id":1,"name":")" + std::string(128, 'n') + R"(","args":1})",
      R"({"type":"call","activation":1,"id":1,"name":")" + std::string(129, 'n') + R"(","args":1})",
      R"({"type":"call","activation":1,"id":1,"name":"k\u0076.get","args":1})",
      R"({"type":"call","activation":1,"id":1,"name":"caf)" "\xc3\xa9" R"(","args":1})",
      R"({"type":"call","activation":1,"id":1,"name":"bad)" "\xff" R"(","args":1})",
      head + "}",
      head + "1}}",
      head + "1,\"args\":2}",
      head + "1,\"x\":2}",
      head + "1} ",
      head + "[1,2}",
      head + "\"a\xff\"}",
      head + "\xEF\xBB\xBF" "1}",
      head + std::string("\"a") + '\0' + "\"}",
      head + too_deep + "}",
      head + many + "}",
      R"({"type":"call","activation":1,"id":1,"args":1,"name":"kv.get"})",
      R"({"type":"call","activation":1,"id":1,"name":"kv.get"})",
  };
  ExpectOwnAndGeneralPathsAgree<Call>(cases, [](const Call& ca, const Call& cb, const std::string& own) {
    EXPECT_EQ(ca.activation, cb.activation) << own;
    EXPECT_EQ(ca.id, cb.id) << own;
    EXPECT_EQ(ca.name, cb.name) << own;
    EXPECT_EQ(ca.args, cb.args) << own;
    EXPECT_EQ(ca.args.type(), cb.args.type()) << own;  // a number with a minus is signed, as the parser reads it
    EXPECT_EQ(ca.frame_bytes + 1, cb.frame_bytes) << own;  // the space
  });
  WorkerMessage m;
  std::string e;
  ASSERT_TRUE(ParseWorkerMessage(cases[0], m, e)) << e;
  const Call& c = std::get<Call>(m);
  EXPECT_EQ(c.activation, 1);
  EXPECT_EQ(c.id, 2);
  EXPECT_EQ(c.name, "http.fetch");
  EXPECT_EQ(c.args.at("method"), "GET");
  EXPECT_EQ(c.frame_bytes, cases[0].size());
}

// A result's `done` as the worker spells it is read by a path of its own (no tree for the message).
TEST(MessagesTest, AResultDoneInTheWorkersSpellingParsesAsTheGeneralPathDoes) {
  const std::string deep_ok = std::string(kMaxJsonDepth - 1, '[') + std::string(kMaxJsonDepth - 1, ']');
  const std::string too_deep = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  std::string many = "[";
  for (size_t i = 0; i < kMaxMessageValues; ++i) many += i ? ",0" : "0";
  many += "]";
  const std::vector<std::string> cases = {
      R"({"type":"done","activation":1,"cpu_us":0,"ok":1})",
      R"({"type":"done","activation":42,"cpu_us":123,"ok":null})",
      R"({"type":"done","activation":7,"cpu_us":5,"ok":{"a":[1,2,{"b":"c}"}],"d":"\u0041\"}"}})",
      R"({"type":"done","activation":7,"cpu_us":5,"ok": "spaced" })",
      R"({"type":"done","activation":9007199254740991,"cpu_us":9007199254740991,"ok":true})",
      R"({"type":"done","activation":9007199254740992,"cpu_us":0,"ok":1})",
      R"({"type":"done","activation":1,"cpu_us":99999999999999999,"ok":1})",
      R"({"type":"done","activation":0,"cpu_us":0,"ok":1})",
      R"({"type":"done","activation":01,"cpu_us":0,"ok":1})",
      R"({"type":"done","activation":1,"cpu_us":-1,"ok":1})",
      R"({"type":"done","activation":1,"cpu_us":1.5,"ok":1})",
      R"({"type":"done","activation":1,"cpu_us":1e3,"ok":1})",
      R"({"type":"done","activation":1,"cpu_us":0,"ok":})",
      R"({"type":"done","activation":1,"cpu_us":0,"ok":1}})",
      R"({"type":"done","activation":1,"cpu_us":0,"ok":1,"x":2})",
      R"({"type":"done","activation":1,"cpu_us":0,"ok":1,"ok":2})",
      R"({"type":"done","activation":1,"cpu_us":0,"ok":1,"error":{}})",
      R"({"type":"done","activation":1,"cpu_us":0,"ok":1} )",
      R"({"type":"done","activation":1,"cpu_us":0,"ok":"unterminated})",
      R"({"type":"done","activation":1,"cpu_us":0,"ok":[1,2})",
      std::string(R"({"type":"done","activation":1,"cpu_us":0,"ok":"a)") + '\0' + R"("})",
      R"({"type":"done","activation":1,"cpu_us":0,"ok":)" + deep_ok + "}",
      R"({"type":"done","activation":1,"cpu_us":0,"ok":)" + too_deep + "}",
      R"({"type":"done","activation":1,"cpu_us":0,"ok":)" + many + "}",
      R"({"type":"done","activation":1,"cpu_us":0,"caught_budget_failure":true,"ok":1})",
      R"({"type":"done","activation":1,"cpu_us":0,"ok":[1],"caught_budget_failure":true})",
      // Scalars the fast path reads without the parser, and near misses it leaves to the parser.
      R"({"type":"done","activation":1,"cpu_us":0,"ok":0})",
      R"({"type":"done","activation":1,"cpu_us":0,"ok":-0})",
      R"({"type":"done","activation":1,"cpu_us":0,"ok":-7})",
      R"({"type":"done","activation":1,"cpu_us":0,"ok":false})",
      R"({"type":"done","activation":1,"cpu_us":0,"ok":999999999999999})",
      R"({"type":"done","activation":1,"cpu_us":0,"ok":9999999999999999})",
      R"({"type":"done","activation":1,"cpu_us":0,"ok":18446744073709551615})",
      R"({"type":"done","activation":1,"cpu_us":0,"ok":-9223372036854775808})",
      R"({"type":"done","activation":1,"cpu_us":0,"ok":01})",
      R"({"type":"done","activation":1,"cpu_us":0,"ok":-})",
      R"({"type":"done","activation":1,"cpu_us":0,"ok":1.0})",
      R"({"type":"done","activation":1,"cpu_us":0,"ok":nul})",
      R"({"type":"done","activation":1,"cpu_us":0,"ok":truex})",
  };
  ExpectOwnAndGeneralPathsAgree<Done>(cases, [](const Done& da, const Done& db, const std::string& own) {
    EXPECT_EQ(da.activation, db.activation) << own;
    EXPECT_EQ(da.cpu_us, db.cpu_us) << own;
    EXPECT_EQ(da.ok, db.ok) << own;
    EXPECT_EQ(da.result, db.result) << own;
    EXPECT_EQ(da.result.type(), db.result.type()) << own;  // == calls 1u and 1 equal
    EXPECT_EQ(da.caught_budget_failure, db.caught_budget_failure) << own;
  });
  // The ones the worker writes are accepted, with their values.
  const Done d = std::get<Done>(MustParse(cases[2]));
  EXPECT_EQ(d.activation, 7);
  EXPECT_EQ(d.cpu_us, 5);
  EXPECT_EQ(d.result["d"], "A\"}");
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

// Issue 25 point 10: a frame of tiny values ("{},{},...") parsed into a tree of twenty to thirty
// times its size. The values are counted in the text first, and a frame past kMaxMessageValues is
// refused before anything is built.
TEST(MessagesTest, AFrameOfTooManyValuesIsRefusedBeforeItIsParsed) {
  EXPECT_EQ(CountJsonValues(R"({"a":[1,-2.5e3,true,null,"x\"y",{}],"b":{"c":false}})"), 13u)
      << "each object, array, string (names included), number and literal is one value";
  EXPECT_EQ(CountJsonValues(R"("[1,2,{}]")"), 1u) << "nothing inside a string counts";
  EXPECT_EQ(CountJsonValues("[ 12345 , 6 ]"), 3u);
  // A call whose arguments are kMaxMessageValues empty objects: about 3 MB of text, refused by name.
  std::string args = "[";
  for (size_t i = 0; i < kMaxMessageValues; ++i) args += i ? ",{}" : "{}";
  args += "]";
  const std::string frame = R"({"type":"call","activation":1,"id":1,"name":"x","args":)" + args + "}";
  WorkerMessage m;
  std::string error;
  EXPECT_FALSE(ParseWorkerMessage(frame, m, error));
  EXPECT_NE(error.find("JSON of more than " + std::to_string(kMaxMessageValues) + " values"), std::string::npos)
      << error;
  EXPECT_NE(error.find("kMaxMessageValues"), std::string::npos) << error;
  EXPECT_LT(CountJsonValues(frame, 1000), 1010u) << "counting stops soon after the limit it is given";
  // Allowed: the most a field may hold, in its message (the writer's check, FitsInMessage, is what
  // the worker applies before it sends).
  std::string fits = "[";
  for (size_t i = 0; i + 1 < kMaxFieldValues; ++i) fits += i ? ",0" : "0";
  fits += "]";
  std::string why;
  ASSERT_TRUE(FitsInMessage(fits, why)) << why;
  EXPECT_TRUE(ParseWorkerMessage(R"({"type":"call","activation":1,"id":1,"name":"x","args":)" + fits + "}", m, error))
      << error;
  EXPECT_EQ(std::get<Call>(m).args.size(), kMaxFieldValues - 1);
  EXPECT_FALSE(FitsInMessage(fits.substr(0, fits.size() - 1) + ",0,0]", why));
  EXPECT_NE(why.find("more than " + std::to_string(kMaxFieldValues) + " JSON values"), std::string::npos) << why;
  // A result the parent would send is held to the same count by the worker's reader.
  ParentMessage pm;
  EXPECT_FALSE(ParseParentMessage(BuildResultOk(1, 1, args), pm, error));
  EXPECT_NE(error.find("kMaxMessageValues"), std::string::npos) << error;
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

// ParsePlainScalar reads what it takes exactly as the parser does (type included: a number with a
// minus is signed, one without unsigned), and leaves everything else to it.
TEST(MessagesTest, APlainScalarReadsAsTheParserReadsIt) {
  const std::vector<std::string> taken = {"null", "true", "false", "0", "-0", "7", "-7", "999999999999999",
                                          "-999999999999999", "100000000000000"};
  const std::vector<std::string> left = {"",     "nul",   "nulll", "True", " 1",  "1 ",  "01",   "-01",  "-",
                                         "--1",  "+1",    "1.0",   "1e3",  "0x1", "\"1\"", "[1]", "1,2",
                                         "9999999999999999", "18446744073709551616", std::string("1\0", 2)};
  for (const std::string& text : taken) {
    Json fast;
    ASSERT_TRUE(ParsePlainScalar(text, fast)) << text;
    const Json parsed = Json::parse(text);
    EXPECT_EQ(fast, parsed) << text;
    EXPECT_EQ(fast.type(), parsed.type()) << text;
    EXPECT_EQ(DumpJson(fast), parsed.dump()) << text;
  }
  for (const std::string& text : left) {
    Json fast;
    EXPECT_FALSE(ParsePlainScalar(text, fast)) << text;
  }
}

// DumpJson writes a scalar without dump's serializer, and writes it as dump does.
TEST(MessagesTest, DumpJsonWritesEveryValueAsDumpDoes) {
  const std::vector<Json> values = {nullptr,
                                    true,
                                    false,
                                    Json(0u),
                                    Json(-0),
                                    Json(std::numeric_limits<uint64_t>::max()),
                                    Json(std::numeric_limits<int64_t>::min()),
                                    Json(std::numeric_limits<int64_t>::max()),
                                    Json(-1),
                                    Json(1.5),
                                    Json(-0.0),
                                    Json("a \"quoted\" \u00e9"),
                                    Json::array({1, "x", nullptr}),
                                    Json::object({{"k", {1, 2}}})};
  for (const Json& v : values) EXPECT_EQ(DumpJson(v), v.dump()) << v.dump();
  EXPECT_EQ(DumpJson(Json(std::string("\xff"))), "\"\xef\xbf\xbd\"");  // invalid UTF-8 replaced, not thrown
}

// AppendJsonString writes a string as DumpJson does, after what `out` held: plain ASCII as it is,
// everything else (quotes, backslashes, control bytes, DEL, UTF-8, invalid bytes) through DumpJson.
TEST(MessagesTest, AppendJsonStringWritesAStringAsDumpJsonDoes) {
  for (const std::string& s : {std::string(), std::string("run_7"), std::string("https://x.test/a?b=1&c=%20"),
                              std::string("a \"q\""), std::string("back\\slash"), std::string("tab\there"),
                              std::string("nul\0byte", 8), std::string("del\x7f"), std::string("caf\xc3\xa9"),
                              std::string("bad\xff")}) {
    std::string out = "held";
    AppendJsonString(out, s);
    EXPECT_EQ(out, "held" + DumpJson(Json(s))) << s;
  }
}

// The parent writes each activate frame into its output buffer in place: the same bytes as the
// built message in a frame, after whatever the buffer held.
TEST(MessagesTest, AnActivateFrameIsAppendedAsTheMessageIsBuilt) {
  for (const auto& [id, input] : std::vector<std::pair<int64_t, std::string>>{
           {1, "null"}, {42, R"({"a":[1,2]})"}, {kMaxMessageInteger, "\"x\""}}) {
    std::string out = "held";
    AppendActivateFrame(out, id, input);
    const std::string message = R"({"type":"activate","activation":)" + std::to_string(id) + R"(,"input":)" + input + "}";
    EXPECT_EQ(out, "held" + EncodeFrame(message));
    EXPECT_EQ(BuildActivate(id, input), message);
    FrameDecoder decoder;
    decoder.Feed(out.data() + 4, out.size() - 4);
    std::string payload;
    ASSERT_EQ(decoder.Next(payload), FrameDecoder::Status::kFrame);
    ParentMessage m;
    std::string error;
    ASSERT_TRUE(ParseParentMessage(payload, m, error)) << error;
    EXPECT_EQ(std::get<Activate>(m).activation, id);
    EXPECT_EQ(std::get<Activate>(m).input, Json::parse(input));
  }
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
  Load l{"f.js", "export default () => 1", "flow", 100, 1 << 20, 1 << 16, {}, std::nullopt};
  ASSERT_TRUE(ParseParentMessage(BuildLoad(l), m, error)) << error;
  EXPECT_EQ(std::get<Load>(m).source, l.source);
}

// --- load's "tools": the bindings of a codemode script's `tools` object ---------------------------

Load CodemodeLoad(std::vector<ToolBinding> tools) {
  return Load{"run_script.js", "export default () => 1", "codemode", 100, 1 << 20, 1 << 16, std::move(tools), std::nullopt};
}

std::string LoadFailure(const Json& tools) {
  Json load = Json::parse(BuildLoad(CodemodeLoad({})));
  load["tools"] = tools;
  ParentMessage m;
  std::string error;
  EXPECT_FALSE(ParseParentMessage(load.dump(), m, error)) << load.dump();
  return error;
}

TEST(MessagesTest, LoadToolsRoundTrip) {
  const std::vector<ToolBinding> tools = {{"kv", "get", "kv.get"},
                                          {"fs", "read_text_file", "mcp.fs.read_text_file"},
                                          {"fs", "a.b", "mcp.fs.a.b"},
                                          {"__proto__", "constructor", "mcp.__proto__.constructor"},
                                          {"g\xc3\xa9", "m\"\\n", "x"}};
  ParentMessage m;
  std::string error;
  ASSERT_TRUE(ParseParentMessage(BuildLoad(CodemodeLoad(tools)), m, error)) << error;
  const Load& load = std::get<Load>(m);
  ASSERT_EQ(load.tools.size(), tools.size());
  for (size_t i = 0; i < tools.size(); ++i) {
    EXPECT_EQ(load.tools[i].group, tools[i].group) << i;
    EXPECT_EQ(load.tools[i].member, tools[i].member) << i;
    EXPECT_EQ(load.tools[i].name, tools[i].name) << i;
  }
  EXPECT_EQ(load.profile, "codemode");
  EXPECT_EQ(Json::parse(BuildLoad(CodemodeLoad(tools)))["tools"][1], Json::array({"fs", "read_text_file", "mcp.fs.read_text_file"}));
}

TEST(MessagesTest, AFlowsLoadFrameIsUnchangedByTools) {
  const Load flow{"f.js", "export default () => 1", "flow", 100, 1 << 20, 1 << 16, {}, std::nullopt};
  EXPECT_EQ(BuildLoad(flow),
            R"({"cpu_ms":100,"flow":"f.js","heap_bytes":1048576,"profile":"flow","source":"export default () => 1",)"
            R"("stack_bytes":65536,"type":"load"})");
  // Parsed without "tools": none.
  ParentMessage m;
  std::string error;
  ASSERT_TRUE(ParseParentMessage(BuildLoad(flow), m, error)) << error;
  EXPECT_TRUE(std::get<Load>(m).tools.empty());
  // An empty array is accepted too, and is none.
  Json load = Json::parse(BuildLoad(flow));
  load["tools"] = Json::array();
  ASSERT_TRUE(ParseParentMessage(load.dump(), m, error)) << error;
  EXPECT_TRUE(std::get<Load>(m).tools.empty());
}

TEST(MessagesTest, LoadToolsBadShapesAreRefused) {
  for (const Json& tools : {Json(nullptr), Json("kv.get"), Json::object(), Json(3), Json::parse(R"({"kv": ["get"]})")}) {
    const std::string error = LoadFailure(tools);
    EXPECT_NE(error.find("\"tools\""), std::string::npos) << tools.dump() << " -> " << error;
  }
  for (const char* tools : {R"([["kv", "get"]])", R"([["kv", "get", "kv.get", "x"]])", R"([["kv", 1, "kv.get"]])",
                            R"([[null, "get", "kv.get"]])", R"([["kv", "get", {"n": 1}]])", R"([null])", R"(["kv.get"])",
                            R"([{"group": "kv", "member": "get", "name": "kv.get"}])", R"([["kv", "get", "kv.get"], []])"}) {
    const std::string error = LoadFailure(Json::parse(tools));
    EXPECT_NE(error.find("[group, member, host-call name]"), std::string::npos) << tools << " -> " << error;
  }
}

TEST(MessagesTest, LoadToolsAreBounded) {
  std::vector<ToolBinding> tools;
  for (size_t i = 0; i < kMaxToolBindings; ++i) tools.push_back({"g", "m" + std::to_string(i), "g.m" + std::to_string(i)});
  ParentMessage m;
  std::string error;
  ASSERT_TRUE(ParseParentMessage(BuildLoad(CodemodeLoad(tools)), m, error)) << error;
  EXPECT_EQ(std::get<Load>(m).tools.size(), kMaxToolBindings);
  tools.push_back({"g", "one_more", "g.one_more"});
  EXPECT_FALSE(ParseParentMessage(BuildLoad(CodemodeLoad(tools)), m, error));
  EXPECT_NE(error.find("at most " + std::to_string(kMaxToolBindings)), std::string::npos) << error;
}

TEST(MessagesTest, BindingForGroupsDownstreamToolsByServer) {
  auto expect = [](const std::string& name, const std::string& group, const std::string& member) {
    const ToolBinding b = BindingFor(name);
    EXPECT_EQ(b.group, group) << name;
    EXPECT_EQ(b.member, member) << name;
    EXPECT_EQ(b.name, name);
  };
  expect("kv.get", "kv", "get");
  expect("http.fetch", "http", "fetch");
  expect("mail.send.now", "mail", "send.now");
  expect("mcp.fs.read_text_file", "fs", "read_text_file");
  expect("mcp.fs.a.b", "fs", "a.b");
  expect("mcp.github.search_issues", "github", "search_issues");
  expect("log", "log", "call");
  expect("mcpx.fs", "mcpx", "fs");  // only the family "mcp." is grouped by server
}

// --- durable runs: load's "durable" and a result's "clock_us" -------------------------------------

constexpr const char* kSeedHex = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

DurableStart ASeed(int64_t clock_us) {
  DurableStart d;
  d.clock_us = clock_us;
  for (size_t i = 0; i < d.seed.size(); ++i) d.seed[i] = static_cast<uint8_t>(i);
  return d;
}

Load DurableLoad(int64_t clock_us) {
  Load l{"f.js", "export default () => 1", "flow", 100, 1 << 20, 1 << 16, {}, std::nullopt};
  l.durable = ASeed(clock_us);
  return l;
}

// The error ParseParentMessage gives for load's "durable" set to `durable`.
std::string DurableFailure(const Json& durable) {
  Json load = Json::parse(BuildLoad(DurableLoad(0)));
  load["durable"] = durable;
  ParentMessage m;
  std::string error;
  EXPECT_FALSE(ParseParentMessage(load.dump(), m, error)) << load.dump();
  return error;
}

TEST(MessagesTest, DurableLoadRoundTripsWithItsExactShape) {
  const Load l = DurableLoad(1767225600123456);
  const Json sent = Json::parse(BuildLoad(l));
  EXPECT_EQ(sent["durable"], Json::parse(R"({"clock_us": 1767225600123456, "seed": ")" + std::string(kSeedHex) + "\"}"));
  ParentMessage m;
  std::string error;
  ASSERT_TRUE(ParseParentMessage(BuildLoad(l), m, error)) << error;
  const Load& got = std::get<Load>(m);
  ASSERT_TRUE(got.durable.has_value());
  EXPECT_EQ(got.durable->clock_us, 1767225600123456);
  EXPECT_EQ(got.durable->seed, l.durable->seed);
  EXPECT_EQ(SeedHex(got.durable->seed), kSeedHex);
  // Every byte value survives the hex (high nibbles included).
  Load all = DurableLoad(0);
  for (size_t i = 0; i < all.durable->seed.size(); ++i) all.durable->seed[i] = static_cast<uint8_t>(255 - 7 * i);
  ASSERT_TRUE(ParseParentMessage(BuildLoad(all), m, error)) << error;
  EXPECT_EQ(std::get<Load>(m).durable->seed, all.durable->seed);
  // The bounds of clock_us are accepted.
  for (const int64_t clock : {int64_t{0}, kMaxMessageInteger}) {
    ASSERT_TRUE(ParseParentMessage(BuildLoad(DurableLoad(clock)), m, error)) << error;
    EXPECT_EQ(std::get<Load>(m).durable->clock_us, clock);
  }
}

TEST(MessagesTest, ALoadWithoutDurableIsNotDurable) {
  ParentMessage m;
  std::string error;
  const Load flow{"f.js", "export default () => 1", "flow", 100, 1 << 20, 1 << 16, {}, std::nullopt};
  EXPECT_FALSE(Json::parse(BuildLoad(flow)).contains("durable"));
  ASSERT_TRUE(ParseParentMessage(BuildLoad(flow), m, error)) << error;
  EXPECT_FALSE(std::get<Load>(m).durable.has_value());
}

TEST(MessagesTest, EveryMalformedDurableIsRefusedNamingWhatIsWrong) {
  const std::string seed = kSeedHex;
  struct Case {
    Json durable;
    const char* says;
  };
  std::string upper = seed;
  upper[10] = 'A';
  std::string non_hex = seed;
  non_hex[63] = 'g';
  const Case cases[] = {
      {Json(nullptr), "must be an object"},
      {Json(seed), "must be an object"},
      {Json::array({0, seed}), "must be an object"},
      {Json::object(), "missing field \"clock_us\""},
      {{{"seed", seed}}, "missing field \"clock_us\""},
      {{{"clock_us", 5}}, "missing field \"seed\""},
      {{{"clock_us", 5}, {"seed", seed}, {"extra", 1}}, "unexpected field \"extra\""},
      {{{"clock_us", 5}, {"seed", seed}, {"Seed", seed}}, "unexpected field \"Seed\""},
      {{{"clock_us", -1}, {"seed", seed}}, "field \"clock_us\" is -1, outside 0 to 9007199254740991"},
      {{{"clock_us", kMaxMessageInteger + 1}, {"seed", seed}}, "outside 0 to 9007199254740991"},
      {{{"clock_us", std::numeric_limits<uint64_t>::max()}, {"seed", seed}}, "outside 0 to 9007199254740991"},
      {{{"clock_us", 1.5}, {"seed", seed}}, "field \"clock_us\" must be an integer"},
      {{{"clock_us", "5"}, {"seed", seed}}, "field \"clock_us\" must be an integer"},
      {{{"clock_us", 5}, {"seed", 7}}, "field \"seed\" must be a string"},
      {{{"clock_us", 5}, {"seed", ""}}, "64 lowercase hex digits (32 bytes), not 0 characters"},
      {{{"clock_us", 5}, {"seed", seed.substr(0, 62)}}, "not 62 characters"},
      {{{"clock_us", 5}, {"seed", seed + "00"}}, "not 66 characters"},
      {{{"clock_us", 5}, {"seed", upper}}, "character 11 is not one"},
      {{{"clock_us", 5}, {"seed", non_hex}}, "character 64 is not one"},
      {{{"clock_us", 5}, {"seed", " " + seed.substr(1)}}, "character 1 is not one"},
  };
  for (const Case& c : cases) {
    const std::string error = DurableFailure(c.durable);
    EXPECT_NE(error.find("\"durable\""), std::string::npos) << c.durable.dump() << " -> " << error;
    EXPECT_NE(error.find(c.says), std::string::npos) << c.durable.dump() << " -> " << error;
  }
  // An exponent is no integer either (nlohmann reads 1e3 as a float).
  Json load = Json::parse(BuildLoad(DurableLoad(0)));
  std::string text = load.dump();
  const size_t at = text.find("\"clock_us\":0");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 12, "\"clock_us\":1e3");
  ParentMessage m;
  std::string error;
  EXPECT_FALSE(ParseParentMessage(text, m, error)) << text;
  EXPECT_NE(error.find("must be an integer"), std::string::npos) << error;
}

TEST(MessagesTest, AResultCarriesItsClockWhenGivenOne) {
  ParentMessage m;
  std::string error;
  EXPECT_EQ(BuildResultOk(3, 7, R"({"a":1})", 1767225600123456),
            R"({"type":"result","activation":3,"id":7,"clock_us":1767225600123456,"ok":{"a":1}})");
  ASSERT_TRUE(ParseParentMessage(BuildResultOk(3, 7, R"({"a":1})", 1767225600123456), m, error)) << error;
  const CallResult& ok = std::get<CallResult>(m);
  EXPECT_TRUE(ok.ok);
  EXPECT_EQ(ok.value, Json::parse(R"({"a":1})"));
  EXPECT_EQ(ok.clock_us, 1767225600123456);
  EXPECT_EQ(Json::parse(BuildResultError(3, 8, "NotFound", "no", 42)),
            Json::parse(R"({"type":"result","activation":3,"id":8,"clock_us":42,"error":{"name":"NotFound","message":"no"}})"));
  ASSERT_TRUE(ParseParentMessage(BuildResultError(3, 8, "NotFound", "no", 42), m, error)) << error;
  EXPECT_EQ(std::get<CallResult>(m).clock_us, 42);
  EXPECT_EQ(std::get<CallResult>(m).error_name, "NotFound");
  // Without a clock: the frames of today, byte for byte, and no clock parsed.
  EXPECT_EQ(BuildResultOk(3, 7, "null"), R"({"type":"result","activation":3,"id":7,"ok":null})");
  EXPECT_FALSE(Json::parse(BuildResultError(3, 8, "NotFound", "no")).contains("clock_us"));
  ASSERT_TRUE(ParseParentMessage(BuildResultOk(3, 7, "null"), m, error)) << error;
  EXPECT_FALSE(std::get<CallResult>(m).clock_us.has_value());
  ASSERT_TRUE(ParseParentMessage(BuildResultOk(3, 7, "null", 0), m, error)) << error;
  EXPECT_EQ(std::get<CallResult>(m).clock_us, 0);
}

TEST(MessagesTest, BuildersSendAClockOutOfRangeAsItsNearerBound) {
  ParentMessage m;
  std::string error;
  ASSERT_TRUE(ParseParentMessage(BuildResultOk(1, 1, "null", -5), m, error)) << error;
  EXPECT_EQ(std::get<CallResult>(m).clock_us, 0);
  ASSERT_TRUE(ParseParentMessage(BuildResultError(1, 1, "E", "m", std::numeric_limits<int64_t>::max()), m, error)) << error;
  EXPECT_EQ(std::get<CallResult>(m).clock_us, kMaxMessageInteger);
  ASSERT_TRUE(ParseParentMessage(BuildLoad(DurableLoad(-1)), m, error)) << error;
  EXPECT_EQ(std::get<Load>(m).durable->clock_us, 0);
  ASSERT_TRUE(ParseParentMessage(BuildLoad(DurableLoad(std::numeric_limits<int64_t>::max())), m, error)) << error;
  EXPECT_EQ(std::get<Load>(m).durable->clock_us, kMaxMessageInteger);
}

// The parent's leave to poll (protocol's `poll`, src/worker/wait_spin.h): written only when true,
// in an activate by its builder and in a result by AddPollMember as the frame is written, read as a
// boolean and nothing else.
TEST(MessagesTest, APollMemberIsWrittenOnlyWhenTrueAndReadAsABoolean) {
  ParentMessage m;
  std::string error;
  EXPECT_EQ(BuildActivate(3, "1", true), R"({"type":"activate","activation":3,"poll":true,"input":1})");
  EXPECT_EQ(BuildActivate(3, "1"), R"({"type":"activate","activation":3,"input":1})");
  ASSERT_TRUE(ParseParentMessage(BuildActivate(3, R"({"a":1})", true), m, error)) << error;
  EXPECT_TRUE(std::get<Activate>(m).poll);
  EXPECT_EQ(std::get<Activate>(m).input, Json::parse(R"({"a":1})"));
  ASSERT_TRUE(ParseParentMessage(BuildActivate(3, "1"), m, error)) << error;
  EXPECT_FALSE(std::get<Activate>(m).poll);

  std::string ok = BuildResultOk(3, 7, R"({"a":1})", 42);
  AddPollMember(ok);
  EXPECT_EQ(ok, R"({"type":"result","activation":3,"id":7,"clock_us":42,"ok":{"a":1},"poll":true})");
  ASSERT_TRUE(ParseParentMessage(ok, m, error)) << error;
  const CallResult& r = std::get<CallResult>(m);
  EXPECT_TRUE(r.poll);
  EXPECT_TRUE(r.ok);
  EXPECT_EQ(r.value, Json::parse(R"({"a":1})"));
  EXPECT_EQ(r.clock_us, 42);
  std::string err = BuildResultError(3, 8, "NotFound", "no");
  AddPollMember(err);
  ASSERT_TRUE(ParseParentMessage(err, m, error)) << error;
  EXPECT_TRUE(std::get<CallResult>(m).poll);
  EXPECT_EQ(std::get<CallResult>(m).error_name, "NotFound");
  ASSERT_TRUE(ParseParentMessage(BuildResultOk(3, 7, "null"), m, error)) << error;
  EXPECT_FALSE(std::get<CallResult>(m).poll);
  std::string not_an_object = "[1]";
  AddPollMember(not_an_object);
  EXPECT_EQ(not_an_object, "[1]");

  for (const char* value : {"1", "0", "null", "\"true\"", "{}", "[]"}) {
    for (const std::string& text :
         {std::string(R"({"type":"activate","activation":1,"input":null,"poll":)") + value + "}",
          std::string(R"({"type":"result","activation":1,"id":1,"ok":null,"poll":)") + value + "}"}) {
      EXPECT_FALSE(ParseParentMessage(text, m, error)) << text;
      EXPECT_NE(error.find("\"poll\""), std::string::npos) << text << " -> " << error;
    }
  }
  // The `poll` message: its type alone.
  EXPECT_EQ(BuildPoll(), R"({"type":"poll"})");
  ASSERT_TRUE(ParseParentMessage(BuildPoll(), m, error)) << error;
  EXPECT_TRUE(std::holds_alternative<Poll>(m));
  EXPECT_FALSE(ParseParentMessage(R"({"type":"poll","activation":1})", m, error));
  EXPECT_NE(error.find("unexpected field \"activation\""), std::string::npos) << error;
  // poll belongs to activate and result only.
  Json load = Json::parse(BuildLoad(DurableLoad(0)));
  load["poll"] = true;
  EXPECT_FALSE(ParseParentMessage(load.dump(), m, error));
  EXPECT_NE(error.find("unexpected field \"poll\""), std::string::npos) << error;
}

TEST(MessagesTest, AMalformedResultClockIsRefused) {
  for (const char* clock : {"-1", "1.5", "1e3", "\"5\"", "null", "true", "{}", "9007199254740992", "18446744073709551616"}) {
    const std::string text = std::string(R"({"type":"result","activation":1,"id":1,"clock_us":)") + clock + R"(,"ok":null})";
    ParentMessage m;
    std::string error;
    EXPECT_FALSE(ParseParentMessage(text, m, error)) << text;
    EXPECT_NE(error.find("\"clock_us\""), std::string::npos) << text << " -> " << error;
  }
  // clock_us belongs to a result only.
  ParentMessage m;
  std::string error;
  EXPECT_FALSE(ParseParentMessage(R"({"type":"activate","activation":1,"input":null,"clock_us":5})", m, error));
  EXPECT_NE(error.find("unexpected field \"clock_us\""), std::string::npos) << error;
  Json load = Json::parse(BuildLoad(DurableLoad(0)));
  load["clock_us"] = 5;
  EXPECT_FALSE(ParseParentMessage(load.dump(), m, error));
  EXPECT_NE(error.find("unexpected field \"clock_us\""), std::string::npos) << error;
}

}  // namespace
}  // namespace basal::protocol
