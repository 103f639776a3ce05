#include "mcp/downstream.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstring>

namespace basal::mcp {
namespace {

using Clock = EventLoop::Clock;
using std::chrono::milliseconds;

constexpr const char* kOfferedVersion = "2025-11-25";
constexpr const char* kAcceptedVersions[] = {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"};
constexpr const char* kAcceptedVersionList = "2025-11-25, 2025-06-18, 2025-03-26 or 2024-11-05";

// Reading one descriptor in one loop pass stops after this much, so a server that writes as fast
// as we read cannot starve the rest of the loop (epoll is level-triggered: the rest waits a pass).
constexpr size_t kReadPerPassBytes = 1u << 20;
// When a server has died or is being given up, what is left in its pipes is read at once, up to
// this beyond one maximal line (a grandchild may still be writing until its SIGKILL lands).
constexpr size_t kFinalReadSlackBytes = 1u << 20;
// A server that closed its stdin or stdout is expected to exit; this long after, it is killed.
constexpr milliseconds kClosedGrace{1000};
// The destructor's wait for a SIGKILLed process to be reaped (a process stuck in the kernel can
// take long; past this its zombie is left to basal's own exit).
constexpr milliseconds kReapWait{5000};
// Late answers to cancelled or timed-out calls are dropped quietly for this many recent ids; an
// older one is reported as an answer to an unknown id.
constexpr size_t kAbandonedIdsKept = 1024;
// What error messages quote of the server's words: its stderr, a JSON-RPC error message, a line.
constexpr size_t kQuotedStderrBytes = 1000;
constexpr size_t kQuotedMessageBytes = 1000;
constexpr size_t kQuotedLineBytes = 80;
constexpr size_t kInstructionsBytes = 64u << 10;
constexpr size_t kToolNameMaxBytes = 128;

int PidfdOpen(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

void CloseFd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

std::string Errno(const std::string& what, int error) { return what + ": " + std::strerror(error); }

std::string Ms(milliseconds ms) { return std::to_string(ms.count()) + " ms"; }

// write() to a pipe whose reader is gone raises SIGPIPE, which kills a process that has not
// ignored it. The signal is thread-directed: block it here, write, and take a SIGPIPE this write
// raised off the pending set before unblocking, so the caller sees EPIPE and nothing else.
ssize_t WriteWithoutSigpipe(int fd, const char* data, size_t size) {
  sigset_t pipe_only, old;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  sigset_t pending;
  sigpending(&pending);
  const bool already_pending = sigismember(&pending, SIGPIPE) == 1;
  pthread_sigmask(SIG_BLOCK, &pipe_only, &old);
  const ssize_t n = ::write(fd, data, size);
  const int error = errno;
  if (n < 0 && error == EPIPE && !already_pending) {
    const timespec zero{0, 0};
    sigtimedwait(&pipe_only, nullptr, &zero);
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  errno = error;
  return n;
}

// The length of the valid UTF-8 sequence at s[i], or 0 if the bytes there are not one.
size_t Utf8SequenceLength(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) return 1;
  size_t len;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // no UTF-16 surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;  // nothing past U+10FFFF
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < len; ++k)
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  return len;
}

// The server's words made fit to quote in an error message: valid UTF-8 (a bad byte becomes
// U+FFFD), control characters replaced (newlines by " | " unless kept), at most `max_bytes` plus
// an ellipsis. Error messages travel as JSON and to terminals; the server's bytes may be anything.
std::string CleanText(std::string_view s, size_t max_bytes, bool keep_newlines) {
  std::string out;
  out.reserve(std::min(s.size(), max_bytes) + 4);
  for (size_t i = 0; i < s.size();) {
    if (out.size() >= max_bytes) {
      out += "\xE2\x80\xA6";  // …
      break;
    }
    const size_t len = Utf8SequenceLength(s, i);
    if (len == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD
      ++i;
      continue;
    }
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (len == 1 && (c < 0x20 || c == 0x7F)) {
      if (c == '\n') out += keep_newlines ? "\n" : " | ";
      else if (c == '\t' && keep_newlines) out += '\t';
      else if (c != '\r') out += ' ';
    } else if (len == 2 && c == 0xC2 && static_cast<unsigned char>(s[i + 1]) < 0xA0) {
      out += ' ';  // C1 controls (U+0080..U+009F): terminals act on some of them
    } else {
      out.append(s.data() + i, len);
    }
    i += len;
  }
  return out;
}

// The first few dozen bytes of a line, quoted, for a protocol problem.
std::string Excerpt(std::string_view line) {
  return "\"" + CleanText(line, kQuotedLineBytes, false) + "\"";
}

// A cheap look at nesting before parsing: brackets outside strings. A line that fails here is
// not parsed at all, so a hostile depth never reaches anything recursive.
bool NestedDeeperThan(std::string_view s, size_t max_depth) {
  size_t depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : s) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') {
      if (++depth > max_depth) return true;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return false;
}

// MCP's rule for tool names: 1 to 128 of A-Z a-z 0-9 _ - .
bool ValidToolName(std::string_view name) {
  if (name.empty() || name.size() > kToolNameMaxBytes) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.';
  });
}

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

// A description of how a reaped process ended, from waitid's siginfo.
std::string DescribeExit(const siginfo_t& info) {
  if (info.si_code == CLD_EXITED) return "exited with status " + std::to_string(info.si_status);
  const char* abbrev = sigabbrev_np(info.si_status);
  return "was killed by signal " + std::to_string(info.si_status) + (abbrev ? std::string(" (SIG") + abbrev + ")" : "");
}

// Reaps the process behind `pidfd` if it has ended. nullopt: still running.
std::optional<std::string> TryReap(int pidfd) {
  siginfo_t info{};
  if (waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd), &info, WEXITED | WNOHANG) != 0)
    return "ended (its status was lost: " + std::string(std::strerror(errno)) + ")";
  if (info.si_pid == 0) return std::nullopt;
  return DescribeExit(info);
}

// The group is the server and whatever it started (npx starts node, shells start tools). Signalled
// only while the leader is unreaped: its zombie keeps the group id from being reused.
void SignalGroup(pid_t leader, int sig) { ::kill(-leader, sig); }

// ---- the child side of the spawn: between fork and execve, async-signal-safe calls only ----

enum ChildStep : int { kDeathSignal = 1, kSession, kDescriptors, kDirectory, kExec };

struct ChildFailure {
  int step;
  int error;
};

struct ChildPlan {
  pid_t parent;
  const char* path;
  char* const* argv;
  char* const* envp;
  const char* cwd;
  int stdin_read, stdout_write, stderr_write, report_write;
  int fd_limit;  // for closing descriptors one by one where close_range is missing (Linux < 5.9)
};

