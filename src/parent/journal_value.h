// What the journal keeps of a value a flow or a handler supplied: the whole JSON text up to a cap,
// above it a marker with the size, the SHA-256 and a prefix (the flow still gets the whole value):
//
//   {"basal_truncated": {"bytes": 15728640, "sha256": "sha256:<hex>", "prefix": "{\"rows\":[1,2,..."}}
//
// and, for values kept elsewhere (kv), only a digest: {"bytes": N, "sha256": "sha256:<hex>"}.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace basal {

inline constexpr size_t kJournalPrefixBytes = 1024;

// `json` (serialized JSON) if it is at most `max_bytes` long, else the truncation marker, whose
// prefix is cut on a UTF-8 boundary at most min(kJournalPrefixBytes, max_bytes / 4) bytes long.
std::string CapForJournal(std::string json, size_t max_bytes);

// {"bytes": <size>, "sha256": "sha256:<hex>"} of `bytes`.
nlohmann::json DigestJson(std::string_view bytes);

}  // namespace basal
