// A stand-in for ck-basal-worker that misbehaves on purpose, so the parent's validation of
// hostile worker output is tested against real processes. The first argument other than
// `--parent-pid N` picks the fault.
// It sends a welcome that passes the parent's check (unless the fault is in the welcome), reads
// load and activate, then commits its fault.
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <time.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "protocol/frame.h"
#include "protocol/messages.h"

namespace {

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

std::string Welcome(bool seccomp) {
  long abi = syscall(SYS_landlock_create_ruleset, nullptr, 0, 1u);
  if (abi < 0) abi = 0;
  if (abi > 7) abi = 7;
  basal::protocol::Json c = {{"startup_checks", {{"passed", true}, {"weakened", false}}},
                             {"descriptors_closed", true},
                             {"no_new_privs", true},
                             {"dumpable", false},
                             {"landlock", {{"abi", abi}, {"kernel_abi", abi}}},
                             {"seccomp", {{"installed", seccomp}, {"tsync", seccomp}}}};
  return basal::protocol::Json{{"type", "welcome"}, {"protocol", 1},      {"os", "linux"}, {"engine", "fake"},
                               {"pid", getpid()},   {"test_hooks", true}, {"confinement", c}}
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
  // the test makes): a release parent passes a worker no switches, only `--parent-pid N`.
  (void)argc;
  std::string fault = argv[0];
  fault = fault.substr(fault.rfind('/') + 1);
  const size_t dashes = fault.find("--");
  fault = dashes == std::string::npos ? "" : fault.substr(dashes + 2);
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
    basal::protocol::Json w = basal::protocol::Json::parse(Welcome(true));
    const char text[] = "\x1b[2J \xc2\x9b \x7f \0 \xe2\x80\xae caf\xc3\xa9";
    const std::string hostile(text, sizeof text - 1);
    w["engine"] = hostile;
    w["confinement"]["note"] = hostile;
    Send(w.dump());
    for (;;) pause();
  }
  if (fault == "welcome_without_seccomp") {
    Send(Welcome(false));
    for (;;) pause();
  }
  if (fault == "garbage_before_welcome") {
    WriteAll("hello parent, I am not a frame at all........");
    for (;;) pause();
  }
  Send(Welcome(true));
  Read();  // load
  Send(R"({"type":"loaded","ok":true})");
  const auto act = Read();
  const int64_t aid = act["activation"].get<int64_t>();
  const std::string a = std::to_string(aid);
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
  } else if (fault == "hang") {
    for (;;) pause();
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
