// The decisions of a durable run's replay (src/parent/replay.h), on records built by hand: what each
// recorded call becomes (replayed, run again, or left to an operator), the order the answers go out
// in across several resumed activations, and the replayer's verdicts call by call.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "parent/replay.h"

namespace basal {
namespace {

ActivationRow Activation(int64_t id) {
  ActivationRow a;
  a.id = id;
  a.run_id = 1;
  return a;
}

// An answered call: `seq` is its answer's place in the order the worker got answers (0: none).
CallRow Answered(int64_t activation, int64_t call, std::string name, std::string result, int64_t seq, int64_t end_us) {
  CallRow c;
  c.activation_id = activation;
  c.call_id = call;
  c.name = std::move(name);
  c.args_digest = "sha256:" + std::to_string(call);
  c.effect = Effect::kPure;
  c.state = CallState::kAnswered;
  c.result_json = std::move(result);
  if (seq > 0) c.answer_seq = seq;
  c.start_unix_us = end_us - 10;
  c.end_unix_us = end_us;
  return c;
}

// A call that was running when its parent died.
CallRow Unknown(int64_t activation, int64_t call, std::string name, Effect effect) {
  CallRow c;
  c.activation_id = activation;
  c.call_id = call;
  c.name = std::move(name);
  c.args_digest = "sha256:" + std::to_string(call);
  c.args_json = R"({"url":"https://pay.example/charge"})";
  c.effect = effect;
  c.state = CallState::kUnknown;
  c.start_unix_us = 100;
  return c;
}

bool KvIsLocal(std::string_view name) { return name.rfind("kv.", 0) == 0; }

std::vector<int64_t> Order(const ReplayPlan& plan) {
  std::vector<int64_t> ids;
  for (const RecordedAnswer& a : plan.answers) ids.push_back(a.call_id);
  return ids;
}

TEST(ReplayAnalysis, AnswersAreReplayedInTheOrderTheWorkerGotThem) {
  // Calls 1 and 2 in flight at once; 2's answer came first.
  const std::vector<CallRow> calls = {Answered(10, 1, "kv.get", "1", 2, 300), Answered(10, 2, "kv.get", "2", 1, 200),
                                      Answered(10, 3, "kv.get", "3", 3, 400)};
  const RunAnalysis a = AnalyzeRun({Activation(10)}, calls, {}, KvIsLocal);
  EXPECT_TRUE(a.needs_operator.empty());
  EXPECT_EQ(Order(a.plan), (std::vector<int64_t>{2, 1, 3}));
  EXPECT_EQ(a.plan.last_call_id, 3);
  EXPECT_EQ(a.plan.answers[0].value_json, "2");
  EXPECT_EQ(a.plan.answers[0].clock_us, 200) << "an answer carries the clock it carried";
}

TEST(ReplayAnalysis, AResumedActivationsOwnAnswersKeepTheirPlaceAmongTheReplayedOnes) {
  // The first execution answered 1 and 3; call 2 was a pure call in flight (no record). The resume
  // replayed 1, got 2 live, then replayed 3: 2 is its first own answer, at position 2.
  const std::vector<CallRow> calls = {Answered(10, 1, "kv.get", "1", 1, 100), Answered(10, 3, "kv.get", "3", 2, 300),
                                      Answered(11, 2, "kv.get", "2", 2, 500), Answered(11, 4, "kv.get", "4", 4, 600)};
  const RunAnalysis a = AnalyzeRun({Activation(10), Activation(11)}, calls, {}, KvIsLocal);
  EXPECT_EQ(Order(a.plan), (std::vector<int64_t>{1, 2, 3, 4}));
}

TEST(ReplayAnalysis, CallsInDoubtAreDecidedByTheirEffectClass) {
  const std::vector<CallRow> calls = {
      Answered(10, 1, "kv.get", "1", 1, 100),
      Unknown(10, 2, "timer.sleep", Effect::kPure),         // pure: runs again
      Unknown(10, 3, "kv.incr", Effect::kExternal),         // its effect commits with its answer: runs again
      Unknown(10, 4, "http.fetch", Effect::kIdempotent),    // runs again, same key
      Unknown(10, 5, "http.fetch", Effect::kExternal),      // waits for the operator
  };
  const RunAnalysis a = AnalyzeRun({Activation(10)}, calls, {}, KvIsLocal);
  EXPECT_EQ(a.plan.reruns, (std::vector<int64_t>{2, 3, 4}));
  ASSERT_EQ(a.needs_operator.size(), 1u);
  EXPECT_EQ(a.needs_operator[0].call_id, 5);
  EXPECT_EQ(a.needs_operator[0].activation_id, 10);
  EXPECT_EQ(a.needs_operator[0].args_json, R"({"url":"https://pay.example/charge"})");
  EXPECT_EQ(a.plan.last_call_id, 5);
}

TEST(ReplayAnalysis, AnOperatorsDecisionIsTheAnswerOrARetry) {
  const std::vector<CallRow> calls = {Answered(10, 1, "kv.get", "1", 1, 100), Unknown(10, 2, "mail.send", Effect::kExternal),
                                      Unknown(10, 3, "mail.send", Effect::kExternal),
                                      Unknown(10, 4, "mail.send", Effect::kExternal)};
  CallResolution sent{0, 1, 10, 2, ResolutionKind::kResult, R"({"sent":true})", {0, "ops"}, 900, ""};
  CallResolution failed{0, 1, 10, 3, ResolutionKind::kError, R"({"name":"HostError","message":"bounced"})", {0, "ops"}, 901, ""};
  CallResolution retry{0, 1, 10, 4, ResolutionKind::kRetry, "", {0, "ops"}, 902, ""};
  const RunAnalysis a = AnalyzeRun({Activation(10)}, calls, {sent, failed, retry}, KvIsLocal);
  EXPECT_TRUE(a.needs_operator.empty());
  EXPECT_EQ(a.plan.reruns, (std::vector<int64_t>{4}));
  EXPECT_EQ(Order(a.plan), (std::vector<int64_t>{1, 2, 3})) << "the decided answers come after every recorded one";
  EXPECT_TRUE(a.plan.answers[1].ok);
  EXPECT_EQ(a.plan.answers[1].value_json, R"({"sent":true})");
  EXPECT_FALSE(a.plan.answers[2].ok);
  EXPECT_EQ(a.plan.answers[2].error_name, "HostError");
  EXPECT_EQ(a.plan.answers[2].error_message, "bounced");
}

TEST(ReplayAnalysis, WhatNeverStartedRunsAndALateAnswerIsKnown) {
  CallRow never = Unknown(10, 1, "mail.send", Effect::kExternal);
  never.state = CallState::kAbandoned;  // the activation ended before its handler ran
  never.end_unix_us = 150;
  never.error_json = R"({"name":"ActivationEnded","message":"the activation ended before this call was answered"})";
  CallRow late = Unknown(10, 2, "mail.send", Effect::kExternal);
  late.state = CallState::kAbandoned;  // answered after its activation ended: the effect happened
  late.result_json = R"({"sent":true})";
  late.end_unix_us = 300;
  CallRow running = Unknown(10, 3, "mail.send", Effect::kExternal);
  running.state = CallState::kAbandoned;  // its handler ran when the activation ended: in doubt
  running.error_json = never.error_json;
  const RunAnalysis a = AnalyzeRun({Activation(10)}, {never, late, running}, {}, KvIsLocal);
  EXPECT_EQ(a.plan.reruns, (std::vector<int64_t>{1}));
  EXPECT_EQ(Order(a.plan), (std::vector<int64_t>{2}));
  ASSERT_EQ(a.needs_operator.size(), 1u);
  EXPECT_EQ(a.needs_operator[0].call_id, 3);
}

// An external call that answered an error after its activation ended (a POST the deadline cut
// mid-transfer: "aborted") may have reached its server: in doubt, on a resume and on a retry
// alike, never replayed as an error nor sent again by a retry. An idempotent one runs again.
TEST(ReplayAnalysis, ALateErrorOfAnExternalCallIsInDoubtNotAFailureToRetry) {
  CallRow kv = Answered(10, 1, "kv.incr", "1", 1, 200);
  CallRow post = Unknown(10, 2, "http.fetch", Effect::kExternal);
  post.state = CallState::kAbandoned;
  post.end_unix_us = 300;
  post.error_json = R"({"name":"TypeError","message":"fetch https://pay.example/charge aborted: the activation ended"})";
  post.replay_json = R"({"error":{"name":"TypeError","message":"aborted"}})";
  for (bool retry : {false, true}) {
    const RunAnalysis a = AnalyzeRun({Activation(10)}, {kv, post}, {}, KvIsLocal, retry);
    ASSERT_EQ(a.needs_operator.size(), 1u) << "retry " << retry;
    EXPECT_EQ(a.needs_operator[0].call_id, 2);
    EXPECT_TRUE(a.plan.reruns.empty());
  }
  CallRow get = post;
  get.effect = Effect::kIdempotent;
  const RunAnalysis again = AnalyzeRun({Activation(10)}, {kv, get}, {}, KvIsLocal, /*retry=*/true);
  EXPECT_TRUE(again.needs_operator.empty());
  EXPECT_EQ(again.retry_from_call, 2) << "its failure is where the next attempt starts, sending it again";
  EXPECT_EQ(Order(again.plan), (std::vector<int64_t>{1}));
  // An operator's decision settles it as for any call in doubt.
  CallResolution failed;
  failed.call_id = 2;
  failed.kind = ResolutionKind::kError;
  failed.value_json = R"({"name":"TypeError","message":"the charge did not happen"})";
  const RunAnalysis decided = AnalyzeRun({Activation(10)}, {kv, post}, {failed}, KvIsLocal, /*retry=*/true);
  EXPECT_TRUE(decided.needs_operator.empty());
}

TEST(ReplayAnalysis, TheAnswerKeptForReplayWinsOverTheJournalsView) {
  CallRow capped = Answered(10, 1, "kv.get", R"({"basal_digest":{"bytes":70000}})", 1, 100);
  capped.replay_json = R"({"ok":{"big":"value"}})";
  CallRow error = Answered(10, 2, "http.fetch", "", 2, 200);
  error.error_json = R"({"name":"TypeError","message":"fetch failed: [redacted]"})";
  error.replay_json = R"({"error":{"name":"TypeError","message":"fetch failed: https://a.example/"}})";
  const RunAnalysis a = AnalyzeRun({Activation(10)}, {capped, error}, {}, KvIsLocal);
  ASSERT_EQ(a.plan.answers.size(), 2u);
  EXPECT_EQ(a.plan.answers[0].value_json, R"({"big":"value"})");
  EXPECT_EQ(a.plan.answers[1].error_message, "fetch failed: https://a.example/");
}

TEST(ReplayAnalysis, LogAnswersGoOutAtOnceOutsideTheOrder) {
  const std::vector<CallRow> calls = {Answered(10, 1, "log", "null", 0, 100), Answered(10, 2, "kv.get", "2", 1, 200)};
  const RunAnalysis a = AnalyzeRun({Activation(10)}, calls, {}, KvIsLocal);
  EXPECT_EQ(Order(a.plan), (std::vector<int64_t>{2}));
  ASSERT_EQ(a.plan.immediate.count(1), 1u);
  EXPECT_TRUE(a.plan.immediate.at(1).notification);
  Replayer r(a.plan);
  EXPECT_EQ(r.OnCall(1, "log", "sha256:1").step, Replayer::Step::kFromRecord);
  auto out = r.TakeDeliverable();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].call_id, 1);
}

TEST(Replayer, RecordedAnswersGoOutInTheirOrderOnceTheirCallIsMade) {
  const std::vector<CallRow> calls = {Answered(10, 1, "kv.get", "1", 2, 300), Answered(10, 2, "kv.get", "2", 1, 200)};
  Replayer r(AnalyzeRun({Activation(10)}, calls, {}, KvIsLocal).plan);
  EXPECT_EQ(r.OnCall(1, "kv.get", "sha256:1").step, Replayer::Step::kFromRecord);
  EXPECT_TRUE(r.TakeDeliverable().empty()) << "call 2's answer came first: 1's waits for it";
  EXPECT_NE(r.Waiting().find("call 2"), std::string::npos) << r.Waiting();
  EXPECT_EQ(r.OnCall(2, "kv.get", "sha256:2").step, Replayer::Step::kFromRecord);
  auto out = r.TakeDeliverable();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].call_id, 2);
  EXPECT_EQ(out[1].call_id, 1);
  EXPECT_FALSE(r.Leftover().has_value());
  EXPECT_EQ(r.OnCall(3, "kv.put", "sha256:x").step, Replayer::Step::kLive) << "past the record: live";
}

