// The compiled seccomp filter: the one table of seccomp_policy.cpp turned into classic BPF by
// libseccomp, with the worker's own pid and tid baked in. Mechanism only; the policy is the table.
//
//   SeccompFilter filter({.own_pid = getpid(), .own_tid = gettid()});
//   if (!filter.ok()) Fail("seccomp", filter.error());
//   StepStatus s = filter.Install();   // TSYNC; after this only the table's calls remain
//
// The filter is for x86_64 only. Its first instructions load seccomp_data.arch and kill the
// process unless it is AUDIT_ARCH_X86_64 (so the i386 int 0x80 entry dies); an x32 number
// (bit 30 set) matches no row and reaches the default, which is SECCOMP_RET_KILL_PROCESS.
#pragma once

#include <linux/filter.h>
#include <sys/types.h>

#include <string>
#include <vector>

#include "confinement/linux/step_status.h"

namespace basal::confinement {

struct FilterContext {
  pid_t own_pid;  // tgkill's only admitted tgid
  pid_t own_tid;  // tgkill's only admitted tid: the worker's one thread
};

// How libseccomp lays out the syscall-number dispatch (the argument checks under each number are
// the same in both). The worker loads the binary tree: a number is found in about log2(rows)
// comparisons instead of walking the rows one by one, both when the kernel caches the filter's
// constant verdicts at load time (it runs the program once per system call number) and at every
// later call. The chain, in the table's priority order, is kept only so that a unit test can check
// that both layouts decide every call alike (SeccompProgram.TheTreeDecidesAsTheChain).
enum class FilterLayout { kBinaryTree, kPriorityChain };

class SeccompFilter {
 public:
  explicit SeccompFilter(const FilterContext& context, FilterLayout layout = FilterLayout::kBinaryTree);
  ~SeccompFilter();
  SeccompFilter(const SeccompFilter&) = delete;
  SeccompFilter& operator=(const SeccompFilter&) = delete;

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }  // why the table could not be compiled

  // Installs the filter on every thread (SECCOMP_FILTER_FLAG_TSYNC). no_new_privs must be set.
  StepStatus Install();

  // The BPF program exactly as the kernel receives it (seccomp_export_bpf through a memfd, so
  // only for unconfined callers: tests and basal-policy-dump).
  bool ExportBpf(std::vector<sock_filter>& out, std::string& error) const;
  // libseccomp's pseudo filter code, the readable form of the same program (the golden file).
  bool ExportPfc(std::string& out, std::string& error) const;

 private:
  void* ctx_ = nullptr;  // scmp_filter_ctx; owned
  std::string error_;
};

}  // namespace basal::confinement
