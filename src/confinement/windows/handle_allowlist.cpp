#include "confinement/windows/handle_allowlist.h"

#include <cstdio>

namespace basal::confinement::windows {
namespace {

std::string Hex(uint32_t v) {
  char buf[11];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

const char* RoleName(StdioRole role) {
  switch (role) {
    case StdioRole::kStdin: return "stdin";
    case StdioRole::kStdout: return "stdout";
    case StdioRole::kStderr: return "stderr";
    case StdioRole::kNone: return "not stdio";
  }
  return "?";
}

bool Matches(const HandleRow& row, const HandleRecord& h) {
  if (h.type != row.type || h.access != row.access) return false;
  switch (row.match) {
    case RowMatch::kStdin: return h.stdio == StdioRole::kStdin;
    case RowMatch::kStdoutOrStderr: return h.stdio == StdioRole::kStdout || h.stdio == StdioRole::kStderr;
    case RowMatch::kKnownDlls: return h.stdio == StdioRole::kNone && h.name == "\\KnownDlls";
    case RowMatch::kUnnamed: return h.stdio == StdioRole::kNone && h.name.empty();
  }
  return false;
}

// Why a handle fits no row: its type is not in the table, or its access (or name, or stdio role)
// is not one the table gives that type.
std::string NoRow(const HandleRecord& h) {
  bool type_known = false;
  for (const HandleRow& row : kHandleTable) type_known = type_known || h.type == row.type;
  std::string what = "a " + h.type + " handle (access " + Hex(h.access) + ", " + RoleName(h.stdio) +
                     (h.name.empty() ? std::string() : ", named " + h.name) + ")";
  if (!type_known) return what + ": unknown type";
  return what + ": unknown access mask, name or role for its type";
}

}  // namespace

const char* HandleProfileName(HandleProfile profile) {
  return profile == HandleProfile::kWindowsLatest ? "windows-latest" : "windows-2022";
}

uint32_t RowLimit(const HandleRow& row, HandleProfile profile) {
  return profile == HandleProfile::kWindowsLatest ? row.latest : row.win2022;
}

uint32_t RowProduction(const HandleRow& row, HandleProfile profile) {
  return profile == HandleProfile::kWindowsLatest ? row.latest_production : row.win2022_production;
}

std::string CheckInventoryAgainst(HandleProfile profile, const std::vector<HandleRecord>& inventory) {
  constexpr size_t kRows = sizeof kHandleTable / sizeof kHandleTable[0];
  uint32_t counts[kRows] = {};
  bool seen_stdout = false, seen_stderr = false;
  for (const HandleRecord& h : inventory) {
    if (h.inheritable && h.stdio == StdioRole::kNone)
      return "an extra inheritable " + h.type + " handle (access " + Hex(h.access) + "): only stdio is inherited";
    size_t row = kRows;
    for (size_t i = 0; i < kRows && row == kRows; ++i)
      if (Matches(kHandleTable[i], h)) row = i;
    if (row == kRows) return NoRow(h);
    ++counts[row];
    if (h.stdio == StdioRole::kStdout) {
      if (seen_stdout) return "two handles are the standard output";
      seen_stdout = true;
    }
    if (h.stdio == StdioRole::kStderr) {
      if (seen_stderr) return "two handles are the standard error";
      seen_stderr = true;
    }
  }
  uint32_t total = 0;
  for (size_t i = 0; i < kRows; ++i) {
    const HandleRow& row = kHandleTable[i];
    const uint32_t limit = RowLimit(row, profile);
    total += counts[i];
    if (row.exact && counts[i] != limit)
      return std::to_string(counts[i]) + " " + row.label + " handles (access " + Hex(row.access) + "), not exactly " +
             std::to_string(limit);
    if (!row.exact && counts[i] > limit)
      return std::to_string(counts[i]) + " " + row.label + " handles (access " + Hex(row.access) +
             "), more than the ceiling " + std::to_string(limit);
  }
  if (total > kMaxHandles) return std::to_string(total) + " handles, more than " + std::to_string(kMaxHandles);
  return "";
}

InventoryVerdict CheckHandleInventory(const std::vector<HandleRecord>& inventory) {
  InventoryVerdict v;
  std::string reasons;
  for (HandleProfile profile : kHandleProfiles) {
    const std::string why = CheckInventoryAgainst(profile, inventory);
    if (why.empty()) {
      v.accepted = true;
      v.profile = profile;
      v.reason = std::to_string(inventory.size()) + " handles fit " + HandleProfileName(profile);
      return v;
    }
    if (!reasons.empty()) reasons += "; ";
    reasons += std::string(HandleProfileName(profile)) + ": " + why;
  }
  v.reason = "the handle table fits neither profile (" + reasons + ")";
  return v;
}

std::vector<HandleRecord> ProductionInventory(HandleProfile profile) {
  std::vector<HandleRecord> inventory;
  for (const HandleRow& row : kHandleTable) {
    for (uint32_t i = 0; i < RowProduction(row, profile); ++i) {
      HandleRecord h{row.type, row.access, false, StdioRole::kNone, ""};
      switch (row.match) {
        case RowMatch::kStdin:
          h.stdio = StdioRole::kStdin;
          h.inheritable = true;
          break;
        case RowMatch::kStdoutOrStderr:
          h.stdio = i == 0 ? StdioRole::kStdout : StdioRole::kStderr;
          h.inheritable = true;
          break;
        case RowMatch::kKnownDlls:
          h.name = "\\KnownDlls";
          break;
        case RowMatch::kUnnamed:
          break;
      }
      inventory.push_back(h);
    }
  }
  return inventory;
}

}  // namespace basal::confinement::windows
