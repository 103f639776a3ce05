// Fuzz target: basal serve's HTTP request path, the daemon's rooms as rooms.cpp wires them on a
// real module and store (in a temporary directory): admission (auth: tokens and the console's
// session cookies), the route table and its handlers (api, the console's files and sign-in, the
// live tail), run requests into the run queue, webhook deliveries through their signature check
// (triggers); and, for raw bytes, libmicrohttpd's reading of them on both listeners
// (http_server). No run ever starts: the queue's max_workers is 0, so no worker is spawned and
// accepted runs stay queued (at most queue_max of them: the store does not grow past that).
//
// Input: a flag byte, then a request.
//   flag bit 0x01: raw. The rest is sent as bytes on a connection to the Unix socket (bit 0x02
//                  clear) or the TCP listener (set), then the client stops writing; the daemon's
//                  answers are read until it closes the connection.
//   otherwise:     the rest is a request as the listener hands it over: "METHOD TARGET" on the
//                  first line, "Name: value" header lines, an empty line, the body. TARGET's query
//                  is split at & and = as is. Bit 0x02: from TCP (else the Unix socket, as the
//                  daemon's own user); 0x04: with a valid bearer token of scope "all"; 0x08: signed
//                  as a webhook delivery with the trigger's secret and the current time.
//
//   \x0cPOST /hooks/push\nContent-Type: application/json\n\n{"ref": "main"}
//
// Invariants (besides no crash and no sanitizer report):
// - every request is answered exactly once, with a status from 100 to 599;
// - a JSON answer of the API is one JSON object; an error (400 and up) holds error.code and
//   error.message as strings (/mcp answers JSON-RPC instead);
// - a 405 names in Allow the methods the path takes, and not the request's;
// - 401 unauthorized only on TCP, and never for a request with the valid token (the console's
//   /console/session judges the token in a sign-in's body or the session's cookie instead: a
//   sign-in is never refused with the valid token); a delivery the harness signed is never
//   refused for its signature;
// - nothing runs: no activation is in flight, and the queue never holds more than queue_max;
// - a streamed answer (the tail) is forgotten once its client leaves: no subscriber is left;
// - raw: once the client has closed its connection, the listeners close theirs (at the latest
//   when its header or body timeout, 20 ms here, passes) and hold no pending request and no
//   unsent answer bytes.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "basal/module.h"
#include "fuzz/fuzz_check.h"
#include "parent/loop/event_loop.h"
#include "parent/module_host.h"
#include "parent/secrets/secret_store.h"
#include "parent/store/open.h"
#include "parent/store/store.h"
#include "serve/api.h"
#include "serve/auth.h"
#include "serve/daemon.h"
#include "serve/console.h"
#include "serve/http_server.h"
#include "serve/listeners.h"
#include "serve/mcp_endpoint.h"
#include "serve/metrics.h"
#include "serve/rooms.h"
#include "serve/run_queue.h"
#include "serve/signature.h"
#include "serve/tail.h"
#include "serve/triggers.h"

namespace basal::serve {
namespace {

using Json = nlohmann::json;

constexpr const char* kSecret = "s3cret-for-the-fuzzer";

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "http_request_fuzzer: %s\n", what.c_str());
  std::abort();
}

// The daemon's rooms on one module, wired by the daemon's own BuildRooms (rooms.h) (each room gets
// the parts of the module's host it uses); made once per process.
struct Harness {
  std::string dir;
  std::unique_ptr<Module> module;
  ServeConfig config;
  MetricsRegistry metrics;
  std::unique_ptr<McpEndpoint> mcp;  // before the rooms: the api keeps a reference to it
  Rooms rooms;
  std::shared_ptr<UnsentAnswers> unsent = std::make_shared<UnsentAnswers>(UnsentAnswers{4u << 20, 0});
  std::unique_ptr<HttpListener> unix_listener, tcp_listener;
  std::string socket_path;
  uint16_t tcp_port = 0;
  std::string token;

