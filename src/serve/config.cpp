// The configuration file of `basal serve`: see config.h and docs/serve-config.md. Every rule the
// docs state for a key is checked in that key's function below, and every message names the key's
// path, the value as written, and what to write instead.
#include "serve/config.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <set>
#include <system_error>
#include <utility>

#include "parent/secrets/secret_store.h"
#include "parent/store/locator.h"
#include "text/strict_json.h"

namespace basal::serve {
namespace {

using Json = nlohmann::json;
using std::chrono::milliseconds;

constexpr size_t kShownValueBytes = 60;
constexpr size_t kMaxDepth = 64;
constexpr size_t kMaxTriggerNameBytes = 64;
constexpr size_t kMaxFlowNameBytes = 128;
constexpr size_t kMaxGroupNameBytes = 256;
constexpr size_t kMaxTimezoneBytes = 128;
constexpr size_t kMaxCronBytes = 256;
constexpr size_t kMaxPathBytes = 4095;  // PATH_MAX less its NUL
// sun_path holds the path and its NUL.
constexpr size_t kMaxSocketPathBytes = sizeof(sockaddr_un{}.sun_path) - 1;

constexpr const char* kDurationForm = "use a number and a unit, e.g. \"30s\", \"500ms\", \"5m\", \"1h\"";

// A value as the operator wrote it, for messages: JSON text (so control characters and quotes
// come out escaped, never raw on a terminal), cut at a UTF-8 boundary when long.
std::string Shown(const Json& value) {
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > kShownValueBytes) {
    size_t cut = kShownValueBytes;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
    text = text.substr(0, cut) + "...";
  }
  return text;
}
std::string Shown(std::string_view text) { return Shown(Json(std::string(text))); }
std::string Shown(const std::string& text) { return Shown(Json(text)); }

Error Invalid(std::string message) { return MakeError(ErrorCode::kInvalidArgument, std::move(message)); }

// The path of `key` below `parent` ("" is the top level): plain keys as is (limits.max_workers),
// any other quoted so the path stays unambiguous (limits["max workers"]).
std::string ChildPath(const std::string& parent, const std::string& key) {
  bool plain = !key.empty();
  for (char c : key) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
      plain = false;
  }
  if (plain) return parent.empty() ? key : parent + "." + key;
  return parent + "[" + Shown(key) + "]";
}

bool HasControlByte(std::string_view text) {
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) return true;
  }
  return false;
}

// The path of the value `where` leads to ("the configuration" for none).
std::string PathOf(const std::vector<StrictJsonWatch::Step>& where) {
  std::string path;
  for (const StrictJsonWatch::Step& step : where)
    path = step.is_array ? path + "[" + std::to_string(step.index) + "]" : ChildPath(path, step.key);
  return path.empty() ? "the configuration" : path;
}

// What nlohmann lets through (src/text/strict_json.h): a key given twice (it keeps the last, so a
// second "limits" would silently replace the first) and nesting past kMaxDepth (printing a value
// recurses; a configuration is a few levels deep, a schedule's input a few more).
std::optional<std::string> StrictJsonProblem(const StrictJsonWatch& watch) {
  switch (watch.problem()) {
    case StrictJsonWatch::Problem::kNone:
      return std::nullopt;
    case StrictJsonWatch::Problem::kTooDeep:
      return PathOf(watch.where()) + ": nested deeper than " + std::to_string(watch.max_depth()) + " levels";
    case StrictJsonWatch::Problem::kDuplicateKey:
      return PathOf(watch.where()) + ": duplicate key; each key may appear once";
  }
  return std::nullopt;
}

// nlohmann's message without its "[json.exception.parse_error.101] " prefix.
std::string SyntaxMessage(const std::exception& e) {
  std::string what = e.what();
  if (auto close = what.find("] "); what.rfind("[json.exception.", 0) == 0 && close != std::string::npos) {
    what = what.substr(close + 2);
  }
  return what;
}

