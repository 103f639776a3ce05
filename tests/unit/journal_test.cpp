// Unit tests of the journal and kv store: durability across reopen, batch visibility to other
// connections (read with raw sqlite3), kv prefix semantics, the settings in force, refusal of
// foreign files, and recovery after a commit that the disk refused (fault-injecting VFS).
#include "parent/journal.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

namespace basal {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "basal_journal_test.XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) std::abort();
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string File(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

// A second, independent connection, as another process (or `sqlite3 journal.db`) would see it.
class RawDb {
 public:
  explicit RawDb(const std::string& path) {
    if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) != SQLITE_OK) {
      ADD_FAILURE() << "raw open of " << path << " failed";
    }
  }
  ~RawDb() { sqlite3_close_v2(db_); }
  int64_t Int(const std::string& sql) {
    sqlite3_stmt* s = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db_, sql.c_str(), -1, &s, nullptr), SQLITE_OK) << sqlite3_errmsg(db_);
    EXPECT_EQ(sqlite3_step(s), SQLITE_ROW) << sql << ": " << sqlite3_errmsg(db_);
    int64_t v = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    return v;
  }
  std::string Text(const std::string& sql) {
    sqlite3_stmt* s = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db_, sql.c_str(), -1, &s, nullptr), SQLITE_OK) << sqlite3_errmsg(db_);
    EXPECT_EQ(sqlite3_step(s), SQLITE_ROW) << sql << ": " << sqlite3_errmsg(db_);
    const char* t = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
    std::string v = t ? t : "";
    sqlite3_finalize(s);
    return v;
  }
  void Exec(const std::string& sql) {
    EXPECT_EQ(sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db_);
  }

 private:
  sqlite3* db_ = nullptr;
};

std::unique_ptr<Journal> MustOpen(const std::string& path, Durability d = Durability::kNormal) {
  auto j = Journal::Open(path, d);
  if (!j) {
    ADD_FAILURE() << j.error().message;
    return nullptr;
  }
  return std::move(*j);
}

ActivationStart Start(const std::string& flow = "hello.js", int64_t at = 1000) {
  return ActivationStart{flow, "sha256:aa", "sha256:bb", R"({"n":1})", at};
}

CallRecord Call(int64_t activation, int64_t call_id, bool allowed = true) {
  CallRecord c;
  c.activation_id = activation;
  c.call_id = call_id;
  c.name = "kv.get";
  c.args_json = R"({"namespace":"orders","key":"k)" + std::to_string(call_id) + "\"}";
  c.allowed = allowed;
  c.reason = allowed ? "granted by manifest" : "kv.get is not granted for namespace orders";
  if (allowed) {
    c.result_json = "null";
  } else {
    c.error_json = R"({"name":"PermissionDenied","message":"denied"})";
  }
  c.start_unix_us = 1100 + call_id;
  c.end_unix_us = 1200 + call_id;
  return c;
}

