// Unit tests of basal serve's cron schedules (src/serve/cron.h): the parser (every accepted form,
// every refusal with its message), the next fire time in UTC, and daylight saving in zones of both
// hemispheres, with exact UTC instants. Instants are built and printed through cctz in UTC, never
// through the machine's own time zone. A brute-force reference (every real minute of a few days
// around each transition, judged by the rule in cron.h) checks NextFire from every starting minute.
#include "serve/cron.h"

#include <cctz/civil_time.h>
#include <cctz/time_zone.h>
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "unit/serve/cron_test_support.h"

namespace basal::serve {
namespace {

using TimePoint = std::chrono::system_clock::time_point;
using std::chrono::minutes;

// "2024-03-31 01:00" or "2024-03-31 01:00:30", read as UTC.
TimePoint Utc(const std::string& text) {
  TimePoint tp;
  const cctz::time_zone utc = cctz::utc_time_zone();
  if (cctz::parse("%Y-%m-%d %H:%M:%S", text, utc, &tp)) return tp;
  if (cctz::parse("%Y-%m-%d %H:%M", text, utc, &tp)) return tp;
  ADD_FAILURE() << "bad instant in the test: " << text;
  return tp;
}

std::string Show(std::optional<TimePoint> tp) {
  if (!tp) return "none";
  return cctz::format("%Y-%m-%d %H:%M:%S", *tp, cctz::utc_time_zone());
}

using test_support::Cron;
using test_support::Zone;

// The set bits of [first, last] as "0,15,30" with runs written "9-17".
template <std::size_t N>
std::string Bits(const std::bitset<N>& bits, int first, int last) {
  std::string out;
  for (int i = first; i <= last; ++i) {
    if (!bits[i]) continue;
    int j = i;
    while (j + 1 <= last && bits[j + 1]) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(i);
    if (j > i) out += "-" + std::to_string(j);
    i = j;
  }
  return out;
}

// --- Parsing -------------------------------------------------------------------------------------

TEST(CronParseTest, AcceptedForms) {
  struct Case {
    const char* text;
    const char* minutes;
    const char* hours;
    const char* days_of_month;
    const char* months;
    const char* days_of_week;
    bool dom_star;
    bool dow_star;
    bool hour_star;
  } cases[] = {
      {"* * * * *", "0-59", "0-23", "1-31", "1-12", "0-6", true, true, true},
      {"*/15 9-17 * * mon-fri", "0,15,30,45", "9-17", "1-31", "1-12", "1-5", true, false, false},
      {"0-30/10 */6 1,15 jan,JUL Sun", "0,10,20,30", "0,6,12,18", "1,15", "1,7", "0", false, false, true},
      {"5 4 * * 7", "5", "4", "1-31", "1-12", "0", true, false, false},  // 7 is Sunday
      {"0 0 * * 5-7", "0", "0", "1-31", "1-12", "0,5-6", true, false, false},
      {"0 0 * * 0-7", "0", "0", "1-31", "1-12", "0-6", true, false, false},
      {"0 0 * * 0,7", "0", "0", "1-31", "1-12", "0", true, false, false},
      {"0 0 * * */2", "0", "0", "1-31", "1-12", "0,2,4,6", true, true, false},
      {"0 0 * * MON,wEd,FrI", "0", "0", "1-31", "1-12", "1,3,5", true, false, false},
      {"0 0 * feb-apr/2,dec *", "0", "0", "1-31", "2,4,12", "0-6", true, true, false},
      {"* * */2 * *", "0-59", "0-23", "1,3,5,7,9,11,13,15,17,19,21,23,25,27,29,31", "1-12", "0-6", true, true, true},
      {"00 03 01 01 00", "0", "3", "1", "1", "0", false, false, false},  // leading zeros
      {"59 23 31 12 6", "59", "23", "31", "12", "6", false, false, false},
      {"1,2,3-5,10-20/5,59 * * * *", "1-5,10,15,20,59", "0-23", "1-31", "1-12", "0-6", true, true, true},
      {"3-3 22-23 * * *", "3", "22-23", "1-31", "1-12", "0-6", true, true, false},
      {"0 0 1-31/10 * *", "0", "0", "1,11,21,31", "1-12", "0-6", false, true, false},
      {" \t0  3\t* *   * \t", "0", "3", "1-31", "1-12", "0-6", true, true, false},
      {"0 0 29 2 *", "0", "0", "29", "2", "0-6", false, true, false},      // leap years only
      {"0 0 30 2 mon", "0", "0", "30", "2", "1", false, false, false},     // the Mondays of February
      {"0 0 31 2,3 *", "0", "0", "31", "2-3", "0-6", false, true, false},  // March has one
  };
  for (const Case& c : cases) {
    auto s = ParseCron(c.text);
    ASSERT_TRUE(s.ok()) << c.text << ": " << s.error().message;
    EXPECT_EQ(Bits(s->minutes, 0, 59), c.minutes) << c.text;
    EXPECT_EQ(Bits(s->hours, 0, 23), c.hours) << c.text;
    EXPECT_EQ(Bits(s->days_of_month, 0, 31), c.days_of_month) << c.text;
    EXPECT_EQ(Bits(s->months, 0, 12), c.months) << c.text;
    EXPECT_EQ(Bits(s->days_of_week, 0, 6), c.days_of_week) << c.text;
    EXPECT_EQ(s->day_of_month_star, c.dom_star) << c.text;
    EXPECT_EQ(s->day_of_week_star, c.dow_star) << c.text;
    EXPECT_EQ(s->hour_star, c.hour_star) << c.text;
  }
  EXPECT_EQ(Cron(" \t0  3\t* *   * \t").text, "0  3\t* *   *");
}

TEST(CronParseTest, Macros) {
  struct Case {
    const char* macro;
    const char* same_as;
  } cases[] = {
      {"@hourly", "0 * * * *"},   {"@daily", "0 0 * * *"},   {"@midnight", "0 0 * * *"},
      {"@weekly", "0 0 * * 0"},   {"@monthly", "0 0 1 * *"}, {"@yearly", "0 0 1 1 *"},
      {"@annually", "0 0 1 1 *"}, {"@DAILY", "0 0 * * *"},   {"  @Weekly ", "0 0 * * 0"},
  };
  for (const Case& c : cases) {
    auto m = ParseCron(c.macro);
    ASSERT_TRUE(m.ok()) << c.macro << ": " << m.error().message;
    CronSchedule f = Cron(c.same_as);
    EXPECT_EQ(m->minutes, f.minutes) << c.macro;
    EXPECT_EQ(m->hours, f.hours) << c.macro;
    EXPECT_EQ(m->days_of_month, f.days_of_month) << c.macro;
    EXPECT_EQ(m->months, f.months) << c.macro;
    EXPECT_EQ(m->days_of_week, f.days_of_week) << c.macro;
    EXPECT_EQ(m->day_of_month_star, f.day_of_month_star) << c.macro;
    EXPECT_EQ(m->day_of_week_star, f.day_of_week_star) << c.macro;
    EXPECT_EQ(m->hour_star, f.hour_star) << c.macro;
  }
  EXPECT_EQ(Cron("@daily").text, "@daily");
  EXPECT_EQ(Cron("  @Weekly ").text, "@Weekly");
  EXPECT_TRUE(Cron("@hourly").hour_star);
  EXPECT_FALSE(Cron("@daily").hour_star);
}

TEST(CronParseTest, RefusalsNameTheFieldAndTheProblem) {
  struct Case {
    const char* text;
    const char* message;  // the whole message
  } cases[] = {
      {"",
       "cron schedule is empty: write five fields, minute hour day-of-month month day-of-week (such as "
       "\"0 3 * * *\"), or a macro such as @daily"},
      {" \t ",
       "cron schedule is empty: write five fields, minute hour day-of-month month day-of-week (such as "
       "\"0 3 * * *\"), or a macro such as @daily"},
      {"* * * *",
       "cron schedule \"* * * *\" has 4 fields; it needs five, minute hour day-of-month month day-of-week "
       "(such as \"0 3 * * *\"), or a macro such as @daily"},
      {"0 0 * * * *",
       "cron schedule \"0 0 * * * *\" has 6 fields; it needs five, minute hour day-of-month month "
       "day-of-week (such as \"0 3 * * *\"); seconds and years are not supported, or a macro such as "
       "@daily"},
      // Out of range, in each field.
      {"60 * * * *", "cron field 1 (minute) \"60\": 60 is outside 0-59"},
      {"0 25 * * *", "cron field 2 (hour) \"25\": 25 is outside 0-23"},
      {"0 1,25 * * *", "cron field 2 (hour) \"1,25\": 25 is outside 0-23"},
      {"0 0 0 * *", "cron field 3 (day of month) \"0\": 0 is outside 1-31"},
      {"0 0 32 * *", "cron field 3 (day of month) \"32\": 32 is outside 1-31"},
      {"0 0 * 0 *", "cron field 4 (month) \"0\": 0 is outside 1-12"},
      {"0 0 * 13 *", "cron field 4 (month) \"13\": 13 is outside 1-12"},
      {"0 0 * * 8", "cron field 5 (day of week) \"8\": 8 is outside 0-7"},
      {"99999999999999999999 * * * *",
       "cron field 1 (minute) \"99999999999999999999\": 99999999999999999999 is outside 0-59"},
      {"0 0-24 * * *", "cron field 2 (hour) \"0-24\": 24 is outside 0-23"},
      // Not numbers, unknown names, names outside their field.
      {"x * * * *", "cron field 1 (minute) \"x\": \"x\" is not a number"},
      {"mon * * * *", "cron field 1 (minute) \"mon\": \"mon\" is not a number"},
      {"+5 * * * *", "cron field 1 (minute) \"+5\": \"+5\" is not a number"},
      {"0 0 * foo *", "cron field 4 (month) \"foo\": \"foo\" is not a number or a month name (jan-dec)"},
      {"0 0 * january *", "cron field 4 (month) \"january\": \"january\" is not a number or a month name (jan-dec)"},
      {"0 0 * jan-xyz *", "cron field 4 (month) \"jan-xyz\": \"xyz\" is not a number or a month name (jan-dec)"},
      {"0 0 * * jan", "cron field 5 (day of week) \"jan\": \"jan\" is not a number or a day name (sun-sat)"},
      {"0 0 * * funday", "cron field 5 (day of week) \"funday\": \"funday\" is not a number or a day name (sun-sat)"},
      {"0 0 * * ?", "cron field 5 (day of week) \"?\": \"?\" is not a number or a day name (sun-sat)"},
      {"0 0 L * *", "cron field 3 (day of month) \"L\": \"L\" is not a number"},
      // Lists and ranges.
      {"1,,2 * * * *",
       "cron field 1 (minute) \"1,,2\": an item of the list is empty (two commas, or a comma at an end)"},
      {"1, * * * *", "cron field 1 (minute) \"1,\": an item of the list is empty (two commas, or a comma at an end)"},
      {",1 * * * *", "cron field 1 (minute) \",1\": an item of the list is empty (two commas, or a comma at an end)"},
      {"-5 * * * *", "cron field 1 (minute) \"-5\": a value is missing (around '-' or '/')"},
      {"5- * * * *", "cron field 1 (minute) \"5-\": a value is missing (around '-' or '/')"},
      {"1-2-3 * * * *", "cron field 1 (minute) \"1-2-3\": \"1-2-3\" is not a range: a range is two values, a-b"},
      {"30-10 * * * *",
       "cron field 1 (minute) \"30-10\": the range 30-10 runs backwards; ranges do not wrap around: "
       "write it as two items, such as 30-59,0-10"},
      {"0 22-2 * * *",
       "cron field 2 (hour) \"22-2\": the range 22-2 runs backwards; ranges do not wrap around: "
       "write it as two items, such as 22-23,0-2"},
      {"0 0 * * sat-sun",
       "cron field 5 (day of week) \"sat-sun\": the range sat-sun runs backwards; ranges do not "
       "wrap around: write it as two items, such as sat,sun"},
      {"0 0 * dec-jan *",
       "cron field 4 (month) \"dec-jan\": the range dec-jan runs backwards; ranges do not wrap "
       "around: write it as two items, such as dec,jan"},
      {"0 0 * nov-feb *",
       "cron field 4 (month) \"nov-feb\": the range nov-feb runs backwards; ranges do not wrap "
       "around: write it as two items, such as nov-dec,jan-feb"},
      {"0 0 * * 5-1",
       "cron field 5 (day of week) \"5-1\": the range 5-1 runs backwards; ranges do not wrap "
       "around: write it as two items, such as 5-6,0-1"},
      // Steps.
      {"*/0 * * * *", "cron field 1 (minute) \"*/0\": the step 0 is outside 1-59"},
      {"*/60 * * * *",
       "cron field 1 (minute) \"*/60\": the step 60 is outside 1-59 (a larger step selects only the first value)"},
      {"0 */24 * * *",
       "cron field 2 (hour) \"*/24\": the step 24 is outside 1-23 (a larger step selects only the first value)"},
      {"0 0 * * */7",
       "cron field 5 (day of week) \"*/7\": the step 7 is outside 1-6 (a larger step selects only the first value)"},
      {"0 0 * */12 *",
       "cron field 4 (month) \"*/12\": the step 12 is outside 1-11 (a larger step selects only the first value)"},
      {"*/99999 * * * *",
       "cron field 1 (minute) \"*/99999\": the step 99999 is outside 1-59 (a larger step selects only the first "
       "value)"},
      {"*/x * * * *", "cron field 1 (minute) \"*/x\": the step \"x\" is not a number"},
      {"*/ * * * *", "cron field 1 (minute) \"*/\": the step \"\" is not a number"},
      {"*/-1 * * * *", "cron field 1 (minute) \"*/-1\": the step \"-1\" is not a number"},
      {"*/5/2 * * * *", "cron field 1 (minute) \"*/5/2\": \"*/5/2\" has more than one '/'"},
      {"5/15 * * * *",
       "cron field 1 (minute) \"5/15\": a step needs '*' or a range before it: write 5-59/15 for every 15 from 5"},
      {"0 0 * * mon/2",
       "cron field 5 (day of week) \"mon/2\": a step needs '*' or a range before it: write mon-sat/2 for every 2 "
       "from mon"},
      {"x/5 * * * *", "cron field 1 (minute) \"x/5\": \"x\" is not a number"},
      {"/5 * * * *", "cron field 1 (minute) \"/5\": a value is missing (around '-' or '/')"},
      {"** * * * *", "cron field 1 (minute) \"**\": \"**\" is not a number"},
      // Macros.
      {"@reboot",
       "cron schedule \"@reboot\" is not supported: it has no time to fire at; write a schedule such as "
       "@hourly or \"0 3 * * *\""},
      {"@dayly",
       "cron schedule \"@dayly\" is not a known macro: use @hourly, @daily, @midnight, @weekly, @monthly, "
       "@yearly or @annually, or five fields, minute hour day-of-month month day-of-week"},
      {"@every 5m",
       "cron schedule \"@every 5m\" is not a known macro: use @hourly, @daily, @midnight, @weekly, "
       "@monthly, @yearly or @annually, or five fields, minute hour day-of-month month day-of-week"},
      {"@daily 0",
       "cron schedule \"@daily 0\" is not a known macro: use @hourly, @daily, @midnight, @weekly, "
       "@monthly, @yearly or @annually, or five fields, minute hour day-of-month month day-of-week"},
      // Schedules that can never fire.
      {"0 0 30 2 *", "cron schedule \"0 0 30 2 *\" can never fire: day of month \"30\" never occurs in month \"2\""},
      {"0 0 31 4 *", "cron schedule \"0 0 31 4 *\" can never fire: day of month \"31\" never occurs in month \"4\""},
      {"0 0 31 apr,jun,sep,nov *",
       "cron schedule \"0 0 31 apr,jun,sep,nov *\" can never fire: day of month \"31\" never occurs in month "
       "\"apr,jun,sep,nov\""},
      {"0 0 30,31 feb *",
       "cron schedule \"0 0 30,31 feb *\" can never fire: day of month \"30,31\" never occurs in month \"feb\""},
  };
  for (const Case& c : cases) {
    auto s = ParseCron(c.text);
    ASSERT_FALSE(s.ok()) << "accepted: \"" << c.text << "\"";
    EXPECT_EQ(s.error().code, ErrorCode::kInvalidArgument) << c.text;
    EXPECT_EQ(s.error().message, c.message) << c.text;
  }
}

// --- Time zones ----------------------------------------------------------------------------------

TEST(CronTimeZoneTest, LoadsIanaNames) {
  for (const char* name : {"UTC", "Etc/UTC", "Europe/Berlin", "America/New_York", "Australia/Sydney",
                           "America/Argentina/Buenos_Aires", "Etc/GMT+5", "Asia/Kolkata"}) {
    auto z = LoadTimeZone(name);
    ASSERT_TRUE(z.ok()) << name << ": " << z.error().message;
    EXPECT_EQ(z->name(), name);
  }
  // Loaded, not UTC: Berlin is an hour ahead in January.
  const TimeZone berlin = Zone("Europe/Berlin");
  EXPECT_EQ(berlin.zone().lookup(Utc("2024-01-15 12:00")).cs, cctz::civil_second(2024, 1, 15, 13, 0, 0));
}

TEST(CronTimeZoneTest, RefusesUnknownAndNonIanaNames) {
  struct Case {
    const char* name;
    const char* message;
  } cases[] = {
      {"Europe/Berln",
       "unknown time zone \"Europe/Berln\": not in the system's zone database (/usr/share/zoneinfo, "
       "Debian package tzdata); write an IANA name such as \"Europe/Berlin\" or \"UTC\""},
      {"Mars/Olympus_Mons",
       "unknown time zone \"Mars/Olympus_Mons\": not in the system's zone database "
       "(/usr/share/zoneinfo, Debian package tzdata); write an IANA name such as "
       "\"Europe/Berlin\" or \"UTC\""},
      {"PST",
       "unknown time zone \"PST\": not in the system's zone database (/usr/share/zoneinfo, Debian package "
       "tzdata); write an IANA name such as \"Europe/Berlin\" or \"UTC\""},
      {"europe/berlin",
       "unknown time zone \"europe/berlin\": not in the system's zone database (/usr/share/zoneinfo, "
       "Debian package tzdata); write an IANA name such as \"Europe/Berlin\" or \"UTC\""},
      {"", "time zone name is empty: write an IANA name such as \"Europe/Berlin\" or \"UTC\""},
      {"/etc/localtime",
       "time zone \"/etc/localtime\" is not an IANA time zone name: write an IANA name such as "
       "\"Europe/Berlin\" or \"UTC\""},
      {"../../../etc/localtime",
       "time zone \"../../../etc/localtime\" is not an IANA time zone name: write an IANA "
       "name such as \"Europe/Berlin\" or \"UTC\""},
      {"file:/etc/localtime",
       "time zone \"file:/etc/localtime\" is not an IANA time zone name: write an IANA name "
       "such as \"Europe/Berlin\" or \"UTC\""},
      {"Fixed/UTC+01:00",
       "time zone \"Fixed/UTC+01:00\" is not an IANA time zone name: write an IANA name such as "
       "\"Europe/Berlin\" or \"UTC\""},
      {"Europe//Berlin",
       "time zone \"Europe//Berlin\" is not an IANA time zone name: write an IANA name such as "
       "\"Europe/Berlin\" or \"UTC\""},
      {"Europe/Berlin ",
       "time zone \"Europe/Berlin \" is not an IANA time zone name: write an IANA name such as "
       "\"Europe/Berlin\" or \"UTC\""},
      {"localtime",
       "time zone \"localtime\" is not accepted: name the zone itself; write an IANA name such as "
       "\"Europe/Berlin\" or \"UTC\""},
      {"right/UTC",
       "time zone \"right/UTC\" is not accepted: name the zone itself; write an IANA name such as "
       "\"Europe/Berlin\" or \"UTC\""},
  };
  for (const Case& c : cases) {
    auto z = LoadTimeZone(c.name);
    ASSERT_FALSE(z.ok()) << "accepted: \"" << c.name << "\"";
    EXPECT_EQ(z.error().code, ErrorCode::kInvalidArgument) << c.name;
    EXPECT_EQ(z.error().message, c.message) << c.name;
  }
}

// --- Next fire time ------------------------------------------------------------------------------

// From `after`, NextFire gives fires[0]; from fires[0] it gives fires[1]; and so on: the fire
// times in order with nothing in between.
struct Chain {
  const char* zone;
  const char* schedule;
  const char* after;               // UTC
  std::vector<const char*> fires;  // UTC; "none" for no fire within five years
};

void ExpectChain(const Chain& c) {
  const TimeZone zone = Zone(c.zone);
  const CronSchedule schedule = Cron(c.schedule);
  TimePoint at = Utc(c.after);
  for (const char* expected : c.fires) {
    std::optional<TimePoint> next = NextFire(schedule, zone, at);
    ASSERT_EQ(Show(next), std::string(expected) == "none" ? "none" : Show(Utc(expected)))
        << c.zone << " \"" << c.schedule << "\" after " << Show(at);
    if (!next) return;
    at = *next;
  }
}

TEST(CronNextFireTest, Utc) {
  const Chain cases[] = {
      // Every minute: strictly after, at second 0 of the next minute.
      {"UTC", "* * * * *", "2024-01-01 00:00", {"2024-01-01 00:01", "2024-01-01 00:02"}},
      {"UTC", "* * * * *", "2024-01-01 00:00:30", {"2024-01-01 00:01"}},
      {"UTC", "* * * * *", "2024-12-31 23:59:59", {"2025-01-01 00:00"}},
      // Steps.
      {"UTC",
       "*/15 * * * *",
       "2024-05-05 10:07",
       {"2024-05-05 10:15", "2024-05-05 10:30", "2024-05-05 10:45", "2024-05-05 11:00"}},
      {"UTC", "*/15 * * * *", "2024-05-05 23:50", {"2024-05-06 00:00"}},
      {"UTC", "0 */6 * * *", "2024-05-05 13:00", {"2024-05-05 18:00", "2024-05-06 00:00"}},
      {"UTC", "@hourly", "2024-05-05 10:00", {"2024-05-05 11:00"}},
      // Weekdays (2024-03-08 is a Friday).
      {"UTC", "0 9 * * mon-fri", "2024-03-08 10:00", {"2024-03-11 09:00", "2024-03-12 09:00"}},
      {"UTC", "0 9 * * 1,3,5", "2024-03-05 09:00", {"2024-03-06 09:00", "2024-03-08 09:00", "2024-03-11 09:00"}},
      {"UTC", "0 0 * * 7", "2024-09-02 00:00", {"2024-09-08 00:00", "2024-09-15 00:00"}},
      {"UTC", "@weekly", "2024-09-02 00:00", {"2024-09-08 00:00"}},
      // Both day fields restricted: a day matches either (Fridays, and the 13th: a Sunday in October).
      {"UTC",
       "0 0 13 * 5",
       "2024-09-01 00:00",
       {"2024-09-06 00:00", "2024-09-13 00:00", "2024-09-20 00:00", "2024-09-27 00:00", "2024-10-04 00:00",
        "2024-10-11 00:00", "2024-10-13 00:00", "2024-10-18 00:00"}},
      // A day field beginning with '*' is not restricted: both must match (Mondays on odd days).
      {"UTC", "0 0 */2 * mon", "2024-09-01 00:00", {"2024-09-09 00:00", "2024-09-23 00:00", "2024-10-07 00:00"}},
      {"UTC", "0 0 1 * *", "2024-01-31 12:00", {"2024-02-01 00:00"}},
      // Month ends: months without a 31st are passed.
      {"UTC",
       "0 0 31 * *",
       "2024-04-01 00:00",
       {"2024-05-31 00:00", "2024-07-31 00:00", "2024-08-31 00:00", "2024-10-31 00:00"}},
      {"UTC", "0 12 30 * *", "2024-01-31 00:00", {"2024-03-30 12:00"}},
      {"UTC",
       "30 23 28-31 2 *",
       "2023-02-01 00:00",
       {"2023-02-28 23:30", "2024-02-28 23:30", "2024-02-29 23:30", "2025-02-28 23:30"}},
      // February 29th: leap years only; 2100 is none, so from 2096 the next (2104) is past five years.
      {"UTC", "0 0 29 2 *", "2024-03-01 00:00", {"2028-02-29 00:00", "2032-02-29 00:00"}},
      {"UTC", "0 0 29 2 *", "2096-02-29 00:00", {"none"}},
      {"UTC", "0 0 29 2 *", "2099-03-01 00:00", {"2104-02-29 00:00"}},
      // Year rollover.
      {"UTC", "59 23 31 12 *", "2024-12-31 23:59", {"2025-12-31 23:59"}},
      {"UTC", "0 0 1 1 *", "2024-12-31 23:59:30", {"2025-01-01 00:00", "2026-01-01 00:00"}},
      {"UTC", "@yearly", "2024-06-15 00:00", {"2025-01-01 00:00"}},
      {"UTC", "0 12 * jan,jul *", "2024-02-01 00:00", {"2024-07-01 12:00"}},
      {"UTC", "0 0 * dec sun", "2024-12-29 00:00", {"2025-12-07 00:00"}},
      // A fixed offset with half an hour: 09:00 in Kolkata is 03:30 UTC.
      {"Asia/Kolkata", "0 9 * * *", "2024-01-01 00:00", {"2024-01-01 03:30", "2024-01-02 03:30"}},
      {"Etc/GMT+5", "0 9 * * *", "2024-01-01 00:00", {"2024-01-01 14:00"}},  // POSIX sign: GMT+5 is UTC-5
  };
  for (const Chain& c : cases) ExpectChain(c);
}

TEST(CronNextFireTest, SubSecondInstantsAndFireTimes) {
  const TimeZone utc = Zone("UTC");
  const CronSchedule every = Cron("* * * * *");
  const TimePoint noon = Utc("2024-06-01 12:00");
  EXPECT_EQ(Show(NextFire(every, utc, noon - std::chrono::nanoseconds(1))), "2024-06-01 12:00:00");
  EXPECT_EQ(NextFire(every, utc, noon - std::chrono::nanoseconds(1)), noon);  // exactly second 0
  EXPECT_EQ(NextFire(every, utc, noon), noon + minutes(1));
  EXPECT_EQ(NextFire(every, utc, noon + std::chrono::milliseconds(999)), noon + minutes(1));
  // The far ends of the clock: no overflow, no fire.
  EXPECT_EQ(NextFire(every, utc, TimePoint::max()), std::nullopt);
  EXPECT_EQ(NextFire(every, utc, TimePoint::min()), std::nullopt);
}

// Daylight saving, as cron.h states it. Europe/Berlin 2024: 02:00 CET -> 03:00 CEST on March 31st
// at 01:00 UTC; 03:00 CEST -> 02:00 CET on October 27th at 01:00 UTC. America/New_York 2024: 02:00
// EST -> 03:00 EDT on March 10th at 07:00 UTC; 02:00 EDT -> 01:00 EST on November 3rd at 06:00 UTC.
TEST(CronNextFireTest, DaylightSavingEuropeBerlin) {
  const Chain cases[] = {
      // Spring: 02:30 does not exist on the 31st; it fires once at 03:00 CEST (01:00 UTC).
      {"Europe/Berlin", "30 2 * * *", "2024-03-29 12:00", {"2024-03-30 01:30", "2024-03-31 01:00", "2024-04-01 00:30"}},
      {"Europe/Berlin", "0 2 * * *", "2024-03-29 12:00", {"2024-03-30 01:00", "2024-03-31 01:00", "2024-04-01 00:00"}},
      {"Europe/Berlin", "30 1 * * *", "2024-03-29 12:00", {"2024-03-30 00:30", "2024-03-31 00:30", "2024-03-31 23:30"}},
      // Every minute of the missing hour: still once, at 03:00 CEST, then 02:00 CEST the next day.
      {"Europe/Berlin", "* 2 * * *", "2024-03-30 12:00", {"2024-03-31 01:00", "2024-04-01 00:00", "2024-04-01 00:01"}},
      // Exactly at the end of the gap, and just after it.
      {"Europe/Berlin", "30 2 * * *", "2024-03-31 00:59:59", {"2024-03-31 01:00", "2024-04-01 00:30"}},
      {"Europe/Berlin", "30 2 * * *", "2024-03-31 01:00", {"2024-04-01 00:30"}},
      // Interval-like: the missing minutes simply do not happen.
      {"Europe/Berlin",
       "*/30 * * * *",
       "2024-03-31 00:15",
       {"2024-03-31 00:30", "2024-03-31 01:00", "2024-03-31 01:30"}},
      {"Europe/Berlin", "30 * * * *", "2024-03-31 00:15", {"2024-03-31 00:30", "2024-03-31 01:30"}},
      // Autumn: 02:30 occurs twice on the 27th; it fires at the first (CEST, 00:30 UTC) only.
      {"Europe/Berlin", "30 2 * * *", "2024-10-26 12:00", {"2024-10-27 00:30", "2024-10-28 01:30"}},
      {"Europe/Berlin", "0 2 * * *", "2024-10-26 12:00", {"2024-10-27 00:00", "2024-10-28 01:00"}},
      {"Europe/Berlin", "30 1 * * *", "2024-10-26 12:00", {"2024-10-26 23:30", "2024-10-28 00:30"}},
      {"Europe/Berlin",
       "*/30 2 * * *",
       "2024-10-26 23:50",
       {"2024-10-27 00:00", "2024-10-27 00:30", "2024-10-28 01:00"}},
      // Starting inside the first occurrence after its match, or inside the second one.
      {"Europe/Berlin", "30 2 * * *", "2024-10-27 00:45", {"2024-10-28 01:30"}},
      {"Europe/Berlin", "30 2 * * *", "2024-10-27 01:10", {"2024-10-28 01:30"}},
      // Interval-like: real time, both occurrences.
      {"Europe/Berlin",
       "*/30 * * * *",
       "2024-10-26 23:45",
       {"2024-10-27 00:00", "2024-10-27 00:30", "2024-10-27 01:00", "2024-10-27 01:30", "2024-10-27 02:00"}},
      {"Europe/Berlin", "*/30 * * * *", "2024-10-27 01:10", {"2024-10-27 01:30", "2024-10-27 02:00"}},
      {"Europe/Berlin",
       "0 */2 * * *",
       "2024-10-26 23:30",
       {"2024-10-27 00:00", "2024-10-27 01:00", "2024-10-27 03:00"}},
  };
  for (const Chain& c : cases) ExpectChain(c);
}

TEST(CronNextFireTest, DaylightSavingAmericaNewYork) {
  const Chain cases[] = {
      // Spring: 02:xx does not exist on March 10th; 03:00 EDT is 07:00 UTC.
      {"America/New_York", "30 2 * * *", "2024-03-09 12:00", {"2024-03-10 07:00", "2024-03-11 06:30"}},
      {"America/New_York", "0 2 * * *", "2024-03-09 12:00", {"2024-03-10 07:00", "2024-03-11 06:00"}},
      {"America/New_York", "30 1 * * *", "2024-03-09 12:00", {"2024-03-10 06:30", "2024-03-11 05:30"}},
      {"America/New_York",
       "*/30 * * * *",
       "2024-03-10 06:15",
       {"2024-03-10 06:30", "2024-03-10 07:00", "2024-03-10 07:30"}},
      // Autumn: 01:xx occurs twice on November 3rd (EDT, then EST); 02:00 EST is unique.
      {"America/New_York", "30 1 * * *", "2024-11-02 12:00", {"2024-11-03 05:30", "2024-11-04 06:30"}},
      {"America/New_York", "30 2 * * *", "2024-11-02 12:00", {"2024-11-03 07:30", "2024-11-04 07:30"}},
      {"America/New_York", "0 2 * * *", "2024-11-02 12:00", {"2024-11-03 07:00", "2024-11-04 07:00"}},
      {"America/New_York",
       "*/30 * * * *",
       "2024-11-03 05:15",
       {"2024-11-03 05:30", "2024-11-03 06:00", "2024-11-03 06:30", "2024-11-03 07:00"}},
      {"America/New_York",
       "0 * * * *",
       "2024-11-03 04:30",
       {"2024-11-03 05:00", "2024-11-03 06:00", "2024-11-03 07:00"}},
  };
  for (const Chain& c : cases) ExpectChain(c);
}

// Southern hemisphere: Sydney leaves daylight saving on April 7th 2024 (03:00 AEDT -> 02:00 AEST,
// 16:00 UTC on the 6th) and enters it on October 6th (02:00 AEST -> 03:00 AEDT, 16:00 UTC on the 5th).
TEST(CronNextFireTest, DaylightSavingAustraliaSydney) {
  const Chain cases[] = {
      {"Australia/Sydney",
       "30 2 * * *",
       "2024-04-05 12:00",
       {"2024-04-05 15:30", "2024-04-06 15:30", "2024-04-07 16:30"}},
      {"Australia/Sydney",
       "30 2 * * *",
       "2024-10-04 12:00",
       {"2024-10-04 16:30", "2024-10-05 16:00", "2024-10-06 15:30"}},
  };
  for (const Chain& c : cases) ExpectChain(c);
}

// --- A brute-force reference ---------------------------------------------------------------------

// The schedule matched against one local minute, written out plainly.
bool Matches(const CronSchedule& s, const cctz::civil_minute& m) {
  static constexpr int kSundayFirst[] = {1, 2, 3, 4, 5, 6, 0};  // cctz counts from Monday
  const int dow = kSundayFirst[static_cast<int>(cctz::get_weekday(cctz::civil_day(m)))];
  const bool dom_ok = s.days_of_month[m.day()];
  const bool dow_ok = s.days_of_week[dow];
  const bool day_ok = (s.day_of_month_star || s.day_of_week_star) ? (dom_ok && dow_ok) : (dom_ok || dow_ok);
  return s.minutes[m.minute()] && s.hours[m.hour()] && s.months[m.month()] && day_ok;
}

// Whether the real minute `t` is a fire time, by the rule in cron.h, judged for this one minute.
bool FiresAt(const CronSchedule& s, const cctz::time_zone& tz, TimePoint t) {
  const cctz::civil_minute local(tz.lookup(t).cs);
  const cctz::time_zone::civil_lookup l = tz.lookup(cctz::civil_second(local));
  const bool second_occurrence = l.kind == cctz::time_zone::civil_lookup::REPEATED && t != l.pre;
  if (Matches(s, local) && (s.hour_star || !second_occurrence)) return true;
  // The local clock jumped forward just before t: a gap's matching minutes fire at t.
  const cctz::civil_minute before(tz.lookup(t - minutes(1)).cs);
  if (!s.hour_star) {
    for (cctz::civil_minute m = before + 1; m < local; ++m) {
      if (Matches(s, m)) return true;
    }
  }
  return false;
}

TEST(CronNextFireTest, AgreesWithBruteForceAroundEveryTransition) {
  const char* zones[] = {"UTC", "Europe/Berlin", "America/New_York", "Australia/Sydney", "Australia/Lord_Howe"};
  const char* schedules[] = {"* * * * *",      "*/30 * * * *", "0 * * * *",      "30 2 * * *",   "0 2 * * *",
                             "30 1 * * *",     "15 2 * * *",   "*/20 1-3 * * *", "15 2,3 * * *", "0 */2 * * *",
                             "45 0-3 * * sun", "59 1 * * *",   "0 3 * * *",      "* 2 * * *",    "10,40 * 6-7 * *"};
  int fires_seen = 0;
  for (const char* zone_name : zones) {
    const TimeZone zone = Zone(zone_name);
    // A day either side of each transition of 2024 (and one window for UTC).
    std::vector<TimePoint> centres;
    cctz::time_zone::civil_transition tr;
    TimePoint at = Utc("2024-01-01 00:00");
    while (zone.zone().next_transition(at, &tr) && at < Utc("2025-01-01 00:00")) {
      at = zone.zone().lookup(tr.to).trans;
      centres.push_back(at);
    }
    if (centres.empty()) centres.push_back(Utc("2024-06-15 12:00"));
    for (const TimePoint centre : centres) {
      const TimePoint begin = std::chrono::floor<minutes>(centre) - std::chrono::hours(24);
      const TimePoint end = begin + std::chrono::hours(48);
      for (const char* text : schedules) {
        const CronSchedule s = Cron(text);
        std::vector<TimePoint> expected;
        for (TimePoint t = begin; t < end; t += minutes(1)) {
          if (FiresAt(s, zone.zone(), t)) expected.push_back(t);
        }
        // From every minute of the window (and from half a minute after some), the next fire time
        // is the reference's first fire time after that instant.
        std::size_t next = 0;
        int minute_index = 0;
        for (TimePoint t = begin; t < end; t += minutes(1), ++minute_index) {
          while (next < expected.size() && expected[next] <= t) ++next;
          if (next == expected.size()) break;
          ASSERT_EQ(Show(NextFire(s, zone, t)), Show(expected[next]))
              << zone_name << " \"" << text << "\" after " << Show(t);
          if (minute_index % 7 == 0) {
            const TimePoint half = t + std::chrono::seconds(30);
            ASSERT_EQ(Show(NextFire(s, zone, half)), Show(expected[next]))
                << zone_name << " \"" << text << "\" after " << Show(half);
          }
        }
        fires_seen += static_cast<int>(expected.size());
      }
    }
  }
  EXPECT_GT(fires_seen, 0);
}

}  // namespace
}  // namespace basal::serve
