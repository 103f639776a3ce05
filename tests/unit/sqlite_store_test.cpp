// What only the SQLite store does: durability settings in force, WAL checkpoints, refusal of
// foreign files, the migrations of schema 1 to 4 files, owner-only files, many processes creating one
// journal at once, the read-only reader (also for a user who may only read), and recovery after a
// commit the disk refused (fault-injecting VFS). The behaviour every backend shares is in
// store_contract_test.cpp.
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "parent/store/owner.h"
#include "parent/store/sqlite/sqlite_store.h"
#include "unit/store_test_support.h"

namespace basal {
namespace {

namespace fs = std::filesystem;
using testing_support::Call;
using testing_support::End;
using testing_support::FlowApproval;
using testing_support::Start;
using testing_support::TempDir;

constexpr int kSchemaVersion = 10;
constexpr int kApplicationId = 0x6261736c;

// Every table, index and trigger of a file with its SQL, by name: two files of the same schema
// read the same.
constexpr const char* kSchemaText =
    "SELECT group_concat(type || ' ' || name || ': ' || sql, char(10)) FROM "
    "(SELECT * FROM sqlite_master WHERE sql IS NOT NULL ORDER BY name)";

// A second, independent connection, as another process (or `sqlite3 journal.db`) would see it.
class RawDb {
 public:
  explicit RawDb(const std::string& path, int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) {
    if (sqlite3_open_v2(path.c_str(), &db_, flags, nullptr) != SQLITE_OK) {
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

std::unique_ptr<Store> MustOpen(const std::string& path, Durability d = Durability::kNormal) {
  auto s = OpenSqliteStore({.path = path, .durability = d});
  if (!s) {
    ADD_FAILURE() << s.error().message;
    return nullptr;
  }
  return std::move(*s);
}

std::string Contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return st.st_mode & 07777;
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

TEST(StoreNamesTest, EnumNamesRoundTrip) {
  for (CallState s : {CallState::kDecided, CallState::kStarted, CallState::kAnswered, CallState::kAbandoned,
                      CallState::kUnknown})
    EXPECT_EQ(ParseCallState(CallStateName(s)), s);
  for (Verdict v : {Verdict::kAllow, Verdict::kDeny, Verdict::kNeedsApproval, Verdict::kQuotaExceeded})
    EXPECT_EQ(ParseVerdict(VerdictName(v)), v);
  for (Effect e : {Effect::kPure, Effect::kIdempotent, Effect::kExternal}) EXPECT_EQ(ParseEffect(EffectName(e)), e);
  for (RunState r : {RunState::kQueued, RunState::kRunning, RunState::kEnded})
    EXPECT_EQ(ParseRunState(RunStateName(r)), r);
  EXPECT_STREQ(RunStateName(RunState::kQueued), "queued");
  EXPECT_STREQ(RunStateName(RunState::kRunning), "running");
  EXPECT_STREQ(RunStateName(RunState::kEnded), "ended");
  EXPECT_FALSE(ParseRunState("Queued"));
  EXPECT_FALSE(ParseRunState(""));
  EXPECT_FALSE(ParseCallState("Answered"));
  EXPECT_FALSE(ParseVerdict(""));
  EXPECT_FALSE(ParseEffect("unknown"));
}

TEST(SqliteStoreTest, WalAndSynchronousAreInForce) {
  TempDir dir;
  for (Durability d : {Durability::kNormal, Durability::kFull}) {
    const std::string db = dir.File(std::string(DurabilityName(d)) + ".db");
    auto store = MustOpen(db, d);
    ASSERT_TRUE(store);
    auto s = ReadSqliteSettings(*store);
    ASSERT_TRUE(s) << s.error().message;
    EXPECT_EQ(s->journal_mode, "wal");
    EXPECT_EQ(s->synchronous, d == Durability::kFull ? 2 : 1) << DurabilityName(d);
    EXPECT_EQ(s->busy_timeout_ms, 5000);
    EXPECT_EQ(s->schema_version, kSchemaVersion);
    EXPECT_TRUE(s->foreign_keys);
    RawDb raw(db);  // WAL is a property of the file, visible to every connection
    EXPECT_EQ(raw.Text("PRAGMA journal_mode"), "wal");
    EXPECT_EQ(raw.Int("PRAGMA user_version"), kSchemaVersion);
    EXPECT_EQ(raw.Int("PRAGMA application_id"), kApplicationId);
    EXPECT_EQ(raw.Text("SELECT value FROM meta WHERE key='journal_id'"), store->journal_id());
  }
}

// Checkpoints run off the owner's thread (docs/journal.md): through many commits, with another
// connection reading now and then, nothing is lost and the WAL stays bounded (it starts over).
TEST(SqliteStoreTest, ManyCommitsAreCheckpointedAndTheWalStaysBounded) {
  TempDir dir;
  const std::string db = dir.File("j.db");
  constexpr int kCommits = 6000;
  {
    auto store = MustOpen(db);
    ASSERT_TRUE(store);
    JournalStore& j = store->journal();
    RawDb raw(db);
    for (int i = 0; i < kCommits; ++i) {
      auto a = j.BeginActivation(Start("a.js"));
      ASSERT_TRUE(a);
      ASSERT_TRUE(store->Commit());
      ASSERT_TRUE(j.EndActivation(End(*a)));
      ASSERT_TRUE(store->Commit());
      if (i % 1000 == 999) {
        EXPECT_EQ(raw.Int("SELECT count(*) FROM activations WHERE outcome='ok'"), i + 1);
      }
    }
    std::error_code ec;
    const auto wal_bytes = fs::file_size(db + "-wal", ec);
    ASSERT_FALSE(ec);
    // Past the hard limit every commit checkpoints inline, but that checkpoint does nothing while a
    // background pass still runs (one checkpointer at a time), and on a loaded machine a pass can
    // take long: the bound is the hard limit plus slack, not the hard limit exactly.
    EXPECT_LE(wal_bytes, static_cast<uintmax_t>(2 * kWalHardLimitPages) * (4096 + 24));
  }
  RawDb raw(db);
  EXPECT_EQ(raw.Int("SELECT count(*) FROM activations WHERE outcome='ok'"), kCommits);
}

// The checkpointer's thread takes no signal (checkpointer.cpp): `basal serve` blocks SIGTERM, SIGINT
// and SIGHUP on its loop thread for a signalfd, and a thread that left them at their default
// would end the daemon instead. Read from the kernel: every thread of this process but the main one
// (ctest runs each test in a process of its own) blocks them, the main thread's mask untouched.
TEST(SqliteStoreTest, TheCheckpointersThreadBlocksTheSignalsTheLoopHandles) {
  TempDir dir;
  const std::string db = dir.File("j.db");
  auto store = MustOpen(db);
  ASSERT_TRUE(store);
  JournalStore& j = store->journal();
  const auto threads = [] {
    std::vector<std::string> tids;
    for (const auto& e : fs::directory_iterator("/proc/self/task")) tids.push_back(e.path().filename().string());
    return tids;
  };
  for (int i = 0; i < 20000 && threads().size() < 2; ++i) {  // until the first checkpoint starts it
    auto a = j.BeginActivation(Start("a.js"));
    ASSERT_TRUE(a);
    ASSERT_TRUE(store->Commit());
  }
  const std::vector<std::string> tids = threads();
  ASSERT_GE(tids.size(), 2u) << "no checkpointer thread was started";
  const auto blocked = [](const std::string& tid) {
    std::ifstream status("/proc/self/task/" + tid + "/status");
    std::string line;
    while (std::getline(status, line))
      if (line.rfind("SigBlk:", 0) == 0) return std::stoull(line.substr(7), nullptr, 16);
    return ~0ull;
  };
  const uint64_t wanted = (1ull << (SIGTERM - 1)) | (1ull << (SIGINT - 1)) | (1ull << (SIGHUP - 1));
  const std::string main_tid = std::to_string(getpid());
  for (const std::string& tid : tids) {
    if (tid == main_tid) {
      EXPECT_EQ(blocked(tid) & wanted, 0u) << "the creating thread's mask is restored";
    } else {
      EXPECT_EQ(blocked(tid) & wanted, wanted) << "thread " << tid;
    }
  }
}

// The first connection of a process turns SQLite's memory statistics off (PreferNoMemoryStatistics,
// sqlite_support.h): its allocations then take no global mutex. ctest runs each test in a process of
// its own, so the store's open is this process's first use of SQLite; with the statistics on, what
// the store's connection holds would be counted here.
TEST(SqliteStoreTest, TheFirstOpenTurnsSqlitesMemoryStatisticsOff) {
  TempDir dir;
  auto store = MustOpen(dir.File("j.db"));
  ASSERT_TRUE(store);
  auto a = store->journal().BeginActivation(Start());
  ASSERT_TRUE(a);
  ASSERT_TRUE(store->journal().EndActivation(End(*a)));
  ASSERT_TRUE(store->Commit());
  EXPECT_EQ(sqlite3_memory_used(), 0);
}

TEST(SqliteStoreTest, EmptyIsStoredAsNull) {
  TempDir dir;
  const std::string db = dir.File("j.db");
  auto store = MustOpen(db);
  ASSERT_TRUE(store);
  auto a = store->journal().BeginActivation(Start());
  ASSERT_TRUE(a);
  ASSERT_TRUE(store->journal().RecordCall(Call(*a, 1)));
  ASSERT_TRUE(store->Commit());
  RawDb raw(db);
  EXPECT_EQ(raw.Int("SELECT count(*) FROM calls WHERE error IS NULL"), 1);
  EXPECT_EQ(raw.Int("SELECT count(*) FROM activations WHERE end_us IS NULL AND outcome IS NULL"), 1);
}

TEST(SqliteOpenTest, ForeignSqliteFileIsRefusedAndLeftUnchanged) {
  TempDir dir;
  const std::string db = dir.File("other.db");
  {
    RawDb raw(db);
    raw.Exec("CREATE TABLE invoices(id INTEGER PRIMARY KEY)");
  }
  for (bool reader : {false, true}) {
    Error error{ErrorCode::kInternal, ""};
    if (reader) {
      auto r = OpenSqliteReader(db);
      ASSERT_FALSE(r);
      error = r.error();
    } else {
      auto s = OpenSqliteStore({.path = db});
      ASSERT_FALSE(s);
      error = s.error();
    }
    EXPECT_EQ(error.code, ErrorCode::kDatabase);
    EXPECT_NE(error.message.find(db), std::string::npos) << error.message;
    EXPECT_NE(error.message.find("not a basal journal"), std::string::npos) << error.message;
  }
  RawDb raw(db);
  EXPECT_EQ(raw.Text("PRAGMA journal_mode"), "delete");
  EXPECT_EQ(raw.Int("SELECT count(*) FROM sqlite_master"), 1);
}

TEST(SqliteOpenTest, GarbageFileIsRefused) {
  TempDir dir;
  const std::string db = dir.File("garbage.db");
  {
    std::ofstream out(db, std::ios::binary);
    for (int i = 0; i < 512; ++i) out << "this is not a database. ";
  }
  for (bool reader : {false, true}) {
    Error error{ErrorCode::kInternal, ""};
    if (reader) {
      auto r = OpenSqliteReader(db);
      ASSERT_FALSE(r);
      error = r.error();
    } else {
      auto s = OpenSqliteStore({.path = db});
      ASSERT_FALSE(s);
      error = s.error();
    }
    EXPECT_EQ(error.code, ErrorCode::kDatabase);
    EXPECT_NE(error.message.find(db), std::string::npos) << error.message;
    EXPECT_NE(error.message.find("not an SQLite database"), std::string::npos) << error.message;
    EXPECT_NE(error.message.find("SQLITE_NOTADB"), std::string::npos) << error.message;
  }
}

TEST(SqliteOpenTest, NewerSchemaIsRefused) {
  TempDir dir;
  const std::string db = dir.File("j.db");
  ASSERT_TRUE(MustOpen(db));
  {
    RawDb raw(db);
    raw.Exec("PRAGMA user_version=" + std::to_string(kSchemaVersion + 1));
  }
  auto s = OpenSqliteStore({.path = db});
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("newer basal"), std::string::npos) << s.error().message;
  EXPECT_NE(s.error().message.find("schema version " + std::to_string(kSchemaVersion + 1)), std::string::npos)
      << s.error().message;
  auto r = OpenSqliteReader(db);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("newer basal"), std::string::npos) << r.error().message;
}

TEST(SqliteOpenTest, EmptyExistingFileBecomesAJournal) {
  TempDir dir;
  const std::string db = dir.File("empty.db");
  { std::ofstream out(db); }
  auto store = MustOpen(db);
  ASSERT_TRUE(store);
  EXPECT_TRUE(store->journal().BeginActivation(Start()));
  EXPECT_TRUE(store->Commit());
}

TEST(SqliteOpenTest, MissingDirectoryIsAClearError) {
  TempDir dir;
  const std::string missing = dir.File("no/such/dir");
  const std::string db = missing + "/j.db";
  auto s = OpenSqliteStore({.path = db});
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, ErrorCode::kIo);
  EXPECT_NE(s.error().message.find("journal " + db + ": cannot open"), std::string::npos) << s.error().message;
  EXPECT_NE(s.error().message.find("SQLITE_CANTOPEN"), std::string::npos) << s.error().message;
  EXPECT_NE(s.error().message.find("directory " + missing + " does not exist"), std::string::npos)
      << s.error().message;
  EXPECT_FALSE(fs::exists(missing));
}

// --- Schema 1 files -------------------------------------------------------------------------

// The schema of version 1, verbatim as the basal of that version created it.
constexpr const char* kV1Schema = R"sql(
CREATE TABLE activations(
  id            INTEGER PRIMARY KEY,
  flow          TEXT NOT NULL,
  source_hash   TEXT NOT NULL,
  manifest_hash TEXT NOT NULL,
  input         TEXT NOT NULL,
  start_us      INTEGER NOT NULL,
  end_us        INTEGER,
  outcome       TEXT,
  result        TEXT,
  error         TEXT,
  cpu_us        INTEGER
);
CREATE TABLE calls(
  seq           INTEGER PRIMARY KEY,
  activation_id INTEGER NOT NULL REFERENCES activations(id),
  call_id       INTEGER NOT NULL,
  name          TEXT NOT NULL,
  args          TEXT NOT NULL,
  allowed       INTEGER NOT NULL CHECK (allowed IN (0, 1)),
  reason        TEXT NOT NULL CHECK (reason <> ''),
  result        TEXT,
  error         TEXT,
  start_us      INTEGER NOT NULL,
  end_us        INTEGER NOT NULL,
  UNIQUE (activation_id, call_id)
);
CREATE TABLE kv(
  namespace TEXT NOT NULL,
  key       TEXT NOT NULL,
  value     TEXT NOT NULL,
  PRIMARY KEY (namespace, key)
) WITHOUT ROWID;
PRAGMA application_id=1650553708;
PRAGMA user_version=1;
)sql";

void WriteV1Journal(const std::string& db) {
  RawDb raw(db);
  raw.Exec("PRAGMA journal_mode=WAL");
  raw.Exec(kV1Schema);
  raw.Exec(R"sql(
INSERT INTO activations VALUES(1, 'hello.js', 'sha256:aa', 'sha256:bb', '{"n":1}', 1000, 5000, 'ok', '42', NULL, 7);
INSERT INTO activations VALUES(2, 'cut.js', 'sha256:aa', 'sha256:bb', 'null', 6000, NULL, NULL, NULL, NULL, NULL);
INSERT INTO calls VALUES(1, 1, 2, 'kv.put', '{"namespace":"o"}', 1, 'granted by manifest', 'null', NULL, 1100, 1200);
INSERT INTO calls VALUES(2, 1, 1, 'mail.send', '{}', 0, '"mail.send" is not granted by the manifest', NULL,
                         '{"name":"PermissionDenied","message":"no"}', 1300, 1301);
INSERT INTO calls VALUES(3, 1, 3, 'log', '{"level":"log","message":"hi"}', 1, 'needs no grant', 'null', NULL, 1400, 1401);
INSERT INTO kv VALUES('o', 'k', '{"v":1}');
)sql");
}

void ExpectV1Rows(JournalReader& reader) {
  auto rows = reader.Activations(std::nullopt, 10);
  ASSERT_TRUE(rows) << rows.error().message;
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].outcome, "ok");
  EXPECT_EQ((*rows)[0].result_json, "42");
  EXPECT_EQ((*rows)[0].cpu_us, 7);
  EXPECT_EQ((*rows)[0].owner.host, "");
  EXPECT_EQ((*rows)[1].outcome, "");
  auto calls = reader.Calls(1);
  ASSERT_TRUE(calls) << calls.error().message;
  ASSERT_EQ(calls->size(), 3u);
  EXPECT_EQ((*calls)[0].call_id, 2);
  EXPECT_EQ((*calls)[0].decision.verdict, Verdict::kAllow);
  EXPECT_EQ((*calls)[0].decision.rule, "granted by manifest");
  EXPECT_EQ((*calls)[0].decision.reason, "granted by manifest");
  EXPECT_EQ((*calls)[0].effect, Effect::kIdempotent);
  EXPECT_EQ((*calls)[0].state, CallState::kAnswered);
  EXPECT_EQ((*calls)[0].end_unix_us, std::optional<int64_t>(1200));
  EXPECT_EQ((*calls)[1].decision.verdict, Verdict::kDeny);
  EXPECT_EQ((*calls)[1].decision.reason, "\"mail.send\" is not granted by the manifest");
  EXPECT_EQ((*calls)[1].effect, Effect::kExternal);
  EXPECT_EQ((*calls)[1].state, CallState::kAnswered);
  EXPECT_EQ((*calls)[1].error_json, R"({"name":"PermissionDenied","message":"no"})");
  EXPECT_EQ((*calls)[2].effect, Effect::kPure);
}

