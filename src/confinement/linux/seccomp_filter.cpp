#include "confinement/linux/seccomp_filter.h"

#include <seccomp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "confinement/linux/seccomp_policy.h"

#if !defined(__x86_64__) || defined(__ILP32__)
#error "the worker's seccomp policy is written for x86_64 (LP64) only"
#endif

namespace basal::confinement {
namespace {

std::string LibseccompFailure(const char* what, int rc) {
  return std::string(what) + " failed: " + std::strerror(-rc) + " (" + std::to_string(rc) + ")";
}

uint64_t Resolve(const ArgValue& v, const FilterContext& context) {
  switch (v.source) {
    case ArgValue::Source::kLiteral: return v.literal;
    case ArgValue::Source::kOwnPid: return static_cast<uint64_t>(static_cast<uint32_t>(context.own_pid));
    case ArgValue::Source::kOwnTid: return static_cast<uint64_t>(static_cast<uint32_t>(context.own_tid));
  }
  return ~0ULL;
}

// Adds one libseccomp rule per combination of admitted values: libseccomp ANDs the comparisons
// of a rule and ORs the rules of a system call. Every comparison is SCMP_CMP_EQ on 64 bits, so
// the generated code checks each argument's high word as well as its low word.
int AddRow(scmp_filter_ctx ctx, const AdmittedSyscall& row, const FilterContext& context) {
  if (row.rule.count == 0) return seccomp_rule_add_exact(ctx, SCMP_ACT_ALLOW, row.nr, 0);
  std::array<size_t, ArgRule::kMaxArgs> pick{};
  for (;;) {
    std::array<scmp_arg_cmp, ArgRule::kMaxArgs> cmps{};
    for (size_t a = 0; a < row.rule.count; ++a) {
      const ArgOneOf& arg = row.rule.args[a];
      cmps[a] = scmp_arg_cmp{arg.index, SCMP_CMP_EQ, Resolve(arg.values[pick[a]], context), 0};
    }
    const int rc = seccomp_rule_add_exact_array(ctx, SCMP_ACT_ALLOW, row.nr, row.rule.count, cmps.data());
    if (rc != 0) return rc;
    size_t a = 0;  // next combination, like an odometer
    for (; a < row.rule.count; ++a) {
      if (++pick[a] < row.rule.args[a].count) break;
      pick[a] = 0;
    }
    if (a == row.rule.count) return 0;
  }
}

bool ReadMemfd(int fd, std::string& out, std::string& error) {
  if (lseek(fd, 0, SEEK_SET) != 0) {
    error = std::string("lseek on the export memfd failed: ") + std::strerror(errno);
    return false;
  }
  out.clear();
  std::array<char, 4096> buf;
  for (;;) {
    const ssize_t n = read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      error = std::string("read of the export memfd failed: ") + std::strerror(errno);
      return false;
    }
    if (n == 0) return true;
    out.append(buf.data(), static_cast<size_t>(n));
  }
}

template <typename ExportFn>
bool Export(scmp_filter_ctx ctx, ExportFn fn, const char* what, std::string& out, std::string& error) {
  if (ctx == nullptr) {
    error = "the filter was not compiled";
    return false;
  }
  const int fd = memfd_create("basal-seccomp-export", MFD_CLOEXEC);
  if (fd < 0) {
    error = std::string("memfd_create failed: ") + std::strerror(errno);
    return false;
  }
  const int rc = fn(ctx, fd);
  bool ok = rc == 0;
  if (!ok) error = LibseccompFailure(what, rc);
  if (ok) ok = ReadMemfd(fd, out, error);
  close(fd);
  return ok;
}

}  // namespace

SeccompFilter::SeccompFilter(const FilterContext& context, FilterLayout layout) {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_KILL_PROCESS);
  if (ctx == nullptr) {
    error_ = "seccomp_init(SCMP_ACT_KILL_PROCESS) failed (libseccomp or the kernel lacks KILL_PROCESS)";
    return;
  }
  ctx_ = ctx;
  if (seccomp_arch_native() != SCMP_ARCH_X86_64) {
    error_ = "libseccomp's native architecture is not x86_64";
    return;
  }
  struct Attr {
    scmp_filter_attr attr;
    uint32_t value;
    const char* what;
  };
  const Attr attrs[] = {
      {SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS, "seccomp_attr_set(ACT_BADARCH, KILL_PROCESS)"},
      // no_new_privs is step 3 of the confinement, set and verified before the filter exists.
      {SCMP_FLTATR_CTL_NNP, 0, "seccomp_attr_set(CTL_NNP, 0)"},
      {SCMP_FLTATR_CTL_TSYNC, 1, "seccomp_attr_set(CTL_TSYNC, 1)"},
      // 2: the syscall numbers as a binary tree (libseccomp 2.5+); 1: one chain in priority order.
      {SCMP_FLTATR_CTL_OPTIMIZE, layout == FilterLayout::kBinaryTree ? 2u : 1u,
       layout == FilterLayout::kBinaryTree ? "seccomp_attr_set(CTL_OPTIMIZE, 2)" : "seccomp_attr_set(CTL_OPTIMIZE, 1)"},
  };
  for (const Attr& a : attrs) {
    if (const int rc = seccomp_attr_set(ctx, a.attr, a.value); rc != 0) {
      error_ = LibseccompFailure(a.what, rc);
      return;
    }
  }
  for (const AdmittedSyscall& row : AdmittedSyscalls()) {
    if (const int rc = AddRow(ctx, row, context); rc != 0) {
      error_ = LibseccompFailure(("adding the row for " + std::string(row.name)).c_str(), rc);
      return;
    }
  }
}

SeccompFilter::~SeccompFilter() {
  if (ctx_ != nullptr) seccomp_release(static_cast<scmp_filter_ctx>(ctx_));
}

StepStatus SeccompFilter::Install() {
  if (!ok()) return StepStatus::Failed(error_);
  const int rc = seccomp_load(static_cast<scmp_filter_ctx>(ctx_));
  if (rc != 0) return StepStatus::Failed(LibseccompFailure("seccomp_load with SECCOMP_FILTER_FLAG_TSYNC", rc));
  return StepStatus::Passed();
}

bool SeccompFilter::ExportBpf(std::vector<sock_filter>& out, std::string& error) const {
  std::string bytes;
  if (!Export(static_cast<scmp_filter_ctx>(ctx_), seccomp_export_bpf, "seccomp_export_bpf", bytes, error)) return false;
  if (bytes.size() % sizeof(sock_filter) != 0) {
    error = "seccomp_export_bpf wrote " + std::to_string(bytes.size()) + " bytes, not whole instructions";
    return false;
  }
  out.resize(bytes.size() / sizeof(sock_filter));
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return true;
}

bool SeccompFilter::ExportPfc(std::string& out, std::string& error) const {
  return Export(static_cast<scmp_filter_ctx>(ctx_), seccomp_export_pfc, "seccomp_export_pfc", out, error);
}

}  // namespace basal::confinement
