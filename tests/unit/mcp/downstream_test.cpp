// Downstream (src/mcp/downstream.h) against a stand-in MCP server (fake_mcp_server.py), on a real
// EventLoop: the start (two pages of tools, the handshake as sent), calls answered, isError passed
// through, JSON-RPC errors and malformed answers, a server that exits at start, never answers
// initialize, speaks another protocol version, dies mid-call (and is restarted, or not within the
// backoff), hangs (call_timeout), a call cancelled, garbage lines, an over-long line, every bound
// (tools, tool bytes, pages, calls in flight, queued input, stderr tail), a server->client ping
// and the requests basal refuses, Stop and the destructor killing the process group, the exact
// environment, spawn failures, and a callback that destroys the Downstream.
#include "mcp/downstream.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace basal::mcp {
namespace {

using namespace std::chrono_literals;

constexpr const char* kFakeServer = BASAL_SOURCE_DIR "/tests/unit/mcp/fake_mcp_server.py";

// The end of a process: no such process, or a zombie nobody has reaped yet (the orphaned
// grandchild's new parent may be slow to reap, or may not reap at all in a container).
bool ProcessGone(pid_t pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == 'Z';
}

// The interpreter itself, not a launcher in front of it (pyenv's shim is a shell script that adds
// its own variables to the environment before it execs python, which the environment test would
// see). Asked of the interpreter once; BASAL_PYTHON if it cannot say.
const std::string& Python() {
  static const std::string path = [] {
    std::string out;
    if (FILE* p = ::popen(BASAL_PYTHON " -c 'import sys; print(sys.executable)'", "r")) {
      char buf[4096];
      while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
      ::pclose(p);
    }
    while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
    return !out.empty() && out.front() == '/' ? out : std::string(BASAL_PYTHON);
  }();
  return path;
}

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

class DownstreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto created = EventLoop::Create();
    ASSERT_TRUE(created) << created.error().message;
    loop = std::move(*created);
    char dir[] = "/tmp/basal-downstream-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    temp_dir = dir;
    record = temp_dir + "/record.jsonl";
  }
  void TearDown() override {
    std::remove(record.c_str());
    ::rmdir(temp_dir.c_str());
  }

  // Runs the loop until `done` holds. The limit only keeps a broken test from hanging; it is no
  // measure of anything.
  bool RunUntil(const std::function<bool()>& done, std::chrono::seconds limit = 60s) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (!done()) {
      if (std::chrono::steady_clock::now() > until) return false;
      loop->RunOnce(50ms);
    }
    return true;
  }

  DownstreamConfig Config(std::vector<std::string> flags = {}) {
    DownstreamConfig c;
    c.name = "fs";
    c.command = Python();
    c.args = {kFakeServer, "--record", record};
    c.args.insert(c.args.end(), flags.begin(), flags.end());
    c.env = {{"FAKE_SERVER", "1"}};
    c.client_version = "9.9.9";
    return c;
  }

  Result<void> StartAndWait(Downstream& d) {
    std::optional<Result<void>> ready;
    int calls = 0;
    d.Start([&](const Result<void>& r) {
      ++calls;
      ready.emplace(r);
    });
    EXPECT_FALSE(ready) << "ready is never called inside Start";
    EXPECT_TRUE(RunUntil([&] { return ready.has_value(); }));
    EXPECT_EQ(calls, 1);
    if (!ready) return MakeError(ErrorCode::kInternal, "the start never ended");
    return *ready;
  }

  Result<Json> CallAndWait(Downstream& d, const std::string& tool, const Json& args = Json::object()) {
    std::optional<Result<Json>> out;
    int calls = 0;
    d.Call(tool, args, [&](Result<Json> r) {
      ++calls;
      out.emplace(std::move(r));
    });
    EXPECT_FALSE(out) << "done is never called inside Call";
    EXPECT_TRUE(RunUntil([&] { return out.has_value(); }));
    EXPECT_EQ(calls, 1);
    if (!out) return MakeError(ErrorCode::kInternal, "the call never ended");
    return *out;
  }

  // The messages the fake server received, in order.
  std::vector<Json> Recorded() {
    std::vector<Json> out;
    std::ifstream in(record);
    std::string line;
    while (std::getline(in, line))
      if (!line.empty()) out.push_back(Json::parse(line));
    return out;
  }

  std::unique_ptr<EventLoop> loop;
  std::string temp_dir, record;
};

