// Real parent, real confined workers, JS fixtures: the outcome, the journal and the health.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <stdexcept>

#include "integration/test_support.h"
#include "protocol/messages.h"

namespace basal::testing {
namespace {

using Json = nlohmann::json;

class FlowTest : public ModuleFixture {};

TEST_F(FlowTest, HelloWorld) {
  Open();
  FlowRef f = Add("export default function (input) { return 'hello ' + input.name; }");
  ActivationResult r = module_->Run(f, {{"name", "world"}});
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.result, "hello world");
  auto rows = Reader()->Activations(r.activation_id, 1);
  ASSERT_TRUE(rows);
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].outcome, "ok");
  EXPECT_EQ((*rows)[0].result_json, "\"hello world\"");
  EXPECT_EQ((*rows)[0].flow, "t.js");
  EXPECT_EQ((*rows)[0].source_hash.rfind("sha256:", 0), 0u);
  EXPECT_EQ(module_->HealthReport()["activations"]["ok"], 1);
}

TEST_F(FlowTest, AsyncFlowAndModuleStatePersistsAcrossActivationsOfOneWorker) {
  Open();
  FlowRef f = Add("let n = 0; export default async function () { await null; n += 1; return n; }");
  EXPECT_EQ(module_->Run(f, nullptr).result, 1);
  EXPECT_EQ(module_->Run(f, nullptr).result, 2);
  EXPECT_EQ(module_->Run(f, nullptr).result, 3);
  EXPECT_EQ(module_->HealthReport()["spawned"], 1);
}

TEST_F(FlowTest, ConcurrentHostCallsAnsweredOutOfOrder) {
  Open();
  // "slow" keeps its replies and answers them in reverse order once all three are in flight.
  std::vector<std::pair<int, HostCallReply>> held;
  HostCallSpec spec;
  spec.name = "slow";
  spec.handler = [&held](const HostCallContext&, const Json& args, HostCallReply reply) {
    held.emplace_back(args["n"].get<int>(), std::move(reply));
    if (held.size() == 3)
      for (auto it = held.rbegin(); it != held.rend(); ++it) it->second.Ok(it->first * 10);
  };
  ASSERT_TRUE(module_->registry().Register(std::move(spec)));
  FlowRef f = Add(
      "export default async function (input, host) {"
      "  const order = [];"
      "  const ps = [1, 2, 3].map(n => host.call('slow', {n}).then(v => { order.push(n); return v; }));"
      "  return {values: await Promise.all(ps), order};"
      "}",
      R"({"grants": {"slow": {}}})");
  ActivationResult r = module_->Run(f, nullptr);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.result["values"], Json::parse("[10,20,30]"));
  EXPECT_EQ(r.result["order"], Json::parse("[3,2,1]"));
  auto calls = Reader()->Calls(r.activation_id);
  ASSERT_TRUE(calls);
  ASSERT_EQ(calls->size(), 3u);
  // "slow" has the default effect (external): each record is born `started`, in call order, before
  // its handler runs; each then ends answered.
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ((*calls)[i].call_id, i + 1);
    EXPECT_EQ((*calls)[i].state, CallState::kAnswered);
  }
}

