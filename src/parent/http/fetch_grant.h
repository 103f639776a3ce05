// The grant of the http.fetch host call: what it says (CheckFetchGrant, ParseFetchGrant), which
// requests it admits (AuthorizeFetch, MatchRequest), the headers a rule adds with their secrets
// (SecretRefs, ExpandSecrets, RequestHeaders), and how a review compares two grants
// (CompareFetchGrant). docs/http.md describes it for operators.
//
//   manifest: {"grants": {"http.fetch": {"rules": [
//               {"url": "https://api.example.com/v1/", "methods": ["GET", "POST"],
//                "headers": {"Authorization": "Bearer ${secret:example_token}"}}],
//             "limits": {"timeout_ms": 5000}}}}
//
//   spec.check_grant = CheckFetchGrant;
//   spec.authorize = AuthorizeFetch;
//   spec.compare_grant = CompareFetchGrant;
//   // in the handler, after authorize admitted the call:
//   Result<FetchGrant> grant = ParseFetchGrant(*ctx.grant, "grants.http.fetch");
//   Result<FetchRequest> request = ParseFetchArgs(args, grant->limits);
//   RuleMatch match = MatchRequest(*grant, request->url, request->method);   // match.rule set
//   auto headers = RequestHeaders(*match.rule, request->headers, lookup_secret);
//   // connect only where ConnectRefusal(address, match.rule->allow_networks) is nullopt (address.h);
//   // a redirect is a new request: canonicalize, match and guard it again, with ITS rule's headers.
//
// Pure: no I/O. Every function here may be called with any JSON; the JSON the worker sends is
// hostile, the manifest is checked before anyone approves it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "basal/host_call.h"
#include "basal/result.h"
#include "parent/http/address.h"
#include "parent/http/url_rule.h"