TEST_F(DownstreamTest, StartsAndListsToolsAcrossTwoPages) {
  Downstream d(*loop, Config());
  EXPECT_EQ(d.state(), Downstream::State::kStopped);
  auto ready = StartAndWait(d);
  ASSERT_TRUE(ready) << ready.error().message;
  EXPECT_EQ(d.state(), Downstream::State::kReady);
  EXPECT_EQ(d.name(), "fs");
  EXPECT_EQ(d.protocol_version(), "2025-11-25");
  EXPECT_EQ(d.server_info()["name"], "fake");
  EXPECT_EQ(d.instructions(), "A fake server for tests.");
  ASSERT_EQ(d.tools().size(), 17u);
  EXPECT_EQ(d.tools_dropped(), 0u);
  EXPECT_FALSE(d.tools_list_incomplete());
  EXPECT_EQ(d.tools().front().name, "echo");
  EXPECT_EQ(d.tools().back().name, "no_schema.v1");

  const DownstreamTool* echo = d.FindTool("echo");
  ASSERT_NE(echo, nullptr);
  EXPECT_EQ(echo->title, "Echo text");
  EXPECT_EQ(echo->description, "Answers with its text.");
  EXPECT_EQ(ParseSchema(echo->input_schema)["properties"]["text"]["type"], "string");
  EXPECT_EQ(*echo->input_schema, R"({"properties":{"text":{"type":"string"}},"type":"object"})")
      << "kept as compact text";
  EXPECT_EQ(ParseSchema(echo->output_schema), Json({{"type", "object"}}));
  EXPECT_EQ(ParseSchema(echo->annotations)["readOnlyHint"], true);
  const DownstreamTool* fail = d.FindTool("fail");
  ASSERT_NE(fail, nullptr);
  EXPECT_EQ(fail->title, "Always fails") << "the title falls back to annotations.title";
  EXPECT_EQ(fail->output_schema, nullptr);
  EXPECT_TRUE(ParseSchema(fail->output_schema).is_null());
  const DownstreamTool* bare = d.FindTool("no_schema.v1");
  ASSERT_NE(bare, nullptr);
  EXPECT_EQ(ParseSchema(bare->input_schema), Json({{"type", "object"}}));
  EXPECT_EQ(bare->annotations, nullptr);
  EXPECT_EQ(d.FindTool("nothing"), nullptr);

  // The handshake as the server saw it.
  const auto got = Recorded();
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0]["method"], "initialize");
  EXPECT_EQ(got[0]["jsonrpc"], "2.0");
  EXPECT_EQ(got[0]["params"]["protocolVersion"], "2025-11-25");
  EXPECT_EQ(got[0]["params"]["clientInfo"], Json({{"name", "basal"}, {"version", "9.9.9"}}));
  EXPECT_EQ(got[1]["method"], "notifications/initialized");
  EXPECT_FALSE(got[1].contains("id"));
  EXPECT_EQ(got[2]["method"], "tools/list");
  EXPECT_FALSE(got[2]["params"].contains("cursor"));
  EXPECT_EQ(got[3]["method"], "tools/list");
  EXPECT_EQ(got[3]["params"]["cursor"], "page-2");
}

TEST_F(DownstreamTest, ACallIsAnsweredWithTheResultAsSent) {
  Downstream d(*loop, Config());
  ASSERT_TRUE(StartAndWait(d));
  auto r = CallAndWait(d, "echo", {{"text", "hi"}});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(*r, Json({{"content", {{{"type", "text"}, {"text", "hi"}}}},
                      {"structuredContent", {{"echo", {{"text", "hi"}}}}}}));
  const auto got = Recorded();
  EXPECT_EQ(got.back()["method"], "tools/call");
  EXPECT_EQ(got.back()["params"], Json({{"name", "echo"}, {"arguments", {{"text", "hi"}}}}));
  // Null arguments are sent as {}.
  auto again = CallAndWait(d, "echo", Json());
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(Recorded().back()["params"]["arguments"], Json::object());
}

TEST_F(DownstreamTest, ACallMadeWhileStartingWaitsForTheServer) {
  Downstream d(*loop, Config());
  std::optional<Result<void>> ready;
  d.Start([&](const Result<void>& r) { ready.emplace(r); });
  std::optional<Result<Json>> out;
  d.Call("echo", {{"text", "early"}}, [&](Result<Json> r) { out.emplace(std::move(r)); });
  ASSERT_TRUE(RunUntil([&] { return out.has_value(); }));
  ASSERT_TRUE(ready && *ready);
  ASSERT_TRUE(*out) << out->error().message;
  EXPECT_EQ((**out)["content"][0]["text"], "early");
}

TEST_F(DownstreamTest, AnIsErrorResultIsAResultPassedThroughAsSent) {
  Downstream d(*loop, Config());
  ASSERT_TRUE(StartAndWait(d));
  auto r = CallAndWait(d, "fail");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(*r, Json({{"content", {{{"type", "text"}, {"text", "no such file: /srv/x"}}}}, {"isError", true}}));
}

TEST_F(DownstreamTest, AJsonRpcErrorAnswerFailsTheCallNamingIt) {
  Downstream d(*loop, Config());
  ASSERT_TRUE(StartAndWait(d));
  auto r = CallAndWait(d, "rpc_error");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_TRUE(Contains(r.error().message, "MCP server fs")) << r.error().message;
  EXPECT_TRUE(Contains(r.error().message, "tools/call rpc_error")) << r.error().message;
  EXPECT_TRUE(Contains(r.error().message, "-32602: Invalid params: path is required")) << r.error().message;
  auto unknown = CallAndWait(d, "no_such_tool");
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(d.state(), Downstream::State::kReady) << "an error answer says nothing against the server";
}

