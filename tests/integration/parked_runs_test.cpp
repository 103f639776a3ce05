// Parked durable runs (docs/durable.md: sleep, waitForEvent, retries) on a real module with real
// confined workers, driven from the module's host side as basal serve drives it: a run parks, the
// test wakes it by handing WakeDueRuns the time it is due (the test's clock, not the machine's), or
// sends it an event, and the run resumes by replay in a new worker. Every bound of ModuleOptions on
// parked runs and events is hit here, with its error; basal serve's end-to-end view is
// tests/serve/parked_test.py.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "integration/test_support.h"
#include "parent/module_host.h"
#include "parent/store/store.h"

namespace basal::testing {
namespace {

using Json = nlohmann::json;

int64_t NowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

class ParkedRunsTest : public ModuleFixture {
 protected:
  ModuleHost& Host() { return module_->host(); }

  // Starts a run of `flow` and drives the loop until its first activation ends (parked or not).
  int64_t Start(const FlowRef& flow, Json input = Json::object()) {
    std::optional<ActivationResult> told;
    auto id = module_->Submit(flow, std::move(input), [&](const ActivationResult& r) { told = r; });
    EXPECT_TRUE(id) << (id ? "" : id.error().message);
    if (!id) return 0;
    module_->RunUntilIdle();
    EXPECT_TRUE(told.has_value());
    if (told) first_[*id] = *told;
    return *id;
  }

  RunRow Row(int64_t run) {
    auto r = Host().runs().GetRun(run);
    EXPECT_TRUE(r && *r) << "run " << run;
    return r && *r ? **r : RunRow{};
  }

  // Wakes what is due at `now_us` (the test's clock) and drives the loop until the woken runs ended
  // or parked again; their stops land in stops_.
  size_t WakeAt(int64_t now_us) {
    auto woke = Host().WakeDueRuns(now_us, 100, [this](const RunRow&) {
      return [this](const RunStop& s) { stops_[s.run_id] = s; };
    });
    EXPECT_TRUE(woke) << (woke ? "" : woke.error().message);
    module_->RunUntilIdle();
    return woke ? *woke : 0;
  }

  Result<ModuleHost::EventSent> Send(int64_t run, const std::string& name, const std::string& payload) {
    NewRunEvent e;
    e.run_id = run;
    e.name = name;
    e.payload_json = payload;
    e.sender = "test";
    auto sent = Host().SendEvent(std::move(e), RunCallback([this](const RunStop& s) { stops_[s.run_id] = s; }));
    module_->RunUntilIdle();
    return sent;
  }

  size_t Pending(int64_t run) {
    auto n = Host().runs().CountPendingEvents(run);
    EXPECT_TRUE(n) << (n ? "" : n.error().message);
    return n ? *n : 0;
  }

