// The parent's frames as the worker reads them: without a tree of the one large value a frame may
// carry. An `activate` frame's `input` and a `result` frame's `ok` are cut out as JSON text, checked
// (well-formed, within the field limits) and handed to the engine, which parses them once, into the
// JavaScript heap that the heap budget counts. A parsed tree of the same value (protocol::Json)
// would cost up to about twenty times its text, once more for each copy, outside any budget: a
// host call's result of 15 MiB could take the worker past its address-space limit.
//
//   protocol::ParentMessage msg;
//   std::string value_json, error;
//   if (!ParseParentFrame(std::move(payload), msg, value_json, error)) Die(error);
//   if (auto* a = std::get_if<protocol::Activate>(&msg)) Run(a->activation, value_json);
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "protocol/messages.h"

namespace basal::worker {

// Parses one frame from the parent (consuming `payload`) with protocol::ParseParentMessage's rules.
// For `activate`, and for a `result` that carries `ok`, `value_json` receives that field's JSON
// text and the message's own field (`input`, `value`) is left null; otherwise it is empty. False:
// `error` says what was wrong with the frame.
bool ParseParentFrame(std::string payload, protocol::ParentMessage& out, std::string& value_json,
                      std::string& error);

// The worker's check of a result before its engine parses it (protocol/messages.h, shared with the
// parent, which checks a host call's answer given as text the same way).
using protocol::IsJsonText;

// Where the value of the top-level member `key` lies in the JSON object `text`: [first, second).
// nullopt when the key is absent, repeated or may be written with escapes (any key with a
// backslash), or the text is not an object this scanner can walk to its closing brace; the full
// parser then has the last word.
std::optional<std::pair<size_t, size_t>> FindTopLevelValue(std::string_view text, std::string_view key);

}  // namespace basal::worker
