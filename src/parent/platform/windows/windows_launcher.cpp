#include "parent/platform/windows/windows_launcher.h"

#include <windows.h>
#include <sddl.h>
#include <userenv.h>

#include <cstdio>
#include <memory>
#include <vector>

#include "confinement/windows/mitigation_rules.h"
#include "confinement/windows/nt.h"
#include "confinement/windows/token_rules.h"
#include "parent/platform/windows/job_limits.h"

namespace basal {
namespace {

namespace cw = confinement::windows;

// A HANDLE closed when it goes out of scope.
class Handle {
 public:
  Handle() = default;
  explicit Handle(HANDLE h) : h_(h == INVALID_HANDLE_VALUE ? nullptr : h) {}
  ~Handle() { Reset(); }
  Handle(Handle&& o) noexcept : h_(o.Release()) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      Reset();
      h_ = o.Release();
    }
    return *this;
  }
  HANDLE get() const { return h_; }
  HANDLE* out() {
    Reset();
    return &h_;
  }
  HANDLE Release() {
    HANDLE h = h_;
    h_ = nullptr;
    return h;
  }
  void Reset() {
    if (h_) CloseHandle(h_);
    h_ = nullptr;
  }
  explicit operator bool() const { return h_ != nullptr; }

 private:
  HANDLE h_ = nullptr;
};

// A SID from the AppContainer API (FreeSid) or from AllocateAndInitializeSid.
struct SidDeleter {
  void operator()(void* sid) const { FreeSid(sid); }
};
using SidPtr = std::unique_ptr<void, SidDeleter>;

struct AttributeListDeleter {
  void operator()(LPPROC_THREAD_ATTRIBUTE_LIST list) const {
    DeleteProcThreadAttributeList(list);
    HeapFree(GetProcessHeap(), 0, list);
  }
};

Error Refused(const std::string& step, const std::string& why) {
  return MakeError(ErrorCode::kUnsupported, std::string(kLaunchRefused) + step + ": " + why);
}

std::string HresultText(HRESULT hr) {
  char buf[11];
  snprintf(buf, sizeof buf, "0x%08lx", static_cast<unsigned long>(hr));
  return buf;
}

std::string SidString(PSID sid) {
  LPSTR text = nullptr;
  if (!ConvertSidToStringSidA(sid, &text)) return "";
  std::string s(text);
  LocalFree(text);
  return s;
}

// The profile's SID: created the first time, derived after.
Result<SidPtr> AppContainerSid() {
  PSID sid = nullptr;
  HRESULT hr = CreateAppContainerProfile(cw::kAppContainerName, L"basal worker",
                                         L"ck-basal-worker: runs untrusted JavaScript with no capability", nullptr, 0, &sid);
  if (hr == HRESULT_FROM_WIN32(ERROR_ALREADY_EXISTS)) hr = DeriveAppContainerSidFromAppContainerName(cw::kAppContainerName, &sid);
  if (FAILED(hr) || !sid)
    return Refused("AppContainer profile", std::string("cortexkit.basal.worker: CreateAppContainerProfile / "
                                                       "DeriveAppContainerSidFromAppContainerName failed (HRESULT ") +
                                               HresultText(hr) + ")");
  return SidPtr(sid);
}

