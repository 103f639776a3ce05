#include "confinement/linux/landlock.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

namespace basal::confinement {
namespace {

constexpr uint32_t kCreateRulesetVersion = 1U << 0;  // LANDLOCK_CREATE_RULESET_VERSION

long CreateRuleset(const LandlockRulesetAttr* attr, size_t size, uint32_t flags) {
  return syscall(SYS_landlock_create_ruleset, attr, size, flags);
}

}  // namespace

LandlockRuleset EmptyRulesetForAbi(int abi) {
  using namespace landlock_rights;
  LandlockRuleset r{{0, 0, 0}, 0};
  if (abi < 1 || abi > 7) return r;
  r.attr.handled_access_fs = kFsAbi1;
  r.attr_size = offsetof(LandlockRulesetAttr, handled_access_net);
  if (abi >= 2) r.attr.handled_access_fs |= kFsRefer;
  if (abi >= 3) r.attr.handled_access_fs |= kFsTruncate;
  if (abi >= 4) {
    r.attr.handled_access_net = kNetBindTcp | kNetConnectTcp;
    r.attr_size = offsetof(LandlockRulesetAttr, scoped);
  }
  if (abi >= 5) r.attr.handled_access_fs |= kFsIoctlDev;
  if (abi >= 6) {
    r.attr.scoped = kScopeAbstractUnixSocket | kScopeSignal;
    r.attr_size = sizeof(LandlockRulesetAttr);
  }
  // abi 7: nothing more to handle (see landlock_rights).
  return r;
}

LandlockProbe ProbeKernelLandlock() {
  const long abi = CreateRuleset(nullptr, 0, kCreateRulesetVersion);
  if (abi > 0) return {static_cast<int>(abi), false, ""};
  const int e = errno;
  if (e == ENOSYS) return {0, true, "kernel lacks Landlock (ENOSYS)"};
  if (e == EOPNOTSUPP) return {0, true, "Landlock is disabled at boot (EOPNOTSUPP)"};
  return {0, false, SyscallFailure("landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)", e)};
}

StepStatus RestrictSelfWithEmptyRuleset(int abi) {
  const LandlockRuleset ruleset = EmptyRulesetForAbi(abi);
  if (ruleset.attr_size == 0) return StepStatus::Failed("no Landlock ruleset is defined for ABI " + std::to_string(abi));
  const long fd = CreateRuleset(&ruleset.attr, ruleset.attr_size, 0);
  if (fd < 0) {
    return StepStatus::Failed(SyscallFailure(("landlock_create_ruleset at ABI " + std::to_string(abi)).c_str(), errno));
  }
  const long rc = syscall(SYS_landlock_restrict_self, static_cast<int>(fd), 0U);
  const int saved = errno;
  close(static_cast<int>(fd));
  if (rc != 0) return StepStatus::Failed(SyscallFailure("landlock_restrict_self", saved));
  return StepStatus::Passed();
}

}  // namespace basal::confinement
