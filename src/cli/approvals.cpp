// `basal flow ...` and `basal policy ...` (see approvals.h, docs/approvals.md). Every text that
// came from a file or from the journal (notes, sources, manifests, user names) is printed through
// EscapeForTerminal: a flow's author must not be able to forge the review the operator reads.
#include "cli/approvals.h"
#include "cli/commands.h"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "basal/manifest.h"
#include "basal/review.h"
#include "cli/cli_support.h"
#include "parent/host_calls/mcp.h"
#include "parent/host_calls/http_fetch.h"
#include "parent/host_calls/kv.h"
#include "parent/host_calls/log.h"
#include "parent/store/owner.h"
#include "parent/store/open.h"

namespace basal::cli {
namespace {

using Json = nlohmann::json;

constexpr const char* kKindApproval = "approval";  // the approvals could not be read or changed (exit 3)
constexpr const char* kKindRefused = "refused";    // not confirmed (exit 4)
constexpr size_t kMaxNameBytes = 128;
constexpr size_t kMaxNoteBytes = 4096;

const char* Noun(ApprovalKind kind) { return kind == ApprovalKind::kFlow ? "flow" : "policy"; }
std::string What(ApprovalKind kind, const std::string& name) {
  return std::string(kind == ApprovalKind::kFlow ? "flow" : "codemode policy") + " \"" + name + "\"";
}
Profile ProfileOf(ApprovalKind kind) { return kind == ApprovalKind::kFlow ? Profile::kFlow : Profile::kCodemode; }

// Names appear in commands, URLs (the daemon's /v1/flows/NAME) and the journal: letters, digits,
// '.', '_' and '-', not starting with '.' or '-'.
std::optional<std::string> CheckName(ApprovalKind kind, const std::string& name) {
  const std::string what = std::string(Noun(kind)) + " name";
  if (name.empty()) return what + " is empty";
  if (name.size() > kMaxNameBytes) return what + " is longer than " + std::to_string(kMaxNameBytes) + " bytes";
  if (name[0] == '.' || name[0] == '-') return what + " \"" + EscapeForTerminal(name) + "\" must not start with '.' or '-'";
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    if (!ok) {
      return what + " \"" + EscapeForTerminal(name) +
             "\" may hold only letters, digits, '.', '_' and '-' (it appears in commands, URLs and the journal)";
    }
  }
  return std::nullopt;
}


void Out(const std::string& text) { WriteStdout(text); }

// The journal and a registry of the built-in host calls (whose specs parse and compare grants).
// approve and revoke write (the store, which creates the journal if it is missing); list, show and
// diff only read (OpenReader: never created or changed, so an auditor who may only read the
// file, or a PostgreSQL role that may only read, can inspect what was approved).
struct Opened {
  std::unique_ptr<Store> store;               // approve, revoke
  std::unique_ptr<JournalReader> read_only;   // list, show, diff
  JournalReader* reader = nullptr;
  HostCallRegistry registry;
};

Result<std::unique_ptr<Opened>> Open(const ApprovalOptions& o, bool writes) {
  std::string path = o.db_path;
  if (path.empty()) {
    auto db = DefaultJournalPath();
    if (!db) return db.error();
    path = *db;
  }
  auto opened = std::make_unique<Opened>();
  if (writes) {
    auto store = OpenStore({.locator = path});
    if (!store) return store.error();
    opened->store = std::move(*store);
    opened->reader = &opened->store->reader();
  } else {
    auto reader = OpenReader(path);
    if (!reader) {
      if (reader.error().code == ErrorCode::kNotFound) {
        return MakeError(ErrorCode::kNotFound, "no journal at " + RedactLocator(path) +
                                                   " (nothing was approved there yet; approve with basal " +
                                                   Noun(o.kind) + " approve, or pass --db FILE)");
      }
      return reader.error();
    }
    opened->read_only = std::move(*reader);
    opened->reader = opened->read_only.get();
  }
  // The handlers never run here: the registry is for Manifest::Parse and the review.
  if (auto r = RegisterLogHostCall(opened->registry, [](const HostCallContext&, std::string_view, std::string_view) {}); !r)
    return r.error();
  if (auto r = RegisterKvHostCallSpecs(opened->registry); !r) return r.error();
  if (auto r = RegisterHttpFetchSpec(opened->registry); !r) return r.error();
  if (auto r = RegisterMcpHostCalls(opened->registry); !r) return r.error();
  return opened;
}

int ReportOpenError(const Error& e) {
  ReportError(KindForOpenError(e), e.message);
  return kExitBasalFailed;
}

// One stored version with its texts read back and checked against their hashes.
struct Loaded {
  ApprovalRow row;
  std::optional<std::string> source;
  std::string manifest_text;
  std::optional<Manifest> manifest;  // nullopt: it does not parse with this basal's host calls
  std::string manifest_error;
};

Result<Loaded> Load(Opened& opened, const ApprovalRow& row) {
  Loaded loaded;
  loaded.row = row;
  auto text = [&](const std::string& hash, const char* which) -> Result<std::string> {
    auto kept = opened.reader->Text(hash);
    if (!kept) return kept.error();
    if (!*kept || Sha256Hex(**kept) != hash) {
      return MakeError(ErrorCode::kDatabase, What(row.kind, row.name) + " version " + std::to_string(row.version) + ": its " +
                                                 which + " " + hash +
                                                 (*kept ? " does not match its hash" : " is missing") +
                                                 " in the journal: it was changed outside basal");
    }
    return std::move(**kept);
  };
  auto manifest_text = text(row.manifest_text_hash, "manifest");
  if (!manifest_text) return manifest_text.error();
  loaded.manifest_text = std::move(*manifest_text);
  if (row.kind == ApprovalKind::kFlow) {
    auto source = text(row.source_hash, "source");
    if (!source) return source.error();
    loaded.source = std::move(*source);
  }
  auto manifest = Manifest::Parse(loaded.manifest_text, opened.registry, ProfileOf(row.kind));
  if (manifest) {
    loaded.manifest = std::move(*manifest);
  } else {
    loaded.manifest_error = manifest.error().message;
  }
  return loaded;
}

Result<ApprovalRow> FindVersion(Opened& opened, ApprovalKind kind, const std::string& name, int64_t version) {
  auto versions = opened.reader->Versions(kind, name);
  if (!versions) return versions.error();
  if (versions->empty()) {
    return MakeError(ErrorCode::kNotFound, What(kind, name) + " has never been approved in this journal (basal " +
                                               Noun(kind) + " list shows what is)");
  }
  if (version == 0) return versions->back();
  for (const ApprovalRow& row : *versions) {
    if (row.version == version) return row;
  }
  return MakeError(ErrorCode::kNotFound, What(kind, name) + " has no version " + std::to_string(version) +
                                             " (versions 1 to " + std::to_string(versions->back().version) + ")");
}

// A text from a file, each line indented by two spaces and escaped (EscapeForTerminal), so that
// none of its lines can pass for one of basal's own.
std::string Indented(std::string_view text) {
  std::string out;
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    out += "  " + EscapeForTerminal(text.substr(at, end - at)) + "\n";
    at = end + 1;
  }
  return out;
}

