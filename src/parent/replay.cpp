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
constexpr std::string_view kLogCallName = "log";

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
std::optional<RecordedAnswer> AnswerOf(const CallRow& c) {
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
      return !c.end_unix_us.has_value();
    case CallState::kDecided:
    case CallState::kAnswered:
      return false;
  }
  return true;
}

}  // namespace

std::string ArgsDigest(const Json& args) { return Sha256Hex(protocol::DumpJson(args)); }

RunAnalysis AnalyzeRun(const std::vector<ActivationRow>& activations, const std::vector<CallRow>& calls,
                       const std::vector<CallResolution>& resolutions,
                       const std::function<bool(std::string_view name)>& store_local) {
  RunAnalysis out;
  ReplayPlan& plan = out.plan;
  // The newest record of each call id (a resumed activation's rerun supersedes an older record).
  std::map<int64_t, const CallRow*> newest;
  std::map<int64_t, size_t> activation_index;
  for (size_t i = 0; i < activations.size(); ++i) activation_index[activations[i].id] = i;
  for (const CallRow& c : calls) {
    auto it = newest.find(c.call_id);
    if (it == newest.end() || activation_index[c.activation_id] >= activation_index[it->second->activation_id])
      newest[c.call_id] = &c;
  }
  std::map<int64_t, const CallResolution*> decided;
  for (const CallResolution& r : resolutions) decided[r.call_id] = &r;

  std::map<int64_t, RecordedAnswer> answers;       // by call id
  std::map<size_t, std::vector<std::pair<int64_t, int64_t>>> delivered;  // activation index -> (seq, call id)
  std::vector<int64_t> undelivered;                // answered but never delivered (late answers)
  std::vector<int64_t> resolved;                   // answers an operator gave
  for (const auto& [call_id, c] : newest) {
    plan.calls[call_id] = RecordedCall{c->name, c->args_digest};
    plan.last_call_id = std::max(plan.last_call_id, call_id);
    if (auto a = AnswerOf(*c)) {
      if (c->name == kLogCallName) {  // a notification: answered as soon as it is made, out of order
        a->notification = true;
        plan.immediate[call_id] = *a;
        continue;
      }
      answers[call_id] = *a;
      if (c->answer_seq) {
        delivered[activation_index[c->activation_id]].push_back({*c->answer_seq, call_id});
      } else {
        undelivered.push_back(call_id);
      }
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
  // recorded, the answers it replayed from the record before it (in their order) in between.
  std::vector<int64_t> order;
  for (size_t i = 0; i < activations.size(); ++i) {
    auto own = delivered.find(i);
    if (own == delivered.end()) continue;
    std::sort(own->second.begin(), own->second.end());
    std::vector<int64_t> merged;
    size_t from_before = 0;
    for (const auto& [seq, call_id] : own->second) {
      while (static_cast<int64_t>(merged.size()) + 1 < seq && from_before < order.size())
        merged.push_back(order[from_before++]);
      merged.push_back(call_id);
    }
    while (from_before < order.size()) merged.push_back(order[from_before++]);
    order = std::move(merged);
  }
  for (int64_t id : undelivered) order.push_back(id);
  for (int64_t id : resolved) order.push_back(id);
  std::set<int64_t> placed;
  for (int64_t id : order) {
    if (!placed.insert(id).second) continue;
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
