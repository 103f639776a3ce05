// The parent's event loop: one epoll over every worker's stdout, stderr, stdin and pidfd.
// Each iteration reads and validates frames, runs host calls, then commits the journal batch
// (group commit) and only then sends the answers and reports finished activations.
#include "basal/module.h"

#include <poll.h>
#include <signal.h>
#include <sched.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <exception>
#include <iostream>
#include <list>
#include <map>

#include "parent/health.h"
#include "parent/host_calls/kv.h"
#include "parent/host_calls/log.h"
#include "parent/journal.h"
#include "parent/welcome_check.h"
#include "parent/worker_process.h"
#include "protocol/frame.h"
#include "protocol/messages.h"

namespace basal {

using Clock = std::chrono::steady_clock;
using protocol::Json;

namespace {

int64_t NowUnixUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

constexpr size_t kStderrTailBytes = 2048;

}  // namespace

const char* ProfileName(Profile p) { return p == Profile::kFlow ? "flow" : "codemode"; }

struct HostCallReply::Slot {
  Module::Impl* impl = nullptr;
  int64_t activation_id = 0;
  int64_t call_id = 0;
  bool answered = false;
};

struct Flow {
  std::string name;
  std::string source;
  std::string source_hash;
  Manifest manifest;
  Profile profile;
};

struct Queued {
  int64_t id = 0;
  FlowId flow = 0;
  std::string input_json;  // serialized once: journaled and sent as is
  int64_t start_us = 0;
  std::function<void(const ActivationResult&)> done;
};

struct InFlightCall {
  std::string name;
  const char* reason = "granted by manifest";  // or "needs no grant" (log)
  std::string args_json;
  int64_t start_us = 0;
  std::shared_ptr<HostCallReply::Slot> slot;
};

struct Worker;

enum class Tag { kStdout, kStderr, kStdin, kPidfd };
struct EpollRef {
  Worker* worker;
  Tag tag;
};

struct Worker {
  std::unique_ptr<WorkerProcess> proc;
  FlowId flow = 0;
  enum class State { kWelcome, kLoading, kIdle, kBusy, kDead } state = State::kWelcome;
  protocol::FrameDecoder decoder;
  std::string out;
  std::string stderr_tail;
  Clock::time_point welcome_deadline;
  Clock::time_point idle_since;
  uint32_t activations = 0;
  bool epollout = false;
  // The activation this worker runs (or will run once loaded).
  std::optional<Queued> act;
  Clock::time_point deadline;
  int64_t last_call_id = 0;
  std::map<int64_t, InFlightCall> calls;
  EpollRef refs[4];
};

struct Finished {
  ActivationResult result;
  std::function<void(const ActivationResult&)> done;
};

struct Module::Impl {
  ModuleOptions options;
  std::unique_ptr<Journal> journal;
  HostCallRegistry registry;
  std::vector<Flow> flows;
  std::list<std::unique_ptr<Worker>> workers;
  std::deque<Queued> queue;
  std::vector<std::pair<Worker*, std::string>> sends;  // answers waiting for the batch commit
  std::vector<Finished> finished;                      // reported after the batch commit
  std::map<int64_t, Worker*> running;                  // activation id -> worker
  std::vector<std::weak_ptr<HostCallReply::Slot>> slots;
  HealthCounters health;
  int epfd = -1;
  int kernel_landlock_abi = 0;
  size_t cpus = 1;  // CPUs this process may run on (busy polling leaves them to busy workers)

  ~Impl() {
    for (auto& w : slots)
      if (auto s = w.lock()) s->impl = nullptr;
    // Nothing is left open in the journal: what still runs or waits is ended as cancelled. The
    // completion callbacks are not called, since what they refer to may already be gone.
    if (journal) {
      for (auto& w : workers) {
        if (w->state == Worker::State::kDead) continue;
        w->proc->KillAndReap();
        MarkDead(w.get());
        if (w->act) Fail(w.get(), Outcome::kCancelled, "the module was closed while the activation ran: its worker was killed");
      }
      for (auto& q : queue) {
        ActivationResult r;
        r.outcome = Outcome::kCancelled;
        r.message = "the module was closed before the activation started";
        FinishUnstarted(std::move(q), std::move(r));
      }
      queue.clear();
      finished.clear();
      (void)journal->Commit();
    }
    workers.clear();
    if (epfd >= 0) ::close(epfd);
  }