TEST_F(DownstreamTest, AMalformedAnswerFailsTheCall) {
  Downstream d(*loop, Config());
  ASSERT_TRUE(StartAndWait(d));
  for (const auto& [shape, words] : std::vector<std::pair<std::string, std::string>>{
           {"string", "the result is not an object"},
           {"content", "its content is not an array"},
           {"is_error", "its isError is not true or false"}}) {
    auto r = CallAndWait(d, "malformed", {{"shape", shape}});
    ASSERT_FALSE(r) << shape;
    EXPECT_EQ(r.error().code, ErrorCode::kIo);
    EXPECT_TRUE(Contains(r.error().message, "wrong shape: " + words)) << r.error().message;
  }
  EXPECT_TRUE(CallAndWait(d, "echo"));
}

TEST_F(DownstreamTest, AServerThatExitsAtStartFailsNamingItselfAndItsStderr) {
  Downstream d(*loop, Config({"--exit-at-start"}));
  auto ready = StartAndWait(d);
  ASSERT_FALSE(ready);
  EXPECT_EQ(ready.error().code, ErrorCode::kUnavailable);
  EXPECT_TRUE(Contains(ready.error().message, "MCP server fs exited with status 3")) << ready.error().message;
  EXPECT_TRUE(Contains(ready.error().message, "fake: cannot open /etc/fake.conf")) << ready.error().message;
  EXPECT_EQ(d.state(), Downstream::State::kFailed);
  EXPECT_TRUE(Contains(d.stderr_tail(), "cannot open /etc/fake.conf"));
  // A server that never started is not restarted by a call: the call says why.
  auto r = CallAndWait(d, "echo");
  ASSERT_FALSE(r);
  EXPECT_TRUE(Contains(r.error().message, "exited with status 3")) << r.error().message;
}

TEST_F(DownstreamTest, AServerThatNeverAnswersInitializeFailsAtStartTimeout) {
  auto config = Config({"--silent"});
  config.start_timeout = 300ms;
  Downstream d(*loop, config);
  std::optional<Result<void>> ready;
  d.Start([&](const Result<void>& r) { ready.emplace(r); });
  const pid_t pid = d.pid();
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(RunUntil([&] { return ready.has_value(); }));
  ASSERT_FALSE(*ready);
  EXPECT_EQ(ready->error().code, ErrorCode::kIo);
  EXPECT_TRUE(Contains(ready->error().message, "MCP server fs did not finish starting within 300 ms (start_timeout)"))
      << ready->error().message;
  EXPECT_TRUE(Contains(ready->error().message, "initialize was not answered")) << ready->error().message;
  EXPECT_EQ(d.pid(), 0);
  EXPECT_TRUE(RunUntil([&] { return ProcessGone(pid); }));
}

TEST_F(DownstreamTest, AnUnsupportedProtocolVersionFailsTheStartNamingIt) {
  Downstream d(*loop, Config({"--version", "1999-01-01"}));
  auto ready = StartAndWait(d);
  ASSERT_FALSE(ready);
  EXPECT_TRUE(Contains(ready.error().message, "protocol version \"1999-01-01\", which basal does not speak"))
      << ready.error().message;
  Downstream older(*loop, Config({"--version", "2025-06-18"}));
  auto ok = StartAndWait(older);
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(older.protocol_version(), "2025-06-18");
}

TEST_F(DownstreamTest, AServerThatDiesMidCallFailsItAndTheNextCallRestartsIt) {
  DownstreamLimits limits;
  limits.restart_backoff = 0ms;
  Downstream d(*loop, Config(), limits);
  ASSERT_TRUE(StartAndWait(d));
  const pid_t first = d.pid();
  auto died = CallAndWait(d, "die");
  ASSERT_FALSE(died);
  EXPECT_EQ(died.error().code, ErrorCode::kUnavailable);
  EXPECT_TRUE(Contains(died.error().message, "MCP server fs exited with status 7")) << died.error().message;
  EXPECT_TRUE(Contains(died.error().message, "fake: dying on purpose")) << died.error().message;
  EXPECT_EQ(d.state(), Downstream::State::kFailed);
  EXPECT_TRUE(ProcessGone(first));

  auto again = CallAndWait(d, "echo", {{"text", "back"}});
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ((*again)["content"][0]["text"], "back");
  EXPECT_EQ(d.state(), Downstream::State::kReady);
  EXPECT_NE(d.pid(), first);
  EXPECT_EQ(d.tools().size(), 17u) << "a restart keeps the tools";
  // The restart initialized the new process but did not list its tools again.
  size_t lists = 0, initializes = 0;
  for (const auto& m : Recorded()) {
    lists += m.value("method", "") == "tools/list";
    initializes += m.value("method", "") == "initialize";
  }
  EXPECT_EQ(lists, 2u);
  EXPECT_EQ(initializes, 2u);
}

TEST_F(DownstreamTest, AServerThatClosesItsStdoutButKeepsRunningIsKilled) {
  Downstream d(*loop, Config());
  ASSERT_TRUE(StartAndWait(d));
  const pid_t pid = d.pid();
  auto r = CallAndWait(d, "close_stdout");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  EXPECT_TRUE(Contains(r.error().message, "MCP server fs closed its stdout but kept running; basal killed it"))
      << r.error().message;
  EXPECT_TRUE(RunUntil([&] { return ProcessGone(pid); }));
}

