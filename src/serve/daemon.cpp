// basal serve (daemon.h, docs/serve.md, docs/api.md). The daemon owns: the listeners, the runs
// (durable in the store's runs table; an in-memory queue of the queued ones, dispatched while fewer
// than max_workers activations are in flight), the waiters of ?wait requests, the triggers
// (webhooks, schedules), the metrics, the signals (signalfd on the module's loop), and, with an
// `mcp` config, the codemode that /mcp serves (MCP over Streamable HTTP, one message a request).
#include "serve/daemon.h"

#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "basal/module.h"
#include "mcp/codemode.h"
#include "mcp/server.h"
#include "parent/loop/event_loop.h"
#include "parent/secrets/secret_store.h"
#include "parent/store/owner.h"
#include "parent/store/store.h"
#include "serve/cron.h"
#include "serve/http_server.h"
#include "serve/metrics.h"
#include "serve/schedule.h"
#include "serve/signature.h"

namespace basal::serve {

int64_t SystemNowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

namespace {

using Json = nlohmann::json;

// A run's own error record (when its activation's end holds none) keeps this much of the message.
constexpr size_t kRunErrorMessageBytes = 4096;

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n"; }

HttpResponse JsonResponse(int status, const Json& body) {
  HttpResponse r;
  r.status = status;
  r.body = Dump(body);
  return r;
}

Json ParseOrText(const std::string& text) {
  if (text.empty()) return nullptr;
  Json j = Json::parse(text, nullptr, false);
  return j.is_discarded() ? Json(text) : j;
}

// Splits "/v1/flows/NAME/runs" into its segments.
std::vector<std::string> Segments(const std::string& path) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < path.size()) {
    while (i < path.size() && path[i] == '/') ++i;
    size_t j = i;
    while (j < path.size() && path[j] != '/') ++j;
    if (j > i) out.push_back(path.substr(i, j - i));
    i = j;
  }
  return out;
}

std::optional<int64_t> ParseId(const std::string& text) {
  if (text.empty() || text.size() > 18) return std::nullopt;
  int64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

bool IsLoopback(const sockaddr_storage& ss) {
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    return (ntohl(a->sin_addr.s_addr) >> 24) == 127;
  }
  if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    return IN6_IS_ADDR_LOOPBACK(&a->sin6_addr);
  }
  return false;
}

// "127.0.0.1:8470" or "[::1]:8470".
Result<sockaddr_storage> ParseHostPort(const std::string& text, socklen_t* len) {
  sockaddr_storage ss{};
  std::string host, port;
  if (!text.empty() && text[0] == '[') {
    const size_t close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':')
      return MakeError(ErrorCode::kInvalidArgument, "listen.tcp \"" + text + "\": write [ADDRESS]:PORT for IPv6");
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string::npos)
      return MakeError(ErrorCode::kInvalidArgument, "listen.tcp \"" + text + "\": write ADDRESS:PORT");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  auto p = ParseId(port);
  if (!p || *p < 1 || *p > 65535)
    return MakeError(ErrorCode::kInvalidArgument, "listen.tcp \"" + text + "\": the port must be 1-65535");
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(*p));
    *len = sizeof(sockaddr_in);
  } else if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(*p));
    *len = sizeof(sockaddr_in6);
  } else {
    return MakeError(ErrorCode::kInvalidArgument,
                     "listen.tcp \"" + text + "\": \"" + host + "\" is not an IP address (names are not resolved)");
  }
  return ss;
}

Result<int> ListenTcp(const ListenConfig& listen) {
  socklen_t len = 0;
  auto addr = ParseHostPort(listen.tcp, &len);
  if (!addr) return addr.error();
  if (!IsLoopback(*addr) && !listen.allow_non_loopback)
    return MakeError(ErrorCode::kRefused, "listen.tcp " + listen.tcp +
                                              " is not a loopback address; basal serve binds only loopback unless "
                                              "the config says \"allow_non_loopback\": true (put a TLS proxy in front)");
  const int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return MakeError(ErrorCode::kIo, std::string("socket: ") + std::strerror(errno));
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, reinterpret_cast<sockaddr*>(&*addr), len) != 0 || ::listen(fd, 128) != 0) {
    const int e = errno;
    close(fd);
    return MakeError(ErrorCode::kIo, "cannot listen on " + listen.tcp + ": " + std::strerror(e));
  }
  return fd;
}

// Binds the Unix socket: its directory is created 0700 if missing; a stale socket (nobody accepts
// on it) is replaced, a live one is not; the socket is 0600, or 0660 owned by the first allowed
// group when the config names groups.
Result<int> ListenUnix(const std::string& path, const std::vector<gid_t>& groups) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof sa.sun_path)
    return MakeError(ErrorCode::kInvalidArgument, "socket path \"" + path + "\" is empty or longer than " +
                                                      std::to_string(sizeof sa.sun_path - 1) + " bytes");
  std::memcpy(sa.sun_path, path.data(), path.size());
  const size_t slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    const std::string dir = path.substr(0, slash);
    struct stat st {};
    if (stat(dir.c_str(), &st) != 0 && mkdir(dir.c_str(), 0700) != 0)
      return MakeError(ErrorCode::kIo, "cannot create the socket's directory " + dir + ": " + std::strerror(errno));
  }
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode))
      return MakeError(ErrorCode::kIo, path + " exists and is not a socket; remove it or choose another --socket");
    const int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const bool live = probe >= 0 && connect(probe, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
    if (probe >= 0) close(probe);
    if (live)
      return MakeError(ErrorCode::kConflict, "another process serves " + path + " (a basal serve already runs there?)");
    unlink(path.c_str());
  }
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return MakeError(ErrorCode::kIo, std::string("socket: ") + std::strerror(errno));
  const mode_t old = umask(0177);  // born 0600: no window where others may connect
  const int b = bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  umask(old);
  if (b != 0 || ::listen(fd, 128) != 0) {
    const int e = errno;
    close(fd);
    return MakeError(ErrorCode::kIo, "cannot listen on " + path + ": " + std::strerror(e));
  }
  if (!groups.empty()) {
    if (chown(path.c_str(), static_cast<uid_t>(-1), groups[0]) != 0 || chmod(path.c_str(), 0660) != 0) {
      const int e = errno;
      close(fd);
      return MakeError(ErrorCode::kIo, "cannot give " + path + " to its allowed group: " + std::strerror(e));
    }
  }
  return fd;
}

// What a token may do: "run" (start runs), "read" (runs, calls, flows, journal), "metrics".
bool ScopeAllows(const Json& scopes, std::string_view need) {
  if (!scopes.is_array()) return false;
  for (const Json& s : scopes)
    if (s.is_string() && (s.get<std::string>() == need || s.get<std::string>() == "all")) return true;
  return false;
}

// The metrics' route label: the first segment of the path, of a fixed few (bounded series).
std::string RouteOf(const std::string& path) {
  const auto seg = Segments(path);
  if (seg.empty()) return "other";
  for (const char* route : {"v1", "hooks", "healthz", "readyz", "metrics", "mcp"})
    if (seg[0] == route) return "/" + seg[0];
  return "other";
}

// ---- /mcp

// The 2025 revisions of MCP, whose clients send MCP-Protocol-Version after initialize.
bool IsSessionRevision(std::string_view version) {
  return version == "2025-11-25" || version == "2025-06-18" || version == "2025-03-26";
}

// A request without MCP-Protocol-Version is read as this revision: the Streamable HTTP transport
// says so, for clients older than the header.
constexpr const char* kRevisionWithoutHeader = "2025-03-26";

// DNS rebinding: a web page may make the operator's browser send requests to a loopback port under
// a host name its author controls. The browser names the page's origin in `Origin`; only pages of
// this machine (localhost, 127.0.0.1, [::1], any port, http or https) are let through.
bool IsLocalOrigin(std::string_view origin) {
  std::string o;
  for (char c : origin) o += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string_view rest = o;
  if (rest.starts_with("http://")) {
    rest.remove_prefix(7);
  } else if (rest.starts_with("https://")) {
    rest.remove_prefix(8);
  } else {
    return false;
  }
  std::string_view host;
  if (rest.starts_with("[")) {
    const size_t close = rest.find(']');
    if (close == std::string_view::npos) return false;
    host = rest.substr(0, close + 1);
  } else {
    host = rest.substr(0, rest.find(':'));
  }
  if (host != "localhost" && host != "127.0.0.1" && host != "[::1]") return false;
  std::string_view port = rest.substr(host.size());
  if (port.empty()) return true;
  if (port[0] != ':' || port.size() < 2 || port.size() > 6) return false;
  return port.substr(1).find_first_not_of("0123456789") == std::string_view::npos;
}

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

// A POST to /mcp whose answer is not sent yet (a run_script that runs), or is being sent.
struct McpExchange {
  std::unique_ptr<mcp::McpServer> server;
  Respond respond;
  bool answered = false;
};

// A run that a ?wait request waits for.
struct Waiter {
  Respond respond;
  EventLoop::TimerId timer;
  bool webhook = false;
};

struct TriggerState {
  ScheduleTrigger config;
  CronSchedule cron;
  TimeZone tz;
  std::optional<EventLoop::TimerId> timer;
  int64_t next_fire_us = 0;     // the fire the timer is armed for
  int64_t mark_us = 0;          // the last fire handled (the store's schedule mark)
  std::set<int64_t> open_runs;  // runs of this trigger queued, running or buffered (overlap policy)
  // buffer_one: the run journaled as queued that waits for the open one to end before it is queued
  // for dispatch.
  std::optional<int64_t> buffered_run;
  std::string buffered_flow;
};

class Daemon final : public ModuleObserver {
 public:
  explicit Daemon(DaemonOptions o) : o_(std::move(o)) {
    if (!o_.log) o_.log = [](const std::string& line) { std::fprintf(stderr, "basal serve: %s\n", line.c_str()); };
    if (!o_.now_us) o_.now_us = SystemNowUs;
  }

  int Run();
  void OnEvent(const ModuleEvent& e) override {
    metrics_.Add("basal_module_events_total", {ModuleEventKindName(e.kind)});
    Log(std::string(ModuleEventKindName(e.kind)) + ": " + EscapeForLog(e.message));
  }

