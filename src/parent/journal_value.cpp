#include "parent/journal_value.h"

#include <algorithm>

#include "basal/manifest.h"
#include "protocol/messages.h"

namespace basal {

std::string CapForJournal(std::string json, size_t max_bytes) {
  if (json.size() <= max_bytes) return json;
  size_t cut = std::min(kJournalPrefixBytes, max_bytes / 4);
  while (cut > 0 && (static_cast<unsigned char>(json[cut]) & 0xC0) == 0x80) --cut;  // keep UTF-8 whole
  nlohmann::json marker = {{"basal_truncated",
                            {{"bytes", json.size()}, {"sha256", Sha256Hex(json)}, {"prefix", json.substr(0, cut)}}}};
  return protocol::DumpJson(marker);
}

nlohmann::json DigestJson(std::string_view bytes) { return {{"bytes", bytes.size()}, {"sha256", Sha256Hex(bytes)}}; }

}  // namespace basal
