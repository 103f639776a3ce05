// What a hostile flow or worker cannot make the parent spend (issue: bounded memory, bounded
// journal, CPU enforced from outside). Each test hits a bound and checks the allowed path beside it.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <fstream>
#include <iostream>
#include <sstream>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "basal/manifest.h"
#include "integration/test_support.h"

namespace basal::testing {
namespace {

using namespace std::chrono_literals;

class BoundsTest : public ModuleFixture {
 protected:
  // `r`'s result is the order (call k = call id k+1) in which its flow saw its calls' answers:
  // the order the journal answered them in (answer_seq), for all `calls` of its run.
  void ExpectAnswersSeenInJournalOrder(const ActivationResult& r, size_t calls_made) {
    auto calls = Reader()->RunCalls(r.run_id);
    ASSERT_TRUE(calls);
    ASSERT_EQ(calls->size(), calls_made);
    std::vector<std::pair<int64_t, int64_t>> by_seq;  // (answer_seq, k)
    for (const CallRow& c : *calls) {
      ASSERT_TRUE(c.answer_seq) << c.call_id;
      by_seq.emplace_back(*c.answer_seq, c.call_id - 1);
    }
    std::sort(by_seq.begin(), by_seq.end());
    Json journaled = Json::array();
    for (const auto& [seq, k] : by_seq) journaled.push_back(k);
    EXPECT_EQ(r.result, journaled) << "the worker saw its answers in the journal's order";
  }
  // A pure host call that answers `args.bytes` bytes of text.
  void RegisterBlob() {
    HostCallSpec spec;
    spec.name = "blob";
    spec.effect = Effect::kPure;
    spec.handler = [](const HostCallContext&, const Json& args, HostCallReply reply) {
      reply.Ok(std::string(args.value("bytes", 0), 'b'));
    };
    ASSERT_TRUE(module_->registry().Register(std::move(spec)));
  }
  // A host call whose replies are kept and never answered (calls stay in flight).
  void RegisterPending() {
    HostCallSpec spec;
    spec.name = "pending";
    spec.effect = Effect::kPure;
    spec.handler = [this](const HostCallContext&, const Json&, HostCallReply reply) { held_.push_back(std::move(reply)); };
    ASSERT_TRUE(module_->registry().Register(std::move(spec)));
  }
  std::vector<HostCallReply> held_;
  std::vector<std::thread> answerers_;
};

// Whether this process's resident set says what the parent keeps: not under AddressSanitizer, whose
// quarantine keeps freed memory resident and whose redzones pad every block.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kMemoryIsMeasurable = false;
#else
constexpr bool kMemoryIsMeasurable = true;
#endif

// The parent's peak resident set since ResetPeakRss, in bytes (VmHWM; Linux resets it on "5" to
// clear_refs).
void ResetPeakRss() {
  std::ofstream("/proc/self/clear_refs") << "5";
}
uint64_t PeakRssBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  return 0;
}

// Issue 25 point 7: three kv.get of 12 MiB awaited together passed the 32 MiB the parent queued
// for a worker, and the honest flow was killed as a protocol violation; point 6: 64 of them were
// all built in one loop pass (1 GB). Now a call's handler runs only while less than
// worker_output_budget_bytes waits for the worker; the rest wait, in order, until it reads.
TEST_F(BoundsTest, LargeAnswersAwaitedTogetherAreServedAsTheWorkerReadsNotBuiltAtOnce) {
  Open();
  FlowRef f = Add(R"(export default async (i, host) => {
      await host.call('kv.put', {namespace: 'n', key: 'big', value: 'v'.repeat(12 * 1048576)});
      const all = [];
      for (let k = 0; k < i; k++) all.push(host.call('kv.get', {namespace: 'n', key: 'big'}));
      let total = 0;
      for (const v of await Promise.all(all)) total += v.length;
      return total;
    })",
                  R"({"grants": {"kv.put": {"namespaces": ["n"], "max_value_bytes": 15728640},
                                 "kv.get": {"namespaces": ["n"]}},
                      "budgets": {"heap_mb": 512, "journal_kb": 65536, "cpu_ms": 20000, "deadline_ms": 120000}})");
  ResetPeakRss();
  const uint64_t before = PeakRssBytes();
  ActivationResult r = module_->Run(f, 12);
  const uint64_t peak = PeakRssBytes();
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.result, 12 * 12 * 1048576);
  EXPECT_EQ(module_->Health().output_overflows, 0u);
  EXPECT_EQ(module_->Health().protocol_violations, 0u);
  // Twelve answers of 12 MiB built at once would be 144 MiB of text, and their values as much again.
  std::cout << "[ peak RSS ] grew by " << ((peak - before) >> 20) << " MiB\n";
  if (kMemoryIsMeasurable) {
    EXPECT_LT(peak - before, 200ull << 20) << "peak RSS grew by " << ((peak - before) >> 20) << " MiB";
  }
  auto calls = Reader()->Calls(r.activation_id);
  ASSERT_TRUE(calls);
  EXPECT_EQ(calls->size(), 13u) << "every call journaled and answered";
}

