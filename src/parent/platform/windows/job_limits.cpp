#include "parent/platform/windows/job_limits.h"

#include <cstdio>
#include <limits>

namespace basal {
namespace {

std::string Hex32(uint32_t v) {
  char buf[11];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

struct FlagName {
  uint32_t bit;
  const char* name;
};
constexpr FlagName kFlagNames[] = {
    {kJobLimitProcessTime, "the per-process CPU time limit"},
    {kJobLimitActiveProcess, "the active-process limit"},
    {kJobLimitProcessMemory, "the per-process commit limit"},
    {kJobLimitDieOnUnhandledException, "death on an unhandled exception"},
    {kJobLimitBreakawayOk, "breakaway"},
    {kJobLimitSilentBreakawayOk, "silent breakaway"},
    {kJobLimitKillOnJobClose, "kill on job close"},
};

bool EqualsIgnoringCase(std::wstring_view a, std::wstring_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    wchar_t x = a[i], y = b[i];
    if (x >= L'a' && x <= L'z') x = static_cast<wchar_t>(x - L'a' + L'A');
    if (y >= L'a' && y <= L'z') y = static_cast<wchar_t>(y - L'a' + L'A');
    if (x != y) return false;
  }
  return true;
}

std::string Narrow(std::wstring_view w) {
  std::string s;
  for (wchar_t c : w) s += c >= 0x20 && c < 0x7f ? static_cast<char>(c) : '?';
  return s;
}

}  // namespace

Result<JobLimits> JobLimitsFor(WorkerProfile profile, uint64_t heap_budget_bytes, uint64_t cpu_seconds) {
  if (heap_budget_bytes == 0)
    return MakeError(ErrorCode::kInvalidArgument, "a worker's job needs its heap budget (0 bytes given)");
  const uint64_t headroom = profile == WorkerProfile::kFlow ? kFlowCommitHeadroomBytes : kCodemodeCommitHeadroomBytes;
  if (heap_budget_bytes > std::numeric_limits<uint64_t>::max() - headroom)
    return MakeError(ErrorCode::kInvalidArgument, "heap budget " + std::to_string(heap_budget_bytes) +
                                                      " bytes plus the commit headroom does not fit 64 bits");
  constexpr uint64_t k100nsPerSecond = 10'000'000;
  if (cpu_seconds > std::numeric_limits<int64_t>::max() / k100nsPerSecond)
    return MakeError(ErrorCode::kInvalidArgument, "CPU limit " + std::to_string(cpu_seconds) + " s is out of range");
  JobLimits j;
  j.limit_flags = kJobLimitActiveProcess | kJobLimitProcessMemory | kJobLimitDieOnUnhandledException |
                  kJobLimitKillOnJobClose;
  j.process_memory_bytes = heap_budget_bytes + headroom;
  j.active_process_limit = 1;
  if (cpu_seconds > 0) {
    j.limit_flags |= kJobLimitProcessTime;
    j.process_time_100ns = cpu_seconds * k100nsPerSecond;
  }
  j.ui_restrictions = kJobUiLimitAll;
  return j;
}

std::string CheckJobLimits(const JobLimits& shown, const JobLimits& wanted) {
  for (const FlagName& f : kFlagNames) {
    const bool has = (shown.limit_flags & f.bit) != 0, want = (wanted.limit_flags & f.bit) != 0;
    if (has != want) return std::string("the job ") + (has ? "has " : "lacks ") + f.name;
  }
  if (shown.limit_flags != wanted.limit_flags)
    return "the job's limit flags are " + Hex32(shown.limit_flags) + ", not " + Hex32(wanted.limit_flags);
  if ((wanted.limit_flags & kJobLimitProcessMemory) && shown.process_memory_bytes != wanted.process_memory_bytes)
    return "the job's per-process commit limit is " + std::to_string(shown.process_memory_bytes) + " bytes, not " +
           std::to_string(wanted.process_memory_bytes);
  if ((wanted.limit_flags & kJobLimitActiveProcess) && shown.active_process_limit != wanted.active_process_limit)
    return "the job's active-process limit is " + std::to_string(shown.active_process_limit) + ", not " +
           std::to_string(wanted.active_process_limit);
  if ((wanted.limit_flags & kJobLimitProcessTime) && shown.process_time_100ns != wanted.process_time_100ns)
    return "the job's per-process CPU time limit is " + std::to_string(shown.process_time_100ns) + " x 100 ns, not " +
           std::to_string(wanted.process_time_100ns);
  if (shown.ui_restrictions != wanted.ui_restrictions)
    return "the job's UI restrictions are " + Hex32(shown.ui_restrictions) + ", not " + Hex32(wanted.ui_restrictions);
  return "";
}

std::wstring WorkerEnvironmentBlock(std::wstring_view system_root) {
  std::wstring block = L"SystemRoot=";
  block += system_root;
  block += L'\0';
  block += L'\0';
  return block;
}

std::vector<std::wstring> EnvironmentVariables(std::wstring_view block) {
  std::vector<std::wstring> vars;
  size_t i = 0;
  while (i < block.size() && block[i] != L'\0') {
    const size_t end = block.find(L'\0', i);
    if (end == std::wstring_view::npos) {
      vars.emplace_back(block.substr(i));  // unterminated: CheckWorkerEnvironment refuses it
      break;
    }
    vars.emplace_back(block.substr(i, end - i));
    i = end + 1;
  }
  return vars;
}

std::string CheckWorkerEnvironment(std::wstring_view block) {
  if (block.size() < 2 || block[block.size() - 1] != L'\0' || block[block.size() - 2] != L'\0')
    return "the environment block does not end with two NULs";
  const std::vector<std::wstring> vars = EnvironmentVariables(block);
  if (vars.size() != 1) return std::to_string(vars.size()) + " environment variables, not only SystemRoot";
  const size_t eq = vars[0].find(L'=');
  if (eq == std::wstring::npos || !EqualsIgnoringCase(std::wstring_view(vars[0]).substr(0, eq), L"SystemRoot"))
    return "the environment holds " + Narrow(vars[0]) + ", not SystemRoot";
  if (eq + 1 == vars[0].size()) return "SystemRoot is empty";
  // What precedes the final two NULs must be the one variable: no empty entry hides another.
  if (block.size() != vars[0].size() + 2) return "the environment block holds more than SystemRoot";
  return "";
}

}  // namespace basal
