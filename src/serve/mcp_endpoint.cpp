// POST /mcp (mcp_endpoint.h).
#include "serve/mcp_endpoint.h"

#include <cctype>
#include <utility>

#include "mcp/codemode.h"
#include "serve/run_queue.h"
#include "mcp/server.h"
#include "serve/log_line.h"

namespace basal::serve {

using Json = nlohmann::json;

namespace {

// The 2025 revisions of MCP, whose clients send MCP-Protocol-Version after initialize.
bool IsSessionRevision(std::string_view version) {
  return version == "2025-11-25" || version == "2025-06-18" || version == "2025-03-26";
}

// A request without MCP-Protocol-Version is read as this revision: the Streamable HTTP transport
// says so, for clients older than the header.
constexpr const char* kRevisionWithoutHeader = "2025-03-26";

// Whether a request's Content-Type is application/json (parameters such as charset allowed).
bool IsJsonContentType(std::string_view type) {
  std::string essence;
  for (char c : type.substr(0, type.find(';')))
    if (c != ' ' && c != '\t') essence += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return essence == "application/json";
}

// Whether an Accept header lets the answer be JSON (no Accept: anything goes).
bool AcceptsJson(std::string_view accept) {
  std::string a;
  for (char c : accept) a += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return a.find("application/json") != std::string::npos || a.find("application/*") != std::string::npos ||
         a.find("*/*") != std::string::npos;
}

// The HTTP status of the JSON-RPC message that answers a POST to /mcp: a response is 200, except
// an unsupported revision (400, as the stateless revision asks) and an error about a message that
// could not be read at all (no id: 400, as the transport asks for input it cannot accept).
int McpAnswerStatus(const std::string& message) {
  const Json j = Json::parse(message, nullptr, false);
  if (!j.is_object()) return 200;
  auto error = j.find("error");
  if (error == j.end() || !error->is_object()) return 200;
  auto code = error->find("code");
  if (code != error->end() && code->is_number_integer() && code->get<int64_t>() == mcp::kUnsupportedVersion) return 400;
  return j.value("id", Json()).is_null() ? 400 : 200;
}

}  // namespace

// A POST whose answer is not sent yet (a run_script that runs), or is being sent.
struct McpEndpoint::Exchange {
  std::unique_ptr<mcp::McpServer> server;
  Respond respond;
  bool answered = false;
};

McpEndpoint::McpEndpoint(std::optional<McpConfig> config, std::function<void(const std::string& line)> log)
    : config_(std::move(config)), log_(std::move(log)) {}

McpEndpoint::~McpEndpoint() { Stop(); }

std::function<void(const HostCallContext&, std::string_view, std::string_view)> McpEndpoint::LogSink() {
  return [holder = codemode_for_logs_](const HostCallContext& ctx, std::string_view level, std::string_view message) {
    if (*holder) (*holder)->OnLog(ctx, level, message);
  };
}

Result<void> McpEndpoint::Start(Module& module, EventLoop& loop, const std::string& secrets_dir) {
  loop_ = &loop;
  if (!config_) return Ok();
  const McpConfig& config = *config_;
  mcp::CodemodeLimits limits;
  limits.max_scripts_running = config.max_scripts;
  codemode_ = std::make_unique<mcp::Codemode>(module, config.policy, BASAL_VERSION, limits);
  *codemode_for_logs_ = codemode_.get();
  if (auto started = codemode_->Start(secrets_dir); !started) {
    *codemode_for_logs_ = nullptr;
    codemode_.reset();
    const Error& e = started.error();
    const bool unapproved = e.code == ErrorCode::kNotFound || e.code == ErrorCode::kRefused;
    return MakeError(e.code, "mcp.policy " + config.policy + ": " + e.message +
                                 (unapproved ? " (approve it with basal policy approve " + config.policy +
                                                   ", or remove mcp from the config)"
                                             : ""));
  }
  // A script's run is a run: its end is one line of the log, as every run's (run_queue.h).
  codemode_->OnRunStopped([this](const RunStop& stop) {
    const int64_t now = std::chrono::duration_cast<std::chrono::microseconds>(
                            std::chrono::system_clock::now().time_since_epoch()).count();
    log_(RunStopLine(mcp::kScriptName, "mcp", stop, now));
  });
  std::string tools;
  for (const mcp::ScriptTool& t : codemode_->ScriptTools()) tools += " " + t.group + "." + t.member;
  log_("mcp: serving codemode policy " + EscapeForLog(config.policy) + " at /mcp, at most " +
       std::to_string(config.max_scripts) + " scripts at once; tools:" + (tools.empty() ? " none" : EscapeForLog(tools)));
  for (const auto& [server, why] : codemode_->UnavailableServers()) {
    log_("mcp: downstream MCP server " + EscapeForLog(server) +
         " is not running (its tools are not offered; a call restarts it): " + EscapeForLog(why));
  }
  return Ok();
}

size_t McpEndpoint::running() const { return codemode_ ? codemode_->running() : 0; }

Json McpEndpoint::HealthJson() const {
  if (!codemode_) return nullptr;
  return Json{{"policy", config_->policy}, {"scripts_running", codemode_->running()}, {"max_scripts", config_->max_scripts}};
}

void McpEndpoint::Stop() {
  exchanges_.clear();
  *codemode_for_logs_ = nullptr;
  codemode_.reset();  // stops the policy's downstream MCP servers
}

// A request is answered with its response (application/json) once it is ready; a notification or
// a response is accepted (202). basal sends nothing unasked, so there is no GET stream.
void McpEndpoint::Handle(const HttpRequest& req, Respond respond, OnClientGone on_client_gone) {
  if (!codemode_)
    return respond(JsonError(404, "mcp_not_enabled",
                             "this basal serve does not serve MCP: add \"mcp\": {\"policy\": \"NAME\"} to its config, "
                             "naming an approved codemode policy (docs/serve-config.md), and restart it"));
  if (draining_) return respond(JsonError(503, "draining", "basal serve is draining; it starts no new scripts. Retry later"));
  if (!IsJsonContentType(req.Header("content-type").value_or("")))
    return respond(JsonError(415, "unsupported_media_type",
                             "POST /mcp takes one JSON-RPC message with Content-Type: application/json"));
  if (auto accept = req.Header("accept"); accept && !AcceptsJson(*accept))
    return respond(JsonError(406, "not_acceptable", "/mcp answers with application/json; say Accept: application/json, "
                                                    "text/event-stream"));
  // A 2025 client opened its session with initialize in an earlier request and names its revision
  // in this header since; a 2026-07-28 request names its own in params._meta.
  std::string session;
  if (auto version = req.Header("mcp-protocol-version")) {
    if (IsSessionRevision(*version)) {
      session = std::string(*version);
    } else if (*version != mcp::kStatelessRevision) {
      // The header as the client sent it (any bytes): cut, and made valid UTF-8 where it is shown.
      const Json requested = std::string(version->substr(0, 64));
      const Json supported = {mcp::kStatelessRevision, "2025-11-25", "2025-06-18", "2025-03-26"};
      Json error = {{"code", mcp::kUnsupportedVersion},
                    {"message", "basal does not speak MCP revision " +
                                    requested.dump(-1, ' ', false, Json::error_handler_t::replace) +
                                    " (MCP-Protocol-Version); it speaks " + supported.dump()},
                    {"data", {{"requested", requested}, {"supported", supported}}}};
      return respond(JsonResponse(400, Json{{"jsonrpc", "2.0"}, {"id", nullptr}, {"error", std::move(error)}}));
    }
  } else {
    session = kRevisionWithoutHeader;
  }

  const uint64_t id = next_exchange_++;
  auto exchange = std::make_unique<Exchange>();
  Exchange& x = *exchange;
  x.respond = std::move(respond);
  x.server = std::make_unique<mcp::McpServer>(*codemode_, mcp::ServerInfo{"basal", BASAL_VERSION, codemode_->Instructions()},
                                              [this, id](std::string message) { Answer(id, std::move(message)); });
  // `initialize` opens the session anew, whatever this says.
  if (!session.empty()) x.server->AssumeSession(session);
  exchanges_[id] = std::move(exchange);
  x.server->OnMessage(req.body);
  if (x.answered) return;
  if (x.server->in_flight() == 0) {
    // Nothing to answer: a notification or a client's response, accepted. (A cancellation names a
    // request of another POST, which this server never saw: closing that POST's connection is
    // what cancels it.)
    x.answered = true;
    HttpResponse r;
    r.status = 202;
    r.content_type.clear();
    x.respond(std::move(r));
    End(id);
    return;
  }
  // A tool call runs. A client that leaves stops waiting for it: the script is cancelled.
  on_client_gone([this, id] {
    auto it = exchanges_.find(id);
    if (it == exchanges_.end()) return;
    it->second->answered = true;
    it->second->server->CancelAll();
    End(id);
  });
}

void McpEndpoint::Answer(uint64_t exchange, std::string message) {
  auto it = exchanges_.find(exchange);
  if (it == exchanges_.end() || it->second->answered) return;
  Exchange& x = *it->second;
  x.answered = true;
  HttpResponse r;
  r.status = McpAnswerStatus(message);
  r.body = std::move(message);
  r.body += "\n";
  x.respond(std::move(r));
  End(exchange);
}

// The exchange's server is freed on the next loop pass: this may run inside one of its callbacks.
void McpEndpoint::End(uint64_t exchange) {
  loop_->Post([this, exchange] { exchanges_.erase(exchange); });
}

}  // namespace basal::serve
