#include "confinement/windows/confine.h"

#include <windows.h>

#include <string>
#include <vector>

#include "confinement/windows/nt.h"

namespace basal::confinement::windows {
namespace {

static_assert(kMitigationStrictHandleChecksAlwaysOn == PROCESS_CREATION_MITIGATION_POLICY_STRICT_HANDLE_CHECKS_ALWAYS_ON);
static_assert(kMitigationWin32kSystemCallDisableAlwaysOn ==
              PROCESS_CREATION_MITIGATION_POLICY_WIN32K_SYSTEM_CALL_DISABLE_ALWAYS_ON);
static_assert(kMitigationExtensionPointDisableAlwaysOn ==
              PROCESS_CREATION_MITIGATION_POLICY_EXTENSION_POINT_DISABLE_ALWAYS_ON);
static_assert(kMitigationProhibitDynamicCodeAlwaysOn == PROCESS_CREATION_MITIGATION_POLICY_PROHIBIT_DYNAMIC_CODE_ALWAYS_ON);
static_assert(kMitigationBlockNonMicrosoftBinariesAlwaysOn ==
              PROCESS_CREATION_MITIGATION_POLICY_BLOCK_NON_MICROSOFT_BINARIES_ALWAYS_ON);
static_assert(kMitigationImageLoadNoRemoteAlwaysOn == PROCESS_CREATION_MITIGATION_POLICY_IMAGE_LOAD_NO_REMOTE_ALWAYS_ON);
static_assert(kMitigationImageLoadNoLowLabelAlwaysOn ==
              PROCESS_CREATION_MITIGATION_POLICY_IMAGE_LOAD_NO_LOW_LABEL_ALWAYS_ON);
static_assert(kMitigationImageLoadPreferSystem32AlwaysOn ==
              PROCESS_CREATION_MITIGATION_POLICY_IMAGE_LOAD_PREFER_SYSTEM32_ALWAYS_ON);
static_assert(kCreationChildProcessRestricted == PROCESS_CREATION_CHILD_PROCESS_RESTRICTED);
static_assert(kGroupUseForDenyOnly == SE_GROUP_USE_FOR_DENY_ONLY && kGroupEnabled == SE_GROUP_ENABLED &&
              kGroupIntegrity == SE_GROUP_INTEGRITY && kGroupIntegrityEnabled == SE_GROUP_INTEGRITY_ENABLED);
static_assert(kIntegrityUntrusted == SECURITY_MANDATORY_UNTRUSTED_RID && kIntegrityLow == SECURITY_MANDATORY_LOW_RID);

void WriteStderr(std::string_view text) {
  const HANDLE err = GetStdHandle(STD_ERROR_HANDLE);
  DWORD written = 0;
  while (!text.empty() && err && err != INVALID_HANDLE_VALUE &&
         WriteFile(err, text.data(), static_cast<DWORD>(text.size()), &written, nullptr) && written > 0)
    text.remove_prefix(written);
}

// 1. The initial thread ran the loader under the launcher's Low impersonation token; from here on
// only the primary counts.
void RevertThreadToken() {
  if (!RevertToSelf()) Refuse("thread token", "RevertToSelf failed: " + LastError());
  HANDLE token = nullptr;
  if (OpenThreadToken(GetCurrentThread(), TOKEN_QUERY, TRUE, &token)) {
    CloseHandle(token);
    Refuse("thread token", "a thread token remains after RevertToSelf");
  }
  if (GetLastError() != ERROR_NO_TOKEN) Refuse("thread token", "OpenThreadToken: " + LastError());
}

// 2. Low was needed for the loader; nothing after it needs more than Untrusted.
void LowerToUntrusted() {
  HANDLE token = nullptr;
  if (!OpenProcessToken(GetCurrentProcess(), TOKEN_QUERY | TOKEN_ADJUST_DEFAULT, &token))
    Refuse("integrity", "OpenProcessToken: " + LastError());
  SID_IDENTIFIER_AUTHORITY label_authority = SECURITY_MANDATORY_LABEL_AUTHORITY;
  PSID untrusted = nullptr;
  if (!AllocateAndInitializeSid(&label_authority, 1, SECURITY_MANDATORY_UNTRUSTED_RID, 0, 0, 0, 0, 0, 0, 0, &untrusted)) {
    CloseHandle(token);
    Refuse("integrity", "AllocateAndInitializeSid: " + LastError());
  }
  TOKEN_MANDATORY_LABEL label{};
  label.Label.Sid = untrusted;
  label.Label.Attributes = SE_GROUP_INTEGRITY;
  const BOOL ok = SetTokenInformation(token, TokenIntegrityLevel, &label, sizeof label + GetLengthSid(untrusted));
  const std::string why = ok ? "" : "SetTokenInformation(TokenIntegrityLevel, Untrusted): " + LastError();
  FreeSid(untrusted);
  CloseHandle(token);
  if (!why.empty()) Refuse("integrity", why);
}

// 3. What the loader and the runtime left that the worker does not need: the CSR ALPC port and
// any File handle that is neither stdio nor inherited (the current directory, KsecDD).
void CloseAlpcAndFileHandles() {
  auto handles = ReadOwnHandles();
  if (!handles) Refuse("handle close", handles.error().message);
  for (const OwnHandle& h : *handles) {
    const HandleRecord& r = h.record;
    const bool alpc = r.type == "ALPC Port";
    const bool file = r.type == "File" && r.stdio == StdioRole::kNone && !r.inheritable;
    if (!alpc && !file) continue;
    if (h.protect_from_close) Refuse("handle close", "a " + r.type + " handle is protected from close");
    if (!CloseHandle(static_cast<HANDLE>(h.value))) Refuse("handle close", "CloseHandle(" + r.type + "): " + LastError());
  }
}

// 4. Created with strict handle checks on; made permanent so nothing can turn them off.
void MakeStrictHandleChecksPermanent() {
  PROCESS_MITIGATION_STRICT_HANDLE_CHECK_POLICY p{};
  p.RaiseExceptionOnInvalidHandleReference = 1;
  p.HandleExceptionsPermanentlyEnabled = 1;
  if (!SetProcessMitigationPolicy(ProcessStrictHandleCheckPolicy, &p, sizeof p))
    Refuse("strict handles", "SetProcessMitigationPolicy(ProcessStrictHandleCheckPolicy): " + LastError());
}

// 5. The actual token, as the kernel holds it now.
void AttestToken() {
  HANDLE token = nullptr;
  if (!OpenProcessToken(GetCurrentProcess(), TOKEN_QUERY, &token)) Refuse("token", "OpenProcessToken: " + LastError());
  auto facts = ReadTokenFacts(token);
  CloseHandle(token);
  if (!facts) Refuse("token", facts.error().message);
  if (std::string why = CheckToken(*facts, TokenStage::kAttestedPrimary); !why.empty()) Refuse("token", why);
}

// 6.
void AttestMitigations() {
  auto facts = ReadMitigations(GetCurrentProcess());
  if (!facts) Refuse("mitigations", facts.error().message);
  if (std::string why = CheckMitigations(*facts); !why.empty()) Refuse("mitigations", why);
}

// 7. Last, when nothing of ours is open any more: what is left is what input will meet.
HandleProfile AttestHandleTable() {
  for (DWORD which : {STD_INPUT_HANDLE, STD_OUTPUT_HANDLE, STD_ERROR_HANDLE}) {
    const HANDLE h = GetStdHandle(which);
    if (h == nullptr || h == INVALID_HANDLE_VALUE) Refuse("handle table", "a standard handle is missing");
    if (GetFileType(h) != FILE_TYPE_PIPE) Refuse("handle table", "a standard handle is not a pipe");
  }
  auto handles = ReadOwnHandles();
  if (!handles) Refuse("handle table", handles.error().message);
  std::vector<HandleRecord> inventory;
  for (const OwnHandle& h : *handles) inventory.push_back(h.record);
  const InventoryVerdict v = CheckHandleInventory(inventory);
  if (!v.accepted) Refuse("handle table", v.reason);
  return *v.profile;
}

}  // namespace

void Refuse(std::string_view step, std::string_view reason) {
  std::string line = "ck-basal-worker: confinement failed: ";
  line += step;
  line += ": ";
  line += reason;
  line += '\n';
  WriteStderr(line);
  TerminateProcess(GetCurrentProcess(), kExitConfinementFailed);
  ExitProcess(kExitConfinementFailed);  // not reached: TerminateProcess on itself does not return
}

ConfinementReport ConfineWorker() {
  ConfinementReport r;
  RevertThreadToken();
  r.thread_token_reverted = true;
  LowerToUntrusted();
  CloseAlpcAndFileHandles();
  r.handles_closed = true;
  MakeStrictHandleChecksPermanent();
  AttestToken();
  r.token_attested = true;
  AttestMitigations();
  r.mitigations_attested = true;
  r.handle_profile = AttestHandleTable();
  r.handle_table_attested = true;
  return r;
}

}  // namespace basal::confinement::windows