// A durable run journals each answer's position in the order its worker receives them (a resume
// replays them in that order): answers held for a worker that is behind leave in that order.
TEST_F(BoundsTest, HeldAnswersReachADurableRunsWorkerInTheOrderTheyWereJournaled) {
  Open();
  HostCallSpec spec;
  spec.name = "blob";
  spec.effect = Effect::kPure;
  spec.handler = [](const HostCallContext&, const Json& args, HostCallReply reply) {
    reply.Ok(std::string(args.value("mib", 0) << 20, 'b'));
  };
  ASSERT_TRUE(module_->registry().Register(std::move(spec)));
  FlowRef f = Add(R"(export default async (i, host) => {
      const order = [];
      await Promise.all([9, 1, 9, 1, 9, 9, 1].map((mib, k) => host.call('blob', {mib}).then(() => order.push(k))));
      return order;
    })",
                  R"({"durable": true, "grants": {"blob": {}}, "budgets": {"heap_mb": 256, "journal_kb": 65536}})");
  ActivationResult r = module_->Run(f, nullptr);
  ASSERT_TRUE(r.ok()) << r.message;
  ASSERT_NE(r.run_id, 0);
  ExpectAnswersSeenInJournalOrder(r, 7);
  EXPECT_EQ(module_->Health().output_overflows, 0u);
}

// Well over a hundred answers that complete in one pass behind large ones: the parent holds them,
// hands them on as the worker reads, and forgets those it handed on while others still wait (the
// held list is compacted), in the journal's order all the same.
TEST_F(BoundsTest, ManyAnswersHeldBehindLargeOnesLeaveInTheOrderTheyWereJournaled) {
  Open();
  constexpr size_t kCalls = 152;
  std::vector<std::pair<HostCallReply, int>> waiting;  // (reply, MiB)
  HostCallSpec spec;
  spec.name = "blob";
  spec.effect = Effect::kPure;
  spec.handler = [&waiting](const HostCallContext&, const Json& args, HostCallReply reply) {
    waiting.emplace_back(std::move(reply), args.value("mib", 0));
    if (waiting.size() < kCalls) return;
    for (auto& [r, mib] : waiting) r.Ok(std::string(static_cast<size_t>(mib) << 20, 'b'));  // all in this pass
    waiting.clear();
  };
  ASSERT_TRUE(module_->registry().Register(std::move(spec)));
  // Two of 9 MiB pass the 16 MiB budget: the 100 small ones behind them wait, then go with the next
  // 9 MiB once the worker read the first, while the rest still waits behind the last two.
  FlowRef f = Add(R"(export default async (i, host) => {
      const sizes = [9, 9, ...Array(100).fill(0), 9, 9, ...Array(48).fill(0)];
      const order = [];
      await Promise.all(sizes.map((mib, k) => host.call('blob', {mib}).then(() => order.push(k))));
      return order;
    })",
                  R"({"durable": true, "grants": {"blob": {}},
                      "budgets": {"heap_mb": 256, "journal_kb": 65536, "calls_in_flight": 1024}})");
  ActivationResult r = module_->Run(f, nullptr);
  ASSERT_TRUE(r.ok()) << r.message;
  ASSERT_NE(r.run_id, 0);
  ExpectAnswersSeenInJournalOrder(r, kCalls);
  EXPECT_EQ(r.result.size(), kCalls);
  EXPECT_EQ(module_->Health().output_overflows, 0u);
}