[[noreturn]] void ReportAndExit(int report_fd, int step) {
  const ChildFailure failure{step, errno};
  ssize_t n;
  do n = ::write(report_fd, &failure, sizeof failure);
  while (n < 0 && errno == EINTR);
  _exit(127);
}

[[noreturn]] void ExecServer(const ChildPlan& plan) {
  // 1. Die with basal (with the thread that forked: the loop's), and not after it has gone.
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) ReportAndExit(plan.report_write, kDeathSignal);
  if (getppid() != plan.parent) _exit(127);
  // 2. A session and process group of its own: the group is what Stop signals.
  if (setsid() < 0) ReportAndExit(plan.report_write, kSession);
  // 3. Signals as a fresh program expects them: basal ignores SIGPIPE and may block some.
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) sigaction(sig, &default_action, nullptr);  // SIGKILL, SIGSTOP: EINVAL
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  // 4. Descriptors: the three pipes as 0, 1, 2, the report pipe as 3 (closed by execve), nothing
  // else. First above 2, so no dup2 overwrites a pipe end that happens to be 0, 1 or 2.
  const int in = fcntl(plan.stdin_read, F_DUPFD, 3);
  const int out = fcntl(plan.stdout_write, F_DUPFD, 3);
  const int err = fcntl(plan.stderr_write, F_DUPFD, 3);
  int report = fcntl(plan.report_write, F_DUPFD_CLOEXEC, 3);
  if (in < 0 || out < 0 || err < 0 || report < 0) ReportAndExit(plan.report_write, kDescriptors);
  if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0) ReportAndExit(report, kDescriptors);
  if (report != 3) {
    if (dup3(report, 3, O_CLOEXEC) < 0) ReportAndExit(report, kDescriptors);
    report = 3;
  }
  if (close_range(4, ~0U, 0) != 0)
    for (int fd = 4; fd < plan.fd_limit; ++fd) ::close(fd);
  // 5. Its working directory.
  if (chdir(plan.cwd) != 0) ReportAndExit(report, kDirectory);
  // 6. The program, with exactly the configured environment.
  execve(plan.path, plan.argv, plan.envp);
  ReportAndExit(report, kExec);
}

const char* ChildStepName(int step) {
  switch (step) {
    case kDeathSignal: return "prctl(PR_SET_PDEATHSIG)";
    case kSession: return "setsid";
    case kDescriptors: return "setting up its stdin, stdout and stderr";
    case kDirectory: return "chdir";
    case kExec: return "execve";
    default: return "preparing the process";
  }
}

}  // namespace

struct Downstream::Process {
  pid_t pid = 0;
  int pidfd = -1, in = -1, out = -1, err = -1;
  bool reaped = false;
  std::string input;  // queued for its stdin; input_pos bytes of it already written
  size_t input_pos = 0;
  bool input_watched = false;
  bool input_broken = false;
  std::string partial_line;  // the start of a line whose newline has not arrived yet
  std::string closed_what;   // "closed its stdout": why the closed-grace timer runs
  std::optional<EventLoop::TimerId> timer;  // closed grace (running) or SIGKILL after stop_grace (retired)

  ~Process() {
    CloseFd(in);
    CloseFd(out);
    CloseFd(err);
    CloseFd(pidfd);
  }
};

Downstream::Downstream(EventLoop& loop, DownstreamConfig config, DownstreamLimits limits)
    : loop_(loop), config_(std::move(config)), limits_(limits) {}

Downstream::~Downstream() {
  // No callbacks from here on: timers and watches that name `this` go first.
  if (start_timer_) loop_.Cancel(*start_timer_);
  for (auto& [token, call] : calls_) loop_.Cancel(call.timer);
  const auto stop_now = [this](Process& p, bool graceful) {
    if (p.timer) loop_.Cancel(*p.timer);
    for (int* fd : {&p.in, &p.out, &p.err, &p.pidfd})
      if (*fd >= 0) loop_.Unwatch(*fd);
    CloseFd(p.in);  // a stdio server's cue to exit
    CloseFd(p.out);
    CloseFd(p.err);
    if (p.reaped || p.pidfd < 0) return;
    pollfd exited{p.pidfd, POLLIN, 0};
    if (graceful) {
      SignalGroup(p.pid, SIGTERM);
      poll(&exited, 1, static_cast<int>(limits_.stop_grace.count()));
    }
    SignalGroup(p.pid, SIGKILL);
    const auto until = Clock::now() + kReapWait;
    while (!TryReap(p.pidfd) && Clock::now() < until) {
      exited.revents = 0;
      poll(&exited, 1, 100);
    }
  };
  if (process_) stop_now(*process_, true);
  for (auto& [pid, p] : retired_) stop_now(*p, false);
  ReleaseListing();
  ReleaseTools();
}

Json ParseSchema(const SchemaText& text) {
  if (!text) return nullptr;
  Json j = Json::parse(*text, nullptr, /*allow_exceptions=*/false);
  return j.is_discarded() ? Json() : j;
}

void Downstream::ReleaseListing() {
  if (limits_.shared_tools) limits_.shared_tools->used_bytes -= std::min(limits_.shared_tools->used_bytes, listing_bytes_);
  listing_bytes_ = 0;
  listing_.clear();
}

void Downstream::ReleaseTools() {
  if (limits_.shared_tools) limits_.shared_tools->used_bytes -= std::min(limits_.shared_tools->used_bytes, tools_bytes_);
  tools_bytes_ = 0;
  tools_.clear();
}

const DownstreamTool* Downstream::FindTool(std::string_view name) const {
  for (const auto& t : tools_)
    if (t.name == name) return &t;
  return nullptr;
}

pid_t Downstream::pid() const { return process_ ? process_->pid : 0; }

std::string Downstream::stderr_tail() const {
  std::string_view tail = stderr_tail_;
  // The kept bytes may begin inside a character.
  while (!tail.empty() && (static_cast<unsigned char>(tail.front()) & 0xC0) == 0x80) tail.remove_prefix(1);
  return CleanText(tail, SIZE_MAX, true);
}

// ---- starting ----

void Downstream::Start(std::function<void(const Result<void>&)> ready) {
  if (state_ == State::kStarting || state_ == State::kReady) {
    Error e = MakeServerError(ErrorCode::kConflict, "is already started; Stop it before starting it again", false);
    outbox_.push_back([ready = std::move(ready), e = std::move(e)] { ready(e); });
    DeliverLater();
    return;
  }
  stopped_by_caller_ = false;
  ever_ready_ = false;  // until this start lists tools, calls have nothing to restart
  ReleaseTools();
  tools_dropped_ = 0;
  tools_list_incomplete_ = false;
  ready_ = std::move(ready);
  Launch(true);
  Settle();
  DeliverLater();
}

