// Who may talk to `basal serve`: webhook signatures (a trigger's caller proves it holds the
// trigger's secret) and API tokens (an operator's client proves it holds a token whose hash the
// daemon keeps). Pure functions over OpenSSL's libcrypto; the daemon reads the headers and the
// clock, these decide.
//
// ## The webhook signature scheme (docs/ copy this section)
//
// The sender of a webhook signs each delivery with the trigger's secret and sends two headers:
//
//   X-Basal-Timestamp: 1733310000
//   X-Basal-Signature: sha256=5c0f...e1 (64 hex digits)
//
// - X-Basal-Timestamp is the time of sending in Unix seconds, decimal digits only (no sign, space,
//   fraction or exponent), at most 15 digits.
// - The signature is HMAC-SHA256 with the trigger's secret as key over the message
//   "<timestamp>.<body>": the X-Basal-Timestamp value exactly as sent, one '.', then the raw body
//   bytes exactly as sent (before any decoding). It is written as `sha256=` and 64 hex digits
//   (lowercase is canonical, uppercase is accepted).
// - Secret rotation: the header may carry several comma-separated values ("sha256=<a>,sha256=<b>",
//   optional spaces around the commas, at most 8 values); the delivery is accepted when any one of
//   them is valid. A sender that rotates signs with the old and the new secret until the trigger
//   holds the new one.
// - A delivery whose timestamp is more than the daemon's window (e.g. 300 s) before or after the
//   daemon's clock is refused, even with a valid signature: a captured delivery cannot be
//   replayed later, and a sender with a wrong clock learns so.
//
// In the shell, with SECRET and the body in body.json:
//
//   ts=$(date +%s)
//   sig=$( (printf '%s.' "$ts"; cat body.json) | openssl dgst -sha256 -hmac "$SECRET" -r | cut -d' ' -f1)
//   curl -H "X-Basal-Timestamp: $ts" -H "X-Basal-Signature: sha256=$sig" --data-binary @body.json URL
//
// ## API tokens
//
// A token is "bsl_" and 43 base64url characters (32 random bytes, no padding). The daemon shows a
// new token once and keeps only ApiTokenHash(token) ("sha256:" and 64 hex digits); a client sends
// "Authorization: Bearer bsl_...". Tokens are random, so a plain SHA-256 is enough: nothing to
// guess that a slow hash would protect.
//
//   std::optional<std::string_view> token = BearerToken(authorization_header);
//   if (!token || !LooksLikeApiToken(*token)) return Unauthorized();
//   if (!store.HasTokenHash(ApiTokenHash(*token))) return Unauthorized();
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace basal::serve {

// Bounds on what VerifyWebhookSignature reads: headers longer than these are refused as malformed
// before anything is parsed or hashed.
inline constexpr size_t kMaxTimestampDigits = 15;
inline constexpr size_t kMaxSignatureValues = 8;
inline constexpr size_t kMaxSignatureHeaderBytes = 1024;

// HMAC-SHA256(key, message) as 64 lowercase hex digits. Empty only if libcrypto fails (out of
// memory).
std::string HmacSha256Hex(std::string_view key, std::string_view message);

// The verdict on one delivery. `reason` is a stable word for logs, metrics and the HTTP answer;
// `message` says to the sender what was wrong and what to do, and never repeats the header values.
struct SignatureVerdict {
  bool ok = false;
  // "" when ok, else one of: "no_secret" (the trigger has no secret: refused, never accepted
  // unsigned), "missing_timestamp", "bad_timestamp", "missing_signature", "malformed_signature",
  // "stale_timestamp", "bad_signature". Checked in this order: the cheap checks of the headers'
  // shape, then the clock, and the HMAC last (a replayed old delivery costs no hashing).
  std::string reason;
  std::string message;
};

// Verifies one delivery against `secret` (the scheme above). An absent header is passed as "";
// the header values are as the HTTP parser gives them (surrounding whitespace already removed).
// `window_s` is how far (in seconds) the timestamp may be from `now_unix_s` in either direction;
// a negative window counts as 0. The signatures are compared in constant time.
SignatureVerdict VerifyWebhookSignature(std::string_view secret, std::string_view timestamp_header,
                                        std::string_view signature_header, std::string_view body,
                                        int64_t now_unix_s, int64_t window_s);

inline constexpr std::string_view kApiTokenPrefix = "bsl_";
inline constexpr size_t kApiTokenBytes = 4 + 43;

// A new API token: "bsl_" and 43 base64url characters of 32 bytes from RAND_bytes (getrandom(2) if
// libcrypto's generator fails). Aborts if neither gives random bytes: no token beats a weak one.
std::string NewApiToken();

// "sha256:" and the 64 lowercase hex digits of SHA-256(token): what the daemon stores and compares.
std::string ApiTokenHash(std::string_view token);

// True when `token` has the shape NewApiToken gives (prefix, length, base64url alphabet, and a last
// character that 32 bytes can end with): a cheap check before hashing and looking up.
bool LooksLikeApiToken(std::string_view token);

// The token of an Authorization header "Bearer <token>" (scheme case-insensitive, one space or
// more before the token, the token in RFC 6750's b64token alphabet); nullopt for anything else.
// The view points into `authorization_header`.
std::optional<std::string_view> BearerToken(std::string_view authorization_header);

}  // namespace basal::serve
