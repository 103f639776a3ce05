// What an operator looks at every morning (docs/cli.md): `basal runs` (the run history, read from
// the store read-only, as `basal journal` reads it), `basal tail` (a running daemon's live tail)
// and `basal schedule list|run` (its schedules). Everything a flow or a worker supplied is printed
// through EscapeForTerminal (text) or JsonForTerminal (JSON).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/cli_support.h"
#include "cli/commands.h"
#include "cli/daemon_client.h"
#include "parent/store/sqlite/sqlite_store.h"
#include "serve/run_filter.h"

namespace basal::cli {
namespace {

using Json = nlohmann::json;

std::string Text(const Json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "";
  return it->is_string() ? it->get<std::string>() : it->dump(-1, ' ', false, Json::error_handler_t::replace);
}

// An error object's message ("TypeError: boom"), else its JSON.
std::string ErrorMessage(const Json& error) {
  if (error.is_object() && error.contains("message") && error["message"].is_string()) return error["message"].get<std::string>();
  if (error.is_null()) return "";
  return error.is_string() ? error.get<std::string>() : error.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string Cut(std::string text, size_t max) {
  if (text.size() <= max) return text;
  size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return text.substr(0, cut) + "...";
}

std::string Ms(const Json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", it->get<double>());
  return buf;
}

// Columns padded to their widest cell (cells are escaped already, so their bytes are what shows;
// a multi-byte letter may make a column a little wider than it looks).
std::string Table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows)
    for (size_t i = 0; i < row.size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], row[i].size());
    }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(width[i] - row[i].size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

// `text` percent-encoded but for RFC 3986's unreserved characters: safe in a path segment and a query.
std::string QueryEscaped(const std::string& text) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
        c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

// The usage error of a filter ("bad_since": "since: ...") as the flag says it ("--since ...").
int FilterRefused(const serve::RunFilterParse& p) { return Fail(kKindUsage, "--" + p.message); }

}  // namespace

