// setTimeout, setInterval and their clears in real flows, served by the parent's `timer.sleep`
// (src/worker/js/timers.js, src/parent/host_calls/timer.cpp): order, clearing, argument rules,
// exceptions, and the bounds: 10,000 pending timers within 32 calls in flight, no journal record
// per timer, nothing left behind when an activation ends, the deadline still ends a wait.
#include <gtest/gtest.h>

#include "integration/test_support.h"
#include "parent/host_calls/timer.h"

namespace basal::testing {
namespace {

using Json = nlohmann::json;

class TimersTest : public ModuleFixture {
 protected:
  ActivationResult RunFlow(const std::string& body, const Json& input = nullptr, const std::string& manifest = "{}",
                           Profile profile = Profile::kFlow) {
    auto f = module_->AddFlow("timers.js", "export default async (input, host) => {\n" + body + "\n};", manifest,
                              profile);
    if (!f) {
      ADD_FAILURE() << f.error().message;
      return {};
    }
    return module_->Run(*f, input);
  }
  size_t CallRecords(ActivationId id) {
    auto calls = Reader()->Calls(id);
    EXPECT_TRUE(calls);
    return calls ? calls->size() : 0;
  }
};

TEST_F(TimersTest, TimersFireByDueTimeThenInCreationOrderEachAsATaskOfItsOwn) {
  Open();
  ActivationResult r = RunFlow(R"(
    const order = [];
    await new Promise((resolve) => {
      // 100 ms apart: the order holds unless the worker stalls that long between two lines.
      setTimeout(() => order.push(300), 300);
      setTimeout(() => order.push(100), 100);
      setTimeout(() => order.push(200), 200);
      setTimeout(() => order.push('first 0'), 0);
      setTimeout(() => { order.push('second 0'); Promise.resolve().then(() => order.push('its microtask')); });
      setTimeout(() => order.push('third 0'), -5);
      setTimeout(resolve, 300);  // due after the 300 above: set later
    });
    return order;)");
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.result, Json::parse(R"(["first 0", "second 0", "its microtask", "third 0", 100, 200, 300])"));
}

TEST_F(TimersTest, ArgumentsDelaysIdsAndClearsFollowHtml) {
  Open();
  ActivationResult r = RunFlow(R"(
    const got = {};
    const ids = [];
    await new Promise((resolve) => {
      ids.push(setTimeout((a, b) => { got.args = [a, b]; }, 1, 'x', 2));
      ids.push(setTimeout(function () { got.thisIsGlobal = this === globalThis; }, 1));
      // ToInt32: 2^32 + 1 is 1; NaN and '' are 0; '5' is 5.
      ids.push(setTimeout(() => { got.wrapped = true; }, 2 ** 32 + 1));
      ids.push(setTimeout(() => { got.nan = true; }, NaN));
      ids.push(setTimeout(() => { got.text = true; }, '5'));
      const cleared = setTimeout(() => { got.cleared = 'fired'; }, 1);
      clearTimeout(cleared);
      clearTimeout(cleared);       // twice: nothing
      clearTimeout(123456789);     // unknown: nothing
      clearInterval(undefined);
      let n = 0;
      // The fifth tick comes 5 ms or more after the start: every timer above (5 ms at most) is
      // due before the resolve it sets.
      const every = setInterval(() => {
        n += 1;
        if (n === 5) { clearInterval(every); got.intervals = n; setTimeout(resolve, 1); }
      }, 1);
      ids.push(every);
      // Clearing with the other function works too: they share one list of ids.
      const other = setInterval(() => { got.other = 'fired'; }, 1);
      clearTimeout(other);
    });
    got.idsArePositiveAndDistinct = ids.every((id) => Number.isInteger(id) && id > 0) && new Set(ids).size === ids.length;
    return got;)");
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.result, Json::parse(R"({"args": ["x", 2], "thisIsGlobal": true, "wrapped": true, "nan": true,
                                      "text": true, "intervals": 5, "idsArePositiveAndDistinct": true})"));
}

TEST_F(TimersTest, AStringCallbackAndModuleTopLevelAreRefusedWithATypeError) {
  Open();
  ActivationResult r = RunFlow(R"(
    try { setTimeout('globalThis.x = 1', 1); return 'ran'; } catch (e) { return [e.name, e.message]; })");
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.result[0], "TypeError");
  EXPECT_NE(r.result[1].get<std::string>().find("must be a function"), std::string::npos) << r.result;

  auto f = module_->AddFlow("top.js", "setTimeout(() => {}, 1);\nexport default () => 1;", "{}");
  ASSERT_TRUE(f) << f.error().message;
  ActivationResult top = module_->Run(*f, nullptr);
  EXPECT_EQ(top.outcome, Outcome::kScriptError);
  EXPECT_EQ(top.error_name, "TypeError");
  EXPECT_NE(top.message.find("no activation is running"), std::string::npos) << top.message;
}

