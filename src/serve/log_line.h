// Text from outside (a module event's message, a policy's tool names, a server's error) as it goes
// into the daemon's log: one line, control bytes replaced, at most 2000 bytes and "...".
#pragma once

#include <string>
#include <string_view>

namespace basal::serve {

// EscapeForLog(s) appended to `out`: each control byte and DEL as '?', at most 2,000 bytes of `s`
// ("..." after a longer one).
inline void AppendForLog(std::string& out, std::string_view s) {
  const size_t n = s.size() > 2000 ? 2000 : s.size();
  for (size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    out += (c < 0x20 || c == 0x7f) ? '?' : static_cast<char>(c);
  }
  if (s.size() > 2000) out += "...";
}

inline std::string EscapeForLog(const std::string& s) {
  std::string out;
  out.reserve(s.size() > 2000 ? 2003 : s.size());
  AppendForLog(out, s);
  return out;
}

}  // namespace basal::serve
