// The HTTP API's route table: rows of {methods, pattern, value}, and the one function that matches
// a request against them. A pattern is the path's segments, each a literal or a {name} parameter
// that takes one whole non-empty segment: "/v1/runs/{id}/calls". Paths are split as the API
// always read them: empty segments do not count ("//v1///flows" is "/v1/flows").
//
// Invariant: 404 and 405 come from the table and only from it. A path no row's pattern matches is
// kNotFound; a path whose pattern matches but whose method no such row takes is
// kMethodNotAllowed, with `allow` naming every method the rows of that path take. Nobody writes a
// 404 or a 405 route by route.
//
//   RouteTable<Handler> routes;
//   if (!routes.Add({"GET"}, "/v1/runs/{id}/calls", calls)) std::abort();  // a bad or repeated row
//   RouteTable<Handler>::Match m = routes.Find(req.method, req.path);
//   if (m.kind == RouteMatch::kFound) (*m.value)(req, m.params.Get("id"));
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace basal::serve {

// The segments of a path: "/v1/flows/hello/runs" -> {"v1", "flows", "hello", "runs"}.
std::vector<std::string_view> PathSegments(std::string_view path);

// A pattern, parsed: its segments, and for each whether it is a {parameter}.
struct RoutePattern {
  struct Segment {
    std::string text;  // the literal, or the parameter's name
    bool parameter = false;
    bool operator==(const Segment&) const = default;
  };
  std::vector<Segment> segments;
  bool operator==(const RoutePattern&) const = default;
};
// nullopt for a malformed pattern: not starting with '/', an empty segment, a brace anywhere but
// around a whole segment, an empty or repeated parameter name.
std::optional<RoutePattern> ParseRoutePattern(std::string_view pattern);

// The parameters a matched pattern took from the path, in pattern order.
struct RouteParams {
  std::vector<std::pair<std::string, std::string>> values;
  // "" when the pattern has no such parameter.
  std::string_view Get(std::string_view name) const;
};

// Whether `segments` (PathSegments of a path) match `pattern`; fills `params` when they do.
bool MatchRoutePattern(const RoutePattern& pattern, const std::vector<std::string_view>& segments, RouteParams* params);

// "GET", "GET, HEAD": the Allow header for these methods, in the order given, each once.
std::string AllowHeader(const std::vector<std::string>& methods);

struct RouteMatch {
  enum Kind { kFound, kNotFound, kMethodNotAllowed };
};

template <typename Value>
class RouteTable {
 public:
  struct Match {
    RouteMatch::Kind kind = RouteMatch::kNotFound;
    // kFound: the row whose pattern and method matched.
    const Value* value = nullptr;
    // kFound and kMethodNotAllowed: the first row whose pattern matched the path (the method aside):
    // what the path is, for admission before the method is looked at.
    const Value* path_value = nullptr;
    RouteParams params;
    std::vector<std::string> allow;  // kMethodNotAllowed: the methods the path takes
  };

  // Refused (false, nothing added) when the pattern is malformed, `methods` is empty, or a row with
  // the same pattern already takes one of the methods.
  [[nodiscard]] bool Add(std::vector<std::string> methods, std::string_view pattern, Value value) {
    auto parsed = ParseRoutePattern(pattern);
    if (!parsed || methods.empty()) return false;
    for (const Row& row : rows_) {
      if (!(row.pattern == *parsed)) continue;
      for (const std::string& m : methods)
        for (const std::string& taken : row.methods)
          if (m == taken) return false;
    }
    rows_.push_back(Row{std::move(methods), std::move(*parsed), std::move(value)});
    return true;
  }

  // Rows are tried in the order added; the first whose pattern and method match is found.
  Match Find(std::string_view method, std::string_view path) const {
    Match m;
    const std::vector<std::string_view> segments = PathSegments(path);
    for (const Row& row : rows_) {
      RouteParams params;
      if (!MatchRoutePattern(row.pattern, segments, &params)) continue;
      if (!m.path_value) {
        m.path_value = &row.value;
        m.params = params;
      }
      for (const std::string& taken : row.methods) {
        if (taken != method) continue;
        m.kind = RouteMatch::kFound;
        m.value = &row.value;
        m.params = std::move(params);
        m.allow.clear();
        return m;
      }
      for (const std::string& taken : row.methods) m.allow.push_back(taken);
    }
    if (m.path_value) m.kind = RouteMatch::kMethodNotAllowed;
    return m;
  }

  size_t size() const { return rows_.size(); }

 private:
  struct Row {
    std::vector<std::string> methods;
    RoutePattern pattern;
    Value value;
  };
  std::vector<Row> rows_;
};

}  // namespace basal::serve