TEST(Replayer, AnotherCallIsADivergenceNamingBothSides) {
  Replayer r(AnalyzeRun({Activation(10)}, {Answered(10, 1, "kv.get", "1", 1, 100)}, {}, KvIsLocal).plan);
  const auto v = r.OnCall(1, "kv.put", "sha256:other");
  EXPECT_EQ(v.step, Replayer::Step::kDiverged);
  EXPECT_NE(v.divergence.find("call 1"), std::string::npos) << v.divergence;
  EXPECT_NE(v.divergence.find("kv.put"), std::string::npos) << v.divergence;
  EXPECT_NE(v.divergence.find("kv.get"), std::string::npos) << v.divergence;
  EXPECT_NE(v.divergence.find("sha256:other"), std::string::npos) << v.divergence;
  EXPECT_NE(v.divergence.find("sha256:1"), std::string::npos) << v.divergence;
  Replayer same_name(AnalyzeRun({Activation(10)}, {Answered(10, 1, "kv.get", "1", 1, 100)}, {}, KvIsLocal).plan);
  EXPECT_EQ(same_name.OnCall(1, "kv.get", "sha256:other-args").step, Replayer::Step::kDiverged)
      << "the same name with other arguments is another call";
}

TEST(Replayer, ARecordTheScriptNoLongerReachesIsADivergence) {
  const std::vector<CallRow> calls = {Answered(10, 1, "kv.get", "1", 1, 100), Answered(10, 2, "kv.get", "2", 2, 200)};
  Replayer skipped(AnalyzeRun({Activation(10)}, calls, {}, KvIsLocal).plan);
  EXPECT_EQ(skipped.OnCall(1, "kv.get", "sha256:1").step, Replayer::Step::kFromRecord);
  EXPECT_EQ(skipped.OnCall(3, "kv.get", "sha256:3").step, Replayer::Step::kDiverged) << "call 2 skipped";
  Replayer ended(AnalyzeRun({Activation(10)}, calls, {}, KvIsLocal).plan);
  EXPECT_EQ(ended.OnCall(1, "kv.get", "sha256:1").step, Replayer::Step::kFromRecord);
  auto left = ended.Leftover();
  ASSERT_TRUE(left.has_value());
  EXPECT_NE(left->find("call 2"), std::string::npos) << *left;
}

