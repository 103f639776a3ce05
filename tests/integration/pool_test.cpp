// The worker pool and the budgets, seen through a real parent and real confined workers: reuse,
// retirement by activation count, idle time and exhausted budgets, the global cap's queue, and the
// processes that retiring ends. Budgets and periods are small and set here; nothing depends on how
// fast the machine is.
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "integration/test_support.h"
#include "parent/loop/event_loop.h"
#include "parent/module_host.h"
#include "parent/platform/worker_launcher.h"
#include "parent/pool.h"

namespace basal::testing {
namespace {

using Json = nlohmann::json;

// Every live child of this process (the workers, since the tests spawn nothing else).
std::vector<pid_t> ChildPids() {
  std::vector<pid_t> pids;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream in(task.path() / "children");
    pid_t pid;
    while (in >> pid) pids.push_back(pid);
  }
  return pids;
}

// The scheduler's count of a process's time on a CPU, in nanoseconds (/proc/PID/schedstat).
uint64_t OnCpuNs(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/schedstat");
  uint64_t ns = 0;
  in >> ns;
  EXPECT_TRUE(in) << "no schedstat for " << pid;
  return ns;
}

// A process's command line, its arguments separated by spaces.
std::string CommandLine(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::replace(text.begin(), text.end(), '\0', ' ');
  return text;
}

// The soft "Max address space" of a process, from /proc/PID/limits ("unlimited" as 0).
uint64_t AddressSpaceLimit(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/limits");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Max address space", 0) != 0) continue;
    std::istringstream fields(line.substr(std::string("Max address space").size()));
    std::string soft;
    fields >> soft;
    return soft == "unlimited" ? 0 : std::stoull(soft);
  }
  ADD_FAILURE() << "no address-space line for pid " << pid;
  return 0;
}

// A flow whose module state counts its activations: the count says which worker ran it.
constexpr const char* kCounterFlow = "let n = 0; export default function () { n += 1; return n; }";

class PoolTest : public ModuleFixture {
 protected:
  // Registers `hold`, a host call whose replies the test keeps until it answers them.
  void RegisterHold() {
    HostCallSpec spec;
    spec.name = "hold";
    spec.handler = [this](const HostCallContext&, const Json& args, HostCallReply reply) {
      held_.emplace_back(args, std::move(reply));
      if (on_hold_) on_hold_();
    };
    ASSERT_TRUE(module_->registry().Register(std::move(spec)));
  }
  void AnswerAll() {
    auto held = std::move(held_);
    held_.clear();
    for (auto& [args, reply] : held) reply.Ok(args);
  }
  // Registers `echo` (answers its argument at once) and adds a flow that awaits `calls` of it in
  // turn and returns their sum.
  FlowRef AddEchoFlow(int calls) {
    HostCallSpec spec;
    spec.name = "echo";
    spec.handler = [](const HostCallContext&, const Json& args, HostCallReply reply) { reply.Ok(args); };
    EXPECT_TRUE(module_->registry().Register(std::move(spec)));
    return Add("export default async function (i, host) {"
               "  let sum = 0; for (let k = 0; k < " + std::to_string(calls) +
                   "; k++) sum += await host.call('echo', k); return sum; }",
               R"({"grants": {"echo": {}}})");
  }
  std::vector<std::pair<Json, HostCallReply>> held_;
  std::function<void()> on_hold_;
};

TEST_F(PoolTest, WorkerIsRetiredAfterItsConfiguredActivationCount) {
  ModuleOptions o;
  o.max_activations_per_worker = 3;
  Open(o);
  FlowRef f = Add(kCounterFlow);
  std::vector<int> seen;
  for (int i = 0; i < 7; ++i) {
    ActivationResult r = module_->Run(f, nullptr);
    ASSERT_TRUE(r.ok()) << r.message;
    seen.push_back(r.result.get<int>());
  }
  EXPECT_EQ(seen, (std::vector<int>{1, 2, 3, 1, 2, 3, 1}));
  Json h = module_->HealthReport();
  EXPECT_EQ(h["spawned"], 3);
  EXPECT_EQ(h["retirements"]["activation_count"], 2);
  EXPECT_EQ(h["workers"]["live"], 1);
  EXPECT_EQ(h["workers"]["idle"], 1);
  EXPECT_EQ(ChildPids().size(), 1u) << "a retired worker's process must be gone";
}

TEST_F(PoolTest, ByDefaultThe256thActivationRetiresTheWorkerAndItsSuccessorIsWelcomedAhead) {
  Open();
  FlowRef f = Add(kCounterFlow);
  int last = 0;
  for (int i = 0; i < 256; ++i) {
    ActivationResult r = module_->Run(f, nullptr);
    ASSERT_TRUE(r.ok()) << r.message;
    last = r.result.get<int>();
  }
  EXPECT_EQ(last, 256) << "one worker ran all 256";
  // The successor was launched when the 256th started: it welcomes and loads with no activation
  // waiting for it (the loop runs until it is idle; no time is measured).
  for (int i = 0; i < 3000 && module_->Health().workers.idle != 1; ++i) module_->RunFor(std::chrono::milliseconds(10));
  Json h = module_->HealthReport();
  EXPECT_EQ(h["retirements"]["activation_count"], 1);
  EXPECT_EQ(h["spawned"], 2) << "the retired worker and its successor";
  EXPECT_EQ(h["refused_welcomes"], 0);
  EXPECT_EQ(h["workers"]["live"], 1);
  EXPECT_EQ(h["workers"]["idle"], 1) << "the successor, welcomed and loaded";
  const std::vector<pid_t> before = ChildPids();
  ASSERT_EQ(before.size(), 1u) << "the retired worker's process is gone; its successor's is there";
  ActivationResult next = module_->Run(f, nullptr);
  ASSERT_TRUE(next.ok()) << next.message;
  EXPECT_EQ(next.result, 1) << "the 257th runs on a fresh worker";
  EXPECT_EQ(module_->HealthReport()["spawned"], 2) << "the 257th took the successor: no launch while it waited";
  EXPECT_EQ(ChildPids(), before);
}

TEST_F(PoolTest, WorkersStartedOnDemandHaveStaggeredCountsAndTheirSuccessorsTheFullCount) {
  ModuleOptions o;
  o.max_activations_per_worker = 16;  // a stagger of 0 or 1 (16 / 8 = 2 values), by launch order
  Open(o);
  FlowRef a = Add(kCounterFlow, "{}", "a.js");
  FlowRef b = Add(kCounterFlow, "{}", "b.js");
  auto run = [&](const FlowRef& f) {
    ActivationResult r = module_->Run(f, nullptr);
    EXPECT_TRUE(r.ok()) << r.message;
    return r.ok() ? r.result.get<int>() : -1;
  };
  std::vector<int> seen_a, seen_b;
  seen_a.push_back(run(a));  // the pool's first worker, started on demand: the full 16
  for (int i = 0; i < 15 + 16 + 2; ++i) seen_b.push_back(run(b));  // the second on demand: 15, then its successors 16
  for (int i = 0; i < 15 + 16; ++i) seen_a.push_back(run(a));
  std::vector<int> expected_a, expected_b;
  for (int life : {16, 16})
    for (int n = 1; n <= life; ++n) expected_a.push_back(n);
  for (int life : {15, 16, 2})
    for (int n = 1; n <= life; ++n) expected_b.push_back(n);
  EXPECT_EQ(seen_a, expected_a) << "the pool's first worker runs 16, its successor 16";
  EXPECT_EQ(seen_b, expected_b) << "the second worker started on demand runs 15, its successors 16";
  EXPECT_EQ(module_->HealthReport()["retirements"]["activation_count"], 4) << "a's two workers, b's first two";
}

