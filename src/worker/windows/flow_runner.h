// The Windows worker after its startup: says welcome, then runs ONE flow's activations in QuickJS,
// reading frames on stdin and writing them on stdout exactly as the Linux worker does
// (src/worker/main.cpp), with the same engine (src/worker/engine.cpp) built for Windows.
#pragma once

#include <string>

namespace basal::worker::windows {

// "quickjs 2021-03-27", as the welcome's engine field says it.
const char* EngineName();

// Sends `welcome` (a complete JSON message) as the first frame, then serves the parent: load,
// activate, results. Returns the exit code (0 when the parent closes stdin); a protocol error
// ends the process with 65.
int RunFlows(const std::string& welcome);

}  // namespace basal::worker::windows