TEST_F(TimersTest, AnExceptionInACallbackEndsTheActivationAsAScriptError) {
  Open();
  ActivationResult r = RunFlow(R"(
    setTimeout(() => { throw new RangeError('boom in a timer'); }, 1);
    await new Promise(() => {});  // only the timer's failure can end this)");
  EXPECT_EQ(r.outcome, Outcome::kScriptError);
  EXPECT_EQ(r.error_name, "RangeError");
  EXPECT_EQ(r.message, "RangeError: boom in a timer");
}

TEST_F(TimersTest, TenThousandPendingTimersStayWithinThirtyTwoCallsInFlightAndWriteNoJournalRecord) {
  Open();
  // codemode's calls_in_flight is 32 and its journal 2 MiB; a journal of 16 KiB holds about a hundred
  // call records, and the intervals alone make hundreds of sleeps.
  ActivationResult r = RunFlow(R"(
    let fired = 0;
    await new Promise((resolve) => {
      for (let i = 0; i < 10000; i++) setTimeout(() => { if (++fired === 10000) resolve(); }, i % 50);
    });
    let ticks = 0;
    await new Promise((resolve) => {
      const id = setInterval(() => { if (++ticks === 300) { clearInterval(id); resolve(); } }, 0);
    });
    return [fired, ticks];)",
                               nullptr, R"({"budgets": {"journal_kb": 16}})", Profile::kCodemode);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.result, Json::parse("[10000, 300]"));
  EXPECT_EQ(CallRecords(r.activation_id), 0u);
}

TEST_F(TimersTest, ASoonerTimerSetWhileALaterOneSleepsFiresFirstWithoutPilingUpSleeps) {
  Open();
  // "wake" answers at once: while the script awaits it, the worker has put a sleep in flight for
  // its earliest timer; then the script sets a sooner one. The parent answers the older sleep at
  // once, so 100 rounds never hold more than two of codemode's 32 calls in flight (without that,
  // the 33rd round would end the activation on its calls_in_flight budget), and the activation
  // ends long before the first of these timers (100 s) or its deadline (60 s).
  HostCallSpec wake;
  wake.name = "wake";
  wake.needs_grant = false;
  wake.effect = Effect::kPure;
  wake.handler = [](const HostCallContext&, const Json&, HostCallReply reply) { reply.Ok(nullptr); };
  ASSERT_TRUE(module_->registry().Register(std::move(wake)));
  ActivationResult r = RunFlow(R"(
    const ids = [];
    for (let i = 0; i < 100; i++) {
      ids.push(setTimeout(() => {}, 100000 - i));
      await host.call('wake', {});
    }
    ids.forEach(clearTimeout);
    return await new Promise((resolve) => { setTimeout(() => resolve('later'), 100000); setTimeout(() => resolve('sooner first'), 1); });)",
                               nullptr, "{}", Profile::kCodemode);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.result, "sooner first");
}

TEST_F(TimersTest, PendingTimersDoNotKeepAnActivationAliveNorFireInTheNextOne) {
  ModuleOptions o;
  o.max_workers = 1;
  Open(o);
  auto f = module_->AddFlow("pending.js", R"(
    export default async (input) => {
      if (input === 'arm') {
        setTimeout(() => { globalThis.fired = 'timeout'; }, 20);
        setInterval(() => { globalThis.fired = 'interval'; }, 20);
        setTimeout(() => { globalThis.fired = 'late'; }, 3600 * 1000);
        return 'armed';
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
      return globalThis.fired === undefined ? 'nothing fired' : globalThis.fired;
    };)",
                            R"({"budgets": {"deadline_ms": 30000}})");
  ASSERT_TRUE(f) << f.error().message;
  ActivationResult armed = module_->Run(*f, "arm");
  ASSERT_TRUE(armed.ok()) << armed.message;  // not held by its hour-long timer (the deadline would end it)
  EXPECT_EQ(armed.result, "armed");
  ActivationResult next = module_->Run(*f, "check");
  ASSERT_TRUE(next.ok()) << next.message;
  EXPECT_EQ(next.result, "nothing fired");
  EXPECT_EQ(module_->Health().spawned, 1u) << "both ran on the same worker";
}

TEST_F(TimersTest, TheDeadlineEndsAnActivationThatWaitsOnATimer) {
  Open();
  ActivationResult r = RunFlow("await new Promise((resolve) => setTimeout(resolve, 3600 * 1000)); return 1;", nullptr,
                               R"({"budgets": {"deadline_ms": 300}})");
  EXPECT_EQ(r.outcome, Outcome::kDeadline) << r.message;
}

