#include "parent/pool.h"

#include <poll.h>
#include <sys/epoll.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>

#include "parent/activation.h"
#include "parent/signal_free_thread.h"
#include "protocol/frame.h"
#include "protocol/messages.h"

namespace basal {

using Clock = EventLoop::Clock;

// Shared by the loop and the launch thread. `pool` is read and cleared on the loop thread only
// (the posted hand-back runs there), so a hand-back posted just before ~Pool finds it null.
struct LaunchQueue {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<uint64_t, LaunchOptions>> requests;
  std::vector<std::pair<uint64_t, Result<std::unique_ptr<WorkerProcess>>>> results;
  bool stopping = false;
  bool posted = false;  // a hand-back is posted and has not run yet
  Pool* pool = nullptr;
};

Pool::Pool(PoolOptions options, EventLoop& loop, WorkerLauncher& launcher, HealthSnapshot& health, PoolOwner& owner)
    : options_(std::move(options)), loop_(loop), launcher_(launcher), health_(health), owner_(owner),
      launches_(std::make_shared<LaunchQueue>()) {
  launches_->pool = this;
  // The launch thread takes no signal (signal_free_thread.h). The worker's own mask is set by the
  // launch (posix_spawn's SETSIGMASK), not inherited from here.
  launch_thread_ = SignalFreeThread([q = launches_, &launcher, &loop] {
    std::unique_lock lock(q->mu);
    for (;;) {
      q->cv.wait(lock, [&] { return q->stopping || !q->requests.empty(); });
      if (q->stopping) return;
      auto [ticket, launch] = std::move(q->requests.front());
      q->requests.pop_front();
      lock.unlock();
      auto proc = launcher.Launch(launch);  // the vfork wait and the exec happen here, off the loop
      lock.lock();
      q->results.emplace_back(ticket, std::move(proc));
      if (!q->posted) {
        q->posted = true;
        loop.Post([q] {
          if (q->pool) q->pool->TakeLaunched();
        });
      }
    }
  });
}

Pool::~Pool() {
  for (auto& w : workers_) {
    if (w->reaping) ReapNow(*w);  // retired, killed already: its end waited for before the pool's
    if (w->state == PooledWorker::State::kDead || !w->session) continue;
    w->session->process().KillAndReap();
    MarkDead(*w);
  }
  launches_->pool = nullptr;
  {
    std::lock_guard lock(launches_->mu);
    launches_->stopping = true;
  }
  launches_->cv.notify_all();
  launch_thread_.join();  // a launch in flight ends first
  // What it launched that no worker took: killed and reaped (~WorkerProcess) before the thread's
  // end could matter to them.
  std::lock_guard lock(launches_->mu);
  launches_->results.clear();
}

namespace {
constexpr std::chrono::milliseconds kIdleCpuCheckPeriod{1000};
// What the system's CPU backstop is called, for the activation's message.
const char* CpuLimitName(WorkerOs os) {
  return os == WorkerOs::kWindows ? "the job's CPU time limit" : "RLIMIT_CPU (SIGXCPU)";
}
constexpr std::chrono::seconds kCpuLimitSlack{1};  // RLIMIT_CPU counts whole seconds
// RLIMIT_CPU is judged on the CPU time the scheduler's tick charged (CONFIG_TICK_CPU_ACCOUNTING:
// whoever runs at a tick is charged the whole tick, 4 ms at HZ=250), the parent's reading on the
// process's CPU clock (the scheduler's exact runtime). The two drift apart: under load, a worker that
// spun 60 ms at a time met SIGXCPU at 1.79-1.94 s of its exact CPU with a 2 s soft limit (up to 11%
// early). A worker is reused only while a quarter of what it has used fits under its soft limit too.
std::chrono::nanoseconds TickAccountingAllowance(std::chrono::nanoseconds cpu) { return cpu / 4; }
}  // namespace

// Fewer busy than CPUs: a CPU is free, so the loop spins on its own for the next frame (a worker's
// write then wakes nobody). As many busy as CPUs or more (at least two CPUs): it polls too,
// yielding between two looks, so that a worker the scheduler put on the loop's CPU runs first
// instead of waiting for the poll to end. Without it the loop slept after about every other frame
// and each `done` woke it on an idle CPU (a scheduler trace of `--only throughput` at `max_workers`
// 2 on 2 CPUs: both CPUs idle more than half the time; docs/performance.md, "tput15"). Under a
// backlog (the module's defaults, 8 workers on 2 CPUs) the poll used to slow the pool (0.83x,
// "tput15"), when its workers neither polled nor yielded; since they do both, the defaults read
// 57-59k activations/s with it against 52-54k without ("Issue 30: a backlog's workers poll too,
// and the host call's own work, fifteenth round"). One CPU: the loop sleeps while its worker runs.
EventLoop::BusyPoll BusyPollFor(size_t busy, size_t cpus) {
  if (busy == 0) return EventLoop::BusyPoll::kNo;
  if (busy < cpus) return EventLoop::BusyPoll::kSpin;
  return cpus >= 2 ? EventLoop::BusyPoll::kYielding : EventLoop::BusyPoll::kNo;
}

bool Pool::HasExited(const PooledWorker& w) const {
  if (!w.session) return false;  // still launching: no process yet (the module's CPU check can come first)
  pollfd p{w.session->process().pidfd(), POLLIN, 0};
  return ::poll(&p, 1, 0) == 1;
}

std::chrono::nanoseconds Pool::CpuOf(const PooledWorker& w) const {
  return w.cpu_clock ? w.cpu_clock->Read() : std::chrono::nanoseconds(0);
}

std::chrono::nanoseconds Pool::LifetimeCpu(const Flow& flow) const {
  const auto per_activation = flow.manifest.budgets().cpu + options_.cpu_grace + options_.idle_cpu_max;
  return per_activation * options_.max_activations_per_worker + std::chrono::seconds(10);
}

uint64_t Pool::FirstCpuSoftLimitSeconds(const Flow& flow) const {
  return WholeCpuSeconds(flow.manifest.budgets().cpu + options_.cpu_grace + kCpuLimitSlack);
}

Pool::CpuReading Pool::ReadCpu(const PooledWorker& w) const {
  CpuReading r;
  r.at = Clock::now();  // first: the wall time since `at` then bounds the CPU since the reading
  r.cpu = CpuOf(w);
  return r;
}

bool Pool::CpuLimitLeavesRoom(const PooledWorker& w, std::chrono::nanoseconds cpu_now) const {
  const auto next = w.flow->manifest.budgets().cpu + options_.cpu_grace;
  // Moved for the next activation (LimitCpu), the soft limit is cpu_now + next + kCpuLimitSlack;
  // fixed (a parent that cannot move it), it is the first activation's.
  const std::chrono::nanoseconds soft = options_.can_change_worker_limits
                                            ? cpu_now + next + kCpuLimitSlack
                                            : std::chrono::seconds(FirstCpuSoftLimitSeconds(*w.flow));
  return cpu_now + TickAccountingAllowance(cpu_now) + next <= soft;
}

void Pool::LimitCpu(PooledWorker& w, std::chrono::nanoseconds base, std::chrono::milliseconds budget) {
  if (!options_.can_change_worker_limits) return;
  (void)launcher_.LimitCpu(w.session->process(), base + budget + options_.cpu_grace + kCpuLimitSlack, LifetimeCpu(*w.flow));
}

std::chrono::nanoseconds Pool::CheckIdleCpu(PooledWorker& w) {
  const auto now = CpuOf(w);
  if (w.state != PooledWorker::State::kIdle) return now;
  const auto used = now - w.idle_cpu_base;
  if (used <= options_.idle_cpu_max) return now;
  ++health_.idle_cpu_kills;
  owner_.OnEvent({ModuleEvent::Kind::kIdleCpu,
                  "killed idle worker " + std::to_string(w.pid()) + " of flow " + (w.flow ? w.flow->name : std::string("(a spare)")) + ": it used " +
                      std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(used).count()) +
                      " ms of CPU between activations (the limit is " + std::to_string(options_.idle_cpu_max.count()) +
                      " ms)",
                  0, w.pid()});
  Kill(w);
  return now;
}

