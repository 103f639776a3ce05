// The module's runs (module_host.h, docs/durable.md): journaled as queued before anybody hears of
// them, dispatched by the module's one queue, ended in the batch that ends their activation; a
// durable run interrupted by its parent's death is claimed, analysed (replay.h) and resumed, or
// stopped for an operator at an external call in doubt.
#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "parent/module_impl.h"
#include "parent/store/owner.h"

namespace basal {
namespace {

// 32 random bytes for a durable run's generators, as 64 lowercase hex digits (kept with the run).
std::string NewSeedHex() {
  unsigned char bytes[protocol::kDurableSeedBytes];
  size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      std::abort();  // no entropy source at all: nothing sensible to continue with
    }
    got += static_cast<size_t>(n);
  }
  std::string hex;
  char buf[3];
  for (unsigned char b : bytes) {
    std::snprintf(buf, sizeof buf, "%02x", b);
    hex += buf;
  }
  return hex;
}

std::optional<std::array<uint8_t, protocol::kDurableSeedBytes>> SeedBytes(const std::string& hex) {
  if (hex.size() != 2 * protocol::kDurableSeedBytes) return std::nullopt;
  std::array<uint8_t, protocol::kDurableSeedBytes> out{};
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (size_t i = 0; i < out.size(); ++i) {
    const int hi = digit(hex[2 * i]), lo = digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return out;
}

std::string ErrorText(std::string_view kind, std::string_view message) {
  return protocol::DumpJson(Json{{"kind", kind}, {"message", message}});
}

}  // namespace

size_t Module::Impl::queued_runs() const { return waiting_runs.size() - held_runs; }

void Module::Impl::StopStartingRuns() {
  // Their rows stay queued: the next process's RequeueRun starts them. Their tickets are skipped.
  queued -= waiting_runs.size() - held_runs;
  waiting_runs.clear();
  held_runs = 0;
  stop_starting_runs = true;
}

Result<FlowRef> Module::Impl::NewestFlow(std::string_view name, bool under_batch) {
  // Read under the batch that will record the run (and start it, when a worker is free in this
  // pass): Dispatch then needs no second read of the approval (unrevoked_in_batch).
  if (under_batch) {
    if (auto opened = store->OpenBatch(); !opened) return opened.error();
  }
  auto found = store->reader().NewestVersion(ApprovalKind::kFlow, std::string(name));
  if (!found) return found.error();
  if (!*found)
    return MakeError(ErrorCode::kNotFound,
                     "no flow named " + std::string(name) + " is approved in this store (basal flow approve)");
  const ApprovalRow& newest = **found;
  if (newest.revoked_unix_us)
    return MakeError(ErrorCode::kRefused, "flow " + std::string(name) + " version " + std::to_string(newest.version) +
                                              " was revoked; approve a new version to run it again");
  if (under_batch && std::find(unrevoked_in_batch.begin(), unrevoked_in_batch.end(), newest.id) == unrevoked_in_batch.end())
    unrevoked_in_batch.push_back(newest.id);
  auto cached = current_flows.find(std::string(name));
  if (cached != current_flows.end() && cached->second->approval_id == newest.id) return cached->second;
  std::string source;
  auto checked = CheckedVersion(newest, &source);
  if (!checked) return checked.error();
  auto flow = FlowOfVersion(newest, std::move(source), checked->second);
  if (!flow) return flow.error();
  if (cached != current_flows.end()) {
    // An older version: what it runs finishes; its idle workers retire now.
    flows.erase(cached->second->id);
    pool->RetireIdle(*cached->second, RetireReason::kFlowRemoved);
  }
  current_flows[std::string(name)] = *flow;
  return *flow;
}

