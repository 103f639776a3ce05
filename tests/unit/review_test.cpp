// Unit tests of the operator's review of a new manifest (include/basal/review.h): grants compared
// per constraint by each spec's compare_grant (the built-in kv.* and log, an embedder's call with
// and without one), budgets, identical content, the rendered text's escaping, and the line diff
// (exact output, validity and minimality against a brute-force LCS, and its work bound).
#include "basal/review.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "basal/manifest.h"
#include "parent/host_calls/kv.h"
#include "parent/host_calls/log.h"
#include "parent/store/sqlite/sqlite_store.h"
#include "unit/store_test_support.h"

namespace basal {
namespace {

using Direction = ConstraintChange::Direction;
using Kind = GrantReview::Kind;

void NoopReviewHandler(const HostCallContext&, const Json&, HostCallReply) {}

// --- Line diff -----------------------------------------------------------------------------------

std::vector<std::string> SplitKeepingNewlines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    end = end == std::string::npos ? text.size() : end + 1;
    lines.push_back(text.substr(start, end - start));
    start = end;
  }
  return lines;
}

// Reads a unified diff back: rebuilds both texts from `before`'s untouched lines and the hunks,
// checking every hunk header's positions and counts on the way. A diff that is not faithful to
// both texts fails here.
void ExpectDiffRebuilds(const std::string& before, const std::string& after, const std::string& unified) {
  const std::vector<std::string> a_lines = SplitKeepingNewlines(before);
  std::string rebuilt_a, rebuilt_b;
  size_t next_a = 0, b_lines = 0;
  std::vector<std::string> diff_lines;
  size_t start = 0;
  while (start < unified.size()) {
    size_t end = unified.find('\n', start);
    ASSERT_NE(end, std::string::npos) << "every line of a unified diff ends with a newline";
    diff_lines.push_back(unified.substr(start, end - start));
    start = end + 1;
  }
  size_t i = 0;
  while (i < diff_lines.size()) {
    const std::string& header = diff_lines[i++];
    unsigned long a_start = 0, a_count = 1, b_start = 0, b_count = 1;
    ASSERT_EQ(header.rfind("@@ -", 0), 0u) << header;
    const char* p = header.c_str() + 4;
    char* e = nullptr;
    a_start = std::strtoul(p, &e, 10);
    if (*e == ',') a_count = std::strtoul(e + 1, &e, 10);
    ASSERT_EQ(std::string(e, 2), " +") << header;
    b_start = std::strtoul(e + 2, &e, 10);
    if (*e == ',') b_count = std::strtoul(e + 1, &e, 10);
    ASSERT_EQ(std::string(e), " @@") << header;
    const size_t first_a = a_count == 0 ? a_start : a_start - 1;
    ASSERT_GE(first_a, next_a) << "hunks overlap or go backwards: " << header;
    for (; next_a < first_a; ++next_a, ++b_lines) {
      ASSERT_LT(next_a, a_lines.size());
      rebuilt_a += a_lines[next_a];
      rebuilt_b += a_lines[next_a];
    }
    EXPECT_EQ(b_count == 0 ? b_start : b_start - 1, b_lines) << header;
    size_t seen_a = 0, seen_b = 0;
    char last = 0;
    while (i < diff_lines.size() && diff_lines[i].rfind("@@ ", 0) != 0) {
      const std::string& line = diff_lines[i++];
      ASSERT_FALSE(line.empty());
      const std::string text = line.substr(1) + "\n";
      switch (line[0]) {
        case ' ': rebuilt_a += text; rebuilt_b += text; ++seen_a; ++seen_b; break;
        case '-': rebuilt_a += text; ++seen_a; break;
        case '+': rebuilt_b += text; ++seen_b; break;
        case '\\':
          ASSERT_EQ(line, "\\ No newline at end of file");
          ASSERT_NE(last, 0);
          if (last != '+') rebuilt_a.pop_back();
          if (last != '-') rebuilt_b.pop_back();
          continue;
        default: FAIL() << "unexpected line in a hunk: " << line;
      }
      last = line[0];
    }
    EXPECT_EQ(seen_a, a_count) << header;
    EXPECT_EQ(seen_b, b_count) << header;
    next_a += seen_a;
    b_lines += seen_b;
  }
  for (; next_a < a_lines.size(); ++next_a) {
    rebuilt_a += a_lines[next_a];
    rebuilt_b += a_lines[next_a];
  }
  EXPECT_EQ(rebuilt_a, before);
  EXPECT_EQ(rebuilt_b, after);
}

size_t LcsLength(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  std::vector<std::vector<size_t>> dp(a.size() + 1, std::vector<size_t>(b.size() + 1, 0));
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j)
      dp[i][j] = a[i - 1] == b[j - 1] ? dp[i - 1][j - 1] + 1 : std::max(dp[i - 1][j], dp[i][j - 1]);
  return dp[a.size()][b.size()];
}

TEST(DiffLinesTest, IdenticalTextsHaveNoDiff) {
  for (const char* text : {"", "a\n", "a\nb", "x\ny\nz\n"}) {
    LineDiff d = DiffLines(text, text);
    EXPECT_EQ(d.added, 0u);
    EXPECT_EQ(d.removed, 0u);
    EXPECT_EQ(d.unified, "");
    EXPECT_TRUE(d.minimal);
  }
}

