// See soak_flows.h. Budgets are small on purpose: 10,000 activations must fit in minutes, and a
// bomb should hit its bound quickly rather than after the defaults' seconds.
#include "soak/soak_flows.h"

#include <string>

namespace basal::soak {
namespace {

using Json = nlohmann::json;

std::optional<std::string> NoCheck(const Json&, const ActivationResult&) { return std::nullopt; }

uint64_t Between(Rng& rng, uint64_t lo, uint64_t hi) { return lo + rng() % (hi - lo + 1); }

constexpr int kOrdinaryRounds = 20'000;
constexpr int64_t kLogFloodLogKb = 32;
constexpr uint64_t kAmpMaxValueBytes = 512 * 1024;
constexpr uint64_t kAmpQuotaBytes = 12ull << 20;

SoakFlow Ordinary() {
  SoakFlow f;
  f.name = "ordinary";
  f.what = "compute, kv.get + kv.put of a small value, one console.log";
  f.source = R"(export default async function (input, host) {
  const key = "k" + (input.n % 64);
  const before = await host.call("kv.get", {namespace: "ordinary", key});
  let s = 0;
  for (let i = 0; i < )" + std::to_string(kOrdinaryRounds) + R"(; i++) s = (s * 31 + i + input.n) % 1000003;
  await host.call("kv.put", {namespace: "ordinary", key, value: {n: input.n, s}});
  console.log("ordinary " + input.n + " " + s);
  return {n: input.n, s, seen: before === null ? null : before.n};
})";
  f.manifest = R"({"grants": {"kv.get": {"namespaces": ["ordinary"]},
              "kv.put": {"namespaces": ["ordinary"], "max_value_bytes": 4096, "quota": {"bytes": 1048576, "keys": 128}}},
  "budgets": {"cpu_ms": 1000, "heap_mb": 16, "deadline_ms": 10000, "calls_in_flight": 4, "journal_kb": 64, "log_kb": 4}})";
  f.weight = 48;
  f.ends = {{Outcome::kOk, std::nullopt}};
  f.input = [](uint64_t n, Rng&) { return Json{{"n", n}}; };
  f.check = [](const Json& input, const ActivationResult& r) -> std::optional<std::string> {
    if (!r.ok()) return std::nullopt;
    const int64_t n = input["n"].get<int64_t>();
    if (!r.result.is_object() || r.result.value("n", int64_t{-1}) != n ||
        r.result.value("s", int64_t{-1}) != OrdinarySum(n)) {
      return "wrong result " + r.result.dump() + " (expected s " + std::to_string(OrdinarySum(n)) + ")";
    }
    return std::nullopt;
  };
  return f;
}

SoakFlow LogFlood() {
  SoakFlow f;
  f.name = "log_flood";
  f.what = "console.log of 500..3000 lines of 1 KiB, and one of 100 KiB, without awaiting";
  f.source = R"(export default function (input) {
  const line = "x".repeat(input.line_bytes);
  for (let i = 0; i < input.lines; i++) console.log(i + " " + line);
  console.warn("y".repeat(100 * 1024));
  return {lines: input.lines};
})";
  f.manifest = R"({"budgets": {"cpu_ms": 2000, "heap_mb": 16, "deadline_ms": 20000, "calls_in_flight": 4, "journal_kb": 256, "log_kb": )" +
               std::to_string(kLogFloodLogKb) + "}}";
  f.weight = 10;
  f.ends = {{Outcome::kOk, std::nullopt}};
  f.input = [](uint64_t n, Rng& rng) { return Json{{"n", n}, {"lines", Between(rng, 500, 3000)}, {"line_bytes", 1024}}; };
  // Every line is over 1 KiB, so at most log_kb lines are kept; the 100 KiB one never is.
  f.check = [](const Json& input, const ActivationResult& r) -> std::optional<std::string> {
    if (!r.ok()) return std::nullopt;
    const int64_t written = input["lines"].get<int64_t>() + 1;
    const int64_t kept = written - r.logs_dropped;
    if (r.logs_dropped < 1 || kept < 1 || kept > kLogFloodLogKb)
      return "logs_dropped " + std::to_string(r.logs_dropped) + " of " + std::to_string(written) + " lines (expected " +
             "at most " + std::to_string(kLogFloodLogKb) + " kept, at least the 100 KiB one dropped)";
    return std::nullopt;
  };
  return f;
}

