// basal serve's run queue (src/serve/run_queue.h) on a real module with real confined workers:
// runs are told accepted only once their row is committed, wait while max_workers runs run, start
// in the order they came, end with their activation; waiters hear of the end or of their wait
// passing; a lost commit is an error and leaves nothing running; a key gives the same run. The
// clock is the test's (now_us); runs end when the test answers their `hold` host call, so nothing
// depends on how fast the machine is.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "integration/test_support.h"
#include "parent/store/store.h"
#include "serve/run_queue.h"

namespace basal::testing {
namespace {

using Json = nlohmann::json;
using serve::AcceptedRun;
using serve::RunQueue;
using serve::RunRequest;

class RunQueueTest : public ModuleFixture {
 protected:
  void SetUp() override {
    ModuleFixture::SetUp();
    OpenModule();
    // "echo" returns its input; "held" waits for the test to answer its `hold` call. Approved, as
    // basal serve runs only approved flows.
    Approve("echo", "export default async (input) => input;", "{}");
    Approve("held", "export default async (input, host) => { await host.call('hold', {}); return input; }",
            R"({"grants": {"hold": {}}, "budgets": {"deadline_ms": 60000}})");
    limits_.max_workers = 1;
  }

  // A module (again, after a "restart"), with the `hold` host call.
  void OpenModule() {
    ModuleOptions o;
    o.max_workers = 8;  // the queue sets the module's cap to limits.max_workers
    Open(o);
    HostCallSpec spec;
    spec.name = "hold";
    spec.handler = [this](const HostCallContext& ctx, const Json& args, HostCallReply reply) {
      held_.emplace(ctx.activation_id, std::make_pair(args, std::move(reply)));
    };
    ASSERT_TRUE(module_->registry().Register(std::move(spec)));
  }

  void Approve(const std::string& name, const std::string& source, const std::string& manifest_text) {
    auto manifest = Manifest::Parse(manifest_text, module_->registry());
    ASSERT_TRUE(manifest) << manifest.error().message;
    auto store = OpenStore();
    NewApproval a;
    a.kind = ApprovalKind::kFlow;
    a.name = name;
    a.source = source;
    a.manifest_text = manifest_text;
    a.manifest_hash = manifest->hash();
    a.approver = {0, "test"};
    a.at_unix_us = now_us_;
    a.reviewed_version = approved_[name];
    auto row = store->catalog().Approve(a);
    ASSERT_TRUE(row) << row.error().message;
    approved_[name] = row->version;
  }
  void Revoke(const std::string& name) {
    auto store = OpenStore();
    ASSERT_TRUE(store->catalog().Revoke(ApprovalKind::kFlow, name, approved_[name], {0, "test"}, now_us_, "test"));
  }

  RunQueue& Queue() {
    if (!queue_) {
      queue_ = std::make_unique<RunQueue>(RunQueue::Options{
          .host = module_->host(),
          .metrics = metrics_,
          .limits = limits_,
          .now_us = [this] { return now_us_ += 1000; },  // every reading is a millisecond later
          .flow_for = [this](const std::string& name) { return module_->host().CurrentFlow(name); },
      });
      queue_->OnRunEnded([this](int64_t run) { ended_.push_back(run); });
    }
    return *queue_;
  }

  // Enqueues and drives the loop until the acceptance (or its error) is told.
  Result<AcceptedRun> Enqueue(RunRequest request) {
    std::optional<Result<AcceptedRun>> told;
    Queue().Enqueue(std::move(request), [&](Result<AcceptedRun> a) { told = std::move(a); });
    // Acceptance is told only after the commit, from the loop; a refusal may be told at once.
    EXPECT_TRUE(!told.has_value() || !*told) << "accepted before the commit";
    Drive([&] { return told.has_value(); });
    return told ? std::move(*told) : Result<AcceptedRun>(MakeError(ErrorCode::kInternal, "never told"));
  }
  static RunRequest Request(const std::string& flow, Json input, std::string key = "") {
    RunRequest r;
    r.flow = flow;
    r.input = std::move(input);
    r.trigger = "api";
    r.idempotency_key = std::move(key);
    return r;
  }

