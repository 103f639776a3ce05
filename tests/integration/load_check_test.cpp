// Module::CheckLoad: a flow loaded in a real confined worker without being activated. What it
// reports (a syntax error with its line, the other load failures), that it runs under the same
// confinement and budgets as an activation, that nothing is journaled, and that the worker it
// loaded serves the flow's next activation. The worker's answer is hostile: a forged `loaded` is
// a protocol violation.
#include <gtest/gtest.h>

#include "integration/test_support.h"

namespace basal::testing {
namespace {

using Json = nlohmann::json;

class LoadCheckTest : public ModuleFixture {
 protected:
  LoadCheck Check(const FlowRef& flow) {
    auto c = module_->CheckLoad(flow);
    if (!c) ADD_FAILURE() << c.error().message;
    if (c) return *c;
    LoadCheck failed;
    failed.outcome = Outcome::kCancelled;
    failed.message = "CheckLoad failed";
    return failed;
  }
  size_t JournaledActivations() {
    auto rows = Reader()->Activations(std::nullopt, 100);
    if (!rows) ADD_FAILURE() << rows.error().message;
    return rows ? rows->size() : 0;
  }
};

TEST_F(LoadCheckTest, AFlowThatLoadsPassesAndItsWorkerRunsTheFirstActivation) {
  Open();
  // Top-level state counts evaluations of the module: the check evaluates it once, on the worker
  // that then runs the activation.
  FlowRef f = Add("let loads = 0; loads += 1; let runs = 0;\n"
                  "export default () => { runs += 1; return {loads, runs}; };");
  const LoadCheck c = Check(f);
  EXPECT_TRUE(c.ok()) << c.message;
  EXPECT_EQ(c.line, 0);
  EXPECT_EQ(JournaledActivations(), 0u) << "a load check is no activation: nothing is journaled";
  Json health = module_->HealthReport();
  EXPECT_EQ(health["spawned"], 1);
  EXPECT_EQ(health["workers"]["idle"], 1) << "the worker that loaded the flow waits for its activation";
  EXPECT_EQ(health["activations"]["ok"], 0) << "a check is not counted as an activation";

  ActivationResult r = module_->Run(f, nullptr);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.result, Json::parse(R"({"loads":1,"runs":1})"));
  EXPECT_EQ(module_->HealthReport()["spawned"], 1) << "no second worker: the checked one ran it";
  EXPECT_EQ(JournaledActivations(), 1u);

