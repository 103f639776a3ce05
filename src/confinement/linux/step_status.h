// StepStatus: the outcome of one confinement step, passed or failed with a named reason. The
// reason is what the worker prints after "confinement failed: <step>: " before it exits 70.
//
//   StepStatus s = CloseDescriptorsAboveStdio();
//   if (!s.ok()) Fail("descriptor close", s.reason());
#pragma once

#include <string>
#include <utility>

namespace basal::confinement {

class [[nodiscard]] StepStatus {
 public:
  static StepStatus Passed() { return StepStatus(std::string()); }
  static StepStatus Failed(std::string reason) {
    if (reason.empty()) reason = "unnamed failure";
    return StepStatus(std::move(reason));
  }

  bool ok() const { return reason_.empty(); }
  const std::string& reason() const { return reason_; }

 private:
  explicit StepStatus(std::string reason) : reason_(std::move(reason)) {}
  std::string reason_;  // empty when the step passed
};

// "<what> failed: <strerror(errno)> (errno N)" for the reason of a failed system call.
std::string SyscallFailure(const char* what, int saved_errno);

}  // namespace basal::confinement