// HostCallSpec::journaled = false at the gate: no record, before or after the activation ended,
// and no journal budget spent; calls in flight still counted against the budget.
TEST_F(TimersTest, AnUnjournaledCallLeavesNoRecordButStillCountsInFlight) {
  Open();
  std::vector<HostCallReply> held;
  HostCallSpec quiet;
  quiet.name = "quiet.hold";
  quiet.needs_grant = false;
  quiet.effect = Effect::kPure;
  quiet.journaled = false;
  quiet.handler = [&held](const HostCallContext&, const Json&, HostCallReply reply) { held.push_back(std::move(reply)); };
  ASSERT_TRUE(module_->registry().Register(std::move(quiet)));
  HostCallSpec quick;
  quick.name = "quiet.now";
  quick.needs_grant = false;
  quick.effect = Effect::kPure;
  quick.journaled = false;
  quick.handler = [](const HostCallContext&, const Json& args, HostCallReply reply) { reply.Ok(args); };
  ASSERT_TRUE(module_->registry().Register(std::move(quick)));

  // Allowed: answered, nothing journaled, though 2,000 records would pass a 16 KiB journal.
  ActivationResult ok = RunFlow(R"(
    let sum = 0;
    for (let i = 0; i < 2000; i++) sum += (await host.call('quiet.now', { n: 1 })).n;
    return sum;)",
                                nullptr, R"({"budgets": {"journal_kb": 16}})");
  ASSERT_TRUE(ok.ok()) << ok.message;
  EXPECT_EQ(ok.result, 2000);
  EXPECT_EQ(CallRecords(ok.activation_id), 0u);

  // Refused: the 33rd call waiting for an answer passes codemode's calls_in_flight of 32.
  ActivationResult over = RunFlow(R"(
    const all = [];
    for (let i = 0; i < 40; i++) all.push(host.call('quiet.hold', {}));
    await Promise.all(all);)",
                                  nullptr, "{}", Profile::kCodemode);
  EXPECT_EQ(over.outcome, Outcome::kBudgetExhausted) << over.message;
  ASSERT_TRUE(over.budget.has_value());
  EXPECT_EQ(*over.budget, Budget::kCallsInFlight);
  EXPECT_EQ(held.size(), 32u);
  for (HostCallReply& r : held) r.Ok(1);  // late answers of abandoned calls: still no record
  module_->RunFor(std::chrono::milliseconds(50));
  EXPECT_EQ(CallRecords(over.activation_id), 0u);
}

// The parent's side alone: one sleep per activation, none left once the activation ended.
TEST(TimerSleepsTest, HoldsOneSleepPerActivationAndNoneAfterItEnded) {
  auto loop = EventLoop::Create();
  ASSERT_TRUE(loop);
  auto sleeps = std::make_shared<TimerSleeps>(**loop);
  HostCallRegistry registry;
  ASSERT_TRUE(RegisterTimerHostCall(registry, sleeps));
  const HostCallSpec* spec = registry.Find("timer.sleep");
  ASSERT_NE(spec, nullptr);
  EXPECT_FALSE(spec->journaled);
  EXPECT_FALSE(spec->needs_grant);
  auto call = [&](int64_t activation, int64_t id, Json args) {
    HostCallContext ctx;
    ctx.activation_id = activation;
    ctx.call_id = id;
    spec->handler(ctx, args, HostCallReply(nullptr));
  };
  call(1, 1, {{"ms", 3600000}});
  call(1, 2, {{"ms", 3600000}});  // supersedes the first
  call(2, 1, {{"ms", 3600000}});
  EXPECT_EQ(sleeps->held(), 2u);
  call(3, 1, {{"ms", -1}});        // refused: nothing held
  call(3, 2, {{"ms", 2147483648}});
  call(3, 3, {{"ms", 1.5}});
  call(3, 4, Json::array());
  EXPECT_EQ(sleeps->held(), 2u);
  registry.ActivationEnded(1);
  EXPECT_EQ(sleeps->held(), 1u);
  registry.ActivationEnded(2);
  EXPECT_EQ(sleeps->held(), 0u);
  call(4, 1, {{"ms", 0}});
  EXPECT_EQ(sleeps->held(), 1u);
  for (int i = 0; i < 100 && sleeps->held() > 0; ++i) (*loop)->RunOnce(std::chrono::milliseconds(10));
  EXPECT_EQ(sleeps->held(), 0u) << "a sleep that ended is let go";
}

TEST(TimerSleepsTest, OnlyAPureCallMayGoUnjournaled) {
  HostCallRegistry registry;
  HostCallSpec spec;
  spec.name = "x.unjournaled";
  spec.journaled = false;
  spec.effect = Effect::kExternal;
  spec.handler = [](const HostCallContext&, const Json&, HostCallReply reply) { reply.Ok(nullptr); };
  auto r = registry.Register(spec);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("only a pure call may go unjournaled"), std::string::npos) << r.error().message;
  spec.effect = Effect::kPure;
  EXPECT_TRUE(registry.Register(spec));
}

}  // namespace
}  // namespace basal::testing
