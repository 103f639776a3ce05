// The last hour of the daemon's main numbers (src/serve/health_history.h): gauges kept as they
// were, totals kept as their change per interval, the oldest dropped past the capacity.
#include <gtest/gtest.h>

#include <string>

#include "serve/health_history.h"

namespace basal::serve {
namespace {

std::string Seconds(int64_t unix_us) { return std::to_string(unix_us / 1'000'000); }

HealthSample Totals(int64_t at_s, uint64_t queued, uint64_t ok, uint64_t failed, uint64_t calls, uint64_t refused) {
  HealthSample s;
  s.at_us = at_s * 1'000'000;
  s.queued = queued;
  s.in_flight = 1;
  s.workers_busy = 1;
  s.workers_live = 2;
  s.activations_ok = ok;
  s.activations_failed = failed;
  s.calls = calls;
  s.calls_refused = refused;
  return s;
}

TEST(HealthHistoryTest, GaugesAsTheyWereTotalsAsTheirChange) {
  HealthHistory history;
  history.Add(Totals(10, 3, 5, 1, 20, 2));
  history.Add(Totals(20, 0, 9, 1, 26, 5));
  history.Add(Totals(30, 7, 9, 4, 26, 5));
  const auto j = history.ToJson(Seconds);
  EXPECT_EQ(j["interval_ms"], 10000);
  ASSERT_EQ(j["samples"].size(), 3u);
  const auto& s = j["samples"];
  EXPECT_EQ(s[0]["at"], "10");
  // The first sample's changes are since the daemon started.
  EXPECT_EQ(s[0]["activations_ok"], 5);
  EXPECT_EQ(s[0]["calls_refused"], 2);
  EXPECT_EQ(s[1]["queued"], 0);
  EXPECT_EQ(s[1]["activations_ok"], 4);
  EXPECT_EQ(s[1]["activations_failed"], 0);
  EXPECT_EQ(s[1]["calls"], 6);
  EXPECT_EQ(s[1]["calls_refused"], 3);
  EXPECT_EQ(s[2]["queued"], 7);
  EXPECT_EQ(s[2]["activations_failed"], 3);
  EXPECT_EQ(s[2]["calls"], 0);
  EXPECT_EQ(s[2]["workers_live"], 2);
}

TEST(HealthHistoryTest, ATotalThatWentBackCountsAsNoChange) {
  HealthHistory history;
  history.Add(Totals(10, 0, 5, 0, 0, 0));
  history.Add(Totals(20, 0, 2, 0, 0, 0));
  history.Add(Totals(30, 0, 4, 0, 0, 0));
  const auto s = history.ToJson(Seconds)["samples"];
  EXPECT_EQ(s[1]["activations_ok"], 0);
  EXPECT_EQ(s[2]["activations_ok"], 2);
}

TEST(HealthHistoryTest, TheNewestCapacitySamplesAreKept) {
  HealthHistory history(4);
  for (int i = 1; i <= 10; ++i) history.Add(Totals(i, static_cast<uint64_t>(i), 0, 0, 0, 0));
  EXPECT_EQ(history.size(), 4u);
  const auto j = history.ToJson(Seconds);
  EXPECT_EQ(j["capacity"], 4);
  EXPECT_EQ(j["samples"].front()["queued"], 7);
  EXPECT_EQ(j["samples"].back()["queued"], 10);
  EXPECT_EQ(HealthHistory().ToJson(Seconds)["capacity"], 360) << "an hour at one sample every 10 s";
}

}  // namespace
}  // namespace basal::serve
