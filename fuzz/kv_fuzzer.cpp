// Fuzz target: the kv.* host calls' argument checks and authorization (CheckKvGrant, AuthorizeKv)
// and ServeKv on a real SQLite store, against a model of what the store must hold.
//
// Input: text lines. The first is a grant's constraints (JSON), checked as the manifest parser
// checks grants.kv.*; the rest are calls, "<op> <args JSON>" with op one of get, put, delete, list:
//
//   {"namespaces": ["orders"]}
//   put {"namespace": "orders", "key": "o-1", "value": {"n": 1}}
//   get {"namespace": "orders", "key": "o-1"}
//
// Invariants:
// - a refused grant names its path; an accepted one is a non-empty list of distinct non-empty
//   namespace names of at most 256 bytes;
// - AuthorizeKv admits exactly the calls whose args name one of the granted namespaces;
// - an admitted call is answered with a value or a TypeError, never a HostError (the store is
//   healthy), and a TypeError changes nothing;
// - the answers agree with a model of the store: get returns what the last put stored (or null),
//   delete says whether the key was there, list returns the model's keys under the prefix in byte
//   order up to the limit.
// Each input's writes are rolled back at its end, so inputs do not depend on each other.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "fuzz/fuzz_check.h"
#include "fuzz/temp_store.h"
#include "parent/host_calls/kv.h"
#include "protocol/messages.h"

namespace basal {
namespace {

using Model = std::map<std::pair<std::string, std::string>, Json>;

bool OpFromName(std::string_view name, KvOp& op) {
  if (name == "get") {
    op = KvOp::kGet;
  } else if (name == "put") {
    op = KvOp::kPut;
  } else if (name == "delete") {
    op = KvOp::kDelete;
  } else if (name == "list") {
    op = KvOp::kList;
  } else {
    return false;
  }
  return true;
}

bool Granted(const Json& constraints, const Json& args) {
  if (!args.is_object()) return false;
  auto ns = args.find("namespace");
  if (ns == args.end() || !ns->is_string()) return false;
  for (const Json& g : constraints.at("namespaces")) {
    if (g == *ns) return true;
  }
  return false;
}

void CheckGrant(const Json& constraints) {
  const Json& list = constraints.at("namespaces");
  FUZZ_CHECK(list.is_array() && !list.empty(), "an accepted grant without namespaces");
  for (size_t i = 0; i < list.size(); ++i) {
    FUZZ_CHECK(list[i].is_string() && !list[i].get_ref<const std::string&>().empty() &&
                   list[i].get_ref<const std::string&>().size() <= kKvMaxNamespaceBytes,
               "an accepted namespace " + list[i].dump());
    for (size_t j = 0; j < i; ++j) FUZZ_CHECK(list[i] != list[j], "an accepted duplicate namespace");
  }
}

// The key of the model entry for `args` (ns and key are strings once ServeKv accepted the call).
std::pair<std::string, std::string> EntryOf(const Json& args) {
  return {args.at("namespace").get<std::string>(), args.at("key").get<std::string>()};
}

void CheckAnswer(KvOp op, const Json& args, const HostCallAnswer& answer, Model& model) {
  const std::string name = KvOpName(op);
  if (!answer.ok) {
    FUZZ_CHECK(answer.error_name == "TypeError", name + " failed with " + answer.error_name + ": " +
                                                     answer.error_message);
    FUZZ_CHECK(answer.error_message.rfind(name + ":", 0) == 0, "a TypeError that does not name the call: " +
                                                                   answer.error_message);
    return;
  }
  switch (op) {
    case KvOp::kGet: {
      auto it = model.find(EntryOf(args));
      const Json expected = it == model.end() ? Json(nullptr) : it->second;
      FUZZ_CHECK(answer.value == expected, "kv.get returned " + answer.value.dump(-1, ' ', false, Json::error_handler_t::replace) +
                                               ", the model holds " + expected.dump());
      break;
    }
    case KvOp::kPut:
      FUZZ_CHECK(answer.value.is_null(), "kv.put answered " + answer.value.dump());
      model[EntryOf(args)] = args.at("value");
      break;
    case KvOp::kDelete: {
      const bool existed = model.erase(EntryOf(args)) > 0;
      FUZZ_CHECK(answer.value == Json(existed), "kv.delete answered " + answer.value.dump());
      break;
    }
    case KvOp::kList: {
      const std::string ns = args.at("namespace").get<std::string>();
      std::string prefix;
      if (auto p = args.find("prefix"); p != args.end() && !p->is_null()) prefix = p->get<std::string>();
      size_t limit = kKvListDefaultLimit;
      if (auto l = args.find("limit"); l != args.end() && !l->is_null()) limit = l->get<size_t>();
      Json expected = Json::array();
      for (auto it = model.lower_bound({ns, prefix}); it != model.end() && expected.size() < limit; ++it) {
        if (it->first.first != ns || it->first.second.compare(0, prefix.size(), prefix) != 0) break;
        expected.push_back(Json{{"key", it->first.second}, {"value", it->second}});
      }
      FUZZ_CHECK(answer.value == expected, "kv.list returned " + std::to_string(answer.value.size()) +
                                               " entries, the model " + std::to_string(expected.size()));
      break;
    }
  }
}

}  // namespace
}  // namespace basal

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace basal;
  Store& store = fuzz::TempStore();
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  size_t end = input.find('\n');
  const std::string_view grant_text = input.substr(0, end);

  Json constraints;
  std::string error;
  if (!protocol::ParseJsonValue(grant_text, constraints, error)) return 0;
  const std::string path = "grants.kv.get";
  if (Result<void> checked = CheckKvGrant(constraints, path); !checked) {
    FUZZ_CHECK(checked.error().message.rfind(path, 0) == 0, "a grant refusal without its path: " +
                                                                checked.error().message);
    return 0;
  }
  CheckGrant(constraints);

  Model model;
  while (end != std::string_view::npos) {
    const size_t start = end + 1;
    end = input.find('\n', start);
    const std::string_view line = input.substr(start, end == std::string_view::npos ? end : end - start);
    const size_t space = line.find(' ');
    KvOp op;
    if (space == std::string_view::npos || !OpFromName(line.substr(0, space), op)) continue;
    Json args;
    if (!protocol::ParseJsonValue(line.substr(space + 1), args, error)) continue;

    const std::optional<std::string> denied = AuthorizeKv(op, constraints, args);
    FUZZ_CHECK(denied.has_value() != Granted(constraints, args),
               std::string(KvOpName(op)) + (denied ? " denied a granted call: " + *denied : " admitted an ungranted call"));
    if (denied) continue;
    CheckAnswer(op, args, ServeKv(op, store, args), model);
  }
  if (!store.journal().Rollback()) std::abort();
  return 0;
}
