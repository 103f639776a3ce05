// `basal run`: one activation (--input), or many through the pool (--inputs FILE.jsonl).
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <iostream>
#include <thread>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "basal/module.h"
#include "cli/cli_support.h"
#include "cli/commands.h"
#include "parent/secrets/secret_store.h"
#include "parent/module_host.h"
#include "protocol/messages.h"

namespace basal::cli {
namespace {

using Json = nlohmann::json;

// One result line, flushed at once: a reader of --inputs sees each line as soon as it is known.
void PrintLine(const std::string& line) {
  WriteStdout(line + "\n");
  FlushStdout();
}

// The one-line message for a failed activation; a script error leads with the JS error's name
// (unless the message names it already, as a failed load's does).
std::string FailureMessage(const ActivationResult& r) {
  std::string message = r.message;
  if (r.outcome == Outcome::kScriptError && !r.error_name.empty() &&
      message.find(r.error_name + ":") == std::string::npos)
    message = r.error_name + ": " + message;
  if (r.run_id > 0 && r.activation_id > 0) {
    message += " (run " + std::to_string(r.run_id) + ", activation " + std::to_string(r.activation_id) + ")";
  } else if (r.run_id > 0) {
    message += " (run " + std::to_string(r.run_id) + ")";
  } else if (r.activation_id > 0) {
    message += " (activation " + std::to_string(r.activation_id) + ")";
  }
  return message;
}

Json ActivationLine(const ActivationResult& r) {
  Json line = Json::object();
  line["activation"] = r.activation_id > 0 ? Json(r.activation_id) : Json(nullptr);
  if (r.run_id > 0) line["run"] = r.run_id;  // a durable flow's run (docs/durable.md)
  if (r.ok()) {
    line["ok"] = r.result;
  } else {
    line["error"] = r.ErrorJson();
  }
  if (r.logs_dropped > 0) line["logs_dropped"] = r.logs_dropped;
  return line;
}

// Submit refused the activation (nothing was journaled): the input cannot be sent, or the journal
// failed.
Outcome SubmitOutcome(const Error& e) {
  return e.code == ErrorCode::kInvalidArgument ? Outcome::kInvalidInput : Outcome::kJournalError;
}
Json SubmitErrorLine(const Error& e) {
  return Json{{"activation", nullptr}, {"error", {{"kind", OutcomeName(SubmitOutcome(e))}, {"message", e.message}}}};
}

Json InvalidInputLine(size_t line_number, const std::string& why) {
  return Json{{"activation", nullptr},
              {"error",
               {{"kind", OutcomeName(Outcome::kInvalidInput)},
                {"message", "line " + std::to_string(line_number) + " is not valid JSON: " + why}}}};
}

// Prints what the module reports besides results (refused workers, handlers that threw, journal
// failures) as `basal: <kind>: <message>` on stderr.
class StderrObserver final : public ModuleObserver {
 public:
  void OnEvent(const ModuleEvent& e) override { ReportError(ModuleEventKindName(e.kind), e.message); }
};

// SIGINT, SIGTERM and SIGHUP end the run: every activation still queued or running is cancelled
// (its worker killed, the journal says `cancelled`) and basal exits 128 + the signal's number.
// The signals are blocked in every thread and taken by a thread of their own with sigtimedwait,
// which hands them to the module's loop with Post (the one call any thread may make).
class SignalWatch {
 public:
  SignalWatch() {
    sigemptyset(&set_);
    for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&set_, s);
    pthread_sigmask(SIG_BLOCK, &set_, &old_);
  }
  ~SignalWatch() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  void Start(Module& module, std::atomic<bool>& stop_submitting) {
    thread_ = std::thread([this, &module, &stop_submitting] {
      const timespec tick{0, 100'000'000};
      while (!stop_) {
        const int sig = sigtimedwait(&set_, nullptr, &tick);
        if (sig <= 0) continue;
        caught_ = sig;
        stop_submitting = true;
        module.Post([&module, sig] {
          module.CancelAll(std::string("cancelled: basal received ") + sigabbrev_np(sig) + " and stopped");
        });
        return;
      }
    });
  }
  int caught() const { return caught_.load(); }

