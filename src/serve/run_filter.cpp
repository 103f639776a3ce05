// Run listing filters (run_filter.h).
#include "serve/run_filter.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <string_view>
#include <utility>

#include "basal/outcome.h"
#include "parent/store/owner.h"
#include "protocol/messages.h"
#include "serve/config.h"

namespace basal::serve {

namespace {

std::string Joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

bool Contains(const std::vector<std::string>& names, std::string_view name) {
  for (const std::string& n : names)
    if (n == name) return true;
  return false;
}

// What a flow's name may be in a filter: printable ASCII without spaces, as approvals allow.
bool PlainName(std::string_view name, size_t max) {
  if (name.empty() || name.size() > max) return false;
  for (char c : name)
    if (c <= ' ' || c == 0x7f || static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

std::optional<int> Digits(std::string_view text, size_t at, size_t n) {
  if (at + n > text.size()) return std::nullopt;
  int v = 0;
  for (size_t i = at; i < at + n; ++i) {
    if (text[i] < '0' || text[i] > '9') return std::nullopt;
    v = v * 10 + (text[i] - '0');
  }
  return v;
}

// RFC 3339 or a bare date, to microseconds; nullopt when it is neither.
std::optional<int64_t> ParseTimeText(std::string_view t) {
  auto year = Digits(t, 0, 4), month = Digits(t, 5, 2), day = Digits(t, 8, 2);
  if (!year || !month || !day || t.size() < 10 || t[4] != '-' || t[7] != '-') return std::nullopt;
  if (*month < 1 || *month > 12 || *day < 1 || *day > 31) return std::nullopt;
  std::tm tm{};
  tm.tm_year = *year - 1900;
  tm.tm_mon = *month - 1;
  tm.tm_mday = *day;
  int64_t micros = 0;
  int64_t offset_s = 0;
  if (t.size() > 10) {
    if (t[10] != 'T' && t[10] != 't' && t[10] != ' ') return std::nullopt;
    auto hour = Digits(t, 11, 2), minute = Digits(t, 14, 2), second = Digits(t, 17, 2);
    if (!hour || !minute || !second || t.size() < 20 || t[13] != ':' || t[16] != ':') return std::nullopt;
    if (*hour > 23 || *minute > 59 || *second > 60) return std::nullopt;
    tm.tm_hour = *hour;
    tm.tm_min = *minute;
    tm.tm_sec = *second;
    size_t i = 19;
    if (i < t.size() && t[i] == '.') {
      int64_t scale = 100'000;
      ++i;
      const size_t first = i;
      for (; i < t.size() && t[i] >= '0' && t[i] <= '9'; ++i) {
        micros += (t[i] - '0') * scale;
        scale /= 10;
      }
      if (i == first || i - first > 9) return std::nullopt;
    }
    if (i >= t.size()) return std::nullopt;  // RFC 3339 requires the offset
    if (t[i] == 'Z' || t[i] == 'z') {
      if (i + 1 != t.size()) return std::nullopt;
    } else if (t[i] == '+' || t[i] == '-') {
      auto oh = Digits(t, i + 1, 2), om = Digits(t, i + 4, 2);
      if (!oh || !om || i + 6 != t.size() || t[i + 3] != ':' || *oh > 23 || *om > 59) return std::nullopt;
      offset_s = (*oh * 3600 + *om * 60) * (t[i] == '+' ? 1 : -1);
    } else {
      return std::nullopt;
    }
  }
  const time_t seconds = timegm(&tm);
  if (seconds == static_cast<time_t>(-1)) return std::nullopt;
  return (static_cast<int64_t>(seconds) - offset_s) * 1'000'000 + micros;
}

RunFilterParse Refuse(std::string code, std::string message) {
  RunFilterParse p;
  p.code = std::move(code);
  p.message = std::move(message);
  return p;
}

}  // namespace

const std::vector<std::string>& RunOutcomeNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    // An activation that parks leaves its run going (sleeping, waiting): no run ends "parked".
    for (int i = 0; i <= static_cast<int>(kLastOutcome); ++i)
      if (static_cast<Outcome>(i) != Outcome::kParked) out.push_back(OutcomeName(static_cast<Outcome>(i)));
    for (const char* n : {"missed", "skipped", "resume_exhausted"}) out.push_back(n);
    return out;
  }();
  return names;
}

const std::vector<std::string>& RunTriggerKinds() {
  static const std::vector<std::string> kinds = {"api", "webhook", "schedule", "mcp", "cli", "embedder"};
  return kinds;
}

Result<int64_t> ParseSinceText(std::string_view text, int64_t now_unix_us) {
  if (auto t = ParseTimeText(text)) return *t;
  if (!text.empty() && text[0] >= '0' && text[0] <= '9' && (text.size() < 5 || text[4] != '-')) {
    auto d = ParseDuration(text);
    if (d) return now_unix_us - d->count() * 1000;
  }
  return MakeError(ErrorCode::kInvalidArgument,
                   "\"" + std::string(text.substr(0, 64)) +
                       "\" is not a time: write an RFC 3339 time (2026-12-04T15:07:02Z), a date (2026-12-04, "
                       "midnight UTC) or a duration back from now (15m, 2h, 7d)");
}

bool ReadPlainRunBody(std::string_view body, nlohmann::json* input) {
  size_t p = 0;
  const auto skip_space = [&] {
    while (p < body.size() && (body[p] == ' ' || body[p] == '\t' || body[p] == '\n' || body[p] == '\r')) ++p;
  };
  const auto take = [&](std::string_view text) {
    if (body.substr(p, text.size()) != text) return false;
    p += text.size();
    return true;
  };
  skip_space();
  if (!take("{")) return false;
  skip_space();
  if (!take("\"input\"")) return false;
  skip_space();
  if (!take(":")) return false;
  skip_space();
  const size_t start = p;
  while (p < body.size() && body[p] != '}' && body[p] != ' ' && body[p] != '\t' && body[p] != '\n' &&
         body[p] != '\r')
    ++p;
  const std::string_view value = body.substr(start, p - start);
  skip_space();
  if (!take("}")) return false;
  skip_space();
  if (p != body.size()) return false;
  return protocol::ParsePlainScalar(value, *input);
}

Result<std::chrono::milliseconds> ParseWaitText(std::string_view text) {
  if (!text.empty() && text.find_first_not_of("0123456789") == std::string_view::npos)
    return ParseDuration(std::string(text) + "s");
  return ParseDuration(text);
}

RunFilterParse ParseRunFilter(const RunFilterText& t, int64_t now_unix_us, RunFilterBounds bounds) {
  RunFilterParse p;
  RunQuery& q = p.query;
  q.limit = bounds.default_limit;
  if (t.flow) {
    if (!PlainName(*t.flow, 256)) return Refuse("bad_flow", "flow: a flow's name, as `basal flow list` shows it");
    q.flow = *t.flow;
  }
  if (t.outcome) {
    if (!Contains(RunOutcomeNames(), *t.outcome))
      return Refuse("bad_outcome", "outcome: \"" + t.outcome->substr(0, 64) + "\" is no outcome; use one of " +
                                       Joined(RunOutcomeNames()));
    q.outcome = *t.outcome;
  }
  if (t.state) {
    auto s = ParseRunState(*t.state);
    if (!s)
      return Refuse("bad_state", "state: \"" + t.state->substr(0, 64) +
                                     "\" is no run state; use one of queued, running, ended, interrupted, "
                                     "needs_reconciliation, sleeping, waiting, retrying");
    q.state = *s;
  }
  if (t.trigger) {
    const std::string& tr = *t.trigger;
    const size_t colon = tr.find(':');
    const std::string kind = tr.substr(0, colon);
    if (!Contains(RunTriggerKinds(), kind) || (colon != std::string::npos && !PlainName(tr.substr(colon + 1), 128)))
      return Refuse("bad_trigger", "trigger: \"" + tr.substr(0, 64) + "\" is no trigger; use a kind (" +
                                       Joined(RunTriggerKinds()) + ") or one trigger as KIND:NAME (webhook:github)");
    q.trigger = tr;
  }
  if (t.since) {
    auto since = ParseSinceText(*t.since, now_unix_us);
    if (!since) return Refuse("bad_since", "since: " + since.error().message);
    q.since_unix_us = std::max<int64_t>(*since, 1);
  }
  if (t.cursor) {
    // Opaque to clients: the `next` of the previous page, which is a run id today.
    int64_t v = 0;
    const std::string& c = *t.cursor;
    bool ok = !c.empty() && c.size() <= 18;
    for (char ch : c) {
      ok = ok && ch >= '0' && ch <= '9';
      if (ok) v = v * 10 + (ch - '0');
    }
    if (!ok || v < 1) return Refuse("bad_cursor", "cursor: pass the `next` of the previous page as it was given");
    q.before_id = v;
  }
  if (t.limit) {
    const std::string& l = *t.limit;
    size_t v = 0;
    bool ok = !l.empty() && l.size() <= 6;
    for (char ch : l) {
      ok = ok && ch >= '0' && ch <= '9';
      if (ok) v = v * 10 + static_cast<size_t>(ch - '0');
    }
    if (!ok || v < 1 || v > bounds.max_limit)
      return Refuse("bad_limit", "limit: 1-" + std::to_string(bounds.max_limit) + " runs a page");
    q.limit = v;
  }
  return p;
}

namespace {

nlohmann::json ParseOrText(const std::string& text) {
  if (text.empty()) return nullptr;
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  return j.is_discarded() ? nlohmann::json(text) : j;
}

// The activation whose end a run shows (RunJson and RunJsonText alike), or null: `ended` when it is
// the run's activation, else read (kept in `read`). A parked run has not ended: its last
// activation's end (parked, or a failed attempt) is in its detail, not shown as the run's outcome.
// Nor is the end of the activation before a wake or a resume while the run waits to go on (queued
// again, or running its next activation before that one is recorded). Only an ended activation is
// shown, and a parked one only once the run has ended.
const ActivationRow* ShownActivation(const RunRow& run, JournalReader& reader, const ActivationRow* ended,
                                     std::optional<Result<std::vector<ActivationRow>>>& read) {
  if (run.activation_id <= 0 || RunParked(run.state) || run.state == RunState::kQueued) return nullptr;
  const ActivationRow* found = ended && ended->id == run.activation_id ? ended : nullptr;
  if (!found) {
    read = reader.Activations(run.activation_id, 1);
    if (*read && !(*read)->empty()) found = &(*read)->front();
  }
  if (!found || !found->end_unix_us || (run.state != RunState::kEnded && found->outcome == "parked")) return nullptr;
  return found;
}

}  // namespace

nlohmann::json RunJson(const RunRow& run, JournalReader& reader, const ActivationRow* ended) {
  nlohmann::json j{{"id", run.id},
         {"url", "/v1/runs/" + std::to_string(run.id)},
         {"flow", run.flow},
         {"trigger", run.trigger},
         {"state", RunStateName(run.state)},
         {"created", UtcText(run.created_unix_us)}};
  if (!run.idempotency_key.empty()) j["idempotency_key"] = run.idempotency_key;
  j["input"] = ParseOrText(run.input_json);
  if (run.started_unix_us) j["started"] = UtcText(*run.started_unix_us);
  if (run.ended_unix_us) j["ended"] = UtcText(*run.ended_unix_us);
  if (run.activation_id > 0) j["activation_id"] = run.activation_id;
  if (run.state == RunState::kEnded) j["outcome"] = run.outcome;
  if (!run.error_json.empty()) j["error"] = ParseOrText(run.error_json);
  if (run.durable) {
    j["durable"] = true;
    j["resumes"] = run.resumes;
    j["attempt"] = run.attempt;
  }
  // A parked run (docs/durable.md): when it wakes, and what it waits for.
  if (RunParked(run.state) && run.wake_unix_us) j["wakes"] = UtcText(*run.wake_unix_us);
  if (run.state == RunState::kWaiting) {
    j["waiting_for"] = nlohmann::json{{"event", run.waiting_for}};
    if (!run.waiting_key.empty()) j["waiting_for"]["key"] = run.waiting_key;
  }
  // Why it waits (interrupted, needs_reconciliation: the calls in doubt) or what it was scheduled for.
  if (!run.state_detail.empty()) j["detail"] = ParseOrText(run.state_detail);
  std::optional<Result<std::vector<ActivationRow>>> read;
  if (const ActivationRow* a = ShownActivation(run, reader, ended, read)) {
    // The run's own end wins where it has one (a durable run that ran out of resumes ended after
    // its last activation was abandoned).
    j["outcome"] = run.state == RunState::kEnded ? run.outcome : a->outcome;
    if (!a->result_json.empty() && a->outcome == "ok") j["result"] = ParseOrText(a->result_json);
    if (!a->error_json.empty() && run.error_json.empty()) j["error"] = ParseOrText(a->error_json);
    j["duration_ms"] = static_cast<double>(*a->end_unix_us - a->start_unix_us) / 1000.0;
    j["cpu_ms"] = static_cast<double>(a->cpu_us) / 1000.0;
  }
  return j;
}

namespace {

// ParseOrText's value as dump writes it, appended to `out`. A plain scalar (what most inputs and
// results are: a count, a flag, null) without the parser.
void AppendParsedOrText(std::string& out, const std::string& text) {
  if (nlohmann::json plain; protocol::ParsePlainScalar(text, plain)) {
    out += protocol::DumpJson(plain);
    return;
  }
  out += ParseOrText(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// A double as dump writes it (its serializer's own routine, without building a serializer).
void AppendDouble(std::string& out, double v) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  char buf[64];
  const char* end = nlohmann::detail::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, static_cast<size_t>(end - buf));
}

void AppendUtc(std::string& out, int64_t unix_us) { protocol::AppendJsonString(out, UtcText(unix_us)); }

// An object's text, member by member: the caller gives the keys in nlohmann's order (std::map's:
// by key, bytewise) and appends each value's JSON text to what Key returns.
class ObjectText {
 public:
  explicit ObjectText(size_t reserve) {
    out_.reserve(reserve);
    out_ += '{';
  }
  std::string& Key(std::string_view key) {
    if (out_.size() > 1) out_ += ',';
    out_ += '"';
    out_ += key;
    out_ += "\":";
    return out_;
  }
  std::string Done() {
    out_ += '}';
    return std::move(out_);
  }

