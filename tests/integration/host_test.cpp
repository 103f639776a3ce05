// The module as a long-running host: the public API's promises (Submit, Cancel, Shutdown,
// RemoveFlow, observer events), answers from other threads, and the host-call record lifecycle
// (intent committed before an external effect, abandoned calls, late answers journaled).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "integration/test_support.h"

namespace basal::testing {
namespace {

using Json = nlohmann::json;

class Recorder final : public ModuleObserver {
 public:
  void OnEvent(const ModuleEvent& e) override { events.push_back(e); }
  std::vector<ModuleEvent> events;
};

class HostTest : public ModuleFixture {
 protected:
  // "hold" keeps its reply in held_ until the test answers it.
  void RegisterHold(Effect effect = Effect::kPure, std::string name = "hold") {
    HostCallSpec spec;
    spec.name = std::move(name);
    spec.effect = effect;
    spec.handler = [this](const HostCallContext& ctx, const Json&, HostCallReply reply) {
      contexts_.push_back(ctx);
      held_.push_back(std::move(reply));
    };
    ASSERT_TRUE(module_->registry().Register(std::move(spec)));
  }
  void RunUntilHeld(size_t n) {
    for (int i = 0; i < 2000 && held_.size() < n; ++i) module_->RunFor(std::chrono::milliseconds(5));
    ASSERT_EQ(held_.size(), n);
  }
  std::vector<HostCallReply> held_;
  std::vector<HostCallContext> contexts_;
};

constexpr const char* kHoldFlow = "export default async function (i, host) { return await host.call('hold', i); }";
constexpr const char* kHoldManifest = R"({"grants": {"hold": {}}})";

TEST_F(HostTest, SubmitReturnsErrorsInsteadOfCallingDone) {
  Open();
  FlowRef f = Add("export default () => 1");
  bool called = false;
  Json deep = Json::array();
  for (int i = 0; i < 300; ++i) deep = Json::array({deep});
  auto r = module_->Submit(f, deep, [&](const ActivationResult&) { called = true; });
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(r.error().message.find("nest"), std::string::npos) << r.error().message;
  ASSERT_TRUE(module_->RemoveFlow(f));
  auto removed = module_->Submit(f, 1, [&](const ActivationResult&) { called = true; });
  ASSERT_FALSE(removed);
  EXPECT_EQ(removed.error().code, ErrorCode::kNotFound);
  module_->RunUntilIdle();
  EXPECT_FALSE(called);
}

TEST_F(HostTest, DoneIsNeverCalledInsideSubmit) {
  ModuleOptions o;
  o.worker_path = "/nonexistent/ck-basal-worker";
  Open(o);
  FlowRef f = Add("export default () => 1");
  bool inside = true, called = false;
  ActivationResult got;
  ASSERT_TRUE(module_->Submit(f, 1, [&](const ActivationResult& r) {
    EXPECT_FALSE(inside);
    called = true;
    got = r;
  }));
  inside = false;
  module_->RunUntilIdle();
  ASSERT_TRUE(called);
  EXPECT_EQ(got.outcome, Outcome::kSpawnFailed);
}

TEST_F(HostTest, CancelEndsQueuedAndRunningActivationsOnceEach) {
  ModuleOptions o;
  o.max_workers = 1;
  Open(o);
  RegisterHold();
  FlowRef f = Add(kHoldFlow, kHoldManifest);
  std::map<ActivationId, int> calls;
  std::map<ActivationId, ActivationResult> results;
  auto done = [&](const ActivationResult& r) {
    ++calls[r.activation_id];
    results[r.activation_id] = r;
  };
  const ActivationId running = *module_->Submit(f, 1, done);
  const ActivationId queued = *module_->Submit(f, 2, done);
  RunUntilHeld(1);
  ASSERT_TRUE(module_->Cancel(queued));
  ASSERT_TRUE(module_->Cancel(running));
  EXPECT_FALSE(module_->Cancel(running)) << "a second cancel finds nothing";
  held_.front().Ok(5);  // a late answer: journaled on the abandoned record, sent nowhere
  module_->RunUntilIdle();
  EXPECT_EQ(calls[running], 1);
  EXPECT_EQ(calls[queued], 1);
  EXPECT_EQ(results[running].outcome, Outcome::kCancelled);
  EXPECT_EQ(results[queued].outcome, Outcome::kCancelled);
  EXPECT_EQ(module_->Health().retired(RetireReason::kCancelled), 1u);
  EXPECT_EQ(module_->Health().workers.live, 0u);
  auto journal = Reader();
  auto rows = journal->Activations(running, 1);
  ASSERT_TRUE(rows);
  EXPECT_EQ((*rows)[0].outcome, "cancelled");
  auto call_rows = journal->Calls(running);
  ASSERT_TRUE(call_rows);
  ASSERT_EQ(call_rows->size(), 1u);
  EXPECT_EQ((*call_rows)[0].state, CallState::kAbandoned);
  EXPECT_EQ((*call_rows)[0].result_json, "5") << "the late answer is journaled, not dropped";
}

TEST_F(HostTest, ShutdownLetsRunningWorkFinishWithinGraceThenCancelsTheRestAndCallsEveryDoneOnce) {
  ModuleOptions o;
  o.max_workers = 1;
  Open(o);
  RegisterHold();
  FlowRef quick = Add("export default (i) => i * 2", "{}", "quick.js");
  FlowRef stuck = Add(kHoldFlow, kHoldManifest, "stuck.js");
  std::vector<ActivationResult> results;
  auto done = [&](const ActivationResult& r) { results.push_back(r); };
  ASSERT_TRUE(module_->Submit(quick, 21, done));
  ASSERT_TRUE(module_->Submit(stuck, 1, done));
  ASSERT_TRUE(module_->Submit(quick, 1, done));  // queued behind the stuck one
  module_->Shutdown(std::chrono::milliseconds(300));
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results[0].outcome, Outcome::kOk);
  EXPECT_EQ(results[0].result, 42);
  EXPECT_EQ(results[1].outcome, Outcome::kCancelled);
  EXPECT_EQ(results[2].outcome, Outcome::kCancelled);
  auto after = module_->Submit(quick, 1, done);
  ASSERT_FALSE(after);
  EXPECT_EQ(after.error().code, ErrorCode::kUnavailable);
  EXPECT_EQ(module_->Health().workers.live, 0u);
}

TEST_F(HostTest, AReplyAnsweredFromAnotherThreadWakesTheLoop) {
  Open();
  HostCallSpec spec;
  spec.name = "async.double";
  spec.effect = Effect::kPure;
  std::vector<std::thread> threads;
  spec.handler = [&threads](const HostCallContext&, const Json& args, HostCallReply reply) {
    threads.emplace_back([n = args.get<int>(), reply = std::move(reply)]() mutable {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      reply.Ok(n * 2);
    });
  };
  ASSERT_TRUE(module_->registry().Register(std::move(spec)));
  FlowRef f = Add(
      "export default async function (n, host) {"
      "  const rs = await Promise.all([1, 2, 3].map(k => host.call('async.double', n + k)));"
      "  return rs;"
      "}",
      R"({"grants": {"async.double": {}}})");
  ActivationResult r = module_->Run(f, 10);
  for (auto& t : threads) t.join();
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.result, Json::parse("[22,24,26]"));
}

