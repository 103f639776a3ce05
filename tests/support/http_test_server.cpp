// HttpTestServer: HTTP/1.1 on loopback for tests and benchmarks (http_test_server.h).
#include "support/http_test_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>

namespace basal::testing {
namespace {

char Lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool EqualsIgnoringCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (Lower(a[i]) != Lower(b[i])) return false;
  return true;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Whether the comma-separated header value holds `token` ("keep-alive, Upgrade" holds "upgrade").
bool HasToken(std::string_view value, std::string_view token) {
  while (!value.empty()) {
    const size_t comma = value.find(',');
    if (EqualsIgnoringCase(Trim(value.substr(0, comma)), token)) return true;
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
  return false;
}

const char* ReasonFor(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 303: return "See Other";
    case 304: return "Not Modified";
    case 307: return "Temporary Redirect";
    case 308: return "Permanent Redirect";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Content Too Large";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "Status";
  }
}

// Reads from a connection into a buffer; the parser consumes from its front.
class Input {
 public:
  explicit Input(int fd) : fd_(fd) {}
  // Reads once more; false at end of stream or on an error.
  bool More() {
    if (pos_ > 0 && pos_ == buf_.size()) {
      buf_.clear();
      pos_ = 0;
    } else if (pos_ > (1u << 20)) {
      buf_.erase(0, pos_);
      pos_ = 0;
    }
    char chunk[65536];
    for (;;) {
      const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      buf_.append(chunk, static_cast<size_t>(n));
      return true;
    }
  }
  std::string_view Pending() const { return std::string_view(buf_).substr(pos_); }
  void Consume(size_t n) { pos_ += n; }
  bool Empty() const { return pos_ == buf_.size(); }

  // Up to and without the next "\r\n" (consumed), reading more as needed; nothing when the stream
  // ended, or when no line end came within `limit` bytes (then *too_long is set).
  std::optional<std::string> Line(size_t limit, bool* too_long) {
    for (;;) {
      const size_t end = Pending().find("\r\n");
      if (end != std::string_view::npos) {
        std::string line(Pending().substr(0, end));
        Consume(end + 2);
        return line;
      }
      if (Pending().size() > limit) {
        *too_long = true;
        return std::nullopt;
      }
      if (!More()) return std::nullopt;
    }
  }
  // Exactly n bytes into `out`; false if the stream ended first.
  bool Take(size_t n, std::string& out) {
    while (Pending().size() < n) {
      const size_t have = Pending().size();
      out.append(Pending());
      Consume(have);
      n -= have;
      if (!More()) return false;
    }
    out.append(Pending().substr(0, n));
    Consume(n);
    return true;
  }

