// DiffLines (include/basal/review.h): a unified line diff for the review of a flow's new source.
//
// Myers, "An O(ND) Difference Algorithm and Its Variations" (1986), in its linear-space form: find
// where a shortest edit script crosses the middle (searching from both ends at once), then solve
// the two halves the same way. Each half's common first and last lines are taken off first, and
// lines are compared as small integers (each distinct line gets one), so a step costs the same
// whatever the lines' length. Every step of the search counts against a work limit; past it, what
// is still unsolved is matched on once-only lines, then "removed whole, added whole" (still a
// correct diff, not always a minimal one).
#include <algorithm>
#include <cstdint>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "basal/review.h"

namespace basal {
namespace {

// The lines of `text`, each with its '\n' (the last may have none).
std::vector<std::string_view> SplitLines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  while (start < text.size()) {
    const size_t newline = text.find('\n', start);
    const size_t end = newline == std::string_view::npos ? text.size() : newline + 1;
    lines.push_back(text.substr(start, end - start));
    start = end;
  }
  return lines;
}

enum class OpKind : uint8_t { kEqual, kDelete, kInsert };

// One line of the edit script. `a`: the line's index in before (equal, delete); `b`: in after
// (equal, insert).
struct Op {
  OpKind kind;
  size_t a = 0;
  size_t b = 0;
};

// Levels of once-only line matching past the work limit (see Anchored).
constexpr int kMaxAnchorDepth = 16;

class MyersDiff {
 public:
  MyersDiff(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b, uint64_t work_limit)
      : a_(a), b_(b), work_limit_(work_limit) {}

  void Run() {
    ops_.reserve(a_.size() + b_.size());
    Solve(0, a_.size(), 0, b_.size(), 0);
  }
  std::vector<Op>& ops() { return ops_; }
  bool minimal() const { return minimal_; }

 private:
  struct Split {
    size_t x, y;  // a point on a shortest edit script, relative to the subproblem
  };

  void Equal(size_t a, size_t b) { ops_.push_back(Op{OpKind::kEqual, a, b}); }
  void ReplaceWhole(size_t a_lo, size_t a_hi, size_t b_lo, size_t b_hi) {
    for (size_t i = a_lo; i < a_hi; ++i) ops_.push_back(Op{OpKind::kDelete, i, 0});
    for (size_t j = b_lo; j < b_hi; ++j) ops_.push_back(Op{OpKind::kInsert, 0, j});
  }

  // The recursion halves the edit distance at each level, so its depth is about log2 of it (and
  // past the work limit, at most kMaxAnchorDepth more).
  void Solve(size_t a_lo, size_t a_hi, size_t b_lo, size_t b_hi, int anchor_depth) {
    while (a_lo < a_hi && b_lo < b_hi && a_[a_lo] == b_[b_lo]) Equal(a_lo++, b_lo++);
    size_t tail = 0;
    while (a_hi - tail > a_lo && b_hi - tail > b_lo && a_[a_hi - tail - 1] == b_[b_hi - tail - 1]) ++tail;
    a_hi -= tail;
    b_hi -= tail;

    if (a_lo == a_hi || b_lo == b_hi) {
      ReplaceWhole(a_lo, a_hi, b_lo, b_hi);  // only one side has lines: nothing to search
    } else if (auto split = MiddleSplit(a_lo, a_hi, b_lo, b_hi)) {
      Solve(a_lo, a_lo + split->x, b_lo, b_lo + split->y, anchor_depth);
      Solve(a_lo + split->x, a_hi, b_lo + split->y, b_hi, anchor_depth);
    } else {
      minimal_ = false;
      Anchored(a_lo, a_hi, b_lo, b_hi, anchor_depth);
    }
    for (size_t i = 0; i < tail; ++i) Equal(a_hi + i, b_hi + i);
  }

