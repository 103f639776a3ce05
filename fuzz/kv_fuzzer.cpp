// Fuzz target: the kv.* host calls' grant checks and authorization (CheckKvGrant,
// CheckKvPutGrant, AuthorizeKv), ServeKv on a real SQLite store, and the journal's views of their
// values (KvJournalArgs, KvJournalResult), against a model of what the store must hold.
//
// Input: text lines. The first is a grant's constraints (JSON), checked as the manifest parser
// checks grants.kv.put; the rest are calls, "<op> <args JSON>" with op one of get, put, delete,
// list, cas, incr, each served with that grant:
//
//   {"namespaces": ["orders"], "quota": {"bytes": 100, "keys": 2}}
//   put {"namespace": "orders", "key": "o-1", "value": {"n": 1}}
//   get {"namespace": "orders", "key": "o-1"}
//
// Invariants:
// - a refused grant names its path; an accepted one is a non-empty list of distinct non-empty
//   namespace names of at most 256 bytes; every valid kv.get grant is a valid kv.put grant;
// - AuthorizeKv admits exactly the calls whose args name one of the granted namespaces;
// - an admitted call is answered with a value, a TypeError naming the call, or (kv.put, kv.cas,
//   kv.incr) a QuotaExceeded exactly when the model says the value or the namespace's quota is
//   exceeded; never a HostError, and a RangeError only from kv.incr when the model says the count
//   leaves the safe integers (the store is healthy and small); a refusal changes nothing;
// - the answers agree with the model: get returns what the last put stored (or null), delete
//   says whether the key was there, list returns the model's keys under the prefix in byte order
//   up to the limit; cas swaps exactly when the stored value (null when absent) equals `expected`
//   as a JSON value and answers what the key then holds; incr answers the model's sum, and is a
//   TypeError exactly when `by` or the stored value is not an integer;
// - the journal's views hold digests (size and SHA-256 of the value's JSON), never the values.
// Each input's writes are rolled back at its end, so inputs do not depend on each other.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "basal/manifest.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/temp_store.h"
#include "parent/host_calls/kv.h"
#include "protocol/messages.h"