// The primary the child is created from: this process's token with every privilege deleted, every
// group (and the user) deny-only, the NULL SID as the only restricting SID, at Low integrity.
// CreateProcessAsUserW with the security capabilities makes the AppContainer token from it.
Result<Handle> RestrictedLowToken() {
  Handle self;
  if (!OpenProcessToken(GetCurrentProcess(), TOKEN_DUPLICATE | TOKEN_QUERY | TOKEN_ASSIGN_PRIMARY | TOKEN_ADJUST_DEFAULT,
                        self.out()))
    return Refused("token", "OpenProcessToken: " + cw::LastError());
  auto info = [&](TOKEN_INFORMATION_CLASS cls) {
    DWORD size = 0;
    GetTokenInformation(self.get(), cls, nullptr, 0, &size);
    std::vector<unsigned char> buf(size ? size : 64);
    if (!GetTokenInformation(self.get(), cls, buf.data(), static_cast<DWORD>(buf.size()), &size)) buf.clear();
    return buf;
  };
  std::vector<unsigned char> groups_buf = info(TokenGroups), privs_buf = info(TokenPrivileges), user_buf = info(TokenUser);
  if (groups_buf.empty() || privs_buf.empty() || user_buf.empty())
    return Refused("token", "GetTokenInformation on this process's token: " + cw::LastError());
  const auto* groups = reinterpret_cast<const TOKEN_GROUPS*>(groups_buf.data());
  const auto* privs = reinterpret_cast<const TOKEN_PRIVILEGES*>(privs_buf.data());
  std::vector<SID_AND_ATTRIBUTES> deny;
  deny.push_back({reinterpret_cast<const TOKEN_USER*>(user_buf.data())->User.Sid, 0});
  for (DWORD i = 0; i < groups->GroupCount; ++i)
    if (!(groups->Groups[i].Attributes & SE_GROUP_INTEGRITY)) deny.push_back({groups->Groups[i].Sid, 0});
  std::vector<LUID_AND_ATTRIBUTES> drop(privs->Privileges, privs->Privileges + privs->PrivilegeCount);
  SID_IDENTIFIER_AUTHORITY null_authority = SECURITY_NULL_SID_AUTHORITY;
  PSID null_sid = nullptr;
  if (!AllocateAndInitializeSid(&null_authority, 1, SECURITY_NULL_RID, 0, 0, 0, 0, 0, 0, 0, &null_sid))
    return Refused("token", "AllocateAndInitializeSid(NULL SID): " + cw::LastError());
  SidPtr null_owner(null_sid);
  SID_AND_ATTRIBUTES restrict_to{null_sid, 0};
  Handle restricted;
  if (!CreateRestrictedToken(self.get(), 0, static_cast<DWORD>(deny.size()), deny.data(), static_cast<DWORD>(drop.size()),
                             drop.data(), 1, &restrict_to, restricted.out()))
    return Refused("token", "CreateRestrictedToken: " + cw::LastError());
  SID_IDENTIFIER_AUTHORITY label_authority = SECURITY_MANDATORY_LABEL_AUTHORITY;
  PSID low = nullptr;
  if (!AllocateAndInitializeSid(&label_authority, 1, SECURITY_MANDATORY_LOW_RID, 0, 0, 0, 0, 0, 0, 0, &low))
    return Refused("token", "AllocateAndInitializeSid(Low): " + cw::LastError());
  SidPtr low_owner(low);
  TOKEN_MANDATORY_LABEL label{};
  label.Label.Sid = low;
  label.Label.Attributes = SE_GROUP_INTEGRITY;
  if (!SetTokenInformation(restricted.get(), TokenIntegrityLevel, &label, sizeof label + GetLengthSid(low)))
    return Refused("token", "SetTokenInformation(TokenIntegrityLevel, Low): " + cw::LastError());
  return restricted;
}

// An anonymous pipe whose child end is inheritable (it goes into the handle list) and whose
// parent end is not.
Result<void> Pipe(Handle& child_end, Handle& parent_end, bool child_reads) {
  SECURITY_ATTRIBUTES sa{sizeof sa, nullptr, TRUE};
  HANDLE r = nullptr, w = nullptr;
  if (!CreatePipe(&r, &w, &sa, 0)) return Refused("pipes", "CreatePipe: " + cw::LastError());
  Handle read(r), write(w);
  Handle& parent = child_reads ? write : read;
  if (!SetHandleInformation(parent.get(), HANDLE_FLAG_INHERIT, 0))
    return Refused("pipes", "SetHandleInformation: " + cw::LastError());
  child_end = std::move(child_reads ? read : write);
  parent_end = std::move(parent);
  return Ok();
}

