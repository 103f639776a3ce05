// What is the PostgreSQL store's own, beyond the contract every backend passes
// (store_contract_test.cpp): the schema it creates, versions and refuses, the reader that never
// writes, the commit that does not wait and the writes sent behind it, passwords never shown, text
// PostgreSQL cannot hold, and the health check.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "parent/store/open.h"
#include "parent/store/owner.h"
#include "unit/pg_test_support.h"
#include "unit/store_test_support.h"

namespace basal {
namespace {

using testing_support::Call;
using testing_support::End;
using testing_support::PgTestDatabase;
using testing_support::Start;

class PgStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!PgTestDatabase::Available()) GTEST_SKIP() << PgTestDatabase::kWhySkipped;
    db_ = std::make_unique<PgTestDatabase>();
  }
  std::unique_ptr<Store> MustOpen(Durability durability = Durability::kNormal) {
    auto s = OpenStore({.locator = db_->locator(), .durability = durability});
    if (!s) {
      ADD_FAILURE() << s.error().message;
      return nullptr;
    }
    return std::move(*s);
  }
  // A commit of a batch that began an activation waits, inside the server, until the test
  // releases advisory lock 4242 (a deferred constraint trigger takes it at COMMIT): a commit that
  // is provably in flight while the test goes on.
  void HoldCommits() {
    db_->Query(
        "CREATE FUNCTION basal.test_hold() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "PERFORM pg_advisory_lock(4242); PERFORM pg_advisory_unlock(4242); RETURN NULL; END $$; "
        "CREATE CONSTRAINT TRIGGER test_hold AFTER INSERT ON basal.activations DEFERRABLE INITIALLY DEFERRED "
        "FOR EACH ROW EXECUTE FUNCTION basal.test_hold()");
    holder_ = PQconnectdb(db_->locator().c_str());
    ASSERT_EQ(PQstatus(holder_), CONNECTION_OK);
    PQclear(PQexec(holder_, "SELECT pg_advisory_lock(4242)"));
  }
  void ReleaseCommits() {
    if (!holder_) return;
    PQfinish(holder_);  // its session lock goes with it
    holder_ = nullptr;
  }
  // Polls the store's commit as the module's loop would: on its descriptor, then PollCommit.
  Result<void> LandCommit(Store& store) {
    for (int i = 0; i < 3000; ++i) {
      if (auto outcome = store.PollCommit()) return *outcome;
      pollfd p{store.io().fd, POLLIN, 0};
      ::poll(&p, 1, 10);
    }
    return MakeError(ErrorCode::kInternal, "the commit never landed");
  }
  void TearDown() override { ReleaseCommits(); }

  std::unique_ptr<PgTestDatabase> db_;
  PGconn* holder_ = nullptr;
};

TEST_F(PgStoreTest, TheSchemaIsBasalsOwnAndVersioned) {
  auto store = MustOpen();
  ASSERT_TRUE(store);
  EXPECT_EQ(db_->Query("SELECT value FROM basal.meta WHERE key = 'schema_version'"), "8");
  EXPECT_EQ(db_->Query("SELECT value FROM basal.meta WHERE key = 'application'"), "basal");
  EXPECT_EQ(db_->Query("SELECT value FROM basal.meta WHERE key = 'journal_id'"), store->journal_id());
  // The tables of the SQLite journal's schema 7 (docs/journal.md), with meta for the version, and
  // version 8's hosts (several hosts: PostgreSQL only).
  EXPECT_EQ(db_->Query("SELECT string_agg(tablename, ',' ORDER BY tablename) FROM pg_tables WHERE schemaname = 'basal'"),
            "activations,approval_events,approvals,call_resolutions,calls,hosts,kv,kv_audit,kv_usage,meta,run_events,"
            "runs,schedule_marks,texts,tokens");
  EXPECT_EQ(db_->Query("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"), "0") << "nothing outside basal";
  store.reset();
  // Opened again: found current, nothing created twice.
  auto again = MustOpen();
  ASSERT_TRUE(again);
  EXPECT_EQ(again->journal_id(), db_->Query("SELECT value FROM basal.meta WHERE key = 'journal_id'"));
}

// Version 6 to 7 (kv_audit, run_events.delivery_id): a version 6 store (this backend's first) is
// refused by a reader (it needs the migration), and migrated in place by the next writer, keeping
// kv and events; the operator's writes are then journaled.
TEST_F(PgStoreTest, AVersion6StoreIsMigratedKeepingItsKvAndEvents) {
  {
    auto store = MustOpen();
    ASSERT_TRUE(store);
    ASSERT_TRUE(store->kv().Put("orders", "o-1", "2"));
    NewRunEvent e;
    e.flow = "orders";
    e.name = "approved";
    e.event_key = "k1";
    e.payload_json = "{}";
    e.sender = "webhook:hook";
    e.received_unix_us = 100;
    e.expires_unix_us = 1'000'000;
    ASSERT_TRUE(store->runs().AddRunEvent(e));
    ASSERT_TRUE(store->Commit());
  }
  db_->Query("DROP TABLE basal.kv_audit; DROP INDEX basal.run_events_delivery; "
             "ALTER TABLE basal.run_events DROP COLUMN delivery_id; "
             "DROP TABLE basal.hosts; ALTER TABLE basal.runs DROP COLUMN queued_by, DROP COLUMN held; "
             "UPDATE basal.meta SET value = '6' WHERE key = 'schema_version'");
  auto reader = OpenReader(db_->locator());
  ASSERT_FALSE(reader);
  EXPECT_NE(reader.error().message.find("schema version 6 needs a migration"), std::string::npos)
      << reader.error().message;
  auto store = MustOpen();
  ASSERT_TRUE(store);
  EXPECT_EQ(db_->Query("SELECT value FROM basal.meta WHERE key = 'schema_version'"), "8");
  auto kept = store->kv().Get("orders", "o-1");
  ASSERT_TRUE(kept && kept->has_value());
  EXPECT_EQ(**kept, "2");
  ASSERT_TRUE(store->kv().RecordOperatorWrite({.at_unix_us = 5, .actor = {.uid = 1, .name = "ops"}, .ns = "orders",
                                               .key = "o-1", .op = KvAuditOp::kDelete, .existed = true}));
  ASSERT_TRUE(store->Commit());
  EXPECT_EQ(db_->Query("SELECT actor_name || ' ' || op FROM basal.kv_audit"), "ops delete");
  EXPECT_EQ(*store->runs().CountPendingKeyedEvents("orders"), 1u);
  EXPECT_EQ(db_->Query("SELECT count(*) FROM pg_indexes WHERE schemaname = 'basal' AND indexname = 'run_events_delivery'"),
            "1");
}

