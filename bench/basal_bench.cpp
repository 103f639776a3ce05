// basal-bench: measures basal's figures and, in the same run, the references they are judged
// against, then prints one table (figure, measured, reference, ratio, target, met/missed).
// Run it through scripts/bench.sh. Not a test: it never fails on a missed target.
//
//   basal-bench [--work-dir DIR] [--worker PATH] [--hello PATH] [--quick] [--only FIGURE] [--busy-poll US]
//               [--busy-poll-max US] [--web-fetch]
//
// --busy-poll sets the in-process modules' ModuleOptions::busy_poll (0: off), for profiling the
// parent's own CPU per activation (docs/performance.md, "Where the time goes"); --busy-poll-max
// their ModuleOptions::busy_poll_max (the most its window grows to). --web-fetch makes
// the fetch figure's flow call fetch(), the web global, instead of the http.fetch host call.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "basal/module.h"
#include "bench.h"

namespace {

using basal::bench::Samples;

void PrintSamples(const char* what, Samples& s) {
  std::printf("  %-44s p50 %9.1f us   p99 %9.1f us   max %9.1f us   (n=%zu)\n", what, s.Median(), s.P99(), s.Max(),
              s.size());
  std::fflush(stdout);
}

struct Row {
  std::string figure, measured, reference, ratio, target;
  bool met;
};

std::string Fmt(const char* format, double a, double b = 0) {
  char buf[128];
  std::snprintf(buf, sizeof buf, format, a, b);
  return buf;
}

std::string Us(double us) { return us >= 1000 ? Fmt("%.2f ms", us / 1000) : Fmt("%.1f us", us); }

std::string Latency(Samples& s) { return Us(s.Median()) + " (p99 " + Us(s.P99()) + ")"; }

// Flushes the file system the journals are on before a figure starts, so a figure does not pay
// for the writeback of what the figures before it wrote (the commit reference's 10,000 batches,
// another figure's journal, the other build's round under --compare): what a figure's own commits
// and checkpoints cost still counts.
void SettleDisk(const basal::bench::Options& o) {
  const int fd = ::open(o.work_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::syncfs(fd);
  ::close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  basal::bench::Options o;
  std::string only;  // one figure alone (for profiling): hostcall, warm, cold, throughput, memory, fetch, serve, mcp
  o.worker_path = BASAL_WORKER_PATH;
  o.hello_path = BASAL_BENCH_HELLO_PATH;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "basal-bench: %s needs a value\n", a.c_str());
        std::exit(64);
      }
      return argv[++i];
    };
    if (a == "--work-dir") {
      o.work_dir = value();
    } else if (a == "--worker") {
      o.worker_path = value();
    } else if (a == "--hello") {
      o.hello_path = value();
    } else if (a == "--quick") {
      o.quick = true;
    } else if (a == "--only") {
      only = value();
    } else if (a == "--journal") {
      o.journal = value();
    } else if (a == "--web-fetch") {
      o.web_fetch = true;
    } else if (a == "--busy-poll" || a == "--busy-poll-max") {
      const std::string v = value();
      char* end = nullptr;
      const long us = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || us < 0 || us > 1'000'000) {
        std::fprintf(stderr, "basal-bench: %s takes microseconds from 0 to 1000000, not %s\n", a.c_str(), v.c_str());
        return 64;
      }
      (a == "--busy-poll" ? o.busy_poll : o.busy_poll_max) = std::chrono::microseconds(us);
    } else {
      std::fprintf(stderr, "basal-bench: unknown argument %s (usage: basal-bench [--work-dir DIR] "
                           "[--worker PATH] [--hello PATH] [--quick] [--only FIGURE] [--busy-poll US] [--busy-poll-max US] "
                           "[--journal LOCATOR] "
                           "[--web-fetch])\n", a.c_str());
      return 64;
    }
  }
  if (o.web_fetch && only != "fetch") {
    std::fprintf(stderr, "basal-bench: --web-fetch goes with --only fetch (the full table's fetch figure is the host call's)\n");
    return 64;
  }
  const bool own_work_dir = o.work_dir.empty();
  if (own_work_dir) {
    std::string t = (std::filesystem::temp_directory_path() / "basal-bench-XXXXXX").string();
    if (!mkdtemp(t.data())) {
      std::perror("basal-bench: mkdtemp");
      return 1;
    }
    o.work_dir = t;
  }
  std::filesystem::create_directories(o.work_dir);
  std::printf("basal-bench: worker %s, journals in %s%s\n\n", o.worker_path.c_str(),
              o.journal.empty() ? o.work_dir.c_str() : (o.journal + " (all but the durable figure's)").c_str(),
              o.quick ? " (--quick: a smoke run, not figures to publish)" : "");

  if (!only.empty()) {
    SettleDisk(o);
    if (only == "commit") {
      // One batch (an activation's start) committed, on the store --journal names: p50 and p99 in
      // microseconds, on one line for bench/burndown.py.
      basal::bench::CommitSamples commits = basal::bench::JournalCommits(o);
      PrintSamples("journal batch: BeginActivation + Commit", commits.begin_activation);
      std::printf("commit %.1f %.1f\n", commits.begin_activation.Median(), commits.begin_activation.P99());
      return 0;
    }
    if (only == "hostcall") {
      Samples s = basal::bench::HostCallRoundTrip(o);
      PrintSamples("host-call round trip (trivial host call)", s);
    } else if (only == "warm") {
      basal::bench::WarmResult w = basal::bench::WarmActivation(o);
      PrintSamples("warm activation", w.activation);
      std::printf("  warm activation p99 / p50 = %.2fx (target 3x)\n", w.activation.P99() / w.activation.Median());
      std::printf("  %-44s %llu KiB (anon %llu, file %llu), pid %d\n", "idle worker VmRSS",
                  static_cast<unsigned long long>(w.idle_worker_rss_kib),
                  static_cast<unsigned long long>(w.idle_worker_anon_kib),
                  static_cast<unsigned long long>(w.idle_worker_file_kib), static_cast<int>(w.idle_worker_pid));
    } else if (only == "cold") {
      Samples s = basal::bench::ColdStart(o);
      PrintSamples("cold start", s);
    } else if (only == "memory") {
      const basal::bench::MemoryOverCalls mem = basal::bench::ParentMemoryOverCalls(o);
      std::printf("  parent VmRSS: %llu KiB after %zu host calls, %llu KiB after %zu\n",
                  static_cast<unsigned long long>(mem.early_rss_kib), mem.early_calls,
                  static_cast<unsigned long long>(mem.late_rss_kib), mem.late_calls);
    } else if (only == "fetch") {
      basal::bench::FetchSamples f = basal::bench::FetchRoundTrip(o);
      PrintSamples("direct libcurl request, loopback", f.direct);
      PrintSamples(o.web_fetch ? "fetch() round trip, loopback" : "http.fetch round trip, loopback", f.fetch);
    } else if (only == "mcp") {
      basal::bench::McpSamples m = basal::bench::McpRoundTrip(o, BASAL_CLI_PATH);
      PrintSamples("basal mcp: ping", m.ping);
      PrintSamples("basal mcp: run_script", m.back_to_back);
      PrintSamples("basal mcp: run_script after an agent's turn", m.run_script);
    } else if (only == "serve") {
      basal::bench::WarmResult w = basal::bench::WarmActivation(o);
      basal::bench::ServeSamples sv = basal::bench::ServeRoundTrip(o, BASAL_CLI_PATH);
      PrintSamples("warm activation (reference)", w.activation);
      PrintSamples("basal serve: GET /healthz (reference)", sv.healthz);
      PrintSamples("basal serve: POST a run with ?wait", sv.run);
      std::printf("  %-44s %.0f /s (%d clients)\n", "basal serve: runs with ?wait, concurrent", sv.concurrent_runs_per_second,
                  sv.concurrent_clients);
      const double ref = sv.healthz.Median() + w.activation.Median();
      std::printf("  run with ?wait p50 / (healthz p50 + warm activation p50) = %.2fx (target 1.5x)\n",
                  sv.run.Median() / ref);
    } else if (only == "durable") {
      basal::bench::DurableSamples d = basal::bench::DurableResume(o);
      PrintSamples("durable: resume of a 1,000-call run", d.resume);
      PrintSamples("durable: the same run, live", d.live);
    } else if (only == "throughput") {
      for (size_t workers : {1, 2, 3, 4, 8}) {
        basal::bench::Throughput t = basal::bench::PoolThroughput(o, workers, 1'000'000);
        std::printf("  max_workers %zu: %.0f /s, WAL %.1f MiB\n", workers, t.activations_per_second,
                    static_cast<double>(t.wal_bytes) / (1 << 20));
      }
      // The module's defaults as a whole, retirement included (the figure issue 30's target names):
      // the lines above never retire a worker.
      const basal::ModuleOptions defaults;
      basal::bench::Throughput t =
          basal::bench::PoolThroughput(o, defaults.max_workers, defaults.max_activations_per_worker);
      std::printf("  module defaults (retired every %u): %.0f /s, %llu spawned, WAL %.1f MiB\n",
                  t.max_activations_per_worker, t.activations_per_second,
                  static_cast<unsigned long long>(t.spawned), static_cast<double>(t.wal_bytes) / (1 << 20));
    } else {
      std::fprintf(stderr, "basal-bench: --only takes commit, hostcall, warm, cold, throughput, memory, fetch, serve, mcp or durable\n");
      return 64;
    }
    return 0;
  }
  std::printf("references\n");
  SettleDisk(o);
  Samples pipe = basal::bench::PipeRoundTrip(o, false);
  PrintSamples("pipe round trip, 64 bytes, forked echo child", pipe);
  SettleDisk(o);
  Samples pipe_cross = basal::bench::PipeRoundTrip(o, true);
  PrintSamples("the same, pinned to two different CPUs", pipe_cross);
  SettleDisk(o);
  Samples spawn = basal::bench::SpawnHello(o);
  PrintSamples("posix_spawn + read + reap, dynamic hello", spawn);
  SettleDisk(o);
  basal::bench::CommitSamples commits = basal::bench::JournalCommits(o);
  PrintSamples("journal batch: BeginActivation + Commit", commits.begin_activation);
  PrintSamples("journal batch: RecordCall + Commit", commits.record_call);
  PrintSamples("journal batch: EndActivation + Commit", commits.end_activation);
  if (o.journal.empty())
    std::printf("  %-44s %.1f MiB after %zu commits\n", "journal WAL file", static_cast<double>(commits.wal_bytes) / (1 << 20),
                3 * commits.begin_activation.size());

  std::printf("\nfigures\n");
  SettleDisk(o);
  Samples hostcall = basal::bench::HostCallRoundTrip(o);
  PrintSamples("host-call round trip (trivial host call)", hostcall);
  SettleDisk(o);
  basal::bench::WarmResult warm = basal::bench::WarmActivation(o);
  PrintSamples("warm activation of `export default () => 1`", warm.activation);
  SettleDisk(o);
  Samples cold = basal::bench::ColdStart(o);
  PrintSamples("cold start: spawn to accepted welcome", cold);
  std::printf("  %-44s %llu KiB (anon %llu, file %llu), pid %d\n", "idle worker VmRSS",
              static_cast<unsigned long long>(warm.idle_worker_rss_kib),
              static_cast<unsigned long long>(warm.idle_worker_anon_kib),
              static_cast<unsigned long long>(warm.idle_worker_file_kib), static_cast<int>(warm.idle_worker_pid));
  std::fflush(stdout);
  const basal::ModuleOptions defaults;
  SettleDisk(o);
  basal::bench::Throughput tp =
      basal::bench::PoolThroughput(o, defaults.max_workers, defaults.max_activations_per_worker);
  std::printf("  %-44s %.0f /s  (%zu activations, max_workers %zu, %u per worker, %llu spawned, WAL %.1f MiB)\n",
              "pool throughput, module defaults", tp.activations_per_second, tp.activations, tp.max_workers,
              tp.max_activations_per_worker, static_cast<unsigned long long>(tp.spawned),
              static_cast<double>(tp.wal_bytes) / (1 << 20));
  std::fflush(stdout);
  SettleDisk(o);
  basal::bench::Throughput tp_reuse = basal::bench::PoolThroughput(o, defaults.max_workers, 1'000'000);
  std::printf("  %-44s %.0f /s  (%zu activations, max_workers %zu, %u per worker, %llu spawned)\n",
              "pool throughput, workers never retired", tp_reuse.activations_per_second, tp_reuse.activations,
              tp_reuse.max_workers, tp_reuse.max_activations_per_worker,
              static_cast<unsigned long long>(tp_reuse.spawned));

  SettleDisk(o);
  const basal::bench::MemoryOverCalls mem = basal::bench::ParentMemoryOverCalls(o);
  std::printf("  %-44s %llu KiB after %zu calls, %llu KiB after %zu\n", "parent VmRSS over host calls",
              static_cast<unsigned long long>(mem.early_rss_kib), mem.early_calls,
              static_cast<unsigned long long>(mem.late_rss_kib), mem.late_calls);

  SettleDisk(o);
  basal::bench::FetchSamples fetch = basal::bench::FetchRoundTrip(o);
  PrintSamples("direct libcurl request, loopback (reference)", fetch.direct);
  PrintSamples("http.fetch round trip, loopback", fetch.fetch);

  SettleDisk(o);
  basal::bench::ServeSamples serve = basal::bench::ServeRoundTrip(o, BASAL_CLI_PATH);
  PrintSamples("basal serve: GET /healthz (reference)", serve.healthz);
  PrintSamples("basal serve: POST a run with ?wait", serve.run);
  std::printf("  %-44s %.0f /s (%d clients)\n", "basal serve: runs with ?wait, concurrent", serve.concurrent_runs_per_second,
              serve.concurrent_clients);

  SettleDisk(o);
  basal::bench::McpSamples mcp = basal::bench::McpRoundTrip(o, BASAL_CLI_PATH);
  PrintSamples("basal mcp: ping (reference)", mcp.ping);
  PrintSamples("basal mcp: run_script", mcp.back_to_back);
  PrintSamples("basal mcp: run_script after an agent's turn", mcp.run_script);

  SettleDisk(o);
  basal::bench::DurableSamples durable = basal::bench::DurableResume(o);
  PrintSamples("durable: the same 1,000-call run, live (reference)", durable.live);
  PrintSamples("durable: resume of a 1,000-call run", durable.resume);

  const double host_ref = pipe.Median() + commits.record_call.Median();
  const double serve_ref = serve.healthz.Median() + warm.activation.Median();
  const double fetch_ref = fetch.direct.Median() + commits.record_call.Median();
  const double warm_ref = pipe.Median() + commits.begin_activation.Median() + commits.end_activation.Median();
  const double spawn_ref = spawn.Median();
  const double mcp_ref = mcp.ping.Median() + cold.Median() + warm.activation.Median();
  const Row rows[] = {
      {"host-call round trip", Latency(hostcall), Us(host_ref) + " pipe+1 commit", Fmt("%.2fx", hostcall.Median() / host_ref),
       "<= 1.3x", hostcall.Median() <= 1.3 * host_ref},
      {"http.fetch round trip", Latency(fetch.fetch), Us(fetch_ref) + " curl+1 commit",
       Fmt("%.2fx", fetch.fetch.Median() / fetch_ref), "<= 1.3x", fetch.fetch.Median() <= 1.3 * fetch_ref},
      {"warm activation", Latency(warm.activation), Us(warm_ref) + " pipe+2 commits",
       Fmt("%.2fx", warm.activation.Median() / warm_ref), "<= 1.5x", warm.activation.Median() <= 1.5 * warm_ref},
      // Issue 30: the warm activation's tail within 3x of its median.
      {"warm activation p99", Us(warm.activation.P99()), Us(warm.activation.Median()) + " its p50",
       Fmt("%.2fx", warm.activation.P99() / warm.activation.Median()), "<= 3x",
       warm.activation.P99() <= 3 * warm.activation.Median()},
      {"serve: run with ?wait", Latency(serve.run), Us(serve_ref) + " healthz+warm",
       Fmt("%.2fx", serve.run.Median() / serve_ref), "<= 1.5x", serve.run.Median() <= 1.5 * serve_ref},
      {"serve: 16 clients", Fmt("%.0f runs/s", serve.concurrent_runs_per_second), "-", "-", "-", true},
      // The target is an agent's: scripts sent a turn apart (kAgentTurn); back to back, the next
      // script's spare starts beside the last script on the same two CPUs (the row kept as before).
      {"mcp: run_script", Latency(mcp.back_to_back), Us(mcp_ref) + " ping+cold+warm",
       Fmt("%.2fx", mcp.back_to_back.Median() / mcp_ref), "-", true},
      {"mcp: run_script, agent pace", Latency(mcp.run_script), Us(mcp_ref) + " ping+cold+warm",
       Fmt("%.2fx", mcp.run_script.Median() / mcp_ref), "<= 1.5x", mcp.run_script.Median() <= 1.5 * mcp_ref},
      {"durable: resume, 1,000 calls", Latency(durable.resume),
       Us(durable.live.Median()) + " the run live", Fmt("%.2fx", durable.resume.Median() / durable.live.Median()),
       "-", true},
      {"durable: calls replayed", Fmt("%.0f /s", durable.calls / (durable.resume.Median() / 1e6)), "-", "-", "-", true},
      {"cold start to welcome", Latency(cold), Us(spawn_ref) + " fork+exec", Fmt("%.2fx", cold.Median() / spawn_ref),
       "<= 1.5x", cold.Median() <= 1.5 * spawn_ref},
      {"pool throughput (defaults)", Fmt("%.0f /s", tp.activations_per_second), "-", "-", ">= 50000 /s",
       tp.activations_per_second >= 50000},  // issue 30's target
      {"idle worker RSS", Fmt("%.0f KiB", static_cast<double>(warm.idle_worker_rss_kib)), "-", "-", "< 2048 KiB",
       warm.idle_worker_rss_kib < 2048},
      {"parent RSS, 10x the calls", Fmt("%.0f KiB", static_cast<double>(mem.late_rss_kib)),
       Fmt("%.0f KiB", static_cast<double>(mem.early_rss_kib)) + " at a tenth",
       Fmt("%.2fx", static_cast<double>(mem.late_rss_kib) / static_cast<double>(mem.early_rss_kib)), "<= 1.10x",
       mem.late_rss_kib <= mem.early_rss_kib * 11 / 10},
  };
  std::printf("\n%-28s %-26s %-26s %-7s %-12s %s\n", "figure", "measured p50 (p99)", "reference p50", "ratio",
              "target", "");
  for (const Row& r : rows)
    std::printf("%-28s %-26s %-26s %-7s %-12s %s\n", r.figure.c_str(), r.measured.c_str(), r.reference.c_str(),
                r.ratio.c_str(), r.target.c_str(), r.met ? "met" : "MISSED");
  std::error_code ec;
  if (own_work_dir) std::filesystem::remove_all(o.work_dir, ec);
  return 0;
}