std::string StateOf(const ApprovalRow& row, int64_t newest) {
  if (row.revoked_unix_us) return "revoked";
  return row.version == newest ? "approved" : "superseded";
}

// "version 1 (approved 2026-12-03 17:50:01 UTC by alice: "first")"
std::string Describe(const ApprovalRow& row) {
  std::string out = "version " + std::to_string(row.version) + " (approved " + UtcText(row.approved_unix_us) + " by " +
                    EscapeForTerminal(row.approver.name);
  if (!row.note.empty()) out += ": \"" + EscapeForTerminal(row.note) + "\"";
  if (row.revoked_unix_us) out += "; REVOKED " + UtcText(*row.revoked_unix_us) + " by " + EscapeForTerminal(row.revoker.name);
  return out + ")";
}

Json RowJson(const ApprovalRow& row, int64_t newest) {
  Json j = {{"kind", Noun(row.kind)},
            {"name", row.name},
            {"version", row.version},
            {"state", StateOf(row, newest)},
            {"manifest_text_hash", row.manifest_text_hash},
            {"manifest_hash", row.manifest_hash},
            {"approver", {{"uid", row.approver.uid}, {"name", row.approver.name}}},
            {"approved_unix_us", row.approved_unix_us},
            {"note", row.note}};
  if (row.kind == ApprovalKind::kFlow) j["source_hash"] = row.source_hash;
  if (row.revoked_unix_us) {
    j["revoked"] = {{"unix_us", *row.revoked_unix_us},
                    {"by", {{"uid", row.revoker.uid}, {"name", row.revoker.name}}},
                    {"note", row.revoke_note}};
  }
  return j;
}

