#include "confinement/windows/mitigation_rules.h"

namespace basal::confinement::windows {

std::string CheckMitigations(const MitigationFacts& m) {
  struct Rule {
    bool holds;
    const char* missing;
  };
  const Rule rules[] = {
      {m.prohibit_dynamic_code, "dynamic code is not prohibited (ProhibitDynamicCode)"},
      {!m.dynamic_code_thread_opt_out, "a thread may opt out of the dynamic-code policy (AllowThreadOptOut)"},
      {!m.dynamic_code_remote_downgrade, "the dynamic-code policy may be downgraded remotely (AllowRemoteDowngrade)"},
      {m.no_child_process_creation, "child-process creation is not prohibited (NoChildProcessCreation)"},
      {m.win32k_disabled, "Win32k system calls are not disabled (DisallowWin32kSystemCalls)"},
      {m.extension_points_disabled, "extension points are not disabled (DisableExtensionPoints)"},
      {m.microsoft_signed_only, "images are not required to be Microsoft-signed (MicrosoftSignedOnly)"},
      {m.no_remote_images, "remote images are not rejected (NoRemoteImages)"},
      {m.no_low_label_images, "low-label images are not rejected (NoLowMandatoryLabelImages)"},
      {m.prefer_system32_images, "System32 is not preferred for images (PreferSystem32Images)"},
      {m.strict_handle_checks, "strict handle checks are off (RaiseExceptionOnInvalidHandleReference)"},
      {m.strict_handle_checks_permanent, "strict handle checks are not permanent (HandleExceptionsPermanentlyEnabled)"},
  };
  for (const Rule& r : rules)
    if (!r.holds) return r.missing;
  return "";
}

MitigationFacts RequiredMitigations() {
  MitigationFacts m;
  m.prohibit_dynamic_code = true;
  m.dynamic_code_thread_opt_out = false;
  m.dynamic_code_remote_downgrade = false;
  m.no_child_process_creation = true;
  m.win32k_disabled = true;
  m.extension_points_disabled = true;
  m.microsoft_signed_only = true;
  m.no_remote_images = true;
  m.no_low_label_images = true;
  m.prefer_system32_images = true;
  m.strict_handle_checks = true;
  m.strict_handle_checks_permanent = true;
  return m;
}

}  // namespace basal::confinement::windows
