// Codemode over MCP: what `basal mcp --policy NAME` serves (docs/codemode.md). Three tools:
//
//   run_script {code, input?}   an agent's JavaScript, run as a codemode activation under the
//                               newest approved version of the policy; its tools are host calls
//   list_tools {}               one line per tool the script can call
//   describe_tools {names}      TypeScript declarations of those tools, from their JSON Schemas
//
// The script's tools are the host calls the policy grants by name (kv.get, http.fetch, an
// embedder's own) and the tools of the downstream MCP servers the policy lists (mcp_servers),
// each a host call `mcp.<server>.<tool>` that the parent checks against the policy's grants,
// validates against the tool's input schema, journals, and only then forwards.
//
// Loop thread only, like the module it drives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "basal/module.h"
#include "mcp/downstream.h"
#include "mcp/json_schema.h"
#include "mcp/server.h"
#include "parent/module_host.h"

namespace basal::mcp {

// What one agent session can make basal hold. Each is a bound a test reaches.
struct CodemodeLimits {
  size_t max_code_bytes = 1u << 20;          // run_script's code (the journal keeps every script)
  size_t max_scripts_running = 8;            // run_scripts at once; more are answered "busy"
  size_t max_result_bytes = 64u << 10;       // a result's JSON in structuredContent; past it: cut
  size_t max_text_result_bytes = 4u << 10;   // the result in the text rendering
  size_t max_log_lines = 200;                // console lines returned (all are journaled)
  size_t max_log_bytes = 32u << 10;          // their bytes
  size_t max_calls_listed = 200;             // calls[] entries; the rest are counted
  size_t max_describe_names = 100;           // describe_tools' names
  size_t max_declaration_bytes = 64u << 10;  // describe_tools' text
  // JSON values of the schemas describe_tools parses for one answer (each tool's at most
  // DownstreamLimits::max_tool_values): tools past it are named as not described.
  size_t max_describe_values = 256u << 10;
};

// A tool of the script: tools.<group>.<member>(args) is host call `host_call`.
struct ScriptTool {
  std::string host_call;  // "kv.get", "mcp.fs.read_text_file"
  std::string group;      // "kv", "fs"
  std::string member;     // "get", "read_text_file"
  std::string description;
  // As JSON text, parsed for one use at a time (ParseSchema): a downstream server's schemas are
  // kept as text (downstream.h). Null: unknown.
  SchemaText input_schema;
  SchemaText result_schema;
};

// A policy's downstream servers, started from its mcp_servers when `basal mcp` starts.
class DownstreamHub {
 public:
  DownstreamHub(EventLoop& loop, std::string client_version) : loop_(loop), client_version_(std::move(client_version)) {}
  // Starts every server of `servers` (Manifest::mcp_servers()), reading `${secret:NAME}` env values
  // from `secrets_dir`. Each server's environment is PATH and HOME of this process and its own env.
  // `drive` runs the loop (Module::RunFor) until `ready` says every server has answered or failed.
  void StartAll(const std::map<std::string, Json>& servers, const std::string& secrets_dir,
                const std::function<void(const std::function<bool()>& ready)>& drive);
  // A server by name (ready or not), or null.
  Downstream* Find(std::string_view name);
  // Servers that are not ready: name -> why.
  std::map<std::string, std::string> Unavailable() const;
  // The mcp_servers these servers were started from.
  const std::map<std::string, Json>& configs() const { return configs_; }
  void StopAll();

 private:
  EventLoop& loop_;
  std::string client_version_;
  std::map<std::string, Json> configs_;
  std::map<std::string, std::unique_ptr<Downstream>, std::less<>> servers_;
  std::map<std::string, std::string> failed_;  // could not even be configured (a secret missing)
  std::map<std::string, std::string> start_errors_;
  // What all servers' tool lists keep together (DownstreamLimits::shared_tools): 64 MiB of text.
  std::shared_ptr<SharedToolBudget> shared_tools_ = std::make_shared<SharedToolBudget>();
};

class Codemode : public ToolHost {
 public:
  Codemode(Module& module, std::string policy, std::string basal_version, CodemodeLimits limits = {});
  ~Codemode() override;

  // Reads the policy (kNotFound / kRefused when it is not approved or revoked), starts its
  // downstream servers (driving the module's loop until each is ready or failed) and takes over
  // the `mcp.*` host calls so that they reach those servers.
  Result<void> Start(const std::string& secrets_dir);
  // The module's log sink calls this for every console line: a running script's lines are kept
  // for its result.
  void OnLog(const HostCallContext& context, std::string_view level, std::string_view message);
  // The server's instructions for the agent (MCP initialize / server/discover).
  std::string Instructions() const;
  // Scripts still running.
  size_t running() const { return runs_.size(); }
  // Told of each script's run that stops (basal serve logs it as it logs every run).
  void OnRunStopped(std::function<void(const RunStop&)> fn) { on_run_stopped_ = std::move(fn); }
  // The policy's downstream servers that are not running, with why (for a log at start).
  std::map<std::string, std::string> UnavailableServers() const {
    return hub_ ? hub_->Unavailable() : std::map<std::string, std::string>{};
  }
  // The tools a script gets now (granted by the newest policy, downstream tools listed).
  std::vector<ScriptTool> ScriptTools();
  // The same for a policy version already read.
  std::vector<ScriptTool> ScriptTools(const Manifest& policy);

  // ToolHost
  Json ListTools() override;
  bool CallTool(uint64_t call_key, const std::string& name, const Json& arguments,
                std::function<void(Json result)> done) override;
  void Cancel(uint64_t call_key) override;

 private:
  struct Run;
  void RunScript(uint64_t call_key, const Json& arguments, std::function<void(Json)> done);
  void Finish(uint64_t call_key, const ActivationResult& result);
  Json ListToolsResult();
  Json DescribeToolsResult(const Json& arguments);
  void ServeDownstream(const HostCallContext& context, const Json& args, HostCallReply reply);

  Module& module_;
  std::string policy_;
  std::string basal_version_;
  CodemodeLimits limits_;
  int64_t policy_version_ = 0;
  Budgets budgets_;
  std::unique_ptr<DownstreamHub> hub_;
  std::map<uint64_t, std::unique_ptr<Run>> runs_;       // by the server's call key
  std::map<RunId, uint64_t> call_of_run_;               // a running script's run -> call key
  std::map<int64_t, uint64_t> run_of_activation_;       // activation id -> call key (found at its first log line)
  std::map<int64_t, std::vector<std::pair<std::string, uint64_t>>> downstream_calls_;  // activation -> (server, token)
  std::function<void(const RunStop&)> on_run_stopped_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

// The name of every script's flow in the journal and the runs (`flow: "run_script.js"`).
inline constexpr const char* kScriptName = "run_script.js";

// The pure parts, for their unit tests.
// A script is a module when a line starts with `export` or `import`; otherwise it is the body of
// an async function (input, host, tools), wrapped on its first line so that line numbers hold.
bool IsModuleSource(std::string_view code);
std::string WrapScript(std::string_view code);
// When a script failed to compile: whether it looks like TypeScript, and the line and text that
// say so ("line 2: `: number`"); empty when it does not.
std::string TypeScriptEvidence(std::string_view code);
// `text` cut to `max` bytes at a UTF-8 boundary, with " ... [N bytes cut]" when cut.
std::string CutText(std::string_view text, size_t max);

}  // namespace basal::mcp