  // Drives the loop until `done` (a guard against a hang, not a timing assertion).
  void Drive(const std::function<bool()>& done) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!done() && std::chrono::steady_clock::now() < give_up) module_->RunFor(std::chrono::milliseconds(10));
    ASSERT_TRUE(done()) << "the loop never got there";
  }
  RunRow Row(int64_t run) {
    auto r = Queue().Get(run);
    EXPECT_TRUE(r && *r) << "run " << run;
    return r && *r ? **r : RunRow{};
  }
  // Answers the `hold` call of the activation that runs `run`.
  void Release(int64_t run) {
    Drive([&] { return Row(run).activation_id > 0 && held_.count(Row(run).activation_id) > 0; });
    auto it = held_.find(Row(run).activation_id);
    it->second.second.Ok(nullptr);
    held_.erase(it);
  }
  // What another process sees: the committed rows only.
  std::optional<std::string> CommittedState(int64_t run) {
    sqlite3* db = nullptr;
    std::optional<std::string> state;
    if (sqlite3_open_v2((dir_ + "/journal.db").c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
      sqlite3_stmt* st = nullptr;
      sqlite3_prepare_v2(db, "SELECT state FROM runs WHERE id=?", -1, &st, nullptr);
      sqlite3_bind_int64(st, 1, run);
      if (sqlite3_step(st) == SQLITE_ROW) state = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
      sqlite3_finalize(st);
    }
    sqlite3_close(db);
    return state;
  }
  void RawSql(const std::string& sql) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((dir_ + "/journal.db").c_str(), &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 10'000);
    char* err = nullptr;
    EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "");
    sqlite3_free(err);
    sqlite3_close(db);
  }

  int64_t now_us_ = 1'700'000'000'000'000;
  serve::LimitsConfig limits_;
  serve::MetricsRegistry metrics_;
  std::map<std::string, int64_t> approved_;  // the newest approved version of each flow
  std::multimap<int64_t, std::pair<Json, HostCallReply>> held_;  // by activation
  std::vector<int64_t> ended_;
  std::unique_ptr<RunQueue> queue_;
};

TEST_F(RunQueueTest, AcceptanceIsToldOnlyOnceTheRowIsCommitted) {
  std::optional<int64_t> told;
  std::optional<std::string> state_when_told;
  Queue().Enqueue(Request("echo", 1), [&](Result<AcceptedRun> a) {
    ASSERT_TRUE(a) << a.error().message;
    state_when_told = CommittedState(a->run.id);
    told = a->run.id;
  });
  EXPECT_FALSE(told.has_value());
  // The row is in the open batch: another process does not see it yet (the first run is id 1).
  EXPECT_FALSE(CommittedState(1).has_value());
  Drive([&] { return told.has_value(); });
  // It does at the moment the client is told.
  EXPECT_EQ(*told, 1);
  EXPECT_TRUE(state_when_told.has_value());
}

TEST_F(RunQueueTest, PastMaxWorkersRunsWaitAndStartInTheOrderTheyCame) {
  std::vector<int64_t> runs;
  for (int i = 0; i < 3; ++i) {
    auto a = Enqueue(Request("held", i));
    ASSERT_TRUE(a) << a.error().message;
    EXPECT_FALSE(a->existing);
    runs.push_back(a->run.id);
  }
  EXPECT_EQ(Queue().in_flight(), 1u);
  EXPECT_EQ(Queue().queued(), 2u);
  EXPECT_EQ(Row(runs[0]).state, RunState::kRunning);
  EXPECT_EQ(Row(runs[1]).state, RunState::kQueued);
  EXPECT_EQ(Row(runs[2]).state, RunState::kQueued);
  for (int64_t run : runs) {
    Release(run);
    Drive([&] { return Row(run).state == RunState::kEnded; });
  }
  // One at a time, in order: each started after the one before it had ended.
  for (size_t i = 1; i < runs.size(); ++i) {
    const RunRow before = Row(runs[i - 1]), after = Row(runs[i]);
    EXPECT_LT(before.activation_id, after.activation_id);
    ASSERT_TRUE(before.ended_unix_us && after.started_unix_us);
    EXPECT_LE(*before.ended_unix_us, *after.started_unix_us);
  }
  for (int64_t run : runs) EXPECT_EQ(Row(run).outcome, "ok");
  EXPECT_EQ(ended_, runs);
  EXPECT_EQ(Queue().in_flight(), 0u);
  EXPECT_EQ(Queue().queued(), 0u);
}

