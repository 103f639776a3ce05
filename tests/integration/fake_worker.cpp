// A stand-in for ck-basal-worker that misbehaves on purpose, so the parent's validation of
// hostile worker output is tested against real processes. Its file name picks the fault.
// Unless the fault says otherwise it confines itself just enough for the kernel's view to pass
// the parent's check (the --uid/--gid credential drop of the real worker, no_new_privs, and a
// seccomp filter that allows everything), sends a welcome that passes the parent's check (unless
// the fault is in the welcome), reads load and activate, then commits its fault.
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "confinement/linux/credentials.h"
#include "confinement/linux/limits.h"
#include "protocol/frame.h"
#include "protocol/messages.h"

namespace {

#ifdef BASAL_TEST_HOOKS
constexpr bool kTestHooks = true;
#else
constexpr bool kTestHooks = false;
#endif

void WriteAll(const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = write(1, s.data() + off, s.size() - off);
    if (n <= 0) _exit(0);
    off += static_cast<size_t>(n);
  }
}
void Send(const std::string& payload) { WriteAll(basal::protocol::EncodeFrame(payload)); }

basal::protocol::FrameDecoder decoder;
basal::protocol::Json Read() {
  std::string payload;
  while (decoder.Next(payload) != basal::protocol::FrameDecoder::Status::kFrame) {
    char buf[65536];
    const ssize_t n = read(0, buf, sizeof buf);
    if (n <= 0) _exit(0);
    decoder.Feed(buf, static_cast<size_t>(n));
  }
  return basal::protocol::Json::parse(payload);
}

[[noreturn]] void Die(const std::string& why) {
  const std::string line = "fake-worker: " + why + "\n";
  (void)!write(2, line.data(), line.size());
  _exit(3);
}

// The RLIMIT_AS and RLIMIT_CPU the parent asked for (--address-space-limit, --cpu-limit), or 0;
// set once by main.
uint64_t address_space_limit = 0;
uint64_t cpu_soft_seconds = 0, cpu_hard_seconds = 0;
void CpuLimit(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string_view(argv[i]) != "--cpu-limit") continue;
    char* end = nullptr;
    cpu_soft_seconds = std::strtoull(argv[i + 1], &end, 10);
    cpu_hard_seconds = *end == ':' ? std::strtoull(end + 1, nullptr, 10) : 0;
  }
}
uint64_t AddressSpaceLimit(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string_view(argv[i]) == "--address-space-limit") return std::strtoull(argv[i + 1], nullptr, 10);
  return 0;
}

// The ids the parent asked for (--uid/--gid), or none.
std::optional<basal::confinement::WorkerIdentity> RunAs(int argc, char** argv) {
  std::optional<uint32_t> uid, gid;
  for (int i = 1; i + 1 < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--uid") uid = static_cast<uint32_t>(std::strtoul(argv[i + 1], nullptr, 10));
    if (a == "--gid") gid = static_cast<uint32_t>(std::strtoul(argv[i + 1], nullptr, 10));
  }
  if (!uid || !gid) return std::nullopt;
  return basal::confinement::WorkerIdentity{*uid, *gid};
}

// A filter that allows every call: enough for the kernel to show "Seccomp: 2".
void InstallAllowAllFilter() {
  sock_filter allow = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  sock_fprog prog{1, &allow};
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0) Die(std::string("seccomp: ") + std::strerror(errno));
}

struct Claims {
  int64_t protocol = 1;
  int64_t pid = getpid();
  bool test_hooks = kTestHooks;
  bool seccomp = true;
  basal::protocol::Json landlock_abi;  // null: what the kernel offers, at most 7
};

// A welcome that claims full confinement (unless `claims` says otherwise), with the privileges
// the parent expects: the --uid/--gid it passed, or this process's own uid and gid.
std::string Welcome(const std::optional<basal::confinement::WorkerIdentity>& run_as, const Claims& claims = {}) {
  long abi = syscall(SYS_landlock_create_ruleset, nullptr, 0, 1u);
  if (abi < 0) abi = 0;
  if (abi > 7) abi = 7;
  const basal::protocol::Json claimed_abi = claims.landlock_abi.is_null() ? basal::protocol::Json(abi) : claims.landlock_abi;
  const basal::protocol::Json privileges = {{"uid", run_as ? run_as->uid : getuid()},
                                            {"gid", run_as ? run_as->gid : getgid()},
                                            {"supplementary_groups", 0},
                                            {"capabilities_empty", true},
                                            {"ambient_empty", true},
                                            {"bounding_set_empty", run_as.has_value()}};
  basal::protocol::Json c = {{"address_space_limit", address_space_limit},
                             {"cpu_limit", {{"soft_seconds", cpu_soft_seconds}, {"hard_seconds", cpu_hard_seconds}}},
                             {"privileges", privileges},
                             {"startup_checks", {{"passed", true}, {"weakened", false}}},
                             {"descriptors_closed", true},
                             {"no_new_privs", true},
                             {"dumpable", false},
                             {"landlock", {{"abi", claimed_abi}, {"kernel_abi", abi}}},
                             {"seccomp", {{"installed", claims.seccomp}, {"tsync", claims.seccomp}}}};
  return basal::protocol::Json{{"type", "welcome"}, {"protocol", claims.protocol}, {"os", "linux"},
                               {"engine", "fake"},  {"pid", claims.pid},           {"test_hooks", claims.test_hooks},
                               {"confinement", c}}
      .dump();
}