TEST_F(PgStoreTest, ANewerSchemaIsRefusedAndLeftAsItIs) {
  ASSERT_TRUE(MustOpen());
  db_->Query("UPDATE basal.meta SET value = '9' WHERE key = 'schema_version'");
  auto refused = OpenStore({.locator = db_->locator()});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kDatabase);
  EXPECT_NE(refused.error().message.find("written by a newer basal (schema version 9"), std::string::npos)
      << refused.error().message;
  auto reader = OpenReader(db_->locator());
  ASSERT_FALSE(reader);
  EXPECT_EQ(db_->Query("SELECT value FROM basal.meta WHERE key = 'schema_version'"), "9");
}

TEST_F(PgStoreTest, ABasalSchemaThatIsNotBasalsIsRefusedAndLeftAsItIs) {
  db_->Query("CREATE SCHEMA basal; CREATE TABLE basal.mine(x int)");
  auto refused = OpenStore({.locator = db_->locator()});
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("without basal's tables"), std::string::npos) << refused.error().message;
  EXPECT_EQ(db_->Query("SELECT count(*) FROM pg_tables WHERE schemaname = 'basal'"), "1");
  db_->Query("CREATE TABLE basal.meta(key text PRIMARY KEY, value text NOT NULL); "
             "INSERT INTO basal.meta VALUES ('application', 'other')");
  refused = OpenStore({.locator = db_->locator()});
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("belongs to something else"), std::string::npos) << refused.error().message;
}

TEST_F(PgStoreTest, AReaderNeverCreatesAnything) {
  auto none = OpenReader(db_->locator());
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code, ErrorCode::kNotFound) << none.error().message;
  EXPECT_EQ(db_->Query("SELECT count(*) FROM pg_namespace WHERE nspname = 'basal'"), "0");
  auto store = MustOpen();
  ASSERT_TRUE(store);
  auto id = store->journal().BeginActivation(Start());
  ASSERT_TRUE(id);
  ASSERT_TRUE(store->Commit());
  auto reader = OpenReader(db_->locator());
  ASSERT_TRUE(reader) << reader.error().message;
  auto rows = (*reader)->Activations(std::nullopt, 10);
  ASSERT_TRUE(rows) << rows.error().message;
  EXPECT_EQ(rows->size(), 1u);
}

// Twelve processes open one new database at the same moment: every one succeeds, one creates.
TEST_F(PgStoreTest, ManyProcessesOpeningOneNewDatabaseAllSucceed) {
  constexpr int kProcesses = 12;
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  std::vector<pid_t> children;
  for (int i = 0; i < kProcesses; ++i) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::close(go[1]);
      char c;
      (void)!::read(go[0], &c, 1);  // released together when the parent closes its end
      auto store = OpenStore({.locator = db_->locator()});
      _exit(store ? 0 : 1);
    }
    children.push_back(child);
  }
  ::close(go[0]);
  ::close(go[1]);
  for (pid_t child : children) {
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  }
  EXPECT_EQ(db_->Query("SELECT count(*) FROM basal.meta WHERE key = 'journal_id'"), "1");
}

// The loop's commit: StartCommit returns while the server still holds the commit; writes made
// meanwhile go out without waiting and join the next batch; PollCommit hears the outcome once.
TEST_F(PgStoreTest, ACommitInFlightBlocksNothingAndTheNextBatchGathersBehindIt) {
  auto store = MustOpen();
  ASSERT_TRUE(store);
  ASSERT_NO_FATAL_FAILURE(HoldCommits());
  auto first = store->journal().BeginActivation(Start("first.js"));
  ASSERT_TRUE(first) << first.error().message;
  CallRecord started = Call(*first, 1);
  started.state = CallState::kStarted;
  started.effect = Effect::kExternal;
  started.result_json.clear();
  started.end_unix_us = std::nullopt;
  ASSERT_TRUE(store->journal().RecordCall(started));
  EXPECT_EQ(store->StartCommit(), std::nullopt) << "the commit waits in the server: it is in flight";
  EXPECT_TRUE(store->CommitInFlight());
  EXPECT_FALSE(store->HasPendingBatch());
  EXPECT_GE(store->io().fd, 0);
  EXPECT_EQ(store->PollCommit(), std::nullopt);
  // Writes of the next batch, while the commit is held: each returns without waiting for it.
  auto second = store->journal().BeginActivation(Start("second.js"));
  ASSERT_TRUE(second);
  ASSERT_TRUE(store->journal().RecordCall(Call(*second, 1)));
  ASSERT_TRUE(store->journal().UpdateCall({*first, 1, CallState::kAnswered, "2", "", 1300}));
  ASSERT_TRUE(store->journal().EndActivation(End(*first)));
  EXPECT_TRUE(store->HasPendingBatch());
  EXPECT_EQ(store->PollCommit(), std::nullopt) << "still held: nothing above waited for it";
  {
    auto other = OpenReader(db_->locator());
    ASSERT_TRUE(other);
    auto rows = (*other)->Activations(std::nullopt, 10);
    ASSERT_TRUE(rows);
    EXPECT_TRUE(rows->empty()) << "nothing is visible before the commit ends";
  }
  ReleaseCommits();
  ASSERT_TRUE(LandCommit(*store));
  EXPECT_FALSE(store->CommitInFlight());
  EXPECT_EQ(store->PollCommit(), std::nullopt) << "an outcome is heard once";
  auto second_commit = store->Commit();
  ASSERT_TRUE(second_commit) << second_commit.error().message;
  auto other = OpenReader(db_->locator());
  ASSERT_TRUE(other);
  auto rows = (*other)->Activations(std::nullopt, 10);
  ASSERT_TRUE(rows);
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].outcome, "ok");
  auto calls = (*other)->Calls(*first);
  ASSERT_TRUE(calls);
  ASSERT_EQ(calls->size(), 1u);
  EXPECT_EQ((*calls)[0].result_json, "2");
}