namespace basal::http {

// Bounds of a grant (the manifest is reviewed, but a typo must not make the parent spend without
// bound on every call).
inline constexpr size_t kMaxRules = 64;
inline constexpr size_t kMaxRuleMethods = 32;
inline constexpr size_t kMaxRuleHeaders = 32;
inline constexpr size_t kMaxRuleHeaderValueBytes = 8192;
inline constexpr size_t kMaxRuleNetworks = 64;
// Bounds of one request's arguments (hostile: the worker's).
inline constexpr size_t kMaxRequestHeaders = 100;
inline constexpr size_t kMaxRequestHeaderBytes = 64 * 1024;  // names and values together
inline constexpr size_t kMaxMethodBytes = 32;
inline constexpr size_t kMaxSecretNameBytes = 64;

// The grant's "limits", defaults filled in. Ranges in kLimitSpecs (fetch_grant.cpp) and the docs.
struct FetchLimits {
  uint64_t connect_timeout_ms = 10000;    // DNS + TCP + TLS handshake; 1..60000
  uint64_t timeout_ms = 30000;            // the whole request; 1..300000
  uint64_t max_response_bytes = 4194304;  // body bytes; 0..8388608 (the answer travels base64 in one 16 MiB frame)
  uint64_t max_request_bytes = 1048576;   // body bytes the script may send; 0..8388608
  uint64_t max_redirects = 0;             // 0..5; 0: redirects are returned, not followed
  uint64_t max_in_flight = 4;             // fetches of one activation at once; 1..64
  uint64_t max_requests = 100;            // fetches per activation; 1..100000
};

// A header a rule sets; `value` may hold ${secret:NAME} references, expanded per request.
struct HeaderTemplate {
  std::string name;  // as written in the manifest
  std::string value;
};

// A rule's "retry": a request of the rule that answered one of `statuses`, or failed to connect or
// timed out, is sent again inside the same activation, up to max_attempts in all, waiting
// backoff between attempts (initial_ms, times factor each time, at most max_ms; a Retry-After of
// the answer lengthens the wait up to max_ms). Only a request that is idempotent (RequestEffect)
// is retried: repeating it changes nothing the first did not.
struct FetchRetry {
  std::vector<int64_t> statuses = {408, 425, 429, 500, 502, 503, 504};  // 400..599, sorted
  uint64_t max_attempts = 3;   // 2..10
  uint64_t initial_ms = 200;   // 1..60000
  double factor = 2;           // 1..10
  uint64_t max_ms = 5000;      // initial_ms..60000
  // The wait before attempt `next` (2, 3, ...): initial_ms * factor^(next-2), at most max_ms.
  uint64_t DelayBefore(uint64_t next) const;
  bool operator==(const FetchRetry&) const = default;
};

struct FetchRule {
  UrlPattern url;
  std::vector<std::string> methods;     // uppercase, as granted (default GET, HEAD)
  std::vector<HeaderTemplate> headers;  // sorted by name (the manifest's JSON object, as read)
  std::vector<Cidr> allow_networks;
  bool allow_plain_http = false;
  // A header that carries the journal's idempotency key of the call (HostCallContext; the same in
  // every resume of a durable run), e.g. "Idempotency-Key": the server drops a duplicate, so a
  // request of this rule is idempotent whatever its method (docs/durable.md). "": none.
  std::string idempotency_key;
  std::optional<FetchRetry> retry;  // none: a request is sent once
};

// What a request does to the world, as the journal classes it: GET, HEAD, OPTIONS, PUT and DELETE
// are idempotent by HTTP's definition (RFC 9110), any other method external unless its rule sends
// the idempotency key.
Effect RequestEffect(const FetchRule& rule, std::string_view method);

struct FetchGrant {
  std::vector<FetchRule> rules;
  FetchLimits limits;
};

// check_grant of http.fetch: every error names its JSON path under `path`
// ("grants.http.fetch.rules[0].url: ...") and says what to write instead.
Result<void> CheckFetchGrant(const Json& grant, const std::string& path);
// The same checks, and the parsed grant.
Result<FetchGrant> ParseFetchGrant(const Json& grant, const std::string& path);
// The same, shared with this thread's memo of the last grant parsed: the gate's authorize, the
// call's effect and the handler each ask for the grant of one call, and get it without a copy.
Result<std::shared_ptr<const FetchGrant>> SharedFetchGrant(const Json& grant, const std::string& path);

// The first rule that admits the URL and the method, or the reason none does, written for the
// flow's author: "no rule of grant http.fetch admits https://evil.example/x (rules: ...)" or
// "method DELETE is not granted for https://api.example.com/v1/ (granted: GET, HEAD)".
// `method` is compared exactly (NormalizeMethod first).
struct RuleMatch {
  const FetchRule* rule = nullptr;  // into the grant: valid while it lives
  std::string denial;               // set when rule is null
};
RuleMatch MatchRequest(const FetchGrant& grant, const CanonicalUrl& url, std::string_view method);

// An HTTP token (RFC 9110 tchar), 1 byte or more.
bool IsToken(std::string_view text);
// Header names basal (libcurl) controls, which neither a rule nor a script may set, compared
// case-insensitively: host, content-length, transfer-encoding, connection, keep-alive, upgrade,
// te, trailer, expect, http2-settings, and proxy-*. (sec-* is allowed: those names mean something
// only in browsers, and basal is not one.) Exposed for the client and tests.
bool IsControlledHeader(std::string_view name);
// A request method as fetch() sends it: DELETE, GET, HEAD, OPTIONS, POST, PUT in any case become
// uppercase, other tokens stay as they are. The error: not a token, too long, or CONNECT, TRACE
// or TRACK (any case), which fetch() forbids.
Result<std::string> NormalizeMethod(std::string_view method);

// The ${secret:NAME} references of a rule's headers: sorted, without duplicates.
std::vector<std::string> SecretRefs(const FetchRule& rule);
using SecretLookup = std::function<std::optional<std::string>(std::string_view name)>;
// A header value template with its ${secret:NAME} references replaced by lookup(NAME). Fails
// naming a missing secret, or a secret whose value holds CR, LF or NUL (it would split the header),
// never showing a value.
Result<std::string> ExpandSecrets(std::string_view value_template, const SecretLookup& lookup);
// The headers sent: the script's, minus those a rule header of the same name (any case) replaces,
// then the rule's, expanded.
using HeaderList = std::vector<std::pair<std::string, std::string>>;
Result<HeaderList> RequestHeaders(const FetchRule& rule, const HeaderList& script_headers, const SecretLookup& lookup);

// The arguments of one http.fetch call (the wire format from the worker):
//   {"url": string, "method": string, "headers": [[name, value], ...], "body": null|{"base64": s},
//    "redirect": "follow"|"error"|"manual"}
// url and method are required; headers default to [], body to null, redirect to "follow".
enum class RedirectMode { kFollow, kError, kManual };
struct FetchRequest {
  CanonicalUrl url;
  std::string method;               // NormalizeMethod's
  HeaderList headers;               // the script's, in order
  std::optional<std::string> body;  // decoded bytes
  RedirectMode redirect = RedirectMode::kFollow;
};
// Strict: unknown keys, wrong types, more than kMaxRequestHeaders headers or kMaxRequestHeaderBytes
// of them, a name that is no token or is IsControlledHeader, CR/LF/NUL in a value, a body on GET
// or HEAD, a body larger than limits.max_request_bytes (its base64 length is checked before
// decoding), base64 that is not strict RFC 4648 (padded, no whitespace), and every URL error of
// CanonicalizeUrl. The error message is the denial reason.
Result<FetchRequest> ParseFetchArgs(const Json& args, const FetchLimits& limits);
// The same, shared with this thread's memo of the last arguments parsed (SharedFetchGrant's reason).
Result<std::shared_ptr<const FetchRequest>> SharedFetchArgs(const Json& args, const FetchLimits& limits);

// authorize of http.fetch: nullopt when the grant admits the call, else the reason. Validates the
// arguments (ParseFetchArgs), matches them (MatchRequest), and guards an IP-literal host at once
// (ConnectRefusal with the rule's allow_networks). A host name's addresses are guarded later, when
// the client has resolved it: the client must call ConnectRefusal for every address.
std::optional<std::string> AuthorizeFetch(const Json& constraints, const Json& args);

// compare_grant of http.fetch. Rules are paired by their canonical url; in this order:
//   "rules[URL]"                    added: widened ("+URL (GET, HEAD)"); removed: narrowed
//   "rules[URL].methods"            "+DELETE -HEAD": only added widens, only removed narrows
//   "rules[URL].allow_networks"     a set that contains every address of the other's is wider
//   "rules[URL].allow_plain_http"   false -> true widens
//   "rules[URL].retry"              changed ("none -> 3 attempts on 429, 503"): not wider, but
//                                   more requests to the same server
//   "rules[URL].headers"            changed, naming the headers ("+X-Key ~Authorization -X-Old"),
//                                   never a value (the manifest holds only secret references)
//   "rules"                         changed when rules both grants have are in another order (the
//                                   first matching rule sets the headers)
//   "limits.NAME"                   larger widens ("30000 (default) -> 60000")
std::vector<ConstraintChange> CompareFetchGrant(const Json& before, const Json& after);

}  // namespace basal::http