  std::map<int64_t, ActivationResult> first_;  // each run's first activation, as Submit's done told it
  std::map<int64_t, RunStop> stops_;           // the runs woken since, as they stopped
};

// A durable flow that sleeps `ms` and then returns what the sleep returned.
std::string Sleeper(int64_t ms) {
  return "export default async () => { const r = await sleep(" + std::to_string(ms) + "); return {slept: r === undefined}; };";
}
constexpr const char* kDurable = R"({"durable": true})";

size_t Parked(ModuleHost& host, std::string_view flow = "") {
  auto n = host.runs().CountParked(flow);
  EXPECT_TRUE(n) << (n ? "" : n.error().message);
  return n ? *n : 0;
}

TEST_F(ParkedRunsTest, ASleepUpToParkAfterStaysInItsActivation) {
  ModuleOptions o;
  o.park_after = std::chrono::milliseconds(1000);
  Open(o);
  const int64_t run = Start(Add(Sleeper(20), kDurable));
  ASSERT_TRUE(first_[run].ok()) << first_[run].message;
  EXPECT_EQ(first_[run].result, (Json{{"slept", true}}));
  const RunRow row = Row(run);
  EXPECT_EQ(row.state, RunState::kEnded);
  EXPECT_EQ(row.outcome, "ok");
  EXPECT_EQ(Parked(Host()), 0u) << "it never parked";
  EXPECT_EQ(module_->Health().activations_parked, 0u);
}

TEST_F(ParkedRunsTest, ASleepPastParkAfterParksItsRunLetsItsWorkerGoAndWakesAtItsTime) {
  Open();
  const int64_t before = NowUs();
  const int64_t run = Start(Add(Sleeper(5000), kDurable));
  const int64_t after = NowUs();
  EXPECT_EQ(first_[run].outcome, Outcome::kParked) << first_[run].message;
  EXPECT_NE(first_[run].message.find("sleeps until"), std::string::npos) << first_[run].message;
  RunRow row = Row(run);
  EXPECT_EQ(row.state, RunState::kSleeping);
  ASSERT_TRUE(row.wake_unix_us.has_value());
  // The run's clock at the call plus 5 s.
  EXPECT_GE(*row.wake_unix_us, before + 5'000'000);
  EXPECT_LE(*row.wake_unix_us, after + 5'000'000);
  EXPECT_EQ(module_->Health().workers.busy, 0u) << "a sleeping run holds no worker";
  EXPECT_EQ(module_->Health().activations_parked, 1u);
  EXPECT_EQ(Parked(Host()), 1u);

  EXPECT_EQ(WakeAt(*row.wake_unix_us - 1), 0u) << "not before its time";
  EXPECT_EQ(Row(run).state, RunState::kSleeping);
  EXPECT_EQ(WakeAt(*row.wake_unix_us), 1u);
  ASSERT_TRUE(stops_.count(run));
  EXPECT_TRUE(stops_[run].result.ok()) << stops_[run].result.message;
  EXPECT_EQ(stops_[run].result.result, (Json{{"slept", true}})) << "the sleep resolved with undefined, by replay";
  row = Row(run);
  EXPECT_EQ(row.state, RunState::kEnded);
  EXPECT_EQ(row.outcome, "ok");
  EXPECT_FALSE(row.wake_unix_us.has_value());
  EXPECT_EQ(Parked(Host()), 0u);
  auto activations = Reader()->RunActivations(run);
  ASSERT_TRUE(activations);
  EXPECT_EQ(activations->size(), 2u) << "the first parked, the second resumed by replay";
}

// park_after is the longest sleep that stays in its activation: one millisecond more parks.
TEST_F(ParkedRunsTest, ParkAfterIsTheLongestSleepThatDoesNotPark) {
  ModuleOptions o;
  o.park_after = std::chrono::milliseconds(100);
  Open(o);
  const int64_t stays = Start(Add(Sleeper(100), kDurable, "stays.js"));
  ASSERT_TRUE(first_[stays].ok()) << first_[stays].message;
  EXPECT_EQ(Row(stays).outcome, "ok");
  const int64_t parks = Start(Add(Sleeper(101), kDurable, "parks.js"));
  EXPECT_EQ(first_[parks].outcome, Outcome::kParked) << first_[parks].message;
  EXPECT_EQ(Row(parks).state, RunState::kSleeping);
}

TEST_F(ParkedRunsTest, ASleepPast365DaysIsRefusedByTheScriptAndByTheParent) {
  Open();
  const FlowRef flow = Add(R"(export default async (input, host) => {
    const out = [];
    try { await sleep(31536000001); } catch (e) { out.push(e.name + ": " + e.message); }
    // A worker that skips the script's check meets the parent's.
    try { await host.call('run.sleep', {ms: 31536000001}); } catch (e) { out.push(e.name + ": " + e.message); }
    try { await host.call('run.sleep', {ms: -1}); } catch (e) { out.push(e.name + ": " + e.message); }
    return out;
  };)", kDurable);
  const int64_t run = Start(flow);
  ASSERT_TRUE(first_[run].ok()) << first_[run].message;
  EXPECT_EQ(first_[run].result,
            (Json{"RangeError: sleep(ms): ms must be a number of milliseconds from 0 to 31536000000 (365 days)",
                  "RangeError: sleep(ms): ms must be a number of milliseconds from 0 to 31536000000 (365 days)",
                  "RangeError: sleep(ms): ms must be a number of milliseconds from 0 to 31536000000 (365 days)"}));
  // Exactly 365 days is allowed: it parks.
  const int64_t year = Start(Add(Sleeper(31536000000), kDurable, "year.js"));
  EXPECT_EQ(first_[year].outcome, Outcome::kParked) << first_[year].message;
  EXPECT_EQ(Row(year).state, RunState::kSleeping);
}

TEST_F(ParkedRunsTest, SleepAndWaitForEventNeedADurableFlow) {
  Open();
  ActivationResult r = module_->Run(Add(R"(export default async () => {
    const out = [];
    for (const f of [() => sleep(5000), () => waitForEvent('x'), () => step('s', () => 1)]) {
      try { await f(); } catch (e) { out.push(e.name); }
    }
    return out;
  };)"), Json::object());
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.result, (Json{"TypeError", "TypeError", "TypeError"}));
}

TEST_F(ParkedRunsTest, AWaitThatTimesOutThrowsATimeoutErrorTheScriptCatches) {
  Open();
  const FlowRef flow = Add(R"(export default async () => {
    try { await waitForEvent('approved', {timeoutMs: 5000}); return 'approved'; }
    catch (e) { return {name: e.name, message: e.message}; }
  };)", kDurable);
  const int64_t before = NowUs();
  const int64_t run = Start(flow);
  const int64_t after = NowUs();
  EXPECT_EQ(first_[run].outcome, Outcome::kParked) << first_[run].message;
  RunRow row = Row(run);
  EXPECT_EQ(row.state, RunState::kWaiting);
  EXPECT_EQ(row.waiting_for, "approved");
  ASSERT_TRUE(row.wake_unix_us.has_value());
  EXPECT_GE(*row.wake_unix_us, before + 5'000'000);
  EXPECT_LE(*row.wake_unix_us, after + 5'000'000);
  EXPECT_EQ(WakeAt(*row.wake_unix_us), 1u);
  ASSERT_TRUE(stops_.count(run));
  ASSERT_TRUE(stops_[run].result.ok()) << stops_[run].result.message;
  EXPECT_EQ(stops_[run].result.result,
            (Json{{"name", "TimeoutError"}, {"message", "waitForEvent(\"approved\"): no event within 5000 ms"}}));

  // timeoutMs 0 with nothing kept: at once, without parking.
  const int64_t now = Start(Add(R"(export default async () => {
    try { await waitForEvent('approved', {timeoutMs: 0}); return 'approved'; }
    catch (e) { return {name: e.name, message: e.message}; }
  };)", kDurable, "zero.js"));
  ASSERT_TRUE(first_[now].ok()) << first_[now].message;
  EXPECT_EQ(first_[now].result,
            (Json{{"name", "TimeoutError"}, {"message", "waitForEvent(\"approved\"): no event (timeoutMs 0)"}}));
}

