// Counting under concurrency (issue 12, point 7): four activations of one flow, run together through
// one Module, each add 1 to one kv key 300 times. With kv.get then kv.put they lose updates (the
// total is printed, not asserted: it is a race); with a kv.cas retry loop and with kv.incr the total
// is exactly 1200, and the journal shows every counted call. The same holds across two `basal run`
// processes on one journal file.
#include <gtest/gtest.h>
#include <stdio.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "integration/test_support.h"

namespace basal::testing {
namespace {

using Json = nlohmann::json;

constexpr int kActivations = 4;
constexpr int kEach = 300;

// input: {way: "get_put" | "cas" | "incr", key, n}. Returns how many calls it made and, for cas,
// how many swaps it had to retry.
constexpr const char* kCounterFlow = R"js(
export default async function (input, host) {
  const namespace = "race", key = input.key;
  let calls = 0, retries = 0;
  let current = null;  // the cas loop's belief about the key, corrected by each kv.cas answer
  for (let i = 0; i < input.n; i++) {
    if (input.way === "incr") {
      await host.call("kv.incr", {namespace, key});
      calls++;
    } else if (input.way === "cas") {
      for (;;) {
        const r = await host.call("kv.cas", {namespace, key, expected: current, value: (current ?? 0) + 1});
        calls++;
        current = r.current;
        if (r.swapped) break;
        retries++;
      }
    } else {
      const v = await host.call("kv.get", {namespace, key});
      await host.call("kv.put", {namespace, key, value: (v ?? 0) + 1});
      calls += 2;
    }
  }
  return {calls, retries};
}
)js";

constexpr const char* kRaceCounterManifest = R"({"grants": {
  "kv.get": {"namespaces": ["race"]}, "kv.put": {"namespaces": ["race"]},
  "kv.cas": {"namespaces": ["race"]}, "kv.incr": {"namespaces": ["race"]}},
  "budgets": {"deadline_ms": 600000, "cpu_ms": 60000}})";

class KvRaceTest : public ModuleFixture {
 protected:
  // Submits kActivations activations of the counter flow at once and runs them to their end.
  std::vector<ActivationResult> RunTogether(const std::string& way, const std::string& key) {
    ModuleOptions o;
    o.max_workers = kActivations;
    if (!module_) Open(o);
    if (!flow_) flow_ = Add(kCounterFlow, kRaceCounterManifest, "counter.js");
    std::vector<ActivationResult> results;
    for (int i = 0; i < kActivations; ++i) {
      auto submitted = module_->Submit(flow_, Json{{"way", way}, {"key", key}, {"n", kEach}},
                                       [&](const ActivationResult& r) { results.push_back(r); });
      EXPECT_TRUE(submitted) << submitted.error().message;
    }
    module_->RunUntilIdle();
    EXPECT_EQ(results.size(), static_cast<size_t>(kActivations));
    for (const ActivationResult& r : results) EXPECT_TRUE(r.ok()) << way << ": " << r.message;
    return results;
  }
  Json Stored(const std::string& key) {
    auto store = OpenStore();
    if (!store) return Json("no store");
    auto got = store->kv().Get("race", key);
    if (!got) {
      ADD_FAILURE() << got.error().message;
      return Json("unreadable");
    }
    return got->has_value() ? Json::parse(**got) : Json(nullptr);
  }
  // The answered calls named `name` in the journal of `results`' activations.
  std::vector<CallRow> Journaled(const std::vector<ActivationResult>& results, const std::string& name) {
    std::vector<CallRow> rows;
    auto reader = Reader();
    if (!reader) return rows;
    for (const ActivationResult& r : results) {
      auto calls = reader->Calls(r.activation_id);
      if (!calls) {
        ADD_FAILURE() << calls.error().message;
        continue;
      }
      for (CallRow& c : *calls)
        if (c.name == name) rows.push_back(std::move(c));
    }
    return rows;
  }
  FlowRef flow_;
};

TEST_F(KvRaceTest, GetThenPutLosesUpdatesAndIsOnlyPrinted) {
  RunTogether("get_put", "get_put");
  const Json total = Stored("get_put");
  ASSERT_TRUE(total.is_number_integer()) << total;
  // A race: how many updates survive depends on scheduling, so it is printed, not asserted.
  std::printf("[ get-then-put ] %d activations x %d additions: the key holds %s (of %d)\n", kActivations, kEach,
              total.dump().c_str(), kActivations * kEach);
  EXPECT_LE(total.get<int64_t>(), kActivations * kEach);
}

