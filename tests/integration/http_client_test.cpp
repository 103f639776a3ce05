// The parent's HTTP client (src/parent/http/http_client.h) on an event loop of its own, against
// the loopback test server: every exchange has its own connection, and each connection is closed
// once the exchange is answered (its close waits for the end of that loop pass, never longer than
// the next pass or the client's destruction), so no descriptor outlives its exchange.
#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "parent/http/http_client.h"
#include "parent/loop/event_loop.h"
#include "support/http_test_server.h"

namespace basal::testing {
namespace {

// This process's descriptors that are TCP sockets connected to 127.0.0.1:`port` from the client
// side (the remote port is the server's): the client's connections, not the server's ends.
size_t ClientSocketsTo(uint16_t port) {
  std::set<unsigned long> inodes;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (dirent* e = ::readdir(d)) {
      char target[PATH_MAX] = {};
      const std::string link = std::string("/proc/self/fd/") + e->d_name;
      const ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
      unsigned long inode = 0;
      if (n > 0 && std::sscanf(target, "socket:[%lu]", &inode) == 1) inodes.insert(inode);
    }
    ::closedir(d);
  }
  size_t count = 0;
  std::ifstream tcp("/proc/net/tcp");
  std::string line;
  std::getline(tcp, line);  // the column names
  while (std::getline(tcp, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout;
    unsigned long inode = 0;
    fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode;
    const size_t colon = remote.find(':');
    if (colon == std::string::npos) continue;
    const unsigned long remote_port = std::stoul(remote.substr(colon + 1), nullptr, 16);
    if (remote_port == port && inodes.count(inode)) ++count;
  }
  return count;
}

class HttpClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_.Handle("/item", [](const TestRequest&) {
      TestResponse r;
      r.status = 200;
      r.body = "item";
      return r;
    });
    ASSERT_TRUE(server_.Start(/*ipv6=*/false)) << server_.error();
    auto loop = EventLoop::Create();
    ASSERT_TRUE(loop) << loop.error().message;
    loop_ = std::move(*loop);
  }

  // Starts one GET and runs the loop until its `done` has run (at most 10 s).
  // GET /item of the test server.
  http::Exchange GetItem() {
    http::Exchange x;
    x.url = server_.url("/item");
    x.method = "GET";
    return x;
  }

  std::optional<http::ExchangeResult> Exchange(http::HttpClient& client) {
    std::optional<http::ExchangeResult> got;
    client.Start(GetItem(), [&got](http::ExchangeResult r) { got = std::move(r); });
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!got && std::chrono::steady_clock::now() < until) loop_->RunOnce(std::chrono::milliseconds(100));
    return got;
  }

  HttpTestServer server_;
  std::unique_ptr<EventLoop> loop_;
};

TEST_F(HttpClientTest, EachExchangeHasItsOwnConnectionClosedByThePassAfterItsAnswer) {
  http::HttpClient client(*loop_, {});
  for (int i = 0; i < 20; ++i) {
    std::optional<http::ExchangeResult> r = Exchange(client);
    ASSERT_TRUE(r) << "exchange " << i << " never finished";
    ASSERT_TRUE(r->ok()) << r->message;
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, "item");
    loop_->RunOnce(std::chrono::milliseconds(0));  // the pass after the one that answered
    EXPECT_EQ(ClientSocketsTo(server_.port()), 0u) << "after exchange " << i;
  }
  EXPECT_EQ(server_.connections_accepted(), 20u);  // none reused
}

TEST_F(HttpClientTest, DestroyingTheClientClosesTheConnectionsItHadYetToClose) {
  {
    http::HttpClient client(*loop_, {});
    std::optional<http::ExchangeResult> r = Exchange(client);
    ASSERT_TRUE(r && r->ok());
  }  // no further pass of the loop
  EXPECT_EQ(ClientSocketsTo(server_.port()), 0u);
  loop_->RunOnce(std::chrono::milliseconds(0));  // what the client left on the loop is inert
  EXPECT_EQ(ClientSocketsTo(server_.port()), 0u);
}

