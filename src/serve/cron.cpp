// Cron schedules: the five-field parser and the next fire time (cron.h).
#include "serve/cron.h"

#include <cctz/civil_time.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace basal::serve {
namespace {

// --- Parsing -------------------------------------------------------------------------------------

constexpr std::array<std::string_view, 12> kMonthNames = {"jan", "feb", "mar", "apr", "may", "jun",
                                                          "jul", "aug", "sep", "oct", "nov", "dec"};
constexpr std::array<std::string_view, 7> kDayNames = {"sun", "mon", "tue", "wed", "thu", "fri", "sat"};

struct FieldSpec {
  const char* name;
  int min;
  int max;                                  // the largest number written in the field (7 for day of week)
  int star_max;                             // the last value '*' covers (6 for day of week: 7 is Sunday again)
  const std::string_view* names = nullptr;  // three-letter names for min, min+1, ...
  std::size_t name_count = 0;
  const char* name_hint = nullptr;
};

constexpr std::array<FieldSpec, 5> kFields = {{
    {"minute", 0, 59, 59},
    {"hour", 0, 23, 23},
    {"day of month", 1, 31, 31},
    {"month", 1, 12, 12, kMonthNames.data(), kMonthNames.size(), "a month name (jan-dec)"},
    {"day of week", 0, 7, 6, kDayNames.data(), kDayNames.size(), "a day name (sun-sat)"},
}};

// Wide enough for every field; the caller copies the bits into the field's own bitset.
using FieldBits = std::bitset<64>;

Error FieldError(std::size_t index, std::string_view field, const std::string& problem) {
  return MakeError(ErrorCode::kInvalidArgument, "cron field " + std::to_string(index + 1) + " (" + kFields[index].name +
                                                    ") \"" + std::string(field) + "\": " + problem);
}

char Lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool AllDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string Range(const FieldSpec& spec) { return std::to_string(spec.min) + "-" + std::to_string(spec.max); }

// A value of the field as a name (when the field has names and the text used one) or a number.
std::string Spell(const FieldSpec& spec, int value, bool as_name) {
  if (as_name && spec.names != nullptr && value - spec.min < static_cast<int>(spec.name_count)) {
    return std::string(spec.names[value - spec.min]);
  }
  return std::to_string(value);
}

// A number or (in month and day of week) a name. Numbers outside the field are refused here.
Result<int> ParseValue(std::size_t index, std::string_view field, std::string_view token) {
  const FieldSpec& spec = kFields[index];
  if (AllDigits(token)) {
    // More digits than any field takes cannot be in range; stopping here also keeps the
    // arithmetic below far from overflow.
    int value = 0;
    if (token.size() <= 4) {
      for (char c : token) value = value * 10 + (c - '0');
    }
    if (token.size() > 4 || value < spec.min || value > spec.max) {
      return FieldError(index, field, std::string(token) + " is outside " + Range(spec));
    }
    return value;
  }
  if (spec.names != nullptr && token.size() == 3) {
    for (std::size_t i = 0; i < spec.name_count; ++i) {
      std::string_view name = spec.names[i];
      if (Lower(token[0]) == name[0] && Lower(token[1]) == name[1] && Lower(token[2]) == name[2]) {
        return spec.min + static_cast<int>(i);
      }
    }
  }
  if (token.empty()) return FieldError(index, field, "a value is missing (around '-' or '/')");
  std::string problem = "\"" + std::string(token) + "\" is not a number";
  if (spec.name_hint != nullptr) problem += " or " + std::string(spec.name_hint);
  return FieldError(index, field, problem);
}

// One item of a list: "*", "5", "1-5", "*/15", "0-30/10".
Result<void> ParseItem(std::size_t index, std::string_view field, std::string_view item, FieldBits& bits) {
  const FieldSpec& spec = kFields[index];
  if (item.empty()) return FieldError(index, field, "an item of the list is empty (two commas, or a comma at an end)");

  std::string_view base = item;
  std::optional<std::string_view> step_text;
  if (std::size_t slash = item.find('/'); slash != std::string_view::npos) {
    base = item.substr(0, slash);
    step_text = item.substr(slash + 1);
    if (step_text->find('/') != std::string_view::npos) {
      return FieldError(index, field, "\"" + std::string(item) + "\" has more than one '/'");
    }
  }

  int low = 0;
  int high = 0;
  if (base == "*") {
    low = spec.min;
    high = spec.star_max;
  } else if (std::size_t dash = base.find('-'); dash != std::string_view::npos) {
    std::string_view first = base.substr(0, dash);
    std::string_view last = base.substr(dash + 1);
    if (last.find('-') != std::string_view::npos) {
      return FieldError(index, field, "\"" + std::string(base) + "\" is not a range: a range is two values, a-b");
    }
    auto a = ParseValue(index, field, first);
    if (!a) return a.error();
    auto b = ParseValue(index, field, last);
    if (!b) return b.error();
    low = *a;
    high = *b;
    if (low > high) {
      // Say it in the words used: "sat-sun" becomes "sat,sun", "22-2" becomes "22-23,0-2".
      const bool names = !AllDigits(first);
      const std::string upper = low == spec.star_max
                                    ? Spell(spec, low, names)
                                    : Spell(spec, low, names) + "-" + Spell(spec, spec.star_max, names);
      const std::string lower =
          high == spec.min ? Spell(spec, high, names) : Spell(spec, spec.min, names) + "-" + Spell(spec, high, names);
      return FieldError(index, field,
                        "the range " + std::string(base) +
                            " runs backwards; ranges do not wrap around: write it as two items, such as " + upper +
                            "," + lower);
    }
  } else {
    auto v = ParseValue(index, field, base);
    if (!v) return v.error();
    low = high = *v;
    if (step_text) {
      // Vixie cron ignored such a step, other crons read it as "from 5 to the end": refuse to guess.
      return FieldError(index, field,
                        "a step needs '*' or a range before it: write " + std::string(base) + "-" +
                            Spell(spec, spec.star_max, !AllDigits(base)) + "/" + std::string(*step_text) +
                            " for every " + std::string(*step_text) + " from " + std::string(base));
    }
  }

  int step = 1;
  if (step_text) {
    const int span = spec.star_max - spec.min;
    if (!AllDigits(*step_text)) {
      return FieldError(index, field, "the step \"" + std::string(*step_text) + "\" is not a number");
    }
    step = step_text->size() <= 4 ? std::stoi(std::string(*step_text)) : span + 1;
    if (step < 1 || step > span) {
      return FieldError(index, field,
                        "the step " + std::string(*step_text) + " is outside 1-" + std::to_string(span) +
                            (step < 1 ? "" : " (a larger step selects only the first value)"));
    }
  }
  for (int v = low; v <= high; v += step) bits.set(static_cast<std::size_t>(v));
  return Ok();
}

Result<FieldBits> ParseField(std::size_t index, std::string_view field) {
  FieldBits bits;
  std::size_t start = 0;
  for (;;) {
    std::size_t comma = field.find(',', start);
    std::string_view item =
        field.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    if (auto r = ParseItem(index, field, item, bits); !r) return r.error();
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return bits;
}

template <std::size_t N>
std::bitset<N> Narrow(const FieldBits& bits) {
  std::bitset<N> out;
  for (std::size_t i = 0; i < N; ++i) out[i] = bits[i];
  return out;
}

bool IsBlank(char c) { return c == ' ' || c == '\t'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsBlank(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsBlank(s.back())) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> SplitFields(std::string_view s) {
  std::vector<std::string_view> fields;
  std::size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && IsBlank(s[i])) ++i;
    std::size_t start = i;
    while (i < s.size() && !IsBlank(s[i])) ++i;
    if (i > start) fields.push_back(s.substr(start, i - start));
  }
  return fields;
}

// The most days each month can have (February in a leap year).
constexpr std::array<int, 13> kMaxDaysInMonth = {0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};

constexpr std::string_view kFiveFields = "minute hour day-of-month month day-of-week";

struct Macro {
  std::string_view name;
  std::string_view fields;
};
constexpr std::array<Macro, 7> kMacros = {{
    {"@hourly", "0 * * * *"},
    {"@daily", "0 0 * * *"},
    {"@midnight", "0 0 * * *"},
    {"@weekly", "0 0 * * 0"},
    {"@monthly", "0 0 1 * *"},
    {"@yearly", "0 0 1 1 *"},
    {"@annually", "0 0 1 1 *"},
}};

Result<CronSchedule> ParseFields(std::string_view text) {
  std::vector<std::string_view> fields = SplitFields(text);
  if (fields.size() != 5) {
    std::string message = "cron schedule \"" + std::string(text) + "\" has " + std::to_string(fields.size()) +
                          " fields; it needs five, " + std::string(kFiveFields) + " (such as \"0 3 * * *\")";
    if (fields.size() == 6) message += "; seconds and years are not supported";
    return MakeError(ErrorCode::kInvalidArgument, message + ", or a macro such as @daily");
  }
  std::array<FieldBits, 5> bits;
  for (std::size_t i = 0; i < fields.size(); ++i) {
    auto b = ParseField(i, fields[i]);
    if (!b) return b.error();
    bits[i] = *b;
  }
  CronSchedule s;
  s.minutes = Narrow<60>(bits[0]);
  s.hours = Narrow<24>(bits[1]);
  s.days_of_month = Narrow<32>(bits[2]);
  s.months = Narrow<13>(bits[3]);
  if (bits[4][7]) bits[4].set(0);  // 7 is Sunday
  s.days_of_week = Narrow<7>(bits[4]);
  s.hour_star = fields[1].front() == '*';
  s.day_of_month_star = fields[2].front() == '*';
  s.day_of_week_star = fields[4].front() == '*';

  // When a day must match the day-of-month field (the day-of-week field cannot stand in for it),
  // some month named must have one of the days named. Every such (month, day) pair falls on every
  // weekday in some year, so the day-of-week field cannot make the schedule impossible.
  if (s.day_of_month_star || s.day_of_week_star) {
    bool possible = false;
    for (int m = 1; m <= 12 && !possible; ++m) {
      if (!s.months[m]) continue;
      for (int d = 1; d <= kMaxDaysInMonth[m] && !possible; ++d) possible = s.days_of_month[d];
    }
    if (!possible) {
      return MakeError(ErrorCode::kInvalidArgument, "cron schedule \"" + std::string(text) +
                                                        "\" can never fire: day of month \"" + std::string(fields[2]) +
                                                        "\" never occurs in month \"" + std::string(fields[3]) + "\"");
    }
  }
  return s;
}

// --- Next fire time ------------------------------------------------------------------------------

using Seconds = cctz::time_point<cctz::seconds>;  // system_clock, whole seconds

int DayOfWeek(const cctz::civil_day& d) {
  switch (cctz::get_weekday(d)) {
    case cctz::weekday::sunday:
      return 0;
    case cctz::weekday::monday:
      return 1;
    case cctz::weekday::tuesday:
      return 2;
    case cctz::weekday::wednesday:
      return 3;
    case cctz::weekday::thursday:
      return 4;
    case cctz::weekday::friday:
      return 5;
    case cctz::weekday::saturday:
      return 6;
  }
  return 0;
}

bool DayMatches(const CronSchedule& s, const cctz::civil_day& d) {
  const bool dom = s.days_of_month[static_cast<std::size_t>(d.day())];
  const bool dow = s.days_of_week[static_cast<std::size_t>(DayOfWeek(d))];
  if (s.day_of_month_star || s.day_of_week_star) return dom && dow;
  return dom || dow;
}

// The first set bit at or after `from`, or -1.
template <std::size_t N>
int NextBit(const std::bitset<N>& bits, int from) {
  for (std::size_t i = static_cast<std::size_t>(from); i < N; ++i) {
    if (bits[i]) return static_cast<int>(i);
  }
  return -1;
}

// The first local (civil) minute in [from, until) that the schedule matches. A month or day that
// cannot match is passed whole; within a day the bitsets give the next hour and minute directly.
std::optional<cctz::civil_minute> NextMatch(const CronSchedule& s, cctz::civil_minute from, cctz::civil_minute until) {
  cctz::civil_minute c = from;
  while (c < until) {
    if (!s.months[static_cast<std::size_t>(c.month())]) {
      c = cctz::civil_minute(cctz::civil_month(c) + 1);
      continue;
    }
    const cctz::civil_day day(c);
    if (!DayMatches(s, day)) {
      c = cctz::civil_minute(day + 1);
      continue;
    }
    const int hour = NextBit(s.hours, c.hour());
    if (hour < 0) {
      c = cctz::civil_minute(day + 1);
      continue;
    }
    if (hour != c.hour()) c = cctz::civil_minute(c.year(), c.month(), c.day(), hour, 0);
    const int minute = NextBit(s.minutes, c.minute());
    if (minute < 0) {
      c = cctz::civil_minute(cctz::civil_hour(c) + 1);
      continue;
    }
    c = cctz::civil_minute(c.year(), c.month(), c.day(), c.hour(), minute);
    if (c < until) return c;
    break;
  }
  return std::nullopt;
}

// The zone's offsets are whole minutes since the 19th century; rounding up keeps a fire time a
// whole minute even for an odd historical offset.
cctz::civil_minute CeilMinute(const cctz::civil_second& cs) {
  cctz::civil_minute m(cs);
  if (cctz::civil_second(m) < cs) m += 1;
  return m;
}

const cctz::civil_second kEpoch(1970, 1, 1, 0, 0, 0);

// Local time at `t` in a fixed offset, and back.
cctz::civil_second CivilAt(Seconds t, int offset_seconds) {
  return kEpoch + (t.time_since_epoch().count() + offset_seconds);
}
Seconds InstantOf(const cctz::civil_second& cs, int offset_seconds) {
  return Seconds(cctz::seconds((cs - kEpoch) - offset_seconds));
}

// The instant a transition happens (doc example of cctz::time_zone::next_transition).
Seconds TransitionInstant(const cctz::time_zone& tz, const cctz::time_zone::civil_transition& tr) {
  return tz.lookup(tr.to).trans;
}

}  // namespace

