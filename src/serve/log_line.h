// Text from outside (a module event's message, a policy's tool names, a server's error) as it goes
// into the daemon's log: one line, control bytes replaced, at most 2000 bytes and "...".
#pragma once

#include <string>

namespace basal::serve {

inline std::string EscapeForLog(const std::string& s) {
  std::string out;
  for (unsigned char c : s) out += (c < 0x20 || c == 0x7f) ? '?' : static_cast<char>(c);
  return out.size() > 2000 ? out.substr(0, 2000) + "..." : out;
}

}  // namespace basal::serve
