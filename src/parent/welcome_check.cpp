#include "parent/welcome_check.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>

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
int IntOr(const protocol::Json& obj, const char* key, int fallback) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number_integer()) return fallback;
  return it->get<int>();
}

}  // namespace

int KernelLandlockAbi() {
  constexpr unsigned kCreateRulesetVersion = 1u << 0;
  const long abi = syscall(SYS_landlock_create_ruleset, nullptr, 0, kCreateRulesetVersion);
  return abi > 0 ? static_cast<int>(abi) : 0;
}

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
  if (w.os != "linux") return refuse("welcome reports os \"" + w.os + "\" on a Linux parent");
  if (w.pid != expected_pid)
    return refuse("welcome reports pid " + std::to_string(w.pid) + " but the worker is pid " + std::to_string(expected_pid));
  const protocol::Json& c = w.confinement;
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
  const int abi = landlock.is_object() ? IntOr(landlock, "abi", -1) : -1;
  if (v.required_landlock_abi > 0) {
    if (abi != v.required_landlock_abi)
      return refuse("Landlock ABI " + std::to_string(abi) + " reported, but this kernel and worker support ABI " +
                    std::to_string(v.required_landlock_abi));
  } else {
    if (!policy.allow_without_landlock)
      return refuse("the kernel lacks Landlock and the operator policy does not allow workers without it");
    if (abi != 0) return refuse("a Landlock ABI is reported on a kernel without Landlock");
  }
  v.accepted = true;
  v.reason = v.required_landlock_abi > 0
                 ? "seccomp installed, Landlock ABI " + std::to_string(abi)
                 : "seccomp installed; no Landlock (kernel lacks it; allowed by operator policy)";
  return v;
}

}  // namespace basal