TEST(Replayer, ACallInDoubtRunsAgainUnlessEveryEffectIsDisabled) {
  const std::vector<CallRow> calls = {Answered(10, 1, "kv.get", "1", 1, 100), Unknown(10, 2, "timer.sleep", Effect::kPure)};
  const ReplayPlan plan = AnalyzeRun({Activation(10)}, calls, {}, KvIsLocal).plan;
  Replayer live(plan);
  EXPECT_EQ(live.OnCall(1, "kv.get", "sha256:1").step, Replayer::Step::kFromRecord);
  EXPECT_EQ(live.TakeDeliverable().size(), 1u);
  EXPECT_EQ(plan.reruns, (std::vector<int64_t>{2}));
  EXPECT_EQ(live.OnCall(2, "timer.sleep", "sha256:2").step, Replayer::Step::kLive);
  EXPECT_FALSE(live.Leftover().has_value());
  Replayer strict(plan, /*strict=*/true);
  EXPECT_EQ(strict.OnCall(1, "kv.get", "sha256:1").step, Replayer::Step::kFromRecord);
  EXPECT_EQ(strict.OnCall(2, "timer.sleep", "sha256:2").step, Replayer::Step::kPastRecord);
  Replayer past(plan, /*strict=*/true);
  EXPECT_EQ(past.OnCall(1, "kv.get", "sha256:1").step, Replayer::Step::kFromRecord);
  EXPECT_EQ(past.OnCall(2, "kv.put", "sha256:9").step, Replayer::Step::kDiverged) << "in doubt, but another call";
}