PooledWorker* Pool::FindIdle(const Flow& flow) {
  const auto now = Clock::now();
  for (auto& w : workers_) {
    if (w->state != PooledWorker::State::kIdle || !w->flow || w->flow->id != flow.id) continue;
    // A worker runs one thread, so its CPU grows no faster than the wall clock: idle for less
    // than idle_cpu_max since its done's reading, it cannot be over the idle limit, and that
    // reading (lower than now's: what it spent since counts in the activation) is the base. Only a
    // longer idle spell costs a read of its CPU clock, a system call each (no vDSO for it).
    const auto since_reading = now - w->idle_cpu_at;
    const bool short_idle = since_reading < options_.idle_cpu_max;
    const auto cpu_now = short_idle ? w->idle_cpu_base : CheckIdleCpu(*w);
    if (w->state != PooledWorker::State::kIdle) continue;
    // Idle past its period while nobody drove the loop (its timer has not run yet): retired, not reused.
    if (now - w->idle_since >= options_.idle_retire) {
      Retire(*w, RetireReason::kIdle);
      continue;
    }
    // Its fixed RLIMIT_CPU would stop the next activation before its budget: a fresh worker.
    if (!CpuLimitLeavesRoom(*w, short_idle ? cpu_now + since_reading : cpu_now)) {
      Retire(*w, RetireReason::kCpuLimit);
      continue;
    }
    w->found_cpu = cpu_now;
    return w.get();
  }
  return nullptr;
}

