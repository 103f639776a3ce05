// Operator approvals (docs/approvals.md): `basal flow ...`, `basal policy ...`, `basal run NAME`,
// `--policy`, `--require-approval`, `basal journal --source`, and the Module's refusal of revoked
// versions, as an operator (and an auditor) relies on them.
#include <gtest/gtest.h>
#include <pty.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "integration/test_support.h"

namespace basal::testing {
namespace {

using Ran = BasalRun;

// Runs basal with stdin from /dev/null (never a terminal).
Ran BasalApprovals(const std::string& dir, const std::string& args) { return RunBasal(dir, args, "", " </dev/null"); }

// Runs basal on a pseudo-terminal (stdin, stdout and stderr), typing `answer` once it asks.
Ran BasalOnTerminal(const std::vector<std::string>& args, const std::string& answer) {
  int master = -1;
  const pid_t pid = forkpty(&master, nullptr, nullptr, nullptr);
  if (pid == 0) {
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(BASAL_CLI_PATH));
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(BASAL_CLI_PATH, argv.data());
    _exit(127);
  }
  std::string out;
  bool answered = false;
  std::array<char, 4096> buf;
  for (;;) {
    const ssize_t n = read(master, buf.data(), buf.size());
    if (n <= 0) break;  // EIO once the child has exited and closed the terminal
    out.append(buf.data(), static_cast<size_t>(n));
    if (!answered && out.find("[y/N]") != std::string::npos) {
      const std::string line = answer + "\n";
      EXPECT_EQ(write(master, line.data(), line.size()), static_cast<ssize_t>(line.size()));
      answered = true;
    }
  }
  close(master);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(answered) << "basal never asked: " << out;
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out, ""};
}

bool Has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class ApprovalsTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = MakeTempDir(); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string P(const std::string& name) const { return dir_ + "/" + name; }
  std::string Db() const { return " --db " + P("j.db"); }
  Ran Approve(const std::string& name, const std::string& source, const std::string& manifest,
              const std::string& extra = " --yes") {
    WriteFile(P(name + ".js"), source);
    WriteFile(P(name + ".json"), manifest);
    return BasalApprovals(dir_, "flow approve " + name + " " + P(name + ".js") + " --manifest " + P(name + ".json") + extra + Db());
  }
  std::string dir_;
};

constexpr const char* kCounter =
    "export default async (input, host) => {\n"
    "  const n = (await host.call('kv.get', {namespace: 'orders', key: 'n'})) ?? 0;\n"
    "  await host.call('kv.put', {namespace: 'orders', key: 'n', value: n + 1});\n"
    "  return n + 1;\n"
    "};\n";
constexpr const char* kCounterManifest =
    R"({"grants": {"kv.get": {"namespaces": ["orders"]}, "kv.put": {"namespaces": ["orders"]}}, "budgets": {"cpu_ms": 1000}})";

