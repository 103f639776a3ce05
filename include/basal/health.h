// The health report (flow.health): what an operator reads to see confinement violations, deadline
// kills and crashes apart from each other. A typed snapshot; ToJson() is the shape docs/health.md
// documents (every key always present).
//
//   basal::HealthSnapshot h = module->Health();
//   if (h.worker_confinement > 0) Alert(h.ToJson().dump());
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "basal/outcome.h"

namespace basal {

// Granted members of host-call families counted by name in HealthSnapshot::host_calls (and so in
// basal serve's metrics); more count as "other" (docs/health.md).
inline constexpr size_t kMaxHostCallNamesCounted = 256;

// Why the parent ended a worker's process.
enum class RetireReason {
  kActivationCount,  // ran its last allowed activation
  kIdle,             // idle for idle_retire
  kBudget,           // reported an exhausted budget: its engine state is not trusted
  kEvicted,          // the cap was reached with another flow's activation queued
  kLoadFailed,       // the flow failed to load on it
  kCancelled,        // its activation was cancelled
  kFlowRemoved,      // its flow was removed
  kShutdown,         // the module shut down
  kCpuLimit,         // its RLIMIT_CPU, which this parent cannot move, leaves less than one more activation's budget
  kParked,           // its durable run parked (sleep, waitForEvent): the run goes on in a new worker later
};
inline constexpr int kRetireReasonCount = 10;
const char* RetireReasonName(RetireReason reason);  // "activation_count", "idle", ...

struct WorkerCounts {
  uint64_t live = 0, idle = 0, busy = 0;
};

struct HealthSnapshot {
  // Workers now.
  WorkerCounts workers;
  std::map<std::string, WorkerCounts> workers_per_flow;  // every approved flow appears
  uint64_t queue_length = 0;
  // Since the module opened.
  uint64_t activations_ok = 0;
  uint64_t activations_parked = 0;  // a durable run parked (sleep, waitForEvent): neither ok nor failed
  std::map<Outcome, uint64_t> activations_failed;  // by outcome
  uint64_t retirements[kRetireReasonCount] = {};
  std::map<std::string, uint64_t> crashes;         // "signal SIGSEGV", "exit 1"
  uint64_t spawned = 0;
  uint64_t spawn_failures = 0;
  uint64_t refused_welcomes = 0;
  uint64_t confinement_refusals = 0;  // worker exit 70 before its welcome: it could not confine itself
  uint64_t worker_confinement = 0;    // SIGSYS deaths (Linux)
  // Windows: worker exits 0xc0000008 (invalid handle, fatal under strict handle checks) and
  // 0xc0000005 (access violation); never a refusal (exit 70) or a kill by the parent.
  uint64_t fatal_status_deaths = 0;
  uint64_t deadline_kills = 0;
  uint64_t protocol_violations = 0;
  uint64_t denied_calls = 0;
  uint64_t journal_failures = 0;
  uint64_t caught_budget_failures = 0;  // refused allocation caught by a script that then completed
  uint64_t abandoned_recovered = 0;     // activations of dead parents this module closed at open
  uint64_t cpu_kills = 0;               // busy workers the parent killed past their CPU budget + grace
  uint64_t idle_cpu_kills = 0;          // idle workers killed for using CPU between activations
  uint64_t output_overflows = 0;        // workers killed for not reading their answers (also a protocol violation)
  uint64_t logs_dropped = 0;            // log lines dropped past an activation's log or journal budget
  // http.fetch: requests refused by basal, by reason (not_granted, address_refused, too_large,
  // too_many_requests, redirect_not_granted, ...; docs/http.md), and requests that failed on the
  // network, by kind (timeout, connect, tls, protocol, other).
  std::map<std::string, uint64_t> http_refusals;
  std::map<std::string, uint64_t> http_failures;
  // Host calls by name and verdict ("allow", "deny", "needs_approval", "quota_exceeded"). A name
  // a flow chose cannot grow this map: a registered host call counts under its own name; a member
  // of a family ("mcp.fs.read_file" of "mcp.*") under its own name only when the manifest granted
  // it, else under the family's ("mcp.*"), and past kMaxHostCallNamesCounted members by name under
  // "other"; any other name counts as "unknown".
  std::map<std::string, std::map<std::string, uint64_t>> host_calls;

  uint64_t activations_failed_total() const;
  uint64_t retired(RetireReason reason) const { return retirements[static_cast<int>(reason)]; }
  nlohmann::json ToJson() const;
};

}  // namespace basal
