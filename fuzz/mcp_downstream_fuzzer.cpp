// Fuzz target: Downstream (src/mcp/downstream.h), the client side of `basal mcp`: every byte a
// downstream MCP server writes to its stdout reaches it, and the server is other people's software.
//
// Each input runs one Downstream against a real process, `/bin/sh -c 'exec cat FIFO'`, whose stdout
// is whatever this target writes into FIFO: the input's lines, as the server's output. The client's
// request ids are deterministic (1 for initialize, then one per request), so the fuzzer finds the
// answers that move the client on (a tools/list page, a tools/call result). A line starting with
// '#' is an action of the client's instead, taken once the lines before it were read:
//   #c<tool>   Call(tool, {"n": <k>}) (k counts the calls)
//   #x<n>      Cancel the n-th call made (n modulo their count)
// At the end the FIFO is closed (the server's stdout ends, it exits) and the Downstream destroyed.
// The bounds are set small (DownstreamLimits below), so an input of a few KiB reaches each.
//
// Invariants:
// - the start's `ready` and each call's `done` are called exactly once, never inside Start or Call,
//   by the time the server has gone (or Stop/destroy: the destructor calls back no one);
// - an error names the server ("MCP server fz ..."), is valid UTF-8 and holds no control character
//   but the newline and tab of a quoted stderr;
// - a call's result is an object with a content array (isError true or false, structuredContent an
//   object or null, when present);
// - the kept tools: at most max_tools, unique valid names, each definition within max_tool_bytes and
//   max_tool_values, all within max_tools_total_bytes and the shared budget; each schema kept as
//   text that parses to an object (the input schema) or to an object or nothing (the others);
// - what the tool list charged to the shared budget is given back when the Downstream is gone.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_check.h"
#include "mcp/downstream.h"
#include "parent/loop/event_loop.h"
#include "protocol/messages.h"

namespace {

using basal::EventLoop;
using basal::Json;
using basal::Result;
using basal::mcp::Downstream;
using basal::mcp::DownstreamConfig;
using basal::mcp::DownstreamLimits;
using basal::mcp::SharedToolBudget;
using namespace std::chrono_literals;

// What the loop may take to read what was written: far more than it needs. Past it the target
// stops as a hang (the Downstream stopped reading a live server's output).
constexpr auto kWaitLimit = 20s;

struct Shared {
  std::unique_ptr<EventLoop> loop;
  std::string dir, fifo;
};

Shared& Setup() {
  static Shared* shared = [] {
    signal(SIGPIPE, SIG_IGN);
    auto* s = new Shared;
    auto loop = EventLoop::Create();
    if (!loop) {
      std::fprintf(stderr, "mcp_downstream_fuzzer: no event loop: %s\n", loop.error().message.c_str());
      std::abort();
    }
    s->loop = std::move(*loop);
    char dir[] = "/tmp/basal-downstream-fuzz-XXXXXX";
    if (!mkdtemp(dir)) std::abort();
    s->dir = dir;
    s->fifo = s->dir + "/server-stdout";
    if (mkfifo(s->fifo.c_str(), 0600) != 0) std::abort();
    return s;
  }();
  return *shared;
}

// Valid UTF-8 (the strict reading of RFC 3629) and no control character but \n and \t.
bool CleanMessage(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
    const unsigned char c = b(i);
    if (c < 0x80) {
      if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) return false;
      ++i;
      continue;
    }
    size_t len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k)
      if ((b(i + k) & 0xC0) != 0x80) return false;
    if (len == 2 && c == 0xC2 && b(i + 1) < 0xA0) return false;  // C1 controls
    i += len;
  }
  return true;
}

void CheckError(const basal::Error& e, const std::string& what) {
  FUZZ_CHECK(e.message.rfind("MCP server fz ", 0) == 0 || e.message.rfind("the arguments of tools/call", 0) == 0 ||
                 e.message.rfind("cancelled: ", 0) == 0,
             what + ": the error does not name the server: " + e.message);
  FUZZ_CHECK(CleanMessage(e.message), what + ": the error is not clean text: " + e.message);
}

