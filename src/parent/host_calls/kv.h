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
//   kv.cas    {namespace, key, expected, value} -> {"swapped": true|false, "current": <value or null>}
//   kv.incr   {namespace, key, by?}      -> the new integer (by: an integer, default 1)
//
// kv.cas and kv.incr are atomic: the read, the decision and the write happen under the store's
// write lock, so concurrent activations (and other processes on the same journal) count exactly.
// kv.cas stores `value` only when the stored value equals `expected` as JSON values (KvValuesEqual:
// 1 equals 1.0, object keys in any order; `expected: null` matches an absent key or a stored
// null); "current" is what the key holds afterwards (`value` when swapped), so a retry loop needs
// no kv.get:
//     let cur = null;
//     for (;;) { const r = await host.call("kv.cas", {namespace, key, expected: cur, value: f(cur)});
//                if (r.swapped) break; cur = r.current; }
// kv.incr adds `by` (an integer within +-(2^53 - 1)) to the integer the key holds (absent: 0): a
// key holding a non-integer is a TypeError naming it, a sum past +-(2^53 - 1) (JavaScript's safe
// integers) a RangeError; nothing is written then. Both are granted like kv.put (its grant shape,
// its max_value_bytes and quota: QuotaExceeded) and both tell the flow what the key holds, so
// their grant lets a flow read the granted namespaces' values as kv.get would.
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
// list are pure; put, delete and cas idempotent (repeating one changes nothing more: a repeated
// cas finds its own value, not `expected`, and swaps nothing); incr external (a repeat adds again).
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

enum class KvOp { kGet, kPut, kDelete, kList, kCas, kIncr };
const char* KvOpName(KvOp op);  // "kv.get", ...

// Registers kv.get, kv.put, kv.delete, kv.list, kv.cas and kv.incr, served from `store.kv()`.
Result<void> RegisterKvHostCalls(HostCallRegistry& registry, Store& store);
// The same specs with no store behind them, for what only parses and compares grants (the
// review of `basal flow show` on a read-only journal): their handlers answer HostError.
Result<void> RegisterKvHostCallSpecs(HostCallRegistry& registry);
// Both of the above: `store` null for specs only.
Result<void> RegisterKv(HostCallRegistry& registry, Store* store);
Effect KvEffect(KvOp op);  // get, list: pure; put, delete, cas: idempotent; incr: external

// check_grant of kv.get, kv.delete, kv.list: {"namespaces": [non-empty unique strings, at least one]}.
Result<void> CheckKvGrant(const Json& constraints, const std::string& path);
// check_grant of kv.put, kv.cas and kv.incr: namespaces, and optionally max_value_bytes (1 to
// 15 MiB) and quota {bytes (1 to 2^50), keys (1 to 2^40)}.
Result<void> CheckKvPutGrant(const Json& constraints, const std::string& path);
// authorize of `op`: nullopt when args name a granted namespace, else the denial reason.
std::optional<std::string> AuthorizeKv(KvOp op, const Json& constraints, const Json& args);
// The decision behind the handler (after authorization): TypeError for bad arguments,
// HostError when the store fails (its message without the store's location: Store::ForFlow),
// else the value. `grant`: the constraints that admitted the call (the limits of kv.put, kv.cas and
// kv.incr; null: defaults).
HostCallAnswer ServeKv(KvOp op, Store& store, const Json& args, const Json* grant = nullptr);
// The journal's views: kv.put's arguments and kv.get's and kv.list's results with each value
// replaced by {"basal_digest": {"bytes": N, "sha256": "sha256:<hex>"}}.
Json KvJournalArgs(const Json& args);
Json KvJournalResult(KvOp op, const Json& result);
// kv.cas's arguments: `value`, and `expected` unless null (null says "absent": the journal keeps it
// as it is), as digests. kv.cas's result keeps "swapped" and digests "current" unless null;
// kv.incr's result (the new integer) is a digest like every value kv hands out.
Json KvCasJournalArgs(const Json& args);

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
