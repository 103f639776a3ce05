#include "confinement/linux/confine.h"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <ctime>
#include <string>
#include <string_view>
#include <vector>

#include "confinement/linux/credentials.h"
#include "confinement/linux/descriptors.h"
#include "confinement/linux/landlock.h"
#include "confinement/linux/limits.h"
#include "confinement/linux/privileges.h"
#include "confinement/linux/seccomp_program.h"
#include "confinement/linux/startup_checks.h"

namespace basal::confinement {
namespace {

[[noreturn]] void ExitWithLine(const std::string& line, int code) {
  size_t off = 0;
  while (off < line.size()) {
    const ssize_t n = write(STDERR_FILENO, line.data() + off, line.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
  _exit(code);
}

[[noreturn]] void Fail(std::string_view step, std::string_view reason) {
  std::string line = "ck-basal-worker: confinement failed: ";
  line += step;
  line += ": ";
  line += reason;
  line += '\n';
  ExitWithLine(line, kExitConfinementFailed);
}

// Called with the death signal already set: if getppid() is still the parent that started the
// worker, its death from now on kills the worker. If it is not, the parent died before the prctl
// (getppid() is a reaper's pid) and no signal will ever come: leave at once.
void RequireParent(pid_t parent_pid) {
  const pid_t now = getppid();
  if (now == parent_pid) return;
  ExitWithLine("ck-basal-worker: parent " + std::to_string(parent_pid) + " is gone (the parent is now " +
                   std::to_string(now) + "): exiting\n",
               kExitParentGone);
}

void Require(std::string_view step, const StepStatus& status) {
  if (!status.ok()) Fail(step, status.reason());
}

// Step 0: everything glibc would otherwise do lazily, later, with a call the filter kills.
StepStatus PrepareForFilter() {
  // A parent that goes away must be a clean EPIPE, not a death by signal.
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  if (sigaction(SIGPIPE, &ignore, nullptr) != 0) return StepStatus::Failed(SyscallFailure("sigaction(SIGPIPE)", errno));
  // With TZ unset, localtime stats /etc/localtime on every call; with TZ set it reads its zone
  // once (the first tzset may look for a zone file of that name) and never again.
  if (setenv("TZ", "UTC0", 1) != 0) return StepStatus::Failed(SyscallFailure("setenv TZ", errno));
  tzset();
  const time_t now = time(nullptr);
  struct tm parts {};
  if (localtime_r(&now, &parts) == nullptr || localtime(&now) == nullptr || gmtime_r(&now, &parts) == nullptr) {
    return StepStatus::Failed("priming localtime failed");
  }
  // malloc's first call seeds its tcache key with getrandom; make that call now.
  void* volatile block = std::malloc(64);
  if (block == nullptr) return StepStatus::Failed("priming malloc failed");
  std::free(block);
  return StepStatus::Passed();
}

void AppendEscaped(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      out += "\\u00";
      out += kHex[u >> 4];
      out += kHex[u & 0xf];
    } else {
      out += c;
    }
  }
  out += '"';
}

const char* Bool(bool b) { return b ? "true" : "false"; }

}  // namespace

std::string ConfinementReport::ToJson() const {
  std::string j = "{\"address_space_limit\":";
  j += std::to_string(address_space_limit_bytes);
  j += ",\"cpu_limit\":{\"soft_seconds\":";
  j += std::to_string(cpu_limit_soft_seconds);
  j += ",\"hard_seconds\":";
  j += std::to_string(cpu_limit_hard_seconds);
  j += "},\"privileges\":{\"uid\":";
  j += std::to_string(privileges.uid);
  j += ",\"gid\":";
  j += std::to_string(privileges.gid);
  j += ",\"supplementary_groups\":";
  j += std::to_string(privileges.supplementary_groups);
  j += ",\"capabilities_empty\":";
  j += Bool(privileges.capabilities_empty);
  j += ",\"ambient_empty\":";
  j += Bool(privileges.ambient_empty);
  j += ",\"bounding_set_empty\":";
  j += Bool(privileges.bounding_set_empty);
  j += "},\"startup_checks\":{\"passed\":";
  j += Bool(startup_checks_passed);
  j += ",\"weakened\":";
  j += Bool(startup_checks_weakened);
  j += "},\"descriptors_closed\":";
  j += Bool(descriptors_closed);
  j += ",\"no_new_privs\":";
  j += Bool(no_new_privs);
  j += ",\"dumpable\":";
  j += Bool(dumpable);
  j += ",\"landlock\":{\"abi\":";
  j += std::to_string(landlock_abi);
  j += ",\"kernel_abi\":";
  j += std::to_string(landlock_kernel_abi);
  if (!landlock_absent_reason.empty()) {
    j += ",\"absent\":";
    AppendEscaped(j, landlock_absent_reason);
  }
  j += "},\"seccomp\":{\"installed\":";
  j += Bool(seccomp_installed);
  j += ",\"tsync\":";
  j += Bool(seccomp_tsync);
  j += "}}";
  return j;
}

int KernelLandlockAbi() { return ProbeKernelLandlock().abi; }

ConfinementReport ConfineWorker(const ConfineOptions& options) {
  ConfinementReport report;
#ifndef BASAL_TEST_HOOKS
  if (options.weaken_startup_checks || options.skip_landlock || options.skip_seccomp) {
    Fail("options", "a switch that weakens confinement is set, but this build has no BASAL_TEST_HOOKS");
  }
#endif

  if (options.parent_pid <= 1) Fail("options", "no parent pid (ck-basal-worker is started with --parent-pid)");

  // First the limits and privileges the parent asked for and could not apply itself: RLIMIT_AS and
  // RLIMIT_CPU (a root parent without CAP_SYS_RESOURCE cannot prlimit a worker of another uid), then the
  // unprivileged user and group (a root parent's worker is exec'd as root, since posix_spawn
  // cannot change ids), every capability set emptied.
  if (options.address_space_limit_bytes > 0) {
    Require("limits", LimitAddressSpace(options.address_space_limit_bytes));
    report.address_space_limit_bytes = options.address_space_limit_bytes;
  }
  if (options.cpu_limit_hard_seconds > 0) {
    Require("limits", LimitCpuTime(options.cpu_limit_soft_seconds, options.cpu_limit_hard_seconds));
    report.cpu_limit_soft_seconds = options.cpu_limit_soft_seconds;
    report.cpu_limit_hard_seconds = options.cpu_limit_hard_seconds;
  }
  Require("privileges", DropCredentials(options.run_as, report.privileges));

  // Then bound the worker's life by its parent's: SIGKILL when the parent dies, however it dies.
  // The closed pipe alone would not do: a script in a loop never reads it, and the deadline that
  // would end it is enforced by the parent. After the credential change, which clears the signal.
  Require("parent death signal", SetParentDeathSignal());
  RequireParent(options.parent_pid);

  // 0. Prepare to live under the filter.
  Require("prepare", PrepareForFilter());

  // 1. Startup checks (before 3 and 4, which make /proc/self unreadable).
  const StepStatus checks = RunStartupChecks();
  report.startup_checks_passed = checks.ok();
  report.startup_checks_weakened = options.weaken_startup_checks;
  if (!checks.ok() && !options.weaken_startup_checks) Fail("startup checks", checks.reason());

  // 2. Every descriptor above stdio closed.
  Require("descriptor close", CloseDescriptorsAboveStdio());
  report.descriptors_closed = true;

  // 3. no_new_privs, then non-dumpable.
  Require("no_new_privs", SetNoNewPrivs());
  report.no_new_privs = true;
  Require("non-dumpable", MakeNonDumpable());
  report.dumpable = prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) != 0;

