#include "parent/call_gate.h"

#include <algorithm>
#include <charconv>
#include <exception>

#include "parent/journal_value.h"

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

// What a call record costs the journal: its text columns and an allowance for the rest of the row
// (numbers, enum names, index entries).
constexpr uint64_t kRecordOverheadBytes = 128;
uint64_t RecordBytes(std::string_view name, std::string_view args, const Decision& d) {
  return kRecordOverheadBytes + name.size() + args.size() + d.rule.size() + d.reason.size();
}

// The built-in log call (host_calls/log.h): past its budget a line is dropped, not fatal.
constexpr std::string_view kLogCallName = "log";

// Delivers an answer to the gate: directly on the loop thread, else posted to it. `text`: an
// answer already serialized (OkText), `value` then null.
void Deliver(const std::shared_ptr<HostCallReply::Slot>& slot, bool ok, Json value, std::optional<std::string> text,
             std::string name, std::string message) {
  if (!slot || slot->answered.exchange(true)) return;
  CallGate* gate = nullptr;
  {
    std::lock_guard<std::mutex> lock(slot->link->mu);
    if (slot->link->gate == nullptr) return;
    if (!slot->link->loop->OnLoopThread()) {
      slot->link->loop->Post([link = slot->link, a = slot->activation_id, c = slot->call_id, ok, value = std::move(value),
                              text = std::move(text), name = std::move(name), message = std::move(message)]() mutable {
        if (link->gate)
          link->gate->OnAnswer(a, c, ok, std::move(value), std::move(text), std::move(name), std::move(message));
      });
      return;
    }
    gate = slot->link->gate;
  }
  // On the loop thread the module cannot go away underneath us.
  gate->OnAnswer(slot->activation_id, slot->call_id, ok, std::move(value), std::move(text), std::move(name),
                 std::move(message));
}

}  // namespace

void HostCallReply::Ok(Json value) { Deliver(slot_, true, std::move(value), std::nullopt, "", ""); }
void HostCallReply::OkText(std::string value_json) {
  Deliver(slot_, true, nullptr, std::move(value_json), "", "");
}
void HostCallReply::Error(std::string name, std::string message) {
  Deliver(slot_, false, nullptr, std::nullopt, std::move(name), std::move(message));
}
bool HostCallReply::answered() const { return !slot_ || slot_->answered.load(); }
HostCallReply::~HostCallReply() {
  if (slot_ && !slot_->answered.load() && !slot_->dispatching.load())
    Deliver(slot_, false, nullptr, std::nullopt, "HostError",
            "the host call's handler dropped its reply without answering");
}
HostCallReply& HostCallReply::operator=(HostCallReply&& other) noexcept {
  if (this != &other) {
    HostCallReply old(std::move(*this));  // answers the call it held, if it never did
    slot_ = std::move(other.slot_);
  }
  return *this;
}

CallGate::CallGate(HostCallRegistry& registry, JournalStore& journal, std::string journal_id, EventLoop& loop,
                   CallGateHooks hooks, CallGateLimits limits)
    : registry_(registry), journal_(journal), journal_id_(std::move(journal_id)), hooks_(std::move(hooks)),
      limits_(limits), link_(std::make_shared<ReplyLink>()) {
  link_->gate = this;
  link_->loop = &loop;
}

CallGate::~CallGate() {
  std::lock_guard<std::mutex> lock(link_->mu);
  link_->gate = nullptr;
}

void CallGate::Record(const CallRecord& record, const Flow& flow, const HostCallSpec* spec) {
  if (auto r = journal_.RecordCall(record); !r) hooks_.journal_failed(r.error().message);
  // A flow may call any name: only names the registry or the manifest bounds are counted by name.
  if (hooks_.count_call) {
    const bool member = spec && spec->name != record.name;  // below a family ("mcp.*")
    if (!spec) {
      hooks_.count_call("unknown", record.decision.verdict, false);
    } else if (member && !record.decision.allowed()) {
      hooks_.count_call(spec->name, record.decision.verdict, false);
    } else {
      hooks_.count_call(record.name, record.decision.verdict, member);
    }
  }
  if (hooks_.recorded) hooks_.recorded(record.activation_id, flow, record.call_id, record.name, record.decision, record.state);
}
void CallGate::Update(const CallUpdate& update, const InFlight& call) {
  if (auto r = journal_.UpdateCall(update); !r) hooks_.journal_failed(r.error().message);
  if (hooks_.recorded) hooks_.recorded(update.activation_id, *call.flow, update.call_id, call.name, call.decision, update.state);
}

