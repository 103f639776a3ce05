// HttpClient: HTTP exchanges on the parent's event loop through libcurl's multi-socket interface.
// One exchange is one request and its response: redirects are NOT followed here (the http.fetch
// host call checks every hop against the grant and follows them itself).
//
//   http::HttpClient client(loop, {.max_in_flight = 64});
//   http::Exchange e;
//   e.url = "https://api.example.com/v1/items";
//   e.method = "GET";
//   e.check_address = [](const http::SocketAddress& a) -> std::optional<std::string> { ... };
//   client.Start(std::move(e), [](http::ExchangeResult r) { ... });   // later, on the loop thread
//
// Everything runs on the loop's thread: curl never blocks it (its threaded resolver resolves names
// on threads of its own). Every address curl is about to connect passes `check_address` first
// (CURLOPT_OPENSOCKETFUNCTION): the address actually connected, not the URL's host, is what the
// SSRF guard judges. Each exchange opens its own connection and never shares it (a connection that
// one grant's rule let through must not carry another's request), and ignores proxies from the
// environment and .netrc.
//
// Bounds: at most `max_in_flight` transfers at once (the rest wait in a queue, first in first out);
// a response's body is counted as it arrives (Content-Length or not) and the transfer is stopped
// past max_response_bytes; response headers past kMaxResponseHeaderBytes stop it too.
//
// A connection curl is done with is closed after the loop pass that finished its exchange has
// ended, not inside it (CURLOPT_CLOSESOCKETFUNCTION): closing a TCP socket costs about 10 us, and
// in that pass the response's journal commit and the answer to the worker are still to come. The
// socket is already out of curl's hands and out of the loop's epoll set; only its descriptor lives
// on, until the loop's next pass (or the client's destruction): the sockets waiting are never more
// than those of the exchanges that ended since. The finished exchange's easy handle is dealt with
// then too, after its `done` has run, not before it: kept for the next exchange, a few at most,
// instead of a curl_easy_cleanup now and a curl_easy_init for the next. A kept handle carries
// nothing into the next exchange: the options every exchange sets alike are set once per handle
// and stay, every other option is set again by each exchange (its method, body, headers, limits,
// name pins and callbacks' data), its connection was closed (never reused), and its TLS session
// cache is off (CURLOPT_SSL_SESSIONID_CACHE).
//
// No loop pass is spent waiting on nothing: an exchange started outside curl's own calls is driven
// at once (curl asks for a 0 ms timeout when a handle is added; it is not left to the loop's next
// pass), and a connection curl starts is tried once more right away for writability (a connect
// that completed inside connect(), as on loopback or a near host, sends its request in the same
// pass instead of after an epoll round; curl checks the socket itself, so a connect still in
// progress just goes on waiting for EPOLLOUT).
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "parent/loop/event_loop.h"

namespace basal::http {

using HeaderList = std::vector<std::pair<std::string, std::string>>;

// Response header bytes one exchange may receive (status line included); past it: kProtocol.
inline constexpr size_t kMaxResponseHeaderBytes = 256u << 10;

// The address curl is about to connect (IPv4 or IPv6).
struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;
  std::string ToString() const;  // "127.0.0.1:8080", "[::1]:443"
};

