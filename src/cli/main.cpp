// basal: run flows in confined workers, read the journal, check the sandbox (docs/cli.md).
#include <csignal>
#include <cstdio>
#include <limits>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/approvals.h"
#include "cli/cli_support.h"
#include "cli/commands.h"

namespace basal::cli {
namespace {

constexpr const char* kHiddenGroup = "";  // CLI11: options in the empty group are not listed

constexpr const char* kDbHelp =
    "SQLite journal (WAL). Default: ${XDG_STATE_HOME:-$HOME/.local/state}/basal/journal.db, "
    "its directory created 0700";
constexpr const char* kWorkerHelp = "ck-basal-worker binary. Default: ck-basal-worker beside the basal binary";
constexpr const char* kWorkerUserHelp =
    "When basal runs as root: the unprivileged user its workers run as (with every capability dropped). "
    "Default: basal-worker if that user exists, else nobody. Refused for a user with uid or gid 0, and when "
    "basal does not run as root";

constexpr const char* kHealthText =
    "Health is kept per running module, in memory: a module is the parent of one `basal run`, and\n"
    "its report (workers live, idle and busy; activations ok and failed by kind; retirements;\n"
    "deadline kills; worker_confinement (SIGSYS) deaths; refused welcomes; crashes; queue length)\n"
    "ends with it. `basal health` therefore runs nothing. To see a module's health, ask the run\n"
    "for it:\n"
    "\n"
    "  basal run FLOW.js --manifest M.json --inputs FILE.jsonl --health-out health.json\n"
    "\n"
    "An embedder reads the same JSON from Module::HealthReport() (see docs/cli.md).\n";

CLI::App* AddRun(CLI::App& app, RunOptions& o) {
  CLI::App* run = app.add_subcommand(
      "run", "Run a flow: the approved flow NAME, a file with its manifest (ad hoc), or an agent's script under a "
             "codemode policy; one activation (--input) or one per line (--inputs)");
  run->add_option("flow", o.flow_path,
                  "NAME of an approved flow (basal flow approve); or FLOW.js, an ES module whose default export is "
                  "(input, host) => result, with --manifest (ad hoc) or --policy (codemode)")
      ->required()
      ->type_name("NAME|FLOW.js");
  CLI::Option* manifest = run->add_option("--manifest", o.manifest_path,
                                          "Run FLOW.js ad hoc with this manifest (JSON: grants and budgets); journaled "
                                          "as ad hoc with its source and manifest text")
                              ->type_name("FILE");
  CLI::Option* policy = run->add_option("--policy", o.policy,
                                        "Run SCRIPT.js, an agent's script, under this approved codemode policy "
                                        "(basal policy approve)")
                            ->type_name("NAME");
  manifest->excludes(policy);
  run->add_flag("--require-approval", o.require_approval,
                "Refuse ad hoc runs (--manifest): only approved flows and codemode policies run");
  CLI::Option* input = run->add_option("--input", o.input, "The activation's input, one JSON value (default: null)")
                             ->type_name("JSON");
  CLI::Option* inputs = run->add_option(
      "--inputs", o.inputs_path,
      "JSON Lines file ('-' for stdin): one activation per non-empty line, through the pool; prints one "
      "{\"activation\", \"ok\"|\"error\"} line per input, in input order")
                              ->type_name("FILE.jsonl");
  input->excludes(inputs);
  run->add_option("--concurrency", o.concurrency,
                  "With --inputs: at most K activations submitted at once (default 1: one after another, "
                  "on one reused worker); --max-workers still caps the workers")
      ->check(CLI::Range(size_t{1}, size_t{4096}))
      ->needs(inputs);
  run->add_option("--db", o.db_path, kDbHelp)->type_name("FILE");
  run->add_option("--worker", o.worker_path, kWorkerHelp)->type_name("PATH");
  run->add_option("--worker-user", o.worker_user, kWorkerUserHelp)->type_name("NAME");
  run->add_option("--durability", o.durability,
                  "Journal durability: normal (survives a crash of basal; default) or full (also power loss)")
      ->check(CLI::IsMember({"normal", "full"}));
  run->add_option("--profile", o.profile, "With --manifest: worker profile flow (default) or codemode")
      ->check(CLI::IsMember({"flow", "codemode"}))
      ->needs(manifest);
  run->add_flag("--allow-without-landlock", o.allow_without_landlock,
                "Accept workers without Landlock, and then only if this kernel lacks Landlock");
  run->add_option("--health-out", o.health_out, "Write the module's final health report (JSON) to FILE")
      ->type_name("FILE");
  run->add_option("--max-workers", o.max_workers, "Global cap on live workers; further activations queue (default 8)")
      ->check(CLI::Range(size_t{1}, size_t{1024}));
#ifdef BASAL_TEST_HOOKS  // a release basal cannot pass a worker anything that weakens it
  run->add_option("--worker-arg", o.worker_args, "Test-hooks worker switch (tests only)")
      ->group(kHiddenGroup)
      ->allow_extra_args(false);
#endif
  return run;
}

CLI::App* AddJournal(CLI::App& app, JournalOptions& o, int64_t& activation, CLI::Option*& id) {
  CLI::App* journal = app.add_subcommand("journal", "Print the journal: activations and their host calls");
  journal->add_option("--db", o.db_path, kDbHelp)->type_name("FILE");
  id = journal->add_option("--activation", activation, "Only this activation (its id)")
           ->type_name("ID")
                        ->check(CLI::Range(int64_t{1}, std::numeric_limits<int64_t>::max()));
  journal->add_option("--limit", o.limit, "The newest N activations, oldest first (default 20; 0: all)")
      ->type_name("N");
  journal->add_flag("--json", o.json, "JSON Lines: one object per activation, with a \"calls\" array");
  journal->add_flag("--source", o.source, "Print the source that ran (with --activation): kept in the journal by its hash")
      ->needs(id);
  return journal;
}

CLI::App* AddDoctor(CLI::App& app, DoctorOptions& o) {
  CLI::App* doctor = app.add_subcommand(
      "doctor",
      "Start one worker and show the kernel's Landlock ABI, the ABI required, the welcome's confinement "
      "report, the kernel's view of the worker (uid, gid, capabilities, seccomp) and whether basal accepts "
      "it (exit 0 if accepted, 1 if not)");
  doctor->add_option("--worker", o.worker_path, kWorkerHelp)->type_name("PATH");
  doctor->add_option("--worker-user", o.worker_user, kWorkerUserHelp)->type_name("NAME");
  doctor->add_flag("--allow-without-landlock", o.allow_without_landlock,
                   "Judge under the policy that accepts workers without Landlock when the kernel lacks it");
#ifdef BASAL_TEST_HOOKS  // a release basal cannot pass a worker anything that weakens it
  doctor->add_option("--worker-arg", o.worker_args, "Test-hooks worker switch (tests only)")
      ->group(kHiddenGroup)
      ->allow_extra_args(false);
#endif
  return doctor;
}

CLI::App* AddHealth(CLI::App& app) {
  CLI::App* health = app.add_subcommand(
      "health",
      "Explain where health is reported: per running module, so use `basal run ... --health-out FILE`");
  health->footer(kHealthText);
  return health;
}

}  // namespace

int HealthCommand() {
  WriteStdout(kHealthText);
  return kExitOk;
}

}  // namespace basal::cli

