// Webhook signatures and API tokens (signature.h), through OpenSSL's libcrypto.
#include "serve/signature.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>
#include <sys/random.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <vector>

#include <nlohmann/json.hpp>

namespace basal::serve {
namespace {

using Digest = std::array<unsigned char, 32>;

constexpr char kHexDigits[] = "0123456789abcdef";

std::string Hex(const Digest& bytes) {
  std::string out(bytes.size() * 2, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) {
    out[2 * i] = kHexDigits[bytes[i] >> 4];
    out[2 * i + 1] = kHexDigits[bytes[i] & 0xf];
  }
  return out;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// 64 hex digits (either case) to 32 bytes; nullopt for anything else.
std::optional<Digest> DecodeHex64(std::string_view hex) {
  if (hex.size() != 64) return std::nullopt;
  Digest out{};
  for (size_t i = 0; i < out.size(); ++i) {
    const int hi = HexValue(hex[2 * i]);
    const int lo = HexValue(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[i] = static_cast<unsigned char>(hi << 4 | lo);
  }
  return out;
}

// libcrypto's HMAC implementation, fetched once: fetching looks the algorithm up in the provider
// tables under a lock, which each delivery need not pay. Never freed (one object for the process).
EVP_MAC* HmacAlgorithm() {
  static EVP_MAC* const mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  return mac;
}

// HMAC-SHA256 over the concatenation of `parts`, so a signed message ("<timestamp>.<body>") is
// never copied to be hashed. nullopt only when libcrypto fails (out of memory).
std::optional<Digest> HmacSha256(std::string_view key, std::initializer_list<std::string_view> parts) {
  EVP_MAC* mac = HmacAlgorithm();
  if (mac == nullptr) return std::nullopt;
  EVP_MAC_CTX* ctx = EVP_MAC_CTX_new(mac);
  if (ctx == nullptr) return std::nullopt;
  char digest_name[] = "SHA256";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest_name, 0),
                               OSSL_PARAM_construct_end()};
  // An empty key is a valid HMAC key, but libcrypto wants a non-null pointer for it.
  static const unsigned char kNoKey = 0;
  const auto* key_bytes = key.empty() ? &kNoKey : reinterpret_cast<const unsigned char*>(key.data());
  bool ok = EVP_MAC_init(ctx, key_bytes, key.size(), params) == 1;
  for (std::string_view part : parts) {
    if (!ok) break;
    if (!part.empty()) ok = EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(part.data()), part.size()) == 1;
  }
  Digest out{};
  size_t length = 0;
  ok = ok && EVP_MAC_final(ctx, out.data(), &length, out.size()) == 1 && length == out.size();
  EVP_MAC_CTX_free(ctx);
  if (!ok) return std::nullopt;
  return out;
}

bool IsAsciiDigit(char c) { return c >= '0' && c <= '9'; }

// The X-Basal-Timestamp value: 1 to 15 decimal digits, nothing else (15 digits cannot overflow).
std::optional<int64_t> ParseTimestamp(std::string_view text) {
  if (text.empty() || text.size() > kMaxTimestampDigits) return std::nullopt;
  int64_t value = 0;
  for (char c : text) {
    if (!IsAsciiDigit(c)) return std::nullopt;
    value = value * 10 + (c - '0');
  }
  return value;
}

std::string_view TrimSpaces(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

bool StartsWithIgnoringCase(std::string_view text, std::string_view prefix) {
  if (text.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    char c = text[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != prefix[i]) return false;
  }
  return true;
}

SignatureVerdict Refuse(std::string reason, std::string message) {
  return SignatureVerdict{false, std::move(reason), std::move(message)};
}

constexpr const char* kHowToSign =
    "sign \"<X-Basal-Timestamp>.<raw body>\" with HMAC-SHA256 under the trigger's secret and send "
    "X-Basal-Signature: sha256=<64 hex digits>";

}  // namespace

std::string HmacSha256Hex(std::string_view key, std::string_view message) {
  std::optional<Digest> mac = HmacSha256(key, {message});
  return mac ? Hex(*mac) : std::string();
}

SignatureVerdict VerifyWebhookSignature(std::string_view secret, std::string_view timestamp_header,
                                        std::string_view signature_header, std::string_view body,
                                        int64_t now_unix_s, int64_t window_s) {
  // Fail closed: with an empty key anyone can compute the signature.
  if (secret.empty()) {
    return Refuse("no_secret",
                  "this trigger has no secret, so no delivery can be verified: the operator must give the "
                  "trigger a secret and share it with the sender");
  }
  if (timestamp_header.empty()) {
    return Refuse("missing_timestamp",
                  std::string("the request has no X-Basal-Timestamp header: send the time of sending in Unix "
                              "seconds (decimal) and ") + kHowToSign);
  }
  const std::optional<int64_t> timestamp = ParseTimestamp(timestamp_header);
  if (!timestamp) {
    return Refuse("bad_timestamp",
                  "X-Basal-Timestamp (" + std::to_string(timestamp_header.size()) +
                      " bytes) is not a Unix time in seconds: send 1 to 15 decimal digits, no sign, space, "
                      "fraction or exponent (e.g. the output of `date +%s`)");
  }
  if (signature_header.empty()) {
    return Refuse("missing_signature", std::string("the request has no X-Basal-Signature header: ") + kHowToSign);
  }
  if (signature_header.size() > kMaxSignatureHeaderBytes) {
    return Refuse("malformed_signature",
                  "X-Basal-Signature is " + std::to_string(signature_header.size()) + " bytes, more than the " +
                      std::to_string(kMaxSignatureHeaderBytes) + " accepted: send at most " +
                      std::to_string(kMaxSignatureValues) + " comma-separated sha256=<64 hex digits> values");
  }
  std::vector<Digest> candidates;
  size_t index = 0;
  for (std::string_view rest = signature_header;;) {
    const size_t comma = rest.find(',');
    const std::string_view value = TrimSpaces(rest.substr(0, comma));
    ++index;
    std::optional<Digest> decoded;
    if (StartsWithIgnoringCase(value, "sha256=")) decoded = DecodeHex64(value.substr(7));
    if (!decoded) {
      return Refuse("malformed_signature",
                    "X-Basal-Signature value " + std::to_string(index) +
                        " is not sha256=<64 hex digits>: send one or more comma-separated values, each the "
                        "HMAC-SHA256 of \"<X-Basal-Timestamp>.<raw body>\" under a secret of the trigger");
    }
    if (candidates.size() == kMaxSignatureValues) {
      return Refuse("malformed_signature", "X-Basal-Signature has more than " + std::to_string(kMaxSignatureValues) +
                                               " values: send one per secret in use (two while rotating)");
    }
    candidates.push_back(*decoded);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  // The difference in uint64 arithmetic: the true difference of a 15-digit timestamp and any
  // int64 fits in 64 bits, where subtracting as int64 could overflow.
  const bool future = *timestamp > now_unix_s;
  const uint64_t skew = future ? static_cast<uint64_t>(*timestamp) - static_cast<uint64_t>(now_unix_s)
                               : static_cast<uint64_t>(now_unix_s) - static_cast<uint64_t>(*timestamp);
  const uint64_t window = window_s < 0 ? 0 : static_cast<uint64_t>(window_s);
  if (skew > window) {
    return Refuse("stale_timestamp",
                  "X-Basal-Timestamp is " + std::to_string(skew) + " s " + (future ? "ahead of" : "behind") +
                      " this server's clock, outside the accepted " + std::to_string(window) +
                      " s: sign each delivery when sending it, with the current time (and check that the "
                      "sender's clock is synchronised)");
  }
  const std::optional<Digest> expected = HmacSha256(secret, {timestamp_header, ".", body});
  if (!expected) {
    return Refuse("bad_signature", "the server could not compute the signature (libcrypto failed): retry later");
  }
  // Every candidate is compared, each in constant time over its 32 bytes.
  bool match = false;
  for (const Digest& candidate : candidates) {
    match |= CRYPTO_memcmp(candidate.data(), expected->data(), expected->size()) == 0;
  }
  if (!match) {
    return Refuse("bad_signature",
                  std::string("X-Basal-Signature does not match this body and timestamp under the trigger's "
                              "secret: ") + kHowToSign + " (the exact bytes sent, and the trigger's current secret)");
  }
  return SignatureVerdict{true, "", ""};
}

// ---------------------------------------------------------------- the senders' schemes

const char* WebhookSchemeName(WebhookScheme scheme) {
  switch (scheme) {
    case WebhookScheme::kBasal: return "basal";
    case WebhookScheme::kGithub: return "github";
    case WebhookScheme::kStripe: return "stripe";
    case WebhookScheme::kSlack: return "slack";
  }
  return "basal";
}

std::optional<WebhookScheme> ParseWebhookScheme(std::string_view name) {
  for (WebhookScheme s : {WebhookScheme::kBasal, WebhookScheme::kGithub, WebhookScheme::kStripe, WebhookScheme::kSlack})
    if (name == WebhookSchemeName(s)) return s;
  return std::nullopt;
}

namespace {

std::string Sha256Of(std::string_view text) {
  Digest digest{};
  unsigned int size = 0;
  if (EVP_Digest(text.data(), text.size(), digest.data(), &size, EVP_sha256(), nullptr) != 1 || size != 32) return "";
  return Hex(digest);
}

// Whether `mac` equals any of `candidates`, each compared in constant time.
bool AnyMatches(const std::optional<Digest>& mac, const std::vector<Digest>& candidates) {
  if (!mac) return false;
  bool match = false;
  for (const Digest& c : candidates) match |= CRYPTO_memcmp(c.data(), mac->data(), mac->size()) == 0;
  return match;
}

// The skew of a signed time from the clock, refused past the window (as basal's scheme does).
std::optional<SignatureVerdict> OutsideWindow(int64_t signed_s, int64_t now_s, int64_t window_s, const char* header) {
  const bool future = signed_s > now_s;
  const uint64_t skew = future ? static_cast<uint64_t>(signed_s) - static_cast<uint64_t>(now_s)
                               : static_cast<uint64_t>(now_s) - static_cast<uint64_t>(signed_s);
  const uint64_t window = window_s < 0 ? 0 : static_cast<uint64_t>(window_s);
  if (skew <= window) return std::nullopt;
  return Refuse("stale_timestamp", std::string(header) + " is " + std::to_string(skew) + " s " +
                                       (future ? "ahead of" : "behind") + " this server's clock, outside the accepted " +
                                       std::to_string(window) +
                                       " s (the trigger's window): a replayed delivery, or a clock out of sync");
}

// A JSON body's top-level string member, or "" (not JSON, not an object, absent, not a string).
std::string TopLevelString(std::string_view body, const char* key) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (!j.is_object()) return "";
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return "";
  return it->get<std::string>();
}

// A sender's id for a delivery, when it is short printable ASCII (it becomes part of a run's key).
bool UsableId(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id)
    if (c <= ' ' || c > '~') return false;
  return true;
}

DeliveryVerdict Verified(std::string key, std::optional<int64_t> signed_at = std::nullopt) {
  DeliveryVerdict v;
  v.verdict = SignatureVerdict{true, "", ""};
  v.key = std::move(key);
  v.signed_at_s = signed_at;
  return v;
}

DeliveryVerdict Refused(SignatureVerdict verdict) {
  DeliveryVerdict v;
  v.verdict = std::move(verdict);
  return v;
}

DeliveryVerdict VerifyGithub(std::string_view secret, const DeliveryHeader& header, std::string_view body) {
  const auto sig = header("x-hub-signature-256");
  if (!sig || sig->empty())
    return Refused(Refuse("missing_signature",
                          "the request has no X-Hub-Signature-256 header: set the webhook's secret in GitHub (the "
                          "trigger's scheme is github)"));
  const std::string_view value = TrimSpaces(*sig);
  std::optional<Digest> decoded;
  if (value.size() <= kMaxSignatureHeaderBytes && StartsWithIgnoringCase(value, "sha256=")) decoded = DecodeHex64(value.substr(7));
  if (!decoded)
    return Refused(Refuse("malformed_signature", "X-Hub-Signature-256 is not sha256=<64 hex digits>"));
  const auto delivery = header("x-github-delivery");
  if (!delivery || !UsableId(TrimSpaces(*delivery)))
    return Refused(Refuse("missing_delivery_id",
                          "the request has no usable X-GitHub-Delivery header (1 to 128 printable characters): it "
                          "names the delivery, so that a redelivery gets the run it has"));
  if (!AnyMatches(HmacSha256(secret, {body}), {*decoded}))
    return Refused(Refuse("bad_signature",
                          "X-Hub-Signature-256 does not match this body under the trigger's secret: the secret in "
                          "GitHub's webhook settings must be the one stored for the trigger (basal secret set)"));
  return Verified("github:" + std::string(TrimSpaces(*delivery)));
}

DeliveryVerdict VerifyStripe(std::string_view secret, const DeliveryHeader& header, std::string_view body,
                             int64_t now_s, int64_t window_s) {
  const auto sig = header("stripe-signature");
  if (!sig || sig->empty())
    return Refused(Refuse("missing_signature", "the request has no Stripe-Signature header (the trigger's scheme is stripe)"));
  if (sig->size() > kMaxSignatureHeaderBytes)
    return Refused(Refuse("malformed_signature", "Stripe-Signature is longer than " +
                                                     std::to_string(kMaxSignatureHeaderBytes) + " bytes"));
  std::optional<int64_t> t;
  std::string_view t_text;
  std::vector<Digest> v1;
  for (std::string_view rest = *sig;;) {
    const size_t comma = rest.find(',');
    const std::string_view item = TrimSpaces(rest.substr(0, comma));
    const size_t eq = item.find('=');
    const std::string_view name = eq == std::string_view::npos ? item : item.substr(0, eq);
    const std::string_view value = eq == std::string_view::npos ? std::string_view() : item.substr(eq + 1);
    if (name == "t") {
      if (t) return Refused(Refuse("malformed_signature", "Stripe-Signature has t= twice"));
      t = ParseTimestamp(value);
      if (!t) return Refused(Refuse("bad_timestamp", "Stripe-Signature's t= is not a Unix time in seconds"));
      t_text = value;
    } else if (name == "v1") {
      auto d = DecodeHex64(value);
      if (!d) return Refused(Refuse("malformed_signature", "a v1= of Stripe-Signature is not 64 hex digits"));
      if (v1.size() == kMaxSignatureValues)
        return Refused(Refuse("malformed_signature", "Stripe-Signature has more than " +
                                                         std::to_string(kMaxSignatureValues) + " v1= values"));
      v1.push_back(*d);
    }  // v0 (a test scheme) and any other element are ignored, as Stripe says to
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  if (!t) return Refused(Refuse("missing_timestamp", "Stripe-Signature has no t= (the time Stripe signed it)"));
  if (v1.empty()) return Refused(Refuse("missing_signature", "Stripe-Signature has no v1= signature"));
  if (auto stale = OutsideWindow(*t, now_s, window_s, "Stripe-Signature's t=")) return Refused(*stale);
  if (!AnyMatches(HmacSha256(secret, {t_text, ".", body}), v1))
    return Refused(Refuse("bad_signature",
                          "no v1= of Stripe-Signature matches this body under the trigger's secret: store the "
                          "endpoint's signing secret (whsec_...) for the trigger (basal secret set)"));
  const std::string id = TopLevelString(body, "id");
  return Verified(UsableId(id) ? "stripe:" + id : "stripe-body:" + Sha256Of(body), *t);
}

DeliveryVerdict VerifySlack(std::string_view secret, const DeliveryHeader& header, std::string_view body,
                            int64_t now_s, int64_t window_s) {
  const auto ts = header("x-slack-request-timestamp");
  if (!ts || ts->empty())
    return Refused(Refuse("missing_timestamp", "the request has no X-Slack-Request-Timestamp header (the trigger's "
                                               "scheme is slack)"));
  const auto t = ParseTimestamp(TrimSpaces(*ts));
  if (!t) return Refused(Refuse("bad_timestamp", "X-Slack-Request-Timestamp is not a Unix time in seconds"));
  const auto sig = header("x-slack-signature");
  if (!sig || sig->empty()) return Refused(Refuse("missing_signature", "the request has no X-Slack-Signature header"));
  const std::string_view value = TrimSpaces(*sig);
  std::optional<Digest> decoded;
  if (value.size() <= kMaxSignatureHeaderBytes && StartsWithIgnoringCase(value, "v0=")) decoded = DecodeHex64(value.substr(3));
  if (!decoded) return Refused(Refuse("malformed_signature", "X-Slack-Signature is not v0=<64 hex digits>"));
  if (auto stale = OutsideWindow(*t, now_s, window_s, "X-Slack-Request-Timestamp")) return Refused(*stale);
  if (!AnyMatches(HmacSha256(secret, {"v0:", TrimSpaces(*ts), ":", body}), {*decoded}))
    return Refused(Refuse("bad_signature",
                          "X-Slack-Signature does not match this body under the trigger's secret: store the app's "
                          "Signing Secret for the trigger (basal secret set)"));
  DeliveryVerdict v;
  const std::string event_id = TopLevelString(body, "event_id");
  v = Verified(UsableId(event_id) ? "slack:" + event_id : "slack-body:" + Sha256Of(body), *t);
  if (TopLevelString(body, "type") == "url_verification") v.challenge = TopLevelString(body, "challenge");
  return v;
}

}  // namespace

DeliveryVerdict VerifyDelivery(WebhookScheme scheme, std::string_view secret, const DeliveryHeader& header,
                               std::string_view body, int64_t now_unix_s, int64_t window_s) {
  if (secret.empty()) return Refused(VerifyWebhookSignature(secret, "", "", body, now_unix_s, window_s));
  switch (scheme) {
    case WebhookScheme::kGithub: return VerifyGithub(secret, header, body);
    case WebhookScheme::kStripe: return VerifyStripe(secret, header, body, now_unix_s, window_s);
    case WebhookScheme::kSlack: return VerifySlack(secret, header, body, now_unix_s, window_s);
    case WebhookScheme::kBasal: break;
  }
  const auto ts = header("x-basal-timestamp");
  const auto sig = header("x-basal-signature");
  SignatureVerdict v = VerifyWebhookSignature(secret, ts ? *ts : "", sig ? *sig : "", body, now_unix_s, window_s);
  if (!v.ok) return Refused(std::move(v));
  // The key is the signed timestamp and body, which nobody without the secret can vary.
  return Verified("sha256:" + Sha256Of(std::string(*ts) + "." + std::string(body)), ParseTimestamp(*ts));
}

namespace {

constexpr char kBase64Url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

int Base64UrlValue(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '-') return 62;
  if (c == '_') return 63;
  return -1;
}

std::string Base64UrlNoPadding(const unsigned char* data, size_t size) {
  std::string out;
  out.reserve((size * 4 + 2) / 3);
  size_t i = 0;
  for (; i + 3 <= size; i += 3) {
    const uint32_t n = uint32_t{data[i]} << 16 | uint32_t{data[i + 1]} << 8 | data[i + 2];
    for (int shift : {18, 12, 6, 0}) out.push_back(kBase64Url[(n >> shift) & 63]);
  }
  if (size - i == 1) {
    const uint32_t n = uint32_t{data[i]} << 16;
    for (int shift : {18, 12}) out.push_back(kBase64Url[(n >> shift) & 63]);
  } else if (size - i == 2) {
    const uint32_t n = uint32_t{data[i]} << 16 | uint32_t{data[i + 1]} << 8;
    for (int shift : {18, 12, 6}) out.push_back(kBase64Url[(n >> shift) & 63]);
  }
  return out;
}

void FillRandom(unsigned char* out, size_t size) {
  if (RAND_bytes(out, static_cast<int>(size)) == 1) return;
  size_t filled = 0;
  while (filled < size) {
    const ssize_t n = ::getrandom(out + filled, size - filled, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::fprintf(stderr, "basal serve: neither RAND_bytes nor getrandom gave random bytes for an API token\n");
      std::abort();
    }
    filled += static_cast<size_t>(n);
  }
}

}  // namespace