// --- Retry mode (docs/durable.md#retries) -----------------------------------------------------
// A record as one failed attempt left it, in call order: answers delivered in call order.

// An external call answered with a result.
CallRow External(int64_t activation, int64_t call, std::string name, int64_t seq) {
  CallRow c = Answered(activation, call, std::move(name), R"({"status":200})", seq, 100 * call);
  c.effect = Effect::kExternal;
  return c;
}

// A call answered with an error (a network error, a timeout, a HostError).
CallRow Failed(int64_t activation, int64_t call, std::string name, int64_t seq, Effect effect = Effect::kExternal) {
  CallRow c = Answered(activation, call, std::move(name), "", seq, 100 * call);
  c.error_json = R"({"name":"TypeError","message":"fetch failed: 503"})";
  c.effect = effect;
  return c;
}

// A step marker (step(name, fn) makes run.step calls: begin, then end with ok).
CallRow StepBegin(int64_t activation, int64_t call, const std::string& name, int64_t seq) {
  CallRow c = Answered(activation, call, "run.step", "null", seq, 100 * call);
  c.args_json = R"({"name":")" + name + R"(","phase":"begin"})";
  return c;
}
CallRow StepEnd(int64_t activation, int64_t call, const std::string& name, bool ok, int64_t seq) {
  CallRow c = Answered(activation, call, "run.step", "null", seq, 100 * call);
  c.args_json = R"({"name":")" + name + R"(","phase":"end","ok":)" + (ok ? "true" : "false") + "}";
  return c;
}