// Point 7's other half: four answers of 9 MiB that complete in the same pass (four fetches of
// 8 MiB) are more than the budget at once; a worker that reads them is served, not killed.
TEST_F(BoundsTest, AnswersCompletingTogetherPastTheBudgetReachAWorkerThatReads) {
  Open();
  HostCallSpec spec;
  spec.name = "gather";
  spec.effect = Effect::kPure;
  spec.handler = [this](const HostCallContext&, const Json&, HostCallReply reply) {
    held_.push_back(std::move(reply));
    if (held_.size() < 4) return;
    for (HostCallReply& r : held_) r.Ok(std::string(9u << 20, 'g'));  // all four in this pass
    held_.clear();
  };
  ASSERT_TRUE(module_->registry().Register(std::move(spec)));
  // The four calls leave at once (their 80 KB pass the worker's 64 KiB write threshold); the
  // answers come while the script computes, and are read when it awaits them.
  FlowRef f = Add(R"(export default async (i, host) => {
      const pad = 'p'.repeat(20000);
      const all = [0, 1, 2, 3].map(() => host.call('gather', {pad}));
      const until = Date.now() + 500;
      while (Date.now() < until) {}
      const got = await Promise.all(all);
      return got.reduce((n, v) => n + v.length, 0);
    })",
                  R"({"grants": {"gather": {}}, "budgets": {"heap_mb": 256}})");
  ActivationResult r = module_->Run(f, nullptr);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.result, 4 * (9 << 20));
  EXPECT_EQ(module_->Health().output_overflows, 0u);
}

// Only a worker that does not read at all is killed: answers from a handler that answers later
// pile up past worker_output_max_bytes while the worker spins without reading any of them.
TEST_F(BoundsTest, AWorkerThatReadsNoneOfItsAnswersIsKilledPastTheOutputMax) {
  Open();
  HostCallSpec spec;
  spec.name = "later";
  spec.effect = Effect::kPure;
  spec.handler = [this](const HostCallContext&, const Json& args, HostCallReply reply) {
    auto shared = std::make_shared<HostCallReply>(std::move(reply));
    const size_t bytes = args.value("bytes", 0);
    // Answered from another thread, one at a time, so they reach the loop over many passes.
    answerers_.emplace_back([shared, bytes, n = answerers_.size()] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20 + 2 * n));
      shared->Ok(std::string(bytes, 'l'));
    });
  };
  ASSERT_TRUE(module_->registry().Register(std::move(spec)));
  HostCallSpec now;
  now.name = "now";
  now.effect = Effect::kPure;
  now.handler = [](const HostCallContext&, const Json&, HostCallReply reply) { reply.Ok(nullptr); };
  ASSERT_TRUE(module_->registry().Register(std::move(now)));
  // The calls go out with the awaited `now` (the worker writes its frames when it waits); the
  // answers to `later` come after, while it spins.
  FlowRef spin = Add(R"(export default async (i, host) => {
      for (let n = 0; n < 100; n++) host.call('later', {bytes: 1048576});
      await host.call('now', {});
      for (;;) {}
    })",
                     R"({"grants": {"later": {}, "now": {}}, "budgets": {"calls_in_flight": 101, "cpu_ms": 20000}})");
  ActivationResult r = module_->Run(spin, nullptr);
  for (std::thread& t : answerers_) t.join();
  answerers_.clear();
  EXPECT_EQ(r.outcome, Outcome::kProtocolViolation) << r.message;
  EXPECT_NE(r.message.find("it does not read its answers"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("(worker_output_max_bytes)"), std::string::npos) << r.message;
  EXPECT_EQ(module_->Health().output_overflows, 1u);
  // Allowed: the same answers, read as they come.
  FlowRef reads = Add(R"(export default async (i, host) => {
      const all = [];
      for (let n = 0; n < 100; n++) all.push(host.call('later', {bytes: 1048576}));
      let total = 0;
      for (const v of await Promise.all(all)) total += v.length;
      return total;
    })",
                      R"({"grants": {"later": {}}, "budgets": {"calls_in_flight": 100, "heap_mb": 512}})", "reads.js");
  ActivationResult ok = module_->Run(reads, nullptr);
  for (std::thread& t : answerers_) t.join();
  answerers_.clear();
  ASSERT_TRUE(ok.ok()) << ok.message;
  EXPECT_EQ(ok.result, 100 * 1048576);
  EXPECT_EQ(module_->Health().output_overflows, 1u);
}

