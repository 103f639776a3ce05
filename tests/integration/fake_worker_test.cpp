// The worker's output is hostile: a fake worker sends malformed, oversized and unexpected
// frames, or dies mid-call. Each ends the activation with a clear kind, kills the worker, and
// never crashes or hangs the parent; the journal keeps what happened.
#include <gtest/gtest.h>

#include <sched.h>

#include <filesystem>
#include <iostream>
#include <thread>

#include "integration/test_support.h"
#include "parent/module_host.h"

namespace basal::testing {
namespace {

using Json = nlohmann::json;

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
  std::cout << "[ message  ] " << c.fault << ": " << r.message << "\n";
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
                      // Counted before it is parsed (issue 25 point 10): refused by name.
                      FaultCase{"tiny_values_call", Outcome::kProtocolViolation,
                                "JSON of more than 524288 values (objects, arrays, strings, numbers, literals; the "
                                "limit is kMaxMessageValues)"},
                      FaultCase{"no_welcome", Outcome::kWorkerRefused, "no welcome within 500 ms"},
                      FaultCase{"welcome_without_seccomp", Outcome::kWorkerRefused, "seccomp"},
                      FaultCase{"refuse_confinement", Outcome::kWorkerRefused, "ruleset creation failed"},
                      FaultCase{"garbage_before_welcome", Outcome::kProtocolViolation, "exceeds the limit"},
                      // A welcome is not trusted alone: the kernel's view of the process decides.
                      FaultCase{"unconfined_welcome", Outcome::kWorkerRefused, "the kernel shows Seccomp 0"},
                      FaultCase{"ignores_address_space_limit", Outcome::kWorkerRefused,
                                "/limits: the kernel shows Max address space unlimited (soft) unlimited (hard)"},
                      FaultCase{"ignores_cpu_limit", Outcome::kWorkerRefused,
                                "/limits: the kernel shows Max cpu time unlimited (soft) unlimited (hard)"},
                      // Another system's welcome, from a process the kernel shows confined: the
                      // Welcome rule of this system refuses it (platform seam, welcome_check.h).
                      FaultCase{"windows_welcome", Outcome::kWorkerRefused,
                                "welcome reports os \"windows\" on a Linux parent; a Windows worker is accepted only "
                                "on Windows"},
                      FaultCase{"linux_welcome_claiming_seatbelt", Outcome::kWorkerRefused,
                                "carries \"seatbelt\", which is another system's"},
                      // Integers are refused when out of range, never wrapped into range.
                      FaultCase{"welcome_protocol_wraps", Outcome::kWorkerRefused, "protocol version 4294967297"},
                      FaultCase{"welcome_landlock_abi_wraps", Outcome::kWorkerRefused, "Landlock ABI 4294967303"},
                      FaultCase{"welcome_pid_wraps", Outcome::kProtocolViolation, "field \"pid\" is 4294"},
                      FaultCase{"activation_wraps", Outcome::kProtocolViolation, "done for activation 4294"},
                      FaultCase{"call_id_huge", Outcome::kProtocolViolation, "field \"id\" is 9007199254740992"},
                      FaultCase{"done_cpu_us_negative", Outcome::kProtocolViolation, "field \"cpu_us\" is -1"},
                      FaultCase{"done_cpu_us_huge", Outcome::kProtocolViolation,
                                "field \"cpu_us\" is 18446744073709551615"},
                      // Exit 70 is a confinement refusal only before the welcome.
                      FaultCase{"exit70_after_welcome", Outcome::kWorkerCrashed, "exited with status 70"}),
    [](const ::testing::TestParamInfo<FaultCase>& i) { return std::string(i.param.fault); });

// The CPUs this process may run on.
int Cpus() {
  cpu_set_t set;
  return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
}

