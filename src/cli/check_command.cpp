// `basal check FLOW.js --manifest M.json`: is the manifest valid, and does the flow load? The flow
// is loaded as a run would load it (a confined worker, checked, under the manifest's budgets), but
// its default export is not called, and nothing is journaled: the journal is a throw-away file.
#include <nlohmann/json.hpp>

#include <set>
#include <string>

#include "basal/module.h"
#include "cli/cli_support.h"
#include "cli/commands.h"
#include "parent/secrets/secret_store.h"

namespace basal::cli {
namespace {

// The names of every "${secret:NAME}" in the manifest's strings: an http.fetch rule's headers and
// an MCP server's env are where a manifest names secrets, and both use this one form.
void CollectSecretNames(const nlohmann::json& value, std::set<std::string>& names) {
  if (value.is_object() || value.is_array()) {
    for (const auto& item : value) CollectSecretNames(item, names);
    return;
  }
  if (!value.is_string()) return;
  const std::string& text = value.get_ref<const std::string&>();
  constexpr std::string_view kOpen = "${secret:";
  for (size_t at = text.find(kOpen); at != std::string::npos; at = text.find(kOpen, at + 1)) {
    const size_t end = text.find('}', at);
    if (end == std::string::npos) break;
    names.insert(text.substr(at + kOpen.size(), end - at - kOpen.size()));
  }
}

// A flow that loads can still fail at its first call for a secret nobody stored: say so now. Only a
// warning: the check may run on another machine than the one that will run the flow.
std::string MissingSecretWarnings(const CheckOptions& o, const std::string& manifest_text) {
  std::set<std::string> names;
  auto parsed = nlohmann::json::parse(manifest_text, nullptr, /*allow_exceptions=*/false);
  CollectSecretNames(parsed, names);
  if (names.empty()) return "";
  std::string dir = o.secrets_dir;
  if (dir.empty()) {
    auto journal = o.db_path.empty() ? DefaultJournalPath() : Result<std::string>(o.db_path);
    if (!journal) return "warning: the manifest names secrets, and there is no journal to look for them beside (" +
                         EscapeForTerminal(journal.error().message) + ")\n";
    dir = SecretsDirForJournal(*journal);
  }
  std::set<std::string> stored;
  auto store = SecretStore::Open(dir, /*create=*/false);
  if (store) {
    auto list = store->List();
    if (list) stored.insert(list->begin(), list->end());
  }
  const std::string where = !o.secrets_dir.empty() ? " --secrets " + EscapeForTerminal(dir)
                            : !o.db_path.empty()    ? " --db " + EscapeForTerminal(o.db_path)
                                                    : std::string();
  std::string out;
  for (const std::string& name : names) {
    if (stored.count(name)) continue;
    out += "warning: the manifest names secret " + EscapeForTerminal(name) + ", which is not stored in " +
           EscapeForTerminal(dir) + ": its calls will fail until it is (basal secret set " + EscapeForTerminal(name) +
           where + ")\n";
  }
  return out;
}

}  // namespace

int CheckCommand(const CheckOptions& o) {
  auto files = ReadFlowFiles(o.flow_path, o.manifest_path);
  if (!files) return Fail(kKindIo, files.error().message);

  ModuleOptions mo;
  auto worker = WorkerPath(o.worker_path);
  if (!worker) return Fail(kKindIo, worker.error().message);
  mo.worker_path = *worker;
  ScratchDir scratch("basal-check");
  if (!scratch.ok()) return Fail(kKindIo, "cannot create a temporary directory for the check's journal (set TMPDIR)");
  mo.journal_path = scratch.journal();
  mo.allow_without_landlock = o.allow_without_landlock;
  mo.worker_user = o.worker_user;
  mo.max_workers = 1;
#ifdef BASAL_TEST_HOOKS
  mo.worker_args = o.worker_args;
#endif

  auto module = Module::Open(mo);
  if (!module) return Fail(KindForOpenError(module.error()), module.error().message);
  auto flow = AddFlowFiles(**module, *files, ParseProfile(o.profile));
  if (!flow)
    return Fail(flow.error().code == ErrorCode::kInvalidArgument ? kKindManifest : kKindSetup, flow.error().message);
  auto check = (*module)->CheckLoad(*flow);
  if (!check) return Fail(kKindSetup, check.error().message);
  if (!check->ok()) return ReportLoadFailure(o.flow_path, *check);
  WriteStdout(EscapeForTerminal(o.manifest_path) + ": a valid manifest\n" + EscapeForTerminal(o.flow_path) +
              ": loads in a confined worker; its default export is a function (not called)\n" +
              MissingSecretWarnings(o, files->manifest_text));
  return kExitOk;
}

}  // namespace basal::cli