// Issue 25 point 4: health counted every name a flow called below a family ("mcp.<anything>"),
// granted or not: one flow made 240,000 series. Names not granted fold into their family's, names
// no host call has into "unknown", and past kMaxHostCallNamesCounted granted members of families
// the rest count as "other".
TEST_F(BoundsTest, HostCallNamesCountedInHealthAreBoundedWhateverAFlowCalls) {
  Open();
  HostCallSpec family;
  family.name = "fam.*";
  family.effect = Effect::kPure;
  family.handler = [](const HostCallContext& ctx, const Json&, HostCallReply reply) { reply.Ok(ctx.name); };
  ASSERT_TRUE(module_->registry().Register(std::move(family)));
  // An empty manifest: 3000 names below mcp. and fam., and 1000 names no host call has; all denied.
  FlowRef denied = Add(R"(export default async (i, host) => {
      let n = 0;
      for (let k = 0; k < 1000; k++)
        for (const name of ['mcp.s' + k + '.t', 'mcp.x.t' + k, 'fam.d' + k, 'nobody' + k])
          try { await host.call(name, {}); } catch (e) { if (e.name === 'PermissionDenied') n++; }
      return n;
    })",
                       R"({"budgets": {"journal_kb": 65536}})");
  ActivationResult r = module_->Run(denied, nullptr);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.result, 4000);
  HealthSnapshot h = module_->Health();
  EXPECT_EQ(h.host_calls.size(), 3u) << module_->HealthReport()["host_calls"].dump();
  EXPECT_EQ(h.host_calls["mcp.*"]["deny"], 2000u);
  EXPECT_EQ(h.host_calls["fam.*"]["deny"], 1000u);
  EXPECT_EQ(h.host_calls["unknown"]["deny"], 1000u);
  // Granted members are counted by name, up to the cap; past it they count as "other".
  Json grants = Json::object();
  const size_t granted = kMaxHostCallNamesCounted + 50;
  for (size_t k = 0; k < granted; ++k) grants["fam.g" + std::to_string(k)] = Json::object();
  grants["kv.get"] = {{"namespaces", {"n"}}};
  FlowRef allowed = Add(R"(export default async (i, host) => {
      for (let k = 0; k < i; k++) await host.call('fam.g' + k, {});
      await host.call('kv.get', {namespace: 'n', key: 'k'});
      return (await host.call('fam.g0', {}));
    })",
                        Json{{"grants", grants}, {"budgets", {{"journal_kb", 65536}}}}.dump(), "allowed.js");
  ActivationResult a = module_->Run(allowed, granted);
  ASSERT_TRUE(a.ok()) << a.message;
  EXPECT_EQ(a.result, "fam.g0") << "the handler sees the member's own name";
  h = module_->Health();
  // mcp.*, fam.*, unknown, kv.get (a registered name: always its own), the cap's members, other.
  EXPECT_EQ(h.host_calls.size(), 4 + kMaxHostCallNamesCounted + 1) << "the cap, and \"other\" past it";
  EXPECT_EQ(h.host_calls["fam.g0"]["allow"], 2u);
  EXPECT_EQ(h.host_calls["kv.get"]["allow"], 1u) << "a registered name is counted by name, past the cap too";
  EXPECT_EQ(h.host_calls.count("fam.g" + std::to_string(granted - 1)), 0u);
  uint64_t other = 0;
  for (const auto& [verdict, n] : h.host_calls["other"]) other += n;
  uint64_t total = 0;
  for (const auto& [name, by] : h.host_calls)
    for (const auto& [verdict, n] : by) total += n;
  EXPECT_EQ(total, 4000 + granted + 2) << "every call is counted once, whichever series holds it";
  EXPECT_EQ(other, 50u);
  EXPECT_LT(module_->HealthReport().dump().size(), 64u * 1024) << "the health report stays small";
}

TEST_F(BoundsTest, CallsInFlightPastTheBudgetEndTheActivation) {
  Open();
  RegisterPending();
  const std::string src = R"(export default async (i, host) => {
      const all = [];
      for (let n = 0; n < i; n++) all.push(host.call('pending', n));
      await new Promise(() => {});
    })";
  FlowRef f = Add(src, R"({"grants": {"pending": {}}, "budgets": {"calls_in_flight": 10, "deadline_ms": 2000}})");
  ActivationResult over = module_->Run(f, 11);
  EXPECT_EQ(over.outcome, Outcome::kBudgetExhausted) << over.message;
  EXPECT_EQ(over.budget, Budget::kCallsInFlight);
  EXPECT_NE(over.message.find("call number 11 waiting for an answer; the budget is 10 (budgets.calls_in_flight)"),
            std::string::npos)
      << over.message;
  auto calls = Reader()->Calls(over.activation_id);
  ASSERT_TRUE(calls);
  EXPECT_EQ(calls->size(), 10u) << "the 11th call is not journaled or run";
  // Allowed: ten in flight is within the budget (the activation then ends at its deadline).
  held_.clear();
  ActivationResult at = module_->Run(f, 10);
  EXPECT_EQ(at.outcome, Outcome::kDeadline) << at.message;
}