 private:
  static std::string EscapeForLog(const std::string& s) {
    std::string out;
    for (unsigned char c : s) out += (c < 0x20 || c == 0x7f) ? '?' : static_cast<char>(c);
    return out.size() > 2000 ? out.substr(0, 2000) + "..." : out;
  }
  void Log(const std::string& line) { o_.log(line); }
  int64_t Now() const { return o_.now_us(); }

  Result<void> Start();
  void DeclareMetrics();
  void Notify(const std::string& state) {
    (void)sd_notify(0, state.c_str());
  }

  // ---- flows ----
  Result<FlowRef> FlowFor(const std::string& name);

  // ---- runs ----
  struct Accepted {
    RunRow run;
    bool existing = false;
  };
  // hold: journal the run as queued but keep it out of the dispatch queue (a buffered schedule
  // run; ReleaseRun queues it later).
  void Enqueue(const std::string& flow, Json input, const std::string& trigger, const std::string& key,
               std::function<void(Result<Accepted>)> then, bool hold = false);
  void Dispatch();
  void OnActivationDone(int64_t run_id, const std::string& flow, int64_t started_us, const ActivationResult& r,
                        bool end_written);
  void EndRun(int64_t run_id, const std::string& outcome, const Json& error);
  Json RunJson(const RunRow& run);
  void WakeWaiters(int64_t run_id);
  void AnswerWithRun(int64_t run_id, Respond respond, bool webhook, std::optional<std::chrono::milliseconds> wait);

  // ---- HTTP ----
  std::optional<HttpResponse> Admit(const HttpRequest& head, size_t* max_body);
  void Handle(HttpRequest req, Respond respond, OnClientGone on_client_gone);
  void HandleStartRun(const HttpRequest& req, const std::string& flow, Respond respond);
  void HandleWebhook(const HttpRequest& req, const std::string& trigger, Respond respond);
  void HandleJournal(const HttpRequest& req, Respond respond);
  HttpResponse Flows();
  HttpResponse FlowDetail(const std::string& name);
  HttpResponse Calls(int64_t run_id);
  HttpResponse Metrics();
  bool Ready(std::string* why);
  size_t McpScripts() const { return codemode_ ? codemode_->running() : 0; }
  Result<std::optional<std::chrono::milliseconds>> WaitOf(const HttpRequest& req);

  // ---- /mcp ----
  Result<void> StartMcp();
  void HandleMcp(const HttpRequest& req, Respond respond, OnClientGone on_client_gone);
  void AnswerMcp(uint64_t exchange, std::string message);
  void EndMcpExchange(uint64_t exchange);

  // ---- schedules ----
  Result<void> CheckTriggers(const ServeConfig& config);
  Result<void> LoadTriggers(const ServeConfig& config, bool at_start);
  void CatchUp(TriggerState& t, bool at_start);
  void HandleDue(TriggerState& t, int64_t window_us);
  void ArmSchedule(TriggerState& t, int64_t after_us);
  void Fire(TriggerState& t, int64_t fire_us);
  void ReleaseRun(int64_t run_id, const std::string& flow);
  void ReleaseBuffered(TriggerState& t);
  void ScheduleRunEnded(int64_t run_id);

  // ---- signals, drain ----
  Result<void> WatchSignals();
  void PetWatchdog();
  void OnSignal(int sig);
  void BeginDrain(const std::string& why);
  void Reload();

  DaemonOptions o_;
  std::optional<ServeConfig> file_config_;  // the config file as last read (SIGHUP compares with it)
  std::unique_ptr<Module> module_;
  std::vector<std::unique_ptr<HttpListener>> listeners_;
  MetricsRegistry metrics_;
  std::vector<gid_t> allowed_gids_;
  std::map<std::string, FlowRef> flows_;  // loaded approved flows by name
  std::deque<int64_t> queue_;             // queued runs, oldest first
  std::unordered_map<int64_t, std::string> queued_flow_;  // run -> flow
  size_t in_flight_ = 0;                  // activations submitted and not done
  std::unordered_map<int64_t, std::vector<Waiter>> waiters_;
  std::map<std::string, WebhookTrigger> webhooks_;
  std::map<std::string, std::unique_ptr<TriggerState>> schedules_;
  std::unordered_map<int64_t, std::string> run_trigger_;  // schedule runs -> trigger name
  std::unordered_map<int64_t, ActivationId> run_activation_;  // runs started -> their activation
  int signal_fd_ = -1;
  bool draining_ = false;
  bool stop_ = false;
  EventLoop::Clock::time_point drain_deadline_{};
  bool doctor_ok_ = false;
  std::string doctor_why_;
  bool journal_ok_ = true;
  std::string journal_why_;
  int64_t started_us_ = 0;
  std::optional<EventLoop::TimerId> watchdog_;
  std::chrono::microseconds watchdog_period_{0};
  // The module's counters are totals; the metrics' counters take what is new since the last scrape.
  std::map<std::string, double> retire_seen_;
  std::map<std::string, double> calls_seen_;
  double confinement_seen_ = 0;
  // /mcp: the codemode of the config's policy (null without an `mcp` config), the module's log sink
  // reaching it (the module is opened first), and the requests whose answers are pending.
  std::shared_ptr<mcp::Codemode*> codemode_for_logs_ = std::make_shared<mcp::Codemode*>(nullptr);
  std::unique_ptr<mcp::Codemode> codemode_;
  uint64_t next_mcp_exchange_ = 1;
  std::map<uint64_t, std::unique_ptr<McpExchange>> mcp_exchanges_;
};

// ---------------------------------------------------------------- start

void Daemon::DeclareMetrics() {
  // Each name is declared once, with a valid name and labels: a false here is a bug in this list.
  bool ok = true;
  ok &= metrics_.DeclareCounter("basal_http_requests_total",
                                "HTTP requests answered, by listener, route (/v1, /hooks, /mcp, ...) and status code.",
                                {"listener", "route", "code"});
  ok &= metrics_.DeclareCounter("basal_runs_accepted_total", "Runs journaled as queued, by flow and trigger kind.",
                          {"flow", "trigger"});
  ok &= metrics_.DeclareCounter("basal_activations_total", "Activations ended, by flow and outcome.", {"flow", "outcome"});
  ok &= metrics_.DeclareHistogram("basal_activation_duration_seconds", "Wall time of activations, from start to end, by flow.",
                            {"flow"}, {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60});
  ok &= metrics_.DeclareCounter("basal_host_calls_total", "Host calls decided, by name and decision.", {"name", "decision"});
  ok &= metrics_.DeclareGauge("basal_workers", "Workers now, by state.", {"state"});
  ok &= metrics_.DeclareCounter("basal_worker_retirements_total", "Workers retired, by reason.", {"reason"});
  ok &= metrics_.DeclareCounter("basal_confinement_deaths_total",
                          "Workers killed by the seccomp filter (SIGSYS): a confinement violation.", {});
  ok &= metrics_.DeclareGauge("basal_queue_length", "Runs queued and not yet started.", {});
  ok &= metrics_.DeclareGauge("basal_runs_in_flight", "Runs started whose activation has not ended.", {});
  ok &= metrics_.DeclareCounter("basal_schedule_events_total", "Schedule fires, by trigger and what happened (run, buffered, skipped, missed).",
                          {"trigger", "event"});
  ok &= metrics_.DeclareCounter("basal_webhooks_total", "Webhook deliveries, by trigger and verdict.", {"trigger", "verdict"});
  ok &= metrics_.DeclareCounter("basal_module_events_total", "Events the module reported, by kind.", {"kind"});
  ok &= metrics_.DeclareGauge("basal_ready", "1 when /readyz says ready.", {});
  if (!ok) {
    std::fprintf(stderr, "basal serve: a metric of DeclareMetrics was refused (a bug)\n");
    std::abort();
  }
}