// The approval flow: it waits, the event arrives, the run continues with its payload and sender.
TEST_F(ParkedRunsTest, AnEventIsDeliveredToTheRunThatWaitsForIt) {
  Open();
  const FlowRef flow = Add(R"(export default async () => {
    const e = await waitForEvent('approved');
    return {name: e.name, data: e.data, sender: e.sender};
  };)", kDurable);
  const int64_t run = Start(flow);
  EXPECT_EQ(Row(run).state, RunState::kWaiting);
  auto other = Send(run, "rejected", R"({"by": "bob"})");
  ASSERT_TRUE(other) << other.error().message;
  EXPECT_EQ(other->delivered_to, 0) << "another name is kept, not delivered";
  EXPECT_EQ(Row(run).state, RunState::kWaiting);
  auto sent = Send(run, "approved", R"({"by": "ann", "note": "ship it"})");
  ASSERT_TRUE(sent) << sent.error().message;
  EXPECT_EQ(sent->delivered_to, run);
  EXPECT_GT(sent->event_id, 0);
  ASSERT_TRUE(stops_.count(run));
  ASSERT_TRUE(stops_[run].result.ok()) << stops_[run].result.message;
  EXPECT_EQ(stops_[run].result.result,
            (Json{{"name", "approved"}, {"data", {{"by", "ann"}, {"note", "ship it"}}}, {"sender", "test"}}));
  EXPECT_EQ(Row(run).outcome, "ok");
  EXPECT_EQ(Pending(run), 1u) << "the rejected one is still kept";
  // Sent to an ended run: refused, saying so.
  auto late = Send(run, "approved", "{}");
  ASSERT_FALSE(late);
  EXPECT_EQ(late.error().code, ErrorCode::kConflict);
  EXPECT_EQ(late.error().message, "run " + std::to_string(run) + " has ended (ok): it waits for no event");
  auto nowhere = Send(run + 1000, "approved", "{}");
  ASSERT_FALSE(nowhere);
  EXPECT_EQ(nowhere.error().code, ErrorCode::kNotFound);
}

// An event that arrives before the run waits is kept for it.
TEST_F(ParkedRunsTest, AnEventThatArrivesFirstIsKeptForTheRunsWait) {
  Open();
  const FlowRef flow = Add(R"(export default async () => {
    await sleep(5000);
    const e = await waitForEvent('approved', {timeoutMs: 0});
    return e.data;
  };)", kDurable);
  const int64_t run = Start(flow);
  const RunRow row = Row(run);
  ASSERT_EQ(row.state, RunState::kSleeping);
  auto sent = Send(run, "approved", R"({"by": "ann"})");
  ASSERT_TRUE(sent) << sent.error().message;
  EXPECT_EQ(sent->delivered_to, 0);
  EXPECT_EQ(Pending(run), 1u);
  EXPECT_EQ(Row(run).state, RunState::kSleeping) << "an event does not wake a sleep";
  EXPECT_EQ(WakeAt(*row.wake_unix_us), 1u);
  ASSERT_TRUE(stops_.count(run));
  ASSERT_TRUE(stops_[run].result.ok()) << stops_[run].result.message;
  EXPECT_EQ(stops_[run].result.result, (Json{{"by", "ann"}}));
  EXPECT_EQ(Pending(run), 0u) << "delivered once";
}

// A webhook's event names a flow and a key; the run that waits with that key gets it.
TEST_F(ParkedRunsTest, AKeyedEventGoesToTheRunWaitingWithItsKey) {
  Open();
  const FlowRef flow = Add(R"(export default async (input) => {
    const e = await waitForEvent('paid', {key: input.order});
    return e.data;
  };)", kDurable, "orders");
  const int64_t a = Start(flow, Json{{"order", "A-1"}});
  const int64_t b = Start(flow, Json{{"order", "B-2"}});
  EXPECT_EQ(Row(b).waiting_key, "B-2");
  NewRunEvent e;
  e.flow = flow->name;
  e.name = "paid";
  e.event_key = "B-2";
  e.payload_json = R"({"amount": 12})";
  e.sender = "webhook:pay";
  auto sent = Host().SendEvent(e, RunCallback([this](const RunStop& s) { stops_[s.run_id] = s; }));
  module_->RunUntilIdle();
  ASSERT_TRUE(sent) << sent.error().message;
  EXPECT_EQ(sent->delivered_to, b);
  ASSERT_TRUE(stops_.count(b));
  EXPECT_EQ(stops_[b].result.result, (Json{{"amount", 12}}));
  EXPECT_EQ(Row(a).state, RunState::kWaiting) << "the other order's run still waits";
}

