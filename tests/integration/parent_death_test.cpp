// A worker never outlives the parent that started it: `--parent-pid` is required and checked, and
// a basal killed by SIGKILL takes its busy workers with it (docs/sandbox.md, docs/protocol.md).
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "integration/test_support.h"

namespace basal::testing {
namespace {

using std::chrono::steady_clock;

constexpr int kWorkerExitUsage = 64;
constexpr int kWorkerExitParentGone = 69;

TEST(WorkerParentPid, AnotherParentThanTheOneNamedExitsParentGone) {
  // The worker's parent is this test process; any other pid stands for a parent that died before
  // the worker set its death signal (getppid() would then be a reaper's).
  const std::string named = std::to_string(getpid() + 1);
  const Ended e = RunToEnd({BASAL_WORKER_PATH, "--parent-pid", named});
  EXPECT_TRUE(ExitedWith(e, kWorkerExitParentGone)) << "status " << e.status << ": " << e.err;
  EXPECT_EQ(e.err, "ck-basal-worker: parent " + named + " is gone (the parent is now " + std::to_string(getpid()) +
                       "): exiting\n");
}

TEST(WorkerParentPid, MissingOrGarbageParentPidIsAUsageError) {
  const std::vector<std::vector<std::string>> bad = {
      {},
      {"--parent-pid"},
      {"--parent-pid", ""},
      {"--parent-pid", "abc"},
      {"--parent-pid", "12a"},
      {"--parent-pid", " 12"},
      {"--parent-pid", "+12"},
      {"--parent-pid", "-12"},
      {"--parent-pid", "0"},
      {"--parent-pid", "1"},
      {"--parent-pid", "2147483648"},            // one above INT_MAX: pid_t overflows
      {"--parent-pid", "99999999999999999999999"},  // overflows every integer type
      {"--parent-pid=" + std::to_string(getpid())},
      {"--parent-pid", std::to_string(getpid()), "--parent-pid", std::to_string(getpid())},
      {"--parent-pid", std::to_string(getpid()), "extra"},
      {"extra", "--parent-pid", std::to_string(getpid())},
      // --uid and --gid: together, once each, decimal ids from 1 to 4294967294
      {"--parent-pid", std::to_string(getpid()), "--uid", "65534"},
      {"--parent-pid", std::to_string(getpid()), "--gid", "65534"},
      {"--parent-pid", std::to_string(getpid()), "--uid", "0", "--gid", "65534"},
      {"--parent-pid", std::to_string(getpid()), "--uid", "65534", "--gid", "0"},
      {"--parent-pid", std::to_string(getpid()), "--uid", "4294967295", "--gid", "65534"},  // (uid_t)-1
      {"--parent-pid", std::to_string(getpid()), "--uid", "4294967297", "--gid", "65534"},  // would wrap to 1
      {"--parent-pid", std::to_string(getpid()), "--uid", "-1", "--gid", "65534"},
      {"--parent-pid", std::to_string(getpid()), "--uid", "nobody", "--gid", "65534"},
      {"--parent-pid", std::to_string(getpid()), "--uid", "65534", "--gid", "65534", "--uid", "65534"},
      {"--parent-pid", std::to_string(getpid()), "--uid"},
      // --address-space-limit BYTES (1 MiB to 2^62) and --cpu-limit SOFT:HARD (1 <= SOFT <= HARD <= 2^62)
      {"--parent-pid", std::to_string(getpid()), "--address-space-limit", "1048575"},
      {"--parent-pid", std::to_string(getpid()), "--address-space-limit", "4611686018427387905"},
      {"--parent-pid", std::to_string(getpid()), "--address-space-limit", "1e9"},
      {"--parent-pid", std::to_string(getpid()), "--address-space-limit", "335544320", "--address-space-limit", "335544320"},
      {"--parent-pid", std::to_string(getpid()), "--cpu-limit", "2"},
      {"--parent-pid", std::to_string(getpid()), "--cpu-limit", "0:10"},
      {"--parent-pid", std::to_string(getpid()), "--cpu-limit", "11:10"},
      {"--parent-pid", std::to_string(getpid()), "--cpu-limit", "2:-1"},
      {"--parent-pid", std::to_string(getpid()), "--cpu-limit", "2:10", "--cpu-limit", "2:10"},
      // --started-ahead: once at most, no value
      {"--parent-pid", std::to_string(getpid()), "--started-ahead", "--started-ahead"},
      {"--parent-pid", std::to_string(getpid()), "--started-ahead=1"},
  };
  for (const auto& args : bad) {
    std::vector<std::string> argv = {BASAL_WORKER_PATH};
    argv.insert(argv.end(), args.begin(), args.end());
    std::string shown;
    for (const auto& a : args) shown += " [" + a + "]";
    const Ended e = RunToEnd(argv);
    EXPECT_TRUE(ExitedWith(e, kWorkerExitUsage)) << shown << ": status " << e.status << ": " << e.err;
    EXPECT_EQ(e.err.rfind("ck-basal-worker: ", 0), 0u) << shown << ": " << e.err;
    EXPECT_EQ(std::count(e.err.begin(), e.err.end(), '\n'), 1) << shown << ": " << e.err;
  }
}

// How many activations of the journal have their `log` call recorded: each such worker is past
// its confinement (welcome), has its flow loaded and is spinning in the script.
size_t SpinningActivations(const std::string& db) {
  auto journal = OpenSqliteReader(db);
  if (!journal) return 0;
  auto rows = (*journal)->Activations(std::nullopt, 100);
  if (!rows) return 0;
  size_t n = 0;
  for (const ActivationRow& a : *rows) {
    auto calls = (*journal)->Calls(a.id);
    if (calls && !calls->empty()) ++n;
  }
  return n;
}

class ParentDeathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir();
    // Orphaned workers are reparented to this process, so it can reap them and see how they died
    // (a zombie's /proc entry would otherwise linger under a reaper that may never wait).
    ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0) << std::strerror(errno);
  }
  void TearDown() override {
    for (pid_t pid : leftover_) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0);
    std::filesystem::remove_all(dir_);
  }
  std::string dir_;
  std::set<pid_t> leftover_;
};

