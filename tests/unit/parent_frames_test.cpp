// The worker's reading of the parent's frames: the one large value of an `activate` or `result`
// comes out as JSON text, and every frame is held to protocol::ParseParentMessage's rules.
#include "worker/parent_frames.h"

#include <gtest/gtest.h>

#include <string>
#include <variant>
#include <vector>

namespace basal::worker {
namespace {

std::string At(std::string_view text, std::string_view key) {
  const auto span = FindTopLevelValue(text, key);
  return span ? std::string(text.substr(span->first, span->second - span->first)) : "<none>";
}

TEST(FindTopLevelValueTest, FindsEachKindOfValueAtTheTopLevelOnly) {
  const std::string t =
      R"( { "a" : 1 , "s": "x\"}]y", "n": null, "o": {"ok": [1, {"k": "}"}]}, "ok" : [ "[" , {"x": "\\"} ] } )";
  EXPECT_EQ(At(t, "a"), "1");
  EXPECT_EQ(At(t, "s"), R"("x\"}]y")");
  EXPECT_EQ(At(t, "n"), "null");
  EXPECT_EQ(At(t, "o"), R"({"ok": [1, {"k": "}"}]})");
  EXPECT_EQ(At(t, "ok"), R"([ "[" , {"x": "\\"} ])") << "the nested \"ok\" is not the top-level one";
  EXPECT_EQ(At(t, "k"), "<none>");
}

TEST(FindTopLevelValueTest, GivesUpOnWhatIsNotAnObjectItCanWalk) {
  for (const char* t : {"", "[1]", "{", R"({"a" 1})", R"({"a": )", R"({"a": "unterminated)", R"({"a": [1, 2})",
                        R"({"a": 1 "ok": 2})", R"({a: 1, "ok": 2})"})
    EXPECT_EQ(At(t, "ok"), "<none>") << t;
  EXPECT_EQ(At("{}", "ok"), "<none>");
  EXPECT_EQ(At(R"({"o\u006b": 1})", "ok"), "<none>") << "an escaped key is left to the full parser";
}

// Caught by fuzz/parent_message_fuzzer.cpp's check that both readers agree: the scanner took the
// first of two "input" members, the shared parser the last, so the worker ran with another input.
TEST(FindTopLevelValueTest, ARepeatedKeyOrAnyEscapedKeyIsLeftToTheFullParser) {
  EXPECT_EQ(At(R"({"ok": 1, "ok": 2})", "ok"), "<none>");
  EXPECT_EQ(At(R"({"ok": 1, "o\u006b": 2})", "ok"), "<none>") << "an escaped key may spell the same name";
  EXPECT_EQ(At(R"({"ok": 1, "x\"": 2})", "ok"), "<none>");
  EXPECT_EQ(At(R"({"ok": 1, "okay": 2})", "ok"), "1");
  EXPECT_EQ(At(R"({"ok": 1)", "ok"), "<none>") << "an object that never closes is the parser's to refuse";
}

// The worker's own JSON check of a result or an input (in place of nlohmann's accept(), which
// reads the text a character at a time through its lexer: about a third of the worker's frame
// handling per host call) accepts exactly what the shared parser does.
TEST(IsJsonTextTest, AcceptsWhatTheSharedParserAccepts) {
  const std::vector<std::string> texts = {
      "", " ", "1", " 1 ", "-0", "01", "-", "1.", ".5", "+1", "1e", "1e+", "1E-5", "1.5e300", "1e400", "-1e400",
      "1e-400", "123456789012345678", "1234567890123456789012345", std::string(400, '9'), "0.1e-2", "00", "1 2",
      "true", "false", "null", "tru", "nulls", "True", "NaN", "Infinity", "\"\"", "\"a\\\"b\"", "\"\\/\\b\\f\\n\\r\\t\"",
      "\"\\x\"", "\"\\u00e9\"", "\"\\u00G9\"", "\"\\ud83d\\ude00\"", "\"\\ud83d\"", "\"\\ude00\"", "\"\\ud83dx\"",
      "\"\\ud83d\\u0041\"", "\"tab\\there\"", "\"raw\ttab\"", "\"\\u0000\"", "\"\x7f\"", "\"caf\xc3\xa9\"",
      "\"\xc3\"", "\"\xc0\xaf\"", "\"\xe0\x80\xaf\"", "\"\xed\xa0\x80\"", "\"\xf4\x90\x80\x80\"", "\"\xf0\x9f\x98\x80\"",
      "\"\xff\"", "\"unterminated", "[]", "{}", "[ ]", "{ }", "[1,]", "[,1]", "[1 2]", "[1,2]", "[[[]]]", "[[]",
      "{\"a\":1}", "{\"a\" : [1, {\"b\": null}] }", "{\"a\":1,}", "{\"a\"}", "{\"a\":}", "{a:1}", "{\"a\":1 \"b\":2}",
      "{\"a\":1}}", "{\"a\":1,\"a\":2}", "[\"x\",{\"y\":[true,false,null,-1.5e-3]}]", "\r\n\t[1]\r\n\t", "[1]\f",
  };
  for (const std::string& t : texts)
    EXPECT_EQ(IsJsonText(t), protocol::Json::accept(t.begin(), t.end())) << "text: " << t;
}

