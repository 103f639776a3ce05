// The worker's JavaScript engine: one QuickJS runtime bound to one flow for the worker's life.
// Prepare() makes the runtime, the context and the globals (no load decides them); Load() prepares
// the engine if nobody did, sets the load's budgets on it and evaluates the flow module once; each Activate() calls its default export
// `(input, host)` and pumps host-call results from the parent until the activation settles.
// Budgets: CPU (engine thread's CPU clock, checked from the interrupt handler: uncatchable),
// heap (the runtime's allocator refuses past the limit, which also covers what the worker's own
// code holds for the activation: frames, host-call records, JSON texts), stack (QuickJS's stack
// limit).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "protocol/messages.h"
#include "worker/channel.h"

struct JSRuntime;
struct JSContext;

namespace basal::worker {

class Engine {
 public:
  enum class Status { kOk, kChannelClosed, kChannelError };

  explicit Engine(Channel& channel);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Makes what no load decides (the runtime, the context, the globals, the runner), so that a
  // worker waiting for its script could have them ready. Optional: Load prepares an engine that
  // was not (main.cpp says why the worker leaves it to Load). A failure is kept and reported by Load.
  void Prepare();
  // Compiles and evaluates the flow module. On failure fills `error` (the worker stays alive
  // and reports it; the parent retires it).
  bool Load(const protocol::Load& load, protocol::ScriptError& error);
  // Runs one activation on `input_json` (its input as JSON text, see ParseParentFrame) and sends
  // its `done` frame.
  Status Activate(int64_t activation, std::string input_json);
  const std::string& channel_error() const { return channel_error_; }

  struct State;  // opaque to callers; shared with the C callbacks in engine.cpp

 private:
  void Build();
  bool LoadFlow(const protocol::Load& load, protocol::ScriptError& error);
  Status RunActivation(std::string input_json);

  Channel& channel_;
  std::unique_ptr<State> state_;
  std::string channel_error_;
  std::optional<protocol::ScriptError> prepare_error_;
};

}  // namespace basal::worker