TEST_F(BoundsTest, LargeValuesAreJournaledAsPrefixSizeAndDigestButTheFlowGetsThemWhole) {
  ModuleOptions o;
  o.journal_value_max_bytes = 4096;
  Open(o);
  HostCallSpec spec;
  spec.name = "echo";
  spec.effect = Effect::kPure;
  spec.handler = [](const HostCallContext&, const Json& args, HostCallReply reply) { reply.Ok(args); };
  ASSERT_TRUE(module_->registry().Register(std::move(spec)));
  FlowRef f = Add("export default async (i, host) => (await host.call('echo', {s: 'é'.repeat(50000)})).s.length",
                  R"({"grants": {"echo": {}}})");
  ActivationResult r = module_->Run(f, nullptr);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.result, 50000);
  auto calls = Reader()->Calls(r.activation_id);
  ASSERT_TRUE(calls);
  ASSERT_EQ(calls->size(), 1u);
  const std::string whole = R"({"s":")" + [] {
    std::string s;
    for (int i = 0; i < 50000; ++i) s += "é";
    return s;
  }() + R"("})";
  for (const std::string& journaled : {(*calls)[0].args_json, (*calls)[0].result_json}) {
    EXPECT_LT(journaled.size(), 4096u);
    Json marker = Json::parse(journaled);
    EXPECT_EQ(marker["basal_truncated"]["bytes"], whole.size());
    EXPECT_EQ(marker["basal_truncated"]["sha256"], Sha256Hex(whole));
    const std::string prefix = marker["basal_truncated"]["prefix"];
    EXPECT_EQ(whole.rfind(prefix, 0), 0u) << "the prefix is the start of the value, cut on a UTF-8 boundary";
    EXPECT_GT(prefix.size(), 500u);
  }
  // The activation's own input and result are capped the same way.
  FlowRef same = Add("export default (i) => i", "{}", "same.js");
  ActivationResult echoed = module_->Run(same, std::string(100000, 'i'));
  ASSERT_TRUE(echoed.ok()) << echoed.message;
  EXPECT_EQ(echoed.result.get<std::string>().size(), 100000u);
  auto rows = Reader()->Activations(echoed.activation_id, 1);
  ASSERT_TRUE(rows);
  for (const std::string& journaled : {(*rows)[0].input_json, (*rows)[0].result_json}) {
    EXPECT_LT(journaled.size(), 4096u);
    EXPECT_EQ(Json::parse(journaled)["basal_truncated"]["bytes"], 100002);
  }
}

TEST_F(BoundsTest, LogLinesPastTheLogBudgetAreDroppedAndCounted) {
  Open();
  FlowRef f = Add(R"(export default () => {
      for (let n = 0; n < 5000; n++) console.log('line ' + n + ' ' + 'x'.repeat(1000));
      return 'done';
    })",
                  R"({"budgets": {"log_kb": 64}})");
  ActivationResult r = module_->Run(f, nullptr);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.result, "done");
  EXPECT_GT(r.logs_dropped, 4000);
  EXPECT_LT(r.logs_dropped, 5000);
  auto calls = Reader()->Calls(r.activation_id);
  ASSERT_TRUE(calls);
  EXPECT_EQ(static_cast<int64_t>(calls->size()) + r.logs_dropped, 5000);
  auto rows = Reader()->Activations(r.activation_id, 1);
  ASSERT_TRUE(rows);
  EXPECT_EQ((*rows)[0].logs_dropped, r.logs_dropped);
  EXPECT_EQ(module_->Health().logs_dropped, static_cast<uint64_t>(r.logs_dropped));
  // The first lines are the ones kept.
  EXPECT_NE((*calls)[0].args_json.find("line 0 "), std::string::npos);
}

