// How durable a committed journal batch is: the one durability setting of basal (the module's
// options, the CLI's --durability, and every store backend read this enum).
//
//   auto d = basal::ParseDurability("full");   // Result<Durability>
//   options.durability = *d;
#pragma once

#include <string_view>

#include "basal/result.h"

namespace basal {

enum class Durability {
  kNormal,  // SQLite: WAL + synchronous=NORMAL: every committed batch survives a crash of the parent process
  kFull,    // SQLite: WAL + synchronous=FULL: also survives power loss / an OS crash
};
const char* DurabilityName(Durability durability);  // "normal" / "full"
// Accepts exactly "normal" or "full"; the error (kInvalidArgument) names the bad value and the choices.
Result<Durability> ParseDurability(std::string_view text);

}  // namespace basal