Result<RunAccepted> Module::Impl::StartRun(const FlowRef& flow, nlohmann::json input, RunOptions options,
                                           RunCallback done) {
  if (shutting_down || stop_starting_runs)
    return MakeError(ErrorCode::kUnavailable, "module: shutting down; it takes no new runs");
  if (!flow || !flows.count(flow->id))
    return MakeError(ErrorCode::kNotFound, "module: flow " + (flow ? flow->name : std::string("(null)")) +
                                               " is not approved in this module (never added, or removed)");
  // Serialized once: the run's row keeps it, and the worker gets the same text.
  std::string input_json = protocol::DumpJson(input);
  if (std::string why; !protocol::FitsInMessage(input_json, why))
    return MakeError(ErrorCode::kInvalidArgument, "the input cannot be sent to the flow: " + why);
  const int64_t now = options.created_unix_us > 0 ? options.created_unix_us : NowUnixUs();
  NewRun nr;
  nr.flow = flow->name;
  nr.input_json = input_json;
  nr.trigger = options.trigger;
  nr.idempotency_key = options.idempotency_key;
  nr.created_unix_us = now;
  nr.key_expires_unix_us = now + options.key_ttl.count() * 1000;
  nr.state_detail = options.state_detail;
  nr.durable = flow->manifest.durable();
  nr.held = options.hold;
  auto enqueued = store->runs().EnqueueRun(nr);
  if (!enqueued) return enqueued.error();
  if (enqueued->existing) return RunAccepted{std::move(enqueued->run), true};
  const RunId id = enqueued->run.id;
  runs_in_batch.push_back(id);
  WaitingRun w;
  w.flow = flow;
  w.input_json = std::move(input_json);
  w.done = std::move(done);
  w.held = options.hold;
  w.durable = nr.durable;
  waiting_runs.emplace(id, std::move(w));
  if (options.hold) {
    ++held_runs;
  } else {
    queue.push_back({0, id});
    ++queued;
  }
  // A lone run (nothing else live: a sequential caller's) accepted on the loop's thread outside a
  // pass's end is dispatched now: a free worker gets its `activate` before the caller's own work
  // after the acceptance (an HTTP request's handler, libmicrohttpd suspending the connection, the
  // rest of the pass), which the activation then overlaps, and its `done` is more often there when
  // the pass's end reads it before the commit (ReadBegunWorker): one commit for the start and the
  // end. The start joins the same batch as it would at the pass's end, and nothing is answered
  // before that batch commits. With other activations live, the runs a pass accepts are dispatched
  // together at its end (or at the start of the next pass, which runs EndOfPass before it waits),
  // as ends are grouped there: a worker woken per request would take the CPU from the requests
  // behind it. Only another thread's call needs the loop woken.
  if (!loop_->OnLoopThread()) {
    loop_->Wake();
  } else if (!in_pass && !in_callbacks && live.empty()) {
    Dispatch();
  }
  return RunAccepted{std::move(enqueued->run), false};
}

Result<void> Module::Impl::ReleaseRun(RunId run) {
  auto it = waiting_runs.find(run);
  if (it == waiting_runs.end() || !it->second.held)
    return MakeError(ErrorCode::kNotFound, "run " + std::to_string(run) + " is not held here");
  if (auto released = store->runs().ReleaseHeldRun(run); !released) FailBatch(released.error().message);
  it->second.held = false;
  --held_runs;
  queue.push_back({0, run});
  ++queued;
  loop_->Wake();
  return Ok();
}

bool Module::Impl::RunLive(RunId run) const {
  if (waiting_runs.count(run) || running_runs_.count(run)) return true;
  // Ended in the batch that has just committed (with its start, when its worker answered before
  // that commit): its stop is told at this pass's end, after the commit's waiters.
  return std::any_of(landed.begin(), landed.end(),
                     [run](const Finished& f) { return f.run_done && f.stop.run_id == run; });
}