struct NumberRule {
  uint64_t min, max;
  const char* bounds;  // how the message states them
};
constexpr NumberRule kMaxWorkers{1, 1024, "from 1 to 1024"};
constexpr NumberRule kMaxActivationsPerWorker{1, 1'000'000, "from 1 to 1000000"};
constexpr NumberRule kQueueMax{1, 1'000'000, "from 1 to 1000000"};
constexpr NumberRule kBodyBytes{1 << 10, 64 << 20, "from 1024 (1 KiB) to 67108864 (64 MiB)"};
constexpr NumberRule kMaxConnections{1, 65536, "from 1 to 65536"};
constexpr NumberRule kMaxConnectionsPerClient{1, 65536, "from 1 to 65536"};
constexpr NumberRule kUnsentBytes{4u << 20, 4ull << 30, "from 4194304 (4 MiB) to 4294967296 (4 GiB)"};
constexpr NumberRule kTailSubscribers{1, 1024, "from 1 to 1024"};
constexpr NumberRule kTailBufferBytes{64u << 10, 64u << 20, "from 65536 (64 KiB) to 67108864 (64 MiB)"};
constexpr NumberRule kMaxScripts{1, 256, "from 1 to 256"};
constexpr NumberRule kMaxSessions{1, 4096, "from 1 to 4096"};
constexpr NumberRule kMaxStreamsPerSession{1, 64, "from 1 to 64"};
constexpr NumberRule kMaxParkedRuns{1, 100'000'000, "from 1 to 100000000"};
constexpr NumberRule kEventBytes{1, 16u << 20, "from 1 to 16777216 (16 MiB)"};
constexpr NumberRule kPendingEvents{1, 100'000, "from 1 to 100000"};

struct DurationRule {
  milliseconds min, max;
  const char* bounds;
};
constexpr DurationRule kWaitMax{milliseconds(0), std::chrono::hours(1), "from 0s to 1h"};
constexpr DurationRule kLease{milliseconds(300), std::chrono::minutes(10), "from 300ms to 10m"};
constexpr DurationRule kQueuePoll{milliseconds(100), std::chrono::minutes(1), "from 100ms to 1m"};
constexpr DurationRule kDrainTimeout{milliseconds(0), std::chrono::hours(1), "from 0s to 1h"};
constexpr DurationRule kHeaderTimeout{std::chrono::seconds(1), std::chrono::minutes(10), "from 1s to 10m"};
constexpr DurationRule kBodyTimeout{std::chrono::seconds(1), std::chrono::hours(1), "from 1s to 1h"};
constexpr DurationRule kIdempotencyTtl{std::chrono::seconds(1), std::chrono::hours(24 * 30), "from 1s to 30d"};
constexpr DurationRule kWindow{std::chrono::seconds(1), std::chrono::hours(24), "from 1s to 24h"};
constexpr DurationRule kWebhookWait{milliseconds(1), std::chrono::minutes(10), "from 1ms to 10m"};
constexpr NumberRule kFailureStatus{200, 599, "from 200 to 599 (500 to 599 makes senders retry; 200 does not)"};
constexpr DurationRule kCatchUp{milliseconds(0), std::chrono::hours(24 * 7), "from 0s to 7d"};
constexpr DurationRule kSessionIdle{std::chrono::minutes(1), std::chrono::hours(24), "from 1m to 24h"};
constexpr DurationRule kSessionMaxAge{std::chrono::minutes(1), std::chrono::hours(24 * 30), "from 1m to 30d"};
constexpr DurationRule kEventRetention{std::chrono::seconds(1), std::chrono::hours(24 * 366), "from 1s to 366d"};

// One parse: knows the origin for messages; each method checks one kind of value at `path`.
class Parser {
 public:
  explicit Parser(std::string_view origin) : prefix_(origin.empty() ? "" : std::string(origin) + ": ") {}

  Error Fail(const std::string& path, const std::string& what) const { return Invalid(prefix_ + path + ": " + what); }

  // Ok when every key of `object` is one of `known`; else the first unknown one, with the list.
  Result<void> KnownKeys(const Json& object, const std::string& path, std::initializer_list<const char*> known) const {
    for (const auto& [key, value] : object.items()) {
      bool found = false;
      for (const char* k : known) found = found || key == k;
      if (found) continue;
      std::string list;
      for (const char* k : known) list += (list.empty() ? "" : ", ") + std::string(k);
      return Fail(ChildPath(path, key), "unknown key; known keys: " + list);
    }
    return Ok();
  }

  Result<void> Object(const Json& value, const std::string& path, const char* example) const {
    if (value.is_object()) return Ok();
    return Fail(path, Shown(value) + " is not an object: write " + example);
  }

  Result<std::string> String(const Json& value, const std::string& path, const char* example) const {
    if (!value.is_string()) return Fail(path, Shown(value) + " is not a string: write " + example);
    return value.get<std::string>();
  }

  Result<bool> Bool(const Json& value, const std::string& path) const {
    if (!value.is_boolean()) return Fail(path, Shown(value) + " is not a boolean: write true or false");
    return value.get<bool>();
  }

  Result<uint64_t> Number(const Json& value, const std::string& path, const NumberRule& rule) const {
    if (!value.is_number_integer()) {
      return Fail(path, Shown(value) + " is not an integer: use an integer " + std::string(rule.bounds));
    }
    if (value.is_number_unsigned()) {
      const uint64_t v = value.get<uint64_t>();
      if (v >= rule.min && v <= rule.max) return v;
    }
    return Fail(path, Shown(value) + " is out of range: use an integer " + std::string(rule.bounds));
  }

  Result<milliseconds> Duration(const Json& value, const std::string& path, const DurationRule& rule) const {
    if (!value.is_string()) {
      return Fail(path, Shown(value) + " is not a duration: write a string with a unit, e.g. \"30s\", \"500ms\", "
                                       "\"5m\", \"1h\"");
    }
    auto d = ParseDuration(value.get<std::string>());
    if (!d) return Fail(path, d.error().message);
    if (*d < rule.min || *d > rule.max) {
      return Fail(path, Shown(value) + " is out of range: use a duration " + std::string(rule.bounds));
    }
    return *d;
  }

  // An absolute path: the daemon's working directory is nobody's choice (systemd starts it in /).
  Result<std::string> Path(const Json& value, const std::string& path, const char* example,
                           size_t max_bytes = kMaxPathBytes) const {
    auto text = String(value, path, example);
    if (!text) return text;
    if (text->empty()) return Fail(path, "empty: leave the key out for the default, or write " + std::string(example));
    if (HasControlByte(*text)) return Fail(path, Shown(*text) + " has a control character: write " + example);
    if ((*text)[0] != '/') {
      return Fail(path, Shown(*text) + " is not an absolute path: a daemon's working directory is not yours; "
                                       "write the full path, e.g. " + example);
    }
    if (text->size() > max_bytes) {
      return Fail(path, Shown(*text) + " is " + std::to_string(text->size()) + " bytes; the limit is " +
                            std::to_string(max_bytes) + " bytes");
    }
    return text;
  }

  // The store: an absolute path (SQLite), or a postgresql:// locator, which is never shown with its
  // password.
  Result<std::string> Db(const Json& value, const std::string& path) const {
    constexpr const char* kFile = "\"/var/lib/basal/journal.db\"";
    auto text = String(value, path, "\"/var/lib/basal/journal.db\" or \"postgresql://basal@db.internal/basal\"");
    if (!text) return text;
    auto locator = ParseLocator(*text);
    if (text->empty() || (locator && locator->kind == StoreKind::kSqlite)) return Path(value, path, kFile);
    if (!locator) return Fail(path, locator.error().message);
    if (HasControlByte(*text)) return Fail(path, Shown(RedactLocator(*text)) + " has a control character");
    if (text->size() > kMaxPathBytes) {
      return Fail(path, Shown(RedactLocator(*text)) + " is " + std::to_string(text->size()) + " bytes; the limit is " +
                            std::to_string(kMaxPathBytes) + " bytes");
    }
    return text;
  }

  Result<std::string> FlowName(const Json& value, const std::string& path) const {
    auto text = String(value, path, "the flow's name, e.g. \"on_push\"");
    if (!text) return text;
    if (text->empty()) return Fail(path, "empty: name the flow to run, e.g. \"on_push\"");
    if (text->size() > kMaxFlowNameBytes) {
      return Fail(path, Shown(*text) + " is " + std::to_string(text->size()) + " bytes; a flow's name is at most " +
                            std::to_string(kMaxFlowNameBytes));
    }
    if (HasControlByte(*text)) return Fail(path, Shown(*text) + " has a control character; a flow's name has none");
    return text;
  }

  Result<ServeConfig> Parse(const Json& root) const;

 private:
  Result<void> ParseConsole(const Json& value, ConsoleConfig& out) const;
  Result<McpConfig> ParseMcp(const Json& value) const;
  Result<void> ParseListen(const Json& value, ListenConfig& out) const;
  Result<void> ParseLimits(const Json& value, LimitsConfig& out) const;
  // Appends the trigger to out.webhooks or out.schedules and returns its name.
  Result<std::string> ParseTrigger(const Json& value, const std::string& path, ServeConfig& out) const;
  Result<WebhookTrigger> ParseWebhook(const Json& value, const std::string& path) const;
  Result<void> ParseWebhookEvent(const Json& value, const std::string& path, WebhookTrigger& out) const;
  Result<ScheduleTrigger> ParseSchedule(const Json& value, const std::string& path) const;

  std::string prefix_;
};


// Assigns `out` from `r`, or hands r's error on (keeps the key loops one statement a key).
template <typename T, typename U>
Result<void> Assign(Result<U> r, T& out) {
  if (!r) return r.error();
  out = static_cast<T>(std::move(*r));
  return Ok();
}

// [a-z0-9_-]{1,64}: a trigger's name goes into URLs (/hooks/NAME), metrics labels and log lines
// as is, so it has no character that needs escaping anywhere.
bool IsTriggerName(std::string_view name) {
  if (name.empty() || name.size() > kMaxTriggerNameBytes) return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) return false;
  }
  return true;
}

