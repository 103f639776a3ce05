// MetricsRegistry (src/serve/metrics.h): each type rendered in the Prometheus text format 0.0.4,
// compared with the exact expected text; escaping; histogram buckets (cumulative, +Inf = count);
// the cap on label combinations folding into "other"; names and declarations refused; number
// formatting. And an independent check of every rendered line against the format's line grammar
// (promtool is not packaged), written from the format's description, not from the renderer.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "serve/metrics.h"

namespace basal::serve {
namespace {

// ---- an independent reader of the text format's lines ----

bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':'; }
bool IsNameChar(char c) { return IsNameStart(c) || (c >= '0' && c <= '9'); }

// A float as Go's strconv.ParseFloat (which Prometheus uses) reads it, restricted to what a
// renderer may write: NaN, +Inf, -Inf, or an optionally signed decimal with optional exponent.
bool IsSampleValue(std::string_view v) {
  if (v == "NaN" || v == "+Inf" || v == "-Inf") return true;
  size_t i = 0;
  if (i < v.size() && (v[i] == '-' || v[i] == '+')) ++i;
  size_t digits = 0;
  while (i < v.size() && v[i] >= '0' && v[i] <= '9') ++i, ++digits;
  if (i < v.size() && v[i] == '.') {
    ++i;
    while (i < v.size() && v[i] >= '0' && v[i] <= '9') ++i, ++digits;
  }
  if (digits == 0) return false;
  if (i < v.size() && (v[i] == 'e' || v[i] == 'E')) {
    ++i;
    if (i < v.size() && (v[i] == '-' || v[i] == '+')) ++i;
    size_t exp_digits = 0;
    while (i < v.size() && v[i] >= '0' && v[i] <= '9') ++i, ++exp_digits;
    if (exp_digits == 0) return false;
  }
  return i == v.size();
}

// Checks one exposition: every line is "# HELP name text", "# TYPE name type" or
// name[{label="value",...}] value; label values use only the escapes \\ \" \n; a family's TYPE
// comes once, before its samples; a histogram's buckets rise and end with le="+Inf" equal to
// _count. Returns "" or what is wrong.
std::string CheckExposition(std::string_view text) {
  if (text.empty()) return "";
  if (text.back() != '\n') return "the last line does not end with a line feed";
  std::map<std::string, std::string> types;
  std::map<std::string, double> last_bucket;     // histogram series -> last cumulative count
  std::map<std::string, double> inf_bucket;      // histogram series -> +Inf count
  size_t line_no = 0;
  for (size_t start = 0; start < text.size();) {
    const size_t end = text.find('\n', start);
    const std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++line_no;
    const std::string where = "line " + std::to_string(line_no) + " [" + std::string(line) + "]: ";
    if (line.substr(0, 7) == "# HELP " || line.substr(0, 7) == "# TYPE ") {
      const std::string_view rest = line.substr(7);
      const size_t space = rest.find(' ');
      if (space == std::string_view::npos) return where + "no text after the name";
      const std::string name(rest.substr(0, space));
      if (name.empty() || !IsNameStart(name[0])) return where + "bad name";
      for (char c : name)
        if (!IsNameChar(c)) return where + "bad name";
      const std::string_view what = rest.substr(space + 1);
      if (line[2] == 'H') {
        for (size_t i = 0; i < what.size(); ++i) {
          if (what[i] == '\\' && (i + 1 == what.size() || (what[i + 1] != '\\' && what[i + 1] != 'n')))
            return where + "bad escape in HELP";
          if (what[i] == '\\') ++i;
        }
      } else {
        if (what != "counter" && what != "gauge" && what != "histogram" && what != "summary" && what != "untyped")
          return where + "unknown type";
        if (types.count(name)) return where + "second TYPE";
        types[name] = std::string(what);
      }
      continue;
    }
    if (line.empty() || line[0] == '#') return where + "unexpected line";
    size_t i = 0;
    while (i < line.size() && IsNameChar(line[i])) ++i;
    const std::string name(line.substr(0, i));
    if (name.empty() || !IsNameStart(name[0])) return where + "bad metric name";
    std::vector<std::pair<std::string, std::string>> labels;
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        const size_t label_start = i;
        while (i < line.size() && IsNameChar(line[i]) && line[i] != ':') ++i;
        const std::string label(line.substr(label_start, i - label_start));
        if (label.empty() || (label[0] >= '0' && label[0] <= '9')) return where + "bad label name";
        if (i + 1 >= line.size() || line[i] != '=' || line[i + 1] != '"') return where + "expected =\"";
        i += 2;
        std::string value;
        while (i < line.size() && line[i] != '"') {
          if (line[i] == '\\') {
            if (i + 1 >= line.size()) return where + "escape at end";
            const char e = line[i + 1];
            if (e == '\\') value += '\\';
            else if (e == '"') value += '"';
            else if (e == 'n') value += '\n';
            else return where + "bad escape in a label value";
            i += 2;
          } else {
            value += line[i++];
          }
        }
        if (i >= line.size()) return where + "unterminated label value";
        ++i;  // closing quote
        labels.emplace_back(label, value);
        if (i < line.size() && line[i] == ',') ++i;
      }
      if (i >= line.size()) return where + "unterminated label set";
      ++i;  // }
    }
    if (i >= line.size() || line[i] != ' ') return where + "no space before the value";
    const std::string_view value = line.substr(i + 1);
    if (!IsSampleValue(value)) return where + "bad value";
    // The family a sample belongs to: its own name, or a histogram's with a suffix.
    std::string family = name;
    std::string suffix;
    for (const char* s : {"_bucket", "_sum", "_count"}) {
      const std::string_view sv = s;
      if (name.size() > sv.size() && name.compare(name.size() - sv.size(), sv.size(), sv) == 0 &&
          types.count(name.substr(0, name.size() - sv.size())) &&
          types[name.substr(0, name.size() - sv.size())] == "histogram") {
        family = name.substr(0, name.size() - sv.size());
        suffix = s;
      }
    }
    if (!types.count(family)) return where + "sample before its TYPE";
    if (types[family] == "histogram") {
      std::string series_key = family;
      std::string le;
      for (const auto& [k, v] : labels) {
        if (k == "le") le = v;
        else series_key += "," + k + "=" + v;
      }
      const double number = std::strtod(std::string(value).c_str(), nullptr);
      if (suffix == "_bucket") {
        if (le.empty()) return where + "bucket without le";
        if (last_bucket.count(series_key) && number < last_bucket[series_key]) return where + "buckets not cumulative";
        last_bucket[series_key] = number;
        if (le == "+Inf") inf_bucket[series_key] = number;
      } else if (suffix == "_count") {
        if (!inf_bucket.count(series_key)) return where + "count before the +Inf bucket";
        if (inf_bucket[series_key] != number) return where + "count differs from the +Inf bucket";
        last_bucket.erase(series_key);
      } else if (suffix.empty()) {
        return where + "histogram sample without suffix";
      }
    }
  }
  return "";
}