  // A second check of a flow that has an idle, loaded worker needs no new worker.
  EXPECT_TRUE(Check(f).ok());
  EXPECT_EQ(module_->HealthReport()["spawned"], 1);
}

TEST_F(LoadCheckTest, TheDefaultExportIsNotCalled) {
  Open();
  // Called, it would spin until its 100 ms CPU budget ends it.
  FlowRef f = Add("export default () => { for (;;) {} };", R"({"budgets": {"cpu_ms": 100}})");
  const LoadCheck c = Check(f);
  EXPECT_TRUE(c.ok()) << OutcomeName(c.outcome) << ": " << c.message;
  // The control: activated, it does spin and is stopped.
  ActivationResult r = module_->Run(f, nullptr);
  EXPECT_EQ(r.outcome, Outcome::kBudgetExhausted) << r.message;
}

TEST_F(LoadCheckTest, ASyntaxErrorNamesItsLineAndNothingIsJournaled) {
  Open();
  FlowRef f = Add("// a comment\nexport default (input) => {\n  let x = ;\n};\n", "{}", "syntax.js");
  const LoadCheck c = Check(f);
  EXPECT_EQ(c.outcome, Outcome::kScriptError);
  EXPECT_EQ(c.error_name, "SyntaxError");
  EXPECT_EQ(c.line, 3);
  EXPECT_NE(c.error_message.find("unexpected token"), std::string::npos) << c.error_message;
  EXPECT_EQ(c.message, "flow syntax.js failed to load: syntax.js:3: SyntaxError: " + c.error_message);
  EXPECT_EQ(c.stack, "    at syntax.js:3\n");
  EXPECT_EQ(JournaledActivations(), 0u);
  EXPECT_EQ(module_->HealthReport()["retirements"]["load_failed"], 1);

  // An activation that meets the same error says where it is too.
  ActivationResult r = module_->Run(f, nullptr);
  EXPECT_EQ(r.outcome, Outcome::kScriptError);
  EXPECT_NE(r.message.find("syntax.js:3: SyntaxError: "), std::string::npos) << r.message;
}

TEST_F(LoadCheckTest, OtherLoadFailuresCarryNoLine) {
  Open();
  struct Case {
    const char* source;
    const char* name;
    const char* says;
  } cases[] = {
      {"throw new RangeError('at top level');\nexport default () => 1;", "RangeError", "at top level"},
      {"export const x = 1;", "SyntaxError", "no default export"},
      {"export default 42;", "TypeError", "must be a function"},
      {"import x from 'fs';\nexport default () => x;", "ReferenceError", "imports nothing"},
  };
  for (const Case& k : cases) {
    const LoadCheck c = Check(Add(k.source));
    EXPECT_EQ(c.outcome, Outcome::kScriptError) << k.source;
    EXPECT_EQ(c.error_name, k.name) << k.source;
    EXPECT_EQ(c.line, 0) << k.source << ": only the compiler names a line";
    EXPECT_NE(c.message.find(k.says), std::string::npos) << k.source << ": " << c.message;
  }
}

TEST_F(LoadCheckTest, LoadingIsBoundedByTheFlowsBudgets) {
  Open();
  const LoadCheck cpu = Check(Add("for (;;) {}\nexport default () => 1;", R"({"budgets": {"cpu_ms": 100}})"));
  EXPECT_EQ(cpu.outcome, Outcome::kBudgetExhausted) << cpu.message;
  EXPECT_EQ(cpu.budget, Budget::kCpu);
  const LoadCheck memory = Check(
      Add("const a = []; for (;;) a.push(new Array(1e5).fill(1));\nexport default () => 1;", R"({"budgets": {"heap_mb": 8}})"));
  EXPECT_EQ(memory.outcome, Outcome::kBudgetExhausted) << memory.message;
  EXPECT_EQ(memory.budget, Budget::kMemory);
  EXPECT_EQ(JournaledActivations(), 0u);
}

// The worker of a check is spawned and judged as an activation's is: a worker whose welcome lacks
// seccomp, or that ignores the CPU limit the parent passed, never gets the flow.
TEST_F(LoadCheckTest, TheWorkerIsConfinedAndCheckedAsForAnActivation) {
  for (const char* fault : {"welcome_without_seccomp", "ignores_cpu_limit"}) {
    ModuleOptions o;
    o.worker_path = FakeWorker(fault);
    Open(o);
    const LoadCheck c = Check(Add("export default () => 1"));
    EXPECT_EQ(c.outcome, Outcome::kWorkerRefused) << fault << ": " << c.message;
    EXPECT_EQ(module_->HealthReport()["refused_welcomes"], 1) << fault;
    module_.reset();
    std::filesystem::remove(dir_ + "/journal.db");
  }
  // The allowed path: the real worker passes the same checks.
  Open();
  EXPECT_TRUE(Check(Add("export default () => 1")).ok());
}

TEST_F(LoadCheckTest, AForgedLoadAnswerIsAProtocolViolation) {
  for (const char* fault : {"load_error_line_wraps", "call_while_loading"}) {
    ModuleOptions o;
    o.worker_path = FakeWorker(fault);
    Open(o);
    const LoadCheck c = Check(Add("export default () => 1"));
    EXPECT_EQ(c.outcome, Outcome::kProtocolViolation) << fault << ": " << c.message;
    EXPECT_EQ(c.line, 0) << fault;
    EXPECT_EQ(module_->HealthReport()["protocol_violations"], 1) << fault;
    EXPECT_EQ(module_->HealthReport()["workers"]["live"], 0) << fault << ": the worker is killed";
    module_.reset();
    std::filesystem::remove(dir_ + "/journal.db");
  }
}

// A well-formed load error is the worker's (the script's) text: kept as given, for the printer to
// escape (docs/cli.md); the line is read as sent.
TEST_F(LoadCheckTest, AWellFormedLoadErrorIsKeptAsGiven) {
  ModuleOptions o;
  o.worker_path = FakeWorker("hostile_load_error");
  Open(o);
  const LoadCheck c = Check(Add("export default () => 1", "{}", "h.js"));
  EXPECT_EQ(c.outcome, Outcome::kScriptError) << c.message;
  EXPECT_EQ(c.line, 7);
  EXPECT_EQ(c.error_name, "Syntax\x1b[31mError");
  const char text[] = "\x1b[2J \xc2\x9b \x7f \0 \xe2\x80\xae caf\xc3\xa9\nbasal: ok";
  EXPECT_EQ(c.error_message, std::string(text, sizeof text - 1));
}

TEST_F(LoadCheckTest, OnlyAnApprovedFlowIsChecked) {
  Open();
  FlowRef f = Add("export default () => 1");
  ASSERT_TRUE(module_->RemoveFlow(f));
  auto c = module_->CheckLoad(f);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, ErrorCode::kNotFound);
  EXPECT_NE(c.error().message.find("not approved"), std::string::npos) << c.error().message;
  EXPECT_FALSE(module_->CheckLoad(nullptr));
  EXPECT_EQ(module_->HealthReport()["spawned"], 0);
}

}  // namespace
}  // namespace basal::testing
