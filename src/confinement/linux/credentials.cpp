#include "confinement/linux/credentials.h"

#include <grp.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <sys/fsuid.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <string>

namespace basal::confinement {
namespace {

// The securebits a worker that changed its ids locks: root (uid 0) never regains capabilities
// (NOROOT), a later setuid always clears them (NO_SETUID_FIXUP off, KEEP_CAPS off) and no
// ambient capability can be raised; each with its lock bit, so nothing can flip them back.
constexpr unsigned kLockedSecurebits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP_LOCKED |
                                       SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE |
                                       SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
// The bits that must then be off.
constexpr unsigned kClearSecurebits = SECBIT_NO_SETUID_FIXUP | SECBIT_KEEP_CAPS;

struct CapSets {
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
};

bool CapGet(CapSets& sets) {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  return syscall(SYS_capget, &header, sets.data) == 0;
}

bool CapSetEmpty() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  CapSets empty;
  return syscall(SYS_capset, &header, empty.data) == 0;
}

bool HasEffective(const CapSets& sets, int cap) {
  return (sets.data[cap / 32].effective & (1u << (cap % 32))) != 0;
}

std::string Cap(const char* what, int cap) { return std::string(what) + "(capability " + std::to_string(cap) + ")"; }

StepStatus DropBoundingSet(int last_cap) {
  for (int cap = 0; cap <= last_cap; ++cap) {
    const int in_set = prctl(PR_CAPBSET_READ, cap, 0, 0, 0);
    if (in_set < 0) return StepStatus::Failed(SyscallFailure(Cap("prctl(PR_CAPBSET_READ)", cap).c_str(), errno));
    if (in_set == 1 && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0)
      return StepStatus::Failed(SyscallFailure(Cap("prctl(PR_CAPBSET_DROP)", cap).c_str(), errno));
  }
  return StepStatus::Passed();
}

StepStatus LockSecurebits() {
  if (prctl(PR_SET_SECUREBITS, kLockedSecurebits, 0, 0, 0) != 0)
    return StepStatus::Failed(SyscallFailure("prctl(PR_SET_SECUREBITS)", errno));
  const int now = prctl(PR_GET_SECUREBITS, 0, 0, 0, 0);
  if (now < 0) return StepStatus::Failed(SyscallFailure("prctl(PR_GET_SECUREBITS)", errno));
  const auto bits = static_cast<unsigned>(now);
  if ((bits & kLockedSecurebits) != kLockedSecurebits || (bits & kClearSecurebits) != 0)
    return StepStatus::Failed("PR_GET_SECUREBITS answers " + std::to_string(bits) + " after it was set to " +
                              std::to_string(kLockedSecurebits));
  return StepStatus::Passed();
}

StepStatus ChangeIds(const WorkerIdentity& id) {
  if (setgroups(0, nullptr) != 0) return StepStatus::Failed(SyscallFailure("setgroups(0)", errno));
  if (setresgid(id.gid, id.gid, id.gid) != 0)
    return StepStatus::Failed(SyscallFailure(("setresgid(" + std::to_string(id.gid) + ")").c_str(), errno));
  if (setresuid(id.uid, id.uid, id.uid) != 0)
    return StepStatus::Failed(SyscallFailure(("setresuid(" + std::to_string(id.uid) + ")").c_str(), errno));
  return StepStatus::Passed();
}

// Reads every id and set back into `report`; with `run_as`, they must be exactly what was asked.
StepStatus ReadBack(const std::optional<WorkerIdentity>& run_as, int last_cap, CredentialReport& report) {
  uid_t ruid, euid, suid;
  gid_t rgid, egid, sgid;
  if (getresuid(&ruid, &euid, &suid) != 0) return StepStatus::Failed(SyscallFailure("getresuid", errno));
  if (getresgid(&rgid, &egid, &sgid) != 0) return StepStatus::Failed(SyscallFailure("getresgid", errno));
  // The filesystem ids follow the effective ones; setfsuid with an invalid id only reports them.
  const auto fsuid = static_cast<uid_t>(setfsuid(static_cast<uid_t>(-1)));
  const auto fsgid = static_cast<gid_t>(setfsgid(static_cast<gid_t>(-1)));
  if (ruid != euid || euid != suid || suid != fsuid)
    return StepStatus::Failed("uids differ: real " + std::to_string(ruid) + ", effective " + std::to_string(euid) +
                              ", saved " + std::to_string(suid) + ", filesystem " + std::to_string(fsuid));
  if (rgid != egid || egid != sgid || sgid != fsgid)
    return StepStatus::Failed("gids differ: real " + std::to_string(rgid) + ", effective " + std::to_string(egid) +
                              ", saved " + std::to_string(sgid) + ", filesystem " + std::to_string(fsgid));
  report.uid = ruid;
  report.gid = rgid;
  const int groups = getgroups(0, nullptr);
  if (groups < 0) return StepStatus::Failed(SyscallFailure("getgroups", errno));
  report.supplementary_groups = groups;

  CapSets sets;
  if (!CapGet(sets)) return StepStatus::Failed(SyscallFailure("capget", errno));
  report.capabilities_empty = true;
  for (const auto& d : sets.data) report.capabilities_empty &= d.effective == 0 && d.permitted == 0 && d.inheritable == 0;
  report.ambient_empty = true;
  report.bounding_set_empty = true;
  for (int cap = 0; cap <= last_cap; ++cap) {
    const int ambient = prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, cap, 0, 0);
    if (ambient < 0) return StepStatus::Failed(SyscallFailure(Cap("prctl(PR_CAP_AMBIENT_IS_SET)", cap).c_str(), errno));
    report.ambient_empty &= ambient == 0;
    const int bounding = prctl(PR_CAPBSET_READ, cap, 0, 0, 0);
    if (bounding < 0) return StepStatus::Failed(SyscallFailure(Cap("prctl(PR_CAPBSET_READ)", cap).c_str(), errno));
    report.bounding_set_empty &= bounding == 0;
  }
  if (!report.capabilities_empty) return StepStatus::Failed("capget still shows capabilities after they were cleared");
  if (!report.ambient_empty) return StepStatus::Failed("the ambient set is not empty after PR_CAP_AMBIENT_CLEAR_ALL");
  if (!run_as) return StepStatus::Passed();
  if (ruid != run_as->uid || rgid != run_as->gid)
    return StepStatus::Failed("after setresuid/setresgid the worker is uid " + std::to_string(ruid) + " gid " +
                              std::to_string(rgid) + ", not uid " + std::to_string(run_as->uid) + " gid " +
                              std::to_string(run_as->gid));
  if (groups != 0)
    return StepStatus::Failed(std::to_string(groups) + " supplementary groups remain after setgroups(0)");
  if (!report.bounding_set_empty) return StepStatus::Failed("the bounding set is not empty after PR_CAPBSET_DROP");
  return StepStatus::Passed();
}

}  // namespace

