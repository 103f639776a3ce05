// The parent: approves flows, owns the worker pool, the journal and the health report.
//
//   basal::ModuleOptions o;
//   o.journal_path = "journal.db";
//   o.worker_path = "/usr/lib/basal/ck-basal-worker";
//   auto module = basal::Module::Open(o);                       // Result<std::unique_ptr<Module>>
//   auto flow = (*module)->AddFlow("hello.js", source, manifest_text);   // Result<FlowRef>
//   basal::ActivationResult r = (*module)->Run(*flow, {{"name", "world"}});
//
// Many activations: Submit() each with a callback, then RunUntilIdle(), or run the loop for as
// long as the host lives (RunFor in a loop, on a thread of its own if you like). Threads: every
// method runs on the loop thread (the one that drives Run*/RunFor), and so do every host-call
// handler and every callback; the exceptions are Post() and HostCallReply::Ok/Error, which any
// thread may call (to submit from another thread, Post a lambda that calls Submit). docs/embedding.md has a worked example; docs/architecture.md the rooms.
//
// Ending: Shutdown(grace) lets running activations finish for up to `grace`, cancels the rest and
// calls every `done` exactly once. Destroying the Module without Shutdown kills its workers and
// journals what still ran or waited as `cancelled` without calling those callbacks.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "basal/durability.h"
#include "basal/flow.h"
#include "basal/health.h"
#include "basal/host_call.h"
#include "basal/manifest.h"
#include "basal/module_event.h"
#include "basal/outcome.h"
#include "basal/result.h"