 private:
  sigset_t set_, old_;
  std::atomic<bool> stop_{false};
  std::atomic<int> caught_{0};
  std::thread thread_;
};

struct InputLine {
  size_t line_number = 0;
  std::optional<Json> input;  // nullopt: invalid (see `error`)
  std::string error;
};

std::vector<InputLine> SplitInputs(const std::string& text) {
  std::vector<InputLine> lines;
  size_t pos = 0;
  size_t number = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    InputLine in;
    in.line_number = number;
    Json value;
    if (protocol::ParseJsonValue(line, value, in.error)) in.input = std::move(value);
    lines.push_back(std::move(in));
  }
  return lines;
}

// Runs every line through the pool with at most `concurrency` submitted at once, and prints each
// line's outcome in input order as soon as it and every line before it are known.
// Returns the exit code: the worst of the lines' (ExitCodeFor each outcome; an invalid line is
// the flow's side, 1).
int RunInputs(Module& module, const FlowRef& flow, const std::vector<InputLine>& lines, size_t concurrency,
              const std::atomic<bool>& stop) {
  struct State {
    std::vector<std::optional<Json>> out;
    size_t next = 0;
    size_t printed = 0;
    size_t in_flight = 0;
    bool pumping = false;
    bool again = false;
    int code = kExitOk;
  };
  auto st = std::make_shared<State>();
  st->out.resize(lines.size());

  auto flush_ready = [st] {
    while (st->printed < st->out.size() && st->out[st->printed]) {
      PrintLine(JsonForTerminal(*st->out[st->printed]));
      st->out[st->printed].reset();
      ++st->printed;
    }
  };

  // Submitting from a completion callback refills the window; a `done` that runs inside Submit
  // (the activation could not even start) must not recurse, hence `pumping`.
  std::function<void()> pump;
  pump = [&, st] {
    if (st->pumping) {
      st->again = true;
      return;
    }
    st->pumping = true;
    do {
      st->again = false;
      while (st->in_flight < concurrency && st->next < lines.size() && !stop) {
        const size_t index = st->next++;
        const InputLine& line = lines[index];
        if (!line.input) {
          st->out[index] = InvalidInputLine(line.line_number, line.error);
          st->code = WorseExit(st->code, kExitFlowFailed);
          continue;
        }
        auto id = module.Submit(flow, *line.input, [st, index, &pump, &flush_ready](const ActivationResult& r) {
          st->out[index] = ActivationLine(r);
          st->code = WorseExit(st->code, ExitCodeFor(r.outcome));
          --st->in_flight;
          flush_ready();
          pump();
        });
        if (id) {
          ++st->in_flight;
        } else {
          st->out[index] = SubmitErrorLine(id.error());
          st->code = WorseExit(st->code, ExitCodeFor(SubmitOutcome(id.error())));
        }
      }
      flush_ready();
    } while (st->again);
    st->pumping = false;
  };

  pump();
  while (st->printed < lines.size() && !(stop && st->in_flight == 0)) {
    const size_t before = st->printed;
    const size_t next_before = st->next;
    module.RunUntilIdle();
    pump();
    if (st->printed == before && st->next == next_before && st->in_flight > 0) {
      // RunUntilIdle returned with activations still owed: the module broke its promise.
      return Fail(kKindSetup, "the module went idle with " + std::to_string(st->in_flight) +
                                  " activations unfinished; see the journal");
    }
  }
  return st->code;
}

}  // namespace

// --logs: each console.* line of every activation on stderr as the log call is served, i.e. as it
// happens, before the activation ends. Lines past the log or journal budget are dropped before
// they reach this sink (they are not printed either). The text is the script's: one escaped line.
void PrintLog(const HostCallContext& context, std::string_view level, std::string_view message) {
  WriteStderr("[activation " + std::to_string(context.activation_id) + "] " + std::string(level) + ": " +
              EscapeForTerminal(message, TerminalText::kOneLine) + "\n");
}

