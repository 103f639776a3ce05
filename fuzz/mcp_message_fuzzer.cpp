// Fuzz target: McpServer::OnMessage (src/mcp/server.h), the protocol core of `basal mcp`: every
// line an agent's MCP client writes to its stdin reaches it, and the agent is untrusted.
//
// Input: lines (split on '\n'), read in order, so that sequences are reached (initialize then
// calls, a cancel of a call in flight, an id used again while its call runs). A line is one
// message for the server, except a line starting with '#', which drives the stand-in tool host
// between messages:
//   #a<n>  answer the n-th call the host kept (n modulo their count; a call answered again, or one
//          cancelled, must go unanswered)
//   #d<n>  forget the n-th kept call: the host drops it and never answers
//   #x     CancelAll (the client went away)
//   #s     AssumeSession (the Streamable HTTP transport's session opened earlier)
// At the end the server is destroyed and every call the host still holds is answered: a late
// answer must go nowhere.
// The host's tools, by name: "echo" answers at once, "twice" answers at once twice, "fail" answers
// at once with isError, "slow" keeps the call, "stubborn" keeps it and answers inside Cancel,
// "throw" keeps it and then throws (a bug in a host); any other name is no tool.
//
// Invariants:
// - every message the server sends is one line of JSON: an object with "jsonrpc": "2.0", an "id",
//   and exactly one of result and error (an error with an integer code and a message);
// - a message that is not JSON, not an object or not JSON-RPC 2.0 gets exactly one error with id
//   null; a notification and a client's response get nothing;
// - a request gets at most one answer, with its own id: at once, or (a call the host kept) later,
//   once, when the host answers; never after the client cancelled it, never after CancelAll, never
//   after the server is gone; tools/call with an id that is still in flight is refused without
//   reaching the host;
// - a cancel reaches the host for exactly the call it names, while that call runs;
// - the host sees each call key once, arguments that are an object, and no call before a session
//   (initialize, AssumeSession or a stateless request) or with a revision the server does not speak
//   (-32022 with {requested, supported}); tools/list answers the host's list;
// - in_flight() and initialized() agree with a model of the session after every line.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fuzz/fuzz_check.h"
#include "mcp/server.h"
#include "protocol/messages.h"

