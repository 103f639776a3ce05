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
#include <functional>
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

// ## The senders' own schemes (docs/serve.md, "Webhooks that GitHub, Stripe and Slack send")
//
// A webhook trigger names its `scheme`: basal's own (above), or the one a provider signs with:
//
//   github  X-Hub-Signature-256: sha256=<hex> = HMAC-SHA256(secret, raw body). GitHub signs no time:
//           there is no window, and a captured delivery stays valid (GitHub's limit, not basal's).
//           The delivery is named by X-GitHub-Delivery (required, its GUID: a redelivery keeps it).
//   stripe  Stripe-Signature: t=<unix s>,v1=<hex>[,v1=<hex>...][,v0=...] with each v1 = HMAC-SHA256(
//           secret, "<t>.<raw body>"); several v1 (a secret being rolled) are accepted, other
//           schemes (v0) ignored; t within the window. The delivery is named by the event's "id"
//           (Stripe retries an event with a new t and the same id), else the body's SHA-256.
//   slack   X-Slack-Signature: v0=<hex> = HMAC-SHA256(secret, "v0:<X-Slack-Request-Timestamp>:<raw
//           body>"), the timestamp within the window (Slack says 5 minutes). The delivery is named
//           by the Events API's "event_id", else the body's SHA-256 (Slack retries with a new
//           timestamp and the same body). A verified `url_verification` is answered its challenge.
enum class WebhookScheme { kBasal, kGithub, kStripe, kSlack };
const char* WebhookSchemeName(WebhookScheme scheme);  // "basal", "github", "stripe", "slack"
std::optional<WebhookScheme> ParseWebhookScheme(std::string_view name);

// A delivery's header by its lower-case name; nullopt when absent.
using DeliveryHeader = std::function<std::optional<std::string_view>(std::string_view lower_name)>;

// The verdict on a delivery under its trigger's scheme: `ok` with what names it, or the refusal
// (the reasons of SignatureVerdict, and "missing_delivery_id" for a GitHub delivery without its id).
struct DeliveryVerdict {
  SignatureVerdict verdict;
  // Deliveries with the same key are one delivery sent again: one run. It is made only of what
  // the scheme signs, or of the sender's own id for the delivery: "sha256:<hex>" of basal's signed
  // timestamp and body, "github:<GUID>", "stripe:<event id>", "slack:<event_id>", or
  // "stripe-body:<hex>" / "slack-body:<hex>" (the body's SHA-256 when it names no id).
  std::string key;
  std::optional<int64_t> signed_at_s;  // the signed time (basal, stripe, slack)
  std::optional<std::string> challenge;  // slack: a url_verification's challenge, to answer
};
DeliveryVerdict VerifyDelivery(WebhookScheme scheme, std::string_view secret, const DeliveryHeader& header,
                               std::string_view body, int64_t now_unix_s, int64_t window_s);

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