Result<void> Daemon::Start() {
  started_us_ = Now();
  DeclareMetrics();
  for (const std::string& g : o_.config.listen.allowed_groups) {
    group* gr = getgrnam(g.c_str());
    if (!gr) return MakeError(ErrorCode::kInvalidArgument, "listen.allowed_groups: no group named " + g + " on this system");
    allowed_gids_.push_back(gr->gr_gid);
  }
  ModuleOptions mo;
  mo.journal_path = o_.journal_path;
  mo.worker_path = o_.worker_path;
  mo.secrets_dir = o_.secrets_dir;
  mo.max_workers = o_.config.limits.max_workers;
  mo.max_activations_per_worker = o_.config.limits.max_activations_per_worker;
  mo.require_approval = true;
  mo.observer = std::shared_ptr<ModuleObserver>(this, [](ModuleObserver*) {});
  // console.* lines of a codemode script go to its run_script result (all are journaled).
  mo.log_sink = [holder = codemode_for_logs_](const HostCallContext& ctx, std::string_view level, std::string_view message) {
    if (*holder) (*holder)->OnLog(ctx, level, message);
  };
  auto module = Module::Open(std::move(mo));
  if (!module) return module.error();
  module_ = std::move(*module);

  // Runs that were running when a previous daemon died: their activations were closed abandoned by
  // Open's recovery; the runs take that outcome. Queued runs start again.
  auto settled = module_->store().runs().SettleRunsOfEndedActivations(Now());
  if (!settled) return settled.error();
  if (auto c = module_->store().journal().Commit(); !c) return c.error();
  if (*settled > 0) Log("recovery: " + std::to_string(*settled) + " runs of a previous daemon ended with their activations");
  auto queued = module_->store().runs().RunsInState(RunState::kQueued, o_.config.limits.queue_max * 2 + 1000);
  if (!queued) return queued.error();
  for (const RunRow& r : *queued) {
    queue_.push_back(r.id);
    queued_flow_[r.id] = r.flow;
    // A schedule's run still open counts for its overlap policy (LoadTriggers reads this).
    if (r.trigger.rfind("schedule:", 0) == 0) run_trigger_[r.id] = r.trigger.substr(9);
  }
  if (!queued->empty()) Log("recovery: " + std::to_string(queued->size()) + " queued runs will start");

  {
    Module::DoctorReport d = module_->Doctor();
    doctor_ok_ = d.accepted;
    doctor_why_ = d.verdict;
    if (!d.accepted) Log("a worker was refused at start: " + d.verdict + " (/readyz says not ready)");
  }

  if (!o_.config_path.empty())
    if (auto f = LoadServeConfig(o_.config_path); f) file_config_ = *f;
  if (auto c = CheckTriggers(o_.config); !c) return c;
  // Before the triggers: starting the downstream servers turns the loop, when no schedule may fire
  // yet (a refused start must have started nothing).
  if (auto m = StartMcp(); !m) return m;
  if (auto t = LoadTriggers(o_.config, /*at_start=*/true); !t) return t;
  if (auto s = WatchSignals(); !s) return s;

  auto add_listener = [this](const std::string& name, int fd, bool unix_socket) -> Result<void> {
    HttpListener::Options lo;
    lo.name = name;
    lo.listen_fd = fd;
    lo.unix_socket = unix_socket;
    lo.max_connections = o_.config.limits.max_connections;
    lo.max_body_bytes = o_.config.limits.max_body_bytes;
    lo.admit = [this](const HttpRequest& head, size_t* max_body) { return Admit(head, max_body); };
    lo.handle = [this](HttpRequest req, Respond respond, OnClientGone on_client_gone) {
      Handle(std::move(req), std::move(respond), std::move(on_client_gone));
    };
    lo.on_response = [this](const HttpRequest& req, int status) {
      metrics_.Add("basal_http_requests_total", {req.listener, RouteOf(req.path), std::to_string(status)});
    };
    auto l = HttpListener::Start(module_->loop(), std::move(lo));
    if (!l) return l.error();
    listeners_.push_back(std::move(*l));
    return Ok();
  };
  auto ufd = ListenUnix(o_.socket_path, allowed_gids_);
  if (!ufd) return ufd.error();
  if (auto r = add_listener("unix", *ufd, true); !r) return r;
  if (!o_.config.listen.tcp.empty()) {
    auto tfd = ListenTcp(o_.config.listen);
    if (!tfd) return tfd.error();
    if (auto r = add_listener("tcp", *tfd, false); !r) return r;
  }

  uint64_t watchdog_us = 0;
  if (sd_watchdog_enabled(0, &watchdog_us) > 0 && watchdog_us > 0) {
    watchdog_period_ = std::chrono::microseconds(watchdog_us / 2);
    PetWatchdog();
  }
  // The configuration in use, every default filled in (docs/serve-config.md): what an operator
  // compares with what they meant. Secrets appear as their names only.
  Log("configuration " + ToJson(o_.config).dump(-1, ' ', false, Json::error_handler_t::replace));
  Log("serving " + o_.socket_path + (o_.config.listen.tcp.empty() ? "" : " and " + o_.config.listen.tcp) +
      ", journal " + o_.journal_path + (codemode_ ? "; MCP at /mcp" : ""));
  Notify("READY=1\nSTATUS=serving");
  Dispatch();
  return Ok();
}

// ---------------------------------------------------------------- signals, drain, reload

// Tells systemd we are alive, every half of WatchdogSec, from the loop: a loop that stops
// turning stops the pets, and systemd restarts the service.
void Daemon::PetWatchdog() {
  Notify("WATCHDOG=1");
  watchdog_ = module_->loop().At(EventLoop::Clock::now() + watchdog_period_, [this] { PetWatchdog(); });
}

Result<void> Daemon::WatchSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  if (sigprocmask(SIG_BLOCK, &set, nullptr) != 0)
    return MakeError(ErrorCode::kInternal, std::string("sigprocmask: ") + std::strerror(errno));
  signal_fd_ = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (signal_fd_ < 0) return MakeError(ErrorCode::kInternal, std::string("signalfd: ") + std::strerror(errno));
  return module_->loop().Watch(signal_fd_, EPOLLIN, [this](uint32_t) {
    signalfd_siginfo info{};
    while (read(signal_fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) OnSignal(static_cast<int>(info.ssi_signo));
  });
}

void Daemon::OnSignal(int sig) {
  if (sig == SIGHUP) {
    Reload();
    return;
  }
  if (draining_) {
    Log(std::string(strsignal(sig)) + " again: cancelling what still runs now");
    drain_deadline_ = EventLoop::Clock::now();
    return;
  }
  BeginDrain(strsignal(sig));
}

void Daemon::BeginDrain(const std::string& why) {
  draining_ = true;
  Notify("STOPPING=1\nSTATUS=draining");
  Log("draining (" + why + "): not ready, accepting nothing new; " + std::to_string(in_flight_ + McpScripts()) +
      " running activations get " + std::to_string(o_.config.limits.drain_timeout.count()) + " ms; " +
      std::to_string(queue_.size()) + " queued runs stay queued for the next start");
  for (auto& l : listeners_) l->StopAccepting();
  for (auto& [name, t] : schedules_)
    if (t->timer) module_->loop().Cancel(*t->timer);
  drain_deadline_ = EventLoop::Clock::now() + o_.config.limits.drain_timeout;
}

void Daemon::Reload() {
  if (o_.config_path.empty()) {
    Log("SIGHUP: no --config file to reload");
    return;
  }
  // systemd (Type=notify-reload) wants RELOADING=1 with the monotonic time, then READY=1.
  timespec mono{};
  clock_gettime(CLOCK_MONOTONIC, &mono);
  Notify("RELOADING=1\nSTATUS=reloading\nMONOTONIC_USEC=" +
         std::to_string(static_cast<int64_t>(mono.tv_sec) * 1'000'000 + mono.tv_nsec / 1000));
  auto config = LoadServeConfig(o_.config_path);
  if (!config) {
    Log("SIGHUP: the config was not reloaded, the running one stays: " + config.error().message);
    Notify("READY=1\nSTATUS=serving (the last reload was refused)");
    return;
  }
  // The codemode's policy was read and its downstream servers started at start; agents may be in
  // the middle of scripts under it. Changing it is a restart, never a silent half-change.
  if (config->mcp != o_.config.mcp) {
    const auto shown = [](const std::optional<McpConfig>& m) {
      if (!m) return std::string("none");
      ServeConfig only;
      only.mcp = m;
      return ToJson(only)["mcp"].dump();
    };
    Log("SIGHUP: the config was not reloaded, the running one stays: its mcp section changed (" +
        shown(o_.config.mcp) + " -> " + shown(config->mcp) + "); restart basal serve to change mcp");
    Notify("READY=1\nSTATUS=serving (the last reload was refused)");
    return;
  }
  if (auto c = CheckTriggers(*config); !c) {
    Log("SIGHUP: the config was not reloaded, the running one stays: " + c.error().message);
    Notify("READY=1\nSTATUS=serving (the last reload was refused)");
    return;
  }
  // Listeners, the store and the worker stay as started; triggers and limits change now.
  const ServeConfig old = o_.config;
  for (auto& [name, t] : schedules_)
    if (t->timer) module_->loop().Cancel(*t->timer);
  if (auto t = LoadTriggers(*config, /*at_start=*/false); !t) {
    Log("SIGHUP: the triggers were not reloaded: " + t.error().message + "; the running ones stay");
    (void)LoadTriggers(old, /*at_start=*/false);
    Notify("READY=1\nSTATUS=serving (the last reload was refused)");
    return;
  }
  o_.config.limits = config->limits;
  o_.config.webhooks = config->webhooks;
  o_.config.schedules = config->schedules;
  // Compared with the file as last read, not with o_.config: the command line (--db, --socket)
  // overrides the file's values there, which is no change.
  if (file_config_ && (config->listen.socket != file_config_->listen.socket ||
                       config->listen.tcp != file_config_->listen.tcp || config->db != file_config_->db ||
                       config->secrets_dir != file_config_->secrets_dir || config->worker != file_config_->worker))
    Log("SIGHUP: listeners, the store, the secrets and the worker change only at a restart; the rest is reloaded");
  file_config_ = *config;
  Log("SIGHUP: reloaded " + o_.config_path + ": " + std::to_string(webhooks_.size()) + " webhooks, " +
      std::to_string(schedules_.size()) + " schedules");
  Notify("READY=1\nSTATUS=serving");
  Dispatch();
}

int Daemon::Run() {
  if (auto s = Start(); !s) {
    Log("cannot start: " + s.error().message);
    return 3;
  }
  while (true) {
    module_->RunFor(std::chrono::milliseconds(500));
    if (!draining_) continue;
    const bool time_up = EventLoop::Clock::now() >= drain_deadline_;
    if ((in_flight_ == 0 && McpScripts() == 0) || time_up) break;
  }
  if (in_flight_ + McpScripts() > 0)
    Log("drain timeout: cancelling " + std::to_string(in_flight_ + McpScripts()) + " running activations");
  // Cancels the rest: their runs end cancelled, and a script's /mcp request gets its result.
  module_->Shutdown(std::chrono::milliseconds(0));
  module_->RunFor(std::chrono::milliseconds(0));
  // Every ?wait still waiting gets its run as it stands.
  std::vector<int64_t> waiting;
  for (auto& [id, w] : waiters_) waiting.push_back(id);
  for (int64_t id : waiting) WakeWaiters(id);
  (void)module_->store().journal().Commit();
  module_->RunFor(std::chrono::milliseconds(50));  // let the last answers go out
  mcp_exchanges_.clear();
  *codemode_for_logs_ = nullptr;
  codemode_.reset();  // stops the policy's downstream MCP servers
  listeners_.clear();
  unlink(o_.socket_path.c_str());
  Log("stopped");
  return 0;
}

// ---------------------------------------------------------------- flows

Result<FlowRef> Daemon::FlowFor(const std::string& name) {
  auto versions = module_->store().reader().Versions(ApprovalKind::kFlow, name);
  if (!versions) return versions.error();
  if (versions->empty())
    return MakeError(ErrorCode::kNotFound, "no flow named " + name + " is approved in this store (basal flow approve)");
  const ApprovalRow& newest = versions->back();
  if (newest.revoked_unix_us)
    return MakeError(ErrorCode::kRefused, "flow " + name + " version " + std::to_string(newest.version) +
                                              " was revoked; approve a new version to run it again");
  auto it = flows_.find(name);
  if (it != flows_.end() && it->second->approval_id == newest.id) return it->second;
  auto flow = module_->LoadApprovedFlow(name);
  if (!flow) return flow.error();
  if (it != flows_.end()) (void)module_->RemoveFlow(it->second);
  flows_[name] = *flow;
  return *flow;
}

