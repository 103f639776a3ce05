// `basal kv get|list|put|rm|history --namespace N` (docs/cli.md): the operator reads and writes the
// kv store flows use. A write is refused when it would take the namespace past a limit that an
// approved flow (or codemode policy) writing that namespace lives under, checked and written in one
// transaction (KvStore::PutWithin, under the store's kv write lock), and journaled with who did it
// in that same transaction (KvStore::RecordOperatorWrite: the kv_audit table, docs/journal.md).
// Everything a flow stored (keys, values) is printed through EscapeForTerminal / JsonForTerminal.
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "basal/manifest.h"
#include "cli/approvals.h"
#include "cli/cli_support.h"
#include "cli/commands.h"
#include "parent/host_calls/http_fetch.h"
#include "parent/host_calls/kv.h"
#include "parent/host_calls/log.h"
#include "parent/host_calls/mcp.h"
#include "parent/store/open.h"

namespace basal::cli {
namespace {

using Json = nlohmann::json;

std::string Quoted(const std::string& text) { return JsonForTerminal(Json(text)); }

// "2026-12-05T06:30:00Z"
std::string Utc(int64_t unix_us) {
  const std::time_t t = static_cast<std::time_t>(unix_us / 1'000'000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// One of the limits a write must stay within, and who set it.
struct Limit {
  uint64_t value = 0;
  std::string who;   // `flow "sync" version 3`, or `kv.put's defaults`
  std::string path;  // "grants.kv.put.quota.bytes"
};

struct OperatorLimits {
  Limit max_value, quota_bytes, quota_keys;
  bool from_grants = false;  // false: no approved version writes the namespace (kv.put's defaults)
  KvLimits kv() const { return {max_value.value, quota_bytes.value, quota_keys.value}; }
};

// The host-call specs that parse a stored manifest (their handlers never run here).
Result<void> RegisterSpecs(HostCallRegistry& registry) {
  if (auto r = RegisterLogHostCall(registry, [](const HostCallContext&, std::string_view, std::string_view) {}); !r)
    return r;
  if (auto r = RegisterKvHostCallSpecs(registry); !r) return r;
  if (auto r = RegisterHttpFetchSpec(registry); !r) return r;
  return RegisterMcpHostCalls(registry);
}

uint64_t LimitIn(const Json& grant, const char* key, const char* sub, uint64_t fallback) {
  auto it = grant.find(key);
  if (it == grant.end()) return fallback;
  if (sub != nullptr) {
    if (!it->is_object()) return fallback;
    auto s = it->find(sub);
    return s != it->end() && s->is_number_unsigned() ? s->get<uint64_t>() : fallback;
  }
  return it->is_number_unsigned() ? it->get<uint64_t>() : fallback;
}

// The smallest of each limit over every unrevoked approved version (flows and codemode policies:
// an older version still runs a durable run bound to it) whose kv.put, kv.cas or kv.incr grant
// names `ns`. None: kv.put's defaults, so that a flow approved later with a default grant does not
// find the namespace already past them.
Result<OperatorLimits> LimitsFor(JournalReader& reader, const std::string& ns) {
  OperatorLimits out;
  const std::string defaults = "kv.put's defaults (no approved flow writes namespace " + Quoted(ns) + ")";
  out.max_value = {kKvDefaultMaxValueBytes, defaults, "grants.kv.put.max_value_bytes"};
  out.quota_bytes = {kKvDefaultQuotaBytes, defaults, "grants.kv.put.quota.bytes"};
  out.quota_keys = {kKvDefaultQuotaKeys, defaults, "grants.kv.put.quota.keys"};
  HostCallRegistry registry;
  if (auto r = RegisterSpecs(registry); !r) return r.error();
  for (ApprovalKind kind : {ApprovalKind::kFlow, ApprovalKind::kPolicy}) {
    auto names = reader.Names(kind);
    if (!names) return names.error();
    for (const ApprovalRow& newest : *names) {
      auto versions = reader.Versions(kind, newest.name);
      if (!versions) return versions.error();
      for (const ApprovalRow& v : *versions) {
        if (v.revoked_unix_us) continue;
        auto text = reader.Text(v.manifest_text_hash);
        if (!text) return text.error();
        if (!*text) continue;  // not kept: nothing can run it
        // A manifest this basal does not parse cannot run under it either.
        auto manifest = Manifest::Parse(**text, registry, kind == ApprovalKind::kFlow ? Profile::kFlow : Profile::kCodemode);
        if (!manifest) continue;
        const std::string who = std::string(kind == ApprovalKind::kFlow ? "flow " : "policy ") + Quoted(v.name) +
                                " version " + std::to_string(v.version);
        for (const char* call : {"kv.put", "kv.cas", "kv.incr"}) {
          auto grant = manifest->grants().find(call);
          if (grant == manifest->grants().end()) continue;
          bool writes = false;
          if (auto list = grant->second.find("namespaces"); list != grant->second.end() && list->is_array())
            for (const Json& n : *list) writes = writes || (n.is_string() && n.get<std::string>() == ns);
          if (!writes) continue;
          const std::string path = std::string("grants.") + call;
          auto lower = [&](Limit& limit, uint64_t value, const std::string& suffix) {
            if (!out.from_grants || value < limit.value) limit = {value, who, path + suffix};
          };
          lower(out.max_value, LimitIn(grant->second, "max_value_bytes", nullptr, kKvDefaultMaxValueBytes),
                ".max_value_bytes");
          lower(out.quota_bytes, LimitIn(grant->second, "quota", "bytes", kKvDefaultQuotaBytes), ".quota.bytes");
          lower(out.quota_keys, LimitIn(grant->second, "quota", "keys", kKvDefaultQuotaKeys), ".quota.keys");
          out.from_grants = true;
        }
      }
    }
  }
  return out;
}

std::string Why(const Limit& limit) {
  return limit.who + " sets " + limit.path + " = " + std::to_string(limit.value);
}

constexpr const char* kWouldFail =
    ": a flow that writes it would fail at its next write (QuotaExceeded). Remove keys first (basal kv rm), or "
    "approve a version with a larger limit";

int Refused(const std::string& message) {
  ReportError("refused", message);
  return kExitRefused;
}

Result<std::string> JournalOf(const std::string& option) {
  if (!option.empty()) return option;
  return DefaultJournalPath();
}

// The journal read-only: kNotFound says there is none (reading never creates one).
int NoJournal(const std::string& path) {
  return Fail(kKindIo, "no journal at " + RedactLocator(path) + " (nothing was stored there yet; pass --db FILE or set BASAL_DB)");
}

// The value of `put`, as the operator gave it: an argument, a file or stdin, at most one kv value.
Result<std::string> ValueText(const KvOptions& o) {
  const uint64_t cap = kKvMaxValueBytesCeiling;
  std::string text;
  if (!o.value_file.empty()) {
    auto file = ReadFile(o.value_file, "value");
    if (!file) return file.error();
    text = std::move(*file);
  } else if (o.value == "-") {
    char buf[65536];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, stdin)) > 0) {
      text.append(buf, n);
      if (text.size() > cap + 1) break;  // bounded: what is past one kv value is never read
    }
    if (std::ferror(stdin)) return MakeError(ErrorCode::kIo, "cannot read the value from standard input");
  } else {
    text = o.value;
  }
  if (text.size() > cap) {
    return MakeError(ErrorCode::kInvalidArgument, "the value is larger than any kv value may be (" +
                                                      std::to_string(cap) + " bytes as JSON)");
  }
  return text;
}

std::string ValueShown(const std::string& stored) {
  Json j = Json::parse(stored, nullptr, false);
  return j.is_discarded() ? EscapeForTerminal(stored) : JsonForTerminal(j);
}

int Get(const KvOptions& o, const std::string& path) {
  auto reader = OpenReader(path);
  if (!reader) return reader.error().code == ErrorCode::kNotFound ? NoJournal(path) : Fail(kKindJournal, reader.error().message);
  reader->reset();  // it only said that a journal is there: kv is read on the store's own connection
  auto store = OpenStore({.locator = path});
  if (!store) return Fail(kKindJournal, store.error().message);
  auto got = (*store)->kv().Get(o.ns, o.key);
  if (!got) return Fail(kKindJournal, got.error().message);
  if (!*got) {
    ReportError("kv", "namespace " + Quoted(o.ns) + " has no key " + Quoted(o.key));
    return kExitFlowFailed;  // the answer is "no", as grep's 1
  }
  if (o.json) {
    Json line{{"namespace", o.ns}, {"key", o.key}, {"value", Json::parse(**got, nullptr, false)}};
    if (line["value"].is_discarded()) line["value"] = **got;
    WriteStdout(JsonForTerminal(line) + "\n");
  } else {
    WriteStdout(ValueShown(**got) + "\n");
  }
  return kExitOk;
}

int List(const KvOptions& o, const std::string& path) {
  if (o.limit < 1 || o.limit > kKvListMaxLimit)
    return Fail(kKindUsage, "--limit " + std::to_string(o.limit) + ": give 1 to " + std::to_string(kKvListMaxLimit));
  auto reader = OpenReader(path);
  if (!reader) return reader.error().code == ErrorCode::kNotFound ? NoJournal(path) : Fail(kKindJournal, reader.error().message);
  reader->reset();
  auto store = OpenStore({.locator = path});
  if (!store) return Fail(kKindJournal, store.error().message);
  auto list = (*store)->kv().List(o.ns, o.prefix, o.limit, kKvListMaxBytes);
  if (!list) return Fail(kKindJournal, list.error().message);
  for (const KvEntry& e : list->entries) {
    if (o.json) {
      Json line{{"key", e.key}, {"value", Json::parse(e.value_json, nullptr, false)}};
      if (line["value"].is_discarded()) line["value"] = e.value_json;
      WriteStdout(JsonForTerminal(line) + "\n");
    } else {
      std::string shown = ValueShown(e.value_json);
      if (shown.size() > 100) {
        size_t cut = 100;
        while (cut > 0 && (static_cast<unsigned char>(shown[cut]) & 0xC0) == 0x80) --cut;
        shown = shown.substr(0, cut) + "...";
      }
      WriteStdout(EscapeForTerminal(e.key) + "  " + shown + "\n");
    }
  }
  if (!o.json) {
    if (list->entries.empty()) {
      WriteStdout("no keys in namespace " + Quoted(o.ns) + (o.prefix.empty() ? "" : " with prefix " + Quoted(o.prefix)) + "\n");
    } else if (list->stopped_at_bytes || list->entries.size() == o.limit) {
      WriteStdout("(the first " + std::to_string(list->entries.size()) + " keys; the next page: --prefix, or a larger --limit" +
                  (list->stopped_at_bytes ? "; stopped at " + std::to_string(kKvListMaxBytes) + " bytes read" : "") +
                  ")\n");
    }
  }
  return kExitOk;
}

// Commits the batch that holds a write and its record, or drops both.
int CommitOrDrop(Store& store) {
  if (auto c = store.Commit(); !c) {
    (void)store.Rollback();
    return Fail(kKindJournal, c.error().message);
  }
  return kExitOk;
}

int Put(const KvOptions& o, const std::string& path) {
  if (o.value.empty() == o.value_file.empty())
    return Fail(kKindUsage, "give the value as VALUE (JSON), - (read from standard input) or --value-file FILE: one of them");
  auto text = ValueText(o);
  if (!text) return Fail(text.error().code == ErrorCode::kIo ? kKindIo : kKindUsage, text.error().message);
  Json value = Json::parse(*text, nullptr, false);
  if (value.is_discarded()) {
    std::string shown = *text;
    if (shown.size() > 60) shown = shown.substr(0, 60) + "...";
    const std::string where = !o.value_file.empty() ? "--value-file " + o.value_file : o.value == "-" ? "standard input" : "VALUE";
    // Fail escapes the line: the hint is the argument as a JSON string, in the shell's single quotes.
    return Fail(kKindUsage, where + " is not JSON (a value is one JSON value): to store it as a text, quote it as a "
                                    "JSON string: '" + Json(shown).dump(-1, ' ', false, Json::error_handler_t::replace) + "'");
  }
  std::string json;
  try {
    json = value.dump();  // compact, as a flow's kv.put stores it; strict about UTF-8
  } catch (const Json::type_error&) {
    return Fail(kKindUsage, "the value holds a string that is not valid UTF-8");
  }
  auto store = OpenStore({.locator = path});
  if (!store) return Fail(kKindJournal, store.error().message);
  Store& s = **store;
  auto limits = LimitsFor(s.reader(), o.ns);
  if (!limits) return Fail(kKindJournal, limits.error().message);
  if (json.size() > limits->max_value.value) {
    return Refused("the value is " + std::to_string(json.size()) + " bytes as JSON; " + Why(limits->max_value) + kWouldFail);
  }
  // Whether the key held a value, read in the batch the write then joins (informational: the
  // limits below are checked exactly, under the write lock).
  auto before = s.kv().ValueBytes(o.ns, o.key);
  if (!before) return Fail(kKindJournal, before.error().message);
  auto written = s.kv().PutWithin(o.ns, o.key, json, limits->kv());
  if (!written) {
    (void)s.Rollback();
    return Fail(kKindJournal, written.error().message);
  }
  if (written->status != KvUpdate::Status::kWritten) {
    (void)s.Rollback();
    const KvUsage& after = written->usage_after;
    if (written->status == KvUpdate::Status::kValueTooLarge)
      return Refused("the value is " + std::to_string(json.size()) + " bytes as JSON; " + Why(limits->max_value) + kWouldFail);
    const bool bytes = after.bytes > limits->quota_bytes.value;
    const Limit& limit = bytes ? limits->quota_bytes : limits->quota_keys;
    return Refused("namespace " + Quoted(o.ns) + " would hold " +
                   (bytes ? std::to_string(after.bytes) + " bytes of keys and values"
                          : std::to_string(after.keys) + " keys") +
                   "; " + Why(limit) + kWouldFail);
  }
  KvAuditEntry entry{.at_unix_us = NowUs(), .actor = CurrentActor(), .reason = o.reason, .ns = o.ns, .key = o.key,
                     .op = KvAuditOp::kPut, .value_sha256 = Sha256Hex(json), .value_bytes = json.size(),
                     .existed = before->has_value()};
  auto seq = s.kv().RecordOperatorWrite(entry);
  if (!seq) {
    (void)s.Rollback();
    return Fail(kKindJournal, seq.error().message);
  }
  if (int rc = CommitOrDrop(s); rc != kExitOk) return rc;
  const KvUsage& after = written->usage_after;
  WriteStdout(std::string(entry.existed ? "replaced " : "stored ") + Quoted(o.key) + " in namespace " + Quoted(o.ns) +
              " (" + std::to_string(json.size()) + " bytes); it holds " + std::to_string(after.keys) + " of " +
              std::to_string(limits->quota_keys.value) + " keys, " + std::to_string(after.bytes) + " of " +
              std::to_string(limits->quota_bytes.value) + " bytes (" +
              (limits->from_grants ? "the approved flows' smallest quota" : "kv.put's defaults: no approved flow writes it") +
              ")\n");
  return kExitOk;
}

int Remove(const KvOptions& o, const std::string& path) {
  auto store = OpenStore({.locator = path});
  if (!store) return Fail(kKindJournal, store.error().message);
  Store& s = **store;
  auto removed = s.kv().Delete(o.ns, o.key);
  if (!removed) {
    (void)s.Rollback();
    return Fail(kKindJournal, removed.error().message);
  }
  KvAuditEntry entry{.at_unix_us = NowUs(), .actor = CurrentActor(), .reason = o.reason, .ns = o.ns, .key = o.key,
                     .op = KvAuditOp::kDelete, .existed = *removed};
  auto seq = s.kv().RecordOperatorWrite(entry);
  if (!seq) {
    (void)s.Rollback();
    return Fail(kKindJournal, seq.error().message);
  }
  if (int rc = CommitOrDrop(s); rc != kExitOk) return rc;
  WriteStdout(*removed ? "removed " + Quoted(o.key) + " from namespace " + Quoted(o.ns) + "\n"
                       : "namespace " + Quoted(o.ns) + " had no key " + Quoted(o.key) + " (nothing removed; journaled)\n");
  return kExitOk;
}

int History(const KvOptions& o, const std::string& path) {
  auto reader = OpenReader(path);
  if (!reader) return reader.error().code == ErrorCode::kNotFound ? NoJournal(path) : Fail(kKindJournal, reader.error().message);
  auto rows = (*reader)->KvAudit(o.ns, o.limit == 0 ? SIZE_MAX : o.limit);
  if (!rows) return Fail(kKindJournal, rows.error().message);
  if (rows->empty() && !o.json) {
    WriteStdout("no operator writes to namespace " + Quoted(o.ns) + "\n");
    return kExitOk;
  }
  for (const KvAuditEntry& e : *rows) {
    if (o.json) {
      Json line{{"seq", e.seq},          {"at", Utc(e.at_unix_us)},   {"at_us", e.at_unix_us},
                {"uid", e.actor.uid},    {"user", e.actor.name},      {"reason", e.reason},
                {"namespace", e.ns},     {"key", e.key},              {"op", KvAuditOpName(e.op)},
                {"existed", e.existed}};
      if (e.op == KvAuditOp::kPut) line["value"] = {{"bytes", e.value_bytes}, {"sha256", e.value_sha256}};
      WriteStdout(JsonForTerminal(line) + "\n");
      continue;
    }
    std::string text = std::to_string(e.seq) + "  " + Utc(e.at_unix_us) + "  " + EscapeForTerminal(e.actor.name) +
                       " (uid " + std::to_string(e.actor.uid) + ")  " + KvAuditOpName(e.op) + " " + Quoted(e.key);
    if (e.op == KvAuditOp::kPut)
      text += " " + std::to_string(e.value_bytes) + " bytes " + e.value_sha256 + (e.existed ? " (replaced)" : "");
    else if (!e.existed)
      text += " (no such key)";
    if (!e.reason.empty()) text += "  reason: " + EscapeForTerminal(e.reason);
    WriteStdout(text + "\n");
  }
  return kExitOk;
}

}  // namespace

int KvCommand(const KvOptions& o) {
  if (o.ns.empty() || o.ns.size() > kKvMaxNamespaceBytes)
    return Fail(kKindUsage, "--namespace: give a namespace of 1 to " + std::to_string(kKvMaxNamespaceBytes) + " bytes");
  if ((o.action == "get" || o.action == "put" || o.action == "rm") && (o.key.empty() || o.key.size() > kKvMaxKeyBytes))
    return Fail(kKindUsage, "KEY: give a key of 1 to " + std::to_string(kKvMaxKeyBytes) + " bytes (as a flow's keys are)");
  auto path = JournalOf(o.db_path);
  if (!path) return Fail(kKindIo, path.error().message);
  if (o.action == "get") return Get(o, *path);
  if (o.action == "list") return List(o, *path);
  if (o.action == "put") return Put(o, *path);
  if (o.action == "rm") return Remove(o, *path);
  if (o.action == "history") return History(o, *path);
  return Fail(kKindUsage, "kv: get, list, put, rm or history");
}

}  // namespace basal::cli