// Asks on the terminal; without one, only --yes approves.
bool Confirmed(const ApprovalOptions& o, const std::string& question) {
  if (o.yes) return true;
  FlushStdout();  // the review before the question or the refusal (stderr is not buffered)
  if (::isatty(STDIN_FILENO) == 0) {
    ReportError(kKindRefused, "the review above needs your confirmation: run this on a terminal, or pass --yes once you "
                              "have read it; nothing was stored");
    return false;
  }
  Out(question + " [y/N] ");
  FlushStdout();
  std::string answer;
  if (!std::getline(std::cin, answer)) answer.clear();
  if (answer == "y" || answer == "Y" || answer == "yes" || answer == "YES" || answer == "Yes") return true;
  ReportError(kKindRefused, "not approved (you answered \"" + EscapeForTerminal(answer) + "\"); nothing was stored");
  return false;
}

// Whether `command` (an absolute path: the manifest refuses others) is an executable file here.
bool CommandExists(const std::string& command) {
  struct stat st{};
  return stat(command.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(command.c_str(), X_OK) == 0;
}

// A policy's MCP server whose command is not here fails every script's start under it (the daemon
// or basal mcp refuses to start its servers): say so before it is approved. A warning only: the
// policy may be approved for another machine.
std::string MissingServerWarnings(const Manifest& manifest) {
  std::string out;
  for (const auto& [name, server] : manifest.mcp_servers()) {
    const auto it = server.find("command");
    if (it == server.end() || !it->is_string()) continue;
    const std::string command = it->get<std::string>();
    if (CommandExists(command)) continue;
    out += "warning: mcp_servers." + EscapeForTerminal(name) + ".command " + EscapeForTerminal(command) +
           " is not an executable file on this machine: the server cannot start, so no script under this policy "
           "can run until it is installed (or the command corrected)\n";
  }
  return out;
}

int Approve(Opened& opened, const ApprovalOptions& o) {
  const ApprovalKind kind = o.kind;
  std::optional<std::string> source;
  if (kind == ApprovalKind::kFlow) {
    auto read = ReadFile(o.source_path, "flow");
    if (!read) {
      ReportError(kKindIo, read.error().message);
      return kExitBasalFailed;
    }
    source = std::move(*read);
  }
  auto manifest_text = ReadFile(o.manifest_path, "manifest");
  if (!manifest_text) {
    ReportError(kKindIo, manifest_text.error().message);
    return kExitBasalFailed;
  }
  auto manifest = Manifest::Parse(*manifest_text, opened.registry, ProfileOf(kind));
  if (!manifest) {
    ReportError(kKindManifest, o.manifest_path + ": " + manifest.error().message);
    return kExitBasalFailed;
  }
  auto versions = opened.reader->Versions(kind, o.name);
  if (!versions) {
    ReportError(kKindJournal, versions.error().message);
    return kExitBasalFailed;
  }
  std::optional<Loaded> before;
  if (!versions->empty()) {
    auto loaded = Load(opened, versions->back());
    if (!loaded) {
      ReportError(kKindJournal, loaded.error().message);
      return kExitBasalFailed;
    }
    before = std::move(*loaded);
  }
  const std::string what = What(kind, o.name);
  if (before && !before->row.revoked_unix_us && before->row.manifest_text_hash == Sha256Hex(*manifest_text) &&
      (!source || before->row.source_hash == Sha256Hex(*source))) {
    Out(what + " " + Describe(before->row) + " already has exactly this " + (source ? "source and " : "") +
        "manifest: nothing to approve, nothing changed\n");
    return kExitOk;
  }
  const int64_t next = versions->empty() ? 1 : versions->back().version + 1;
  Review review = ReviewVersions(before && before->manifest ? &*before->manifest : nullptr,
                                 before ? before->source : std::nullopt, before ? before->manifest_text : std::string(),
                                 *manifest, source, *manifest_text, opened.registry);
  std::string head = "Review of " + what + ": version " + std::to_string(next);
  if (!before) {
    head += ", a new " + std::string(Noun(kind)) + ". Everything it is granted:\n";
  } else {
    head += " would replace " + Describe(before->row) + ". What changes:\n";
    if (!before->manifest) {
      head += "  (version " + std::to_string(before->row.version) +
              "'s manifest does not parse with this basal's host calls, so every grant is shown as new: " +
              EscapeForTerminal(before->manifest_error) + ")\n";
    }
  }
  Out(head + RenderReview(review, o.source_diff));
  if (o.replay > 0 && source) {
    // The check before approving a change: does this version replay the runs the journal holds?
    Out("replay of the last " + std::to_string(o.replay) + " durable run(s) of " + what + " with version " +
        std::to_string(next) + " (nothing is called):\n");
    std::string db = o.db_path;
    if (db.empty()) {
      auto d = DefaultJournalPath();
      if (d) db = *d;
    }
    auto diverged = ReplayRecentRuns(db, "", o.name, *source, *manifest_text, o.replay);
    if (!diverged) {
      ReportError(kKindSetup, "the replay could not run: " + diverged.error().message);
      return kExitBasalFailed;
    }
    if (*diverged > 0)
      Out("warning: " + std::to_string(*diverged) + " run(s) diverge: a run of them interrupted now would not resume "
          "under this version (docs/durable.md)\n");
  }
  if (std::string warnings = MissingServerWarnings(*manifest); !warnings.empty()) Out(warnings);
  if (!Confirmed(o, "Approve " + what + " version " + std::to_string(next) + "?")) return kExitRefused;

  NewApproval approval;
  approval.kind = kind;
  approval.name = o.name;
  approval.source = source;
  approval.manifest_text = *manifest_text;
  approval.manifest_hash = manifest->hash();
  approval.approver = CurrentActor();
  approval.at_unix_us = NowUs();
  approval.note = o.note;
  approval.reviewed_version = before ? before->row.version : 0;
  approval.reviewed_revoked = before && before->row.revoked_unix_us.has_value();
  approval.review_json = ReviewJson(review).dump(-1, ' ', false, Json::error_handler_t::replace);
  auto row = opened.store->catalog().Approve(approval);
  if (!row) {
    ReportError(row.error().code == ErrorCode::kConflict ? kKindRefused : kKindJournal, row.error().message);
    return row.error().code == ErrorCode::kConflict ? kExitRefused : kExitBasalFailed;
  }
  std::string done = "approved " + what + " version " + std::to_string(row->version) + " by " +
                     EscapeForTerminal(row->approver.name) + "\n";
  if (kind == ApprovalKind::kFlow) done += "  source    " + row->source_hash + "\n";
  done += "  manifest  " + row->manifest_text_hash + " (canonical " + row->manifest_hash + ")\n";
  done += kind == ApprovalKind::kFlow ? "run it: basal run " + o.name + " --input JSON\n"
                                      : "run a script under it: basal run --policy " + o.name + " SCRIPT.js\n";
  Out(done);
  return kExitOk;
}

int List(Opened& opened, const ApprovalOptions& o) {
  auto rows = opened.reader->Names(o.kind);
  if (!rows) {
    ReportError(kKindJournal, rows.error().message);
    return kExitBasalFailed;
  }
  if (o.json) {
    for (const ApprovalRow& row : *rows) Out(JsonForTerminal(RowJson(row, row.version)) + "\n");
    return kExitOk;
  }
  if (rows->empty()) {
    Out(std::string("no ") + (o.kind == ApprovalKind::kFlow ? "flow" : "codemode policy") +
        " is approved in this journal (basal " + Noun(o.kind) + " approve NAME ... adds one)\n");
    return kExitOk;
  }
  size_t width = 4;
  for (const ApprovalRow& row : *rows) width = std::max(width, row.name.size());
  auto pad = [](std::string s, size_t n) {
    if (s.size() < n) s.append(n - s.size(), ' ');
    return s;
  };
  std::string out = pad("NAME", width) + "  VERSION  STATE     " + pad("APPROVED", UtcText(0).size()) + "  BY\n";
  for (const ApprovalRow& row : *rows) {
    out += pad(row.name, width) + "  " + pad(std::to_string(row.version), 7) + "  " + pad(StateOf(row, row.version), 8) +
           "  " + UtcText(row.approved_unix_us) + "  " + EscapeForTerminal(row.approver.name) + "\n";
  }
  Out(out);
  return kExitOk;
}

int Show(Opened& opened, const ApprovalOptions& o) {
  auto row = FindVersion(opened, o.kind, o.name, o.version);
  if (!row) {
    ReportError(kKindApproval, row.error().message);
    return kExitBasalFailed;
  }
  auto versions = opened.reader->Versions(o.kind, o.name);
  auto events = opened.reader->Events(o.kind, o.name);
  if (!versions || !events) {
    ReportError(kKindJournal, (!versions ? versions.error() : events.error()).message);
    return kExitBasalFailed;
  }
  const int64_t newest = versions->back().version;
  auto loaded = Load(opened, *row);
  if (!loaded) {
    ReportError(kKindJournal, loaded.error().message);
    return kExitBasalFailed;
  }
  if (o.json) {
    Json j = RowJson(*row, newest);
    j["manifest_text"] = loaded->manifest_text;
    if (o.show_source && loaded->source) j["source"] = *loaded->source;
    Json history = Json::array();
    for (const ApprovalEvent& e : *events) {
      history.push_back({{"event", e.kind},
                         {"version", e.version},
                         {"unix_us", e.at_unix_us},
                         {"by", {{"uid", e.actor.uid}, {"name", e.actor.name}}}});
    }
    j["history"] = std::move(history);
    Out(JsonForTerminal(j) + "\n");
    return kExitOk;
  }
  std::string out = What(o.kind, o.name) + " version " + std::to_string(row->version) + " of " +
                    std::to_string(newest) + ": " + StateOf(*row, newest) + "\n";
  out += "  approved  " + UtcText(row->approved_unix_us) + " by " + EscapeForTerminal(row->approver.name) + " (uid " +
         std::to_string(row->approver.uid) + ")\n";
  if (!row->note.empty()) out += "  note      " + EscapeForTerminal(row->note) + "\n";
  if (row->revoked_unix_us) {
    out += "  revoked   " + UtcText(*row->revoked_unix_us) + " by " + EscapeForTerminal(row->revoker.name) + " (uid " +
           std::to_string(row->revoker.uid) + ")" +
           (row->revoke_note.empty() ? "" : ": " + EscapeForTerminal(row->revoke_note)) + "\n";
  }
  if (loaded->source) {
    size_t lines = 0;
    for (char c : *loaded->source) lines += c == '\n';
    if (!loaded->source->empty() && loaded->source->back() != '\n') ++lines;
    out += "  source    " + row->source_hash + " (" + std::to_string(lines) + " lines)\n";
  }
  out += "  manifest  " + row->manifest_text_hash + " (canonical " + row->manifest_hash + ")\n";
  out += "manifest as approved:\n" + Indented(loaded->manifest_text);
  if (loaded->manifest) {
    Review all = ReviewVersions(nullptr, std::nullopt, "", *loaded->manifest, loaded->source, loaded->manifest_text,
                                opened.registry);
    out += RenderReview(all, false);
  } else {
    out += "(it does not parse with this basal's host calls: " + EscapeForTerminal(loaded->manifest_error) + ")\n";
  }
  out += "history:\n";
  for (const ApprovalEvent& e : *events) {
    out += "  " + UtcText(e.at_unix_us) + "  " + e.kind + " version " + std::to_string(e.version) + " by " +
           EscapeForTerminal(e.actor.name) + "\n";
  }
  if (o.show_source && loaded->source) out += "source as approved:\n" + Indented(*loaded->source);
  Out(out);
  return kExitOk;
}

int Diff(Opened& opened, const ApprovalOptions& o) {
  auto versions = opened.reader->Versions(o.kind, o.name);
  if (!versions) {
    ReportError(kKindJournal, versions.error().message);
    return kExitBasalFailed;
  }
  if (versions->empty()) {
    ReportError(kKindApproval, What(o.kind, o.name) + " has never been approved in this journal");
    return kExitBasalFailed;
  }
  const int64_t newest = versions->back().version;
  int64_t a = 0, b = newest;
  if (o.versions.size() >= 1) a = o.versions[0];
  if (o.versions.size() >= 2) b = o.versions[1];
  if (o.versions.empty()) {
    if (newest < 2) {
      ReportError(kKindApproval, What(o.kind, o.name) + " has only version 1: nothing to compare it with (basal " +
                                     Noun(o.kind) + " show " + o.name + " shows it)");
      return kExitBasalFailed;
    }
    a = newest - 1;
  }
  auto ra = FindVersion(opened, o.kind, o.name, a);
  auto rb = FindVersion(opened, o.kind, o.name, b);
  if (!ra || !rb) {
    ReportError(kKindApproval, (!ra ? ra.error() : rb.error()).message);
    return kExitBasalFailed;
  }
  auto la = Load(opened, *ra);
  auto lb = Load(opened, *rb);
  if (!la || !lb) {
    ReportError(kKindJournal, (!la ? la.error() : lb.error()).message);
    return kExitBasalFailed;
  }
  if (!lb->manifest) {
    ReportError(kKindApproval, What(o.kind, o.name) + " version " + std::to_string(b) +
                                   ": its manifest does not parse with this basal's host calls: " + lb->manifest_error);
    return kExitBasalFailed;
  }
  Review review = ReviewVersions(la->manifest ? &*la->manifest : nullptr, la->source, la->manifest_text, *lb->manifest,
                                 lb->source, lb->manifest_text, opened.registry);
  if (o.json) {
    Json j = {{"kind", Noun(o.kind)}, {"name", o.name}, {"from", a}, {"to", b}, {"review", ReviewJson(review)}};
    Out(JsonForTerminal(j) + "\n");
    return kExitOk;
  }
  Out(What(o.kind, o.name) + ": from " + Describe(*ra) + "\n  to " + Describe(*rb) + "\n" +
      (review.identical ? std::string("identical source and manifest\n") : RenderReview(review, o.source_diff)));
  return kExitOk;
}

int Revoke(Opened& opened, const ApprovalOptions& o) {
  int64_t version = o.version;
  if (version == 0) {
    auto newest = FindVersion(opened, o.kind, o.name, 0);
    if (!newest) {
      ReportError(kKindApproval, newest.error().message);
      return kExitBasalFailed;
    }
    version = newest->version;
  }
  auto row = opened.store->catalog().Revoke(o.kind, o.name, version, CurrentActor(), NowUs(), o.note);
  if (!row) {
    const bool known = row.error().code == ErrorCode::kNotFound || row.error().code == ErrorCode::kConflict;
    ReportError(known ? kKindApproval : kKindJournal, row.error().message);
    return kExitBasalFailed;
  }
  Out("revoked " + What(o.kind, o.name) + " version " + std::to_string(row->version) +
      ": it never starts again (activations already running finish; queued ones are cancelled)\n");
  return kExitOk;
}

constexpr const char* kApprovalsDbHelp =
    "The store: an SQLite journal file, or postgresql://... Default: $BASAL_DB, else "
    "${XDG_STATE_HOME:-$HOME/.local/state}/basal/journal.db";

}  // namespace