TEST_F(RunQueueTest, RaisedMaxWorkersStartsWhatWaits) {
  std::vector<int64_t> runs;
  for (int i = 0; i < 3; ++i) runs.push_back(Enqueue(Request("held", i))->run.id);
  EXPECT_EQ(Queue().in_flight(), 1u);
  limits_.max_workers = 3;  // a reload
  Queue().Dispatch();
  Drive([&] { return Queue().in_flight() == 3u; });
  EXPECT_EQ(Queue().queued(), 0u);
  for (int64_t run : runs) Release(run);
  Drive([&] { return Queue().in_flight() == 0; });
}

TEST_F(RunQueueTest, WaitersHearOfTheEnd) {
  const int64_t run = Enqueue(Request("held", "x"))->run.id;
  std::vector<RunRow> told;
  Queue().Wait(run, std::chrono::seconds(60), [&](Result<RunRow> r) { told.push_back(*r); });
  Queue().Wait(run, std::chrono::seconds(60), [&](Result<RunRow> r) { told.push_back(*r); });
  module_->RunFor(std::chrono::milliseconds(20));
  EXPECT_TRUE(told.empty());
  Release(run);
  Drive([&] { return told.size() == 2; });
  for (const RunRow& r : told) {
    EXPECT_EQ(r.state, RunState::kEnded);
    EXPECT_EQ(r.outcome, "ok");
  }
}

TEST_F(RunQueueTest, WaitersHearWhenTheirWaitPassesWithTheRunAsItStands) {
  const int64_t run = Enqueue(Request("held", "x"))->run.id;
  std::optional<RunRow> told;
  Queue().Wait(run, std::chrono::milliseconds(1), [&](Result<RunRow> r) { told = *r; });
  Drive([&] { return told.has_value(); });
  EXPECT_EQ(told->state, RunState::kRunning);
  // No wait, or a wait of 0: at once.
  std::optional<RunRow> now;
  Queue().Wait(run, std::nullopt, [&](Result<RunRow> r) { now = *r; });
  ASSERT_TRUE(now.has_value());
  Queue().Wait(run, std::chrono::milliseconds(0), [&](Result<RunRow> r) { now = *r; });
  EXPECT_EQ(now->state, RunState::kRunning);
  // A run that does not exist is an error, told at once.
  bool error = false;
  Queue().Wait(run + 100, std::chrono::seconds(1), [&](Result<RunRow> r) { error = !r; });
  EXPECT_TRUE(error);
  Release(run);
  Drive([&] { return Queue().in_flight() == 0; });
}

TEST_F(RunQueueTest, AtStopEveryWaiterGetsItsRunAsItStands) {
  const int64_t run = Enqueue(Request("held", "x"))->run.id;
  std::optional<RunRow> told;
  Queue().Wait(run, std::chrono::seconds(60), [&](Result<RunRow> r) { told = *r; });
  Queue().AnswerWaiters();
  ASSERT_TRUE(told.has_value());
  EXPECT_EQ(told->state, RunState::kRunning);
}

TEST_F(RunQueueTest, ALostCommitIsAnErrorAndLeavesNothingRunning) {
  // A commit that fails: a deferred foreign key that a trigger on runs breaks, checked at COMMIT.
  RawSql("CREATE TABLE parent_of_nothing(id INTEGER PRIMARY KEY);"
         "CREATE TABLE fails_at_commit(x INTEGER REFERENCES parent_of_nothing(id) DEFERRABLE INITIALLY DEFERRED);"
         "CREATE TRIGGER run_fails_its_commit AFTER INSERT ON runs BEGIN INSERT INTO fails_at_commit VALUES (1); END;");
  auto a = Enqueue(Request("held", "lost"));
  ASSERT_FALSE(a);
  EXPECT_EQ(a.error().code, ErrorCode::kDatabase);
  EXPECT_NE(a.error().message.find("the run could not be journaled"), std::string::npos) << a.error().message;
  std::string why;
  EXPECT_FALSE(Queue().journal_ok(&why));
  EXPECT_FALSE(why.empty());
  // The activation that had started in that batch was cancelled: nothing runs, nothing is queued.
  Drive([&] { return Queue().in_flight() == 0; });
  EXPECT_EQ(Queue().queued(), 0u);
  EXPECT_EQ(module_->Health().workers.busy, 0u);
  // Once commits work again, so does the queue, and readiness comes back.
  RawSql("DROP TRIGGER run_fails_its_commit;");
  auto b = Enqueue(Request("echo", "back"));
  ASSERT_TRUE(b) << b.error().message;
  EXPECT_TRUE(Queue().journal_ok(&why));
  Drive([&] { return Row(b->run.id).state == RunState::kEnded; });
  EXPECT_EQ(Row(b->run.id).outcome, "ok");
}

