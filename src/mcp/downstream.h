// A downstream MCP server: one stdio server an operator listed in a codemode policy, started,
// spoken to and supervised by the parent. `basal mcp` lists its tools for the agent and forwards
// each granted `mcp.<server>.<tool>` host call to it as a tools/call.
//
//   Downstream fs(loop, {.name = "fs", .command = "/usr/bin/node", .args = {"/opt/fs/index.js", "/srv"}});
//   fs.Start([&](const Result<void>& ready) { if (!ready) Log(ready.error().message); });
//   ... run the loop; once ready, fs.tools() lists what the server offers ...
//   uint64_t token = fs.Call("read_text_file", {{"path", "/srv/a.txt"}}, [](Result<Json> r) { ... });
//   fs.Cancel(token, "the activation ended");
//
// The server is operator-trusted, but it is other people's software: everything it writes is
// parsed defensively and every resource it can make us spend is bounded (DownstreamLimits). A
// server that dies, hangs or talks nonsense fails its own calls with errors that name it, what
// went wrong and the tail of its stderr; it never hurts the parent.
//
// The process: forked and exec'd with exactly the configured environment, in its own session (so
// its process group holds the grandchildren that `npx` and the like start, and the whole group is
// signalled), with the death signal SIGKILL (it dies with the thread that started it: the loop's;
// its grandchildren are killed by Stop, by its death, or by the destructor, not by basal's death),
// every descriptor but its three pipes closed. Its exit is watched through a pidfd, never
// waitpid(-1), which would steal the workers' statuses. Writes never raise SIGPIPE, whatever the
// process's disposition (the `basal` command ignores SIGPIPE, and so does Module::Create; a test or
// an embedder may not).
//
// Threads: loop thread only. Callbacks (`ready`, `done`) run on the loop thread, never inside
// Start or Call (a failure known at once is delivered on the next loop pass, so a caller can file
// the token Call returns before its `done` runs); Cancel and Stop call the affected callbacks
// before they return. A callback may call anything here, including destroy the Downstream: the
// destructor calls back into no one, so calls still in flight then never get their `done`.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "basal/host_call.h"
#include "basal/result.h"
#include "parent/loop/event_loop.h"
#include "protocol/messages.h"