// A group name as getgrnam takes it: the shape only (the daemon looks it up at start). Lenient
// enough for directory-service groups ("ops@corp.example"); refuses what cannot be a group name in
// /etc/group (':' and ',' separate its fields and members, '/' none) and an all-digit name (a gid,
// which this key does not take: the name keeps working when ids are renumbered).
std::optional<std::string> GroupNameProblem(std::string_view name) {
  if (name.empty()) return "is empty";
  if (name.size() > kMaxGroupNameBytes) return "is longer than " + std::to_string(kMaxGroupNameBytes) + " bytes";
  if (HasControlByte(name)) return "has a control character";
  if (name.find_first_of(":,/") != std::string_view::npos) return "has ':', ',' or '/', which no group name has";
  if (name[0] == '-' || name[0] == ' ') return "starts with '-' or a space";
  if (name.find_first_not_of("0123456789") == std::string_view::npos) return "is a number; write the group's name";
  return std::nullopt;
}

// The shape of an IANA name ("UTC", "Europe/Berlin", "Etc/GMT+5"): the cron module checks that
// it exists. No '.', no leading '/' and no empty part, so a name can never walk out of the zone
// directory it is looked up in.
bool IsTimezoneName(std::string_view name) {
  if (name.empty() || name.size() > kMaxTimezoneBytes) return false;
  if (name.front() == '/' || name.back() == '/' || name.find("//") != std::string_view::npos) return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '/' || c == '_' ||
          c == '-' || c == '+'))
      return false;
  }
  return true;
}

Result<ServeConfig> Parser::Parse(const Json& root) const {
  ServeConfig config;
  if (auto ok = Object(root, "the configuration", "an object, e.g. {\"listen\": {\"tcp\": \"127.0.0.1:8470\"}}"); !ok)
    return ok.error();
  if (auto ok = KnownKeys(root, "", {"db", "worker", "secrets_dir", "host_id", "lease", "queue_poll", "listen", "limits",
                                     "triggers", "mcp", "console"});
      !ok)
    return ok.error();
  for (const auto& [key, value] : root.items()) {
    Result<void> ok;
    if (key == "db") {
      ok = Assign(Db(value, key), config.db);
    } else if (key == "worker") {
      ok = Assign(Path(value, key, "\"/usr/libexec/basal/ck-basal-worker\""), config.worker);
    } else if (key == "secrets_dir") {
      ok = Assign(Path(value, key, "\"/var/lib/basal/secrets\""), config.secrets_dir);
    } else if (key == "host_id") {
      auto id = String(value, key, "\"web-1\"");
      if (id && (id->empty() || id->size() > 128 ||
                 id->find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
                     std::string::npos))
        return Fail(key, Shown(value) + " is not a host id: use 1 to 128 letters, digits, '.', '_' or '-', e.g. \"web-1\"");
      ok = Assign(std::move(id), config.host_id);
    } else if (key == "lease") {
      ok = Assign(Duration(value, key, kLease), config.lease);
    } else if (key == "queue_poll") {
      ok = Assign(Duration(value, key, kQueuePoll), config.queue_poll);
    } else if (key == "listen") {
      ok = ParseListen(value, config.listen);
    } else if (key == "limits") {
      ok = ParseLimits(value, config.limits);
    } else if (key == "console") {
      ok = ParseConsole(value, config.console);
    } else if (key == "mcp") {
      auto mcp = ParseMcp(value);
      if (!mcp) return mcp.error();
      config.mcp = std::move(*mcp);
    } else if (key == "triggers") {
      if (!value.is_array()) {
        return Fail(key, Shown(value) + " is not an array: write a list of triggers, e.g. "
                                        "[{\"name\": \"nightly\", \"schedule\": {...}}]");
      }
      std::set<std::string> names;
      for (size_t i = 0; i < value.size(); ++i) {
        const std::string path = "triggers[" + std::to_string(i) + "]";
        auto name = ParseTrigger(value[i], path, config);
        if (!name) return name.error();
        if (!names.insert(*name).second) {
          return Fail(path + ".name", Shown(*name) + " names an earlier trigger too; each trigger's name is unique");
        }
      }
    }
    if (!ok) return ok.error();
  }
  return config;
}

Result<void> Parser::ParseListen(const Json& value, ListenConfig& out) const {
  if (auto ok = Object(value, "listen", "{\"socket\": \"/run/basal/basal.sock\", \"tcp\": \"127.0.0.1:8470\"}"); !ok)
    return ok;
  if (auto ok = KnownKeys(value, "listen", {"socket", "allowed_groups", "tcp", "allow_non_loopback"}); !ok) return ok;
  for (const auto& [key, item] : value.items()) {
    const std::string path = "listen." + key;
    Result<void> ok;
    if (key == "socket") {
      ok = Assign(Path(item, path, "\"/run/basal/basal.sock\""), out.socket);
      if (ok && out.socket.size() > kMaxSocketPathBytes) {
        return Fail(path, Shown(out.socket) + " is " + std::to_string(out.socket.size()) +
                              " bytes; a Unix socket's path is at most " + std::to_string(kMaxSocketPathBytes) +
                              ": choose a shorter one");
      }
      if (ok && out.socket.back() == '/') {
        return Fail(path, Shown(out.socket) + " names a directory: write the socket's own path, e.g. "
                                              "\"/run/basal/basal.sock\"");
      }
    } else if (key == "allowed_groups") {
      if (!item.is_array()) {
        return Fail(path, Shown(item) + " is not an array: write a list of group names, e.g. [\"basal-ops\"]");
      }
      std::set<std::string> seen;
      for (size_t i = 0; i < item.size(); ++i) {
        const std::string at = path + "[" + std::to_string(i) + "]";
        auto name = String(item[i], at, "a group's name, e.g. \"basal-ops\"");
        if (!name) return name.error();
        if (auto problem = GroupNameProblem(*name)) {
          return Fail(at, Shown(*name) + " is not a group name: it " + *problem);
        }
        if (!seen.insert(*name).second) return Fail(at, Shown(*name) + " is listed twice; list each group once");
        out.allowed_groups.push_back(std::move(*name));
      }
    } else if (key == "tcp") {
      auto text = String(item, path, "an address and port, e.g. \"127.0.0.1:8470\" or \"[::1]:8470\"");
      if (!text) return text.error();
      if (auto tcp = ParseTcpListen(*text); !tcp) return Fail(path, tcp.error().message);
      out.tcp = std::move(*text);
    } else if (key == "allow_non_loopback") {
      ok = Assign(Bool(item, path), out.allow_non_loopback);
    }
    if (!ok) return ok;
  }
  if (!out.allow_non_loopback && !IsLoopbackListen(out)) {
    return Fail("listen.tcp", Shown(out.tcp) + " is not a loopback address: other machines could reach the API; "
                                               "bind 127.0.0.1 or [::1], or set listen.allow_non_loopback to true if "
                                               "that is what you want");
  }
  return Ok();
}