// Prints how a run stopped and returns the exit code: its result (ok), its failure, or that it
// waits for an operator.
int ReportRunStop(const RunStop& stop) {
  if (RunParked(stop.state)) return ReportParkedStop(stop);
  if (stop.state == RunState::kNeedsReconciliation) {
    ReportError("needs_reconciliation", stop.result.message);
    return kExitWaiting;
  }
  const ActivationResult& r = stop.result;
  if (r.ok()) {
    PrintLine(JsonForTerminal(r.result));
    return kExitOk;
  }
  ReportError(stop.outcome.empty() ? OutcomeName(r.outcome) : stop.outcome, FailureMessage(r));
  return ExitCodeFor(r.outcome);
}

// `basal run --resume RUN`: the interrupted durable run, resumed in this process (docs/durable.md).
int ResumeCommand(const RunOptions& o) {
  auto base = ModuleOptionsFor(o.worker_path, o.db_path);
  if (!base) return Fail(kKindIo, base.error().message);
  ModuleOptions mo = std::move(*base);
  mo.allow_without_landlock = o.allow_without_landlock;
  mo.worker_user = o.worker_user;
  mo.max_workers = o.max_workers;
  mo.require_approval = o.require_approval;
#ifdef BASAL_TEST_HOOKS
  mo.worker_args = o.worker_args;
#endif
  mo.observer = std::make_shared<StderrObserver>();
  if (o.logs) mo.log_sink = PrintLog;
  SignalWatch signals;
  auto module = Module::Open(mo);
  if (!module) return Fail(KindForOpenError(module.error()), module.error().message);
  std::optional<RunStop> stopped;
  auto resumed = (*module)->host().ResumeRun(o.resume, ResumeOptions{o.newest_version},
                                               [&stopped](const RunStop& stop) { stopped = stop; });
  if (!resumed) {
    const Error& e = resumed.error();
    if (e.code == ErrorCode::kRefused) {
      ReportError("refused", e.message);
      return kExitRefused;
    }
    if (e.code == ErrorCode::kNotFound || e.code == ErrorCode::kConflict) return Fail(kKindUsage, e.message);
    return Fail(kKindJournal, e.message);
  }
  std::atomic<bool> stop{false};
  signals.Start(**module, stop);
  (*module)->RunUntilIdle();
  int code = stopped ? ReportRunStop(*stopped) : Fail(kKindSetup, "run " + std::to_string(o.resume) + " never stopped");
  if (const int sig = signals.caught(); sig != 0) code = 128 + sig;
  return code;
}

