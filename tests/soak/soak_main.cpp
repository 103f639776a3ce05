// basal-soak: thousands of activations through one Module, ordinary flows mixed with hostile ones
// (log floods, kv amplification, CPU, regexp and memory bombs, deadline kills, throws), while a
// timer SIGKILLs a random worker now and then. At the end it checks that every activation was
// accounted for (health counters, `done` callbacks, the journal's final rows), that the parent's
// peak memory and the journal's size stayed within the bounds computed from the documented limits,
// and that no descriptor, child or zombie is left. Prints the figures; exits 1 if a check failed.
// Not part of ctest: run it through scripts/soak.sh (docs/soak.md).
//
//   basal-soak [--activations N] [--workers N] [--in-flight N] [--seed S] [--kill-every-ms MS]
//              [--mix NAME=W,...] [--journal PATH] [--worker PATH] [--keep-journal] [--max-minutes M]
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "basal/module.h"
#include "parent/host_calls/kv.h"
#include "parent/store/sqlite/sqlite_store.h"
#include "protocol/frame.h"
#include "protocol/messages.h"
#include "soak/soak_flows.h"
#include "soak/soak_proc.h"

namespace basal::soak {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

struct Options {
  uint64_t activations = 10'000;
  size_t workers = 4;
  size_t in_flight = 16;  // submitted and not yet done: more than the workers, so some queue
  uint64_t seed = 1;
  std::chrono::milliseconds kill_every{1000};  // 0: no random SIGKILLs
  std::map<std::string, unsigned> mix;         // flow name -> weight, overriding the defaults
  std::string journal;                         // empty: a fresh one in a temporary directory
  std::string worker = BASAL_WORKER_PATH;
  bool keep_journal = false;
  double max_minutes = 30;                     // then the run is stopped and fails
};

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr,
               "basal-soak: %s\nusage: basal-soak [--activations N] [--workers N] [--in-flight N] [--seed S]\n"
               "                  [--kill-every-ms MS] [--mix NAME=W,...] [--journal PATH] [--worker PATH]\n"
               "                  [--keep-journal] [--max-minutes M]\n",
               why.c_str());
  std::exit(64);
}

uint64_t ParseCount(const std::string& flag, const std::string& text, uint64_t min) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || text[0] == '-' || v < min)
    Usage(flag + " takes an integer of at least " + std::to_string(min) + " (got \"" + text + "\")");
  return v;
}

Options ParseOptions(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) Usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "--activations") {
      o.activations = ParseCount(a, value(), 1);
    } else if (a == "--workers") {
      o.workers = ParseCount(a, value(), 1);
    } else if (a == "--in-flight") {
      o.in_flight = ParseCount(a, value(), 1);
    } else if (a == "--seed") {
      o.seed = ParseCount(a, value(), 0);
    } else if (a == "--kill-every-ms") {
      o.kill_every = std::chrono::milliseconds(ParseCount(a, value(), 0));
    } else if (a == "--mix") {
      std::string spec = value();
      size_t start = 0;
      while (start <= spec.size()) {
        const size_t comma = std::min(spec.find(',', start), spec.size());
        const std::string item = spec.substr(start, comma - start);
        const size_t eq = item.find('=');
        if (eq == std::string::npos || eq == 0) Usage("--mix takes NAME=WEIGHT,... (got \"" + item + "\")");
        o.mix[item.substr(0, eq)] = static_cast<unsigned>(ParseCount("--mix " + item.substr(0, eq), item.substr(eq + 1), 0));
        start = comma + 1;
      }
    } else if (a == "--journal") {
      o.journal = value();
    } else if (a == "--worker") {
      o.worker = value();
    } else if (a == "--keep-journal") {
      o.keep_journal = true;
    } else if (a == "--max-minutes") {
      o.max_minutes = static_cast<double>(ParseCount(a, value(), 1));
    } else {
      Usage("unknown argument " + a);
    }
  }
  return o;
}

// One check of the end report: what was compared, and whether it held.
struct Check {
  std::string name;
  bool ok;
  std::string detail;
};

// What the soak keeps of each activation: little, so that its own memory does not blur the
// parent's peak (a result is looked at when `done` runs, then dropped).
struct Submitted {
  size_t flow = 0;
  ActivationId id = 0;
  int done_calls = 0;      // -1: Submit refused it
  Outcome outcome = Outcome::kOk;
  uint64_t input_bytes = 0;
};

// A soak.late call waiting for its time to be answered.
struct LateReply {
  Clock::time_point due;
  HostCallReply reply;
};

std::string Kib(uint64_t kib) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(kib) / 1024.0);
  return buf;
}

