#include "parent/activation.h"

#include <chrono>
#include <utility>

#include "parent/journal_value.h"

namespace basal {

int64_t NowUnixUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

ActivationResult Failure(Outcome outcome, std::string message) {
  ActivationResult r;
  r.outcome = outcome;
  r.message = std::move(message);
  return r;
}

ActivationResult ResultFromDone(protocol::Done&& done, bool& retire) {
  ActivationResult r;
  r.cpu_us = done.cpu_us;
  retire = false;
  if (done.ok) {
    r.outcome = Outcome::kOk;
    r.result = std::move(done.result);
  } else if (done.error.kind == "budget_exhausted") {
    r.outcome = Outcome::kBudgetExhausted;
    r.budget = ParseBudget(done.error.budget);  // the parser admits only known names
    r.error_name = done.error.name;
    r.message = done.error.budget + " budget exhausted: " + done.error.message;
    retire = true;
  } else {
    r.outcome = Outcome::kScriptError;
    r.error_name = done.error.name;
    r.stack = std::move(done.error.stack);
    r.message = done.error.name + ": " + done.error.message;
  }
  return r;
}

ActivationResult ResultFromFailedLoad(const Flow& flow, const protocol::ScriptError& error) {
  ActivationResult r;
  r.outcome = error.kind == "budget_exhausted" ? Outcome::kBudgetExhausted : Outcome::kScriptError;
  r.budget = ParseBudget(error.budget);
  r.error_name = error.name;
  r.stack = error.stack;
  // A syntax error leads with its place, as a compiler writes it: `hello.js:3: SyntaxError: ...`.
  const std::string where = error.line > 0 ? flow.name + ":" + std::to_string(error.line) + ": " : "";
  r.message = "flow " + flow.name + " failed to load: " + where + error.name + ": " + error.message;
  return r;
}

ActivationEnd EndRecord(ActivationId id, const ActivationResult& r, int64_t end_unix_us, size_t value_max_bytes) {
  ActivationEnd end;
  end.activation_id = id;
  end.end_unix_us = end_unix_us;
  end.outcome = r.outcome;
  end.cpu_us = r.cpu_us;
  end.logs_dropped = r.logs_dropped;
  if (r.ok()) {
    end.result_json = CapForJournal(protocol::DumpJson(r.result), value_max_bytes);
  } else {
    end.error_json = CapForJournal(protocol::DumpJson(r.ErrorJson()), value_max_bytes);
  }
  return end;
}

}  // namespace basal