TEST(IsJsonTextTest, RefusesALeadingByteOrderMarkThatTheWholeFrameWouldNotAccept) {
  EXPECT_TRUE(protocol::Json::accept(std::string("\xEF\xBB\xBF" "1")));  // nlohmann skips it
  EXPECT_FALSE(IsJsonText("\xEF\xBB\xBF" "1"));
  protocol::ParentMessage msg;
  std::string value, error;
  const std::string frame = "{\"type\":\"result\",\"activation\":1,\"id\":2,\"ok\":\xEF\xBB\xBF" "1}";
  EXPECT_FALSE(protocol::ParseParentMessage(frame, msg, error));
  EXPECT_FALSE(ParseParentFrame(frame, msg, value, error)) << "the worker read a frame the shared parser refuses";
}

// Found by fuzz/parent_message_fuzzer.cpp: a value followed by NUL bytes passed the value check
// (nlohmann stops reading at a NUL) while the shared parser refused the frame.
TEST(ParseParentFrameTest, ANulByteIsRefusedAsTheSharedParserRefusesIt) {
  using namespace std::string_literals;
  const std::string frame = R"({"type":"result","activation":17,"id":3,"ok":null)"s + std::string(8, '\0') + "}";
  protocol::ParentMessage msg;
  std::string value, error;
  EXPECT_FALSE(protocol::ParseParentMessage(frame, msg, error));
  EXPECT_FALSE(ParseParentFrame(frame, msg, value, error));
  EXPECT_EQ(error, "malformed JSON (a NUL byte)");
}

TEST(ParseParentFrameTest, ARepeatedKeyIsReadAsTheSharedParserReadsIt) {
  const std::string frame = R"({"type":"activate","activation":3,"input":1,"input":{"n":2}})";
  protocol::ParentMessage shared;
  std::string error;
  ASSERT_TRUE(protocol::ParseParentMessage(frame, shared, error)) << error;
  protocol::ParentMessage msg;
  std::string value;
  ASSERT_TRUE(ParseParentFrame(frame, msg, value, error)) << error;
  ASSERT_NE(std::get_if<protocol::Activate>(&msg), nullptr);
  EXPECT_EQ(protocol::Json::parse(value), std::get<protocol::Activate>(shared).input);
  EXPECT_EQ(value, R"({"n":2})");
}

TEST(ParseParentFrameTest, AnActivationsInputComesOutAsText) {
  protocol::ParentMessage msg;
  std::string value, error;
  ASSERT_TRUE(ParseParentFrame(R"({"type":"activate","activation":7,"input":{"name":"x","list":[1,2]}})", msg,
                               value, error))
      << error;
  auto* a = std::get_if<protocol::Activate>(&msg);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->activation, 7);
  EXPECT_TRUE(a->input.is_null());
  EXPECT_EQ(value, R"({"name":"x","list":[1,2]})");
}