  // 4. Landlock: an empty ruleset at min(kernel ABI, kWorkerLandlockAbiMax).
  const LandlockProbe probe = ProbeKernelLandlock();
  report.landlock_kernel_abi = probe.abi;
  if (options.skip_landlock) {
    report.landlock_absent_reason = "skipped by test switch";
  } else if (probe.abi == 0 && !probe.lacks_landlock) {
    Fail("landlock", probe.why_absent);
  } else if (probe.abi == 0) {
    // Not a fallback: the parent refuses this worker unless its operator policy allows a kernel
    // without Landlock.
    report.landlock_absent_reason = probe.why_absent;
  } else {
    const int abi = std::min(probe.abi, kWorkerLandlockAbiMax);
    Require("landlock", RestrictSelfWithEmptyRuleset(abi));
    report.landlock_abi = abi;
  }

  // 5. Descriptors closed again: nothing from step 4 survives.
  Require("descriptor close after landlock", CloseDescriptorsAboveStdio());

  // 6. seccomp, on all threads.
  if (!options.skip_seccomp) {
    std::vector<sock_filter> program;
    std::string why;
    if (!PatchProgram(options.seccomp_program, FilterContext{getpid(), gettid()}, program, why)) Fail("seccomp", why);
    Require("seccomp", LoadProgram(program));
    report.seccomp_installed = true;
    report.seccomp_tsync = true;  // Install() loads with SECCOMP_FILTER_FLAG_TSYNC or fails
  }
  return report;
}

}  // namespace basal::confinement