// A write sent behind a commit in flight that the server refuses fails its own batch at that
// batch's commit (whose answers are then never sent), and only that batch.
TEST_F(PgStoreTest, ARefusedWriteBehindACommitFailsItsOwnBatch) {
  auto store = MustOpen();
  ASSERT_TRUE(store);
  ASSERT_NO_FATAL_FAILURE(HoldCommits());
  auto first = store->journal().BeginActivation(Start("first.js"));
  ASSERT_TRUE(first);
  EXPECT_EQ(store->StartCommit(), std::nullopt);
  // Behind the held commit: a call of the first activation, and the end of one that never began.
  ASSERT_TRUE(store->journal().RecordCall(Call(*first, 5)));
  ASSERT_TRUE(store->journal().EndActivation(End(*first + 1000))) << "sent without waiting for the answer";
  ReleaseCommits();
  ASSERT_TRUE(LandCommit(*store)) << "the first batch is not touched by the second's refusal";
  auto refused = store->Commit();
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kDatabase);
  EXPECT_NE(refused.error().message.find("no unfinished activation " + std::to_string(*first + 1000)), std::string::npos)
      << refused.error().message;
  ASSERT_TRUE(store->Rollback());
  auto other = OpenReader(db_->locator());
  ASSERT_TRUE(other);
  auto calls = (*other)->Calls(*first);
  ASSERT_TRUE(calls);
  EXPECT_TRUE(calls->empty()) << "the refused batch left nothing";
  // The store goes on.
  ASSERT_TRUE(store->journal().RecordCall(Call(*first, 6)));
  ASSERT_TRUE(store->Commit());
  calls = (*other)->Calls(*first);
  ASSERT_TRUE(calls);
  ASSERT_EQ(calls->size(), 1u);
  EXPECT_EQ((*calls)[0].call_id, 6);
}

// ---- several hosts (docs/postgres.md, "Several hosts") ----

// Leases by the server's clock: a host whose clock is an hour behind (its lease_until long past by
// the server's clock) or an hour ahead keeps exactly the server's lease; another process takes it
// only once the server says it lapsed, and never takes a live one.
TEST_F(PgStoreTest, LeasesAreTheServersClocksAndOnlyLapsedOnesAreTakenOver) {
  auto a = MustOpen();
  auto b = MustOpen();
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->journal().UseServerClockLeases(std::chrono::hours(1)));
  ASSERT_TRUE(b->journal().UseServerClockLeases(std::chrono::hours(1)));
  const int64_t hour_us = 3'600'000'000;
  const int64_t now = std::chrono::duration_cast<std::chrono::microseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  const ActivationOwner host_a{"machine-a", 10, 1}, host_b{"machine-b", 20, 1};
  ActivationStart behind = Start("behind.js", now - hour_us, host_a);
  behind.lease_until_unix_us = now - hour_us + 15'000'000;  // by its own clock: lapsed an hour ago
  ActivationStart ahead = Start("ahead.js", now + hour_us, host_a);
  ahead.lease_until_unix_us = now + hour_us + 15'000'000;  // by its own clock: good for an hour more
  auto slow = a->journal().BeginActivation(behind);
  auto fast = a->journal().BeginActivation(ahead);
  ASSERT_TRUE(slow && fast);
  ASSERT_TRUE(a->Commit());
  auto rows = a->reader().Activations(std::nullopt, 10);
  ASSERT_TRUE(rows);
  for (const ActivationRow& r : *rows) {
    EXPECT_GT(r.lease_until_unix_us, now + hour_us - 60'000'000) << "activation " << r.id << ": the server's now + 1 h";
    EXPECT_LT(r.lease_until_unix_us, now + hour_us + 60'000'000) << "activation " << r.id;
  }
  auto none = b->journal().TakeExpiredLeases(host_b);
  ASSERT_TRUE(none) << none.error().message;
  EXPECT_TRUE(none->abandoned_activations.empty()) << "a live lease is never taken, whatever its host's clock said";

  // Renewed with a lease of 1 ms by the server's clock: lapsed at once; the other host takes both.
  ASSERT_TRUE(a->journal().UseServerClockLeases(std::chrono::milliseconds(1)));
  auto taken = a->journal().RenewAndCheckLeases(host_a, {*slow, *fast});
  ASSERT_TRUE(taken) << taken.error().message;
  EXPECT_TRUE(taken->empty()) << "nobody took them yet";
  ASSERT_TRUE(a->Commit()) << "the renewal joins the batch";
  ::usleep(20'000);
  auto took = b->journal().TakeExpiredLeases(host_b);
  ASSERT_TRUE(took) << took.error().message;
  std::vector<int64_t> closed = took->abandoned_activations;
  std::sort(closed.begin(), closed.end());
  EXPECT_EQ(closed, (std::vector<int64_t>{*slow, *fast}));
  // The owner's next heartbeat hears that both were taken over.
  taken = a->journal().RenewAndCheckLeases(host_a, {*slow, *fast});
  ASSERT_TRUE(taken);
  EXPECT_EQ(*taken, (std::vector<int64_t>{*slow, *fast}));
}

