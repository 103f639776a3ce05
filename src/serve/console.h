// The web console (docs/console.md): pages over basal serve's own HTTP API, at /console/ on the
// TCP listener. This room serves the console's files (built into basal: console_assets.h) with
// the headers that keep a browser strict about them (no inline script, no eval, no framing, no
// sniffing, no referrer), and the sign-in: an API token traded for a session (sessions.h) whose
// cookie the API's admission then accepts in the token's stead (auth.h). Everything the pages
// show or do goes through the API's routes and their authorization; nothing here reads the store.
//
// Invariant: a session gives what its token gives, no more (admission looks the token up at every
// request); every request of a session carries its CSRF token, which only the sign-in answers.
//
//   Console console({.config = config.console, .find_token = ..., .now_us = SystemNowUs, .random = RandomBytes,
//                    .loop = loop});
//   Admission admission(gids, find_token, [&](std::string_view id) { return console.FindSession(id); });
//   // routes: GET /console, /console/{file}: console.File(...); /console/session: SignIn, Session, SignOut
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "parent/loop/event_loop.h"
#include "serve/auth.h"
#include "serve/config.h"
#include "serve/http_message.h"
#include "serve/sessions.h"

namespace basal::serve {

// The Content-Security-Policy of the console's pages: its own scripts, styles and images only, no
// inline script or style, no eval, requests to this origin only, never framed.
inline constexpr std::string_view kConsoleCsp =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

// Adds what every answer on the TCP listener carries for browsers (nosniff, no framing, no
// referrer; a CSP that allows nothing for a JSON body); `page`: the console's CSP instead.
void AddBrowserHeaders(HttpResponse& response, bool page);

class Console {
 public:
  struct Options {
    const ConsoleConfig& config;  // read at each request: a reload changes it in place
    Admission::FindToken find_token;
    std::function<int64_t()> now_us;
    ConsoleSessions::Random random;
    EventLoop& loop;  // a sweep of expired sessions every minute (their streams end with them)
  };
  explicit Console(Options options);
  ~Console();
  Console(const Console&) = delete;
  Console& operator=(const Console&) = delete;

  // GET /console, /console/{file}: the page and its files. "" is the page (index.html).
  HttpResponse File(const HttpRequest& req, std::string_view file) const;
  // POST /console/session {"token": TOKEN}: sign in; the answer sets the session's cookie and
  // holds its CSRF token (the only answer that does).
  HttpResponse SignIn(const HttpRequest& req);
  // GET /console/session (with the CSRF token): the signed-in session: its token's name and scopes.
  HttpResponse Session(const HttpRequest& req);
  // DELETE /console/session (with the CSRF token): sign out; the answer clears the cookie.
  HttpResponse SignOut(const HttpRequest& req);

  // Admission's: the live session with this id, when the console is enabled. A session whose
  // token was revoked ends here (its streams close), its credential returned for admission to refuse.
  std::optional<SessionCredential> FindSession(std::string_view id);

  // An event stream (GET /v1/tail) a request opens: a session holds at most
  // console.max_streams_per_session of them. nullopt: counted, and `*attach` must be called once:
  // with the stream answered (the session's count is given back when it ends, and it ends with
  // the session), or with nullptr when none was (the count given back now). Else the refusal
  // (429). A request without a session is not counted.
  using AttachStream = std::function<void(const std::shared_ptr<HttpStream>& stream)>;
  std::optional<HttpResponse> OpenStream(const HttpRequest& req, AttachStream* attach);

  size_t sessions() const { return sessions_.size(); }

 private:
  // A session ended (signed out, expired, or ended for room): its streams end too.
  void Ended(const std::string& id);
  void SweepEvery(std::chrono::milliseconds period);

  SessionLimits Limits() const;
  // The request's session (by its cookie), or nullptr.
  const ConsoleSession* SessionOf(const HttpRequest& req);
  // Refuses what the console is not served to: a disabled console, the Unix socket.
  std::optional<HttpResponse> NotServed(const HttpRequest& req) const;

  Options o_;
  ConsoleSessions sessions_;
  // The live streams of each session, by session id (entries go when a stream ends).
  std::map<std::string, std::vector<std::weak_ptr<HttpStream>>> streams_;
  EventLoop::TimerId sweep_timer_{};
};

}  // namespace basal::serve
