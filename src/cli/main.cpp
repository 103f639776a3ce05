// basal: run flows in confined workers, read the journal, check the sandbox (docs/cli.md).
//
// One Add<Command> per subcommand: it declares the command's options (CLI11), its help footer with
// examples, and the callback that runs it and sets the exit code. A new command is one more
// Add<Command> call in Dispatch.
#include <csignal>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/approvals.h"
#include "cli/cli_support.h"
#include "cli/commands.h"
#include "cli/daemon_client.h"
#include "cli/generate_command.h"

namespace basal::cli {
namespace {

constexpr const char* kHiddenGroup = "";  // CLI11: options in the empty group are not listed

constexpr const char* kDbHelp =
    "The store: an SQLite journal file (WAL), or postgresql://... (docs/postgres.md). Default: $BASAL_DB, else "
    "${XDG_STATE_HOME:-$HOME/.local/state}/basal/journal.db, its directory created 0700";
constexpr const char* kWorkerHelp =
    "ck-basal-worker binary. Default: ck-basal-worker beside the basal binary, else the installed one in "
    "../libexec/basal/ from it";
constexpr const char* kWorkerUserHelp =
    "When basal runs as root: the unprivileged user its workers run as (with every capability dropped). "
    "Default: basal-worker if that user exists, else nobody. Refused for a user with uid or gid 0, and when "
    "basal does not run as root";
constexpr const char* kProfileHelp = "Worker profile: flow (default) or codemode";
constexpr const char* kSocketHelp =
    "basal serve's Unix socket. Default: $BASAL_SOCKET, else the socket basal serve binds by default "
    "($RUNTIME_DIRECTORY/basal.sock, $XDG_RUNTIME_DIR/basal/basal.sock, or as root /run/basal/basal.sock)";
constexpr const char* kUrlHelp = "basal serve's loopback TCP address, http://ADDRESS:PORT (instead of the socket)";
constexpr const char* kTokenFileHelp =
    "With --url: a file holding the bearer token (basal token create; keep it owner-only). Default: $BASAL_TOKEN";

// The examples every --help ends with. They run from the repository's root (examples/ is there);
// tests/integration/cli_newcomer_test.cpp runs each one and expects exit 0.
constexpr const char* kRunExample =
    "  basal run examples/hello.js --manifest examples/hello.manifest.json --input '{\"name\":\"operator\"}'\n";
constexpr const char* kInputsExample =
    "  basal run examples/counter.js --manifest examples/counter.manifest.json --inputs examples/counter.jsonl "
    "--logs\n";
constexpr const char* kCheckExample = "  basal check examples/hello.js --manifest examples/hello.manifest.json\n";

std::string Examples(std::initializer_list<std::string> lines) {
  std::string text = "Examples (from the repository's root):\n";
  for (const std::string& line : lines) text += line;
  return text;
}

constexpr const char* kHealthText =
    "Health is kept per running module, in memory: a module is the parent of one `basal run` or of a\n"
    "`basal serve` daemon, and its report (workers live, idle and busy; activations ok and failed by\n"
    "kind; retirements; deadline kills; worker_confinement (SIGSYS) deaths; refused welcomes;\n"
    "crashes; host calls by name and decision; queue length) ends with it. A running daemon's:\n"
    "`basal health --socket PATH` (or --url URL with $BASAL_TOKEN). A run's: --health-out FILE.\n"
    "Without an address `basal health` runs nothing. An embedder reads the same JSON from\n"
    "Module::HealthReport() (see docs/cli.md).\n";

// The names of the commands, in the order they were added: "run, check, journal, ...". Hidden
// ones (the empty group: __generate) are not listed.
std::string CommandList(const CLI::App& app) {
  std::string list;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App* s) { return !s->get_group().empty(); })) {
    if (!list.empty()) list += ", ";
    list += sub->get_name();
  }
  return list;
}

const CLI::App* FindCommand(const CLI::App& app, const std::string& name) {
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    if (sub->get_name() == name) return sub;
  return nullptr;
}

int UnknownCommand(const CLI::App& app, const std::string& name) {
  return Fail(kKindUsage, "unknown command \"" + name + "\" (commands: " + CommandList(app) + "; see basal help)");
}

// The short help for `basal` alone: on stderr, since a command was required.
std::string ShortHelp(const CLI::App& app) {
  return "basal runs untrusted JavaScript flows in confined worker processes.\n"
         "Usage: basal COMMAND [OPTIONS]\n"
         "Commands: " +
         CommandList(app) +
         "\n"
         "See `basal help` for what each does, `basal help COMMAND` for its options and examples.\n";
}

// Every option struct lives as long as the App (its callback reads it after parsing).
template <typename Options>
std::shared_ptr<Options> Keep() {
  return std::make_shared<Options>();
}

void AddRunSubcommands(CLI::App& run, int& exit_code);