// Fencing: once another host closed an activation, no call of it is recorded any more, waited for
// (kConflict) or sent behind a commit in flight (its batch fails, and says why).
TEST_F(PgStoreTest, ACallOfAnActivationTakenOverIsNeverRecorded) {
  auto a = MustOpen();
  auto b = MustOpen();
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->journal().UseServerClockLeases(std::chrono::milliseconds(1)));
  const ActivationOwner host_a{"machine-a", 10, 1}, host_b{"machine-b", 20, 1};
  auto lost = a->journal().BeginActivation(Start("lost.js", 1000, host_a));
  auto kept = a->journal().BeginActivation(Start("kept.js", 1000, host_a));
  ASSERT_TRUE(lost && kept);
  ASSERT_TRUE(a->journal().RecordCall(Call(*lost, 1)));
  ASSERT_TRUE(a->Commit());
  ::usleep(20'000);
  ASSERT_TRUE(b->journal().UseServerClockLeases(std::chrono::hours(1)));
  auto took = b->journal().TakeExpiredLeases(host_b);
  ASSERT_TRUE(took);
  ASSERT_EQ(took->abandoned_activations.size(), 2u);
  // `kept` is begun again by b's claim in real life; here it stays closed too: both are fenced.
  auto refused = a->journal().RecordCall(Call(*lost, 2));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kConflict);
  EXPECT_NE(refused.error().message.find("taken over by another host"), std::string::npos) << refused.error().message;
  ASSERT_TRUE(a->Rollback());
  // Behind a commit in flight: sent without waiting, then its batch fails at the commit. The
  // commit is held on the server until the call is sent (a commit that landed first would make
  // the call wait for its answer, and be refused at once, as above).
  ASSERT_NO_FATAL_FAILURE(HoldCommits());
  auto fresh = a->journal().BeginActivation(Start("fresh.js", 1000, host_a));
  ASSERT_TRUE(fresh);
  ASSERT_EQ(a->StartCommit(), std::nullopt);
  ASSERT_TRUE(a->journal().RecordCall(Call(*lost, 3))) << "sent behind the commit";
  ReleaseCommits();
  ASSERT_TRUE(LandCommit(*a)) << "the batch before it is not touched";
  auto failed = a->Commit();
  ASSERT_FALSE(failed);
  EXPECT_NE(failed.error().message.find("taken over by another host"), std::string::npos) << failed.error().message;
  ASSERT_TRUE(a->Rollback());
  auto reader = OpenReader(db_->locator());
  ASSERT_TRUE(reader);
  auto calls = (*reader)->Calls(*lost);
  ASSERT_TRUE(calls);
  ASSERT_EQ(calls->size(), 1u) << "only the call recorded before the takeover";
  EXPECT_EQ((*calls)[0].state, CallState::kAnswered);
  // An unfinished activation of its own still takes calls.
  ASSERT_TRUE(a->journal().RecordCall(Call(*fresh, 1)));
  ASSERT_TRUE(a->Commit());
}

// Two hosts that hold the same queued runs (each took every queued run at its start) never wait
// for each other's open batch to start one: a run whose row another host's batch holds is not
// started here (kConflict, at once). Waiting, two batches that took two runs in crossing order
// were a deadlock: the server ended one of them, and every run of that batch failed with it (the
// 2-host burn-down, docs/performance.md).
TEST_F(PgStoreTest, ARunAnotherHostsBatchIsStartingIsSkippedNotWaitedFor) {
  auto a = MustOpen();
  auto b = MustOpen();
  ASSERT_TRUE(a && b);
  const ActivationOwner host_a{"machine-a", 10, 1}, host_b{"machine-b", 20, 1};
  auto first = a->runs().EnqueueRun(testing_support::Run("orders", R"({"n":1})", "", 1000));
  auto second = a->runs().EnqueueRun(testing_support::Run("orders", R"({"n":2})", "", 1000));
  ASSERT_TRUE(first && second);
  ASSERT_TRUE(a->Commit());
  const int64_t r1 = first->run.id, r2 = second->run.id;
  auto a1 = a->journal().BeginActivation(Start("orders", 1100, host_a));
  auto a2 = a->journal().BeginActivation(Start("orders", 1100, host_a));
  auto b1 = b->journal().BeginActivation(Start("orders", 1100, host_b));
  auto b2 = b->journal().BeginActivation(Start("orders", 1100, host_b));
  ASSERT_TRUE(a1 && a2 && b1 && b2);
  // Each host's open batch starts one run...
  ASSERT_TRUE(a->runs().MarkRunStarted(r1, *a1, 1100));
  ASSERT_TRUE(b->runs().MarkRunStarted(r2, *b1, 1100));
  // ...then each tries the other's, both at once (a on a thread: before, each waited for the
  // other's row lock, and the server killed one batch as a deadlock).
  Result<void> a_took_r2 = Ok();
  std::thread other([&] { a_took_r2 = a->runs().MarkRunStarted(r2, *a2, 1200); });
  Result<void> b_took_r1 = b->runs().MarkRunStarted(r1, *b2, 1200);
  other.join();
  ASSERT_FALSE(a_took_r2);
  ASSERT_FALSE(b_took_r1);
  EXPECT_EQ(a_took_r2.error().code, ErrorCode::kConflict) << a_took_r2.error().message;
  EXPECT_EQ(b_took_r1.error().code, ErrorCode::kConflict) << b_took_r1.error().message;
  EXPECT_NE(b_took_r1.error().message.find("another process"), std::string::npos) << b_took_r1.error().message;
  // Both batches go on (the losers' activations end cancelled, as the module ends them) and commit.
  ASSERT_TRUE(a->journal().EndActivation(End(*a2, Outcome::kCancelled, 1300)));
  ASSERT_TRUE(b->journal().EndActivation(End(*b2, Outcome::kCancelled, 1300)));
  ASSERT_TRUE(a->Commit());
  ASSERT_TRUE(b->Commit());
  auto run1 = a->runs().GetRun(r1);
  auto run2 = a->runs().GetRun(r2);
  ASSERT_TRUE(run1 && *run1 && run2 && *run2);
  EXPECT_EQ((*run1)->state, RunState::kRunning);
  EXPECT_EQ((*run1)->activation_id, *a1) << "each run started once, by the batch that took it first";
  EXPECT_EQ((*run2)->activation_id, *b1);
  EXPECT_EQ((*run2)->state, RunState::kRunning);
  // Once that batch committed the row is free: a late claim is told the run is running.
  auto late = b->runs().MarkRunStarted(r1, *b2, 1400);
  ASSERT_FALSE(late);
  EXPECT_NE(late.error().message.find("is running, not queued"), std::string::npos) << late.error().message;
  ASSERT_TRUE(b->Rollback());
}

