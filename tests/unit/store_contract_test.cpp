// The store's contract (store.h), run against every backend: batches and what a reader sees,
// rollback, duplicates, the call-record lifecycle, leases, recovery of abandoned activations, the
// kv store with its atomic operations (also across processes), approvals, runs (idempotency keys,
// states, settling after recovery, parked runs, their events, retries), and basal serve's API
// tokens and schedule marks. A new backend adds one INSTANTIATE_TEST_SUITE_P line at the bottom
// and passes. Built twice: store_test runs it on SQLite, store_pg_test
// (BASAL_STORE_CONTRACT_POSTGRES) on a private PostgreSQL cluster (tests/support/pg_cluster.py),
// one new database per test.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "basal/manifest.h"
#include "parent/store/open.h"
#include "parent/store/owner.h"
#include "parent/store/sqlite/sqlite_store.h"
#include "parent/store/store.h"
#include "unit/store_test_support.h"
#ifdef BASAL_STORE_CONTRACT_POSTGRES
#include "unit/pg_test_support.h"
#endif

namespace basal {
namespace {

using testing_support::Call;
using testing_support::End;
using testing_support::Start;
using testing_support::TempDir;

// One fresh, empty store location for one test.
class BackendInstance {
 public:
  virtual ~BackendInstance() = default;
  virtual Result<std::unique_ptr<Store>> Open() = 0;
  virtual Result<std::unique_ptr<JournalReader>> OpenReader() = 0;  // another connection, read only
  virtual std::string location() const = 0;  // what the backend's messages may name; ForFlow strips it
};

struct Backend {
  std::string name;
  std::function<std::unique_ptr<BackendInstance>()> make;
};

void PrintTo(const Backend& backend, std::ostream* os) { *os << backend.name; }

class SqliteInstance final : public BackendInstance {
 public:
  Result<std::unique_ptr<Store>> Open() override { return OpenSqliteStore({.path = path_}); }
  Result<std::unique_ptr<JournalReader>> OpenReader() override { return OpenSqliteReader(path_); }
  std::string location() const override { return path_; }

 private:
  TempDir dir_;
  std::string path_ = dir_.File("journal.db");
};

#ifdef BASAL_STORE_CONTRACT_POSTGRES
class PostgresInstance final : public BackendInstance {
 public:
  Result<std::unique_ptr<Store>> Open() override { return OpenStore({.locator = db_.locator()}); }
  Result<std::unique_ptr<JournalReader>> OpenReader() override { return basal::OpenReader(db_.locator()); }
  std::string location() const override { return RedactLocator(db_.locator()); }

 private:
  testing_support::PgTestDatabase db_;
};
#endif

class StoreContract : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
#ifdef BASAL_STORE_CONTRACT_POSTGRES
    if (!testing_support::PgTestDatabase::Available()) GTEST_SKIP() << testing_support::PgTestDatabase::kWhySkipped;
#endif
    instance_ = GetParam().make();
    store_ = MustOpen();
    ASSERT_TRUE(store_);
  }
  std::unique_ptr<Store> MustOpen() {
    auto s = instance_->Open();
    if (!s) {
      ADD_FAILURE() << s.error().message;
      return nullptr;
    }
    return std::move(*s);
  }
  std::unique_ptr<JournalReader> MustRead() {
    auto r = instance_->OpenReader();
    if (!r) {
      ADD_FAILURE() << r.error().message;
      return nullptr;
    }
    return std::move(*r);
  }
  size_t CountActivations(JournalReader& r) {
    auto rows = r.Activations(std::nullopt, SIZE_MAX);
    EXPECT_TRUE(rows) << (rows ? "" : rows.error().message);
    return rows ? rows->size() : 0;
  }
  JournalStore& journal() { return store_->journal(); }
  KvStore& kv() { return store_->kv(); }

  std::unique_ptr<BackendInstance> instance_;
  std::unique_ptr<Store> store_;
};

TEST_P(StoreContract, RoundTripAcrossReopen) {
  ActivationOwner owner{"host-a", 4242, 777};
  auto id = journal().BeginActivation(Start("hello.js", 1000, owner));
  ASSERT_TRUE(id) << id.error().message;
  // Recorded out of call-id order (results may come back in any order): record order is kept.
  ASSERT_TRUE(journal().RecordCall(Call(*id, 2, true)));
  ASSERT_TRUE(journal().RecordCall(Call(*id, 1, false)));
  ActivationEnd end = End(*id);
  end.end_unix_us = 5000;
  end.result_json = R"({"answer":42})";
  end.cpu_us = 321;
  ASSERT_TRUE(journal().EndActivation(end));
  ASSERT_TRUE(store_->Commit());
  EXPECT_FALSE(store_->HasPendingBatch());
  store_.reset();

  store_ = MustOpen();
  ASSERT_TRUE(store_);
  std::unique_ptr<JournalReader> other = MustRead();
  ASSERT_TRUE(other);
  for (JournalReader* reader : {&store_->reader(), other.get()}) {
    auto rows = reader->Activations(std::nullopt, 10);
    ASSERT_TRUE(rows) << rows.error().message;
    ASSERT_EQ(rows->size(), 1u);
    const ActivationRow& a = (*rows)[0];
    EXPECT_EQ(a.id, *id);
    EXPECT_EQ(a.flow, "hello.js");
    EXPECT_EQ(a.source_hash, "sha256:aa");
    EXPECT_EQ(a.manifest_hash, "sha256:bb");
    EXPECT_EQ(a.input_json, R"({"n":1})");
    EXPECT_EQ(a.start_unix_us, 1000);
    EXPECT_EQ(a.end_unix_us, std::optional<int64_t>(5000));
    EXPECT_EQ(a.outcome, "ok");
    EXPECT_EQ(a.result_json, R"({"answer":42})");
    EXPECT_EQ(a.error_json, "");
    EXPECT_EQ(a.cpu_us, 321);
    EXPECT_EQ(a.owner.host, "host-a");
    EXPECT_EQ(a.owner.pid, 4242);
    EXPECT_EQ(a.owner.start_ticks, 777);
    EXPECT_EQ(a.lease_until_unix_us, 1000 + 60'000'000);

    auto calls = reader->Calls(*id);
    ASSERT_TRUE(calls) << calls.error().message;
    ASSERT_EQ(calls->size(), 2u);
    const CallRow& allowed = (*calls)[0];
    EXPECT_EQ(allowed.call_id, 2);
    EXPECT_EQ(allowed.activation_id, *id);
    EXPECT_EQ(allowed.name, "kv.get");
    EXPECT_EQ(allowed.args_json, R"({"namespace":"orders","key":"k2"})");
    EXPECT_EQ(allowed.decision.verdict, Verdict::kAllow);
    EXPECT_TRUE(allowed.decision.allowed());
    EXPECT_EQ(allowed.decision.rule, "grants.kv.get");
    EXPECT_EQ(allowed.decision.reason, "granted by manifest");
    EXPECT_EQ(allowed.effect, Effect::kPure);
    EXPECT_EQ(allowed.state, CallState::kAnswered);
    EXPECT_EQ(allowed.result_json, "null");
    EXPECT_EQ(allowed.error_json, "");
    EXPECT_EQ(allowed.start_unix_us, 1102);
    EXPECT_EQ(allowed.end_unix_us, std::optional<int64_t>(1202));
    const CallRow& denied = (*calls)[1];
    EXPECT_EQ(denied.call_id, 1);
    EXPECT_EQ(denied.decision.verdict, Verdict::kDeny);
    EXPECT_EQ(denied.decision.rule, "no grant");
    EXPECT_EQ(denied.decision.reason, "kv.get is not granted for namespace orders");
    EXPECT_EQ(denied.result_json, "");
    EXPECT_EQ(denied.error_json, R"({"name":"PermissionDenied","message":"denied"})");

    auto one = reader->Activations(*id, 0);
    ASSERT_TRUE(one);
    ASSERT_EQ(one->size(), 1u);
    EXPECT_EQ((*one)[0].id, *id);
  }
}

TEST_P(StoreContract, EveryVerdictEffectAndStateRoundTrips) {
  auto id = journal().BeginActivation(Start());
  ASSERT_TRUE(id);
  int64_t call_id = 0;
  for (Verdict v : {Verdict::kAllow, Verdict::kDeny, Verdict::kNeedsApproval, Verdict::kQuotaExceeded}) {
    for (Effect e : {Effect::kPure, Effect::kIdempotent, Effect::kExternal}) {
      for (CallState s : {CallState::kDecided, CallState::kStarted, CallState::kAnswered, CallState::kAbandoned,
                          CallState::kUnknown}) {
        CallRecord c = Call(*id, ++call_id);
        c.decision.verdict = v;
        c.effect = e;
        c.state = s;
        c.end_unix_us = std::nullopt;
        ASSERT_TRUE(journal().RecordCall(c)) << VerdictName(v) << EffectName(e) << CallStateName(s);
      }
    }
  }
  ASSERT_TRUE(store_->Commit());
  auto reader = MustRead();
  ASSERT_TRUE(reader);
  auto calls = reader->Calls(*id);
  ASSERT_TRUE(calls);
  ASSERT_EQ(calls->size(), static_cast<size_t>(call_id));
  size_t i = 0;
  for (Verdict v : {Verdict::kAllow, Verdict::kDeny, Verdict::kNeedsApproval, Verdict::kQuotaExceeded}) {
    for (Effect e : {Effect::kPure, Effect::kIdempotent, Effect::kExternal}) {
      for (CallState s : {CallState::kDecided, CallState::kStarted, CallState::kAnswered, CallState::kAbandoned,
                          CallState::kUnknown}) {
        const CallRow& row = (*calls)[i++];
        EXPECT_EQ(row.decision.verdict, v);
        EXPECT_EQ(row.effect, e);
        EXPECT_EQ(row.state, s);
        EXPECT_FALSE(row.end_unix_us.has_value());
      }
    }
  }
}

TEST_P(StoreContract, UnfinishedActivationReadsAsUnfinished) {
  auto id = journal().BeginActivation(Start());
  ASSERT_TRUE(id);
  ASSERT_TRUE(store_->Commit());
  auto rows = store_->reader().Activations(*id, 1);
  ASSERT_TRUE(rows);
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_FALSE((*rows)[0].end_unix_us.has_value());
  EXPECT_EQ((*rows)[0].outcome, "");
  EXPECT_EQ((*rows)[0].cpu_us, 0);
}

TEST_P(StoreContract, ActivationsNewestLastWithLimit) {
  std::vector<int64_t> ids;
  for (int i = 0; i < 5; ++i) {
    auto id = journal().BeginActivation(Start("f" + std::to_string(i) + ".js", i));
    ASSERT_TRUE(id);
    ids.push_back(*id);
  }
  ASSERT_TRUE(store_->Commit());
  JournalReader& r = store_->reader();
  auto last2 = r.Activations(std::nullopt, 2);
  ASSERT_TRUE(last2);
  ASSERT_EQ(last2->size(), 2u);
  EXPECT_EQ((*last2)[0].id, ids[3]);
  EXPECT_EQ((*last2)[1].id, ids[4]);
  EXPECT_EQ((*last2)[1].flow, "f4.js");
  auto all = r.Activations(std::nullopt, SIZE_MAX);
  ASSERT_TRUE(all);
  EXPECT_EQ(all->size(), 5u);
  auto none = r.Activations(std::nullopt, 0);
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty());
  auto missing = r.Activations(ids.back() + 100, 10);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  EXPECT_NE(missing.error().message.find(std::to_string(ids.back() + 100)), std::string::npos);
}

TEST_P(StoreContract, UncommittedBatchIsInvisibleAndRolledBackOnDestruction) {
  EXPECT_FALSE(store_->HasPendingBatch());
  auto id = journal().BeginActivation(Start());
  ASSERT_TRUE(id);
  EXPECT_TRUE(store_->HasPendingBatch());
  ASSERT_TRUE(journal().RecordCall(Call(*id, 1)));
  ASSERT_TRUE(kv().Put("orders", "o-1", "1"));
  // The store's own reader sees its batch...
  auto own = store_->reader().Activations(std::nullopt, 10);
  ASSERT_TRUE(own);
  EXPECT_EQ(own->size(), 1u);
  // ...another connection does not.
  {
    auto other = MustRead();
    ASSERT_TRUE(other);
    EXPECT_EQ(CountActivations(*other), 0u);
  }
  store_.reset();  // never commits
  store_ = MustOpen();
  ASSERT_TRUE(store_);
  EXPECT_EQ(CountActivations(store_->reader()), 0u);
  auto v = kv().Get("orders", "o-1");
  ASSERT_TRUE(v);
  EXPECT_FALSE(v->has_value());
}

TEST_P(StoreContract, CommittedBatchIsVisibleToAnotherReader) {
  EXPECT_TRUE(store_->Commit());  // no batch: a no-op
  auto a = journal().BeginActivation(Start("a.js"));
  auto b = journal().BeginActivation(Start("b.js"));
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(journal().RecordCall(Call(*a, 1)));
  ASSERT_TRUE(kv().Put("orders", "o-1", R"({"qty":3})"));
  ASSERT_TRUE(journal().EndActivation(End(*a)));
  ASSERT_TRUE(store_->Commit());
  EXPECT_FALSE(store_->HasPendingBatch());
  auto other = MustRead();
  ASSERT_TRUE(other);
  auto rows = other->Activations(std::nullopt, 10);
  ASSERT_TRUE(rows);
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].outcome, "ok");
  EXPECT_EQ((*rows)[1].outcome, "");
  auto calls = other->Calls(*a);
  ASSERT_TRUE(calls);
  EXPECT_EQ(calls->size(), 1u);
}

TEST_P(StoreContract, FailedWritesLeaveTheBatchUsable) {
  auto id = journal().BeginActivation(Start());
  ASSERT_TRUE(id);
  ASSERT_TRUE(journal().RecordCall(Call(*id, 7)));
  auto dup = journal().RecordCall(Call(*id, 7));
  ASSERT_FALSE(dup);
  EXPECT_EQ(dup.error().code, ErrorCode::kDatabase);
  EXPECT_NE(dup.error().message.find("call id 7"), std::string::npos) << dup.error().message;
  EXPECT_FALSE(journal().RecordCall(Call(*id + 1000, 1)));  // a call of an activation never begun
  CallRecord no_reason = Call(*id, 8);
  no_reason.decision.reason.clear();
  EXPECT_FALSE(journal().RecordCall(no_reason));
  auto unknown_end = journal().EndActivation(End(*id + 1000));
  ASSERT_FALSE(unknown_end);
  EXPECT_EQ(unknown_end.error().code, ErrorCode::kNotFound);
  ASSERT_TRUE(journal().EndActivation(End(*id, Outcome::kScriptError, 1)));
  auto twice = journal().EndActivation(End(*id, Outcome::kOk, 2));
  ASSERT_FALSE(twice);
  EXPECT_EQ(twice.error().code, ErrorCode::kNotFound);
  ASSERT_TRUE(store_->Commit());
  auto other = MustRead();
  ASSERT_TRUE(other);
  auto rows = other->Activations(*id, 1);
  ASSERT_TRUE(rows);
  EXPECT_EQ((*rows)[0].outcome, "script_error");
  EXPECT_EQ((*rows)[0].end_unix_us, std::optional<int64_t>(1));
  auto calls = other->Calls(*id);
  ASSERT_TRUE(calls);
  EXPECT_EQ(calls->size(), 1u);
}

TEST_P(StoreContract, RollbackDropsTheWholeBatchKvIncluded) {
  auto id = journal().BeginActivation(Start());
  ASSERT_TRUE(id);
  ASSERT_TRUE(store_->Commit());
  ASSERT_TRUE(kv().Put("orders", "o-9", "9"));
  ASSERT_TRUE(journal().RecordCall(Call(*id, 1)));
  ASSERT_TRUE(store_->Rollback());
  EXPECT_FALSE(store_->HasPendingBatch());
  auto gone = kv().Get("orders", "o-9");
  ASSERT_TRUE(gone);
  EXPECT_FALSE(gone->has_value());
  ASSERT_TRUE(kv().Put("orders", "o-9", "10"));
  ASSERT_TRUE(journal().RecordCall(Call(*id, 2)));
  ASSERT_TRUE(store_->Commit());
  auto other = MustRead();
  ASSERT_TRUE(other);
  auto calls = other->Calls(*id);
  ASSERT_TRUE(calls);
  ASSERT_EQ(calls->size(), 1u);
  EXPECT_EQ((*calls)[0].call_id, 2);
  auto value = kv().Get("orders", "o-9");
  ASSERT_TRUE(value && value->has_value());
  EXPECT_EQ(**value, "10");
}

