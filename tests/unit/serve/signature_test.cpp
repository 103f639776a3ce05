// Webhook signatures and API tokens (src/serve/signature.h): HMAC-SHA256 against RFC 4231's test
// vectors, the verdict on deliveries (a table: each way a delivery can be wrong, and each way it
// can be right), the tokens' shape, uniqueness and hash, and the bearer token of an Authorization
// header.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdint>
#include <map>
#include <optional>
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
constexpr int64_t kNowSeconds = 1733310000;
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
      {"good", kSecret, kTimestamp, good, kBody, kNowSeconds, ""},
      {"good, uppercase hex", kSecret, kTimestamp, "sha256=" + Upper(kGoodHex), kBody, kNowSeconds, ""},
      {"good, uppercase scheme", kSecret, kTimestamp, "SHA256=" + kGoodHex, kBody, kNowSeconds, ""},
      {"good, at the window's past edge", kSecret, kTimestamp, good, kBody, kNowSeconds + kWindow, ""},
      {"good, at the window's future edge", kSecret, kTimestamp, good, kBody, kNowSeconds - kWindow, ""},
      {"rotation: old then new", kSecret, kTimestamp, "sha256=" + kOldHex + ",sha256=" + kGoodHex, kBody, kNowSeconds, ""},
      {"rotation: new then old, spaces", kSecret, kTimestamp, "sha256=" + kGoodHex + " , sha256=" + kOldHex, kBody,
       kNowSeconds, ""},
      {"rotation: the old secret is the trigger's", "whsec_old", kTimestamp,
       "sha256=" + kGoodHex + ",sha256=" + kOldHex, kBody, kNowSeconds, ""},
      {"rotation: no value valid", "whsec_other", kTimestamp, "sha256=" + kGoodHex + ",sha256=" + kOldHex, kBody,
       kNowSeconds, "bad_signature"},
      {"wrong secret", "whsec_wrong", kTimestamp, good, kBody, kNowSeconds, "bad_signature"},
      {"secret differs by case", "WHSEC_TEST", kTimestamp, good, kBody, kNowSeconds, "bad_signature"},
      {"body changed by one byte", kSecret, kTimestamp, good, one_byte_changed, kNowSeconds, "bad_signature"},
      {"body with a byte appended", kSecret, kTimestamp, good, kBody + "\n", kNowSeconds, "bad_signature"},
      {"empty body", kSecret, kTimestamp, good, "", kNowSeconds, "bad_signature"},
      {"signature with one digit changed", kSecret, kTimestamp, "sha256=" + flipped_hex, kBody, kNowSeconds,
       "bad_signature"},
      {"signature for another timestamp", kSecret, kTimestamp, signed_at_other_time, kBody, kNowSeconds, "bad_signature"},
      {"timestamp with a leading zero signs differently", kSecret, "01733310000", good, kBody, kNowSeconds, "bad_signature"},
      {"no secret on the trigger", "", kTimestamp, good, kBody, kNowSeconds, "no_secret"},
      {"timestamp too old", kSecret, kTimestamp, good, kBody, kNowSeconds + kWindow + 1, "stale_timestamp"},
      {"timestamp too far ahead", kSecret, kTimestamp, good, kBody, kNowSeconds - kWindow - 1, "stale_timestamp"},
      {"timestamp 0", kSecret, "0", good, kBody, kNowSeconds, "stale_timestamp"},
      {"now far before the epoch", kSecret, kTimestamp, good, kBody, INT64_MIN, "stale_timestamp"},
      {"now far after", kSecret, kTimestamp, good, kBody, INT64_MAX, "stale_timestamp"},
      {"missing timestamp", kSecret, "", good, kBody, kNowSeconds, "missing_timestamp"},
      {"timestamp with a sign", kSecret, "+1733310000", good, kBody, kNowSeconds, "bad_timestamp"},
      {"negative timestamp", kSecret, "-1733310000", good, kBody, kNowSeconds, "bad_timestamp"},
      {"timestamp with a space", kSecret, "1733310000 ", good, kBody, kNowSeconds, "bad_timestamp"},
      {"timestamp with a leading space", kSecret, " 1733310000", good, kBody, kNowSeconds, "bad_timestamp"},
      {"timestamp in milliseconds with a point", kSecret, "1733310000.123", good, kBody, kNowSeconds, "bad_timestamp"},
      {"timestamp in hex", kSecret, "0x6751d0b0", good, kBody, kNowSeconds, "bad_timestamp"},
      {"timestamp with an exponent", kSecret, "1.7e9", good, kBody, kNowSeconds, "bad_timestamp"},
      {"timestamp of 16 digits", kSecret, "1733310000000000", good, kBody, kNowSeconds, "bad_timestamp"},
      {"timestamp past int64", kSecret, "99999999999999999999999", good, kBody, kNowSeconds, "bad_timestamp"},
      {"timestamp with a NUL", kSecret, "1733310000\0"s, good, kBody, kNowSeconds, "bad_timestamp"},
      {"timestamp in non-ASCII digits", kSecret, "\xd9\xa1\xd9\xa7", good, kBody, kNowSeconds, "bad_timestamp"},
      {"missing signature", kSecret, kTimestamp, "", kBody, kNowSeconds, "missing_signature"},
      {"signature without scheme", kSecret, kTimestamp, kGoodHex, kBody, kNowSeconds, "malformed_signature"},
      {"signature with another scheme", kSecret, kTimestamp, "sha512=" + kGoodHex, kBody, kNowSeconds,
       "malformed_signature"},
      {"signature of 63 digits", kSecret, kTimestamp, good.substr(0, good.size() - 1), kBody, kNowSeconds,
       "malformed_signature"},
      {"signature of 65 digits", kSecret, kTimestamp, good + "0", kBody, kNowSeconds, "malformed_signature"},
      {"signature with a non-hex digit", kSecret, kTimestamp, "sha256=" + kGoodHex.substr(0, 63) + "g", kBody, kNowSeconds,
       "malformed_signature"},
      {"scheme only", kSecret, kTimestamp, "sha256=", kBody, kNowSeconds, "malformed_signature"},
      {"trailing comma", kSecret, kTimestamp, good + ",", kBody, kNowSeconds, "malformed_signature"},
      {"a good value beside a malformed one", kSecret, kTimestamp, good + ",sha256=zz", kBody, kNowSeconds,
       "malformed_signature"},
      {"nine values", kSecret, kTimestamp, [&] {
         std::string s = good;
         for (int i = 0; i < 8; ++i) s += ",sha256=" + kOldHex;
         return s;
       }(), kBody, kNowSeconds, "malformed_signature"},
      {"overlong header", kSecret, kTimestamp, good + "," + std::string(100000, 'a'), kBody, kNowSeconds,
       "malformed_signature"},
      {"a header too long to read, even if it begins well", kSecret, kTimestamp,
       good + std::string(kMaxSignatureHeaderBytes, ' '), kBody, kNowSeconds, "malformed_signature"},
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
  EXPECT_TRUE(VerifyWebhookSignature(kSecret, kTimestamp, header, kBody, kNowSeconds, kWindow).ok);
}

