// The metrics of `basal serve` in the Prometheus text exposition format, version 0.0.4 (served at
// GET /metrics with Content-Type kMetricsContentType). The daemon declares its families once at
// start, fills them as runs and deliveries happen, and renders the registry at each scrape.
//
//   MetricsRegistry metrics;
//   if (!metrics.DeclareCounter("basal_runs_total", "Runs finished, by flow and outcome.", {"flow", "outcome"}))
//     std::abort();  // a programming error: a bad name, or the name taken by another family
//   metrics.Add("basal_runs_total", {"nightly-report", "ok"});
//   if (!metrics.DeclareHistogram("basal_run_seconds", "Run wall time.", {"flow"}, {0.01, 0.1, 1, 10}))
//     std::abort();
//   metrics.Observe("basal_run_seconds", {"nightly-report"}, 0.42);
//   std::string body = metrics.Render();
//
// Renders as:
//
//   # HELP basal_runs_total Runs finished, by flow and outcome.
//   # TYPE basal_runs_total counter
//   basal_runs_total{flow="nightly-report",outcome="ok"} 1
//   # HELP basal_run_seconds Run wall time.
//   # TYPE basal_run_seconds histogram
//   basal_run_seconds_bucket{flow="nightly-report",le="0.01"} 0
//   ...
//   basal_run_seconds_bucket{flow="nightly-report",le="+Inf"} 1
//   basal_run_seconds_sum{flow="nightly-report"} 0.42
//   basal_run_seconds_count{flow="nightly-report"} 1
//
// Bounded memory: label values come from the outside world (flow names: an operator may have many
// flows), so each family keeps at most `max_series_per_family` label combinations. Past that, a
// sample for a new combination is folded into the one series whose label values are all "other"
// (created then, so a family never has more than max_series_per_family + 1 series); combinations
// that already have a series keep theirs. An "other" series in a scrape therefore means the cap
// was reached (or that a label value really is "other": the two share the series). A family without labels has its one series from its declaration (rendered as 0).
//
// Programming errors (a bad name, a family re-declared differently, a sample for an undeclared
// family or with the wrong number of label values) are refused with `false` and change nothing;
// the Declare functions are [[nodiscard]] so the daemon cannot miss them.
//
// Not synchronised: the daemon calls it from its loop's thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace basal::serve {

inline constexpr std::string_view kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";

// [a-zA-Z_:][a-zA-Z0-9_:]*
bool IsValidMetricName(std::string_view name);
// [a-zA-Z_][a-zA-Z0-9_]*, not starting "__" (reserved for Prometheus itself).
bool IsValidLabelName(std::string_view name);
// A sample value as Prometheus reads it: "NaN", "+Inf", "-Inf"; integers up to 2^53 in magnitude
// as plain digits ("3", "-7", "0" also for -0); anything else in the shortest form that reads back
// as the same double ("0.25", "1e+300").
std::string FormatMetricValue(double value);

class MetricsRegistry {
 public:
  static constexpr size_t kDefaultMaxSeriesPerFamily = 1000;

  explicit MetricsRegistry(size_t max_series_per_family = kDefaultMaxSeriesPerFamily);

  // Each declares a family once. Refused (false) when the name or a label name is invalid, a label
  // name repeats, or the name is taken: by a family of another type, labels or buckets, or by one
  // of the sample names another family renders (a histogram `h` renders h_bucket, h_sum and
  // h_count). Declaring the same family again (same type, labels and buckets) is accepted and
  // changes nothing (the first help text stays).
  // `help` may be any text (escaped when rendered; invalid UTF-8 becomes U+FFFD).
  [[nodiscard]] bool DeclareCounter(std::string name, std::string help, std::vector<std::string> label_names);
  [[nodiscard]] bool DeclareGauge(std::string name, std::string help, std::vector<std::string> label_names);
  // `bucket_upper_bounds`: finite and strictly increasing (the "+Inf" bucket is always added);
  // a histogram's label names may not include "le".
  [[nodiscard]] bool DeclareHistogram(std::string name, std::string help, std::vector<std::string> label_names,
                                      std::vector<double> bucket_upper_bounds);

  // The label values go with the family's label names, in order (invalid UTF-8 becomes U+FFFD).
  // Each returns false when the sample is dropped: no such family of that type, a wrong number of
  // label values, or a value it refuses.
  // Counters only go up: a negative, NaN or infinite delta is dropped. A delta of 0 creates the
  // series (so it is scraped as 0 before its first event).
  bool Add(std::string_view counter, const std::vector<std::string>& label_values, double delta = 1);
  bool Set(std::string_view gauge, const std::vector<std::string>& label_values, double value);
  // A NaN observation is dropped (it would make the sum NaN for good).
  bool Observe(std::string_view histogram, const std::vector<std::string>& label_values, double value);

  // The whole registry in the text format: families in declaration order, each with # HELP and
  // # TYPE (also before it has any sample), its series sorted by label values.
  std::string Render() const;

  // How many label combinations exist in all families ("other" and label-less ones included).
  size_t series() const;

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Series {
    double value = 0;                     // counter, gauge
    std::vector<uint64_t> bucket_counts;  // histogram: observations per bucket (not cumulative), no +Inf
    uint64_t count = 0;                   // histogram
    double sum = 0;                       // histogram
  };
  struct Family {
    std::string name;
    std::string help;
    Type type;
    std::vector<std::string> label_names;
    std::vector<double> bounds;
    std::map<std::vector<std::string>, Series> series;
  };

  bool Declare(Type type, std::string name, std::string help, std::vector<std::string> label_names,
               std::vector<double> bounds);
  // The series for `label_values` (created, or the "other" one past the cap); nullptr when there is
  // no such family of `type` or the number of values is wrong.
  Series* FindSeries(std::string_view name, Type type, const std::vector<std::string>& label_values,
                     const Family** family = nullptr);

  size_t max_series_per_family_;
  std::vector<Family> families_;
  std::map<std::string, size_t, std::less<>> index_;  // family name -> families_ index
  std::set<std::string, std::less<>> sample_names_;   // every name a family renders
};

}  // namespace basal::serve
