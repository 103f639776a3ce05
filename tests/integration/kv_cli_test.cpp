// `basal kv get|list|put|rm|history` as an operator runs it (docs/cli.md): the value round trip,
// BASAL_DB, a value that is not JSON, the refusal that names the approved flow's grant (and kv.put's
// defaults where no flow writes), every write journaled with who made it (and never the value),
// and what a flow stored printed escaped.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "integration/test_support.h"
#include "basal/manifest.h"

namespace basal::testing {
namespace {

using Json = nlohmann::json;

bool HasPart(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class KvCliTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = MakeTempDir(); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string P(const std::string& name) const { return dir_ + "/" + name; }
  // Every command with the journal named by BASAL_DB, as an operator's profile would set it.
  BasalRun Kv(const std::string& args, const std::string& before = "") {
    return RunBasal(dir_, "kv " + args, before + "BASAL_DB=" + P("j.db") + " ");
  }
  BasalRun Approve(const std::string& name, const std::string& manifest) {
    WriteFile(P(name + ".js"), "export default async () => null");
    WriteFile(P(name + ".json"), manifest);
    return RunBasal(dir_, "flow approve " + name + " " + P(name + ".js") + " --manifest " + P(name + ".json") +
                              " --yes --db " + P("j.db"));
  }
  std::vector<Json> Lines(const std::string& text) {
    std::vector<Json> out;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) out.push_back(Json::parse(line));
    return out;
  }
  std::string dir_;
};

TEST_F(KvCliTest, PutGetListRmRoundTripThroughBasalDb) {
  auto put = Kv("put --namespace orders o-1 '{\"qty\": 2, \"sku\": \"A\"}' --reason 'fix order 1'");
  ASSERT_EQ(put.exit_code, 0) << put.err;
  EXPECT_TRUE(HasPart(put.out, "stored \"o-1\" in namespace \"orders\" (19 bytes)")) << put.out;
  EXPECT_TRUE(HasPart(put.out, "kv.put's defaults: no approved flow writes it")) << put.out;
  ASSERT_EQ(Kv("put --namespace orders o-2 7").exit_code, 0);

  auto get = Kv("get --namespace orders o-1");
  EXPECT_EQ(get.exit_code, 0) << get.err;
  EXPECT_EQ(get.out, "{\"qty\":2,\"sku\":\"A\"}\n") << "stored compact, as a flow's kv.put stores it";
  auto json = Kv("get --namespace orders o-1 --json");
  EXPECT_EQ(Json::parse(json.out), (Json{{"namespace", "orders"}, {"key", "o-1"}, {"value", {{"qty", 2}, {"sku", "A"}}}}));
  auto other_db = RunBasal(dir_, "kv get --namespace orders o-1 --db " + P("other.db"), "BASAL_DB=" + P("j.db") + " ");
  EXPECT_EQ(other_db.exit_code, 3) << "--db wins over BASAL_DB: " << other_db.out;
  EXPECT_TRUE(HasPart(other_db.err, "basal: io: no journal at " + P("other.db"))) << other_db.err;

  auto list = Kv("list --namespace orders");
  EXPECT_EQ(list.exit_code, 0) << list.err;
  EXPECT_EQ(list.out, "o-1  {\"qty\":2,\"sku\":\"A\"}\no-2  7\n");
  auto lines = Lines(Kv("list --namespace orders --json --prefix o-2").out);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], (Json{{"key", "o-2"}, {"value", 7}}));
  auto limited = Kv("list --namespace orders --limit 1");
  EXPECT_TRUE(HasPart(limited.out, "(the first 1 keys;")) << limited.out;
  EXPECT_EQ(Kv("list --namespace orders --limit 0").exit_code, 2);

  auto rm = Kv("rm --namespace orders o-1");
  EXPECT_EQ(rm.exit_code, 0) << rm.err;
  EXPECT_EQ(rm.out, "removed \"o-1\" from namespace \"orders\"\n");
  auto gone = Kv("get --namespace orders o-1");
  EXPECT_EQ(gone.exit_code, 1) << "an absent key is the answer no";
  EXPECT_EQ(gone.out, "");
  EXPECT_EQ(gone.err, "basal: kv: namespace \"orders\" has no key \"o-1\"\n");
  auto again = Kv("rm --namespace orders o-1");
  EXPECT_EQ(again.exit_code, 0);
  EXPECT_TRUE(HasPart(again.out, "had no key \"o-1\" (nothing removed; journaled)")) << again.out;
}