TEST_F(HttpClientTest, AFailedConnectionLeavesNoSocketOpen) {
  http::HttpClient client(*loop_, {});
  std::optional<http::ExchangeResult> got;
  http::Exchange x = GetItem();
  x.check_address = [](const http::SocketAddress&) -> std::optional<std::string> { return "is refused by the test"; };
  client.Start(std::move(x), [&got](http::ExchangeResult r) { got = std::move(r); });
  EXPECT_FALSE(got) << "done ran from inside Start";  // refused while Start drove it, told later
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!got && std::chrono::steady_clock::now() < until) loop_->RunOnce(std::chrono::milliseconds(100));
  ASSERT_TRUE(got);
  EXPECT_EQ(got->failure, http::ExchangeResult::Failure::kAddressRefused) << got->message;
  EXPECT_EQ(server_.connections_accepted(), 0u);
  loop_->RunOnce(std::chrono::milliseconds(0));
  EXPECT_EQ(ClientSocketsTo(server_.port()), 0u);
  // The allowed path still works on the same client.
  std::optional<http::ExchangeResult> ok = Exchange(client);
  ASSERT_TRUE(ok && ok->ok());
  loop_->RunOnce(std::chrono::milliseconds(0));
  EXPECT_EQ(ClientSocketsTo(server_.port()), 0u);
}

// An exchange is started by Start itself, not by the loop's next pass: its connection reaches the
// server while the loop is not running at all (the server accepts on a thread of its own). Before,
// nothing was sent until a pass ran curl's 0 ms timeout. `done` still never runs inside Start.
TEST_F(HttpClientTest, StartConnectsAtOnceWithoutWaitingForALoopPass) {
  http::HttpClient client(*loop_, {});
  std::optional<http::ExchangeResult> got;
  http::Exchange x = GetItem();
  client.Start(std::move(x), [&got](http::ExchangeResult r) { got = std::move(r); });
  EXPECT_FALSE(got) << "done ran from inside Start";
  // Waiting for the server's thread, not timing the client: the loop never runs meanwhile.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (server_.connections_accepted() == 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(server_.connections_accepted(), 1u) << "Start left the connect to the loop";
  const auto done_by = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!got && std::chrono::steady_clock::now() < done_by) loop_->RunOnce(std::chrono::milliseconds(100));
  ASSERT_TRUE(got);
  ASSERT_TRUE(got->ok()) << got->message;
  EXPECT_EQ(got->body, "item");
}

// A connection made inside connect() (loopback) is watched once, for its response, not first for
// EPOLLOUT and then changed to EPOLLIN: one epoll_ctl on the way to the request's send instead of
// two. Then dropped once when it closes.
TEST_F(HttpClientTest, AConnectionMadeAtOnceIsWatchedOnlyForItsResponse) {
  http::HttpClient client(*loop_, {});
  for (int i = 0; i < 3; ++i) {
    const uint64_t before = client.watch_changes();
    std::optional<http::ExchangeResult> got;
    client.Start(GetItem(), [&got](http::ExchangeResult r) { got = std::move(r); });
    EXPECT_EQ(client.watch_changes() - before, 1u) << "exchange " << i << ": watched more than once before its answer";
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!got && std::chrono::steady_clock::now() < until) loop_->RunOnce(std::chrono::milliseconds(100));
    ASSERT_TRUE(got);
    ASSERT_TRUE(got->ok()) << got->message;
    EXPECT_EQ(got->body, "item");
    loop_->RunOnce(std::chrono::milliseconds(0));
    EXPECT_EQ(client.watch_changes() - before, 2u) << "exchange " << i;
  }
  EXPECT_EQ(server_.connections_accepted(), 3u);
  EXPECT_EQ(ClientSocketsTo(server_.port()), 0u);
}

// A queued exchange is launched as another ends, from inside the client's own handling of curl's
// events: it is left to the loop's timer there (never driven re-entrantly), and still completes.
TEST_F(HttpClientTest, QueuedExchangesStartAsOthersEndAndAllComplete) {
  http::HttpClient client(*loop_, {.max_in_flight = 1});
  std::vector<std::optional<http::ExchangeResult>> got(4);
  for (auto& slot : got) {
    http::Exchange x;
    x.url = server_.url("/item");
    x.method = "GET";
    client.Start(std::move(x), [&slot](http::ExchangeResult r) { slot = std::move(r); });
  }
  EXPECT_EQ(client.in_flight(), 1u);
  EXPECT_EQ(client.queued(), 3u);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  auto all = [&got] { return std::all_of(got.begin(), got.end(), [](const auto& r) { return r.has_value(); }); };
  while (!all() && std::chrono::steady_clock::now() < until) loop_->RunOnce(std::chrono::milliseconds(100));
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got[i]) << "exchange " << i << " never finished";
    EXPECT_TRUE(got[i]->ok()) << got[i]->message;
    EXPECT_EQ(got[i]->body, "item");
  }
  EXPECT_EQ(server_.connections_accepted(), 4u);
  loop_->RunOnce(std::chrono::milliseconds(0));
  EXPECT_EQ(ClientSocketsTo(server_.port()), 0u);
}