// Values just under the grant's max_value_bytes, written until the namespace's quota refuses
// them, one value above the limit, and a kv.list over all of them.
constexpr int kAmpKeys = 40;

SoakFlow KvAmplification() {
  SoakFlow f;
  f.name = "kv_amp";
  f.what = "kv.put of values near the value limit until the quota refuses, one above it, kv.list over them";
  f.source = R"(export default async function (input, host) {
  const ns = "amp";
  const big = "v".repeat(input.value_bytes);
  const out = {deleted: 0, put: 0, refused: 0, over_refused: false, listed: -1, list_error: null, last_error: null};
  for (let i = 0; i < input.deletes; i++) {
    if (await host.call("kv.delete", {namespace: ns, key: "big" + ((input.n + i) % input.keys)})) out.deleted++;
  }
  for (let i = 0; i < input.puts; i++) {
    try {
      await host.call("kv.put", {namespace: ns, key: "big" + ((input.n * 7 + i) % input.keys), value: big + i});
      out.put++;
    } catch (e) {
      out.refused++;
      out.last_error = e.name + ": " + e.message.slice(0, 200);
    }
  }
  try {
    await host.call("kv.put", {namespace: ns, key: "over", value: big + big + big});
  } catch (e) {
    out.over_refused = true;
  }
  try {
    out.listed = (await host.call("kv.list", {namespace: ns, limit: 1000})).length;
  } catch (e) {
    out.list_error = e.name + ": " + e.message.slice(0, 200);
  }
  out.listed_few = (await host.call("kv.list", {namespace: ns, limit: 4})).length;
  return out;
})";
  f.manifest = R"({"grants": {"kv.get": {"namespaces": ["amp"]}, "kv.delete": {"namespaces": ["amp"]},
              "kv.list": {"namespaces": ["amp"]},
              "kv.put": {"namespaces": ["amp"], "max_value_bytes": )" + std::to_string(kAmpMaxValueBytes) +
               R"(, "quota": {"bytes": )" + std::to_string(kAmpQuotaBytes) + R"(, "keys": 64}}},
  "budgets": {"cpu_ms": 3000, "heap_mb": 128, "deadline_ms": 20000, "calls_in_flight": 4, "journal_kb": 64, "log_kb": 4}})";
  f.weight = 6;
  f.ends = {{Outcome::kOk, std::nullopt}};
  f.input = [](uint64_t n, Rng& rng) {
    return Json{{"n", n}, {"value_bytes", kAmpMaxValueBytes - 64}, {"keys", kAmpKeys}, {"deletes", Between(rng, 1, 3)},
                {"puts", Between(rng, 4, 10)}};
  };
  // The value above max_value_bytes is always refused; a kv.list of every key fails while the
  // namespace holds more than kv.list may read, and never returns more than that.
  f.check = [](const Json&, const ActivationResult& r) -> std::optional<std::string> {
    if (!r.ok()) return std::nullopt;
    const Json& o = r.result;
    if (!o.is_object() || o.value("over_refused", false) != true)
      return "the value above max_value_bytes was not refused: " + o.dump();
    const int64_t listed = o.value("listed", int64_t{-2});
    if (listed * static_cast<int64_t>(kAmpMaxValueBytes - 64) > static_cast<int64_t>(8u << 20))
      return "kv.list returned " + std::to_string(listed) + " values of about 512 KiB: more than 8 MiB";
    if (o.value("listed_few", int64_t{0}) < 1) return "kv.list with limit 4 returned nothing: " + o.dump();
    return std::nullopt;
  };
  return f;
}

SoakFlow CpuBomb() {
  SoakFlow f;
  f.name = "cpu_bomb";
  f.what = "for (;;) {} under cpu_ms 100";
  f.source = "export default function () { for (;;) {} }";
  f.manifest = R"({"budgets": {"cpu_ms": 100, "heap_mb": 16, "deadline_ms": 5000, "calls_in_flight": 1, "journal_kb": 16, "log_kb": 4}})";
  f.weight = 6;
  f.ends = {{Outcome::kBudgetExhausted, Budget::kCpu}};
  f.input = [](uint64_t n, Rng&) { return Json{{"n", n}}; };
  f.check = NoCheck;
  return f;
}

