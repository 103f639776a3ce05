// The timers (see web_timers.h): the natives js/timers.js is given, and its installation.
#include "worker/web_timers.h"

#include "worker/durable.h"
#include "worker/js/durable_js.h"
#include "worker/js/timers_js.h"
#include "worker/script_host.h"
#include "worker/web_install.h"

namespace basal::worker {
namespace {

// The timers' clock in milliseconds (with a fraction): the monotonic clock, the same clock as the
// parent's loop (steady_clock), so a sleep of n ms ends no earlier than n ms by this clock; in a
// durable run, the run's clock, which the answer to a timer.sleep moves (durable.h), so a timer
// fires when an answer's clock_us reaches its due time, on every execution of the run.
JSValue Now(JSContext* ctx, JSValueConst, int, JSValueConst*) {
  return JS_NewFloat64(ctx, TheWorkerClocks().TimerMs());
}

JSValue ActivationId(JSContext* ctx, JSValueConst, int, JSValueConst*) {
  return JS_NewInt64(ctx, RunningActivation(ctx));
}

JSValue Fail(JSContext* ctx, JSValueConst, int argc, JSValueConst* argv) {
  FailActivation(ctx, argc > 0 ? argv[0] : JS_UNDEFINED);
  return JS_UNDEFINED;
}

JSValue OnIdle(JSContext* ctx, JSValueConst, int argc, JSValueConst* argv) {
  if (argc < 1 || !JS_IsFunction(ctx, argv[0])) return JS_ThrowTypeError(ctx, "onIdle: a function");
  AddIdleHook(ctx, argv[0]);
  return JS_UNDEFINED;
}

JSValue OnActivationEnd(JSContext* ctx, JSValueConst, int argc, JSValueConst* argv) {
  if (argc < 1 || !JS_IsFunction(ctx, argv[0])) return JS_ThrowTypeError(ctx, "onActivationEnd: a function");
  AddActivationEndHook(ctx, argv[0]);
  return JS_UNDEFINED;
}

JSValue Durable(JSContext* ctx, JSValueConst, int, JSValueConst*) {
  return JS_NewBool(ctx, TheWorkerClocks().durable_run() != nullptr);
}

}  // namespace

bool InstallDurableGlobals(JSContext* ctx, JSValueConst global, std::string& error) {
  JSValue natives = JS_NewObject(ctx);
  if (JS_IsException(natives)) return InstallFailed(ctx, "durable", error);
  JS_SetPropertyStr(ctx, natives, "call", NewHostCallFunction(ctx, /*background=*/false));
  JS_SetPropertyStr(ctx, natives, "durable", JS_NewCFunction(ctx, Durable, "durable", 0));
  return RunInstaller(ctx, js::kDurableSource, "<basal-durable>", natives, global, "durable", error);
}

bool InstallTimerGlobals(JSContext* ctx, JSValueConst global, std::string& error) {
  JSValue natives = JS_NewObject(ctx);
  if (JS_IsException(natives)) return InstallFailed(ctx, "timers", error);
  JS_SetPropertyStr(ctx, natives, "sleep", NewHostCallFunction(ctx, /*background=*/true));
  JS_SetPropertyStr(ctx, natives, "activationId", JS_NewCFunction(ctx, ActivationId, "activationId", 0));
  JS_SetPropertyStr(ctx, natives, "fail", JS_NewCFunction(ctx, Fail, "fail", 1));
  JS_SetPropertyStr(ctx, natives, "now", JS_NewCFunction(ctx, Now, "now", 0));
  JS_SetPropertyStr(ctx, natives, "onIdle", JS_NewCFunction(ctx, OnIdle, "onIdle", 1));
  JS_SetPropertyStr(ctx, natives, "onActivationEnd", JS_NewCFunction(ctx, OnActivationEnd, "onActivationEnd", 1));
  return RunInstaller(ctx, js::kTimersSource, "<basal-timers>", natives, global, "timers", error);
}

}  // namespace basal::worker