// A webhook's event that comes before the run waits is kept for the run that later waits with its key.
TEST_F(ParkedRunsTest, AKeyedEventThatArrivesFirstIsTakenByTheRunThatWaitsWithItsKey) {
  Open();
  const FlowRef flow = Add(R"(export default async (input) => {
    const e = await waitForEvent('paid', {key: input.order, timeoutMs: 0});
    return e.data;
  };)", kDurable, "orders");
  NewRunEvent e;
  e.flow = flow->name;
  e.name = "paid";
  e.event_key = "C-3";
  e.payload_json = R"({"amount": 7})";
  e.sender = "webhook:pay";
  auto sent = Host().SendEvent(e, std::nullopt);
  ASSERT_TRUE(sent) << sent.error().message;
  EXPECT_EQ(sent->delivered_to, 0);
  const int64_t other = Start(flow, Json{{"order", "D-4"}});
  EXPECT_EQ(first_[other].outcome, Outcome::kScriptError) << "another key's run does not get it";
  EXPECT_EQ(first_[other].error_name, "TimeoutError");
  const int64_t run = Start(flow, Json{{"order", "C-3"}});
  ASSERT_TRUE(first_[run].ok()) << first_[run].message;
  EXPECT_EQ(first_[run].result, (Json{{"amount", 7}}));
}

// A run parks on one call at a time: a second sleep while the first is in flight is refused, the
// first parks, and the run resumes with both answers where the script got them.
TEST_F(ParkedRunsTest, ASecondParkWhileTheFirstIsInFlightIsRefused) {
  Open();
  const FlowRef flow = Add(R"(export default async () => {
    const first = sleep(5000);
    let refused = '';
    try { await sleep(6000); } catch (e) { refused = e.name + ': ' + e.message; }
    await first;
    return refused;
  };)", kDurable);
  const int64_t run = Start(flow);
  EXPECT_EQ(first_[run].outcome, Outcome::kParked) << first_[run].message;
  const RunRow row = Row(run);
  ASSERT_EQ(row.state, RunState::kSleeping);
  EXPECT_EQ(WakeAt(*row.wake_unix_us), 1u);
  ASSERT_TRUE(stops_.count(run));
  ASSERT_TRUE(stops_[run].result.ok()) << stops_[run].result.message;
  EXPECT_EQ(stops_[run].result.result, "HostError: a run parks on one sleep() or waitForEvent() at a time: await the "
                                       "first before starting another");
}

TEST_F(ParkedRunsTest, AWaitsEventNameIsChecked) {
  Open();
  const int64_t run = Start(Add(R"(export default async (input, host) => {
    const out = [];
    for (const name of ['', 'has space', 'x'.repeat(129)]) {
      try { await waitForEvent(name); } catch (e) { out.push(e.name + ': ' + e.message); }
    }
    try { await host.call('run.wait_event', {name: 'ok', timeout_ms: -5}); } catch (e) { out.push(e.name); }
    return out;
  };)", kDurable));
  ASSERT_TRUE(first_[run].ok()) << first_[run].message;
  const std::string bad_name =
      "TypeError: waitForEvent(name): name must be 1 to 128 characters of letters, digits, '.', '_', '-' and ':'";
  EXPECT_EQ(first_[run].result, (Json{bad_name, bad_name, bad_name, "RangeError"}));
}

// basal run signal: an event delivered without resuming here leaves the run interrupted for whoever
// resumes runs (basal serve, or basal run --resume), which costs it none of its max_resumes.
TEST_F(ParkedRunsTest, AnEventDeliveredWithoutResumingLeavesTheRunToBeResumed) {
  ModuleOptions o;
  o.max_resumes = 0;
  Open(o);
  const int64_t run = Start(Add("export default async () => (await waitForEvent('approved')).data;", kDurable));
  ASSERT_EQ(Row(run).state, RunState::kWaiting);
  NewRunEvent e;
  e.run_id = run;
  e.name = "approved";
  e.payload_json = R"({"by": "ann"})";
  e.sender = "ann";
  auto sent = Host().SendEvent(e, std::nullopt);
  ASSERT_TRUE(sent) << sent.error().message;
  EXPECT_EQ(sent->delivered_to, run);
  module_->RunUntilIdle();
  EXPECT_EQ(Row(run).state, RunState::kInterrupted);
  std::optional<RunStop> stop;
  auto resumed = Host().ResumeRun(run, {}, [&](const RunStop& s) { stop = s; });
  ASSERT_TRUE(resumed) << resumed.error().message;
  module_->RunUntilIdle();
  ASSERT_TRUE(stop.has_value());
  ASSERT_TRUE(stop->result.ok()) << stop->result.message;
  EXPECT_EQ(stop->result.result, (Json{{"by", "ann"}}));
  EXPECT_EQ(Row(run).resumes, 0) << "a delivery is not a failure's resume";
}