TEST(ParseParentFrameTest, AResultsValueComesOutAsTextAndAnErrorAsFields) {
  protocol::ParentMessage msg;
  std::string value, error;
  ASSERT_TRUE(ParseParentFrame(R"({"activation":3,"id":4,"ok":["a",{"b":null}],"type":"result"})", msg, value, error))
      << error;
  auto* r = std::get_if<protocol::CallResult>(&msg);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->id, 4);
  EXPECT_TRUE(r->ok);
  EXPECT_EQ(value, R"(["a",{"b":null}])");

  ASSERT_TRUE(ParseParentFrame(
      R"({"type":"result","activation":3,"id":5,"error":{"name":"PermissionDenied","message":"no"}})", msg, value,
      error))
      << error;
  r = std::get_if<protocol::CallResult>(&msg);
  ASSERT_NE(r, nullptr);
  EXPECT_FALSE(r->ok);
  EXPECT_EQ(r->error_name, "PermissionDenied");
  EXPECT_TRUE(value.empty());
}

TEST(ParseParentFrameTest, AKeyTheScannerCannotSeeIsParsedWhole) {
  protocol::ParentMessage msg;
  std::string value, error;
  ASSERT_TRUE(ParseParentFrame(R"({"type":"result","activation":3,"id":4,"o\u006b":[1, 2]})", msg, value, error))
      << error;
  auto* r = std::get_if<protocol::CallResult>(&msg);
  ASSERT_NE(r, nullptr);
  EXPECT_TRUE(r->value.is_null());
  EXPECT_EQ(value, "[1,2]");
}

TEST(ParseParentFrameTest, FramesThatBreakTheProtocolAreRefused) {
  struct Case {
    std::string frame;
    const char* error;
  };
  const Case cases[] = {
      {R"({"type":"result","activation":3,"id":4,"ok":[1,}})", "field \"ok\": malformed JSON"},
      {std::string(R"({"type":"result","activation":3,"id":4,"ok":")") + '\xff' + "\"}", "field \"ok\": malformed JSON"},
      {R"({"type":"activate","activation":3,"input":tru})", "field \"input\": malformed JSON"},
      {R"({"type":"result","activation":3,"id":4,"ok":1,"error":{"name":"a","message":"b"}})", "exactly one"},
      {R"({"type":"activate","activation":3,"input":1,"extra":2})", "extra"},
      {R"({"type":"activate","activation":3,"ok":1})", "unexpected field \"ok\""},
      {R"({"type":"load","flow":"f","source":"","profile":"flow","cpu_ms":1,"heap_bytes":1,"stack_bytes":1,"input":1})",
       "input"},
      {R"({"type":"result","activation":0,"id":4,"ok":1})", "activation"},
      {R"({"type":"result","activation":3,"id":4,"ok":1)", "malformed JSON"},
  };
  for (const Case& c : cases) {
    protocol::ParentMessage msg;
    std::string value, error;
    EXPECT_FALSE(ParseParentFrame(c.frame, msg, value, error)) << c.frame;
    EXPECT_NE(error.find(c.error), std::string::npos) << c.frame << " -> " << error;
  }
}

TEST(ParseParentFrameTest, AValueNestedDeeperThanAFieldMayBeIsRefused) {
  const std::string deep = std::string(protocol::kMaxJsonDepth, '[') + std::string(protocol::kMaxJsonDepth, ']');
  protocol::ParentMessage msg;
  std::string value, error;
  EXPECT_FALSE(ParseParentFrame(R"({"type":"activate","activation":3,"input":)" + deep + "}", msg, value, error));
  EXPECT_NE(error.find("nested deeper"), std::string::npos) << error;
  const std::string ok_depth =
      std::string(protocol::kMaxJsonDepth - 1, '[') + std::string(protocol::kMaxJsonDepth - 1, ']');
  EXPECT_TRUE(ParseParentFrame(R"({"type":"activate","activation":3,"input":)" + ok_depth + "}", msg, value, error))
      << error;
  EXPECT_EQ(value, ok_depth);
}

