#include "parent/health.h"

namespace basal {

void HealthCounters::CountActivation(Outcome outcome) {
  if (outcome == Outcome::kOk) {
    ++activations_ok;
  } else {
    ++activations_failed[OutcomeName(outcome)];
  }
}

void HealthCounters::CountCrash(const WorkerProcess::Exit& exit) {
  if (exit.signaled) {
    std::string key = "signal ";
    key += SignalName(exit.signal);
    if (key == "signal signal") {
      key += ' ';
      key += std::to_string(exit.signal);
    }
    ++crashes[key];
  } else {
    ++crashes["exit " + std::to_string(exit.code)];
  }
}

nlohmann::json HealthCounters::ToJson(const WorkerCountsByFlow& workers, size_t queue_length) const {
  nlohmann::json per_flow = nlohmann::json::object();
  WorkerCounts total;
  for (const auto& [name, present] : flows) {
    (void)present;
    per_flow[name] = {{"live", 0}, {"idle", 0}, {"busy", 0}};
  }
  for (const auto& [name, c] : workers) {
    per_flow[name] = {{"live", c.live}, {"idle", c.idle}, {"busy", c.busy}};
    total.live += c.live;
    total.idle += c.idle;
    total.busy += c.busy;
  }
  nlohmann::json failed = nlohmann::json::object();
  uint64_t failed_total = 0;
  for (const auto& [k, n] : activations_failed) {
    failed[k] = n;
    failed_total += n;
  }
  nlohmann::json retired = {{"activation_count", 0}, {"idle", 0}, {"budget", 0}, {"evicted", 0}, {"load_failed", 0}};
  for (const auto& [k, n] : retirements) retired[k] = n;
  nlohmann::json crashed = nlohmann::json::object();
  for (const auto& [k, n] : crashes) crashed[k] = n;
  return {
      {"workers", {{"live", total.live}, {"idle", total.idle}, {"busy", total.busy}, {"per_flow", per_flow}}},
      {"activations", {{"ok", activations_ok}, {"failed", failed_total}, {"failed_by_kind", failed}}},
      {"retirements", retired},
      {"deadline_kills", deadline_kills},
      {"worker_confinement", worker_confinement},
      {"refused_welcomes", refused_welcomes},
      {"confinement_refusals", confinement_refusals},
      {"crashes", crashed},
      {"protocol_violations", protocol_violations},
      {"spawned", spawned},
      {"spawn_failures", spawn_failures},
      {"denied_calls", denied_calls},
      {"journal_failures", journal_failures},
      {"caught_budget_failures", caught_budget_failures},
      {"queue_length", queue_length},
  };
}

}  // namespace basal
