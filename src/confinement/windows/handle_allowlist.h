// The Windows worker's handle inventory allowlist (the sandbox design, "Residual handles and
// production measurements"): the table of handle rows as data, and the pure check the worker runs
// on its own handle table before it reads its first frame (confine.cpp), unit-tested on Linux
// (tests/unit/windows_rules_test.cpp) over inventories built from the production counts and from
// every way to break them.
//
// The whole inventory must fit ONE image profile, windows-latest or windows-2022, tried one at a
// time and never their union. Stdio and \KnownDlls must be present at exactly their counts; every
// other row is a ceiling; at most 26 handles in all. A handle of an unknown type, an unknown
// access mask, an inheritable handle other than stdio, and a count past a ceiling are refused.
//
//   std::vector<HandleRecord> inventory = ...;                 // from the worker's handle table
//   InventoryVerdict v = CheckHandleInventory(inventory);
//   if (!v.accepted) Refuse("handle table", v.reason);        // exit 70, the reason named
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace basal::confinement::windows {

// Which standard handle a handle is (GetStdHandle's value), if any.
enum class StdioRole { kNone, kStdin, kStdout, kStderr };

// One entry of a process's handle table, as the worker reads it.
struct HandleRecord {
  std::string type;        // the object type's name: "File", "Event", "ALPC Port", ...
  uint32_t access = 0;     // the granted access mask
  bool inheritable = false;
  StdioRole stdio = StdioRole::kNone;
  std::string name;        // read for Directory objects only ("\KnownDlls"); empty otherwise
};

enum class HandleProfile { kWindowsLatest, kWindows2022 };
inline constexpr HandleProfile kHandleProfiles[] = {HandleProfile::kWindowsLatest, HandleProfile::kWindows2022};
const char* HandleProfileName(HandleProfile profile);  // "windows-latest", "windows-2022"

// What a handle must be to count under a row, beyond its type and access.
enum class RowMatch {
  kStdin,           // the standard input handle
  kStdoutOrStderr,  // the standard output or error handle (one of each)
  kKnownDlls,       // the Directory named \KnownDlls
  kUnnamed,         // neither stdio nor named
};

// One row of the design's table.
struct HandleRow {
  const char* label;  // as the design names it: "File stdin", "Event", ...
  const char* type;
  uint32_t access;
  RowMatch match;
  bool exact;                  // present at exactly the count (stdio, \KnownDlls), else a ceiling
  uint32_t latest;             // windows-latest: the count (exact) or the ceiling
  uint32_t win2022;            // windows-2022: the count (exact) or the ceiling
  uint32_t latest_production;  // what CI measured on the production release worker
  uint32_t win2022_production;
};

inline constexpr HandleRow kHandleTable[] = {
    {"File stdin", "File", 0x120189, RowMatch::kStdin, true, 1, 1, 1, 1},
    {"File stdout/stderr", "File", 0x120196, RowMatch::kStdoutOrStderr, true, 2, 2, 2, 2},
    {"Directory \\KnownDlls", "Directory", 0x3, RowMatch::kKnownDlls, true, 1, 1, 1, 1},
    {"Event", "Event", 0x1f0003, RowMatch::kUnnamed, false, 7, 7, 6, 6},
    {"IoCompletion", "IoCompletion", 0x1f0003, RowMatch::kUnnamed, false, 2, 2, 2, 2},
    {"TpWorkerFactory", "TpWorkerFactory", 0xf00ff, RowMatch::kUnnamed, false, 2, 2, 2, 2},
    {"IRTimer", "IRTimer", 0x100002, RowMatch::kUnnamed, false, 4, 4, 4, 4},
    {"WaitCompletionPacket", "WaitCompletionPacket", 0x1, RowMatch::kUnnamed, false, 6, 5, 6, 5},
    {"Semaphore", "Semaphore", 0x100003, RowMatch::kUnnamed, false, 0, 2, 0, 2},
    {"SchedulerSharedData", "SchedulerSharedData", 0x1, RowMatch::kUnnamed, false, 1, 0, 1, 0},
};
inline constexpr uint32_t kMaxHandles = 26;  // per profile

// The row's count or ceiling under `profile`, and what production measured.
uint32_t RowLimit(const HandleRow& row, HandleProfile profile);
uint32_t RowProduction(const HandleRow& row, HandleProfile profile);

// Whether the inventory fits `profile`: empty if it does, else the first reason it does not
// ("8 Event handles (access 0x001f0003), more than the ceiling 7").
std::string CheckInventoryAgainst(HandleProfile profile, const std::vector<HandleRecord>& inventory);

struct InventoryVerdict {
  bool accepted = false;
  std::optional<HandleProfile> profile;  // the one it fit (windows-latest first)
  std::string reason;                    // why neither, naming each profile's first failure
};
InventoryVerdict CheckHandleInventory(const std::vector<HandleRecord>& inventory);

// The inventory production measured for `profile`: stdin, stdout, stderr, \KnownDlls, then each
// row's production count of unnamed handles.
std::vector<HandleRecord> ProductionInventory(HandleProfile profile);

}  // namespace basal::confinement::windows