Activation* Module::Impl::BeginRunActivation(RunId run, WaitingRun& w) {
  const int64_t now = NowUnixUs();
  const FlowRef flow = w.flow;
  auto a = std::make_unique<Activation>();
  a->flow = flow;
  a->input_json = std::move(w.input_json);
  a->start_unix_us = now;
  a->run_id = run;
  a->run_done = std::move(w.done);
  const bool durable = w.durable;
  RunBinding binding = std::move(w.binding);
  std::optional<ReplayPlan> replay = std::move(w.replay);
  const bool strict = w.strict;
  a->attempt = w.attempt;
  const int64_t retry_from = w.retry_from_call;
  waiting_runs.erase(run);  // `w` is gone now
  ActivationStart start{flow->name, flow->source_hash, flow->manifest.hash(), "", now, owner,
                        now + options.lease.count() * 1000, JournalOrigin(flow->origin), flow->approval_id,
                        flow->manifest_text_hash, run, retry_from};
  auto id = store->journal().BeginActivation(start);
  if (!id) {
    FailBatch(id.error().message);
    ActivationResult r = Failure(Outcome::kJournalError, "the run's activation could not be journaled: " + id.error().message);
    r.run_id = run;
    // Nothing of it ran: once the store takes writes again it is queued again if its row still is
    // (accepted in an earlier batch), or told it ended if its row was lost with this batch.
    owed_ends.push_back({0, run, r, std::move(a->run_done)});
    return nullptr;
  }
  a->id = *id;
  begun_in_batch.push_back(*id);
  // The first start binds the run (its version, and a durable run's clock and seed); a resume
  // keeps what its first start recorded.
  if (binding.source_hash.empty()) {
    binding = RunBinding{flow->approval_id, flow->source_hash, flow->manifest.hash(), flow->manifest_text_hash,
                         durable ? NewSeedHex() : std::string(), durable ? now : 0};
  }
  if (auto started = store->runs().MarkRunStarted(run, *id, now, binding); !started) {
    if (started.error().code == ErrorCode::kConflict) {
      // Ended or taken by another process since it was queued here (basal run cancel): this
      // activation never starts.
      (void)store->journal().EndActivation(
          EndRecord(*id, Failure(Outcome::kCancelled, "the run was ended elsewhere: " + started.error().message), now,
                    options.journal_value_max_bytes));
      return nullptr;
    }
    FailBatch(started.error().message);
  }
  if (durable) {
    auto seed = SeedBytes(binding.seed);
    if (!seed) {
      FailBatch("run " + std::to_string(run) + " has a malformed seed in the journal (" + binding.seed + ")");
      seed.emplace();
    }
    a->durable = protocol::DurableStart{binding.clock_us, *seed};
    gate->BeginDurable(*id, run, binding.clock_us, std::move(replay), strict);
  }
  running_runs_[run] = *id;
  Activation* out = a.get();
  live[*id] = std::move(a);
  return out;
}

void Module::Impl::EndRunWithout(RunId run, const std::string& outcome, const std::string& message, RunCallback done) {
  if (auto it = waiting_runs.find(run); it != waiting_runs.end()) {
    if (it->second.held) --held_runs;
    if (!done) done = std::move(it->second.done);
    waiting_runs.erase(it);  // its ticket, if any, is skipped by Dispatch
  }
  if (auto ended = store->runs().MarkRunEnded(run, outcome, ErrorText(outcome, message), NowUnixUs()); !ended)
    FailBatch(ended.error().message);
  ActivationResult r = Failure(ParseOutcome(outcome).value_or(Outcome::kCancelled), message);
  r.run_id = run;
  finished.push_back({r, nullptr, true, std::move(done), RunStop{run, RunState::kEnded, outcome, r}});
}

Result<void> Module::Impl::CancelRun(RunId run, std::string why) {
  if (waiting_runs.count(run)) {
    EndRunWithout(run, "cancelled", why, nullptr);
    return Ok();
  }
  if (auto it = running_runs_.find(run); it != running_runs_.end()) {
    CancelOne(it->second, why);
    return Ok();
  }
  auto row = store->runs().GetRun(run);
  if (!row) return row.error();
  if (!*row) return MakeError(ErrorCode::kNotFound, "no run " + std::to_string(run) + " in this store");
  switch ((*row)->state) {
    case RunState::kQueued:  // queued by another process: it finds the run ended when it dispatches it
    case RunState::kInterrupted:
    case RunState::kNeedsReconciliation:
    case RunState::kSleeping:  // parked: no worker to stop, its wake finds it ended
    case RunState::kWaiting:
    case RunState::kRetrying:
      EndRunWithout(run, "cancelled", why, nullptr);
      return Ok();
    case RunState::kRunning:
      return MakeError(ErrorCode::kConflict, "run " + std::to_string(run) + " is running in another process (activation " +
                                                 std::to_string((*row)->activation_id) +
                                                 "); cancel it where it runs (basal serve's API: POST /v1/runs/" +
                                                 std::to_string(run) + "/cancel)");
    case RunState::kEnded:
      return MakeError(ErrorCode::kConflict, "run " + std::to_string(run) + " has already ended (" + (*row)->outcome + ")");
  }
  return Ok();
}