void CallGate::BeginDurable(ActivationId activation, RunId run, int64_t start_clock_us,
                            std::optional<ReplayPlan> replay, bool strict) {
  Durable& d = durable_[activation];
  d.run = run;
  d.clock_us = start_clock_us;
  d.delivered = 0;
  if (replay) {
    // The record's answers count in the run's journal budget: an activation that resumes a run
    // journals only what the budget has left after the activations before it.
    usage_[activation].journal_bytes += replay->bytes;
    d.replay = std::make_unique<Replayer>(std::move(*replay), strict);
  }
}

CallGate::Durable* CallGate::DurableOf(ActivationId activation) {
  auto it = durable_.find(activation);
  return it == durable_.end() ? nullptr : &it->second;
}

std::optional<std::string> CallGate::ReplayLeftover(ActivationId activation) const {
  auto it = durable_.find(activation);
  if (it == durable_.end() || !it->second.replay) return std::nullopt;
  return it->second.replay->Leftover();
}

std::string CallGate::ReplayWaiting(ActivationId activation) const {
  auto it = durable_.find(activation);
  if (it == durable_.end() || !it->second.replay) return "";
  return it->second.replay->Waiting();
}

CallGate::Stamp CallGate::StampAnswer(ActivationId activation, bool notification, int64_t end_unix_us) {
  Durable* d = DurableOf(activation);
  if (!d) return {};
  // The clock never runs backwards for the script, whatever the host's clock does.
  if (!notification) d->clock_us = std::max(d->clock_us, end_unix_us);
  return Stamp{d->clock_us, notification ? std::nullopt : std::optional<int64_t>(++d->delivered)};
}

void CallGate::DeliverReplayed(ActivationId activation, Durable& d) {
  for (RecordedAnswer& a : d.replay->TakeDeliverable()) {
    // A notification's answer (log) takes no place in the order and moves no clock.
    if (!a.notification) {
      d.clock_us = std::max(d.clock_us, a.clock_us);
      ++d.delivered;
    }
    hooks_.send(activation, a.ok ? protocol::BuildResultOk(activation, a.call_id, a.value_json, d.clock_us)
                                 : protocol::BuildResultError(activation, a.call_id, a.error_name, a.error_message,
                                                              d.clock_us));
  }
}

std::string CallGate::IdempotencyKey(ActivationId activation, int64_t call_id) {
  // A durable run's key names the run: every activation that resumes it sends the same key.
  const Durable* d = DurableOf(activation);
  char digits[2][24];
  const auto a = std::to_chars(digits[0], digits[0] + sizeof digits[0], d ? d->run : activation);
  const auto c = std::to_chars(digits[1], digits[1] + sizeof digits[1], call_id);
  std::string key;  // built in one allocation: it is made for every call
  key.reserve(journal_id_.size() + 8 + static_cast<size_t>(a.ptr - digits[0]) + static_cast<size_t>(c.ptr - digits[1]));
  key.append(journal_id_).append(d ? ":run:" : ":").append(digits[0], a.ptr).append(":").append(digits[1], c.ptr);
  return key;
}

Effect CallGate::EffectOf(const HostCallSpec& spec, const protocol::Call& call, const Json* grant) {
  if (!spec.effect_of) return spec.effect;
  try {
    return spec.effect_of(grant, call.args);
  } catch (...) {
    return Effect::kExternal;  // the safe assumption
  }
}

