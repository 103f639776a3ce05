// `basal doctor`: starts one worker, shows what its welcome reports about confinement and
// whether the parent accepts it. Runs no flow; its journal is a throw-away file. The welcome and
// the verdict (which may quote the worker's stderr) are the worker's words: shown escaped.
#include <algorithm>
#include <cstdio>
#include <string>

#include "basal/module.h"
#include "cli/cli_support.h"
#include "cli/commands.h"

namespace basal::cli {

int DoctorCommand(const DoctorOptions& o) {
  ModuleOptions mo;
  auto worker = WorkerPath(o.worker_path);
  if (!worker) return Fail(kKindIo, worker.error().message);
  mo.worker_path = *worker;
  ScratchDir scratch("basal-doctor");
  if (!scratch.ok()) return Fail(kKindIo, "cannot create a temporary directory for the doctor's journal (set TMPDIR)");
  mo.journal_path = scratch.journal();
  mo.allow_without_landlock = o.allow_without_landlock;
  mo.worker_user = o.worker_user;
#ifdef BASAL_TEST_HOOKS
  mo.worker_args = o.worker_args;
#endif

  auto module = Module::Open(mo);
  if (!module) return Fail(KindForOpenError(module.error()), module.error().message);
  const Module::DoctorReport report = (*module)->Doctor();

  std::string out;
  out += "worker:                " + mo.worker_path + "\n";
  out += "kernel Landlock ABI:   " +
         (report.kernel_landlock_abi > 0 ? std::to_string(report.kernel_landlock_abi) : std::string("none")) + "\n";
  out += "required Landlock ABI: " +
         (report.required_landlock_abi > 0 ? std::to_string(report.required_landlock_abi)
                                           : std::string("none (allowed without Landlock)")) +
         "\n";
  if (report.welcome.is_null()) {
    out += "welcome:               none arrived\n";
  } else {
    const nlohmann::json& w = report.welcome;
    auto field = [&w](const char* key) {
      if (!w.is_object() || !w.contains(key)) return std::string("?");
      const nlohmann::json& v = w[key];
      return v.is_string() ? EscapeForTerminal(v.get<std::string>()) : JsonForTerminal(v);
    };
    out += "welcome:               protocol " + field("protocol") + ", os " + field("os") + ", engine " +
           field("engine") + ", pid " + field("pid") + ", test_hooks " + field("test_hooks") + "\n";
    const nlohmann::json& confinement =
        w.is_object() && w.contains("confinement") ? w["confinement"] : report.welcome;
    out += "confinement report:\n";
    out += JsonForTerminal(confinement, 2) + "\n";
  }
  out += "parent uid:            " + std::to_string(report.parent_uid) +
         (report.parent_uid == 0 ? " (root: workers drop to the worker user)" : " (not root: workers keep this uid)") + "\n";
  if (!report.worker_user.empty()) out += "worker user:           " + EscapeForTerminal(report.worker_user) + "\n";
  if (report.kernel_view.empty()) {
    out += "kernel view of worker: not read\n";
  } else {
    out += "kernel view of worker (/proc/PID/status):\n";
    for (const auto& [field, value] : report.kernel_view) {
      std::string label = "  " + field + ":";
      label.resize(std::max<size_t>(label.size() + 1, 20), ' ');  // values in one column
      // The parser admitted only digits, hex digits and blanks here: nothing to escape.
      std::string shown = value;
      std::replace(shown.begin(), shown.end(), '\t', ' ');
      if (shown.empty()) shown = "(none)";
      out += label + shown + "\n";
    }
  }
  if (report.parent_uid == 0 && report.worker_privileged)
    out += "warning: basal runs as root and this worker keeps root or capabilities; basal refuses such a worker "
           "(is ck-basal-worker older than basal?)\n";
  out += std::string("accepted: ") + (report.accepted ? "yes" : "no") + " (" + EscapeForTerminal(report.verdict) + ")\n";
  WriteStdout(out);
  // A refused worker is the check's answer, not basal failing: 1, like a flow that failed.
  return report.accepted ? kExitOk : kExitFlowFailed;
}

}  // namespace basal::cli
