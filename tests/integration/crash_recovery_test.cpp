// Crash recovery: a parent killed with SIGKILL during an external host call. The next parent to
// open the journal closes that activation as abandoned and marks the call's outcome unknown;
// nothing committed before is lost, and `basal journal` says so plainly.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <sstream>

#include "integration/test_support.h"

namespace basal::testing {
namespace {

class CrashRecoveryTest : public ModuleFixture {};

// Reads lines from `fd` until one starts with `prefix`; returns it ("" on EOF).
std::string ReadLineStarting(FILE* f, const std::string& prefix) {
  char buf[512];
  while (std::fgets(buf, sizeof buf, f)) {
    std::string line(buf);
    if (line.rfind(prefix, 0) == 0) return line;
  }
  return "";
}

TEST_F(CrashRecoveryTest, AParentKilledDuringAnExternalCallLeavesAbandonedAndOutcomeUnknown) {
  const std::string db = dir_ + "/journal.db";
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dup2(out[1], 1);
    close(out[0]);
    close(out[1]);
    execl(BASAL_CRASH_PARENT_PATH, "crash-parent", db.c_str(), BASAL_WORKER_PATH, nullptr);
    _exit(127);
  }
  close(out[1]);
  FILE* lines = fdopen(out[0], "r");
  const std::string committed = ReadLineStarting(lines, "COMMITTED ");
  const std::string started = ReadLineStarting(lines, "STARTED ");
  ASSERT_FALSE(committed.empty());
  ASSERT_FALSE(started.empty());
  long long first = 0, charging = 0, call = 0;
  std::sscanf(committed.c_str(), "COMMITTED %lld", &first);
  std::sscanf(started.c_str(), "STARTED %lld %lld", &charging, &call);
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  std::fclose(lines);

  {  // Before any parent reopens it, a reader sees the activation unfinished and the call started.
    auto calls = Reader()->Calls(charging);
    ASSERT_TRUE(calls);
    ASSERT_EQ(calls->size(), 2u);  // console.log, then the charge
    EXPECT_EQ((*calls)[1].state, CallState::kStarted);
  }
  auto recorder_events = std::make_shared<std::vector<ModuleEvent>>();
  struct Keep final : ModuleObserver {
    std::shared_ptr<std::vector<ModuleEvent>> events;
    void OnEvent(const ModuleEvent& e) override { events->push_back(e); }
  };
  auto keep = std::make_shared<Keep>();
  keep->events = recorder_events;
  ModuleOptions o;
  o.observer = keep;
  Open(o);  // the next parent: recovery runs here
  EXPECT_EQ(module_->Health().abandoned_recovered, 1u);
  ASSERT_EQ(recorder_events->size(), 1u);
  EXPECT_EQ((*recorder_events)[0].kind, ModuleEvent::Kind::kRecovered);

  auto journal = Reader();
  auto ok = journal->Activations(first, 1);
  ASSERT_TRUE(ok);
  EXPECT_EQ((*ok)[0].outcome, "ok") << "what was committed before the crash is kept";
  EXPECT_EQ((*ok)[0].result_json, "42");
  auto gone = journal->Activations(charging, 1);
  ASSERT_TRUE(gone);
  EXPECT_EQ((*gone)[0].outcome, "abandoned");
  EXPECT_NE((*gone)[0].error_json.find("died"), std::string::npos) << (*gone)[0].error_json;
  auto calls = journal->Calls(charging);
  ASSERT_TRUE(calls);
  ASSERT_EQ(calls->size(), 2u);
  EXPECT_EQ((*calls)[0].name, "log");
  EXPECT_EQ((*calls)[0].state, CallState::kAnswered);
  EXPECT_EQ((*calls)[1].name, "payment.charge");
  EXPECT_EQ((*calls)[1].call_id, call);
  EXPECT_EQ((*calls)[1].state, CallState::kUnknown);
  EXPECT_EQ((*calls)[1].args_json, R"({"amount":100})");

  // The operator's view says it plainly.
  const std::string cmd = std::string(BASAL_CLI_PATH) + " journal --db " + db + " --activation " +
                          std::to_string(charging) + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, n);
  pclose(p);
  EXPECT_NE(text.find("abandoned"), std::string::npos) << text;
  EXPECT_NE(text.find("OUTCOME UNKNOWN"), std::string::npos) << text;

  // The new parent works normally on the same journal.
  FlowRef f = Add("export default () => 'after'");
  EXPECT_TRUE(module_->Run(f, nullptr).ok());
}

}  // namespace
}  // namespace basal::testing