Result<void> SetJobLimits(HANDLE job, const JobLimits& limits) {
  JOBOBJECT_EXTENDED_LIMIT_INFORMATION ext{};
  ext.BasicLimitInformation.LimitFlags = limits.limit_flags;
  ext.BasicLimitInformation.ActiveProcessLimit = limits.active_process_limit;
  ext.BasicLimitInformation.PerProcessUserTimeLimit.QuadPart = static_cast<LONGLONG>(limits.process_time_100ns);
  ext.ProcessMemoryLimit = static_cast<SIZE_T>(limits.process_memory_bytes);
  if (!SetInformationJobObject(job, JobObjectExtendedLimitInformation, &ext, sizeof ext))
    return Refused("job", "SetInformationJobObject(extended limits): " + cw::LastError());
  JOBOBJECT_BASIC_UI_RESTRICTIONS ui{limits.ui_restrictions};
  if (!SetInformationJobObject(job, JobObjectBasicUIRestrictions, &ui, sizeof ui))
    return Refused("job", "SetInformationJobObject(UI restrictions): " + cw::LastError());
  return Ok();
}

Result<JobLimits> QueryJobLimits(HANDLE job) {
  JOBOBJECT_EXTENDED_LIMIT_INFORMATION ext{};
  if (!QueryInformationJobObject(job, JobObjectExtendedLimitInformation, &ext, sizeof ext, nullptr))
    return Refused("job check", "QueryInformationJobObject(extended limits): " + cw::LastError());
  JOBOBJECT_BASIC_UI_RESTRICTIONS ui{};
  if (!QueryInformationJobObject(job, JobObjectBasicUIRestrictions, &ui, sizeof ui, nullptr))
    return Refused("job check", "QueryInformationJobObject(UI restrictions): " + cw::LastError());
  JobLimits j;
  j.limit_flags = ext.BasicLimitInformation.LimitFlags;
  j.active_process_limit = ext.BasicLimitInformation.ActiveProcessLimit;
  j.process_time_100ns = static_cast<uint64_t>(ext.BasicLimitInformation.PerProcessUserTimeLimit.QuadPart);
  j.process_memory_bytes = ext.ProcessMemoryLimit;
  j.ui_restrictions = ui.UIRestrictionsClass;
  return j;
}

}  // namespace

Result<void> CheckSuspendedWorker(void* process_handle, void* thread_handle, void* job_handle, const std::string& sid,
                                  const JobLimits& wanted) {
  const HANDLE process = static_cast<HANDLE>(process_handle), thread = static_cast<HANDLE>(thread_handle),
               job = static_cast<HANDLE>(job_handle);
  Handle primary;
  if (!OpenProcessToken(process, TOKEN_QUERY, primary.out()))
    return Refused("primary token check", "OpenProcessToken(worker): " + cw::LastError());
  auto facts = cw::ReadTokenFacts(primary.get());
  if (!facts) return Refused("primary token check", facts.error().message);
  if (std::string why = cw::CheckToken(*facts, cw::TokenStage::kSuspendedPrimary, sid); !why.empty())
    return Refused("primary token check", std::string(cw::TokenStageName(cw::TokenStage::kSuspendedPrimary)) + " is " + why);
  Handle impersonation;
  if (!OpenThreadToken(thread, TOKEN_QUERY, TRUE, impersonation.out()))
    return Refused("thread token check", "OpenThreadToken(worker): " + cw::LastError());
  facts = cw::ReadTokenFacts(impersonation.get());
  if (!facts) return Refused("thread token check", facts.error().message);
  if (std::string why = cw::CheckToken(*facts, cw::TokenStage::kSuspendedThread, sid); !why.empty())
    return Refused("thread token check", std::string(cw::TokenStageName(cw::TokenStage::kSuspendedThread)) + " is " + why);
  auto shown = QueryJobLimits(job);
  if (!shown) return shown.error();
  if (std::string why = CheckJobLimits(*shown, wanted); !why.empty()) return Refused("job check", why);
  BOOL in_job = FALSE;
  if (!IsProcessInJob(process, job, &in_job)) return Refused("job check", "IsProcessInJob: " + cw::LastError());
  if (!in_job) return Refused("job check", "the worker is not in its job");
  return Ok();
}

