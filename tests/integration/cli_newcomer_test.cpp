// The `basal` command as a newcomer first meets it (issue 12, point 8): --version and help, a named
// unknown command, examples in every --help that really run, --logs, `basal check`, exit codes that
// tell the flow's failure from basal's own, and a directory or FIFO refused as a file.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <sstream>

#include "integration/test_support.h"

namespace basal::testing {
namespace {

using std::string_literals::operator""s;

using Cli = BasalRun;

// Runs `basal <args>` through sh (for quoting) in `cwd`, with XDG_STATE_HOME under `state` so that
// the default journal never is the user's.
Cli BasalAsNewcomer(const std::string& dir, const std::string& args, const std::string& cwd = "") {
  return RunBasal(dir, args, (cwd.empty() ? "" : "cd " + cwd + " && ") + "XDG_STATE_HOME=" + dir + "/state ");
}

size_t CountLines(const std::string& text) { return static_cast<size_t>(std::count(text.begin(), text.end(), '\n')); }

// No byte sequence a terminal would act on.
void NewcomerExpectNothingRaw(const std::string& output, const std::string& what) {
  for (const auto& [name, bytes] : std::initializer_list<std::pair<const char*, std::string>>{
           {"ESC", "\x1b"}, {"U+009B", "\xc2\x9b"}, {"DEL", "\x7f"}, {"NUL", "\0"s}, {"U+202E", "\xe2\x80\xae"}})
    EXPECT_EQ(output.find(bytes), std::string::npos) << what << " prints " << name << " raw:\n" << output;
}

class CliNewcomerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir();
    WriteFile(dir_ + "/m.json", "{}");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

// ---- version and help ----

TEST_F(CliNewcomerTest, VersionNamesBasalAndTheWorkersEngine) {
  const Cli r = BasalAsNewcomer(dir_, "--version");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // "basal MAJOR.MINOR.PATCH (REVISION)\n" first, the revision "git HASH[+dirty]" or why there is
  // none (tests/package/revision_test.py checks it). std::regex is avoided: GCC 12's
  // -Wmaybe-uninitialized misfires inside <regex> in the asan build.
  std::string first = r.out.substr(0, r.out.find('\n'));
  const size_t open = first.find(" (");
  EXPECT_TRUE(open != std::string::npos && first.ends_with(")")) << r.out;
  first = first.substr(0, open);
  int parts = 0;
  bool digits = false, shaped = first.rfind("basal ", 0) == 0 && r.out.find('\n') != std::string::npos;
  for (size_t i = 6; shaped && i <= first.size(); ++i) {
    if (i == first.size() || first[i] == '.') {
      shaped = digits;
      ++parts;
      digits = false;
    } else {
      shaped = first[i] >= '0' && first[i] <= '9';
      digits = true;
    }
  }
  EXPECT_TRUE(shaped && parts == 3) << r.out;
  EXPECT_NE(r.out.find("worker engine: QuickJS 2021-03-27"), std::string::npos) << r.out;
  EXPECT_EQ(r.err, "");
}

TEST_F(CliNewcomerTest, HelpPrintsWhatDashDashHelpPrints) {
  const Cli whole = BasalAsNewcomer(dir_, "help");
  EXPECT_EQ(whole.exit_code, 0) << whole.err;
  EXPECT_EQ(whole.out, BasalAsNewcomer(dir_, "--help").out);
  EXPECT_NE(whole.out.find("Usage: basal"), std::string::npos) << whole.out;
  for (const char* command : {"run", "check", "journal", "doctor", "health", "help"}) {
    const Cli help = BasalAsNewcomer(dir_, "help "s + command);
    EXPECT_EQ(help.exit_code, 0) << command << ": " << help.err;
    EXPECT_NE(help.out.find("Usage: basal "s + command), std::string::npos) << help.out;
    EXPECT_EQ(help.out, BasalAsNewcomer(dir_, command + " --help"s).out) << command;
  }
  // A subcommand's help, and a subcommand that does not exist.
  const Cli approve = BasalAsNewcomer(dir_, "help flow approve");
  EXPECT_EQ(approve.exit_code, 0) << approve.err;
  EXPECT_NE(approve.out.find("Usage: basal flow approve"), std::string::npos) << approve.out;
  EXPECT_EQ(approve.out, BasalAsNewcomer(dir_, "flow approve --help").out);
  const Cli unknown = BasalAsNewcomer(dir_, "help flow frob");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_EQ(unknown.err,
            "basal: usage: unknown command \"basal flow frob\" (commands of basal flow: approve, list, show, diff, "
            "revoke; see basal help flow)\n");
}

TEST_F(CliNewcomerTest, NoCommandPrintsTheShortHelpAndExitsTwo) {
  const Cli r = BasalAsNewcomer(dir_, "");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("Usage: basal COMMAND [OPTIONS]\nCommands: run, check, journal, runs, tail, doctor, health, flow, "
                       "policy, secret, kv, serve, mcp, token, schedule, replay, help\n"),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(r.err.ends_with("\nbasal: usage: a command is required (see basal help)\n")) << r.err;
}

TEST_F(CliNewcomerTest, AnUnknownCommandIsNamed) {
  const std::string expected =
      "basal: usage: unknown command \"frob\" (commands: run, check, journal, runs, tail, doctor, health, flow, "
      "policy, secret, kv, serve, mcp, token, schedule, replay, help; see basal help)\n";
  for (const char* args : {"frob", "frob --help", "help frob"}) {
    const Cli r = BasalAsNewcomer(dir_, args);
    EXPECT_EQ(r.exit_code, 2) << args;
    EXPECT_EQ(r.err, expected) << args;
    EXPECT_EQ(r.out, "") << args;
  }
  // The name is the operator's, but it is shown escaped all the same.
  const Cli hostile = BasalAsNewcomer(dir_, "\"$(printf 'fr\\033[2Job\\nbasal: ok')\"");
  EXPECT_EQ(hostile.exit_code, 2);
  EXPECT_EQ(CountLines(hostile.err), 1u) << hostile.err;
  NewcomerExpectNothingRaw(hostile.err, "an unknown command");
  EXPECT_NE(hostile.err.find("\"fr\\x1b[2Job\\nbasal: ok\""), std::string::npos) << hostile.err;
  // A known command still parses, and an unknown flag is still a usage error.
  EXPECT_EQ(BasalAsNewcomer(dir_, "health").exit_code, 0);
  EXPECT_EQ(BasalAsNewcomer(dir_, "journal --frob").exit_code, 2);
}

// Every --help ends with "Examples", and each example runs and exits 0 (from a copy of the
// repository's examples/, with a journal of the test's own).
TEST_F(CliNewcomerTest, EveryHelpEndsWithExamplesThatWork) {
  const std::string root = dir_ + "/repo";
  std::filesystem::create_directories(root);
  std::filesystem::copy(std::string(BASAL_SOURCE_DIR) + "/examples", root + "/examples",
                        std::filesystem::copy_options::recursive);
  const std::string header = "Examples (from the repository's root):\n";
  std::vector<std::string> examples;  // in the order shown: a later one may use what an earlier one made
  for (const char* command : {"", "run", "check", "journal", "doctor", "health", "flow", "policy", "secret", "kv", "help"}) {
    const Cli help = BasalAsNewcomer(dir_, command + " --help"s);
    ASSERT_EQ(help.exit_code, 0) << command;
    const size_t at = help.out.rfind(header);
    ASSERT_NE(at, std::string::npos) << "basal " << command << " --help has no examples:\n" << help.out;
    std::istringstream lines(help.out.substr(at + header.size()));
    std::string line;
    size_t count = 0;
    while (std::getline(lines, line)) {
      if (line.empty()) continue;
      ASSERT_EQ(line.rfind("  basal ", 0), 0u) << "basal " << command << " --help: after its examples: " << line;
      if (std::find(examples.begin(), examples.end(), line.substr(8)) == examples.end())
        examples.push_back(line.substr(8));
      ++count;
    }
    EXPECT_GE(count, 1u) << command;
  }
  // What the journal examples read must exist: the run example first.
  const Cli first = BasalAsNewcomer(dir_, "run examples/hello.js --manifest examples/hello.manifest.json --input '{\"name\":\"x\"}'",
                                    root);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  for (const std::string& example : examples) {
    const Cli r = BasalAsNewcomer(dir_, example, root);
    EXPECT_EQ(r.exit_code, 0) << "basal " << example << "\nstdout:\n" << r.out << "stderr:\n" << r.err;
    EXPECT_FALSE(r.out.empty()) << "basal " << example;
  }
}

// ---- exit codes ----

TEST_F(CliNewcomerTest, ExitCodesTellTheFlowsFailureFromBasalsOwn) {
  WriteFile(dir_ + "/ok.js", "export default (i) => i");
  WriteFile(dir_ + "/throws.js", "export default () => { throw new Error('boom'); }");
  const std::string db = " --db " + dir_ + "/j.db";
  struct Case {
    std::string args;
    int exit_code;
    std::string err_prefix;
  } cases[] = {
      {"run " + dir_ + "/ok.js --manifest " + dir_ + "/m.json --input 1" + db, 0, ""},
      {"run " + dir_ + "/throws.js --manifest " + dir_ + "/m.json" + db, 1, "basal: script_error: Error: boom"},
      {"run " + dir_ + "/missing.js --manifest " + dir_ + "/m.json" + db, 3, "basal: io: cannot read flow "},
      {"run " + dir_ + "/ok.js --manifest " + dir_ + "/ok.js" + db, 3, "basal: manifest: " + dir_ + "/ok.js: "},
      {"run " + dir_ + "/ok.js --manifest " + dir_ + "/m.json --input '{nope'" + db, 2,
       "basal: usage: --input is not valid JSON: "},
      {"check " + dir_ + "/ok.js", 2, "basal: usage: --manifest is required (see basal help check)\n"},
      {"journal --db " + dir_ + "/none.db", 3, "basal: io: no journal at "},
      {"check " + dir_ + "/ok.js --manifest " + dir_ + "/m.json", 0, ""},
      {"check " + dir_ + "/missing.js --manifest " + dir_ + "/m.json", 3, "basal: io: "},
  };
  for (const Case& k : cases) {
    const Cli r = BasalAsNewcomer(dir_, k.args);
    EXPECT_EQ(r.exit_code, k.exit_code) << k.args << "\n" << r.err;
    EXPECT_EQ(r.err.rfind(k.err_prefix, 0), 0u) << k.args << "\n" << r.err;
  }
}

// ---- files that are not files ----

TEST_F(CliNewcomerTest, ADirectoryOrAFifoIsRefusedNotReadAsEmpty) {
  WriteFile(dir_ + "/ok.js", "export default (i) => i");
  std::filesystem::create_directory(dir_ + "/flow.js");
  ASSERT_EQ(mkfifo((dir_ + "/fifo").c_str(), 0600), 0);  // no writer: opening it to read would block
  const std::string ok = dir_ + "/ok.js --manifest " + dir_ + "/m.json --db " + dir_ + "/j.db";
  struct Case {
    std::string args;
    std::string err;
  } cases[] = {
      {"run " + dir_ + "/flow.js --manifest " + dir_ + "/m.json", dir_ + "/flow.js: is a directory; give the flow's file"},
      {"check " + dir_ + "/flow.js --manifest " + dir_ + "/m.json", dir_ + "/flow.js: is a directory; give the flow's file"},
      {"run " + dir_ + "/ok.js --manifest " + dir_, dir_ + ": is a directory; give the manifest's file"},
      {"run " + dir_ + "/ok.js --manifest " + dir_ + "/fifo", dir_ + "/fifo: is a FIFO (named pipe); give the manifest's file"},
      {"run " + dir_ + "/fifo --manifest " + dir_ + "/m.json", dir_ + "/fifo: is a FIFO (named pipe); give the flow's file"},
      {"run " + ok + " --inputs " + dir_, dir_ + ": is a directory; give a JSON Lines file, or - to read standard input"},
      {"run " + ok + " --inputs /dev/null", "/dev/null: is a character device; give a JSON Lines file, or - to read standard input"},
  };
  for (const Case& k : cases) {
    const Cli r = BasalAsNewcomer(dir_, k.args);
    EXPECT_EQ(r.exit_code, 3) << k.args;
    EXPECT_EQ(r.err, "basal: io: " + k.err + "\n") << k.args;
  }
  // The allowed paths: regular files, and standard input for --inputs.
  EXPECT_EQ(BasalAsNewcomer(dir_, "run " + ok + " --input 5").out, "5\n");
  const Cli piped = BasalAsNewcomer(dir_, "run " + ok + " --inputs - < " + dir_ + "/m.json");
  EXPECT_EQ(piped.exit_code, 0) << piped.err;
  EXPECT_NE(piped.out.find("\"ok\":{}"), std::string::npos) << piped.out;
}

// ---- basal check ----

TEST_F(CliNewcomerTest, CheckReportsASyntaxErrorWithFileAndLine) {
  const std::string flow = dir_ + "/bad.js";
  WriteFile(flow, "// line 1\nexport default (input) => {\n  let x = ;\n};\n");
  const Cli r = BasalAsNewcomer(dir_, "check " + flow + " --manifest " + dir_ + "/m.json");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, flow + ":3: SyntaxError: unexpected token in expression: ';'\n");
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/state/basal/journal.db")) << "check journals nothing";
}

TEST_F(CliNewcomerTest, CheckPassesAFlowThatLoadsWithoutCallingIt) {
  const std::string flow = dir_ + "/spin.js";
  // Called, the default export would spin until its CPU budget ends it.
  WriteFile(flow, "export default () => { for (;;) {} };");
  WriteFile(dir_ + "/spin.json", R"({"budgets": {"cpu_ms": 100}})");
  const Cli r = BasalAsNewcomer(dir_, "check " + flow + " --manifest " + dir_ + "/spin.json");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, dir_ + "/spin.json: a valid manifest\n" + flow +
                       ": loads in a confined worker; its default export is a function (not called)\n");
  EXPECT_EQ(r.err, "");
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/state/basal/journal.db")) << "check journals nothing";
}

