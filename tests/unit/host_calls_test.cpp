// Unit tests of the host-call registry and the built-in host calls: log (argument shapes,
// truncation) and kv.* (grant constraints, authorization, and each call against a real journal,
// kv.cas and kv.incr included).
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "basal/host_call.h"
#include "basal/manifest.h"
#include "parent/host_calls/kv.h"
#include "parent/host_calls/log.h"
#include "parent/store/sqlite/sqlite_store.h"

namespace basal {
namespace {

namespace fs = std::filesystem;

void NoopHandler(const HostCallContext&, const Json&, HostCallReply) {}

HostCallSpec Spec(std::string name) {
  HostCallSpec spec;
  spec.name = std::move(name);
  spec.handler = NoopHandler;
  return spec;
}

// --- Registry ------------------------------------------------------------------------------------

TEST(HostCallRegistryTest, RegisterFindNames) {
  HostCallRegistry registry;
  ASSERT_TRUE(registry.Register(Spec("mail.send")));
  ASSERT_TRUE(registry.Register(Spec("a_b-c.d2")));
  ASSERT_NE(registry.Find("mail.send"), nullptr);
  EXPECT_EQ(registry.Find("mail.send")->name, "mail.send");
  EXPECT_EQ(registry.Find("mail"), nullptr);
  EXPECT_EQ(registry.Names(), (std::vector<std::string>{"a_b-c.d2", "mail.send"}));
}

TEST(HostCallRegistryTest, Refusals) {
  HostCallRegistry registry;
  ASSERT_TRUE(registry.Register(Spec("mail.send")));
  auto dup = registry.Register(Spec("mail.send"));
  ASSERT_FALSE(dup);
  EXPECT_EQ(dup.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(dup.error().message, R"(host call "mail.send": already registered; each name can be registered once)");
  EXPECT_FALSE(registry.Register(Spec("")));
  HostCallSpec no_handler;
  no_handler.name = "x";
  auto missing = registry.Register(std::move(no_handler));
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().message, R"(host call "x": the spec has no handler)");
  for (const char* bad : {"a b", "a\nb", ".a", "a.", "a..b", "a/b", "\"q\""}) {
    EXPECT_FALSE(registry.Register(Spec(bad))) << bad;
  }
  EXPECT_FALSE(registry.Register(Spec(std::string(129, 'a'))));
  EXPECT_TRUE(registry.Register(Spec(std::string(128, 'a'))));
  EXPECT_EQ(registry.Names().size(), 2u);
}

// --- log -----------------------------------------------------------------------------------------

struct Logged {
  std::string level, message;
  int64_t activation_id;
};

class LogTest : public ::testing::Test {
 protected:
  LogSink sink_ = [this](const HostCallContext& ctx, std::string_view level, std::string_view message) {
    logged_.push_back({std::string(level), std::string(message), ctx.activation_id});
  };
  HostCallContext ctx_{7, 1, "hello.js", "", nullptr, "log"};
  std::vector<Logged> logged_;
};

TEST_F(LogTest, RegistersWithoutGrant) {
  HostCallRegistry registry;
  ASSERT_TRUE(RegisterLogHostCall(registry, sink_));
  const HostCallSpec* spec = registry.Find("log");
  ASSERT_NE(spec, nullptr);
  EXPECT_FALSE(spec->needs_grant);
  EXPECT_FALSE(spec->check_grant);
  EXPECT_FALSE(spec->authorize);
  EXPECT_FALSE(RegisterLogHostCall(registry, sink_));  // twice
  HostCallRegistry other;
  EXPECT_FALSE(RegisterLogHostCall(other, nullptr));
}

TEST_F(LogTest, EveryLevel) {
  for (const char* level : {"log", "info", "warn", "error", "debug"}) {
    HostCallAnswer a = ServeLog(ctx_, {{"level", level}, {"message", "hi"}}, sink_);
    EXPECT_TRUE(a.ok) << level;
    EXPECT_TRUE(a.value.is_null());
  }
  ASSERT_EQ(logged_.size(), 5u);
  EXPECT_EQ(logged_[2].level, "warn");
  EXPECT_EQ(logged_[2].message, "hi");
  EXPECT_EQ(logged_[2].activation_id, 7);
}

TEST_F(LogTest, BadArguments) {
  struct Case {
    Json args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {Json::array(), "log: arguments must be an object {level, message} (got [])"},
      {{{"message", "m"}}, "log: \"level\" must be one of log, info, warn, error, debug (got nothing)"},
      {{{"level", "trace"}, {"message", "m"}},
       "log: \"level\" must be one of log, info, warn, error, debug (got \"trace\")"},
      {{{"level", 1}, {"message", "m"}}, "log: \"level\" must be one of log, info, warn, error, debug (got 1)"},
      {{{"level", "info"}}, "log: \"message\" must be a string (got nothing)"},
      {{{"level", "info"}, {"message", 5}}, "log: \"message\" must be a string (got 5)"},
      {{{"level", "info"}, {"message", "m"}, {"extra", 1}},
       "log: unknown argument \"extra\" (expected level, message)"},
  };
  for (const Case& c : cases) {
    HostCallAnswer a = ServeLog(ctx_, c.args, sink_);
    EXPECT_FALSE(a.ok) << c.args.dump();
    EXPECT_EQ(a.error_name, "TypeError");
    EXPECT_EQ(a.error_message, c.message);
  }
  EXPECT_TRUE(logged_.empty());
}

TEST_F(LogTest, LongMessagesAreTruncatedWithAMarker) {
  ASSERT_TRUE(ServeLog(ctx_, {{"level", "info"}, {"message", std::string(kLogMessageLimitBytes, 'x')}}, sink_).ok);
  EXPECT_EQ(logged_.back().message.size(), kLogMessageLimitBytes);  // at the limit: untouched

  // One byte over, with a two-byte character straddling the limit: cut before it, marker after.
  std::string text = std::string(kLogMessageLimitBytes - 1, 'x') + "\xC3\xA9" + "tail";
  ASSERT_TRUE(ServeLog(ctx_, {{"level", "info"}, {"message", text}}, sink_).ok);
  const std::string& got = logged_.back().message;
  EXPECT_EQ(got.substr(0, kLogMessageLimitBytes - 1), std::string(kLogMessageLimitBytes - 1, 'x'));
  EXPECT_EQ(got.substr(kLogMessageLimitBytes - 1),
            " [basal: message truncated, " + std::to_string(text.size()) + " bytes in all, limit 65536]");
}

// --- kv ------------------------------------------------------------------------------------------

TEST(KvGrantTest, Constraints) {
  EXPECT_TRUE(CheckKvGrant(Json::parse(R"({"namespaces": ["orders"]})"), "grants.kv.get"));
  EXPECT_TRUE(CheckKvGrant(Json::parse(R"({"namespaces": ["a", "b", "*"]})"), "grants.kv.get"));
  auto bad = CheckKvGrant(Json::parse(R"({"namespaces": ["a", null]})"), "grants.kv.list");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(bad.error().message, "grants.kv.list.namespaces[1]: must be a non-empty string (got null)");
  EXPECT_FALSE(CheckKvGrant(Json::array(), "grants.kv.get"));
}

TEST(KvAuthorizeTest, NamespaceMustBeGranted) {
  const Json grant = Json::parse(R"({"namespaces": ["orders"]})");
  EXPECT_EQ(AuthorizeKv(KvOp::kGet, grant, {{"namespace", "orders"}, {"key", "k"}}), std::nullopt);
  EXPECT_EQ(AuthorizeKv(KvOp::kGet, grant, {{"namespace", "payments"}, {"key", "k"}}),
            R"(namespace "payments" is not granted to kv.get (granted: orders))");
  EXPECT_EQ(AuthorizeKv(KvOp::kPut, grant, {{"namespace", "*"}}),
            R"(namespace "*" is not granted to kv.put (granted: orders))");
  EXPECT_EQ(AuthorizeKv(KvOp::kDelete, Json::object(), {{"namespace", "orders"}}),
            R"(namespace "orders" is not granted to kv.delete (granted: none))");
  // The denial reason shows at most 100 bytes of a hostile namespace.
  auto long_reason = AuthorizeKv(KvOp::kList, grant, {{"namespace", std::string(100'000, 'z')}});
  ASSERT_TRUE(long_reason);
  EXPECT_LT(long_reason->size(), 200u);
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "basal_host_calls_test.XXXXXX").string();
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

class KvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = OpenSqliteStore({.path = dir_.File("journal.db")});
    ASSERT_TRUE(store) << store.error().message;
    store_ = std::move(*store);
  }
  HostCallAnswer Serve(KvOp op, const Json& args) { return ServeKv(op, *store_, args); }
  void ExpectTypeError(KvOp op, const Json& args, const std::string& message) {
    HostCallAnswer a = Serve(op, args);
    EXPECT_FALSE(a.ok) << args.dump();
    EXPECT_EQ(a.error_name, "TypeError") << args.dump();
    EXPECT_EQ(a.error_message, message) << args.dump();
  }
  // Runs SQL on a second connection, as an operator with sqlite3 would.
  void RawSql(const std::string& sql) {
    ASSERT_TRUE(store_->Commit());
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(dir_.File("journal.db").c_str(), &db), SQLITE_OK);
    char* err = nullptr;
    EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "");
    sqlite3_free(err);
    sqlite3_close(db);
  }

  TempDir dir_;
  std::unique_ptr<Store> store_;
};

TEST_F(KvTest, RegistersSixGrantedCalls) {
  HostCallRegistry registry;
  ASSERT_TRUE(RegisterKvHostCalls(registry, *store_));
  EXPECT_EQ(registry.Names(),
            (std::vector<std::string>{"kv.cas", "kv.delete", "kv.get", "kv.incr", "kv.list", "kv.put"}));
  for (const std::string& name : registry.Names()) {
    const HostCallSpec* spec = registry.Find(name);
    EXPECT_TRUE(spec->needs_grant);
    EXPECT_TRUE(spec->check_grant);
    ASSERT_TRUE(spec->authorize);
    EXPECT_EQ(spec->authorize(Json::parse(R"({"namespaces": ["o"]})"), {{"namespace", "p"}}),
              "namespace \"p\" is not granted to " + name + " (granted: o)");
    const Effect effect = name == "kv.get" || name == "kv.list" ? Effect::kPure
                          : name == "kv.incr"                     ? Effect::kExternal  // a repeat adds again
                                                                  : Effect::kIdempotent;
    EXPECT_EQ(spec->effect, effect) << name;
  }
  EXPECT_FALSE(RegisterKvHostCalls(registry, *store_));  // twice
}

TEST_F(KvTest, PutGetDeleteRoundTrip) {
  EXPECT_TRUE(Serve(KvOp::kGet, {{"namespace", "orders"}, {"key", "o-1"}}).value.is_null());
  const Json value = Json::parse(R"({"n": 1, "items": ["a", "b"], "price": 1.5, "ok": true, "s": "é"})");
  HostCallAnswer put = Serve(KvOp::kPut, {{"namespace", "orders"}, {"key", "o-1"}, {"value", value}});
  ASSERT_TRUE(put.ok) << put.error_message;
  EXPECT_TRUE(put.value.is_null());
  HostCallAnswer got = Serve(KvOp::kGet, {{"namespace", "orders"}, {"key", "o-1"}});
  ASSERT_TRUE(got.ok);
  EXPECT_EQ(got.value, value);
  // Namespaces are separate stores.
  EXPECT_TRUE(Serve(KvOp::kGet, {{"namespace", "users"}, {"key", "o-1"}}).value.is_null());
  // Overwrite; every JSON type is a value, null included (and distinct from absent only by list).
  for (const Json& v : {Json(nullptr), Json(false), Json(42), Json("text"), Json::array(), Json::object()}) {
    ASSERT_TRUE(Serve(KvOp::kPut, {{"namespace", "orders"}, {"key", "o-1"}, {"value", v}}).ok);
    EXPECT_EQ(Serve(KvOp::kGet, {{"namespace", "orders"}, {"key", "o-1"}}).value, v);
  }
  HostCallAnswer removed = Serve(KvOp::kDelete, {{"namespace", "orders"}, {"key", "o-1"}});
  ASSERT_TRUE(removed.ok);
  EXPECT_EQ(removed.value, Json(true));
  EXPECT_EQ(Serve(KvOp::kDelete, {{"namespace", "orders"}, {"key", "o-1"}}).value, Json(false));
  EXPECT_TRUE(Serve(KvOp::kGet, {{"namespace", "orders"}, {"key", "o-1"}}).value.is_null());
}

TEST_F(KvTest, ValuesSurviveCommitAndReopen) {
  ASSERT_TRUE(Serve(KvOp::kPut, {{"namespace", "n"}, {"key", "k"}, {"value", {{"x", 1}}}}).ok);
  ASSERT_TRUE(store_->Commit());
  store_.reset();
  auto reopened = OpenSqliteStore({.path = dir_.File("journal.db")});
  ASSERT_TRUE(reopened);
  EXPECT_EQ(ServeKv(KvOp::kGet, **reopened, {{"namespace", "n"}, {"key", "k"}}).value, Json({{"x", 1}}));
}

TEST_F(KvTest, List) {
  for (const char* key : {"b/2", "a/1", "a/2", "a%", "c"}) {
    ASSERT_TRUE(Serve(KvOp::kPut, {{"namespace", "n"}, {"key", key}, {"value", key}}).ok);
  }
  ASSERT_TRUE(Serve(KvOp::kPut, {{"namespace", "other"}, {"key", "a/9"}, {"value", 0}}).ok);

  HostCallAnswer all = Serve(KvOp::kList, {{"namespace", "n"}});
  ASSERT_TRUE(all.ok) << all.error_message;
  EXPECT_EQ(all.value,
            Json::parse(R"([{"key":"a%","value":"a%"},{"key":"a/1","value":"a/1"},)"
                        R"({"key":"a/2","value":"a/2"},{"key":"b/2","value":"b/2"},{"key":"c","value":"c"}])"));
  HostCallAnswer a = Serve(KvOp::kList, {{"namespace", "n"}, {"prefix", "a/"}});
  EXPECT_EQ(a.value, Json::parse(R"([{"key":"a/1","value":"a/1"},{"key":"a/2","value":"a/2"}])"));
  EXPECT_EQ(Serve(KvOp::kList, {{"namespace", "n"}, {"prefix", "a"}, {"limit", 2}}).value.size(), 2u);
  EXPECT_EQ(Serve(KvOp::kList, {{"namespace", "n"}, {"prefix", nullptr}, {"limit", nullptr}}).value.size(), 5u);
  EXPECT_EQ(Serve(KvOp::kList, {{"namespace", "n"}, {"prefix", ""}}).value.size(), 5u);
  EXPECT_EQ(Serve(KvOp::kList, {{"namespace", "n"}, {"prefix", "%"}}).value, Json::array());
  EXPECT_EQ(Serve(KvOp::kList, {{"namespace", "empty"}}).value, Json::array());
}

TEST_F(KvTest, ListLimitDefaultsTo100) {
  for (int i = 0; i < 150; ++i) {
    std::string key = std::to_string(1000 + i);  // (not "k" + ...: GCC 12 -Wrestrict false positive at -O2)
    ASSERT_TRUE(Serve(KvOp::kPut, {{"namespace", "n"}, {"key", key}, {"value", i}}).ok);
  }
  EXPECT_EQ(Serve(KvOp::kList, {{"namespace", "n"}}).value.size(), 100u);
  EXPECT_EQ(Serve(KvOp::kList, {{"namespace", "n"}, {"limit", 1000}}).value.size(), 150u);
}

TEST_F(KvTest, ArgumentShapes) {
  const std::string long_key(1025, 'k');
  const std::string long_ns(257, 'n');
  ExpectTypeError(KvOp::kGet, {{"namespace", "n"}}, R"(kv.get: "key" is missing (a string))");
  ExpectTypeError(KvOp::kGet, {{"namespace", "n"}, {"key", 5}}, R"(kv.get: "key" must be a string (got 5))");
  ExpectTypeError(KvOp::kGet, {{"namespace", "n"}, {"key", ""}}, R"(kv.get: "key" must not be empty)");
  ExpectTypeError(KvOp::kDelete, {{"namespace", "n"}, {"key", long_key}},
                  R"(kv.delete: "key" is 1025 bytes; the limit is 1024)");
  ExpectTypeError(KvOp::kGet, {{"namespace", long_ns}, {"key", "k"}},
                  R"(kv.get: "namespace" is 257 bytes; the limit is 256)");
  ExpectTypeError(KvOp::kGet, {{"namespace", "n"}, {"key", "k"}, {"value", 1}},
                  R"(kv.get: unknown argument "value" (expected namespace, key))");
  ExpectTypeError(KvOp::kPut, {{"namespace", "n"}, {"key", "k"}},
                  R"(kv.put: "value" is missing (any JSON value; null stores null))");
  ExpectTypeError(KvOp::kPut, {{"namespace", "n"}, {"key", "k"}, {"value", 1}, {"ttl", 5}},
                  R"(kv.put: unknown argument "ttl" (expected namespace, key, value))");
  ExpectTypeError(KvOp::kList, {{"namespace", "n"}, {"prefix", 1}}, R"(kv.list: "prefix" must be a string (got 1))");
  ExpectTypeError(KvOp::kList, {{"namespace", "n"}, {"prefix", long_key}},
                  R"(kv.list: "prefix" is 1025 bytes; the limit is 1024)");
  ExpectTypeError(KvOp::kList, {{"namespace", "n"}, {"key", "k"}},
                  R"(kv.list: unknown argument "key" (expected namespace, prefix, limit))");
  for (const Json& limit : {Json(0), Json(1001), Json(-1), Json(2.5), Json("10")}) {
    ExpectTypeError(KvOp::kList, {{"namespace", "n"}, {"limit", limit}},
                    "kv.list: \"limit\" must be an integer from 1 to 1000 (got " + limit.dump() + ")");
  }
  ExpectTypeError(KvOp::kGet, Json::array(), "kv.get: arguments must be an object (got [])");
  ExpectTypeError(KvOp::kGet, {{"key", "k"}}, R"(kv.get: "namespace" is missing (a string))");
  // Nothing was written by the refused calls.
  EXPECT_EQ(Serve(KvOp::kList, {{"namespace", "n"}}).value, Json::array());
}

TEST_F(KvTest, InvalidUtf8ValueIsRefusedNotAltered) {
  ExpectTypeError(KvOp::kPut, {{"namespace", "n"}, {"key", "k"}, {"value", std::string("\xff\xfe")}},
                  R"(kv.put: "value" holds a string that is not valid UTF-8)");
}

TEST_F(KvTest, JournalFailureIsAHostErrorWithoutThePath) {
  RawSql("DROP TABLE kv");
  for (KvOp op : {KvOp::kGet, KvOp::kPut, KvOp::kDelete, KvOp::kList}) {
    Json args = {{"namespace", "n"}, {"key", "k"}};
    if (op == KvOp::kPut) args["value"] = 1;
    if (op == KvOp::kList) args.erase("key");
    HostCallAnswer a = Serve(op, args);
    EXPECT_FALSE(a.ok) << KvOpName(op);
    EXPECT_EQ(a.error_name, "HostError") << KvOpName(op);
    EXPECT_EQ(a.error_message.rfind(std::string(KvOpName(op)) + " failed: ", 0), 0u) << a.error_message;
    EXPECT_EQ(a.error_message.find(dir_.File("journal.db")), std::string::npos) << a.error_message;
    (void)store_->Rollback();
  }
}

TEST_F(KvTest, CorruptStoredValueIsAHostError) {
  RawSql("INSERT INTO kv(namespace, key, value) VALUES ('n', 'k', 'not json')");
  HostCallAnswer get = Serve(KvOp::kGet, {{"namespace", "n"}, {"key", "k"}});
  EXPECT_FALSE(get.ok);
  EXPECT_EQ(get.error_name, "HostError");
  HostCallAnswer list = Serve(KvOp::kList, {{"namespace", "n"}});
  EXPECT_FALSE(list.ok);
  EXPECT_EQ(list.error_name, "HostError");
}

}  // namespace
}  // namespace basal