namespace {

// The system must have what the design needs before anything of it is called: Windows 10 version
// 1703 (build 15063) or later for LPAC tokens, job lists and the mitigation policies. Wine reports
// an older Windows by default; told to report Windows 10 it still implements no AppContainer (its
// CreateAppContainerProfile is a stub that ends the caller), so it is refused by name first.
Result<void> CheckSystem() {
  using RtlGetVersionFn = LONG(WINAPI*)(OSVERSIONINFOW*);
  using WineGetVersionFn = const char*(CDECL*)();
  const HMODULE ntdll = GetModuleHandleW(L"ntdll.dll");
  if (!ntdll) return Refused("system", "ntdll.dll is not loaded: " + cw::LastError());
  auto get_version = reinterpret_cast<RtlGetVersionFn>(reinterpret_cast<void*>(GetProcAddress(ntdll, "RtlGetVersion")));
  OSVERSIONINFOW v{};
  v.dwOSVersionInfoSize = sizeof v;
  if (!get_version || get_version(&v) != 0) return Refused("system", "RtlGetVersion failed");
  if (v.dwMajorVersion < 10 || (v.dwMajorVersion == 10 && v.dwBuildNumber < 15063))
    return Refused("system", "Windows " + std::to_string(v.dwMajorVersion) + "." + std::to_string(v.dwMinorVersion) +
                                 " build " + std::to_string(v.dwBuildNumber) +
                                 ": LPAC tokens, job lists and the worker's mitigations need Windows 10 version 1703 "
                                 "(build 15063) or later");
  if (auto wine = reinterpret_cast<WineGetVersionFn>(reinterpret_cast<void*>(GetProcAddress(ntdll, "wine_get_version"))))
    return Refused("system", std::string("this is Wine ") + wine() +
                                 ", which implements no AppContainer (CreateAppContainerProfile is a stub): it cannot "
                                 "make the worker's LPAC token");
  return Ok();
}

std::wstring SystemRoot() {
  wchar_t buf[MAX_PATH] = {};
  const UINT n = GetSystemWindowsDirectoryW(buf, MAX_PATH);
  return n > 0 && n < MAX_PATH ? std::wstring(buf, n) : std::wstring();
}

}  // namespace

std::wstring Widen(const std::string& s) {
  if (s.empty()) return {};
  const int n = MultiByteToWideChar(CP_UTF8, 0, s.data(), static_cast<int>(s.size()), nullptr, 0);
  std::wstring w(static_cast<size_t>(n), L'\0');
  MultiByteToWideChar(CP_UTF8, 0, s.data(), static_cast<int>(s.size()), w.data(), n);
  return w;
}

std::string Narrow(const std::wstring& w) {
  if (w.empty()) return {};
  const int n = WideCharToMultiByte(CP_UTF8, 0, w.data(), static_cast<int>(w.size()), nullptr, 0, nullptr, nullptr);
  std::string s(static_cast<size_t>(n), '\0');
  WideCharToMultiByte(CP_UTF8, 0, w.data(), static_cast<int>(w.size()), s.data(), n, nullptr, nullptr);
  return s;
}

Result<std::wstring> AppContainerFolder() {
  if (auto system = CheckSystem(); !system) return system.error();
  auto sid = AppContainerSid();
  if (!sid) return sid.error();
  const std::wstring text = Widen(SidString(sid->get()));
  PWSTR path = nullptr;
  const HRESULT hr = GetAppContainerFolderPath(text.c_str(), &path);
  if (FAILED(hr) || !path) return MakeError(ErrorCode::kUnsupported, "GetAppContainerFolderPath: HRESULT " + HresultText(hr));
  std::wstring folder(path);
  CoTaskMemFree(path);
  return folder;
}