SoakFlow RegexpBomb() {
  SoakFlow f;
  f.name = "regexp_bomb";
  f.what = "/^(a+)+$/.test('a'.repeat(40) + 'b') under cpu_ms 100: the engine's interrupt never fires";
  f.source = R"(export default function (input) { return /^(a+)+$/.test("a".repeat(input.a) + "b"); })";
  f.manifest = R"({"budgets": {"cpu_ms": 100, "heap_mb": 16, "deadline_ms": 3000, "calls_in_flight": 1, "journal_kb": 16, "log_kb": 4}})";
  f.weight = 4;
  f.ends = {{Outcome::kBudgetExhausted, Budget::kCpu}};
  f.input = [](uint64_t n, Rng&) { return Json{{"n", n}, {"a", 40}}; };
  // Only the parent can stop it: its own measurement, or the kernel's RLIMIT_CPU behind it.
  f.check = [](const Json&, const ActivationResult& r) -> std::optional<std::string> {
    if (r.outcome != Outcome::kBudgetExhausted) return std::nullopt;
    if (r.message.find("measured by the parent") == std::string::npos && r.message.find("RLIMIT_CPU") == std::string::npos)
      return "not ended by the parent's CPU check: " + r.message;
    if (r.cpu_us > 1'000'000) return "ran " + std::to_string(r.cpu_us / 1000) + " ms of CPU under a 100 ms budget";
    return std::nullopt;
  };
  return f;
}

SoakFlow MemoryBomb() {
  SoakFlow f;
  f.name = "memory_bomb";
  f.what = "arrays, strings or typed arrays grown until heap_mb 16 refuses";
  f.source = R"(export default function (input) {
  const keep = [];
  for (let i = 0;; i++) {
    if (input.mode === 0) keep.push(new Array(4096).fill(i));
    else if (input.mode === 1) keep.push("m".repeat(65536) + i);
    else keep.push(new Uint8Array(1 << 20));
  }
})";
  f.manifest = R"({"budgets": {"cpu_ms": 2000, "heap_mb": 16, "deadline_ms": 10000, "calls_in_flight": 1, "journal_kb": 16, "log_kb": 4}})";
  f.weight = 8;
  f.ends = {{Outcome::kBudgetExhausted, Budget::kMemory}};
  f.input = [](uint64_t n, Rng& rng) { return Json{{"n", n}, {"mode", Between(rng, 0, 2)}}; };
  f.check = NoCheck;
  return f;
}

SoakFlow DeadlineKill() {
  SoakFlow f;
  f.name = "deadline";
  f.what = "awaits soak.late, answered 1.5 s later, under deadline_ms 300";
  f.source = R"(export default async function (input, host) {
  await host.call("soak.late", {ms: input.ms});
  return "answered before the deadline";
})";
  f.manifest = R"({"grants": {"soak.late": {}},
  "budgets": {"cpu_ms": 1000, "heap_mb": 16, "deadline_ms": 300, "calls_in_flight": 1, "journal_kb": 16, "log_kb": 4}})";
  f.weight = 6;
  f.ends = {{Outcome::kDeadline, std::nullopt}};
  f.input = [](uint64_t n, Rng&) { return Json{{"n", n}, {"ms", 1500}}; };
  f.check = NoCheck;
  return f;
}

SoakFlow Throws() {
  SoakFlow f;
  f.name = "throws";
  f.what = "throws a TypeError";
  f.source = R"(export default function (input) { throw new TypeError("soak: thrown on purpose " + input.n); })";
  f.manifest = R"({"budgets": {"cpu_ms": 1000, "heap_mb": 16, "deadline_ms": 10000, "calls_in_flight": 1, "journal_kb": 16, "log_kb": 4}})";
  f.weight = 7;
  f.ends = {{Outcome::kScriptError, std::nullopt}};
  f.input = [](uint64_t n, Rng&) { return Json{{"n", n}}; };
  f.check = [](const Json& input, const ActivationResult& r) -> std::optional<std::string> {
    if (r.outcome != Outcome::kScriptError) return std::nullopt;
    const std::string want = "soak: thrown on purpose " + std::to_string(input["n"].get<uint64_t>());
    if (r.error_name != "TypeError" || r.message.find(want) == std::string::npos)
      return "error " + r.error_name + ": " + r.message + " (expected TypeError: " + want + ")";
    return std::nullopt;
  };
  return f;
}