Decision CallGate::Decide(const Flow& flow, const protocol::Call& call, const HostCallSpec* spec,
                          const GrantEntry* grant) {
  if (!spec) return {Verdict::kDeny, "unknown host call", "no host call named \"" + call.name + "\""};
  // The grant that admits this name: its own, or a family's wildcard ("mcp.fs.*").
  std::string rule = grant ? "grants." + grant->first : std::string("no grant");
  try {
    if (auto denied = flow.manifest.AuthorizeWith(*spec, call.name, grant ? &grant->second : nullptr, call.args))
      return {Verdict::kDeny, std::move(rule), std::move(*denied)};
  } catch (const std::exception& e) {  // fail closed
    return {Verdict::kDeny, "grants." + call.name, "the authorization check of \"" + call.name + "\" threw: " + e.what()};
  } catch (...) {
    return {Verdict::kDeny, "grants." + call.name, "the authorization check of \"" + call.name + "\" threw"};
  }
  if (!spec->needs_grant && !grant) return {Verdict::kAllow, "needs no grant", "needs no grant"};
  return {Verdict::kAllow, std::move(rule), "granted by manifest"};
}

bool CallGate::Charge(CallUsage& usage, const Flow& flow, uint64_t bytes) {
  usage.journal_bytes += bytes;
  return usage.journal_bytes <= flow.manifest.budgets().journal_bytes;
}

void CallGate::OverBudget(ActivationId activation, CallUsage& usage, Budget budget, std::string message) {
  if (usage.over) return;
  usage.over = true;
  hooks_.over_budget(activation, budget, std::move(message));
}