size_t Pool::Live() const {
  size_t n = 0;
  for (const auto& w : workers_) n += w->state != PooledWorker::State::kDead || w->reaping;
  return n;
}

size_t Pool::Reaping() const {
  size_t n = 0;
  for (const auto& w : workers_) n += w->reaping;
  return n;
}

size_t Pool::Busy() const {
  size_t n = 0;
  for (const auto& w : workers_) n += w->state == PooledWorker::State::kBusy;
  return n;
}

namespace {
bool Starting(const PooledWorker& w) {
  using S = PooledWorker::State;
  return w.state == S::kLaunching || w.state == S::kWelcome || w.state == S::kLoading;
}
}  // namespace

size_t Pool::BusyOrStarting() const {
  size_t n = 0;
  for (const auto& w : workers_) n += w->state == PooledWorker::State::kBusy || Starting(*w);
  return n;
}

bool Pool::AnyStarting() const {
  for (const auto& w : workers_)
    if (Starting(*w)) return true;
  return false;
}

bool Pool::MakeRoom() {
  while (Live() >= options_.max_workers) {
    PooledWorker* victim = nullptr;
    for (auto& w : workers_)
      if (w->state == PooledWorker::State::kIdle) {
        victim = w.get();
        break;
      }
    if (!victim) return false;
    Retire(*victim, RetireReason::kEvicted);
    ReapNow(*victim);  // its room is taken in this pass
  }
  return true;
}

LaunchOptions Pool::LaunchFor(const Flow& flow) const {
  LaunchOptions launch;
  launch.path = options_.worker_path;
  launch.args = options_.worker_args;
  launch.credentials = options_.welcome_policy.worker_identity;
  const uint64_t headroom = flow.profile == Profile::kFlow ? options_.flow_memory_headroom_bytes
                                                           : options_.codemode_memory_headroom_bytes;
  // The worker sets its limits itself (a worker that already runs as the worker user may be out of
  // this parent's reach); the first activation's CPU counts from the spawn (it includes loading).
  launch.limits.address_space_bytes = flow.manifest.budgets().heap_limit_bytes + headroom;
  launch.limits.cpu_hard_seconds = WholeCpuSeconds(LifetimeCpu(flow));
  launch.limits.cpu_soft_seconds = std::min(FirstCpuSoftLimitSeconds(flow), launch.limits.cpu_hard_seconds);
  launch.profile = flow.profile == Profile::kFlow ? WorkerProfile::kFlow : WorkerProfile::kCodemode;
  launch.heap_budget_bytes = flow.manifest.budgets().heap_limit_bytes;
  return launch;
}

namespace {
// Whether a spare launched with `a` may serve a flow that would be launched with `b`: the same
// limits the worker set on itself and the same profile (the same binary, arguments and user).
bool SameLaunch(const LaunchOptions& a, const LaunchOptions& b) {
  return a.limits.address_space_bytes == b.limits.address_space_bytes &&
         a.limits.cpu_soft_seconds == b.limits.cpu_soft_seconds && a.limits.cpu_hard_seconds == b.limits.cpu_hard_seconds &&
         a.profile == b.profile && a.heap_budget_bytes == b.heap_budget_bytes;
}
}  // namespace

PooledWorker& Pool::StartLaunch(const FlowRef& flow, const LaunchOptions& launch, Activation* activation, bool spare) {
  auto w = std::make_unique<PooledWorker>();
  w->flow = flow;
  w->activation = activation;
  w->spare = spare;
  w->launch = launch;
  w->launch_ticket = next_ticket_++;
  // Workers started together (a backlog meets an empty pool) take activations at the same pace:
  // with one count they would all retire in the same millisecond, every pool-full of activations,
  // and the flow would wait for all their successors at once. The count of a worker started on
  // demand is lowered by a stagger of 0 to max/8 - 1 (0 for the pool's first worker; 5 apart from
  // one launch to the next), so retirements spread out; a successor runs the full count
  // (StartSuccessor), so they stay spread without shortening any later worker's life. No worker
  // runs more than max_activations_per_worker.
  const uint32_t spread = options_.max_activations_per_worker / 8;
  w->max_activations = options_.max_activations_per_worker -
                       (spread ? static_cast<uint32_t>(((w->launch_ticket - 1) * 5) % spread) : 0);
  PooledWorker* raw = w.get();
  workers_.push_back(std::move(w));
  {
    std::lock_guard lock(launches_->mu);
    launches_->requests.emplace_back(raw->launch_ticket, launch);
  }
  launches_->cv.notify_one();
  // The welcome's time limit counts from the request: a launch that never returns is bounded too.
  raw->timer = loop_.At(Clock::now() + options_.welcome_timeout, [this, raw] {
    raw->timer.reset();
    WelcomeTimedOut(*raw);
  });
  return *raw;
}

