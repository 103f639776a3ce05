// The `basal` command as an operator runs it: stdout, stderr and exit codes.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "integration/test_support.h"

namespace basal::testing {
namespace {

using CommandResult = BasalRun;

CommandResult RunCommand(const std::string& dir, const std::string& args) { return RunBasal(dir, args); }

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

TEST_F(CliTest, ManifestTypoIsNamedAndIsBasalRefusingItsInput) {
  WriteFile(dir_ + "/f.js", "export default () => 1");
  WriteFile(dir_ + "/m.json", R"({"grants": {}, "budget": {}})");
  auto r = RunCommand(dir_, "run " + dir_ + "/f.js --manifest " + dir_ + "/m.json --db " + dir_ + "/j.db");
  EXPECT_EQ(r.exit_code, 3) << "a bad manifest is basal refusing its input, not the flow failing";
  EXPECT_EQ(r.err.rfind("basal: manifest: " + dir_ + "/m.json: ", 0), 0u) << r.err;
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

TEST_F(CliOutputTest, StdoutOnAFullDeviceIsAnIoErrorAndExitThree) {
  const int full = open("/dev/full", O_WRONLY | O_CLOEXEC);
  ASSERT_GE(full, 0) << std::strerror(errno);
  for (const std::string& c : Commands()) {
    const CommandResult r = RunWithStdout(dir_, c, full);
    EXPECT_EQ(r.exit_code, 3) << c << ": " << r.err;
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
    EXPECT_EQ(r.exit_code, 3) << c << " (a negative code is a signal): " << r.err;
    EXPECT_NE(r.err.find("basal: io: stdout: Broken pipe\n"), std::string::npos) << c << ": " << r.err;
  }
  close(p[1]);
}

TEST_F(CliOutputTest, AHealthReportThatCannotBeWrittenIsAnIoErrorAndExitThree) {
  const int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
  const CommandResult r = RunWithStdout(dir_, run_ + " --input '{\"n\":1}' --health-out /dev/full", null);
  close(null);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_EQ(r.err, "basal: io: cannot write health report /dev/full: write: No space left on device\n");
}

// Untrusted text on the operator's terminal (docs/cli.md, "Text from scripts and workers").

using std::string_literals::operator""s;

// What a script can put in a string, and what basal must never print raw: clear the screen (ESC
// [ 2 J), a CSI introducer (U+009B), DEL, NUL, a right-to-left override (U+202E). The backslash
// and the ordinary non-ASCII text must come through as themselves.
const std::string kHostile = "\x1b[2J\xc2\x9b\x7f\0\xe2\x80\xae\\ caf\xc3\xa9 \xe2\x9c\x93 \xe6\x97\xa5\xe6\x9c\xac"s;
// The same string written as a JS literal.
const char* const kHostileJs = R"("\x1b[2J\u009b\x7f\0\u202e\\ café ✓ 日本")";
// kHostile in a one-line text field, and inside a JSON string.
const std::string kHostileText = "\\x1b[2J\\u009b\\x7f\\x00\\u202e\\\\ caf\xc3\xa9 \xe2\x9c\x93 \xe6\x97\xa5\xe6\x9c\xac";
const std::string kHostileJson =
    "\\u001b[2J\\u009b\\u007f\\u0000\\u202e\\\\ caf\xc3\xa9 \xe2\x9c\x93 \xe6\x97\xa5\xe6\x9c\xac";

// No byte sequence in `output` that a terminal would act on. A carriage return and bytes that
// are not UTF-8 are checked too: a worker's stderr can carry them.
void ExpectNothingRaw(const std::string& output, const std::string& what) {
  const std::pair<const char*, std::string> raw[] = {
      {"ESC", "\x1b"},          {"U+009B", "\xc2\x9b"},   {"DEL", "\x7f"},        {"NUL", "\0"s},
      {"U+202E", "\xe2\x80\xae"}, {"carriage return", "\r"}, {"byte FF", "\xff"}, {"bytes C0 80", "\xc0\x80"}};
  for (const auto& [name, bytes] : raw)
    EXPECT_EQ(output.find(bytes), std::string::npos) << what << " prints " << name << " raw:\n" << output;
}

size_t Lines(const std::string& text) { return static_cast<size_t>(std::count(text.begin(), text.end(), '\n')); }

class CliUntrustedTextTest : public CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    // Logs, asks for a namespace it is not granted (the denial quotes it), then returns or throws.
    WriteFile(dir_ + "/f.js", std::string("const bad = ") + kHostileJs + R"(;
export default async (input, host) => {
  console.log("log:" + bad + "\nbasal: ok");
  try { await host.call("kv.put", {namespace: "ns:" + bad, key: "k", value: 1}); } catch (e) {}
  if (input.fail) throw new Error("err:" + bad + "\nbasal: ok");
  return {v: "ret:" + bad};
};
)");
    WriteFile(dir_ + "/m.json", R"({"grants": {"kv.put": {"namespaces": ["greetings"]}}})");
    run_ = "run " + dir_ + "/f.js --manifest " + dir_ + "/m.json --db " + dir_ + "/j.db";
  }
  CommandResult Journal(const std::string& args = "") { return RunCommand(dir_, "journal --db " + dir_ + "/j.db " + args); }
  std::string run_;
};

TEST_F(CliUntrustedTextTest, RunPrintsAResultEscapedAndTheSameValue) {
  auto r = RunCommand(dir_, run_ + " --input '{}'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ExpectNothingRaw(r.out, "basal run (result)");
  EXPECT_EQ(r.out, "{\"v\":\"ret:" + kHostileJson + "\"}\n");
  EXPECT_EQ(nlohmann::json::parse(r.out)["v"], "ret:" + kHostile) << "the escapes are JSON's: the value is unchanged";
}

TEST_F(CliUntrustedTextTest, RunPrintsAScriptErrorOnOneEscapedLine) {
  auto r = RunCommand(dir_, run_ + " --input '{\"fail\":true}'");
  EXPECT_EQ(r.exit_code, 1);
  ExpectNothingRaw(r.err, "basal run (error)");
  EXPECT_EQ(Lines(r.err), 1u) << "a newline in the message must not start a line of its own:\n" << r.err;
  EXPECT_EQ(r.err.rfind("basal: script_error: Error: err:" + kHostileText + "\\nbasal: ok (activation ", 0), 0u)
      << r.err;
}

TEST_F(CliUntrustedTextTest, RunWithInputsPrintsJsonLinesEscaped) {
  WriteFile(dir_ + "/in.jsonl", "{}\n{\"fail\":true}\n");
  auto r = RunCommand(dir_, run_ + " --inputs " + dir_ + "/in.jsonl");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  ExpectNothingRaw(r.out, "basal run --inputs");
  auto lines = JsonLines(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;
  EXPECT_EQ(lines[0]["ok"]["v"], "ret:" + kHostile);
  EXPECT_EQ(lines[1]["error"]["message"], "Error: err:" + kHostile + "\nbasal: ok");
  EXPECT_NE(r.out.find("\"message\":\"Error: err:" + kHostileJson + "\\nbasal: ok\""), std::string::npos) << r.out;
}

TEST_F(CliUntrustedTextTest, JournalShowsEveryFieldEscaped) {
  ASSERT_EQ(RunCommand(dir_, run_ + " --input '{}'").exit_code, 0);
  ASSERT_EQ(RunCommand(dir_, run_ + " --input '{\"fail\":true}'").exit_code, 1);

  auto readable = Journal();
  ASSERT_EQ(readable.exit_code, 0) << readable.err;
  ExpectNothingRaw(readable.out, "basal journal");
  for (const std::string& shown : {
           "    #1 log {\"level\":\"log\",\"message\":\"log:" + kHostileJson + "\\nbasal: ok\"}\n",
           "  result    {\"v\":\"ret:" + kHostileJson + "\"}\n",
           "  error     {\"kind\":\"script_error\",\"message\":\"Error: err:" + kHostileJson + "\\nbasal: ok\"",
           // The denial's reason quotes the namespace as JSON; shown as text, its backslashes double.
           ": namespace \"ns:\\\\u001b[2J\\u009b\\x7f\\\\u0000\\u202e\\\\\\\\ caf"s,
       })
    EXPECT_NE(readable.out.find(shown), std::string::npos) << "missing: " << shown << "\nin:\n" << readable.out;
  EXPECT_EQ(readable.out.find("\nbasal: ok"), std::string::npos) << "a forged line:\n" << readable.out;

  auto json = Journal("--json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  ExpectNothingRaw(json.out, "basal journal --json");
  auto lines = JsonLines(json.out);
  ASSERT_EQ(lines.size(), 2u) << json.out;
  EXPECT_EQ(lines[0]["result"]["v"], "ret:" + kHostile);
  EXPECT_EQ(lines[1]["error"]["message"], "Error: err:" + kHostile + "\nbasal: ok");
  EXPECT_EQ(lines[1]["calls"][0]["args"]["message"], "log:" + kHostile + "\nbasal: ok");
  EXPECT_EQ(lines[1]["calls"][1]["args"]["namespace"], "ns:" + kHostile);
  EXPECT_NE(lines[1]["calls"][1]["reason"].get<std::string>().find("\xe2\x80\xae"), std::string::npos)
      << "the reason quotes the namespace: " << lines[1]["calls"][1];
}

TEST_F(CliUntrustedTextTest, OrdinaryNonAsciiTextPrintsUnchanged) {
  const std::string text = "caf\xc3\xa9 \xe2\x9c\x93 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80";
  WriteFile(dir_ + "/plain.js", "export default (input) => { console.log('" + text + "');"
                                " if (input.fail) throw new Error('" + text + "'); return {text: '" + text + "'}; }");
  const std::string run = "run " + dir_ + "/plain.js --manifest " + dir_ + "/m.json --db " + dir_ + "/j.db";
  auto ok = RunCommand(dir_, run + " --input '{}'");
  EXPECT_EQ(ok.out, "{\"text\":\"" + text + "\"}\n") << ok.err;
  auto failed = RunCommand(dir_, run + " --input '{\"fail\":true}'");
  EXPECT_EQ(failed.err.rfind("basal: script_error: Error: " + text + " (activation ", 0), 0u) << failed.err;
  auto journal = Journal();
  EXPECT_NE(journal.out.find("#1 log {\"level\":\"log\",\"message\":\"" + text + "\"}\n"), std::string::npos)
      << journal.out;
}

// A worker's stderr cannot be UTF-8 at all: the parent quotes its last line in the activation's
// message and in the doctor's verdict.
TEST_F(CliUntrustedTextTest, AWorkersStderrIsShownEscapedByRunJournalAndDoctor) {
  const std::string worker = dir_ + "/fake-worker--hostile_stderr";
  std::filesystem::create_symlink(BASAL_FAKE_WORKER_PATH, worker);
  const std::string quoted = "stderr: ck-basal-worker: \\x1b[2J \\u009b \\x7f \\x00 \\u202e \\xff \\xc0\\x80 caf\xc3\xa9\\rbasal: ok";

  auto r = RunCommand(dir_, run_ + " --input '{}' --worker " + worker);
  EXPECT_EQ(r.exit_code, 3) << "a refused worker is basal failing to run the flow, not the flow failing";
  ExpectNothingRaw(r.err, "basal run (worker stderr)");
  EXPECT_EQ(Lines(r.err), 1u) << r.err;
  EXPECT_EQ(r.err.rfind("basal: worker_refused: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(quoted + " (activation "), std::string::npos) << r.err;

  // The journal stored the message as JSON, where bytes that are not UTF-8 became U+FFFD.
  auto journal = Journal();
  ExpectNothingRaw(journal.out, "basal journal (worker stderr)");
  EXPECT_NE(journal.out.find("stderr: ck-basal-worker: \\u001b[2J \\u009b \\u007f \\u0000 \\u202e \xef\xbf\xbd "),
            std::string::npos)
      << journal.out;
  ExpectNothingRaw(Journal("--json").out, "basal journal --json (worker stderr)");

  auto doctor = RunCommand(dir_, "doctor --worker " + worker);
  EXPECT_EQ(doctor.exit_code, 1) << "doctor's answer \"refused\" is the check failing, like a flow";
  ExpectNothingRaw(doctor.out, "basal doctor (worker stderr)");
  EXPECT_NE(doctor.out.find(quoted + ")\n"), std::string::npos) << doctor.out;
}

TEST_F(CliUntrustedTextTest, DoctorShowsAWelcomeEscaped) {
  const std::string worker = dir_ + "/fake-worker--hostile_welcome";
  std::filesystem::create_symlink(BASAL_FAKE_WORKER_PATH, worker);
  auto doctor = RunCommand(dir_, "doctor --worker " + worker);
  ExpectNothingRaw(doctor.out, "basal doctor (welcome)");
  EXPECT_NE(doctor.out.find(", engine \\x1b[2J \\u009b \\x7f \\x00 \\u202e caf\xc3\xa9, pid "), std::string::npos)
      << doctor.out;
  EXPECT_NE(doctor.out.find("  \"note\": \"\\u001b[2J \\u009b \\u007f \\u0000 \\u202e caf\xc3\xa9\",\n"),
            std::string::npos)
      << doctor.out;
}

}  // namespace
}  // namespace basal::testing
