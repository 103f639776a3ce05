// Descriptor close: steps 2 and 5 of the worker's confinement. Every descriptor above stdio is
// closed with close_range(2), which needs no /proc (after no_new_privs, non-dumpable and Landlock
// /proc/self/fd cannot be read) and cannot miss a descriptor the way a directory walk can.
#pragma once

#include "confinement/linux/step_status.h"

namespace basal::confinement {

// close_range(3, ~0U, 0). Fails (never falls back to a walk) when the kernel lacks close_range.
StepStatus CloseDescriptorsAboveStdio();

}  // namespace basal::confinement