Result<CronSchedule> ParseCron(std::string_view text) {
  const std::string_view trimmed = Trim(text);
  if (trimmed.empty()) {
    return MakeError(ErrorCode::kInvalidArgument, "cron schedule is empty: write five fields, " +
                                                      std::string(kFiveFields) +
                                                      " (such as \"0 3 * * *\"), or a macro such as @daily");
  }
  if (trimmed.front() == '@') {
    std::string lower(trimmed);
    for (char& c : lower) c = Lower(c);
    for (const Macro& m : kMacros) {
      if (lower == m.name) {
        auto s = ParseFields(m.fields);
        if (s) s->text = std::string(trimmed);
        return s;
      }
    }
    if (lower == "@reboot") {
      return MakeError(ErrorCode::kInvalidArgument,
                       "cron schedule \"@reboot\" is not supported: it has no time to fire at; write a schedule "
                       "such as @hourly or \"0 3 * * *\"");
    }
    return MakeError(ErrorCode::kInvalidArgument,
                     "cron schedule \"" + std::string(trimmed) +
                         "\" is not a known macro: use @hourly, @daily, @midnight, @weekly, @monthly, @yearly or "
                         "@annually, or five fields, " +
                         std::string(kFiveFields));
  }
  auto s = ParseFields(trimmed);
  if (s) s->text = std::string(trimmed);
  return s;
}