TEST(ExpositionCheckerTest, RefusesWhatTheFormatRefuses) {
  // The checker itself: each of these is wrong, so a renderer producing it would be caught.
  EXPECT_NE(CheckExposition("# TYPE a counter\na 1"), "");
  EXPECT_NE(CheckExposition("a 1\n"), "");
  EXPECT_NE(CheckExposition("# TYPE a counter\na{b=\"x\\t\"} 1\n"), "");
  EXPECT_NE(CheckExposition("# TYPE a counter\na{b=\"x} 1\n"), "");
  EXPECT_NE(CheckExposition("# TYPE a counter\na 1e\n"), "");
  EXPECT_NE(CheckExposition("# TYPE a counter\na Inf\n"), "");
  EXPECT_NE(CheckExposition("# TYPE a counter\n# TYPE a counter\n"), "");
  EXPECT_NE(CheckExposition("# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_count 1\n"), "");
  EXPECT_NE(CheckExposition("# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 3\n"), "");
  EXPECT_EQ(CheckExposition("# HELP a x\\\\y\\n\n# TYPE a gauge\na{b=\"q\\\"\\n\\\\\"} -1.5e-07\na NaN\n"), "");
}

// ---- rendering, exact text ----

TEST(MetricsRegistryTest, CounterRendersExactly) {
  MetricsRegistry m;
  ASSERT_TRUE(m.DeclareCounter("basal_runs_total", "Runs finished, by flow and outcome.", {"flow", "outcome"}));
  EXPECT_TRUE(m.Add("basal_runs_total", {"nightly", "ok"}));
  EXPECT_TRUE(m.Add("basal_runs_total", {"nightly", "ok"}, 2));
  EXPECT_TRUE(m.Add("basal_runs_total", {"alpha", "error"}, 0.5));
  EXPECT_TRUE(m.Add("basal_runs_total", {"nightly", "error"}, 0));
  EXPECT_FALSE(m.Add("basal_runs_total", {"nightly", "ok"}, -1));  // counters only go up
  EXPECT_FALSE(m.Add("basal_runs_total", {"nightly", "ok"}, std::nan("")));
  EXPECT_FALSE(m.Add("basal_runs_total", {"nightly", "ok"}, INFINITY));
  const std::string expected =
      "# HELP basal_runs_total Runs finished, by flow and outcome.\n"
      "# TYPE basal_runs_total counter\n"
      "basal_runs_total{flow=\"alpha\",outcome=\"error\"} 0.5\n"
      "basal_runs_total{flow=\"nightly\",outcome=\"error\"} 0\n"
      "basal_runs_total{flow=\"nightly\",outcome=\"ok\"} 3\n";
  EXPECT_EQ(m.Render(), expected);
  EXPECT_EQ(CheckExposition(m.Render()), "");
  EXPECT_EQ(m.series(), 3u);
}

