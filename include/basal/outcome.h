// What a script caused: a closed set of outcomes, always journaled, always counted in health.
// These are not basal's own errors (see result.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace basal {

enum class Outcome {
  kOk,
  kScriptError,         // threw or rejected (or the module failed to load)
  kBudgetExhausted,     // a budget of the manifest: cpu, memory, stack, journal, calls_in_flight
  kDeadline,            // wall-clock deadline passed: the parent killed the worker
  kProtocolViolation,   // the worker sent something invalid: killed
  kWorkerCrashed,       // died by a signal other than SIGSYS, or exited
  kWorkerConfinement,   // killed by SIGSYS: the seccomp filter stopped a system call
  kWorkerRefused,       // its welcome did not report the confinement this OS requires
  kSpawnFailed,         // the worker could not be started
  kJournalError,        // the journal could not commit: nothing was answered
  kInvalidInput,        // the activation's input was not valid JSON (or too deep or large to send)
  kCancelled,           // Cancel(), Shutdown() or the Module's end stopped it first
  kAbandoned,           // its parent died while it ran: closed by the next parent to open the journal
  kDiverged,            // a durable run's replay: the script issued a call other than the one recorded
  kParked,              // a durable run parked (sleep, waitForEvent): its worker was let go; the run goes on later
};
inline constexpr Outcome kLastOutcome = Outcome::kParked;

// The wire/CLI name: "ok", "script_error", "budget_exhausted", "deadline", ...
const char* OutcomeName(Outcome outcome);
std::optional<Outcome> ParseOutcome(std::string_view name);

// The budgets an activation can exhaust (the manifest's budgets; docs/manifest.md). The worker
// reports cpu, memory and stack; the parent enforces cpu from outside too, and journal and
// calls_in_flight alone.
enum class Budget { kCpu, kMemory, kStack, kJournal, kCallsInFlight };
const char* BudgetName(Budget budget);  // "cpu", "memory", "stack", "journal", "calls_in_flight"
std::optional<Budget> ParseBudget(std::string_view name);

struct ActivationResult {
  int64_t activation_id = 0;
  Outcome outcome = Outcome::kOk;
  nlohmann::json result;        // when ok
  std::string message;          // when not ok: what happened, naming the cause
  std::string error_name;       // script_error: the JS error's name
  std::string stack;            // script_error: the JS stack
  std::optional<Budget> budget; // budget_exhausted: which one
  int64_t run_id = 0;            // the run it belongs to (0: a bare activation, journaled without a run)
  int64_t cpu_us = 0;            // the worker's CPU for this activation, measured by the parent
  int64_t logs_dropped = 0;      // log lines dropped past the log or journal budget
  bool ok() const { return outcome == Outcome::kOk; }
  // {"kind": ..., "message": ..., ["name", "stack", "budget"]}
  nlohmann::json ErrorJson() const;
};

}  // namespace basal