std::string Bytes(uint64_t bytes) {
  char buf[64];
  if (bytes >= (1u << 20)) {
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  } else {
    std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(bytes) / 1024.0);
  }
  return buf;
}

bool EndAdmitted(const SoakFlow& flow, const ActivationResult& r) {
  for (const ExpectedEnd& e : flow.ends)
    if (e.outcome == r.outcome && (!e.budget || e.budget == r.budget)) return true;
  return false;
}

std::string EndName(const ActivationResult& r) {
  std::string s = OutcomeName(r.outcome);
  if (r.budget) s += std::string(" (") + BudgetName(*r.budget) + ")";
  return s;
}

// The endings as the `done` callbacks saw them, tallied as they arrive.
struct Tally {
  std::map<std::string, uint64_t> by_outcome;             // outcome name -> count
  std::vector<std::map<std::string, uint64_t>> per_flow;  // flow -> "outcome (budget)" -> count
  uint64_t unexpected = 0, wrong_details = 0, crashed_by_us = 0, misread_kills = 0;
  uint64_t logs_dropped = 0, amp_quota_refusals = 0, amp_list_refusals = 0, cpu_outcomes = 0, regexp_cpu_outcomes = 0;
  std::string first_unexpected, first_wrong, first_misread;

  void Add(size_t flow_index, const SoakFlow& f, const Json& input, const ActivationResult& r,
           const std::set<pid_t>& killed) {
    by_outcome[OutcomeName(r.outcome)]++;
    per_flow[flow_index][EndName(r)]++;
    logs_dropped += static_cast<uint64_t>(r.logs_dropped);
    const std::string who = f.name + " activation " + std::to_string(r.activation_id) + ": ";
    // A worker the soak killed must end its activation as worker_crashed naming SIGKILL. Its
    // message does not name the pid; a protocol violation's does ("worker PID: ..."), which is
    // how a kill that the parent took for a protocol violation is told apart from a real one.
    if (r.outcome == Outcome::kWorkerCrashed && r.message.find("SIGKILL") != std::string::npos) {
      ++crashed_by_us;
      return;
    }
    if (r.outcome == Outcome::kProtocolViolation && r.message.rfind("worker ", 0) == 0 &&
        killed.count(static_cast<pid_t>(std::strtol(r.message.c_str() + 7, nullptr, 10)))) {
      if (misread_kills++ == 0) first_misread = who + r.message;
      return;
    }
    if (!EndAdmitted(f, r)) {
      if (unexpected++ == 0) first_unexpected = who + EndName(r) + ": " + r.message;
      return;
    }
    if (f.name == "kv_amp" && r.ok() && r.result.is_object()) {
      const Json& out = r.result;
      if (out.value("refused", 0) > 0 && out["last_error"].is_string() &&
          out["last_error"].get_ref<const std::string&>().rfind("QuotaExceeded", 0) == 0)
        ++amp_quota_refusals;
      if (out["list_error"].is_string() && out["list_error"].get_ref<const std::string&>().rfind("RangeError", 0) == 0)
        ++amp_list_refusals;
    }
    if (r.outcome == Outcome::kBudgetExhausted && r.budget == Budget::kCpu) {
      ++cpu_outcomes;
      regexp_cpu_outcomes += f.name == "regexp_bomb";
    }
    if (auto bad = f.check(input, r)) {
      if (wrong_details++ == 0) first_wrong = who + *bad;
    }
  }
};