TEST(DurabilityTest, NamesAndParse) {
  EXPECT_STREQ(DurabilityName(Durability::kNormal), "normal");
  EXPECT_STREQ(DurabilityName(Durability::kFull), "full");
  auto n = ParseDurability("normal");
  ASSERT_TRUE(n);
  EXPECT_EQ(*n, Durability::kNormal);
  auto f = ParseDurability("full");
  ASSERT_TRUE(f);
  EXPECT_EQ(*f, Durability::kFull);
  for (const char* bad : {"fast", "", "FULL", "normal "}) {
    auto r = ParseDurability(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(r.error().message.find("\"" + std::string(bad) + "\""), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find("\"normal\""), std::string::npos);
    EXPECT_NE(r.error().message.find("\"full\""), std::string::npos);
  }
}

TEST(JournalTest, RoundTripAcrossReopen) {
  TempDir dir;
  const std::string db = dir.File("j.db");
  int64_t id = 0;
  {
    auto j = MustOpen(db);
    ASSERT_TRUE(j);
    EXPECT_EQ(j->path(), db);
    auto started = j->BeginActivation(Start());
    ASSERT_TRUE(started) << started.error().message;
    id = *started;
    // Recorded out of call-id order (results may come back in any order): record order is kept.
    ASSERT_TRUE(j->RecordCall(Call(id, 2, true)));
    ASSERT_TRUE(j->RecordCall(Call(id, 1, false)));
    ActivationEnd end{id, 5000, "ok", R"({"answer":42})", "", 321};
    ASSERT_TRUE(j->EndActivation(end));
    ASSERT_TRUE(j->Commit());
    EXPECT_FALSE(j->HasPendingBatch());
  }
  auto j = MustOpen(db);
  ASSERT_TRUE(j);
  auto rows = j->Activations(std::nullopt, 10);
  ASSERT_TRUE(rows) << rows.error().message;
  ASSERT_EQ(rows->size(), 1u);
  const ActivationRow& a = (*rows)[0];
  EXPECT_EQ(a.id, id);
  EXPECT_EQ(a.flow, "hello.js");
  EXPECT_EQ(a.source_hash, "sha256:aa");
  EXPECT_EQ(a.manifest_hash, "sha256:bb");
  EXPECT_EQ(a.input_json, R"({"n":1})");
  EXPECT_EQ(a.start_unix_us, 1000);
  ASSERT_TRUE(a.end_unix_us.has_value());
  EXPECT_EQ(*a.end_unix_us, 5000);
  EXPECT_EQ(a.outcome, "ok");
  EXPECT_EQ(a.result_json, R"({"answer":42})");
  EXPECT_EQ(a.error_json, "");
  EXPECT_EQ(a.cpu_us, 321);

  auto calls = j->Calls(id);
  ASSERT_TRUE(calls) << calls.error().message;
  ASSERT_EQ(calls->size(), 2u);
  EXPECT_EQ((*calls)[0].call_id, 2);
  EXPECT_TRUE((*calls)[0].allowed);
  EXPECT_EQ((*calls)[0].reason, "granted by manifest");
  EXPECT_EQ((*calls)[0].result_json, "null");
  EXPECT_EQ((*calls)[0].error_json, "");
  EXPECT_EQ((*calls)[0].args_json, R"({"namespace":"orders","key":"k2"})");
  EXPECT_EQ((*calls)[0].start_unix_us, 1102);
  EXPECT_EQ((*calls)[0].end_unix_us, 1202);
  EXPECT_EQ((*calls)[1].call_id, 1);
  EXPECT_EQ((*calls)[1].activation_id, id);
  EXPECT_EQ((*calls)[1].name, "kv.get");
  EXPECT_FALSE((*calls)[1].allowed);
  EXPECT_EQ((*calls)[1].reason, "kv.get is not granted for namespace orders");
  EXPECT_EQ((*calls)[1].result_json, "");
  EXPECT_EQ((*calls)[1].error_json, R"({"name":"PermissionDenied","message":"denied"})");

  auto one = j->Activations(id, 0);
  ASSERT_TRUE(one);
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].id, id);
}

TEST(JournalTest, UnfinishedActivationReadsAsUnfinished) {
  TempDir dir;
  auto j = MustOpen(dir.File("j.db"));
  ASSERT_TRUE(j);
  auto id = j->BeginActivation(Start());
  ASSERT_TRUE(id);
  ASSERT_TRUE(j->Commit());
  auto rows = j->Activations(*id, 1);
  ASSERT_TRUE(rows);
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_FALSE((*rows)[0].end_unix_us.has_value());
  EXPECT_EQ((*rows)[0].outcome, "");
  EXPECT_EQ((*rows)[0].cpu_us, 0);
}

TEST(JournalTest, ActivationsNewestLastWithLimit) {
  TempDir dir;
  auto j = MustOpen(dir.File("j.db"));
  ASSERT_TRUE(j);
  std::vector<int64_t> ids;
  for (int i = 0; i < 5; ++i) {
    auto id = j->BeginActivation(Start("f" + std::to_string(i) + ".js", i));
    ASSERT_TRUE(id);
    ids.push_back(*id);
  }
  ASSERT_TRUE(j->Commit());
  auto last2 = j->Activations(std::nullopt, 2);
  ASSERT_TRUE(last2);
  ASSERT_EQ(last2->size(), 2u);
  EXPECT_EQ((*last2)[0].id, ids[3]);
  EXPECT_EQ((*last2)[1].id, ids[4]);
  EXPECT_EQ((*last2)[1].flow, "f4.js");
  auto all = j->Activations(std::nullopt, SIZE_MAX);
  ASSERT_TRUE(all);
  EXPECT_EQ(all->size(), 5u);
  auto none = j->Activations(std::nullopt, 0);
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty());
  auto missing = j->Activations(ids.back() + 100, 10);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  EXPECT_NE(missing.error().message.find(std::to_string(ids.back() + 100)), std::string::npos);
}