TEST_F(DownstreamTest, AServerThatClosesItsStdinRaisesNoSigpipeAndIsKilled) {
  // A write to a pipe nobody reads raises SIGPIPE; at its default it would end this test.
  struct sigaction old {}, fresh {};
  fresh.sa_handler = SIG_DFL;
  ASSERT_EQ(sigaction(SIGPIPE, &fresh, &old), 0);
  Downstream d(*loop, Config());
  ASSERT_TRUE(StartAndWait(d));
  const pid_t pid = d.pid();
  ASSERT_TRUE(CallAndWait(d, "close_stdin"));
  auto r = CallAndWait(d, "echo", {{"text", "into the void"}});
  sigaction(SIGPIPE, &old, nullptr);
  ASSERT_FALSE(r);
  EXPECT_TRUE(Contains(r.error().message, "MCP server fs closed its stdin")) << r.error().message;
  EXPECT_TRUE(RunUntil([&] { return ProcessGone(pid); }));
}

TEST_F(DownstreamTest, WithinTheRestartBackoffACallFailsSayingWhenToRetry) {
  DownstreamLimits limits;
  limits.restart_backoff = std::chrono::hours(1);
  Downstream d(*loop, Config(), limits);
  ASSERT_TRUE(StartAndWait(d));
  ASSERT_FALSE(CallAndWait(d, "die"));
  auto r = CallAndWait(d, "echo");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  EXPECT_TRUE(Contains(r.error().message, "exited with status 7")) << r.error().message;
  EXPECT_TRUE(Contains(r.error().message, "restart_backoff): retry in ")) << r.error().message;
  EXPECT_EQ(d.state(), Downstream::State::kFailed);
  EXPECT_EQ(d.pid(), 0);
}

TEST_F(DownstreamTest, AHungCallFailsAtCallTimeoutAndTheServerIsToldItIsCancelled) {
  auto config = Config();
  config.call_timeout = 200ms;
  Downstream d(*loop, config);
  ASSERT_TRUE(StartAndWait(d));
  auto r = CallAndWait(d, "hang");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kIo);
  EXPECT_TRUE(Contains(r.error().message, "did not answer tools/call hang within 200 ms (call_timeout)"))
      << r.error().message;
  ASSERT_TRUE(CallAndWait(d, "echo")) << "a hung call does not take the server down";
  const auto got = Recorded();
  int64_t hang_id = -1;
  bool cancelled = false;
  for (const auto& m : got) {
    if (m.value("method", "") == "tools/call" && m["params"]["name"] == "hang") hang_id = m["id"];
    if (m.value("method", "") == "notifications/cancelled") {
      EXPECT_EQ(m["params"]["requestId"], hang_id);
      EXPECT_TRUE(Contains(m["params"]["reason"], "call_timeout"));
      cancelled = true;
    }
  }
  EXPECT_TRUE(cancelled);
}

TEST_F(DownstreamTest, CancelFailsTheCallNowAndTellsTheServer) {
  Downstream d(*loop, Config());
  ASSERT_TRUE(StartAndWait(d));
  std::optional<Result<Json>> out;
  int calls = 0;
  const uint64_t token = d.Call("hang", Json::object(), [&](Result<Json> r) {
    ++calls;
    out.emplace(std::move(r));
  });
  ASSERT_NE(token, 0u);
  // Let the request reach the server before cancelling it.
  ASSERT_TRUE(RunUntil([&] {
    for (const auto& m : Recorded())
      if (m.value("method", "") == "tools/call") return true;
    return false;
  }));
  d.Cancel(token, "the agent gave up");
  ASSERT_TRUE(out.has_value()) << "Cancel calls done before it returns";
  ASSERT_FALSE(*out);
  EXPECT_EQ(out->error().message, "cancelled: the agent gave up");
  d.Cancel(token, "again");
  d.Cancel(token + 1000, "unknown");
  EXPECT_EQ(calls, 1);
  ASSERT_TRUE(RunUntil([&] {
    for (const auto& m : Recorded())
      if (m.value("method", "") == "notifications/cancelled") return true;
    return false;
  }));
  int64_t hang_id = -1;
  for (const auto& m : Recorded()) {
    if (m.value("method", "") == "tools/call") hang_id = m["id"];
    if (m.value("method", "") == "notifications/cancelled") {
      EXPECT_EQ(m["params"], Json({{"requestId", hang_id}, {"reason", "the agent gave up"}}));
    }
  }
  EXPECT_TRUE(CallAndWait(d, "echo"));
  EXPECT_EQ(calls, 1);
}

