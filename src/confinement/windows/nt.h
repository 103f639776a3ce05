// What the Windows checks read of the system, and nothing more: a token's facts, a process's
// mitigation state, and this process's handle table. Win32 and native (ntdll) calls, built only
// by the mingw-w64 cross build; the checks themselves are the pure rules beside this file
// (token_rules.h, mitigation_rules.h, handle_allowlist.h). The launcher reads the suspended
// child's tokens with these; the worker reads its own.
//
//   auto facts = ReadTokenFacts(token);           // Result<TokenFacts>
//   auto handles = ReadOwnHandles();              // Result<std::vector<OwnHandle>>
#pragma once

#include <string>
#include <vector>

#include "basal/result.h"
#include "confinement/windows/handle_allowlist.h"
#include "confinement/windows/mitigation_rules.h"
#include "confinement/windows/token_rules.h"

namespace basal::confinement::windows {

// GetLastError() as "error 5 (Access is denied.)".
std::string LastError();
// A native status as "0xc0000022".
std::string StatusText(long status);

// `token` is a HANDLE opened with TOKEN_QUERY.
Result<TokenFacts> ReadTokenFacts(void* token);

// `process` is a HANDLE with PROCESS_QUERY_INFORMATION (GetCurrentProcess() for the worker).
Result<MitigationFacts> ReadMitigations(void* process);

// One entry of this process's handle table: the record the allowlist reads, and what closing it
// needs.
struct OwnHandle {
  void* value = nullptr;         // the HANDLE
  bool protect_from_close = false;
  HandleRecord record;
};
// Every handle this process holds (NtQueryInformationProcess, ProcessHandleInformation), with its
// type name (NtQueryObject), its stdio role (GetStdHandle) and, for Directory objects only, its
// name. The snapshot's own buffers are freed before it returns; it opens no handle.
Result<std::vector<OwnHandle>> ReadOwnHandles();

}  // namespace basal::confinement::windows
