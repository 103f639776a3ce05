// The kv.* host calls (see kv.h).
#include "parent/host_calls/kv.h"

#include <array>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace basal {
namespace {

std::string Dump(const Json& value) { return value.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string Shown(const Json& value, size_t limit = 60) {
  std::string text = Dump(value);
  if (text.size() > limit) {
    size_t cut = limit;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
    text = text.substr(0, cut) + "...";
  }
  return text;
}

HostCallAnswer TypeError(std::string message) { return HostCallAnswer::Failure("TypeError", std::move(message)); }

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
  if (!it->is_string()) return prefix + " must be a string (got " + Shown(*it) + ")";
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
  }
  return "kv.?";
}

Result<void> CheckKvGrant(const Json& constraints, const std::string& path) {
  auto invalid = [](const std::string& at, const std::string& what) {
    return MakeError(ErrorCode::kInvalidArgument, at + ": " + what);
  };
  if (!constraints.is_object()) {
    return invalid(path, "must be an object {\"namespaces\": [...]} (got " + Shown(constraints) + ")");
  }
  for (const auto& [key, value] : constraints.items()) {
    if (key != "namespaces") return invalid(path, "unknown key " + Dump(Json(key)) + " (expected \"namespaces\")");
  }
  auto namespaces = constraints.find("namespaces");
  if (namespaces == constraints.end()) {
    return invalid(path, "missing \"namespaces\": the list of namespaces granted, e.g. {\"namespaces\": [\"orders\"]}");
  }
  const std::string list_path = path + ".namespaces";
  if (!namespaces->is_array() || namespaces->empty()) {
    return invalid(list_path, "must be a non-empty array of namespace names (got " + Shown(*namespaces) + ")");
  }
  std::set<std::string> seen;
  for (size_t i = 0; i < namespaces->size(); ++i) {
    const Json& ns = (*namespaces)[i];
    const std::string at = list_path + "[" + std::to_string(i) + "]";
    if (!ns.is_string() || ns.get_ref<const std::string&>().empty()) {
      return invalid(at, "must be a non-empty string (got " + Shown(ns) + ")");
    }
    const std::string& name = ns.get_ref<const std::string&>();
    if (name.size() > kKvMaxNamespaceBytes) {
      return invalid(at, "is " + std::to_string(name.size()) + " bytes; a namespace is at most " +
                             std::to_string(kKvMaxNamespaceBytes));
    }
    if (!seen.insert(name).second) return invalid(at, "duplicate namespace " + Shown(ns));
  }
  return Ok();
}