Result<PooledWorker*> Pool::Spawn(const FlowRef& flow, Activation* activation) {
  const LaunchOptions launch = LaunchFor(*flow);
  // A durable run's activation starts in a process launched for it (its load carries the run's
  // clock and seed, as its replay's will).
  const bool fresh = activation && activation->durable;
  const bool codemode = !fresh && codemode_spares_ && flow->profile == Profile::kCodemode;
  PooledWorker* taken = nullptr;
  // A successor of this flow still starting: it takes the activation once it has loaded, rather
  // than a second process being started beside it.
  for (auto& w : workers_) {
    if (fresh) break;
    const bool starting = w->state == PooledWorker::State::kLaunching || w->state == PooledWorker::State::kWelcome ||
                          w->state == PooledWorker::State::kLoading;
    if (starting && w->spare && !w->activation && w->flow && w->flow->id == flow->id) {
      w->activation = activation;
      w->spare = false;
      return w.get();
    }
  }
  if (codemode) {
    for (auto& w : workers_) {
      const bool unbound = !w->flow && (w->state == PooledWorker::State::kLaunching ||
                                        w->state == PooledWorker::State::kWelcome || w->state == PooledWorker::State::kIdle);
      if (unbound && SameLaunch(w->launch, launch)) {
        taken = w.get();
        break;
      }
    }
  }
  if (taken) {
    // Bound to this script for life: it never goes back to being a spare.
    taken->flow = flow;
    taken->activation = activation;
    taken->spare = false;
    if (taken->state == PooledWorker::State::kIdle) SendLoad(*taken);  // welcomed already
  } else {
    taken = &StartLaunch(flow, launch, activation, /*spare=*/false);
  }
  // The next spare starts when this script's worker is retired with its flow (Retire): after the
  // script's answer, in the agent's turn, not beside the script on the same CPUs (where its start
  // and its engine slowed the script as much as they spared the next one: docs/performance.md,
  // "Issue 30, run_script, fifth round").
  return taken;
}

void Pool::StartCodemodeSpare(const LaunchOptions& launch) {
  for (const auto& w : workers_)
    if (!w->flow && w->state != PooledWorker::State::kDead && SameLaunch(w->launch, launch)) return;  // one is enough
  if (Live() >= options_.max_workers) return;  // a spare counts against the cap; none at it
  LaunchOptions ahead = launch;
  ahead.started_ahead = true;  // it makes its engine while it waits for a script
  StartLaunch(nullptr, ahead, nullptr, /*spare=*/true);
}

void Pool::CountActivation(PooledWorker& w) {
  ++w.activations;
  if (w.activations >= w.max_activations) StartSuccessor(w);
}

void Pool::StartSuccessor(PooledWorker& w) {
  if (w.successor_started || !w.flow || Live() >= options_.max_workers) return;
  w.successor_started = true;
  StartLaunch(w.flow, w.launch, nullptr, /*spare=*/true).max_activations = options_.max_activations_per_worker;
}

void Pool::TakeLaunched() {
  std::vector<std::pair<uint64_t, Result<std::unique_ptr<WorkerProcess>>>> results;
  {
    std::lock_guard lock(launches_->mu);
    results.swap(launches_->results);
    launches_->posted = false;
  }
  for (auto& [ticket, proc] : results) {
    PooledWorker* w = nullptr;
    for (auto& c : workers_)
      if (c->launch_ticket == ticket) w = c.get();
    // Retired, timed out or swept while it launched: its process is killed and reaped here.
    if (!w || w->state != PooledWorker::State::kLaunching) continue;
    if (!proc) {
      ++health_.spawn_failures;
      MarkDead(*w);
      Lost(*w, Outcome::kSpawnFailed, proc.error().message);
      continue;
    }
    Attach(*w, std::move(*proc));
  }
}

void Pool::Attach(PooledWorker& w, std::unique_ptr<WorkerProcess> process) {
  w.session = std::make_unique<WorkerSession>(std::move(process));
  w.cpu_clock = launcher_.CpuClock(w.session->process());
  if (!w.cpu_clock) {
    ++health_.spawn_failures;
    w.session->process().KillAndReap();
    MarkDead(w);
    Lost(w, Outcome::kSpawnFailed, "cannot read the CPU clock of worker " + std::to_string(w.pid()));
    return;
  }
  w.state = PooledWorker::State::kWelcome;
  PooledWorker* raw = &w;
  WorkerProcess& p = w.session->process();
  Result<void> watched = loop_.Watch(p.stdout_fd(), EPOLLIN, [this, raw](uint32_t) { OnReadable(*raw); });
  if (watched) watched = loop_.Watch(p.stderr_fd(), EPOLLIN, [raw](uint32_t) { raw->session->DrainStderr(); });
  if (watched) watched = loop_.Watch(p.pidfd(), EPOLLIN, [this, raw](uint32_t) { OnExit(*raw); });
  ++health_.spawned;
  if (!watched) {
    ++health_.spawn_failures;
    w.session->process().KillAndReap();
    MarkDead(w);
    Lost(w, Outcome::kSpawnFailed, watched.error().message);
  }
}

