// Renders the one allowlist table as Markdown, for docs/syscall-admission.md (which a unit test
// keeps equal to this rendering) and for basal-policy-dump.
#pragma once

#include <string>
#include <string_view>

namespace basal::confinement {

// The admitted calls, the argument rules they use, and the never-allow list, as Markdown.
std::string RenderPolicyMarkdown();

// The rendered table sits in the doc between these two lines.
inline constexpr std::string_view kRenderedBeginMarker = "<!-- BEGIN basal-policy-dump markdown -->\n";
inline constexpr std::string_view kRenderedEndMarker = "<!-- END basal-policy-dump markdown -->\n";

// Replaces what is between the markers (each at the start of a line) with RenderPolicyMarkdown().
// False, with `error` set, when the markers are missing or out of order.
bool ReplaceRenderedSection(std::string& doc, std::string& error);

}  // namespace basal::confinement
