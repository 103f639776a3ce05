// The parent's verdict on a worker's welcome: accepted only if it reports the confinement this
// operating system requires (docs/sandbox.md). The required Landlock ABI is computed here, from
// the kernel, never taken from the worker.
#pragma once

#include <string>

#include "protocol/messages.h"

namespace basal {

// What the kernel offers: landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION), 0 if absent.
int KernelLandlockAbi();

struct WelcomePolicy {
  bool allow_without_landlock = false;  // and then only when the kernel lacks Landlock
  int kernel_landlock_abi = 0;          // as KernelLandlockAbi() returned
};

struct WelcomeVerdict {
  bool accepted = false;
  int required_landlock_abi = 0;
  std::string reason;  // why refused, or a summary of what was accepted
};

WelcomeVerdict CheckWelcome(const protocol::Welcome& welcome, pid_t expected_pid, const WelcomePolicy& policy);

}  // namespace basal
