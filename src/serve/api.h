// basal serve's HTTP API (docs/api.md) as a route table: each row a method, a pattern and its
// handler, with what the route asks of a client (auth.h). A request's head is admitted against its
// route before its body is read (Admit); the whole request is then matched once and handed to its
// handler (Handle). Runs are started, read and waited for through the run queue; webhook
// deliveries are verified by the triggers; /mcp is the MCP endpoint's.
//
// Invariant: a path or method the table does not hold is answered 404 or 405 (with Allow) by the
// table, and a run is answered accepted only once its queued row is committed (RunQueue::Enqueue).
//
//   Api api({.module = module, .reader = store.reader(), .queue = queue, ...});
//   listener_options.admit = [&](const HttpRequest& head, size_t* max_body) { return api.Admit(head, max_body); };
//   listener_options.handle = [&](HttpRequest r, Respond respond, OnClientGone gone) { api.Handle(std::move(r), respond, gone); };
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "basal/module.h"
#include "parent/loop/event_loop.h"
#include "parent/store/store.h"
#include "serve/auth.h"
#include "serve/config.h"
#include "serve/console.h"
#include "serve/health_history.h"
#include "parent/module_host.h"
#include "serve/http_message.h"
#include "serve/mcp_endpoint.h"
#include "serve/metrics.h"
#include "serve/routes.h"
#include "serve/run_queue.h"
#include "serve/tail.h"
#include "serve/triggers.h"

namespace basal::serve {

// A webhook's answer with "respond": "flow": the flow's result {status, headers, body} (docs/serve.md).
HttpResponse FlowAnswer(const nlohmann::json& result, bool allow_set_cookie);

// The metrics' route label of a path: its first segment among a fixed few ("/v1", "/hooks",
// "/healthz", "/readyz", "/metrics", "/mcp"), else "other" (bounded series).
std::string MetricsRoute(std::string_view path);

class Api {
 public:
  struct Options {
    Module& module;          // the health report and its counters
    JournalReader& reader;   // flows, activations, calls
    RunQueue& queue;
    ModuleHost& host;  // CurrentFlow: the newest approved version of a flow
    Triggers& triggers;
    McpEndpoint& mcp;
    Tail& tail;  // GET /v1/tail
    Console& console;  // /console/: the web console's files and sign-in
    const Admission& admission;
    MetricsRegistry& metrics;
    EventLoop& loop;              // the journal's long-poll
    const LimitsConfig& limits;   // read at each request: a reload changes it in place
    // Whether the daemon would run a flow now, and if not why (/readyz, /v1/health, basal_ready).
    std::function<bool(std::string* why)> ready;
    int64_t started_us = 0;
    std::function<int64_t()> now_us;  // the daemon's wall clock (a run listing's ?since=2h)
    std::string host_id = {};  // this host's id (config "host_id"): /v1/health's serve.host
  };
  explicit Api(Options options);
  ~Api();
  Api(const Api&) = delete;
  Api& operator=(const Api&) = delete;

  // HttpListener's `admit`: the head is in; a refusal, or nullopt to read the body (at most
  // *max_body bytes: the route's limit).
  std::optional<HttpResponse> Admit(const HttpRequest& head, size_t* max_body);
  // HttpListener's `handle`.
  void Handle(const HttpRequest& req, Respond respond, OnClientGone on_client_gone);
  // HttpListener's `on_response`: counts the answer.
  void Answered(const HttpRequest& req, int status);
  // New runs are refused (503), waits and long-polls answer at once, tails end.
  void Drain() {
    draining_ = true;
    o_.tail.Drain();
  }

 private:
  using Handler = std::function<void(const HttpRequest&, const RouteParams&, Respond, OnClientGone)>;
  struct Route {
    RouteAccess access;
    Handler handler;
    // The body limit of this route, when it is not limits.max_body_bytes.
    std::function<std::optional<size_t>(const RouteParams&)> max_body;
    // Said after a 405's "use METHOD" (why the other methods are not served).
    std::string method_note;
  };
  void AddRoutes();
  void Add(std::vector<std::string> methods, std::string_view pattern, RouteAccess access, Handler handler,
           std::function<std::optional<size_t>(const RouteParams&)> max_body = nullptr, std::string method_note = "");

