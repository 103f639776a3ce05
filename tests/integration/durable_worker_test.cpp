// A durable worker driven directly over its pipes, this test playing the parent (docs/protocol.md,
// "Durable runs"; docs/runtime.md, "Durable runs"): load with "durable": {clock_us, seed}, activate,
// and answer the flow's host calls with clock_us values chosen here. What the script reads of the
// time (Date, performance, __date_clock, the timers) must be exactly what those values imply, and
// what it draws (Math.random, crypto) exactly what the seed implies; a live worker keeps the real
// clocks and the kernel's randomness; a worker told the wrong clock rule stops with exit 65.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "parent/platform/worker_launcher.h"
#include "parent/session.h"
#include "protocol/messages.h"

namespace basal::testing {
namespace {

using Json = nlohmann::json;
using std::chrono::steady_clock;

constexpr int64_t kStartUs = 1'767'225'600'123'456;  // 2026-01-01T00:00:00.123456Z
constexpr int64_t kStartMs = kStartUs / 1000;        // what Date.now() says at the start

protocol::DurableStart Durable(int64_t clock_us, uint8_t seed_base = 0) {
  protocol::DurableStart d;
  d.clock_us = clock_us;
  for (size_t i = 0; i < d.seed.size(); ++i) d.seed[i] = static_cast<uint8_t>(seed_base + i);
  return d;
}

// The parent's side of one worker: what the flow asks, how it is answered.
struct Answer {
  Json ok;                           // the call's value, unless `error_name` is set
  std::string error_name;
  std::optional<int64_t> clock_us;   // sent with the result when set
};
using Answerer = std::function<Answer(const protocol::Call&)>;

struct Ending {
  bool done = false;
  protocol::Done result;                    // when done
  std::optional<WorkerDeath> death;         // when the worker ended instead
  std::string stderr_note;
  std::string failure;                      // what went wrong otherwise
};

class RawWorker {
 public:
  // Spawns and reads the welcome; a failure is recorded in `failure_`.
  RawWorker() {
    auto user = ResolveWorkerUser("");
    if (!user) {
      failure_ = "worker user: " + user.error().message;
      return;
    }
    LaunchOptions launch;
    launch.path = BASAL_WORKER_PATH;
    launch.limits = {.address_space_bytes = 1ull << 30, .cpu_soft_seconds = 60, .cpu_hard_seconds = 60};
    launch.credentials = *user;
    auto proc = WorkerLauncher::ForThisPlatform()->Launch(launch);
    if (!proc) {
      failure_ = "spawn: " + proc.error().message;
      return;
    }
    session_ = std::make_unique<WorkerSession>(std::move(*proc));
    auto welcome = Next();
    if (!welcome || !std::holds_alternative<protocol::Welcome>(*welcome)) failure_ = "no welcome";
  }

  const std::string& failure() const { return failure_; }

  // Loads `source` (its default export the flow); the error of a failed load, or "".
  std::string Load(const std::string& source, const std::optional<protocol::DurableStart>& durable) {
    if (!failure_.empty()) return failure_;
    protocol::Load load;
    load.flow = "durable.js";
    load.source = source;
    load.profile = "flow";
    load.cpu_ms = 20'000;
    load.heap_bytes = 64ll << 20;
    load.stack_bytes = 1ll << 20;
    load.durable = durable;
    session_->Send(protocol::BuildLoad(load));
    auto loaded = Next();
    if (!loaded) return "no loaded frame";
    auto* l = std::get_if<protocol::Loaded>(&*loaded);
    if (!l) return "not a loaded frame";
    return l->ok ? "" : l->error.name + ": " + l->error.message;
  }

  void Send(const std::string& payload) { session_->Send(payload); }

  // Activates and answers every call with `answer` until the worker sends done or ends.
  Ending Run(int64_t activation, const Answerer& answer, const Json& input = nullptr) {
    session_->Send(protocol::BuildActivate(activation, protocol::DumpJson(input)));
    return Pump(answer);
  }