TEST(JournalTest, UncommittedBatchIsInvisibleAndRolledBackOnDestruction) {
  TempDir dir;
  const std::string db = dir.File("j.db");
  {
    auto j = MustOpen(db);
    ASSERT_TRUE(j);
    EXPECT_FALSE(j->HasPendingBatch());
    auto id = j->BeginActivation(Start());
    ASSERT_TRUE(id);
    EXPECT_TRUE(j->HasPendingBatch());
    ASSERT_TRUE(j->RecordCall(Call(*id, 1)));
    ASSERT_TRUE(j->KvPut("orders", "o-1", "1"));
    // The journal's own connection sees its batch...
    auto own = j->Activations(std::nullopt, 10);
    ASSERT_TRUE(own);
    EXPECT_EQ(own->size(), 1u);
    // ...another connection does not.
    RawDb raw(db);
    EXPECT_EQ(raw.Int("SELECT count(*) FROM activations"), 0);
    EXPECT_EQ(raw.Int("SELECT count(*) FROM calls"), 0);
    EXPECT_EQ(raw.Int("SELECT count(*) FROM kv"), 0);
  }
  RawDb raw(db);
  EXPECT_EQ(raw.Int("SELECT count(*) FROM activations"), 0);
  EXPECT_EQ(raw.Int("SELECT count(*) FROM calls"), 0);
  EXPECT_EQ(raw.Int("SELECT count(*) FROM kv"), 0);
  auto j = MustOpen(db);
  ASSERT_TRUE(j);
  auto rows = j->Activations(std::nullopt, 10);
  ASSERT_TRUE(rows);
  EXPECT_TRUE(rows->empty());
  auto v = j->KvGet("orders", "o-1");
  ASSERT_TRUE(v);
  EXPECT_FALSE(v->has_value());
}

TEST(JournalTest, CommittedBatchIsVisibleToAnotherConnection) {
  TempDir dir;
  const std::string db = dir.File("j.db");
  auto j = MustOpen(db);
  ASSERT_TRUE(j);
  EXPECT_TRUE(j->Commit());  // no batch: a no-op
  auto a = j->BeginActivation(Start("a.js"));
  auto b = j->BeginActivation(Start("b.js"));
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(j->RecordCall(Call(*a, 1)));
  ASSERT_TRUE(j->KvPut("orders", "o-1", R"({"qty":3})"));
  ASSERT_TRUE(j->EndActivation({*a, 9, "ok", "true", "", 0}));
  ASSERT_TRUE(j->Commit());
  EXPECT_FALSE(j->HasPendingBatch());
  RawDb raw(db);
  EXPECT_EQ(raw.Int("SELECT count(*) FROM activations"), 2);
  EXPECT_EQ(raw.Text("SELECT outcome FROM activations WHERE id=" + std::to_string(*a)), "ok");
  EXPECT_EQ(raw.Int("SELECT count(*) FROM activations WHERE outcome IS NULL"), 1);
  EXPECT_EQ(raw.Int("SELECT count(*) FROM calls WHERE activation_id=" + std::to_string(*a)), 1);
  EXPECT_EQ(raw.Int("SELECT count(*) FROM calls WHERE error IS NULL"), 1);  // "" is stored as NULL
  EXPECT_EQ(raw.Text("SELECT value FROM kv WHERE namespace='orders' AND key='o-1'"), R"({"qty":3})");
  EXPECT_EQ(raw.Int("SELECT json_extract(value, '$.qty') FROM kv"), 3);
}

// Checkpoints run off the owner's thread (docs/journal.md): through many commits, with another
// connection reading now and then, nothing is lost and the WAL stays bounded (it starts over).
TEST(JournalTest, ManyCommitsAreCheckpointedAndTheWalStaysBounded) {
  TempDir dir;
  const std::string db = dir.File("j.db");
  constexpr int kCommits = 6000;
  {
    auto j = MustOpen(db);
    ASSERT_TRUE(j);
    RawDb raw(db);
    for (int i = 0; i < kCommits; ++i) {
      auto a = j->BeginActivation(Start("a.js"));
      ASSERT_TRUE(a);
      ASSERT_TRUE(j->Commit());
      ASSERT_TRUE(j->EndActivation({*a, 9, "ok", "1", "", 0}));
      ASSERT_TRUE(j->Commit());
      if (i % 1000 == 999) {
        EXPECT_EQ(raw.Int("SELECT count(*) FROM activations WHERE outcome='ok'"), i + 1);
      }
    }
    std::error_code ec;
    const auto wal_bytes = fs::file_size(db + "-wal", ec);
    ASSERT_FALSE(ec);
    EXPECT_LE(wal_bytes, static_cast<uintmax_t>(Journal::kWalHardLimitPages + 64) * (4096 + 24));
  }
  RawDb raw(db);
  EXPECT_EQ(raw.Int("SELECT count(*) FROM activations WHERE outcome='ok'"), kCommits);
}