// ---- the worker process ----

WorkerProcess::~WorkerProcess() {
  if (process_ && !exit_) KillAndReap();
  for (void** h : {&in_, &out_, &err_, &process_, &job_}) {
    if (*h) CloseHandle(static_cast<HANDLE>(*h));
    *h = nullptr;
  }
}

void WorkerProcess::CloseStdin() {
  if (in_) CloseHandle(static_cast<HANDLE>(in_));
  in_ = nullptr;
}

void WorkerProcess::Kill() {
  if (exit_ || !job_) return;
  TerminateJobObject(static_cast<HANDLE>(job_), kWindowsParentKillExitCode);
}

std::optional<WorkerProcess::Exit> WorkerProcess::TryReap() {
  if (exit_) return exit_;
  if (WaitForSingleObject(static_cast<HANDLE>(process_), 0) != WAIT_OBJECT_0) return std::nullopt;
  DWORD code = 0;
  if (!GetExitCodeProcess(static_cast<HANDLE>(process_), &code)) return std::nullopt;
  exit_ = Exit{Exit::Kind::kExited, static_cast<int>(code), 0};
  return exit_;
}

std::optional<WorkerProcess::Exit> WorkerProcess::WaitFor(std::chrono::milliseconds limit) {
  if (auto e = TryReap()) return e;
  WaitForSingleObject(static_cast<HANDLE>(process_), static_cast<DWORD>(limit.count()));
  return TryReap();
}

WorkerProcess::Exit WorkerProcess::KillAndReap() {
  if (exit_) return *exit_;
  Kill();
  for (;;) {
    if (auto e = WaitFor(std::chrono::milliseconds(1000))) return *e;
    Kill();
  }
}

// ---- the CPU clock ----

std::optional<ProcessCpuClock> ProcessCpuClock::For(void* process_handle) {
  if (!process_handle) return std::nullopt;
  return ProcessCpuClock(process_handle);
}

std::chrono::nanoseconds ProcessCpuClock::Read() const {
  FILETIME created, exited, kernel, user;
  if (!GetProcessTimes(static_cast<HANDLE>(process_), &created, &exited, &kernel, &user)) return std::chrono::nanoseconds(0);
  auto ticks = [](const FILETIME& t) { return (uint64_t{t.dwHighDateTime} << 32) | t.dwLowDateTime; };
  return std::chrono::nanoseconds((ticks(kernel) + ticks(user)) * 100);
}

uint64_t WholeCpuSeconds(std::chrono::nanoseconds t) {
  const auto s = std::chrono::ceil<std::chrono::seconds>(t).count();
  return static_cast<uint64_t>(s < 1 ? 1 : s);
}

// ---- the launcher ----

class WindowsLauncher final : public WorkerLauncher {
 public:
  WorkerOs os() const override { return WorkerOs::kWindows; }

