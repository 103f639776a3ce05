// HttpTestServer (tests/support/http_test_server.h), driven by a raw socket client so that every
// byte it sends is seen: routes and 404, the recorded requests, keep-alive and Connection: close,
// HEAD, Expect: 100-continue, chunked request bodies, the refusals (both lengths, oversize, a huge
// head), and each response behaviour (chunked, body_repeat, delay, drip, close without answer),
// the connection bound, IPv6, and Stop while a client waits.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "support/http_test_server.h"

namespace basal::testing {
namespace {

// A raw HTTP/1.1 client: what it sends is exactly what the test wrote.
class Client {
 public:
  explicit Client(uint16_t port, bool ipv6 = false) {
    fd_ = ::socket(ipv6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    // A safety net against a hang, not a measure: a test that waits this long has failed anyway.
    timeval tv{60, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    int r;
    if (ipv6) {
      sockaddr_in6 a{};
      a.sin6_family = AF_INET6;
      a.sin6_addr = in6addr_loopback;
      a.sin6_port = htons(port);
      r = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    } else {
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(port);
      r = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    }
    EXPECT_EQ(r, 0) << std::strerror(errno);
  }
  ~Client() { ::close(fd_); }
  int fd() const { return fd_; }

  bool Send(std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  // Reads once more into the buffer; false at end of stream (or on error).
  bool More() {
    char chunk[65536];
    const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
    if (n <= 0) return false;
    buf_.append(chunk, static_cast<size_t>(n));
    return true;
  }
  // Exactly n bytes, or what there was before the end.
  std::string Take(size_t n) {
    while (buf_.size() < n && More()) {
    }
    std::string out = buf_.substr(0, n);
    buf_.erase(0, out.size());
    return out;
  }
  std::string Line() {
    size_t end;
    while ((end = buf_.find("\r\n")) == std::string::npos && More()) {
    }
    if (end == std::string::npos) return Take(buf_.size());
    std::string line = buf_.substr(0, end);
    buf_.erase(0, end + 2);
    return line;
  }
  // Whether the server has sent nothing more yet (nothing buffered, nothing readable now).
  bool NothingMoreNow() {
    pollfd p{fd_, POLLIN, 0};
    return buf_.empty() && ::poll(&p, 1, 0) == 0;
  }
  // True when the server closed the connection with nothing more to read.
  bool Closed() { return buf_.empty() && !More() && buf_.empty(); }

  struct Response {
    int status = 0;
    std::string status_line;
    TestHeaders headers;
    std::string body;
    std::optional<std::string> header(std::string_view name) const {
      for (const auto& [n, v] : headers)
        if (strcasecmp(n.c_str(), std::string(name).c_str()) == 0) return v;
      return std::nullopt;
    }
  };
  // One response, its body framed as the headers say (none for HEAD).
  Response Read(bool head_request = false) {
    Response r;
    r.status_line = Line();
    if (r.status_line.size() >= 12) r.status = std::stoi(r.status_line.substr(9, 3));
    for (std::string line = Line(); !line.empty(); line = Line()) {
      const size_t colon = line.find(':');
      r.headers.emplace_back(line.substr(0, colon), line.substr(colon + 2));
    }
    if (head_request || r.status == 100 || r.status == 204 || r.status == 304) return r;
    if (auto te = r.header("Transfer-Encoding")) {
      for (;;) {
        const size_t size = std::stoul(Line(), nullptr, 16);
        if (size == 0) break;
        r.body += Take(size);
        EXPECT_EQ(Line(), "");
      }
      EXPECT_EQ(Line(), "");  // no trailers
    } else if (auto cl = r.header("Content-Length")) {
      r.body = Take(std::stoull(*cl));
    } else {
      while (More()) {
      }
      r.body = Take(buf_.size());
    }
    return r;
  }

 private:
  int fd_ = -1;
  std::string buf_;
};

TestResponse Text(std::string body) {
  TestResponse r;
  r.headers = {{"Content-Type", "text/plain"}};
  r.body = std::move(body);
  return r;
}

class HttpTestServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_.Handle("/hello", [](const TestRequest& r) { return Text("hello " + r.method); });
    server_.Handle("/echo", [](const TestRequest& r) { return Text(r.body); });
    ASSERT_TRUE(server_.Start()) << server_.error();
  }
  HttpTestServer server_;
};

// ---- routing and recording ----

TEST_F(HttpTestServerTest, AnswersARouteAndRecordsTheRequestAsSent) {
  EXPECT_EQ(server_.url("/hello"), "http://127.0.0.1:" + std::to_string(server_.port()) + "/hello");
  Client c(server_.port());
  ASSERT_TRUE(c.Send("GET /hello?x=1&y=2 HTTP/1.1\r\nHost: example\r\nAuthorization: Bearer s3cret\r\n"
                     "X-Mixed-Case:   padded value  \r\n\r\n"));
  const auto r = c.Read();
  EXPECT_EQ(r.status_line, "HTTP/1.1 200 OK");
  EXPECT_EQ(r.header("Content-Length"), "9");
  EXPECT_EQ(r.header("Content-Type"), "text/plain");
  EXPECT_EQ(r.body, "hello GET");
  const auto seen = server_.requests();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].method, "GET");
  EXPECT_EQ(seen[0].target, "/hello?x=1&y=2");
  EXPECT_EQ(seen[0].path(), "/hello");
  EXPECT_EQ(seen[0].version, "HTTP/1.1");
  EXPECT_EQ(seen[0].headers,
            (TestHeaders{{"Host", "example"}, {"Authorization", "Bearer s3cret"}, {"X-Mixed-Case", "padded value"}}));
  EXPECT_EQ(seen[0].header("authorization"), "Bearer s3cret");
  EXPECT_EQ(seen[0].header("Cookie"), std::nullopt);
  EXPECT_EQ(seen[0].connection, 1u);
  server_.ClearRequests();
  EXPECT_TRUE(server_.requests().empty());
  // With recording off, requests are answered and not kept.
  server_.RecordRequests(false);
  ASSERT_TRUE(c.Send("GET /hello HTTP/1.1\r\n\r\n"));
  EXPECT_EQ(c.Read().body, "hello GET");
  EXPECT_TRUE(server_.requests().empty());
  server_.RecordRequests(true);
  ASSERT_TRUE(c.Send("GET /hello HTTP/1.1\r\n\r\n"));
  EXPECT_EQ(c.Read().body, "hello GET");
  EXPECT_EQ(server_.requests().size(), 1u);
}

TEST_F(HttpTestServerTest, ExactRoutesBeforePrefixesTheLongestPrefixFirstElse404) {
  server_.Handle("/api/*", [](const TestRequest&) { return Text("api"); });
  server_.Handle("/api/v2/*", [](const TestRequest&) { return Text("v2"); });
  server_.Handle("/api/v2/exact", [](const TestRequest&) { return Text("exact"); });
  Client c(server_.port());
  struct Case {
    const char* target;
    int status;
    const char* body;
  } cases[] = {
      {"/api/", 200, "api"},          {"/api/x/y?q", 200, "api"},       {"/api/v2/", 200, "v2"},
      {"/api/v2/exact", 200, "exact"}, {"/api/v2/exact/more", 200, "v2"}, {"/api", 404, "no handler for /api\n"},
      {"/hello/", 404, nullptr},      {"/nothing", 404, nullptr},
  };
  for (const Case& k : cases) {
    ASSERT_TRUE(c.Send(std::string("GET ") + k.target + " HTTP/1.1\r\nHost: h\r\n\r\n"));
    const auto r = c.Read();
    EXPECT_EQ(r.status, k.status) << k.target;
    if (k.body) {
      EXPECT_EQ(r.body, k.body) << k.target;
    }
  }
  EXPECT_EQ(server_.requests().size(), std::size(cases));  // 404s are recorded too
}

TEST_F(HttpTestServerTest, AHandlerThatThrowsIsA500) {
  server_.Handle("/throws", [](const TestRequest&) -> TestResponse { throw std::runtime_error("boom"); });
  Client c(server_.port());
  ASSERT_TRUE(c.Send("GET /throws HTTP/1.1\r\n\r\n"));
  const auto r = c.Read();
  EXPECT_EQ(r.status, 500);
  EXPECT_EQ(r.body, "the test handler threw: boom\n");
}

// ---- connections ----

TEST_F(HttpTestServerTest, KeepAliveServesManyRequestsOnOneConnectionUntilConnectionClose) {
  Client c(server_.port());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(c.Send("GET /hello HTTP/1.1\r\nHost: h\r\n\r\n"));
    EXPECT_EQ(c.Read().body, "hello GET");
  }
  ASSERT_TRUE(c.Send("GET /hello HTTP/1.1\r\nConnection: close\r\n\r\n"));
  const auto last = c.Read();
  EXPECT_EQ(last.body, "hello GET");
  EXPECT_EQ(last.header("Connection"), "close");
  EXPECT_TRUE(c.Closed());
  EXPECT_EQ(server_.connections_accepted(), 1u);
  for (const TestRequest& r : server_.requests()) EXPECT_EQ(r.connection, 1u);
  // Two requests sent at once (pipelined) are both answered, in order.
  Client pipelined(server_.port());
  ASSERT_TRUE(pipelined.Send("POST /echo HTTP/1.1\r\nContent-Length: 3\r\n\r\none"
                             "POST /echo HTTP/1.1\r\nContent-Length: 3\r\n\r\ntwo"));
  EXPECT_EQ(pipelined.Read().body, "one");
  EXPECT_EQ(pipelined.Read().body, "two");
  EXPECT_EQ(server_.connections_accepted(), 2u);
}

