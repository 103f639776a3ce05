// The macOS worker's Seatbelt profile (src/confinement/macos/worker.sb) against the sandbox
// design's list: deny by default, allow only signals to the worker itself. The checker is shown
// to refuse every way to widen the profile, so the test on the committed file can fail.
#include "confinement/macos/seatbelt_profile.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

namespace basal::confinement::macos {
namespace {

std::string CommittedProfile() {
  std::ifstream in(std::string(BASAL_SOURCE_DIR) + "/src/confinement/macos/worker.sb");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(SeatbeltProfile, TheCommittedProfileIsTheDesignsList) {
  const std::string text = CommittedProfile();
  ASSERT_FALSE(text.empty()) << "src/confinement/macos/worker.sb is missing";
  EXPECT_EQ(CheckSeatbeltProfile(text), "");
  std::string error;
  const std::vector<SbplForm> forms = ParseSbpl(text, error);
  ASSERT_EQ(error, "");
  ASSERT_EQ(forms.size(), 3u);
  EXPECT_EQ(forms[1].ToString(), "(deny default)");
  EXPECT_EQ(forms[2].ToString(), "(allow signal (target self))");
}

TEST(SeatbeltProfile, EveryWideningIsRefused) {
  const std::string base = "(version 1)\n(deny default)\n(allow signal (target self))\n";
  const struct {
    std::string text;
    const char* reason;
  } cases[] = {
      {base + "(allow file-read*)", "rule (allow file-read*) is not in the design's list (deny by default; allow only signals to itself)"},
      {base + "(allow network-outbound (remote ip \"localhost:*\"))",
       "rule (allow network-outbound (remote ip \"localhost:*\")) is not in the design's list (deny by default; allow "
       "only signals to itself)"},
      {base + "(allow process-exec)", "rule (allow process-exec) is not in the design's list (deny by default; allow only signals to itself)"},
      {base + "(allow mach-lookup (global-name \"com.apple.system.logger\"))",
       "rule (allow mach-lookup (global-name \"com.apple.system.logger\")) is not in the design's list (deny by default; "
       "allow only signals to itself)"},
      {base + "(import \"system.sb\")", "rule (import \"system.sb\") is not in the design's list (deny by default; allow only signals to itself)"},
      {"(version 1)\n(allow default)\n(allow signal (target self))\n", "rule 2 is (allow default), not (deny default)"},
      {"(version 1)\n(deny default)\n(allow signal)\n", "rule 3 is (allow signal), not (allow signal (target self))"},
      {"(version 1)\n(deny default)\n(allow signal (target others))\n",
       "rule 3 is (allow signal (target others)), not (allow signal (target self))"},
      {"(version 1)\n(deny default)\n", "worker.sb lacks (allow signal (target self))"},
      {"(version 2)\n(deny default)\n(allow signal (target self))\n", "rule 1 is (version 2), not (version 1)"},
      {"(version 1)\n(deny default\n", "worker.sb does not parse: unclosed '('"},
      {"(version 1))", "worker.sb does not parse: unbalanced ')' at offset 11"},
  };
  for (const auto& c : cases) EXPECT_EQ(CheckSeatbeltProfile(c.text), c.reason) << c.text;
  // Comments and layout do not matter; the rules do.
  EXPECT_EQ(CheckSeatbeltProfile("; a comment\n(version 1) (deny default) ; another\n(allow signal\n (target self))"), "");
}

}  // namespace
}  // namespace basal::confinement::macos
