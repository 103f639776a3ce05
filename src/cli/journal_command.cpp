// `basal journal`: the journal read back, readable or as JSON lines. It only reads: the journal
// is opened read-only and never created, initialized or migrated (OpenReader). Everything
// in it may have come from a script: text fields are shown through EscapeForTerminal, JSON
// through JsonForTerminal.
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <limits>
#include <optional>
#include <set>
#include <thread>
#include <string>

#include "cli/cli_support.h"
#include "cli/daemon_client.h"
#include "cli/commands.h"
#include "parent/store/owner.h"
#include "parent/store/open.h"
#include "parent/store/store.h"
#include "protocol/messages.h"

namespace basal::cli {
namespace {

using Json = nlohmann::json;

void Print(const std::string& text) { std::fwrite(text.data(), 1, text.size(), stdout); }
constexpr size_t kPrintChunkBytes = 64 * 1024;

// Stored JSON text back to a value; text that does not parse is kept as a string, not lost.
Json StoredJson(const std::string& text) {
  if (text.empty()) return nullptr;
  Json value;
  std::string why;
  if (protocol::ParseJsonValue(text, value, why)) return value;
  return text;
}


std::string Millis(int64_t us) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f ms", static_cast<double>(us) / 1000.0);
  return buf;
}

Json CallJson(const CallRow& c) {
  Json j = {{"call_id", c.call_id},
            {"name", c.name},
            {"args", StoredJson(c.args_json)},
            {"allowed", c.decision.allowed()},  // kept for readers of the first format
            {"verdict", VerdictName(c.decision.verdict)},
            {"rule", c.decision.rule},
            {"reason", c.decision.reason},
            {"effect", EffectName(c.effect)},
            {"state", CallStateName(c.state)},
            {"start_unix_us", c.start_unix_us},
            {"end_unix_us", c.end_unix_us ? Json(*c.end_unix_us) : Json(nullptr)}};
  if (!c.result_json.empty()) j["result"] = StoredJson(c.result_json);
  if (!c.error_json.empty()) j["error"] = StoredJson(c.error_json);
  return j;
}

// Where the activation's flow came from, for people: "approved flow orders version 2".
std::string OriginText(const ActivationRow& a, const std::optional<ApprovalRow>& approval) {
  switch (a.origin) {
    case Origin::kUnrecorded: return "not recorded (journaled before schema 4)";
    case Origin::kAdhoc: return "ad hoc (a file run with its manifest)";
    case Origin::kApproved:
    case Origin::kCodemode: {
      if (!approval) return std::string(OriginName(a.origin)) + " (approval " + std::to_string(a.approval_id) + ")";
      std::string out = a.origin == Origin::kApproved ? "approved flow " : "codemode script under policy ";
      return out + EscapeForTerminal(approval->name) + " version " + std::to_string(approval->version);
    }
  }
  return OriginName(a.origin);
}

Json ActivationJson(const ActivationRow& a, const std::vector<CallRow>& calls,
                    const std::optional<ApprovalRow>& approval = std::nullopt) {
  Json j = {{"id", a.id},
            {"flow", a.flow},
            {"source_hash", a.source_hash},
            {"manifest_hash", a.manifest_hash},
            {"input", StoredJson(a.input_json)},
            {"start_unix_us", a.start_unix_us},
            {"end_unix_us", a.end_unix_us ? Json(*a.end_unix_us) : Json(nullptr)},
            {"outcome", a.outcome.empty() ? Json(nullptr) : Json(a.outcome)},
            {"cpu_us", a.cpu_us},
            {"logs_dropped", a.logs_dropped},
            {"origin", OriginName(a.origin)}};
  if (a.run_id != 0) j["run"] = a.run_id;
  if (!a.manifest_text_hash.empty()) j["manifest_text_hash"] = a.manifest_text_hash;
  if (a.approval_id != 0) {
    j["approval"] = {{"id", a.approval_id}};
    if (approval) {
      j["approval"]["kind"] = ApprovalKindName(approval->kind);
      j["approval"]["name"] = approval->name;
      j["approval"]["version"] = approval->version;
    }
  }
  if (!a.owner.host.empty() || a.owner.pid != 0) {
    j["owner"] = {{"host", a.owner.host}, {"pid", a.owner.pid}, {"start_ticks", a.owner.start_ticks}};
    j["lease_until_unix_us"] = a.lease_until_unix_us;
  }
  if (!a.result_json.empty() || a.outcome == "ok") j["result"] = StoredJson(a.result_json);
  if (!a.error_json.empty()) j["error"] = StoredJson(a.error_json);
  Json list = Json::array();
  for (const CallRow& c : calls) list.push_back(CallJson(c));
  j["calls"] = std::move(list);
  return j;
}

std::string Compact(const std::string& stored) { return JsonForTerminal(StoredJson(stored)); }

// "allowed (grants.kv.get): granted by manifest", "DENIED (no grant): ...", "NEEDS APPROVAL ...".
std::string Decision(const CallRow& c) {
  std::string verdict;
  switch (c.decision.verdict) {
    case Verdict::kAllow: verdict = "allowed"; break;
    case Verdict::kDeny: verdict = "DENIED"; break;
    case Verdict::kNeedsApproval: verdict = "NEEDS APPROVAL"; break;
    case Verdict::kQuotaExceeded: verdict = "QUOTA EXCEEDED"; break;
  }
  const bool rule_adds = !c.decision.rule.empty() && c.decision.rule != c.decision.reason;
  return verdict + (rule_adds ? " (" + EscapeForTerminal(c.decision.rule) + ")" : "") + ": " +
         EscapeForTerminal(c.decision.reason);
}

void PrintReadable(const ActivationRow& a, const std::vector<CallRow>& calls, const std::optional<ApprovalRow>& approval,
                   const std::optional<RunRow>& run) {
  std::string out = "activation " + std::to_string(a.id) + "  " + EscapeForTerminal(a.flow) + "  " +
                    (a.outcome.empty() ? std::string("unfinished") : EscapeForTerminal(a.outcome)) + "\n";
  if (run) {
    out += "  run       " + std::to_string(run->id) + ", " + RunStateName(run->state) +
           (run->state == RunState::kEnded ? " (" + EscapeForTerminal(run->outcome) + ")" : std::string()) +
           (run->durable ? ", durable, resumed " + std::to_string(run->resumes) + " time(s)" : std::string()) +
           (run->attempt > 1 ? ", attempt " + std::to_string(run->attempt) : std::string()) + "\n";
    if (RunParked(run->state)) {
      const std::string when = run->wake_unix_us ? UtcText(*run->wake_unix_us) : std::string("no time set");
      if (run->state == RunState::kSleeping) out += "  parked    sleeping until " + when + "\n";
      if (run->state == RunState::kRetrying) out += "  parked    attempt " + std::to_string(run->attempt + 1) + " at " + when + "\n";
      if (run->state == RunState::kWaiting)
        out += "  parked    waiting for event " + EscapeForTerminal(run->waiting_for) +
               (run->waiting_key.empty() ? std::string() : " (key " + EscapeForTerminal(run->waiting_key) + ")") +
               (run->wake_unix_us ? ", at most until " + when : std::string()) + "\n";
    }
    if (run->state != RunState::kEnded && !run->state_detail.empty())
      out += "  waits     " + Compact(run->state_detail) + "\n";
  }
  if (!a.owner.host.empty() || a.owner.pid != 0) {
    out += "  parent    host " + EscapeForTerminal(a.owner.host) + ", pid " + std::to_string(a.owner.pid) + "\n";
  }
  out += "  started   " + UtcText(a.start_unix_us) + "\n";
  if (a.end_unix_us) {
    out += "  ended     " + UtcText(*a.end_unix_us) + "  (" + Millis(*a.end_unix_us - a.start_unix_us) + ", cpu " +
           Millis(a.cpu_us) + ")\n";
  }
  out += "  origin    " + OriginText(a, approval) + "\n";
  out += "  source    " + EscapeForTerminal(a.source_hash) + "\n";
  // As `flow approve` and `flow show` print it: the text's hash (what a file's sha256sum gives),
  // then the canonical one that decides what is the same manifest.
  out += "  manifest  " +
         (a.manifest_text_hash.empty() ? EscapeForTerminal(a.manifest_hash) + " (canonical)"
                                       : EscapeForTerminal(a.manifest_text_hash) + " (canonical " +
                                             EscapeForTerminal(a.manifest_hash) + ")") +
         "\n";
  out += "  input     " + Compact(a.input_json) + "\n";
  if (!a.result_json.empty()) out += "  result    " + Compact(a.result_json) + "\n";
  if (!a.error_json.empty()) out += "  error     " + Compact(a.error_json) + "\n";
  if (a.logs_dropped > 0)
    out += "  logs      " + std::to_string(a.logs_dropped) + " line(s) dropped past the log or journal budget\n";
  if (calls.empty()) {
    out += "  calls     none\n";
  } else {
    out += "  calls     " + std::to_string(calls.size()) + "\n";
  }
  for (const CallRow& c : calls) {
    out += "    #" + std::to_string(c.call_id) + " " + EscapeForTerminal(c.name) + " " + Compact(c.args_json) + "\n";
    out += "      " + Decision(c) + "\n";
    out += "      state  " + std::string(CallStateName(c.state)) + " (" + EffectName(c.effect) + ")";
    if (c.state == CallState::kUnknown) out += "  OUTCOME UNKNOWN: its effect may or may not have happened";
    out += "\n";
    if (!c.result_json.empty()) out += "      result " + Compact(c.result_json) + "\n";
    if (!c.error_json.empty()) out += "      error  " + Compact(c.error_json) + "\n";
    if (c.end_unix_us) out += "      took   " + Millis(*c.end_unix_us - c.start_unix_us) + "\n";
    if (out.size() >= kPrintChunkBytes) {  // the text of a large activation is never held whole
      Print(out);
      out.clear();
    }
  }
  Print(out);
}

// One activation as one JSON line, written call by call: the activation's fields, then "calls".
void PrintJsonLine(const ActivationRow& a, const std::vector<CallRow>& calls, const std::optional<ApprovalRow>& approval) {
  std::string head = JsonForTerminal(ActivationJson(a, {}, approval));
  const std::string empty_calls = "\"calls\":[]";
  // Keys are sorted; only "approval" sorts before "calls", and it holds a validated name and numbers.
  const size_t at = head.find(empty_calls);
  Print(head.substr(0, at) + "\"calls\":[");
  std::string out;
  for (size_t i = 0; i < calls.size(); ++i) {
    if (i > 0) out += ',';
    out += JsonForTerminal(CallJson(calls[i]));
    if (out.size() >= kPrintChunkBytes) {
      Print(out);
      out.clear();
    }
  }
  Print(out + head.substr(at + empty_calls.size() - 1) + "\n");
}

}  // namespace