 private:
  std::string out_;
};

}  // namespace

std::string RunJsonText(const RunRow& run, JournalReader& reader, const ActivationRow* ended) {
  // The same members, from the same reads, as RunJson (keep the two in step: RunJsonTextTest
  // compares them run by run), written in the order its dump writes them (by key).
  std::optional<Result<std::vector<ActivationRow>>> read;
  const ActivationRow* a = ShownActivation(run, reader, ended, read);
  const bool run_ended = run.state == RunState::kEnded;
  // The run's own end wins where it has one (RunJson).
  const std::string* outcome = run_ended ? &run.outcome : a ? &a->outcome : nullptr;
  const std::string* error = !run.error_json.empty()            ? &run.error_json
                             : a && !a->error_json.empty()      ? &a->error_json
                                                                : nullptr;
  ObjectText j(256 + run.input_json.size() + run.error_json.size() + run.state_detail.size() +
               (a ? a->result_json.size() + a->error_json.size() : 0));
  if (run.activation_id > 0) j.Key("activation_id") += std::to_string(run.activation_id);
  if (run.durable) j.Key("attempt") += std::to_string(run.attempt);
  if (a) AppendDouble(j.Key("cpu_ms"), static_cast<double>(a->cpu_us) / 1000.0);
  AppendUtc(j.Key("created"), run.created_unix_us);
  if (!run.state_detail.empty()) AppendParsedOrText(j.Key("detail"), run.state_detail);
  if (run.durable) j.Key("durable") += "true";
  if (a) AppendDouble(j.Key("duration_ms"), static_cast<double>(*a->end_unix_us - a->start_unix_us) / 1000.0);
  if (run.ended_unix_us) AppendUtc(j.Key("ended"), *run.ended_unix_us);
  if (error) AppendParsedOrText(j.Key("error"), *error);
  protocol::AppendJsonString(j.Key("flow"), run.flow);
  j.Key("id") += std::to_string(run.id);
  if (!run.idempotency_key.empty()) protocol::AppendJsonString(j.Key("idempotency_key"), run.idempotency_key);
  AppendParsedOrText(j.Key("input"), run.input_json);
  if (outcome) protocol::AppendJsonString(j.Key("outcome"), *outcome);
  if (a && !a->result_json.empty() && a->outcome == "ok") AppendParsedOrText(j.Key("result"), a->result_json);
  if (run.durable) j.Key("resumes") += std::to_string(run.resumes);
  if (run.started_unix_us) AppendUtc(j.Key("started"), *run.started_unix_us);
  protocol::AppendJsonString(j.Key("state"), RunStateName(run.state));
  protocol::AppendJsonString(j.Key("trigger"), run.trigger);
  j.Key("url") += "\"/v1/runs/" + std::to_string(run.id) + "\"";
  if (run.state == RunState::kWaiting) {
    ObjectText waiting(32 + run.waiting_for.size() + run.waiting_key.size());
    protocol::AppendJsonString(waiting.Key("event"), run.waiting_for);
    if (!run.waiting_key.empty()) protocol::AppendJsonString(waiting.Key("key"), run.waiting_key);
    j.Key("waiting_for") += waiting.Done();
  }
  if (RunParked(run.state) && run.wake_unix_us) AppendUtc(j.Key("wakes"), *run.wake_unix_us);
  return j.Done();
}

std::optional<std::string> NextRunCursor(const std::vector<RunRow>& rows, bool more) {
  if (!more || rows.empty()) return std::nullopt;
  return std::to_string(rows.back().id);
}

}  // namespace basal::serve