TEST_F(ApprovalsTest, ANewFlowIsReviewedWholeAndStoredOnlyWithConsent) {
  // Not a terminal and no --yes: the review is printed, nothing is stored, exit 4.
  auto refused = Approve("orders", kCounter, kCounterManifest, " --note first");
  EXPECT_EQ(refused.exit_code, 4) << refused.err;
  EXPECT_TRUE(Has(refused.out, "a new flow")) << refused.out;
  EXPECT_TRUE(Has(refused.out, "kv.get")) << refused.out;
  EXPECT_TRUE(Has(refused.out, "kv.put")) << refused.out;
  EXPECT_TRUE(Has(refused.out, "orders")) << refused.out;
  EXPECT_TRUE(Has(refused.out, "cpu_ms")) << refused.out;
  EXPECT_TRUE(Has(refused.out, "deadline_ms")) << "every budget is listed, defaults too: " << refused.out;
  EXPECT_TRUE(Has(refused.err, "basal: refused: the review above needs your confirmation")) << refused.err;
  auto none = BasalApprovals(dir_, "flow list" + Db());
  EXPECT_EQ(none.exit_code, 0) << none.err;
  EXPECT_TRUE(Has(none.out, "no flow is approved")) << none.out;

  auto ok = Approve("orders", kCounter, kCounterManifest, " --yes --note 'first version'");
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_TRUE(Has(ok.out, "approved flow \"orders\" version 1")) << ok.out;
  auto list = BasalApprovals(dir_, "flow list" + Db());
  EXPECT_EQ(list.exit_code, 0) << list.err;
  EXPECT_TRUE(Has(list.out, "orders")) << list.out;
  EXPECT_TRUE(Has(list.out, "approved")) << list.out;
  auto show = BasalApprovals(dir_, "flow show orders --source" + Db());
  EXPECT_EQ(show.exit_code, 0) << show.err;
  EXPECT_TRUE(Has(show.out, "version 1 of 1: approved")) << show.out;
  EXPECT_TRUE(Has(show.out, "first version")) << show.out;
  EXPECT_TRUE(Has(show.out, "approved version 1 by")) << show.out;
  EXPECT_TRUE(Has(show.out, "host.call('kv.get'")) << "--source prints the approved source: " << show.out;

  // The same content again changes nothing and says so.
  auto same = Approve("orders", kCounter, kCounterManifest);
  EXPECT_EQ(same.exit_code, 0) << same.err;
  EXPECT_TRUE(Has(same.out, "nothing changed")) << same.out;
  auto versions = BasalApprovals(dir_, "flow show orders --json" + Db());
  auto j = nlohmann::json::parse(versions.out);
  EXPECT_EQ(j["version"], 1);
}

TEST_F(ApprovalsTest, ANewVersionIsReviewedAsTheDifferenceFromTheCurrentOne) {
  ASSERT_EQ(Approve("orders", kCounter,
                    R"({"grants": {"kv.get": {"namespaces": ["orders"]},
                                   "kv.put": {"namespaces": ["orders"], "max_value_bytes": 2048},
                                   "kv.list": {"namespaces": ["orders"]}},
                        "budgets": {"cpu_ms": 1000, "deadline_ms": 30000}})")
                .exit_code,
            0);
  const std::string v2 = std::string(kCounter) + "// v2: one more line\n";
  auto review = Approve("orders", v2,
                        R"({"grants": {"kv.get": {"namespaces": ["orders", "archive"]},
                                       "kv.put": {"namespaces": ["orders"], "max_value_bytes": 1024},
                                       "kv.delete": {"namespaces": ["orders"]}},
                            "budgets": {"cpu_ms": 2000, "deadline_ms": 10000}})",
                        " --note v2");
  EXPECT_EQ(review.exit_code, 4) << "no terminal, no --yes: " << review.err;
  const std::string& out = review.out;
  EXPECT_TRUE(Has(out, "version 2 would replace version 1")) << out;
  EXPECT_TRUE(Has(out, "kv.get")) << out;
  EXPECT_TRUE(Has(out, "+archive")) << "widened per constraint: " << out;
  EXPECT_TRUE(Has(out, "widened")) << out;
  EXPECT_TRUE(Has(out, "max_value_bytes")) << out;
  EXPECT_TRUE(Has(out, "narrowed")) << out;
  EXPECT_TRUE(Has(out, "kv.delete")) << out;
  EXPECT_TRUE(Has(out, "added")) << out;
  EXPECT_TRUE(Has(out, "kv.list")) << out;
  EXPECT_TRUE(Has(out, "removed")) << out;
  EXPECT_TRUE(Has(out, "cpu_ms")) << out;
  EXPECT_TRUE(Has(out, "raised")) << out;
  EXPECT_TRUE(Has(out, "deadline_ms")) << out;
  EXPECT_TRUE(Has(out, "lowered")) << out;
  EXPECT_FALSE(Has(out, "v2: one more line")) << "the source diff is printed only with --source-diff: " << out;

  auto whole = Approve("orders", v2,
                       R"({"grants": {"kv.get": {"namespaces": ["orders", "archive"]},
                                      "kv.put": {"namespaces": ["orders"], "max_value_bytes": 1024},
                                      "kv.delete": {"namespaces": ["orders"]}},
                           "budgets": {"cpu_ms": 2000, "deadline_ms": 10000}})",
                       " --source-diff --yes");
  EXPECT_EQ(whole.exit_code, 0) << whole.err;
  EXPECT_TRUE(Has(whole.out, "+// v2: one more line")) << whole.out;

  auto diff = BasalApprovals(dir_, "flow diff orders" + Db());
  EXPECT_EQ(diff.exit_code, 0) << diff.err;
  EXPECT_TRUE(Has(diff.out, "+archive")) << diff.out;
  auto json = BasalApprovals(dir_, "flow diff orders 1 2 --json" + Db());
  EXPECT_EQ(json.exit_code, 0) << json.err;
  auto j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j["from"], 1);
  EXPECT_EQ(j["to"], 2);
  auto none = BasalApprovals(dir_, "flow diff orders 1 7" + Db());
  EXPECT_EQ(none.exit_code, 3);
  EXPECT_TRUE(Has(none.err, "has no version 7 (versions 1 to 2)")) << none.err;
}