TEST(DiffLinesTest, InsertionDeletionReplacement) {
  const std::string before = "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n";
  LineDiff inserted = DiffLines(before, "1\n2\n3\n4\n5\nnew\n6\n7\n8\n9\n10\n");
  EXPECT_EQ(inserted.added, 1u);
  EXPECT_EQ(inserted.removed, 0u);
  EXPECT_EQ(inserted.unified, "@@ -3,6 +3,7 @@\n 3\n 4\n 5\n+new\n 6\n 7\n 8\n");

  LineDiff deleted = DiffLines(before, "2\n3\n4\n5\n6\n7\n8\n9\n10\n");
  EXPECT_EQ(deleted.added, 0u);
  EXPECT_EQ(deleted.removed, 1u);
  EXPECT_EQ(deleted.unified, "@@ -1,4 +1,3 @@\n-1\n 2\n 3\n 4\n");

  LineDiff replaced = DiffLines(before, "1\n2\n3\n4\n5\n6\n7\n8\nnine\n10\n");
  EXPECT_EQ(replaced.added, 1u);
  EXPECT_EQ(replaced.removed, 1u);
  EXPECT_EQ(replaced.unified, "@@ -6,5 +6,5 @@\n 6\n 7\n 8\n-9\n+nine\n 10\n");

  // Two changes more than 6 lines apart: two hunks; closer: one.
  LineDiff two = DiffLines(before, "one\n2\n3\n4\n5\n6\n7\n8\n9\nten\n");
  EXPECT_EQ(two.unified, "@@ -1,4 +1,4 @@\n-1\n+one\n 2\n 3\n 4\n@@ -7,4 +7,4 @@\n 7\n 8\n 9\n-10\n+ten\n");
  LineDiff one = DiffLines(before, "1\ntwo\n3\n4\n5\n6\n7\neight\n9\n10\n");
  EXPECT_EQ(one.unified, "@@ -1,10 +1,10 @@\n 1\n-2\n+two\n 3\n 4\n 5\n 6\n 7\n-8\n+eight\n 9\n 10\n");
  // No context asked for.
  EXPECT_EQ(DiffLines(before, "1\ntwo\n3\n4\n5\n6\n7\n8\n9\n10\n", 0).unified, "@@ -2 +2 @@\n-2\n+two\n");
  for (const auto* d : {&inserted, &deleted, &replaced, &two, &one}) EXPECT_TRUE(d->minimal);
}

TEST(DiffLinesTest, EmptyTexts) {
  LineDiff from_empty = DiffLines("", "a\nb\n");
  EXPECT_EQ(from_empty.added, 2u);
  EXPECT_EQ(from_empty.removed, 0u);
  EXPECT_EQ(from_empty.unified, "@@ -0,0 +1,2 @@\n+a\n+b\n");
  LineDiff to_empty = DiffLines("a\n", "");
  EXPECT_EQ(to_empty.added, 0u);
  EXPECT_EQ(to_empty.removed, 1u);
  EXPECT_EQ(to_empty.unified, "@@ -1 +0,0 @@\n-a\n");
  // An addition at the top, without context, names line 0 as the one before the empty range.
  EXPECT_EQ(DiffLines("x\n", "y\nx\n").unified, "@@ -1 +1,2 @@\n+y\n x\n");
  EXPECT_EQ(DiffLines("x\n", "y\nx\n", 0).unified, "@@ -0,0 +1 @@\n+y\n");
}

TEST(DiffLinesTest, NoNewlineAtEndIsADifferentLine) {
  LineDiff added_newline = DiffLines("a\nb", "a\nb\n");
  EXPECT_EQ(added_newline.added, 1u);
  EXPECT_EQ(added_newline.removed, 1u);
  EXPECT_EQ(added_newline.unified, "@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n");
  // Both lack it: the shared last line is context, marked once.
  EXPECT_EQ(DiffLines("a\nb", "x\nb").unified, "@@ -1,2 +1,2 @@\n-a\n+x\n b\n\\ No newline at end of file\n");
  EXPECT_EQ(DiffLines("", "no newline").unified, "@@ -0,0 +1 @@\n+no newline\n\\ No newline at end of file\n");
  EXPECT_EQ(CountLines(""), 0u);
  EXPECT_EQ(CountLines("a"), 1u);
  EXPECT_EQ(CountLines("a\n"), 1u);
  EXPECT_EQ(CountLines("a\n\nb"), 3u);
}

TEST(DiffLinesTest, RandomTextsRebuildAndAreMinimal) {
  std::mt19937 random(12);  // fixed seed: the same cases on every run
  for (int round = 0; round < 3000; ++round) {
    auto make = [&random](size_t n) {
      std::vector<std::string> lines;
      for (size_t i = 0; i < n; ++i) lines.push_back(std::string(1, static_cast<char>('a' + random() % 3)) + "\n");
      return lines;
    };
    std::vector<std::string> a = make(random() % 14), b = make(random() % 14);
    if (random() % 4 == 0 && !a.empty()) a.back().pop_back();  // sometimes no newline at the end
    if (random() % 4 == 0 && !b.empty()) b.back().pop_back();
    std::string before, after;
    for (const std::string& l : a) before += l;
    for (const std::string& l : b) after += l;
    const size_t context = random() % 4;
    LineDiff d = DiffLines(before, after, context);
    SCOPED_TRACE("before=" + Json(before).dump() + " after=" + Json(after).dump() + " context=" +
                 std::to_string(context));
    ExpectDiffRebuilds(before, after, d.unified);
    const size_t lcs = LcsLength(a, b);
    EXPECT_EQ(d.removed, a.size() - lcs);
    EXPECT_EQ(d.added, b.size() - lcs);
    EXPECT_TRUE(d.minimal);
    // Under a small work limit the diff may not be minimal, but it is still correct.
    LineDiff bounded = DiffLines(before, after, context, random() % 60);
    ExpectDiffRebuilds(before, after, bounded.unified);
    EXPECT_EQ(bounded.removed - d.removed, bounded.added - d.added);
    if (bounded.minimal) {
      EXPECT_EQ(bounded.removed, d.removed);  // the limit was not reached
    }
    if (HasFailure()) return;
  }
}