// Every put and rm is in the journal with the user, the uid, the reason and the value's digest;
// the value itself is not (history prints none of it), and a refused or failed write leaves nothing.
TEST_F(KvCliTest, EveryWriteIsJournaledWithWhoDidItAndTheValuesDigestOnly) {
  ASSERT_EQ(Kv("put --namespace orders o-1 '\"secret-ish value\"' --reason 'fix order 1'").exit_code, 0);
  ASSERT_EQ(Kv("put --namespace orders o-1 '\"v2\"'").exit_code, 0);
  ASSERT_EQ(Kv("rm --namespace orders o-1 --reason done").exit_code, 0);
  ASSERT_EQ(Kv("put --namespace carts c-1 1").exit_code, 0);
  ASSERT_EQ(Kv("put --namespace orders o-2 nope").exit_code, 2);  // refused before anything is written

  auto history = Kv("history --namespace orders --json");
  ASSERT_EQ(history.exit_code, 0) << history.err;
  EXPECT_FALSE(HasPart(history.out, "secret-ish")) << "the value is never journaled: " << history.out;
  auto rows = Lines(history.out);
  ASSERT_EQ(rows.size(), 3u) << history.out;
  const std::string user = rows[0]["user"];
  EXPECT_EQ(rows[0]["uid"], static_cast<int64_t>(getuid()));
  EXPECT_FALSE(user.empty());
  EXPECT_EQ(rows[0]["op"], "put");
  EXPECT_EQ(rows[0]["key"], "o-1");
  EXPECT_EQ(rows[0]["reason"], "fix order 1");
  EXPECT_EQ(rows[0]["existed"], false);
  EXPECT_EQ(rows[0]["value"]["bytes"], 18);
  EXPECT_EQ(rows[0]["value"]["sha256"], Sha256Hex("\"secret-ish value\""));
  EXPECT_EQ(rows[1]["existed"], true) << "the second put replaced the value";
  EXPECT_EQ(rows[2]["op"], "delete");
  EXPECT_EQ(rows[2]["reason"], "done");
  EXPECT_EQ(rows[2]["existed"], true);
  EXPECT_FALSE(rows[2].contains("value"));

  auto text = Kv("history --namespace orders --limit 1");
  EXPECT_TRUE(HasPart(text.out, "  " + user + " (uid " + std::to_string(getuid()) + ")  delete \"o-1\"  reason: done\n"))
      << text.out;
  EXPECT_EQ(Lines(Kv("history --namespace carts --json").out).size(), 1u);
  EXPECT_EQ(Kv("history --namespace nothing").out, "no operator writes to namespace \"nothing\"\n");
}

TEST_F(KvCliTest, AValueThatIsNotJsonIsRefusedWithTheQuotedFormAsAHint) {
  auto bare = Kv("put --namespace notes greeting hello");
  EXPECT_EQ(bare.exit_code, 2);
  EXPECT_EQ(bare.err,
            "basal: usage: VALUE is not JSON (a value is one JSON value): to store it as a text, quote it as a JSON "
            "string: '\"hello\"'\n");
  EXPECT_FALSE(std::filesystem::exists(P("j.db"))) << "refused before the store was even opened";
  // The hint works as written; stdin and a file are the other ways in.
  ASSERT_EQ(Kv("put --namespace notes greeting '\"hello\"'").exit_code, 0);
  EXPECT_EQ(Kv("get --namespace notes greeting").out, "\"hello\"\n");
  ASSERT_EQ(Kv("put --namespace notes piped -", "echo '[1, 2]' | ").exit_code, 0);
  EXPECT_EQ(Kv("get --namespace notes piped").out, "[1,2]\n");
  WriteFile(P("v.json"), "{\"from\": \"file\"}");
  ASSERT_EQ(Kv("put --namespace notes filed --value-file " + P("v.json")).exit_code, 0);
  EXPECT_EQ(Kv("get --namespace notes filed").out, "{\"from\":\"file\"}\n");
  WriteFile(P("bad.json"), "{nope");
  auto bad_file = Kv("put --namespace notes filed --value-file " + P("bad.json"));
  EXPECT_EQ(bad_file.exit_code, 2);
  EXPECT_TRUE(HasPart(bad_file.err, "basal: usage: --value-file " + P("bad.json") + " is not JSON")) << bad_file.err;
  EXPECT_EQ(Kv("put --namespace notes k 1 --value-file " + P("v.json")).exit_code, 2) << "one value only";
  EXPECT_EQ(Kv("put --namespace notes k").exit_code, 2) << "a value is required";
  EXPECT_EQ(Kv("get --namespace notes ''").exit_code, 2) << "a key is never empty, as a flow's";
}

