// The registry of host calls a module serves: the built-ins (log, kv.*) and the embedder's own,
// registered the same way (include/basal/host_call.h).
#include <string>
#include <utility>
#include <vector>

#include "basal/host_call.h"

namespace basal {
namespace {

constexpr size_t kMaxNameBytes = 128;

// Names appear in manifests (as grant keys and paths like grants.kv.get) and in the journal, so
// they are kept to characters that read unambiguously there.
bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
}

}  // namespace

const char* DirectionName(ConstraintChange::Direction direction) {
  switch (direction) {
    case ConstraintChange::Direction::kWidened: return "widened";
    case ConstraintChange::Direction::kNarrowed: return "narrowed";
    case ConstraintChange::Direction::kChanged: return "changed";
  }
  return "changed";
}

Result<void> HostCallRegistry::Register(HostCallSpec spec) {
  if (spec.name.empty()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "host call: the name is empty; give the spec a name such as \"mail.send\"");
  }
  const std::string shown =
      "host call \"" + (spec.name.size() > kMaxNameBytes ? spec.name.substr(0, kMaxNameBytes) + "..." : spec.name) +
      "\"";
  if (spec.name.size() > kMaxNameBytes) {
    return MakeError(ErrorCode::kInvalidArgument,
                     shown + ": the name is longer than " + std::to_string(kMaxNameBytes) + " bytes");
  }
  // A family ("mcp.*"): the prefix before ".*" follows the rules of a name.
  const bool family = spec.name.size() > 2 && spec.name.ends_with(".*");
  const std::string_view checked = family ? std::string_view(spec.name).substr(0, spec.name.size() - 2) : spec.name;
  for (char c : checked) {
    if (!IsNameChar(c)) {
      return MakeError(ErrorCode::kInvalidArgument, shown + ": names may use only letters, digits, '_', '-' and '.' "
                                                            "(and a family's final \".*\")");
    }
  }
  if (checked.front() == '.' || checked.back() == '.' || checked.find("..") != std::string::npos) {
    return MakeError(ErrorCode::kInvalidArgument, shown +
                                                      ": '.' separates parts of a name (as in kv.get); "
                                                      "it cannot start or end a name or appear twice in a row");
  }
  if (!spec.handler) return MakeError(ErrorCode::kInvalidArgument, shown + ": the spec has no handler");
  if (spec.journal_result && spec.journal_result_text) {
    return MakeError(ErrorCode::kInvalidArgument,
                     shown + ": sets both journal_result and journal_result_text; the journal keeps one view of a "
                             "result, so set one of them");
  }
  if (!spec.journaled && spec.effect != Effect::kPure) {
    return MakeError(ErrorCode::kInvalidArgument,
                     shown + ": only a pure call may go unjournaled (journaled = false); an idempotent or external "
                             "call's `started` record is what keeps its effect from repeating or getting lost");
  }
  if (specs_.count(spec.name) != 0) {
    return MakeError(ErrorCode::kInvalidArgument, shown + ": already registered; each name can be registered once");
  }
  std::string name = spec.name;
  specs_.emplace(std::move(name), std::move(spec));
  return Ok();
}

Result<void> HostCallRegistry::Replace(HostCallSpec spec) {
  auto it = specs_.find(spec.name);
  if (it == specs_.end()) {
    return MakeError(ErrorCode::kNotFound, "host call \"" + spec.name.substr(0, kMaxNameBytes) +
                                               "\": not registered, so there is nothing to replace (use Register)");
  }
  HostCallSpec old = std::move(it->second);
  specs_.erase(it);
  if (auto r = Register(std::move(spec)); !r) {
    specs_.emplace(old.name, std::move(old));
    return r.error();
  }
  return Ok();
}

const HostCallSpec* HostCallRegistry::Find(std::string_view name) const {
  auto it = specs_.find(name);
  if (it != specs_.end()) return &it->second;
  // A family: "mcp.*" serves "mcp.fs.read_text_file" (and the grant name "mcp.fs.*"). The longest
  // prefix wins; the bare prefix ("mcp.") is nobody's member.
  const HostCallSpec* best = nullptr;
  size_t best_prefix = 0;
  for (const auto& [registered, spec] : specs_) {
    if (!registered.ends_with(".*")) continue;
    const std::string_view prefix = std::string_view(registered).substr(0, registered.size() - 1);  // "mcp."
    if (name.size() > prefix.size() && name.starts_with(prefix) && prefix.size() > best_prefix) {
      best = &spec;
      best_prefix = prefix.size();
    }
  }
  return best;
}

std::vector<std::string> HostCallRegistry::Names() const {
  std::vector<std::string> names;
  names.reserve(specs_.size());
  for (const auto& [name, spec] : specs_) names.push_back(name);
  return names;
}

void HostCallRegistry::ActivationEnded(int64_t activation_id) const {
  for (const auto& [name, spec] : specs_) {
    if (!spec.activation_ended) continue;
    try {
      spec.activation_ended(activation_id);
    } catch (...) {
    }
  }
}

}  // namespace basal