int LastCapability() {
  // Capability numbers are dense from 0; PR_CAPBSET_READ answers EINVAL past the last one.
  int cap = 0;
  while (cap < 1024 && prctl(PR_CAPBSET_READ, cap + 1, 0, 0, 0) >= 0) ++cap;
  return cap;
}

StepStatus DropCredentials(const std::optional<WorkerIdentity>& run_as, CredentialReport& report) {
  const int last_cap = LastCapability();
  if (run_as) {
    if (run_as->uid == 0 || run_as->gid == 0)
      return StepStatus::Failed("asked to run as uid " + std::to_string(run_as->uid) + " gid " +
                                std::to_string(run_as->gid) + ": a worker never runs as root");
    // Bounding set and securebits first: both need CAP_SETPCAP, which setresuid takes away.
    if (StepStatus s = DropBoundingSet(last_cap); !s.ok()) return s;
    if (StepStatus s = LockSecurebits(); !s.ok()) return s;
    if (StepStatus s = ChangeIds(*run_as); !s.ok()) return s;
  } else {
    CapSets sets;
    if (!CapGet(sets)) return StepStatus::Failed(SyscallFailure("capget", errno));
    if (HasEffective(sets, CAP_SETPCAP)) {
      if (StepStatus s = DropBoundingSet(last_cap); !s.ok()) return s;
    }
  }
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0)
    return StepStatus::Failed(SyscallFailure("prctl(PR_CAP_AMBIENT_CLEAR_ALL)", errno));
  // setresuid from root emptied the effective and permitted sets but not the inheritable one;
  // lowering every set to empty is always allowed.
  if (!CapSetEmpty()) return StepStatus::Failed(SyscallFailure("capset(empty)", errno));
  return ReadBack(run_as, last_cap, report);
}

}  // namespace basal::confinement