Result<void> Parser::ParseLimits(const Json& value, LimitsConfig& out) const {
  if (auto ok = Object(value, "limits", "{\"max_workers\": 8, \"drain_timeout\": \"30s\"}"); !ok) return ok;
  if (auto ok = KnownKeys(value, "limits",
                          {"max_workers", "max_activations_per_worker", "queue_max", "max_body_bytes", "wait_max",
                           "drain_timeout", "max_connections", "idempotency_ttl", "header_timeout", "body_timeout",
                           "max_connections_per_client", "max_unsent_bytes", "tail_subscribers", "tail_buffer_bytes",
                           "max_parked_runs", "max_parked_runs_per_flow", "max_event_bytes", "max_pending_events_per_run",
                           "event_retention"});
      !ok)
    return ok;
  for (const auto& [key, item] : value.items()) {
    const std::string path = "limits." + key;
    Result<void> ok;
    if (key == "max_workers") {
      ok = Assign(Number(item, path, kMaxWorkers), out.max_workers);
    } else if (key == "max_activations_per_worker") {
      ok = Assign(Number(item, path, kMaxActivationsPerWorker), out.max_activations_per_worker);
    } else if (key == "queue_max") {
      ok = Assign(Number(item, path, kQueueMax), out.queue_max);
    } else if (key == "max_body_bytes") {
      ok = Assign(Number(item, path, kBodyBytes), out.max_body_bytes);
    } else if (key == "wait_max") {
      ok = Assign(Duration(item, path, kWaitMax), out.wait_max);
    } else if (key == "drain_timeout") {
      ok = Assign(Duration(item, path, kDrainTimeout), out.drain_timeout);
    } else if (key == "max_connections") {
      ok = Assign(Number(item, path, kMaxConnections), out.max_connections);
    } else if (key == "idempotency_ttl") {
      ok = Assign(Duration(item, path, kIdempotencyTtl), out.idempotency_ttl);
    } else if (key == "header_timeout") {
      ok = Assign(Duration(item, path, kHeaderTimeout), out.header_timeout);
    } else if (key == "body_timeout") {
      ok = Assign(Duration(item, path, kBodyTimeout), out.body_timeout);
    } else if (key == "max_connections_per_client") {
      ok = Assign(Number(item, path, kMaxConnectionsPerClient), out.max_connections_per_client);
    } else if (key == "max_unsent_bytes") {
      ok = Assign(Number(item, path, kUnsentBytes), out.max_unsent_bytes);
    } else if (key == "tail_subscribers") {
      ok = Assign(Number(item, path, kTailSubscribers), out.tail_subscribers);
    } else if (key == "tail_buffer_bytes") {
      ok = Assign(Number(item, path, kTailBufferBytes), out.tail_buffer_bytes);
    } else if (key == "max_parked_runs") {
      ok = Assign(Number(item, path, kMaxParkedRuns), out.max_parked_runs);
    } else if (key == "max_parked_runs_per_flow") {
      ok = Assign(Number(item, path, kMaxParkedRuns), out.max_parked_runs_per_flow);
    } else if (key == "max_event_bytes") {
      ok = Assign(Number(item, path, kEventBytes), out.max_event_bytes);
    } else if (key == "max_pending_events_per_run") {
      ok = Assign(Number(item, path, kPendingEvents), out.max_pending_events_per_run);
    } else if (key == "event_retention") {
      ok = Assign(Duration(item, path, kEventRetention), out.event_retention);
    }
    if (!ok) return ok;
  }
  return Ok();
}

Result<void> Parser::ParseConsole(const Json& value, ConsoleConfig& out) const {
  if (auto ok = Object(value, "console", "{\"enabled\": true, \"session_idle\": \"1h\"}"); !ok) return ok;
  if (auto ok = KnownKeys(value, "console",
                          {"enabled", "max_sessions", "session_idle", "session_max_age", "max_streams_per_session",
                           "secure_cookie"});
      !ok)
    return ok;
  for (const auto& [key, item] : value.items()) {
    const std::string path = "console." + key;
    Result<void> ok;
    if (key == "enabled") {
      ok = Assign(Bool(item, path), out.enabled);
    } else if (key == "max_sessions") {
      ok = Assign(Number(item, path, kMaxSessions), out.max_sessions);
    } else if (key == "session_idle") {
      ok = Assign(Duration(item, path, kSessionIdle), out.session_idle);
    } else if (key == "session_max_age") {
      ok = Assign(Duration(item, path, kSessionMaxAge), out.session_max_age);
    } else if (key == "max_streams_per_session") {
      ok = Assign(Number(item, path, kMaxStreamsPerSession), out.max_streams_per_session);
    } else if (key == "secure_cookie") {
      ok = Assign(Bool(item, path), out.secure_cookie);
    }
    if (!ok) return ok;
  }
  return Ok();
}

Result<McpConfig> Parser::ParseMcp(const Json& value) const {
  McpConfig out;
  if (auto ok = Object(value, "mcp", "{\"policy\": \"agents\"}"); !ok) return ok.error();
  if (auto ok = KnownKeys(value, "mcp", {"policy", "max_scripts"}); !ok) return ok.error();
  // No default policy: which grants an agent gets is the operator's explicit choice.
  if (!value.contains("policy")) {
    return Fail("mcp.policy", "missing: name the codemode policy the agents' scripts run under (approved with "
                              "`basal policy approve NAME`), e.g. \"policy\": \"agents\"");
  }
  for (const auto& [key, item] : value.items()) {
    const std::string path = "mcp." + key;
    Result<void> ok;
    if (key == "policy") {
      auto text = String(item, path, "the codemode policy's name, e.g. \"agents\"");
      if (!text) return text.error();
      if (text->empty()) return Fail(path, "empty: name the codemode policy, e.g. \"agents\"");
      if (text->size() > kMaxFlowNameBytes) {
        return Fail(path, Shown(*text) + " is " + std::to_string(text->size()) + " bytes; a policy's name is at most " +
                              std::to_string(kMaxFlowNameBytes));
      }
      if (HasControlByte(*text)) return Fail(path, Shown(*text) + " has a control character; a policy's name has none");
      out.policy = std::move(*text);
    } else if (key == "max_scripts") {
      ok = Assign(Number(item, path, kMaxScripts), out.max_scripts);
    }
    if (!ok) return ok.error();
  }
  return out;
}

