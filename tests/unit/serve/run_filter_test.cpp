// The filters of a run listing (run_filter.h): what GET /v1/runs and `basal runs` accept and refuse.
#include "serve/run_filter.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "serve/config.h"

namespace basal::serve {
namespace {

constexpr int64_t kNow = 1'733'324'822'869'000;  // 2024-12-04T15:07:02.869Z

TEST(RunFilter, DefaultsAreEveryRunAPageOfTheDefaultSize) {
  RunFilterParse p = ParseRunFilter({}, kNow, {.default_limit = 50, .max_limit = 500});
  ASSERT_TRUE(p.ok()) << p.message;
  EXPECT_EQ(p.query.limit, 50u);
  EXPECT_EQ(p.query.flow, "");
  EXPECT_FALSE(p.query.state.has_value());
  EXPECT_EQ(p.query.before_id, 0);
  EXPECT_EQ(p.query.since_unix_us, 0);
}

TEST(RunFilter, EachFilterBecomesTheQuery) {
  RunFilterText t{.flow = "hello", .outcome = "script_error", .state = "ended", .trigger = "webhook:github",
                  .since = "2h", .cursor = "120", .limit = "500"};
  RunFilterParse p = ParseRunFilter(t, kNow);
  ASSERT_TRUE(p.ok()) << p.message;
  EXPECT_EQ(p.query.flow, "hello");
  EXPECT_EQ(p.query.outcome, "script_error");
  EXPECT_EQ(p.query.state, RunState::kEnded);
  EXPECT_EQ(p.query.trigger, "webhook:github");
  EXPECT_EQ(p.query.since_unix_us, kNow - 2 * 3600 * 1'000'000LL);
  EXPECT_EQ(p.query.before_id, 120);
  EXPECT_EQ(p.query.limit, 500u);
  for (const char* outcome : {"ok", "missed", "skipped", "cancelled", "resume_exhausted", "diverged"})
    EXPECT_TRUE(ParseRunFilter({.outcome = outcome}, kNow).ok()) << outcome;
  for (const char* trigger : {"api", "webhook", "schedule", "mcp", "cli", "embedder", "schedule:nightly"})
    EXPECT_TRUE(ParseRunFilter({.trigger = trigger}, kNow).ok()) << trigger;
}

TEST(RunFilter, UnknownValuesAreRefusedWithTheirCode) {
  struct Case {
    RunFilterText text;
    const char* code;
  };
  const Case cases[] = {
      {{.flow = ""}, "bad_flow"},
      {{.flow = "two words"}, "bad_flow"},
      {{.outcome = "fine"}, "bad_outcome"},
      {{.outcome = ""}, "bad_outcome"},
      {{.state = "done"}, "bad_state"},
      {{.trigger = "cron"}, "bad_trigger"},
      {{.trigger = "webhook:"}, "bad_trigger"},
      {{.trigger = ":github"}, "bad_trigger"},
      {{.since = "yesterday"}, "bad_since"},
      {{.since = "2024-13-01"}, "bad_since"},
      {{.since = "2024-12-04T15:07:02"}, "bad_since"},  // RFC 3339 needs its offset
      {{.since = "-2h"}, "bad_since"},
      {{.cursor = "abc"}, "bad_cursor"},
      {{.cursor = "0"}, "bad_cursor"},
      {{.cursor = ""}, "bad_cursor"},
      {{.limit = "0"}, "bad_limit"},
      {{.limit = "501"}, "bad_limit"},
      {{.limit = "ten"}, "bad_limit"},
  };
  for (const Case& c : cases) {
    RunFilterParse p = ParseRunFilter(c.text, kNow);
    EXPECT_EQ(p.code, c.code) << p.message;
    EXPECT_FALSE(p.message.empty());
  }
  // The message lists what is accepted.
  EXPECT_NE(ParseRunFilter({.outcome = "fine"}, kNow).message.find("script_error"), std::string::npos);
}

TEST(RunFilter, SinceTakesRfc3339ADateOrADurationBack) {
  auto at = [](const char* text) { return ParseSinceText(text, kNow); };
  ASSERT_TRUE(at("2024-12-04T15:07:02Z"));
  EXPECT_EQ(*at("2024-12-04T15:07:02Z"), 1'733'324'822'000'000);
  EXPECT_EQ(*at("2024-12-04T15:07:02.869Z"), 1'733'324'822'869'000);
  EXPECT_EQ(*at("2024-12-04T17:07:02+02:00"), 1'733'324'822'000'000);
  EXPECT_EQ(*at("2024-12-04T13:07:02-02:00"), 1'733'324'822'000'000);
  EXPECT_EQ(*at("2024-12-04"), 1'733'270'400'000'000);
  EXPECT_EQ(*at("15m"), kNow - 15 * 60 * 1'000'000LL);
  EXPECT_EQ(*at("7d"), kNow - 7 * 86400 * 1'000'000LL);
  EXPECT_FALSE(at("2024-12-04T15:07Z"));
  EXPECT_FALSE(at("2024-12-04T15:07:02+0200"));
}

// ?wait=: a bare number is seconds, anything else ParseDuration's form. The short forms read
// directly (digits, then nothing, "s" or "ms") give what ParseDuration gives, at every length and
// with leading zeros, and every other text the same duration or the same error.
TEST(RunFilter, AWaitIsReadAsParseDurationReadsItABareNumberBeingSeconds) {
  const auto reference = [](const std::string& text) {
    const bool bare = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
    return ParseDuration(bare ? text + "s" : text);
  };
  std::vector<std::string> texts = {"", "s", "ms", "-1", "-1s", "1.5", "1,5s", "1h30m", "30S", "30 s", " 30",
                                    "30s ", "1m30s", "90m", "2d", "365d", "366d", "0", "0s", "0ms", "00", "1ss",
                                    "1mss", "1sms", "+1", "0x10"};
  for (const std::string digits : {"1", "9", "10", "30", "59", "60", "999", "1000", "99999", "999999", "1000000",
                                   "9999999", "31535999", "31536000", "31536001", "99999999999", "999999999999"}) {
    for (const std::string zeros : {"", "0", "000000000"}) {
      for (const std::string unit : {"", "s", "ms", "m", "h", "d", "x", "s5", "m5s"}) texts.push_back(zeros + digits + unit);
    }
  }
  for (const std::string& text : texts) {
    auto got = ParseWaitText(text);
    auto want = reference(text);
    ASSERT_EQ(static_cast<bool>(got), static_cast<bool>(want)) << "?wait=" << text;
    if (want) {
      EXPECT_EQ(got->count(), want->count()) << "?wait=" << text;
    } else {
      EXPECT_EQ(got.error().message, want.error().message) << "?wait=" << text;
      EXPECT_EQ(got.error().code, want.error().code) << "?wait=" << text;
    }
  }
  EXPECT_EQ(ParseWaitText("30")->count(), 30'000);
  EXPECT_EQ(ParseWaitText("30s")->count(), 30'000);
  EXPECT_EQ(ParseWaitText("1500ms")->count(), 1'500);
}

// A run's body read without the parser: when ReadPlainRunBody takes a body, the parser reads the
// same (an object whose one key is "input", the same value of the same JSON type); it takes the
// commonest bodies, and leaves every other to the parser.
TEST(RunFilter, APlainRunBodyIsWhatTheParserReads) {
  const auto parsed_input = [](const std::string& body) -> std::optional<nlohmann::json> {
    nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
    if (j.is_discarded() || !j.is_object() || j.size() != 1 || !j.contains("input")) return std::nullopt;
    return j["input"];
  };
  std::vector<std::string> values = {"null", "true", "false", "0", "-0", "1", "-1", "42", "007", "-007", "1.5", "1e3",
                                     "-", "--1", "+1", "123456789012345", "1234567890123456", "-123456789012345",
                                     "18446744073709551615", "\"1\"", "[1]", "{}", "nul", "truex", "True", "", "1 2",
                                     "1,", "1}"};
  std::vector<std::string> bodies;
  for (const std::string& v : values) {
    for (const std::string form : {"{\"input\":V}", "{\"input\": V}", " {\"input\" : V } ", "\t{\n\"input\"\r:\tV\n}\r\n",
                                    "{\"input\": V, \"x\": 1}", "{\"x\": 1, \"input\": V}", "{\"input\": V, \"input\": 2}",
                                    "{\"inputs\": V}", "{\"Input\": V}", "{\"\\u0069nput\": V}", "{'input': V}",
                                    "{\"input\": V}}", "{\"input\": V} x", "[{\"input\": V}]", "\xEF\xBB\xBF{\"input\": V}",
                                    "{\"input\": V", "\"input\": V}", "{\"input\" V}", "{\"input\": V}\f"}) {
      std::string body = form;
      body.replace(body.find('V'), 1, v);
      bodies.push_back(body);
    }
  }
  bodies.push_back("");
  bodies.push_back("{}");
  bodies.push_back("null");
  size_t taken = 0;
  for (const std::string& body : bodies) {
    nlohmann::json input = "unset";
    if (!ReadPlainRunBody(body, &input)) continue;
    ++taken;
    const auto want = parsed_input(body);
    ASSERT_TRUE(want.has_value()) << "taken, but the parser refuses or reads no lone \"input\": " << body;
    EXPECT_EQ(input.type(), want->type()) << body;
    EXPECT_EQ(input, *want) << body;
    EXPECT_EQ(input.dump(), want->dump()) << body;
  }
  EXPECT_GE(taken, 40u);
  for (const std::string body : {"{\"input\": 1}", "{\"input\":null}", " { \"input\" : -5 } ", "{\"input\": true}\n"}) {
    nlohmann::json input;
    EXPECT_TRUE(ReadPlainRunBody(body, &input)) << body;
  }
}

TEST(RunFilter, TheNextCursorIsTheLastRunOfAFullPage) {
  std::vector<RunRow> rows(3);
  rows[0].id = 9;
  rows[1].id = 7;
  rows[2].id = 4;
  EXPECT_EQ(NextRunCursor(rows, true), "4");
  EXPECT_EQ(NextRunCursor(rows, false), std::nullopt);
  EXPECT_EQ(NextRunCursor({}, true), std::nullopt);
  // The cursor reads back as the page's lower bound.
  RunFilterParse p = ParseRunFilter({.cursor = *NextRunCursor(rows, true)}, kNow);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p.query.before_id, 4);
}

}  // namespace
}  // namespace basal::serve

namespace basal::serve {
namespace {

// A reader that has the activations it is given, and nothing else.
class ActivationsReader : public JournalReader {
 public:
  std::vector<ActivationRow> activations;
  int reads = 0;
  Result<std::vector<ActivationRow>> Activations(std::optional<int64_t> id, size_t) override {
    ++reads;
    std::vector<ActivationRow> out;
    for (const ActivationRow& a : activations)
      if (id && a.id == *id) out.push_back(a);
    if (out.empty()) return MakeError(ErrorCode::kNotFound, "no such activation");
    return out;
  }
  Result<std::vector<CallRow>> Calls(int64_t) override { return std::vector<CallRow>{}; }
  Result<std::optional<ApprovalRow>> Approval(int64_t) override { return std::optional<ApprovalRow>(); }
  Result<std::vector<ApprovalRow>> Versions(ApprovalKind, const std::string&) override { return std::vector<ApprovalRow>{}; }
  Result<std::vector<ApprovalRow>> Names(ApprovalKind) override { return std::vector<ApprovalRow>{}; }
  Result<std::vector<ApprovalEvent>> Events(ApprovalKind, const std::string&) override {
    return std::vector<ApprovalEvent>{};
  }
  Result<std::optional<std::string>> Text(const std::string&) override { return std::optional<std::string>(); }
  Result<std::vector<RunRow>> ListRuns(const RunQuery&) override { return std::vector<RunRow>{}; }
  Result<std::optional<RunRow>> GetRun(int64_t) override { return std::optional<RunRow>(); }
  Result<std::vector<ActivationRow>> RunActivations(int64_t) override { return std::vector<ActivationRow>{}; }
  Result<std::vector<CallRow>> RunCalls(int64_t) override { return std::vector<CallRow>{}; }
  Result<std::vector<CallResolution>> Resolutions(int64_t) override { return std::vector<CallResolution>{}; }
  Result<std::vector<TokenRow>> ListTokens() override { return std::vector<TokenRow>{}; }
  Result<std::vector<KvAuditEntry>> KvAudit(const std::optional<std::string>&, size_t) override {
    return std::vector<KvAuditEntry>{};
  }
};

// RunJsonText is RunJson's tree dumped as an answer dumps it (JsonBody, without its newline), byte
// for byte: every state, with and without an activation (given, read, missing), errors, durable
// and parked runs, and texts that need escaping, are not JSON, are not UTF-8, or are large.
TEST(RunJsonText, WritesTheBytesOfRunJsonsDump) {
  const std::vector<std::string> texts = {
      "", "1", "-7", "1.5", "1e300", "0.1", "true", "null", "\"a string\"", "{\"b\":1,\"a\":[1,2,{\"z\":null,\"y\":\"x\"}]}",
      "{\"kind\":\"script_error\",\"message\":\"boom \\\"quoted\\\" \\\\ back\\nslash\\ttab\\u0001\"}",
      "not json at all", "{\"unterminated\": ", "\"\\u00e9t\\u00e9 \\ud83d\\ude00\"", "\xff\xfe broken utf-8",
      "[" + std::string(20000, '1') + "]", "\"" + std::string(20000, 'x') + "\"", "{\"a\":1,\"a\":2}",
      "12345678901234567890", "-0.0", "3.0", "  {\"spaced\" : [ 1 , 2 ] }  ",
      "-0", "0", "false", "007", " 1", "999999999999999", "1000000000000000", "-1e3"};
  const std::vector<std::string> names = {"bench", "a \"quoted\" name", "tab\there", "\xc3\xa9t\xc3\xa9", "bad \xff utf-8",
                                          "ctl\x01\x7f", "slash/and\\back"};
  const std::vector<RunState> states = {RunState::kQueued,      RunState::kRunning, RunState::kEnded,
                                        RunState::kInterrupted, RunState::kSleeping, RunState::kWaiting,
                                        RunState::kRetrying,    RunState::kNeedsReconciliation};
  const std::vector<std::string> outcomes = {"ok", "script_error", "parked", "abandoned", "cancelled", ""};
  size_t compared = 0;
  for (size_t i = 0; i < 3000; ++i) {
    RunRow run;
    run.id = static_cast<int64_t>(1 + i * 7919 % 100000);
    run.flow = names[i % names.size()];
    run.trigger = i % 5 == 0 ? names[(i / 5) % names.size()] : "api";
    run.idempotency_key = i % 4 == 0 ? names[(i / 4) % names.size()] : "";
    run.state = states[(i / 3) % states.size()];
    run.input_json = texts[i % texts.size()];
    run.created_unix_us = 1'733'324'822'869'000 + static_cast<int64_t>(i) * 1'234'567;
    if (i % 2 == 0) run.started_unix_us = run.created_unix_us + 150;
    if (i % 3 == 0) run.ended_unix_us = run.created_unix_us + 999'999;
    run.activation_id = i % 6 == 5 ? 0 : static_cast<int64_t>(10 + i);
    run.outcome = outcomes[i % outcomes.size()];
    if (i % 7 == 0) run.error_json = texts[(i / 7) % texts.size()];
    if (i % 11 == 0) run.state_detail = texts[(i / 11) % texts.size()];
    run.durable = i % 4 == 1;
    run.resumes = static_cast<int64_t>(i % 3);
    run.attempt = static_cast<int64_t>(1 + i % 2);
    if (i % 5 != 0) run.wake_unix_us = run.created_unix_us + 5'000'000;
    run.waiting_for = i % 2 == 0 ? "approved" : names[i % names.size()];
    run.waiting_key = i % 3 == 0 ? "" : names[(i / 3) % names.size()];

    ActivationRow a;
    a.id = run.activation_id;
    a.start_unix_us = run.created_unix_us + 100;
    if (i % 8 != 7) a.end_unix_us = a.start_unix_us + static_cast<int64_t>(i * 37 % 100000);
    a.outcome = outcomes[(i / 2) % outcomes.size()];
    a.result_json = texts[(i / 2) % texts.size()];
    if (i % 9 == 0) a.error_json = texts[(i / 9) % texts.size()];
    a.cpu_us = static_cast<int64_t>(i * 13 % 7777);

    ActivationsReader reader;
    if (i % 3 != 2) reader.activations.push_back(a);  // else: the read finds nothing
    const ActivationRow* ended = i % 2 == 0 ? &a : nullptr;
    const std::string tree = RunJson(run, reader, ended).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    const int tree_reads = reader.reads;
    const std::string text = RunJsonText(run, reader, ended);
    ASSERT_EQ(text, tree) << "run " << i;
    EXPECT_EQ(reader.reads, 2 * tree_reads) << "run " << i << ": the same reads as RunJson";
    ++compared;
  }
  EXPECT_EQ(compared, 3000u);
  // The answer's own case: a plain run ended ok, its activation given.
  RunRow run;
  run.id = 42;
  run.flow = "bench";
  run.trigger = "api";
  run.state = RunState::kEnded;
  run.input_json = "1";
  run.created_unix_us = 1'733'324'822'869'000;
  run.started_unix_us = run.created_unix_us + 120;
  run.ended_unix_us = run.created_unix_us + 330;
  run.activation_id = 7;
  run.outcome = "ok";
  ActivationRow a;
  a.id = 7;
  a.start_unix_us = run.created_unix_us + 120;
  a.end_unix_us = run.created_unix_us + 330;
  a.outcome = "ok";
  a.result_json = "1";
  a.cpu_us = 95;
  ActivationsReader reader;
  EXPECT_EQ(RunJsonText(run, reader, &a),
            "{\"activation_id\":7,\"cpu_ms\":0.095,\"created\":\"2024-12-04T15:07:02.869Z\",\"duration_ms\":0.21,"
            "\"ended\":\"2024-12-04T15:07:02.869Z\",\"flow\":\"bench\",\"id\":42,\"input\":1,\"outcome\":\"ok\","
            "\"result\":1,\"started\":\"2024-12-04T15:07:02.869Z\",\"state\":\"ended\",\"trigger\":\"api\","
            "\"url\":\"/v1/runs/42\"}");
  EXPECT_EQ(reader.reads, 0);
  // Durations and CPU times of every size, as dump writes their doubles.
  for (const int64_t us : {int64_t{0}, int64_t{1}, int64_t{999}, int64_t{1000}, int64_t{100'001}, int64_t{123'456'789},
                           int64_t{86'400'000'000}, int64_t{4'000'000'000'123}, int64_t{999'999'999'999'999}}) {
    a.end_unix_us = a.start_unix_us + us;
    a.cpu_us = us / 3;
    EXPECT_EQ(RunJsonText(run, reader, &a), RunJson(run, reader, &a).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace))
        << us;
  }
}

}  // namespace
}  // namespace basal::serve
