// Signals, drain, reload, sd_notify and the watchdog (lifecycle.h).
#include "serve/lifecycle.h"

#include <signal.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

namespace basal::serve {

Lifecycle::Lifecycle(Options options) : o_(std::move(options)) {}

Lifecycle::~Lifecycle() {
  if (watchdog_) o_.loop.Cancel(*watchdog_);
  if (signal_fd_ >= 0) {
    o_.loop.Unwatch(signal_fd_);
    close(signal_fd_);
  }
}

Result<void> Lifecycle::Start() {
  if (!o_.config_path.empty())
    if (auto f = LoadServeConfig(o_.config_path); f) file_config_ = *f;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  if (sigprocmask(SIG_BLOCK, &set, nullptr) != 0)
    return MakeError(ErrorCode::kInternal, std::string("sigprocmask: ") + std::strerror(errno));
  signal_fd_ = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (signal_fd_ < 0) return MakeError(ErrorCode::kInternal, std::string("signalfd: ") + std::strerror(errno));
  auto watched = o_.loop.Watch(signal_fd_, EPOLLIN, [this](uint32_t) {
    signalfd_siginfo info{};
    while (read(signal_fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) OnSignal(static_cast<int>(info.ssi_signo));
  });
  if (!watched) return watched;
  return Ok();
}

void Lifecycle::Serving() {
  uint64_t watchdog_us = 0;
  if (sd_watchdog_enabled(0, &watchdog_us) > 0 && watchdog_us > 0) {
    watchdog_period_ = std::chrono::microseconds(watchdog_us / 2);
    PetWatchdog();
  }
  Notify("READY=1\nSTATUS=serving");
}

void Lifecycle::Notify(const std::string& state) {
  // Without a supervisor listening there is nobody to tell; a failure changes nothing we do.
  (void)sd_notify(0, state.c_str());
}

// Tells systemd we are alive, every half of WatchdogSec, from the loop: a loop that stops
// turning stops the pets, and systemd restarts the service.
void Lifecycle::PetWatchdog() {
  Notify("WATCHDOG=1");
  watchdog_ = o_.loop.At(EventLoop::Clock::now() + watchdog_period_, [this] { PetWatchdog(); });
}

bool Lifecycle::Drained() const {
  if (!draining_) return false;
  if (o_.queue.in_flight() == 0 && o_.mcp.running() == 0) return true;
  return EventLoop::Clock::now() >= drain_deadline_;
}

void Lifecycle::OnSignal(int sig) {
  if (sig == SIGHUP) {
    Reload();
    return;
  }
  if (draining_) {
    o_.log(std::string(strsignal(sig)) + " again: cancelling what still runs now");
    drain_deadline_ = EventLoop::Clock::now();
    return;
  }
  BeginDrain(strsignal(sig));
}

void Lifecycle::BeginDrain(const std::string& why) {
  draining_ = true;
  Notify("STOPPING=1\nSTATUS=draining");
  o_.log("draining (" + why + "): not ready, accepting nothing new; " +
         std::to_string(o_.queue.in_flight() + o_.mcp.running()) + " running activations get " +
         std::to_string(o_.config.limits.drain_timeout.count()) + " ms; " + std::to_string(o_.queue.queued()) +
         " queued runs stay queued for the next start");
  o_.stop_serving();
  o_.triggers.Drain();
  o_.queue.Drain();
  o_.mcp.Drain();
  drain_deadline_ = EventLoop::Clock::now() + o_.config.limits.drain_timeout;
}

void Lifecycle::RefuseReload(const std::string& why) {
  o_.log("SIGHUP: the config was not reloaded, the running one stays: " + why);
  Notify("READY=1\nSTATUS=serving (the last reload was refused)");
}

void Lifecycle::Reload() {
  if (o_.config_path.empty()) {
    o_.log("SIGHUP: no --config file to reload");
    return;
  }
  // systemd (Type=notify-reload) wants RELOADING=1 with the monotonic time, then READY=1.
  timespec mono{};
  clock_gettime(CLOCK_MONOTONIC, &mono);
  Notify("RELOADING=1\nSTATUS=reloading\nMONOTONIC_USEC=" +
         std::to_string(static_cast<int64_t>(mono.tv_sec) * 1'000'000 + mono.tv_nsec / 1000));
  auto config = LoadServeConfig(o_.config_path);
  if (!config) return RefuseReload(config.error().message);
  // The codemode's policy was read and its downstream servers started at start; agents may be in
  // the middle of scripts under it. Changing it is a restart, never a silent half-change.
  if (config->mcp != o_.config.mcp) {
    const auto shown = [](const std::optional<McpConfig>& m) {
      if (!m) return std::string("none");
      ServeConfig only;
      only.mcp = m;
      return ToJson(only)["mcp"].dump();
    };
    return RefuseReload("its mcp section changed (" + shown(o_.config.mcp) + " -> " + shown(config->mcp) +
                        "); restart basal serve to change mcp");
  }
  if (auto c = o_.triggers.Check(*config); !c) return RefuseReload(c.error().message);
  // Listeners, the store and the worker stay as started; triggers and limits change now.
  const ServeConfig old = o_.config;
  if (auto t = o_.triggers.Load(*config, /*at_start=*/false); !t) {
    o_.log("SIGHUP: the triggers were not reloaded: " + t.error().message + "; the running ones stay");
    if (auto back = o_.triggers.Load(old, /*at_start=*/false); !back)
      o_.log("SIGHUP: the running triggers could not be loaded again: " + back.error().message);
    Notify("READY=1\nSTATUS=serving (the last reload was refused)");
    return;
  }
  o_.config.limits = config->limits;
  o_.config.webhooks = config->webhooks;
  o_.config.schedules = config->schedules;
  o_.config.console = config->console;
  // Compared with the file as last read, not with the running config: the command line (--db,
  // --socket) overrides the file's values there, which is no change.
  if (file_config_ && (config->listen.socket != file_config_->listen.socket ||
                       config->listen.tcp != file_config_->listen.tcp || config->db != file_config_->db ||
                       config->secrets_dir != file_config_->secrets_dir || config->worker != file_config_->worker))
    o_.log("SIGHUP: listeners, the store, the secrets, the worker and the module's limits (max_activations_per_worker, "
          "the parked-run and event limits) change only at a restart; the rest is reloaded");
  file_config_ = *config;
  o_.log("SIGHUP: reloaded " + o_.config_path + ": " + std::to_string(o_.triggers.webhooks()) + " webhooks, " +
         std::to_string(o_.triggers.schedules()) + " schedules");
  Notify("READY=1\nSTATUS=serving");
  o_.queue.Dispatch();
}

}  // namespace basal::serve
