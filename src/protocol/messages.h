// The messages of protocol version 1 (docs/protocol.md). The parent parses every worker message
// with ParseWorkerMessage, which validates each field before the parent acts on it: the worker's
// output is hostile. The worker parses the parent's messages with ParseParentMessage.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>
#include <string_view>
#include <variant>

#include <nlohmann/json.hpp>

#include "protocol/frame.h"

namespace basal::protocol {

using Json = nlohmann::json;

inline constexpr int kProtocolVersion = 1;
// Deeper JSON is refused before parsing, so hostile nesting cannot exhaust the parser's stack.
inline constexpr int kMaxJsonDepth = 200;
// The largest value one message field carries: a frame's limit less room for the envelope.
inline constexpr size_t kMaxFieldBytes = kDefaultMaxFrameBytes - 4096;
// The most JSON values one message may hold, counted in its text before any tree is built: every
// object, array, string (member names included), number, true, false and null is one. A parsed
// tree costs up to about 80 bytes a value beside the text (nlohmann's: 16 for the value, the rest
// for an object's map or a member's node), so a frame of tiny values ("{},{},...": 14 MB of them
// once took 505 MiB) is refused before it is parsed; 512 Ki values bound the tree of the worst
// frame near 40 MiB. Fixed, like the frame's size: both sides must agree on it.
inline constexpr size_t kMaxMessageValues = 512u * 1024;
// The values one message field may hold: the message less room for its envelope (a call's or a
// done's own fields are about ten values).
inline constexpr size_t kMaxFieldValues = kMaxMessageValues - 64;
// Every integer field of a message is an exact JSON integer from 0 (or its own lower bound) to
// 2^53 - 1, the largest every JSON reader holds exactly. Anything else (a fraction, an exponent,
// a larger or a negative number) is refused, never wrapped or rounded.
inline constexpr int64_t kMaxMessageInteger = (int64_t{1} << 53) - 1;
// The newest Landlock ABI whose rights the worker knows (see confinement/linux/confine.h).
inline constexpr int kWorkerLandlockAbiMax = 7;

// Parses `payload` as one JSON object. Never throws. On failure `error` says what was wrong.
// Nesting past kMaxJsonDepth and more than kMaxMessageValues values are refused by a scan of the
// text, before a tree is built.
bool ParseJsonObject(std::string_view payload, Json& out, std::string& error);
// Parses any JSON value (used for --input and fixtures), with ParseJsonObject's bounds (or
// `max_values`). Never throws.
bool ParseJsonValue(std::string_view text, Json& out, std::string& error, size_t max_values = kMaxMessageValues);
// The JSON values in `text` as ParseJsonValue counts them (see kMaxMessageValues), counting stops
// once past `stop_after`. A cheap scan: the text need not be well-formed, nothing is built.
size_t CountJsonValues(std::string_view text, size_t stop_after = SIZE_MAX);
// Serializes without throwing: invalid UTF-8 is replaced, never an exception.
std::string DumpJson(const Json& value);
// `s` as a JSON string appended to `out`, byte for byte as DumpJson writes that string: printable
// ASCII without a quote or a backslash (ids, names, times, URLs) as it is, anything else through
// DumpJson (its escapes, invalid UTF-8 replaced). For writers of JSON text that must match a dump.
void AppendJsonString(std::string& out, std::string_view s);
// A JSON text that is one literal (null, true, false) or a plain integer (an optional minus, 1 to
// 15 digits, no leading zero: always inside kMaxMessageInteger), read into `out` as Json::parse
// reads it (a number without a minus as unsigned) without the parser; false for any other text,
// which then takes the parser. What most activations send and return (a count, a flag, nothing).
bool ParsePlainScalar(std::string_view text, Json& out);
// Whether `text` is one JSON value, with only whitespace around it, as the shared parser
// (ParseJsonValue, nlohmann's) reads JSON: strict RFC 8259 grammar, strings of valid UTF-8 with
// paired surrogate escapes, no number that overflows a double. Unlike nlohmann's accept(), a
// leading byte-order mark is refused (inside a frame it is not JSON); a NUL byte ends nothing here
// (a frame's reader refuses one first). Checked in one pass without building a value (nesting is
// kept on a stack of its own, never the call stack): the worker's check of a result before its
// engine parses it, and the parent's of a host call's answer given as text
// (HostCallReply::OkText). The fuzzer fuzz/parent_message_fuzzer.cpp compares it with nlohmann's.
bool IsJsonText(std::string_view text);
// Whether a serialized value can travel as one field of a message (an activation's input, a host
// call's result): nested at most kMaxJsonDepth - 1 levels, since the message adds one, small
// enough for the message to fit in one frame, and of at most kMaxFieldValues values. On false,
// `why` names the limit it broke.
bool FitsInMessage(std::string_view value_json, std::string& why);

// `value` as an integer in [min, max], or nullopt if it is no JSON integer or lies outside (an
// unsigned above int64's range included). For fields the parser leaves to others (the welcome's
// confinement report).
std::optional<int64_t> IntegerIn(const Json& value, int64_t min, int64_t max);

// ---- worker -> parent ----
struct Welcome {
  int64_t protocol = 0;  // any value the parser admits; the welcome check wants kProtocolVersion
  std::string os;
  std::string engine;
  int64_t pid = 0;
  bool test_hooks = false;
  Json confinement;  // checked by the parent's welcome check, not here
  Json raw;          // the whole welcome as sent (`basal doctor` shows it)
};
struct ScriptError {
  std::string kind;     // "script_error" or "budget_exhausted"
  std::string budget;   // for budget_exhausted: "cpu", "memory" or "stack"
  std::string name;     // the JS error's name, e.g. "TypeError"
  std::string message;
  std::string stack;
  // Only in a failed `loaded`: the line of the flow's source where compiling stopped (a syntax
  // error), from 1; 0 when the error carries none (it did not come from the compiler).
  int64_t line = 0;
};
struct Loaded {
  bool ok = false;
  ScriptError error;  // when !ok: the module failed to compile or evaluate
};
struct Call {
  int64_t activation = 0;
  int64_t id = 0;
  std::string name;
  Json args;
  size_t frame_bytes = 0;  // the payload's size: what the call's arguments weigh in the parent
};
struct Done {
  int64_t activation = 0;
  bool ok = false;
  Json result;        // when ok
  ScriptError error;  // when !ok
  int64_t cpu_us = 0;
  // The script caught a memory or stack failure and went on (the worker may be reused).
  bool caught_budget_failure = false;
};
using WorkerMessage = std::variant<Welcome, Loaded, Call, Done>;

bool ParseWorkerMessage(std::string_view payload, WorkerMessage& out, std::string& error);

// ---- parent -> worker ----
// One function of the `tools` object a codemode script gets: tools[group][member](args) is
// host.call(name, args). ("kv", "get", "kv.get"); ("fs", "read_text_file", "mcp.fs.read_text_file").
struct ToolBinding {
  std::string group;
  std::string member;
  std::string name;
};
inline constexpr size_t kMaxToolBindings = 4096;
// "kv.get" -> (kv, get); "mcp.fs.read_text_file" -> (fs, read_text_file): a downstream server's
// tools are grouped by server; a name without a '.' is its own group's member "call".
ToolBinding BindingFor(const std::string& name);

// A durable run's start, carried by `load` (docs/protocol.md, docs/runtime.md "Durable runs"):
// the worker that gets it reads every clock from the run's clock and draws every random value from
// generators keyed by the seed, so each execution of the run sees the same values.
inline constexpr size_t kDurableSeedBytes = 32;
struct DurableStart {
  int64_t clock_us = 0;  // the run's start: microseconds since the Unix epoch, 0 to kMaxMessageInteger
  std::array<uint8_t, kDurableSeedBytes> seed{};  // drawn by the parent for the run and journaled
};

struct Load {
  std::string flow;
  std::string source;
  std::string profile;  // "flow" or "codemode"
  int64_t cpu_ms = 0;
  int64_t heap_bytes = 0;
  int64_t stack_bytes = 0;
  // Optional ("tools" absent when empty): the third argument of the default export.
  std::vector<ToolBinding> tools;
  // Optional ("durable" absent when not): the worker runs in durable mode for its life.
  std::optional<DurableStart> durable;
};
// `poll` (activate, result; optional, absent means false): the worker may poll stdin for its next
// frame before it blocks (src/worker/wait_spin.h). The parent says so whenever its busy_poll is
// on, never to a codemode script's worker (Module::Impl::WorkerMayPoll); the worker yields between
// two looks, so it takes only a CPU nothing else wants. A worker told nothing blocks at once.
struct Activate {
  int64_t activation = 0;
  Json input;
  bool poll = false;
};
struct CallResult {
  int64_t activation = 0;
  int64_t id = 0;
  bool ok = false;
  Json value;       // when ok
  std::string error_name;     // when !ok, e.g. "PermissionDenied"
  std::string error_message;
  // The time of the answer as journaled, in microseconds since the Unix epoch: sent on every
  // result to a durable worker and on none to another (the worker checks which it is).
  std::optional<int64_t> clock_us;
  bool poll = false;  // as Activate's
};
// An idle worker's next frame is coming soon (an `activate`: basal serve sends this as it accepts
// a run of the worker's flow): the worker polls for it before it blocks (src/worker/wait_spin.h), so
// its wake-up overlaps the parent's work on the run instead of following it. Never sent to a busy
// worker. {"type":"poll"}, nothing else.
struct Poll {};
using ParentMessage = std::variant<Load, Activate, CallResult, Poll>;

bool ParseParentMessage(std::string_view payload, ParentMessage& out, std::string& error);

// Builders: each returns the payload (JSON text) of one message. A clock (load's durable
// `clock_us`, a result's `clock_us`) outside 0 to kMaxMessageInteger is sent as the nearer bound,
// so the frame is always one the worker accepts: a host clock before 1970 is no time to replay.
std::string BuildLoad(const Load& m);
// `input_json` and `value_json` are serialized JSON (DumpJson) that passed FitsInMessage.
std::string BuildActivate(int64_t activation, std::string_view input_json, bool poll = false);
std::string BuildPoll();
// The same message framed (frame.h) and appended to `out`, with no string of its own on the way:
// the parent writes one per activation straight into the worker's output buffer.
void AppendActivateFrame(std::string& out, int64_t activation, std::string_view input_json, bool poll = false);
// `clock_us`: for a durable worker only (docs/protocol.md); absent for any other.
std::string BuildResultOk(int64_t activation, int64_t id, std::string_view value_json,
                          std::optional<int64_t> clock_us = std::nullopt);
std::string BuildResultError(int64_t activation, int64_t id, std::string_view name, std::string_view message,
                             std::optional<int64_t> clock_us = std::nullopt);
// Adds `"poll":true` as the last member of a result built above (a JSON object with members): the
// parent decides it as it writes the frame, after the batch's commit, not when the answer is built.
void AddPollMember(std::string& result_message);

// The seed as load's "durable" carries it: 64 lowercase hex digits.
std::string SeedHex(const std::array<uint8_t, kDurableSeedBytes>& seed);

}  // namespace basal::protocol