namespace {

// --follow: long-polls the daemon's GET /v1/journal and prints each activation once it has ended,
// until interrupted. The cursor (`next`) stays below an activation that still runs, so it comes
// again when it ends; an id printed is never printed twice.
int FollowJournal(const JournalOptions& o) {
  auto resolved = ResolveDaemonAddress(o.socket, o.url, o.token_file);
  if (!resolved) return Fail(kKindUsage, resolved.error().message);
  const DaemonAddress address = *resolved;
  // Start from now: what ended before is `basal journal --db`'s to print. Scan what the journal
  // holds: an ended activation is marked printed (never shown), and the cursor starts below the
  // oldest one still running, so that one is printed when it ends.
  std::set<int64_t> printed;  // ids above `after` already printed or ended before the start
  int64_t scan = 0;
  std::optional<int64_t> oldest_running;
  while (true) {
    auto page = DaemonGet(address, "/v1/journal?after=" + std::to_string(scan) + "&limit=1000", std::chrono::seconds(30));
    if (!page) return Fail(kKindIo, page.error().message);
    if (page->status != 200) return Fail(kKindJournal, "basal serve answered " + std::to_string(page->status) + ": " + page->body);
    auto j = nlohmann::json::parse(page->body, nullptr, false);
    if (j.is_discarded() || !j.contains("activations") || !j["activations"].is_array() || j["activations"].empty()) break;
    for (const auto& a : j["activations"]) {
      const int64_t id = a.value("activation_id", int64_t{0});
      if (a["outcome"].is_null()) {
        if (!oldest_running) oldest_running = id;
      } else {
        printed.insert(id);
      }
      scan = std::max(scan, id);
    }
  }
  int64_t after = oldest_running ? *oldest_running - 1 : scan;
  printed.erase(printed.begin(), printed.upper_bound(after));
  while (true) {
    auto page = DaemonGet(address, "/v1/journal?after=" + std::to_string(after) + "&wait=25s", std::chrono::seconds(60));
    if (!page) return Fail(kKindIo, page.error().message);
    if (page->status != 200) return Fail(kKindJournal, "basal serve answered " + std::to_string(page->status) + ": " + page->body);
    auto j = nlohmann::json::parse(page->body, nullptr, false);
    if (j.is_discarded() || !j.contains("activations") || !j["activations"].is_array())
      return Fail(kKindJournal, "basal serve's journal reply is not what this basal expects");
    bool new_lines = false;
    for (const auto& a : j["activations"]) {
      const int64_t id = a.value("activation_id", int64_t{0});
      if (a["outcome"].is_null() || printed.count(id)) continue;
      printed.insert(id);
      new_lines = true;
      if (o.json) {
        WriteStdout(JsonForTerminal(a) + "\n");
      } else {
        // A failed activation says why on its line: the error's message (the script's text, escaped).
        std::string why;
        if (a.contains("error") && a["error"].is_object()) {
          const auto& e = a["error"];
          why = e.contains("message") && e["message"].is_string() ? e["message"].get<std::string>() : e.dump();
        } else if (a.contains("error") && a["error"].is_string()) {
          why = a["error"].get<std::string>();
        }
        WriteStdout("activation " + std::to_string(id) + "  " + EscapeForTerminal(a.value("flow", "")) + "  " +
                    EscapeForTerminal(a["outcome"].is_string() ? a["outcome"].get<std::string>() : "") + "  ended " +
                    EscapeForTerminal(a.value("ended", "")) + (why.empty() ? "" : "  error: " + EscapeForTerminal(why)) +
                    "\n");
      }
      FlushStdout();
    }
    after = std::max(after, j.value("next", after));
    printed.erase(printed.begin(), printed.upper_bound(after));
    // An activation that still runs holds the cursor, so the daemon answers at once with it: look
    // again in a second rather than at once.
    if (!new_lines && !j["activations"].empty()) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

}  // namespace

int JournalCommand(const JournalOptions& o) {
  if (o.follow) return FollowJournal(o);
  std::string path = o.db_path;
  if (path.empty()) {
    auto db = DefaultJournalPath();
    if (!db) return Fail(kKindIo, db.error().message);
    path = *db;
  }
  // Reading never creates, initializes or migrates a journal (OpenReader only reads).
  auto journal = OpenReader(path);
  if (!journal) {
    const Error& e = journal.error();
    if (e.code == ErrorCode::kNotFound) return Fail(kKindIo, "no journal at " + RedactLocator(path) + " (run a flow first, or pass --db FILE)");
    return Fail(KindForOpenError(e), e.message);
  }
  const size_t limit = o.limit == 0 ? static_cast<size_t>(std::numeric_limits<int64_t>::max()) : o.limit;
  auto rows = o.run ? (*journal)->RunActivations(*o.run) : (*journal)->Activations(o.activation, limit);
  if (!rows) return Fail(kKindJournal, rows.error().message);
  if (o.run && rows->empty()) return Fail(kKindUsage, "no run " + std::to_string(*o.run) + " with an activation in " + RedactLocator(path));
  if (o.source) {  // the source that ran, exactly as kept (escaped only where a terminal would act on it)
    const ActivationRow& a = rows->front();
    auto text = (*journal)->Text(a.source_hash);
    if (!text) return Fail(kKindJournal, text.error().message);
    if (!*text)
      return Fail(kKindJournal, "activation " + std::to_string(a.id) + ": its source (" + a.source_hash +
                                    ") is not kept in this journal (activations journaled before schema 4 kept only "
                                    "its hash)");
    // To a file or a pipe: the exact bytes (so `... --source | sha256sum` gives back its hash). To
    // a terminal: each line escaped (EscapeForTerminal), so a script's source cannot drive it.
    const std::string& kept = **text;
    if (::isatty(STDOUT_FILENO) == 0) {
      for (size_t at = 0; at < kept.size(); at += kPrintChunkBytes) Print(kept.substr(at, kPrintChunkBytes));
      return kExitOk;
    }
    std::string out;
    for (size_t at = 0; at < kept.size();) {
      size_t end = kept.find('\n', at);
      if (end == std::string::npos) end = kept.size();
      out += EscapeForTerminal(std::string_view(kept).substr(at, end - at)) + "\n";
      at = end + 1;
      if (out.size() >= kPrintChunkBytes) {
        Print(out);
        out.clear();
      }
    }
    Print(out);
    return kExitOk;
  }
  bool first = true;
  for (const ActivationRow& a : *rows) {
    std::optional<ApprovalRow> approval;
    if (a.approval_id != 0) {
      auto found = (*journal)->Approval(a.approval_id);
      if (found) approval = *found;
    }
    auto calls = (*journal)->Calls(a.id);
    if (!calls) return Fail(kKindJournal, calls.error().message);
    if (o.json) {
      PrintJsonLine(a, *calls, approval);
    } else {
      std::optional<RunRow> run;
      if (a.run_id != 0)
        if (auto r = (*journal)->GetRun(a.run_id); r && *r) run = **r;
      if (!first) Print("\n");
      PrintReadable(a, *calls, approval, run);
    }
    first = false;
  }
  if (rows->empty() && !o.json) Print("the journal " + path + " holds no activations\n");
  return kExitOk;  // main's FinishOutput flushes stdout and reports a failed write

}

}  // namespace basal::cli
