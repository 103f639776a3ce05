// `basal check FLOW.js --manifest M.json`: is the manifest valid, and does the flow load? The flow
// is loaded as a run would load it (a confined worker, checked, under the manifest's budgets), but
// its default export is not called, and nothing is journaled: the journal is a throw-away file.
#include <string>

#include "basal/module.h"
#include "cli/cli_support.h"
#include "cli/commands.h"

namespace basal::cli {

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
              ": loads in a confined worker; its default export is a function (not called)\n");
  return kExitOk;
}

}  // namespace basal::cli
