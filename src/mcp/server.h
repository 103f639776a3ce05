// The Model Context Protocol's server side, without a transport: JSON-RPC 2.0 messages in, messages
// out. `basal mcp` feeds it the lines of stdin and writes what it sends to stdout (mcp_command.cpp).
//
//   McpServer server(tools, {"basal", "1.0.0", "instructions"}, [](std::string m) { write(m + "\n"); });
//   server.OnMessage(line);   // each message received; answers may be sent later (tools/call)
//
// Two protocol revisions:
// - 2025-11-25 (and 2025-06-18, 2025-03-26): a session opened by `initialize` and
//   `notifications/initialized`; requests before it are refused (-32600).
// - 2026-07-28, stateless: no handshake; each request names its revision in
//   params._meta["io.modelcontextprotocol/protocolVersion"]; `server/discover` says what the server
//   supports; a revision it does not speak is error -32022 with {requested, supported}.
// Methods: initialize, ping, server/discover, tools/list, tools/call; notifications/initialized
// and notifications/cancelled. Anything else is -32601. Batches (JSON arrays) are refused (-32600),
// as both revisions removed them.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "basal/host_call.h"

namespace basal::mcp {

inline constexpr const char* kLegacyRevision = "2025-11-25";
inline constexpr const char* kStatelessRevision = "2026-07-28";
inline constexpr const char* kVersionMetaKey = "io.modelcontextprotocol/protocolVersion";

// JSON-RPC and MCP error codes.
inline constexpr int kParseError = -32700;
inline constexpr int kInvalidRequest = -32600;
inline constexpr int kMethodNotFound = -32601;
inline constexpr int kInvalidParams = -32602;
inline constexpr int kInternalError = -32603;
inline constexpr int kUnsupportedVersion = -32022;

// What the server's tools are. Calls come on the loop thread; `done` may be called later.
class ToolHost {
 public:
  virtual ~ToolHost() = default;
  // The tools/list array: {name, title?, description, inputSchema, outputSchema?, annotations?}.
  virtual Json ListTools() = 0;
  // tools/call. `done` gets a CallToolResult ({content, structuredContent?, isError?}): a tool's
  // failure is a result with isError, not a protocol error. false: no such tool (a protocol
  // error, -32602; `done` is never called). `call_key` identifies the call for Cancel: unique
  // among all McpServers of the process.
  virtual bool CallTool(uint64_t call_key, const std::string& name, const Json& arguments,
                        std::function<void(Json result)> done) = 0;
  // The client cancelled the call (notifications/cancelled): stop it if it still runs. Its `done`
  // may still be called; the server drops that answer.
  virtual void Cancel(uint64_t call_key) = 0;
};

struct ServerInfo {
  std::string name;
  std::string version;
  std::string instructions;
};

class McpServer {
 public:
  using Send = std::function<void(std::string message)>;
  McpServer(ToolHost& tools, ServerInfo info, Send send);
  ~McpServer() { *alive_ = false; }
  McpServer(const McpServer&) = delete;
  McpServer& operator=(const McpServer&) = delete;

  // One message (a JSON text) received from the client. Never throws.
  void OnMessage(std::string_view text);
  // Calls still running (answered later).
  size_t in_flight() const { return in_flight_.size(); }
  // Whether a session was opened with initialize (2025 revisions).
  bool initialized() const { return initialized_; }
  // For a transport that carries one request per exchange (Streamable HTTP without session ids):
  // the client opened its session earlier (it sends the MCP-Protocol-Version header), so this
  // server, made for one request, serves it as within that session.
  void AssumeSession(std::string revision) {
    initialized_ = true;
    session_revision_ = std::move(revision);
  }
  // The client asked for nothing more: every running call is cancelled (its answer is dropped).
  void CancelAll();

 private:
  void Request(const Json& id, const std::string& method, const Json& params);
  void Notification(const std::string& method, const Json& params);
  // `stateless`: a 2026-07-28 request, whose result says it is complete and who answered.
  void Result(const Json& id, Json result, bool stateless = false);
  void Error(const Json& id, int code, std::string message, Json data = nullptr);
  Json Capabilities() const;

  ToolHost& tools_;
  ServerInfo info_;
  Send send_;
  bool initialized_ = false;
  std::string session_revision_;  // what initialize agreed
  // Call keys are unique in the process, so servers that share one ToolHost (one a request, as
  // basal serve's /mcp makes them) never hand it the same key.
  static inline std::atomic<uint64_t> next_key_{1};
  // Calls in flight by the client's request id (as JSON text: ids are strings or numbers).
  std::map<std::string, uint64_t> in_flight_;
  // Cleared when the server is destroyed, so a late `done` does nothing.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace basal::mcp