  Harness() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/basal-fuzz-serve-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) Die("mkdtemp failed");
    dir = pattern;
    auto secrets = SecretStore::Open(dir + "/secrets", /*create=*/true);
    if (!secrets || !secrets->Set("hook", kSecret)) Die("cannot store the webhook's secret");

    config.limits.max_workers = 0;  // nothing ever starts (the queue sets the module's cap to it)
    config.limits.queue_max = 8;
    config.limits.wait_max = std::chrono::milliseconds(0);  // no request waits
    config.limits.max_body_bytes = 64 << 10;
    config.limits.max_connections = 16;
    config.limits.max_connections_per_client = 8;
    // Short, so that a connection libmicrohttpd keeps (a head cut short by the client's close can
    // stay until a timeout) is closed within an input's run, by the listener's own sweep.
    config.limits.header_timeout = std::chrono::milliseconds(20);
    config.limits.body_timeout = std::chrono::milliseconds(20);
    WebhookTrigger hook;
    hook.name = "push";
    hook.flow = "echo";
    hook.secret = "hook";
    hook.respond = WebhookTrigger::Respond::kWait;
    config.webhooks = {hook};

    ModuleOptions mo;
    mo.journal_path = dir + "/journal.db";
    mo.worker_path = dir + "/no-worker";  // never started: the queue starts nothing
    mo.secrets_dir = dir + "/secrets";
    mo.require_approval = true;
    auto opened = Module::Open(std::move(mo));
    if (!opened) Die("cannot open a module: " + opened.error().message);
    module = std::move(*opened);

    // The operator's side, on a connection of its own as `basal approve` and `basal token add`:
    // the flow the webhook and the API run, and a token of scope "all".
    const std::string manifest = R"({"grants": {"log": {}}})";
    auto parsed = Manifest::Parse(manifest, module->registry());
    if (!parsed) Die("the flow's manifest: " + parsed.error().message);
    auto store = OpenStore({.locator = dir + "/journal.db"});
    if (!store) Die("cannot open the store: " + store.error().message);
    NewApproval a;
    a.name = "echo";
    a.source = "export default async (input) => input;";
    a.manifest_text = manifest;
    a.manifest_hash = parsed->hash();
    a.approver = {0, "fuzzer"};
    if (auto row = (*store)->catalog().Approve(a); !row) Die("cannot approve the flow: " + row.error().message);
    token = NewApiToken();
    if (auto t = (*store)->serve().AddToken("fuzz", ApiTokenHash(token), R"(["all"])", {0, "fuzzer"}, 1); !t)
      Die("cannot add the token: " + t.error().message);
    if (auto c = (*store)->Commit(); !c) Die("commit: " + c.error().message);
    store->reset();

    mcp = std::make_unique<McpEndpoint>(std::nullopt, [](const std::string&) {});
    // The daemon's own wiring (rooms.h), with the daemon's parts it does not have here: no gids
    // let in without a token, always ready.
    rooms = BuildRooms({
        .module = *module,
        .config = config,
        .metrics = metrics,
        .mcp = *mcp,
        .secrets_dir = dir + "/secrets",
        .now_us = SystemNowUs,
        .log = [](const std::string&) {},
        .ready = [](std::string*) { return true; },
        .started_us = SystemNowUs(),
    });
    if (auto c = rooms.triggers->Check(config); !c) Die("triggers: " + c.error().message);
    if (auto m = mcp->Start(*module, module->host().loop(), dir + "/secrets"); !m) Die("mcp: " + m.error().message);
    if (auto l = rooms.triggers->Load(config, /*at_start=*/true); !l) Die("triggers: " + l.error().message);

    socket_path = dir + "/basal.sock";
    unix_listener = Listen("unix", ListenUnix(socket_path, {}), true);
    // listen.tcp names a port; the fuzzer takes any free one.
    Result<int> tcp_fd = BindLoopbackAnyPort();
    sockaddr_in sa{};
    socklen_t len = sizeof sa;
    if (getsockname(*tcp_fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) Die("getsockname");
    tcp_port = ntohs(sa.sin_port);
    tcp_listener = Listen("tcp", tcp_fd, false);
  }

  static Result<int> BindLoopbackAnyPort() {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || listen(fd, 128) != 0)
      Die("cannot listen on 127.0.0.1");
    return fd;
  }

  std::unique_ptr<HttpListener> Listen(const std::string& name, Result<int> fd, bool unix_socket) {
    if (!fd) Die(name + ": " + fd.error().message);
    auto l = HttpListener::Start(module->host().loop(),
                                 ListenerOptionsFor(*rooms.api, config.limits, name, *fd, unix_socket, unsent));
    if (!l) Die(name + ": " + l.error().message);
    return std::move(*l);
  }

  void Pass() { module->RunFor(std::chrono::milliseconds(0)); }
};

Harness& TheHarness() {
  static Harness* harness = [] {
    auto* r = new Harness;
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(TheHarness().dir, ignored);
    });
    return r;
  }();
  return *harness;
}

// ---- a request as the listener hands it over