  // Past the work limit: match the lines that occur exactly once on each side, in the longest
  // run of them that keeps their order in both (as "patience diff" does), and solve the gaps
  // between them the same way (each gap's first and last lines taken off, its own once-only lines
  // matched), at most kMaxAnchorDepth levels deep; what is left is removed and added whole. Each
  // level costs time linear in its lines (hashing, and a longest increasing run in k log k).
  void Anchored(size_t a_lo, size_t a_hi, size_t b_lo, size_t b_hi, int anchor_depth) {
    if (anchor_depth >= kMaxAnchorDepth) {
      ReplaceWhole(a_lo, a_hi, b_lo, b_hi);
      return;
    }
    std::vector<Split> anchors;  // (line in before, line in after), absolute
    {
      struct Seen {
        uint32_t in_a = 0, in_b = 0;
        size_t b = 0;
      };
      std::unordered_map<uint32_t, Seen> seen;
      seen.reserve(a_hi - a_lo);
      for (size_t i = a_lo; i < a_hi; ++i) ++seen[a_[i]].in_a;
      for (size_t j = b_lo; j < b_hi; ++j) {
        auto it = seen.find(b_[j]);
        if (it == seen.end()) continue;  // not in before: never an anchor
        ++it->second.in_b;
        it->second.b = j;
      }
      std::vector<Split> unique;  // in before's order
      for (size_t i = a_lo; i < a_hi; ++i) {
        const Seen& s = seen.find(a_[i])->second;
        if (s.in_a == 1 && s.in_b == 1) unique.push_back(Split{i, s.b});
      }
      // The longest run of `unique` whose lines in after increase too (patience sorting).
      std::vector<size_t> tails;                        // tails[k]: index in unique ending a run of k+1
      std::vector<size_t> previous(unique.size(), SIZE_MAX);
      for (size_t u = 0; u < unique.size(); ++u) {
        auto at = std::lower_bound(tails.begin(), tails.end(), unique[u].y,
                                   [&unique](size_t t, size_t y) { return unique[t].y < y; });
        if (at != tails.begin()) previous[u] = *(at - 1);
        if (at == tails.end()) {
          tails.push_back(u);
        } else {
          *at = u;
        }
      }
      for (size_t u = tails.empty() ? SIZE_MAX : tails.back(); u != SIZE_MAX; u = previous[u]) {
        anchors.push_back(unique[u]);
      }
      std::reverse(anchors.begin(), anchors.end());
    }
    if (anchors.empty()) {
      ReplaceWhole(a_lo, a_hi, b_lo, b_hi);
      return;
    }
    for (const Split& anchor : anchors) {
      Solve(a_lo, anchor.x, b_lo, anchor.y, anchor_depth + 1);
      Equal(anchor.x, anchor.y);
      a_lo = anchor.x + 1;
      b_lo = anchor.y + 1;
    }
    Solve(a_lo, a_hi, b_lo, b_hi, anchor_depth + 1);
  }