TEST_F(ApprovalsTest, OnATerminalTheOperatorIsAsked) {
  WriteFile(P("f.js"), kCounter);
  WriteFile(P("m.json"), kCounterManifest);
  const std::vector<std::string> args = {"flow", "approve", "orders", P("f.js"), "--manifest", P("m.json"),
                                         "--db", P("j.db")};
  auto no = BasalOnTerminal(args, "n");
  EXPECT_EQ(no.exit_code, 4) << no.out;
  EXPECT_TRUE(Has(no.out, "Approve flow \"orders\" version 1? [y/N]")) << no.out;
  EXPECT_TRUE(Has(no.out, "not approved")) << no.out;
  EXPECT_TRUE(Has(BasalApprovals(dir_, "flow list" + Db()).out, "no flow is approved"));
  auto yes = BasalOnTerminal(args, "y");
  EXPECT_EQ(yes.exit_code, 0) << yes.out;
  EXPECT_TRUE(Has(yes.out, "approved flow \"orders\" version 1")) << yes.out;
}

TEST_F(ApprovalsTest, RunByNameRunsTheApprovedVersionAndRevokedNeverStarts) {
  auto never = BasalApprovals(dir_, "run orders" + Db());
  EXPECT_EQ(never.exit_code, 4) << never.err;
  EXPECT_TRUE(Has(never.err, "basal: refused: flow \"orders\" is not approved in this journal")) << never.err;

  ASSERT_EQ(Approve("orders", kCounter, kCounterManifest).exit_code, 0);
  auto one = BasalApprovals(dir_, "run orders" + Db());
  EXPECT_EQ(one.exit_code, 0) << one.err;
  EXPECT_EQ(one.out, "1\n");
  // Editing the file changes nothing until it is approved again.
  WriteFile(P("orders.js"), "export default () => 'edited';");
  auto still = BasalApprovals(dir_, "run orders" + Db());
  EXPECT_EQ(still.out, "2\n") << still.err;

  auto revoke = BasalApprovals(dir_, "flow revoke orders --note 'leaked token'" + Db());
  EXPECT_EQ(revoke.exit_code, 0) << revoke.err;
  EXPECT_TRUE(Has(revoke.out, "revoked flow \"orders\" version 1")) << revoke.out;
  auto refused = BasalApprovals(dir_, "run orders" + Db());
  EXPECT_EQ(refused.exit_code, 4);
  EXPECT_TRUE(Has(refused.err, "version 1 was revoked")) << refused.err;
  auto again = BasalApprovals(dir_, "flow revoke orders" + Db());
  EXPECT_EQ(again.exit_code, 3);
  EXPECT_TRUE(Has(again.err, "already revoked")) << again.err;

  auto show = BasalApprovals(dir_, "flow show orders" + Db());
  EXPECT_TRUE(Has(show.out, "revoked version 1 by")) << show.out;
  EXPECT_TRUE(Has(show.out, "leaked token")) << show.out;

  // A new version (reviewed against the revoked one) runs again.
  auto v2 = Approve("orders", "export default () => 'v2';", kCounterManifest);
  EXPECT_EQ(v2.exit_code, 0) << v2.err;
  EXPECT_TRUE(Has(v2.out, "REVOKED")) << "the review names the revoked version it replaces: " << v2.out;
  auto runs = BasalApprovals(dir_, "run orders" + Db());
  EXPECT_EQ(runs.out, "\"v2\"\n") << runs.err;
}

