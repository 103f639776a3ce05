// Unit tests of the http.fetch policy (src/parent/http/): addresses and the SSRF guard, URL
// canonicalization, URL patterns and rule matching, grant validation, secrets in headers, the
// arguments' shape, the review's comparison, and the redaction of secrets in responses. Each refusal is paired with the allowed path next
// to it, so a guard that refused everything would fail too.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "parent/http/address.h"
#include "parent/http/fetch_grant.h"
#include "parent/http/redaction.h"
#include "parent/http/url_rule.h"

namespace basal::http {
namespace {

Address Addr(const std::string& text) {
  auto a = ParseAddress(text);
  EXPECT_TRUE(a.has_value()) << text;
  return a.value_or(Address{});
}

Cidr Net(const std::string& text) {
  auto c = ParseCidr(text);
  EXPECT_TRUE(c.ok()) << text << ": " << (c ? "" : c.error().message);
  return c ? *c : Cidr{};
}

bool Contains(const std::string& haystack, const std::string& needle) { return haystack.find(needle) != std::string::npos; }

// --- Addresses -----------------------------------------------------------------------------------

TEST(HttpAddressTest, ParseAndFormatRoundTrip) {
  struct Case {
    const char* in;
    const char* out;
  } cases[] = {
      {"0.0.0.0", "0.0.0.0"},
      {"93.184.216.34", "93.184.216.34"},
      {"255.255.255.255", "255.255.255.255"},
      {"::", "::"},
      {"::1", "::1"},
      {"2001:DB8:0:0:0:0:0:1", "2001:db8::1"},
      {"2001:db8:0:0:1:0:0:1", "2001:db8::1:0:0:1"},  // the leftmost of two equal runs
      {"2001:db8:0:1:1:1:1:1", "2001:db8:0:1:1:1:1:1"},  // one zero group is not compressed
      {"::ffff:127.0.0.1", "::ffff:7f00:1"},
      {"1::", "1::"},
      {"0001:0:0:0:0:0:0:0002", "1::2"},
      {"fe80::1", "fe80::1"},
  };
  for (const Case& c : cases) {
    auto a = ParseAddress(c.in);
    ASSERT_TRUE(a.has_value()) << c.in;
    EXPECT_EQ(FormatAddress(*a), c.out) << c.in;
    EXPECT_EQ(ParseAddress(FormatAddress(*a)), a) << c.in;
  }
}

TEST(HttpAddressTest, RefusesLooseOrBrokenForms) {
  for (const char* bad : {"", "1.2.3", "1.2.3.4.5", "1.2.3.256", "01.2.3.4", "1.2.3.4 ", "0x7f.0.0.1", "2130706433",
                          ":", ":::", "1:2:3:4:5:6:7:8:9", "1::2::3", "1:", ":1", "12345::", "fe80::1%eth0",
                          "[::1]", "::1.2.3", "1:2:3:4:5:6:7:1.2.3.4", "g::1", "1.2.3.4::"}) {
    EXPECT_FALSE(ParseAddress(bad).has_value()) << bad;
  }
}

TEST(HttpAddressTest, CidrNeedsPrefixAndZeroHostBits) {
  EXPECT_EQ(FormatCidr(Net("10.0.0.0/8")), "10.0.0.0/8");
  EXPECT_EQ(FormatCidr(Net("::1/128")), "::1/128");
  EXPECT_EQ(FormatCidr(Net("0.0.0.0/0")), "0.0.0.0/0");
  EXPECT_EQ(FormatCidr(Net("2001:db8::/32")), "2001:db8::/32");

  auto no_prefix = ParseCidr("127.0.0.1");
  ASSERT_FALSE(no_prefix);
  EXPECT_TRUE(Contains(no_prefix.error().message, "write the prefix length")) << no_prefix.error().message;
  auto host_bits = ParseCidr("10.1.2.3/8");
  ASSERT_FALSE(host_bits);
  EXPECT_TRUE(Contains(host_bits.error().message, "has host bits set: write 10.0.0.0/8")) << host_bits.error().message;
  auto v6_bits = ParseCidr("2001:db8::1/64");
  ASSERT_FALSE(v6_bits);
  EXPECT_TRUE(Contains(v6_bits.error().message, "write 2001:db8::/64")) << v6_bits.error().message;
  for (const char* bad : {"10.0.0.0/33", "::/129", "10.0.0.0/", "10.0.0.0/08", "10.0.0.0/-1", "10.0.0.0/8/8",
                          "localhost/32", "/8"}) {
    EXPECT_FALSE(ParseCidr(bad).ok()) << bad;
  }
}

TEST(HttpAddressTest, CidrContainment) {
  EXPECT_TRUE(basal::http::Contains(Net("10.0.0.0/8"), Addr("10.255.255.255")));
  EXPECT_FALSE(basal::http::Contains(Net("10.0.0.0/8"), Addr("11.0.0.0")));
  EXPECT_FALSE(basal::http::Contains(Net("10.0.0.0/8"), Addr("::ffff:10.0.0.1")));  // another family
  EXPECT_TRUE(basal::http::Contains(Net("0.0.0.0/0"), Addr("1.2.3.4")));
  EXPECT_TRUE(basal::http::Contains(Net("10.0.0.0/8"), Net("10.1.0.0/16")));
  EXPECT_FALSE(basal::http::Contains(Net("10.1.0.0/16"), Net("10.0.0.0/8")));
  EXPECT_TRUE(basal::http::Contains(Net("fc00::/7"), Net("fd00::/8")));
  EXPECT_TRUE(basal::http::Contains(Net("10.0.0.0/9"), Addr("10.127.255.255")));
  EXPECT_FALSE(basal::http::Contains(Net("10.0.0.0/9"), Addr("10.128.0.0")));
}

// Every row of the special-purpose table, at both ends of its range, and the public addresses on
// either side where there is one.
TEST(HttpAddressTest, SpecialPurposeEveryRangeAndItsNeighbours) {
  struct Case {
    const char* address;
    const char* reason;  // a part of it; nullptr: public, allowed
  } cases[] = {
      {"0.0.0.0", "\"this network\" (0.0.0.0/8)"},     {"0.255.255.255", "(0.0.0.0/8)"},
      {"1.0.0.0", nullptr},                              {"9.255.255.255", nullptr},
      {"10.0.0.0", "private (10.0.0.0/8)"},              {"10.255.255.255", "private (10.0.0.0/8)"},
      {"11.0.0.0", nullptr},                             {"100.63.255.255", nullptr},
      {"100.64.0.0", "shared address space"},            {"100.127.255.255", "(100.64.0.0/10)"},
      {"100.128.0.0", nullptr},                          {"126.255.255.255", nullptr},
      {"127.0.0.0", "loopback (127.0.0.0/8)"},           {"127.255.255.255", "loopback (127.0.0.0/8)"},
      {"128.0.0.0", nullptr},                            {"169.253.255.255", nullptr},
      {"169.254.169.254", "cloud metadata"},             {"169.254.0.0", "link-local"},
      {"169.255.0.0", nullptr},                          {"172.15.255.255", nullptr},
      {"172.16.0.0", "private (172.16.0.0/12)"},         {"172.31.255.255", "private (172.16.0.0/12)"},
      {"172.32.0.0", nullptr},                           {"191.255.255.255", nullptr},
      {"192.0.0.0", "IETF protocol assignments"},        {"192.0.0.255", "(192.0.0.0/24)"},
      {"192.0.1.0", nullptr},                            {"192.0.2.0", "TEST-NET-1"},
      {"192.0.2.255", "(192.0.2.0/24)"},                 {"192.0.3.0", nullptr},
      {"192.88.99.0", "6to4 relay anycast"},             {"192.88.99.255", "(192.88.99.0/24)"},
      {"192.88.98.255", nullptr},                        {"192.88.100.0", nullptr},
      {"192.168.0.0", "private (192.168.0.0/16)"},       {"192.168.255.255", "(192.168.0.0/16)"},
      {"192.167.255.255", nullptr},                      {"192.169.0.0", nullptr},
      {"198.18.0.0", "benchmarking"},                    {"198.19.255.255", "(198.18.0.0/15)"},
      {"198.17.255.255", nullptr},                       {"198.20.0.0", nullptr},
      {"198.51.100.0", "TEST-NET-2"},                    {"198.51.100.255", "(198.51.100.0/24)"},
      {"198.51.101.0", nullptr},                         {"203.0.113.0", "TEST-NET-3"},
      {"203.0.113.255", "(203.0.113.0/24)"},             {"203.0.114.0", nullptr},
      {"223.255.255.255", nullptr},                      {"224.0.0.0", "multicast (224.0.0.0/4)"},
      {"224.0.0.1", "multicast"},                        {"239.255.255.255", "multicast"},
      {"240.0.0.0", "reserved (240.0.0.0/4)"},           {"255.255.255.254", "reserved (240.0.0.0/4)"},
      {"255.255.255.255", "limited broadcast"},          {"93.184.216.34", nullptr},
      // IPv6
      {"::", "unspecified (::/128)"},                    {"::1", "loopback (::1/128)"},
      {"64:ff9b:1::", "local-use NAT64"},                {"64:ff9b:1:ffff:ffff:ffff:ffff:ffff", "(64:ff9b:1::/48)"},
      {"100::", "discard-only (100::/64)"},              {"100::ffff:ffff:ffff:ffff", "discard-only"},
      {"2001:db8::", "documentation (2001:db8::/32)"},   {"2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", "(2001:db8::/32)"},
      {"2001:2::", "IETF protocol assignments (2001::/23)"}, {"2001:1ff:ffff::", "(2001::/23)"},
      {"2001:200::", nullptr},                           {"2001:4860:4860::8888", nullptr},
      {"3fff::", "documentation (3fff::/20)"},           {"3fff:fff:ffff::", "(3fff::/20)"},
      {"3fff:1000::", nullptr},                          {"5f00::1", "segment routing"},
      {"fc00::", "unique local"},                        {"fd00::1", "unique local, private (fc00::/7)"},
      {"fdff:ffff::", "(fc00::/7)"},                     {"fe80::1", "link-local (fe80::/10)"},
      {"febf:ffff::", "link-local"},                     {"fec0::1", "site-local"},
      {"feff::", "site-local"},                          {"ff02::1", "multicast (ff00::/8)"},
      {"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "multicast"},
      {"2606:4700::1111", nullptr},                      {"2a00:1450::1", nullptr},
      {"1fff:ffff::", "outside global unicast (2000::/3)"}, {"4000::1", "outside global unicast"},
      {"2000::", nullptr},                               {"3ffe:ffff::", nullptr},
      // Unwrapped first.
      {"::ffff:127.0.0.1", "IPv4-mapped (::ffff:0:0/96) of 127.0.0.1: loopback (127.0.0.0/8)"},
      {"::ffff:169.254.169.254", "cloud metadata"},      {"::ffff:93.184.216.34", nullptr},
      {"64:ff9b::7f00:1", "NAT64 (64:ff9b::/96) of 127.0.0.1: loopback (127.0.0.0/8)"},
      {"64:ff9b::a00:1", "private (10.0.0.0/8)"},        {"64:ff9b::5db8:d822", nullptr},
      {"::127.0.0.1", "IPv4-compatible, deprecated (::/96) of 127.0.0.1: loopback"},
      {"::93.184.216.34", "IPv4-compatible, deprecated (::/96) of 93.184.216.34"},
      {"::2", "\"this network\""},
      {"2002:7f00:1::", "6to4 (2002::/16) of 127.0.0.1: loopback (127.0.0.0/8)"},
      {"2002:a9fe:a9fe::1", "cloud metadata"},          {"2002:5db8:d822::1", nullptr},
      // Teredo: server in bits 32..63, client inverted in the last 32.
      {"2001:0:7f00:1::", "Teredo (2001::/32) with server 127.0.0.1: loopback"},
      {"2001:0:5db8:d822::f5ff:fffe", "Teredo (2001::/32) with client 10.0.0.1: private (10.0.0.0/8)"},
      {"2001:0:5db8:d822::80ff:fffe", "Teredo (2001::/32) with client 127.0.0.1: loopback"},
      {"2001:0:5db8:d822::a247:27dd", "Teredo tunnel (2001::/32) to 93.184.216.34, refused"},
  };
  for (const Case& c : cases) {
    const auto reason = SpecialPurpose(Addr(c.address));
    if (c.reason == nullptr) {
      EXPECT_FALSE(reason.has_value()) << c.address << " refused: " << reason.value_or("");
      EXPECT_FALSE(ConnectRefusal(Addr(c.address), {}).has_value()) << c.address;
    } else {
      ASSERT_TRUE(reason.has_value()) << c.address << " allowed";
      EXPECT_TRUE(Contains(*reason, c.reason)) << c.address << ": " << *reason;
      auto refusal = ConnectRefusal(Addr(c.address), {});
      ASSERT_TRUE(refusal.has_value()) << c.address;
      EXPECT_TRUE(Contains(*refusal, *reason)) << *refusal;
      EXPECT_TRUE(Contains(*refusal, "allow_networks")) << *refusal;
    }
  }
}

TEST(HttpAddressTest, EmbeddedIpv4) {
  EXPECT_EQ(EmbeddedIpv4(Addr("::ffff:1.2.3.4")), Addr("1.2.3.4"));
  EXPECT_EQ(EmbeddedIpv4(Addr("64:ff9b::102:304")), Addr("1.2.3.4"));
  EXPECT_EQ(EmbeddedIpv4(Addr("::1.2.3.4")), Addr("1.2.3.4"));
  EXPECT_EQ(EmbeddedIpv4(Addr("2002:102:304::")), Addr("1.2.3.4"));
  EXPECT_FALSE(EmbeddedIpv4(Addr("::1")).has_value());
  EXPECT_FALSE(EmbeddedIpv4(Addr("::")).has_value());
  EXPECT_FALSE(EmbeddedIpv4(Addr("2001:0:5db8:d822::a247:27dd")).has_value());  // Teredo: not one address
  EXPECT_FALSE(EmbeddedIpv4(Addr("1.2.3.4")).has_value());
  EXPECT_FALSE(EmbeddedIpv4(Addr("2606:4700::1111")).has_value());
}

// allow_networks exempts exactly its CIDR: the neighbour stays refused, and nothing else exempts.
TEST(HttpAddressTest, AllowNetworksExemptsExactlyItsCidr) {
  const std::vector<Cidr> loopback = {Net("127.0.0.1/32"), Net("::1/128")};
  EXPECT_FALSE(ConnectRefusal(Addr("127.0.0.1"), loopback).has_value());
  EXPECT_FALSE(ConnectRefusal(Addr("::1"), loopback).has_value());
  EXPECT_TRUE(ConnectRefusal(Addr("127.0.0.2"), loopback).has_value());
  EXPECT_TRUE(ConnectRefusal(Addr("::2"), loopback).has_value());
  // An embedded IPv4 address matches an IPv4 CIDR: the mapped form reaches the same socket.
  EXPECT_FALSE(ConnectRefusal(Addr("::ffff:127.0.0.1"), loopback).has_value());
  EXPECT_TRUE(ConnectRefusal(Addr("::ffff:127.0.0.2"), loopback).has_value());
  EXPECT_TRUE(ConnectRefusal(Addr("::ffff:127.0.0.1"), {Net("::1/128")}).has_value());

  const std::vector<Cidr> lan = {Net("10.0.0.0/24")};
  EXPECT_FALSE(ConnectRefusal(Addr("10.0.0.255"), lan).has_value());
  EXPECT_FALSE(ConnectRefusal(Addr("10.0.0.0"), lan).has_value());
  auto neighbour = ConnectRefusal(Addr("10.0.1.0"), lan);
  ASSERT_TRUE(neighbour.has_value());
  EXPECT_EQ(*neighbour, "10.0.1.0 is private (10.0.0.0/8); a rule's \"allow_networks\" may admit it (e.g. \"10.0.1.0/32\")");
  EXPECT_TRUE(ConnectRefusal(Addr("9.255.255.255"), lan) == std::nullopt);  // public anyway
  EXPECT_TRUE(InNetworks(Addr("10.0.0.7"), lan));
  EXPECT_FALSE(InNetworks(Addr("10.0.1.7"), lan));
  // A Teredo address is not "in" the IPv4 network of its client.
  EXPECT_FALSE(InNetworks(Addr("2001:0:5db8:d822::f5ff:fffe"), {Net("10.0.0.1/32")}));
}

// --- URL canonicalization ------------------------------------------------------------------------

std::string Canonical(const std::string& in) {
  auto u = CanonicalizeUrl(in);
  return u ? u->url : "ERROR: " + u.error().message;
}

TEST(HttpUrlTest, CanonicalForms) {
  struct Case {
    std::string in;
    std::string out;
  } cases[] = {
      {"HTTPS://API.Example.COM/v1", "https://api.example.com:443/v1"},
      {"https://example.com", "https://example.com:443/"},
      {"https://example.com./", "https://example.com:443/"},
      {"https://example.com:/", "https://example.com:443/"},
      {"http://example.com:8080", "http://example.com:8080/"},
      {"https://example.com:00443/", "https://example.com:443/"},
      {"http://example.com:65535/", "http://example.com:65535/"},
      {"https://bücher.example/", "https://xn--bcher-kva.example:443/"},
      {"https://BÜCHER.example/", "https://xn--bcher-kva.example:443/"},
      {"https://xn--bcher-kva.example/", "https://xn--bcher-kva.example:443/"},
      {"https://bücher.example./", "https://xn--bcher-kva.example:443/"},
      {"https://my_host.example/", "https://my_host.example:443/"},
      // IPv4 the way browsers read it.
      {"http://2130706433/", "http://127.0.0.1:80/"},
      {"http://0177.0.0.1/", "http://127.0.0.1:80/"},
      {"http://0x7f.1/", "http://127.0.0.1:80/"},
      {"http://0X7F.0.0.1/", "http://127.0.0.1:80/"},
      {"http://127.1/", "http://127.0.0.1:80/"},
      {"http://127.0.1/", "http://127.0.0.1:80/"},
      {"http://127.0.0.1./", "http://127.0.0.1:80/"},
      {"http://0x/", "http://0.0.0.0:80/"},
      {"http://0/", "http://0.0.0.0:80/"},
      {"http://4294967295/", "http://255.255.255.255:80/"},
      {"http://１２７.０.０.１/", "http://127.0.0.1:80/"},  // full-width digits and dots map to ASCII first
      {"http://169.254.169.254/latest/meta-data/", "http://169.254.169.254:80/latest/meta-data/"},
      {"http://[::1]/", "http://[::1]:80/"},
      {"http://[::FFFF:127.0.0.1]:8443/x", "http://[::ffff:7f00:1]:8443/x"},
      {"http://[2001:DB8:0:0:0:0:0:1]/", "http://[2001:db8::1]:80/"},
      // Paths: unreserved escapes decoded before dot segments, %2F kept.
      {"https://example.com/v1/%2e%2e/admin", "https://example.com:443/admin"},
      {"https://example.com/v1/%2E%2E/admin", "https://example.com:443/admin"},
      {"https://example.com/v1/.%2e/admin", "https://example.com:443/admin"},
      {"https://example.com/v1/../../../admin", "https://example.com:443/admin"},
      {"https://example.com/v1/./a/./b/", "https://example.com:443/v1/a/b/"},
      {"https://example.com/v1/a/..", "https://example.com:443/v1/"},
      {"https://example.com/v1/a/.", "https://example.com:443/v1/a/"},
      {"https://example.com/v1/..%2Fadmin", "https://example.com:443/v1/..%2Fadmin"},
      {"https://example.com/v1/a%2fb", "https://example.com:443/v1/a%2Fb"},
      {"https://example.com/%41%7e%5f%2D", "https://example.com:443/A~_-"},
      {"https://example.com/a%20b", "https://example.com:443/a%20b"},
      {"https://example.com/ü", "https://example.com:443/%C3%BC"},
      {"https://example.com/a\"b<c>{|}^`[]", "https://example.com:443/a%22b%3Cc%3E%7B%7C%7D%5E%60%5B%5D"},
      {"https://example.com/!$&'()*+,;=:@", "https://example.com:443/!$&'()*+,;=:@"},
      {"https://example.com//a", "https://example.com:443//a"},
      // Query kept (hex uppercased, unsafe bytes encoded), fragment dropped.
      {"https://example.com/s?q=a%2fb&x=%7e#frag", "https://example.com:443/s?q=a%2Fb&x=%7E"},
      {"https://example.com/s?q=\"x\"", "https://example.com:443/s?q=%22x%22"},
      {"https://example.com/s?a/b?c", "https://example.com:443/s?a/b?c"},
      {"https://example.com?x", "https://example.com:443/?x"},
      {"https://example.com/#only", "https://example.com:443/"},
      {"https://example.com/s?", "https://example.com:443/s"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(Canonical(c.in), c.out) << c.in;
    EXPECT_EQ(Canonical(c.out), c.out) << "not a fixed point: " << c.out;
  }
}

TEST(HttpUrlTest, PartsOfACanonicalUrl) {
  auto u = CanonicalizeUrl("https://API.example.com/v1/x?q=1#f");
  ASSERT_TRUE(u) << u.error().message;
  EXPECT_EQ(u->scheme, "https");
  EXPECT_EQ(u->host, "api.example.com");
  EXPECT_EQ(u->port, 443);
  EXPECT_EQ(u->path, "/v1/x");
  EXPECT_EQ(u->query, "q=1");
  EXPECT_FALSE(u->host_is_ip());
  EXPECT_EQ(u->Display(), "https://api.example.com/v1/x");

  auto ip = CanonicalizeUrl("http://[::1]:8080/a?secret=1");
  ASSERT_TRUE(ip);
  ASSERT_TRUE(ip->host_is_ip());
  EXPECT_EQ(*ip->ip, Addr("::1"));
  EXPECT_EQ(ip->host, "::1");
  EXPECT_EQ(ip->Display(), "http://[::1]:8080/a");  // no query in messages
  auto v4 = CanonicalizeUrl("http://0x7f.1/");
  ASSERT_TRUE(v4);
  EXPECT_EQ(*v4->ip, Addr("127.0.0.1"));
}

TEST(HttpUrlTest, Refusals) {
  struct Case {
    std::string in;
    std::string error;  // a part of the message
  } cases[] = {
      {"ftp://example.com/", "the scheme \"ftp\" is not allowed: only http and https"},
      {"file:///etc/passwd", "the scheme \"file\" is not allowed"},
      {"gopher://example.com/", "the scheme \"gopher\" is not allowed"},
      {"javascript:alert(1)", "the scheme \"javascript\" is not allowed"},
      {"data:text/plain,hi", "the scheme \"data\" is not allowed"},
      {"ws://example.com/", "the scheme \"ws\" is not allowed"},
      {"/relative/path", "not an absolute URL"},
      {"example.com/x", "not an absolute URL"},
      {"https:example.com", "must start with https://"},
      {"https:/example.com", "must start with https://"},
      {"http://user:pass@example.com/", "credentials (user:password@)"},
      {"http://user@example.com/", "credentials"},
      {"http://@example.com/", "credentials"},
      {"http://example.com@evil.example/", "credentials"},
      {"http://example.com\\@evil.example/", "backslash"},
      {"http:\\\\example.com/", "backslash"},
      {"http://example.com/a\\..\\admin", "backslash"},
      {"http://exa\tmple.com/", "space or control byte"},
      {"http://example.com/a\nb", "space or control byte"},
      {"http://example.com/a\rb", "space or control byte"},
      {std::string("http://example.com/a\0b", 22), "space or control byte"},
      {"http://example.com/a b", "space or control byte"},
      {"http://example.com/\x7f", "space or control byte"},
      {"java\tscript:alert(1)", "space or control byte"},
      {"https://example.com../", "not a valid host name"},
      {"https://a..b/", "not a valid host name"},
      {"https://.example.com/", "not a valid host name"},
      {"https:///path", "no host"},
      {"https://:443/", "no host"},
      {"https://" + std::string(64, 'a') + ".example/", "not a valid host name"},
      {"https://%65xample.com/", "percent-encoding in a host name"},
      {"https://exa*mple.com/", "the character '*'"},
      {"https://*.example.com/", "the character '*'"},  // wildcards are for rules only
      {"https://ex!ample.com/", "the character '!'"},
      {"http://1.2.3.256/", "ends in a number, so it must be an IPv4 address"},
      {"http://0x100000000/", "must be an IPv4 address"},
      {"http://1.2.3.4.5/", "must be an IPv4 address"},
      {"http://999999999999/", "must be an IPv4 address"},
      {"http://256.1/", "must be an IPv4 address"},
      {"http://08.0.0.1/", "must be an IPv4 address"},
      {"http://example.1/", "must be an IPv4 address"},
      {"http://[fe80::1%25eth0]/", "zone id"},
      {"http://[fe80::1%eth0]/", "zone id"},
      {"http://[::1/", "no closing ']'"},
      {"http://[::1]x/", "after the IPv6 host"},
      {"http://[1.2.3.4]/", "not an IPv6 address"},
      {"http://[::g]/", "not an IPv6 address"},
      {"http://example.com:0/", "not a number from 1 to 65535"},
      {"http://example.com:65536/", "not a number from 1 to 65535"},
      {"http://example.com:80a/", "not a number from 1 to 65535"},
      {"http://example.com:1:2/", "not a number from 1 to 65535"},
      {"http://example.com/%zz", "must start an escape of two hex digits"},
      {"http://example.com/%4", "must start an escape of two hex digits"},
      {"http://example.com/?q=%", "must start an escape of two hex digits"},
      {"http://xn--a.\xff/", "not a valid international domain name"},
  };
  for (const Case& c : cases) {
    auto u = CanonicalizeUrl(c.in);
    ASSERT_FALSE(u.ok()) << c.in << " accepted as " << u->url;
    EXPECT_TRUE(Contains(u.error().message, c.error)) << c.in << ": " << u.error().message;
    EXPECT_EQ(u.error().code, ErrorCode::kInvalidArgument);
    for (char ch : u.error().message) {
      EXPECT_TRUE(ch >= 0x20 && ch < 0x7f) << "a message with an unprintable byte: " << u.error().message;
    }
  }
}

TEST(HttpUrlTest, LengthCapBeforeAndAfterCanonicalization) {
  const std::string head = "https://example.com/";
  const std::string canonical_head = "https://example.com:443/";
  // The longest URL accepted: its canonical form (":443" added) is exactly the cap.
  const std::string longest = head + std::string(kMaxUrlBytes - canonical_head.size(), 'a');
  auto ok = CanonicalizeUrl(longest);
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ(ok->url.size(), kMaxUrlBytes);
  auto canonical_over = CanonicalizeUrl(longest + "a");
  ASSERT_FALSE(canonical_over);
  EXPECT_TRUE(Contains(canonical_over.error().message, "bytes in its canonical form; the limit is 8192"))
      << canonical_over.error().message;
  // Past the cap as written: refused before any parsing.
  auto over = CanonicalizeUrl(head + std::string(kMaxUrlBytes - head.size() + 1, 'a'));
  ASSERT_FALSE(over);
  EXPECT_TRUE(Contains(over.error().message, "the URL is 8193 bytes; the limit is 8192")) << over.error().message;
  // 3000 quotes become 9000 bytes of %22.
  auto grown = CanonicalizeUrl(head + std::string(3000, '"'));
  ASSERT_FALSE(grown);
  EXPECT_TRUE(Contains(grown.error().message, "in its canonical form")) << grown.error().message;
  EXPECT_TRUE(CanonicalizeUrl(head + std::string(2000, '"')).ok());
}

// --- URL patterns and matching -------------------------------------------------------------------

bool Matches(const std::string& pattern, const std::string& url) {
  auto p = ParseUrlPattern(pattern);
  auto u = CanonicalizeUrl(url);
  EXPECT_TRUE(p.ok()) << pattern << ": " << (p ? "" : p.error().message);
  EXPECT_TRUE(u.ok()) << url << ": " << (u ? "" : u.error().message);
  return p && u && PatternMatches(*p, *u);
}

TEST(HttpPatternTest, CanonicalText) {
  struct Case {
    const char* in;
    const char* text;
  } cases[] = {
      {"https://API.example.com/v1/", "https://api.example.com/v1/"},
      {"https://api.example.com:443/v1/", "https://api.example.com/v1/"},
      {"https://api.example.com", "https://api.example.com/"},
      {"https://api.example.com:8443", "https://api.example.com:8443/"},
      {"https://*.Example.com/x/../v1", "https://*.example.com/v1"},
      {"http://127.1:8080/", "http://127.0.0.1:8080/"},
      {"http://[::1]:8080/", "http://[::1]:8080/"},
      {"https://bücher.example/", "https://xn--bcher-kva.example/"},
  };
  for (const Case& c : cases) {
    auto p = ParseUrlPattern(c.in);
    ASSERT_TRUE(p.ok()) << c.in << ": " << p.error().message;
    EXPECT_EQ(p->text, c.text) << c.in;
    auto again = ParseUrlPattern(p->text);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->text, p->text);
  }
  struct Bad {
    const char* in;
    const char* error;
  } bad[] = {
      {"https://api.example.com/v1/?x=1", "no query"},
      {"https://api.example.com/v1/#x", "no fragment"},
      {"https://u:p@api.example.com/", "credentials"},
      {"https://api.example.com/v1/*", "without '*'"},
      {"https://*.com/", "a whole top-level domain"},
      {"https://*.1.2.3.4/", "needs a domain after it"},
      {"https://a.*.example.com/", "the character '*'"},
      {"https://*example.com/", "the character '*'"},
      {"ftp://example.com/", "only http and https"},
  };
  for (const Bad& b : bad) {
    auto p = ParseUrlPattern(b.in);
    ASSERT_FALSE(p.ok()) << b.in;
    EXPECT_TRUE(Contains(p.error().message, b.error)) << b.in << ": " << p.error().message;
  }
}

TEST(HttpPatternTest, HostsExactWildcardAndIp) {
  EXPECT_TRUE(Matches("https://api.example.com/", "https://API.EXAMPLE.COM./x"));
  EXPECT_FALSE(Matches("https://api.example.com/", "https://api.example.com.evil.example/"));
  EXPECT_FALSE(Matches("https://api.example.com/", "https://xapi.example.com/"));
  EXPECT_FALSE(Matches("https://api.example.com/", "https://example.com/"));
  // *.suffix: any depth of subdomain, never the suffix itself or a look-alike.
  EXPECT_TRUE(Matches("https://*.example.com/", "https://a.example.com/"));
  EXPECT_TRUE(Matches("https://*.example.com/", "https://a.b.c.example.com/"));
  EXPECT_FALSE(Matches("https://*.example.com/", "https://example.com/"));
  EXPECT_FALSE(Matches("https://*.example.com/", "https://badexample.com/"));
  EXPECT_FALSE(Matches("https://*.example.com/", "https://example.com.evil.example/"));
  // IP literals: any spelling of the same address.
  EXPECT_TRUE(Matches("http://127.0.0.1:8080/", "http://2130706433:8080/"));
  EXPECT_TRUE(Matches("http://127.0.0.1:8080/", "http://0x7f.1:8080/x"));
  EXPECT_FALSE(Matches("http://127.0.0.1:8080/", "http://127.0.0.2:8080/"));
  EXPECT_TRUE(Matches("http://[::1]:8080/", "http://[0:0:0:0:0:0:0:1]:8080/"));
  EXPECT_FALSE(Matches("http://[::1]:8080/", "http://[::ffff:127.0.0.1]:8080/"));
  // IDN: the pattern and the request meet in punycode.
  EXPECT_TRUE(Matches("https://bücher.example/", "https://xn--bcher-kva.example/"));
}

TEST(HttpPatternTest, SchemesPortsAndPathPrefixes) {
  EXPECT_FALSE(Matches("https://api.example.com/", "http://api.example.com/"));
  EXPECT_FALSE(Matches("https://api.example.com/", "https://api.example.com:8443/"));
  EXPECT_TRUE(Matches("https://api.example.com/", "https://api.example.com:443/"));
  EXPECT_TRUE(Matches("https://api.example.com:8443/", "https://api.example.com:8443/"));
  EXPECT_FALSE(Matches("https://api.example.com:8443/", "https://api.example.com/"));
  // A prefix ending in '/'.
  EXPECT_TRUE(Matches("https://api.example.com/v1/", "https://api.example.com/v1/"));
  EXPECT_TRUE(Matches("https://api.example.com/v1/", "https://api.example.com/v1/users?x=1"));
  EXPECT_FALSE(Matches("https://api.example.com/v1/", "https://api.example.com/v1"));
  EXPECT_FALSE(Matches("https://api.example.com/v1/", "https://api.example.com/v1admin"));
  EXPECT_FALSE(Matches("https://api.example.com/v1/", "https://api.example.com/v2/"));
  // A prefix without '/': itself, or itself + "/...".
  EXPECT_TRUE(Matches("https://api.example.com/v1", "https://api.example.com/v1"));
  EXPECT_TRUE(Matches("https://api.example.com/v1", "https://api.example.com/v1/x"));
  EXPECT_TRUE(Matches("https://api.example.com/v1", "https://api.example.com/v1?x"));
  EXPECT_FALSE(Matches("https://api.example.com/v1", "https://api.example.com/v1admin"));
  EXPECT_FALSE(Matches("https://api.example.com/v1", "https://api.example.com/v"));
  // Escaping the prefix with dot segments, encoded or not, does not work; %2F is no separator.
  EXPECT_FALSE(Matches("https://api.example.com/v1/", "https://api.example.com/v1/%2e%2e/admin"));
  EXPECT_FALSE(Matches("https://api.example.com/v1/", "https://api.example.com/v1/../admin"));
  EXPECT_TRUE(Matches("https://api.example.com/v1/", "https://api.example.com/v1/a/../b"));
  EXPECT_FALSE(Matches("https://api.example.com/v1/", "https://api.example.com/v1%2Fx"));
  EXPECT_TRUE(Matches("https://api.example.com/v1", "https://api.example.com/%76%31/x"));  // %76%31 = "v1"
  EXPECT_TRUE(Matches("https://api.example.com/", "https://api.example.com/anything"));
}

// --- The grant -----------------------------------------------------------------------------------

const std::string kPath = "grants.http.fetch";

Json G(const std::string& text) { return Json::parse(text); }

TEST(HttpGrantTest, ValidGrantWithDefaults) {
  auto grant = ParseFetchGrant(G(R"({"rules": [{"url": "https://api.example.com/v1/"}]})"), kPath);
  ASSERT_TRUE(grant.ok()) << grant.error().message;
  ASSERT_EQ(grant->rules.size(), 1u);
  const FetchRule& r = grant->rules[0];
  EXPECT_EQ(r.url.text, "https://api.example.com/v1/");
  EXPECT_EQ(r.methods, (std::vector<std::string>{"GET", "HEAD"}));
  EXPECT_TRUE(r.headers.empty());
  EXPECT_TRUE(r.allow_networks.empty());
  EXPECT_FALSE(r.allow_plain_http);
  const FetchLimits& l = grant->limits;
  EXPECT_EQ(l.connect_timeout_ms, 10000u);
  EXPECT_EQ(l.timeout_ms, 30000u);
  EXPECT_EQ(l.max_response_bytes, 4194304u);
  EXPECT_EQ(l.max_request_bytes, 1048576u);
  EXPECT_EQ(l.max_redirects, 0u);
  EXPECT_EQ(l.max_in_flight, 4u);
  EXPECT_EQ(l.max_requests, 100u);

  auto full = ParseFetchGrant(G(R"({"rules": [
      {"url": "http://127.0.0.1:8080/", "methods": ["get", "post", "PATCH"],
       "headers": {"Authorization": "Bearer ${secret:example_token}", "X-Trace": "basal"},
       "allow_networks": ["127.0.0.1/32", "::1/128"], "allow_plain_http": true}],
     "limits": {"connect_timeout_ms": 60000, "timeout_ms": 300000, "max_response_bytes": 8388608,
                "max_request_bytes": 0, "max_redirects": 5, "max_in_flight": 64, "max_requests": 100000}})"),
                              kPath);
  ASSERT_TRUE(full.ok()) << full.error().message;
  EXPECT_EQ(full->rules[0].methods, (std::vector<std::string>{"GET", "POST", "PATCH"}));
  ASSERT_EQ(full->rules[0].headers.size(), 2u);
  EXPECT_EQ(full->rules[0].allow_networks.size(), 2u);
  EXPECT_TRUE(full->rules[0].allow_plain_http);
  EXPECT_EQ(full->limits.max_redirects, 5u);
  EXPECT_EQ(full->limits.max_request_bytes, 0u);
  EXPECT_EQ(SecretRefs(full->rules[0]), (std::vector<std::string>{"example_token"}));
  EXPECT_TRUE(CheckFetchGrant(G(R"({"rules": [{"url": "https://a.example/"}], "limits": {}})"), kPath).ok());
}

// A rule's "retry" (issue 26): defaults, the backoff's growth and cap, and every refusal.
TEST(HttpGrantTest, RetryOfARule) {
  auto g = ParseFetchGrant(Json::parse(R"({"rules": [{"url": "https://a.example/", "retry": {}},
      {"url": "https://b.example/", "methods": ["POST"], "idempotency_key": "Idempotency-Key",
       "retry": {"statuses": [503, 429, 503], "max_attempts": 5, "backoff": {"initial_ms": 100, "factor": 3, "max_ms": 1000}}}]})"),
                           "grants.http.fetch");
  ASSERT_TRUE(g.ok()) << g.error().message;
  ASSERT_TRUE(g->rules[0].retry.has_value());
  const FetchRetry& d = *g->rules[0].retry;
  EXPECT_EQ(d.statuses, (std::vector<int64_t>{408, 425, 429, 500, 502, 503, 504}));
  EXPECT_EQ(d.max_attempts, 3u);
  EXPECT_EQ(d.DelayBefore(2), 200u);
  EXPECT_EQ(d.DelayBefore(3), 400u);
  const FetchRetry& r = *g->rules[1].retry;
  EXPECT_EQ(r.statuses, (std::vector<int64_t>{429, 503}));
  EXPECT_EQ(r.max_attempts, 5u);
  EXPECT_EQ(r.DelayBefore(2), 100u);
  EXPECT_EQ(r.DelayBefore(3), 300u);
  EXPECT_EQ(r.DelayBefore(4), 900u);
  EXPECT_EQ(r.DelayBefore(5), 1000u);  // capped at max_ms

  const std::pair<const char*, const char*> refused[] = {
      {R"({"url": "https://a.example/", "retry": 3})", "grants.http.fetch.rules[0].retry: must be an object"},
      {R"({"url": "https://a.example/", "retry": {"max_attempts": 1}})",
       "grants.http.fetch.rules[0].retry.max_attempts: must be an integer from 2 to 10"},
      {R"({"url": "https://a.example/", "retry": {"max_attempts": 11}})",
       "grants.http.fetch.rules[0].retry.max_attempts: must be an integer from 2 to 10"},
      {R"({"url": "https://a.example/", "retry": {"statuses": [200]}})",
       "grants.http.fetch.rules[0].retry.statuses: 200 is not an HTTP status from 400 to 599"},
      {R"({"url": "https://a.example/", "retry": {"statuses": []}})",
       "grants.http.fetch.rules[0].retry.statuses: must be a list of 1 to 50 HTTP statuses"},
      {R"({"url": "https://a.example/", "retry": {"backoff": {"factor": 11}}})",
       "grants.http.fetch.rules[0].retry.backoff.factor: must be a number from 1 to 10"},
      {R"({"url": "https://a.example/", "retry": {"backoff": {"initial_ms": 0}}})",
       "grants.http.fetch.rules[0].retry.backoff.initial_ms: must be an integer from 1 to 60000"},
      {R"({"url": "https://a.example/", "retry": {"backoff": {"initial_ms": 500, "max_ms": 100}}})",
       "grants.http.fetch.rules[0].retry.backoff.max_ms: is 100, below initial_ms (500)"},
      {R"({"url": "https://a.example/", "retry": {"backoff": {"jitter": true}}})",
       "grants.http.fetch.rules[0].retry.backoff.jitter: unknown key (known: initial_ms, factor, max_ms)"},
      {R"({"url": "https://a.example/", "retry": {"on": ["timeout"]}})",
       "grants.http.fetch.rules[0].retry.on: unknown key (known: statuses, max_attempts, backoff)"},
      // A POST is not repeated unless the server can drop a duplicate (the rule's idempotency key).
      {R"({"url": "https://a.example/", "methods": ["POST", "PATCH"], "retry": {}})",
       "grants.http.fetch.rules[0].retry: none of this rule's methods (POST, PATCH) is idempotent"},
  };
  for (const auto& [rule, error] : refused) {
    auto bad = CheckFetchGrant(Json::parse(std::string(R"({"rules": [)") + rule + "]}"), "grants.http.fetch");
    ASSERT_FALSE(bad.ok()) << rule;
    EXPECT_EQ(bad.error().message.substr(0, std::string(error).size()), error) << bad.error().message;
  }
}

TEST(HttpGrantTest, ErrorsNameTheirPath) {
  std::string many_rules = R"({"rules": [)";
  for (int i = 0; i < 65; ++i) many_rules += std::string(i ? "," : "") + R"({"url": "https://e.example/)" + std::to_string(i) + "\"}";
  many_rules += "]}";
  struct Case {
    std::string grant;
    std::string error;  // the message starts with this
  } cases[] = {
      {R"([])", "grants.http.fetch: must be an object"},
      {R"({})", "grants.http.fetch: \"rules\" is missing"},
      {R"({"rules": []})", "grants.http.fetch.rules: must be a list of 1 to 64 rules"},
      {many_rules, "grants.http.fetch.rules: must be a list of 1 to 64 rules"},
      {R"({"rules": [{"url": "https://a.example/"}], "bogus": 1})", "grants.http.fetch.bogus: unknown key (known: rules, limits)"},
      {R"({"rules": ["https://a.example/"]})", "grants.http.fetch.rules[0]: must be an object"},
      {R"({"rules": [{}]})", "grants.http.fetch.rules[0]: \"url\" is missing"},
      {R"({"rules": [{"url": "https://a.example/", "method": ["GET"]}]})", "grants.http.fetch.rules[0].method: unknown key"},
      {R"({"rules": [{"url": 1}]})", "grants.http.fetch.rules[0].url: must be a string"},
      {R"({"rules": [{"url": "https://a.example/"}, {"url": "ftp://a.example/"}]})",
       "grants.http.fetch.rules[1].url: the scheme \"ftp\" is not allowed"},
      {R"({"rules": [{"url": "https://a.example/v1/"}, {"url": "HTTPS://A.EXAMPLE:443/v1/x/.."}]})",
       "grants.http.fetch.rules[1].url: the same url as rules[0] (https://a.example/v1/): merge the two rules"},
      {R"({"rules": [{"url": "https://a.example/", "methods": []}]})", "grants.http.fetch.rules[0].methods: must be a list of 1 to 32"},
      {R"({"rules": [{"url": "https://a.example/", "methods": "GET"}]})", "grants.http.fetch.rules[0].methods: must be a list"},
      {R"({"rules": [{"url": "https://a.example/", "methods": ["GET", "CONNECT"]}]})",
       "grants.http.fetch.rules[0].methods[1]: the method CONNECT is forbidden"},
      {R"({"rules": [{"url": "https://a.example/", "methods": ["trace"]}]})", "grants.http.fetch.rules[0].methods[0]: the method TRACE is forbidden"},
      {R"({"rules": [{"url": "https://a.example/", "methods": ["Track"]}]})", "grants.http.fetch.rules[0].methods[0]: the method TRACK is forbidden"},
      {R"({"rules": [{"url": "https://a.example/", "methods": ["GET", "get"]}]})", "grants.http.fetch.rules[0].methods[1]: GET is listed twice"},
      {R"({"rules": [{"url": "https://a.example/", "methods": ["GE T"]}]})", "grants.http.fetch.rules[0].methods[0]: the method \"GE T\" is not an HTTP token"},
      {R"({"rules": [{"url": "https://a.example/", "methods": [1]}]})", "grants.http.fetch.rules[0].methods[0]: must be a string"},
      {R"({"rules": [{"url": "https://a.example/", "headers": []}]})", "grants.http.fetch.rules[0].headers: must be an object"},
      {R"({"rules": [{"url": "https://a.example/", "headers": {"Host": "evil.example"}}]})",
       "grants.http.fetch.rules[0].headers.Host: basal sets this header itself"},
      {R"({"rules": [{"url": "https://a.example/", "headers": {"Proxy-Authorization": "x"}}]})",
       "grants.http.fetch.rules[0].headers.Proxy-Authorization: basal sets this header itself"},
      {R"({"rules": [{"url": "https://a.example/", "headers": {"transfer-encoding": "chunked"}}]})",
       "grants.http.fetch.rules[0].headers.transfer-encoding: basal sets"},
      {R"({"rules": [{"url": "https://a.example/", "headers": {"Bad Name": "x"}}]})",
       "grants.http.fetch.rules[0].headers: \"Bad Name\" is not a header name"},
      {R"({"rules": [{"url": "https://a.example/", "headers": {"X-A": "x", "x-a": "y"}}]})",
       "grants.http.fetch.rules[0].headers."},
      {R"({"rules": [{"url": "https://a.example/", "headers": {"X-A": 1}}]})", "grants.http.fetch.rules[0].headers.X-A: must be a string"},
      {R"({"rules": [{"url": "https://a.example/", "headers": {"X-A": "a\r\nHost: evil"}}]})",
       "grants.http.fetch.rules[0].headers.X-A: must not hold CR, LF or NUL"},
      {R"({"rules": [{"url": "https://a.example/", "headers": {"X-A": "${secret:}"}}]})",
       "grants.http.fetch.rules[0].headers.X-A: the secret reference \"${secret:}\" needs a NAME"},
      {R"({"rules": [{"url": "https://a.example/", "headers": {"X-A": "${secret:1abc}"}}]})", "grants.http.fetch.rules[0].headers.X-A: the secret reference"},
      {R"({"rules": [{"url": "https://a.example/", "headers": {"X-A": "${secret:a-b}"}}]})", "grants.http.fetch.rules[0].headers.X-A: the secret reference"},
      {R"({"rules": [{"url": "https://a.example/", "headers": {"X-A": "${secret:abc"}}]})",
       "grants.http.fetch.rules[0].headers.X-A: \"${\" must start a secret reference"},
      {R"({"rules": [{"url": "https://a.example/", "headers": {"X-A": "${env:HOME}"}}]})",
       "grants.http.fetch.rules[0].headers.X-A: \"${\" must start a secret reference"},
      {R"({"rules": [{"url": "https://a.example/", "headers": {"X-A": "${secret:)" + std::string(65, 'a') + "}\"}}]}",
       "grants.http.fetch.rules[0].headers.X-A: the secret reference"},
      {R"({"rules": [{"url": "http://a.example/", "headers": {"Authorization": "Bearer ${secret:t}"}}]})",
       "grants.http.fetch.rules[0].headers: a secret would be sent over plain http:// to http://a.example/"},
      {R"({"rules": [{"url": "https://a.example/", "allow_plain_http": true}]})",
       "grants.http.fetch.rules[0].allow_plain_http: applies only to an http:// url"},
      {R"({"rules": [{"url": "http://a.example/", "allow_plain_http": "yes"}]})",
       "grants.http.fetch.rules[0].allow_plain_http: must be true or false"},
      {R"({"rules": [{"url": "https://a.example/", "allow_networks": "127.0.0.1/32"}]})",
       "grants.http.fetch.rules[0].allow_networks: must be a list"},
      {R"({"rules": [{"url": "https://a.example/", "allow_networks": ["10.1.2.3/8"]}]})",
       "grants.http.fetch.rules[0].allow_networks[0]: \"10.1.2.3/8\" has host bits set: write 10.0.0.0/8"},
      {R"({"rules": [{"url": "https://a.example/", "allow_networks": ["127.0.0.1"]}]})",
       "grants.http.fetch.rules[0].allow_networks[0]: \"127.0.0.1\" is not a CIDR"},
      {R"({"rules": [{"url": "https://a.example/"}], "limits": []})", "grants.http.fetch.limits: must be an object"},
      {R"({"rules": [{"url": "https://a.example/"}], "limits": {"timeout": 5}})",
       "grants.http.fetch.limits.timeout: unknown limit (known: connect_timeout_ms, timeout_ms"},
      {R"({"rules": [{"url": "https://a.example/"}], "limits": {"timeout_ms": 0}})",
       "grants.http.fetch.limits.timeout_ms: must be an integer from 1 to 300000 (got 0)"},
      {R"({"rules": [{"url": "https://a.example/"}], "limits": {"max_redirects": 6}})",
       "grants.http.fetch.limits.max_redirects: must be an integer from 0 to 5"},
      {R"({"rules": [{"url": "https://a.example/"}], "limits": {"max_response_bytes": 8388609}})",
       "grants.http.fetch.limits.max_response_bytes: must be an integer from 0 to 8388608"},
      {R"({"rules": [{"url": "https://a.example/"}], "limits": {"max_request_bytes": -1}})",
       "grants.http.fetch.limits.max_request_bytes: must be an integer"},
      {R"({"rules": [{"url": "https://a.example/"}], "limits": {"max_in_flight": 65}})",
       "grants.http.fetch.limits.max_in_flight: must be an integer from 1 to 64"},
      {R"({"rules": [{"url": "https://a.example/"}], "limits": {"max_requests": 1.5}})",
       "grants.http.fetch.limits.max_requests: must be an integer from 1 to 100000"},
      {R"({"rules": [{"url": "https://a.example/"}], "limits": {"connect_timeout_ms": 60001}})",
       "grants.http.fetch.limits.connect_timeout_ms: must be an integer from 1 to 60000"},
  };
  for (const Case& c : cases) {
    auto r = CheckFetchGrant(Json::parse(c.grant), kPath);
    ASSERT_FALSE(r.ok()) << c.grant;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(r.error().message.substr(0, c.error.size()), c.error) << c.grant << "\n  " << r.error().message;
  }
  // A key that is no plain name is quoted in the path, so a message stays printable.
  auto odd_key = CheckFetchGrant(Json{{"rules", Json::array({Json{{"url", "https://a.example/"}}})}, {"a\nb\u00e9", 1}}, kPath);
  ASSERT_FALSE(odd_key);
  EXPECT_EQ(odd_key.error().message, "grants.http.fetch.\"a\\nb\\u00e9\": unknown key (known: rules, limits)");
  auto odd_cidr = CheckFetchGrant(Json::parse(R"({"rules": [{"url": "https://a.example/", "allow_networks": ["1\n2"]}]})"), kPath);
  ASSERT_FALSE(odd_cidr);
  EXPECT_EQ(odd_cidr.error().message.find('\n'), std::string::npos) << odd_cidr.error().message;
  // The allowed neighbours of some refusals.
  EXPECT_TRUE(CheckFetchGrant(G(R"({"rules": [{"url": "http://a.example/", "headers": {"Authorization": "Bearer ${secret:t}"},
                                   "allow_plain_http": true}]})"), kPath).ok());
  EXPECT_TRUE(CheckFetchGrant(G(R"({"rules": [{"url": "http://a.example/", "headers": {"X-Plain": "no secret"}}]})"), kPath).ok());
  EXPECT_TRUE(CheckFetchGrant(G(R"({"rules": [{"url": "https://a.example/", "headers": {"Sec-Fetch-Mode": "cors", "X-A": "$ {x} $x"}}]})"), kPath).ok());
  EXPECT_TRUE(CheckFetchGrant(G(R"({"rules": [{"url": "https://a.example/v1/"}, {"url": "https://a.example/v1"}]})"), kPath).ok());
  const std::string longest_name = R"({"rules": [{"url": "https://a.example/", "headers": {"X-A": "${secret:)" +
                                   std::string(64, 'a') + "}\"}}]}";
  EXPECT_TRUE(CheckFetchGrant(G(longest_name), kPath).ok());
  const std::string sixty_four_rules = many_rules.substr(0, many_rules.rfind(",{")) + "]}";
  EXPECT_TRUE(CheckFetchGrant(G(sixty_four_rules), kPath).ok());
}

// --- Matching ------------------------------------------------------------------------------------

FetchGrant Grant(const char* text) {
  auto g = ParseFetchGrant(Json::parse(text), kPath);
  EXPECT_TRUE(g.ok()) << (g ? "" : g.error().message);
  return g ? *g : FetchGrant{};
}

CanonicalUrl Url(const std::string& text) {
  auto u = CanonicalizeUrl(text);
  EXPECT_TRUE(u.ok()) << text;
  return u ? *u : CanonicalUrl{};
}

TEST(HttpMatchTest, FirstRuleThatAdmitsUrlAndMethod) {
  const FetchGrant grant = Grant(R"({"rules": [
      {"url": "https://api.example.com/v1/", "headers": {"X-Rule": "v1"}},
      {"url": "https://api.example.com/", "methods": ["POST"], "headers": {"X-Rule": "root"}},
      {"url": "https://*.cdn.example/"}]})");
  RuleMatch m = MatchRequest(grant, Url("https://api.example.com/v1/users"), "GET");
  ASSERT_NE(m.rule, nullptr) << m.denial;
  EXPECT_EQ(m.rule, &grant.rules[0]);
  m = MatchRequest(grant, Url("https://api.example.com/v1/users"), "POST");  // rule 0 has no POST
  ASSERT_NE(m.rule, nullptr) << m.denial;
  EXPECT_EQ(m.rule, &grant.rules[1]);
  m = MatchRequest(grant, Url("https://img.cdn.example/a.png"), "HEAD");
  ASSERT_NE(m.rule, nullptr) << m.denial;
  EXPECT_EQ(m.rule, &grant.rules[2]);

  m = MatchRequest(grant, Url("https://api.example.com/v1/users"), "DELETE");
  EXPECT_EQ(m.rule, nullptr);
  EXPECT_EQ(m.denial, "method DELETE is not granted for https://api.example.com/v1/ (granted: GET, HEAD, POST)");
  m = MatchRequest(grant, Url("https://evil.example/x?token=1"), "GET");
  EXPECT_EQ(m.rule, nullptr);
  EXPECT_EQ(m.denial, "no rule of grant http.fetch admits https://evil.example/x (rules: https://api.example.com/v1/, "
                      "https://api.example.com/, https://*.cdn.example/)");
  m = MatchRequest(grant, Url("https://cdn.example/"), "GET");
  EXPECT_EQ(m.rule, nullptr);
  m = MatchRequest(grant, Url("http://api.example.com/v1/"), "GET");
  EXPECT_EQ(m.rule, nullptr);
  EXPECT_TRUE(Contains(m.denial, "no rule of grant http.fetch admits http://api.example.com/v1/")) << m.denial;
  // Methods are compared exactly, after NormalizeMethod: "patch" is not "PATCH".
  const FetchGrant patch = Grant(R"({"rules": [{"url": "https://api.example.com/", "methods": ["PATCH"]}]})");
  EXPECT_NE(MatchRequest(patch, Url("https://api.example.com/"), "PATCH").rule, nullptr);
  EXPECT_EQ(MatchRequest(patch, Url("https://api.example.com/"), "patch").rule, nullptr);
}

TEST(HttpMatchTest, NormalizeMethod) {
  EXPECT_EQ(*NormalizeMethod("get"), "GET");
  EXPECT_EQ(*NormalizeMethod("Delete"), "DELETE");
  EXPECT_EQ(*NormalizeMethod("options"), "OPTIONS");
  EXPECT_EQ(*NormalizeMethod("patch"), "patch");  // fetch() leaves other methods as they are
  EXPECT_EQ(*NormalizeMethod("PROPFIND"), "PROPFIND");
  for (const char* bad : {"", "GET ", "G\r\nET", "connect", "TRACE", "track", "GET/1"}) {
    EXPECT_FALSE(NormalizeMethod(bad).ok()) << bad;
  }
  EXPECT_FALSE(NormalizeMethod(std::string(33, 'A')).ok());
  EXPECT_TRUE(NormalizeMethod(std::string(32, 'A')).ok());
}

TEST(HttpMatchTest, ControlledHeaderNames) {
  for (const char* name : {"Host", "content-length", "Transfer-Encoding", "CONNECTION", "keep-alive", "Upgrade", "TE",
                           "Trailer", "Expect", "HTTP2-Settings", "Proxy-Authorization", "proxy-connection"}) {
    EXPECT_TRUE(IsControlledHeader(name)) << name;
  }
  for (const char* name : {"Authorization", "Cookie", "Sec-Fetch-Mode", "X-Host", "Hosts", "Content-Type", "Accept"}) {
    EXPECT_FALSE(IsControlledHeader(name)) << name;
  }
  EXPECT_TRUE(IsToken("X-Api-Key_1!#$%&'*+-.^`|~"));
  for (const char* bad : {"", "a b", "a:b", "a\"b", "a(b)", "ü", "a\tb"}) EXPECT_FALSE(IsToken(bad)) << bad;
}

// --- Secrets and the headers sent ----------------------------------------------------------------

TEST(HttpSecretsTest, ExpandAndReplace) {
  const FetchGrant grant = Grant(R"({"rules": [{"url": "https://api.example.com/",
      "headers": {"Authorization": "Bearer ${secret:token}", "X-Pair": "${secret:a}:${secret:b_2}", "X-Const": "c"}}]})");
  const FetchRule& rule = grant.rules[0];
  EXPECT_EQ(SecretRefs(rule), (std::vector<std::string>{"a", "b_2", "token"}));
  const SecretLookup lookup = [](std::string_view name) -> std::optional<std::string> {
    if (name == "token") return "t0k3n";
    if (name == "a") return "A";
    if (name == "b_2") return "${secret:token}";  // a value is never expanded again
    return std::nullopt;
  };
  auto headers = RequestHeaders(rule, {{"authorization", "mine"}, {"Accept", "*/*"}, {"x-const", "1"}, {"Accept", "x"}},
                                lookup);
  ASSERT_TRUE(headers.ok()) << headers.error().message;
  EXPECT_EQ(*headers, (HeaderList{{"Accept", "*/*"},
                                  {"Accept", "x"},
                                  {"Authorization", "Bearer t0k3n"},
                                  {"X-Const", "c"},  // the rule's headers in name order (as JSON reads them)
                                  {"X-Pair", "A:${secret:token}"}}));

  auto missing = ExpandSecrets("Bearer ${secret:nope}", lookup);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  EXPECT_TRUE(Contains(missing.error().message, "the secret nope is not set")) << missing.error().message;
  auto no_lookup = ExpandSecrets("${secret:token}", nullptr);
  EXPECT_FALSE(no_lookup.ok());

  const SecretLookup splitting = [](std::string_view) -> std::optional<std::string> { return "x\r\nHost: evil.example"; };
  auto split = RequestHeaders(rule, {}, splitting);
  ASSERT_FALSE(split);
  EXPECT_TRUE(Contains(split.error().message, "holds CR, LF or NUL")) << split.error().message;
  EXPECT_FALSE(Contains(split.error().message, "evil")) << "a secret's value in a message: " << split.error().message;
  EXPECT_TRUE(Contains(split.error().message, "header Authorization of rule https://api.example.com/")) << split.error().message;
  EXPECT_EQ(*ExpandSecrets("no references", lookup), "no references");
  EXPECT_EQ(*ExpandSecrets("", lookup), "");
}

// --- Arguments and authorization -----------------------------------------------------------------

const Json kGrant = Json::parse(R"({"rules": [
    {"url": "https://api.example.com/v1/", "methods": ["GET", "POST"]},
    {"url": "http://127.0.0.1:8080/", "allow_networks": ["127.0.0.1/32"]}],
  "limits": {"max_request_bytes": 10}})");

TEST(HttpAuthorizeTest, AdmitsWhatTheGrantSays) {
  EXPECT_EQ(AuthorizeFetch(kGrant, Json{{"url", "https://api.example.com/v1/x"}, {"method", "GET"}}), std::nullopt);
  EXPECT_EQ(AuthorizeFetch(kGrant, Json::parse(R"({"url": "https://API.example.com/v1/a/../b#f", "method": "post",
      "headers": [["Content-Type", "application/json"], ["Authorization", "Bearer mine"]],
      "body": {"base64": "MDEyMzQ1Njc4OQ=="}, "redirect": "manual"})")),
            std::nullopt);
  EXPECT_EQ(AuthorizeFetch(kGrant, Json{{"url", "http://2130706433:8080/"}, {"method", "HEAD"}, {"body", nullptr},
                                        {"headers", Json::array()}, {"redirect", "error"}}),
            std::nullopt);

  auto request = ParseFetchArgs(Json::parse(R"({"url": "https://api.example.com/v1/x", "method": "post",
      "headers": [["A", "1"], ["A", "2"]], "body": {"base64": "aGk="}})"), FetchLimits{});
  ASSERT_TRUE(request.ok()) << request.error().message;
  EXPECT_EQ(request->method, "POST");
  EXPECT_EQ(request->url.url, "https://api.example.com:443/v1/x");
  EXPECT_EQ(request->headers, (HeaderList{{"A", "1"}, {"A", "2"}}));
  EXPECT_EQ(request->body, std::optional<std::string>("hi"));
  EXPECT_EQ(request->redirect, RedirectMode::kFollow);
}

TEST(HttpAuthorizeTest, RefusesBadShapesAndUngrantedRequests) {
  std::string big_base64(4 * 1024 * 1024, '!');  // not even base64: the length is refused before decoding
  struct Case {
    Json args;
    std::string reason;  // a part of the denial
  } cases[] = {
      {Json::array(), "the arguments must be an object"},
      {Json{{"url", "https://api.example.com/v1/"}}, "\"method\" must be a string"},
      {Json{{"method", "GET"}}, "\"url\" must be a string"},
      {Json{{"url", 1}, {"method", "GET"}}, "\"url\" must be a string"},
      {Json{{"url", "https://api.example.com/v1/"}, {"method", "GET"}, {"mode", "cors"}}, "unknown argument \"mode\""},
      {Json{{"url", "https://evil.example/"}, {"method", "GET"}}, "no rule of grant http.fetch admits https://evil.example/"},
      {Json{{"url", "https://api.example.com/v1/"}, {"method", "DELETE"}},
       "method DELETE is not granted for https://api.example.com/v1/ (granted: GET, POST)"},
      {Json{{"url", "https://api.example.com/v1/"}, {"method", "CONNECT"}}, "the method CONNECT is forbidden"},
      {Json{{"url", "https://u:p@api.example.com/v1/"}, {"method", "GET"}}, "credentials"},
      {Json{{"url", "file:///etc/passwd"}, {"method", "GET"}}, "the scheme \"file\" is not allowed"},
      {Json{{"url", "https://api.example.com/v1/%2e%2e/admin"}, {"method", "GET"}}, "no rule of grant http.fetch admits https://api.example.com/admin"},
      {Json{{"url", "https://api.example.com/v1/"}, {"method", "GET"}, {"headers", Json::object()}}, "\"headers\" must be a list"},
      {Json{{"url", "https://api.example.com/v1/"}, {"method", "GET"}, {"headers", Json::parse(R"([["A"]])")}},
       "headers[0] must be a [name, value] pair of strings"},
      {Json{{"url", "https://api.example.com/v1/"}, {"method", "GET"}, {"headers", Json::parse(R"([["A", 1]])")}},
       "headers[0] must be a [name, value] pair"},
      {Json{{"url", "https://api.example.com/v1/"}, {"method", "GET"}, {"headers", Json::parse(R"([["Bad Name", "1"]])")}},
       "headers[0]: \"Bad Name\" is not a header name"},
      {Json{{"url", "https://api.example.com/v1/"}, {"method", "GET"}, {"headers", Json::parse(R"([["host", "evil"]])")}},
       "basal sets the header \"host\" itself"},
      {Json{{"url", "https://api.example.com/v1/"}, {"method", "GET"}, {"headers", Json::parse(R"([["Content-Length", "5"]])")}},
       "basal sets the header \"Content-Length\""},
      {Json{{"url", "https://api.example.com/v1/"}, {"method", "GET"}, {"headers", Json::parse(R"([["X-A", "a\r\nb: c"]])")}},
       "the value of X-A holds CR, LF or NUL"},
      {Json{{"url", "https://api.example.com/v1/"}, {"method", "GET"}, {"headers", Json::parse(R"([["X-A", "a\u0000b"]])")}},
       "holds CR, LF or NUL"},
      {Json{{"url", "https://api.example.com/v1/"}, {"method", "POST"}, {"body", "aGk="}}, "\"body\" must be null or {\"base64\": string}"},
      {Json{{"url", "https://api.example.com/v1/"}, {"method", "POST"}, {"body", Json{{"base64", "aGk="}, {"x", 1}}}},
       "\"body\" must be null or"},
      {Json{{"url", "https://api.example.com/v1/"}, {"method", "POST"}, {"body", Json{{"base64", "aGk"}}}}, "not strict base64"},
      {Json{{"url", "https://api.example.com/v1/"}, {"method", "POST"}, {"body", Json{{"base64", "aG k="}}}}, "not strict base64"},
      {Json{{"url", "https://api.example.com/v1/"}, {"method", "POST"}, {"body", Json{{"base64", "aGl="}}}}, "not strict base64"},
      {Json{{"url", "https://api.example.com/v1/"}, {"method", "POST"}, {"body", Json{{"base64", "a=Gk"}}}}, "not strict base64"},
      // 11 bytes against max_request_bytes 10: "MDEyMzQ1Njc4OTA=" is 16 characters, the most 10 bytes take.
      {Json{{"url", "https://api.example.com/v1/"}, {"method", "POST"}, {"body", Json{{"base64", "MDEyMzQ1Njc4OTA="}}}},
       "the body is 11 bytes; the grant's limits.max_request_bytes is 10"},
      {Json{{"url", "https://api.example.com/v1/"}, {"method", "POST"}, {"body", Json{{"base64", big_base64}}}},
       "limits.max_request_bytes is 10"},
      {Json{{"url", "https://api.example.com/v1/"}, {"method", "GET"}, {"body", Json{{"base64", "aGk="}}}},
       "a GET request cannot have a body"},
      {Json{{"url", "https://api.example.com/v1/"}, {"method", "GET"}, {"redirect", "sometimes"}},
       "\"redirect\" must be \"follow\", \"error\" or \"manual\""},
      {Json{{"url", "https://api.example.com/v1/"}, {"method", "GET"}, {"redirect", true}}, "\"redirect\" must be"},
  };
  for (const Case& c : cases) {
    auto denial = AuthorizeFetch(kGrant, c.args);
    ASSERT_TRUE(denial.has_value()) << c.args.dump();
    EXPECT_TRUE(Contains(*denial, c.reason)) << c.args.dump().substr(0, 200) << "\n  " << *denial;
  }
  EXPECT_EQ(*AuthorizeFetch(kGrant, Json{{"url", "https://api.example.com/v1/x"}, {"method", "GET"}, {"mode", 1}}),
            "http.fetch: unknown argument \"mode\" (known: url, method, headers, body, redirect)");
  auto invalid_grant = AuthorizeFetch(Json::object(), Json{{"url", "https://a.example/"}, {"method", "GET"}});
  ASSERT_TRUE(invalid_grant.has_value());
  EXPECT_TRUE(Contains(*invalid_grant, "the grant of http.fetch is invalid")) << *invalid_grant;
}

// An IP literal is guarded at authorization; allow_networks exempts exactly its CIDR.
TEST(HttpAuthorizeTest, IpLiteralsAreGuardedAtOnce) {
  const Json grant = Json::parse(R"({"rules": [
      {"url": "http://169.254.169.254/"},
      {"url": "http://127.0.0.1:8080/", "allow_networks": ["127.0.0.1/32"]},
      {"url": "http://127.0.0.2:8080/"},
      {"url": "https://93.184.216.34/"}]})");
  auto metadata = AuthorizeFetch(grant, Json{{"url", "http://169.254.169.254/latest/meta-data/"}, {"method", "GET"}});
  ASSERT_TRUE(metadata.has_value());
  EXPECT_EQ(*metadata, "http.fetch: 169.254.169.254 is link-local, where cloud metadata services answer (169.254.0.0/16); "
                       "a rule's \"allow_networks\" may admit it (e.g. \"169.254.169.254/32\")");
  EXPECT_EQ(AuthorizeFetch(grant, Json{{"url", "http://0x7f.1:8080/"}, {"method", "GET"}}), std::nullopt);
  auto neighbour = AuthorizeFetch(grant, Json{{"url", "http://127.0.0.2:8080/"}, {"method", "GET"}});
  ASSERT_TRUE(neighbour.has_value());
  EXPECT_TRUE(Contains(*neighbour, "127.0.0.2 is loopback (127.0.0.0/8)")) << *neighbour;
  EXPECT_EQ(AuthorizeFetch(grant, Json{{"url", "https://93.184.216.34/"}, {"method", "GET"}}), std::nullopt);
}

TEST(HttpAuthorizeTest, HeaderCountAndSizeBounds) {
  Json headers = Json::array();
  for (size_t i = 0; i < kMaxRequestHeaders; ++i) headers.push_back(Json::array({"X-" + std::to_string(i), "v"}));
  Json args = {{"url", "https://api.example.com/v1/"}, {"method", "GET"}, {"headers", headers}};
  EXPECT_EQ(AuthorizeFetch(kGrant, args), std::nullopt);
  args["headers"].push_back(Json::array({"X-Last", "v"}));
  auto count = AuthorizeFetch(kGrant, args);
  ASSERT_TRUE(count.has_value());
  EXPECT_TRUE(Contains(*count, "101 headers; the limit is 100")) << *count;

  // Exactly 64 KiB of names and values passes; one byte more does not.
  const std::string name = "X-Big";
  Json at_limit = {{"url", "https://api.example.com/v1/"}, {"method", "GET"},
                   {"headers", Json::array({Json::array({name, std::string(kMaxRequestHeaderBytes - name.size(), 'v')})})}};
  EXPECT_EQ(AuthorizeFetch(kGrant, at_limit), std::nullopt);
  at_limit["headers"][0][1] = std::string(kMaxRequestHeaderBytes - name.size() + 1, 'v');
  auto bytes = AuthorizeFetch(kGrant, at_limit);
  ASSERT_TRUE(bytes.has_value());
  EXPECT_TRUE(Contains(*bytes, "the headers exceed 65536 bytes")) << *bytes;
}

// The grant and the arguments are parsed several times per call (the last parse of each is kept
// and given back for an equal input): a parse follows its own input, never the one before it.
TEST(HttpAuthorizeTest, EachParseAnswersForItsOwnInput) {
  const Json small = G(R"({"rules": [{"url": "https://a.example/", "methods": ["POST"]}], "limits": {"max_request_bytes": 2}})");
  const Json large = G(R"({"rules": [{"url": "https://b.example/", "methods": ["POST"]}], "limits": {"max_request_bytes": 3}})");
  const Json bad = G(R"({"rules": []})");
  for (int round = 0; round < 2; ++round) {
    auto a = ParseFetchGrant(small, kPath);
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(a->rules[0].url.text, "https://a.example/");
    EXPECT_EQ(a->limits.max_request_bytes, 2u);
    EXPECT_FALSE(ParseFetchGrant(bad, kPath).ok());
    EXPECT_FALSE(ParseFetchGrant(bad, kPath).ok());
    auto b = ParseFetchGrant(large, kPath);
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(b->rules[0].url.text, "https://b.example/");
    EXPECT_EQ(b->limits.max_request_bytes, 3u);
    // The same grant under another path names that path in its errors.
    auto named = ParseFetchGrant(bad, "elsewhere");
    ASSERT_FALSE(named.ok());
    EXPECT_TRUE(Contains(named.error().message, "elsewhere")) << named.error().message;
  }
  // The same arguments under other limits: a 3-byte body passes one and not the other.
  const Json args = Json{{"url", "https://b.example/x"}, {"method", "POST"}, {"body", Json{{"base64", "QUJD"}}}};
  for (int round = 0; round < 2; ++round) {
    auto under_large = ParseFetchArgs(args, ParseFetchGrant(large, kPath)->limits);
    ASSERT_TRUE(under_large.ok()) << under_large.error().message;
    EXPECT_EQ(under_large->body, "ABC");
    EXPECT_FALSE(ParseFetchArgs(args, ParseFetchGrant(small, kPath)->limits).ok());
    EXPECT_EQ(AuthorizeFetch(large, args), std::nullopt);
    EXPECT_NE(AuthorizeFetch(small, args), std::nullopt);
    // Other arguments under the same limits.
    const Json other = Json{{"url", "https://b.example/y"}, {"method", "POST"}, {"body", nullptr}};
    auto y = ParseFetchArgs(other, FetchLimits{});
    ASSERT_TRUE(y.ok());
    EXPECT_EQ(y->url.path, "/y");
    EXPECT_FALSE(y->body.has_value());
  }
}

TEST(HttpAuthorizeTest, StrictBase64Bodies) {
  auto body = [](const std::string& base64) -> std::optional<std::string> {
    auto r = ParseFetchArgs(Json{{"url", "https://a.example/"}, {"method", "POST"}, {"body", Json{{"base64", base64}}}},
                            FetchLimits{});
    if (!r) return std::nullopt;
    return r->body.value_or("<none>");
  };
  EXPECT_EQ(body(""), "");
  EXPECT_EQ(body("QQ=="), "A");
  EXPECT_EQ(body("QUI="), "AB");
  EXPECT_EQ(body("QUJD"), "ABC");
  EXPECT_EQ(body("QUJDRA=="), "ABCD");
  EXPECT_EQ(body("+/+/"), "\xfb\xff\xbf");
  for (const char* bad : {"Q", "QQ", "QQ=", "QQ===", "A===", "====", "=QQ=", "Q=Q=", "QQ==QUJD", "QR==", "QUJ=",
                          "QU I", "QUJD\n", "QUJ-", "QUJ_", "QUJ\xc3"}) {
    EXPECT_EQ(body(bad), std::nullopt) << bad;
  }
}

TEST(HttpAuthorizeTest, BodyAtTheLimit) {
  // 10 bytes (the limit) pass; a zero limit admits only an empty body.
  EXPECT_EQ(AuthorizeFetch(kGrant, Json{{"url", "https://api.example.com/v1/"}, {"method", "POST"},
                                        {"body", Json{{"base64", "MDEyMzQ1Njc4OQ=="}}}}),
            std::nullopt);
  const Json zero = Json::parse(R"({"rules": [{"url": "https://a.example/", "methods": ["POST"]}], "limits": {"max_request_bytes": 0}})");
  EXPECT_EQ(AuthorizeFetch(zero, Json{{"url", "https://a.example/"}, {"method", "POST"}, {"body", Json{{"base64", ""}}}}),
            std::nullopt);
  EXPECT_TRUE(AuthorizeFetch(zero, Json{{"url", "https://a.example/"}, {"method", "POST"}, {"body", Json{{"base64", "AA=="}}}})
                  .has_value());
}

// --- Compare ---------------------------------------------------------------------------------------

std::string Changes(const char* before, const char* after) {
  std::string out;
  for (const ConstraintChange& c : CompareFetchGrant(Json::parse(before), Json::parse(after))) {
    out += c.constraint + " " + DirectionName(c.direction) + " " + c.detail + "\n";
  }
  return out;
}

TEST(HttpCompareTest, Directions) {
  const char* base = R"({"rules": [{"url": "https://a.example/v1/"}]})";
  EXPECT_EQ(Changes(base, base), "");
  // The same grant written another way is no change.
  EXPECT_EQ(Changes(base, R"({"rules": [{"url": "HTTPS://A.EXAMPLE:443/v1/", "methods": ["head", "GET"]}],
                              "limits": {"timeout_ms": 30000}})"),
            "");
  EXPECT_EQ(Changes(base, R"({"rules": [{"url": "https://a.example/v1/"}, {"url": "https://b.example/"}]})"),
            "rules[https://b.example/] widened +https://b.example/ (GET, HEAD)\n");
  EXPECT_EQ(Changes(R"({"rules": [{"url": "https://a.example/v1/"}, {"url": "https://b.example/", "methods": ["POST"]}]})", base),
            "rules[https://b.example/] narrowed -https://b.example/ (POST)\n");
  EXPECT_EQ(Changes(base, R"({"rules": [{"url": "https://a.example/v1/", "methods": ["GET", "HEAD", "DELETE"]}]})"),
            "rules[https://a.example/v1/].methods widened +DELETE\n");
  EXPECT_EQ(Changes(base, R"({"rules": [{"url": "https://a.example/v1/", "methods": ["GET"]}]})"),
            "rules[https://a.example/v1/].methods narrowed -HEAD\n");
  EXPECT_EQ(Changes(base, R"({"rules": [{"url": "https://a.example/v1/", "methods": ["GET", "POST"]}]})"),
            "rules[https://a.example/v1/].methods changed +POST -HEAD\n");
  EXPECT_EQ(Changes(base, R"({"rules": [{"url": "https://a.example/v1/", "allow_networks": ["10.0.0.0/24"]}]})"),
            "rules[https://a.example/v1/].allow_networks widened [] -> [10.0.0.0/24]\n");
  EXPECT_EQ(Changes(R"({"rules": [{"url": "https://a.example/v1/", "allow_networks": ["10.0.0.0/24"]}]})",
                    R"({"rules": [{"url": "https://a.example/v1/", "allow_networks": ["10.0.0.0/8"]}]})"),
            "rules[https://a.example/v1/].allow_networks widened [10.0.0.0/24] -> [10.0.0.0/8]\n");
  EXPECT_EQ(Changes(R"({"rules": [{"url": "https://a.example/v1/", "allow_networks": ["10.0.0.0/8", "::1/128"]}]})",
                    R"({"rules": [{"url": "https://a.example/v1/", "allow_networks": ["10.0.0.0/24"]}]})"),
            "rules[https://a.example/v1/].allow_networks narrowed [10.0.0.0/8, ::1/128] -> [10.0.0.0/24]\n");
  EXPECT_EQ(Changes(R"({"rules": [{"url": "https://a.example/v1/", "allow_networks": ["10.0.0.0/24"]}]})",
                    R"({"rules": [{"url": "https://a.example/v1/", "allow_networks": ["10.0.1.0/24"]}]})"),
            "rules[https://a.example/v1/].allow_networks changed [10.0.0.0/24] -> [10.0.1.0/24]\n");
  EXPECT_EQ(Changes(R"({"rules": [{"url": "https://a.example/v1/", "allow_networks": ["10.0.0.0/24", "10.0.0.0/25"]}]})",
                    R"({"rules": [{"url": "https://a.example/v1/", "allow_networks": ["10.0.0.0/24"]}]})"),
            "");
  EXPECT_EQ(Changes(R"({"rules": [{"url": "http://a.example/"}]})", R"({"rules": [{"url": "http://a.example/", "allow_plain_http": true}]})"),
            "rules[http://a.example/].allow_plain_http widened false -> true\n");
  EXPECT_EQ(Changes(R"({"rules": [{"url": "http://a.example/", "allow_plain_http": true}]})", R"({"rules": [{"url": "http://a.example/"}]})"),
            "rules[http://a.example/].allow_plain_http narrowed true -> false\n");
  EXPECT_EQ(Changes(R"({"rules": [{"url": "https://a.example/", "headers": {"Authorization": "Bearer ${secret:old}", "X-Old": "1", "X-Same": "s"}}]})",
                    R"({"rules": [{"url": "https://a.example/", "headers": {"Authorization": "Bearer ${secret:new}", "X-New": "2", "X-Same": "s"}}]})"),
            "rules[https://a.example/].headers changed ~Authorization +X-New -X-Old\n");
  EXPECT_EQ(Changes(R"({"rules": [{"url": "https://a.example/"}, {"url": "https://b.example/"}]})",
                    R"({"rules": [{"url": "https://b.example/"}, {"url": "https://a.example/"}]})"),
            "rules changed order https://a.example/, https://b.example/ -> https://b.example/, https://a.example/ (the first "
            "matching rule sets the headers)\n");
  EXPECT_EQ(Changes(base, R"({"rules": [{"url": "https://a.example/v1/"}], "limits": {"timeout_ms": 60000, "max_redirects": 0,
                                                                                  "max_requests": 10}})"),
            "limits.timeout_ms widened 30000 (default) -> 60000\nlimits.max_requests narrowed 100 (default) -> 10\n");
  EXPECT_EQ(Changes(R"({"rules": [{"url": "https://a.example/v1/"}], "limits": {"max_response_bytes": 100}})", base),
            "limits.max_response_bytes widened 100 -> 4194304 (default)\n");
  EXPECT_EQ(Changes(base, R"({"rules": [{"url": "https://a.example/v1/", "retry": {"statuses": [503, 429]}}]})"),
            "rules[https://a.example/v1/].retry changed none -> 3 attempts on 429, 503 (backoff 200 ms to 5000 ms)\n");
  // A grant that did not pass check_grant is "changed", never guessed.
  EXPECT_EQ(Changes(base, R"({"rules": "https://a.example/"})").substr(0, 30), "rules changed cannot compare: ");
}

// Issue 25 point 9: a response echoes a secret encoded, in parts, or both; each is redacted, and
// text that merely resembles the value is left alone.
TEST(SecretRedactionTest, TheValueItsEncodingsAndItsPartsAreRedacted) {
  const std::string secret = "s3cr3t/t0ken+value=4242";
  SecretRedactor r;
  r.Add("tok", secret);
  r.Add("empty", "");  // ignored
  const auto base64 = [](const std::string& s) {
    static const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    for (size_t i = 0; i < s.size(); i += 3) {
      unsigned v = static_cast<unsigned char>(s[i]) << 16;
      if (i + 1 < s.size()) v |= static_cast<unsigned char>(s[i + 1]) << 8;
      if (i + 2 < s.size()) v |= static_cast<unsigned char>(s[i + 2]);
      out += a[v >> 18];
      out += a[(v >> 12) & 63];
      out += i + 1 < s.size() ? a[(v >> 6) & 63] : '=';
      out += i + 2 < s.size() ? a[v & 63] : '=';
    }
    return out;
  };
  const std::string url_safe = [&] {
    std::string b = base64("x" + secret);
    for (char& c : b) c = c == '+' ? '-' : c == '/' ? '_' : c;
    return b;
  }();
  const std::vector<std::string> echoes = {
      secret,
      base64(secret),                                  // aligned
      base64("Basic " + secret),                       // two bytes in: alignment 0 again
      base64("user:" + secret),                        // five bytes in: alignment 2
      base64("ab:" + secret),                          // three bytes in
      url_safe,                                        // one byte in, URL-safe
      "7333637233742f74306b656e2b76616c75653d34323432",  // hex (lower)
      "7333637233742F74306B656E2B76616C75653D34323432",  // hex (upper)
      "s3cr3t%2Ft0ken%2Bvalue%3D4242",                 // percent-encoded reserved bytes
      "%73%33%63%72%33%74%2f%74%30%6b%65%6e%2b%76%61%6c%75%65%3d%34%32%34%32",  // every byte, lowercase
      "s3cr3t\\/t0ken+value=4242",                     // a JSON writer that escapes '/'
      secret.substr(0, 12), secret.substr(12),         // halves
      secret.substr(5, 8),                             // eight bytes from the middle
  };
  for (const std::string& e : echoes) {
    const std::string out = r.Redact("before " + e + " after");
    EXPECT_EQ(out.find(e), std::string::npos) << e << " -> " << out;
    EXPECT_TRUE(Contains(out, "[secret tok]")) << e << " -> " << out;
    EXPECT_TRUE(out.rfind("before ", 0) == 0 && out.ends_with(" after")) << "only the echo is replaced: " << out;
  }
  // Seven bytes of it, or a text that differs from it in every eighth byte, are no echo.
  for (const std::string& clean : {secret.substr(0, 7), std::string("s3cr3t/X0ken+vXlue=4X42"), std::string("nothing")})
    EXPECT_EQ(r.Redact("a " + clean + " b"), "a " + clean + " b") << clean;
  // Two echoes side by side are one mark; two secrets, each its own mark.
  EXPECT_EQ(r.Redact(secret + secret), "[secret tok]");
  SecretRedactor two;
  two.Add("a", "first-secret-value");
  two.Add("b", "second-secret-value");
  EXPECT_EQ(two.Redact("x first-secret-value y second-secret-value z"), "x [secret a] y [secret b] z");
  // A secret shorter than a fragment is redacted whole only.
  SecretRedactor shorter;
  shorter.Add("pin", "4711");
  EXPECT_EQ(shorter.Redact("pin 4711, not 47"), "pin [secret pin], not 47");
  EXPECT_TRUE(SecretRedactor().empty());
  EXPECT_EQ(SecretRedactor().Redact("as it is"), "as it is");
}

}  // namespace
}  // namespace basal::http
