// `basal secret set|list|rm` as an operator uses it (the real binary): a value from a pipe or typed
// on a terminal without echo, never from argv and never printed; names listed, values not; the
// bounds on stdin; rm; refusals of directories that are not owner-only; the default place beside
// the journal; and no journal touched.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "integration/test_support.h"

namespace basal::testing {
namespace {

namespace fs = std::filesystem;
using std::string_literals::operator""s;

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

class SecretCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir();
    db_ = dir_ + "/j.db";
    secrets_ = dir_ + "/secrets";
  }
  void TearDown() override { fs::remove_all(dir_); }
  // `basal secret ARGS --db DIR/j.db`, stdin from `input` (a shell command's output) or /dev/null.
  BasalRun Secret(const std::string& args, const std::string& input = "") {
    return RunBasal(dir_, "secret " + args, (input.empty() ? "" : input + " | ") + "XDG_STATE_HOME=" + dir_ + "/state ",
                    (input.empty() ? " </dev/null" : ""));
  }
  std::string Db() const { return " --db " + db_; }
  std::string dir_, db_, secrets_;
};

TEST_F(SecretCliTest, SetFromAPipeStoresTheValueOwnerOnlyAndListShowsOnlyTheName) {
  const BasalRun set = Secret("set example_token" + Db(), "printf '%s\\n' 'tok-SEKRIT-123'");
  EXPECT_EQ(set.exit_code, 0) << set.err;
  EXPECT_EQ(set.out, "stored secret example_token in " + secrets_ + "\n");
  EXPECT_EQ(set.err, "");
  // The trailing newline that printf (or echo) adds is not part of the value.
  EXPECT_EQ(Slurp(secrets_ + "/example_token"), "tok-SEKRIT-123");
  EXPECT_EQ(ModeOf(secrets_), 0700u);
  EXPECT_EQ(ModeOf(secrets_ + "/example_token"), 0600u);
  ASSERT_EQ(Secret("set other" + Db(), "printf 'o'").exit_code, 0);

  const BasalRun list = Secret("list" + Db());
  EXPECT_EQ(list.exit_code, 0) << list.err;
  EXPECT_EQ(list.out, "example_token\nother\n");
  const BasalRun json = Secret("list --json" + Db());
  EXPECT_EQ(json.exit_code, 0) << json.err;
  EXPECT_EQ(json.out, "{\"name\":\"example_token\"}\n{\"name\":\"other\"}\n");
  for (const BasalRun* r : {&set, &list, &json}) {
    EXPECT_EQ(r->out.find("SEKRIT"), std::string::npos) << r->out;
    EXPECT_EQ(r->err.find("SEKRIT"), std::string::npos) << r->err;
  }
  // Nothing about secrets is journaled: the secret commands never open the journal.
  EXPECT_FALSE(fs::exists(db_));
}

TEST_F(SecretCliTest, SetReplacesAValue) {
  ASSERT_EQ(Secret("set t" + Db(), "printf 'first'").exit_code, 0);
  ASSERT_EQ(Secret("set t" + Db(), "printf 'second\\r\\n'").exit_code, 0);  // CRLF, as a Windows editor saves
  EXPECT_EQ(Slurp(secrets_ + "/t"), "second");
  EXPECT_EQ(Secret("list" + Db()).out, "t\n");
}

