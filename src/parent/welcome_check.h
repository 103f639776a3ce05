// The parent's verdict on a new worker: accepted only if its welcome reports the confinement this
// operating system requires (docs/sandbox.md) AND the kernel's view of the process agrees
// (/proc/PID/status: seccomp filter, no_new_privs, ids and capability sets). A welcome is a claim
// by a process the parent does not trust; the kernel's view is not. The required Landlock ABI is
// computed here, from the kernel, never taken from the worker.
//
// The Welcome rule per system (CheckWelcome, pure): a worker is accepted only by a parent of its
// own system, and only with that system's confinement report, never another's:
//   Linux    seccomp installed (TSYNC) and, under the default policy, Landlock at the highest ABI
//            both the kernel and the worker support, plus the privilege claims;
//   macOS    the Seatbelt profile worker.sb applied, descriptors above stdio closed;
//   Windows  all five confinement fields true (thread token reverted, token, handles closed,
//            mitigations, handle table attested) and the handle profile the table fit.
//
//   WelcomeVerdict v = CheckWorker(welcome, process, policy);   // reads /proc/<pid>/status
//   if (!v.accepted) { kill; fail the activation as worker_refused with v.reason; }
#pragma once

#include <optional>
#include <string>

#include "parent/platform/linux/proc_status.h"
#include "parent/platform/platform.h"
#include "parent/platform/worker_launcher.h"
#include "protocol/messages.h"

namespace basal {

// What the kernel offers: landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION), 0 if absent.
int KernelLandlockAbi();

// Whether this parent was built with BASAL_TEST_HOOKS: only such a parent accepts a worker that
// reports test hooks (a worker that can be told to weaken itself).
#ifdef BASAL_TEST_HOOKS
inline constexpr bool kParentHasTestHooks = true;
#else
inline constexpr bool kParentHasTestHooks = false;
#endif

// The Windows worker's report: five booleans, each a confinement step it attested, and the
// handle-table profile its inventory fit (windows-latest or windows-2022, never their union).
inline constexpr const char* kWindowsConfinementFields[] = {"thread_token_reverted", "token_attested", "handles_closed",
                                                            "mitigations_attested", "handle_table_attested"};
inline constexpr const char* kWindowsHandleProfileField = "handle_profile";
// The macOS worker's report.
inline constexpr const char* kMacosConfinementFields[] = {"seatbelt", "descriptors_closed"};

struct WelcomePolicy {
  bool allow_without_landlock = false;  // and then only when the kernel lacks Landlock
  int kernel_landlock_abi = 0;          // as KernelLandlockAbi() returned
  // Set when the parent runs as root (ResolveWorkerUser): every worker must run as exactly this
  // uid and gid, with no supplementary group but that gid and an empty bounding set.
  std::optional<WorkerCredentials> worker_identity;
  bool accept_test_hooks = kParentHasTestHooks;
  // The system this parent runs on: it accepts only workers of that system (last, so positional
  // initializers of the fields above keep their meaning).
  WorkerOs parent_os = kThisWorkerOs;
};

struct WelcomeVerdict {
  bool accepted = false;
  int required_landlock_abi = 0;
  std::string reason;  // why refused, or a summary of what was accepted
  std::optional<ProcStatus> kernel_view;  // what /proc/PID/status said, when it could be read
};

// The welcome's claims alone (pure): protocol, os (that of policy.parent_os), pid, test hooks, and
// the confinement report that system requires.
WelcomeVerdict CheckWelcome(const protocol::Welcome& welcome, pid_t expected_pid, const WelcomePolicy& policy);

// The kernel's view alone (pure): Seccomp 2 with at least one filter (Seccomp_filters, where the
// kernel has it: Linux 5.9+), NoNewPrivs 1, CapEff, CapPrm, CapInh and CapAmb all zero, not a
// zombie; with policy.worker_identity also all four Uid and Gid values equal to it, Groups empty
// or only that gid, and CapBnd zero; without it, no Uid value 0. The reason names the field and
// the value the kernel showed.
WelcomeVerdict CheckKernelView(const ProcStatus& status, const WelcomePolicy& policy);

// The limits the worker was told to set (pure): /proc/PID/limits must show each one asked for
// (nonzero in `asked`) exactly, soft and hard. Empty when it does; else the reason.
std::string CheckLimits(const ProcLimits& shown, const WorkerLimits& asked);

// Both, for a worker that has just sent `welcome`: CheckWelcome, then /proc/<pid>/status of
// `process` (CheckKernelView) and, if it was launched with any, its limits in /proc/<pid>/limits
// (CheckLimits). Safe against pid reuse because the worker is this parent's child and not yet reaped
// (a reaped one is refused): until the parent waits for it, its pid names it or its zombie, never
// another process. Every property checked is one the process cannot undo (a seccomp filter stays,
// no_new_privs stays, capabilities once dropped without CAP_SETPCAP or a privileged exec never
// return), so what is seen now holds for the worker's life.
WelcomeVerdict CheckWorker(const protocol::Welcome& welcome, const WorkerProcess& process, const WelcomePolicy& policy);

}  // namespace basal
