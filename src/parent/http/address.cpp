// IP addresses, CIDRs and the special-purpose address table (see address.h).
#include "parent/http/address.h"

#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <map>

namespace basal::http {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Dotted decimal, exactly four parts, 0..255, no leading zeros (an octal reading is someone
// else's: the URL parser handles those forms explicitly).
std::optional<uint32_t> ParseDottedQuad(std::string_view text) {
  uint32_t value = 0;
  int parts = 0;
  size_t i = 0;
  while (true) {
    if (i >= text.size() || !IsDigit(text[i])) return std::nullopt;
    size_t start = i;
    uint32_t part = 0;
    while (i < text.size() && IsDigit(text[i])) {
      part = part * 10 + static_cast<uint32_t>(text[i] - '0');
      if (part > 255 || i - start >= 3) return std::nullopt;
      ++i;
    }
    if (i - start > 1 && text[start] == '0') return std::nullopt;
    value = (value << 8) | part;
    ++parts;
    if (parts == 4) return i == text.size() ? std::optional<uint32_t>(value) : std::nullopt;
    if (i >= text.size() || text[i] != '.') return std::nullopt;
    ++i;
  }
}

std::optional<Address> ParseIpv6(std::string_view text) {
  if (text.size() < 2 || text.size() > 45) return std::nullopt;
  uint16_t groups[8] = {};
  int count = 0;
  int gap = -1;  // index where "::" stands
  size_t i = 0;
  if (text.substr(0, 2) == "::") {
    gap = 0;
    i = 2;
    if (i == text.size()) return Address{true, {}};
  } else if (text[0] == ':') {
    return std::nullopt;
  }
  while (i < text.size()) {
    if (count == 8) return std::nullopt;
    // An IPv4 tail: the rest has a dot.
    size_t end = text.find(':', i);
    std::string_view piece = text.substr(i, end == std::string_view::npos ? std::string_view::npos : end - i);
    if (piece.find('.') != std::string_view::npos) {
      if (end != std::string_view::npos || count > 6) return std::nullopt;
      auto v4 = ParseDottedQuad(piece);
      if (!v4) return std::nullopt;
      groups[count++] = static_cast<uint16_t>(*v4 >> 16);
      groups[count++] = static_cast<uint16_t>(*v4 & 0xffff);
      i = text.size();
      break;
    }
    if (piece.empty() || piece.size() > 4) return std::nullopt;
    uint16_t g = 0;
    for (char c : piece) {
      int h = HexValue(c);
      if (h < 0) return std::nullopt;
      g = static_cast<uint16_t>((g << 4) | h);
    }
    groups[count++] = g;
    if (end == std::string_view::npos) {
      i = text.size();
      break;
    }
    i = end + 1;
    if (i < text.size() && text[i] == ':') {
      if (gap >= 0) return std::nullopt;
      gap = count;
      ++i;
    } else if (i == text.size()) {
      return std::nullopt;  // a trailing single ':'
    }
  }
  if (gap < 0 && count != 8) return std::nullopt;
  if (gap >= 0 && count > 7) return std::nullopt;  // "::" stands for at least one group
  Address a;
  a.v6 = true;
  uint16_t full[8] = {};
  if (gap < 0) {
    for (int k = 0; k < 8; ++k) full[k] = groups[k];
  } else {
    for (int k = 0; k < gap; ++k) full[k] = groups[k];
    const int tail = count - gap;
    for (int k = 0; k < tail; ++k) full[8 - tail + k] = groups[gap + k];
  }
  for (int k = 0; k < 8; ++k) {
    a.bytes[2 * k] = static_cast<uint8_t>(full[k] >> 8);
    a.bytes[2 * k + 1] = static_cast<uint8_t>(full[k] & 0xff);
  }
  return a;
}

bool PrefixMatches(const Address& a, const Address& base, int bits) {
  for (int i = 0; i < bits / 8; ++i) {
    if (a.bytes[i] != base.bytes[i]) return false;
  }
  if (bits % 8 == 0) return true;
  const uint8_t mask = static_cast<uint8_t>(0xff << (8 - bits % 8));
  return (a.bytes[bits / 8] & mask) == (base.bytes[bits / 8] & mask);
}

struct Special {
  const char* cidr;
  const char* reason;
};

// IANA IPv4 Special-Purpose Address Registry, and multicast and broadcast. A block some of whose
// addresses IANA marks globally reachable (192.0.0.0/24) is refused whole: no web API lives there.
constexpr Special kIpv4Special[] = {
    {"0.0.0.0/8", "\"this network\" (0.0.0.0/8)"},
    {"10.0.0.0/8", "private (10.0.0.0/8)"},
    {"100.64.0.0/10", "shared address space, carrier-grade NAT (100.64.0.0/10)"},
    {"127.0.0.0/8", "loopback (127.0.0.0/8)"},
    {"169.254.0.0/16", "link-local, where cloud metadata services answer (169.254.0.0/16)"},
    {"172.16.0.0/12", "private (172.16.0.0/12)"},
    {"192.0.0.0/24", "IETF protocol assignments (192.0.0.0/24)"},
    {"192.0.2.0/24", "documentation, TEST-NET-1 (192.0.2.0/24)"},
    {"192.88.99.0/24", "6to4 relay anycast, deprecated (192.88.99.0/24)"},
    {"192.168.0.0/16", "private (192.168.0.0/16)"},
    {"198.18.0.0/15", "benchmarking (198.18.0.0/15)"},
    {"198.51.100.0/24", "documentation, TEST-NET-2 (198.51.100.0/24)"},
    {"203.0.113.0/24", "documentation, TEST-NET-3 (203.0.113.0/24)"},
    {"224.0.0.0/4", "multicast (224.0.0.0/4)"},
    {"255.255.255.255/32", "limited broadcast (255.255.255.255/32)"},
    {"240.0.0.0/4", "reserved (240.0.0.0/4)"},
};

// IANA IPv6 Special-Purpose Address Registry (the blocks that carry an IPv4 address are judged
// in SpecialPurpose before this table).
constexpr Special kIpv6Special[] = {
    {"::/128", "unspecified (::/128)"},
    {"::1/128", "loopback (::1/128)"},
    {"64:ff9b:1::/48", "local-use NAT64 (64:ff9b:1::/48)"},
    {"100::/64", "discard-only (100::/64)"},
    {"2001:db8::/32", "documentation (2001:db8::/32)"},
    {"2001::/23", "IETF protocol assignments (2001::/23)"},
    {"3fff::/20", "documentation (3fff::/20)"},
    {"5f00::/16", "segment routing SIDs (5f00::/16)"},
    {"fc00::/7", "unique local, private (fc00::/7)"},
    {"fe80::/10", "link-local (fe80::/10)"},
    {"fec0::/10", "site-local, deprecated (fec0::/10)"},
    {"ff00::/8", "multicast (ff00::/8)"},
};

// The tables' CIDRs, parsed once. They are constants of ours: a typo is a bug and aborts at the
// first use (every test uses every row).
const Cidr& ParsedCidr(const char* text) {
  static thread_local std::map<std::string_view, Cidr> parsed;
  auto it = parsed.find(text);
  if (it != parsed.end()) return it->second;
  auto r = ParseCidr(text);
  if (!r) std::abort();
  return parsed.emplace(text, *r).first->second;
}

std::optional<std::string> TableReason(const Address& address, const Special* table, size_t size) {
  for (size_t i = 0; i < size; ++i) {
    if (Contains(ParsedCidr(table[i].cidr), address)) return std::string(table[i].reason);
  }
  return std::nullopt;
}

bool InV6(const Address& a, const char* cidr) { return Contains(ParsedCidr(cidr), a); }

Address V4At(const Address& a, int byte_offset, uint32_t xor_mask = 0) {
  uint32_t v = (uint32_t{a.bytes[byte_offset]} << 24) | (uint32_t{a.bytes[byte_offset + 1]} << 16) |
               (uint32_t{a.bytes[byte_offset + 2]} << 8) | uint32_t{a.bytes[byte_offset + 3]};
  return Address::V4(v ^ xor_mask);
}

}  // namespace

Address Address::V4(uint32_t host_order) {
  Address a;
  a.bytes[0] = static_cast<uint8_t>(host_order >> 24);
  a.bytes[1] = static_cast<uint8_t>(host_order >> 16);
  a.bytes[2] = static_cast<uint8_t>(host_order >> 8);
  a.bytes[3] = static_cast<uint8_t>(host_order);
  return a;
}

uint32_t Address::v4() const {
  return (uint32_t{bytes[0]} << 24) | (uint32_t{bytes[1]} << 16) | (uint32_t{bytes[2]} << 8) | uint32_t{bytes[3]};
}

std::optional<Address> ParseAddress(std::string_view text) {
  if (text.find(':') != std::string_view::npos) return ParseIpv6(text);
  auto v4 = ParseDottedQuad(text);
  if (!v4) return std::nullopt;
  return Address::V4(*v4);
}

std::string FormatAddress(const Address& address) {
  char buffer[64];
  if (!address.v6) {
    std::snprintf(buffer, sizeof buffer, "%u.%u.%u.%u", address.bytes[0], address.bytes[1], address.bytes[2],
                  address.bytes[3]);
    return buffer;
  }
  uint16_t g[8];
  for (int k = 0; k < 8; ++k) g[k] = static_cast<uint16_t>((address.bytes[2 * k] << 8) | address.bytes[2 * k + 1]);
  int best = -1, best_len = 0;
  for (int k = 0; k < 8;) {
    if (g[k] != 0) {
      ++k;
      continue;
    }
    int start = k;
    while (k < 8 && g[k] == 0) ++k;
    if (k - start > best_len) {
      best = start;
      best_len = k - start;
    }
  }
  if (best_len < 2) best = -1;
  std::string out;
  for (int k = 0; k < 8; ++k) {
    if (k == best) {
      out += "::";
      k += best_len - 1;
      continue;
    }
    if (!out.empty() && out.back() != ':') out += ':';
    std::snprintf(buffer, sizeof buffer, "%x", g[k]);
    out += buffer;
  }
  return out;
}

Result<Cidr> ParseCidr(std::string_view text) {
  // The text in messages: at most 64 bytes, printable ASCII (others as '?').
  std::string shown(text.substr(0, 64));
  for (char& c : shown) {
    if (c < 0x20 || c >= 0x7f || c == '"') c = '?';
  }
  if (text.size() > 64) shown += "...";
  const size_t slash = text.find('/');
  if (slash == std::string_view::npos) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "\"" + shown + "\" is not a CIDR: write the prefix length too (\"127.0.0.1/32\", \"::1/128\")");
  }
  auto base = ParseAddress(text.substr(0, slash));
  if (!base) {
    return MakeError(ErrorCode::kInvalidArgument, "\"" + shown +
                                                      "\" is not a CIDR: the part before '/' is not an IPv4 address "
                                                      "(1.2.3.0) or an IPv6 address (2001:db8::)");
  }
  const std::string_view bits_text = text.substr(slash + 1);
  const int max_bits = base->v6 ? 128 : 32;
  int bits = 0;
  bool ok = !bits_text.empty() && bits_text.size() <= 3 && !(bits_text.size() > 1 && bits_text[0] == '0');
  for (char c : bits_text) {
    if (!IsDigit(c)) ok = false;
    if (ok) bits = bits * 10 + (c - '0');
  }
  if (!ok || bits > max_bits) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "\"" + shown + "\" is not a CIDR: the prefix length must be 0 to " + std::to_string(max_bits));
  }
  Cidr cidr{*base, bits};
  Address network = *base;
  for (int i = 0; i < 16; ++i) {
    const int covered = bits - 8 * i;
    if (covered >= 8) continue;
    network.bytes[i] = covered <= 0 ? 0 : static_cast<uint8_t>(network.bytes[i] & (0xff << (8 - covered)));
  }
  if (!(network == *base)) {
    return MakeError(ErrorCode::kInvalidArgument, "\"" + shown + "\" has host bits set: write " +
                                                      FormatCidr(Cidr{network, bits}) + " for the network, or /" +
                                                      std::to_string(max_bits) + " for one address");
  }
  return cidr;
}

