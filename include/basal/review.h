// The operator's review of a flow version (or a codemode policy) before approving it: for a first
// version every grant and budget; for a later one what changed against the current approved
// version: grants added, removed, widened or narrowed per constraint (each host-call spec compares
// its own grants: HostCallSpec::compare_grant), budgets raised or lowered, and the source's change
// in lines. docs/approvals.md shows a review.
//
//   Review review = ReviewVersions(&current, current_source, current_manifest_text,
//                                  proposed, proposed_source, proposed_manifest_text, registry);
//   std::cout << RenderReview(review, /*source_diff=*/false);   // escaped for a terminal
//   if (review.identical) { /* approving would change nothing */ }
//
// Everything in a Review is kept as the files said it (constraint JSON, namespaces, source lines):
// RenderReview escapes it for a terminal, ReviewJson leaves it to the JSON serializer. The source
// text may be any bytes, so dump ReviewJson's result with Json::error_handler_t::replace.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "basal/host_call.h"
#include "basal/manifest.h"

namespace basal {

// One host call's grant, compared between the two versions.
struct GrantReview {
  enum class Kind { kAdded, kRemoved, kWidened, kNarrowed, kChanged, kSame };
  std::string name;                       // host call name, "kv.put"
  Kind kind = Kind::kSame;
  Json before, after;                     // constraints (null when absent on that side)
  std::vector<ConstraintChange> changes;  // per constraint (empty for added/removed/same, and when not comparable)
  // false: the spec has no compare_grant (or it threw, or the host call is no longer registered);
  // kind is kChanged and the operator must read `before` and `after`.
  bool comparable = true;
  std::string compare_error;              // why it is not comparable when compare_grant threw: its message
};
const char* GrantKindName(GrantReview::Kind kind);  // "added", "removed", "widened", "narrowed", "changed", "same"

struct BudgetReview {
  std::string name;                       // the manifest key: "cpu_ms", "heap_mb", "stack_kb", "deadline_ms",
                                          // "calls_in_flight", "journal_kb", "log_kb"
  uint64_t before = 0, after = 0;         // in the manifest's units; `before` unused for a first version
};

// A downstream MCP server of a codemode policy (mcp_servers): the program basal will start and
// everything it is given. Any change to one is reviewed as a change (a new command runs new code).
struct McpServerReview {
  enum class Kind { kAdded, kRemoved, kChanged };
  std::string name;
  Kind kind = Kind::kAdded;
  Json before, after;  // the server as parsed, defaults filled in (null when absent on that side)
};
const char* McpServerKindName(McpServerReview::Kind kind);  // "added", "removed", "changed"

struct SourceReview {
  bool present = false;                   // false for a codemode policy (no source)
  size_t lines_before = 0, lines_after = 0, lines_added = 0, lines_removed = 0;
  std::string unified;                    // unified line diff (3 lines of context), "" when identical
  bool identical = true;                  // false for a first version with a source
  // false: the texts differ too much for DiffLines' bound (kDiffWorkLimit); `unified` and the counts
  // are still a correct diff, but not a minimal one (see LineDiff::minimal).
  bool minimal = true;
};

struct Review {
  bool first = true;                      // no earlier version: every grant is kAdded, every budget listed
  bool identical = false;                 // same source text and same manifest text: approving changes nothing
  bool same_manifest_text = false;        // the two manifests' texts are the same bytes (false when first)
  std::vector<GrantReview> grants;        // sorted by name; kSame entries omitted unless first
  std::vector<BudgetReview> budgets;      // first: all seven; else only those that differ
  std::vector<McpServerReview> mcp_servers;  // sorted by name; only those added, removed or changed
  SourceReview source;
  // Any grant added, widened, changed or not comparable, any budget raised, or any MCP server
  // added or changed (a first version with any grant or budget widens: it starts from nothing).
  bool Widens() const;
};

// `before` null: a first version (the before_* texts are then ignored). Sources: std::nullopt for
// a policy (no script). Both manifests must have been parsed against `registry` (or one with the
// same specs): a grant whose host call it no longer knows is reported as not comparable.
Review ReviewVersions(const Manifest* before, std::optional<std::string_view> before_source,
                      std::string_view before_manifest_text, const Manifest& after,
                      std::optional<std::string_view> after_source, std::string_view after_manifest_text,
                      const HostCallRegistry& registry);

// The review as text for a terminal, lines indented by two spaces under the sections "grants:",
// "budgets:" and "source:" (the caller prints the header naming flow and versions). Every piece of
// text that came from a file (names, constraint values, details, source lines) goes through
// EscapeForTerminal, so a crafted file cannot forge lines or drive the terminal. `source_diff`:
// include the whole unified diff (each of its lines indented by four spaces).
std::string RenderReview(const Review& review, bool source_diff);

// The same facts as JSON (for --json and the journal). `source_diff`: include the unified diff
// ("source.unified"); without it only the counts.
nlohmann::json ReviewJson(const Review& review, bool source_diff = false);

// ---- Line diff --------------------------------------------------------------------------------
//
// Myers' O((N+M)D) algorithm in its linear-space form (divide and conquer on the middle snake),
// after stripping the common first and last lines. Lines end at '\n'; a last line without one is a
// different line from the same text with one (shown with "\ No newline at end of file", as diff(1)
// does). Hunks carry `context` lines either side; the text has no "---"/"+++" header.
//
// The bound: memory is linear in the input (a few machine words per line, plus the unified text,
// at most about the size of both inputs together). The search performs at most kDiffWorkLimit
// steps in all (a step is one diagonal tried or one pair of equal lines followed; the whole
// budget takes a fraction of a second); everything else is linear in the input. Texts of 10,000
// lines with half of them changed stay under the limit. Past it, what is still unsolved is
// matched on the lines that occur exactly once in both (the longest run of them in the same order
// in both, as "patience diff" does), the gaps between them the same way, at most 16 levels deep,
// each level linear in its lines; what remains is removed whole and added whole. `unified` is
// then still a correct diff (applying it turns `before` into `after`) and the counts count
// exactly its lines, but they can be larger than the fewest edits; `minimal` says so.
inline constexpr uint64_t kDiffWorkLimit = 1ull << 26;

struct LineDiff {
  size_t added = 0, removed = 0;
  std::string unified;  // "" when the texts are identical
  bool minimal = true;  // false: kDiffWorkLimit was reached (see above)
};
// `work_limit`: the bound above (tests lower it to reach it with small inputs).
LineDiff DiffLines(std::string_view before, std::string_view after, size_t context = 3,
                   uint64_t work_limit = kDiffWorkLimit);

// Lines in a text: the number of '\n', plus one when the text does not end with one ("" has none).
size_t CountLines(std::string_view text);

}  // namespace basal
