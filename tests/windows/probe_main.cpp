// ck-basal-probe.exe: the Windows probe suite's subject (probe_suite.cpp). Launched confined by the
// Windows launcher exactly as the worker is (same token, job, mitigations, handle list; the launcher
// passes no argument), it runs the worker's startup (ConfineWorker: exit 70 if any step fails),
// then reads ONE operation from stdin, tries it, and writes what happened on stdout:
//   "allowed", "denied <why>", or for `inventory` one line per handle. Started with --control it
// skips the startup and tries the same operation unconfined: the control that shows the probe
// itself works. Every operation is harmless if it succeeds (reads, a temporary file deleted on
// close, a loopback connection, a process that exits at once).
//
// Operations: file-read PATH | file-metadata PATH | file-create DIR | registry-write |
//   pipe-connect NAME | process-create PATH | process-open PID | tcp-connect PORT | thread |
//   dynamic-code | inventory
#include <winsock2.h>
#include <windows.h>

#include <string>
#include <string_view>

#include "confinement/windows/confine.h"
#include "confinement/windows/nt.h"

namespace {

using basal::confinement::windows::LastError;

void Say(std::string_view text) {
  DWORD n = 0;
  std::string line(text);
  line += '\n';
  WriteFile(GetStdHandle(STD_OUTPUT_HANDLE), line.data(), static_cast<DWORD>(line.size()), &n, nullptr);
}

std::string Verdict(bool ok, const std::string& why) { return ok ? "allowed" : "denied " + why; }

std::wstring Wide(const std::string& s) { return std::wstring(s.begin(), s.end()); }

std::string ReadOperation() {
  std::string line;
  char c = 0;
  DWORD n = 0;
  while (line.size() < 4096 && ReadFile(GetStdHandle(STD_INPUT_HANDLE), &c, 1, &n, nullptr) && n == 1 && c != '\n')
    line += c;
  return line;
}

DWORD WINAPI Nothing(void*) { return 7; }

std::string Run(const std::string& op, const std::string& arg) {
  if (op == "file-read" || op == "file-metadata") {
    const DWORD access = op == "file-read" ? GENERIC_READ : FILE_READ_ATTRIBUTES;
    HANDLE h = CreateFileW(Wide(arg).c_str(), access, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, nullptr,
                           OPEN_EXISTING, FILE_FLAG_BACKUP_SEMANTICS, nullptr);
    const bool ok = h != INVALID_HANDLE_VALUE;
    const std::string why = ok ? "" : "CreateFileW: " + LastError();
    if (ok) CloseHandle(h);
    return Verdict(ok, why);
  }
  if (op == "file-create") {
    const std::wstring path = Wide(arg) + L"\\basal-probe-" + std::to_wstring(GetCurrentProcessId()) + L".tmp";
    HANDLE h = CreateFileW(path.c_str(), GENERIC_WRITE, 0, nullptr, CREATE_NEW, FILE_FLAG_DELETE_ON_CLOSE, nullptr);
    const bool ok = h != INVALID_HANDLE_VALUE;
    const std::string why = ok ? "" : "CreateFileW(CREATE_NEW): " + LastError();
    if (ok) CloseHandle(h);
    return Verdict(ok, why);
  }
  if (op == "registry-write") {
    HKEY key = nullptr;
    const LONG rc = RegCreateKeyExW(HKEY_CURRENT_USER, L"Software\\basal-probe", 0, nullptr, REG_OPTION_VOLATILE,
                                    KEY_WRITE, nullptr, &key, nullptr);
    if (rc == ERROR_SUCCESS) {
      RegCloseKey(key);
      RegDeleteKeyW(HKEY_CURRENT_USER, L"Software\\basal-probe");
    }
    return Verdict(rc == ERROR_SUCCESS, "RegCreateKeyExW: error " + std::to_string(rc));
  }
  if (op == "pipe-connect") {
    const std::wstring name = L"\\\\.\\pipe\\" + Wide(arg);
    HANDLE h = CreateFileW(name.c_str(), GENERIC_READ | GENERIC_WRITE, 0, nullptr, OPEN_EXISTING, 0, nullptr);
    const bool ok = h != INVALID_HANDLE_VALUE;
    const std::string why = ok ? "" : "CreateFileW(pipe): " + LastError();
    if (ok) CloseHandle(h);
    return Verdict(ok, why);
  }
  if (op == "process-create") {
    STARTUPINFOW si{};
    si.cb = sizeof si;
    PROCESS_INFORMATION pi{};
    std::wstring cmd = L"\"" + Wide(arg) + L"\" /c exit 0";
    const bool ok = CreateProcessW(nullptr, cmd.data(), nullptr, nullptr, FALSE, CREATE_NO_WINDOW, nullptr, nullptr, &si, &pi);
    const std::string why = ok ? "" : "CreateProcessW: " + LastError();
    if (ok) {
      WaitForSingleObject(pi.hProcess, 10000);
      CloseHandle(pi.hProcess);
      CloseHandle(pi.hThread);
    }
    return Verdict(ok, why);
  }
  if (op == "process-open") {
    HANDLE h = OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION | PROCESS_VM_READ, FALSE,
                           static_cast<DWORD>(std::stoul(arg)));
    const bool ok = h != nullptr;
    const std::string why = ok ? "" : "OpenProcess: " + LastError();
    if (ok) CloseHandle(h);
    return Verdict(ok, why);
  }
  if (op == "tcp-connect") {
    // Winsock is loaded now, as a subverted engine would load it: linked at start, its DLL's
    // handles would be part of the inventory the startup attests.
    HMODULE ws = LoadLibraryExW(L"ws2_32.dll", nullptr, LOAD_LIBRARY_SEARCH_SYSTEM32);
    if (!ws) return "denied LoadLibrary(ws2_32): " + LastError();
    using Startup = int(WSAAPI*)(WORD, LPWSADATA);
    using Socket = SOCKET(WSAAPI*)(int, int, int);
    using Connect = int(WSAAPI*)(SOCKET, const sockaddr*, int);
    using Close = int(WSAAPI*)(SOCKET);
    using LastWsaError = int(WSAAPI*)();
    auto startup = reinterpret_cast<Startup>(reinterpret_cast<void*>(GetProcAddress(ws, "WSAStartup")));
    auto make = reinterpret_cast<Socket>(reinterpret_cast<void*>(GetProcAddress(ws, "socket")));
    auto connect_to = reinterpret_cast<Connect>(reinterpret_cast<void*>(GetProcAddress(ws, "connect")));
    auto close_socket = reinterpret_cast<Close>(reinterpret_cast<void*>(GetProcAddress(ws, "closesocket")));
    auto last = reinterpret_cast<LastWsaError>(reinterpret_cast<void*>(GetProcAddress(ws, "WSAGetLastError")));
    if (!startup || !make || !connect_to || !close_socket || !last) return "denied ws2_32 lacks a function";
    WSADATA data;
    if (const int rc = startup(MAKEWORD(2, 2), &data); rc != 0) return "denied WSAStartup: error " + std::to_string(rc);
    SOCKET s = make(AF_INET, SOCK_STREAM, IPPROTO_TCP);
    if (s == INVALID_SOCKET) return "denied socket: WSA error " + std::to_string(last());
    sockaddr_in to{};
    to.sin_family = AF_INET;
    const unsigned port = static_cast<unsigned>(std::stoul(arg));
    to.sin_port = static_cast<u_short>(((port & 0xff) << 8) | ((port >> 8) & 0xff));  // network order
    to.sin_addr.s_addr = 0x0100007f;                                                   // 127.0.0.1
    const bool ok = connect_to(s, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0;
    const std::string why = ok ? "" : "connect: WSA error " + std::to_string(last());
    close_socket(s);
    return Verdict(ok, why);
  }
  if (op == "thread") {
    HANDLE t = CreateThread(nullptr, 0, Nothing, nullptr, 0, nullptr);
    if (!t) return "denied CreateThread: " + LastError();
    DWORD code = 0;
    WaitForSingleObject(t, 10000);
    GetExitCodeThread(t, &code);
    CloseHandle(t);
    return Verdict(code == 7, "the thread did not finish");
  }
  if (op == "dynamic-code") {
    void* p = VirtualAlloc(nullptr, 4096, MEM_COMMIT | MEM_RESERVE, PAGE_EXECUTE_READWRITE);
    const bool ok = p != nullptr;
    const std::string why = ok ? "" : "VirtualAlloc(PAGE_EXECUTE_READWRITE): " + LastError();
    if (ok) VirtualFree(p, 0, MEM_RELEASE);
    return Verdict(ok, why);
  }
  if (op == "inventory") {
    auto handles = basal::confinement::windows::ReadOwnHandles();
    if (!handles) return "denied " + handles.error().message;
    std::string out;
    for (const auto& h : *handles) {
      const auto& r = h.record;
      char access[11];
      snprintf(access, sizeof access, "0x%08x", r.access);
      const char* role = r.stdio == basal::confinement::windows::StdioRole::kStdin    ? "stdin"
                         : r.stdio == basal::confinement::windows::StdioRole::kStdout ? "stdout"
                         : r.stdio == basal::confinement::windows::StdioRole::kStderr ? "stderr"
                                                                                       : "-";
      out += "handle\t" + r.type + "\t" + access + "\t" + (r.inheritable ? "inherit" : "-") + "\t" + role + "\t" +
             (r.name.empty() ? "-" : r.name) + "\n";
    }
    out += "end";
    return out;
  }
  return "unknown operation " + op;
}

}  // namespace

int main(int argc, char** argv) {
  const bool control = argc == 2 && std::string_view(argv[1]) == "--control";
  if (argc > 1 && !control) return 64;
  if (!control) basal::confinement::windows::ConfineWorker();  // exit 70 on any failed step
  const std::string line = ReadOperation();
  const size_t space = line.find(' ');
  Say(Run(line.substr(0, space), space == std::string::npos ? "" : line.substr(space + 1)));
  return 0;
}
