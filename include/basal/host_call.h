// Host calls: the only way a flow affects the world. An embedder registers its own the same way
// the built-ins (log, kv.*) are registered:
//
//   basal::HostCallSpec spec;
//   spec.name = "mail.send";
//   spec.check_grant = ...;   // validates the manifest's constraints for this call
//   spec.authorize = ...;     // allowed, or the reason it is denied
//   spec.handler = [](const basal::HostCallContext& ctx, const nlohmann::json& args,
//                     basal::HostCallReply reply) { reply.Ok({{"sent", true}}); };
//   module.registry().Register(std::move(spec));
//
// The handler runs on the module's loop thread. It may answer at once, or keep `reply` and answer
// later from ANY thread (the answer is posted to the loop); an answer is journaled and committed
// before the worker sees it. A handler that throws is answered with a HostError naming what it
// threw; an `authorize` that throws denies the call.
//
// Effects: a spec says what its handler does to the world. For idempotent and external calls the
// call's record is committed as `started` BEFORE the handler runs, so a parent that dies mid-call
// leaves "outcome unknown" in the journal, never a silent duplicate or a lost effect; the handler
// gets `ctx.idempotency_key` to pass to the outside system. docs/journal.md has the lifecycle.
// A durable run (docs/durable.md) replays answered calls from the journal, and decides a call in
// doubt by its effect class: pure and idempotent ones run again (with the same idempotency key),
// external ones wait for an operator.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "basal/result.h"

namespace basal {

using Json = nlohmann::json;

// What a host call does to the world.
enum class Effect {
  kPure,        // reads only, or nothing outside the journal (log, kv.get): journaled once answered
  kIdempotent,  // repeating it with the same arguments changes nothing more (kv.put, kv.delete)
  kExternal,    // an effect outside basal that may not repeat safely (send mail, charge a card)
};
const char* EffectName(Effect effect);  // "pure", "idempotent", "external"

struct HostCallContext {
  int64_t activation_id = 0;
  int64_t call_id = 0;
  std::string flow;
  // Stable for this call across retries and replays: "<journal id>:<activation>:<call>", or for a
  // durable run's call "<journal id>:run:<run>:<call>", the same in every activation that resumes
  // the run. Pass it to the outside system so that it can drop a duplicate.
  std::string idempotency_key;
  // The constraints of the grant that admitted the call (e.g. kv.put's quota), or null for a call
  // that needs no grant and has none. Valid only while the handler runs: copy what you keep.
  const Json* grant = nullptr;
  // The host call's name as the script called it: for a family spec ("mcp.*") the member called
  // ("mcp.fs.read_text_file"); otherwise the spec's own name.
  std::string name;
  // A durable run's clock when the call was made, microseconds since the Unix epoch (the script's
  // Date.now(); docs/durable.md); 0 when the activation is not durable. timer.sleep waits until this
  // plus its ms, so a resumed run's timers fire when they were due, not a whole delay later.
  int64_t durable_clock_us = 0;
};

// One-shot answer to a host call. Move-only; thread-safe: Ok/OkText/Error may be called from any thread.
// Answering twice does nothing. An answer after the activation ended (deadline, crash, cancel) is
// journaled on the abandoned call record and goes no further. Destroying a reply that was never
// answered answers the call with a HostError ("the handler dropped its reply").
class HostCallReply {
 public:
  struct Slot;  // owned by the module
  explicit HostCallReply(std::shared_ptr<Slot> slot) : slot_(std::move(slot)) {}
  ~HostCallReply();
  HostCallReply(HostCallReply&&) noexcept = default;
  HostCallReply& operator=(HostCallReply&&) noexcept;
  HostCallReply(const HostCallReply&) = delete;
  HostCallReply& operator=(const HostCallReply&) = delete;

  void Ok(Json value);
  // The same answer already serialized: one JSON value as UTF-8 text (RFC 8259), e.g.
  // R"({"sent":true})". The worker gets these bytes as they are, and the journal keeps them (or
  // HostCallSpec::journal_result_text's view of them): a handler that builds its answer as text
  // spares the tree and its serialization. The gate checks the text in one pass; one that is not a
  // JSON value is refused: the call is answered with a HostError naming the host call, the journal
  // keeps that error (never the text), and the observer gets `result_not_json`.
  void OkText(std::string value_json);
  // `name` becomes the JS error's name in the script (e.g. "NotFound", "TypeError").
  void Error(std::string name, std::string message);
  bool answered() const;

