// async_host_call: an embedder's host call answered from another thread.
//
//   async-host-call JOURNAL WORKER
//   e.g. build/release/bin/async-host-call /tmp/example.db build/release/bin/ck-basal-worker
//
// Registers "lookup.price" (effect pure). Its handler runs on the loop thread and only hands the
// reply to a std::thread, which answers after a short sleep, as a database client or an HTTP
// client would. A flow asks for two prices at once with Promise.all; the loop keeps running while
// both lookups are out. Prints one JSON line and exits 0 when the activation succeeded:
//
//   {"outcome":"ok","result":{"items":["apple","pear"],"total_cents":215}}
//
// docs/embedding.md walks through it.
#include <chrono>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "basal/module.h"

namespace {

const char* kFlowSource = R"js(
export default async function (input, host) {
  const [a, b] = await Promise.all([
    host.call("lookup.price", { item: input.items[0] }),
    host.call("lookup.price", { item: input.items[1] }),
  ]);
  return { items: [a.item, b.item], total_cents: a.cents + b.cents };
}
)js";

// The grant: lookup.price has no check_grant, so its constraints must be {}.
const char* kManifest = R"({"grants": {"lookup.price": {}}, "budgets": {"deadline_ms": 10000}})";

const std::map<std::string, int> kPriceCents = {{"apple", 120}, {"pear", 95}};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: async-host-call JOURNAL WORKER\n";
    return 2;
  }
  basal::ModuleOptions options;
  options.journal_path = argv[1];
  options.worker_path = argv[2];
  auto opened = basal::Module::Open(std::move(options));
  if (!opened) {
    std::cerr << "async-host-call: " << opened.error().message << "\n";
    return 1;
  }
  basal::Module& module = **opened;

  // The answering threads. Only the handler (on the loop thread, which is this thread here) adds
  // to the vector, so it needs no lock.
  std::vector<std::thread> lookups;

  basal::HostCallSpec spec;
  spec.name = "lookup.price";
  spec.effect = basal::Effect::kPure;  // reads only: journaled once, with its answer
  spec.handler = [&lookups](const basal::HostCallContext&, const basal::Json& args, basal::HostCallReply reply) {
    // Check the arguments here, on the loop thread, and answer a bad call at once.
    if (!args.is_object() || !args.contains("item") || !args["item"].is_string()) {
      reply.Error("TypeError", "lookup.price: expected {item: string}");
      return;
    }
    // Hand the reply to another thread: HostCallReply is move-only, and Ok/Error may be called
    // from any thread (the answer is posted to the loop, journaled, then sent to the worker).
    lookups.emplace_back([item = args["item"].get<std::string>(), reply = std::move(reply)]() mutable {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the slow outside system
      auto price = kPriceCents.find(item);
      if (price == kPriceCents.end()) {
        reply.Error("NotFound", "lookup.price: no price for " + item);
        return;
      }
      reply.Ok({{"item", item}, {"cents", price->second}});
    });
  };
  if (auto registered = module.registry().Register(std::move(spec)); !registered) {
    std::cerr << "async-host-call: " << registered.error().message << "\n";
    return 1;
  }

  // After Register: the manifest is checked against the registry.
  auto flow = module.AddFlow("prices.js", kFlowSource, kManifest);
  if (!flow) {
    std::cerr << "async-host-call: " << flow.error().message << "\n";
    return 1;
  }

  basal::ActivationResult result;
  auto id = module.Submit(*flow, basal::Json{{"items", basal::Json::array({"apple", "pear"})}},
                          [&result](const basal::ActivationResult& r) { result = r; });
  if (!id) {  // an error is returned, and then `done` is never called
    std::cerr << "async-host-call: " << id.error().message << "\n";
    return 1;
  }
  module.RunUntilIdle();                           // `done` has run when this returns
  module.Shutdown(std::chrono::milliseconds(0));   // nothing left to wait for: retires the worker

  for (std::thread& t : lookups) t.join();

  basal::Json line = {{"outcome", basal::OutcomeName(result.outcome)}};
  if (result.ok()) {
    line["result"] = result.result;
  } else {
    line["error"] = result.ErrorJson();
  }
  std::cout << line.dump() << "\n";
  return result.ok() ? 0 : 1;
}
