// Admission of requests to basal serve (auth.h).
#include "serve/auth.h"

#include <pwd.h>

#include <unistd.h>

#include <cctype>

#include "serve/sessions.h"
#include "serve/signature.h"

namespace basal::serve {

bool ScopeAllows(const nlohmann::json& scopes, std::string_view need) {
  if (!scopes.is_array()) return false;
  for (const nlohmann::json& s : scopes)
    if (s.is_string() && (s.get<std::string>() == need || s.get<std::string>() == "all")) return true;
  return false;
}

bool IsLocalOrigin(std::string_view origin) {
  std::string o;
  for (char c : origin) o += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string_view rest = o;
  if (rest.starts_with("http://")) {
    rest.remove_prefix(7);
  } else if (rest.starts_with("https://")) {
    rest.remove_prefix(8);
  } else {
    return false;
  }
  std::string_view host;
  if (rest.starts_with("[")) {
    const size_t close = rest.find(']');
    if (close == std::string_view::npos) return false;
    host = rest.substr(0, close + 1);
  } else {
    host = rest.substr(0, rest.find(':'));
  }
  if (host != "localhost" && host != "127.0.0.1" && host != "[::1]") return false;
  std::string_view port = rest.substr(host.size());
  if (port.empty()) return true;
  if (port[0] != ':' || port.size() < 2 || port.size() > 6) return false;
  return port.substr(1).find_first_not_of("0123456789") == std::string_view::npos;
}

bool PeerMayUse(const PeerCred& peer, uid_t daemon_uid, const std::vector<gid_t>& allowed_gids) {
  if (!peer.known) return false;
  if (peer.uid == daemon_uid || peer.uid == 0) return true;
  for (gid_t g : allowed_gids) {
    if (peer.gid == g) return true;
    for (uint32_t sg : peer.groups)
      if (sg == g) return true;
  }
  return false;
}

Actor Admission::Who(const HttpRequest& request) const {
  if (request.unix_socket && request.peer.known) {
    Actor a{static_cast<int64_t>(request.peer.uid), "uid " + std::to_string(request.peer.uid)};
    passwd pw{};
    passwd* found = nullptr;
    char buf[4096];
    if (::getpwuid_r(request.peer.uid, &pw, buf, sizeof buf, &found) == 0 && found != nullptr) a.name = pw.pw_name;
    return a;
  }
  std::optional<SessionCredential> session;
  if (auto hash = PresentedTokenHash(request, &session)) {
    if (auto row = find_token_(*hash); row && *row) return Actor{-1, "token:" + (*row)->name};
  }
  return Actor{-1, "unknown"};
}

std::optional<std::string> Admission::PresentedTokenHash(const HttpRequest& request,
                                                         std::optional<SessionCredential>* session) const {
  if (auto auth = request.Header("authorization")) {
    auto token = BearerToken(*auth);
    if (!token || !LooksLikeApiToken(*token)) return std::nullopt;
    return ApiTokenHash(*token);
  }
  if (!find_session_) return std::nullopt;
  auto cookies = request.Header("cookie");
  auto id = cookies ? CookieValue(*cookies, kSessionCookie) : std::nullopt;
  if (!id) return std::nullopt;
  *session = find_session_(*id);
  if (!*session) return std::nullopt;
  return (*session)->token_hash;
}

Admission::Admission(std::vector<gid_t> allowed_gids, FindToken find_token, FindSession find_session)
    : allowed_gids_(std::move(allowed_gids)), find_token_(std::move(find_token)), find_session_(std::move(find_session)) {}

HttpResponse Refusal::Response() const {
  HttpResponse r = JsonError(status, code, message);
  if (!www_authenticate.empty()) r.headers.emplace_back("WWW-Authenticate", www_authenticate);
  return r;
}

std::optional<Refusal> Admission::Check(const HttpRequest& head, const RouteAccess* route) const {
  if (route && route->local_origin_only) {
    if (auto origin = head.Header("origin"); origin && !IsLocalOrigin(*origin)) {
      const std::string shown(origin->substr(0, 200));
      return Refusal{403, "forbidden_origin",
                     "Origin \"" + shown + "\" is not this machine: /mcp serves only requests without an Origin or "
                     "from pages of http(s)://localhost, 127.0.0.1 or [::1] (a page elsewhere could reach a "
                     "loopback port by DNS rebinding)"};
    }
  }
  if (head.unix_socket) {
    if (!head.peer.known) return Refusal{403, "forbidden", "the peer's credentials could not be read"};
    // The parent never changes its user (only the worker drops privileges): read once.
    static const uid_t kDaemonUid = geteuid();
    if (PeerMayUse(head.peer, kDaemonUid, allowed_gids_)) return std::nullopt;
    return Refusal{403, "forbidden",
                   "uid " + std::to_string(head.peer.uid) +
                       " may not use this socket: only the daemon's own user, root and the groups in "
                       "listen.allowed_groups may"};
  }
  std::string need = route ? route->scope : "read";
  if (need.empty()) return std::nullopt;  // a health probe; a webhook, whose signature is its credential
  if (head.method == "POST") need = "run";
  // A bearer token when the request names one (a session cookie beside it is not looked at),
  // else a console session's cookie.
  const bool has_cookie = [&] {
    auto cookies = head.Header("cookie");
    return find_session_ && cookies && CookieValue(*cookies, kSessionCookie).has_value();
  }();
  if (!head.Header("authorization") && has_cookie) return CheckSession(head, need);
  auto auth = head.Header("authorization");
  auto token = auth ? BearerToken(*auth) : std::nullopt;
  if (!token || !LooksLikeApiToken(*token)) {
    // An MCP client that gets a bare challenge goes looking for an OAuth server basal does not have;
    // say which token it needs instead, in the challenge (realm, scope: RFC 6750) and the body.
    const bool mcp = head.path == "/mcp";
    Refusal r{
        401, "unauthorized",
        "send Authorization: Bearer TOKEN, a token of scope " + need + " (basal token create --name NAME --scope " +
            need + ")" +
            (mcp ? "; an MCP client sends it as a header its HTTP transport is configured with: basal has no OAuth "
                   "authorization server (docs/serve.md, MCP for AI agents)"
                 : "")};
    r.www_authenticate = "Bearer realm=\"basal\", scope=\"" + need + "\"";
    return r;
  }
  auto row = find_token_(ApiTokenHash(*token));
  if (!row || !*row) {
    Refusal r{401, "unauthorized", "the bearer token is not known or was revoked"};
    r.www_authenticate = "Bearer error=\"invalid_token\"";
    return r;
  }
  const nlohmann::json scopes = nlohmann::json::parse((*row)->scopes_json, nullptr, false);
  if (!ScopeAllows(scopes, need))
    return Refusal{403, "forbidden", "token " + (*row)->name + " lacks the scope \"" + need + "\" this request needs"};
  return std::nullopt;
}

std::optional<Refusal> Admission::CheckSession(const HttpRequest& head, const std::string& need) const {
  std::optional<SessionCredential> session;
  auto hash = PresentedTokenHash(head, &session);
  if (!hash || !session)
    return Refusal{401, "unauthorized", "the console session is not known or has expired: sign in again (/console/)"};
  // Every request of a session carries its CSRF token, which only the console's own page holds.
  // Not only those that change something: a browser sends the cookie with any request a page
  // makes of this host, and to every port of it (cookies do not keep to a port), so a page or a
  // server elsewhere on the host may hold the cookie; without the token it reads nothing either.
  auto sent = head.Header(kCsrfHeader);
  if (!sent || !ConstantTimeEquals(*sent, session->csrf_token))
    return Refusal{403, "bad_csrf_token",
                   std::string(sent ? "X-CSRF-Token is not this console session's" : "no X-CSRF-Token") +
                       ": every request of a console session carries the session's CSRF token, which only the "
                       "console's own page holds; a form, script or server of another page or port that has the "
                       "cookie is refused (cross-site request forgery)"};
  auto row = find_token_(*hash);
  if (!row || !*row)
    return Refusal{401, "unauthorized",
                   "the token this console session was signed in with is not known or was revoked: sign in again"};
  const nlohmann::json scopes = nlohmann::json::parse((*row)->scopes_json, nullptr, false);
  if (!ScopeAllows(scopes, need))
    return Refusal{403, "forbidden", "token " + (*row)->name + " lacks the scope \"" + need + "\" this request needs"};
  return std::nullopt;
}

}  // namespace basal::serve
