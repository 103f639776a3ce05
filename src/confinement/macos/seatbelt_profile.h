// The macOS worker's Seatbelt profile, worker.sb (beside this file), and the pure check of its
// rules against the sandbox design's list: deny by default, and the one allowed operation a
// signal to the worker itself. The check reads the profile's S-expressions; it runs on Linux in
// the unit tests (tests/unit/seatbelt_profile_test.cpp), so a profile edited to allow anything
// else fails CI before any macOS machine sees it.
//
//   std::string why = CheckSeatbeltProfile(ReadFile("src/confinement/macos/worker.sb"));
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace basal::confinement::macos {

// A parsed form: an atom ("deny", "1", "self") or a list of forms.
struct SbplForm {
  std::string atom;  // empty for a list
  std::vector<SbplForm> list;
  bool is_list() const { return atom.empty(); }
  std::string ToString() const;  // "(allow signal (target self))"
};

// The forms of a profile's text (';' comments to the end of the line, strings in double quotes);
// on a syntax error, empty and `error` set.
std::vector<SbplForm> ParseSbpl(std::string_view text, std::string& error);

// Empty when `text` is exactly the design's profile: (version 1), (deny default), and the one
// rule (allow signal (target self)), nothing else; else what is wrong.
std::string CheckSeatbeltProfile(std::string_view text);

}  // namespace basal::confinement::macos
