// The worker's output is hostile: a fake worker sends malformed, oversized and unexpected
// frames, or dies mid-call. Each ends the activation with a clear kind, kills the worker, and
// never crashes or hangs the parent; the journal keeps what happened.
#include <gtest/gtest.h>

#include "integration/test_support.h"

namespace basal::testing {
namespace {

struct FaultCase {
  const char* fault;
  Outcome outcome;
  const char* message_part;
};

class FakeWorkerTest : public ModuleFixture, public ::testing::WithParamInterface<FaultCase> {};

TEST_P(FakeWorkerTest, EndsTheActivationWithAClearKind) {
  const FaultCase& c = GetParam();
  ModuleOptions o;
  o.worker_path = FakeWorker(c.fault);
  o.welcome_timeout = std::chrono::milliseconds(500);
  Open(o);
  FlowRef f = Add("export default () => 1", R"({"budgets": {"deadline_ms": 3000}})");
  ActivationResult r = module_->Run(f, nullptr);
  EXPECT_EQ(OutcomeName(r.outcome), std::string(OutcomeName(c.outcome))) << r.message;
  EXPECT_NE(r.message.find(c.message_part), std::string::npos) << r.message;
  auto health = module_->HealthReport();
  EXPECT_EQ(health["workers"]["live"], 0) << health.dump();
  auto rows = Reader()->Activations(r.activation_id, 1);
  ASSERT_TRUE(rows);
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].outcome, OutcomeName(c.outcome));
  // The parent goes on: a second activation is served (and fails the same way) without a hang.
  EXPECT_EQ(module_->Run(f, nullptr).outcome, c.outcome);
}

INSTANTIATE_TEST_SUITE_P(
    Faults, FakeWorkerTest,
    ::testing::Values(FaultCase{"malformed_json", Outcome::kProtocolViolation, "malformed JSON"},
                      FaultCase{"oversized", Outcome::kProtocolViolation, "exceeds the limit"},
                      FaultCase{"wrong_type", Outcome::kProtocolViolation, "unexpected message"},
                      FaultCase{"unknown_activation", Outcome::kProtocolViolation, "done for activation"},
                      FaultCase{"reused_call_id", Outcome::kProtocolViolation, "reused"},
                      FaultCase{"die_mid_call", Outcome::kWorkerCrashed, "exited with status 3"},
                      FaultCase{"segv_mid_call", Outcome::kWorkerCrashed, "SIGSEGV"},
                      FaultCase{"close_stdout", Outcome::kProtocolViolation, "closed its stdout"},
                      FaultCase{"truncated_frame", Outcome::kProtocolViolation, "middle of a frame"},
                      FaultCase{"hang", Outcome::kDeadline, "deadline"},
                      FaultCase{"no_welcome", Outcome::kWorkerRefused, "no welcome within 500 ms"},
                      FaultCase{"welcome_without_seccomp", Outcome::kWorkerRefused, "seccomp"},
                      FaultCase{"refuse_confinement", Outcome::kWorkerRefused, "ruleset creation failed"},
                      FaultCase{"garbage_before_welcome", Outcome::kProtocolViolation, "exceeds the limit"}),
    [](const ::testing::TestParamInfo<FaultCase>& i) { return std::string(i.param.fault); });

TEST_F(ModuleFixture, RefusedWelcomeIsCountedAndTheFlowNeverLoads) {
  ModuleOptions o;
  o.worker_path = FakeWorker("welcome_without_seccomp");
  Open(o);
  FlowRef f = Add("export default () => 1");
  ActivationResult r = module_->Run(f, nullptr);
  EXPECT_EQ(r.outcome, Outcome::kWorkerRefused);
  EXPECT_EQ(module_->HealthReport()["refused_welcomes"], 1);
}

TEST_F(ModuleFixture, AWorkerThatCannotConfineItselfIsARefusalNotACrash) {
  ModuleOptions o;
  o.worker_path = FakeWorker("refuse_confinement");
  Open(o);
  FlowRef f = Add("export default () => 1");
  ActivationResult r = module_->Run(f, nullptr);
  EXPECT_EQ(r.outcome, Outcome::kWorkerRefused);
  EXPECT_NE(r.message.find("could not confine itself"), std::string::npos) << r.message;
  auto health = module_->HealthReport();
  EXPECT_EQ(health["confinement_refusals"], 1);
  EXPECT_TRUE(health["crashes"].empty()) << health["crashes"];
  EXPECT_EQ(health["worker_confinement"], 0);
}

TEST_F(ModuleFixture, DeathMidCallKeepsTheCallInTheJournal) {
  ModuleOptions o;
  o.worker_path = FakeWorker("die_mid_call");
  Open(o);
  FlowRef f = Add("export default () => 1");
  ActivationResult r = module_->Run(f, nullptr);
  ASSERT_EQ(r.outcome, Outcome::kWorkerCrashed);
  auto calls = Reader()->Calls(r.activation_id);
  ASSERT_TRUE(calls);
  ASSERT_EQ(calls->size(), 1u);
  EXPECT_EQ((*calls)[0].name, "log");
  EXPECT_EQ(module_->HealthReport()["crashes"]["exit 3"], 1);
}

TEST_F(ModuleFixture, MissingWorkerBinaryIsASpawnFailureNamingThePath) {
  ModuleOptions o;
  o.worker_path = "/nonexistent/ck-basal-worker";
  Open(o);
  FlowRef f = Add("export default () => 1");
  ActivationResult r = module_->Run(f, nullptr);
  EXPECT_EQ(r.outcome, Outcome::kSpawnFailed);
  EXPECT_NE(r.message.find("/nonexistent/ck-basal-worker"), std::string::npos) << r.message;
}

}  // namespace
}  // namespace basal::testing