SoakFlow InFlightBomb() {
  SoakFlow f;
  f.name = "in_flight";
  f.what = "20 soak.late calls at once under calls_in_flight 8";
  f.source = R"(export default async function (input, host) {
  const calls = [];
  for (let i = 0; i < input.calls; i++) calls.push(host.call("soak.late", {ms: 50}));
  await Promise.all(calls);
  return "every call answered";
})";
  f.manifest = R"({"grants": {"soak.late": {}},
  "budgets": {"cpu_ms": 1000, "heap_mb": 16, "deadline_ms": 5000, "calls_in_flight": 8, "journal_kb": 64, "log_kb": 4}})";
  f.weight = 2;
  f.ends = {{Outcome::kBudgetExhausted, Budget::kCallsInFlight}};
  f.input = [](uint64_t n, Rng&) { return Json{{"n", n}, {"calls", 20}}; };
  f.check = NoCheck;
  return f;
}

SoakFlow JournalBomb() {
  SoakFlow f;
  f.name = "journal_bomb";
  f.what = "denied calls (an unknown host call) with 200 KiB arguments until journal_kb 64 is spent";
  f.source = R"(export default async function (input, host) {
  const big = "j".repeat(input.bytes);
  for (let i = 0;; i++) {
    try {
      await host.call("soak.nope", {i, big});
    } catch (e) {
      if (e.name !== "PermissionDenied") throw e;
    }
  }
})";
  f.manifest = R"({"budgets": {"cpu_ms": 2000, "heap_mb": 16, "deadline_ms": 10000, "calls_in_flight": 1, "journal_kb": 64, "log_kb": 4}})";
  f.weight = 2;
  f.ends = {{Outcome::kBudgetExhausted, Budget::kJournal}};
  f.input = [](uint64_t n, Rng&) { return Json{{"n", n}, {"bytes", 200 * 1024}}; };
  f.check = NoCheck;
  return f;
}

// The activation's own result is a journaled value too (journal_value_max_bytes, module.h).
SoakFlow BigResult() {
  SoakFlow f;
  f.name = "big_result";
  f.what = "returns a 512 KiB string: its journal row must keep at most journal_value_max_bytes";
  f.source = R"(export default function (input) { return "r".repeat(input.bytes); })";
  f.manifest = R"({"budgets": {"cpu_ms": 1000, "heap_mb": 16, "deadline_ms": 10000, "calls_in_flight": 1, "journal_kb": 16, "log_kb": 4}})";
  f.weight = 1;
  f.ends = {{Outcome::kOk, std::nullopt}};
  f.input = [](uint64_t n, Rng&) { return Json{{"n", n}, {"bytes", 512 * 1024}}; };
  f.check = [](const Json& input, const ActivationResult& r) -> std::optional<std::string> {
    if (r.ok() && (!r.result.is_string() || r.result.get_ref<const std::string&>().size() != input["bytes"].get<size_t>()))
      return "the flow did not get its whole result back";
    return std::nullopt;
  };
  return f;
}

// Opt-in (weight 0): a frame of many small values, which the parent parses before anything else
// looks at it. Measures what one frame can cost the parent beyond its bytes.
SoakFlow ParseBomb() {
  SoakFlow f;
  f.name = "parse_bomb";
  f.what = "a call whose arguments are 7 million zeros (a 14 MB frame of tiny JSON values): refused by the worker "
           "past protocol::kMaxMessageValues, as the parent would refuse the frame";
  f.source = R"(export default async function (input, host) {
  const zeros = new Array(input.n).fill(0);
  try {
    await host.call("soak.nope", zeros);
  } catch (e) {
    if (e.name !== "TypeError" || !e.message.includes("JSON values")) throw e;
  }
  return "refused";
})";
  f.manifest = R"({"budgets": {"cpu_ms": 10000, "heap_mb": 512, "deadline_ms": 60000, "calls_in_flight": 1, "journal_kb": 16, "log_kb": 4}})";
  f.weight = 0;
  f.ends = {{Outcome::kOk, std::nullopt}};
  f.input = [](uint64_t, Rng&) { return Json{{"n", 7'000'000}}; };
  f.check = NoCheck;
  return f;
}

}  // namespace

int64_t OrdinarySum(int64_t n) {
  int64_t s = 0;
  for (int64_t i = 0; i < kOrdinaryRounds; ++i) s = (s * 31 + i + n) % 1000003;
  return s;
}

std::vector<SoakFlow> MakeFlows() {
  return {Ordinary(),   LogFlood(),     KvAmplification(), CpuBomb(),     RegexpBomb(),
          MemoryBomb(), DeadlineKill(), Throws(),          InFlightBomb(), JournalBomb(), BigResult(), ParseBomb()};
}

}  // namespace basal::soak