Result<TimeZone> LoadTimeZone(std::string_view name) {
  const std::string hint = "write an IANA name such as \"Europe/Berlin\" or \"UTC\"";
  if (name.empty()) return MakeError(ErrorCode::kInvalidArgument, "time zone name is empty: " + hint);
  // IANA names are letters, digits, '_', '-', '+' and '/' between non-empty parts. Checking that
  // keeps out what CCTZ would also read: paths ("/etc/localtime", "../"), "file:" names and
  // "Fixed/UTC+01:00".
  const bool iana_shaped = name.size() <= 64 && name.front() != '/' && name.back() != '/' &&
                           name.find("//") == std::string_view::npos &&
                           std::all_of(name.begin(), name.end(), [](char c) {
                             return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                                    c == '_' || c == '-' || c == '+' || c == '/';
                           });
  if (!iana_shaped) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "time zone \"" + std::string(name) + "\" is not an IANA time zone name: " + hint);
  }
  // "localtime" is the machine's own zone: a schedule must not change meaning with the host.
  // right/ zones count leap seconds, so their local minutes are not whole minutes of real time.
  if (name == "localtime" || name.substr(0, 6) == "right/") {
    return MakeError(ErrorCode::kInvalidArgument,
                     "time zone \"" + std::string(name) + "\" is not accepted: name the zone itself; " + hint);
  }
  cctz::time_zone zone;
  if (!cctz::load_time_zone(std::string(name), &zone)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "unknown time zone \"" + std::string(name) +
                         "\": not in the system's zone database (/usr/share/zoneinfo, Debian package tzdata); " + hint);
  }
  return TimeZone(zone, std::string(name));
}

