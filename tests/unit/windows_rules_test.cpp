// The Windows sandbox's rules as data, checked line by line against the design (the sandbox
// design, Windows), on Linux and, cross-built, under Wine: the handle inventory allowlist over
// the production inventories and every way to break them, the tokens, the mitigations, the job's
// limits per profile and the worker's environment. Pure functions: nothing here needs Windows.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "confinement/windows/handle_allowlist.h"
#include "confinement/windows/mitigation_rules.h"
#include "confinement/windows/token_rules.h"
#include "parent/platform/windows/job_limits.h"

namespace basal {
namespace {

using namespace confinement::windows;

constexpr HandleProfile kLatest = HandleProfile::kWindowsLatest;
constexpr HandleProfile k2022 = HandleProfile::kWindows2022;

HandleRecord Unnamed(const char* type, uint32_t access) { return {type, access, false, StdioRole::kNone, ""}; }

size_t Count(const std::vector<HandleRecord>& inventory, const std::string& type) {
  size_t n = 0;
  for (const HandleRecord& h : inventory) n += h.type == type;
  return n;
}

// ---- the table itself, as the design prints it ----

TEST(HandleTable, RowsAreTheDesignsTable) {
  struct Want {
    const char* label;
    uint32_t access, latest, win2022, latest_production, win2022_production;
    bool exact;
  };
  const Want want[] = {
      {"File stdin", 0x120189, 1, 1, 1, 1, true},
      {"File stdout/stderr", 0x120196, 2, 2, 2, 2, true},
      {"Directory \\KnownDlls", 0x3, 1, 1, 1, 1, true},
      {"Event", 0x1f0003, 7, 7, 6, 6, false},
      {"IoCompletion", 0x1f0003, 2, 2, 2, 2, false},
      {"TpWorkerFactory", 0xf00ff, 2, 2, 2, 2, false},
      {"IRTimer", 0x100002, 4, 4, 4, 4, false},
      {"WaitCompletionPacket", 0x1, 6, 5, 6, 5, false},
      {"Semaphore", 0x100003, 0, 2, 0, 2, false},
      {"SchedulerSharedData", 0x1, 1, 0, 1, 0, false},
  };
  ASSERT_EQ(std::size(kHandleTable), std::size(want));
  for (size_t i = 0; i < std::size(want); ++i) {
    const HandleRow& row = kHandleTable[i];
    EXPECT_STREQ(row.label, want[i].label);
    EXPECT_EQ(row.access, want[i].access) << row.label;
    EXPECT_EQ(row.exact, want[i].exact) << row.label;
    EXPECT_EQ(RowLimit(row, kLatest), want[i].latest) << row.label;
    EXPECT_EQ(RowLimit(row, k2022), want[i].win2022) << row.label;
    EXPECT_EQ(RowProduction(row, kLatest), want[i].latest_production) << row.label;
    EXPECT_EQ(RowProduction(row, k2022), want[i].win2022_production) << row.label;
  }
}

TEST(HandleTable, EachProfileAllowsAtMost26AndProductionMeasured25) {
  for (HandleProfile p : kHandleProfiles) {
    uint32_t ceiling = 0, production = 0;
    for (const HandleRow& row : kHandleTable) {
      ceiling += RowLimit(row, p);
      production += RowProduction(row, p);
      EXPECT_LE(RowProduction(row, p), RowLimit(row, p)) << row.label;
      if (row.exact) {
        EXPECT_EQ(RowProduction(row, p), RowLimit(row, p)) << row.label;
      }
    }
    EXPECT_EQ(ceiling, kMaxHandles) << HandleProfileName(p);
    EXPECT_EQ(production, 25u) << HandleProfileName(p);
  }
  EXPECT_EQ(kMaxHandles, 26u);
  EXPECT_STREQ(HandleProfileName(kLatest), "windows-latest");
  EXPECT_STREQ(HandleProfileName(k2022), "windows-2022");
}

// ---- the production inventories ----

TEST(HandleInventory, EachProductionInventoryFitsItsOwnProfile) {
  const std::vector<HandleRecord> latest = ProductionInventory(kLatest);
  const std::vector<HandleRecord> w2022 = ProductionInventory(k2022);
  EXPECT_EQ(latest.size(), 25u);
  EXPECT_EQ(w2022.size(), 25u);
  InventoryVerdict v = CheckHandleInventory(latest);
  ASSERT_TRUE(v.accepted) << v.reason;
  EXPECT_EQ(v.profile, kLatest);
  EXPECT_EQ(v.reason, "25 handles fit windows-latest");
  v = CheckHandleInventory(w2022);
  ASSERT_TRUE(v.accepted) << v.reason;
  EXPECT_EQ(v.profile, k2022);
  // Each fits its own profile and not the other's.
  EXPECT_EQ(CheckInventoryAgainst(kLatest, latest), "");
  EXPECT_EQ(CheckInventoryAgainst(k2022, w2022), "");
  EXPECT_EQ(CheckInventoryAgainst(k2022, latest), "6 WaitCompletionPacket handles (access 0x00000001), more than the ceiling 5");
  EXPECT_EQ(CheckInventoryAgainst(kLatest, w2022), "2 Semaphore handles (access 0x00100003), more than the ceiling 0");
}

TEST(HandleInventory, CeilingsAreCeilingsUpToTheSeventhEvent) {
  std::vector<HandleRecord> inv = ProductionInventory(kLatest);
  inv.push_back(Unnamed("Event", 0x1f0003));  // the seventh: production used six
  EXPECT_TRUE(CheckHandleInventory(inv).accepted);
  EXPECT_EQ(inv.size(), 26u);
  inv.push_back(Unnamed("Event", 0x1f0003));  // the eighth
  const InventoryVerdict v = CheckHandleInventory(inv);
  EXPECT_FALSE(v.accepted);
  EXPECT_EQ(v.reason,
            "the handle table fits neither profile (windows-latest: 8 Event handles (access 0x001f0003), more than the "
            "ceiling 7; windows-2022: 8 Event handles (access 0x001f0003), more than the ceiling 7)");
  // Fewer than production in a ceiling row is fine (a pool that made fewer timers).
  inv = ProductionInventory(k2022);
  for (auto it = inv.begin(); it != inv.end(); ++it)
    if (it->type == "IRTimer") {
      inv.erase(it);
      break;
    }
  EXPECT_TRUE(CheckHandleInventory(inv).accepted);
}

TEST(HandleInventory, NeverTheUnionOfTheTwoProfiles) {
  // windows-2022's Semaphores with windows-latest's SchedulerSharedData: each row fits one
  // profile's ceiling, the inventory fits neither.
  std::vector<HandleRecord> inv = ProductionInventory(k2022);
  inv.push_back(Unnamed("SchedulerSharedData", 0x1));
  EXPECT_FALSE(CheckHandleInventory(inv).accepted);
  // windows-latest's six WaitCompletionPackets with one windows-2022 Semaphore.
  inv = ProductionInventory(kLatest);
  inv.push_back(Unnamed("Semaphore", 0x100003));
  const InventoryVerdict v = CheckHandleInventory(inv);
  EXPECT_FALSE(v.accepted);
  EXPECT_NE(v.reason.find("windows-latest: 1 Semaphore handles"), std::string::npos) << v.reason;
  EXPECT_NE(v.reason.find("windows-2022: 6 WaitCompletionPacket handles"), std::string::npos) << v.reason;
}

TEST(HandleInventory, StdioAndKnownDllsAreExact) {
  for (const char* what : {"stdin", "stdout", "stderr", "KnownDlls"}) {
    std::vector<HandleRecord> inv = ProductionInventory(kLatest);
    for (auto it = inv.begin(); it != inv.end(); ++it) {
      const bool hit = (std::string(what) == "stdin" && it->stdio == StdioRole::kStdin) ||
                       (std::string(what) == "stdout" && it->stdio == StdioRole::kStdout) ||
                       (std::string(what) == "stderr" && it->stdio == StdioRole::kStderr) ||
                       (std::string(what) == "KnownDlls" && it->name == "\\KnownDlls");
      if (hit) {
        inv.erase(it);
        break;
      }
    }
    ASSERT_EQ(inv.size(), 24u) << what;
    EXPECT_FALSE(CheckHandleInventory(inv).accepted) << what << " missing";
  }
  std::vector<HandleRecord> inv = ProductionInventory(kLatest);
  EXPECT_EQ(CheckInventoryAgainst(kLatest, {inv.begin() + 1, inv.end()}),
            "0 File stdin handles (access 0x00120189), not exactly 1");
  // A second \KnownDlls handle, and stdout standing in for stderr too.
  inv.push_back({"Directory", 0x3, false, StdioRole::kNone, "\\KnownDlls"});
  EXPECT_EQ(CheckInventoryAgainst(kLatest, inv), "2 Directory \\KnownDlls handles (access 0x00000003), not exactly 1");
  inv = ProductionInventory(kLatest);
  for (HandleRecord& h : inv)
    if (h.stdio == StdioRole::kStderr) h.stdio = StdioRole::kStdout;
  EXPECT_EQ(CheckInventoryAgainst(kLatest, inv), "two handles are the standard output");
}

TEST(HandleInventory, UnknownTypesAccessMasksNamesAndInheritableHandlesAreRefused) {
  const struct {
    HandleRecord extra;
    const char* reason;
  } cases[] = {
      // A type no row names: a process, a thread, a token, a section, a key, an ALPC port left open.
      {Unnamed("Process", 0x1fffff), "a Process handle (access 0x001fffff, not stdio): unknown type"},
      {Unnamed("Token", 0x8), "a Token handle (access 0x00000008, not stdio): unknown type"},
      {Unnamed("ALPC Port", 0x1f0001), "a ALPC Port handle (access 0x001f0001, not stdio): unknown type"},
      {Unnamed("Key", 0x20019), "a Key handle (access 0x00020019, not stdio): unknown type"},
      // A known type with another access mask (an Event with more rights than the row's).
      {Unnamed("Event", 0x1f0001), "a Event handle (access 0x001f0001, not stdio): unknown access mask, name or role for its type"},
      {Unnamed("SchedulerSharedData", 0xf0001),
       "a SchedulerSharedData handle (access 0x000f0001, not stdio): unknown access mask, name or role for its type"},
      // A File that is not stdio (KsecDD left open, a duplicate of a pipe).
      {Unnamed("File", 0x120196), "a File handle (access 0x00120196, not stdio): unknown access mask, name or role for its type"},
      // A Directory that is not \KnownDlls, and a named Event.
      {{"Directory", 0x3, false, StdioRole::kNone, "\\BaseNamedObjects"},
       "a Directory handle (access 0x00000003, not stdio, named \\BaseNamedObjects): unknown access mask, name or role "
       "for its type"},
      {{"Event", 0x1f0003, false, StdioRole::kNone, "\\Sessions\\1\\BaseNamedObjects\\x"},
       "a Event handle (access 0x001f0003, not stdio, named \\Sessions\\1\\BaseNamedObjects\\x): unknown access mask, "
       "name or role for its type"},
      // An inheritable handle beyond stdio, even of an allowed row.
      {{"Event", 0x1f0003, true, StdioRole::kNone, ""},
       "an extra inheritable Event handle (access 0x001f0003): only stdio is inherited"},
  };
  for (const auto& c : cases) {
    for (HandleProfile p : kHandleProfiles) {
      std::vector<HandleRecord> inv = ProductionInventory(p);
      inv.push_back(c.extra);
      EXPECT_EQ(CheckInventoryAgainst(p, inv), c.reason) << HandleProfileName(p);
      EXPECT_FALSE(CheckHandleInventory(inv).accepted) << c.reason;
    }
  }
  // stdin with stdout's access, and stdout with stdin's.
  std::vector<HandleRecord> inv = ProductionInventory(kLatest);
  inv[0].access = 0x120196;
  EXPECT_FALSE(CheckHandleInventory(inv).accepted);
  inv = ProductionInventory(kLatest);
  for (HandleRecord& h : inv)
    if (h.stdio == StdioRole::kStdout) h.access = 0x120189;
  EXPECT_FALSE(CheckHandleInventory(inv).accepted);
}

TEST(HandleInventory, EveryRowPastItsCeilingIsRefusedInEachProfile) {
  for (HandleProfile p : kHandleProfiles) {
    for (const HandleRow& row : kHandleTable) {
      if (row.exact) continue;
      std::vector<HandleRecord> inv = ProductionInventory(p);
      while (Count(inv, row.type) < RowLimit(row, p)) inv.push_back(Unnamed(row.type, row.access));
      EXPECT_EQ(CheckInventoryAgainst(p, inv), "") << row.label << " at its ceiling";
      inv.push_back(Unnamed(row.type, row.access));
      EXPECT_EQ(CheckInventoryAgainst(p, inv), std::to_string(RowLimit(row, p) + 1) + " " + row.label +
                                                   " handles (access " + [&] {
                                                     char b[11];
                                                     std::snprintf(b, sizeof b, "0x%08x", row.access);
                                                     return std::string(b);
                                                   }() + "), more than the ceiling " + std::to_string(RowLimit(row, p)))
          << HandleProfileName(p);
    }
  }
}

// ---- tokens ----

constexpr const char* kSid = "S-1-15-2-1-2-3-4-5-6-7";

TEST(TokenRule, TheRequiredTokensPassAtTheirStage) {
  for (TokenStage stage : {TokenStage::kSuspendedPrimary, TokenStage::kSuspendedThread, TokenStage::kAttestedPrimary}) {
    EXPECT_EQ(CheckToken(RequiredToken(stage, kSid), stage, kSid), "") << TokenStageName(stage);
    EXPECT_EQ(CheckToken(RequiredToken(stage, kSid), stage), "") << TokenStageName(stage);
  }
  // Low at birth; Untrusted once the worker lowered it; never the other way round.
  EXPECT_EQ(CheckToken(RequiredToken(TokenStage::kSuspendedPrimary, kSid), TokenStage::kAttestedPrimary),
            "integrity Low (0x1000), not Untrusted");
  EXPECT_EQ(CheckToken(RequiredToken(TokenStage::kAttestedPrimary, kSid), TokenStage::kSuspendedPrimary),
            "integrity Untrusted (0x0000), not Low");
  EXPECT_EQ(CheckToken(RequiredToken(TokenStage::kSuspendedPrimary, kSid), TokenStage::kSuspendedThread),
            "a primary token, not an impersonation token");
}

TEST(TokenRule, EveryWeakerTokenIsRefusedByName) {
  const TokenStage stage = TokenStage::kAttestedPrimary;
  auto with = [&](auto change) {
    TokenFacts t = RequiredToken(stage, kSid);
    change(t);
    return CheckToken(t, stage, kSid);
  };
  EXPECT_EQ(with([](TokenFacts& t) { t.app_container = false; }), "not an AppContainer token");
  EXPECT_EQ(with([](TokenFacts& t) { t.app_container_sid = "S-1-15-2-9-9-9-9-9-9-9"; }),
            "AppContainer SID S-1-15-2-9-9-9-9-9-9-9, not S-1-15-2-1-2-3-4-5-6-7 (cortexkit.basal.worker)");
  EXPECT_EQ(with([](TokenFacts& t) { t.security_attributes.clear(); }),
            "no WIN://NOALLAPPPKG attribute: not a less privileged AppContainer (LPAC) token");
  EXPECT_EQ(with([](TokenFacts& t) { t.capability_count = 1; }), "1 capabilities, not zero");
  EXPECT_EQ(with([](TokenFacts& t) { t.privilege_count = 1; }), "1 privileges, not none");  // SeChangeNotify, say
  EXPECT_EQ(with([](TokenFacts& t) { t.restricted_sids.clear(); }), "restricting SIDs [], not only the NULL SID S-1-0-0");
  EXPECT_EQ(with([](TokenFacts& t) { t.restricted_sids.push_back("S-1-1-0"); }),
            "restricting SIDs [S-1-0-0, S-1-1-0], not only the NULL SID S-1-0-0");
  EXPECT_EQ(with([](TokenFacts& t) { t.groups[1].attributes = kGroupEnabled | 0x3; }),
            "group S-1-5-32-545 (attributes 0x0007) is not deny-only");
  EXPECT_EQ(with([](TokenFacts& t) { t.groups[0].attributes = kGroupUseForDenyOnly | kGroupEnabled; }),
            "group S-1-1-0 (attributes 0x0014) is not deny-only");
  EXPECT_EQ(with([](TokenFacts& t) { t.integrity_rid = 0x2000; }), "integrity Medium (0x2000), not Untrusted");
  EXPECT_EQ(with([](TokenFacts& t) { t.impersonation = true; }), "an impersonation token, not a primary token");
  // The worker, which does not derive the SID, still requires a package SID (not a child's).
  TokenFacts child = RequiredToken(stage, "S-1-15-2-1-2-3-4-5-6-7-8-9-10-11");
  EXPECT_EQ(CheckToken(child, stage),
            "AppContainer SID S-1-15-2-1-2-3-4-5-6-7-8-9-10-11 is not a package SID (S-1-15-2- and seven sub-authorities)");
  EXPECT_NE(CheckToken(RequiredToken(stage, "S-1-5-21-1-2-3-4-5-6"), stage), "");
}

// ---- mitigations ----

TEST(MitigationRule, TheRequiredSetPassesAndEachMissingOneIsNamed) {
  EXPECT_EQ(CheckMitigations(RequiredMitigations()), "");
  EXPECT_EQ(CheckMitigations(MitigationFacts{}), "dynamic code is not prohibited (ProhibitDynamicCode)");
  bool MitigationFacts::*const fields[] = {
      &MitigationFacts::prohibit_dynamic_code,      &MitigationFacts::no_child_process_creation,
      &MitigationFacts::win32k_disabled,            &MitigationFacts::extension_points_disabled,
      &MitigationFacts::microsoft_signed_only,      &MitigationFacts::no_remote_images,
      &MitigationFacts::no_low_label_images,        &MitigationFacts::prefer_system32_images,
      &MitigationFacts::strict_handle_checks,       &MitigationFacts::strict_handle_checks_permanent};
  for (auto field : fields) {
    MitigationFacts m = RequiredMitigations();
    m.*field = false;
    EXPECT_NE(CheckMitigations(m), "");
  }
  MitigationFacts m = RequiredMitigations();
  m.dynamic_code_thread_opt_out = true;
  EXPECT_EQ(CheckMitigations(m), "a thread may opt out of the dynamic-code policy (AllowThreadOptOut)");
  m = RequiredMitigations();
  m.dynamic_code_remote_downgrade = true;
  EXPECT_EQ(CheckMitigations(m), "the dynamic-code policy may be downgraded remotely (AllowRemoteDowngrade)");
}

TEST(MitigationRule, TheLaunchersCreationFlagsAreTheDesignsList) {
  // Each ALWAYS_ON value (01 in its two-bit field), none of the opt-out or ALLOW_STORE forms.
  EXPECT_EQ(kCreationMitigations, (1ULL << 24) | (1ULL << 28) | (1ULL << 32) | (1ULL << 36) | (1ULL << 44) |
                                      (1ULL << 52) | (1ULL << 56) | (1ULL << 60));
  EXPECT_EQ(kCreationMitigations & (0x2ULL << 36), 0u) << "PROHIBIT_DYNAMIC_CODE_ALWAYS_ON_ALLOW_OPT_OUT";
  EXPECT_EQ(kCreationChildProcessRestricted, 1u);
}

// ---- the job and the environment ----

TEST(JobRule, EachProfileHasItsOwnCommitLimitAboveItsHeapBudget) {
  const uint64_t heap = uint64_t{64} << 20;
  auto flow = JobLimitsFor(WorkerProfile::kFlow, heap, 600);
  auto codemode = JobLimitsFor(WorkerProfile::kCodemode, heap, 600);
  ASSERT_TRUE(flow.ok() && codemode.ok());
  EXPECT_EQ(flow->process_memory_bytes, heap + kFlowCommitHeadroomBytes);
  EXPECT_EQ(codemode->process_memory_bytes, heap + kCodemodeCommitHeadroomBytes);
  EXPECT_GT(flow->process_memory_bytes, heap);
  EXPECT_GT(codemode->process_memory_bytes, heap);
  EXPECT_NE(flow->process_memory_bytes, codemode->process_memory_bytes);
  for (const JobLimits& j : {*flow, *codemode}) {
    EXPECT_EQ(j.active_process_limit, 1u);
    EXPECT_TRUE(j.limit_flags & kJobLimitKillOnJobClose);
    EXPECT_TRUE(j.limit_flags & kJobLimitActiveProcess);
    EXPECT_TRUE(j.limit_flags & kJobLimitProcessMemory);
    EXPECT_TRUE(j.limit_flags & kJobLimitDieOnUnhandledException);
    EXPECT_FALSE(j.limit_flags & kJobLimitBreakawayOk);
    EXPECT_FALSE(j.limit_flags & kJobLimitSilentBreakawayOk);
    EXPECT_EQ(j.ui_restrictions, 0xffu);  // all eight JOB_OBJECT_UILIMIT_* bits
    EXPECT_EQ(j.process_time_100ns, uint64_t{600} * 10'000'000);
    EXPECT_EQ(CheckJobLimits(j, j), "");
  }
  EXPECT_FALSE(JobLimitsFor(WorkerProfile::kFlow, 0, 600).ok());
  EXPECT_FALSE(JobLimitsFor(WorkerProfile::kFlow, ~uint64_t{0} - 1, 600).ok());
  auto no_cpu = JobLimitsFor(WorkerProfile::kFlow, heap, 0);
  ASSERT_TRUE(no_cpu.ok());
  EXPECT_FALSE(no_cpu->limit_flags & kJobLimitProcessTime);
}

TEST(JobRule, TheLauncherRefusesAJobThatDiffersInAnyLimit) {
  const JobLimits want = *JobLimitsFor(WorkerProfile::kFlow, uint64_t{64} << 20, 600);
  auto with = [&](auto change) {
    JobLimits shown = want;
    change(shown);
    return CheckJobLimits(shown, want);
  };
  EXPECT_EQ(with([](JobLimits& j) { j.limit_flags |= kJobLimitBreakawayOk; }), "the job has breakaway");
  EXPECT_EQ(with([](JobLimits& j) { j.limit_flags |= kJobLimitSilentBreakawayOk; }), "the job has silent breakaway");
  EXPECT_EQ(with([](JobLimits& j) { j.limit_flags &= ~kJobLimitKillOnJobClose; }), "the job lacks kill on job close");
  EXPECT_EQ(with([](JobLimits& j) { j.limit_flags &= ~kJobLimitActiveProcess; }), "the job lacks the active-process limit");
  EXPECT_EQ(with([](JobLimits& j) { j.active_process_limit = 2; }), "the job's active-process limit is 2, not 1");
  EXPECT_EQ(with([](JobLimits& j) { j.process_memory_bytes += 1; }),
            "the job's per-process commit limit is 335544321 bytes, not 335544320");
  EXPECT_EQ(with([](JobLimits& j) { j.ui_restrictions = 0x7f; }), "the job's UI restrictions are 0x0000007f, not 0x000000ff");
  EXPECT_EQ(with([](JobLimits& j) { j.limit_flags |= 0x4; }), "the job's limit flags are 0x0000250e, not 0x0000250a");
  EXPECT_EQ(with([](JobLimits& j) { j.process_time_100ns *= 2; }),
            "the job's per-process CPU time limit is 12000000000 x 100 ns, not 6000000000");
}

TEST(EnvironmentRule, OnlySystemRoot) {
  const std::wstring block = WorkerEnvironmentBlock(L"C:\\Windows");
  EXPECT_EQ(block, std::wstring(L"SystemRoot=C:\\Windows") + L'\0' + L'\0');
  EXPECT_EQ(CheckWorkerEnvironment(block), "");
  ASSERT_EQ(EnvironmentVariables(block).size(), 1u);
  EXPECT_EQ(EnvironmentVariables(block)[0], L"SystemRoot=C:\\Windows");
  std::wstring two = std::wstring(L"SystemRoot=C:\\Windows") + L'\0' + L"PATH=C:\\" + L'\0' + L'\0';
  EXPECT_EQ(CheckWorkerEnvironment(two), "2 environment variables, not only SystemRoot");
  std::wstring other = std::wstring(L"TEMP=C:\\") + L'\0' + L'\0';
  EXPECT_EQ(CheckWorkerEnvironment(other), "the environment holds TEMP=C:\\, not SystemRoot");
  EXPECT_EQ(CheckWorkerEnvironment(WorkerEnvironmentBlock(L"")), "SystemRoot is empty");
  EXPECT_EQ(CheckWorkerEnvironment(L"SystemRoot=C:\\Windows"), "the environment block does not end with two NULs");
  // An empty block (no variable) is not SystemRoot either.
  EXPECT_EQ(CheckWorkerEnvironment(std::wstring(2, L'\0')), "0 environment variables, not only SystemRoot");
}

}  // namespace
}  // namespace basal
