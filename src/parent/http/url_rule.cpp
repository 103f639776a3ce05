// Canonical request URLs and URL patterns (see url_rule.h).
#include "parent/http/url_rule.h"

#include <curl/curl.h>
#include <idn2.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

namespace basal::http {
namespace {

Error Invalid(std::string message) { return MakeError(ErrorCode::kInvalidArgument, std::move(message)); }

bool IsAlpha(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsAsciiDigit(unsigned char c) { return c >= '0' && c <= '9'; }
bool IsUnreserved(unsigned char c) { return IsAlpha(c) || IsAsciiDigit(c) || c == '-' || c == '.' || c == '_' || c == '~'; }
bool IsSubDelim(unsigned char c) {
  switch (c) {
    case '!':
    case '$':
    case '&':
    case '\'':
    case '(':
    case ')':
    case '*':
    case '+':
    case ',':
    case ';':
    case '=': return true;
    default: return false;
  }
}
bool IsPchar(unsigned char c) { return IsUnreserved(c) || IsSubDelim(c) || c == ':' || c == '@'; }

int HexDigitValue(unsigned char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

char LowerAscii(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

std::string LoweredAscii(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = LowerAscii(c);
  return out;
}

void AppendEscaped(std::string& out, unsigned char c) {
  static const char kHex[] = "0123456789ABCDEF";
  out += '%';
  out += kHex[c >> 4];
  out += kHex[c & 15];
}

// A piece of untrusted input for a message: at most 60 bytes, every byte outside printable ASCII
// as \xNN, so that a message never carries control bytes or broken UTF-8.
std::string ShownText(std::string_view s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size() && i < 60; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > 60) out += "...";
  return out + "\"";
}

// The escapes of a path segment or query normalized: '%' must start two hex digits; the escape of
// an unreserved byte is decoded when `decode_unreserved`; others are kept with uppercase hex;
// literal bytes outside `literal` are escaped.
Result<std::string> NormalizeEscapes(std::string_view in, bool decode_unreserved, bool (*literal)(unsigned char),
                                     const char* where) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(in[i]);
    if (c == '%') {
      const int hi = i + 1 < in.size() ? HexDigitValue(static_cast<unsigned char>(in[i + 1])) : -1;
      const int lo = i + 2 < in.size() ? HexDigitValue(static_cast<unsigned char>(in[i + 2])) : -1;
      if (hi < 0 || lo < 0) {
        return Invalid(
            std::string("a '%' in the ") + where +
            " must start an escape of two hex digits (%2F); write %25 for '%' itself: " + ShownText(in.substr(i, 3)));
      }
      const unsigned char decoded = static_cast<unsigned char>(hi * 16 + lo);
      if (decode_unreserved && IsUnreserved(decoded)) {
        out += static_cast<char>(decoded);
      } else {
        AppendEscaped(out, decoded);
      }
      i += 2;
    } else if (literal(c)) {
      out += static_cast<char>(c);
    } else {
      AppendEscaped(out, c);
    }
  }
  return out;
}

bool IsQueryLiteral(unsigned char c) { return IsPchar(c) || c == '/' || c == '?'; }

// RFC 3986 remove_dot_segments on the normalized segments of `path` (which starts with '/').
Result<std::string> NormalizePath(std::string_view path) {
  if (path.empty()) return std::string("/");
  std::vector<std::string> out;
  size_t start = 1;
  while (true) {
    const size_t slash = path.find('/', start);
    const bool last = slash == std::string_view::npos;
    const std::string_view raw = path.substr(start, last ? std::string_view::npos : slash - start);
    auto segment = NormalizeEscapes(raw, true, IsPchar, "path");
    if (!segment) return segment.error();
    if (*segment == "." || *segment == "..") {
      if (*segment == ".." && !out.empty()) out.pop_back();
      if (last) out.emplace_back();
    } else {
      out.push_back(std::move(*segment));
    }
    if (last) break;
    start = slash + 1;
  }
  std::string result;
  for (const std::string& s : out) result += "/" + s;
  return result.empty() ? std::string("/") : result;
}

// WHATWG URL's IPv4 number: "0x.." hex, "0.." octal, else decimal; nullopt if not one.
std::optional<uint64_t> ParseIpv4Number(std::string_view part) {
  int base = 10;
  if (part.size() >= 2 && part[0] == '0' && (part[1] == 'x' || part[1] == 'X')) {
    base = 16;
    part.remove_prefix(2);
    if (part.empty()) return 0;
  } else if (part.size() >= 2 && part[0] == '0') {
    base = 8;
    part.remove_prefix(1);
  }
  if (part.empty()) return std::nullopt;
  uint64_t value = 0;
  for (char ch : part) {
    const int d = HexDigitValue(static_cast<unsigned char>(ch));
    if (d < 0 || d >= base) return std::nullopt;
    value = value * base + static_cast<uint64_t>(d);
    if (value > 0xffffffffull) return uint64_t{1} << 33;  // too large, whatever follows
  }
  return value;
}

// WHATWG's "ends in a number": the last label (after one trailing dot) is decimal digits or 0x hex.
bool EndsInNumber(std::string_view host) {
  if (!host.empty() && host.back() == '.') host.remove_suffix(1);
  const size_t dot = host.rfind('.');
  std::string_view last = dot == std::string_view::npos ? host : host.substr(dot + 1);
  if (last.empty()) return false;
  bool digits = true;
  for (char c : last) digits = digits && IsAsciiDigit(static_cast<unsigned char>(c));
  if (digits) return true;
  if (last.size() >= 2 && last[0] == '0' && (last[1] == 'x' || last[1] == 'X')) {
    for (char c : last.substr(2)) {
      if (HexDigitValue(static_cast<unsigned char>(c)) < 0) return false;
    }
    return true;
  }
  return false;
}

// WHATWG's IPv4 parser: 1 to 4 numbers; all but the last at most 255, the last fills the rest.
Result<Address> ParseUrlIpv4(std::string_view host) {
  const std::string shown = ShownText(host);
  auto bad = [&]() {
    return Invalid("host " + shown +
                   " ends in a number, so it must be an IPv4 address (browsers read it as one), and it is not one: "
                   "write 4 numbers 0-255 (127.0.0.1) or a host name");
  };
  if (!host.empty() && host.back() == '.') host.remove_suffix(1);
  std::vector<uint64_t> numbers;
  size_t start = 0;
  while (true) {
    const size_t dot = host.find('.', start);
    auto n = ParseIpv4Number(host.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (!n) return bad();
    numbers.push_back(*n);
    if (numbers.size() > 4) return bad();
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  uint64_t value = 0;
  for (size_t i = 0; i + 1 < numbers.size(); ++i) {
    if (numbers[i] > 255) return bad();
    value |= numbers[i] << (8 * (3 - i));
  }
  const uint64_t last_limit = uint64_t{1} << (8 * (5 - numbers.size()));
  if (numbers.back() >= last_limit) return bad();
  value |= numbers.back();
  return Address::V4(static_cast<uint32_t>(value));
}

struct Parts {
  std::string scheme;
  std::string host;
  std::optional<Address> ip;
  uint16_t port = 0;
  std::string path;
  std::string query;
};

Result<std::string> CanonicalHostName(std::string_view raw) {
  bool ascii = true;
  for (char c : raw) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u >= 0x80) {
      ascii = false;
      continue;
    }
    if (!(IsAlpha(u) || IsAsciiDigit(u) || u == '-' || u == '.' || u == '_')) {
      if (u == '%')
        return Invalid("host " + ShownText(raw) +
                       ": percent-encoding in a host name is not accepted: write the name itself");
      return Invalid("host " + ShownText(raw) + " has the character '" + std::string(1, c) +
                     "': a host name has only letters, digits, '-', '_' and '.' (or IDN letters)");
    }
  }
  std::string host;
  if (ascii) {
    host = LoweredAscii(raw);
  } else {
    // UTS #46 non-transitional with NFC, as browsers do: it also maps full-width digits and dots, so
    // the IPv4 check below comes after it.
    char* out = nullptr;
    const std::string input(raw);
    const int rc = idn2_lookup_u8(reinterpret_cast<const uint8_t*>(input.c_str()), reinterpret_cast<uint8_t**>(&out),
                                  IDN2_NFC_INPUT | IDN2_NONTRANSITIONAL);
    if (rc != IDN2_OK) {
      return Invalid("host " + ShownText(raw) + " is not a valid international domain name (" + idn2_strerror(rc) +
                     "): write it in punycode (xn--...) or fix it");
    }
    host = LoweredAscii(out);
    idn2_free(out);
  }
  return host;
}

Result<Parts> Parse(std::string_view text, bool pattern) {
  if (text.size() > kMaxUrlBytes) {
    return Invalid("the URL is " + std::to_string(text.size()) + " bytes; the limit is " +
                   std::to_string(kMaxUrlBytes));
  }
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c <= 0x20 || c == 0x7f) {
      return Invalid("the URL has a space or control byte (" + ShownText(text.substr(i, 1)) + ") at byte " +
                     std::to_string(i) + ": percent-encode it (%20) or remove it");
    }
    if (c == '\\') {
      return Invalid("the URL has a backslash at byte " + std::to_string(i) +
                     ": write '/' or %5C (browsers read '\\' as '/', servers may not)");
    }
  }
  Parts parts;
  const size_t colon = text.find(':');
  if (colon == std::string_view::npos || colon == 0) {
    return Invalid("not an absolute URL: " + ShownText(text) + " (write https://host/path)");
  }
  parts.scheme = LoweredAscii(text.substr(0, colon));
  if (parts.scheme != "http" && parts.scheme != "https") {
    return Invalid("the scheme " + ShownText(text.substr(0, colon)) + " is not allowed: only http and https");
  }
  std::string_view rest = text.substr(colon + 1);
  if (rest.substr(0, 2) != "//") return Invalid("the URL must start with " + parts.scheme + "://");
  rest.remove_prefix(2);
  const size_t authority_end = rest.find_first_of("/?#");
  std::string_view authority = rest.substr(0, authority_end);
  rest = authority_end == std::string_view::npos ? std::string_view() : rest.substr(authority_end);
  if (authority.find('@') != std::string_view::npos) {
    return Invalid(
        "the URL has credentials (user:password@): they are not accepted; a rule's \"headers\" can "
        "send an Authorization header with a secret instead");
  }
  std::string_view host_text;
  std::string_view port_text;
  bool has_port = false;
  if (!authority.empty() && authority[0] == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return Invalid("the IPv6 host has no closing ']'");
    host_text = authority.substr(1, close - 1);
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return Invalid("after the IPv6 host ']' comes ':port' or '/', not " + ShownText(after));
      has_port = true;
      port_text = after.substr(1);
    }
    if (host_text.find('%') != std::string_view::npos) {
      return Invalid("the IPv6 host " + ShownText(host_text) +
                     " has a zone id (%...): zone ids name a local interface and are not accepted");
    }
    auto ip = ParseAddress(host_text);
    if (!ip || !ip->v6) return Invalid("the host [" + std::string(ShownText(host_text)) + "] is not an IPv6 address");
    parts.ip = *ip;
    parts.host = FormatAddress(*ip);
  } else {
    const size_t port_colon = authority.find(':');
    host_text = authority.substr(0, port_colon);
    if (port_colon != std::string_view::npos) {
      has_port = true;
      port_text = authority.substr(port_colon + 1);
    }
    if (host_text.empty()) return Invalid("the URL has no host");
    std::string_view name = host_text;
    bool wildcard = false;
    if (pattern && name.substr(0, 2) == "*.") {
      wildcard = true;
      name.remove_prefix(2);
    }
    auto host = CanonicalHostName(name);
    if (!host) return host.error();
    if (EndsInNumber(*host)) {
      if (wildcard) return Invalid("a wildcard host \"*.\" needs a domain after it, not an IP address");
      auto ip = ParseUrlIpv4(*host);
      if (!ip) return ip.error();
      parts.ip = *ip;
      parts.host = FormatAddress(*ip);
    } else {
      std::string name_only = std::move(*host);
      if (!name_only.empty() && name_only.back() == '.') name_only.pop_back();  // one trailing dot
      if (!IsCanonicalHostName(name_only)) {
        return Invalid("host " + ShownText(host_text) +
                       " is not a valid host name: labels of 1 to 63 bytes separated by single dots, 253 bytes in all "
                       "(one trailing dot is accepted)");
      }
      parts.host = (wildcard ? "*." : "") + name_only;
    }
  }
  const uint16_t default_port = parts.scheme == "https" ? 443 : 80;
  parts.port = default_port;
  if (has_port && !port_text.empty()) {
    uint32_t port = 0;
    bool ok = port_text.size() <= 5;
    for (char c : port_text) {
      if (!IsAsciiDigit(static_cast<unsigned char>(c))) ok = false;
      if (ok) port = port * 10 + static_cast<uint32_t>(c - '0');
    }
    if (!ok || port == 0 || port > 65535)
      return Invalid("the port " + ShownText(port_text) + " is not a number from 1 to 65535");
    parts.port = static_cast<uint16_t>(port);
  }
  // Path, query, fragment.
  const size_t fragment = rest.find('#');
  if (fragment != std::string_view::npos) {
    if (pattern) return Invalid("a rule's url has no fragment (#...): remove it");
    rest = rest.substr(0, fragment);
  }
  const size_t question = rest.find('?');
  std::string_view path = rest.substr(0, question);
  if (question != std::string_view::npos) {
    if (pattern) return Invalid("a rule's url has no query (?...): it matches by path prefix; remove the query");
    auto query = NormalizeEscapes(rest.substr(question + 1), false, IsQueryLiteral, "query");
    if (!query) return query.error();
    parts.query = std::move(*query);
  }
  if (pattern && path.find('*') != std::string_view::npos) {
    return Invalid("a rule's path is a prefix matched literally, without '*': \"/v1/\" matches everything under /v1/");
  }
  auto normalized = NormalizePath(path);
  if (!normalized) return normalized.error();
  parts.path = std::move(*normalized);
  return parts;
}

