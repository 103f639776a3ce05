// Fuzz target: the http.fetch policy (src/parent/http/): CanonicalizeUrl and ParseUrlPattern,
// ParseAddress and ParseCidr with the SSRF guard, and the grant (CheckFetchGrant, AuthorizeFetch,
// ParseFetchArgs, MatchRequest, CompareFetchGrant) on arbitrary bytes.
//
// Input: up to four parts separated by NUL bytes: a URL, an address or CIDR, a grant's
// constraints (JSON) and a call's arguments (JSON):
//
//   https://api.example.com/v1/%2e%2e/x                        <- the URL, then NUL
//   ::ffff:127.0.0.1                                           <- the address or CIDR, then NUL
//   {"rules": [{"url": "https://api.example.com/"}]}           <- the grant, then NUL
//   {"url": "https://api.example.com/x", "method": "GET"}      <- the arguments
//
// Invariants:
// - nothing crashes; every error message is printable ASCII (it may reach a terminal);
// - a URL accepted by CanonicalizeUrl is a fixed point: canonicalizing its canonical form gives the
//   same URL and parts; it is at most kMaxUrlBytes of printable ASCII with no '#', its path starts
//   with '/' and holds no dot segment; an IP host has its address set;
// - an accepted URL pattern's canonical text parses to itself; an exact pattern matches its own URL;
// - an accepted address prints in a form that parses back to it; an address is never refused
//   when an allow_networks entry holds it; an accepted CIDR holds its own base and prints back;
// - a refused grant names its path; an accepted one compares equal to itself (no change); a call
//   AuthorizeFetch admits has arguments ParseFetchArgs accepts and a rule MatchRequest finds whose
//   pattern matches the call's canonical URL and grants its method.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_check.h"
#include "parent/http/address.h"
#include "parent/http/fetch_grant.h"
#include "parent/http/url_rule.h"
#include "protocol/messages.h"