// ---------------------------------------------------------------- runs

void Daemon::Enqueue(const std::string& flow, Json input, const std::string& trigger, const std::string& key,
                     std::function<void(Result<Accepted>)> then, bool hold) {
  NewRun nr;
  nr.flow = flow;
  nr.input_json = input.dump(-1, ' ', false, Json::error_handler_t::replace);
  nr.trigger = trigger;
  nr.idempotency_key = key;
  nr.created_unix_us = Now();
  nr.key_expires_unix_us = nr.created_unix_us + o_.config.limits.idempotency_ttl.count() * 1000;
  auto e = module_->store().runs().EnqueueRun(nr);
  if (!e) {
    then(e.error());
    return;
  }
  Accepted a{e->run, e->existing};
  if (!a.existing) {
    metrics_.Add("basal_runs_accepted_total", {flow, trigger.substr(0, trigger.find(':'))});
  }
  // A new run starts now if a worker slot is free: its activation's start joins the run's row in
  // the open batch, so one commit covers both (the module runs nothing of the flow before that
  // commit: every effect is a host call, answered only after its own record commits). A held
  // run (hold) waits for ReleaseRun.
  if (!a.existing && !hold) {
    queue_.push_back(a.run.id);
    queued_flow_[a.run.id] = a.run.flow;
    Dispatch();
  }
  // The 202 goes out only once the run's row is committed.
  module_->AfterCommit([this, a, hold, then = std::move(then)](const Result<void>& committed) {
    if (!committed) {
      journal_ok_ = false;
      journal_why_ = committed.error().message;
      // The batch is gone, the run's row and its activation's start with it: the activation
      // must not run on.
      if (auto act = run_activation_.find(a.run.id); act != run_activation_.end()) (void)module_->Cancel(act->second);
      then(MakeError(ErrorCode::kDatabase, "the run could not be journaled: " + committed.error().message));
      return;
    }
    journal_ok_ = true;
    then(a);
  });
}

void Daemon::Dispatch() {
  if (draining_) return;
  while (!queue_.empty() && in_flight_ < o_.config.limits.max_workers) {
    const int64_t run_id = queue_.front();
    queue_.pop_front();
    const std::string flow_name = queued_flow_[run_id];
    queued_flow_.erase(run_id);
    auto run = module_->store().runs().GetRun(run_id);
    if (!run || !*run || (*run)->state != RunState::kQueued) continue;
    auto flow = FlowFor(flow_name);
    if (!flow) {
      EndRun(run_id, "cancelled", Json{{"kind", "cancelled"}, {"message", "cancelled before it started: " + flow.error().message}});
      continue;
    }
    Json input = Json::parse((*run)->input_json, nullptr, false);
    if (input.is_discarded()) input = nullptr;
    const int64_t started = Now();
    // The run's end is written in the same batch as its activation's end (journal_end), so a
    // waiter is answered after one commit; `done` then finds it written.
    auto end_written = std::make_shared<bool>(false);
    auto id = module_->Submit(
        *flow, std::move(input),
        [this, run_id, flow_name, started, end_written](const ActivationResult& r) {
          OnActivationDone(run_id, flow_name, started, r, *end_written);
        },
        [this, run_id, end_written](const ActivationResult& r) {
          // The error stays with the activation's end, capped there (RunJson reads it from
          // there): a flow's error is not written to the journal twice.
          (void)module_->store().runs().MarkRunEnded(run_id, OutcomeName(r.outcome), "", Now());
          *end_written = true;
        });
    if (!id) {
      EndRun(run_id, "cancelled", Json{{"kind", "cancelled"}, {"message", "cancelled before it started: " + id.error().message}});
      continue;
    }
    ++in_flight_;
    run_activation_[run_id] = *id;
    (void)module_->store().runs().MarkRunStarted(run_id, *id, started);
  }
  metrics_.Set("basal_queue_length", {}, static_cast<double>(queue_.size()));
  metrics_.Set("basal_runs_in_flight", {}, static_cast<double>(in_flight_));
}

void Daemon::OnActivationDone(int64_t run_id, const std::string& flow, int64_t started_us, const ActivationResult& r,
                              bool end_written) {
  if (in_flight_ > 0) --in_flight_;
  run_activation_.erase(run_id);
  const std::string outcome = OutcomeName(r.outcome);
  metrics_.Add("basal_activations_total", {flow, outcome});
  metrics_.Observe("basal_activation_duration_seconds", {flow}, static_cast<double>(Now() - started_us) / 1e6);
  if (end_written && r.outcome != Outcome::kJournalError) {
    // Written with the activation's end (Submit's journal_end), and `done` runs after that batch
    // committed: waiters can hear of it now.
    ScheduleRunEnded(run_id);
    WakeWaiters(run_id);
  } else {
    // The end could not be written with the activation's, or that batch was lost: write it now;
    // waiters hear of it once it is committed.
    // Only the kind and the start of the message: the flow's own error may be as long as a frame.
    const Json error = r.ok() ? Json() : Json{{"kind", outcome}, {"message", r.message.substr(0, kRunErrorMessageBytes)}};
    (void)module_->store().runs().MarkRunEnded(run_id, outcome, error.is_null() ? "" : error.dump(-1, ' ', false, Json::error_handler_t::replace), Now());
    ScheduleRunEnded(run_id);
    module_->AfterCommit([this, run_id](const Result<void>&) { WakeWaiters(run_id); });
  }
  Dispatch();
}

void Daemon::EndRun(int64_t run_id, const std::string& outcome, const Json& error) {
  (void)module_->store().runs().MarkRunEnded(run_id, outcome, error.is_null() ? "" : error.dump(), Now());
  ScheduleRunEnded(run_id);
  module_->AfterCommit([this, run_id](const Result<void>&) { WakeWaiters(run_id); });
}

Json Daemon::RunJson(const RunRow& run) {
  Json j{{"id", run.id},
         {"url", "/v1/runs/" + std::to_string(run.id)},
         {"flow", run.flow},
         {"trigger", run.trigger},
         {"state", RunStateName(run.state)},
         {"created", UtcText(run.created_unix_us)}};
  if (!run.idempotency_key.empty()) j["idempotency_key"] = run.idempotency_key;
  j["input"] = ParseOrText(run.input_json);
  if (run.started_unix_us) j["started"] = UtcText(*run.started_unix_us);
  if (run.ended_unix_us) j["ended"] = UtcText(*run.ended_unix_us);
  if (run.activation_id > 0) j["activation_id"] = run.activation_id;
  if (run.state == RunState::kEnded) j["outcome"] = run.outcome;
  if (!run.error_json.empty()) j["error"] = ParseOrText(run.error_json);
  if (run.activation_id > 0) {
    auto rows = module_->store().reader().Activations(run.activation_id, 1);
    if (rows && !rows->empty()) {
      const ActivationRow& a = rows->front();
      if (a.end_unix_us) {
        j["outcome"] = a.outcome;
        if (!a.result_json.empty() && a.outcome == "ok") j["result"] = ParseOrText(a.result_json);
        if (!a.error_json.empty()) j["error"] = ParseOrText(a.error_json);
        j["duration_ms"] = static_cast<double>(*a.end_unix_us - a.start_unix_us) / 1000.0;
        j["cpu_ms"] = static_cast<double>(a.cpu_us) / 1000.0;
      }
    }
  }
  return j;
}

void Daemon::WakeWaiters(int64_t run_id) {
  auto it = waiters_.find(run_id);
  if (it == waiters_.end()) return;
  auto list = std::move(it->second);
  waiters_.erase(it);
  auto run = module_->store().runs().GetRun(run_id);
  for (Waiter& w : list) {
    module_->loop().Cancel(w.timer);
    if (!run || !*run) {
      w.respond(JsonError(500, "internal", "run " + std::to_string(run_id) + " could not be read back"));
      continue;
    }
    w.respond(JsonResponse((*run)->state == RunState::kEnded ? 200 : 202, RunJson(**run)));
  }
}

// Answers with the run now if it ended or no wait was asked; else when it ends or the wait passes.
void Daemon::AnswerWithRun(int64_t run_id, Respond respond, bool webhook, std::optional<std::chrono::milliseconds> wait) {
  auto run = module_->store().runs().GetRun(run_id);
  if (!run || !*run) {
    respond(JsonError(500, "internal", "run " + std::to_string(run_id) + " could not be read back"));
    return;
  }
  if ((*run)->state == RunState::kEnded || !wait || wait->count() == 0 || draining_) {
    respond(JsonResponse((*run)->state == RunState::kEnded ? 200 : 202, RunJson(**run)));
    return;
  }
  Waiter w;
  w.respond = std::move(respond);
  w.webhook = webhook;
  const size_t index = waiters_[run_id].size();
  w.timer = module_->loop().At(EventLoop::Clock::now() + *wait, [this, run_id, index] {
    auto it = waiters_.find(run_id);
    if (it == waiters_.end() || index >= it->second.size() || !it->second[index].respond) return;
    Respond r = std::move(it->second[index].respond);
    it->second[index].respond = nullptr;
    auto run = module_->store().runs().GetRun(run_id);
    if (run && *run) r(JsonResponse((*run)->state == RunState::kEnded ? 200 : 202, RunJson(**run)));
    bool all_gone = true;
    for (auto& x : it->second) all_gone = all_gone && !x.respond;
    if (all_gone) waiters_.erase(it);
  });
  waiters_[run_id].push_back(std::move(w));
}

// ---------------------------------------------------------------- HTTP

