// The pool: worker processes from spawn to retirement. launch (on the pool's launch thread) ->
// welcome (checked) -> load (the flow's source) -> idle <-> busy -> retired (by count, idle time,
// budget, eviction, cancel) or dead (crash, SIGSYS, protocol violation, deadline). A worker is
// bound to one flow for life. While a worker runs an activation, its frames go to the PoolOwner
// (the module).
//
// Workers started ahead (docs/architecture.md, "The pool"): the successor of a worker that starts
// its last activation (or retires by count) is launched, welcomed and loaded before any activation
// needs it; with KeepCodemodeSpares, a codemode worker is launched and welcomed ahead of the next
// script, bound to no flow until that script's first activation takes it. Either counts in Live()
// against max_workers from its launch on.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "basal/health.h"
#include "basal/flow.h"
#include "basal/module_event.h"
#include "parent/loop/event_loop.h"
#include "parent/platform/process_cpu.h"
#include "parent/platform/worker_launcher.h"
#include "parent/session.h"
#include "parent/welcome_check.h"

namespace basal {

struct Activation;

struct PooledWorker {
  // kLaunching: its process is being started on the launch thread (no session yet).
  enum class State { kLaunching, kWelcome, kLoading, kIdle, kBusy, kDead };
  std::unique_ptr<WorkerSession> session;  // null while kLaunching
  FlowRef flow;                            // null for a codemode spare not bound to a script yet
  State state = State::kLaunching;
  // Started ahead of any activation (a successor, or a codemode spare): it goes idle after its
  // load (or, unbound, after its welcome) instead of being retired as cancelled.
  bool spare = false;
  bool successor_started = false;  // a successor was launched for it (at most one)
  // Retired (killed) and its process not reaped yet: the loop reaps it when its pidfd says it has
  // exited, and it counts against max_workers until then (Pool::Retire).
  bool reaping = false;
  bool successor_at_reap = false;  // retired by count: its successor starts once it is reaped (if not before)
  bool spare_at_reap = false;      // a codemode script's worker: the next script's spare, likewise
  uint64_t launch_ticket = 0;
  LaunchOptions launch;            // what it was launched with: a spare is bound only to a flow of the same

  uint32_t activations = 0;
  // Its own retirement count: max_activations_per_worker, less a stagger for a worker started on
  // demand (Pool::StartLaunch); a successor's is the full count (Pool::StartSuccessor).
  uint32_t max_activations = 0;
  EventLoop::Clock::time_point idle_since;
  std::optional<EventLoop::TimerId> timer;  // welcome time limit, or idle retirement (may outlive an idle spell)
  Activation* activation = nullptr;          // the one it runs or is starting up for
  bool watching_stdin = false;
  bool poll_sent = false;  // a `poll` message went to it since its last other frame (at most one)
  std::optional<ProcessCpuClock> cpu_clock;  // the kernel's count of its CPU time
  std::chrono::nanoseconds idle_cpu_base{0};  // its CPU when it last became idle
  EventLoop::Clock::time_point idle_cpu_at;    // the wall clock just before idle_cpu_base was read
  // Its CPU as FindIdle read it for the idle check, which Claim hands on as the activation's base.
  std::optional<std::chrono::nanoseconds> found_cpu;
  std::optional<EventLoop::TimerId> idle_cpu_timer;
  pid_t pid() const { return session ? session->pid() : 0; }
};

class PoolOwner {
 public:
  virtual ~PoolOwner() = default;
  // The worker loaded its flow and waits for `worker.activation` to be sent.
  virtual void OnWorkerReady(PooledWorker& worker) = 0;
  // A frame from a busy worker.
  virtual void OnWorkerMessage(PooledWorker& worker, protocol::WorkerMessage& message) = 0;
  // The worker is gone (killed by the pool or dead by itself) while it had an activation.
  virtual void OnWorkerLost(PooledWorker& worker, ActivationResult result) = 0;
  // A busy worker read some of what was sent to it (its stdin took bytes): room for more answers.
  virtual void OnWorkerDrained(PooledWorker& worker) = 0;
  virtual void OnEvent(ModuleEvent event) = 0;
};

struct PoolOptions {
  std::string worker_path;
  std::vector<std::string> worker_args;
  std::chrono::milliseconds welcome_timeout;
  WelcomePolicy welcome_policy;
  size_t max_workers;
  uint32_t max_activations_per_worker;
  std::chrono::milliseconds idle_retire;
  uint64_t flow_memory_headroom_bytes;
  uint64_t codemode_memory_headroom_bytes;
  std::chrono::milliseconds cpu_grace;    // past an activation's CPU budget, before the kill
  std::chrono::milliseconds idle_cpu_max; // CPU an idle worker may use between activations
  // Whether the pool may prlimit its workers (CanChangeWorkerLimits). If not (a root parent
  // without CAP_SYS_RESOURCE whose workers run as the worker user), RLIMIT_CPU's soft limit stays
  // where the worker set it at spawn (the first activation's budget + grace + 1 s), and a worker
  // is reused only while that limit still leaves room for one more activation's budget + grace
  // (else it retires as `cpu_limit`): the kernel's backstop bounds every activation either way.
  bool can_change_worker_limits;
};

// How the loop polls before it sleeps, with `busy` workers running an activation on `cpus` CPUs
// (the module's busy-poll policy; pool.cpp says why). None while none is busy: nothing is coming.
EventLoop::BusyPoll BusyPollFor(size_t busy, size_t cpus);

struct LaunchQueue;  // the launch thread's requests and results (pool.cpp)

class Pool {
 public:
  Pool(PoolOptions options, EventLoop& loop, WorkerLauncher& launcher, HealthSnapshot& health, PoolOwner& owner);
  ~Pool();  // kills every worker

