// The `basal` command as an operator runs it: stdout, stderr and exit codes.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "integration/test_support.h"

namespace basal::testing {
namespace {

struct CommandResult {
  int exit_code;
  std::string out;
  std::string err;
};

CommandResult RunCommand(const std::string& dir, const std::string& args) {
  const std::string err_path = dir + "/stderr.txt";
  const std::string cmd = std::string(BASAL_CLI_PATH) + " " + args + " 2>" + err_path;
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = pclose(p);
  std::ifstream e(err_path);
  std::string err((std::istreambuf_iterator<char>(e)), std::istreambuf_iterator<char>());
  return {WEXITSTATUS(status), out, err};
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = MakeTempDir(); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(CliTest, RunPrintsOneLineOfJsonAndJournalShowsIt) {
  WriteFile(dir_ + "/f.js", "export default async (input, host) => { console.log('x'); return {n: input.n + 1}; }");
  WriteFile(dir_ + "/m.json", "{}");
  auto r = RunCommand(dir_, "run " + dir_ + "/f.js --manifest " + dir_ + "/m.json --input '{\"n\":41}' --db " + dir_ + "/j.db");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "{\"n\":42}\n");
  auto j = RunCommand(dir_, "journal --db " + dir_ + "/j.db --json");
  EXPECT_EQ(j.exit_code, 0) << j.err;
  auto line = nlohmann::json::parse(j.out.substr(0, j.out.find('\n')));
  EXPECT_EQ(line["outcome"], "ok");
  EXPECT_EQ(line["calls"].size(), 1u);
}

TEST_F(CliTest, FailurePrintsKindAndMessageOnStderrAndExitsOne) {
  WriteFile(dir_ + "/f.js", "export default () => { throw new Error('boom'); }");
  WriteFile(dir_ + "/m.json", "{}");
  auto r = RunCommand(dir_, "run " + dir_ + "/f.js --manifest " + dir_ + "/m.json --db " + dir_ + "/j.db");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err.rfind("basal: script_error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("boom"), std::string::npos);
}

TEST_F(CliTest, ManifestTypoIsNamed) {
  WriteFile(dir_ + "/f.js", "export default () => 1");
  WriteFile(dir_ + "/m.json", R"({"grants": {}, "budget": {}})");
  auto r = RunCommand(dir_, "run " + dir_ + "/f.js --manifest " + dir_ + "/m.json --db " + dir_ + "/j.db");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("\"budget\""), std::string::npos) << r.err;
}

std::vector<nlohmann::json> JsonLines(const std::string& text) {
  std::vector<nlohmann::json> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

TEST_F(CliTest, InputsRunThroughThePoolAndPrintInInputOrder) {
  WriteFile(dir_ + "/f.js",
            "let n = 0; export default (input) => { n += 1; if (input.fail) throw new Error('line ' + input.i);"
            " return {i: input.i, n}; }");
  WriteFile(dir_ + "/m.json", "{}");
  WriteFile(dir_ + "/in.jsonl", "{\"i\":0}\n{\"i\":1}\n{not json\n\n{\"i\":3,\"fail\":true}\n{\"i\":4}\n");
  const std::string common = "run " + dir_ + "/f.js --manifest " + dir_ + "/m.json --inputs " + dir_ +
                             "/in.jsonl --db " + dir_ + "/j.db --health-out " + dir_ + "/h.json";

  // One at a time: one worker runs every activation (its counter says so).
  auto serial = RunCommand(dir_, common);
  EXPECT_EQ(serial.exit_code, 1) << "one line failed";
  auto lines = JsonLines(serial.out);
  ASSERT_EQ(lines.size(), 5u) << serial.out;
  EXPECT_EQ(lines[0]["ok"], nlohmann::json::parse(R"({"i":0,"n":1})"));
  EXPECT_EQ(lines[1]["ok"], nlohmann::json::parse(R"({"i":1,"n":2})"));
  EXPECT_TRUE(lines[2]["activation"].is_null());
  EXPECT_EQ(lines[2]["error"]["kind"], "invalid_input");
  EXPECT_NE(lines[2]["error"]["message"].get<std::string>().find("line 3"), std::string::npos) << lines[2];
  EXPECT_EQ(lines[3]["error"]["kind"], "script_error");
  EXPECT_NE(lines[3]["error"]["message"].get<std::string>().find("line 3"), std::string::npos) << lines[3];
  EXPECT_EQ(lines[4]["ok"], nlohmann::json::parse(R"({"i":4,"n":4})"));
  for (size_t k : {0u, 1u, 3u, 4u}) EXPECT_TRUE(lines[k]["activation"].is_number_integer()) << lines[k];
  EXPECT_LT(lines[0]["activation"], lines[4]["activation"]);
  std::ifstream h1(dir_ + "/h.json");
  auto health = nlohmann::json::parse(h1);
  EXPECT_EQ(health["spawned"], 1);
  EXPECT_EQ(health["activations"]["ok"], 3);
  EXPECT_EQ(health["activations"]["failed_by_kind"]["script_error"], 1);
  EXPECT_EQ(health["workers"]["per_flow"]["f.js"]["idle"], 1);

  // Two at a time: two workers, and the output is still in input order.
  auto wide = RunCommand(dir_, common + " --concurrency 2");
  auto wide_lines = JsonLines(wide.out);
  ASSERT_EQ(wide_lines.size(), 5u) << wide.out;
  for (size_t k : {0u, 1u, 4u}) EXPECT_EQ(wide_lines[k]["ok"]["i"], k) << wide_lines[k];
  std::ifstream h2(dir_ + "/h.json");
  EXPECT_EQ(nlohmann::json::parse(h2)["spawned"], 2);
}

TEST_F(CliTest, HelpOnEveryCommand) {
  for (const char* c : {"--help", "run --help", "journal --help", "doctor --help"}) {
    auto r = RunCommand(dir_, c);
    EXPECT_EQ(r.exit_code, 0) << c << r.err;
    EXPECT_NE(r.out.find("Usage"), std::string::npos) << c << r.out;
  }
}

// Runs `basal <args>` (through sh, for quoting) with its stdout on `stdout_fd` and SIGPIPE at its
// default, as a shell would start it; stderr is captured. The exit code is -signal on a signal.
CommandResult RunWithStdout(const std::string& dir, const std::string& args, int stdout_fd) {
  const std::string err_path = dir + "/stderr.txt";
  const std::string cmd = "exec " + std::string(BASAL_CLI_PATH) + " " + args + " 2>" + err_path;
  const pid_t pid = fork();
  if (pid == 0) {
    signal(SIGPIPE, SIG_DFL);
    dup2(stdout_fd, STDOUT_FILENO);
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  std::ifstream e(err_path);
  std::string err((std::istreambuf_iterator<char>(e)), std::istreambuf_iterator<char>());
  return {WIFSIGNALED(status) ? -WTERMSIG(status) : WEXITSTATUS(status), "", err};
}

class CliOutputTest : public CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    WriteFile(dir_ + "/f.js", "export default (input) => ({n: input.n})");
    WriteFile(dir_ + "/m.json", "{}");
    WriteFile(dir_ + "/in.jsonl", "{\"n\":1}\n{\"n\":2}\n");
    run_ = "run " + dir_ + "/f.js --manifest " + dir_ + "/m.json --db " + dir_ + "/j.db";
    journal_ = "journal --db " + dir_ + "/j.db";
    // A journal with something to print.
    auto r = RunCommand(dir_, run_ + " --input '{\"n\":1}'");
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  std::vector<std::string> Commands() const {
    return {run_ + " --input '{\"n\":1}'", run_ + " --inputs " + dir_ + "/in.jsonl", journal_, journal_ + " --json",
            "health", "doctor", "--help"};
  }
  std::string run_;
  std::string journal_;
};

TEST_F(CliOutputTest, StdoutOnAFullDeviceIsAnIoErrorAndExitOne) {
  const int full = open("/dev/full", O_WRONLY | O_CLOEXEC);
  ASSERT_GE(full, 0) << std::strerror(errno);
  for (const std::string& c : Commands()) {
    const CommandResult r = RunWithStdout(dir_, c, full);
    EXPECT_EQ(r.exit_code, 1) << c << ": " << r.err;
    EXPECT_NE(r.err.find("basal: io: stdout: No space left on device\n"), std::string::npos) << c << ": " << r.err;
  }
  close(full);
}

TEST_F(CliOutputTest, StdoutOnAPipeWithNoReaderIsAnIoErrorNotASignal) {
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  close(p[0]);  // like `basal journal | head -1` once head has gone
  for (const std::string& c : Commands()) {
    const CommandResult r = RunWithStdout(dir_, c, p[1]);
    EXPECT_EQ(r.exit_code, 1) << c << " (a negative code is a signal): " << r.err;
    EXPECT_NE(r.err.find("basal: io: stdout: Broken pipe\n"), std::string::npos) << c << ": " << r.err;
  }
  close(p[1]);
}

TEST_F(CliOutputTest, AHealthReportThatCannotBeWrittenIsAnIoErrorAndExitOne) {
  const int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
  const CommandResult r = RunWithStdout(dir_, run_ + " --input '{\"n\":1}' --health-out /dev/full", null);
  close(null);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.err, "basal: io: cannot write health report /dev/full: write: No space left on device\n");
}

}  // namespace
}  // namespace basal::testing