TEST(MetricsRegistryTest, GaugeRendersExactly) {
  MetricsRegistry m;
  ASSERT_TRUE(m.DeclareGauge("basal_workers", "Workers by state.", {"state"}));
  ASSERT_TRUE(m.DeclareGauge("basal_up", "1 while the daemon serves.", {}));
  EXPECT_TRUE(m.Set("basal_workers", {"idle"}, 4));
  EXPECT_TRUE(m.Set("basal_workers", {"busy"}, 7));
  EXPECT_TRUE(m.Set("basal_workers", {"busy"}, -2));  // gauges go down too
  EXPECT_TRUE(m.Set("basal_workers", {"lost"}, std::nan("")));
  EXPECT_TRUE(m.Set("basal_workers", {"huge"}, INFINITY));
  EXPECT_TRUE(m.Set("basal_workers", {"tiny"}, -INFINITY));
  const std::string before_up =
      "# HELP basal_workers Workers by state.\n"
      "# TYPE basal_workers gauge\n"
      "basal_workers{state=\"busy\"} -2\n"
      "basal_workers{state=\"huge\"} +Inf\n"
      "basal_workers{state=\"idle\"} 4\n"
      "basal_workers{state=\"lost\"} NaN\n"
      "basal_workers{state=\"tiny\"} -Inf\n"
      "# HELP basal_up 1 while the daemon serves.\n"
      "# TYPE basal_up gauge\n";
  // A family without labels has its one series from the start.
  EXPECT_EQ(m.Render(), before_up + "basal_up 0\n");
  EXPECT_TRUE(m.Set("basal_up", {}, 1));
  EXPECT_EQ(m.Render(), before_up + "basal_up 1\n");
  EXPECT_EQ(CheckExposition(m.Render()), "");
  EXPECT_EQ(m.series(), 6u);
}

