#include "confinement/windows/token_rules.h"

#include <algorithm>
#include <cstdio>

namespace basal::confinement::windows {
namespace {

std::string ShortHex(uint32_t v) {
  char buf[11];
  std::snprintf(buf, sizeof buf, "0x%04x", v);
  return buf;
}

// S-1-15-2-a-b-c-d-e-f-g: an AppContainer package SID (a child container has four more).
bool IsPackageSid(std::string_view sid) {
  constexpr std::string_view kPrefix = "S-1-15-2-";
  if (sid.substr(0, kPrefix.size()) != kPrefix) return false;
  sid.remove_prefix(kPrefix.size());
  int parts = 0;
  size_t digits = 0;
  for (char c : sid) {
    if (c == '-') {
      if (digits == 0) return false;
      ++parts;
      digits = 0;
    } else if (c >= '0' && c <= '9' && digits < 10) {
      ++digits;
    } else {
      return false;
    }
  }
  return digits > 0 && parts + 1 == 7;
}

const char* IntegrityName(uint32_t rid) {
  switch (rid) {
    case kIntegrityUntrusted: return "Untrusted";
    case kIntegrityLow: return "Low";
    case 0x2000: return "Medium";
    case 0x2100: return "Medium Plus";
    case 0x3000: return "High";
    case 0x4000: return "System";
    default: return "unknown";
  }
}

}  // namespace

const char* TokenStageName(TokenStage stage) {
  switch (stage) {
    case TokenStage::kSuspendedPrimary: return "the suspended worker's primary token";
    case TokenStage::kSuspendedThread: return "the suspended worker's thread token";
    case TokenStage::kAttestedPrimary: return "the worker's primary token";
  }
  return "a token";
}

std::string CheckToken(const TokenFacts& t, TokenStage stage, std::string_view expected_sid) {
  const bool want_impersonation = stage == TokenStage::kSuspendedThread;
  if (t.impersonation != want_impersonation)
    return want_impersonation ? "a primary token, not an impersonation token" : "an impersonation token, not a primary token";
  if (!t.app_container) return "not an AppContainer token";
  if (expected_sid.empty()) {
    if (!IsPackageSid(t.app_container_sid))
      return "AppContainer SID " + t.app_container_sid + " is not a package SID (S-1-15-2- and seven sub-authorities)";
  } else if (t.app_container_sid != expected_sid) {
    return "AppContainer SID " + t.app_container_sid + ", not " + std::string(expected_sid) + " (" +
           kAppContainerNameUtf8 + ")";
  }
  if (std::find(t.security_attributes.begin(), t.security_attributes.end(), kLpacAttribute) == t.security_attributes.end())
    return std::string("no ") + kLpacAttribute + " attribute: not a less privileged AppContainer (LPAC) token";
  if (t.capability_count != 0) return std::to_string(t.capability_count) + " capabilities, not zero";
  if (t.privilege_count != 0) return std::to_string(t.privilege_count) + " privileges, not none";
  if (t.restricted_sids.size() != 1 || t.restricted_sids[0] != kNullSid) {
    std::string shown;
    for (const std::string& s : t.restricted_sids) shown += (shown.empty() ? "" : ", ") + s;
    return "restricting SIDs [" + shown + "], not only the NULL SID " + kNullSid;
  }
  for (const TokenGroup& g : t.groups) {
    if (g.attributes & (kGroupIntegrity | kGroupIntegrityEnabled)) continue;  // the label, not an access group
    if (!(g.attributes & kGroupUseForDenyOnly) || (g.attributes & kGroupEnabled))
      return "group " + g.sid + " (attributes " + ShortHex(g.attributes) + ") is not deny-only";
  }
  const uint32_t want_rid = stage == TokenStage::kAttestedPrimary ? kIntegrityUntrusted : kIntegrityLow;
  if (t.integrity_rid != want_rid)
    return std::string("integrity ") + IntegrityName(t.integrity_rid) + " (" + ShortHex(t.integrity_rid) + "), not " +
           IntegrityName(want_rid);
  return "";
}

TokenFacts RequiredToken(TokenStage stage, std::string_view sid) {
  TokenFacts t;
  t.impersonation = stage == TokenStage::kSuspendedThread;
  t.app_container = true;
  t.app_container_sid = std::string(sid);
  t.security_attributes = {kLpacAttribute};
  t.restricted_sids = {kNullSid};
  t.groups = {{"S-1-1-0", kGroupUseForDenyOnly},
              {"S-1-5-32-545", kGroupUseForDenyOnly},
              {"S-1-5-11", kGroupUseForDenyOnly},
              {stage == TokenStage::kAttestedPrimary ? "S-1-16-0" : "S-1-16-4096", kGroupIntegrity | kGroupIntegrityEnabled}};
  t.integrity_rid = stage == TokenStage::kAttestedPrimary ? kIntegrityUntrusted : kIntegrityLow;
  return t;
}

}  // namespace basal::confinement::windows
