// Fuzz target: the review of a new version (include/basal/review.h): DiffLines and RenderReview,
// which read a flow's source as the author wrote it (any bytes) and print it for the operator.
//
// Input: one byte choosing DiffLines' work limit (small limits reach the bounded fallback with small
// inputs), then the old source, a NUL byte, and the new source.
//
// Invariants:
// - the counts agree with the texts: lines before - removed + added = lines after; identical texts
//   give no diff; every line of the unified diff is a hunk header, a context, removed or added
//   line, or the "\ No newline at end of file" marker;
// - the rendered review holds no C0 control but newline and tab and no DEL, and every line of it
//   is a section heading of basal's own or indented: a source cannot forge a line of the review.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "basal/manifest.h"
#include "basal/review.h"
#include "fuzz/fuzz_check.h"

namespace basal {
namespace {

void CheckUnified(const std::string& unified) {
  size_t at = 0;
  while (at < unified.size()) {
    size_t end = unified.find('\n', at);
    FUZZ_CHECK(end != std::string::npos, "the unified diff does not end with a newline");
    const std::string_view line(unified.data() + at, end - at);
    const bool ok = line.rfind("@@ -", 0) == 0 || (!line.empty() && (line[0] == ' ' || line[0] == '-' || line[0] == '+')) ||
                    line == "\\ No newline at end of file";
    FUZZ_CHECK(ok, "unexpected diff line: " + std::string(line.substr(0, 80)));
    at = end + 1;
  }
}

void CheckRendered(const std::string& text) {
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + at, end - at);
    const bool ours = line == "grants:" || line == "budgets:" || line == "source:" || line.rfind("  ", 0) == 0;
    FUZZ_CHECK(ours, "a rendered line is not basal's: " + std::string(line.substr(0, 80)));
    for (char c : line) {
      const auto b = static_cast<unsigned char>(c);
      FUZZ_CHECK(b == '\t' || (b >= 0x20 && b != 0x7f), "a control byte reached the terminal: " + std::to_string(b));
    }
    at = end + 1;
  }
}

}  // namespace
}  // namespace basal

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace basal;
  if (size == 0) return 0;
  const uint64_t limits[] = {1, 8, 64, 1024, kDiffWorkLimit};
  const uint64_t work_limit = limits[data[0] % 5];
  const std::string_view input(reinterpret_cast<const char*>(data + 1), size - 1);
  const size_t nul = input.find('\0');
  const std::string_view before = input.substr(0, nul);
  const std::string_view after = nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);

  const LineDiff diff = DiffLines(before, after, 3, work_limit);
  FUZZ_CHECK(CountLines(before) - diff.removed + diff.added == CountLines(after),
             "counts: " + std::to_string(CountLines(before)) + " - " + std::to_string(diff.removed) + " + " +
                 std::to_string(diff.added) + " != " + std::to_string(CountLines(after)));
  if (before == after) FUZZ_CHECK(diff.unified.empty() && diff.added == 0 && diff.removed == 0, "identical texts differ");
  CheckUnified(diff.unified);

  static const HostCallRegistry registry;
  static const Manifest manifest = *Manifest::Parse("{}", registry);
  const Review review = ReviewVersions(&manifest, before, "{}", manifest, after, "{}", registry);
  CheckRendered(RenderReview(review, /*source_diff=*/true));
  return 0;
}
