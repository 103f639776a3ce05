// The same conversation as src/worker/main.cpp's loop after the welcome (kept in step with it:
// the Linux worker's loop is not shared yet, so that the durable-clock work on it merges cleanly).
#include "worker/windows/flow_runner.h"

#include <fcntl.h>
#include <io.h>
#include <windows.h>

#include <string_view>

#include "protocol/messages.h"
#include "worker/channel.h"
#include "worker/engine.h"
#include "worker/parent_frames.h"

namespace basal::worker::windows {
namespace {

constexpr unsigned kExitOk = 0;
constexpr unsigned kExitProtocol = 65;

[[noreturn]] void Exit(unsigned code) {
  TerminateProcess(GetCurrentProcess(), code);
  ExitProcess(code);
}

[[noreturn]] void Die(unsigned code, std::string_view why) {
  std::string line = "ck-basal-worker: ";
  line += why;
  line += '\n';
  WriteStderr(line);
  Exit(code);
}

}  // namespace

const char* EngineName() { return "quickjs 2021-03-27"; }

int RunFlows(const std::string& welcome) {
  // Frames are bytes: the C runtime must not translate line ends on the stdio descriptors.
  for (int fd : {0, 1, 2}) _setmode(fd, _O_BINARY);
  Channel channel;
  channel.Send(welcome);
  if (!channel.Flush()) Exit(kExitOk);

  Engine engine(channel);
  bool loaded = false;
  bool load_failed = false;
  for (;;) {
    std::string payload;
    switch (channel.Read(payload)) {
      case Channel::ReadStatus::kEof:
        Exit(kExitOk);
      case Channel::ReadStatus::kError:
        Die(kExitProtocol, "bad stream from parent: " + channel.error());
      case Channel::ReadStatus::kFrame:
        break;
    }
    protocol::ParentMessage msg;
    std::string error;
    std::string input_json;
    if (!ParseParentFrame(std::move(payload), msg, input_json, error)) Die(kExitProtocol, "bad frame from parent: " + error);
    if (auto* load = std::get_if<protocol::Load>(&msg)) {
      if (loaded) Die(kExitProtocol, "a worker is bound to one flow for life: second load refused");
      loaded = true;
      protocol::ScriptError script_error;
      if (engine.Load(*load, script_error)) {
        channel.Send("{\"type\":\"loaded\",\"ok\":true}");
      } else {
        protocol::Json e = {{"kind", script_error.kind}, {"name", script_error.name}, {"message", script_error.message}};
        if (!script_error.stack.empty()) e["stack"] = script_error.stack;
        if (!script_error.budget.empty()) e["budget"] = script_error.budget;
        if (script_error.line > 0) e["line"] = script_error.line;
        channel.Send(protocol::DumpJson({{"type", "loaded"}, {"ok", false}, {"error", e}}));
        if (!channel.Flush()) Exit(kExitOk);
        load_failed = true;
        continue;
      }
      if (!channel.Flush()) Exit(kExitOk);
    } else if (auto* activate = std::get_if<protocol::Activate>(&msg)) {
      if (!loaded || load_failed) Die(kExitProtocol, "activate before a successful load");
      switch (engine.Activate(activate->activation, std::move(input_json))) {
        case Engine::Status::kOk:
          break;
        case Engine::Status::kChannelClosed:
          Exit(kExitOk);
        case Engine::Status::kChannelError:
          Die(kExitProtocol, engine.channel_error());
      }
    }
    // Anything else: a late answer for an activation that already ended.
  }
}

}  // namespace basal::worker::windows
