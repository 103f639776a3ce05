// ck-basal-worker.exe: the Windows worker. Started only by the Windows launcher
// (parent/platform/windows/windows_launcher.h), which fixed its confinement at creation; it
// finishes and attests that confinement (confinement/windows/confine.h), says welcome, then runs
// ONE flow's activations, like the Linux worker (src/worker/main.cpp), over the same protocol.
//
// Command line: none (the launcher passes no argument: limits live in the job, the parent's death
// ends the job).
//
// Exit codes (docs/protocol.md):
//   0   stdin closed: the parent retired the worker
//   64  an argument was given
//   65  the parent's stream broke the protocol
//   70  confinement failed (a named reason is on stderr); never a weaker sandbox
#include <windows.h>

#include <string>
#include <string_view>

#include "confinement/windows/confine.h"
#include "protocol/messages.h"
#include "worker/windows/flow_runner.h"

namespace {

constexpr unsigned kExitUsage = 64;

[[noreturn]] void Die(unsigned code, std::string_view why) {
  std::string line = "ck-basal-worker: ";
  line += why;
  line += '\n';
  DWORD written = 0;
  WriteFile(GetStdHandle(STD_ERROR_HANDLE), line.data(), static_cast<DWORD>(line.size()), &written, nullptr);
  TerminateProcess(GetCurrentProcess(), code);
  ExitProcess(code);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 1)
    Die(kExitUsage, std::string("unknown argument ") + argv[1] +
                        "; usage: ck-basal-worker.exe (it is started by basal's Windows launcher, which speaks frames on "
                        "stdin/stdout)");

  // Returns only when every step held; else exit 70 with the step and the reason on stderr.
  const basal::confinement::windows::ConfinementReport report = basal::confinement::windows::ConfineWorker();

  const std::string welcome = "{\"type\":\"welcome\",\"protocol\":" +
                              std::to_string(basal::protocol::kProtocolVersion) +
                              ",\"os\":\"windows\",\"engine\":\"" + basal::worker::windows::EngineName() +
                              "\",\"pid\":" + std::to_string(GetCurrentProcessId()) +
                              ",\"test_hooks\":false,\"confinement\":" + report.ToJson() + "}";
  return basal::worker::windows::RunFlows(welcome);
}
