// Credentials and capabilities: the first step of the worker's confinement. A worker started by a
// root parent becomes an unprivileged user and group (the parent names them with --uid/--gid,
// since posix_spawn cannot change them) and every capability set is emptied; a worker started
// by an unprivileged parent keeps its ids and empties what it can. Each result is read back from
// the kernel, not assumed, and the parent checks it again from outside (/proc/PID/status).
//
//   CredentialReport report;
//   StepStatus s = DropCredentials(WorkerIdentity{65534, 65534}, report);
//   if (!s.ok()) Fail("privileges", s.reason());   // e.g. "setresuid(70000) failed: Invalid argument"
//
// Changing the uid clears the parent death signal (the kernel resets it on a credential change),
// so ConfineWorker calls this before it sets that signal.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>

#include "confinement/linux/step_status.h"

namespace basal::confinement {

// The unprivileged user and group a worker of a root parent runs as. Neither may be 0.
struct WorkerIdentity {
  uid_t uid = 0;
  gid_t gid = 0;
};

// What the worker reports in its welcome (ConfinementReport::ToJson, "privileges").
struct CredentialReport {
  uid_t uid = 0;                  // real = effective = saved = filesystem uid after the step
  gid_t gid = 0;                  // likewise
  int supplementary_groups = -1;  // getgroups() count
  bool capabilities_empty = false;  // effective, permitted and inheritable (capget)
  bool ambient_empty = false;       // PR_CAP_AMBIENT_IS_SET is 0 for every capability
  bool bounding_set_empty = false;  // PR_CAPBSET_READ is 0 for every capability
};

// With `run_as`: drops every capability from the bounding set (while CAP_SETPCAP is still in
// effect), locks the securebits that keep root powerless (SECBIT_NOROOT, KEEP_CAPS off,
// NO_SETUID_FIXUP off, NO_CAP_AMBIENT_RAISE, each locked), clears the supplementary groups, then
// setresgid and setresuid to `run_as` (which empties the effective, permitted and ambient sets).
// Without it: keeps the ids, and drops the bounding set only if CAP_SETPCAP allows it (an
// unprivileged process has no capability to lose). Either way the ambient set is cleared and the
// effective, permitted and inheritable sets are set to empty, then everything is read back:
// the ids (getresuid/getresgid), the groups, capget, the ambient set, and (with `run_as`) the
// bounding set. A `run_as` with uid or gid 0 fails.
StepStatus DropCredentials(const std::optional<WorkerIdentity>& run_as, CredentialReport& report);

// The highest capability number this kernel knows (the bounding set answers EINVAL above it),
// found with PR_CAPBSET_READ so that no /proc/sys file is needed.
int LastCapability();

}  // namespace basal::confinement