TEST_F(DownstreamTest, GarbageLinesAreDroppedAndTheCallStillAnswered) {
  Downstream d(*loop, Config());
  ASSERT_TRUE(StartAndWait(d));
  EXPECT_EQ(d.protocol_problems(), 0u);
  auto r = CallAndWait(d, "garbage");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ((*r)["content"][0]["text"], "after garbage");
  // not JSON, unknown id, a batch, too deep, bad UTF-8, a bare string, an object that is nothing
  EXPECT_EQ(d.protocol_problems(), 7u) << d.last_protocol_problem();
  EXPECT_EQ(d.notifications_received(), 2u);
  EXPECT_TRUE(Contains(d.last_protocol_problem(), "neither a request, a notification nor an answer"))
      << d.last_protocol_problem();
  EXPECT_EQ(d.state(), Downstream::State::kReady);
  EXPECT_TRUE(CallAndWait(d, "echo"));
}

TEST_F(DownstreamTest, AnOverLongLineKillsTheServerNamingTheBound) {
  DownstreamLimits limits;
  limits.max_message_bytes = 4096;
  for (const bool newline : {true, false}) {
    Downstream d(*loop, Config(), limits);
    ASSERT_TRUE(StartAndWait(d));
    const pid_t pid = d.pid();
    auto r = CallAndWait(d, "long_line", {{"bytes", 10000}, {"newline", newline}});
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ErrorCode::kIo);
    EXPECT_TRUE(Contains(r.error().message, "wrote a line longer than 4096 bytes (max_message_bytes)"))
        << r.error().message;
    EXPECT_EQ(d.state(), Downstream::State::kFailed);
    EXPECT_TRUE(RunUntil([&] { return ProcessGone(pid); }));
  }
}

TEST_F(DownstreamTest, ToolsPastMaxToolsAndInvalidToolsAreDroppedAndCounted) {
  DownstreamLimits limits;
  limits.max_tools = 10;
  Downstream d(*loop, Config({"--many-tools", "30", "--bad-tools"}), limits);
  ASSERT_TRUE(StartAndWait(d));
  ASSERT_EQ(d.tools().size(), 10u);
  EXPECT_EQ(d.tools()[9].name, "t9");
  EXPECT_EQ(d.tools_dropped(), 20u + 7u);

  Downstream bad(*loop, Config({"--bad-tools"}));
  ASSERT_TRUE(StartAndWait(bad));
  EXPECT_EQ(bad.tools().size(), 17u);
  EXPECT_EQ(bad.tools_dropped(), 7u);
  EXPECT_EQ(bad.FindTool("bad name"), nullptr);
  EXPECT_EQ(bad.FindTool("schema_is_text"), nullptr);
  EXPECT_EQ(bad.FindTool("echo")->title, "Echo text") << "the first of two tools of one name is kept";
}

TEST_F(DownstreamTest, ToolDefinitionsPastTheByteBoundsAreDropped) {
  DownstreamLimits limits;
  limits.max_tool_bytes = 4096;
  Downstream d(*loop, Config({"--big-tool", "10000"}), limits);
  ASSERT_TRUE(StartAndWait(d));
  EXPECT_EQ(d.FindTool("big"), nullptr);
  EXPECT_EQ(d.tools_dropped(), 1u);
  EXPECT_TRUE(Contains(d.last_protocol_problem(), "max_tool_bytes")) << d.last_protocol_problem();

  DownstreamLimits total;
  total.max_tools_total_bytes = 2000;  // room for the first few tools only
  Downstream t(*loop, Config({"--many-tools", "100"}), total);
  ASSERT_TRUE(StartAndWait(t));
  EXPECT_GT(t.tools().size(), 0u);
  EXPECT_LT(t.tools().size(), 100u);
  EXPECT_EQ(t.tools().size() + t.tools_dropped(), 100u);
}

// Whether this process's resident set says what the code keeps: not under AddressSanitizer, whose
// quarantine keeps freed memory resident (hundreds of MiB) and whose redzones pad every block.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kMemoryIsMeasurable = false;
#else
constexpr bool kMemoryIsMeasurable = true;
#endif

// The resident set of this process now, in bytes.
uint64_t ResidentBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  return 0;
}

// Issue 25 point 5: a tool list within the byte bounds, of schemas made of tiny values, was kept as
// parsed trees (32 MiB of them: 1.70 GB for the life of basal mcp). Schemas are kept as text now,
// and parsed for one use at a time.
TEST_F(DownstreamTest, AToolListOfTinyValuesIsKeptAsTextNotAsTrees) {
  // 100 tools of 60,000 empty objects each: 18 MB of text, about 500 MB as trees.
  const uint64_t before = ResidentBytes();
  Downstream d(*loop, Config({"--tiny-schemas", "100", "60000"}));
  auto ready = StartAndWait(d);
  ASSERT_TRUE(ready) << ready.error().message;
  ASSERT_EQ(d.tools().size(), 100u) << d.last_protocol_problem();
  const uint64_t after = ResidentBytes();
  std::cout << "[ resident ] grew by " << ((after - std::min(after, before)) >> 20) << " MiB\n";
  if (kMemoryIsMeasurable) {
    EXPECT_LT(after - std::min(after, before), 100ull << 20) << "the list costs its text, not its trees";
  }
  size_t kept = 0;
  for (const DownstreamTool& t : d.tools()) kept += t.input_schema->size();
  EXPECT_GT(kept, 100u * 60000 * 3);
  EXPECT_EQ(ParseSchema(d.FindTool("s7")->input_schema)["x"].size(), 60000u) << "parsed when needed, whole";
}

