// The review of a new flow version or codemode policy (include/basal/review.h).
#include "basal/review.h"

#include <exception>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "basal/terminal_text.h"

namespace basal {
namespace {

// The seven budgets in the manifest's units, in the order docs/manifest.md lists them.
std::vector<std::pair<const char*, uint64_t>> BudgetValues(const Budgets& budgets) {
  return {
      {"cpu_ms", static_cast<uint64_t>(budgets.cpu.count())},
      {"heap_mb", budgets.heap_limit_bytes >> 20},
      {"stack_kb", budgets.stack_limit_bytes >> 10},
      {"deadline_ms", static_cast<uint64_t>(budgets.deadline.count())},
      {"calls_in_flight", budgets.calls_in_flight},
      {"journal_kb", budgets.journal_bytes >> 10},
      {"log_kb", budgets.log_bytes >> 10},
  };
}

// The overall kind of a grant from its constraint changes (non-empty).
GrantReview::Kind KindOf(const std::vector<ConstraintChange>& changes) {
  bool all_widened = true, all_narrowed = true;
  for (const ConstraintChange& change : changes) {
    all_widened = all_widened && change.direction == ConstraintChange::Direction::kWidened;
    all_narrowed = all_narrowed && change.direction == ConstraintChange::Direction::kNarrowed;
  }
  if (all_widened) return GrantReview::Kind::kWidened;
  if (all_narrowed) return GrantReview::Kind::kNarrowed;
  return GrantReview::Kind::kChanged;
}

// Two grants of the same host call, both present.
GrantReview CompareGrant(const std::string& name, const Json& before, const Json& after,
                         const HostCallRegistry& registry) {
  GrantReview review;
  review.name = name;
  review.before = before;
  review.after = after;
  const HostCallSpec* spec = registry.Find(name);
  if (spec == nullptr || !spec->compare_grant) {
    // nlohmann compares objects by content, so key order and spacing do not count as a change.
    if (before == after) {
      review.kind = GrantReview::Kind::kSame;
    } else {
      review.kind = GrantReview::Kind::kChanged;
      review.comparable = false;
      if (spec == nullptr) review.compare_error = "no host call of this name is registered";
    }
    return review;
  }
  try {
    review.changes = spec->compare_grant(before, after);
  } catch (const std::exception& e) {
    review.changes.clear();
    review.kind = GrantReview::Kind::kChanged;
    review.comparable = false;
    review.compare_error = std::string("its compare_grant threw: ") + e.what();
    return review;
  } catch (...) {
    review.changes.clear();
    review.kind = GrantReview::Kind::kChanged;
    review.comparable = false;
    review.compare_error = "its compare_grant threw something that is not a std::exception";
    return review;
  }
  // Empty: both accept the same calls, even if the JSON differs (a default written out).
  review.kind = review.changes.empty() ? GrantReview::Kind::kSame : KindOf(review.changes);
  return review;
}

std::string ReviewDump(const Json& value) { return value.dump(-1, ' ', false, Json::error_handler_t::replace); }

// A constraint value or a grant's constraints, as JSON that cannot drive a terminal.
std::string ShownJson(const Json& value) { return EscapeForTerminal(ReviewDump(value), TerminalText::kJson); }

std::string Text(std::string_view text) { return EscapeForTerminal(text, TerminalText::kOneLine); }

const char* MarkOf(ConstraintChange::Direction direction) {
  switch (direction) {
    case ConstraintChange::Direction::kWidened: return "+";
    case ConstraintChange::Direction::kNarrowed: return "-";
    case ConstraintChange::Direction::kChanged: return "~";
  }
  return "~";
}

void RenderGrants(const Review& review, std::string& out) {
  out += "grants:\n";
  if (review.grants.empty()) {
    if (review.first) {
      out += "  none (the flow may call only host calls that need no grant, such as log)\n";
    } else if (!review.same_manifest_text && review.budgets.empty() && review.mcp_servers.empty()) {
      out += "  no change (the manifest's text differs only in form: spacing, key order or defaults written out)\n";
    } else {
      out += "  no change\n";
    }
    return;
  }
  for (const GrantReview& grant : review.grants) {
    const std::string name = Text(grant.name);
    switch (grant.kind) {
      case GrantReview::Kind::kAdded:
        out += "  + " + name + (review.first ? ": " : ": added ") + ShownJson(grant.after) + "\n";
        break;
      case GrantReview::Kind::kRemoved:
        out += "  - " + name + ": removed (it granted " + ShownJson(grant.before) + ")\n";
        break;
      case GrantReview::Kind::kSame:
        out += "    " + name + ": unchanged " + ShownJson(grant.after) + "\n";
        break;
      case GrantReview::Kind::kWidened:
      case GrantReview::Kind::kNarrowed:
      case GrantReview::Kind::kChanged:
        if (!grant.comparable) {
          out += "  ? " + name + ": changed; basal cannot tell whether it is wider";
          if (!grant.compare_error.empty()) out += " (" + Text(grant.compare_error) + ")";
          out += ": read the constraints\n";
          out += "      before: " + ShownJson(grant.before) + "\n";
          out += "      after:  " + ShownJson(grant.after) + "\n";
          break;
        }
        for (const ConstraintChange& change : grant.changes) {
          out += std::string("  ") + MarkOf(change.direction) + " " + name + ": " + Text(change.constraint) + " " +
                 Text(change.detail) + " (" + DirectionName(change.direction) + ")\n";
        }
        break;
    }
  }
}

void RenderBudgets(const Review& review, std::string& out) {
  out += "budgets:\n";
  if (review.budgets.empty()) {
    out += "  no change\n";
    return;
  }
  for (const BudgetReview& budget : review.budgets) {
    if (review.first) {
      out += "  " + budget.name + ": " + std::to_string(budget.after) + "\n";
    } else {
      const bool raised = budget.after > budget.before;
      out += std::string("  ") + (raised ? "+ " : "- ") + budget.name + ": " + std::to_string(budget.before) + " -> " +
             std::to_string(budget.after) + (raised ? " (raised)\n" : " (lowered)\n");
    }
  }
}

std::string Lines(size_t n) { return std::to_string(n) + (n == 1 ? " line" : " lines"); }

void RenderSource(const Review& review, bool source_diff, std::string& out) {
  const SourceReview& source = review.source;
  out += "source:\n";
  if (!source.present) {
    out += "  none (a codemode policy has no source: each script run under it is journaled)\n";
    return;
  }
  if (review.first) {
    out += "  " + Lines(source.lines_after) + "\n";
  } else if (source.identical) {
    out += "  unchanged (" + Lines(source.lines_after) + ")\n";
  } else {
    out += "  " + Lines(source.lines_before) + " -> " + Lines(source.lines_after) + ": " +
           std::to_string(source.lines_added) + " added, " + std::to_string(source.lines_removed) + " removed";
    out += source.minimal ? "\n"
                          : " (the texts differ too much for a minimal diff: some changed stretches are counted as "
                            "removed whole and added whole)\n";
  }
  if (!source_diff || source.unified.empty()) return;
  // Each diff line: its prefix (' ', '+', '-', '@') then text from the file; "\ No newline..." is
  // ours (a line of the file always starts with one of the prefixes, never a backslash).
  size_t start = 0;
  const std::string& unified = source.unified;
  while (start < unified.size()) {
    size_t end = unified.find('\n', start);
    if (end == std::string::npos) end = unified.size();
    const std::string_view line(unified.data() + start, end - start);
    out += "    ";
    out += line.rfind("\\ ", 0) == 0 ? std::string(line) : Text(line);
    out += "\n";
    start = end + 1;
  }
}

}  // namespace

const char* GrantKindName(GrantReview::Kind kind) {
  switch (kind) {
    case GrantReview::Kind::kAdded: return "added";
    case GrantReview::Kind::kRemoved: return "removed";
    case GrantReview::Kind::kWidened: return "widened";
    case GrantReview::Kind::kNarrowed: return "narrowed";
    case GrantReview::Kind::kChanged: return "changed";
    case GrantReview::Kind::kSame: return "same";
  }
  return "changed";
}

const char* McpServerKindName(McpServerReview::Kind kind) {
  switch (kind) {
    case McpServerReview::Kind::kAdded: return "added";
    case McpServerReview::Kind::kRemoved: return "removed";
    case McpServerReview::Kind::kChanged: return "changed";
  }
  return "changed";
}

namespace {

// /usr/bin/node "/opt/fs/index.js" "/srv" (cwd /, env TOKEN="${secret:gh}", call timeout 60000 ms, ...):
// each piece escaped once for the terminal (values as JSON strings, as the grants section shows them).
std::string ServerLine(const Json& server) {
  std::string line = ShownJson(server.value("command", ""));
  if (auto args = server.find("args"); args != server.end() && args->is_array()) {
    for (const Json& arg : *args) line += " " + ShownJson(arg);
  }
  std::string env;
  if (auto vars = server.find("env"); vars != server.end() && vars->is_object()) {
    for (const auto& [name, value] : vars->items()) env += (env.empty() ? "" : " ") + Text(name) + "=" + ShownJson(value);
  }
  line += " (cwd " + ShownJson(server.value("cwd", std::string("/"))) + (env.empty() ? "" : ", env " + env) +
          ", call timeout " + std::to_string(server.value("call_timeout_ms", 0)) + " ms, start timeout " +
          std::to_string(server.value("start_timeout_ms", 0)) + " ms)";
  return line;
}

void RenderMcpServers(const Review& review, std::string& out) {
  if (review.mcp_servers.empty()) return;
  out += "mcp_servers (programs basal starts for this policy's scripts, as its own user):\n";
  for (const McpServerReview& server : review.mcp_servers) {
    const std::string name = Text(server.name);
    switch (server.kind) {
      case McpServerReview::Kind::kAdded:
        out += "  + " + name + ": " + ServerLine(server.after) + "\n";
        break;
      case McpServerReview::Kind::kRemoved:
        out += "  - " + name + ": removed (it ran " + ServerLine(server.before) + ")\n";
        break;
      case McpServerReview::Kind::kChanged:
        out += "  ~ " + name + ": changed\n    was: " + ServerLine(server.before) + "\n    now: " +
               ServerLine(server.after) + "\n";
        break;
    }
  }
}

}  // namespace

bool Review::Widens() const {
  for (const McpServerReview& server : mcp_servers) {
    if (server.kind != McpServerReview::Kind::kRemoved) return true;
  }
  for (const GrantReview& grant : grants) {
    if (!grant.comparable || grant.kind == GrantReview::Kind::kAdded || grant.kind == GrantReview::Kind::kWidened ||
        grant.kind == GrantReview::Kind::kChanged) {
      return true;
    }
  }
  for (const BudgetReview& budget : budgets) {
    if (first || budget.after > budget.before) return true;
  }
  return false;
}

Review ReviewVersions(const Manifest* before, std::optional<std::string_view> before_source,
                      std::string_view before_manifest_text, const Manifest& after,
                      std::optional<std::string_view> after_source, std::string_view after_manifest_text,
                      const HostCallRegistry& registry) {
  Review review;
  review.first = before == nullptr;

  // Grants: both maps are sorted by name, so the union is too.
  if (review.first) {
    for (const auto& [name, constraints] : after.grants()) {
      GrantReview grant;
      grant.name = name;
      grant.kind = GrantReview::Kind::kAdded;
      grant.after = constraints;
      review.grants.push_back(std::move(grant));
    }
  } else {
    std::set<std::string> names;
    for (const auto& entry : before->grants()) names.insert(entry.first);
    for (const auto& entry : after.grants()) names.insert(entry.first);
    for (const std::string& name : names) {
      auto was = before->grants().find(name);
      auto now = after.grants().find(name);
      GrantReview grant;
      if (was == before->grants().end()) {
        grant.name = name;
        grant.kind = GrantReview::Kind::kAdded;
        grant.after = now->second;
      } else if (now == after.grants().end()) {
        grant.name = name;
        grant.kind = GrantReview::Kind::kRemoved;
        grant.before = was->second;
      } else {
        grant = CompareGrant(name, was->second, now->second, registry);
        if (grant.kind == GrantReview::Kind::kSame) continue;
      }
      review.grants.push_back(std::move(grant));
    }
  }

  // Downstream MCP servers (codemode policies).
  {
    static const std::map<std::string, Json> kNone;
    const auto& was = review.first ? kNone : before->mcp_servers();
    const auto& now = after.mcp_servers();
    std::set<std::string> names;
    for (const auto& entry : was) names.insert(entry.first);
    for (const auto& entry : now) names.insert(entry.first);
    for (const std::string& name : names) {
      auto b = was.find(name);
      auto a = now.find(name);
      if (b == was.end()) {
        review.mcp_servers.push_back({name, McpServerReview::Kind::kAdded, nullptr, a->second});
      } else if (a == now.end()) {
        review.mcp_servers.push_back({name, McpServerReview::Kind::kRemoved, b->second, nullptr});
      } else if (a->second != b->second) {
        review.mcp_servers.push_back({name, McpServerReview::Kind::kChanged, b->second, a->second});
      }
    }
  }

  // Budgets.
  const auto after_budgets = BudgetValues(after.budgets());
  if (review.first) {
    for (const auto& [name, value] : after_budgets) review.budgets.push_back(BudgetReview{name, 0, value});
  } else {
    const auto before_budgets = BudgetValues(before->budgets());
    for (size_t i = 0; i < after_budgets.size(); ++i) {
      if (before_budgets[i].second != after_budgets[i].second) {
        review.budgets.push_back(
            BudgetReview{after_budgets[i].first, before_budgets[i].second, after_budgets[i].second});
      }
    }
  }

  // Source. A policy has none on either side; a version that has one is diffed against the
  // earlier one's (or against nothing, for a first version).
  SourceReview& source = review.source;
  source.present = after_source.has_value() || (!review.first && before_source.has_value());
  if (source.present) {
    const std::string_view old_text = review.first ? std::string_view() : before_source.value_or(std::string_view());
    const std::string_view new_text = after_source.value_or(std::string_view());
    source.lines_before = CountLines(old_text);
    source.lines_after = CountLines(new_text);
    source.identical = !review.first && before_source.has_value() == after_source.has_value() && old_text == new_text;
    LineDiff diff = DiffLines(old_text, new_text);
    source.lines_added = diff.added;
    source.lines_removed = diff.removed;
    source.unified = std::move(diff.unified);
    source.minimal = diff.minimal;
  }

  review.same_manifest_text = !review.first && before_manifest_text == after_manifest_text;
  review.identical = review.same_manifest_text &&
                     before_source.has_value() == after_source.has_value() &&
                     before_source.value_or(std::string_view()) == after_source.value_or(std::string_view());
  return review;
}

std::string RenderReview(const Review& review, bool source_diff) {
  std::string out;
  RenderGrants(review, out);
  RenderMcpServers(review, out);
  RenderBudgets(review, out);
  RenderSource(review, source_diff, out);
  return out;
}

nlohmann::json ReviewJson(const Review& review, bool source_diff) {
  Json grants = Json::array();
  for (const GrantReview& grant : review.grants) {
    Json changes = Json::array();
    for (const ConstraintChange& change : grant.changes) {
      changes.push_back(Json{{"constraint", change.constraint},
                             {"direction", DirectionName(change.direction)},
                             {"detail", change.detail}});
    }
    Json entry = {{"name", grant.name},     {"kind", GrantKindName(grant.kind)}, {"before", grant.before},
                  {"after", grant.after},   {"comparable", grant.comparable},    {"changes", std::move(changes)}};
    if (!grant.compare_error.empty()) entry["compare_error"] = grant.compare_error;
    grants.push_back(std::move(entry));
  }
  Json budgets = Json::array();
  for (const BudgetReview& budget : review.budgets) {
    if (review.first) {
      budgets.push_back(Json{{"name", budget.name}, {"after", budget.after}});
    } else {
      budgets.push_back(Json{{"name", budget.name},
                             {"before", budget.before},
                             {"after", budget.after},
                             {"change", budget.after > budget.before ? "raised" : "lowered"}});
    }
  }
  const SourceReview& s = review.source;
  Json source = {{"present", s.present}};
  if (s.present) {
    source["lines_before"] = s.lines_before;
    source["lines_after"] = s.lines_after;
    source["lines_added"] = s.lines_added;
    source["lines_removed"] = s.lines_removed;
    source["identical"] = s.identical;
    source["minimal"] = s.minimal;
    if (source_diff) source["unified"] = s.unified;
  }
  Json servers = Json::array();
  for (const McpServerReview& server : review.mcp_servers) {
    servers.push_back(Json{{"name", server.name}, {"kind", McpServerKindName(server.kind)},
                           {"before", server.before}, {"after", server.after}});
  }
  Json out = Json{{"first", review.first},         {"identical", review.identical},
              {"same_manifest_text", review.same_manifest_text}, {"widens", review.Widens()},
              {"grants", std::move(grants)},   {"budgets", std::move(budgets)}, {"source", std::move(source)}};
  if (!servers.empty()) out["mcp_servers"] = std::move(servers);
  return out;
}

}  // namespace basal
