// The web-standard globals of a flow's context (docs/runtime.md), installed lazily: each name
// starts as an accessor on globalThis whose getter runs its group's installer on first use; the
// installer defines every name of its group as a plain data property (writable, configurable,
// not enumerable, like a browser's globals), which replaces the accessors. A worker whose script
// never touches URL never reads URL's bytecode: what every worker pays is the accessors alone
// (measured: about 5 KB of JavaScript heap and 3 us for the eleven names of this table).
//
//   // engine.cpp, once the context exists:
//   InstallLazyGlobals(ctx, WebGlobals());
//
//   // a new group: one installer and one row in WebGlobals()'s table (web_globals_table.cpp)
//   bool InstallTimers(JSContext* ctx, JSValueConst global, std::string& error) {
//     JS_DefinePropertyValueStr(ctx, global, "setTimeout", ..., JS_PROP_WRITABLE | JS_PROP_CONFIGURABLE);
//     ...
//     return true;
//   }
//   constexpr const char* kTimerNames[] = {"setTimeout", "clearTimeout", "setInterval", "clearInterval"};
//   {kTimerNames, InstallTimers},
//
// Code that only a first use runs (installers, natives) goes in a file listed in
// src/worker/lazy_text.ld (like web_natives.cpp), so that idle workers do not keep it resident.
//
// Assigning to a name before its first read (`globalThis.URL = MyURL`) replaces it without loading
// anything, as it would replace a browser's global.
#pragma once

#include <span>
#include <string>

extern "C" {
#include "quickjs.h"
}

namespace basal::worker {

// Defines every name of its group on `global` as a data property with the flags above (a name it
// leaves out stays an accessor, and its next read runs the installer again). On failure returns
// false and either sets `error` (the getter throws an Error saying which global failed to load
// and why) or leaves `error` empty with a JavaScript exception pending (e.g. QuickJS's out of
// memory under the heap budget), which then propagates unchanged.
using WebInstaller = bool (*)(JSContext* ctx, JSValueConst global, std::string& error);

struct LazyGlobal {
  std::span<const char* const> names;  // the globals the installer defines
  WebInstaller install;
};

// Puts the accessors on ctx's global object. `groups` must outlive the context (a static table),
// and is the process's one table (a worker has one context): a later call replaces it. At most 64
// groups of at most 64 names. Returns false with a JavaScript exception pending when QuickJS
// could not allocate the accessors.
bool InstallLazyGlobals(JSContext* ctx, std::span<const LazyGlobal> groups);

// The worker's table: URL and URLSearchParams (whatwg-url, bytecode); TextEncoder, TextDecoder,
// atob, btoa, structuredClone, crypto, queueMicrotask, DOMException and __basal_internal
// (src/worker/js/web_core.js over the natives in web_natives.cpp); fetch, Request, Response, Headers
// (web_fetch.h); the timers (web_timers.h); performance (web_natives.cpp).
std::span<const LazyGlobal> WebGlobals();

// Runs a bundle compiled by basal-js-bundle (src/worker/tools/js_bundle.cpp) from the worker's own
// image (defined in web_natives.cpp, with the other first-use code): reads its bytecode, evaluates it and calls the resulting function with `native`. Returns
// the entry module's exports, or JS_EXCEPTION with the exception pending.
JSValue RunBundle(JSContext* ctx, const unsigned char* bytecode, size_t size, JSValueConst native);

}  // namespace basal::worker
