// What the worker's own code holds for a script counts against the flow's heap budget, and never
// takes the worker past its address-space limit: frames to and from the parent, host-call
// records, JSON texts of arguments and results, error and console texts. Each flow here once made
// the worker abort with std::bad_alloc (worker_crashed); now it completes, or ends as
// budget_exhausted naming memory with a message that says what did not fit.
//
// The headroom above the heap budget (RLIMIT_AS) is set small, 64 MiB, so that a copy the budget
// does not see would pass the address-space limit. Nothing here depends on the machine's speed.
#include <gtest/gtest.h>

#include <string>

#include "integration/test_support.h"

namespace basal::testing {
namespace {

using Json = nlohmann::json;

class WorkerMemoryTest : public ModuleFixture {
 protected:
  void SetUp() override {
    ModuleFixture::SetUp();
    ModuleOptions o;
    o.flow_memory_headroom_bytes = 64ull << 20;
    Open(o);
    // make({strings: n}) -> n empty strings; make({text: n}) -> a string of n bytes.
    HostCallSpec make;
    make.name = "make";
    make.effect = Effect::kPure;
    make.handler = [](const HostCallContext&, const Json& args, HostCallReply reply) {
      if (args.contains("strings")) return reply.Ok(Json(std::vector<std::string>(args["strings"].get<size_t>())));
      reply.Ok(std::string(args["text"].get<size_t>(), 'x'));
    };
    ASSERT_TRUE(module_->registry().Register(std::move(make)));
    HostCallSpec sink;
    sink.name = "sink";
    sink.effect = Effect::kPure;
    sink.handler = [](const HostCallContext&, const Json& args, HostCallReply reply) { reply.Ok(args["i"]); };
    ASSERT_TRUE(module_->registry().Register(std::move(sink)));
  }

  // No worker died: no crash of any kind, no protocol violation.
  void ExpectNoWorkerDied() {
    const Json h = module_->HealthReport();
    EXPECT_EQ(h["crashes"], Json::object()) << h;
    EXPECT_EQ(h["protocol_violations"], 0) << h;
  }

  std::vector<HostCallReply> held_;  // replies of `hold`, never answered

  void ExpectMemoryExhausted(const ActivationResult& r, const std::string& what) {
    EXPECT_EQ(r.outcome, Outcome::kBudgetExhausted) << r.message;
    EXPECT_EQ(r.budget, Budget::kMemory) << r.message;
    EXPECT_NE(r.message.find(what), std::string::npos) << r.message;
    auto rows = Reader()->Activations(r.activation_id, 1);
    ASSERT_TRUE(rows);
    ASSERT_EQ(rows->size(), 1u);
    EXPECT_EQ((*rows)[0].outcome, "budget_exhausted");
    ExpectNoWorkerDied();
  }
};

constexpr const char* kGrants = R"("grants": {"make": {}, "sink": {}})";

std::string Manifest(int heap_mb, const std::string& more = "") {
  return std::string("{") + kGrants + R"(, "budgets": {"heap_mb": )" + std::to_string(heap_mb) + more + "}}";
}

// 64 console lines of 1 MiB, none awaited, in one synchronous loop: eight times the heap budget.
// The worker used to queue every frame until the script yielded; now a frame goes out as soon as
// it is queued, and the worker holds about one at a time.
TEST_F(WorkerMemoryTest, AFloodOfUnawaitedConsoleLinesLargerThanTheBudgetIsSentNotQueued) {
  FlowRef f = Add(
      "export default function () {"
      "  const line = 'x'.repeat(1 << 20);"
      "  for (let i = 0; i < 64; i++) console.log(line);"
      "  return 'logged';"
      "}",
      Manifest(8));
  ActivationResult r = module_->Run(f, nullptr);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.result, "logged");
  ExpectNoWorkerDied();
}

// The allowed path: 3,000 unawaited host calls, more than the worker lets go unanswered (1,025),
// so the script is paced by the parent's answers; every call completes, in order, and is journaled.
TEST_F(WorkerMemoryTest, UnawaitedCallsWellUnderTheBudgetAllComplete) {
  FlowRef f = Add(
      "export default async function (input, host) {"
      "  const pad = 'p'.repeat(256);"
      "  const calls = [];"
      "  for (let i = 0; i < 3000; i++) calls.push(host.call('sink', {i, pad}));"
      "  const got = await Promise.all(calls);"
      "  return got.every((v, i) => v === i) ? got.length : 'out of order';"
      "}",
      Manifest(16, R"(, "calls_in_flight": 1024, "journal_kb": 16384)"));
  ActivationResult r = module_->Run(f, nullptr);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.result, 3000);
  auto calls = Reader()->Calls(r.activation_id);
  ASSERT_TRUE(calls);
  ASSERT_EQ(calls->size(), 3000u);
  for (const auto& c : *calls) EXPECT_EQ(c.state, CallState::kAnswered) << c.call_id;
  ExpectNoWorkerDied();
}