Result<std::string> Parser::ParseTrigger(const Json& value, const std::string& path, ServeConfig& out) const {
  if (auto ok = Object(value, path,
                       "{\"name\": \"github\", \"webhook\": {...}} or {\"name\": \"nightly\", \"schedule\": {...}}");
      !ok)
    return ok.error();
  if (auto ok = KnownKeys(value, path, {"name", "webhook", "schedule"}); !ok) return ok.error();
  if (!value.contains("name")) return Fail(path + ".name", "missing: every trigger has a name, e.g. \"nightly\"");
  auto name = String(value["name"], path + ".name", "a name of a-z, 0-9, _ and -, e.g. \"nightly\"");
  if (!name) return name;
  if (!IsTriggerName(*name)) {
    return Fail(path + ".name", Shown(*name) + " is not a trigger name: use 1 to 64 of a-z, 0-9, _ and -, "
                                               "e.g. \"nightly\"");
  }
  const bool webhook = value.contains("webhook");
  const bool schedule = value.contains("schedule");
  if (webhook && schedule) {
    return Fail(path, "has both \"webhook\" and \"schedule\": a trigger is one of them; make two triggers");
  }
  if (webhook) {
    auto parsed = ParseWebhook(value["webhook"], path + ".webhook");
    if (!parsed) return parsed.error();
    parsed->name = *name;
    out.webhooks.push_back(std::move(*parsed));
  } else if (schedule) {
    auto parsed = ParseSchedule(value["schedule"], path + ".schedule");
    if (!parsed) return parsed.error();
    parsed->name = *name;
    out.schedules.push_back(std::move(*parsed));
  } else {
    return Fail(path, "has neither \"webhook\" nor \"schedule\": add the one that starts its runs");
  }
  return name;
}

// "event": {"name": "paid", "key": "/data/order_id"}.
Result<void> Parser::ParseWebhookEvent(const Json& value, const std::string& path, WebhookTrigger& out) const {
  if (auto ok = Object(value, path, "{\"name\": \"paid\", \"key\": \"/data/order_id\"}"); !ok) return ok.error();
  if (auto ok = KnownKeys(value, path, {"name", "key"}); !ok) return ok.error();
  if (!value.contains("name") || !value.contains("key"))
    return Fail(path, "needs \"name\" (the event waitForEvent names) and \"key\" (a JSON pointer to the payload's "
                      "value that picks the run, e.g. \"/data/order_id\")");
  auto name = String(value["name"], path + ".name", "an event name, e.g. \"paid\"");
  if (!name) return name.error();
  const bool name_ok = !name->empty() && name->size() <= 128 && std::all_of(name->begin(), name->end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-' || c == ':';
  });
  if (!name_ok)
    return Fail(path + ".name", Shown(value["name"]) + " is not an event name: 1 to 128 letters, digits, '.', '_', '-' "
                                                       "and ':'");
  auto key = String(value["key"], path + ".key", "a JSON pointer, e.g. \"/data/order_id\"");
  if (!key) return key.error();
  if (key->empty() || key->front() != '/' || key->size() > 256 || !ParseJsonPointer(*key))
    return Fail(path + ".key", Shown(value["key"]) + " is not a JSON pointer (RFC 6901) to a value of the payload: "
                                                      "write e.g. \"/data/order_id\" (\"~1\" for a '/' in a name, "
                                                      "\"~0\" for '~')");
  out.event_name = std::move(*name);
  out.event_key = std::move(*key);
  return {};
}

Result<WebhookTrigger> Parser::ParseWebhook(const Json& value, const std::string& path) const {
  WebhookTrigger out;
  if (auto ok = Object(value, path, "{\"flow\": \"on_push\", \"secret\": \"github_hook\"}"); !ok) return ok.error();
  if (auto ok = KnownKeys(value, path,
                          {"flow", "secret", "scheme", "window", "max_body_bytes", "respond", "wait", "failure_status",
                           "allow_set_cookie", "event"});
      !ok)
    return ok.error();
  if (!value.contains("flow")) {
    return Fail(path + ".flow", "missing: name the flow each delivery runs, e.g. \"flow\": \"on_push\"");
  }
  // No unsigned webhooks: whoever reaches the listener could start runs.
  if (!value.contains("secret")) {
    return Fail(path + ".secret", "missing: name the secret deliveries are signed with (stored with `basal secret "
                                  "set NAME`), e.g. \"secret\": \"github_hook\"");
  }
  for (const auto& [key, item] : value.items()) {
    const std::string at = path + "." + key;
    Result<void> ok;
    if (key == "flow") {
      ok = Assign(FlowName(item, at), out.flow);
    } else if (key == "secret") {
      auto secret = String(item, at, "a secret's name, e.g. \"github_hook\"");
      if (!secret) return secret.error();
      if (auto valid = ValidateSecretName(*secret); !valid) return Fail(at, valid.error().message);
      out.secret = std::move(*secret);
    } else if (key == "window") {
      ok = Assign(Duration(item, at, kWindow), out.window);
      // The signature check counts seconds; a fraction would be cut without a word.
      if (ok && out.window.count() % 1000 != 0) {
        return Fail(at, Shown(item) + " is not whole seconds: the signature check counts seconds; write e.g. \"5m\" "
                                      "or \"90s\"");
      }
    } else if (key == "max_body_bytes") {
      ok = Assign(Number(item, at, kBodyBytes), out.max_body_bytes);
    } else if (key == "respond") {
      const std::string text = item.is_string() ? item.get<std::string>() : "";
      if (text == "ack") {
        out.respond = WebhookTrigger::Respond::kAck;
      } else if (text == "wait") {
        out.respond = WebhookTrigger::Respond::kWait;
      } else if (text == "flow") {
        out.respond = WebhookTrigger::Respond::kFlow;
      } else {
        return Fail(at, Shown(item) + " is not a way to respond: write \"ack\" (answer once the run is queued), "
                                      "\"wait\" (answer with its result) or \"flow\" (answer with the status, "
                                      "headers and body the flow returns)");
      }
    } else if (key == "wait") {
      ok = Assign(Duration(item, at, kWebhookWait), out.wait);
    } else if (key == "scheme") {
      const std::string text = item.is_string() ? item.get<std::string>() : "";
      auto scheme = ParseWebhookScheme(text);
      if (!scheme) {
        return Fail(at, Shown(item) + " is not a signing scheme: write \"basal\" (X-Basal-Signature, the default), "
                                      "\"github\", \"stripe\" or \"slack\" (the sender's own)");
      }
      out.scheme = *scheme;
    } else if (key == "failure_status") {
      ok = Assign(Number(item, at, kFailureStatus), out.failure_status);
    } else if (key == "allow_set_cookie") {
      ok = Assign(Bool(item, at), out.allow_set_cookie);
    } else if (key == "event") {
      ok = ParseWebhookEvent(item, at, out);
    }
    if (!ok) return ok.error();
  }
  if (!out.event_name.empty() && value.contains("respond") && out.respond != WebhookTrigger::Respond::kAck) {
    return Fail(path + ".respond", "a trigger that delivers events starts no run, so it has no result to wait for: "
                                   "remove respond (the sender gets 202 once the event is journaled)");
  }
  // A setting that would never apply is a misreading of the config; say so instead of ignoring it.
  const bool waits = out.respond != WebhookTrigger::Respond::kAck;
  if (value.contains("wait") && !waits) {
    return Fail(path + ".wait", "applies only with \"respond\": \"wait\" or \"flow\"; remove it, or set respond");
  }
  if (value.contains("failure_status") && !waits) {
    return Fail(path + ".failure_status", "applies only with \"respond\": \"wait\" or \"flow\" (an ack is sent "
                                          "before the run ends); remove it, or set respond");
  }
  if (value.contains("allow_set_cookie") && out.respond != WebhookTrigger::Respond::kFlow) {
    return Fail(path + ".allow_set_cookie", "applies only with \"respond\": \"flow\"; remove it, or set respond");
  }
  if (value.contains("window") && out.scheme == WebhookScheme::kGithub) {
    return Fail(path + ".window", "GitHub signs no time, so there is no window to check; remove it (scheme github)");
  }
  return out;
}