TEST(MetricsRegistryTest, HistogramRendersCumulativeBucketsSumAndCount) {
  MetricsRegistry m;
  ASSERT_TRUE(m.DeclareHistogram("basal_run_seconds", "Run wall time.", {"flow"}, {0.01, 0.1, 1, 10}));
  for (double v : {0.005, 0.01, 0.05, 0.5, 0.5, 3.0, 99.0}) EXPECT_TRUE(m.Observe("basal_run_seconds", {"a"}, v));
  EXPECT_TRUE(m.Observe("basal_run_seconds", {"b"}, 20));
  EXPECT_FALSE(m.Observe("basal_run_seconds", {"b"}, std::nan("")));
  const std::string expected =
      "# HELP basal_run_seconds Run wall time.\n"
      "# TYPE basal_run_seconds histogram\n"
      "basal_run_seconds_bucket{flow=\"a\",le=\"0.01\"} 2\n"  // 0.005 and 0.01 itself (le: <=)
      "basal_run_seconds_bucket{flow=\"a\",le=\"0.1\"} 3\n"
      "basal_run_seconds_bucket{flow=\"a\",le=\"1\"} 5\n"
      "basal_run_seconds_bucket{flow=\"a\",le=\"10\"} 6\n"
      "basal_run_seconds_bucket{flow=\"a\",le=\"+Inf\"} 7\n"
      "basal_run_seconds_sum{flow=\"a\"} 103.065\n"
      "basal_run_seconds_count{flow=\"a\"} 7\n"
      "basal_run_seconds_bucket{flow=\"b\",le=\"0.01\"} 0\n"
      "basal_run_seconds_bucket{flow=\"b\",le=\"0.1\"} 0\n"
      "basal_run_seconds_bucket{flow=\"b\",le=\"1\"} 0\n"
      "basal_run_seconds_bucket{flow=\"b\",le=\"10\"} 0\n"
      "basal_run_seconds_bucket{flow=\"b\",le=\"+Inf\"} 1\n"
      "basal_run_seconds_sum{flow=\"b\"} 20\n"
      "basal_run_seconds_count{flow=\"b\"} 1\n";
  EXPECT_EQ(m.Render(), expected);
  EXPECT_EQ(CheckExposition(m.Render()), "");
}

TEST(MetricsRegistryTest, HistogramWithoutLabelsOrBuckets) {
  MetricsRegistry m;
  ASSERT_TRUE(m.DeclareHistogram("h", "Plain.", {}, {1}));
  ASSERT_TRUE(m.DeclareHistogram("only_inf", "No bounds.", {}, {}));
  EXPECT_TRUE(m.Observe("h", {}, -INFINITY));
  EXPECT_TRUE(m.Observe("only_inf", {}, 5));
  EXPECT_EQ(m.Render(),
            "# HELP h Plain.\n"
            "# TYPE h histogram\n"
            "h_bucket{le=\"1\"} 1\n"
            "h_bucket{le=\"+Inf\"} 1\n"
            "h_sum -Inf\n"
            "h_count 1\n"
            "# HELP only_inf No bounds.\n"
            "# TYPE only_inf histogram\n"
            "only_inf_bucket{le=\"+Inf\"} 1\n"
            "only_inf_sum 5\n"
            "only_inf_count 1\n");
  EXPECT_EQ(CheckExposition(m.Render()), "");
}

TEST(MetricsRegistryTest, FamiliesInDeclarationOrderSeriesSorted) {
  MetricsRegistry m;
  ASSERT_TRUE(m.DeclareGauge("zeta", "Z.", {"k"}));
  ASSERT_TRUE(m.DeclareCounter("alpha", "A.", {"k"}));
  ASSERT_TRUE(m.DeclareGauge("labelled_but_empty", "No samples yet.", {"k"}));
  for (const char* k : {"b", "a", "c", "B", "aa"}) {
    EXPECT_TRUE(m.Set("zeta", {k}, 1));
    EXPECT_TRUE(m.Add("alpha", {k}));
  }
  EXPECT_EQ(m.Render(),
            "# HELP zeta Z.\n# TYPE zeta gauge\n"
            "zeta{k=\"B\"} 1\nzeta{k=\"a\"} 1\nzeta{k=\"aa\"} 1\nzeta{k=\"b\"} 1\nzeta{k=\"c\"} 1\n"
            "# HELP alpha A.\n# TYPE alpha counter\n"
            "alpha{k=\"B\"} 1\nalpha{k=\"a\"} 1\nalpha{k=\"aa\"} 1\nalpha{k=\"b\"} 1\nalpha{k=\"c\"} 1\n"
            "# HELP labelled_but_empty No samples yet.\n# TYPE labelled_but_empty gauge\n");
  EXPECT_EQ(CheckExposition(m.Render()), "");
}

// ---- escaping ----