void AddRun(CLI::App& app, int& exit_code) {
  auto o = Keep<RunOptions>();
  CLI::App* run = app.add_subcommand(
      "run", "Run a flow: the approved flow NAME, a file with its manifest (ad hoc), or an agent's script under a "
             "codemode policy; one activation (--input) or one per line (--inputs)");
  CLI::Option* flow =
      run->add_option("flow", o->flow_path,
                      "NAME of an approved flow (basal flow approve); or FLOW.js, an ES module whose default export "
                      "is (input, host) => result, with --manifest (ad hoc) or --policy (codemode)")
          ->type_name("NAME|FLOW.js");
  CLI::Option* resume =
      run->add_option("--resume", o->resume,
                      "Resume RUN, a durable run that was interrupted (its basal died): replayed from the journal, "
                      "then on (docs/durable.md)")
          ->type_name("RUN")
          ->check(CLI::Range(int64_t{1}, std::numeric_limits<int64_t>::max()));
  resume->excludes(flow);
  run->add_flag("--newest-version", o->newest_version,
                "With --resume: under the flow's newest approved version instead of the one the run started under")
      ->needs(resume);
  CLI::Option* manifest = run->add_option("--manifest", o->manifest_path,
                                          "Run FLOW.js ad hoc with this manifest (JSON: grants and budgets); journaled "
                                          "as ad hoc with its source and manifest text")
                              ->type_name("FILE");
  CLI::Option* policy = run->add_option("--policy", o->policy,
                                        "Run SCRIPT.js, an agent's script, under this approved codemode policy "
                                        "(basal policy approve)")
                            ->type_name("NAME");
  manifest->excludes(policy);
  run->add_flag("--require-approval", o->require_approval,
                "Refuse ad hoc runs (--manifest): only approved flows and codemode policies run");
  CLI::Option* input = run->add_option("--input", o->input, "The activation's input, one JSON value (default: null)")
                           ->type_name("JSON");
  CLI::Option* inputs = run->add_option(
      "--inputs", o->inputs_path,
      "JSON Lines file ('-' for stdin): one activation per non-empty line, through the pool; prints one "
      "{\"activation\", \"ok\"|\"error\"} line per input, in input order. The flow is loaded once first: if it "
      "does not load, that is reported once and no line runs")
                            ->type_name("FILE.jsonl");
  input->excludes(inputs);
  run->add_option("--concurrency", o->concurrency,
                  "With --inputs: at most K activations submitted at once (default 1: one after another, "
                  "on one reused worker); --max-workers still caps the workers")
      ->check(CLI::Range(size_t{1}, size_t{4096}))
      ->needs(inputs);
  run->add_flag("--logs", o->logs,
                "Print every console.* line on stderr as it happens, as `[activation ID] LEVEL: text` (escaped); "
                "lines past the log budget are dropped, not printed. Every line is journaled either way");
  run->add_option("--db", o->db_path, kDbHelp)->type_name("FILE|URL");
  run->add_option("--worker", o->worker_path, kWorkerHelp)->type_name("PATH");
  run->add_option("--worker-user", o->worker_user, kWorkerUserHelp)->type_name("NAME");
  run->add_option("--durability", o->durability,
                  "Journal durability: normal (survives a crash of basal; default) or full (also power loss)")
      ->check(CLI::IsMember({"normal", "full"}));
  run->add_option("--profile", o->profile, "With --manifest: worker profile flow (default) or codemode")
      ->check(CLI::IsMember({"flow", "codemode"}))
      ->needs(manifest);
  run->add_flag("--allow-without-landlock", o->allow_without_landlock,
                "Accept workers without Landlock, and then only if this kernel lacks Landlock");
  run->add_option("--health-out", o->health_out, "Write the module's final health report (JSON) to FILE")
      ->type_name("FILE");
  run->add_option("--max-workers", o->max_workers, "Global cap on live workers; further activations queue (default 8)")
      ->check(CLI::Range(size_t{1}, size_t{1024}));
#ifdef BASAL_TEST_HOOKS  // a release basal cannot pass a worker anything that weakens it
  run->add_option("--worker-arg", o->worker_args, "Test-hooks worker switch (tests only)")
      ->group(kHiddenGroup)
      ->allow_extra_args(false);
#endif
  run->footer(
      "Exit: 0 every activation ended ok; 1 one did not (the flow failed); 2 usage; 3 basal itself failed (io,\n"
      "manifest, journal, setup); 5 a durable run stopped: a call in doubt waits for an operator, or the run\n"
      "parked (sleeping, waiting for an event, retrying later; basal serve wakes it); 128+N a signal (docs/cli.md)\n\n" +
      Examples({kRunExample, kInputsExample}));
  AddRunSubcommands(*run, exit_code);
  run->callback([run, o, &exit_code] {
    if (!run->get_subcommands().empty()) return;  // resolve, cancel, signal: their own callbacks ran
    if (o->flow_path.empty() && o->resume == 0) {
      exit_code = Fail(kKindUsage, "give the flow to run (NAME, or FLOW.js with --manifest), or --resume RUN");
      return;
    }
    exit_code = RunCommand(*o);
  });
}

// `basal run resolve` and `basal run cancel`: a durable run's operator decisions (docs/durable.md).
void AddRunSubcommands(CLI::App& run, int& exit_code) {
  auto r = Keep<ResolveOptions>();
  CLI::App* resolve = run.add_subcommand(
      "resolve", "Decide a call in doubt of a run that needs reconciliation: its answer (--result or --error), or "
                 "run it again (--retry); journaled with who decided, then the run is resumed");
  resolve->add_option("run", r->run, "The run (its id)")->required()->type_name("RUN");
  resolve->add_option("--call", r->call, "The call in doubt (its number, as the run's state names it)")
      ->required()
      ->type_name("N");
  CLI::Option* result = resolve->add_option("--result", r->result, "The call happened and answered this (JSON)")
                            ->type_name("JSON");
  CLI::Option* error = resolve->add_option("--error", r->error, "The call failed with this message (a HostError)")
                           ->type_name("MESSAGE");
  CLI::Option* retry = resolve->add_flag("--retry", r->retry, "The call did not happen: run it again (same idempotency key)");
  result->excludes(error)->excludes(retry);
  error->excludes(retry);
  resolve->add_option("--note", r->note, "Why, kept with the decision")->type_name("TEXT");
  resolve->add_flag("--no-resume", r->no_resume, "Record the decision only; do not resume the run here");
  resolve->add_option("--db", r->db_path, kDbHelp)->type_name("FILE|URL");
  resolve->add_option("--worker", r->worker_path, kWorkerHelp)->type_name("PATH");
  resolve->add_option("--worker-user", r->worker_user, kWorkerUserHelp)->type_name("NAME");
  resolve->add_flag("--allow-without-landlock", r->allow_without_landlock,
                    "Accept workers without Landlock, and then only if this kernel lacks Landlock");
#ifdef BASAL_TEST_HOOKS
  resolve->add_option("--worker-arg", r->worker_args, "Test-hooks worker switch (tests only)")
      ->group(kHiddenGroup)
      ->allow_extra_args(false);
#endif
  resolve->footer(
      "A run of basal serve's (api, webhook, schedule) is resumed by the daemon; any other is resumed here and\n"
      "its result printed as `basal run` prints it.\n"
      "Exit: 0 resolved (and resumed: its result); 1 the resumed run failed; 2 usage (no such run, call not in\n"
      "doubt); 3 basal failed; 4 refused (its version revoked); 5 it still waits for another decision\n\n" +
      Examples({"  basal run resolve 7 --call 3 --result '{\"sent\": true}' --note 'seen in the mail log'\n",
                "  basal run resolve 7 --call 3 --retry\n"}));
  resolve->callback([r, &exit_code] { exit_code = ResolveCommand(*r); });

  auto c = Keep<CancelRunOptions>();
  CLI::App* cancel = run.add_subcommand(
      "cancel", "End a run that is queued, interrupted, parked (sleeping, waiting for an event, retrying) or waits for an "
      "operator, as cancelled (journaled with who did it)");
  cancel->add_option("run", c->run, "The run (its id)")->required()->type_name("RUN");
  cancel->add_option("--note", c->note, "Why, kept in the run's error")->type_name("TEXT");
  cancel->add_option("--db", c->db_path, kDbHelp)->type_name("FILE|URL");
  cancel->add_option("--worker", c->worker_path, kWorkerHelp)->type_name("PATH");
  cancel->footer("Exit: 0 cancelled; 2 usage (no such run, already ended, running in another process); 3 basal failed\n\n" +
                 Examples({"  basal run cancel 7 --note 'superseded'\n"}));
  cancel->callback([c, &exit_code] { exit_code = CancelRunCommand(*c); });

  auto g = Keep<SignalOptions>();
  CLI::App* signal = run.add_subcommand(
      "signal", "Send an event to a durable run: the waitForEvent that waits for its name returns it, now or at "
                "its next wait (journaled with who sent it; docs/durable.md#events)");
  signal->add_option("run", g->run, "The run (its id)")->required()->type_name("RUN");
  signal->add_option("name", g->name, "The event's name (what waitForEvent names)")->required()->type_name("NAME");
  signal->add_option("--data", g->data, "The event's payload (JSON; default null)")->type_name("JSON");
  signal->add_option("--db", g->db_path, kDbHelp)->type_name("FILE|URL");
  signal->add_option("--worker", g->worker_path, kWorkerHelp)->type_name("PATH");
  signal->footer(
      "A run of basal serve's is resumed by the daemon within a second; any other: basal run --resume RUN.\n"
      "Exit: 0 sent (delivered, or kept for the run's next wait); 2 usage (no such run, ended, not durable, bad\n"
      "JSON, too many events waiting); 3 basal failed\n\n" +
      Examples({"  basal run signal 7 approved --data '{\"by\": \"ops\"}'\n"}));
  signal->callback([g, &exit_code] { exit_code = SignalCommand(*g); });
}

