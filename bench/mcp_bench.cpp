// The basal mcp figure (issue 15): run_script of a trivial script through a real `basal mcp` on its
// stdio transport, beside the same process's `ping` in the same run. Each run_script is a new
// codemode script: it is kept in the journal, gets a new worker (a worker is bound to one script for
// life), runs once, and its calls are read back for the answer; so its reference is ping + cold
// start + warm activation. An agent sends its next script after a model's turn (seconds), so the
// timed scripts come after a short untimed pause (kAgentTurn): a codemode spare started beside one
// script is ready for the next, as it is for an agent. The same scripts back to back are measured
// too: there the next spare's start competes with the script for the two CPUs.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "bench.h"

namespace basal::bench {
namespace {

[[noreturn]] void McpBenchFatal(const std::string& what) {
  std::fprintf(stderr, "basal-bench: mcp: %s\n", what.c_str());
  std::exit(1);
}

// One `basal mcp` with a pipe each way.
struct McpProcess {
  pid_t pid = -1;
  int to = -1, from = -1;
  std::string buffered;

  void Send(const std::string& line) {
    const std::string data = line + "\n";
    size_t off = 0;
    while (off < data.size()) {
      const ssize_t n = write(to, data.data() + off, data.size() - off);
      if (n <= 0) McpBenchFatal("writing to basal mcp failed");
      off += static_cast<size_t>(n);
    }
  }
  std::string ReadLine() {
    for (;;) {
      const size_t nl = buffered.find('\n');
      if (nl != std::string::npos) {
        std::string line = buffered.substr(0, nl);
        buffered.erase(0, nl + 1);
        return line;
      }
      char buf[65536];
      const ssize_t n = read(from, buf, sizeof buf);
      if (n <= 0) McpBenchFatal("basal mcp ended");
      buffered.append(buf, static_cast<size_t>(n));
    }
  }
  std::string Call(const std::string& line) {
    Send(line);
    return ReadLine();
  }
};

}  // namespace

McpSamples McpRoundTrip(const Options& o, const std::string& basal_path) {
  const std::string dir = o.work_dir + "/mcp";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string db = FigureStore(o, dir + "/journal.db");
  std::ofstream(dir + "/policy.json") << "{\"grants\": {}}\n";
  if (RunQuietly({basal_path, "policy", "approve", "bench", "--manifest", dir + "/policy.json", "--yes", "--db", db}) != 0)
    McpBenchFatal("basal policy approve failed");
  int in[2], out[2];
  if (pipe(in) != 0 || pipe(out) != 0) McpBenchFatal("pipe failed");
  McpProcess p;
  p.pid = fork();
  if (p.pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    close(in[1]);
    close(out[0]);
    execl(basal_path.c_str(), basal_path.c_str(), "mcp", "--policy", "bench", "--db", db.c_str(), "--worker",
          o.worker_path.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  p.to = in[1];
  p.from = out[0];
  p.Call(R"({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}})");
  p.Send(R"({"jsonrpc":"2.0","method":"notifications/initialized"})");
  McpSamples s;
  const int n = o.quick ? 50 : 500;
  for (int i = 0; i < n / 10; ++i) p.Call(R"({"jsonrpc":"2.0","id":1,"method":"ping"})");
  for (int i = 0; i < n; ++i) {
    const auto t = Clock::now();
    p.Call(R"({"jsonrpc":"2.0","id":1,"method":"ping"})");
    s.ping.Add(MicrosSince(t));
  }
  const std::string run =
      R"({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_script","arguments":{"code":"return input","input":7}}})";
  for (int i = 0; i < n / 10; ++i) p.Call(run);
  auto timed = [&](Samples& into) {
    const auto t = Clock::now();
    const std::string answer = p.Call(run);
    into.Add(MicrosSince(t));
    if (answer.find("\"status\":\"ok\"") == std::string::npos) McpBenchFatal("run_script did not answer ok: " + answer.substr(0, 300));
  };
  for (int i = 0; i < n; ++i) timed(s.back_to_back);
  for (int i = 0; i < n; ++i) {
    std::this_thread::sleep_for(kAgentTurn);
    timed(s.run_script);
  }
  close(p.to);  // the end of input: basal mcp exits 0
  int status = 0;
  waitpid(p.pid, &status, 0);
  close(p.from);
  std::filesystem::remove_all(dir);
  return s;
}

}  // namespace basal::bench
