// `basal mcp --policy NAME`: the Model Context Protocol on stdin/stdout (newline-delimited JSON-RPC,
// the MCP stdio transport) for an AI agent, serving codemode (src/mcp/codemode.h). Everything runs
// on the module's loop: stdin is read when readable, answers are written when stdout is writable.
#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "basal/module.h"
#include "basal/terminal_text.h"
#include "cli/cli_support.h"
#include "cli/commands.h"
#include "mcp/codemode.h"
#include "mcp/server.h"
#include "parent/loop/event_loop.h"
#include "parent/module_host.h"
#include "parent/secrets/secret_store.h"

namespace basal::cli {
namespace {

// One message on stdin: run_script's code is at most 1 MiB, and JSON escapes can make that six
// times larger. A longer line is answered with an error and skipped up to its newline.
constexpr size_t kMaxLineBytes = 8u << 20;
// Answers the client has not read: past this, stdin is not read until they drain (a client that
// never reads cannot make basal hold more than this and one more answer).
constexpr size_t kMaxPendingOutputBytes = 16u << 20;

class ObserverToStderr final : public ModuleObserver {
 public:
  void OnEvent(const ModuleEvent& e) override { ReportError(ModuleEventKindName(e.kind), e.message); }
};

// stdin and stdout on the loop. A regular file (stdin redirected from one) cannot be watched with
// epoll: it is read a chunk per loop pass instead, and stdout to a file is written at once.
class Stdio {
 public:
  Stdio(EventLoop& loop, std::function<void(std::string_view)> on_message, std::function<void()> on_end)
      : loop_(loop), on_message_(std::move(on_message)), on_end_(std::move(on_end)) {}
  ~Stdio() {
    loop_.Unwatch(0);
    loop_.Unwatch(1);
  }

  void Start() {
    (void)fcntl(0, F_SETFL, fcntl(0, F_GETFL) | O_NONBLOCK);
    (void)fcntl(1, F_SETFL, fcntl(1, F_GETFL) | O_NONBLOCK);
    WatchInput();
  }

  void Send(std::string message) {
    out_ += message;
    out_ += '\n';
    Flush();
  }

  // Stops reading (the end of input, or a signal).
  void StopReading() {
    if (reading_) loop_.Unwatch(0);
    reading_ = false;
    ended_ = true;
  }
  bool output_pending() const { return out_.size() > out_sent_; }
  bool output_failed() const { return output_failed_; }

 private:
  void WatchInput() {
    if (ended_ || reading_) return;
    if (loop_.Watch(0, EPOLLIN, [this](uint32_t) { Read(); })) {
      reading_ = true;
    } else {
      loop_.Post([this] {  // a regular file: always readable
        if (!ended_) Read();
        if (!ended_ && !Paused()) WatchInputFromFile();
      });
    }
  }
  void WatchInputFromFile() {
    loop_.Post([this] {
      if (ended_) return;
      Read();
      if (!ended_ && !Paused()) WatchInputFromFile();
    });
  }
  bool Paused() const { return out_.size() - out_sent_ > kMaxPendingOutputBytes; }

  void Read() {
    char buf[65536];
    for (int i = 0; i < 16 && !ended_; ++i) {
      const ssize_t n = read(0, buf, sizeof buf);
      if (n == 0) return End();
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        ReportError("io", std::string("basal mcp: reading stdin failed: ") + std::strerror(errno));
        return End();
      }
      Take(std::string_view(buf, static_cast<size_t>(n)));
      if (Paused()) {
        if (reading_) loop_.Unwatch(0);
        reading_ = false;
        return;
      }
    }
  }

  void Take(std::string_view data) {
    while (!data.empty()) {
      const size_t nl = data.find('\n');
      const std::string_view part = data.substr(0, nl);
      if (!skipping_) {
        if (in_.size() + part.size() > kMaxLineBytes) {
          skipping_ = true;
          in_.clear();
          Send(R"({"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"a message longer than )" +
               std::to_string(kMaxLineBytes >> 20) + R"( MiB was skipped: send a shorter script"}})");
        } else {
          in_.append(part);
        }
      }
      if (nl == std::string_view::npos) return;
      data.remove_prefix(nl + 1);
      if (skipping_) {
        skipping_ = false;
        continue;
      }
      std::string line = std::move(in_);
      in_.clear();
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (!line.empty()) on_message_(line);
    }
  }

  void End() {
    StopReading();
    on_end_();
  }

  void Flush() {
    while (out_sent_ < out_.size()) {
      const ssize_t n = write(1, out_.data() + out_sent_, out_.size() - out_sent_);
      if (n > 0) {
        out_sent_ += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (!writing_ && loop_.Watch(1, EPOLLOUT, [this](uint32_t) { Flush(); })) writing_ = true;
        return;
      }
      // The client closed its end: nothing more can reach it.
      output_failed_ = true;
      out_.clear();
      out_sent_ = 0;
      End();
      break;
    }
    if (out_sent_ == out_.size()) {
      out_.clear();
      out_sent_ = 0;
      if (writing_) loop_.Unwatch(1);
      writing_ = false;
      if (!reading_ && !ended_) WatchInput();  // drained: read requests again
    }
  }

  EventLoop& loop_;
  std::function<void(std::string_view)> on_message_;
  std::function<void()> on_end_;
  std::string in_;
  bool skipping_ = false;
  std::string out_;
  size_t out_sent_ = 0;
  bool reading_ = false;
  bool writing_ = false;
  bool ended_ = false;
  bool output_failed_ = false;
};

}  // namespace