std::optional<std::string> AuthorizeKv(KvOp op, const Json& constraints, const Json& args) {
  const std::string name = KvOpName(op);
  if (!args.is_object()) return name + " arguments must be an object naming a \"namespace\" (got " + Shown(args) + ")";
  auto ns = args.find("namespace");
  if (ns == args.end() || !ns->is_string()) {
    return name + " needs a string \"namespace\" argument to be authorized (got " +
           (ns == args.end() ? std::string("none") : Shown(*ns)) + ")";
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
  return "namespace " + Shown(*ns, 100) + " is not granted to " + name +
         " (granted: " + (granted.empty() ? std::string("none") : granted) + ")";
}

HostCallAnswer ServeKv(KvOp op, Store& store, const Json& args) {
  KvStore& kv = store.kv();
  const std::string name = KvOpName(op);
  if (!args.is_object()) return TypeError(name + ": arguments must be an object (got " + Shown(args) + ")");
  const std::vector<std::string_view> allowed = AllowedArgs(op);
  for (const auto& [key, value] : args.items()) {
    bool known = false;
    for (std::string_view a : allowed) known = known || a == key;
    if (!known)
      return TypeError(name + ": unknown argument " + Shown(Json(key)) + " (expected " + Joined(allowed) + ")");
  }
  if (auto bad = CheckStringArg(op, args, "namespace", kKvMaxNamespaceBytes, /*allow_empty=*/false)) {
    return TypeError(*bad);
  }
  const std::string& ns = args["namespace"].get_ref<const std::string&>();

  if (op == KvOp::kList) {
    std::string prefix;
    if (auto p = args.find("prefix"); p != args.end() && !p->is_null()) {
      if (auto bad = CheckStringArg(op, args, "prefix", kKvMaxKeyBytes, /*allow_empty=*/true)) return TypeError(*bad);
      prefix = p->get<std::string>();
    }
    size_t limit = kKvListDefaultLimit;
    if (auto l = args.find("limit"); l != args.end() && !l->is_null()) {
      const bool in_range =
          (l->is_number_unsigned() && l->get<uint64_t>() >= 1 && l->get<uint64_t>() <= kKvListMaxLimit) ||
          (l->is_number_integer() && l->get<int64_t>() >= 1 &&
           l->get<int64_t>() <= static_cast<int64_t>(kKvListMaxLimit));
      if (!in_range) {
        return TypeError(name + ": \"limit\" must be an integer from 1 to " + std::to_string(kKvListMaxLimit) +
                         " (got " + Shown(*l) + ")");
      }
      limit = static_cast<size_t>(l->get<int64_t>());
    }
    auto entries = kv.List(ns, prefix, limit);
    if (!entries) return HostError(op, store, entries.error());
    Json out = Json::array();
    for (const KvEntry& entry : *entries) {
      Json value = Json::parse(entry.value_json, nullptr, /*allow_exceptions=*/false);
      if (value.is_discarded()) {
        return HostCallAnswer::Failure("HostError", name + " failed: the stored value of key " +
                                                        Shown(Json(entry.key)) +
                                                        " is not valid JSON (the database was changed by hand?)");
      }
      out.push_back(Json{{"key", entry.key}, {"value", std::move(value)}});
    }
    return HostCallAnswer::Value(std::move(out));
  }

  if (auto bad = CheckStringArg(op, args, "key", kKvMaxKeyBytes, /*allow_empty=*/false)) return TypeError(*bad);
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
      if (value == args.end()) return TypeError(name + ": \"value\" is missing (any JSON value; null stores null)");
      std::string text;
      try {
        text = value->dump();  // strict: a string that is not UTF-8 is refused, never altered
      } catch (const Json::type_error&) {
        return TypeError(name + ": \"value\" holds a string that is not valid UTF-8");
      }
      if (auto put = kv.Put(ns, key, text); !put) return HostError(op, store, put.error());
      return HostCallAnswer::Value(nullptr);
    }
    case KvOp::kDelete: {
      auto removed = kv.Delete(ns, key);
      if (!removed) return HostError(op, store, removed.error());
      return HostCallAnswer::Value(*removed);
    }
    case KvOp::kList: break;
  }
  return HostCallAnswer::Failure("HostError", name + ": unknown operation");
}

Effect KvEffect(KvOp op) {
  switch (op) {
    case KvOp::kGet:
    case KvOp::kList: return Effect::kPure;
    case KvOp::kPut:
    case KvOp::kDelete: return Effect::kIdempotent;
  }
  return Effect::kExternal;
}

Result<void> RegisterKvHostCalls(HostCallRegistry& registry, Store& store) {
  for (KvOp op : {KvOp::kGet, KvOp::kPut, KvOp::kDelete, KvOp::kList}) {
    HostCallSpec spec;
    spec.name = KvOpName(op);
    spec.needs_grant = true;
    spec.check_grant = CheckKvGrant;
    spec.authorize = [op](const Json& constraints, const Json& args) { return AuthorizeKv(op, constraints, args); };
    spec.effect = KvEffect(op);
    spec.handler = [op, &store](const HostCallContext&, const Json& args, HostCallReply reply) {
      ServeKv(op, store, args).SendTo(reply);
    };
    if (auto r = registry.Register(std::move(spec)); !r) return r;
  }
  return Ok();
}

}  // namespace basal
