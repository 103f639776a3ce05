#include "parent/call_gate.h"

#include <exception>

namespace basal {

int64_t NowUnixUs();

struct HostCallReply::Slot {
  std::shared_ptr<ReplyLink> link;
  ActivationId activation_id = 0;
  int64_t call_id = 0;
  std::atomic<bool> answered{false};
  // True while the gate is inside the handler: a reply dropped then (or destroyed as the handler
  // throws) is answered by the gate after the handler returns, with what really happened.
  std::atomic<bool> dispatching{true};
};

namespace {

std::string ErrorJson(std::string_view name, std::string_view message) {
  return protocol::DumpJson(Json{{"name", name}, {"message", message}});
}

// Delivers an answer to the gate: directly on the loop thread, else posted to it.
void Deliver(const std::shared_ptr<HostCallReply::Slot>& slot, bool ok, Json value, std::string name,
             std::string message) {
  if (!slot || slot->answered.exchange(true)) return;
  CallGate* gate = nullptr;
  {
    std::lock_guard<std::mutex> lock(slot->link->mu);
    if (slot->link->gate == nullptr) return;
    if (!slot->link->loop->OnLoopThread()) {
      slot->link->loop->Post([link = slot->link, a = slot->activation_id, c = slot->call_id, ok, value = std::move(value),
                              name = std::move(name), message = std::move(message)]() mutable {
        if (link->gate) link->gate->OnAnswer(a, c, ok, std::move(value), std::move(name), std::move(message));
      });
      return;
    }
    gate = slot->link->gate;
  }
  // On the loop thread the module cannot go away underneath us.
  gate->OnAnswer(slot->activation_id, slot->call_id, ok, std::move(value), std::move(name), std::move(message));
}

}  // namespace

void HostCallReply::Ok(Json value) { Deliver(slot_, true, std::move(value), "", ""); }
void HostCallReply::Error(std::string name, std::string message) {
  Deliver(slot_, false, nullptr, std::move(name), std::move(message));
}
bool HostCallReply::answered() const { return !slot_ || slot_->answered.load(); }
HostCallReply::~HostCallReply() {
  if (slot_ && !slot_->answered.load() && !slot_->dispatching.load())
    Deliver(slot_, false, nullptr, "HostError", "the host call's handler dropped its reply without answering");
}
HostCallReply& HostCallReply::operator=(HostCallReply&& other) noexcept {
  if (this != &other) {
    HostCallReply old(std::move(*this));  // answers the call it held, if it never did
    slot_ = std::move(other.slot_);
  }
  return *this;
}

CallGate::CallGate(HostCallRegistry& registry, JournalStore& journal, std::string journal_id, EventLoop& loop,
                   CallGateHooks hooks)
    : registry_(registry), journal_(journal), journal_id_(std::move(journal_id)), hooks_(std::move(hooks)),
      link_(std::make_shared<ReplyLink>()) {
  link_->gate = this;
  link_->loop = &loop;
}

CallGate::~CallGate() {
  std::lock_guard<std::mutex> lock(link_->mu);
  link_->gate = nullptr;
}

void CallGate::Record(const CallRecord& record) {
  if (auto r = journal_.RecordCall(record); !r) hooks_.journal_failed(r.error().message);
}
void CallGate::Update(const CallUpdate& update) {
  if (auto r = journal_.UpdateCall(update); !r) hooks_.journal_failed(r.error().message);
}

Decision CallGate::Decide(const Flow& flow, const protocol::Call& call, const HostCallSpec* spec) {
  if (!spec) return {Verdict::kDeny, "unknown host call", "no host call named \"" + call.name + "\""};
  try {
    if (auto denied = flow.manifest.Authorize(*spec, call.args))
      return {Verdict::kDeny, flow.manifest.grants().count(spec->name) ? "grants." + spec->name : "no grant", *denied};
  } catch (const std::exception& e) {  // fail closed
    return {Verdict::kDeny, "grants." + spec->name, "the authorization check of \"" + call.name + "\" threw: " + e.what()};
  } catch (...) {
    return {Verdict::kDeny, "grants." + spec->name, "the authorization check of \"" + call.name + "\" threw"};
  }
  if (!spec->needs_grant && !flow.manifest.grants().count(spec->name))
    return {Verdict::kAllow, "needs no grant", "needs no grant"};
  return {Verdict::kAllow, "grants." + spec->name, "granted by manifest"};
}

void CallGate::OnCall(ActivationId activation, const Flow& flow, protocol::Call call) {
  const HostCallSpec* spec = registry_.Find(call.name);
  Decision decision = Decide(flow, call, spec);
  const int64_t start = NowUnixUs();
  std::string args_journal;
  if (spec && spec->journal_args) {
    try {
      args_journal = protocol::DumpJson(spec->journal_args(call.args));
    } catch (...) {
      args_journal = ErrorJson("HostError", "the journal view of the arguments threw; arguments not journaled");
    }
  } else {
    args_journal = protocol::DumpJson(call.args);
  }
  if (!decision.allowed()) {
    hooks_.count_denied();
    const std::string& why = decision.reason;
    CallRecord rec{activation, call.id, call.name, std::move(args_journal), decision,
                   spec ? spec->effect : Effect::kExternal, CallState::kAnswered, "", ErrorJson("PermissionDenied", why),
                   start, NowUnixUs()};
    Record(rec);
    hooks_.send(activation, protocol::BuildResultError(activation, call.id, "PermissionDenied", why));
    return;
  }
  const Key key{activation, call.id};
  InFlight& f = calls_[key];
  f.spec = spec;
  f.flow = flow.name;
  f.decision = std::move(decision);
  f.start_unix_us = start;
  f.args = std::move(call.args);
  if (spec->effect == Effect::kPure) {
    f.args_journal = std::move(args_journal);
    Dispatch(key, f);
    return;
  }
  Record({activation, call.id, call.name, std::move(args_journal), f.decision, spec->effect, CallState::kStarted, "", "",
          start, std::nullopt});
  f.recorded = true;
  f.stage = Stage::kAwaitingCommit;
  awaiting_commit_.push_back(key);
}

void CallGate::RunStarted() {
  auto waiting = std::move(awaiting_commit_);
  awaiting_commit_.clear();
  for (const Key& key : waiting) {
    auto it = calls_.find(key);
    if (it == calls_.end() || it->second.stage != Stage::kAwaitingCommit) continue;
    it->second.stage = Stage::kRunning;
    Dispatch(key, it->second);
  }
}

std::vector<ActivationId> CallGate::DropStartedWaiting() {
  std::vector<ActivationId> out;
  for (const Key& key : awaiting_commit_) {
    auto it = calls_.find(key);
    if (it == calls_.end()) continue;
    out.push_back(key.first);
    calls_.erase(it);  // its record was rolled back with the batch
  }
  awaiting_commit_.clear();
  return out;
}

void CallGate::Dispatch(const Key& key, InFlight& f) {
  auto slot = std::make_shared<HostCallReply::Slot>();
  slot->link = link_;
  slot->activation_id = key.first;
  slot->call_id = key.second;
  const HostCallSpec& spec = *f.spec;
  HostCallContext ctx{key.first, key.second, f.flow,
                      journal_id_ + ":" + std::to_string(key.first) + ":" + std::to_string(key.second)};
  Json args = std::move(f.args);
  f.args = nullptr;
  // `f` may be gone once the handler returns (it may answer at once): use only `key` after this.
  std::string thrown;
  try {
    spec.handler(ctx, args, HostCallReply(slot));
  } catch (const std::exception& e) {
    thrown = e.what();
  } catch (...) {
    thrown = "an exception that is not a std::exception";
  }
  slot->dispatching = false;
  if (!thrown.empty()) {
    hooks_.event({ModuleEvent::Kind::kHandlerThrew,
                  "host call \"" + spec.name + "\" threw: " + thrown, key.first, 0});
    HostCallReply(slot).Error("HostError", "host call \"" + spec.name + "\" failed: its handler threw: " + thrown);
  } else if (slot.use_count() == 1) {  // nobody kept the reply
    HostCallReply(slot).Error("HostError", "the host call's handler dropped its reply without answering");
  }
}

std::string CallGate::ResultForJournal(const HostCallSpec& spec, const Json& value) {
  if (!spec.journal_result) return protocol::DumpJson(value);
  try {
    return protocol::DumpJson(spec.journal_result(value));
  } catch (...) {
    return protocol::DumpJson(Json{{"basal", "the journal view of the result threw; result not journaled"}});
  }
}

void CallGate::OnAnswer(ActivationId activation, int64_t call_id, bool ok, Json value, std::string name,
                        std::string message) {
  auto it = calls_.find({activation, call_id});
  if (it == calls_.end()) return;
  InFlight f = std::move(it->second);
  calls_.erase(it);
  const HostCallSpec& spec = *f.spec;
  std::string value_json;
  if (ok) {
    value_json = protocol::DumpJson(value);
    std::string why;
    if (!protocol::FitsInMessage(value_json, why)) {
      ok = false;
      name = "HostError";
      message = "the result of host call \"" + spec.name + "\" cannot be sent to the flow: " + why;
      hooks_.event({ModuleEvent::Kind::kResultTooLarge, message, activation, 0});
    }
  }
  const std::string result_journal = ok ? ResultForJournal(spec, value) : "";
  const std::string error_journal = ok ? "" : ErrorJson(name, message);  // an embedder's text: any bytes
  const bool late = f.stage == Stage::kAbandoned;
  const CallState state = late ? CallState::kAbandoned : CallState::kAnswered;
  if (f.recorded) {
    Update({activation, call_id, state, result_journal, error_journal, NowUnixUs()});
  } else {
    Record({activation, call_id, spec.name, std::move(f.args_journal), f.decision, spec.effect, state, result_journal,
            error_journal, f.start_unix_us, NowUnixUs()});
  }
  if (late) return;  // the activation is over: nobody to answer
  hooks_.send(activation, ok ? protocol::BuildResultOk(activation, call_id, value_json)
                             : protocol::BuildResultError(activation, call_id, name, message));
}

void CallGate::EndCalls(ActivationId activation) {
  const std::string ended = ErrorJson("ActivationEnded", "the activation ended before this call was answered");
  for (auto it = calls_.lower_bound({activation, INT64_MIN}); it != calls_.end() && it->first.first == activation;) {
    InFlight& f = it->second;
    const int64_t call_id = it->first.second;
    if (f.stage == Stage::kAwaitingCommit) {
      // Its handler never ran and never will: the record ends abandoned, nothing waits for it.
      Update({activation, call_id, CallState::kAbandoned, "", ended, NowUnixUs()});
      it = calls_.erase(it);
      continue;
    }
    if (f.recorded) {
      Update({activation, call_id, CallState::kAbandoned, "", ended, std::nullopt});
    } else {
      Record({activation, call_id, f.spec->name, std::move(f.args_journal), f.decision, f.spec->effect,
              CallState::kAbandoned, "", ended, f.start_unix_us, std::nullopt});
      f.args_journal.clear();
      f.recorded = true;
    }
    f.stage = Stage::kAbandoned;  // kept until the handler answers or drops its reply
    ++it;
  }
}

}  // namespace basal
