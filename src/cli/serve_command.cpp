// `basal serve` (the daemon: src/serve/daemon.h, docs/serve.md) and `basal token create|list|revoke`
// (the bearer tokens of its TCP listener: only their SHA-256 is stored).
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "cli/approvals.h"
#include "cli/cli_support.h"
#include "cli/commands.h"
#include "parent/secrets/secret_store.h"
#include "parent/store/open.h"
#include "serve/config.h"
#include "serve/daemon.h"
#include "serve/signature.h"

namespace basal::cli {
namespace {

Result<std::string> JournalFor(const std::string& option) {
  if (!option.empty()) return option;
  return DefaultJournalPath();
}

}  // namespace

int ServeCommand(const ServeOptions& o) {
  serve::ServeConfig config;
  if (!o.config_path.empty()) {
    auto loaded = serve::LoadServeConfig(o.config_path);
    if (!loaded) return Fail(kKindUsage, loaded.error().message);
    config = std::move(*loaded);
  }
  if (!o.db_path.empty()) config.db = o.db_path;
  if (!o.socket_path.empty()) config.listen.socket = o.socket_path;
  if (!o.worker_path.empty()) config.worker = o.worker_path;
  auto journal = JournalFor(config.db);
  if (!journal) return Fail(kKindIo, journal.error().message);
  auto worker = WorkerPath(config.worker);
  if (!worker) return Fail(kKindSetup, worker.error().message);
  auto socket = serve::ResolveSocketPath(config.listen, serve::SocketEnvFromProcess());
  if (!socket) return Fail(kKindUsage, socket.error().message + " (give --socket PATH)");
  serve::DaemonOptions d;
  d.config = config;
  d.config_path = o.config_path;
  d.journal_path = *journal;
  d.worker_path = *worker;
  d.secrets_dir = config.secrets_dir.empty() ? SecretsDirFor(*journal) : config.secrets_dir;
  d.socket_path = *socket;
  d.log = [](const std::string& line) { WriteStderr("basal serve: " + EscapeForTerminal(line) + "\n"); };
  return serve::RunDaemon(std::move(d));
}

int TokenCommand(const TokenOptions& o) {
  auto journal = JournalFor(o.db_path);
  if (!journal) return Fail(kKindIo, journal.error().message);
  auto store = OpenStore({.locator = *journal});
  if (!store) return Fail(kKindJournal, store.error().message);
  ServeTables& tables = (*store)->serve();
  if (o.action == "create") {
    nlohmann::json scopes = nlohmann::json::array();
    for (const std::string& s : o.scopes) {
      if (s != "run" && s != "read" && s != "metrics" && s != "all")
        return Fail(kKindUsage, "--scope " + s + ": a scope is run, read, metrics or all");
      scopes.push_back(s);
    }
    if (scopes.empty()) return Fail(kKindUsage, "give at least one --scope (run, read, metrics or all)");
    const std::string token = serve::NewApiToken();
    auto id = tables.AddToken(o.name, serve::ApiTokenHash(token), scopes.dump(), CurrentActor(), NowUs());
    if (!id) return Fail(id.error().code == ErrorCode::kConflict ? kKindUsage : kKindJournal, id.error().message);
    if (auto c = (*store)->Commit(); !c) return Fail(kKindJournal, c.error().message);
    // The token is printed once, here; only its hash is stored.
    WriteStdout(token + "\n");
    return kExitOk;
  }
  if (o.action == "list") {
    auto rows = (*store)->reader().ListTokens();
    if (!rows) return Fail(kKindJournal, rows.error().message);
    for (const TokenRow& t : *rows) {
      nlohmann::json j{{"name", t.name},
                       {"scopes", nlohmann::json::parse(t.scopes_json, nullptr, false)},
                       {"created_by", t.created_by.name},
                       {"created_us", t.created_unix_us},
                       {"revoked", t.revoked_unix_us.has_value()}};
      if (o.json) {
        WriteStdout(JsonForTerminal(j) + "\n");
      } else {
        WriteStdout(EscapeForTerminal(t.name) + "  scopes " + JsonForTerminal(j["scopes"]) + "  by " +
                    EscapeForTerminal(t.created_by.name) + (t.revoked_unix_us ? "  revoked" : "") + "\n");
      }
    }
    return kExitOk;
  }
  if (o.action == "revoke") {
    auto r = tables.RevokeToken(o.name, CurrentActor(), NowUs());
    if (!r) return Fail(r.error().code == ErrorCode::kNotFound ? kKindUsage : kKindJournal, r.error().message);
    if (auto c = (*store)->Commit(); !c) return Fail(kKindJournal, c.error().message);
    WriteStdout("revoked token " + EscapeForTerminal(o.name) + "\n");
    return kExitOk;
  }
  return Fail(kKindUsage, "token: create, list or revoke");
}

}  // namespace basal::cli
