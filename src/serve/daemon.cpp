// basal serve (daemon.h, docs/serve.md): the wiring. It opens the module, builds the rooms, hands
// each the few things it needs of the module (its store's parts, its loop), binds the listeners
// and drives the loop until a drain is over:
//
//   run_queue    runs from accepted to ended; waiters; who hears of an end
//   triggers     webhooks verified into runs; schedules armed, caught up, fired
//   mcp_endpoint POST /mcp: the codemode of the config's policy
//   api          the route table; admission (auth); handlers
//   console      the web console's files and sign-in sessions, over the api
//   lifecycle    signals, drain, reload, sd_notify, watchdog
//   listeners    the Unix socket and the TCP address, on http_server
#include "serve/daemon.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <vector>

#include "basal/module.h"
#include "parent/loop/event_loop.h"
#include "parent/store/locator.h"
#include "parent/store/store.h"
#include "serve/api.h"
#include "serve/auth.h"
#include "serve/console.h"
#include "serve/http_server.h"
#include "serve/lifecycle.h"
#include "serve/listeners.h"
#include "serve/log_line.h"
#include "serve/mcp_endpoint.h"
#include "serve/metrics.h"
#include "serve/rooms.h"
#include "serve/run_queue.h"
#include "serve/tail.h"
#include "serve/triggers.h"

namespace basal::serve {

int64_t SystemNowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

namespace {

// The daemon's metrics, in the order of docs/serve.md's table. Each name is declared once, with a
// valid name and labels: a false here is a bug in this list.
void DeclareMetrics(MetricsRegistry& metrics) {
  bool ok = true;
  ok &= metrics.DeclareCounter("basal_http_requests_total",
                               "HTTP requests answered, by listener, route (/v1, /hooks, /mcp, ...) and status code.",
                               {"listener", "route", "code"});
  ok &= metrics.DeclareCounter("basal_runs_accepted_total", "Runs journaled as queued, by flow and trigger kind.",
                               {"flow", "trigger"});
  ok &= metrics.DeclareCounter("basal_activations_total", "Activations ended, by flow and outcome.", {"flow", "outcome"});
  ok &= metrics.DeclareHistogram("basal_activation_duration_seconds", "Wall time of activations, from start to end, by flow.",
                                 {"flow"}, {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60});
  ok &= metrics.DeclareCounter("basal_host_calls_total", "Host calls decided, by name and decision.", {"name", "decision"});
  ok &= metrics.DeclareGauge("basal_workers", "Workers now, by state.", {"state"});
  ok &= metrics.DeclareCounter("basal_worker_retirements_total", "Workers retired, by reason.", {"reason"});
  ok &= metrics.DeclareCounter("basal_confinement_deaths_total",
                               "Workers killed by the seccomp filter (SIGSYS): a confinement violation.", {});
  ok &= metrics.DeclareGauge("basal_queue_length", "Runs queued and not yet started.", {});
  ok &= metrics.DeclareGauge("basal_runs_in_flight", "Runs started whose activation has not ended.", {});
  ok &= metrics.DeclareGauge("basal_runs", "Runs that have not ended and run no activation now, by flow and state "
                                           "(queued, interrupted, needs_reconciliation, sleeping, waiting, retrying).",
                             {"flow", "state"});
  ok &= metrics.DeclareCounter("basal_schedule_events_total",
                               "Schedule fires, by trigger and what happened (run, buffered, skipped, missed).",
                               {"trigger", "event"});
  ok &= metrics.DeclareCounter("basal_webhooks_total", "Webhook deliveries, by trigger and verdict.", {"trigger", "verdict"});
  ok &= metrics.DeclareCounter("basal_module_events_total", "Events the module reported, by kind.", {"kind"});
  ok &= metrics.DeclareGauge("basal_ready", "1 when /readyz says ready.", {});
  ok &= metrics.DeclareGauge("basal_host_info", "1, labelled with this host's id (config host_id): which host ran what.",
                             {"host"});
  if (!ok) {
    std::fprintf(stderr, "basal serve: a metric of DeclareMetrics was refused (a bug)\n");
    std::abort();
  }
}

class Daemon final : public ModuleObserver {
 public:
  explicit Daemon(DaemonOptions o) : o_(std::move(o)), config_(o_.config) {
    if (!o_.log) o_.log = [](const std::string& line) { std::fprintf(stderr, "basal serve: %s\n", line.c_str()); };
    if (!o_.now_us) o_.now_us = SystemNowUs;
  }

