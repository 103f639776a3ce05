// ParseProcStatus on sample /proc/PID/status texts: every field the welcome check reads, refused
// when missing, repeated or not what the kernel prints; and on this process's own status.
#include "parent/platform/linux/proc_status.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

namespace basal {
namespace {

// A worker's status as Linux 6.x prints it (trimmed of fields the parser skips, plus a few kept
// to show that unknown fields are skipped).
constexpr const char* kWorker =
    "Name:\tck-basal-worker\n"
    "Umask:\t0022\n"
    "State:\tS (sleeping)\n"
    "Tgid:\t4242\n"
    "Pid:\t4242\n"
    "PPid:\t4200\n"
    "Uid:\t65534\t65534\t65534\t65534\n"
    "Gid:\t65534\t65534\t65534\t65534\n"
    "FDSize:\t64\n"
    "Groups:\t\n"
    "Threads:\t1\n"
    "CapInh:\t0000000000000000\n"
    "CapPrm:\t0000000000000000\n"
    "CapEff:\t0000000000000000\n"
    "CapBnd:\t0000000000000000\n"
    "CapAmb:\t0000000000000000\n"
    "NoNewPrivs:\t1\n"
    "Seccomp:\t2\n"
    "Seccomp_filters:\t1\n"
    "Speculation_Store_Bypass:\tthread force mitigated\n";

std::string Replace(std::string text, const std::string& line, const std::string& with) {
  const size_t at = text.find(line);
  if (at == std::string::npos) ADD_FAILURE() << "no line " << line;
  else text.replace(at, line.size(), with);
  return text;
}

std::string ErrorOf(const std::string& text) {
  auto s = ParseProcStatus(text);
  EXPECT_FALSE(s) << text;
  return s ? std::string() : s.error().message;
}

TEST(ProcStatus, ParsesAWorkersStatus) {
  auto s = ParseProcStatus(kWorker);
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->state, 'S');
  EXPECT_EQ(s->uid, (std::array<uint32_t, 4>{65534, 65534, 65534, 65534}));
  EXPECT_EQ(s->gid, (std::array<uint32_t, 4>{65534, 65534, 65534, 65534}));
  EXPECT_TRUE(s->groups.empty());
  EXPECT_EQ(s->cap_eff, 0u);
  EXPECT_EQ(s->cap_bnd, 0u);
  EXPECT_EQ(s->no_new_privs, 1);
  EXPECT_EQ(s->seccomp, 2);
  ASSERT_TRUE(s->seccomp_filters.has_value());
  EXPECT_EQ(*s->seccomp_filters, 1u);
  ASSERT_EQ(s->shown.size(), 12u);
  EXPECT_EQ(s->shown[1], (std::pair<std::string, std::string>{"Uid", "65534\t65534\t65534\t65534"}));
}

TEST(ProcStatus, ReadsCapabilityMasksGroupsAndMixedIds) {
  std::string t = Replace(kWorker, "CapEff:\t0000000000000000", "CapEff:\t000001fffeffffff");
  t = Replace(t, "Groups:\t", "Groups:\t0 4 27 ");
  t = Replace(t, "Uid:\t65534\t65534\t65534\t65534", "Uid:\t1000\t0\t1000\t0");
  auto s = ParseProcStatus(t);
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->cap_eff, 0x000001fffeffffffull);
  EXPECT_EQ(s->groups, (std::vector<uint32_t>{0, 4, 27}));
  EXPECT_EQ(s->uid, (std::array<uint32_t, 4>{1000, 0, 1000, 0}));
}

TEST(ProcStatus, SeccompFiltersIsOptionalBeforeLinux59) {
  auto s = ParseProcStatus(Replace(kWorker, "Seccomp_filters:\t1\n", ""));
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_FALSE(s->seccomp_filters.has_value());
}

TEST(ProcStatus, RefusesAMissingField) {
  for (const char* line : {"State:\tS (sleeping)\n", "Uid:\t65534\t65534\t65534\t65534\n", "Gid:\t65534\t65534\t65534\t65534\n",
                           "Groups:\t\n", "CapInh:\t0000000000000000\n", "CapPrm:\t0000000000000000\n",
                           "CapEff:\t0000000000000000\n", "CapBnd:\t0000000000000000\n", "CapAmb:\t0000000000000000\n",
                           "NoNewPrivs:\t1\n", "Seccomp:\t2\n"}) {
    const std::string line_s = line;
    const std::string key = line_s.substr(0, line_s.find(':'));
    EXPECT_EQ(ErrorOf(Replace(kWorker, line, "")), "/proc status has no " + key + ": line");
  }
  EXPECT_EQ(ErrorOf(""), "/proc status has no State: line");
}

