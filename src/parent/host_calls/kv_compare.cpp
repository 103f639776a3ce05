// CompareKvGrant: which of two kv.* grants accepts more calls (see kv.h), for the operator's
// review of a new manifest.
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "parent/host_calls/kv.h"

namespace basal {
namespace {

using Direction = ConstraintChange::Direction;

std::set<std::string> Namespaces(const Json& grant) {
  std::set<std::string> names;
  if (!grant.is_object()) return names;
  auto list = grant.find("namespaces");
  if (list == grant.end() || !list->is_array()) return names;
  for (const Json& name : *list) {
    if (name.is_string()) names.insert(name.get<std::string>());
  }
  return names;
}

// A namespace as the review shows it: plain names as they are, others as a JSON string so that a
// space, a quote or a sign inside one cannot be read as a separator or as another name.
std::string ShownName(const std::string& name) {
  bool plain = !name.empty() && name.front() != '+' && name.front() != '-';
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '-' || c == '.' || c == ':' || c == '/' || c == '@';
    if (!ok) plain = false;
  }
  return plain ? name : Json(name).dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::optional<ConstraintChange> CompareNamespaces(const Json& before, const Json& after) {
  const std::set<std::string> was = Namespaces(before);
  const std::set<std::string> now = Namespaces(after);
  std::string added, removed;
  for (const std::string& name : now) {
    if (was.count(name) == 0) added += (added.empty() ? "+" : " +") + ShownName(name);
  }
  for (const std::string& name : was) {
    if (now.count(name) == 0) removed += (removed.empty() ? "-" : " -") + ShownName(name);
  }
  if (added.empty() && removed.empty()) return std::nullopt;
  ConstraintChange change;
  change.constraint = "namespaces";
  if (removed.empty()) {
    change.direction = Direction::kWidened;
    change.detail = added;
  } else if (added.empty()) {
    change.direction = Direction::kNarrowed;
    change.detail = removed;
  } else {
    change.direction = Direction::kChanged;
    change.detail = added + " " + removed;
  }
  return change;
}

// A limit of the grant: `key`, or `key`.`sub`. Absent: nullptr.
const Json* FindLimit(const Json& grant, const char* key, const char* sub) {
  if (!grant.is_object()) return nullptr;
  auto it = grant.find(key);
  if (it == grant.end()) return nullptr;
  if (sub == nullptr) return &*it;
  if (!it->is_object()) return nullptr;
  auto s = it->find(sub);
  return s == it->end() ? nullptr : &*s;
}

// An upper bound (larger admits more): max_value_bytes, quota.bytes, quota.keys.
std::optional<ConstraintChange> CompareLimit(const Json& before, const Json& after, const char* key, const char* sub,
                                             uint64_t fallback) {
  const Json* was = FindLimit(before, key, sub);
  const Json* now = FindLimit(after, key, sub);
  ConstraintChange change;
  change.constraint = sub == nullptr ? std::string(key) : std::string(key) + "." + sub;
  auto value_of = [fallback](const Json* v) -> std::optional<uint64_t> {
    if (v == nullptr) return fallback;
    if (v->is_number_unsigned()) return v->get<uint64_t>();
    if (v->is_number_integer() && v->get<int64_t>() >= 0) return static_cast<uint64_t>(v->get<int64_t>());
    return std::nullopt;  // check_grant refuses this; compare it as "changed" rather than guess
  };
  auto shown = [](const Json* v, std::optional<uint64_t> value) {
    if (v == nullptr) return std::to_string(*value) + " (default)";
    if (value) return std::to_string(*value);
    return v->dump(-1, ' ', false, Json::error_handler_t::replace);
  };
  const std::optional<uint64_t> old_value = value_of(was);
  const std::optional<uint64_t> new_value = value_of(now);
  if (old_value && new_value) {
    if (*old_value == *new_value) return std::nullopt;
    change.direction = *new_value > *old_value ? Direction::kWidened : Direction::kNarrowed;
  } else {
    if (was != nullptr && now != nullptr && *was == *now) return std::nullopt;
    change.direction = Direction::kChanged;
  }
  change.detail = shown(was, old_value) + " -> " + shown(now, new_value);
  return change;
}

}  // namespace

std::vector<ConstraintChange> CompareKvGrant(const Json& before, const Json& after) {
  std::vector<ConstraintChange> changes;
  if (auto change = CompareNamespaces(before, after)) changes.push_back(std::move(*change));
  if (auto change = CompareLimit(before, after, "max_value_bytes", nullptr, kKvDefaultMaxValueBytes))
    changes.push_back(std::move(*change));
  if (auto change = CompareLimit(before, after, "quota", "bytes", kKvDefaultQuotaBytes))
    changes.push_back(std::move(*change));
  if (auto change = CompareLimit(before, after, "quota", "keys", kKvDefaultQuotaKeys))
    changes.push_back(std::move(*change));
  return changes;
}

}  // namespace basal