// Checks the report of the "reports_poll" fake worker: [activate's poll, result's poll, polls before
// the activate, polls before the answer]. The last lies within [late_min, late_max]: a `log` line's
// answer normally comes within the 50 us a worker polls for it, but on a slow build (ASan) it can
// take longer, and then the parent announces it with a `poll` (answer_late), at most once.
void ExpectReport(const Json& report, bool activate_poll, bool result_poll, int polls, int late_min, int late_max) {
  ASSERT_TRUE(report.is_array() && report.size() == 4) << report.dump();
  EXPECT_EQ(report[0], activate_poll) << report.dump();
  EXPECT_EQ(report[1], result_poll) << report.dump();
  EXPECT_EQ(report[2], polls) << report.dump();
  EXPECT_GE(report[3].get<int>(), late_min) << report.dump();
  EXPECT_LE(report[3].get<int>(), late_max) << report.dump();
}

// A module (a new one, in a new directory) whose workers are the fake worker that reports what it
// was told about polling ("reports_poll"), with a trivial flow.
class ReportsPoll : public ModuleFixture {
 protected:
  FlowRef Start(std::chrono::microseconds busy_poll, uint32_t max_activations_per_worker = 256, size_t max_workers = 0) {
    module_.reset();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directory(dir_);
    ModuleOptions o;
    o.worker_path = FakeWorker("reports_poll");
    o.busy_poll = busy_poll;
    o.max_activations_per_worker = max_activations_per_worker;
    if (max_workers > 0) o.max_workers = max_workers;
    Open(o);
    return Add("export default () => 1");
  }
  // A flow granted "slow", a call its handler answers `after` later from another thread (the fake
  // worker makes it when its input is "slow").
  FlowRef AddSlowFlow(std::chrono::milliseconds after = std::chrono::milliseconds(2)) {
    HostCallSpec spec;
    spec.name = "slow";
    spec.handler = [after](const HostCallContext&, const Json&, HostCallReply reply) {
      std::thread([reply = std::move(reply), after]() mutable {
        std::this_thread::sleep_for(after);
        reply.Ok(7);
      }).detach();
    };
    EXPECT_TRUE(module_->registry().Register(std::move(spec)));
    return Add("export default () => 1", R"({"grants": {"slow": {}}})", "slow.js");
  }
};

// The parent tells a worker it may poll for its next frame (src/worker/wait_spin.h) in the
// `activate` and in each answer whenever busy_poll is on (one CPU or many), and never with
// busy_poll 0.
TEST_F(ReportsPoll, TheParentLetsAWorkerPollWheneverBusyPollIsOn) {
  for (const auto poll : {std::chrono::microseconds(50), std::chrono::microseconds(0)}) {
    SCOPED_TRACE("busy_poll " + std::to_string(poll.count()) + " us");
    FlowRef f = Start(poll);
    const bool expected = poll.count() > 0;
    for (int k = 0; k < 3; ++k) {
      const ActivationResult r = module_->Run(f, nullptr);
      ASSERT_TRUE(r.ok()) << poll.count() << ": " << r.message;
      SCOPED_TRACE("busy_poll " + std::to_string(poll.count()) + " us, activation " + std::to_string(k));
      ExpectReport(r.result, expected, expected, 0, 0, expected ? 1 : 0);
    }
  }
}

// Under a backlog too: with more activations running at once than there are CPUs (each waits on a
// call answered 300 ms later from another thread: long enough for every worker to start before the
// first answer, even on a loaded machine), every `activate` and every answer still lets its
// worker poll. A polling worker yields between two looks, so whatever else is runnable on its CPU
// (the loop, another worker) runs first: the leave does not wait for a free CPU (only an idle
// worker woken ahead of a run does, below).
TEST_F(ReportsPoll, ABacklogsWorkersAreToldToPollToo) {
  const size_t n = static_cast<size_t>(Cpus()) + 2;
  for (const auto poll : {std::chrono::microseconds(50), std::chrono::microseconds(0)}) {
    SCOPED_TRACE("busy_poll " + std::to_string(poll.count()) + " us");
    Start(poll, 256, n);
    FlowRef f = AddSlowFlow(std::chrono::milliseconds(300));
    std::vector<ActivationResult> results;
    for (size_t i = 0; i < n; ++i)
      ASSERT_TRUE(module_->Submit(f, "slow", [&](const ActivationResult& r) { results.push_back(r); }));
    module_->RunUntilIdle();
    ASSERT_EQ(results.size(), n);
    EXPECT_EQ(module_->HealthReport()["spawned"], n) << "all ran at once, more than the CPUs";
    const bool expected = poll.count() > 0;
    for (const ActivationResult& r : results) {
      ASSERT_TRUE(r.ok()) << r.message;
      ExpectReport(r.result, expected, expected, 0, expected ? 1 : 0, expected ? 1 : 0);
    }
  }
}