void AddReplay(CLI::App& app, int& exit_code) {
  auto o = Keep<ReplayOptions>();
  CLI::App* replay = app.add_subcommand(
      "replay", "Execute recorded durable runs again with every effect disabled (answers from the journal only): "
                "does a version replay them cleanly? (docs/durable.md)");
  replay->add_option("run", o->run, "The run to replay (its id)")->type_name("RUN");
  replay->add_option("--flow", o->flow,
                     "With RUN: FILE.js, the version to replay it with (with --manifest); without RUN: the NAME of a "
                     "flow whose last runs to replay (with --version and --last)")
      ->type_name("FILE.js|NAME");
  replay->add_option("--manifest", o->manifest_path, "With RUN --flow FILE.js: its manifest")->type_name("FILE");
  replay->add_option("--version", o->version, "The approved version of --flow NAME to replay the runs with")
      ->type_name("N");
  replay->add_option("--last", o->last, "How many of the flow's newest durable runs to replay")
      ->type_name("K")
      ->check(CLI::Range(size_t{1}, size_t{1000}));
  replay->add_option("--db", o->db_path, kDbHelp)->type_name("FILE|URL");
  replay->add_option("--worker", o->worker_path, kWorkerHelp)->type_name("PATH");
  replay->add_option("--worker-user", o->worker_user, kWorkerUserHelp)->type_name("NAME");
  replay->add_flag("--allow-without-landlock", o->allow_without_landlock,
                   "Accept workers without Landlock, and then only if this kernel lacks Landlock");
#ifdef BASAL_TEST_HOOKS
  replay->add_option("--worker-arg", o->worker_args, "Test-hooks worker switch (tests only)")
      ->group(kHiddenGroup)
      ->allow_extra_args(false);
#endif
  replay->footer(
      "Each replay runs in a confined worker against a scratch journal: nothing is called, nothing of the\n"
      "journal changes. A run replays cleanly when the script makes the recorded calls, in order, with the\n"
      "same arguments, and ends as it ended (or reaches the end of the record of a run that had not finished).\n"
      "Exit: 0 every run replays cleanly; 1 one diverged (the first divergence is printed); 2 usage; 3 basal failed\n\n" +
      Examples({"  basal replay 7\n", "  basal replay 7 --flow orders.js --manifest orders.manifest.json\n",
                "  basal replay --flow orders --version 3 --last 20\n"}));
  replay->callback([o, &exit_code] { exit_code = ReplayCommand(*o); });
}

void AddCheck(CLI::App& app, int& exit_code) {
  auto o = Keep<CheckOptions>();
  CLI::App* check = app.add_subcommand(
      "check", "Check a flow without running it: the manifest is valid and the flow loads in a confined worker");
  check->add_option("flow", o->flow_path, "The flow: an ES module whose default export is (input, host) => result")
      ->required()
      ->type_name("FLOW.js");
  check->add_option("--manifest", o->manifest_path, "The flow's manifest (JSON: grants and budgets)")
      ->required()
      ->type_name("FILE");
  check->add_option("--worker", o->worker_path, kWorkerHelp)->type_name("PATH");
  check->add_option("--worker-user", o->worker_user, kWorkerUserHelp)->type_name("NAME");
  check->add_option("--profile", o->profile, kProfileHelp)->check(CLI::IsMember({"flow", "codemode"}));
  check->add_flag("--allow-without-landlock", o->allow_without_landlock,
                  "Accept workers without Landlock, and then only if this kernel lacks Landlock");
  check->add_option("--db", o->db_path,
                    "The journal whose secrets/ holds the secrets the manifest names (checked: a warning for each "
                    "one not stored). Default: $BASAL_DB, else the default journal")
      ->type_name("FILE");
  check->add_option("--secrets", o->secrets_dir, "Look for the secrets in this directory instead (as basal secret)")
      ->type_name("DIR")
      ->excludes("--db");
#ifdef BASAL_TEST_HOOKS
  check->add_option("--worker-arg", o->worker_args, "Test-hooks worker switch (tests only)")
      ->group(kHiddenGroup)
      ->allow_extra_args(false);
#endif
  check->footer(
      "The flow is compiled and its top level evaluated in a worker confined as for a run, under the manifest's\n"
      "budgets; its default export must be a function, and is not called. Nothing is journaled. A syntax error\n"
      "prints as FLOW.js:LINE: SyntaxError: message.\n"
      "Exit: 0 it loads; 1 it does not (the flow failed); 2 usage; 3 basal itself failed (io, manifest, setup)\n\n" +
      Examples({kCheckExample}));
  check->callback([o, &exit_code] { exit_code = CheckCommand(*o); });
}

