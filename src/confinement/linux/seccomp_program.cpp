#include "confinement/linux/seccomp_program.h"

#include <linux/seccomp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <limits>

namespace basal::confinement {
namespace {

bool ComparesWithConstant(const sock_filter& insn) {
  return BPF_CLASS(insn.code) == BPF_JMP && BPF_SRC(insn.code) == BPF_K && BPF_OP(insn.code) != BPF_JA;
}

bool Compile(const FilterContext& context, std::vector<sock_filter>& out, std::string& why) {
  SeccompFilter filter(context);
  if (!filter.ok()) {
    why = "the table does not compile: " + filter.error();
    return false;
  }
  return filter.ExportBpf(out, why);
}

}  // namespace

bool PatchProgram(std::span<const sock_filter> prebuilt, const FilterContext& context, std::vector<sock_filter>& out,
                  std::string& why) {
  const auto pid = static_cast<uint32_t>(context.own_pid);
  const auto tid = static_cast<uint32_t>(context.own_tid);
  if (pid == kPidPlaceholder || pid == kTidPlaceholder || tid == kPidPlaceholder || tid == kTidPlaceholder) {
    why = "the worker's pid or tid equals a placeholder of the prebuilt seccomp program";
    return false;
  }
  if (prebuilt.empty() || prebuilt.size() > BPF_MAXINSNS) {
    why = "the prebuilt seccomp program has " + std::to_string(prebuilt.size()) + " instructions";
    return false;
  }
  out.assign(prebuilt.begin(), prebuilt.end());
  size_t pids = 0, tids = 0;
  for (sock_filter& insn : out) {
    if (!ComparesWithConstant(insn)) continue;
    if (insn.k == kPidPlaceholder) {
      insn.k = pid;
      ++pids;
    } else if (insn.k == kTidPlaceholder) {
      insn.k = tid;
      ++tids;
    }
  }
  if (pids == 0 || tids == 0) {
    why = "the prebuilt seccomp program has no place for the worker's " + std::string(pids == 0 ? "pid" : "tid");
    return false;
  }
  return true;
}

StepStatus LoadProgram(const std::vector<sock_filter>& program) {
  uint32_t action = SECCOMP_RET_KILL_PROCESS;
  if (syscall(SYS_seccomp, SECCOMP_GET_ACTION_AVAIL, 0, &action) != 0)
    return StepStatus::Failed(SyscallFailure("seccomp(GET_ACTION_AVAIL, KILL_PROCESS)", errno));
  if (program.empty() || program.size() > std::numeric_limits<unsigned short>::max())
    return StepStatus::Failed("the seccomp program has " + std::to_string(program.size()) + " instructions");
  sock_fprog fprog{static_cast<unsigned short>(program.size()), const_cast<sock_filter*>(program.data())};
  const long rc = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &fprog);
  if (rc < 0) return StepStatus::Failed(SyscallFailure("seccomp(SET_MODE_FILTER, TSYNC)", errno));
  if (rc > 0) return StepStatus::Failed("seccomp TSYNC failed: thread " + std::to_string(rc) + " could not be synchronized");
  return StepStatus::Passed();
}

bool BuildPrebuiltProgram(std::vector<sock_filter>& out, std::string& why) {
  std::vector<sock_filter> other;
  if (!Compile({static_cast<pid_t>(kPidPlaceholder), static_cast<pid_t>(kTidPlaceholder)}, out, why)) return false;
  constexpr pid_t kOtherPid = 4242, kOtherTid = 4343;
  if (!Compile({kOtherPid, kOtherTid}, other, why)) return false;
  if (other.size() != out.size()) {
    why = "the program's length depends on the pid and tid (" + std::to_string(out.size()) + " vs " +
          std::to_string(other.size()) + " instructions)";
    return false;
  }
  for (size_t i = 0; i < out.size(); ++i) {
    const sock_filter& a = out[i];
    const sock_filter& b = other[i];
    const bool placeholder = ComparesWithConstant(a) && (a.k == kPidPlaceholder || a.k == kTidPlaceholder);
    const bool same_shape = a.code == b.code && a.jt == b.jt && a.jf == b.jf;
    const bool same_k = a.k == b.k;
    const bool expected_k = !placeholder || b.k == (a.k == kPidPlaceholder ? static_cast<uint32_t>(kOtherPid)
                                                                           : static_cast<uint32_t>(kOtherTid));
    if (!same_shape || (placeholder ? !expected_k : !same_k)) {
      why = "instruction " + std::to_string(i) + " differs beyond the pid and tid between two compilations";
      return false;
    }
    if (!placeholder && (a.k == kPidPlaceholder || a.k == kTidPlaceholder)) {
      why = "instruction " + std::to_string(i) + " holds a placeholder value outside a comparison";
      return false;
    }
  }
  return true;
}

}  // namespace basal::confinement