 private:
  std::shared_ptr<Slot> slot_;
};

// One constraint that differs between two grants of the same host call, for the operator's review
// of a new manifest (docs/approvals.md).
struct ConstraintChange {
  enum class Direction {
    kWidened,   // the new grant accepts every call the old one did, and more
    kNarrowed,  // the new grant accepts only calls the old one did, and fewer
    kChanged,   // neither accepts all the other does (or basal cannot tell)
  };
  std::string constraint;  // its path inside the grant: "namespaces", "quota.bytes"
  Direction direction = Direction::kChanged;
  std::string detail;      // what changed, e.g. "+orders -tmp" or "1048576 -> 2097152"
};
const char* DirectionName(ConstraintChange::Direction direction);  // "widened", "narrowed", "changed"

using HostCallHandler = std::function<void(const HostCallContext&, const Json& args, HostCallReply reply)>;

struct HostCallSpec {
  // e.g. "kv.get". A name ending in ".*" registers a family: it serves every name below that prefix
  // that has no spec of its own ("mcp.*" serves "mcp.fs.read_text_file"); its handler reads the
  // member called from HostCallContext::name, and a grant names the member, not the family.
  std::string name;
  // For agents (`basal mcp`'s describe_tools): what the call does, and a JSON Schema of its
  // arguments. Empty / null: the agent sees only the name.
  std::string description;
  Json input_schema;
  // false: allowed without a grant (only `log`); a manifest may still list it with {}.
  bool needs_grant = true;
  // Validates a grant's constraints when the manifest is parsed. `path` is the JSON path of the
  // constraints (e.g. "grants.kv.get"): errors must name it. Null: the constraints must be {}.
  std::function<Result<void>(const Json& constraints, const std::string& path)> check_grant;
  // Decides a call: nullopt when the grant admits these args, else the reason it is denied.
  // Null: every call of a granted name is admitted.
  std::function<std::optional<std::string>(const Json& constraints, const Json& args)> authorize;
  // Compares two grants of this call that both passed check_grant: every constraint that differs,
  // with whether the new grant (`after`) accepts more or fewer calls. Empty when both accept the
  // same calls. Null: a review shows the constraints before and after as "changed", saying that
  // basal cannot tell wider from narrower.
  std::function<std::vector<ConstraintChange>(const Json& before, const Json& after)> compare_grant;
  HostCallHandler handler;
  // The default is the safe assumption: an effect that may not repeat.
  Effect effect = Effect::kExternal;
  // The effect of one call, when it depends on the call (http.fetch: a GET is idempotent, a POST
  // external unless its rule sends the journal's idempotency key). Null: `effect`. Called after the
  // call was authorized, with its grant (null for a call that needs none).
  std::function<Effect(const Json* grant, const Json& args)> effect_of;
  // The handler's effect is a write to the module's own store, in its open batch (kv.put, kv.incr,
  // ...): effect and answer commit in one transaction, so the call is never in doubt after a crash
  // (it either happened, answer recorded, or did not). Such a call runs at once, like a pure one,
  // without committing `started` first. The handler must answer before it returns.
  bool effect_in_store = false;
  // The journal's view of the arguments and of a successful result (redaction). Null: journaled
  // as they are. The flow still gets the whole result.
  std::function<Json(const Json& args)> journal_args;
  std::function<Json(const Json& result)> journal_result;
  // The journal's view of a successful result from its text, the bytes the flow gets (Ok's value
  // serialized once, or OkText's text as it was given): what the journal keeps instead, as JSON
  // text. Spares the tree a `journal_result` needs (for an OkText answer, a parse). Set at most one
  // of the two (Register refuses both). A view that throws or gives a text that is not one JSON
  // value leaves a note in the journal instead of the result.
  std::function<std::string(std::string_view result_json)> journal_result_text;
  // Called on the loop thread when an activation ends (ok, failed, deadline, cancelled, crashed),
  // after its calls still in flight became `abandoned`: a handler that keeps work per activation
  // (timers, transfers) drops it here. Called for every registered spec that sets it, whether or
  // not the activation used it. Must not throw (an exception is swallowed).
  std::function<void(int64_t activation_id)> activation_ended;
  // false: the gate writes no call record for an admitted call of this name, and charges nothing
  // to the journal budget for it; it still counts it in calls in flight and still refuses it once
  // the activation ended. For built-ins that carry no effect worth an audit trail and that a
  // script may call at a high rate (`timer.sleep`: setInterval(f, 1) for a minute is 60,000
  // calls). A denied call is journaled all the same. Only for pure calls: Register refuses a
  // non-journaled idempotent or external call, whose `started` record is what makes it safe.
  bool journaled = true;
};

class HostCallRegistry {
 public:
  // Fails on an empty or duplicate name, or a missing handler.
  Result<void> Register(HostCallSpec spec);
  // Replaces a registered spec of the same name (a family by its "PREFIX.*" name), checked as Register checks it (on failure the
  // old one stays): an embedder that serves a built-in its own way (http.fetch through its own
  // egress proxy), or a test's stand-in. Call it before AddFlow, like Register.
  Result<void> Replace(HostCallSpec spec);
  // The spec of `name`: its own, else the family whose prefix it extends ("mcp.*" for
  // "mcp.fs.read_text_file"); null when neither.
  const HostCallSpec* Find(std::string_view name) const;
  // Calls every spec's activation_ended (those that set it).
  void ActivationEnded(int64_t activation_id) const;
  std::vector<std::string> Names() const;

 private:
  std::map<std::string, HostCallSpec, std::less<>> specs_;
};

}  // namespace basal
