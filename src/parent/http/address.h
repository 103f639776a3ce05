// IP addresses and CIDR networks for the http.fetch guard against server-side request forgery:
// which addresses a fetch may connect to (docs/http.md, "Addresses").
//
//   std::optional<Address> a = ParseAddress("::ffff:127.0.0.1");
//   SpecialPurpose(*a);   // "IPv4-mapped (::ffff:0:0/96) of 127.0.0.1: loopback (127.0.0.0/8)"
//   auto net = ParseCidr("127.0.0.1/32");
//   ConnectRefusal(*a, {*net});  // nullopt: allow_networks exempts it
//
// Pure: no I/O, no resolver. The client checks every address it is about to connect to (after
// DNS) with ConnectRefusal; a host name is never checked, an address is.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "basal/result.h"

namespace basal::http {

// An IPv4 or IPv6 address. IPv4 uses bytes[0..3] only. Zone ids (fe80::1%eth0) are not
// addresses: ParseAddress refuses them.
struct Address {
  bool v6 = false;
  std::array<uint8_t, 16> bytes{};

  static Address V4(uint32_t host_order);
  uint32_t v4() const;  // host order; IPv4 only
  bool operator==(const Address& other) const = default;
};

// Strict textual forms only: IPv4 dotted decimal (four parts 0..255, no leading zeros), IPv6 as
// RFC 4291 text (hex groups, one "::", an IPv4 tail), no brackets, no zone id. The URL parser
// (url_rule.h) reads the looser forms a URL host may take (2130706433, 0x7f.1) itself.
std::optional<Address> ParseAddress(std::string_view text);
// IPv4 dotted decimal; IPv6 as RFC 5952 (lowercase, the longest run of zero groups as "::",
// the leftmost on a tie, never for a single group), in hex throughout, no brackets.
std::string FormatAddress(const Address& address);

struct Cidr {
  Address base;
  int prefix_bits = 0;  // 0..32 or 0..128
  bool operator==(const Cidr& other) const = default;
};
// "10.0.0.0/8", "::1/128": the prefix is required and the host bits must be zero. The error
// says what is wrong and the network meant ("10.1.2.3/8 has host bits set: write 10.0.0.0/8").
Result<Cidr> ParseCidr(std::string_view text);
std::string FormatCidr(const Cidr& cidr);
// Same family and within the prefix.
bool Contains(const Cidr& network, const Address& address);
// Every address of `inner` is in `outer`.
bool Contains(const Cidr& outer, const Cidr& inner);

// The IPv4 address an IPv6 address carries to the same place: IPv4-mapped (::ffff:0:0/96),
// IPv4-compatible (::/96 but :: and ::1), NAT64 (64:ff9b::/96) and 6to4 (2002::/16, bits 16..47).
// Teredo is not listed: its packets go to a relay and a NAT, not to one IPv4 address.
std::optional<Address> EmbeddedIpv4(const Address& address);

// Why an address may not be connected to by default, or nullopt for an ordinary public address.
// Covers the IANA IPv4 and IPv6 special-purpose registries; an IPv6 address that carries an IPv4
// one (EmbeddedIpv4, and Teredo's server and client) is judged by that IPv4 address FIRST, so
// ::ffff:127.0.0.1 is "... loopback (127.0.0.0/8)". Beyond the registries it refuses Teredo,
// IPv4-compatible addresses and all IPv6 outside 2000::/3 (nothing public is served there).
std::optional<std::string> SpecialPurpose(const Address& address);

// Whether an allow_networks list admits the address: a CIDR of its family contains it, or an
// IPv4 CIDR contains its EmbeddedIpv4.
bool InNetworks(const Address& address, const std::vector<Cidr>& networks);

// The guard: nullopt when the client may connect. An allow_networks entry exempts exactly the
// addresses it contains (InNetworks); nothing else does: no host name, no port, no scheme.
// Otherwise a special-purpose address is refused with its reason.
std::optional<std::string> ConnectRefusal(const Address& address, const std::vector<Cidr>& allow_networks);

}  // namespace basal::http