// decided -> started -> answered for an external call; answered is final.
TEST_P(StoreContract, CallLifecycle) {
  auto id = journal().BeginActivation(Start());
  ASSERT_TRUE(id);
  CallRecord c = Call(*id, 1);
  c.name = "mail.send";
  c.effect = Effect::kExternal;
  c.state = CallState::kDecided;
  c.result_json.clear();
  c.end_unix_us = std::nullopt;
  ASSERT_TRUE(journal().RecordCall(c));
  ASSERT_TRUE(journal().UpdateCall({*id, 1, CallState::kStarted, "", "", std::nullopt}));
  ASSERT_TRUE(store_->Commit());  // intent before effect
  {
    auto other = MustRead();
    ASSERT_TRUE(other);
    auto calls = other->Calls(*id);
    ASSERT_TRUE(calls);
    ASSERT_EQ(calls->size(), 1u);
    EXPECT_EQ((*calls)[0].state, CallState::kStarted);
    EXPECT_FALSE((*calls)[0].end_unix_us.has_value());
  }
  ASSERT_TRUE(journal().UpdateCall({*id, 1, CallState::kAnswered, R"({"sent":true})", "", 1500}));
  auto back = journal().UpdateCall({*id, 1, CallState::kStarted, "", "", std::nullopt});
  ASSERT_FALSE(back);
  EXPECT_EQ(back.error().code, ErrorCode::kInternal);
  EXPECT_NE(back.error().message.find("answered"), std::string::npos) << back.error().message;
  auto again = journal().UpdateCall({*id, 1, CallState::kAbandoned, "", "", 1600});
  EXPECT_FALSE(again);
  auto missing = journal().UpdateCall({*id, 99, CallState::kAnswered, "1", "", 1500});
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  ASSERT_TRUE(store_->Commit());  // the failed updates changed nothing and broke no batch
  auto calls = store_->reader().Calls(*id);
  ASSERT_TRUE(calls);
  ASSERT_EQ(calls->size(), 1u);
  EXPECT_EQ((*calls)[0].state, CallState::kAnswered);
  EXPECT_EQ((*calls)[0].result_json, R"({"sent":true})");
  EXPECT_EQ((*calls)[0].end_unix_us, std::optional<int64_t>(1500));
}

// The activation ended first (deadline): the call is abandoned; its late answer is still written.
TEST_P(StoreContract, LateAnswerIsWrittenIntoAnAbandonedRecord) {
  auto id = journal().BeginActivation(Start());
  ASSERT_TRUE(id);
  CallRecord c = Call(*id, 1);
  c.state = CallState::kStarted;
  c.effect = Effect::kIdempotent;
  c.result_json.clear();
  c.end_unix_us = std::nullopt;
  ASSERT_TRUE(journal().RecordCall(c));
  ASSERT_TRUE(journal().UpdateCall({*id, 1, CallState::kAbandoned, "", "", 2000}));
  ASSERT_TRUE(journal().EndActivation(End(*id, Outcome::kDeadline, 2000)));
  ASSERT_TRUE(store_->Commit());
  ASSERT_TRUE(journal().UpdateCall({*id, 1, CallState::kAbandoned, "\"late\"", "", 2500}));
  ASSERT_TRUE(store_->Commit());
  auto calls = store_->reader().Calls(*id);
  ASSERT_TRUE(calls);
  EXPECT_EQ((*calls)[0].state, CallState::kAbandoned);
  EXPECT_EQ((*calls)[0].result_json, "\"late\"");
  EXPECT_EQ((*calls)[0].end_unix_us, std::optional<int64_t>(2500));  // when the answer came
  auto answered = journal().UpdateCall({*id, 1, CallState::kAnswered, "1", "", 3000});
  EXPECT_FALSE(answered);  // abandoned never becomes answered
  (void)store_->Rollback();
}

// A pid that no process has: a child that has exited and been reaped.
int64_t DeadPid() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  return child;
}

struct Recovered {
  int64_t id;
  bool closed;
};

TEST_P(StoreContract, RecoverAbandonedClosesOnlyActivationsWhoseOwnerIsGone) {
  const ActivationOwner me = ThisProcessOwner();
  ASSERT_GT(me.start_ticks, 0);
  // The recovering parent: another process on this host.
  const ActivationOwner self{me.host, DeadPid(), 1};
  const int64_t now = 10'000'000'000'000;

  auto begin = [&](const ActivationOwner& owner, int64_t lease_until) {
    ActivationStart s = Start("f.js", 1000, owner);
    s.lease_until_unix_us = lease_until;
    auto id = journal().BeginActivation(s);
    EXPECT_TRUE(id) << (id ? "" : id.error().message);
    return id ? *id : 0;
  };
  const int64_t dead = begin({me.host, DeadPid(), 5}, now + 1'000'000);  // no such process (lease ignored here)
  const int64_t reused = begin({me.host, me.pid, me.start_ticks + 7}, now + 1'000'000);  // pid reused
  const int64_t alive = begin(me, 0);                                    // alive (its lease is irrelevant)
  const int64_t mine = begin(self, 0);                                   // the recovering parent's own
  const int64_t far_expired = begin({"elsewhere", 12, 3}, now - 1);      // another host, lease ended
  const int64_t far_leased = begin({"elsewhere", 13, 3}, now + 1);       // another host, lease running
  const int64_t finished = begin({me.host, DeadPid(), 5}, 0);
  ASSERT_TRUE(journal().EndActivation(End(finished)));

  // Calls of the dead owner in each state.
  auto call = [&](int64_t activation, int64_t call_id, CallState state) {
    CallRecord c = Call(activation, call_id);
    c.state = state;
    c.effect = Effect::kExternal;
    if (state != CallState::kAnswered) {
      c.result_json.clear();
      c.end_unix_us = std::nullopt;
    }
    ASSERT_TRUE(journal().RecordCall(c));
  };
  call(dead, 1, CallState::kStarted);
  call(dead, 2, CallState::kDecided);
  call(dead, 3, CallState::kAnswered);
  call(reused, 1, CallState::kStarted);
  call(alive, 1, CallState::kStarted);
  // Left open on purpose: RecoverAbandoned commits it first.
  ASSERT_TRUE(store_->HasPendingBatch());

  auto report = journal().RecoverAbandoned(self, now);
  ASSERT_TRUE(report) << report.error().message;
  EXPECT_FALSE(store_->HasPendingBatch());
  std::vector<int64_t> closed = report->abandoned_activations;
  std::sort(closed.begin(), closed.end());
  EXPECT_EQ(closed, (std::vector<int64_t>{dead, reused, far_expired}));
  EXPECT_EQ(report->unknown_calls, 2u);
  EXPECT_EQ(report->abandoned_calls, 1u);

  auto other = MustRead();
  ASSERT_TRUE(other);
  for (const Recovered& r : {Recovered{dead, true}, Recovered{reused, true}, Recovered{alive, false},
                             Recovered{mine, false}, Recovered{far_expired, true}, Recovered{far_leased, false}}) {
    auto rows = other->Activations(r.id, 1);
    ASSERT_TRUE(rows);
    const ActivationRow& a = (*rows)[0];
    if (!r.closed) {
      EXPECT_EQ(a.outcome, "") << "activation " << r.id;
      continue;
    }
    EXPECT_EQ(a.outcome, "abandoned") << "activation " << r.id;
    EXPECT_EQ(a.end_unix_us, std::optional<int64_t>(now));
    auto error = nlohmann::json::parse(a.error_json);
    EXPECT_EQ(error["kind"], "abandoned");
    const std::string message = error["message"];
    EXPECT_NE(message.find("its parent (host " + a.owner.host + ", pid " + std::to_string(a.owner.pid) + ")"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("died while it ran; closed by pid " + std::to_string(self.pid) + " at "),
              std::string::npos)
        << message;
  }
  auto finished_row = other->Activations(finished, 1);
  ASSERT_TRUE(finished_row);
  EXPECT_EQ((*finished_row)[0].outcome, "ok");

  auto calls = other->Calls(dead);
  ASSERT_TRUE(calls);
  ASSERT_EQ(calls->size(), 3u);
  EXPECT_EQ((*calls)[0].state, CallState::kUnknown);
  EXPECT_NE((*calls)[0].error_json.find("may or may not have happened"), std::string::npos) << (*calls)[0].error_json;
  EXPECT_EQ((*calls)[0].end_unix_us, std::optional<int64_t>(now));
  EXPECT_EQ((*calls)[1].state, CallState::kAbandoned);
  EXPECT_EQ((*calls)[2].state, CallState::kAnswered);
  EXPECT_EQ((*calls)[2].result_json, "null");
  auto alive_calls = other->Calls(alive);
  ASSERT_TRUE(alive_calls);
  EXPECT_EQ((*alive_calls)[0].state, CallState::kStarted);

  auto again = journal().RecoverAbandoned(self, now);
  ASSERT_TRUE(again);
  EXPECT_TRUE(again->abandoned_activations.empty());
  EXPECT_EQ(again->unknown_calls, 0u);
}

TEST_P(StoreContract, RenewLeasesExtendsOnlyTheOwnersUnfinishedActivations) {
  const ActivationOwner a{"h", 10, 1}, b{"h", 11, 1};
  auto a1 = journal().BeginActivation(Start("a1.js", 1000, a));
  auto a2 = journal().BeginActivation(Start("a2.js", 1000, a));
  auto b1 = journal().BeginActivation(Start("b1.js", 1000, b));
  ASSERT_TRUE(a1 && a2 && b1);
  ASSERT_TRUE(journal().EndActivation(End(*a2)));
  ASSERT_TRUE(journal().RenewLeases(a, 99'000'000));
  ASSERT_TRUE(store_->Commit());
  auto rows = store_->reader().Activations(std::nullopt, 10);
  ASSERT_TRUE(rows);
  ASSERT_EQ(rows->size(), 3u);
  EXPECT_EQ((*rows)[0].lease_until_unix_us, 99'000'000);
  EXPECT_EQ((*rows)[1].lease_until_unix_us, 1000 + 60'000'000);
  EXPECT_EQ((*rows)[2].lease_until_unix_us, 1000 + 60'000'000);
  // A renewed lease keeps another host's parent from closing it; an expired one does not.
  auto kept = journal().RecoverAbandoned({"other-host", 1, 1}, 98'000'000);
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->abandoned_activations, (std::vector<int64_t>{*b1}));
}

TEST_P(StoreContract, JournalIdIsStableAndDistinct) {
  const std::string id = store_->journal_id();
  EXPECT_EQ(id.size(), 32u);
  EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos) << id;
  store_.reset();
  store_ = MustOpen();
  ASSERT_TRUE(store_);
  EXPECT_EQ(store_->journal_id(), id);
  auto elsewhere = GetParam().make();
  auto other = elsewhere->Open();
  ASSERT_TRUE(other);
  EXPECT_NE((*other)->journal_id(), id);
}

TEST_P(StoreContract, ForFlowHidesTheLocation) {
  auto error = journal().EndActivation(End(12345));
  ASSERT_FALSE(error);
  EXPECT_NE(error.error().message.find(instance_->location()), std::string::npos) << error.error().message;
  const std::string for_flow = store_->ForFlow(error.error());
  EXPECT_EQ(for_flow.find(instance_->location()), std::string::npos) << for_flow;
  EXPECT_NE(for_flow.find("12345"), std::string::npos) << for_flow;
}

TEST_P(StoreContract, KvGetPutDelete) {
  auto missing = kv().Get("orders", "o-1");
  ASSERT_TRUE(missing);
  EXPECT_FALSE(missing->has_value());
  EXPECT_FALSE(store_->HasPendingBatch());  // reads do not open a batch
  ASSERT_TRUE(kv().Put("orders", "o-1", R"({"qty":1})"));
  EXPECT_TRUE(store_->HasPendingBatch());
  auto got = kv().Get("orders", "o-1");  // the batch's own uncommitted write
  ASSERT_TRUE(got && got->has_value());
  EXPECT_EQ(**got, R"({"qty":1})");
  ASSERT_TRUE(kv().Put("orders", "o-1", "[1,2]"));  // overwrite
  got = kv().Get("orders", "o-1");
  ASSERT_TRUE(got && got->has_value());
  EXPECT_EQ(**got, "[1,2]");
  auto other_ns = kv().Get("users", "o-1");  // namespaces are separate
  ASSERT_TRUE(other_ns);
  EXPECT_FALSE(other_ns->has_value());
  ASSERT_TRUE(store_->Commit());

  auto deleted = kv().Delete("orders", "o-1");
  ASSERT_TRUE(deleted);
  EXPECT_TRUE(*deleted);
  auto again = kv().Delete("orders", "o-1");
  ASSERT_TRUE(again);
  EXPECT_FALSE(*again);
  got = kv().Get("orders", "o-1");
  ASSERT_TRUE(got);
  EXPECT_FALSE(got->has_value());
  ASSERT_TRUE(store_->Rollback());  // the delete was in the batch: undone
  got = kv().Get("orders", "o-1");
  ASSERT_TRUE(got && got->has_value());
  ASSERT_TRUE(kv().Delete("orders", "o-1"));
  ASSERT_TRUE(store_->Commit());
  store_.reset();
  store_ = MustOpen();
  ASSERT_TRUE(store_);
  got = kv().Get("orders", "o-1");
  ASSERT_TRUE(got);
  EXPECT_FALSE(got->has_value());
}

TEST_P(StoreContract, KvBinaryKeysRoundTrip) {
  const std::string key("a\0b\xff", 4);
  ASSERT_TRUE(kv().Put("ns", key, "\"v\""));
  auto got = kv().Get("ns", key);
  ASSERT_TRUE(got && got->has_value());
  EXPECT_EQ(**got, "\"v\"");
  auto shorter = kv().Get("ns", std::string("a", 1));
  ASSERT_TRUE(shorter);
  EXPECT_FALSE(shorter->has_value());
}

std::vector<std::string> Keys(const Result<KvList>& r) {
  std::vector<std::string> keys;
  if (!r) {
    ADD_FAILURE() << r.error().message;
    return keys;
  }
  EXPECT_FALSE(r->stopped_at_bytes);
  for (const KvEntry& e : r->entries) keys.push_back(e.key);
  return keys;
}

TEST_P(StoreContract, KvListPrefixIsExactBytes) {
  const std::string ff = "\xff";
  const std::vector<std::string> keys = {
      "a",  "a%", "a%b", "a_",      "a_b",     "ab",      "abc", "aXb", "b",
      ff,   ff + ff, ff + "a", "a" + ff, "a" + ff + "z", "a" + ff + ff, "",
  };
  for (const std::string& k : keys) ASSERT_TRUE(kv().Put("ns", k, "\"" + std::to_string(k.size()) + "\""));
  ASSERT_TRUE(kv().Put("other", "a%", "0"));  // another namespace never leaks in

  using V = std::vector<std::string>;
  EXPECT_EQ(Keys(kv().List("ns", "a%", 100, SIZE_MAX)), (V{"a%", "a%b"}));
  EXPECT_EQ(Keys(kv().List("ns", "a_", 100, SIZE_MAX)), (V{"a_", "a_b"}));
  EXPECT_EQ(Keys(kv().List("ns", "ab", 100, SIZE_MAX)), (V{"ab", "abc"}));
  EXPECT_EQ(Keys(kv().List("ns", ff, 100, SIZE_MAX)), (V{ff, ff + "a", ff + ff}));
  EXPECT_EQ(Keys(kv().List("ns", ff + ff, 100, SIZE_MAX)), (V{ff + ff}));
  EXPECT_EQ(Keys(kv().List("ns", "a" + ff, 100, SIZE_MAX)), (V{"a" + ff, "a" + ff + "z", "a" + ff + ff}));
  EXPECT_EQ(Keys(kv().List("ns", "zzz", 100, SIZE_MAX)), V{});
  EXPECT_EQ(Keys(kv().List("nobody", "", 100, SIZE_MAX)), V{});

  V all = Keys(kv().List("ns", "", 100, SIZE_MAX));  // everything, in byte order ("" first, 0xFF keys last)
  V sorted = keys;
  std::sort(sorted.begin(), sorted.end());  // std::string compares as unsigned bytes (char_traits)
  EXPECT_EQ(all, sorted);

  EXPECT_EQ(Keys(kv().List("ns", "a", 3, SIZE_MAX)), (V{"a", "a%", "a%b"}));
  EXPECT_EQ(Keys(kv().List("ns", "", 1, SIZE_MAX)), (V{""}));
  EXPECT_EQ(Keys(kv().List("ns", "", 0, SIZE_MAX)), V{});
  EXPECT_EQ(Keys(kv().List("ns", "", SIZE_MAX, SIZE_MAX)).size(), keys.size());

  auto with_values = kv().List("ns", "abc", 10, SIZE_MAX);
  ASSERT_TRUE(with_values);
  ASSERT_EQ(with_values->entries.size(), 1u);
  EXPECT_EQ(with_values->entries[0].value_json, "\"3\"");
}