int RunCommand(const RunOptions& o) {
  if (o.resume > 0) return ResumeCommand(o);
  // What runs: a file with its manifest (ad hoc), an agent's script under a policy, or an
  // approved flow by name (read from the journal once the module is open).
  const bool adhoc = !o.manifest_path.empty();
  const bool codemode = !o.policy.empty();
  FlowFiles files;
  if (adhoc) {
    auto read = ReadFlowFiles(o.flow_path, o.manifest_path);
    if (!read) return Fail(kKindIo, read.error().message);
    files = std::move(*read);
  } else if (codemode) {
    auto source = ReadFile(o.flow_path, "script");
    if (!source) return Fail(kKindIo, source.error().message);
    files.flow_path = o.flow_path;
    files.name = Basename(o.flow_path);
    files.source = std::move(*source);
  }

  Json input;
  std::vector<InputLine> lines;
  const bool many = !o.inputs_path.empty();
  if (many) {
    auto text = o.inputs_path == "-" ? Result<std::string>(std::string(std::istreambuf_iterator<char>(std::cin), {}))
                                     : ReadFile(o.inputs_path, "inputs");
    if (!text) return Fail(kKindIo, text.error().message);
    lines = SplitInputs(*text);
  } else {
    std::string why;
    if (!protocol::ParseJsonValue(o.input, input, why))
      return Fail(kKindUsage, "--input is not valid JSON: " + why + " (quote it for the shell: --input '{\"n\": 1}')");
  }

  auto base = ModuleOptionsFor(o.worker_path, o.db_path);
  if (!base) return Fail(kKindIo, base.error().message);
  ModuleOptions mo = std::move(*base);
  auto durability = ParseDurability(o.durability);
  if (!durability) return Fail(kKindUsage, durability.error().message);
  mo.durability = *durability;
  mo.allow_without_landlock = o.allow_without_landlock;
  mo.worker_user = o.worker_user;
  mo.max_workers = o.max_workers;
  mo.require_approval = o.require_approval;
#ifdef BASAL_TEST_HOOKS
  mo.worker_args = o.worker_args;
#endif
  mo.observer = std::make_shared<StderrObserver>();
  if (o.logs) mo.log_sink = PrintLog;

  SignalWatch signals;  // before the module starts any thread, so that every thread blocks them
  auto module = Module::Open(mo);
  if (!module) return Fail(KindForOpenError(module.error()), module.error().message);
  Result<FlowRef> flow = MakeError(ErrorCode::kInternal, "no flow");
  if (adhoc) {
    flow = AddFlowFiles(**module, files, ParseProfile(o.profile));  // its errors name the manifest file
  } else if (codemode) {
    flow = (*module)->AddCodemodeScript(o.policy, files.name, std::move(files.source));
  } else {
    flow = (*module)->LoadApprovedFlow(o.flow_path);
  }
  if (!flow) {
    const Error& e = flow.error();
    if (e.code == ErrorCode::kRefused || e.code == ErrorCode::kNotFound) {
      std::string hint;
      if (!adhoc && !codemode && e.code == ErrorCode::kNotFound) {
        hint = "; to run a file ad hoc instead, give its manifest: basal run FILE.js --manifest M.json";
      }
      ReportError("refused", e.message + hint);
      return kExitRefused;
    }
    // The manifest (ad hoc, or a stored one that no longer parses), else the journal.
    return Fail(e.code == ErrorCode::kInvalidArgument ? kKindManifest : kKindJournal, e.message);
  }

  std::atomic<bool> stop{false};
  signals.Start(**module, stop);
  int code = kExitOk;
  if (many) {
    // Loaded once before any line: a flow that does not load (a syntax error) is reported once,
    // not once per line. The worker that loaded it stays idle and runs the first line.
    auto check = (*module)->CheckLoad(*flow);
    if (!check) {
      code = Fail(kKindSetup, check.error().message);
    } else if (!check->ok() && signals.caught() == 0) {
      code = ReportLoadFailure(o.flow_path, *check);
    } else if (check->ok()) {
      code = RunInputs(**module, *flow, lines, o.concurrency, stop);
    }
  } else {
    ActivationResult r;
    auto id = (*module)->Submit(*flow, std::move(input), [&r](const ActivationResult& x) { r = x; });
    if (!id) {  // as Module::Run reports a refused Submit
      r.outcome = id.error().code == ErrorCode::kDatabase      ? Outcome::kJournalError
                  : id.error().code == ErrorCode::kUnavailable ? Outcome::kCancelled
                                                               : Outcome::kInvalidInput;
      r.message = id.error().message;
    } else {
      // A durable run outlives this process: say which it is before it runs (docs/durable.md).
      if ((*flow)->manifest.durable())
        ReportError("durable", "run " + std::to_string(*id) + " of flow " + (*flow)->name +
                                   "; if basal stops before it ends, resume it: basal run --resume " +
                                   std::to_string(*id));
      (*module)->RunUntilIdle();
    }
    if (r.logs_dropped > 0) {
      ReportError("logs_dropped", std::to_string(r.logs_dropped) +
                                      " log line(s) past the activation's log budget (budgets.log_kb) or journal "
                                      "budget (budgets.journal_kb) were dropped (activation " +
                                      std::to_string(r.activation_id) + ")");
    }
    if (r.ok()) {
      PrintLine(JsonForTerminal(r.result));
    } else {
      ReportError(OutcomeName(r.outcome), FailureMessage(r));
      code = ExitCodeFor(r.outcome);
    }
  }
  if (const int sig = signals.caught(); sig != 0) code = 128 + sig;

  if (!o.health_out.empty()) {
    const std::string health = (*module)->HealthReport().dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
    if (auto w = WriteFile(o.health_out, health, "health report"); !w) {
      ReportError(kKindIo, w.error().message);
      code = WorseExit(code, kExitBasalFailed);
    }
  }
  return code;
}

}  // namespace basal::cli
