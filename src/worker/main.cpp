// ck-basal-worker: confines itself, says welcome, then runs ONE flow's activations.
//
// Command line: `ck-basal-worker --parent-pid <pid> [--address-space-limit <bytes>] [--cpu-limit
// <soft>:<hard>] [--uid <uid> --gid <gid>] [--started-ahead]`: the pid of the basal that starts
// it, the RLIMIT_AS and RLIMIT_CPU (seconds) it sets on itself first, when that basal runs as
// root, the unprivileged user and group it becomes next, and whether it was started ahead of its
// script (a codemode spare: it makes its engine right after the welcome, while it waits) (the only
// arguments a release worker takes; a test-hooks worker also takes its --test-* switches).
//
// Exit codes (docs/protocol.md):
//   0   stdin closed: the parent retired the worker
//   64  bad command line (--parent-pid missing, repeated or not a pid > 1; --uid or --gid
//       without the other, repeated, 0 or not an id; --address-space-limit repeated or not a
//       count of bytes from 1 MiB to 2^62; --cpu-limit repeated or not SOFT:HARD seconds with
//       1 <= SOFT <= HARD <= 2^62; --started-ahead repeated; any other argument)
//   65  the parent's stream broke the protocol (a durable worker's rules included: one
//       activation, clock_us on every result and only then)
//   69  the parent that started the worker died before its death signal was set
//   70  confinement failed (a named reason is on stderr); never a weaker sandbox
#include <unistd.h>

#include <climits>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "confinement/linux/confine.h"
#include "confinement/linux/seccomp_program.h"
#include "protocol/messages.h"
#include "worker/channel.h"
#include "worker/durable.h"
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
    "usage: ck-basal-worker --parent-pid PID [--address-space-limit BYTES] [--cpu-limit SOFT:HARD] [--uid UID --gid "
    "GID] [--started-ahead] (it is started by basal, which speaks frames on stdin/stdout)";

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

// A user or group id as basal writes it: decimal digits only, above 0 (a worker never runs as
// root) and below 4294967295, which is (uid_t)-1, "no change" to setresuid.
std::optional<uint32_t> ParseId(std::string_view text) {
  if (text.empty()) return std::nullopt;
  uint64_t value = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + static_cast<uint64_t>(c - '0');
    if (value >= UINT32_MAX) return std::nullopt;
  }
  if (value == 0) return std::nullopt;
  return static_cast<uint32_t>(value);
}

// A byte count as basal writes it: decimal digits only, from 1 MiB (nothing runs in less) to 2^62.
std::optional<uint64_t> ParseBytes(std::string_view text) {
  if (text.empty()) return std::nullopt;
  uint64_t value = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + static_cast<uint64_t>(c - '0');
    if (value > (uint64_t{1} << 62)) return std::nullopt;
  }
  if (value < (uint64_t{1} << 20)) return std::nullopt;
  return value;
}

// Seconds of CPU as basal writes them: "SOFT:HARD", decimal digits, 1 <= SOFT <= HARD <= 2^62.
bool ParseCpuLimit(std::string_view text, uint64_t& soft, uint64_t& hard) {
  const size_t colon = text.find(':');
  if (colon == std::string_view::npos) return false;
  auto seconds = [](std::string_view s, uint64_t& out) {
    if (s.empty()) return false;
    out = 0;
    for (const char c : s) {
      if (c < '0' || c > '9') return false;
      out = out * 10 + static_cast<uint64_t>(c - '0');
      if (out > (uint64_t{1} << 62)) return false;
    }
    return out >= 1;
  };
  return seconds(text.substr(0, colon), soft) && seconds(text.substr(colon + 1), hard) && soft <= hard;
}

}  // namespace

