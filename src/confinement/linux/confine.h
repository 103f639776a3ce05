// ConfineWorker: the worker's whole Linux confinement as one ordered checklist (docs/sandbox.md).
// ck-basal-worker calls it first thing in main, before it reads its first message:
//
//   const ConfinementReport report = ConfineWorker(options);   // exits 70 on any failure
//   Send(welcome with report.ToJson());
//
// After it returns (with default options) the worker can only do what the table in
// seccomp_policy.cpp admits: use raw read(0)/write(1|2), never stdio (glibc's stdio calls fstat).
#pragma once

#include <linux/filter.h>
#include <sys/types.h>

#include <optional>
#include <span>
#include <string>

#include "confinement/linux/credentials.h"

namespace basal::confinement {

inline constexpr int kWorkerLandlockAbiMax = 7;    // the worker knows Landlock ABIs 1..7
inline constexpr int kExitConfinementFailed = 70;  // documented worker exit code
// Documented worker exit code: the process that started the worker (ConfineOptions::parent_pid)
// is no longer its parent, so it died before the death signal was set; nobody reads the worker.
inline constexpr int kExitParentGone = 69;

// Every field is false in release builds: the worker sets them only when compiled with
// BASAL_TEST_HOOKS (from argv switches), so the parent's refusal of a weak worker can be tested.
// ConfineWorker refuses (exit 70) a set field in a build without BASAL_TEST_HOOKS.
struct ConfineOptions {
  // The seccomp program compiled at build time (WorkerSeccompProgram(), seccomp_program.h); the
  // worker's pid and tid are patched in. Empty: confinement fails (never a weaker sandbox).
  std::span<const sock_filter> seccomp_program;
  // The pid of the parent that started the worker (its --parent-pid argument). Must be > 1:
  // ConfineWorker exits 70 otherwise, and kExitParentGone if getppid() differs once the parent
  // death signal is set.
  pid_t parent_pid = 0;
  // The user and group to become (the worker's --uid/--gid, passed by a parent that runs as
  // root). Unset: the worker keeps its ids and only empties its capability sets.
  std::optional<WorkerIdentity> run_as;
  // RLIMIT_AS (soft and hard) the worker sets on itself before anything else (its
  // --address-space-limit argument); 0: left as inherited.
  uint64_t address_space_limit_bytes = 0;
  // RLIMIT_CPU (soft, hard) in seconds the worker sets on itself (its --cpu-limit argument): the
  // kernel's backstop behind the parent's own CPU measurement. 0: left as inherited.
  uint64_t cpu_limit_soft_seconds = 0;
  uint64_t cpu_limit_hard_seconds = 0;
  bool weaken_startup_checks = false;  // a failed startup check is reported, not fatal
  bool skip_landlock = false;
  bool skip_seccomp = false;
};

// What the worker reports in its welcome, layer by layer. The parent decides from it.
struct ConfinementReport {
  uint64_t address_space_limit_bytes = 0;  // as set, 0 if none was asked for
  uint64_t cpu_limit_soft_seconds = 0;     // likewise
  uint64_t cpu_limit_hard_seconds = 0;
  CredentialReport privileges;
  bool startup_checks_passed = false;
  bool startup_checks_weakened = false;
  bool descriptors_closed = false;
  bool no_new_privs = false;
  bool dumpable = true;  // must end false
  int landlock_abi = 0;         // ABI of the ruleset installed, 0 if none
  int landlock_kernel_abi = 0;  // what the kernel reported (0 if it lacks Landlock)
  std::string landlock_absent_reason;  // empty when installed, else why
  bool seccomp_installed = false;
  bool seccomp_tsync = false;

  // One JSON object:
  // {"address_space_limit":N,"cpu_limit":{"soft_seconds":N,"hard_seconds":N},"privileges":{"uid":N,"gid":N,"supplementary_groups":N,"capabilities_empty":B,
  //  "ambient_empty":B,"bounding_set_empty":B},"startup_checks":{"passed":B,"weakened":B},"descriptors_closed":B,"no_new_privs":B,
  //  "dumpable":B,"landlock":{"abi":N,"kernel_abi":N[,"absent":"..."]},
  //  "seccomp":{"installed":B,"tsync":B}}
  std::string ToJson() const;
};

// First the address-space and CPU limits (limits.h) and the privileges (credentials.h: options.run_as,
// every capability set emptied), then the
// parent death signal (SIGKILL when the parent dies; set after the credential change, which
// clears it) and the check that getppid() is still options.parent_pid (else "ck-basal-worker:
// parent <pid> is gone ..." and exit kExitParentGone). Step 0 prepares the process to live under the filter (SIGPIPE ignored; TZ=UTC0 and localtime
// primed so glibc never stats /etc/localtime; malloc primed, since its first call uses
// getrandom), then steps 1-6 in the design's order: startup checks, descriptor close,
// no_new_privs and non-dumpable, Landlock, descriptor close, seccomp. A failed step writes
// "ck-basal-worker: confinement failed: <step>: <reason>\n" to fd 2 with raw write(2) and exits
// kExitConfinementFailed. It never falls back to a weaker sandbox. It returns only when fully
// confined (or as weakened as options, in a BASAL_TEST_HOOKS build, asked). Call it on the
// process's only thread.
ConfinementReport ConfineWorker(const ConfineOptions& options);

// landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION); 0 when the kernel lacks
// Landlock. For the parent, which computes the ABI it demands itself.
int KernelLandlockAbi();

}  // namespace basal::confinement