// A durable worker's results carry the answer's clock beside the value the worker cuts out.
TEST(ParseParentFrameTest, AResultsClockIsReadBesideItsValueText) {
  protocol::ParentMessage msg;
  std::string value, error;
  ASSERT_TRUE(ParseParentFrame(protocol::BuildResultOk(3, 4, R"({"k":[1,2]})", 1767225600123456), msg, value, error))
      << error;
  auto* r = std::get_if<protocol::CallResult>(&msg);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->clock_us, 1767225600123456);
  EXPECT_EQ(value, R"({"k":[1,2]})");
  // Before or after the value, and on an error.
  ASSERT_TRUE(ParseParentFrame(R"({"type":"result","activation":3,"id":5,"ok":7,"clock_us":9})", msg, value, error))
      << error;
  EXPECT_EQ(std::get<protocol::CallResult>(msg).clock_us, 9);
  EXPECT_EQ(value, "7");
  ASSERT_TRUE(ParseParentFrame(protocol::BuildResultError(3, 6, "NotFound", "no", 11), msg, value, error)) << error;
  EXPECT_EQ(std::get<protocol::CallResult>(msg).clock_us, 11);
  EXPECT_TRUE(value.empty());
  // None sent, none read.
  ASSERT_TRUE(ParseParentFrame(protocol::BuildResultOk(3, 7, "1"), msg, value, error)) << error;
  EXPECT_FALSE(std::get<protocol::CallResult>(msg).clock_us.has_value());
  // A bad clock is the shared parser's refusal, value or not.
  for (const char* frame : {R"({"type":"result","activation":3,"id":4,"clock_us":-1,"ok":1})",
                            R"({"type":"result","activation":3,"id":4,"clock_us":1.5,"ok":{"a":1}})",
                            R"({"type":"result","activation":3,"id":4,"clock_us":"1","error":{"name":"a","message":"b"}})"}) {
    EXPECT_FALSE(ParseParentFrame(frame, msg, value, error)) << frame;
    EXPECT_NE(error.find("\"clock_us\""), std::string::npos) << frame << " -> " << error;
  }
}