// kv.list's byte bound: it stops before the entry that would pass max_bytes, and says so.
TEST_P(StoreContract, KvListStopsAtItsByteLimit) {
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(kv().Put("big", "k" + std::to_string(i), "\"" + std::string(1000, 'x') + "\""));
  // Each entry is 2 (key) + 1002 (value) bytes.
  auto two = kv().List("big", "", 100, 2 * 1004 + 1003);
  ASSERT_TRUE(two);
  EXPECT_TRUE(two->stopped_at_bytes);
  ASSERT_EQ(two->entries.size(), 2u);
  EXPECT_EQ(two->entries[1].key, "k1");
  auto all = kv().List("big", "", 100, 5 * 1004);
  ASSERT_TRUE(all);
  EXPECT_FALSE(all->stopped_at_bytes);
  EXPECT_EQ(all->entries.size(), 5u);
  auto by_count = kv().List("big", "", 3, 1);  // the first entry alone passes 1 byte
  ASSERT_TRUE(by_count);
  EXPECT_TRUE(by_count->stopped_at_bytes);
  EXPECT_TRUE(by_count->entries.empty());
}

// The usage a quota reads stays true through every write path, inside and across batches.
TEST_P(StoreContract, KvUsageFollowsPutsOverwritesAndDeletes) {
  auto usage = [&](const std::string& ns) {
    auto u = kv().Usage(ns);
    EXPECT_TRUE(u) << (u ? "" : u.error().message);
    return u ? *u : KvUsage{};
  };
  EXPECT_EQ(usage("u").bytes, 0u);
  EXPECT_EQ(usage("u").keys, 0u);
  ASSERT_TRUE(kv().Put("u", "ab", "\"xyz\""));  // 2 + 5
  ASSERT_TRUE(kv().Put("u", "c", "1"));          // 1 + 1
  EXPECT_EQ(usage("u").bytes, 9u);
  EXPECT_EQ(usage("u").keys, 2u);
  ASSERT_TRUE(kv().Put("u", "ab", "\"\""));  // overwritten: 2 + 2
  EXPECT_EQ(usage("u").bytes, 6u);
  EXPECT_EQ(usage("u").keys, 2u);
  ASSERT_TRUE(store_->Commit());
  ASSERT_TRUE(kv().Put("other", "k", "\"\xc3\xa9\""));  // bytes, not characters: 1 + 4
  EXPECT_EQ(usage("other").bytes, 5u);
  ASSERT_TRUE(kv().Delete("u", "c"));
  EXPECT_EQ(usage("u").bytes, 4u);
  EXPECT_EQ(usage("u").keys, 1u);
  auto size = kv().ValueBytes("u", "ab");
  ASSERT_TRUE(size);
  EXPECT_EQ(*size, std::optional<uint64_t>(2));
  auto none = kv().ValueBytes("u", "c");
  ASSERT_TRUE(none);
  EXPECT_FALSE(none->has_value());
  ASSERT_TRUE(store_->Rollback());  // the delete was in the open batch
  EXPECT_EQ(usage("u").keys, 2u);
  EXPECT_EQ(usage("other").keys, 0u);
}

// kv.cas and kv.incr's store operations (store.h: CompareAndSwap, Increment).

std::optional<std::string> Stored(KvStore& kv, const std::string& ns, const std::string& key) {
  auto got = kv.Get(ns, key);
  EXPECT_TRUE(got) << (got ? "" : got.error().message);
  return got ? *got : std::nullopt;
}

KvUpdate::Status StatusOf(const Result<KvUpdate>& r) {
  EXPECT_TRUE(r) << (r ? "" : r.error().message);
  return r ? r->status : KvUpdate::Status::kWritten;
}

using S = KvUpdate::Status;
using Text = std::optional<std::string>;

TEST_P(StoreContract, KvCompareAndSwapOnAbsentPresentAndMismatch) {
  auto first = kv().CompareAndSwap("c", "k", std::nullopt, "1", {});  // absent, as expected
  ASSERT_EQ(StatusOf(first), S::kWritten);
  EXPECT_EQ(first->current_json, Text("1"));
  EXPECT_TRUE(store_->HasPendingBatch());  // the write joined the batch like a Put
  auto again = kv().CompareAndSwap("c", "k", std::nullopt, "2", {});  // no longer absent
  ASSERT_EQ(StatusOf(again), S::kMismatch);
  EXPECT_EQ(again->current_json, Text("1")) << "a mismatch says what the key holds";
  auto swap = kv().CompareAndSwap("c", "k", "1", "2", {});
  ASSERT_EQ(StatusOf(swap), S::kWritten);
  EXPECT_EQ(swap->current_json, Text("2"));
  auto repeated = kv().CompareAndSwap("c", "k", "1", "2", {});  // the same call again changes nothing
  ASSERT_EQ(StatusOf(repeated), S::kMismatch);
  EXPECT_EQ(repeated->current_json, Text("2"));
  auto wrong = kv().CompareAndSwap("c", "k", "7", "3", {});
  ASSERT_EQ(StatusOf(wrong), S::kMismatch);
  EXPECT_EQ(Stored(kv(), "c", "k"), Text("2"));
  ASSERT_TRUE(store_->Commit());
  store_.reset();
  store_ = MustOpen();
  ASSERT_TRUE(store_);
  EXPECT_EQ(Stored(kv(), "c", "k"), Text("2"));

  // "null" is the same as nullopt, and a stored null the same as absent (kv.get sees both as null).
  EXPECT_EQ(StatusOf(kv().CompareAndSwap("c", "n", "null", "5", {})), S::kWritten);
  ASSERT_TRUE(kv().Put("c", "stored-null", "null"));
  auto over_null = kv().CompareAndSwap("c", "stored-null", std::nullopt, "6", {});
  ASSERT_EQ(StatusOf(over_null), S::kWritten);
  EXPECT_EQ(Stored(kv(), "c", "stored-null"), Text("6"));
  auto to_null = kv().CompareAndSwap("c", "stored-null", "6", "null", {});  // null may be stored
  ASSERT_EQ(StatusOf(to_null), S::kWritten);
  EXPECT_EQ(Stored(kv(), "c", "stored-null"), Text("null"));

  auto rolled = kv().CompareAndSwap("c", "gone", std::nullopt, "1", {});
  ASSERT_EQ(StatusOf(rolled), S::kWritten);
  ASSERT_TRUE(store_->Rollback());  // a swap is undone with its batch
  EXPECT_EQ(Stored(kv(), "c", "gone"), std::nullopt);
  EXPECT_EQ(Stored(kv(), "c", "n"), std::nullopt);

  auto bad_expected = kv().CompareAndSwap("c", "k", "{not json", "1", {});
  ASSERT_FALSE(bad_expected);
  EXPECT_EQ(bad_expected.error().code, ErrorCode::kInvalidArgument);
  auto bad_value = kv().CompareAndSwap("c", "k", "2", "[1,", {});
  ASSERT_FALSE(bad_value);
  EXPECT_EQ(bad_value.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(Stored(kv(), "c", "k"), Text("2"));
}

// Values, not text: what KvValuesEqual promises, through the store.
TEST_P(StoreContract, KvCompareAndSwapComparesJsonValuesNotText) {
  struct Case {
    const char* stored;
    const char* expected;
    bool equal;
  };
  const Case cases[] = {
      {"1", "1.0", true},
      {"1", "1e0", true},
      {"-0", "0", true},
      {"100", "1e2", true},
      {R"({"a":1,"b":[1,2]})", R"({ "b" : [1.0, 2], "a" : 1 })", true},  // key order, spacing
      {R"({"a":1,"a":2})", R"({"a":2})", true},                          // the last duplicate counts
      {R"("\u00e9")", "\"\xc3\xa9\"", true},                             // escapes are unescaped
      {R"("a\/b")", R"("a/b")", true},
      {"[1,2]", "[2,1]", false},  // arrays keep their order
      {"1", "\"1\"", false},
      {"0", "false", false},
      {"1", "true", false},
      {"\"\"", "null", false},
      {"[]", "{}", false},
      {"1.5", "1", false},
      {R"({"a":1})", R"({"a":1,"b":null})", false},     // a null member is still a member
      {"9007199254740993", "9007199254740992", false},  // integers compare exactly
      {R"("e\u0301")", "\"\xc3\xa9\"", false},           // no Unicode normalization: bytes
  };
  int i = 0;
  for (const Case& c : cases) {
    const std::string key = "k" + std::to_string(i++);
    ASSERT_TRUE(kv().Put("eq", key, c.stored));
    auto r = kv().CompareAndSwap("eq", key, std::string(c.expected), "\"swapped\"", {});
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->status, c.equal ? S::kWritten : S::kMismatch) << c.stored << " against " << c.expected;
    EXPECT_EQ(Stored(kv(), "eq", key), Text(c.equal ? "\"swapped\"" : c.stored)) << c.stored;
    EXPECT_EQ(KvValuesEqual(Json::parse(c.stored), Json::parse(c.expected)), c.equal) << c.stored;
  }
}

TEST_P(StoreContract, KvCompareAndSwapChecksValueSizeAndQuota) {
  KvLimits small;
  small.max_value_bytes = 3;
  auto too_large = kv().CompareAndSwap("q", "k", std::nullopt, "\"abcd\"", small);  // 6 bytes
  ASSERT_EQ(StatusOf(too_large), S::kValueTooLarge);
  EXPECT_EQ(too_large->value_bytes, 6u);
  EXPECT_EQ(Stored(kv(), "q", "k"), std::nullopt);
  ASSERT_TRUE(kv().Put("q", "k", "1"));  // 1 + 1 bytes, 1 key
  // Refused for its size whatever is stored: a mismatch does not hide it.
  EXPECT_EQ(StatusOf(kv().CompareAndSwap("q", "k", "99", "\"abcd\"", small)), S::kValueTooLarge);
  EXPECT_EQ(StatusOf(kv().CompareAndSwap("q", "k", "1", "\"a\"", small)), S::kWritten);  // 3 bytes: at the limit

  KvLimits quota;
  quota.quota_keys = 2;
  quota.quota_bytes = 100;
  ASSERT_EQ(StatusOf(kv().CompareAndSwap("q", "a", std::nullopt, "10", quota)), S::kWritten);  // 4 + 3 bytes, 2 keys
  auto third_key = kv().CompareAndSwap("q", "b", std::nullopt, "1", quota);
  ASSERT_EQ(StatusOf(third_key), S::kOverQuota);
  EXPECT_EQ(third_key->usage_after.keys, 3u);
  EXPECT_EQ(third_key->usage_after.bytes, 9u);
  EXPECT_EQ(third_key->current_json, std::nullopt);
  EXPECT_EQ(Stored(kv(), "q", "b"), std::nullopt);
  // A mismatch writes nothing, so it passes no quota: it is a mismatch.
  EXPECT_EQ(StatusOf(kv().CompareAndSwap("q", "b", "5", "1", quota)), S::kMismatch);
  // An overwrite counts the new size in place of the old.
  const std::string v90 = "\"" + std::string(90, 'x') + "\"";  // 92 bytes: 7 - (1 + 3) + 1 + 92 = 96
  ASSERT_EQ(StatusOf(kv().CompareAndSwap("q", "k", "\"a\"", v90, quota)), S::kWritten);
  const std::string v95 = "\"" + std::string(95, 'y') + "\"";  // 97 bytes: 96 - 93 + 1 + 97 = 101
  auto too_many_bytes = kv().CompareAndSwap("q", "k", v90, v95, quota);
  ASSERT_EQ(StatusOf(too_many_bytes), S::kOverQuota);
  EXPECT_EQ(too_many_bytes->usage_after.bytes, 101u);
  EXPECT_EQ(too_many_bytes->current_json, Text(v90));
  EXPECT_EQ(Stored(kv(), "q", "k"), Text(v90));
  auto usage = kv().Usage("q");
  ASSERT_TRUE(usage);
  EXPECT_EQ(usage->bytes, 96u);
  EXPECT_EQ(usage->keys, 2u);
}

TEST_P(StoreContract, KvIncrementCountsInIntegers) {
  auto first = kv().Increment("i", "n", 5, {});  // absent counts as 0
  ASSERT_EQ(StatusOf(first), S::kWritten);
  EXPECT_EQ(first->current_json, Text("5"));
  EXPECT_TRUE(store_->HasPendingBatch());
  auto down = kv().Increment("i", "n", -7, {});
  ASSERT_EQ(StatusOf(down), S::kWritten);
  EXPECT_EQ(down->current_json, Text("-2"));
  EXPECT_EQ(StatusOf(kv().Increment("i", "n", 0, {})), S::kWritten);
  EXPECT_EQ(Stored(kv(), "i", "n"), Text("-2"));
  ASSERT_TRUE(store_->Commit());

  struct Case {
    const char* stored;
    int64_t by;
    const char* after;  // nullptr: refused
    S status;
  };
  const std::string max = std::to_string(kKvMaxSafeInteger);
  const std::string max_minus_1 = std::to_string(kKvMaxSafeInteger - 1);
  const std::string min = std::to_string(-kKvMaxSafeInteger);
  const Case cases[] = {
      {"3.0", 1, "4", S::kWritten},  // a number with no fractional part is an integer
      {"1e2", 1, "101", S::kWritten},
      {"null", 2, "2", S::kWritten},  // a stored null counts as 0, as an absent key does
      {max_minus_1.c_str(), 1, max.c_str(), S::kWritten},
      {max.c_str(), -1, max_minus_1.c_str(), S::kWritten},
      {max.c_str(), 1, nullptr, S::kOutOfRange},
      {min.c_str(), -1, nullptr, S::kOutOfRange},
      {min.c_str(), kKvMaxSafeInteger, "0", S::kWritten},
      {"9007199254740993", -10, nullptr, S::kOutOfRange},  // stored past the safe integers
      {"18446744073709551615", -1, nullptr, S::kOutOfRange},
      {"1e300", 1, nullptr, S::kOutOfRange},
      {"-1e300", 1, nullptr, S::kOutOfRange},
      {"1.5", 1, nullptr, S::kNotAnInteger},
      {"\"3\"", 1, nullptr, S::kNotAnInteger},
      {"true", 1, nullptr, S::kNotAnInteger},
      {"[1]", 1, nullptr, S::kNotAnInteger},
      {R"({"n":1})", 1, nullptr, S::kNotAnInteger},
  };
  int i = 0;
  for (const Case& c : cases) {
    const std::string key = "k" + std::to_string(i++);
    ASSERT_TRUE(kv().Put("i", key, c.stored));
    auto r = kv().Increment("i", key, c.by, {});
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->status, c.status) << c.stored << " + " << c.by;
    const std::string expect_stored = c.after ? c.after : c.stored;
    EXPECT_EQ(Stored(kv(), "i", key), Text(expect_stored)) << c.stored << " + " << c.by;
    EXPECT_EQ(r->current_json, Text(expect_stored)) << "what the key holds now";
  }

  auto bad_by = kv().Increment("i", "n", kKvMaxSafeInteger + 1, {});
  ASSERT_FALSE(bad_by);
  EXPECT_EQ(bad_by.error().code, ErrorCode::kInvalidArgument);
  ASSERT_TRUE(store_->Rollback());  // every increment since the commit is undone
  EXPECT_EQ(Stored(kv(), "i", "n"), Text("-2"));
  EXPECT_EQ(Stored(kv(), "i", "k0"), std::nullopt);
}

