// HTTP for basal serve: libmicrohttpd in its external-epoll mode, driven by the module's EventLoop
// (no thread of its own). One HttpListener per listening socket (the Unix socket, the loopback TCP
// address); the daemon owns the sockets and hands their descriptors over.
//
//   HttpListener::Options o;
//   o.name = "unix"; o.listen_fd = fd; o.unix_socket = true;
//   o.admit = [](const HttpRequest& head, size_t* max_body) -> std::optional<HttpResponse> { ... };
//   o.handle = [](const HttpRequest& req, Respond respond, OnClientGone) { respond({200, "application/json", "{}"}); };
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
// connection closed after `idle_timeout`. A client may not hold a connection by sending slowly: a
// request's head must be in within `header_timeout` of the connection's start (or of its previous
// answer), its body within `body_timeout` of its head, or the connection is closed (a request
// handed to `handle`, answered later, has no such deadline). On TCP, one client address holds at
// most `max_connections_per_client` connections (more are closed at once), and connections without
// a request in progress (sending a head, or idle between requests) hold at most `max_connections`
// less a reserve of an eighth: one more closes the oldest of them, so an honest client still gets
// in while others hold connections open. What is held for clients that do not read their answers
// is bounded by `unsent` (UnsentAnswers), shared by the listeners.
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
#include "serve/http_message.h"

namespace basal {
class EventLoop;
}

namespace basal::serve {

// Bytes of answers handed to libmicrohttpd whose requests have not completed (sent whole, or the
// client gone), shared by the listeners that point to it: the memory held for clients that do not
// read. Past max_bytes an answer larger than 64 KiB is replaced by 503 "busy" with Retry-After.
struct UnsentAnswers {
  size_t max_bytes = 64u << 20;
  size_t bytes = 0;
};

class HttpListener {
 public:
  struct Options {
    std::string name;
    int listen_fd = -1;  // bound and listening; the listener closes it
    bool unix_socket = false;
    size_t max_connections = 256;
    size_t max_body_bytes = 1 << 20;  // the default for `admit`'s *max_body
    std::chrono::seconds idle_timeout{60};
    std::chrono::milliseconds header_timeout{10'000};
    std::chrono::milliseconds body_timeout{60'000};
    size_t max_connections_per_client = 32;  // TCP only; 0: no cap
    std::shared_ptr<UnsentAnswers> unsent;  // null: no cap
    // The headers are in, the body is not: return a response to refuse the request unread (401,
    // 403, 404, 413), or nullopt to read the body; may lower or raise *max_body for this request.
    std::function<std::optional<HttpResponse>(const HttpRequest& head, size_t* max_body)> admit;
    // The request stays the listener's (on_response reads it after the answer): a handler copies
    // what it keeps past its return.
    std::function<void(const HttpRequest& request, Respond respond, OnClientGone on_client_gone)> handle;
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

}  // namespace basal::serve
