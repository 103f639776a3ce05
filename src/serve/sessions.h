// The web console's sign-in sessions (docs/console.md). Signing in with an API token opens a
// session: a random id, kept by the browser in an HttpOnly cookie, that stands for the token's
// hash (the token itself is never kept) and carries a CSRF token that every request of the
// session must send back in a header (only the console's page has it: the sign-in's answer). Sessions live in memory only, and are
// bounded: at most max_sessions (signing in past it ends the session used longest ago), each ends
// `idle` after its last request or `max_age` after sign-in, whichever comes first, and holds at
// most max_streams event streams at once. A restart ends them all.
//
// Invariant: a session never outlives its max_age, and never gives more than its token: admission
// looks the token up again at every request (auth.h), so a revoked token's sessions stop at once.
//
//   ConsoleSessions sessions(limits, RandomBytes, SystemNowUs);
//   const ConsoleSession& s = sessions.Open(ApiTokenHash(token), "ci");
//   response.headers.emplace_back("Set-Cookie", SessionCookie(s.id, limits.max_age, secure));
//   if (const ConsoleSession* found = sessions.Find(*CookieValue(cookie_header, kSessionCookie))) ...
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace basal::serve {

// The cookie that holds a session's id.
inline constexpr std::string_view kSessionCookie = "basal_session";
// The header a session's state-changing request carries its CSRF token in.
inline constexpr std::string_view kCsrfHeader = "x-csrf-token";

struct ConsoleSession {
  std::string id;          // the cookie's value: 32 random bytes, base64url (43 characters)
  std::string token_hash;  // ApiTokenHash of the token signed in with
  std::string token_name;
  std::string csrf_token;  // 32 random bytes, base64url
  int64_t created_us = 0;
  int64_t last_used_us = 0;
  size_t streams = 0;      // event streams open now
};

struct SessionLimits {
  size_t max_sessions = 64;
  std::chrono::milliseconds idle{std::chrono::hours(1)};
  std::chrono::milliseconds max_age{std::chrono::hours(12)};
  size_t max_streams = 4;  // per session
};

class ConsoleSessions {
 public:
  // `random(n)`: n unpredictable bytes (getrandom). `now_us`: the wall clock, in microseconds.
  using Random = std::function<std::string(size_t bytes)>;
  ConsoleSessions(Random random, std::function<int64_t()> now_us);
  ConsoleSessions(const ConsoleSessions&) = delete;
  ConsoleSessions& operator=(const ConsoleSessions&) = delete;

  // Opens a session for the token with this hash. Expired sessions are dropped first; when
  // limits.max_sessions are still open, the one used longest ago ends to make room (nothing else
  // a signed-in client holds is lost: it signs in again).
  const ConsoleSession& Open(std::string token_hash, std::string token_name, const SessionLimits& limits);
  // The live session with this id, its last use moved to now; nullptr for an id that is not
  // known, or whose session has expired (it is dropped).
  const ConsoleSession* Find(std::string_view id, const SessionLimits& limits);
  // Ends the session (sign-out). False when there was none.
  bool End(std::string_view id);
  // Counts one more event stream of the session: false (nothing counted) when it has
  // limits.max_streams open already or the session is gone. CloseStream undoes one.
  bool OpenStream(std::string_view id, const SessionLimits& limits);
  void CloseStream(std::string_view id);
  // Drops every expired session (Open and Find drop those they meet; this finds the rest).
  void Sweep(const SessionLimits& limits);
  // Told the id of every session that ends, however: signed out, expired, or ended for room.
  void set_on_end(std::function<void(const std::string& id)> on_end) { on_end_ = std::move(on_end); }

  size_t size() const { return sessions_.size(); }

 private:
  // Erases the session at `it`, telling on_end_.
  void Erase(std::map<std::string, ConsoleSession>::iterator it);

  bool Expired(const ConsoleSession& s, const SessionLimits& limits, int64_t now_us) const;
  std::string Key(std::string_view id) const;

  Random random_;
  std::function<int64_t()> now_us_;
  // Keyed by the SHA-256 of the id: a lookup's timing then depends on a hash the client cannot
  // steer, never on how much of a guessed id is right.
  std::map<std::string, ConsoleSession> sessions_;
  std::function<void(const std::string& id)> on_end_;
};

// `bytes` as base64url without padding (RFC 4648, section 5).
std::string Base64Url(std::string_view bytes);
// Whether a and b are the same bytes, in a time that depends only on their lengths.
bool ConstantTimeEquals(std::string_view a, std::string_view b);
// The value of the cookie `name` in a Cookie header ("a=1; basal_session=xyz"); nullopt when absent.
std::optional<std::string_view> CookieValue(std::string_view cookie_header, std::string_view name);
// The Set-Cookie value of a session: HttpOnly, SameSite=Strict, Path=/, Max-Age of `max_age`, and
// Secure when `secure`. An empty id clears the cookie (Max-Age=0).
std::string SessionCookie(std::string_view id, std::chrono::milliseconds max_age, bool secure);

}  // namespace basal::serve
