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
#include <memory>
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

// The body of an answer that is written as it comes (server-sent events, /v1/tail): the producer
// writes, the transport takes what it can send. Shared by both; the producer bounds what it writes
// by `buffered()` (the bytes the client has not taken yet), since a client that does not read would
// otherwise make the daemon hold all of it.
//
//   auto stream = std::make_shared<HttpStream>();
//   HttpResponse r; r.content_type = "text/event-stream"; r.stream = stream; respond(r);
//   stream->OnClosed([] { /* the client left, or the listener stopped: forget the stream */ });
//   if (stream->buffered() < cap) stream->Write("event: x\ndata: {}\n\n");
//   stream->Close();   // the answer ends once what was written has gone
class HttpStream {
 public:
  // False, and nothing kept, once the stream is closed (by Close, or by the transport).
  bool Write(std::string_view bytes);
  // No more writes: the answer ends after what is buffered.
  void Close();
  size_t buffered() const { return buffer_.size() - taken_; }
  bool closed() const { return closed_; }
  // Runs once when the transport is done with the stream (the answer ended, the client left, the
  // listener stopped). Set it before anything can close the stream. Several may be set (the tail
  // forgets its subscriber, the console gives its session's stream back): they run in that order.
  void OnClosed(std::function<void()> fn) {
    if (!on_closed_) {
      on_closed_ = std::move(fn);
      return;
    }
    on_closed_ = [first = std::move(on_closed_), then = std::move(fn)] {
      first();
      then();
    };
  }

  // ---- the transport's side (http_server.cpp)
  // Moves up to `max` buffered bytes to `out`; returns how many.
  size_t Take(char* out, size_t max);
  // Told when bytes arrive or the stream closes, while the transport waits for them.
  void SetWake(std::function<void()> wake) { wake_ = std::move(wake); }
  // The transport is done: the stream closes (if it was not) and OnClosed's function runs.
  void Detach();

 private:
  std::string buffer_;
  size_t taken_ = 0;  // bytes of buffer_ already taken (compacted as it grows)
  bool closed_ = false;
  bool detached_ = false;
  std::function<void()> wake_;
  std::function<void()> on_closed_;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  // Set: the body is this stream's, sent as it is written (chunked), and `body` is ignored.
  std::shared_ptr<HttpStream> stream;
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