  Result<std::unique_ptr<WorkerProcess>> Launch(const LaunchOptions& options) override {
    const std::wstring path = Widen(options.path);
    const DWORD attributes = GetFileAttributesW(path.c_str());
    if (attributes == INVALID_FILE_ATTRIBUTES || (attributes & FILE_ATTRIBUTE_DIRECTORY))
      return MakeError(ErrorCode::kSpawn, "worker " + options.path + " is not a file (" + cw::LastError() +
                                              "); install ck-basal-worker.exe beside basal");
    if (!options.args.empty())
      return MakeError(ErrorCode::kInvalidArgument, "the Windows worker takes no arguments (" + options.args[0] + " given)");
    if (auto system = CheckSystem(); !system) return system.error();
    auto limits = JobLimitsFor(options.profile, options.heap_budget_bytes, options.limits.cpu_hard_seconds);
    if (!limits) return limits.error();
    const std::wstring environment = WorkerEnvironmentBlock(SystemRoot());
    if (std::string why = CheckWorkerEnvironment(environment); !why.empty()) return Refused("environment", why);

    auto sid = AppContainerSid();
    if (!sid) return sid.error();
    const std::string sid_text = SidString(sid->get());
    auto token = RestrictedLowToken();
    if (!token) return token.error();

    Handle child_in, child_out, child_err, in, out, err;
    for (auto r : {Pipe(child_in, in, true), Pipe(child_out, out, false), Pipe(child_err, err, false)})
      if (!r) return r.error();

    Handle job(CreateJobObjectW(nullptr, nullptr));
    if (!job) return Refused("job", "CreateJobObjectW: " + cw::LastError());
    if (auto r = SetJobLimits(job.get(), *limits); !r) return r.error();

    // The attributes the process is created with: nothing about it is set after it exists.
    SECURITY_CAPABILITIES capabilities{};
    capabilities.AppContainerSid = sid->get();
    capabilities.Capabilities = nullptr;
    capabilities.CapabilityCount = 0;
    DWORD all_packages_opt_out = PROCESS_CREATION_ALL_APPLICATION_PACKAGES_OPT_OUT;  // LPAC
    HANDLE inherited[3] = {child_in.get(), child_out.get(), child_err.get()};
    DWORD64 mitigations[2] = {cw::kCreationMitigations, 0};
    DWORD child_policy = cw::kCreationChildProcessRestricted;
    HANDLE jobs[1] = {job.get()};
    SIZE_T size = 0;
    InitializeProcThreadAttributeList(nullptr, 6, 0, &size);
    std::unique_ptr<_PROC_THREAD_ATTRIBUTE_LIST, AttributeListDeleter> list(
        static_cast<LPPROC_THREAD_ATTRIBUTE_LIST>(HeapAlloc(GetProcessHeap(), 0, size)));
    if (!list || !InitializeProcThreadAttributeList(list.get(), 6, 0, &size))
      return Refused("attributes", "InitializeProcThreadAttributeList: " + cw::LastError());
    const struct {
      DWORD_PTR attribute;
      void* value;
      SIZE_T size;
      const char* name;
    } attrs[] = {
        {PROC_THREAD_ATTRIBUTE_SECURITY_CAPABILITIES, &capabilities, sizeof capabilities, "security capabilities"},
        {PROC_THREAD_ATTRIBUTE_ALL_APPLICATION_PACKAGES_POLICY, &all_packages_opt_out, sizeof all_packages_opt_out,
         "all application packages policy"},
        {PROC_THREAD_ATTRIBUTE_HANDLE_LIST, inherited, sizeof inherited, "handle list"},
        {PROC_THREAD_ATTRIBUTE_MITIGATION_POLICY, mitigations, sizeof mitigations, "mitigation policy"},
        {PROC_THREAD_ATTRIBUTE_CHILD_PROCESS_POLICY, &child_policy, sizeof child_policy, "child process policy"},
        {PROC_THREAD_ATTRIBUTE_JOB_LIST, jobs, sizeof jobs, "job list"},
    };
    for (const auto& a : attrs)
      if (!UpdateProcThreadAttribute(list.get(), 0, a.attribute, a.value, a.size, nullptr, nullptr))
        return Refused("attributes", std::string("UpdateProcThreadAttribute(") + a.name + "): " + cw::LastError());

    STARTUPINFOEXW si{};
    si.StartupInfo.cb = sizeof si;
    si.StartupInfo.dwFlags = STARTF_USESTDHANDLES;
    si.StartupInfo.hStdInput = child_in.get();
    si.StartupInfo.hStdOutput = child_out.get();
    si.StartupInfo.hStdError = child_err.get();
    si.lpAttributeList = list.get();
    std::wstring command_line = L"\"" + path + L"\"";
    PROCESS_INFORMATION pi{};
    if (!CreateProcessAsUserW(token->get(), path.c_str(), command_line.data(), nullptr, nullptr, TRUE,
                              CREATE_SUSPENDED | EXTENDED_STARTUPINFO_PRESENT | CREATE_UNICODE_ENVIRONMENT,
                              const_cast<wchar_t*>(environment.c_str()), nullptr, &si.StartupInfo, &pi))
      return Refused("create", "CreateProcessAsUserW " + options.path + ": " + cw::LastError());
    Handle process(pi.hProcess), thread(pi.hThread);
    // From here a failure kills the job: the suspended child never runs.
    auto fail = [&](Error e) -> Result<std::unique_ptr<WorkerProcess>> {
      TerminateJobObject(job.get(), kWindowsParentKillExitCode);
      WaitForSingleObject(process.get(), 5000);
      return e;
    };
    // The initial thread's Low impersonation token: the child's own primary, duplicated, so the
    // loader runs at Low; the worker reverts it before its first read.
    Handle child_primary, impersonation;
    if (!OpenProcessToken(process.get(), TOKEN_DUPLICATE | TOKEN_QUERY, child_primary.out()))
      return fail(Refused("thread token", "OpenProcessToken(worker): " + cw::LastError()));
    if (!DuplicateTokenEx(child_primary.get(), TOKEN_IMPERSONATE | TOKEN_QUERY, nullptr, SecurityImpersonation,
                          TokenImpersonation, impersonation.out()))
      return fail(Refused("thread token", "DuplicateTokenEx: " + cw::LastError()));
    HANDLE thread_handle = thread.get();
    if (!SetThreadToken(&thread_handle, impersonation.get()))
      return fail(Refused("thread token", "SetThreadToken(worker): " + cw::LastError()));
    if (auto r = CheckSuspendedWorker(process.get(), thread.get(), job.get(), sid_text, *limits); !r) return fail(r.error());
    if (ResumeThread(thread.get()) == static_cast<DWORD>(-1)) return fail(Refused("resume", cw::LastError()));

    std::unique_ptr<WorkerProcess> p(new WorkerProcess());
    p->pid_ = static_cast<pid_t>(pi.dwProcessId);
    p->in_ = in.Release();
    p->out_ = out.Release();
    p->err_ = err.Release();
    p->process_ = process.Release();
    p->job_ = job.Release();
    p->limits_ = options.limits;
    return p;
  }