namespace basal {
namespace {

// What the store must hold: (namespace, key) -> value, in the store's byte order.
using Model = std::map<std::pair<std::string, std::string>, Json>;

std::string Text(const Json& value) { return value.dump(); }

bool OpFromName(std::string_view name, KvOp& op) {
  if (name == "get") {
    op = KvOp::kGet;
  } else if (name == "put") {
    op = KvOp::kPut;
  } else if (name == "delete") {
    op = KvOp::kDelete;
  } else if (name == "list") {
    op = KvOp::kList;
  } else if (name == "cas") {
    op = KvOp::kCas;
  } else if (name == "incr") {
    op = KvOp::kIncr;
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

uint64_t Limit(const Json& grant, const char* key, const char* sub, uint64_t fallback) {
  const Json* v = &grant;
  for (const char* k : {key, sub}) {
    if (k == nullptr) break;
    auto it = v->find(k);
    if (it == v->end()) return fallback;
    v = &*it;
  }
  return v->get<uint64_t>();
}

// Why the model refuses a put (QuotaExceeded), or nullopt.
std::optional<std::string> QuotaRefusal(const Json& grant, const Model& model, const std::string& ns,
                                        const std::string& key, const Json& value) {
  const uint64_t text_bytes = Text(value).size();
  if (text_bytes > Limit(grant, "max_value_bytes", nullptr, kKvDefaultMaxValueBytes)) return "max_value_bytes";
  uint64_t bytes = 0;
  uint64_t keys = 0;
  for (const auto& [entry, stored] : model) {
    if (entry.first != ns || entry.second == key) continue;
    bytes += entry.second.size() + Text(stored).size();
    ++keys;
  }
  bytes += key.size() + text_bytes;
  ++keys;
  if (bytes > Limit(grant, "quota", "bytes", kKvDefaultQuotaBytes)) return "quota bytes";
  if (keys > Limit(grant, "quota", "keys", kKvDefaultQuotaKeys)) return "quota keys";
  return std::nullopt;
}

void CheckDigest(const Json& view, const Json& value, const std::string& what) {
  const std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  FUZZ_CHECK(view.is_object() && view.size() == 1 && view.contains("basal_digest"), what + " is not a digest");
  FUZZ_CHECK(view["basal_digest"] == (Json{{"bytes", text.size()}, {"sha256", Sha256Hex(text)}}),
             what + "'s digest is not of the value: " + view.dump());
}

void CheckJournalViews(KvOp op, const Json& args, const HostCallAnswer& answer) {
  if (op == KvOp::kCas && args.is_object()) {
    const Json view = KvCasJournalArgs(args);
    for (const auto& [key, value] : args.items()) {
      if (key == "value" || (key == "expected" && !value.is_null())) {
        CheckDigest(view.at(key), value, "the journaled kv.cas " + key);
      } else {
        FUZZ_CHECK(view.at(key) == value, "the journaled kv.cas argument " + key + " changed");
      }
    }
  }
  if (answer.ok && op == KvOp::kCas) {
    const Json view = KvJournalResult(op, answer.value);
    FUZZ_CHECK(view.at("swapped") == answer.value.at("swapped"), "the journaled kv.cas swapped changed");
    if (answer.value.at("current").is_null()) {
      FUZZ_CHECK(view.at("current").is_null(), "a null kv.cas current was journaled as " + view.dump());
    } else {
      CheckDigest(view.at("current"), answer.value.at("current"), "the journaled kv.cas current");
    }
  }
  if (answer.ok && op == KvOp::kIncr) CheckDigest(KvJournalResult(op, answer.value), answer.value, "kv.incr's result");
  if (op == KvOp::kPut) {
    const Json view = KvJournalArgs(args);
    for (const auto& [key, value] : args.items()) {
      if (key == "value") {
        CheckDigest(view.at("value"), value, "the journaled kv.put value");
      } else {
        FUZZ_CHECK(view.at(key) == value, "the journaled kv.put argument " + key + " changed");
      }
    }
  }
  if (!answer.ok) return;
  if (op == KvOp::kGet) {
    const Json view = KvJournalResult(op, answer.value);
    if (answer.value.is_null()) {
      FUZZ_CHECK(view.is_null(), "a null kv.get result was journaled as " + view.dump());
    } else {
      CheckDigest(view, answer.value, "the journaled kv.get result");
    }
  } else if (op == KvOp::kList) {
    const Json view = KvJournalResult(op, answer.value);
    FUZZ_CHECK(view.size() == answer.value.size(), "the journaled kv.list result lost entries");
    for (size_t i = 0; i < view.size(); ++i) {
      FUZZ_CHECK(view[i].at("key") == answer.value[i].at("key"), "a journaled kv.list key changed");
      CheckDigest(view[i].at("value"), answer.value[i].at("value"), "a journaled kv.list value");
    }
  }
}

std::pair<std::string, std::string> EntryOf(const Json& args) {
  return {args.at("namespace").get<std::string>(), args.at("key").get<std::string>()};
}

// A kv.incr `by` or stored value as the model reads it: a number with no fractional part, or
// nullopt.
std::optional<long double> ModelInteger(const Json& v) {
  if (v.is_number_unsigned()) return static_cast<long double>(v.get<uint64_t>());
  if (v.is_number_integer()) return static_cast<long double>(v.get<int64_t>());
  if (!v.is_number_float()) return std::nullopt;
  const double d = v.get<double>();
  if (!std::isfinite(d) || std::trunc(d) != d) return std::nullopt;
  return static_cast<long double>(d);
}

bool Safe(long double n) {
  constexpr long double kMax = 9007199254740991.0L;  // 2^53 - 1
  return n <= kMax && n >= -kMax;
}

// Whether ServeKv must take kv.cas's or kv.incr's arguments (else: a TypeError naming the call).
// The namespace was authorized, so it is a granted name.
bool WellFormed(KvOp op, const Json& args) {
  if (!args.is_object()) return false;
  for (const auto& [key, value] : args.items()) {
    const bool known = key == "namespace" || key == "key" ||
                       (op == KvOp::kCas ? key == "expected" || key == "value" : key == "by");
    if (!known) return false;
  }
  auto key = args.find("key");
  if (key == args.end() || !key->is_string()) return false;
  const size_t key_bytes = key->get_ref<const std::string&>().size();
  if (key_bytes == 0 || key_bytes > kKvMaxKeyBytes) return false;
  if (op == KvOp::kIncr) return true;  // `by` is the model's (CheckAtomicAnswer)
  if (!args.contains("expected") || !args.contains("value")) return false;
  try {
    (void)args.at("expected").dump();  // strict: a string that is not UTF-8 is refused
    (void)args.at("value").dump();
  } catch (const Json::type_error&) {
    return false;
  }
  return true;
}

void Refused(const std::string& name, const HostCallAnswer& answer, const char* error_name, const std::string& why) {
  FUZZ_CHECK(!answer.ok && answer.error_name == error_name,
             name + " should be " + error_name + " (" + why + "), answered " +
                 (answer.ok ? Text(answer.value) : answer.error_name + ": " + answer.error_message));
  FUZZ_CHECK(answer.error_message.rfind(name + ":", 0) == 0, "an error that does not name the call: " +
                                                                 answer.error_message);
}

// kv.cas and kv.incr against the model, once their arguments are as ServeKv requires (the caller
// has let a TypeError about the arguments pass).
void CheckAtomicAnswer(KvOp op, const Json& grant, const Json& args, const HostCallAnswer& answer, Model& model) {
  const std::string name = KvOpName(op);
  const auto entry = EntryOf(args);
  auto it = model.find(entry);
  const Json stored = it == model.end() ? Json(nullptr) : it->second;
  if (op == KvOp::kCas) {
    const Json& value = args.at("value");
    if (Text(value).size() > Limit(grant, "max_value_bytes", nullptr, kKvDefaultMaxValueBytes)) {
      return Refused(name, answer, "QuotaExceeded", "max_value_bytes");
    }
    if (stored != args.at("expected")) {
      FUZZ_CHECK(answer.ok && answer.value == (Json{{"swapped", false}, {"current", stored}}),
                 "kv.cas of a mismatch answered " + (answer.ok ? Text(answer.value) : answer.error_message) +
                     ", the model holds " + Text(stored));
      return;
    }
    if (auto over = QuotaRefusal(grant, model, entry.first, entry.second, value)) {
      return Refused(name, answer, "QuotaExceeded", *over);
    }
    FUZZ_CHECK(answer.ok && answer.value == (Json{{"swapped", true}, {"current", value}}),
               "kv.cas of a match answered " + (answer.ok ? Text(answer.value) : answer.error_message));
    model[entry] = value;
    return;
  }
  auto b = args.find("by");
  const std::optional<long double> by = b == args.end() ? std::optional<long double>(1) : ModelInteger(*b);
  if (!by) return Refused(name, answer, "TypeError", "by is not an integer");
  if (!Safe(*by)) return Refused(name, answer, "RangeError", "by is past the safe integers");
  const std::optional<long double> now = stored.is_null() ? std::optional<long double>(0) : ModelInteger(stored);
  if (!now) return Refused(name, answer, "TypeError", "the stored value is not an integer");
  if (!Safe(*now) || !Safe(*now + *by)) return Refused(name, answer, "RangeError", "the count leaves the safe integers");
  const Json sum = static_cast<int64_t>(*now + *by);
  if (auto over = QuotaRefusal(grant, model, entry.first, entry.second, sum)) {
    return Refused(name, answer, "QuotaExceeded", *over);
  }
  FUZZ_CHECK(answer.ok && answer.value == sum,
             "kv.incr answered " + (answer.ok ? Text(answer.value) : answer.error_message) + ", the model " +
                 Text(sum));
  model[entry] = sum;
}

void CheckAnswer(KvOp op, const Json& grant, const Json& args, const HostCallAnswer& answer, Model& model) {
  const std::string name = KvOpName(op);
  if (op == KvOp::kCas || op == KvOp::kIncr) {
    if (!WellFormed(op, args)) return Refused(name, answer, "TypeError", "malformed arguments");
    return CheckAtomicAnswer(op, grant, args, answer, model);
  }
  std::optional<std::string> over_quota;
  if (op == KvOp::kPut && answer.error_name != "TypeError") {
    // Past the argument checks: namespace, key and value are as ServeKv requires.
    const auto [ns, key] = EntryOf(args);
    over_quota = QuotaRefusal(grant, model, ns, key, args.at("value"));
  }
  if (!answer.ok) {
    if (answer.error_name == "QuotaExceeded") {
      FUZZ_CHECK(over_quota.has_value(), "kv.put refused within its quota: " + answer.error_message);
      return;
    }
    FUZZ_CHECK(answer.error_name == "TypeError", name + " failed with " + answer.error_name + ": " +
                                                     answer.error_message);
    FUZZ_CHECK(answer.error_message.rfind(name + ":", 0) == 0, "a TypeError that does not name the call: " +
                                                                   answer.error_message);
    return;
  }
  FUZZ_CHECK(!over_quota, "kv.put stored a value past its " + over_quota.value_or(""));
  switch (op) {
    case KvOp::kGet: {
      auto it = model.find(EntryOf(args));
      const Json expected = it == model.end() ? Json(nullptr) : it->second;
      FUZZ_CHECK(answer.value == expected, "kv.get returned " + Text(answer.value) + ", the model holds " +
                                               Text(expected));
      break;
    }
    case KvOp::kPut:
      FUZZ_CHECK(answer.value.is_null(), "kv.put answered " + Text(answer.value));
      model[EntryOf(args)] = args.at("value");
      break;
    case KvOp::kDelete: {
      const bool existed = model.erase(EntryOf(args)) > 0;
      FUZZ_CHECK(answer.value == Json(existed), "kv.delete answered " + Text(answer.value));
      break;
    }
    case KvOp::kCas:
    case KvOp::kIncr: break;  // CheckAtomicAnswer
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

  Json grant;
  std::string error;
  if (!protocol::ParseJsonValue(input.substr(0, end), grant, error)) return 0;
  const std::string path = "grants.kv.put";
  const Result<void> get_grant = CheckKvGrant(grant, path);
  const Result<void> put_grant = CheckKvPutGrant(grant, path);
  FUZZ_CHECK(!get_grant || put_grant, "a valid kv.get grant is not a valid kv.put grant");
  if (!put_grant) {
    FUZZ_CHECK(put_grant.error().message.rfind(path, 0) == 0, "a grant refusal without its path: " +
                                                                  put_grant.error().message);
    return 0;
  }
  CheckGrant(grant);

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

    const std::optional<std::string> denied = AuthorizeKv(op, grant, args);
    FUZZ_CHECK(denied.has_value() != Granted(grant, args),
               std::string(KvOpName(op)) + (denied ? " denied a granted call: " + *denied : " admitted an ungranted call"));
    if (denied) continue;
    const HostCallAnswer answer = ServeKv(op, store, args, &grant);
    CheckAnswer(op, grant, args, answer, model);
    CheckJournalViews(op, args, answer);
  }
  if (!store.Rollback()) std::abort();
  return 0;
}