// The client keeps a finished exchange's easy handle, reset, for the next one: nothing of an
// exchange (its method, body, headers, limits, address check) reaches the next, and each still
// has a connection of its own.
TEST_F(HttpClientTest, AKeptHandleCarriesNothingOfItsExchangeIntoTheNext) {
  http::HttpClient client(*loop_, {});
  const auto run = [&](http::Exchange x) {
    std::optional<http::ExchangeResult> got;
    client.Start(std::move(x), [&got](http::ExchangeResult r) { got = std::move(r); });
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!got && std::chrono::steady_clock::now() < until) loop_->RunOnce(std::chrono::milliseconds(100));
    loop_->RunOnce(std::chrono::milliseconds(0));  // the pass that closes its socket and keeps its handle
    return got;
  };
  const auto exchange = [&](std::string method) {
    http::Exchange x;
    x.url = server_.url("/item");
    x.method = std::move(method);
    return x;
  };
  http::Exchange post = exchange("POST");
  post.body = "abc";
  post.headers = {{"X-One", "1"}};
  auto r = run(std::move(post));
  ASSERT_TRUE(r && r->ok()) << (r ? r->message : "never finished");
  r = run(exchange("DELETE"));  // a custom method, which the GET after it must not keep
  ASSERT_TRUE(r && r->ok()) << (r ? r->message : "never finished");
  r = run(exchange("GET"));
  ASSERT_TRUE(r && r->ok()) << (r ? r->message : "never finished");
  EXPECT_EQ(r->body, "item");
  r = run(exchange("HEAD"));
  ASSERT_TRUE(r && r->ok()) << (r ? r->message : "never finished");
  EXPECT_EQ(r->body, "");
  r = run(exchange("GET"));  // a body again after the HEAD
  ASSERT_TRUE(r && r->ok()) << (r ? r->message : "never finished");
  EXPECT_EQ(r->body, "item");
  http::Exchange small = exchange("GET");
  small.max_response_bytes = 2;
  r = run(std::move(small));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->failure, http::ExchangeResult::Failure::kTooLarge) << r->message;
  http::Exchange refused = exchange("GET");
  refused.check_address = [](const http::SocketAddress&) -> std::optional<std::string> { return "is refused"; };
  r = run(std::move(refused));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->failure, http::ExchangeResult::Failure::kAddressRefused) << r->message;
  r = run(exchange("GET"));  // neither the limit nor the check stayed
  ASSERT_TRUE(r && r->ok()) << (r ? r->message : "never finished");
  EXPECT_EQ(r->body, "item");

  const std::vector<TestRequest> seen = server_.requests();
  ASSERT_EQ(seen.size(), 7u);  // the refused exchange reached no server
  EXPECT_EQ(seen[0].method, "POST");
  EXPECT_EQ(seen[0].body, "abc");
  EXPECT_EQ(seen[0].header("X-One").value_or(""), "1");
  for (size_t i = 1; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].method, i == 1 ? "DELETE" : i == 3 ? "HEAD" : "GET") << "request " << i;
    EXPECT_EQ(seen[i].body, "") << "request " << i;
    EXPECT_FALSE(seen[i].header("X-One")) << "request " << i << " carried the POST's header";
    EXPECT_FALSE(seen[i].header("Content-Length")) << "request " << i << " carried the POST's body";
    EXPECT_NE(seen[i].connection, seen[i - 1].connection) << "request " << i << " reused a connection";
  }
  EXPECT_EQ(ClientSocketsTo(server_.port()), 0u);
}

}  // namespace
}  // namespace basal::testing