// Spins until this process has used `ms` of CPU.
void BurnCpu(int64_t ms) {
  for (;;) {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    if (t.tv_sec * 1000 + t.tv_nsec / 1'000'000 >= ms) return;
  }
}

}  // namespace

int main(int argc, char** argv) {
  // The fault is named by the file name it was started as ("fake-worker--garbage_frame", a symlink
  // the test makes): a release parent passes a worker no switches, only `--parent-pid N` (and
  // `--uid N --gid N` when it runs as root).
  std::string fault = argv[0];
  fault = fault.substr(fault.rfind('/') + 1);
  const size_t dashes = fault.find("--");
  fault = dashes == std::string::npos ? "" : fault.substr(dashes + 2);
  const std::optional<basal::confinement::WorkerIdentity> run_as = RunAs(argc, argv);
  address_space_limit = AddressSpaceLimit(argc, argv);
  CpuLimit(argc, argv);

  // Lies: a perfect welcome from a process that did not confine itself at all.
  if (fault == "unconfined_welcome") {
    Send(Welcome(run_as));
    for (;;) pause();
  }
  // Confined as the real worker is, except for one property the welcome still claims.
  const bool keep_privileges = fault == "keeps_privileges";        // no credential drop
  const bool without_no_new_privs = fault == "without_no_new_privs";  // needs CAP_SYS_ADMIN: root only
  // The limits the parent passed (a fault claims them in the welcome without setting them).
  if (address_space_limit > 0 && fault != "ignores_address_space_limit") {
    const basal::confinement::StepStatus s = basal::confinement::LimitAddressSpace(address_space_limit);
    if (!s.ok()) Die("limits: " + s.reason());
  }
  if (cpu_hard_seconds > 0 && fault != "ignores_cpu_limit") {
    const basal::confinement::StepStatus s = basal::confinement::LimitCpuTime(cpu_soft_seconds, cpu_hard_seconds);
    if (!s.ok()) Die("limits: " + s.reason());
  }
  if (!without_no_new_privs && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) Die("no_new_privs");
  InstallAllowAllFilter();
  if (!keep_privileges) {
    basal::confinement::CredentialReport report;
    const basal::confinement::StepStatus s = basal::confinement::DropCredentials(run_as, report);
    if (!s.ok()) Die("privileges: " + s.reason());
  }
  if (keep_privileges || without_no_new_privs || fault == "ignores_address_space_limit" || fault == "ignores_cpu_limit") {
    Send(Welcome(run_as));
    for (;;) pause();
  }

  // Another system's welcome from a process whose kernel view passes: the Welcome rule refuses it.
  if (fault == "windows_welcome") {  // everything a Windows worker reports, to a Linux parent
    Send("{\"type\":\"welcome\",\"protocol\":1,\"os\":\"windows\",\"engine\":\"quickjs 2021-03-27\",\"pid\":" +
         std::to_string(getpid()) +
         ",\"test_hooks\":false,\"confinement\":{\"thread_token_reverted\":true,\"token_attested\":true,"
         "\"handles_closed\":true,\"mitigations_attested\":true,\"handle_table_attested\":true,"
         "\"handle_profile\":\"windows-latest\"}}");
    for (;;) pause();
  }
  if (fault == "linux_welcome_claiming_seatbelt") {
    basal::protocol::Json w = basal::protocol::Json::parse(Welcome(run_as));
    w["confinement"]["seatbelt"] = true;
    Send(basal::protocol::DumpJson(w));
    for (;;) pause();
  }

  // Welcomes whose integers would wrap if read into a narrower type, or that report test hooks.
  if (fault == "welcome_protocol_wraps") {  // 2^32 + 1: an int would read 1
    Claims c;
    c.protocol = 4294967297;
    Send(Welcome(run_as, c));
    for (;;) pause();
  }
  if (fault == "welcome_pid_wraps") {  // 2^32 + the pid: an int would read the pid
    Claims c;
    c.pid = (int64_t{1} << 32) + getpid();
    Send(Welcome(run_as, c));
    for (;;) pause();
  }
  if (fault == "welcome_landlock_abi_wraps") {  // 2^32 + 7: an int would read 7
    Claims c;
    c.landlock_abi = 4294967303LL;
    Send(Welcome(run_as, c));
    for (;;) pause();
  }
  if (fault == "welcome_then_sigkill") {  // killed from outside right after its welcome (the soak saw it)
    Send(Welcome(run_as));
    signal(SIGKILL, SIG_DFL);
    raise(SIGKILL);
  }
  if (fault == "test_hooks_welcome") {  // accepted only by a test-hooks parent: then it serves
    Claims c;
    c.test_hooks = true;
    Send(Welcome(run_as, c));
    Read();  // load
    Send(R"({"type":"loaded","ok":true})");
    const auto act = Read();
    Send(R"({"type":"done","activation":)" + std::to_string(act["activation"].get<int64_t>()) +
         R"(,"cpu_us":0,"ok":"served"})");
    for (;;) Read();
  }

  if (fault == "no_welcome") {
    for (;;) pause();
  }
  if (fault == "refuse_confinement") {
    // What the real worker does when a layer cannot be installed: a named reason, exit 70.
    const char why[] = "ck-basal-worker: landlock: ruleset creation failed: Function not implemented\n";
    (void)!write(2, why, sizeof why - 1);
    return 70;
  }
  if (fault == "hostile_stderr") {
    // A last stderr line (which the parent quotes) that would clear the operator's screen, start a
    // CSI, reverse the text and carry bytes that are not UTF-8, then a confinement refusal.
    const char why[] = "ck-basal-worker: \x1b[2J \xc2\x9b \x7f \0 \xe2\x80\xae \xff \xc0\x80 caf\xc3\xa9\rbasal: ok\n";
    (void)!write(2, why, sizeof why - 1);
    return 70;
  }
  if (fault == "hostile_welcome") {
    // A welcome whose strings would act on the operator's terminal when `basal doctor` shows them.
    basal::protocol::Json w = basal::protocol::Json::parse(Welcome(run_as));
    const char text[] = "\x1b[2J \xc2\x9b \x7f \0 \xe2\x80\xae caf\xc3\xa9";
    const std::string hostile(text, sizeof text - 1);
    w["engine"] = hostile;
    w["confinement"]["note"] = hostile;
    Send(w.dump());
    for (;;) pause();
  }
  if (fault == "welcome_without_seccomp") {
    Claims c;
    c.seccomp = false;
    Send(Welcome(run_as, c));
    for (;;) pause();
  }
  if (fault == "garbage_before_welcome") {
    WriteAll("hello parent, I am not a frame at all........");
    for (;;) pause();
  }
  Send(Welcome(run_as));
  Read();  // load
  if (fault == "exit70_after_welcome") _exit(70);  // a crash now, not a confinement refusal
  if (fault == "load_error_line_wraps") {  // 2^32 + 7: an int would read 7
    Send(R"({"type":"loaded","ok":false,"error":{"kind":"script_error","name":"SyntaxError","message":"m","line":4294967303}})");
    for (;;) Read();
  }
  if (fault == "hostile_load_error") {  // a syntax error whose name and message would act on a terminal
    basal::protocol::Json e = {{"kind", "script_error"}, {"line", 7}};
    const char text[] = "\x1b[2J \xc2\x9b \x7f \0 \xe2\x80\xae caf\xc3\xa9\nbasal: ok";
    e["name"] = "Syntax\x1b[31mError";
    e["message"] = std::string(text, sizeof text - 1);
    Send(basal::protocol::Json{{"type", "loaded"}, {"ok", false}, {"error", e}}.dump());
    for (;;) Read();
  }
  if (fault == "call_while_loading") {  // a host call before `loaded`: no activation can own it
    Send(R"({"type":"call","activation":1,"id":1,"name":"log","args":{"level":"log","message":"x"}})");
    for (;;) Read();
  }
  Send(R"({"type":"loaded","ok":true})");
  const auto act = Read();
  const int64_t aid = act["activation"].get<int64_t>();
  const std::string a = std::to_string(aid);
  if (fault == "reports_poll") {
    // Not a fault: each activation ends with what the parent said about polling (protocol's `poll`)
    // in its `activate` and in the answer to its one host call, and how many `poll` messages came
    // before its `activate` and before that answer: [activate's, result's, polls, polls before the
    // result]. The host call is the one the input names (a string), else `log`.
    for (basal::protocol::Json next = act;; next = Read()) {
      int polls = 0;
      for (; next["type"] == "poll"; next = Read()) ++polls;
      const std::string id = std::to_string(next["activation"].get<int64_t>());
      const bool activate_poll = next.value("poll", false);
      const std::string name = next["input"].is_string() ? next["input"].get<std::string>() : "log";
      const std::string args = name == "log" ? R"({"level":"info","message":"x"})" : "null";
      Send(R"({"type":"call","activation":)" + id + R"(,"id":1,"name":")" + name + R"(","args":)" + args + "}");
      int answer_polls = 0;
      basal::protocol::Json answer = Read();
      for (; answer["type"] == "poll"; answer = Read()) ++answer_polls;
      const bool result_poll = answer.value("poll", false);
      Send(R"({"type":"done","activation":)" + id + R"(,"cpu_us":0,"ok":[)" + (activate_poll ? "true" : "false") +
           "," + (result_poll ? "true" : "false") + "," + std::to_string(polls) + "," + std::to_string(answer_polls) +
           "]}");
    }
  }
  if (fault == "malformed_json") {
    Send("{\"type\":\"done\",");
  } else if (fault == "oversized") {
    const char header[4] = {0, 0, 0, 0x7f};  // ~2 GiB announced
    WriteAll(std::string(header, 4));
    for (;;) pause();
  } else if (fault == "wrong_type") {
    Send(R"({"type":"welcome","protocol":1,"os":"linux","engine":"x","pid":1,"test_hooks":true,"confinement":{}})");
  } else if (fault == "unknown_activation") {
    Send(R"({"type":"done","activation":)" + std::to_string(aid + 1000) + R"(,"cpu_us":0,"ok":1})");
  } else if (fault == "reused_call_id") {
    Send(R"({"type":"call","activation":)" + a + R"(,"id":1,"name":"log","args":{"level":"info","message":"a"}})");
    Send(R"({"type":"call","activation":)" + a + R"(,"id":1,"name":"log","args":{"level":"info","message":"b"}})");
  } else if (fault == "die_mid_call") {
    Send(R"({"type":"call","activation":)" + a + R"(,"id":1,"name":"log","args":{"level":"info","message":"bye"}})");
    _exit(3);
  } else if (fault == "segv_mid_call") {
    Send(R"({"type":"call","activation":)" + a + R"(,"id":1,"name":"log","args":{"level":"info","message":"bye"}})");
    signal(SIGSEGV, SIG_DFL);
    raise(SIGSEGV);
  } else if (fault == "close_stdout") {
    close(1);
    for (;;) pause();
  } else if (fault == "truncated_frame") {
    WriteAll(std::string("\x20\x00\x00\x00{\"type\"", 11));
    _exit(0);
  } else if (fault == "done_cpu_us_negative") {
    Send(R"({"type":"done","activation":)" + a + R"(,"cpu_us":-1,"ok":1})");
  } else if (fault == "done_cpu_us_huge") {  // 2^64 - 1: above every integer a message may hold
    Send(R"({"type":"done","activation":)" + a + R"(,"cpu_us":18446744073709551615,"ok":1})");
  } else if (fault == "call_id_huge") {  // 2^53: the first integer JSON cannot hold exactly
    Send(R"({"type":"call","activation":)" + a +
         R"(,"id":9007199254740992,"name":"log","args":{"level":"info","message":"a"}})");
  } else if (fault == "activation_wraps") {  // 2^32 + the id: an int would read the id
    Send(R"({"type":"done","activation":)" + std::to_string((int64_t{1} << 32) + aid) + R"(,"cpu_us":0,"ok":1})");
  } else if (fault == "hang") {
    for (;;) pause();
  } else if (fault == "tiny_values_call") {
    // 14 MB of "{}": within the frame limit, a tree of ~400 MiB had the parent parsed it.
    std::string args = "[{}";
    while (args.size() < 14'000'000) args += ",{}";
    Send(R"({"type":"call","activation":)" + a + R"(,"id":1,"name":"log","args":)" + args + "]}");
  } else if (fault == "half_frame_then_sigsys" || fault == "half_frame_then_sigkill") {
    // Dies in the middle of writing a frame: how it died is what the parent must report.
    WriteAll(std::string("\x40\x00\x00\x00{\"type\":\"call\"", 16));
    const int sig = fault == "half_frame_then_sigsys" ? SIGSYS : SIGKILL;
    signal(sig, SIG_DFL);
    raise(sig);
  } else if (fault == "burn_then_forge_done") {
    // Uses 300 ms of CPU, claims it used none, then keeps burning CPU while "idle".
    BurnCpu(300);
    Send(R"({"type":"done","activation":)" + a + R"(,"ok":1,"cpu_us":0})");
    volatile unsigned long spin = 0;
    for (;;) spin = spin + 1;
  }
  for (;;) pause();
}
