// Unit tests of basal serve's schedule decisions (src/serve/schedule.h), driven with injected
// times: the catch-up plan after downtime (none, shorter and longer than catch_up, catch_up 0, ten
// thousand missed fires, a clock stepped back), daylight saving in Europe/Berlin for an hourly and
// a daily schedule (cron.h's rules: a fire in the spring gap happens once after it for a fixed-hour
// schedule, a fire in the autumn overlap once for a fixed-hour schedule and twice for an hourly
// one), the overlap policy, and the timer's arming. Instants are written in UTC.
#include "serve/schedule.h"

#include <cctz/civil_time.h>
#include <cctz/time_zone.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "unit/serve/cron_test_support.h"

namespace basal::serve {
namespace {

constexpr int64_t kMinute = 60'000'000;
constexpr int64_t kHour = 60 * kMinute;

// "2024-03-31 01:00" or "2024-03-31 01:00:30", read as UTC, in microseconds since the epoch.
int64_t UtcUs(const std::string& text) {
  std::chrono::system_clock::time_point tp;
  const cctz::time_zone utc = cctz::utc_time_zone();
  if (!cctz::parse("%Y-%m-%d %H:%M:%S", text, utc, &tp) && !cctz::parse("%Y-%m-%d %H:%M", text, utc, &tp))
    ADD_FAILURE() << "bad instant in the test: " << text;
  return std::chrono::duration_cast<std::chrono::microseconds>(tp.time_since_epoch()).count();
}

std::string ShowUs(int64_t us) {
  return cctz::format("%Y-%m-%d %H:%M:%S", std::chrono::system_clock::time_point(std::chrono::microseconds(us)),
                      cctz::utc_time_zone());
}

std::vector<std::string> ShowUs(const std::vector<int64_t>& v) {
  std::vector<std::string> out;
  for (int64_t us : v) out.push_back(ShowUs(us));
  return out;
}

using test_support::Cron;
using test_support::Zone;

using Strings = std::vector<std::string>;

// --- Catch-up after downtime ---------------------------------------------------------------------

TEST(CatchUpPlanTest, NoDowntimeNothingDue) {
  const CatchUpPlan p = PlanCatchUp(Cron("0 * * * *"), Zone("UTC"), UtcUs("2024-05-01 10:00"), UtcUs("2024-05-01 10:59:59"), kHour);
  EXPECT_TRUE(p.missed.empty());
  EXPECT_EQ(p.missed_unlisted, 0);
  EXPECT_FALSE(p.run_now.has_value());
  EXPECT_EQ(ShowUs(p.mark), "2024-05-01 10:00:00");  // unchanged
}

TEST(CatchUpPlanTest, TheFireAtNowRunsEvenWithCatchUpZero) {
  // The timer's own path: the fire is due at exactly now.
  const CatchUpPlan p = PlanCatchUp(Cron("0 * * * *"), Zone("UTC"), UtcUs("2024-05-01 10:00"), UtcUs("2024-05-01 11:00"), 0);
  ASSERT_TRUE(p.run_now.has_value());
  EXPECT_EQ(ShowUs(*p.run_now), "2024-05-01 11:00:00");
  EXPECT_TRUE(p.missed.empty());
  EXPECT_EQ(ShowUs(p.mark), "2024-05-01 11:00:00");
}

TEST(CatchUpPlanTest, CatchUpZeroMissesAFireOneSecondOld) {
  const CatchUpPlan p = PlanCatchUp(Cron("0 * * * *"), Zone("UTC"), UtcUs("2024-05-01 10:00"), UtcUs("2024-05-01 11:00:01"), 0);
  EXPECT_FALSE(p.run_now.has_value());
  EXPECT_EQ(ShowUs(p.missed), (Strings{"2024-05-01 11:00:00"}));
  EXPECT_EQ(ShowUs(p.mark), "2024-05-01 11:00:00");
}

TEST(CatchUpPlanTest, DowntimeShorterThanCatchUpRunsTheMissedFireOnce) {
  const CatchUpPlan p = PlanCatchUp(Cron("0 * * * *"), Zone("UTC"), UtcUs("2024-05-01 10:00"), UtcUs("2024-05-01 11:20"), kHour);
  ASSERT_TRUE(p.run_now.has_value());
  EXPECT_EQ(ShowUs(*p.run_now), "2024-05-01 11:00:00");
  EXPECT_TRUE(p.missed.empty());
  EXPECT_EQ(p.missed_total(), 0);
  EXPECT_EQ(ShowUs(p.mark), "2024-05-01 11:00:00");
}

TEST(CatchUpPlanTest, DowntimeLongerThanCatchUpRunsOnlyTheNewestWithinTheWindow) {
  const CatchUpPlan p = PlanCatchUp(Cron("0 * * * *"), Zone("UTC"), UtcUs("2024-05-01 10:00"), UtcUs("2024-05-01 14:20"), kHour);
  ASSERT_TRUE(p.run_now.has_value());
  EXPECT_EQ(ShowUs(*p.run_now), "2024-05-01 14:00:00");
  EXPECT_EQ(ShowUs(p.missed), (Strings{"2024-05-01 11:00:00", "2024-05-01 12:00:00", "2024-05-01 13:00:00"}));
  EXPECT_EQ(p.missed_unlisted, 0);
  EXPECT_EQ(ShowUs(p.mark), "2024-05-01 14:00:00");
}

TEST(CatchUpPlanTest, DowntimeLongerThanCatchUpWhenEvenTheNewestIsTooOld) {
  const CatchUpPlan p =
      PlanCatchUp(Cron("0 * * * *"), Zone("UTC"), UtcUs("2024-05-01 10:00"), UtcUs("2024-05-01 14:20"), 10 * kMinute);
  EXPECT_FALSE(p.run_now.has_value());
  EXPECT_EQ(ShowUs(p.missed),
            (Strings{"2024-05-01 11:00:00", "2024-05-01 12:00:00", "2024-05-01 13:00:00", "2024-05-01 14:00:00"}));
  EXPECT_EQ(ShowUs(p.mark), "2024-05-01 14:00:00");  // nothing is handled twice at the next start
}

TEST(CatchUpPlanTest, TenThousandMissedFiresListTheNewestHundredAndCountTheRest) {
  const int64_t mark = UtcUs("2024-05-01 00:00");
  const int64_t now = mark + 10'000 * kMinute + 30'000'000;  // 10,000 fires, the newest 30 s old
  const CatchUpPlan p = PlanCatchUp(Cron("* * * * *"), Zone("UTC"), mark, now, 0);
  EXPECT_FALSE(p.run_now.has_value());
  ASSERT_EQ(p.missed.size(), kMaxMissedListed);
  EXPECT_EQ(p.missed.front(), mark + 9'901 * kMinute);
  EXPECT_EQ(p.missed.back(), mark + 10'000 * kMinute);
  EXPECT_EQ(p.missed_unlisted, 9'900);
  EXPECT_EQ(p.missed_total(), 10'000);
  EXPECT_FALSE(p.missed_count_capped);
  EXPECT_EQ(p.mark, mark + 10'000 * kMinute);

  // The same downtime with a window of a minute: the newest runs, the 9,999 others are missed.
  const CatchUpPlan q = PlanCatchUp(Cron("* * * * *"), Zone("UTC"), mark, now, kMinute);
  ASSERT_TRUE(q.run_now.has_value());
  EXPECT_EQ(*q.run_now, mark + 10'000 * kMinute);
  ASSERT_EQ(q.missed.size(), kMaxMissedListed);
  EXPECT_EQ(q.missed.front(), mark + 9'900 * kMinute);
  EXPECT_EQ(q.missed.back(), mark + 9'999 * kMinute);
  EXPECT_EQ(q.missed_total(), 9'999);
  EXPECT_EQ(q.mark, mark + 10'000 * kMinute);
}

TEST(CatchUpPlanTest, ClockSteppedBackBeforeTheMarkPlansNothing) {
  const CatchUpPlan p = PlanCatchUp(Cron("* * * * *"), Zone("UTC"), UtcUs("2024-05-01 10:00"), UtcUs("2024-05-01 09:00"), kHour);
  EXPECT_TRUE(p.missed.empty());
  EXPECT_FALSE(p.run_now.has_value());
  EXPECT_EQ(ShowUs(p.mark), "2024-05-01 10:00:00");
}

// --- Daylight saving in Europe/Berlin ------------------------------------------------------------
// 2024-03-31: 02:00 CET -> 03:00 CEST at 01:00 UTC (local 02:00-02:59 does not exist).
// 2024-10-27: 03:00 CEST -> 02:00 CET at 01:00 UTC (local 02:00-02:59 happens twice).

TEST(CatchUpPlanDstTest, SpringGapHourlyFiresEveryRealHour) {
  // "30 * * * *" is interval-like: the missing 02:30 simply does not happen; one fire per real hour.
  const CatchUpPlan p = PlanCatchUp(Cron("30 * * * *"), Zone("Europe/Berlin"), UtcUs("2024-03-30 23:30"),
                                    UtcUs("2024-03-31 02:45"), 0);
  EXPECT_EQ(ShowUs(p.missed), (Strings{"2024-03-31 00:30:00",    // 01:30 CET
                                       "2024-03-31 01:30:00",    // 03:30 CEST
                                       "2024-03-31 02:30:00"}));  // 04:30 CEST
  EXPECT_FALSE(p.run_now.has_value());
}

TEST(CatchUpPlanDstTest, SpringGapDailyFiresOnceAfterTheGap) {
  // "30 2 * * *": 02:30 does not exist on the 31st; it fires once, at 03:00 CEST (01:00 UTC).
  const CatchUpPlan p = PlanCatchUp(Cron("30 2 * * *"), Zone("Europe/Berlin"), UtcUs("2024-03-30 01:30"),
                                    UtcUs("2024-04-01 12:00"), 0);
  EXPECT_EQ(ShowUs(p.missed), (Strings{"2024-03-31 01:00:00", "2024-04-01 00:30:00"}));
  // Down across the gap with a window of an hour: the fire after the gap runs, once.
  const CatchUpPlan q = PlanCatchUp(Cron("30 2 * * *"), Zone("Europe/Berlin"), UtcUs("2024-03-30 01:30"),
                                    UtcUs("2024-03-31 01:30"), kHour);
  ASSERT_TRUE(q.run_now.has_value());
  EXPECT_EQ(ShowUs(*q.run_now), "2024-03-31 01:00:00");
  EXPECT_TRUE(q.missed.empty());
  // A restart after that fire was handled: nothing again that day.
  const CatchUpPlan r = PlanCatchUp(Cron("30 2 * * *"), Zone("Europe/Berlin"), UtcUs("2024-03-31 01:00"),
                                    UtcUs("2024-03-31 21:00"), kHour);
  EXPECT_TRUE(r.missed.empty());
  EXPECT_FALSE(r.run_now.has_value());
}

TEST(CatchUpPlanDstTest, AutumnOverlapHourlyFiresAtBothOccurrences) {
  // Interval-like: follows real time, so 02:30 fires in CEST and again in CET.
  const CatchUpPlan p = PlanCatchUp(Cron("30 * * * *"), Zone("Europe/Berlin"), UtcUs("2024-10-26 22:30"),
                                    UtcUs("2024-10-27 02:45"), 0);
  EXPECT_EQ(ShowUs(p.missed), (Strings{"2024-10-26 23:30:00",    // 01:30 CEST
                                       "2024-10-27 00:30:00",    // 02:30 CEST
                                       "2024-10-27 01:30:00",    // 02:30 CET
                                       "2024-10-27 02:30:00"}));  // 03:30 CET
}

TEST(CatchUpPlanDstTest, AutumnOverlapDailyFiresOnceAtTheFirstOccurrence) {
  const CatchUpPlan p = PlanCatchUp(Cron("30 2 * * *"), Zone("Europe/Berlin"), UtcUs("2024-10-26 00:30"),
                                    UtcUs("2024-10-28 12:00"), 0);
  EXPECT_EQ(ShowUs(p.missed), (Strings{"2024-10-27 00:30:00",    // 02:30 CEST, not again at 02:30 CET
                                       "2024-10-28 01:30:00"}));  // 02:30 CET
  // A restart between the two 02:30s, the first handled: the second is no fire, not a missed one.
  const CatchUpPlan q = PlanCatchUp(Cron("30 2 * * *"), Zone("Europe/Berlin"), UtcUs("2024-10-27 00:30"),
                                    UtcUs("2024-10-27 01:45"), kHour);
  EXPECT_TRUE(q.missed.empty());
  EXPECT_FALSE(q.run_now.has_value());
  EXPECT_EQ(ShowUs(q.mark), "2024-10-27 00:30:00");
  // Down across the first 02:30, back within the hour: it runs once.
  const CatchUpPlan r = PlanCatchUp(Cron("30 2 * * *"), Zone("Europe/Berlin"), UtcUs("2024-10-26 00:30"),
                                    UtcUs("2024-10-27 01:20"), kHour);
  ASSERT_TRUE(r.run_now.has_value());
  EXPECT_EQ(ShowUs(*r.run_now), "2024-10-27 00:30:00");
  EXPECT_TRUE(r.missed.empty());
}

// --- Overlap -------------------------------------------------------------------------------------

TEST(OverlapTest, SkipRunsOnlyWhenNothingIsOpen) {
  EXPECT_EQ(DecideOverlap(ScheduleTrigger::Overlap::kSkip, 0), OverlapDecision::kRun);
  EXPECT_EQ(DecideOverlap(ScheduleTrigger::Overlap::kSkip, 1), OverlapDecision::kSkip);
  EXPECT_EQ(DecideOverlap(ScheduleTrigger::Overlap::kSkip, 2), OverlapDecision::kSkip);
}

TEST(OverlapTest, BufferOneKeepsOneFireBehindTheOpenRun) {
  EXPECT_EQ(DecideOverlap(ScheduleTrigger::Overlap::kBufferOne, 0), OverlapDecision::kRun);
  EXPECT_EQ(DecideOverlap(ScheduleTrigger::Overlap::kBufferOne, 1), OverlapDecision::kBuffer);
  EXPECT_EQ(DecideOverlap(ScheduleTrigger::Overlap::kBufferOne, 2), OverlapDecision::kSkip);
  EXPECT_STREQ(OverlapDecisionName(OverlapDecision::kBuffer), "buffer");
}

// --- Arming the timer ----------------------------------------------------------------------------

TEST(ArmTest, NextFireAndItsDelay) {
  auto a = PlanArm(Cron("*/15 * * * *"), Zone("UTC"), UtcUs("2024-05-01 10:00"), UtcUs("2024-05-01 10:05"));
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(ShowUs(a->fire_us), "2024-05-01 10:15:00");
  EXPECT_EQ(a->delay_us, 10 * kMinute);
}

TEST(ArmTest, ArmedAtMostAnHourAhead) {
  auto a = PlanArm(Cron("30 2 * * *"), Zone("UTC"), UtcUs("2024-05-01 03:00"), UtcUs("2024-05-01 03:00"));
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(ShowUs(a->fire_us), "2024-05-02 02:30:00");
  EXPECT_EQ(a->delay_us, kMaxArmAheadUs);
  EXPECT_EQ(kMaxArmAheadUs, kHour);
  // The timer wakes an hour later, early: not due, armed again for the same fire.
  EXPECT_FALSE(TimerDue(a->fire_us, UtcUs("2024-05-01 04:00")));
  auto again = PlanArm(Cron("30 2 * * *"), Zone("UTC"), a->fire_us - 1, UtcUs("2024-05-01 04:00"));
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->fire_us, a->fire_us);
}

TEST(ArmTest, AFireInThePastIsDueAtOnce) {
  // The clock stepped forward past the fire while the timer slept.
  auto a = PlanArm(Cron("0 * * * *"), Zone("UTC"), UtcUs("2024-05-01 10:00"), UtcUs("2024-05-01 13:10"));
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->delay_us, 0);
  EXPECT_TRUE(TimerDue(a->fire_us, UtcUs("2024-05-01 13:10")));
  EXPECT_TRUE(TimerDue(a->fire_us, a->fire_us - 500));  // within the loop's millisecond
  EXPECT_FALSE(TimerDue(a->fire_us, a->fire_us - 2000));
}

TEST(ArmTest, NoFireWithinFiveYears) {
  // 29 February, asked in March 2097: 2100 is no leap year.
  EXPECT_FALSE(PlanArm(Cron("0 0 29 2 *"), Zone("UTC"), UtcUs("2097-03-01 00:00"), UtcUs("2097-03-01 00:00")).has_value());
}

}  // namespace
}  // namespace basal::serve
