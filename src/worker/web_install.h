// What the web globals' natives share: Guarded (allocations refused by the address-space limit),
// and how web_fetch.cpp and web_timers.cpp install their embedded JavaScript: the script evaluates
// to a function (natives, global) that defines the globals. Header-only; worker sources only.
#pragma once

#include <new>
#include <string>
#include <string_view>

extern "C" {
#include "quickjs.h"
}

namespace basal::worker {

// Takes the pending exception and says what went wrong; returns false for the installer.
inline bool InstallFailed(JSContext* ctx, const char* what, std::string& error) {
  JSValue exc = JS_GetException(ctx);
  const char* text = JS_ToCString(ctx, exc);
  error = std::string(what) + ": " + (text ? text : "out of memory");
  if (text) JS_FreeCString(ctx, text);
  JS_FreeValue(ctx, exc);
  return false;
}

// Evaluates `source` and calls the function it yields with (natives, global). Takes `natives`.
inline bool RunInstaller(JSContext* ctx, std::string_view source, const char* file, JSValue natives,
                         JSValueConst global, const char* what, std::string& error) {
  JSValue installer = JS_Eval(ctx, source.data(), source.size(), file, JS_EVAL_TYPE_GLOBAL | JS_EVAL_FLAG_STRICT);
  if (JS_IsException(installer)) {
    JS_FreeValue(ctx, natives);
    return InstallFailed(ctx, what, error);
  }
  JSValue args[2] = {natives, JS_DupValue(ctx, global)};
  JSValue r = JS_Call(ctx, installer, JS_UNDEFINED, 2, args);
  JS_FreeValue(ctx, args[0]);
  JS_FreeValue(ctx, args[1]);
  JS_FreeValue(ctx, installer);
  if (JS_IsException(r)) return InstallFailed(ctx, what, error);
  JS_FreeValue(ctx, r);
  return true;
}

// A native's body: an allocation the worker's address-space limit refuses (std::bad_alloc) becomes
// QuickJS's out-of-memory error in the script, never a C++ exception through QuickJS's C frames.
template <typename Body>
JSValue Guarded(JSContext* ctx, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return JS_ThrowOutOfMemory(ctx);
  }
}

}  // namespace basal::worker