void Pool::UpdateStdinWatch(PooledWorker& w) {
  const bool want = w.session->has_pending_output() && w.state != PooledWorker::State::kDead;
  if (want == w.watching_stdin) return;
  const int fd = w.session->process().stdin_fd();
  if (want) {
    PooledWorker* raw = &w;
    if (!loop_.Watch(fd, EPOLLOUT, [this, raw](uint32_t) { OnWritable(*raw); })) return;
  } else {
    loop_.Unwatch(fd);
  }
  w.watching_stdin = want;
}

void Pool::Send(PooledWorker& w, std::string_view payload) {
  if (w.state == PooledWorker::State::kDead || !w.session) return;
  w.poll_sent = false;  // a frame ends the worker's wait: a `poll` after it is for its next
  w.session->Send(payload);  // a broken pipe shows up as the worker's exit
  UpdateStdinWatch(w);
}

void Pool::SendPoll(PooledWorker& w) {
  if (w.state == PooledWorker::State::kDead || !w.session || w.poll_sent) return;
  w.poll_sent = true;
  w.session->Send(protocol::BuildPoll());
  UpdateStdinWatch(w);
}

void Pool::WakeIdle(std::string_view name) {
  for (auto& w : workers_) {
    if (w->state != PooledWorker::State::kIdle || !w->flow || w->flow->name != name || !w->session) continue;
    SendPoll(*w);  // the first one, as FindIdle would find it; not again before its next frame
    return;
  }
}

void Pool::SendActivate(PooledWorker& w, int64_t activation, std::string_view input_json, bool poll) {
  if (w.state == PooledWorker::State::kDead || !w.session) return;
  w.poll_sent = false;
  w.session->SendActivate(activation, input_json, poll);  // as Send
  UpdateStdinWatch(w);
}

void Pool::OnWritable(PooledWorker& w) {
  const uint64_t before = w.session->written_bytes();
  w.session->Flush();
  UpdateStdinWatch(w);
  if (w.session->written_bytes() != before && w.state == PooledWorker::State::kBusy && w.activation)
    owner_.OnWorkerDrained(w);
}

void Pool::MarkDead(PooledWorker& w) {
  if (w.state == PooledWorker::State::kDead) return;
  if (w.session) {
    WorkerProcess& p = w.session->process();
    for (int fd : {p.stdout_fd(), p.stderr_fd(), p.pidfd(), p.stdin_fd()})
      if (fd >= 0) loop_.Unwatch(fd);
  }
  w.watching_stdin = false;
  if (w.timer) loop_.Cancel(*w.timer);
  w.timer.reset();
  if (w.idle_cpu_timer) loop_.Cancel(*w.idle_cpu_timer);
  w.idle_cpu_timer.reset();
  w.state = PooledWorker::State::kDead;
}

void Pool::Lost(PooledWorker& w, Outcome outcome, std::string message) {
  if (!w.activation) return;
  owner_.OnWorkerLost(w, Failure(outcome, std::move(message)));
  w.activation = nullptr;
}

// A worker still launching has no process yet: marked dead, its process is killed when it arrives.
void Pool::Kill(PooledWorker& w) {
  if (w.state == PooledWorker::State::kDead) return;
  if (w.session) w.session->process().KillAndReap();
  MarkDead(w);
}

void Pool::Retire(PooledWorker& w, RetireReason reason) {
  if (w.state == PooledWorker::State::kDead) return;
  ++health_.retirements[static_cast<int>(reason)];
  // Killed now (one still launching is killed when its process arrives), and reaped when the loop
  // sees it exit: waiting here for the teardown of its address space held the loop 0.1-0.4 ms at
  // each retirement (docs/performance.md, "tput14").
  MarkDead(w);
  if (w.session) {
    WorkerProcess& p = w.session->process();
    p.CloseStdin();
    p.Kill();
    if (!p.TryReap()) {
      PooledWorker* raw = &w;
      w.reaping = true;
      if (!loop_.Watch(p.pidfd(), EPOLLIN, [this, raw](uint32_t) {
            if (raw->session->process().TryReap()) Reaped(*raw);
          }))
        ReapNow(w);  // no watch: waited for here, as before
    }
  }
  // A codemode script's worker, retired as its script ended (removed with its flow, or a budget,
  // a failed load, a cancellation ended it): the next script's spare starts now, in the agent's
  // turn. Not for an idle, evicted or shut-down worker: nothing waits for a spare then.
  const bool script_ended = reason == RetireReason::kFlowRemoved || reason == RetireReason::kBudget ||
                            reason == RetireReason::kLoadFailed || reason == RetireReason::kCancelled ||
                            reason == RetireReason::kCpuLimit;
  if (script_ended && codemode_spares_ && w.flow && w.flow->profile == Profile::kCodemode) {
    w.spare_at_reap = w.reaping;  // at the cap, its process still counts: the spare starts once it is reaped
    StartCodemodeSpare(w.launch);
  }
}

