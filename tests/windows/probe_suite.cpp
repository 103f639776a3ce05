// The Windows probe suite (the sandbox design's measured probes, written to run the day a Windows
// runner exists): each probe runs ck-basal-probe.exe confined by the Windows launcher, exactly as
// the worker is confined, and expects the operation denied; and runs it unconfined (--control)
// and expects it allowed, so a broken probe cannot pass. Probes: file data and metadata opens, a
// file create in a folder of ours and in the profile's package folder, a registry write, a
// connection to a named pipe of ours (new IPC), process creation, opening another process (this
// one) for query and memory reads, a loopback TCP connection through Winsock, dynamic code; a
// thread (allowed confined too); and the confined handle inventory, which must fit one profile.
//
// Where the launcher refuses to confine (under Wine: no real LPAC token) every confined probe is
// skipped with the launcher's reason, never run weaker; the controls still run.
#include <winsock2.h>
#include <windows.h>

#include <gtest/gtest.h>

#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "confinement/windows/handle_allowlist.h"
#include "confinement/windows/nt.h"
#include "parent/platform/windows/windows_launcher.h"

namespace basal {
namespace {

namespace cw = confinement::windows;

struct ProbeRun {
  std::optional<std::string> refused;  // the launcher's refusal: the probe did not run
  std::string out;                     // what the probe said
  DWORD exit_code = 0;
};

std::string ReadAll(HANDLE h) {
  std::string all;
  char buf[4096];
  DWORD n = 0;
  while (ReadFile(h, buf, sizeof buf, &n, nullptr) && n > 0) all.append(buf, n);
  while (!all.empty() && (all.back() == '\n' || all.back() == '\r')) all.pop_back();
  return all;
}

void WriteAll(HANDLE h, const std::string& s) {
  DWORD n = 0;
  WriteFile(h, s.data(), static_cast<DWORD>(s.size()), &n, nullptr);
}

ProbeRun Confined(const std::string& op) {
  ProbeRun run;
  auto launcher = WorkerLauncher::ForThisPlatform();
  LaunchOptions options;
  options.path = BASAL_PROBE_PATH;
  options.heap_budget_bytes = uint64_t{64} << 20;
  options.limits.cpu_hard_seconds = 60;
  auto probe = launcher->Launch(options);
  if (!probe) {
    run.refused = probe.error().message;
    return run;
  }
  WriteAll(static_cast<HANDLE>((*probe)->stdin_handle()), op + "\n");
  (*probe)->CloseStdin();
  run.out = ReadAll(static_cast<HANDLE>((*probe)->stdout_handle()));
  const auto ended = (*probe)->WaitFor(std::chrono::milliseconds(30000));
  run.exit_code = ended ? static_cast<DWORD>(ended->code) : STILL_ACTIVE;
  if (run.exit_code != 0) run.out += " [exit " + std::to_string(run.exit_code) + ": " + ReadAll(static_cast<HANDLE>((*probe)->stderr_handle())) + "]";
  return run;
}

ProbeRun Control(const std::string& op) {
  ProbeRun run;
  SECURITY_ATTRIBUTES sa{sizeof sa, nullptr, TRUE};
  HANDLE in_r, in_w, out_r, out_w;
  CreatePipe(&in_r, &in_w, &sa, 0);
  CreatePipe(&out_r, &out_w, &sa, 0);
  SetHandleInformation(in_w, HANDLE_FLAG_INHERIT, 0);
  SetHandleInformation(out_r, HANDLE_FLAG_INHERIT, 0);
  STARTUPINFOW si{};
  si.cb = sizeof si;
  si.dwFlags = STARTF_USESTDHANDLES;
  si.hStdInput = in_r;
  si.hStdOutput = out_w;
  si.hStdError = out_w;
  PROCESS_INFORMATION pi{};
  std::wstring cmd = L"\"" + Widen(BASAL_PROBE_PATH) + L"\" --control";
  const bool ok = CreateProcessW(nullptr, cmd.data(), nullptr, nullptr, TRUE, 0, nullptr, nullptr, &si, &pi);
  CloseHandle(in_r);
  CloseHandle(out_w);
  if (!ok) {
    run.out = "CreateProcessW failed: " + cw::LastError();
    CloseHandle(in_w);
    CloseHandle(out_r);
    return run;
  }
  WriteAll(in_w, op + "\n");
  CloseHandle(in_w);
  run.out = ReadAll(out_r);
  CloseHandle(out_r);
  WaitForSingleObject(pi.hProcess, 30000);
  GetExitCodeProcess(pi.hProcess, &run.exit_code);
  CloseHandle(pi.hProcess);
  CloseHandle(pi.hThread);
  return run;
}

// The probe pair: unconfined allowed, confined denied (or allowed, for what the design allows).
void Expect(const std::string& op, bool confined_allowed) {
  const ProbeRun control = Control(op);
  EXPECT_EQ(control.exit_code, 0u) << op << ": " << control.out;
  EXPECT_EQ(control.out, "allowed") << op << " unconfined: the probe itself is broken";
  const ProbeRun confined = Confined(op);
  if (confined.refused) GTEST_SKIP() << op << ": the launcher refused to confine the probe, so it did not run: " << *confined.refused;
  EXPECT_EQ(confined.exit_code, 0u) << op << ": " << confined.out;
  if (confined_allowed) {
    EXPECT_EQ(confined.out, "allowed") << op;
  } else {
    EXPECT_EQ(confined.out.rfind("denied ", 0), 0u) << op << " confined: " << confined.out;
  }
}

std::wstring TempDir() {
  wchar_t buf[MAX_PATH + 1] = {};
  const DWORD n = GetTempPathW(MAX_PATH + 1, buf);
  std::wstring dir(buf, n);
  while (!dir.empty() && dir.back() == L'\\') dir.pop_back();
  return dir;
}

// A file of ours the probe tries to read.
class ProbeFile : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = TempDir() + L"\\basal-probe-secret-" + std::to_wstring(GetCurrentProcessId()) + L".txt";
    HANDLE h = CreateFileW(path_.c_str(), GENERIC_WRITE, 0, nullptr, CREATE_ALWAYS, 0, nullptr);
    ASSERT_NE(h, INVALID_HANDLE_VALUE) << cw::LastError();
    WriteAll(h, "secret");
    CloseHandle(h);
  }
  void TearDown() override { DeleteFileW(path_.c_str()); }
  std::string path() const { return Narrow(path_); }
  std::wstring path_;
};