  Ending Pump(const Answerer& answer) {
    Ending e;
    for (;;) {
      auto next = Next();
      if (!next) {
        e.death = session_->process().WaitFor(std::chrono::milliseconds(10'000));
        if (!e.death) e.death = session_->process().KillAndReap();
        session_->DrainStderr();
        e.stderr_note = session_->StderrNote();
        return e;
      }
      if (auto* call = std::get_if<protocol::Call>(&*next)) {
        const Answer a = answer(*call);
        const int64_t act = call->activation, id = call->id;
        session_->Send(a.error_name.empty() ? protocol::BuildResultOk(act, id, protocol::DumpJson(a.ok), a.clock_us)
                                            : protocol::BuildResultError(act, id, a.error_name, "refused", a.clock_us));
      } else if (auto* done = std::get_if<protocol::Done>(&*next)) {
        e.done = true;
        e.result = *done;
        return e;
      } else {
        e.failure = "unexpected frame during an activation";
        return e;
      }
    }
  }

 private:
  std::optional<protocol::WorkerMessage> Next() {
    auto m = session_->ReadMessage(steady_clock::now() + std::chrono::seconds(30));
    if (!m) return std::nullopt;
    return std::move(*m);
  }

  std::unique_ptr<WorkerSession> session_;
  std::string failure_;
};

// Runs `source` to its end in a new worker, answering with `answer`; the result of a successful
// activation, or a test failure.
Json RunFlow(const std::string& source, const std::optional<protocol::DurableStart>& durable, const Answerer& answer) {
  RawWorker w;
  EXPECT_EQ(w.failure(), "");
  const std::string load_error = w.Load(source, durable);
  EXPECT_EQ(load_error, "");
  if (!load_error.empty()) return nullptr;
  const Ending e = w.Run(1, answer);
  EXPECT_TRUE(e.done) << e.failure << (e.death ? e.death->Describe() : "") << e.stderr_note;
  if (!e.done) return nullptr;
  EXPECT_TRUE(e.result.ok) << e.result.error.name << ": " << e.result.error.message;
  return e.result.ok ? e.result.result : Json();
}

Answer NoCallExpected(const protocol::Call& c) {
  ADD_FAILURE() << "unexpected host call " << c.name;
  return {nullptr, "Unexpected", std::nullopt};
}

// ---- (a) the clock: Date, performance, __date_clock ----------------------------------------------

constexpr const char* kClockFlow = R"JS(
const atTopLevel = Date.now();
const snap = () => ({
  now: Date.now(), date: new Date().getTime(), callType: typeof Date(),
  perf: performance.now(), micros: __date_clock(), iso: new Date().toISOString(),
  calledIsNow: Date() === new Date(Date.now()).toString(),
});
class Stamp extends Date {}
export default async (input, host) => {
  const seen = [snap()];
  let spin = 0;
  for (let i = 0; i < 300000; i++) spin += i % 7;  // CPU work: the clock does not move
  seen.push(snap());
  await host.call("kv.get", {key: "first"});
  seen.push(snap());
  await host.call("kv.get", {key: "second"}).catch(() => {});  // answered with an earlier clock
  seen.push(snap());
  const d = new Date();
  return {
    atTopLevel, seen, spin: spin > 0, origin: performance.timeOrigin, json: JSON.stringify(performance),
    instance: d instanceof Date, proto: Object.getPrototypeOf(d) === Date.prototype,
    ctor: Date.prototype.constructor === Date, stamp: new Stamp().getTime(), stampIsDate: new Stamp() instanceof Date,
    utc: Date.UTC(2020, 0, 1), parsed: Date.parse("2020-01-01T00:00:00Z"), given: new Date(5).getTime(),
  };
};
)JS";

TEST(DurableWorkerTest, TheClockIsTheRunsAndMovesOnlyWithTheParentsAnswers) {
  std::vector<std::string> calls;
  const Json r = RunFlow(kClockFlow, Durable(kStartUs), [&](const protocol::Call& c) -> Answer {
    calls.push_back(c.args.value("key", ""));
    if (calls.size() == 1) return {Json::object(), "", kStartUs + 250'500};  // 250.5 ms after the start
    return {nullptr, "NotFound", kStartUs + 100};                            // earlier: ignored
  });
  ASSERT_TRUE(r.is_object()) << r.dump();
  EXPECT_EQ(calls, (std::vector<std::string>{"first", "second"}));
  EXPECT_EQ(r["atTopLevel"], kStartMs) << "the module's top level reads the run's clock";
  const Json& seen = r["seen"];
  ASSERT_EQ(seen.size(), 4u);
  const int64_t after_ms = (kStartUs + 250'500) / 1000;
  const int64_t expected_ms[] = {kStartMs, kStartMs, after_ms, after_ms};
  const int64_t expected_us[] = {kStartUs, kStartUs, kStartUs + 250'500, kStartUs + 250'500};
  const double expected_perf[] = {0.0, 0.0, 250.5, 250.5};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(seen[i]["now"], expected_ms[i]) << i;
    EXPECT_EQ(seen[i]["date"], expected_ms[i]) << i;
    EXPECT_EQ(seen[i]["micros"], expected_us[i]) << i;
    EXPECT_EQ(seen[i]["perf"].get<double>(), expected_perf[i]) << i;
    EXPECT_EQ(seen[i]["callType"], "string") << i;
  }
  // Date() is the string of the same instant.
  EXPECT_EQ(seen[0]["iso"], "2026-01-01T00:00:00.123Z");
  EXPECT_EQ(seen[1]["iso"], "2026-01-01T00:00:00.123Z");
  EXPECT_EQ(seen[2]["iso"], "2026-01-01T00:00:00.373Z");
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(seen[i]["calledIsNow"], true) << i;
  EXPECT_EQ(r["spin"], true);
  const double origin_ms = static_cast<double>(kStartUs) / 1000;
  EXPECT_EQ(r["origin"].get<double>(), origin_ms);
  EXPECT_EQ(Json::parse(r["json"].get<std::string>())["timeOrigin"].get<double>(), origin_ms);
  // Date itself is QuickJS's own: nothing but its clock changed.
  EXPECT_EQ(r["instance"], true);
  EXPECT_EQ(r["proto"], true);
  EXPECT_EQ(r["ctor"], true);
  EXPECT_EQ(r["stamp"], after_ms);
  EXPECT_EQ(r["stampIsDate"], true);
  EXPECT_EQ(r["utc"], 1577836800000);
  EXPECT_EQ(r["parsed"], 1577836800000);
  EXPECT_EQ(r["given"], 5);
}

// ---- (b) the generators ------------------------------------------------------------------------

constexpr const char* kRandomFlow = R"JS(
const early = Math.random();  // at the top level too
export default async () => {
  const randoms = [early];
  for (let i = 0; i < 100; i++) randoms.push(Math.random());
  const bytes = Array.from(crypto.getRandomValues(new Uint8Array(100)));
  const words = Array.from(crypto.getRandomValues(new Uint32Array(4)));
  const uuids = [crypto.randomUUID(), crypto.randomUUID(), crypto.randomUUID()];
  return {randoms, bytes, words, uuids};
};
)JS";

TEST(DurableWorkerTest, TheSameSeedDrawsTheSameValuesInEveryWorkerAndAnotherSeedOthers) {
  const Json a = RunFlow(kRandomFlow, Durable(kStartUs, 0), NoCallExpected);
  const Json b = RunFlow(kRandomFlow, Durable(kStartUs + 999'999, 0), NoCallExpected);  // the clock is no key
  const Json c = RunFlow(kRandomFlow, Durable(kStartUs, 1), NoCallExpected);
  ASSERT_TRUE(a.is_object() && b.is_object() && c.is_object());
  EXPECT_EQ(a, b);
  EXPECT_NE(a["randoms"], c["randoms"]);
  EXPECT_NE(a["bytes"], c["bytes"]);
  EXPECT_NE(a["uuids"], c["uuids"]);
  // Fixed by the seed alone (00 01 .. 1f): the ChaCha20 keystreams tests/unit/durable_test.cpp
  // checks against another implementation. Math.random's first value is its stream's first 53 bits.
  EXPECT_EQ(a["randoms"][0].get<double>(), 4839844194836020.0 * 0x1.0p-53);
  EXPECT_EQ(a["randoms"][1].get<double>(), 7896537388328490.0 * 0x1.0p-53);
  const std::vector<int> first_bytes = {0x54, 0xb2, 0x75, 0xd1, 0x4c, 0x65, 0xd8, 0x17};
  for (size_t i = 0; i < first_bytes.size(); ++i) EXPECT_EQ(a["bytes"][i], first_bytes[i]) << i;
  for (const Json& uuid : a["uuids"]) {
    const std::string u = uuid.get<std::string>();
    ASSERT_EQ(u.size(), 36u) << u;
    EXPECT_EQ(u[14], '4') << u;  // version 4, variant 10, as ever
    EXPECT_NE(std::string("89ab").find(u[19]), std::string::npos) << u;
  }
  EXPECT_NE(a["uuids"][0], a["uuids"][1]);
}

// ---- (c) the timers ----------------------------------------------------------------------------

constexpr const char* kTimersFlow = R"JS(
export default async () => {
  const fired = [];
  await new Promise((resolve) => {
    setTimeout(() => fired.push(["b", Date.now()]), 200);
    setTimeout(() => fired.push(["a", Date.now()]), 100);
    setTimeout(() => { fired.push(["c", Date.now()]); resolve(); }, 300);
  });
  return fired;
};
)JS";

TEST(DurableWorkerTest, ATimerFiresOnlyWhenAnAnswersClockReachesItsDueTimeInDueOrder) {
  // The timers count whole milliseconds from the run's clock: due at kStartMs + 100, + 200, + 300.
  std::vector<int64_t> sleeps;
  const int64_t answers_us[] = {
      kStartUs + 50'000,          // 50 ms on: nothing is due yet, the worker sleeps again
      (kStartMs + 100) * 1000,    // exactly when "a" is due
      (kStartMs + 250) * 1000,    // past "b", not yet "c"
      (kStartMs + 300) * 1000,    // "c"
  };
  const Json r = RunFlow(kTimersFlow, Durable(kStartUs), [&](const protocol::Call& c) -> Answer {
    EXPECT_EQ(c.name, "timer.sleep");
    sleeps.push_back(c.args.value("ms", int64_t{-1}));
    if (sleeps.size() > std::size(answers_us)) return {Json::object(), "", answers_us[std::size(answers_us) - 1]};
    return {Json::object(), "", answers_us[sleeps.size() - 1]};
  });
  EXPECT_EQ(r, Json::array({Json::array({"a", kStartMs + 100}), Json::array({"b", kStartMs + 250}),
                            Json::array({"c", kStartMs + 300})}));
  // Each sleep asks for what is left until the earliest due time, by the run's clock. 456 us into
  // its millisecond, the run's start counts as kStartMs, so 50 ms on is still 50 ms before "a".
  EXPECT_EQ(sleeps, (std::vector<int64_t>{100, 50, 100, 50}));
}

TEST(DurableWorkerTest, AnEarlierAnswerDoesNotFireATimer) {
  // A sleep answered "early" (a clock before the due time, as a superseded sleep is) leaves the timer
  // pending: the worker asks again for the rest.
  std::vector<int64_t> sleeps;
  const Json r = RunFlow(R"JS(export default async () => {
      await new Promise((resolve) => setTimeout(resolve, 1000));
      return Date.now();
    };)JS",
                         Durable(kStartUs), [&](const protocol::Call& c) -> Answer {
                           sleeps.push_back(c.args.value("ms", int64_t{-1}));
                           if (sleeps.size() < 3) return {Json::object({{"superseded", true}}), "", kStartUs};
                           return {Json::object(), "", (kStartMs + 1000) * 1000 + 999};
                         });
  EXPECT_EQ(r, kStartMs + 1000);
  EXPECT_EQ(sleeps, (std::vector<int64_t>{1000, 1000, 1000}));
}

// ---- (d) a live worker --------------------------------------------------------------------------

TEST(DurableWorkerTest, AWorkerWithoutDurableKeepsTheRealClocksAndTheKernelsRandomness) {
  constexpr const char* kLiveFlow = R"JS(
    export default async (input, host) => {
      const before = {now: Date.now(), perf: performance.now()};
      await host.call("kv.get", {key: "k"});
      let spin = 0;
      for (let i = 0; i < 2000000; i++) spin += i % 3;
      const after = {now: Date.now(), perf: performance.now()};
      return {before, after, origin: performance.timeOrigin, randoms: [Math.random(), Math.random()],
              bytes: Array.from(crypto.getRandomValues(new Uint8Array(16))), spin: spin > 0};
    };)JS";
  auto wall_ms = [] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  const int64_t t0 = wall_ms();
  auto answer = [](const protocol::Call&) -> Answer { return {Json::object(), "", std::nullopt}; };
  const Json a = RunFlow(kLiveFlow, std::nullopt, answer);
  const Json b = RunFlow(kLiveFlow, std::nullopt, answer);
  const int64_t t1 = wall_ms();
  ASSERT_TRUE(a.is_object() && b.is_object());
  for (const Json* r : {&a, &b}) {
    EXPECT_GE((*r)["before"]["now"].get<int64_t>(), t0);
    EXPECT_LE((*r)["after"]["now"].get<int64_t>(), t1);
    EXPECT_GE((*r)["after"]["now"].get<int64_t>(), (*r)["before"]["now"].get<int64_t>());
    EXPECT_GE((*r)["origin"].get<double>(), static_cast<double>(t0) - 1);
    EXPECT_LE((*r)["origin"].get<double>(), (*r)["before"]["now"].get<double>() + 1);
    // The monotonic clock runs on across CPU work and host calls.
    EXPECT_GE((*r)["before"]["perf"].get<double>(), 0.0);
    EXPECT_GT((*r)["after"]["perf"].get<double>(), (*r)["before"]["perf"].get<double>());
  }
  // Two live workers draw from the kernel: 2 x 53 bits and 128 bits that agree by chance never do.
  EXPECT_NE(a["randoms"], b["randoms"]);
  EXPECT_NE(a["bytes"], b["bytes"]);
}

// ---- (e) the clock rule: a broken one stops the worker as a protocol fault -----------------------

void ExpectProtocolFault(const Ending& e, const std::string& says) {
  EXPECT_FALSE(e.done);
  ASSERT_TRUE(e.death.has_value()) << e.failure;
  EXPECT_EQ(e.death->kind, WorkerDeath::Kind::kExited) << e.death->Describe();
  EXPECT_EQ(e.death->code, 65) << e.death->Describe();
  EXPECT_NE(e.stderr_note.find(says), std::string::npos) << e.stderr_note;
}

constexpr const char* kOneCallFlow = R"JS(export default async (input, host) => {
  await host.call("kv.get", {key: "k"});
  return Date.now();
};)JS";