void Pool::Violation(PooledWorker& w, const std::string& what) {
  if (w.state == PooledWorker::State::kDead) return;
  ++health_.protocol_violations;
  Kill(w);
  Lost(w, Outcome::kProtocolViolation, "worker " + std::to_string(w.pid()) + ": " + what);
}

// The idle timers are armed when a worker becomes idle and they are not armed already, and
// left armed when it is claimed: one that fires while the worker is busy does nothing, and one
// that fires early for the present idle spell arms itself again for it. A worker that goes from
// busy to idle thousands of times a second so costs no timer per activation.
void Pool::ArmIdleCpuCheck(PooledWorker& w) {
  if (w.idle_cpu_timer) return;
  PooledWorker* raw = &w;
  w.idle_cpu_timer = loop_.At(Clock::now() + kIdleCpuCheckPeriod, [this, raw] {
    raw->idle_cpu_timer.reset();
    if (raw->state != PooledWorker::State::kIdle) return;
    CheckIdleCpu(*raw);
    if (raw->state == PooledWorker::State::kIdle) ArmIdleCpuCheck(*raw);
  });
}

void Pool::ArmIdleRetire(PooledWorker& w) {
  if (w.timer) return;
  PooledWorker* raw = &w;
  w.timer = loop_.At(w.idle_since + options_.idle_retire, [this, raw] {
    raw->timer.reset();
    if (raw->state != PooledWorker::State::kIdle) return;
    if (Clock::now() - raw->idle_since >= options_.idle_retire) return Retire(*raw, RetireReason::kIdle);
    ArmIdleRetire(*raw);  // armed in an earlier idle spell: this one ends later
  });
}

std::chrono::nanoseconds Pool::Claim(PooledWorker& w) {
  // The idle timers stay armed (ArmIdleCpuCheck says why).
  // An earlier reading is a lower base: what the worker spent since counts in the activation.
  const auto cpu = w.found_cpu ? *w.found_cpu : CpuOf(w);
  w.found_cpu.reset();
  return cpu;
}

void Pool::Release(PooledWorker& w, std::optional<RetireReason> retire, std::optional<CpuReading> cpu_now) {
  w.activation = nullptr;
  const bool used_up = !retire && w.activations >= w.max_activations;
  if (used_up) retire = RetireReason::kActivationCount;
  if (retire) {
    Retire(w, *retire);
    // Its place: the successor the cap did not leave room for at its last activation, now if its
    // process is gone already, else once it is reaped (Reaped).
    if (used_up) {
      w.successor_at_reap = true;
      StartSuccessor(w);
    }
    return;
  }
  w.state = PooledWorker::State::kIdle;
  w.idle_since = Clock::now();
  // A reading from the done is earlier than now: what the worker spends after it counts as idle.
  const CpuReading reading = cpu_now ? *cpu_now : ReadCpu(w);
  w.idle_cpu_base = reading.cpu;
  w.idle_cpu_at = reading.at;
  LimitCpu(w, w.idle_cpu_base, options_.idle_cpu_max);
  ArmIdleCpuCheck(w);
  ArmIdleRetire(w);
}

void Pool::RetireIdle(const Flow& flow, RetireReason reason) {
  for (auto& w : workers_) {
    if (!w->flow || w->flow->id != flow.id) continue;
    // A successor still starting for a flow that is gone would otherwise idle for idle_retire.
    const bool starting_spare = w->spare && !w->activation && w->state != PooledWorker::State::kBusy;
    if (w->state == PooledWorker::State::kIdle || starting_spare) Retire(*w, reason);
  }
}

void Pool::RetireAllIdle(RetireReason reason) {
  for (auto& w : workers_)
    if (w->state == PooledWorker::State::kIdle) Retire(*w, reason);
}

void Pool::Sweep() {
  workers_.remove_if(
      [](const std::unique_ptr<PooledWorker>& w) { return w->state == PooledWorker::State::kDead && !w->reaping; });
}

void Pool::Reaped(PooledWorker& w) {
  if (!w.reaping) return;
  loop_.Unwatch(w.session->process().pidfd());
  w.reaping = false;
  // Its place, now that its process is gone: the successor the cap did not leave room for.
  if (w.successor_at_reap) StartSuccessor(w);
  if (w.spare_at_reap) StartCodemodeSpare(w.launch);  // one is enough: it starts none if one is there
}

void Pool::ReapNow(PooledWorker& w) {
  if (!w.reaping) return;
  loop_.Unwatch(w.session->process().pidfd());
  w.session->process().KillAndReap();
  w.reaping = false;
}