std::vector<int64_t> PlannedCalls(const ReplayPlan& plan) {
  std::vector<int64_t> ids;
  for (const auto& [id, c] : plan.calls) ids.push_back(id);
  return ids;
}

TEST(ReplayRetry, AFailedCallIsWhereTheRetryStartsAndWhatCameBeforeIsReplayed) {
  // kv.get answered, an external write answered, then a fetch that failed and ended the attempt.
  const std::vector<CallRow> calls = {Answered(10, 1, "kv.get", "1", 1, 100), External(10, 2, "kv.put", 2),
                                      Failed(10, 3, "http.fetch", 3)};
  const RunAnalysis a = AnalyzeRun({Activation(10)}, calls, {}, KvIsLocal, /*retry=*/true);
  EXPECT_TRUE(a.needs_operator.empty());
  EXPECT_EQ(a.retry_from_call, 3);
  EXPECT_EQ(PlannedCalls(a.plan), (std::vector<int64_t>{1, 2})) << "the failed fetch runs again, live";
  EXPECT_EQ(Order(a.plan), (std::vector<int64_t>{1, 2})) << "the write is replayed, not repeated";
  EXPECT_EQ(a.plan.last_call_id, 2);
  EXPECT_TRUE(a.plan.reruns.empty());
  Replayer r(a.plan);
  EXPECT_EQ(r.OnCall(1, "kv.get", "sha256:1").step, Replayer::Step::kFromRecord);
  EXPECT_EQ(r.OnCall(2, "kv.put", "sha256:2").step, Replayer::Step::kFromRecord);
  EXPECT_EQ(r.TakeDeliverable().size(), 2u);
  EXPECT_EQ(r.OnCall(3, "http.fetch", "sha256:3").step, Replayer::Step::kLive) << "the failure is not replayed";
  EXPECT_FALSE(r.Leftover().has_value());

  // The same record resumed after a crash (not a retry) replays everything, the failure too.
  const RunAnalysis resume = AnalyzeRun({Activation(10)}, calls, {}, KvIsLocal);
  EXPECT_EQ(resume.retry_from_call, 0);
  EXPECT_EQ(Order(resume.plan), (std::vector<int64_t>{1, 2, 3}));
}

TEST(ReplayRetry, AStepThatThrewRunsAgainFromItsStart) {
  // A write before the step; inside it one fetch answered and one that failed; the step threw.
  const std::vector<CallRow> calls = {External(10, 1, "kv.put", 1), StepBegin(10, 2, "charge", 2),
                                      External(10, 3, "http.fetch", 3), Failed(10, 4, "http.fetch", 4),
                                      StepEnd(10, 5, "charge", false, 5)};
  const RunAnalysis a = AnalyzeRun({Activation(10)}, calls, {}, KvIsLocal, true);
  EXPECT_EQ(a.retry_from_call, 2) << "from the step's begin: its answered fetch runs again too (at least once)";
  EXPECT_EQ(PlannedCalls(a.plan), (std::vector<int64_t>{1}));
  EXPECT_EQ(Order(a.plan), (std::vector<int64_t>{1})) << "the write before the step is replayed";
}