std::string Authority(const std::string& host, bool ip6, uint16_t port, bool with_port) {
  std::string out = ip6 ? "[" + host + "]" : host;
  if (with_port) out += ":" + std::to_string(port);
  return out;
}

struct CurlUrlFree {
  void operator()(CURLU* u) const { curl_url_cleanup(u); }
};

// libcurl's reading of our canonical URL must be ours: nullopt, or what differs.
std::optional<std::string> CurlDisagrees(const CanonicalUrl& u) {
  std::unique_ptr<CURLU, CurlUrlFree> handle(curl_url());
  if (!handle) return "curl_url() failed (out of memory)";
  if (CURLUcode rc = curl_url_set(handle.get(), CURLUPART_URL, u.url.c_str(), 0); rc != CURLUE_OK) {
    return std::string("libcurl refuses it: ") + curl_url_strerror(rc);
  }
  auto get = [&](CURLUPart part, unsigned flags) -> std::string {
    char* value = nullptr;
    if (curl_url_get(handle.get(), part, &value, flags) != CURLUE_OK || value == nullptr) return std::string();
    std::string out(value);
    curl_free(value);
    return out;
  };
  const std::string host = get(CURLUPART_HOST, 0);
  if (u.ip && u.ip->v6) {
    // libcurl writes IPv6 its own way (inet_ntop: ::ffff:127.0.0.1): compare the addresses.
    const bool bracketed = host.size() > 2 && host.front() == '[' && host.back() == ']';
    auto theirs = bracketed ? ParseAddress(std::string_view(host).substr(1, host.size() - 2)) : std::nullopt;
    if (!theirs || !(*theirs == *u.ip)) return "libcurl reads the host as " + ShownText(host);
  } else if (LoweredAscii(host) != u.host) {
    return "libcurl reads the host as " + ShownText(host);
  }
  if (get(CURLUPART_PORT, CURLU_DEFAULT_PORT) != std::to_string(u.port)) return "libcurl reads another port";
  if (get(CURLUPART_PATH, 0) != u.path) return "libcurl reads another path";
  if (get(CURLUPART_QUERY, 0) != u.query) return "libcurl reads another query";
  return std::nullopt;
}

}  // namespace