void CallGate::OnCall(ActivationId activation, const FlowRef& flow, protocol::Call call) {
  CallUsage& usage = usage_[activation];
  if (usage.over) return;  // the activation is ending for a budget: nothing more is journaled or answered
  Durable* durable = DurableOf(activation);
  std::string digest;
  if (durable) {
    digest = ArgsDigest(call.args);
    if (durable->replay) {
      const Replayer::Verdict verdict = durable->replay->OnCall(call.id, call.name, digest);
      if (verdict.step == Replayer::Step::kDiverged || verdict.step == Replayer::Step::kPastRecord) {
        usage.over = true;  // nothing more of it is journaled or answered
        const bool past = verdict.step == Replayer::Step::kPastRecord;
        hooks_.diverged(activation,
                        past ? "call " + std::to_string(call.id) + " (" + call.name + ") is past the run's record"
                             : verdict.divergence,
                        past);
        return;
      }
      if (verdict.step == Replayer::Step::kFromRecord) {
        DeliverReplayed(activation, *durable);  // not journaled again, not run again
        return;
      }
    }
  }
  const Budgets& budgets = flow->manifest.budgets();
  const HostCallSpec* spec = registry_.Find(call.name);
  const GrantEntry* grant = flow->manifest.GrantEntryFor(call.name);
  Decision decision = Decide(*flow, call, spec, grant);
  const int64_t start = NowUnixUs();
  // What the arguments weigh: the frame they came in (the journal's view may be a digest).
  const uint64_t args_bytes = call.frame_bytes;
  // An admitted call of an unjournaled spec (timer.sleep) leaves no record and costs no journal
  // bytes; it still counts in calls in flight below. In a durable run every call is journaled:
  // the order of its timers' answers is part of what a resume replays.
  const bool journaled = !(decision.allowed() && !spec->journaled) || durable != nullptr;
  std::string args_journal;
  if (!journaled) {
    // nothing to journal
  } else if (spec && spec->journal_args) {
    try {
      args_journal = protocol::DumpJson(spec->journal_args(call.args));
    } catch (...) {
      args_journal = ErrorJson("HostError", "the journal view of the arguments threw; arguments not journaled");
    }
  } else {
    args_journal = protocol::DumpJson(call.args);
  }
  args_journal = CapForJournal(std::move(args_journal), limits_.journal_value_max_bytes);
  const uint64_t record_bytes = journaled ? RecordBytes(call.name, args_journal, decision) : 0;

  if (decision.allowed() && spec->name == kLogCallName) {
    // A log line past the log or journal budget is answered (the script goes on) and dropped.
    if (usage.log_bytes + args_bytes > budgets.log_bytes ||
        usage.journal_bytes + record_bytes + 4 > budgets.journal_bytes) {
      ++usage.logs_dropped;
      hooks_.count_log_dropped();
      hooks_.send(activation, protocol::BuildResultOk(activation, call.id, "null", StampAnswer(activation, true, 0).clock_us));
      return;
    }
    usage.log_bytes += args_bytes;
  }
  if (journaled && !Charge(usage, *flow, record_bytes)) {
    // This call is journaled with its decision and a digest of its arguments only, then the
    // activation ends.
    const std::string budget_text = "the activation's journal budget of " +
                                    std::to_string(budgets.journal_bytes >> 10) + " KiB (budgets.journal_kb)";
    const std::string why = budget_text + " is spent";
    CallRecord rec{activation, call.id, call.name, protocol::DumpJson(DigestJson(args_journal)),
                   Decision{Verdict::kQuotaExceeded, "budgets.journal_kb", why},
                   spec ? spec->effect : Effect::kExternal, CallState::kAnswered, "", ErrorJson("BudgetExhausted", why),
                   start, NowUnixUs(), digest};
    Record(rec, *flow, spec);
    return OverBudget(activation, usage, Budget::kJournal,
                      "journal budget exhausted: host call \"" + call.name + "\" would pass " + budget_text +
                          "; raise it or make fewer or smaller calls (the journal keeps every call's arguments and "
                          "results)");
  }
  if (!decision.allowed()) {
    hooks_.count_denied();
    const std::string& why = decision.reason;
    const Stamp stamp = StampAnswer(activation, false, NowUnixUs());
    CallRecord rec{activation, call.id, call.name, std::move(args_journal), decision,
                   spec ? spec->effect : Effect::kExternal, CallState::kAnswered, "", ErrorJson("PermissionDenied", why),
                   start, stamp.clock_us.value_or(NowUnixUs()), digest, stamp.seq};
    Record(rec, *flow, spec);
    hooks_.send(activation, protocol::BuildResultError(activation, call.id, "PermissionDenied", why, stamp.clock_us));
    return;
  }
  if (usage.in_flight + 1 > budgets.calls_in_flight) {
    return OverBudget(activation, usage, Budget::kCallsInFlight,
                      "calls_in_flight budget exhausted: host call \"" + call.name + "\" would be call number " +
                          std::to_string(usage.in_flight + 1) + " waiting for an answer; the budget is " +
                          std::to_string(budgets.calls_in_flight) +
                          " (budgets.calls_in_flight): await calls in smaller groups or raise it");
  }
  if (usage.in_flight_bytes + args_bytes > limits_.in_flight_max_bytes) {
    return OverBudget(activation, usage, Budget::kCallsInFlight,
                      "calls_in_flight budget exhausted: host call \"" + call.name + "\" would bring the arguments of " +
                          "calls waiting for an answer to " + std::to_string(usage.in_flight_bytes + args_bytes) +
                          " bytes; the parent holds at most " + std::to_string(limits_.in_flight_max_bytes) +
                          " per activation: await calls in smaller groups");
  }
  ++usage.in_flight;
  usage.in_flight_bytes += args_bytes;
  const Key key{activation, call.id};
  InFlight& f = calls_[key];
  f.spec = spec;
  f.name = call.name;
  f.flow = flow;
  f.decision = std::move(decision);
  f.start_unix_us = start;
  f.grant = grant ? &grant->second : nullptr;
  f.effect = EffectOf(*spec, call, f.grant);  // before the arguments move
  f.args = std::move(call.args);
  f.args_bytes = args_bytes;
  f.journaled = journaled;
  f.args_digest = std::move(digest);
  // A pure call has no effect to record first; a store-local one commits its effect with its
  // answer (HostCallSpec::effect_in_store): neither waits for a `started` commit.
  if (f.effect == Effect::kPure || spec->effect_in_store) {
    f.args_journal = std::move(args_journal);
    DispatchOrWait(key, f);
    return;
  }
  Record({activation, call.id, call.name, std::move(args_journal), f.decision, f.effect, CallState::kStarted, "", "",
          start, std::nullopt, f.args_digest},
         *flow, spec);
  f.recorded = true;
  f.stage = Stage::kAwaitingCommit;
  awaiting_commit_.push_back(key);
}