namespace basal {
namespace {

// ---- kv bounds: value size, namespace quota, list bytes, digests in the journal ----

TEST(KvGrantTest, PutGrantTakesLimitsAndOthersDoNot) {
  EXPECT_TRUE(CheckKvPutGrant(
      Json::parse(R"({"namespaces": ["o"], "max_value_bytes": 100, "quota": {"bytes": 1000, "keys": 3}})"),
      "grants.kv.put"));
  EXPECT_TRUE(CheckKvPutGrant(Json::parse(R"({"namespaces": ["o"], "quota": {"keys": 3}})"), "grants.kv.put"));
  auto big = CheckKvPutGrant(Json::parse(R"({"namespaces": ["o"], "max_value_bytes": 16777216})"), "grants.kv.put");
  ASSERT_FALSE(big);
  EXPECT_EQ(big.error().message, "grants.kv.put.max_value_bytes: must be an integer from 1 to 15728640 (got 16777216)");
  auto zero = CheckKvPutGrant(Json::parse(R"({"namespaces": ["o"], "quota": {"bytes": 0}})"), "grants.kv.put");
  ASSERT_FALSE(zero);
  EXPECT_EQ(zero.error().message, "grants.kv.put.quota.bytes: must be an integer from 1 to 1125899906842624 (got 0)");
  auto odd = CheckKvPutGrant(Json::parse(R"({"namespaces": ["o"], "quota": {"rows": 1}})"), "grants.kv.put");
  ASSERT_FALSE(odd);
  EXPECT_EQ(odd.error().message, "grants.kv.put.quota: unknown key \"rows\" (expected \"bytes\" or \"keys\")");
  EXPECT_FALSE(CheckKvPutGrant(Json::parse(R"({"max_value_bytes": 5})"), "grants.kv.put"));  // namespaces needed
  auto on_get = CheckKvGrant(Json::parse(R"({"namespaces": ["o"], "max_value_bytes": 5})"), "grants.kv.get");
  ASSERT_FALSE(on_get);
  EXPECT_EQ(on_get.error().message, "grants.kv.get: unknown key \"max_value_bytes\" (expected \"namespaces\")");
}

TEST_F(KvTest, PutRefusesAValueLargerThanItsGrantAllows) {
  const Json grant = Json::parse(R"({"namespaces": ["n"], "max_value_bytes": 10})");
  HostCallAnswer ok = ServeKv(KvOp::kPut, *store_, {{"namespace", "n"}, {"key", "k"}, {"value", "12345678"}}, &grant);
  EXPECT_TRUE(ok.ok) << ok.error_message;  // "12345678" is 10 bytes as JSON
  HostCallAnswer big = ServeKv(KvOp::kPut, *store_, {{"namespace", "n"}, {"key", "k"}, {"value", "123456789"}}, &grant);
  EXPECT_FALSE(big.ok);
  EXPECT_EQ(big.error_name, "QuotaExceeded");
  EXPECT_EQ(big.error_message, "kv.put: the value is 11 bytes as JSON; the grant admits at most 10 (max_value_bytes)");
  // Without a grant's word, the default applies.
  HostCallAnswer over_default = Serve(KvOp::kPut, {{"namespace", "n"}, {"key", "k"},
                                                   {"value", std::string(kKvDefaultMaxValueBytes, 'x')}});
  EXPECT_EQ(over_default.error_name, "QuotaExceeded");
  EXPECT_EQ(Serve(KvOp::kGet, {{"namespace", "n"}, {"key", "k"}}).value, Json("12345678"));  // unchanged
}

TEST_F(KvTest, PutRefusesToPassTheNamespaceQuotaAndOverwritesCountOnce) {
  const Json grant = Json::parse(R"({"namespaces": ["n"], "quota": {"bytes": 20, "keys": 2}})");
  auto put = [&](const std::string& key, const Json& value) {
    return ServeKv(KvOp::kPut, *store_, {{"namespace", "n"}, {"key", key}, {"value", value}}, &grant);
  };
  EXPECT_TRUE(put("a", "12345").ok);  // 1 + 7 = 8 bytes
  EXPECT_TRUE(put("a", "123").ok);    // overwrite: 1 + 5 = 6
  EXPECT_TRUE(put("b", "1234567").ok);  // 6 + 1 + 9 = 16
  HostCallAnswer third = put("c", 1);  // a third key
  EXPECT_EQ(third.error_name, "QuotaExceeded");
  EXPECT_EQ(third.error_message,
            "kv.put: namespace \"n\" would hold 18 bytes in 3 keys; its quota is 20 bytes and 2 keys (the kv.put "
            "grant's \"quota\"): delete keys or ask the operator for a larger quota");
  HostCallAnswer bytes = put("b", "123456789012");  // 6 + 1 + 14 = 21 > 20
  EXPECT_EQ(bytes.error_name, "QuotaExceeded");
  EXPECT_TRUE(Serve(KvOp::kDelete, {{"namespace", "n"}, {"key", "a"}}).ok);
  EXPECT_TRUE(put("c", 1).ok);  // room again after the delete
  // Another namespace has its own quota.
  const Json other = Json::parse(R"({"namespaces": ["m"], "quota": {"bytes": 20, "keys": 2}})");
  EXPECT_TRUE(ServeKv(KvOp::kPut, *store_, {{"namespace", "m"}, {"key", "z"}, {"value", 1}}, &other).ok);
}

TEST_F(KvTest, ListStopsAtItsByteBoundAndSaysWhatToDo) {
  const std::string mib(1u << 20, 'v');
  for (int i = 0; i < 9; ++i) {
    ASSERT_TRUE(store_->kv().Put("big", "k" + std::to_string(i), "\"" + mib + "\""));
  }
  HostCallAnswer a = Serve(KvOp::kList, {{"namespace", "big"}});
  EXPECT_FALSE(a.ok);
  EXPECT_EQ(a.error_name, "RangeError");
  EXPECT_EQ(a.error_message,
            "kv.list: the first 8 keys and values pass the 8 MiB one kv.list may read; ask for fewer keys (\"limit\": 7) "
            "or a narrower \"prefix\", and kv.get large values one at a time");
  HostCallAnswer seven = Serve(KvOp::kList, {{"namespace", "big"}, {"limit", 7}});
  ASSERT_TRUE(seven.ok) << seven.error_message;
  EXPECT_EQ(seven.value.size(), 7u);
}

TEST(KvJournalViewTest, ValuesAreDigestsNotCopies) {
  const Json args = {{"namespace", "n"}, {"key", "k"}, {"value", {{"secret", "x"}}}};
  const Json view = KvJournalArgs(args);
  EXPECT_EQ(view["namespace"], "n");
  EXPECT_EQ(view["key"], "k");
  EXPECT_EQ(view["value"]["basal_digest"]["bytes"], 14);
  EXPECT_EQ(view["value"]["basal_digest"]["sha256"], Sha256Hex(R"({"secret":"x"})"));
  EXPECT_EQ(view.dump().find("secret"), std::string::npos);
  EXPECT_TRUE(KvJournalResult(KvOp::kGet, nullptr).is_null());
  EXPECT_EQ(KvJournalResult(KvOp::kGet, 5)["basal_digest"]["bytes"], 1);
  const Json listed = KvJournalResult(KvOp::kList, Json::parse(R"([{"key": "a", "value": [1, 2]}])"));
  EXPECT_EQ(listed[0]["key"], "a");
  EXPECT_EQ(listed[0]["value"]["basal_digest"]["sha256"], Sha256Hex("[1,2]"));
}

// ---- kv.cas and kv.incr ----

TEST_F(KvTest, CasAndIncrTakeThePutGrantShapeAndAreDeniedOutsideIt) {
  HostCallRegistry registry;
  ASSERT_TRUE(RegisterKvHostCalls(registry, *store_));
  for (const char* name : {"kv.cas", "kv.incr"}) {
    const HostCallSpec* spec = registry.Find(name);
    ASSERT_NE(spec, nullptr) << name;
    const std::string path = std::string("grants.") + name;
    EXPECT_TRUE(spec->check_grant(
        Json::parse(R"({"namespaces": ["o"], "max_value_bytes": 100, "quota": {"bytes": 1000, "keys": 3}})"), path));
    auto odd = spec->check_grant(Json::parse(R"({"namespaces": ["o"], "ttl": 5})"), path);
    ASSERT_FALSE(odd);
    EXPECT_EQ(odd.error().message,
              path + ": unknown key \"ttl\" (expected \"namespaces\", \"max_value_bytes\" or \"quota\")");
    EXPECT_FALSE(spec->check_grant(Json::parse(R"({"quota": {"keys": 3}})"), path));  // namespaces needed
    const Json grant = Json::parse(R"({"namespaces": ["o"]})");
    EXPECT_EQ(spec->authorize(grant, {{"namespace", "o"}, {"key", "k"}}), std::nullopt);
    EXPECT_EQ(spec->authorize(grant, {{"namespace", "p"}, {"key", "k"}}),
              "namespace \"p\" is not granted to " + std::string(name) + " (granted: o)");
    EXPECT_EQ(spec->authorize(grant, Json::array()),
              std::string(name) + " arguments must be an object naming a \"namespace\" (got [])");
  }
}

TEST_F(KvTest, CasSwapsOnlyWhatItExpectsAndSaysWhatIsThere) {
  const Json absent = {{"namespace", "n"}, {"key", "k"}, {"expected", nullptr}, {"value", {{"n", 1}}}};
  HostCallAnswer first = Serve(KvOp::kCas, absent);
  ASSERT_TRUE(first.ok) << first.error_message;
  EXPECT_EQ(first.value, Json::parse(R"({"swapped": true, "current": {"n": 1}})"));
  HostCallAnswer again = Serve(KvOp::kCas, absent);  // repeated: changes nothing, tells what is there
  ASSERT_TRUE(again.ok) << again.error_message;
  EXPECT_EQ(again.value, Json::parse(R"({"swapped": false, "current": {"n": 1}})"));
  // Values, not text: 1.0 is 1.
  HostCallAnswer next = Serve(KvOp::kCas, {{"namespace", "n"}, {"key", "k"}, {"expected", {{"n", 1.0}}},
                                           {"value", {{"n", 2}, {"by", "me"}}}});
  ASSERT_TRUE(next.ok) << next.error_message;
  EXPECT_EQ(next.value["swapped"], true);
  EXPECT_EQ(Serve(KvOp::kGet, {{"namespace", "n"}, {"key", "k"}}).value, Json::parse(R"({"n": 2, "by": "me"})"));
  HostCallAnswer stale = Serve(KvOp::kCas, {{"namespace", "n"}, {"key", "k"}, {"expected", {{"n", 1}}}, {"value", 0}});
  ASSERT_TRUE(stale.ok);
  EXPECT_EQ(stale.value, Json::parse(R"({"swapped": false, "current": {"n": 2, "by": "me"}})"));

  // A retry loop as a flow writes it, from "absent", with only what kv.cas answers.
  Json current = nullptr;
  int calls = 0;
  for (int added = 0; added < 3; ++calls) {
    const int64_t now = current.is_null() ? 0 : current.get<int64_t>();
    HostCallAnswer r =
        Serve(KvOp::kCas, {{"namespace", "n"}, {"key", "count"}, {"expected", current}, {"value", now + 1}});
    ASSERT_TRUE(r.ok) << r.error_message;
    if (r.value["swapped"] == true) ++added;
    current = r.value["current"];
    if (added == 1 && calls == 0) {
      ASSERT_TRUE(store_->kv().Put("n", "count", "10"));  // another writer
    }
  }
  EXPECT_EQ(current, 12);
  EXPECT_EQ(calls, 4) << "one retry, after the other writer";
}

TEST_F(KvTest, CasArgumentShapes) {
  ExpectTypeError(KvOp::kCas, {{"namespace", "n"}, {"key", "k"}, {"value", 1}},
                  R"(kv.cas: "expected" is missing (the value the key must hold for the swap, as kv.get or kv.cas )"
                  R"(returned it; null: the key must be absent))");
  ExpectTypeError(KvOp::kCas, {{"namespace", "n"}, {"key", "k"}, {"expected", nullptr}},
                  R"(kv.cas: "value" is missing (any JSON value; null stores null))");
  ExpectTypeError(KvOp::kCas, {{"namespace", "n"}, {"key", "k"}, {"expected", nullptr}, {"value", 1}, {"ttl", 5}},
                  R"(kv.cas: unknown argument "ttl" (expected namespace, key, expected, value))");
  ExpectTypeError(KvOp::kCas, {{"namespace", "n"}, {"expected", nullptr}, {"value", 1}},
                  R"(kv.cas: "key" is missing (a string))");
  ExpectTypeError(KvOp::kCas, {{"namespace", "n"}, {"key", "k"}, {"expected", nullptr}, {"value", "\xff"}},
                  R"(kv.cas: "value" holds a string that is not valid UTF-8)");
  ExpectTypeError(KvOp::kCas, {{"namespace", "n"}, {"key", "k"}, {"expected", "\xff"}, {"value", 1}},
                  R"(kv.cas: "expected" holds a string that is not valid UTF-8 (no stored value can equal it))");
  EXPECT_EQ(Serve(KvOp::kList, {{"namespace", "n"}}).value, Json::array());  // nothing written
}

TEST_F(KvTest, IncrCountsFromAbsentAndByDefaultsToOne) {
  auto incr = [&](const Json& by) {
    Json args = {{"namespace", "n"}, {"key", "c"}};
    if (!by.is_discarded()) args["by"] = by;
    HostCallAnswer a = Serve(KvOp::kIncr, args);
    EXPECT_TRUE(a.ok) << a.error_message;
    return a.value;
  };
  EXPECT_EQ(incr(Json(Json::value_t::discarded)), 1);
  EXPECT_EQ(incr(5), 6);
  EXPECT_EQ(incr(-10), -4);
  EXPECT_EQ(incr(2.0), -2);  // an integral number is an integer
  EXPECT_EQ(incr(0), -2);
  EXPECT_EQ(Serve(KvOp::kGet, {{"namespace", "n"}, {"key", "c"}}).value, -2);
  EXPECT_TRUE(incr(1).is_number_integer());
}

TEST_F(KvTest, IncrArgumentShapes) {
  const Json base = {{"namespace", "n"}, {"key", "k"}};
  auto with = [&](const char* name, const Json& v) {
    Json args = base;
    args[name] = v;
    return args;
  };
  ExpectTypeError(KvOp::kIncr, with("by", 1.5), R"(kv.incr: "by" must be an integer (got 1.5))");
  ExpectTypeError(KvOp::kIncr, with("by", "1"), R"(kv.incr: "by" must be an integer (got "1"))");
  ExpectTypeError(KvOp::kIncr, with("by", true), R"(kv.incr: "by" must be an integer (got true))");
  ExpectTypeError(KvOp::kIncr, with("by", nullptr),
                  R"(kv.incr: "by" must be an integer (got null; NaN and Infinity become null in JSON); leave it )"
                  R"(out to add 1)");
  ExpectTypeError(KvOp::kIncr, with("value", 1), R"(kv.incr: unknown argument "value" (expected namespace, key, by))");
  for (const Json& big : {Json(kKvMaxSafeInteger + 1), Json(-kKvMaxSafeInteger - 1), Json(1e20)}) {
    HostCallAnswer a = Serve(KvOp::kIncr, with("by", big));
    EXPECT_FALSE(a.ok);
    EXPECT_EQ(a.error_name, "RangeError") << big;
    EXPECT_EQ(a.error_message, "kv.incr: \"by\" is " + big.dump() +
                                   "; it must be within +-9007199254740991 (JavaScript's safe integers)");
  }
  EXPECT_TRUE(Serve(KvOp::kIncr, with("by", kKvMaxSafeInteger)).ok);  // the edge itself is fine
}

TEST_F(KvTest, IncrRefusesNonIntegersAndLeavingTheSafeIntegers) {
  auto put = [&](const std::string& key, const Json& v) {
    ASSERT_TRUE(Serve(KvOp::kPut, {{"namespace", "n"}, {"key", key}, {"value", v}}).ok);
  };
  put("text", "abc");
  HostCallAnswer text = Serve(KvOp::kIncr, {{"namespace", "n"}, {"key", "text"}});
  EXPECT_EQ(text.error_name, "TypeError");
  EXPECT_EQ(text.error_message,
            "kv.incr: key \"text\" in namespace \"n\" holds \"abc\", not an integer: kv.incr counts only in a key "
            "that holds an integer or is absent (kv.put a number there first, or count in another key)");
  put("half", 0.5);
  EXPECT_EQ(Serve(KvOp::kIncr, {{"namespace", "n"}, {"key", "half"}}).error_name, "TypeError");
  put("max", kKvMaxSafeInteger);
  HostCallAnswer past = Serve(KvOp::kIncr, {{"namespace", "n"}, {"key", "max"}});
  EXPECT_EQ(past.error_name, "RangeError");
  EXPECT_EQ(past.error_message,
            "kv.incr: key \"max\" in namespace \"n\" holds 9007199254740991; adding 1 would give 9007199254740992, "
            "beyond +-9007199254740991, the integers JavaScript represents exactly (Number.MAX_SAFE_INTEGER); nothing "
            "was written");
  put("huge", 1e300);
  HostCallAnswer huge = Serve(KvOp::kIncr, {{"namespace", "n"}, {"key", "huge"}, {"by", -1}});
  EXPECT_EQ(huge.error_name, "RangeError");
  EXPECT_EQ(huge.error_message,
            "kv.incr: key \"huge\" in namespace \"n\" holds 1e+300, beyond +-9007199254740991, the integers "
            "JavaScript represents exactly (Number.MAX_SAFE_INTEGER); nothing was written");
  EXPECT_EQ(Serve(KvOp::kGet, {{"namespace", "n"}, {"key", "text"}}).value, "abc");
  EXPECT_EQ(Serve(KvOp::kGet, {{"namespace", "n"}, {"key", "max"}}).value, kKvMaxSafeInteger);
  HostCallAnswer down = Serve(KvOp::kIncr, {{"namespace", "n"}, {"key", "max"}, {"by", -1}});
  EXPECT_EQ(down.value, kKvMaxSafeInteger - 1);
}

TEST_F(KvTest, CasAndIncrRefuseToPassTheirGrantsLimits) {
  const Json grant = Json::parse(R"({"namespaces": ["n"], "max_value_bytes": 10, "quota": {"bytes": 20, "keys": 2}})");
  auto cas = [&](const std::string& key, const Json& expected, const Json& value) {
    return ServeKv(KvOp::kCas, *store_, {{"namespace", "n"}, {"key", key}, {"expected", expected}, {"value", value}},
                   &grant);
  };
  HostCallAnswer big = cas("a", nullptr, "123456789");  // 11 bytes as JSON
  EXPECT_EQ(big.error_name, "QuotaExceeded");
  EXPECT_EQ(big.error_message, "kv.cas: the value is 11 bytes as JSON; the grant admits at most 10 (max_value_bytes)");
  EXPECT_TRUE(cas("a", nullptr, "12345").ok);  // 1 + 7 = 8 bytes
  EXPECT_TRUE(cas("b", nullptr, 1).ok);        // 8 + 2 = 10 bytes, 2 keys
  HostCallAnswer third = cas("c", nullptr, 1);
  EXPECT_EQ(third.error_name, "QuotaExceeded");
  EXPECT_EQ(third.error_message,
            "kv.cas: namespace \"n\" would hold 12 bytes in 3 keys; its quota is 20 bytes and 2 keys (the kv.cas "
            "grant's \"quota\"): delete keys or ask the operator for a larger quota");

  auto incr = [&](const std::string& key, int64_t by) {
    return ServeKv(KvOp::kIncr, *store_, {{"namespace", "n"}, {"key", key}, {"by", by}}, &grant);
  };
  EXPECT_EQ(incr("b", 1).value, 2);
  HostCallAnswer new_key = incr("c", 1);
  EXPECT_EQ(new_key.error_name, "QuotaExceeded");
  EXPECT_EQ(new_key.error_message,
            "kv.incr: namespace \"n\" would hold 12 bytes in 3 keys; its quota is 20 bytes and 2 keys (the kv.incr "
            "grant's \"quota\"): delete keys or ask the operator for a larger quota");
  HostCallAnswer wide = incr("b", 9'999'999'998);  // 2 + 9999999998 = "10000000000": 11 bytes
  EXPECT_EQ(wide.error_name, "QuotaExceeded");
  EXPECT_EQ(wide.error_message, "kv.incr: the value is 11 bytes as JSON; the grant admits at most 10 (max_value_bytes)");
  HostCallAnswer grows = incr("b", 99'999'998);  // "100000000": 8 + 1 + 9 = 18; fits
  EXPECT_TRUE(grows.ok) << grows.error_message;
  HostCallAnswer over_bytes = incr("b", 900'000'000);  // "1000000000": 8 + 1 + 10 = 19; fits too
  EXPECT_TRUE(over_bytes.ok) << over_bytes.error_message;
  ASSERT_TRUE(cas("a", "12345", "123456").ok);  // 1 + 8 + 11 = 20: at the quota
  HostCallAnswer past = cas("a", "123456", "1234567");  // 21
  EXPECT_EQ(past.error_name, "QuotaExceeded");
  EXPECT_EQ(Serve(KvOp::kGet, {{"namespace", "n"}, {"key", "a"}}).value, "123456");
  EXPECT_TRUE(Serve(KvOp::kGet, {{"namespace", "n"}, {"key", "c"}}).value.is_null());
}

TEST_F(KvTest, CasAndIncrStoreFailuresAreHostErrorsWithoutThePath) {
  RawSql("INSERT INTO kv(namespace, key, value) VALUES ('n', 'k', 'not json')");
  const Json cas = {{"namespace", "n"}, {"key", "k"}, {"expected", 1}, {"value", 2}};
  const Json incr = {{"namespace", "n"}, {"key", "k"}};
  for (const auto& [op, args] : {std::pair{KvOp::kCas, cas}, std::pair{KvOp::kIncr, incr}}) {
    HostCallAnswer a = Serve(op, args);
    EXPECT_FALSE(a.ok) << KvOpName(op);
    EXPECT_EQ(a.error_name, "HostError") << KvOpName(op);
    EXPECT_EQ(a.error_message, std::string(KvOpName(op)) +
                                   " failed: the store refused it: a kv value in namespace n is not JSON (was the "
                                   "database changed by hand?); put a JSON value under that key or delete it");
    (void)store_->Rollback();
  }
  RawSql("DROP TABLE kv");
  for (const auto& [op, args] : {std::pair{KvOp::kCas, cas}, std::pair{KvOp::kIncr, incr}}) {
    HostCallAnswer a = Serve(op, args);
    EXPECT_EQ(a.error_name, "HostError") << KvOpName(op);
    EXPECT_EQ(a.error_message.rfind(std::string(KvOpName(op)) + " failed: ", 0), 0u) << a.error_message;
    EXPECT_EQ(a.error_message.find(dir_.File("journal.db")), std::string::npos) << a.error_message;
    (void)store_->Rollback();
  }
}

TEST(KvJournalViewTest, CasAndIncrKeepDigestsOfValues) {
  const Json args = {{"namespace", "n"}, {"key", "k"}, {"expected", {{"secret", "old"}}}, {"value", {{"secret", "x"}}}};
  const Json view = KvCasJournalArgs(args);
  EXPECT_EQ(view["namespace"], "n");
  EXPECT_EQ(view["key"], "k");
  EXPECT_EQ(view["value"]["basal_digest"]["sha256"], Sha256Hex(R"({"secret":"x"})"));
  EXPECT_EQ(view["expected"]["basal_digest"]["sha256"], Sha256Hex(R"({"secret":"old"})"));
  EXPECT_EQ(view.dump().find("secret"), std::string::npos);
  const Json absent = KvCasJournalArgs({{"namespace", "n"}, {"key", "k"}, {"expected", nullptr}, {"value", 1}});
  EXPECT_TRUE(absent["expected"].is_null()) << "null says \"absent\": kept as it is";
  EXPECT_EQ(absent["value"]["basal_digest"]["bytes"], 1);

  const Json swapped = KvJournalResult(KvOp::kCas, Json::parse(R"({"swapped": true, "current": {"secret": "x"}})"));
  EXPECT_EQ(swapped["swapped"], true);
  EXPECT_EQ(swapped["current"]["basal_digest"]["sha256"], Sha256Hex(R"({"secret":"x"})"));
  const Json none = KvJournalResult(KvOp::kCas, Json::parse(R"({"swapped": false, "current": null})"));
  EXPECT_EQ(none, Json::parse(R"({"swapped": false, "current": null})"));
  const Json counted = KvJournalResult(KvOp::kIncr, 1200);
  EXPECT_EQ(counted["basal_digest"]["sha256"], Sha256Hex("1200"));
}

}  // namespace
}  // namespace basal