void AddJournal(CLI::App& app, int& exit_code) {
  auto o = Keep<JournalOptions>();
  auto activation = std::make_shared<int64_t>(0);
  CLI::App* journal = app.add_subcommand("journal", "Print the journal: activations and their host calls");
  journal->add_option("--db", o->db_path, kDbHelp)->type_name("FILE|URL");
  CLI::Option* id = journal->add_option("--activation", *activation, "Only this activation (its id)")
                        ->type_name("ID")
                        ->check(CLI::Range(int64_t{1}, std::numeric_limits<int64_t>::max()));
  auto run = std::make_shared<int64_t>(0);
  CLI::Option* run_id = journal->add_option("--run", *run, "Every activation of this run (its id), oldest first")
                            ->type_name("RUN")
                            ->check(CLI::Range(int64_t{1}, std::numeric_limits<int64_t>::max()));
  run_id->excludes(id);
  journal->add_option("--limit", o->limit, "The newest N activations, oldest first (default 20; 0: all)")
      ->type_name("N");
  journal->add_flag("--json", o->json, "JSON Lines: one object per activation, with a \"calls\" array");
  journal->add_flag("--source", o->source, "Print the source that ran (with --activation): kept in the journal by its hash")
      ->needs(id);
  CLI::Option* follow = journal->add_flag(
      "--follow", o->follow,
      "Follow a running basal serve: print each activation as it ends, with the error of a failed one, until "
      "interrupted");
  journal->add_option("--socket", o->socket, std::string("With --follow: ") + kSocketHelp)->type_name("PATH")->needs(follow);
  journal->add_option("--url", o->url, std::string("With --follow: ") + kUrlHelp)->type_name("URL")->needs(follow);
  journal->add_option("--token-file", o->token_file, std::string("With --follow: ") + kTokenFileHelp)
      ->type_name("FILE")
      ->needs(follow);
  journal->footer("Exit: 0 read; 2 usage; 3 no journal, or it could not be read\n\n" +
                  Examples({"  basal journal --limit 5\n", "  basal journal --json --limit 1\n",
                            "  basal journal --activation 1 --source\n"}));
  journal->callback([o, activation, id, run, run_id, &exit_code] {
    if (id->count() > 0) o->activation = *activation;
    if (run_id->count() > 0) o->run = *run;
    exit_code = JournalCommand(*o);
  });
}

void AddRuns(CLI::App& app, int& exit_code) {
  auto o = Keep<RunsOptions>();
  CLI::App* runs = app.add_subcommand(
      "runs", "List the run history, newest first: basal serve's runs (API, webhooks, schedules), MCP scripts and "
              "durable runs, filtered; read from the journal, read-only");
  runs->add_option("--flow", o->flow, "Only this flow's runs")->type_name("NAME");
  runs->add_option("--outcome", o->outcome,
                   "Only ended runs with this outcome: ok, script_error, budget_exhausted, deadline, cancelled, "
                   "abandoned, missed, skipped, ... (docs/api.md)")
      ->type_name("OUTCOME");
  // The states as help text, not a CLI::IsMember: the man page cannot break one list of eight
  // (the run filter refuses any other, naming them).
  runs->add_option("--state", o->state,
                   "Only runs in this state: queued, running, ended, interrupted, needs_reconciliation, sleeping, "
                   "waiting, retrying")
      ->type_name("STATE");
  runs->add_option("--trigger", o->trigger,
                   "Only runs of this trigger: a kind (api, webhook, schedule, mcp, cli, embedder) or one trigger "
                   "(webhook:github, schedule:nightly)")
      ->type_name("TRIGGER");
  runs->add_option("--since", o->since,
                   "Only runs created since: an RFC 3339 time (2026-12-04T15:07:02Z), a date (2026-12-04, UTC) or a "
                   "duration back from now (15m, 2h, 7d)")
      ->type_name("TIME");
  runs->add_option("--before", o->before, "Only runs older than RUN (the next page of a listing)")
      ->type_name("RUN")
      ->check(CLI::Range(int64_t{1}, std::numeric_limits<int64_t>::max()));
  runs->add_option("--limit", o->limit, "At most N runs (default 20)")
      ->type_name("N")
      ->check(CLI::Range(size_t{1}, size_t{100000}));
  runs->add_flag("--json", o->json, "JSON Lines: one run per line, as GET /v1/runs/{id} gives it");
  runs->add_option("--db", o->db_path, kDbHelp)->type_name("FILE");
  runs->footer("Exit: 0 listed; 2 usage (a filter names nothing there is); 3 no journal, or it could not be read\n\n" +
               Examples({"  basal runs --limit 5\n", "  basal runs --flow hello --outcome script_error --since 1d\n",
                         "  basal runs --trigger schedule --json\n"}));
  runs->callback([o, &exit_code] { exit_code = RunsCommand(*o); });
}

// The flags of a command that talks to a running basal serve.
void AddDaemonFlags(CLI::App& c, DaemonFlags& flags) {
  CLI::Option* socket = c.add_option("--socket", flags.socket, kSocketHelp)->type_name("PATH");
  CLI::Option* url = c.add_option("--url", flags.url, kUrlHelp)->type_name("URL");
  socket->excludes(url);
  c.add_option("--token-file", flags.token_file, kTokenFileHelp)->type_name("FILE")->needs(url);
}