TEST(JournalTest, CallAndEndErrorsLeaveTheBatchUsable) {
  TempDir dir;
  const std::string db = dir.File("j.db");
  auto j = MustOpen(db);
  ASSERT_TRUE(j);
  auto id = j->BeginActivation(Start());
  ASSERT_TRUE(id);
  ASSERT_TRUE(j->RecordCall(Call(*id, 7)));
  auto dup = j->RecordCall(Call(*id, 7));
  ASSERT_FALSE(dup);
  EXPECT_EQ(dup.error().code, ErrorCode::kDatabase);
  EXPECT_NE(dup.error().message.find("call id 7"), std::string::npos) << dup.error().message;
  EXPECT_NE(dup.error().message.find("SQLITE_CONSTRAINT"), std::string::npos) << dup.error().message;
  auto orphan = j->RecordCall(Call(*id + 1000, 1));
  ASSERT_FALSE(orphan);  // foreign key: a call of an activation that was never begun
  CallRecord no_reason = Call(*id, 8);
  no_reason.reason.clear();
  EXPECT_FALSE(j->RecordCall(no_reason));
  auto unknown_end = j->EndActivation({*id + 1000, 1, "ok", "1", "", 0});
  ASSERT_FALSE(unknown_end);
  EXPECT_EQ(unknown_end.error().code, ErrorCode::kNotFound);
  ASSERT_TRUE(j->EndActivation({*id, 1, "script_error", "", R"({"kind":"script_error","message":"x"})", 0}));
  auto twice = j->EndActivation({*id, 2, "ok", "1", "", 0});
  ASSERT_FALSE(twice);
  EXPECT_EQ(twice.error().code, ErrorCode::kNotFound);
  ASSERT_TRUE(j->Commit());
  RawDb raw(db);
  EXPECT_EQ(raw.Int("SELECT count(*) FROM calls"), 1);
  EXPECT_EQ(raw.Text("SELECT outcome FROM activations"), "script_error");
  EXPECT_EQ(raw.Int("SELECT end_us FROM activations"), 1);
}

TEST(KvTest, GetPutDelete) {
  TempDir dir;
  const std::string db = dir.File("j.db");
  auto j = MustOpen(db);
  ASSERT_TRUE(j);
  auto missing = j->KvGet("orders", "o-1");
  ASSERT_TRUE(missing);
  EXPECT_FALSE(missing->has_value());
  EXPECT_FALSE(j->HasPendingBatch());  // reads do not open a batch
  ASSERT_TRUE(j->KvPut("orders", "o-1", R"({"qty":1})"));
  auto got = j->KvGet("orders", "o-1");  // the batch's own uncommitted write
  ASSERT_TRUE(got);
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ(**got, R"({"qty":1})");
  ASSERT_TRUE(j->KvPut("orders", "o-1", "[1,2]"));  // overwrite
  got = j->KvGet("orders", "o-1");
  ASSERT_TRUE(got && got->has_value());
  EXPECT_EQ(**got, "[1,2]");
  auto other_ns = j->KvGet("users", "o-1");  // namespaces are separate
  ASSERT_TRUE(other_ns);
  EXPECT_FALSE(other_ns->has_value());
  ASSERT_TRUE(j->Commit());

  auto deleted = j->KvDelete("orders", "o-1");
  ASSERT_TRUE(deleted);
  EXPECT_TRUE(*deleted);
  auto again = j->KvDelete("orders", "o-1");
  ASSERT_TRUE(again);
  EXPECT_FALSE(*again);
  got = j->KvGet("orders", "o-1");
  ASSERT_TRUE(got);
  EXPECT_FALSE(got->has_value());
  {
    RawDb raw(db);  // the delete is not committed yet
    EXPECT_EQ(raw.Int("SELECT count(*) FROM kv"), 1);
  }
  ASSERT_TRUE(j->Commit());
  RawDb raw(db);
  EXPECT_EQ(raw.Int("SELECT count(*) FROM kv"), 0);
}