std::string FormatCidr(const Cidr& cidr) { return FormatAddress(cidr.base) + "/" + std::to_string(cidr.prefix_bits); }

bool Contains(const Cidr& network, const Address& address) {
  return network.base.v6 == address.v6 && PrefixMatches(address, network.base, network.prefix_bits);
}

bool Contains(const Cidr& outer, const Cidr& inner) {
  return outer.base.v6 == inner.base.v6 && outer.prefix_bits <= inner.prefix_bits &&
         PrefixMatches(inner.base, outer.base, outer.prefix_bits);
}

std::optional<Address> EmbeddedIpv4(const Address& a) {
  if (!a.v6) return std::nullopt;
  if (InV6(a, "::ffff:0:0/96") || InV6(a, "64:ff9b::/96")) return V4At(a, 12);
  if (InV6(a, "::/96") && !InV6(a, "::/127")) return V4At(a, 12);  // not :: and ::1
  if (InV6(a, "2002::/16")) return V4At(a, 2);
  return std::nullopt;
}

std::optional<std::string> SpecialPurpose(const Address& a) {
  if (!a.v6) return TableReason(a, kIpv4Special, std::size(kIpv4Special));
  // Unwrap first: an IPv6 form of a private IPv4 address reaches that address.
  struct Wrapper {
    const char* cidr;
    const char* name;
    bool refused_anyway;  // refused even when the IPv4 address is public
  };
  static constexpr Wrapper kWrappers[] = {
      {"::ffff:0:0/96", "IPv4-mapped (::ffff:0:0/96)", false},
      {"64:ff9b::/96", "NAT64 (64:ff9b::/96)", false},
      {"2002::/16", "6to4 (2002::/16)", false},
      // Deprecated (RFC 4291); nothing public is reached through it.
      {"::/96", "IPv4-compatible, deprecated (::/96)", true},
  };
  if (auto v4 = EmbeddedIpv4(a)) {
    for (const Wrapper& w : kWrappers) {
      if (!InV6(a, w.cidr)) continue;
      if (auto reason = SpecialPurpose(*v4)) return std::string(w.name) + " of " + FormatAddress(*v4) + ": " + *reason;
      if (w.refused_anyway) return std::string(w.name) + " of " + FormatAddress(*v4);
      return std::nullopt;
    }
  }
  if (InV6(a, "2001::/32")) {
    // Teredo (RFC 4380): a tunnel to the client's IPv4 address (last 32 bits, inverted) through a
    // relay and the client's NAT. Refused even between public addresses: the guard cannot see where
    // the relay delivers, Teredo is obsolete, and no web API is served on it.
    const Address server = V4At(a, 4);
    const Address client = V4At(a, 12, 0xffffffff);
    if (auto reason = SpecialPurpose(server)) {
      return "Teredo (2001::/32) with server " + FormatAddress(server) + ": " + *reason;
    }
    if (auto reason = SpecialPurpose(client)) {
      return "Teredo (2001::/32) with client " + FormatAddress(client) + ": " + *reason;
    }
    return "Teredo tunnel (2001::/32) to " + FormatAddress(client) + ", refused: it reaches through a relay and a NAT";
  }
  if (auto reason = TableReason(a, kIpv6Special, std::size(kIpv6Special))) return reason;
  if (!InV6(a, "2000::/3")) return std::string("outside global unicast (2000::/3): reserved by the IETF");
  return std::nullopt;
}

bool InNetworks(const Address& address, const std::vector<Cidr>& networks) {
  const std::optional<Address> v4 = EmbeddedIpv4(address);
  for (const Cidr& n : networks) {
    if (Contains(n, address)) return true;
    if (v4 && Contains(n, *v4)) return true;
  }
  return false;
}

std::optional<std::string> ConnectRefusal(const Address& address, const std::vector<Cidr>& allow_networks) {
  if (InNetworks(address, allow_networks)) return std::nullopt;
  if (auto reason = SpecialPurpose(address)) {
    return FormatAddress(address) + " is " + *reason + "; a rule's \"allow_networks\" may admit it (e.g. \"" +
           FormatAddress(address) + (address.v6 ? "/128" : "/32") + "\")";
  }
  return std::nullopt;
}

}  // namespace basal::http