TEST_F(FlowTest, GrantedAndDeniedCallsAreJournaledAndDenialIsCatchable) {
  Open();
  FlowRef f = Add(
      "export default async function (input, host) {"
      "  await host.call('kv.put', {namespace: 'orders', key: 'o1', value: {qty: 2}});"
      "  let denied = null;"
      "  try { await host.call('kv.put', {namespace: 'payments', key: 'p', value: 1}); }"
      "  catch (e) { denied = {name: e.name, message: e.message, isError: e instanceof Error}; }"
      "  let ungranted = null;"
      "  try { await host.call('kv.delete', {namespace: 'orders', key: 'o1'}); } catch (e) { ungranted = e.name; }"
      "  return {got: await host.call('kv.get', {namespace: 'orders', key: 'o1'}), denied, ungranted};"
      "}",
      R"({"grants": {"kv.put": {"namespaces": ["orders"]}, "kv.get": {"namespaces": ["orders"]}}})");
  ActivationResult r = module_->Run(f, nullptr);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.result["got"], Json::parse(R"({"qty":2})"));
  EXPECT_EQ(r.result["denied"]["name"], "PermissionDenied");
  EXPECT_EQ(r.result["denied"]["isError"], true);
  EXPECT_NE(r.result["denied"]["message"].get<std::string>().find("payments"), std::string::npos);
  EXPECT_EQ(r.result["ungranted"], "PermissionDenied");
  auto calls = Reader()->Calls(r.activation_id);
  ASSERT_TRUE(calls);
  ASSERT_EQ(calls->size(), 4u);
  EXPECT_TRUE((*calls)[0].decision.allowed());
  EXPECT_FALSE((*calls)[1].decision.allowed());
  EXPECT_NE((*calls)[1].decision.reason.find("payments"), std::string::npos);
  EXPECT_FALSE((*calls)[2].decision.allowed());
  EXPECT_NE((*calls)[2].decision.reason.find("not granted"), std::string::npos);
  auto stored = OpenStore()->kv().Get("orders", "o1");
  ASSERT_TRUE(stored);
  EXPECT_EQ(stored->value_or(""), R"({"qty":2})");
  EXPECT_EQ(module_->HealthReport()["denied_calls"], 2);
}

// A call's name reaches the parent as the script wrote it, whatever it holds: a quote, a
// backslash, a control character, non-ASCII text; a lone surrogate arrives repaired, each byte of
// its encoding a U+FFFD, as every text from the worker is repaired. Each is a call the policy does not grant, journaled under that
// name, and its denial is catchable.
TEST_F(FlowTest, ACallsNameArrivesAsWrittenWhateverItsCharacters) {
  Open();
  FlowRef f = Add(
      "export default async function (input, host) {"
      "  const names = ['plain.name', 'a\"b', 'a\\\\b', 'tab\\there', 'caf\\u00e9.\\u4e16', 'lone\\ud800'];"
      "  const denied = [];"
      "  for (const n of names) { try { await host.call(n, {}); } catch (e) { denied.push(e.name); } }"
      "  return denied;"
      "}");
  ActivationResult r = module_->Run(f, nullptr);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.result, Json::parse(R"(["PermissionDenied","PermissionDenied","PermissionDenied","PermissionDenied",
                                      "PermissionDenied","PermissionDenied"])"));
  auto calls = Reader()->Calls(r.activation_id);
  ASSERT_TRUE(calls);
  ASSERT_EQ(calls->size(), 6u);
  const char* expected[] = {"plain.name", "a\"b",           "a\\b",
                            "tab\there",  "caf\u00e9.\u4e16", "lone\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"};
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ((*calls)[i].name, expected[i]) << i;
    EXPECT_FALSE((*calls)[i].decision.allowed()) << i;
  }
}

TEST_F(FlowTest, ScriptThatThrowsReportsNameMessageAndStack) {
  Open();
  FlowRef f = Add("function inner() { throw new RangeError('too far'); }\nexport default function () { inner(); }");
  ActivationResult r = module_->Run(f, nullptr);
  EXPECT_EQ(r.outcome, Outcome::kScriptError);
  EXPECT_EQ(r.error_name, "RangeError");
  EXPECT_NE(r.message.find("too far"), std::string::npos);
  EXPECT_NE(r.stack.find("inner"), std::string::npos);
  // The worker survives a script error and serves the next activation.
  ActivationResult again = module_->Run(f, nullptr);
  EXPECT_EQ(again.outcome, Outcome::kScriptError);
  EXPECT_EQ(module_->HealthReport()["spawned"], 1);
  auto rows = Reader()->Activations(r.activation_id, 1);
  ASSERT_TRUE(rows);
  EXPECT_EQ((*rows)[0].outcome, "script_error");
  EXPECT_NE((*rows)[0].error_json.find("RangeError"), std::string::npos);
}

