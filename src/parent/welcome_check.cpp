#include "parent/welcome_check.h"

#if !defined(_WIN32)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include <algorithm>
#include <cstdio>
#include <initializer_list>
#include <limits>

namespace basal {
namespace {

bool IsTrue(const protocol::Json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_boolean() && it->get<bool>();
}
bool IsFalse(const protocol::Json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_boolean() && !it->get<bool>();
}
// obj[key] as an integer in [min, max]; nullopt if absent, not an integer, or outside (never wrapped).
std::optional<int64_t> IntegerField(const protocol::Json& obj, const char* key, int64_t min, int64_t max) {
  if (!obj.is_object()) return std::nullopt;
  auto it = obj.find(key);
  if (it == obj.end()) return std::nullopt;
  return protocol::IntegerIn(*it, min, max);
}
std::string Shown(const protocol::Json& obj, const char* key) {
  if (!obj.is_object() || !obj.contains(key)) return "nothing";
  return protocol::DumpJson(obj[key]);
}

const char* OsTitle(WorkerOs os) {
  switch (os) {
    case WorkerOs::kLinux: return "Linux";
    case WorkerOs::kMacos: return "macOS";
    case WorkerOs::kWindows: return "Windows";
  }
  return "unknown";
}

std::string HexMask(uint64_t mask) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(mask));
  return buf;
}

// The ids a kernel field shows, as the kernel prints them.
std::string Ids(const std::array<uint32_t, 4>& ids) {
  return std::to_string(ids[0]) + " " + std::to_string(ids[1]) + " " + std::to_string(ids[2]) + " " +
         std::to_string(ids[3]);
}

constexpr int64_t kMaxId = std::numeric_limits<uint32_t>::max() - 1;  // (uid_t)-1 is "no id"

// The welcome's "privileges" object: what the worker says it did (credentials.h). `why` is set
// when the claim alone is refused.
bool PrivilegesClaimed(const protocol::Json& c, const WelcomePolicy& policy, std::string& why) {
  const protocol::Json p = c.value("privileges", protocol::Json());
  if (!p.is_object()) {
    why = "no privileges reported (a worker reports its uid, gid and capability sets)";
    return false;
  }
  const auto uid = IntegerField(p, "uid", 0, kMaxId);
  const auto gid = IntegerField(p, "gid", 0, kMaxId);
  const auto groups = IntegerField(p, "supplementary_groups", 0, 65536);
  if (!uid || !gid || !groups) {
    why = "privileges report uid " + Shown(p, "uid") + ", gid " + Shown(p, "gid") + ", supplementary_groups " +
          Shown(p, "supplementary_groups") + ": each must be an integer id (0 to " + std::to_string(kMaxId) + ")";
    return false;
  }
  if (!IsTrue(p, "capabilities_empty")) {
    why = "capability sets not reported empty";
    return false;
  }
  if (!IsTrue(p, "ambient_empty")) {
    why = "ambient capability set not reported empty";
    return false;
  }
  if (!p.contains("bounding_set_empty") || !p["bounding_set_empty"].is_boolean()) {
    why = "bounding set state not reported";
    return false;
  }
  if (policy.worker_identity) {
    const WorkerCredentials& id = *policy.worker_identity;
    if (*uid != id.uid || *gid != id.gid) {
      why = "worker reports uid " + std::to_string(*uid) + " gid " + std::to_string(*gid) + ", but this parent runs " +
            "as root and its workers must run as " + id.user + " (uid " + std::to_string(id.uid) + " gid " +
            std::to_string(id.gid) + ")";
      return false;
    }
    if (*groups != 0) {
      why = std::to_string(*groups) + " supplementary groups reported; a worker of a root parent keeps none";
      return false;
    }
    if (!IsTrue(p, "bounding_set_empty")) {
      why = "bounding set not reported empty; a worker of a root parent drops every capability from it";
      return false;
    }
  } else if (*uid == 0) {
    why = "worker reports uid 0, but this parent does not run as root: a worker never gains root";
    return false;
  }
  return true;
}