TEST_P(StoreContract, KvIncrementChecksValueSizeAndQuota) {
  ASSERT_TRUE(kv().Put("iq", "n", "9"));  // 1 + 1 bytes
  KvLimits small;
  small.max_value_bytes = 1;
  auto ten = kv().Increment("iq", "n", 1, small);  // "10" is 2 bytes
  ASSERT_EQ(StatusOf(ten), S::kValueTooLarge);
  EXPECT_EQ(ten->value_bytes, 2u);
  EXPECT_EQ(ten->current_json, Text("9"));
  EXPECT_EQ(Stored(kv(), "iq", "n"), Text("9"));
  EXPECT_EQ(StatusOf(kv().Increment("iq", "n", -1, small)), S::kWritten);

  KvLimits one_key;
  one_key.quota_keys = 1;
  auto second = kv().Increment("iq", "m", 1, one_key);
  ASSERT_EQ(StatusOf(second), S::kOverQuota);
  EXPECT_EQ(second->usage_after.keys, 2u);
  EXPECT_EQ(second->current_json, std::nullopt);
  EXPECT_EQ(Stored(kv(), "iq", "m"), std::nullopt);
  EXPECT_EQ(StatusOf(kv().Increment("iq", "n", 1, one_key)), S::kWritten);  // no new key
  KvLimits two_bytes;
  two_bytes.quota_bytes = 2;  // key "n" and one digit
  auto grows = kv().Increment("iq", "n", 1, two_bytes);  // 9 -> 10: 3 bytes
  ASSERT_EQ(StatusOf(grows), S::kOverQuota);
  EXPECT_EQ(grows->usage_after.bytes, 3u);
  EXPECT_EQ(Stored(kv(), "iq", "n"), Text("9"));
}

// One process's additions, each committed on its own (as a parent's loop commits once per turn).
// A failed attempt (e.g. the write lock stayed busy past the store's timeout) rolls back and is
// tried again, so what the child reports is that each of its `n` additions committed once.
enum class Way { kIncrement, kCompareAndSwap };

int AddInChild(BackendInstance& instance, Way way, int n) {
  auto opened = instance.Open();
  if (!opened) return 10;
  Store& store = **opened;
  std::optional<std::string> expected;  // a cas loop starts from "absent"
  for (int done = 0, attempts = 0; done < n;) {
    if (++attempts > 100 * n) return 11;
    bool written = false;
    if (way == Way::kIncrement) {
      auto r = store.kv().Increment("race", "count", 1, {});
      if (!r || r->status != KvUpdate::Status::kWritten) {
        (void)store.Rollback();
        continue;
      }
      written = true;
    } else {
      const int64_t now = expected ? std::stoll(*expected) : 0;
      auto r = store.kv().CompareAndSwap("race", "count", expected, std::to_string(now + 1), {});
      if (!r) {
        (void)store.Rollback();
        continue;
      }
      written = r->status == KvUpdate::Status::kWritten;
      expected = r->current_json;  // what the key holds: the retry's expectation, or our own value
    }
    if (!store.Commit()) {
      (void)store.Rollback();
      expected.reset();  // unknown again: the next swap tells
      continue;
    }
    if (written) ++done;
  }
  return 0;
}

// The read-compare-write is atomic against other processes writing the same database: four
// processes, each adding 1 300 times, lose nothing, by Increment and by a CompareAndSwap loop.
TEST_P(StoreContract, KvIncrementAndCompareAndSwapAreAtomicAcrossProcesses) {
  constexpr int kProcesses = 4, kEach = 300;
  store_.reset();  // no connection (nor its thread) crosses the fork
  for (Way way : {Way::kIncrement, Way::kCompareAndSwap}) {
    const std::string name = way == Way::kIncrement ? "Increment" : "CompareAndSwap";
    std::vector<pid_t> children;
    for (int i = 0; i < kProcesses; ++i) {
      const pid_t child = fork();
      ASSERT_GE(child, 0);
      if (child == 0) _exit(AddInChild(*instance_, way, kEach));
      children.push_back(child);
    }
    for (pid_t child : children) {
      int status = 0;
      ASSERT_EQ(waitpid(child, &status, 0), child);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << name << ": child status " << status;
    }
    store_ = MustOpen();
    ASSERT_TRUE(store_);
    EXPECT_EQ(Stored(kv(), "race", "count"), Text(std::to_string(kProcesses * kEach))) << name;
    ASSERT_TRUE(kv().Delete("race", "count"));
    ASSERT_TRUE(store_->Commit());
    store_.reset();
  }
  store_ = MustOpen();
}

TEST_P(StoreContract, KvPutWithinChecksItsLimits) {
  auto too_large = kv().PutWithin("q", "k", "\"12345\"", {.max_value_bytes = 3});
  ASSERT_TRUE(too_large) << too_large.error().message;
  EXPECT_EQ(too_large->status, KvUpdate::Status::kValueTooLarge);
  EXPECT_EQ(too_large->value_bytes, 7u);
  auto first = kv().PutWithin("q", "a", "1", {.quota_keys = 2});
  ASSERT_TRUE(first);
  EXPECT_EQ(first->status, KvUpdate::Status::kWritten);
  EXPECT_EQ(first->usage_after.keys, 1u);
  EXPECT_EQ(first->usage_after.bytes, 2u);
  ASSERT_TRUE(kv().PutWithin("q", "b", "2", {.quota_keys = 2}));
  auto over = kv().PutWithin("q", "c", "3", {.quota_keys = 2});
  ASSERT_TRUE(over);
  EXPECT_EQ(over->status, KvUpdate::Status::kOverQuota);
  EXPECT_EQ(over->usage_after.keys, 3u);
  auto replace = kv().PutWithin("q", "b", "22", {.quota_bytes = 5, .quota_keys = 2});
  ASSERT_TRUE(replace);
  EXPECT_EQ(replace->status, KvUpdate::Status::kWritten) << "overwriting frees the old value's bytes";
  EXPECT_EQ(replace->usage_after.bytes, 5u);
  EXPECT_EQ(Stored(kv(), "q", "c"), std::nullopt) << "a refusal writes nothing";
  EXPECT_EQ(Stored(kv(), "q", "b"), Text("22"));
}

// An operator's kv write (`basal kv put|rm`) is journaled in the batch that holds the write: both
// commit, or (rolled back) neither; another connection reads them back, the namespace's own or
// every namespace's, the newest `limit` oldest first, with binary keys intact.
TEST_P(StoreContract, OperatorKvWritesAreJournaledWithTheirWrite) {
  const std::string value = "{\"qty\":2}";
  KvAuditEntry put{.at_unix_us = 1000, .actor = {.uid = 1000, .name = "ops"}, .reason = "fix order 1",
                   .ns = "orders", .key = std::string("o-\0\xff", 4), .op = KvAuditOp::kPut,
                   .value_sha256 = Sha256Hex(value), .value_bytes = value.size(), .existed = false};
  auto written = kv().PutWithin(put.ns, put.key, value, {});
  ASSERT_TRUE(written && written->status == KvUpdate::Status::kWritten);
  auto seq = kv().RecordOperatorWrite(put);
  ASSERT_TRUE(seq) << seq.error().message;
  EXPECT_GT(*seq, 0);
  ASSERT_TRUE(store_->Rollback());
  EXPECT_EQ(Stored(kv(), put.ns, put.key), std::nullopt);
  {
    auto none = store_->reader().KvAudit(std::string("orders"), 10);
    ASSERT_TRUE(none) << none.error().message;
    EXPECT_TRUE(none->empty()) << "a rolled-back write leaves no audit record";
  }
  ASSERT_TRUE(kv().PutWithin(put.ns, put.key, value, {}));
  ASSERT_TRUE(kv().RecordOperatorWrite(put));
  KvAuditEntry rm{.at_unix_us = 2000, .actor = {.uid = 0, .name = "root"}, .ns = "orders", .key = put.key,
                  .op = KvAuditOp::kDelete, .existed = true};
  ASSERT_TRUE(kv().Delete(rm.ns, rm.key));
  ASSERT_TRUE(kv().RecordOperatorWrite(rm));
  KvAuditEntry other_ns{.at_unix_us = 3000, .actor = {.uid = 7, .name = "x"}, .ns = "carts", .key = "c",
                        .op = KvAuditOp::kPut, .value_sha256 = Sha256Hex("1"), .value_bytes = 1};
  ASSERT_TRUE(kv().PutWithin("carts", "c", "1", {}));
  ASSERT_TRUE(kv().RecordOperatorWrite(other_ns));
  ASSERT_TRUE(store_->Commit());

  auto reader = MustRead();
  ASSERT_TRUE(reader);
  auto orders = reader->KvAudit(std::string("orders"), 10);
  ASSERT_TRUE(orders) << orders.error().message;
  ASSERT_EQ(orders->size(), 2u);
  const KvAuditEntry& a = (*orders)[0];
  EXPECT_EQ(a.at_unix_us, 1000);
  EXPECT_EQ(a.actor.uid, 1000);
  EXPECT_EQ(a.actor.name, "ops");
  EXPECT_EQ(a.reason, "fix order 1");
  EXPECT_EQ(a.ns, "orders");
  EXPECT_EQ(a.key, put.key) << "a binary key reads back byte for byte";
  EXPECT_EQ(a.op, KvAuditOp::kPut);
  EXPECT_EQ(a.value_sha256, Sha256Hex(value));
  EXPECT_EQ(a.value_bytes, value.size());
  EXPECT_FALSE(a.existed);
  const KvAuditEntry& b = (*orders)[1];
  EXPECT_GT(b.seq, a.seq);
  EXPECT_EQ(b.op, KvAuditOp::kDelete);
  EXPECT_EQ(b.actor.name, "root");
  EXPECT_EQ(b.value_sha256, "");
  EXPECT_EQ(b.value_bytes, 0u);
  EXPECT_TRUE(b.existed);
  auto all = reader->KvAudit(std::nullopt, 10);
  ASSERT_TRUE(all);
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[2].ns, "carts");
  auto newest = reader->KvAudit(std::nullopt, 2);
  ASSERT_TRUE(newest);
  ASSERT_EQ(newest->size(), 2u);
  EXPECT_EQ((*newest)[0].op, KvAuditOp::kDelete) << "the newest 2, oldest first";
  EXPECT_EQ((*newest)[1].ns, "carts");
  auto refused = kv().RecordOperatorWrite({.ns = "orders", .key = "k", .op = KvAuditOp::kPut});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kInvalidArgument) << "a put is journaled with its value's digest";
}

// Four processes filling one namespace at once never pass its key quota together: the usage is
// read under the write lock that the write then uses.
TEST_P(StoreContract, KvPutWithinHoldsAQuotaAcrossProcesses) {
  constexpr int kProcesses = 4, kQuota = 40;
  store_.reset();  // no connection (nor its thread) crosses the fork
  std::vector<pid_t> children;
  for (int i = 0; i < kProcesses; ++i) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      auto opened = instance_->Open();
      if (!opened) _exit(10);
      Store& store = **opened;
      for (int k = 0; k < kQuota; ++k) {  // each tries to fill the whole quota alone
        auto r = store.kv().PutWithin("quota", "p" + std::to_string(i) + "-" + std::to_string(k), "true",
                                      {.quota_keys = kQuota});
        if (!r || !store.Commit()) {
          (void)store.Rollback();
          continue;
        }
      }
      _exit(0);
    }
    children.push_back(child);
  }
  for (pid_t child : children) {
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  }
  store_ = MustOpen();
  ASSERT_TRUE(store_);
  auto usage = kv().Usage("quota");
  ASSERT_TRUE(usage);
  EXPECT_EQ(usage->keys, static_cast<uint64_t>(kQuota)) << "exactly full, never past";
}

// ---- Approvals (Catalog, and JournalReader's reads of it) ----------------------------------

using testing_support::FlowApproval;

TEST_P(StoreContract, ApprovedVersionsAreNumberedBoundToTheirTextsAndJournaled) {
  auto v1 = store_->catalog().Approve(FlowApproval("orders", "export default () => 1;\n", 0));
  ASSERT_TRUE(v1) << v1.error().message;
  EXPECT_EQ(v1->version, 1);
  EXPECT_EQ(v1->kind, ApprovalKind::kFlow);
  EXPECT_EQ(v1->source_hash, Sha256Hex("export default () => 1;\n"));
  EXPECT_EQ(v1->manifest_text_hash, Sha256Hex(R"({"grants": {}})"));
  EXPECT_EQ(v1->approver.name, "alice");
  EXPECT_EQ(v1->approver.uid, 1000);
  EXPECT_EQ(v1->note, "first review");
  EXPECT_FALSE(v1->revoked_unix_us);
  EXPECT_FALSE(store_->HasPendingBatch()) << "an approval commits on its own";

  auto v2 = store_->catalog().Approve(FlowApproval("orders", "export default () => 2;\n", 1, 6000));
  ASSERT_TRUE(v2) << v2.error().message;
  EXPECT_EQ(v2->version, 2);
  EXPECT_NE(v2->id, v1->id);
  // The same manifest text is kept once (content-addressed); both sources are kept.
  auto manifest = store_->reader().Text(v1->manifest_text_hash);
  ASSERT_TRUE(manifest);
  EXPECT_EQ(*manifest, std::optional<std::string>(R"({"grants": {}})"));
  auto source = store_->reader().Text(v1->source_hash);
  ASSERT_TRUE(source);
  EXPECT_EQ(*source, std::optional<std::string>("export default () => 1;\n"));
  auto missing = store_->reader().Text("sha256:none");
  ASSERT_TRUE(missing);
  EXPECT_FALSE(*missing);

  // Another connection (read only) sees the versions, the list and the events.
  std::unique_ptr<JournalReader> other = MustRead();
  ASSERT_TRUE(other);
  auto versions = other->Versions(ApprovalKind::kFlow, "orders");
  ASSERT_TRUE(versions) << versions.error().message;
  ASSERT_EQ(versions->size(), 2u);
  EXPECT_EQ((*versions)[0].version, 1);
  EXPECT_EQ((*versions)[1].version, 2);
  auto names = other->Names(ApprovalKind::kFlow);
  ASSERT_TRUE(names);
  ASSERT_EQ(names->size(), 1u);
  EXPECT_EQ((*names)[0].version, 2);
  auto policies = other->Names(ApprovalKind::kPolicy);
  ASSERT_TRUE(policies);
  EXPECT_TRUE(policies->empty());
  auto events = other->Events(ApprovalKind::kFlow, "orders");
  ASSERT_TRUE(events);
  ASSERT_EQ(events->size(), 2u);
  EXPECT_EQ((*events)[0].kind, "approved");
  EXPECT_EQ((*events)[0].actor.name, "alice");
  EXPECT_EQ((*events)[0].version, 1);
  EXPECT_EQ((*events)[0].at_unix_us, 5000);
  auto detail = nlohmann::json::parse((*events)[0].detail_json);
  EXPECT_EQ(detail["note"], "first review");
  EXPECT_EQ(detail["source_hash"], v1->source_hash);
  EXPECT_EQ(detail["review"], nlohmann::json({{"first", true}}));
}

// What a run's admission reads (module_runs.cpp, NewestFlow): the newest version of the name, as
// the last of Versions, revoked or not, and nothing for a name never approved or of another kind.
TEST_P(StoreContract, TheNewestVersionIsTheLastOfTheVersions) {
  auto none = store_->reader().NewestVersion(ApprovalKind::kFlow, "orders");
  ASSERT_TRUE(none) << none.error().message;
  EXPECT_FALSE(*none);
  for (int v = 1; v <= 3; ++v) {
    auto approved = store_->catalog().Approve(
        FlowApproval("orders", "export default () => " + std::to_string(v) + ";\n", v - 1, 5000 + v));
    ASSERT_TRUE(approved) << approved.error().message;
    ASSERT_TRUE(store_->catalog().Approve(
        FlowApproval("other" + std::to_string(v), "export default () => 0;\n", 0, 5000 + v)));
    auto newest = store_->reader().NewestVersion(ApprovalKind::kFlow, "orders");
    ASSERT_TRUE(newest && *newest);
    auto versions = store_->reader().Versions(ApprovalKind::kFlow, "orders");
    ASSERT_TRUE(versions);
    ASSERT_EQ(versions->size(), static_cast<size_t>(v));
    EXPECT_EQ((*newest)->id, versions->back().id);
    EXPECT_EQ((*newest)->version, v);
    EXPECT_EQ((*newest)->source_hash, versions->back().source_hash);
    EXPECT_FALSE((*newest)->revoked_unix_us);
  }
  ASSERT_TRUE(store_->catalog().Revoke(ApprovalKind::kFlow, "orders", 3, {0, "root"}, 9000, "bad"));
  auto revoked = store_->reader().NewestVersion(ApprovalKind::kFlow, "orders");
  ASSERT_TRUE(revoked && *revoked);
  EXPECT_EQ((*revoked)->version, 3) << "a revoked newest version is still the newest: the run is refused";
  EXPECT_EQ((*revoked)->revoked_unix_us, std::optional<int64_t>(9000));
  auto policy = store_->reader().NewestVersion(ApprovalKind::kPolicy, "orders");
  ASSERT_TRUE(policy);
  EXPECT_FALSE(*policy);
}

