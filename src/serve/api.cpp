// basal serve's HTTP API (api.h, docs/api.md).
#include "serve/api.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <cstdlib>
#include <memory>
#include <utility>

#include "basal/manifest.h"
#include "basal/review.h"
#include "parent/store/owner.h"
#include "serve/run_filter.h"

namespace basal::serve {

using Json = nlohmann::json;

namespace {

Json ParseOrText(const std::string& text) {
  if (text.empty()) return nullptr;
  Json j = Json::parse(text, nullptr, false);
  return j.is_discarded() ? Json(text) : j;
}

// A page of /v1/runs/{id}/calls stops after the call that brings it past this many bytes.
constexpr size_t kCallsPageBytes = 1 << 20;
// A page of /v1/runs stops before the run that comes after this many bytes (about: its input,
// result and error counted).
constexpr size_t kRunsPageBytes = 4 << 20;

std::optional<int64_t> ParseId(std::string_view text) {
  if (text.empty() || text.size() > 18) return std::nullopt;
  int64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

// "GET", "GET or HEAD": the methods a 405 tells the client to use.
std::string MethodsText(const std::vector<std::string>& methods) {
  std::string out = AllowHeader(methods);
  for (size_t i = out.find(", "); i != std::string::npos; i = out.find(", ", i)) out.replace(i, 2, " or ");
  return out;
}

}  // namespace

std::string MetricsRoute(std::string_view path) {
  const auto seg = PathSegments(path);
  if (seg.empty()) return "other";
  for (const char* route : {"v1", "hooks", "healthz", "readyz", "metrics", "mcp"})
    if (seg[0] == route) return "/" + std::string(seg[0]);
  return "other";
}

Api::Api(Options options) : o_(std::move(options)) {
  AddRoutes();
  SampleHealth();
}

Api::~Api() { o_.loop.Cancel(sample_timer_); }

void Api::Add(std::vector<std::string> methods, std::string_view pattern, RouteAccess access, Handler handler,
              std::function<std::optional<size_t>(const RouteParams&)> max_body, std::string method_note) {
  // A refused row is a bug in the table below.
  if (!routes_.Add(std::move(methods), pattern, Route{std::move(access), std::move(handler), std::move(max_body),
                                                      std::move(method_note)}))
    std::abort();
}

// The API, one row per route: docs/api.md's table.
void Api::AddRoutes() {
  const RouteAccess open{.scope = ""};
  const RouteAccess read{.scope = "read"};
  const RouteAccess run{.scope = "run"};
  Add({"GET", "HEAD"}, "/healthz", open, [this](auto&, auto&, Respond r, auto) { Healthz(std::move(r)); });
  Add({"GET", "HEAD"}, "/readyz", open, [this](auto&, auto&, Respond r, auto) { Readyz(std::move(r)); });
  Add({"GET"}, "/metrics", {.scope = "metrics"}, [this](auto&, auto&, Respond r, auto) { r(Metrics()); });
  // A webhook's signature is its credential (checked by the triggers, once the body is in).
  Add({"POST"}, "/hooks/{trigger}", open,
      [this](const HttpRequest& req, const RouteParams& p, Respond r, auto) {
        Webhook(req, std::string(p.Get("trigger")), std::move(r));
      },
      [this](const RouteParams& p) { return o_.triggers.WebhookMaxBody(p.Get("trigger")); });
  Add({"POST"}, "/mcp", {.scope = "run", .local_origin_only = true},
      [this](const HttpRequest& req, auto&, Respond r, OnClientGone gone) { o_.mcp.Handle(req, std::move(r), std::move(gone)); },
      nullptr,
      "one JSON-RPC message per request (basal keeps no sessions and sends no messages unasked, so there is no "
      "stream to GET and no session to DELETE)");
  Add({"GET"}, "/v1/flows", read, [this](auto&, auto&, Respond r, auto) { r(Flows()); });
  Add({"GET"}, "/v1/flows/{name}", read,
      [this](auto&, const RouteParams& p, Respond r, auto) { r(FlowDetail(std::string(p.Get("name")))); });
  Add({"GET"}, "/v1/flows/{name}/versions/{version}", read, [this](const HttpRequest& req, const RouteParams& p, Respond r, auto) {
    r(FlowVersion(req, std::string(p.Get("name")), std::string(p.Get("version"))));
  });
  Add({"POST"}, "/v1/flows/{name}/runs", run, [this](const HttpRequest& req, const RouteParams& p, Respond r, auto) {
    StartRun(req, std::string(p.Get("name")), std::move(r));
  });
  Add({"GET"}, "/v1/flows/{name}/runs", read, [this](const HttpRequest& req, const RouteParams& p, Respond r, auto) {
    r(ListRuns(req, std::string(p.Get("name"))));
  });
  Add({"GET"}, "/v1/runs", read,
      [this](const HttpRequest& req, auto&, Respond r, auto) { r(ListRuns(req, std::nullopt)); });
  Add({"GET"}, "/v1/tail", read, [this](const HttpRequest& req, auto&, Respond r, auto) { r(TailStream(req)); });
  Add({"GET"}, "/v1/schedules", read, [this](auto&, auto&, Respond r, auto) { r(Schedules()); });
  Add({"POST"}, "/v1/schedules/{name}/run", run, [this](const HttpRequest& req, const RouteParams& p, Respond r, auto) {
    RunSchedule(req, std::string(p.Get("name")), std::move(r));
  });
  Add({"GET"}, "/v1/runs/{id}", read, [this](const HttpRequest& req, const RouteParams& p, Respond r, auto) {
    GetRun(req, std::string(p.Get("id")), std::move(r));
  });
  Add({"GET"}, "/v1/runs/{id}/calls", read,
      [this](const HttpRequest& req, const RouteParams& p, Respond r, auto) { r(Calls(req, std::string(p.Get("id")))); });
  Add({"POST"}, "/v1/runs/{id}/resolve", run, [this](const HttpRequest& req, const RouteParams& p, Respond r, auto) {
    ResolveRun(req, std::string(p.Get("id")), std::move(r));
  });
  Add({"POST"}, "/v1/runs/{id}/cancel", run, [this](const HttpRequest& req, const RouteParams& p, Respond r, auto) {
    CancelRun(req, std::string(p.Get("id")), std::move(r));
  });
  Add({"POST"}, "/v1/runs/{id}/resume", run, [this](const HttpRequest& req, const RouteParams& p, Respond r, auto) {
    ResumeRun(req, std::string(p.Get("id")), std::move(r));
  });
  Add({"POST"}, "/v1/runs/{id}/events/{name}", run,
      [this](const HttpRequest& req, const RouteParams& p, Respond r, auto) {
        SendEvent(req, std::string(p.Get("id")), std::string(p.Get("name")), std::move(r));
      });
  Add({"GET"}, "/v1/journal", read, [this](const HttpRequest& req, auto&, Respond r, auto) { Journal(req, std::move(r)); });
  Add({"GET"}, "/v1/health", read, [this](auto&, auto&, Respond r, auto) { Health(std::move(r)); });
  Add({"GET"}, "/v1/health/history", read,
      [this](auto&, auto&, Respond r, auto) { r(JsonResponse(200, history_.ToJson(UtcText))); });
  // The web console: its files and its sign-in need no credential (a page that asks for one must
  // load first); what its pages show comes from the routes above, under their own access.
  const RouteAccess console{.scope = ""};
  Add({"GET", "HEAD"}, "/console", console, [this](const HttpRequest& req, auto&, Respond r, auto) { r(o_.console.File(req, "")); });
  Add({"GET"}, "/console/session", console, [this](const HttpRequest& req, auto&, Respond r, auto) { r(o_.console.Session(req)); });
  Add({"POST"}, "/console/session", console, [this](const HttpRequest& req, auto&, Respond r, auto) { r(o_.console.SignIn(req)); },
      [](const RouteParams&) { return std::optional<size_t>(4096); });
  Add({"DELETE"}, "/console/session", console, [this](const HttpRequest& req, auto&, Respond r, auto) { r(o_.console.SignOut(req)); });
  Add({"GET", "HEAD"}, "/console/{file}", console, [this](const HttpRequest& req, const RouteParams& p, Respond r, auto) {
    r(o_.console.File(req, p.Get("file")));
  });
}

// ---------------------------------------------------------------- the request's way

std::optional<HttpResponse> Api::Admit(const HttpRequest& head, size_t* max_body) {
  const auto match = routes_.Find(head.method, head.path);
  // The row of this method when there is one (a path's methods may need different scopes: GET
  // /v1/flows/{name}/runs reads, POST starts a run), else the path's first row.
  const Route* route = match.value ? match.value : match.path_value;
  // The limit as configured now: SIGHUP may have changed it since the listener started.
  *max_body = o_.limits.max_body_bytes;
  if (route && route->max_body)
    if (auto limit = route->max_body(match.params)) *max_body = *limit;
  auto refusal = o_.admission.Admit(head, route ? &route->access : nullptr);
  if (refusal && !head.unix_socket) AddBrowserHeaders(*refusal, /*page=*/false);
  return refusal;
}

void Api::Handle(const HttpRequest& req, Respond respond, OnClientGone on_client_gone) {
  // A browser may reach the TCP listener (the console signs it in); whatever it is answered there
  // is kept from being sniffed, framed or run as a document.
  if (!req.unix_socket)
    respond = [respond = std::move(respond)](HttpResponse r) {
      AddBrowserHeaders(r, /*page=*/false);
      respond(std::move(r));
    };
  const auto match = routes_.Find(req.method, req.path);
  switch (match.kind) {
    case RouteMatch::kFound:
      return match.value->handler(req, match.params, std::move(respond), std::move(on_client_gone));
    case RouteMatch::kMethodNotAllowed: {
      const std::string& note = match.path_value->method_note;
      HttpResponse r = JsonError(405, "method_not_allowed",
                                 req.method + " is not allowed on " + req.path + "; use " + MethodsText(match.allow) +
                                     (note.empty() ? "" : ": " + note));
      r.headers.emplace_back("Allow", AllowHeader(match.allow));
      return respond(std::move(r));
    }
    case RouteMatch::kNotFound: {
      const auto seg = PathSegments(req.path);
      if (seg.empty() || seg[0] != "v1")
        return respond(JsonError(404, "not_found", "no endpoint at " + req.path + "; the API is under /v1 (docs/api.md)"));
      return respond(JsonError(404, "not_found", "no endpoint at " + req.path + " (docs/api.md lists them)"));
    }
  }
}

void Api::Answered(const HttpRequest& req, int status) {
  o_.metrics.Add("basal_http_requests_total", {req.listener, MetricsRoute(req.path), std::to_string(status)});
}

// ---------------------------------------------------------------- health

void Api::Healthz(Respond respond) {
  respond(JsonResponse(200, Json{{"status", "alive"}, {"since", UtcText(o_.started_us)}}));
}

void Api::Readyz(Respond respond) {
  std::string why;
  const bool ok = o_.ready(&why);
  o_.metrics.Set("basal_ready", {}, ok ? 1 : 0);
  respond(ok ? JsonResponse(200, Json{{"status", "ready"}}) : JsonResponse(503, Json{{"status", "not_ready"}, {"reason", why}}));
}

void Api::Health(Respond respond) {
  Json h = o_.module.HealthReport();
  std::string why;
  h["serve"] = Json{{"ready", o_.ready(&why)},   {"not_ready_because", why},
                    {"draining", draining_},     {"queued_runs", o_.queue.queued()},
                    {"runs_in_flight", o_.queue.in_flight()}, {"since", UtcText(o_.started_us)},
                    {"host", o_.host_id}};
  if (o_.mcp.enabled()) h["serve"]["mcp"] = o_.mcp.HealthJson();
  respond(JsonResponse(200, h));
}

HttpResponse Api::Metrics() {
  const HealthSnapshot h = o_.module.Health();
  o_.metrics.Set("basal_workers", {"idle"}, static_cast<double>(h.workers.idle));
  o_.metrics.Set("basal_workers", {"busy"}, static_cast<double>(h.workers.busy));
  o_.metrics.Set("basal_workers", {"live"}, static_cast<double>(h.workers.live));
  for (int i = 0; i < kRetireReasonCount; ++i) {
    const auto reason = static_cast<RetireReason>(i);
    // Counters take deltas: set them to the module's totals by adding what is new.
    const double total = static_cast<double>(h.retired(reason));
    const std::string name = RetireReasonName(reason);
    const double seen = retire_seen_[name];
    if (total > seen) o_.metrics.Add("basal_worker_retirements_total", {name}, total - seen);
    retire_seen_[name] = total;
  }
  const double deaths = static_cast<double>(h.worker_confinement);
  if (deaths > confinement_seen_) o_.metrics.Add("basal_confinement_deaths_total", {}, deaths - confinement_seen_);
  confinement_seen_ = deaths;
  for (const auto& [name, by] : h.host_calls)
    for (const auto& [verdict, n] : by) {
      const std::string key = name + "\n" + verdict;
      const double seen = calls_seen_[key];
      if (static_cast<double>(n) > seen) o_.metrics.Add("basal_host_calls_total", {name, verdict}, static_cast<double>(n) - seen);
      calls_seen_[key] = static_cast<double>(n);
    }
  // Runs between activations by flow and state, counted in the store at the scrape (so runs
  // another process parked count too); a series seen before and gone now reads 0.
  if (auto counts = o_.host.runs().CountRunsByFlow({RunState::kQueued, RunState::kInterrupted,
                                                    RunState::kNeedsReconciliation, RunState::kSleeping,
                                                    RunState::kWaiting, RunState::kRetrying},
                                                   MetricsRegistry::kDefaultMaxSeriesPerFamily);
      counts) {
    std::set<std::pair<std::string, std::string>> now;
    for (const RunCount& c : *counts) {
      now.insert({c.flow, RunStateName(c.state)});
      o_.metrics.Set("basal_runs", {c.flow, RunStateName(c.state)}, static_cast<double>(c.count));
    }
    for (const auto& key : runs_seen_)
      if (!now.count(key)) o_.metrics.Set("basal_runs", {key.first, key.second}, 0);
    runs_seen_.insert(now.begin(), now.end());
  }
  // The queue's gauges are set here, at the scrape (the only reader of the registry), not at every
  // run's acceptance and end.
  o_.metrics.Set("basal_queue_length", {}, static_cast<double>(o_.queue.queued()));
  o_.metrics.Set("basal_runs_in_flight", {}, static_cast<double>(o_.queue.in_flight()));
  std::string why;
  o_.metrics.Set("basal_ready", {}, o_.ready(&why) ? 1 : 0);
  HttpResponse r;
  r.content_type = std::string(kMetricsContentType);
  r.body = o_.metrics.Render();
  return r;
}

// ---------------------------------------------------------------- runs

// A webhook trigger's "respond": "flow": the flow's result {status, headers, body} is the answer.
// status: 200-599 (default 200); headers: names as RFC 9110 tokens, values without control
// characters but TAB; those that belong to a connection, not an answer, are dropped (hop-by-hop
// ones, Content-Length, Date, Server), and Set-Cookie unless allowed; body: a string is sent as it
// is (text/plain unless a Content-Type says otherwise), any other JSON value as JSON. Anything
// else is 502 bad_flow_response, naming what is wrong.
HttpResponse FlowAnswer(const Json& result, bool allow_set_cookie) {
  const char* shape = " (respond \"flow\": return {status: 200-599, headers: {NAME: \"VALUE\"}, body: STRING or JSON})";
  auto bad = [&](const std::string& why) { return JsonError(502, "bad_flow_response", "the flow's answer " + why + shape); };
  if (!result.is_object()) return bad("is not an object");
  for (const auto& [k, v] : result.items())
    if (k != "status" && k != "headers" && k != "body") return bad("has the unknown key \"" + k.substr(0, 64) + "\"");
  HttpResponse r;
  r.status = 200;
  if (auto st = result.find("status"); st != result.end()) {
    if (!st->is_number_integer() || st->get<int64_t>() < 200 || st->get<int64_t>() > 599)
      return bad("has a status that is not an integer from 200 to 599");
    r.status = static_cast<int>(st->get<int64_t>());
  }
  std::optional<std::string> content_type;
  if (auto hs = result.find("headers"); hs != result.end() && !hs->is_null()) {
    if (!hs->is_object()) return bad("has headers that are not an object");
    if (hs->size() > 64) return bad("has more than 64 headers");
    for (const auto& [name, value] : hs->items()) {
      if (name.empty() || name.size() > 256) return bad("has a header name of " + std::to_string(name.size()) + " bytes");
      for (char c : name) {
        const bool tchar = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                           std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
        if (!tchar) return bad("has the header name \"" + name.substr(0, 64) + "\", which is not a token");
      }
      if (!value.is_string()) return bad("has a header " + name + " whose value is not a string");
      const std::string& text = value.get_ref<const std::string&>();
      if (text.size() > 8192) return bad("has a header " + name + " longer than 8192 bytes");
      for (unsigned char c : text)
        if ((c < 0x20 && c != '\t') || c == 0x7f) return bad("has a header " + name + " with a control character");
      std::string lower = name;
      for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      static const std::set<std::string, std::less<>> kDropped = {
          "connection", "keep-alive", "proxy-connection", "proxy-authenticate", "proxy-authorization", "te",
          "trailer",    "transfer-encoding", "upgrade", "content-length", "date", "server"};
      if (kDropped.count(lower) || (lower == "set-cookie" && !allow_set_cookie)) continue;
      if (lower == "content-type") {
        content_type = text;
        continue;
      }
      r.headers.emplace_back(name, text);
    }
  }
  const auto body = result.find("body");
  if (body == result.end() || body->is_null()) {
    r.content_type = content_type.value_or("");
  } else if (body->is_string()) {
    r.body = body->get<std::string>();
    r.content_type = content_type.value_or("text/plain; charset=utf-8");
  } else {
    r.body = JsonBody(*body);
    r.content_type = content_type.value_or("application/json");
  }
  return r;
}

Result<std::optional<std::chrono::milliseconds>> Api::WaitOf(const HttpRequest& req) {
  auto w = req.Query("wait");
  if (!w) return std::optional<std::chrono::milliseconds>();
  auto d = ParseWaitText(*w);
  if (!d) return MakeError(ErrorCode::kInvalidArgument, "?wait=" + std::string(*w) + ": " + d.error().message);
  return std::optional<std::chrono::milliseconds>(std::min(*d, o_.limits.wait_max));
}

void Api::StartRun(const HttpRequest& req, const std::string& flow, Respond respond) {
  if (draining_) return respond(JsonError(503, "draining", "basal serve is draining; it starts no new runs. Retry later"));
  auto wait = WaitOf(req);
  if (!wait) return respond(JsonError(400, "bad_wait", wait.error().message));
  // The body is {"input": VALUE}, "input" required (null is a value): a typo such as "inputs"
  // or a forgotten body must not start a run with no input. {"input": SCALAR} is read without the
  // parser (ReadPlainRunBody: the same value).
  RunRequest run;
  if (!ReadPlainRunBody(req.body, &run.input)) {
    Json body = Json::parse(req.body, nullptr, false);
    if (body.is_discarded() || !body.is_object())
      return respond(JsonError(400, "bad_body", "the body must be a JSON object such as {\"input\": {...}}"));
    for (auto& [k, v] : body.items())
      if (k != "input") return respond(JsonError(400, "bad_body", "unknown key \"" + k + "\" in the body; it takes only \"input\""));
    if (!body.contains("input"))
      return respond(JsonError(400, "bad_body", "the body has no \"input\"; send {\"input\": VALUE} ({\"input\": null} for none)"));
    run.input = std::move(body["input"]);
  }
  run.flow = flow;
  run.trigger = "api";
  if (auto k = req.Header("idempotency-key")) {
    run.idempotency_key = std::string(*k);
    if (run.idempotency_key.empty() || run.idempotency_key.size() > 255)
      return respond(JsonError(400, "bad_idempotency_key", "Idempotency-Key must be 1-255 characters"));
  }
  // The request is well-formed: an idle worker of the flow may start waking now, while the run is
  // accepted and journaled (ModuleHost::WakeIdleWorker). Not for a keyed request, which may be a
  // retry that starts nothing.
  if (run.idempotency_key.empty()) o_.host.WakeIdleWorker(flow);
  // The flow is looked up once, by the queue (a missing or revoked flow: 404, 409).
  Accept(std::move(run), *wait, std::move(respond));
}

void Api::Webhook(const HttpRequest& req, const std::string& trigger, Respond respond) {
  auto verdict = o_.triggers.VerifyDelivery(req, trigger);
  if (auto* answer = std::get_if<HttpResponse>(&verdict)) return respond(std::move(*answer));
  auto& delivery = std::get<Triggers::Delivery>(verdict);
  if (delivery.event) return WebhookEvent(trigger, std::move(delivery), std::move(respond));
  auto shared = std::make_shared<const Triggers::Delivery>(std::move(delivery));
  Deliver(std::move(shared), trigger, std::move(respond), 1);
}

// A delivery to a trigger with "event" (docs/durable.md#events): 202 once the event is journaled,
// delivered to the run that waits for it, or kept for the run that will. The same delivery again
// answers with the event it already made: the store keeps the delivery's id with its event, so
// this holds across restarts and hosts.
void Api::WebhookEvent(const std::string& trigger, Triggers::Delivery delivery, Respond respond) {
  delivery.event->delivery_id = delivery.delivery_id;
  auto sent = o_.queue.SendEvent(std::move(*delivery.event));
  if (!sent) {
    const auto code = sent.error().code;
    const std::string message = "webhook " + trigger + ": " + sent.error().message;
    if (code == ErrorCode::kInvalidArgument) {
      o_.triggers.DeliveryRefused(trigger, "bad_event");
      return respond(JsonError(400, "bad_event", message));
    }
    if (code == ErrorCode::kConflict) {
      // Another host recorded the same delivery at the same moment: a retry finds its event.
      o_.triggers.DeliveryRefused(trigger, "conflict");
      HttpResponse r = JsonError(409, "delivery_in_progress",
                                 message + "; another host is recording this delivery now: retry, and get its event");
      r.headers.emplace_back("Retry-After", "1");
      return respond(std::move(r));
    }
    if (code == ErrorCode::kUnavailable) {
      // The flow holds as many unclaimed keyed events as it may: the sender retries later.
      o_.triggers.DeliveryRefused(trigger, "too_many_events");
      HttpResponse r = JsonError(429, "too_many_events", message);
      r.headers.emplace_back("Retry-After", "60");
      return respond(std::move(r));
    }
    o_.triggers.DeliveryRefused(trigger, "journal");
    return respond(JsonError(500, "journal", message));
  }
  // A replay answers once what it read is committed too (it may be this pass's own event).
  o_.host.AfterCommit([this, trigger, respond, sent = std::move(*sent)](const Result<void>& committed) {
    if (!committed) return respond(JsonError(500, "journal", committed.error().message));
    if (sent.replayed) {
      o_.triggers.DeliveryRefused(trigger, "replayed");
      return respond(JsonResponse(202, Json{{"event_id", sent.event_id}, {"replayed", true}}));
    }
    o_.triggers.EventDelivered(trigger);
    Json answer{{"event_id", sent.event_id}, {"delivered", sent.delivered_to != 0}};
    // The sender learns which run took it, not the run itself (its input and result are the operator's).
    if (sent.delivered_to != 0) answer["run_id"] = sent.delivered_to;
    respond(JsonResponse(202, answer));
  });
}

// A verified delivery's run: new, or the one its key names. A delivery sent again after its run
// failed is a sender's retry (a 5xx told it to): when the trigger answers with the run's end, it
// starts a new run, the delivery's `attempt`th, up to kMaxDeliveryRuns (each with its own key:
// "KEY#2", "KEY#3", ...); once one ended ok, every later copy gets that one.
void Api::Deliver(std::shared_ptr<const Triggers::Delivery> d, std::string trigger, Respond respond, int attempt) {
  RunRequest run = d->run;
  if (attempt > 1) run.idempotency_key += "#" + std::to_string(attempt);
  const std::string key = run.idempotency_key;
  // The result by reference and its error copied once, as in Accept: taken by value, GCC 12 warns
  // that the error may be uninitialized (-Wmaybe-uninitialized, a false positive under -Werror).
  o_.queue.Enqueue(std::move(run), [this, d, trigger, respond, attempt, key](const Result<AcceptedRun>& a) {
    if (!a) {
      const Error error = a.error();
      const ErrorCode code = error.code;
      if (code == ErrorCode::kConflict) {
        // The same delivery with another unsigned part (a Content-Type): its key names its run.
        auto found = o_.reader.ListRuns({.flow = d->run.flow, .limit = 1, .idempotency_key = key});
        if (found && !found->empty()) return Delivered(d, trigger, respond, attempt, AcceptedRun{found->front(), true});
      }
      if (code == ErrorCode::kUnavailable) {
        o_.triggers.DeliveryRefused(trigger, "queue_full");
        HttpResponse r = JsonError(429, "queue_full", error.message);
        r.headers.emplace_back("Retry-After", "1");
        return respond(std::move(r));
      }
      if (code == ErrorCode::kNotFound || code == ErrorCode::kRefused) {
        o_.triggers.DeliveryRefused(trigger, "flow_unavailable");
        return respond(JsonError(code == ErrorCode::kRefused ? 409 : 500, "flow_unavailable",
                                 "webhook " + trigger + ": " + error.message));
      }
      return respond(JsonError(500, "journal", error.message));
    }
    Delivered(d, trigger, respond, attempt, *a);
  });
}

void Api::Delivered(std::shared_ptr<const Triggers::Delivery> d, const std::string& trigger, Respond respond,
                    int attempt, const AcceptedRun& a) {
  const bool failed = a.existing && a.run.state == RunState::kEnded && a.run.outcome != "ok";
  if (failed && d->respond != WebhookTrigger::Respond::kAck && attempt < kMaxDeliveryRuns)
    return Deliver(std::move(d), trigger, std::move(respond), attempt + 1);
  o_.triggers.DeliveryAccepted(trigger, a.existing);
  const bool existing = a.existing;
  o_.queue.Wait(a.run.id, d->wait, RunQueue::WaitedFn([this, d, respond, existing](const Result<RunRow>& run, const ActivationRow* ended) {
    if (!run) return respond(JsonError(500, "internal", run.error().message));
    HttpResponse r = DeliveryAnswer(*d, *run, ended);
    // "ack" answers a new delivery 202, also when its run ended in the commit that accepted it.
    if (!existing && d->respond == WebhookTrigger::Respond::kAck && r.status == 200) r.status = 202;
    if (existing) r.headers.emplace_back("Idempotent-Replayed", "true");
    respond(std::move(r));
  }), existing ? nullptr : &a.run);
}

HttpResponse Api::DeliveryAnswer(const Triggers::Delivery& d, const RunRow& run, const ActivationRow* activation) {
  Json j = RunJson(run, activation);
  const bool ended = run.state == RunState::kEnded;
  const bool ok = ended && j.value("outcome", std::string()) == "ok";
  if (!ended || d.respond == WebhookTrigger::Respond::kAck) return JsonResponse(ended ? 200 : 202, j);
  if (!ok) return JsonResponse(d.failure_status, j);
  if (d.respond == WebhookTrigger::Respond::kFlow) return FlowAnswer(j.value("result", Json()), d.allow_set_cookie);
  return JsonResponse(200, j);
}

void Api::Accept(RunRequest run, std::optional<std::chrono::milliseconds> wait, Respond respond,
                 std::function<void(int64_t run_id)> accepted) {
  // Told once: what it holds is moved on, not copied.
  o_.queue.Enqueue(std::move(run), [this, wait, respond = std::move(respond),
                                    accepted = std::move(accepted)](const Result<AcceptedRun>& a) mutable {
    if (!a) {
      const Error error = a.error();
      const ErrorCode code = error.code;
      if (code == ErrorCode::kUnavailable) {
        // The queue is full (limits.queue_max): the client retries later.
        HttpResponse r = JsonError(429, "queue_full", error.message);
        r.headers.emplace_back("Retry-After", "1");
        return respond(std::move(r));
      }
      if (code == ErrorCode::kNotFound) return respond(JsonError(404, "flow_not_found", error.message));
      if (code == ErrorCode::kRefused) return respond(JsonError(409, "flow_revoked", error.message));
      if (code == ErrorCode::kInvalidArgument) return respond(JsonError(400, "bad_input", error.message));
      if (code == ErrorCode::kConflict) return respond(JsonError(409, "idempotency_key_reused", error.message));
      return respond(JsonError(500, "journal", error.message));
    }
    const int64_t id = a->run.id;
    if (accepted && !a->existing) accepted(id);
    if (a->existing) {
      // The same request again: the same run, as it stands (or when it ends, with a wait).
      return AnswerWithRun(id, [respond = std::move(respond)](HttpResponse r) {
        r.headers.emplace_back("Idempotent-Replayed", "true");
        respond(std::move(r));
      }, wait);
    }
    const bool waits = wait && wait->count() > 0;
    AnswerWithRun(id, [respond = std::move(respond), id, waits](HttpResponse r) {
      // Without a wait the answer is 202, also for a run that ended in the commit that accepted
      // it (its worker answered before that commit: module.cpp, ReadBegunWorker); the body is the
      // run as it stands.
      if (!waits && r.status == 200) r.status = 202;
      r.headers.emplace_back("Location", "/v1/runs/" + std::to_string(id));
      respond(std::move(r));
    }, wait, &a->run);
  });
}

void Api::AnswerWithRun(int64_t run_id, Respond respond, std::optional<std::chrono::milliseconds> wait,
                        const RunRow* known) {
  o_.queue.Wait(run_id, wait, RunQueue::WaitedFn([this, respond = std::move(respond)](const Result<RunRow>& run, const ActivationRow* ended) {
    if (!run) return respond(JsonError(500, "internal", run.error().message));
    // The run's text written directly (RunJsonText: the bytes of RunJson's tree, dumped).
    HttpResponse r;
    r.status = run->state == RunState::kEnded ? 200 : 202;
    r.body = serve::RunJsonText(*run, o_.reader, ended);
    r.body += '\n';
    respond(std::move(r));
  }), known);
}

void Api::GetRun(const HttpRequest& req, const std::string& id_text, Respond respond) {
  auto id = ParseId(id_text);
  if (!id) return respond(JsonError(400, "bad_run_id", "\"" + id_text + "\" is not a run id (a positive integer)"));
  auto run = o_.queue.Get(*id);
  if (!run) return respond(JsonError(500, "journal", run.error().message));
  if (!*run) return respond(JsonError(404, "run_not_found", "no run " + id_text + " in this store"));
  auto wait = WaitOf(req);
  if (!wait) return respond(JsonError(400, "bad_wait", wait.error().message));
  AnswerWithRun(*id, std::move(respond), *wait);
}

// A page of runs, newest first: the filters of run_filter.h, `next` the cursor of the page after
// (null at the end). A page stops early past kRunsPageBytes (a run's input and result are in it).
HttpResponse Api::ListRuns(const HttpRequest& req, std::optional<std::string> fixed_flow) {
  auto q = [&req](std::string_view name) -> std::optional<std::string> {
    if (auto v = req.Query(name)) return std::string(*v);
    return std::nullopt;
  };
  RunFilterText text{.flow = q("flow"), .outcome = q("outcome"), .state = q("state"), .trigger = q("trigger"),
                     .since = q("since"), .cursor = q("cursor"), .limit = q("limit")};
  if (fixed_flow) {
    if (text.flow && *text.flow != *fixed_flow)
      return JsonError(400, "bad_flow", "?flow= names another flow than the path; leave it out");
    text.flow = fixed_flow;
  }
  RunFilterParse parsed = ParseRunFilter(text, o_.now_us(), {.default_limit = 50, .max_limit = 500});
  if (!parsed.ok()) return JsonError(400, parsed.code, parsed.message);
  RunQuery query = parsed.query;
  if (!query.flow.empty()) {
    // A flow this store knows: approved once, or with runs (a codemode script's).
    auto versions = o_.reader.Versions(ApprovalKind::kFlow, query.flow);
    if (!versions) return JsonError(500, "journal", versions.error().message);
    if (versions->empty()) {
      auto any = o_.reader.ListRuns({.flow = query.flow, .limit = 1});
      if (!any) return JsonError(500, "journal", any.error().message);
      if (any->empty()) {
        const std::string message = "no flow named " + query.flow + " in this store (GET /v1/flows lists them)";
        return fixed_flow ? JsonError(404, "flow_not_found", message) : JsonError(400, "bad_flow", message);
      }
    }
  }
  const size_t limit = query.limit;
  query.limit = limit + 1;  // one more tells whether a next page exists
  auto rows = o_.reader.ListRuns(query);
  if (!rows) return JsonError(500, "journal", rows.error().message);
  bool more = rows->size() > limit;
  if (more) rows->resize(limit);
  Json runs = Json::array();
  size_t bytes = 0;
  for (size_t i = 0; i < rows->size(); ++i) {
    if (bytes >= kRunsPageBytes) {
      rows->resize(i);
      more = true;
      break;
    }
    const RunRow& r = (*rows)[i];
    Json j = RunJson(r);
    bytes += r.input_json.size() + r.error_json.size() + r.state_detail.size() + 400;
    if (j.contains("result")) bytes += j["result"].dump(-1, ' ', false, Json::error_handler_t::replace).size();
    runs.push_back(std::move(j));
  }
  const auto next = NextRunCursor(*rows, more);
  return JsonResponse(200, Json{{"runs", std::move(runs)}, {"next", next ? Json(*next) : Json(nullptr)}});
}

// The live tail as server-sent events (tail.h): of every flow, or of ?flow=NAME.
HttpResponse Api::TailStream(const HttpRequest& req) {
  std::optional<std::string> flow;
  if (auto f = req.Query("flow")) {
    RunFilterParse parsed = ParseRunFilter({.flow = std::string(*f)}, 0);
    if (!parsed.ok()) return JsonError(400, parsed.code, parsed.message);
    flow = std::string(*f);
  }
  // A console session holds a few streams (console.max_streams_per_session), a bound of its own
  // inside the tail's.
  Console::AttachStream attach;
  if (auto refusal = o_.console.OpenStream(req, &attach)) return std::move(*refusal);
  // Over TCP, the stream's credential is admitted again at every keepalive tick (tail.h), from a
  // copy of what admission reads: a revoked token ends its stream.
  Tail::StillAdmitted still_admitted;
  if (!req.unix_socket) {
    HttpRequest head;
    head.listener = req.listener;
    head.method = req.method;
    head.path = req.path;
    head.query = req.query;
    head.remote = req.remote;
    head.peer = req.peer;
    for (const auto& [name, value] : req.headers)
      if (name == "authorization" || name == "cookie" || name == "x-csrf-token" || name == "origin")
        head.headers.emplace_back(name, value);
    still_admitted = [this, head = std::move(head)]() -> std::optional<std::string> {
      static const RouteAccess kRead{.scope = "read"};
      auto refusal = o_.admission.Check(head, &kRead);
      if (!refusal) return std::nullopt;
      return std::move(refusal->message);
    };
  }
  auto subscribed = o_.tail.Subscribe(std::move(flow), std::move(still_admitted));
  if (auto* refusal = std::get_if<HttpResponse>(&subscribed)) {
    attach(nullptr);
    return std::move(*refusal);
  }
  HttpResponse r;
  r.status = 200;
  r.content_type = "text/event-stream";
  r.headers.emplace_back("Cache-Control", "no-store");
  r.stream = std::get<std::shared_ptr<HttpStream>>(std::move(subscribed));
  attach(r.stream);
  return r;
}

HttpResponse Api::Schedules() {
  Json list = Json::array();
  for (const Triggers::ScheduleView& v : o_.triggers.Schedules()) {
    list.push_back(Json{{"name", v.name},
                        {"flow", v.flow},
                        {"cron", v.cron},
                        {"timezone", v.timezone},
                        {"overlap", v.overlap},
                        {"next_fire", v.next_fire_us ? Json(UtcText(*v.next_fire_us)) : Json(nullptr)},
                        {"last_fire", v.last_fire_us ? Json(UtcText(*v.last_fire_us)) : Json(nullptr)},
                        {"last_run_id", v.last_run_id ? Json(*v.last_run_id) : Json(nullptr)},
                        {"open_runs", v.open_runs}});
  }
  return JsonResponse(200, Json{{"schedules", std::move(list)}});
}

void Api::RunSchedule(const HttpRequest& req, const std::string& name, Respond respond) {
  if (draining_) return respond(JsonError(503, "draining", "basal serve is draining; it starts no new runs. Retry later"));
  auto wait = WaitOf(req);
  if (!wait) return respond(JsonError(400, "bad_wait", wait.error().message));
  if (!req.body.empty()) {
    Json body = Json::parse(req.body, nullptr, false);
    if (!body.is_object() || !body.empty())
      return respond(JsonError(400, "bad_body", "a schedule runs with the input of its config: send no body (or {})"));
  }
  auto run = o_.triggers.ManualRun(name, o_.admission.Who(req));
  if (auto* refusal = std::get_if<HttpResponse>(&run)) return respond(std::move(*refusal));
  Accept(std::move(std::get<RunRequest>(run)), *wait, std::move(respond),
         [this, name](int64_t id) { o_.triggers.ManualRunAccepted(name, id); });
}

Json Api::RunJson(const RunRow& run, const ActivationRow* ended) { return serve::RunJson(run, o_.reader, ended); }

// A page of the calls of the run's activation, after the call `?after=` (0: from the first), at
// most `?limit=` of them (default 100, 1-1000) and about kCallsPageBytes: the call that passes that
// ends the page. `next` is the cursor of the next page: null when no call follows this page now.
HttpResponse Api::Calls(const HttpRequest& req, const std::string& id_text) {
  auto run_id = ParseId(id_text);
  if (!run_id) return JsonError(400, "bad_run_id", "\"" + id_text + "\" is not a run id (a positive integer)");
  int64_t after = 0;
  if (auto a = req.Query("after")) {
    auto v = ParseId(*a);
    if (!v) return JsonError(400, "bad_after", "?after= takes a call id (a non-negative integer), the `next` of a page");
    after = *v;
  }
  size_t limit = 100;
  if (auto l = req.Query("limit")) {
    auto v = ParseId(*l);
    if (!v || *v < 1 || *v > 1000) return JsonError(400, "bad_limit", "?limit= takes 1-1000");
    limit = static_cast<size_t>(*v);
  }
  auto run = o_.queue.Get(*run_id);
  if (!run) return JsonError(500, "journal", run.error().message);
  if (!*run) return JsonError(404, "run_not_found", "no run " + std::to_string(*run_id) + " in this store");
  Json calls = Json::array();
  Json next = nullptr;
  if ((*run)->activation_id > 0) {
    // Every activation's calls (a durable run resumed has several), else the one activation's (a
    // run journaled before schema 6).
    auto rows = o_.reader.RunCalls(*run_id);
    if (rows && rows->empty()) rows = o_.reader.Calls((*run)->activation_id);
    if (!rows) return JsonError(500, "journal", rows.error().message);
    size_t bytes = 0;
    for (const CallRow& c : *rows) {
      if (c.call_id <= after) continue;
      if (calls.size() >= limit || bytes >= kCallsPageBytes) {
        next = calls.back()["call_id"];
        break;
      }
      Json j{{"call_id", c.call_id},
             {"activation_id", c.activation_id},
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
      bytes += c.name.size() + c.args_json.size() + c.result_json.size() + c.error_json.size() + c.decision.rule.size() +
               c.decision.reason.size() + 200;
      calls.push_back(std::move(j));
    }
  }
  return JsonResponse(200, Json{{"run_id", *run_id},
                                {"activation_id", (*run)->activation_id},
                                {"calls", std::move(calls)},
                                {"next", std::move(next)}});
}

// ---------------------------------------------------------------- a durable run's operator actions

void Api::ResolveRun(const HttpRequest& req, const std::string& id_text, Respond respond) {
  auto id = ParseId(id_text);
  if (!id) return respond(JsonError(400, "bad_run_id", "\"" + id_text + "\" is not a run id (a positive integer)"));
  // {"call": N, and one of "result": VALUE, "error": "MESSAGE", "retry": true; "note"?}
  Json body = Json::parse(req.body, nullptr, false);
  const char* shape =
      "the body must be {\"call\": N, \"result\": VALUE} or {\"call\": N, \"error\": \"MESSAGE\"} or "
      "{\"call\": N, \"retry\": true}, with an optional \"note\"";
  if (!body.is_object()) return respond(JsonError(400, "bad_body", shape));
  for (auto& [k, v] : body.items())
    if (k != "call" && k != "result" && k != "error" && k != "retry" && k != "note")
      return respond(JsonError(400, "bad_body", "unknown key \"" + k + "\": " + shape));
  auto call = body.find("call");
  if (call == body.end() || !call->is_number_integer() || call->get<int64_t>() < 1)
    return respond(JsonError(400, "bad_body", shape));
  const int decisions = body.contains("result") + body.contains("error") + body.contains("retry");
  if (decisions != 1) return respond(JsonError(400, "bad_body", shape));
  CallResolution r;
  r.run_id = *id;
  r.call_id = call->get<int64_t>();
  r.actor = o_.admission.Who(req);
  if (auto note = body.find("note"); note != body.end()) {
    if (!note->is_string()) return respond(JsonError(400, "bad_body", "\"note\" must be a string"));
    r.note = note->get<std::string>().substr(0, 4096);
  }
  if (body.contains("result")) {
    r.kind = ResolutionKind::kResult;
    r.value_json = body["result"].dump(-1, ' ', false, Json::error_handler_t::replace);
  } else if (body.contains("error")) {
    if (!body["error"].is_string()) return respond(JsonError(400, "bad_body", "\"error\" must be the message, a string"));
    r.kind = ResolutionKind::kError;
    r.value_json = Json{{"name", "HostError"}, {"message", body["error"]}}.dump(-1, ' ', false, Json::error_handler_t::replace);
  } else {
    if (body["retry"] != true) return respond(JsonError(400, "bad_body", shape));
    r.kind = ResolutionKind::kRetry;
  }
  auto row = o_.host.ResolveCall(r);
  if (!row) {
    const auto code = row.error().code;
    if (code == ErrorCode::kNotFound) return respond(JsonError(404, "run_not_found", row.error().message));
    if (code == ErrorCode::kConflict) return respond(JsonError(409, "not_in_doubt", row.error().message));
    if (code == ErrorCode::kInvalidArgument) return respond(JsonError(400, "bad_body", row.error().message));
    return respond(JsonError(500, "journal", row.error().message));
  }
  // Resolved whole: the run resumes now (in this batch, which commits the decision with it).
  std::optional<std::string> not_resumed;
  if (row->state == RunState::kInterrupted)
    if (auto resumed = o_.queue.Resume(*id); !resumed) not_resumed = resumed.error().message;
  o_.host.AfterCommit([this, respond, id = *id, not_resumed](const Result<void>& committed) {
    if (!committed) return respond(JsonError(500, "journal", committed.error().message));
    if (not_resumed)
      return respond(JsonError(409, "resume_refused", "the decision is recorded, but the run could not resume: " +
                                                          *not_resumed + " (POST /v1/runs/" + std::to_string(id) +
                                                          "/resume once that is fixed)"));
    AnswerWithRun(id, respond, std::nullopt);
  });
}

void Api::CancelRun(const HttpRequest& req, const std::string& id_text, Respond respond) {
  auto id = ParseId(id_text);
  if (!id) return respond(JsonError(400, "bad_run_id", "\"" + id_text + "\" is not a run id (a positive integer)"));
  const Actor who = o_.admission.Who(req);
  if (auto c = o_.host.CancelRun(*id, "cancelled through the API by " + who.name); !c) {
    const auto code = c.error().code;
    if (code == ErrorCode::kNotFound) return respond(JsonError(404, "run_not_found", c.error().message));
    if (code == ErrorCode::kConflict) return respond(JsonError(409, "not_cancellable", c.error().message));
    return respond(JsonError(500, "journal", c.error().message));
  }
  o_.host.AfterCommit([this, respond, id = *id](const Result<void>& committed) {
    if (!committed) return respond(JsonError(500, "journal", committed.error().message));
    AnswerWithRun(id, respond, std::nullopt);
  });
}

void Api::ResumeRun(const HttpRequest& req, const std::string& id_text, Respond respond) {
  auto id = ParseId(id_text);
  if (!id) return respond(JsonError(400, "bad_run_id", "\"" + id_text + "\" is not a run id (a positive integer)"));
  Json body = req.body.empty() ? Json::object() : Json::parse(req.body, nullptr, false);
  if (!body.is_object() || (body.size() > 1 || (body.size() == 1 && !body.contains("newest_version"))) ||
      (body.contains("newest_version") && !body["newest_version"].is_boolean()))
    return respond(JsonError(400, "bad_body", "the body is empty or {\"newest_version\": true|false}"));
  auto resumed = o_.queue.Resume(*id, body.value("newest_version", false));
  if (!resumed) {
    const auto code = resumed.error().code;
    if (code == ErrorCode::kNotFound) return respond(JsonError(404, "run_not_found", resumed.error().message));
    if (code == ErrorCode::kConflict) return respond(JsonError(409, "not_interrupted", resumed.error().message));
    if (code == ErrorCode::kRefused) return respond(JsonError(409, "version_refused", resumed.error().message));
    return respond(JsonError(500, "journal", resumed.error().message));
  }
  o_.host.AfterCommit([this, respond, id = *id](const Result<void>& committed) {
    if (!committed) return respond(JsonError(500, "journal", committed.error().message));
    AnswerWithRun(id, respond, std::nullopt);
  });
}

// An event for a durable run's waitForEvent (docs/durable.md#events): the body is its payload (any
// JSON). Journaled with who sent it; delivered to the run's wait now (the run resumes) or kept.
void Api::SendEvent(const HttpRequest& req, const std::string& id_text, const std::string& name, Respond respond) {
  auto id = ParseId(id_text);
  if (!id) return respond(JsonError(400, "bad_run_id", "\"" + id_text + "\" is not a run id (a positive integer)"));
  if (req.body.size() > o_.limits.max_event_bytes)
    return respond(JsonError(413, "event_too_large", "the event's payload is " + std::to_string(req.body.size()) +
                                                         " bytes; an event carries at most " +
                                                         std::to_string(o_.limits.max_event_bytes) +
                                                         " (limits.max_event_bytes)"));
  NewRunEvent e;
  e.run_id = *id;
  e.name = name;
  e.payload_json = req.body.empty() ? "null" : req.body;
  e.sender = o_.admission.Who(req).name;
  auto sent = o_.queue.SendEvent(std::move(e));
  if (!sent) {
    const auto code = sent.error().code;
    if (code == ErrorCode::kNotFound) return respond(JsonError(404, "run_not_found", sent.error().message));
    if (code == ErrorCode::kConflict) return respond(JsonError(409, "run_not_waiting", sent.error().message));
    if (code == ErrorCode::kInvalidArgument) return respond(JsonError(400, "bad_event", sent.error().message));
    if (code == ErrorCode::kUnavailable) {
      HttpResponse r = JsonError(429, "too_many_events", sent.error().message);
      r.headers.emplace_back("Retry-After", "60");
      return respond(std::move(r));
    }
    return respond(JsonError(500, "journal", sent.error().message));
  }
  o_.host.AfterCommit([this, respond, sent = std::move(*sent)](const Result<void>& committed) {
    if (!committed) return respond(JsonError(500, "journal", committed.error().message));
    respond(JsonResponse(202, Json{{"event_id", sent.event_id},
                                   {"delivered", sent.delivered_to != 0},
                                   {"run", RunJson(sent.run)}}));
  });
}

// ---------------------------------------------------------------- flows

HttpResponse Api::Flows() {
  auto names = o_.reader.Names(ApprovalKind::kFlow);
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

HttpResponse Api::FlowDetail(const std::string& name) {
  auto versions = o_.reader.Versions(ApprovalKind::kFlow, name);
  if (!versions) return JsonError(500, "journal", versions.error().message);
  if (versions->empty()) return JsonError(404, "flow_not_found", "no flow named " + name + " is approved in this store");
  const ApprovalRow& r = versions->back();
  Json manifest = nullptr;
  if (auto text = o_.reader.Text(r.manifest_text_hash); text && *text) manifest = ParseOrText(**text);
  Json history = Json::array();
  for (const ApprovalRow& v : *versions) {
    Json j{{"version", v.version},
           {"approved", UtcText(v.approved_unix_us)},
           {"approved_by", v.approver.name},
           {"note", v.note},
           {"revoked", v.revoked_unix_us ? Json(UtcText(*v.revoked_unix_us)) : Json(nullptr)}};
    if (v.revoked_unix_us) {
      j["revoked_by"] = v.revoker.name;
      j["revoke_note"] = v.revoke_note;
    }
    history.push_back(std::move(j));
  }
  return JsonResponse(200, Json{{"name", r.name},
                                {"version", r.version},
                                {"revoked", r.revoked_unix_us.has_value()},
                                {"source_hash", r.source_hash},
                                {"manifest", manifest},
                                {"runs_url", "/v1/flows/" + r.name + "/runs"},
                                {"versions", history}});
}

HttpResponse Api::FlowVersion(const HttpRequest& req, const std::string& name, const std::string& version_text) {
  auto versions = o_.reader.Versions(ApprovalKind::kFlow, name);
  if (!versions) return JsonError(500, "journal", versions.error().message);
  if (versions->empty()) return JsonError(404, "flow_not_found", "no flow named " + name + " is approved in this store");
  const std::string known = "flow " + name + " has versions 1 to " + std::to_string(versions->back().version);
  auto find = [&](std::string_view text, const char* what) -> Result<const ApprovalRow*> {
    auto v = ParseId(text);
    if (!v || *v < 1)
      return MakeError(ErrorCode::kInvalidArgument,
                       std::string(what) + " \"" + std::string(text.substr(0, 40)) + "\" is not a version number; " + known);
    for (const ApprovalRow& row : *versions)
      if (row.version == *v) return &row;
    return MakeError(ErrorCode::kNotFound, "no version " + std::to_string(*v) + "; " + known);
  };
  auto row = find(version_text, "the version");
  if (!row) return JsonError(row.error().code == ErrorCode::kNotFound ? 404 : 400, "version_not_found", row.error().message);
  // A kept text, checked against the hash it is kept under (the store could have been edited).
  auto manifest_text = [this](const ApprovalRow& r) -> std::optional<std::string> {
    auto text = o_.reader.Text(r.manifest_text_hash);
    if (!text || !*text || Sha256Hex(**text) != r.manifest_text_hash) return std::nullopt;
    return std::move(**text);
  };
  const ApprovalRow& v = **row;
  auto text = manifest_text(v);
  Json j{{"name", v.name},
         {"version", v.version},
         {"approved", UtcText(v.approved_unix_us)},
         {"approved_by", v.approver.name},
         {"note", v.note},
         {"revoked", v.revoked_unix_us ? Json(UtcText(*v.revoked_unix_us)) : Json(nullptr)},
         {"source_hash", v.source_hash},
         {"manifest_hash", v.manifest_hash},
         {"manifest", text ? ParseOrText(*text) : Json(nullptr)}};
  if (v.revoked_unix_us) {
    j["revoked_by"] = v.revoker.name;
    j["revoke_note"] = v.revoke_note;
  }
  auto against_text = req.Query("against");
  if (!against_text) return JsonResponse(200, j);
  auto against = find(*against_text, "?against=");
  if (!against) return JsonError(against.error().code == ErrorCode::kNotFound ? 404 : 400, "version_not_found", against.error().message);
  // The grants and budgets as `basal flow diff NAME A B` reviews them. The sources are compared
  // by hash only: a line diff of two large sources is work a reader of the API should not be able
  // to make the daemon do at will (`basal flow diff --source` shows it).
  auto before_text = manifest_text(**against);
  if (!text || !before_text)
    return JsonError(500, "journal", "a manifest of flow " + name + " is missing from the store or does not match its hash");
  auto after = Manifest::Parse(*text, o_.module.registry(), Profile::kFlow);
  if (!after)
    return JsonError(409, "manifest_unreadable", "version " + std::to_string(v.version) +
                                                     "'s manifest does not parse with this basal's host calls: " +
                                                     after.error().message);
  auto before = Manifest::Parse(*before_text, o_.module.registry(), Profile::kFlow);
  // Reviewed as a first version (everything it grants), and said so.
  if (!before) j["against_manifest_error"] = before.error().message;
  const Review review = ReviewVersions(before ? &*before : nullptr, std::nullopt, *before_text, *after, std::nullopt,
                                       *text, o_.module.registry());
  j["against"] = (*against)->version;
  j["review"] = ReviewJson(review);
  j["source_changed"] = (*against)->source_hash != v.source_hash;
  return JsonResponse(200, j);
}

// ---------------------------------------------------------------- the console's charts

void Api::SampleHealth() {
  const HealthSnapshot h = o_.module.Health();
  HealthSample s;
  s.at_us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  s.queued = o_.queue.queued();
  s.in_flight = o_.queue.in_flight();
  s.workers_busy = h.workers.busy;
  s.workers_live = h.workers.live;
  s.activations_ok = h.activations_ok;
  s.activations_failed = h.activations_failed_total();
  for (const auto& [name, by] : h.host_calls)
    for (const auto& [verdict, n] : by) {
      s.calls += n;
      if (verdict != "allow") s.calls_refused += n;
    }
  history_.Add(s);
  sample_timer_ = o_.loop.At(EventLoop::Clock::now() + kHealthSampleInterval, [this] { SampleHealth(); });
}

// ---------------------------------------------------------------- the journal

void Api::Journal(const HttpRequest& req, Respond respond) {
  int64_t after = 0;
  if (auto a = req.Query("after")) {
    auto v = ParseId(*a);
    if (!v) return respond(JsonError(400, "bad_after", "?after= takes an activation id (a non-negative integer)"));
    after = *v;
  }
  size_t limit = 100;
  if (auto l = req.Query("limit")) {
    auto v = ParseId(*l);
    if (!v || *v < 1 || *v > 1000) return respond(JsonError(400, "bad_limit", "?limit= takes 1-1000"));
    limit = static_cast<size_t>(*v);
  }
  auto wait = WaitOf(req);
  if (!wait) return respond(JsonError(400, "bad_wait", wait.error().message));
  // Activations with an id above `after`, oldest first. `next` is the cursor for the next call: it
  // stays below an unfinished activation, so that one comes again once it has ended.
  auto collect = [this, after, limit]() -> Json {
    Json items = Json::array();
    auto newest = o_.reader.Activations(std::nullopt, 1);
    int64_t top = (newest && !newest->empty()) ? newest->back().id : 0;
    int64_t next = after;
    bool unfinished_seen = false;
    for (int64_t id = after + 1; id <= top && items.size() < limit; ++id) {
      auto rows = o_.reader.Activations(id, 1);
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
    o_.loop.At(EventLoop::Clock::now() + std::chrono::milliseconds(100), [poll] {
      if (*poll) (*poll)();
    });
  };
  o_.loop.At(EventLoop::Clock::now() + std::chrono::milliseconds(100), [poll] {
    if (*poll) (*poll)();
  });
}

}  // namespace basal::serve