  // ---- spawning and the handshake ----
  Worker* Spawn(FlowId flow_id) {
    auto spawned = WorkerProcess::Spawn(options.worker_path, options.worker_args);
    if (!spawned) {
      ++health.spawn_failures;
      last_spawn_error = spawned.error().message;
      return nullptr;
    }
    auto w = std::make_unique<Worker>();
    w->proc = std::move(*spawned);
    w->flow = flow_id;
    w->welcome_deadline = Clock::now() + options.welcome_timeout;
    const Flow& f = flows[flow_id];
    const uint64_t headroom = f.profile == Profile::kFlow ? options.flow_memory_headroom_bytes
                                                          : options.codemode_memory_headroom_bytes;
    if (auto r = w->proc->SetAddressSpaceLimit(f.manifest.budgets().heap_limit_bytes + headroom); !r) {
      ++health.spawn_failures;
      last_spawn_error = r.error().message;
      return nullptr;
    }
    Worker* raw = w.get();
    const int fds[4] = {raw->proc->stdout_fd(), raw->proc->stderr_fd(), raw->proc->stdin_fd(), raw->proc->pidfd()};
    const Tag tags[4] = {Tag::kStdout, Tag::kStderr, Tag::kStdin, Tag::kPidfd};
    for (int i = 0; i < 4; ++i) {
      raw->refs[i] = {raw, tags[i]};
      if (tags[i] == Tag::kStdin) continue;  // registered only while there is something to write
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.ptr = &raw->refs[i];
      epoll_ctl(epfd, EPOLL_CTL_ADD, fds[i], &ev);
    }
    ++health.spawned;
    workers.push_back(std::move(w));
    return raw;
  }
  std::string last_spawn_error;

  void Send(Worker* w, std::string_view payload) {
    protocol::AppendFrame(w->out, payload);
    FlushOut(w);
  }

