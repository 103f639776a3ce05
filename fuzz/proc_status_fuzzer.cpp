// Fuzz target: ParseProcStatus and ParseProcLimits (src/parent/platform/linux/proc_status.h), the
// parent's parsers of /proc/PID/status and /proc/PID/limits of a worker it is about to trust.
//
// Input: the text of either file (both parsers read every input).
//
// Invariants:
// - a refusal is kInvalidArgument with a message;
// - an accepted status has NoNewPrivs 0 or 1, Seccomp 0 to 2 and a state letter, and depends only
//   on the fields it shows: written back as "Key:\tvalue" lines from `shown`, it parses to the
//   same status;
// - accepted limits, written back as the kernel writes them, parse to the same limits.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "fuzz/fuzz_check.h"
#include "parent/platform/linux/proc_status.h"

namespace basal {
namespace {

bool Same(const ProcStatus& a, const ProcStatus& b) {
  return a.state == b.state && a.uid == b.uid && a.gid == b.gid && a.groups == b.groups && a.cap_inh == b.cap_inh &&
         a.cap_prm == b.cap_prm && a.cap_eff == b.cap_eff && a.cap_bnd == b.cap_bnd && a.cap_amb == b.cap_amb &&
         a.no_new_privs == b.no_new_privs && a.seccomp == b.seccomp && a.seccomp_filters == b.seccomp_filters &&
         a.shown == b.shown;
}

std::string Shown(const std::optional<uint64_t>& limit) { return limit ? std::to_string(*limit) : "unlimited"; }

void CheckRefusal(const Error& error, const char* what) {
  FUZZ_CHECK(error.code == ErrorCode::kInvalidArgument && !error.message.empty(),
             std::string(what) + " refused without kInvalidArgument and a message: " + error.message);
}

}  // namespace
}  // namespace basal

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace basal;
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  Result<ProcStatus> status = ParseProcStatus(text);
  if (!status) {
    CheckRefusal(status.error(), "a status");
  } else {
    FUZZ_CHECK(status->no_new_privs == 0 || status->no_new_privs == 1, "NoNewPrivs " + std::to_string(status->no_new_privs));
    FUZZ_CHECK(status->seccomp >= 0 && status->seccomp <= 2, "Seccomp " + std::to_string(status->seccomp));
    FUZZ_CHECK((status->state >= 'A' && status->state <= 'Z') || (status->state >= 'a' && status->state <= 'z'),
               "state " + std::string(1, status->state));
    std::string written;
    for (const auto& [key, value] : status->shown) written += key + ":\t" + value + "\n";
    Result<ProcStatus> again = ParseProcStatus(written);
    FUZZ_CHECK(again.ok(), "its own fields were refused: " + (again ? std::string() : again.error().message));
    FUZZ_CHECK(Same(*status, *again), "its own fields parse to another status:\n" + written);
  }

  Result<ProcLimits> limits = ParseProcLimits(text);
  if (!limits) {
    CheckRefusal(limits.error(), "limits");
  } else {
    const std::string written = "Max cpu time              " + Shown(limits->cpu_seconds.soft) + "  " +
                                Shown(limits->cpu_seconds.hard) + "  seconds\n" + "Max address space         " +
                                Shown(limits->address_space_bytes.soft) + "  " +
                                Shown(limits->address_space_bytes.hard) + "  bytes\n";
    Result<ProcLimits> again = ParseProcLimits(written);
    FUZZ_CHECK(again.ok(), "limits written back were refused: " + (again ? std::string() : again.error().message));
    FUZZ_CHECK(again->cpu_seconds.soft == limits->cpu_seconds.soft && again->cpu_seconds.hard == limits->cpu_seconds.hard &&
                   again->address_space_bytes.soft == limits->address_space_bytes.soft &&
                   again->address_space_bytes.hard == limits->address_space_bytes.hard,
               "limits written back parse to other limits:\n" + written);
  }
  return 0;
}