TEST_F(PoolTest, AnActivationThatComesWhileTheSuccessorStartsTakesItInsteadOfASecondProcess) {
  ModuleOptions o;
  o.max_activations_per_worker = 1;  // every activation is a worker's last: each starts a successor
  Open(o);
  FlowRef f = Add(kCounterFlow);
  for (int i = 0; i < 20; ++i) {
    ActivationResult r = module_->Run(f, nullptr);
    ASSERT_TRUE(r.ok()) << r.message;
    EXPECT_EQ(r.result, 1);
  }
  Json h = module_->HealthReport();
  // 20 activations, each on its own worker, and one successor after the last: never a second
  // process for an activation that found the successor still starting.
  EXPECT_EQ(h["retirements"]["activation_count"], 20);
  EXPECT_LE(h["spawned"].get<int>(), 21);
  EXPECT_GE(h["spawned"].get<int>(), 20);
  EXPECT_EQ(h["spawn_failures"], 0);
  module_.reset();
  EXPECT_TRUE(ChildPids().empty()) << "closing the module ends the successor, started or starting";
}

TEST_F(PoolTest, ASuccessorStartedAheadHasItsFlowsLimits) {
  ModuleOptions o;
  o.flow_memory_headroom_bytes = 200ull << 20;
  o.max_activations_per_worker = 1;  // the first activation is the worker's last: its successor starts
  Open(o);
  FlowRef f = Add("export default () => 1", R"({"budgets": {"heap_mb": 48}})");
  ASSERT_TRUE(module_->Run(f, nullptr).ok());
  for (int i = 0; i < 3000 && module_->Health().workers.idle != 1; ++i) module_->RunFor(std::chrono::milliseconds(10));
  const std::vector<pid_t> pids = ChildPids();
  ASSERT_EQ(pids.size(), 1u) << "the successor alone";
  EXPECT_EQ(AddressSpaceLimit(pids[0]), (48ull + 200) << 20) << "its flow's heap budget plus the flow headroom";
  EXPECT_EQ(module_->HealthReport()["refused_welcomes"], 0) << "welcomed: its limits passed the kernel-view check";
}

TEST_F(PoolTest, SuccessorsStartedAheadNeverTakeTheWorkerCountPastMaxWorkers) {
  ModuleOptions o;
  o.max_workers = 2;
  o.max_activations_per_worker = 2;
  Open(o);
  size_t most = 0;
  HostCallSpec spec;
  spec.name = "count_workers";
  spec.handler = [&most](const HostCallContext&, const Json&, HostCallReply reply) {
    most = std::max(most, ChildPids().size());  // processes, launched or starting up
    reply.Ok(nullptr);
  };
  ASSERT_TRUE(module_->registry().Register(std::move(spec)));
  const std::string source = "export default async (i, host) => { await host.call('count_workers', {}); return 1; }";
  FlowRef a = Add(source, R"({"grants": {"count_workers": {}}})", "a.js");
  FlowRef b = Add(source, R"({"grants": {"count_workers": {}}})", "b.js");
  int ok = 0;
  for (int i = 0; i < 40; ++i)
    ASSERT_TRUE(module_->Submit(i % 2 ? a : b, nullptr, [&ok](const ActivationResult& r) { ok += r.ok(); }));
  module_->RunUntilIdle();
  EXPECT_EQ(ok, 40);
  EXPECT_GE(most, 1u);
  EXPECT_LE(most, 2u) << "max_workers counts every process, successors started ahead included";
  EXPECT_LE(module_->Health().workers.live, 2u);
  // Retirements by count happened (each started a successor), beside evictions between the flows.
  EXPECT_GT(module_->HealthReport()["retirements"]["activation_count"].get<int>(), 0);
}

// A retired worker's process is killed at once and reaped when the loop sees it exit (the loop does
// not wait for its teardown); until then it counts against max_workers. At a cap of one, the
// successor of a worker retired by count and the next script's codemode spare therefore start
// only once the retired process is reaped, and they do start then: nothing else would start them.
TEST_F(PoolTest, AtACapOfOneTheSuccessorStartsOnceTheRetiredProcessIsReaped) {
  ModuleOptions o;
  o.max_workers = 1;
  o.max_activations_per_worker = 3;
  Open(o);
  FlowRef f = Add(kCounterFlow);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(module_->Run(f, nullptr).ok());
  // The third retired the worker; no activation waits, so only the successor starts a process.
  for (int i = 0; i < 3000 && module_->Health().workers.idle != 1; ++i) module_->RunFor(std::chrono::milliseconds(10));
  Json h = module_->HealthReport();
  EXPECT_EQ(h["retirements"]["activation_count"], 1);
  EXPECT_EQ(h["spawned"], 2) << "the retired worker and its successor, started once the first was reaped";
  EXPECT_EQ(h["workers"]["idle"], 1);
  EXPECT_EQ(ChildPids().size(), 1u);
  ActivationResult r = module_->Run(f, nullptr);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.result, 1) << "the successor";
  EXPECT_EQ(module_->HealthReport()["spawned"], 2);
}

TEST_F(PoolTest, AtACapOfOneTheNextScriptsSpareStartsOnceTheLastScriptsWorkerIsReaped) {
  ModuleOptions o;
  o.max_workers = 1;
  Open(o);
  module_->host().KeepCodemodeSpares(true);
  for (int script = 0; script < 3; ++script) {
    auto flow = module_->AddFlow("s" + std::to_string(script) + ".js", "export default () => 1", "{}", Profile::kCodemode);
    ASSERT_TRUE(flow);
    ActivationResult r = module_->Run(*flow, nullptr);
    ASSERT_TRUE(r.ok()) << r.message;
    ASSERT_TRUE(module_->RemoveFlow(*flow));
    for (int i = 0; i < 3000 && module_->Health().workers.idle != 1; ++i) module_->RunFor(std::chrono::milliseconds(10));
    EXPECT_EQ(module_->Health().workers.idle, 1u) << "script " << script << ": the next script's spare, welcomed";
    const std::vector<pid_t> now = ChildPids();
    ASSERT_EQ(now.size(), 1u) << "script " << script;
    EXPECT_NE(CommandLine(now[0]).find("--started-ahead"), std::string::npos) << CommandLine(now[0]);
  }
  // (At a cap of one the next script's Run evicts the idle spare to make room for its own worker:
  // MakeRoom runs before the spare is looked for. That is not this test's subject.)
}

TEST_F(PoolTest, ClosingTheModuleWithLaunchesInFlightLeavesNoChild) {
  for (int round = 0; round < 5; ++round) {
    Open();
    FlowRef f = Add(kCounterFlow);
    for (int i = 0; i < 8; ++i) ASSERT_TRUE(module_->Submit(f, nullptr, [](const ActivationResult&) {}));
    module_->RunFor(std::chrono::milliseconds(0));  // one pass: eight launches queued on the launch thread
    module_.reset();
    EXPECT_TRUE(ChildPids().empty()) << "round " << round << ": a launch in flight at close left a child (or a zombie)";
  }
}