TEST(MetricsRegistryTest, LabelValuesAndHelpAreEscaped) {
  MetricsRegistry m;
  ASSERT_TRUE(m.DeclareCounter("c", "Back\\slash, \"quotes\" and a\nnew line.", {"path", "error"}));
  EXPECT_TRUE(m.Add("c", {"C:\\DIR\\FILE.TXT", "Cannot find file:\n\"FILE.TXT\""}));
  EXPECT_EQ(m.Render(),
            "# HELP c Back\\\\slash, \"quotes\" and a\\nnew line.\n"
            "# TYPE c counter\n"
            "c{path=\"C:\\\\DIR\\\\FILE.TXT\",error=\"Cannot find file:\\n\\\"FILE.TXT\\\"\"} 1\n");
  EXPECT_EQ(CheckExposition(m.Render()), "");
}

TEST(MetricsRegistryTest, InvalidUtf8BecomesReplacementCharacters) {
  MetricsRegistry m;
  ASSERT_TRUE(m.DeclareCounter("c", "Bad \xff byte.", {"flow"}));
  EXPECT_TRUE(m.Add("c", {"caf\xc3\xa9"}));           // valid: kept
  EXPECT_TRUE(m.Add("c", {"x\xc3"}));                 // truncated sequence
  EXPECT_TRUE(m.Add("c", {"\xed\xa0\x80"}));          // a surrogate: three bytes, three replacements
  EXPECT_TRUE(m.Add("c", {"x\xef\xbf\xbd"}));         // the same series as "x\xc3" once sanitized
  EXPECT_EQ(m.Render(),
            "# HELP c Bad \xef\xbf\xbd byte.\n"
            "# TYPE c counter\n"
            "c{flow=\"caf\xc3\xa9\"} 1\n"
            "c{flow=\"x\xef\xbf\xbd\"} 2\n"
            "c{flow=\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"} 1\n");
}

// ---- the cap on label combinations ----

TEST(MetricsRegistryTest, NewCombinationsPastTheCapFoldIntoOther) {
  MetricsRegistry m(/*max_series_per_family=*/3);
  ASSERT_TRUE(m.DeclareCounter("runs", "Runs.", {"flow", "outcome"}));
  ASSERT_TRUE(m.DeclareGauge("other_family", "Its own cap.", {"flow"}));
  EXPECT_TRUE(m.Add("runs", {"a", "ok"}));
  EXPECT_TRUE(m.Add("runs", {"b", "ok"}));
  EXPECT_TRUE(m.Add("runs", {"c", "ok"}));
  EXPECT_TRUE(m.Add("runs", {"d", "ok"}));       // the fourth: folded
  EXPECT_TRUE(m.Add("runs", {"e", "error"}, 2));  // folded too
  EXPECT_TRUE(m.Add("runs", {"a", "ok"}));       // an existing combination keeps its series
  for (const char* f : {"p", "q", "r"}) EXPECT_TRUE(m.Set("other_family", {f}, 1));
  EXPECT_EQ(m.Render(),
            "# HELP runs Runs.\n# TYPE runs counter\n"
            "runs{flow=\"a\",outcome=\"ok\"} 2\n"
            "runs{flow=\"b\",outcome=\"ok\"} 1\n"
            "runs{flow=\"c\",outcome=\"ok\"} 1\n"
            "runs{flow=\"other\",outcome=\"other\"} 3\n"
            "# HELP other_family Its own cap.\n# TYPE other_family gauge\n"
            "other_family{flow=\"p\"} 1\nother_family{flow=\"q\"} 1\nother_family{flow=\"r\"} 1\n");
  EXPECT_EQ(m.series(), 7u);
  // However many more combinations come, memory stays bounded: cap + 1 per family.
  for (int i = 0; i < 5000; ++i) EXPECT_TRUE(m.Add("runs", {"flow" + std::to_string(i), "ok"}));
  EXPECT_EQ(m.series(), 7u);
  EXPECT_NE(m.Render().find("runs{flow=\"other\",outcome=\"other\"} 5003\n"), std::string::npos);
}