TEST(DiffLinesTest, WorkBoundStillGivesACorrectDiff) {
  // Small texts with a tiny work limit: parts are solved, the rest replaced whole.
  std::mt19937 random(7);
  std::string before, after;
  for (int i = 0; i < 60; ++i) before += std::to_string(random() % 5) + "\n";
  for (int i = 0; i < 60; ++i) after += std::to_string(random() % 5) + "\n";
  const LineDiff exact = DiffLines(before, after);
  ASSERT_TRUE(exact.minimal);
  for (uint64_t limit : {0u, 50u, 400u, 2000u}) {
    SCOPED_TRACE("limit " + std::to_string(limit));
    LineDiff bounded = DiffLines(before, after, 3, limit);
    EXPECT_FALSE(bounded.minimal);
    ExpectDiffRebuilds(before, after, bounded.unified);
    EXPECT_GE(bounded.added, exact.added);
    EXPECT_GE(bounded.removed, exact.removed);
    EXPECT_EQ(bounded.added - exact.added, bounded.removed - exact.removed);
  }
}

TEST(DiffLinesTest, PastTheBoundOnceOnlyLinesStillMatch) {
  // Every fourth line rewritten; every line occurs once. With the search cut off at once, the
  // unchanged lines are matched as anchors and the counts are still the fewest edits.
  std::string before, after;
  for (int i = 0; i < 2000; ++i) {
    before += "line " + std::to_string(i) + "\n";
    after += (i % 4 == 0 ? "changed " : "line ") + std::to_string(i) + "\n";
  }
  LineDiff d = DiffLines(before, after, 3, /*work_limit=*/0);
  EXPECT_FALSE(d.minimal);
  EXPECT_EQ(d.removed, 500u);
  EXPECT_EQ(d.added, 500u);
  ExpectDiffRebuilds(before, after, d.unified);
  // No line occurs once: nothing to anchor on, so all of it is replaced.
  LineDiff repeated = DiffLines("a\nb\na\nb\n", "b\na\nb\na\n", 3, 0);
  EXPECT_FALSE(repeated.minimal);
  EXPECT_EQ(repeated.removed, 4u);
  ExpectDiffRebuilds("a\nb\na\nb\n", "b\na\nb\na\n", repeated.unified);
}

