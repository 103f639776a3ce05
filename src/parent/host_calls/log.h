// The `log` host call: how a flow's console.* reaches the parent. It needs no grant (a manifest
// may still list it, with {} only): a flow that can say nothing is no safer, only harder to debug.
//
//   auto r = basal::RegisterLogHostCall(registry, [](const basal::HostCallContext& ctx,
//                                                    std::string_view level, std::string_view message) {
//     std::cerr << ctx.flow << " [" << level << "] " << basal::EscapeForTerminal(message) << "\n";
//   });
#pragma once

#include <cstddef>
#include <functional>
#include <string_view>

#include "basal/host_call.h"
#include "basal/result.h"
#include "parent/host_calls/answer.h"

namespace basal {

using LogSink = std::function<void(const HostCallContext&, std::string_view level, std::string_view message)>;

// Longer messages reach the sink cut to this many bytes (at a UTF-8 boundary) plus a marker.
inline constexpr size_t kLogMessageLimitBytes = 64 * 1024;

// Registers `log {level, message}`: level is one of log|info|warn|error|debug, message a string.
// Fails if `sink` is empty or `log` is already registered.
Result<void> RegisterLogHostCall(HostCallRegistry& registry, LogSink sink);

// The decision behind the handler: a TypeError for bad arguments, else the sink is called and the
// answer is null.
HostCallAnswer ServeLog(const HostCallContext& context, const Json& args, const LogSink& sink);

}  // namespace basal
