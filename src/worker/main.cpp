// ck-basal-worker: confines itself, says welcome, then runs ONE flow's activations.
//
// Command line: `ck-basal-worker --parent-pid <pid>`, the pid of the basal that starts it (the
// only argument a release worker takes; a test-hooks worker also takes its --test-* switches).
//
// Exit codes (docs/protocol.md):
//   0   stdin closed: the parent retired the worker
//   64  bad command line (--parent-pid missing, repeated or not a pid > 1; any other argument)
//   65  the parent's stream broke the protocol
//   69  the parent that started the worker died before its death signal was set
//   70  confinement failed (a named reason is on stderr); never a weaker sandbox
#include <unistd.h>

#include <climits>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "confinement/linux/confine.h"
#include "confinement/linux/seccomp_program.h"
#include "protocol/messages.h"
#include "worker/channel.h"
#include "worker/engine.h"
#include "worker/parent_frames.h"

namespace {

constexpr int kExitOk = 0;
constexpr int kExitUsage = 64;
constexpr int kExitProtocol = 65;

[[noreturn]] void Die(int code, std::string_view why) {
  std::string line = "ck-basal-worker: ";
  line += why;
  line += '\n';
  basal::worker::WriteStderr(line);
  _exit(code);
}

static_assert(basal::confinement::kExitParentGone != kExitUsage && basal::confinement::kExitParentGone != kExitProtocol);

constexpr std::string_view kUsage =
    "usage: ck-basal-worker --parent-pid PID (it is started by basal, which speaks frames on stdin/stdout)";

// A pid as basal writes it: decimal digits only (no sign, no space), no overflow, above 1 (0 is
// no process and 1 is init, which is never basal's parent-to-be).
std::optional<pid_t> ParsePid(std::string_view text) {
  if (text.empty()) return std::nullopt;
  long long value = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
    if (value > INT_MAX) return std::nullopt;  // pid_t is int
  }
  if (value <= 1) return std::nullopt;
  return static_cast<pid_t>(value);
}

}  // namespace

int main(int argc, char** argv) {
  basal::confinement::ConfineOptions options;
  options.seccomp_program = basal::confinement::WorkerSeccompProgram();
  bool test_hooks = false;
#ifdef BASAL_TEST_HOOKS
  test_hooks = true;
#endif
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--parent-pid") {
      if (options.parent_pid != 0) Die(kExitUsage, "--parent-pid given twice; " + std::string(kUsage));
      if (i + 1 >= argc) Die(kExitUsage, "--parent-pid needs a value; " + std::string(kUsage));
      const std::optional<pid_t> pid = ParsePid(argv[++i]);
      if (!pid) Die(kExitUsage, "--parent-pid " + std::string(argv[i]) + " is not a pid above 1; " + std::string(kUsage));
      options.parent_pid = *pid;
#ifdef BASAL_TEST_HOOKS
    } else if (a == "--test-weaken-startup-checks") {
      options.weaken_startup_checks = true;
    } else if (a == "--test-skip-landlock") {
      options.skip_landlock = true;
    } else if (a == "--test-skip-seccomp") {
      options.skip_seccomp = true;
    } else {
      Die(kExitUsage, "unknown argument " + std::string(a) + "; " + std::string(kUsage) + " and test switches");
#else
    } else {
      Die(kExitUsage, "unknown argument " + std::string(a) + "; " + std::string(kUsage));
#endif
    }
  }
  if (options.parent_pid == 0) Die(kExitUsage, "--parent-pid is missing; " + std::string(kUsage));

  // Sets the parent death signal first, then checks getppid() against --parent-pid (exit 69).
  const basal::confinement::ConfinementReport report = basal::confinement::ConfineWorker(options);

  basal::worker::Channel channel;
  std::string welcome = "{\"type\":\"welcome\",\"protocol\":" + std::to_string(basal::protocol::kProtocolVersion) +
                        ",\"os\":\"linux\",\"engine\":\"quickjs 2021-03-27\",\"pid\":" + std::to_string(getpid()) +
                        ",\"test_hooks\":" + (test_hooks ? "true" : "false") + ",\"confinement\":" + report.ToJson() +
                        "}";
  channel.Send(welcome);
  if (!channel.Flush()) _exit(kExitOk);

  basal::worker::Engine engine(channel);
  bool loaded = false;
  bool load_failed = false;
  for (;;) {
    std::string payload;
    switch (channel.Read(payload)) {
      case basal::worker::Channel::ReadStatus::kEof:
        _exit(kExitOk);
      case basal::worker::Channel::ReadStatus::kError:
        Die(kExitProtocol, "bad stream from parent: " + channel.error());
      case basal::worker::Channel::ReadStatus::kFrame:
        break;
    }
    basal::protocol::ParentMessage msg;
    std::string error;
    std::string input_json;  // an activation's input, as text: the engine parses it into its budgeted heap
    if (!basal::worker::ParseParentFrame(std::move(payload), msg, input_json, error))
      Die(kExitProtocol, "bad frame from parent: " + error);
    if (auto* load = std::get_if<basal::protocol::Load>(&msg)) {
      if (loaded) Die(kExitProtocol, "a worker is bound to one flow for life: second load refused");
      loaded = true;
      basal::protocol::ScriptError script_error;
      if (engine.Load(*load, script_error)) {
        channel.Send("{\"type\":\"loaded\",\"ok\":true}");
      } else {
        basal::protocol::Json e = {{"kind", script_error.kind}, {"name", script_error.name}, {"message", script_error.message}};
        if (!script_error.stack.empty()) e["stack"] = script_error.stack;
        if (!script_error.budget.empty()) e["budget"] = script_error.budget;
        channel.Send(basal::protocol::DumpJson({{"type", "loaded"}, {"ok", false}, {"error", e}}));
        if (!channel.Flush()) _exit(kExitOk);
        // The parent retires a worker whose flow did not load: anything but EOF now is a fault.
        load_failed = true;
        continue;
      }
      if (!channel.Flush()) _exit(kExitOk);
    } else if (auto* activate = std::get_if<basal::protocol::Activate>(&msg)) {
      if (!loaded || load_failed) Die(kExitProtocol, "activate before a successful load");
      switch (engine.Activate(activate->activation, std::move(input_json))) {
        case basal::worker::Engine::Status::kOk:
          break;
        case basal::worker::Engine::Status::kChannelClosed:
          _exit(kExitOk);
        case basal::worker::Engine::Status::kChannelError:
          Die(kExitProtocol, engine.channel_error());
      }
    } else {
      // A late answer for an activation that already ended (e.g. after a CPU budget kill).
      continue;
    }
  }
}