bool Daemon::Ready(std::string* why) {
  if (draining_) {
    *why = "draining";
    return false;
  }
  if (!doctor_ok_) {
    *why = "the worker was refused at start: " + doctor_why_;
    return false;
  }
  if (!journal_ok_) {
    *why = "the last journal commit failed: " + journal_why_;
    return false;
  }
  if (access(o_.journal_path.c_str(), W_OK) != 0) {
    *why = "the journal " + o_.journal_path + " is not writable: " + std::strerror(errno);
    return false;
  }
  return true;
}

std::optional<HttpResponse> Daemon::Admit(const HttpRequest& head, size_t* max_body) {
  const auto seg = Segments(head.path);
  const bool health = seg.size() == 1 && (seg[0] == "healthz" || seg[0] == "readyz");
  const bool hook = seg.size() == 2 && seg[0] == "hooks";
  const bool mcp = seg.size() == 1 && seg[0] == "mcp";
  // The limit as configured now: SIGHUP may have changed it since the listener started.
  *max_body = o_.config.limits.max_body_bytes;
  if (mcp) {
    if (auto origin = head.Header("origin"); origin && !IsLocalOrigin(*origin)) {
      const std::string shown(origin->substr(0, 200));
      return JsonError(403, "forbidden_origin",
                       "Origin \"" + shown + "\" is not this machine: /mcp serves only requests without an Origin or "
                       "from pages of http(s)://localhost, 127.0.0.1 or [::1] (a page elsewhere could reach a "
                       "loopback port by DNS rebinding)");
    }
  }
  if (hook) {
    auto w = webhooks_.find(seg[1]);
    if (w != webhooks_.end()) *max_body = w->second.max_body_bytes;
  }
  if (head.unix_socket) {
    if (!head.peer.known) return JsonError(403, "forbidden", "the peer's credentials could not be read");
    if (head.peer.uid == geteuid() || head.peer.uid == 0) return std::nullopt;
    // Members of an allowed group: their primary group, or a supplementary one (SO_PEERGROUPS).
    for (gid_t g : allowed_gids_) {
      if (head.peer.gid == g) return std::nullopt;
      for (uint32_t sg : head.peer.groups)
        if (sg == g) return std::nullopt;
    }
    return JsonError(403, "forbidden",
                     "uid " + std::to_string(head.peer.uid) +
                         " may not use this socket: only the daemon's own user, root and the groups in "
                         "listen.allowed_groups may");
  }
  if (health || hook) return std::nullopt;  // a webhook's signature is its credential
  auto auth = head.Header("authorization");
  auto token = auth ? BearerToken(*auth) : std::nullopt;
  if (!token || !LooksLikeApiToken(*token)) {
    HttpResponse r = JsonError(401, "unauthorized",
                               "send Authorization: Bearer TOKEN (basal token create --name NAME --scope SCOPE)");
    r.headers.emplace_back("WWW-Authenticate", "Bearer");
    return r;
  }
  auto row = module_->store().runs().FindToken(ApiTokenHash(*token));
  if (!row || !*row) {
    HttpResponse r = JsonError(401, "unauthorized", "the bearer token is not known or was revoked");
    r.headers.emplace_back("WWW-Authenticate", "Bearer error=\"invalid_token\"");
    return r;
  }
  Json scopes = Json::parse((*row)->scopes_json, nullptr, false);
  std::string need = "read";
  if (seg.size() == 1 && seg[0] == "metrics") need = "metrics";
  if (head.method == "POST" || mcp) need = "run";  // every MCP request may run scripts
  if (!ScopeAllows(scopes, need))
    return JsonError(403, "forbidden", "token " + (*row)->name + " lacks the scope \"" + need + "\" this request needs");
  return std::nullopt;
}

Result<std::optional<std::chrono::milliseconds>> Daemon::WaitOf(const HttpRequest& req) {
  auto w = req.Query("wait");
  if (!w) return std::optional<std::chrono::milliseconds>();
  std::string text(*w);
  if (!text.empty() && text.find_first_not_of("0123456789") == std::string::npos) text += "s";
  auto d = ParseDuration(text);
  if (!d) return MakeError(ErrorCode::kInvalidArgument, "?wait=" + std::string(*w) + ": " + d.error().message);
  return std::optional<std::chrono::milliseconds>(std::min(*d, o_.config.limits.wait_max));
}

void Daemon::Handle(HttpRequest req, Respond respond, OnClientGone on_client_gone) {
  const auto seg = Segments(req.path);
  const std::string& m = req.method;
  auto method_not_allowed = [&](const char* allowed) {
    HttpResponse r = JsonError(405, "method_not_allowed", m + " is not allowed on " + req.path + "; use " + allowed);
    r.headers.emplace_back("Allow", allowed);
    respond(r);
  };
  if (seg.size() == 1 && seg[0] == "healthz") {
    if (m != "GET" && m != "HEAD") return method_not_allowed("GET");
    return respond(JsonResponse(200, Json{{"status", "alive"}, {"since", UtcText(started_us_)}}));
  }
  if (seg.size() == 1 && seg[0] == "readyz") {
    if (m != "GET" && m != "HEAD") return method_not_allowed("GET");
    std::string why;
    const bool ok = Ready(&why);
    metrics_.Set("basal_ready", {}, ok ? 1 : 0);
    return respond(ok ? JsonResponse(200, Json{{"status", "ready"}})
                      : JsonResponse(503, Json{{"status", "not_ready"}, {"reason", why}}));
  }
  if (seg.size() == 1 && seg[0] == "metrics") {
    if (m != "GET") return method_not_allowed("GET");
    return respond(Metrics());
  }
  if (seg.size() == 2 && seg[0] == "hooks") {
    if (m != "POST") return method_not_allowed("POST");
    return HandleWebhook(req, seg[1], std::move(respond));
  }
  if (seg.size() == 1 && seg[0] == "mcp") return HandleMcp(req, std::move(respond), std::move(on_client_gone));
  if (seg.empty() || seg[0] != "v1")
    return respond(JsonError(404, "not_found", "no endpoint at " + req.path + "; the API is under /v1 (docs/api.md)"));
  if (seg.size() == 2 && seg[1] == "flows") {
    if (m != "GET") return method_not_allowed("GET");
    return respond(Flows());
  }
  if (seg.size() == 2 && seg[1] == "health") {
    if (m != "GET") return method_not_allowed("GET");
    Json h = module_->HealthReport();
    std::string why;
    h["serve"] = Json{{"ready", Ready(&why)}, {"not_ready_because", why}, {"draining", draining_},
                      {"queued_runs", queue_.size()}, {"runs_in_flight", in_flight_},
                      {"since", UtcText(started_us_)}};
    if (codemode_)
      h["serve"]["mcp"] = Json{{"policy", o_.config.mcp->policy}, {"scripts_running", codemode_->running()},
                               {"max_scripts", o_.config.mcp->max_scripts}};
    return respond(JsonResponse(200, h));
  }
  if (seg.size() == 3 && seg[1] == "flows") {
    if (m != "GET") return method_not_allowed("GET");
    return respond(FlowDetail(seg[2]));
  }
  if (seg.size() == 4 && seg[1] == "flows" && seg[3] == "runs") {
    if (m != "POST") return method_not_allowed("POST");
    return HandleStartRun(req, seg[2], std::move(respond));
  }
  if ((seg.size() == 3 || seg.size() == 4) && seg[1] == "runs") {
    if (m != "GET") return method_not_allowed("GET");
    auto id = ParseId(seg[2]);
    if (!id) return respond(JsonError(400, "bad_run_id", "\"" + seg[2] + "\" is not a run id (a positive integer)"));
    if (seg.size() == 4) {
      if (seg[3] != "calls") return respond(JsonError(404, "not_found", "no endpoint at " + req.path));
      return respond(Calls(*id));
    }
    auto run = module_->store().runs().GetRun(*id);
    if (!run) return respond(JsonError(500, "journal", run.error().message));
    if (!*run) return respond(JsonError(404, "run_not_found", "no run " + seg[2] + " in this store"));
    auto wait = WaitOf(req);
    if (!wait) return respond(JsonError(400, "bad_wait", wait.error().message));
    return AnswerWithRun(*id, std::move(respond), false, *wait);
  }
  if (seg.size() == 2 && seg[1] == "journal") {
    if (m != "GET") return method_not_allowed("GET");
    return HandleJournal(req, std::move(respond));
  }
  respond(JsonError(404, "not_found", "no endpoint at " + req.path + " (docs/api.md lists them)"));
}

void Daemon::HandleStartRun(const HttpRequest& req, const std::string& flow, Respond respond) {
  if (draining_) return respond(JsonError(503, "draining", "basal serve is draining; it starts no new runs. Retry later"));
  auto wait = WaitOf(req);
  if (!wait) return respond(JsonError(400, "bad_wait", wait.error().message));
  // The body is {"input": VALUE}, "input" required (null is a value): a typo such as "inputs"
  // or a forgotten body must not start a run with no input.
  Json body = Json::parse(req.body, nullptr, false);
  if (body.is_discarded() || !body.is_object())
    return respond(JsonError(400, "bad_body", "the body must be a JSON object such as {\"input\": {...}}"));
  for (auto& [k, v] : body.items())
    if (k != "input") return respond(JsonError(400, "bad_body", "unknown key \"" + k + "\" in the body; it takes only \"input\""));
  if (!body.contains("input"))
    return respond(JsonError(400, "bad_body", "the body has no \"input\"; send {\"input\": VALUE} ({\"input\": null} for none)"));
  Json input = body["input"];
  std::string key;
  if (auto k = req.Header("idempotency-key")) {
    key = std::string(*k);
    if (key.empty() || key.size() > 255)
      return respond(JsonError(400, "bad_idempotency_key", "Idempotency-Key must be 1-255 characters"));
  }
  auto f = FlowFor(flow);
  if (!f) {
    const auto code = f.error().code;
    if (code == ErrorCode::kNotFound) return respond(JsonError(404, "flow_not_found", f.error().message));
    if (code == ErrorCode::kRefused) return respond(JsonError(409, "flow_revoked", f.error().message));
    return respond(JsonError(500, "flow_unavailable", f.error().message));
  }
  if (queue_.size() >= o_.config.limits.queue_max && key.empty()) {
    HttpResponse r = JsonError(429, "queue_full", std::to_string(queue_.size()) + " runs are queued, the limit (limits.queue_max); retry later");
    r.headers.emplace_back("Retry-After", "1");
    return respond(r);
  }
  Enqueue(flow, std::move(input), "api", key,
          [this, respond, wait = *wait](Result<Accepted> a) {
            if (!a) {
              if (a.error().code == ErrorCode::kConflict)
                return respond(JsonError(409, "idempotency_key_reused", a.error().message));
              return respond(JsonError(500, "journal", a.error().message));
            }
            const int64_t id = a->run.id;
            if (a->existing) {
              // The same request again: the same run, as it stands (or when it ends, with ?wait).
              AnswerWithRun(id, [respond](HttpResponse r) {
                r.headers.emplace_back("Idempotent-Replayed", "true");
                respond(std::move(r));
              }, false, wait);
              return;
            }
            AnswerWithRun(id, [respond, id](HttpResponse r) {
              r.headers.emplace_back("Location", "/v1/runs/" + std::to_string(id));
              respond(std::move(r));
            }, false, wait);
          });
}