void Pool::Count(HealthSnapshot& h) const {
  for (const auto& w : workers_) {
    if (w->state == PooledWorker::State::kDead) continue;
    const bool idle = w->state == PooledWorker::State::kIdle;
    ++h.workers.live;
    ++(idle ? h.workers.idle : h.workers.busy);
    if (!w->flow) continue;  // a codemode spare: no flow's yet
    WorkerCounts& c = h.workers_per_flow[w->flow->name];
    ++c.live;
    ++(idle ? c.idle : c.busy);
  }
}

// ---- frames and deaths ----

// Reads and handles the worker's frames; false when the worker is dead afterwards.
bool Pool::ReadFrames(PooledWorker& w, bool until_empty, WorkerSession::ReadStatus& status) {
  status = w.session->ReadAvailable(
      [this, &w](protocol::WorkerMessage& m) {
        OnFrame(w, m);
        return w.state != PooledWorker::State::kDead;
      },
      until_empty);
  if (w.state == PooledWorker::State::kDead) return false;
  if (status != WorkerSession::ReadStatus::kBroken) return true;
  if (w.session->broken_at_eof()) {
    // Killed while it wrote (a SIGKILL, a crash, the seccomp filter): its death is what happened.
    auto death = w.session->process().WaitFor(std::chrono::milliseconds(1000));
    if (death && death->kind != WorkerDeath::Kind::kExited) {
      Ended(w, *death);
      return false;
    }
  }
  Violation(w, w.session->broken_reason());
  return false;
}

void Pool::OnReadable(PooledWorker& w) {
  if (w.state == PooledWorker::State::kDead) return;
  WorkerSession::ReadStatus status;
  if (ReadFrames(w, /*until_empty=*/false, status) && status == WorkerSession::ReadStatus::kEof) OnExit(w);
}

void Pool::ReadReady(PooledWorker& w) {
  if (w.state == PooledWorker::State::kBusy) OnReadable(w);
}

void Pool::OnFrame(PooledWorker& w, protocol::WorkerMessage& msg) {
  switch (w.state) {
    case PooledWorker::State::kWelcome: {
      auto* welcome = std::get_if<protocol::Welcome>(&msg);
      if (!welcome) return Violation(w, "first frame must be welcome");
      return OnWelcome(w, *welcome);
    }
    case PooledWorker::State::kLoading: {
      auto* loaded = std::get_if<protocol::Loaded>(&msg);
      if (!loaded) return Violation(w, "expected loaded after load");
      if (!loaded->ok) {
        ActivationResult r = ResultFromFailedLoad(*w.flow, loaded->error);
        Retire(w, RetireReason::kLoadFailed);
        if (w.activation) {
          w.activation->load_error = loaded->error;
          owner_.OnWorkerLost(w, std::move(r));
        }
        w.activation = nullptr;
        return;
      }
      w.state = PooledWorker::State::kBusy;
      if (!w.activation && w.spare) return Release(w, std::nullopt);  // a successor, loaded ahead: idle
      if (!w.activation) return Retire(w, RetireReason::kCancelled);  // its activation was cancelled meanwhile
      owner_.OnWorkerReady(w);
      return;
    }
    case PooledWorker::State::kBusy:
      if (!w.activation) return Violation(w, "frame from a worker with no activation");
      owner_.OnWorkerMessage(w, msg);
      return;
    case PooledWorker::State::kIdle:
      return Violation(w, "frame from an idle worker");
    case PooledWorker::State::kLaunching:  // no session, so no frames
    case PooledWorker::State::kDead:
      return;
  }
}

void Pool::OnWelcome(PooledWorker& w, const protocol::Welcome& welcome) {
  // The claims, then the kernel's view (/proc/PID/status): the worker is blocked reading its load.
  const WelcomeVerdict v = CheckWorker(welcome, w.session->process(), options_.welcome_policy);
  if (w.timer) loop_.Cancel(*w.timer);
  w.timer.reset();
  if (!v.accepted && HasExited(w)) {
    // It died after its welcome (killed from outside, or crashed): /proc shows a zombie, which
    // is not a confinement it lacks. Its death is what happened.
    if (auto death = w.session->process().WaitFor(std::chrono::milliseconds(1000))) {
      w.state = PooledWorker::State::kLoading;  // it did welcome: exit 70 now is a crash
      return Ended(w, *death);
    }
  }
  if (!v.accepted) {
    ++health_.refused_welcomes;
    owner_.OnEvent({ModuleEvent::Kind::kWorkerRefused, "refused worker " + std::to_string(w.pid()) + ": " + v.reason, 0,
                    w.pid()});
    Kill(w);
    Lost(w, Outcome::kWorkerRefused, "worker refused before it saw flow code: " + v.reason);
    return;
  }
  if (!w.flow) {
    // A codemode spare, welcomed: it waits for a script (Spawn binds it) as an idle worker would,
    // under the same idle timers (idle_cpu_max, idle_retire).
    w.state = PooledWorker::State::kIdle;
    w.idle_since = Clock::now();
    const CpuReading reading = ReadCpu(w);
    w.idle_cpu_base = reading.cpu;
    w.idle_cpu_at = reading.at;
    ArmIdleCpuCheck(w);
    ArmIdleRetire(w);
    return;
  }
  if (!w.activation && !w.spare) return Retire(w, RetireReason::kCancelled);  // nobody waits for it any more
  SendLoad(w);
}

