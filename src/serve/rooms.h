// The rooms of `basal serve` on one open module, wired as the daemon wires them: each room gets the
// parts of the module's host it uses and the running config's parts it reads at each use. One
// place, so that what else builds them (the HTTP request fuzzer) runs the daemon's wiring, not a
// copy that drifts from it.
//
//   Rooms r = BuildRooms({.module = *module, .config = config, .metrics = metrics, .mcp = mcp, ...});
//   auto lo = ListenerOptionsFor(*r.api, config.limits, "unix", fd, /*unix_socket=*/true, unsent);
//   auto listener = HttpListener::Start(module->host().loop(), std::move(lo));
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "basal/module.h"
#include "serve/api.h"
#include "serve/auth.h"
#include "serve/config.h"
#include "serve/console.h"
#include "serve/http_server.h"
#include "serve/mcp_endpoint.h"
#include "serve/metrics.h"
#include "serve/run_queue.h"
#include "serve/tail.h"
#include "serve/triggers.h"

namespace basal::serve {

// In the order they use each other (and are destroyed in reverse).
struct Rooms {
  std::unique_ptr<Tail> tail;
  std::unique_ptr<RunQueue> queue;
  std::unique_ptr<Triggers> triggers;
  std::unique_ptr<Console> console;
  std::unique_ptr<Admission> admission;
  std::unique_ptr<Api> api;
};

struct RoomsOptions {
  Module& module;
  // The running config: the rooms keep references to its limits and console parts, which a reload
  // changes in place; it must outlive them.
  const ServeConfig& config;
  MetricsRegistry& metrics;
  McpEndpoint& mcp;
  std::string secrets_dir;
  std::function<int64_t()> now_us;
  std::function<void(const std::string& line)> log;
  bool several_hosts = false;           // the store is PostgreSQL: other hosts may share it
  std::vector<gid_t> allowed_gids;      // who may use the Unix socket without a token
  std::function<bool(std::string* why)> ready;  // /readyz, /v1/health, basal_ready
  int64_t started_us = 0;
  std::string host_id;
};

Rooms BuildRooms(const RoomsOptions& o);

// A listener's options as `basal serve` sets them: the config's connection and body limits, the
// unsent answers' cap, and every request admitted, handled and counted by `api`.
HttpListener::Options ListenerOptionsFor(Api& api, const LimitsConfig& limits, const std::string& name, int listen_fd,
                                         bool unix_socket, std::shared_ptr<UnsentAnswers> unsent);

// Unpredictable bytes for the console's session ids and CSRF tokens (getrandom(2); aborts on a
// system whose generator fails once seeded, which is a broken system).
std::string RandomBytes(size_t n);

}  // namespace basal::serve