// A handler that answers nothing while the script keeps calling, at the largest calls_in_flight
// budget: the worker's wait for an answer begins only past that budget, so the parent sees the
// call that breaks it and ends the activation on it (no deadlock until the deadline).
TEST_F(WorkerMemoryTest, UnansweredCallsPastTheLargestCallsInFlightBudgetEndOnThatBudget) {
  HostCallSpec hold;
  hold.name = "hold";
  hold.effect = Effect::kPure;
  hold.handler = [this](const HostCallContext&, const Json&, HostCallReply reply) { held_.push_back(std::move(reply)); };
  ASSERT_TRUE(module_->registry().Register(std::move(hold)));
  FlowRef f = Add(
      "export default async function (input, host) {"
      "  for (let i = 0; i < 1100; i++) host.call('hold', {}).catch(() => {});"
      "  return 'sent';"
      "}",
      R"({"grants": {"hold": {}}, "budgets": {"calls_in_flight": 1024, "deadline_ms": 30000}})");
  ActivationResult r = module_->Run(f, nullptr);
  EXPECT_EQ(r.outcome, Outcome::kBudgetExhausted) << r.message;
  EXPECT_EQ(r.budget, Budget::kCallsInFlight) << r.message;
  EXPECT_EQ(held_.size(), 1024u);
  ExpectNoWorkerDied();
}

// A result of half a million empty strings (the most values a message field holds,
// protocol::kMaxFieldValues, is a little more) is 1.5 MB of JSON; as a parsed tree it was about
// 35 MB, twice (the message, then its copy), outside the budget. Now its text goes straight into
// the JavaScript heap (8 MB here).
TEST_F(WorkerMemoryTest, ALargeHostCallResultIsParsedIntoTheBudgetedHeapOnly) {
  FlowRef f = Add(
      "export default async function (input, host) {"
      "  const got = await host.call('make', {strings: 500000});"
      "  return got.length;"
      "}",
      Manifest(24));
  ActivationResult r = module_->Run(f, nullptr);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.result, 500000);
  ExpectNoWorkerDied();
}