// The run's end is written into the module's batch with its activation's end: a store that refuses
// it fails the whole batch, and nobody hears the run ended as it did.
TEST_F(RunQueueTest, ARunsEndThatCannotBeWrittenFailsItsBatch) {
  RawSql("CREATE TRIGGER no_end BEFORE UPDATE OF state ON runs WHEN new.state = 'ended' "
         "BEGIN SELECT RAISE(ABORT, 'this store refuses the end of a run'); END;");
  auto a = Enqueue(Request("held", 1));
  ASSERT_TRUE(a) << a.error().message;
  std::optional<RunRow> told;
  Queue().Wait(a->run.id, std::chrono::seconds(60), [&](Result<RunRow> r) { told = *r; });
  Release(a->run.id);
  Drive([&] { return told.has_value(); });
  EXPECT_NE(told->state, RunState::kEnded) << "its end was never written";
  EXPECT_EQ(CommittedState(a->run.id), std::optional<std::string>("running"));
  EXPECT_EQ(module_->Health().journal_failures, 1u);
  std::string why;
  EXPECT_FALSE(Queue().journal_ok(&why));
  EXPECT_NE(why.find("journal commit failed"), std::string::npos) << why;
  // The activation is recorded as what happened to it: its outcome could not be journaled.
  auto rows = Reader()->Activations(std::nullopt, 1);
  ASSERT_TRUE(rows && !rows->empty());
  EXPECT_EQ(rows->back().outcome, "journal_error");
  EXPECT_EQ(Queue().in_flight(), 0u);
}

// The row is written when the run starts (in the batch that accepted it, SQLite writes it once, as
// running) or at the batch's commit: a row the store refuses fails that batch, and the client is
// told an error, never an acceptance; nothing of the run stays queued, running or in the store.
TEST_F(RunQueueTest, ARowTheStoreRefusesIsAnErrorNeverAnAcceptance) {
  RawSql("CREATE TRIGGER no_runs BEFORE INSERT ON runs BEGIN SELECT RAISE(ABORT, 'no runs today'); END;");
  auto a = Enqueue(Request("echo", 1));
  ASSERT_FALSE(a);
  EXPECT_NE(a.error().message.find("no runs today"), std::string::npos) << a.error().message;
  Drive([&] { return Queue().in_flight() == 0; });
  EXPECT_EQ(Queue().queued(), 0u);
  EXPECT_FALSE(CommittedState(1).has_value());
}

TEST_F(RunQueueTest, AnIdempotencyKeyGivesTheSameRunUntilItExpires) {
  limits_.idempotency_ttl = std::chrono::hours(1);
  auto first = Enqueue(Request("echo", Json{{"order", 17}}, "order-17"));
  ASSERT_TRUE(first) << first.error().message;
  auto again = Enqueue(Request("echo", Json{{"order", 17}}, "order-17"));
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_TRUE(again->existing);
  EXPECT_EQ(again->run.id, first->run.id);
  Drive([&] { return Row(first->run.id).state == RunState::kEnded; });
  // The same key with another input is refused, naming the run.
  auto other = Enqueue(Request("echo", Json{{"order", 18}}, "order-17"));
  ASSERT_FALSE(other);
  EXPECT_EQ(other.error().code, ErrorCode::kConflict);
  // Past the key's time to live it is forgotten: a new run.
  now_us_ += 2 * 3'600'000'000LL;
  auto later = Enqueue(Request("echo", Json{{"order", 17}}, "order-17"));
  ASSERT_TRUE(later) << later.error().message;
  EXPECT_FALSE(later->existing);
  EXPECT_NE(later->run.id, first->run.id);
  Drive([&] { return Queue().in_flight() == 0; });
}