TEST(DiffLinesTest, LargeInputs) {
  // 200,000 lines each, no line in common: far past the work bound, reported whole.
  std::string before, after;
  for (int i = 0; i < 200'000; ++i) before += "old " + std::to_string(i) + "\n";
  for (int i = 0; i < 200'000; ++i) after += "new " + std::to_string(i) + "\n";
  LineDiff different = DiffLines(before, after);
  EXPECT_FALSE(different.minimal);
  EXPECT_EQ(different.removed, 200'000u);
  EXPECT_EQ(different.added, 200'000u);
  ExpectDiffRebuilds(before, after, different.unified);

  // 200,000 lines with three edits far apart: exact, three hunks.
  std::string edited;
  for (int i = 0; i < 200'000; ++i) {
    if (i == 10 || i == 100'000) continue;  // deleted
    edited += "old " + std::to_string(i) + "\n";
    if (i == 150'000) edited += "inserted\n";
  }
  LineDiff few = DiffLines(before, edited);
  EXPECT_TRUE(few.minimal);
  EXPECT_EQ(few.removed, 2u);
  EXPECT_EQ(few.added, 1u);
  EXPECT_EQ(few.unified,
            "@@ -8,7 +8,6 @@\n old 7\n old 8\n old 9\n-old 10\n old 11\n old 12\n old 13\n"
            "@@ -99998,7 +99997,6 @@\n old 99997\n old 99998\n old 99999\n-old 100000\n old 100001\n old 100002\n"
            " old 100003\n"
            "@@ -149999,6 +149997,7 @@\n old 149998\n old 149999\n old 150000\n+inserted\n old 150001\n old 150002\n"
            " old 150003\n");
}

// --- CompareKvGrant ------------------------------------------------------------------------------

void ExpectChange(const ConstraintChange& change, const std::string& constraint, Direction direction,
                  const std::string& detail) {
  EXPECT_EQ(change.constraint, constraint);
  EXPECT_EQ(change.direction, direction) << DirectionName(change.direction);
  EXPECT_EQ(change.detail, detail);
}

TEST(CompareKvGrantTest, Namespaces) {
  const Json orders = Json::parse(R"({"namespaces": ["orders"]})");
  const Json both = Json::parse(R"({"namespaces": ["orders", "tmp"]})");
  const Json other = Json::parse(R"({"namespaces": ["tmp", "audit"]})");
  EXPECT_TRUE(CompareKvGrant(orders, orders).empty());
  EXPECT_TRUE(CompareKvGrant(both, Json::parse(R"({"namespaces": ["tmp", "orders"]})")).empty());  // order
  auto widened = CompareKvGrant(orders, both);
  ASSERT_EQ(widened.size(), 1u);
  ExpectChange(widened[0], "namespaces", Direction::kWidened, "+tmp");
  auto narrowed = CompareKvGrant(both, orders);
  ASSERT_EQ(narrowed.size(), 1u);
  ExpectChange(narrowed[0], "namespaces", Direction::kNarrowed, "-tmp");
  auto changed = CompareKvGrant(orders, other);
  ASSERT_EQ(changed.size(), 1u);
  ExpectChange(changed[0], "namespaces", Direction::kChanged, "+audit +tmp -orders");
  // A name that is not plain is quoted, so it cannot pass for two names or a sign.
  auto odd = CompareKvGrant(orders, Json::parse(R"({"namespaces": ["orders", "a -orders", "-x"]})"));
  ASSERT_EQ(odd.size(), 1u);
  ExpectChange(odd[0], "namespaces", Direction::kWidened, R"(+"-x" +"a -orders")");
}

TEST(CompareKvGrantTest, PutLimitsAndDefaults) {
  const Json plain = Json::parse(R"({"namespaces": ["orders"]})");
  // Defaults written out are the same limits.
  EXPECT_TRUE(CompareKvGrant(plain, Json::parse(R"({"namespaces": ["orders"], "max_value_bytes": 1048576,
                                                    "quota": {"bytes": 67108864, "keys": 10000}})"))
                  .empty());
  auto raised = CompareKvGrant(plain, Json::parse(R"({"namespaces": ["orders"], "max_value_bytes": 2097152,
                                                      "quota": {"bytes": 134217728}})"));
  ASSERT_EQ(raised.size(), 2u);
  ExpectChange(raised[0], "max_value_bytes", Direction::kWidened, "1048576 (default) -> 2097152");
  ExpectChange(raised[1], "quota.bytes", Direction::kWidened, "67108864 (default) -> 134217728");
  auto lowered = CompareKvGrant(Json::parse(R"({"namespaces": ["orders"], "quota": {"keys": 500}})"),
                                Json::parse(R"({"namespaces": ["orders"], "quota": {"keys": 20}})"));
  ASSERT_EQ(lowered.size(), 1u);
  ExpectChange(lowered[0], "quota.keys", Direction::kNarrowed, "500 -> 20");
  auto back_to_default = CompareKvGrant(Json::parse(R"({"namespaces": ["orders"], "max_value_bytes": 10})"), plain);
  ASSERT_EQ(back_to_default.size(), 1u);
  ExpectChange(back_to_default[0], "max_value_bytes", Direction::kWidened, "10 -> 1048576 (default)");
  // Mixed: each constraint in its own direction, namespaces first.
  auto mixed = CompareKvGrant(Json::parse(R"({"namespaces": ["orders", "tmp"], "max_value_bytes": 4096})"),
                              Json::parse(R"({"namespaces": ["orders"], "max_value_bytes": 8192,
                                              "quota": {"keys": 10}})"));
  ASSERT_EQ(mixed.size(), 3u);
  ExpectChange(mixed[0], "namespaces", Direction::kNarrowed, "-tmp");
  ExpectChange(mixed[1], "max_value_bytes", Direction::kWidened, "4096 -> 8192");
  ExpectChange(mixed[2], "quota.keys", Direction::kNarrowed, "10000 (default) -> 10");
  // A value check_grant would refuse is "changed", never guessed.
  auto bad = CompareKvGrant(plain, Json::parse(R"({"namespaces": ["orders"], "max_value_bytes": "big"})"));
  ASSERT_EQ(bad.size(), 1u);
  ExpectChange(bad[0], "max_value_bytes", Direction::kChanged, R"(1048576 (default) -> "big")");
}

// --- ReviewVersions and its renderings -----------------------------------------------------------

// The built-in kv.* and log as the CLI registers them, and two embedder calls: mail.send compares
// its grants ({"to": [addresses]}: more addresses accept more), clock.set does not.
class ReviewTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = OpenSqliteStore({.path = dir_.File("journal.db")});
    ASSERT_TRUE(store) << store.error().message;
    store_ = std::move(*store);
    ASSERT_TRUE(RegisterKvHostCalls(registry_, *store_));
    ASSERT_TRUE(RegisterLogHostCall(registry_, [](const HostCallContext&, std::string_view, std::string_view) {}));

    HostCallSpec mail;
    mail.name = "mail.send";
    mail.handler = NoopReviewHandler;
    mail.check_grant = [](const Json& c, const std::string& path) -> Result<void> {
      if (!c.contains("to") || !c["to"].is_array()) {
        return MakeError(ErrorCode::kInvalidArgument, path + ": needs \"to\"");
      }
      return Ok();
    };
    mail.compare_grant = [](const Json& before, const Json& after) {
      std::set<std::string> was(before["to"].begin(), before["to"].end());
      std::set<std::string> now(after["to"].begin(), after["to"].end());
      std::vector<ConstraintChange> changes;
      if (was == now) return changes;
      const bool wider = std::includes(now.begin(), now.end(), was.begin(), was.end());
      const bool narrower = std::includes(was.begin(), was.end(), now.begin(), now.end());
      changes.push_back(ConstraintChange{"to", wider ? Direction::kWidened : narrower ? Direction::kNarrowed
                                                                                      : Direction::kChanged,
                                         std::to_string(was.size()) + " -> " + std::to_string(now.size()) +
                                             " recipients"});
      return changes;
    };
    ASSERT_TRUE(registry_.Register(std::move(mail)));

    HostCallSpec clock;
    clock.name = "clock.set";
    clock.handler = NoopReviewHandler;
    clock.check_grant = [](const Json&, const std::string&) -> Result<void> { return Ok(); };
    ASSERT_TRUE(registry_.Register(std::move(clock)));

    HostCallSpec thrower;
    thrower.name = "fragile.call";
    thrower.handler = NoopReviewHandler;
    thrower.check_grant = [](const Json&, const std::string&) -> Result<void> { return Ok(); };
    thrower.compare_grant = [](const Json&, const Json&) -> std::vector<ConstraintChange> {
      throw std::runtime_error("cannot compare \x1b[31mred\x1b[0m");
    };
    ASSERT_TRUE(registry_.Register(std::move(thrower)));
  }

  Manifest Parse(const std::string& text) {
    auto m = Manifest::Parse(text, registry_);
    EXPECT_TRUE(m) << text << " -> " << (m ? "" : m.error().message);
    if (!m) std::abort();
    return std::move(*m);
  }
  // A review of manifest text `a` -> `b` with the same source.
  Review Between(const std::string& a, const std::string& b, std::string_view source = "x\n") {
    Manifest before = Parse(a);
    Manifest after = Parse(b);
    return ReviewVersions(&before, source, a, after, source, b, registry_);
  }

  testing_support::TempDir dir_;
  std::unique_ptr<Store> store_;
  HostCallRegistry registry_;
};

TEST_F(ReviewTest, BuiltInsCompareTheirGrants) {
  for (const char* name : {"kv.get", "kv.put", "kv.delete", "kv.list"}) {
    const HostCallSpec* spec = registry_.Find(name);
    ASSERT_NE(spec, nullptr);
    ASSERT_TRUE(spec->compare_grant) << name;
    auto changes =
        spec->compare_grant(Json::parse(R"({"namespaces": ["a"]})"), Json::parse(R"({"namespaces": ["b"]})"));
    ASSERT_EQ(changes.size(), 1u) << name;
    ExpectChange(changes[0], "namespaces", Direction::kChanged, "+b -a");
  }
  const HostCallSpec* log = registry_.Find("log");
  ASSERT_TRUE(log->compare_grant);
  EXPECT_TRUE(log->compare_grant(Json::object(), Json::object()).empty());
}

TEST_F(ReviewTest, FirstVersionListsEveryGrantAndBudget) {
  const std::string text = R"({"grants": {"log": {}, "kv.put": {"namespaces": ["orders"], "quota": {"keys": 100}},
                                           "kv.get": {"namespaces": ["orders"]}},
                               "budgets": {"cpu_ms": 500, "heap_mb": 32}})";
  const Manifest m = Parse(text);
  const std::string source = "export default async (input, host) => {\n  return 1;\n};\n";
  Review r = ReviewVersions(nullptr, std::nullopt, "", m, source, text, registry_);
  EXPECT_TRUE(r.first);
  EXPECT_FALSE(r.identical);
  ASSERT_EQ(r.grants.size(), 3u);
  EXPECT_EQ(r.grants[0].name, "kv.get");
  EXPECT_EQ(r.grants[1].name, "kv.put");
  EXPECT_EQ(r.grants[2].name, "log");
  for (const GrantReview& g : r.grants) {
    EXPECT_EQ(g.kind, Kind::kAdded);
    EXPECT_TRUE(g.before.is_null());
    EXPECT_EQ(g.after, m.grants().at(g.name));
  }
  ASSERT_EQ(r.budgets.size(), 7u);
  const std::vector<std::pair<std::string, uint64_t>> expected = {
      {"cpu_ms", 500},    {"heap_mb", 32},       {"stack_kb", 1024}, {"deadline_ms", 60000},
      {"calls_in_flight", 64}, {"journal_kb", 4096}, {"log_kb", 1024}};
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(r.budgets[i].name, expected[i].first);
    EXPECT_EQ(r.budgets[i].after, expected[i].second) << expected[i].first;
  }
  EXPECT_TRUE(r.source.present);
  EXPECT_FALSE(r.source.identical);
  EXPECT_EQ(r.source.lines_after, 3u);
  EXPECT_EQ(r.source.lines_added, 3u);
  EXPECT_TRUE(r.Widens());
  EXPECT_EQ(RenderReview(r, false),
            "grants:\n"
            "  + kv.get: {\"namespaces\":[\"orders\"]}\n"
            "  + kv.put: {\"namespaces\":[\"orders\"],\"quota\":{\"keys\":100}}\n"
            "  + log: {}\n"
            "budgets:\n"
            "  cpu_ms: 500\n"
            "  heap_mb: 32\n"
            "  stack_kb: 1024\n"
            "  deadline_ms: 60000\n"
            "  calls_in_flight: 64\n"
            "  journal_kb: 4096\n"
            "  log_kb: 1024\n"
            "source:\n"
            "  3 lines\n");
  EXPECT_EQ(RenderReview(r, true).substr(RenderReview(r, false).size()),
            "    @@ -0,0 +1,3 @@\n"
            "    +export default async (input, host) => {\n"
            "    +  return 1;\n"
            "    +};\n");
  Json j = ReviewJson(r);
  EXPECT_EQ(j["first"], true);
  EXPECT_EQ(j["widens"], true);
  EXPECT_EQ(j["grants"][1], Json::parse(R"({"name": "kv.put", "kind": "added", "before": null,
                                            "after": {"namespaces": ["orders"], "quota": {"keys": 100}},
                                            "comparable": true, "changes": []})"));
  EXPECT_EQ(j["budgets"][0], Json::parse(R"({"name": "cpu_ms", "after": 500})"));
  EXPECT_EQ(j["source"], Json::parse(R"({"present": true, "lines_before": 0, "lines_after": 3, "lines_added": 3,
                                         "lines_removed": 0, "identical": false, "minimal": true})"));
  EXPECT_FALSE(j["source"].contains("unified"));
  EXPECT_EQ(ReviewJson(r, true)["source"]["unified"], r.source.unified);
}