TEST_F(BoundsTest, CallsPastTheJournalBudgetEndTheActivationDeniedOnesIncluded) {
  Open();
  // Denied calls (no grant) with 10 KiB arguments, caught by the script: only the journal budget stops them.
  FlowRef f = Add(R"(export default async (i, host) => {
      let denied = 0;
      for (let n = 0; n < 10000; n++) {
        try { await host.call('kv.get', {namespace: 'x'.repeat(10240), key: 'k'}); } catch (e) { denied++; }
      }
      return denied;
    })",
                  R"({"budgets": {"journal_kb": 256}})");
  ActivationResult r = module_->Run(f, nullptr);
  EXPECT_EQ(r.outcome, Outcome::kBudgetExhausted) << r.message;
  EXPECT_EQ(r.budget, Budget::kJournal);
  EXPECT_NE(r.message.find("journal budget of 256 KiB (budgets.journal_kb)"), std::string::npos) << r.message;
  auto calls = Reader()->Calls(r.activation_id);
  ASSERT_TRUE(calls);
  ASSERT_GT(calls->size(), 5u);
  EXPECT_LT(calls->size(), 30u);
  const CallRow& last = calls->back();
  EXPECT_EQ(last.decision.verdict, Verdict::kQuotaExceeded);
  EXPECT_EQ(last.decision.rule, "budgets.journal_kb");
  EXPECT_NE(last.args_json.find("\"sha256\""), std::string::npos) << "only a digest of the arguments";
  size_t bytes = 0;
  for (const CallRow& c : *calls) bytes += c.args_json.size() + c.result_json.size() + c.error_json.size();
  EXPECT_LT(bytes, 256u * 1024 + 64 * 1024);
  // Allowed: the same flow with fewer calls stays within the budget.
  FlowRef few = Add(R"(export default async (i, host) => {
      try { await host.call('kv.get', {namespace: 'x'.repeat(10240), key: 'k'}); } catch (e) { return e.name; }
    })",
                    R"({"budgets": {"journal_kb": 256}})", "few.js");
  ActivationResult ok = module_->Run(few, nullptr);
  ASSERT_TRUE(ok.ok()) << ok.message;
  EXPECT_EQ(ok.result, "PermissionDenied");
}

TEST_F(BoundsTest, KvPutOverItsLimitsIsRefusedAndTheJournalKeepsDigestsNotValues) {
  Open();
  FlowRef f = Add(R"(export default async (i, host) => {
      const out = [];
      await host.call('kv.put', {namespace: 'o', key: 'small', value: {v: 'secret-value'}});
      try { await host.call('kv.put', {namespace: 'o', key: 'big', value: 'x'.repeat(2000)}); }
      catch (e) { out.push(e.name + ': ' + e.message); }
      try { await host.call('kv.put', {namespace: 'o', key: 'third', value: 1}); }
      catch (e) { out.push(e.name); }
      out.push((await host.call('kv.get', {namespace: 'o', key: 'small'})).v);
      return out;
    })",
                  R"({"grants": {"kv.put": {"namespaces": ["o"], "max_value_bytes": 1000, "quota": {"keys": 1}},
                                 "kv.get": {"namespaces": ["o"]}}})");
  ActivationResult r = module_->Run(f, nullptr);
  ASSERT_TRUE(r.ok()) << r.message;
  ASSERT_EQ(r.result.size(), 3u);
  EXPECT_EQ(r.result[0], "QuotaExceeded: kv.put: the value is 2002 bytes as JSON; the grant admits at most 1000 (max_value_bytes)");
  EXPECT_EQ(r.result[1], "QuotaExceeded");
  EXPECT_EQ(r.result[2], "secret-value");
  auto calls = Reader()->Calls(r.activation_id);
  ASSERT_TRUE(calls);
  ASSERT_EQ(calls->size(), 4u);
  for (const CallRow& c : *calls) {
    EXPECT_EQ(c.args_json.find("secret-value"), std::string::npos) << c.args_json;
    EXPECT_EQ(c.result_json.find("secret-value"), std::string::npos) << c.result_json;
  }
  EXPECT_NE((*calls)[0].args_json.find("basal_digest"), std::string::npos);
  EXPECT_NE((*calls)[3].result_json.find("basal_digest"), std::string::npos);
}

