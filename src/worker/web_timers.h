// setTimeout, clearTimeout, setInterval, clearInterval: timers served by the parent, which owns
// time (the `timer.sleep` host call, src/parent/host_calls/timer.h). The worker keeps the queue
// (js/timers.js); the parent only wakes it. No grant is needed, the activation's deadline bounds
// every wait, and the worker needs no new system call. docs/runtime.md says what
// flows can rely on.
//
//   std::string why;
//   if (!InstallTimerGlobals(ctx, global, why)) ...   // once per context, before the flow runs
#pragma once

#include <string>

extern "C" {
#include "quickjs.h"
}

namespace basal::worker {

// Defines the four timer functions on `global`. False (with `error` saying why) if the embedded
// script could not be evaluated: out of memory, or a bug of ours.
bool InstallTimerGlobals(JSContext* ctx, JSValueConst global, std::string& error);

// Defines sleep, waitForEvent and step (js/durable.js): a durable run's waits and unit of retry,
// which throw a TypeError in a run that is not durable (docs/durable.md).
bool InstallDurableGlobals(JSContext* ctx, JSValueConst global, std::string& error);

}  // namespace basal::worker