void CallGate::RunStarted(size_t count) {
  count = std::min(count, awaiting_commit_.size());
  std::vector<Key> waiting(awaiting_commit_.begin(), awaiting_commit_.begin() + static_cast<std::ptrdiff_t>(count));
  awaiting_commit_.erase(awaiting_commit_.begin(), awaiting_commit_.begin() + static_cast<std::ptrdiff_t>(count));
  for (const Key& key : waiting) {
    auto it = calls_.find(key);
    if (it == calls_.end() || it->second.stage != Stage::kAwaitingCommit) continue;
    DispatchOrWait(key, it->second);
  }
}

void CallGate::DispatchOrWait(const Key& key, InFlight& f) {
  // Calls that already wait go first: answers leave in the order the handlers give them.
  auto waiting = waiting_for_worker_.find(key.first);
  if ((waiting == waiting_for_worker_.end() || waiting->second.empty()) &&
      (!hooks_.worker_has_room || hooks_.worker_has_room(key.first))) {
    f.stage = Stage::kRunning;
    return Dispatch(key, f);
  }
  f.stage = Stage::kWaitingForWorker;
  waiting_for_worker_[key.first].push_back(key.second);
}

void CallGate::WorkerDrained(ActivationId activation) {
  for (;;) {
    auto waiting = waiting_for_worker_.find(activation);
    if (waiting == waiting_for_worker_.end()) return;
    if (waiting->second.empty()) {
      waiting_for_worker_.erase(waiting);
      return;
    }
    if (hooks_.worker_has_room && !hooks_.worker_has_room(activation)) return;
    const Key key{activation, waiting->second.front()};
    waiting->second.pop_front();
    auto it = calls_.find(key);
    if (it == calls_.end() || it->second.stage != Stage::kWaitingForWorker) continue;
    it->second.stage = Stage::kRunning;
    Dispatch(key, it->second);  // may end the activation's calls (EndCalls): looked up again above
  }
}

std::vector<ActivationId> CallGate::DropStartedWaiting() {
  std::vector<ActivationId> out;
  for (const Key& key : awaiting_commit_) {
    auto it = calls_.find(key);
    if (it == calls_.end()) continue;
    out.push_back(key.first);
    if (auto u = usage_.find(key.first); u != usage_.end()) {
      --u->second.in_flight;
      u->second.in_flight_bytes -= it->second.args_bytes;
    }
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
  const Durable* durable = DurableOf(key.first);
  HostCallContext ctx{key.first, key.second, f.flow->name, IdempotencyKey(key.first, key.second),
                      f.grant, f.name, durable ? durable->clock_us : 0};
  // A store-local handler's write joins this batch: its answer must join it too.
  const bool must_answer_now = spec.effect_in_store;
  const FlowRef flow = f.flow;  // the grant stays valid while the handler runs
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
                  "host call \"" + ctx.name + "\" threw: " + thrown, key.first, 0});
    HostCallReply(slot).Error("HostError", "host call \"" + ctx.name + "\" failed: its handler threw: " + thrown);
  } else if (slot.use_count() == 1) {  // nobody kept the reply
    HostCallReply(slot).Error("HostError", "the host call's handler dropped its reply without answering");
  } else if (must_answer_now && !slot->answered.load()) {
    HostCallReply(slot).Error("HostError", "host call \"" + ctx.name +
                                               "\" writes basal's store and must answer before its handler returns "
                                               "(HostCallSpec::effect_in_store); it did not");
  }
}

std::string CallGate::ResultForJournal(const HostCallSpec& spec, const Json* value, const std::string& value_json) {
  try {
    if (spec.journal_result_text) {
      std::string view = spec.journal_result_text(value_json);
      if (protocol::IsJsonText(view)) return view;
      return protocol::DumpJson(
          Json{{"basal", "the journal view of the result (journal_result_text) is not JSON; result not journaled"}});
    }
    if (!spec.journal_result) return value_json;
    if (value) return protocol::DumpJson(spec.journal_result(*value));
    // An answer given as text (OkText), to a spec whose view reads a tree.
    Json tree;
    std::string error;
    if (!protocol::ParseJsonValue(value_json, tree, error))
      return protocol::DumpJson(Json{{"basal", "the result could not be read for its journal view; result not journaled"}});
    return protocol::DumpJson(spec.journal_result(tree));
  } catch (...) {
    return protocol::DumpJson(Json{{"basal", "the journal view of the result threw; result not journaled"}});
  }
}