namespace basal::mcp {

// What the tool lists of several servers keep together (the servers of one basal mcp share one):
// each Downstream charges the bytes its list keeps, and gives them back when the list is replaced
// or the Downstream is destroyed. Loop thread only, like the Downstreams.
struct SharedToolBudget {
  size_t max_bytes = 64u << 20;
  size_t used_bytes = 0;
};

struct DownstreamConfig {
  std::string name;     // the server's name in the policy ("fs"): used in every error message
  std::string command;  // absolute path of the executable
  std::vector<std::string> args;
  std::vector<std::pair<std::string, std::string>> env;  // the WHOLE environment the server gets
  std::string cwd;                                       // empty: "/"
  std::string client_version;  // basal's version, sent as clientInfo.version (the caller knows it)
  std::chrono::milliseconds start_timeout{30'000};  // spawn -> initialize answered -> tools listed
  std::chrono::milliseconds call_timeout{60'000};   // one tools/call
};

// Every bound on what a server can make the parent spend. Past a bound the server's own calls
// fail (or, for its output, the server is killed), with a message naming the bound.
struct DownstreamLimits {
  // One JSON-RPC line from the server. 16 MiB is the worker protocol's frame limit: an answer
  // larger than that could not reach the script anyway. A longer line kills the server (its
  // framing can no longer be trusted) and fails its calls.
  size_t max_message_bytes = 16u << 20;
  // JSON values in one line (objects, arrays, strings, numbers, literals), counted in its text
  // before anything is parsed: a tree of tiny values costs up to about 80 bytes a value beside the
  // text (a 15 MiB answer of them once peaked at 1.0 GB). The worker protocol's bound
  // (protocol::kMaxMessageValues): an answer with more could not reach the script in one frame.
  // An answer past it fails its call, naming the bound; another message past it is dropped.
  size_t max_message_values = protocol::kMaxMessageValues;
  // Nesting of [ and { in one message. nlohmann's parser is iterative, but dumping, destroying and
  // every consumer downstream of us recurse; 256 levels is far beyond any real schema or result.
  size_t max_json_depth = 256;
  // Tools kept from tools/list. A real server offers tens; 1000 keeps a runaway list from filling
  // the agent's context and our memory. Past it the rest are dropped and counted (tools_dropped()).
  size_t max_tools = 1000;
  // One tool's definition (its JSON as listed). Real ones are a few KiB; 1 MiB admits a generous
  // schema. Larger ones are dropped and counted.
  size_t max_tool_bytes = 1u << 20;
  // One tool's definition in JSON values. Schemas are kept as text and parsed for each use (a
  // call's arguments checked, a declaration written), one tool at a time: this bounds that tree
  // (about 5 MiB). Real schemas have tens to hundreds. More: dropped and counted.
  size_t max_tool_values = 64u << 10;
  // All kept tool definitions together: 32 MiB of text, so max_tools * max_tool_bytes cannot be
  // reached.
  size_t max_tools_total_bytes = 32u << 20;
  // Shared with other servers (null: this server's own bounds only): their lists together keep at
  // most its max_bytes. A tool past it is dropped and counted, as past max_tools_total_bytes.
  std::shared_ptr<SharedToolBudget> shared_tools;
  // tools/list pages followed. A server whose cursor never ends (a bug) stops here; the tools
  // listed so far are kept and tools_list_incomplete() says so.
  size_t max_list_pages = 100;
  // Calls started and not yet done (queued for a restart or sent). The lead's activations are
  // bounded by their own budgets; 256 keeps one agent's Promise.all from queueing without end.
  // More: the call fails at once, naming the bound.
  size_t max_calls_in_flight = 256;
  // Bytes queued for the server's stdin that it has not read. 64 MiB holds four maximal requests;
  // a server that stops reading gets its further calls failed, naming the bound.
  size_t max_queued_input_bytes = 64u << 20;
  // The end of the server's stderr kept for error messages; the rest is read and dropped, so a
  // chatty server never blocks on a full pipe and never fills our memory.
  size_t stderr_tail_bytes = 4096;
  // A server that died is restarted by the next call, but not more often than this: a server that
  // dies at once would otherwise be respawned by every call of a busy script.
  std::chrono::milliseconds restart_backoff{1000};
  // Stop: SIGTERM to the process group, then SIGKILL after this if the server is still alive.
  std::chrono::milliseconds stop_grace{2000};
};

// A schema kept as compact JSON text, shared by the tool and whoever lists it (no copy per list).
using SchemaText = std::shared_ptr<const std::string>;

struct DownstreamTool {
  std::string name, title, description;
  // As compact JSON text: a server's schemas parsed into trees could cost twenty times their text
  // for the life of basal mcp. ParseSchema gives the tree for one use.
  SchemaText input_schema;   // the tool's inputSchema ({"type":"object"} when absent)
  SchemaText output_schema;  // null when absent
  SchemaText annotations;    // null when absent
};

// The tree of a kept schema (null for a null pointer). Kept texts were parsed once and written by
// basal within the bounds above, so this never fails.
Json ParseSchema(const SchemaText& text);

// Error codes of Start's and Call's errors:
//   kUnavailable     the server is not running (never started, stopped, died, restart backoff),
//                    died during the call, the call was cancelled, or a bound on calls in flight
//                    or queued input was hit: the server, not the arguments, is the problem
//   kIo              the server misbehaved: no answer within call_timeout or start_timeout, an
//                    answer of the wrong shape, an unsupported protocol version
//   kInvalidArgument the server answered JSON-RPC error -32602 (invalid params), or `arguments`
//                    is not an object
//   kNotFound        the server answered JSON-RPC error -32601 (no such method)
//   kRefused         the server answered any other JSON-RPC error
//   kSpawn           the server could not be started (fork, exec, chdir, pipes)
class Downstream {
 public:
  enum class State { kStopped, kStarting, kReady, kFailed };

  Downstream(EventLoop& loop, DownstreamConfig config, DownstreamLimits limits = {});
  // Stops the server (see Stop) without calling back into anyone, and waits for it: up to
  // stop_grace for SIGTERM to end it, then SIGKILL to the group and the reap.
  ~Downstream();
  Downstream(const Downstream&) = delete;
  Downstream& operator=(const Downstream&) = delete;

  // Spawns the server, sends initialize (protocolVersion "2025-11-25", clientInfo {name "basal",
  // version}), accepts an answer with a protocolVersion among 2025-11-25, 2025-06-18, 2025-03-26,
  // 2024-11-05 (anything else: failed, naming it), sends notifications/initialized, then tools/list
  // (following nextCursor). `ready` is called exactly once on the loop thread: Ok, or an error
  // naming the server, what went wrong and the tail of its stderr. Allowed when stopped or failed
  // (a new start forgets the tools listed before); while starting or ready, `ready` gets kConflict.
  void Start(std::function<void(const Result<void>&)> ready);

  State state() const { return state_; }
  const std::string& name() const { return config_.name; }
  // The tools listed by the last successful Start. A restart after a death re-initializes the
  // server but keeps these (pointers from FindTool stay valid until the next Start).
  const std::vector<DownstreamTool>& tools() const { return tools_; }
  const DownstreamTool* FindTool(std::string_view name) const;
  // Tools the server listed that were not kept: invalid or duplicate names, invalid schemas, past
  // max_tools or the byte bounds.
  size_t tools_dropped() const { return tools_dropped_; }
  bool tools_list_incomplete() const { return tools_list_incomplete_; }
  const std::string& protocol_version() const { return protocol_version_; }
  const Json& server_info() const { return server_info_; }  // initialize's serverInfo (null if none)
  const std::string& instructions() const { return instructions_; }  // cut at 64 KiB
  pid_t pid() const;  // the running server's process id; 0 when none

  // tools/call {name, arguments}. `done` is called exactly once on the loop thread with the
  // server's CallToolResult object as sent ({content, structuredContent?, isError?}: an isError
  // result is a result, not an error) or an error (see the codes above). A server that died is
  // restarted by the next Call (not more often than restart_backoff; within the backoff the call
  // fails saying when it may retry). Calls made while the server starts wait for it. Returns a
  // token for Cancel (never 0).
  uint64_t Call(const std::string& tool, const Json& arguments, std::function<void(Result<Json>)> done);
  // The call's `done` gets an error ("cancelled: <reason>") now; the server is sent
  // notifications/cancelled {requestId, reason}; a late answer is dropped. Unknown token, or a
  // call whose failure is already on its way: nothing.
  void Cancel(uint64_t token, std::string_view reason);
  // Closes its stdin, SIGTERM to its process group, SIGKILL after stop_grace if still alive; calls
  // in flight fail ("server stopped") and a pending Start's `ready` gets an error, before Stop
  // returns. Safe to call twice.
  void Stop();

  // The end of the server's stderr (at most stderr_tail_bytes), as valid UTF-8.
  std::string stderr_tail() const;
  // The last thing the server sent that we dropped (a line that is not JSON, an answer to an id we
  // never sent, ...), in a few words; empty if none.
  const std::string& last_protocol_problem() const { return last_protocol_problem_; }
  uint64_t protocol_problems() const { return protocol_problems_; }
  uint64_t notifications_received() const { return notifications_received_; }

 private:
  struct Process;
  struct PendingCall {
    std::string tool;
    Json arguments;
    std::function<void(Result<Json>)> done;
    int64_t request_id = 0;  // 0: not sent yet (the server is starting)
    EventLoop::TimerId timer;
  };
  enum class RequestKind { kInitialize, kToolsList, kToolsCall };
  struct Request {
    RequestKind kind;
    uint64_t token = 0;  // kToolsCall
  };
  // A reason to give the server up, found where giving it up at once would pull state from under
  // the caller (inside the line loop, inside Send): acted on by Settle at the end of the entry point.
  struct Failure {
    ErrorCode code;
    std::string what;
    bool graceful;  // SIGTERM first (a stop), or SIGKILL at once (it broke the protocol)
  };
  enum class ReadStatus { kMore, kClosed, kTooLong };

  // Entry points: each ends with Settle() and Deliver() (or DeliverLater() for Start and Call).
  void OnStdout();
  void OnStderr();
  void OnStdin();
  void OnLeaderExit();
  void OnStartTimeout();
  void OnCallTimeout(uint64_t token);
  void OnRetiredExit(pid_t pid);

  void Launch(bool list_tools);  // a Start (lists tools) or a restart (keeps them)
  Result<std::unique_ptr<Process>> Spawn();
  ReadStatus ReadStdout(size_t max_bytes);
  void DrainStderr(size_t max_bytes);
  void HandleLine(std::string_view line);
  // A line of more than max_message_values values: not parsed; the call it answers (found by a
  // scan that builds nothing) fails, naming the bound.
  void HandleTooManyValues(std::string_view line);
  void HandleResponse(Json& message);
  void HandleServerRequest(const Json& message);
  void OnInitializeAnswer(const Json& result);
  void OnToolsListAnswer(const Json& result);
  void AddListedTool(const Json& tool);
  void OnCallAnswer(uint64_t token, Result<Json> answer);
  // Gives back what the tool list being listed, or the kept one, charged to shared_tools.
  void ReleaseListing();
  void ReleaseTools();
  void StartFinished(Result<void> outcome);
  void SendToolsList(const std::string& cursor);
  void SendCall(uint64_t token);
  void SendCancelled(int64_t request_id, const std::string& reason);
  Result<void> Send(const Json& message);  // queued and written as the pipe takes it; error: bound hit or gone
  void FlushStdin();
  void ArmClosedGrace(const std::string& what);
  void Settle();
  // The server is given up: its process retired, a pending start and every call failed.
  void ServerGone(ErrorCode code, const std::string& what, bool graceful, bool with_context);
  void Retire(std::unique_ptr<Process> process, bool graceful);
  void FailCall(uint64_t token, Error error);
  void FailAllCalls(const Error& error);
  void Abandon(int64_t request_id);
  void ProtocolProblem(std::string what);
  std::string Context() const;  // "; its stderr ends: ...; last protocol problem: ..."
  Error MakeServerError(ErrorCode code, const std::string& what, bool with_context) const;
  std::string StripServerName(const std::string& message) const;
  void DeliverLater();
  void Deliver();

  EventLoop& loop_;
  const DownstreamConfig config_;
  const DownstreamLimits limits_;
  State state_ = State::kStopped;
  bool ever_ready_ = false;
  bool stopped_by_caller_ = false;
  std::string last_failure_;  // why the server last stopped working (for calls that find it dead)
  EventLoop::Clock::time_point last_launch_{};
  std::optional<Failure> fail_server_;

  std::unique_ptr<Process> process_;
  std::map<pid_t, std::unique_ptr<Process>> retired_;  // signalled, waiting to be reaped
  std::function<void(const Result<void>&)> ready_;     // a pending Start's
  bool listing_tools_ = false;                         // this launch lists tools (Start, not a restart)
  std::optional<EventLoop::TimerId> start_timer_;
  bool initialize_answered_ = false;
  size_t list_pages_ = 0;
  std::vector<DownstreamTool> listing_;  // tools of the pages so far
  std::set<std::string> listing_names_;
  size_t listing_dropped_ = 0;
  size_t listing_bytes_ = 0;
  bool listing_incomplete_ = false;

  std::vector<DownstreamTool> tools_;
  size_t tools_bytes_ = 0;  // what tools_ keeps (charged to shared_tools)
  size_t tools_dropped_ = 0;
  bool tools_list_incomplete_ = false;
  std::string protocol_version_;
  Json server_info_;
  std::string instructions_;

  uint64_t next_token_ = 1;
  int64_t next_request_id_ = 1;  // never reused, so an old process's answer never matches a new request
  std::map<uint64_t, PendingCall> calls_;  // by token
  std::unordered_map<int64_t, Request> requests_;
  std::set<int64_t> abandoned_;  // cancelled or timed-out requests whose late answer is dropped quietly
  std::deque<int64_t> abandoned_order_;

  std::string stderr_tail_;
  std::string last_protocol_problem_;
  uint64_t protocol_problems_ = 0;
  uint64_t notifications_received_ = 0;

  std::vector<std::function<void()>> outbox_;  // callbacks to run once our state is consistent
  bool delivery_posted_ = false;
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);  // expires with this object
};

}  // namespace basal::mcp
