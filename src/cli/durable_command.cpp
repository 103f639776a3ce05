// The durable runs' commands (docs/durable.md): `basal run resolve` (an operator's decision about a
// call in doubt), `basal run cancel`, and `basal replay` (a recorded run executed again with every
// effect disabled, answered from the journal only: the check to run before approving a change).
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "basal/module.h"
#include "cli/approvals.h"
#include "cli/cli_support.h"
#include "cli/commands.h"
#include "parent/journal_value.h"
#include "parent/module_host.h"
#include "parent/replay.h"
#include "parent/store/open.h"
#include "protocol/messages.h"

namespace basal::cli {
namespace {

using Json = nlohmann::json;

class StderrEvents final : public ModuleObserver {
 public:
  void OnEvent(const ModuleEvent& e) override { ReportError(ModuleEventKindName(e.kind), e.message); }
};

// The runs a daemon started (and resumes itself once they are resolved).
bool DaemonTrigger(const std::string& trigger) {
  return trigger == "api" || trigger.rfind("webhook:", 0) == 0 || trigger.rfind("schedule:", 0) == 0;
}

int ExitForRunError(const Error& e) {
  if (e.code == ErrorCode::kRefused) {
    ReportError("refused", e.message);
    return kExitRefused;
  }
  if (e.code == ErrorCode::kNotFound || e.code == ErrorCode::kConflict || e.code == ErrorCode::kInvalidArgument)
    return Fail(kKindUsage, e.message);
  return Fail(kKindJournal, e.message);
}

int PrintStop(const RunStop& stop) {
  if (RunParked(stop.state)) return ReportParkedStop(stop);
  const ActivationResult& r = stop.result;
  if (stop.state == RunState::kNeedsReconciliation) {
    ReportError("needs_reconciliation", r.message);
    return kExitWaiting;
  }
  if (r.ok()) {
    WriteStdout(JsonForTerminal(r.result) + "\n");
    return kExitOk;
  }
  ReportError(stop.outcome.empty() ? OutcomeName(r.outcome) : stop.outcome,
              r.message + " (run " + std::to_string(stop.run_id) +
                  (r.activation_id > 0 ? ", activation " + std::to_string(r.activation_id) : std::string()) + ")");
  return ExitCodeFor(r.outcome);
}

// ---- replay ----

// What a replay found, as one line.
struct ReplayVerdict {
  bool diverged = false;
  std::string text;
};

// The recorded end of a run, to compare a replay's end with: its last activation's.
std::optional<ActivationRow> LastActivation(JournalReader& reader, int64_t run) {
  auto rows = reader.RunActivations(run);
  if (!rows || rows->empty()) return std::nullopt;
  return rows->back();
}

// Replays `recorded` (a run of the journal `reader` reads) with `flow` in `scratch`, a module on a
// scratch journal. Every answer comes from the record; nothing of the real journal is written.
Result<ReplayVerdict> ReplayOne(Module& scratch, JournalReader& reader, const FlowRef& flow, const RunRow& recorded) {
  auto activations = reader.RunActivations(recorded.id);
  if (!activations) return activations.error();
  auto calls = reader.RunCalls(recorded.id);
  if (!calls) return calls.error();
  auto resolutions = reader.Resolutions(recorded.id);
  if (!resolutions) return resolutions.error();
  const RunAnalysis analysis = AnalyzeRun(*activations, *calls, *resolutions, [&scratch](std::string_view name) {
    const HostCallSpec* spec = scratch.registry().Find(name);
    return spec != nullptr && spec->effect_in_store;
  });
  std::optional<RunStop> stopped;
  auto accepted = scratch.host().ReplayRecord(flow, recorded, analysis.plan,
                                              [&stopped](const RunStop& stop) { stopped = stop; });
  if (!accepted) return accepted.error();
  scratch.RunUntilIdle();
  if (!stopped) return MakeError(ErrorCode::kInternal, "the replay of run " + std::to_string(recorded.id) + " never ended");
  const ActivationResult& r = stopped->result;
  const std::string calls_text = std::to_string(analysis.plan.answers.size()) + " recorded answer(s)";
  if (r.outcome == Outcome::kDiverged) return ReplayVerdict{true, "diverged: " + r.message};
  // A replay that waits for ever (for a call the script no longer makes) ends at its deadline.
  if (r.outcome == Outcome::kDeadline) return ReplayVerdict{true, "diverged: " + r.message};
  if (r.outcome == Outcome::kCancelled && r.message.rfind(kReplayPastRecord, 0) == 0)
    return ReplayVerdict{false, "replays cleanly to the end of its record (" + calls_text + "; " +
                                    r.message.substr(std::string(kReplayPastRecord).size()) +
                                    ": the run had not finished)"};
  // The script ended: as the recorded run ended?
  const auto last = LastActivation(reader, recorded.id);
  const std::string ended = OutcomeName(r.outcome);
  if (recorded.state == RunState::kEnded && last && last->end_unix_us && last->outcome != "abandoned") {
    if (last->outcome != ended)
      return ReplayVerdict{true, "diverged: the replay ended " + ended + " (" + r.message + ") where the run ended " +
                                     last->outcome};
    if (r.ok() && CapForJournal(protocol::DumpJson(r.result), 64u << 10) != last->result_json)
      return ReplayVerdict{true, "diverged: the replay's result differs from the run's (" +
                                     Sha256Hex(protocol::DumpJson(r.result)) + ")"};
  }
  if (!r.ok() && r.outcome != Outcome::kScriptError && r.outcome != Outcome::kBudgetExhausted)
    return MakeError(ErrorCode::kInternal, "the replay of run " + std::to_string(recorded.id) + " could not run: " + ended +
                                               ": " + r.message);
  return ReplayVerdict{false, "replays cleanly (" + calls_text + ", ended " + ended + ")"};
}

// A module on a scratch journal: replays write nothing to the operator's.
struct Scratch {
  std::unique_ptr<ScratchDir> dir;
  std::unique_ptr<Module> module;
};
Result<Scratch> OpenScratch(const std::string& worker_path, const std::string& worker_user, bool allow_without_landlock,
                            const std::vector<std::string>& worker_args) {
  Scratch s;
  s.dir = std::make_unique<ScratchDir>("basal-replay");
  if (!s.dir->ok()) return MakeError(ErrorCode::kIo, "cannot make a scratch directory for the replay");
  auto mo = ModuleOptionsFor(worker_path, s.dir->journal());
  if (!mo) return mo.error();
  mo->secrets_dir.clear();  // a replay reaches no secret: no call is made
  mo->worker_user = worker_user;
  mo->allow_without_landlock = allow_without_landlock;
#ifdef BASAL_TEST_HOOKS
  mo->worker_args = worker_args;
#else
  (void)worker_args;
#endif
  mo->observer = std::make_shared<StderrEvents>();
  auto module = Module::Open(std::move(*mo));
  if (!module) return module.error();
  s.module = std::move(*module);
  return s;
}

}  // namespace

int ReportParkedStop(const RunStop& stop) {
  // It goes on later (docs/durable.md): a parked activation says when and how; a failed attempt
  // says when the next one comes.
  const ActivationResult& p = stop.result;
  ReportError("parked", p.outcome == Outcome::kParked
                            ? p.message
                            : "attempt failed (" + std::string(OutcomeName(p.outcome)) + ": " + p.message + "); run " +
                                  std::to_string(stop.run_id) + " is retrying (basal serve retries it at its time, or: "
                                  "basal run --resume " + std::to_string(stop.run_id) + ")");
  return kExitWaiting;
}

int ResolveCommand(const ResolveOptions& o) {
  const int given = (o.result ? 1 : 0) + (o.error ? 1 : 0) + (o.retry ? 1 : 0);
  if (given != 1) return Fail(kKindUsage, "give exactly one decision: --result JSON, --error MESSAGE or --retry");
  CallResolution r;
  r.run_id = o.run;
  r.call_id = o.call;
  r.actor = CurrentActor();
  r.note = o.note;
  if (o.result) {
    Json value;
    if (std::string why; !protocol::ParseJsonValue(*o.result, value, why))
      return Fail(kKindUsage, "--result is not JSON: " + why + " (quote it for the shell: --result '{\"sent\": true}')");
    r.kind = ResolutionKind::kResult;
    r.value_json = protocol::DumpJson(value);
  } else if (o.error) {
    r.kind = ResolutionKind::kError;
    r.value_json = protocol::DumpJson(Json{{"name", "HostError"}, {"message", *o.error}});
  } else {
    r.kind = ResolutionKind::kRetry;
  }
  auto base = ModuleOptionsFor(o.worker_path, o.db_path);
  if (!base) return Fail(kKindIo, base.error().message);
  ModuleOptions mo = std::move(*base);
  mo.worker_user = o.worker_user;
  mo.allow_without_landlock = o.allow_without_landlock;
#ifdef BASAL_TEST_HOOKS
  mo.worker_args = o.worker_args;
#endif
  mo.observer = std::make_shared<StderrEvents>();
  auto module = Module::Open(std::move(mo));
  if (!module) return Fail(KindForOpenError(module.error()), module.error().message);
  ModuleHost& host = (*module)->host();
  auto row = host.ResolveCall(r);
  if (!row) return ExitForRunError(row.error());
  (*module)->RunUntilIdle();  // commits the decision
  WriteStderr("basal: resolved call " + std::to_string(o.call) + " of run " + std::to_string(o.run) + " (" +
              ResolutionKindName(r.kind) + ") by " + EscapeForTerminal(r.actor.name, TerminalText::kOneLine) + "\n");
  if (row->state != RunState::kInterrupted) {
    WriteStderr("basal: run " + std::to_string(o.run) + " still waits for a decision about its other calls in doubt\n");
    return kExitWaiting;
  }
  if (o.no_resume) return kExitOk;
  if (DaemonTrigger(row->trigger)) {
    WriteStderr("basal: run " + std::to_string(o.run) + " is basal serve's (" +
                EscapeForTerminal(row->trigger, TerminalText::kOneLine) +
                "): the daemon resumes it (within a second when it runs)\n");
    return kExitOk;
  }
  std::optional<RunStop> stopped;
  auto resumed = host.ResumeRun(o.run, {}, [&stopped](const RunStop& stop) { stopped = stop; });
  if (!resumed) return ExitForRunError(resumed.error());
  (*module)->RunUntilIdle();
  if (!stopped) return Fail(kKindSetup, "run " + std::to_string(o.run) + " never stopped");
  return PrintStop(*stopped);
}

int CancelRunCommand(const CancelRunOptions& o) {
  auto base = ModuleOptionsFor(o.worker_path, o.db_path);
  if (!base) return Fail(kKindIo, base.error().message);
  auto module = Module::Open(std::move(*base));
  if (!module) return Fail(KindForOpenError(module.error()), module.error().message);
  const Actor actor = CurrentActor();
  const std::string why = "cancelled by " + actor.name + (o.note.empty() ? "" : " (\"" + o.note + "\")");
  if (auto c = (*module)->host().CancelRun(o.run, why); !c) return ExitForRunError(c.error());
  (*module)->RunUntilIdle();
  WriteStderr("basal: run " + std::to_string(o.run) + " cancelled\n");
  return kExitOk;
}

int SignalCommand(const SignalOptions& o) {
  std::string payload = "null";
  if (o.data) {
    Json value;
    if (std::string why; !protocol::ParseJsonValue(*o.data, value, why))
      return Fail(kKindUsage, "--data is not JSON: " + why + " (quote it for the shell: --data '{\"approved\": true}')");
    payload = protocol::DumpJson(value);
  }
  auto base = ModuleOptionsFor(o.worker_path, o.db_path);
  if (!base) return Fail(kKindIo, base.error().message);
  auto module = Module::Open(std::move(*base));
  if (!module) return Fail(KindForOpenError(module.error()), module.error().message);
  NewRunEvent e;
  e.run_id = o.run;
  e.name = o.name;
  e.payload_json = std::move(payload);
  e.sender = CurrentActor().name;
  // Delivered here, the run is left interrupted for whoever resumes it: basal serve for its runs,
  // else `basal run --resume` (this command returns at once; a wait may be days long).
  auto sent = (*module)->host().SendEvent(std::move(e), std::nullopt);
  if (!sent) {
    if (sent.error().code == ErrorCode::kUnavailable) return Fail(kKindUsage, sent.error().message);
    return ExitForRunError(sent.error());
  }
  (*module)->RunUntilIdle();  // commits the event (and the answer of the wait it ends)
  const std::string run = std::to_string(o.run);
  if (sent->delivered_to == 0) {
    WriteStderr("basal: event " + EscapeForTerminal(o.name, TerminalText::kOneLine) + " (id " +
                std::to_string(sent->event_id) + ") is kept for run " + run +
                ", which does not wait for it now: its next waitForEvent of that name takes it\n");
    return kExitOk;
  }
  if (DaemonTrigger(sent->run.trigger)) {
    WriteStderr("basal: event " + EscapeForTerminal(o.name, TerminalText::kOneLine) + " delivered to run " + run +
                "; basal serve resumes it (within a second when it runs)\n");
  } else {
    WriteStderr("basal: event " + EscapeForTerminal(o.name, TerminalText::kOneLine) + " delivered to run " + run +
                "; resume it: basal run --resume " + run + "\n");
  }
  return kExitOk;
}

Result<size_t> ReplayRecentRuns(const std::string& db_path, const std::string& worker_path, const std::string& name,
                                const std::string& source, const std::string& manifest_text, size_t last) {
  auto reader = OpenReader(db_path);
  if (!reader) return reader.error();
  std::vector<RunRow> runs;
  int64_t before = 0;
  // Newest first, the durable runs that started (their record has a seed); at most a few pages.
  for (int page = 0; page < 100 && runs.size() < last; ++page) {
    RunQuery q;
    q.flow = name;
    q.before_id = before;
    q.limit = 100;
    auto rows = (*reader)->ListRuns(q);
    if (!rows) return rows.error();
    if (rows->empty()) break;
    for (const RunRow& r : *rows) {
      before = r.id;
      if (r.durable && !r.binding.seed.empty() && runs.size() < last) runs.push_back(r);
    }
  }
  if (runs.empty()) {
    WriteStdout("no durable run of flow " + EscapeForTerminal(name, TerminalText::kOneLine) + " to replay\n");
    return size_t{0};
  }
  auto scratch = OpenScratch(worker_path, "", false, {});
  if (!scratch) return scratch.error();
  auto flow = scratch->module->AddFlow(name, source, manifest_text);
  if (!flow) return flow.error();
  size_t diverged = 0;
  for (const RunRow& r : runs) {
    auto verdict = ReplayOne(*scratch->module, **reader, *flow, r);
    if (!verdict) return verdict.error();
    if (verdict->diverged) ++diverged;
    WriteStdout("run " + std::to_string(r.id) + ": " + EscapeForTerminal(verdict->text, TerminalText::kOneLine) + "\n");
  }
  WriteStdout(std::to_string(runs.size() - diverged) + " of " + std::to_string(runs.size()) + " run(s) replay cleanly\n");
  return diverged;
}

int ReplayCommand(const ReplayOptions& o) {
  std::string db = o.db_path;
  if (db.empty()) {
    auto d = DefaultJournalPath();
    if (!d) return Fail(kKindIo, d.error().message);
    db = *d;
  }
  if (o.run == 0) {
    // Against an approved version: the check before approving (or after, of a version kept).
    if (o.flow.empty() || o.version <= 0 || o.last == 0)
      return Fail(kKindUsage, "give a run (basal replay RUN), or --flow NAME --version N --last K");
    auto reader = OpenReader(db);
    if (!reader) return Fail(kKindJournal, reader.error().message);
    auto versions = (*reader)->Versions(ApprovalKind::kFlow, o.flow);
    if (!versions) return Fail(kKindJournal, versions.error().message);
    const ApprovalRow* version = nullptr;
    for (const ApprovalRow& v : *versions)
      if (v.version == o.version) version = &v;
    if (!version)
      return Fail(kKindUsage, "flow " + o.flow + " has no approved version " + std::to_string(o.version) +
                                  " (basal flow show " + o.flow + ")");
    auto source = (*reader)->Text(version->source_hash);
    auto manifest = (*reader)->Text(version->manifest_text_hash);
    if (!source || !manifest || !*source || !*manifest)
      return Fail(kKindJournal, "flow " + o.flow + " version " + std::to_string(o.version) + ": its texts are missing");
    auto diverged = ReplayRecentRuns(db, o.worker_path, o.flow, **source, **manifest, o.last);
    if (!diverged) return Fail(kKindSetup, diverged.error().message);
    return *diverged > 0 ? kExitFlowFailed : kExitOk;
  }
  auto reader = OpenReader(db);
  if (!reader) return Fail(kKindJournal, reader.error().message);
  auto row = (*reader)->GetRun(o.run);
  if (!row) return Fail(kKindJournal, row.error().message);
  if (!*row) return Fail(kKindUsage, "no run " + std::to_string(o.run) + " in " + RedactLocator(db));
  const RunRow& recorded = **row;
  if (!recorded.durable || recorded.binding.seed.empty())
    return Fail(kKindUsage, "run " + std::to_string(o.run) + " is not a durable run that started: only those keep "
                                "the record a replay needs (\"durable\": true in the flow's manifest)");
  // The version to replay: the files given (a new version to check), else the one the run ran.
  std::string source, manifest_text;
  std::string name = recorded.flow;
  if (!o.flow.empty()) {
    if (o.manifest_path.empty()) return Fail(kKindUsage, "--flow FILE.js needs --manifest M.json");
    auto files = ReadFlowFiles(o.flow, o.manifest_path);
    if (!files) return Fail(kKindIo, files.error().message);
    source = files->source;
    manifest_text = files->manifest_text;
  } else {
    auto s = (*reader)->Text(recorded.binding.source_hash);
    auto m = (*reader)->Text(recorded.binding.manifest_text_hash);
    if (!s || !m || !*s || !*m)
      return Fail(kKindJournal, "run " + std::to_string(o.run) + ": the source or manifest it ran is missing from the journal");
    source = **s;
    manifest_text = **m;
  }
  auto scratch = OpenScratch(o.worker_path, o.worker_user, o.allow_without_landlock, o.worker_args);
  if (!scratch) return Fail(kKindSetup, scratch.error().message);
  auto flow = scratch->module->AddFlow(name, source, manifest_text);
  if (!flow) return Fail(kKindManifest, flow.error().message);
  auto verdict = ReplayOne(*scratch->module, **reader, *flow, recorded);
  if (!verdict) return Fail(kKindSetup, verdict.error().message);
  WriteStdout("run " + std::to_string(o.run) + ": " + EscapeForTerminal(verdict->text, TerminalText::kOneLine) + "\n");
  return verdict->diverged ? kExitFlowFailed : kExitOk;
}

}  // namespace basal::cli