// A sleep the script does not await, when the script returns first: as every host call in flight,
// it keeps the activation open (the worker ends a settled activation only when its calls are
// answered, background ones aside), so the run parks; when it wakes, the replayed script returns.
TEST_F(ParkedRunsTest, AnUnawaitedSleepKeepsTheRunOpenUntilItWakes) {
  Open();
  const int64_t run = Start(Add("export default async () => { sleep(5000); return 'done'; };", kDurable));
  EXPECT_EQ(first_[run].outcome, Outcome::kParked) << first_[run].message;
  const RunRow row = Row(run);
  ASSERT_EQ(row.state, RunState::kSleeping);
  ASSERT_TRUE(row.wake_unix_us.has_value());
  EXPECT_EQ(WakeAt(*row.wake_unix_us), 1u);
  ASSERT_TRUE(stops_.count(run));
  EXPECT_TRUE(stops_[run].result.ok()) << stops_[run].result.message;
  EXPECT_EQ(stops_[run].result.result, "done");
  EXPECT_EQ(Row(run).outcome, "ok");
}

TEST_F(ParkedRunsTest, AParkedRunIsCancelledAndStaysEnded) {
  Open();
  const FlowRef flow = Add(Sleeper(5000), kDurable);
  const int64_t run = Start(flow);
  const RunRow row = Row(run);
  ASSERT_EQ(row.state, RunState::kSleeping);
  ASSERT_TRUE(Host().CancelRun(run, "cancelled by the test"));
  module_->RunUntilIdle();
  RunRow ended = Row(run);
  EXPECT_EQ(ended.state, RunState::kEnded);
  EXPECT_EQ(ended.outcome, "cancelled");
  EXPECT_EQ(Parked(Host()), 0u);
  EXPECT_EQ(WakeAt(*row.wake_unix_us + 1), 0u) << "its wake time passes without waking it";
  EXPECT_FALSE(stops_.count(run));
  EXPECT_EQ(Row(run).outcome, "cancelled");
  auto late = Send(run, "approved", "{}");
  ASSERT_FALSE(late);
  EXPECT_EQ(late.error().code, ErrorCode::kConflict);
  // A waiting run too.
  const int64_t waiting = Start(Add("export default async () => (await waitForEvent('go')).data;", kDurable, "w.js"));
  ASSERT_EQ(Row(waiting).state, RunState::kWaiting);
  ASSERT_TRUE(Host().CancelRun(waiting, "cancelled by the test"));
  module_->RunUntilIdle();
  EXPECT_EQ(Row(waiting).outcome, "cancelled");
}

// basal run --resume on a parked run: a retry may be hurried, a sleep or a wait may not.
TEST_F(ParkedRunsTest, AResumeHurriesARetryButNotASleepOrAWait) {
  Open();
  const int64_t sleeping = Start(Add(Sleeper(5000), kDurable, "s.js"));
  auto early = Host().ResumeRun(sleeping, {}, nullptr);
  ASSERT_FALSE(early);
  EXPECT_EQ(early.error().code, ErrorCode::kConflict);
  EXPECT_NE(early.error().message.find("run " + std::to_string(sleeping) + " is sleeping until "), std::string::npos)
      << early.error().message;
  const int64_t waiting = Start(Add("export default async () => (await waitForEvent('go')).data;", kDurable, "w.js"));
  auto no_event = Host().ResumeRun(waiting, {}, nullptr);
  ASSERT_FALSE(no_event);
  EXPECT_EQ(no_event.error().code, ErrorCode::kConflict);
  EXPECT_NE(no_event.error().message.find("basal run signal " + std::to_string(waiting) + " go --data JSON"),
            std::string::npos)
      << no_event.error().message;

  const int64_t retrying = Start(Add("export default async () => { throw new Error('flaky'); };",
                                     R"({"durable": true, "retry": {"max_attempts": 2, "backoff": {"initial_ms": 3600000}}})",
                                     "r.js"));
  ASSERT_EQ(Row(retrying).state, RunState::kRetrying);
  std::optional<RunStop> stop;
  auto hurried = Host().ResumeRun(retrying, {}, [&](const RunStop& s) { stop = s; });
  ASSERT_TRUE(hurried) << hurried.error().message;
  module_->RunUntilIdle();
  ASSERT_TRUE(stop.has_value());
  const RunRow row = Row(retrying);
  EXPECT_EQ(row.attempt, 2);
  EXPECT_EQ(row.outcome, "script_error") << "its last attempt failed too";
}

// --- Bounds (ModuleOptions) ----------------------------------------------------------------------

// A flow that tries to sleep and reports how: "parked" never returns (it parks), else the error.
constexpr const char* kTrySleep = R"(export default async () => {
  try { await sleep(5000); return 'woke'; } catch (e) { return e.name + ': ' + e.message; }
};)";

TEST_F(ParkedRunsTest, ParkedRunsInTheStoreAreBounded) {
  ModuleOptions o;
  o.max_parked_runs = 2;
  Open(o);
  const FlowRef a = Add(kTrySleep, kDurable, "a");
  const FlowRef b = Add(kTrySleep, kDurable, "b");
  EXPECT_EQ(first_[Start(a)].outcome, Outcome::kParked);
  EXPECT_EQ(first_[Start(b)].outcome, Outcome::kParked);
  const int64_t third = Start(b);
  ASSERT_TRUE(first_[third].ok()) << first_[third].message;
  EXPECT_EQ(first_[third].result,
            "LimitError: 2 runs are parked in this store, the most it holds (max_parked_runs 2); this run cannot park now");
  EXPECT_EQ(Parked(Host()), 2u);
}

