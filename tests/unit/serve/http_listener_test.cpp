// HttpListener (serve/http_server.h) on a real EventLoop and a real Unix socket, driven pass by pass:
// what a request answered later (a suspended connection, resumed with its answer) costs the loop.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "parent/loop/event_loop.h"
#include "serve/http_server.h"

namespace basal::serve {
namespace {

HttpResponse Answer(const std::string& body) {
  HttpResponse r;
  r.body = body;
  return r;
}

class HttpListenerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/basal-http-listener-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/s.sock";
    auto loop = EventLoop::Create();
    ASSERT_TRUE(loop);
    loop_ = std::move(*loop);
  }
  void TearDown() override {
    listener_.reset();
    if (client_ >= 0) close(client_);
    std::filesystem::remove_all(dir_);
  }

  void Start(HttpListener::Options o) {
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    ASSERT_GE(fd, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path_.c_str(), sizeof addr.sun_path - 1);
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    ASSERT_EQ(listen(fd, 16), 0);
    o.name = "unix";
    o.listen_fd = fd;
    o.unix_socket = true;
    auto l = HttpListener::Start(*loop_, std::move(o));
    ASSERT_TRUE(l) << l.error().message;
    listener_ = std::move(*l);
  }

  void Connect() {
    client_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(client_, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path_.c_str(), sizeof addr.sun_path - 1);
    ASSERT_EQ(connect(client_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  }

  void Send(const std::string& text) { ASSERT_EQ(write(client_, text.data(), text.size()), static_cast<ssize_t>(text.size())); }

  // What the client has been sent so far (without waiting).
  std::string Received() {
    std::string out;
    char buf[4096];
    for (;;) {
      const ssize_t n = recv(client_, buf, sizeof buf, MSG_DONTWAIT);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }

  std::string dir_, path_;
  std::unique_ptr<EventLoop> loop_;
  std::unique_ptr<HttpListener> listener_;
  int client_ = -1;
};

// A run's answer comes after its commit, to a suspended connection: libmicrohttpd sends it whole in
// one pass, and the request completes (the connection reads again; what the answer held in
// UnsentAnswers is released) in that same pass: no further pass of the loop, no timer, before the
// client's next request can be read.
TEST_F(HttpListenerTest, AnAnswerGivenLaterCompletesInThePassThatSendsIt) {
  auto unsent = std::make_shared<UnsentAnswers>();
  std::optional<Respond> later;
  HttpListener::Options o;
  o.unsent = unsent;
  o.handle = [&later](const HttpRequest&, Respond respond, OnClientGone) { later = std::move(respond); };
  Start(std::move(o));
  Connect();
  Send("POST /v1/x HTTP/1.1\r\nHost: basal\r\nContent-Length: 2\r\n\r\n{}");
  for (int i = 0; i < 200 && !later; ++i) loop_->RunOnce(std::chrono::milliseconds(10));
  ASSERT_TRUE(later) << "the request never reached the handler";
  EXPECT_EQ(listener_->pending(), 1u);

  const std::string body = "{\"answer\": \"later\"}";
  (*later)(Answer(body));
  // Posted after the listener's own run (Respond posts it): sees what that run left.
  std::optional<size_t> unsent_after_the_send;
  loop_->Post([&] { unsent_after_the_send = unsent->bytes; });
  loop_->RunOnce(std::chrono::milliseconds(0));
  ASSERT_TRUE(unsent_after_the_send);
  const std::string got = Received();
  ASSERT_NE(got.find("HTTP/1.1 200"), std::string::npos) << got;
  ASSERT_NE(got.find(body), std::string::npos) << got;
  EXPECT_EQ(*unsent_after_the_send, 0u) << "the request was still incomplete after the pass that sent its answer";
  EXPECT_EQ(listener_->pending(), 0u);

  // The connection reads again: a second request on it is answered.
  later.reset();
  Send("POST /v1/x HTTP/1.1\r\nHost: basal\r\nContent-Length: 2\r\n\r\n{}");
  for (int i = 0; i < 200 && !later; ++i) loop_->RunOnce(std::chrono::milliseconds(10));
  ASSERT_TRUE(later) << "the second request never reached the handler";
  (*later)(Answer(body));
  std::string second;
  for (int i = 0; i < 200 && second.find(body) == std::string::npos; ++i) {
    loop_->RunOnce(std::chrono::milliseconds(10));
    second += Received();
  }
  EXPECT_NE(second.find(body), std::string::npos) << second;
}


// After the pass that sends a later answer, the loop has nothing left of it: libmicrohttpd's passes
// over the resumed connection (the request's completion, the socket read back to EAGAIN, the
// connection back in its epoll set, and the writable event that return raises) ran in that pass,
// so the loop's next pass would sleep: no timer due, no descriptor ready, nothing posted. The probe
// is the loop's before_wait, which runs only when a pass is about to block and nothing is ready.
TEST_F(HttpListenerTest, AfterALaterAnswerTheLoopHasNothingLeftToDo) {
  std::optional<Respond> later;
  HttpListener::Options o;
  o.handle = [&later](const HttpRequest&, Respond respond, OnClientGone) { later = std::move(respond); };
  Start(std::move(o));
  Connect();
  const std::string body = "{\"answer\": \"later\"}";
  for (int round = 0; round < 3; ++round) {
    later.reset();
    Send("POST /v1/x HTTP/1.1\r\nHost: basal\r\nContent-Length: 2\r\n\r\n{}");
    for (int i = 0; i < 200 && !later; ++i) loop_->RunOnce(std::chrono::milliseconds(10));
    ASSERT_TRUE(later) << "the request never reached the handler (round " << round << ")";
    (*later)(Answer(body));
    loop_->RunOnce(std::chrono::milliseconds(0));  // the pass that sends the answer
    // Probed before the client reads: its read frees room in the socket, which the kernel reports
    // to libmicrohttpd as writable again, an event of the client's making rather than of this pass.
    bool would_sleep = false;
    loop_->set_before_wait([] { return true; }, [&would_sleep] { would_sleep = true; });
    loop_->RunOnce(std::chrono::milliseconds(1000));
    loop_->set_before_wait(nullptr, nullptr);
    EXPECT_TRUE(would_sleep) << "the pass after the answer's still had work of it (a timer due now, or "
                                "libmicrohttpd's descriptor readable) (round " << round << ")";
    const std::string got = Received();
    ASSERT_NE(got.find(body), std::string::npos) << got;
  }
}

}  // namespace
}  // namespace basal::serve