Result<ScheduleTrigger> Parser::ParseSchedule(const Json& value, const std::string& path) const {
  ScheduleTrigger out;
  if (auto ok = Object(value, path, "{\"flow\": \"report\", \"cron\": \"0 3 * * *\"}"); !ok) return ok.error();
  if (auto ok = KnownKeys(value, path, {"flow", "cron", "timezone", "input", "overlap", "catch_up"}); !ok)
    return ok.error();
  if (!value.contains("flow")) {
    return Fail(path + ".flow", "missing: name the flow each fire runs, e.g. \"flow\": \"report\"");
  }
  if (!value.contains("cron")) {
    return Fail(path + ".cron", "missing: write when it fires, five fields, e.g. \"cron\": \"0 3 * * *\"");
  }
  for (const auto& [key, item] : value.items()) {
    const std::string at = path + "." + key;
    Result<void> ok;
    if (key == "flow") {
      ok = Assign(FlowName(item, at), out.flow);
    } else if (key == "cron") {
      auto cron = String(item, at, "five fields, e.g. \"0 3 * * *\"");
      if (!cron) return cron.error();
      if (cron->empty() || cron->size() > kMaxCronBytes || HasControlByte(*cron)) {
        return Fail(at, Shown(*cron) + " is not a cron expression: write five fields, e.g. \"0 3 * * *\"");
      }
      out.cron = std::move(*cron);
    } else if (key == "timezone") {
      auto zone = String(item, at, "an IANA time zone name, e.g. \"Europe/Berlin\"");
      if (!zone) return zone.error();
      if (!IsTimezoneName(*zone)) {
        return Fail(at, Shown(*zone) + " is not a time zone name: write an IANA name, e.g. \"UTC\", "
                                       "\"Europe/Berlin\"");
      }
      out.timezone = std::move(*zone);
    } else if (key == "input") {
      out.input = item;
    } else if (key == "overlap") {
      const std::string text = item.is_string() ? item.get<std::string>() : "";
      if (text == "skip") {
        out.overlap = ScheduleTrigger::Overlap::kSkip;
      } else if (text == "buffer_one") {
        out.overlap = ScheduleTrigger::Overlap::kBufferOne;
      } else {
        return Fail(at, Shown(item) + " is not an overlap rule: write \"skip\" (a fire while the last run is still "
                                      "going is dropped) or \"buffer_one\" (one such fire waits for it)");
      }
    } else if (key == "catch_up") {
      ok = Assign(Duration(item, at, kCatchUp), out.catch_up);
    }
    if (!ok) return ok.error();
  }
  return out;
}

bool IsBlank(std::string_view text) { return text.find_first_not_of(" \t\r\n") == std::string_view::npos; }

struct Unit {
  std::string_view name;
  int64_t ms;
};
// Largest first: the order a duration's parts must come in.
constexpr std::array<Unit, 5> kUnits{{{"d", 86'400'000}, {"h", 3'600'000}, {"m", 60'000}, {"s", 1'000}, {"ms", 1}}};

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

std::string ErrnoText(int err) { return std::error_code(err, std::generic_category()).message(); }

}  // namespace

Result<milliseconds> ParseDuration(std::string_view text) {
  // The text as an error shows it, written only for an error (a run's ?wait= is read on its path).
  const auto shown = [text] { return Shown(text); };
  const auto malformed = [&] { return Invalid(shown() + " is not a duration: " + kDurationForm); };
  if (text.empty()) return malformed();
  if (text[0] == '-') return Invalid(shown() + " is negative: a duration is 0 or more, e.g. \"0s\", \"30s\"");
  size_t pos = 0;
  size_t next_unit = 0;  // the index in kUnits of the largest unit still allowed
  int64_t total = 0;
  while (pos < text.size()) {
    const size_t start = pos;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') ++pos;
    if (pos == start) return malformed();
    const std::string_view digits = text.substr(start, pos - start);
    if (pos < text.size() && (text[pos] == '.' || text[pos] == ',')) {
      return Invalid(shown() + " has a fraction: write whole units, largest first, e.g. \"1h30m\" or \"1500ms\"");
    }
    size_t unit = kUnits.size();
    // "ms" before "m": the longest unit that matches.
    if (text.substr(pos, 2) == "ms") {
      unit = 4;
    } else if (pos < text.size()) {
      for (size_t u = 0; u < 4; ++u) {
        if (text[pos] == kUnits[u].name[0]) unit = u;
      }
    }
    if (unit == kUnits.size()) return malformed();
    pos += kUnits[unit].name.size();
    if (unit < next_unit) {
      return Invalid(shown() + " repeats a unit or puts a smaller one first: write each unit once, largest first, "
                             "e.g. \"1h30m\"");
    }
    next_unit = unit + 1;
    // A count of more than 11 significant digits is past the cap in every unit; one of 11 digits
    // times a day's milliseconds, plus a total within the cap, still fits in int64_t.
    const size_t first = digits.find_first_not_of('0');
    const std::string_view significant = first == std::string_view::npos ? "" : digits.substr(first);
    if (significant.size() > 11) return Invalid(shown() + " is longer than 365d, the longest duration");
    int64_t count = 0;
    for (char c : significant) count = count * 10 + (c - '0');
    total += count * kUnits[unit].ms;
    if (total > kMaxDuration.count()) return Invalid(shown() + " is longer than 365d, the longest duration");
  }
  return milliseconds(total);
}

