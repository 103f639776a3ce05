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
// The handler runs on the module's thread. It may answer at once or keep `reply` and answer
// later from the same thread; an answer is journaled and committed before the worker sees it.
// A handler that throws is answered with a HostError naming what it threw; an `authorize` that
// throws denies the call.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "basal/result.h"

namespace basal {

using Json = nlohmann::json;

struct HostCallContext {
  int64_t activation_id = 0;
  int64_t call_id = 0;
  std::string flow;
};

// One-shot answer to a host call. Move-only; answering twice, or after the activation ended
// (deadline, crash), does nothing.
class HostCallReply {
 public:
  struct Slot;  // owned by the module
  explicit HostCallReply(std::shared_ptr<Slot> slot) : slot_(std::move(slot)) {}
  HostCallReply(HostCallReply&&) noexcept = default;
  HostCallReply& operator=(HostCallReply&&) noexcept = default;
  HostCallReply(const HostCallReply&) = delete;
  HostCallReply& operator=(const HostCallReply&) = delete;

  void Ok(Json value);
  // `name` becomes the JS error's name in the script (e.g. "NotFound", "TypeError").
  void Error(std::string name, std::string message);
  bool answered() const;

 private:
  std::shared_ptr<Slot> slot_;
};

using HostCallHandler = std::function<void(const HostCallContext&, const Json& args, HostCallReply reply)>;

struct HostCallSpec {
  std::string name;  // e.g. "kv.get"
  // false: allowed without a grant (only `log`); a manifest may still list it with {}.
  bool needs_grant = true;
  // Validates a grant's constraints when the manifest is parsed. `path` is the JSON path of the
  // constraints (e.g. "grants.kv.get"): errors must name it. Null: the constraints must be {}.
  std::function<Result<void>(const Json& constraints, const std::string& path)> check_grant;
  // Decides a call: nullopt when the grant admits these args, else the reason it is denied.
  // Null: every call of a granted name is admitted.
  std::function<std::optional<std::string>(const Json& constraints, const Json& args)> authorize;
  HostCallHandler handler;
};

class HostCallRegistry {
 public:
  // Fails on an empty or duplicate name, or a missing handler.
  Result<void> Register(HostCallSpec spec);
  const HostCallSpec* Find(std::string_view name) const;
  std::vector<std::string> Names() const;

 private:
  std::map<std::string, HostCallSpec, std::less<>> specs_;
};

}  // namespace basal
