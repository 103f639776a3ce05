// Request URLs and the URL patterns of http.fetch rules: the canonical form a request is matched
// and sent in, so that what the grant matched is what the client requests
// (docs/http.md, "Canonical URLs" and "Matching").
//
//   Result<CanonicalUrl> u = CanonicalizeUrl("HTTPS://API.Example.com./v1/a/%2e%2e/b?x=1#top");
//   u->url;   // "https://api.example.com:443/v1/b?x=1"
//   Result<UrlPattern> p = ParseUrlPattern("https://*.example.com/v1");
//   PatternMatches(*p, *u);  // true: a subdomain, and /v1/b is under /v1
//
// Pure, no I/O. Errors are kInvalidArgument with a message that names the problem and what to do;
// they never quote more than a short, printable-escaped piece of the input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "basal/result.h"
#include "parent/http/address.h"

namespace basal::http {

// A URL longer than this is refused, before and after canonicalization (percent-encoding can
// grow it). 8 KiB is the request-line limit common servers apply.
inline constexpr size_t kMaxUrlBytes = 8192;

struct CanonicalUrl {
  // scheme://host:port/path[?query]: the port always written, the fragment dropped. The string the
  // client requests; CanonicalizeUrl(url) gives it back unchanged.
  std::string url;
  std::string scheme;         // "http" or "https"
  std::string host;           // lowercase ASCII (IDN as punycode), or an IP address without brackets
  uint16_t port = 0;          // explicit, 1..65535 (the scheme's default when the URL had none)
  std::string path;           // starts with '/': dot segments removed, %2F kept encoded
  std::string query;          // without '?'; empty when none
  std::optional<Address> ip;  // set when the host is an IP literal

  bool host_is_ip() const { return ip.has_value(); }
  uint16_t default_port() const { return scheme == "https" ? 443 : 80; }
  // For messages: scheme://host[:port]/path, the port only when not the default, IPv6 in
  // brackets, no query (it may carry tokens), cut to 200 bytes.
  std::string Display() const;
};

// Parses a request URL and returns its canonical form:
// - only http and https (case-insensitive); userinfo (user:pass@) refused: credentials in a URL
//   would travel where the grant's headers are not checked;
// - no space, control byte or backslash anywhere (browsers read '\' as '/', servers may not);
// - host: lowercase; ONE trailing dot removed; IDN to punycode (libidn2, UTS #46 non-transitional);
//   a host whose last label is a number (2130706433, 0x7f.1, 0177.0.0.1, 127.1) is read as IPv4
//   the way browsers do (WHATWG URL) and written dotted (127.0.0.1), or refused if it is no valid
//   IPv4; IPv6 in brackets, written compressed lowercase, zone ids (%25eth0) refused;
//   percent-encoding in a host refused;
// - port: the scheme's default when absent; 1..65535;
// - path: percent-encoded unreserved characters (ALPHA DIGIT - . _ ~) decoded FIRST, so
//   "/v1/%2e%2e/admin" is "/admin"; then dot segments removed; other escapes kept with
//   uppercase hex (%2F is never a separator); bytes outside RFC 3986's pchar encoded;
// - query kept, its escapes' hex uppercased and bytes outside RFC 3986 encoded; fragment dropped.
// The result is checked against libcurl's own reading of it (curl_url): any difference in host,
// port, path or query is refused, so the client cannot request something else than was matched.
Result<CanonicalUrl> CanonicalizeUrl(std::string_view text);

// A rule's "url": scheme://host[:port]/path-prefix. host is exact, an IP literal, or
// "*.example.com" (any subdomain at any depth of example.com, not example.com itself; the
// suffix must have two labels or more and not be an IP). No userinfo, query, fragment or other '*'.
struct UrlPattern {
  std::string text;  // canonical: "https://*.example.com/v1/" (the port only when not default)
  std::string scheme;
  std::string host;  // without "*." for a wildcard
  bool wildcard = false;
  bool host_is_ip = false;
  uint16_t port = 0;
  std::string path_prefix;  // canonical like a request path; "/" when absent
};
Result<UrlPattern> ParseUrlPattern(std::string_view text);

// Scheme and port equal; host equal (wildcard: ends with "." + host, not an IP); path: a prefix
// ending in '/' matches the paths that start with it, another prefix matches itself and
// prefix + "/..." ("/v1" matches "/v1" and "/v1/x", not "/v1admin").
bool PatternMatches(const UrlPattern& pattern, const CanonicalUrl& url);

// Whether a host name (after canonicalization) may be a DNS name: LDH labels and '_', 1..63
// bytes each, 253 in all. Exposed for tests.
bool IsCanonicalHostName(std::string_view host);

}  // namespace basal::http
