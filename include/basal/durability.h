// How hard the journal works to keep a commit: one enum for the whole project.
#pragma once

#include <string_view>

#include "basal/result.h"

namespace basal {

enum class Durability {
  kNormal,  // WAL, synchronous=NORMAL: every commit survives a crash of the parent process (default)
  kFull,    // WAL, synchronous=FULL: also survives power loss or an OS crash
};
const char* DurabilityName(Durability durability);  // "normal" / "full"
// Accepts exactly "normal" or "full"; the error (kInvalidArgument) names the bad value and the choices.
Result<Durability> ParseDurability(std::string_view text);

}  // namespace basal
