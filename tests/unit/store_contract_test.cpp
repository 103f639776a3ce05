// The store's contract (store.h), run against every backend: batches and what a reader sees,
// rollback, duplicates, the call-record lifecycle, leases, recovery of abandoned activations, and
// the kv store. A new backend adds one INSTANTIATE_TEST_SUITE_P line at the bottom and passes.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "basal/manifest.h"
#include "parent/store/owner.h"
#include "parent/store/sqlite/sqlite_store.h"
#include "parent/store/store.h"
#include "unit/store_test_support.h"

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

class StoreContract : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
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
  ASSERT_TRUE(journal().Commit());
  EXPECT_FALSE(journal().HasPendingBatch());
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
  ASSERT_TRUE(journal().Commit());
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
  ASSERT_TRUE(journal().Commit());
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
  ASSERT_TRUE(journal().Commit());
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
  EXPECT_FALSE(journal().HasPendingBatch());
  auto id = journal().BeginActivation(Start());
  ASSERT_TRUE(id);
  EXPECT_TRUE(journal().HasPendingBatch());
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
  EXPECT_TRUE(journal().Commit());  // no batch: a no-op
  auto a = journal().BeginActivation(Start("a.js"));
  auto b = journal().BeginActivation(Start("b.js"));
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(journal().RecordCall(Call(*a, 1)));
  ASSERT_TRUE(kv().Put("orders", "o-1", R"({"qty":3})"));
  ASSERT_TRUE(journal().EndActivation(End(*a)));
  ASSERT_TRUE(journal().Commit());
  EXPECT_FALSE(journal().HasPendingBatch());
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
  ASSERT_TRUE(journal().Commit());
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
  ASSERT_TRUE(journal().Commit());
  ASSERT_TRUE(kv().Put("orders", "o-9", "9"));
  ASSERT_TRUE(journal().RecordCall(Call(*id, 1)));
  ASSERT_TRUE(journal().Rollback());
  EXPECT_FALSE(journal().HasPendingBatch());
  auto gone = kv().Get("orders", "o-9");
  ASSERT_TRUE(gone);
  EXPECT_FALSE(gone->has_value());
  ASSERT_TRUE(kv().Put("orders", "o-9", "10"));
  ASSERT_TRUE(journal().RecordCall(Call(*id, 2)));
  ASSERT_TRUE(journal().Commit());
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
  ASSERT_TRUE(journal().Commit());  // intent before effect
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
  ASSERT_TRUE(journal().Commit());  // the failed updates changed nothing and broke no batch
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
  ASSERT_TRUE(journal().Commit());
  ASSERT_TRUE(journal().UpdateCall({*id, 1, CallState::kAbandoned, "\"late\"", "", 2500}));
  ASSERT_TRUE(journal().Commit());
  auto calls = store_->reader().Calls(*id);
  ASSERT_TRUE(calls);
  EXPECT_EQ((*calls)[0].state, CallState::kAbandoned);
  EXPECT_EQ((*calls)[0].result_json, "\"late\"");
  EXPECT_EQ((*calls)[0].end_unix_us, std::optional<int64_t>(2500));  // when the answer came
  auto answered = journal().UpdateCall({*id, 1, CallState::kAnswered, "1", "", 3000});
  EXPECT_FALSE(answered);  // abandoned never becomes answered
  (void)journal().Rollback();
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
  ASSERT_TRUE(journal().HasPendingBatch());

  auto report = journal().RecoverAbandoned(self, now);
  ASSERT_TRUE(report) << report.error().message;
  EXPECT_FALSE(journal().HasPendingBatch());
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
  ASSERT_TRUE(journal().Commit());
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
  EXPECT_FALSE(journal().HasPendingBatch());  // reads do not open a batch
  ASSERT_TRUE(kv().Put("orders", "o-1", R"({"qty":1})"));
  EXPECT_TRUE(journal().HasPendingBatch());
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
  ASSERT_TRUE(journal().Commit());

  auto deleted = kv().Delete("orders", "o-1");
  ASSERT_TRUE(deleted);
  EXPECT_TRUE(*deleted);
  auto again = kv().Delete("orders", "o-1");
  ASSERT_TRUE(again);
  EXPECT_FALSE(*again);
  got = kv().Get("orders", "o-1");
  ASSERT_TRUE(got);
  EXPECT_FALSE(got->has_value());
  ASSERT_TRUE(journal().Rollback());  // the delete was in the batch: undone
  got = kv().Get("orders", "o-1");
  ASSERT_TRUE(got && got->has_value());
  ASSERT_TRUE(kv().Delete("orders", "o-1"));
  ASSERT_TRUE(journal().Commit());
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
  ASSERT_TRUE(journal().Commit());
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
  ASSERT_TRUE(journal().Rollback());  // the delete was in the open batch
  EXPECT_EQ(usage("u").keys, 2u);
  EXPECT_EQ(usage("other").keys, 0u);
}

// ---- Approvals (Catalog, and JournalReader's reads of it) ----------------------------------

NewApproval FlowApproval(const std::string& name, const std::string& source, int64_t reviewed, int64_t at = 5000) {
  NewApproval a;
  a.kind = ApprovalKind::kFlow;
  a.name = name;
  a.source = source;
  a.manifest_text = R"({"grants": {}})";
  a.manifest_hash = "sha256:canonical";
  a.approver = {1000, "alice"};
  a.at_unix_us = at;
  a.note = "first review";
  a.reviewed_version = reviewed;
  a.review_json = R"({"first": true})";
  return a;
}

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
  EXPECT_FALSE(journal().HasPendingBatch()) << "an approval commits on its own";

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
  ASSERT_TRUE(journal().Commit());
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

INSTANTIATE_TEST_SUITE_P(Sqlite, StoreContract,
                         ::testing::Values(Backend{"sqlite", [] { return std::make_unique<SqliteInstance>(); }}),
                         [](const ::testing::TestParamInfo<Backend>& info) { return info.param.name; });

}  // namespace
}  // namespace basal