void CallGate::OnAnswer(ActivationId activation, int64_t call_id, bool ok, Json value, std::optional<std::string> text,
                        std::string name, std::string message) {
  auto it = calls_.find({activation, call_id});
  if (it == calls_.end()) return;
  if (hooks_.answer_late && it->second.stage != Stage::kAbandoned &&
      NowUnixUs() - it->second.start_unix_us > kLateAnswerUs)
    hooks_.answer_late(activation);
  InFlight f = std::move(it->second);
  calls_.erase(it);
  const HostCallSpec& spec = *f.spec;
  std::string value_json;
  if (ok && text) {
    // Serialized by the handler: these bytes go to the worker and (unless a view says otherwise)
    // to the journal, so they must be JSON before either sees them.
    value_json = std::move(*text);
    if (!protocol::IsJsonText(value_json)) {
      ok = false;
      name = "HostError";
      message = "the result of host call \"" + f.name +
                "\" is not JSON: its handler answered with a text (HostCallReply::OkText) that is not one JSON value";
      value_json.clear();
      hooks_.event({ModuleEvent::Kind::kResultNotJson, message, activation, 0});
    }
  } else if (ok) {
    value_json = protocol::DumpJson(value);
  }
  if (ok) {
    std::string why;
    if (!protocol::FitsInMessage(value_json, why)) {
      ok = false;
      name = "HostError";
      message = "the result of host call \"" + f.name + "\" cannot be sent to the flow: " + why;
      value_json.clear();
      hooks_.event({ModuleEvent::Kind::kResultTooLarge, message, activation, 0});
    }
  }
  const size_t cap = limits_.journal_value_max_bytes;
  // Without a journal view the journal keeps the text the worker gets: dumped once, not twice.
  std::string result_journal;
  if (ok && f.journaled)
    result_journal = CapForJournal(spec.journal_result || spec.journal_result_text
                                       ? ResultForJournal(spec, text ? nullptr : &value, value_json)
                                       : value_json,
                                   cap);
  value = nullptr;  // the answer's text is all that is kept from here on
  const std::string error_journal = ok || !f.journaled ? "" : CapForJournal(ErrorJson(name, message), cap);  // an embedder's text
  const bool late = f.stage == Stage::kAbandoned;
  const CallState state = late ? CallState::kAbandoned : CallState::kAnswered;
  // A durable run keeps the answer exactly as the worker gets it when the journal's view is not
  // that (capped, redacted): a resume replays it (docs/durable.md).
  std::string replay;
  if (!late && f.journaled && DurableOf(activation)) {
    if (ok && result_journal != value_json) {
      replay = "{\"ok\":" + value_json + "}";
    } else if (!ok && error_journal != ErrorJson(name, message)) {
      replay = protocol::DumpJson(Json{{"error", {{"name", name}, {"message", message}}}});
    }
  }
  // The record was charged at the call; its answer now.
  const uint64_t bytes = f.journaled ? result_journal.size() + error_journal.size() + replay.size() : 0;
  // Delivered unless the activation ended, is ending, or this answer passes its journal budget.
  CallUsage* usage = nullptr;
  bool deliver = false, over = false;
  if (!late) {
    if (auto u = usage_.find(activation); u != usage_.end()) {
      usage = &u->second;
      --usage->in_flight;
      usage->in_flight_bytes -= f.args_bytes;
      deliver = !usage->over;
      if (deliver && f.journaled && !Charge(*usage, *f.flow, bytes)) {
        deliver = false;  // journaled (its effect happened) but not delivered: the activation ends
        over = true;
      }
    }
  }
  const bool notification = spec.name == kLogCallName;
  const Stamp stamp = deliver ? StampAnswer(activation, notification, NowUnixUs()) : Stamp{};
  const int64_t end = stamp.clock_us && !notification ? *stamp.clock_us : NowUnixUs();
  if (!deliver) replay.clear();
  if (!f.journaled) {
    // no record, before or after
  } else if (f.recorded) {
    Update({activation, call_id, state, result_journal, error_journal, end, stamp.seq, std::move(replay)}, f);
  } else {
    Record({activation, call_id, f.name, std::move(f.args_journal), std::move(f.decision), f.effect, state,
            std::move(result_journal), std::move(error_journal), f.start_unix_us, end, std::move(f.args_digest),
            stamp.seq, std::move(replay)},
           *f.flow, f.spec);
  }
  if (over) {
    return OverBudget(activation, *usage, Budget::kJournal,
                      "journal budget exhausted: the answer of host call \"" + f.name + "\" passed the " +
                          std::to_string(f.flow->manifest.budgets().journal_bytes >> 10) +
                          " KiB the activation may journal (budgets.journal_kb); raise it or journal less");
  }
  if (!deliver) return;
  hooks_.send(activation, ok ? protocol::BuildResultOk(activation, call_id, value_json, stamp.clock_us)
                             : protocol::BuildResultError(activation, call_id, name, message, stamp.clock_us));
}

