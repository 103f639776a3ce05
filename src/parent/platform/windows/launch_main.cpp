// ck-basal-launch.exe: starts one Windows worker the way the Windows parent does (the platform
// seam's Windows side: windows_launcher.h), applies the Windows Welcome rule to its first frame,
// and, if the worker is accepted, relays its stdin and stdout to its own, so that a parent on the
// other end of this program's pipes speaks to the worker. Until the parent itself runs on Windows
// (docs/sandbox.md) this is how a Windows worker is started: by the probe suite on Windows, and
// under Wine by the refusal test (tests/windows/), which shows that what Wine cannot confine never
// runs.
//
//   ck-basal-launch --worker PATH [--profile flow|codemode] [--heap-bytes N] [--cpu-seconds N]
//
// Exit status: the worker's own when it ran and ended; 70 when the launch or the Welcome was
// refused (the reason on stderr, starting "ck-basal-launch: "); 64 for a bad command line.
#include <windows.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <string_view>
#include <thread>

#include "parent/platform/platform.h"
#include "parent/platform/windows/windows_launcher.h"
#include "parent/welcome_check.h"
#include "protocol/frame.h"
#include "protocol/messages.h"

namespace {

using basal::WorkerProcess;

constexpr int kExitUsage = 64;
constexpr auto kWelcomeTimeout = std::chrono::seconds(5);

void Write(HANDLE h, std::string_view data) {
  DWORD n = 0;
  while (!data.empty() && WriteFile(h, data.data(), static_cast<DWORD>(data.size()), &n, nullptr) && n > 0)
    data.remove_prefix(n);
}

[[noreturn]] void Fail(int code, const std::string& why) {
  Write(GetStdHandle(STD_ERROR_HANDLE), "ck-basal-launch: " + why + "\n");
  std::exit(code);
}

// Copies everything from `from` to `to` until `from` ends; then closes `close_after`, if any.
void Pump(HANDLE from, HANDLE to, WorkerProcess* close_stdin_of) {
  char buf[64 * 1024];
  DWORD n = 0;
  while (ReadFile(from, buf, sizeof buf, &n, nullptr) && n > 0) Write(to, std::string_view(buf, n));
  if (close_stdin_of) close_stdin_of->CloseStdin();
}

std::string Drain(HANDLE h) {
  std::string all;
  char buf[4096];
  DWORD avail = 0, n = 0;
  while (PeekNamedPipe(h, nullptr, 0, nullptr, &avail, nullptr) && avail > 0 && all.size() < 64 * 1024 &&
         ReadFile(h, buf, sizeof buf, &n, nullptr) && n > 0)
    all.append(buf, n);
  return all;
}

bool ParseCount(const char* text, uint64_t& out) {
  char* end = nullptr;
  out = std::strtoull(text, &end, 10);
  return end && *end == '\0' && end != text;
}

}  // namespace

