#include "basal/outcome.h"
#include "basal/result.h"

namespace basal {

const char* OutcomeName(Outcome o) {
  switch (o) {
    case Outcome::kOk: return "ok";
    case Outcome::kScriptError: return "script_error";
    case Outcome::kBudgetExhausted: return "budget_exhausted";
    case Outcome::kDeadline: return "deadline";
    case Outcome::kProtocolViolation: return "protocol_violation";
    case Outcome::kWorkerCrashed: return "worker_crashed";
    case Outcome::kWorkerConfinement: return "worker_confinement";
    case Outcome::kWorkerRefused: return "worker_refused";
    case Outcome::kSpawnFailed: return "spawn_failed";
    case Outcome::kJournalError: return "journal_error";
    case Outcome::kInvalidInput: return "invalid_input";
    case Outcome::kCancelled: return "cancelled";
    case Outcome::kAbandoned: return "abandoned";
    case Outcome::kDiverged: return "diverged";
    case Outcome::kParked: return "parked";
  }
  return "unknown";
}

std::optional<Outcome> ParseOutcome(std::string_view name) {
  for (int i = 0; i <= static_cast<int>(kLastOutcome); ++i) {
    const auto o = static_cast<Outcome>(i);
    if (name == OutcomeName(o)) return o;
  }
  return std::nullopt;
}

const char* BudgetName(Budget budget) {
  switch (budget) {
    case Budget::kCpu: return "cpu";
    case Budget::kMemory: return "memory";
    case Budget::kStack: return "stack";
    case Budget::kJournal: return "journal";
    case Budget::kCallsInFlight: return "calls_in_flight";
  }
  return "unknown";
}

std::optional<Budget> ParseBudget(std::string_view name) {
  for (Budget b : {Budget::kCpu, Budget::kMemory, Budget::kStack, Budget::kJournal, Budget::kCallsInFlight})
    if (name == BudgetName(b)) return b;
  return std::nullopt;
}

nlohmann::json ActivationResult::ErrorJson() const {
  nlohmann::json j = {{"kind", OutcomeName(outcome)}, {"message", message}};
  if (!error_name.empty()) j["name"] = error_name;
  if (!stack.empty()) j["stack"] = stack;
  if (budget) j["budget"] = BudgetName(*budget);
  return j;
}

const char* ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return "invalid_argument";
    case ErrorCode::kNotFound: return "not_found";
    case ErrorCode::kIo: return "io";
    case ErrorCode::kSpawn: return "spawn";
    case ErrorCode::kDatabase: return "database";
    case ErrorCode::kUnsupported: return "unsupported";
    case ErrorCode::kInternal: return "internal";
    case ErrorCode::kUnavailable: return "unavailable";
    case ErrorCode::kRefused: return "refused";
    case ErrorCode::kConflict: return "conflict";
  }
  return "unknown";
}

}  // namespace basal