int McpCommand(const McpOptions& o) {
  // SIGINT, SIGTERM and SIGHUP end the session; blocked before the module starts any thread and
  // taken from a signalfd on the loop.
  sigset_t signals, old;
  sigemptyset(&signals);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&signals, s);
  pthread_sigmask(SIG_BLOCK, &signals, &old);

  auto base = ModuleOptionsFor(o.worker_path, o.db_path);
  if (!base) return Fail(kKindIo, base.error().message);
  ModuleOptions mo = std::move(*base);
  mo.allow_without_landlock = o.allow_without_landlock;
  mo.worker_user = o.worker_user;
  mo.max_workers = o.max_workers;
  mo.require_approval = true;  // only scripts under the approved policy run here
#ifdef BASAL_TEST_HOOKS
  mo.worker_args = o.worker_args;
#endif
  mo.observer = std::make_shared<ObserverToStderr>();
  // console.* lines go to the script's result (and the journal); the codemode is made after the
  // module, so the sink reaches it through this holder.
  auto codemode_holder = std::make_shared<mcp::Codemode*>(nullptr);
  mo.log_sink = [codemode_holder](const HostCallContext& ctx, std::string_view level, std::string_view message) {
    if (*codemode_holder) (*codemode_holder)->OnLog(ctx, level, message);
  };
  auto module = Module::Open(mo);
  if (!module) return Fail(KindForOpenError(module.error()), module.error().message);

  mcp::CodemodeLimits limits;
  limits.max_scripts_running = o.max_scripts;
  auto codemode = std::make_unique<mcp::Codemode>(**module, o.policy, BASAL_VERSION, limits);
  *codemode_holder = codemode.get();
  if (auto started = codemode->Start(mo.secrets_dir); !started) {
    const Error& e = started.error();
    if (e.code == ErrorCode::kNotFound || e.code == ErrorCode::kRefused) {
      ReportError("refused", e.message);
      return kExitRefused;
    }
    return Fail(e.code == ErrorCode::kInvalidArgument ? kKindManifest : kKindJournal, e.message);
  }
  {
    std::string tools;
    for (const mcp::ScriptTool& t : codemode->ScriptTools()) tools += " " + t.group + "." + t.member;
    WriteStderr("basal mcp: serving codemode policy " + EscapeForTerminal(o.policy, TerminalText::kOneLine) +
                " on stdin/stdout; tools:" + (tools.empty() ? std::string(" none") : EscapeForTerminal(tools, TerminalText::kOneLine)) +
                "\n");
    for (const auto& [server, why] : codemode->UnavailableServers()) {
      WriteStderr("basal mcp: downstream MCP server " + EscapeForTerminal(server, TerminalText::kOneLine) +
                  " is not running (its tools are not offered; a call restarts it): " +
                  EscapeForTerminal(why, TerminalText::kOneLine) + "\n");
    }
  }

  EventLoop& loop = (*module)->host().loop();
  bool ended = false;
  int caught = 0;
  std::unique_ptr<mcp::McpServer> server;
  Stdio stdio(
      loop, [&server](std::string_view message) { server->OnMessage(message); },
      [&] {
        // The end of input: nothing new is read; what runs finishes (within its deadline) and is
        // answered, unless nobody can read the answers any more.
        ended = true;
        if (server && stdio.output_failed()) server->CancelAll();
      });
  server = std::make_unique<mcp::McpServer>(*codemode, mcp::ServerInfo{"basal", BASAL_VERSION, codemode->Instructions()},
                                            [&stdio](std::string message) { stdio.Send(std::move(message)); });
  const int sigfd = signalfd(-1, &signals, SFD_NONBLOCK | SFD_CLOEXEC);
  if (sigfd >= 0) {
    (void)loop.Watch(sigfd, EPOLLIN, [&](uint32_t) {
      signalfd_siginfo info{};
      if (read(sigfd, &info, sizeof info) == static_cast<ssize_t>(sizeof info) && caught == 0) {
        caught = static_cast<int>(info.ssi_signo);
        stdio.StopReading();
        ended = true;
        (*module)->CancelAll(std::string("cancelled: basal mcp received ") + sigabbrev_np(caught) + " and stopped");
        server->CancelAll();
      }
    });
  }
  stdio.Start();

  // Serve until the input ends, then let running scripts end and their answers go (a client that
  // closed stdin may still read stdout); a signal cancelled them already.
  // A client that never reads what is left gets 10 s.
  std::optional<EventLoop::Clock::time_point> give_up;
  while (!ended || codemode->running() > 0 || (stdio.output_pending() && !stdio.output_failed())) {
    if (ended && !give_up) give_up = EventLoop::Clock::now() + std::chrono::seconds(10);
    if (give_up && codemode->running() == 0 && EventLoop::Clock::now() > *give_up) break;
    (*module)->RunFor(std::chrono::milliseconds(100));
  }
  server.reset();
  codemode.reset();  // stops the downstream servers
  (*module)->Shutdown(std::chrono::milliseconds(1000));
  if (sigfd >= 0) {
    loop.Unwatch(sigfd);
    close(sigfd);
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return caught != 0 ? 128 + caught : kExitOk;
}

}  // namespace basal::cli
