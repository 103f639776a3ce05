// The Windows launcher on the system it runs on (under Wine in CI): its refusal when the system
// cannot give the worker its confinement, and its checks of a suspended child, made on a real
// suspended process that was NOT confined, which they must refuse before it runs.
#include <windows.h>

#include <gtest/gtest.h>

#include <string>

#include "confinement/windows/nt.h"
#include "parent/platform/windows/windows_launcher.h"

namespace basal {
namespace {

namespace cw = confinement::windows;

TEST(WindowsLauncher, RefusesByNameWhatItCannotConfineAndStartsNothing) {
  auto launcher = WorkerLauncher::ForThisPlatform();
  EXPECT_EQ(launcher->os(), WorkerOs::kWindows);
  LaunchOptions options;
  options.path = BASAL_PROBE_PATH;
  options.heap_budget_bytes = uint64_t{64} << 20;
  auto launched = launcher->Launch(options);
  if (launched) GTEST_SKIP() << "this system confines the worker: the probe suite tests the confinement itself";
  const std::string why = launched.error().message;
  EXPECT_EQ(why.rfind(kLaunchRefused, 0), 0u) << why;
  std::cout << why << "\n";
  // Nothing the launcher was given is wrong: only the system is.
  options.args = {"--anything"};
  EXPECT_NE(launcher->Launch(options).error().message.find("takes no arguments"), std::string::npos);
  options.args.clear();
  options.path = "Z:\\no\\such\\worker.exe";
  EXPECT_NE(launcher->Launch(options).error().message.find("is not a file"), std::string::npos);
}

TEST(SuspendedWorkerCheck, AnUnconfinedSuspendedChildIsRefusedBeforeItRuns) {
  const JobLimits wanted = *JobLimitsFor(WorkerProfile::kFlow, uint64_t{64} << 20, 60);
  HANDLE job = CreateJobObjectW(nullptr, nullptr);
  ASSERT_NE(job, nullptr) << cw::LastError();
  SECURITY_ATTRIBUTES sa{sizeof sa, nullptr, TRUE};
  HANDLE out_r = nullptr, out_w = nullptr;
  ASSERT_TRUE(CreatePipe(&out_r, &out_w, &sa, 0));
  SetHandleInformation(out_r, HANDLE_FLAG_INHERIT, 0);
  STARTUPINFOW si{};
  si.cb = sizeof si;
  si.dwFlags = STARTF_USESTDHANDLES;
  si.hStdOutput = out_w;
  si.hStdError = out_w;
  PROCESS_INFORMATION pi{};
  std::wstring cmd = L"\"" + Widen(BASAL_PROBE_PATH) + L"\" --control";
  ASSERT_TRUE(CreateProcessW(nullptr, cmd.data(), nullptr, nullptr, TRUE, CREATE_SUSPENDED, nullptr, nullptr, &si, &pi))
      << cw::LastError();
  CloseHandle(out_w);
  AssignProcessToJobObject(job, pi.hProcess);

  const Result<void> checked = CheckSuspendedWorker(pi.hProcess, pi.hThread, job, "S-1-15-2-1-2-3-4-5-6-7", wanted);
  ASSERT_FALSE(checked.ok());
  const std::string why = checked.error().message;
  std::cout << why << "\n";
  EXPECT_EQ(why, std::string(kLaunchRefused) +
                     "primary token check: the suspended worker's primary token is not an AppContainer token");

  // It never ran: still suspended, it ends with the status it is given and wrote nothing.
  EXPECT_EQ(WaitForSingleObject(pi.hProcess, 0), static_cast<DWORD>(WAIT_TIMEOUT));
  TerminateProcess(pi.hProcess, kWindowsParentKillExitCode);
  WaitForSingleObject(pi.hProcess, 10000);
  DWORD code = 0;
  GetExitCodeProcess(pi.hProcess, &code);
  EXPECT_EQ(code, kWindowsParentKillExitCode);
  char buf[64];
  DWORD n = 0;
  EXPECT_FALSE(ReadFile(out_r, buf, sizeof buf, &n, nullptr) && n > 0) << std::string(buf, n);
  CloseHandle(out_r);
  CloseHandle(pi.hThread);
  CloseHandle(pi.hProcess);
  CloseHandle(job);
}

}  // namespace
}  // namespace basal