TEST_F(BoundsTest, ARegexpBacktrackingLoopEndsAtTheCpuBudgetMeasuredByTheParent) {
  Open();
  FlowRef f = Add(R"(export default () => /^(a+)+$/.test('a'.repeat(40) + 'b'))", R"({"budgets": {"cpu_ms": 300}})");
  ActivationResult r = module_->Run(f, nullptr);
  EXPECT_EQ(r.outcome, Outcome::kBudgetExhausted) << r.message;
  EXPECT_EQ(r.budget, Budget::kCpu);
  EXPECT_NE(r.message.find("measured by the parent"), std::string::npos) << r.message;
  EXPECT_GE(r.cpu_us, 300'000);
  EXPECT_EQ(module_->Health().cpu_kills, 1u);
  auto rows = Reader()->Activations(r.activation_id, 1);
  ASSERT_TRUE(rows);
  EXPECT_EQ((*rows)[0].cpu_us, r.cpu_us) << "the journal's CPU figure is the parent's";
  // Allowed: a regexp that matches at once, on a fresh worker.
  FlowRef quick = Add(R"(export default () => /^(a+)+$/.test('a'.repeat(40)))", R"({"budgets": {"cpu_ms": 300}})",
                      "quick.js");
  ActivationResult ok = module_->Run(quick, nullptr);
  ASSERT_TRUE(ok.ok()) << ok.message;
  EXPECT_EQ(ok.result, true);
}

// A worker that dies while it writes a frame is reported by how it died, not as a cut frame: a
// subverted engine that writes half a frame and then trips the seccomp filter is a confinement
// violation, the counter operators alert on.
TEST_F(BoundsTest, AWorkerThatDiesInTheMiddleOfAFrameIsReportedByItsDeath) {
  ModuleOptions o;
  o.worker_path = FakeWorker("half_frame_then_sigsys");
  Open(o);
  ActivationResult sys = module_->Run(Add("export default () => 1"), nullptr);
  EXPECT_EQ(sys.outcome, Outcome::kWorkerConfinement) << sys.message;
  EXPECT_EQ(module_->Health().worker_confinement, 1u);
  EXPECT_EQ(module_->Health().protocol_violations, 0u);
  module_.reset();
  o.worker_path = FakeWorker("half_frame_then_sigkill");
  Open(o);
  ActivationResult killed = module_->Run(Add("export default () => 1"), nullptr);
  EXPECT_EQ(killed.outcome, Outcome::kWorkerCrashed) << killed.message;
  EXPECT_EQ(module_->Health().crashes.at("signal SIGKILL"), 1u);
  EXPECT_EQ(module_->Health().protocol_violations, 0u);
}

// Killed right after its welcome: whether the parent's look at /proc sees it alive or a zombie,
// the activation ends as a crash, never as a refused welcome. The soak found the zombie case (5 of
// 488 kills); here the kill lands in that window only sometimes, so this guards the outcome rather
// than reproducing the window every time.
TEST_F(BoundsTest, AWorkerKilledRightAfterItsWelcomeIsACrashNotARefusal) {
  ModuleOptions o;
  o.worker_path = FakeWorker("welcome_then_sigkill");
  Open(o);
  for (int i = 0; i < 5; ++i) {
    ActivationResult r = module_->Run(Add("export default () => 1", "{}", "f" + std::to_string(i) + ".js"), nullptr);
    EXPECT_EQ(r.outcome, Outcome::kWorkerCrashed) << r.message;
  }
  EXPECT_EQ(module_->Health().refused_welcomes, 0u);
  EXPECT_EQ(module_->Health().crashes.at("signal SIGKILL"), 5u);
}

// A child of this process that has ended and waits to be reaped.
bool AChildIsAZombie() {
  // Every thread's children: the pool launches its workers from a thread of its own.
  for (pid_t pid : ChildrenOf(::getpid())) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    std::getline(stat, line);
    const size_t paren = line.rfind(')');
    if (paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z') return true;
  }
  return false;
}

// RLIMIT_CPU is the backstop for a parent that does not look (its loop stalled): the kernel ends
// the worker, and the parent reports it as the CPU budget once it looks again.
TEST_F(BoundsTest, RlimitCpuStopsAWorkerWhileTheParentDoesNotLook) {
  ModuleOptions o;
  bool started = false;
  o.log_sink = [&](const HostCallContext&, std::string_view, std::string_view) { started = true; };
  Open(o);
  FlowRef f = Add(R"(export default async (i, host) => {
                    await host.call('log', {level: 'log', message: 'go'});
                    return /^(a+)+$/.test('a'.repeat(40) + 'b');
                  })",
                  R"({"budgets": {"cpu_ms": 500}})");
  ActivationResult r;
  bool done = false;
  ASSERT_TRUE(module_->Submit(f, nullptr, [&](const ActivationResult& a) {
    r = a;
    done = true;
  }));
  // Until the script runs; from then on the loop does not (the log's answer is already queued).
  for (int i = 0; i < 3000 && !started; ++i) module_->RunFor(std::chrono::milliseconds(10));
  ASSERT_TRUE(started);
  module_->RunFor(std::chrono::milliseconds(0));
  const auto give_up = std::chrono::steady_clock::now() + 60s;
  while (!AChildIsAZombie() && std::chrono::steady_clock::now() < give_up) std::this_thread::sleep_for(50ms);
  module_->RunUntilIdle();
  ASSERT_TRUE(done);
  EXPECT_EQ(r.outcome, Outcome::kBudgetExhausted) << r.message;
  EXPECT_EQ(r.budget, Budget::kCpu);
  EXPECT_NE(r.message.find("RLIMIT_CPU"), std::string::npos) << r.message;
  EXPECT_EQ(module_->Health().cpu_kills, 1u);
}

