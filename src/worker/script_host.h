// What the worker's web globals (web_fetch.cpp, web_timers.cpp) need of the engine, which owns
// the activation and the parent's channel. Implemented in engine.cpp.
//
//   JSValue call = NewHostCallFunction(ctx, /*background=*/false);  // fetch's own host.call
//   JSValue sleep = NewHostCallFunction(ctx, /*background=*/true);  // the timers' timer.sleep
#pragma once

#include <cstdint>

extern "C" {
#include "quickjs.h"
}

namespace basal::worker {

// A function that does what the flow's host.call(name, args) does: the same checks (a TypeError
// at module top level, where no activation runs), the same pacing and heap accounting. A call
// made with a `background` function does not keep an activation open: once the flow's export
// settled, the activation ends without waiting for it, and its answer, if it still comes, is
// dropped (the timers' sleeps: a pending setTimeout does not keep an activation alive).
JSValue NewHostCallFunction(JSContext* ctx, bool background);

// The running activation's id; 0 between activations and at module top level.
int64_t RunningActivation(JSContext* ctx);

// Ends the running activation as if its export had thrown `error` (an uncaught exception in a
// timer callback). Does nothing between activations or once the export settled.
void FailActivation(JSContext* ctx, JSValueConst error);

// Calls `fn()` after every activation, once its `done` is sent: the web globals drop what the
// activation left (pending timers). Exceptions are ignored; CPU spent is nobody's.
void AddActivationEndHook(JSContext* ctx, JSValueConst fn);

// Calls `fn()` whenever the running activation's script has no job left to run and its export
// has not settled, before the engine waits for the parent: `fn` may run one piece of script (a
// timer whose time has come) and returns true if it did; the engine then runs the jobs that
// queued and asks again. This makes each timer callback a task of its own, with the microtasks
// it queued run before the next timer, as HTML's event loop does. An exception from `fn` ends the
// activation with it.
void AddIdleHook(JSContext* ctx, JSValueConst fn);

}  // namespace basal::worker