namespace basal::mcp {
namespace {

std::string Dump(const Json& value) { return value.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string Head(std::string_view text) { return std::string(text.substr(0, 300)); }

Json TextResult(const std::string& text, bool is_error = false) {
  Json result = {{"content", Json::array({Json{{"type", "text"}, {"text", text}}})}};
  if (is_error) result["isError"] = true;
  return result;
}

// The stand-in tool host: what it was asked, and the calls it keeps to answer later.
class Host : public ToolHost {
 public:
  struct Kept {
    uint64_t key;
    bool stubborn;
    std::function<void(Json)> done;
  };

  Json ListTools() override {
    return Json::array({Json{{"name", "echo"}, {"description", "Echoes."}, {"inputSchema", {{"type", "object"}}}},
                        Json{{"name", "slow"},
                             {"description", "Answers later."},
                             {"inputSchema", {{"type", "object"}, {"properties", {{"ms", {{"type", "integer"}}}}}}}}});
  }

  bool CallTool(uint64_t call_key, const std::string& name, const Json& arguments,
                std::function<void(Json result)> done) override {
    FUZZ_CHECK(arguments.is_object(), "the host got arguments that are not an object: " + Head(Dump(arguments)));
    FUZZ_CHECK(keys_seen.insert(call_key).second, "call key " + std::to_string(call_key) + " reached the host twice");
    ++calls;
    last_key = call_key;
    if (name == "echo") {
      done(Json{{"content", Json::array({Json{{"type", "text"}, {"text", "echo"}}})}, {"structuredContent", arguments}});
      answered_at_once = true;
      return true;
    }
    if (name == "twice") {
      done(TextResult("first"));
      done(TextResult("second"));
      answered_at_once = true;
      return true;
    }
    if (name == "fail") {
      done(TextResult("the tool failed", true));
      answered_at_once = true;
      return true;
    }
    if (name == "slow" || name == "stubborn" || name == "throw") {
      kept.push_back({call_key, name == "stubborn", std::move(done)});
      if (name == "throw") {
        threw = true;
        throw std::runtime_error("the stand-in host failed");
      }
      kept_one = true;
      return true;
    }
    unknown = true;
    return false;
  }

  void Cancel(uint64_t call_key) override {
    cancels.push_back(call_key);
    for (Kept& k : kept) {
      if (k.key == call_key && k.stubborn) k.done(TextResult("cancelled"));
    }
  }

  // What happened during one step.
  void Reset() {
    calls = 0;
    answered_at_once = kept_one = threw = unknown = false;
    cancels.clear();
  }

  std::set<uint64_t> keys_seen;
  std::vector<Kept> kept;
  int calls = 0;
  uint64_t last_key = 0;
  bool answered_at_once = false, kept_one = false, threw = false, unknown = false;
  std::vector<uint64_t> cancels;
};

// A message the server sent, checked for its shape.
Json CheckShape(const std::string& text) {
  FUZZ_CHECK(text.find('\n') == std::string::npos && text.find('\r') == std::string::npos,
             "a message holds a line break, which ends it on stdio: " + Head(text));
  Json message = Json::parse(text, nullptr, false);
  FUZZ_CHECK(!message.is_discarded() && message.is_object(), "a message that is not a JSON object: " + Head(text));
  FUZZ_CHECK(message.value("jsonrpc", Json()) == "2.0", "a message without \"jsonrpc\": \"2.0\": " + Head(text));
  FUZZ_CHECK(message.contains("id"), "an answer without an id: " + Head(text));
  const Json& id = message["id"];
  FUZZ_CHECK(id.is_null() || id.is_string() || id.is_number(), "an answer's id is " + Head(Dump(id)));
  FUZZ_CHECK(message.contains("result") != message.contains("error"), "not exactly one of result and error: " + Head(text));
  if (message.contains("error")) {
    const Json& error = message["error"];
    FUZZ_CHECK(error.is_object() && error.value("code", Json()).is_number_integer(), "an error without a code: " + Head(text));
    const Json message_text = error.value("message", Json());
    FUZZ_CHECK(message_text.is_string() && !message_text.get_ref<const std::string&>().empty(),
               "an error without a message: " + Head(text));
  }
  return message;
}

bool IsError(const Json& message, int code) {
  return message.contains("error") && message["error"]["code"] == code;
}

bool SpeaksRevision(const Json& asked, bool session) {
  if (asked == kStatelessRevision) return true;
  if (!session || !asked.is_string()) return false;
  for (const char* v : {"2025-11-25", "2025-06-18", "2025-03-26"}) {
    if (asked == v) return true;
  }
  return false;
}

class Harness {
 public:
  Harness()
      : server_(std::make_unique<McpServer>(host_, ServerInfo{"basal", "0.1.0", "Use run_script."},
                                            [this](std::string message) { sent_.push_back(CheckShape(message)); })) {}

  void Line(std::string_view line) {
    sent_.clear();
    host_.Reset();
    if (!line.empty() && line[0] == '#') {
      Control(line);
    } else {
      Message(line);
    }
    FUZZ_CHECK(server_->in_flight() == open_.size(), "in_flight() is " + std::to_string(server_->in_flight()) +
                                                         ", the model has " + std::to_string(open_.size()) +
                                                         " calls awaiting an answer");
    FUZZ_CHECK(server_->initialized() == initialized_, "initialized() disagrees with the model after: " + Head(line));
  }

  // The server goes; the host answers whatever it still holds. Nothing may be sent.
  void End() {
    sent_.clear();
    server_.reset();
    for (Host::Kept& k : host_.kept) k.done(TextResult("too late"));
    FUZZ_CHECK(sent_.empty(), "an answer was sent after the server was destroyed");
  }

 private:
  struct Open {
    Json id;
    uint64_t key;
  };

  static size_t Number(std::string_view digits) {
    size_t n = 0;
    for (size_t i = 0; i < digits.size() && i < 9 && digits[i] >= '0' && digits[i] <= '9'; ++i) n = n * 10 + (digits[i] - '0');
    return n;
  }

  void Control(std::string_view line) {
    const char op = line.size() > 1 ? line[1] : '\0';
    if (op == 'x') {
      std::multiset<uint64_t> expected;
      for (const auto& [text, call] : open_) expected.insert(call.key);
      server_->CancelAll();
      open_.clear();
      FUZZ_CHECK(std::multiset<uint64_t>(host_.cancels.begin(), host_.cancels.end()) == expected,
                 "CancelAll did not cancel exactly the calls in flight (" + std::to_string(host_.cancels.size()) +
                     " cancels, " + std::to_string(expected.size()) + " in flight)");
      FUZZ_CHECK(sent_.empty(), "CancelAll sent an answer");
      return;
    }
    if (op == 's') {
      server_->AssumeSession(std::string(line.substr(2)));
      initialized_ = true;
      FUZZ_CHECK(sent_.empty(), "AssumeSession sent a message");
      return;
    }
    if ((op != 'a' && op != 'd') || host_.kept.empty()) return;
    const size_t index = Number(line.substr(2)) % host_.kept.size();
    if (op == 'd') {
      host_.kept.erase(host_.kept.begin() + static_cast<std::ptrdiff_t>(index));
      return;
    }
    const uint64_t key = host_.kept[index].key;
    host_.kept[index].done(TextResult("later"));
    auto open = std::find_if(open_.begin(), open_.end(), [&](const auto& entry) { return entry.second.key == key; });
    if (open == open_.end()) {
      FUZZ_CHECK(sent_.empty(), "call key " + std::to_string(key) +
                                    " was answered after it was cancelled or answered: " + Head(sent_.empty() ? "" : Dump(sent_[0])));
      return;
    }
    FUZZ_CHECK(sent_.size() == 1, "a late answer sent " + std::to_string(sent_.size()) + " messages");
    FUZZ_CHECK(sent_[0].contains("result") && Dump(sent_[0]["id"]) == open->first,
               "a late answer to id " + open->first + " is " + Head(Dump(sent_[0])));
    open_.erase(open);
  }

  void Message(std::string_view text) {
    const size_t kept_before = host_.kept.size();
    server_->OnMessage(text);

    // The model reads the message as the server must.
    Json message;
    std::string why;
    const bool parsed = protocol::ParseJsonValue(text, message, why);
    if (!parsed || !message.is_object() || message.value("jsonrpc", Json()) != "2.0") {
      FUZZ_CHECK(sent_.size() == 1 && sent_[0]["id"].is_null() &&
                     IsError(sent_[0], parsed ? kInvalidRequest : kParseError),
                 "not a JSON-RPC 2.0 object, and not one error with id null: " + Head(text));
      FUZZ_CHECK(host_.calls == 0 && host_.cancels.empty(), "a malformed message reached the host");
      return;
    }
    auto method = message.find("method");
    auto id = message.find("id");
    if (method == message.end()) {
      FUZZ_CHECK(sent_.empty(), "a client's response was answered: " + Head(text));
      return;
    }
    if (!method->is_string()) {
      FUZZ_CHECK(sent_.size() == 1 && IsError(sent_[0], kInvalidRequest), "a non-string method was not one -32600");
      return;
    }
    Json params = message.contains("params") && message["params"].is_object() ? message["params"] : Json::object();
    if (id == message.end()) return Notification(method->get<std::string>(), params);

    FUZZ_CHECK(host_.cancels.empty(), "a request cancelled a call");
    if (!id->is_string() && !id->is_number_integer()) {
      FUZZ_CHECK(sent_.size() == 1 && sent_[0]["id"].is_null() && IsError(sent_[0], kInvalidRequest),
                 "a request with id " + Head(Dump(*id)) + " was not one -32600 with id null");
      return;
    }
    const std::string id_text = Dump(*id);
    const std::string& name = method->get_ref<const std::string&>();
    const bool was_open = open_.count(id_text) != 0;
    FUZZ_CHECK(sent_.size() <= 1, "request " + id_text + " got " + std::to_string(sent_.size()) + " answers at once");
    FUZZ_CHECK(host_.calls <= 1, "one request made " + std::to_string(host_.calls) + " calls");
    if (sent_.empty()) {
      // Only a call the host kept goes unanswered for now.
      FUZZ_CHECK(name == "tools/call" && host_.kept_one && host_.kept.size() == kept_before + 1,
                 "request " + id_text + " (" + Head(name) + ") got no answer: " + Head(text));
      FUZZ_CHECK(!was_open, "tools/call with id " + id_text + " reached the host while a call with that id runs");
      open_[id_text] = Open{*id, host_.last_key};
      return;
    }
    const Json& answer = sent_[0];
    FUZZ_CHECK(Dump(answer["id"]) == id_text, "request " + id_text + " was answered with id " + Head(Dump(answer["id"])));

    if (name == "initialize") {
      FUZZ_CHECK(answer.contains("result"), "initialize was refused: " + Head(Dump(answer)));
      initialized_ = true;
      return;
    }
    const Json meta = params.contains("_meta") ? params["_meta"] : Json::object();
    const bool stateless = meta.is_object() && meta.contains(kVersionMetaKey);
    if (stateless && !SpeaksRevision(meta[kVersionMetaKey], initialized_)) {
      FUZZ_CHECK(IsError(answer, kUnsupportedVersion), "revision " + Head(Dump(meta[kVersionMetaKey])) +
                                                           " was not refused with -32022: " + Head(Dump(answer)));
      const Json& data = answer["error"].value("data", Json());
      FUZZ_CHECK(data.is_object() && data.value("requested", Json()) == meta[kVersionMetaKey] &&
                     data.value("supported", Json()).is_array(),
                 "-32022 without {requested, supported}: " + Head(Dump(answer)));
      FUZZ_CHECK(host_.calls == 0, "a request in a revision basal does not speak reached the host");
      return;
    }
    if (answer.contains("result") && stateless) {
      FUZZ_CHECK(!answer["result"].is_object() || answer["result"].value("resultType", Json()) == "complete",
                 "a stateless result without resultType complete: " + Head(Dump(answer)));
    }
    if ((name == "tools/list" || name == "tools/call") && !stateless && !initialized_) {
      FUZZ_CHECK(IsError(answer, kInvalidRequest), name + " before a session was not -32600: " + Head(Dump(answer)));
      FUZZ_CHECK(host_.calls == 0, "a call reached the host before a session");
      return;
    }
    if (name == "tools/list" && answer.contains("result")) {
      FUZZ_CHECK(answer["result"].value("tools", Json()) == host_.ListTools(), "tools/list is not the host's list");
    }
    if (name != "tools/call") {
      FUZZ_CHECK(host_.calls == 0, Head(name) + " reached the host's CallTool");
      return;
    }
    if (was_open) {
      // Refused as a duplicate (-32600), or first for its params (-32602): never forwarded.
      FUZZ_CHECK(answer.contains("error") && host_.calls == 0,
                 "tools/call with id " + id_text + ", still in flight, was not refused before the host: " + Head(Dump(answer)));
      return;
    }
    if (host_.threw) {
      FUZZ_CHECK(IsError(answer, kInternalError), "a host that threw was not -32603: " + Head(Dump(answer)));
    } else if (host_.unknown) {
      FUZZ_CHECK(IsError(answer, kInvalidParams), "an unknown tool was not -32602: " + Head(Dump(answer)));
    } else if (host_.answered_at_once) {
      FUZZ_CHECK(answer.contains("result"), "a call the host answered at once got " + Head(Dump(answer)));
    } else {
      FUZZ_CHECK(host_.calls == 0 && IsError(answer, kInvalidParams),
                 "tools/call refused without reaching the host, but not with -32602: " + Head(Dump(answer)));
    }
  }

  void Notification(const std::string& method, const Json& params) {
    FUZZ_CHECK(sent_.empty(), "notification " + Head(method) + " was answered: " + Head(Dump(sent_[0])));
    FUZZ_CHECK(host_.calls == 0, "a notification made a call");
    auto request = params.find("requestId");
    auto open = method == "notifications/cancelled" && request != params.end() ? open_.find(Dump(*request)) : open_.end();
    if (open == open_.end()) {
      FUZZ_CHECK(host_.cancels.empty(), "a cancel reached the host for no call in flight");
      return;
    }
    FUZZ_CHECK(host_.cancels.size() == 1 && host_.cancels[0] == open->second.key,
               "the cancel of " + open->first + " did not reach the host for its call");
    open_.erase(open);
  }

  Host host_;
  std::vector<Json> sent_;
  std::unique_ptr<McpServer> server_;
  // The calls the server must still answer, by their id's JSON text.
  std::map<std::string, Open> open_;
  bool initialized_ = false;
};

}  // namespace
}  // namespace basal::mcp

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  basal::mcp::Harness harness;
  size_t at = 0;
  while (at <= input.size()) {
    size_t end = input.find('\n', at);
    if (end == std::string_view::npos) end = input.size();
    if (end > at) harness.Line(input.substr(at, end - at));
    at = end + 1;
  }
  harness.End();
  return 0;
}