TEST_F(PoolTest, ACodemodeSpareServesExactlyOneScriptAndTheNextScriptGetsAnother) {
  Open();
  module_->host().KeepCodemodeSpares(true);
  const std::string manifest = R"({"budgets": {"heap_mb": 32}})";
  auto wait_for_spare = [&] {
    for (int i = 0; i < 3000 && module_->Health().workers.idle != 1; ++i) module_->RunFor(std::chrono::milliseconds(10));
  };
  std::vector<pid_t> spares;
  for (int script = 0; script < 3; ++script) {
    // As basal mcp runs a script: a flow of its own, removed when it ends.
    auto flow = module_->AddFlow("s" + std::to_string(script) + ".js",
                                 "export default () => { globalThis.runs = (globalThis.runs || 0) + 1; return globalThis.runs; }",
                                 manifest, Profile::kCodemode);
    ASSERT_TRUE(flow);
    const int spawned_before = module_->HealthReport()["spawned"].get<int>();
    ActivationResult r = module_->Run(*flow, nullptr);
    ASSERT_TRUE(r.ok()) << r.message;
    EXPECT_EQ(r.result, 1) << "script " << script << " ran in a fresh engine";
    ASSERT_TRUE(module_->RemoveFlow(*flow));
    wait_for_spare();
    const std::vector<pid_t> now = ChildPids();
    ASSERT_EQ(now.size(), 1u) << "the script's worker retired with its flow; the next spare waits";
    const Json h = module_->HealthReport();
    EXPECT_EQ(h["retirements"]["flow_removed"], script + 1);
    if (script == 0) {
      EXPECT_EQ(h["spawned"], 2) << "the first script's worker, and a spare for the next";
    } else {
      EXPECT_EQ(h["spawned"].get<int>(), spawned_before + 1) << "script " << script << " took the spare: one launch, for the next";
      EXPECT_EQ(std::count(spares.begin(), spares.end(), now[0]), 0) << "a spare serves one script, never two";
      // The spare the script took was killed with its flow.
      EXPECT_EQ(std::count(now.begin(), now.end(), spares.back()), 0);
    }
    // Started ahead of its script: it makes its engine while it waits (the worker's --started-ahead).
    EXPECT_NE(CommandLine(now[0]).find("--started-ahead"), std::string::npos) << CommandLine(now[0]);
    spares.push_back(now[0]);
  }
  // Another policy's limits (heap budget): not served by this spare.
  auto other = module_->AddFlow("big.js", "export default () => 2", R"({"budgets": {"heap_mb": 48}})", Profile::kCodemode);
  ASSERT_TRUE(other);
  const int spawned_before = module_->HealthReport()["spawned"].get<int>();
  ActivationResult r = module_->Run(*other, nullptr);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_GE(module_->HealthReport()["spawned"].get<int>(), spawned_before + 1);
  const std::vector<pid_t> after = ChildPids();
  EXPECT_EQ(std::count(after.begin(), after.end(), spares.back()), 1) << "the spare of other limits stays for its own";
}

TEST_F(PoolTest, IdleWorkerIsRetiredAfterTheConfiguredPeriodAndItsProcessEnds) {
  ModuleOptions o;
  o.idle_retire = std::chrono::milliseconds(100);
  Open(o);
  FlowRef f = Add(kCounterFlow);
  ASSERT_TRUE(module_->Run(f, nullptr).ok());
  EXPECT_EQ(module_->HealthReport()["workers"]["idle"], 1);
  ASSERT_EQ(ChildPids().size(), 1u);
  // RunFor drives the loop past the idle period; the worker's timer fires inside it.
  module_->RunFor(std::chrono::milliseconds(400));
  Json h = module_->HealthReport();
  EXPECT_EQ(h["retirements"]["idle"], 1);
  EXPECT_EQ(h["workers"]["live"], 0);
  EXPECT_TRUE(ChildPids().empty());
  ActivationResult r = module_->Run(f, nullptr);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.result, 1) << "a fresh worker after idle retirement";
}

TEST_F(PoolTest, AWorkerIdlePastItsPeriodWhileNoLoopRanIsRetiredNotReused) {
  ModuleOptions o;
  o.idle_retire = std::chrono::milliseconds(50);
  Open(o);
  FlowRef f = Add(kCounterFlow);
  ASSERT_TRUE(module_->Run(f, nullptr).ok());
  // The embedder does not drive the loop for a while (no RunFor): the timer cannot fire then.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ActivationResult r = module_->Run(f, nullptr);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.result, 1) << "the stale worker must not be reused";
  EXPECT_EQ(module_->HealthReport()["retirements"]["idle"], 1);
}