TEST(KvTest, BinaryKeysRoundTrip) {
  TempDir dir;
  auto j = MustOpen(dir.File("j.db"));
  ASSERT_TRUE(j);
  const std::string key("a\0b\xff", 4);
  ASSERT_TRUE(j->KvPut("ns", key, "\"v\""));
  auto got = j->KvGet("ns", key);
  ASSERT_TRUE(got && got->has_value());
  EXPECT_EQ(**got, "\"v\"");
  auto shorter = j->KvGet("ns", std::string("a", 1));
  ASSERT_TRUE(shorter);
  EXPECT_FALSE(shorter->has_value());
}

std::vector<std::string> Keys(const Result<std::vector<KvEntry>>& r) {
  std::vector<std::string> keys;
  if (!r) {
    ADD_FAILURE() << r.error().message;
    return keys;
  }
  for (const KvEntry& e : *r) keys.push_back(e.key);
  return keys;
}

TEST(KvTest, ListPrefixIsExactBytes) {
  TempDir dir;
  auto j = MustOpen(dir.File("j.db"));
  ASSERT_TRUE(j);
  const std::string ff = "\xff";
  const std::vector<std::string> keys = {
      "a",  "a%", "a%b", "a_",      "a_b",     "ab",      "abc", "aXb", "b",
      ff,   ff + ff, ff + "a", "a" + ff, "a" + ff + "z", "a" + ff + ff, "",
  };
  for (const std::string& k : keys) ASSERT_TRUE(j->KvPut("ns", k, "\"" + std::to_string(k.size()) + "\""));
  ASSERT_TRUE(j->KvPut("other", "a%", "0"));  // another namespace never leaks in

  using V = std::vector<std::string>;
  EXPECT_EQ(Keys(j->KvList("ns", "a%", 100)), (V{"a%", "a%b"}));
  EXPECT_EQ(Keys(j->KvList("ns", "a_", 100)), (V{"a_", "a_b"}));
  EXPECT_EQ(Keys(j->KvList("ns", "ab", 100)), (V{"ab", "abc"}));
  EXPECT_EQ(Keys(j->KvList("ns", ff, 100)), (V{ff, ff + "a", ff + ff}));
  EXPECT_EQ(Keys(j->KvList("ns", ff + ff, 100)), (V{ff + ff}));
  EXPECT_EQ(Keys(j->KvList("ns", "a" + ff, 100)), (V{"a" + ff, "a" + ff + "z", "a" + ff + ff}));
  EXPECT_EQ(Keys(j->KvList("ns", "zzz", 100)), V{});
  EXPECT_EQ(Keys(j->KvList("nobody", "", 100)), V{});

  // Empty prefix: everything, in byte order ("" first, 0xFF keys last).
  V all = Keys(j->KvList("ns", "", 100));
  V sorted = keys;
  std::sort(sorted.begin(), sorted.end());  // std::string compares as unsigned bytes (char_traits)
  EXPECT_EQ(all, sorted);
  ASSERT_EQ(all.size(), keys.size());
  EXPECT_EQ(all.front(), "");
  EXPECT_EQ(all.back(), ff + ff);

  // limit
  EXPECT_EQ(Keys(j->KvList("ns", "a", 3)), (V{"a", "a%", "a%b"}));
  EXPECT_EQ(Keys(j->KvList("ns", "", 1)), (V{""}));
  EXPECT_EQ(Keys(j->KvList("ns", "", 0)), V{});
  EXPECT_EQ(Keys(j->KvList("ns", "", SIZE_MAX)).size(), keys.size());

  auto with_values = j->KvList("ns", "abc", 10);
  ASSERT_TRUE(with_values);
  ASSERT_EQ(with_values->size(), 1u);
  EXPECT_EQ((*with_values)[0].value_json, "\"3\"");
}

TEST(KvTest, KvWriteAndItsCallEntryCommitTogether) {
  TempDir dir;
  const std::string db = dir.File("j.db");
  {
    auto j = MustOpen(db);
    ASSERT_TRUE(j);
    auto id = j->BeginActivation(Start());
    ASSERT_TRUE(id);
    ASSERT_TRUE(j->Commit());
    ASSERT_TRUE(j->KvPut("orders", "o-9", "9"));
    ASSERT_TRUE(j->RecordCall(Call(*id, 1)));
    ASSERT_TRUE(j->Rollback());
    EXPECT_FALSE(j->HasPendingBatch());
    auto gone = j->KvGet("orders", "o-9");
    ASSERT_TRUE(gone);
    EXPECT_FALSE(gone->has_value());
    ASSERT_TRUE(j->KvPut("orders", "o-9", "10"));
    ASSERT_TRUE(j->RecordCall(Call(*id, 2)));
    ASSERT_TRUE(j->Commit());
  }
  RawDb raw(db);
  EXPECT_EQ(raw.Int("SELECT count(*) FROM calls"), 1);
  EXPECT_EQ(raw.Int("SELECT call_id FROM calls"), 2);
  EXPECT_EQ(raw.Text("SELECT value FROM kv"), "10");
}

