// The `basal` subcommands. main.cpp parses the command line into these option structs (CLI11);
// each *Command returns the process exit code (see cli_support.h, docs/cli.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace basal::cli {

struct RunOptions {
  std::string flow_path;              // a file (with --manifest or --policy), else an approved flow's name
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
  std::vector<std::string> worker_args;  // hidden
};

struct JournalOptions {
  std::string db_path;
  std::optional<int64_t> activation;
  size_t limit = 20;  // 0: every activation
  bool json = false;
  bool source = false;  // --source: print the source that ran (needs --activation)
  // --follow: from a running basal serve (--socket PATH or --url URL): every activation as it ends.
  bool follow = false;
  std::string socket;
  std::string url;
};
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
int CheckCommand(const CheckOptions& options);
int JournalCommand(const JournalOptions& options);
int DoctorCommand(const DoctorOptions& options);
int HealthCommand(const HealthOptions& options);
int SecretCommand(const SecretOptions& options);
int ServeCommand(const ServeOptions& options);
int TokenCommand(const TokenOptions& options);

}  // namespace basal::cli
