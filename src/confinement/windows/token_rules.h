// The Windows worker's token, as the sandbox design requires it, as data and a pure check: the
// launcher applies it to the suspended child's primary and thread tokens before resume
// (parent/platform/windows/windows_launcher.cpp), and the worker to its own primary after it
// lowered it (confine.cpp). Unit-tested on Linux over token descriptions built from the design.
//
// Every stage: an AppContainer token of the fixed profile cortexkit.basal.worker, less privileged
// (LPAC: the WIN://NOALLAPPPKG attribute, so ALL APPLICATION PACKAGES grants nothing), zero
// capabilities, no privileges, the NULL SID as its only restricting SID, and every access group
// deny-only. Then per stage: the suspended primary and the initial thread's impersonation token
// are Low; the attested primary is Untrusted and is a primary token.
//
//   TokenFacts facts = ReadTokenFacts(token);            // nt.h (Win32)
//   std::string why = CheckToken(facts, TokenStage::kAttestedPrimary, expected_sid);
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace basal::confinement::windows {

inline constexpr const wchar_t* kAppContainerName = L"cortexkit.basal.worker";
inline constexpr const char* kAppContainerNameUtf8 = "cortexkit.basal.worker";
inline constexpr const char* kNullSid = "S-1-0-0";
inline constexpr const char* kLpacAttribute = "WIN://NOALLAPPPKG";

// Group attribute bits (winnt.h), spelled here so the rule builds on any system.
inline constexpr uint32_t kGroupEnabled = 0x00000004;
inline constexpr uint32_t kGroupUseForDenyOnly = 0x00000010;
inline constexpr uint32_t kGroupIntegrity = 0x00000020;
inline constexpr uint32_t kGroupIntegrityEnabled = 0x00000040;
// Mandatory integrity levels (the RID of S-1-16-RID).
inline constexpr uint32_t kIntegrityUntrusted = 0x0000;
inline constexpr uint32_t kIntegrityLow = 0x1000;

struct TokenGroup {
  std::string sid;  // "S-1-5-32-545"
  uint32_t attributes = 0;
};

// What the checks read of a token (GetTokenInformation).
struct TokenFacts {
  bool impersonation = false;          // TokenType
  bool app_container = false;          // TokenIsAppContainer
  std::string app_container_sid;       // TokenAppContainerSid
  std::vector<std::string> security_attributes;  // TokenSecurityAttributes' names
  uint32_t capability_count = 0;       // TokenCapabilities
  uint32_t privilege_count = 0;        // TokenPrivileges
  std::vector<TokenGroup> groups;      // TokenGroups
  std::vector<std::string> restricted_sids;  // TokenRestrictedSids
  uint32_t integrity_rid = 0xFFFFFFFF;  // TokenIntegrityLevel's RID
};

enum class TokenStage {
  kSuspendedPrimary,  // the launcher, before resume: Low primary
  kSuspendedThread,   // the launcher, before resume: the initial thread's Low impersonation token
  kAttestedPrimary,   // the worker, before its first read: Untrusted primary, no thread token
};
const char* TokenStageName(TokenStage stage);

// Empty if `facts` is the token `stage` requires, with AppContainer SID `expected_sid`; else the
// first thing wrong, named ("2 privileges, not none"). An empty `expected_sid` accepts any package
// SID of the form S-1-15-2- followed by seven sub-authorities (the worker, which does not derive
// its profile's SID; the launcher does, and passes it).
std::string CheckToken(const TokenFacts& facts, TokenStage stage, std::string_view expected_sid = {});

// The token production requires at `stage`, for tests and docs: what CheckToken accepts.
TokenFacts RequiredToken(TokenStage stage, std::string_view app_container_sid);

}  // namespace basal::confinement::windows