// A run as a host queues it.
NewRun Queued(std::string input, std::string trigger, bool held = false) {
  NewRun r;
  r.flow = "f";
  r.input_json = std::move(input);
  r.trigger = std::move(trigger);
  r.created_unix_us = 1;
  r.held = held;
  return r;
}

// A version 7 store (the first with kv_audit) gains version 8's hosts and holders in place; its
// queued runs, which had no holder, are any host's to adopt.
TEST_F(PgStoreTest, AVersion7StoreIsMigratedAndItsQueuedRunsHaveNoHolder) {
  {
    auto store = MustOpen();
    ASSERT_TRUE(store);
    ASSERT_TRUE(store->runs().EnqueueRun(Queued("{}", "api")));
    ASSERT_TRUE(store->Commit());
  }
  db_->Query("DROP TABLE basal.hosts; ALTER TABLE basal.runs DROP COLUMN queued_by, DROP COLUMN held; "
             "UPDATE basal.meta SET value = '7' WHERE key = 'schema_version'");
  auto store = MustOpen();
  ASSERT_TRUE(store);
  EXPECT_EQ(db_->Query("SELECT value FROM basal.meta WHERE key = 'schema_version'"), "8");
  ASSERT_TRUE(store->journal().UseServerClockLeases(std::chrono::seconds(15)));
  ASSERT_TRUE(store->runs().HoldQueuedRunsAs("host-a"));
  auto claimed = store->runs().ClaimQueuedRuns(RunStore::QueuedClaim::kLapsed, 10);
  ASSERT_TRUE(claimed) << claimed.error().message;
  ASSERT_EQ(claimed->size(), 1u);
  ASSERT_TRUE(store->Commit());
  EXPECT_EQ(db_->Query("SELECT queued_by FROM basal.runs"), "host-a");
}

// Who holds a queued run (several hosts): a live host's runs are left to it, except those it has
// not held back when another host has room; a host whose row lapsed loses them all; the start is
// a compare-and-set on the state and the holder, so a run taken while it waited starts once.
TEST_F(PgStoreTest, QueuedRunsAreHeldByALiveHostAndTakenFromALapsedOne) {
  auto a = MustOpen();
  auto b = MustOpen();
  ASSERT_TRUE(a && b);
  for (Store* s : {a.get(), b.get()}) ASSERT_TRUE(s->journal().UseServerClockLeases(std::chrono::seconds(15)));
  ASSERT_TRUE(a->runs().HoldQueuedRunsAs("host-a"));
  ASSERT_TRUE(b->runs().HoldQueuedRunsAs("host-b"));
  auto plain = a->runs().EnqueueRun(Queued("1", "api"));
  auto held = a->runs().EnqueueRun(Queued("2", "schedule:s", true));
  auto cli = a->runs().EnqueueRun(Queued("3", "cli"));
  ASSERT_TRUE(plain && held && cli);
  // Not committed yet: nobody else sees them.
  auto none = b->runs().ClaimQueuedRuns(RunStore::QueuedClaim::kSpare, 10);
  ASSERT_TRUE(none) << none.error().message;
  EXPECT_TRUE(none->empty());
  ASSERT_TRUE(b->Commit());
  ASSERT_TRUE(a->Commit());
  EXPECT_EQ(db_->Query("SELECT string_agg(coalesce(queued_by, '-') || ':' || held, ',' ORDER BY id) FROM basal.runs"),
            "host-a:false,host-a:true,host-a:false");
  // host-a lives: nothing of it has lapsed, and its own claim takes nothing of its own.
  auto lapsed = b->runs().ClaimQueuedRuns(RunStore::QueuedClaim::kLapsed, 10);
  ASSERT_TRUE(lapsed);
  EXPECT_TRUE(lapsed->empty());
  // With room, b takes what a has not held back (not `basal run`'s): the plain run only.
  auto spare = b->runs().ClaimQueuedRuns(RunStore::QueuedClaim::kSpare, 10);
  ASSERT_TRUE(spare);
  ASSERT_EQ(spare->size(), 1u);
  EXPECT_EQ((*spare)[0].id, plain->run.id);
  ASSERT_TRUE(b->Commit());
  // a tries to start it, as its queue would: refused (nothing written), and b starts it.
  auto a_act = a->journal().BeginActivation(Start());
  ASSERT_TRUE(a_act);
  auto refused = a->runs().MarkRunStarted(plain->run.id, *a_act, 2);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kConflict);
  EXPECT_NE(refused.error().message.find("taken by another host"), std::string::npos) << refused.error().message;
  ASSERT_TRUE(a->Commit());
  auto b_act = b->journal().BeginActivation(Start());
  ASSERT_TRUE(b_act);
  ASSERT_TRUE(b->runs().MarkRunStarted(plain->run.id, *b_act, 3));
  ASSERT_TRUE(b->Commit());
  // a stops (or its row lapses): b adopts the held run too, no longer held.
  ASSERT_TRUE(a->runs().LeaveHosts());
  ASSERT_TRUE(a->Commit());
  auto adopted = b->runs().ClaimQueuedRuns(RunStore::QueuedClaim::kLapsed, 10);
  ASSERT_TRUE(adopted);
  ASSERT_EQ(adopted->size(), 1u);
  EXPECT_EQ((*adopted)[0].id, held->run.id);
  ASSERT_TRUE(b->Commit());
  EXPECT_EQ(db_->Query("SELECT queued_by || ':' || held FROM basal.runs WHERE id = " + std::to_string(held->run.id)),
            "host-b:false");
  // A host that left renews its row no more (its running activations' leases still are).
  ASSERT_TRUE(a->journal().RenewAndCheckLeases({"a", 1, 1}, {}));
  ASSERT_TRUE(a->Commit());
  EXPECT_EQ(db_->Query("SELECT count(*) FROM basal.hosts WHERE host_id = 'host-a' AND lease_until_us > 0"), "0")
      << "a host that left is renewed no more";
}