TEST(SqliteMigrationTest, ReaderReadsASchema1FileWithoutChangingIt) {
  TempDir dir;
  const std::string db = dir.File("v1.db");
  WriteV1Journal(db);
  const std::string before = Contents(db);
  {
    auto reader = OpenSqliteReader(db);
    ASSERT_TRUE(reader) << reader.error().message;
    ExpectV1Rows(**reader);
  }
  EXPECT_EQ(Contents(db), before);
  RawDb raw(db);
  EXPECT_EQ(raw.Int("PRAGMA user_version"), 1);
}

TEST(SqliteMigrationTest, WriterMigratesASchema1FileOnce) {
  TempDir dir;
  const std::string db = dir.File("v1.db");
  WriteV1Journal(db);
  std::string id;
  {
    auto store = MustOpen(db);
    ASSERT_TRUE(store);
    id = store->journal_id();
    EXPECT_EQ(id.size(), 32u);
    ExpectV1Rows(store->reader());
    auto value = store->kv().Get("o", "k");
    ASSERT_TRUE(value && value->has_value());
    EXPECT_EQ(**value, R"({"v":1})");
    // New rows of every kind go in beside the old ones.
    auto a = store->journal().BeginActivation(Start("new.js", 9000, {"h", 1, 2}));
    ASSERT_TRUE(a) << a.error().message;
    EXPECT_EQ(*a, 3);
    CallRecord c = Call(*a, 1);
    c.state = CallState::kStarted;
    c.end_unix_us = std::nullopt;
    ASSERT_TRUE(store->journal().RecordCall(c));
    ASSERT_TRUE(store->Commit());
  }
  RawDb raw(db);
  EXPECT_EQ(raw.Int("PRAGMA user_version"), kSchemaVersion);
  EXPECT_EQ(raw.Text("PRAGMA journal_mode"), "wal");
  EXPECT_EQ(raw.Int("SELECT count(*) FROM calls"), 4);
  EXPECT_EQ(raw.Int("SELECT count(*) FROM pragma_table_info('calls') WHERE name='allowed'"), 0);
  EXPECT_EQ(raw.Text("SELECT verdict || '/' || state || '/' || effect FROM calls WHERE seq=2"),
            "deny/answered/external");
  EXPECT_EQ(raw.Int("SELECT count(*) FROM sqlite_master WHERE name='activations_unfinished'"), 1);
  EXPECT_EQ(raw.Int("SELECT count(*) FROM pragma_foreign_key_check"), 0);
  // Through version 2 to 3: kv usage counted from what kv holds ("k" + {"v":1}).
  EXPECT_EQ(raw.Text("SELECT namespace || '/' || bytes || '/' || keys FROM kv_usage"), "o/8/1");
  EXPECT_EQ(raw.Int("SELECT logs_dropped FROM activations WHERE id=1"), 0);
  // Through version 4 to 5: basal serve's tables.
  EXPECT_EQ(raw.Int("SELECT count(*) FROM sqlite_master WHERE name IN ('runs', 'tokens', 'schedule_marks')"), 3);
  auto again = MustOpen(db);  // already migrated: opened as it is, same id
  ASSERT_TRUE(again);
  EXPECT_EQ(again->journal_id(), id);
}

// What schema 10 changed, undone: a version 9 file as that basal left it (an index of each
// activation's calls in record order).
constexpr const char* kDowngradeV10ToV9 =
    "CREATE INDEX calls_by_activation ON calls(activation_id, seq); DROP INDEX activations_by_run; "
    "ALTER TABLE activations DROP COLUMN listed_by_run; "
    "CREATE INDEX activations_by_run ON activations(run_id) WHERE run_id IS NOT NULL; PRAGMA user_version=9;";
// What schema 8 changed, undone: a version 7 file as that basal left it (the runs' state index over
// every run).
constexpr const char* kDowngradeV8ToV7 =
    "DROP INDEX runs_unended; CREATE INDEX runs_by_state ON runs(state, id); PRAGMA user_version=7;";
// What schema 7 added, taken away again: a version 6 file as that basal left it (kv_audit's index
// goes with its table).
constexpr const char* kDowngradeV7ToV6 =
    "DROP TABLE kv_audit; DROP INDEX run_events_delivery; ALTER TABLE run_events DROP COLUMN delivery_id; "
    "PRAGMA user_version=6;";
// A version 6 file (what version 7 added, taken away again): the writer adds the events' delivery
// ids in place, keeping the events it holds.
TEST(SqliteMigrationTest, WriterMigratesASchema6FileKeepingItsEvents) {
  TempDir dir;
  const std::string db = dir.File("v6.db");
  {
    auto store = MustOpen(db);
    ASSERT_TRUE(store);
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
  {
    RawDb raw(db);
    raw.Exec(kDowngradeV10ToV9);
    raw.Exec(kDowngradeV8ToV7);
    raw.Exec(kDowngradeV7ToV6);
  }
  auto store = MustOpen(db);
  ASSERT_TRUE(store);
  EXPECT_EQ(*store->runs().CountPendingKeyedEvents("orders"), 1u);
  NewRunEvent e;
  e.flow = "orders";
  e.name = "approved";
  e.event_key = "k2";
  e.payload_json = "{}";
  e.sender = "webhook:hook";
  e.received_unix_us = 200;
  e.expires_unix_us = 1'000'000;
  e.delivery_id = "event:hook:d1";
  auto id = store->runs().AddRunEvent(e);
  ASSERT_TRUE(id) << id.error().message;
  EXPECT_FALSE(store->runs().AddRunEvent(e)) << "the migrated file keeps one event per delivery";
  ASSERT_TRUE(store->Commit());
  EXPECT_EQ(*store->runs().RunEventOfDelivery("orders", "event:hook:d1"), std::optional<int64_t>(*id));
  RawDb raw(db);
  EXPECT_EQ(raw.Int("PRAGMA user_version"), kSchemaVersion);
}

// What schema 6 added, taken away again: a version 5 file as that basal left it (the runs table in
// its version 5 shape).
constexpr const char* kDowngradeV6ToV5 = R"sql(
DROP TABLE call_resolutions;
DROP TABLE run_events;
DROP INDEX activations_by_run;
ALTER TABLE activations DROP COLUMN run_id;
ALTER TABLE activations DROP COLUMN retry_from;
ALTER TABLE calls DROP COLUMN args_digest;
ALTER TABLE calls DROP COLUMN answer_seq;
ALTER TABLE calls DROP COLUMN replay;
CREATE TABLE runs_v5(
  id              INTEGER PRIMARY KEY,
  flow            TEXT NOT NULL,
  input           TEXT NOT NULL,
  triggered_by    TEXT NOT NULL,
  idempotency_key TEXT NOT NULL DEFAULT '',
  key_expires_us  INTEGER,
  state           TEXT NOT NULL CHECK (state IN ('queued', 'running', 'ended')),
  activation_id   INTEGER REFERENCES activations(id),
  created_us      INTEGER NOT NULL,
  started_us      INTEGER,
  ended_us        INTEGER,
  outcome         TEXT,
  error           TEXT,
  state_detail    TEXT,
  CHECK ((state = 'ended') = (outcome IS NOT NULL)),
  CHECK (state <> 'queued' OR activation_id IS NULL),
  CHECK (state <> 'running' OR activation_id IS NOT NULL)
);
INSERT INTO runs_v5 SELECT id, flow, input, triggered_by, idempotency_key, key_expires_us, state, activation_id,
                           created_us, started_us, ended_us, outcome, error, state_detail FROM runs;
DROP TABLE runs;
ALTER TABLE runs_v5 RENAME TO runs;
CREATE INDEX runs_by_state ON runs(state, id);
CREATE INDEX runs_by_flow ON runs(flow, id);
CREATE UNIQUE INDEX runs_idempotency ON runs(flow, idempotency_key) WHERE idempotency_key <> '';
PRAGMA user_version=5;
)sql";

// What schema 5 added, taken away again: a version 4 file as that basal left it (the indexes go
// with their tables).
constexpr const char* kDowngradeV5ToV4 =
    "DROP TABLE runs; DROP TABLE tokens; DROP TABLE schedule_marks; PRAGMA user_version=4;";

// What schema 4 added, taken away again: a version 3 file as that basal left it.
constexpr const char* kDowngradeV4ToV3 =
    "ALTER TABLE activations DROP COLUMN manifest_text_hash; ALTER TABLE activations DROP COLUMN approval_id; "
    "ALTER TABLE activations DROP COLUMN origin; DROP TABLE approval_events; DROP TABLE approvals; DROP TABLE texts; "
    "PRAGMA user_version=3;";

TEST(SqliteMigrationTest, WriterMigratesASchema3File) {
  TempDir dir;
  const std::string db = dir.File("v3.db");
  std::string id;
  {
    auto store = MustOpen(db);
    ASSERT_TRUE(store);
    id = store->journal_id();
    auto a = store->journal().BeginActivation(Start("old.js", 1000, {"h", 1, 2}));
    ASSERT_TRUE(a);
    ASSERT_TRUE(store->Commit());
  }
  {
    RawDb raw(db);
    raw.Exec("PRAGMA foreign_keys=OFF");
    raw.Exec(kDowngradeV10ToV9);
    raw.Exec(kDowngradeV8ToV7);
    raw.Exec(kDowngradeV7ToV6);
    raw.Exec(kDowngradeV6ToV5);
    raw.Exec(kDowngradeV5ToV4);
    raw.Exec(kDowngradeV4ToV3);
  }
  {
    auto reader = OpenSqliteReader(db);  // a version 4 reader reads version 3 as it is
    ASSERT_TRUE(reader) << reader.error().message;
    auto rows = (*reader)->Activations(std::nullopt, 10);
    ASSERT_TRUE(rows) << rows.error().message;
    ASSERT_EQ(rows->size(), 1u);
    EXPECT_EQ((*rows)[0].origin, Origin::kUnrecorded);
    auto versions = (*reader)->Versions(ApprovalKind::kFlow, "old");
    ASSERT_TRUE(versions) << versions.error().message;
    EXPECT_TRUE(versions->empty());
  }
  auto store = MustOpen(db);
  ASSERT_TRUE(store);
  EXPECT_EQ(store->journal_id(), id);
  auto rows = store->reader().Activations(std::nullopt, 10);
  ASSERT_TRUE(rows);
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].origin, Origin::kUnrecorded) << "activations from before schema 4 did not record it";
  NewApproval p;
  p.kind = ApprovalKind::kPolicy;
  p.name = "agents";
  p.manifest_text = "{}";
  p.manifest_hash = "sha256:c";
  ASSERT_TRUE(store->catalog().Approve(p)) << "the migrated file takes approvals";
  RawDb raw(db);
  EXPECT_EQ(raw.Int("PRAGMA user_version"), kSchemaVersion);
}

// A version 2 file: what a version 3 file is without kv_usage, its triggers, calls_by_activation and logs_dropped (the
// only changes of version 3). The writer migrates it and the usage is counted from kv.
TEST(SqliteMigrationTest, WriterMigratesASchema2File) {
  TempDir dir;
  const std::string db = dir.File("v2.db");
  std::string id;
  {
    auto store = MustOpen(db);
    ASSERT_TRUE(store);
    id = store->journal_id();
    ASSERT_TRUE(store->kv().Put("a", "k1", "\"12345\""));
    ASSERT_TRUE(store->kv().Put("a", "k2", "true"));
    ASSERT_TRUE(store->kv().Put("b", "x", "null"));
    auto a = store->journal().BeginActivation(Start("old.js", 1000, {"h", 1, 2}));
    ASSERT_TRUE(a);
    ASSERT_TRUE(store->Commit());
  }
  {
    RawDb raw(db);
    raw.Exec(kDowngradeV10ToV9);
    raw.Exec(kDowngradeV8ToV7);
    raw.Exec(kDowngradeV7ToV6);
    raw.Exec(kDowngradeV6ToV5);
    raw.Exec(kDowngradeV5ToV4);
    raw.Exec(kDowngradeV4ToV3);
    raw.Exec("DROP TRIGGER kv_usage_insert; DROP TRIGGER kv_usage_update; DROP TRIGGER kv_usage_delete;"
             "DROP TABLE kv_usage; DROP INDEX calls_by_activation; ALTER TABLE activations DROP COLUMN logs_dropped; "
             "PRAGMA user_version=2;");
  }
  {
    auto reader = OpenSqliteReader(db);  // a version 3 reader reads version 2 as it is
    ASSERT_TRUE(reader) << reader.error().message;
    auto rows = (*reader)->Activations(std::nullopt, 10);
    ASSERT_TRUE(rows) << rows.error().message;
    ASSERT_EQ(rows->size(), 1u);
    EXPECT_EQ((*rows)[0].logs_dropped, 0);
  }
  auto store = MustOpen(db);
  ASSERT_TRUE(store);
  EXPECT_EQ(store->journal_id(), id);
  auto usage = store->kv().Usage("a");
  ASSERT_TRUE(usage);
  EXPECT_EQ(usage->keys, 2u);
  EXPECT_EQ(usage->bytes, 2u + 7u + 2u + 4u);
  ASSERT_TRUE(store->kv().Delete("b", "x"));
  auto b = store->kv().Usage("b");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->keys, 0u);
  RawDb raw(db);
  EXPECT_EQ(raw.Int("PRAGMA user_version"), kSchemaVersion);
}

