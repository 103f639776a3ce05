// What basal serve's rooms exchange about one HTTP request: the request as read (HttpRequest), the
// answer (HttpResponse), and the two callbacks a handler gets (Respond, OnClientGone). No transport
// here: http_server.h reads and writes these with libmicrohttpd, so the rooms that decide (routes,
// auth, api, triggers) and their tests and fuzzers need nothing of it.
//
//   HttpResponse ok = JsonResponse(200, {{"status", "alive"}});
//   HttpResponse no = JsonError(404, "run_not_found", "no run 7 in this store");
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace basal::serve {

// Who is at the other end of a Unix socket (SO_PEERCRED); unknown on TCP.
struct PeerCred {
  bool known = false;
  uint32_t uid = 0, gid = 0;
  int64_t pid = 0;
  std::vector<uint32_t> groups;  // supplementary groups (SO_PEERGROUPS)
};

struct HttpRequest {
  std::string listener;  // the listener's name
  std::string method;    // "GET", "POST", ...
  std::string path;      // percent-decoded, without the query
  std::vector<std::pair<std::string, std::string>> query;    // decoded, in order
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string body;
  bool unix_socket = false;
  PeerCred peer;
  std::string remote;  // "unix" or "ADDRESS:PORT"
  std::optional<std::string_view> Header(std::string_view lower_name) const;
  std::optional<std::string_view> Query(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

// Answers a request; call it once, on the loop thread, now or later. Calls after the connection is
// gone (the listener stopped, or the client left) do nothing.
using Respond = std::function<void(HttpResponse)>;
// For a request answered later: `gone` runs (once, on the loop thread) if the client closes its
// connection before the answer. The request is then over: Respond does nothing afterwards. Call
// it inside `handle`, at most once; a request answered inside `handle` never calls `gone`.
using OnClientGone = std::function<void(std::function<void()> gone)>;

// A JSON body as every endpoint writes it: one object, keys sorted, invalid UTF-8 replaced, and a
// line feed.
std::string JsonBody(const nlohmann::json& body);
HttpResponse JsonResponse(int status, const nlohmann::json& body);
// A JSON error body as every endpoint writes it: {"error": {"code": CODE, "message": MESSAGE}}.
HttpResponse JsonError(int status, std::string_view code, std::string_view message);

}  // namespace basal::serve