TEST_F(SecretCliTest, TheValueCannotBeGivenOnTheCommandLine) {
  for (const std::string args : {"set t SEKRIT", "set t --value SEKRIT", "set t --value=SEKRIT", "set --from SEKRIT t"}) {
    const BasalRun r = Secret(args + Db(), "printf 'piped'");
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.err;
    EXPECT_TRUE(r.err.starts_with("basal: usage: ")) << r.err;
    EXPECT_EQ(r.out, "");
  }
  EXPECT_FALSE(fs::exists(secrets_ + "/t"));
  const BasalRun help = Secret("set --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_EQ(help.out.find("--value"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("never taken from the command line"), std::string::npos) << help.out;
}

TEST_F(SecretCliTest, BadValuesAreRefusedWithoutBeingShown) {
  struct Case {
    std::string input;
    std::string says;
  } cases[] = {
      {"printf 'SEKRIT\\nline two\\n'", "a line feed (LF) at byte 7 of 15"},
      {"printf 'SEKRIT\\n\\n'", "a line feed (LF) at byte 7 of 7"},  // exactly one line ending is stripped
      {"printf 'SEKRIT\\r\\nX-Injected: 1'", "a carriage return (CR) at byte 7"},
      {"printf 'SEKRIT\\033[2J'", "the control character 0x1b at byte 7"},
      {"printf ''", "no value for secret t on stdin"},
      {"printf '\\n'", "no value for secret t on stdin"},
      {"head -c 8193 /dev/zero | tr '\\0' v", "the value is 8193 bytes; the limit is 8192"},
  };
  for (const Case& c : cases) {
    const BasalRun r = Secret("set t" + Db(), c.input);
    EXPECT_EQ(r.exit_code, 2) << c.input << ": " << r.err;
    EXPECT_TRUE(r.err.starts_with("basal: usage: ")) << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.input << ": " << r.err;
    EXPECT_EQ(r.err.find("SEKRIT"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(r.out, "");
  }
  EXPECT_FALSE(fs::exists(secrets_ + "/t"));
  // The largest value there may be is stored, with its newline stripped.
  const BasalRun largest = Secret("set t" + Db(), "{ head -c 8192 /dev/zero | tr '\\0' v; echo; }");
  EXPECT_EQ(largest.exit_code, 0) << largest.err;
  EXPECT_EQ(Slurp(secrets_ + "/t"), std::string(8192, 'v'));
}

TEST_F(SecretCliTest, AnEndlessStdinIsCutOffAtTheBound) {
  // `yes` never ends: basal must stop reading after the bound (8192 bytes and a line ending) and
  // refuse, rather than wait for the end or hold it all.
  const BasalRun r = Secret("set t" + Db(), "yes SEKRIT");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("stdin holds more than 8192 bytes and a line ending"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(secrets_ + "/t"));
}

TEST_F(SecretCliTest, BadNamesAreUsageErrors) {
  for (const std::string& name : {"1abc"s, "a-b"s, "../escape"s, "'a b'"s, std::string(65, 'n')}) {
    const BasalRun r = Secret("set " + name + Db(), "printf v");
    EXPECT_EQ(r.exit_code, 2) << name;
    EXPECT_NE(r.err.find("a letter or _, then letters, digits or _, at most 64 bytes"), std::string::npos) << r.err;
    EXPECT_EQ(Secret("rm " + name + Db()).exit_code, 2) << name;
  }
  EXPECT_FALSE(fs::exists(dir_ + "/escape"));
  EXPECT_FALSE(fs::exists(secrets_));
}

TEST_F(SecretCliTest, RmRemovesAndSaysWhenThereIsNothing) {
  const BasalRun none = Secret("rm t" + Db());
  EXPECT_EQ(none.exit_code, 3);
  EXPECT_TRUE(none.err.starts_with("basal: secret: secret t is not stored: no secrets directory " + secrets_)) << none.err;
  ASSERT_EQ(Secret("set t" + Db(), "printf v").exit_code, 0);
  ASSERT_EQ(Secret("set u" + Db(), "printf w").exit_code, 0);
  const BasalRun rm = Secret("rm t" + Db());
  EXPECT_EQ(rm.exit_code, 0) << rm.err;
  EXPECT_EQ(rm.out, "removed secret t from " + secrets_ + "\n");
  EXPECT_FALSE(fs::exists(secrets_ + "/t"));
  EXPECT_EQ(Secret("list" + Db()).out, "u\n");
  const BasalRun again = Secret("rm t" + Db());
  EXPECT_EQ(again.exit_code, 3);
  EXPECT_EQ(again.err, "basal: secret: secret t is not stored in " + secrets_ +
                           " (basal secret list shows the stored names)\n");
}

TEST_F(SecretCliTest, ListOfNothingSaysSoAndCreatesNothing) {
  const BasalRun r = Secret("list" + Db());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "no secret is stored in " + secrets_ + " (basal secret set NAME stores one)\n");
  EXPECT_EQ(Secret("list --json" + Db()).out, "");
  EXPECT_FALSE(fs::exists(secrets_));
}

TEST_F(SecretCliTest, ADirectoryOrFileOthersMayReadIsRefused) {
  ASSERT_EQ(Secret("set t" + Db(), "printf v").exit_code, 0);
  ASSERT_EQ(::chmod(secrets_.c_str(), 0755), 0);
  for (const std::string args : {"list", "set u", "rm t"}) {
    const BasalRun r = Secret(args + Db(), "printf v");
    EXPECT_EQ(r.exit_code, 3) << args;
    EXPECT_EQ(r.err, "basal: secret: secrets directory " + secrets_ +
                         " has mode 0755: group or others may access it; secrets must be owner-only: run chmod 700 " +
                         secrets_ + "\n")
        << args;
  }
  ASSERT_EQ(::chmod(secrets_.c_str(), 0700), 0);
  ASSERT_EQ(::chmod((secrets_ + "/t").c_str(), 0644), 0);
  const BasalRun file = Secret("list" + Db());
  EXPECT_EQ(file.exit_code, 3);
  EXPECT_NE(file.err.find("run chmod 600 " + secrets_ + "/t"), std::string::npos) << file.err;
  ASSERT_EQ(::chmod((secrets_ + "/t").c_str(), 0600), 0);
  EXPECT_EQ(Secret("list" + Db()).out, "t\n");
}

TEST_F(SecretCliTest, TheDefaultPlaceIsBesideTheDefaultJournalAndSecretsOverridesIt) {
  const BasalRun set = RunBasal(dir_, "secret set t", "printf v | XDG_STATE_HOME=" + dir_ + "/state ");
  EXPECT_EQ(set.exit_code, 0) << set.err;
  EXPECT_EQ(Slurp(dir_ + "/state/basal/secrets/t"), "v");
  EXPECT_EQ(ModeOf(dir_ + "/state/basal"), 0700u);
  const BasalRun elsewhere = Secret("set t --secrets " + dir_ + "/mine", "printf w");
  EXPECT_EQ(elsewhere.exit_code, 0) << elsewhere.err;
  EXPECT_EQ(Slurp(dir_ + "/mine/t"), "w");
  EXPECT_EQ(Secret("list --secrets " + dir_ + "/mine").out, "t\n");
}

TEST_F(SecretCliTest, HelpHasExamples) {
  const BasalRun help = Secret("--help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("Examples (from the repository's root):\n  basal secret set example_token < "
                          "examples/example_token.txt\n"),
            std::string::npos)
      << help.out;
  EXPECT_EQ(RunBasal(dir_, "help secret").out, help.out);
  EXPECT_EQ(RunBasal(dir_, "help secret set").out, Secret("set --help").out);
}

// On a terminal the value is typed without echo, after a prompt on stderr.
TEST_F(SecretCliTest, OnATerminalTheValueIsReadWithoutEcho) {
  int master = -1;
  const pid_t pid = ::forkpty(&master, nullptr, nullptr, nullptr);
  ASSERT_GE(pid, 0) << std::strerror(errno);
  if (pid == 0) {
    const std::string secrets = secrets_;
    ::execl(BASAL_CLI_PATH, BASAL_CLI_PATH, "secret", "set", "typed", "--secrets", secrets.c_str(), nullptr);
    _exit(127);
  }
  std::string seen;
  auto read_until = [&](const std::string& what) {
    char buf[4096];
    while (seen.find(what) == std::string::npos) {
      pollfd p{master, POLLIN, 0};
      if (::poll(&p, 1, 60000) <= 0) return false;
      const ssize_t n = ::read(master, buf, sizeof buf);
      if (n <= 0) return false;
      seen.append(buf, static_cast<size_t>(n));
    }
    return true;
  };
  ASSERT_TRUE(read_until("(typing is not shown; Enter ends it): ")) << seen;
  // Echo is off before the prompt is written, so what is typed now is not echoed.
  const std::string typed = "SEKRIT-typed\n";
  ASSERT_EQ(::write(master, typed.data(), typed.size()), static_cast<ssize_t>(typed.size()));
  read_until("stored secret typed");  // reads to the end of what basal prints
  char rest[4096];
  for (ssize_t n; (n = ::read(master, rest, sizeof rest)) > 0;) seen.append(rest, static_cast<size_t>(n));
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ::close(master);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << seen;
  EXPECT_EQ(seen.find("SEKRIT"), std::string::npos) << "the typed value was echoed: " << seen;
  EXPECT_NE(seen.find("Value of secret typed (typing is not shown; Enter ends it): "), std::string::npos) << seen;
  EXPECT_EQ(Slurp(secrets_ + "/typed"), "SEKRIT-typed");
}

}  // namespace
}  // namespace basal::testing