HttpRequest Structured(std::string_view text, uint8_t flags, const Harness& harness) {
  HttpRequest req;
  req.listener = (flags & 0x02) ? "tcp" : "unix";
  req.unix_socket = !(flags & 0x02);
  if (req.unix_socket) {
    req.remote = "unix";
    req.peer.known = true;
    req.peer.uid = geteuid();
    req.peer.gid = getegid();
  } else {
    req.remote = "127.0.0.1:40000";
  }
  const size_t blank = text.find("\n\n");
  std::string_view head = text.substr(0, blank);
  if (blank != std::string_view::npos) req.body = std::string(text.substr(blank + 2));
  const size_t eol = head.find('\n');
  std::string_view line = head.substr(0, eol);
  const size_t space = line.find(' ');
  req.method = std::string(line.substr(0, space));
  std::string_view target = space == std::string_view::npos ? std::string_view("/") : line.substr(space + 1);
  const size_t q = target.find('?');
  req.path = std::string(target.substr(0, q));
  if (q != std::string_view::npos) {
    std::string_view query = target.substr(q + 1);
    while (true) {
      const size_t amp = query.find('&');
      std::string_view pair = query.substr(0, amp);
      const size_t eq = pair.find('=');
      req.query.emplace_back(std::string(pair.substr(0, eq)), eq == std::string_view::npos ? "" : std::string(pair.substr(eq + 1)));
      if (amp == std::string_view::npos) break;
      query.remove_prefix(amp + 1);
    }
  }
  // The harness's own headers first: HttpRequest::Header takes the first of a name.
  if (flags & 0x04) req.headers.emplace_back("authorization", "Bearer " + harness.token);
  if (flags & 0x08) {
    const std::string ts = std::to_string(SystemNowUs() / 1'000'000);
    req.headers.emplace_back("x-basal-timestamp", ts);
    req.headers.emplace_back("x-basal-signature", "sha256=" + HmacSha256Hex(kSecret, ts + "." + req.body));
  }
  std::string_view rest = eol == std::string_view::npos ? std::string_view() : head.substr(eol + 1);
  while (!rest.empty()) {
    const size_t end = rest.find('\n');
    std::string_view h = rest.substr(0, end);
    const size_t colon = h.find(':');
    std::string name(h.substr(0, colon));
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string_view value = colon == std::string_view::npos ? std::string_view() : h.substr(colon + 1);
    while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    req.headers.emplace_back(std::move(name), std::string(value));
    if (end == std::string_view::npos) break;
    rest.remove_prefix(end + 1);
  }
  return req;
}

void CheckAnswer(const HttpRequest& req, const HttpResponse& r, uint8_t flags, const std::string& token) {
  const std::string shown = req.method + " " + req.path + " -> " + std::to_string(r.status) + " " + r.body.substr(0, 300);
  FUZZ_CHECK(r.status >= 100 && r.status <= 599, shown);
  const bool mcp = PathSegments(req.path) == std::vector<std::string_view>{"mcp"};
  if (r.content_type == "application/json" && !r.body.empty() && !mcp) {
    const Json j = Json::parse(r.body, nullptr, false);
    FUZZ_CHECK(j.is_object(), shown);
    if (r.status >= 400) {
      FUZZ_CHECK(j.contains("error") && j["error"].is_object(), shown);
      FUZZ_CHECK(j["error"].value("code", Json()).is_string() && j["error"].value("message", Json()).is_string(), shown);
    }
  }
  if (r.status == 405) {
    std::string allow;
    for (const auto& [k, v] : r.headers)
      if (k == "Allow") allow = v;
    FUZZ_CHECK(!allow.empty(), shown);
    bool named = false;
    for (std::string_view rest = allow; !rest.empty();) {
      const size_t comma = rest.find(", ");
      named = named || rest.substr(0, comma) == req.method;
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 2);
    }
    FUZZ_CHECK(!named, shown + " (Allow: " + allow + ")");
  }
  if (r.status == 401) {
    const Json j = Json::parse(r.body, nullptr, false);
    const std::string code = j.is_object() && j["error"].is_object() ? j["error"].value("code", "") : "";
    // A missing or refused token: only on TCP, and never with the valid one. The console's session
    // routes need no credential and judge another one: a sign-in the token in its body, the others
    // the session's cookie; so a 401 there says nothing of the bearer token, and a sign-in is
    // refused only when its body does not carry the valid token.
    if (code == "unauthorized") {
      FUZZ_CHECK(!req.unix_socket, shown);
      if (PathSegments(req.path) != std::vector<std::string_view>{"console", "session"}) {
        FUZZ_CHECK(!(flags & 0x04), shown);
      } else if (req.method == "POST") {
        const Json body = Json::parse(req.body, nullptr, false);
        FUZZ_CHECK(!(body.is_object() && body.value("token", Json()) == Json(token)), shown);
      }
    }
    // A delivery the harness signed passes the signature check.
    if (flags & 0x08) FUZZ_CHECK(code != "bad_signature" && code != "stale_timestamp", shown);
  }
}