// An error message of 48 MiB used to be copied whole, twice, before it was cut to 64 KiB.
TEST_F(WorkerMemoryTest, AHugeErrorMessageIsCutWhileItIsCopied) {
  FlowRef f = Add("export default function () { throw new Error('z'.repeat(48 << 20)); }", Manifest(64));
  ActivationResult r = module_->Run(f, nullptr);
  EXPECT_EQ(r.outcome, Outcome::kScriptError) << r.message;
  EXPECT_LT(r.message.size(), 70'000u);
  EXPECT_NE(r.message.find(std::to_string((48u << 20) - 64 * 1024) + " bytes cut]"), std::string::npos);
  ExpectNoWorkerDied();
}

// console.log of twenty 8 MiB arguments used to join them (160 MiB) before cutting to 1 MiB.
TEST_F(WorkerMemoryTest, AConsoleLineOfManyLargeArgumentsIsCutWhileItIsBuilt) {
  FlowRef f = Add(
      "export default function () {"
      "  const s = 'q'.repeat(8 << 20);"
      "  console.log(...Array(20).fill(s));"
      "  return 'logged';"
      "}",
      Manifest(64, R"(, "log_kb": 2048, "journal_kb": 8192)"));
  ActivationResult r = module_->Run(f, nullptr);
  ASSERT_TRUE(r.ok()) << r.message;
  auto calls = Reader()->Calls(r.activation_id);
  ASSERT_TRUE(calls);
  ASSERT_EQ(calls->size(), 1u);
  EXPECT_EQ((*calls)[0].name, "log");
  ExpectNoWorkerDied();
}

// Half a million one-character strings (just under protocol::kMaxFieldValues) and their 4.3 MiB of
// JSON (each is written "\u0001") take 15.2 MiB of heap: they fit in 17 MiB, but not a third copy,
// the call's frame to the parent.
TEST_F(WorkerMemoryTest, AHostCallWhoseMessageDoesNotFitTheBudgetEndsOnMemory) {
  FlowRef f = Add(
      "export default async function (input, host) {"
      "  await host.call('sink', {i: 1, pad: new Array(500000).fill('\\x01')});"
      "  return 'sent';"
      "}",
      Manifest(17));
  ActivationResult r = module_->Run(f, nullptr);
  ExpectMemoryExhausted(r, "heap budget of 17 MiB exhausted: a host call's message to the parent of 4.3 MiB did "
                           "not fit beside ");
}

// The answer's 10 MiB text is held by the worker while the engine parses it into the heap, which
// already holds 20 MiB: both together do not fit in 32 MiB. The script sees the engine's
// out-of-memory error in the call's rejection; uncaught, the activation ends on its memory budget.
TEST_F(WorkerMemoryTest, AHostCallResultThatDoesNotFitTheBudgetEndsOnMemory) {
  const std::string body =
      "let keep; export default async function (input, host) {"
      "  keep = 'k'.repeat(20 << 20);"
      "  try { await host.call('make', {text: 10 << 20}); }"
      "  catch (e) { if (input.rethrow) throw e; return input.plain ? 7 : String(e); }"
      "  return 'fitted';"
      "}";
  FlowRef f = Add(body, Manifest(32, R"(, "journal_kb": 65536)"));
  ActivationResult thrown = module_->Run(f, {{"rethrow", true}});
  ExpectMemoryExhausted(thrown, "a host call's result of 10.0 MiB did not fit beside ");
  // Caught, it is a refusal like any other: the activation completes and is counted.
  ActivationResult caught = module_->Run(f, {{"rethrow", false}});
  ASSERT_TRUE(caught.ok()) << caught.message;
  EXPECT_EQ(caught.result, "InternalError: out of memory");
  EXPECT_EQ(module_->HealthReport()["caught_budget_failures"], 1);
  // A plain result (an integer, sent without JSON.stringify) carries the caught refusal too.
  // (Another flow's worker: this one's module still keeps its 20 MiB.)
  FlowRef g = Add(body, Manifest(32, R"(, "journal_kb": 65536)"), "plain.js");
  ActivationResult plain = module_->Run(g, {{"rethrow", false}, {"plain", true}});
  ASSERT_TRUE(plain.ok()) << plain.message;
  EXPECT_EQ(plain.result, 7);
  EXPECT_EQ(module_->HealthReport()["caught_budget_failures"], 2);
  ExpectNoWorkerDied();
}

// The same 4.3 MiB of JSON as an activation's result: it fits in the heap beside the value, but
// not its copy in the `done` frame.
TEST_F(WorkerMemoryTest, AnActivationResultThatDoesNotFitTheBudgetEndsOnMemory) {
  FlowRef f = Add("export default function () { return new Array(500000).fill('\\x01'); }", Manifest(17));
  ActivationResult r = module_->Run(f, nullptr);
  ExpectMemoryExhausted(r, "heap budget of 17 MiB exhausted: the activation's result of 4.3 MiB did not fit beside ");
}

}  // namespace
}  // namespace basal::testing