TEST_F(CliNewcomerTest, CheckNamesTheBadManifestKeyAndOtherLoadFailures) {
  WriteFile(dir_ + "/ok.js", "export default () => 1");
  WriteFile(dir_ + "/typo.json", R"({"grants": {}, "budget": {}})");
  const Cli manifest = BasalAsNewcomer(dir_, "check " + dir_ + "/ok.js --manifest " + dir_ + "/typo.json");
  EXPECT_EQ(manifest.exit_code, 3);
  EXPECT_EQ(manifest.err.rfind("basal: manifest: " + dir_ + "/typo.json: ", 0), 0u) << manifest.err;
  EXPECT_NE(manifest.err.find("\"budget\""), std::string::npos) << manifest.err;

  WriteFile(dir_ + "/top.js", "const x = 1;\nthrow new Error('top\\nbasal: ok');\nexport default () => x;");
  const Cli top = BasalAsNewcomer(dir_, "check " + dir_ + "/top.js --manifest " + dir_ + "/m.json");
  EXPECT_EQ(top.exit_code, 1);
  EXPECT_EQ(top.err.rfind("basal: script_error: flow top.js failed to load: Error: top\\nbasal: ok\n", 0), 0u)
      << top.err;
  EXPECT_NE(top.err.find("(top.js:2)"), std::string::npos) << "the stack says where:\n" << top.err;
  EXPECT_EQ(top.err.find("\nbasal: ok"), std::string::npos) << "a forged line:\n" << top.err;
}

