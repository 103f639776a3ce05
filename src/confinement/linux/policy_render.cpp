#include "confinement/linux/policy_render.h"

#include <set>
#include <string_view>

#include "confinement/linux/seccomp_policy.h"

namespace basal::confinement {
namespace {

std::string Cell(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

std::string RenderPolicyMarkdown() {
  std::string md;
  md += "### Admitted system calls (x86_64)\n\n";
  md += "| nr | system call | family | argument rule | why it is admitted |\n";
  md += "| ---: | --- | --- | --- | --- |\n";
  std::set<std::string_view> used_rules;
  for (const AdmittedSyscall& row : AdmittedSyscalls()) {
    md += "| " + std::to_string(row.nr) + " | `" + std::string(row.name) + "` | " + SyscallFamilyName(row.family) +
          " | `" + Cell(row.rule.name) + "` | " + Cell(row.reason) + " |\n";
  }
  md += "\n### Argument rules\n\n";
  md += "Every comparison is of all 64 bits of the argument, by value. A call whose arguments match no rule "
        "alternative is killed like a call that is not admitted.\n\n";
  md += "| rule | what it admits |\n| --- | --- |\n";
  for (const AdmittedSyscall& row : AdmittedSyscalls()) {
    if (!used_rules.insert(row.rule.name).second) continue;
    md += "| `" + Cell(row.rule.name) + "` | " + Cell(row.rule.effect) + " |\n";
  }
  md += "\n### Never admitted\n\n";
  md += "A unit test (and a static_assert in the table's file) proves none of these is in the table.\n\n";
  md += "| nr | system call | what it would give a subverted engine |\n| ---: | --- | --- |\n";
  for (const RefusedSyscall& r : NeverAllowedSyscalls()) {
    md += "| " + std::to_string(r.nr) + " | `" + std::string(r.name) + "` | " + Cell(r.why) + " |\n";
  }
  return md;
}

}  // namespace basal::confinement

namespace basal::confinement {
namespace {

size_t FindAtLineStart(const std::string& doc, std::string_view line, size_t from) {
  for (size_t at = doc.find(line, from); at != std::string::npos; at = doc.find(line, at + 1)) {
    if (at == 0 || doc[at - 1] == '\n') return at;
  }
  return std::string::npos;
}

}  // namespace

bool ReplaceRenderedSection(std::string& doc, std::string& error) {
  const size_t begin = FindAtLineStart(doc, kRenderedBeginMarker, 0);
  if (begin == std::string::npos) {
    error = "no line " + std::string(kRenderedBeginMarker.substr(0, kRenderedBeginMarker.size() - 1));
    return false;
  }
  const size_t body = begin + kRenderedBeginMarker.size();
  const size_t end = FindAtLineStart(doc, kRenderedEndMarker, body);
  if (end == std::string::npos) {
    error = "no line " + std::string(kRenderedEndMarker.substr(0, kRenderedEndMarker.size() - 1)) + " after the begin marker";
    return false;
  }
  doc.replace(body, end - body, RenderPolicyMarkdown());
  return true;
}

}  // namespace basal::confinement