TEST(MetricsRegistryTest, HistogramsFoldToo) {
  MetricsRegistry m(1);
  ASSERT_TRUE(m.DeclareHistogram("h", "H.", {"flow"}, {1}));
  EXPECT_TRUE(m.Observe("h", {"a"}, 0.5));
  EXPECT_TRUE(m.Observe("h", {"b"}, 2));
  EXPECT_TRUE(m.Observe("h", {"c"}, 0.5));
  EXPECT_EQ(m.Render(),
            "# HELP h H.\n# TYPE h histogram\n"
            "h_bucket{flow=\"a\",le=\"1\"} 1\nh_bucket{flow=\"a\",le=\"+Inf\"} 1\nh_sum{flow=\"a\"} 0.5\n"
            "h_count{flow=\"a\"} 1\n"
            "h_bucket{flow=\"other\",le=\"1\"} 1\nh_bucket{flow=\"other\",le=\"+Inf\"} 2\n"
            "h_sum{flow=\"other\"} 2.5\nh_count{flow=\"other\"} 2\n");
  EXPECT_EQ(CheckExposition(m.Render()), "");
}

TEST(MetricsRegistryTest, TheDefaultCapIsAThousand) {
  MetricsRegistry m;
  ASSERT_TRUE(m.DeclareCounter("c", "C.", {"flow"}));
  for (int i = 0; i < 1200; ++i) EXPECT_TRUE(m.Add("c", {std::to_string(i)}));
  EXPECT_EQ(m.series(), 1001u);
  EXPECT_NE(m.Render().find("c{flow=\"other\"} 200\n"), std::string::npos);
}

// ---- names and declarations refused ----

TEST(MetricsRegistryTest, NamesTable) {
  for (const char* good : {"a", "_", ":", "a:b_c9", "basal_runs_total", "A", "__x", ":__"}) {
    EXPECT_TRUE(IsValidMetricName(good)) << good;
  }
  for (const char* bad : {"", "9a", "a-b", "a b", "a.b", "é", "a\n", "a{"}) EXPECT_FALSE(IsValidMetricName(bad)) << bad;
  for (const char* good : {"a", "_", "flow", "_x", "A9_b"}) EXPECT_TRUE(IsValidLabelName(good)) << good;
  for (const char* bad : {"", "__", "__name__", "9a", "a:b", "a-b", "a b", "é"}) {
    EXPECT_FALSE(IsValidLabelName(bad)) << bad;
  }
}

TEST(MetricsRegistryTest, InvalidDeclarationsAreRefusedAndChangeNothing) {
  MetricsRegistry m;
  EXPECT_FALSE(m.DeclareCounter("bad-name", "x", {}));
  EXPECT_FALSE(m.DeclareCounter("", "x", {}));
  EXPECT_FALSE(m.DeclareCounter("c", "x", {"__reserved"}));
  EXPECT_FALSE(m.DeclareCounter("c", "x", {"bad-label"}));
  EXPECT_FALSE(m.DeclareCounter("c", "x", {"flow", "flow"}));
  EXPECT_FALSE(m.DeclareHistogram("h", "x", {"le"}, {1}));
  EXPECT_FALSE(m.DeclareHistogram("h", "x", {}, {2, 1}));
  EXPECT_FALSE(m.DeclareHistogram("h", "x", {}, {1, 1}));
  EXPECT_FALSE(m.DeclareHistogram("h", "x", {}, {1, INFINITY}));
  EXPECT_FALSE(m.DeclareHistogram("h", "x", {}, {std::nan("")}));
  EXPECT_EQ(m.Render(), "");
  EXPECT_EQ(m.series(), 0u);
  // "le" is an ordinary label name outside histograms.
  EXPECT_TRUE(m.DeclareGauge("g", "x", {"le"}));
}