// A version 4 file with data of every kind it held: the reader reads it as it is (no runs, no
// tokens) without changing it; the writer migrates it in place, keeping everything, and the
// migrated schema is the one a new file gets.
TEST(SqliteMigrationTest, WriterMigratesASchema4FileKeepingItsData) {
  TempDir dir;
  const std::string db = dir.File("v4.db");
  std::string id;
  int64_t activation = 0, approval = 0;
  {
    auto store = MustOpen(db);
    ASSERT_TRUE(store);
    id = store->journal_id();
    NewApproval a;
    a.kind = ApprovalKind::kFlow;
    a.name = "orders";
    a.source = "export default () => 1;\n";
    a.manifest_text = "{}";
    a.manifest_hash = "sha256:c";
    a.approver = {1000, "alice"};
    auto approved = store->catalog().Approve(a);
    ASSERT_TRUE(approved) << approved.error().message;
    approval = approved->id;
    ActivationStart start = Start("orders", 1000, {"h", 1, 2});
    start.origin = Origin::kApproved;
    start.approval_id = approval;
    auto begun = store->journal().BeginActivation(start);
    ASSERT_TRUE(begun);
    activation = *begun;
    ASSERT_TRUE(store->journal().RecordCall(Call(activation, 1)));
    ASSERT_TRUE(store->journal().EndActivation(End(activation)));
    ASSERT_TRUE(store->kv().Put("orders", "o-1", R"({"qty":3})"));
    ASSERT_TRUE(store->Commit());
  }
  std::string fresh_schema;
  {
    RawDb raw(db);
    // What a new file's schema is, to compare the migrated one with.
    fresh_schema = raw.Text(kSchemaText);
    raw.Exec(kDowngradeV10ToV9);
    raw.Exec(kDowngradeV8ToV7);
    raw.Exec(kDowngradeV7ToV6);
    raw.Exec(kDowngradeV6ToV5);
    raw.Exec(kDowngradeV5ToV4);
  }
  const std::string before = Contents(db);
  {
    auto reader = OpenSqliteReader(db);  // a version 5 reader reads version 4 as it is
    ASSERT_TRUE(reader) << reader.error().message;
    auto runs = (*reader)->ListRuns({});
    ASSERT_TRUE(runs) << runs.error().message;
    EXPECT_TRUE(runs->empty());
    auto run = (*reader)->GetRun(1);
    ASSERT_TRUE(run) << run.error().message;
    EXPECT_FALSE(run->has_value());
    auto tokens = (*reader)->ListTokens();
    ASSERT_TRUE(tokens) << tokens.error().message;
    EXPECT_TRUE(tokens->empty());
    auto rows = (*reader)->Activations(std::nullopt, 10);
    ASSERT_TRUE(rows) << rows.error().message;
    ASSERT_EQ(rows->size(), 1u);
  }
  EXPECT_EQ(Contents(db), before) << "the reader changed the file";

  auto store = MustOpen(db);
  ASSERT_TRUE(store);
  EXPECT_EQ(store->journal_id(), id);
  auto rows = store->reader().Activations(activation, 1);
  ASSERT_TRUE(rows) << rows.error().message;
  EXPECT_EQ((*rows)[0].outcome, "ok");
  EXPECT_EQ((*rows)[0].origin, Origin::kApproved);
  EXPECT_EQ((*rows)[0].approval_id, approval);
  auto calls = store->reader().Calls(activation);
  ASSERT_TRUE(calls);
  EXPECT_EQ(calls->size(), 1u);
  auto versions = store->reader().Versions(ApprovalKind::kFlow, "orders");
  ASSERT_TRUE(versions);
  ASSERT_EQ(versions->size(), 1u);
  auto source = store->reader().Text(versions->front().source_hash);
  ASSERT_TRUE(source);
  EXPECT_EQ(*source, std::optional<std::string>("export default () => 1;\n"));
  auto value = store->kv().Get("orders", "o-1");
  ASSERT_TRUE(value && value->has_value());
  EXPECT_EQ(**value, R"({"qty":3})");
  auto usage = store->kv().Usage("orders");
  ASSERT_TRUE(usage);
  EXPECT_EQ(usage->keys, 1u);

  // The migrated file takes runs (referring to the old activation), tokens and marks.
  auto run = store->runs().EnqueueRun(testing_support::Run("orders", "{}", "k"));
  ASSERT_TRUE(run) << run.error().message;
  auto next = store->journal().BeginActivation(Start("orders", 2000, {"h", 1, 2}));
  ASSERT_TRUE(next);
  ASSERT_TRUE(store->runs().MarkRunStarted(run->run.id, *next, 2000));
  ASSERT_TRUE(store->serve().AddToken("ci", "sha256:t", "[]", {0, "root"}, 2000));
  ASSERT_TRUE(store->serve().SetScheduleMark("nightly", 2000));
  ASSERT_TRUE(store->Commit());
  RawDb raw(db);
  EXPECT_EQ(raw.Int("PRAGMA user_version"), kSchemaVersion);
  EXPECT_EQ(raw.Int("SELECT count(*) FROM pragma_foreign_key_check"), 0);
  EXPECT_EQ(raw.Text(kSchemaText),
            fresh_schema)
      << "a migrated file has the schema of a new one";
  auto again = MustOpen(db);  // already migrated: opened as it is
  ASSERT_TRUE(again);
  auto tokens = again->reader().ListTokens();
  ASSERT_TRUE(tokens);
  EXPECT_EQ(tokens->size(), 1u);
}

// A version 5 file (basal serve's runs as that basal left them) migrates to version 6: every run
// keeps its state and activation, is not durable, has no binding and no resume; a reader of
// version 6 reads the version 5 file as it is; the migrated file has the schema of a new one.
TEST(SqliteMigrationTest, WriterMigratesASchema5FileKeepingItsRuns) {
  TempDir dir;
  const std::string db = dir.File("v5.db");
  int64_t queued = 0, running = 0, ended = 0, activation = 0;
  {
    auto store = MustOpen(db);
    ASSERT_TRUE(store);
    auto q = store->runs().EnqueueRun(testing_support::Run("orders", R"({"n":1})", "k-1"));
    auto r = store->runs().EnqueueRun(testing_support::Run("orders", R"({"n":2})"));
    auto e = store->runs().EnqueueRun(testing_support::Run("orders", R"({"n":3})"));
    ASSERT_TRUE(q && r && e);
    queued = q->run.id;
    running = r->run.id;
    ended = e->run.id;
    auto a = store->journal().BeginActivation(Start("orders", 1000, {"h", 1, 2}));
    ASSERT_TRUE(a);
    activation = *a;
    ASSERT_TRUE(store->runs().MarkRunStarted(running, activation, 1000));
    ASSERT_TRUE(store->runs().MarkRunEnded(ended, "cancelled", R"({"kind":"cancelled","message":"m"})", 1100));
    ASSERT_TRUE(store->Commit());
  }
  std::string fresh_schema;
  {
    RawDb raw(db);
    fresh_schema = raw.Text(kSchemaText);
    raw.Exec(kDowngradeV10ToV9);
    raw.Exec(kDowngradeV8ToV7);
    raw.Exec(kDowngradeV7ToV6);
    raw.Exec(kDowngradeV6ToV5);
  }
  const std::string before = Contents(db);
  {
    auto reader = OpenSqliteReader(db);
    ASSERT_TRUE(reader) << reader.error().message;
    auto run = (*reader)->GetRun(running);
    ASSERT_TRUE(run && run->has_value());
    EXPECT_EQ((*run)->state, RunState::kRunning);
    EXPECT_FALSE((*run)->durable);
    auto calls = (*reader)->RunCalls(running);
    ASSERT_TRUE(calls);
    EXPECT_TRUE(calls->empty()) << "a version 5 file has no run of an activation";
  }
  EXPECT_EQ(Contents(db), before) << "the reader changed the file";

  auto store = MustOpen(db);
  ASSERT_TRUE(store);
  auto q = store->reader().GetRun(queued);
  auto r = store->reader().GetRun(running);
  auto e = store->reader().GetRun(ended);
  ASSERT_TRUE(q && r && e && q->has_value() && r->has_value() && e->has_value());
  EXPECT_EQ((*q)->state, RunState::kQueued);
  EXPECT_EQ((*q)->idempotency_key, "k-1");
  EXPECT_EQ((*r)->state, RunState::kRunning);
  EXPECT_EQ((*r)->activation_id, activation);
  EXPECT_EQ((*e)->state, RunState::kEnded);
  EXPECT_EQ((*e)->outcome, "cancelled");
  for (const auto* row : {&**q, &**r, &**e}) {
    EXPECT_FALSE(row->durable);
    EXPECT_EQ(row->resumes, 0);
    EXPECT_TRUE(row->binding.source_hash.empty());
  }
  RawDb raw(db);
  EXPECT_EQ(raw.Int("PRAGMA user_version"), kSchemaVersion);
  EXPECT_EQ(raw.Int("SELECT count(*) FROM pragma_foreign_key_check"), 0);
  EXPECT_EQ(raw.Text(kSchemaText),
            fresh_schema)
      << "a migrated file has the schema of a new one";
}

// Schema 6 to 7: the kv_audit table. A reader of a version 6 file finds no operator writes and
// changes nothing; the writer adds the table (the schema of a new file), keeps kv, and journals.
TEST(SqliteMigrationTest, WriterMigratesASchema6FileKeepingItsKv) {
  TempDir dir;
  const std::string db = dir.File("v6.db");
  {
    auto store = MustOpen(db);
    ASSERT_TRUE(store);
    ASSERT_TRUE(store->kv().Put("orders", "o-1", R"({"qty":2})"));
    ASSERT_TRUE(store->Commit());
  }
  std::string fresh_schema;
  {
    RawDb raw(db);
    fresh_schema = raw.Text(kSchemaText);
    raw.Exec(kDowngradeV10ToV9);
    raw.Exec(kDowngradeV8ToV7);
    raw.Exec(kDowngradeV7ToV6);
  }
  const std::string before = Contents(db);
  {
    auto reader = OpenSqliteReader(db);
    ASSERT_TRUE(reader) << reader.error().message;
    auto audit = (*reader)->KvAudit(std::nullopt, 10);
    ASSERT_TRUE(audit) << audit.error().message;
    EXPECT_TRUE(audit->empty()) << "a version 6 file has no operator writes";
  }
  EXPECT_EQ(Contents(db), before) << "the reader changed the file";

  auto store = MustOpen(db);
  ASSERT_TRUE(store);
  auto kept = store->kv().Get("orders", "o-1");
  ASSERT_TRUE(kept && kept->has_value());
  EXPECT_EQ(**kept, R"({"qty":2})");
  ASSERT_TRUE(store->kv().RecordOperatorWrite({.at_unix_us = 5, .actor = {.uid = 1, .name = "ops"}, .ns = "orders",
                                               .key = "o-1", .op = KvAuditOp::kDelete, .existed = true}));
  ASSERT_TRUE(store->Commit());
  auto audit = store->reader().KvAudit(std::string("orders"), 10);
  ASSERT_TRUE(audit);
  ASSERT_EQ(audit->size(), 1u);
  EXPECT_EQ((*audit)[0].actor.name, "ops");
  RawDb raw(db);
  EXPECT_EQ(raw.Int("PRAGMA user_version"), kSchemaVersion);
  EXPECT_EQ(raw.Text(kSchemaText),
            fresh_schema)
      << "a migrated file has the schema of a new one";
}

// Schema 7 to 8: the runs' state index keeps only the runs not ended. The writer replaces it (the
// schema of a new file) and finds every run of a version 7 file by its state as before.
TEST(SqliteMigrationTest, WriterMigratesASchema7FileFindingItsRunsByState) {
  TempDir dir;
  const std::string db = dir.File("v7.db");
  int64_t queued = 0, running = 0, ended = 0;
  {
    auto store = MustOpen(db);
    ASSERT_TRUE(store);
    auto q = store->runs().EnqueueRun(testing_support::Run("orders", R"({"n":1})"));
    auto r = store->runs().EnqueueRun(testing_support::Run("orders", R"({"n":2})"));
    auto e = store->runs().EnqueueRun(testing_support::Run("orders", R"({"n":3})"));
    ASSERT_TRUE(q && r && e);
    queued = q->run.id;
    running = r->run.id;
    ended = e->run.id;
    auto a = store->journal().BeginActivation(Start("orders", 1000, {"h", 1, 2}));
    ASSERT_TRUE(a);
    ASSERT_TRUE(store->runs().MarkRunStarted(running, *a, 1000));
    ASSERT_TRUE(store->runs().MarkRunEnded(ended, "cancelled", R"({"kind":"cancelled","message":"m"})", 1100));
    ASSERT_TRUE(store->Commit());
  }
  std::string fresh_schema;
  {
    RawDb raw(db);
    fresh_schema = raw.Text(kSchemaText);
    raw.Exec(kDowngradeV10ToV9);
    raw.Exec(kDowngradeV8ToV7);
    EXPECT_EQ(raw.Int("SELECT count(*) FROM sqlite_master WHERE name='runs_unended'"), 0);
  }
  const std::string before = Contents(db);
  {
    auto reader = OpenSqliteReader(db);
    ASSERT_TRUE(reader) << reader.error().message;
    auto run = (*reader)->GetRun(running);
    ASSERT_TRUE(run && run->has_value());
    EXPECT_EQ((*run)->state, RunState::kRunning);
  }
  EXPECT_EQ(Contents(db), before) << "the reader changed the file";

  auto store = MustOpen(db);
  ASSERT_TRUE(store);
  auto q = store->runs().RunsInState(RunState::kQueued, 10);
  ASSERT_TRUE(q) << q.error().message;
  ASSERT_EQ(q->size(), 1u);
  EXPECT_EQ((*q)[0].id, queued);
  EXPECT_EQ(*store->runs().CountRuns(RunState::kRunning), 1u);
  EXPECT_EQ(*store->runs().CountRuns(RunState::kEnded), 1u) << "an ended run is still counted, without the index";
  auto e = store->reader().GetRun(ended);
  ASSERT_TRUE(e && e->has_value());
  EXPECT_EQ((*e)->outcome, "cancelled");
  RawDb raw(db);
  EXPECT_EQ(raw.Int("PRAGMA user_version"), kSchemaVersion);
  EXPECT_EQ(raw.Int("SELECT count(*) FROM sqlite_master WHERE name='runs_by_state'"), 0);
  EXPECT_EQ(raw.Text(kSchemaText),
            fresh_schema)
      << "a migrated file has the schema of a new one";
}

// Schema 9's CHECKs, back as schema 8 wrote them (IN lists): a version 8 file, whatever its table
// texts' layout. Edited in the schema table, as a CHECK cannot be altered and the rows' format does
// not depend on it.
constexpr const char* kDowngradeV9ToV8 = R"sql(
PRAGMA writable_schema=ON;
UPDATE sqlite_master SET sql = replace(sql,
  'CHECK (origin = ''unrecorded'' OR origin = ''adhoc'' OR origin = ''approved'' OR origin = ''codemode'')',
  'CHECK (origin IN (''unrecorded'', ''adhoc'', ''approved'', ''codemode''))') WHERE name = 'activations';
UPDATE sqlite_master SET sql = replace(replace(replace(sql,
  'CHECK (verdict = ''allow'' OR verdict = ''deny'' OR verdict = ''needs_approval'' OR verdict = ''quota_exceeded'')',
  'CHECK (verdict IN (''allow'', ''deny'', ''needs_approval'', ''quota_exceeded''))'),
  'CHECK (effect = ''pure'' OR effect = ''idempotent'' OR effect = ''external'')',
  'CHECK (effect IN (''pure'', ''idempotent'', ''external''))'),
  'CHECK (state = ''decided'' OR state = ''started'' OR state = ''answered'' OR
                                     state = ''abandoned'' OR state = ''unknown'')',
  'CHECK (state IN (''decided'', ''started'', ''answered'', ''abandoned'', ''unknown''))') WHERE name = 'calls';
UPDATE sqlite_master SET sql = replace(sql,
  'CHECK (state = ''queued'' OR state = ''running'' OR state = ''ended'' OR
                                          state = ''interrupted'' OR state = ''needs_reconciliation'' OR
                                          state = ''sleeping'' OR state = ''waiting'' OR state = ''retrying'')',
  'CHECK (state IN (''queued'', ''running'', ''ended'', ''interrupted'', ''needs_reconciliation'', ''sleeping'', ''waiting'', ''retrying''))')
  WHERE name = 'runs';