// The smallest limit of every approved flow that writes the namespace (kv.put, kv.cas, kv.incr) is
// the operator's: a put past it is refused naming the flow, its version, the grant and the figures;
// overwriting in place and rm stay allowed.
TEST_F(KvCliTest, APutPastAnApprovedFlowsLimitIsRefusedNamingItsGrant) {
  auto a = Approve("counter", R"({"grants": {"kv.put": {"namespaces": ["orders"], "quota": {"keys": 2}}}})");
  ASSERT_EQ(a.exit_code, 0) << a.out << a.err;
  auto b = Approve("tally", R"({"grants": {"kv.incr": {"namespaces": ["orders", "tallies"], "quota": {"keys": 5},
                                                          "max_value_bytes": 16}}})");
  ASSERT_EQ(b.exit_code, 0) << b.out << b.err;
  ASSERT_EQ(Kv("put --namespace orders o-1 1").exit_code, 0);
  auto second = Kv("put --namespace orders o-2 2");
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_TRUE(HasPart(second.out, "it holds 2 of 2 keys")) << second.out;

  auto third = Kv("put --namespace orders o-3 3");
  EXPECT_EQ(third.exit_code, 4) << third.out;
  EXPECT_EQ(third.err,
            "basal: refused: namespace \"orders\" would hold 3 keys; flow \"counter\" version 1 sets "
            "grants.kv.put.quota.keys = 2: a flow that writes it would fail at its next write (QuotaExceeded). Remove "
            "keys first (basal kv rm), or approve a version with a larger limit\n");
  EXPECT_EQ(Kv("get --namespace orders o-3").exit_code, 1) << "a refused put writes nothing";
  EXPECT_EQ(Lines(Kv("history --namespace orders --json").out).size(), 2u) << "and journals nothing";

  auto large = Kv("put --namespace orders o-1 '\"0123456789abcdef\"'");
  EXPECT_EQ(large.exit_code, 4);
  EXPECT_TRUE(HasPart(large.err, "basal: refused: the value is 18 bytes as JSON; flow \"tally\" version 1 sets "
                             "grants.kv.incr.max_value_bytes = 16: "))
      << large.err;
  EXPECT_EQ(Kv("put --namespace orders o-1 '\"in place\"'").exit_code, 0) << "an overwrite adds no key";
  EXPECT_EQ(Kv("rm --namespace orders o-2").exit_code, 0);
  EXPECT_EQ(Kv("put --namespace orders o-3 3").exit_code, 0) << "room again after rm";

  // A newer version with a larger quota does not lift the older one's: it can still run.
  ASSERT_EQ(Approve("counter", R"({"grants": {"kv.put": {"namespaces": ["orders"], "quota": {"keys": 9}}}})").exit_code, 0);
  auto still = Kv("put --namespace orders o-4 4");
  EXPECT_EQ(still.exit_code, 4);
  EXPECT_TRUE(HasPart(still.err, "flow \"counter\" version 1 sets grants.kv.put.quota.keys = 2")) << still.err;
  // Revoked, version 1 runs no more: the next smallest is tally's.
  ASSERT_EQ(RunBasal(dir_, "flow revoke counter --version 1 --db " + P("j.db")).exit_code, 0);
  EXPECT_EQ(Kv("put --namespace orders o-4 4").exit_code, 0);
}

TEST_F(KvCliTest, ANamespaceNoApprovedFlowWritesHasKvPutsDefaults) {
  // 1 MiB: kv.put's default max_value_bytes. The value is a JSON string of 1 MiB of "a".
  WriteFile(P("big.json"), "\"" + std::string(1u << 20, 'a') + "\"");
  auto big = Kv("put --namespace free k --value-file " + P("big.json"));
  EXPECT_EQ(big.exit_code, 4);
  EXPECT_EQ(big.err, "basal: refused: the value is 1048578 bytes as JSON; kv.put's defaults (no approved flow writes "
                     "namespace \"free\") sets grants.kv.put.max_value_bytes = 1048576: a flow that writes it would fail "
                     "at its next write (QuotaExceeded). Remove keys first (basal kv rm), or approve a version with a "
                     "larger limit\n");
  WriteFile(P("fits.json"), "\"" + std::string((1u << 20) - 2, 'a') + "\"");
  EXPECT_EQ(Kv("put --namespace free k --value-file " + P("fits.json")).exit_code, 0);
}

// What a flow (or anyone) stored is printed escaped: a key or value holding terminal escapes
// never reaches the terminal raw, in get, list, their JSON and history.
TEST_F(KvCliTest, KeysAndValuesArePrintedEscaped) {
  const std::string key = "\"$(printf 'k\\033[2J\\302\\233')\"";
  ASSERT_EQ(Kv("put --namespace n " + key + " '\"\\u001b]0;owned\\u0007\\u202e\"'").exit_code, 0);
  for (const std::string& args : std::vector<std::string>{"get --namespace n " + key, "get --namespace n --json " + key,
                                  "list --namespace n", "list --namespace n --json", "history --namespace n",
                                  "history --namespace n --json"}) {
    auto r = Kv(args);
    EXPECT_EQ(r.exit_code, 0) << args << r.err;
    EXPECT_FALSE(r.out.empty()) << args;
    for (const char* raw : {"\x1b", "\xc2\x9b", "\x07", "\xe2\x80\xae"})
      EXPECT_FALSE(HasPart(r.out, raw)) << args << " prints a control raw:\n" << r.out;
  }
  EXPECT_EQ(Kv("get --namespace n " + key).out, "\"\\u001b]0;owned\\u0007\\u202e\"\n");
}

}  // namespace
}  // namespace basal::testing
