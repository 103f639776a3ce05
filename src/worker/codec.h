// Byte codecs shared by the worker's web globals (atob/btoa, TextEncoder/TextDecoder, fetch bodies).
// Pure functions over bytes: no QuickJS, no allocation beyond the returned string.
//
//   std::string b64 = basal::worker::Base64Encode("hi");          // "aGk="
//   auto raw = basal::worker::Base64Decode("aGk", /*forgiving=*/true);  // "hi"
//   std::string text = basal::worker::Utf8Sanitize(bytes);      // invalid sequences -> U+FFFD
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace basal::worker {

// Standard alphabet (RFC 4648 section 4), padded.
std::string Base64Encode(std::string_view bytes);

// forgiving = false: strict RFC 4648 (padded, standard alphabet, no whitespace).
// forgiving = true: the HTML "forgiving-base64 decode": ASCII whitespace removed, padding optional
// but, when present, correct; a length of 1 mod 4 and any other character fail.
// nullopt: not valid base64.
std::optional<std::string> Base64Decode(std::string_view text, bool forgiving);

// Whether `bytes` is well-formed UTF-8 (no overlongs, no surrogates, at most U+10FFFF).
bool IsValidUtf8(std::string_view bytes);

// `bytes` with every ill-formed sequence replaced by U+FFFD, one per maximal subpart (the WHATWG
// Encoding standard's UTF-8 decoder, which TextDecoder and Response.text() follow).
std::string Utf8Sanitize(std::string_view bytes);

}  // namespace basal::worker