TEST_F(ReviewTest, FirstVersionWithNoGrants) {
  const Manifest m = Parse("{}");
  Review r = ReviewVersions(nullptr, std::nullopt, "", m, "", "{}", registry_);
  EXPECT_TRUE(r.grants.empty());
  EXPECT_EQ(r.budgets.size(), 7u);
  EXPECT_NE(RenderReview(r, false).find("grants:\n  none (the flow may call only host calls that need no grant, "
                                        "such as log)\nbudgets:\n"),
            std::string::npos);
  EXPECT_NE(RenderReview(r, false).find("source:\n  0 lines\n"), std::string::npos);
}

TEST_F(ReviewTest, GrantsAddedAndRemoved) {
  Review r = Between(R"({"grants": {"kv.get": {"namespaces": ["orders"]}, "kv.delete": {"namespaces": ["tmp"]}}})",
                     R"({"grants": {"kv.get": {"namespaces": ["orders"]}, "kv.list": {"namespaces": ["orders"]}}})");
  EXPECT_FALSE(r.first);
  ASSERT_EQ(r.grants.size(), 2u);  // kv.get is the same: omitted
  EXPECT_EQ(r.grants[0].name, "kv.delete");
  EXPECT_EQ(r.grants[0].kind, Kind::kRemoved);
  EXPECT_EQ(r.grants[0].before, Json::parse(R"({"namespaces": ["tmp"]})"));
  EXPECT_TRUE(r.grants[0].after.is_null());
  EXPECT_EQ(r.grants[1].name, "kv.list");
  EXPECT_EQ(r.grants[1].kind, Kind::kAdded);
  EXPECT_TRUE(r.budgets.empty());
  EXPECT_TRUE(r.source.identical);
  EXPECT_TRUE(r.Widens());
  EXPECT_EQ(RenderReview(r, false),
            "grants:\n"
            "  - kv.delete: removed (it granted {\"namespaces\":[\"tmp\"]})\n"
            "  + kv.list: added {\"namespaces\":[\"orders\"]}\n"
            "budgets:\n"
            "  no change\n"
            "source:\n"
            "  unchanged (1 line)\n");
  // Only a removal: narrows, nothing widens.
  Review removed = Between(R"({"grants": {"kv.get": {"namespaces": ["o"]}, "kv.delete": {"namespaces": ["o"]}}})",
                           R"({"grants": {"kv.get": {"namespaces": ["o"]}}})");
  ASSERT_EQ(removed.grants.size(), 1u);
  EXPECT_FALSE(removed.Widens());
}