std::string NewApiToken() {
  std::array<unsigned char, 32> bytes{};
  FillRandom(bytes.data(), bytes.size());
  std::string token(kApiTokenPrefix);
  token += Base64UrlNoPadding(bytes.data(), bytes.size());
  OPENSSL_cleanse(bytes.data(), bytes.size());
  return token;
}

std::string ApiTokenHash(std::string_view token) {
  Digest digest{};
  unsigned int size = 0;
  // EVP_Digest fails only when libcrypto cannot allocate its context; nothing can match then, and
  // an empty result is no valid stored hash.
  if (EVP_Digest(token.data(), token.size(), digest.data(), &size, EVP_sha256(), nullptr) != 1 || size != 32) {
    return std::string();
  }
  return "sha256:" + Hex(digest);
}

bool LooksLikeApiToken(std::string_view token) {
  if (token.size() != kApiTokenBytes || token.substr(0, kApiTokenPrefix.size()) != kApiTokenPrefix) return false;
  const std::string_view body = token.substr(kApiTokenPrefix.size());
  for (char c : body) {
    if (Base64UrlValue(c) < 0) return false;
  }
  // 43 characters carry 258 bits for 256: the last character's two low bits are always zero.
  return (Base64UrlValue(body.back()) & 3) == 0;
}

std::optional<std::string_view> BearerToken(std::string_view authorization_header) {
  if (!StartsWithIgnoringCase(authorization_header, "bearer ")) return std::nullopt;
  std::string_view rest = authorization_header.substr(6);
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  // RFC 6750: b64token = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="
  size_t i = 0;
  while (i < rest.size()) {
    const char c = rest[i];
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || IsAsciiDigit(c) || c == '-' || c == '.' ||
                    c == '_' || c == '~' || c == '+' || c == '/';
    if (!ok) break;
    ++i;
  }
  if (i == 0) return std::nullopt;
  while (i < rest.size() && rest[i] == '=') ++i;
  if (i != rest.size()) return std::nullopt;
  return rest;
}

}  // namespace basal::serve