// Two hosts with room claiming one run at the same moment: exactly one gets it (SKIP LOCKED, and
// the second sees the new holder once the first commits).
TEST_F(PgStoreTest, OneQueuedRunIsClaimedByOneHost) {
  auto a = MustOpen();
  auto b = MustOpen();
  auto c = MustOpen();
  ASSERT_TRUE(a && b && c);
  for (Store* s : {a.get(), b.get(), c.get()})
    ASSERT_TRUE(s->journal().UseServerClockLeases(std::chrono::seconds(15)));
  ASSERT_TRUE(a->runs().HoldQueuedRunsAs("host-a"));
  ASSERT_TRUE(b->runs().HoldQueuedRunsAs("host-b"));
  ASSERT_TRUE(c->runs().HoldQueuedRunsAs("host-c"));
  ASSERT_TRUE(b->Commit() && c->Commit());
  ASSERT_TRUE(a->runs().EnqueueRun(Queued("1", "api")));
  ASSERT_TRUE(a->Commit());
  auto by_b = b->runs().ClaimQueuedRuns(RunStore::QueuedClaim::kSpare, 10);  // b's batch holds the row
  auto by_c = c->runs().ClaimQueuedRuns(RunStore::QueuedClaim::kSpare, 10);  // skipped, not waited for
  ASSERT_TRUE(by_b && by_c);
  EXPECT_EQ(by_b->size(), 1u);
  EXPECT_EQ(by_c->size(), 0u);
  ASSERT_TRUE(b->Commit() && c->Commit());
  auto again = c->runs().ClaimQueuedRuns(RunStore::QueuedClaim::kSpare, 10);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->size(), 1u) << "b lives, but the run is not held back: c with room may take it in turn";
  ASSERT_TRUE(c->Commit());
}

// An offer (NOTIFY at the commit of the batch that queued the runs) and a claim are heard by the
// other hosts' listening connections, not by their own host's, and only once committed.
TEST_F(PgStoreTest, AnOfferIsHeardByTheOtherHostsAtItsCommit) {
  auto a = MustOpen();
  auto a_listen = MustOpen();
  auto b_listen = MustOpen();
  ASSERT_TRUE(a && a_listen && b_listen);
  ASSERT_TRUE(a->journal().UseServerClockLeases(std::chrono::seconds(15)));
  ASSERT_TRUE(a->runs().HoldQueuedRunsAs("host-a"));
  ASSERT_TRUE(a->Commit());
  ASSERT_TRUE(a_listen->runs().ListenForOffers("host-a"));
  ASSERT_TRUE(b_listen->runs().ListenForOffers("host-b"));
  ASSERT_TRUE(a->runs().OfferQueuedRuns());
  auto early = b_listen->runs().HeardFromHosts();
  ASSERT_TRUE(early);
  EXPECT_FALSE(early->offered) << "nothing before the commit";
  ASSERT_TRUE(a->Commit());
  bool heard = false;
  for (int i = 0; i < 500 && !heard; ++i) {
    pollfd p{b_listen->io().fd, POLLIN, 0};
    ::poll(&p, 1, 10);
    auto h = b_listen->runs().HeardFromHosts();
    ASSERT_TRUE(h) << h.error().message;
    heard = h->offered;
  }
  EXPECT_TRUE(heard);
  auto own = a_listen->runs().HeardFromHosts();
  ASSERT_TRUE(own);
  EXPECT_FALSE(own->offered) << "a host's own offer is not heard as one";
  // A claim is told to the other hosts at its commit (a former holder drops the runs from its
  // queue); the claimer's own listener does not take it as news.
  auto b = MustOpen();
  ASSERT_TRUE(b);
  ASSERT_TRUE(b->journal().UseServerClockLeases(std::chrono::seconds(15)));
  ASSERT_TRUE(b->runs().HoldQueuedRunsAs("host-b"));
  auto queued = a->runs().EnqueueRun(Queued("1", "api"));
  ASSERT_TRUE(queued);
  ASSERT_TRUE(a->Commit());
  auto claimed = b->runs().ClaimQueuedRuns(RunStore::QueuedClaim::kSpare, 10);
  ASSERT_TRUE(claimed);
  ASSERT_EQ(claimed->size(), 1u);
  ASSERT_TRUE(b->Commit());
  std::vector<int64_t> taken;
  for (int i = 0; i < 500 && taken.empty(); ++i) {
    pollfd p{a_listen->io().fd, POLLIN, 0};
    ::poll(&p, 1, 10);
    auto h = a_listen->runs().HeardFromHosts();
    ASSERT_TRUE(h) << h.error().message;
    taken = h->taken;
  }
  EXPECT_EQ(taken, std::vector<int64_t>{queued->run.id});
  for (int i = 0; i < 20; ++i) {
    pollfd p{b_listen->io().fd, POLLIN, 0};
    ::poll(&p, 1, 10);
    auto h = b_listen->runs().HeardFromHosts();
    ASSERT_TRUE(h) << h.error().message;
    EXPECT_TRUE(h->taken.empty()) << "a host's own claim";
  }
  // Its connection killed: an error, and the store's next use connects and listens again.
  db_->Query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
             "AND application_name = 'basal' AND pid <> pg_backend_pid() AND query LIKE 'LISTEN%'");
  bool broke = false;
  for (int i = 0; i < 500 && !broke; ++i) {
    pollfd p{b_listen->io().fd, POLLIN, 0};
    ::poll(&p, 1, 10);
    broke = !b_listen->runs().HeardFromHosts();
  }
  EXPECT_TRUE(broke);
  ASSERT_TRUE(b_listen->Check());  // a use between batches: connected again, listening again
  ASSERT_TRUE(a->runs().OfferQueuedRuns());
  ASSERT_TRUE(a->Commit());
  heard = false;
  for (int i = 0; i < 500 && !heard; ++i) {
    pollfd p{b_listen->io().fd, POLLIN, 0};
    ::poll(&p, 1, 10);
    auto h = b_listen->runs().HeardFromHosts();
    ASSERT_TRUE(h) << h.error().message;
    heard = h->offered;
  }
  EXPECT_TRUE(heard) << "listening again after the connection was made again";
}