TEST_F(PoolTest, AWorkerBusierThanTheIdlePeriodIsNotRetired) {
  ModuleOptions o;
  o.idle_retire = std::chrono::milliseconds(10'000);
  Open(o);
  FlowRef f = Add(kCounterFlow);
  ASSERT_TRUE(module_->Run(f, nullptr).ok());
  module_->RunFor(std::chrono::milliseconds(50));
  ActivationResult r = module_->Run(f, nullptr);
  EXPECT_EQ(r.result, 2);
  EXPECT_EQ(module_->HealthReport()["retirements"]["idle"], 0);
}

// The idle timer stays armed while the worker works (no timer per activation): when the one armed
// in an earlier idle spell fires during a later one, it waits for the later spell's full period.
TEST_F(PoolTest, AnIdleTimerArmedInAnEarlierIdleSpellWaitsForTheFullPeriodOfTheLaterOne) {
  ModuleOptions o;
  o.idle_retire = std::chrono::milliseconds(4000);
  Open(o);
  FlowRef f = Add(kCounterFlow);
  ASSERT_TRUE(module_->Run(f, nullptr).ok());
  module_->RunFor(std::chrono::milliseconds(2000));
  ActivationResult second = module_->Run(f, nullptr);
  ASSERT_TRUE(second.ok()) << second.message;
  EXPECT_EQ(second.result, 2);
  // Past the first spell's end (4 s after the first activation), a second short of the second's.
  module_->RunFor(std::chrono::milliseconds(3000));
  EXPECT_EQ(module_->HealthReport()["retirements"]["idle"], 0);
  EXPECT_EQ(ChildPids().size(), 1u);
  module_->RunFor(std::chrono::milliseconds(2000));
  EXPECT_EQ(module_->HealthReport()["retirements"]["idle"], 1);
  EXPECT_TRUE(ChildPids().empty());
}

// Scripts that exhaust a budget: allocating until the heap budget refuses, recursing until the
// stack budget does.
constexpr const char* kGrowHeap = "const keep = []; for (;;) keep.push(new Array(65536).fill(0));";
constexpr const char* kRecurse = "function deep(k) { return deep(k + 1) + 1; } return deep(0);";

// A flow that counts its activations (`n`, which says which worker ran it) and runs `body`;
// with `catch_it` it catches the failure and returns {n, caught}.
std::string Exhausting(const std::string& body, bool catch_it) {
  return "let n = 0; export default function () { n += 1; " +
         (catch_it ? "try { " + body + " } catch (e) { return {n, caught: String(e)}; }" : body) + " }";
}

TEST_F(PoolTest, CaughtMemoryFailureCompletesAndTheWorkerIsReused) {
  Open();
  FlowRef f = Add(Exhausting(kGrowHeap, true), R"({"budgets": {"heap_mb": 16}})");
  ActivationResult a = module_->Run(f, nullptr);
  ASSERT_TRUE(a.ok()) << a.message;
  EXPECT_EQ(a.result["n"], 1);
  EXPECT_NE(a.result["caught"].get<std::string>().find("out of memory"), std::string::npos) << a.result;
  ActivationResult b = module_->Run(f, nullptr);
  ASSERT_TRUE(b.ok()) << b.message;
  EXPECT_EQ(b.result["n"], 2) << "the same worker ran both";
  Json h = module_->HealthReport();
  EXPECT_EQ(h["spawned"], 1);
  EXPECT_EQ(h["retirements"]["budget"], 0);
  EXPECT_EQ(h["activations"]["ok"], 2);
  EXPECT_EQ(h["caught_budget_failures"], 2);
}

TEST_F(PoolTest, MemoryFailureCaughtButFollowedByAnotherErrorStillRetiresTheWorker) {
  Open();
  FlowRef f = Add(std::string("export default function () { try { ") + kGrowHeap +
                     " } catch (e) { throw new TypeError('gave up'); } }",
                 R"({"budgets": {"heap_mb": 16}})");
  ActivationResult a = module_->Run(f, nullptr);
  EXPECT_EQ(a.outcome, Outcome::kBudgetExhausted) << a.message;
  EXPECT_EQ(a.budget, Budget::kMemory);
  EXPECT_NE(a.message.find("caught it, then failed with TypeError: gave up"), std::string::npos) << a.message;
  Json h = module_->HealthReport();
  EXPECT_EQ(h["retirements"]["budget"], 1);
  EXPECT_EQ(h["caught_budget_failures"], 0);
}

// A spare made its engine before its script came; the script's budgets are in force all the same:
// its heap budget (what the engine made ahead counts against it) and a fresh engine (nothing of
// another script). A worker started on demand is not started ahead.
TEST_F(PoolTest, AScriptOnASpareThatMadeItsEngineAheadRunsUnderItsOwnHeapBudget) {
  Open();
  module_->host().KeepCodemodeSpares(true);
  const std::string manifest = R"({"budgets": {"heap_mb": 16}})";
  auto first = module_->AddFlow("first.js", "export default () => { const t = Date.now(); while (Date.now() - t < 400); return 1; }",
                                manifest, Profile::kCodemode);
  ASSERT_TRUE(first);
  ASSERT_EQ(ChildPids().size(), 0u);
  std::optional<ActivationResult> r;
  ASSERT_TRUE(module_->Submit(*first, nullptr, [&r](const ActivationResult& got) { r = got; }));
  for (int i = 0; i < 3000 && module_->Health().workers.busy != 1; ++i) module_->RunFor(std::chrono::milliseconds(5));
  module_->RunFor(std::chrono::milliseconds(100));
  // No spare starts beside a running script: it would take the CPUs the script runs on.
  EXPECT_EQ(ChildPids().size(), 1u) << "only the script's own worker while it runs";
  while (!r) module_->RunFor(std::chrono::milliseconds(10));
  ASSERT_TRUE(r->ok()) << r->message;
  ASSERT_TRUE(module_->RemoveFlow(*first));
  for (int i = 0; i < 3000 && module_->Health().workers.idle != 1; ++i) module_->RunFor(std::chrono::milliseconds(10));
  const std::vector<pid_t> spare = ChildPids();
  ASSERT_EQ(spare.size(), 1u);
  ASSERT_NE(CommandLine(spare[0]).find("--started-ahead"), std::string::npos) << CommandLine(spare[0]);
  // The spare's engine is made: its RSS holds a runtime and a context before any script came.
  const int spawned = module_->HealthReport()["spawned"].get<int>();
  auto greedy = module_->AddFlow("greedy.js", Exhausting(kGrowHeap, false), manifest, Profile::kCodemode);
  ASSERT_TRUE(greedy);
  ActivationResult g = module_->Run(*greedy, nullptr);
  // Its worker retired on the budget; the next script's spare starts then (in the agent's turn).
  for (int i = 0; i < 3000 && module_->Health().workers.idle != 1; ++i) module_->RunFor(std::chrono::milliseconds(10));
  EXPECT_EQ(module_->HealthReport()["spawned"].get<int>(), spawned + 1) << "the script took the spare; one launch for the next";
  EXPECT_EQ(g.outcome, Outcome::kBudgetExhausted) << g.message;
  EXPECT_EQ(g.budget, Budget::kMemory);
  EXPECT_NE(g.message.find("16 MiB"), std::string::npos) << g.message;
  ASSERT_TRUE(module_->RemoveFlow(*greedy));
  // A flow's worker, started on demand, is not started ahead.
  FlowRef f = Add("export default () => 2");
  ActivationResult a = module_->Run(f, nullptr);
  ASSERT_TRUE(a.ok()) << a.message;
  size_t on_demand = 0;
  for (pid_t pid : ChildPids())
    if (CommandLine(pid).find("--started-ahead") == std::string::npos) ++on_demand;
  EXPECT_GE(on_demand, 1u);
}

TEST_F(PoolTest, UncaughtMemoryFailureIsABudgetExhaustionAndRetiresTheWorker) {
  Open();
  FlowRef f = Add(Exhausting(kGrowHeap, false), R"({"budgets": {"heap_mb": 16}})");
  ActivationResult a = module_->Run(f, nullptr);
  EXPECT_EQ(a.outcome, Outcome::kBudgetExhausted) << a.message;
  EXPECT_EQ(a.budget, Budget::kMemory);
  EXPECT_NE(a.message.find("16 MiB"), std::string::npos) << a.message;
  Json h = module_->HealthReport();
  EXPECT_EQ(h["retirements"]["budget"], 1);
  EXPECT_EQ(h["workers"]["live"], 0);
  EXPECT_EQ(h["activations"]["failed_by_kind"]["budget_exhausted"], 1);
  EXPECT_TRUE(ChildPids().empty());
  auto rows = Reader()->Activations(a.activation_id, 1);
  ASSERT_TRUE(rows);
  EXPECT_EQ((*rows)[0].outcome, "budget_exhausted");
  // The flow's next activation gets a fresh worker (its module state starts over) and fails
  // the same way, again retiring it.
  ActivationResult b = module_->Run(f, nullptr);
  EXPECT_EQ(b.budget, Budget::kMemory);
  EXPECT_EQ(module_->HealthReport()["spawned"], 2);
}

TEST_F(PoolTest, UncaughtStackOverflowIsABudgetExhaustionNamingStackAndRetires) {
  Open();
  FlowRef f = Add(Exhausting(kRecurse, false), R"({"budgets": {"stack_kb": 128}})");
  ActivationResult a = module_->Run(f, nullptr);
  EXPECT_EQ(a.outcome, Outcome::kBudgetExhausted) << a.message;
  EXPECT_EQ(a.budget, Budget::kStack);
  Json h = module_->HealthReport();
  EXPECT_EQ(h["retirements"]["budget"], 1);
  EXPECT_TRUE(ChildPids().empty());
}

TEST_F(PoolTest, CaughtStackOverflowCompletesAndTheWorkerIsReused) {
  Open();
  FlowRef f = Add(Exhausting(kRecurse, true), R"({"budgets": {"stack_kb": 128}})");
  ActivationResult a = module_->Run(f, nullptr);
  ASSERT_TRUE(a.ok()) << a.message;
  EXPECT_NE(a.result["caught"].get<std::string>().find("stack overflow"), std::string::npos) << a.result;
  ActivationResult b = module_->Run(f, nullptr);
  ASSERT_TRUE(b.ok()) << b.message;
  EXPECT_EQ(b.result["n"], 2);
  EXPECT_EQ(module_->HealthReport()["spawned"], 1);
  EXPECT_EQ(module_->HealthReport()["retirements"]["budget"], 0);
}

// A worker still launching has no process yet. The module's CPU check can come due before the
// launch thread's result reaches the loop (a flow with a small budget, a machine under load: the
// check's timer runs before the loop takes the launch's result, in the same pass); it asks the pool
// whether the process has exited and what CPU it used. Both must answer for a worker with no
// process (not exited, none used) rather than reach for the process it does not have yet (a
// SIGSEGV of the parent, seen at load 6 in PoolTest.CpuExhaustion... below).
TEST(PoolLaunching, AWorkerStillLaunchingHasNotExitedAndUsedNoCpu) {
  struct Owner : PoolOwner {
    void OnWorkerReady(PooledWorker&) override {}
    void OnWorkerMessage(PooledWorker&, protocol::WorkerMessage&) override {}
    void OnWorkerLost(PooledWorker&, ActivationResult) override {}
    void OnWorkerDrained(PooledWorker&) override {}
    void OnEvent(ModuleEvent) override {}
  } owner;
  auto loop = EventLoop::Create();
  ASSERT_TRUE(loop) << loop.error().message;
  std::unique_ptr<WorkerLauncher> launcher = WorkerLauncher::ForThisPlatform();
  HealthSnapshot health;
  PoolOptions po{};
  po.worker_path = BASAL_WORKER_PATH;
  po.welcome_timeout = std::chrono::seconds(5);
  po.max_workers = 1;
  po.max_activations_per_worker = 256;
  po.idle_retire = std::chrono::seconds(60);
  po.cpu_grace = std::chrono::milliseconds(100);
  po.idle_cpu_max = std::chrono::milliseconds(10);
  Pool pool(po, **loop, *launcher, health, owner);
  auto flow = std::make_shared<Flow>();
  flow->name = "t.js";
  auto w = pool.Spawn(flow, nullptr);
  ASSERT_TRUE(w) << w.error().message;
  // The loop never runs here, so the launch's result is never attached: the worker stays launching.
  EXPECT_FALSE(pool.HasExited(**w));
  EXPECT_EQ(pool.CpuOf(**w), std::chrono::nanoseconds(0));
  EXPECT_EQ(pool.Live(), 1u);
}

TEST_F(PoolTest, CpuExhaustionRetiresAndTheNextActivationRunsOnAFreshWorker) {
  Open();
  FlowRef f = Add("let n = 0; export default function (i) { n += 1; if (i.spin) for (;;) {} return n; }",
                 R"({"budgets": {"cpu_ms": 50}})");
  EXPECT_EQ(module_->Run(f, {{"spin", false}}).result, 1);
  EXPECT_EQ(module_->Run(f, {{"spin", false}}).result, 2);
  ActivationResult spun = module_->Run(f, {{"spin", true}});
  EXPECT_EQ(spun.budget, Budget::kCpu);
  EXPECT_NE(spun.message.find("50 ms"), std::string::npos) << spun.message;
  EXPECT_EQ(module_->Run(f, {{"spin", false}}).result, 1);
  Json h = module_->HealthReport();
  EXPECT_EQ(h["spawned"], 2);
  EXPECT_EQ(h["retirements"]["budget"], 1);
}

TEST_F(PoolTest, TheDeadlineKillsALoopWhoseCpuBudgetIsLargerAndTheFlowGoesOn) {
  Open();
  FlowRef f = Add("let n = 0; export default function (i) { n += 1; if (i.spin) for (;;) {} return n; }",
                 R"({"budgets": {"cpu_ms": 600000, "deadline_ms": 200}})");
  ActivationResult spun = module_->Run(f, {{"spin", true}});
  EXPECT_EQ(spun.outcome, Outcome::kDeadline) << spun.message;
  EXPECT_NE(spun.message.find("200 ms"), std::string::npos) << spun.message;
  EXPECT_TRUE(ChildPids().empty()) << "the killed worker was reaped";
  EXPECT_EQ(module_->Run(f, {{"spin", false}}).result, 1) << "a fresh worker";
  Json h = module_->HealthReport();
  EXPECT_EQ(h["deadline_kills"], 1);
  EXPECT_EQ(h["activations"]["failed_by_kind"]["deadline"], 1);
  EXPECT_TRUE(h["crashes"].empty()) << "a deadline kill is not a crash: " << h["crashes"];
}

// The deadline and the CPU check share one timer (Module::Impl::ArmBudgets): a worker that waits
// (no CPU spent) passes several CPU checks, each of which arms the timer again, and the deadline
// still ends it, as its own timer did.
TEST_F(PoolTest, CpuChecksThatFindAWaitingWorkerUnderItsBudgetLeaveItsDeadlineInForce) {
  Open();
  std::vector<HostCallReply> kept;
  HostCallSpec spec;
  spec.name = "forever";
  spec.handler = [&kept](const HostCallContext&, const Json&, HostCallReply reply) { kept.push_back(std::move(reply)); };
  ASSERT_TRUE(module_->registry().Register(std::move(spec)));
  // The first CPU check is due after cpu_ms + cpu_grace (1 + 100 ms), then about as often: two or
  // more before the 400 ms deadline.
  FlowRef f = Add("export default async function (i, host) { await host.call('forever', {}); return 1; }",
                 R"({"grants": {"forever": {}}, "budgets": {"cpu_ms": 1, "deadline_ms": 400}})");
  ActivationResult r = module_->Run(f, nullptr);
  EXPECT_EQ(r.outcome, Outcome::kDeadline) << r.message;
  EXPECT_NE(r.message.find("400 ms"), std::string::npos) << r.message;
  Json h = module_->HealthReport();
  EXPECT_EQ(h["deadline_kills"], 1);
  EXPECT_EQ(h["cpu_kills"], 0);
  EXPECT_TRUE(ChildPids().empty()) << "the killed worker was reaped";
}

TEST_F(PoolTest, ConcurrentActivationsOfOneFlowRunOnSeparateWorkers) {
  Open();
  RegisterHold();
  // Each worker draws its own id once; the held call only returns once all three are in flight,
  // which could not happen if they shared a worker.
  FlowRef f = Add(
      "const id = Math.random(); "
      "export default async function (i, host) { await host.call('hold', {}); return id; }",
      R"({"grants": {"hold": {}}, "budgets": {"deadline_ms": 20000}})");
  Json during;
  on_hold_ = [&] {
    if (held_.size() == 3) {
      during = module_->HealthReport();
      AnswerAll();
    }
  };
  std::vector<ActivationResult> results;
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(module_->Submit(f, nullptr, [&](const ActivationResult& r) { results.push_back(r); }));
  module_->RunUntilIdle();
  ASSERT_EQ(results.size(), 3u);
  std::set<double> ids;
  for (const auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.message;
    ids.insert(r.result.get<double>());
  }
  EXPECT_EQ(ids.size(), 3u);
  EXPECT_EQ(during["workers"]["busy"], 3);
  EXPECT_EQ(during["workers"]["per_flow"]["t.js"]["busy"], 3);
  EXPECT_EQ(during["queue_length"], 0);
  Json after = module_->HealthReport();
  EXPECT_EQ(after["workers"]["idle"], 3);
  EXPECT_EQ(after["spawned"], 3);
}

TEST_F(PoolTest, TheGlobalCapQueuesTheRestAndTheyRunWhenAWorkerFrees) {
  ModuleOptions o;
  o.max_workers = 2;
  Open(o);
  RegisterHold();
  FlowRef f = Add("let n = 0; export default async function (i, host) { n += 1; await host.call('hold', i); return n; }",
                 R"({"grants": {"hold": {}}})");
  Json during;
  // The first two calls are held until both workers are inside one; later calls return at once.
  on_hold_ = [&] {
    if (during.is_null() && held_.size() < 2) return;
    if (during.is_null()) during = module_->HealthReport();
    AnswerAll();
  };
  std::vector<int> order;
  std::vector<int> counts;
  for (int i = 0; i < 5; ++i)
    EXPECT_TRUE(module_->Submit(f, {{"i", i}}, [&, i](const ActivationResult& r) {
      ASSERT_TRUE(r.ok()) << r.message;
      order.push_back(i);
      counts.push_back(r.result.get<int>());
    }));
  module_->RunUntilIdle();
  ASSERT_EQ(order.size(), 5u);
  EXPECT_EQ(during["workers"]["live"], 2);
  EXPECT_EQ(during["workers"]["busy"], 2);
  EXPECT_EQ(during["queue_length"], 3);
  Json after = module_->HealthReport();
  EXPECT_EQ(after["spawned"], 2) << "the cap held: queued activations reused the two workers";
  EXPECT_EQ(after["queue_length"], 0);
  EXPECT_EQ(after["activations"]["ok"], 5);
  EXPECT_EQ(std::count(counts.begin(), counts.end(), 1), 2) << "exactly two workers ever started counting";
}

TEST_F(PoolTest, AtTheCapAnIdleWorkerOfAnotherFlowIsEvictedForAQueuedOne) {
  ModuleOptions o;
  o.max_workers = 1;
  Open(o);
  RegisterHold();
  FlowRef a = Add("export default async function (i, host) { await host.call('hold', {}); return 'a'; }",
                 R"({"grants": {"hold": {}}})", "a.js");
  FlowRef b = Add("export default function () { return 'b'; }", "{}", "b.js");
  Json during;
  on_hold_ = [&] {
    during = module_->HealthReport();
    AnswerAll();
  };
  std::vector<std::string> finished;
  EXPECT_TRUE(module_->Submit(a, nullptr, [&](const ActivationResult& r) { finished.push_back(r.result.get<std::string>()); }));
  EXPECT_TRUE(module_->Submit(b, nullptr, [&](const ActivationResult& r) { finished.push_back(r.result.get<std::string>()); }));
  module_->RunUntilIdle();
  EXPECT_EQ(finished, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(during["queue_length"], 1) << during;
  EXPECT_EQ(during["workers"]["per_flow"]["a.js"]["busy"], 1);
  EXPECT_EQ(during["workers"]["per_flow"]["b.js"]["live"], 0);
  Json after = module_->HealthReport();
  EXPECT_EQ(after["retirements"]["evicted"], 1);
  EXPECT_EQ(after["workers"]["per_flow"]["a.js"]["live"], 0);
  EXPECT_EQ(after["workers"]["per_flow"]["b.js"]["idle"], 1);
  EXPECT_EQ(ChildPids().size(), 1u);
}

TEST_F(PoolTest, TheWorkersAddressSpaceIsCappedAtTheHeapBudgetPlusTheProfilesHeadroom) {
  ModuleOptions o;
  o.flow_memory_headroom_bytes = 200ull << 20;
  o.codemode_memory_headroom_bytes = 100ull << 20;
  o.max_activations_per_worker = 1;  // so the one child during each call is that call's worker:
  o.max_workers = 1;                 // at the cap, no successor is started beside it
  Open(o);
  RegisterHold();
  const std::string source = "export default async function (i, host) { await host.call('hold', {}); return 1; }";
  const std::string manifest = R"({"grants": {"hold": {}}, "budgets": {"heap_mb": 32}})";
  auto flow = module_->AddFlow("f.js", source, manifest, Profile::kFlow);
  auto codemode = module_->AddFlow("c.js", source, manifest, Profile::kCodemode);
  ASSERT_TRUE(flow && codemode);
  std::vector<uint64_t> limits;
  on_hold_ = [&] {
    const auto pids = ChildPids();
    EXPECT_EQ(pids.size(), 1u);
    if (!pids.empty()) limits.push_back(AddressSpaceLimit(pids.back()));
    AnswerAll();
  };
  EXPECT_TRUE(module_->Run(*flow, nullptr).ok());
  EXPECT_TRUE(module_->Run(*codemode, nullptr).ok());
  EXPECT_EQ(limits, (std::vector<uint64_t>{(32ull + 200) << 20, (32ull + 100) << 20}));
}

TEST_F(PoolTest, ClosingTheModuleEndsRunningAndQueuedActivationsInTheJournal) {
  ModuleOptions o;
  o.max_workers = 1;
  Open(o);
  RegisterHold();
  FlowRef f = Add("export default async function (i, host) { await host.call('hold', {}); return 1; }",
                 R"({"grants": {"hold": {}}})");
  int callbacks = 0;
  const int64_t running = *module_->Submit(f, nullptr, [&](const ActivationResult&) { ++callbacks; });
  const int64_t queued = *module_->Submit(f, nullptr, [&](const ActivationResult&) { ++callbacks; });
  // Bounded: a worker that never starts must fail this test, not hang it.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (held_.empty() && std::chrono::steady_clock::now() < give_up) module_->RunFor(std::chrono::milliseconds(10));
  ASSERT_FALSE(held_.empty()) << "the running activation never made its host call";
  ASSERT_EQ(module_->HealthReport()["queue_length"], 1);
  HostCallReply late = std::move(held_.front().second);
  held_.clear();
  module_.reset();
  late.Ok(1);  // an answer after the module is gone goes nowhere
  EXPECT_EQ(callbacks, 0) << "callbacks are not run from the destructor";
  EXPECT_TRUE(ChildPids().empty());
  auto journal = Reader();
  for (int64_t id : {running, queued}) {
    auto rows = journal->Activations(id, 1);
    ASSERT_TRUE(rows);
    ASSERT_EQ(rows->size(), 1u);
    EXPECT_EQ((*rows)[0].outcome, "cancelled") << id;
    EXPECT_NE((*rows)[0].error_json.find(id == running ? "while the activation ran" : "before the activation started"),
              std::string::npos)
        << (*rows)[0].error_json;
  }
  auto calls = journal->Calls(running);
  ASSERT_TRUE(calls);
  ASSERT_EQ(calls->size(), 1u);
  EXPECT_NE((*calls)[0].error_json.find("ActivationEnded"), std::string::npos);
}

TEST_F(PoolTest, BusyPollingOnOrOffServesTheSameCallsAndActivations) {
  for (const auto poll : {std::chrono::microseconds(0), std::chrono::microseconds(5'000)}) {
    module_.reset();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directory(dir_);
    ModuleOptions o;
    o.busy_poll = poll;
    Open(o);
    FlowRef f = AddEchoFlow(20);
    std::vector<ActivationResult> results;
    for (int k = 0; k < 3; ++k) EXPECT_TRUE(module_->Submit(f, nullptr, [&](const ActivationResult& r) { results.push_back(r); }));
    module_->RunUntilIdle();
    ASSERT_EQ(results.size(), 3u) << poll.count();
    for (const auto& r : results) {
      ASSERT_TRUE(r.ok()) << poll.count() << ": " << r.message;
      EXPECT_EQ(r.result, 190);
      auto calls = Reader()->Calls(r.activation_id);
      ASSERT_TRUE(calls);
      EXPECT_EQ(calls->size(), 20u);
    }
  }
}

// The worker polls its stdin before it blocks on it (src/worker/wait_spin.h): at most 50 us a
// wait, so a worker left idle after a stretch of quick frames (the window at its largest) uses no
// CPU to speak of while it sits there. A poll that did not stop would burn the whole idle spell.
TEST_F(PoolTest, AWorkerThatPolledForQuickFramesUsesNoCpuWhileItSitsIdle) {
  Open();
  FlowRef f = AddEchoFlow(50);
  for (int k = 0; k < 20; ++k) {  // answers and activations that come at once: the window grows
    const ActivationResult r = module_->Run(f, nullptr);
    ASSERT_TRUE(r.ok()) << r.message;
    EXPECT_EQ(r.result, 1225);
  }
  const std::vector<pid_t> workers = ChildPids();
  ASSERT_EQ(workers.size(), 1u);
  const auto on_cpu = [&] { return OnCpuNs(workers[0]); };
  const uint64_t before = on_cpu();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const uint64_t idle_ns = on_cpu() - before;
  // Nothing was sent to it: no wait began, so it polled at most the rest of its last one (50 us).
  EXPECT_LT(idle_ns, 5'000'000u) << "the idle worker ran " << idle_ns / 1000 << " us in 500 ms";
  // And it still answers at once.
  const ActivationResult again = module_->Run(f, nullptr);
  ASSERT_TRUE(again.ok()) << again.message;
  EXPECT_EQ(again.result, 1225);
}

// The polling worker yields between two looks at its stdin (channel.cpp): with the parent on the
// same CPU (the scheduler packs a waker and its wakee together on the VMs basal runs on; pinned
// here), the parent, woken by the worker's last frame, runs at once and writes the next one. A
// worker that spun its whole window instead kept the parent off that CPU for it every time: each
// of these activations then cost the worker's 50 us window on top of its own work (warm activations
// of about 85 us; docs/performance.md, "Issue 30: the polling worker yields, and the loop polls
// through a fetch").
TEST_F(PoolTest, APollingWorkerOnTheParentsCpuLetsTheParentRun) {
  if (cpu_set_t all; sched_getaffinity(0, sizeof all, &all) != 0 || CPU_COUNT(&all) < 2)
    GTEST_SKIP() << "one CPU: the parent never lets a worker poll";
  ModuleOptions o;  // opened seeing every CPU: its workers may poll while fewer are busy
  o.max_activations_per_worker = 1'000;  // one worker runs them all
  Open(o);
  FlowRef f = Add("export default () => 1");
  ASSERT_TRUE(module_->Run(f, nullptr).ok());
  const std::vector<pid_t> workers = ChildPids();
  ASSERT_EQ(workers.size(), 1u);
  cpu_set_t before_pin;
  ASSERT_EQ(sched_getaffinity(0, sizeof before_pin, &before_pin), 0);
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(sched_getcpu(), &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);  // this thread runs the module's loop
  ASSERT_EQ(sched_setaffinity(workers[0], sizeof one, &one), 0);
  const auto on_cpu = [&] { return OnCpuNs(workers[0]); };
  constexpr int kActivations = 400;
  const uint64_t start = on_cpu();
  for (int k = 0; k < kActivations; ++k) {
    const ActivationResult r = module_->Run(f, nullptr);
    ASSERT_TRUE(r.ok()) << r.message;
  }
  const uint64_t per_activation_ns = (on_cpu() - start) / kActivations;
  ASSERT_EQ(sched_setaffinity(0, sizeof before_pin, &before_pin), 0);
  // Its own work is a few microseconds; a worker that waited out its window every time took 50 more.
  EXPECT_LT(per_activation_ns, 25'000u) << "the worker ran " << per_activation_ns / 1000 << " us per activation";
  EXPECT_EQ(ChildPids(), workers) << "the same worker ran them all";
}

// An answer that takes longer than the worker polls for it (an http.fetch; here a handler that
// answers from another thread 2 ms later) is announced by a `poll` message before the parent
// journals and commits it (CallGateHooks::answer_late): the real worker, blocked in its read
// mid-activation, takes it and polls for the answer that follows.
TEST_F(PoolTest, TheWorkerTakesAPollMidActivationAndGetsTheLateAnswerAfterIt) {
  Open();
  HostCallSpec spec;
  spec.name = "slow";
  spec.handler = [](const HostCallContext&, const Json& args, HostCallReply reply) {
    std::thread([args, reply = std::move(reply)]() mutable {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      reply.Ok(args);
    }).detach();
  };
  ASSERT_TRUE(module_->registry().Register(std::move(spec)));
  FlowRef f = Add("export default async function (n, host) {"
                  "  let sum = 0; for (let k = 0; k < n; k++) sum += await host.call('slow', k); return sum; }",
                  R"({"grants": {"slow": {}}})");
  for (int k = 0; k < 3; ++k) {
    const ActivationResult r = module_->Run(f, 10);
    ASSERT_TRUE(r.ok()) << r.message;
    EXPECT_EQ(r.result, 45);
  }
  EXPECT_EQ(module_->HealthReport()["spawned"], 1) << "one worker ran them all: none ended in a protocol fault";
}

// The loop polls before it sleeps while some workers are busy: alone on its CPU while fewer are busy
// than there are CPUs (a spin), yielding between two looks once every CPU has a busy worker or
// more (it would otherwise sleep after each frame and be woken on an idle CPU for the next; a
// worker the scheduler put on the loop's CPU runs first; pool.cpp). With one CPU it sleeps.
TEST(BusyPollForTest, SpinsWhileACpuIsFreeAndYieldsWhileEveryCpuIsBusy) {
  using P = EventLoop::BusyPoll;
  EXPECT_EQ(BusyPollFor(0, 2), P::kNo) << "nothing is coming";
  EXPECT_EQ(BusyPollFor(1, 2), P::kSpin);
  EXPECT_EQ(BusyPollFor(2, 2), P::kYielding);
  EXPECT_EQ(BusyPollFor(3, 2), P::kYielding) << "a backlog: more busy than CPUs";
  EXPECT_EQ(BusyPollFor(8, 2), P::kYielding);
  EXPECT_EQ(BusyPollFor(3, 4), P::kSpin);
  EXPECT_EQ(BusyPollFor(4, 4), P::kYielding);
  EXPECT_EQ(BusyPollFor(0, 1), P::kNo);
  EXPECT_EQ(BusyPollFor(1, 1), P::kNo) << "one CPU: the loop sleeps while its worker runs";
  EXPECT_EQ(BusyPollFor(5, 1), P::kNo);
}

TEST_F(PoolTest, HealthReportHasEveryFieldAnOperatorReads) {
  Open();
  FlowRef f = Add(kCounterFlow, "{}", "counted.js");
  Add("export default () => 0", "{}", "never.js");
  ASSERT_TRUE(module_->Run(f, nullptr).ok());
  Json h = module_->HealthReport();
  for (const char* key : {"workers", "activations", "retirements", "deadline_kills", "worker_confinement", "fatal_status_deaths",
                          "refused_welcomes", "confinement_refusals", "crashes", "protocol_violations", "spawned", "spawn_failures",
                          "denied_calls", "journal_failures", "caught_budget_failures", "queue_length"})
    EXPECT_TRUE(h.contains(key)) << key;
  for (const char* key : {"activation_count", "idle", "budget", "evicted", "load_failed"}) EXPECT_EQ(h["retirements"][key], 0) << key;
  EXPECT_EQ(h["workers"]["per_flow"]["counted.js"], Json::parse(R"({"live":1,"idle":1,"busy":0})"));
  EXPECT_EQ(h["workers"]["per_flow"]["never.js"], Json::parse(R"({"live":0,"idle":0,"busy":0})"));
  EXPECT_EQ(h["activations"], Json::parse(R"({"ok":1,"parked":0,"failed":0,"failed_by_kind":{}})"));
  EXPECT_TRUE(h["crashes"].is_object());
}

// Under a backlog (one worker, many queued) the module groups the journal's commits across loop
// passes. Whoever hears of an end must still find it in the journal, read from another
// connection, as `basal journal` does: an end is never told before its commit.
TEST_F(PoolTest, UnderABacklogEveryEndIsCommittedBeforeItsCallerHears) {
  ModuleOptions o;
  o.max_workers = 1;
  Open(o);
  FlowRef f = Add("export default (n) => n * 2");
  auto reader = Reader();
  ASSERT_NE(reader, nullptr);
  const int n = 300;
  int heard = 0, committed = 0;
  std::string first_uncommitted;
  for (int i = 0; i < n; ++i) {
    auto id = module_->Submit(f, i, [&, i](const ActivationResult& r) {
      ++heard;
      ASSERT_TRUE(r.ok()) << r.message;
      EXPECT_EQ(r.result, i * 2);
      auto rows = reader->Activations(r.activation_id, 1);
      ASSERT_TRUE(rows) << rows.error().message;
      if (rows->size() == 1 && rows->front().outcome == "ok" && rows->front().result_json == std::to_string(i * 2)) {
        ++committed;
      } else if (first_uncommitted.empty()) {
        first_uncommitted = "activation " + std::to_string(r.activation_id) + " was heard of before its end was committed";
      }
    });
    ASSERT_TRUE(id) << id.error().message;
  }
  module_->RunUntilIdle();
  EXPECT_EQ(heard, n);
  EXPECT_EQ(committed, n) << first_uncommitted;
}

// An external call's handler runs only once its `started` record is committed. Under a backlog
// that commit may be grouped with later passes' work, but never past the point where the loop
// would wait: were it held, this handler would never run and RunUntilIdle would never return
// (the test's timeout fails it).
TEST_F(PoolTest, UnderABacklogAGroupedBatchIsCommittedBeforeTheLoopWaits) {
  ModuleOptions o;
  o.max_workers = 1;
  Open(o);
  auto reader = Reader();
  ASSERT_NE(reader, nullptr);
  int ran = 0, started_visible = 0;
  HostCallSpec spec;
  spec.name = "effect";  // external by default: journaled as started, committed, then run
  spec.handler = [&](const HostCallContext& ctx, const Json& args, HostCallReply reply) {
    ++ran;
    auto calls = reader->Calls(ctx.activation_id);
    if (calls && calls->size() == 1 && calls->front().state == CallState::kStarted) ++started_visible;
    reply.Ok(args);
  };
  ASSERT_TRUE(module_->registry().Register(std::move(spec)));
  FlowRef f = Add("export default async (n, host) => await host.call('effect', n)", R"({"grants": {"effect": {}}})");
  const int n = 20;
  int ok = 0;
  for (int i = 0; i < n; ++i) {
    auto id = module_->Submit(f, i, [&, i](const ActivationResult& r) {
      EXPECT_TRUE(r.ok()) << r.message;
      if (r.ok() && r.result == i) ++ok;
    });
    ASSERT_TRUE(id) << id.error().message;
  }
  module_->RunUntilIdle();
  EXPECT_EQ(ok, n);
  EXPECT_EQ(ran, n);
  EXPECT_EQ(started_visible, n) << "a handler ran before its call's started record was committed";
}

// Under a backlog a group that holds only ends may stay open while the loop waits (starts, call
// answers and `started` records never do), but for the group's age at most (its timer): here no
// frame comes to end the group, since the second activation's pure call is answered only from the
// first one's callback. Without the group's timer the loop would sleep until some other timer (the
// worker's idle check, a second later); with it both go on at once. The first end is still
// committed before its caller hears.
TEST_F(PoolTest, UnderABacklogAGroupOfEndsIsCommittedAtItsAgeWhenNothingElseWakesTheLoop) {
  ModuleOptions o;
  o.max_workers = 1;
  Open(o);
  auto reader = Reader();
  ASSERT_NE(reader, nullptr);
  std::optional<HostCallReply> held;
  HostCallSpec spec;
  spec.name = "wait.for.first";
  spec.effect = Effect::kPure;  // its record is written with its answer: nothing commits before that
  spec.handler = [&](const HostCallContext&, const Json&, HostCallReply reply) { held.emplace(std::move(reply)); };
  ASSERT_TRUE(module_->registry().Register(std::move(spec)));
  // One flow, so the second activation runs on the first one's worker at once (no launch between).
  FlowRef f = Add("export default async (n, host) => n === 2 ? await host.call('wait.for.first', n) : n",
                  R"({"grants": {"wait.for.first": {}}})");
  bool first_heard = false, first_committed = false, second_ok = false, third_ok = false;
  ASSERT_TRUE(module_->Submit(f, 1, [&](const ActivationResult& r) {
    first_heard = true;
    auto rows = reader->Activations(r.activation_id, 1);
    first_committed = rows && rows->size() == 1 && rows->front().outcome == "ok";
    if (held) held->Ok(Json("after the first"));
  }));
  ASSERT_TRUE(module_->Submit(f, 2, [&](const ActivationResult& r) {
    second_ok = r.ok() && r.result == "after the first";
    EXPECT_TRUE(first_heard);
  }));
  ASSERT_TRUE(module_->Submit(f, 3, [&](const ActivationResult& r) { third_ok = r.ok(); }));  // the backlog
  module_->RunUntilIdle();
  EXPECT_TRUE(first_heard);
  EXPECT_TRUE(first_committed) << "an end was heard of before its commit";
  EXPECT_TRUE(second_ok);
  EXPECT_TRUE(third_ok);
}

}  // namespace
}  // namespace basal::testing
