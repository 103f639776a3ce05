// Fuzz target: ParseWorkerMessage (src/protocol/messages.h), the parent's parser of every frame
// payload a worker sends. The worker's output is hostile.
//
// Input: one frame's payload.
//
// Invariants, for every message the parser accepts:
// - what it promises holds: ids and pids >= 1, a call name of 1 to 128 bytes, an error kind of
//   script_error (no budget) or budget_exhausted (budget cpu, memory or stack), a confinement
//   object;
// - every field holds the value the message carried, not a truncated or wrapped one;
// - written back as protocol JSON (docs/protocol.md), it parses again to the same message;
// - the fast path for a result's `done` (the worker's own spelling) agrees with the general one.
// A refused message always says why.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>

#include "fuzz/fuzz_check.h"
#include "protocol/messages.h"

namespace basal::protocol {
namespace {

Json ErrorJson(const ScriptError& e) {
  Json j = {{"kind", e.kind}, {"name", e.name}, {"message", e.message}};
  if (!e.stack.empty()) j["stack"] = e.stack;
  if (!e.budget.empty()) j["budget"] = e.budget;
  if (e.line != 0) j["line"] = e.line;
  return j;
}

Json ToJson(const WorkerMessage& message) {
  return std::visit(
      [](const auto& m) -> Json {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, Welcome>) {
          return {{"type", "welcome"}, {"protocol", m.protocol}, {"os", m.os},         {"engine", m.engine},
                  {"pid", m.pid},      {"test_hooks", m.test_hooks}, {"confinement", m.confinement}};
        } else if constexpr (std::is_same_v<T, Loaded>) {
          Json j = {{"type", "loaded"}, {"ok", m.ok}};
          if (!m.ok) j["error"] = ErrorJson(m.error);
          return j;
        } else if constexpr (std::is_same_v<T, Call>) {
          return {{"type", "call"}, {"activation", m.activation}, {"id", m.id}, {"name", m.name}, {"args", m.args}};
        } else {
          Json j = {{"type", "done"},
                    {"activation", m.activation},
                    {"cpu_us", m.cpu_us},
                    {"caught_budget_failure", m.caught_budget_failure}};
          if (m.ok) {
            j["ok"] = m.result;
          } else {
            j["error"] = ErrorJson(m.error);
          }
          return j;
        }
      },
      message);
}

// `in_loaded`: only a failed load may name a line, and only a script_error's.
void CheckScriptError(const ScriptError& e, bool in_loaded) {
  FUZZ_CHECK(e.line == 0 || (in_loaded && e.kind == "script_error" && e.line >= 1 && e.line <= 2147483647),
             "error line " + std::to_string(e.line));
  if (e.kind == "script_error") {
    FUZZ_CHECK(e.budget.empty(), "a script_error with budget " + e.budget);
  } else {
    FUZZ_CHECK(e.kind == "budget_exhausted", "error kind " + e.kind);
    FUZZ_CHECK(e.budget == "cpu" || e.budget == "memory" || e.budget == "stack", "budget " + e.budget);
  }
}

// The parsed fields against the message as sent.
void CheckAgainstSent(const WorkerMessage& message, const Json& sent) {
  std::visit(
      [&sent](const auto& m) {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, Welcome>) {
          FUZZ_CHECK(sent.at("protocol") == Json(m.protocol),
                     "protocol " + sent.at("protocol").dump() + " was read as " + std::to_string(m.protocol));
          FUZZ_CHECK(m.pid >= 1 && sent.at("pid") == Json(m.pid), "pid " + sent.at("pid").dump());
          FUZZ_CHECK(m.confinement.is_object() && m.confinement == sent.at("confinement"), "confinement");
          FUZZ_CHECK(m.raw == sent, "the welcome's raw copy is not what was sent");
        } else if constexpr (std::is_same_v<T, Loaded>) {
          if (!m.ok) {
            CheckScriptError(m.error, /*in_loaded=*/true);
            const Json& e = sent.at("error");
            FUZZ_CHECK(e.contains("line") ? e.at("line") == Json(m.error.line) : m.error.line == 0,
                       "line " + (e.contains("line") ? e.at("line").dump() : std::string("(none)")) + " was read as " +
                           std::to_string(m.error.line));
          }
        } else if constexpr (std::is_same_v<T, Call>) {
          FUZZ_CHECK(m.activation >= 1 && sent.at("activation") == Json(m.activation), "call activation");
          FUZZ_CHECK(m.id >= 1 && sent.at("id") == Json(m.id), "call id");
          FUZZ_CHECK(!m.name.empty() && m.name.size() <= 128, "call name of " + std::to_string(m.name.size()) + " bytes");
          FUZZ_CHECK(m.args == sent.at("args"), "call args");
        } else {
          FUZZ_CHECK(m.activation >= 1 && sent.at("activation") == Json(m.activation), "done activation");
          FUZZ_CHECK(m.cpu_us >= 0 && sent.at("cpu_us") == Json(m.cpu_us), "cpu_us " + sent.at("cpu_us").dump());
          if (m.ok) {
            FUZZ_CHECK(m.result == sent.at("ok"), "done result");
          } else {
            CheckScriptError(m.error, /*in_loaded=*/false);
          }
        }
      },
      message);
}

}  // namespace
}  // namespace basal::protocol

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace basal::protocol;
  const std::string_view payload(reinterpret_cast<const char*>(data), size);
  WorkerMessage message;
  std::string error;
  const bool accepted = ParseWorkerMessage(payload, message, error);
  // A result's `done` in the worker's own spelling has a path of its own: the same payload with a
  // space after its `{` takes the general one, and must be accepted or refused alike.
  if (!payload.empty() && payload.front() == '{') {
    const std::string general = "{ " + std::string(payload.substr(1));
    WorkerMessage other;
    std::string other_error;
    const bool other_accepted = ParseWorkerMessage(general, other, other_error);
    FUZZ_CHECK(accepted == other_accepted && error == other_error,
               "the worker's spelling and the general path disagree: " + error + " / " + other_error);
    if (accepted) FUZZ_CHECK(DumpJson(ToJson(message)) == DumpJson(ToJson(other)), "the two paths read different fields");
  }
  if (!accepted) {
    FUZZ_CHECK(!error.empty(), "a refusal without a reason");
    return 0;
  }
  Json sent;
  std::string json_error;
  FUZZ_CHECK(ParseJsonObject(payload, sent, json_error), "accepted a payload that is not a JSON object");
  CheckAgainstSent(message, sent);

  const std::string rewritten = DumpJson(ToJson(message));
  WorkerMessage again;
  FUZZ_CHECK(ParseWorkerMessage(rewritten, again, error), "a written-back message was refused (" + error + "): " +
                                                              rewritten.substr(0, 300));
  FUZZ_CHECK(DumpJson(ToJson(again)) == rewritten, "a written-back message parses differently: " +
                                                       rewritten.substr(0, 300));
  return 0;
}
