// What the benches share: timing samples with their percentiles, and the measurements the table
// in basal_bench.cpp puts side by side (a figure of basal beside a reference from the same run).
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace basal::bench {

using Clock = std::chrono::steady_clock;

inline double MicrosSince(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

// Latencies in microseconds. Percentiles are nearest-rank on the sorted samples.
class Samples {
 public:
  void Add(double us) { v_.push_back(us); }
  size_t size() const { return v_.size(); }
  double Percentile(double p) {
    if (v_.empty()) return 0;
    Sort();
    size_t rank = static_cast<size_t>(p / 100.0 * static_cast<double>(v_.size()) + 0.999999);
    rank = std::clamp<size_t>(rank, 1, v_.size());
    return v_[rank - 1];
  }
  double Median() { return Percentile(50); }
  double P99() { return Percentile(99); }
  double Max() {
    Sort();
    return v_.empty() ? 0 : v_.back();
  }

 private:
  void Sort() {
    if (!sorted_) std::sort(v_.begin(), v_.end());
    sorted_ = true;
  }
  std::vector<double> v_;
  bool sorted_ = false;
};

struct Options {
  std::string work_dir;     // journals are created here (a real file system, not tmpfs)
  std::string worker_path;  // ck-basal-worker
  std::string hello_path;   // bench-hello
  bool quick = false;       // fewer iterations: a smoke run, not figures to publish
  // ModuleOptions::busy_poll of the in-process modules (figures_bench.cpp); unset: the module's
  // default. 0 turns polling off, so the parent's CPU per activation is its work, not its wait.
  std::optional<std::chrono::microseconds> busy_poll;
  std::optional<std::chrono::microseconds> busy_poll_max;  // ModuleOptions::busy_poll_max, likewise
  // --journal: the store the references' commits and the figures that journal write to (a file
  // path or a postgresql:// locator, shared by all of them; FigureStore); unset: a new SQLite file
  // in work_dir for each.
  std::string journal;
  // --web-fetch: the fetch figure's flow calls fetch(url), the web global (Request, Response,
  // Headers in the worker), instead of host.call('http.fetch', ...) directly.
  bool web_fetch = false;
};

// The store a figure journals to: --journal's when given, else `sqlite_path`, a new SQLite file
// (removed first, with its -wal and -shm). The durable figure keeps its own SQLite files (its
// resume must find only its own interrupted run).
std::string FigureStore(const Options& o, const std::string& sqlite_path);

// ---- references (references_bench.cpp) ----
// 64 bytes there and back, to a forked echo child; cross_cpu pins the two to CPUs 0 and 1 (the
// scheduler otherwise often stacks them on one CPU, which is far cheaper on a VM).
Samples PipeRoundTrip(const Options& o, bool cross_cpu);
Samples SpawnHello(const Options& o);     // posix_spawn + read its output + reap
struct CommitSamples {
  Samples begin_activation;  // one BeginActivation row, then Commit: the whole batch
  Samples record_call;       // one RecordCall row, then Commit
  Samples end_activation;    // one EndActivation update, then Commit
  uint64_t wal_bytes = 0;    // the WAL file at the end
};
CommitSamples JournalCommits(const Options& o);

// ---- figures through the real parent and worker (figures_bench.cpp) ----
Samples ColdStart(const Options& o);       // spawn to accepted welcome (confinement included)
struct WarmResult {
  Samples activation;  // Module::Run of `export default () => 1` on a reused worker
  uint64_t idle_worker_rss_kib = 0, idle_worker_anon_kib = 0, idle_worker_file_kib = 0;
  pid_t idle_worker_pid = 0;
};
WarmResult WarmActivation(const Options& o);
Samples HostCallRoundTrip(const Options& o);  // one `await host.call(...)` of a trivial host call
struct Throughput {
  double activations_per_second = 0;
  size_t activations = 0;
  uint64_t spawned = 0;
  size_t max_workers = 0;
  uint32_t max_activations_per_worker = 0;
  uint64_t wal_bytes = 0;  // the journal's WAL file at the end: bounded if checkpoints keep up
};
Throughput PoolThroughput(const Options& o, size_t max_workers, uint32_t max_activations_per_worker);
// The parent's resident memory over many host calls through one module: nothing per call may stay.
struct MemoryOverCalls {
  size_t early_calls = 0, late_calls = 0;      // 100 thousand and 1 million (a tenth of each with --quick)
  uint64_t early_rss_kib = 0, late_rss_kib = 0;  // this process's VmRSS after each
};
MemoryOverCalls ParentMemoryOverCalls(const Options& o);

// ---- http.fetch (fetch_bench.cpp) ----
struct FetchSamples {
  Samples direct;  // libcurl's easy interface to the same loopback server, a new connection each
  Samples fetch;   // `await host.call('http.fetch', ...)` in a flow, back to back
};
FetchSamples FetchRoundTrip(const Options& o);

// ---- basal serve (serve_bench.cpp): a real daemon over its Unix socket, a libcurl client ----
struct ServeSamples {
  Samples healthz;  // GET /healthz on a kept-alive connection: the server's own round trip
  Samples run;      // POST /v1/flows/bench/runs?wait=30s of `export default (input) => input`
  double concurrent_runs_per_second = 0;
  int concurrent_clients = 0;
};
ServeSamples ServeRoundTrip(const Options& o, const std::string& basal_path);

// Runs a command with its stdout on /dev/null; its exit code (-1 when it did not exit). serve_bench.cpp.
int RunQuietly(const std::vector<std::string>& args);

// ---- durable runs (durable_bench.cpp) ----
struct DurableSamples {
  int calls = 0;     // recorded host calls in the run
  Samples resume;    // ResumeRun to the run's end: a fresh worker, every recorded answer replayed, one live call
  Samples live;      // the same run executed live (every call served and journaled)
};
DurableSamples DurableResume(const Options& o);

// ---- basal mcp (mcp_bench.cpp) ----
struct McpSamples {
  Samples ping;        // ping through basal mcp's stdio: the transport's own round trip
  // tools/call run_script {code: "return input"}: a new codemode script each time, sent after an
  // agent's turn (kAgentTurn untimed since the last answer), as an agent sends its scripts
  Samples run_script;
  Samples back_to_back;  // the same, each script sent the moment the last answer arrived (the figure before)
};
// The pause before each timed run_script: far shorter than any model's turn between two tool
// calls, long enough for the codemode spare started beside the last script to be welcomed.
inline constexpr std::chrono::milliseconds kAgentTurn{10};
McpSamples McpRoundTrip(const Options& o, const std::string& basal_path);

}  // namespace basal::bench