TEST_F(FlowTest, RejectedPromiseAndSyntaxErrorAndMissingDefault) {
  Open();
  FlowRef rej = Add("export default async function () { throw new TypeError('nope'); }");
  EXPECT_EQ(module_->Run(rej, nullptr).error_name, "TypeError");
  FlowRef syn = Add("export default function ( {", "{}", "syntax.js");
  ActivationResult s = module_->Run(syn, nullptr);
  EXPECT_EQ(s.outcome, Outcome::kScriptError);
  EXPECT_NE(s.message.find("failed to load"), std::string::npos) << s.message;
  FlowRef nodef = Add("export const x = 1;", "{}", "nodefault.js");
  ActivationResult n = module_->Run(nodef, nullptr);
  EXPECT_EQ(n.outcome, Outcome::kScriptError);
  EXPECT_NE(n.message.find("default export"), std::string::npos) << n.message;
  FlowRef imp = Add("import x from 'fs'; export default () => x;", "{}", "import.js");
  EXPECT_NE(module_->Run(imp, nullptr).message.find("refused"), std::string::npos);
}

TEST_F(FlowTest, ConsoleGoesToTheJournalAsLogCallsWithoutAGrant) {
  std::vector<std::string> seen;
  ModuleOptions o;
  o.log_sink = [&seen](const HostCallContext&, std::string_view level, std::string_view message) {
    seen.push_back(std::string(level) + ":" + std::string(message));
  };
  Open(o);
  FlowRef f = Add("export default function () { console.log('a', 1, {b: 2}); console.error('bad'); return 0; }");
  ActivationResult r = module_->Run(f, nullptr);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(seen, (std::vector<std::string>{"log:a 1 {\"b\":2}", "error:bad"}));
  auto calls = Reader()->Calls(r.activation_id);
  ASSERT_TRUE(calls);
  ASSERT_EQ(calls->size(), 2u);
  EXPECT_EQ((*calls)[0].name, "log");
  EXPECT_TRUE((*calls)[0].decision.allowed());
  EXPECT_EQ((*calls)[0].decision.reason, "needs no grant");
}