TEST_F(DownstreamTest, AToolPastMaxToolValuesIsDroppedAndTheServersShareABudget) {
  DownstreamLimits limits;
  limits.max_tool_values = 1000;
  Downstream d(*loop, Config({"--tiny-schemas", "3", "2000"}), limits);
  ASSERT_TRUE(StartAndWait(d));
  EXPECT_EQ(d.tools().size(), 0u);
  EXPECT_EQ(d.tools_dropped(), 3u);
  EXPECT_TRUE(Contains(d.last_protocol_problem(), "more than 1000 JSON values (max_tool_values)"))
      << d.last_protocol_problem();
  // Allowed: within the bound.
  Downstream small(*loop, Config({"--tiny-schemas", "3", "500"}), limits);
  ASSERT_TRUE(StartAndWait(small));
  EXPECT_EQ(small.tools().size(), 3u);

  // Two servers sharing one budget: the second keeps what the first left room for, and gets the
  // room back when the first is gone.
  auto shared = std::make_shared<SharedToolBudget>();
  shared->max_bytes = 30000;
  DownstreamLimits with_shared;
  with_shared.shared_tools = shared;
  DownstreamLimits first_limits = with_shared;
  first_limits.max_tools_total_bytes = 20000;  // about 9 KB a tool: two of its own
  auto first = std::make_unique<Downstream>(*loop, Config({"--tiny-schemas", "5", "3000"}), first_limits);
  ASSERT_TRUE(StartAndWait(*first));
  EXPECT_EQ(first->tools().size(), 2u);
  EXPECT_GT(shared->used_bytes, 18000u);
  Downstream second(*loop, Config({"--tiny-schemas", "5", "3000"}), with_shared);
  ASSERT_TRUE(StartAndWait(second));
  EXPECT_EQ(second.tools().size(), 1u);
  EXPECT_TRUE(Contains(second.last_protocol_problem(), "shared bound (30000 bytes)")) << second.last_protocol_problem();
  first.reset();
  EXPECT_LT(shared->used_bytes, 10000u) << "the first's share is given back";
  second.Stop();
  ASSERT_TRUE(StartAndWait(second));
  EXPECT_EQ(second.tools().size(), 3u);
}

// An answer of tiny values past max_message_values fails its call, naming the bound, without
// being parsed (a 15 MiB one peaked at 1.0 GB); the server stays usable.
TEST_F(DownstreamTest, AnAnswerOfTooManyValuesFailsItsCallUnparsed) {
  DownstreamLimits limits;
  limits.max_message_values = 10000;
  Downstream d(*loop, Config(), limits);
  ASSERT_TRUE(StartAndWait(d));
  auto over = CallAndWait(d, "tiny_answer", {{"values", 20000}});
  ASSERT_FALSE(over);
  EXPECT_EQ(over.error().code, ErrorCode::kIo);
  EXPECT_TRUE(Contains(over.error().message,
                       "MCP server fs answered tools/call tiny_answer with a message of more than 10000 JSON values "
                       "(max_message_values)"))
      << over.error().message;
  EXPECT_EQ(d.state(), Downstream::State::kReady);
  auto fits = CallAndWait(d, "tiny_answer", {{"values", 5000}});
  ASSERT_TRUE(fits) << fits.error().message;
  EXPECT_EQ((*fits)["content"].size(), 5000u);
  // The default is the worker protocol's: what could reach a script in one frame.
  EXPECT_EQ(DownstreamLimits{}.max_message_values, protocol::kMaxMessageValues);
  Downstream whole(*loop, Config());
  ASSERT_TRUE(StartAndWait(whole));
  const uint64_t before = ResidentBytes();
  auto big = CallAndWait(whole, "tiny_answer", {{"values", 5'000'000}});  // 15 MB of "{}"
  ASSERT_FALSE(big);
  EXPECT_TRUE(Contains(big.error().message, "max_message_values")) << big.error().message;
  if (kMemoryIsMeasurable) {
    EXPECT_LT(ResidentBytes() - std::min(ResidentBytes(), before), 100ull << 20);
  }
}

TEST_F(DownstreamTest, AnEndlessToolListStopsAtMaxListPages) {
  DownstreamLimits limits;
  limits.max_list_pages = 5;
  Downstream d(*loop, Config({"--endless-pages"}), limits);
  auto ready = StartAndWait(d);
  ASSERT_TRUE(ready) << ready.error().message;
  EXPECT_EQ(d.tools().size(), 5u);
  EXPECT_TRUE(d.tools_list_incomplete());
  EXPECT_TRUE(Contains(d.last_protocol_problem(), "max_list_pages")) << d.last_protocol_problem();
}

