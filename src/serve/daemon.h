// basal serve: one module as a long-running daemon (docs/serve.md). It serves approved flows over
// HTTP (a Unix socket; optionally loopback TCP with bearer tokens), runs them for API calls,
// signed webhooks and cron schedules, journals every run as queued before it answers, and drains
// on SIGTERM. Everything runs on the module's loop thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "serve/config.h"

namespace basal::serve {

// The system's wall clock, in microseconds since the Unix epoch: DaemonOptions::now_us's default.
int64_t SystemNowUs();

struct DaemonOptions {
  ServeConfig config;
  std::string config_path;  // "" when none: SIGHUP then reloads nothing
  std::string journal_path;  // the store's locator: a path or postgresql://... (docs/postgres.md)
  std::string worker_path;
  std::string secrets_dir;
  std::string socket_path;  // resolved
  // Where the daemon's own lines go (start, stop, reload, trigger decisions): stderr by default.
  std::function<void(const std::string& line)> log;
  // The wall clock, in microseconds since the Unix epoch: every time the daemon journals (runs
  // created, started, ended), every schedule decision (catch-up, the next fire, whether a timer is
  // due) and the webhook timestamp window read it. Tests inject their own.
  std::function<int64_t()> now_us = SystemNowUs;
};

// Runs until SIGTERM or SIGINT has drained it. Returns the process's exit code: 0 after a drain,
// 3 when it could not start (the reason printed through `log`).
int RunDaemon(DaemonOptions options);

}  // namespace basal::serve