// The worker's words (a syntax error's name and message) cannot act on the terminal or forge a line.
TEST_F(CliNewcomerTest, CheckShowsAWorkersLoadErrorEscaped) {
  const std::string worker = dir_ + "/fake-worker--hostile_load_error";
  std::filesystem::create_symlink(BASAL_FAKE_WORKER_PATH, worker);
  WriteFile(dir_ + "/ok.js", "export default () => 1");
  const Cli r = BasalAsNewcomer(dir_, "check " + dir_ + "/ok.js --manifest " + dir_ + "/m.json --worker " + worker);
  EXPECT_EQ(r.exit_code, 1);
  NewcomerExpectNothingRaw(r.err, "basal check");
  EXPECT_EQ(r.err, dir_ + "/ok.js:7: Syntax\\x1b[31mError: \\x1b[2J \\u009b \\x7f \\x00 \\u202e caf\xc3\xa9\\nbasal: ok\n");
}

// ---- run --inputs loads the flow once ----

TEST_F(CliNewcomerTest, RunInputsReportsASyntaxErrorOnceAndRunsNoLine) {
  const std::string flow = dir_ + "/bad.js";
  WriteFile(flow, "export default (input) => {\n  return input +;\n};\n");
  WriteFile(dir_ + "/in.jsonl", "1\n2\n3\n4\n");
  const Cli r =
      BasalAsNewcomer(dir_, "run " + flow + " --manifest " + dir_ + "/m.json --inputs " + dir_ + "/in.jsonl --db " + dir_ + "/j.db");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "") << "no line ran";
  EXPECT_EQ(r.err, flow + ":2: SyntaxError: unexpected token in expression: ';'\n");
  const Cli journal = BasalAsNewcomer(dir_, "journal --json --db " + dir_ + "/j.db");
  EXPECT_EQ(journal.exit_code, 0) << journal.err;
  EXPECT_EQ(journal.out, "") << "nothing was journaled";

  // One activation of the same flow says where the error is, in its one line.
  const Cli one = BasalAsNewcomer(dir_, "run " + flow + " --manifest " + dir_ + "/m.json --input 1 --db " + dir_ + "/j.db");
  EXPECT_EQ(one.exit_code, 1);
  EXPECT_EQ(one.err.rfind("basal: script_error: flow bad.js failed to load: bad.js:2: SyntaxError: unexpected token "
                          "in expression: ';' (activation 1)\n",
                          0),
            0u)
      << one.err;

  // The allowed path: a flow that loads runs every line, on the worker the check loaded it on.
  WriteFile(dir_ + "/good.js", "let loads = 0; loads += 1; export default (i) => ({i, loads});");
  const Cli good = BasalAsNewcomer(dir_, "run " + dir_ + "/good.js --manifest " + dir_ + "/m.json --inputs " + dir_ +
                                   "/in.jsonl --db " + dir_ + "/j.db --health-out " + dir_ + "/h.json");
  EXPECT_EQ(good.exit_code, 0) << good.err;
  EXPECT_EQ(CountLines(good.out), 4u) << good.out;
  EXPECT_NE(good.out.find("{\"i\":4,\"loads\":1}"), std::string::npos) << good.out;
  std::ifstream h(dir_ + "/h.json");
  EXPECT_EQ(nlohmann::json::parse(h)["spawned"], 1);
}