TEST_F(DownstreamTest, CallsPastMaxCallsInFlightFailNamingTheBound) {
  DownstreamLimits limits;
  limits.max_calls_in_flight = 2;
  Downstream d(*loop, Config(), limits);
  ASSERT_TRUE(StartAndWait(d));
  int hung_done = 0;
  d.Call("hang", Json::object(), [&](Result<Json>) { ++hung_done; });
  d.Call("hang", Json::object(), [&](Result<Json>) { ++hung_done; });
  auto r = CallAndWait(d, "echo");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  EXPECT_TRUE(Contains(r.error().message, "already has 2 calls in flight")) << r.error().message;
  EXPECT_TRUE(Contains(r.error().message, "max_calls_in_flight")) << r.error().message;
  EXPECT_EQ(hung_done, 0);
  d.Stop();
  EXPECT_EQ(hung_done, 2);
}

TEST_F(DownstreamTest, InputTheServerDoesNotReadIsBounded) {
  DownstreamLimits limits;
  limits.max_queued_input_bytes = 256 << 10;
  Downstream d(*loop, Config(), limits);
  ASSERT_TRUE(StartAndWait(d));
  ASSERT_TRUE(CallAndWait(d, "stop_reading"));
  const std::string text(100 << 10, 'a');
  std::optional<Error> refused;
  // The pipe takes what its buffer holds; then the queue fills to its bound.
  for (int i = 0; i < 64 && !refused; ++i) {
    std::optional<Result<Json>> out;
    d.Call("echo", {{"text", text}}, [&](Result<Json> r) { out.emplace(std::move(r)); });
    loop->RunOnce(0ms);
    loop->RunOnce(0ms);
    if (out && !*out) refused = out->error();
  }
  ASSERT_TRUE(refused) << "no call was refused";
  EXPECT_EQ(refused->code, ErrorCode::kUnavailable);
  EXPECT_TRUE(Contains(refused->message, "max_queued_input_bytes (262144)")) << refused->message;
}

TEST_F(DownstreamTest, TheServersPingIsAnsweredAndItsOtherRequestsRefused) {
  Downstream d(*loop, Config());
  ASSERT_TRUE(StartAndWait(d));
  auto r = CallAndWait(d, "ping_me");
  ASSERT_TRUE(r) << r.error().message;
  const Json& got = (*r)["structuredContent"];
  EXPECT_EQ(got["ping"], Json({{"jsonrpc", "2.0"}, {"id", "srv-1"}, {"result", Json::object()}}));
  EXPECT_EQ(got["sampling"]["id"], 77);
  EXPECT_EQ(got["sampling"]["error"]["code"], -32601);
  EXPECT_EQ(got["sampling"]["error"]["message"], "basal does not offer sampling/createMessage to downstream servers");
}

TEST_F(DownstreamTest, StopKillsTheServerAndWhatItStartedEvenIfTheyIgnoreSigterm) {
  DownstreamLimits limits;
  limits.stop_grace = 100ms;
  Downstream d(*loop, Config({"--ignore-term"}), limits);
  ASSERT_TRUE(StartAndWait(d));
  auto child = CallAndWait(d, "spawn_child", {{"ignore_term", true}});
  ASSERT_TRUE(child) << child.error().message;
  const pid_t grandchild = (*child)["structuredContent"]["pid"];
  const pid_t server = d.pid();
  ASSERT_FALSE(ProcessGone(grandchild));
  std::optional<Result<Json>> hung;
  d.Call("hang", Json::object(), [&](Result<Json> r) { hung.emplace(std::move(r)); });
  loop->RunOnce(0ms);
  d.Stop();
  ASSERT_TRUE(hung.has_value()) << "Stop fails calls in flight before it returns";
  ASSERT_FALSE(*hung);
  EXPECT_TRUE(Contains(hung->error().message, "MCP server fs was stopped by basal before it answered"))
      << hung->error().message;
  EXPECT_EQ(d.state(), Downstream::State::kStopped);
  d.Stop();  // twice: nothing more
  EXPECT_TRUE(RunUntil([&] { return ProcessGone(server) && ProcessGone(grandchild); }));
  auto after = CallAndWait(d, "echo");
  ASSERT_FALSE(after);
  EXPECT_TRUE(Contains(after.error().message, "was stopped")) << after.error().message;
}

TEST_F(DownstreamTest, WhenTheServerEndsWhatItStartedIsKilledWithoutWaitingForTheGrace) {
  DownstreamLimits limits;
  limits.stop_grace = std::chrono::hours(1);  // only the server's own exit can end the grandchild here
  Downstream d(*loop, Config(), limits);
  ASSERT_TRUE(StartAndWait(d));
  auto child = CallAndWait(d, "spawn_child", {{"ignore_term", true}});
  ASSERT_TRUE(child);
  const pid_t grandchild = (*child)["structuredContent"]["pid"];
  d.Stop();
  EXPECT_TRUE(RunUntil([&] { return ProcessGone(grandchild); }));
}