// A codemode script's worker is never told to poll: its one script mostly waits on slow tools.
TEST_F(ReportsPoll, ACodemodeScriptsWorkerIsNeverToldToPoll) {
  Start(std::chrono::microseconds(50));
  auto script = module_->AddFlow("script.js", "export default () => 1", "{}", Profile::kCodemode);
  ASSERT_TRUE(script) << script.error().message;
  for (int k = 0; k < 2; ++k) {
    const ActivationResult r = module_->Run(*script, nullptr);
    ASSERT_TRUE(r.ok()) << r.message;
    ExpectReport(r.result, false, false, 0, 0, 0);
  }
}

// basal serve, as it reads a request for a run, tells an idle worker of the flow to poll for the
// `activate` that follows (ModuleHost::WakeIdleWorker): once between two of its activations however
// often it is asked, and none with busy_poll 0. (Only this wake-up waits for a free CPU: the worker
// would spin for an `activate` that comes after the run is accepted and journaled.)
TEST_F(ReportsPoll, AWorkerAboutToGetARunIsToldToPollOnceAndOnlyWhileACpuIsFree) {
  for (const auto poll : {std::chrono::microseconds(50), std::chrono::microseconds(0)}) {
    SCOPED_TRACE("busy_poll " + std::to_string(poll.count()) + " us");
    FlowRef f = Start(poll);
    const bool leave = poll.count() > 0;  // in its activate and answers
    const bool woken = leave;  // between two runs no worker is busy: a CPU is free
    ActivationResult r = module_->Run(f, nullptr);  // starts the worker: nothing was idle to wake
    ASSERT_TRUE(r.ok()) << r.message;
    ExpectReport(r.result, leave, leave, 0, 0, leave ? 1 : 0);
    module_->host().WakeIdleWorker(f->name);
    module_->host().WakeIdleWorker(f->name);  // told once already: nothing more
    module_->host().WakeIdleWorker("another-flow");  // no worker of it
    r = module_->Run(f, nullptr);
    ASSERT_TRUE(r.ok()) << r.message;
    ExpectReport(r.result, leave, leave, woken ? 1 : 0, 0, leave ? 1 : 0);
    r = module_->Run(f, nullptr);  // not told this time
    ASSERT_TRUE(r.ok()) << r.message;
    ExpectReport(r.result, leave, leave, 0, 0, leave ? 1 : 0);
    module_->host().WakeIdleWorker(f->name);  // its last activate let it be told again
    r = module_->Run(f, nullptr);
    ASSERT_TRUE(r.ok()) << r.message;
    ExpectReport(r.result, leave, leave, woken ? 1 : 0, 0, leave ? 1 : 0);
  }
}

// A handler that answers after the worker stopped polling for it (an http.fetch, here a call
// answered 2 ms later from another thread): the parent tells the worker to poll before it journals
// and commits the answer (CallGateHooks::answer_late), once, on the same terms; an answer that
// comes at once (log) gets none.
TEST_F(ReportsPoll, AnAnswerThatComesLateIsAnnouncedByOnePoll) {
  for (const auto poll : {std::chrono::microseconds(50), std::chrono::microseconds(0)}) {
    SCOPED_TRACE("busy_poll " + std::to_string(poll.count()) + " us");
    FlowRef f = Start(poll);
    f = AddSlowFlow();
    const bool expected = poll.count() > 0;
    for (int k = 0; k < 2; ++k) {
      ActivationResult r = module_->Run(f, "slow");
      ASSERT_TRUE(r.ok()) << r.message;
      ExpectReport(r.result, expected, expected, 0, expected ? 1 : 0, expected ? 1 : 0);
      r = module_->Run(f, nullptr);  // log: answered at once
      ASSERT_TRUE(r.ok()) << r.message;
      ExpectReport(r.result, expected, expected, 0, 0, expected ? 1 : 0);
    }
  }
}

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

