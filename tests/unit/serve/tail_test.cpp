// The live tail (serve/tail.h) without a daemon: what a subscriber's stream holds, its bounds (the
// subscribers, the bytes a client has not read, and what is lost past them), keepalives, the drain.
#include "serve/tail.h"

#include <gtest/gtest.h>

#include <string>

#include "parent/loop/event_loop.h"

namespace basal::serve {
namespace {

std::string TakeAll(HttpStream& s) {
  std::string out(s.buffered(), '\0');
  out.resize(s.Take(out.data(), out.size()));
  return out;
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

HostCallContext Context(int64_t activation, const std::string& flow) {
  HostCallContext c;
  c.activation_id = activation;
  c.flow = flow;
  return c;
}

class TailTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto loop = EventLoop::Create();
    ASSERT_TRUE(loop);
    loop_ = std::move(*loop);
    tail_ = std::make_unique<Tail>(Tail::Options{.loop = *loop_,
                                                 .limits = limits_,
                                                 .run_of = [this](int64_t a) {
                                                   ++lookups_;
                                                   return a * 100;
                                                 },
                                                 .keepalive = std::chrono::milliseconds(10)});
  }
  std::shared_ptr<HttpStream> Subscribe(std::optional<std::string> flow = std::nullopt) {
    auto s = tail_->Subscribe(std::move(flow));
    if (auto* refused = std::get_if<HttpResponse>(&s)) {
      ADD_FAILURE() << refused->body;
      return nullptr;
    }
    return std::get<std::shared_ptr<HttpStream>>(s);
  }