TEST(ProcStatus, RefusesJunkValuesNamingTheFieldAndValue) {
  struct Case {
    const char* line;
    const char* junk;
    const char* error;
  };
  const Case cases[] = {
      {"Uid:\t65534\t65534\t65534\t65534", "Uid:\t65534\t65534\t65534",
       "/proc status field Uid: \"65534\t65534\t65534\" is not four ids (real, effective, saved, filesystem)"},
      {"Uid:\t65534\t65534\t65534\t65534", "Uid:\t65534\t65534\t65534\t4294967296",
       "/proc status field Uid: \"65534\t65534\t65534\t4294967296\" is not four decimal ids"},
      {"Gid:\t65534\t65534\t65534\t65534", "Gid:\t-1\t65534\t65534\t65534",
       "/proc status field Gid: \"-1\t65534\t65534\t65534\" is not four decimal ids"},
      {"Groups:\t", "Groups:\t0 x", "/proc status field Groups: \"0 x\" is not a list of decimal group ids"},
      {"CapEff:\t0000000000000000", "CapEff:\t000000000000000",
       "/proc status field CapEff: \"000000000000000\" is not a capability mask of 16 hexadecimal digits"},
      {"CapBnd:\t0000000000000000", "CapBnd:\t000000000000000g",
       "/proc status field CapBnd: \"000000000000000g\" is not a capability mask of 16 hexadecimal digits"},
      {"CapAmb:\t0000000000000000", "CapAmb:\t-000000000000001",
       "/proc status field CapAmb: \"-000000000000001\" is not a capability mask of 16 hexadecimal digits"},
      {"NoNewPrivs:\t1", "NoNewPrivs:\t2", "/proc status field NoNewPrivs: \"2\" is not 0 or 1"},
      {"NoNewPrivs:\t1", "NoNewPrivs:\t", "/proc status field NoNewPrivs: \"\" is not 0 or 1"},
      {"Seccomp:\t2", "Seccomp:\t3", "/proc status field Seccomp: \"3\" is not 0, 1 or 2"},
      {"Seccomp:\t2", "Seccomp:\t22", "/proc status field Seccomp: \"22\" is not 0, 1 or 2"},
      {"Seccomp_filters:\t1", "Seccomp_filters:\tmany", "/proc status field Seccomp_filters: \"many\" is not a decimal count"},
      {"Seccomp_filters:\t1", "Seccomp_filters:\t+1", "/proc status field Seccomp_filters: \"+1\" is not a decimal count"},
      {"State:\tS (sleeping)", "State:\t?", "/proc status field State: \"?\" is not a state letter"},
  };
  for (const Case& c : cases) EXPECT_EQ(ErrorOf(Replace(kWorker, c.line, c.junk)), c.error) << c.junk;
}

TEST(ProcStatus, RefusesARepeatedField) {
  EXPECT_EQ(ErrorOf(std::string(kWorker) + "Seccomp:\t2\n"), "/proc status field Seccomp appears twice");
}

TEST(ProcStatus, ParsesThisProcessesOwnStatus) {
  auto text = ReadProcStatus(getpid());
  ASSERT_TRUE(text) << text.error().message;
  auto s = ParseProcStatus(*text);
  ASSERT_TRUE(s) << s.error().message << "\n" << *text;
  EXPECT_EQ(s->uid[0], getuid());
  EXPECT_EQ(s->gid[0], getgid());
  EXPECT_EQ(s->seccomp, 0) << "the test process runs without a filter";
}

TEST(ProcStatus, ReadingAProcessThatDoesNotExistNamesThePath) {
  auto text = ReadProcStatus(0x7ffffff0);
  ASSERT_FALSE(text);
  EXPECT_NE(text.error().message.find("/proc/2147483632/status"), std::string::npos) << text.error().message;
}

// /proc/PID/limits as Linux 6.x prints it (columns padded with spaces).
constexpr const char* kLimits =
    "Limit                     Soft Limit           Hard Limit           Units     \n"
    "Max cpu time              2                    343                  seconds   \n"
    "Max file size             unlimited            unlimited            bytes     \n"
    "Max data size             unlimited            unlimited            bytes     \n"
    "Max address space         335544320            335544320            bytes     \n"
    "Max nice priority         0                    0                    \n";

TEST(ProcLimits, ParsesCpuTimeAndAddressSpace) {
  auto l = ParseProcLimits(kLimits);
  ASSERT_TRUE(l) << l.error().message;
  EXPECT_EQ(l->cpu_seconds.soft, 2u);
  EXPECT_EQ(l->cpu_seconds.hard, 343u);
  EXPECT_EQ(l->address_space_bytes.soft, 335544320u);
  EXPECT_EQ(l->address_space_bytes.hard, 335544320u);
  auto unlimited = ParseProcLimits(Replace(kLimits, "Max cpu time              2                    343    ",
                                           "Max cpu time              unlimited            unlimited"));
  ASSERT_TRUE(unlimited) << unlimited.error().message;
  EXPECT_FALSE(unlimited->cpu_seconds.soft.has_value());
  EXPECT_FALSE(unlimited->cpu_seconds.hard.has_value());
}

TEST(ProcLimits, RefusesMissingRepeatedAndJunkLines) {
  auto missing = ParseProcLimits(Replace(kLimits, "Max address space ", "Max adress space  "));
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().message, "/proc limits has no Max address space line");
  auto twice = ParseProcLimits(std::string(kLimits) + "Max cpu time              1                    1                    seconds\n");
  ASSERT_FALSE(twice);
  EXPECT_EQ(twice.error().message, "/proc limits line Max cpu time appears twice");
  auto junk = ParseProcLimits(Replace(kLimits, "335544320            335544320            bytes",
                                      "335544320            -1                   bytes"));
  ASSERT_FALSE(junk);
  EXPECT_EQ(junk.error().message,
            "/proc limits line Max address space: \"335544320 -1 bytes\" is not a soft and a hard limit in bytes");
  auto unit = ParseProcLimits(Replace(kLimits, "343                  seconds", "343                  bytes  "));
  ASSERT_FALSE(unit);
  EXPECT_EQ(unit.error().message, "/proc limits line Max cpu time: \"2 343 bytes\" is not a soft and a hard limit in seconds");
}

TEST(ProcLimits, ParsesThisProcessesOwnLimits) {
  auto text = ReadProcLimits(getpid());
  ASSERT_TRUE(text) << text.error().message;
  auto l = ParseProcLimits(*text);
  EXPECT_TRUE(l) << l.error().message << "\n" << *text;
}

}  // namespace
}  // namespace basal
