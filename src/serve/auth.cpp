// Admission of requests to basal serve (auth.h).
#include "serve/auth.h"

#include <pwd.h>

#include <unistd.h>

#include <cctype>

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
  auto auth = request.Header("authorization");
  auto token = auth ? BearerToken(*auth) : std::nullopt;
  if (token) {
    if (auto row = find_token_(ApiTokenHash(*token)); row && *row) return Actor{-1, "token:" + (*row)->name};
  }
  return Actor{-1, "unknown"};
}

Admission::Admission(std::vector<gid_t> allowed_gids, FindToken find_token)
    : allowed_gids_(std::move(allowed_gids)), find_token_(std::move(find_token)) {}

std::optional<HttpResponse> Admission::Admit(const HttpRequest& head, const RouteAccess* route) const {
  if (route && route->local_origin_only) {
    if (auto origin = head.Header("origin"); origin && !IsLocalOrigin(*origin)) {
      const std::string shown(origin->substr(0, 200));
      return JsonError(403, "forbidden_origin",
                       "Origin \"" + shown + "\" is not this machine: /mcp serves only requests without an Origin or "
                       "from pages of http(s)://localhost, 127.0.0.1 or [::1] (a page elsewhere could reach a "
                       "loopback port by DNS rebinding)");
    }
  }
  if (head.unix_socket) {
    if (!head.peer.known) return JsonError(403, "forbidden", "the peer's credentials could not be read");
    if (PeerMayUse(head.peer, geteuid(), allowed_gids_)) return std::nullopt;
    return JsonError(403, "forbidden",
                     "uid " + std::to_string(head.peer.uid) +
                         " may not use this socket: only the daemon's own user, root and the groups in "
                         "listen.allowed_groups may");
  }
  std::string need = route ? route->scope : "read";
  if (need.empty()) return std::nullopt;  // a health probe; a webhook, whose signature is its credential
  if (head.method == "POST") need = "run";
  auto auth = head.Header("authorization");
  auto token = auth ? BearerToken(*auth) : std::nullopt;
  if (!token || !LooksLikeApiToken(*token)) {
    // An MCP client that gets a bare challenge goes looking for an OAuth server basal does not have;
    // say which token it needs instead, in the challenge (realm, scope: RFC 6750) and the body.
    const bool mcp = head.path == "/mcp";
    HttpResponse r = JsonError(
        401, "unauthorized",
        "send Authorization: Bearer TOKEN, a token of scope " + need + " (basal token create --name NAME --scope " +
            need + ")" +
            (mcp ? "; an MCP client sends it as a header its HTTP transport is configured with: basal has no OAuth "
                   "authorization server (docs/serve.md, MCP for AI agents)"
                 : ""));
    r.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"basal\", scope=\"" + need + "\"");
    return r;
  }
  auto row = find_token_(ApiTokenHash(*token));
  if (!row || !*row) {
    HttpResponse r = JsonError(401, "unauthorized", "the bearer token is not known or was revoked");
    r.headers.emplace_back("WWW-Authenticate", "Bearer error=\"invalid_token\"");
    return r;
  }
  const nlohmann::json scopes = nlohmann::json::parse((*row)->scopes_json, nullptr, false);
  if (!ScopeAllows(scopes, need))
    return JsonError(403, "forbidden", "token " + (*row)->name + " lacks the scope \"" + need + "\" this request needs");
  return std::nullopt;
}

}  // namespace basal::serve