std::string FormatDuration(milliseconds duration) {
  if (duration.count() == 0) return "0s";
  std::string text = duration.count() < 0 ? "-" : "";
  int64_t rest = duration.count() < 0 ? -duration.count() : duration.count();
  for (const Unit& unit : kUnits) {
    if (rest >= unit.ms) {
      text += std::to_string(rest / unit.ms) + std::string(unit.name);
      rest %= unit.ms;
    }
  }
  return text;
}

Result<TcpListen> ParseTcpListen(std::string_view text) {
  const auto bad = [&](const std::string& why) {
    return Invalid(Shown(text) + " is not a literal address and port: " + why +
                   "; write e.g. \"127.0.0.1:8470\" or \"[::1]:8470\"");
  };
  TcpListen out;
  std::string_view host;
  std::string_view port;
  if (!text.empty() && text[0] == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) return bad("'[' without ']'");
    host = text.substr(1, close - 1);
    if (close + 1 >= text.size() || text[close + 1] != ':') return bad("no \":PORT\" after the address");
    port = text.substr(close + 2);
    out.ipv6 = true;
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return bad("no \":PORT\" after the address");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) return bad("an IPv6 address goes in brackets");
  }
  out.address = std::string(host);
  std::array<unsigned char, sizeof(in6_addr)> bytes{};
  if (::inet_pton(out.ipv6 ? AF_INET6 : AF_INET, out.address.c_str(), bytes.data()) != 1) {
    return bad(Shown(host) + (out.ipv6 ? " is not an IPv6 address" : " is not an IPv4 address (host names are not "
                                                                      "resolved)"));
  }
  uint32_t number = 0;
  bool digits = !port.empty() && port.size() <= 5;
  for (char c : port) {
    if (c < '0' || c > '9') digits = false;
  }
  if (digits) {
    for (char c : port) number = number * 10 + static_cast<uint32_t>(c - '0');
  }
  if (!digits || number < 1 || number > 65535) return bad("the port " + Shown(port) + " is not from 1 to 65535");
  out.port = static_cast<uint16_t>(number);
  return out;
}

bool IsLoopbackListen(const ListenConfig& listen) {
  if (listen.tcp.empty()) return true;
  auto tcp = ParseTcpListen(listen.tcp);
  if (!tcp) return false;
  if (!tcp->ipv6) {
    in_addr addr{};
    if (::inet_pton(AF_INET, tcp->address.c_str(), &addr) != 1) return false;
    return (ntohl(addr.s_addr) >> 24) == 127;
  }
  in6_addr addr{};
  if (::inet_pton(AF_INET6, tcp->address.c_str(), &addr) != 1) return false;
  if (IN6_IS_ADDR_LOOPBACK(&addr)) return true;
  return IN6_IS_ADDR_V4MAPPED(&addr) && addr.s6_addr[12] == 127;
}

SocketEnv SocketEnvFromProcess() {
  SocketEnv env;
  if (const char* v = std::getenv("RUNTIME_DIRECTORY")) env.runtime_directory = v;
  if (const char* v = std::getenv("XDG_RUNTIME_DIR")) env.xdg_runtime_dir = v;
  env.euid = ::geteuid();
  return env;
}

Result<std::string> ResolveSocketPath(const ListenConfig& listen, const SocketEnv& env) {
  if (!listen.socket.empty()) return listen.socket;
  const auto directory = [](std::string_view dir) {
    while (!dir.empty() && dir.back() == '/') dir.remove_suffix(1);
    return std::string(dir);
  };
  std::string path;
  // systemd joins several RuntimeDirectory= entries with ':'; the first is the unit's own.
  const std::string_view runtime = std::string_view(env.runtime_directory).substr(0, env.runtime_directory.find(':'));
  if (!runtime.empty() && runtime[0] == '/') {
    path = directory(runtime) + "/basal.sock";
  } else if (!env.xdg_runtime_dir.empty() && env.xdg_runtime_dir[0] == '/') {
    path = directory(env.xdg_runtime_dir) + "/basal/basal.sock";
  } else if (env.euid == 0) {
    path = "/run/basal/basal.sock";
  } else {
    return Invalid("listen.socket: not set, and there is no default for uid " + std::to_string(env.euid) +
                   " (neither RUNTIME_DIRECTORY nor XDG_RUNTIME_DIR is set to an absolute path): set listen.socket "
                   "to the socket's path, e.g. \"/var/lib/basal/basal.sock\"");
  }
  if (path.size() > kMaxSocketPathBytes) {
    return Invalid("listen.socket: not set, and the default " + Shown(path) + " is " + std::to_string(path.size()) +
                   " bytes; a Unix socket's path is at most " + std::to_string(kMaxSocketPathBytes) +
                   ": set listen.socket to a shorter path");
  }
  return path;
}

Result<ServeConfig> ParseServeConfig(std::string_view json_text, std::string_view origin) {
  if (IsBlank(json_text)) return ServeConfig{};
  const std::string prefix = origin.empty() ? "" : std::string(origin) + ": ";
  StrictJsonWatch watch(kMaxDepth);
  Json root;
  try {
    root = Json::parse(
        json_text.begin(), json_text.end(),
        [&watch](int /*depth*/, Json::parse_event_t event, Json& parsed) {
          watch.OnEvent(event, parsed);
          return true;
        },
        /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const Json::exception& e) {
    return Invalid(prefix + "not valid JSON (no comments, no trailing commas): " + SyntaxMessage(e));
  }
  if (auto problem = StrictJsonProblem(watch)) return Invalid(prefix + *problem);
  return Parser(origin).Parse(root);
}

Result<ServeConfig> LoadServeConfig(const std::string& path) {
  // O_NONBLOCK: a FIFO given by mistake must not hang the start; it is refused below.
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (fd.get() < 0) {
    const int err = errno;
    if (err == ENOENT) {
      return MakeError(ErrorCode::kNotFound, "the configuration file " + path + " does not exist: check the path "
                                             "given to --config");
    }
    return MakeError(ErrorCode::kIo, "cannot open the configuration file " + path + ": " + ErrnoText(err));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    return MakeError(ErrorCode::kIo, "cannot stat the configuration file " + path + ": " + ErrnoText(errno));
  }
  if (!S_ISREG(st.st_mode)) {
    return MakeError(ErrorCode::kInvalidArgument, path + " is not a regular file: --config takes a JSON file");
  }
  const auto too_big = [&](uint64_t size) {
    return MakeError(ErrorCode::kInvalidArgument, path + ": " + std::to_string(size) + " bytes; a configuration file " +
                                                      "is at most " + std::to_string(kMaxServeConfigBytes) +
                                                      " bytes (1 MiB)");
  };
  if (static_cast<uint64_t>(st.st_size) > kMaxServeConfigBytes) return too_big(st.st_size);
  std::string text;
  char buffer[16384];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return MakeError(ErrorCode::kIo, "cannot read the configuration file " + path + ": " + ErrnoText(errno));
    if (n == 0) break;
    text.append(buffer, static_cast<size_t>(n));
    if (text.size() > kMaxServeConfigBytes) return too_big(text.size());  // it grew while read
  }
  return ParseServeConfig(text, path);
}