PRAGMA writable_schema=OFF;
PRAGMA user_version=8;
)sql";

// The number of ephemeral tables SQLite's program for `sql` opens (EXPLAIN's OpenEphemeral): an
// IN list of more than two constants in a CHECK is one, built at every execution. Read-write: on a
// read-only connection SQLite leaves the constraint checks out of a write's program.
int EphemeralTables(const std::string& db_path, const std::string& sql) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr), SQLITE_OK);
  sqlite3_stmt* s = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, ("EXPLAIN " + sql).c_str(), -1, &s, nullptr), SQLITE_OK) << sql << ": " << sqlite3_errmsg(db);
  int n = 0;
  while (sqlite3_step(s) == SQLITE_ROW)
    if (std::string(reinterpret_cast<const char*>(sqlite3_column_text(s, 1))) == "OpenEphemeral") ++n;
  sqlite3_finalize(s);
  sqlite3_close_v2(db);
  return n;
}

// The writes of every activation, call and run, shaped as the store's statements (sqlite_store.cpp).
const std::vector<std::string> kHotWrites = {
    "INSERT INTO activations(flow, source_hash, manifest_hash, input, start_us, owner_host, owner_pid, "
    "owner_start_ticks, lease_until_us, origin, approval_id, manifest_text_hash, run_id, retry_from) "
    "VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    "INSERT INTO calls(activation_id, call_id, name, args, verdict, rule, reason, effect, state, result, error, "
    "start_us, end_us) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    "UPDATE calls SET state=?, result=?, error=?, end_us=? WHERE activation_id=? AND call_id=?",
    "INSERT INTO runs(flow, input, triggered_by, idempotency_key, key_expires_us, state, created_us, state_detail, "
    "durable) VALUES(?, ?, ?, ?, ?, 'queued', ?, ?, ?)",
    "UPDATE runs SET state='running', activation_id=?, started_us=? WHERE id=? AND state='queued'",
    "UPDATE runs SET state='ended', outcome=?, error=?, ended_us=? WHERE id=? AND state=?",
};

// The answer's UPDATE (every external call's) is the store's own statement, not a shape of it: an
// IN list of its three allowed states built an ephemeral table at every answer.
TEST(SqliteStoreTest, TheCallUpdateBuildsNoEphemeralTable) {
  TempDir dir;
  const std::string db = dir.File("j.db");
  {
    auto store = MustOpen(db);
    ASSERT_TRUE(store);
  }
  EXPECT_EQ(EphemeralTables(db, kSqliteUpdateCallSql), 0) << kSqliteUpdateCallSql;
  // What the check sees: the same statement with the states as an IN list.
  std::string in_list = kSqliteUpdateCallSql;
  const std::string ors = "(state=? OR state=? OR state=?)";
  const size_t at = in_list.find(ors);
  ASSERT_NE(at, std::string::npos) << in_list;
  in_list.replace(at, ors.size(), "state IN (?,?,?)");
  EXPECT_EQ(EphemeralTables(db, in_list), 1) << in_list;
}

// Schema 8 to 9: activations, calls and runs are rebuilt with their CHECKs as ORs of equalities.
// Every row is kept with its id, the indexes are there again, foreign keys hold again after, and
// none of the hot writes builds an ephemeral table any more (each did in schema 8).
TEST(SqliteMigrationTest, WriterMigratesASchema8FileKeepingItsRowsWithoutEphemeralChecks) {
  TempDir dir;
  const std::string db = dir.File("v8.db");
  int64_t queued = 0, running = 0, ended = 0, activation = 0;
  {
    auto store = MustOpen(db);
    ASSERT_TRUE(store);
    auto q = store->runs().EnqueueRun(testing_support::Run("orders", R"({"n":1})"));
    auto r = store->runs().EnqueueRun(testing_support::Run("orders", R"({"n":2})"));
    auto e = store->runs().EnqueueRun(testing_support::Run("orders", R"({"n":3})"));
    ASSERT_TRUE(q && r && e);
    queued = q->run.id;
    running = r->run.id;
    ended = e->run.id;
    ActivationStart start = Start("orders", 1000, {"h", 1, 2});
    start.origin = Origin::kCodemode;
    auto a = store->journal().BeginActivation(start);
    ASSERT_TRUE(a);
    activation = *a;
    ASSERT_TRUE(store->journal().RecordCall(Call(activation, 1)));
    ASSERT_TRUE(store->journal().RecordCall(Call(activation, 2, false)));
    ASSERT_TRUE(store->runs().MarkRunStarted(running, activation, 1000));
    ASSERT_TRUE(store->runs().MarkRunEnded(ended, "cancelled", R"({"kind":"cancelled","message":"m"})", 1100));
    ASSERT_TRUE(store->Commit());
  }
  for (const std::string& sql : kHotWrites) EXPECT_EQ(EphemeralTables(db, sql), 0) << "a new file: " << sql;
  std::string fresh_schema;
  {
    RawDb raw(db);
    fresh_schema = raw.Text(kSchemaText);
    raw.Exec(kDowngradeV10ToV9);
    raw.Exec(kDowngradeV9ToV8);
  }
  // The downgrade brought schema 8's cost back, so the check below can fail.
  int before = 0;
  for (const std::string& sql : kHotWrites) before += EphemeralTables(db, sql);
  EXPECT_EQ(before, 8) << "as schema 8 built them: an activation's insert 1 (origin), a call's insert 3 (verdict, "
                          "effect, state) and its update 1 (state), a run's insert and its two updates 1 each (state)";

  auto store = MustOpen(db);
  ASSERT_TRUE(store);
  for (const std::string& sql : kHotWrites) EXPECT_EQ(EphemeralTables(db, sql), 0) << "migrated: " << sql;
  {
    RawDb raw(db);
    EXPECT_EQ(raw.Int("PRAGMA user_version"), kSchemaVersion);
    EXPECT_EQ(raw.Text(kSchemaText),
              fresh_schema)
        << "a migrated file has the schema of a new one";
    EXPECT_EQ(raw.Int("SELECT count(*) FROM pragma_foreign_key_check"), 0);
  }
  auto q = store->runs().RunsInState(RunState::kQueued, 10);
  ASSERT_TRUE(q) << q.error().message;
  ASSERT_EQ(q->size(), 1u);
  EXPECT_EQ((*q)[0].id, queued);
  auto r = store->reader().GetRun(running);
  ASSERT_TRUE(r && r->has_value());
  EXPECT_EQ((*r)->state, RunState::kRunning);
  EXPECT_EQ((*r)->activation_id, activation);
  auto e = store->reader().GetRun(ended);
  ASSERT_TRUE(e && e->has_value());
  EXPECT_EQ((*e)->outcome, "cancelled");
  auto rows = store->reader().Activations(activation, 1);
  ASSERT_TRUE(rows);
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].origin, Origin::kCodemode);
  auto calls = store->reader().Calls(activation);
  ASSERT_TRUE(calls);
  ASSERT_EQ(calls->size(), 2u);
  EXPECT_EQ((*calls)[1].decision.verdict, Verdict::kDeny);
  // Foreign keys are on again for the store's writes: a run cannot start with an activation the
  // journal does not have.
  auto refused = store->runs().MarkRunStarted(queued, activation + 100, 2000);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kDatabase);
  ASSERT_TRUE(store->journal().EndActivation(End(activation)));
  ASSERT_TRUE(store->runs().MarkRunEnded(running, "ok", "", 3000));
  ASSERT_TRUE(store->Commit());
}

// Schema 9 to 10: calls_by_activation is dropped; a schema 9 file's calls are read in record order
// before (by a reader, without changing the file) and after the migration, and the migrated file
// has the schema of a new one.
TEST(SqliteMigrationTest, WriterMigratesASchema9FileKeepingItsCallsInRecordOrder) {
  TempDir dir;
  const std::string db = dir.File("v9.db");
  int64_t activation = 0;
  const std::vector<int64_t> order = {2, 3, 1};
  {
    auto store = MustOpen(db);
    ASSERT_TRUE(store);
    auto a = store->journal().BeginActivation(Start("orders", 1000, {"h", 1, 2}));
    ASSERT_TRUE(a);
    activation = *a;
    for (int64_t id : order) ASSERT_TRUE(store->journal().RecordCall(Call(activation, id)));
    ASSERT_TRUE(store->Commit());
  }
  auto ids_of = [](const Result<std::vector<CallRow>>& calls) {
    std::vector<int64_t> ids;
    if (calls) {
      for (const CallRow& c : *calls) ids.push_back(c.call_id);
    } else {
      ADD_FAILURE() << calls.error().message;
    }
    return ids;
  };
  std::string fresh_schema;
  {
    RawDb raw(db);
    fresh_schema = raw.Text(kSchemaText);
    raw.Exec(kDowngradeV10ToV9);
    EXPECT_EQ(raw.Int("SELECT count(*) FROM sqlite_master WHERE name='calls_by_activation'"), 1);
  }
  const std::string before = Contents(db);
  {
    auto reader = OpenSqliteReader(db);
    ASSERT_TRUE(reader) << reader.error().message;
    EXPECT_EQ(ids_of((*reader)->Calls(activation)), order) << "schema 9, read as it is";
  }
  EXPECT_EQ(Contents(db), before) << "the reader changed the file";
  auto store = MustOpen(db);
  ASSERT_TRUE(store);
  EXPECT_EQ(ids_of(store->reader().Calls(activation)), order);
  ASSERT_TRUE(store->journal().RecordCall(Call(activation, 0)));
  ASSERT_TRUE(store->Commit());
  EXPECT_EQ(ids_of(store->reader().Calls(activation)), (std::vector<int64_t>{2, 3, 1, 0}));
  RawDb raw(db);
  EXPECT_EQ(raw.Int("PRAGMA user_version"), kSchemaVersion);
  EXPECT_EQ(raw.Int("SELECT count(*) FROM sqlite_master WHERE name='calls_by_activation'"), 0);
  EXPECT_EQ(raw.Text(kSchemaText), fresh_schema) << "a migrated file has the schema of a new one";
}

// Schema 9's CHECKs keep out what schema 8's did: an origin, a verdict, an effect, a call state or
// a run state that is not one of the allowed texts is refused, and each allowed one is taken.
TEST(SqliteStoreTest, TheChecksWithoutInListsStillRefuseAnUnknownText) {
  TempDir dir;
  const std::string db = dir.File("j.db");
  {
    auto store = MustOpen(db);
    ASSERT_TRUE(store);
  }
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open_v2(db.c_str(), &raw, SQLITE_OPEN_READWRITE, nullptr), SQLITE_OK);
  auto exec = [&](const std::string& sql) {
    char* message = nullptr;
    const int rc = sqlite3_exec(raw, sql.c_str(), nullptr, nullptr, &message);
    std::string text = message ? message : "";
    sqlite3_free(message);
    return std::make_pair(rc, text);
  };
  auto activation = [](const std::string& origin) {
    return "INSERT INTO activations(flow, source_hash, manifest_hash, input, start_us, origin) VALUES('f', 'h', 'm', "
           "'1', 1, '" + origin + "')";
  };
  for (const char* origin : {"unrecorded", "adhoc", "approved", "codemode"})
    EXPECT_EQ(exec(activation(origin)).first, SQLITE_OK) << origin;
  for (const char* origin : {"bogus", "Adhoc", ""}) {
    auto [rc, message] = exec(activation(origin));
    EXPECT_EQ(rc, SQLITE_CONSTRAINT) << origin;
    EXPECT_NE(message.find("CHECK constraint failed"), std::string::npos) << message;
  }
  auto call = [](int call_id, const std::string& verdict, const std::string& effect, const std::string& state) {
    return "INSERT INTO calls(activation_id, call_id, name, args, verdict, rule, reason, effect, state, start_us) "
           "VALUES(1, " + std::to_string(call_id) + ", 'kv.get', '{}', '" + verdict + "', 'r', 'why', '" + effect +
           "', '" + state + "', 1)";
  };
  int id = 0;
  for (const char* verdict : {"allow", "deny", "needs_approval", "quota_exceeded"})
    EXPECT_EQ(exec(call(++id, verdict, "pure", "answered")).first, SQLITE_OK) << verdict;
  for (const char* effect : {"pure", "idempotent", "external"})
    EXPECT_EQ(exec(call(++id, "allow", effect, "answered")).first, SQLITE_OK) << effect;
  for (const char* state : {"decided", "started", "answered", "abandoned", "unknown"})
    EXPECT_EQ(exec(call(++id, "allow", "pure", state)).first, SQLITE_OK) << state;
  EXPECT_EQ(exec(call(++id, "maybe", "pure", "answered")).first, SQLITE_CONSTRAINT);
  EXPECT_EQ(exec(call(++id, "allow", "impure", "answered")).first, SQLITE_CONSTRAINT);
  EXPECT_EQ(exec(call(++id, "allow", "pure", "done")).first, SQLITE_CONSTRAINT);
  EXPECT_EQ(exec("UPDATE calls SET state='finished' WHERE call_id=1").first, SQLITE_CONSTRAINT);
  EXPECT_EQ(exec("UPDATE calls SET state='abandoned' WHERE call_id=1").first, SQLITE_OK);
  auto run = [](const std::string& state) {
    const bool ended = state == "ended";
    return "INSERT INTO runs(flow, input, triggered_by, state, created_us, outcome, activation_id, wake_us, "
           "waiting_for) VALUES('f', '1', 'api', '" + state + "', 1, " + (ended ? "'ok'" : "NULL") + ", " +
           (state == "running" ? "1" : "NULL") + ", " + (state == "sleeping" || state == "retrying" ? "5" : "NULL") +
           ", " + (state == "waiting" ? "'e'" : "NULL") + ")";
  };
  for (const char* state : {"queued", "running", "ended", "interrupted", "needs_reconciliation", "sleeping", "waiting",
                            "retrying"})
    EXPECT_EQ(exec(run(state)).first, SQLITE_OK) << state << ": " << exec(run(state)).second;
  EXPECT_EQ(exec(run("paused")).first, SQLITE_CONSTRAINT);
  EXPECT_EQ(exec("UPDATE runs SET state='gone' WHERE state='queued'").first, SQLITE_CONSTRAINT);
  sqlite3_close_v2(raw);
}

// The query plan of `sql` (EXPLAIN QUERY PLAN's details, one a line), with `?1` bound to `state`
// when given: SQLite plans a statement again with the values bound, as the store's are.
std::string PlanOf(const std::string& db_path, const std::string& sql, const char* state = nullptr) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* s = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, ("EXPLAIN QUERY PLAN " + sql).c_str(), -1, &s, nullptr), SQLITE_OK)
      << sql << ": " << sqlite3_errmsg(db);
  if (state) sqlite3_bind_text(s, 1, state, -1, SQLITE_TRANSIENT);
  std::string plan;
  while (sqlite3_step(s) == SQLITE_ROW) plan += std::string(reinterpret_cast<const char*>(sqlite3_column_text(s, 3))) + "\n";
  sqlite3_finalize(s);
  sqlite3_close_v2(db);
  return plan;
}

