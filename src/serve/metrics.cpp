// MetricsRegistry: the Prometheus text format 0.0.4 (metrics.h).
#include "serve/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <utility>

namespace basal::serve {
namespace {

bool IsAsciiLetter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsAsciiDigit(char c) { return c >= '0' && c <= '9'; }

// The length of the valid UTF-8 sequence at the start of `s` (RFC 3629: no overlong forms, no
// surrogates, nothing above U+10FFFF), or 0 when it does not start with one.
size_t Utf8SequenceLength(std::string_view s) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const auto cont = [&](size_t i) { return i < s.size() && (b(i) & 0xC0) == 0x80; };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (!cont(1) || !cont(2)) return 0;
    if (c == 0xE0 && b(1) < 0xA0) return 0;  // overlong
    if (c == 0xED && b(1) > 0x9F) return 0;  // surrogates
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    if (c == 0xF0 && b(1) < 0x90) return 0;  // overlong
    if (c == 0xF4 && b(1) > 0x8F) return 0;  // above U+10FFFF
    return 4;
  }
  return 0;
}

bool IsValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = Utf8SequenceLength(s.substr(i));
    if (n == 0) return false;
    i += n;
  }
  return true;
}

// Prometheus refuses a whole scrape over one invalid UTF-8 label value; a flow name or help text
// with a stray byte costs that byte instead (each invalid byte becomes U+FFFD).
std::string SanitizeUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t n = Utf8SequenceLength(s.substr(i));
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

void AppendEscapedLabelValue(std::string& out, std::string_view value) {
  for (char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
}

void AppendEscapedHelp(std::string& out, std::string_view help) {
  for (char c : help) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
}

}  // namespace

bool IsValidMetricName(std::string_view name) {
  if (name.empty()) return false;
  if (!IsAsciiLetter(name[0]) && name[0] != '_' && name[0] != ':') return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return IsAsciiLetter(c) || IsAsciiDigit(c) || c == '_' || c == ':'; });
}

bool IsValidLabelName(std::string_view name) {
  if (name.empty()) return false;
  if (!IsAsciiLetter(name[0]) && name[0] != '_') return false;
  if (name.substr(0, 2) == "__") return false;
  return std::all_of(name.begin(), name.end(), [](char c) { return IsAsciiLetter(c) || IsAsciiDigit(c) || c == '_'; });
}

std::string FormatMetricValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  // Up to 2^53 every integer is exact in a double: print it as the integer it is (a counter of
  // 10 million reads "10000000", not "1e+07").
  constexpr double kExactIntegers = 9007199254740992.0;  // 2^53
  if (std::trunc(value) == value && std::fabs(value) <= kExactIntegers) {
    return std::to_string(static_cast<int64_t>(value));
  }
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  if (ec != std::errc()) return "NaN";  // cannot happen: 64 bytes hold any shortest double
  return std::string(buf, end);
}

MetricsRegistry::MetricsRegistry(size_t max_series_per_family) : max_series_per_family_(max_series_per_family) {}

bool MetricsRegistry::DeclareCounter(std::string name, std::string help, std::vector<std::string> label_names) {
  return Declare(Type::kCounter, std::move(name), std::move(help), std::move(label_names), {});
}

bool MetricsRegistry::DeclareGauge(std::string name, std::string help, std::vector<std::string> label_names) {
  return Declare(Type::kGauge, std::move(name), std::move(help), std::move(label_names), {});
}

bool MetricsRegistry::DeclareHistogram(std::string name, std::string help, std::vector<std::string> label_names,
                                       std::vector<double> bucket_upper_bounds) {
  return Declare(Type::kHistogram, std::move(name), std::move(help), std::move(label_names),
                 std::move(bucket_upper_bounds));
}

bool MetricsRegistry::Declare(Type type, std::string name, std::string help, std::vector<std::string> label_names,
                              std::vector<double> bounds) {
  if (!IsValidMetricName(name)) return false;
  for (size_t i = 0; i < label_names.size(); ++i) {
    if (!IsValidLabelName(label_names[i])) return false;
    if (type == Type::kHistogram && label_names[i] == "le") return false;
    if (std::find(label_names.begin(), label_names.begin() + static_cast<std::ptrdiff_t>(i), label_names[i]) !=
        label_names.begin() + static_cast<std::ptrdiff_t>(i)) {
      return false;
    }
  }
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i])) return false;
    if (i > 0 && !(bounds[i - 1] < bounds[i])) return false;
  }
  if (auto it = index_.find(name); it != index_.end()) {
    const Family& existing = families_[it->second];
    return existing.type == type && existing.label_names == label_names && existing.bounds == bounds;
  }
  std::vector<std::string> renders = {name};
  if (type == Type::kHistogram) {
    for (const char* suffix : {"_bucket", "_sum", "_count"}) renders.push_back(name + suffix);
  }
  for (const std::string& n : renders) {
    if (sample_names_.count(n) != 0) return false;
  }
  sample_names_.insert(renders.begin(), renders.end());

  Family family{std::move(name), SanitizeUtf8(help), type, std::move(label_names), std::move(bounds), {}};
  if (family.label_names.empty()) {
    Series& only = family.series[{}];
    only.bucket_counts.assign(family.bounds.size(), 0);
  }
  index_.emplace(family.name, families_.size());
  families_.push_back(std::move(family));
  return true;
}

