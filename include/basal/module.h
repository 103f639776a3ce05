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
#include "basal/health.h"
#include "basal/host_call.h"
#include "basal/manifest.h"
#include "basal/outcome.h"
#include "basal/result.h"

namespace basal {

class EventLoop;  // src/parent/loop/event_loop.h
class Store;      // src/parent/store/store.h

// What the module tells its embedder besides results: the CLI prints these, a daemon logs or
// counts them. Called on the loop thread; must not call back into the Module.
struct ModuleEvent {
  enum class Kind {
    kWorkerRefused,          // a worker's welcome did not report the required confinement
    kConfinementViolation,   // a worker was killed by the seccomp filter
    kHandlerThrew,           // a host-call handler threw; the call was answered with HostError
    kResultTooLarge,         // a handler's result could not be sent to the flow
    kJournalFailure,         // a journal commit failed; nothing of that batch was answered
    kRecovered,              // opening the journal closed activations whose parent had died
    kIdleCpu,                // an idle worker used CPU between activations: killed
  };
  Kind kind;
  std::string message;
  int64_t activation_id = 0;  // 0 when none
  int64_t worker_pid = 0;     // 0 when none
};
const char* ModuleEventKindName(ModuleEvent::Kind kind);  // "worker_refused", ...

class ModuleObserver {
 public:
  virtual ~ModuleObserver() = default;
  virtual void OnEvent(const ModuleEvent& event) = 0;
};

struct ModuleOptions {
  std::string journal_path;                       // required; created 0600 if new (its directory must exist)
  Durability durability = Durability::kNormal;
  std::string worker_path;                        // required: the ck-basal-worker binary
#ifdef BASAL_TEST_HOOKS
  std::vector<std::string> worker_args;           // test-hooks switches for the worker
#endif
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
  uint32_t max_activations_per_worker = 256;      // then the worker is retired
  std::chrono::milliseconds idle_retire{600'000}; // a worker idle this long is retired
  // Before sleeping, poll this long for a worker's next frame, but only while fewer workers are
  // busy than there are CPUs (so the polling takes no CPU a worker could use). Zero disables it.
  std::chrono::microseconds busy_poll{50};
  // Hard process memory cap (RLIMIT_AS) = heap budget + headroom, per profile.
  uint64_t flow_memory_headroom_bytes = 256ull << 20;
  uint64_t codemode_memory_headroom_bytes = 128ull << 20;
  // An activation's owner lease in the journal (crash recovery by another host); renewed every third.
  std::chrono::milliseconds lease{60'000};
  // Bounds on what a hostile flow or worker can make the parent hold or write (docs/sandbox.md,
  // "Limits"). The manifest's budgets (calls_in_flight, journal_kb, log_kb) bound each activation.
  size_t journal_value_max_bytes = 64u << 10;      // per journaled value; above: prefix, size, SHA-256
  uint64_t calls_in_flight_max_bytes = 32ull << 20; // argument bytes of one activation's calls in flight
  uint64_t worker_output_max_bytes = 32ull << 20;  // answers queued to a worker that does not read
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

// Where a flow came from (docs/approvals.md): what the journal records with each activation.
enum class FlowOrigin {
  kAdhoc,     // AddFlow: source and manifest given by the embedder (`basal run FILE --manifest M`)
  kApproved,  // LoadApprovedFlow: the newest approved version of a flow in the store
  kCodemode,  // AddCodemodeScript: an agent's script under the newest version of a codemode policy
};

// A flow this module may run: immutable. Keep the reference to submit activations; RemoveFlow retires it.
struct Flow {
  uint64_t id = 0;
  std::string name;
  std::string source;
  std::string source_hash;  // "sha256:<hex>"
  Manifest manifest;
  Profile profile = Profile::kFlow;
  FlowOrigin origin = FlowOrigin::kAdhoc;
  std::string manifest_text_hash;  // "sha256:<hex>" of the manifest text as written
  // Approved and codemode flows: the approved version (of the flow, or of the policy) it runs
  // under. Submit and the start of each activation refuse it once that version is revoked.
  int64_t approval_id = 0;
  int64_t version = 0;
  std::string policy;  // codemode: the policy's name
  // Codemode: the host calls the script's `tools` object offers, as tools.<group>.<member>(args)
  // (its default export's third argument; "kv.get" is tools.kv.get, "mcp.fs.read_text_file" is
  // tools.fs.read_text_file). Empty for a flow.
  std::vector<std::string> tools;
};
using FlowRef = std::shared_ptr<const Flow>;

using ActivationId = int64_t;
using DoneCallback = std::function<void(const ActivationResult&)>;

// What loading a flow in a worker showed (Module::CheckLoad). Loading is what a worker does before
// its first activation: compile the flow's module, evaluate its top level, find its default export.
// The default export is not called.
struct LoadCheck {
  // kOk: the flow loads and its default export is a function. Otherwise the outcome an activation
  // of the flow would have ended with, for the same reason: script_error (a syntax error, a throw
  // at top level, an import, no default export function), budget_exhausted (cpu, memory or stack
  // while loading), deadline (loading passed budgets.deadline_ms), worker_refused, spawn_failed,
  // worker_crashed, worker_confinement, protocol_violation, cancelled.
  Outcome outcome = Outcome::kOk;
  // Not ok: what happened, naming the cause, as an activation's message says it (for a syntax
  // error: "flow hello.js failed to load: hello.js:3: SyntaxError: unexpected token ...").
  std::string message;
  // When the engine reported a JS error (script_error, and budget_exhausted): its name and its
  // own message as the engine gave them ("SyntaxError", "unexpected token in expression: ')'"),
  // and its stack (QuickJS's "    at hello.js:3" lines).
  std::string error_name;
  std::string error_message;
  std::string stack;
  std::optional<Budget> budget;  // budget_exhausted: which one
  // A syntax error: the line of the flow's source where compiling stopped, from 1 (QuickJS
  // 2021-03-27 reports no column). 0: not a compile error, or none reported.
  int64_t line = 0;
  bool ok() const { return outcome == Outcome::kOk; }
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
  Result<ActivationId> Submit(const FlowRef& flow, nlohmann::json input, DoneCallback done);
  // The same, and `journal_end` runs on the loop thread right after the activation's end is
  // written to the open batch, before that batch commits, so what it writes through store()
  // commits (or is lost) together with the end (basal serve records its run's end this way, one
  // commit instead of two). It is not called when the end could not be written. It must not
  // throw, call back into the module, or block.
  Result<ActivationId> Submit(const FlowRef& flow, nlohmann::json input, DoneCallback done,
                              DoneCallback journal_end);
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
  // or with the commit's error, in which case that batch was rolled back and is lost. A daemon
  // writes a record through store() and answers its client from `fn` (basal serve: a run is
  // journaled as queued before its 202 goes out). With no batch open, `fn` runs at the pass's end.
  void AfterCommit(std::function<void(const Result<void>&)> fn);

  // For basal's own rooms built on a module (src/serve): the store it journals to (writes join the
  // batch committed at the end of each loop pass; loop thread only) and its event loop (watch
  // descriptors and set timers beside the module's own; loop thread only, but Post and Wake).
  Store& store();
  EventLoop& loop();

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

  struct Impl;

 private:
  explicit Module(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace basal