nlohmann::json ToJson(const ServeConfig& config) {
  Json root = Json::object();
  if (!config.db.empty()) root["db"] = RedactLocator(config.db);
  if (!config.worker.empty()) root["worker"] = config.worker;
  if (!config.secrets_dir.empty()) root["secrets_dir"] = config.secrets_dir;
  if (!config.host_id.empty()) root["host_id"] = config.host_id;
  root["lease"] = FormatDuration(config.lease);
  root["queue_poll"] = FormatDuration(config.queue_poll);

  Json listen = Json::object();
  if (!config.listen.socket.empty()) listen["socket"] = config.listen.socket;
  listen["allowed_groups"] = config.listen.allowed_groups;
  if (!config.listen.tcp.empty()) listen["tcp"] = config.listen.tcp;
  listen["allow_non_loopback"] = config.listen.allow_non_loopback;
  root["listen"] = std::move(listen);

  const LimitsConfig& l = config.limits;
  root["limits"] = {
      {"max_workers", l.max_workers},
      {"max_activations_per_worker", l.max_activations_per_worker},
      {"queue_max", l.queue_max},
      {"max_body_bytes", l.max_body_bytes},
      {"wait_max", FormatDuration(l.wait_max)},
      {"drain_timeout", FormatDuration(l.drain_timeout)},
      {"max_connections", l.max_connections},
      {"idempotency_ttl", FormatDuration(l.idempotency_ttl)},
      {"header_timeout", FormatDuration(l.header_timeout)},
      {"body_timeout", FormatDuration(l.body_timeout)},
      {"max_connections_per_client", l.max_connections_per_client},
      {"max_unsent_bytes", l.max_unsent_bytes},
      {"tail_subscribers", l.tail_subscribers},
      {"tail_buffer_bytes", l.tail_buffer_bytes},
      {"max_parked_runs", l.max_parked_runs},
      {"max_parked_runs_per_flow", l.max_parked_runs_per_flow},
      {"max_event_bytes", l.max_event_bytes},
      {"max_pending_events_per_run", l.max_pending_events_per_run},
      {"event_retention", FormatDuration(l.event_retention)},
  };

  Json triggers = Json::array();
  for (const WebhookTrigger& w : config.webhooks) {
    Json webhook = {
        {"flow", w.flow},
        {"secret", w.secret},
        {"window", FormatDuration(w.window)},
        {"max_body_bytes", w.max_body_bytes},
        {"respond", w.respond == WebhookTrigger::Respond::kWait   ? "wait"
                    : w.respond == WebhookTrigger::Respond::kFlow ? "flow"
                                                                  : "ack"},
        {"scheme", WebhookSchemeName(w.scheme)},
    };
    if (w.scheme == WebhookScheme::kGithub) webhook.erase("window");
    if (w.respond != WebhookTrigger::Respond::kAck) {
      webhook["wait"] = FormatDuration(w.wait);
      webhook["failure_status"] = w.failure_status;
    }
    if (w.respond == WebhookTrigger::Respond::kFlow) webhook["allow_set_cookie"] = w.allow_set_cookie;
    if (!w.event_name.empty()) webhook["event"] = {{"name", w.event_name}, {"key", w.event_key}};
    triggers.push_back({{"name", w.name}, {"webhook", std::move(webhook)}});
  }
  for (const ScheduleTrigger& s : config.schedules) {
    triggers.push_back({{"name", s.name},
                        {"schedule",
                         {
                             {"flow", s.flow},
                             {"cron", s.cron},
                             {"timezone", s.timezone},
                             {"input", s.input},
                             {"overlap", s.overlap == ScheduleTrigger::Overlap::kBufferOne ? "buffer_one" : "skip"},
                             {"catch_up", FormatDuration(s.catch_up)},
                         }}});
  }
  root["triggers"] = std::move(triggers);
  if (config.mcp) root["mcp"] = {{"policy", config.mcp->policy}, {"max_scripts", config.mcp->max_scripts}};
  const ConsoleConfig& c = config.console;
  root["console"] = {
      {"enabled", c.enabled},
      {"max_sessions", c.max_sessions},
      {"session_idle", FormatDuration(c.session_idle)},
      {"session_max_age", FormatDuration(c.session_max_age)},
      {"max_streams_per_session", c.max_streams_per_session},
      {"secure_cookie", c.secure_cookie},
  };
  return root;
}

// RFC 6901: "" is the whole document, else "/" before each reference token, "~1" for '/', "~0"
// for '~' (and no other '~').
std::optional<std::vector<std::string>> ParseJsonPointer(std::string_view pointer) {
  std::vector<std::string> tokens;
  if (pointer.empty()) return tokens;
  if (pointer.front() != '/') return std::nullopt;
  size_t at = 1;
  while (true) {
    const size_t end = pointer.find('/', at);
    const std::string_view raw = pointer.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at);
    std::string token;
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] != '~') {
        token += raw[i];
      } else if (i + 1 < raw.size() && (raw[i + 1] == '0' || raw[i + 1] == '1')) {
        token += raw[++i] == '0' ? '~' : '/';
      } else {
        return std::nullopt;
      }
    }
    tokens.push_back(std::move(token));
    if (end == std::string_view::npos) break;
    at = end + 1;
  }
  return tokens;
}

const nlohmann::json* FindByPointer(const nlohmann::json& document, const std::vector<std::string>& tokens) {
  const nlohmann::json* at = &document;
  for (const std::string& token : tokens) {
    if (at->is_object()) {
      auto it = at->find(token);
      if (it == at->end()) return nullptr;
      at = &*it;
    } else if (at->is_array()) {
      // An index: decimal digits, no leading zero (RFC 6901 section 4); "-" names no element.
      if (token.empty() || token.size() > 9 || (token.size() > 1 && token[0] == '0') ||
          !std::all_of(token.begin(), token.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return nullptr;
      const size_t index = std::stoul(token);
      if (index >= at->size()) return nullptr;
      at = &(*at)[index];
    } else {
      return nullptr;
    }
  }
  return at;
}

}  // namespace basal::serve
