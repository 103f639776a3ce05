// The kv.* host calls: a key-value store in the journal's database, granted per namespace.
//
//   manifest:  {"grants": {"kv.get": {"namespaces": ["orders"]}, "kv.put": {"namespaces": ["orders"]}}}
//   flow:      await host.call("kv.put", {namespace: "orders", key: "o-1", value: {n: 1}});
//              const v = await host.call("kv.get", {namespace: "orders", key: "o-1"});  // {n: 1}
//
//   kv.get    {namespace, key}           -> the stored value, or null when absent
//   kv.put    {namespace, key, value}    -> null (value: any JSON value, required)
//   kv.delete {namespace, key}           -> true if the key existed, else false
//   kv.list   {namespace, prefix?, limit?} -> [{"key": .., "value": ..}, ...] in key byte order
//
// Bounds (docs/manifest.md, "Limits"): kv.put's grant may say
//   {"namespaces": [...], "max_value_bytes": 1048576, "quota": {"bytes": 67108864, "keys": 10000}}
// (those are the defaults): a larger value, or a put that would bring a granted namespace past its
// quota, is refused with QuotaExceeded. kv.list stops reading at kKvListMaxBytes and then fails
// (ask for fewer keys). The journal keeps digests of values ({"basal_digest": {bytes, sha256}}),
// never a second copy: the value itself is in kv.
//
// Writes join the store's open batch, so a kv.put commits together with the journal entry of the
// call that made it. The store must outlive the registry's use of these handlers. Effects: get and
// list are pure, put and delete idempotent (repeating one changes nothing more).
#pragma once

#include <cstddef>
#include <cstdint>

#include "basal/host_call.h"
#include "basal/result.h"
#include "parent/host_calls/answer.h"
#include "parent/store/store.h"

namespace basal {

inline constexpr size_t kKvMaxNamespaceBytes = 256;
inline constexpr size_t kKvMaxKeyBytes = 1024;
inline constexpr size_t kKvListDefaultLimit = 100;
inline constexpr size_t kKvListMaxLimit = 1000;
inline constexpr uint64_t kKvDefaultMaxValueBytes = 1ull << 20;
inline constexpr uint64_t kKvMaxValueBytesCeiling = 15ull << 20;  // a value must fit in one message
inline constexpr uint64_t kKvDefaultQuotaBytes = 64ull << 20;
inline constexpr uint64_t kKvDefaultQuotaKeys = 10'000;
inline constexpr size_t kKvListMaxBytes = 8u << 20;  // keys and values one kv.list reads

enum class KvOp { kGet, kPut, kDelete, kList };
const char* KvOpName(KvOp op);  // "kv.get", ...

// Registers kv.get, kv.put, kv.delete and kv.list, served from `store.kv()`.
Result<void> RegisterKvHostCalls(HostCallRegistry& registry, Store& store);
Effect KvEffect(KvOp op);  // get, list: pure; put, delete: idempotent

// check_grant of kv.get, kv.delete, kv.list: {"namespaces": [non-empty unique strings, at least one]}.
Result<void> CheckKvGrant(const Json& constraints, const std::string& path);
// check_grant of kv.put: namespaces, and optionally max_value_bytes (1 to 15 MiB) and
// quota {bytes (1 to 2^50), keys (1 to 2^40)}.
Result<void> CheckKvPutGrant(const Json& constraints, const std::string& path);
// authorize of `op`: nullopt when args name a granted namespace, else the denial reason.
std::optional<std::string> AuthorizeKv(KvOp op, const Json& constraints, const Json& args);
// The decision behind the handler (after authorization): TypeError for bad arguments,
// HostError when the store fails (its message without the store's location: Store::ForFlow),
// else the value. `grant`: the constraints that admitted the call (kv.put's limits; null: defaults).
HostCallAnswer ServeKv(KvOp op, Store& store, const Json& args, const Json* grant = nullptr);
// The journal's views: kv.put's arguments and kv.get's and kv.list's results with each value
// replaced by {"basal_digest": {"bytes": N, "sha256": "sha256:<hex>"}}.
Json KvJournalArgs(const Json& args);
Json KvJournalResult(KvOp op, const Json& result);

// ---- Comparing two grants (the operator's review of a new manifest: include/basal/review.h) ----

// compare_grant of every kv.* call, for both grant shapes ({"namespaces"} and kv.put's, with
// max_value_bytes and quota; any other call granted in kv.put's shape can use it too). Reports, in
// this order: "namespaces" (names added widen, removed narrow, both is changed: "+orders -tmp";
// a name that is not plain letters, digits and _-.:/@ is written as a JSON string), then
// "max_value_bytes", "quota.bytes" and "quota.keys" (absent means the default, marked
// "(default)"; larger widens: "1048576 (default) -> 2097152"). A limit written out at its default
// is the same limit, so it is no change.
std::vector<ConstraintChange> CompareKvGrant(const Json& before, const Json& after);

}  // namespace basal