void Downstream::Launch(bool list_tools) {
  last_launch_ = Clock::now();
  stderr_tail_.clear();
  last_protocol_problem_.clear();
  state_ = State::kStarting;
  listing_tools_ = list_tools;
  list_pages_ = 0;
  ReleaseListing();
  listing_names_.clear();
  listing_dropped_ = 0;
  listing_incomplete_ = false;
  initialize_answered_ = false;

  auto spawned = Spawn();
  if (!spawned) {
    state_ = State::kFailed;
    last_failure_ = spawned.error().message;
    StartFinished(spawned.error());
    FailAllCalls(spawned.error());
    return;
  }
  process_ = std::move(*spawned);
  Process& p = *process_;
  Result<void> watched = loop_.Watch(p.out, EPOLLIN, [this](uint32_t) { OnStdout(); });
  if (watched) watched = loop_.Watch(p.err, EPOLLIN, [this](uint32_t) { OnStderr(); });
  if (watched) watched = loop_.Watch(p.pidfd, EPOLLIN, [this](uint32_t) { OnLeaderExit(); });
  if (!watched) {
    fail_server_ = Failure{ErrorCode::kSpawn, "could not be watched: " + watched.error().message, false};
    return;
  }
  start_timer_ = loop_.At(Clock::now() + config_.start_timeout, [this] {
    start_timer_.reset();
    OnStartTimeout();
  });
  const int64_t id = next_request_id_++;
  requests_[id] = Request{RequestKind::kInitialize};
  const std::string version = config_.client_version.empty() ? "unknown" : config_.client_version;
  const Json initialize = {
      {"jsonrpc", "2.0"},
      {"id", id},
      {"method", "initialize"},
      {"params",
       {{"protocolVersion", kOfferedVersion},
        {"capabilities", Json::object()},
        {"clientInfo", {{"name", "basal"}, {"version", version}}}}}};
  if (auto sent = Send(initialize); !sent) fail_server_ = Failure{ErrorCode::kUnavailable, sent.error().message, false};
}