  LimitsConfig limits_;
  std::unique_ptr<EventLoop> loop_;
  std::unique_ptr<Tail> tail_;
  int lookups_ = 0;
};

TEST_F(TailTest, EventsInOrderForTheFlowsAsked) {
  auto all = Subscribe();
  auto hello = Subscribe("hello");
  EXPECT_EQ(TakeAll(*all), ": basal tail\n\n");
  EXPECT_EQ(TakeAll(*hello), ": basal tail of flow hello\n\n");
  ActivityEvent start{.kind = ActivityEvent::Kind::kActivationStarted, .activation_id = 7, .run_id = 3,
                      .flow = "other", .started_unix_us = 1'000'000};
  tail_->OnActivity(start);
  tail_->OnLog(Context(7, "other"), "warn", "line \"one\"\n");
  ActivityEvent end = start;
  end.kind = ActivityEvent::Kind::kActivationEnded;
  end.ended_unix_us = 1'250'000;
  end.outcome = "script_error";
  end.error_json = R"({"kind":"script_error","message":"TypeError: boom"})";
  tail_->OnActivity(end);
  EXPECT_EQ(TakeAll(*hello), "");  // another flow's
  EXPECT_EQ(TakeAll(*all),
            "event: activation_start\n"
            "data: {\"activation_id\":7,\"flow\":\"other\",\"run_id\":3,\"started\":\"1970-01-01T00:00:01.000Z\"}\n\n"
            "event: log\n"
            "data: {\"activation_id\":7,\"flow\":\"other\",\"level\":\"warn\",\"message\":\"line \\\"one\\\"\\n\",\"run_id\":3}\n\n"
            "event: activation_end\n"
            "data: {\"activation_id\":7,\"ended\":\"1970-01-01T00:00:01.250Z\",\"error\":{\"kind\":\"script_error\","
            "\"message\":\"TypeError: boom\"},\"flow\":\"other\",\"ms\":250.0,\"outcome\":\"script_error\",\"run_id\":3}\n\n");
  EXPECT_EQ(lookups_, 0);  // the start named its run
  // A console line of an activation whose start this tail did not see: its run is looked up once.
  tail_->OnLog(Context(9, "hello"), "log", "a");
  tail_->OnLog(Context(9, "hello"), "log", "b");
  EXPECT_EQ(lookups_, 1);
  const std::string got = TakeAll(*hello);
  EXPECT_EQ(Count(got, "\"run_id\":900"), 2u) << got;
  ActivityEvent call{.kind = ActivityEvent::Kind::kHostCall, .activation_id = 9, .flow = "hello", .call_id = 4,
                     .name = "kv.put", .decision = "deny", .rule = "no grant", .state = "answered"};
  tail_->OnActivity(call);
  EXPECT_EQ(TakeAll(*hello),
            "event: call\ndata: {\"activation_id\":9,\"call_id\":4,\"decision\":\"deny\",\"flow\":\"hello\","
            "\"name\":\"kv.put\",\"rule\":\"no grant\",\"run_id\":900,\"state\":\"answered\"}\n\n");
}

TEST_F(TailTest, AnErrorsMessageAndStackAreCut) {
  auto s = Subscribe();
  TakeAll(*s);
  ActivityEvent end{.kind = ActivityEvent::Kind::kActivationEnded, .activation_id = 1, .flow = "f"};
  end.error_json = nlohmann::json{{"message", std::string(100'000, 'm')}, {"stack", std::string(100'000, 's')}}.dump();
  tail_->OnActivity(end);
  const std::string got = TakeAll(*s);
  EXPECT_LT(got.size(), 9000u);
  EXPECT_EQ(Count(got, std::string(4096, 'm') + "..."), 1u);
  EXPECT_EQ(Count(got, std::string(4096, 's') + "..."), 1u);
}

TEST_F(TailTest, AClientThatDoesNotReadLosesEventsPastItsBufferAndIsToldTheCount) {
  limits_.tail_buffer_bytes = 64 << 10;
  auto slow = Subscribe();
  auto fast = Subscribe();
  const std::string line(1000, 'x');
  size_t fast_logs = 0;
  for (int i = 0; i < 500; ++i) {
    tail_->OnLog(Context(1, "f"), "log", line);
    EXPECT_LE(slow->buffered(), limits_.tail_buffer_bytes);  // never past its bound
    fast_logs += Count(TakeAll(*fast), "event: log\n");
  }
  EXPECT_EQ(fast_logs, 500u);  // a reader loses nothing for another's sake
  const size_t kept = Count(TakeAll(*slow), "event: log\n");
  EXPECT_GT(kept, 0u);
  EXPECT_LT(kept, 500u);
  // It reads again: the next event comes after the count of what it lost, and it goes on.
  tail_->OnLog(Context(1, "f"), "log", "after");
  const std::string got = TakeAll(*slow);
  EXPECT_EQ(got.rfind("event: dropped\ndata: {\"count\":" + std::to_string(500 - kept) + "}\n\n", 0), 0u) << got;
  EXPECT_NE(got.find("\"message\":\"after\""), std::string::npos);
  tail_->OnLog(Context(1, "f"), "log", "later");
  EXPECT_EQ(Count(TakeAll(*slow), "dropped"), 0u);
}

TEST_F(TailTest, KeepalivesReachIdleStreamsOnly) {
  auto idle = Subscribe();
  auto full = Subscribe();
  TakeAll(*idle);  // `full` keeps its first comment unread
  std::string got;
  for (int i = 0; i < 10'000 && Count(got, ": keepalive\n\n") < 2; ++i) {
    loop_->RunOnce(std::chrono::milliseconds(20));
    got += TakeAll(*idle);
  }
  EXPECT_GE(Count(got, ": keepalive\n\n"), 2u);
  EXPECT_EQ(TakeAll(*full), ": basal tail\n\n");  // nothing piled up behind what it did not read
}

TEST_F(TailTest, AStreamWhoseCredentialNoLongerAdmitsItEndsAtTheNextTickWithTheReason) {
  bool revoked = false;
  auto checked = tail_->Subscribe(std::nullopt, [&]() -> std::optional<std::string> {
    if (revoked) return "the bearer token is not known or was revoked";
    return std::nullopt;
  });
  ASSERT_TRUE(std::holds_alternative<std::shared_ptr<HttpStream>>(checked));
  auto stream = std::get<std::shared_ptr<HttpStream>>(checked);
  auto unchecked = Subscribe();  // a Unix socket's stream: nothing to admit again
  // Still admitted: ticks pass, and the stream gets keepalives and events as before.
  std::string got;
  for (int i = 0; i < 10'000 && Count(got, ": keepalive\n\n") < 2; ++i) {
    loop_->RunOnce(std::chrono::milliseconds(20));
    got += TakeAll(*stream);
  }
  EXPECT_FALSE(stream->closed());
  EXPECT_EQ(tail_->subscribers(), 2u);
  revoked = true;
  for (int i = 0; i < 10'000 && !stream->closed(); ++i) loop_->RunOnce(std::chrono::milliseconds(20));
  EXPECT_TRUE(stream->closed());
  EXPECT_NE(TakeAll(*stream).find("event: closed\ndata: {\"reason\":\"the bearer token is not known or was revoked\"}\n\n"),
            std::string::npos);
  EXPECT_EQ(tail_->subscribers(), 1u);
  // The event that follows reaches the other stream only.
  tail_->OnLog(Context(7, "hello"), "log", "after");
  EXPECT_NE(TakeAll(*unchecked).find("after"), std::string::npos);
  EXPECT_FALSE(unchecked->closed());
}

TEST_F(TailTest, SubscribersAreBoundedAndDrainEndsEveryStream) {
  limits_.tail_subscribers = 2;
  auto a = Subscribe();
  auto b = Subscribe();
  auto refused = tail_->Subscribe(std::nullopt);
  ASSERT_TRUE(std::holds_alternative<HttpResponse>(refused));
  EXPECT_EQ(std::get<HttpResponse>(refused).status, 503);
  EXPECT_NE(std::get<HttpResponse>(refused).body.find("tail_full"), std::string::npos);
  a->Detach();  // its client left
  EXPECT_EQ(tail_->subscribers(), 1u);
  auto c = Subscribe();
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(tail_->wanted());
  tail_->Drain();
  EXPECT_TRUE(b->closed());
  EXPECT_TRUE(c->closed());
  EXPECT_FALSE(tail_->wanted());
  auto after = tail_->Subscribe(std::nullopt);
  ASSERT_TRUE(std::holds_alternative<HttpResponse>(after));
  EXPECT_NE(std::get<HttpResponse>(after).body.find("draining"), std::string::npos);
}

}  // namespace
}  // namespace basal::serve
