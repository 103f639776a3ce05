// The health report's counters (flow.health): what an operator reads to see confinement
// violations, deadline kills and crashes apart from each other. See docs/health.md.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "basal/outcome.h"
#include "parent/worker_process.h"

namespace basal {

struct WorkerCounts {
  uint64_t live = 0, idle = 0, busy = 0;
};
using WorkerCountsByFlow = std::map<std::string, WorkerCounts>;

struct HealthCounters {
  uint64_t spawned = 0;
  uint64_t spawn_failures = 0;
  uint64_t refused_welcomes = 0;
  uint64_t confinement_refusals = 0;  // worker exit 70: it could not confine itself
  uint64_t worker_confinement = 0;  // SIGSYS deaths
  uint64_t deadline_kills = 0;
  uint64_t protocol_violations = 0;
  uint64_t denied_calls = 0;
  uint64_t journal_failures = 0;
  uint64_t caught_budget_failures = 0;  // refused allocation caught by a script that then completed
  uint64_t activations_ok = 0;
  std::map<std::string, uint64_t> activations_failed;  // by outcome kind
  std::map<std::string, uint64_t> retirements;         // by reason
  std::map<std::string, uint64_t> crashes;             // "signal SIGSEGV", "exit 1"
  std::map<std::string, bool> flows;                   // every approved flow appears

  void CountActivation(Outcome outcome);
  void CountRetirement(const std::string& reason) { ++retirements[reason]; }
  void CountCrash(const WorkerProcess::Exit& exit);
  void EnsureFlow(const std::string& name) { flows[name] = true; }
  nlohmann::json ToJson(const WorkerCountsByFlow& workers, size_t queue_length) const;
};

}  // namespace basal