void Pool::SendLoad(PooledWorker& w) {
  const Flow& f = *w.flow;
  protocol::Load load;
  load.flow = f.name;
  load.source = f.source;
  load.profile = ProfileName(f.profile);
  load.cpu_ms = f.manifest.budgets().cpu.count();
  load.heap_bytes = static_cast<int64_t>(f.manifest.budgets().heap_limit_bytes);
  load.stack_bytes = static_cast<int64_t>(f.manifest.budgets().stack_limit_bytes);
  for (const std::string& name : f.tools) load.tools.push_back(protocol::BindingFor(name));
  // A durable run's worker runs one activation, loaded with the run's clock and seed.
  if (w.activation && w.activation->durable) load.durable = *w.activation->durable;
  w.state = PooledWorker::State::kLoading;
  Send(w, protocol::BuildLoad(load));
}

void Pool::WelcomeTimedOut(PooledWorker& w) {
  if (w.state != PooledWorker::State::kWelcome && w.state != PooledWorker::State::kLaunching) return;
  ++health_.refused_welcomes;
  if (w.session) w.session->DrainStderr();
  Kill(w);
  Lost(w, Outcome::kWorkerRefused,
       "no welcome within " + std::to_string(options_.welcome_timeout.count()) + " ms" +
           (w.session ? w.session->StderrNote() : std::string(" (its launch had not returned)")));
}

// The process ended (or closed stdout). Reads what it left, then classifies its end.
void Pool::OnExit(PooledWorker& w) {
  if (w.state == PooledWorker::State::kDead) return;
  WorkerSession::ReadStatus status;
  if (!ReadFrames(w, /*until_empty=*/true, status)) return;
  w.session->DrainStderr();
  auto death = w.session->process().WaitFor(std::chrono::milliseconds(1000));
  if (!death) return Violation(w, "closed its stdout but kept running");
  Ended(w, *death);
}

// How the process ended, reported once: the system's rule says what it means (platform.h).
void Pool::Ended(PooledWorker& w, const WorkerDeath& ended) {
  w.session->DrainStderr();
  const bool welcomed = w.state != PooledWorker::State::kWelcome;
  const DeathVerdict death = launcher_.ClassifyDeath(ended, welcomed);
  MarkDead(w);
  switch (death.kind) {
    case DeathKind::kConfinementKill:
      ++health_.worker_confinement;
      owner_.OnEvent({ModuleEvent::Kind::kConfinementViolation,
                      "worker " + std::to_string(w.pid()) + " killed by SIGSYS" + w.session->StderrNote(),
                      w.activation ? w.activation->id : 0, w.pid()});
      Lost(w, Outcome::kWorkerConfinement,
           "worker killed by SIGSYS: the seccomp filter stopped a system call it does not admit" + w.session->StderrNote());
      return;
    case DeathKind::kRefusal:
      // Exit 70 before the welcome is the worker's own refusal: it could not install a confinement
      // layer and will not run weaker. After the welcome it is a crash like any other.
      ++health_.confinement_refusals;
      Lost(w, Outcome::kWorkerRefused, "worker could not confine itself (" + death.description + ")" + w.session->StderrNote());
      return;
    case DeathKind::kCpuLimit: {
      // The system's CPU backstop: it stopped a worker the parent's own check did not.
      if (!w.activation) {
        ++health_.idle_cpu_kills;
        return;
      }
      ++health_.cpu_kills;
      ActivationResult r = Failure(Outcome::kBudgetExhausted, "cpu budget exhausted: the kernel stopped worker " +
                                                                  std::to_string(w.pid()) + " at its " +
                                                                  CpuLimitName(launcher_.os()));
      r.budget = Budget::kCpu;
      owner_.OnWorkerLost(w, std::move(r));
      w.activation = nullptr;
      return;
    }
    case DeathKind::kFatalStatus:
      // Windows: strict-handle misuse or an access violation ended it (docs/health.md).
      ++health_.fatal_status_deaths;
      Lost(w, Outcome::kWorkerCrashed, "worker " + death.description + w.session->StderrNote());
      return;
    case DeathKind::kParentKill:
      // Killed by this parent, which counted the reason when it killed.
      Lost(w, Outcome::kWorkerCrashed, "worker " + death.description + w.session->StderrNote());
      return;
    case DeathKind::kCrash:
      ++health_.crashes[death.crash_key];
      Lost(w, Outcome::kWorkerCrashed, "worker " + death.description + w.session->StderrNote());
      return;
  }
}

}  // namespace basal
