// Unit tests of the manifest: SHA-256 against the FIPS 180-4 vectors, parsing (every rule and its
// exact message), default deny in Authorize, and the canonical form behind the manifest hash.
#include "basal/manifest.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "parent/host_calls/kv.h"
#include "parent/host_calls/log.h"

namespace basal {
namespace {

// --- SHA-256 -------------------------------------------------------------------------------------

TEST(Sha256Test, StandardVectors) {
  EXPECT_EQ(Sha256Hex(""), "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "sha256:248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Sha256Hex(std::string(1'000'000, 'a')),
            "sha256:cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256Test, PaddingBoundaries) {
  // 55, 56 and 64 bytes straddle the one-block / two-block padding cases.
  EXPECT_EQ(Sha256Hex(std::string(55, 'a')), "sha256:9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  EXPECT_EQ(Sha256Hex(std::string(56, 'a')), "sha256:b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  EXPECT_EQ(Sha256Hex(std::string(64, 'a')), "sha256:ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
  EXPECT_EQ(Sha256Hex(std::string_view("\0", 1)),
            "sha256:6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d");
}

// --- Parse ---------------------------------------------------------------------------------------

void Noop(const HostCallContext&, const Json&, HostCallReply) {}

class ManifestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(RegisterLogHostCall(registry_, [](const HostCallContext&, std::string_view, std::string_view) {}));
    // kv.* specs without a journal: the manifest only uses check_grant and authorize.
    for (KvOp op : {KvOp::kGet, KvOp::kPut, KvOp::kDelete, KvOp::kList}) {
      HostCallSpec spec;
      spec.name = KvOpName(op);
      spec.check_grant = CheckKvGrant;
      spec.authorize = [op](const Json& c, const Json& a) { return AuthorizeKv(op, c, a); };
      spec.handler = Noop;
      ASSERT_TRUE(registry_.Register(std::move(spec)));
    }
    HostCallSpec plain;  // an embedder call with no constraints and no authorize
    plain.name = "clock.now";
    plain.handler = Noop;
    ASSERT_TRUE(registry_.Register(std::move(plain)));
  }

  Manifest MustParse(std::string_view text) {
    auto m = Manifest::Parse(text, registry_);
    EXPECT_TRUE(m.ok()) << text << " -> " << (m ? "" : m.error().message);
    if (!m) std::abort();
    return std::move(*m);
  }
  std::string ErrorOf(std::string_view text) {
    auto m = Manifest::Parse(text, registry_);
    if (m) return "<parsed>";
    EXPECT_EQ(m.error().code, ErrorCode::kInvalidArgument) << m.error().message;
    return m.error().message;
  }

  HostCallRegistry registry_;
};

TEST_F(ManifestTest, EmptyObjectGetsDefaults) {
  Manifest m = MustParse("{}");
  EXPECT_TRUE(m.grants().empty());
  EXPECT_EQ(m.budgets().cpu, std::chrono::milliseconds(10'000));
  EXPECT_EQ(m.budgets().heap_limit_bytes, 64ull << 20);
  EXPECT_EQ(m.budgets().stack_limit_bytes, 1024ull << 10);
  EXPECT_EQ(m.budgets().deadline, std::chrono::milliseconds(60'000));
  EXPECT_EQ(m.Canonical(),
            R"({"budgets":{"calls_in_flight":64,"cpu_ms":10000,"deadline_ms":60000,"heap_mb":64,"journal_kb":4096,)"
            R"("log_kb":1024,"stack_kb":1024},"grants":{}})");
  EXPECT_EQ(m.hash(), Sha256Hex(m.Canonical()));
}

TEST_F(ManifestTest, FullManifest) {
  Manifest m = MustParse(R"({
    "grants": {"kv.get": {"namespaces": ["orders", "users"]}, "log": {}, "clock.now": {}},
    "budgets": {"cpu_ms": 1000, "heap_mb": 128, "stack_kb": 256, "deadline_ms": 5000}})");
  EXPECT_EQ(m.grants().size(), 3u);
  EXPECT_EQ(m.grants().at("kv.get"), Json::parse(R"({"namespaces": ["orders", "users"]})"));
  EXPECT_EQ(m.budgets().cpu, std::chrono::milliseconds(1000));
  EXPECT_EQ(m.budgets().heap_limit_bytes, 128ull << 20);
  EXPECT_EQ(m.budgets().stack_limit_bytes, 256ull << 10);
  EXPECT_EQ(m.budgets().deadline, std::chrono::milliseconds(5000));
}

TEST_F(ManifestTest, PartialBudgetsKeepDefaults) {
  Manifest m = MustParse(R"({"budgets": {"heap_mb": 4096}})");
  EXPECT_EQ(m.budgets().heap_limit_bytes, 4096ull << 20);
  EXPECT_EQ(m.budgets().cpu, std::chrono::milliseconds(10'000));
  EXPECT_EQ(m.budgets().deadline, std::chrono::milliseconds(60'000));
}

TEST_F(ManifestTest, BudgetBoundsAreInclusive) {
  MustParse(R"({"budgets": {"cpu_ms": 1, "heap_mb": 1, "stack_kb": 64, "deadline_ms": 1}})");
  MustParse(R"({"budgets": {"cpu_ms": 3600000, "heap_mb": 4096, "stack_kb": 4096, "deadline_ms": 3600000}})");
  MustParse(R"({"budgets": {"calls_in_flight": 1, "journal_kb": 16, "log_kb": 0}})");
  MustParse(R"({"budgets": {"calls_in_flight": 1024, "journal_kb": 65536, "log_kb": 65536}})");
}

// The budgets that bound what one activation makes the parent hold and write.
TEST_F(ManifestTest, CallAndJournalBudgets) {
  Manifest m = MustParse(R"({"budgets": {"calls_in_flight": 8, "journal_kb": 256, "log_kb": 32}})");
  EXPECT_EQ(m.budgets().calls_in_flight, 8u);
  EXPECT_EQ(m.budgets().journal_bytes, 256u << 10);
  EXPECT_EQ(m.budgets().log_bytes, 32u << 10);
  Manifest d = MustParse("{}");
  EXPECT_EQ(d.budgets().calls_in_flight, 64u);
  EXPECT_EQ(d.budgets().journal_bytes, 4u << 20);
  EXPECT_EQ(d.budgets().log_bytes, 1u << 20);
  EXPECT_EQ(ErrorOf(R"({"budgets": {"calls_in_flight": 0}})"),
            "budgets.calls_in_flight: must be an integer from 1 to 1024 (got 0)");
  EXPECT_EQ(ErrorOf(R"({"budgets": {"journal_kb": 4294967312}})"),
            "budgets.journal_kb: must be an integer from 16 to 65536 (got 4294967312)");
  EXPECT_EQ(MustParse(R"({"budgets": {"journal_kb": 64}})").budgets().log_bytes, 64u << 10)
      << "the log default follows a smaller journal budget";
  EXPECT_EQ(ErrorOf(R"({"budgets": {"journal_kb": 64, "log_kb": 65}})"),
            "budgets.log_kb: must not exceed budgets.journal_kb (64): log lines are journaled too");
}

TEST_F(ManifestTest, NotJson) {
  std::string e = ErrorOf("{\"grants\": ");
  EXPECT_EQ(e.rfind("manifest: not valid JSON: ", 0), 0u) << e;
  EXPECT_NE(e.find("line 1"), std::string::npos) << e;
  EXPECT_EQ(ErrorOf("").rfind("manifest: not valid JSON: ", 0), 0u);
  EXPECT_EQ(ErrorOf("{} {}").rfind("manifest: not valid JSON: ", 0), 0u);
  EXPECT_EQ(ErrorOf("{\"a\": \"\xff\"}").rfind("manifest: not valid JSON: ", 0), 0u);
}

TEST_F(ManifestTest, DeepNestingIsAnErrorNotACrash) {
  std::string deep = "{\"budgets\": " + std::string(50'000, '[') + std::string(50'000, ']') + "}";
  std::string path = "budgets";
  for (int i = 0; i < 63; ++i) path += "[0]";  // the root object is the first of the 64 levels
  EXPECT_EQ(ErrorOf(deep), path + ": nested deeper than 64 levels");
  std::string unclosed(200'000, '[');
  EXPECT_EQ(ErrorOf(unclosed).rfind("manifest: not valid JSON", 0), 0u);
  // 64 levels are fine as far as nesting goes (the constraint itself is then checked).
  std::string ok = R"({"grants": {"log": )" + std::string(62, '[') + std::string(62, ']') + "}}";
  EXPECT_EQ(ErrorOf(ok).rfind("grants.log: must be an object of constraints", 0), 0u) << ErrorOf(ok);
}

TEST_F(ManifestTest, TopLevel) {
  EXPECT_EQ(ErrorOf("[]"), "manifest: must be a JSON object (got [])");
  EXPECT_EQ(ErrorOf("null"), "manifest: must be a JSON object (got null)");
  EXPECT_EQ(ErrorOf(R"({"grant": {}})"), R"(manifest: unknown key "grant" (expected "grants", "budgets", "durable" or "retry"))");
  EXPECT_EQ(ErrorOf(R"({"grants": {}, "grants": {"log": {}}})"),
            R"(manifest: duplicate key "grants" (each key may appear once))");
}

// "durable": true (docs/durable.md): a flow's runs outlive their host. Only a boolean, only for a
// flow; a manifest that does not say it (or says false) keeps the hash it always had.
TEST_F(ManifestTest, Durable) {
  auto plain = Manifest::Parse(R"({"grants": {"log": {}}})", registry_);
  auto off = Manifest::Parse(R"({"grants": {"log": {}}, "durable": false})", registry_);
  auto on = Manifest::Parse(R"({"grants": {"log": {}}, "durable": true})", registry_);
  ASSERT_TRUE(plain && off && on);
  EXPECT_FALSE(plain->durable());
  EXPECT_FALSE(off->durable());
  EXPECT_TRUE(on->durable());
  EXPECT_EQ(plain->hash(), off->hash());
  EXPECT_NE(plain->hash(), on->hash()) << "durability is part of what an operator approves";
  EXPECT_NE(on->Canonical().find(R"("durable":true)"), std::string::npos) << on->Canonical();
  EXPECT_EQ(ErrorOf(R"({"durable": "yes"})"), R"(durable: must be true or false (got "yes"))");
  EXPECT_EQ(ErrorOf(R"({"durable": 1})"), "durable: must be true or false (got 1)");
  auto policy = Manifest::Parse(R"({"durable": true})", registry_, Profile::kCodemode);
  ASSERT_FALSE(policy);
  EXPECT_EQ(policy.error().message,
            "durable: only a flow's runs are durable; a codemode policy's scripts are not resumed");
}

// "retry" (docs/durable.md#retries): a durable flow's failed attempts run again. What the operator
// leaves out is filled with the documented defaults, and the filled-in policy is what is approved.
TEST_F(ManifestTest, RetryPolicyParsesWithItsDefaults) {
  Manifest none = MustParse(R"({"durable": true})");
  EXPECT_FALSE(none.retry().has_value()) << "no retry unless the manifest asks for it";
  Manifest m = MustParse(R"({"durable": true, "retry": {"max_attempts": 3}})");
  ASSERT_TRUE(m.retry().has_value());
  EXPECT_EQ(m.retry()->max_attempts, 3);
  EXPECT_EQ(m.retry()->initial, std::chrono::milliseconds(1000));
  EXPECT_EQ(m.retry()->factor, 2.0);
  EXPECT_EQ(m.retry()->max, std::chrono::milliseconds(3'600'000));
  EXPECT_EQ(m.retry()->on, (std::vector<std::string>{"deadline", "script_error", "worker_crashed"}));
  EXPECT_TRUE(m.retry()->RetriesOn("script_error"));
  EXPECT_FALSE(m.retry()->RetriesOn("cancelled"));
  EXPECT_FALSE(m.retry()->RetriesOn("budget_exhausted")) << "not in the default list";
  EXPECT_NE(m.Canonical().find(R"("retry":{"backoff":{"factor":2.0,"initial_ms":1000,"max_ms":3600000},)"
                               R"("max_attempts":3,"on":["deadline","script_error","worker_crashed"]})"),
            std::string::npos)
      << m.Canonical();
  EXPECT_NE(m.hash(), none.hash()) << "the retry policy is part of what an operator approves";
  EXPECT_EQ(m.hash(), MustParse(R"({"durable": true, "retry": {"max_attempts": 3, "backoff": {"initial_ms": 1000,
      "factor": 2, "max_ms": 3600000}, "on": ["worker_crashed", "script_error", "deadline"]}})").hash())
      << "the defaults written out are the same policy";

  Manifest full = MustParse(R"({"durable": true, "retry": {"max_attempts": 100, "backoff": {"initial_ms": 0,
      "factor": 10, "max_ms": 31536000000}, "on": ["spawn_failed", "budget_exhausted", "spawn_failed"]}})");
  EXPECT_EQ(full.retry()->max_attempts, 100);
  EXPECT_EQ(full.retry()->initial, std::chrono::milliseconds(0));
  EXPECT_EQ(full.retry()->factor, 10.0);
  EXPECT_EQ(full.retry()->max, std::chrono::milliseconds(31'536'000'000LL));
  EXPECT_EQ(full.retry()->on, (std::vector<std::string>{"budget_exhausted", "spawn_failed"})) << "sorted, once each";
  EXPECT_EQ(MustParse(R"({"durable": true, "retry": {"max_attempts": 1}})").retry()->max_attempts, 1);
  EXPECT_EQ(MustParse(R"({"durable": true, "retry": {"max_attempts": 2, "backoff": {"factor": 1}}})").retry()->factor, 1.0);
}

// The wait before each attempt grows by the factor from initial_ms and never passes max_ms.
TEST_F(ManifestTest, RetryBackoffGrowsByItsFactorUpToItsMax) {
  Manifest m = MustParse(R"({"durable": true, "retry": {"max_attempts": 10, "backoff": {"initial_ms": 100,
      "factor": 3, "max_ms": 2000}}})");
  const auto& p = *m.retry();
  EXPECT_EQ(p.Backoff(2), std::chrono::milliseconds(100));
  EXPECT_EQ(p.Backoff(3), std::chrono::milliseconds(300));
  EXPECT_EQ(p.Backoff(4), std::chrono::milliseconds(900));
  EXPECT_EQ(p.Backoff(5), std::chrono::milliseconds(2000)) << "2700 capped at max_ms";
  EXPECT_EQ(p.Backoff(100), std::chrono::milliseconds(2000));
  Manifest flat = MustParse(R"({"durable": true, "retry": {"max_attempts": 4, "backoff": {"initial_ms": 250, "factor": 1}}})");
  EXPECT_EQ(flat.retry()->Backoff(2), std::chrono::milliseconds(250));
  EXPECT_EQ(flat.retry()->Backoff(4), std::chrono::milliseconds(250));
  Manifest year = MustParse(R"({"durable": true, "retry": {"max_attempts": 100, "backoff": {"initial_ms": 31536000000,
      "factor": 10, "max_ms": 31536000000}}})");
  EXPECT_EQ(year.retry()->Backoff(100), std::chrono::milliseconds(31'536'000'000LL)) << "no overflow at the largest bounds";
}

// Every bound and bad shape of "retry" is refused, naming the key, the rule and what was written.
TEST_F(ManifestTest, RetryPolicyBoundsAndShapesAreRefused) {
  auto err = [&](std::string_view retry) { return ErrorOf(R"({"durable": true, "retry": )" + std::string(retry) + "}"); };
  EXPECT_EQ(err(R"({"max_attempts": 0})"),
            "retry.max_attempts: must be an integer from 1 to 100, the first attempt included (got 0)");
  EXPECT_EQ(err(R"({"max_attempts": 101})"),
            "retry.max_attempts: must be an integer from 1 to 100, the first attempt included (got 101)");
  EXPECT_EQ(err(R"({"max_attempts": 2.5})"),
            "retry.max_attempts: must be an integer from 1 to 100, the first attempt included (got 2.5)");
  EXPECT_EQ(err(R"({"max_attempts": "3"})"),
            R"(retry.max_attempts: must be an integer from 1 to 100, the first attempt included (got "3"))");
  EXPECT_EQ(err(R"({"max_attempts": -1})"),
            "retry.max_attempts: must be an integer from 1 to 100, the first attempt included (got -1)");
  EXPECT_EQ(err(R"({})"), "retry.max_attempts: is required (1 to 100, the first attempt included)");
  EXPECT_EQ(err(R"({"on": ["deadline"]})"), "retry.max_attempts: is required (1 to 100, the first attempt included)");
  EXPECT_EQ(err("3"), R"(retry: must be an object such as {"max_attempts": 3} (got 3))");
  EXPECT_EQ(err("true"), R"(retry: must be an object such as {"max_attempts": 3} (got true))");
  EXPECT_EQ(err(R"({"max_attempts": 3, "attempts": 3})"),
            R"(retry: unknown key "attempts" (expected "max_attempts", "backoff" or "on"))");

  EXPECT_EQ(err(R"({"max_attempts": 3, "backoff": {"factor": 0.5}})"), "retry.backoff.factor: must be a number from 1 to 10 (got 0.5)");
  EXPECT_EQ(err(R"({"max_attempts": 3, "backoff": {"factor": 10.5}})"), "retry.backoff.factor: must be a number from 1 to 10 (got 10.5)");
  EXPECT_EQ(err(R"({"max_attempts": 3, "backoff": {"factor": 0}})"), "retry.backoff.factor: must be a number from 1 to 10 (got 0)");
  EXPECT_EQ(err(R"({"max_attempts": 3, "backoff": {"factor": "2"}})"), R"(retry.backoff.factor: must be a number from 1 to 10 (got "2"))");
  EXPECT_EQ(err(R"({"max_attempts": 3, "backoff": {"initial_ms": -1}})"),
            "retry.backoff.initial_ms: must be an integer of milliseconds from 0 to 31536000000 (365 days) (got -1)");
  EXPECT_EQ(err(R"({"max_attempts": 3, "backoff": {"initial_ms": 1.5}})"),
            "retry.backoff.initial_ms: must be an integer of milliseconds from 0 to 31536000000 (365 days) (got 1.5)");
  EXPECT_EQ(err(R"({"max_attempts": 3, "backoff": {"max_ms": 31536000001}})"),
            "retry.backoff.max_ms: must be an integer of milliseconds from 0 to 31536000000 (365 days) (got 31536000001)");
  EXPECT_EQ(err(R"({"max_attempts": 3, "backoff": {"initial_ms": 5000, "max_ms": 4000}})"),
            "retry.backoff.max_ms: is shorter than initial_ms");
  EXPECT_EQ(err(R"({"max_attempts": 3, "backoff": {"initial_ms": 3600001}})"), "retry.backoff.max_ms: is shorter than initial_ms")
      << "an initial wait past the default max_ms needs its own max_ms";
  EXPECT_EQ(err(R"({"max_attempts": 3, "backoff": {"jitter": true}})"),
            R"(retry.backoff: unknown key "jitter" (expected "initial_ms", "factor" or "max_ms"))");
  EXPECT_EQ(err(R"({"max_attempts": 3, "backoff": 1000})"),
            R"(retry.backoff: must be an object {"initial_ms", "factor", "max_ms"} (got 1000))");

  const std::string not_curable =
      " is not an outcome a retry can cure (script_error, deadline, worker_crashed, budget_exhausted, spawn_failed)";
  EXPECT_EQ(err(R"({"max_attempts": 3, "on": ["cancelled"]})"), R"(retry.on: "cancelled")" + not_curable);
  EXPECT_EQ(err(R"({"max_attempts": 3, "on": ["script_error", "diverged"]})"), R"(retry.on: "diverged")" + not_curable);
  EXPECT_EQ(err(R"({"max_attempts": 3, "on": ["protocol_violation"]})"), R"(retry.on: "protocol_violation")" + not_curable);
  EXPECT_EQ(err(R"({"max_attempts": 3, "on": ["Script_Error"]})"), R"(retry.on: "Script_Error")" + not_curable);
  EXPECT_EQ(err(R"({"max_attempts": 3, "on": [1]})"), "retry.on: 1" + not_curable);
  EXPECT_EQ(err(R"({"max_attempts": 3, "on": []})"),
            R"(retry.on: must be a non-empty list of outcomes such as ["script_error", "deadline"] (got []))");
  EXPECT_EQ(err(R"({"max_attempts": 3, "on": "script_error"})"),
            R"(retry.on: must be a non-empty list of outcomes such as ["script_error", "deadline"] (got "script_error"))");
}

// Each attempt resumes from the journal, so only a durable flow can be retried: a manifest that
// asks for retries without durability, or a codemode policy, is refused saying what to do.
TEST_F(ManifestTest, RetryNeedsADurableFlow) {
  const std::string add_durable =
      R"(retry: only a durable flow's runs are retried (each attempt resumes from the journal): add "durable": true)";
  EXPECT_EQ(ErrorOf(R"({"retry": {"max_attempts": 3}})"), add_durable);
  EXPECT_EQ(ErrorOf(R"({"durable": false, "retry": {"max_attempts": 3}})"), add_durable);
  EXPECT_EQ(ErrorOf(R"({"retry": {"max_attempts": 3}, "durable": false})"), add_durable);
  auto policy = Manifest::Parse(R"({"retry": {"max_attempts": 3}})", registry_, Profile::kCodemode);
  ASSERT_FALSE(policy);
  EXPECT_EQ(policy.error().message, "retry: only a durable flow's runs are retried; a codemode policy's scripts are not");
  EXPECT_EQ(ErrorOf(R"({"retry": {"max_attempts": 0}})"),
            "retry.max_attempts: must be an integer from 1 to 100, the first attempt included (got 0)")
      << "the policy's own error comes first";
}

TEST_F(ManifestTest, DuplicateKeysNameTheirPath) {
  EXPECT_EQ(ErrorOf(R"({"grants": {"kv.get": {"namespaces": ["a"]}, "kv.get": {"namespaces": ["b"]}}})"),
            R"(grants: duplicate key "kv.get" (each key may appear once))");
  EXPECT_EQ(ErrorOf(R"({"grants": {"kv.get": {"namespaces": ["a"], "namespaces": ["b"]}}})"),
            R"(grants.kv.get: duplicate key "namespaces" (each key may appear once))");
  EXPECT_EQ(ErrorOf(R"({"budgets": {"cpu_ms": 5, "cpu_ms": 6}})"),
            R"(budgets: duplicate key "cpu_ms" (each key may appear once))");
}

TEST_F(ManifestTest, Grants) {
  EXPECT_EQ(ErrorOf(R"({"grants": []})"), "grants: must be an object of host-call names to constraints (got [])");
  EXPECT_EQ(
      ErrorOf(R"({"grants": {"kv.gte": {}}})"),
      R"(grants.kv.gte: no host call named "kv.gte" (known: clock.now, kv.delete, kv.get, kv.list, kv.put, log))");
  EXPECT_EQ(ErrorOf(R"({"grants": {"a b": {}}})").rfind(R"(grants["a b"]: no host call named "a b")", 0), 0u);
  EXPECT_EQ(ErrorOf(R"({"grants": {"log": true}})"),
            "grants.log: must be an object of constraints, {} for none (got true)");
  EXPECT_EQ(ErrorOf(R"({"grants": {"log": {"level": "info"}}})"),
            R"(grants.log: log takes no constraints; grant it with {} (got {"level":"info"}))");
  EXPECT_EQ(ErrorOf(R"({"grants": {"clock.now": {"x": 1}}})"),
            R"(grants.clock.now: clock.now takes no constraints; grant it with {} (got {"x":1}))");
}

TEST_F(ManifestTest, KvGrantConstraints) {
  EXPECT_EQ(ErrorOf(R"({"grants": {"kv.get": {}}})"),
            R"(grants.kv.get: missing "namespaces": the list of namespaces granted, e.g. {"namespaces": ["orders"]})");
  EXPECT_EQ(ErrorOf(R"({"grants": {"kv.get": {"namespaces": ["a"], "keys": []}}})"),
            R"(grants.kv.get: unknown key "keys" (expected "namespaces"))");
  EXPECT_EQ(ErrorOf(R"({"grants": {"kv.get": {"namespaces": []}}})"),
            "grants.kv.get.namespaces: must be a non-empty array of namespace names (got [])");
  EXPECT_EQ(ErrorOf(R"({"grants": {"kv.get": {"namespaces": "orders"}}})"),
            R"(grants.kv.get.namespaces: must be a non-empty array of namespace names (got "orders"))");
  EXPECT_EQ(ErrorOf(R"({"grants": {"kv.get": {"namespaces": ["orders", ""]}}})"),
            R"(grants.kv.get.namespaces[1]: must be a non-empty string (got ""))");
  EXPECT_EQ(ErrorOf(R"({"grants": {"kv.put": {"namespaces": ["orders", 7]}}})"),
            "grants.kv.put.namespaces[1]: must be a non-empty string (got 7)");
  EXPECT_EQ(ErrorOf(R"({"grants": {"kv.get": {"namespaces": ["a", "b", "a"]}}})"),
            R"(grants.kv.get.namespaces[2]: duplicate namespace "a")");
  std::string long_ns(257, 'n');
  EXPECT_EQ(ErrorOf(R"({"grants": {"kv.get": {"namespaces": [")" + long_ns + "\"]}}}"),
            "grants.kv.get.namespaces[0]: is 257 bytes; a namespace is at most 256");
}

TEST_F(ManifestTest, Budgets) {
  EXPECT_EQ(ErrorOf(R"({"budgets": 5})"), "budgets: must be an object (got 5)");
  EXPECT_EQ(ErrorOf(R"({"budgets": {"heap_mb": "64"}})"),
            R"(budgets.heap_mb: must be an integer from 1 to 4096 (got "64"))");
  EXPECT_EQ(ErrorOf(R"({"budgets": {"heap_mb": 64.0}})"),
            "budgets.heap_mb: must be an integer from 1 to 4096 (got 64.0)");
  EXPECT_EQ(ErrorOf(R"({"budgets": {"heap_mb": 0}})"), "budgets.heap_mb: must be an integer from 1 to 4096 (got 0)");
  EXPECT_EQ(ErrorOf(R"({"budgets": {"heap_mb": 4097}})"),
            "budgets.heap_mb: must be an integer from 1 to 4096 (got 4097)");
  EXPECT_EQ(ErrorOf(R"({"budgets": {"cpu_ms": -1}})"), "budgets.cpu_ms: must be an integer from 1 to 3600000 (got -1)");
  EXPECT_EQ(ErrorOf(R"({"budgets": {"cpu_ms": 18446744073709551615}})"),
            "budgets.cpu_ms: must be an integer from 1 to 3600000 (got 18446744073709551615)");
  EXPECT_EQ(ErrorOf(R"({"budgets": {"stack_kb": 63}})"),
            "budgets.stack_kb: must be an integer from 64 to 4096 (got 63)");
  EXPECT_EQ(ErrorOf(R"({"budgets": {"deadline_ms": null}})"),
            "budgets.deadline_ms: must be an integer from 1 to 3600000 (got null)");
  EXPECT_EQ(ErrorOf(R"({"budgets": {"wall_ms": 5}})"),
            R"(budgets.wall_ms: unknown budget "wall_ms" (expected cpu_ms, heap_mb, stack_kb, deadline_ms, )"
            R"(calls_in_flight, journal_kb or log_kb))");
}

// --- Authorize -----------------------------------------------------------------------------------

TEST_F(ManifestTest, DefaultDeny) {
  Manifest m = MustParse(R"({"grants": {"kv.get": {"namespaces": ["orders"]}}})");
  EXPECT_EQ(m.Authorize(*registry_.Find("kv.put"), {{"namespace", "orders"}, {"key", "k"}, {"value", 1}}),
            R"("kv.put" is not granted by the manifest)");
  EXPECT_EQ(m.Authorize(*registry_.Find("clock.now"), Json::object()), R"("clock.now" is not granted by the manifest)");
}

TEST_F(ManifestTest, GrantedNamespacesOnly) {
  Manifest m = MustParse(R"({"grants": {"kv.get": {"namespaces": ["orders", "users"]}}})");
  const HostCallSpec& get = *registry_.Find("kv.get");
  EXPECT_EQ(m.Authorize(get, {{"namespace", "orders"}, {"key", "k"}}), std::nullopt);
  EXPECT_EQ(m.Authorize(get, {{"namespace", "users"}, {"key", "k"}}), std::nullopt);
  EXPECT_EQ(m.Authorize(get, {{"namespace", "payments"}, {"key", "k"}}),
            R"(namespace "payments" is not granted to kv.get (granted: orders, users))");
  EXPECT_EQ(m.Authorize(get, {{"namespace", "Orders"}, {"key", "k"}}),
            R"(namespace "Orders" is not granted to kv.get (granted: orders, users))");
  EXPECT_EQ(m.Authorize(get, {{"key", "k"}}),
            R"(kv.get needs a string "namespace" argument to be authorized (got none))");
  EXPECT_EQ(m.Authorize(get, {{"namespace", 5}}),
            R"(kv.get needs a string "namespace" argument to be authorized (got 5))");
  EXPECT_EQ(m.Authorize(get, Json::array()), R"(kv.get arguments must be an object naming a "namespace" (got []))");
}

TEST_F(ManifestTest, LogNeedsNoGrantAndPlainGrantAdmitsAll) {
  Manifest none = MustParse("{}");
  EXPECT_EQ(none.Authorize(*registry_.Find("log"), {{"level", "info"}, {"message", "hi"}}), std::nullopt);
  Manifest with = MustParse(R"({"grants": {"log": {}, "clock.now": {}}})");
  EXPECT_EQ(with.Authorize(*registry_.Find("log"), Json::object()), std::nullopt);
  EXPECT_EQ(with.Authorize(*registry_.Find("clock.now"), {{"anything", 1}}), std::nullopt);
}

// --- Canonical form and hash ---------------------------------------------------------------------

TEST_F(ManifestTest, CanonicalIgnoresOrderAndSpellingOfDefaults) {
  Manifest a = MustParse(R"({"budgets": {"heap_mb": 64}, "grants": {"log": {}, "kv.get": {"namespaces": ["o"]}}})");
  Manifest b = MustParse(R"(  {"grants": {"kv.get": {"namespaces": ["o"]}, "log": {}}}  )");
  EXPECT_EQ(a.Canonical(), b.Canonical());
  EXPECT_EQ(a.hash(), b.hash());
  EXPECT_EQ(a.Canonical(), R"({"budgets":{"calls_in_flight":64,"cpu_ms":10000,"deadline_ms":60000,"heap_mb":64,"journal_kb":4096,)"
            R"("log_kb":1024,"stack_kb":1024},)"
                           R"("grants":{"kv.get":{"namespaces":["o"]},"log":{}}})");
  EXPECT_EQ(MustParse(R"({"grants": {}})").hash(), MustParse("{}").hash());
  EXPECT_EQ(a.hash().rfind("sha256:", 0), 0u);
  EXPECT_EQ(a.hash().size(), 7u + 64u);
}

TEST_F(ManifestTest, HashChangesWithWhatIsGranted) {
  std::string base = MustParse("{}").hash();
  EXPECT_NE(MustParse(R"({"grants": {"log": {}}})").hash(), base);
  EXPECT_NE(MustParse(R"({"budgets": {"cpu_ms": 10001}})").hash(), base);
  EXPECT_NE(MustParse(R"({"grants": {"kv.get": {"namespaces": ["a"]}}})").hash(),
            MustParse(R"({"grants": {"kv.get": {"namespaces": ["b"]}}})").hash());
}

TEST_F(ManifestTest, CanonicalRoundTrips) {
  Manifest a = MustParse(R"({"grants": {"kv.list": {"namespaces": ["é", "o"]}}, "budgets": {"stack_kb": 512}})");
  Manifest b = MustParse(a.Canonical());
  EXPECT_EQ(a.Canonical(), b.Canonical());
  EXPECT_EQ(a.hash(), b.hash());
}

}  // namespace
}  // namespace basal
