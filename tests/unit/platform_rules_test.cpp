// The platform seam's rules for every system, on Linux: how each system's worker deaths count in
// health (ClassifyDeath: SIGSYS on Linux, the fatal statuses on Windows, refusals everywhere) and
// which Welcome each system's parent accepts (CheckWelcome with policy.parent_os): a worker is
// accepted only by a parent of its own system, with that system's confinement report.
#include <gtest/gtest.h>

#include <string>

#include "confinement/windows/report.h"
#include "parent/platform/platform.h"
#include "parent/welcome_check.h"

namespace basal {
namespace {

using protocol::Json;

WorkerDeath Exited(int code) { return {WorkerDeath::Kind::kExited, code, 0}; }
WorkerDeath Signalled(int sig) { return {WorkerDeath::Kind::kSignalled, 0, sig}; }
WorkerDeath WindowsExit(uint32_t status) { return Exited(static_cast<int>(status)); }

// ---- deaths ----

TEST(ClassifyDeath, LinuxSigsysIsAConfinementKillSigxcpuTheBackstopExit70BeforeTheWelcomeARefusal) {
  EXPECT_EQ(ClassifyDeath(WorkerOs::kLinux, Signalled(31), true).kind, DeathKind::kConfinementKill);
  EXPECT_EQ(ClassifyDeath(WorkerOs::kLinux, Signalled(31), false).kind, DeathKind::kConfinementKill);
  EXPECT_EQ(ClassifyDeath(WorkerOs::kLinux, Signalled(31), true).description, "killed by signal 31 (SIGSYS)");
  EXPECT_EQ(ClassifyDeath(WorkerOs::kLinux, Signalled(24), true).kind, DeathKind::kCpuLimit);
  EXPECT_EQ(ClassifyDeath(WorkerOs::kLinux, Exited(70), false).kind, DeathKind::kRefusal);
  const DeathVerdict after = ClassifyDeath(WorkerOs::kLinux, Exited(70), true);
  EXPECT_EQ(after.kind, DeathKind::kCrash);
  EXPECT_EQ(after.crash_key, "exit 70");
  EXPECT_EQ(ClassifyDeath(WorkerOs::kLinux, Signalled(11), true).crash_key, "signal SIGSEGV");
  EXPECT_EQ(ClassifyDeath(WorkerOs::kLinux, Signalled(40), true).crash_key, "signal signal 40");
  EXPECT_EQ(ClassifyDeath(WorkerOs::kLinux, Exited(1), true).description, "exited with status 1");
  // Windows's fatal statuses mean nothing on Linux (an exit code there is 0 to 255 anyway).
  EXPECT_NE(ClassifyDeath(WorkerOs::kLinux, WindowsExit(kWindowsStatusAccessViolation), true).kind,
            DeathKind::kFatalStatus);
}

TEST(ClassifyDeath, WindowsInvalidHandleAndAccessViolationCountNotARefusalOrAParentKill) {
  for (uint32_t status : {kWindowsStatusInvalidHandle, kWindowsStatusAccessViolation})
    for (bool welcomed : {false, true}) {
      const DeathVerdict v = ClassifyDeath(WorkerOs::kWindows, WindowsExit(status), welcomed);
      EXPECT_EQ(v.kind, DeathKind::kFatalStatus) << v.description;
    }
  EXPECT_EQ(ClassifyDeath(WorkerOs::kWindows, WindowsExit(kWindowsStatusInvalidHandle), true).description,
            "exited with status 0xc0000008 (STATUS_INVALID_HANDLE)");
  EXPECT_EQ(ClassifyDeath(WorkerOs::kWindows, WindowsExit(kWindowsStatusAccessViolation), true).description,
            "exited with status 0xc0000005 (STATUS_ACCESS_VIOLATION)");
  // Exit 70 is the worker's refusal before its welcome, a crash after it: never a fatal status.
  EXPECT_EQ(ClassifyDeath(WorkerOs::kWindows, WindowsExit(70), false).kind, DeathKind::kRefusal);
  EXPECT_EQ(ClassifyDeath(WorkerOs::kWindows, WindowsExit(70), true).kind, DeathKind::kCrash);
  // The parent's own kill (TerminateJobObject with its status) is not the worker's death.
  const DeathVerdict killed = ClassifyDeath(WorkerOs::kWindows, WindowsExit(kWindowsParentKillExitCode), true);
  EXPECT_EQ(killed.kind, DeathKind::kParentKill);
  EXPECT_EQ(killed.description, "exited with status 0x4b494c4c (killed by the parent)");
  EXPECT_EQ(ClassifyDeath(WorkerOs::kWindows, WindowsExit(kWindowsCpuLimitExitCode), true).kind, DeathKind::kCpuLimit);
  // Other statuses are crashes, keyed the way an operator reads them.
  EXPECT_EQ(ClassifyDeath(WorkerOs::kWindows, WindowsExit(0xC0000409), true).crash_key, "status 0xc0000409");
  EXPECT_EQ(ClassifyDeath(WorkerOs::kWindows, WindowsExit(3), true).crash_key, "exit 3");
  EXPECT_EQ(ClassifyDeath(WorkerOs::kWindows, WindowsExit(0xC0000409), true).description,
            "exited with status 0xc0000409 (STATUS_STACK_BUFFER_OVERRUN)");
}

TEST(ClassifyDeath, MacosHasNoConfinementKillAndReadsItsOwnSignalNumbers) {
  // Seatbelt makes a denied call fail; SIGSYS (12 on macOS) is a crash like any other.
  const DeathVerdict sigsys = ClassifyDeath(WorkerOs::kMacos, Signalled(12), true);
  EXPECT_EQ(sigsys.kind, DeathKind::kCrash);
  EXPECT_EQ(sigsys.crash_key, "signal SIGSYS");
  EXPECT_EQ(ClassifyDeath(WorkerOs::kMacos, Signalled(31), true).crash_key, "signal signal 31");  // SIGUSR2 there
  EXPECT_EQ(ClassifyDeath(WorkerOs::kMacos, Signalled(10), true).crash_key, "signal SIGBUS");
  EXPECT_EQ(ClassifyDeath(WorkerOs::kMacos, Signalled(24), true).kind, DeathKind::kCpuLimit);
  EXPECT_EQ(ClassifyDeath(WorkerOs::kMacos, Exited(70), false).kind, DeathKind::kRefusal);
  EXPECT_EQ(ClassifyDeath(WorkerOs::kMacos, Exited(70), true).kind, DeathKind::kCrash);
  for (WorkerOs os : {WorkerOs::kMacos, WorkerOs::kWindows}) {
    for (int sig = 1; sig < 64; ++sig) {
      EXPECT_NE(ClassifyDeath(os, Signalled(sig), true).kind, DeathKind::kConfinementKill);
    }
  }
}

TEST(WorkerOs, NamesAreTheWelcomesOsValues) {
  EXPECT_STREQ(WorkerOsName(WorkerOs::kLinux), "linux");
  EXPECT_STREQ(WorkerOsName(WorkerOs::kMacos), "macos");
  EXPECT_STREQ(WorkerOsName(WorkerOs::kWindows), "windows");
  EXPECT_EQ(WorkerOsFromName("windows"), WorkerOs::kWindows);
  EXPECT_FALSE(WorkerOsFromName("Windows").has_value());
  EXPECT_EQ(kThisWorkerOs, WorkerOs::kLinux);  // this parent is built for Linux only
  EXPECT_EQ(WelcomePolicy{}.parent_os, WorkerOs::kLinux);
}

// ---- the Welcome each system requires ----

Json LinuxReport() {
  return Json{{"privileges",
               {{"uid", 1000},
                {"gid", 1000},
                {"supplementary_groups", 0},
                {"capabilities_empty", true},
                {"ambient_empty", true},
                {"bounding_set_empty", false}}},
              {"startup_checks", {{"passed", true}, {"weakened", false}}},
              {"descriptors_closed", true},
              {"no_new_privs", true},
              {"dumpable", false},
              {"landlock", {{"abi", 7}, {"kernel_abi", 7}}},
              {"seccomp", {{"installed", true}, {"tsync", true}}}};
}

// The report the Windows worker sends (its own code), parsed as the parent parses it.
Json WindowsReport() {
  confinement::windows::ConfinementReport r;
  r.thread_token_reverted = r.token_attested = r.handles_closed = r.mitigations_attested = r.handle_table_attested =
      true;
  r.handle_profile = confinement::windows::HandleProfile::kWindows2022;
  return Json::parse(r.ToJson());
}

Json MacosReport() { return Json{{"seatbelt", true}, {"descriptors_closed", true}}; }

protocol::Welcome WelcomeOf(WorkerOs os, Json confinement) {
  protocol::Welcome w;
  w.protocol = protocol::kProtocolVersion;
  w.os = WorkerOsName(os);
  w.engine = "quickjs";
  w.pid = 4242;
  w.confinement = std::move(confinement);
  return w;
}

WelcomePolicy ParentOn(WorkerOs os) {
  WelcomePolicy p;
  p.parent_os = os;
  p.kernel_landlock_abi = 7;
  p.accept_test_hooks = false;
  return p;
}

WelcomeVerdict Check(WorkerOs worker, const Json& report, WorkerOs parent) {
  return CheckWelcome(WelcomeOf(worker, report), 4242, ParentOn(parent));
}

TEST(WelcomeRule, EachSystemsParentAcceptsItsOwnWorkersReport) {
  const WelcomeVerdict linux_ok = Check(WorkerOs::kLinux, LinuxReport(), WorkerOs::kLinux);
  EXPECT_TRUE(linux_ok.accepted) << linux_ok.reason;
  const WelcomeVerdict windows_ok = Check(WorkerOs::kWindows, WindowsReport(), WorkerOs::kWindows);
  EXPECT_TRUE(windows_ok.accepted) << windows_ok.reason;
  EXPECT_EQ(windows_ok.reason,
            "thread token reverted; token, mitigations and handle table (windows-2022) attested; handles closed");
  const WelcomeVerdict macos_ok = Check(WorkerOs::kMacos, MacosReport(), WorkerOs::kMacos);
  EXPECT_TRUE(macos_ok.accepted) << macos_ok.reason;
}

TEST(WelcomeRule, AWorkerIsAcceptedOnlyOnItsOwnSystem) {
  const struct {
    WorkerOs worker, parent;
    const char* reason;
  } cases[] = {
      {WorkerOs::kWindows, WorkerOs::kLinux,
       "welcome reports os \"windows\" on a Linux parent; a Windows worker is accepted only on Windows"},
      {WorkerOs::kWindows, WorkerOs::kMacos,
       "welcome reports os \"windows\" on a macOS parent; a Windows worker is accepted only on Windows"},
      {WorkerOs::kMacos, WorkerOs::kLinux,
       "welcome reports os \"macos\" on a Linux parent; a macOS worker is accepted only on macOS"},
      {WorkerOs::kLinux, WorkerOs::kWindows,
       "welcome reports os \"linux\" on a Windows parent; a Linux worker is accepted only on Linux"},
  };
  const Json reports[] = {LinuxReport(), MacosReport(), WindowsReport()};
  for (const auto& c : cases) {
    // Whatever it reports, its own system's report or the parent's.
    for (const Json& report : reports) {
      const WelcomeVerdict v = Check(c.worker, report, c.parent);
      EXPECT_FALSE(v.accepted);
      EXPECT_EQ(v.reason, c.reason);
    }
  }
  protocol::Welcome unknown = WelcomeOf(WorkerOs::kLinux, LinuxReport());
  unknown.os = "freebsd";
  EXPECT_EQ(CheckWelcome(unknown, 4242, ParentOn(WorkerOs::kLinux)).reason,
            "welcome reports os \"freebsd\" on a Linux parent");
}

TEST(WelcomeRule, AReportClaimingAnotherSystemsConfinementIsRefused) {
  // A Linux welcome that also claims Seatbelt, or a Windows field.
  Json linux_plus = LinuxReport();
  linux_plus["seatbelt"] = true;
  EXPECT_EQ(Check(WorkerOs::kLinux, linux_plus, WorkerOs::kLinux).reason,
            "the confinement report carries \"seatbelt\", which is another system's: a Linux worker reports only "
            "Linux's confinement");
  linux_plus = LinuxReport();
  linux_plus["token_attested"] = true;
  EXPECT_FALSE(Check(WorkerOs::kLinux, linux_plus, WorkerOs::kLinux).accepted);
  // A Windows welcome carrying a Linux report (seccomp, Landlock) instead of its five fields.
  EXPECT_EQ(Check(WorkerOs::kWindows, LinuxReport(), WorkerOs::kWindows).reason,
            "the confinement report carries \"seccomp\", which is another system's: a Windows worker reports only "
            "Windows's confinement");
  Json windows_plus = WindowsReport();
  windows_plus["seatbelt"] = true;
  EXPECT_FALSE(Check(WorkerOs::kWindows, windows_plus, WorkerOs::kWindows).accepted);
  // A macOS welcome claiming seccomp, or Windows's fields.
  Json macos_plus = MacosReport();
  macos_plus["seccomp"] = Json{{"installed", true}, {"tsync", true}};
  EXPECT_FALSE(Check(WorkerOs::kMacos, macos_plus, WorkerOs::kMacos).accepted);
  EXPECT_FALSE(Check(WorkerOs::kMacos, WindowsReport(), WorkerOs::kMacos).accepted);
  // Linux's rule refuses a report of another system's shape outright.
  EXPECT_FALSE(Check(WorkerOs::kLinux, WindowsReport(), WorkerOs::kLinux).accepted);
  EXPECT_FALSE(Check(WorkerOs::kLinux, MacosReport(), WorkerOs::kLinux).accepted);
}

TEST(WelcomeRule, WindowsNeedsAllFiveFieldsTrueAndAProfileNothingElse) {
  for (const char* field : kWindowsConfinementFields) {
    Json r = WindowsReport();
    r[field] = false;
    EXPECT_EQ(Check(WorkerOs::kWindows, r, WorkerOs::kWindows).reason,
              std::string(field) + " not reported true (it is false)");
    r.erase(field);
    EXPECT_EQ(Check(WorkerOs::kWindows, r, WorkerOs::kWindows).reason,
              std::string(field) + " not reported true (it is nothing)");
    r[field] = "true";
    EXPECT_FALSE(Check(WorkerOs::kWindows, r, WorkerOs::kWindows).accepted);
  }
  Json r = WindowsReport();
  r["handle_profile"] = "windows-latest+windows-2022";  // never their union
  EXPECT_EQ(Check(WorkerOs::kWindows, r, WorkerOs::kWindows).reason,
            "handle_profile \"windows-latest+windows-2022\": the handle table must fit windows-latest or windows-2022");
  r.erase("handle_profile");
  EXPECT_FALSE(Check(WorkerOs::kWindows, r, WorkerOs::kWindows).accepted);
  r = WindowsReport();
  r["extra"] = true;
  EXPECT_EQ(Check(WorkerOs::kWindows, r, WorkerOs::kWindows).reason, "unknown confinement field \"extra\"");
  // Test hooks and pids are checked as on Linux.
  protocol::Welcome hooks = WelcomeOf(WorkerOs::kWindows, WindowsReport());
  hooks.test_hooks = true;
  EXPECT_FALSE(CheckWelcome(hooks, 4242, ParentOn(WorkerOs::kWindows)).accepted);
  EXPECT_FALSE(CheckWelcome(WelcomeOf(WorkerOs::kWindows, WindowsReport()), 4243, ParentOn(WorkerOs::kWindows)).accepted);
}

TEST(WelcomeRule, MacosNeedsSeatbeltAndClosedDescriptors) {
  Json r = MacosReport();
  r["seatbelt"] = false;
  EXPECT_EQ(Check(WorkerOs::kMacos, r, WorkerOs::kMacos).reason, "seatbelt not reported true (it is false)");
  r = MacosReport();
  r.erase("descriptors_closed");
  EXPECT_FALSE(Check(WorkerOs::kMacos, r, WorkerOs::kMacos).accepted);
  r = MacosReport();
  r["sandbox_profile"] = "permissive.sb";
  EXPECT_EQ(Check(WorkerOs::kMacos, r, WorkerOs::kMacos).reason, "unknown confinement field \"sandbox_profile\"");
}

}  // namespace
}  // namespace basal