TEST(JournalTest, WalAndSynchronousAreInForce) {
  TempDir dir;
  for (Durability d : {Durability::kNormal, Durability::kFull}) {
    const std::string db = dir.File(std::string(DurabilityName(d)) + ".db");
    auto j = MustOpen(db, d);
    ASSERT_TRUE(j);
    auto s = j->Settings();
    ASSERT_TRUE(s) << s.error().message;
    EXPECT_EQ(s->journal_mode, "wal");
    EXPECT_EQ(s->synchronous, d == Durability::kFull ? 2 : 1) << DurabilityName(d);
    EXPECT_EQ(s->busy_timeout_ms, Journal::kBusyTimeoutMs);
    EXPECT_EQ(s->schema_version, Journal::kSchemaVersion);
    EXPECT_TRUE(s->foreign_keys);
    RawDb raw(db);  // WAL is a property of the file, visible to every connection
    EXPECT_EQ(raw.Text("PRAGMA journal_mode"), "wal");
    EXPECT_EQ(raw.Int("PRAGMA user_version"), Journal::kSchemaVersion);
    EXPECT_EQ(raw.Int("PRAGMA application_id"), Journal::kApplicationId);
  }
}

TEST(JournalOpenTest, ForeignSqliteFileIsRefusedAndLeftUnchanged) {
  TempDir dir;
  const std::string db = dir.File("other.db");
  {
    RawDb raw(db);
    raw.Exec("CREATE TABLE invoices(id INTEGER PRIMARY KEY)");
  }
  auto j = Journal::Open(db, Durability::kNormal);
  ASSERT_FALSE(j);
  EXPECT_EQ(j.error().code, ErrorCode::kDatabase);
  EXPECT_NE(j.error().message.find(db), std::string::npos) << j.error().message;
  EXPECT_NE(j.error().message.find("not a basal journal"), std::string::npos) << j.error().message;
  RawDb raw(db);
  EXPECT_EQ(raw.Text("PRAGMA journal_mode"), "delete");
  EXPECT_EQ(raw.Int("SELECT count(*) FROM sqlite_master"), 1);
}

TEST(JournalOpenTest, GarbageFileIsRefused) {
  TempDir dir;
  const std::string db = dir.File("garbage.db");
  {
    std::ofstream out(db, std::ios::binary);
    for (int i = 0; i < 512; ++i) out << "this is not a database. ";
  }
  auto j = Journal::Open(db, Durability::kNormal);
  ASSERT_FALSE(j);
  EXPECT_EQ(j.error().code, ErrorCode::kDatabase);
  EXPECT_NE(j.error().message.find(db), std::string::npos) << j.error().message;
  EXPECT_NE(j.error().message.find("not an SQLite database"), std::string::npos) << j.error().message;
  EXPECT_NE(j.error().message.find("SQLITE_NOTADB"), std::string::npos) << j.error().message;
}

TEST(JournalOpenTest, NewerSchemaIsRefused) {
  TempDir dir;
  const std::string db = dir.File("j.db");
  ASSERT_TRUE(MustOpen(db));
  {
    RawDb raw(db);
    raw.Exec("PRAGMA user_version=" + std::to_string(Journal::kSchemaVersion + 1));
  }
  auto j = Journal::Open(db, Durability::kNormal);
  ASSERT_FALSE(j);
  EXPECT_NE(j.error().message.find("newer basal"), std::string::npos) << j.error().message;
  EXPECT_NE(j.error().message.find("schema version " + std::to_string(Journal::kSchemaVersion + 1)),
            std::string::npos)
      << j.error().message;
}

TEST(JournalOpenTest, EmptyExistingFileBecomesAJournal) {
  TempDir dir;
  const std::string db = dir.File("empty.db");
  { std::ofstream out(db); }
  auto j = MustOpen(db);
  ASSERT_TRUE(j);
  EXPECT_TRUE(j->BeginActivation(Start()));
  EXPECT_TRUE(j->Commit());
}