// SQLite is one host: the several-hosts methods are refused, saying so.
TEST(SeveralHostsOnSqliteTest, AreRefused) {
  char dir[] = "/tmp/basal-sqlite-hosts-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  auto store = OpenStore({.locator = std::string(dir) + "/journal.db"});
  ASSERT_TRUE(store) << store.error().message;
  auto r = (*store)->journal().UseServerClockLeases(std::chrono::seconds(15));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(r.error().message.find("PostgreSQL"), std::string::npos) << r.error().message;
  EXPECT_FALSE((*store)->journal().TakeExpiredLeases({"h", 1, 1}));
  EXPECT_FALSE((*store)->runs().HoldQueuedRunsAs("h"));
  EXPECT_FALSE((*store)->runs().ClaimQueuedRuns(RunStore::QueuedClaim::kLapsed, 1));
  EXPECT_FALSE((*store)->runs().ListenForOffers("h"));
  store->reset();
  std::filesystem::remove_all(dir);
}

// A commit that fails in flight (here a deferred check refuses it at COMMIT) is heard as failed,
// and the batch written behind it fails too: it was built on the lost one. The commit is held on
// the server until the call is sent behind it (a commit that failed first would have the call
// refused at once, and the batch behind it would be empty: seen under load).
TEST_F(PgStoreTest, AFailedCommitInFlightFailsTheBatchBehindIt) {
  auto store = MustOpen();
  ASSERT_TRUE(store);
  ASSERT_NO_FATAL_FAILURE(HoldCommits());
  // Deferred triggers of one event fire in the order of their names: test_hold, then test_then_doom.
  db_->Query(
      "CREATE FUNCTION basal.test_doom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
      "IF NEW.flow = 'doomed.js' THEN RAISE EXCEPTION 'doomed by the test'; END IF; RETURN NULL; END $$; "
      "CREATE CONSTRAINT TRIGGER test_then_doom AFTER INSERT ON basal.activations DEFERRABLE INITIALLY DEFERRED "
      "FOR EACH ROW EXECUTE FUNCTION basal.test_doom()");
  auto doomed = store->journal().BeginActivation(Start("doomed.js"));
  ASSERT_TRUE(doomed);
  ASSERT_EQ(store->StartCommit(), std::nullopt) << "the commit waits in the server: it is in flight";
  ASSERT_TRUE(store->journal().RecordCall(Call(*doomed, 1))) << "sent behind the commit";
  ReleaseCommits();
  auto landed = LandCommit(*store);
  ASSERT_FALSE(landed);
  EXPECT_NE(landed.error().message.find("doomed by the test"), std::string::npos) << landed.error().message;
  EXPECT_NE(landed.error().message.find("Rollback()"), std::string::npos) << landed.error().message;
  EXPECT_FALSE(store->Commit()) << "the batch behind a failed commit cannot commit";
  ASSERT_TRUE(store->Rollback());
  auto fine = store->journal().BeginActivation(Start("fine.js"));
  ASSERT_TRUE(fine) << fine.error().message;
  ASSERT_TRUE(store->Commit());
  auto other = OpenReader(db_->locator());
  ASSERT_TRUE(other);
  auto rows = (*other)->Activations(std::nullopt, 10);
  ASSERT_TRUE(rows);
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].flow, "fine.js");
}

// Readiness: the store says whether the server takes writes, and reconnects a broken connection.
TEST_F(PgStoreTest, CheckSaysWhetherTheServerTakesWritesAndReconnects) {
  auto store = MustOpen();
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->Check());
  // Its backend killed (a restart, a failover, an operator): the next check connects again.
  db_->Query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
             "AND application_name = 'basal'");
  auto checked = store->Check();
  ASSERT_TRUE(checked) << checked.error().message;
  auto id = store->journal().BeginActivation(Start());
  ASSERT_TRUE(id) << id.error().message;
  ASSERT_TRUE(store->Commit());
  // A database whose sessions are read only takes no writes: not ready, and it says why.
  db_->Query("ALTER DATABASE " + db_->name() + " SET default_transaction_read_only = on");
  auto read_only = MustOpen();
  ASSERT_TRUE(read_only);
  auto no = read_only->Check();
  ASSERT_FALSE(no);
  EXPECT_EQ(no.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(no.error().message.find("read only"), std::string::npos) << no.error().message;
}