TEST_F(ReviewTest, GrantsWidenedNarrowedAndChangedPerConstraint) {
  Review r = Between(R"({"grants": {
        "kv.get": {"namespaces": ["orders"]},
        "kv.list": {"namespaces": ["orders", "tmp"]},
        "kv.delete": {"namespaces": ["a"]},
        "kv.put": {"namespaces": ["orders", "tmp"], "max_value_bytes": 4096, "quota": {"bytes": 1000000}}}})",
                     R"({"grants": {
        "kv.get": {"namespaces": ["orders", "audit"]},
        "kv.list": {"namespaces": ["orders"]},
        "kv.delete": {"namespaces": ["b"]},
        "kv.put": {"namespaces": ["orders"], "max_value_bytes": 8192, "quota": {"bytes": 2000000}}}})");
  ASSERT_EQ(r.grants.size(), 4u);
  EXPECT_EQ(r.grants[0].name, "kv.delete");
  EXPECT_EQ(r.grants[0].kind, Kind::kChanged);
  EXPECT_EQ(r.grants[1].name, "kv.get");
  EXPECT_EQ(r.grants[1].kind, Kind::kWidened);
  EXPECT_EQ(r.grants[2].name, "kv.list");
  EXPECT_EQ(r.grants[2].kind, Kind::kNarrowed);
  EXPECT_EQ(r.grants[3].name, "kv.put");
  EXPECT_EQ(r.grants[3].kind, Kind::kChanged);  // narrowed namespaces, widened limits
  ASSERT_EQ(r.grants[3].changes.size(), 3u);
  for (const GrantReview& g : r.grants) EXPECT_TRUE(g.comparable);
  EXPECT_EQ(RenderReview(r, false),
            "grants:\n"
            "  ~ kv.delete: namespaces +b -a (changed)\n"
            "  + kv.get: namespaces +audit (widened)\n"
            "  - kv.list: namespaces -tmp (narrowed)\n"
            "  - kv.put: namespaces -tmp (narrowed)\n"
            "  + kv.put: max_value_bytes 4096 -> 8192 (widened)\n"
            "  + kv.put: quota.bytes 1000000 -> 2000000 (widened)\n"
            "budgets:\n"
            "  no change\n"
            "source:\n"
            "  unchanged (1 line)\n");
  EXPECT_TRUE(r.Widens());
  Json j = ReviewJson(r);
  EXPECT_EQ(j["grants"][3]["changes"][1],
            Json::parse(R"({"constraint": "max_value_bytes", "direction": "widened", "detail": "4096 -> 8192"})"));
  EXPECT_EQ(j["grants"][3]["kind"], "changed");

  // Narrowed only: the review does not widen.
  Review narrower = Between(R"({"grants": {"kv.put": {"namespaces": ["a", "b"], "quota": {"keys": 50}}}})",
                            R"({"grants": {"kv.put": {"namespaces": ["a"], "quota": {"keys": 40}}}})");
  ASSERT_EQ(narrower.grants.size(), 1u);
  EXPECT_EQ(narrower.grants[0].kind, Kind::kNarrowed);
  EXPECT_FALSE(narrower.Widens());
}

TEST_F(ReviewTest, SameGrantWrittenDifferentlyIsNoChange) {
  const std::string a = R"({"grants": {"kv.put": {"namespaces": ["x", "y"]}}})";
  const std::string b = R"({"grants": {"kv.put": {"quota": {"keys": 10000}, "namespaces": ["y", "x"],
                                                   "max_value_bytes": 1048576}}})";
  Review r = Between(a, b);
  EXPECT_TRUE(r.grants.empty());
  EXPECT_TRUE(r.budgets.empty());
  EXPECT_FALSE(r.identical);
  EXPECT_FALSE(r.same_manifest_text);
  EXPECT_FALSE(r.Widens());
  EXPECT_EQ(RenderReview(r, false),
            "grants:\n"
            "  no change (the manifest's text differs only in form: spacing, key order or defaults written out)\n"
            "budgets:\n"
            "  no change\n"
            "source:\n"
            "  unchanged (1 line)\n");
}