int Run(const Options& o) {
  std::vector<SoakFlow> flows = MakeFlows();
  for (const auto& [name, weight] : o.mix) {
    auto it = std::find_if(flows.begin(), flows.end(), [&](const SoakFlow& f) { return f.name == name; });
    if (it == flows.end()) Usage("--mix: no flow named " + name);
    it->weight = weight;
  }
  unsigned total_weight = 0;
  for (const SoakFlow& f : flows) total_weight += f.weight;
  if (total_weight == 0) Usage("--mix leaves every weight at 0");

  std::string dir;
  std::string journal = o.journal;
  if (journal.empty()) {
    std::string t = (std::filesystem::temp_directory_path() / "basal-soak-XXXXXX").string();
    if (!mkdtemp(t.data())) {
      std::perror("basal-soak: mkdtemp");
      return 1;
    }
    dir = t;
    journal = dir + "/journal.db";
  } else if (std::filesystem::exists(journal)) {
    std::fprintf(stderr, "basal-soak: %s exists: the checks need a fresh journal\n", journal.c_str());
    return 64;
  }

  const int fds_before = OpenDescriptors();
  const uint64_t rss_before_kib = SelfStatusKib("VmRSS");
  std::vector<Check> checks;
  auto check = [&checks](std::string name, bool ok, std::string detail) {
    checks.push_back({std::move(name), ok, std::move(detail)});
  };

  ModuleOptions mo;
  mo.journal_path = journal;
  mo.worker_path = o.worker;
  mo.max_workers = o.workers;
  const ModuleOptions limits = mo;  // the limits the bounds below are computed from
  auto opened = Module::Open(std::move(mo));
  if (!opened) {
    std::fprintf(stderr, "basal-soak: Module::Open: %s\n", opened.error().message.c_str());
    return 1;
  }
  std::unique_ptr<Module> module = std::move(*opened);

  std::vector<LateReply> late;
  {
    HostCallSpec spec;
    spec.name = kLateCallName;
    spec.effect = Effect::kPure;
    spec.handler = [&late](const HostCallContext&, const Json& args, HostCallReply reply) {
      const int64_t ms = args.is_object() ? args.value("ms", int64_t{0}) : 0;
      late.push_back({Clock::now() + std::chrono::milliseconds(ms), std::move(reply)});
    };
    if (auto r = module->registry().Register(std::move(spec)); !r) {
      std::fprintf(stderr, "basal-soak: register %s: %s\n", kLateCallName, r.error().message.c_str());
      return 1;
    }
  }
  std::vector<FlowRef> refs;
  std::vector<Budgets> budgets;  // each flow's, as its manifest set them (for the bounds)
  for (const SoakFlow& f : flows) {
    auto ref = module->AddFlow(f.name + ".js", f.source, f.manifest);
    if (!ref) {
      std::fprintf(stderr, "basal-soak: AddFlow %s: %s\n", f.name.c_str(), ref.error().message.c_str());
      return 1;
    }
    budgets.push_back((*ref)->manifest.budgets());
    refs.push_back(*ref);
  }

  std::printf("basal-soak: %" PRIu64 " activations, max_workers %zu, %zu in flight, seed %" PRIu64
              ", a SIGKILL every %lld ms, journal %s\n",
              o.activations, o.workers, o.in_flight, o.seed, static_cast<long long>(o.kill_every.count()),
              journal.c_str());
  std::printf("machine: %ld CPUs, load average at start %s\n", sysconf(_SC_NPROCESSORS_ONLN),
              [] {
                FILE* f = std::fopen("/proc/loadavg", "r");
                static char buf[64] = "?";
                if (f) {
                  if (!std::fgets(buf, sizeof buf, f)) std::strcpy(buf, "?");
                  std::fclose(f);
                  buf[std::strcspn(buf, "\n")] = '\0';
                }
                return buf;
              }());
  std::fflush(stdout);

  Rng mix_rng(o.seed);
  Rng input_rng(o.seed ^ 0x9e3779b97f4a7c15ull);
  Rng kill_rng(o.seed ^ 0xc2b2ae3d27d4eb4full);
  std::vector<Submitted> subs;
  subs.reserve(o.activations);
  std::map<size_t, Json> inputs;  // of activations not yet done (their flow's check reads them)
  Tally tally;
  tally.per_flow.resize(flows.size());
  uint64_t done = 0, submit_errors = 0, done_for_unknown = 0;
  std::string first_submit_error;
  uint64_t kills_sent = 0, kills_of_running = 0;
  std::set<pid_t> killed;                // the pids the soak sent SIGKILL
  std::map<pid_t, uint64_t> last_ticks;  // children's CPU at the previous kill tick
  uint64_t journal_peak_bytes = 0;
  auto journal_bytes = [&journal] { return FileBytes(journal) + FileBytes(journal + "-wal") + FileBytes(journal + "-shm"); };

  const auto t0 = Clock::now();
  const auto give_up = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.max_minutes * 60));
  auto next_kill = t0 + o.kill_every;
  auto next_sample = t0;
  auto next_progress = t0 + std::chrono::seconds(10);
  bool stalled = false;

  while (done < o.activations) {
    while (subs.size() < o.activations && subs.size() - done < o.in_flight) {
      uint64_t pick = mix_rng() % total_weight;
      size_t fi = 0;
      while (pick >= flows[fi].weight) pick -= flows[fi++].weight;
      Submitted s;
      s.flow = fi;
      Json input = flows[fi].input(subs.size(), input_rng);
      s.input_bytes = input.dump().size();
      const size_t index = subs.size();
      auto id = module->Submit(refs[fi], input, [&, index](const ActivationResult& r) {
        if (index >= subs.size()) {
          ++done_for_unknown;
          return;
        }
        Submitted& mine = subs[index];
        if (mine.done_calls++ == 0) {
          mine.outcome = r.outcome;
          tally.Add(mine.flow, flows[mine.flow], inputs[index], r, killed);
          inputs.erase(index);
          ++done;
        }
      });
      if (!id) {
        if (submit_errors++ == 0) first_submit_error = id.error().message;
        // Nothing was queued and `done` will never run: count it as done so the run ends.
        s.done_calls = -1;
        subs.push_back(std::move(s));
        ++done;
        continue;
      }
      s.id = *id;
      inputs[index] = std::move(input);
      subs.push_back(std::move(s));
    }
    module->RunFor(std::chrono::milliseconds(10));

    const auto now = Clock::now();
    for (auto it = late.begin(); it != late.end();) {
      if (it->due <= now) {
        it->reply.Ok("late");
        it = late.erase(it);
      } else {
        ++it;
      }
    }
    if (o.kill_every.count() > 0 && now >= next_kill) {
      next_kill = now + o.kill_every;
      // Prefer a worker that is running (state R, or its CPU time moved since the last tick): a
      // busy one. Only this thread reaps the module's children, so a pid listed here cannot be
      // reused before the kill.
      std::vector<ChildProcess> all, running;
      std::map<pid_t, uint64_t> ticks;
      for (const ChildProcess& c : Children()) {
        if (c.comm != "ck-basal-worker" || c.state == 'Z') continue;
        all.push_back(c);
        ticks[c.pid] = c.cpu_ticks;
        auto prev = last_ticks.find(c.pid);
        if (c.state == 'R' || (prev != last_ticks.end() && prev->second != c.cpu_ticks)) running.push_back(c);
      }
      last_ticks = std::move(ticks);
      const std::vector<ChildProcess>& pool = running.empty() ? all : running;
      if (!pool.empty()) {
        const ChildProcess& victim = pool[kill_rng() % pool.size()];
        if (::kill(victim.pid, SIGKILL) == 0) {
          ++kills_sent;
          killed.insert(victim.pid);
          if (!running.empty()) ++kills_of_running;
        }
      }
    }
    if (now >= next_sample) {
      next_sample = now + std::chrono::milliseconds(500);
      journal_peak_bytes = std::max(journal_peak_bytes, journal_bytes());
    }
    if (now >= next_progress) {
      next_progress = now + std::chrono::seconds(10);
      const double s = std::chrono::duration<double>(now - t0).count();
      std::fprintf(stderr, "basal-soak: %" PRIu64 "/%" PRIu64 " done in %.0f s (%.1f /s), VmRSS %s, journal %s\n", done,
                   o.activations, s, static_cast<double>(done) / s, Kib(SelfStatusKib("VmRSS")).c_str(),
                   Bytes(journal_bytes()).c_str());
    }
    if (now >= give_up) {
      stalled = true;
      break;
    }
  }
  const auto t_end = Clock::now();
  const double seconds = std::chrono::duration<double>(t_end - t0).count();

  // Answer what still waits, then shut down: every accepted `done` must have run afterwards.
  for (LateReply& l : late) l.reply.Ok("late");
  late.clear();
  module->Shutdown(std::chrono::seconds(10));
  journal_peak_bytes = std::max(journal_peak_bytes, journal_bytes());
  const HealthSnapshot health = module->Health();

  uint64_t done_missing = 0, done_twice = 0;
  for (const Submitted& s : subs) {
    if (s.done_calls == -1) continue;
    if (s.done_calls == 0) ++done_missing;
    if (s.done_calls > 1) ++done_twice;
  }

  module.reset();
  refs.clear();
  const double parent_cpu_s = CpuSeconds(false), workers_cpu_s = CpuSeconds(true);
  const uint64_t peak_rss_kib = PeakRssKib();
  const uint64_t hwm_kib = SelfStatusKib("VmHWM");
  const int fds_after = OpenDescriptors();
  std::vector<ChildProcess> left = Children();
  uint64_t zombies = 0;
  for (const ChildProcess& c : left) zombies += c.state == 'Z';

  // ---- accounting ----
  const uint64_t accepted = subs.size() - submit_errors;
  check("every Submit accepted", submit_errors == 0 && subs.size() == o.activations,
        std::to_string(accepted) + " of " + std::to_string(o.activations) +
            (submit_errors ? ", first error: " + first_submit_error : ""));
  check("the run finished in time", !stalled,
        stalled ? "stopped after " + std::to_string(o.max_minutes) + " min with " + std::to_string(done) + " done" : "");
  check("every done called exactly once", done_missing == 0 && done_twice == 0 && done_for_unknown == 0,
        std::to_string(done_missing) + " never, " + std::to_string(done_twice) + " twice");

  const auto& by_outcome = tally.by_outcome;
  const auto& per_flow = tally.per_flow;
  auto seen = [&by_outcome](const std::string& outcome) -> uint64_t {
    auto it = by_outcome.find(outcome);
    return it == by_outcome.end() ? 0 : it->second;
  };
  const uint64_t unexpected = tally.unexpected, wrong_details = tally.wrong_details, crashed_by_us = tally.crashed_by_us,
                 misread_kills = tally.misread_kills, logs_dropped_in_results = tally.logs_dropped,
                 amp_quota_refusals = tally.amp_quota_refusals, amp_list_refusals = tally.amp_list_refusals,
                 cpu_outcomes = tally.cpu_outcomes, regexp_cpu_outcomes = tally.regexp_cpu_outcomes;
  const std::string &first_unexpected = tally.first_unexpected, &first_wrong = tally.first_wrong,
                    &first_misread = tally.first_misread;
  check("every activation ended as its flow must (those the soak killed aside)", unexpected == 0,
        std::to_string(unexpected) + " unexpected" + (unexpected ? "; first: " + first_unexpected : ""));
  check("ended activations carry the right details", wrong_details == 0,
        std::to_string(wrong_details) + " wrong" + (wrong_details ? "; first: " + first_wrong : ""));
  check("worker_crashed (SIGKILL) only from the soak's SIGKILLs", crashed_by_us <= kills_sent,
        std::to_string(crashed_by_us) + " crashed activations, " + std::to_string(kills_sent) + " SIGKILLs sent");
  check("a worker the soak killed ends its activation as worker_crashed, not protocol_violation", misread_kills == 0,
        std::to_string(misread_kills) + " taken for protocol violations" +
            (misread_kills ? "; first: " + first_misread : ""));

  const uint64_t health_total = health.activations_ok + health.activations_failed_total();
  check("health: ok + failed == activations accepted", health_total == accepted,
        std::to_string(health.activations_ok) + " + " + std::to_string(health.activations_failed_total()) + " = " +
            std::to_string(health_total) + " vs " + std::to_string(accepted));
  {
    bool same = health.activations_ok == seen("ok");
    std::string diff;
    for (const auto& [outcome, n] : health.activations_failed) {
      if (seen(OutcomeName(outcome)) != n) {
        same = false;
        diff += std::string(" ") + OutcomeName(outcome) + ": health " + std::to_string(n) + " vs done " +
                std::to_string(seen(OutcomeName(outcome)));
      }
    }
    for (const auto& [name, n] : by_outcome) {
      auto outcome = ParseOutcome(name);
      if (outcome && *outcome != Outcome::kOk && n > 0 && !health.activations_failed.count(*outcome)) {
        same = false;
        diff += " " + name + ": health 0 vs done " + std::to_string(n);
      }
    }
    check("health by outcome == what the done callbacks saw", same, same ? "" : diff);
  }
  check("health: deadline_kills == deadline outcomes", health.deadline_kills == seen("deadline"),
        std::to_string(health.deadline_kills) + " vs " + std::to_string(seen("deadline")));
  check("health: logs_dropped == the sum of the results' logs_dropped", health.logs_dropped == logs_dropped_in_results,
        std::to_string(health.logs_dropped) + " vs " + std::to_string(logs_dropped_in_results));
  check("health: every regexp bomb was a CPU kill of the parent's, and no more kills than CPU outcomes",
        health.cpu_kills >= regexp_cpu_outcomes && health.cpu_kills <= cpu_outcomes,
        "cpu_kills " + std::to_string(health.cpu_kills) + ", regexp bombs ended for cpu " +
            std::to_string(regexp_cpu_outcomes) + ", all cpu outcomes " + std::to_string(cpu_outcomes));
  check("health: no idle worker used CPU, no worker failed to read its answers",
        health.idle_cpu_kills == 0 && health.output_overflows == 0,
        "idle_cpu_kills " + std::to_string(health.idle_cpu_kills) + ", output_overflows " +
            std::to_string(health.output_overflows));
  {
    // The bounds must have been hit, or the run proved nothing about them.
    const auto weight = [&flows](const char* name) {
      for (const SoakFlow& f : flows)
        if (f.name == name) return f.weight;
      return 0u;
    };
    std::string missed;
    if (weight("log_flood") && health.logs_dropped == 0) missed += " log_kb (no log line dropped);";
    if (weight("kv_amp") && amp_quota_refusals == 0) missed += " kv quota (no put refused with QuotaExceeded);";
    if (weight("kv_amp") && amp_list_refusals == 0) missed += " kv.list's 8 MiB (no list refused);";
    if (weight("regexp_bomb") && health.cpu_kills == 0) missed += " the parent's CPU kill (none);";
    check("the run hit the bounds it is meant to exercise", missed.empty(),
          missed.empty() ? "log_kb, kv quota, kv.list size, CPU kill: " + std::to_string(health.logs_dropped) + ", " +
                               std::to_string(amp_quota_refusals) + ", " + std::to_string(amp_list_refusals) + ", " +
                               std::to_string(health.cpu_kills)
                         : missed);
  }
  {
    uint64_t other_crashes = 0, sigkill_crashes = 0;
    std::string kinds;
    for (const auto& [what, n] : health.crashes) {
      kinds += " " + what + ": " + std::to_string(n);
      if (what == "signal SIGKILL") {
        sigkill_crashes += n;
      } else {
        other_crashes += n;
      }
    }
    check("health: crashes are the soak's SIGKILLs only", other_crashes == 0 && sigkill_crashes <= kills_sent,
          (kinds.empty() ? " none" : kinds) + "; " + std::to_string(kills_sent) + " sent");
  }
  // The kills taken for protocol violations fail their own check above; any other violation fails here.
  check("health: no confinement kill, protocol violation, journal failure, spawn failure or refused welcome",
        health.worker_confinement == 0 && health.protocol_violations == misread_kills && health.journal_failures == 0 &&
            health.spawn_failures == 0 && health.refused_welcomes == 0 && health.confinement_refusals == 0,
        "worker_confinement " + std::to_string(health.worker_confinement) + ", protocol_violations " +
            std::to_string(health.protocol_violations) + " (" + std::to_string(misread_kills) +
            " of them the soak's kills), journal_failures " + std::to_string(health.journal_failures) +
            ", spawn_failures " + std::to_string(health.spawn_failures) + ", refused_welcomes " +
            std::to_string(health.refused_welcomes) + ", confinement_refusals " +
            std::to_string(health.confinement_refusals));

  // ---- the journal: a final row for every activation ----
  // What one activation may journal, from the documented limits: its calls' records up to its
  // journal budget, plus one capped value for each call that may be answered past the budget (the
  // answer that crossed it, or answers arriving after the activation ended: at most
  // calls_in_flight); its row's result or error at most one capped value.
  const uint64_t value_cap = limits.journal_value_max_bytes;
  auto calls_bound = [&](size_t flow) {
    return budgets[flow].journal_bytes + uint64_t{budgets[flow].calls_in_flight} * value_cap;
  };
  uint64_t rows = 0, unfinished = 0, missing_rows = 0, outcome_mismatch = 0, max_calls_bytes = 0, max_calls = 0;
  uint64_t over_calls_bound = 0, over_row_cap = 0, max_row_bytes = 0, max_calls_bytes_bound = 0;
  std::string first_over_calls, first_over_row;
  ActivationId max_calls_bytes_id = 0;
  std::string max_calls_bytes_flow, reader_error;
  {
    auto reader = OpenSqliteReader(journal);
    if (!reader) {
      reader_error = reader.error().message;
    } else {
      auto acts = (*reader)->Activations(std::nullopt, static_cast<size_t>(o.activations) + 1000);
      if (!acts) {
        reader_error = acts.error().message;
      } else {
        std::map<ActivationId, const ActivationRow*> rows_by_id;
        for (const ActivationRow& a : *acts) rows_by_id[a.id] = &a;
        rows = acts->size();
        for (const Submitted& s : subs) {
          if (s.done_calls <= 0) continue;
          auto it = rows_by_id.find(s.id);
          if (it == rows_by_id.end()) {
            ++missing_rows;
            continue;
          }
          const uint64_t row_bytes = it->second->result_json.size() + it->second->error_json.size();
          max_row_bytes = std::max(max_row_bytes, row_bytes);
          if (row_bytes > value_cap && over_row_cap++ == 0)
            first_over_row = flows[s.flow].name + " activation " + std::to_string(s.id) + ": " + Bytes(row_bytes);
          if (it->second->outcome.empty() || !it->second->end_unix_us) {
            ++unfinished;
          } else if (it->second->outcome != OutcomeName(s.outcome)) {
            ++outcome_mismatch;
          }
          auto calls = (*reader)->Calls(s.id);
          if (!calls) {
            reader_error = calls.error().message;
            break;
          }
          uint64_t bytes = 0;
          for (const CallRow& c : *calls) bytes += c.args_json.size() + c.result_json.size() + c.error_json.size();
          max_calls = std::max<uint64_t>(max_calls, calls->size());
          if (bytes > calls_bound(s.flow) && over_calls_bound++ == 0)
            first_over_calls = flows[s.flow].name + " activation " + std::to_string(s.id) + ": " + Bytes(bytes) +
                               " > " + Bytes(calls_bound(s.flow));
          if (bytes > max_calls_bytes) {
            max_calls_bytes = bytes;
            max_calls_bytes_id = s.id;
            max_calls_bytes_flow = flows[s.flow].name;
            max_calls_bytes_bound = calls_bound(s.flow);
          }
        }
      }
    }
  }
  check("journal: a finished row for every activation, with the outcome done saw",
        reader_error.empty() && missing_rows == 0 && unfinished == 0 && outcome_mismatch == 0 && rows == accepted,
        reader_error.empty() ? std::to_string(rows) + " rows, " + std::to_string(missing_rows) + " missing, " +
                                   std::to_string(unfinished) + " unfinished, " + std::to_string(outcome_mismatch) +
                                   " with another outcome"
                             : "reader: " + reader_error);
  check("journal: each activation's calls within its journal budget + calls_in_flight capped values",
        reader_error.empty() && over_calls_bound == 0,
        std::to_string(over_calls_bound) + " over" + (over_calls_bound ? "; first: " + first_over_calls : ""));
  check("journal: each activation's result or error within journal_value_max_bytes", reader_error.empty() && over_row_cap == 0,
        std::to_string(over_row_cap) + " over " + Bytes(value_cap) + (over_row_cap ? "; first: " + first_over_row : ""));
  const int fds_final = OpenDescriptors();

  // ---- bounds on the whole run, from the documented limits ----
  // The parent's memory (docs/sandbox.md, "Limits"): per worker, the frame being read
  // (kDefaultMaxFrameBytes, plus one pass's 1 MiB) and its parsed message (its text, and at most
  // 80 bytes for each of its at most kMaxMessageValues values), the answers waiting for it
  // (worker_output_max_bytes) and the arguments of its activation's calls in flight
  // (calls_in_flight_max_bytes); one kv.list read (kKvListMaxBytes, text and parsed); and 32 MiB
  // for SQLite's page caches, the allocator and the soak's own records.
  const uint64_t per_worker_bytes = 2ull * protocol::kDefaultMaxFrameBytes + (1u << 20) +
                                    80ull * protocol::kMaxMessageValues + limits.worker_output_max_bytes +
                                    limits.calls_in_flight_max_bytes;
  const uint64_t rss_bound_kib =
      rss_before_kib + (o.workers * per_worker_bytes + 2ull * kKvListMaxBytes + (32ull << 20)) / 1024;
  check("parent peak RSS within its bound", std::max(peak_rss_kib, hwm_kib) <= rss_bound_kib,
        Kib(std::max(peak_rss_kib, hwm_kib)) + " <= " + Kib(rss_bound_kib));
  // The journal file: every activation's row (its input and its result or error, each capped,
  // and 512 bytes for the rest) and calls (calls_bound), the kv namespaces' quotas (bytes, and 128 bytes a key), all
  // doubled for B-tree pages that are not full, plus the WAL at its hard limit (kWalHardLimitPages
  // of 4 KiB) and its index.
  uint64_t journal_bound = 0;
  for (const Submitted& s : subs) {
    if (s.done_calls <= 0) continue;
    journal_bound += 512 + std::min(s.input_bytes, value_cap) + value_cap + calls_bound(s.flow);
  }
  journal_bound += (1ull << 20) + 128 * 128;                 // ordinary's kv.put quota
  journal_bound += (12ull << 20) + 64 * 128;                 // kv_amp's kv.put quota
  journal_bound *= 2;
  journal_bound += uint64_t{kWalHardLimitPages} * 4096 + (1u << 20);
  check("journal peak size within its bound", journal_peak_bytes <= journal_bound,
        Bytes(journal_peak_bytes) + " <= " + Bytes(journal_bound));

  // ---- processes and descriptors ----
  check("descriptors back to the count before Open", fds_after == fds_before && fds_final == fds_before,
        std::to_string(fds_before) + " before, " + std::to_string(fds_after) + " after the module, " +
            std::to_string(fds_final) + " after the reader");
  check("no child process or zombie left", left.empty(),
        std::to_string(left.size()) + " children (" + std::to_string(zombies) + " zombies)");

  // ---- the report ----
  std::printf("\nactivations by flow and ending\n");
  for (size_t i = 0; i < flows.size(); ++i) {
    uint64_t n = 0;
    for (const auto& [end, k] : per_flow[i]) n += k;
    std::printf("  %-12s %6" PRIu64 "  ", flows[i].name.c_str(), n);
    bool first = true;
    for (const auto& [end, k] : per_flow[i]) {
      std::printf("%s%s %" PRIu64, first ? "" : ", ", end.c_str(), k);
      first = false;
    }
    std::printf("\n");
  }
  std::printf("\nfigures\n");
  auto row = [](const char* what, const std::string& value) { std::printf("  %-44s %s\n", what, value.c_str()); };
  row("activations submitted / accepted", std::to_string(subs.size()) + " / " + std::to_string(accepted));
  {
    std::string s;
    for (const auto& [name, n] : by_outcome) s += (s.empty() ? "" : ", ") + name + " " + std::to_string(n);
    row("outcomes (done callbacks)", s);
  }
  {
    std::string s = "ok " + std::to_string(health.activations_ok);
    for (const auto& [outcome, n] : health.activations_failed) s += std::string(", ") + OutcomeName(outcome) + " " + std::to_string(n);
    row("outcomes (health)", s);
  }
  row("health: spawned", std::to_string(health.spawned));
  row("health: deadline_kills", std::to_string(health.deadline_kills));
  {
    std::string s;
    for (const auto& [what, n] : health.crashes) s += (s.empty() ? "" : ", ") + what + " " + std::to_string(n);
    row("health: crashes", s.empty() ? "none" : s);
  }
  {
    std::string s;
    for (int i = 0; i < kRetireReasonCount; ++i)
      s += std::string(i ? ", " : "") + RetireReasonName(static_cast<RetireReason>(i)) + " " +
           std::to_string(health.retirements[i]);
    row("health: retirements", s);
  }
  row("health: denied_calls, caught_budget_failures",
      std::to_string(health.denied_calls) + ", " + std::to_string(health.caught_budget_failures));
  row("health: cpu_kills, idle_cpu_kills", std::to_string(health.cpu_kills) + ", " + std::to_string(health.idle_cpu_kills));
  row("health: output_overflows, protocol_violations",
      std::to_string(health.output_overflows) + ", " + std::to_string(health.protocol_violations));
  row("health: logs_dropped", std::to_string(health.logs_dropped));
  row("kv_amp: refused by quota / list refused", std::to_string(amp_quota_refusals) + " / " + std::to_string(amp_list_refusals));
  row("SIGKILLs sent (of a running worker)", std::to_string(kills_sent) + " (" + std::to_string(kills_of_running) + ")");
  char buf[128];
  std::snprintf(buf, sizeof buf, "%.1f s", seconds);
  row("wall time", buf);
  std::snprintf(buf, sizeof buf, "%.1f /s", static_cast<double>(done) / seconds);
  row("activations per second", buf);
  std::snprintf(buf, sizeof buf, "%.1f s / %.1f s", parent_cpu_s, workers_cpu_s);
  row("CPU: parent (soak included) / workers", buf);
  row("parent VmRSS before Open", Kib(rss_before_kib));
  row("parent peak RSS (ru_maxrss / VmHWM)", Kib(peak_rss_kib) + " / " + Kib(hwm_kib) + "   (bound " + Kib(rss_bound_kib) + ")");
  row("journal peak size (db + wal + shm)", Bytes(journal_peak_bytes) + "   (bound " + Bytes(journal_bound) + ")");
  row("largest activation row (result + error)", Bytes(max_row_bytes) + "   (cap " + Bytes(value_cap) + ")");
  row("largest activation's calls in the journal",
      Bytes(max_calls_bytes) + " (activation " + std::to_string(max_calls_bytes_id) + ", " + max_calls_bytes_flow +
          ")   (bound " + Bytes(max_calls_bytes_bound) + ")");
  row("most calls journaled by one activation", std::to_string(max_calls));
  row("descriptors before / after", std::to_string(fds_before) + " / " + std::to_string(fds_final));
  row("children after (zombies)", std::to_string(left.size()) + " (" + std::to_string(zombies) + ")");

  std::printf("\nchecks\n");
  int failed = 0;
  for (const Check& c : checks) {
    std::printf("  %-6s %s%s%s\n", c.ok ? "ok" : "FAILED", c.name.c_str(), c.detail.empty() ? "" : ": ", c.detail.c_str());
    failed += !c.ok;
  }
  std::printf("\nbasal-soak: %s (%d of %zu checks failed)\n", failed ? "FAILED" : "passed", failed, checks.size());

  if (!dir.empty() && !o.keep_journal) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  } else if (o.keep_journal) {
    std::printf("basal-soak: journal kept at %s\n", journal.c_str());
  }
  return failed ? 1 : 0;
}

}  // namespace
}  // namespace basal::soak

int main(int argc, char** argv) { return basal::soak::Run(basal::soak::ParseOptions(argc, argv)); }
