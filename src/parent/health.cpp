#include "basal/health.h"

namespace basal {

const char* RetireReasonName(RetireReason reason) {
  switch (reason) {
    case RetireReason::kActivationCount: return "activation_count";
    case RetireReason::kIdle: return "idle";
    case RetireReason::kBudget: return "budget";
    case RetireReason::kEvicted: return "evicted";
    case RetireReason::kLoadFailed: return "load_failed";
    case RetireReason::kCancelled: return "cancelled";
    case RetireReason::kFlowRemoved: return "flow_removed";
    case RetireReason::kShutdown: return "shutdown";
    case RetireReason::kCpuLimit: return "cpu_limit";
    case RetireReason::kParked: return "parked";
  }
  return "unknown";
}

uint64_t HealthSnapshot::activations_failed_total() const {
  uint64_t n = 0;
  for (const auto& [outcome, count] : activations_failed) n += count;
  return n;
}

nlohmann::json HealthSnapshot::ToJson() const {
  auto counts = [](const WorkerCounts& c) { return nlohmann::json{{"live", c.live}, {"idle", c.idle}, {"busy", c.busy}}; };
  nlohmann::json per_flow = nlohmann::json::object();
  for (const auto& [name, c] : workers_per_flow) per_flow[name] = counts(c);
  nlohmann::json failed = nlohmann::json::object();
  for (const auto& [outcome, n] : activations_failed) failed[OutcomeName(outcome)] = n;
  nlohmann::json retired = nlohmann::json::object();
  for (int i = 0; i < kRetireReasonCount; ++i) retired[RetireReasonName(static_cast<RetireReason>(i))] = retirements[i];
  nlohmann::json crashed = nlohmann::json::object();
  for (const auto& [k, n] : crashes) crashed[k] = n;
  nlohmann::json w = counts(workers);
  w["per_flow"] = per_flow;
  return {
      {"workers", w},
      {"activations", {{"ok", activations_ok}, {"parked", activations_parked}, {"failed", activations_failed_total()}, {"failed_by_kind", failed}}},
      {"retirements", retired},
      {"deadline_kills", deadline_kills},
      {"worker_confinement", worker_confinement},
      {"fatal_status_deaths", fatal_status_deaths},
      {"refused_welcomes", refused_welcomes},
      {"confinement_refusals", confinement_refusals},
      {"crashes", crashed},
      {"protocol_violations", protocol_violations},
      {"spawned", spawned},
      {"spawn_failures", spawn_failures},
      {"denied_calls", denied_calls},
      {"journal_failures", journal_failures},
      {"caught_budget_failures", caught_budget_failures},
      {"abandoned_recovered", abandoned_recovered},
      {"cpu_kills", cpu_kills},
      {"idle_cpu_kills", idle_cpu_kills},
      {"output_overflows", output_overflows},
      {"logs_dropped", logs_dropped},
      {"http", {{"refusals", http_refusals}, {"failures", http_failures}}},
      {"host_calls", host_calls},
      {"queue_length", queue_length},
  };
}

}  // namespace basal