Result<FlowRef> Module::Impl::FlowForRun(const RunRow& run, const ResumeOptions& resume) {
  const RunBinding& b = run.binding;
  if (resume.newest_version || b.source_hash.empty()) return CurrentFlow(run.flow);
  if (b.approval_id > 0) {
    if (auto cached = resumed_flows.find(b.approval_id); cached != resumed_flows.end() && flows.count(cached->second->id)) {
      if (auto revoked = RevokedWhy(*cached->second))
        return MakeError(ErrorCode::kRefused, *revoked + " (run " + std::to_string(run.id) +
                                                  " started under it); resume it under the newest approved version "
                                                  "(--newest-version) or cancel it (basal run cancel " +
                                                  std::to_string(run.id) + ")");
      return cached->second;
    }
    auto approval = store->reader().Approval(b.approval_id);
    if (!approval) return approval.error();
    if (!*approval)
      return MakeError(ErrorCode::kDatabase, "run " + std::to_string(run.id) + " started under approval " +
                                                 std::to_string(b.approval_id) + ", which this journal does not hold");
    std::string source;
    auto checked = CheckedVersion(**approval, &source);
    if (!checked) {
      if (checked.error().code != ErrorCode::kRefused) return checked.error();
      return MakeError(ErrorCode::kRefused, checked.error().message + " (run " + std::to_string(run.id) +
                                                " started under it); resume it under the newest approved version "
                                                "(--newest-version) or cancel it (basal run cancel " +
                                                std::to_string(run.id) + ")");
    }
    auto flow = FlowOfVersion(**approval, std::move(source), checked->second);
    if (!flow) return flow.error();
    resumed_flows[b.approval_id] = *flow;
    return flow;
  }
  // An ad hoc flow's run (basal run FILE --manifest M): its texts are kept in the journal.
  if (options.require_approval)
    return MakeError(ErrorCode::kRefused, "run " + std::to_string(run.id) +
                                              " is of an ad hoc flow, and ad hoc flows are refused here (require_approval)");
  auto source = store->reader().Text(b.source_hash);
  auto manifest_text = store->reader().Text(b.manifest_text_hash);
  if (!source) return source.error();
  if (!manifest_text) return manifest_text.error();
  if (!*source || !*manifest_text || Sha256Hex(**source) != b.source_hash || Sha256Hex(**manifest_text) != b.manifest_text_hash)
    return MakeError(ErrorCode::kDatabase, "run " + std::to_string(run.id) +
                                               ": the source or manifest it started with is missing from the journal or "
                                               "does not match its hash; it cannot be resumed");
  Flow origin;
  origin.origin = FlowOrigin::kAdhoc;
  auto flow = MakeFlow(run.flow, std::move(**source), **manifest_text, Profile::kFlow, origin);
  if (!flow) return flow.error();
  if ((*flow)->manifest.hash() != b.manifest_hash) {
    flows.erase((*flow)->id);
    return MakeError(ErrorCode::kRefused, "run " + std::to_string(run.id) +
                                              ": its manifest reads differently in this basal than when it started (" +
                                              b.manifest_hash + ")");
  }
  return flow;
}

