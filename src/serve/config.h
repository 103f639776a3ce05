// The configuration file of `basal serve` (docs/serve-config.md): one JSON object naming the
// store, the listeners, the limits and the triggers (webhooks, schedules) of the one module the
// daemon hosts. Parsing is strict, as the manifest's is: an unknown key, a key given twice, a
// wrong type or a value out of its bounds is an error naming its path and saying what to write
// instead, so a typo never silently becomes a default.
//
//   Result<ServeConfig> config = LoadServeConfig("/etc/basal/serve.json");
//   if (!config) { std::cerr << config.error().message << "\n"; return 2; }
//   Result<std::string> socket = ResolveSocketPath(config->listen, SocketEnvFromProcess());
//
// What is checked here is the file alone. What needs the system is checked by the daemon at
// start: that the flows exist and are approved, that the secrets are stored, that the groups
// exist, that the cron expressions and time zones are valid (the cron module), that the socket
// and the address can be bound. The file holds no secret values, only their names.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "basal/result.h"
#include "serve/signature.h"

namespace basal::serve {

// "500ms", "30s", "5m", "1h", "2d", or units combined largest first with each at most once
// ("1h30m", "1d12h"). Zero ("0s") is a duration; negatives, fractions, spaces and units other
// than ms, s, m, h, d are not. At most 365d. The error says the accepted form.
Result<std::chrono::milliseconds> ParseDuration(std::string_view text);
// The shortest text ParseDuration reads back as `duration` ("90s" -> "1m30s", 0 -> "0s").
// `duration` must not be negative.
std::string FormatDuration(std::chrono::milliseconds duration);
inline constexpr std::chrono::milliseconds kMaxDuration = std::chrono::hours(24 * 365);

struct ListenConfig {
  // The Unix socket's absolute path. "" (the key omitted): the default ResolveSocketPath picks.
  std::string socket;
  // Group names whose members may connect to the socket, besides the daemon's own uid and root.
  std::vector<std::string> allowed_groups;
  // "" (none), or a literal address and port: "127.0.0.1:8470", "[::1]:8470". No host names.
  std::string tcp;
  // A non-loopback tcp address is refused unless this is true.
  bool allow_non_loopback = false;