TEST_F(HttpTestServerTest, Http10ClosesUnlessAskedToKeepAlive) {
  Client c(server_.port());
  ASSERT_TRUE(c.Send("GET /hello HTTP/1.0\r\n\r\n"));
  EXPECT_EQ(c.Read().body, "hello GET");
  EXPECT_TRUE(c.Closed());
  Client kept(server_.port());
  ASSERT_TRUE(kept.Send("GET /hello HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
  EXPECT_EQ(kept.Read().body, "hello GET");
  ASSERT_TRUE(kept.Send("GET /hello HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
  EXPECT_EQ(kept.Read().body, "hello GET");
}

TEST_F(HttpTestServerTest, HeadGetsTheHeadersAndNoBody) {
  Client c(server_.port());
  ASSERT_TRUE(c.Send("HEAD /hello HTTP/1.1\r\n\r\n"));
  const auto head = c.Read(/*head_request=*/true);
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.header("Content-Length"), "10");  // what GET would send: "hello HEAD"
  // No body bytes followed: the next answer on the connection starts with its status line.
  ASSERT_TRUE(c.Send("GET /hello HTTP/1.1\r\n\r\n"));
  const auto get = c.Read();
  EXPECT_EQ(get.status_line, "HTTP/1.1 200 OK");
  EXPECT_EQ(get.body, "hello GET");
}

TEST_F(HttpTestServerTest, ExpectContinueIsAnsweredBeforeTheBodyIsSent) {
  Client c(server_.port());
  ASSERT_TRUE(c.Send("POST /echo HTTP/1.1\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n"));
  // The client holds its body back until the server says so.
  EXPECT_EQ(c.Line(), "HTTP/1.1 100 Continue");
  EXPECT_EQ(c.Line(), "");
  ASSERT_TRUE(c.Send("abcde"));
  const auto r = c.Read();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "abcde");
  EXPECT_EQ(server_.requests().at(0).body, "abcde");
}

TEST_F(HttpTestServerTest, AChunkedRequestBodyIsDecoded) {
  Client c(server_.port());
  ASSERT_TRUE(c.Send("POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                     "5\r\nhello\r\n6;name=value\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n"));
  EXPECT_EQ(c.Read().body, "hello world");
  EXPECT_EQ(server_.requests().at(0).body, "hello world");
  // And the connection goes on.
  ASSERT_TRUE(c.Send("GET /hello HTTP/1.1\r\n\r\n"));
  EXPECT_EQ(c.Read().body, "hello GET");
}

// ---- refusals ----

TEST_F(HttpTestServerTest, MalformedOrAmbiguousRequestsAre400AndClosed) {
  const char* bad[] = {
      "POST /echo HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
      "POST /echo HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
      "POST /echo HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
      "POST /echo HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
      "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
      "GET /hello\r\n\r\n",
      "GET /hello HTTP/1.1\r\nNo colon here\r\n\r\n",
      "GET /hello HTTP/1.1\r\nX-A: 1\r\n folded\r\n\r\n",
      "GET  /hello HTTP/1.1\r\n\r\n",
  };
  for (const char* request : bad) {
    Client c(server_.port());
    ASSERT_TRUE(c.Send(request));
    EXPECT_EQ(c.Read().status, 400) << request;
    EXPECT_TRUE(c.Closed()) << request;
  }
  EXPECT_TRUE(server_.requests().empty());
  // The allowed path: the same server answers a well-formed request.
  Client ok(server_.port());
  ASSERT_TRUE(ok.Send("GET /hello HTTP/1.1\r\n\r\n"));
  EXPECT_EQ(ok.Read().status, 200);
}

TEST_F(HttpTestServerTest, ARequestOver16MiBIs413WithoutBeingHeld) {
  {
    // Announced too large: refused on its head alone.
    Client c(server_.port());
    ASSERT_TRUE(c.Send("POST /echo HTTP/1.1\r\nContent-Length: 16777217\r\n\r\n"));
    const auto r = c.Read();
    EXPECT_EQ(r.status, 413);
    EXPECT_EQ(r.body, "the request is over 16777216 bytes\n");
  }
  {
    // Chunked, of unknown length: refused when the chunks pass the limit.
    Client c(server_.port());
    std::thread sender([&] {
      const std::string mib(1 << 20, 'x');
      char size[16];
      std::snprintf(size, sizeof size, "%zx\r\n", mib.size());
      bool ok = c.Send("POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
      for (int i = 0; i < 16 && ok; ++i) ok = c.Send(std::string(size) + mib + "\r\n");
      if (ok) c.Send("0\r\n\r\n");
      ::shutdown(c.fd(), SHUT_WR);
    });
    const auto r = c.Read();
    sender.join();
    EXPECT_EQ(r.status, 413);
  }
  {
    // Just under the limit is taken whole.
    Client c(server_.port());
    const std::string head = "POST /echo HTTP/1.1\r\nContent-Length: ";
    const size_t body = HttpTestServer::kMaxRequestBytes - 1024;
    std::thread sender([&] { c.Send(head + std::to_string(body) + "\r\n\r\n" + std::string(body, 'y')); });
    const auto r = c.Read();
    sender.join();
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body.size(), body);
  }
  ASSERT_EQ(server_.requests().size(), 1u);
  EXPECT_EQ(server_.requests()[0].body.size(), HttpTestServer::kMaxRequestBytes - 1024);
}

TEST_F(HttpTestServerTest, AHeadOver64KiBIs431) {
  Client c(server_.port());
  ASSERT_TRUE(c.Send("GET /hello HTTP/1.1\r\nX-Big: " + std::string(70 * 1024, 'h') + "\r\n\r\n"));
  EXPECT_EQ(c.Read().status, 431);
  EXPECT_TRUE(c.Closed());
  Client ok(server_.port());
  ASSERT_TRUE(ok.Send("GET /hello HTTP/1.1\r\nX-Big: " + std::string(60 * 1024, 'h') + "\r\n\r\n"));
  EXPECT_EQ(ok.Read().status, 200);
}

// ---- response behaviours ----

TEST_F(HttpTestServerTest, StatusReasonAndHeadersAreSentAsGiven) {
  server_.Handle("/custom", [](const TestRequest&) {
    TestResponse r;
    r.status = 302;
    r.reason = "Elsewhere";
    r.headers = {{"Location", "http://127.0.0.1:1/next"}, {"X-Dup", "1"}, {"X-Dup", "2"}};
    return r;
  });
  server_.Handle("/empty", [](const TestRequest&) {
    TestResponse r;
    r.status = 204;
    return r;
  });
  Client c(server_.port());
  ASSERT_TRUE(c.Send("GET /custom HTTP/1.1\r\n\r\n"));
  const auto r = c.Read();
  EXPECT_EQ(r.status_line, "HTTP/1.1 302 Elsewhere");
  EXPECT_EQ(r.headers, (TestHeaders{{"Location", "http://127.0.0.1:1/next"}, {"X-Dup", "1"}, {"X-Dup", "2"},
                                    {"Content-Length", "0"}}));
  ASSERT_TRUE(c.Send("GET /empty HTTP/1.1\r\n\r\n"));
  const auto empty = c.Read();
  EXPECT_EQ(empty.status_line, "HTTP/1.1 204 No Content");
  EXPECT_TRUE(empty.headers.empty());
}

TEST_F(HttpTestServerTest, AChunkedBodyHasNoLengthAndArrivesWhole) {
  server_.Handle("/chunked", [](const TestRequest&) {
    TestResponse r = Text("abc");
    r.body_repeat = 100000;  // 300000 bytes: several chunks
    r.chunked = true;
    return r;
  });
  Client c(server_.port());
  ASSERT_TRUE(c.Send("GET /chunked HTTP/1.1\r\n\r\n"));
  const auto r = c.Read();
  EXPECT_EQ(r.header("Transfer-Encoding"), "chunked");
  EXPECT_EQ(r.header("Content-Length"), std::nullopt);
  ASSERT_EQ(r.body.size(), 300000u);
  for (size_t i = 0; i < r.body.size(); i += 3) ASSERT_EQ(r.body.compare(i, 3, "abc"), 0) << i;
}

TEST_F(HttpTestServerTest, BodyRepeatSendsALargeBodyWithItsLength) {
  server_.Handle("/big", [](const TestRequest&) {
    TestResponse r = Text("0123456789abcdef");
    r.body_repeat = 3 * 1024 * 1024;  // 48 MiB on the wire, 16 bytes held
    return r;
  });
  Client c(server_.port());
  ASSERT_TRUE(c.Send("GET /big HTTP/1.1\r\n\r\n"));
  // Read the head, then count the body without keeping it.
  EXPECT_EQ(c.Line(), "HTTP/1.1 200 OK");
  std::string length;
  for (std::string line = c.Line(); !line.empty(); line = c.Line())
    if (line.rfind("Content-Length: ", 0) == 0) length = line.substr(16);
  EXPECT_EQ(length, std::to_string(48u * 1024 * 1024));
  size_t total = 0;
  bool pattern = true;
  for (std::string piece = c.Take(1 << 20); !piece.empty() && total < 48u * 1024 * 1024; piece = c.Take(1 << 20)) {
    for (size_t i = 0; i < piece.size(); i += 4099) pattern &= piece[i] == "0123456789abcdef"[(total + i) % 16];
    total += piece.size();
    if (total == 48u * 1024 * 1024) break;
  }
  EXPECT_EQ(total, 48u * 1024 * 1024);
  EXPECT_TRUE(pattern);
}

TEST_F(HttpTestServerTest, ADelayHoldsTheAnswerBackAndStopInterruptsIt) {
  server_.Handle("/soon", [](const TestRequest&) {
    TestResponse r = Text("late");
    r.delay_before_headers_ms = 20;
    return r;
  });
  server_.Handle("/never", [](const TestRequest&) {
    TestResponse r = Text("never sent");
    r.delay_before_headers_ms = 600000;
    return r;
  });
  Client soon(server_.port());
  ASSERT_TRUE(soon.Send("GET /soon HTTP/1.1\r\n\r\n"));
  EXPECT_EQ(soon.Read().body, "late");
  Client waiting(server_.port());
  ASSERT_TRUE(waiting.Send("GET /never HTTP/1.1\r\n\r\n"));
  while (server_.requests().size() < 2) std::this_thread::yield();
  EXPECT_TRUE(waiting.NothingMoreNow());  // the request arrived; the answer waits 10 minutes
  server_.Stop();                         // returns at once: the delay is interrupted
  EXPECT_TRUE(waiting.Closed());
}

TEST_F(HttpTestServerTest, ADripSendsPiecesWithPausesBetween) {
  server_.Handle("/drip", [](const TestRequest& r) {
    TestResponse out = Text("abcdefghij");
    out.drip.piece_bytes = 3;
    out.drip.pause_ms = 1;
    out.chunked = r.target.ends_with("chunked");
    return out;
  });
  server_.Handle("/stuck", [](const TestRequest&) {
    TestResponse out = Text("abcdefghij");
    out.drip.piece_bytes = 4;
    out.drip.pause_ms = 600000;
    return out;
  });
  Client c(server_.port());
  for (const char* target : {"/drip", "/drip?chunked"}) {
    ASSERT_TRUE(c.Send(std::string("GET ") + target + " HTTP/1.1\r\n\r\n"));
    const auto r = c.Read();
    EXPECT_EQ(r.body, "abcdefghij") << target;
  }
  // The head and the first piece come at once; the next piece waits for its pause.
  Client stuck(server_.port());
  ASSERT_TRUE(stuck.Send("GET /stuck HTTP/1.1\r\n\r\n"));
  EXPECT_EQ(stuck.Line(), "HTTP/1.1 200 OK");
  for (std::string line = stuck.Line(); !line.empty(); line = stuck.Line()) {
  }
  EXPECT_EQ(stuck.Take(4), "abcd");
  EXPECT_TRUE(stuck.NothingMoreNow());
  server_.Stop();
  EXPECT_TRUE(stuck.Closed());
}

TEST_F(HttpTestServerTest, CloseWithoutResponseRecordsTheRequestAndSendsNothing) {
  server_.Handle("/hangup", [](const TestRequest&) {
    TestResponse r;
    r.close_without_response = true;
    return r;
  });
  Client c(server_.port());
  ASSERT_TRUE(c.Send("GET /hangup HTTP/1.1\r\nX-Token: t\r\n\r\n"));
  EXPECT_TRUE(c.Closed());
  ASSERT_EQ(server_.requests().size(), 1u);
  EXPECT_EQ(server_.requests()[0].header("X-Token"), "t");
}

TEST_F(HttpTestServerTest, CloseConnectionEndsTheConnectionAfterTheAnswer) {
  server_.Handle("/once", [](const TestRequest&) {
    TestResponse r = Text("once");
    r.close_connection = true;
    return r;
  });
  Client c(server_.port());
  ASSERT_TRUE(c.Send("GET /once HTTP/1.1\r\n\r\n"));
  const auto r = c.Read();
  EXPECT_EQ(r.body, "once");
  EXPECT_EQ(r.header("Connection"), "close");
  EXPECT_TRUE(c.Closed());
}

// ---- bounds, IPv6, Stop ----

TEST_F(HttpTestServerTest, AtMostKMaxConnectionsAreServedAtOnce) {
  std::mutex m;
  std::condition_variable cv;
  bool release = false;
  server_.Handle("/block", [&](const TestRequest&) {
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return release; });
    return Text("released");
  });
  std::vector<std::unique_ptr<Client>> busy;
  for (size_t i = 0; i < HttpTestServer::kMaxConnections; ++i) {
    busy.push_back(std::make_unique<Client>(server_.port()));
    // Connection: close, so that each connection ends with its answer (a kept-alive one would
    // still count against the bound).
    ASSERT_TRUE(busy.back()->Send("GET /block HTTP/1.1\r\nConnection: close\r\n\r\n"));
  }
  while (server_.requests().size() < HttpTestServer::kMaxConnections) std::this_thread::yield();
  // One more client: the kernel completes its connection (backlog), but no thread serves it.
  Client extra(server_.port());
  ASSERT_TRUE(extra.Send("GET /hello HTTP/1.1\r\n\r\n"));
  pollfd p{extra.fd(), POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 300), 0) << "a connection past the bound was served";
  EXPECT_EQ(server_.requests().size(), HttpTestServer::kMaxConnections);
  {
    std::lock_guard lock(m);
    release = true;
  }
  cv.notify_all();
  EXPECT_EQ(extra.Read().body, "hello GET");  // served once the others are done
  for (auto& c : busy) EXPECT_EQ(c->Read().body, "released");
  EXPECT_EQ(server_.most_connections_at_once(), HttpTestServer::kMaxConnections);
}

TEST(HttpTestServerIpv6Test, ListensOnIpv6LoopbackWhenAsked) {
  HttpTestServer server;
  server.Handle("/v6", [](const TestRequest&) { return Text("six"); });
  if (!server.Start(/*ipv6=*/true)) {
    // A machine without ::1 (IPv6 disabled) cannot run this; CI's can.
    GTEST_SKIP() << "no IPv6 loopback here: " << server.error();
  }
  EXPECT_EQ(server.url("/v6"), "http://[::1]:" + std::to_string(server.port()) + "/v6");
  Client c(server.port(), /*ipv6=*/true);
  ASSERT_TRUE(c.Send("GET /v6 HTTP/1.1\r\n\r\n"));
  EXPECT_EQ(c.Read().body, "six");
}

TEST_F(HttpTestServerTest, StopClosesIdleConnectionsAndKeepsTheRecord) {
  Client idle(server_.port());
  ASSERT_TRUE(idle.Send("GET /hello HTTP/1.1\r\n\r\n"));
  EXPECT_EQ(idle.Read().body, "hello GET");
  server_.Stop();
  EXPECT_TRUE(idle.Closed());
  EXPECT_EQ(server_.requests().size(), 1u);
  server_.Stop();  // idempotent
  // And it can start again, on a new port.
  ASSERT_TRUE(server_.Start()) << server_.error();
  Client again(server_.port());
  ASSERT_TRUE(again.Send("GET /hello HTTP/1.1\r\n\r\n"));
  EXPECT_EQ(again.Read().body, "hello GET");
}

}  // namespace
}  // namespace basal::testing