// What the restart, the resumes and the parked counts ask of the runs by state is answered by the
// partial index of schema 8, not by a scan of every run ever kept: the shapes of the store's own
// statements (sqlite_store.cpp). An index written as `state <> 'ended'`, or a query written with an
// IN list, would make each of these a scan.
TEST(SqliteStoreTest, RunsNotEndedAreFoundByTheirIndexWithoutAScan) {
  TempDir dir;
  const std::string db = dir.File("j.db");
  {
    auto store = MustOpen(db);
    ASSERT_TRUE(store);
  }
  for (const char* state : {"queued", "running", "interrupted", "needs_reconciliation", "sleeping", "waiting",
                            "retrying"}) {
    for (const char* sql : {"SELECT * FROM runs WHERE state=?1 ORDER BY id LIMIT 10", "SELECT count(*) FROM runs WHERE state=?1"}) {
      const std::string plan = PlanOf(db, sql, state);
      EXPECT_NE(plan.find("runs_unended"), std::string::npos) << state << ": " << plan;
      EXPECT_EQ(plan.find("SCAN runs"), std::string::npos) << state << ": " << plan;
    }
  }
  const std::string settle = PlanOf(
      db, "UPDATE runs SET state='ended', outcome=a.outcome FROM activations a "
          "WHERE a.id=runs.activation_id AND runs.state='running' AND a.outcome IS NOT NULL");
  EXPECT_NE(settle.find("runs_unended"), std::string::npos) << settle;
  EXPECT_EQ(settle.find("SCAN runs"), std::string::npos) << settle;
  const std::string parked =
      PlanOf(db, "SELECT count(*) FROM runs WHERE state='sleeping' OR state='waiting' OR state='retrying'");
  EXPECT_EQ(parked.find("SCAN runs"), std::string::npos) << parked;
  // The ended runs are not in it: counting them reads the table.
  EXPECT_NE(PlanOf(db, "SELECT count(*) FROM runs WHERE state=?1", "ended").find("SCAN runs"), std::string::npos);
}

// An idempotency key's run is found through runs_idempotency, not among every run of its flow: a
// partial index is used only when the query implies its condition, so the store's run_by_key (the
// shape of sqlite_store.cpp's) names `idempotency_key <> ''`. Without that term SQLite walked the
// flow's runs through runs_by_flow, one row per run of the flow, at every keyed request.
TEST(SqliteStoreTest, AnIdempotencyKeysRunIsFoundThroughItsOwnIndex) {
  TempDir dir;
  const std::string db = dir.File("j.db");
  {
    auto store = MustOpen(db);
    ASSERT_TRUE(store);
  }
  const std::string key = PlanOf(db,
                                 "SELECT id, input, coalesce(key_expires_us, 0) FROM runs WHERE flow=? AND "
                                 "idempotency_key=? AND idempotency_key <> ''");
  EXPECT_NE(key.find("runs_idempotency"), std::string::npos) << key;
  const std::string without = PlanOf(db, "SELECT id FROM runs WHERE flow=? AND idempotency_key=?");
  EXPECT_EQ(without.find("runs_idempotency"), std::string::npos) << without;
  // And the store finds a key's run, and only its own flow's.
  auto store = MustOpen(db);
  ASSERT_TRUE(store);
  auto first = store->runs().EnqueueRun(testing_support::Run("orders", "1", "k1"));
  auto other = store->runs().EnqueueRun(testing_support::Run("invoices", "2", "k1"));
  ASSERT_TRUE(first && other);
  ASSERT_TRUE(store->Commit());
  auto again = store->runs().EnqueueRun(testing_support::Run("orders", "1", "k1"));
  ASSERT_TRUE(again);
  EXPECT_TRUE(again->existing);
  EXPECT_EQ(again->run.id, first->run.id);
  EXPECT_NE(first->run.id, other->run.id);
}

// Every statement the store and its readers run on calls (the shapes of sqlite_store.cpp's and
// read_queries.cpp's) finds its rows through UNIQUE (activation_id, call_id), never by a scan;
// an activation's calls come in call id order without a sort by SQLite (schema 10 dropped the
// index in record order: the reader sorts in memory, CallsRecordedOutOfCallIdOrderAreReadInRecordOrder).
TEST(SqliteStoreTest, EveryQueryOnCallsUsesTheUniqueIndexWithoutAScan) {
  TempDir dir;
  const std::string db = dir.File("j.db");
  {
    auto store = MustOpen(db);
    ASSERT_TRUE(store);
  }
  const char* const unsorted[] = {
      "SELECT * FROM calls WHERE activation_id=? ORDER BY activation_id, call_id",
      "SELECT * FROM calls WHERE activation_id IN (SELECT id FROM activations WHERE run_id=?1 AND listed_by_run=1 "
      "UNION SELECT activation_id FROM runs WHERE id=?1) ORDER BY activation_id, call_id",
  };
  const char* const others[] = {
      "SELECT state FROM calls WHERE activation_id=? AND call_id=?",
      "UPDATE calls SET state=?, result=coalesce(?, result), error=coalesce(?, error), end_us=coalesce(?, end_us), "
      "answer_seq=coalesce(?, answer_seq), replay=coalesce(?, replay) WHERE activation_id=? AND call_id=? AND state "
      "IN (?,?,?)",
      "UPDATE calls SET state=?, error=coalesce(error, ?), end_us=coalesce(end_us, ?) WHERE activation_id=? AND state=?",
  };
  for (const char* sql : unsorted) {
    const std::string plan = PlanOf(db, sql);
    EXPECT_NE(plan.find("SEARCH calls USING INDEX sqlite_autoindex_calls_1 (activation_id=?)"), std::string::npos)
        << sql << ": " << plan;
    EXPECT_EQ(plan.find("TEMP B-TREE FOR ORDER BY"), std::string::npos) << sql << ": " << plan;
  }
  for (const char* sql : others) {
    const std::string plan = PlanOf(db, sql);
    EXPECT_NE(plan.find("sqlite_autoindex_calls_1"), std::string::npos) << sql << ": " << plan;
    EXPECT_EQ(plan.find("SCAN calls"), std::string::npos) << sql << ": " << plan;
  }
  RawDb raw(db);
  EXPECT_EQ(raw.Int("SELECT count(*) FROM sqlite_master WHERE type='index' AND tbl_name='calls'"), 1)
      << "calls has one index, its UNIQUE constraint's";
}

// Calls in flight at once are recorded in the order their answers came: an activation's calls are
// read in that order (seq), whatever their ids, on the writer's connection and a reader's.
TEST(SqliteStoreTest, CallsRecordedOutOfCallIdOrderAreReadInRecordOrder) {
  TempDir dir;
  const std::string db = dir.File("j.db");
  auto store = MustOpen(db);
  ASSERT_TRUE(store);
  auto a = store->journal().BeginActivation(Start());
  auto b = store->journal().BeginActivation(Start());
  ASSERT_TRUE(a && b);
  const std::vector<int64_t> order = {3, 1, 4, 2, 6, 5};
  for (int64_t id : order) {
    ASSERT_TRUE(store->journal().RecordCall(Call(*a, id)));
    ASSERT_TRUE(store->journal().RecordCall(Call(*b, 7 - id)));
  }
  ASSERT_TRUE(store->Commit());
  auto reader = OpenSqliteReader(db);
  ASSERT_TRUE(reader) << reader.error().message;
  for (JournalReader* r : {&store->reader(), reader->get()}) {
    auto calls = r->Calls(*a);
    ASSERT_TRUE(calls) << calls.error().message;
    std::vector<int64_t> ids;
    for (const CallRow& c : *calls) {
      EXPECT_EQ(c.activation_id, *a);
      ids.push_back(c.call_id);
    }
    EXPECT_EQ(ids, order);
    auto other = r->Calls(*b);
    ASSERT_TRUE(other);
    ids.clear();
    for (const CallRow& c : *other) ids.push_back(c.call_id);
    EXPECT_EQ(ids, (std::vector<int64_t>{4, 6, 3, 5, 1, 2}));
  }
}

// WAL frames (pages) a commit appended, from the -wal file's size: its 32-byte header, then per
// frame a 24-byte header and a page.
int64_t WalFrames(const std::string& db_path) {
  struct stat st {};
  if (::stat((db_path + "-wal").c_str(), &st) != 0 || st.st_size < 32) return 0;
  RawDb raw(db_path);
  return (st.st_size - 32) / (raw.Int("PRAGMA page_size") + 24);
}

// What a host call's records cost in the commits on its path (each frame a page written): its
// first record 2 (the calls leaf and its UNIQUE index's leaf; 3 in schema 9, with an index in record
// order), its answer 1 (the row, in place). Measured on a journal small enough to have one page
// per table and index, and no checkpoint in between.
TEST(SqliteStoreTest, AHostCallsRecordsWriteTheFewestPages) {
  TempDir dir;
  const std::string db = dir.File("j.db");
  auto store = MustOpen(db);
  ASSERT_TRUE(store);
  auto a = store->journal().BeginActivation(Start());
  ASSERT_TRUE(a);
  ASSERT_TRUE(store->Commit());
  int64_t frames = WalFrames(db);
  auto appended = [&] {
    const int64_t now = WalFrames(db);
    const int64_t n = now - frames;
    frames = now;
    return n;
  };
  ASSERT_TRUE(store->journal().RecordCall(Call(*a, 1)));
  ASSERT_TRUE(store->Commit());
  EXPECT_EQ(appended(), 2) << "a pure call, recorded with its answer";
  CallRecord intent = Call(*a, 2);
  intent.effect = Effect::kExternal;
  intent.state = CallState::kStarted;
  intent.result_json.clear();
  intent.end_unix_us.reset();
  ASSERT_TRUE(store->journal().RecordCall(intent));
  ASSERT_TRUE(store->Commit());
  EXPECT_EQ(appended(), 2) << "an external call's intent";
  CallUpdate answer;
  answer.activation_id = *a;
  answer.call_id = 2;
  answer.state = CallState::kAnswered;
  answer.result_json = R"({"status":200})";
  answer.end_unix_us = 1300;
  ASSERT_TRUE(store->journal().UpdateCall(answer));
  ASSERT_TRUE(store->Commit());
  EXPECT_EQ(appended(), 1) << "its answer";
}

// The runs of testing the readers of a run's activations: a plain run started in the batch that
// accepted it, a plain run queued in an earlier batch and started in a later one, a durable run
// resumed once (two activations), and a plain run cancelled before the activation made for it
// could start (the store refused the start: the run's row never names that activation).
struct RunsOfEveryKind {
  int64_t plain_now = 0, plain_later = 0, durable = 0, cancelled = 0;
  std::vector<int64_t> plain_now_activations, plain_later_activations, durable_activations, cancelled_activations;
};

RunsOfEveryKind MakeRunsOfEveryKind(Store& store) {
  RunsOfEveryKind k;
  auto start = [&](int64_t run, std::vector<int64_t>* ids) {
    ActivationStart s = Start("orders", 1000, {"h", 1, 2});
    s.run_id = run;
    auto a = store.journal().BeginActivation(s);
    EXPECT_TRUE(a) << a.error().message;
    if (!a) return int64_t{0};
    ids->push_back(*a);
    EXPECT_TRUE(store.journal().RecordCall(Call(*a, 1)));
    return *a;
  };
  auto later = store.runs().EnqueueRun(testing_support::Run("orders", R"({"n":2})"));
  NewRun d = testing_support::Run("orders", R"({"n":3})");
  d.durable = true;
  auto durable = store.runs().EnqueueRun(d);
  auto cancelled = store.runs().EnqueueRun(testing_support::Run("orders", R"({"n":4})"));
  EXPECT_TRUE(later && durable && cancelled);
  EXPECT_TRUE(store.Commit());
  k.plain_later = later->run.id;
  k.durable = durable->run.id;
  k.cancelled = cancelled->run.id;
  auto now = store.runs().EnqueueRun(testing_support::Run("orders", R"({"n":1})"));
  EXPECT_TRUE(now);
  k.plain_now = now->run.id;
  EXPECT_TRUE(store.runs().MarkRunStarted(k.plain_now, start(k.plain_now, &k.plain_now_activations), 1000));
  EXPECT_TRUE(store.runs().MarkRunStarted(k.plain_later, start(k.plain_later, &k.plain_later_activations), 1000));
  EXPECT_TRUE(store.runs().MarkRunStarted(k.durable, start(k.durable, &k.durable_activations), 1000));
  EXPECT_TRUE(store.runs().MarkRunEnded(k.cancelled, "cancelled", R"({"kind":"cancelled","message":"m"})", 1000));
  auto refused = store.runs().MarkRunStarted(k.cancelled, start(k.cancelled, &k.cancelled_activations), 1000);
  EXPECT_FALSE(refused);
  if (!refused) {
    EXPECT_EQ(refused.error().code, ErrorCode::kConflict);
  }
  EXPECT_TRUE(store.journal().EndActivation(End(k.cancelled_activations.at(0), Outcome::kCancelled)));
  EXPECT_TRUE(store.Commit());
  // The durable run's activation is abandoned and the run resumed.
  EXPECT_TRUE(store.journal().EndActivation(End(k.durable_activations.at(0), Outcome::kAbandoned)));
  EXPECT_TRUE(store.runs().MoveRun({k.durable, RunState::kRunning, RunState::kInterrupted, "", false}));
  EXPECT_TRUE(store.runs().MoveRun({k.durable, RunState::kInterrupted, RunState::kQueued, "", true}));
  EXPECT_TRUE(store.Commit());
  EXPECT_TRUE(store.runs().MarkRunStarted(k.durable, start(k.durable, &k.durable_activations), 2000));
  EXPECT_TRUE(store.Commit());
  return k;
}

// Every reader of a run's activations and calls (basal run show, the API's run view, resume,
// replay, settle: RunActivations and RunCalls) finds each of them, on the writer's connection and
// a reader's, whether the run's activations are indexed or named by its row.
void ExpectEveryActivationOfEveryRun(Store& store, const std::string& db, const RunsOfEveryKind& k) {
  auto reader = OpenSqliteReader(db);
  ASSERT_TRUE(reader) << reader.error().message;
  const std::pair<int64_t, const std::vector<int64_t>*> runs[] = {{k.plain_now, &k.plain_now_activations},
                                                                  {k.plain_later, &k.plain_later_activations},
                                                                  {k.durable, &k.durable_activations},
                                                                  {k.cancelled, &k.cancelled_activations}};
  for (JournalReader* r : {&store.reader(), reader->get()}) {
    for (const auto& [run, expected] : runs) {
      auto activations = r->RunActivations(run);
      ASSERT_TRUE(activations) << activations.error().message;
      std::vector<int64_t> ids;
      for (const ActivationRow& a : *activations) {
        EXPECT_EQ(a.run_id, run);
        ids.push_back(a.id);
      }
      EXPECT_EQ(ids, *expected) << "run " << run;
      auto calls = r->RunCalls(run);
      ASSERT_TRUE(calls) << calls.error().message;
      ids.clear();
      for (const CallRow& c : *calls) ids.push_back(c.activation_id);
      EXPECT_EQ(ids, *expected) << "run " << run << ": one call per activation";
    }
    auto none = r->RunActivations(k.cancelled + 100);
    ASSERT_TRUE(none);
    EXPECT_TRUE(none->empty());
  }
}

// Schema 10: only the activations a run's row may not name are in activations_by_run (a durable
// run's, and one whose start was refused); a plain run's one activation, named by its row, is not,
// so its start writes no page of that index. Every reader still finds every activation.
TEST(SqliteStoreTest, APlainRunsActivationIsFoundThroughItsRowAndOnlyTheOthersAreIndexed) {
  TempDir dir;
  const std::string db = dir.File("j.db");
  auto store = MustOpen(db);
  ASSERT_TRUE(store);
  const RunsOfEveryKind k = MakeRunsOfEveryKind(*store);
  ExpectEveryActivationOfEveryRun(*store, db, k);
  RawDb raw(db);
  EXPECT_EQ(raw.Text("SELECT group_concat(id) FROM (SELECT id FROM activations INDEXED BY activations_by_run "
                     "WHERE listed_by_run = 1 ORDER BY id)"),
            std::to_string(k.durable_activations[0]) + "," + std::to_string(k.cancelled_activations[0]) + "," +
                std::to_string(k.durable_activations[1]));
  for (const char* sql : {"SELECT * FROM activations WHERE run_id=?1 AND listed_by_run=1",
                          "SELECT * FROM activations WHERE id=(SELECT activation_id FROM runs WHERE id=?1) AND "
                          "run_id=?1 AND listed_by_run IS NULL"}) {
    const std::string plan = PlanOf(db, sql);
    EXPECT_EQ(plan.find("SCAN activations"), std::string::npos) << sql << ": " << plan;
  }
}