TEST(DurableWorkerTest, AClockSentToALiveWorkerIsAProtocolFault) {
  RawWorker w;
  ASSERT_EQ(w.Load(kOneCallFlow, std::nullopt), "");
  ExpectProtocolFault(w.Run(1, [](const protocol::Call&) -> Answer { return {nullptr, "", kStartUs}; }),
                      "not in durable mode");
  // The allowed path: the same flow, answered without a clock, completes.
  RawWorker ok;
  ASSERT_EQ(ok.Load(kOneCallFlow, std::nullopt), "");
  const Ending e = ok.Run(1, [](const protocol::Call&) -> Answer { return {nullptr, "", std::nullopt}; });
  EXPECT_TRUE(e.done && e.result.ok) << e.stderr_note;
}

TEST(DurableWorkerTest, AnAnswerWithoutAClockToADurableWorkerIsAProtocolFault) {
  RawWorker w;
  ASSERT_EQ(w.Load(kOneCallFlow, Durable(kStartUs)), "");
  ExpectProtocolFault(w.Run(1, [](const protocol::Call&) -> Answer { return {nullptr, "NotFound", std::nullopt}; }),
                      "without clock_us to a worker in durable mode");
}

TEST(DurableWorkerTest, ALateAnswerBetweenActivationsIsHeldToTheSameRule) {
  // An answer for an activation that already ended is dropped, but its clock is still checked.
  RawWorker w;
  ASSERT_EQ(w.Load("export default () => 1;", std::nullopt), "");
  const Ending first = w.Run(1, NoCallExpected);
  ASSERT_TRUE(first.done && first.result.ok);
  w.Send(protocol::BuildResultOk(1, 1, "null"));  // without a clock: dropped, the worker goes on
  const Ending second = w.Run(2, NoCallExpected);
  ASSERT_TRUE(second.done && second.result.ok) << second.stderr_note;
  w.Send(protocol::BuildResultOk(2, 1, "null", kStartUs));
  ExpectProtocolFault(w.Pump(NoCallExpected), "not in durable mode");
}

TEST(DurableWorkerTest, ADurableWorkerRunsOneActivation) {
  RawWorker w;
  ASSERT_EQ(w.Load("export default () => Date.now();", Durable(kStartUs)), "");
  const Ending first = w.Run(1, NoCallExpected);
  ASSERT_TRUE(first.done && first.result.ok) << first.stderr_note;
  EXPECT_EQ(first.result.result, kStartMs);
  ExpectProtocolFault(w.Run(2, NoCallExpected), "a durable worker runs one activation");
}

}  // namespace
}  // namespace basal::testing