TEST_F(HostTest, AnExternalCallIsCommittedAsStartedBeforeItsHandlerRunsAndGetsAnIdempotencyKey) {
  Open();
  std::vector<CallRow> seen_by_handler;
  HostCallSpec spec;
  spec.name = "mail.send";
  spec.effect = Effect::kExternal;
  std::string key;
  spec.handler = [&](const HostCallContext& ctx, const Json&, HostCallReply reply) {
    // Another process reading the journal now must already see the intent.
    auto calls = Reader()->Calls(ctx.activation_id);
    if (calls) seen_by_handler = *calls;
    key = ctx.idempotency_key;
    reply.Ok(Json{{"sent", true}});
  };
  ASSERT_TRUE(module_->registry().Register(std::move(spec)));
  FlowRef f = Add("export default async (i, host) => host.call('mail.send', {to: 'a@example.org'})",
                  R"({"grants": {"mail.send": {}}})");
  ActivationResult r = module_->Run(f, nullptr);
  ASSERT_TRUE(r.ok()) << r.message;
  ASSERT_EQ(seen_by_handler.size(), 1u);
  EXPECT_EQ(seen_by_handler[0].state, CallState::kStarted);
  EXPECT_EQ(seen_by_handler[0].effect, Effect::kExternal);
  EXPECT_EQ(seen_by_handler[0].decision.verdict, Verdict::kAllow);
  EXPECT_EQ(seen_by_handler[0].decision.rule, "grants.mail.send");
  EXPECT_EQ(key, OpenStore()->journal_id() + ":" + std::to_string(r.activation_id) + ":1");
  auto calls = Reader()->Calls(r.activation_id);
  ASSERT_TRUE(calls);
  ASSERT_EQ(calls->size(), 1u);
  EXPECT_EQ((*calls)[0].state, CallState::kAnswered);
  EXPECT_EQ((*calls)[0].result_json, R"({"sent":true})");
}