void Daemon::HandleWebhook(const HttpRequest& req, const std::string& trigger, Respond respond) {
  auto it = webhooks_.find(trigger);
  if (it == webhooks_.end()) return respond(JsonError(404, "trigger_not_found", "no webhook trigger named " + trigger));
  const WebhookTrigger& w = it->second;
  if (draining_) return respond(JsonError(503, "draining", "basal serve is draining; deliver again later"));
  auto store = SecretStore::Open(o_.secrets_dir, /*create=*/false);
  Result<std::string> secret = store ? store->Get(w.secret) : Result<std::string>(store.error());
  if (!secret) {
    metrics_.Add("basal_webhooks_total", {trigger, "no_secret"});
    Log("webhook " + trigger + ": its secret " + w.secret + " cannot be read: " + secret.error().message);
    return respond(JsonError(500, "secret_unavailable", "the trigger's secret cannot be read; the operator must set it (basal secret set " + w.secret + ")"));
  }
  const auto ts = req.Header("x-basal-timestamp");
  const auto sig = req.Header("x-basal-signature");
  const int64_t now_s = Now() / 1'000'000;
  SignatureVerdict v = VerifyWebhookSignature(*secret, ts ? *ts : "", sig ? *sig : "", req.body, now_s,
                                              std::chrono::duration_cast<std::chrono::seconds>(w.window).count());
  if (!v.ok) {
    metrics_.Add("basal_webhooks_total", {trigger, v.reason});
    return respond(JsonError(401, v.reason, v.message));
  }
  Json body = Json::parse(req.body, nullptr, false);
  // Everything in the input comes from the signed delivery, so a delivery sent again (a sender's
  // retry, or a replay of a captured one inside the window) is the same input: with the key below
  // it gets the run it already has, never a second one.
  int64_t signed_s = 0;
  for (char c : *ts) signed_s = signed_s * 10 + (c - '0');  // digits only: the check parsed it
  Json input{{"trigger", trigger},
             {"body", body.is_discarded() ? Json(req.body) : body},
             {"content_type", std::string(req.Header("content-type").value_or(""))},
             {"signed_at", UtcText(signed_s * 1'000'000)}};
  // The sender's own delivery id when it sends one; else the delivery itself: the signed
  // timestamp and body, which nobody without the secret can vary (a signature header with other
  // values beside the good one would be a different string, so it is not part of the key).
  std::string key;
  if (auto k = req.Header("idempotency-key")) {
    key = std::string(*k).substr(0, 255);
  } else {
    key = "delivery:" + trigger + ":" + Sha256Hex(std::string(*ts) + "." + req.body);  // keys are per flow
  }
  const bool wait = w.respond == WebhookTrigger::Respond::kWait;
  const auto wait_for = std::min(w.wait, o_.config.limits.wait_max);
  if (auto f = FlowFor(w.flow); !f)
    return respond(JsonError(f.error().code == ErrorCode::kRefused ? 409 : 500, "flow_unavailable",
                             "webhook " + trigger + ": " + f.error().message));
  Enqueue(w.flow, std::move(input), "webhook:" + trigger, key, [this, trigger, respond, wait, wait_for](Result<Accepted> a) {
    if (!a) return respond(JsonError(a.error().code == ErrorCode::kConflict ? 409 : 500, "journal", a.error().message));
    metrics_.Add("basal_webhooks_total", {trigger, a->existing ? "replayed" : "accepted"});
    if (a->existing) {
      AnswerWithRun(
          a->run.id,
          [respond](HttpResponse r) {
            r.headers.emplace_back("Idempotent-Replayed", "true");
            respond(std::move(r));
          },
          true, wait ? std::optional<std::chrono::milliseconds>(wait_for) : std::nullopt);
      return;
    }
    AnswerWithRun(a->run.id, respond, true,
                  wait ? std::optional<std::chrono::milliseconds>(wait_for) : std::nullopt);
  });
}

void Daemon::HandleJournal(const HttpRequest& req, Respond respond) {
  int64_t after = 0;
  if (auto a = req.Query("after")) {
    auto v = ParseId(std::string(*a));
    if (!v) return respond(JsonError(400, "bad_after", "?after= takes an activation id (a non-negative integer)"));
    after = *v;
  }
  size_t limit = 100;
  if (auto l = req.Query("limit")) {
    auto v = ParseId(std::string(*l));
    if (!v || *v < 1 || *v > 1000) return respond(JsonError(400, "bad_limit", "?limit= takes 1-1000"));
    limit = static_cast<size_t>(*v);
  }
  auto wait = WaitOf(req);
  if (!wait) return respond(JsonError(400, "bad_wait", wait.error().message));
  // Activations with an id above `after`, oldest first. `next` is the cursor for the next call: it
  // stays below an unfinished activation, so that one comes again once it has ended.
  auto collect = [this, after, limit]() -> Json {
    Json items = Json::array();
    auto newest = module_->store().reader().Activations(std::nullopt, 1);
    int64_t top = (newest && !newest->empty()) ? newest->back().id : 0;
    int64_t next = after;
    bool unfinished_seen = false;
    for (int64_t id = after + 1; id <= top && items.size() < limit; ++id) {
      auto rows = module_->store().reader().Activations(id, 1);
      if (!rows || rows->empty()) {
        if (!unfinished_seen) next = id;
        continue;
      }
      const ActivationRow& a = rows->front();
      Json j{{"activation_id", a.id}, {"flow", a.flow}, {"started", UtcText(a.start_unix_us)}};
      if (a.end_unix_us) {
        j["ended"] = UtcText(*a.end_unix_us);
        j["outcome"] = a.outcome;
        if (!a.error_json.empty()) j["error"] = ParseOrText(a.error_json);
      } else {
        j["outcome"] = nullptr;
        unfinished_seen = true;
      }
      if (!unfinished_seen) next = a.id;
      items.push_back(std::move(j));
    }
    return Json{{"activations", items}, {"next", next}};
  };
  // News for a long-poll is an activation above `after` that has ended. One that still runs is
  // listed (with "outcome": null) but wakes nobody: the cursor stays below it, so a follower that
  // called again at once would get it again at once, and spin until it ended.
  auto has_news = [](const Json& page) {
    for (const Json& a : page["activations"])
      if (!a["outcome"].is_null()) return true;
    return false;
  };
  Json now = collect();
  if (has_news(now) || !*wait || (*wait)->count() == 0) return respond(JsonResponse(200, now));
  // Long-poll: look again every 100 ms until something ends or the wait passes.
  auto deadline = EventLoop::Clock::now() + **wait;
  auto poll = std::make_shared<std::function<void()>>();
  *poll = [this, collect, has_news, respond, deadline, poll]() {
    Json j = collect();
    if (has_news(j) || EventLoop::Clock::now() >= deadline || draining_) {
      respond(JsonResponse(200, j));
      *poll = nullptr;  // breaks the cycle
      return;
    }
    module_->loop().At(EventLoop::Clock::now() + std::chrono::milliseconds(100), [poll] {
      if (*poll) (*poll)();
    });
  };
  module_->loop().At(EventLoop::Clock::now() + std::chrono::milliseconds(100), [poll] {
    if (*poll) (*poll)();
  });
}

HttpResponse Daemon::Flows() {
  auto names = module_->store().reader().Names(ApprovalKind::kFlow);
  if (!names) return JsonError(500, "journal", names.error().message);
  Json flows = Json::array();
  for (const ApprovalRow& r : *names) {
    Json j{{"name", r.name},
           {"url", "/v1/flows/" + r.name},
           {"version", r.version},
           {"approved", UtcText(r.approved_unix_us)},
           {"approved_by", r.approver.name},
           {"revoked", r.revoked_unix_us.has_value()}};
    flows.push_back(std::move(j));
  }
  return JsonResponse(200, Json{{"flows", flows}});
}

HttpResponse Daemon::FlowDetail(const std::string& name) {
  auto versions = module_->store().reader().Versions(ApprovalKind::kFlow, name);
  if (!versions) return JsonError(500, "journal", versions.error().message);
  if (versions->empty()) return JsonError(404, "flow_not_found", "no flow named " + name + " is approved in this store");
  const ApprovalRow& r = versions->back();
  Json manifest = nullptr;
  if (auto text = module_->store().reader().Text(r.manifest_text_hash); text && *text) manifest = ParseOrText(**text);
  Json history = Json::array();
  for (const ApprovalRow& v : *versions)
    history.push_back(Json{{"version", v.version},
                           {"approved", UtcText(v.approved_unix_us)},
                           {"approved_by", v.approver.name},
                           {"note", v.note},
                           {"revoked", v.revoked_unix_us ? Json(UtcText(*v.revoked_unix_us)) : Json(nullptr)}});
  return JsonResponse(200, Json{{"name", r.name},
                                {"version", r.version},
                                {"revoked", r.revoked_unix_us.has_value()},
                                {"source_hash", r.source_hash},
                                {"manifest", manifest},
                                {"runs_url", "/v1/flows/" + r.name + "/runs"},
                                {"versions", history}});
}