void AddTail(CLI::App& app, int& exit_code) {
  auto o = Keep<TailOptions>();
  CLI::App* tail = app.add_subcommand(
      "tail", "Follow a running basal serve live: each activation's start and end (with its error), its console "
              "lines and its host calls' decisions, as they happen, until interrupted");
  tail->add_option("--flow", o->flow, "Only this flow's activations")->type_name("NAME");
  tail->add_flag("--json", o->json, "JSON Lines: {\"event\": NAME, \"data\": {...}} per event (docs/api.md)");
  AddDaemonFlags(*tail, *o);
  tail->footer(
      "Lines: TIME FLOW run RUN started | LEVEL: text | call #N NAME DECISION (RULE) STATE | ended OUTCOME in MS ms:\n"
      "ERROR. Everything a flow wrote is escaped. Events this tail could not keep up with are dropped by the\n"
      "daemon and counted in a line of their own. Ends when the daemon stops, or at Ctrl-C.\n"
      "Exit: 0 the daemon ended the stream; 2 usage; 3 the daemon cannot be reached or refused (tail_full)\n\n" +
      Examples({"  basal tail\n", "  basal tail --flow hello --socket /run/basal/basal.sock\n",
                "  basal tail --url http://127.0.0.1:8470 --token-file ~/.config/basal/token\n"}));
  tail->callback([o, &exit_code] { exit_code = TailCommand(*o); });
}

void AddSchedule(CLI::App& app, int& exit_code) {
  auto o = Keep<ScheduleOptions>();
  CLI::App* top = app.add_subcommand("schedule", "See a running basal serve's schedules, and run one now");
  top->require_subcommand(1);
  CLI::App* list = top->add_subcommand("list", "The schedules: cron, time zone, overlap, next and last fire, last run");
  list->add_flag("--json", o->json, "One JSON object per line (GET /v1/schedules)");
  AddDaemonFlags(*list, *o);
  CLI::App* run = top->add_subcommand(
      "run", "Run schedule NAME's flow now, by hand, with its configured input (journaled with who asked)");
  run->add_option("name", o->name, "The schedule's name in basal serve's config")->required()->type_name("NAME");
  run->add_option("--wait", o->wait, "Wait up to this long for the run's end (30s, 2m; at most limits.wait_max)")
      ->type_name("DURATION");
  run->add_flag("--json", o->json, "Print the run as JSON (GET /v1/runs/{id})");
  AddDaemonFlags(*run, *o);
  top->footer("Exit: 0 listed, or the run was accepted (with --wait: ended ok); 1 it ended otherwise; 2 usage (no such\n"
              "schedule); 3 the daemon cannot be reached\n\n" +
              Examples({"  basal schedule list\n", "  basal schedule run nightly --wait 60s\n"}));
  top->callback([top, o, &exit_code] {
    for (const char* action : {"list", "run"})
      if (top->get_subcommand(action)->parsed()) o->action = action;
    exit_code = ScheduleCommand(*o);
  });
}

void AddDoctor(CLI::App& app, int& exit_code) {
  auto o = Keep<DoctorOptions>();
  CLI::App* doctor = app.add_subcommand(
      "doctor", "Check this machine's sandbox: start one worker and show whether basal accepts its confinement");
  doctor->add_option("--worker", o->worker_path, kWorkerHelp)->type_name("PATH");
  doctor->add_option("--worker-user", o->worker_user, kWorkerUserHelp)->type_name("NAME");
  doctor->add_flag("--allow-without-landlock", o->allow_without_landlock,
                   "Judge under the policy that accepts workers without Landlock when the kernel lacks it");
#ifdef BASAL_TEST_HOOKS  // a release basal cannot pass a worker anything that weakens it
  doctor->add_option("--worker-arg", o->worker_args, "Test-hooks worker switch (tests only)")
      ->group(kHiddenGroup)
      ->allow_extra_args(false);
#endif
  doctor->footer(
      "Shows the kernel's Landlock ABI, the ABI required, the welcome's confinement report, the kernel's view\n"
      "of the worker (uid, gid, capabilities, seccomp) and the verdict. Runs no flow.\n"
      "Exit: 0 the worker is accepted; 1 it is refused; 2 usage; 3 basal itself failed (io, setup)\n\n" +
      Examples({"  basal doctor\n"}));
  doctor->callback([o, &exit_code] { exit_code = DoctorCommand(*o); });
}

void AddHealth(CLI::App& app, int& exit_code) {
  CLI::App* health = app.add_subcommand(
      "health", "Explain where health is reported: per running module, so use `basal run ... --health-out FILE`");
  health->footer(std::string(kHealthText) + "\n" +
                 Examples({"  basal run examples/counter.js --manifest examples/counter.manifest.json --inputs "
                           "examples/counter.jsonl --health-out health.json\n"}));
  auto o = Keep<HealthOptions>();
  health->add_option("--socket", o->socket, "A running basal serve's Unix socket: print its health report")->type_name("PATH");
  health->add_option("--url", o->url, "A running basal serve's loopback TCP address, http://ADDRESS:PORT (token in $BASAL_TOKEN)")
      ->type_name("URL");
  health->callback([o, &exit_code] { exit_code = HealthCommand(*o); });
}

// `basal flow ...` and `basal policy ...` (approvals.h): each action is a subcommand of its own.
void AddApprovals(CLI::App& app, int& exit_code, ApprovalKind kind) {
  auto o = Keep<ApprovalOptions>();
  o->kind = kind;
  CLI::App* top = AddApprovalCommands(app, *o, kind);
  if (kind == ApprovalKind::kFlow) {
    top->footer(Examples({"  basal flow approve hello examples/hello.js --manifest examples/hello.manifest.json --yes\n",
                          "  basal flow list\n", "  basal flow show hello\n",
                          "  basal run hello --input '{\"name\":\"ada\"}'\n"}));
  } else {
    top->footer(Examples({"  basal policy approve agents --manifest examples/hello.manifest.json --yes\n",
                          "  basal policy list\n"}));
  }
  top->callback([top, o, &exit_code] { exit_code = ApprovalCommand(*top, *o); });
}

