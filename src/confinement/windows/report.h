// The Windows worker's confinement report: the `confinement` object of its welcome. Five fields,
// each a step of the startup the worker attested before its first read, and the handle-table
// profile its inventory fit. The worker sends it only when every step held (a failed step exits
// 70 first), so each field it sends is true; the parent accepts it only on Windows, with all five
// true (parent/welcome_check.h). Pure: the welcome's text is tested on Linux against the parent's
// rule (tests/unit/platform_rules_test.cpp).
#pragma once

#include <string>

#include "confinement/windows/handle_allowlist.h"

namespace basal::confinement::windows {

struct ConfinementReport {
  bool thread_token_reverted = false;  // RevertToSelf, and OpenThreadToken then finds none
  bool token_attested = false;         // the primary: LPAC, zero capabilities, no privileges, Untrusted
  bool handles_closed = false;         // ALPC ports and non-inheritable non-stdio File handles closed
  bool mitigations_attested = false;   // every required process mitigation in force
  bool handle_table_attested = false;  // the inventory fits one image profile
  HandleProfile handle_profile = HandleProfile::kWindowsLatest;

  // {"thread_token_reverted":true,...,"handle_profile":"windows-latest"}
  std::string ToJson() const;
};

}  // namespace basal::confinement::windows