std::string Nested(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

TEST_F(FlowTest, InputsAndResultsAtTheDepthLimitPassAndDeeperOnesFailClearly) {
  Open();
  FlowRef echo = Add("export default (input) => input");
  ActivationResult fits = module_->Run(echo, Json::parse(Nested(199)));
  ASSERT_TRUE(fits.ok()) << fits.message;
  EXPECT_EQ(fits.result.dump(), Nested(199));

  Json too_deep = Json::array();
  for (int i = 1; i < 200; ++i) too_deep = Json::array({too_deep});  // 200 levels
  ActivationResult refused = module_->Run(echo, too_deep);
  EXPECT_EQ(refused.outcome, Outcome::kInvalidInput);
  EXPECT_EQ(refused.activation_id, 0);
  EXPECT_NE(refused.message.find("nested deeper than 199 levels"), std::string::npos) << refused.message;

  // A result too deep for the done frame is the script's error, and the worker stays usable.
  FlowRef deepen = Add("export default () => { let v = []; for (let i = 0; i < 300; i++) v = [v]; return v; }");
  ActivationResult r = module_->Run(deepen, nullptr);
  EXPECT_EQ(r.outcome, Outcome::kScriptError);
  EXPECT_NE(r.message.find("too large to send: nested deeper"), std::string::npos) << r.message;
  Json h = module_->HealthReport();
  EXPECT_EQ(h["protocol_violations"], 0);
  EXPECT_EQ(h["workers"]["per_flow"]["t.js"]["idle"], 2);
}

TEST_F(FlowTest, HostCallArgumentsAndResultsTooDeepAreCatchableErrors) {
  Open();
  HostCallSpec spec;
  spec.name = "deep";
  spec.handler = [](const HostCallContext&, const Json& args, HostCallReply reply) {
    if (args.value("nested", false)) {
      Json v = Json::array();
      for (int i = 0; i < 300; ++i) v = Json::array({v});
      reply.Ok(v);
    } else {
      reply.Ok("shallow");
    }
  };
  ASSERT_TRUE(module_->registry().Register(std::move(spec)));
  FlowRef f = Add(
      "export default async function (i, host) {"
      "  const out = {};"
      "  let a = {}; for (let k = 0; k < 300; k++) a = {a};"
      "  try { await host.call('deep', a); } catch (e) { out.args = e.name + ': ' + e.message; }"
      "  try { await host.call('deep', {nested: true}); } catch (e) { out.result = e.name + ': ' + e.message; }"
      "  out.after = await host.call('deep', {});"
      "  return out;"
      "}",
      R"({"grants": {"deep": {}}})");
  ActivationResult r = module_->Run(f, nullptr);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_NE(r.result["args"].get<std::string>().find("TypeError: host.call: arguments too large to send"),
            std::string::npos)
      << r.result;
  EXPECT_NE(r.result["result"].get<std::string>().find("HostError: the result of host call \"deep\" cannot be sent"),
            std::string::npos)
      << r.result;
  EXPECT_EQ(r.result["after"], "shallow");
  auto calls = Reader()->Calls(r.activation_id);
  ASSERT_TRUE(calls);
  ASSERT_EQ(calls->size(), 2u) << "the refused arguments never left the worker";
  EXPECT_NE((*calls)[0].error_json.find("HostError"), std::string::npos) << (*calls)[0].error_json;
  EXPECT_EQ(module_->HealthReport()["protocol_violations"], 0);
}

// Issue 25 point 10: the parent refuses a frame of more than protocol::kMaxMessageValues values
// before it parses it; the worker refuses the same count first, so an honest flow gets an error it
// can catch (arguments, result, its own result) instead of a killed worker.
TEST_F(FlowTest, TooManyValuesInArgumentsOrAResultAreCatchableErrorsNotAKill) {
  Open();
  HostCallSpec spec;
  spec.name = "count";
  spec.handler = [](const HostCallContext&, const Json& args, HostCallReply reply) {
    reply.Ok(args.is_array() ? args.size() : 0);
  };
  ASSERT_TRUE(module_->registry().Register(std::move(spec)));
  const std::string over = std::to_string(protocol::kMaxFieldValues);
  FlowRef f = Add(
      "export default async function (i, host) {"
      "  const out = {};"
      "  try { await host.call('count', new Array(" + over + ").fill({})); } catch (e) { out.args = e.name + ': ' + e.message; }"
      "  out.fits = await host.call('count', new Array(" + over + " - 1).fill(0));"
      "  out.after = await host.call('count', [1, 2, 3]);"
      "  return out;"
      "}",
      R"({"grants": {"count": {}}})");
  ActivationResult r = module_->Run(f, nullptr);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_NE(r.result["args"].get<std::string>().find("TypeError: host.call: arguments too large to send: more than " +
                                                     over + " JSON values"),
            std::string::npos)
      << r.result;
  EXPECT_EQ(r.result["fits"], protocol::kMaxFieldValues - 1);
  EXPECT_EQ(r.result["after"], 3);
  // The activation's own result, past the count: the script's error, and the worker stays usable.
  FlowRef big = Add("export default () => new Array(" + over + ").fill(true)", "{}", "big.js");
  ActivationResult refused = module_->Run(big, nullptr);
  EXPECT_EQ(refused.outcome, Outcome::kScriptError);
  EXPECT_NE(refused.message.find("the activation's result is too large to send: more than " + over), std::string::npos)
      << refused.message;
  EXPECT_EQ(module_->HealthReport()["protocol_violations"], 0);
}

TEST_F(FlowTest, AHandlersErrorTextThatIsNotUtf8ReachesTheScriptRepairedAndIsJournaled) {
  Open();
  HostCallSpec spec;
  spec.name = "bad_bytes";
  spec.handler = [](const HostCallContext&, const Json&, HostCallReply reply) {
    reply.Error("Broken\xff", "no \xfe\xfd utf-8 here");
  };
  ASSERT_TRUE(module_->registry().Register(std::move(spec)));
  FlowRef f = Add(
      "export default async function (i, host) {"
      "  try { await host.call('bad_bytes', {}); } catch (e) { return e.name + '|' + e.message; } }",
      R"({"grants": {"bad_bytes": {}}})");
  ActivationResult r = module_->Run(f, nullptr);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.result, "Broken\uFFFD|no \uFFFD\uFFFD utf-8 here");
  auto calls = Reader()->Calls(r.activation_id);
  ASSERT_TRUE(calls);
  ASSERT_EQ(calls->size(), 1u);
  EXPECT_NE((*calls)[0].error_json.find("utf-8 here"), std::string::npos) << (*calls)[0].error_json;
}

