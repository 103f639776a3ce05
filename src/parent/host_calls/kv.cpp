// The kv.* host calls (see kv.h).
#include "parent/host_calls/kv.h"

#include "parent/journal_value.h"

#include <algorithm>
#include <array>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace basal {
namespace {

std::string KvDump(const Json& value) { return value.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string KvShown(const Json& value, size_t limit = 60) {
  std::string text = KvDump(value);
  if (text.size() > limit) {
    size_t cut = limit;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
    text = text.substr(0, cut) + "...";
  }
  return text;
}

HostCallAnswer KvTypeError(std::string message) { return HostCallAnswer::Failure("TypeError", std::move(message)); }

// The flow is untrusted and has no business learning where the parent keeps its data, so the
// store's location stays with the operator (Store::ForFlow).
HostCallAnswer HostError(KvOp op, const Store& store, const Error& error) {
  return HostCallAnswer::Failure("HostError",
                                 std::string(KvOpName(op)) + " failed: the store refused it: " + store.ForFlow(error));
}

std::vector<std::string_view> AllowedArgs(KvOp op) {
  switch (op) {
    case KvOp::kGet:
    case KvOp::kDelete: return {"namespace", "key"};
    case KvOp::kPut: return {"namespace", "key", "value"};
    case KvOp::kList: return {"namespace", "prefix", "limit"};
    case KvOp::kCas: return {"namespace", "key", "expected", "value"};
    case KvOp::kIncr: return {"namespace", "key", "by"};
  }
  return {};
}

std::string Joined(const std::vector<std::string_view>& names) {
  std::string out;
  for (std::string_view n : names) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

// A string argument's shape; nullopt when fine.
std::optional<std::string> CheckStringArg(KvOp op, const Json& args, const char* name, size_t max_bytes,
                                          bool allow_empty) {
  auto it = args.find(name);
  const std::string prefix = std::string(KvOpName(op)) + ": \"" + name + "\"";
  if (it == args.end()) return prefix + " is missing (a string)";
  if (!it->is_string()) return prefix + " must be a string (got " + KvShown(*it) + ")";
  const std::string& s = it->get_ref<const std::string&>();
  if (s.empty() && !allow_empty) return prefix + " must not be empty";
  if (s.size() > max_bytes) {
    return prefix + " is " + std::to_string(s.size()) + " bytes; the limit is " + std::to_string(max_bytes);
  }
  return std::nullopt;
}

}  // namespace

const char* KvOpName(KvOp op) {
  switch (op) {
    case KvOp::kGet: return "kv.get";
    case KvOp::kPut: return "kv.put";
    case KvOp::kDelete: return "kv.delete";
    case KvOp::kList: return "kv.list";
    case KvOp::kCas: return "kv.cas";
    case KvOp::kIncr: return "kv.incr";
  }
  return "kv.?";
}

namespace {

Error InvalidKvLimit(const std::string& at, const std::string& what) {
  return MakeError(ErrorCode::kInvalidArgument, at + ": " + what);
}

// An integer constraint from `min` to `max`.
Result<void> CheckLimit(const Json& value, const std::string& at, uint64_t min, uint64_t max) {
  const bool ok = (value.is_number_unsigned() && value.get<uint64_t>() >= min && value.get<uint64_t>() <= max) ||
                  (value.is_number_integer() && value.get<int64_t>() >= 0 &&
                   static_cast<uint64_t>(value.get<int64_t>()) >= min && static_cast<uint64_t>(value.get<int64_t>()) <= max);
  if (ok) return Ok();
  return InvalidKvLimit(at, "must be an integer from " + std::to_string(min) + " to " + std::to_string(max) + " (got " +
                         KvShown(value) + ")");
}

uint64_t LimitOr(const Json* grant, const char* key, const char* sub, uint64_t fallback) {
  if (!grant || !grant->is_object()) return fallback;
  auto it = grant->find(key);
  if (it == grant->end()) return fallback;
  const Json* v = &*it;
  if (sub) {
    if (!v->is_object()) return fallback;
    auto s = v->find(sub);
    if (s == v->end()) return fallback;
    v = &*s;
  }
  return v->is_number_integer() ? v->get<uint64_t>() : fallback;
}

Result<void> CheckNamespaces(const Json& constraints, const std::string& path);

}  // namespace

Result<void> CheckKvPutGrant(const Json& constraints, const std::string& path) {
  if (!constraints.is_object()) {
    return InvalidKvLimit(path, "must be an object {\"namespaces\": [...]} (got " + KvShown(constraints) + ")");
  }
  for (const auto& [key, value] : constraints.items()) {
    if (key == "namespaces") continue;
    if (key == "max_value_bytes") {
      if (auto r = CheckLimit(value, path + ".max_value_bytes", 1, kKvMaxValueBytesCeiling); !r) return r;
      continue;
    }
    if (key == "quota") {
      if (!value.is_object())
        return InvalidKvLimit(path + ".quota", "must be an object {\"bytes\": N, \"keys\": N} (got " + KvShown(value) + ")");
      for (const auto& [qk, qv] : value.items()) {
        if (qk == "bytes") {
          if (auto r = CheckLimit(qv, path + ".quota.bytes", 1, 1ull << 50); !r) return r;
        } else if (qk == "keys") {
          if (auto r = CheckLimit(qv, path + ".quota.keys", 1, 1ull << 40); !r) return r;
        } else {
          return InvalidKvLimit(path + ".quota", "unknown key " + KvDump(Json(qk)) + " (expected \"bytes\" or \"keys\")");
        }
      }
      continue;
    }
    return InvalidKvLimit(path, "unknown key " + KvDump(Json(key)) +
                             " (expected \"namespaces\", \"max_value_bytes\" or \"quota\")");
  }
  return CheckNamespaces(constraints, path);
}

Result<void> CheckKvGrant(const Json& constraints, const std::string& path) {
  if (!constraints.is_object()) {
    return InvalidKvLimit(path, "must be an object {\"namespaces\": [...]} (got " + KvShown(constraints) + ")");
  }
  for (const auto& [key, value] : constraints.items()) {
    if (key != "namespaces") return InvalidKvLimit(path, "unknown key " + KvDump(Json(key)) + " (expected \"namespaces\")");
  }
  return CheckNamespaces(constraints, path);
}

namespace {

Result<void> CheckNamespaces(const Json& constraints, const std::string& path) {
  auto invalid = [](const std::string& at, const std::string& what) { return InvalidKvLimit(at, what); };
  auto namespaces = constraints.find("namespaces");
  if (namespaces == constraints.end()) {
    return invalid(path, "missing \"namespaces\": the list of namespaces granted, e.g. {\"namespaces\": [\"orders\"]}");
  }
  const std::string list_path = path + ".namespaces";
  if (!namespaces->is_array() || namespaces->empty()) {
    return invalid(list_path, "must be a non-empty array of namespace names (got " + KvShown(*namespaces) + ")");
  }
  std::set<std::string> seen;
  for (size_t i = 0; i < namespaces->size(); ++i) {
    const Json& ns = (*namespaces)[i];
    const std::string at = list_path + "[" + std::to_string(i) + "]";
    if (!ns.is_string() || ns.get_ref<const std::string&>().empty()) {
      return invalid(at, "must be a non-empty string (got " + KvShown(ns) + ")");
    }
    const std::string& name = ns.get_ref<const std::string&>();
    if (name.size() > kKvMaxNamespaceBytes) {
      return invalid(at, "is " + std::to_string(name.size()) + " bytes; a namespace is at most " +
                             std::to_string(kKvMaxNamespaceBytes));
    }
    if (!seen.insert(name).second) return invalid(at, "duplicate namespace " + KvShown(ns));
  }
  return Ok();
}

}  // namespace

std::optional<std::string> AuthorizeKv(KvOp op, const Json& constraints, const Json& args) {
  const std::string name = KvOpName(op);
  if (!args.is_object()) return name + " arguments must be an object naming a \"namespace\" (got " + KvShown(args) + ")";
  auto ns = args.find("namespace");
  if (ns == args.end() || !ns->is_string()) {
    return name + " needs a string \"namespace\" argument to be authorized (got " +
           (ns == args.end() ? std::string("none") : KvShown(*ns)) + ")";
  }
  const std::string& wanted = ns->get_ref<const std::string&>();
  std::string granted;
  auto list = constraints.find("namespaces");
  if (list != constraints.end() && list->is_array()) {
    for (const Json& g : *list) {
      if (!g.is_string()) continue;
      if (g.get_ref<const std::string&>() == wanted) return std::nullopt;
      granted += (granted.empty() ? "" : ", ") + g.get_ref<const std::string&>();
    }
  }
  return "namespace " + KvShown(*ns, 100) + " is not granted to " + name +
         " (granted: " + (granted.empty() ? std::string("none") : granted) + ")";
}

namespace {

KvLimits LimitsOf(const Json* grant) {
  return KvLimits{LimitOr(grant, "max_value_bytes", nullptr, kKvDefaultMaxValueBytes),
                  LimitOr(grant, "quota", "bytes", kKvDefaultQuotaBytes),
                  LimitOr(grant, "quota", "keys", kKvDefaultQuotaKeys)};
}

// QuotaExceeded for a kv.cas or kv.incr the store refused over one of its grant's limits.
HostCallAnswer OverLimit(KvOp op, const std::string& ns, const KvUpdate& update, const KvLimits& limits) {
  const std::string name = KvOpName(op);
  if (update.status == KvUpdate::Status::kValueTooLarge) {
    return HostCallAnswer::Failure("QuotaExceeded", name + ": the value is " + std::to_string(update.value_bytes) +
                                                        " bytes as JSON; the grant admits at most " +
                                                        std::to_string(limits.max_value_bytes) + " (max_value_bytes)");
  }
  return HostCallAnswer::Failure(
      "QuotaExceeded", name + ": namespace " + KvShown(Json(ns), 100) + " would hold " +
                           std::to_string(update.usage_after.bytes) + " bytes in " +
                           std::to_string(update.usage_after.keys) + " keys; its quota is " +
                           std::to_string(limits.quota_bytes) + " bytes and " + std::to_string(limits.quota_keys) +
                           " keys (the " + name + " grant's \"quota\"): delete keys or ask the operator for a larger "
                           "quota");
}

// A value the store handed back, as JSON (it validated what it compared; a hand-edited row that
// is not JSON is reported, never passed on).
std::optional<Json> StoredValue(const std::optional<std::string>& text) {
  if (!text) return Json(nullptr);
  Json value = Json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) return std::nullopt;
  return value;
}

HostCallAnswer StoredNotJson(KvOp op) {
  return HostCallAnswer::Failure("HostError", std::string(KvOpName(op)) +
                                                  " failed: the stored value is not valid JSON "
                                                  "(the database was changed by hand?)");
}

HostCallAnswer ServeCas(Store& store, const std::string& ns, const std::string& key, const Json& args,
                        const Json* grant) {
  const std::string name = KvOpName(KvOp::kCas);
  auto expected = args.find("expected");
  if (expected == args.end()) {
    return KvTypeError(name + ": \"expected\" is missing (the value the key must hold for the swap, as kv.get or "
                            "kv.cas returned it; null: the key must be absent)");
  }
  auto value = args.find("value");
  if (value == args.end()) return KvTypeError(name + ": \"value\" is missing (any JSON value; null stores null)");
  std::string value_text, expected_text;
  try {
    value_text = value->dump();  // strict: a string that is not UTF-8 is refused, never altered
  } catch (const Json::type_error&) {
    return KvTypeError(name + ": \"value\" holds a string that is not valid UTF-8");
  }
  try {
    expected_text = expected->dump();
  } catch (const Json::type_error&) {
    return KvTypeError(name + ": \"expected\" holds a string that is not valid UTF-8 (no stored value can equal it)");
  }
  const KvLimits limits = LimitsOf(grant);
  auto update = store.kv().CompareAndSwap(
      ns, key, expected->is_null() ? std::nullopt : std::optional<std::string>(std::move(expected_text)), value_text,
      limits);
  if (!update) return HostError(KvOp::kCas, store, update.error());
  switch (update->status) {
    case KvUpdate::Status::kWritten: return HostCallAnswer::Value(Json{{"swapped", true}, {"current", *value}});
    case KvUpdate::Status::kMismatch: {
      std::optional<Json> current = StoredValue(update->current_json);
      if (!current) return StoredNotJson(KvOp::kCas);
      return HostCallAnswer::Value(Json{{"swapped", false}, {"current", std::move(*current)}});
    }
    case KvUpdate::Status::kValueTooLarge:
    case KvUpdate::Status::kOverQuota: return OverLimit(KvOp::kCas, ns, *update, limits);
    case KvUpdate::Status::kNotAnInteger:
    case KvUpdate::Status::kOutOfRange: break;
  }
  return HostCallAnswer::Failure("HostError", name + " failed: the store answered an outcome a compare-and-swap "
                                                     "cannot have (a bug in basal's store)");
}

HostCallAnswer ServeIncr(Store& store, const std::string& ns, const std::string& key, const Json& args,
                         const Json* grant) {
  const std::string name = KvOpName(KvOp::kIncr);
  const std::string safe = std::to_string(kKvMaxSafeInteger);
  int64_t by = 1;
  if (auto b = args.find("by"); b != args.end()) {
    if (b->is_null()) {
      return KvTypeError(name + ": \"by\" must be an integer (got null; NaN and Infinity become null in JSON); leave "
                              "it out to add 1");
    }
    const std::optional<int64_t> n = KvIntegerValue(*b);
    if (!n) return KvTypeError(name + ": \"by\" must be an integer (got " + KvShown(*b) + ")");
    if (*n > kKvMaxSafeInteger || *n < -kKvMaxSafeInteger) {
      return HostCallAnswer::Failure("RangeError", name + ": \"by\" is " + KvShown(*b) + "; it must be within +-" +
                                                       safe + " (JavaScript's safe integers)");
    }
    by = *n;
  }
  const KvLimits limits = LimitsOf(grant);
  auto update = store.kv().Increment(ns, key, by, limits);
  if (!update) return HostError(KvOp::kIncr, store, update.error());
  const std::string where = "key " + KvShown(Json(key), 100) + " in namespace " + KvShown(Json(ns), 100);
  switch (update->status) {
    case KvUpdate::Status::kWritten: {
      std::optional<Json> now = StoredValue(update->current_json);
      if (!now || !now->is_number_integer()) return StoredNotJson(KvOp::kIncr);
      return HostCallAnswer::Value(std::move(*now));
    }
    case KvUpdate::Status::kNotAnInteger: {
      std::optional<Json> stored = StoredValue(update->current_json);
      if (!stored) return StoredNotJson(KvOp::kIncr);
      return KvTypeError(name + ": " + where + " holds " + KvShown(*stored) +
                         ", not an integer: kv.incr counts only in a key that holds an integer or is absent (kv.put a "
                         "number there first, or count in another key)");
    }
    case KvUpdate::Status::kOutOfRange: {
      std::optional<Json> stored = StoredValue(update->current_json);
      if (!stored) return StoredNotJson(KvOp::kIncr);
      const std::optional<int64_t> now = KvIntegerValue(*stored);
      const bool stored_in_range = now && *now <= kKvMaxSafeInteger && *now >= -kKvMaxSafeInteger;
      const std::string what = stored_in_range ? "; adding " + std::to_string(by) + " would give " +
                                                     std::to_string(*now + by) + ","
                                               : ",";
      return HostCallAnswer::Failure(
          "RangeError", name + ": " + where + " holds " + KvShown(*stored) + what + " beyond +-" + safe +
                            ", the integers JavaScript represents exactly (Number.MAX_SAFE_INTEGER); nothing was "
                            "written");
    }
    case KvUpdate::Status::kValueTooLarge:
    case KvUpdate::Status::kOverQuota: return OverLimit(KvOp::kIncr, ns, *update, limits);
    case KvUpdate::Status::kMismatch: break;
  }
  return HostCallAnswer::Failure("HostError", name + " failed: the store answered an outcome an increment cannot "
                                                     "have (a bug in basal's store)");
}

}  // namespace

HostCallAnswer ServeKv(KvOp op, Store& store, const Json& args, const Json* grant) {
  KvStore& kv = store.kv();
  const std::string name = KvOpName(op);
  if (!args.is_object()) return KvTypeError(name + ": arguments must be an object (got " + KvShown(args) + ")");
  const std::vector<std::string_view> allowed = AllowedArgs(op);
  for (const auto& [key, value] : args.items()) {
    bool known = false;
    for (std::string_view a : allowed) known = known || a == key;
    if (!known)
      return KvTypeError(name + ": unknown argument " + KvShown(Json(key)) + " (expected " + Joined(allowed) + ")");
  }
  if (auto bad = CheckStringArg(op, args, "namespace", kKvMaxNamespaceBytes, /*allow_empty=*/false)) {
    return KvTypeError(*bad);
  }
  const std::string& ns = args["namespace"].get_ref<const std::string&>();

  if (op == KvOp::kList) {
    std::string prefix;
    if (auto p = args.find("prefix"); p != args.end() && !p->is_null()) {
      if (auto bad = CheckStringArg(op, args, "prefix", kKvMaxKeyBytes, /*allow_empty=*/true)) return KvTypeError(*bad);
      prefix = p->get<std::string>();
    }
    size_t limit = kKvListDefaultLimit;
    if (auto l = args.find("limit"); l != args.end() && !l->is_null()) {
      const bool in_range =
          (l->is_number_unsigned() && l->get<uint64_t>() >= 1 && l->get<uint64_t>() <= kKvListMaxLimit) ||
          (l->is_number_integer() && l->get<int64_t>() >= 1 &&
           l->get<int64_t>() <= static_cast<int64_t>(kKvListMaxLimit));
      if (!in_range) {
        return KvTypeError(name + ": \"limit\" must be an integer from 1 to " + std::to_string(kKvListMaxLimit) +
                         " (got " + KvShown(*l) + ")");
      }
      limit = static_cast<size_t>(l->get<int64_t>());
    }
    auto listed = kv.List(ns, prefix, limit, kKvListMaxBytes);
    if (!listed) return HostError(op, store, listed.error());
    if (listed->stopped_at_bytes) {
      return HostCallAnswer::Failure(
          "RangeError", name + ": the first " + std::to_string(listed->entries.size() + 1) + " keys and values" +
                            " pass the " + std::to_string(kKvListMaxBytes >> 20) +
                            " MiB one kv.list may read; ask for fewer keys (\"limit\": " +
                            std::to_string(std::max<size_t>(1, listed->entries.size())) +
                            ") or a narrower \"prefix\", and kv.get large values one at a time");
    }
    Json out = Json::array();
    for (const KvEntry& entry : listed->entries) {
      Json value = Json::parse(entry.value_json, nullptr, /*allow_exceptions=*/false);
      if (value.is_discarded()) {
        return HostCallAnswer::Failure("HostError", name + " failed: the stored value of key " +
                                                        KvShown(Json(entry.key)) +
                                                        " is not valid JSON (the database was changed by hand?)");
      }
      out.push_back(Json{{"key", entry.key}, {"value", std::move(value)}});
    }
    return HostCallAnswer::Value(std::move(out));
  }

  if (auto bad = CheckStringArg(op, args, "key", kKvMaxKeyBytes, /*allow_empty=*/false)) return KvTypeError(*bad);
  const std::string& key = args["key"].get_ref<const std::string&>();

  switch (op) {
    case KvOp::kGet: {
      auto stored = kv.Get(ns, key);
      if (!stored) return HostError(op, store, stored.error());
      if (!stored->has_value()) return HostCallAnswer::Value(nullptr);
      Json value = Json::parse(**stored, nullptr, /*allow_exceptions=*/false);
      if (value.is_discarded()) {
        return HostCallAnswer::Failure("HostError", name +
                                                        " failed: the stored value is not valid JSON "
                                                        "(the database was changed by hand?)");
      }
      return HostCallAnswer::Value(std::move(value));
    }
    case KvOp::kPut: {
      auto value = args.find("value");
      if (value == args.end()) return KvTypeError(name + ": \"value\" is missing (any JSON value; null stores null)");
      std::string text;
      try {
        text = value->dump();  // strict: a string that is not UTF-8 is refused, never altered
      } catch (const Json::type_error&) {
        return KvTypeError(name + ": \"value\" holds a string that is not valid UTF-8");
      }
      const uint64_t max_value = LimitOr(grant, "max_value_bytes", nullptr, kKvDefaultMaxValueBytes);
      if (text.size() > max_value) {
        return HostCallAnswer::Failure("QuotaExceeded", name + ": the value is " + std::to_string(text.size()) +
                                                            " bytes as JSON; the grant admits at most " +
                                                            std::to_string(max_value) + " (max_value_bytes)");
      }
      const uint64_t quota_bytes = LimitOr(grant, "quota", "bytes", kKvDefaultQuotaBytes);
      const uint64_t quota_keys = LimitOr(grant, "quota", "keys", kKvDefaultQuotaKeys);
      // Checked and written under the journal's write lock: writers in other processes cannot
      // together pass the quota.
      auto put = kv.PutWithin(ns, key, text, KvLimits{max_value, quota_bytes, quota_keys});
      if (!put) return HostError(op, store, put.error());
      if (put->status == KvUpdate::Status::kOverQuota) {
        return HostCallAnswer::Failure(
            "QuotaExceeded", name + ": namespace " + KvShown(Json(ns), 100) + " would hold " +
                                 std::to_string(put->usage_after.bytes) + " bytes in " +
                                 std::to_string(put->usage_after.keys) + " keys; its quota is " +
                                 std::to_string(quota_bytes) + " bytes and " + std::to_string(quota_keys) +
                                 " keys (the kv.put grant's \"quota\"): delete keys or ask the operator for a larger quota");
      }
      if (put->status != KvUpdate::Status::kWritten) {
        return HostCallAnswer::Failure("HostError", name + ": the store did not write the value");
      }
      return HostCallAnswer::Value(nullptr);
    }
    case KvOp::kDelete: {
      auto removed = kv.Delete(ns, key);
      if (!removed) return HostError(op, store, removed.error());
      return HostCallAnswer::Value(*removed);
    }
    case KvOp::kCas: return ServeCas(store, ns, key, args, grant);
    case KvOp::kIncr: return ServeIncr(store, ns, key, args, grant);
    case KvOp::kList: break;
  }
  return HostCallAnswer::Failure("HostError", name + ": unknown operation");
}

namespace {
Json Digest(const Json& value) { return Json{{"basal_digest", DigestJson(KvDump(value))}}; }
}  // namespace

Json KvJournalArgs(const Json& args) {
  if (!args.is_object() || !args.contains("value")) return args;
  Json view = Json::object();
  for (const auto& [key, value] : args.items()) view[key] = key == "value" ? Digest(value) : value;
  return view;
}

Json KvCasJournalArgs(const Json& args) {
  if (!args.is_object()) return args;
  Json view = Json::object();
  for (const auto& [key, value] : args.items()) {
    view[key] = key == "value" || (key == "expected" && !value.is_null()) ? Digest(value) : value;
  }
  return view;
}

Json KvJournalResult(KvOp op, const Json& result) {
  if (op == KvOp::kIncr) return Digest(result);
  if (op == KvOp::kCas) {
    Json view = result;
    if (!view.is_object()) return view;
    if (auto current = view.find("current"); current != view.end() && !current->is_null()) *current = Digest(*current);
    return view;
  }
  if (op == KvOp::kGet) return result.is_null() ? result : Digest(result);
  if (op != KvOp::kList || !result.is_array()) return result;
  Json view = Json::array();
  for (const Json& entry : result) {
    if (!entry.is_object() || !entry.contains("value")) {
      view.push_back(entry);
      continue;
    }
    view.push_back(Json{{"key", entry.value("key", Json())}, {"value", Digest(entry["value"])}});
  }
  return view;
}

Effect KvEffect(KvOp op) {
  switch (op) {
    case KvOp::kGet:
    case KvOp::kList: return Effect::kPure;
    case KvOp::kPut:
    case KvOp::kDelete: return Effect::kIdempotent;
    // A repeated cas finds its own value, not `expected`: it changes nothing more.
    case KvOp::kCas: return Effect::kIdempotent;
    // A repeated incr adds again.
    case KvOp::kIncr: return Effect::kExternal;
  }
  return Effect::kExternal;
}

Result<void> RegisterKvHostCalls(HostCallRegistry& registry, Store& store) { return RegisterKv(registry, &store); }

Result<void> RegisterKvHostCallSpecs(HostCallRegistry& registry) { return RegisterKv(registry, nullptr); }

Result<void> RegisterKv(HostCallRegistry& registry, Store* store) {
  for (KvOp op : {KvOp::kGet, KvOp::kPut, KvOp::kDelete, KvOp::kList, KvOp::kCas, KvOp::kIncr}) {
    HostCallSpec spec;
    spec.name = KvOpName(op);
    spec.needs_grant = true;
    const bool writes_values = op == KvOp::kPut || op == KvOp::kCas || op == KvOp::kIncr;  // kv.put's grant shape
    spec.check_grant = writes_values ? CheckKvPutGrant : CheckKvGrant;
    spec.compare_grant = CompareKvGrant;
    spec.authorize = [op](const Json& constraints, const Json& args) { return AuthorizeKv(op, constraints, args); };
    spec.effect = KvEffect(op);
    // Reads and writes of the module's own store, answered before the handler returns: a write and
    // its answer commit together, so none is ever in doubt (docs/durable.md).
    spec.effect_in_store = true;
    spec.handler = [op, store](const HostCallContext& ctx, const Json& args, HostCallReply reply) {
      if (store == nullptr) {
        reply.Error("HostError", std::string(KvOpName(op)) + ": this registry serves no store (it only reviews grants)");
        return;
      }
      ServeKv(op, *store, args, ctx.grant).SendTo(reply);
    };
    if (op == KvOp::kPut) spec.journal_args = KvJournalArgs;
    if (op == KvOp::kCas) spec.journal_args = KvCasJournalArgs;
    if (op == KvOp::kGet || op == KvOp::kList || op == KvOp::kCas || op == KvOp::kIncr)
      spec.journal_result = [op](const Json& result) { return KvJournalResult(op, result); };
    if (auto r = registry.Register(std::move(spec)); !r) return r;
  }
  return Ok();
}

}  // namespace basal