uint32_t CallGate::InFlightOf(ActivationId activation) const {
  auto u = usage_.find(activation);
  return u == usage_.end() ? 0 : u->second.in_flight;
}

bool CallGate::Park(ActivationId activation, int64_t call_id) {
  auto it = calls_.find({activation, call_id});
  if (it == calls_.end() || it->second.stage != Stage::kRunning) return false;
  if (auto u = usage_.find(activation); u != usage_.end()) {
    --u->second.in_flight;
    u->second.in_flight_bytes -= it->second.args_bytes;
  }
  calls_.erase(it);  // its reply now answers into nothing; the record stays `started`
  return true;
}

std::optional<CallGate::AnswerPosition> CallGate::NextAnswer(ActivationId activation) const {
  auto it = durable_.find(activation);
  if (it == durable_.end()) return std::nullopt;
  return AnswerPosition{it->second.delivered + 1, it->second.clock_us};
}

CallUsage CallGate::EndCalls(ActivationId activation) {
  CallUsage usage;
  if (auto u = usage_.find(activation); u != usage_.end()) {
    usage = u->second;
    usage_.erase(u);
  }
  // Built only if a call is left to abandon: most activations end with none.
  std::string ended;
  auto first = calls_.lower_bound({activation, INT64_MIN});
  if (first != calls_.end() && first->first.first == activation)
    ended = ErrorJson("ActivationEnded", "the activation ended before this call was answered");
  for (auto it = first; it != calls_.end() && it->first.first == activation;) {
    InFlight& f = it->second;
    const int64_t call_id = it->first.second;
    if (f.stage == Stage::kAwaitingCommit || f.stage == Stage::kWaitingForWorker) {
      // Its handler never ran and never will: the record ends abandoned, nothing waits for it.
      if (f.recorded) {
        Update({activation, call_id, CallState::kAbandoned, "", ended, NowUnixUs()}, f);
      } else if (f.journaled) {
        Record({activation, call_id, f.name, std::move(f.args_journal), f.decision, f.effect, CallState::kAbandoned,
                "", ended, f.start_unix_us, NowUnixUs(), f.args_digest},
               *f.flow, f.spec);
      }
      it = calls_.erase(it);
      continue;
    }
    if (!f.journaled) {
      // no record: an unjournaled call ends without a trace
    } else if (f.recorded) {
      Update({activation, call_id, CallState::kAbandoned, "", ended, std::nullopt}, f);
    } else {
      Record({activation, call_id, f.name, std::move(f.args_journal), f.decision, f.effect,
              CallState::kAbandoned, "", ended, f.start_unix_us, std::nullopt, f.args_digest},
             *f.flow, f.spec);
      f.args_journal.clear();
      f.recorded = true;
    }
    f.stage = Stage::kAbandoned;  // kept until the handler answers or drops its reply
    ++it;
  }
  durable_.erase(activation);
  waiting_for_worker_.erase(activation);
  registry_.ActivationEnded(activation);  // handlers drop what they keep for it (timers, transfers)
  return usage;
}

}  // namespace basal