  // An idle worker of `flow`, or nullptr. One that used CPU while idle is killed on the way.
  PooledWorker* FindIdle(const Flow& flow);
  // The owner takes an idle worker (from FindIdle) for an activation. Its idle timers stay armed
  // and do nothing while it is busy (ArmIdleCpuCheck in pool.cpp).
  // Returns its CPU time as FindIdle judged it: read there, or, after an idle spell shorter than
  // idle_cpu_max, the reading at its last done (no system call per dispatch).
  std::chrono::nanoseconds Claim(PooledWorker& worker);
  // Room for one more worker? Evicts an idle worker of another flow if the cap is reached.
  bool MakeRoom();
  // Starts a worker for `activation` (it gets the activation once it has loaded): a codemode spare
  // launched with the same limits if there is one, else a new process, launched on the launch
  // thread (the loop does not wait for posix_spawn's vfork). A launch that fails later is counted
  // in spawn_failures and reaches the owner as OnWorkerLost (spawn_failed). An error here: the
  // caller fails the activation with spawn_failed.
  Result<PooledWorker*> Spawn(const FlowRef& flow, Activation* activation);
  // Counts an activation the owner starts on `worker`; at its last one (max_activations_per_worker)
  // its successor is launched ahead if the cap leaves room (else when it retires).
  void CountActivation(PooledWorker& worker);
  // From now on a codemode script's worker leaves a spare behind: one welcomed worker per launch
  // limits (the policy's heap budget + codemode headroom, its CPU budget), bound to the next
  // script's flow at its first activation. For `basal mcp` and serve's /mcp, whose scripts come one
  // after another; off by default (a one-shot `basal run` would only start a process to kill it).
  void KeepCodemodeSpares(bool keep) { codemode_spares_ = keep; }
  // Sends a frame; if the worker's pipe is full the rest goes out when it drains (and the owner
  // hears OnWorkerDrained). How much is sent is the owner's flow control (module.cpp).
  void Send(PooledWorker& worker, std::string_view payload);
  // Sends the `activate` frame of `activation` (built in place, no string of its own).
  // `poll`: the worker may poll for its next frame (protocol's `poll` member).
  void SendActivate(PooledWorker& worker, int64_t activation, std::string_view input_json, bool poll);
  // Sends a `poll` message (a frame is coming: poll for it before blocking), at most one between
  // two of the worker's other frames.
  void SendPoll(PooledWorker& worker);
  // SendPoll to the first idle worker of flow `name` (ModuleHost::WakeIdleWorker); nothing if
  // there is none.
  void WakeIdle(std::string_view name);
  // Bytes sent to the worker that it has not read yet, and bytes it has read so far.
  // (None for a worker still launching.)
  size_t PendingOutput(const PooledWorker& worker) const {
    return worker.session ? worker.session->pending_output_bytes() : 0;
  }
  uint64_t WrittenBytes(const PooledWorker& worker) const { return worker.session ? worker.session->written_bytes() : 0; }
  // Reads what a busy worker has written so far, as the loop would when its pipe is readable
  // (its frames reach the owner now; nothing is waited for). The module's pass end, before it
  // commits a batch that starts an activation on it (module.cpp, ReadBegunWorker).
  void ReadReady(PooledWorker& worker);
  // The descriptor the worker's frames arrive on (-1 while it launches).
  int OutputFd(const PooledWorker& worker) const { return worker.session ? worker.session->process().stdout_fd() : -1; }
  // The process has ended (its pidfd is readable); the loop reports how, on this pass. False for a
  // worker still launching (no process yet).
  bool HasExited(const PooledWorker& worker) const;
  // The worker's CPU time so far, from the kernel.
  std::chrono::nanoseconds CpuOf(const PooledWorker& worker) const;
  // The same, with the wall clock read just before it: what the worker can have used since is at
  // most the wall time since `at` (it runs one thread).
  struct CpuReading {
    std::chrono::nanoseconds cpu;
    EventLoop::Clock::time_point at;
  };
  CpuReading ReadCpu(const PooledWorker& worker) const;
  // The activation it starts now may use `budget` of CPU from `base` (its CPU now): RLIMIT_CPU's
  // soft limit, the backstop behind the module's own check, follows it.
  void LimitCpu(PooledWorker& worker, std::chrono::nanoseconds base, std::chrono::milliseconds budget);
  // The activation finished normally: idle again, or retired by count or `retire`.
  // `cpu_now`: the worker's CPU clock as the caller just read it (at its done), so the idle
  // check's base costs no second read of a clock that is a system call each time.
  void Release(PooledWorker& worker, std::optional<RetireReason> retire,
               std::optional<CpuReading> cpu_now = std::nullopt);
  // Ends the process (never leaves one behind): its stdin is closed and it is killed now; the loop
  // reaps it once its pidfd says it has exited, so the loop does not wait for the teardown of a
  // retired worker's process. Until reaped it counts in Live() against max_workers, and
  // Module::RunUntilIdle returns only when none is left (Reaping()).
  void Retire(PooledWorker& worker, RetireReason reason);
  // Kills the worker for a reason the owner already reports (deadline, cancel, protocol).
  void Kill(PooledWorker& worker);
  // Kills the worker and reports the activation it had as a protocol violation.
  void Violation(PooledWorker& worker, const std::string& what);
  void RetireIdle(const Flow& flow, RetireReason reason);  // every idle worker of `flow`
  void RetireAllIdle(RetireReason reason);
  // Forgets dead workers (after the loop pass that killed them).
  void Sweep();