TEST_F(DownstreamTest, TheDestructorStopsTheServerWithoutCallingBack) {
  DownstreamLimits limits;
  limits.stop_grace = 100ms;
  pid_t server = 0, grandchild = 0;
  int done_calls = 0;
  {
    Downstream d(*loop, Config({"--ignore-term"}), limits);
    ASSERT_TRUE(StartAndWait(d));
    auto child = CallAndWait(d, "spawn_child", {{"ignore_term", true}});
    ASSERT_TRUE(child);
    grandchild = (*child)["structuredContent"]["pid"];
    server = d.pid();
    d.Call("hang", Json::object(), [&](Result<Json>) { ++done_calls; });
    loop->RunOnce(0ms);
  }
  EXPECT_EQ(done_calls, 0);
  EXPECT_TRUE(ProcessGone(server)) << "the destructor reaps the server before it returns";
  EXPECT_TRUE(RunUntil([&] { return ProcessGone(grandchild); }));
  for (int i = 0; i < 5; ++i) loop->RunOnce(10ms);  // nothing of the Downstream is left on the loop
  EXPECT_EQ(done_calls, 0);
}

TEST_F(DownstreamTest, ACallbackMayDestroyTheDownstream) {
  auto d = std::make_unique<Downstream>(*loop, Config());
  ASSERT_TRUE(StartAndWait(*d));
  int done_calls = 0;
  d->Call("hang", Json::object(), [&](Result<Json>) {
    ++done_calls;
    d.reset();
  });
  d->Call("hang", Json::object(), [&](Result<Json>) { ++done_calls; });
  loop->RunOnce(0ms);
  d->Stop();
  EXPECT_EQ(d, nullptr);
  EXPECT_EQ(done_calls, 1) << "once destroyed, it calls back no one";
}

TEST_F(DownstreamTest, TheServerGetsExactlyTheConfiguredEnvironment) {
  auto config = Config();
  config.env = {{"ALPHA", "1"}, {"BETA", "two words"}, {"EMPTY", ""}};
  ::setenv("BASAL_DOWNSTREAM_TEST_LEAK", "leaked", 1);
  Downstream d(*loop, config);
  ASSERT_TRUE(StartAndWait(d));
  auto r = CallAndWait(d, "env");
  ::unsetenv("BASAL_DOWNSTREAM_TEST_LEAK");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ((*r)["structuredContent"]["environ"], Json({"ALPHA=1", "BETA=two words", "EMPTY="}));
}

TEST_F(DownstreamTest, TheStderrTailIsBounded) {
  DownstreamLimits limits;
  limits.stderr_tail_bytes = 512;
  Downstream d(*loop, Config(), limits);
  ASSERT_TRUE(StartAndWait(d));
  ASSERT_TRUE(CallAndWait(d, "spam_stderr", {{"bytes", 1 << 20}}));
  ASSERT_TRUE(RunUntil([&] { return Contains(d.stderr_tail(), "END-OF-SPAM"); }));
  EXPECT_LE(d.stderr_tail().size(), 512u);
}

TEST_F(DownstreamTest, ServersThatCannotBeStartedFailClearly) {
  auto relative = Config();
  relative.command = "python3";
  Downstream a(*loop, relative);
  auto ra = StartAndWait(a);
  ASSERT_FALSE(ra);
  EXPECT_EQ(ra.error().code, ErrorCode::kInvalidArgument);
  EXPECT_TRUE(Contains(ra.error().message, "is not an absolute path")) << ra.error().message;

  auto missing = Config();
  missing.command = "/nonexistent/basal-fake-server";
  Downstream b(*loop, missing);
  auto rb = StartAndWait(b);
  ASSERT_FALSE(rb);
  EXPECT_EQ(rb.error().code, ErrorCode::kSpawn);
  EXPECT_TRUE(Contains(rb.error().message, "MCP server fs could not be started: execve /nonexistent/basal-fake-server: "
                                           "No such file or directory"))
      << rb.error().message;

  auto nowhere = Config();
  nowhere.cwd = "/nonexistent-dir";
  Downstream c(*loop, nowhere);
  auto rc = StartAndWait(c);
  ASSERT_FALSE(rc);
  EXPECT_TRUE(Contains(rc.error().message, "chdir /nonexistent-dir: No such file or directory")) << rc.error().message;

  auto bad_env = Config();
  bad_env.env = {{"A=B", "c"}};
  Downstream e(*loop, bad_env);
  auto re = StartAndWait(e);
  ASSERT_FALSE(re);
  EXPECT_EQ(re.error().code, ErrorCode::kInvalidArgument);
}

TEST_F(DownstreamTest, StartTwiceAndCallsBeforeStartAreRefused) {
  Downstream d(*loop, Config());
  auto before = CallAndWait(d, "echo");
  ASSERT_FALSE(before);
  EXPECT_TRUE(Contains(before.error().message, "is not started")) << before.error().message;
  ASSERT_TRUE(StartAndWait(d));
  auto twice = StartAndWait(d);
  ASSERT_FALSE(twice);
  EXPECT_EQ(twice.error().code, ErrorCode::kConflict);
  EXPECT_EQ(d.state(), Downstream::State::kReady);
  // Stopped, it can be started again.
  d.Stop();
  ASSERT_TRUE(StartAndWait(d));
  EXPECT_TRUE(CallAndWait(d, "echo"));
}

}  // namespace
}  // namespace basal::mcp
