// The Windows worker's startup, before it reads its first frame (the sandbox design, Windows). The
// launcher fixed the process confinement at creation (the LPAC token, the job, the mitigations,
// the handle list); the worker finishes it and attests it, in one function that reads top to
// bottom as the design's checklist:
//
//   1. thread token    RevertToSelf, then OpenThreadToken must find none
//   2. integrity       its actual primary token lowered from Low to Untrusted
//   3. handle close    every ALPC port and every non-inheritable non-stdio File handle closed
//                      (the current directory, KsecDD on Server 2022, ...)
//   4. strict handles  strict handle checks made permanent
//   5. token           the primary attested: LPAC for cortexkit.basal.worker, zero capabilities,
//                      no privileges, NULL-only restricting SIDs, deny-only groups, Untrusted
//   6. mitigations     every required mitigation attested (mitigation_rules.h)
//   7. handle table    stdio are pipes; the inventory fits one image profile (handle_allowlist.h)
//
// A failed step writes `ck-basal-worker: confinement failed: <step>: <reason>` to stderr and ends
// the process with status 70 (TerminateProcess, so nothing else runs): never a weaker sandbox.
//
//   ConfinementReport report = ConfineWorker();   // returns only when every step held
#pragma once

#include <string_view>

#include "confinement/windows/report.h"

namespace basal::confinement::windows {

inline constexpr unsigned kExitConfinementFailed = 70;

ConfinementReport ConfineWorker();

// Writes `ck-basal-worker: confinement failed: <step>: <reason>` and ends the process with 70.
[[noreturn]] void Refuse(std::string_view step, std::string_view reason);

}  // namespace basal::confinement::windows