void OneStructured(Harness& h, std::string_view text, uint8_t flags) {
  HttpRequest req = Structured(text, flags, h);
  size_t max_body = 0;
  std::optional<HttpResponse> answer;
  int answers = 0;
  if (auto refusal = h.rooms.api->Admit(req, &max_body)) {
    answer = std::move(*refusal);
    answers = 1;
  } else {
    if (req.body.size() > max_body) return;  // the listener answers 413 before handing it over
    h.rooms.api->Handle(req, [&](HttpResponse r) {
      ++answers;
      answer = std::move(r);
    }, [](std::function<void()>) {});
    for (int pass = 0; pass < 50 && answers == 0; ++pass) h.Pass();
  }
  FUZZ_CHECK(answers == 1, req.method + " " + req.path + ": answered " + std::to_string(answers) + " times");
  CheckAnswer(req, *answer, flags, h.token);
  // A streamed answer (GET /v1/tail): the client leaves, as the transport tells it; the stream's
  // subscriber is then forgotten, so streams do not pile up from input to input.
  if (answer->stream) answer->stream->Detach();
  h.Pass();
  FUZZ_CHECK(answers == 1, req.method + " " + req.path + ": answered again later");
  FUZZ_CHECK(h.rooms.tail->subscribers() == 0, req.method + " " + req.path + ": a tail subscriber outlived its stream");
  FUZZ_CHECK(h.rooms.queue->in_flight() == 0, "an activation started");
  FUZZ_CHECK(h.rooms.queue->queued() <= h.config.limits.queue_max, std::to_string(h.rooms.queue->queued()) + " queued");
}

// ---- raw bytes on a connection

void OneRaw(Harness& h, std::string_view bytes, uint8_t flags) {
  const bool tcp = flags & 0x02;
  const int fd = socket(tcp ? AF_INET : AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) Die("socket");
  int rc;
  if (tcp) {
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(h.tcp_port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    rc = connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  } else {
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::snprintf(sa.sun_path, sizeof sa.sun_path, "%s", h.socket_path.c_str());
    rc = connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  }
  if (rc != 0 && errno != EINPROGRESS) Die(std::string("connect: ") + std::strerror(errno));
  size_t sent = 0;
  bool closed = false;
  for (int pass = 0; pass < 400 && !closed; ++pass) {
    h.Pass();
    if (sent < bytes.size()) {
      const ssize_t n = send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n > 0) sent += static_cast<size_t>(n);
      if (n < 0 && errno != EAGAIN && errno != EINPROGRESS && errno != ENOTCONN) sent = bytes.size();
      if (sent == bytes.size()) shutdown(fd, SHUT_WR);
    }
    char buf[65536];
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n == 0 || (n < 0 && errno != EAGAIN)) closed = true;
  }
  close(fd);
  // Closed at once, or at the latest by the header or body timeout (20 ms here).
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while ((h.unix_listener->connections() + h.tcp_listener->connections()) > 0 &&
         std::chrono::steady_clock::now() < give_up)
    h.module->RunFor(std::chrono::milliseconds(1));
  const size_t open = h.unix_listener->connections() + h.tcp_listener->connections();
  FUZZ_CHECK(open == 0, std::to_string(open) + " connections left open after the client closed");
  FUZZ_CHECK(h.unix_listener->pending() + h.tcp_listener->pending() == 0, "a request left pending");
  FUZZ_CHECK(h.unsent->bytes == 0, std::to_string(h.unsent->bytes) + " unsent bytes left counted");
  FUZZ_CHECK(h.rooms.queue->in_flight() == 0, "an activation started");
}

}  // namespace
}  // namespace basal::serve

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > 16384) return 0;
  basal::serve::Harness& h = basal::serve::TheHarness();
  const uint8_t flags = data[0];
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (flags & 0x01) {
    basal::serve::OneRaw(h, rest, flags);
  } else {
    basal::serve::OneStructured(h, rest, flags);
  }
  return 0;
}
