// The durable run figure (issue 24): a run of 1,000 recorded host calls resumed by replay, beside the
// same run executed live, in the same module. The run is interrupted for real: a forked child runs
// it and dies (SIGKILL, by its own hand) at its last call; this process opens the journal (recovery
// interrupts the run), resumes it and times the replay of the 1,000 answers plus the one live call.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include "basal/module.h"
#include "bench.h"
#include "parent/module_host.h"

namespace basal::bench {
namespace {

[[noreturn]] void DurableBenchFatal(const std::string& what) {
  std::fprintf(stderr, "basal-bench: durable: %s\n", what.c_str());
  std::exit(1);
}

constexpr int kCalls = 1000;

// kCalls kv.get calls one after another, then `bench.end`: the call the child dies in.
std::string Source() {
  return "export default async (input, host) => {\n"
         "  let n = 0;\n"
         "  for (let i = 0; i < " + std::to_string(kCalls) + "; i++) if ((await host.call('kv.get', {namespace: 'b', key: 'k' + (i % 10)})) === null) n++;\n"
         "  await host.call('bench.end', {});\n"
         "  return n;\n"
         "};\n";
}
constexpr const char* kManifest =
    R"({"durable": true, "grants": {"kv.get": {"namespaces": ["b"]}, "bench.end": {}},
        "budgets": {"journal_kb": 16384, "cpu_ms": 30000, "deadline_ms": 120000}})";

std::unique_ptr<Module> OpenModule(const Options& o, const std::string& db, bool die_at_end) {
  ModuleOptions mo;
  mo.journal_path = db;
  mo.worker_path = o.worker_path;
  auto m = Module::Open(std::move(mo));
  if (!m) DurableBenchFatal(m.error().message);
  HostCallSpec end;
  end.name = "bench.end";
  end.effect = Effect::kPure;
  if (die_at_end) {
    end.handler = [](const HostCallContext&, const Json&, HostCallReply) { raise(SIGKILL); };
  } else {
    end.handler = [](const HostCallContext&, const Json&, HostCallReply reply) { reply.Ok(nullptr); };
  }
  if (auto r = (*m)->registry().Register(std::move(end)); !r) DurableBenchFatal(r.error().message);
  return std::move(*m);
}

}  // namespace

DurableSamples DurableResume(const Options& o) {
  DurableSamples out;
  out.calls = kCalls;
  const int rounds = o.quick ? 2 : 7;
  for (int round = 0; round < rounds; ++round) {
    const std::string dir = o.work_dir + "/durable" + std::to_string(round);
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    const std::string db = dir + "/journal.db";
    // The interrupted run: a child records kCalls answers and dies in its last call.
    const pid_t child = fork();
    if (child == 0) {
      auto m = OpenModule(o, db, /*die_at_end=*/true);
      auto flow = m->AddFlow("bench.js", Source(), kManifest);
      if (!flow) _exit(2);
      m->Run(*flow, nullptr);
      _exit(3);  // it should have died in bench.end
    }
    int status = 0;
    waitpid(child, &status, 0);
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) DurableBenchFatal("the child did not die in its last call");

    auto m = OpenModule(o, db, /*die_at_end=*/false);
    std::optional<RunStop> stopped;
    const auto t = Clock::now();
    auto resumed = m->host().ResumeRun(1, {}, [&stopped](const RunStop& s) { stopped = s; });
    if (!resumed) DurableBenchFatal("resume: " + resumed.error().message);
    m->RunUntilIdle();
    out.resume.Add(MicrosSince(t));
    if (!stopped || !stopped->result.ok()) DurableBenchFatal("the resumed run did not end ok: " + (stopped ? stopped->result.message : ""));

    // The same run, live, in the same module: every call served and journaled.
    auto flow = m->AddFlow("bench.js", Source(), kManifest);
    if (!flow) DurableBenchFatal(flow.error().message);
    const auto t2 = Clock::now();
    const ActivationResult r = m->Run(*flow, nullptr);
    out.live.Add(MicrosSince(t2));
    if (!r.ok()) DurableBenchFatal("the live run failed: " + r.message);
    m.reset();
    std::filesystem::remove_all(dir);
  }
  return out;
}

}  // namespace basal::bench