// A host call's answer, as the parent builds it, is read without a tree (the common case); every
// frame near that shape reads exactly as the shared parser reads it: accepted with the same fields
// and value, or refused by both. What the direct reading does not take goes the general way.
TEST(ParseParentFrameTest, AnAnswerReadsAsTheSharedParserReadsItNearItsUsualShape) {
  const std::string frames[] = {
      protocol::BuildResultOk(3, 4, R"({"k":[1,2]})"),
      protocol::BuildResultOk(3, 4, "null", 0),
      protocol::BuildResultOk(9007199254740991, 9007199254740991, "\"x\"", 9007199254740991),
      R"(  {"ok" : 1 , "id":2,"activation":3,"type":"result"} )",
      "\t{\"type\":\"result\",\"activation\":3,\"id\":4,\"ok\":[]}\r\n",
      R"({"type":"result","activation":3,"id":4,"ok":1,"id":5})",                  // repeated: the last wins
      R"({"type":"res\u0075lt","activation":3,"id":4,"ok":1})",                   // an escape in a value
      R"({"type":"result","activation":3,"i\u0064":4,"ok":1})",                   // an escape in a key
      R"({"type":"result","activation":3,"id":4.0,"ok":1})",                      // not an integer
      R"({"type":"result","activation":3,"id":4e0,"ok":1})",
      R"({"type":"result","activation":3,"id":04,"ok":1})",                       // a leading zero: not JSON
      R"({"type":"result","activation":3,"id":-4,"ok":1})",
      R"({"type":"result","activation":3,"id":0,"ok":1})",                        // below the range
      R"({"type":"result","activation":3,"id":9007199254740992,"ok":1})",         // above it
      R"({"type":"result","activation":3,"id":99999999999999999999,"ok":1})",
      R"({"type":"result","activation":3,"id":4,"clock_us":-0,"ok":1})",
      R"({"type":"result","activation":3,"id":4,"clock_us":0,"ok":1})",
      R"({"type":"result","activation":3,"id":4,"ok":1} x)",                      // after the object
      R"({"type":"result","activation":3,"id":4,"ok":1}})",
      R"({"type":"result","activation":3,"id":4,"ok":1,})",
      R"({"type":"result","activation":3,"id":4,"ok":1 2})",
      R"({"type":"result","activation":3,"id":4})",                               // no ok
      R"({"type":"result","activation":3,"ok":1})",                               // no id
      R"({"type":"result","id":4,"ok":1})",
      R"({"activation":3,"id":4,"ok":1})",
      R"({"type":"Result","activation":3,"id":4,"ok":1})",
      R"({"type":"result","activation":3,"id":4,"ok":1,"extra":2})",
      R"({"type":"result","activation":"3","id":4,"ok":1})",
      R"({"type":"result","activation":3,"id":4,"ok":[1,})",
      R"({"type":"result","activation":3,"id":4,"ok":tru})",
      // The parent's leave to poll (protocol's `poll`): a boolean, anywhere, at most once read directly.
      R"({"type":"result","activation":3,"id":4,"ok":1,"poll":true})",
      R"({"type":"result","activation":3,"id":4,"poll":false,"ok":{"a":1}})",
      R"({"type":"result","activation":3,"id":4,"ok":1,"poll":true,"poll":false})",  // repeated: the last wins
      R"({"type":"result","activation":3,"id":4,"ok":1,"poll":1})",                  // not a boolean
      R"({"type":"result","activation":3,"id":4,"ok":1,"poll":"true"})",
      R"({"type":"result","activation":3,"id":4,"ok":1,"poll":tru})",
      R"({"type":"result","activation":3,"id":4,"error":{"name":"a","message":"b"},"poll":true})",
      "\xef\xbb\xbf{\"type\":\"result\",\"activation\":3,\"id\":4,\"ok\":1}",  // a byte-order mark
  };
  for (const std::string& frame : frames) {
    protocol::ParentMessage shared, read;
    std::string shared_error, value, error;
    const bool shared_ok = protocol::ParseParentMessage(frame, shared, shared_error);
    ASSERT_EQ(ParseParentFrame(frame, read, value, error), shared_ok) << frame << " -> " << error << shared_error;
    if (!shared_ok) {
      EXPECT_FALSE(error.empty()) << frame;
      continue;
    }
    const auto& s = std::get<protocol::CallResult>(shared);
    const auto& r = std::get<protocol::CallResult>(read);
    EXPECT_EQ(r.activation, s.activation) << frame;
    EXPECT_EQ(r.id, s.id) << frame;
    EXPECT_EQ(r.clock_us, s.clock_us) << frame;
    EXPECT_EQ(r.poll, s.poll) << frame;
    if (!s.ok) continue;  // an error: the general way, as parsed
    ASSERT_TRUE(r.ok) << frame;
    EXPECT_TRUE(r.value.is_null()) << frame;
    EXPECT_EQ(protocol::Json::parse(value), s.value) << frame;
  }
}

