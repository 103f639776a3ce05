// The parent: approves flows, owns the worker pool, the journal and the health report.
//
//   basal::ModuleOptions o;
//   o.journal_path = "journal.db";
//   o.worker_path = "/usr/lib/basal/ck-basal-worker";
//   auto module = basal::Module::Open(o);              // Result<std::unique_ptr<Module>>
//   auto flow = (*module)->AddFlow("hello.js", source, manifest_text);   // Result<FlowId>
//   basal::ActivationResult r = (*module)->Run(*flow, {{"name", "world"}});
//
// Many activations: Submit() each with a callback, then RunUntilIdle(). Single-threaded: every
// call, every host-call handler and every callback runs on the thread that calls Run*.
// Destroying the Module kills its workers; activations still running or queued are journaled as
// `cancelled` (their callbacks are not called), so the journal never keeps an unfinished entry.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "basal/host_call.h"
#include "basal/manifest.h"
#include "basal/outcome.h"
#include "basal/result.h"

namespace basal {

enum class Profile { kFlow, kCodemode };
const char* ProfileName(Profile profile);

enum class JournalDurability {
  kNormal,  // WAL, synchronous=NORMAL: survives a crash of the parent process (default)
  kFull,    // WAL, synchronous=FULL: also survives power loss
};

struct ModuleOptions {
  std::string journal_path;                       // required
  JournalDurability durability = JournalDurability::kNormal;
  std::string worker_path;                        // required: the ck-basal-worker binary
  std::vector<std::string> worker_args;           // test-hooks switches only; empty in production
  std::chrono::milliseconds welcome_timeout{5'000};
  // Operator policy: accept workers without Landlock, and then only when the kernel lacks it.
  bool allow_without_landlock = false;
  // Pool.
  size_t max_workers = 8;                         // global cap; further activations queue
  uint32_t max_activations_per_worker = 256;      // then the worker is retired
  std::chrono::milliseconds idle_retire{600'000}; // a worker idle this long is retired
  // Before sleeping in epoll_wait, poll this long for a worker's next frame, but only while fewer
  // workers are busy than there are CPUs (so the polling takes no CPU a worker could use). A host
  // call's answer is usually followed by the worker's next frame within tens of microseconds;
  // catching it awake saves two scheduler round trips (docs/performance.md). Zero disables it.
  std::chrono::microseconds busy_poll{50};
  // Hard process memory cap (RLIMIT_AS) = heap budget + headroom, per profile.
  uint64_t flow_memory_headroom_bytes = 256ull << 20;
  uint64_t codemode_memory_headroom_bytes = 128ull << 20;
  // Where console.* output goes besides the journal (every log call is journaled regardless).
  std::function<void(const HostCallContext&, std::string_view level, std::string_view message)> log_sink;
};

using FlowId = size_t;

// The health report (flow.health), as JSON: see docs/health.md.
struct Health;

class Module {
 public:
  static Result<std::unique_ptr<Module>> Open(ModuleOptions options);
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Register embedder host calls here before AddFlow (manifests are checked against it).
  HostCallRegistry& registry();

  // Approves a flow: parses its manifest (errors name the bad key) and hashes source and manifest.
  Result<FlowId> AddFlow(std::string name, std::string source, std::string_view manifest_text,
                         Profile profile = Profile::kFlow);

  // Queues an activation; returns its journal id (0 if even that failed: `done` says why).
  // `done` runs once, after the activation's journal entry is committed.
  int64_t Submit(FlowId flow, nlohmann::json input, std::function<void(const ActivationResult&)> done);
  // Drives workers until nothing is queued or running.
  void RunUntilIdle();
  // Drives the loop for at most `budget` (for idle retirement and embedders with their own loop).
  void RunFor(std::chrono::milliseconds budget);
  ActivationResult Run(FlowId flow, nlohmann::json input);

  nlohmann::json HealthReport() const;

  // Starts one worker, waits for its welcome and reports the confinement and the verdict.
  struct DoctorReport {
    int kernel_landlock_abi = 0;
    int required_landlock_abi = 0;
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
