// What http.fetch does to a response before any of it reaches the flow or the journal: every echo
// of a secret the request carried is replaced by "[secret NAME]" (docs/http.md, "Secrets").
//
//   SecretRedactor r;
//   r.Add("api_token", value);            // each secret a request's rule put in a header
//   std::string safe = r.Redact(text);     // a body, a status text, a URL, a header name or value,
//                                          // an error message that quotes any of them
//
// An echo is the value itself, and the forms a server commonly writes it in: base64 (standard and
// URL-safe, with or without padding, at any of the three alignments inside a longer base64 text,
// as in a Basic credential), hex (either case), percent-encoding of every byte (either case) or of
// the bytes outside RFC 3986's unreserved set, and a JSON string's escapes. A part of the value is
// an echo too: any run of at least kMinSecretFragmentBytes bytes of it (so the halves of a value a
// flow asked for separately are redacted). What is not caught, and so not defended (docs/http.md,
// threat model): shorter pieces, other encodings and transformations a server applies at a flow's
// request. Pure; no I/O.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace basal::http {

// The shortest run of a secret's bytes redacted on its own. Shorter ones are too likely to occur by
// chance in any text (and a secret shorter than this is only redacted whole).
inline constexpr size_t kMinSecretFragmentBytes = 8;

class SecretRedactor {
 public:
  // A secret and its name (the name goes into the mark). An empty value is ignored.
  void Add(std::string_view name, std::string_view value);
  bool empty() const { return secrets_.empty(); }
  // `text` with every echo of every secret replaced by "[secret NAME]". Linear in the text's size
  // for each secret (a response body may be megabytes).
  std::string Redact(std::string_view text) const;

 private:
  struct Secret {
    std::string mark;                  // "[secret NAME]"
    std::string value;
    std::vector<std::string> encoded;  // the encoded forms, each long enough to mean the value
    std::vector<uint64_t> windows;     // every kMinSecretFragmentBytes-byte run of the value, sorted
    std::vector<bool> filter;          // a bit per hashed window: most of a text is passed over on it
  };
  std::vector<Secret> secrets_;
};

}  // namespace basal::http