  void FlushOut(Worker* w) {
    while (!w->out.empty() && w->state != Worker::State::kDead) {
      const ssize_t n = ::write(w->proc->stdin_fd(), w->out.data(), w->out.size());
      if (n > 0) {
        w->out.erase(0, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      w->out.clear();  // EPIPE: the worker is gone; its pidfd tells us how
      break;
    }
    const bool want = !w->out.empty() && w->state != Worker::State::kDead;
    if (want != w->epollout) {
      epoll_event ev{};
      ev.events = EPOLLOUT;
      ev.data.ptr = &w->refs[2];
      epoll_ctl(epfd, want ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, w->proc->stdin_fd(), &ev);
      w->epollout = want;
    }
  }

  // ---- ending activations and workers ----
  void Finish(Worker* w, ActivationResult r) {
    if (!w->act) return;
    Queued act = std::move(*w->act);
    w->act.reset();
    running.erase(act.id);
    for (auto& [id, call] : w->calls) {
      call.slot->answered = true;  // a late answer goes nowhere
      CallRecord rec{act.id, id, call.name, call.args_json, true, call.reason, "",
                     Json{{"name", "ActivationEnded"}, {"message", "the activation ended before this call was answered"}}.dump(),
                     call.start_us, NowUnixUs()};
      (void)journal->RecordCall(rec);
    }
    w->calls.clear();
    r.activation_id = act.id;
    ActivationEnd end;
    end.activation_id = act.id;
    end.end_unix_us = NowUnixUs();
    end.outcome = OutcomeName(r.outcome);
    end.cpu_us = r.cpu_us;
    if (r.ok()) {
      end.result_json = protocol::DumpJson(r.result);
    } else {
      end.error_json = protocol::DumpJson(r.ErrorJson());
    }
    (void)journal->EndActivation(end);
    health.CountActivation(r.outcome);
    finished.push_back({std::move(r), std::move(act.done)});
  }

  void Fail(Worker* w, Outcome outcome, std::string message) {
    ActivationResult r;
    r.outcome = outcome;
    r.message = std::move(message);
    Finish(w, std::move(r));
  }

  // Ends the process (never leaves one behind) and forgets the worker after this iteration.
  void Retire(Worker* w, const char* reason) {
    if (w->state == Worker::State::kDead) return;
    health.CountRetirement(reason);
    w->proc->CloseStdin();
    w->proc->KillAndReap();
    MarkDead(w);
  }

  void MarkDead(Worker* w) {
    if (w->state == Worker::State::kDead) return;
    for (int fd : {w->proc->stdout_fd(), w->proc->stderr_fd(), w->proc->pidfd()})
      if (fd >= 0) epoll_ctl(epfd, EPOLL_CTL_DEL, fd, nullptr);
    if (w->epollout && w->proc->stdin_fd() >= 0) epoll_ctl(epfd, EPOLL_CTL_DEL, w->proc->stdin_fd(), nullptr);
    w->epollout = false;
    w->state = Worker::State::kDead;
  }

  // The worker broke the protocol: kill it, fail its activation.
  void Violation(Worker* w, const std::string& what) {
    if (w->state == Worker::State::kDead) return;
    w->proc->KillAndReap();
    ++health.protocol_violations;
    MarkDead(w);
    if (w->act) Fail(w, Outcome::kProtocolViolation, "worker " + std::to_string(w->proc->pid()) + ": " + what);
  }

  std::string StderrNote(const Worker* w) const {
    std::string t = w->stderr_tail;
    while (!t.empty() && (t.back() == '\n' || t.back() == '\r')) t.pop_back();
    if (t.empty()) return "";
    const size_t nl = t.rfind('\n');
    return "; stderr: " + (nl == std::string::npos ? t : t.substr(nl + 1));
  }

  // The process ended (or closed stdout). Reads what it left, then classifies its end.
  void Died(Worker* w) {
    if (w->state == Worker::State::kDead) return;
    DrainStdout(w);
    if (w->state == Worker::State::kDead) return;
    DrainStderr(w);
    auto exit = w->proc->WaitFor(std::chrono::milliseconds(1000));
    if (!exit) {
      Violation(w, "closed its stdout but kept running");
      return;
    }
    MarkDead(w);
    const bool sigsys = exit->signaled && exit->signal == SIGSYS;
    if (sigsys) {
      ++health.worker_confinement;
      if (w->act)
        Fail(w, Outcome::kWorkerConfinement,
             "worker killed by SIGSYS: the seccomp filter stopped a system call it does not admit" + StderrNote(w));
      return;
    }
    // Exit 70 is the worker's own refusal: it could not install a confinement layer and will not
    // run weaker. That is a confinement problem of the host, not a crash.
    const bool refused = !exit->signaled && exit->code == 70;
    if (refused) {
      ++health.confinement_refusals;
    } else {
      health.CountCrash(*exit);
    }
    if (!w->act) return;
    if (refused)
      Fail(w, Outcome::kWorkerRefused, "worker could not confine itself (" + exit->Describe() + ")" + StderrNote(w));
    else
      Fail(w, Outcome::kWorkerCrashed, "worker " + exit->Describe() + StderrNote(w));
  }

  void DrainStderr(Worker* w) {
    char buf[4096];
    for (;;) {
      const ssize_t n = ::read(w->proc->stderr_fd(), buf, sizeof buf);
      if (n <= 0) {
        if (n == 0 && w->proc->stderr_fd() >= 0) epoll_ctl(epfd, EPOLL_CTL_DEL, w->proc->stderr_fd(), nullptr);
        if (n < 0 && errno == EINTR) continue;
        return;
      }
      w->stderr_tail.append(buf, static_cast<size_t>(n));
      if (w->stderr_tail.size() > kStderrTailBytes) w->stderr_tail.erase(0, w->stderr_tail.size() - kStderrTailBytes);
    }
  }

  // Reads what is available and handles every complete frame; returns true at EOF. With
  // `until_empty` false it stops after a short read (the common case: one frame), sparing the
  // read that would only say EAGAIN; epoll is level-triggered, so anything left wakes it again.
  bool DrainStdout(Worker* w, bool until_empty = true) {
    char buf[64 * 1024];
    for (;;) {
      const ssize_t n = ::read(w->proc->stdout_fd(), buf, sizeof buf);
      if (n < 0) {
        if (errno == EINTR) continue;
        return false;
      }
      if (n == 0) {
        if (w->decoder.buffered() > 0 && w->state != Worker::State::kDead)
          Violation(w, "stdout closed in the middle of a frame");
        return true;
      }
      w->decoder.Feed(buf, static_cast<size_t>(n));
      std::string payload;
      for (;;) {
        if (w->state == Worker::State::kDead) return true;
        const auto st = w->decoder.Next(payload);
        if (st == protocol::FrameDecoder::Status::kNeedMore) break;
        if (st == protocol::FrameDecoder::Status::kError) {
          Violation(w, w->decoder.error());
          return true;
        }
        OnFrame(w, payload);
      }
      if (!until_empty && static_cast<size_t>(n) < sizeof buf) return false;
    }
  }

  // ---- frames from the worker ----
  void OnFrame(Worker* w, const std::string& payload) {
    protocol::WorkerMessage msg;
    std::string error;
    if (!protocol::ParseWorkerMessage(payload, msg, error)) {
      Violation(w, "invalid frame: " + error);
      return;
    }
    switch (w->state) {
      case Worker::State::kWelcome: {
        auto* welcome = std::get_if<protocol::Welcome>(&msg);
        if (!welcome) return Violation(w, "first frame must be welcome");
        OnWelcome(w, *welcome);
        return;
      }
      case Worker::State::kLoading: {
        auto* loaded = std::get_if<protocol::Loaded>(&msg);
        if (!loaded) return Violation(w, "expected loaded after load");
        if (!loaded->ok) {
          ActivationResult r;
          r.outcome = loaded->error.kind == "budget_exhausted" ? Outcome::kBudgetExhausted : Outcome::kScriptError;
          r.budget = ParseBudget(loaded->error.budget);
          r.error_name = loaded->error.name;
          r.stack = loaded->error.stack;
          r.message = "flow " + flows[w->flow].name + " failed to load: " + loaded->error.name + ": " + loaded->error.message;
          Finish(w, std::move(r));
          Retire(w, "load_failed");
          return;
        }
        StartActivation(w);
        return;
      }
      case Worker::State::kBusy:
        if (auto* call = std::get_if<protocol::Call>(&msg)) return OnCall(w, *call);
        if (auto* done = std::get_if<protocol::Done>(&msg)) return OnDone(w, *done);
        return Violation(w, "unexpected message during an activation");
      case Worker::State::kIdle:
        return Violation(w, "frame from an idle worker");
      case Worker::State::kDead:
        return;
    }
  }

  void OnWelcome(Worker* w, const protocol::Welcome& welcome) {
    WelcomePolicy policy{options.allow_without_landlock, kernel_landlock_abi};
    const WelcomeVerdict v = CheckWelcome(welcome, w->proc->pid(), policy);
    if (!v.accepted) {
      ++health.refused_welcomes;
      std::cerr << "basal: refused worker " << w->proc->pid() << ": " << v.reason << "\n";
      w->proc->KillAndReap();
      MarkDead(w);
      if (w->act) Fail(w, Outcome::kWorkerRefused, "worker refused before it saw flow code: " + v.reason);
      return;
    }
    const Flow& f = flows[w->flow];
    protocol::Load load;
    load.flow = f.name;
    load.source = f.source;
    load.profile = ProfileName(f.profile);
    load.cpu_ms = f.manifest.budgets().cpu.count();
    load.heap_bytes = static_cast<int64_t>(f.manifest.budgets().heap_limit_bytes);
    load.stack_bytes = static_cast<int64_t>(f.manifest.budgets().stack_limit_bytes);
    w->state = Worker::State::kLoading;
    Send(w, protocol::BuildLoad(load));
  }

  void StartActivation(Worker* w) {
    w->state = Worker::State::kBusy;
    w->last_call_id = 0;
    ++w->activations;
    running[w->act->id] = w;
    Send(w, protocol::BuildActivate(w->act->id, w->act->input_json));
  }

  void OnCall(Worker* w, const protocol::Call& call) {
    const int64_t aid = w->act->id;
    if (call.activation != aid)
      return Violation(w, "call for activation " + std::to_string(call.activation) + " during activation " + std::to_string(aid));
    if (call.id <= w->last_call_id)
      return Violation(w, "call id " + std::to_string(call.id) + " reused or out of order (last was " +
                              std::to_string(w->last_call_id) + ")");
    w->last_call_id = call.id;
    const Flow& f = flows[w->flow];
    const std::string args_json = protocol::DumpJson(call.args);
    const int64_t start = NowUnixUs();
    const HostCallSpec* spec = registry.Find(call.name);
    std::optional<std::string> denied;
    if (!spec) {
      denied = "no host call named \"" + call.name + "\"";
    } else {
      try {
        denied = f.manifest.Authorize(*spec, call.args);
      } catch (const std::exception& e) {  // fail closed
        denied = "the authorization check of \"" + call.name + "\" threw: " + e.what();
      } catch (...) {
        denied = "the authorization check of \"" + call.name + "\" threw";
      }
    }
    if (denied) {
      ++health.denied_calls;
      const std::string err = protocol::DumpJson(Json{{"name", "PermissionDenied"}, {"message", *denied}});
      (void)journal->RecordCall({aid, call.id, call.name, args_json, false, *denied, "", err, start, NowUnixUs()});
      sends.emplace_back(w, protocol::BuildResultError(aid, call.id, "PermissionDenied", *denied));
      return;
    }
    auto slot = std::make_shared<HostCallReply::Slot>();
    slot->impl = this;
    slot->activation_id = aid;
    slot->call_id = call.id;
    slots.push_back(slot);
    w->calls[call.id] = InFlightCall{call.name, spec->needs_grant ? "granted by manifest" : "needs no grant", args_json,
                                     start, slot};
    HostCallContext ctx{aid, call.id, f.name, {}};
    // A handler that throws is answered for: the script gets a catchable HostError, the call is
    // journaled with it, and the loop goes on.
    std::string thrown;
    try {
      spec->handler(ctx, call.args, HostCallReply(slot));
    } catch (const std::exception& e) {
      thrown = e.what();
    } catch (...) {
      thrown = "an exception that is not a std::exception";
    }
    if (!thrown.empty()) {
      std::cerr << "basal: host call \"" << call.name << "\" threw: " << thrown << " (activation " << aid << ")\n";
      HostCallReply(slot).Error("HostError", "host call \"" + call.name + "\" failed: its handler threw: " + thrown);
    }
  }

  void OnReply(HostCallReply::Slot& slot, bool ok, Json value, std::string name, std::string message) {
    auto rit = running.find(slot.activation_id);
    if (rit == running.end()) return;
    Worker* w = rit->second;
    auto cit = w->calls.find(slot.call_id);
    if (cit == w->calls.end()) return;
    InFlightCall call = std::move(cit->second);
    w->calls.erase(cit);
    CallRecord rec{slot.activation_id, slot.call_id, call.name, call.args_json, true, call.reason, "", "",
                   call.start_us, NowUnixUs()};
    std::string value_json;
    if (ok) {
      value_json = protocol::DumpJson(value);
      std::string why;
      if (!protocol::FitsInMessage(value_json, why)) {
        // The handler's result cannot reach the worker; the script gets a catchable error instead.
        ok = false;
        name = "HostError";
        message = "the result of host call \"" + call.name + "\" cannot be sent to the flow: " + why;
        std::cerr << "basal: " << message << " (activation " << slot.activation_id << ")\n";
      }
    }
    if (ok) {
      sends.emplace_back(w, protocol::BuildResultOk(slot.activation_id, slot.call_id, value_json));
      rec.result_json = std::move(value_json);
    } else {
      rec.error_json = protocol::DumpJson(Json{{"name", name}, {"message", message}});  // an embedder's text: any bytes
      sends.emplace_back(w, protocol::BuildResultError(slot.activation_id, slot.call_id, name, message));
    }
    if (auto r = journal->RecordCall(rec); !r) journal_failure = r.error().message;
  }
  std::string journal_failure;

  void OnDone(Worker* w, const protocol::Done& done) {
    if (done.activation != w->act->id)
      return Violation(w, "done for activation " + std::to_string(done.activation) + " during activation " +
                              std::to_string(w->act->id));
    ActivationResult r;
    r.cpu_us = done.cpu_us;
    bool retire_budget = false;
    if (done.ok) {
      r.outcome = Outcome::kOk;
      r.result = done.result;
      if (done.caught_budget_failure) ++health.caught_budget_failures;
    } else if (done.error.kind == "budget_exhausted") {
      r.outcome = Outcome::kBudgetExhausted;
      r.budget = ParseBudget(done.error.budget);
      r.error_name = done.error.name;
      r.message = done.error.budget + " budget exhausted: " + done.error.message;
      retire_budget = true;
    } else {
      r.outcome = Outcome::kScriptError;
      r.error_name = done.error.name;
      r.stack = done.error.stack;
      r.message = done.error.name + ": " + done.error.message;
    }
    Finish(w, std::move(r));
    if (retire_budget) {
      Retire(w, "budget");
    } else if (w->activations >= options.max_activations_per_worker) {
      Retire(w, "activation_count");
    } else {
      w->state = Worker::State::kIdle;
      w->idle_since = Clock::now();
    }
  }

  // ---- scheduling ----
  size_t LiveWorkers() const {
    size_t n = 0;
    for (const auto& w : workers) n += w->state != Worker::State::kDead;
    return n;
  }

  void Dispatch() {
    while (!queue.empty()) {
      Queued& next = queue.front();
      Worker* idle = nullptr;
      for (auto& w : workers)
        if (w->state == Worker::State::kIdle && w->flow == next.flow) {
          idle = w.get();
          break;
        }
      if (idle) {
        idle->act = std::move(next);
        queue.pop_front();
        idle->deadline = Clock::now() + flows[idle->flow].manifest.budgets().deadline;
        StartActivation(idle);
        continue;
      }
      if (LiveWorkers() >= options.max_workers) {
        // Make room by retiring an idle worker of another flow, else wait.
        Worker* victim = nullptr;
        for (auto& w : workers)
          if (w->state == Worker::State::kIdle) {
            victim = w.get();
            break;
          }
        if (!victim) return;
        Retire(victim, "evicted");
        continue;
      }
      Queued act = std::move(next);
      queue.pop_front();
      Worker* w = Spawn(act.flow);
      if (!w) {
        ActivationResult r;
        r.outcome = Outcome::kSpawnFailed;
        r.message = last_spawn_error;
        FinishUnstarted(std::move(act), std::move(r));
        continue;
      }
      w->act = std::move(act);
      w->deadline = Clock::now() + flows[w->flow].manifest.budgets().deadline;
    }
  }

  void FinishUnstarted(Queued act, ActivationResult r) {
    Worker tmp;
    tmp.act = std::move(act);
    Finish(&tmp, std::move(r));
  }

  // Deadlines, welcome time limits and idle retirement; returns the epoll timeout in ms.
  int CheckTimers() {
    const auto now = Clock::now();
    auto next = now + std::chrono::hours(1);
    for (auto& wp : workers) {
      Worker* w = wp.get();
      if (w->state == Worker::State::kDead) continue;
      if (w->state == Worker::State::kWelcome && now >= w->welcome_deadline) {
        ++health.refused_welcomes;
        DrainStderr(w);
        w->proc->KillAndReap();
        MarkDead(w);
        if (w->act)
          Fail(w, Outcome::kWorkerRefused,
               "no welcome within " + std::to_string(options.welcome_timeout.count()) + " ms" + StderrNote(w));
        continue;
      }
      if (w->act && now >= w->deadline) {
        ++health.deadline_kills;
        w->proc->KillAndReap();
        MarkDead(w);
        Fail(w, Outcome::kDeadline,
             "activation passed its deadline of " +
                 std::to_string(flows[w->flow].manifest.budgets().deadline.count()) + " ms: worker killed");
        continue;
      }
      if (w->state == Worker::State::kIdle && now - w->idle_since >= options.idle_retire) {
        Retire(w, "idle");
        continue;
      }
      if (w->state == Worker::State::kWelcome) next = std::min(next, w->welcome_deadline);
      if (w->act) next = std::min(next, w->deadline);
      if (w->state == Worker::State::kIdle) next = std::min(next, w->idle_since + options.idle_retire);
    }
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1;
    return static_cast<int>(std::clamp<int64_t>(ms, 0, 3'600'000));
  }

  // Commits the batch, then answers and reports. On a failed commit nothing is answered: the
  // affected activations fail with journal_error and their workers are killed.
  void CommitAndFlush() {
    if (journal->HasPendingBatch()) {
      auto c = journal->Commit();
      if (!c || !journal_failure.empty()) {
        const std::string why = c ? journal_failure : c.error().message;
        journal_failure.clear();
        (void)journal->Rollback();
        ++health.journal_failures;
        std::cerr << "basal: journal commit failed: " << why << "\n";
        std::vector<Worker*> victims;
        for (auto& [w, payload] : sends) victims.push_back(w);
        sends.clear();
        for (Worker* w : victims) {
          if (w->state == Worker::State::kDead) continue;
          w->proc->KillAndReap();
          MarkDead(w);
          if (w->act) Fail(w, Outcome::kJournalError, "journal commit failed, nothing was answered: " + why);
        }
        for (auto& f : finished) {
          if (f.result.outcome != Outcome::kJournalError) {
            f.result.outcome = Outcome::kJournalError;
            f.result.message = "journal commit failed, the outcome was not recorded: " + why;
          }
        }
        (void)journal->Commit();
      }
    }
    for (auto& [w, payload] : sends)
      if (w->state != Worker::State::kDead) Send(w, payload);
    sends.clear();
    auto done = std::move(finished);
    finished.clear();
    workers.remove_if([](const std::unique_ptr<Worker>& w) { return w->state == Worker::State::kDead; });
    // Every callback runs even if one throws; the first exception then goes to the caller of Run*.
    std::exception_ptr first;
    for (auto& f : done) {
      if (!f.done) continue;
      try {
        f.done(f.result);
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    if (first) std::rethrow_exception(first);
  }

  bool Busy() const {
    if (!queue.empty()) return true;
    for (const auto& w : workers)
      if (w->act) return true;
    return false;
  }

  bool ShouldBusyPoll() const {
    if (options.busy_poll.count() <= 0) return false;
    size_t busy = 0;
    for (const auto& w : workers) busy += w->state == Worker::State::kBusy;
    return busy > 0 && busy < cpus;
  }

  void Iterate(int max_timeout_ms) {
    // Timers first: a worker that sat idle past its period while nobody drove the loop must be
    // retired, not handed the next activation.
    CheckTimers();
    Dispatch();
    CommitAndFlush();
    if (!Busy() && max_timeout_ms >= 3'600'000) return;  // RunUntilIdle: nothing left to wait for
    int timeout = std::min(CheckTimers(), max_timeout_ms);
    CommitAndFlush();
    epoll_event events[64];
    int n = 0;
    if (timeout > 0 && ShouldBusyPoll()) {
      const auto until = Clock::now() + options.busy_poll;
      do {
        n = epoll_wait(epfd, events, 64, 0);
      } while (n == 0 && Clock::now() < until);
    }
    if (n == 0) n = epoll_wait(epfd, events, 64, timeout);
    for (int i = 0; i < n; ++i) {
      auto* ref = static_cast<EpollRef*>(events[i].data.ptr);
      Worker* w = ref->worker;
      if (w->state == Worker::State::kDead) continue;
      switch (ref->tag) {
        case Tag::kStdout:
          if (DrainStdout(w, /*until_empty=*/false)) Died(w);
          break;
        case Tag::kStderr:
          DrainStderr(w);
          break;
        case Tag::kStdin:
          FlushOut(w);
          break;
        case Tag::kPidfd:
          Died(w);
          break;
      }
    }
    CheckTimers();
    CommitAndFlush();
  }
};

// ---- HostCallReply ----
void HostCallReply::Ok(Json value) {
  if (!slot_ || slot_->answered) return;
  slot_->answered = true;
  if (slot_->impl) slot_->impl->OnReply(*slot_, true, std::move(value), "", "");
}
void HostCallReply::Error(std::string name, std::string message) {
  if (!slot_ || slot_->answered) return;
  slot_->answered = true;
  if (slot_->impl) slot_->impl->OnReply(*slot_, false, nullptr, std::move(name), std::move(message));
}
bool HostCallReply::answered() const { return !slot_ || slot_->answered; }
// Declared out of line by the new header; the old (defaulted) behaviour until the rewrite lands.
HostCallReply::~HostCallReply() = default;
HostCallReply& HostCallReply::operator=(HostCallReply&&) noexcept = default;

// ---- Module ----
Module::Module(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Module::~Module() = default;

Result<std::unique_ptr<Module>> Module::Open(ModuleOptions options) {
  if (options.journal_path.empty()) return MakeError(ErrorCode::kInvalidArgument, "module: journal_path is required");
  if (options.worker_path.empty()) return MakeError(ErrorCode::kInvalidArgument, "module: worker_path is required");
  if (options.max_workers == 0) return MakeError(ErrorCode::kInvalidArgument, "module: max_workers must be at least 1");
  if (options.max_activations_per_worker == 0)
    return MakeError(ErrorCode::kInvalidArgument, "module: max_activations_per_worker must be at least 1");
  // A worker that dies while we write to it must not kill the parent.
  struct sigaction old {};
  sigaction(SIGPIPE, nullptr, &old);
  if (old.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);

  auto impl = std::make_unique<Impl>();
  auto journal = Journal::Open(options.journal_path, options.durability == JournalDurability::kFull ? Durability::kFull
                                                                                                    : Durability::kNormal);
  if (!journal) return journal.error();
  impl->journal = std::move(*journal);
  impl->epfd = epoll_create1(EPOLL_CLOEXEC);
  if (impl->epfd < 0) return MakeError(ErrorCode::kIo, std::string("epoll_create1: ") + std::strerror(errno));
  impl->kernel_landlock_abi = KernelLandlockAbi();
  if (cpu_set_t set; sched_getaffinity(0, sizeof set, &set) == 0) impl->cpus = static_cast<size_t>(CPU_COUNT(&set));
  impl->options = std::move(options);
  auto sink = impl->options.log_sink;
  if (!sink) sink = [](const HostCallContext&, std::string_view, std::string_view) {};
  if (auto r = RegisterLogHostCall(impl->registry, std::move(sink)); !r) return r.error();
  if (auto r = RegisterKvHostCalls(impl->registry, *impl->journal); !r) return r.error();
  return std::unique_ptr<Module>(new Module(std::move(impl)));
}

HostCallRegistry& Module::registry() { return impl_->registry; }

Result<FlowId> Module::AddFlow(std::string name, std::string source, std::string_view manifest_text, Profile profile) {
  auto manifest = Manifest::Parse(manifest_text, impl_->registry);
  if (!manifest) return manifest.error();
  Flow f{std::move(name), std::move(source), "", std::move(*manifest), profile};
  f.source_hash = Sha256Hex(f.source);
  impl_->flows.push_back(std::move(f));
  impl_->health.EnsureFlow(impl_->flows.back().name);
  return impl_->flows.size() - 1;
}

int64_t Module::Submit(FlowId flow, Json input, std::function<void(const ActivationResult&)> done) {
  Impl& m = *impl_;
  if (flow >= m.flows.size()) {
    ActivationResult r;
    r.outcome = Outcome::kInvalidInput;
    r.message = "no flow with id " + std::to_string(flow);
    if (done) done(r);
    return 0;
  }
  const Flow& f = m.flows[flow];
  Queued q;
  q.flow = flow;
  q.input_json = protocol::DumpJson(input);
  if (std::string why; !protocol::FitsInMessage(q.input_json, why)) {
    ActivationResult r;
    r.outcome = Outcome::kInvalidInput;
    r.message = "the input cannot be sent to the flow: " + why;
    if (done) done(r);
    return 0;
  }
  q.start_us = NowUnixUs();
  auto id = m.journal->BeginActivation({f.name, f.source_hash, f.manifest.hash(), q.input_json, q.start_us});
  if (!id) {
    ActivationResult r;
    r.outcome = Outcome::kJournalError;
    r.message = id.error().message;
    if (done) done(r);
    return 0;
  }
  q.id = *id;
  q.done = std::move(done);
  m.queue.push_back(std::move(q));
  return *id;
}

void Module::RunUntilIdle() {
  while (impl_->Busy()) impl_->Iterate(3'600'000);
  impl_->CommitAndFlush();
}

void Module::RunFor(std::chrono::milliseconds budget) {
  const auto end = Clock::now() + budget;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
    if (left <= 0) break;
    impl_->Iterate(static_cast<int>(left));
  }
  impl_->CheckTimers();
  impl_->CommitAndFlush();
}

ActivationResult Module::Run(FlowId flow, Json input) {
  ActivationResult out;
  Submit(flow, std::move(input), [&out](const ActivationResult& r) { out = r; });
  RunUntilIdle();
  return out;
}

Json Module::HealthReport() const {
  WorkerCountsByFlow by_flow;
  for (const auto& w : impl_->workers) {
    if (w->state == Worker::State::kDead) continue;
    auto& c = by_flow[impl_->flows[w->flow].name];
    ++c.live;
    if (w->state == Worker::State::kIdle) ++c.idle;
    if (w->state == Worker::State::kBusy || w->state == Worker::State::kLoading || w->state == Worker::State::kWelcome) ++c.busy;
  }
  return impl_->health.ToJson(by_flow, impl_->queue.size());
}

Module::DoctorReport Module::Doctor() {
  DoctorReport d;
  Impl& m = *impl_;
  d.kernel_landlock_abi = m.kernel_landlock_abi;
  d.required_landlock_abi = std::min(m.kernel_landlock_abi, protocol::kWorkerLandlockAbiMax);
  auto proc = WorkerProcess::Spawn(m.options.worker_path, m.options.worker_args);
  if (!proc) {
    d.verdict = proc.error().message;
    return d;
  }
  protocol::FrameDecoder decoder;
  const auto limit = Clock::now() + m.options.welcome_timeout;
  std::string payload;
  for (;;) {
    const auto st = decoder.Next(payload);
    if (st == protocol::FrameDecoder::Status::kFrame) break;
    if (st == protocol::FrameDecoder::Status::kError) {
      d.verdict = "invalid frame: " + decoder.error();
      return d;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(limit - Clock::now()).count();
    if (left <= 0) {
      d.verdict = "no welcome within " + std::to_string(m.options.welcome_timeout.count()) + " ms";
      return d;
    }
    pollfd p{(*proc)->stdout_fd(), POLLIN, 0};
    poll(&p, 1, static_cast<int>(left));
    char buf[65536];
    const ssize_t n = ::read((*proc)->stdout_fd(), buf, sizeof buf);
    if (n == 0) {
      auto exit = (*proc)->WaitFor(std::chrono::milliseconds(1000));
      char ebuf[4096];
      const ssize_t en = ::read((*proc)->stderr_fd(), ebuf, sizeof ebuf);
      d.verdict = "worker " + (exit ? exit->Describe() : std::string("closed stdout")) + " before its welcome" +
                  (en > 0 ? ": " + std::string(ebuf, static_cast<size_t>(en)) : "");
      while (!d.verdict.empty() && d.verdict.back() == '\n') d.verdict.pop_back();
      return d;
    }
    if (n > 0) decoder.Feed(buf, static_cast<size_t>(n));
  }
  protocol::WorkerMessage msg;
  std::string error;
  if (!protocol::ParseWorkerMessage(payload, msg, error) || !std::holds_alternative<protocol::Welcome>(msg)) {
    d.verdict = "first frame is not a valid welcome: " + (error.empty() ? std::string("wrong type") : error);
    return d;
  }
  const auto& welcome = std::get<protocol::Welcome>(msg);
  protocol::Json j;
  (void)protocol::ParseJsonObject(payload, j, error);
  d.welcome = j;
  const WelcomeVerdict v = CheckWelcome(welcome, (*proc)->pid(), {m.options.allow_without_landlock, m.kernel_landlock_abi});
  d.accepted = v.accepted;
  d.verdict = v.reason;
  return d;
}

}  // namespace basal