int main(int argc, char** argv) {
  basal::LaunchOptions options;
  options.heap_budget_bytes = uint64_t{64} << 20;
  options.limits.cpu_hard_seconds = 600;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (i + 1 >= argc) Fail(kExitUsage, std::string(a) + " needs a value");
    const char* v = argv[++i];
    if (a == "--worker") {
      options.path = v;
    } else if (a == "--profile") {
      if (std::string_view(v) == "flow") options.profile = basal::WorkerProfile::kFlow;
      else if (std::string_view(v) == "codemode") options.profile = basal::WorkerProfile::kCodemode;
      else Fail(kExitUsage, std::string("--profile ") + v + ": flow or codemode");
    } else if (a == "--heap-bytes") {
      if (!ParseCount(v, options.heap_budget_bytes)) Fail(kExitUsage, std::string("--heap-bytes ") + v + ": a count of bytes");
    } else if (a == "--cpu-seconds") {
      if (!ParseCount(v, options.limits.cpu_hard_seconds)) Fail(kExitUsage, std::string("--cpu-seconds ") + v + ": seconds");
    } else {
      Fail(kExitUsage, "unknown argument " + std::string(a) +
                           "; usage: ck-basal-launch --worker PATH [--profile flow|codemode] [--heap-bytes N] [--cpu-seconds N]");
    }
  }
  if (options.path.empty()) Fail(kExitUsage, "--worker PATH is required");

  auto launcher = basal::WorkerLauncher::ForThisPlatform();
  auto launched = launcher->Launch(options);
  if (!launched) Fail(basal::kExitConfinementRefused, launched.error().message);
  WorkerProcess& worker = **launched;
  const HANDLE out = static_cast<HANDLE>(worker.stdout_handle());
  const HANDLE err = static_cast<HANDLE>(worker.stderr_handle());

  // The first frame, within the welcome time limit, or the worker's end.
  basal::protocol::FrameDecoder decoder;
  std::string payload;
  std::string raw;  // every byte read, forwarded as is once the welcome is accepted
  const auto deadline = std::chrono::steady_clock::now() + kWelcomeTimeout;
  for (;;) {
    const auto status = decoder.Next(payload);
    if (status == basal::protocol::FrameDecoder::Status::kFrame) break;
    if (status == basal::protocol::FrameDecoder::Status::kError) {
      worker.KillAndReap();
      Fail(basal::kExitConfinementRefused, "worker refused: its first frame is invalid: " + decoder.error());
    }
    DWORD avail = 0;
    if (PeekNamedPipe(out, nullptr, 0, nullptr, &avail, nullptr) && avail > 0) {
      char buf[4096];
      DWORD n = 0;
      if (ReadFile(out, buf, sizeof buf, &n, nullptr) && n > 0) {
        decoder.Feed(buf, n);
        raw.append(buf, n);
      }
      continue;
    }
    if (auto ended = worker.TryReap()) {
      // It ended before its welcome: a refusal (70) names its reason on stderr.
      Write(GetStdHandle(STD_ERROR_HANDLE), Drain(err));
      const basal::DeathVerdict v = launcher->ClassifyDeath(*ended, /*welcomed=*/false);
      Write(GetStdHandle(STD_ERROR_HANDLE), "ck-basal-launch: worker " + v.description + " before its welcome\n");
      return ended->code;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      worker.KillAndReap();
      Fail(basal::kExitConfinementRefused, "worker refused: no welcome within 5000 ms" + Drain(err));
    }
    Sleep(5);
  }
  basal::protocol::WorkerMessage message;
  std::string error;
  if (!basal::protocol::ParseWorkerMessage(payload, message, error)) {
    worker.KillAndReap();
    Fail(basal::kExitConfinementRefused, "worker refused: its first frame is not a valid message: " + error);
  }
  const auto* welcome = std::get_if<basal::protocol::Welcome>(&message);
  if (!welcome) {
    worker.KillAndReap();
    Fail(basal::kExitConfinementRefused, "worker refused: its first frame is not a welcome");
  }
  basal::WelcomePolicy policy;
  policy.parent_os = basal::WorkerOs::kWindows;
  policy.accept_test_hooks = false;
  const basal::WelcomeVerdict verdict = basal::CheckWelcome(*welcome, worker.pid(), policy);
  if (!verdict.accepted) {
    worker.KillAndReap();
    Fail(basal::kExitConfinementRefused, "worker refused before it saw flow code: " + verdict.reason);
  }

  // Accepted: the parent beyond our pipes gets the welcome and everything after it.
  const HANDLE own_out = GetStdHandle(STD_OUTPUT_HANDLE);
  Write(own_out, raw);
  std::thread in_pump(Pump, GetStdHandle(STD_INPUT_HANDLE), static_cast<HANDLE>(worker.stdin_handle()), &worker);
  std::thread err_pump(Pump, err, GetStdHandle(STD_ERROR_HANDLE), nullptr);
  Pump(out, own_out, nullptr);
  const basal::WorkerDeath death = *worker.WaitFor(std::chrono::milliseconds(INFINITE));
  err_pump.join();
  in_pump.detach();  // blocked reading our stdin, which our exit closes
  return death.code;
}