// What a serve run's start commits: the pages of a plain run's start in the batch that accepted
// it (the run's and the activation's rows, the activation's call, and their indexes), and one
// more for a durable run's (activations_by_run). Measured on a fresh journal (one page per table
// and index), as AHostCallsRecordsWriteTheFewestPages.
TEST(SqliteStoreTest, APlainRunsStartWritesNoPageOfTheRunsActivationIndex) {
  for (const bool durable : {false, true}) {
    TempDir dir;
    const std::string db = dir.File("j.db");
    auto store = MustOpen(db);
    ASSERT_TRUE(store);
    ASSERT_TRUE(store->runs().EnqueueRun(testing_support::Run("warm-up")));
    ASSERT_TRUE(store->Commit());
    const int64_t before = WalFrames(db);
    NewRun n = testing_support::Run("orders");
    n.durable = durable;
    auto run = store->runs().EnqueueRun(n);
    ASSERT_TRUE(run);
    ActivationStart s = Start("orders", 1000, {"h", 1, 2});
    s.run_id = run->run.id;
    auto a = store->journal().BeginActivation(s);
    ASSERT_TRUE(a);
    ASSERT_TRUE(store->runs().MarkRunStarted(run->run.id, *a, 1000));
    ASSERT_TRUE(store->Commit());
    // runs (row, runs_unended, runs_by_flow) and activations (row, activations_unfinished): 5.
    EXPECT_EQ(WalFrames(db) - before, durable ? 6 : 5) << (durable ? "durable" : "plain");
  }
}

// A run started and ended in the batch that accepted it (a serve run whose worker answered before
// the start's commit) is written once, as ended: its row never enters runs_unended, so that index
// has no page in the commit, and the row is never updated. When the same run is read between its
// start and its end, the read writes it as running first and its end updates it, as before: what
// the reader found is what the store holds.
TEST(SqliteStoreTest, ARunStartedAndEndedInTheBatchThatAcceptedItIsWrittenOnceAsEnded) {
  for (const bool read_between : {false, true}) {
    SCOPED_TRACE(read_between ? "read between its start and its end" : "nothing between");
    TempDir dir;
    const std::string db = dir.File("j.db");
    { ASSERT_TRUE(MustOpen(db)); }
    {
      RawDb raw(db);
      raw.Exec("CREATE TABLE run_updates(n INTEGER);"
               "CREATE TRIGGER count_run_updates AFTER UPDATE ON runs BEGIN INSERT INTO run_updates VALUES(1); END;");
    }
    auto store = MustOpen(db);
    ASSERT_TRUE(store);
    ASSERT_TRUE(store->runs().EnqueueRun(testing_support::Run("warm-up")));
    ASSERT_TRUE(store->Commit());
    const int64_t before = WalFrames(db);
    auto run = store->runs().EnqueueRun(testing_support::Run("orders", R"({"n":1})", "key-1"));
    ASSERT_TRUE(run);
    ActivationStart s = Start("orders", 2000, {"h", 1, 2});
    s.run_id = run->run.id;
    auto a = store->journal().BeginActivation(s);
    ASSERT_TRUE(a);
    const RunBinding binding{0, "sha256:src", "sha256:man", "sha256:text", "", 0};
    ASSERT_TRUE(store->runs().MarkRunStarted(run->run.id, *a, 2000, binding));
    if (read_between) {
      auto running = store->reader().GetRun(run->run.id);
      ASSERT_TRUE(running && running->has_value());
      EXPECT_EQ((*running)->state, RunState::kRunning);
      EXPECT_EQ((*running)->activation_id, *a);
    }
    ASSERT_TRUE(store->journal().EndActivation(End(*a, Outcome::kScriptError, 2500)));
    const std::string error = R"({"kind":"retry_refused","message":"m"})";
    ASSERT_TRUE(store->runs().MarkRunEnded(run->run.id, "script_error", error, 2500));
    auto twice = store->runs().MarkRunEnded(run->run.id, "ok", "", 2600);
    ASSERT_FALSE(twice);
    EXPECT_EQ(twice.error().code, ErrorCode::kConflict);
    ASSERT_TRUE(store->Commit());
    // runs (row, runs_by_flow, runs_idempotency) and the activation's row; when the run was
    // written running first, runs_unended too, activations_unfinished (the activation was written
    // with the run, unfinished), and the test's trigger's table.
    EXPECT_EQ(WalFrames(db) - before, read_between ? 7 : 4);
    auto row = store->reader().GetRun(run->run.id);
    ASSERT_TRUE(row && row->has_value());
    const RunRow& r = **row;
    EXPECT_EQ(r.state, RunState::kEnded);
    EXPECT_EQ(r.outcome, "script_error");
    EXPECT_EQ(r.error_json, error);
    EXPECT_EQ(r.activation_id, *a);
    EXPECT_EQ(r.started_unix_us, 2000);
    EXPECT_EQ(r.ended_unix_us, 2500);
    EXPECT_EQ(r.created_unix_us, 1000);
    EXPECT_EQ(r.input_json, R"({"n":1})");
    EXPECT_EQ(r.idempotency_key, "key-1");
    EXPECT_EQ(r.binding.source_hash, "sha256:src");
    EXPECT_EQ(r.binding.manifest_hash, "sha256:man");
    EXPECT_EQ(r.binding.manifest_text_hash, "sha256:text");
    RawDb raw(db);
    EXPECT_EQ(raw.Int("SELECT count(*) FROM run_updates"), read_between ? 1 : 0);
    auto again = store->runs().EnqueueRun(testing_support::Run("orders", R"({"n":1})", "key-1"));
    ASSERT_TRUE(again);
    EXPECT_TRUE(again->existing) << "its key is kept";
    EXPECT_EQ(again->run.id, run->run.id);
    ASSERT_TRUE(store->Commit());
  }
}

// A run's activation started and ended in the batch that accepted the run (a serve run whose worker
// answered before the start's commit) is written once, as ended: its row never enters
// activations_unfinished, so that index has no page in the commit, and the row is never updated.
// Whatever reads the store between its start and its end finds it unfinished (it is written
// first, and its end updates it); a commit between them makes it durable unfinished, where
// lease renewal and another parent's recovery find it (the crash window between the start's
// commit and the end's).
TEST(SqliteStoreTest, ARunsActivationStartedAndEndedInTheBatchThatAcceptedTheRunIsWrittenOnceAsEnded) {
  enum class Between { kNothing, kRead, kCommit };
  for (const Between between : {Between::kNothing, Between::kRead, Between::kCommit}) {
    for (const bool durable : {false, true}) {
      SCOPED_TRACE(std::string(between == Between::kNothing ? "nothing" : between == Between::kRead ? "a read" : "a commit") +
                   " between its start and its end" + (durable ? ", durable" : ""));
      TempDir dir;
      const std::string db = dir.File("j.db");
      { ASSERT_TRUE(MustOpen(db)); }
      {
        RawDb raw(db);
        raw.Exec("CREATE TABLE activation_updates(n INTEGER);"
                 "CREATE TRIGGER count_activation_updates AFTER UPDATE ON activations "
                 "BEGIN INSERT INTO activation_updates VALUES(1); END;");
      }
      auto store = MustOpen(db);
      ASSERT_TRUE(store);
      // An activation of no run and a run's in an earlier batch: the reserved id follows theirs.
      auto bare = store->journal().BeginActivation(Start("bare", 500, {"other", 7, 8}));
      ASSERT_TRUE(bare);
      ASSERT_TRUE(store->Commit());
      const int64_t before = WalFrames(db);
      NewRun n = testing_support::Run("orders");
      n.durable = durable;
      auto run = store->runs().EnqueueRun(n);
      ASSERT_TRUE(run);
      ActivationStart s = Start("orders", 2000, {"other", 1, 2});
      s.run_id = run->run.id;
      s.origin = Origin::kApproved;
      s.manifest_text_hash = "sha256:text";
      auto a = store->journal().BeginActivation(s);
      ASSERT_TRUE(a);
      EXPECT_EQ(*a, *bare + 1);
      ASSERT_TRUE(store->runs().MarkRunStarted(run->run.id, *a, 2000));
      if (between == Between::kRead) {
        auto rows = store->reader().Activations(*a, 1);
        ASSERT_TRUE(rows && rows->size() == 1);
        EXPECT_EQ((*rows)[0].id, *a);
        EXPECT_EQ((*rows)[0].outcome, "");
      }
      if (between == Between::kCommit) {
        ASSERT_TRUE(store->Commit());
        RawDb raw(db);
        EXPECT_EQ(raw.Int("SELECT count(*) FROM activations INDEXED BY activations_unfinished "
                          "WHERE owner_host='other' AND owner_pid=1 AND owner_start_ticks=2 AND outcome IS NULL"),
                  1);
        ASSERT_TRUE(store->journal().RenewLeases({"other", 1, 2}, 90'000'000));
        ASSERT_TRUE(store->Commit());
        EXPECT_EQ(raw.Int("SELECT lease_until_us FROM activations WHERE id=" + std::to_string(*a)), 90'000'000);
        // The parent is gone (another host, its lease passed): another parent's recovery closes it.
        auto other = MustOpen(db);
        ASSERT_TRUE(other);
        auto report = other->journal().RecoverAbandoned({"h", 99, 1}, 100'000'000);
        ASSERT_TRUE(report) << report.error().message;
        std::vector<int64_t> abandoned = report->abandoned_activations;
        std::sort(abandoned.begin(), abandoned.end());
        EXPECT_EQ(abandoned, (std::vector<int64_t>{*bare, *a}));
        continue;
      }
      ActivationEnd e = End(*a, Outcome::kOk, 2500);
      e.cpu_us = 33;
      e.logs_dropped = 2;
      ASSERT_TRUE(store->journal().EndActivation(e));
      auto twice = store->journal().EndActivation(End(*a, Outcome::kOk, 2600));
      ASSERT_FALSE(twice);
      EXPECT_EQ(twice.error().code, ErrorCode::kNotFound);
      ASSERT_TRUE(store->runs().MarkRunEnded(run->run.id, "ok", "", 2500));
      ASSERT_TRUE(store->Commit());
      // runs (row, runs_by_flow) and the activation's row, and activations_by_run for a durable
      // run's; with a read between, activations_unfinished, runs_unended and the trigger's table.
      EXPECT_EQ(WalFrames(db) - before, (between == Between::kRead ? 6 : 3) + (durable ? 1 : 0));
      RawDb raw(db);
      EXPECT_EQ(raw.Int("SELECT count(*) FROM activation_updates"), between == Between::kRead ? 1 : 0);
      EXPECT_EQ(raw.Int("SELECT count(*) FROM activations WHERE outcome IS NULL AND id=" + std::to_string(*a)), 0);
      EXPECT_EQ(raw.Int("SELECT count(*) FROM activations WHERE listed_by_run = 1 AND id=" + std::to_string(*a)),
                durable ? 1 : 0);
      auto rows = store->reader().Activations(*a, 1);
      ASSERT_TRUE(rows && rows->size() == 1);
      const ActivationRow& r = (*rows)[0];
      EXPECT_EQ(r.id, *a);
      EXPECT_EQ(r.flow, "orders");
      EXPECT_EQ(r.source_hash, "sha256:aa");
      EXPECT_EQ(r.manifest_hash, "sha256:bb");
      EXPECT_EQ(r.input_json, run->run.input_json) << "its run's";
      EXPECT_EQ(raw.Text("SELECT input FROM activations WHERE id=" + std::to_string(*a)), "")
          << "a run's activation keeps no input of its own";
      EXPECT_EQ(r.start_unix_us, 2000);
      EXPECT_EQ(r.end_unix_us, std::optional<int64_t>(2500));
      EXPECT_EQ(r.outcome, "ok");
      EXPECT_EQ(r.result_json, "1");
      EXPECT_EQ(r.error_json, "");
      EXPECT_EQ(r.cpu_us, 33);
      EXPECT_EQ(r.logs_dropped, 2);
      EXPECT_EQ(r.owner.host, "other");
      EXPECT_EQ(r.owner.pid, 1);
      EXPECT_EQ(r.owner.start_ticks, 2);
      EXPECT_EQ(r.lease_until_unix_us, 2000 + 60'000'000);
      EXPECT_EQ(r.origin, Origin::kApproved);
      EXPECT_EQ(r.manifest_text_hash, "sha256:text");
      EXPECT_EQ(r.run_id, run->run.id);
      auto by_run = store->reader().RunActivations(run->run.id);
      ASSERT_TRUE(by_run);
      ASSERT_EQ(by_run->size(), 1u);
      EXPECT_EQ((*by_run)[0].id, *a);
      // The next activation, of no run, takes the next id.
      auto next = store->journal().BeginActivation(Start("bare", 3000));
      ASSERT_TRUE(next);
      EXPECT_EQ(*next, *a + 1);
      ASSERT_TRUE(store->Commit());
    }
  }
}

// Two runs accepted in one batch, their activations pending together: each written with its own
// reserved id, and an activation of no run begun between them is written after them, with the
// next id. Rolled back, none of them is written, and the ids are taken again.
TEST(SqliteStoreTest, PendingActivationsKeepTheirReservedIdsAndARollbackForgetsThem) {
  TempDir dir;
  const std::string db = dir.File("j.db");
  auto store = MustOpen(db);
  ASSERT_TRUE(store);
  for (const bool commit : {false, true}) {
    SCOPED_TRACE(commit ? "committed" : "rolled back");
    auto r1 = store->runs().EnqueueRun(testing_support::Run("orders"));
    auto r2 = store->runs().EnqueueRun(testing_support::Run("orders"));
    ASSERT_TRUE(r1 && r2);
    ActivationStart s1 = Start("orders", 2000), s2 = Start("orders", 2001);
    s1.run_id = r1->run.id;
    s2.run_id = r2->run.id;
    auto a1 = store->journal().BeginActivation(s1);
    auto a2 = store->journal().BeginActivation(s2);
    ASSERT_TRUE(a1 && a2);
    EXPECT_EQ(*a1, 1);
    EXPECT_EQ(*a2, 2);
    ASSERT_TRUE(store->runs().MarkRunStarted(r1->run.id, *a1, 2000));
    ASSERT_TRUE(store->runs().MarkRunStarted(r2->run.id, *a2, 2001));
    auto bare = store->journal().BeginActivation(Start("bare", 2002));
    ASSERT_TRUE(bare);
    EXPECT_EQ(*bare, 3);
    ASSERT_TRUE(store->journal().EndActivation(End(*a2, Outcome::kOk, 2500)));
    ASSERT_TRUE(store->runs().MarkRunEnded(r2->run.id, "ok", "", 2500));
    if (!commit) {
      ASSERT_TRUE(store->Rollback());
      RawDb raw(db);
      EXPECT_EQ(raw.Int("SELECT count(*) FROM activations"), 0);
      continue;
    }
    ASSERT_TRUE(store->Commit());
    RawDb raw(db);
    EXPECT_EQ(raw.Text("SELECT group_concat(id || ':' || flow || ':' || coalesce(outcome, '-')) FROM "
                       "(SELECT * FROM activations ORDER BY id)"),
              "1:orders:-,2:orders:ok,3:bare:-");
    EXPECT_EQ(raw.Text("SELECT group_concat(id || ':' || state || ':' || activation_id) FROM (SELECT * FROM runs ORDER BY id)"),
              std::to_string(r1->run.id) + ":running:1," + std::to_string(r2->run.id) + ":ended:2");
  }
}

