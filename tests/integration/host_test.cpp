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

// The worker writes arguments that JSON.stringify would write without looking at anything (none,
// null, a boolean, an integer) itself, and the parent reads plain ones without its parser: each
// reaches the handler, the journal and the answer exactly as JSON.stringify would have written it,
// beside values that take the general paths. The handler gets the grant that admitted the call
// and a key that names the call.
TEST_F(HostTest, EveryKindOfArgumentsReachesTheHandlerAndTheJournalAsJsonStringifyWritesIt) {
  Open();
  std::vector<Json> seen;
  std::vector<HostCallContext> contexts;
  HostCallSpec spec;
  spec.name = "echo.args";
  spec.effect = Effect::kPure;
  spec.check_grant = [](const Json&, const std::string&) -> Result<void> { return Ok(); };
  spec.handler = [&](const HostCallContext& ctx, const Json& args, HostCallReply reply) {
    seen.push_back(args);
    contexts.push_back(ctx);
    reply.Ok(args);
  };
  ASSERT_TRUE(module_->registry().Register(std::move(spec)));
  FlowRef f = Add(
      "export default async (i, host) => {"
      "  const values = [undefined, null, true, false, 0, 7, -7, 2147483647, -2147483648, 2147483648, -0, 1.5,"
      "                  'x', {a: 1}, [1, null]];"
      "  const back = [];"
      "  back.push(await host.call('echo.args'));"
      "  for (const v of values) back.push(await host.call('echo.args', v));"
      "  return back;"
      "}",
      R"({"grants": {"echo.args": {"limit": 3}}})");
  ActivationResult r = module_->Run(f, nullptr);
  ASSERT_TRUE(r.ok()) << r.message;
  const Json want = Json::parse(
      R"([null, null, null, true, false, 0, 7, -7, 2147483647, -2147483648, 2147483648, 0, 1.5, "x", {"a": 1}, [1, null]])");
  ASSERT_EQ(seen.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(seen[i], want[i]) << "call " << i + 1;
  EXPECT_EQ(r.result, want) << "each answer came back as it went";
  auto calls = Reader()->Calls(r.activation_id);
  ASSERT_TRUE(calls);
  ASSERT_EQ(calls->size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ((*calls)[i].args_json, want[i].dump()) << "call " << i + 1;
    EXPECT_EQ((*calls)[i].decision.rule, "grants.echo.args");
    EXPECT_EQ((*calls)[i].decision.reason, "granted by manifest");
  }
  ASSERT_EQ(contexts.size(), want.size());
  ASSERT_NE(contexts[0].grant, nullptr);
  EXPECT_EQ(*contexts[0].grant, Json::parse(R"({"limit": 3})"));
  EXPECT_EQ(contexts[0].name, "echo.args");
  // An activation's input is read by the same path as an answer's value.
  FlowRef echo = Add("export default (i) => [i, typeof i, Object.is(i, -0)]");
  for (const char* input : {"null", "true", "false", "0", "5", "-5", "999999999", "-999999999", "1000000000", "0.5", "-0.0", "\"s\"", "[0]"}) {
    ActivationResult e = module_->Run(echo, Json::parse(input));
    ASSERT_TRUE(e.ok()) << input << ": " << e.message;
    const Json in = Json::parse(input);
    EXPECT_EQ(e.result[0], in) << input;
    EXPECT_EQ(e.result[1], in.is_null() || in.is_array() ? "object" : in.is_boolean() ? "boolean" : in.is_string() ? "string" : "number") << input;
    EXPECT_EQ(e.result[2], std::string(input) == "-0.0") << input;
  }
  const std::string key = contexts[2].idempotency_key;
  const std::string tail = ":" + std::to_string(r.activation_id) + ":3";
  ASSERT_GT(key.size(), tail.size());
  EXPECT_EQ(key.substr(key.size() - tail.size()), tail) << key;
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

// HostCallReply::OkText: the handler's bytes are what the worker gets and what the journal keeps,
// with nothing serialized again. The text's member order and spacing-free form would not survive a
// tree (nlohmann sorts members): the flow's JSON.stringify of what it got shows it got these bytes.
TEST_F(HostTest, AnAnswerGivenAsTextIsSentAndJournaledAsTheSameBytes) {
  Open();
  const std::string utf8 = "{\"zeta\":1,\"alpha\":[true,null,\"caf\xC3\xA9\"],\"mid\":{\"y\":2.5,\"b\":-3}}";
  std::vector<std::thread> threads;
  for (const bool external : {false, true}) {
    HostCallSpec spec;
    spec.name = external ? "text.external" : "text.pure";
    spec.effect = external ? Effect::kExternal : Effect::kPure;
    spec.handler = [utf8, external, &threads](const HostCallContext&, const Json&, HostCallReply reply) {
      if (!external) return reply.OkText(utf8);
      // From another thread: the text is posted to the loop as it is.
      threads.emplace_back([utf8, r = std::move(reply)]() mutable { r.OkText(utf8); });
    };
    ASSERT_TRUE(module_->registry().Register(std::move(spec)));
  }
  FlowRef f = Add("export default async (i, host) => [JSON.stringify(await host.call('text.pure', null)),"
                  " JSON.stringify(await host.call('text.external', null))]",
                  R"({"grants": {"text.pure": {}, "text.external": {}}})");
  ActivationResult r = module_->Run(f, nullptr);
  for (auto& t : threads) t.join();
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.result, Json::array({utf8, utf8})) << "the flow got the handler's bytes, members in its order";
  auto calls = Reader()->Calls(r.activation_id);
  ASSERT_TRUE(calls);
  ASSERT_EQ(calls->size(), 2u);
  for (const auto& call : *calls) {
    EXPECT_EQ(call.state, CallState::kAnswered) << call.name;
    EXPECT_EQ(call.result_json, utf8) << call.name << ": the journal keeps the bytes the worker got";
  }
}

TEST_F(HostTest, AnAnswerGivenAsTextThatIsNotJsonIsRefusedNeverJournaledOrSent) {
  auto recorder = std::make_shared<Recorder>();
  ModuleOptions o;
  o.observer = recorder;
  Open(o);
  // Each is refused before the worker or the journal sees it; the worker would read the first
  // ones as a broken frame, and the journal would hold text that is not JSON.
  const std::vector<std::string> bad = {"", "{\"a\":", "{\"a\":1} x", "[1,]", "\"\xFF\"", "{'a':1}", "NaN",
                                        "\xEF\xBB\xBF" "1", std::string("\"a\0b\"", 5)};
  auto next = std::make_shared<size_t>(0);
  HostCallSpec spec;
  spec.name = "bad.text";
  spec.effect = Effect::kExternal;
  spec.handler = [bad, next](const HostCallContext&, const Json&, HostCallReply reply) { reply.OkText(bad[(*next)++]); };
  ASSERT_TRUE(module_->registry().Register(std::move(spec)));
  FlowRef f = Add("export default async (i, host) => { const out = [];"
                  " for (let k = 0; k < i; k++) { try { await host.call('bad.text', k); out.push('answered'); }"
                  " catch (e) { out.push(e.name + ': ' + e.message); } } return out; }",
                  R"({"grants": {"bad.text": {}}})");
  ActivationResult r = module_->Run(f, Json(bad.size()));
  ASSERT_TRUE(r.ok()) << r.message;
  ASSERT_EQ(r.result.size(), bad.size());
  for (size_t k = 0; k < bad.size(); ++k) {
    EXPECT_EQ(r.result[k],
              "HostError: the result of host call \"bad.text\" is not JSON: its handler answered with a text "
              "(HostCallReply::OkText) that is not one JSON value")
        << "text " << k;
  }
  auto calls = Reader()->Calls(r.activation_id);
  ASSERT_TRUE(calls);
  ASSERT_EQ(calls->size(), bad.size());
  for (const auto& call : *calls) {
    EXPECT_EQ(call.state, CallState::kAnswered);
    EXPECT_EQ(call.result_json, "");
    EXPECT_EQ(Json::parse(call.error_json)["name"], "HostError") << call.error_json;
  }
  ASSERT_EQ(recorder->events.size(), bad.size());
  for (const auto& e : recorder->events) {
    EXPECT_EQ(e.kind, ModuleEvent::Kind::kResultNotJson);
    EXPECT_EQ(e.activation_id, r.activation_id);
  }
  EXPECT_STREQ(ModuleEventKindName(ModuleEvent::Kind::kResultNotJson), "result_not_json");
  // The worker was never sent the text: it runs the next activation.
  FlowRef g = Add("export default () => 7");
  EXPECT_EQ(module_->Run(g, nullptr).result, 7);
}

TEST_F(HostTest, TheJournalViewOfAResultMayReadItsText) {
  Open();
  HostCallSpec text_view;
  text_view.name = "view.text";
  text_view.effect = Effect::kPure;
  text_view.journal_result_text = [](std::string_view result) {
    return "{\"bytes\":" + std::to_string(result.size()) + "}";
  };
  text_view.handler = [](const HostCallContext&, const Json&, HostCallReply reply) { reply.OkText(R"({"token":"s3cret"})"); };
  ASSERT_TRUE(module_->registry().Register(std::move(text_view)));
  // A tree's answer, read as the text the worker gets (dumped once).
  HostCallSpec tree_answer;
  tree_answer.name = "view.tree-answer";
  tree_answer.effect = Effect::kPure;
  tree_answer.journal_result_text = [](std::string_view result) { return "[" + std::string(result) + "]"; };
  tree_answer.handler = [](const HostCallContext&, const Json&, HostCallReply reply) { reply.Ok({{"b", 1}, {"a", 2}}); };
  ASSERT_TRUE(module_->registry().Register(std::move(tree_answer)));
  // A view that reads a tree, of an answer given as text: parsed for it.
  HostCallSpec tree_view;
  tree_view.name = "view.tree";
  tree_view.effect = Effect::kPure;
  tree_view.journal_result = [](const Json& result) { return Json{{"kept", result["keep"]}}; };
  tree_view.handler = [](const HostCallContext&, const Json&, HostCallReply reply) {
    reply.OkText(R"({"keep":1,"token":"s3cret"})");
  };
  ASSERT_TRUE(module_->registry().Register(std::move(tree_view)));
  // A view whose text is not JSON: a note, never that text.
  HostCallSpec broken;
  broken.name = "view.broken";
  broken.effect = Effect::kPure;
  broken.journal_result_text = [](std::string_view) { return std::string("{not json"); };
  broken.handler = [](const HostCallContext&, const Json&, HostCallReply reply) { reply.OkText("1"); };
  ASSERT_TRUE(module_->registry().Register(std::move(broken)));
  FlowRef f = Add("export default async (i, host) => [await host.call('view.text', null), await host.call('view.tree-answer', null),"
                  " await host.call('view.tree', null), await host.call('view.broken', null)]",
                  R"({"grants": {"view.text": {}, "view.tree-answer": {}, "view.tree": {}, "view.broken": {}}})");
  ActivationResult r = module_->Run(f, nullptr);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.result, Json::parse(R"([{"token":"s3cret"},{"a":2,"b":1},{"keep":1,"token":"s3cret"},1])"))
      << "the flow gets the whole results";
  auto calls = Reader()->Calls(r.activation_id);
  ASSERT_TRUE(calls);
  ASSERT_EQ(calls->size(), 4u);
  EXPECT_EQ((*calls)[0].result_json, R"({"bytes":18})");
  EXPECT_EQ((*calls)[1].result_json, R"([{"a":2,"b":1}])");
  EXPECT_EQ((*calls)[2].result_json, R"({"kept":1})");
  EXPECT_EQ((*calls)[3].result_json,
            R"({"basal":"the journal view of the result (journal_result_text) is not JSON; result not journaled"})");
}

TEST_F(HostTest, ASpecWithBothJournalViewsOfAResultIsRefused) {
  Open();
  HostCallSpec spec;
  spec.name = "two.views";
  spec.journal_result = [](const Json& result) { return result; };
  spec.journal_result_text = [](std::string_view result) { return std::string(result); };
  spec.handler = [](const HostCallContext&, const Json&, HostCallReply reply) { reply.Ok(1); };
  auto registered = module_->registry().Register(std::move(spec));
  ASSERT_FALSE(registered);
  EXPECT_NE(registered.error().message.find("sets both journal_result and journal_result_text"), std::string::npos)
      << registered.error().message;
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
