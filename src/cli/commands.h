// The `basal` subcommands. main.cpp parses the command line into these option structs (CLI11);
// each *Command returns the process exit code (see cli_support.h, docs/cli.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "basal/result.h"

namespace basal {
struct RunStop;
}

namespace basal::cli {

// A durable run that parked (sleeping, waiting, retrying): says when and how it goes on, returns
// kExitWaiting. Shared by `basal run` and `basal run resolve|--resume`.
int ReportParkedStop(const RunStop& stop);

struct RunOptions {
  std::string flow_path;              // a file (with --manifest or --policy), else an approved flow's name
  int64_t resume = 0;                 // --resume RUN: resume that interrupted durable run instead
  bool newest_version = false;        // --newest-version: resume it under the flow's newest approved version
  std::string manifest_path;          // empty: run the approved flow named flow_path
  std::string policy;                 // --policy NAME: flow_path is an agent's script under that codemode policy
  bool require_approval = false;      // --require-approval: refuse ad hoc runs
  std::string input = "null";         // --input: one JSON value
  std::string inputs_path;            // --inputs FILE.jsonl ("-" = stdin): many activations
  size_t concurrency = 1;             // --concurrency K: at most K activations submitted at once
  std::string db_path;                // empty: the default journal
  std::string worker_path;            // empty: ck-basal-worker beside basal
  std::string worker_user;            // --worker-user NAME (root only); empty: basal-worker, else nobody
  std::string durability = "normal";  // normal | full
  std::string profile = "flow";       // flow | codemode
  bool allow_without_landlock = false;
  std::string health_out;             // --health-out FILE: the module's health report (JSON)
  size_t max_workers = 8;
  bool logs = false;                  // --logs: console.* lines on stderr as they happen
  std::vector<std::string> worker_args;  // hidden: test-hooks worker switches
};

// `basal check FLOW.js --manifest M.json`: the manifest is valid and the flow loads in a worker.
struct CheckOptions {
  std::string flow_path;
  std::string manifest_path;
  std::string worker_path;
  std::string worker_user;
  std::string profile = "flow";
  bool allow_without_landlock = false;
  std::string db_path;      // where the secrets the manifest names are looked for: secrets/ beside it
  std::string secrets_dir;  // or this directory (as basal secret --secrets)
  std::vector<std::string> worker_args;  // hidden
};

struct JournalOptions {
  std::string db_path;
  std::optional<int64_t> activation;
  std::optional<int64_t> run;  // --run RUN: every activation of that run (a durable run resumed has several)
  size_t limit = 20;  // 0: every activation
  bool json = false;
  bool source = false;  // --source: print the source that ran (needs --activation)
  // --follow: from a running basal serve (--socket PATH or --url URL, else the default socket):
  // every activation as it ends.
  bool follow = false;
  std::string socket;
  std::string url;
  std::string token_file;  // --token-file FILE: the TCP token (else $BASAL_TOKEN)
};
// `basal runs`: the run history, from the store read-only (operator_commands.cpp).
struct RunsOptions {
  std::string flow, outcome, state, trigger, since;  // "" : no such filter (serve/run_filter.h)
  int64_t before = 0;  // --before RUN: only runs older than RUN (the next page)
  size_t limit = 20;
  bool json = false;
  std::string db_path;
};
// How the CLI reaches a running basal serve (daemon_client.h: ResolveDaemonAddress).
struct DaemonFlags {
  std::string socket, url, token_file;
};
// `basal tail [--flow NAME]`: a running daemon's live tail (GET /v1/tail).
struct TailOptions : DaemonFlags {
  std::string flow;
  bool json = false;
};
// `basal schedule list | run NAME [--wait D]`: a running daemon's schedules.
struct ScheduleOptions : DaemonFlags {
  std::string action;  // list | run
  std::string name;
  std::string wait;    // run: ?wait=
  bool json = false;
};
int RunsCommand(const RunsOptions& options);
int TailCommand(const TailOptions& options);
int ScheduleCommand(const ScheduleOptions& options);

// `basal health [--socket PATH | --url URL]`: a running daemon's health report.
struct HealthOptions {
  std::string socket;
  std::string url;
  bool json = false;
};

struct DoctorOptions {
  std::string worker_path;
  std::string worker_user;
  bool allow_without_landlock = false;
  std::vector<std::string> worker_args;  // hidden
};

// `basal kv get|list|put|rm|history --namespace N` (kv_command.cpp, docs/cli.md): the kv store
// flows use, read and written by the operator; writes journaled with who made them.
struct KvOptions {
  std::string action;      // get | list | put | rm | history
  std::string ns;          // --namespace
  std::string key;         // get, put, rm
  std::string value;       // put: VALUE (JSON), or "-" for stdin
  std::string value_file;  // put: --value-file FILE
  std::string prefix;      // list
  size_t limit = 100;      // list (1..1000), history (0: all)
  bool json = false;       // get, list, history
  std::string reason;      // put, rm: --reason TEXT, journaled
  std::string db_path;
};
int KvCommand(const KvOptions& options);

// `basal secret set NAME | list [--json] | rm NAME` (secret_command.cpp). The value of `set` comes
// from stdin only: there is no option that could carry it in argv.
struct SecretOptions {
  std::string action;       // set | list | rm
  std::string name;         // set, rm
  bool json = false;        // list
  std::string db_path;      // --db: the secrets live in `secrets/` beside this journal
  std::string secrets_dir;  // --secrets DIR: here instead
};

// `basal serve [--config FILE] [--socket PATH] [--db FILE] [--worker PATH]` (serve_command.cpp).
struct ServeOptions {
  std::string config_path;
  std::string socket_path;
  std::string db_path;
  std::string worker_path;
};
// `basal mcp --policy NAME [--db FILE] [--worker PATH]` (mcp_command.cpp): an MCP server on
// stdin/stdout whose run_script runs agents' scripts under codemode policy NAME.
struct McpOptions {
  std::string policy;
  std::string db_path;
  std::string worker_path;
  std::string worker_user;
  bool allow_without_landlock = false;
  size_t max_workers = 8;
  size_t max_scripts = 8;  // run_scripts at once
  std::vector<std::string> worker_args;  // hidden: test-hooks worker switches
};
int McpCommand(const McpOptions& options);

// `basal token create --name NAME --scope SCOPE... | list [--json] | revoke NAME` (serve_command.cpp).
struct TokenOptions {
  std::string action;  // create | list | revoke
  std::string name;
  std::vector<std::string> scopes;
  bool json = false;
  std::string db_path;
};
int RunCommand(const RunOptions& options);
// `basal run resolve RUN --call N --result JSON | --error MESSAGE | --retry`, `basal run cancel RUN`,
// `basal replay ...` (durable_command.cpp, docs/durable.md).
struct ResolveOptions {
  int64_t run = 0;
  int64_t call = 0;
  std::optional<std::string> result;  // --result JSON
  std::optional<std::string> error;   // --error MESSAGE
  bool retry = false;                 // --retry
  std::string note;
  bool no_resume = false;             // --no-resume: record the decision only
  std::string db_path, worker_path, worker_user;
  bool allow_without_landlock = false;
  std::vector<std::string> worker_args;  // hidden
};
struct CancelRunOptions {
  int64_t run = 0;
  std::string note;
  std::string db_path, worker_path;
};
struct SignalOptions {
  int64_t run = 0;
  std::string name;                 // the event's name
  std::optional<std::string> data;  // --data JSON (default null)
  std::string db_path, worker_path;
};
struct ReplayOptions {
  int64_t run = 0;                    // a run; 0 with --flow NAME --version N --last K
  std::string flow;                   // FILE.js (with RUN and --manifest) or NAME (with --version and --last)
  std::string manifest_path;
  int64_t version = 0;
  size_t last = 0;
  std::string db_path, worker_path, worker_user;
  bool allow_without_landlock = false;
  std::vector<std::string> worker_args;  // hidden
};
int ResolveCommand(const ResolveOptions& options);
int CancelRunCommand(const CancelRunOptions& options);
int SignalCommand(const SignalOptions& options);
int ReplayCommand(const ReplayOptions& options);
// Replays the last `last` durable runs of flow `name` in the journal `db_path` against the given
// source and manifest (basal replay --flow NAME --version N --last K, basal flow approve --replay K):
// one line each on stdout. Returns how many diverged, or an error.
Result<size_t> ReplayRecentRuns(const std::string& db_path, const std::string& worker_path, const std::string& name,
                                const std::string& source, const std::string& manifest_text, size_t last);
int CheckCommand(const CheckOptions& options);
int JournalCommand(const JournalOptions& options);
int DoctorCommand(const DoctorOptions& options);
int HealthCommand(const HealthOptions& options);
int SecretCommand(const SecretOptions& options);
int ServeCommand(const ServeOptions& options);
int TokenCommand(const TokenOptions& options);

}  // namespace basal::cli