// ---- run --logs ----

// A running basal with its stderr on a pipe the test reads.
class RunningBasal {
 public:
  explicit RunningBasal(const std::vector<std::string>& args) {
    int err[2];
    if (pipe2(err, O_CLOEXEC) != 0) ADD_FAILURE() << "pipe2";
    pid_ = fork();
    if (pid_ == 0) {
      const int null = open("/dev/null", O_RDWR);
      dup2(null, 0);
      dup2(null, 1);
      dup2(err[1], 2);
      std::vector<char*> argv;
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(err[1]);
    err_ = err[0];
  }
  ~RunningBasal() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (err_ >= 0) close(err_);
  }
  // Reads stderr until `text` has arrived (or stderr closes); returns all read so far.
  const std::string& ReadUntil(const std::string& text) {
    char buf[4096];
    while (seen_.find(text) == std::string::npos) {
      const ssize_t n = read(err_, buf, sizeof buf);
      if (n <= 0) break;
      seen_.append(buf, static_cast<size_t>(n));
    }
    return seen_;
  }
  bool StillRunning() { return waitpid(pid_, &status_, WNOHANG) == 0; }
  int Stop(int sig) {
    kill(pid_, sig);
    ReadUntil("\x01never");  // to EOF
    waitpid(pid_, &status_, 0);
    pid_ = -1;
    return WIFEXITED(status_) ? WEXITSTATUS(status_) : -1;
  }
  const std::string& seen() const { return seen_; }

