// Webhook signatures and API tokens (src/serve/signature.h): HMAC-SHA256 against RFC 4231's test
// vectors, the verdict on deliveries (a table: each way a delivery can be wrong, and each way it
// can be right), the tokens' shape, uniqueness and hash, and the bearer token of an Authorization
// header.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "serve/signature.h"

namespace basal::serve {
namespace {

using std::string_literals::operator""s;

// ---- HMAC-SHA256: RFC 4231, section 4 ----

struct HmacCase {
  const char* name;
  std::string key;
  std::string data;
  std::string mac_hex;
};

TEST(HmacSha256HexTest, Rfc4231TestVectors) {
  const std::vector<HmacCase> cases = {
      {"case 1", std::string(20, '\x0b'), "Hi There",
       "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
      {"case 2: a key shorter than the output", "Jefe", "what do ya want for nothing?",
       "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
      {"case 3: 50 bytes of 0xdd", std::string(20, '\xaa'), std::string(50, '\xdd'),
       "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
      {"case 4: key 0x01..0x19", "\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19",
       std::string(50, '\xcd'), "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
      {"case 6: a key longer than the block", std::string(131, '\xaa'),
       "Test Using Larger Than Block-Size Key - Hash Key First",
       "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
      {"case 7: key and data longer than the block", std::string(131, '\xaa'),
       "This is a test using a larger than block-size key and a larger than block-size data. The key needs to be "
       "hashed before being used by the HMAC algorithm.",
       "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
  };
  for (const HmacCase& c : cases) EXPECT_EQ(HmacSha256Hex(c.key, c.data), c.mac_hex) << c.name;
}

TEST(HmacSha256HexTest, EmptyKeyAndMessageAreValidInputs) {
  // Python's hmac.new(b"", b"", hashlib.sha256).hexdigest()
  EXPECT_EQ(HmacSha256Hex("", ""), "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
}

TEST(HmacSha256HexTest, BytesAfterANulCount) {
  EXPECT_NE(HmacSha256Hex("k", "a\0b"s), HmacSha256Hex("k", "a"));
  EXPECT_NE(HmacSha256Hex("k\0x"s, "a"), HmacSha256Hex("k", "a"));
}

// ---- webhook deliveries ----

// One delivery, signed as the header's shell recipe signs it (the value below is the output of
// that recipe, computed outside basal).
constexpr const char* kSecret = "whsec_test";
constexpr const char* kTimestamp = "1733310000";
constexpr int64_t kNow = 1733310000;
constexpr int64_t kWindow = 300;
const std::string kBody = R"({"event":"push","n":1})";
const std::string kGoodHex = "c85c1d6f60363c55a5c459323b4d31b82f06e9725f8990f5a8c1c97a9fdd7294";
// The same delivery signed with a previous secret, "whsec_old".
const std::string kOldHex = "8a87ad6abe9717a6453a68a3d0bc1309ab502d0cd6e130068e61b19e6f66cfdf";

std::string Upper(std::string s) {
  for (char& c : s) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  return s;
}

TEST(VerifyWebhookSignatureTest, TheRecipeInTheHeaderSignsAsTheDaemonVerifies) {
  EXPECT_EQ(HmacSha256Hex(kSecret, std::string(kTimestamp) + "." + kBody), kGoodHex);
}

struct DeliveryCase {
  const char* name;
  std::string secret;
  std::string timestamp;
  std::string signature;
  std::string body;
  int64_t now;
  std::string reason;  // "" when the delivery must be accepted
};

TEST(VerifyWebhookSignatureTest, VerdictTable) {
  const std::string good = "sha256=" + kGoodHex;
  std::string one_byte_changed = kBody;
  one_byte_changed[one_byte_changed.size() - 2] = '2';
  std::string flipped_hex = kGoodHex;
  flipped_hex[63] = flipped_hex[63] == '0' ? '1' : '0';
  // A signature valid for this body at another time (the timestamp is part of what is signed).
  const std::string signed_at_other_time =
      "sha256=" + HmacSha256Hex(kSecret, std::string("1733310001.") + kBody);

  const std::vector<DeliveryCase> cases = {
      {"good", kSecret, kTimestamp, good, kBody, kNow, ""},
      {"good, uppercase hex", kSecret, kTimestamp, "sha256=" + Upper(kGoodHex), kBody, kNow, ""},
      {"good, uppercase scheme", kSecret, kTimestamp, "SHA256=" + kGoodHex, kBody, kNow, ""},
      {"good, at the window's past edge", kSecret, kTimestamp, good, kBody, kNow + kWindow, ""},
      {"good, at the window's future edge", kSecret, kTimestamp, good, kBody, kNow - kWindow, ""},
      {"rotation: old then new", kSecret, kTimestamp, "sha256=" + kOldHex + ",sha256=" + kGoodHex, kBody, kNow, ""},
      {"rotation: new then old, spaces", kSecret, kTimestamp, "sha256=" + kGoodHex + " , sha256=" + kOldHex, kBody,
       kNow, ""},
      {"rotation: the old secret is the trigger's", "whsec_old", kTimestamp,
       "sha256=" + kGoodHex + ",sha256=" + kOldHex, kBody, kNow, ""},
      {"rotation: no value valid", "whsec_other", kTimestamp, "sha256=" + kGoodHex + ",sha256=" + kOldHex, kBody,
       kNow, "bad_signature"},
      {"wrong secret", "whsec_wrong", kTimestamp, good, kBody, kNow, "bad_signature"},
      {"secret differs by case", "WHSEC_TEST", kTimestamp, good, kBody, kNow, "bad_signature"},
      {"body changed by one byte", kSecret, kTimestamp, good, one_byte_changed, kNow, "bad_signature"},
      {"body with a byte appended", kSecret, kTimestamp, good, kBody + "\n", kNow, "bad_signature"},
      {"empty body", kSecret, kTimestamp, good, "", kNow, "bad_signature"},
      {"signature with one digit changed", kSecret, kTimestamp, "sha256=" + flipped_hex, kBody, kNow,
       "bad_signature"},
      {"signature for another timestamp", kSecret, kTimestamp, signed_at_other_time, kBody, kNow, "bad_signature"},
      {"timestamp with a leading zero signs differently", kSecret, "01733310000", good, kBody, kNow, "bad_signature"},
      {"no secret on the trigger", "", kTimestamp, good, kBody, kNow, "no_secret"},
      {"timestamp too old", kSecret, kTimestamp, good, kBody, kNow + kWindow + 1, "stale_timestamp"},
      {"timestamp too far ahead", kSecret, kTimestamp, good, kBody, kNow - kWindow - 1, "stale_timestamp"},
      {"timestamp 0", kSecret, "0", good, kBody, kNow, "stale_timestamp"},
      {"now far before the epoch", kSecret, kTimestamp, good, kBody, INT64_MIN, "stale_timestamp"},
      {"now far after", kSecret, kTimestamp, good, kBody, INT64_MAX, "stale_timestamp"},
      {"missing timestamp", kSecret, "", good, kBody, kNow, "missing_timestamp"},
      {"timestamp with a sign", kSecret, "+1733310000", good, kBody, kNow, "bad_timestamp"},
      {"negative timestamp", kSecret, "-1733310000", good, kBody, kNow, "bad_timestamp"},
      {"timestamp with a space", kSecret, "1733310000 ", good, kBody, kNow, "bad_timestamp"},
      {"timestamp with a leading space", kSecret, " 1733310000", good, kBody, kNow, "bad_timestamp"},
      {"timestamp in milliseconds with a point", kSecret, "1733310000.123", good, kBody, kNow, "bad_timestamp"},
      {"timestamp in hex", kSecret, "0x6751d0b0", good, kBody, kNow, "bad_timestamp"},
      {"timestamp with an exponent", kSecret, "1.7e9", good, kBody, kNow, "bad_timestamp"},
      {"timestamp of 16 digits", kSecret, "1733310000000000", good, kBody, kNow, "bad_timestamp"},
      {"timestamp past int64", kSecret, "99999999999999999999999", good, kBody, kNow, "bad_timestamp"},
      {"timestamp with a NUL", kSecret, "1733310000\0"s, good, kBody, kNow, "bad_timestamp"},
      {"timestamp in non-ASCII digits", kSecret, "\xd9\xa1\xd9\xa7", good, kBody, kNow, "bad_timestamp"},
      {"missing signature", kSecret, kTimestamp, "", kBody, kNow, "missing_signature"},
      {"signature without scheme", kSecret, kTimestamp, kGoodHex, kBody, kNow, "malformed_signature"},
      {"signature with another scheme", kSecret, kTimestamp, "sha512=" + kGoodHex, kBody, kNow,
       "malformed_signature"},
      {"signature of 63 digits", kSecret, kTimestamp, good.substr(0, good.size() - 1), kBody, kNow,
       "malformed_signature"},
      {"signature of 65 digits", kSecret, kTimestamp, good + "0", kBody, kNow, "malformed_signature"},
      {"signature with a non-hex digit", kSecret, kTimestamp, "sha256=" + kGoodHex.substr(0, 63) + "g", kBody, kNow,
       "malformed_signature"},
      {"scheme only", kSecret, kTimestamp, "sha256=", kBody, kNow, "malformed_signature"},
      {"trailing comma", kSecret, kTimestamp, good + ",", kBody, kNow, "malformed_signature"},
      {"a good value beside a malformed one", kSecret, kTimestamp, good + ",sha256=zz", kBody, kNow,
       "malformed_signature"},
      {"nine values", kSecret, kTimestamp, [&] {
         std::string s = good;
         for (int i = 0; i < 8; ++i) s += ",sha256=" + kOldHex;
         return s;
       }(), kBody, kNow, "malformed_signature"},
      {"overlong header", kSecret, kTimestamp, good + "," + std::string(100000, 'a'), kBody, kNow,
       "malformed_signature"},
      {"a header too long to read, even if it begins well", kSecret, kTimestamp,
       good + std::string(kMaxSignatureHeaderBytes, ' '), kBody, kNow, "malformed_signature"},
  };
  for (const DeliveryCase& c : cases) {
    const SignatureVerdict v = VerifyWebhookSignature(c.secret, c.timestamp, c.signature, c.body, c.now, kWindow);
    EXPECT_EQ(v.ok, c.reason.empty()) << c.name << ": " << v.reason << " " << v.message;
    EXPECT_EQ(v.reason, c.reason) << c.name << ": " << v.message;
    EXPECT_EQ(v.message.empty(), c.reason.empty()) << c.name;
  }
}

TEST(VerifyWebhookSignatureTest, EightValuesAreAccepted) {
  std::string header;
  for (int i = 0; i < 7; ++i) header += "sha256=" + kOldHex + ",";
  header += "sha256=" + kGoodHex;
  EXPECT_TRUE(VerifyWebhookSignature(kSecret, kTimestamp, header, kBody, kNow, kWindow).ok);
}

TEST(VerifyWebhookSignatureTest, ANegativeWindowAcceptsOnlyTheSameSecond) {
  const std::string good = "sha256=" + kGoodHex;
  EXPECT_TRUE(VerifyWebhookSignature(kSecret, kTimestamp, good, kBody, kNow, -5).ok);
  EXPECT_EQ(VerifyWebhookSignature(kSecret, kTimestamp, good, kBody, kNow + 1, -5).reason, "stale_timestamp");
}

TEST(VerifyWebhookSignatureTest, MessagesNameTheProblemAndTheFixWithoutEchoingHeaders) {
  const std::string hostile = "\x1b[31m<script>";
  const SignatureVerdict stale =
      VerifyWebhookSignature(kSecret, kTimestamp, "sha256=" + kGoodHex, kBody, kNow + 1000, kWindow);
  EXPECT_NE(stale.message.find("1000 s behind"), std::string::npos) << stale.message;
  EXPECT_NE(stale.message.find("300 s"), std::string::npos) << stale.message;
  const SignatureVerdict ahead =
      VerifyWebhookSignature(kSecret, kTimestamp, "sha256=" + kGoodHex, kBody, kNow - 1000, kWindow);
  EXPECT_NE(ahead.message.find("1000 s ahead"), std::string::npos) << ahead.message;
  const SignatureVerdict bad_ts = VerifyWebhookSignature(kSecret, hostile, "sha256=" + kGoodHex, kBody, kNow, kWindow);
  EXPECT_EQ(bad_ts.reason, "bad_timestamp");
  EXPECT_EQ(bad_ts.message.find(hostile), std::string::npos) << bad_ts.message;
  const SignatureVerdict malformed =
      VerifyWebhookSignature(kSecret, kTimestamp, "sha256=" + kGoodHex + "," + hostile, kBody, kNow, kWindow);
  EXPECT_EQ(malformed.reason, "malformed_signature");
  EXPECT_NE(malformed.message.find("value 2"), std::string::npos) << malformed.message;
  EXPECT_EQ(malformed.message.find(hostile), std::string::npos) << malformed.message;
  const SignatureVerdict bad = VerifyWebhookSignature("whsec_wrong", kTimestamp, "sha256=" + kGoodHex, kBody, kNow,
                                                      kWindow);
  EXPECT_NE(bad.message.find("HMAC-SHA256"), std::string::npos) << bad.message;
  EXPECT_EQ(bad.message.find(kGoodHex), std::string::npos) << bad.message;
}

// ---- API tokens ----

TEST(ApiTokenTest, NewTokensHaveTheDocumentedShape) {
  const std::string alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  for (int i = 0; i < 100; ++i) {
    const std::string token = NewApiToken();
    ASSERT_EQ(token.size(), 47u) << token;
    EXPECT_EQ(token.substr(0, 4), "bsl_") << token;
    EXPECT_EQ(token.find_first_not_of(alphabet, 4), std::string::npos) << token;
    EXPECT_TRUE(LooksLikeApiToken(token)) << token;
  }
}

TEST(ApiTokenTest, AThousandTokensAreAllDifferent) {
  std::set<std::string> seen;
  std::set<char> first_characters;
  for (int i = 0; i < 1000; ++i) {
    const std::string token = NewApiToken();
    EXPECT_TRUE(seen.insert(token).second) << "repeated: " << token;
    first_characters.insert(token[4]);
  }
  // Random bytes, not a counter: the first character of 1000 tokens takes many of its 64 values
  // (all 1000 the same by chance: probability 64^-999).
  EXPECT_GT(first_characters.size(), 1u);
}

TEST(ApiTokenTest, HashIsSha256InLowercaseHex) {
  // SHA-256("abc"), FIPS 180-2 appendix B.1.
  EXPECT_EQ(ApiTokenHash("abc"), "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // SHA-256("") and of a token-shaped string (Python's hashlib.sha256(...).hexdigest()).
  EXPECT_EQ(ApiTokenHash(""), "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(ApiTokenHash("bsl_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"),
            "sha256:7efe9651d04325938427751f1ccc35bbe2fed60226ff76a1d95f9d19b4f9d7d3");
  const std::string token = NewApiToken();
  EXPECT_EQ(ApiTokenHash(token), ApiTokenHash(token));
  EXPECT_NE(ApiTokenHash(token), ApiTokenHash(NewApiToken()));
}

TEST(ApiTokenTest, LooksLikeApiTokenTable) {
  const std::string body43(43, 'A');
  struct Case {
    std::string token;
    bool looks_like;
  };
  const std::vector<Case> cases = {
      {"bsl_" + body43, true},
      {"bsl_" + std::string(42, 'z') + "w", true},  // w = 48: low two bits zero
      {"bsl_" + std::string(42, '-') + "0", true},
      {"bsl_" + std::string(42, '_') + "E", true},
      {"bsl_" + std::string(42, 'A') + "B", false},  // B = 1: 32 bytes cannot end so
      {"bsl_" + std::string(42, 'A') + "_", false},
      {"bsl_" + std::string(42, 'A'), false},
      {"bsl_" + body43 + "A", false},
      {"BSL_" + body43, false},
      {"bsk_" + body43, false},
      {"bsl-" + body43, false},
      {"bsl_" + std::string(41, 'A') + "+A", false},  // base64, not base64url
      {"bsl_" + std::string(41, 'A') + "/A", false},
      {"bsl_" + std::string(41, 'A') + "=A", false},
      {"bsl_" + std::string(41, 'A') + " A", false},
      {"bsl_" + std::string(41, 'A') + "\0A"s, false},
      {"bsl_" + std::string(41, 'A') + "\xc3\x80", false},
      {"", false},
      {"bsl_", false},
  };
  for (const Case& c : cases) EXPECT_EQ(LooksLikeApiToken(c.token), c.looks_like) << c.token;
}

TEST(BearerTokenTest, Table) {
  struct Case {
    std::string header;
    std::optional<std::string> token;
  };
  const std::vector<Case> cases = {
      {"Bearer bsl_abc", "bsl_abc"},
      {"bearer bsl_abc", "bsl_abc"},
      {"BEARER bsl_abc", "bsl_abc"},
      {"bEaReR bsl_abc", "bsl_abc"},
      {"Bearer    bsl_abc", "bsl_abc"},
      {"Bearer a-b.c_d~e+f/g==", "a-b.c_d~e+f/g=="},
      {"Bearer abc=", "abc="},
      {"Bearer", std::nullopt},
      {"Bearer ", std::nullopt},
      {"Bearer   ", std::nullopt},
      {"Bearerbsl_abc", std::nullopt},
      {"Bearer\tbsl_abc", std::nullopt},
      {" Bearer bsl_abc", std::nullopt},
      {"Bearer bsl_abc ", std::nullopt},
      {"Bearer bsl abc", std::nullopt},
      {"Bearer =abc", std::nullopt},
      {"Bearer ab=c", std::nullopt},
      {"Bearer bsl_abc,", std::nullopt},
      {"Bearer bsl_abc\r\nX-Evil: 1", std::nullopt},
      {"Bearer bsl_\0abc"s, std::nullopt},
      {"Basic dXNlcjpwYXNz", std::nullopt},
      {"Token bsl_abc", std::nullopt},
      {"Bearers bsl_abc", std::nullopt},
      {"", std::nullopt},
  };
  for (const Case& c : cases) {
    const std::optional<std::string_view> got = BearerToken(c.header);
    ASSERT_EQ(got.has_value(), c.token.has_value()) << "[" << c.header << "]";
    if (got) {
      EXPECT_EQ(std::string(*got), *c.token) << "[" << c.header << "]";
    }
  }
}

TEST(BearerTokenTest, ANewTokenRoundTripsThroughTheHeader) {
  const std::string token = NewApiToken();
  const std::string header = "Bearer " + token;
  const std::optional<std::string_view> got = BearerToken(header);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, token);
  EXPECT_TRUE(LooksLikeApiToken(*got));
}

}  // namespace
}  // namespace basal::serve