TEST(ReplayRetry, AStepThatReturnedIsReplayedEvenIfACallInsideItFailed) {
  // Step "a" caught its own fetch's failure and returned; after it, a fetch failed the attempt.
  const std::vector<CallRow> calls = {StepBegin(10, 1, "a", 1),         Failed(10, 2, "http.fetch", 2),
                                      External(10, 3, "http.fetch", 3), StepEnd(10, 4, "a", true, 4),
                                      Answered(10, 5, "kv.get", "5", 5, 500), Failed(10, 6, "http.fetch", 6)};
  const RunAnalysis a = AnalyzeRun({Activation(10)}, calls, {}, KvIsLocal, true);
  EXPECT_EQ(a.retry_from_call, 6);
  EXPECT_EQ(Order(a.plan), (std::vector<int64_t>{1, 2, 3, 4, 5})) << "the step's calls, its failure included, replay";
  ASSERT_EQ(a.plan.answers.size(), 5u);
  EXPECT_FALSE(a.plan.answers[1].ok) << "the caught failure is the step's recorded past";
  EXPECT_EQ(a.plan.answers[1].error_name, "TypeError");
}

TEST(ReplayRetry, AStepThatReturnedIsReplayedAndTheOneThatThrewRunsAgain) {
  const std::vector<CallRow> calls = {StepBegin(10, 1, "a", 1),         External(10, 2, "http.fetch", 2),
                                      StepEnd(10, 3, "a", true, 3),     StepBegin(10, 4, "b", 4),
                                      External(10, 5, "http.fetch", 5), StepEnd(10, 6, "b", false, 6)};
  const RunAnalysis a = AnalyzeRun({Activation(10)}, calls, {}, KvIsLocal, true);
  EXPECT_EQ(a.retry_from_call, 4);
  EXPECT_EQ(Order(a.plan), (std::vector<int64_t>{1, 2, 3}));
  // A step whose activation ended inside it (no end marker: a deadline, a crash) threw too.
  const std::vector<CallRow> cut = {StepBegin(10, 1, "a", 1), External(10, 2, "http.fetch", 2),
                                    StepEnd(10, 3, "a", true, 3), StepBegin(10, 4, "b", 4),
                                    External(10, 5, "http.fetch", 5)};
  const RunAnalysis c = AnalyzeRun({Activation(10)}, cut, {}, KvIsLocal, true);
  EXPECT_EQ(c.retry_from_call, 4);
  EXPECT_EQ(Order(c.plan), (std::vector<int64_t>{1, 2, 3}));
}

TEST(ReplayRetry, AStepInsideAStepThatThrewRunsAgainWithIt) {
  // The inner step returned, the outer one threw: the outer step runs again from its start.
  const std::vector<CallRow> calls = {External(10, 1, "kv.put", 1),     StepBegin(10, 2, "outer", 2),
                                      StepBegin(10, 3, "inner", 3),     External(10, 4, "http.fetch", 4),
                                      StepEnd(10, 5, "inner", true, 5), Failed(10, 6, "http.fetch", 6),
                                      StepEnd(10, 7, "outer", false, 7)};
  const RunAnalysis a = AnalyzeRun({Activation(10)}, calls, {}, KvIsLocal, true);
  EXPECT_EQ(a.retry_from_call, 2);
  EXPECT_EQ(Order(a.plan), (std::vector<int64_t>{1}));
  // Both threw: still from the outer begin, the earliest point.
  const std::vector<CallRow> both = {StepBegin(10, 1, "outer", 1), StepBegin(10, 2, "inner", 2),
                                     Failed(10, 3, "http.fetch", 3), StepEnd(10, 4, "inner", false, 4),
                                     StepEnd(10, 5, "outer", false, 5)};
  EXPECT_EQ(AnalyzeRun({Activation(10)}, both, {}, KvIsLocal, true).retry_from_call, 1);
}

