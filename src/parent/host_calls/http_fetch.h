// The http.fetch host call: a flow's HTTP request, checked against its grant's rules, made by the
// parent on its event loop (parent/http/http_client.h), with the SSRF guard on every address it
// connects and the grant's secrets injected into headers the script never sees (docs/http.md).
//
//   manifest: {"grants": {"http.fetch": {"rules": [{"url": "https://api.example.com/v1/",
//                "methods": ["GET", "POST"],
//                "headers": {"Authorization": "Bearer ${secret:example_token}"}}]}}}
//   flow:     const r = await fetch("https://api.example.com/v1/items");   // the worker's fetch()
//
// Wire (the worker's fetch() sends and reads these; docs/http.md):
//   args   {"url", "method", "headers": [[name, value], ...], "body": null | {"base64"},
//           "redirect": "follow" | "error" | "manual"}
//   result {"status", "status_text", "url", "redirected", "headers": [[name, value], ...],
//           "body_base64", "basal": {"hops": [{"url", "rule", "address", "status"}], "secrets": [names]}}
// A refusal or a failure answers TypeError (the Fetch standard's network error) whose message
// names the URL and the reason; a URL or method no rule admits is denied by the call gate
// (PermissionDenied) before anything is sent.
//
// Bounds (the grant's "limits", defaults in parent/http/fetch_grant.h): body bytes each way, the
// time to connect and in all, redirects (each hop checked again), fetches in flight per activation
// (more wait their turn) and per activation in all; across the parent at most
// HttpFetchOptions::max_in_flight transfers run at once (more queue). Secret values found in a
// response (body, header values, URL) are replaced by "[secret NAME]" before the flow or the
// journal sees it.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "basal/host_call.h"
#include "basal/result.h"
#include "parent/loop/event_loop.h"

namespace basal {

struct HttpFetchOptions {
  size_t max_in_flight = 64;  // transfers at once across the parent
  std::string user_agent = "basal";
  // The value of secret `name`, or the error saying why there is none (not set, unreadable).
  // Null: no secrets (a rule that references one fails its requests, naming the secret).
  std::function<Result<std::string>(std::string_view name)> secret;
  // Tests: the addresses a host name resolves to (empty: resolve normally). Lets a test make a
  // name resolve to 127.0.0.1 or 169.254.169.254, or answer differently on each lookup.
  std::function<std::vector<std::string>(const std::string& host)> resolve_for_tests;
  // Counts a refusal or failure by reason for the health report (http_refusals, http_failures).
  std::function<void(std::string_view kind, std::string_view reason)> count;
};

// Registers http.fetch. The loop must outlive the registry's use of the handler; the service the
// handler uses is owned by the registered spec (destroyed with the registry).
Result<void> RegisterHttpFetch(HostCallRegistry& registry, EventLoop& loop, HttpFetchOptions options);
// The spec without a loop (manifest checks and reviews, e.g. `basal flow approve`): its handler
// answers HostError.
Result<void> RegisterHttpFetchSpec(HostCallRegistry& registry);

}  // namespace basal