namespace basal {

// What basal's own rooms built on a module (basal serve, basal mcp, the CLI's run commands) use
// beyond this API: the loop, the store's reader, writes that join the module's batch, and runs
// (src/parent/module_host.h). Not for embedders: it is not part of the installed API.
class ModuleHost;

struct ModuleOptions {
  // Required: the store's locator. A file path is an SQLite journal, created 0600 if new (its
  // directory must exist); postgresql://... (or postgres://) a PostgreSQL database (docs/postgres.md).
  std::string journal_path;
  Durability durability = Durability::kNormal;
  std::string worker_path;                        // required: the ck-basal-worker binary
  // Test-hooks switches for the worker. Open refuses any in a build without BASAL_TEST_HOOKS: a
  // release parent never starts a worker that could be told to weaken itself.
  std::vector<std::string> worker_args;
  std::chrono::milliseconds welcome_timeout{5'000};
  // Operator policy: accept workers without Landlock, and then only when the kernel lacks it.
  bool allow_without_landlock = false;
  // The user workers run as when this process runs as root (they drop every capability too).
  // Empty: "basal-worker" if the system has that user, else "nobody". A user with uid or gid 0
  // is refused by Open, and so is any name when this process is not root (its workers already
  // run as its own, unprivileged, uid).
  std::string worker_user;
  // Pool.
  size_t max_workers = 8;                         // global cap; further activations queue
  uint32_t max_activations_per_worker = 256;      // then the worker is retired (one started on demand up to 1/8 sooner: staggered)
  std::chrono::milliseconds idle_retire{600'000}; // a worker idle this long is retired
  // Before sleeping, poll this long for a worker's next frame, but only while some workers and no
  // more than there are CPUs are busy: with fewer, the polling takes no CPU a worker could use; with
  // as many (at least two), the loop yields its CPU between two looks, so a worker waiting for that
  // CPU runs first. Zero disables it.
  std::chrono::microseconds busy_poll{50};
  // The poll's window grows from busy_poll up to this while what the loop waits for keeps coming
  // soon after the window ran out (a loopback http.fetch: its connect, request and answer a little
  // apart), and shrinks back while it does not (EventLoop::set_busy_poll). Below busy_poll: busy_poll.
  std::chrono::microseconds busy_poll_max{500};
  // Hard process memory cap (RLIMIT_AS) = heap budget + headroom, per profile.
  uint64_t flow_memory_headroom_bytes = 256ull << 20;
  uint64_t codemode_memory_headroom_bytes = 128ull << 20;
  // An activation's owner lease in the journal (crash recovery by another host); renewed every third.
  std::chrono::milliseconds lease{60'000};
  // Several hosts share the store (PostgreSQL only; docs/postgres.md, "Several hosts"): leases are
  // measured by the server's clock, every lease/3 a heartbeat renews this process's leases in one
  // statement (in the open batch) and, on a second connection, closes the lapsed ones of other
  // processes, so their
  // runs can be taken over; an activation whose run another host took over is stopped here at once
  // (its worker killed, nothing more of it written). Open refuses it on an SQLite journal.
  bool several_hosts = false;
  // With several_hosts, the id this host holds its queued runs under (basal serve's host_id): its
  // row in basal.hosts is renewed with its leases, the runs it queues are its own, and it listens
  // for other hosts' offers of runs they cannot start (RunStore::HoldQueuedRunsAs). "": none.
  std::string host_id;
  // A durable run resumed this many times (docs/durable.md) ends `resume_exhausted` at the next
  // attempt instead of starting again: a run whose script brings its worker or host down each time
  // cannot loop for ever.
  uint32_t max_resumes = 10;
  // Parked durable runs (docs/durable.md: sleep, waitForEvent, retries) cost rows, not workers;
  // these bound the rows. A park past a bound fails its call with a LimitError the script can catch.
  size_t max_parked_runs = 100'000;          // in the store, all flows
  size_t max_parked_runs_per_flow = 10'000;  // of one flow
  // A sleep of at most this long stays inside its activation (a timer); longer ones park the run.
  std::chrono::milliseconds park_after{1'000};
  // Events (docs/durable.md#events): payload bytes; undelivered events per run, and keyed ones
  // (a webhook's, matched to a waiting run by a key) per flow; how long an undelivered one is kept.
  size_t max_event_bytes = 64u << 10;
  size_t max_pending_events_per_run = 100;
  size_t max_pending_keyed_events_per_flow = 10'000;
  std::chrono::milliseconds event_retention{7LL * 24 * 3600 * 1000};
  // Bounds on what a hostile flow or worker can make the parent hold or write (docs/sandbox.md,
  // "Limits"). The manifest's budgets (calls_in_flight, journal_kb, log_kb) bound each activation.
  size_t journal_value_max_bytes = 64u << 10;      // per journaled value; above: prefix, size, SHA-256
  uint64_t calls_in_flight_max_bytes = 32ull << 20; // argument bytes of one activation's calls in flight
  // Answers on their way to one worker (docs/sandbox.md, "Answers to a worker: flow control"): the
  // parent runs a call's handler and hands answers to the worker only while less than the budget
  // waits for it; the rest waits (calls unrun, answers held in order) until the worker reads. A
  // worker that has read none of its answers while more than the max wait for it is killed.
  uint64_t worker_output_budget_bytes = 16ull << 20;
  uint64_t worker_output_max_bytes = 64ull << 20;
  // How long a worker with more than worker_output_max_bytes waiting for it may read none of it
  // before it is killed (a worker that reads is never killed for what waits for it).
  std::chrono::milliseconds worker_output_stall{2000};
  // CPU is measured by the parent from the kernel: a worker past its activation's budget plus this
  // grace is killed (budget_exhausted, cpu).
  std::chrono::milliseconds cpu_grace{100};
  // CPU an idle worker may use between activations (its engine's cleanup); past it, it is killed.
  std::chrono::milliseconds idle_cpu_max{200};
  // Where console.* output goes besides the journal (every log call is journaled regardless).
  std::function<void(const HostCallContext&, std::string_view level, std::string_view message)> log_sink;
  std::shared_ptr<ModuleObserver> observer;       // null: nobody hears the events (health still counts its counters)
  // Refuse ad hoc flows (AddFlow): only approved versions (LoadApprovedFlow) and scripts under an
  // approved codemode policy (AddCodemodeScript) run. `basal run --require-approval`; the daemon's default.
  bool require_approval = false;
  // http.fetch (docs/http.md).
  // Where `basal secret set` keeps secret values (one 0600 file per secret in a 0700 directory);
  // a grant's "${secret:NAME}" reads NAME from here at each request. Empty: no secrets (a request
  // whose rule references one fails, naming it).
  std::string secrets_dir;
  size_t http_max_in_flight = 64;  // transfers at once across the module; more wait their turn
  // Tests only: the addresses a host name resolves to (empty result: resolve normally). The SSRF
  // guard still judges every address connected.
  std::function<std::vector<std::string>(const std::string& host)> http_resolve_for_tests;
};

class Module {
 public:
  static Result<std::unique_ptr<Module>> Open(ModuleOptions options);
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Register embedder host calls here before AddFlow (manifests are checked against it).
  HostCallRegistry& registry();

  // An ad hoc flow: parses its manifest (errors name the bad key), hashes source and manifest and
  // keeps both texts in the journal (content-addressed). kRefused under require_approval.
  Result<FlowRef> AddFlow(std::string name, std::string source, std::string_view manifest_text,
                          Profile profile = Profile::kFlow);
  // The newest approved version of flow `name` in this module's store (`basal flow approve`):
  // its texts are read back and checked against the hashes the approval is bound to. kNotFound
  // when never approved; kRefused when that version is revoked; kDatabase when a kept text is
  // missing or does not match its hash.
  Result<FlowRef> LoadApprovedFlow(std::string_view name);
  // An agent's script under the newest version of codemode policy `policy` (`basal policy
  // approve`): the policy's grants and budgets, profile codemode. The script's source is kept in
  // the journal. `script_name` names it in the journal (e.g. its file name). Errors as LoadApprovedFlow.
  // `tools`: the host calls its `tools` argument offers (Flow::tools); nullopt: every host call the
  // policy grants by name (not the `mcp.<server>.*` wildcards, whose tools only `basal mcp` knows).
  Result<FlowRef> AddCodemodeScript(std::string_view policy, std::string script_name, std::string source,
                                    std::optional<std::vector<std::string>> tools = std::nullopt);
  // The newest approved version of codemode policy `policy`, checked as AddCodemodeScript checks
  // it (errors alike): what `basal mcp` reads to start the policy's downstream MCP servers.
  struct PolicyVersion {
    Manifest manifest;
    int64_t version = 0;
    int64_t approval_id = 0;
  };
  Result<PolicyVersion> ApprovedPolicy(std::string_view policy);
  // Later Submits of it fail; its idle workers retire now; what it already runs or queued finishes.
  Result<void> RemoveFlow(const FlowRef& flow);

  // Journals and queues an activation. Errors (unknown or removed flow, its approved version
  // revoked (kRefused), input that cannot be sent, journal failure, shutting down) are returned,
  // and then `done` is never called. An activation still queued when its version is revoked ends
  // `cancelled` without starting. On success
  // `done` runs exactly once, later, from the loop, after the activation's end is committed.
  // A durable flow's activation is journaled as a run (trigger "embedder"; result.run_id names it),
  // which the module resumes from the journal if this process dies (docs/durable.md); `done` then
  // hears of the activation that ended it, or of the run stopping to wait for an operator.
  Result<ActivationId> Submit(const FlowRef& flow, nlohmann::json input, DoneCallback done);
  // Ends a queued or running activation as `cancelled` (its worker is killed). kNotFound if it is
  // not queued or running (unknown, or already ended).
  Result<void> Cancel(ActivationId id);
  // Cancels every queued and running activation; `why` becomes each one's message.
  void CancelAll(std::string_view why = "cancelled by the embedder");

  // Loads `flow` in a worker and reports whether it loads, without activating it: the worker is
  // spawned, confined and checked as for an activation, gets the flow's `load`, and is bounded by
  // the flow's cpu, heap, stack and deadline budgets. Nothing is journaled (a loading flow can make
  // no host call). A worker that loaded stays idle in the pool, so the flow's next activation
  // starts on it. Drives the loop like Run (other activations progress meanwhile). Errors: the
  // flow is not approved here, or the module is shutting down.
  //
  //   auto check = module->CheckLoad(*flow);
  //   if (check && !check->ok()) std::cerr << basal::EscapeForTerminal(check->message) << "\n";
  Result<LoadCheck> CheckLoad(const FlowRef& flow);

  // Drives the loop until nothing is queued or running.
  void RunUntilIdle();
  // Drives the loop for at most `budget`.
  void RunFor(std::chrono::milliseconds budget);
  ActivationResult Run(const FlowRef& flow, nlohmann::json input);
  // Refuses new Submits, drives the loop until nothing runs or `grace` passed, cancels the rest,
  // retires every worker. Afterwards every accepted `done` has been called exactly once.
  void Shutdown(std::chrono::milliseconds grace);

  // Any thread: runs `fn` on the loop thread soon, waking it.
  void Post(std::function<void()> fn);

  // Loop thread only. `fn` runs on the loop thread once everything written to the store so far
  // (the open batch, which the module commits at the end of this loop pass) is committed: with Ok,
  // or with the commit's error, in which case that batch was rolled back and is lost. With no batch
  // open, `fn` runs at the pass's end.
  void AfterCommit(std::function<void(const Result<void>&)> fn);

  // Loop thread only. Who hears the module's events, and where console.* lines go besides the
  // journal; each replaces what ModuleOptions (or an earlier call) set. A daemon that builds its
  // rooms on the module after Open sets them here.
  void SetObserver(std::shared_ptr<ModuleObserver> observer);
  void SetLogSink(std::function<void(const HostCallContext&, std::string_view level, std::string_view message)> sink);

  // For basal's own rooms (src/serve, src/mcp, src/cli): see ModuleHost above.
  ModuleHost& host();

  // Loop thread only. Safe to call from a host-call handler or a `done` callback.
  HealthSnapshot Health() const;
  nlohmann::json HealthReport() const { return Health().ToJson(); }

  // Starts one worker, waits for its welcome and reports the confinement and the verdict.
  struct DoctorReport {
    int kernel_landlock_abi = 0;
    int required_landlock_abi = 0;
    uint32_t parent_uid = 0;   // geteuid() of this process
    // When this process runs as root: the user workers must run as, "nobody (uid 65534, gid 65534)".
    std::string worker_user;
    // The worker's /proc/PID/status fields that the check reads (ids, groups, capability sets,
    // NoNewPrivs, Seccomp), as the kernel wrote them; empty if they could not be read.
    std::vector<std::pair<std::string, std::string>> kernel_view;
    // The kernel view shows the worker with uid 0 or with any capability: it would keep
    // privilege (the check refuses it).
    bool worker_privileged = false;
    nlohmann::json welcome;   // null if none arrived
    bool accepted = false;
    std::string verdict;      // why accepted or refused
  };
  DoctorReport Doctor();

 private:
  struct Impl;
  explicit Module(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace basal