 private:
  int fd_;
  std::string buf_;
  size_t pos_ = 0;
};

bool SendAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// An error answer of the server's own; the connection is closed after it.
void SendError(int fd, int status, const std::string& why) {
  const std::string body = why + "\n";
  SendAll(fd, "HTTP/1.1 " + std::to_string(status) + " " + ReasonFor(status) +
                  "\r\nContent-Type: text/plain\r\nContent-Length: " + std::to_string(body.size()) +
                  "\r\nConnection: close\r\n\r\n" + body);
}

enum class ReadResult { kOk, kEnded, kRefused };

struct Refusal {
  int status = 400;
  std::string why;
};

// One request's head and body. kEnded: the client closed (or the stream broke) between or inside
// requests; kRefused: *refusal says what to answer before closing.
ReadResult ReadRequest(Input& in, int fd, TestRequest& r, Refusal* refusal) {
  auto refuse = [&](int status, std::string why) {
    refusal->status = status;
    refusal->why = std::move(why);
    return ReadResult::kRefused;
  };
  // The head: everything up to the empty line, at most kMaxHeadBytes.
  size_t head_end = std::string_view::npos;
  for (;;) {
    head_end = in.Pending().find("\r\n\r\n");
    if (head_end != std::string_view::npos) break;
    if (in.Pending().size() > HttpTestServer::kMaxHeadBytes)
      return refuse(431, "the request's head is over " + std::to_string(HttpTestServer::kMaxHeadBytes) + " bytes");
    if (!in.More()) return ReadResult::kEnded;
  }
  if (head_end + 4 > HttpTestServer::kMaxHeadBytes)
    return refuse(431, "the request's head is over " + std::to_string(HttpTestServer::kMaxHeadBytes) + " bytes");
  const std::string head(in.Pending().substr(0, head_end));
  in.Consume(head_end + 4);
  const size_t head_bytes = head_end + 4;

  size_t line_end = head.find("\r\n");
  const std::string request_line = head.substr(0, line_end);
  const size_t sp1 = request_line.find(' ');
  const size_t sp2 = sp1 == std::string::npos ? sp1 : request_line.find(' ', sp1 + 1);
  if (sp1 == std::string::npos || sp2 == std::string::npos || request_line.find(' ', sp2 + 1) != std::string::npos)
    return refuse(400, "malformed request line");
  r.method = request_line.substr(0, sp1);
  r.target = request_line.substr(sp1 + 1, sp2 - sp1 - 1);
  r.version = request_line.substr(sp2 + 1);
  if (r.method.empty() || r.target.empty() || r.version.rfind("HTTP/1.", 0) != 0)
    return refuse(400, "malformed request line");
  while (line_end != std::string::npos) {
    const size_t start = line_end + 2;
    line_end = head.find("\r\n", start);
    const std::string_view line = std::string_view(head).substr(start, line_end == std::string::npos
                                                                            ? std::string::npos
                                                                            : line_end - start);
    const size_t colon = line.find(':');
    if (line.empty() || line[0] == ' ' || line[0] == '\t' || colon == std::string_view::npos || colon == 0 ||
        line.substr(0, colon).find_first_of(" \t") != std::string_view::npos)
      return refuse(400, "malformed header line");
    r.headers.emplace_back(std::string(line.substr(0, colon)), std::string(Trim(line.substr(colon + 1))));
  }

  // The body's framing. Both lengths at once is how requests are smuggled: refused.
  std::optional<std::string> transfer_encoding;
  std::optional<uint64_t> content_length;
  for (const auto& [name, value] : r.headers) {
    if (EqualsIgnoringCase(name, "Transfer-Encoding")) {
      transfer_encoding = transfer_encoding ? *transfer_encoding + ", " + value : value;
    } else if (EqualsIgnoringCase(name, "Content-Length")) {
      if (value.empty() || value.size() > 18 || value.find_first_not_of("0123456789") != std::string::npos)
        return refuse(400, "malformed Content-Length");
      const uint64_t length = std::stoull(value);
      if (content_length && *content_length != length) return refuse(400, "conflicting Content-Length headers");
      content_length = length;
    }
  }
  if (transfer_encoding && content_length) return refuse(400, "both Transfer-Encoding and Content-Length");
  const bool chunked = transfer_encoding.has_value();
  if (chunked && !EqualsIgnoringCase(Trim(*transfer_encoding), "chunked"))
    return refuse(400, "unsupported Transfer-Encoding (only chunked)");
  const size_t body_limit = HttpTestServer::kMaxRequestBytes - std::min(head_bytes, HttpTestServer::kMaxRequestBytes);
  if (content_length && *content_length > body_limit)
    return refuse(413, "the request is over " + std::to_string(HttpTestServer::kMaxRequestBytes) + " bytes");

  const bool has_body = chunked || content_length.value_or(0) > 0;
  if (has_body && r.version == "HTTP/1.1") {
    for (const auto& [name, value] : r.headers) {
      if (EqualsIgnoringCase(name, "Expect") && EqualsIgnoringCase(value, "100-continue")) {
        if (!SendAll(fd, "HTTP/1.1 100 Continue\r\n\r\n")) return ReadResult::kEnded;
        break;
      }
    }
  }
  if (content_length) return in.Take(*content_length, r.body) ? ReadResult::kOk : ReadResult::kEnded;
  if (!chunked) return ReadResult::kOk;
  for (;;) {
    bool too_long = false;
    auto size_line = in.Line(1024, &too_long);
    if (!size_line) return too_long ? refuse(400, "chunk size line too long") : ReadResult::kEnded;
    const std::string digits = size_line->substr(0, size_line->find(';'));
    const std::string_view hex = Trim(digits);
    if (hex.empty() || hex.size() > 15 || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string_view::npos)
      return refuse(400, "malformed chunk size");
    const uint64_t size = std::stoull(std::string(hex), nullptr, 16);
    if (size == 0) break;
    if (r.body.size() + size > body_limit)
      return refuse(413, "the request is over " + std::to_string(HttpTestServer::kMaxRequestBytes) + " bytes");
    if (!in.Take(size, r.body)) return ReadResult::kEnded;
    auto crlf = in.Line(2, &too_long);
    if (!crlf) return too_long ? refuse(400, "chunk data not followed by CRLF") : ReadResult::kEnded;
    if (!crlf->empty()) return refuse(400, "chunk data not followed by CRLF");
  }
  // Trailers (ignored), up to the empty line.
  size_t trailer_bytes = 0;
  for (;;) {
    bool too_long = false;
    auto line = in.Line(HttpTestServer::kMaxHeadBytes, &too_long);
    if (!line) return too_long ? refuse(431, "trailers too long") : ReadResult::kEnded;
    if (line->empty()) break;
    trailer_bytes += line->size() + 2;
    if (trailer_bytes > HttpTestServer::kMaxHeadBytes) return refuse(431, "trailers too long");
  }
  return ReadResult::kOk;
}

}  // namespace

std::string TestRequest::path() const { return target.substr(0, target.find('?')); }

std::optional<std::string> TestRequest::header(std::string_view name) const {
  for (const auto& [n, v] : headers)
    if (EqualsIgnoringCase(n, name)) return v;
  return std::nullopt;
}

HttpTestServer::~HttpTestServer() { Stop(); }

void HttpTestServer::Handle(const std::string& path, TestHandler handler) {
  std::lock_guard lock(mutex_);
  routes_[path] = std::move(handler);
}

bool HttpTestServer::Start(bool ipv6) {
  if (listen_fd_ >= 0) {
    error_ = "already started";
    return false;
  }
  auto fail = [&](const char* step) {
    error_ = std::string(step) + ": " + std::strerror(errno);
    if (listen_fd_ >= 0) ::close(listen_fd_);
    listen_fd_ = -1;
    return false;
  };
  ipv6_ = ipv6;
  listen_fd_ = ::socket(ipv6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) return fail("socket");
  const int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (ipv6) {
    ::setsockopt(listen_fd_, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_loopback;
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return fail("bind [::1]:0");
    socklen_t len = sizeof a;
    if (::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) return fail("getsockname");
    port_ = ntohs(a.sin6_port);
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return fail("bind 127.0.0.1:0");
    socklen_t len = sizeof a;
    if (::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) return fail("getsockname");
    port_ = ntohs(a.sin_port);
  }
  if (::listen(listen_fd_, 512) != 0) return fail("listen");
  if (::pipe2(wake_pipe_, O_CLOEXEC) != 0) return fail("pipe2");
  stopping_ = false;
  acceptor_ = std::thread([this] { AcceptLoop(); });
  return true;
}

std::string HttpTestServer::url(const std::string& path) const {
  return std::string(ipv6_ ? "http://[::1]:" : "http://127.0.0.1:") + std::to_string(port_) + path;
}

std::vector<TestRequest> HttpTestServer::requests() const {
  std::lock_guard lock(mutex_);
  return requests_;
}

void HttpTestServer::ClearRequests() {
  std::lock_guard lock(mutex_);
  requests_.clear();
}

std::optional<TestHandler> HttpTestServer::Route(const std::string& path) const {
  std::lock_guard lock(mutex_);
  if (auto exact = routes_.find(path); exact != routes_.end() && !path.ends_with('*')) return exact->second;
  const TestHandler* best = nullptr;
  size_t best_length = 0;
  for (const auto& [pattern, handler] : routes_) {
    if (!pattern.ends_with('*')) continue;
    const std::string_view prefix = std::string_view(pattern).substr(0, pattern.size() - 1);
    if (path.starts_with(prefix) && (best == nullptr || prefix.size() > best_length)) {
      best = &handler;
      best_length = prefix.size();
    }
  }
  if (best == nullptr) return std::nullopt;
  return *best;
}

bool HttpTestServer::Pause(int ms) {
  if (ms <= 0) return !stopping_;
  std::unique_lock lock(mutex_);
  return !changed_.wait_for(lock, std::chrono::milliseconds(ms), [this] { return stopping_.load(); });
}

// Joins the connections whose thread ended (every one with `all`) and closes their sockets. The
// socket is closed here, after the join, never by its thread: Stop may shut down any socket in
// the list without racing a close (and the reuse of its number).
void HttpTestServer::ReapFinished(bool all) {
  std::list<Connection> finished;
  {
    std::lock_guard lock(mutex_);
    for (auto it = connections_.begin(); it != connections_.end();) {
      auto next = std::next(it);
      if (all || it->done) finished.splice(finished.end(), connections_, it);
      it = next;
    }
  }
  for (Connection& c : finished) {
    if (c.thread.joinable()) c.thread.join();
    ::close(c.fd);
  }
}

size_t HttpTestServer::Live() const {
  size_t live = 0;
  for (const Connection& c : connections_) live += c.done ? 0 : 1;
  return live;
}

void HttpTestServer::AcceptLoop() {
  for (;;) {
    ReapFinished(false);
    {
      // At most kMaxConnections served at once; further clients wait in the backlog.
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [this] { return stopping_ || Live() < kMaxConnections; });
    }
    if (stopping_) return;
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_pipe_[0], POLLIN, 0}};
    // The timeout only lets finished connections be reaped while no client comes.
    const int ready = ::poll(fds, 2, 200);
    if (stopping_) return;
    if (ready <= 0 || !(fds[0].revents & POLLIN)) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    const int one = 1;
    // No Nagle: a response's head and body go out at once, not after the client's delayed ack.
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    std::lock_guard lock(mutex_);
    Connection& c = connections_.emplace_back();
    c.fd = fd;
    c.id = ++accepted_;
    c.thread = std::thread([this, &c] { Serve(&c); });
    most_live_ = std::max(most_live_.load(), Live());
  }
}

