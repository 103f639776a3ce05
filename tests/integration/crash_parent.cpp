// A parent that is killed on purpose (by crash_recovery_test): it commits one activation, then
// starts another whose external host call never answers, says so on stdout, and waits to die.
//   crash-parent JOURNAL WORKER
#include <cstdio>
#include <thread>

#include "basal/module.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: crash-parent JOURNAL WORKER\n");
    return 2;
  }
  basal::ModuleOptions o;
  o.journal_path = argv[1];
  o.worker_path = argv[2];
  auto module = basal::Module::Open(o);
  if (!module) {
    std::fprintf(stderr, "crash-parent: %s\n", module.error().message.c_str());
    return 1;
  }
  basal::Module& m = **module;
  std::vector<basal::HostCallReply> held;
  basal::HostCallSpec spec;
  spec.name = "payment.charge";
  spec.effect = basal::Effect::kExternal;
  spec.handler = [&held](const basal::HostCallContext& ctx, const basal::Json&, basal::HostCallReply reply) {
    std::printf("STARTED %lld %lld\n", static_cast<long long>(ctx.activation_id), static_cast<long long>(ctx.call_id));
    std::fflush(stdout);
    held.push_back(std::move(reply));
  };
  if (!m.registry().Register(std::move(spec))) return 1;
  auto plain = m.AddFlow("plain.js", "export default (i) => i + 1", "{}");
  auto charging = m.AddFlow("charge.js",
                            "export default async (i, host) => {"
                            "  console.log('before the charge');"
                            "  return host.call('payment.charge', {amount: i});"
                            "}",
                            R"({"grants": {"payment.charge": {}}})");
  if (!plain || !charging) return 1;
  const basal::ActivationResult first = m.Run(*plain, 41);
  if (!first.ok()) return 1;
  std::printf("COMMITTED %lld\n", static_cast<long long>(first.activation_id));
  std::fflush(stdout);
  if (!m.Submit(*charging, 100, [](const basal::ActivationResult&) {})) return 1;
  for (;;) m.RunFor(std::chrono::milliseconds(1000));
}