TEST(MetricsRegistryTest, RedeclaringTheSameFamilyIsAcceptedAnotherIsRefused) {
  MetricsRegistry m;
  ASSERT_TRUE(m.DeclareCounter("c", "First help.", {"flow"}));
  EXPECT_TRUE(m.Add("c", {"a"}));
  EXPECT_TRUE(m.DeclareCounter("c", "Second help.", {"flow"}));  // same family: nothing changes
  EXPECT_FALSE(m.DeclareGauge("c", "x", {"flow"}));              // another type
  EXPECT_FALSE(m.DeclareCounter("c", "x", {"outcome"}));         // other labels
  EXPECT_FALSE(m.DeclareCounter("c", "x", {}));
  ASSERT_TRUE(m.DeclareHistogram("h", "H.", {}, {1, 2}));
  EXPECT_TRUE(m.DeclareHistogram("h", "H.", {}, {1, 2}));
  EXPECT_FALSE(m.DeclareHistogram("h", "H.", {}, {1, 3}));  // other buckets
  // Names a histogram renders are taken, in both orders of declaration.
  EXPECT_FALSE(m.DeclareGauge("h_count", "x", {}));
  EXPECT_FALSE(m.DeclareCounter("h_bucket", "x", {}));
  EXPECT_FALSE(m.DeclareGauge("h_sum", "x", {}));
  ASSERT_TRUE(m.DeclareGauge("x_sum", "x", {}));
  EXPECT_FALSE(m.DeclareHistogram("x", "x", {}, {1}));
  EXPECT_EQ(m.Render(),
            "# HELP c First help.\n# TYPE c counter\nc{flow=\"a\"} 1\n"
            "# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 0\nh_bucket{le=\"2\"} 0\nh_bucket{le=\"+Inf\"} 0\n"
            "h_sum 0\nh_count 0\n"
            "# HELP x_sum x\n# TYPE x_sum gauge\nx_sum 0\n");
  EXPECT_EQ(CheckExposition(m.Render()), "");
}

TEST(MetricsRegistryTest, SamplesForTheWrongFamilyOrLabelCountAreDropped) {
  MetricsRegistry m;
  ASSERT_TRUE(m.DeclareCounter("c", "C.", {"flow"}));
  ASSERT_TRUE(m.DeclareGauge("g", "G.", {}));
  ASSERT_TRUE(m.DeclareHistogram("h", "H.", {}, {1}));
  EXPECT_FALSE(m.Add("nope", {"a"}));
  EXPECT_FALSE(m.Add("c", {}));
  EXPECT_FALSE(m.Add("c", {"a", "b"}));
  EXPECT_FALSE(m.Set("c", {"a"}, 1));     // a counter is not a gauge
  EXPECT_FALSE(m.Add("g", {}));           // nor a gauge a counter
  EXPECT_FALSE(m.Observe("g", {}, 1));
  EXPECT_FALSE(m.Set("h", {}, 1));
  EXPECT_FALSE(m.Add("h_count", {}));     // a histogram's sample names are not families
  EXPECT_EQ(m.series(), 2u);              // g and h, label-less
  EXPECT_EQ(m.Render(),
            "# HELP c C.\n# TYPE c counter\n"
            "# HELP g G.\n# TYPE g gauge\ng 0\n"
            "# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 0\nh_bucket{le=\"+Inf\"} 0\nh_sum 0\nh_count 0\n");
}

// ---- numbers ----

TEST(FormatMetricValueTest, Table) {
  struct Case {
    double value;
    const char* text;
  };
  const std::vector<Case> cases = {
      {0, "0"},
      {-0.0, "0"},
      {1, "1"},
      {-7, "-7"},
      {10000000, "10000000"},  // not 1e+07
      {9007199254740992.0, "9007199254740992"},  // 2^53, the last of the exact integers
      {18014398509481984.0, "18014398509481984"},  // 2^54: the shorter of the %f and %e forms
      {1e300, "1e+300"},
      {0.5, "0.5"},
      {0.1, "0.1"},
      {103.065, "103.065"},
      {-1.5e-7, "-1.5e-07"},
      {5e-324, "5e-324"},
      {std::numeric_limits<double>::max(), "1.7976931348623157e+308"},
      {INFINITY, "+Inf"},
      {-INFINITY, "-Inf"},
      {std::nan(""), "NaN"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(FormatMetricValue(c.value), c.text) << c.text;
    EXPECT_TRUE(IsSampleValue(FormatMetricValue(c.value))) << c.text;
    // Reads back as the same double (strtod: stod throws on subnormals).
    if (std::isfinite(c.value)) {
      EXPECT_EQ(std::strtod(FormatMetricValue(c.value).c_str(), nullptr), c.value) << c.text;
    }
  }
}

TEST(MetricsRegistryTest, ContentTypeIsVersion004) {
  EXPECT_EQ(kMetricsContentType, "text/plain; version=0.0.4; charset=utf-8");
}

}  // namespace
}  // namespace basal::serve
