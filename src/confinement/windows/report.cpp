#include "confinement/windows/report.h"

namespace basal::confinement::windows {

std::string ConfinementReport::ToJson() const {
  auto b = [](bool v) { return v ? "true" : "false"; };
  std::string j = "{\"thread_token_reverted\":";
  j += b(thread_token_reverted);
  j += ",\"token_attested\":";
  j += b(token_attested);
  j += ",\"handles_closed\":";
  j += b(handles_closed);
  j += ",\"mitigations_attested\":";
  j += b(mitigations_attested);
  j += ",\"handle_table_attested\":";
  j += b(handle_table_attested);
  j += ",\"handle_profile\":\"";
  j += HandleProfileName(handle_profile);
  j += "\"}";
  return j;
}

}  // namespace basal::confinement::windows