void CheckTools(const Downstream& d, const DownstreamLimits& limits) {
  FUZZ_CHECK(d.tools().size() <= limits.max_tools, std::to_string(d.tools().size()) + " tools kept");
  std::set<std::string> names;
  for (const auto& t : d.tools()) {
    FUZZ_CHECK(!t.name.empty() && t.name.size() <= 128, "tool name of " + std::to_string(t.name.size()) + " bytes");
    FUZZ_CHECK(names.insert(t.name).second, "tool " + t.name + " kept twice");
    FUZZ_CHECK(t.input_schema != nullptr, "tool " + t.name + " has no input schema");
    const Json input = basal::mcp::ParseSchema(t.input_schema);
    FUZZ_CHECK(input.is_object(), "tool " + t.name + "'s input schema text is not an object: " + *t.input_schema);
    FUZZ_CHECK(basal::protocol::CountJsonValues(*t.input_schema) <= limits.max_tool_values,
               "tool " + t.name + "'s schema has more values than max_tool_values");
    for (const auto* other : {&t.output_schema, &t.annotations})
      FUZZ_CHECK(*other == nullptr || basal::mcp::ParseSchema(*other).is_object(), "tool " + t.name + ": a kept text");
    FUZZ_CHECK(d.FindTool(t.name) == &t, "FindTool(" + t.name + ")");
  }
}