namespace basal::http {
namespace {

void CheckPrintable(const std::string& text, const char* what) {
  for (char c : text) {
    FUZZ_CHECK(c >= 0x20 && c < 0x7f, std::string(what) + " holds an unprintable byte: " + text.substr(0, 300));
  }
}

void CheckUrl(std::string_view text) {
  auto u = CanonicalizeUrl(text);
  if (!u) {
    CheckPrintable(u.error().message, "a URL error");
    return;
  }
  FUZZ_CHECK(u->url.size() <= kMaxUrlBytes, "a canonical URL past the cap");
  CheckPrintable(u->url, "a canonical URL");
  CheckPrintable(u->Display(), "a displayed URL");
  FUZZ_CHECK(u->url.find('#') == std::string::npos, "a fragment kept: " + u->url);
  FUZZ_CHECK(!u->path.empty() && u->path[0] == '/', "a path without '/': " + u->url);
  const std::string slashed = u->path + "/";
  FUZZ_CHECK(slashed.find("/./") == std::string::npos && slashed.find("/../") == std::string::npos,
             "a dot segment left: " + u->url);
  FUZZ_CHECK(u->scheme == "http" || u->scheme == "https", "scheme " + u->scheme);
  FUZZ_CHECK(u->port != 0, "port 0");
  auto again = CanonicalizeUrl(u->url);
  FUZZ_CHECK(again.ok(), "the canonical form is refused: " + u->url + ": " + (again ? "" : again.error().message));
  FUZZ_CHECK(again->url == u->url && again->host == u->host && again->port == u->port && again->path == u->path &&
                 again->query == u->query && again->ip == u->ip,
             "not a fixed point: " + u->url + " -> " + again->url);
  if (u->ip) {
    FUZZ_CHECK(FormatAddress(*u->ip) == u->host, "an IP host that is not its address: " + u->host);
    (void)SpecialPurpose(*u->ip);
  }

  auto p = ParseUrlPattern(text);
  if (!p) {
    CheckPrintable(p.error().message, "a pattern error");
    return;
  }
  CheckPrintable(p->text, "a pattern");
  auto p2 = ParseUrlPattern(p->text);
  FUZZ_CHECK(p2.ok() && p2->text == p->text, "a pattern's text is not a fixed point: " + p->text);
  if (!p->wildcard) {
    auto own = CanonicalizeUrl(p->text);
    FUZZ_CHECK(own.ok() && PatternMatches(*p, *own), "an exact pattern does not match its own URL: " + p->text);
  }
}

void CheckAddress(std::string_view text) {
  if (auto a = ParseAddress(text)) {
    const std::string shown = FormatAddress(*a);
    FUZZ_CHECK(ParseAddress(shown) == a, "an address does not print back: " + shown);
    if (auto reason = SpecialPurpose(*a)) CheckPrintable(*reason, "a reason");
    auto own = ParseCidr(shown + (a->v6 ? "/128" : "/32"));
    FUZZ_CHECK(own.ok(), "an address's own CIDR is refused: " + shown);
    FUZZ_CHECK(!ConnectRefusal(*a, {*own}).has_value(), "allow_networks did not exempt " + shown);
    if (auto v4 = EmbeddedIpv4(*a)) {
      FUZZ_CHECK(InNetworks(*a, {Cidr{*v4, 32}}), "an embedded IPv4 address not in its own network: " + shown);
    }
  }
  auto cidr = ParseCidr(text);
  if (!cidr) {
    CheckPrintable(cidr.error().message, "a CIDR error");
    return;
  }
  FUZZ_CHECK(Contains(*cidr, cidr->base), "a CIDR without its base: " + FormatCidr(*cidr));
  FUZZ_CHECK(Contains(*cidr, *cidr), "a CIDR not containing itself");
  auto again = ParseCidr(FormatCidr(*cidr));
  FUZZ_CHECK(again.ok() && *again == *cidr, "a CIDR does not print back: " + FormatCidr(*cidr));
}

void CheckGrant(std::string_view grant_text, std::string_view args_text) {
  Json grant;
  std::string error;
  if (!protocol::ParseJsonValue(grant_text, grant, error)) return;
  const std::string path = "grants.http.fetch";
  auto parsed = ParseFetchGrant(grant, path);
  const Result<void> checked = CheckFetchGrant(grant, path);
  FUZZ_CHECK(parsed.ok() == checked.ok(), "CheckFetchGrant and ParseFetchGrant disagree");
  if (!parsed) {
    FUZZ_CHECK(parsed.error().message.rfind(path, 0) == 0, "a grant error without its path: " + parsed.error().message);
    CheckPrintable(parsed.error().message, "a grant error");
    return;
  }
  FUZZ_CHECK(!parsed->rules.empty() && parsed->rules.size() <= kMaxRules, "a grant with a wrong number of rules");
  FUZZ_CHECK(CompareFetchGrant(grant, grant).empty(), "a grant differs from itself");
  for (const FetchRule& rule : parsed->rules) {
    FUZZ_CHECK(!rule.methods.empty(), "a rule without methods");
    for (const std::string& name : SecretRefs(rule)) FUZZ_CHECK(!name.empty() && name.size() <= 64, "a secret name");
    auto headers = RequestHeaders(rule, {}, [](std::string_view) { return std::optional<std::string>("v"); });
    FUZZ_CHECK(headers.ok(), "a checked rule's headers do not expand: " + (headers ? "" : headers.error().message));
  }

  Json args;
  if (!protocol::ParseJsonValue(args_text, args, error)) return;
  const std::optional<std::string> denial = AuthorizeFetch(grant, args);
  if (denial) {
    CheckPrintable(*denial, "a denial");
    return;
  }
  auto request = ParseFetchArgs(args, parsed->limits);
  FUZZ_CHECK(request.ok(), "admitted arguments that ParseFetchArgs refuses");
  FUZZ_CHECK(!request->body || request->body->size() <= parsed->limits.max_request_bytes, "a body past the limit");
  RuleMatch match = MatchRequest(*parsed, request->url, request->method);
  FUZZ_CHECK(match.rule != nullptr, "an admitted call without a rule: " + match.denial);
  FUZZ_CHECK(PatternMatches(match.rule->url, request->url), "the rule does not match the URL");
  bool granted = false;
  for (const std::string& m : match.rule->methods) granted = granted || m == request->method;
  FUZZ_CHECK(granted, "the rule does not grant the method " + request->method);
}

}  // namespace
}  // namespace basal::http

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (parts.size() < 3) {
    const size_t nul = input.find('\0', start);
    if (nul == std::string_view::npos) break;
    parts.push_back(input.substr(start, nul - start));
    start = nul + 1;
  }
  parts.push_back(input.substr(start));
  while (parts.size() < 4) parts.emplace_back();
  basal::http::CheckUrl(parts[0]);
  basal::http::CheckAddress(parts[1]);
  basal::http::CheckGrant(parts[2], parts[3]);
  return 0;
}
