// The flows of the soak run (scripts/soak.sh, docs/soak.md): each is a script, its manifest, how
// its inputs are drawn, and how each of its activations must end. Ordinary work sits beside
// hostile flows that push every bound the parent keeps.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "basal/outcome.h"

namespace basal::soak {

using Rng = std::mt19937_64;

// How an activation of a flow may end: an outcome and, for budget_exhausted, the budget.
struct ExpectedEnd {
  Outcome outcome;
  std::optional<Budget> budget;
};

struct SoakFlow {
  std::string name;      // also the key of --mix
  std::string what;      // one line for the report
  std::string source;
  std::string manifest;
  unsigned weight = 0;   // share of the activations (--mix overrides)
  std::vector<ExpectedEnd> ends;  // besides worker_crashed after a SIGKILL of the soak's own
  std::function<nlohmann::json(uint64_t n, Rng& rng)> input;
  // An ending the flow's `ends` admits may still be wrong in its details (a wrong result, the
  // wrong error name): the reason, or nullopt when it is right.
  std::function<std::optional<std::string>(const nlohmann::json& input, const ActivationResult& r)> check;
};

// The host call the deadline flow waits on: answered by the soak `ms` after it was made, long
// after the flow's deadline.
inline constexpr const char* kLateCallName = "soak.late";

std::vector<SoakFlow> MakeFlows();

// What the ordinary flow computes, for checking its results.
int64_t OrdinarySum(int64_t n);

}  // namespace basal::soak
