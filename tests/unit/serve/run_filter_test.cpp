// The filters of a run listing (run_filter.h): what GET /v1/runs and `basal runs` accept and refuse.
#include "serve/run_filter.h"

#include <gtest/gtest.h>

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
