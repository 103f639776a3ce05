// POST /mcp: the Model Context Protocol over its Streamable HTTP transport, without sessions
// (docs/api.md, "POST /mcp"). With an `mcp` config the daemon serves the codemode of that policy,
// as `basal mcp --policy NAME` does on stdio: each POST carries one JSON-RPC message, read by an
// McpServer made for it, and is answered with its response once that is ready (for run_script,
// when the script's activation has ended). A client that leaves before its answer cancels its
// script.
//
// Invariant: every POST that reaches a server is answered exactly once or its client is gone; its
// server lives until then, and no longer.
//
//   McpEndpoint mcp(config.mcp, log);                 // before the module: its log sink
//   module_options.log_sink = mcp.LogSink();
//   ... open the module ...
//   if (auto s = mcp.Start(*module, loop, secrets_dir); !s) ...;   // approves, starts downstream servers
//   mcp.Handle(request, respond, on_client_gone);
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "basal/module.h"
#include "parent/loop/event_loop.h"
#include "serve/config.h"
#include "serve/http_message.h"

namespace basal::mcp {
class Codemode;
class McpServer;
}  // namespace basal::mcp

namespace basal::serve {

class McpEndpoint {
 public:
  McpEndpoint(std::optional<McpConfig> config, std::function<void(const std::string& line)> log);
  ~McpEndpoint();
  McpEndpoint(const McpEndpoint&) = delete;
  McpEndpoint& operator=(const McpEndpoint&) = delete;

  // For ModuleOptions::log_sink: console.* lines of a codemode script go to its run_script result.
  std::function<void(const HostCallContext&, std::string_view level, std::string_view message)> LogSink();

  // Without an `mcp` config: nothing. Else the codemode of the config's policy: the policy must be
  // approved (kNotFound or kRefused otherwise, saying how to approve it), and its downstream MCP
  // servers are started now (driving the loop), before anything is served.
  Result<void> Start(Module& module, EventLoop& loop, const std::string& secrets_dir);
  bool enabled() const { return codemode_ != nullptr; }

  // A request to /mcp (its method already checked: POST).
  void Handle(const HttpRequest& req, Respond respond, OnClientGone on_client_gone);
  // Scripts running now.
  size_t running() const;
  // {"policy", "scripts_running", "max_scripts"} for /v1/health.
  nlohmann::json HealthJson() const;
  // New requests are refused (503); running scripts run on.
  void Drain() { draining_ = true; }
  // Drops the pending exchanges and stops the policy's downstream MCP servers.
  void Stop();

 private:
  struct Exchange;
  void Answer(uint64_t exchange, std::string message);
  void End(uint64_t exchange);

  std::optional<McpConfig> config_;
  std::function<void(const std::string&)> log_;
  EventLoop* loop_ = nullptr;
  // The module's log sink reaches the codemode through this (the module is opened before it).
  std::shared_ptr<mcp::Codemode*> codemode_for_logs_ = std::make_shared<mcp::Codemode*>(nullptr);
  std::unique_ptr<mcp::Codemode> codemode_;
  bool draining_ = false;
  uint64_t next_exchange_ = 1;
  std::map<uint64_t, std::unique_ptr<Exchange>> exchanges_;
};

}  // namespace basal::serve