TEST_P(StoreContract, AStaleReviewStoresNothing) {
  ASSERT_TRUE(store_->catalog().Approve(FlowApproval("orders", "a", 0)));
  // Reviewed against "no version" but version 1 exists now.
  auto stale = store_->catalog().Approve(FlowApproval("orders", "b", 0));
  ASSERT_FALSE(stale);
  EXPECT_EQ(stale.error().code, ErrorCode::kConflict);
  EXPECT_NE(stale.error().message.find("changed while it was reviewed"), std::string::npos) << stale.error().message;
  auto versions = store_->reader().Versions(ApprovalKind::kFlow, "orders");
  ASSERT_TRUE(versions);
  EXPECT_EQ(versions->size(), 1u);
  auto text = store_->reader().Text(Sha256Hex("b"));
  ASSERT_TRUE(text);
  EXPECT_FALSE(*text) << "a refused approval keeps no text either";
}

TEST_P(StoreContract, RevokedVersionsAreMarkedOnceAndJournaled) {
  auto v1 = store_->catalog().Approve(FlowApproval("orders", "a", 0));
  ASSERT_TRUE(v1);
  auto revoked = store_->catalog().IsRevoked(v1->id);
  ASSERT_TRUE(revoked);
  EXPECT_FALSE(*revoked);
  auto r = store_->catalog().Revoke(ApprovalKind::kFlow, "orders", 1, {0, "root"}, 7000, "leaked token");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->revoked_unix_us, std::optional<int64_t>(7000));
  EXPECT_EQ(r->revoker.name, "root");
  EXPECT_EQ(r->revoke_note, "leaked token");
  revoked = store_->catalog().IsRevoked(v1->id);
  ASSERT_TRUE(revoked);
  EXPECT_TRUE(*revoked);
  auto again = store_->catalog().Revoke(ApprovalKind::kFlow, "orders", 1, {0, "root"}, 8000, "");
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, ErrorCode::kConflict);
  auto none = store_->catalog().Revoke(ApprovalKind::kFlow, "orders", 5, {0, "root"}, 8000, "");
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code, ErrorCode::kNotFound);
  EXPECT_NE(none.error().message.find("versions 1 to 1"), std::string::npos) << none.error().message;
  auto unknown = store_->catalog().Revoke(ApprovalKind::kPolicy, "orders", 1, {0, "root"}, 8000, "");
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, ErrorCode::kNotFound);
  auto events = store_->reader().Events(ApprovalKind::kFlow, "");
  ASSERT_TRUE(events);
  ASSERT_EQ(events->size(), 2u);
  EXPECT_EQ((*events)[1].kind, "revoked");
  EXPECT_EQ((*events)[1].actor.name, "root");
  // A review of the revoked newest version must say so, or it is stale.
  NewApproval next = FlowApproval("orders", "b", 1);
  auto stale = store_->catalog().Approve(next);
  ASSERT_FALSE(stale);
  EXPECT_EQ(stale.error().code, ErrorCode::kConflict);
  next.reviewed_revoked = true;
  auto v2 = store_->catalog().Approve(next);
  ASSERT_TRUE(v2) << v2.error().message;
  EXPECT_EQ(v2->version, 2);
}

TEST_P(StoreContract, PoliciesHaveNoSourceAndTheirOwnVersions) {
  NewApproval p;
  p.kind = ApprovalKind::kPolicy;
  p.name = "orders";  // the same name as a flow: a separate line of versions
  p.manifest_text = "{}";
  p.manifest_hash = "sha256:c";
  p.approver = {0, "root"};
  auto v1 = store_->catalog().Approve(p);
  ASSERT_TRUE(v1) << v1.error().message;
  EXPECT_EQ(v1->version, 1);
  EXPECT_EQ(v1->source_hash, "");
  p.source = "x";
  auto bad = store_->catalog().Approve(p);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  ASSERT_TRUE(store_->catalog().Approve(FlowApproval("orders", "a", 0)));
  auto flows = store_->reader().Versions(ApprovalKind::kFlow, "orders");
  ASSERT_TRUE(flows);
  EXPECT_EQ(flows->size(), 1u);
}

TEST_P(StoreContract, ActivationsRecordTheirOriginAndApprovedVersion) {
  auto v1 = store_->catalog().Approve(FlowApproval("orders", "a", 0));
  ASSERT_TRUE(v1);
  ActivationStart start = Start("orders");
  start.origin = Origin::kApproved;
  start.approval_id = v1->id;
  start.manifest_text_hash = v1->manifest_text_hash;
  auto id = journal().BeginActivation(start);
  ASSERT_TRUE(id);
  ActivationStart adhoc = Start("dev.js");
  adhoc.origin = Origin::kAdhoc;
  ASSERT_TRUE(store_->catalog().KeepText(Sha256Hex("dev source"), "dev source"));
  ASSERT_TRUE(store_->catalog().KeepText(Sha256Hex("dev source"), "dev source")) << "keeping a text twice is a no-op";
  auto id2 = journal().BeginActivation(adhoc);
  ASSERT_TRUE(id2);
  ASSERT_TRUE(store_->Commit());
  auto bad = store_->catalog().KeepText("md5:x", "x");
  ASSERT_FALSE(bad);
  std::unique_ptr<JournalReader> other = MustRead();
  ASSERT_TRUE(other);
  auto rows = other->Activations(std::nullopt, 10);
  ASSERT_TRUE(rows);
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].origin, Origin::kApproved);
  EXPECT_EQ((*rows)[0].approval_id, v1->id);
  EXPECT_EQ((*rows)[0].manifest_text_hash, v1->manifest_text_hash);
  EXPECT_EQ((*rows)[1].origin, Origin::kAdhoc);
  EXPECT_EQ((*rows)[1].approval_id, 0);
  auto text = other->Text(Sha256Hex("dev source"));
  ASSERT_TRUE(text);
  EXPECT_EQ(*text, std::optional<std::string>("dev source"));
}

// ---- runs (RunStore), basal serve's API tokens and schedule marks (ServeTables), and JournalReader's reads ----

// The run as every reader of it must see it.
void ExpectRun(const RunRow& row, const RunRow& want) {
  EXPECT_EQ(row.id, want.id);
  EXPECT_EQ(row.flow, want.flow);
  EXPECT_EQ(row.input_json, want.input_json);
  EXPECT_EQ(row.trigger, want.trigger);
  EXPECT_EQ(row.idempotency_key, want.idempotency_key);
  EXPECT_EQ(row.state, want.state);
  EXPECT_EQ(row.activation_id, want.activation_id);
  EXPECT_EQ(row.created_unix_us, want.created_unix_us);
  EXPECT_EQ(row.started_unix_us, want.started_unix_us);
  EXPECT_EQ(row.ended_unix_us, want.ended_unix_us);
  EXPECT_EQ(row.outcome, want.outcome);
  EXPECT_EQ(row.error_json, want.error_json);
  EXPECT_EQ(row.state_detail, want.state_detail);
}

std::vector<int64_t> Ids(const std::vector<RunRow>& rows) {
  std::vector<int64_t> ids;
  for (const RunRow& r : rows) ids.push_back(r.id);
  return ids;
}

TEST_P(StoreContract, EnqueuedRunRoundTripsThroughEveryReader) {
  NewRun scheduled = testing_support::Run("nightly", R"({"day":"mon"})", "", 2000);
  scheduled.trigger = "schedule:nightly";
  scheduled.state_detail = R"({"scheduled_for_us":1999})";
  auto e = store_->runs().EnqueueRun(scheduled);
  ASSERT_TRUE(e) << e.error().message;
  EXPECT_FALSE(e->existing);
  EXPECT_GT(e->run.id, 0);
  EXPECT_TRUE(store_->HasPendingBatch()) << "the run joins the open batch";
  RunRow want;
  want.id = e->run.id;
  want.flow = "nightly";
  want.input_json = R"({"day":"mon"})";
  want.trigger = "schedule:nightly";
  want.created_unix_us = 2000;
  want.state_detail = R"({"scheduled_for_us":1999})";
  ExpectRun(e->run, want);
  ASSERT_TRUE(store_->Commit());
  store_.reset();  // and across a reopen

  store_ = MustOpen();
  ASSERT_TRUE(store_);
  std::unique_ptr<JournalReader> other = MustRead();
  ASSERT_TRUE(other);
  auto from_runs = store_->runs().GetRun(want.id);
  ASSERT_TRUE(from_runs) << from_runs.error().message;
  ASSERT_TRUE(from_runs->has_value());
  ExpectRun(**from_runs, want);
  for (JournalReader* reader : {&store_->reader(), other.get()}) {
    auto got = reader->GetRun(want.id);
    ASSERT_TRUE(got) << got.error().message;
    ASSERT_TRUE(got->has_value());
    ExpectRun(**got, want);
    auto listed = reader->ListRuns({});
    ASSERT_TRUE(listed) << listed.error().message;
    ASSERT_EQ(listed->size(), 1u);
    ExpectRun((*listed)[0], want);
    auto none = reader->GetRun(want.id + 1);
    ASSERT_TRUE(none);
    EXPECT_FALSE(none->has_value());
  }
  auto queued = store_->runs().RunsInState(RunState::kQueued, 10);
  ASSERT_TRUE(queued);
  EXPECT_EQ(Ids(*queued), (std::vector<int64_t>{want.id}));
  auto count = store_->runs().CountRuns(RunState::kQueued);
  ASSERT_TRUE(count);
  EXPECT_EQ(*count, 1u);
  count = store_->runs().CountRuns(RunState::kRunning);
  ASSERT_TRUE(count);
  EXPECT_EQ(*count, 0u);
}

TEST_P(StoreContract, AnIdempotencyKeyGivesTheSameRunUntilItExpires) {
  RunStore& runs = store_->runs();
  using testing_support::Run;
  auto first = runs.EnqueueRun(Run("orders", R"({"n":1})", "key-1", 1000, 500));
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_FALSE(first->existing);
  EXPECT_EQ(first->run.idempotency_key, "key-1");

  // Same key, same input, before the key expires: the earlier run, nothing inserted.
  auto again = runs.EnqueueRun(Run("orders", R"({"n":1})", "key-1", 1499, 500));
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_TRUE(again->existing);
  ExpectRun(again->run, first->run);
  // Same key, another input: the client reused a key for another request.
  auto other_input = runs.EnqueueRun(Run("orders", R"({"n":2})", "key-1", 1499, 500));
  ASSERT_FALSE(other_input);
  EXPECT_EQ(other_input.error().code, ErrorCode::kConflict);
  EXPECT_NE(other_input.error().message.find("\"key-1\""), std::string::npos) << other_input.error().message;
  EXPECT_NE(other_input.error().message.find("run " + std::to_string(first->run.id)), std::string::npos)
      << other_input.error().message;
  // Keys are per flow; runs without a key are never the same run.
  auto other_flow = runs.EnqueueRun(Run("invoices", R"({"n":1})", "key-1", 1499, 500));
  ASSERT_TRUE(other_flow);
  EXPECT_FALSE(other_flow->existing);
  auto no_key_a = runs.EnqueueRun(Run("orders", R"({"n":1})", "", 1499));
  auto no_key_b = runs.EnqueueRun(Run("orders", R"({"n":1})", "", 1499));
  ASSERT_TRUE(no_key_a && no_key_b);
  EXPECT_NE(no_key_a->run.id, no_key_b->run.id);
  EXPECT_EQ(no_key_a->run.idempotency_key, "");
  auto count = runs.CountRuns(RunState::kQueued);
  ASSERT_TRUE(count);
  EXPECT_EQ(*count, 4u) << "the repeat and the conflict inserted nothing";

  // The earlier run is the answer whatever its state.
  auto activation = journal().BeginActivation(Start("orders"));
  ASSERT_TRUE(activation);
  ASSERT_TRUE(runs.MarkRunStarted(first->run.id, *activation, 1200));
  auto running = runs.EnqueueRun(Run("orders", R"({"n":1})", "key-1", 1300, 500));
  ASSERT_TRUE(running);
  EXPECT_TRUE(running->existing);
  EXPECT_EQ(running->run.id, first->run.id);
  EXPECT_EQ(running->run.state, RunState::kRunning);
  EXPECT_EQ(running->run.activation_id, *activation);

  // Expired (at 1500 = 1000 + 500, the key may be reused): forgotten, even with another input.
  auto expired = runs.EnqueueRun(Run("orders", R"({"n":3})", "key-1", 1500, 500));
  ASSERT_TRUE(expired) << expired.error().message;
  EXPECT_FALSE(expired->existing);
  EXPECT_NE(expired->run.id, first->run.id);
  EXPECT_EQ(expired->run.idempotency_key, "key-1");
  ASSERT_TRUE(store_->Commit());
  auto old = store_->reader().GetRun(first->run.id);
  ASSERT_TRUE(old && old->has_value());
  EXPECT_EQ((*old)->idempotency_key, "") << "the old run keeps its row; its key is cleared";
  EXPECT_EQ((*old)->state, RunState::kRunning);
  EXPECT_EQ((*old)->input_json, R"({"n":1})");
  // The key now names the new run.
  auto repeat = runs.EnqueueRun(Run("orders", R"({"n":3})", "key-1", 1600, 500));
  ASSERT_TRUE(repeat);
  EXPECT_TRUE(repeat->existing);
  EXPECT_EQ(repeat->run.id, expired->run.id);
  (void)store_->Rollback();
}

TEST_P(StoreContract, RunStatesMoveOnlyForward) {
  RunStore& runs = store_->runs();
  auto a = runs.EnqueueRun(testing_support::Run("orders", "1"));
  auto b = runs.EnqueueRun(testing_support::Run("orders", "2"));
  auto c = runs.EnqueueRun(testing_support::Run("orders", "3"));
  ASSERT_TRUE(a && b && c);
  auto activation = journal().BeginActivation(Start("orders"));
  ASSERT_TRUE(activation);

  // queued -> running -> ended with the activation's outcome.
  ASSERT_TRUE(runs.MarkRunStarted(a->run.id, *activation, 1100));
  auto twice = runs.MarkRunStarted(a->run.id, *activation, 1200);
  ASSERT_FALSE(twice);
  EXPECT_EQ(twice.error().code, ErrorCode::kConflict);
  EXPECT_NE(twice.error().message.find("running"), std::string::npos) << twice.error().message;
  auto not_an_outcome = runs.MarkRunEnded(a->run.id, "missed", "", 1300);
  ASSERT_FALSE(not_an_outcome);
  EXPECT_EQ(not_an_outcome.error().code, ErrorCode::kInvalidArgument) << "a running run ends with an outcome name";
  ASSERT_TRUE(journal().EndActivation(End(*activation, Outcome::kScriptError, 1300)));
  const std::string error = R"({"kind":"script_error","message":"x"})";
  ASSERT_TRUE(runs.MarkRunEnded(a->run.id, "script_error", error, 1300));
  auto ended_twice = runs.MarkRunEnded(a->run.id, "ok", "", 1400);
  ASSERT_FALSE(ended_twice);
  EXPECT_EQ(ended_twice.error().code, ErrorCode::kConflict);
  auto start_ended = runs.MarkRunStarted(a->run.id, *activation, 1400);
  ASSERT_FALSE(start_ended);
  EXPECT_EQ(start_ended.error().code, ErrorCode::kConflict);

  // queued -> ended without an activation: only the daemon's own reasons.
  for (const char* wrong : {"ok", "abandoned", "", "Missed"}) {
    auto refused = runs.MarkRunEnded(b->run.id, wrong, "", 1500);
    ASSERT_FALSE(refused) << wrong;
    EXPECT_EQ(refused.error().code, ErrorCode::kInvalidArgument) << wrong;
  }
  const std::string missed = R"({"kind":"missed","message":"the daemon was down at 01:00"})";
  ASSERT_TRUE(runs.MarkRunEnded(b->run.id, "missed", missed, 1500));
  ASSERT_TRUE(runs.MarkRunEnded(c->run.id, "cancelled", R"({"kind":"cancelled","message":"m"})", 1600));

  // Unknown runs.
  auto unknown_start = runs.MarkRunStarted(c->run.id + 100, *activation, 1);
  ASSERT_FALSE(unknown_start);
  EXPECT_EQ(unknown_start.error().code, ErrorCode::kNotFound);
  auto unknown_end = runs.MarkRunEnded(c->run.id + 100, "cancelled", "", 1);
  ASSERT_FALSE(unknown_end);
  EXPECT_EQ(unknown_end.error().code, ErrorCode::kNotFound);

  ASSERT_TRUE(store_->Commit()) << "the refused moves changed nothing and broke no batch";
  auto other = MustRead();
  ASSERT_TRUE(other);
  auto ra = other->GetRun(a->run.id);
  ASSERT_TRUE(ra && ra->has_value());
  EXPECT_EQ((*ra)->state, RunState::kEnded);
  EXPECT_EQ((*ra)->activation_id, *activation);
  EXPECT_EQ((*ra)->started_unix_us, std::optional<int64_t>(1100));
  EXPECT_EQ((*ra)->ended_unix_us, std::optional<int64_t>(1300));
  EXPECT_EQ((*ra)->outcome, "script_error");
  EXPECT_EQ((*ra)->error_json, error);
  auto rb = other->GetRun(b->run.id);
  ASSERT_TRUE(rb && rb->has_value());
  EXPECT_EQ((*rb)->state, RunState::kEnded);
  EXPECT_EQ((*rb)->activation_id, 0);
  EXPECT_FALSE((*rb)->started_unix_us.has_value());
  EXPECT_EQ((*rb)->ended_unix_us, std::optional<int64_t>(1500));
  EXPECT_EQ((*rb)->outcome, "missed");
  EXPECT_EQ((*rb)->error_json, missed);
  auto ended = store_->runs().CountRuns(RunState::kEnded);
  ASSERT_TRUE(ended);
  EXPECT_EQ(*ended, 3u);
}