TEST(JournalOpenTest, MissingDirectoryIsAClearError) {
  TempDir dir;
  const std::string missing = dir.File("no/such/dir");
  const std::string db = missing + "/j.db";
  auto j = Journal::Open(db, Durability::kNormal);
  ASSERT_FALSE(j);
  EXPECT_EQ(j.error().code, ErrorCode::kIo);
  EXPECT_NE(j.error().message.find("journal " + db + ": cannot open"), std::string::npos) << j.error().message;
  EXPECT_NE(j.error().message.find("SQLITE_CANTOPEN"), std::string::npos) << j.error().message;
  EXPECT_NE(j.error().message.find("directory " + missing + " does not exist"), std::string::npos)
      << j.error().message;
  EXPECT_FALSE(fs::exists(missing));
}

// --- A VFS that fails writes to the WAL file on demand, to make a commit fail for real. ---

std::atomic<bool> g_fail_wal_writes{false};
sqlite3_vfs* g_real_vfs = nullptr;

struct FaultyFile {
  sqlite3_file base;
  bool is_wal;
  sqlite3_file* real() { return reinterpret_cast<sqlite3_file*>(this + 1); }
};
FaultyFile* F(sqlite3_file* f) { return reinterpret_cast<FaultyFile*>(f); }

int FClose(sqlite3_file* f) { return F(f)->real()->pMethods->xClose(F(f)->real()); }
int FRead(sqlite3_file* f, void* b, int n, sqlite3_int64 o) { return F(f)->real()->pMethods->xRead(F(f)->real(), b, n, o); }
int FWrite(sqlite3_file* f, const void* b, int n, sqlite3_int64 o) {
  if (F(f)->is_wal && g_fail_wal_writes) return SQLITE_IOERR_WRITE;
  return F(f)->real()->pMethods->xWrite(F(f)->real(), b, n, o);
}
int FTruncate(sqlite3_file* f, sqlite3_int64 s) { return F(f)->real()->pMethods->xTruncate(F(f)->real(), s); }
int FSync(sqlite3_file* f, int fl) { return F(f)->real()->pMethods->xSync(F(f)->real(), fl); }
int FFileSize(sqlite3_file* f, sqlite3_int64* s) { return F(f)->real()->pMethods->xFileSize(F(f)->real(), s); }
int FLock(sqlite3_file* f, int l) { return F(f)->real()->pMethods->xLock(F(f)->real(), l); }
int FUnlock(sqlite3_file* f, int l) { return F(f)->real()->pMethods->xUnlock(F(f)->real(), l); }
int FCheckReserved(sqlite3_file* f, int* r) { return F(f)->real()->pMethods->xCheckReservedLock(F(f)->real(), r); }
int FFileControl(sqlite3_file* f, int op, void* a) { return F(f)->real()->pMethods->xFileControl(F(f)->real(), op, a); }
int FSectorSize(sqlite3_file* f) { return F(f)->real()->pMethods->xSectorSize(F(f)->real()); }
int FDevChar(sqlite3_file* f) { return F(f)->real()->pMethods->xDeviceCharacteristics(F(f)->real()); }
int FShmMap(sqlite3_file* f, int i, int sz, int e, void volatile** p) { return F(f)->real()->pMethods->xShmMap(F(f)->real(), i, sz, e, p); }
int FShmLock(sqlite3_file* f, int o, int n, int fl) { return F(f)->real()->pMethods->xShmLock(F(f)->real(), o, n, fl); }
void FShmBarrier(sqlite3_file* f) { F(f)->real()->pMethods->xShmBarrier(F(f)->real()); }
int FShmUnmap(sqlite3_file* f, int d) { return F(f)->real()->pMethods->xShmUnmap(F(f)->real(), d); }
int FFetch(sqlite3_file* f, sqlite3_int64 o, int n, void** p) { return F(f)->real()->pMethods->xFetch(F(f)->real(), o, n, p); }
int FUnfetch(sqlite3_file* f, sqlite3_int64 o, void* p) { return F(f)->real()->pMethods->xUnfetch(F(f)->real(), o, p); }

const sqlite3_io_methods kFaultyMethods = {
    3, FClose, FRead, FWrite, FTruncate, FSync, FFileSize, FLock, FUnlock, FCheckReserved, FFileControl,
    FSectorSize, FDevChar, FShmMap, FShmLock, FShmBarrier, FShmUnmap, FFetch, FUnfetch,
};

