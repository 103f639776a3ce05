// The figures: the real parent (basal::Module, or the launcher + WorkerSession + CheckWorker for the cold start)
// driving the real release ck-basal-worker, with the journal on.
#include <dirent.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "basal/module.h"
#include "bench.h"
#include "parent/welcome_check.h"
#include "parent/platform/worker_launcher.h"
#include "parent/session.h"
#include "protocol/frame.h"
#include "protocol/messages.h"

namespace basal::bench {
namespace {

[[noreturn]] void FiguresBenchFatal(const std::string& what) {
  std::fprintf(stderr, "basal-bench: %s\n", what.c_str());
  std::exit(1);
}

std::unique_ptr<Module> OpenFiguresModule(const Options& o, const std::string& name, ModuleOptions mo = {}) {
  mo.journal_path = FigureStore(o, o.work_dir + "/" + name + ".db");
  mo.worker_path = o.worker_path;
  if (o.busy_poll) mo.busy_poll = *o.busy_poll;
  if (o.busy_poll_max) mo.busy_poll_max = *o.busy_poll_max;
  auto m = Module::Open(std::move(mo));
  if (!m) FiguresBenchFatal(m.error().message);
  return std::move(*m);
}

FlowRef AddFlow(Module& m, const std::string& source, const std::string& manifest) {
  auto f = m.AddFlow("bench.js", source, manifest);
  if (!f) FiguresBenchFatal(f.error().message);
  return *f;
}

void Expect(const ActivationResult& r) {
  if (!r.ok()) FiguresBenchFatal("activation " + std::to_string(r.activation_id) + " failed: " + r.message);
}

// The children of this process named ck-basal-worker (the pool's workers).
std::vector<pid_t> WorkerChildren() {
  std::vector<pid_t> out;
  DIR* d = opendir("/proc");
  if (!d) return out;
  const pid_t self = getpid();
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0) continue;
    std::ifstream f("/proc/" + std::string(e->d_name) + "/stat");
    std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const size_t open = stat.find('('), close = stat.rfind(')');
    if (open == std::string::npos || close == std::string::npos) continue;
    const std::string comm = stat.substr(open + 1, close - open - 1);
    std::istringstream rest(stat.substr(close + 1));
    std::string state;
    long ppid = 0;
    rest >> state >> ppid;
    if (ppid == self && comm == "ck-basal-worker") out.push_back(static_cast<pid_t>(pid));
  }
  closedir(d);
  return out;
}

uint64_t StatusKib(pid_t pid, const std::string& field) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(field + ":", 0) == 0) return std::strtoull(line.c_str() + field.size() + 1, nullptr, 10);
  return 0;
}

constexpr const char* kTrivialFlow = "export default () => 1";

}  // namespace

Samples ColdStart(const Options& o) {
  // The module computes these once, at Open.
  auto identity = ResolveWorkerUser("");
  if (!identity) FiguresBenchFatal(identity.error().message);
  WelcomePolicy policy;
  policy.kernel_landlock_abi = KernelLandlockAbi();
  policy.worker_identity = *identity;
  const uint64_t address_space = (64ull << 20) + (256ull << 20);  // default heap budget + flow headroom
  const int warmup = 10, n = o.quick ? 30 : 200;
  const auto launcher = WorkerLauncher::ForThisPlatform();
  Samples s;
  for (int i = 0; i < warmup + n; ++i) {
    const auto t0 = Clock::now();
    auto proc = launcher->Launch({o.worker_path, {}, {.address_space_bytes = address_space}, *identity});
    if (!proc) FiguresBenchFatal(proc.error().message);
    WorkerSession session(std::move(*proc));
    auto msg = session.ReadMessage(Clock::now() + std::chrono::seconds(5));
    if (!msg) FiguresBenchFatal("no welcome (run `basal doctor`): " + msg.error().message);
    const auto* welcome = std::get_if<protocol::Welcome>(&*msg);
    if (!welcome) FiguresBenchFatal("the first message is not a welcome");
    const WelcomeVerdict v = CheckWorker(*welcome, session.process(), policy);  // claims and /proc, as the pool does
    if (!v.accepted) FiguresBenchFatal("welcome refused: " + v.reason);
    if (i >= warmup) s.Add(MicrosSince(t0));
    session.process().CloseStdin();  // retire it: it exits 0
    if (!session.process().WaitFor(std::chrono::milliseconds(5000))) FiguresBenchFatal("the worker did not exit after stdin closed");
  }
  return s;
}

WarmResult WarmActivation(const Options& o) {
  ModuleOptions mo;
  mo.max_activations_per_worker = 1'000'000;  // every timed activation on the same, reused worker
  auto m = OpenFiguresModule(o, "warm", mo);
  const FlowRef f = AddFlow(*m, kTrivialFlow, "{}");
  const int warmup = 200, n = o.quick ? 500 : 5000;
  WarmResult out;
  for (int i = 0; i < warmup + n; ++i) {
    const auto t0 = Clock::now();
    const ActivationResult r = m->Run(f, nullptr);
    if (i >= warmup) out.activation.Add(MicrosSince(t0));
    Expect(r);
  }
  if (m->HealthReport()["spawned"] != 1) FiguresBenchFatal("the warm activations did not all run on one worker");
  const std::vector<pid_t> workers = WorkerChildren();
  if (workers.size() != 1) FiguresBenchFatal("expected one idle worker child, found " + std::to_string(workers.size()));
  out.idle_worker_pid = workers[0];
  out.idle_worker_rss_kib = StatusKib(workers[0], "VmRSS");
  out.idle_worker_anon_kib = StatusKib(workers[0], "RssAnon");
  out.idle_worker_file_kib = StatusKib(workers[0], "RssFile") + StatusKib(workers[0], "RssShmem");
  return out;
}

