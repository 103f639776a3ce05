// The seam's dispatch: one death rule per system (linux/, macos/, windows/death.cpp).
#include "parent/platform/platform.h"

namespace basal {

const char* WorkerOsName(WorkerOs os) {
  switch (os) {
    case WorkerOs::kLinux: return "linux";
    case WorkerOs::kMacos: return "macos";
    case WorkerOs::kWindows: return "windows";
  }
  return "unknown";
}

std::optional<WorkerOs> WorkerOsFromName(std::string_view name) {
  for (WorkerOs os : {WorkerOs::kLinux, WorkerOs::kMacos, WorkerOs::kWindows})
    if (name == WorkerOsName(os)) return os;
  return std::nullopt;
}

DeathVerdict ClassifyDeath(WorkerOs os, const WorkerDeath& death, bool welcomed) {
  switch (os) {
    case WorkerOs::kLinux: return ClassifyLinuxDeath(death, welcomed);
    case WorkerOs::kMacos: return ClassifyMacosDeath(death, welcomed);
    case WorkerOs::kWindows:
      // A Windows death is always an exit status (TerminateJobObject and exceptions included).
      return ClassifyWindowsDeath(static_cast<uint32_t>(death.code), welcomed);
  }
  return {};
}

}  // namespace basal