  // Searches forward from the top-left and backward from the bottom-right, one edit more per round
  // on each side, until the two frontiers overlap: the overlap is on a shortest edit script.
  // `forward_[k]` is the furthest x reached on diagonal k (k = x - y) from the start; `backward_[k]`
  // the same from the end, both sequences read reversed. nullopt: the work limit was reached (or
  // the split would not make the problem smaller, which a correct search never returns).
  std::optional<Split> MiddleSplit(size_t a_lo, size_t a_hi, size_t b_lo, size_t b_hi) {
    const int64_t n = static_cast<int64_t>(a_hi - a_lo);
    const int64_t m = static_cast<int64_t>(b_hi - b_lo);
    const int64_t max_d = (n + m + 1) / 2;
    const int64_t offset = max_d + 1;
    const size_t length = static_cast<size_t>(2 * max_d + 3);
    work_ += length;
    if (work_ > work_limit_) return std::nullopt;
    forward_.assign(length, -1);
    backward_.assign(length, -1);
    forward_[offset + 1] = 0;
    backward_[offset + 1] = 0;
    const int64_t delta = n - m;
    const bool odd = (delta & 1) != 0;  // the frontiers meet in a forward round when odd, else a backward one
    const uint32_t* a = a_.data() + a_lo;
    const uint32_t* b = b_.data() + b_lo;
    // Diagonals that ran off the grid's right or bottom edge are not searched again.
    int64_t forward_start = 0, forward_end = 0, backward_start = 0, backward_end = 0;

    auto valid_point = [&](size_t x, size_t y) -> std::optional<Split> {
      const bool smaller = !(x == 0 && y == 0) && !(static_cast<int64_t>(x) == n && static_cast<int64_t>(y) == m);
      if (!smaller) return std::nullopt;
      return Split{x, y};
    };

    for (int64_t d = 0; d <= max_d; ++d) {
      for (int64_t k = -d + forward_start; k <= d - forward_end; k += 2) {
        const int64_t i = offset + k;
        int64_t x = (k == -d || (k != d && forward_[i - 1] < forward_[i + 1])) ? forward_[i + 1] : forward_[i - 1] + 1;
        int64_t y = x - k;
        ++work_;
        while (x < n && y < m && a[x] == b[y]) {
          ++x;
          ++y;
          ++work_;
        }
        forward_[i] = x;
        if (x > n) {
          forward_end += 2;
        } else if (y > m) {
          forward_start += 2;
        } else if (odd) {
          const int64_t j = offset + delta - k;
          if (j >= 0 && j < static_cast<int64_t>(length) && backward_[j] != -1 && x >= n - backward_[j]) {
            return valid_point(static_cast<size_t>(x), static_cast<size_t>(y));
          }
        }
        if (work_ > work_limit_) return std::nullopt;
      }
      for (int64_t k = -d + backward_start; k <= d - backward_end; k += 2) {
        const int64_t i = offset + k;
        int64_t x = (k == -d || (k != d && backward_[i - 1] < backward_[i + 1])) ? backward_[i + 1]
                                                                                  : backward_[i - 1] + 1;
        int64_t y = x - k;
        ++work_;
        while (x < n && y < m && a[n - x - 1] == b[m - y - 1]) {
          ++x;
          ++y;
          ++work_;
        }
        backward_[i] = x;
        if (x > n) {
          backward_end += 2;
        } else if (y > m) {
          backward_start += 2;
        } else if (!odd) {
          const int64_t j = offset + delta - k;
          if (j >= 0 && j < static_cast<int64_t>(length) && forward_[j] != -1) {
            const int64_t fx = forward_[j];
            const int64_t fy = fx - (delta - k);
            if (fx >= n - x) return valid_point(static_cast<size_t>(fx), static_cast<size_t>(fy));
          }
        }
        if (work_ > work_limit_) return std::nullopt;
      }
    }
    return std::nullopt;  // unreachable: the frontiers meet by round max_d
  }

  const std::vector<uint32_t>& a_;
  const std::vector<uint32_t>& b_;
  const uint64_t work_limit_;
  uint64_t work_ = 0;
  bool minimal_ = true;
  std::vector<Op> ops_;
  std::vector<int64_t> forward_, backward_;
};

// Within each run of changed lines, removals first, then additions (as diff(1) prints them).
void RemovalsFirst(std::vector<Op>& ops) {
  size_t i = 0;
  while (i < ops.size()) {
    if (ops[i].kind == OpKind::kEqual) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < ops.size() && ops[j].kind != OpKind::kEqual) ++j;
    std::stable_partition(ops.begin() + static_cast<std::ptrdiff_t>(i), ops.begin() + static_cast<std::ptrdiff_t>(j),
                          [](const Op& op) { return op.kind == OpKind::kDelete; });
    i = j;
  }
}

// "-12,3" in a hunk header: `start` lines come before the range; a range of one line omits its
// count, an empty range names the line before it (as diff(1) writes them).
std::string Range(size_t start, size_t count) {
  if (count == 1) return std::to_string(start + 1);
  return std::to_string(count == 0 ? start : start + 1) + "," + std::to_string(count);
}