// A key of another system's report: a welcome that carries one claims a confinement this system
// does not have (a Linux welcome with "seatbelt", say), and is refused whatever else it says.
const char* ForeignKey(const protocol::Json& c, WorkerOs os) {
  if (!c.is_object()) return nullptr;
  if (os != WorkerOs::kWindows) {
    for (const char* key : kWindowsConfinementFields)
      if (c.contains(key)) return key;
    if (c.contains(kWindowsHandleProfileField)) return kWindowsHandleProfileField;
  }
  if (os != WorkerOs::kMacos && c.contains("seatbelt")) return "seatbelt";  // descriptors_closed is Linux's too
  if (os != WorkerOs::kLinux)
    for (const char* key : {"seccomp", "landlock", "no_new_privs", "dumpable", "privileges", "startup_checks"})
      if (c.contains(key)) return key;
  return nullptr;
}

// An exact report: every key named, each `true`, and nothing else (a key of another system's
// report, or one nobody defined, is refused rather than ignored).
std::string ExactlyTrue(const protocol::Json& c, std::initializer_list<const char*> fields,
                        std::initializer_list<const char*> others = {}) {
  if (!c.is_object()) return "the confinement report is not an object";
  for (const char* key : fields)
    if (!IsTrue(c, key)) return std::string(key) + " not reported true (it is " + Shown(c, key) + ")";
  for (const auto& [key, value] : c.items()) {
    bool known = false;
    for (const char* k : fields) known = known || key == k;
    for (const char* k : others) known = known || key == k;
    if (!known) return "unknown confinement field \"" + key + "\"";
  }
  return "";
}

}  // namespace

#if !defined(_WIN32)
int KernelLandlockAbi() {
  constexpr unsigned kCreateRulesetVersion = 1u << 0;
  const long abi = syscall(SYS_landlock_create_ruleset, nullptr, 0, kCreateRulesetVersion);
  return abi > 0 ? static_cast<int>(abi) : 0;
}
#endif

WelcomeVerdict CheckWelcome(const protocol::Welcome& w, pid_t expected_pid, const WelcomePolicy& policy) {
  WelcomeVerdict v;
  v.required_landlock_abi = std::min(policy.kernel_landlock_abi, protocol::kWorkerLandlockAbiMax);
  auto refuse = [&](std::string why) {
    v.accepted = false;
    v.reason = std::move(why);
    return v;
  };
  if (w.protocol != protocol::kProtocolVersion)
    return refuse("protocol version " + std::to_string(w.protocol) + ", expected " + std::to_string(protocol::kProtocolVersion));
  const std::optional<WorkerOs> os = WorkerOsFromName(w.os);
  if (os != policy.parent_os) {
    std::string why = "welcome reports os \"" + w.os + "\" on a " + OsTitle(policy.parent_os) + " parent";
    if (os) why += std::string("; a ") + OsTitle(*os) + " worker is accepted only on " + OsTitle(*os);
    return refuse(why);
  }
  if (w.pid != expected_pid)
    return refuse("welcome reports pid " + std::to_string(w.pid) + " but the worker is pid " + std::to_string(expected_pid));
  if (w.test_hooks && !policy.accept_test_hooks)
    return refuse("the worker reports test hooks (a BASAL_TEST_HOOKS build, which can be told to weaken its "
                  "confinement); this parent is a release build and never runs one: install the release ck-basal-worker");
  const protocol::Json& c = w.confinement;
  if (const char* foreign = ForeignKey(c, policy.parent_os))
    return refuse(std::string("the confinement report carries \"") + foreign + "\", which is another system's: a " +
                  OsTitle(policy.parent_os) + " worker reports only " + OsTitle(policy.parent_os) + "'s confinement");
  if (policy.parent_os == WorkerOs::kWindows) {
    const std::string why = ExactlyTrue(c, {kWindowsConfinementFields[0], kWindowsConfinementFields[1],
                                            kWindowsConfinementFields[2], kWindowsConfinementFields[3],
                                            kWindowsConfinementFields[4]},
                                        {kWindowsHandleProfileField});
    if (!why.empty()) return refuse(why);
    const protocol::Json profile = c.value(kWindowsHandleProfileField, protocol::Json());
    if (!profile.is_string() || (profile != "windows-latest" && profile != "windows-2022"))
      return refuse(std::string(kWindowsHandleProfileField) + " " + Shown(c, kWindowsHandleProfileField) +
                    ": the handle table must fit windows-latest or windows-2022");
    v.accepted = true;
    v.reason = "thread token reverted; token, mitigations and handle table (" + profile.get<std::string>() +
               ") attested; handles closed";
    return v;
  }
  if (policy.parent_os == WorkerOs::kMacos) {
    const std::string why = ExactlyTrue(c, {kMacosConfinementFields[0], kMacosConfinementFields[1]});
    if (!why.empty()) return refuse(why);
    v.accepted = true;
    v.reason = "Seatbelt profile worker.sb applied; descriptors above stdio closed";
    return v;
  }
  std::string why;
  if (!PrivilegesClaimed(c, policy, why)) return refuse(why);
  const protocol::Json startup = c.value("startup_checks", protocol::Json::object());
  if (!startup.is_object() || !IsTrue(startup, "passed")) return refuse("startup checks not reported passed");
  if (!IsFalse(startup, "weakened")) return refuse("startup checks were weakened (a test switch)");
  if (!IsTrue(c, "descriptors_closed")) return refuse("descriptors above stdio not reported closed");
  if (!IsTrue(c, "no_new_privs")) return refuse("no_new_privs not reported set");
  if (!IsFalse(c, "dumpable")) return refuse("worker not reported non-dumpable");
  const protocol::Json seccomp = c.value("seccomp", protocol::Json::object());
  if (!seccomp.is_object() || !IsTrue(seccomp, "installed")) return refuse("seccomp filter not reported installed");
  if (!IsTrue(seccomp, "tsync")) return refuse("seccomp filter not reported installed on all threads (TSYNC)");
  const protocol::Json landlock = c.value("landlock", protocol::Json::object());
  const std::optional<int64_t> abi = IntegerField(landlock, "abi", 0, protocol::kWorkerLandlockAbiMax);
  if (!abi)
    return refuse("Landlock ABI " + Shown(landlock, "abi") + " reported: not an integer from 0 to " +
                  std::to_string(protocol::kWorkerLandlockAbiMax));
  if (v.required_landlock_abi > 0) {
    if (*abi != v.required_landlock_abi)
      return refuse("Landlock ABI " + std::to_string(*abi) + " reported, but this kernel and worker support ABI " +
                    std::to_string(v.required_landlock_abi));
  } else {
    if (!policy.allow_without_landlock)
      return refuse("the kernel lacks Landlock and the operator policy does not allow workers without it");
    if (*abi != 0) return refuse("a Landlock ABI is reported on a kernel without Landlock");
  }
  v.accepted = true;
  v.reason = v.required_landlock_abi > 0
                 ? "seccomp installed, Landlock ABI " + std::to_string(*abi)
                 : "seccomp installed; no Landlock (kernel lacks it; allowed by operator policy)";
  return v;
}