// `basal secret set|list|rm`: the operator's secrets (secret_command.cpp). `set` has no value
// argument on purpose: the value comes from stdin only.
void AddServe(CLI::App& app, int& exit_code) {
  auto o = Keep<ServeOptions>();
  CLI::App* c = app.add_subcommand(
      "serve", "Run the daemon: an HTTP API over a Unix socket (and loopback TCP with tokens) that runs approved "
               "flows for API calls, signed webhooks and cron schedules (docs/serve.md)");
  c->add_option("--config", o->config_path, "The config file (JSON, docs/serve-config.md); none: every default")
      ->type_name("FILE");
  c->add_option("--socket", o->socket_path,
                "The Unix socket to serve (created 0600). Default: listen.socket of the config, else "
                "$RUNTIME_DIRECTORY/basal.sock, $XDG_RUNTIME_DIR/basal/basal.sock or, as root, /run/basal/basal.sock")
      ->type_name("PATH");
  c->add_option("--db", o->db_path, std::string("Overrides the config's db. ") + kDbHelp)->type_name("FILE|URL");
  c->add_option("--worker", o->worker_path, kWorkerHelp)->type_name("PATH");
  c->footer(
      "Only approved flows run (basal flow approve). SIGTERM or SIGINT drains: not ready, nothing new accepted,\n"
      "running activations get limits.drain_timeout, queued runs stay queued for the next start. SIGHUP reloads\n"
      "the config's triggers and limits. Exit: 0 after a drain; 2 usage (a bad config); 3 it could not start\n\n"
      "Examples:\n  basal serve --socket /tmp/basal.sock --db journal.db\n"
      "  curl --unix-socket /tmp/basal.sock -X POST -d '{\"input\": {}}' http://basal/v1/flows/hello/runs?wait=30s\n");
  c->callback([o, &exit_code] { exit_code = ServeCommand(*o); });
}

void AddMcp(CLI::App& app, int& exit_code) {
  auto o = Keep<McpOptions>();
  CLI::App* c = app.add_subcommand(
      "mcp", "Serve the Model Context Protocol on stdin/stdout for an AI agent: its run_script tool runs the agent's "
             "JavaScript confined, under an approved codemode policy, with the policy's tools (docs/codemode.md)");
  c->add_option("--policy", o->policy, "The codemode policy scripts run under (basal policy approve)")
      ->required()
      ->type_name("NAME");
  c->add_option("--db", o->db_path, kDbHelp)->type_name("FILE|URL");
  c->add_option("--worker", o->worker_path, kWorkerHelp)->type_name("PATH");
  c->add_option("--worker-user", o->worker_user, "When run as root: the user workers run as (default basal-worker, else nobody)")
      ->type_name("NAME");
  c->add_flag("--allow-without-landlock", o->allow_without_landlock,
              "Run workers without Landlock, and only when the kernel lacks it (seccomp still applies)");
  c->add_option("--max-workers", o->max_workers, "Global cap on live workers (default 8)")
      ->check(CLI::Range(size_t{1}, size_t{1024}));
  c->add_option("--max-scripts", o->max_scripts, "run_script calls at once; more are answered busy (default 8)")
      ->check(CLI::Range(size_t{1}, size_t{256}));
#ifdef BASAL_TEST_HOOKS
  c->add_option("--worker-arg", o->worker_args, "Test-hooks worker switch (tests only)")
      ->group(kHiddenGroup)
      ->allow_extra_args(false);
#endif
  c->footer(
      "stdout carries MCP messages only; diagnostics go to stderr. The policy's mcp_servers are started at once\n"
      "and stopped at the end. Ends when stdin closes (running scripts finish and are answered first) or on\n"
      "SIGTERM/SIGINT (running scripts are cancelled).\n"
      "Exit: 0 at the end of input; 2 usage; 3 basal failed (journal, worker); 4 the policy is not approved or\n"
      "revoked; 128 + N after signal N\n\n"
      "An MCP client's configuration (e.g. an agent's mcpServers entry):\n"
      "  {\"command\": \"/usr/bin/basal\", \"args\": [\"mcp\", \"--policy\", \"agents\"]}\n");
  c->callback([o, &exit_code] { exit_code = McpCommand(*o); });
}

void AddToken(CLI::App& app, int& exit_code) {
  auto o = Keep<TokenOptions>();
  CLI::App* top = app.add_subcommand("token", "Create, list and revoke the bearer tokens of basal serve's TCP listener");
  top->require_subcommand(1);
  auto db = [&](CLI::App* c) { c->add_option("--db", o->db_path, kDbHelp)->type_name("FILE|URL"); };
  CLI::App* create = top->add_subcommand("create", "Create a token and print it once (only its SHA-256 is stored)");
  create->add_option("--name", o->name, "A name to list and revoke it by")->required()->type_name("NAME");
  create->add_option("--scope", o->scopes, "What it may do: run (start runs), read (runs, calls, flows, journal), "
                                           "metrics, or all; repeat for several")
      ->type_name("SCOPE");
  db(create);
  create->footer("Examples:\n  basal token create --name ci --scope run --scope read\n");
  CLI::App* list = top->add_subcommand("list", "List tokens: names, scopes, who created them (never the tokens)");
  list->add_flag("--json", o->json, "One JSON object per line");
  db(list);
  CLI::App* revoke = top->add_subcommand("revoke", "Revoke token NAME: the daemon refuses it from its next request");
  revoke->add_option("name", o->name, "The token's name")->required()->type_name("NAME");
  db(revoke);
  top->callback([top, o, &exit_code] {
    for (const char* action : {"create", "list", "revoke"})
      if (top->get_subcommand(action)->parsed()) o->action = action;
    exit_code = TokenCommand(*o);
  });
}