void AppendLine(std::string& out, char prefix, std::string_view line) {
  out += prefix;
  out += line;
  if (line.empty() || line.back() != '\n') out += "\n\\ No newline at end of file\n";
}

std::string Unified(const std::vector<Op>& ops, const std::vector<std::string_view>& a_lines,
                    const std::vector<std::string_view>& b_lines, size_t context) {
  // Where each op starts in before and after (lines consumed so far).
  std::vector<size_t> a_pos(ops.size() + 1), b_pos(ops.size() + 1);
  for (size_t i = 0; i < ops.size(); ++i) {
    a_pos[i + 1] = a_pos[i] + (ops[i].kind != OpKind::kInsert ? 1 : 0);
    b_pos[i + 1] = b_pos[i] + (ops[i].kind != OpKind::kDelete ? 1 : 0);
  }
  std::string out;
  size_t i = 0;
  while (i < ops.size()) {
    if (ops[i].kind == OpKind::kEqual) {
      ++i;
      continue;
    }
    const size_t start = i >= context ? i - context : 0;
    // Extend the hunk while the next change is at most 2 * context equal lines away.
    size_t end = i;
    for (;;) {
      while (end < ops.size() && ops[end].kind != OpKind::kEqual) ++end;
      size_t equal_run = 0;
      while (end + equal_run < ops.size() && ops[end + equal_run].kind == OpKind::kEqual) ++equal_run;
      if (end + equal_run < ops.size() && equal_run <= 2 * context) {
        end += equal_run;
        continue;
      }
      end += std::min(equal_run, context);
      break;
    }
    out += "@@ -" + Range(a_pos[start], a_pos[end] - a_pos[start]) + " +" +
           Range(b_pos[start], b_pos[end] - b_pos[start]) + " @@\n";
    for (size_t k = start; k < end; ++k) {
      const Op& op = ops[k];
      switch (op.kind) {
        case OpKind::kEqual: AppendLine(out, ' ', a_lines[op.a]); break;
        case OpKind::kDelete: AppendLine(out, '-', a_lines[op.a]); break;
        case OpKind::kInsert: AppendLine(out, '+', b_lines[op.b]); break;
      }
    }
    i = end;
  }
  return out;
}

}  // namespace

size_t CountLines(std::string_view text) {
  size_t lines = static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
  if (!text.empty() && text.back() != '\n') ++lines;
  return lines;
}

LineDiff DiffLines(std::string_view before, std::string_view after, size_t context, uint64_t work_limit) {
  LineDiff diff;
  if (before == after) return diff;
  const std::vector<std::string_view> a_lines = SplitLines(before);
  const std::vector<std::string_view> b_lines = SplitLines(after);
  // Each distinct line (with its '\n', or without one at the end) becomes one small integer.
  std::unordered_map<std::string_view, uint32_t> ids;
  ids.reserve(a_lines.size() + b_lines.size());
  auto intern = [&ids](const std::vector<std::string_view>& lines) {
    std::vector<uint32_t> out;
    out.reserve(lines.size());
    for (std::string_view line : lines) {
      out.push_back(ids.emplace(line, static_cast<uint32_t>(ids.size())).first->second);
    }
    return out;
  };
  const std::vector<uint32_t> a = intern(a_lines);
  const std::vector<uint32_t> b = intern(b_lines);

  MyersDiff myers(a, b, work_limit);
  myers.Run();
  std::vector<Op>& ops = myers.ops();
  RemovalsFirst(ops);
  for (const Op& op : ops) {
    if (op.kind == OpKind::kDelete) ++diff.removed;
    if (op.kind == OpKind::kInsert) ++diff.added;
  }
  diff.minimal = myers.minimal();
  diff.unified = Unified(ops, a_lines, b_lines, context);
  return diff;
}

}  // namespace basal