WelcomeVerdict CheckKernelView(const ProcStatus& s, const WelcomePolicy& policy) {
  WelcomeVerdict v;
  v.required_landlock_abi = std::min(policy.kernel_landlock_abi, protocol::kWorkerLandlockAbiMax);
  v.kernel_view = s;
  auto refuse = [&](std::string why) {
    v.accepted = false;
    v.reason = "the kernel shows " + std::move(why) + ", whatever the welcome says";
    return v;
  };
  if (s.state == 'Z' || s.state == 'X') return refuse(std::string("State ") + s.state + ": the worker has exited");
  if (s.seccomp != 2)
    return refuse("Seccomp " + std::to_string(s.seccomp) + ", not 2 (filter mode): the worker is not under its seccomp filter");
  if (s.seccomp_filters && *s.seccomp_filters < 1) return refuse("Seccomp_filters 0: no seccomp filter is installed");
  if (s.no_new_privs != 1) return refuse("NoNewPrivs " + std::to_string(s.no_new_privs) + ", not 1");
  const std::pair<const char*, uint64_t> always[] = {
      {"CapEff", s.cap_eff}, {"CapPrm", s.cap_prm}, {"CapInh", s.cap_inh}, {"CapAmb", s.cap_amb}};
  for (const auto& [name, mask] : always)
    if (mask != 0) return refuse(std::string(name) + " " + HexMask(mask) + ", not empty: the worker holds capabilities");
  if (policy.worker_identity) {
    const WorkerCredentials& id = *policy.worker_identity;
    const std::string want = " (this parent runs as root; its workers must run as " + id.user + ", uid " +
                             std::to_string(id.uid) + " gid " + std::to_string(id.gid) + ")";
    for (uint32_t u : s.uid)
      if (u != id.uid) return refuse("Uid " + Ids(s.uid) + want);
    for (uint32_t g : s.gid)
      if (g != id.gid) return refuse("Gid " + Ids(s.gid) + want);
    for (uint32_t g : s.groups)
      if (g != id.gid) return refuse("Groups containing " + std::to_string(g) + want);
    if (s.cap_bnd != 0)
      return refuse("CapBnd " + HexMask(s.cap_bnd) + ", not empty: a worker of a root parent drops its whole bounding set");
  } else {
    for (uint32_t u : s.uid)
      if (u == 0) return refuse("Uid " + Ids(s.uid) + ": the worker runs as root though this parent does not");
  }
  v.accepted = true;
  v.reason = "kernel view: Seccomp 2 (" +
             (s.seccomp_filters ? std::to_string(*s.seccomp_filters) + " filter(s)"
                                : std::string("filter count not shown by this kernel")) +
             "), NoNewPrivs 1, uid " + std::to_string(s.uid[0]) + " gid " + std::to_string(s.gid[0]) +
             ", no capabilities" + (s.cap_bnd == 0 ? ", empty bounding set" : "");
  return v;
}