TEST_F(ReviewTest, BudgetsRaisedAndLowered) {
  Review r = Between(R"({"budgets": {"cpu_ms": 1000, "heap_mb": 64, "log_kb": 16}})",
                     R"({"budgets": {"cpu_ms": 2000, "heap_mb": 32, "log_kb": 16, "deadline_ms": 60000}})");
  ASSERT_EQ(r.budgets.size(), 2u);  // deadline_ms written out at its default is no change
  EXPECT_EQ(r.budgets[0].name, "cpu_ms");
  EXPECT_EQ(r.budgets[0].before, 1000u);
  EXPECT_EQ(r.budgets[0].after, 2000u);
  EXPECT_EQ(r.budgets[1].name, "heap_mb");
  EXPECT_EQ(r.budgets[1].before, 64u);
  EXPECT_EQ(r.budgets[1].after, 32u);
  EXPECT_TRUE(r.Widens());
  EXPECT_EQ(RenderReview(r, false),
            "grants:\n"
            "  no change\n"
            "budgets:\n"
            "  + cpu_ms: 1000 -> 2000 (raised)\n"
            "  - heap_mb: 64 -> 32 (lowered)\n"
            "source:\n"
            "  unchanged (1 line)\n");
  EXPECT_EQ(ReviewJson(r)["budgets"][1],
            Json::parse(R"({"name": "heap_mb", "before": 64, "after": 32, "change": "lowered"})"));
  Review lowered = Between(R"({"budgets": {"journal_kb": 8192}})", R"({"budgets": {"journal_kb": 512}})");
  ASSERT_EQ(lowered.budgets.size(), 2u);  // log_kb's default follows journal_kb below 1024
  EXPECT_EQ(lowered.budgets[1].name, "log_kb");
  EXPECT_EQ(lowered.budgets[1].after, 512u);
  EXPECT_FALSE(lowered.Widens());
}

TEST_F(ReviewTest, EmbedderCallWithItsOwnCompare) {
  Review wider = Between(R"({"grants": {"mail.send": {"to": ["a@x"]}}})",
                         R"({"grants": {"mail.send": {"to": ["a@x", "b@x"]}}})");
  ASSERT_EQ(wider.grants.size(), 1u);
  EXPECT_EQ(wider.grants[0].kind, Kind::kWidened);
  EXPECT_TRUE(wider.grants[0].comparable);
  EXPECT_EQ(RenderReview(wider, false).rfind("grants:\n  + mail.send: to 1 -> 2 recipients (widened)\nbudgets:\n", 0),
            0u);
  Review narrower = Between(R"({"grants": {"mail.send": {"to": ["a@x", "b@x"]}}})",
                            R"({"grants": {"mail.send": {"to": ["b@x"]}}})");
  ASSERT_EQ(narrower.grants.size(), 1u);
  EXPECT_EQ(narrower.grants[0].kind, Kind::kNarrowed);
  EXPECT_FALSE(narrower.Widens());
  // Its compare says the same calls are accepted: no change, although the JSON differs.
  Review same = Between(R"({"grants": {"mail.send": {"to": ["a@x", "a@x"]}}})",
                        R"({"grants": {"mail.send": {"to": ["a@x"]}}})");
  EXPECT_TRUE(same.grants.empty());
}

TEST_F(ReviewTest, EmbedderCallWithoutCompareCannotBeJudged) {
  Review r = Between(R"({"grants": {"clock.set": {"max_skew_s": 5}}})",
                     R"({"grants": {"clock.set": {"max_skew_s": 1}}})");
  ASSERT_EQ(r.grants.size(), 1u);
  EXPECT_EQ(r.grants[0].kind, Kind::kChanged);
  EXPECT_FALSE(r.grants[0].comparable);
  EXPECT_TRUE(r.grants[0].changes.empty());
  EXPECT_TRUE(r.Widens());  // even a narrowing, since basal cannot tell
  EXPECT_EQ(RenderReview(r, false),
            "grants:\n"
            "  ? clock.set: changed; basal cannot tell whether it is wider: read the constraints\n"
            "      before: {\"max_skew_s\":5}\n"
            "      after:  {\"max_skew_s\":1}\n"
            "budgets:\n"
            "  no change\n"
            "source:\n"
            "  unchanged (1 line)\n");
  EXPECT_EQ(ReviewJson(r)["grants"][0]["comparable"], false);
  // Equal constraints (in any key order) need no judging.
  Review same = Between(R"({"grants": {"clock.set": {"a": 1, "b": 2}}})",
                        R"({"grants": {"clock.set": {"b": 2, "a": 1}}})");
  EXPECT_TRUE(same.grants.empty());

  // A compare_grant that throws: not comparable, and its message is shown escaped.
  Review thrown = Between(R"({"grants": {"fragile.call": {"n": 1}}})", R"({"grants": {"fragile.call": {"n": 2}}})");
  ASSERT_EQ(thrown.grants.size(), 1u);
  EXPECT_FALSE(thrown.grants[0].comparable);
  EXPECT_EQ(thrown.grants[0].compare_error, "its compare_grant threw: cannot compare \x1b[31mred\x1b[0m");
  EXPECT_NE(RenderReview(thrown, false)
                .find("  ? fragile.call: changed; basal cannot tell whether it is wider (its compare_grant threw: "
                      "cannot compare \\x1b[31mred\\x1b[0m): read the constraints\n"),
            std::string::npos);
}

