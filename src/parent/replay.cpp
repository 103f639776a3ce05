// See replay.h.
#include "parent/replay.h"

#include <algorithm>
#include <set>

#include "basal/manifest.h"
#include "protocol/messages.h"

namespace basal {
namespace {

// The error a call record got when its activation ended first (call_gate.cpp): not an answer.
constexpr std::string_view kActivationEnded = "ActivationEnded";
// The built-in log call (host_calls/log.h): the worker makes it as a notification and ignores its
// answer, so its answer is not part of the order the script can observe.
constexpr std::string_view kReplayLogCallName = "log";
// A durable run's step markers (module_park.cpp): {name, phase: "begin"|"end", ok}.
constexpr std::string_view kStepCallName = "run.step";

struct ParsedError {
  std::string name, message;
};

std::optional<ParsedError> ParseErrorJson(const std::string& text) {
  if (text.empty()) return std::nullopt;
  Json j = Json::parse(text, nullptr, false);
  if (!j.is_object()) return ParsedError{"HostError", text};
  ParsedError e;
  if (auto n = j.find("name"); n != j.end() && n->is_string()) e.name = n->get<std::string>();
  if (auto m = j.find("message"); m != j.end() && m->is_string()) e.message = m->get<std::string>();
  return e;
}

// The answer a record holds, if it holds one the worker could have got (or got).
bool LateErrorInDoubt(const CallRow& c) {
  if (c.state != CallState::kAbandoned || c.effect != Effect::kExternal || !c.result_json.empty()) return false;
  const auto error = ParseErrorJson(c.error_json);
  return error && error->name != kActivationEnded;  // that one: the gate closed a call that never ran
}

std::optional<RecordedAnswer> AnswerOf(const CallRow& c) {
  if (LateErrorInDoubt(c)) return std::nullopt;  // below
  RecordedAnswer a;
  a.call_id = c.call_id;
  a.clock_us = c.end_unix_us.value_or(c.start_unix_us);
  if (!c.replay_json.empty()) {
    // Written by the gate for a durable run when the journal's view is not the answer itself.
    Json j = Json::parse(c.replay_json, nullptr, false);
    if (j.is_object()) {
      if (auto ok = j.find("ok"); ok != j.end()) {
        a.ok = true;
        a.value_json = protocol::DumpJson(*ok);
        return a;
      }
      if (auto err = j.find("error"); err != j.end() && err->is_object()) {
        a.ok = false;
        a.error_name = err->value("name", "HostError");
        a.error_message = err->value("message", "");
        return a;
      }
    }
  }
  const auto error = ParseErrorJson(c.error_json);
  if (c.state == CallState::kAnswered) {
    if (!c.result_json.empty() && !error) {
      a.ok = true;
      a.value_json = c.result_json;
      return a;
    }
    if (error) {
      a.error_name = error->name;
      a.error_message = error->message;
      return a;
    }
    a.ok = true;  // answered with nothing journaled: a result of null
    a.value_json = "null";
    return a;
  }
  if (c.state == CallState::kAbandoned) {
    // A late answer (the activation had ended): the effect happened and its answer is known.
    if (!c.result_json.empty()) {
      a.ok = true;
      a.value_json = c.result_json;
      return a;
    }
    // A late error of an external call is no proof that nothing happened: a transfer aborted when
    // its activation ended (a fetch cut by the deadline) may have reached the server. In doubt
    // (LateErrorInDoubt), never replayed as an answer nor retried as a failure.
    if (error && error->name != kActivationEnded) {
      a.error_name = error->name;
      a.error_message = error->message;
      return a;
    }
  }
  return std::nullopt;
}

// Whether a record without an answer was running when its activation ended or its parent died
// (its effect may have happened), as opposed to never started.
bool WasRunning(const CallRow& c) {
  switch (c.state) {
    case CallState::kUnknown:
    case CallState::kStarted:
      return true;
    case CallState::kAbandoned:
      // The gate closes a call whose handler ran with no end time, one that never ran with one.
      // An external call that answered an error after its activation ended had run.
      return !c.end_unix_us.has_value() || LateErrorInDoubt(c);
    case CallState::kDecided:
    case CallState::kAnswered:
      return false;
  }
  return true;
}

}  // namespace

std::string ArgsDigest(const Json& args) { return Sha256Hex(protocol::DumpJson(args)); }

namespace {

// A step of the record (step(name, fn)): its begin marker, and its end marker if it returned or threw.
struct StepSpan {
  int64_t begin = 0;
  int64_t end = 0;  // 0: no end recorded (its activation ended inside it)
  bool ok = false;  // it returned
};

// The step markers (run.step) of the record, paired by name in call order: an end closes the latest
// open begin of the same name (steps may run side by side, so not a stack across names).
std::vector<StepSpan> StepsOf(const std::map<int64_t, const CallRow*>& newest) {
  std::vector<StepSpan> spans;
  std::map<std::string, std::vector<size_t>> open;
  for (const auto& [id, c] : newest) {
    if (c->name != kStepCallName) continue;
    Json args = Json::parse(c->args_json, nullptr, false);
    if (!args.is_object()) continue;
    const std::string name = args.value("name", std::string());
    const std::string phase = args.value("phase", std::string());
    if (phase == "begin") {
      open[name].push_back(spans.size());
      spans.push_back(StepSpan{id, 0, false});
    } else if (phase == "end") {
      auto& stack = open[name];
      if (stack.empty()) continue;
      StepSpan& s = spans[stack.back()];
      stack.pop_back();
      s.end = id;
      s.ok = args.value("ok", false);
    }
  }
  return spans;
}

// Where a retry starts over (docs/durable.md#retries): the earliest failure point after which the
// failed attempt did nothing that cannot be repeated. A failure point is the begin of a step that
// did not return, or a call answered with an error outside a step that returned. Calls that cannot
// be repeated are answered external calls; those inside a failed step that begins at or after the
// point run again (a failed step is at least once for its calls, as documented). No such point:
// the retry replays the whole record (last_call_id + 1).
int64_t RetryPoint(const std::map<int64_t, const CallRow*>& newest, const std::map<int64_t, RecordedAnswer>& answers,
                   int64_t last_call_id) {
  const std::vector<StepSpan> steps = StepsOf(newest);
  auto inside = [&](int64_t id, auto&& pred) {
    for (const StepSpan& s : steps)
      if (id > s.begin && (s.end == 0 || id < s.end) && pred(s)) return true;
    return false;
  };
  std::set<int64_t> points;
  for (const StepSpan& s : steps)
    if (!s.ok) points.insert(s.begin);
  for (const auto& [id, a] : answers) {
    auto c = newest.find(id);
    if (a.ok || c == newest.end() || c->second->name == kStepCallName) continue;
    if (inside(id, [](const StepSpan& s) { return s.ok; })) continue;  // handled inside a step that returned
    points.insert(id);
  }
  for (int64_t p : points) {
    bool repeatable = true;
    for (auto it = newest.upper_bound(p); it != newest.end() && repeatable; ++it) {
      const CallRow& c = *it->second;
      if (c.effect != Effect::kExternal || !answers.count(c.call_id)) continue;
      if (!inside(c.call_id, [p](const StepSpan& s) { return !s.ok && s.begin >= p; })) repeatable = false;
    }
    if (repeatable) return p;
  }
  return last_call_id + 1;
}

}  // namespace

RunAnalysis AnalyzeRun(const std::vector<ActivationRow>& activations, const std::vector<CallRow>& calls,
                       const std::vector<CallResolution>& resolutions,
                       const std::function<bool(std::string_view name)>& store_local, bool retry) {
  RunAnalysis out;
  ReplayPlan& plan = out.plan;
  std::map<int64_t, size_t> activation_index;
  for (size_t i = 0; i < activations.size(); ++i) activation_index[activations[i].id] = i;
  std::vector<std::vector<const CallRow*>> by_activation(activations.size());
  for (const CallRow& c : calls) {
    auto i = activation_index.find(c.activation_id);
    if (i != activation_index.end()) by_activation[i->second].push_back(&c);
  }
  // The newest record of each call id (a resumed activation's rerun supersedes an older record);
  // a retry attempt's activation first discards the calls of the record from its retry point on.
  std::map<int64_t, const CallRow*> newest;
  for (size_t i = 0; i < activations.size(); ++i) {
    if (const int64_t from = activations[i].retry_from_call; from > 0) newest.erase(newest.lower_bound(from), newest.end());
    for (const CallRow* c : by_activation[i]) newest[c->call_id] = c;
  }
  std::map<int64_t, const CallResolution*> decided;
  for (const CallResolution& r : resolutions) decided[r.call_id] = &r;

  std::map<int64_t, RecordedAnswer> answers;       // by call id
  std::vector<int64_t> undelivered;                // answered but never delivered (late answers)
  std::vector<int64_t> resolved;                   // answers an operator gave
  for (const auto& [call_id, c] : newest) {
    plan.calls[call_id] = RecordedCall{c->name, c->args_digest};
    plan.last_call_id = std::max(plan.last_call_id, call_id);
    if (auto a = AnswerOf(*c)) {
      if (c->name == kReplayLogCallName) {  // a notification: answered as soon as it is made, out of order
        a->notification = true;
        plan.immediate[call_id] = *a;
        continue;
      }
      answers[call_id] = *a;
      if (!c->answer_seq) undelivered.push_back(call_id);
      continue;
    }
    if (!WasRunning(*c)) {  // never started: nothing happened, it runs now
      plan.reruns.push_back(call_id);
      continue;
    }
    if (c->effect != Effect::kExternal || store_local(c->name)) {
      plan.reruns.push_back(call_id);  // pure, store-local, idempotent (same key): run again
      continue;
    }
    auto d = decided.find(call_id);
    if (d == decided.end()) {
      out.needs_operator.push_back(
          InDoubtCall{c->activation_id, call_id, c->name, c->args_json, c->args_digest, c->effect});
      continue;
    }
    const CallResolution& r = *d->second;
    if (r.kind == ResolutionKind::kRetry) {
      plan.reruns.push_back(call_id);
      continue;
    }
    RecordedAnswer a;
    a.call_id = call_id;
    a.clock_us = r.at_unix_us;
    if (r.kind == ResolutionKind::kResult) {
      a.ok = true;
      a.value_json = r.value_json.empty() ? "null" : r.value_json;
    } else {
      const auto e = ParseErrorJson(r.value_json);
      a.error_name = e ? e->name : "HostError";
      a.error_message = e ? e->message : r.value_json;
    }
    answers[call_id] = a;
    resolved.push_back(call_id);
  }

  // The order the worker got the answers: each activation's own deliveries at the positions it
  // recorded, the answers it replayed from the record before it (in their order) in between. A
  // retry attempt's worker replayed only the calls before its retry point.
  std::vector<int64_t> order;
  for (size_t i = 0; i < activations.size(); ++i) {
    if (const int64_t from = activations[i].retry_from_call; from > 0)
      order.erase(std::remove_if(order.begin(), order.end(), [from](int64_t id) { return id >= from; }), order.end());
    std::vector<std::pair<int64_t, int64_t>> own;
    for (const CallRow* c : by_activation[i])
      if (c->answer_seq && c->name != kReplayLogCallName) own.push_back({*c->answer_seq, c->call_id});
    if (own.empty()) continue;
    std::sort(own.begin(), own.end());
    std::vector<int64_t> merged;
    size_t from_before = 0;
    for (const auto& [seq, call_id] : own) {
      while (static_cast<int64_t>(merged.size()) + 1 < seq && from_before < order.size())
        merged.push_back(order[from_before++]);
      merged.push_back(call_id);
    }
    while (from_before < order.size()) merged.push_back(order[from_before++]);
    order = std::move(merged);
  }
  for (int64_t id : undelivered) order.push_back(id);
  for (int64_t id : resolved) order.push_back(id);

  if (retry && out.needs_operator.empty()) {
    // The attempt replays the record before its retry point; from there on every call runs again.
    const int64_t from = RetryPoint(newest, answers, plan.last_call_id);
    out.retry_from_call = from;
    plan.calls.erase(plan.calls.lower_bound(from), plan.calls.end());
    plan.immediate.erase(plan.immediate.lower_bound(from), plan.immediate.end());
    plan.reruns.erase(std::remove_if(plan.reruns.begin(), plan.reruns.end(), [from](int64_t id) { return id >= from; }),
                      plan.reruns.end());
    order.erase(std::remove_if(order.begin(), order.end(), [from](int64_t id) { return id >= from; }), order.end());
    plan.last_call_id = plan.calls.empty() ? 0 : plan.calls.rbegin()->first;
  }

  std::set<int64_t> placed;
  for (int64_t id : order) {
    if (!answers.count(id) || !placed.insert(id).second) continue;
    RecordedAnswer& a = answers[id];
    plan.bytes += a.value_json.size() + a.error_name.size() + a.error_message.size() + 32;
    plan.answers.push_back(std::move(a));
  }
  return out;
}

Replayer::Replayer(ReplayPlan plan, bool strict) : plan_(std::move(plan)), strict_(strict) {
  for (const RecordedAnswer& a : plan_.answers) issued_[a.call_id] = false;
}

Replayer::Verdict Replayer::OnCall(int64_t call_id, std::string_view name, std::string_view args_digest) {
  // A recorded call the script skipped is a record it no longer reaches.
  for (auto it = plan_.calls.upper_bound(last_issued_); it != plan_.calls.end() && it->first < call_id; ++it) {
    return {Step::kDiverged, "call " + std::to_string(it->first) + ": the run's record has " + it->second.name +
                                 " (arguments " + it->second.args_digest + "), which the script no longer makes (its "
                                 "next call is number " + std::to_string(call_id) + ", " + std::string(name) + ")"};
  }
  last_issued_ = std::max(last_issued_, call_id);
  auto it = plan_.calls.find(call_id);
  if (it == plan_.calls.end()) return {strict_ ? Step::kPastRecord : Step::kLive, ""};
  const RecordedCall& recorded = it->second;
  if (recorded.name != name || (!recorded.args_digest.empty() && recorded.args_digest != args_digest)) {
    return {Step::kDiverged, "call " + std::to_string(call_id) + ": the script now calls " + std::string(name) +
                                 " (arguments " + std::string(args_digest) + ") where the run's record has " +
                                 recorded.name + " (arguments " +
                                 (recorded.args_digest.empty() ? std::string("not recorded") : recorded.args_digest) + ")"};
  }
  if (auto note = plan_.immediate.find(call_id); note != plan_.immediate.end()) {
    ready_notes_.push_back(std::move(note->second));
    plan_.immediate.erase(note);
    return {Step::kFromRecord, ""};
  }
  auto answered = issued_.find(call_id);
  if (answered == issued_.end()) return {strict_ ? Step::kPastRecord : Step::kLive, ""};  // in doubt: it runs again
  answered->second = true;
  return {Step::kFromRecord, ""};
}

std::vector<RecordedAnswer> Replayer::TakeDeliverable() {
  std::vector<RecordedAnswer> out = std::move(ready_notes_);
  ready_notes_.clear();
  while (next_answer_ < plan_.answers.size() && issued_[plan_.answers[next_answer_].call_id]) {
    out.push_back(plan_.answers[next_answer_]);
    plan_.answers[next_answer_].value_json.clear();  // delivered: its text is not needed again
    ++next_answer_;
  }
  return out;
}

std::optional<std::string> Replayer::Leftover() const {
  for (auto it = plan_.calls.upper_bound(last_issued_); it != plan_.calls.end(); ++it) {
    if (std::find(plan_.reruns.begin(), plan_.reruns.end(), it->first) != plan_.reruns.end()) continue;
    return "call " + std::to_string(it->first) + ": the run's record has " + it->second.name + " (arguments " +
           it->second.args_digest + "), which the script no longer reaches: it ended after call " +
           std::to_string(last_issued_);
  }
  if (next_answer_ < plan_.answers.size()) {
    const int64_t id = plan_.answers[next_answer_].call_id;
    auto c = plan_.calls.find(id);
    return "call " + std::to_string(id) + ": the run's record answered " +
           (c == plan_.calls.end() ? std::string("it") : c->second.name) +
           " in an order the script no longer follows (its answer was never delivered)";
  }
  return std::nullopt;
}

std::string Replayer::Waiting() const {
  if (next_answer_ >= plan_.answers.size()) return "";
  const int64_t id = plan_.answers[next_answer_].call_id;
  auto c = plan_.calls.find(id);
  return "the replay was waiting for the script to make call " + std::to_string(id) + " (" +
         (c == plan_.calls.end() ? std::string("?") : c->second.name) +
         "), whose recorded answer comes next: the script has probably diverged from its record";
}

}  // namespace basal