void HttpTestServer::Serve(Connection* connection) {
  const int fd = connection->fd;
  Input in(fd);
  for (;;) {
    if (stopping_) break;
    TestRequest request;
    request.connection = connection->id;
    Refusal refusal;
    const ReadResult read = ReadRequest(in, fd, request, &refusal);
    if (read == ReadResult::kEnded) break;
    if (read == ReadResult::kRefused) {
      SendError(fd, refusal.status, refusal.why);
      // Closing with unread bytes would make the kernel send a reset, which can destroy the
      // answer before the client reads it: end our side, then drain what the client is still
      // sending, at most kMaxDrainBytes, until it closes its side.
      ::shutdown(fd, SHUT_WR);
      size_t drained = 0;
      char sink[65536];
      while (drained < kMaxDrainBytes && !stopping_) {
        const ssize_t n = ::recv(fd, sink, sizeof sink, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        drained += static_cast<size_t>(n);
      }
      break;
    }
    if (record_) {
      std::lock_guard lock(mutex_);
      requests_.push_back(request);
    }
    TestResponse response;
    if (auto handler = Route(request.path())) {
      try {
        response = (*handler)(request);
      } catch (const std::exception& e) {
        response = TestResponse{};
        response.status = 500;
        response.body = std::string("the test handler threw: ") + e.what() + "\n";
      }
    } else {
      response.status = 404;
      response.body = "no handler for " + request.path() + "\n";
    }
    if (response.close_without_response) break;
    if (!Pause(response.delay_before_headers_ms)) break;

    const auto connection_header = request.header("Connection");
    bool close = response.close_connection ||
                 (connection_header && HasToken(*connection_header, "close")) ||
                 (request.version == "HTTP/1.0" && !(connection_header && HasToken(*connection_header, "keep-alive")));
    bool has_length = false, has_encoding = false;
    for (const auto& [name, value] : response.headers) {
      has_length |= EqualsIgnoringCase(name, "Content-Length");
      has_encoding |= EqualsIgnoringCase(name, "Transfer-Encoding");
      if (EqualsIgnoringCase(name, "Connection") && HasToken(value, "close")) close = true;
    }
    const bool bodiless_status = response.status / 100 == 1 || response.status == 204 || response.status == 304;
    const bool send_body = request.method != "HEAD" && !bodiless_status;
    const uint64_t total = response.body.size() * response.body_repeat;

    std::string out = "HTTP/1.1 " + std::to_string(response.status) + " " +
                      (response.reason.empty() ? ReasonFor(response.status) : response.reason) + "\r\n";
    for (const auto& [name, value] : response.headers) out += name + ": " + value + "\r\n";
    if (!has_length && !has_encoding && !bodiless_status) {
      out += response.chunked ? std::string("Transfer-Encoding: chunked\r\n")
                              : "Content-Length: " + std::to_string(total) + "\r\n";
    }
    if (close) out += "Connection: close\r\n";
    out += "\r\n";

    bool sent = true;
    if (send_body) {
      const size_t piece = response.drip.piece_bytes > 0 ? response.drip.piece_bytes : size_t{64 * 1024};
      uint64_t offset = 0;
      std::string buffer;
      while (sent && offset < total) {
        if (offset > 0 && response.drip.pause_ms > 0) {
          if (!SendAll(fd, out)) sent = false;  // what is due goes out before the pause
          out.clear();
          if (!sent || !Pause(response.drip.pause_ms)) {
            sent = false;
            break;
          }
        }
        const size_t length = static_cast<size_t>(std::min<uint64_t>(piece, total - offset));
        buffer.clear();
        // The piece of body_repeat copies of body that starts at `offset`.
        while (buffer.size() < length) {
          const size_t at = static_cast<size_t>((offset + buffer.size()) % response.body.size());
          buffer.append(response.body, at, std::min(response.body.size() - at, length - buffer.size()));
        }
        if (response.chunked) {
          char size[32];
          std::snprintf(size, sizeof size, "%zx\r\n", length);
          out += size;
          out += buffer;
          out += "\r\n";
        } else {
          out += buffer;
        }
        offset += length;
        if (out.size() >= 64 * 1024) {
          sent = SendAll(fd, out);
          out.clear();
        }
      }
      if (sent && response.chunked) out += "0\r\n\r\n";
    }
    if (!sent || !SendAll(fd, out) || close) break;
  }
  // FIN now (the client sees the end of a close-delimited answer, or a connection closed without
  // one); the descriptor itself is closed by ReapFinished after the join.
  ::shutdown(fd, SHUT_RDWR);
  connection->done = true;
  std::lock_guard lock(mutex_);
  changed_.notify_all();
}

void HttpTestServer::Stop() {
  if (listen_fd_ < 0) return;
  stopping_ = true;
  {
    std::lock_guard lock(mutex_);
    changed_.notify_all();
  }
  const char byte = 0;
  (void)!::write(wake_pipe_[1], &byte, 1);
  if (acceptor_.joinable()) acceptor_.join();
  {
    // Every connection's blocking recv or send returns at once.
    std::lock_guard lock(mutex_);
    for (Connection& c : connections_) ::shutdown(c.fd, SHUT_RDWR);
    changed_.notify_all();
  }
  ReapFinished(true);
  ::close(listen_fd_);
  ::close(wake_pipe_[0]);
  ::close(wake_pipe_[1]);
  listen_fd_ = -1;
  wake_pipe_[0] = wake_pipe_[1] = -1;
}

}  // namespace basal::testing