// A run's activation takes the largest id plus one, known without a read after this connection's
// own commits, read again once another connection has written an activation, and after a
// rollback (its ids are free again): never an id that is taken.
TEST(SqliteStoreTest, AReservedActivationIdIsTheLargestPlusOneAcrossCommitsConnectionsAndRollbacks) {
  TempDir dir;
  const std::string db = dir.File("j.db");
  auto store = MustOpen(db);
  auto other = MustOpen(db);
  ASSERT_TRUE(store && other);
  auto start_run = [&](int64_t at) -> int64_t {
    auto run = store->runs().EnqueueRun(testing_support::Run("orders"));
    EXPECT_TRUE(run) << run.error().message;
    if (!run) return 0;
    ActivationStart s = Start("orders", at);
    s.run_id = run->run.id;
    auto a = store->journal().BeginActivation(s);
    EXPECT_TRUE(a) << a.error().message;
    if (!a) return 0;
    EXPECT_TRUE(store->runs().MarkRunStarted(run->run.id, *a, at));
    return *a;
  };
  EXPECT_EQ(start_run(1000), 1);
  ASSERT_TRUE(store->Commit());
  EXPECT_EQ(start_run(1001), 2) << "after its own commit";
  ASSERT_TRUE(store->Commit());
  auto elsewhere = other->journal().BeginActivation(Start("bare", 1002));
  ASSERT_TRUE(elsewhere);
  EXPECT_EQ(*elsewhere, 3);
  ASSERT_TRUE(other->Commit());
  EXPECT_EQ(start_run(1003), 4) << "after another connection's";
  auto bare = store->journal().BeginActivation(Start("bare", 1004));
  ASSERT_TRUE(bare);
  EXPECT_EQ(*bare, 5);
  EXPECT_EQ(start_run(1005), 6) << "after a direct insert in the same batch";
  ASSERT_TRUE(store->Commit());
  EXPECT_EQ(start_run(1006), 7);
  ASSERT_TRUE(store->Rollback());
  EXPECT_EQ(start_run(1007), 7) << "a rolled-back id is free again";
  ASSERT_TRUE(store->Commit());
  RawDb raw(db);
  EXPECT_EQ(raw.Text("SELECT group_concat(id || ':' || flow) FROM (SELECT * FROM activations ORDER BY id)"),
            "1:orders,2:orders,3:bare,4:orders,5:bare,6:orders,7:orders");
}

// Schema 9 to 10: a version 9 file's activations of runs are marked from its runs (a durable
// run's and one its run's row does not name are listed), and every reader finds each of them.
TEST(SqliteMigrationTest, WriterMigratesASchema9FileFindingEveryActivationOfItsRuns) {
  TempDir dir;
  const std::string db = dir.File("v9.db");
  RunsOfEveryKind k;
  std::string fresh_schema;
  {
    auto store = MustOpen(db);
    ASSERT_TRUE(store);
    k = MakeRunsOfEveryKind(*store);
    RawDb raw(db);
    fresh_schema = raw.Text(kSchemaText);
    raw.Exec(kDowngradeV10ToV9);
  }
  auto store = MustOpen(db);
  ASSERT_TRUE(store);
  ExpectEveryActivationOfEveryRun(*store, db, k);
  RawDb raw(db);
  EXPECT_EQ(raw.Int("PRAGMA user_version"), kSchemaVersion);
  EXPECT_EQ(raw.Int("SELECT count(*) FROM activations WHERE listed_by_run = 1"), 3);
  EXPECT_EQ(raw.Text(kSchemaText), fresh_schema) << "a migrated file has the schema of a new one";
}

// A run refers to its activation: the store refuses to start a run with an activation it does
// not have (foreign key), and the refusal breaks no batch.
TEST(SqliteStoreTest, ARunCannotStartWithAnUnknownActivation) {
  TempDir dir;
  auto store = MustOpen(dir.File("j.db"));
  ASSERT_TRUE(store);
  auto run = store->runs().EnqueueRun(testing_support::Run());
  ASSERT_TRUE(run);
  auto refused = store->runs().MarkRunStarted(run->run.id, 999, 2000);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kDatabase);
  auto zero = store->runs().MarkRunStarted(run->run.id, 0, 2000);
  ASSERT_FALSE(zero);
  EXPECT_EQ(zero.error().code, ErrorCode::kInvalidArgument);
  ASSERT_TRUE(store->Commit());
  auto row = store->reader().GetRun(run->run.id);
  ASSERT_TRUE(row && row->has_value());
  EXPECT_EQ((*row)->state, RunState::kQueued);
}

// A run accepted and started in one batch is written once, as running (EnqueueRun keeps it pending,
// MarkRunStarted inserts it started): no UPDATE of the run's row, counted by a trigger the test adds.
// A run accepted in one batch and started in a later one is inserted queued and updated, as before;
// every column reads the same either way.
TEST(SqliteStoreTest, ARunStartedInTheBatchThatAcceptedItIsWrittenOnceAsRunning) {
  TempDir dir;
  const std::string path = dir.File("j.db");
  { ASSERT_TRUE(MustOpen(path)); }
  {
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &raw), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(raw,
                           "CREATE TABLE run_updates(n INTEGER);"
                           "CREATE TRIGGER count_run_updates AFTER UPDATE ON runs BEGIN INSERT INTO run_updates VALUES(1); END;",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(raw);
  }
  auto store = MustOpen(path);
  ASSERT_TRUE(store);
  RunBinding binding{0, "sha256:src", "sha256:man", "sha256:text", "", 0};
  auto once = store->runs().EnqueueRun(testing_support::Run("orders", R"({"n":1})"));
  ASSERT_TRUE(once);
  auto later = store->runs().EnqueueRun(testing_support::Run("orders", R"({"n":2})"));
  ASSERT_TRUE(later);
  EXPECT_EQ(later->run.id, once->run.id + 1);
  ActivationStart start = Start("orders", 2000);
  start.run_id = once->run.id;
  auto a = store->journal().BeginActivation(start);
  ASSERT_TRUE(a);
  ASSERT_TRUE(store->runs().MarkRunStarted(once->run.id, *a, 2000, binding));
  ASSERT_TRUE(store->Commit());
  // The second, not started in its batch, was written queued at the commit.
  auto queued = store->reader().GetRun(later->run.id);
  ASSERT_TRUE(queued && queued->has_value());
  EXPECT_EQ((*queued)->state, RunState::kQueued);
  EXPECT_EQ((*queued)->input_json, R"({"n":2})");
  start.run_id = later->run.id;
  auto b = store->journal().BeginActivation(start);
  ASSERT_TRUE(b);
  ASSERT_TRUE(store->runs().MarkRunStarted(later->run.id, *b, 2000, binding));
  ASSERT_TRUE(store->Commit());
  for (auto [id, activation] : {std::pair{once->run.id, *a}, std::pair{later->run.id, *b}}) {
    auto row = store->reader().GetRun(id);
    ASSERT_TRUE(row && row->has_value()) << id;
    const RunRow& r = **row;
    EXPECT_EQ(r.state, RunState::kRunning);
    EXPECT_EQ(r.activation_id, activation);
    EXPECT_EQ(r.started_unix_us, 2000);
    EXPECT_EQ(r.created_unix_us, 1000);
    EXPECT_EQ(r.flow, "orders");
    EXPECT_EQ(r.trigger, "api");
    EXPECT_EQ(r.binding.source_hash, "sha256:src");
    EXPECT_EQ(r.binding.manifest_hash, "sha256:man");
    EXPECT_EQ(r.binding.manifest_text_hash, "sha256:text");
  }
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &raw), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(raw, "SELECT count(*) FROM run_updates", -1, &st, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int64(st, 0), 1) << "only the run started in a later batch is updated";
  sqlite3_finalize(st);
  sqlite3_close(raw);
}

// A run accepted in the open batch and not yet written is there for every statement after it: a
// read of it, a listing, its end without a start, another run with its idempotency key; a rolled
// back batch leaves none of them; and the ids reserved never meet a run another process wrote.
TEST(SqliteStoreTest, ARunAcceptedInTheOpenBatchIsThereForEveryStatementAfterIt) {
  TempDir dir;
  const std::string path = dir.File("j.db");
  auto store = MustOpen(path);
  ASSERT_TRUE(store);
  auto run = store->runs().EnqueueRun(testing_support::Run());
  ASSERT_TRUE(run);
  auto read = store->reader().GetRun(run->run.id);
  ASSERT_TRUE(read && read->has_value());
  EXPECT_EQ((*read)->state, RunState::kQueued);
  auto keyed = store->runs().EnqueueRun(testing_support::Run("orders", R"({"n":1})", "key-1"));
  ASSERT_TRUE(keyed);
  auto again = store->runs().EnqueueRun(testing_support::Run("orders", R"({"n":1})", "key-1"));
  ASSERT_TRUE(again);
  EXPECT_TRUE(again->existing);
  EXPECT_EQ(again->run.id, keyed->run.id);
  auto listed = store->reader().ListRuns({});
  ASSERT_TRUE(listed);
  EXPECT_EQ(listed->size(), 2u);
  auto ended_unstarted = store->runs().EnqueueRun(testing_support::Run("orders", R"({"n":3})"));
  ASSERT_TRUE(ended_unstarted);
  ASSERT_TRUE(store->runs().MarkRunEnded(ended_unstarted->run.id, "cancelled", R"({"kind":"cancelled"})", 1500));
  ASSERT_TRUE(store->Commit());
  auto ended = store->reader().GetRun(ended_unstarted->run.id);
  ASSERT_TRUE(ended && ended->has_value());
  EXPECT_EQ((*ended)->state, RunState::kEnded);
  EXPECT_EQ((*ended)->outcome, "cancelled");

  auto dropped = store->runs().EnqueueRun(testing_support::Run("orders", R"({"n":4})"));
  ASSERT_TRUE(dropped);
  ASSERT_TRUE(store->Rollback());
  auto gone = store->reader().GetRun(dropped->run.id);
  ASSERT_TRUE(gone);
  EXPECT_FALSE(gone->has_value());

  // Another process writes a run between two batches of this one: the next id reserved here is
  // past it.
  {
    auto other = MustOpen(path);
    ASSERT_TRUE(other);
    auto theirs = other->runs().EnqueueRun(testing_support::Run("orders", R"({"n":5})"));
    ASSERT_TRUE(theirs);
    ASSERT_TRUE(other->Commit());
    auto mine = store->runs().EnqueueRun(testing_support::Run("orders", R"({"n":6})"));
    ASSERT_TRUE(mine);
    EXPECT_EQ(mine->run.id, theirs->run.id + 1);
    ASSERT_TRUE(store->Commit());
    auto row = other->reader().GetRun(mine->run.id);
    ASSERT_TRUE(row && row->has_value());
    EXPECT_EQ((*row)->input_json, R"({"n":6})");
  }
}

// A run's admission reads the newest approval once per change (the store keeps it while no other
// connection commits): another process's revocation or new version is seen by the next read, in a
// batch as the admission reads it and outside one; so is this connection's own. Another process's
// run, committed in between, is never given the id this connection reserves next.
TEST(SqliteStoreTest, TheNewestApprovalKeptIsForgottenWhenAnotherProcessCommits) {
  TempDir dir;
  const std::string path = dir.File("j.db");
  auto mine = MustOpen(path);
  auto theirs = MustOpen(path);
  ASSERT_TRUE(mine && theirs);
  auto newest = [&](const std::string& name, bool in_batch) {
    if (in_batch) {
      EXPECT_TRUE(mine->OpenBatch());
    }
    auto row = mine->reader().NewestVersion(ApprovalKind::kFlow, name);
    EXPECT_TRUE(row && *row);
    if (in_batch) {
      EXPECT_TRUE(mine->Commit());
    }
    return row && *row ? **row : ApprovalRow{};
  };
  for (bool in_batch : {true, false}) {
    SCOPED_TRACE(in_batch ? "in a batch" : "outside a batch");
    const std::string name = in_batch ? "orders" : "invoices";
    ASSERT_TRUE(theirs->catalog().Approve(FlowApproval(name, "export default () => 1;\n", 0)));
    const ApprovalRow first = newest(name, in_batch);
    EXPECT_EQ(first.version, 1);
    EXPECT_EQ(newest(name, in_batch).id, first.id);  // kept
    auto approved = theirs->catalog().Approve(FlowApproval(name, "export default () => 2;\n", 1));
    ASSERT_TRUE(approved) << approved.error().message;
    const ApprovalRow second = newest(name, in_batch);
    EXPECT_EQ(second.version, 2);
    EXPECT_FALSE(second.revoked_unix_us);
    ASSERT_TRUE(theirs->catalog().Revoke(ApprovalKind::kFlow, name, 2, {0, "root"}, 9000, "bad"));
    const ApprovalRow revoked = newest(name, in_batch);
    EXPECT_EQ(revoked.id, second.id);
    EXPECT_EQ(revoked.revoked_unix_us, std::optional<int64_t>(9000)) << "the revocation must refuse the next run";
  }
  // This connection's own approval and revocation.
  ASSERT_TRUE(mine->catalog().Approve(FlowApproval("receipts", "export default () => 1;\n", 0)));
  EXPECT_FALSE(newest("receipts", true).revoked_unix_us);
  ASSERT_TRUE(mine->catalog().Revoke(ApprovalKind::kFlow, "receipts", 1, {0, "root"}, 9100, "own"));
  EXPECT_EQ(newest("receipts", true).revoked_unix_us, std::optional<int64_t>(9100));

  // Run ids: this connection knows its largest; another's run in between moves it.
  auto first = mine->runs().EnqueueRun(testing_support::Run("orders", R"({"n":1})"));
  ASSERT_TRUE(first);
  ASSERT_TRUE(mine->Commit());
  auto second = mine->runs().EnqueueRun(testing_support::Run("orders", R"({"n":2})"));
  ASSERT_TRUE(second);
  EXPECT_EQ(second->run.id, first->run.id + 1);
  ASSERT_TRUE(mine->Commit());
  auto other = theirs->runs().EnqueueRun(testing_support::Run("orders", R"({"n":3})"));
  ASSERT_TRUE(other);
  EXPECT_EQ(other->run.id, second->run.id + 1);
  ASSERT_TRUE(theirs->Commit());
  auto third = mine->runs().EnqueueRun(testing_support::Run("orders", R"({"n":4})"));
  ASSERT_TRUE(third);
  EXPECT_EQ(third->run.id, other->run.id + 1);
  ASSERT_TRUE(mine->Commit());
  for (auto [id, input] : {std::pair{first->run.id, R"({"n":1})"}, std::pair{second->run.id, R"({"n":2})"},
                           std::pair{other->run.id, R"({"n":3})"}, std::pair{third->run.id, R"({"n":4})"}}) {
    auto row = theirs->reader().GetRun(id);
    ASSERT_TRUE(row && row->has_value()) << id;
    EXPECT_EQ((*row)->input_json, input);
  }
}