TEST_P(StoreContract, ListRunsIsNewestFirstAndFilters) {
  RunStore& runs = store_->runs();
  std::vector<int64_t> ids;
  for (int i = 0; i < 6; ++i) {
    auto e = runs.EnqueueRun(testing_support::Run(i % 2 == 0 ? "even" : "odd", std::to_string(i)));
    ASSERT_TRUE(e);
    ids.push_back(e->run.id);
  }
  auto activation = journal().BeginActivation(Start("even"));
  ASSERT_TRUE(activation);
  ASSERT_TRUE(runs.MarkRunStarted(ids[2], *activation, 1100));
  ASSERT_TRUE(runs.MarkRunEnded(ids[4], "skipped", "", 1100));
  ASSERT_TRUE(store_->Commit());
  auto other = MustRead();
  ASSERT_TRUE(other);
  struct Case {
    RunQuery query;
    std::vector<int64_t> want;
  };
  const Case cases[] = {
      {{}, {ids[5], ids[4], ids[3], ids[2], ids[1], ids[0]}},
      {{.limit = 2}, {ids[5], ids[4]}},
      {{.before_id = ids[4], .limit = 2}, {ids[3], ids[2]}},
      {{.flow = "even"}, {ids[4], ids[2], ids[0]}},
      {{.state = RunState::kQueued}, {ids[5], ids[3], ids[1], ids[0]}},
      {{.flow = "even", .state = RunState::kQueued}, {ids[0]}},
      {{.flow = "even", .state = RunState::kRunning}, {ids[2]}},
      {{.flow = "odd", .state = RunState::kEnded}, {}},
      {{.flow = "none"}, {}},
      {{.limit = 0}, {}},
  };
  for (JournalReader* reader : {&store_->reader(), other.get()}) {
    for (const Case& c : cases) {
      auto rows = reader->ListRuns(c.query);
      ASSERT_TRUE(rows) << rows.error().message;
      EXPECT_EQ(Ids(*rows), c.want) << "flow " << c.query.flow << " before " << c.query.before_id << " limit "
                                    << c.query.limit;
    }
  }
  auto oldest = runs.RunsInState(RunState::kQueued, 3);
  ASSERT_TRUE(oldest);
  EXPECT_EQ(Ids(*oldest), (std::vector<int64_t>{ids[0], ids[1], ids[3]})) << "oldest first";
}

// The filters of a run listing (GET /v1/runs, basal runs): outcome, trigger (a kind or one
// trigger), creation time and idempotency key, alone and with flow, state and the cursor.
TEST_P(StoreContract, ListRunsFiltersByOutcomeTriggerTimeAndKey) {
  RunStore& runs = store_->runs();
  struct Made {
    const char* flow;
    const char* trigger;
    int64_t at;
    const char* key;
  };
  const Made made[] = {
      {"a", "api", 1000, ""},           {"a", "webhook:github", 2000, "d-1"}, {"b", "webhook:stripe", 3000, ""},
      {"a", "schedule:nightly", 4000, ""}, {"b", "webhooks", 5000, ""},      {"a", "api", 6000, "k"},
  };
  std::vector<int64_t> ids;
  for (const Made& m : made) {
    NewRun r = testing_support::Run(m.flow, "{}", m.key, m.at);
    r.trigger = m.trigger;
    auto e = runs.EnqueueRun(r);
    ASSERT_TRUE(e) << e.error().message;
    ids.push_back(e->run.id);
  }
  ASSERT_TRUE(runs.MarkRunEnded(ids[0], "cancelled", "", 1100));
  ASSERT_TRUE(runs.MarkRunEnded(ids[2], "skipped", "", 3100));
  ASSERT_TRUE(runs.MarkRunEnded(ids[3], "cancelled", "", 4100));
  ASSERT_TRUE(store_->Commit());
  auto other = MustRead();
  ASSERT_TRUE(other);
  struct Case {
    RunQuery query;
    std::vector<int64_t> want;
  };
  const Case cases[] = {
      {{.outcome = "cancelled"}, {ids[3], ids[0]}},
      {{.flow = "a", .outcome = "cancelled"}, {ids[3], ids[0]}},
      {{.state = RunState::kEnded, .outcome = "skipped"}, {ids[2]}},
      {{.outcome = "ok"}, {}},
      // A kind matches its named triggers, not another kind that starts with the same letters.
      {{.trigger = "webhook"}, {ids[2], ids[1]}},
      {{.trigger = "webhook:github"}, {ids[1]}},
      {{.trigger = "webhooks"}, {ids[4]}},
      {{.trigger = "api"}, {ids[5], ids[0]}},
      {{.trigger = "schedule"}, {ids[3]}},
      {{.flow = "b", .trigger = "webhook"}, {ids[2]}},
      {{.since_unix_us = 4000}, {ids[5], ids[4], ids[3]}},
      {{.before_id = ids[5], .limit = 2, .since_unix_us = 2000}, {ids[4], ids[3]}},
      {{.flow = "a", .idempotency_key = "d-1"}, {ids[1]}},
      {{.flow = "b", .idempotency_key = "d-1"}, {}},
  };
  for (JournalReader* reader : {&store_->reader(), other.get()}) {
    for (const Case& c : cases) {
      auto rows = reader->ListRuns(c.query);
      ASSERT_TRUE(rows) << rows.error().message;
      EXPECT_EQ(Ids(*rows), c.want) << "outcome " << c.query.outcome << " trigger " << c.query.trigger << " since "
                                    << c.query.since_unix_us << " key " << c.query.idempotency_key;
    }
  }
}

// A run joins the journal's batch: rolled back, it is gone, with the token and the mark of the
// same batch; never committed (the parent died), it is gone too.
TEST_P(StoreContract, ABatchRolledBackLosesTheRun) {
  auto committed = store_->runs().EnqueueRun(testing_support::Run("orders", "0"));
  ASSERT_TRUE(committed);
  ASSERT_TRUE(store_->Commit());

  auto lost = store_->runs().EnqueueRun(testing_support::Run("orders", "1", "k"));
  ASSERT_TRUE(lost);
  ASSERT_TRUE(store_->serve().AddToken("ci", "hash-ci", "[]", {0, "root"}, 1000));
  ASSERT_TRUE(store_->serve().SetScheduleMark("nightly", 5000));
  ASSERT_TRUE(store_->runs().MarkRunEnded(committed->run.id, "cancelled", "", 1000));
  {
    auto other = MustRead();  // another connection sees none of the open batch
    ASSERT_TRUE(other);
    auto none = other->GetRun(lost->run.id);
    ASSERT_TRUE(none);
    EXPECT_FALSE(none->has_value());
    auto tokens = other->ListTokens();
    ASSERT_TRUE(tokens);
    EXPECT_TRUE(tokens->empty());
  }
  ASSERT_TRUE(store_->Rollback());
  auto gone = store_->runs().GetRun(lost->run.id);
  ASSERT_TRUE(gone);
  EXPECT_FALSE(gone->has_value());
  auto token = store_->serve().FindToken("hash-ci");
  ASSERT_TRUE(token);
  EXPECT_FALSE(token->has_value());
  auto mark = store_->serve().ScheduleMark("nightly");
  ASSERT_TRUE(mark);
  EXPECT_FALSE(mark->has_value());
  auto kept = store_->runs().GetRun(committed->run.id);
  ASSERT_TRUE(kept && kept->has_value());
  EXPECT_EQ((*kept)->state, RunState::kQueued) << "its end was in the lost batch";
  // The key of the lost run was never taken.
  auto again = store_->runs().EnqueueRun(testing_support::Run("orders", "2", "k"));
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_FALSE(again->existing);
  const int64_t uncommitted = again->run.id;
  store_.reset();  // never commits
  store_ = MustOpen();
  ASSERT_TRUE(store_);
  auto after = store_->runs().GetRun(uncommitted);
  ASSERT_TRUE(after);
  EXPECT_FALSE(after->has_value());
  auto count = store_->runs().CountRuns(RunState::kQueued);
  ASSERT_TRUE(count);
  EXPECT_EQ(*count, 1u);
}

// After a crash: recovery ends the dead parent's activations as abandoned; settling ends their
// running runs with that outcome, and leaves the runs of live activations and queued runs alone.
TEST_P(StoreContract, SettleEndsRunsWhoseActivationRecoveryClosed) {
  const ActivationOwner me = ThisProcessOwner();
  const ActivationOwner dead{me.host, DeadPid(), 5};
  const ActivationOwner self{me.host, DeadPid(), 1};
  const int64_t now = 10'000'000'000'000;
  RunStore& runs = store_->runs();
  auto start = [&](const ActivationOwner& owner, const std::string& input) {
    auto run = runs.EnqueueRun(testing_support::Run("orders", input));
    auto activation = journal().BeginActivation(Start("orders", 1000, owner));
    EXPECT_TRUE(run && activation);
    if (!run || !activation) return std::pair<int64_t, int64_t>(0, 0);
    EXPECT_TRUE(runs.MarkRunStarted(run->run.id, *activation, 1100));
    return std::pair<int64_t, int64_t>(run->run.id, *activation);
  };
  const auto [orphan, orphan_activation] = start(dead, "1");
  const auto [live, live_activation] = start(me, "2");
  // Its activation ended and committed, but the daemon died before it ended the run.
  const auto [finished, finished_activation] = start(me, "3");
  ASSERT_TRUE(journal().EndActivation(End(finished_activation, Outcome::kOk, 1500)));
  auto queued = runs.EnqueueRun(testing_support::Run("orders", "4"));
  ASSERT_TRUE(queued);
  ASSERT_TRUE(store_->Commit());

  auto report = journal().RecoverAbandoned(self, now);
  ASSERT_TRUE(report) << report.error().message;
  EXPECT_EQ(report->abandoned_activations, (std::vector<int64_t>{orphan_activation}));
  auto settled = runs.SettleRunsOfEndedActivations(now + 5);
  ASSERT_TRUE(settled) << settled.error().message;
  EXPECT_EQ(*settled, 2u);
  ASSERT_TRUE(store_->Commit());

  auto other = MustRead();
  ASSERT_TRUE(other);
  auto orphan_row = other->GetRun(orphan);
  ASSERT_TRUE(orphan_row && orphan_row->has_value());
  EXPECT_EQ((*orphan_row)->state, RunState::kEnded);
  EXPECT_EQ((*orphan_row)->outcome, "abandoned");
  EXPECT_EQ((*orphan_row)->ended_unix_us, std::optional<int64_t>(now)) << "when its activation was closed";
  auto error = nlohmann::json::parse((*orphan_row)->error_json, nullptr, false);
  ASSERT_FALSE(error.is_discarded()) << (*orphan_row)->error_json;
  EXPECT_EQ(error["kind"], "abandoned");
  auto finished_row = other->GetRun(finished);
  ASSERT_TRUE(finished_row && finished_row->has_value());
  EXPECT_EQ((*finished_row)->outcome, "ok");
  EXPECT_EQ((*finished_row)->error_json, "");
  EXPECT_EQ((*finished_row)->ended_unix_us, std::optional<int64_t>(1500));
  auto live_row = other->GetRun(live);
  ASSERT_TRUE(live_row && live_row->has_value());
  EXPECT_EQ((*live_row)->state, RunState::kRunning) << "its activation still runs";
  auto queued_row = other->GetRun(queued->run.id);
  ASSERT_TRUE(queued_row && queued_row->has_value());
  EXPECT_EQ((*queued_row)->state, RunState::kQueued) << "a queued run starts after a restart";

  auto again = runs.SettleRunsOfEndedActivations(now + 6);
  ASSERT_TRUE(again);
  EXPECT_EQ(*again, 0u);
  (void)store_->Rollback();
}