  bool operator==(const ListenConfig&) const = default;
};

struct LimitsConfig {
  size_t max_workers = 8;
  uint32_t max_activations_per_worker = 256;
  size_t queue_max = 1000;                           // queued runs; past it: 429
  size_t max_body_bytes = 1 << 20;                   // API request bodies; past it: 413
  std::chrono::milliseconds wait_max{60'000};        // the cap of ?wait=
  std::chrono::milliseconds drain_timeout{30'000};   // at SIGTERM, running activations get this long
  size_t max_connections = 256;                      // HTTP connections at once, per listener
  std::chrono::milliseconds idempotency_ttl{86'400'000};  // how long an Idempotency-Key is remembered (24h)
  // A connection's request head must be in within header_timeout (of its start, or of its previous
  // answer), its body within body_timeout of its head; else the connection is closed.
  std::chrono::milliseconds header_timeout{10'000};
  std::chrono::milliseconds body_timeout{60'000};
  size_t max_connections_per_client = 32;            // TCP connections at once from one address
  size_t max_unsent_bytes = 64u << 20;               // answers not yet sent, all clients together; past it: 503
  size_t tail_subscribers = 32;                      // GET /v1/tail streams at once; past it: 503
  size_t tail_buffer_bytes = 1u << 20;               // what one tail stream may hold unread; past it: dropped
  // Durable runs that park (docs/durable.md): rows, not workers, bounded all the same.
  size_t max_parked_runs = 100'000;                  // parked runs in the store; past it a park fails (LimitError)
  size_t max_parked_runs_per_flow = 10'000;          // of one flow
  size_t max_event_bytes = 64u << 10;                // an event's payload; past it: 413
  size_t max_pending_events_per_run = 100;           // events a run has not waited for yet; past it: 429
  std::chrono::milliseconds event_retention{7LL * 24 * 3600 * 1000};  // an undelivered event is dropped after

  bool operator==(const LimitsConfig&) const = default;
};

struct WebhookTrigger {
  std::string name;    // the trigger's name: [a-z0-9_-]{1,64}, unique among triggers
  std::string flow;    // the flow each delivery runs
  std::string secret;  // the NAME of a secret in the secret store (`basal secret set NAME`), never a value
  // The replay window of the signature check: a delivery whose signed timestamp is further than
  // this from the daemon's clock, either way, is refused. Whole seconds (the check counts seconds).
  std::chrono::milliseconds window{std::chrono::minutes(5)};
  size_t max_body_bytes = 256 << 10;
  // kAck: answered once the run is queued. kWait: the answer waits for the run's result, up to `wait`.
  // kFlow: as kWait, and an ok run's result {status, headers, body} is the answer itself.
  enum class Respond { kAck, kWait, kFlow } respond = Respond::kAck;
  std::chrono::milliseconds wait{std::chrono::seconds(30)};
  // How deliveries are signed: basal's own, or the sender's (signature.h). `window` is the
  // tolerance of the schemes that sign a time (basal, stripe, slack); github signs none.
  WebhookScheme scheme = WebhookScheme::kBasal;
  // kWait and kFlow: the status of the answer when the run ended other than ok (a 5xx makes senders
  // retry; a delivery sent again after a failure starts a new run). 200 answers failures as any run.
  int failure_status = 500;
  // kFlow: a Set-Cookie header the flow returns is passed on only if this is true.
  bool allow_set_cookie = false;
  // "event": {"name", "key"}: a delivery starts no run; it is the event `name` for the flow's
  // durable run that waits for it with the key found in the payload at the JSON pointer `key`
  // (docs/durable.md#events), kept for the run that will wait for it when none does yet.
  std::string event_name;  // "": a delivery starts a run
  std::string event_key;   // a JSON pointer (RFC 6901) into the payload, e.g. "/data/order_id"

  bool operator==(const WebhookTrigger&) const = default;
};

struct ScheduleTrigger {
  std::string name;
  std::string flow;
  std::string cron;                // five fields; checked at start by the cron module
  std::string timezone = "UTC";    // an IANA name; checked at start by the cron module
  nlohmann::json input = nullptr;  // the input of every run it starts
  enum class Overlap { kSkip, kBufferOne } overlap = Overlap::kSkip;
  // After downtime, a fire missed by at most this much still runs (once); 0: missed fires are skipped.
  std::chrono::milliseconds catch_up{std::chrono::hours(1)};

  bool operator==(const ScheduleTrigger&) const = default;
};

// `basal mcp` over Streamable HTTP at /mcp (docs/serve.md): an AI agent's scripts run as codemode
// activations under one approved codemode policy. Whether the policy is approved is checked at
// start, and its downstream MCP servers are started then.
struct McpConfig {
  std::string policy;      // the codemode policy's name (`basal policy approve NAME`), required
  size_t max_scripts = 8;  // run_script activations at once; more are answered "busy"

  bool operator==(const McpConfig&) const = default;
};

// The web console (docs/console.md): pages over this API at /console/ on the TCP listener (the
// Unix socket has no browser), signed in with an API token. Its sessions' bounds (sessions.h).
struct ConsoleConfig {
  bool enabled = true;
  size_t max_sessions = 64;                                     // open at once; past it the least recently used ends
  std::chrono::milliseconds session_idle{std::chrono::hours(1)};  // a session unused this long ends
  std::chrono::milliseconds session_max_age{std::chrono::hours(12)};  // and every session ends this long after sign-in
  size_t max_streams_per_session = 4;                           // live updates (event streams) at once, per session
  // The cookie is marked Secure (sent only over HTTPS): for a TLS proxy in front of the listener.
  // Without it the cookie is Secure when the sign-in came through a proxy that says
  // X-Forwarded-Proto: https.
  bool secure_cookie = false;

  bool operator==(const ConsoleConfig&) const = default;
};

struct ServeConfig {
  std::string db;           // the store: a path or a postgresql:// locator; "" = the CLI's default
  std::string worker;       // the worker binary; "" = the CLI's default
  std::string secrets_dir;  // "" = secrets/ beside the db (PostgreSQL: the CLI's default state directory's)
  // Several hosts on one PostgreSQL (docs/postgres.md, "Several hosts"): this host's name in the
  // log, /v1/health and the metrics ("" = the machine's host name and a random suffix per start),
  // and how long a run's claim (its activation's lease) lasts without a heartbeat (every third).
  std::string host_id;
  std::chrono::milliseconds lease{15'000};
  // How often a host looks for queued runs it may take: those of a host that died, and those a
  // live host cannot start for want of a worker while this one has one free (the floor under
  // the other hosts' offers, which wake it at once).
  std::chrono::milliseconds queue_poll{1'000};
  ListenConfig listen;
  LimitsConfig limits;
  std::vector<WebhookTrigger> webhooks;    // in file order
  std::vector<ScheduleTrigger> schedules;  // in file order
  std::optional<McpConfig> mcp;            // none: /mcp is not served (404)
  ConsoleConfig console;

  bool operator==(const ServeConfig&) const = default;
};

// The largest configuration file LoadServeConfig reads.
inline constexpr size_t kMaxServeConfigBytes = 1 << 20;

// Parses a configuration file's text. Empty text (or only white space) and `{}` are valid: every
// default. Errors are kInvalidArgument, "ORIGIN: PATH: what is wrong; what to write", e.g.
// `serve.json: limits.drain_timeout: "30x" is not a duration: use a number and a unit, ...`.
// `origin` names the file in messages ("" for none).
Result<ServeConfig> ParseServeConfig(std::string_view json_text, std::string_view origin);
// Reads `path` (a regular file of at most kMaxServeConfigBytes) and parses it. kNotFound for a
// missing file, kIo for one that cannot be read, kInvalidArgument for a bad one.
Result<ServeConfig> LoadServeConfig(const std::string& path);

// The effective configuration as JSON, in the file's shape (ParseServeConfig reads it back as
// the same config), for the daemon to log at start. Empty strings (db, worker, secrets_dir,
// listen.socket, listen.tcp) are left out: resolve them before calling to log what is used.
// Secrets appear only as names, since a config holds nothing else.
nlohmann::json ToJson(const ServeConfig& config);

// What the default socket path depends on, taken from the process by SocketEnvFromProcess and
// written by hand in tests. An empty string is an unset variable.
struct SocketEnv {
  std::string runtime_directory;  // $RUNTIME_DIRECTORY: systemd's RuntimeDirectory= (paths joined by ':')
  std::string xdg_runtime_dir;    // $XDG_RUNTIME_DIR: the login session's runtime directory
  uid_t euid = 0;
};
SocketEnv SocketEnvFromProcess();

// The socket path to use: listen.socket if given; else "$RUNTIME_DIRECTORY/basal.sock" (the
// first directory, when systemd lists several); else "$XDG_RUNTIME_DIR/basal/basal.sock"; else,
// as root, "/run/basal/basal.sock"; else kInvalidArgument asking for listen.socket. A relative
// directory in a variable is ignored (both specifications require absolute paths), and a result
// too long for a Unix socket address is an error naming it.
Result<std::string> ResolveSocketPath(const ListenConfig& listen, const SocketEnv& env);

// A validated listen.tcp: the literal address (no brackets) and the port.
struct TcpListen {
  std::string address;  // "127.0.0.1", "::1"
  uint16_t port = 0;
  bool ipv6 = false;
};
// "127.0.0.1:8470" or "[::1]:8470": an IPv4 or bracketed IPv6 literal (inet_pton), a port from
// 1 to 65535. kInvalidArgument says which part is wrong and the accepted form.
Result<TcpListen> ParseTcpListen(std::string_view text);
// Whether listen.tcp binds only a loopback address (127.0.0.0/8, ::1, or ::ffff:127.0.0.0/104,
// which is the same IPv4 loopback). True when there is no tcp listener (nothing non-loopback is
// bound); false for an address that does not parse.
bool IsLoopbackListen(const ListenConfig& listen);

// A JSON pointer (RFC 6901) as its reference tokens, unescaped; nullopt if it is not one.
std::optional<std::vector<std::string>> ParseJsonPointer(std::string_view pointer);
// The value `tokens` point at in `document`, or null.
const nlohmann::json* FindByPointer(const nlohmann::json& document, const std::vector<std::string>& tokens);

}  // namespace basal::serve