void AddKv(CLI::App& app, int& exit_code) {
  auto o = Keep<KvOptions>();
  CLI::App* top = app.add_subcommand(
      "kv", "Read and write the kv store flows use: writes are checked against the approved flows' limits and "
            "journaled with who made them");
  top->require_subcommand(1);
  auto common = [&](CLI::App* c) {
    c->add_option("--namespace", o->ns, "The namespace (as a flow's grants name it)")->required()->type_name("N");
    c->add_option("--db", o->db_path, kDbHelp)->type_name("FILE");
  };
  const std::string key_help = "The key (1 to 1024 bytes)";
  CLI::App* get = top->add_subcommand("get", "Print KEY's value (JSON, escaped)");
  common(get);
  get->add_option("key", o->key, key_help)->required()->type_name("KEY");
  get->add_flag("--json", o->json, "Print {\"namespace\", \"key\", \"value\"} as one JSON line");
  CLI::App* list = top->add_subcommand("list", "List the namespace's keys and values in key byte order");
  common(list);
  list->add_option("--prefix", o->prefix, "Only keys starting with these bytes")->type_name("P");
  list->add_option("--limit", o->limit, "At most N keys (1 to 1000, default 100); at most 8 MiB is read")
      ->type_name("N");
  list->add_flag("--json", o->json, "JSON Lines: {\"key\", \"value\"} per key");
  CLI::App* put = top->add_subcommand(
      "put", "Store VALUE (one JSON value) under KEY, unless it would take the namespace past an approved flow's "
             "limit; journaled with who did it");
  common(put);
  put->add_option("key", o->key, key_help)->required()->type_name("KEY");
  CLI::Option* value = put->add_option("value", o->value, "The value: one JSON value ('\"text\"' for a text), or - to "
                                                          "read it from standard input")
                           ->type_name("VALUE");
  CLI::Option* file = put->add_option("--value-file", o->value_file, "Read the value (JSON) from this file")->type_name("F");
  value->excludes(file);
  put->add_option("--reason", o->reason, "Why: journaled with the write")->type_name("TEXT");
  CLI::App* rm = top->add_subcommand("rm", "Remove KEY (always allowed); journaled with who did it");
  common(rm);
  rm->add_option("key", o->key, key_help)->required()->type_name("KEY");
  rm->add_option("--reason", o->reason, "Why: journaled with the removal")->type_name("TEXT");
  CLI::App* history = top->add_subcommand(
      "history", "The operator's writes to the namespace: who, when, why, what (the value's digest, never the value)");
  common(history);
  history->add_option("--limit", o->limit, "The newest N (default 100; 0: all)")->type_name("N");
  history->add_flag("--json", o->json, "JSON Lines, one write per line");
  top->footer(
      "A put is refused (exit 4) when the value or the namespace would pass the smallest max_value_bytes or quota\n"
      "of any approved flow version granted kv.put, kv.cas or kv.incr on the namespace (the message names the\n"
      "flow, its version and the grant); with none, kv.put's defaults apply. There is no --force: the flow would\n"
      "fail at its next write. Every put and rm is journaled (user, uid, --reason, time, the value's SHA-256).\n"
      "Exit: 0 done; 1 get: no such key; 2 usage (a value that is not JSON); 3 no journal, or it failed; 4 refused\n\n" +
      Examples({"  basal kv put --namespace notes greeting '\"hello\"' --reason 'first note'\n",
                "  basal kv get --namespace notes greeting\n", "  basal kv list --namespace notes --json\n",
                "  basal kv history --namespace notes\n", "  basal kv rm --namespace notes greeting\n"}));
  top->callback([top, o, &exit_code] {
    for (const char* action : {"get", "list", "put", "rm", "history"})
      if (top->get_subcommand(action)->parsed()) o->action = action;
    exit_code = KvCommand(*o);
  });
}

void AddSecret(CLI::App& app, int& exit_code) {
  auto o = Keep<SecretOptions>();
  CLI::App* top = app.add_subcommand(
      "secret", "Store, list and remove the secrets that http.fetch grant rules name as ${secret:NAME} (values are "
                "read from stdin, kept owner-only, never journaled, never shown)");
  top->require_subcommand(1);
  auto where = [&](CLI::App* c) {
    c->add_option("--db", o->db_path, "The journal whose secrets these are: they live in secrets/ beside it. " +
                                          std::string(kDbHelp))
        ->type_name("FILE");
    c->add_option("--secrets", o->secrets_dir, "The secrets directory itself (mode 0700), instead of the one beside "
                                               "the journal")
        ->type_name("DIR");
  };
  const std::string name_help = "The secret's name: a letter or _, then letters, digits or _ (at most 64 bytes)";
  CLI::App* set = top->add_subcommand(
      "set", "Store secret NAME (or replace it): its value is read from stdin, without echo on a terminal");
  set->add_option("name", o->name, name_help)->required()->type_name("NAME");
  where(set);
  set->footer(
      "The value is stdin, minus one trailing line ending (what echo adds): 1 to 8192 bytes, one line, no\n"
      "control character but TAB. It is never taken from the command line. The file is written atomically\n"
      "(mode 0600, in a directory of mode 0700).\n"
      "Exit: 0 stored; 2 usage (a bad name or value); 3 the secrets directory is refused or cannot be written\n\n"
      "Examples:\n  printf '%s' \"$TOKEN\" | basal secret set example_token\n"
      "  basal secret set example_token < token.txt\n");
  CLI::App* list = top->add_subcommand("list", "List the names of the stored secrets (never their values)");
  list->add_flag("--json", o->json, "One JSON object per line: {\"name\": NAME}");
  where(list);
  list->footer("Exit: 0 listed; 3 the secrets directory is refused\n\nExamples:\n  basal secret list\n"
               "  basal secret list --json\n");
  CLI::App* rm = top->add_subcommand("rm", "Remove secret NAME");
  rm->add_option("name", o->name, name_help)->required()->type_name("NAME");
  where(rm);
  rm->footer("Exit: 0 removed; 2 usage; 3 no such secret, or the secrets directory is refused\n\n"
             "Examples:\n  basal secret rm example_token\n");
  top->footer(
      "Secrets live in secrets/ beside the journal (--db FILE; default\n"
      "${XDG_STATE_HOME:-$HOME/.local/state}/basal/secrets), or in --secrets DIR. A grant rule's header\n"
      "\"Bearer ${secret:NAME}\" gets the value when its request is sent; the script, the worker and the\n"
      "journal never see it (docs/cli.md).\n"
      "Exit: 0 ok; 2 usage; 3 a secret not stored, or a secrets directory or file refused (not owner-only)\n\n" +
      Examples({"  basal secret set example_token < examples/example_token.txt\n", "  basal secret list\n",
                "  basal secret rm example_token\n"}));
  top->callback([top, o, &exit_code] {
    for (const char* action : {"set", "list", "rm"})
      if (top->get_subcommand(action)->parsed()) o->action = action;
    exit_code = SecretCommand(*o);
  });
}