TEST_F(ApprovalsTest, AdHocRunsAreJournaledWithTheirTextsAndRefusedWhenApprovalIsRequired) {
  WriteFile(P("dev.js"), "export default () => 'dev';\n");
  WriteFile(P("m.json"), "{}");
  auto dev = BasalApprovals(dir_, "run " + P("dev.js") + " --manifest " + P("m.json") + Db());
  EXPECT_EQ(dev.exit_code, 0) << dev.err;
  auto refused = BasalApprovals(dir_, "run " + P("dev.js") + " --manifest " + P("m.json") + " --require-approval" + Db());
  EXPECT_EQ(refused.exit_code, 4);
  EXPECT_TRUE(Has(refused.err, "basal: refused: ad hoc flows are refused here")) << refused.err;
  ASSERT_EQ(Approve("orders", kCounter, kCounterManifest).exit_code, 0);
  auto approved = BasalApprovals(dir_, "run orders --require-approval" + Db());
  EXPECT_EQ(approved.exit_code, 0) << approved.err;

  auto journal = BasalApprovals(dir_, "journal --json" + Db());
  ASSERT_EQ(journal.exit_code, 0) << journal.err;
  std::vector<nlohmann::json> rows;
  std::istringstream lines(journal.out);
  for (std::string line; std::getline(lines, line);) rows.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(rows.size(), 2u) << "the refused ad hoc run was never journaled";
  EXPECT_EQ(rows[0]["origin"], "adhoc");
  EXPECT_FALSE(rows[0].contains("approval"));
  EXPECT_EQ(rows[1]["origin"], "approved");
  EXPECT_EQ(rows[1]["approval"]["name"], "orders");
  EXPECT_EQ(rows[1]["approval"]["version"], 1);
  auto readable = BasalApprovals(dir_, "journal --activation 2" + Db());
  EXPECT_TRUE(Has(readable.out, "origin    approved flow orders version 1")) << readable.out;

  auto source = BasalApprovals(dir_, "journal --activation 1 --source" + Db());
  EXPECT_EQ(source.exit_code, 0) << source.err;
  EXPECT_EQ(source.out, "export default () => 'dev';\n");
}

TEST_F(ApprovalsTest, TheJournalShowsTheSourceOfTheVersionThatRan) {
  ASSERT_EQ(Approve("orders", "export default () => 1;\n", "{}").exit_code, 0);
  ASSERT_EQ(BasalApprovals(dir_, "run orders" + Db()).exit_code, 0);
  ASSERT_EQ(Approve("orders", "export default () => 2;\n", "{}").exit_code, 0);
  ASSERT_EQ(BasalApprovals(dir_, "run orders" + Db()).exit_code, 0);
  EXPECT_EQ(BasalApprovals(dir_, "journal --activation 1 --source" + Db()).out, "export default () => 1;\n");
  EXPECT_EQ(BasalApprovals(dir_, "journal --activation 2 --source" + Db()).out, "export default () => 2;\n");
  auto needs = BasalApprovals(dir_, "journal --source" + Db());
  EXPECT_EQ(needs.exit_code, 2) << "--source needs --activation: " << needs.err;
}