// A run waiting for its next attempt is parked too (CountParked counts 'retrying'): the bound holds
// for it. Past it the run ends with its failure and says why it was not retried.
TEST_F(ParkedRunsTest, ARetryIsBoundedByTheParkedRuns) {
  ModuleOptions o;
  o.max_parked_runs = 1;
  Open(o);
  EXPECT_EQ(first_[Start(Add(kTrySleep, kDurable, "a"))].outcome, Outcome::kParked);
  const int64_t failing = Start(Add("export default async () => { throw new Error('flaky'); };",
                                    R"({"durable": true, "retry": {"max_attempts": 3}})", "b"));
  EXPECT_LE(Parked(Host()), 1u) << "max_parked_runs 1";
  const RunRow ended = Row(failing);
  EXPECT_EQ(ended.state, RunState::kEnded);
  EXPECT_EQ(ended.outcome, "script_error");
  EXPECT_NE(ended.error_json.find("retry_refused"), std::string::npos) << ended.error_json;
  EXPECT_NE(ended.error_json.find("was not retried: 1 runs are parked in this store, the most it holds "
                                  "(max_parked_runs 1)"),
            std::string::npos)
      << ended.error_json;
}

TEST_F(ParkedRunsTest, ParkedRunsOfOneFlowAreBoundedAndOtherFlowsStillPark) {
  ModuleOptions o;
  o.max_parked_runs_per_flow = 1;
  Open(o);
  const FlowRef a = Add(kTrySleep, kDurable, "a");
  const FlowRef b = Add(kTrySleep, kDurable, "b");
  EXPECT_EQ(first_[Start(a)].outcome, Outcome::kParked);
  const int64_t second = Start(a);
  ASSERT_TRUE(first_[second].ok()) << first_[second].message;
  EXPECT_EQ(first_[second].result, "LimitError: 1 runs of flow " + a->name +
                                       " are parked, the most one flow may have (max_parked_runs_per_flow 1); this "
                                       "run cannot park now");
  EXPECT_EQ(first_[Start(b)].outcome, Outcome::kParked) << "another flow's run parks";
  EXPECT_EQ(Parked(Host(), a->name), 1u);
  EXPECT_EQ(Parked(Host()), 2u);
}

TEST_F(ParkedRunsTest, AnEventsPayloadIsBounded) {
  ModuleOptions o;
  o.max_event_bytes = 100;
  Open(o);
  const int64_t run = Start(Add(Sleeper(5000), kDurable));
  const std::string fits = "\"" + std::string(98, 'x') + "\"";  // 100 bytes
  auto ok = Send(run, "note", fits);
  ASSERT_TRUE(ok) << ok.error().message;
  const std::string over = "\"" + std::string(99, 'x') + "\"";  // 101 bytes
  auto refused = Send(run, "note", over);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(refused.error().message, "the event's payload is 101 bytes; an event carries at most 100 (max_event_bytes)");
  // 97 bytes as sent, 145 as kept (1E2 is kept as 100.0): the kept size is the bounded one.
  std::string exponents = "[1E2";
  for (int i = 1; i < 24; ++i) exponents += ",1E2";
  exponents += "]";
  ASSERT_EQ(exponents.size(), 97u);
  auto longer = Send(run, "note", exponents);
  ASSERT_FALSE(longer);
  EXPECT_EQ(longer.error().message,
            "the event's payload is 145 bytes as JSON is kept; an event carries at most 100 (max_event_bytes)");
  auto bad = Send(run, "note", "{not json");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(bad.error().message.rfind("the event's payload is not JSON: ", 0), 0u) << bad.error().message;
  auto name = Send(run, "no spaces", "{}");
  ASSERT_FALSE(name);
  EXPECT_EQ(name.error().message,
            "event name \"no spaces\" must be 1 to 128 characters of letters, digits, '.', '_', '-' and ':'");
  EXPECT_EQ(Pending(run), 1u);
}

TEST_F(ParkedRunsTest, EventsKeptForOneRunAreBounded) {
  ModuleOptions o;
  o.max_pending_events_per_run = 2;
  Open(o);
  const int64_t run = Start(Add(Sleeper(5000), kDurable));
  ASSERT_TRUE(Send(run, "a", "1"));
  ASSERT_TRUE(Send(run, "b", "2"));
  auto third = Send(run, "c", "3");
  ASSERT_FALSE(third);
  EXPECT_EQ(third.error().code, ErrorCode::kUnavailable);
  EXPECT_EQ(third.error().message, "run " + std::to_string(run) +
                                       " holds 2 events it has not waited for yet, the most a run holds "
                                       "(max_pending_events_per_run); retry once it has taken some");
  EXPECT_EQ(Pending(run), 2u);
  const int64_t other = Start(Add(Sleeper(5000), kDurable, "other.js"));
  EXPECT_TRUE(Send(other, "a", "1")) << "the bound is per run";
}