// `basal help [COMMAND]`: the same text as `basal --help` or `basal COMMAND --help`, on stdout.
void AddHelp(CLI::App& app, int& exit_code) {
  auto words = std::make_shared<std::vector<std::string>>();
  CLI::App* help = app.add_subcommand(
      "help", "Show the help of basal, or of one command or subcommand (same as COMMAND [SUBCOMMAND] --help)");
  help->add_option("command", *words, "The command, and a subcommand of it, whose help to show")
      ->type_name("COMMAND [SUBCOMMAND]");
  help->footer(Examples({"  basal help run\n", "  basal help flow approve\n"}));
  help->callback([&app, words, &exit_code] {
    const CLI::App* at = &app;
    std::string path = app.get_name();  // "basal", then "basal flow", ...
    for (const std::string& word : *words) {
      const CLI::App* sub = FindCommand(*at, word);
      if (sub == nullptr) {
        exit_code = at == &app ? UnknownCommand(app, word)
                               : Fail(kKindUsage, "unknown command \"" + path + " " + word + "\" (commands of " +
                                                      path + ": " + CommandList(*at) + "; see basal help " +
                                                      at->get_name() + ")");
        return;
      }
      at = sub;
      if (&word != &words->back()) path += " " + word;
    }
    // What `... --help` prints: the main App's own page, or the command's with its path before it.
    WriteStdout(at == &app ? app.get_formatter()->make_help(&app, app.get_name(), CLI::AppFormatMode::Normal)
                           : at->help(path));
    exit_code = kExitOk;
  });
}

}  // namespace

int HealthCommand(const HealthOptions& o) {
  if (o.socket.empty() && o.url.empty()) {
    WriteStdout(kHealthText);
    return kExitOk;
  }
  auto reply = DaemonGet({o.socket, o.url}, "/v1/health", std::chrono::seconds(30));
  if (!reply) return Fail(kKindIo, reply.error().message);
  auto j = nlohmann::json::parse(reply->body, nullptr, false);
  if (reply->status != 200 || j.is_discarded())
    return Fail(kKindIo, "basal serve answered " + std::to_string(reply->status) + ": " + EscapeForTerminal(reply->body));
  WriteStdout(JsonForTerminal(j, 2) + "\n");
  return kExitOk;
}

}  // namespace basal::cli

namespace {

// CLI11 lists the arguments it did not expect last first ("--test-skip-seccomp --worker-arg" for
// `--worker-arg --test-skip-seccomp`): a flag and its value read reversed. They are put back in
// the order they were typed. (An argument with a space in it is split: the message is all CLI11 gives.)
std::string InCommandLineOrder(const CLI::ParseError& e) {
  std::string text = e.what();
  if (dynamic_cast<const CLI::ExtrasError*>(&e) == nullptr) return text;
  const size_t colon = text.find(": ");
  if (colon == std::string::npos) return text;
  std::vector<std::string> words;
  std::string word;
  for (char c : text.substr(colon + 2) + " ") {
    if (c == ' ') {
      if (!word.empty()) words.insert(words.begin(), word);
      word.clear();
    } else {
      word += c;
    }
  }
  std::string out = text.substr(0, colon + 2);
  for (size_t i = 0; i < words.size(); ++i) out += (i ? " " : "") + words[i];
  return out;
}

int Dispatch(int argc, char** argv) {
  using namespace basal::cli;
  using basal::ApprovalKind;
  CLI::App app{"basal runs untrusted JavaScript flows in confined ck-basal-worker processes; every host call "
               "is checked against the flow's manifest and journaled",
               "basal"};
  app.require_subcommand(1);
  app.set_version_flag("--version", VersionText, "Print basal's version and the worker's engine, and exit");
  int exit_code = kExitUsage;  // set by the command that ran
  AddRun(app, exit_code);
  AddCheck(app, exit_code);
  AddJournal(app, exit_code);
  AddRuns(app, exit_code);
  AddTail(app, exit_code);
  AddDoctor(app, exit_code);
  AddHealth(app, exit_code);
  AddApprovals(app, exit_code, ApprovalKind::kFlow);
  AddApprovals(app, exit_code, ApprovalKind::kPolicy);
  AddSecret(app, exit_code);
  AddKv(app, exit_code);
  AddServe(app, exit_code);
  AddMcp(app, exit_code);
  AddToken(app, exit_code);
  AddSchedule(app, exit_code);
  AddReplay(app, exit_code);
  AddHelp(app, exit_code);
  AddGenerate(app, exit_code);  // hidden: man pages and completion scripts from the commands above
  app.footer(
      "Exit codes: 0 ok; 1 the flow failed (an activation's outcome, a flow that does not load; doctor: the\n"
      "worker is refused); 2 usage; 3 basal itself failed (io, manifest, journal, setup); 128+N a signal\n"
      "(docs/cli.md). `basal --version` prints the version.\n\n" +
      Examples({kRunExample, kCheckExample, "  basal journal --limit 5\n", "  basal doctor\n",
                "  basal help run\n"}));

  if (argc < 2) {
    WriteStderr(ShortHelp(app));
    return Fail(kKindUsage, "a command is required (see basal help)");
  }
  // CLI11 would call a word it does not know an extra argument; name it as the command it meant to be.
  const std::string first = argv[1];
  // Hidden: a shell's completion asks for candidates; its words are not basal's to parse.
  if (first == kCompleteCommand) return CompleteCommand(app, std::vector<std::string>(argv + 2, argv + argc));
  const bool command_first = !first.empty() && first[0] != '-';
  if (command_first && FindCommand(app, first) == nullptr) return UnknownCommand(app, first);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForVersion&) {
    WriteStdout(VersionText());
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    const std::string help = command_first && first != "help" ? "basal help " + first : "basal help";
    return Fail(kKindUsage, InCommandLineOrder(e) + " (see " + help + ")");
  }
  return exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  // A closed stdout must be a reported error (EPIPE, then `basal: io: stdout: Broken pipe` and
  // exit 3), not a silent death by SIGPIPE. Workers are spawned with every signal at its default.
  std::signal(SIGPIPE, SIG_IGN);
  return basal::cli::FinishOutput(Dispatch(argc, argv));
}
