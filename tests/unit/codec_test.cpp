// The worker's byte codecs (src/worker/codec.h): base64 strict and forgiving, UTF-8 validation and
// the WHATWG decoder's replacement of ill-formed sequences.
#include "worker/codec.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>

namespace basal::worker {
namespace {

TEST(Base64, EncodesTheRfc4648Vectors) {
  EXPECT_EQ(Base64Encode(""), "");
  EXPECT_EQ(Base64Encode("f"), "Zg==");
  EXPECT_EQ(Base64Encode("fo"), "Zm8=");
  EXPECT_EQ(Base64Encode("foo"), "Zm9v");
  EXPECT_EQ(Base64Encode("foob"), "Zm9vYg==");
  EXPECT_EQ(Base64Encode("fooba"), "Zm9vYmE=");
  EXPECT_EQ(Base64Encode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(Base64Encode(std::string("\xff\x00\xfe", 3)), "/wD+");
}

TEST(Base64, DecodesStrictAndForgiving) {
  struct Case {
    std::string in;
    std::optional<std::string> strict, forgiving;
  };
  const Case cases[] = {
      {"", "", ""},
      {"Zg==", "f", "f"},
      {"Zg", std::nullopt, "f"},              // padding optional only when forgiving
      {"Zg=", std::nullopt, std::nullopt},    // wrong padding
      {"Zm9v YmFy", std::nullopt, "foobar"},  // whitespace only when forgiving
      {" Zm9v\tYmFy\n", std::nullopt, "foobar"},
      {"Z", std::nullopt, std::nullopt},      // 1 mod 4
      {"Zm9v!", std::nullopt, std::nullopt},  // not in the alphabet
      {"Zm=v", std::nullopt, std::nullopt},   // '=' inside
      {"Zh==", std::nullopt, "f"},            // non-zero leftover bits: not canonical
      {"/wD+", std::string("\xff\x00\xfe", 3), std::string("\xff\x00\xfe", 3)},
      {"-_", std::nullopt, std::nullopt},     // the URL-safe alphabet is not base64
  };
  for (const Case& c : cases) {
    EXPECT_EQ(Base64Decode(c.in, false), c.strict) << "strict: " << c.in;
    EXPECT_EQ(Base64Decode(c.in, true), c.forgiving) << "forgiving: " << c.in;
  }
}

TEST(Base64, RoundTripsEveryByte) {
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  for (size_t n = 0; n <= all.size(); n += 37) {
    const std::string part = all.substr(0, n);
    EXPECT_EQ(Base64Decode(Base64Encode(part), false), part);
  }
}

TEST(Utf8, ValidatesAndReplacesMaximalSubparts) {
  struct Case {
    std::string in;
    bool valid;
    std::string sanitized;
  };
  const std::string r = "\xEF\xBF\xBD";
  const Case cases[] = {
      {"plain", true, "plain"},
      {"\xC3\xA9", true, "\xC3\xA9"},                        // é
      {"\xF0\x9F\x98\x80", true, "\xF0\x9F\x98\x80"},        // U+1F600
      {"\xC0\xAF", false, r + r},                            // overlong: each byte alone
      {"\xED\xA0\x80", false, r + r + r},                    // a surrogate: each byte alone
      {"\xF4\x90\x80\x80", false, r + r + r + r},            // above U+10FFFF
      {"\xE2\x82", false, r},                                // truncated: one maximal subpart
      {"a\xE2\x82z", false, "a" + r + "z"},
      {"\xF0\x9F\x98", false, r},
      {"\x80", false, r},                                    // a lone continuation byte
      {"\xFF\xFE", false, r + r},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(IsValidUtf8(c.in), c.valid) << testing::PrintToString(c.in);
    EXPECT_EQ(Utf8Sanitize(c.in), c.sanitized) << testing::PrintToString(c.in);
  }
}

}  // namespace
}  // namespace basal::worker