// The bound is on events a run holds; one the run waits for is delivered, not held: whoever can
// send events to a run cannot hold off its approval by filling the bound with other names.
TEST_F(ParkedRunsTest, AnEventTheRunWaitsForIsDeliveredWhileItHoldsTheMostItMay) {
  ModuleOptions o;
  o.max_pending_events_per_run = 1;
  Open(o);
  const int64_t run = Start(Add("export default async () => (await waitForEvent('approved')).data;", kDurable));
  ASSERT_EQ(Row(run).state, RunState::kWaiting);
  ASSERT_TRUE(Send(run, "comment", R"("looks fine")"));
  EXPECT_EQ(Pending(run), 1u);
  auto sent = Send(run, "approved", R"({"by": "ann"})");
  ASSERT_TRUE(sent) << sent.error().message;
  EXPECT_EQ(sent->delivered_to, run);
  ASSERT_TRUE(stops_.count(run));
  EXPECT_EQ(stops_[run].result.result, (Json{{"by", "ann"}}));
}

TEST_F(ParkedRunsTest, KeyedEventsNoRunWaitsForAreBoundedPerFlow) {
  ModuleOptions o;
  o.max_pending_keyed_events_per_flow = 1;
  Open(o);
  auto keyed = [&](const std::string& flow, const std::string& key) {
    NewRunEvent e;
    e.flow = flow;
    e.name = "paid";
    e.event_key = key;
    e.payload_json = "{}";
    e.sender = "webhook:pay";
    return Host().SendEvent(e, std::nullopt);
  };
  auto first = keyed("orders", "A-1");
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_EQ(first->delivered_to, 0);
  auto second = keyed("orders", "A-2");
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code, ErrorCode::kUnavailable);
  EXPECT_EQ(second.error().message,
            "flow orders holds 1 keyed events no run has waited for yet, the most it holds "
            "(max_pending_keyed_events_per_flow); retry later");
  EXPECT_TRUE(keyed("invoices", "A-2")) << "the bound is per flow";
  auto no_key = keyed("orders", "");
  ASSERT_FALSE(no_key);
  EXPECT_EQ(no_key.error().message, "an event names its run, or its flow and a key");
}

TEST_F(ParkedRunsTest, AnEventNobodyTakesIsDroppedAfterItsRetention) {
  ModuleOptions o;
  o.event_retention = std::chrono::milliseconds(1000);
  Open(o);
  const FlowRef flow = Add(R"(export default async () => {
    await sleep(600000);
    try { return (await waitForEvent('approved', {timeoutMs: 0})).data; } catch (e) { return e.name; }
  };)", kDurable);
  const int64_t run = Start(flow);
  const RunRow row = Row(run);
  ASSERT_EQ(row.state, RunState::kSleeping);
  const int64_t sent_at = NowUs();
  ASSERT_TRUE(Send(run, "approved", R"({"by": "ann"})"));
  EXPECT_EQ(Pending(run), 1u);
  ASSERT_LT(sent_at + 2'000'000, *row.wake_unix_us) << "the test's clock: past the retention, before the wake";
  EXPECT_EQ(WakeAt(sent_at + 2'000'000), 0u);
  EXPECT_EQ(Pending(run), 0u) << "past its retention";
  EXPECT_EQ(WakeAt(*row.wake_unix_us), 1u);
  ASSERT_TRUE(stops_.count(run));
  EXPECT_EQ(stops_[run].result.result, "TimeoutError") << "the dropped event is not delivered";
}

// --- Retries (the manifest's "retry") -------------------------------------------------------------

TEST_F(ParkedRunsTest, ARunRetriesAtItsBackoffUntilItsAttemptsAreSpent) {
  Open();
  const FlowRef flow = Add("export default async () => { throw new Error('flaky'); };",
                           R"({"durable": true, "retry": {"max_attempts": 3,
                               "backoff": {"initial_ms": 1000, "factor": 3, "max_ms": 60000}}})");
  const int64_t before = NowUs();
  const int64_t run = Start(flow);
  const int64_t after = NowUs();
  EXPECT_EQ(first_[run].outcome, Outcome::kParked) << "the run goes on";
  EXPECT_NE(first_[run].message.find("attempt failed (script_error"), std::string::npos) << first_[run].message;
  RunRow row = Row(run);
  EXPECT_EQ(row.state, RunState::kRetrying);
  EXPECT_EQ(row.attempt, 1);
  ASSERT_TRUE(row.wake_unix_us.has_value());
  // Attempt 2 after initial_ms.
  EXPECT_GE(*row.wake_unix_us, before + 1'000'000);
  EXPECT_LE(*row.wake_unix_us, after + 1'000'000);

  EXPECT_EQ(WakeAt(*row.wake_unix_us - 1), 0u);
  int64_t woke_at = NowUs();
  EXPECT_EQ(WakeAt(*row.wake_unix_us), 1u);
  int64_t done_at = NowUs();
  row = Row(run);
  EXPECT_EQ(row.state, RunState::kRetrying);
  EXPECT_EQ(row.attempt, 2);
  ASSERT_TRUE(row.wake_unix_us.has_value());
  // Attempt 3 after initial_ms * factor, from when attempt 2 failed.
  EXPECT_GE(*row.wake_unix_us, woke_at + 3'000'000);
  EXPECT_LE(*row.wake_unix_us, done_at + 3'000'000);

  EXPECT_EQ(WakeAt(*row.wake_unix_us), 1u);
  row = Row(run);
  EXPECT_EQ(row.state, RunState::kEnded);
  EXPECT_EQ(row.outcome, "script_error");
  EXPECT_EQ(row.attempt, 3);
  EXPECT_FALSE(row.wake_unix_us.has_value());
  ASSERT_TRUE(stops_.count(run));
  EXPECT_EQ(stops_[run].result.outcome, Outcome::kScriptError);
  EXPECT_EQ(stops_[run].state, RunState::kEnded);
  auto activations = Reader()->RunActivations(run);
  ASSERT_TRUE(activations);
  EXPECT_EQ(activations->size(), 3u) << "one activation per attempt";
  EXPECT_EQ(WakeAt(*row.wake_unix_us + 100'000'000), 0u) << "nothing more";
}

