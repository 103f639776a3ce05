// The daemon's life under a supervisor (docs/serve.md, "Stopping, draining, reloading" and
// "Deployment with systemd"): signals read from a signalfd on the loop (SIGTERM and SIGINT drain,
// a second one cancels at once; SIGHUP reloads the config file), sd_notify (READY, STOPPING,
// RELOADING, STATUS) and the watchdog's pets from the loop, so a loop that stops turning stops
// them.
//
// Invariant: a reload changes everything it changes or nothing: a file that does not parse, a
// trigger that could not run, or a changed `mcp` section leaves the running config as it was.
//
//   Lifecycle life({.loop = loop, .config = config, .config_path = path, ...});
//   if (auto s = life.Start(); !s) ...;
//   ... bind the listeners ...
//   life.Serving();
//   while (!life.Drained()) module.RunFor(500ms);
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "basal/result.h"
#include "parent/loop/event_loop.h"
#include "serve/config.h"
#include "serve/mcp_endpoint.h"
#include "serve/run_queue.h"
#include "serve/triggers.h"

namespace basal::serve {

class Lifecycle {
 public:
  struct Options {
    EventLoop& loop;
    ServeConfig& config;      // the running config: a reload replaces its limits and triggers in place
    std::string config_path;  // "" when none: SIGHUP then reloads nothing
    RunQueue& queue;
    Triggers& triggers;
    McpEndpoint& mcp;
    // At a drain: the listeners stop accepting and the API refuses new work.
    std::function<void()> stop_serving;
    std::function<void(const std::string& line)> log;
  };
  explicit Lifecycle(Options options);
  ~Lifecycle();
  Lifecycle(const Lifecycle&) = delete;
  Lifecycle& operator=(const Lifecycle&) = delete;

  // Reads the config file as it is now (what a reload compares with), and blocks SIGTERM, SIGINT
  // and SIGHUP into a signalfd the loop watches.
  Result<void> Start();
  // Everything is up: tells systemd READY=1 and starts petting its watchdog if it asks for pets.
  void Serving();
  // Tells systemd (sd_notify; nothing without $NOTIFY_SOCKET).
  void Notify(const std::string& state);

  bool draining() const { return draining_; }
  // Draining, and nothing runs any more or the drain timeout passed.
  bool Drained() const;

 private:
  void OnSignal(int sig);
  void BeginDrain(const std::string& why);
  void Reload();
  void RefuseReload(const std::string& why);
  void PetWatchdog();

  Options o_;
  std::optional<ServeConfig> file_config_;  // the config file as last read (a reload compares with it)
  int signal_fd_ = -1;
  bool draining_ = false;
  EventLoop::Clock::time_point drain_deadline_{};
  std::optional<EventLoop::TimerId> watchdog_;
  std::chrono::microseconds watchdog_period_{0};
};

}  // namespace basal::serve
