// Activation owners and the texts recovery writes (see owner.h).
#include "parent/store/owner.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace basal {

std::optional<int64_t> ProcessStartTicks(int64_t pid) {
  if (pid <= 0 || pid > INT_MAX) return std::nullopt;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  if (!in) return std::nullopt;
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string text = buf.str();
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  // After "pid (comm)" come field 3 (state) onwards; starttime is field 22, the 20th after ')'.
  std::istringstream fields(text.substr(close + 1));
  std::string field;
  for (int n = 3; n <= 22; ++n) {
    if (!(fields >> field)) return std::nullopt;
  }
  try {
    size_t used = 0;
    const long long ticks = std::stoll(field, &used);
    if (used != field.size() || ticks < 0) return std::nullopt;
    return static_cast<int64_t>(ticks);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

ActivationOwner ThisProcessOwner() {
  ActivationOwner self;
  char host[HOST_NAME_MAX + 1] = {};
  if (::gethostname(host, sizeof host - 1) == 0) self.host = host;
  self.pid = static_cast<int64_t>(::getpid());
  self.start_ticks = ProcessStartTicks(self.pid).value_or(0);
  return self;
}

bool OwnerIsGone(const ActivationOwner& owner, int64_t lease_until_unix_us, const ActivationOwner& self,
                 int64_t now_unix_us) {
  if (owner.host == self.host && owner.pid == self.pid && owner.start_ticks == self.start_ticks) return false;
  if (owner.host != self.host) return lease_until_unix_us < now_unix_us;
  if (owner.pid <= 0 || owner.pid > INT_MAX) return true;
  if (::kill(static_cast<pid_t>(owner.pid), 0) != 0 && errno == ESRCH) return true;
  const std::optional<int64_t> ticks = ProcessStartTicks(owner.pid);
  if (!ticks) {
    // Exists (kill did not say ESRCH) but /proc does not show it: either it exited just now or
    // /proc hides it (hidepid). Alive unless it is really gone.
    return ::kill(static_cast<pid_t>(owner.pid), 0) != 0 && errno == ESRCH;
  }
  return *ticks != owner.start_ticks;
}

namespace {

std::string UtcTextByLibc(int64_t unix_us) {
  const time_t secs = static_cast<time_t>(unix_us / 1'000'000);
  tm t{};
  gmtime_r(&secs, &t);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", t.tm_year + 1900, t.tm_mon + 1, t.tm_mday,
                t.tm_hour, t.tm_min, t.tm_sec, static_cast<int>((unix_us % 1'000'000) / 1000));
  return buf;
}

}  // namespace

// Every run's answer and listing row carries three of these: the calendar is computed here
// (days since 1970 to a proleptic Gregorian date, in 400-year eras of 146,097 days, March-based
// years so that the leap day ends a year) and the digits written in place, rather than through
// gmtime_r and snprintf. Years 1970 to 9999 only; anything else goes the libc way, which the test
// compares this with.
std::string UtcText(int64_t unix_us) {
  constexpr int64_t kMaxUs = 253402300799999999;  // 9999-12-31T23:59:59.999999Z
  if (unix_us < 0 || unix_us > kMaxUs) return UtcTextByLibc(unix_us);
  const int64_t secs = unix_us / 1'000'000;
  const int ms = static_cast<int>((unix_us % 1'000'000) / 1000);
  const int64_t days = secs / 86'400;
  const int64_t in_day = secs % 86'400;
  const int64_t z = days + 719'468;  // days since 0000-03-01
  const int64_t era = z / 146'097;
  const int64_t doe = z - era * 146'097;                                      // [0, 146096]
  const int64_t yoe = (doe - doe / 1460 + doe / 36'524 - doe / 146'096) / 365;  // [0, 399]
  const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);                // [0, 365], from March 1
  const int64_t mp = (5 * doy + 2) / 153;                                     // [0, 11], March = 0
  const int day = static_cast<int>(doy - (153 * mp + 2) / 5 + 1);
  const int month = static_cast<int>(mp < 10 ? mp + 3 : mp - 9);
  const int year = static_cast<int>(yoe + era * 400 + (month <= 2 ? 1 : 0));
  char buf[24];
  auto put = [&buf](int at, int value, int width) {
    for (int i = width - 1; i >= 0; --i) {
      buf[at + i] = static_cast<char>('0' + value % 10);
      value /= 10;
    }
  };
  put(0, year, 4);
  buf[4] = '-';
  put(5, month, 2);
  buf[7] = '-';
  put(8, day, 2);
  buf[10] = 'T';
  put(11, static_cast<int>(in_day / 3600), 2);
  buf[13] = ':';
  put(14, static_cast<int>(in_day / 60 % 60), 2);
  buf[16] = ':';
  put(17, static_cast<int>(in_day % 60), 2);
  buf[19] = '.';
  put(20, ms, 3);
  buf[23] = 'Z';
  return std::string(buf, sizeof buf);
}

std::string AbandonedActivationErrorJson(const ActivationOwner& owner, const ActivationOwner& self,
                                         int64_t now_unix_us) {
  const std::string who = owner.host.empty() && owner.pid == 0
                              ? std::string("its parent (not recorded: journaled before basal recorded owners)")
                              : "its parent (host " + owner.host + ", pid " + std::to_string(owner.pid) + ")";
  const std::string message = who + " died while it ran; closed by pid " + std::to_string(self.pid) + " at " +
                              UtcText(now_unix_us);
  return nlohmann::json{{"kind", "abandoned"}, {"message", message}}.dump(-1, ' ', false,
                                                                        nlohmann::json::error_handler_t::replace);
}

std::string UnknownCallErrorJson() {
  return nlohmann::json{{"name", "OutcomeUnknown"},
                        {"message",
                         "the outcome is unknown: the parent died after the call started, so its effect may or "
                         "may not have happened"}}
      .dump();
}

std::string AbandonedCallErrorJson() {
  return nlohmann::json{{"name", "Abandoned"},
                        {"message", "never started: the parent died after the call was decided"}}
      .dump();
}

}  // namespace basal
