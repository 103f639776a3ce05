// `basal run` on SIGINT, SIGTERM and SIGHUP: its workers are killed, every activation still
// running or queued is journaled as cancelled, and it exits 128 + the signal (130, 143, 129).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <fstream>
#include <thread>

#include "integration/test_support.h"

namespace basal::testing {
namespace {

class CliSignalTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override { dir_ = MakeTempDir(); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

// Activations whose first (awaited) log call is journaled: their worker is spinning in the script.
size_t Spinning(const std::string& db) {
  auto reader = OpenSqliteReader(db);
  if (!reader) return 0;
  auto rows = (*reader)->Activations(std::nullopt, 100);
  if (!rows) return 0;
  size_t n = 0;
  for (const auto& a : *rows) {
    auto calls = (*reader)->Calls(a.id);
    n += calls && !calls->empty();
  }
  return n;
}

TEST_P(CliSignalTest, CancelsWhatRunsJournalsItAndExitsWith128PlusTheSignal) {
  const int sig = GetParam();
  const std::string db = dir_ + "/j.db";
  WriteFile(dir_ + "/spin.js",
            "export default async (i, host) => { await host.call('log', {level: 'log', message: 'spinning'}); for (;;) {} }");
  WriteFile(dir_ + "/m.json", R"({"budgets": {"cpu_ms": 600000, "deadline_ms": 600000}})");
  WriteFile(dir_ + "/in.jsonl", "1\n2\n3\n");  // two run, one waits under --max-workers 2
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int err = ::open((dir_ + "/stderr.txt").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(err, 2);
    const int out = ::open((dir_ + "/stdout.txt").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(out, 1);
    execl(BASAL_CLI_PATH, "basal", "run", (dir_ + "/spin.js").c_str(), "--manifest", (dir_ + "/m.json").c_str(),
          "--inputs", (dir_ + "/in.jsonl").c_str(), "--concurrency", "3", "--max-workers", "2", "--db", db.c_str(),
          nullptr);
    _exit(127);
  }
  for (int i = 0; i < 1000 && Spinning(db) < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(Spinning(db), 2u);
  ASSERT_EQ(kill(pid, sig), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "basal died by a signal instead of exiting";
  EXPECT_EQ(WEXITSTATUS(status), 128 + sig);

  auto reader = OpenSqliteReader(db);
  ASSERT_TRUE(reader);
  auto rows = (*reader)->Activations(std::nullopt, 100);
  ASSERT_TRUE(rows);
  ASSERT_EQ(rows->size(), 3u);
  for (const auto& a : *rows) {
    EXPECT_EQ(a.outcome, "cancelled") << a.id;
    EXPECT_NE(a.error_json.find(sigabbrev_np(sig)), std::string::npos) << a.error_json;
  }
  std::ifstream out(dir_ + "/stdout.txt");
  std::string text((std::istreambuf_iterator<char>(out)), {});
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 3) << "one line per input: " << text;
  EXPECT_NE(text.find("\"cancelled\""), std::string::npos) << text;
}

INSTANTIATE_TEST_SUITE_P(Signals, CliSignalTest, ::testing::Values(SIGINT, SIGTERM, SIGHUP),
                         [](const ::testing::TestParamInfo<int>& i) { return std::string(sigabbrev_np(i.param)); });

}  // namespace
}  // namespace basal::testing