 private:
  pid_t pid_ = -1;
  int err_ = -1;
  int status_ = 0;
  std::string seen_;
};

TEST_F(CliNewcomerTest, RunLogsPrintsEachConsoleLineEscapedAsItHappens) {
  // Logs a line that would clear the screen and forge a line of basal's, a line past the 1 KiB log
  // budget, a line within it, then spins: every printed line must be out while it still runs. The
  // worker sends queued calls when the script waits (docs/protocol.md), so it awaits its last log.
  WriteFile(dir_ + "/spin.js", R"(export default async (input, host) => {
  console.info("first \x1b[2J\u202e\nbasal: ok");
  console.warn("x".repeat(2000));
  await host.call("log", {level: "log", message: "second " + JSON.stringify({n: input})});
  for (;;) {}
};)");
  WriteFile(dir_ + "/spin.json", R"({"budgets": {"cpu_ms": 120000, "deadline_ms": 120000, "log_kb": 1}})");
  RunningBasal basal({BASAL_CLI_PATH, "run", dir_ + "/spin.js", "--manifest", dir_ + "/spin.json", "--input", "7", "--db",
                      dir_ + "/j.db", "--logs"});
  const std::string second = "[activation 1] log: second {\"n\":7}\n";
  const std::string& seen = basal.ReadUntil(second);
  ASSERT_NE(seen.find(second), std::string::npos) << seen;
  EXPECT_TRUE(basal.StillRunning()) << "the lines came before the activation ended";
  EXPECT_EQ(seen, "[activation 1] info: first \\x1b[2J\\u202e\\nbasal: ok\n" + second)
      << "the line past the log budget is dropped, not printed";
  NewcomerExpectNothingRaw(seen, "basal run --logs");
  EXPECT_EQ(basal.Stop(SIGTERM), 128 + SIGTERM);

  // Without --logs, the console lines are journaled only.
  WriteFile(dir_ + "/quiet.js", "export default () => { console.log('journaled only'); return 1; }");
  const Cli quiet = BasalAsNewcomer(dir_, "run " + dir_ + "/quiet.js --manifest " + dir_ + "/m.json --db " + dir_ + "/j.db");
  EXPECT_EQ(quiet.exit_code, 0) << quiet.err;
  EXPECT_EQ(quiet.err, "");
  EXPECT_NE(BasalAsNewcomer(dir_, "journal --db " + dir_ + "/j.db").out.find("journaled only"), std::string::npos);
}

}  // namespace
}  // namespace basal::testing