struct Exchange {
  std::string url;     // absolute http(s) URL, already canonical and admitted
  std::string method;  // "GET", "POST", ...
  HeaderList headers;  // sent as given (names and values already checked)
  std::optional<std::string> body;
  std::chrono::milliseconds connect_timeout{10'000};  // name resolution + TCP + TLS
  std::chrono::milliseconds timeout{30'000};          // the whole exchange
  uint64_t max_response_bytes = 4u << 20;
  // nullopt: this address may be connected; else why not (the exchange fails kAddressRefused).
  std::function<std::optional<std::string>(const SocketAddress&)> check_address;
  // CURLOPT_RESOLVE entries ("host:port:addr[,addr]"), for a test's resolver seam; usually empty.
  std::vector<std::string> resolve;
};

struct ExchangeResult {
  enum class Failure {
    kNone,
    kAddressRefused,  // every address the name had was refused by check_address
    kTooLarge,        // the body passed max_response_bytes
    kTimeout,         // connect_timeout or timeout passed
    kConnect,         // the name did not resolve, or no address accepted the connection
    kTls,             // the TLS handshake or the certificate check failed
    kProtocol,        // a malformed or oversized response
    kCancelled,       // Abort() or the client was destroyed
    kOther,
  };
  Failure failure = Failure::kNone;
  std::string message;  // a failure: what happened, naming the limit or the reason
  int64_t status = 0;
  std::string status_text;
  HeaderList headers;   // names lowercased, in the order received
  std::string body;
  std::string connected;  // the address of the connection, "127.0.0.1:8080" (empty if none)
  bool ok() const { return failure == Failure::kNone; }
};
const char* FailureName(ExchangeResult::Failure failure);  // "address_refused", "too_large", ...

class HttpClient {
 public:
  struct Options {
    size_t max_in_flight = 64;  // transfers at once across every activation; the rest queue
    std::string user_agent = "basal";
  };
  using Done = std::function<void(ExchangeResult)>;

  HttpClient(EventLoop& loop, Options options);
  // Aborts what is still in flight or queued WITHOUT calling their `done` (the owner is going away).
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Starts (or queues) an exchange; `done` runs exactly once, later, on the loop thread (never
  // from inside Start). Returns an id for Abort.
  uint64_t Start(Exchange exchange, Done done);
  // Stops an exchange in flight or queued; its `done` runs with kCancelled (later, on the loop).
  // Unknown or finished ids are ignored.
  void Abort(uint64_t id);

  size_t in_flight() const { return running_.size(); }
  size_t queued() const { return queue_.size(); }
  // How many times the client asked the loop to watch, change or drop a socket (an epoll_ctl
  // each): for tests and diagnostics.
  uint64_t watch_changes() const { return watch_changes_; }

  struct Transfer;  // one exchange in curl's hands (http_client.cpp)

 private:
  void Launch(std::unique_ptr<Transfer> t);
  void LaunchQueued();
  void ScheduleFinish(std::unique_ptr<Transfer> t, ExchangeResult r);
  void Drive(int fd, int curl_events);  // curl_multi_socket_action, then collect finished transfers
  void SocketAction(int fd, int curl_events);  // curl_multi_socket_action, and a new connection's second look
  void Collect();
  void EnsureMulti();
  void CloseLater(int fd);  // a socket curl has closed, closed for real once this pass ended
  void ScheduleCleanup();   // CloseNow once this pass ended
  void CloseNow();  // closes the sockets curl closed, keeps or cleans up the finished exchanges' handles
  void KeepEasy(Transfer& t);  // its easy handle kept for the next exchange (a few at most)
  void SetFixedOptions(void* easy);  // the options every exchange sets alike, once per handle
  bool WatchNow(int fd, uint32_t events);  // the loop watches `fd` for curl: true if it does
  void WatchDeferred();  // the connecting socket's watch OnSocket left until the action's end
  void Fail(void* easy, std::string why);  // a transfer in flight ends with kOther, told later

  static int OnCloseSocket(void* client, int fd);
  static int OnSocket(void* easy, int fd, int what, void* client, void* socketp);
  static int OnTimer(void* multi, long timeout_ms, void* client);

  EventLoop& loop_;
  Options options_;
  void* multi_ = nullptr;  // CURLM*
  uint64_t next_id_ = 1;
  std::map<uint64_t, std::unique_ptr<Transfer>> running_;
  std::deque<std::unique_ptr<Transfer>> queue_;
  std::set<int> watched_;
  std::optional<EventLoop::TimerId> timer_;  // curl's one timer (OnTimer); the destructor cancels it
  std::vector<int> closing_;  // sockets curl closed, to close after this pass (CloseLater)
  std::vector<std::shared_ptr<Transfer>> finished_;  // easy handles to clean up after this pass
  // Easy handles reset for the next exchange (CURL*): at most kMaxSpareEasy, the rest cleaned up.
  static constexpr size_t kMaxSpareEasy = 4;
  std::vector<void*> spare_easy_;
  bool driving_ = false;       // inside Drive: a 0 ms timeout is left to the loop's timer
  bool due_now_ = false;       // curl asked for a 0 ms timeout since the last socket action
  int connecting_ = -1;        // a socket curl first asked to watch for EPOLLOUT in this action
  bool in_action_ = false;     // inside SocketAction: a new connection's first watch may wait
  // The connecting socket's EPOLLOUT watch, not yet asked of the loop: if the connection is made at
  // once (loopback, a near host) curl next wants EPOLLIN, and one epoll_ctl does instead of two.
  int deferred_fd_ = -1;
  void* deferred_easy_ = nullptr;  // its transfer's CURL*
  uint64_t watch_changes_ = 0;
  bool close_scheduled_ = false;
  std::optional<EventLoop::TimerId> close_timer_;
  std::shared_ptr<bool> alive_;  // posted completions check it (the client may be gone); false once destruction begins
};

}  // namespace basal::http
