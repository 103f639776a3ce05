// HttpTestServer: a small HTTP/1.1 server on loopback for the http.fetch tests and benchmark. It
// records every request that reaches it, and it can misbehave on purpose (slow headers, a body
// dripped out slowly, a body of unknown length, a huge body, a connection closed without an
// answer). Only the standard library and POSIX sockets: bench/ links it too.
//
//   basal::testing::HttpTestServer server;
//   server.Handle("/v1/items", [](const TestRequest& r) {
//     TestResponse out;
//     out.headers = {{"Content-Type", "application/json"}};
//     out.body = R"({"items":[]})";
//     return out;
//   });
//   server.Handle("/big/*", [](const TestRequest&) {   // every path that starts with /big/
//     TestResponse out;
//     out.body = std::string(1024, 'x');
//     out.body_repeat = 64 * 1024;                        // 64 MiB, never held whole
//     out.chunked = true;                                 // length unknown to the client
//     return out;
//   });
//   if (!server.Start(/*ipv6=*/false)) FAIL() << server.error();
//   Fetch(server.url("/v1/items"));                       // "http://127.0.0.1:PORT/v1/items"
//   std::vector<TestRequest> seen = server.requests();     // what arrived, in order
//   server.Stop();                                        // or the destructor
//
// Threads: one thread accepts; each connection is served by a thread of its own, at most
// kMaxConnections at once (more wait in the listen backlog until one ends). Handlers run on those
// threads, possibly several at once: a handler must be safe to call concurrently. Stop() (and the
// destructor) closes every connection, interrupts delays and drips, and joins every thread.
//
// Bounds: a request's head (request line and headers) is at most kMaxHeadBytes (else 431 and the
// connection is closed); head and body together at most kMaxRequestBytes, 16 MiB (else 413 and
// close). A request with both Content-Length and Transfer-Encoding, or with a malformed head, is
// answered 400 and the connection closed (after reading and dropping at most kMaxDrainBytes more
// of what the client sends, so the answer is not lost to a reset). An unknown path is 404.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace basal::testing {

using TestHeaders = std::vector<std::pair<std::string, std::string>>;

// What arrived. Headers keep their order and the case the client wrote.
struct TestRequest {
  std::string method;
  std::string target;   // path and query, as sent: "/v1/items?page=2"
  std::string version;  // "HTTP/1.1"
  TestHeaders headers;
  std::string body;     // decoded when it came chunked
  uint64_t connection = 0;  // 1 for the first connection accepted, 2 for the next, ...

  std::string path() const;  // target without its query
  // The first header of that name (case-insensitive), or nothing.
  std::optional<std::string> header(std::string_view name) const;
};

// What to answer, and how.
struct TestResponse {
  int status = 200;
  std::string reason;    // empty: the usual phrase for `status` ("OK", "Not Found", ...)
  TestHeaders headers;   // sent as given; Content-Length or Transfer-Encoding is added unless
                         // given here
  std::string body;
  // The body is `body` sent body_repeat times in a row (a large body without holding it).
  uint64_t body_repeat = 1;
  // Send the body chunked (Transfer-Encoding: chunked): its length is unknown to the client.
  bool chunked = false;
  // Wait this long after the request arrived before sending anything.
  int delay_before_headers_ms = 0;
  // Send the body in pieces of piece_bytes, pausing pause_ms before each piece but the first
  // (piece_bytes 0: as fast as the socket takes it).
  struct Drip {
    size_t piece_bytes = 0;
    int pause_ms = 0;
  } drip;
  // Read the request, record it, then close the connection without a byte of answer.
  bool close_without_response = false;
  // Close the connection after this response (and say so: Connection: close).
  bool close_connection = false;
};

using TestHandler = std::function<TestResponse(const TestRequest&)>;

class HttpTestServer {
 public:
  static constexpr size_t kMaxConnections = 128;
  static constexpr size_t kMaxHeadBytes = 64 * 1024;
  static constexpr size_t kMaxRequestBytes = 16 * 1024 * 1024;
  // After refusing a request (400, 413, 431), what the client still sends is read and dropped, up
  // to this much, so that its answer is not lost to a reset.
  static constexpr size_t kMaxDrainBytes = 4 * 1024 * 1024;

  HttpTestServer() = default;
  HttpTestServer(const HttpTestServer&) = delete;
  HttpTestServer& operator=(const HttpTestServer&) = delete;
  ~HttpTestServer();

  // `path` exact ("/v1/items"), or a prefix when it ends with '*' ("/v1/*"); the longest prefix
  // wins, an exact match before any prefix. May be called before or after Start.
  void Handle(const std::string& path, TestHandler handler);

  // Listens on 127.0.0.1 (or ::1) on a port the kernel picks. False, with error(), on failure.
  [[nodiscard]] bool Start(bool ipv6 = false);
  // Closes the listener and every connection, interrupts delays and drips, joins every thread.
  // Requests stay readable. Idempotent.
  void Stop();

  uint16_t port() const { return port_; }
  // "http://127.0.0.1:PORT" + path ("http://[::1]:PORT" + path with ipv6).
  std::string url(const std::string& path) const;
  const std::string& error() const { return error_; }

  // A copy of every request that arrived (whole), in the order they did.
  std::vector<TestRequest> requests() const;
  void ClearRequests();
  // On by default. A benchmark that sends many requests turns recording off, so the record does
  // not grow with every round trip.
  void RecordRequests(bool on) { record_ = on; }
  // Connections accepted so far (so a test can tell a reused connection from new ones).
  uint64_t connections_accepted() const { return accepted_.load(); }
  // The most connections served at once so far (never above kMaxConnections).
  size_t most_connections_at_once() const { return most_live_.load(); }

 private:
  struct Connection {
    int fd = -1;
    uint64_t id = 0;
    std::thread thread;
    std::atomic<bool> done{false};
  };

  void AcceptLoop();
  void Serve(Connection* connection);
  // Sleeps up to `ms`; false when Stop interrupted it.
  bool Pause(int ms);
  std::optional<TestHandler> Route(const std::string& path) const;
  void ReapFinished(bool all);
  size_t Live() const;  // connections being served; mutex_ held

  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};  // Stop writes a byte; the accept loop polls the read end
  bool ipv6_ = false;
  uint16_t port_ = 0;
  std::string error_;
  std::thread acceptor_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> accepted_{0};
  std::atomic<size_t> most_live_{0};
  std::atomic<bool> record_{true};

  mutable std::mutex mutex_;  // guards routes_, requests_, connections_
  std::condition_variable changed_;  // a connection ended, or Stop began
  std::map<std::string, TestHandler> routes_;
  std::vector<TestRequest> requests_;
  std::list<Connection> connections_;
};

}  // namespace basal::testing
