// The parent's welcome check on synthetic welcomes and kernel views: what a worker claims
// (CheckWelcome) and what the kernel shows (CheckKernelView), each refusal naming what was wrong.
#include "parent/welcome_check.h"

#include <gtest/gtest.h>

#include <string>

namespace basal {
namespace {

using protocol::Json;

constexpr int kAbi = 7;

// A parent running as root whose workers must run as nobody, on a kernel with Landlock ABI 7.
WelcomePolicy RootPolicy() {
  WelcomePolicy p;
  p.kernel_landlock_abi = kAbi;
  p.worker_identity = WorkerCredentials{65534, 65534, "nobody"};
  p.accept_test_hooks = false;
  return p;
}

Json Confinement() {
  return Json{{"privileges",
               {{"uid", 65534},
                {"gid", 65534},
                {"supplementary_groups", 0},
                {"capabilities_empty", true},
                {"ambient_empty", true},
                {"bounding_set_empty", true}}},
              {"startup_checks", {{"passed", true}, {"weakened", false}}},
              {"descriptors_closed", true},
              {"no_new_privs", true},
              {"dumpable", false},
              {"landlock", {{"abi", kAbi}, {"kernel_abi", kAbi}}},
              {"seccomp", {{"installed", true}, {"tsync", true}}}};
}

protocol::Welcome Welcome(Json confinement = Confinement()) {
  protocol::Welcome w;
  w.protocol = 1;
  w.os = "linux";
  w.engine = "quickjs";
  w.pid = 4242;
  w.confinement = std::move(confinement);
  return w;
}

WelcomeVerdict Check(const protocol::Welcome& w, const WelcomePolicy& p = RootPolicy()) { return CheckWelcome(w, 4242, p); }

std::string Refusal(const protocol::Welcome& w, const WelcomePolicy& p = RootPolicy()) {
  const WelcomeVerdict v = Check(w, p);
  EXPECT_FALSE(v.accepted) << v.reason;
  return v.reason;
}

TEST(CheckWelcome, AcceptsAFullyConfinedUnprivilegedWorker) {
  const WelcomeVerdict v = Check(Welcome());
  EXPECT_TRUE(v.accepted) << v.reason;
  EXPECT_EQ(v.reason, "seccomp installed, Landlock ABI 7");
}

TEST(CheckWelcome, IntegersOutOfRangeAreRefusedNotWrapped) {
  protocol::Welcome w = Welcome();
  w.protocol = 4294967297;  // 2^32 + 1
  EXPECT_EQ(Refusal(w), "protocol version 4294967297, expected 1");
  for (const Json& abi : {Json(4294967303LL), Json(-1), Json(8), Json("7"), Json(7.0), Json(18446744073709551615ULL)}) {
    Json c = Confinement();
    c["landlock"]["abi"] = abi;
    EXPECT_EQ(Refusal(Welcome(c)), "Landlock ABI " + abi.dump() + " reported: not an integer from 0 to 7");
  }
  for (const Json& uid : {Json(4294967296LL + 65534), Json(-1), Json(4294967295LL), Json("65534")}) {
    Json c = Confinement();
    c["privileges"]["uid"] = uid;
    EXPECT_NE(Refusal(Welcome(c)).find("privileges report uid " + uid.dump()), std::string::npos);
  }
}

TEST(CheckWelcome, AReleaseParentRefusesTestHooksATestHooksParentAcceptsThem) {
  protocol::Welcome w = Welcome();
  w.test_hooks = true;
  EXPECT_EQ(Refusal(w),
            "the worker reports test hooks (a BASAL_TEST_HOOKS build, which can be told to weaken its confinement); "
            "this parent is a release build and never runs one: install the release ck-basal-worker");
  WelcomePolicy hooks = RootPolicy();
  hooks.accept_test_hooks = true;
  EXPECT_TRUE(Check(w, hooks).accepted);
  // The default is the build's own: a release parent's policy refuses test hooks.
  EXPECT_EQ(WelcomePolicy{}.accept_test_hooks, kParentHasTestHooks);
#ifndef BASAL_TEST_HOOKS
  EXPECT_FALSE(WelcomePolicy{}.accept_test_hooks);
#endif
}

TEST(CheckWelcome, PrivilegeClaimsMustMatchTheRootParentsWorkerUser) {
  Json c = Confinement();
  c.erase("privileges");
  EXPECT_NE(Refusal(Welcome(c)).find("no privileges reported"), std::string::npos);
  c = Confinement();
  c["privileges"]["uid"] = 0;
  EXPECT_EQ(Refusal(Welcome(c)),
            "worker reports uid 0 gid 65534, but this parent runs as root and its workers must run as nobody (uid 65534 "
            "gid 65534)");
  c = Confinement();
  c["privileges"]["supplementary_groups"] = 1;
  EXPECT_NE(Refusal(Welcome(c)).find("1 supplementary groups reported"), std::string::npos);
  c = Confinement();
  c["privileges"]["capabilities_empty"] = false;
  EXPECT_EQ(Refusal(Welcome(c)), "capability sets not reported empty");
  c = Confinement();
  c["privileges"]["ambient_empty"] = false;
  EXPECT_EQ(Refusal(Welcome(c)), "ambient capability set not reported empty");
  c = Confinement();
  c["privileges"]["bounding_set_empty"] = false;
  EXPECT_NE(Refusal(Welcome(c)).find("bounding set not reported empty"), std::string::npos);
  // An unprivileged parent's worker keeps its own ids and may keep its bounding set, never root.
  WelcomePolicy unprivileged = RootPolicy();
  unprivileged.worker_identity.reset();
  c = Confinement();
  c["privileges"]["uid"] = 1000;
  c["privileges"]["bounding_set_empty"] = false;
  EXPECT_TRUE(Check(Welcome(c), unprivileged).accepted);
  c["privileges"]["uid"] = 0;
  EXPECT_NE(Refusal(Welcome(c), unprivileged).find("worker reports uid 0"), std::string::npos);
}

// ---- the kernel's view ----

ProcStatus Confined() {
  ProcStatus s;
  s.state = 'S';
  s.uid = {65534, 65534, 65534, 65534};
  s.gid = {65534, 65534, 65534, 65534};
  s.no_new_privs = 1;
  s.seccomp = 2;
  s.seccomp_filters = 1;
  return s;
}

std::string KernelRefusal(const ProcStatus& s, const WelcomePolicy& p = RootPolicy()) {
  const WelcomeVerdict v = CheckKernelView(s, p);
  EXPECT_FALSE(v.accepted) << v.reason;
  return v.reason;
}

TEST(CheckKernelView, AcceptsAConfinedUnprivilegedWorker) {
  const WelcomeVerdict v = CheckKernelView(Confined(), RootPolicy());
  EXPECT_TRUE(v.accepted) << v.reason;
  EXPECT_EQ(v.reason,
            "kernel view: Seccomp 2 (1 filter(s)), NoNewPrivs 1, uid 65534 gid 65534, no capabilities, empty bounding set");
}

TEST(CheckKernelView, RefusesWhatTheWelcomeCannotProve) {
  ProcStatus s = Confined();
  s.seccomp = 0;
  EXPECT_EQ(KernelRefusal(s),
            "the kernel shows Seccomp 0, not 2 (filter mode): the worker is not under its seccomp filter, whatever the "
            "welcome says");
  s = Confined();
  s.seccomp = 1;
  EXPECT_NE(KernelRefusal(s).find("Seccomp 1, not 2"), std::string::npos);
  s = Confined();
  s.seccomp_filters = 0;
  EXPECT_NE(KernelRefusal(s).find("Seccomp_filters 0"), std::string::npos);
  s = Confined();
  s.no_new_privs = 0;
  EXPECT_NE(KernelRefusal(s).find("NoNewPrivs 0, not 1"), std::string::npos);
  s = Confined();
  s.state = 'Z';
  EXPECT_NE(KernelRefusal(s).find("State Z"), std::string::npos);
}

TEST(CheckKernelView, WithoutSeccompFiltersOnOldKernelsSeccompModeAloneDecides) {
  ProcStatus s = Confined();
  s.seccomp_filters.reset();
  const WelcomeVerdict v = CheckKernelView(s, RootPolicy());
  EXPECT_TRUE(v.accepted) << v.reason;
  EXPECT_NE(v.reason.find("filter count not shown by this kernel"), std::string::npos);
}

TEST(CheckKernelView, RefusesEveryCapabilityAndForeignIds) {
  const std::pair<const char*, uint64_t ProcStatus::*> sets[] = {{"CapEff", &ProcStatus::cap_eff},
                                                                 {"CapPrm", &ProcStatus::cap_prm},
                                                                 {"CapInh", &ProcStatus::cap_inh},
                                                                 {"CapAmb", &ProcStatus::cap_amb},
                                                                 {"CapBnd", &ProcStatus::cap_bnd}};
  for (const auto& [name, field] : sets) {
    ProcStatus s = Confined();
    s.*field = 0x000001fffeffffffull;
    EXPECT_NE(KernelRefusal(s).find(std::string(name) + " 000001fffeffffff, not empty"), std::string::npos) << name;
  }
  ProcStatus s = Confined();
  s.uid[2] = 0;  // a saved uid of root could be taken back
  EXPECT_EQ(KernelRefusal(s),
            "the kernel shows Uid 65534 65534 0 65534 (this parent runs as root; its workers must run as nobody, uid "
            "65534 gid 65534), whatever the welcome says");
  s = Confined();
  s.gid[3] = 0;
  EXPECT_NE(KernelRefusal(s).find("Gid 65534 65534 65534 0"), std::string::npos);
  s = Confined();
  s.groups = {65534};
  EXPECT_TRUE(CheckKernelView(s, RootPolicy()).accepted) << "only its own gid is allowed";
  s.groups = {65534, 0};
  EXPECT_NE(KernelRefusal(s).find("Groups containing 0"), std::string::npos);
}

TEST(CheckKernelView, AnUnprivilegedParentsWorkerMayKeepItsBoundingSetButNeverRoot) {
  WelcomePolicy unprivileged = RootPolicy();
  unprivileged.worker_identity.reset();
  ProcStatus s = Confined();
  s.uid = {1000, 1000, 1000, 1000};
  s.cap_bnd = 0x000001ffffffffffull;
  EXPECT_TRUE(CheckKernelView(s, unprivileged).accepted);
  s.uid[1] = 0;
  EXPECT_NE(KernelRefusal(s, unprivileged).find("Uid 1000 0 1000 1000: the worker runs as root"), std::string::npos);
  s = Confined();
  s.cap_eff = 1;
  EXPECT_NE(KernelRefusal(s, unprivileged).find("CapEff 0000000000000001"), std::string::npos);
}

// ---- the limits the worker was told to set ----

TEST(CheckLimits, EachLimitAskedForMustBeShownExactly) {
  ProcLimits shown;
  shown.address_space_bytes = {335544320, 335544320};
  shown.cpu_seconds = {2, 343};
  const WorkerLimits asked{335544320, 2, 343};
  EXPECT_EQ(CheckLimits(shown, asked), "");
  EXPECT_EQ(CheckLimits(ProcLimits{}, WorkerLimits{}), "") << "nothing asked, nothing checked";
  ProcLimits unlimited;
  EXPECT_EQ(CheckLimits(unlimited, asked),
            "the kernel shows Max address space unlimited (soft) unlimited (hard), not the 335544320 bytes the worker "
            "was told to set");
  ProcLimits soft_only = shown;
  soft_only.address_space_bytes.hard = 335544321;
  EXPECT_NE(CheckLimits(soft_only, asked).find("335544320 (soft) 335544321 (hard)"), std::string::npos);
  ProcLimits cpu = shown;
  cpu.cpu_seconds.soft = 343;
  EXPECT_EQ(CheckLimits(cpu, asked),
            "the kernel shows Max cpu time 343 (soft) 343 (hard), not the 2 and 343 seconds the worker was told to set");
}

}  // namespace
}  // namespace basal
