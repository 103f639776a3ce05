// The kernel's view of a worker: the fields of /proc/PID/status that say how it is confined and
// with which privileges, and its CPU and address-space limits from /proc/PID/limits. The parent reads it after the worker's welcome and before it sends any
// flow code, so a worker that only claims its confinement is refused (welcome_check.h).
//
//   auto text = ReadProcStatus(pid);                 // Result<std::string>
//   auto status = ParseProcStatus(*text);            // Result<ProcStatus>: every field or an error
//   if (status && status->seccomp == 2) ...
//
// The parser is pure (unit-tested on sample texts) and strict: a missing field, a repeated one or
// a value that is not exactly what the kernel prints is an error naming the field and the value.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "basal/result.h"

namespace basal {

struct ProcStatus {
  char state = '?';                  // "State:" first letter: R, S, D, T, t, Z, X, ...
  std::array<uint32_t, 4> uid{};     // real, effective, saved, filesystem
  std::array<uint32_t, 4> gid{};
  std::vector<uint32_t> groups;      // supplementary groups
  uint64_t cap_inh = 0, cap_prm = 0, cap_eff = 0, cap_bnd = 0, cap_amb = 0;
  int no_new_privs = 0;              // 0 or 1
  int seccomp = 0;                   // 0 disabled, 1 strict, 2 filter
  std::optional<uint64_t> seccomp_filters;  // absent before Linux 5.9
  // The fields above as the kernel wrote them ("Uid", "65534\t65534\t65534\t65534"), in the
  // order of the file, for `basal doctor`.
  std::vector<std::pair<std::string, std::string>> shown;
};

// Parses the text of /proc/PID/status. Requires State, Uid, Gid, Groups, CapInh, CapPrm, CapEff,
// CapBnd, CapAmb, NoNewPrivs and Seccomp; reads Seccomp_filters when present.
Result<ProcStatus> ParseProcStatus(std::string_view text);

// A soft and a hard limit as /proc/PID/limits shows them: nullopt is "unlimited".
struct ProcLimit {
  std::optional<uint64_t> soft;
  std::optional<uint64_t> hard;
};
// The lines of /proc/PID/limits the welcome check reads.
struct ProcLimits {
  ProcLimit cpu_seconds;          // "Max cpu time ... seconds" (RLIMIT_CPU)
  ProcLimit address_space_bytes;  // "Max address space ... bytes" (RLIMIT_AS)
};
// Parses /proc/PID/limits; both lines are required, each with two limits and its unit.
Result<ProcLimits> ParseProcLimits(std::string_view proc_limits);

// Read /proc/<pid>/status or /proc/<pid>/limits whole (a few KiB). The caller must know that `pid`
// is still the process it means: for a worker, that it is the parent's child and not yet reaped.
Result<std::string> ReadProcStatus(pid_t pid);
Result<std::string> ReadProcLimits(pid_t pid);

}  // namespace basal