// Runs the loop until `done`, or aborts as a hang.
void RunUntil(EventLoop& loop, const std::function<bool()>& done, const char* what) {
  const auto until = std::chrono::steady_clock::now() + kWaitLimit;
  while (!done()) {
    FUZZ_CHECK(std::chrono::steady_clock::now() < until, std::string("hang: ") + what);
    loop.RunOnce(1ms);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Shared& s = Setup();
  EventLoop& loop = *s.loop;
  const std::string_view input(reinterpret_cast<const char*>(data), size);

  DownstreamLimits limits;
  limits.max_message_bytes = 4096;
  limits.max_message_values = 256;
  limits.max_json_depth = 32;
  limits.max_tools = 8;
  limits.max_tool_bytes = 1024;
  limits.max_tool_values = 64;
  limits.max_tools_total_bytes = 4096;
  limits.max_list_pages = 4;
  limits.max_calls_in_flight = 4;
  limits.max_queued_input_bytes = 1 << 16;
  limits.stderr_tail_bytes = 256;
  limits.restart_backoff = 1h;  // a server that died stays down: one process an input
  limits.stop_grace = 100ms;
  auto shared = std::make_shared<SharedToolBudget>();
  shared->max_bytes = 3000;
  limits.shared_tools = shared;

  DownstreamConfig config;
  config.name = "fz";
  config.command = "/bin/sh";
  config.args = {"-c", "exec cat \"$0\"", s.fifo};
  config.env = {{"PATH", "/usr/bin:/bin"}};
  config.client_version = "0";
  config.start_timeout = 60s;  // the input decides when the start ends (its lines, or their end)
  config.call_timeout = 60s;

  int ready_calls = 0;
  std::optional<Result<void>> ready;
  struct CallState {
    uint64_t token = 0;
    int done = 0;
  };
  std::vector<std::shared_ptr<CallState>> calls;
  auto d = std::make_unique<Downstream>(loop, config, limits);
  d->Start([&](const Result<void>& r) {
    ++ready_calls;
    ready.emplace(r);
    if (!r) CheckError(r.error(), "start");
  });
  FUZZ_CHECK(ready_calls == 0, "ready was called inside Start");

  // The server's stdout: opened once `cat` has opened the FIFO to read it.
  int out = -1;
  RunUntil(
      loop,
      [&] {
        out = ::open(s.fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
        return out >= 0 || d->state() == Downstream::State::kFailed;
      },
      "the server never opened its stdout");
  const auto gone = [&] { return d->pid() == 0 || d->state() == Downstream::State::kFailed; };
  size_t syncs = 0;
  // Writes the server's lines, then a line that marks their end (an answer to an id basal never
  // sends: its protocol problem names it), and waits until the Downstream has read up to it.
  const auto emit = [&](const std::string& lines) {
    if (out < 0) return;
    const std::string mark = "sync-" + std::to_string(++syncs);
    const std::string text = lines + "\n{\"jsonrpc\":\"2.0\",\"id\":\"" + mark + "\",\"result\":{}}\n";
    size_t at = 0;
    while (at < text.size() && !gone()) {
      const ssize_t n = ::write(out, text.data() + at, text.size() - at);
      if (n > 0) at += static_cast<size_t>(n);
      else if (n < 0 && errno != EAGAIN && errno != EINTR) break;  // the server is gone
      else loop.RunOnce(1ms);
    }
    RunUntil(
        loop, [&] { return gone() || d->last_protocol_problem().find("\"" + mark + "\"") != std::string::npos; },
        "the Downstream did not read the server's lines");
  };

  std::string pending;
  size_t start = 0;
  while (start <= input.size()) {
    size_t nl = input.find('\n', start);
    if (nl == std::string_view::npos) nl = input.size();
    const std::string_view line = input.substr(start, nl - start);
    start = nl + 1;
    if (line.size() >= 2 && line[0] == '#' && (line[1] == 'c' || line[1] == 'x')) {
      emit(pending);
      pending.clear();
      if (line[1] == 'c') {
        auto c = std::make_shared<CallState>();
        const size_t made = calls.size();
        calls.push_back(c);
        // A tool name as codemode passes one: a name the server listed, so of MCP's characters.
        std::string tool;
        for (const char ch : line.substr(2, 128))
          if (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' || ch == '.') tool += ch;
        if (tool.empty()) tool = "t";
        c->token = d->Call(tool, Json{{"n", made}}, [c](Result<Json> r) {
          ++c->done;
          if (!r) return CheckError(r.error(), "call");
          const Json& v = *r;
          FUZZ_CHECK(v.is_object() && v.contains("content") && v["content"].is_array(), "result " + v.dump());
          FUZZ_CHECK(!v.contains("isError") || v["isError"].is_boolean(), "result " + v.dump());
          FUZZ_CHECK(!v.contains("structuredContent") || v["structuredContent"].is_object() ||
                         v["structuredContent"].is_null(),
                     "result " + v.dump());
        });
        FUZZ_CHECK(c->token != 0 && c->done == 0, "Call answered inside Call, or a token of 0");
      } else if (!calls.empty()) {
        const size_t n = std::strtoul(std::string(line.substr(2)).c_str(), nullptr, 10) % calls.size();
        d->Cancel(calls[n]->token, "fuzz");
      }
      continue;
    }
    pending.append(line);
    if (nl < input.size()) pending += '\n';
  }
  emit(pending);
  CheckTools(*d, limits);
  FUZZ_CHECK(shared->used_bytes <= shared->max_bytes, "the shared budget holds " + std::to_string(shared->used_bytes));

  // The end of the server's stdout: it exits, and everything still waiting is answered.
  if (out >= 0) ::close(out);
  RunUntil(
      loop,
      [&] {
        if (!ready) return false;
        for (const auto& c : calls)
          if (c->done == 0) return false;
        return true;
      },
      "a callback was never called after the server ended");
  FUZZ_CHECK(ready_calls == 1, "ready called " + std::to_string(ready_calls) + " times");
  for (const auto& c : calls) FUZZ_CHECK(c->done == 1, "a call's done called " + std::to_string(c->done) + " times");
  d.reset();
  FUZZ_CHECK(shared->used_bytes == 0, "the shared budget keeps " + std::to_string(shared->used_bytes) + " bytes");
  // Callbacks posted for later (DeliverLater) find the Downstream gone and do nothing.
  loop.RunOnce(0ms);
  return 0;
}