  void Healthz(Respond respond);
  void Readyz(Respond respond);
  void Health(Respond respond);
  void StartRun(const HttpRequest& req, const std::string& flow, Respond respond);
  void Webhook(const HttpRequest& req, const std::string& trigger, Respond respond);
  void WebhookEvent(const std::string& trigger, Triggers::Delivery delivery, Respond respond);
  void GetRun(const HttpRequest& req, const std::string& id, Respond respond);
  void Journal(const HttpRequest& req, Respond respond);
  // GET /v1/runs (every flow) and GET /v1/flows/{name}/runs (`fixed_flow`).
  HttpResponse ListRuns(const HttpRequest& req, std::optional<std::string> fixed_flow);
  HttpResponse Schedules();
  HttpResponse TailStream(const HttpRequest& req);
  void RunSchedule(const HttpRequest& req, const std::string& name, Respond respond);
  HttpResponse Flows();
  HttpResponse FlowDetail(const std::string& name);
  // One approved version: its manifest and approval; ?against=V adds the review from version V.
  HttpResponse FlowVersion(const HttpRequest& req, const std::string& name, const std::string& version);
  // The main numbers over the last hour (health_history.h), sampled every kHealthSampleInterval.
  void SampleHealth();
  HttpResponse Calls(const HttpRequest& req, const std::string& id);
  // A durable run's operator actions (docs/durable.md): decide a call in doubt, cancel, resume.
  void ResolveRun(const HttpRequest& req, const std::string& id, Respond respond);
  void CancelRun(const HttpRequest& req, const std::string& id, Respond respond);
  void ResumeRun(const HttpRequest& req, const std::string& id, Respond respond);
  void SendEvent(const HttpRequest& req, const std::string& id, const std::string& name, Respond respond);
  HttpResponse Metrics();

  // A verified webhook delivery (Webhook): its run, or a new one past a failed one (attempt > 1).
  void Deliver(std::shared_ptr<const Triggers::Delivery> delivery, std::string trigger, Respond respond, int attempt);
  void Delivered(std::shared_ptr<const Triggers::Delivery> delivery, const std::string& trigger, Respond respond,
                 int attempt, const AcceptedRun& accepted);
  HttpResponse DeliveryAnswer(const Triggers::Delivery& delivery, const RunRow& run, const ActivationRow* activation = nullptr);
  // Runs one delivery may start when each before it failed (a sender retrying after a 5xx).
  static constexpr int kMaxDeliveryRuns = 10;

  // Enqueues `run` and answers with it once committed: at once, or when it ends within `wait`.
  // `accepted`: told of a new run once its row committed.
  void Accept(RunRequest run, std::optional<std::chrono::milliseconds> wait, Respond respond,
              std::function<void(int64_t run_id)> accepted = nullptr);
  // Answers with the run now if it ended or no wait was asked; else when it ends or the wait passes.
  void AnswerWithRun(int64_t run_id, Respond respond, std::optional<std::chrono::milliseconds> wait,
                     const RunRow* known = nullptr);
  nlohmann::json RunJson(const RunRow& run, const ActivationRow* activation = nullptr);
  Result<std::optional<std::chrono::milliseconds>> WaitOf(const HttpRequest& req);

  Options o_;
  RouteTable<Route> routes_;
  bool draining_ = false;
  // The module's counters are totals; the metrics' counters take what is new since the last scrape.
  std::map<std::string, double> retire_seen_;
  std::map<std::string, double> calls_seen_;
  double confinement_seen_ = 0;
  HealthHistory history_;
  EventLoop::TimerId sample_timer_{};
  std::set<std::pair<std::string, std::string>> runs_seen_;  // (flow, state) series of basal_runs set so far
};

}  // namespace basal::serve