HttpResponse Daemon::Calls(int64_t run_id) {
  auto run = module_->store().runs().GetRun(run_id);
  if (!run) return JsonError(500, "journal", run.error().message);
  if (!*run) return JsonError(404, "run_not_found", "no run " + std::to_string(run_id) + " in this store");
  Json calls = Json::array();
  if ((*run)->activation_id > 0) {
    auto rows = module_->store().reader().Calls((*run)->activation_id);
    if (!rows) return JsonError(500, "journal", rows.error().message);
    for (const CallRow& c : *rows) {
      Json j{{"call_id", c.call_id},
             {"name", c.name},
             {"args", ParseOrText(c.args_json)},
             {"decision", VerdictName(c.decision.verdict)},
             {"rule", c.decision.rule},
             {"reason", c.decision.reason},
             {"effect", EffectName(c.effect)},
             {"state", CallStateName(c.state)},
             {"started", UtcText(c.start_unix_us)}};
      if (c.end_unix_us) {
        j["ended"] = UtcText(*c.end_unix_us);
        j["ms"] = static_cast<double>(*c.end_unix_us - c.start_unix_us) / 1000.0;
      }
      if (!c.result_json.empty()) j["result"] = ParseOrText(c.result_json);
      if (!c.error_json.empty()) j["error"] = ParseOrText(c.error_json);
      calls.push_back(std::move(j));
    }
  }
  return JsonResponse(200, Json{{"run_id", run_id}, {"activation_id", (*run)->activation_id}, {"calls", calls}});
}

HttpResponse Daemon::Metrics() {
  const HealthSnapshot h = module_->Health();
  metrics_.Set("basal_workers", {"idle"}, static_cast<double>(h.workers.idle));
  metrics_.Set("basal_workers", {"busy"}, static_cast<double>(h.workers.busy));
  metrics_.Set("basal_workers", {"live"}, static_cast<double>(h.workers.live));
  for (int i = 0; i < kRetireReasonCount; ++i) {
    const auto reason = static_cast<RetireReason>(i);
    // Counters take deltas: set them to the module's totals by adding what is new.
    const double total = static_cast<double>(h.retired(reason));
    const std::string name = RetireReasonName(reason);
    const double seen = retire_seen_[name];
    if (total > seen) metrics_.Add("basal_worker_retirements_total", {name}, total - seen);
    retire_seen_[name] = total;
  }
  const double deaths = static_cast<double>(h.worker_confinement);
  if (deaths > confinement_seen_) metrics_.Add("basal_confinement_deaths_total", {}, deaths - confinement_seen_);
  confinement_seen_ = deaths;
  for (const auto& [name, by] : h.host_calls)
    for (const auto& [verdict, n] : by) {
      const std::string key = name + "\n" + verdict;
      const double seen = calls_seen_[key];
      if (static_cast<double>(n) > seen) metrics_.Add("basal_host_calls_total", {name, verdict}, static_cast<double>(n) - seen);
      calls_seen_[key] = static_cast<double>(n);
    }
  metrics_.Set("basal_queue_length", {}, static_cast<double>(queue_.size()));
  metrics_.Set("basal_runs_in_flight", {}, static_cast<double>(in_flight_));
  std::string why;
  metrics_.Set("basal_ready", {}, Ready(&why) ? 1 : 0);
  HttpResponse r;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body = metrics_.Render();
  return r;
}

// ---------------------------------------------------------------- /mcp

// The codemode of the config's policy, as `basal mcp --policy NAME` makes it: the policy must be
// approved (a start is refused otherwise, as for a trigger whose flow is not), and its downstream
// MCP servers are started now, before anything is served.
Result<void> Daemon::StartMcp() {
  if (!o_.config.mcp) return Ok();
  const McpConfig& config = *o_.config.mcp;
  mcp::CodemodeLimits limits;
  limits.max_scripts_running = config.max_scripts;
  codemode_ = std::make_unique<mcp::Codemode>(*module_, config.policy, BASAL_VERSION, limits);
  *codemode_for_logs_ = codemode_.get();
  if (auto started = codemode_->Start(o_.secrets_dir); !started) {
    *codemode_for_logs_ = nullptr;
    codemode_.reset();
    const Error& e = started.error();
    const bool unapproved = e.code == ErrorCode::kNotFound || e.code == ErrorCode::kRefused;
    return MakeError(e.code, "mcp.policy " + config.policy + ": " + e.message +
                                 (unapproved ? " (approve it with basal policy approve " + config.policy +
                                                   ", or remove mcp from the config)"
                                             : ""));
  }
  std::string tools;
  for (const mcp::ScriptTool& t : codemode_->ScriptTools()) tools += " " + t.group + "." + t.member;
  Log("mcp: serving codemode policy " + EscapeForLog(config.policy) + " at /mcp, at most " +
      std::to_string(config.max_scripts) + " scripts at once; tools:" + (tools.empty() ? " none" : EscapeForLog(tools)));
  for (const auto& [server, why] : codemode_->UnavailableServers()) {
    Log("mcp: downstream MCP server " + EscapeForLog(server) +
        " is not running (its tools are not offered; a call restarts it): " + EscapeForLog(why));
  }
  return Ok();
}

// MCP's Streamable HTTP transport, without sessions: each POST carries one JSON-RPC message, read
// by an McpServer made for it. A request is answered with its response (application/json) once it
// is ready, which for run_script is when the script's activation ends; a notification or a
// response is accepted (202). basal sends nothing unasked, so there is no GET stream.
void Daemon::HandleMcp(const HttpRequest& req, Respond respond, OnClientGone on_client_gone) {
  if (!codemode_)
    return respond(JsonError(404, "mcp_not_enabled",
                             "this basal serve does not serve MCP: add \"mcp\": {\"policy\": \"NAME\"} to its config, "
                             "naming an approved codemode policy (docs/serve-config.md), and restart it"));
  if (req.method != "POST") {
    HttpResponse r = JsonError(405, "method_not_allowed",
                               req.method + " is not allowed on /mcp: POST one JSON-RPC message per request (basal "
                                            "keeps no sessions and sends no messages unasked, so there is no stream to GET "
                                            "and no session to DELETE)");
    r.headers.emplace_back("Allow", "POST");
    return respond(r);
  }
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
                    {"message", "basal does not speak MCP revision " + requested.dump(-1, ' ', false, Json::error_handler_t::replace) +
                                    " (MCP-Protocol-Version); it speaks " + supported.dump()},
                    {"data", {{"requested", requested}, {"supported", supported}}}};
      HttpResponse r;
      r.status = 400;
      r.body = Dump(Json{{"jsonrpc", "2.0"}, {"id", nullptr}, {"error", std::move(error)}});
      return respond(r);
    }
  } else {
    session = kRevisionWithoutHeader;
  }

  const uint64_t id = next_mcp_exchange_++;
  auto exchange = std::make_unique<McpExchange>();
  McpExchange& x = *exchange;
  x.respond = std::move(respond);
  x.server = std::make_unique<mcp::McpServer>(*codemode_, mcp::ServerInfo{"basal", BASAL_VERSION, codemode_->Instructions()},
                                              [this, id](std::string message) { AnswerMcp(id, std::move(message)); });
  // `initialize` opens the session anew, whatever this says.
  if (!session.empty()) x.server->AssumeSession(session);
  mcp_exchanges_[id] = std::move(exchange);
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
    EndMcpExchange(id);
    return;
  }
  // A tool call runs. A client that leaves stops waiting for it: the script is cancelled.
  on_client_gone([this, id] {
    auto it = mcp_exchanges_.find(id);
    if (it == mcp_exchanges_.end()) return;
    it->second->answered = true;
    it->second->server->CancelAll();
    EndMcpExchange(id);
  });
}

void Daemon::AnswerMcp(uint64_t exchange, std::string message) {
  auto it = mcp_exchanges_.find(exchange);
  if (it == mcp_exchanges_.end() || it->second->answered) return;
  McpExchange& x = *it->second;
  x.answered = true;
  HttpResponse r;
  r.status = McpAnswerStatus(message);
  r.body = std::move(message);
  r.body += "\n";
  x.respond(std::move(r));
  EndMcpExchange(exchange);
}

// The exchange's server is freed on the next loop pass: this may run inside one of its callbacks.
void Daemon::EndMcpExchange(uint64_t exchange) {
  module_->loop().Post([this, exchange] { mcp_exchanges_.erase(exchange); });
}

// ---------------------------------------------------------------- schedules

// at_start: the daemon was down since the marks were stored, so the triggers' catch_up windows
// apply; a reload (SIGHUP) missed nothing, so a fire that came due meanwhile is on time.
// A trigger that could never start a run is refused before anything changes: its flow must be
// approved here (and its newest version not revoked), a webhook's secret must be stored. At start
// the daemon then does not start; at SIGHUP the old triggers keep serving.
Result<void> Daemon::CheckTriggers(const ServeConfig& config) {
  auto flow_ok = [this](const std::string& trigger, const std::string& flow) -> Result<void> {
    if (auto f = FlowFor(flow); !f)
      return MakeError(ErrorCode::kInvalidArgument, "trigger " + trigger + ": " + f.error().message +
                                                        " (approve the flow, or remove the trigger from the config)");
    return Ok();
  };
  if (!config.webhooks.empty()) {
    auto secrets = SecretStore::Open(o_.secrets_dir, /*create=*/false);
    for (const WebhookTrigger& w : config.webhooks) {
      if (auto f = flow_ok(w.name, w.flow); !f) return f;
      Result<std::string> secret = secrets ? secrets->Get(w.secret) : Result<std::string>(secrets.error());
      if (!secret)
        return MakeError(ErrorCode::kInvalidArgument, "trigger " + w.name + ": its secret " + w.secret +
                                                          " cannot be read (" + secret.error().message +
                                                          "); store it with: basal secret set " + w.secret);
    }
  }
  for (const ScheduleTrigger& sc : config.schedules)
    if (auto f = flow_ok(sc.name, sc.flow); !f) return f;
  return Ok();
}