Result<RunAccepted> Module::Impl::ResumeRun(RunId run, ResumeOptions resume, RunCallback done) {
  if (shutting_down || stop_starting_runs)
    return MakeError(ErrorCode::kUnavailable, "module: shutting down; it resumes no run");
  auto row = store->runs().GetRun(run);
  if (!row) return row.error();
  if (!*row) return MakeError(ErrorCode::kNotFound, "no run " + std::to_string(run) + " in this store");
  const RunRow& r = **row;
  if (RunParked(r.state)) {
    // A parked run resumes when it wakes: now, if its time has come (or it waits for its next
    // attempt, which the operator may hurry).
    const int64_t now = NowUnixUs();
    if (r.state == RunState::kRetrying || (r.wake_unix_us && *r.wake_unix_us <= now)) {
      auto woken = WakeRun(r, now, nullptr, true, std::move(done));
      if (!woken) return woken.error();
      return RunAccepted{std::move(*woken), false};
    }
    const std::string until = r.wake_unix_us ? UtcText(*r.wake_unix_us) : std::string("?");
    if (r.state == RunState::kWaiting)
      return MakeError(ErrorCode::kConflict, "run " + std::to_string(run) + " is waiting for event " + r.waiting_for +
                                                 " (until " + until + "); send it (basal run signal " +
                                                 std::to_string(run) + " " + r.waiting_for +
                                                 " --data JSON), or cancel the run");
    return MakeError(ErrorCode::kConflict, "run " + std::to_string(run) + " is sleeping until " + until +
                                               "; it resumes then (basal serve wakes it, or basal run --resume " +
                                               std::to_string(run) + " after that time), or cancel it");
  }
  if (r.state != RunState::kInterrupted) {
    std::string hint;
    if (r.state == RunState::kNeedsReconciliation)
      hint = ": it waits for an operator to decide a call in doubt first (basal run resolve " + std::to_string(run) + ")";
    else if (r.state == RunState::kEnded)
      hint = " (" + r.outcome + ")";
    return MakeError(ErrorCode::kConflict, "run " + std::to_string(run) + " is " + RunStateName(r.state) +
                                               "; only an interrupted run is resumed" + hint);
  }
  Json woke_detail = Json::parse(r.state_detail, nullptr, false);
  if (r.resumes >= static_cast<int64_t>(options.max_resumes) && !(woke_detail.is_object() && woke_detail.contains("woke"))) {
    const std::string why = "run " + std::to_string(run) + " was resumed " + std::to_string(r.resumes) +
                            " times, the most a run may be (max_resumes " + std::to_string(options.max_resumes) +
                            "): its script or host failed each time; look at its activations (basal journal --run " +
                            std::to_string(run) + ")";
    EndRunWithout(run, "resume_exhausted", why, std::move(done));
    OnEvent({ModuleEvent::Kind::kRunStopped, why, 0, 0});
    RunRow ended = r;
    ended.state = RunState::kEnded;
    ended.outcome = "resume_exhausted";
    return RunAccepted{std::move(ended), false};
  }
  auto flow = FlowForRun(r, resume);
  if (!flow) return flow.error();
  // The claim: of two processes resuming the run at once, one moves it, the other gets kConflict.
  // A run woken elsewhere (an event sent by basal run signal) was not interrupted by a failure: no
  // resume is counted against max_resumes.
  Json detail = Json::parse(r.state_detail, nullptr, false);
  const bool woken = detail.is_object() && detail.contains("woke");
  auto claimed = store->runs().MoveRun({run, RunState::kInterrupted, RunState::kQueued, "", !woken});
  if (!claimed) return claimed.error();
  return QueueResume(std::move(*claimed), *flow, std::move(done));
}