  std::optional<ProcessCpuClock> CpuClock(const WorkerProcess& process) const override {
    return ProcessCpuClock::For(process.process_handle());
  }

  // The job's per-process limit counts user time only and ends the process (ERROR_NOT_ENOUGH_QUOTA)
  // rather than signalling it: it is set at `soft`, this activation's bound.
  Result<void> LimitCpu(const WorkerProcess& process, std::chrono::nanoseconds soft,
                        std::chrono::nanoseconds) const override {
    JOBOBJECT_EXTENDED_LIMIT_INFORMATION ext{};
    const HANDLE job = static_cast<HANDLE>(process.job_handle());
    if (!QueryInformationJobObject(job, JobObjectExtendedLimitInformation, &ext, sizeof ext, nullptr))
      return MakeError(ErrorCode::kSpawn, "QueryInformationJobObject: " + cw::LastError());
    ext.BasicLimitInformation.LimitFlags |= JOB_OBJECT_LIMIT_PROCESS_TIME;
    ext.BasicLimitInformation.PerProcessUserTimeLimit.QuadPart = static_cast<LONGLONG>(WholeCpuSeconds(soft)) * 10'000'000;
    if (!SetInformationJobObject(job, JobObjectExtendedLimitInformation, &ext, sizeof ext))
      return MakeError(ErrorCode::kSpawn, "SetInformationJobObject(CPU time): " + cw::LastError());
    return Ok();
  }
};

std::unique_ptr<WorkerLauncher> WorkerLauncher::ForThisPlatform() { return std::make_unique<WindowsLauncher>(); }

}  // namespace basal