TEST_F(RunQueueTest, QueueMaxHoldsOnEveryRequestButAKeyNamingARunThere) {
  limits_.queue_max = 1;
  const int64_t running = Enqueue(Request("held", 1))->run.id;
  auto queued = Enqueue(Request("echo", 2, "k-queued"));
  ASSERT_TRUE(queued) << queued.error().message;
  EXPECT_EQ(Queue().queued(), 1u);
  // Full: a new run is refused, keyed or not, held or not, and nothing is journaled.
  RunRequest held = Request("echo", 3);
  held.hold = true;
  for (RunRequest r : {Request("echo", 3), Request("echo", 3, "k-new"), held}) {
    auto refused = Enqueue(r);
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().code, ErrorCode::kUnavailable);
    EXPECT_NE(refused.error().message.find("limits.queue_max"), std::string::npos) << refused.error().message;
  }
  // A key that names a run already there adds nothing: the run.
  auto again = Enqueue(Request("echo", 2, "k-queued"));
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_TRUE(again->existing);
  EXPECT_EQ(again->run.id, queued->run.id);
  EXPECT_EQ(Queue().queued(), 1u);
  auto rows = module_->host().runs().CountRuns(RunState::kQueued);
  ASSERT_TRUE(rows);
  EXPECT_EQ(*rows, 1u);
  // Once there is room, the refused key is accepted.
  Release(running);
  Drive([&] { return Row(queued->run.id).state == RunState::kEnded; });
  auto now = Enqueue(Request("echo", 3, "k-new"));
  ASSERT_TRUE(now) << now.error().message;
  EXPECT_FALSE(now->existing);
}

TEST_F(RunQueueTest, AHeldRunStartsOnlyWhenReleased) {
  RunRequest held = Request("echo", "later");
  held.hold = true;
  const int64_t run = Enqueue(held)->run.id;
  module_->RunFor(std::chrono::milliseconds(20));
  EXPECT_EQ(Row(run).state, RunState::kQueued);
  EXPECT_EQ(Queue().queued(), 0u);  // not waiting for a worker: held
  Queue().Release(run);
  Drive([&] { return Row(run).state == RunState::kEnded; });
  EXPECT_EQ(Row(run).outcome, "ok");
}

TEST_F(RunQueueTest, ARunWhoseFlowIsGoneAtItsTurnEndsCancelledAndIsHeardOf) {
  const int64_t first = Enqueue(Request("held", 1))->run.id;
  const int64_t second = Enqueue(Request("echo", 2))->run.id;
  Revoke("echo");  // while it waited
  Release(first);
  Drive([&] { return Row(second).state == RunState::kEnded; });
  const RunRow r = Row(second);
  EXPECT_EQ(r.outcome, "cancelled");
  EXPECT_EQ(r.activation_id, 0);
  EXPECT_NE(r.error_json.find("cancelled before it started: flow echo version 1 was revoked"), std::string::npos)
      << r.error_json;
  EXPECT_EQ(ended_, (std::vector<int64_t>{first, second}));
}

TEST_F(RunQueueTest, DrainingStartsNothingAndAnswersWaitsAtOnce) {
  const int64_t running = Enqueue(Request("held", 1))->run.id;
  const int64_t waiting = Enqueue(Request("echo", 2))->run.id;
  Queue().Drain();
  Release(running);
  Drive([&] { return Row(running).state == RunState::kEnded; });
  module_->RunFor(std::chrono::milliseconds(20));
  EXPECT_EQ(Row(waiting).state, RunState::kQueued);  // stays queued for the next start
  std::optional<RunRow> told;
  Queue().Wait(waiting, std::chrono::seconds(60), [&](Result<RunRow> r) { told = *r; });
  ASSERT_TRUE(told.has_value());
  EXPECT_EQ(told->state, RunState::kQueued);
}