Samples HostCallRoundTrip(const Options& o) {
  auto m = OpenFiguresModule(o, "hostcall");
  // The handler answers at once; the time between two of its invocations within one activation
  // is one whole round trip: journal + commit + answer, worker resumes and sends the next call,
  // parent reads, validates, authorizes.
  std::vector<Clock::time_point> stamps;
  HostCallSpec spec;
  spec.name = "bench.noop";
  spec.effect = Effect::kPure;  // one record, written with the answer: the reference is pipe + 1 commit
  spec.handler = [&stamps](const HostCallContext&, const nlohmann::json&, HostCallReply reply) {
    stamps.push_back(Clock::now());
    reply.Ok(nullptr);
  };
  if (auto r = m->registry().Register(std::move(spec)); !r) FiguresBenchFatal(r.error().message);
  const FlowRef f = AddFlow(*m,
                           "export default async function (n, host) {"
                           "  for (let i = 0; i < n; i++) await host.call('bench.noop', null);"
                           "  return n;"
                           "}",
                           R"({"grants": {"bench.noop": {}}})");
  const int calls = 200, warmup = 2, runs = o.quick ? 5 : 50;
  Samples s;
  for (int i = 0; i < warmup + runs; ++i) {
    stamps.clear();
    Expect(m->Run(f, calls));
    if (stamps.size() != calls) FiguresBenchFatal("the flow made " + std::to_string(stamps.size()) + " calls");
    if (i < warmup) continue;
    for (size_t k = 1; k < stamps.size(); ++k)
      s.Add(std::chrono::duration<double, std::micro>(stamps[k] - stamps[k - 1]).count());
  }
  return s;
}

Throughput PoolThroughput(const Options& o, size_t max_workers, uint32_t max_activations_per_worker) {
  ModuleOptions mo;
  mo.max_workers = max_workers;
  mo.max_activations_per_worker = max_activations_per_worker;
  auto m = OpenFiguresModule(o, "throughput", mo);
  const FlowRef f = AddFlow(*m, kTrivialFlow, "{}");
  size_t ok = 0, failed = 0;
  std::string first_failure;
  auto done = [&](const ActivationResult& r) {
    if (r.ok()) {
      ++ok;
    } else if (failed++ == 0) {
      first_failure = r.message;
    }
  };
  // Start the pool's workers before the clock runs.
  for (size_t i = 0; i < max_workers; ++i)
    if (!m->Submit(f, nullptr, done)) FiguresBenchFatal("submit refused");
  m->RunUntilIdle();
  const uint64_t spawned_before = m->HealthReport()["spawned"].get<uint64_t>();
  ok = 0;
  const size_t n = o.quick ? 5000 : 50000;
  const auto t0 = Clock::now();
  for (size_t i = 0; i < n; ++i)
    if (!m->Submit(f, nullptr, done)) FiguresBenchFatal("submit refused");
  m->RunUntilIdle();
  const double seconds = MicrosSince(t0) / 1e6;
  if (failed != 0 || ok != n) FiguresBenchFatal(std::to_string(failed) + " activations failed: " + first_failure);
  Throughput t;
  t.activations = n;
  t.activations_per_second = static_cast<double>(n) / seconds;
  t.spawned = m->HealthReport()["spawned"].get<uint64_t>() - spawned_before;
  t.max_workers = max_workers;
  t.max_activations_per_worker = max_activations_per_worker;
  struct stat st {};
  if (::stat((o.work_dir + "/throughput.db-wal").c_str(), &st) == 0) t.wal_bytes = static_cast<uint64_t>(st.st_size);
  return t;
}

MemoryOverCalls ParentMemoryOverCalls(const Options& o) {
  auto m = OpenFiguresModule(o, "memory");
  HostCallSpec spec;
  spec.name = "bench.noop";
  spec.effect = Effect::kPure;
  spec.handler = [](const HostCallContext&, const nlohmann::json&, HostCallReply reply) { reply.Ok(nullptr); };
  if (auto r = m->registry().Register(std::move(spec)); !r) FiguresBenchFatal(r.error().message);
  const FlowRef f = AddFlow(*m,
                            "export default async function (n, host) {"
                            "  for (let i = 0; i < n; i++) await host.call('bench.noop', {i});"
                            "  return n;"
                            "}",
                            R"({"grants": {"bench.noop": {}}})");
  MemoryOverCalls out;
  // On a store --journal names (PostgreSQL: each call's commit a round trip and an fsync there),
  // 10^6 calls would take most of an hour: a tenth of them, as --quick.
  const bool fewer = o.quick || !o.journal.empty();
  out.early_calls = fewer ? 10'000 : 100'000;
  out.late_calls = fewer ? 100'000 : 1'000'000;
  const int per_activation = 1000;
  size_t done = 0;
  while (done < out.late_calls) {
    Expect(m->Run(f, per_activation));
    done += per_activation;
    if (done == out.early_calls) out.early_rss_kib = StatusKib(::getpid(), "VmRSS");
  }
  out.late_rss_kib = StatusKib(::getpid(), "VmRSS");
  return out;
}

}  // namespace basal::bench