Result<std::unique_ptr<Downstream::Process>> Downstream::Spawn() {
  const auto refuse = [&](const std::string& what) {
    return MakeError(ErrorCode::kInvalidArgument, "MCP server " + config_.name + ": " + what);
  };
  if (config_.command.empty() || config_.command.front() != '/')
    return refuse("command \"" + CleanText(config_.command, 200, false) +
                  "\" is not an absolute path; name the executable by its full path (e.g. /usr/bin/node)");
  const auto has_nul = [](const std::string& s) { return s.find('\0') != std::string::npos; };
  if (has_nul(config_.command) || has_nul(config_.cwd)) return refuse("command or cwd contains a NUL byte");
  for (const auto& a : config_.args)
    if (has_nul(a)) return refuse("an argument contains a NUL byte");
  for (const auto& [key, value] : config_.env) {
    if (key.empty() || key.find('=') != std::string::npos || has_nul(key) || has_nul(value))
      return refuse("environment variable name \"" + CleanText(key, 200, false) +
                    "\" is empty or contains '=' or a NUL byte (or its value contains a NUL byte)");
  }
  // Everything the child needs is built here: after fork it may not allocate.
  std::vector<std::string> env_strings;
  env_strings.reserve(config_.env.size());
  for (const auto& [key, value] : config_.env) env_strings.push_back(key + "=" + value);
  std::vector<char*> argv, envp;
  argv.push_back(const_cast<char*>(config_.command.c_str()));
  for (const auto& a : config_.args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  rlimit files{};
  getrlimit(RLIMIT_NOFILE, &files);
  const int fd_limit =
      files.rlim_cur == RLIM_INFINITY || files.rlim_cur > (1u << 20) ? (1 << 20) : static_cast<int>(files.rlim_cur);

  int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1}, report[2] = {-1, -1};
  const auto close_all = [&] {
    for (int* pair : {in, out, err, report}) {
      CloseFd(pair[0]);
      CloseFd(pair[1]);
    }
  };
  for (int* pair : {in, out, err, report}) {
    if (pipe2(pair, O_CLOEXEC) != 0) {
      const int e = errno;
      close_all();
      return MakeError(ErrorCode::kSpawn, "MCP server " + config_.name + " could not be started: " + Errno("pipe2", e));
    }
  }
  const ChildPlan plan{getpid(), config_.command.c_str(), argv.data(), envp.data(),
                       config_.cwd.empty() ? "/" : config_.cwd.c_str(), in[0], out[1], err[1], report[1], fd_limit};
  const pid_t pid = fork();
  if (pid == 0) ExecServer(plan);
  if (pid < 0) {
    const int e = errno;
    close_all();
    return MakeError(ErrorCode::kSpawn, "MCP server " + config_.name + " could not be started: " + Errno("fork", e));
  }
  CloseFd(in[0]);
  CloseFd(out[1]);
  CloseFd(err[1]);
  CloseFd(report[1]);
  // The report pipe closes at execve (success) or carries what failed; the child gets there
  // without waiting on anything, so this read is short.
  ChildFailure failure{};
  size_t got = 0;
  while (got < sizeof failure) {
    const ssize_t n = ::read(report[0], reinterpret_cast<char*>(&failure) + got, sizeof failure - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  if (got > 0) {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    close_all();
    std::string what = got == sizeof failure ? Errno(ChildStepName(failure.step), failure.error) : "the child ended early";
    if (got == sizeof failure && failure.step == kExec) what = Errno("execve " + config_.command, failure.error);
    if (got == sizeof failure && failure.step == kDirectory) what = Errno("chdir " + std::string(plan.cwd), failure.error);
    return MakeError(ErrorCode::kSpawn, "MCP server " + config_.name + " could not be started: " + what +
                                            "; check the server's command and cwd in the policy");
  }
  CloseFd(report[0]);
  auto p = std::make_unique<Process>();
  p->pid = pid;
  p->in = in[1];
  p->out = out[0];
  p->err = err[0];
  in[1] = out[0] = err[0] = -1;
  p->pidfd = PidfdOpen(pid);
  if (p->pidfd < 0) {
    const int e = errno;
    SignalGroup(pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return MakeError(ErrorCode::kUnsupported, "MCP server " + config_.name + ": " + Errno("pidfd_open", e) +
                                                  " (basal needs Linux 5.3 or newer)");
  }
  for (int fd : {p->in, p->out, p->err}) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  return p;
}

void Downstream::OnStartTimeout() {
  if (state_ != State::kStarting || !process_) return;
  std::string stage = "initialize was not answered";
  if (initialize_answered_) stage = "tools/list page " + std::to_string(list_pages_) + " was not answered";
  fail_server_ = Failure{ErrorCode::kIo,
                         "did not finish starting within " + Ms(config_.start_timeout) + " (start_timeout): " + stage,
                         true};
  Settle();
  Deliver();
}

void Downstream::OnInitializeAnswer(const Json& result) {
  const auto bad = [&](const std::string& what) { fail_server_ = Failure{ErrorCode::kIo, what, true}; };
  if (!result.is_object()) return bad("answered initialize with a result that is not an object");
  const auto version = result.find("protocolVersion");
  if (version == result.end() || !version->is_string())
    return bad("answered initialize without a protocolVersion string");
  const std::string v = version->get<std::string>();
  if (std::none_of(std::begin(kAcceptedVersions), std::end(kAcceptedVersions), [&](const char* a) { return v == a; }))
    return bad("answered initialize with protocol version \"" + CleanText(v, 64, false) +
               "\", which basal does not speak (it speaks " + kAcceptedVersionList + ")");
  protocol_version_ = v;
  initialize_answered_ = true;
  const auto info = result.find("serverInfo");
  server_info_ = info != result.end() && info->is_object() ? *info : Json();
  const auto instructions = result.find("instructions");
  instructions_.clear();
  if (instructions != result.end() && instructions->is_string())
    instructions_ = CleanText(instructions->get_ref<const std::string&>(), kInstructionsBytes, true);
  if (auto sent = Send({{"jsonrpc", "2.0"}, {"method", "notifications/initialized"}}); !sent)
    return void(fail_server_ = Failure{ErrorCode::kUnavailable, sent.error().message, false});
  if (listing_tools_) {
    SendToolsList("");
  } else {
    StartFinished(Ok());
  }
}

void Downstream::SendToolsList(const std::string& cursor) {
  const int64_t id = next_request_id_++;
  requests_[id] = Request{RequestKind::kToolsList};
  ++list_pages_;
  Json params = Json::object();
  if (!cursor.empty()) params["cursor"] = cursor;
  if (auto sent = Send({{"jsonrpc", "2.0"}, {"id", id}, {"method", "tools/list"}, {"params", std::move(params)}}); !sent)
    fail_server_ = Failure{ErrorCode::kUnavailable, sent.error().message, false};
}

void Downstream::OnToolsListAnswer(const Json& result) {
  const auto tools = result.is_object() ? result.find("tools") : result.end();
  if (!result.is_object() || tools == result.end() || !tools->is_array()) {
    fail_server_ = Failure{ErrorCode::kIo, "answered tools/list with a result that has no tools array", true};
    return;
  }
  for (const Json& t : *tools) AddListedTool(t);
  const auto next = result.find("nextCursor");
  if (next != result.end() && !next->is_null() && !next->is_string())
    ProtocolProblem("tools/list's nextCursor is not a string; the list ends there");
  if (next != result.end() && next->is_string() && !next->get_ref<const std::string&>().empty()) {
    if (list_pages_ < limits_.max_list_pages) return SendToolsList(next->get<std::string>());
    listing_incomplete_ = true;
    ProtocolProblem("tools/list still had more pages after " + std::to_string(list_pages_) +
                    " (max_list_pages); the tools listed so far are kept");
  }
  ReleaseTools();
  tools_ = std::move(listing_);
  listing_.clear();
  tools_bytes_ = listing_bytes_;  // charged while listed
  listing_bytes_ = 0;
  tools_dropped_ = listing_dropped_;
  tools_list_incomplete_ = listing_incomplete_;
  StartFinished(Ok());
}

void Downstream::AddListedTool(const Json& t) {
  const auto drop = [&](const std::string& why) {
    ++listing_dropped_;
    ProtocolProblem(why);
  };
  if (!t.is_object()) return drop("tools/list listed a tool that is not an object");
  const auto name = t.find("name");
  if (name == t.end() || !name->is_string()) return drop("tools/list listed a tool without a name");
  const std::string& n = name->get_ref<const std::string&>();
  if (!ValidToolName(n))
    return drop("tools/list listed a tool named " + Excerpt(n) + ", not 1 to 128 of A-Z a-z 0-9 _ - .");
  if (listing_names_.count(n)) return drop("tools/list listed tool " + n + " twice; the first is kept");
  if (listing_.size() >= limits_.max_tools)
    return drop("tools/list listed more than " + std::to_string(limits_.max_tools) + " tools (max_tools)");
  const std::string text = Dump(t);
  const size_t bytes = text.size();
  if (bytes > limits_.max_tool_bytes)
    return drop("tool " + n + "'s definition has " + std::to_string(bytes) + " bytes, more than max_tool_bytes (" +
                std::to_string(limits_.max_tool_bytes) + ")");
  if (protocol::CountJsonValues(text, limits_.max_tool_values) > limits_.max_tool_values)
    return drop("tool " + n + "'s definition has more than " + std::to_string(limits_.max_tool_values) +
                " JSON values (max_tool_values)");
  if (listing_bytes_ + bytes > limits_.max_tools_total_bytes)
    return drop("the tools' definitions pass max_tools_total_bytes (" + std::to_string(limits_.max_tools_total_bytes) +
                ") at tool " + n);
  const std::shared_ptr<SharedToolBudget>& shared = limits_.shared_tools;
  if (shared && shared->used_bytes + bytes > shared->max_bytes)
    return drop("the tool lists of basal mcp's servers together pass their shared bound (" +
                std::to_string(shared->max_bytes) + " bytes) at tool " + n);
  DownstreamTool tool;
  tool.name = n;
  const auto input = t.find("inputSchema");
  if (input == t.end() || input->is_null()) tool.input_schema = std::make_shared<const std::string>(R"({"type":"object"})");
  else if (input->is_object()) tool.input_schema = std::make_shared<const std::string>(Dump(*input));
  else return drop("tool " + n + "'s inputSchema is not an object");
  const auto output = t.find("outputSchema");
  if (output != t.end() && output->is_object()) tool.output_schema = std::make_shared<const std::string>(Dump(*output));
  const auto annotations = t.find("annotations");
  const bool has_annotations = annotations != t.end() && annotations->is_object();
  if (has_annotations) tool.annotations = std::make_shared<const std::string>(Dump(*annotations));
  const auto title = t.find("title");
  if (title != t.end() && title->is_string()) tool.title = title->get<std::string>();
  else if (has_annotations && annotations->contains("title") && (*annotations)["title"].is_string())
    tool.title = (*annotations)["title"].get<std::string>();
  const auto description = t.find("description");
  if (description != t.end() && description->is_string()) tool.description = description->get<std::string>();
  listing_bytes_ += bytes;
  if (shared) shared->used_bytes += bytes;
  listing_names_.insert(n);
  listing_.push_back(std::move(tool));
}

void Downstream::StartFinished(Result<void> outcome) {
  if (start_timer_) {
    loop_.Cancel(*start_timer_);
    start_timer_.reset();
  }
  if (outcome) {
    state_ = State::kReady;
    ever_ready_ = true;
    std::vector<uint64_t> waiting;
    for (const auto& [token, call] : calls_)
      if (call.request_id == 0) waiting.push_back(token);
    for (uint64_t token : waiting) SendCall(token);
  }
  if (ready_) {
    outbox_.push_back([ready = std::move(ready_), outcome = std::move(outcome)] { ready(outcome); });
    ready_ = nullptr;
  }
}

// ---- calls ----

uint64_t Downstream::Call(const std::string& tool, const Json& arguments, std::function<void(Result<Json>)> done) {
  const uint64_t token = next_token_++;
  const auto fail_now = [&](Error e) {
    outbox_.push_back([done = std::move(done), e = std::move(e)] { done(e); });
    DeliverLater();
    return token;
  };
  if (!arguments.is_object() && !arguments.is_null())
    return fail_now(MakeError(ErrorCode::kInvalidArgument, "the arguments of tools/call " + tool + " on MCP server " +
                                                               config_.name + " must be a JSON object"));
  if (calls_.size() >= limits_.max_calls_in_flight)
    return fail_now(MakeServerError(ErrorCode::kUnavailable,
                                    "already has " + std::to_string(calls_.size()) +
                                        " calls in flight, the most basal allows (max_calls_in_flight); wait for some to "
                                        "finish",
                                    false));
  switch (state_) {
    case State::kStopped:
      return fail_now(MakeServerError(ErrorCode::kUnavailable,
                                      stopped_by_caller_ ? "was stopped; the call cannot be made"
                                                         : "is not started; the call cannot be made",
                                      false));
    case State::kFailed: {
      if (!ever_ready_) return fail_now(MakeError(ErrorCode::kUnavailable, last_failure_));
      const auto now = Clock::now();
      if (now < last_launch_ + limits_.restart_backoff) {
        const auto wait = std::chrono::ceil<milliseconds>(last_launch_ + limits_.restart_backoff - now);
        return fail_now(MakeError(ErrorCode::kUnavailable,
                                  last_failure_ + "; basal restarts it at the next call after " +
                                      Ms(limits_.restart_backoff) + " (restart_backoff): retry in " + Ms(wait)));
      }
      break;
    }
    case State::kStarting:
    case State::kReady:
      break;
  }
  PendingCall call;
  call.tool = tool;
  call.arguments = arguments.is_null() ? Json::object() : arguments;
  call.done = std::move(done);
  call.timer = loop_.At(Clock::now() + config_.call_timeout, [this, token] { OnCallTimeout(token); });
  calls_.emplace(token, std::move(call));
  if (state_ == State::kFailed) Launch(false);  // a restart: the call waits for it
  else if (state_ == State::kReady) SendCall(token);
  Settle();
  DeliverLater();
  return token;
}

void Downstream::SendCall(uint64_t token) {
  auto it = calls_.find(token);
  if (it == calls_.end()) return;
  PendingCall& call = it->second;
  const int64_t id = next_request_id_++;
  Json request = {{"jsonrpc", "2.0"},
                  {"id", id},
                  {"method", "tools/call"},
                  {"params", {{"name", call.tool}, {"arguments", std::move(call.arguments)}}}};
  call.arguments = nullptr;
  if (auto sent = Send(request); !sent) return FailCall(token, MakeError(ErrorCode::kUnavailable, sent.error().message));
  requests_[id] = Request{RequestKind::kToolsCall, token};
  call.request_id = id;
}

void Downstream::OnCallTimeout(uint64_t token) {
  auto it = calls_.find(token);
  if (it == calls_.end()) return;
  const bool sent = it->second.request_id != 0;
  const std::string what = sent ? "did not answer tools/call " + it->second.tool + " within " + Ms(config_.call_timeout) +
                                      " (call_timeout); basal told it the call is cancelled"
                                : "was still starting " + Ms(config_.call_timeout) + " (call_timeout) after tools/call " +
                                      it->second.tool + " was made";
  if (sent) SendCancelled(it->second.request_id, "basal's call_timeout of " + Ms(config_.call_timeout) + " passed");
  FailCall(token, MakeServerError(ErrorCode::kIo, what, sent));
  Settle();
  Deliver();
}

void Downstream::Cancel(uint64_t token, std::string_view reason) {
  auto it = calls_.find(token);
  if (it == calls_.end()) return;
  const std::string why = CleanText(reason, kQuotedMessageBytes, false);
  if (it->second.request_id != 0) SendCancelled(it->second.request_id, why);
  FailCall(token, MakeError(ErrorCode::kUnavailable, "cancelled: " + why));
  Settle();
  Deliver();
}

void Downstream::SendCancelled(int64_t request_id, const std::string& reason) {
  // A cancel that cannot be queued is dropped: the call is over for us either way.
  (void)Send({{"jsonrpc", "2.0"},
              {"method", "notifications/cancelled"},
              {"params", {{"requestId", request_id}, {"reason", reason}}}});
}

void Downstream::OnCallAnswer(uint64_t token, Result<Json> answer) {
  auto it = calls_.find(token);
  if (it == calls_.end()) return;
  const std::string tool = it->second.tool;
  if (answer) {
    const Json& r = *answer;
    std::string wrong;
    if (!r.is_object()) wrong = "the result is not an object";
    else if (!r.contains("content") || !r["content"].is_array()) wrong = "its content is not an array";
    else if (r.contains("isError") && !r["isError"].is_boolean()) wrong = "its isError is not true or false";
    else if (r.contains("structuredContent") && !r["structuredContent"].is_object() && !r["structuredContent"].is_null())
      wrong = "its structuredContent is not an object";
    if (!wrong.empty())
      answer = MakeServerError(ErrorCode::kIo,
                               "answered tools/call " + tool + " with a result of the wrong shape: " + wrong, false);
  }
  loop_.Cancel(it->second.timer);
  auto done = std::move(it->second.done);
  calls_.erase(it);
  outbox_.push_back([done = std::move(done), answer = std::move(answer)]() mutable { done(std::move(answer)); });
}

void Downstream::FailCall(uint64_t token, Error error) {
  auto it = calls_.find(token);
  if (it == calls_.end()) return;
  loop_.Cancel(it->second.timer);
  if (it->second.request_id != 0) {
    requests_.erase(it->second.request_id);
    Abandon(it->second.request_id);
  }
  auto done = std::move(it->second.done);
  calls_.erase(it);
  outbox_.push_back([done = std::move(done), e = std::move(error)] { done(e); });
}

void Downstream::FailAllCalls(const Error& error) {
  std::vector<uint64_t> tokens;
  for (const auto& [token, call] : calls_) tokens.push_back(token);
  for (uint64_t token : tokens) FailCall(token, error);
}

void Downstream::Abandon(int64_t request_id) {
  if (!abandoned_.insert(request_id).second) return;
  abandoned_order_.push_back(request_id);
  while (abandoned_order_.size() > kAbandonedIdsKept) {
    abandoned_.erase(abandoned_order_.front());
    abandoned_order_.pop_front();
  }
}

// ---- stopping ----

void Downstream::Stop() {
  stopped_by_caller_ = true;
  if (process_) {
    ServerGone(ErrorCode::kUnavailable, "was stopped by basal before it answered", true, false);
  } else {
    const Error e = MakeServerError(ErrorCode::kUnavailable, "was stopped by basal before it answered", false);
    StartFinished(e);
    FailAllCalls(e);
  }
  state_ = State::kStopped;
  Deliver();
}

void Downstream::ServerGone(ErrorCode code, const std::string& what, bool graceful, bool with_context) {
  if (!process_) return;
  if (process_->err >= 0) DrainStderr(kReadPerPassBytes);
  const Error e = MakeServerError(code, what, with_context);
  last_failure_ = e.message;
  Retire(std::move(process_), graceful);
  requests_.clear();  // ids are never reused: nothing the old process sends can match a new request
  const bool was_starting = state_ == State::kStarting;
  state_ = State::kFailed;
  if (was_starting) StartFinished(e);
  FailAllCalls(e);
}

void Downstream::Settle() {
  if (!fail_server_) return;
  const Failure f = std::move(*fail_server_);
  fail_server_.reset();
  ServerGone(f.code, f.what, f.graceful, true);
}

void Downstream::Retire(std::unique_ptr<Process> p, bool graceful) {
  if (p->timer) {
    loop_.Cancel(*p->timer);
    p->timer.reset();
  }
  for (int* fd : {&p->in, &p->out, &p->err}) {
    if (*fd >= 0) loop_.Unwatch(*fd);
    CloseFd(*fd);  // closing its stdin is the polite way to end a stdio server
  }
  if (p->reaped) {
    loop_.Unwatch(p->pidfd);
    return;  // its descriptors close with it
  }
  const pid_t pid = p->pid;
  SignalGroup(pid, graceful ? SIGTERM : SIGKILL);
  if (graceful) {
    p->timer = loop_.At(Clock::now() + limits_.stop_grace, [this, pid] {
      auto it = retired_.find(pid);
      if (it == retired_.end()) return;
      it->second->timer.reset();
      SignalGroup(pid, SIGKILL);
    });
  }
  if (!loop_.Watch(p->pidfd, EPOLLIN, [this, pid](uint32_t) { OnRetiredExit(pid); })) {
    // Not watchable: finish it now rather than leave a process nobody reaps.
    SignalGroup(pid, SIGKILL);
    pollfd exited{p->pidfd, POLLIN, 0};
    poll(&exited, 1, static_cast<int>(kReapWait.count()));
    TryReap(p->pidfd);
    if (p->timer) loop_.Cancel(*p->timer);
    return;
  }
  retired_[pid] = std::move(p);
}

void Downstream::OnRetiredExit(pid_t pid) {
  auto it = retired_.find(pid);
  if (it == retired_.end()) return;
  Process& p = *it->second;
  SignalGroup(pid, SIGKILL);  // what it started dies with it; the unreaped leader keeps the group id ours
  if (!TryReap(p.pidfd)) return;
  if (p.timer) loop_.Cancel(*p.timer);
  loop_.Unwatch(p.pidfd);
  retired_.erase(it);
}

// ---- the server's output ----

void Downstream::OnStdout() {
  if (!process_) return;
  const ReadStatus status = ReadStdout(kReadPerPassBytes);
  if (process_ && !fail_server_) {
    if (status == ReadStatus::kTooLong) {
      fail_server_ = Failure{ErrorCode::kIo,
                             "wrote a line longer than " + std::to_string(limits_.max_message_bytes) +
                                 " bytes (max_message_bytes); basal killed it, since its messages can no longer be "
                                 "told apart",
                             false};
    } else if (status == ReadStatus::kClosed) {
      Process& p = *process_;
      loop_.Unwatch(p.out);
      CloseFd(p.out);
      ArmClosedGrace("closed its stdout");
    }
  }
  Settle();
  Deliver();
}

Downstream::ReadStatus Downstream::ReadStdout(size_t max_bytes) {
  Process& p = *process_;
  char buf[64 * 1024];
  size_t read_so_far = 0;
  while (read_so_far < max_bytes && p.out >= 0) {
    const ssize_t n = ::read(p.out, buf, std::min(sizeof buf, max_bytes - read_so_far));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return ReadStatus::kMore;
    if (n <= 0) return ReadStatus::kClosed;
    read_so_far += static_cast<size_t>(n);
    const std::string_view chunk(buf, static_cast<size_t>(n));
    size_t start = 0;
    for (size_t nl = chunk.find('\n'); nl != std::string_view::npos; nl = chunk.find('\n', start)) {
      const std::string_view piece = chunk.substr(start, nl - start);
      start = nl + 1;
      if (p.partial_line.size() + piece.size() > limits_.max_message_bytes) return ReadStatus::kTooLong;
      if (p.partial_line.empty()) {
        HandleLine(piece);
      } else {
        p.partial_line.append(piece);
        const std::string line = std::move(p.partial_line);
        p.partial_line.clear();
        HandleLine(line);
      }
      if (fail_server_) return ReadStatus::kMore;  // the server is being given up: the rest is moot
    }
    p.partial_line.append(chunk.substr(start));
    if (p.partial_line.size() > limits_.max_message_bytes) return ReadStatus::kTooLong;
  }
  return ReadStatus::kMore;
}

void Downstream::OnStderr() {
  if (!process_) return;
  DrainStderr(kReadPerPassBytes);
}

void Downstream::DrainStderr(size_t max_bytes) {
  Process& p = *process_;
  char buf[16 * 1024];
  size_t read_so_far = 0;
  while (read_so_far < max_bytes && p.err >= 0) {
    const ssize_t n = ::read(p.err, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {
      loop_.Unwatch(p.err);
      CloseFd(p.err);
      return;
    }
    read_so_far += static_cast<size_t>(n);
    stderr_tail_.append(buf, static_cast<size_t>(n));
    if (stderr_tail_.size() > limits_.stderr_tail_bytes)
      stderr_tail_.erase(0, stderr_tail_.size() - limits_.stderr_tail_bytes);
  }
}

void Downstream::OnLeaderExit() {
  if (!process_) return;
  Process& p = *process_;
  SignalGroup(p.pid, SIGKILL);  // a server's orphans serve no one
  // Answers it wrote before it died still count, and its last words say why.
  if (p.out >= 0 && !fail_server_) (void)ReadStdout(limits_.max_message_bytes + kFinalReadSlackBytes);
  if (p.err >= 0) DrainStderr(kFinalReadSlackBytes);
  auto how = TryReap(p.pidfd);
  if (!how) return;  // not ended after all; the pidfd will say when
  p.reaped = true;
  if (!fail_server_) fail_server_ = Failure{ErrorCode::kUnavailable, *how, false};
  Settle();
  Deliver();
}

void Downstream::ArmClosedGrace(const std::string& what) {
  Process& p = *process_;
  if (p.timer) return;
  p.closed_what = what;
  p.timer = loop_.At(Clock::now() + kClosedGrace, [this] {
    if (!process_) return;
    process_->timer.reset();
    fail_server_ = Failure{ErrorCode::kUnavailable, process_->closed_what + " but kept running; basal killed it", false};
    Settle();
    Deliver();
  });
}

void Downstream::HandleLine(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.find_first_not_of(" \t") == std::string_view::npos) return;
  if (NestedDeeperThan(line, limits_.max_json_depth))
    return ProtocolProblem("a message nested deeper than " + std::to_string(limits_.max_json_depth) +
                           " levels (max_json_depth): " + Excerpt(line));
  if (protocol::CountJsonValues(line, limits_.max_message_values) > limits_.max_message_values)
    return HandleTooManyValues(line);
  Json message = Json::parse(line.begin(), line.end(), nullptr, false);
  if (message.is_discarded()) return ProtocolProblem("a line that is not JSON: " + Excerpt(line));
  if (message.is_array()) return ProtocolProblem("a JSON-RPC batch (MCP has had none since 2025-06-18): " + Excerpt(line));
  if (!message.is_object()) return ProtocolProblem("a JSON value that is not a JSON-RPC message: " + Excerpt(line));
  const auto method = message.find("method");
  if (method != message.end()) {
    if (!method->is_string()) return ProtocolProblem("a message whose method is not a string: " + Excerpt(line));
    if (message.contains("id")) return HandleServerRequest(message);
    ++notifications_received_;  // logging, progress, list_changed: nothing basal acts on
    return;
  }
  if (message.contains("id") && (message.contains("result") || message.contains("error")))
    return HandleResponse(message);
  ProtocolProblem("a JSON object that is neither a request, a notification nor an answer: " + Excerpt(line));
}

void Downstream::HandleServerRequest(const Json& message) {
  const Json& id = message["id"];
  if (!id.is_string() && !id.is_number_integer())
    return ProtocolProblem("a request whose id is neither a string nor an integer");
  const std::string& method = message["method"].get_ref<const std::string&>();
  Json answer = {{"jsonrpc", "2.0"}, {"id", id}};
  if (method == "ping") {
    answer["result"] = Json::object();
  } else {
    // Sampling, elicitation, roots: each would hand the server something of the agent's or the
    // operator's that no policy granted.
    answer["error"] = {{"code", -32601},
                       {"message", "basal does not offer " + CleanText(method, 100, false) + " to downstream servers"}};
  }
  if (auto sent = Send(answer); !sent) ProtocolProblem("a request basal could not answer: " + sent.error().message);
}

namespace {

// Finds a message's top-level "id" (an integer) without building anything: the line may hold more
// values than a tree of them may cost. Bounded like the parse it replaces (depth checked first).
class TopLevelId : public nlohmann::json_sax<Json> {
 public:
  std::optional<int64_t> id;

  bool null() override { return Scalar(); }
  bool boolean(bool) override { return Scalar(); }
  bool number_integer(number_integer_t v) override {
    if (at_id_) id = v;
    return Scalar();
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (at_id_ && v <= static_cast<uint64_t>(INT64_MAX)) id = static_cast<int64_t>(v);
    return Scalar();
  }
  bool number_float(number_float_t, const string_t&) override { return Scalar(); }
  bool string(string_t&) override { return Scalar(); }
  bool binary(binary_t&) override { return Scalar(); }
  bool start_object(std::size_t) override { return Open(); }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override { return Open(); }
  bool end_array() override { return Close(); }
  bool key(string_t& k) override {
    at_id_ = depth_ == 1 && k == "id";
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

 private:
  bool Scalar() {
    at_id_ = false;
    return true;
  }
  bool Open() {
    at_id_ = false;
    ++depth_;
    return true;
  }
  bool Close() {
    --depth_;
    return true;
  }
  size_t depth_ = 0;
  bool at_id_ = false;
};

}  // namespace

void Downstream::HandleTooManyValues(std::string_view line) {
  const std::string what = "a message of more than " + std::to_string(limits_.max_message_values) +
                           " JSON values (max_message_values)";
  TopLevelId scan;
  Json::sax_parse(line.begin(), line.end(), &scan, nlohmann::detail::input_format_t::json, /*strict=*/true);
  auto it = scan.id ? requests_.find(*scan.id) : requests_.end();
  if (it == requests_.end()) return ProtocolProblem(what + ", not parsed: " + Excerpt(line));
  const Request request = it->second;
  requests_.erase(it);
  const std::string refused = what + ", which basal does not parse (an answer that large could not reach a script)";
  switch (request.kind) {
    case RequestKind::kInitialize:
    case RequestKind::kToolsList:
      fail_server_ = Failure{ErrorCode::kIo,
                             std::string("answered ") + (request.kind == RequestKind::kInitialize ? "initialize" : "tools/list") +
                                 " with " + refused,
                             true};
      return;
    case RequestKind::kToolsCall: {
      auto call = calls_.find(request.token);
      const std::string tool = call != calls_.end() ? call->second.tool : std::string("?");
      OnCallAnswer(request.token, MakeServerError(ErrorCode::kIo, "answered tools/call " + tool + " with " + refused, false));
      return;
    }
  }
}

void Downstream::HandleResponse(Json& message) {
  const Json& id = message["id"];
  const bool ours = id.is_number_integer() && !(id.is_number_unsigned() && id.get<uint64_t>() > INT64_MAX);
  const int64_t rid = ours ? id.get<int64_t>() : 0;
  auto it = ours ? requests_.find(rid) : requests_.end();
  if (it == requests_.end()) {
    if (ours && abandoned_.count(rid)) return;  // the answer to a call that was cancelled or timed out
    return ProtocolProblem("an answer to id " + CleanText(Dump(id), 40, false) +
                           ", which basal never sent or had already answered");
  }
  const Request request = it->second;
  requests_.erase(it);
  const char* method = request.kind == RequestKind::kInitialize  ? "initialize"
                       : request.kind == RequestKind::kToolsList ? "tools/list"
                                                                 : "tools/call";
  std::string subject = method;
  if (request.kind == RequestKind::kToolsCall) {
    auto call = calls_.find(request.token);
    if (call != calls_.end()) subject += " " + call->second.tool;
  }
  Result<Json> answer = Json();
  if (message.contains("result") && message.contains("error")) {
    answer = MakeServerError(ErrorCode::kIo, "answered " + subject + " with both a result and an error", false);
  } else if (message.contains("error")) {
    const Json& e = message["error"];
    if (!e.is_object() || !e.contains("code") || !e["code"].is_number_integer() || !e.contains("message") ||
        !e["message"].is_string()) {
      answer = MakeServerError(ErrorCode::kIo, "answered " + subject + " with an error of the wrong shape: " +
                                                   CleanText(Dump(e), kQuotedLineBytes, false),
                               false);
    } else {
      const int64_t code = e["code"].get<int64_t>();
      const ErrorCode kind = code == -32602 ? ErrorCode::kInvalidArgument
                             : code == -32601 ? ErrorCode::kNotFound
                                              : ErrorCode::kRefused;
      answer = MakeServerError(kind,
                               "answered " + subject + " with JSON-RPC error " + std::to_string(code) + ": " +
                                   CleanText(e["message"].get_ref<const std::string&>(), kQuotedMessageBytes, false),
                               false);
    }
  } else {
    answer = std::move(message["result"]);  // moved, not copied: an answer's tree can be large
  }
  switch (request.kind) {
    case RequestKind::kInitialize:
      if (!answer) fail_server_ = Failure{answer.error().code, StripServerName(answer.error().message), true};
      else OnInitializeAnswer(*answer);
      return;
    case RequestKind::kToolsList:
      if (!answer) fail_server_ = Failure{answer.error().code, StripServerName(answer.error().message), true};
      else OnToolsListAnswer(*answer);
      return;
    case RequestKind::kToolsCall:
      OnCallAnswer(request.token, std::move(answer));
      return;
  }
}

// ---- the server's input ----

Result<void> Downstream::Send(const Json& message) {
  if (!process_ || process_->in < 0)
    return MakeServerError(ErrorCode::kUnavailable, "is not running", false);
  Process& p = *process_;
  if (p.input_broken)
    return MakeServerError(ErrorCode::kUnavailable, "closed its stdin; basal cannot send it anything", true);
  std::string line = Dump(message);  // JSON text escapes control characters: no newline inside
  line.push_back('\n');
  const size_t queued = p.input.size() - p.input_pos;
  if (queued + line.size() > limits_.max_queued_input_bytes)
    return MakeServerError(ErrorCode::kUnavailable,
                           "has not read " + std::to_string(queued) +
                               " bytes basal wrote to its stdin; one more message (" +
                               std::to_string(line.size()) + " bytes) would pass max_queued_input_bytes (" +
                               std::to_string(limits_.max_queued_input_bytes) + ")",
                           true);
  if (p.input_pos > 0 && p.input_pos >= p.input.size() / 2) {
    p.input.erase(0, p.input_pos);
    p.input_pos = 0;
  }
  p.input += line;
  FlushStdin();
  return Ok();
}

void Downstream::FlushStdin() {
  Process& p = *process_;
  while (p.input_pos < p.input.size()) {
    const ssize_t n = WriteWithoutSigpipe(p.in, p.input.data() + p.input_pos, p.input.size() - p.input_pos);
    if (n > 0) {
      p.input_pos += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    // EPIPE: it closed its stdin. Usually it is exiting; its exit says more than this.
    p.input_broken = true;
    p.input.clear();
    p.input_pos = 0;
    if (p.input_watched) loop_.Unwatch(p.in);
    p.input_watched = false;
    ArmClosedGrace("closed its stdin");
    return;
  }
  if (p.input_pos == p.input.size()) {
    p.input.clear();
    p.input_pos = 0;
    if (p.input_watched) loop_.Unwatch(p.in);
    p.input_watched = false;
  } else if (!p.input_watched) {
    p.input_watched = static_cast<bool>(loop_.Watch(p.in, EPOLLOUT, [this](uint32_t) { OnStdin(); }));
  }
}

void Downstream::OnStdin() {
  if (!process_ || process_->in < 0) return;
  FlushStdin();
  Settle();
  Deliver();
}

// ---- messages and delivery ----

void Downstream::ProtocolProblem(std::string what) {
  ++protocol_problems_;
  last_protocol_problem_ = CleanText(what, 300, false);
}

std::string Downstream::Context() const {
  std::string s;
  std::string_view tail = stderr_tail_;
  while (!tail.empty() && std::isspace(static_cast<unsigned char>(tail.back()))) tail.remove_suffix(1);
  if (tail.size() > kQuotedStderrBytes) {
    tail = tail.substr(tail.size() - kQuotedStderrBytes);
    const size_t nl = tail.find('\n');
    if (nl != std::string_view::npos && nl + 1 < tail.size()) tail.remove_prefix(nl + 1);  // start at a line
    while (!tail.empty() && (static_cast<unsigned char>(tail.front()) & 0xC0) == 0x80) tail.remove_prefix(1);
  }
  if (!tail.empty()) s += "; its stderr ends: " + CleanText(tail, kQuotedStderrBytes + 8, false);
  if (!last_protocol_problem_.empty()) s += "; last protocol problem: " + last_protocol_problem_;
  return s;
}

Error Downstream::MakeServerError(ErrorCode code, const std::string& what, bool with_context) const {
  return MakeError(code, "MCP server " + config_.name + " " + what + (with_context ? Context() : ""));
}

std::string Downstream::StripServerName(const std::string& message) const {
  const std::string prefix = "MCP server " + config_.name + " ";
  return message.rfind(prefix, 0) == 0 ? message.substr(prefix.size()) : message;
}

void Downstream::DeliverLater() {
  if (outbox_.empty() || delivery_posted_) return;
  delivery_posted_ = true;
  loop_.Post([this, alive = std::weak_ptr<int>(alive_)] {
    if (alive.expired()) return;
    delivery_posted_ = false;
    Deliver();
  });
}

void Downstream::Deliver() {
  const std::weak_ptr<int> alive = alive_;
  while (!outbox_.empty()) {
    std::vector<std::function<void()>> batch;
    batch.swap(outbox_);
    for (auto& fn : batch) {
      fn();
      if (alive.expired()) return;  // a callback destroyed us: nothing more is ours to call
    }
  }
}

}  // namespace basal::mcp
