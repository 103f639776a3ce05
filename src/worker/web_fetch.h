// fetch, Request, Response and Headers for flows (js/fetch.js), over the `http.fetch` host call:
// the parent does the network, under the flow's grants. docs/runtime.md says what
// flows can rely on and what the host call's arguments and answer look like.
//
//   std::string why;
//   if (!InstallFetchGlobals(ctx, global, why)) ...   // once per context, before the flow runs
#pragma once

#include <string>
#include <string_view>

extern "C" {
#include "quickjs.h"
}

namespace basal::worker {

// The host call fetch() makes: the one place that names it.
inline constexpr std::string_view kFetchHostCall = "http.fetch";

// Defines fetch, Headers, Request and Response on `global`. False (with `error` saying why) if the
// embedded script could not be evaluated: out of memory, or a bug of ours.
bool InstallFetchGlobals(JSContext* ctx, JSValueConst global, std::string& error);

}  // namespace basal::worker