int main(int argc, char** argv) {
  basal::confinement::ConfineOptions options;
  options.seccomp_program = basal::confinement::WorkerSeccompProgram();
  bool test_hooks = false;
#ifdef BASAL_TEST_HOOKS
  test_hooks = true;
#endif
  std::optional<uint32_t> uid, gid;
  bool started_ahead = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--parent-pid") {
      if (options.parent_pid != 0) Die(kExitUsage, "--parent-pid given twice; " + std::string(kUsage));
      if (i + 1 >= argc) Die(kExitUsage, "--parent-pid needs a value; " + std::string(kUsage));
      const std::optional<pid_t> pid = ParsePid(argv[++i]);
      if (!pid) Die(kExitUsage, "--parent-pid " + std::string(argv[i]) + " is not a pid above 1; " + std::string(kUsage));
      options.parent_pid = *pid;
    } else if (a == "--address-space-limit") {
      if (options.address_space_limit_bytes != 0) Die(kExitUsage, "--address-space-limit given twice; " + std::string(kUsage));
      if (i + 1 >= argc) Die(kExitUsage, "--address-space-limit needs a value; " + std::string(kUsage));
      const std::optional<uint64_t> bytes = ParseBytes(argv[++i]);
      if (!bytes)
        Die(kExitUsage, "--address-space-limit " + std::string(argv[i]) + " is not a byte count from 1048576 to 2^62; " +
                            std::string(kUsage));
      options.address_space_limit_bytes = *bytes;
    } else if (a == "--cpu-limit") {
      if (options.cpu_limit_hard_seconds != 0) Die(kExitUsage, "--cpu-limit given twice; " + std::string(kUsage));
      if (i + 1 >= argc) Die(kExitUsage, "--cpu-limit needs a value; " + std::string(kUsage));
      if (!ParseCpuLimit(argv[++i], options.cpu_limit_soft_seconds, options.cpu_limit_hard_seconds))
        Die(kExitUsage, "--cpu-limit " + std::string(argv[i]) + " is not SOFT:HARD seconds (1 <= SOFT <= HARD <= 2^62); " +
                            std::string(kUsage));
    } else if (a == "--started-ahead") {
      if (started_ahead) Die(kExitUsage, "--started-ahead given twice; " + std::string(kUsage));
      started_ahead = true;
    } else if (a == "--uid" || a == "--gid") {
      std::optional<uint32_t>& slot = a == "--uid" ? uid : gid;
      if (slot) Die(kExitUsage, std::string(a) + " given twice; " + std::string(kUsage));
      if (i + 1 >= argc) Die(kExitUsage, std::string(a) + " needs a value; " + std::string(kUsage));
      slot = ParseId(argv[++i]);
      if (!slot)
        Die(kExitUsage, std::string(a) + " " + argv[i] + " is not an id from 1 to 4294967294 (a worker never runs as " +
                            "root); " + std::string(kUsage));
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
  if (uid.has_value() != gid.has_value()) Die(kExitUsage, "--uid and --gid go together; " + std::string(kUsage));
  if (uid) options.run_as = basal::confinement::WorkerIdentity{*uid, *gid};

  // Sets its address-space and CPU limits and drops privileges first, then sets the parent death
  // signal and checks getppid() against --parent-pid (exit 69).
  const basal::confinement::ConfinementReport report = basal::confinement::ConfineWorker(options);

  basal::worker::Channel channel;
  std::string welcome = "{\"type\":\"welcome\",\"protocol\":" + std::to_string(basal::protocol::kProtocolVersion) +
                        ",\"os\":\"linux\",\"engine\":\"quickjs 2021-03-27\",\"pid\":" + std::to_string(getpid()) +
                        ",\"test_hooks\":" + (test_hooks ? "true" : "false") + ",\"confinement\":" + report.ToJson() +
                        "}";
  channel.Send(welcome);
  if (!channel.Flush()) _exit(kExitOk);

  // A worker started on demand makes its engine at `load` (Engine::Load prepares it): its parent
  // sends the load as soon as it has checked the welcome, and an engine made here would compete
  // with that check for the CPUs. A worker started ahead of its script (a codemode spare) makes it
  // now, while it waits: its script's load is then only the budgets and the compile
  // (docs/performance.md, "Issue 30, the worker's side, fifth round"). Budgets are set at load
  // either way; what the engine holds already counts against the heap limit set then.
  basal::worker::Engine engine(channel);
  if (started_ahead) engine.Prepare();
  bool loaded = false;
  bool load_failed = false;
  bool activated = false;
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
        if (script_error.line > 0) e["line"] = script_error.line;
        channel.Send(basal::protocol::DumpJson({{"type", "loaded"}, {"ok", false}, {"error", e}}));
        if (!channel.Flush()) _exit(kExitOk);
        // The parent retires a worker whose flow did not load: anything but EOF now is a fault.
        load_failed = true;
        continue;
      }
      if (!channel.Flush()) _exit(kExitOk);
    } else if (auto* activate = std::get_if<basal::protocol::Activate>(&msg)) {
      if (!loaded || load_failed) Die(kExitProtocol, "activate before a successful load");
      channel.set_may_poll(activate->poll);
      // A new execution of a durable run starts its script from the top, in a new worker: this
      // worker's module state, clock and generators belong to the one it ran.
      if (activated && basal::worker::ActiveDurableRun())
        Die(kExitProtocol, "a durable worker runs one activation: second activate refused");
      activated = true;
      switch (engine.Activate(activate->activation, std::move(input_json))) {
        case basal::worker::Engine::Status::kOk:
          break;
        case basal::worker::Engine::Status::kChannelClosed:
          _exit(kExitOk);
        case basal::worker::Engine::Status::kChannelError:
          Die(kExitProtocol, engine.channel_error());
      }
    } else if (std::holds_alternative<basal::protocol::Poll>(msg)) {
      // The parent is about to send an activation: look for it before blocking (wait_spin.h).
      if (!loaded || load_failed) Die(kExitProtocol, "poll before a successful load");
      channel.PollNextWait();
    } else {
      // A late answer for an activation that already ended (e.g. after a CPU budget kill): held to
      // the same clock rule as any answer.
      if (!basal::worker::TakeAnswerClock(std::get<basal::protocol::CallResult>(msg).clock_us, error))
        Die(kExitProtocol, "bad frame from parent: " + error);
      continue;
    }
  }
}