TEST_F(KvRaceTest, ACasRetryLoopCountsExactly) {
  std::vector<ActivationResult> results = RunTogether("cas", "cas");
  EXPECT_EQ(Stored("cas"), kActivations * kEach);
  int64_t calls = 0, retries = 0;
  for (const ActivationResult& r : results) {
    calls += r.result.value("calls", 0);
    retries += r.result.value("retries", 0);
  }
  std::printf("[ kv.cas ] %d activations x %d additions: %lld calls, %lld retried after a mismatch\n", kActivations,
              kEach, static_cast<long long>(calls), static_cast<long long>(retries));
  EXPECT_EQ(calls - retries, kActivations * kEach);
  // The journal accounts for every call: one swap per addition, each mismatch answered as such.
  std::vector<CallRow> rows = Journaled(results, "kv.cas");
  ASSERT_EQ(rows.size(), static_cast<size_t>(calls));
  int64_t swapped = 0;
  for (const CallRow& row : rows) {
    EXPECT_EQ(row.state, CallState::kAnswered);
    EXPECT_EQ(row.effect, Effect::kIdempotent);
    const Json result = Json::parse(row.result_json);
    if (result.at("swapped") == true) ++swapped;
    EXPECT_TRUE(result.at("current").contains("basal_digest")) << row.result_json;  // a digest, not the value
  }
  EXPECT_EQ(swapped, kActivations * kEach);
}

TEST_F(KvRaceTest, KvIncrCountsExactly) {
  std::vector<ActivationResult> results = RunTogether("incr", "incr");
  EXPECT_EQ(Stored("incr"), kActivations * kEach);
  std::vector<CallRow> rows = Journaled(results, "kv.incr");
  ASSERT_EQ(rows.size(), static_cast<size_t>(kActivations * kEach));
  for (const CallRow& row : rows) {
    EXPECT_EQ(row.state, CallState::kAnswered);
    EXPECT_EQ(row.effect, Effect::kExternal);  // committed as started before it ran
    EXPECT_TRUE(row.error_json.empty()) << row.error_json;
  }
}

TEST_F(KvRaceTest, CasAndIncrAreDeniedWithoutTheirGrant) {
  Open();
  FlowRef f = Add(R"js(
export default async function (input, host) {
  const seen = [];
  for (const [name, args] of [["kv.incr", {namespace: "other", key: "k"}],
                              ["kv.cas", {namespace: "race", key: "k", expected: null, value: 1}]]) {
    try { await host.call(name, args); seen.push("allowed"); } catch (e) { seen.push(e.name + ": " + e.message); }
  }
  seen.push(await host.call("kv.incr", {namespace: "race", key: "k", by: 2}));
  return seen;
}
)js",
                  R"({"grants": {"kv.incr": {"namespaces": ["race"]}}})");
  ActivationResult r = module_->Run(f, nullptr);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.result, Json::parse(R"j([
    "PermissionDenied: namespace \"other\" is not granted to kv.incr (granted: race)",
    "PermissionDenied: \"kv.cas\" is not granted by the manifest",
    2])j"));
  EXPECT_EQ(Stored("k"), 2);
}

// --- two processes ------------------------------------------------------------------------------

struct Running {
  FILE* out = nullptr;
  std::string err_path;
};

// Starts `basal run` on the counter flow without waiting for it.
Running StartRun(const std::string& dir, const std::string& db, const std::string& way, int index) {
  Running r;
  r.err_path = dir + "/err-" + way + "-" + std::to_string(index) + ".txt";
  const std::string input = Json{{"way", way}, {"key", way}, {"n", kEach}}.dump();
  const std::string cmd = std::string(BASAL_CLI_PATH) + " run " + dir + "/counter.js --manifest " + dir +
                          "/m.json --db " + db + " --input '" + input + "' 2>" + r.err_path;
  r.out = popen(cmd.c_str(), "r");
  return r;
}

std::string Finish(Running& r, int* exit_code) {
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), r.out)) > 0) out.append(buf.data(), n);
  const int status = pclose(r.out);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream e(r.err_path);
  return out + std::string((std::istreambuf_iterator<char>(e)), std::istreambuf_iterator<char>());
}

TEST_F(KvRaceTest, TwoBasalRunProcessesOnOneJournalCountExactly) {
  WriteFile(dir_ + "/counter.js", kCounterFlow);
  WriteFile(dir_ + "/m.json", kRaceCounterManifest);
  const std::string db = dir_ + "/journal.db";
  std::map<std::string, Json> totals;
  for (const std::string way : {"incr", "cas", "get_put"}) {
    std::vector<Running> runs;
    for (int i = 0; i < 2; ++i) {
      runs.push_back(StartRun(dir_, db, way, i));
      ASSERT_NE(runs.back().out, nullptr);
    }
    for (Running& run : runs) {
      int code = -1;
      const std::string said = Finish(run, &code);
      EXPECT_EQ(code, 0) << way << ": " << said;
    }
    totals[way] = Stored(way);
  }
  EXPECT_EQ(totals["incr"], 2 * kEach);
  EXPECT_EQ(totals["cas"], 2 * kEach);
  std::printf("[ two processes ] get-then-put: the key holds %s (of %d); kv.incr %s, kv.cas %s\n",
              totals["get_put"].dump().c_str(), 2 * kEach, totals["incr"].dump().c_str(),
              totals["cas"].dump().c_str());
}

}  // namespace
}  // namespace basal::testing