TEST_F(BoundsTest, ALogLoopAndALongBuiltinEndAtTheCpuBudget) {
  Open();
  int n = 0;
  for (const char* src : {"export default () => { for (;;) console.log('x'); }",
                          "export default () => { const a = []; for (let i = 0; i < 2e5; i++) a.push(i % 977);"
                          " for (;;) a.sort(); }"}) {
    FlowRef f = Add(src, R"({"budgets": {"cpu_ms": 300}})", "f" + std::to_string(++n) + ".js");
    ActivationResult r = module_->Run(f, nullptr);
    EXPECT_EQ(r.outcome, Outcome::kBudgetExhausted) << src << ": " << r.message;
    EXPECT_EQ(r.budget, Budget::kCpu) << src;
  }
}

TEST_F(BoundsTest, AForgedDoneGetsTheKernelsCpuFigureAndAnIdleWorkerBurningCpuIsKilled) {
  ModuleOptions o;
  o.worker_path = FakeWorker("burn_then_forge_done");
  Open(o);
  FlowRef f = Add("export default () => 1");
  ActivationResult r = module_->Run(f, nullptr);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_GE(r.cpu_us, 300'000) << "the worker said 0; the kernel says otherwise";
  auto rows = Reader()->Activations(r.activation_id, 1);
  ASSERT_TRUE(rows);
  EXPECT_EQ((*rows)[0].cpu_us, r.cpu_us);
  // Idle now, and burning CPU: killed by the parent's idle check (a timeout, not a threshold).
  const auto give_up = std::chrono::steady_clock::now() + 30s;
  while (module_->Health().idle_cpu_kills == 0 && std::chrono::steady_clock::now() < give_up) module_->RunFor(100ms);
  EXPECT_EQ(module_->Health().idle_cpu_kills, 1u);
  EXPECT_EQ(module_->Health().workers.live, 0u);
}

// The attack of the issue: kv.list over ten 15 MiB values held the write lock for seconds and a
// second basal on the same journal failed with SQLITE_BUSY. kv.list now stops reading at its bound,
// a loop pass reads a bounded amount per worker, and the other process always gets its turn.
TEST_F(BoundsTest, ASecondProcessSharingTheJournalNeverFailsBecauseOfOneFlowsKvCalls) {
  Open();
  FlowRef fill = Add(R"(export default async (i, host) => {
      for (let n = 0; n < 10; n++)
        await host.call('kv.put', {namespace: 'big', key: 'k' + n, value: 'v'.repeat(15 * 1024 * 1024 - 16)});
      let refused = 0;
      for (let n = 0; n < 3; n++) {
        try { await host.call('kv.list', {namespace: 'big'}); } catch (e) { if (e.name === 'RangeError') refused++; }
        await host.call('kv.put', {namespace: 'big', key: 'k' + (n % 10), value: 'w'.repeat(15 * 1024 * 1024 - 16)});
      }
      return refused;
    })",
                     R"({"grants": {"kv.put": {"namespaces": ["big"], "max_value_bytes": 15728640,
                                               "quota": {"bytes": 1073741824}},
                                    "kv.list": {"namespaces": ["big"]}},
                         "budgets": {"heap_mb": 512, "cpu_ms": 120000, "deadline_ms": 600000}})");
  WriteFile(dir_ + "/other.js", "export default (i) => i + 1");
  WriteFile(dir_ + "/other.json", "{}");
  std::atomic<bool> done{false};
  std::vector<std::string> failures;
  int runs = 0;
  std::thread other([&] {
    // Runs `basal run` on the same journal, one after another, until the flow ends.
    while (!done.load()) {
      const std::string cmd = std::string(BASAL_CLI_PATH) + " run " + dir_ + "/other.js --manifest " + dir_ +
                              "/other.json --input 41 --db " + dir_ + "/journal.db 2>&1";
      FILE* p = popen(cmd.c_str(), "r");
      std::string out;
      std::array<char, 4096> buf;
      size_t n;
      while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
      const int status = pclose(p);
      ++runs;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || out != "42\n") failures.push_back(out);
    }
  });
  ActivationResult r = module_->Run(fill, nullptr);
  done = true;
  other.join();
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.result, 3) << "every kv.list over 150 MiB was refused at its bound";
  EXPECT_GE(runs, 1);
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << runs << " runs failed; first: " << failures[0];
}

}  // namespace
}  // namespace basal::testing
