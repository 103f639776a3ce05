// Landlock: step 4 of the worker's confinement. An empty ruleset (no rule is ever added) that
// handles every filesystem, TCP-network and scope right of the ABI in force, the lower of the
// kernel's ABI and kWorkerLandlockAbiMax. With no rule, every handled access is denied: no file
// can be opened, executed, created or truncated, no TCP port bound or connected, no abstract
// Unix socket outside the domain reached and no process outside it signalled.
//
// Debian 12's <linux/landlock.h> stops at ABI 2 (and its ruleset attribute has one field), so the
// rights and the attribute layout of ABIs 3 to 7 are defined here, matching the kernel's UAPI.
//
//   LandlockProbe probe = ProbeKernelLandlock();        // {abi 7, ""} on this kernel
//   StepStatus s = RestrictSelfWithEmptyRuleset(std::min(probe.abi, kWorkerLandlockAbiMax));
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "confinement/linux/step_status.h"

namespace basal::confinement {

// The kernel's struct landlock_ruleset_attr as of ABI 6. The size passed to
// landlock_create_ruleset tells the kernel which fields exist: 8 bytes (fs only) before ABI 4,
// 16 (fs, net) for ABIs 4 and 5, 24 (fs, net, scoped) from ABI 6.
struct LandlockRulesetAttr {
  uint64_t handled_access_fs;
  uint64_t handled_access_net;  // ABI 4
  uint64_t scoped;              // ABI 6
};
static_assert(sizeof(LandlockRulesetAttr) == 24 && offsetof(LandlockRulesetAttr, handled_access_net) == 8 &&
              offsetof(LandlockRulesetAttr, scoped) == 16);

namespace landlock_rights {
// Filesystem, ABI 1.
inline constexpr uint64_t kFsExecute = 1ULL << 0;
inline constexpr uint64_t kFsWriteFile = 1ULL << 1;
inline constexpr uint64_t kFsReadFile = 1ULL << 2;
inline constexpr uint64_t kFsReadDir = 1ULL << 3;
inline constexpr uint64_t kFsRemoveDir = 1ULL << 4;
inline constexpr uint64_t kFsRemoveFile = 1ULL << 5;
inline constexpr uint64_t kFsMakeChar = 1ULL << 6;
inline constexpr uint64_t kFsMakeDir = 1ULL << 7;
inline constexpr uint64_t kFsMakeReg = 1ULL << 8;
inline constexpr uint64_t kFsMakeSock = 1ULL << 9;
inline constexpr uint64_t kFsMakeFifo = 1ULL << 10;
inline constexpr uint64_t kFsMakeBlock = 1ULL << 11;
inline constexpr uint64_t kFsMakeSym = 1ULL << 12;
inline constexpr uint64_t kFsAbi1 = (1ULL << 13) - 1;
inline constexpr uint64_t kFsRefer = 1ULL << 13;     // ABI 2
inline constexpr uint64_t kFsTruncate = 1ULL << 14;  // ABI 3
inline constexpr uint64_t kFsIoctlDev = 1ULL << 15;  // ABI 5
// TCP network, ABI 4.
inline constexpr uint64_t kNetBindTcp = 1ULL << 0;
inline constexpr uint64_t kNetConnectTcp = 1ULL << 1;
// Scopes, ABI 6.
inline constexpr uint64_t kScopeAbstractUnixSocket = 1ULL << 0;
inline constexpr uint64_t kScopeSignal = 1ULL << 1;
// ABI 7 adds no access right and no scope: it adds landlock_restrict_self flags that tune audit
// logging of denials (LOG_SAME_EXEC_OFF, LOG_NEW_EXEC_ON, LOG_SUBDOMAINS_OFF). The worker passes
// flags 0, the kernel's default: denials by this executable are logged when audit is enabled.
}  // namespace landlock_rights

// What an empty ruleset at `abi` handles, and the attribute size that describes it.
struct LandlockRuleset {
  LandlockRulesetAttr attr;
  size_t attr_size;
};
// abi in 1..7; any other value gives an all-zero ruleset of size 0 (a programming error).
LandlockRuleset EmptyRulesetForAbi(int abi);

struct LandlockProbe {
  int abi = 0;                  // the kernel's ABI, 0 when it lacks Landlock
  bool lacks_landlock = false;  // abi is 0 because the kernel has none or it is disabled
  std::string why_absent;       // empty when abi > 0
};
// landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION).
LandlockProbe ProbeKernelLandlock();

// Creates the empty ruleset for `abi`, restricts this process to it, closes the ruleset fd.
StepStatus RestrictSelfWithEmptyRuleset(int abi);

}  // namespace basal::confinement