std::optional<std::chrono::system_clock::time_point> NextFire(const CronSchedule& s, const TimeZone& zone,
                                                              std::chrono::system_clock::time_point after) {
  using std::chrono::system_clock;
  constexpr auto kHorizon = std::chrono::years(5);
  // Far enough from the clock's ends (1677 and 2262) that nothing below overflows.
  if (after > system_clock::time_point::max() - 2 * kHorizon || after < system_clock::time_point::min() + kHorizon) {
    return std::nullopt;
  }
  const cctz::time_zone& tz = zone.zone();
  const Seconds first = std::chrono::time_point_cast<cctz::seconds>(std::chrono::floor<std::chrono::minutes>(after) +
                                                                    std::chrono::minutes(1));
  const Seconds limit = std::chrono::floor<cctz::seconds>(after + kHorizon);

  // The search walks the zone's stretches of constant offset in order. Within one, local and real
  // time map one to one, so the first matching local minute is the first fire time; at the
  // transition that ends it, the gap or the repeat is dealt with as cron.h says.
  Seconds segment = first;  // where the stretch being searched begins
  cctz::civil_minute from = CeilMinute(tz.lookup(segment).cs);
  cctz::time_zone::civil_transition tr;
  // The latest transition at or before `first`: we may start inside a repeat, or exactly at the
  // end of a gap that held a matching minute.
  if (tz.prev_transition(segment + cctz::seconds(1), &tr)) {
    const Seconds at = TransitionInstant(tz, tr);
    if (at <= segment && !s.hour_star) {
      if (tr.to < tr.from) from = std::max(from, CeilMinute(tr.from));
      if (tr.to > tr.from && at == segment && NextMatch(s, CeilMinute(tr.from), CeilMinute(tr.to))) return at;
    }
  }
  for (;;) {
    const int offset = tz.lookup(segment).offset;
    const bool has_next = tz.next_transition(segment, &tr);
    const Seconds next_at = has_next ? TransitionInstant(tz, tr) : Seconds::max();
    if (has_next && next_at <= segment) return std::nullopt;  // never expected: a transition must move forward
    cctz::civil_minute until = cctz::civil_minute(CivilAt(limit, offset)) + 1;
    if (has_next) until = std::min(until, CeilMinute(tr.from));
    if (auto c = NextMatch(s, from, until)) return InstantOf(cctz::civil_second(*c), offset);
    if (!has_next || next_at > limit) return std::nullopt;
    if (tr.to > tr.from) {
      // A gap: its matching minutes fire once, as it ends (fixed-time schedules only).
      if (!s.hour_star && NextMatch(s, CeilMinute(tr.from), CeilMinute(tr.to))) return next_at;
      from = CeilMinute(tr.to);
    } else if (tr.to < tr.from) {
      // A repeat: a fixed-time schedule fired at the first occurrence, so it skips the second.
      from = CeilMinute(s.hour_star ? tr.to : tr.from);
    } else {
      from = CeilMinute(tr.to);
    }
    segment = next_at;
  }
}

}  // namespace basal::serve
