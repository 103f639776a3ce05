// The web console's sign-in sessions (sessions.h).
#include "serve/sessions.h"

#include <algorithm>
#include <utility>

#include "serve/signature.h"

namespace basal::serve {

namespace {

constexpr size_t kRandomBytes = 32;

}  // namespace

ConsoleSessions::ConsoleSessions(Random random, std::function<int64_t()> now_us)
    : random_(std::move(random)), now_us_(std::move(now_us)) {}

std::string ConsoleSessions::Key(std::string_view id) const { return ApiTokenHash(id); }

bool ConsoleSessions::Expired(const ConsoleSession& s, const SessionLimits& limits, int64_t now_us) const {
  const int64_t idle_us = std::chrono::duration_cast<std::chrono::microseconds>(limits.idle).count();
  const int64_t max_age_us = std::chrono::duration_cast<std::chrono::microseconds>(limits.max_age).count();
  return now_us - s.last_used_us >= idle_us || now_us - s.created_us >= max_age_us;
}

void ConsoleSessions::Erase(std::map<std::string, ConsoleSession>::iterator it) {
  const std::string id = it->second.id;
  sessions_.erase(it);
  if (on_end_) on_end_(id);
}

void ConsoleSessions::Sweep(const SessionLimits& limits) {
  const int64_t now = now_us_();
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    auto here = it++;
    if (Expired(here->second, limits, now)) Erase(here);
  }
}

const ConsoleSession& ConsoleSessions::Open(std::string token_hash, std::string token_name,
                                            const SessionLimits& limits) {
  Sweep(limits);
  while (!sessions_.empty() && sessions_.size() >= std::max<size_t>(limits.max_sessions, 1)) {
    auto oldest = std::min_element(sessions_.begin(), sessions_.end(), [](const auto& a, const auto& b) {
      return a.second.last_used_us < b.second.last_used_us;
    });
    Erase(oldest);
  }
  const int64_t now = now_us_();
  ConsoleSession s;
  s.id = Base64Url(random_(kRandomBytes));
  s.csrf_token = Base64Url(random_(kRandomBytes));
  s.token_hash = std::move(token_hash);
  s.token_name = std::move(token_name);
  s.created_us = now;
  s.last_used_us = now;
  auto [it, inserted] = sessions_.insert_or_assign(Key(s.id), std::move(s));
  return it->second;
}

const ConsoleSession* ConsoleSessions::Find(std::string_view id, const SessionLimits& limits) {
  auto it = sessions_.find(Key(id));
  if (it == sessions_.end()) return nullptr;
  const int64_t now = now_us_();
  if (Expired(it->second, limits, now)) {
    Erase(it);
    return nullptr;
  }
  it->second.last_used_us = now;
  return &it->second;
}

bool ConsoleSessions::End(std::string_view id) {
  auto it = sessions_.find(Key(id));
  if (it == sessions_.end()) return false;
  Erase(it);
  return true;
}

bool ConsoleSessions::OpenStream(std::string_view id, const SessionLimits& limits) {
  auto it = sessions_.find(Key(id));
  if (it == sessions_.end() || it->second.streams >= limits.max_streams) return false;
  ++it->second.streams;
  return true;
}

void ConsoleSessions::CloseStream(std::string_view id) {
  auto it = sessions_.find(Key(id));
  if (it != sessions_.end() && it->second.streams > 0) --it->second.streams;
}

std::string Base64Url(std::string_view bytes) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  out.reserve((bytes.size() * 4 + 2) / 3);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = (static_cast<uint8_t>(bytes[i]) << 16) | (static_cast<uint8_t>(bytes[i + 1]) << 8) |
                       static_cast<uint8_t>(bytes[i + 2]);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  const size_t rest = bytes.size() - i;
  if (rest > 0) {
    uint32_t v = static_cast<uint8_t>(bytes[i]) << 16;
    if (rest == 2) v |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    if (rest == 2) out += kAlphabet[(v >> 6) & 63];
  }
  return out;
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::optional<std::string_view> CookieValue(std::string_view header, std::string_view name) {
  // RFC 6265, section 5.4: "name=value" pairs separated by "; ". Browsers may send a name twice
  // (cookies of several paths); the first is the most specific path's.
  while (!header.empty()) {
    const size_t end = header.find(';');
    std::string_view pair = header.substr(0, end);
    header = end == std::string_view::npos ? std::string_view() : header.substr(end + 1);
    while (!pair.empty() && (pair.front() == ' ' || pair.front() == '\t')) pair.remove_prefix(1);
    while (!pair.empty() && (pair.back() == ' ' || pair.back() == '\t')) pair.remove_suffix(1);
    const size_t eq = pair.find('=');
    if (eq == std::string_view::npos || pair.substr(0, eq) != name) continue;
    std::string_view value = pair.substr(eq + 1);
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"') value = value.substr(1, value.size() - 2);
    return value;
  }
  return std::nullopt;
}

std::string SessionCookie(std::string_view id, std::chrono::milliseconds max_age, bool secure) {
  const int64_t seconds = id.empty() ? 0 : std::chrono::duration_cast<std::chrono::seconds>(max_age).count();
  std::string cookie = std::string(kSessionCookie) + "=" + std::string(id) +
                       "; Path=/; Max-Age=" + std::to_string(seconds) + "; HttpOnly; SameSite=Strict";
  if (secure) cookie += "; Secure";
  return cookie;
}

}  // namespace basal::serve
