// The route table's patterns and matching (routes.h).
#include "serve/routes.h"

#include <algorithm>

namespace basal::serve {

std::vector<std::string_view> PathSegments(std::string_view path) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < path.size()) {
    while (i < path.size() && path[i] == '/') ++i;
    size_t j = i;
    while (j < path.size() && path[j] != '/') ++j;
    if (j > i) out.push_back(path.substr(i, j - i));
    i = j;
  }
  return out;
}

std::optional<RoutePattern> ParseRoutePattern(std::string_view pattern) {
  if (pattern.empty() || pattern[0] != '/') return std::nullopt;
  RoutePattern out;
  if (pattern == "/") return out;
  size_t i = 1;
  while (true) {
    const size_t slash = pattern.find('/', i);
    const std::string_view seg = pattern.substr(i, slash == std::string_view::npos ? std::string_view::npos : slash - i);
    if (seg.empty()) return std::nullopt;
    RoutePattern::Segment s;
    if (seg.front() == '{') {
      if (seg.size() < 3 || seg.back() != '}') return std::nullopt;
      s.text = std::string(seg.substr(1, seg.size() - 2));
      s.parameter = true;
      for (const RoutePattern::Segment& earlier : out.segments)
        if (earlier.parameter && earlier.text == s.text) return std::nullopt;
    } else {
      s.text = std::string(seg);
    }
    if (s.text.find_first_of("{}") != std::string::npos) return std::nullopt;
    out.segments.push_back(std::move(s));
    if (slash == std::string_view::npos) break;
    i = slash + 1;
  }
  return out;
}

std::string_view RouteParams::Get(std::string_view name) const {
  for (const auto& [k, v] : values)
    if (k == name) return v;
  return {};
}

bool MatchRoutePattern(const RoutePattern& pattern, const std::vector<std::string_view>& segments, RouteParams* params) {
  if (pattern.segments.size() != segments.size()) return false;
  RouteParams taken;
  for (size_t i = 0; i < segments.size(); ++i) {
    const RoutePattern::Segment& p = pattern.segments[i];
    if (p.parameter) {
      taken.values.emplace_back(p.text, std::string(segments[i]));
    } else if (p.text != segments[i]) {
      return false;
    }
  }
  if (params) *params = std::move(taken);
  return true;
}

std::string AllowHeader(const std::vector<std::string>& methods) {
  std::vector<std::string> seen;
  std::string out;
  for (const std::string& m : methods) {
    if (std::find(seen.begin(), seen.end(), m) != seen.end()) continue;
    seen.push_back(m);
    if (!out.empty()) out += ", ";
    out += m;
  }
  return out;
}

}  // namespace basal::serve