// A durable run (docs/durable.md): bound at its first start and never rebound; its calls keep what a
// replay needs; recovery interrupts it instead of ending it; a resume claims it once (resumes + 1);
// an in-doubt call's resolution is kept; the moves outside the diagram are refused.
TEST_P(StoreContract, DurableRunsAreInterruptedResumedAndResolved) {
  const ActivationOwner me = ThisProcessOwner();
  const ActivationOwner dead{me.host, DeadPid(), 5};
  const ActivationOwner self{me.host, DeadPid(), 1};
  const int64_t now = 10'000'000'000'000;
  RunStore& runs = store_->runs();
  NewRun durable = testing_support::Run("orders", R"({"n":7})");
  durable.durable = true;
  auto run = runs.EnqueueRun(durable);
  auto plain = runs.EnqueueRun(testing_support::Run("orders", R"({"n":8})"));
  ASSERT_TRUE(run && plain);
  EXPECT_TRUE(run->run.durable);
  ActivationStart first = Start("orders", 1000, dead);
  first.run_id = run->run.id;
  auto a1 = journal().BeginActivation(first);
  ActivationStart plain_start = Start("orders", 1000, dead);
  plain_start.run_id = plain->run.id;
  auto p1 = journal().BeginActivation(plain_start);
  ASSERT_TRUE(a1 && p1);
  RunBinding binding{0, "sha256:src", "sha256:man", "sha256:mtext", std::string(64, 'a'), 123456789};
  ASSERT_TRUE(runs.MarkRunStarted(run->run.id, *a1, 1100, binding));
  ASSERT_TRUE(runs.MarkRunStarted(plain->run.id, *p1, 1100));
  // Call 1 answered (with what a replay needs), call 2 external and started when its parent died.
  CallRecord answered = testing_support::Call(*a1, 1);
  answered.args_digest = "sha256:d1";
  answered.answer_seq = 1;
  answered.replay_json = R"({"ok":{"full":"value"}})";
  ASSERT_TRUE(journal().RecordCall(answered));
  CallRecord external = testing_support::Call(*a1, 2);
  external.name = "mail.send";
  external.effect = Effect::kExternal;
  external.state = CallState::kStarted;
  external.result_json.clear();
  external.end_unix_us = std::nullopt;
  external.args_digest = "sha256:d2";
  ASSERT_TRUE(journal().RecordCall(external));
  ASSERT_TRUE(store_->Commit());

  // Its activation keeps no input: the run's is read.
  auto rows = store_->reader().RunActivations(run->run.id);
  ASSERT_TRUE(rows) << rows.error().message;
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].id, *a1);
  EXPECT_EQ((*rows)[0].run_id, run->run.id);
  EXPECT_EQ((*rows)[0].input_json, R"({"n":7})");

  auto report = journal().RecoverAbandoned(self, now);
  ASSERT_TRUE(report) << report.error().message;
  auto settled = runs.SettleRunsOfEndedActivations(now + 5);
  ASSERT_TRUE(settled) << settled.error().message;
  EXPECT_EQ(*settled, 2u);
  ASSERT_TRUE(store_->Commit());
  auto other = MustRead();
  ASSERT_TRUE(other);
  auto interrupted = other->GetRun(run->run.id);
  ASSERT_TRUE(interrupted && interrupted->has_value());
  EXPECT_EQ((*interrupted)->state, RunState::kInterrupted) << "a durable run waits to be resumed";
  EXPECT_EQ((*interrupted)->binding.seed, std::string(64, 'a'));
  EXPECT_EQ((*interrupted)->binding.clock_us, 123456789);
  EXPECT_EQ((*interrupted)->binding.source_hash, "sha256:src");
  EXPECT_EQ((*interrupted)->binding.manifest_text_hash, "sha256:mtext");
  auto ended = other->GetRun(plain->run.id);
  ASSERT_TRUE(ended && ended->has_value());
  EXPECT_EQ((*ended)->state, RunState::kEnded);
  EXPECT_EQ((*ended)->outcome, "abandoned") << "a run that is not durable ends with its activation";
  auto calls = other->RunCalls(run->run.id);
  ASSERT_TRUE(calls) << calls.error().message;
  ASSERT_EQ(calls->size(), 2u);
  EXPECT_EQ((*calls)[0].args_digest, "sha256:d1");
  EXPECT_EQ((*calls)[0].answer_seq, std::optional<int64_t>(1));
  EXPECT_EQ((*calls)[0].replay_json, R"({"ok":{"full":"value"}})");
  EXPECT_EQ((*calls)[1].state, CallState::kUnknown);
  EXPECT_EQ((*calls)[1].args_digest, "sha256:d2");
  EXPECT_FALSE((*calls)[1].answer_seq.has_value());

  // One resume claims it; a second claim of the same interruption is refused and writes nothing.
  auto claimed = runs.MoveRun({run->run.id, RunState::kInterrupted, RunState::kQueued, "", true});
  ASSERT_TRUE(claimed) << claimed.error().message;
  EXPECT_EQ(claimed->state, RunState::kQueued);
  EXPECT_EQ(claimed->resumes, 1);
  auto twice = runs.MoveRun({run->run.id, RunState::kInterrupted, RunState::kQueued, "", true});
  ASSERT_FALSE(twice);
  EXPECT_EQ(twice.error().code, ErrorCode::kConflict);
  auto nonsense = runs.MoveRun({run->run.id, RunState::kQueued, RunState::kEnded, "", false});
  ASSERT_FALSE(nonsense);
  EXPECT_EQ(nonsense.error().code, ErrorCode::kInvalidArgument);

  // The resume's start keeps the first binding.
  ActivationStart second = Start("orders", 2000, me);
  second.run_id = run->run.id;
  auto a2 = journal().BeginActivation(second);
  ASSERT_TRUE(a2);
  RunBinding other_binding{0, "sha256:other", "sha256:other", "sha256:other", std::string(64, 'b'), 1};
  ASSERT_TRUE(runs.MarkRunStarted(run->run.id, *a2, 2100, other_binding));
  auto stuck = runs.MoveRun({run->run.id, RunState::kRunning, RunState::kNeedsReconciliation,
                             R"({"call":2,"name":"mail.send"})", false});
  ASSERT_TRUE(stuck) << stuck.error().message;
  EXPECT_EQ(stuck->state, RunState::kNeedsReconciliation);
  EXPECT_EQ(stuck->binding.seed, std::string(64, 'a'));
  EXPECT_EQ(stuck->binding.source_hash, "sha256:src");
  EXPECT_EQ(stuck->activation_id, *a2);
  EXPECT_EQ(stuck->state_detail, R"({"call":2,"name":"mail.send"})");

  CallResolution resolution;
  resolution.run_id = run->run.id;
  resolution.activation_id = *a1;
  resolution.call_id = 2;
  resolution.kind = ResolutionKind::kResult;
  resolution.value_json = R"({"sent":true})";
  resolution.actor = {1000, "alice"};
  resolution.at_unix_us = now + 10;
  resolution.note = "checked the mail log";
  auto seq = runs.AddResolution(resolution);
  ASSERT_TRUE(seq) << seq.error().message;
  auto released = runs.MoveRun({run->run.id, RunState::kNeedsReconciliation, RunState::kInterrupted, "", false});
  ASSERT_TRUE(released) << released.error().message;
  ASSERT_TRUE(runs.MarkRunEnded(run->run.id, "cancelled", R"({"kind":"cancelled","message":"by alice"})", now + 20));
  ASSERT_TRUE(store_->Commit());
  auto resolutions = MustRead()->Resolutions(run->run.id);
  ASSERT_TRUE(resolutions) << resolutions.error().message;
  ASSERT_EQ(resolutions->size(), 1u);
  EXPECT_EQ((*resolutions)[0].seq, *seq);
  EXPECT_EQ((*resolutions)[0].kind, ResolutionKind::kResult);
  EXPECT_EQ((*resolutions)[0].value_json, R"({"sent":true})");
  EXPECT_EQ((*resolutions)[0].actor.name, "alice");
  EXPECT_EQ((*resolutions)[0].call_id, 2);
  EXPECT_EQ((*resolutions)[0].activation_id, *a1);
  EXPECT_EQ((*resolutions)[0].note, "checked the mail log");
  auto activations = MustRead()->RunActivations(run->run.id);
  ASSERT_TRUE(activations);
  EXPECT_EQ(activations->size(), 2u);
}

// A durable run of `flow`, started (running) in an activation of its own; its id.
int64_t StartDurableRun(Store& store, const std::string& flow) {
  NewRun run = testing_support::Run(flow, R"({"n":1})");
  run.durable = true;
  auto queued = store.runs().EnqueueRun(run);
  EXPECT_TRUE(queued) << (queued ? "" : queued.error().message);
  if (!queued) return 0;
  ActivationStart start = Start(flow, 1000, ThisProcessOwner());
  start.run_id = queued->run.id;
  auto activation = store.journal().BeginActivation(start);
  EXPECT_TRUE(activation) << (activation ? "" : activation.error().message);
  if (!activation) return 0;
  auto started = store.runs().MarkRunStarted(queued->run.id, *activation, 1100);
  EXPECT_TRUE(started) << (started ? "" : started.error().message);
  return queued->run.id;
}

RunMove Park(int64_t run, RunState to, int64_t wake, std::string waiting_for = "", std::string key = "") {
  RunMove m{run, RunState::kRunning, to, "", false};
  m.wake_unix_us = wake;
  m.waiting_for = std::move(waiting_for);
  m.waiting_key = std::move(key);
  return m;
}

TEST_P(StoreContract, ParkedRunsKeepWhenTheyWakeAndWhatTheyWaitFor) {
  RunStore& runs = store_->runs();
  const int64_t sleeper = StartDurableRun(*store_, "orders");
  const int64_t waiter = StartDurableRun(*store_, "orders");
  const int64_t retrier = StartDurableRun(*store_, "orders");
  const int64_t other = StartDurableRun(*store_, "invoices");
  ASSERT_TRUE(sleeper && waiter && retrier && other);

  // A parked state needs a wake time; only a waiting run names an event.
  RunMove no_wake{sleeper, RunState::kRunning, RunState::kSleeping, "", false};
  EXPECT_EQ(runs.MoveRun(no_wake).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(runs.MoveRun(Park(sleeper, RunState::kWaiting, 5000)).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(runs.MoveRun(Park(sleeper, RunState::kSleeping, 5000, "approved")).error().code,
            ErrorCode::kInvalidArgument);

  auto slept = runs.MoveRun(Park(sleeper, RunState::kSleeping, 5000));
  ASSERT_TRUE(slept) << slept.error().message;
  EXPECT_EQ(slept->state, RunState::kSleeping);
  EXPECT_EQ(slept->wake_unix_us, std::optional<int64_t>(5000));
  ASSERT_TRUE(runs.MoveRun(Park(waiter, RunState::kWaiting, 9000, "approved", "k1")));
  RunMove retry = Park(retrier, RunState::kRetrying, 3000);
  retry.detail_json = R"({"attempt":1})";
  ASSERT_TRUE(runs.MoveRun(retry));
  ASSERT_TRUE(runs.MoveRun(Park(other, RunState::kSleeping, 7000)));
  // Only a running run parks.
  EXPECT_EQ(runs.MoveRun({sleeper, RunState::kQueued, RunState::kSleeping, "", false}).error().code,
            ErrorCode::kInvalidArgument);
  ASSERT_TRUE(store_->Commit());

  auto reader = MustRead();
  ASSERT_TRUE(reader);
  auto w = reader->GetRun(waiter);
  ASSERT_TRUE(w && w->has_value());
  EXPECT_EQ((*w)->state, RunState::kWaiting);
  EXPECT_EQ((*w)->waiting_for, "approved");
  EXPECT_EQ((*w)->waiting_key, "k1");
  EXPECT_EQ((*w)->wake_unix_us, std::optional<int64_t>(9000));
  EXPECT_EQ((*w)->attempt, 1);

  auto ids = [](const Result<std::vector<RunRow>>& rows) {
    std::vector<int64_t> out;
    EXPECT_TRUE(rows) << (rows ? "" : rows.error().message);
    if (rows)
      for (const RunRow& r : *rows) out.push_back(r.id);
    return out;
  };
  EXPECT_EQ(ids(runs.RunsDue(2999, 10)), std::vector<int64_t>{});
  EXPECT_EQ(ids(runs.RunsDue(3000, 10)), std::vector<int64_t>{retrier});
  EXPECT_EQ(ids(runs.RunsDue(9000, 10)), (std::vector<int64_t>{retrier, sleeper, other, waiter})) << "earliest first";
  EXPECT_EQ(ids(runs.RunsDue(9000, 2)), (std::vector<int64_t>{retrier, sleeper}));
  EXPECT_EQ(ids(runs.RunsDue(9000, 0)), std::vector<int64_t>{});
  auto next = runs.NextWake();
  ASSERT_TRUE(next) << next.error().message;
  EXPECT_EQ(*next, std::optional<int64_t>(3000));
  EXPECT_EQ(*runs.CountParked(""), 4u);
  EXPECT_EQ(*runs.CountParked("orders"), 3u);
  EXPECT_EQ(*runs.CountParked("invoices"), 1u);
  EXPECT_EQ(*runs.CountParked("nobody"), 0u);
  EXPECT_EQ(ids(runs.RunsWaitingFor("orders", "approved", "k1", 10)), std::vector<int64_t>{waiter});
  EXPECT_EQ(ids(runs.RunsWaitingFor("orders", "approved", "", 10)), std::vector<int64_t>{}) << "the key must match";
  EXPECT_EQ(ids(runs.RunsWaitingFor("invoices", "approved", "k1", 10)), std::vector<int64_t>{});
  auto counts = runs.CountRunsByFlow({RunState::kSleeping, RunState::kWaiting, RunState::kRetrying}, 100);
  ASSERT_TRUE(counts) << counts.error().message;
  std::vector<std::string> shown;
  for (const RunCount& c : *counts) shown.push_back(c.flow + "/" + RunStateName(c.state) + "=" + std::to_string(c.count));
  EXPECT_EQ(shown, (std::vector<std::string>{"invoices/sleeping=1", "orders/retrying=1", "orders/sleeping=1",
                                             "orders/waiting=1"}));
  auto limited = runs.CountRunsByFlow({RunState::kSleeping}, 1);
  ASSERT_TRUE(limited);
  EXPECT_EQ(limited->size(), 1u);
  EXPECT_TRUE(runs.CountRunsByFlow({}, 100)->empty());

  // A retry's wake counts the attempt and clears the wake time; the wait's move clears what it
  // waited for; a parked run ends only as cancelled.
  RunMove again{retrier, RunState::kRetrying, RunState::kQueued, "", false};
  again.count_attempt = true;
  auto woken = runs.MoveRun(again);
  ASSERT_TRUE(woken) << woken.error().message;
  EXPECT_EQ(woken->attempt, 2);
  EXPECT_EQ(woken->resumes, 0);
  EXPECT_FALSE(woken->wake_unix_us.has_value());
  auto signalled = runs.MoveRun({waiter, RunState::kWaiting, RunState::kInterrupted, "", false});
  ASSERT_TRUE(signalled) << signalled.error().message;
  EXPECT_EQ(signalled->waiting_for, "");
  EXPECT_EQ(signalled->waiting_key, "");
  EXPECT_FALSE(signalled->wake_unix_us.has_value());
  auto wrong = runs.MarkRunEnded(sleeper, "ok", "", 4000);
  ASSERT_FALSE(wrong);
  EXPECT_EQ(wrong.error().code, ErrorCode::kInvalidArgument);
  ASSERT_TRUE(runs.MarkRunEnded(sleeper, "cancelled", R"({"kind":"cancelled"})", 4000));
  auto twice = runs.MoveRun(Park(sleeper, RunState::kSleeping, 1));
  EXPECT_EQ(twice.error().code, ErrorCode::kConflict) << "an ended run does not park";
  ASSERT_TRUE(store_->Commit());
  auto cancelled = MustRead()->GetRun(sleeper);
  ASSERT_TRUE(cancelled && cancelled->has_value());
  EXPECT_EQ((*cancelled)->state, RunState::kEnded);
  EXPECT_EQ((*cancelled)->outcome, "cancelled");
  EXPECT_FALSE((*cancelled)->wake_unix_us.has_value());
  EXPECT_EQ(*runs.NextWake(), std::optional<int64_t>(7000));
  EXPECT_EQ(*runs.CountParked(""), 1u);
  EXPECT_EQ(*runs.CountParked("orders"), 0u);
}

NewRunEvent Event(int64_t run, const std::string& name, const std::string& key, const std::string& payload,
                  int64_t expires) {
  NewRunEvent e;
  e.run_id = run;
  e.flow = "orders";
  e.name = name;
  e.event_key = key;
  e.payload_json = payload;
  e.sender = "alice";
  e.received_unix_us = 100;
  e.expires_unix_us = expires;
  return e;
}

// Two processes (two stores, two connections) that take the same event at the same moment: one
// gets it, the other gets nothing, and the event records the one that got it. Both for an event
// sent to the run and for a keyed one that becomes the run's (the webhook's case). Each round
// starts both takers together; whichever wins, exactly one may.
TEST_P(StoreContract, TwoStoresTakingOneEventAtOnceDeliverItOnce) {
  std::unique_ptr<Store> other = MustOpen();
  ASSERT_TRUE(other);
  const int64_t run = StartDurableRun(*store_, "orders");
  ASSERT_TRUE(run);
  ASSERT_TRUE(store_->Commit());
  for (int round = 0; round < 12; ++round) {
    const bool keyed = round % 2 == 1;
    const std::string key = keyed ? "k" + std::to_string(round) : "";
    auto sent = store_->runs().AddRunEvent(Event(keyed ? 0 : run, "go", key, "{}", 1'000'000));
    ASSERT_TRUE(sent) << sent.error().message;
    ASSERT_TRUE(store_->Commit());
    // Each taker takes in its batch and commits it, as the module does when a flow's
    // waitForEvent is answered; a started flag lines both up before either takes.
    std::atomic<int> ready{0};
    auto take = [&](Store& s, int64_t activation, Result<std::optional<RunEvent>>* out) {
      ready.fetch_add(1);
      while (ready.load() < 2) std::this_thread::yield();
      *out = s.runs().TakeRunEvent(run, "orders", "go", key, 500, activation, round + 1);
      if (*out && (*out)->has_value()) {
        if (auto c = s.Commit(); !c) *out = c.error();
      } else {
        (void)s.Rollback();
      }
    };
    Result<std::optional<RunEvent>> a = std::optional<RunEvent>(), b = std::optional<RunEvent>();
    std::thread first(take, std::ref(*store_), 71, &a);
    std::thread second(take, std::ref(*other), 72, &b);
    first.join();
    second.join();
    ASSERT_TRUE(a) << a.error().message;
    ASSERT_TRUE(b) << b.error().message;
    ASSERT_EQ(a->has_value() + b->has_value(), 1) << "round " << round << ": the event was delivered "
                                                  << (a->has_value() + b->has_value()) << " times";
    const int64_t winner = a->has_value() ? 71 : 72;
    EXPECT_EQ((a->has_value() ? **a : **b).id, *sent);
    auto listed = store_->runs().RunEvents(run, 100);
    ASSERT_TRUE(listed) << listed.error().message;
    auto it = std::find_if(listed->begin(), listed->end(), [&](const RunEvent& e) { return e.id == *sent; });
    ASSERT_NE(it, listed->end());
    EXPECT_EQ(it->delivered_activation, winner) << "the record names the taker that got it";
    EXPECT_EQ(it->run_id, run);
    ASSERT_TRUE(store_->Commit());
  }
}

TEST_P(StoreContract, RunEventsAreKeptDeliveredOnceAndDropWhenExpired) {
  RunStore& runs = store_->runs();
  const int64_t run = StartDurableRun(*store_, "orders");
  ASSERT_TRUE(run);
  ASSERT_TRUE(store_->Commit());

  auto nowhere = runs.AddRunEvent(Event(0, "approved", "", "{}", 10000));
  ASSERT_FALSE(nowhere);
  EXPECT_EQ(nowhere.error().code, ErrorCode::kInvalidArgument) << "an event names its run or carries a key";
  // An event of a batch rolled back is gone.
  ASSERT_TRUE(runs.AddRunEvent(Event(run, "approved", "", R"({"lost":true})", 10000)));
  ASSERT_TRUE(store_->Rollback());
  EXPECT_EQ(*runs.CountPendingEvents(run), 0u);

  auto to_run = runs.AddRunEvent(Event(run, "approved", "", R"({"by":"bob"})", 10000));
  auto keyed = runs.AddRunEvent(Event(0, "approved", "k1", R"({"by":"hook"})", 10000));
  auto other_name = runs.AddRunEvent(Event(run, "shipped", "", "1", 10000));
  auto late = runs.AddRunEvent(Event(run, "approved", "", "2", 300));
  ASSERT_TRUE(to_run && keyed && other_name && late) << (to_run ? "" : to_run.error().message);
  ASSERT_TRUE(store_->Commit());
  EXPECT_EQ(*runs.CountPendingEvents(run), 3u) << "the keyed one is not the run's yet";
  EXPECT_EQ(*runs.CountPendingKeyedEvents("orders"), 1u);
  EXPECT_EQ(*runs.CountPendingKeyedEvents("invoices"), 0u);

  // The oldest event sent to the run goes first; each is delivered once.
  auto first = runs.TakeRunEvent(run, "orders", "approved", "", 200, 77, 5);
  ASSERT_TRUE(first) << first.error().message;
  ASSERT_TRUE(first->has_value());
  EXPECT_EQ((*first)->id, *to_run);
  EXPECT_EQ((*first)->payload_json, R"({"by":"bob"})");
  EXPECT_EQ((*first)->sender, "alice");
  EXPECT_EQ((*first)->delivered_activation, 77);
  EXPECT_EQ((*first)->delivered_call, 5);
  EXPECT_EQ((*first)->delivered_unix_us, std::optional<int64_t>(200));
  // Past its expiry the late one is not delivered; without the key the keyed one is not either.
  auto none = runs.TakeRunEvent(run, "orders", "approved", "", 400, 77, 6);
  ASSERT_TRUE(none) << none.error().message;
  EXPECT_FALSE(none->has_value());
  // With the key, the flow's keyed event becomes the run's.
  auto by_key = runs.TakeRunEvent(run, "orders", "approved", "k1", 400, 77, 7);
  ASSERT_TRUE(by_key && by_key->has_value());
  EXPECT_EQ((*by_key)->id, *keyed);
  EXPECT_EQ((*by_key)->run_id, run);
  auto taken_twice = runs.TakeRunEvent(run, "orders", "approved", "k1", 400, 77, 8);
  ASSERT_TRUE(taken_twice);
  EXPECT_FALSE(taken_twice->has_value());
  EXPECT_EQ(*runs.CountPendingKeyedEvents("orders"), 0u);

  auto dropped = runs.DropExpiredEvents(400, 10);
  ASSERT_TRUE(dropped) << dropped.error().message;
  EXPECT_EQ(*dropped, 1u) << "only the undelivered, expired one";
  EXPECT_EQ(*runs.DropExpiredEvents(400, 10), 0u);
  ASSERT_TRUE(store_->Commit());

  auto listed = runs.RunEvents(run, 10);
  ASSERT_TRUE(listed) << listed.error().message;
  ASSERT_EQ(listed->size(), 3u);
  EXPECT_EQ((*listed)[0].id, *to_run);
  EXPECT_EQ((*listed)[0].delivered_call, 5);
  EXPECT_EQ((*listed)[1].id, *keyed);
  EXPECT_EQ((*listed)[1].event_key, "k1");
  EXPECT_EQ((*listed)[1].delivered_call, 7);
  EXPECT_EQ((*listed)[2].id, *other_name);
  EXPECT_EQ((*listed)[2].name, "shipped");
  EXPECT_FALSE((*listed)[2].delivered_unix_us.has_value());
  EXPECT_EQ(*runs.CountPendingEvents(run), 1u);
  EXPECT_EQ(runs.RunEvents(run, 1)->size(), 1u);
  EXPECT_TRUE(runs.RunEvents(run, 0)->empty());
}

TEST_P(StoreContract, ADeliveryMakesOneEventPerFlowAndIsFoundAgainAfterItsCommit) {
  RunStore& runs = store_->runs();
  const int64_t run = StartDurableRun(*store_, "orders");
  ASSERT_TRUE(run);
  ASSERT_TRUE(store_->Commit());
  NewRunEvent first = Event(0, "approved", "k1", R"({"n":1})", 10000);
  first.delivery_id = "event:hook:d1";
  // A delivery's event rolled back leaves nothing a retry would find.
  ASSERT_TRUE(runs.AddRunEvent(first));
  ASSERT_TRUE(store_->Rollback());
  auto gone = runs.RunEventOfDelivery("orders", "event:hook:d1");
  ASSERT_TRUE(gone) << gone.error().message;
  EXPECT_FALSE(gone->has_value());

  auto id = runs.AddRunEvent(first);
  ASSERT_TRUE(id) << id.error().message;
  // The same delivery again is refused, and the batch goes on (the first event is still in it).
  NewRunEvent again = first;
  again.payload_json = R"({"n":2})";
  auto twice = runs.AddRunEvent(again);
  ASSERT_FALSE(twice);
  EXPECT_EQ(twice.error().code, ErrorCode::kConflict) << twice.error().message;
  // Another flow, or no delivery id, is another event.
  NewRunEvent other_flow = first;
  other_flow.flow = "invoices";
  auto other = runs.AddRunEvent(other_flow);
  ASSERT_TRUE(other) << other.error().message;
  NewRunEvent plain = Event(0, "approved", "k1", "3", 10000);
  ASSERT_TRUE(runs.AddRunEvent(plain));
  ASSERT_TRUE(runs.AddRunEvent(plain)) << "events without a delivery id are never one another";
  ASSERT_TRUE(store_->Commit());

  EXPECT_EQ(*runs.RunEventOfDelivery("orders", "event:hook:d1"), std::optional<int64_t>(*id));
  EXPECT_EQ(*runs.RunEventOfDelivery("invoices", "event:hook:d1"), std::optional<int64_t>(*other));
  EXPECT_FALSE(runs.RunEventOfDelivery("orders", "event:hook:d2")->has_value());
  EXPECT_FALSE(runs.RunEventOfDelivery("orders", "")->has_value()) << "\"\" is no delivery";
  // Delivered, it is still the delivery's event: a late retry does not make a second one.
  auto taken = runs.TakeRunEvent(run, "orders", "approved", "k1", 200, 77, 5);
  ASSERT_TRUE(taken && taken->has_value());
  EXPECT_EQ((*taken)->id, *id);
  EXPECT_EQ((*taken)->payload_json, R"({"n":1})");
  ASSERT_TRUE(store_->Commit());
  EXPECT_EQ(*runs.RunEventOfDelivery("orders", "event:hook:d1"), std::optional<int64_t>(*id));
  auto late = runs.AddRunEvent(again);
  ASSERT_FALSE(late);
  EXPECT_EQ(late.error().code, ErrorCode::kConflict);
  ASSERT_TRUE(store_->Rollback());
}

TEST_P(StoreContract, AnActivationOfARetryKeepsWhereTheRetryStarts) {
  const int64_t run = StartDurableRun(*store_, "orders");
  ASSERT_TRUE(run);
  ActivationStart start = Start("orders", 2000, ThisProcessOwner());
  start.run_id = run;
  start.retry_from_call = 3;
  auto retry = journal().BeginActivation(start);
  ASSERT_TRUE(retry) << retry.error().message;
  ASSERT_TRUE(store_->Commit());
  auto rows = MustRead()->RunActivations(run);
  ASSERT_TRUE(rows) << rows.error().message;
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].retry_from_call, 0);
  EXPECT_EQ((*rows)[1].id, *retry);
  EXPECT_EQ((*rows)[1].retry_from_call, 3);
}

