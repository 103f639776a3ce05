// The installers of the worker's web globals (web_globals.cpp's table) and the natives they give
// src/worker/js/web_core.js. Kept apart from web_globals.cpp because only a global's first use runs
// this code: src/worker/lazy_text.ld links it away from the code every worker runs.
#pragma once

#include <string>

#include "worker/web_globals.h"

namespace basal::worker {

// URL, URLSearchParams: the whatwg-url bundle.
inline constexpr const char* kUrlNames[] = {"URL", "URLSearchParams"};
bool InstallUrl(JSContext* ctx, JSValueConst global, std::string& error);

// The web_core.js bundle over the natives.
inline constexpr const char* kCoreNames[] = {"DOMException", "TextEncoder",    "TextDecoder", "atob", "btoa",
                                             "structuredClone", "crypto", "queueMicrotask", "__basal_internal"};
bool InstallCore(JSContext* ctx, JSValueConst global, std::string& error);

// performance (High Resolution Time): now(), timeOrigin and toJSON(), over the clocks of durable.h.
inline constexpr const char* kPerformanceNames[] = {"performance"};
bool InstallPerformance(JSContext* ctx, JSValueConst global, std::string& error);

// Web globals are writable and configurable, not enumerable (as on the web).
inline constexpr int kWebGlobalFlags = JS_PROP_WRITABLE | JS_PROP_CONFIGURABLE;

}  // namespace basal::worker