Result<RunAccepted> Module::Impl::QueueResume(RunRow run, const FlowRef& flow, RunCallback done, bool retry) {
  auto activations = store->reader().RunActivations(run.id);
  if (!activations) return activations.error();
  auto calls = store->reader().RunCalls(run.id);
  if (!calls) return calls.error();
  auto resolutions = store->reader().Resolutions(run.id);
  if (!resolutions) return resolutions.error();
  RunAnalysis analysis = AnalyzeRun(
      *activations, *calls, *resolutions,
      [this](std::string_view name) {
        const HostCallSpec* spec = registry.Find(name);
        return spec != nullptr && spec->effect_in_store;
      },
      retry);
  if (!analysis.needs_operator.empty()) {
    // Nothing external is executed twice without an operator saying so.
    Json in_doubt = Json::array();
    std::string names;
    for (const InDoubtCall& c : analysis.needs_operator) {
      Json args = Json::parse(c.args_json, nullptr, false);
      in_doubt.push_back(Json{{"call", c.call_id},
                              {"activation", c.activation_id},
                              {"name", c.name},
                              {"args", args.is_discarded() ? Json(c.args_json) : args},
                              {"args_digest", c.args_digest},
                              {"effect", EffectName(c.effect)}});
      names += (names.empty() ? "" : ", ") + std::string("call ") + std::to_string(c.call_id) + " (" + c.name + ")";
    }
    const std::string message = "run " + std::to_string(run.id) + " needs reconciliation: " + names +
                                " started and its outcome is unknown (its parent died, or its activation ended while "
                                "it ran); basal does not run an external effect twice on its own. Decide: basal run "
                                "resolve " + std::to_string(run.id) + " --call N --result JSON | --error MESSAGE | --retry";
    auto stopped = store->runs().MoveRun({run.id, RunState::kQueued, RunState::kNeedsReconciliation,
                                          protocol::DumpJson(Json{{"in_doubt", in_doubt}, {"message", message}}), false});
    if (!stopped) return stopped.error();
    ActivationResult r = Failure(Outcome::kAbandoned, message);
    r.run_id = run.id;
    finished.push_back({r, nullptr, true, std::move(done), RunStop{run.id, RunState::kNeedsReconciliation, "", r}});
    OnEvent({ModuleEvent::Kind::kRunStopped, message, 0, 0});
    return RunAccepted{std::move(*stopped), false};
  }
  WaitingRun w;
  w.flow = flow;
  w.input_json = run.input_json;
  w.done = std::move(done);
  w.durable = true;
  w.binding = run.binding;
  w.replay = std::move(analysis.plan);
  w.attempt = run.attempt;
  w.retry_from_call = analysis.retry_from_call;
  waiting_runs.emplace(run.id, std::move(w));
  queue.push_back({0, run.id});
  ++queued;
  loop_->Wake();
  return RunAccepted{std::move(run), false};
}

Result<void> Module::Impl::RequeueRun(const RunRow& run, RunCallback done) {
  if (run.state != RunState::kQueued)
    return MakeError(ErrorCode::kConflict, "run " + std::to_string(run.id) + " is " + RunStateName(run.state) + ", not queued");
  if (waiting_runs.count(run.id) || running_runs_.count(run.id))
    return MakeError(ErrorCode::kConflict, "run " + std::to_string(run.id) + " is already queued here");
  if (!run.binding.source_hash.empty()) {
    // Claimed for a resume by a process that died before it started it: a resume still.
    auto flow = FlowForRun(run, {});
    if (!flow) {
      EndRunWithout(run.id, "cancelled", "cancelled before it was resumed: " + flow.error().message, std::move(done));
      return Ok();
    }
    auto queued_again = QueueResume(run, *flow, std::move(done));
    if (!queued_again) return queued_again.error();
    return Ok();
  }
  auto flow = CurrentFlow(run.flow);
  if (!flow) {
    EndRunWithout(run.id, "cancelled", "cancelled before it started: " + flow.error().message, std::move(done));
    return Ok();
  }
  if ((*flow)->manifest.durable() != run.durable) {
    EndRunWithout(run.id, "cancelled",
                  "cancelled before it started: it was queued as " + std::string(run.durable ? "a durable" : "a plain") +
                      " run, and flow " + run.flow + "'s newest approved version is " +
                      ((*flow)->manifest.durable() ? "durable" : "not durable") + " now; start it again",
                  std::move(done));
    return Ok();
  }
  WaitingRun w;
  w.flow = *flow;
  w.input_json = run.input_json;
  w.done = std::move(done);
  w.durable = run.durable;
  waiting_runs.emplace(run.id, std::move(w));
  queue.push_back({0, run.id});
  ++queued;
  loop_->Wake();
  return Ok();
}