TEST_P(StoreContract, ApiTokensAreKeptByHashAndRevokedByName) {
  ServeTables& tables = store_->serve();
  auto ci = tables.AddToken("ci", "sha256:ci", R"(["runs:write"])", {1000, "alice"}, 5000);
  ASSERT_TRUE(ci) << ci.error().message;
  auto ops = tables.AddToken("ops", "sha256:ops", R"(["runs:read"])", {0, "root"}, 5100);
  ASSERT_TRUE(ops);
  EXPECT_NE(*ci, *ops);

  auto found = tables.FindToken("sha256:ci");
  ASSERT_TRUE(found) << found.error().message;
  ASSERT_TRUE(found->has_value());
  EXPECT_EQ((*found)->id, *ci);
  EXPECT_EQ((*found)->name, "ci");
  EXPECT_EQ((*found)->token_hash, "sha256:ci");
  EXPECT_EQ((*found)->scopes_json, R"(["runs:write"])");
  EXPECT_EQ((*found)->created_by.uid, 1000);
  EXPECT_EQ((*found)->created_by.name, "alice");
  EXPECT_EQ((*found)->created_unix_us, 5000);
  EXPECT_FALSE((*found)->revoked_unix_us.has_value());
  auto unknown = tables.FindToken("sha256:nobody");
  ASSERT_TRUE(unknown);
  EXPECT_FALSE(unknown->has_value());

  auto same_name = tables.AddToken("ci", "sha256:ci2", "[]", {0, "root"}, 5200);
  ASSERT_FALSE(same_name);
  EXPECT_EQ(same_name.error().code, ErrorCode::kConflict);
  EXPECT_NE(same_name.error().message.find("ci"), std::string::npos) << same_name.error().message;
  auto same_hash = tables.AddToken("ci2", "sha256:ci", "[]", {0, "root"}, 5200);
  ASSERT_FALSE(same_hash);
  EXPECT_EQ(same_hash.error().code, ErrorCode::kConflict);
  for (auto [name, hash] : {std::pair<const char*, const char*>{"", "sha256:x"}, {"x", ""}}) {
    auto empty = tables.AddToken(name, hash, "[]", {0, "root"}, 5200);
    ASSERT_FALSE(empty);
    EXPECT_EQ(empty.error().code, ErrorCode::kInvalidArgument);
  }

  ASSERT_TRUE(tables.RevokeToken("ci", {0, "root"}, 6000));
  auto revoked = tables.FindToken("sha256:ci");
  ASSERT_TRUE(revoked);
  EXPECT_FALSE(revoked->has_value()) << "a revoked token is not found";
  auto twice = tables.RevokeToken("ci", {0, "root"}, 6100);
  ASSERT_FALSE(twice);
  EXPECT_EQ(twice.error().code, ErrorCode::kNotFound);
  auto nobody = tables.RevokeToken("nobody", {0, "root"}, 6100);
  ASSERT_FALSE(nobody);
  EXPECT_EQ(nobody.error().code, ErrorCode::kNotFound);
  // The name is free again once revoked; the revoked token's hash is not.
  auto reissued = tables.AddToken("ci", "sha256:ci-new", "[]", {1000, "alice"}, 7000);
  ASSERT_TRUE(reissued) << reissued.error().message;
  auto old_hash = tables.AddToken("ci-old", "sha256:ci", "[]", {1000, "alice"}, 7000);
  ASSERT_FALSE(old_hash);
  EXPECT_EQ(old_hash.error().code, ErrorCode::kConflict);
  ASSERT_TRUE(store_->Commit());

  auto other = MustRead();
  ASSERT_TRUE(other);
  for (JournalReader* reader : {&store_->reader(), other.get()}) {
    auto tokens = reader->ListTokens();
    ASSERT_TRUE(tokens) << tokens.error().message;
    ASSERT_EQ(tokens->size(), 3u);
    EXPECT_EQ((*tokens)[0].name, "ci");
    EXPECT_EQ((*tokens)[0].revoked_unix_us, std::optional<int64_t>(6000));
    EXPECT_EQ((*tokens)[0].revoked_by.name, "root");
    EXPECT_EQ((*tokens)[1].name, "ops");
    EXPECT_FALSE((*tokens)[1].revoked_unix_us.has_value());
    EXPECT_EQ((*tokens)[2].id, *reissued);
    EXPECT_EQ((*tokens)[2].token_hash, "sha256:ci-new");
  }
  auto from_store = store_->reader().ListTokens();
  ASSERT_TRUE(from_store);
  EXPECT_EQ(from_store->size(), 3u);
}

TEST_P(StoreContract, ScheduleMarksAreKeptPerTrigger) {
  ServeTables& tables = store_->serve();
  auto none = tables.ScheduleMark("nightly");
  ASSERT_TRUE(none) << none.error().message;
  EXPECT_FALSE(none->has_value());
  ASSERT_TRUE(tables.SetScheduleMark("nightly", 1'000'000));
  ASSERT_TRUE(tables.SetScheduleMark("hourly", 2'000'000));
  ASSERT_TRUE(tables.SetScheduleMark("nightly", 3'000'000));
  auto mark = tables.ScheduleMark("nightly");
  ASSERT_TRUE(mark);
  EXPECT_EQ(*mark, std::optional<int64_t>(3'000'000)) << "the batch's own write is read back";
  ASSERT_TRUE(store_->Commit());
  store_.reset();
  store_ = MustOpen();
  ASSERT_TRUE(store_);
  for (auto [trigger, want] : {std::pair<const char*, std::optional<int64_t>>{"nightly", 3'000'000},
                               {"hourly", 2'000'000},
                               {"Nightly", std::nullopt}}) {
    auto got = store_->serve().ScheduleMark(trigger);
    ASSERT_TRUE(got);
    EXPECT_EQ(*got, want) << trigger;
  }
}

// Four processes enqueue the same keys at once: every call answers (a new run or the existing
// one, never a constraint error), and each key names one run. The key is read under the write
// lock the insert then uses.
TEST_P(StoreContract, AnIdempotencyKeyNamesOneRunAcrossProcesses) {
  constexpr int kProcesses = 4, kKeys = 40;
  store_.reset();  // no connection (nor its thread) crosses the fork
  std::vector<pid_t> children;
  for (int i = 0; i < kProcesses; ++i) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      auto opened = instance_->Open();
      if (!opened) _exit(10);
      Store& store = **opened;
      for (int k = 0; k < kKeys; ++k) {
        auto e = store.runs().EnqueueRun(testing_support::Run("orders", "{}", "key-" + std::to_string(k), 1000));
        if (!e) _exit(11);
        if (!store.Commit()) _exit(12);
      }
      _exit(0);
    }
    children.push_back(child);
  }
  for (pid_t child : children) {
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  }
  store_ = MustOpen();
  ASSERT_TRUE(store_);
  auto count = store_->runs().CountRuns(RunState::kQueued);
  ASSERT_TRUE(count);
  EXPECT_EQ(*count, static_cast<size_t>(kKeys));
}

#ifdef BASAL_STORE_CONTRACT_POSTGRES
INSTANTIATE_TEST_SUITE_P(Postgres, StoreContract,
                         ::testing::Values(Backend{"postgres", [] { return std::make_unique<PostgresInstance>(); }}),
                         [](const ::testing::TestParamInfo<Backend>& info) { return info.param.name; });
#else
INSTANTIATE_TEST_SUITE_P(Sqlite, StoreContract,
                         ::testing::Values(Backend{"sqlite", [] { return std::make_unique<SqliteInstance>(); }}),
                         [](const ::testing::TestParamInfo<Backend>& info) { return info.param.name; });
#endif

}  // namespace
}  // namespace basal
