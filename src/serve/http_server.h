// HTTP for basal serve: libmicrohttpd in its external-epoll mode, driven by the module's EventLoop
// (no thread of its own). One HttpListener per listening socket (the Unix socket, the loopback TCP
// address); the daemon owns the sockets and hands their descriptors over.
//
//   HttpListener::Options o;
//   o.name = "unix"; o.listen_fd = fd; o.unix_socket = true;
//   o.admit = [](const HttpRequest& head, size_t* max_body) -> std::optional<HttpResponse> { ... };
//   o.handle = [](HttpRequest req, Respond respond, OnClientGone) { respond({200, "application/json", "{}"}); };
//   auto listener = HttpListener::Start(module.loop(), std::move(o));
//
// A handler may answer at once or later (respond is kept and called from a `done` callback, say):
// the connection is suspended meanwhile and costs no CPU. A handler whose work should stop when
// nobody waits for it any more (an MCP run_script) says so with `on_client_gone`: the connection
// is then watched while suspended, and a client that closes it is noticed at once.
//
// Bounds: `max_connections` connections at once, headers within 64 KiB (libmicrohttpd's
// per-connection memory), bodies within the admitted `max_body` (checked against Content-Length
// before reading, and counted while reading a chunked body, which is then discarded), an idle
// connection closed after `idle_timeout`.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "basal/result.h"

namespace basal {
class EventLoop;
}

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

class HttpListener {
 public:
  struct Options {
    std::string name;
    int listen_fd = -1;  // bound and listening; the listener closes it
    bool unix_socket = false;
    size_t max_connections = 256;
    size_t max_body_bytes = 1 << 20;  // the default for `admit`'s *max_body
    std::chrono::seconds idle_timeout{60};
    // The headers are in, the body is not: return a response to refuse the request unread (401,
    // 403, 404, 413), or nullopt to read the body; may lower or raise *max_body for this request.
    std::function<std::optional<HttpResponse>(const HttpRequest& head, size_t* max_body)> admit;
    std::function<void(HttpRequest request, Respond respond, OnClientGone on_client_gone)> handle;
    std::function<void(const HttpRequest& request, int status)> on_response;  // metrics, after each answer
  };
  static Result<std::unique_ptr<HttpListener>> Start(EventLoop& loop, Options options);
  ~HttpListener();  // answers every suspended request 503, closes every connection
  HttpListener(const HttpListener&) = delete;
  HttpListener& operator=(const HttpListener&) = delete;

  // Stops accepting: the listening socket is closed; open connections go on.
  void StopAccepting();
  // Requests handed to `handle` that are not answered yet.
  size_t pending() const;
  size_t connections() const;

  struct Impl;

 private:
  explicit HttpListener(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A JSON error body as every endpoint writes it: {"error": {"code": CODE, "message": MESSAGE}}.
HttpResponse JsonError(int status, std::string_view code, std::string_view message);

}  // namespace basal::serve