TEST_F(ReviewTest, IdenticalContent) {
  const std::string text = R"({"grants": {"kv.get": {"namespaces": ["orders"]}}})";
  Review r = Between(text, text, "a\nb\n");
  EXPECT_TRUE(r.identical);
  EXPECT_TRUE(r.same_manifest_text);
  EXPECT_TRUE(r.grants.empty());
  EXPECT_TRUE(r.budgets.empty());
  EXPECT_TRUE(r.source.identical);
  EXPECT_EQ(r.source.unified, "");
  EXPECT_FALSE(r.Widens());
  EXPECT_EQ(RenderReview(r, true), "grants:\n  no change\nbudgets:\n  no change\nsource:\n  unchanged (2 lines)\n");
  EXPECT_EQ(ReviewJson(r)["identical"], true);

  // Same manifest, new source: not identical, and the source's change is counted.
  const Manifest m = Parse(text);
  Review edited = ReviewVersions(&m, "a\nb\n", text, m, "a\nc\nb\n", text, registry_);
  EXPECT_FALSE(edited.identical);
  EXPECT_TRUE(edited.same_manifest_text);
  EXPECT_FALSE(edited.Widens());  // source changes are shown, not judged
  EXPECT_EQ(edited.source.lines_added, 1u);
  EXPECT_EQ(RenderReview(edited, true),
            "grants:\n  no change\nbudgets:\n  no change\nsource:\n  2 lines -> 3 lines: 1 added, 0 removed\n"
            "    @@ -1,2 +1,3 @@\n     a\n    +c\n     b\n");
}

TEST_F(ReviewTest, PolicyHasNoSource) {
  const std::string a = R"({"grants": {"kv.get": {"namespaces": ["o"]}}})";
  const Manifest before = Parse(a);
  Review first = ReviewVersions(nullptr, std::nullopt, "", before, std::nullopt, a, registry_);
  EXPECT_FALSE(first.source.present);
  EXPECT_NE(RenderReview(first, true).find("source:\n  none (a codemode policy has no source"), std::string::npos);
  Review same = ReviewVersions(&before, std::nullopt, a, before, std::nullopt, a, registry_);
  EXPECT_TRUE(same.identical);
  EXPECT_FALSE(same.source.present);
  EXPECT_EQ(ReviewJson(same)["source"], Json::parse(R"({"present": false})"));
}

// Every line RenderReview writes is its own: a section header or indented under one. Text from
// the files (namespaces, constraint values, source lines) cannot start a line, move the cursor or
// reach the terminal as a control.
void ExpectOnlyOurLines(const std::string& rendered) {
  for (unsigned char c : rendered) {
    EXPECT_TRUE(c == '\n' || c >= 0x20) << "control byte " << static_cast<int>(c) << " in:\n" << rendered;
    EXPECT_NE(c, 0x7f);
  }
  EXPECT_EQ(rendered.find("\xc2\x9b"), std::string::npos);  // a C1 CSI
  EXPECT_EQ(rendered.find("\xe2\x80\xae"), std::string::npos);  // RIGHT-TO-LEFT OVERRIDE
  size_t start = 0;
  while (start < rendered.size()) {
    const size_t end = rendered.find('\n', start);
    const std::string line = rendered.substr(start, end - start);
    EXPECT_TRUE(line == "grants:" || line == "budgets:" || line == "source:" || line.rfind("  ", 0) == 0) << line;
    start = end + 1;
  }
}

TEST_F(ReviewTest, RenderEscapesHostileText) {
  // A namespace with a newline forging a line of the review, an escape sequence, a C1 CSI and a
  // bidi override; JSON strings in the manifest can hold them all.
  const std::string hostile = R"(o\nbudgets:\n  - cpu_ms: 9 -> 1 (lowered)\u001b[2J\u009b31m\u202eevil)";
  const std::string a = R"({"grants": {"kv.put": {"namespaces": ["orders"]}}})";
  const std::string b = R"({"grants": {"kv.put": {"namespaces": ["orders", ")" + hostile + R"("]},
                                        "kv.get": {"namespaces": [")" + hostile + R"("]}}})";
  const std::string source_before = "line one\n";
  const std::string source_after = "line one\nsource:\n\x1b]0;title\x07\r  + kv.put: forged\n\xe2\x80\xae\xff\n";
  const Manifest before = Parse(a);
  const Manifest after = Parse(b);
  Review r = ReviewVersions(&before, source_before, a, after, source_after, b, registry_);
  ASSERT_EQ(r.grants.size(), 2u);
  const std::string rendered = RenderReview(r, true);
  ExpectOnlyOurLines(rendered);
  EXPECT_NE(rendered.find("  + kv.get: added {\"namespaces\":[\"o\\nbudgets:\\n  - cpu_ms: 9 -> 1 (lowered)"
                          "\\u001b[2J\\u009b31m\\u202eevil\"]}\n"),
            std::string::npos)
      << rendered;
  EXPECT_NE(rendered.find("  + kv.put: namespaces +\"o\\\\nbudgets:"), std::string::npos) << rendered;
  EXPECT_NE(rendered.find("    +\\x1b]0;title\\x07\\r  + kv.put: forged\n"), std::string::npos) << rendered;
  EXPECT_NE(rendered.find("    +\\u202e\\xff\n"), std::string::npos) << rendered;
  EXPECT_NE(rendered.find("    +source:\n"), std::string::npos) << rendered;
  // The JSON keeps the facts as they are (the serializer escapes them).
  Json j = ReviewJson(r, true);
  EXPECT_EQ(j["grants"][0]["after"]["namespaces"][0].get<std::string>(),
            "o\nbudgets:\n  - cpu_ms: 9 -> 1 (lowered)\x1b[2J\xc2\x9b" "31m\xe2\x80\xae" "evil");
  EXPECT_NO_THROW((void)j.dump(-1, ' ', false, Json::error_handler_t::replace));
}

}  // namespace
}  // namespace basal