TEST_F(ApprovalsTest, CodemodeScriptsRunUnderAnApprovedPolicyWithItsOwnDefaults) {
  WriteFile(P("agents.json"), R"({"grants": {"kv.get": {"namespaces": ["orders"]}}})");
  auto approve = BasalApprovals(dir_, "policy approve agents --manifest " + P("agents.json") + " --yes" + Db());
  EXPECT_EQ(approve.exit_code, 0) << approve.err;
  EXPECT_TRUE(Has(approve.out, "a new policy")) << approve.out;
  EXPECT_TRUE(Has(approve.out, "approved codemode policy \"agents\" version 1")) << approve.out;
  auto show = BasalApprovals(dir_, "policy show agents" + Db());
  EXPECT_TRUE(Has(show.out, "60000")) << "codemode's default deadline: " << show.out;
  EXPECT_TRUE(Has(show.out, "5000")) << "codemode's default cpu_ms: " << show.out;

  WriteFile(P("script.js"),
            "export default async (input, host) => await host.call('kv.get', {namespace: 'orders', key: 'x'});\n");
  auto run = BasalApprovals(dir_, "run --policy agents " + P("script.js") + Db());
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "null\n");
  WriteFile(P("bad.js"),
            "export default async (input, host) => await host.call('kv.put', {namespace: 'orders', key: 'x', value: 1});\n");
  auto denied = BasalApprovals(dir_, "run --policy agents " + P("bad.js") + Db());
  EXPECT_EQ(denied.exit_code, 1) << denied.err;
  EXPECT_TRUE(Has(denied.err, "PermissionDenied")) << denied.err;
  auto source = BasalApprovals(dir_, "journal --activation 2 --source" + Db());
  EXPECT_TRUE(Has(source.out, "kv.put")) << "every codemode script's source is kept: " << source.out;
  auto journal = BasalApprovals(dir_, "journal --activation 2 --json" + Db());
  auto j = nlohmann::json::parse(journal.out);
  EXPECT_EQ(j["origin"], "codemode");
  EXPECT_EQ(j["approval"]["kind"], "policy");
  EXPECT_EQ(j["approval"]["name"], "agents");

  ASSERT_EQ(BasalApprovals(dir_, "policy revoke agents" + Db()).exit_code, 0);
  auto refused = BasalApprovals(dir_, "run --policy agents " + P("script.js") + Db());
  EXPECT_EQ(refused.exit_code, 4);
  EXPECT_TRUE(Has(refused.err, "was revoked")) << refused.err;
  auto unknown = BasalApprovals(dir_, "run --policy nobody " + P("script.js") + Db());
  EXPECT_EQ(unknown.exit_code, 4);
  EXPECT_TRUE(Has(unknown.err, "policy \"nobody\" is not approved")) << unknown.err;
}

TEST_F(ApprovalsTest, InspectingOnlyReadsTheJournal) {
  auto list = BasalApprovals(dir_, "flow list" + Db());
  EXPECT_EQ(list.exit_code, 3) << list.err;
  EXPECT_TRUE(Has(list.err, "no journal at " + P("j.db"))) << list.err;
  EXPECT_FALSE(std::filesystem::exists(P("j.db"))) << "list, show and diff never create a journal";
  auto show = BasalApprovals(dir_, "policy show agents" + Db());
  EXPECT_EQ(show.exit_code, 3) << show.err;
  EXPECT_FALSE(std::filesystem::exists(P("j.db")));
  ASSERT_EQ(Approve("orders", kCounter, kCounterManifest).exit_code, 0);
  auto shown = BasalApprovals(dir_, "flow show orders" + Db());
  EXPECT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_TRUE(Has(shown.out, "kv.put")) << "the read-only review still knows the built-in host calls: " << shown.out;
}

TEST_F(ApprovalsTest, BadNamesAndNotesAreUsageErrors) {
  auto bad = Approve("../etc", kCounter, kCounterManifest);
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  auto slash = BasalApprovals(dir_, "flow show 'a b'" + Db());
  EXPECT_EQ(slash.exit_code, 2);
  EXPECT_TRUE(Has(slash.err, "may hold only letters, digits")) << slash.err;
}

// The Module side: a version revoked while its activations wait refuses the waiting ones; the
// running one finishes.
class RevokeWhileQueuedTest : public ModuleFixture {};