std::string CanonicalUrl::Display() const {
  std::string out = scheme + "://" + Authority(host, ip && ip->v6, port, port != default_port()) + path;
  if (out.size() > 200) out = out.substr(0, 197) + "...";
  return out;
}

bool IsCanonicalHostName(std::string_view host) {
  if (host.empty() || host.size() > 253) return false;
  size_t label = 0;
  for (char c : host) {
    if (c == '.') {
      if (label == 0) return false;
      label = 0;
      continue;
    }
    const unsigned char u = static_cast<unsigned char>(c);
    if (!((u >= 'a' && u <= 'z') || IsAsciiDigit(u) || u == '-' || u == '_')) return false;
    if (++label > 63) return false;
  }
  return label > 0;
}

Result<CanonicalUrl> CanonicalizeUrl(std::string_view text) {
  auto parts = Parse(text, false);
  if (!parts) return parts.error();
  CanonicalUrl u;
  u.scheme = std::move(parts->scheme);
  u.host = std::move(parts->host);
  u.ip = parts->ip;
  u.port = parts->port;
  u.path = std::move(parts->path);
  u.query = std::move(parts->query);
  u.url = u.scheme + "://" + Authority(u.host, u.ip && u.ip->v6, u.port, true) + u.path;
  if (!u.query.empty()) u.url += "?" + u.query;
  if (u.url.size() > kMaxUrlBytes) {
    return Invalid("the URL is " + std::to_string(u.url.size()) + " bytes in its canonical form; the limit is " +
                   std::to_string(kMaxUrlBytes));
  }
  if (auto differs = CurlDisagrees(u)) {
    return Invalid("the URL " + ShownText(u.url) + " is refused: " + *differs + " than basal (report this as a bug)");
  }
  return u;
}