MetricsRegistry::Series* MetricsRegistry::FindSeries(std::string_view name, Type type,
                                                     const std::vector<std::string>& label_values,
                                                     const Family** family_out) {
  const auto it = index_.find(name);
  if (it == index_.end()) return nullptr;
  Family& family = families_[it->second];
  if (family.type != type || label_values.size() != family.label_names.size()) return nullptr;
  if (family_out != nullptr) *family_out = &family;

  std::vector<std::string> sanitized;
  const std::vector<std::string>* key = &label_values;
  if (!std::all_of(label_values.begin(), label_values.end(), [](const std::string& v) { return IsValidUtf8(v); })) {
    for (const std::string& v : label_values) sanitized.push_back(SanitizeUtf8(v));
    key = &sanitized;
  }
  if (auto found = family.series.find(*key); found != family.series.end()) return &found->second;
  if (family.series.size() >= max_series_per_family_) {
    sanitized.assign(family.label_names.size(), "other");
    key = &sanitized;
  }
  auto [created, inserted] = family.series.try_emplace(*key);
  if (inserted) created->second.bucket_counts.assign(family.bounds.size(), 0);
  return &created->second;
}

bool MetricsRegistry::Add(std::string_view counter, const std::vector<std::string>& label_values, double delta) {
  if (!std::isfinite(delta) || delta < 0) return false;
  Series* series = FindSeries(counter, Type::kCounter, label_values);
  if (series == nullptr) return false;
  series->value += delta;
  return true;
}

bool MetricsRegistry::Set(std::string_view gauge, const std::vector<std::string>& label_values, double value) {
  Series* series = FindSeries(gauge, Type::kGauge, label_values);
  if (series == nullptr) return false;
  series->value = value;
  return true;
}

bool MetricsRegistry::Observe(std::string_view histogram, const std::vector<std::string>& label_values, double value) {
  if (std::isnan(value)) return false;
  const Family* family = nullptr;
  Series* series = FindSeries(histogram, Type::kHistogram, label_values, &family);
  if (series == nullptr) return false;
  const std::vector<double>& bounds = family->bounds;
  // The first bucket whose upper bound is >= value ("le": less than or equal).
  const size_t bucket = static_cast<size_t>(std::lower_bound(bounds.begin(), bounds.end(), value) - bounds.begin());
  if (bucket < bounds.size()) ++series->bucket_counts[bucket];
  ++series->count;
  series->sum += value;
  return true;
}

namespace {

// `{a="x",b="y"}`, with `le` last when given; "" for no labels at all.
std::string LabelSet(const std::vector<std::string>& names, const std::vector<std::string>& values,
                     std::string_view le = {}) {
  if (names.empty() && le.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += ',';
    out += names[i];
    out += "=\"";
    AppendEscapedLabelValue(out, values[i]);
    out += '"';
  }
  if (!le.empty()) {
    if (!names.empty()) out += ',';
    out += "le=\"";
    out += le;
    out += '"';
  }
  out += '}';
  return out;
}

void AppendSample(std::string& out, std::string_view name, std::string_view suffix, const std::string& labels,
                  std::string_view value) {
  out += name;
  out += suffix;
  out += labels;
  out += ' ';
  out += value;
  out += '\n';
}

}  // namespace

std::string MetricsRegistry::Render() const {
  std::string out;
  for (const Family& family : families_) {
    out += "# HELP ";
    out += family.name;
    out += ' ';
    AppendEscapedHelp(out, family.help);
    out += "\n# TYPE ";
    out += family.name;
    out += ' ';
    out += family.type == Type::kCounter ? "counter" : family.type == Type::kGauge ? "gauge" : "histogram";
    out += '\n';
    for (const auto& [values, series] : family.series) {
      const std::string labels = LabelSet(family.label_names, values);
      if (family.type != Type::kHistogram) {
        AppendSample(out, family.name, "", labels, FormatMetricValue(series.value));
        continue;
      }
      uint64_t cumulative = 0;
      for (size_t i = 0; i < family.bounds.size(); ++i) {
        cumulative += series.bucket_counts[i];
        AppendSample(out, family.name, "_bucket",
                     LabelSet(family.label_names, values, FormatMetricValue(family.bounds[i])),
                     std::to_string(cumulative));
      }
      AppendSample(out, family.name, "_bucket", LabelSet(family.label_names, values, "+Inf"),
                   std::to_string(series.count));
      AppendSample(out, family.name, "_sum", labels, FormatMetricValue(series.sum));
      AppendSample(out, family.name, "_count", labels, std::to_string(series.count));
    }
  }
  return out;
}

size_t MetricsRegistry::series() const {
  size_t total = 0;
  for (const Family& family : families_) total += family.series.size();
  return total;
}

}  // namespace basal::serve
