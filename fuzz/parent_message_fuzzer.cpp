// Fuzz target: ParseParentMessage (src/protocol/messages.h), against the parent's builders
// (BuildLoad, BuildActivate, BuildResultOk, BuildResultError with AddPollMember, BuildPoll) and against the worker's own reader
// of the parent's frames, ParseParentFrame (src/worker/parent_frames.h), which cuts an activate's
// input and a result's value out as text instead of parsing them into a tree.
//
// Input: one frame's payload.
//
// Invariants, for every message the parser accepts:
// - ids and budgets are >= 1 and hold the values the message carried, and so do the clocks and
//   the seed of a durable run;
// - a value that arrived in a message fits in one (FitsInMessage), so the parent could send it;
// - rebuilt with the parent's builder, it parses again to the same message, and rebuilding that
//   gives the same bytes;
// - ParseParentFrame accepts exactly what ParseParentMessage accepts, with the same fields, and
//   the value text it cuts out is JSON of the same value;
// and for every input: the worker's JSON check (IsJsonText) agrees with nlohmann's accept().
// A refused message always says why.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>

#include "fuzz/fuzz_check.h"
#include "protocol/messages.h"
#include "worker/parent_frames.h"

namespace basal::protocol {
namespace {

std::string Rebuild(const ParentMessage& message) {
  return std::visit(
      [](const auto& m) -> std::string {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, Load>) {
          return BuildLoad(m);
        } else if constexpr (std::is_same_v<T, Activate>) {
          const std::string input = DumpJson(m.input);
          std::string why;
          FUZZ_CHECK(FitsInMessage(input, why), "an input that arrived in a message does not fit in one: " + why);
          return BuildActivate(m.activation, input, m.poll);
        } else if constexpr (std::is_same_v<T, Poll>) {
          return BuildPoll();
        } else {
          std::string out;
          if (!m.ok) {
            out = BuildResultError(m.activation, m.id, m.error_name, m.error_message, m.clock_us);
          } else {
            const std::string value = DumpJson(m.value);
            std::string why;
            FUZZ_CHECK(FitsInMessage(value, why), "a result that arrived in a message does not fit in one: " + why);
            out = BuildResultOk(m.activation, m.id, value, m.clock_us);
          }
          if (m.poll) AddPollMember(out);
          return out;
        }
      },
      message);
}

void CheckAgainstSent(const ParentMessage& message, const Json& sent) {
  std::visit(
      [&sent](const auto& m) {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, Load>) {
          FUZZ_CHECK(m.cpu_ms >= 1 && sent.at("cpu_ms") == Json(m.cpu_ms), "cpu_ms");
          FUZZ_CHECK(m.heap_bytes >= 1 && sent.at("heap_bytes") == Json(m.heap_bytes), "heap_bytes");
          FUZZ_CHECK(m.stack_bytes >= 1 && sent.at("stack_bytes") == Json(m.stack_bytes), "stack_bytes");
          FUZZ_CHECK(sent.at("source") == Json(m.source) && sent.at("flow") == Json(m.flow) &&
                         sent.at("profile") == Json(m.profile),
                     "flow, source or profile");
          FUZZ_CHECK(m.durable.has_value() == sent.contains("durable"), "durable");
          if (m.durable) {
            FUZZ_CHECK(m.durable->clock_us >= 0 && m.durable->clock_us <= kMaxMessageInteger &&
                           sent.at("durable").at("clock_us") == Json(m.durable->clock_us),
                       "durable clock_us");
            FUZZ_CHECK(sent.at("durable").at("seed") == Json(SeedHex(m.durable->seed)), "durable seed");
          }
        } else if constexpr (std::is_same_v<T, Activate>) {
          FUZZ_CHECK(m.activation >= 1 && sent.at("activation") == Json(m.activation), "activation");
          FUZZ_CHECK(m.input == sent.at("input"), "input");
          FUZZ_CHECK(m.poll == sent.value("poll", false), "activate poll");
        } else if constexpr (std::is_same_v<T, Poll>) {
          FUZZ_CHECK(sent.size() == 1, "a poll message with members");
        } else {
          FUZZ_CHECK(m.poll == sent.value("poll", false), "result poll");
          FUZZ_CHECK(m.activation >= 1 && sent.at("activation") == Json(m.activation), "result activation");
          FUZZ_CHECK(m.id >= 1 && sent.at("id") == Json(m.id), "result id");
          FUZZ_CHECK(m.clock_us.has_value() == sent.contains("clock_us") &&
                         (!m.clock_us || (*m.clock_us >= 0 && sent.at("clock_us") == Json(*m.clock_us))),
                     "result clock_us");
          if (m.ok) {
            FUZZ_CHECK(m.value == sent.at("ok"), "result value");
          } else {
            FUZZ_CHECK(sent.at("error").at("name") == Json(m.error_name), "error name");
            FUZZ_CHECK(sent.at("error").at("message") == Json(m.error_message), "error message");
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
  // The worker's JSON check (IsJsonText) against the shared parser's, the whole input taken as one
  // value. nlohmann takes a NUL for the end of its input and skips a leading byte-order mark, which
  // IsJsonText refuses (in a frame neither is JSON): such inputs are not compared.
  if (payload.find('\0') == std::string_view::npos && !(size > 0 && data[0] == 0xEF)) {
    const bool ours = basal::worker::IsJsonText(payload);
    FUZZ_CHECK(ours == Json::accept(payload.begin(), payload.end()),
               std::string("IsJsonText ") + (ours ? "accepts" : "refuses") + " what nlohmann does not: " +
                   std::string(payload.substr(0, 200)));
  }
  ParentMessage message;
  std::string error;
  const bool accepted = ParseParentMessage(payload, message, error);

  ParentMessage framed;
  std::string value_json;
  std::string frame_error;
  const bool frame_accepted = basal::worker::ParseParentFrame(std::string(payload), framed, value_json, frame_error);
  FUZZ_CHECK(accepted == frame_accepted, std::string("the worker's reader ") + (frame_accepted ? "accepts" : "refuses") +
                                             " what the shared parser " + (accepted ? "accepts" : "refuses") + ": " +
                                             (accepted ? frame_error : error));
  if (!accepted) {
    FUZZ_CHECK(!error.empty() && !frame_error.empty(), "a refusal without a reason");
    return 0;
  }
  if (!value_json.empty()) {
    Json value;
    std::string json_error;
    FUZZ_CHECK(ParseJsonValue(value_json, value, json_error), "the cut-out value is not JSON: " + json_error);
    if (auto* a = std::get_if<Activate>(&framed)) a->input = std::move(value);
    if (auto* r = std::get_if<CallResult>(&framed)) r->value = std::move(value);
  }
  FUZZ_CHECK(Rebuild(framed) == Rebuild(message), "the worker's reader reads another message");
  Json sent;
  std::string json_error;
  FUZZ_CHECK(ParseJsonObject(payload, sent, json_error), "accepted a payload that is not a JSON object");
  CheckAgainstSent(message, sent);

  const std::string rebuilt = Rebuild(message);
  ParentMessage again;
  FUZZ_CHECK(ParseParentMessage(rebuilt, again, error),
             "a rebuilt message was refused (" + error + "): " + rebuilt.substr(0, 300));
  FUZZ_CHECK(Rebuild(again) == rebuilt, "a rebuilt message parses differently: " + rebuilt.substr(0, 300));
  return 0;
}