// UtcText computes the calendar itself (owner.cpp): the same text as gmtime_r and snprintf, at
// every 7th day from 1970 to 9999 with a moving time of day, at each day's edges around every
// leap day and year's end, and past the range it computes (where it is libc's anyway).
TEST(UtcTextTest, MatchesGmtimeFrom1970To9999) {
  auto libc = [](int64_t unix_us) {
    const time_t secs = static_cast<time_t>(unix_us / 1'000'000);
    tm t{};
    gmtime_r(&secs, &t);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", t.tm_year + 1900, t.tm_mon + 1, t.tm_mday,
                  t.tm_hour, t.tm_min, t.tm_sec, static_cast<int>((unix_us % 1'000'000) / 1000));
    return std::string(buf);
  };
  constexpr int64_t kDay = 86'400'000'000;
  constexpr int64_t kLastDay = 2'932'896;  // 9999-12-31
  int checked = 0;
  for (int64_t day = 0; day <= kLastDay; day += 7) {
    const int64_t us = day * kDay + (day * 7'919'113'117) % kDay;
    ASSERT_EQ(UtcText(us), libc(us)) << us;
    ++checked;
  }
  for (int64_t day = 0; day <= kLastDay; ++day) {
    tm t{};
    const time_t secs = static_cast<time_t>(day * 86'400);
    gmtime_r(&secs, &t);
    const bool edge = (t.tm_mon == 1 && t.tm_mday >= 28) || (t.tm_mon == 2 && t.tm_mday == 1) ||
                      (t.tm_mon == 11 && t.tm_mday == 31) || (t.tm_mon == 0 && t.tm_mday == 1);
    if (!edge) continue;
    for (const int64_t us : {day * kDay, day * kDay + kDay - 1, day * kDay + 999, day * kDay + 43'200'000'000}) {
      ASSERT_EQ(UtcText(us), libc(us)) << us;
      ++checked;
    }
  }
  EXPECT_GT(checked, 400'000);
  EXPECT_EQ(UtcText(0), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(UtcText(951'782'400'000'000), "2000-02-29T00:00:00.000Z");
  EXPECT_EQ(UtcText(253'402'300'799'999'999), "9999-12-31T23:59:59.999Z");
  for (const int64_t us : {int64_t{-1}, int64_t{-86'400'000'001}, int64_t{253'402'300'800'000'000}})
    EXPECT_EQ(UtcText(us), libc(us)) << us;
}

// The unfinished schema-1 activation has no recorded owner: recovery closes it.
TEST(SqliteMigrationTest, UnfinishedSchema1ActivationIsRecovered) {
  TempDir dir;
  const std::string db = dir.File("v1.db");
  WriteV1Journal(db);
  auto store = MustOpen(db);
  ASSERT_TRUE(store);
  auto report = store->journal().RecoverAbandoned({"h", 99, 1}, 7000);
  ASSERT_TRUE(report) << report.error().message;
  EXPECT_EQ(report->abandoned_activations, (std::vector<int64_t>{2}));
  auto rows = store->reader().Activations(2, 1);
  ASSERT_TRUE(rows);
  EXPECT_EQ((*rows)[0].outcome, "abandoned");
  EXPECT_NE((*rows)[0].error_json.find("not recorded"), std::string::npos) << (*rows)[0].error_json;
}

// --- Files: modes, creation by many processes at once ------------------------------------------

TEST(SqliteFilesTest, NewJournalAndItsWalAndShmAreOwnerOnlyWhateverTheUmask) {
  TempDir dir;
  const std::string db = dir.File("j.db");
  const mode_t old_umask = ::umask(0);  // the most permissive umask: modes must not depend on it
  auto store = MustOpen(db);
  ::umask(old_umask);
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->journal().BeginActivation(Start()));
  ASSERT_TRUE(store->Commit());
  EXPECT_EQ(ModeOf(db), 0600u);
  ASSERT_TRUE(fs::exists(db + "-wal"));
  ASSERT_TRUE(fs::exists(db + "-shm"));
  EXPECT_EQ(ModeOf(db + "-wal"), 0600u);
  EXPECT_EQ(ModeOf(db + "-shm"), 0600u);
  std::vector<std::string> stray;
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    const std::string name = entry.path().filename().string();
    if (name != "j.db" && name != "j.db-wal" && name != "j.db-shm") stray.push_back(name);
  }
  EXPECT_TRUE(stray.empty()) << stray[0];
}

TEST(SqliteFilesTest, ExistingJournalKeepsItsMode) {
  TempDir dir;
  const std::string db = dir.File("j.db");
  { std::ofstream out(db); }
  ASSERT_EQ(::chmod(db.c_str(), 0640), 0);
  ASSERT_TRUE(MustOpen(db));
  EXPECT_EQ(ModeOf(db), 0640u);
}

TEST(SqliteFilesTest, EnsurePrivateDirectoryMakesMissingDirectories0700) {
  TempDir dir;
  ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);
  const mode_t old_umask = ::umask(0);
  auto made = EnsurePrivateDirectory(dir.File("a/b/c"));
  ::umask(old_umask);
  ASSERT_TRUE(made) << made.error().message;
  EXPECT_EQ(ModeOf(dir.File("a")), 0700u);
  EXPECT_EQ(ModeOf(dir.File("a/b")), 0700u);
  EXPECT_EQ(ModeOf(dir.File("a/b/c")), 0700u);
  EXPECT_EQ(ModeOf(dir.path()), 0755u);  // existing: left as it was
  EXPECT_TRUE(EnsurePrivateDirectory(dir.File("a/b/c")));
  { std::ofstream out(dir.File("file")); }
  auto not_dir = EnsurePrivateDirectory(dir.File("file"));
  ASSERT_FALSE(not_dir);
  EXPECT_EQ(not_dir.error().code, ErrorCode::kIo);
  EXPECT_NE(not_dir.error().message.find(dir.File("file")), std::string::npos) << not_dir.error().message;
  auto under_file = EnsurePrivateDirectory(dir.File("file/x"));
  ASSERT_FALSE(under_file);
  EXPECT_NE(under_file.error().message.find("cannot create directory"), std::string::npos);
}

// One round: `processes` children wait on a pipe until all are forked, then open the same new
// journal at once, each begin and end an activation and commit. Returns the failures' messages.
std::vector<std::string> CreateAtOnce(const std::string& db, int processes) {
  int gate[2], report[2];
  if (::pipe(gate) != 0 || ::pipe(report) != 0) return {"pipe failed"};
  std::vector<pid_t> children;
  for (int i = 0; i < processes; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(gate[1]);
      ::close(report[0]);
      char byte;
      (void)!::read(gate[0], &byte, 1);  // returns 0 when the parent closes the gate
      std::string failure;
      auto store = OpenSqliteStore({.path = db});
      if (!store) {
        failure = store.error().message;
      } else {
        JournalStore& j = (*store)->journal();
        auto id = j.BeginActivation(Start("racer.js"));
        if (!id) failure = id.error().message;
        if (failure.empty()) {
          if (auto e = j.EndActivation(End(*id)); !e) failure = e.error().message;
        }
        if (failure.empty()) {
          if (auto c = (*store)->Commit(); !c) failure = c.error().message;
        }
      }
      if (!failure.empty()) {
        failure = "pid " + std::to_string(::getpid()) + ": " + failure + "\n";
        (void)!::write(report[1], failure.data(), failure.size());
      }
      _exit(failure.empty() ? 0 : 1);
    }
    children.push_back(pid);
  }
  ::close(gate[0]);
  ::close(report[1]);
  ::close(gate[1]);  // go
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(report[0], buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
  ::close(report[0]);
  std::vector<std::string> failures;
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failures.push_back("child " + std::to_string(pid) + " failed");
  }
  if (!text.empty()) failures.push_back(text);
  return failures;
}

TEST(SqliteFilesTest, ManyProcessesCreatingOneNewJournalAllSucceed) {
  constexpr int kRounds = 20;
  constexpr int kProcesses = 24;
  TempDir dir;
  for (int round = 0; round < kRounds; ++round) {
    const std::string db = dir.File("race" + std::to_string(round) + ".db");
    const std::vector<std::string> failures = CreateAtOnce(db, kProcesses);
    ASSERT_TRUE(failures.empty()) << "round " << round << ": " << failures.size() << " failures; "
                                  << failures.back();
    RawDb raw(db);
    EXPECT_EQ(raw.Int("SELECT count(*) FROM activations WHERE outcome='ok'"), kProcesses);
    EXPECT_EQ(raw.Int("SELECT count(*) FROM meta"), 1);  // created once
    EXPECT_EQ(ModeOf(db), 0600u);
  }
}

// --- The reader -------------------------------------------------------------------------------

TEST(SqliteReaderTest, MissingFileIsNotFoundAndNotCreated) {
  TempDir dir;
  const std::string db = dir.File("none.db");
  auto r = OpenSqliteReader(db);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kNotFound);
  EXPECT_NE(r.error().message.find(db), std::string::npos) << r.error().message;
  EXPECT_FALSE(fs::exists(db));
}

TEST(SqliteReaderTest, EmptyFileIsRefusedClearly) {
  TempDir dir;
  const std::string db = dir.File("empty.db");
  { std::ofstream out(db); }
  auto r = OpenSqliteReader(db);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kDatabase);
  EXPECT_NE(r.error().message.find("is empty: not a basal journal yet; run a flow first or choose another --db"),
            std::string::npos)
      << r.error().message;
  EXPECT_EQ(fs::file_size(db), 0u);
}

TEST(SqliteReaderTest, SeesOnlyCommittedBatchesAndWritesNothing) {
  TempDir dir;
  const std::string db = dir.File("j.db");
  auto store = MustOpen(db);
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->journal().BeginActivation(Start("one.js")));
  ASSERT_TRUE(store->Commit());
  ASSERT_TRUE(store->journal().BeginActivation(Start("two.js")));  // uncommitted
  auto reader = OpenSqliteReader(db);
  ASSERT_TRUE(reader) << reader.error().message;
  auto rows = (*reader)->Activations(std::nullopt, 10);
  ASSERT_TRUE(rows) << rows.error().message;
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].flow, "one.js");
  ASSERT_TRUE(store->Commit());  // a reader never holds the writer up
  rows = (*reader)->Activations(std::nullopt, 10);
  ASSERT_TRUE(rows);
  EXPECT_EQ(rows->size(), 2u);
}

// Reads `db` as user and group 65534 (nobody) in a child process; returns what it saw or why not.
std::string ReadAsNobody(const std::string& db) {
  int out[2];
  if (::pipe(out) != 0) return "pipe failed";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(out[0]);
    std::string text;
    if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) {
      text = "cannot become nobody";
    } else {
      auto reader = OpenSqliteReader(db);
      if (!reader) {
        text = "error: " + reader.error().message;
      } else {
        auto rows = (*reader)->Activations(std::nullopt, 100);
        if (!rows) {
          text = "error: " + rows.error().message;
        } else {
          for (const ActivationRow& a : *rows) text += a.flow + ";";
        }
      }
    }
    (void)!::write(out[1], text.data(), text.size());
    _exit(0);
  }
  ::close(out[1]);
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(out[0], buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
  ::close(out[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return text;
}

class ReadOnlyUserTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to make files another user may only read";
    ASSERT_EQ(::chmod(dir_.path().c_str(), 0755), 0);  // readable, not writable, by others
  }
  TempDir dir_;
};

// The journal was closed cleanly: no -wal or -shm, and nobody may create them in the directory.
TEST_F(ReadOnlyUserTest, ReadsAClosedJournal) {
  const std::string db = dir_.File("j.db");
  {
    auto store = MustOpen(db);
    ASSERT_TRUE(store);
    ASSERT_TRUE(store->journal().BeginActivation(Start("a.js")));
    ASSERT_TRUE(store->journal().BeginActivation(Start("b.js")));
    ASSERT_TRUE(store->Commit());
  }
  ASSERT_FALSE(fs::exists(db + "-wal"));
  ASSERT_EQ(::chmod(db.c_str(), 0644), 0);
  const std::string before = Contents(db);
  EXPECT_EQ(ReadAsNobody(db), "a.js;b.js;");
  EXPECT_EQ(Contents(db), before);
  EXPECT_FALSE(fs::exists(db + "-wal"));
  EXPECT_FALSE(fs::exists(db + "-shm"));
}

// A writer has it open (its batches in the WAL, not yet in the database file): the reader sees
// them through the -wal and -shm it may only read.
TEST_F(ReadOnlyUserTest, ReadsAJournalBeingWritten) {
  const std::string db = dir_.File("j.db");
  auto store = MustOpen(db);
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->journal().BeginActivation(Start("a.js")));
  ASSERT_TRUE(store->Commit());
  for (const std::string& f : {db, db + "-wal", db + "-shm"}) ASSERT_EQ(::chmod(f.c_str(), 0644), 0) << f;
  EXPECT_EQ(ReadAsNobody(db), "a.js;");
  ASSERT_TRUE(store->journal().BeginActivation(Start("b.js")));
  ASSERT_TRUE(store->Commit());
  EXPECT_EQ(ReadAsNobody(db), "a.js;b.js;");
}

// The default: a journal of this user's own is not readable by another user at all.
TEST_F(ReadOnlyUserTest, AnotherUserCannotReadANewJournal) {
  const std::string db = dir_.File("j.db");
  ASSERT_TRUE(MustOpen(db));
  const std::string seen = ReadAsNobody(db);
  EXPECT_EQ(seen.rfind("error: ", 0), 0u) << seen;
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
    sqlite3_vfs_register(&vfs_, /*makeDflt=*/1);  // OpenSqliteStore uses the default VFS
  }
  ~FaultyVfs() {
    g_fail_wal_writes = false;
    sqlite3_vfs_unregister(&vfs_);
    sqlite3_vfs_register(g_real_vfs, 1);
  }

 private:
  sqlite3_vfs vfs_;
};

TEST(SqliteStoreTest, FailedCommitIsRecoverableByRollback) {
  static_assert(sizeof(FaultyFile) % 8 == 0, "the real file after FaultyFile must stay aligned");
  TempDir dir;
  const std::string db = dir.File("j.db");
  int64_t kept = 0;
  {
    FaultyVfs vfs;
    auto store = MustOpen(db);
    ASSERT_TRUE(store);
    JournalStore& j = store->journal();
    KvStore& kv = store->kv();
    auto first = j.BeginActivation(Start("kept.js"));
    ASSERT_TRUE(first);
    kept = *first;
    ASSERT_TRUE(store->Commit());

    auto lost = j.BeginActivation(Start("lost.js"));
    ASSERT_TRUE(lost);
    ASSERT_TRUE(kv.Put("orders", "lost", "1"));
    g_fail_wal_writes = true;
    auto c = store->Commit();
    g_fail_wal_writes = false;
    ASSERT_FALSE(c) << "the injected WAL write failure did not reach Commit()";
    EXPECT_EQ(c.error().code, ErrorCode::kDatabase);
    EXPECT_NE(c.error().message.find("cannot commit"), std::string::npos) << c.error().message;
    EXPECT_NE(c.error().message.find("SQLITE_IOERR"), std::string::npos) << c.error().message;
    EXPECT_NE(c.error().message.find("Rollback()"), std::string::npos) << c.error().message;

    // SQLite may already have rolled the batch back; until Rollback() nothing may be written,
    // or it would commit on its own, outside any batch.
    auto stray = kv.Put("orders", "stray", "1");
    EXPECT_FALSE(stray) << "a write between a failed Commit() and Rollback() was accepted";
    if (!stray) {
      EXPECT_NE(stray.error().message.find("Rollback()"), std::string::npos) << stray.error().message;
    }
    {
      RawDb raw(db);
      EXPECT_EQ(raw.Int("SELECT count(*) FROM kv"), 0);
    }

    ASSERT_TRUE(store->Rollback());
    EXPECT_FALSE(store->HasPendingBatch());
    auto gone = kv.Get("orders", "lost");
    ASSERT_TRUE(gone) << gone.error().message;
    EXPECT_FALSE(gone->has_value());

    auto next = j.BeginActivation(Start("next.js"));
    ASSERT_TRUE(next) << next.error().message;
    ASSERT_TRUE(kv.Put("orders", "next", "2"));
    ASSERT_TRUE(store->Commit());
  }
  auto store = MustOpen(db);
  ASSERT_TRUE(store);
  auto rows = store->reader().Activations(std::nullopt, 10);
  ASSERT_TRUE(rows);
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].id, kept);
  EXPECT_EQ((*rows)[0].flow, "kept.js");
  EXPECT_EQ((*rows)[1].flow, "next.js");
  auto lost = store->kv().Get("orders", "lost");
  ASSERT_TRUE(lost);
  EXPECT_FALSE(lost->has_value());
  auto next = store->kv().Get("orders", "next");
  ASSERT_TRUE(next && next->has_value());
  auto stray = store->kv().Get("orders", "stray");
  ASSERT_TRUE(stray);
  EXPECT_FALSE(stray->has_value());
}

}  // namespace
}  // namespace basal