std::string CheckLimits(const ProcLimits& shown, const WorkerLimits& asked) {
  auto text = [](const std::optional<uint64_t>& v) { return v ? std::to_string(*v) : std::string("unlimited"); };
  const ProcLimit& as = shown.address_space_bytes;
  if (asked.address_space_bytes > 0 && (as.soft != asked.address_space_bytes || as.hard != asked.address_space_bytes))
    return "the kernel shows Max address space " + text(as.soft) + " (soft) " + text(as.hard) + " (hard), not the " +
           std::to_string(asked.address_space_bytes) + " bytes the worker was told to set";
  const ProcLimit& cpu = shown.cpu_seconds;
  if (asked.cpu_hard_seconds > 0 && (cpu.soft != asked.cpu_soft_seconds || cpu.hard != asked.cpu_hard_seconds))
    return "the kernel shows Max cpu time " + text(cpu.soft) + " (soft) " + text(cpu.hard) + " (hard), not the " +
           std::to_string(asked.cpu_soft_seconds) + " and " + std::to_string(asked.cpu_hard_seconds) +
           " seconds the worker was told to set";
  return "";
}

#if !defined(_WIN32)
WelcomeVerdict CheckWorker(const protocol::Welcome& welcome, const WorkerProcess& process, const WelcomePolicy& policy) {
  WelcomeVerdict claims = CheckWelcome(welcome, process.pid(), policy);
  if (policy.parent_os != WorkerOs::kLinux) {
    // This function reads /proc: only a Linux parent checks a worker this way (a Windows parent
    // checks its worker's tokens and job before the worker runs: windows/windows_launcher.cpp).
    claims.accepted = false;
    claims.reason = "the kernel's view of a worker is read from /proc, which only a Linux parent has";
    return claims;
  }
  if (process.reaped()) {
    claims.accepted = false;
    claims.reason = "the worker exited before its kernel view could be read";
    return claims;
  }
  auto text = ReadProcStatus(process.pid());
  if (!text) {
    claims.accepted = false;
    claims.reason = "cannot read the kernel's view of the worker: " + text.error().message;
    return claims;
  }
  auto status = ParseProcStatus(*text);
  if (!status) {
    claims.accepted = false;
    claims.reason = "cannot read the kernel's view of the worker: " + status.error().message;
    return claims;
  }
  WelcomeVerdict kernel = CheckKernelView(*status, policy);
  claims.kernel_view = std::move(kernel.kernel_view);
  if (!claims.accepted) return claims;  // the claim's reason comes first
  const std::string proc = "/proc/" + std::to_string(process.pid());
  if (!kernel.accepted) {
    claims.accepted = false;
    claims.reason = proc + "/status: " + kernel.reason;
    return claims;
  }
  if (const WorkerLimits& asked = process.limits(); asked.address_space_bytes > 0 || asked.cpu_hard_seconds > 0) {
    auto limits_text = ReadProcLimits(process.pid());
    auto limits = limits_text ? ParseProcLimits(*limits_text) : Result<ProcLimits>(limits_text.error());
    std::string why = limits ? CheckLimits(*limits, asked) : limits.error().message;
    if (!why.empty()) {
      claims.accepted = false;
      claims.reason = proc + "/limits: " + why;
      return claims;
    }
  }
  claims.reason += "; " + kernel.reason;
  return claims;
}

#endif

}  // namespace basal
