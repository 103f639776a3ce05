// Admission: who may use basal serve, decided from a request's head, before its body is read or a
// handler runs (docs/serve.md, "Who may talk to it"). On the Unix socket the kernel names the peer
// (the daemon's own user, root, members of listen.allowed_groups); on TCP a bearer token whose hash
// the store keeps, with the scope the route asks for. A route may ask for no credential (the health
// probes; webhooks, whose signature triggers.h checks) and may refuse browsers' foreign pages
// (/mcp: the Origin check against DNS rebinding). On TCP a web console session (sessions.h) is
// the other credential: its cookie stands for the token it was opened with, whose scopes are
// looked up as a bearer token's are, and every request of it must carry the session's CSRF token
// in X-CSRF-Token (the cookie alone is what any page of this site, or any server on another port
// of this host, may be sent).
//
// Invariant: a request this refuses is answered with the refusal and nothing else of it is read;
// a session cookie never admits what its token would not, and never admits anything alone.
//
//   Admission admission(allowed_gids, [&runs](std::string_view hash) { return runs.FindToken(hash); },
//                       [&console](std::string_view id) { return console.FindSession(id); });
//   if (auto refusal = admission.Admit(head, RouteAccess{.scope = "read"})) return refusal;
#pragma once

#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "basal/result.h"
#include "parent/store/store.h"
#include "serve/http_message.h"

namespace basal::serve {

// What a route asks of a client beyond being let in at all.
struct RouteAccess {
  // The token scope TCP clients need: "read", "run", "metrics"; "" for none (health probes,
  // webhooks). A POST needs "run" whatever this says (unless it is "").
  std::string scope = "read";
  // Refuse a request whose Origin header names a page that is not of this machine (403).
  bool local_origin_only = false;
};

// Whether a token's scopes (its JSON array) grant `need`; "all" grants everything.
bool ScopeAllows(const nlohmann::json& scopes, std::string_view need);

// DNS rebinding: a web page may make the operator's browser send requests to a loopback port under
// a host name its author controls. The browser names the page's origin in `Origin`; only pages of
// this machine (localhost, 127.0.0.1, [::1], any port, http or https) are let through.
bool IsLocalOrigin(std::string_view origin);

// Whether a Unix socket's peer may use the daemon: its own uid, root, or a member (primary or
// supplementary group) of an allowed group.
bool PeerMayUse(const PeerCred& peer, uid_t daemon_uid, const std::vector<gid_t>& allowed_gids);

// What admission needs of a console session: the token it stands for and its CSRF token.
struct SessionCredential {
  std::string token_hash;
  std::string csrf_token;
};

// Why a request is not let in: what its answer says (JsonError's status, error.code and
// error.message) and, for a 401, the challenge it carries.
struct Refusal {
  Refusal(int status_, std::string code_, std::string message_, std::string www_authenticate_ = "")
      : status(status_), code(std::move(code_)), message(std::move(message_)),
        www_authenticate(std::move(www_authenticate_)) {}
  int status;
  std::string code;
  std::string message;
  std::string www_authenticate;  // "": none
  HttpResponse Response() const;
};

class Admission {
 public:
  // The unrevoked token with this hash (ServeTables::FindToken).
  using FindToken = std::function<Result<std::optional<TokenRow>>(std::string_view token_hash)>;
  // The live console session with this id (nullopt: none, expired, or the console is off).
  using FindSession = std::function<std::optional<SessionCredential>(std::string_view session_id)>;
  Admission(std::vector<gid_t> allowed_gids, FindToken find_token, FindSession find_session = nullptr);

  // nullopt: let in. `route` is the access of the route the path names (nullptr for a path the
  // table does not know: it still needs a credential, so that no stranger learns which exist).
  std::optional<HttpResponse> Admit(const HttpRequest& head, const RouteAccess* route) const {
    auto refusal = Check(head, route);
    if (!refusal) return std::nullopt;
    return refusal->Response();
  }
  // The same decision, as what it would answer (a stream's credential checked again: tail.h).
  std::optional<Refusal> Check(const HttpRequest& head, const RouteAccess* route) const;
  // Who sent an admitted request, for what the journal keeps of an operator's decision: the Unix
  // peer's user, or "token:NAME" of a TCP client's token, sent as a bearer token or through a
  // console session (uid -1).
  Actor Who(const HttpRequest& request) const;

 private:
  // The token hash a TCP request presents: its bearer token's, or its console session's.
  // `session` is set for a session (nullopt when there is none).
  std::optional<std::string> PresentedTokenHash(const HttpRequest& request,
                                                std::optional<SessionCredential>* session) const;
  // A TCP request that sends a console session's cookie and no Authorization header.
  std::optional<Refusal> CheckSession(const HttpRequest& head, const std::string& need) const;

  std::vector<gid_t> allowed_gids_;
  FindToken find_token_;
  FindSession find_session_;
};

}  // namespace basal::serve