  // The cap from now on (a lower one is reached as workers retire; none is killed for it).
  void SetMaxWorkers(size_t max_workers) { options_.max_workers = max_workers; }

  size_t Live() const;     // every process: launching, starting up, idle, busy, or retired and not reaped yet
  size_t Reaping() const;  // retired workers whose processes are not reaped yet
  size_t Busy() const;
  // Busy, or starting (launching, welcoming, loading): every worker that wants a CPU now.
  size_t BusyOrStarting() const;
  bool AnyStarting() const;  // a worker launching, welcoming or loading
  void Count(HealthSnapshot& snapshot) const;

 private:
  LaunchOptions LaunchFor(const Flow& flow) const;
  // Queues the launch of a worker (state kLaunching); its process arrives through TakeLaunched.
  PooledWorker& StartLaunch(const FlowRef& flow, const LaunchOptions& launch, Activation* activation, bool spare);
  // On the loop: the launch thread's results, each given to its worker (or killed, if that worker
  // was retired meanwhile).
  void TakeLaunched();
  void Attach(PooledWorker& w, std::unique_ptr<WorkerProcess> process);
  // A successor for `w` (same flow and limits), if the cap leaves room.
  void StartSuccessor(PooledWorker& w);
  void StartCodemodeSpare(const LaunchOptions& launch);
  void SendLoad(PooledWorker& w);
  bool ReadFrames(PooledWorker& w, bool until_empty, WorkerSession::ReadStatus& status);
  void OnReadable(PooledWorker& w);
  void OnWritable(PooledWorker& w);
  void OnExit(PooledWorker& w);
  // A retired worker's process has exited: reaped, its place free (its successor, if it waits for it).
  void Reaped(PooledWorker& w);
  // Waits for a retired worker's process here (an eviction, whose room is needed in this pass).
  void ReapNow(PooledWorker& w);
  void Ended(PooledWorker& w, const WorkerDeath& death);
  void OnFrame(PooledWorker& w, protocol::WorkerMessage& msg);
  void OnWelcome(PooledWorker& w, const protocol::Welcome& welcome);
  void WelcomeTimedOut(PooledWorker& w);
  void MarkDead(PooledWorker& w);
  void Lost(PooledWorker& w, Outcome outcome, std::string message);
  void UpdateStdinWatch(PooledWorker& w);
  // Returns the reading it judged by.
  std::chrono::nanoseconds CheckIdleCpu(PooledWorker& w);
  void ArmIdleCpuCheck(PooledWorker& w);
  void ArmIdleRetire(PooledWorker& w);
  // RLIMIT_CPU's soft limit, in seconds, for a new worker of `flow`: its first activation's
  // budget + grace + 1 s (RLIMIT_CPU counts whole seconds).
  uint64_t FirstCpuSoftLimitSeconds(const Flow& flow) const;
  // Whether one more activation fits under the worker's RLIMIT_CPU (always, when the pool can
  // move the limit per activation).
  bool CpuLimitLeavesRoom(const PooledWorker& worker, std::chrono::nanoseconds cpu_now) const;
  // The RLIMIT_CPU hard limit of a worker of `flow` for its whole life.
  std::chrono::nanoseconds LifetimeCpu(const Flow& flow) const;

  PoolOptions options_;
  EventLoop& loop_;
  WorkerLauncher& launcher_;
  HealthSnapshot& health_;
  PoolOwner& owner_;
  std::list<std::unique_ptr<PooledWorker>> workers_;
  bool codemode_spares_ = false;
  uint64_t next_ticket_ = 1;
  // One thread for the pool's life: a worker's parent-death signal follows the thread that
  // spawned it, so that thread must outlive every worker it started (~Pool kills them first).
  std::shared_ptr<LaunchQueue> launches_;
  std::thread launch_thread_;
};

}  // namespace basal
