// The `basal` command as an operator runs it: stdout, stderr and exit codes.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>

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

TEST_F(CliTest, HelpOnEveryCommand) {
  for (const char* c : {"--help", "run --help", "journal --help", "doctor --help"}) {
    auto r = RunCommand(dir_, c);
    EXPECT_EQ(r.exit_code, 0) << c << r.err;
    EXPECT_NE(r.out.find("Usage"), std::string::npos) << c << r.out;
  }
}

}  // namespace
}  // namespace basal::testing
