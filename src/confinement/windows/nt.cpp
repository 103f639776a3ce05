#include "confinement/windows/nt.h"

#include <windows.h>
#include <sddl.h>
#include <winternl.h>

#include <algorithm>
#include <cstdio>

namespace basal::confinement::windows {
namespace {

// Not in the SDK's winternl.h: the process information class that lists a process's handles
// (Windows 8 and later) and its result, as ntdll defines them.
constexpr PROCESSINFOCLASS kProcessHandleInformation = static_cast<PROCESSINFOCLASS>(51);
constexpr OBJECT_INFORMATION_CLASS kObjectNameInformation = static_cast<OBJECT_INFORMATION_CLASS>(1);
constexpr NTSTATUS kStatusInfoLengthMismatch = static_cast<NTSTATUS>(0xC0000004L);
constexpr NTSTATUS kStatusBufferTooSmall = static_cast<NTSTATUS>(0xC0000023L);
constexpr NTSTATUS kStatusBufferOverflow = static_cast<NTSTATUS>(0x80000005L);

struct ProcessHandleTableEntryInfo {
  HANDLE HandleValue;
  ULONG_PTR HandleCount;
  ULONG_PTR PointerCount;
  ACCESS_MASK GrantedAccess;
  ULONG ObjectTypeIndex;
  ULONG HandleAttributes;
  ULONG Reserved;
};
struct ProcessHandleSnapshotInformation {
  ULONG_PTR NumberOfHandles;
  ULONG_PTR Reserved;
  ProcessHandleTableEntryInfo Handles[1];
};
constexpr ULONG kObjProtectClose = 0x1;
constexpr ULONG kObjInherit = 0x2;

// TokenSecurityAttributes' result (the kernel's TOKEN_SECURITY_ATTRIBUTES_INFORMATION, version 1).
struct TokenSecurityAttributeV1 {
  UNICODE_STRING Name;
  USHORT ValueType;
  USHORT Reserved;
  ULONG Flags;
  ULONG ValueCount;
  void* Values;
};
struct TokenSecurityAttributesInformation {
  USHORT Version;
  USHORT Reserved;
  ULONG AttributeCount;
  TokenSecurityAttributeV1* Attributes;
};

std::string Narrow(const wchar_t* w, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += w[i] > 0 && w[i] < 0x80 ? static_cast<char>(w[i]) : '?';
  return s;
}

std::string SidText(PSID sid) {
  if (!sid) return "(none)";
  LPSTR text = nullptr;
  if (!ConvertSidToStringSidA(sid, &text)) return "(unreadable SID)";
  std::string s(text);
  LocalFree(text);
  return s;
}

// GetTokenInformation into a buffer of the size it asks for.
Result<std::vector<unsigned char>> TokenInfo(HANDLE token, TOKEN_INFORMATION_CLASS cls, const char* what) {
  DWORD size = 0;
  GetTokenInformation(token, cls, nullptr, 0, &size);
  if (size == 0) size = 64;
  std::vector<unsigned char> buf(size);
  if (!GetTokenInformation(token, cls, buf.data(), size, &size))
    return MakeError(ErrorCode::kUnsupported, std::string("GetTokenInformation(") + what + "): " + LastError());
  return buf;
}

std::vector<TokenGroup> Groups(const TOKEN_GROUPS* g) {
  std::vector<TokenGroup> out;
  for (DWORD i = 0; i < g->GroupCount; ++i) out.push_back({SidText(g->Groups[i].Sid), g->Groups[i].Attributes});
  return out;
}

// A handle's object type name ("File", "ALPC Port").
Result<std::string> TypeName(HANDLE h) {
  alignas(8) unsigned char buf[1024];
  ULONG needed = 0;
  const NTSTATUS s = NtQueryObject(h, ObjectTypeInformation, buf, sizeof buf, &needed);
  if (s < 0) return MakeError(ErrorCode::kUnsupported, "NtQueryObject(type): status " + StatusText(s));
  const auto* info = reinterpret_cast<const PUBLIC_OBJECT_TYPE_INFORMATION*>(buf);
  return Narrow(info->TypeName.Buffer, info->TypeName.Length / sizeof(wchar_t));
}

// A Directory object's name ("\KnownDlls"). Asked only of Directory objects: a name query on a
// synchronous pipe or a device can block.
Result<std::string> DirectoryName(HANDLE h) {
  alignas(8) unsigned char buf[2048];
  ULONG needed = 0;
  const NTSTATUS s = NtQueryObject(h, kObjectNameInformation, buf, sizeof buf, &needed);
  if (s < 0) return MakeError(ErrorCode::kUnsupported, "NtQueryObject(name): status " + StatusText(s));
  const auto* name = reinterpret_cast<const UNICODE_STRING*>(buf);
  return Narrow(name->Buffer, name->Length / sizeof(wchar_t));
}

}  // namespace

std::string LastError() {
  const DWORD code = GetLastError();
  char text[256] = {};
  const DWORD n = FormatMessageA(FORMAT_MESSAGE_FROM_SYSTEM | FORMAT_MESSAGE_IGNORE_INSERTS, nullptr, code, 0, text,
                                 sizeof text, nullptr);
  std::string s = "error " + std::to_string(code);
  if (n > 0) {
    std::string msg(text, n);
    while (!msg.empty() && (msg.back() == '\n' || msg.back() == '\r' || msg.back() == ' ')) msg.pop_back();
    s += " (" + msg + ")";
  }
  return s;
}

std::string StatusText(long status) {
  char buf[11];
  std::snprintf(buf, sizeof buf, "0x%08lx", static_cast<unsigned long>(status));
  return buf;
}

Result<TokenFacts> ReadTokenFacts(void* token_handle) {
  const HANDLE token = static_cast<HANDLE>(token_handle);
  TokenFacts t;
  auto type = TokenInfo(token, TokenType, "TokenType");
  if (!type) return type.error();
  t.impersonation = *reinterpret_cast<const TOKEN_TYPE*>(type->data()) == TokenImpersonation;
  auto is_ac = TokenInfo(token, TokenIsAppContainer, "TokenIsAppContainer");
  if (!is_ac) return is_ac.error();
  t.app_container = *reinterpret_cast<const DWORD*>(is_ac->data()) != 0;
  // Another token is refused as not an AppContainer token (CheckToken's first rule after its type),
  // whatever else it holds: nothing more is read of it.
  if (!t.app_container) return t;
  {
    auto ac = TokenInfo(token, TokenAppContainerSid, "TokenAppContainerSid");
    if (!ac) return ac.error();
    t.app_container_sid = SidText(reinterpret_cast<const TOKEN_APPCONTAINER_INFORMATION*>(ac->data())->TokenAppContainer);
    auto caps = TokenInfo(token, TokenCapabilities, "TokenCapabilities");
    if (!caps) return caps.error();
    t.capability_count = reinterpret_cast<const TOKEN_GROUPS*>(caps->data())->GroupCount;
  }
  {
    auto attrs = TokenInfo(token, TokenSecurityAttributes, "TokenSecurityAttributes");
    if (!attrs) return attrs.error();
    const auto* info = reinterpret_cast<const TokenSecurityAttributesInformation*>(attrs->data());
    if (info->Version != 1)
      return MakeError(ErrorCode::kUnsupported,
                       "TokenSecurityAttributes version " + std::to_string(info->Version) + ", not 1");
    for (ULONG i = 0; i < info->AttributeCount; ++i)
      t.security_attributes.push_back(
          Narrow(info->Attributes[i].Name.Buffer, info->Attributes[i].Name.Length / sizeof(wchar_t)));
  }
  auto privs = TokenInfo(token, TokenPrivileges, "TokenPrivileges");
  if (!privs) return privs.error();
  t.privilege_count = reinterpret_cast<const TOKEN_PRIVILEGES*>(privs->data())->PrivilegeCount;
  auto groups = TokenInfo(token, TokenGroups, "TokenGroups");
  if (!groups) return groups.error();
  t.groups = Groups(reinterpret_cast<const TOKEN_GROUPS*>(groups->data()));
  auto restricted = TokenInfo(token, TokenRestrictedSids, "TokenRestrictedSids");
  if (!restricted) return restricted.error();
  for (const TokenGroup& g : Groups(reinterpret_cast<const TOKEN_GROUPS*>(restricted->data())))
    t.restricted_sids.push_back(g.sid);
  auto label = TokenInfo(token, TokenIntegrityLevel, "TokenIntegrityLevel");
  if (!label) return label.error();
  const PSID sid = reinterpret_cast<const TOKEN_MANDATORY_LABEL*>(label->data())->Label.Sid;
  const UCHAR n = *GetSidSubAuthorityCount(sid);
  t.integrity_rid = n > 0 ? *GetSidSubAuthority(sid, n - 1) : 0xFFFFFFFF;
  return t;
}

Result<MitigationFacts> ReadMitigations(void* process_handle) {
  const HANDLE process = static_cast<HANDLE>(process_handle);
  MitigationFacts m;
  auto get = [&](PROCESS_MITIGATION_POLICY policy, auto& value, const char* what) -> std::string {
    if (!GetProcessMitigationPolicy(process, policy, &value, sizeof value))
      return std::string("GetProcessMitigationPolicy(") + what + "): " + LastError();
    return "";
  };
  PROCESS_MITIGATION_DYNAMIC_CODE_POLICY dynamic_code{};
  PROCESS_MITIGATION_CHILD_PROCESS_POLICY child{};
  PROCESS_MITIGATION_SYSTEM_CALL_DISABLE_POLICY syscalls{};
  PROCESS_MITIGATION_EXTENSION_POINT_DISABLE_POLICY extension{};
  PROCESS_MITIGATION_BINARY_SIGNATURE_POLICY signature{};
  PROCESS_MITIGATION_IMAGE_LOAD_POLICY image{};
  PROCESS_MITIGATION_STRICT_HANDLE_CHECK_POLICY strict{};
  for (const std::string& why :
       {get(ProcessDynamicCodePolicy, dynamic_code, "dynamic code"), get(ProcessChildProcessPolicy, child, "child process"),
        get(ProcessSystemCallDisablePolicy, syscalls, "system call disable"),
        get(ProcessExtensionPointDisablePolicy, extension, "extension points"),
        get(ProcessSignaturePolicy, signature, "signature"), get(ProcessImageLoadPolicy, image, "image load"),
        get(ProcessStrictHandleCheckPolicy, strict, "strict handle check")})
    if (!why.empty()) return MakeError(ErrorCode::kUnsupported, why);
  m.prohibit_dynamic_code = dynamic_code.ProhibitDynamicCode;
  m.dynamic_code_thread_opt_out = dynamic_code.AllowThreadOptOut;
  m.dynamic_code_remote_downgrade = dynamic_code.AllowRemoteDowngrade;
  m.no_child_process_creation = child.NoChildProcessCreation;
  m.win32k_disabled = syscalls.DisallowWin32kSystemCalls;
  m.extension_points_disabled = extension.DisableExtensionPoints;
  m.microsoft_signed_only = signature.MicrosoftSignedOnly;
  m.no_remote_images = image.NoRemoteImages;
  m.no_low_label_images = image.NoLowMandatoryLabelImages;
  m.prefer_system32_images = image.PreferSystem32Images;
  m.strict_handle_checks = strict.RaiseExceptionOnInvalidHandleReference;
  m.strict_handle_checks_permanent = strict.HandleExceptionsPermanentlyEnabled;
  return m;
}

Result<std::vector<OwnHandle>> ReadOwnHandles() {
  std::vector<unsigned char> buf(16 * 1024);
  for (int attempt = 0;; ++attempt) {
    ULONG needed = 0;
    const NTSTATUS s = NtQueryInformationProcess(GetCurrentProcess(), kProcessHandleInformation, buf.data(),
                                                 static_cast<ULONG>(buf.size()), &needed);
    if (s >= 0) break;
    if ((s != kStatusInfoLengthMismatch && s != kStatusBufferTooSmall && s != kStatusBufferOverflow) || attempt == 8 ||
        buf.size() >= (1u << 24))
      return MakeError(ErrorCode::kUnsupported, "NtQueryInformationProcess(ProcessHandleInformation): status " + StatusText(s));
    buf.resize(std::max<size_t>(buf.size() * 2, needed + 4096));
  }
  const auto* snap = reinterpret_cast<const ProcessHandleSnapshotInformation*>(buf.data());
  const HANDLE in = GetStdHandle(STD_INPUT_HANDLE), out = GetStdHandle(STD_OUTPUT_HANDLE),
               err = GetStdHandle(STD_ERROR_HANDLE);
  std::vector<OwnHandle> handles;
  for (ULONG_PTR i = 0; i < snap->NumberOfHandles; ++i) {
    const ProcessHandleTableEntryInfo& e = snap->Handles[i];
    OwnHandle h;
    h.value = e.HandleValue;
    h.protect_from_close = (e.HandleAttributes & kObjProtectClose) != 0;
    h.record.access = e.GrantedAccess;
    h.record.inheritable = (e.HandleAttributes & kObjInherit) != 0;
    h.record.stdio = e.HandleValue == in    ? StdioRole::kStdin
                     : e.HandleValue == out ? StdioRole::kStdout
                     : e.HandleValue == err ? StdioRole::kStderr
                                            : StdioRole::kNone;
    auto type = TypeName(e.HandleValue);
    if (!type) return type.error();
    h.record.type = *type;
    if (h.record.type == "Directory") {
      auto name = DirectoryName(e.HandleValue);
      if (!name) return name.error();
      h.record.name = *name;
    }
    handles.push_back(std::move(h));
  }
  return handles;
}

}  // namespace basal::confinement::windows