// "on": ["deadline"]: an attempt past its deadline is retried like a script error.
TEST_F(ParkedRunsTest, AnAttemptPastItsDeadlineIsRetriedWhenTheRetryNamesIt) {
  Open();
  const FlowRef flow = Add("export default async () => { await new Promise((r) => setTimeout(r, 30000)); };",
                           R"({"durable": true, "budgets": {"deadline_ms": 200},
                               "retry": {"max_attempts": 2, "on": ["deadline"], "backoff": {"initial_ms": 0}}})");
  const int64_t run = Start(flow);
  EXPECT_EQ(first_[run].outcome, Outcome::kParked);
  EXPECT_NE(first_[run].message.find("attempt failed (deadline"), std::string::npos) << first_[run].message;
  RunRow row = Row(run);
  ASSERT_EQ(row.state, RunState::kRetrying);
  EXPECT_EQ(WakeAt(*row.wake_unix_us), 1u) << "initial_ms 0: due at once";
  row = Row(run);
  EXPECT_EQ(row.outcome, "deadline");
  EXPECT_EQ(row.attempt, 2);
}

TEST_F(ParkedRunsTest, AnOutcomeTheRetryDoesNotNameEndsTheRun) {
  Open();
  const FlowRef flow = Add("export default async () => { throw new Error('bad input'); };",
                           R"({"durable": true, "retry": {"max_attempts": 5, "on": ["deadline"]}})");
  const int64_t run = Start(flow);
  EXPECT_EQ(first_[run].outcome, Outcome::kScriptError);
  const RunRow row = Row(run);
  EXPECT_EQ(row.state, RunState::kEnded);
  EXPECT_EQ(row.outcome, "script_error");
  EXPECT_EQ(row.attempt, 1);
}

TEST_F(ParkedRunsTest, ARetriedStepRunsAgainWithoutRepeatingTheEffectBeforeIt) {
  Open();
  int effects = 0, flaky = 0;
  HostCallSpec effect;
  effect.name = "test.effect";
  effect.effect = Effect::kExternal;
  effect.handler = [&](const HostCallContext&, const Json&, HostCallReply reply) { reply.Ok(++effects); };
  ASSERT_TRUE(module_->registry().Register(std::move(effect)));
  HostCallSpec fails_once;
  fails_once.name = "test.flaky";
  fails_once.effect = Effect::kExternal;
  fails_once.handler = [&](const HostCallContext&, const Json&, HostCallReply reply) {
    if (++flaky == 1) return reply.Error("HostError", "503 from upstream");
    reply.Ok("charged");
  };
  ASSERT_TRUE(module_->registry().Register(std::move(fails_once)));
  const FlowRef flow = Add(R"(export default async (input, host) => {
    const n = await host.call('test.effect', {});
    const r = await step('charge', async () => host.call('test.flaky', {}));
    return {effect: n, charge: r};
  };)", R"({"durable": true, "grants": {"test.effect": {}, "test.flaky": {}},
            "retry": {"max_attempts": 3, "backoff": {"initial_ms": 1000}}})");
  const int64_t run = Start(flow);
  EXPECT_EQ(first_[run].outcome, Outcome::kParked) << first_[run].message;
  const RunRow row = Row(run);
  ASSERT_EQ(row.state, RunState::kRetrying);
  EXPECT_EQ(WakeAt(*row.wake_unix_us), 1u);
  ASSERT_TRUE(stops_.count(run));
  ASSERT_TRUE(stops_[run].result.ok()) << stops_[run].result.message;
  EXPECT_EQ(stops_[run].result.result, (Json{{"effect", 1}, {"charge", "charged"}}));
  EXPECT_EQ(effects, 1) << "the effect before the step was replayed, not repeated";
  EXPECT_EQ(flaky, 2);
  EXPECT_EQ(Row(run).attempt, 2);
}

TEST_F(ParkedRunsTest, ARunWaitingForItsNextAttemptIsCancelled) {
  Open();
  const FlowRef flow = Add("export default async () => { throw new Error('flaky'); };",
                           R"({"durable": true, "retry": {"max_attempts": 3}})");
  const int64_t run = Start(flow);
  const RunRow row = Row(run);
  ASSERT_EQ(row.state, RunState::kRetrying);
  ASSERT_TRUE(Host().CancelRun(run, "cancelled by the test"));
  module_->RunUntilIdle();
  EXPECT_EQ(Row(run).outcome, "cancelled");
  EXPECT_EQ(WakeAt(*row.wake_unix_us), 0u) << "no further attempt";
  auto activations = Reader()->RunActivations(run);
  ASSERT_TRUE(activations);
  EXPECT_EQ(activations->size(), 1u);
}

}  // namespace
}  // namespace basal::testing