  // The rooms go before the module (members end in reverse order): it must not tell them anything then.
  ~Daemon() override {
    if (!module_) return;
    module_->SetObserver(nullptr);
    module_->SetLogSink(mcp_.LogSink());
  }

  int Run();
  void OnEvent(const ModuleEvent& e) override {
    metrics_.Add("basal_module_events_total", {ModuleEventKindName(e.kind)});
    Log(std::string(ModuleEventKindName(e.kind)) + ": " + EscapeForLog(e.message));
    if (e.kind == ModuleEvent::Kind::kJournalRecovered && rooms_.queue) rooms_.queue->JournalRecovered();
  }
  // The module's activity goes to the live tail, and only while somebody tails.
  bool WantsActivity() const override { return rooms_.tail && rooms_.tail->wanted(); }
  void OnActivity(const ActivityEvent& e) override {
    if (rooms_.tail) rooms_.tail->OnActivity(e);
  }

 private:
  void Log(const std::string& line) { o_.log(line); }
  Result<void> Start();
  Result<void> OpenModule();
  void BuildRooms();
  Result<void> Listen(const std::string& name, Result<int> fd, bool unix_socket);
  bool Ready(std::string* why);
  void Stop();

  DaemonOptions o_;
  ServeConfig config_;  // the running config: SIGHUP replaces its limits and triggers in place
  MetricsRegistry metrics_;
  std::vector<gid_t> allowed_gids_;
  std::unique_ptr<Module> module_;
  // Built before the module (its log sink goes into the module's options), gone before it.
  McpEndpoint mcp_{o_.config.mcp, [this](const std::string& line) { Log(line); }};
  bool doctor_ok_ = false;
  std::string doctor_why_;
  int64_t started_us_ = 0;
  // The rooms, built once the module is open, in the order they use each other.
  Rooms rooms_;
  bool several_hosts_ = false;  // the store is PostgreSQL: other hosts may share it
  std::string host_id_;  // config host_id, or the host name and a random suffix (OpenModule)
  std::unique_ptr<Lifecycle> lifecycle_;
  std::vector<std::unique_ptr<HttpListener>> listeners_;
  // The answers not yet sent, on both listeners together (limits.max_unsent_bytes).
  std::shared_ptr<UnsentAnswers> unsent_ = std::make_shared<UnsentAnswers>(UnsentAnswers{config_.limits.max_unsent_bytes, 0});
};

Result<void> Daemon::OpenModule() {
  ModuleOptions mo;
  mo.journal_path = o_.journal_path;
  mo.worker_path = o_.worker_path;
  mo.secrets_dir = o_.secrets_dir;
  mo.max_workers = config_.limits.max_workers;
  mo.max_activations_per_worker = config_.limits.max_activations_per_worker;
  mo.max_parked_runs = config_.limits.max_parked_runs;
  mo.max_parked_runs_per_flow = config_.limits.max_parked_runs_per_flow;
  mo.max_event_bytes = config_.limits.max_event_bytes;
  mo.max_pending_events_per_run = config_.limits.max_pending_events_per_run;
  mo.event_retention = config_.limits.event_retention;
  mo.require_approval = true;
  mo.observer = std::shared_ptr<ModuleObserver>(this, [](ModuleObserver*) {});
  // Console lines go to /mcp's scripts (their `logs`) and to the live tail.
  mo.log_sink = [this, mcp = mcp_.LogSink()](const HostCallContext& ctx, std::string_view level, std::string_view message) {
    if (mcp) mcp(ctx, level, message);
    if (rooms_.tail) rooms_.tail->OnLog(ctx, level, message);
  };
  // Several hosts may share a PostgreSQL store: leases by the server's clock, a heartbeat, takeover.
  const auto where = ParseLocator(o_.journal_path);
  several_hosts_ = where && where->kind == StoreKind::kPostgres;
  mo.several_hosts = several_hosts_;
  mo.lease = config_.lease;
  host_id_ = config_.host_id;
  if (host_id_.empty()) {
    char name[256] = {};
    if (::gethostname(name, sizeof name - 1) != 0 || name[0] == 0) std::snprintf(name, sizeof name, "host");
    std::random_device random;
    char suffix[16];
    std::snprintf(suffix, sizeof suffix, "-%06x", static_cast<unsigned>(random() & 0xffffff));
    host_id_ = std::string(name) + suffix;
  }
  if (several_hosts_) mo.host_id = host_id_;
  metrics_.Set("basal_host_info", {host_id_}, 1);
  auto module = Module::Open(std::move(mo));
  if (!module) return module.error();
  module_ = std::move(*module);
  return Ok();
}

// The rooms (rooms.h: the one place that reaches into the module's host), and the lifecycle.
void Daemon::BuildRooms() {
  rooms_ = serve::BuildRooms({
      .module = *module_,
      .config = config_,
      .metrics = metrics_,
      .mcp = mcp_,
      .secrets_dir = o_.secrets_dir,
      .now_us = o_.now_us,
      .log = o_.log,
      .several_hosts = several_hosts_,
      .allowed_gids = allowed_gids_,
      .ready = [this](std::string* why) { return Ready(why); },
      .started_us = started_us_,
      .host_id = host_id_,
  });
  EventLoop& loop = module_->host().loop();
  lifecycle_ = std::make_unique<Lifecycle>(Lifecycle::Options{
      .loop = loop,
      .config = config_,
      .config_path = o_.config_path,
      .queue = *rooms_.queue,
      .triggers = *rooms_.triggers,
      .mcp = mcp_,
      .stop_serving =
          [this] {
            for (auto& l : listeners_) l->StopAccepting();
            rooms_.api->Drain();
          },
      .log = o_.log,
  });
}

Result<void> Daemon::Listen(const std::string& name, Result<int> fd, bool unix_socket) {
  if (!fd) return fd.error();
  auto l = HttpListener::Start(module_->host().loop(),
                               ListenerOptionsFor(*rooms_.api, config_.limits, name, *fd, unix_socket, unsent_));
  if (!l) return l.error();
  listeners_.push_back(std::move(*l));
  return Ok();
}

bool Daemon::Ready(std::string* why) {
  if (lifecycle_->draining()) {
    *why = "draining";
    return false;
  }
  if (!doctor_ok_) {
    *why = "the worker was refused at start: " + doctor_why_;
    return false;
  }
  std::string journal_why;
  if (!rooms_.queue->journal_ok(&journal_why)) {
    *why = "the last journal commit failed: " + journal_why;
    return false;
  }
  if (auto writable = module_->host().CheckStore(); !writable) {
    *why = "the store cannot take writes: " + writable.error().message;
    return false;
  }
  return true;
}

// Open the store and check a worker, recover what a previous daemon left, start the triggers and
// /mcp (either refuses the start), bind the listeners, tell systemd.
Result<void> Daemon::Start() {
  started_us_ = o_.now_us();
  DeclareMetrics(metrics_);
  auto groups = ResolveGroups(config_.listen.allowed_groups);
  if (!groups) return groups.error();
  allowed_gids_ = std::move(*groups);
  if (auto m = OpenModule(); !m) return m;
  BuildRooms();

  // Runs that were running when a previous daemon died: their activations were closed abandoned by
  // Open's recovery; the runs take that outcome. Queued runs start again.
  auto recovered = rooms_.queue->Recover();
  if (!recovered) return recovered.error();
  if (recovered->resumed > 0)
    Log("recovery: " + std::to_string(recovered->resumed) + " durable runs of a previous daemon resume (docs/durable.md)");
  if (!recovered->queued.empty()) Log("recovery: " + std::to_string(recovered->queued.size()) + " queued runs will start");
  for (const std::string& refused : recovered->refused) Log("recovery: " + refused);
  rooms_.triggers->AdoptOpenRuns(recovered->queued);

  Module::DoctorReport d = module_->Doctor();
  doctor_ok_ = d.accepted;
  doctor_why_ = d.verdict;
  if (!d.accepted) Log("a worker was refused at start: " + d.verdict + " (/readyz says not ready)");

  if (auto c = rooms_.triggers->Check(config_); !c) return c;
  // Before the triggers: starting the downstream servers turns the loop, when no schedule may fire
  // yet (a refused start must have started nothing).
  if (auto m = mcp_.Start(*module_, module_->host().loop(), o_.secrets_dir); !m) return m;
  if (auto t = rooms_.triggers->Load(config_, /*at_start=*/true); !t) return t;
  if (auto s = lifecycle_->Start(); !s) return s;

  if (auto u = Listen("unix", ListenUnix(o_.socket_path, allowed_gids_), true); !u) return u;
  if (!config_.listen.tcp.empty())
    if (auto t = Listen("tcp", ListenTcp(config_.listen), false); !t) return t;

  // The configuration in use, every default filled in (docs/serve-config.md): what an operator
  // compares with what they meant. Secrets appear as their names only. The paths are the ones in
  // use, whether from the file, a flag or a default, and absolute (a relative --db is relative to a
  // working directory the log does not show).
  ServeConfig effective = config_;
  auto absolute = [](const std::string& path) {
    if (path.empty()) return path;
    std::error_code ec;
    const std::filesystem::path p = std::filesystem::absolute(path, ec);
    return ec ? path : p.lexically_normal().string();
  };
  // A PostgreSQL locator is shown as it is (ToJson hides its password), a journal file absolute.
  auto locator = ParseLocator(o_.journal_path);
  const bool sqlite = !locator || locator->kind == StoreKind::kSqlite;
  if (sqlite) effective.db = absolute(o_.journal_path);
  effective.worker = absolute(o_.worker_path);
  effective.secrets_dir = absolute(o_.secrets_dir);
  effective.listen.socket = absolute(o_.socket_path);
  Log("configuration " + ToJson(effective).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  Log("serving " + o_.socket_path + (config_.listen.tcp.empty() ? "" : " and " + config_.listen.tcp) + ", journal " +
      (sqlite ? effective.db : module_->host().store_location()) +
      (sqlite ? "" : "; host " + host_id_ + ", one of the hosts that may share this store (lease " +
                         FormatDuration(config_.lease) + ")") +
      (mcp_.enabled() ? "; MCP at /mcp" : "") +
      (config_.console.enabled && !config_.listen.tcp.empty() ? "; the console at http://" + config_.listen.tcp + "/console/"
                                                               : ""));
  lifecycle_->Serving();
  // Durable runs resolved by an operator (basal run resolve) resume within a second.
  rooms_.queue->ResumeInterruptedEvery(std::chrono::seconds(1), o_.log);
  rooms_.queue->WakeParkedRuns(std::chrono::seconds(1));
  rooms_.queue->ClaimQueuedEvery(config_.queue_poll);
  rooms_.queue->Dispatch();
  return Ok();
}

// After the drain: cancel what still runs (its runs end cancelled, a script's /mcp request gets
// its result), answer every wait with its run as it stands, let the last answers go out, close.
void Daemon::Stop() {
  const size_t running = rooms_.queue->in_flight() + mcp_.running();
  if (running > 0) Log("drain timeout: cancelling " + std::to_string(running) + " running activations");
  module_->Shutdown(std::chrono::milliseconds(0));
  module_->RunFor(std::chrono::milliseconds(0));
  rooms_.queue->AnswerWaiters();
  module_->RunFor(std::chrono::milliseconds(50));
  mcp_.Stop();
  listeners_.clear();
  unlink(o_.socket_path.c_str());
  Log("stopped");
}

int Daemon::Run() {
  if (auto s = Start(); !s) {
    Log("cannot start: " + s.error().message);
    return 3;
  }
  while (!lifecycle_->Drained()) module_->RunFor(std::chrono::milliseconds(500));
  Stop();
  return 0;
}

}  // namespace

int RunDaemon(DaemonOptions options) {
  Daemon d(std::move(options));
  return d.Run();
}

}  // namespace basal::serve