int FOpen(sqlite3_vfs*, sqlite3_filename name, sqlite3_file* file, int flags, int* out_flags) {
  FaultyFile* ff = F(file);
  ff->is_wal = (flags & SQLITE_OPEN_WAL) != 0;
  int rc = g_real_vfs->xOpen(g_real_vfs, name, ff->real(), flags, out_flags);
  ff->base.pMethods = ff->real()->pMethods != nullptr ? &kFaultyMethods : nullptr;
  return rc;
}

class FaultyVfs {
 public:
  FaultyVfs() {
    g_real_vfs = sqlite3_vfs_find(nullptr);
    vfs_ = *g_real_vfs;
    vfs_.zName = "basal-faulty";
    vfs_.szOsFile = static_cast<int>(sizeof(FaultyFile)) + g_real_vfs->szOsFile;
    vfs_.xOpen = FOpen;
    if (vfs_.iVersion > 3) vfs_.iVersion = 3;
    sqlite3_vfs_register(&vfs_, /*makeDflt=*/1);  // Journal::Open uses the default VFS
  }
  ~FaultyVfs() {
    g_fail_wal_writes = false;
    sqlite3_vfs_unregister(&vfs_);
    sqlite3_vfs_register(g_real_vfs, 1);
  }

 private:
  sqlite3_vfs vfs_;
};

TEST(JournalTest, FailedCommitIsRecoverableByRollback) {
  static_assert(sizeof(FaultyFile) % 8 == 0, "the real file after FaultyFile must stay aligned");
  TempDir dir;
  const std::string db = dir.File("j.db");
  int64_t kept = 0;
  {
    FaultyVfs vfs;
    auto j = MustOpen(db);
    ASSERT_TRUE(j);
    auto first = j->BeginActivation(Start("kept.js"));
    ASSERT_TRUE(first);
    kept = *first;
    ASSERT_TRUE(j->Commit());

    auto lost = j->BeginActivation(Start("lost.js"));
    ASSERT_TRUE(lost);
    ASSERT_TRUE(j->KvPut("orders", "lost", "1"));
    g_fail_wal_writes = true;
    auto c = j->Commit();
    g_fail_wal_writes = false;
    ASSERT_FALSE(c) << "the injected WAL write failure did not reach Commit()";
    EXPECT_EQ(c.error().code, ErrorCode::kDatabase);
    EXPECT_NE(c.error().message.find("cannot commit"), std::string::npos) << c.error().message;
    EXPECT_NE(c.error().message.find("SQLITE_IOERR"), std::string::npos) << c.error().message;
    EXPECT_NE(c.error().message.find("Rollback()"), std::string::npos) << c.error().message;

    // SQLite may already have rolled the batch back; until Rollback() nothing may be written,
    // or it would commit on its own, outside any batch.
    auto stray = j->KvPut("orders", "stray", "1");
    EXPECT_FALSE(stray) << "a write between a failed Commit() and Rollback() was accepted";
    if (!stray) {
      EXPECT_NE(stray.error().message.find("Rollback()"), std::string::npos) << stray.error().message;
    }
    {
      RawDb raw(db);
      EXPECT_EQ(raw.Int("SELECT count(*) FROM kv"), 0);
    }

    ASSERT_TRUE(j->Rollback());
    EXPECT_FALSE(j->HasPendingBatch());
    auto gone = j->KvGet("orders", "lost");
    ASSERT_TRUE(gone) << gone.error().message;
    EXPECT_FALSE(gone->has_value());

    auto next = j->BeginActivation(Start("next.js"));
    ASSERT_TRUE(next) << next.error().message;
    ASSERT_TRUE(j->KvPut("orders", "next", "2"));
    ASSERT_TRUE(j->Commit());
  }
  auto j = MustOpen(db);
  ASSERT_TRUE(j);
  auto rows = j->Activations(std::nullopt, 10);
  ASSERT_TRUE(rows);
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].id, kept);
  EXPECT_EQ((*rows)[0].flow, "kept.js");
  EXPECT_EQ((*rows)[1].flow, "next.js");
  auto lost = j->KvGet("orders", "lost");
  ASSERT_TRUE(lost);
  EXPECT_FALSE(lost->has_value());
  auto next = j->KvGet("orders", "next");
  ASSERT_TRUE(next && next->has_value());
  auto stray = j->KvGet("orders", "stray");
  ASSERT_TRUE(stray);
  EXPECT_FALSE(stray->has_value());
}

}  // namespace
}  // namespace basal