Result<RunRow> Module::Impl::ResolveCall(const CallResolution& resolution) {
  const std::string id = std::to_string(resolution.run_id);
  auto row = store->runs().GetRun(resolution.run_id);
  if (!row) return row.error();
  if (!*row) return MakeError(ErrorCode::kNotFound, "no run " + id + " in this store");
  if ((*row)->state != RunState::kNeedsReconciliation)
    return MakeError(ErrorCode::kConflict, "run " + id + " is " + RunStateName((*row)->state) +
                                               "; only a run that needs reconciliation has calls to resolve");
  if (resolution.kind == ResolutionKind::kResult) {
    Json value;
    if (std::string why; !protocol::ParseJsonValue(resolution.value_json, value, why))
      return MakeError(ErrorCode::kInvalidArgument, "the result given for call " + std::to_string(resolution.call_id) +
                                                        " is not JSON: " + why);
    if (std::string why; !protocol::FitsInMessage(resolution.value_json, why))
      return MakeError(ErrorCode::kInvalidArgument, "the result given for call " + std::to_string(resolution.call_id) +
                                                        " cannot be sent to the flow: " + why);
  }
  auto activations = store->reader().RunActivations(resolution.run_id);
  if (!activations) return activations.error();
  auto calls = store->reader().RunCalls(resolution.run_id);
  if (!calls) return calls.error();
  auto resolutions = store->reader().Resolutions(resolution.run_id);
  if (!resolutions) return resolutions.error();
  RunAnalysis analysis = AnalyzeRun(*activations, *calls, *resolutions, [this](std::string_view name) {
    const HostCallSpec* spec = registry.Find(name);
    return spec != nullptr && spec->effect_in_store;
  });
  const InDoubtCall* call = nullptr;
  std::string in_doubt;
  for (const InDoubtCall& c : analysis.needs_operator) {
    if (c.call_id == resolution.call_id) call = &c;
    in_doubt += (in_doubt.empty() ? "" : ", ") + std::to_string(c.call_id) + " (" + c.name + ")";
  }
  if (!call)
    return MakeError(ErrorCode::kConflict, "call " + std::to_string(resolution.call_id) + " of run " + id +
                                               " is not in doubt; the calls in doubt are: " +
                                               (in_doubt.empty() ? std::string("none") : in_doubt));
  CallResolution r = resolution;
  r.activation_id = call->activation_id;
  if (r.at_unix_us == 0) r.at_unix_us = NowUnixUs();
  if (auto added = store->runs().AddResolution(r); !added) return added.error();
  if (analysis.needs_operator.size() > 1) return std::move(**row);  // other calls still wait for a decision
  auto released = store->runs().MoveRun({resolution.run_id, RunState::kNeedsReconciliation, RunState::kInterrupted,
                                         protocol::DumpJson(Json{{"resolved_by", r.actor.name}}), false});
  if (!released) return released.error();
  return std::move(*released);
}

}  // namespace basal

namespace basal {

Result<RunAccepted> Module::Impl::ReplayRecord(const FlowRef& flow, const RunRow& recorded, const ReplayPlan& plan,
                                               RunCallback done) {
  if (!flow || !flows.count(flow->id))
    return MakeError(ErrorCode::kNotFound, "module: flow " + (flow ? flow->name : std::string("(null)")) +
                                               " is not approved in this module (never added, or removed)");
  if (!flow->manifest.durable())
    return MakeError(ErrorCode::kInvalidArgument,
                     "flow " + flow->name + "'s manifest is not durable: only a durable flow's runs can be replayed");
  if (SeedBytes(recorded.binding.seed) == std::nullopt)
    return MakeError(ErrorCode::kInvalidArgument, "run " + std::to_string(recorded.id) +
                                                      " has no durable record (no seed): it was not a durable run");
  NewRun nr;
  nr.flow = flow->name;
  nr.input_json = recorded.input_json;
  nr.trigger = "replay:" + std::to_string(recorded.id);
  nr.created_unix_us = NowUnixUs();
  nr.durable = true;
  auto enqueued = store->runs().EnqueueRun(nr);
  if (!enqueued) return enqueued.error();
  WaitingRun w;
  w.flow = flow;
  w.input_json = recorded.input_json;
  w.done = std::move(done);
  w.durable = true;
  w.binding = recorded.binding;
  w.binding.source_hash = flow->source_hash;  // bound as the record's run, with the version replayed
  w.binding.manifest_hash = flow->manifest.hash();
  w.binding.manifest_text_hash = flow->manifest_text_hash;
  w.binding.approval_id = 0;
  w.replay = plan;
  w.strict = true;
  runs_in_batch.push_back(enqueued->run.id);
  waiting_runs.emplace(enqueued->run.id, std::move(w));
  queue.push_back({0, enqueued->run.id});
  ++queued;
  loop_->Wake();
  return RunAccepted{std::move(enqueued->run), false};
}

}  // namespace basal
