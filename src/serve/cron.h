// Cron schedules for the triggers of `basal serve`: five fields read as Vixie cron and cronie read
// them, and the next fire time in an IANA time zone, correct across daylight-saving changes.
//
//   Result<CronSchedule> s = ParseCron("30 2 * * mon-fri");
//   Result<TimeZone> berlin = LoadTimeZone("Europe/Berlin");
//   if (!s || !berlin) { ... s.error().message ... }
//   std::optional<std::chrono::system_clock::time_point> t = NextFire(*s, *berlin, now);
//
// Pure apart from LoadTimeZone, which reads the system's zone files (/usr/share/zoneinfo, Debian's
// tzdata) once per name through Google's CCTZ. The schedule never consults the machine's own
// time zone: the zone is always the one named.
#pragma once

#include <cctz/time_zone.h>

#include <bitset>
#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "basal/result.h"

namespace basal::serve {

// A parsed schedule. Each bitset is indexed by the field's own numbers, so bit 0 of
// days_of_month and months is never set.
struct CronSchedule {
  std::bitset<60> minutes;        // 0-59
  std::bitset<24> hours;          // 0-23
  std::bitset<32> days_of_month;  // 1-31
  std::bitset<13> months;         // 1-12
  std::bitset<7> days_of_week;    // 0-6, 0 = Sunday (a 7 in the text is stored as 0)
  // Whether the day-of-month / day-of-week field began with '*' ("*" or "*/2"). As in Vixie cron
  // and cronie, only a field that does not begin with '*' counts as restricted for the rule "when
  // both day fields are restricted, a day matches if EITHER does; otherwise it must match both".
  // So "0 0 1,15 * mon" fires on the 1st, the 15th and every Monday, but "0 0 */2 * mon" fires
  // only on the Mondays that fall on an odd day of the month.
  bool day_of_month_star = false;
  bool day_of_week_star = false;
  // Whether the hour field began with '*' ("*", "*/2"): such a schedule is interval-like and
  // follows real time across daylight-saving changes (see NextFire).
  bool hour_star = false;
  std::string text;  // as given (trimmed), "@daily" for a macro
};

// Reads "minute hour day-of-month month day-of-week", fields separated by spaces or tabs:
//   *        every value of the field
//   5        one value            1-5      a range (never backwards, never wrapping)
//   1,15,30  a list of any of these items
//   */15     a step over the whole field   0-30/10   a step over a range
//   jan-dec  month names, sun-sat day-of-week names (three letters, any case), also in ranges
//   7        Sunday, like 0, in the day-of-week field ("5-7" is Friday to Sunday)
// A step after a single value ("5/15") is refused rather than guessed at: write "5-59/15".
// A step must lie between 1 and the field's span (59 for minutes): a larger one would select only
// the first value, which is never what was meant.
// Macros: @hourly "0 * * * *", @daily and @midnight "0 0 * * *", @weekly "0 0 * * 0",
// @monthly "0 0 1 * *", @yearly and @annually "0 0 1 1 *". @reboot is refused (the daemon has
// its own start), as is anything else after '@'.
// Errors are kInvalidArgument and name the field and its text, for example
//   cron field 2 (hour) "25": 25 is outside 0-23
// A schedule that can never fire ("0 0 30 2 *", "0 0 31 4 *": no such day in the months named)
// is refused with a message saying so. "0 0 29 2 *" is accepted: it fires in leap years.
Result<CronSchedule> ParseCron(std::string_view text);

// An IANA time zone, loaded. Copies are cheap (cctz shares the loaded zone for the process's
// lifetime).
class TimeZone {
 public:
  const std::string& name() const { return name_; }
  const cctz::time_zone& zone() const { return zone_; }

 private:
  friend Result<TimeZone> LoadTimeZone(std::string_view name);
  TimeZone(cctz::time_zone zone, std::string name) : zone_(zone), name_(std::move(name)) {}

  cctz::time_zone zone_;
  std::string name_;
};

// An IANA name from the system's zone database: "Europe/Berlin", "America/New_York", "UTC",
// "Etc/GMT+5". Unknown names are refused (kInvalidArgument), never replaced by UTC. So are names
// that are not IANA names but that CCTZ would still read: paths ("/etc/localtime",
// "../x"), "localtime" (the machine's own zone) and "Fixed/UTC+01:00".
Result<TimeZone> LoadTimeZone(std::string_view name);

// The first fire time strictly after `after`, or nullopt if there is none within five years of
// it (365.2425-day years; "0 0 29 2 *" asked in March 2097 has none, since 2100 is no leap year).
// Fire times are whole minutes (second 0). The fields are read in the zone's local time; where
// daylight saving (or any change of the zone's offset) breaks the one-to-one map between local
// and real time, the rule is cronie's:
// - A matching local time that does not exist (in a spring-forward gap, such as 02:30 in
//   Europe/Berlin on the last Sunday of March) fires once, at the first instant after the gap
//   (03:00 local), however many matching minutes the gap held. This holds only for schedules
//   whose hour field does not begin with '*': for an interval-like schedule ("*/15 * * * *",
//   "0 */2 * * *") the missing minutes simply do not happen.
// - A matching local time that occurs twice (in a fall-back, such as 02:30 in Europe/Berlin on
//   the last Sunday of October) fires once, at its first occurrence, except for interval-like
//   schedules (hour field beginning with '*'), which follow real time and fire at both.
// The search steps by month, day, hour and minute through the bitsets (a month or day that cannot
// match is passed whole) and by the zone's transitions, never one minute at a time.
std::optional<std::chrono::system_clock::time_point> NextFire(const CronSchedule& schedule, const TimeZone& zone,
                                                              std::chrono::system_clock::time_point after);

}  // namespace basal::serve