// Who runs this command: the real uid and its user name; under sudo, who asked for it too.
Actor CurrentActor() {
  Actor actor;
  actor.uid = static_cast<int64_t>(::getuid());
  struct passwd pw {};
  struct passwd* found = nullptr;
  char buf[4096];
  if (::getpwuid_r(::getuid(), &pw, buf, sizeof buf, &found) == 0 && found != nullptr) {
    actor.name = found->pw_name;
  } else {
    actor.name = "uid " + std::to_string(actor.uid);
  }
  const char* sudo_user = std::getenv("SUDO_USER");
  if (actor.uid == 0 && sudo_user != nullptr && *sudo_user != '\0') actor.name += std::string(" (sudo from ") + sudo_user + ")";
  return actor;
}

CLI::App* AddApprovalCommands(CLI::App& app, ApprovalOptions& o, ApprovalKind kind) {
  const bool flow = kind == ApprovalKind::kFlow;
  CLI::App* top = app.add_subcommand(
      flow ? "flow" : "policy",
      flow ? "Approve, inspect and revoke flows: stored versions of a source and its manifest (docs/approvals.md)"
           : "Approve, inspect and revoke codemode policies: the grants and budgets agents' scripts run under "
             "(docs/approvals.md)");
  top->require_subcommand(1);
  auto db = [&](CLI::App* c) { c->add_option("--db", o.db_path, kApprovalsDbHelp)->type_name("FILE|URL"); };

  CLI::App* approve = top->add_subcommand(
      "approve", flow ? "Store a new version of flow NAME after showing what it is granted, or what changed"
                      : "Store a new version of codemode policy NAME after showing what it grants, or what changed");
  approve->add_option("name", o.name, flow ? "The flow's name" : "The policy's name")->required()->type_name("NAME");
  if (flow) approve->add_option("source", o.source_path, "The flow's source (an ES module)")->required()->type_name("FLOW.js");
  approve->add_option("--manifest", o.manifest_path, "The manifest (grants and budgets)")->required()->type_name("FILE");
  approve->add_option("--note", o.note, "Why: kept with the approval")->type_name("TEXT");
  approve->add_flag("--yes", o.yes, "Approve without asking (needed when stdin is not a terminal); read the review first");
  if (flow) approve->add_flag("--source-diff", o.source_diff, "Print the source's whole line diff in the review");
  if (flow)
    approve->add_option("--replay", o.replay,
                        "Before asking: replay the flow's last K durable runs with this version, every effect "
                        "disabled, and show which diverge (docs/durable.md)")
        ->type_name("K")
        ->check(CLI::Range(size_t{1}, size_t{1000}));
  db(approve);
  approve->footer(flow ? "Examples:\n  basal flow approve orders orders.js --manifest orders.json --note \"first version\"\n"
                         "  basal flow approve orders orders.js --manifest orders.json --source-diff --yes\n"
                       : "Examples:\n  basal policy approve agents --manifest agents.json --note \"kv for agents\"\n");

  CLI::App* list = top->add_subcommand("list", flow ? "List approved flows: the newest version of each"
                                                    : "List codemode policies: the newest version of each");
  list->add_flag("--json", o.json, "One JSON object per line");
  db(list);
  list->footer(std::string("Examples:\n  basal ") + (flow ? "flow" : "policy") + " list\n  basal " +
               (flow ? "flow" : "policy") + " list --json\n");

  CLI::App* show = top->add_subcommand("show", "Show one version: who approved it, its manifest, grants, history");
  show->add_option("name", o.name, "The name")->required()->type_name("NAME");
  show->add_option("--version", o.version, "This version (default: the newest)")->type_name("N")->check(CLI::Range(int64_t{1}, std::numeric_limits<int64_t>::max()));
  if (flow) show->add_flag("--source", o.show_source, "Print the approved source too");
  show->add_flag("--json", o.json, "One JSON object");
  db(show);
  show->footer(flow ? "Examples:\n  basal flow show orders\n  basal flow show orders --version 1 --source\n"
                    : "Examples:\n  basal policy show agents\n");

  CLI::App* diff = top->add_subcommand(
      "diff", "Compare two versions: A and B, A and the newest, or (no version) the newest and the one before");
  diff->add_option("name", o.name, "The name")->required()->type_name("NAME");
  diff->add_option("versions", o.versions, "Versions A [B]")->expected(0, 2)->type_name("A [B]")->check(CLI::Range(int64_t{1}, std::numeric_limits<int64_t>::max()));
  if (flow) diff->add_flag("--source-diff", o.source_diff, "Print the source's whole line diff");
  diff->add_flag("--json", o.json, "One JSON object");
  db(diff);
  diff->footer(flow ? "Examples:\n  basal flow diff orders\n  basal flow diff orders 1 3 --source-diff\n"
                    : "Examples:\n  basal policy diff agents\n");

  CLI::App* revoke = top->add_subcommand(
      "revoke", "Revoke a version (default: the newest): it never starts again; running activations finish");
  revoke->add_option("name", o.name, "The name")->required()->type_name("NAME");
  revoke->add_option("--version", o.version, "This version (default: the newest)")->type_name("N")->check(CLI::Range(int64_t{1}, std::numeric_limits<int64_t>::max()));
  revoke->add_option("--note", o.note, "Why: kept with the revocation")->type_name("TEXT");
  db(revoke);
  revoke->footer(std::string("Examples:\n  basal ") + (flow ? "flow revoke orders --note \"leaked token\"\n"
                                                             : "policy revoke agents\n"));
  return top;
}

int ApprovalCommand(CLI::App& parent, ApprovalOptions& o) {
  for (const char* action : {"approve", "list", "show", "diff", "revoke"}) {
    if (parent.get_subcommand(action)->parsed()) o.action = action;
  }
  if (o.action != "list") {
    if (auto bad = CheckName(o.kind, o.name)) {
      ReportError(kKindUsage, *bad);
      return kExitUsage;
    }
  }
  if (o.note.size() > kMaxNoteBytes) {
    ReportError(kKindUsage, "--note is " + std::to_string(o.note.size()) + " bytes; the limit is " +
                                std::to_string(kMaxNoteBytes));
    return kExitUsage;
  }
  auto opened = Open(o, o.action == "approve" || o.action == "revoke");
  if (!opened) return ReportOpenError(opened.error());
  if (o.action == "approve") return Approve(**opened, o);
  if (o.action == "list") return List(**opened, o);
  if (o.action == "show") return Show(**opened, o);
  if (o.action == "diff") return Diff(**opened, o);
  return Revoke(**opened, o);
}

}  // namespace basal::cli