Result<void> Daemon::LoadTriggers(const ServeConfig& config, bool at_start) {
  std::map<std::string, WebhookTrigger> hooks;
  for (const WebhookTrigger& w : config.webhooks) hooks[w.name] = w;
  std::map<std::string, std::unique_ptr<TriggerState>> schedules;
  for (const ScheduleTrigger& s : config.schedules) {
    auto cron = ParseCron(s.cron);
    if (!cron) return MakeError(ErrorCode::kInvalidArgument, "trigger " + s.name + ": " + cron.error().message);
    auto tz = LoadTimeZone(s.timezone);
    if (!tz) return MakeError(ErrorCode::kInvalidArgument, "trigger " + s.name + ": " + tz.error().message);
    auto t = std::make_unique<TriggerState>(TriggerState{s, *cron, *tz, std::nullopt, 0, 0, {}, std::nullopt, ""});
    // The runs still open under this name (kept across a reload, or queued before a restart).
    for (const auto& [run_id, trigger] : run_trigger_)
      if (trigger == s.name) t->open_runs.insert(run_id);
    if (auto old = schedules_.find(s.name); old != schedules_.end()) {
      t->buffered_run = old->second->buffered_run;
      t->buffered_flow = old->second->buffered_flow;
    }
    schedules[s.name] = std::move(t);
  }
  for (auto& [name, t] : schedules_)
    if (t->timer) module_->loop().Cancel(*t->timer);
  // A buffered run whose trigger is gone waits for nobody now.
  for (auto& [name, t] : schedules_)
    if (t->buffered_run && !schedules.count(name)) ReleaseBuffered(*t);
  webhooks_ = std::move(hooks);
  schedules_ = std::move(schedules);
  for (auto& [name, t] : schedules_) CatchUp(*t, at_start);
  return Ok();
}

// The trigger's mark is the last fire it handled (ran, skipped or missed). A trigger without one
// (new) starts from now.
void Daemon::CatchUp(TriggerState& t, bool at_start) {
  const int64_t now = Now();
  auto mark = module_->store().runs().ScheduleMark(t.config.name);
  if (!mark || !*mark) {
    t.mark_us = now;
    (void)module_->store().runs().SetScheduleMark(t.config.name, now);
    ArmSchedule(t, now);
    return;
  }
  t.mark_us = **mark;
  HandleDue(t, at_start ? t.config.catch_up.count() * 1000 : std::max<int64_t>(t.config.catch_up.count() * 1000, kTimerSlackUs));
}

// Handles the fires in (mark, now] as PlanCatchUp decides: each missed one is journaled as a run
// that ended "missed" (at most kMaxMissedListed one by one, the older ones counted in the oldest
// listed one's error), the newest within the window fires (through the overlap policy), the mark
// moves to the newest fire; then the next timer is armed.
void Daemon::HandleDue(TriggerState& t, int64_t window_us) {
  if (draining_) return;
  const int64_t now = Now();
  const CatchUpPlan plan = PlanCatchUp(t.cron, t.tz, t.mark_us, now, window_us);
  const std::string& name = t.config.name;
  for (size_t i = 0; i < plan.missed.size(); ++i) {
    NewRun nr;
    nr.flow = t.config.flow;
    nr.input_json = t.config.input.dump();
    nr.trigger = "schedule:" + name;
    nr.created_unix_us = now;
    nr.state_detail = Json{{"scheduled_for", UtcText(plan.missed[i])}}.dump();
    auto e = module_->store().runs().EnqueueRun(nr);
    if (!e) {
      Log("schedule " + name + ": a missed fire could not be journaled: " + e.error().message);
      continue;
    }
    std::string message = "the daemon was not running (or the clock jumped) at " + UtcText(plan.missed[i]) +
                          ", which is outside the trigger's catch-up window";
    if (i == 0 && plan.missed_unlisted > 0)
      message += " (and " + std::string(plan.missed_count_capped ? "at least " : "") +
                 std::to_string(plan.missed_unlisted) + " earlier fires, not journaled one by one)";
    (void)module_->store().runs().MarkRunEnded(e->run.id, "missed", Json{{"kind", "missed"}, {"message", message}}.dump(), now);
  }
  if (plan.missed_total() > 0) {
    metrics_.Add("basal_schedule_events_total", {name, "missed"}, static_cast<double>(plan.missed_total()));
    Log("schedule " + name + ": " + (plan.missed_count_capped ? "at least " : "") +
        std::to_string(plan.missed_total()) + " fires missed" +
        (plan.run_now ? "; the newest, " + UtcText(*plan.run_now) + ", starts now" : ""));
  } else if (plan.run_now && now - *plan.run_now >= kTimerSlackUs) {
    // Late past any timer's slack: caught up after downtime (or a reload, a clock jump).
    Log("schedule " + name + ": the fire of " + UtcText(*plan.run_now) + ", missed while down, starts now");
  }
  if (plan.mark != t.mark_us) {
    t.mark_us = plan.mark;
    (void)module_->store().runs().SetScheduleMark(name, plan.mark);
  }
  if (plan.run_now) Fire(t, *plan.run_now);
  ArmSchedule(t, t.mark_us);
}

void Daemon::ArmSchedule(TriggerState& t, int64_t after_us) {
  if (draining_) return;
  if (t.timer) module_->loop().Cancel(*t.timer);
  t.timer.reset();
  auto arm = PlanArm(t.cron, t.tz, after_us, Now());
  if (!arm) {
    Log("schedule " + t.config.name + ": no fire time within 5 years");
    return;
  }
  t.next_fire_us = arm->fire_us;
  const std::string name = t.config.name;
  // Re-armed from the wall clock at each wake (at most kMaxArmAheadUs ahead), so a clock step or a
  // suspended machine corrects itself.
  t.timer = module_->loop().At(EventLoop::Clock::now() + std::chrono::microseconds(arm->delay_us), [this, name] {
    auto it = schedules_.find(name);
    if (it == schedules_.end()) return;
    TriggerState& s = *it->second;
    s.timer.reset();
    if (!TimerDue(s.next_fire_us, Now())) {
      ArmSchedule(s, s.next_fire_us - 1);  // woke early: the same fire again
      return;
    }
    // Due: normally the one fire armed for; after a clock jump or a suspend, every fire since the
    // mark, handled like downtime. A timer late by under kTimerSlackUs is on time.
    HandleDue(s, std::max<int64_t>(s.config.catch_up.count() * 1000, kTimerSlackUs));
  });
}

void Daemon::Fire(TriggerState& t, int64_t fire_us) {
  const std::string name = t.config.name;
  const OverlapDecision d = DecideOverlap(t.config.overlap, t.open_runs.size());
  const bool buffer_one = t.config.overlap == ScheduleTrigger::Overlap::kBufferOne;
  if (d == OverlapDecision::kSkip) {
    NewRun nr;
    nr.flow = t.config.flow;
    nr.input_json = t.config.input.dump();
    nr.trigger = "schedule:" + name;
    nr.created_unix_us = Now();
    nr.state_detail = Json{{"scheduled_for", UtcText(fire_us)}}.dump();
    if (auto e = module_->store().runs().EnqueueRun(nr); e)
      (void)module_->store().runs().MarkRunEnded(
          e->run.id, "skipped",
          Json{{"kind", "skipped"},
               {"message", "the fire of " + UtcText(fire_us) + " was skipped: " +
                               (buffer_one ? std::string("a run of schedule " + name + " runs and another waits")
                                           : std::string("the previous run of schedule " + name + " had not ended")) +
                               " (overlap: " + (buffer_one ? "buffer_one" : "skip") + ")"}}
              .dump(),
          Now());
    metrics_.Add("basal_schedule_events_total", {name, "skipped"});
    Log("schedule " + name + ": the fire of " + UtcText(fire_us) + " was skipped (overlap)");
    return;
  }
  // kRun: queued now. kBuffer: journaled as queued now (so it survives a restart) but held out of
  // the dispatch queue until the open run ends (ReleaseBuffered).
  const bool hold = d == OverlapDecision::kBuffer;
  Enqueue(t.config.flow, t.config.input, "schedule:" + name, "",
          [this, name, hold](Result<Accepted> a) {
            if (!a) {
              Log("schedule " + name + ": the run could not be journaled: " + a.error().message);
              return;
            }
            metrics_.Add("basal_schedule_events_total", {name, hold ? "buffered" : "run"});
            auto s = schedules_.find(name);
            // Read again: a run dispatched before this commit may have ended already (cancelled
            // at once); counted open, it would block the trigger for good.
            auto now_row = module_->store().runs().GetRun(a->run.id);
            if (!now_row || !*now_row || (*now_row)->state == RunState::kEnded) return;
            run_trigger_[a->run.id] = name;
            if (s == schedules_.end()) {
              if (hold) ReleaseRun(a->run.id, a->run.flow);
              return;
            }
            const bool others_open = !s->second->open_runs.empty();
            s->second->open_runs.insert(a->run.id);
            if (!hold) return;
            s->second->buffered_run = a->run.id;
            s->second->buffered_flow = a->run.flow;
            if (!others_open) ReleaseBuffered(*s->second);  // the open run ended while this was journaled
          },
          hold);
}

void Daemon::ReleaseRun(int64_t run_id, const std::string& flow) {
  queue_.push_back(run_id);
  queued_flow_[run_id] = flow;
  Dispatch();
}

void Daemon::ReleaseBuffered(TriggerState& t) {
  if (!t.buffered_run) return;
  const int64_t id = *t.buffered_run;
  t.buffered_run.reset();
  ReleaseRun(id, t.buffered_flow);
}

// A run of a schedule ended: it is no longer open, and a run buffered behind it may start.
void Daemon::ScheduleRunEnded(int64_t run_id) {
  auto t = run_trigger_.find(run_id);
  if (t == run_trigger_.end()) return;
  if (auto s = schedules_.find(t->second); s != schedules_.end()) {
    TriggerState& st = *s->second;
    st.open_runs.erase(run_id);
    if (st.buffered_run && *st.buffered_run == run_id) st.buffered_run.reset();  // ended while held
    if (st.buffered_run) ReleaseBuffered(st);
  }
  run_trigger_.erase(t);
}

}  // namespace

int RunDaemon(DaemonOptions options) {
  Daemon d(std::move(options));
  return d.Run();
}

}  // namespace basal::serve