// An activation's frame is read directly in the shape the parent builds it (BuildActivate); every
// frame near that shape reads exactly as the shared parser reads it: accepted with the same
// activation and input, or refused by both.
TEST(ParseParentFrameTest, AnActivationReadsAsTheSharedParserReadsItNearItsUsualShape) {
  const std::string frames[] = {
      protocol::BuildActivate(3, R"({"k":[1,2]})"),
      protocol::BuildActivate(1, "7"),
      protocol::BuildActivate(9007199254740991, "\"x\""),
      R"(  {"input" : 1 , "activation":3,"type":"activate"} )",
      "\t{\"type\":\"activate\",\"activation\":3,\"input\":[]}\r\n",
      R"({"type":"activate","activation":3,"input":1,"activation":5})",   // repeated: the last wins
      R"({"type":"activate","activation":3,"input":1,"input":2})",
      R"({"type":"activ\u0061te","activation":3,"input":1})",            // an escape in a value
      R"({"type":"activate","activ\u0061tion":3,"input":1})",            // an escape in a key
      R"({"type":"activate","activation":3.0,"input":1})",               // not an integer
      R"({"type":"activate","activation":3e0,"input":1})",
      R"({"type":"activate","activation":03,"input":1})",                // a leading zero: not JSON
      R"({"type":"activate","activation":-3,"input":1})",
      R"({"type":"activate","activation":0,"input":1})",                 // below the range
      R"({"type":"activate","activation":9007199254740992,"input":1})",  // above it
      R"({"type":"activate","activation":3,"input":1} x)",               // after the object
      R"({"type":"activate","activation":3,"input":1}})",
      R"({"type":"activate","activation":3,"input":1,})",
      R"({"type":"activate","activation":3})",                           // no input
      R"({"type":"activate","input":1})",                                // no activation
      R"({"activation":3,"input":1})",
      R"({"type":"Activate","activation":3,"input":1})",
      R"({"type":"activate","activation":3,"input":1,"extra":2})",
      R"({"type":"activate","activation":"3","input":1})",
      R"({"type":"activate","activation":3,"input":[1,})",
      R"({"type":"activate","activation":3,"input":nul})",
      // Scalars: a literal or a plain integer is checked without the parser; the rest with it.
      protocol::BuildActivate(3, "null"),
      protocol::BuildActivate(3, "false"),
      protocol::BuildActivate(3, "-0"),
      protocol::BuildActivate(3, "-999999999999999"),
      protocol::BuildActivate(3, "1234567890123456"),  // 16 digits: the parser's
      protocol::BuildActivate(3, "01"),
      protocol::BuildActivate(3, "-"),
      protocol::BuildActivate(3, "1.5"),
      protocol::BuildActivate(3, "nulll"),
      protocol::BuildActivate(3, "truefalse"),
      protocol::BuildActivate(3, "--1"),
      R"({"type":"activate","activation":3,"input":"\ud800"})",          // a lone surrogate
      protocol::BuildActivate(3, R"({"k":1})", true),
      R"({"type":"activate","activation":3,"input":1,"poll":false})",
      R"({"type":"activate","poll":true,"activation":3,"input":1,"poll":false})",  // repeated: the last wins
      R"({"type":"activate","activation":3,"input":1,"poll":0})",                  // not a boolean
      R"({"type":"activate","activation":3,"input":1,"poll":null})",
      "\xef\xbb\xbf{\"type\":\"activate\",\"activation\":3,\"input\":1}",  // a byte-order mark
  };
  for (const std::string& frame : frames) {
    protocol::ParentMessage shared, read;
    std::string shared_error, input, error;
    const bool shared_ok = protocol::ParseParentMessage(frame, shared, shared_error);
    ASSERT_EQ(ParseParentFrame(frame, read, input, error), shared_ok) << frame << " -> " << error << shared_error;
    if (!shared_ok) {
      EXPECT_FALSE(error.empty()) << frame;
      continue;
    }
    const auto& s = std::get<protocol::Activate>(shared);
    const auto& r = std::get<protocol::Activate>(read);
    EXPECT_EQ(r.activation, s.activation) << frame;
    EXPECT_EQ(r.poll, s.poll) << frame;
    EXPECT_TRUE(r.input.is_null()) << frame;
    EXPECT_EQ(protocol::Json::parse(input), s.input) << frame;
  }
}

// The parent's `poll` message (an idle worker's activate is coming) reads as the shared parser reads it.
TEST(ParseParentFrameTest, APollMessageIsReadWhole) {
  protocol::ParentMessage msg;
  std::string value, error;
  ASSERT_TRUE(ParseParentFrame(protocol::BuildPoll(), msg, value, error)) << error;
  EXPECT_TRUE(std::holds_alternative<protocol::Poll>(msg));
  EXPECT_TRUE(value.empty());
  EXPECT_FALSE(ParseParentFrame(R"({"type":"poll","input":1})", msg, value, error));
}

// A durable load's seed and clock come through the worker's reader whole.
TEST(ParseParentFrameTest, ADurableLoadIsReadWhole) {
  protocol::Load load{"f.js", "export default () => 1", "flow", 100, 1 << 20, 1 << 16, {}, std::nullopt};
  load.durable.emplace();
  load.durable->clock_us = 1767225600000000;
  load.durable->seed.fill(0xab);
  protocol::ParentMessage msg;
  std::string value, error;
  ASSERT_TRUE(ParseParentFrame(protocol::BuildLoad(load), msg, value, error)) << error;
  const auto& got = std::get<protocol::Load>(msg);
  ASSERT_TRUE(got.durable.has_value());
  EXPECT_EQ(got.durable->clock_us, 1767225600000000);
  EXPECT_EQ(got.durable->seed, load.durable->seed);
  EXPECT_TRUE(value.empty());
}

}  // namespace
}  // namespace basal::worker