TEST(VerifyWebhookSignatureTest, ANegativeWindowAcceptsOnlyTheSameSecond) {
  const std::string good = "sha256=" + kGoodHex;
  EXPECT_TRUE(VerifyWebhookSignature(kSecret, kTimestamp, good, kBody, kNowSeconds, -5).ok);
  EXPECT_EQ(VerifyWebhookSignature(kSecret, kTimestamp, good, kBody, kNowSeconds + 1, -5).reason, "stale_timestamp");
}

TEST(VerifyWebhookSignatureTest, MessagesNameTheProblemAndTheFixWithoutEchoingHeaders) {
  const std::string hostile = "\x1b[31m<script>";
  const SignatureVerdict stale =
      VerifyWebhookSignature(kSecret, kTimestamp, "sha256=" + kGoodHex, kBody, kNowSeconds + 1000, kWindow);
  EXPECT_NE(stale.message.find("1000 s behind"), std::string::npos) << stale.message;
  EXPECT_NE(stale.message.find("300 s"), std::string::npos) << stale.message;
  const SignatureVerdict ahead =
      VerifyWebhookSignature(kSecret, kTimestamp, "sha256=" + kGoodHex, kBody, kNowSeconds - 1000, kWindow);
  EXPECT_NE(ahead.message.find("1000 s ahead"), std::string::npos) << ahead.message;
  const SignatureVerdict bad_ts = VerifyWebhookSignature(kSecret, hostile, "sha256=" + kGoodHex, kBody, kNowSeconds, kWindow);
  EXPECT_EQ(bad_ts.reason, "bad_timestamp");
  EXPECT_EQ(bad_ts.message.find(hostile), std::string::npos) << bad_ts.message;
  const SignatureVerdict malformed =
      VerifyWebhookSignature(kSecret, kTimestamp, "sha256=" + kGoodHex + "," + hostile, kBody, kNowSeconds, kWindow);
  EXPECT_EQ(malformed.reason, "malformed_signature");
  EXPECT_NE(malformed.message.find("value 2"), std::string::npos) << malformed.message;
  EXPECT_EQ(malformed.message.find(hostile), std::string::npos) << malformed.message;
  const SignatureVerdict bad = VerifyWebhookSignature("whsec_wrong", kTimestamp, "sha256=" + kGoodHex, kBody, kNowSeconds,
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

// ---- the senders' schemes: github, stripe, slack ----

// Headers as a map (lower-case names), as the daemon hands them over.
DeliveryHeader Headers(std::map<std::string, std::string> h) {
  return [h = std::move(h)](std::string_view name) -> std::optional<std::string_view> {
    auto it = h.find(std::string(name));
    if (it == h.end()) return std::nullopt;
    return std::string_view(it->second);
  };
}

// GitHub's own test values, from "Validating webhook deliveries", section "Testing the webhook
// payload validation" (docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries;
// github/docs content/webhooks/using-webhooks/validating-webhook-deliveries.md).
constexpr const char* kGithubSecret = "It's a Secret to Everybody";
constexpr const char* kGithubBody = "Hello, World!";
constexpr const char* kGithubSignature = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";

TEST(WebhookSchemeTest, GithubAcceptsItsDocumentedExampleAndNamesTheDeliveryByItsGuid) {
  auto h = Headers({{"x-hub-signature-256", kGithubSignature},
                    {"x-github-delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958"},
                    {"x-github-event", "push"}});
  // GitHub signs no time: any clock will do.
  for (int64_t now : {int64_t{0}, int64_t{1'733'324'822}}) {
    DeliveryVerdict v = VerifyDelivery(WebhookScheme::kGithub, kGithubSecret, h, kGithubBody, now, 300);
    ASSERT_TRUE(v.verdict.ok) << v.verdict.message;
    EXPECT_EQ(v.key, "github:72d3162e-cc78-11e3-81ab-4c9367dc0958");
    EXPECT_FALSE(v.signed_at_s.has_value());
  }
  // Upper-case hex is the same signature.
  std::string upper = kGithubSignature;
  for (size_t i = 7; i < upper.size(); ++i) upper[i] = static_cast<char>(std::toupper(upper[i]));
  EXPECT_TRUE(VerifyDelivery(WebhookScheme::kGithub, kGithubSecret,
                             Headers({{"x-hub-signature-256", upper}, {"x-github-delivery", "d-1"}}), kGithubBody, 0, 0)
                  .verdict.ok);
}

TEST(WebhookSchemeTest, GithubRefusesWhatItsDocumentedExampleIsNot) {
  struct Case {
    const char* what;
    std::map<std::string, std::string> headers;
    std::string secret, body, reason;
  };
  const std::map<std::string, std::string> good = {{"x-hub-signature-256", kGithubSignature},
                                                   {"x-github-delivery", "d-1"}};
  auto without = [&](const char* name) {
    auto h = good;
    h.erase(name);
    return h;
  };
  auto with = [&](const char* name, std::string value) {
    auto h = good;
    h[name] = std::move(value);
    return h;
  };
  const std::vector<Case> cases = {
      {"a changed body", good, kGithubSecret, "Hello, World?", "bad_signature"},
      {"another secret", good, "It's a secret to everybody", kGithubBody, "bad_signature"},
      {"no signature", without("x-hub-signature-256"), kGithubSecret, kGithubBody, "missing_signature"},
      {"the SHA-1 header's form", with("x-hub-signature-256", "sha1=0123456789abcdef0123456789abcdef01234567"),
       kGithubSecret, kGithubBody, "malformed_signature"},
      {"no delivery id", without("x-github-delivery"), kGithubSecret, kGithubBody, "missing_delivery_id"},
      {"a delivery id with a space", with("x-github-delivery", "a b"), kGithubSecret, kGithubBody, "missing_delivery_id"},
      {"basal's headers instead", {{"x-basal-signature", kGithubSignature}, {"x-github-delivery", "d"}}, kGithubSecret,
       kGithubBody, "missing_signature"},
      {"no secret", good, "", kGithubBody, "no_secret"},
  };
  for (const Case& c : cases) {
    DeliveryVerdict v = VerifyDelivery(WebhookScheme::kGithub, c.secret, Headers(c.headers), c.body, 0, 300);
    EXPECT_FALSE(v.verdict.ok) << c.what;
    EXPECT_EQ(v.verdict.reason, c.reason) << c.what << ": " << v.verdict.message;
  }
}

// Slack's own example, from "Verifying requests from Slack"
// (docs.slack.dev/authentication/verifying-requests-from-slack, formerly
// api.slack.com/authentication/verifying-requests-from-slack): a slash command's form body.
constexpr const char* kSlackSecret = "8f742231b10e8888abcd99yyyzzz85a5";
constexpr const char* kSlackTimestamp = "1531420618";
constexpr const char* kSlackBody =
    "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name="
    "foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks."
    "slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121."
    "803a0bc887a14d10d2c447fce8b6703c";
constexpr const char* kSlackSignature = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";

TEST(WebhookSchemeTest, SlackAcceptsItsDocumentedExampleWithinFiveMinutesOfItsTimestamp) {
  auto h = Headers({{"x-slack-request-timestamp", kSlackTimestamp}, {"x-slack-signature", kSlackSignature}});
  const int64_t t = 1531420618;
  for (int64_t now : {t, t - 300, t + 300}) {
    DeliveryVerdict v = VerifyDelivery(WebhookScheme::kSlack, kSlackSecret, h, kSlackBody, now, 300);
    ASSERT_TRUE(v.verdict.ok) << now << ": " << v.verdict.message;
    EXPECT_EQ(v.signed_at_s, t);
    // A form body names no event: the delivery is its body (a retry sends the same body).
    EXPECT_EQ(v.key.rfind("slack-body:", 0), 0u) << v.key;
    EXPECT_FALSE(v.challenge.has_value());
  }
  for (int64_t now : {t - 301, t + 301}) {
    DeliveryVerdict v = VerifyDelivery(WebhookScheme::kSlack, kSlackSecret, h, kSlackBody, now, 300);
    EXPECT_EQ(v.verdict.reason, "stale_timestamp") << now;
  }
  EXPECT_EQ(VerifyDelivery(WebhookScheme::kSlack, kSlackSecret,
                           Headers({{"x-slack-request-timestamp", "1531420619"}, {"x-slack-signature", kSlackSignature}}),
                           kSlackBody, t, 300)
                .verdict.reason,
            "bad_signature");
  EXPECT_EQ(VerifyDelivery(WebhookScheme::kSlack, kSlackSecret, Headers({{"x-slack-signature", kSlackSignature}}),
                           kSlackBody, t, 300)
                .verdict.reason,
            "missing_timestamp");
  EXPECT_EQ(VerifyDelivery(WebhookScheme::kSlack, kSlackSecret,
                           Headers({{"x-slack-request-timestamp", kSlackTimestamp}, {"x-slack-signature", "v1=00"}}),
                           kSlackBody, t, 300)
                .verdict.reason,
            "malformed_signature");
}

// Slack publishes no signature for these bodies: each was computed with Python's hmac, e.g.
//   hmac.new(b"8f742231b10e8888abcd99yyyzzz85a5", b"v0:1531420618:" + body, hashlib.sha256).hexdigest()
TEST(WebhookSchemeTest, SlackNamesAnEventByItsIdAndAnswersAUrlVerificationsChallenge) {
  const std::string event = R"({"type":"event_callback","event_id":"Ev08MFMKH6","event":{"type":"app_mention"}})";
  const std::string event_sig = "v0=" + HmacSha256Hex(kSlackSecret, std::string("v0:1531420618:") + event);
  DeliveryVerdict v = VerifyDelivery(
      WebhookScheme::kSlack, kSlackSecret,
      Headers({{"x-slack-request-timestamp", kSlackTimestamp}, {"x-slack-signature", event_sig}}), event, 1531420618, 300);
  ASSERT_TRUE(v.verdict.ok) << v.verdict.message;
  EXPECT_EQ(v.key, "slack:Ev08MFMKH6");
  const std::string check = R"({"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"})";
  const std::string check_sig = "v0=" + HmacSha256Hex(kSlackSecret, std::string("v0:1531420618:") + check);
  v = VerifyDelivery(WebhookScheme::kSlack, kSlackSecret,
                     Headers({{"x-slack-request-timestamp", kSlackTimestamp}, {"x-slack-signature", check_sig}}), check,
                     1531420618, 300);
  ASSERT_TRUE(v.verdict.ok) << v.verdict.message;
  EXPECT_EQ(v.challenge, "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P");
  // Unsigned, a url_verification is refused like any delivery: no challenge is answered to a stranger.
  v = VerifyDelivery(WebhookScheme::kSlack, kSlackSecret, Headers({{"x-slack-request-timestamp", kSlackTimestamp}}),
                     check, 1531420618, 300);
  EXPECT_FALSE(v.verdict.ok);
  EXPECT_FALSE(v.challenge.has_value());
}

// Stripe documents the scheme but publishes no secret, body and signature to check against: these
// were computed with Python's hmac:
//   hmac.new(b"whsec_test_secret", b"1733324822." + body, hashlib.sha256).hexdigest()
constexpr const char* kStripeBody =
    R"({"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy","object":"event","type":"payment_intent.succeeded"})";
constexpr const char* kStripeV1 = "253a71a1fb6f49064fb210733c4f1ea860a3311b9d085c08341d645a2903b8e1";
constexpr const char* kStripeV1OldSecret = "1217fbafe5d7688a5c57662ff3eba3ba15bb6f50d19d5aebf5f62d49b2b52103";

TEST(WebhookSchemeTest, StripeAcceptsAnyV1WithinItsToleranceAndNamesTheEventById) {
  const int64_t t = 1733324822;
  const std::vector<std::string> good = {
      std::string("t=1733324822,v1=") + kStripeV1,
      // Rolling a secret: the old one's signature first, then the new one's, and a v0 to ignore.
      std::string("t=1733324822,v1=") + kStripeV1OldSecret + ",v1=" + kStripeV1 +
          ",v0=6ffbb59b2300aae63f272406069a9788598b792a944a07aba816edb039989a39",
      std::string(" t=1733324822 , v1=") + kStripeV1 + " ",
  };
  for (const std::string& header : good) {
    DeliveryVerdict v = VerifyDelivery(WebhookScheme::kStripe, "whsec_test_secret",
                                       Headers({{"stripe-signature", header}}), kStripeBody, t + 299, 300);
    ASSERT_TRUE(v.verdict.ok) << header << ": " << v.verdict.message;
    EXPECT_EQ(v.key, "stripe:evt_1NG8Du2eZvKYlo2CUI79vXWy");
    EXPECT_EQ(v.signed_at_s, t);
  }
  struct Case {
    std::string header;
    int64_t now;
    std::string reason;
  };
  const std::vector<Case> bad = {
      {std::string("t=1733324822,v1=") + kStripeV1, t + 301, "stale_timestamp"},
      {std::string("t=1733324822,v1=") + kStripeV1, t - 301, "stale_timestamp"},
      {std::string("t=1733324822,v1=") + kStripeV1OldSecret, t, "bad_signature"},
      {std::string("t=1733324823,v1=") + kStripeV1, t, "bad_signature"},
      {std::string("v1=") + kStripeV1, t, "missing_timestamp"},
      {"t=1733324822", t, "missing_signature"},
      {"t=1733324822,v0=6ffbb59b2300aae63f272406069a9788598b792a944a07aba816edb039989a39", t, "missing_signature"},
      {"t=soon,v1=00", t, "bad_timestamp"},
      {"t=1733324822,v1=abc", t, "malformed_signature"},
      {"t=1,t=2,v1=" + std::string(kStripeV1), t, "malformed_signature"},
      {"", t, "missing_signature"},
  };
  for (const Case& c : bad) {
    DeliveryVerdict v = VerifyDelivery(WebhookScheme::kStripe, "whsec_test_secret",
                                       Headers({{"stripe-signature", c.header}}), kStripeBody, c.now, 300);
    EXPECT_EQ(v.verdict.reason, c.reason) << c.header << ": " << v.verdict.message;
  }
  // A retry of the event (a new t, a new signature) has the same key; a body without an id is
  // named by its digest.
  const std::string later = "t=1733325000,v1=" + HmacSha256Hex("whsec_test_secret", std::string("1733325000.") + kStripeBody);
  EXPECT_EQ(VerifyDelivery(WebhookScheme::kStripe, "whsec_test_secret", Headers({{"stripe-signature", later}}),
                           kStripeBody, 1733325000, 300)
                .key,
            "stripe:evt_1NG8Du2eZvKYlo2CUI79vXWy");
  const std::string plain = "not json";
  const std::string plain_header = "t=1733324822,v1=" + HmacSha256Hex("whsec_test_secret", "1733324822." + plain);
  EXPECT_EQ(VerifyDelivery(WebhookScheme::kStripe, "whsec_test_secret", Headers({{"stripe-signature", plain_header}}),
                           plain, t, 300)
                .key.rfind("stripe-body:", 0),
            0u);
}

TEST(WebhookSchemeTest, BasalsSchemeKeepsItsKeyAndOnlyItsOwnHeadersCount) {
  const std::string body = R"({"n":1})";
  const std::string ts = "1733324822";
  const std::string sig = "sha256=" + HmacSha256Hex("s3cret", ts + "." + body);
  DeliveryVerdict v = VerifyDelivery(WebhookScheme::kBasal, "s3cret",
                                     Headers({{"x-basal-timestamp", ts}, {"x-basal-signature", sig}}), body,
                                     1733324822, 300);
  ASSERT_TRUE(v.verdict.ok) << v.verdict.message;
  EXPECT_EQ(v.key.rfind("sha256:", 0), 0u);
  EXPECT_EQ(v.signed_at_s, 1733324822);
  // A GitHub-signed delivery to a basal trigger is refused: the scheme is the trigger's, not the sender's choice.
  v = VerifyDelivery(WebhookScheme::kBasal, kGithubSecret,
                     Headers({{"x-hub-signature-256", kGithubSignature}, {"x-github-delivery", "d"}}), kGithubBody,
                     1733324822, 300);
  EXPECT_EQ(v.verdict.reason, "missing_timestamp");
  EXPECT_EQ(ParseWebhookScheme("github"), WebhookScheme::kGithub);
  EXPECT_EQ(ParseWebhookScheme("GitHub"), std::nullopt);
  EXPECT_STREQ(WebhookSchemeName(WebhookScheme::kSlack), "slack");
}

}  // namespace
}  // namespace basal::serve