namespace {

int Dispatch(int argc, char** argv) {
  using namespace basal::cli;
  using basal::ApprovalKind;
  CLI::App app{"basal: runs untrusted JavaScript flows in confined ck-basal-worker processes; every host call "
               "is checked against the flow's manifest and journaled"};
  app.require_subcommand(1);
  RunOptions run;
  JournalOptions journal;
  int64_t activation = 0;
  DoctorOptions doctor;
  CLI::Option* activation_option = nullptr;
  CLI::App* run_command = AddRun(app, run);
  CLI::App* journal_command = AddJournal(app, journal, activation, activation_option);
  CLI::App* doctor_command = AddDoctor(app, doctor);
  CLI::App* health_command = AddHealth(app);
  ApprovalOptions flows, policies;
  flows.kind = ApprovalKind::kFlow;
  policies.kind = ApprovalKind::kPolicy;
  CLI::App* flow_command = AddApprovalCommands(app, flows, ApprovalKind::kFlow);
  CLI::App* policy_command = AddApprovalCommands(app, policies, ApprovalKind::kPolicy);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    ReportError(kKindUsage, std::string(e.what()) + " (see basal --help)");
    return kExitUsage;
  }
  if (run_command->parsed()) return RunCommand(run);
  if (journal_command->parsed()) {
    if (activation_option->count() > 0) journal.activation = activation;
    return JournalCommand(journal);
  }
  if (doctor_command->parsed()) return DoctorCommand(doctor);
  if (health_command->parsed()) return HealthCommand();
  if (flow_command->parsed()) return ApprovalCommand(*flow_command, flows);
  if (policy_command->parsed()) return ApprovalCommand(*policy_command, policies);
  ReportError(kKindUsage, "no command given (see basal --help)");
  return kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
  // A closed stdout must be a reported error (EPIPE, then `basal: io: stdout: Broken pipe` and
  // exit 1), not a silent death by SIGPIPE. Workers are spawned with every signal at its default.
  std::signal(SIGPIPE, SIG_IGN);
  return basal::cli::FinishOutput(Dispatch(argc, argv));
}
