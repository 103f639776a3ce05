// Fuzz target: Manifest::Parse (include/basal/manifest.h) with the built-in host calls (log and
// kv.*) registered as a module registers them.
//
// Input: a manifest's text.
//
// Invariants:
// - a refusal is kInvalidArgument with a message;
// - an accepted manifest's budgets are within the documented ranges (docs/manifest.md), every
//   grant names a registered host call, and its hash is the SHA-256 of its canonical form;
// - the canonical form is a fixed point: it parses to a manifest with the same canonical form;
// - its grants decide as granted: each kv.* grant admits each of its namespaces and nothing
//   else, a kv.* call it does not grant is denied, and log is always admitted.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "basal/manifest.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/temp_store.h"
#include "parent/host_calls/kv.h"
#include "parent/host_calls/log.h"

namespace basal {
namespace {

const HostCallRegistry& BuiltIns() {
  static const HostCallRegistry registry = [] {
    HostCallRegistry r;
    auto log = RegisterLogHostCall(r, [](const HostCallContext&, std::string_view, std::string_view) {});
    auto kv = RegisterKvHostCalls(r, fuzz::TempStore());
    if (!log || !kv) std::abort();
    return r;
  }();
  return registry;
}

void CheckBudgets(const Budgets& b) {
  using std::chrono::milliseconds;
  FUZZ_CHECK(b.cpu >= milliseconds(1) && b.cpu <= milliseconds(3'600'000), "cpu_ms " + std::to_string(b.cpu.count()));
  FUZZ_CHECK(b.deadline >= milliseconds(1) && b.deadline <= milliseconds(3'600'000),
             "deadline_ms " + std::to_string(b.deadline.count()));
  FUZZ_CHECK(b.heap_limit_bytes >= (1ull << 20) && b.heap_limit_bytes <= (4096ull << 20) &&
                 b.heap_limit_bytes % (1ull << 20) == 0,
             "heap bytes " + std::to_string(b.heap_limit_bytes));
  FUZZ_CHECK(b.stack_limit_bytes >= (64ull << 10) && b.stack_limit_bytes <= (4096ull << 10) &&
                 b.stack_limit_bytes % (1ull << 10) == 0,
             "stack bytes " + std::to_string(b.stack_limit_bytes));
  FUZZ_CHECK(b.calls_in_flight >= 1 && b.calls_in_flight <= 1024, "calls_in_flight " + std::to_string(b.calls_in_flight));
  FUZZ_CHECK(b.journal_bytes >= (16ull << 10) && b.journal_bytes <= (65536ull << 10) && b.journal_bytes % 1024 == 0,
             "journal bytes " + std::to_string(b.journal_bytes));
  FUZZ_CHECK(b.log_bytes <= b.journal_bytes && b.log_bytes % 1024 == 0,
             "log bytes " + std::to_string(b.log_bytes) + " with journal bytes " + std::to_string(b.journal_bytes));
}

void CheckDecisions(const Manifest& manifest, const HostCallRegistry& registry) {
  const HostCallSpec* log = registry.Find("log");
  FUZZ_CHECK(!manifest.Authorize(*log, Json{{"level", "log"}, {"message", "m"}}), "log was denied");
  for (const char* op : {"kv.get", "kv.put", "kv.delete", "kv.list", "kv.cas", "kv.incr"}) {
    const HostCallSpec* spec = registry.Find(op);
    auto grant = manifest.grants().find(op);
    if (grant == manifest.grants().end()) {
      FUZZ_CHECK(manifest.Authorize(*spec, Json{{"namespace", "n"}}).has_value(), std::string(op) + " without a grant");
      continue;
    }
    std::string longest;
    for (const Json& ns : grant->second.at("namespaces")) {
      const std::string& name = ns.get_ref<const std::string&>();
      FUZZ_CHECK(!manifest.Authorize(*spec, Json{{"namespace", name}}), std::string(op) + " denied a granted namespace");
      if (name.size() > longest.size()) longest = name;
    }
    // Longer than every granted name, so granted by none.
    FUZZ_CHECK(manifest.Authorize(*spec, Json{{"namespace", longest + "~"}}).has_value(),
               std::string(op) + " admitted a namespace it does not grant");
  }
}

}  // namespace
}  // namespace basal

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace basal;
  const HostCallRegistry& registry = BuiltIns();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Result<Manifest> manifest = Manifest::Parse(text, registry);
  if (!manifest) {
    FUZZ_CHECK(manifest.error().code == ErrorCode::kInvalidArgument && !manifest.error().message.empty(),
               "a refusal that is not kInvalidArgument with a message: " + manifest.error().message);
    return 0;
  }
  CheckBudgets(manifest->budgets());
  for (const auto& [name, constraints] : manifest->grants()) {
    FUZZ_CHECK(registry.Find(name) != nullptr, "a grant of unknown host call " + name);
  }
  const std::string canonical = manifest->Canonical();
  FUZZ_CHECK(manifest->hash() == Sha256Hex(canonical), "the hash is not of the canonical form");

  Result<Manifest> again = Manifest::Parse(canonical, registry);
  FUZZ_CHECK(again.ok(), "the canonical form was refused: " + (again ? std::string() : again.error().message) +
                             "\n  " + canonical.substr(0, 300));
  FUZZ_CHECK(again->Canonical() == canonical && again->hash() == manifest->hash(),
             "the canonical form is not a fixed point: " + canonical.substr(0, 300));
  CheckDecisions(*manifest, registry);
  return 0;
}
