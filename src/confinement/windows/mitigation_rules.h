// The Windows worker's process mitigations (the sandbox design, Windows): the creation flags the
// launcher sets (PROC_THREAD_ATTRIBUTE_MITIGATION_POLICY and CHILD_PROCESS_POLICY) and the state
// the worker attests with GetProcessMitigationPolicy before its first read, as data and a pure
// check, unit-tested on Linux.
//
// Required: dynamic code prohibited (no thread opt-out, no remote downgrade); child-process
// creation prohibited; Win32k system calls disabled; extension points disabled; only
// Microsoft-signed images; no remote images, no low-label images; System32 preferred for images;
// strict handle checks raising an exception, permanently enabled.
//
//   MitigationFacts facts = ReadOwnMitigations();          // confine.cpp (Win32)
//   if (std::string why = CheckMitigations(facts); !why.empty()) Refuse("mitigations", why);
#pragma once

#include <cstdint>
#include <string>

namespace basal::confinement::windows {

// PROCESS_CREATION_MITIGATION_POLICY_* (winbase.h), spelled here so the rule builds anywhere;
// the cross build checks each against the SDK's value (confine.cpp).
inline constexpr uint64_t kMitigationStrictHandleChecksAlwaysOn = 0x1ULL << 24;
inline constexpr uint64_t kMitigationWin32kSystemCallDisableAlwaysOn = 0x1ULL << 28;
inline constexpr uint64_t kMitigationExtensionPointDisableAlwaysOn = 0x1ULL << 32;
inline constexpr uint64_t kMitigationProhibitDynamicCodeAlwaysOn = 0x1ULL << 36;  // not ..._ALLOW_OPT_OUT
inline constexpr uint64_t kMitigationBlockNonMicrosoftBinariesAlwaysOn = 0x1ULL << 44;
inline constexpr uint64_t kMitigationImageLoadNoRemoteAlwaysOn = 0x1ULL << 52;
inline constexpr uint64_t kMitigationImageLoadNoLowLabelAlwaysOn = 0x1ULL << 56;
inline constexpr uint64_t kMitigationImageLoadPreferSystem32AlwaysOn = 0x1ULL << 60;
// The first DWORD64 of the launcher's mitigation attribute.
inline constexpr uint64_t kCreationMitigations =
    kMitigationStrictHandleChecksAlwaysOn | kMitigationWin32kSystemCallDisableAlwaysOn |
    kMitigationExtensionPointDisableAlwaysOn | kMitigationProhibitDynamicCodeAlwaysOn |
    kMitigationBlockNonMicrosoftBinariesAlwaysOn | kMitigationImageLoadNoRemoteAlwaysOn |
    kMitigationImageLoadNoLowLabelAlwaysOn | kMitigationImageLoadPreferSystem32AlwaysOn;
// PROC_THREAD_ATTRIBUTE_CHILD_PROCESS_POLICY: PROCESS_CREATION_CHILD_PROCESS_RESTRICTED.
inline constexpr uint32_t kCreationChildProcessRestricted = 0x01;

// What GetProcessMitigationPolicy reports, one flag per field the rule reads.
struct MitigationFacts {
  bool prohibit_dynamic_code = false;       // ProcessDynamicCodePolicy.ProhibitDynamicCode
  bool dynamic_code_thread_opt_out = true;  // .AllowThreadOptOut
  bool dynamic_code_remote_downgrade = true;  // .AllowRemoteDowngrade
  bool no_child_process_creation = false;   // ProcessChildProcessPolicy.NoChildProcessCreation
  bool win32k_disabled = false;             // ProcessSystemCallDisablePolicy.DisallowWin32kSystemCalls
  bool extension_points_disabled = false;   // ProcessExtensionPointDisablePolicy.DisableExtensionPoints
  bool microsoft_signed_only = false;       // ProcessSignaturePolicy.MicrosoftSignedOnly
  bool no_remote_images = false;            // ProcessImageLoadPolicy.NoRemoteImages
  bool no_low_label_images = false;         // .NoLowMandatoryLabelImages
  bool prefer_system32_images = false;      // .PreferSystem32Images
  bool strict_handle_checks = false;        // ProcessStrictHandleCheckPolicy.RaiseExceptionOnInvalidHandleReference
  bool strict_handle_checks_permanent = false;  // .HandleExceptionsPermanentlyEnabled
};

// Empty when every required mitigation is in force; else the first one missing, named.
std::string CheckMitigations(const MitigationFacts& facts);

// The state the rule accepts (for tests and docs).
MitigationFacts RequiredMitigations();

}  // namespace basal::confinement::windows