TEST_F(ModuleFixture, Exit70AfterTheWelcomeIsACrashNotARefusal) {
  ModuleOptions o;
  o.worker_path = FakeWorker("exit70_after_welcome");
  Open(o);
  FlowRef f = Add("export default () => 1");
  ActivationResult r = module_->Run(f, nullptr);
  EXPECT_EQ(r.outcome, Outcome::kWorkerCrashed) << r.message;
  auto health = module_->HealthReport();
  EXPECT_EQ(health["crashes"]["exit 70"], 1) << health.dump();
  EXPECT_EQ(health["confinement_refusals"], 0);
  EXPECT_EQ(health["refused_welcomes"], 0);
}

TEST_F(ModuleFixture, AWorkerThatOnlyClaimsConfinementIsRefusedBeforeItSeesFlowCode) {
  ModuleOptions o;
  o.worker_path = FakeWorker("unconfined_welcome");
  Open(o);
  FlowRef f = Add("export default () => 1");
  ActivationResult r = module_->Run(f, nullptr);
  EXPECT_EQ(r.outcome, Outcome::kWorkerRefused);
  EXPECT_NE(r.message.find("/status: the kernel shows Seccomp 0, not 2 (filter mode)"), std::string::npos) << r.message;
  EXPECT_EQ(module_->HealthReport()["refused_welcomes"], 1);
}

// Confined (no_new_privs, a seccomp filter) but it kept root, or skipped no_new_privs, while its
// welcome claims otherwise. Only a root parent can see either: an unprivileged fake has no root to
// keep, and cannot install a filter without no_new_privs.
TEST_F(ModuleFixture, ARootParentRefusesAWorkerThatKeptItsPrivileges) {
  if (geteuid() != 0) GTEST_SKIP() << "needs a root parent: an unprivileged worker has no privilege to keep";
  for (const auto& [fault, field] : {std::pair<std::string, std::string>{"keeps_privileges", "CapEff 000"},
                                     std::pair<std::string, std::string>{"without_no_new_privs", "NoNewPrivs 0"}}) {
    module_.reset();
    ModuleOptions o;
    o.worker_path = FakeWorker(fault);
    Open(o);
    FlowRef f = Add("export default () => 1");
    ActivationResult r = module_->Run(f, nullptr);
    EXPECT_EQ(r.outcome, Outcome::kWorkerRefused) << fault << ": " << r.message;
    EXPECT_NE(r.message.find("the kernel shows " + field), std::string::npos) << fault << ": " << r.message;
  }
}

// A release parent refuses a worker that reports test hooks; a test-hooks parent (the build that
// runs the confinement probes) accepts it. scripts/test.sh runs this file in the release build,
// so the release side is what CI asserts.
TEST_F(ModuleFixture, TestHooksWorkerIsRefusedByAReleaseParent) {
  ModuleOptions o;
  o.worker_path = FakeWorker("test_hooks_welcome");
  Open(o);
  FlowRef f = Add("export default () => 1");
  ActivationResult r = module_->Run(f, nullptr);
#ifdef BASAL_TEST_HOOKS
  EXPECT_EQ(r.outcome, Outcome::kOk) << r.message;
  EXPECT_EQ(r.result, "served");
#else
  EXPECT_EQ(r.outcome, Outcome::kWorkerRefused) << r.message;
  EXPECT_NE(r.message.find("the worker reports test hooks"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("this parent is a release build"), std::string::npos) << r.message;
#endif
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
