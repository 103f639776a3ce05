// Windows's death rule (the sandbox design, Windows): exits 0xc0000008 (invalid handle: strict
// handle checks made the misuse fatal) and 0xc0000005 (access violation) feed fatal_status_deaths;
// exit 70 before the welcome is a refusal (the worker's startup checks or the launcher's failed),
// and the parent's own kill status is not a death of the worker's making. Every Windows death is
// an exit status: exceptions end the process with their status (the job has
// DIE_ON_UNHANDLED_EXCEPTION) and TerminateJobObject with the status the parent gives it.
#include <cstdio>
#include <string>

#include "parent/platform/platform.h"

namespace basal {
namespace {

std::string HexStatus(uint32_t status) {
  char buf[11];
  std::snprintf(buf, sizeof buf, "0x%08x", status);
  return buf;
}

const char* StatusName(uint32_t status) {
  switch (status) {
    case kWindowsStatusInvalidHandle: return "STATUS_INVALID_HANDLE";
    case kWindowsStatusAccessViolation: return "STATUS_ACCESS_VIOLATION";
    case 0xC0000409: return "STATUS_STACK_BUFFER_OVERRUN";
    case 0xC00000FD: return "STATUS_STACK_OVERFLOW";
    case 0xC0000017: return "STATUS_NO_MEMORY";
    case 0xC000001D: return "STATUS_ILLEGAL_INSTRUCTION";
    case 0xC0000374: return "STATUS_HEAP_CORRUPTION";
    case kWindowsParentKillExitCode: return "killed by the parent";
    case kWindowsCpuLimitExitCode: return "ERROR_NOT_ENOUGH_QUOTA: the job's CPU time limit";
    default: return nullptr;
  }
}

// An NTSTATUS error or warning (severity bits set) reads as hex; a program's own exit code as decimal.
bool LooksLikeStatus(uint32_t status) { return (status & 0xC0000000u) != 0; }

}  // namespace

std::string DescribeWindowsStatus(uint32_t status) {
  const char* name = StatusName(status);
  std::string text = LooksLikeStatus(status) || status == kWindowsParentKillExitCode ? HexStatus(status) : std::to_string(status);
  if (name) text += std::string(" (") + name + ")";
  return text;
}

DeathVerdict ClassifyWindowsDeath(uint32_t status, bool welcomed) {
  DeathVerdict v;
  v.description = "exited with status " + DescribeWindowsStatus(status);
  if (status == kWindowsStatusInvalidHandle || status == kWindowsStatusAccessViolation) {
    v.kind = DeathKind::kFatalStatus;
  } else if (status == static_cast<uint32_t>(kExitConfinementRefused) && !welcomed) {
    v.kind = DeathKind::kRefusal;
  } else if (status == kWindowsParentKillExitCode) {
    v.kind = DeathKind::kParentKill;
  } else if (status == kWindowsCpuLimitExitCode) {
    v.kind = DeathKind::kCpuLimit;
  } else {
    v.crash_key = LooksLikeStatus(status) ? "status " + HexStatus(status) : "exit " + std::to_string(status);
  }
  return v;
}

}  // namespace basal