TEST_F(HostTest, APureCallIsJournaledOnceWithItsAnswerAndJournalViewsRedact) {
  Open();
  HostCallSpec spec;
  spec.name = "secret.get";
  spec.effect = Effect::kPure;
  spec.journal_args = [](const Json& args) { return Json{{"name", args["name"]}, {"token", "[redacted]"}}; };
  spec.journal_result = [](const Json&) { return Json("[redacted]"); };
  spec.handler = [](const HostCallContext&, const Json& args, HostCallReply reply) { reply.Ok("s3cret-" + args["token"].get<std::string>()); };
  ASSERT_TRUE(module_->registry().Register(std::move(spec)));
  FlowRef f = Add("export default async (i, host) => host.call('secret.get', {name: 'db', token: 'tok'})",
                  R"({"grants": {"secret.get": {}}})");
  ActivationResult r = module_->Run(f, nullptr);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.result, "s3cret-tok") << "the flow gets the whole result";
  auto calls = Reader()->Calls(r.activation_id);
  ASSERT_TRUE(calls);
  ASSERT_EQ(calls->size(), 1u);
  EXPECT_EQ((*calls)[0].state, CallState::kAnswered);
  EXPECT_EQ((*calls)[0].effect, Effect::kPure);
  EXPECT_EQ((*calls)[0].args_json, R"({"name":"db","token":"[redacted]"})");
  EXPECT_EQ((*calls)[0].result_json, R"("[redacted]")");
}

TEST_F(HostTest, ADroppedReplyAnswersTheCallWithAHostError) {
  Open();
  HostCallSpec spec;
  spec.name = "forgetful";
  spec.effect = Effect::kPure;
  spec.handler = [](const HostCallContext&, const Json&, HostCallReply) {};  // the reply dies unanswered
  ASSERT_TRUE(module_->registry().Register(std::move(spec)));
  FlowRef f = Add("export default async (i, host) => { try { await host.call('forgetful', 1); } catch (e) { return e.name + ': ' + e.message; } }",
                  R"({"grants": {"forgetful": {}}})");
  ActivationResult r = module_->Run(f, nullptr);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_NE(r.result.get<std::string>().find("HostError: the host call's handler dropped its reply"), std::string::npos);
}

TEST_F(HostTest, RemovingAFlowRetiresItsIdleWorkersAndKeepsWhatRuns) {
  Open();
  FlowRef f = Add("export default () => 7");
  ASSERT_TRUE(module_->Run(f, nullptr).ok());
  EXPECT_EQ(module_->Health().workers.idle, 1u);
  ASSERT_TRUE(module_->RemoveFlow(f));
  EXPECT_FALSE(module_->RemoveFlow(f));
  EXPECT_EQ(module_->Health().workers.live, 0u);
  EXPECT_EQ(module_->Health().retired(RetireReason::kFlowRemoved), 1u);
  EXPECT_EQ(f->name, "t.js") << "the reference stays valid after removal";
}

TEST_F(HostTest, TheObserverHearsWhatTheLibraryUsedToPrint) {
  auto recorder = std::make_shared<Recorder>();
  ModuleOptions o;
  o.observer = recorder;
  Open(o);
  HostCallSpec spec;
  spec.name = "boom";
  spec.effect = Effect::kPure;
  spec.handler = [](const HostCallContext&, const Json&, HostCallReply) { throw std::runtime_error("kaboom"); };
  ASSERT_TRUE(module_->registry().Register(std::move(spec)));
  FlowRef f = Add("export default async (i, host) => { try { await host.call('boom', 1); } catch (e) { return e.name; } }",
                  R"({"grants": {"boom": {}}})");
  ActivationResult r = module_->Run(f, nullptr);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.result, "HostError");
  ASSERT_EQ(recorder->events.size(), 1u);
  EXPECT_EQ(recorder->events[0].kind, ModuleEvent::Kind::kHandlerThrew);
  EXPECT_EQ(recorder->events[0].activation_id, r.activation_id);
  EXPECT_NE(recorder->events[0].message.find("kaboom"), std::string::npos);
}

TEST_F(HostTest, TheLoopCanRunOnAThreadOfItsOwnWhileOthersPostWork) {
  Open();
  FlowRef f = Add("export default (i) => i + 1");
  std::atomic<bool> stop{false};
  std::atomic<int> sum{0}, finished{0};
  std::thread loop([&] {
    while (!stop) module_->RunFor(std::chrono::milliseconds(20));
  });
  for (int i = 0; i < 20; ++i)
    module_->Post([&, i] {
      ASSERT_TRUE(module_->Submit(f, i, [&](const ActivationResult& r) {
        sum += r.result.get<int>();
        ++finished;
      }));
    });
  for (int i = 0; i < 1000 && finished < 20; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  stop = true;
  loop.join();
  EXPECT_EQ(finished, 20);
  EXPECT_EQ(sum, 210);
}

}  // namespace
}  // namespace basal::testing