TEST_F(RunQueueTest, RecoveryQueuesWhatAPreviousDaemonLeftQueued) {
  const int64_t ended = Enqueue(Request("echo", 1))->run.id;
  Drive([&] { return Row(ended).state == RunState::kEnded; });
  RunRequest held = Request("echo", 2);
  held.hold = true;
  const int64_t queued = Enqueue(held)->run.id;
  // The daemon drains and stops: its queued run's row stays queued for the next start.
  Queue().Drain();
  queue_.reset();
  module_.reset();
  OpenModule();
  auto recovered = Queue().Recover();
  ASSERT_TRUE(recovered) << recovered.error().message;
  ASSERT_EQ(recovered->queued.size(), 1u);
  EXPECT_EQ(recovered->queued[0].id, queued);
  EXPECT_EQ(Queue().queued(), 1u);
  Queue().Dispatch();
  Drive([&] { return Row(queued).state == RunState::kEnded; });
  EXPECT_EQ(Row(queued).outcome, "ok");
}

TEST_F(RunQueueTest, AFireThatNeverRunsIsJournaledEnded) {
  RunRequest fire = Request("echo", nullptr);
  fire.trigger = "schedule:nightly";
  fire.state_detail = R"({"scheduled_for":"2026-01-01T03:00:00.000Z"})";
  auto id = Queue().RecordEnded(fire, "missed", Json{{"kind", "missed"}, {"message", "the daemon was down"}});
  ASSERT_TRUE(id) << id.error().message;
  const RunRow r = Row(*id);
  EXPECT_EQ(r.state, RunState::kEnded);
  EXPECT_EQ(r.outcome, "missed");
  EXPECT_EQ(r.trigger, "schedule:nightly");
  EXPECT_EQ(r.state_detail, fire.state_detail);
  EXPECT_EQ(Json::parse(r.error_json)["message"], "the daemon was down");
  EXPECT_EQ(Queue().in_flight(), 0u);
}

// The daemon's line per stopped run: names from outside with control bytes replaced and cut at
// 2,000 bytes, the milliseconds as "%.1f" writes them, an error quoted.
TEST(RunStopLineTest, WritesOneLineWithEveryNameEscaped) {
  RunStop stop;
  stop.run_id = 42;
  stop.outcome = "ok";
  stop.started_unix_us = 1'000'000;
  EXPECT_EQ(serve::RunStopLine("nightly", "api", stop, 1'002'050), "run 42 ended: flow=nightly outcome=ok ms=2.0 trigger=api");
  EXPECT_EQ(serve::RunStopLine("nightly", "api", stop, 1'001'050), "run 42 ended: flow=nightly outcome=ok ms=1.1 trigger=api");
  EXPECT_EQ(serve::RunStopLine("a\nb\x7f", "cron:\tx", stop, 1'000'000), "run 42 ended: flow=a?b? outcome=ok ms=0.0 trigger=cron:?x");
  EXPECT_EQ(serve::RunStopLine(std::string(2001, 'f'), "api", stop, 999'000),
            "run 42 ended: flow=" + std::string(2000, 'f') + "... outcome=ok ms=0.0 trigger=api");
  char expected[32];
  for (int64_t us : {0, 49, 50, 51, 149, 150, 2'050, 12'345'678}) {
    std::snprintf(expected, sizeof expected, "%.1f", static_cast<double>(us) / 1000.0);
    EXPECT_NE(serve::RunStopLine("f", "api", stop, 1'000'000 + us).find(std::string(" ms=") + expected + " "), std::string::npos)
        << us;
  }
  RunStop waits;
  waits.run_id = 7;
  waits.state = RunState::kSleeping;
  EXPECT_EQ(serve::RunStopLine("f", "api", waits, 5), "run 7 waits: flow=f state=sleeping trigger=api");
  stop.result = ActivationResult{};
  stop.result.outcome = Outcome::kScriptError;
  stop.result.message = "bad \"thing\"\n";
  stop.outcome = "error";
  EXPECT_EQ(serve::RunStopLine("f", "api", stop, 1'000'000),
            "run 42 ended: flow=f outcome=error ms=0.0 trigger=api error=\"bad \\\"thing\\\"?\"");
}

}  // namespace
}  // namespace basal::testing
