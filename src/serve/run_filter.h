// The filters of a run listing, as an operator types them (GET /v1/runs's query, `basal runs`'s
// flags), checked and turned into the store's RunQuery. Pure: the clock is passed in. One parser
// for both, so the API and the command line accept and refuse the same texts.
//
//   RunFilterText t{.outcome = "script_error", .since = "2h", .limit = "20"};
//   RunFilterParse p = ParseRunFilter(t, now_us, {.default_limit = 50, .max_limit = 500});
//   if (!p.ok()) return JsonError(400, p.code, p.message);        // "bad_outcome", ...
//   auto rows = reader.ListRuns(p.query);
#pragma once

#include <cstddef>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "basal/result.h"
#include "parent/store/store.h"

namespace basal::serve {

// Each filter as given; nullopt when absent. An empty value is refused, not taken as "every".
// (Every member has an initializer, so a designated initializer may name any of them.)
struct RunFilterText {
  std::optional<std::string> flow{}, outcome{}, state{}, trigger{}, since{}, cursor{}, limit{};
};

struct RunFilterBounds {
  size_t default_limit = 50;
  size_t max_limit = 500;
};

struct RunFilterParse {
  RunQuery query;
  // "" when the filters are good; else a stable word ("bad_flow", "bad_outcome", "bad_state",
  // "bad_trigger", "bad_since", "bad_cursor", "bad_limit") and what to write instead.
  std::string code;
  std::string message;
  bool ok() const { return code.empty(); }
};

// Outcomes a run can end with: every activation outcome (OutcomeName), and "missed", "skipped",
// "resume_exhausted" (a run that never ran, or ran out of resumes).
const std::vector<std::string>& RunOutcomeNames();
// What a run's trigger starts with: "api", "webhook", "schedule", "mcp", "cli", "embedder".
const std::vector<std::string>& RunTriggerKinds();

// A time for `since`: RFC 3339 ("2026-12-04T15:07:02Z", with a fraction or a "+02:00" offset),
// a date ("2026-12-04", midnight UTC), or a duration back from `now_unix_us` ("15m", "2h", "7d";
// config.h's ParseDuration). In microseconds since the Unix epoch.
Result<int64_t> ParseSinceText(std::string_view text, int64_t now_unix_us);

RunFilterParse ParseRunFilter(const RunFilterText& text, int64_t now_unix_us, RunFilterBounds bounds = {});

// A run request's body (POST /v1/flows/{name}/runs) of the commonest form, {"input": SCALAR} with
// SCALAR null, true, false or an integer of at most 15 digits, and JSON whitespace anywhere
// between: true, with *input what the JSON parser reads there. False for every other body, which
// the parser reads as before (the body's checks and their errors are the API's).
bool ReadPlainRunBody(std::string_view body, nlohmann::json* input);

// A `?wait=` value (docs/api.md): a duration as ParseDuration reads it, a bare number being
// seconds ("30" is "30s").
Result<std::chrono::milliseconds> ParseWaitText(std::string_view text);

// A run as the API shows it (GET /v1/runs/{id}, docs/api.md) and `basal runs --json` prints it:
// its row, and from its last activation (read through `reader`) the result, error and timings.
// `ended`: that activation as the caller already holds it (RunQueue::Wait's), not read again.
nlohmann::json RunJson(const RunRow& run, JournalReader& reader, const ActivationRow* ended = nullptr);
// The same run as RunJson's dump(-1, ' ', false, replace), the bytes an answer carries, written
// without building the tree (a `?wait` answer's: it is on the run's path).
std::string RunJsonText(const RunRow& run, JournalReader& reader, const ActivationRow* ended = nullptr);

// The cursor of the page after `rows` when there are more (`more`): opaque to clients (today the
// last run's id, below which the next page continues); nullopt when the listing is complete.
std::optional<std::string> NextRunCursor(const std::vector<RunRow>& rows, bool more);

}  // namespace basal::serve
