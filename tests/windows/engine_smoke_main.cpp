// windows-engine-smoke.exe: the Windows worker's engine WITHOUT its confinement, a test binary
// that is never installed and never launched by the launcher. It exists because the real worker
// refuses to run anywhere its confinement cannot be attested (Wine included), and CI still needs
// to know that QuickJS and the engine, built by mingw-w64 from the same sources, run flows on
// Windows: engine_smoke_test.py drives it under Wine with frames. Its welcome says what it is
// (test_hooks true, an empty confinement report), so any parent's Welcome rule refuses it.
#include <windows.h>

#include <string>

#include "protocol/messages.h"
#include "worker/windows/flow_runner.h"

int main() {
  const std::string welcome = "{\"type\":\"welcome\",\"protocol\":" + std::to_string(basal::protocol::kProtocolVersion) +
                              ",\"os\":\"windows\",\"engine\":\"" + basal::worker::windows::EngineName() +
                              "\",\"pid\":" + std::to_string(GetCurrentProcessId()) +
                              ",\"test_hooks\":true,\"confinement\":{}}";
  return basal::worker::windows::RunFlows(welcome);
}
