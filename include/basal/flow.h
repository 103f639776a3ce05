// A flow as a module runs it, and the ids and callbacks of its activations: what the pool, the
// activation, the call gate and an embedder share without the Module's facade (include/basal/module.h).
//
//   basal::FlowRef flow = *module->LoadApprovedFlow("hello");
//   if (flow->manifest.durable()) { /* its runs are resumed from the journal: docs/durable.md */ }
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "basal/manifest.h"
#include "basal/outcome.h"

namespace basal {

// Where a flow came from (docs/approvals.md): what the journal records with each activation.
enum class FlowOrigin {
  kAdhoc,     // AddFlow: source and manifest given by the embedder (`basal run FILE --manifest M`)
  kApproved,  // LoadApprovedFlow: the newest approved version of a flow in the store
  kCodemode,  // AddCodemodeScript: an agent's script under the newest version of a codemode policy
};

// A flow this module may run: immutable. Keep the reference to submit activations; RemoveFlow retires it.
struct Flow {
  uint64_t id = 0;
  std::string name;
  std::string source;
  std::string source_hash;  // "sha256:<hex>"
  Manifest manifest;
  Profile profile = Profile::kFlow;
  FlowOrigin origin = FlowOrigin::kAdhoc;
  std::string manifest_text_hash;  // "sha256:<hex>" of the manifest text as written
  // Approved and codemode flows: the approved version (of the flow, or of the policy) it runs
  // under. Submit and the start of each activation refuse it once that version is revoked.
  int64_t approval_id = 0;
  int64_t version = 0;
  std::string policy;  // codemode: the policy's name
  // Codemode: the host calls the script's `tools` object offers, as tools.<group>.<member>(args)
  // (its default export's third argument; "kv.get" is tools.kv.get, "mcp.fs.read_text_file" is
  // tools.fs.read_text_file). Empty for a flow.
  std::vector<std::string> tools;
};
using FlowRef = std::shared_ptr<const Flow>;

using ActivationId = int64_t;
using DoneCallback = std::function<void(const ActivationResult&)>;
// A run's id in the journal (docs/durable.md): one run, one or more activations.
using RunId = int64_t;

// What loading a flow in a worker showed (Module::CheckLoad). Loading is what a worker does before
// its first activation: compile the flow's module, evaluate its top level, find its default export.
// The default export is not called.
struct LoadCheck {
  // kOk: the flow loads and its default export is a function. Otherwise the outcome an activation
  // of the flow would have ended with, for the same reason: script_error (a syntax error, a throw
  // at top level, an import, no default export function), budget_exhausted (cpu, memory or stack
  // while loading), deadline (loading passed budgets.deadline_ms), worker_refused, spawn_failed,
  // worker_crashed, worker_confinement, protocol_violation, cancelled.
  Outcome outcome = Outcome::kOk;
  // Not ok: what happened, naming the cause, as an activation's message says it (for a syntax
  // error: "flow hello.js failed to load: hello.js:3: SyntaxError: unexpected token ...").
  std::string message;
  // When the engine reported a JS error (script_error, and budget_exhausted): its name and its
  // own message as the engine gave them ("SyntaxError", "unexpected token in expression: ')'"),
  // and its stack (QuickJS's "    at hello.js:3" lines).
  std::string error_name;
  std::string error_message;
  std::string stack;
  std::optional<Budget> budget;  // budget_exhausted: which one
  // A syntax error: the line of the flow's source where compiling stopped, from 1 (QuickJS
  // 2021-03-27 reports no column). 0: not a compile error, or none reported.
  int64_t line = 0;
  bool ok() const { return outcome == Outcome::kOk; }
};

}  // namespace basal