int RunsCommand(const RunsOptions& o) {
  std::string path = o.db_path;
  if (path.empty()) {
    auto db = DefaultJournalPath();
    if (!db) return Fail(kKindIo, db.error().message);
    path = *db;
  }
  serve::RunFilterText text;
  if (!o.flow.empty()) text.flow = o.flow;
  if (!o.outcome.empty()) text.outcome = o.outcome;
  if (!o.state.empty()) text.state = o.state;
  if (!o.trigger.empty()) text.trigger = o.trigger;
  if (!o.since.empty()) text.since = o.since;
  if (o.before > 0) text.cursor = std::to_string(o.before);
  text.limit = std::to_string(o.limit);
  serve::RunFilterParse parsed = serve::ParseRunFilter(text, NowUs(), {.default_limit = 20, .max_limit = 100'000});
  if (!parsed.ok()) return FilterRefused(parsed);
  // Reading never creates, initializes or migrates a journal.
  auto reader = OpenSqliteReader(path);
  if (!reader) {
    if (reader.error().code == ErrorCode::kNotFound)
      return Fail(kKindIo, "no journal at " + path + " (run a flow first, or pass --db FILE or set BASAL_DB)");
    return Fail(KindForOpenError(reader.error()), reader.error().message);
  }
  JournalReader& r = **reader;
  RunQuery query = parsed.query;
  if (!query.flow.empty()) {
    auto versions = r.Versions(ApprovalKind::kFlow, query.flow);
    if (!versions) return Fail(kKindJournal, versions.error().message);
    if (versions->empty()) {
      auto any = r.ListRuns({.flow = query.flow, .limit = 1});
      if (!any) return Fail(kKindJournal, any.error().message);
      if (any->empty()) return Fail(kKindUsage, "--flow " + query.flow + ": no flow of that name in " + path + " (basal flow list)");
    }
  }
  auto rows = r.ListRuns(query);
  if (!rows) return Fail(kKindJournal, rows.error().message);
  if (o.json) {
    for (const RunRow& run : *rows) WriteStdout(JsonForTerminal(serve::RunJson(run, r)) + "\n");
    return kExitOk;
  }
  if (rows->empty()) {
    WriteStdout("no runs in " + EscapeForTerminal(path) + (query.flow.empty() && query.outcome.empty() && !query.state &&
                                                                   query.trigger.empty() && query.since_unix_us == 0
                                                               ? std::string()
                                                               : std::string(" match")) +
                "\n");
    return kExitOk;
  }
  std::vector<std::vector<std::string>> table = {{"RUN", "FLOW", "TRIGGER", "STATE", "OUTCOME", "CREATED", "MS", "ERROR"}};
  for (const RunRow& run : *rows) {
    const Json j = serve::RunJson(run, r);
    table.push_back({std::to_string(run.id), EscapeForTerminal(run.flow), EscapeForTerminal(run.trigger),
                     RunStateName(run.state), EscapeForTerminal(Text(j, "outcome")), Text(j, "created"),
                     Ms(j, "duration_ms"), EscapeForTerminal(Cut(ErrorMessage(j.value("error", Json())), 80))});
  }
  WriteStdout(Table(table));
  if (rows->size() == query.limit)
    WriteStdout("(the newest " + std::to_string(query.limit) + "; older ones: --before " + std::to_string(rows->back().id) + ")\n");
  return kExitOk;
}

namespace {

// One server-sent event as a line for people (`basal tail`).
std::string TailLine(const std::string& event, const Json& d) {
  char clock[16];
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  std::strftime(clock, sizeof clock, "%H:%M:%S", &tm);
  std::string who = EscapeForTerminal(Text(d, "flow"));
  if (d.contains("run_id") && d["run_id"].is_number_integer())
    who += " run " + std::to_string(d["run_id"].get<int64_t>());
  else if (d.contains("activation_id") && d["activation_id"].is_number_integer())
    who += " activation " + std::to_string(d["activation_id"].get<int64_t>());
  std::string line = std::string(clock) + "Z " + who + " ";
  if (event == "activation_start") {
    line += "started (activation " + Text(d, "activation_id") + ")";
  } else if (event == "activation_end") {
    line += "ended " + EscapeForTerminal(Text(d, "outcome")) + " in " + Ms(d, "ms") + " ms";
    const std::string why = ErrorMessage(d.value("error", Json()));
    if (!why.empty()) line += ": " + EscapeForTerminal(why);
  } else if (event == "log") {
    line += EscapeForTerminal(Text(d, "level")) + ": " + EscapeForTerminal(Text(d, "message"));
  } else if (event == "call") {
    line += "call #" + Text(d, "call_id") + " " + EscapeForTerminal(Text(d, "name")) + " " +
            EscapeForTerminal(Text(d, "decision")) + " (" + EscapeForTerminal(Text(d, "rule")) + ") " +
            EscapeForTerminal(Text(d, "state"));
  } else if (event == "dropped") {
    line = std::string(clock) + "Z basal: " + Text(d, "count") +
           " events were dropped: this tail did not read fast enough (limits.tail_buffer_bytes)";
  } else {
    line += EscapeForTerminal(event) + " " + JsonForTerminal(d);
  }
  return line + "\n";
}

}  // namespace

int TailCommand(const TailOptions& o) {
  auto address = ResolveDaemonAddress(o.socket, o.url, o.token_file);
  if (!address) return Fail(kKindUsage, address.error().message);
  std::string path = "/v1/tail";
  if (!o.flow.empty()) {
    serve::RunFilterParse p = serve::ParseRunFilter({.flow = o.flow}, 0);
    if (!p.ok()) return FilterRefused(p);
    path += "?flow=" + QueryEscaped(o.flow);
  }
  std::string pending;
  std::optional<std::string> closed_why;  // the daemon's `closed` event: why it ended this stream
  auto streamed = DaemonStream(*address, path, [&](std::string_view bytes) {
    pending.append(bytes);
    size_t end;
    while ((end = pending.find("\n\n")) != std::string::npos) {
      const std::string block = pending.substr(0, end);
      pending.erase(0, end + 2);
      std::string event, data;
      size_t at = 0;
      while (at <= block.size()) {
        size_t nl = block.find('\n', at);
        if (nl == std::string::npos) nl = block.size();
        const std::string line = block.substr(at, nl - at);
        if (line.rfind("event: ", 0) == 0) event = line.substr(7);
        if (line.rfind("data: ", 0) == 0) data += line.substr(6);
        at = nl + 1;
      }
      if (event.empty()) continue;  // a comment: the stream's opening line, a keepalive
      Json d = Json::parse(data, nullptr, false);
      if (d.is_discarded()) d = Json::object();
      if (event == "closed") {
        closed_why = Text(d, "reason");
        continue;
      }
      if (o.json) {
        Json line{{"event", event}, {"data", d}};
        WriteStdout(JsonForTerminal(line) + "\n");
      } else {
        WriteStdout(TailLine(event, d));
      }
      FlushStdout();
    }
    return pending.size() < (16u << 20);  // an event is far smaller: a stream that is not one ends here
  });
  if (!streamed) {
    const std::string& m = streamed.error().message;
    return Fail(m.find(" 400 ") != std::string::npos ? kKindUsage : kKindIo, m);
  }
  if (closed_why)
    return Fail(kKindIo, "basal serve at " + EscapeForTerminal(address->where()) +
                             " ended the stream: " + EscapeForTerminal(*closed_why));
  WriteStderr("basal: tail: basal serve at " + EscapeForTerminal(address->where()) +
              " ended the stream (it is stopping)\n");
  return kExitOk;
}

int ScheduleCommand(const ScheduleOptions& o) {
  auto address = ResolveDaemonAddress(o.socket, o.url, o.token_file);
  if (!address) return Fail(kKindUsage, address.error().message);
  if (o.action == "list") {
    auto reply = DaemonGet(*address, "/v1/schedules", std::chrono::seconds(30));
    if (!reply) return Fail(kKindIo, reply.error().message);
    if (reply->status != 200) return Fail(kKindIo, DaemonErrorText(*reply));
    Json j = Json::parse(reply->body, nullptr, false);
    if (!j.is_object() || !j.contains("schedules") || !j["schedules"].is_array())
      return Fail(kKindIo, "basal serve's answer is not a list of schedules");
    if (o.json) {
      for (const Json& s : j["schedules"]) WriteStdout(JsonForTerminal(s) + "\n");
      return kExitOk;
    }
    if (j["schedules"].empty()) {
      WriteStdout("no schedules (basal serve's config has none: docs/serve-config.md)\n");
      return kExitOk;
    }
    std::vector<std::vector<std::string>> table = {
        {"NAME", "FLOW", "CRON", "TIMEZONE", "OVERLAP", "NEXT FIRE", "LAST FIRE", "LAST RUN"}};
    for (const Json& s : j["schedules"]) {
      auto or_dash = [](std::string t) { return t.empty() ? std::string("-") : t; };
      table.push_back({EscapeForTerminal(Text(s, "name")), EscapeForTerminal(Text(s, "flow")),
                       EscapeForTerminal(Text(s, "cron")), EscapeForTerminal(Text(s, "timezone")),
                       EscapeForTerminal(Text(s, "overlap")), or_dash(EscapeForTerminal(Text(s, "next_fire"))),
                       or_dash(EscapeForTerminal(Text(s, "last_fire"))), or_dash(Text(s, "last_run_id"))});
    }
    WriteStdout(Table(table));
    return kExitOk;
  }
  // run NAME
  std::string path = "/v1/schedules/" + QueryEscaped(o.name) + "/run";
  if (!o.wait.empty()) path += "?wait=" + QueryEscaped(o.wait);
  auto reply = DaemonPost(*address, path, "", std::chrono::seconds(3700));
  if (!reply) return Fail(kKindIo, reply.error().message);
  if (reply->status != 200 && reply->status != 202) {
    const bool usage = reply->status == 400 || reply->status == 404;
    return Fail(usage ? kKindUsage : kKindIo, DaemonErrorText(*reply));
  }
  Json run = Json::parse(reply->body, nullptr, false);
  if (!run.is_object()) return Fail(kKindIo, "basal serve's answer is not a run");
  if (o.json) {
    WriteStdout(JsonForTerminal(run) + "\n");
  } else {
    std::string line = "run " + Text(run, "id") + " of schedule " + EscapeForTerminal(o.name) + " (flow " +
                       EscapeForTerminal(Text(run, "flow")) + "): " + EscapeForTerminal(Text(run, "state"));
    if (run.contains("outcome")) line += ", " + EscapeForTerminal(Text(run, "outcome"));
    const std::string why = ErrorMessage(run.value("error", Json()));
    if (!why.empty()) line += ": " + EscapeForTerminal(why);
    WriteStdout(line + "\n");
  }
  if (run.value("state", "") == "ended" && run.value("outcome", "") != "ok") {
    auto outcome = ParseOutcome(run.value("outcome", ""));
    return outcome ? ExitCodeFor(*outcome) : kExitFlowFailed;
  }
  return kExitOk;
}

}  // namespace basal::cli