TEST_F(FlowTest, AHandlerThatThrowsIsACatchableHostErrorAndTheModuleGoesOn) {
  Open();
  HostCallSpec spec;
  spec.name = "flaky";
  spec.handler = [](const HostCallContext&, const Json& args, HostCallReply reply) {
    if (args.value("fail", false)) throw std::runtime_error("database is down");
    reply.Ok("fine");
  };
  spec.authorize = [](const Json& grant, const Json& args) -> std::optional<std::string> {
    (void)grant;
    if (args.value("explode", false)) throw std::runtime_error("policy engine crashed");
    return std::nullopt;
  };
  ASSERT_TRUE(module_->registry().Register(std::move(spec)));
  FlowRef f = Add(
      "export default async function (i, host) {"
      "  let caught, denied;"
      "  try { await host.call('flaky', {fail: true}); } catch (e) { caught = e.name + ': ' + e.message; }"
      "  try { await host.call('flaky', {explode: true}); } catch (e) { denied = e.name + ': ' + e.message; }"
      "  return [caught, await host.call('flaky', {}), denied]; }",
      R"({"grants": {"flaky": {}}})");
  ActivationResult r = module_->Run(f, nullptr);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.result[0], "HostError: host call \"flaky\" failed: its handler threw: database is down");
  EXPECT_EQ(r.result[1], "fine");
  EXPECT_EQ(r.result[2], "PermissionDenied: the authorization check of \"flaky\" threw: policy engine crashed");
  auto calls = Reader()->Calls(r.activation_id);
  ASSERT_TRUE(calls);
  ASSERT_EQ(calls->size(), 3u);
  EXPECT_NE((*calls)[0].error_json.find("database is down"), std::string::npos);
}

TEST_F(FlowTest, ACallbackThatThrowsReachesTheCallerAndNoOtherCallbackIsLost) {
  Open();
  FlowRef f = Add("export default (i) => i");
  std::vector<int> seen;
  EXPECT_TRUE(module_->Submit(f, 1, [&](const ActivationResult& r) {
    seen.push_back(r.result.get<int>());
    throw std::logic_error("embedder bug");
  }));
  EXPECT_TRUE(module_->Submit(f, 2, [&](const ActivationResult& r) { seen.push_back(r.result.get<int>()); }));
  bool threw = false;
  try {
    module_->RunUntilIdle();
  } catch (const std::logic_error& e) {
    threw = std::string(e.what()) == "embedder bug";
  }
  module_->RunUntilIdle();  // whatever the first call left undone
  EXPECT_TRUE(threw);
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<int>{1, 2}));
  ActivationResult after = module_->Run(f, 3);
  ASSERT_TRUE(after.ok()) << after.message;
  EXPECT_EQ(after.result, 3);
}

TEST_F(FlowTest, MathRandomIsUniformInTheUnitIntervalAndSeededPerWorker) {
  ModuleOptions o;
  o.max_activations_per_worker = 1;  // every activation on a fresh worker
  Open(o);
  FlowRef f = Add(
      "export default () => { const xs = []; for (let i = 0; i < 10000; i++) xs.push(Math.random());"
      "  const lo = Math.min(...xs), hi = Math.max(...xs), mean = xs.reduce((a, b) => a + b) / xs.length;"
      "  return {first: xs[0], lo, hi, mean, distinct: new Set(xs).size}; }");
  std::set<double> firsts;
  for (int k = 0; k < 5; ++k) {
    ActivationResult r = module_->Run(f, nullptr);
    ASSERT_TRUE(r.ok()) << r.message;
    EXPECT_GE(r.result["lo"].get<double>(), 0.0);
    EXPECT_LT(r.result["hi"].get<double>(), 1.0);
    EXPECT_NEAR(r.result["mean"].get<double>(), 0.5, 0.02);
    EXPECT_EQ(r.result["distinct"], 10000);
    firsts.insert(r.result["first"].get<double>());
  }
  EXPECT_EQ(firsts.size(), 5u) << "five workers, five different sequences";
}

