// The MCP protocol core (server.h): JSON-RPC 2.0 requests to ToolHost calls, both revisions.
#include "mcp/server.h"

#include <utility>
#include <vector>

#include "protocol/messages.h"

namespace basal::mcp {
namespace {

// The 2025 revisions a client may ask for in initialize; the newest is answered to any other.
constexpr const char* kSessionRevisions[] = {"2025-11-25", "2025-06-18", "2025-03-26"};

bool IsSessionRevision(const std::string& version) {
  for (const char* v : kSessionRevisions) {
    if (version == v) return true;
  }
  return false;
}

Json SupportedVersions() {
  Json out = Json::array({kStatelessRevision});
  for (const char* v : kSessionRevisions) out.push_back(v);
  return out;
}

std::string ServerDump(const Json& value) { return value.dump(-1, ' ', false, Json::error_handler_t::replace); }

}  // namespace

McpServer::McpServer(ToolHost& tools, ServerInfo info, Send send)
    : tools_(tools), info_(std::move(info)), send_(std::move(send)) {}

void McpServer::Result(const Json& id, Json result, bool stateless) {
  if (stateless && result.is_object()) {
    result["resultType"] = "complete";
    if (!result.contains("_meta") || !result["_meta"].is_object()) result["_meta"] = Json::object();
    result["_meta"]["io.modelcontextprotocol/serverInfo"] = Json{{"name", info_.name}, {"version", info_.version}};
  }
  send_(ServerDump(Json{{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}}));
}

void McpServer::Error(const Json& id, int code, std::string message, Json data) {
  Json error = {{"code", code}, {"message", std::move(message)}};
  if (!data.is_null()) error["data"] = std::move(data);
  send_(ServerDump(Json{{"jsonrpc", "2.0"}, {"id", id}, {"error", std::move(error)}}));
}

Json McpServer::Capabilities() const { return Json{{"tools", Json{{"listChanged", false}}}}; }

void McpServer::OnMessage(std::string_view text) {
  // The protocol's reader: NUL bytes refused, nesting bounded before the tree is built.
  Json message;
  std::string why;
  if (!protocol::ParseJsonValue(text, message, why))
    return Error(nullptr, kParseError, "not a JSON-RPC message (" + why + "): each message is one JSON object");
  if (message.is_array())
    return Error(nullptr, kInvalidRequest, "JSON-RPC batches are not supported (MCP removed them): send one message at a time");
  if (!message.is_object() || message.value("jsonrpc", Json()) != "2.0")
    return Error(nullptr, kInvalidRequest, "a message is a JSON object with \"jsonrpc\": \"2.0\"");
  auto method = message.find("method");
  auto id = message.find("id");
  if (method == message.end()) return;  // a response or error from the client: basal sends no requests
  if (!method->is_string()) {
    return Error(id != message.end() && (id->is_string() || id->is_number()) ? *id : Json(), kInvalidRequest,
                 "\"method\" must be a string");
  }
  Json params = message.value("params", Json::object());
  if (!params.is_object()) params = Json::object();
  if (id == message.end()) return Notification(method->get<std::string>(), params);
  if (!id->is_string() && !id->is_number_integer())
    return Error(nullptr, kInvalidRequest, "a request's \"id\" must be a string or an integer");
  try {
    Request(*id, method->get<std::string>(), params);
  } catch (const std::exception& e) {  // a bug of ours: the client hears it, the server goes on
    Error(*id, kInternalError, std::string("basal failed to serve the request: ") + e.what());
  }
}

void McpServer::Notification(const std::string& method, const Json& params) {
  if (method == "notifications/initialized") return;
  if (method == "notifications/cancelled") {
    auto request = params.find("requestId");
    if (request == params.end()) return;
    auto it = in_flight_.find(ServerDump(*request));
    if (it == in_flight_.end()) return;
    const uint64_t key = it->second;
    in_flight_.erase(it);  // its answer is not sent (the spec: the receiver should not respond)
    tools_.Cancel(key);
  }
  // Other notifications (progress, roots changed, ...) ask nothing of basal.
}

void McpServer::Request(const Json& id, const std::string& method, const Json& params) {
  if (method == "initialize") {
    const std::string asked = params.value("protocolVersion", Json()).is_string() ? params["protocolVersion"].get<std::string>() : "";
    session_revision_ = IsSessionRevision(asked) ? asked : kLegacyRevision;
    initialized_ = true;
    return Result(id, Json{{"protocolVersion", session_revision_},
                           {"capabilities", Capabilities()},
                           {"serverInfo", Json{{"name", info_.name}, {"version", info_.version}}},
                           {"instructions", info_.instructions}});
  }
  // The stateless revision: the request names its revision in _meta.
  const Json meta = params.value("_meta", Json::object());
  const bool stateless = meta.is_object() && meta.contains(kVersionMetaKey);
  if (stateless) {
    const Json& asked = meta[kVersionMetaKey];
    if (asked != kStatelessRevision && !(asked.is_string() && IsSessionRevision(asked.get<std::string>()) && initialized_)) {
      return Error(id, kUnsupportedVersion,
                   "basal does not speak MCP revision " + ServerDump(asked) + "; it speaks " + ServerDump(SupportedVersions()),
                   Json{{"requested", asked}, {"supported", SupportedVersions()}});
    }
  }
  if (method == "server/discover") {
    // Cacheable results say for how long: not at all (a policy's new version may change the tools),
    // and only for this client.
    return Result(id,
                  Json{{"supportedVersions", SupportedVersions()},
                       {"capabilities", Capabilities()},
                       {"serverInfo", Json{{"name", info_.name}, {"version", info_.version}}},
                       {"instructions", info_.instructions},
                       {"ttlMs", 0},
                       {"cacheScope", "private"}},
                  true);
  }
  if (method == "ping") return Result(id, Json::object(), stateless);
  if (!stateless && !initialized_) {
    return Error(id, kInvalidRequest,
                 "no session: send initialize first (revision " + std::string(kLegacyRevision) +
                     "), or name the revision in params._meta[\"" + kVersionMetaKey + "\"] (" + kStatelessRevision + ")");
  }
  if (method == "tools/list") {
    Json result = {{"tools", tools_.ListTools()}};
    if (stateless) {
      result["ttlMs"] = 0;
      result["cacheScope"] = "private";
    }
    return Result(id, std::move(result), stateless);
  }
  if (method == "tools/call") {
    auto name = params.find("name");
    if (name == params.end() || !name->is_string()) return Error(id, kInvalidParams, "tools/call needs params.name, a string");
    Json arguments = params.value("arguments", Json::object());
    if (!arguments.is_object()) return Error(id, kInvalidParams, "tools/call's params.arguments must be an object");
    const std::string key_text = ServerDump(id);
    if (in_flight_.count(key_text) != 0)
      return Error(id, kInvalidRequest, "request id " + key_text + " is already in use by a call that still runs");
    const uint64_t key = next_key_++;
    in_flight_[key_text] = key;
    std::weak_ptr<bool> alive = alive_;
    bool known = false;
    try {
      known = tools_.CallTool(key, name->get<std::string>(), arguments, [this, alive, id, key_text, key, stateless](Json result) {
      if (alive.expired() || !*alive.lock()) return;
      auto it = in_flight_.find(key_text);
      if (it == in_flight_.end() || it->second != key) return;  // cancelled: nobody waits for it
      in_flight_.erase(it);
      Result(id, std::move(result), stateless);
    });
    } catch (...) {  // answered -32603 by OnMessage; the id is free again
      if (auto it = in_flight_.find(key_text); it != in_flight_.end() && it->second == key) in_flight_.erase(it);
      throw;
    }
    if (!known) {
      in_flight_.erase(key_text);
      return Error(id, kInvalidParams, "no tool named " + ServerDump(*name) + " (tools/list names them)");
    }
    return;
  }
  return Error(id, kMethodNotFound, "basal does not serve " + ServerDump(Json(method)) +
                                        " (it serves initialize, ping, server/discover, tools/list and tools/call)");
}

void McpServer::CancelAll() {
  std::vector<uint64_t> keys;
  for (const auto& [id, key] : in_flight_) keys.push_back(key);
  in_flight_.clear();
  for (uint64_t key : keys) tools_.Cancel(key);
}

}  // namespace basal::mcp