TEST_F(ParentDeathTest, SigkilledBasalTakesItsBusyWorkersWithIt) {
  // The awaited `log` call is journaled before the worker gets its answer and starts to spin (a
  // console.log would wait in the worker's buffer until the script yields, which it never does).
  WriteFile(dir_ + "/spin.js",
            "export default async (input, host) => {"
            "  await host.call('log', {level: 'info', message: 'spinning'}); for (;;) {} }");
  WriteFile(dir_ + "/m.json", R"({"budgets":{"cpu_ms":600000,"deadline_ms":600000}})");
  WriteFile(dir_ + "/in.jsonl", "{}\n{}\n{}\n");
  const std::string db = dir_ + "/j.db";
  const std::vector<std::string> args = {BASAL_CLI_PATH,    "run",      dir_ + "/spin.js", "--manifest",  dir_ + "/m.json",
                                         "--inputs",        dir_ + "/in.jsonl", "--concurrency", "3", "--db", db,
                                         "--worker",        BASAL_WORKER_PATH};
  const pid_t basal = fork();
  ASSERT_GE(basal, 0);
  if (basal == 0) {
    const int null = open("/dev/null", O_RDWR);
    dup2(null, 0);
    dup2(null, 1);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  leftover_.insert(basal);

  // Not a time limit on basal: a guard so that a broken run fails instead of hanging the suite.
  const auto give_up = steady_clock::now() + std::chrono::seconds(60);
  std::set<pid_t> workers;
  while (steady_clock::now() < give_up) {
    workers = ChildrenOf(basal);
    if (workers.size() == 3 && SpinningActivations(db) == 3) break;
    ASSERT_EQ(waitpid(basal, nullptr, WNOHANG), 0) << "basal ended before its three workers ran";
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(workers.size(), 3u) << "three workers never ran";
  ASSERT_EQ(SpinningActivations(db), 3u) << "three activations never reached their loop";
  leftover_.insert(workers.begin(), workers.end());

  const auto killed = steady_clock::now();
  ASSERT_EQ(kill(basal, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(basal, &status, 0), basal);
  leftover_.erase(basal);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

  // basal's exit reparented its workers to this subreaper and sent each its death signal.
  const auto deadline = killed + std::chrono::seconds(1);
  std::set<pid_t> alive = workers;
  while (!alive.empty() && steady_clock::now() < deadline) {
    for (auto it = alive.begin(); it != alive.end();) {
      int ws = 0;
      if (waitpid(*it, &ws, WNOHANG) == *it) {
        EXPECT_TRUE(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL) << "worker " << *it << " ended with status " << ws;
        leftover_.erase(*it);
        it = alive.erase(it);
      } else {
        ++it;
      }
    }
    if (!alive.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const auto took = std::chrono::duration_cast<std::chrono::microseconds>(steady_clock::now() - killed);
  EXPECT_TRUE(alive.empty()) << alive.size() << " of 3 workers still alive 1 s after basal's SIGKILL";
  std::cout << "[ measured ] the three workers were reaped " << took.count() << " us after basal's SIGKILL\n";
}

}  // namespace
}  // namespace basal::testing