TEST_F(FlowTest, HugeErrorTextsAndLogMessagesAreCutNotFatal) {
  Open();
  FlowRef f = Add(
      "export default (i) => { if (i.log) { console.log('y'.repeat(3000000)); return 'logged'; }"
      " throw new Error('x'.repeat(20000000)); }",
      R"({"budgets": {"heap_mb": 256}})");
  ActivationResult thrown = module_->Run(f, {{"log", false}});
  EXPECT_EQ(thrown.outcome, Outcome::kScriptError);
  EXPECT_LT(thrown.message.size(), 70'000u);
  EXPECT_NE(thrown.message.find("bytes cut]"), std::string::npos);
  // The worker cuts the line to 1 MiB; that is just past the default log budget (1 MiB): dropped.
  ActivationResult dropped = module_->Run(f, {{"log", true}});
  ASSERT_TRUE(dropped.ok()) << dropped.message;
  EXPECT_EQ(dropped.logs_dropped, 1);
  auto none = Reader()->Calls(dropped.activation_id);
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty());
  // With room in the log budget the line is journaled: capped, with its size and digest.
  FlowRef roomy = Add(
      "export default (i) => { console.log('y'.repeat(3000000)); return 'logged'; }",
      R"({"budgets": {"heap_mb": 256, "log_kb": 2048}})", "roomy.js");
  ActivationResult logged = module_->Run(roomy, nullptr);
  ASSERT_TRUE(logged.ok()) << logged.message;
  EXPECT_EQ(logged.logs_dropped, 0);
  auto calls = Reader()->Calls(logged.activation_id);
  ASSERT_TRUE(calls);
  ASSERT_EQ(calls->size(), 1u);
  EXPECT_LT((*calls)[0].args_json.size(), 70'000u);
  Json marker = Json::parse((*calls)[0].args_json);
  EXPECT_GT(marker["basal_truncated"]["bytes"].get<int64_t>(), 1'000'000);
  EXPECT_EQ(module_->HealthReport()["spawned"], 2);
}

TEST_F(FlowTest, ABadManifestNamesTheKey) {
  Open();
  auto f = module_->AddFlow("x.js", "export default () => 1", R"({"grants": {"kv.gte": {}}})");
  ASSERT_FALSE(f);
  EXPECT_NE(f.error().message.find("kv.gte"), std::string::npos) << f.error().message;
}

// What the export returns settles the activation as `await` would settle it: a value that is no
// object as it is, an object through its `then` (read once by the engine, once more by the result's
// JSON), a synchronous throw as a failure; and a flow that replaces the global Promise does not
// reach the engine's own settling in a later activation.
TEST_F(FlowTest, WhatTheExportReturnsSettlesAsAwaitWouldSettleIt) {
  Open();
  EXPECT_EQ(module_->Run(Add("export default () => 7", "{}", "n.js"), nullptr).result, 7);
  EXPECT_EQ(module_->Run(Add("export default () => 'x'", "{}", "s.js"), nullptr).result, "x");
  EXPECT_EQ(module_->Run(Add("export default () => -2147483648", "{}", "i.js"), nullptr).result, -2147483648LL);
  EXPECT_EQ(module_->Run(Add("export default () => 0.5", "{}", "f.js"), nullptr).result, 0.5);
  EXPECT_EQ(module_->Run(Add("export default () => false", "{}", "b.js"), nullptr).result, false);
  EXPECT_TRUE(module_->Run(Add("export default () => NaN", "{}", "nan.js"), nullptr).result.is_null());
  EXPECT_EQ(module_->Run(Add("export default () => ({a: [1]})", "{}", "o.js"), nullptr).result, Json({{"a", {1}}}));
  EXPECT_EQ(module_->Run(Add("export default () => ({then(r) { r(5); }})", "{}", "t.js"), nullptr).result, 5);
  FlowRef counted = Add(
      "let reads = 0;\n"
      "export default (input) => input === 'count' ? reads : {get then() { reads += 1; return undefined; }, k: 1};",
      "{}", "c.js");
  ActivationResult first = module_->Run(counted, nullptr);
  ASSERT_TRUE(first.ok()) << first.message;
  EXPECT_EQ(first.result, Json({{"k", 1}}));
  EXPECT_EQ(module_->Run(counted, "count").result, 2);
  ActivationResult thrown = module_->Run(Add("export default () => { throw 'plain'; }", "{}", "th.js"), nullptr);
  EXPECT_EQ(thrown.outcome, Outcome::kScriptError);
  EXPECT_NE(thrown.message.find("plain"), std::string::npos) << thrown.message;
  FlowRef rerouted = Add(
      "export default () => { globalThis.Promise = function () { throw new Error('rerouted'); }; return {ok: 1}; }", "{}",
      "r.js");
  for (int i = 0; i < 2; ++i) {
    ActivationResult r = module_->Run(rerouted, nullptr);
    ASSERT_TRUE(r.ok()) << i << ": " << r.message;
    EXPECT_EQ(r.result, Json({{"ok", 1}}));
  }
}

TEST_F(FlowTest, ResultsThatAreNotJsonAndNeverSettlingPromisesFailClearly) {
  Open();
  FlowRef never = Add("export default function () { return new Promise(() => {}); }");
  ActivationResult r = module_->Run(never, nullptr);
  EXPECT_EQ(r.outcome, Outcome::kScriptError);
  EXPECT_NE(r.message.find("never settled"), std::string::npos) << r.message;
  FlowRef big = Add("export default function () { return 10n; }", "{}", "bigint.js");
  EXPECT_EQ(module_->Run(big, nullptr).outcome, Outcome::kScriptError);
  FlowRef undef = Add("export default function () {}", "{}", "undef.js");
  ActivationResult u = module_->Run(undef, nullptr);
  ASSERT_TRUE(u.ok()) << u.message;
  EXPECT_TRUE(u.result.is_null());
}

TEST_F(FlowTest, DeadlineKillsAWorkerStuckInAHostCallThatNeverReturns) {
  Open();
  std::vector<HostCallReply> kept;
  HostCallSpec spec;
  spec.name = "forever";
  spec.handler = [&kept](const HostCallContext&, const Json&, HostCallReply reply) { kept.push_back(std::move(reply)); };
  ASSERT_TRUE(module_->registry().Register(std::move(spec)));
  FlowRef f = Add("export default async function (i, host) { await host.call('forever', {}); return 1; }",
                 R"({"grants": {"forever": {}}, "budgets": {"deadline_ms": 300}})");
  ActivationResult r = module_->Run(f, nullptr);
  EXPECT_EQ(r.outcome, Outcome::kDeadline);
  EXPECT_NE(r.message.find("300 ms"), std::string::npos) << r.message;
  Json h = module_->HealthReport();
  EXPECT_EQ(h["deadline_kills"], 1);
  EXPECT_EQ(h["workers"]["live"], 0);
  // Answering after the kill goes nowhere and does not crash the parent.
  kept.front().Ok(1);
  auto rows = Reader()->Activations(r.activation_id, 1);
  ASSERT_TRUE(rows);
  EXPECT_EQ((*rows)[0].outcome, "deadline");
}

TEST_F(FlowTest, CpuLoopIsStoppedByTheBudgetAndCannotBeCaught) {
  Open();
  FlowRef f = Add("export default function () { try { for (;;) {} } catch (e) { return 'caught'; } }",
                 R"({"budgets": {"cpu_ms": 50}})");
  ActivationResult r = module_->Run(f, nullptr);
  EXPECT_EQ(r.outcome, Outcome::kBudgetExhausted);
  EXPECT_EQ(r.budget, Budget::kCpu);
  EXPECT_EQ(module_->HealthReport()["retirements"]["budget"], 1);
}

}  // namespace
}  // namespace basal::testing