TEST(ReplayRetry, AnEffectAfterTheFailureIsNeverRepeated) {
  // The script caught a failed fetch, then sent a mail (answered), then failed: running again from
  // the fetch would send the mail twice, so the retry replays the whole record instead.
  const std::vector<CallRow> calls = {Failed(10, 1, "http.fetch", 1), External(10, 2, "mail.send", 2),
                                      Answered(10, 3, "kv.get", "3", 3, 300)};
  const RunAnalysis a = AnalyzeRun({Activation(10)}, calls, {}, KvIsLocal, true);
  EXPECT_EQ(a.retry_from_call, 4) << "past the record";
  EXPECT_EQ(Order(a.plan), (std::vector<int64_t>{1, 2, 3}));
  // A later failure after the mail is a point nothing unrepeatable follows: the retry starts there.
  const std::vector<CallRow> later = {Failed(10, 1, "http.fetch", 1), External(10, 2, "mail.send", 2),
                                      Failed(10, 3, "http.fetch", 3)};
  const RunAnalysis b = AnalyzeRun({Activation(10)}, later, {}, KvIsLocal, true);
  EXPECT_EQ(b.retry_from_call, 3);
  EXPECT_EQ(Order(b.plan), (std::vector<int64_t>{1, 2}));
  // An effect inside a step that threw after the failure does not block it (the step reruns).
  const std::vector<CallRow> in_step = {Failed(10, 1, "http.fetch", 1), StepBegin(10, 2, "s", 2),
                                        External(10, 3, "mail.send", 3), StepEnd(10, 4, "s", false, 4)};
  EXPECT_EQ(AnalyzeRun({Activation(10)}, in_step, {}, KvIsLocal, true).retry_from_call, 1);
}

TEST(ReplayRetry, ARetryAttemptDiscardsTheRecordFromItsRetryPointOn) {
  // Attempt 1 (activation 10): kv.get, a failed fetch, then a call the failure's handler made.
  // Attempt 2 (activation 11, retry_from 2) replayed call 1, ran the fetch again (ok now) and then
  // its host died. Its resume sees call 2 as attempt 2 answered it, and attempt 1's call 3 is gone.
  ActivationRow second = Activation(11);
  second.retry_from_call = 2;
  const std::vector<CallRow> calls = {Answered(10, 1, "kv.get", "1", 1, 100), Failed(10, 2, "http.fetch", 2),
                                      Answered(10, 3, "kv.get", "old", 3, 300),
                                      Answered(11, 2, "http.fetch", R"({"status":200})", 2, 900)};
  const RunAnalysis a = AnalyzeRun({Activation(10), second}, calls, {}, KvIsLocal);
  EXPECT_EQ(PlannedCalls(a.plan), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(Order(a.plan), (std::vector<int64_t>{1, 2}));
  ASSERT_EQ(a.plan.answers.size(), 2u);
  EXPECT_TRUE(a.plan.answers[1].ok) << "attempt 2's answer, not attempt 1's failure";
  EXPECT_EQ(a.plan.answers[1].value_json, R"({"status":200})");
  EXPECT_EQ(a.plan.last_call_id, 2);
}

TEST(ReplayRetry, NoRetryPointWhileACallWaitsForAnOperator) {
  const std::vector<CallRow> calls = {Failed(10, 1, "http.fetch", 1), Unknown(10, 2, "mail.send", Effect::kExternal)};
  const RunAnalysis a = AnalyzeRun({Activation(10)}, calls, {}, KvIsLocal, true);
  ASSERT_EQ(a.needs_operator.size(), 1u);
  EXPECT_EQ(a.retry_from_call, 0) << "the run stops for the operator first";
}

TEST(ReplayArgs, TheDigestIsOfTheArgumentsNotOfHowTheyWereWritten) {
  EXPECT_EQ(ArgsDigest(Json::parse(R"({"b":1,"a":[1,2]})")), ArgsDigest(Json::parse(R"({ "a": [1, 2], "b": 1 })")));
  EXPECT_NE(ArgsDigest(Json::parse(R"({"a":1})")), ArgsDigest(Json::parse(R"({"a":2})")));
  EXPECT_EQ(ArgsDigest(Json::parse("null")).rfind("sha256:", 0), 0u);
}

}  // namespace
}  // namespace basal