TEST_F(RevokeWhileQueuedTest, QueuedActivationsOfARevokedVersionNeverStartRunningOnesFinish) {
  ModuleOptions o;
  o.max_workers = 1;
  Open(o);
  std::vector<HostCallReply> held;
  HostCallSpec spec;
  spec.name = "hold";
  spec.effect = Effect::kPure;
  spec.handler = [&](const HostCallContext&, const Json&, HostCallReply reply) { held.push_back(std::move(reply)); };
  ASSERT_TRUE(module_->registry().Register(std::move(spec)));
  const std::string manifest = R"({"grants": {"hold": {}}})";
  auto parsed = Manifest::Parse(manifest, module_->registry());
  ASSERT_TRUE(parsed);
  auto writer = OpenStore();
  NewApproval a;
  a.kind = ApprovalKind::kFlow;
  a.name = "held";
  a.source = "export default async (i, host) => await host.call('hold', i);";
  a.manifest_text = manifest;
  a.manifest_hash = parsed->hash();
  a.approver = {0, "root"};
  auto row = writer->catalog().Approve(a);
  ASSERT_TRUE(row) << row.error().message;

  auto flow = module_->LoadApprovedFlow("held");
  ASSERT_TRUE(flow) << flow.error().message;
  EXPECT_EQ((*flow)->origin, FlowOrigin::kApproved);
  EXPECT_EQ((*flow)->version, 1);
  std::vector<ActivationResult> results;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(module_->Submit(*flow, i, [&](const ActivationResult& r) { results.push_back(r); }));
  }
  for (int i = 0; i < 2000 && held.empty(); ++i) module_->RunFor(std::chrono::milliseconds(5));
  ASSERT_EQ(held.size(), 1u) << "one worker: the first runs, two wait";
  ASSERT_TRUE(writer->catalog().Revoke(ApprovalKind::kFlow, "held", 1, {0, "root"}, 1, "stop"));
  held[0].Ok("finished");
  module_->RunUntilIdle();
  ASSERT_EQ(results.size(), 3u);
  size_t ok = 0, cancelled = 0;
  for (const ActivationResult& r : results) {
    if (r.ok()) {
      ++ok;
      EXPECT_EQ(r.result, "finished");
    } else {
      ++cancelled;
      EXPECT_EQ(r.outcome, Outcome::kCancelled);
      EXPECT_NE(r.message.find("flow held version 1 was revoked"), std::string::npos) << r.message;
    }
  }
  EXPECT_EQ(ok, 1u);
  EXPECT_EQ(cancelled, 2u);
  EXPECT_EQ(held.size(), 1u) << "no queued activation started after the revocation";
  auto later = module_->Submit(*flow, 9, [](const ActivationResult&) {});
  ASSERT_FALSE(later);
  EXPECT_EQ(later.error().code, ErrorCode::kRefused);
  auto reload = module_->LoadApprovedFlow("held");
  ASSERT_FALSE(reload);
  EXPECT_EQ(reload.error().code, ErrorCode::kRefused);
}

TEST_F(RevokeWhileQueuedTest, AnApprovedTextChangedOutsideBasalIsRefused) {
  Open();
  auto parsed = Manifest::Parse("{}", module_->registry());
  ASSERT_TRUE(parsed);
  auto writer = OpenStore();
  NewApproval a;
  a.kind = ApprovalKind::kFlow;
  a.name = "tampered";
  a.source = "export default () => 'approved';";
  a.manifest_text = "{}";
  a.manifest_hash = parsed->hash();
  ASSERT_TRUE(writer->catalog().Approve(a));
  writer.reset();
  sqlite3* db = nullptr;  // rewrite the kept source behind basal's back
  ASSERT_EQ(sqlite3_open((dir_ + "/journal.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE texts SET body='export default () => \"evil\";' WHERE body LIKE '%approved%'",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto flow = module_->LoadApprovedFlow("tampered");
  ASSERT_FALSE(flow);
  EXPECT_EQ(flow.error().code, ErrorCode::kDatabase);
  EXPECT_NE(flow.error().message.find("does not match the hash it was approved with"), std::string::npos)
      << flow.error().message;
}

}  // namespace
}  // namespace basal::testing