TEST_F(ProbeFile, FileDataOpenIsDenied) { Expect("file-read " + path(), false); }
TEST_F(ProbeFile, FileMetadataOpenIsDenied) { Expect("file-metadata " + path(), false); }

TEST(Probe, FileCreateInAFolderOfOursIsDenied) { Expect("file-create " + Narrow(TempDir()), false); }

TEST(Probe, FileCreateInThePackageFolderIsDenied) {
  auto folder = AppContainerFolder();
  if (!folder) GTEST_SKIP() << "this system gives the profile no package folder: " << folder.error().message;
  Expect("file-create " + Narrow(*folder), false);
}

TEST(Probe, RegistryWriteIsDenied) { Expect("registry-write", false); }

TEST(Probe, ConnectingToANamedPipeOfOursIsDenied) {
  const std::string name = "basal-probe-" + std::to_string(GetCurrentProcessId());
  // Two instances: the control's connection and the confined probe's attempt.
  HANDLE server = CreateNamedPipeW(Widen("\\\\.\\pipe\\" + name).c_str(), PIPE_ACCESS_DUPLEX, PIPE_TYPE_BYTE, 2, 0, 0, 0, nullptr);
  ASSERT_NE(server, INVALID_HANDLE_VALUE) << cw::LastError();
  HANDLE second = CreateNamedPipeW(Widen("\\\\.\\pipe\\" + name).c_str(), PIPE_ACCESS_DUPLEX, PIPE_TYPE_BYTE, 2, 0, 0, 0, nullptr);
  Expect("pipe-connect " + name, false);
  CloseHandle(second);
  CloseHandle(server);
}

TEST(Probe, ProcessCreationIsDenied) {
  wchar_t system[MAX_PATH] = {};
  GetSystemDirectoryW(system, MAX_PATH);
  Expect("process-create " + Narrow(std::wstring(system) + L"\\cmd.exe"), false);
}

TEST(Probe, OpeningAnotherProcessIsDenied) { Expect("process-open " + std::to_string(GetCurrentProcessId()), false); }

TEST(Probe, LoopbackTcpThroughWinsockIsDenied) {
  WSADATA data;
  ASSERT_EQ(WSAStartup(MAKEWORD(2, 2), &data), 0);
  SOCKET listener = socket(AF_INET, SOCK_STREAM, IPPROTO_TCP);
  ASSERT_NE(listener, INVALID_SOCKET);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&at), sizeof at), 0);
  ASSERT_EQ(listen(listener, 4), 0);
  int len = sizeof at;
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&at), &len), 0);
  Expect("tcp-connect " + std::to_string(ntohs(at.sin_port)), false);
  closesocket(listener);
  WSACleanup();
}

TEST(Probe, DynamicCodeIsDenied) { Expect("dynamic-code", false); }

TEST(Probe, AThreadInsideTheWorkerIsAllowed) { Expect("thread", true); }

TEST(Probe, TheConfinedHandleInventoryFitsOneProfile) {
  const ProbeRun confined = Confined("inventory");
  if (confined.refused) GTEST_SKIP() << "the launcher refused to confine the probe, so it did not run: " << *confined.refused;
  ASSERT_EQ(confined.exit_code, 0u) << confined.out;
  std::vector<cw::HandleRecord> inventory;
  std::istringstream lines(confined.out);
  std::string line;
  bool ended = false;
  while (std::getline(lines, line)) {
    if (line == "end") {
      ended = true;
      break;
    }
    std::istringstream f(line);
    std::string tag, type, access, inherit, role, name;
    std::getline(f, tag, '\t');
    std::getline(f, type, '\t');
    std::getline(f, access, '\t');
    std::getline(f, inherit, '\t');
    std::getline(f, role, '\t');
    std::getline(f, name, '\t');
    ASSERT_EQ(tag, "handle") << line;
    cw::HandleRecord r;
    r.type = type;
    r.access = static_cast<uint32_t>(std::stoul(access, nullptr, 16));
    r.inheritable = inherit == "inherit";
    r.stdio = role == "stdin" ? cw::StdioRole::kStdin : role == "stdout" ? cw::StdioRole::kStdout
                            : role == "stderr" ? cw::StdioRole::kStderr : cw::StdioRole::kNone;
    r.name = name == "-" ? "" : name;
    inventory.push_back(r);
  }
  ASSERT_TRUE(ended) << confined.out;
  const cw::InventoryVerdict v = cw::CheckHandleInventory(inventory);
  EXPECT_TRUE(v.accepted) << v.reason << "\n" << confined.out;
  std::cout << "confined inventory (" << inventory.size() << " handles): " << v.reason << "\n" << confined.out << "\n";
}

}  // namespace
}  // namespace basal