Result<UrlPattern> ParseUrlPattern(std::string_view text) {
  auto parts = Parse(text, true);
  if (!parts) return parts.error();
  UrlPattern p;
  p.scheme = std::move(parts->scheme);
  p.port = parts->port;
  p.path_prefix = std::move(parts->path);
  p.host_is_ip = parts->ip.has_value();
  if (parts->host.rfind("*.", 0) == 0) {
    p.wildcard = true;
    p.host = parts->host.substr(2);
    if (p.host.find('.') == std::string::npos) {
      return Invalid("the wildcard \"*." + p.host + "\" would admit a whole top-level domain: write \"*.example." +
                     p.host + "\" or the exact host");
    }
  } else {
    p.host = std::move(parts->host);
  }
  const uint16_t default_port = p.scheme == "https" ? 443 : 80;
  p.text = p.scheme + "://" + (p.wildcard ? "*." : "") +
           Authority(p.host, parts->ip && parts->ip->v6, p.port, p.port != default_port) + p.path_prefix;
  return p;
}

bool PatternMatches(const UrlPattern& pattern, const CanonicalUrl& url) {
  if (pattern.scheme != url.scheme || pattern.port != url.port) return false;
  if (pattern.wildcard) {
    if (url.host_is_ip() || url.host.size() <= pattern.host.size() + 1) return false;
    const size_t at = url.host.size() - pattern.host.size();
    if (url.host.compare(at, std::string::npos, pattern.host) != 0 || url.host[at - 1] != '.') return false;
  } else if (pattern.host != url.host) {
    return false;
  }
  const std::string& prefix = pattern.path_prefix;
  if (url.path.compare(0, prefix.size(), prefix) != 0) return false;
  if (prefix.back() == '/' || url.path.size() == prefix.size()) return true;
  return url.path[prefix.size()] == '/';
}

}  // namespace basal::http