// A server whose packets go nowhere (a host gone from the network, a failover's old address)
// holds a reconnect for a brief step at each use of the store, not for connect_timeout: the
// attempt goes on in the background. Here the locator names a socket directory of the test's;
// first its socket is a link to the cluster's, then a socket that takes connections and never
// answers them, then the link again. connect_timeout is 600 s: a blocking reconnect would hold
// the test until ctest's timeout kills it.
TEST_F(PgStoreTest, AReconnectToAServerThatNeverAnswersHoldsNoUseOfTheStore) {
  const std::string real = db_->locator();
  const size_t host_at = real.find("host=");
  ASSERT_NE(host_at, std::string::npos) << real;
  std::string host_dir;
  {
    // The cluster's socket directory, percent-decoded.
    const std::string encoded = real.substr(host_at + 5, real.find('&', host_at) - host_at - 5);
    for (size_t i = 0; i < encoded.size(); ++i) {
      if (encoded[i] == '%' && i + 2 < encoded.size()) {
        host_dir += static_cast<char>(std::stoi(encoded.substr(i + 1, 2), nullptr, 16));
        i += 2;
      } else {
        host_dir += encoded[i];
      }
    }
  }
  char dir_template[] = "/tmp/basal-pg-relay-XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  const std::string socket_name = dir + "/.s.PGSQL.5432";
  std::filesystem::create_symlink(host_dir + "/.s.PGSQL.5432", socket_name);
  std::string encoded_dir;
  for (char c : dir) encoded_dir += c == '/' ? std::string("%2F") : std::string(1, c);
  const std::string locator = real.substr(0, host_at) + "host=" + encoded_dir + "&connect_timeout=600";
  auto opened = OpenStore({.locator = locator});
  ASSERT_TRUE(opened) << opened.error().message;
  Store& store = **opened;
  ASSERT_TRUE(store.Check());

  // The server becomes a listener that never answers; the store's session is ended.
  std::filesystem::remove(socket_name);
  const int silent = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(silent, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  ASSERT_LT(socket_name.size(), sizeof(address.sun_path));
  std::copy(socket_name.begin(), socket_name.end(), address.sun_path);
  ASSERT_EQ(::bind(silent, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(::listen(silent, 16), 0);
  db_->Query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
             "AND application_name = 'basal'");
  // Every use answers, refused, while the attempt waits for the silent server.
  std::string said;
  for (int use = 0; use < 5; ++use) {
    auto checked = store.Check();
    ASSERT_FALSE(checked);
    said = checked.error().message;
    std::this_thread::sleep_for(std::chrono::milliseconds(120));
  }
  EXPECT_NE(said.find("has not completed the connection yet"), std::string::npos) << said;

  // The server is back: the attempt on the silent socket ends when that socket goes, and a new one
  // connects.
  ::close(silent);
  std::filesystem::remove(socket_name);
  std::filesystem::create_symlink(host_dir + "/.s.PGSQL.5432", socket_name);
  Result<void> back = MakeError(ErrorCode::kIo, "not checked");
  for (int use = 0; use < 100 && !back; ++use) {
    back = store.Check();
    if (!back) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(back) << back.error().message;
  auto id = store.journal().BeginActivation(Start());
  ASSERT_TRUE(id) << id.error().message;
  ASSERT_TRUE(store.Commit());
  opened->reset();
  std::filesystem::remove_all(dir);
}

// PostgreSQL's text holds UTF-8 only: other bytes are refused before anything is sent, so the
// batch goes on; kv keys and namespaces are bytes (bytea) and take anything.
TEST_F(PgStoreTest, TextThatIsNotUtf8IsRefusedWithoutBreakingTheBatch) {
  auto store = MustOpen();
  ASSERT_TRUE(store);
  auto kept = store->journal().BeginActivation(Start("kept.js"));
  ASSERT_TRUE(kept);
  auto bad = store->journal().BeginActivation(Start("caf\xe9.js"));
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.error().message.find("not UTF-8"), std::string::npos) << bad.error().message;
  ASSERT_TRUE(store->kv().Put(std::string("n\0\xff", 3), std::string("\xfe\0", 2), "1"));
  ASSERT_TRUE(store->Commit());
  auto value = store->kv().Get(std::string("n\0\xff", 3), std::string("\xfe\0", 2));
  ASSERT_TRUE(value && value->has_value());
  EXPECT_EQ(**value, "1");
}

// JSON that jsonb cannot hold (a \u0000 in a string) is kept as written and compared as text; a
// value changed by hand into something that is not JSON is reported, and breaks no batch.
TEST_F(PgStoreTest, KvValuesJsonbCannotHoldAndValuesThatAreNotJson) {
  auto store = MustOpen();
  ASSERT_TRUE(store);
  KvStore& kv = store->kv();
  const std::string nul = R"("a\u0000b")";
  ASSERT_TRUE(kv.Put("j", "nul", nul));
  auto got = kv.Get("j", "nul");
  ASSERT_TRUE(got && got->has_value());
  EXPECT_EQ(**got, nul);
  auto other = kv.CompareAndSwap("j", "nul", std::string(R"("ab")"), "1", {});
  ASSERT_TRUE(other) << other.error().message;
  EXPECT_EQ(other->status, KvUpdate::Status::kMismatch);
  auto incr = kv.Increment("j", "nul", 1, {});
  ASSERT_TRUE(incr) << incr.error().message;
  EXPECT_EQ(incr->status, KvUpdate::Status::kNotAnInteger);
  auto same = kv.CompareAndSwap("j", "nul", nul, "2", {});
  ASSERT_TRUE(same) << same.error().message;
  EXPECT_EQ(same->status, KvUpdate::Status::kWritten);
  ASSERT_TRUE(kv.Put("j", "hand", "1"));
  ASSERT_TRUE(store->Commit());
  db_->Query("UPDATE basal.kv SET value = '{not json' WHERE key = 'hand'::bytea");
  auto cas = kv.CompareAndSwap("j", "hand", std::string("1"), "2", {});
  ASSERT_FALSE(cas);
  EXPECT_EQ(cas.error().code, ErrorCode::kDatabase);
  EXPECT_NE(cas.error().message.find("not JSON"), std::string::npos) << cas.error().message;
  auto add = kv.Increment("j", "hand", 1, {});
  ASSERT_FALSE(add);
  EXPECT_EQ(add.error().code, ErrorCode::kDatabase);
  ASSERT_TRUE(kv.Put("j", "after", "3"));
  ASSERT_TRUE(store->Commit()) << "the refusals broke no batch";
}

// A locator's password is never in a message or in the store's location.
TEST_F(PgStoreTest, APasswordIsNeverShown) {
  // The test cluster trusts its socket, so the password is ignored there but still given.
  const std::string with_password = db_->locator() + "&password=s3cret";
  auto store = OpenStore({.locator = with_password});
  ASSERT_TRUE(store) << store.error().message;
  EXPECT_EQ((*store)->location().find("s3cret"), std::string::npos) << (*store)->location();
  EXPECT_NE((*store)->location().find("password=***"), std::string::npos) << (*store)->location();
  auto error = (*store)->journal().EndActivation(End(12345));
  ASSERT_FALSE(error);
  EXPECT_EQ(error.error().message.find("s3cret"), std::string::npos) << error.error().message;
  std::string userinfo = PgTestDatabase::LocatorOf("no_such_database");
  userinfo.replace(userinfo.find("basal@"), 6, "basal:s3cret@");
  auto refused = OpenStore({.locator = userinfo});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kIo);
  EXPECT_EQ(refused.error().message.find("s3cret"), std::string::npos) << refused.error().message;
  EXPECT_NE(refused.error().message.find("basal:***@"), std::string::npos) << refused.error().message;
  EXPECT_NE(refused.error().message.find("no_such_database"), std::string::npos) << refused.error().message;
}

}  // namespace
}  // namespace basal
