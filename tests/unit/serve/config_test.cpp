// The configuration file of `basal serve` (src/serve/config.h, docs/serve-config.md): durations,
// a table of good configs and what they parse to, a table of bad ones and their exact messages,
// the default socket path, listen.tcp and loopback, ToJson read back, the file reader's bounds,
// and the examples of the docs page parsed as they stand.
#include "serve/config.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace basal::serve {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using namespace std::chrono_literals;

ServeConfig MustParse(std::string_view text) {
  auto config = ParseServeConfig(text, "serve.json");
  EXPECT_TRUE(config.ok()) << text << "\n -> " << (config ? "" : config.error().message);
  if (!config) return ServeConfig{};
  return std::move(*config);
}

std::string ErrorOf(std::string_view text) {
  auto config = ParseServeConfig(text, "serve.json");
  if (config) return "<parsed>";
  EXPECT_EQ(config.error().code, ErrorCode::kInvalidArgument) << config.error().message;
  return config.error().message;
}

// ---- durations ----

TEST(ParseDurationTest, AcceptedForms) {
  const struct {
    const char* text;
    milliseconds expected;
  } cases[] = {
      {"0s", 0ms},          {"0ms", 0ms},           {"500ms", 500ms},        {"30s", 30s},
      {"5m", 5min},         {"1h", 1h},             {"2d", 48h},             {"1h30m", 90min},
      {"1d12h", 36h},       {"1m30s", 90s},         {"1s500ms", 1500ms},     {"1d1h1m1s1ms", 90'061'001ms},
      {"90s", 90s},         {"0001s", 1s},          {"365d", 365 * 24h},     {"364d23h59m59s999ms", 365 * 24h - 1ms},
      {"31536000000ms", 365 * 24h},                 {"60m", 1h},
  };
  for (const auto& c : cases) {
    auto d = ParseDuration(c.text);
    ASSERT_TRUE(d.ok()) << c.text << ": " << d.error().message;
    EXPECT_EQ(*d, c.expected) << c.text;
  }
}

TEST(ParseDurationTest, RefusedFormsSayTheAcceptedOne) {
  const std::string form = R"(is not a duration: use a number and a unit, e.g. "30s", "500ms", "5m", "1h")";
  const struct {
    const char* text;
    std::string message;
  } cases[] = {
      {"30x", R"("30x" )" + form},
      {"", R"("" )" + form},
      {"30", R"("30" )" + form},
      {"s", R"("s" )" + form},
      {"30 s", R"("30 s" )" + form},
      {" 30s", R"(" 30s" )" + form},
      {"30s ", R"("30s " )" + form},
      {"30S", R"("30S" )" + form},
      {"30us", R"("30us" )" + form},
      {"1h30", R"("1h30" )" + form},
      {"+5s", R"("+5s" )" + form},
      {"-5s", R"("-5s" is negative: a duration is 0 or more, e.g. "0s", "30s")"},
      {"1.5h", R"("1.5h" has a fraction: write whole units, largest first, e.g. "1h30m" or "1500ms")"},
      {"30m1h", R"("30m1h" repeats a unit or puts a smaller one first: write each unit once, largest first, e.g. "1h30m")"},
      {"1h1h", R"("1h1h" repeats a unit or puts a smaller one first: write each unit once, largest first, e.g. "1h30m")"},
      {"366d", R"("366d" is longer than 365d, the longest duration)"},
      {"365d1ms", R"("365d1ms" is longer than 365d, the longest duration)"},
      {"31536000001ms", R"("31536000001ms" is longer than 365d, the longest duration)"},
      {"99999999999999999999999d", R"("99999999999999999999999d" is longer than 365d, the longest duration)"},
      {"\x1b[31m5s", R"("\u001b[31m5s" )" + form},
  };
  for (const auto& c : cases) {
    auto d = ParseDuration(c.text);
    ASSERT_FALSE(d.ok()) << c.text;
    EXPECT_EQ(d.error().code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(d.error().message, c.message) << c.text;
  }
}

TEST(FormatDurationTest, ShortestFormReadsBack) {
  const struct {
    milliseconds duration;
    const char* text;
  } cases[] = {
      {0ms, "0s"},      {1ms, "1ms"},          {500ms, "500ms"}, {30s, "30s"},       {90s, "1m30s"},
      {1h, "1h"},       {24h, "1d"},           {90min, "1h30m"}, {1500ms, "1s500ms"}, {365 * 24h, "365d"},
      {90'061'001ms, "1d1h1m1s1ms"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(FormatDuration(c.duration), c.text);
    auto back = ParseDuration(FormatDuration(c.duration));
    ASSERT_TRUE(back.ok()) << c.text;
    EXPECT_EQ(*back, c.duration) << c.text;
  }
}

// ---- good configs ----

TEST(ServeConfigTest, EmptyTextAndEmptyObjectAreAllDefaults) {
  for (const char* text : {"", "  \n\t\r\n", "{}", " { } \n"}) {
    auto config = ParseServeConfig(text, "serve.json");
    ASSERT_TRUE(config.ok()) << text << ": " << config.error().message;
    EXPECT_EQ(*config, ServeConfig{}) << text;
  }
  // The defaults docs/serve-config.md states.
  const ServeConfig d;
  EXPECT_EQ(d.db, "");
  EXPECT_EQ(d.listen.socket, "");
  EXPECT_EQ(d.listen.tcp, "");
  EXPECT_FALSE(d.listen.allow_non_loopback);
  EXPECT_EQ(d.limits.max_workers, 8u);
  EXPECT_EQ(d.limits.max_activations_per_worker, 256u);
  EXPECT_EQ(d.limits.queue_max, 1000u);
  EXPECT_EQ(d.limits.max_body_bytes, 1u << 20);
  EXPECT_EQ(d.limits.wait_max, 60s);
  EXPECT_EQ(d.limits.drain_timeout, 30s);
  EXPECT_EQ(d.limits.max_connections, 256u);
  EXPECT_EQ(d.limits.idempotency_ttl, 24h);
  EXPECT_EQ(d.limits.header_timeout, 10s);
  EXPECT_EQ(d.limits.body_timeout, 60s);
  EXPECT_EQ(d.limits.max_connections_per_client, 32u);
  EXPECT_EQ(d.limits.max_unsent_bytes, 64u << 20);
  EXPECT_EQ(d.limits.tail_subscribers, 32u);
  EXPECT_EQ(d.limits.tail_buffer_bytes, 1u << 20);
  const WebhookTrigger w;
  EXPECT_EQ(w.window, 5min);
  EXPECT_EQ(w.max_body_bytes, 256u << 10);
  EXPECT_EQ(w.respond, WebhookTrigger::Respond::kAck);
  EXPECT_EQ(w.wait, 30s);
  const ScheduleTrigger s;
  EXPECT_EQ(s.timezone, "UTC");
  EXPECT_EQ(s.input, nullptr);
  EXPECT_EQ(s.overlap, ScheduleTrigger::Overlap::kSkip);
  EXPECT_EQ(s.catch_up, 1h);
  EXPECT_FALSE(d.mcp.has_value());  // no /mcp unless asked for
  EXPECT_EQ(McpConfig{}.max_scripts, 8u);
  EXPECT_TRUE(d.console.enabled);
  EXPECT_EQ(d.console.max_sessions, 64u);
  EXPECT_EQ(d.console.session_idle, 1h);
  EXPECT_EQ(d.console.session_max_age, 12h);
  EXPECT_EQ(d.console.max_streams_per_session, 4u);
  EXPECT_FALSE(d.console.secure_cookie);
}

WebhookTrigger Webhook(std::string name, std::string flow, std::string secret) {
  WebhookTrigger w;
  w.name = std::move(name);
  w.flow = std::move(flow);
  w.secret = std::move(secret);
  return w;
}

ScheduleTrigger Schedule(std::string name, std::string flow, std::string cron) {
  ScheduleTrigger s;
  s.name = std::move(name);
  s.flow = std::move(flow);
  s.cron = std::move(cron);
  return s;
}

TEST(ServeConfigTest, GoodConfigsAndWhatTheyParseTo) {
  const struct {
    const char* text;
    std::function<void(ServeConfig&)> expect;  // applied to the defaults
  } cases[] = {
      {R"({"db": "/var/lib/basal/journal.db", "worker": "/usr/libexec/basal/ck-basal-worker",
           "secrets_dir": "/etc/basal/secrets"})",
       [](ServeConfig& c) {
         c.db = "/var/lib/basal/journal.db";
         c.worker = "/usr/libexec/basal/ck-basal-worker";
         c.secrets_dir = "/etc/basal/secrets";
       }},
      {R"({"listen": {"socket": "/run/basal/basal.sock", "allowed_groups": ["basal-ops", "ops@corp.example"]}})",
       [](ServeConfig& c) {
         c.listen.socket = "/run/basal/basal.sock";
         c.listen.allowed_groups = {"basal-ops", "ops@corp.example"};
       }},
      {R"({"listen": {"allowed_groups": []}})", [](ServeConfig&) {}},
      {R"({"console": {"enabled": false}})", [](ServeConfig& c) { c.console.enabled = false; }},
      {R"({"console": {"max_sessions": 8, "session_idle": "15m", "session_max_age": "8h", "max_streams_per_session": 2,
                       "secure_cookie": true}})",
       [](ServeConfig& c) {
         c.console.max_sessions = 8;
         c.console.session_idle = 15min;
         c.console.session_max_age = 8h;
         c.console.max_streams_per_session = 2;
         c.console.secure_cookie = true;
       }},
      {R"({"listen": {"tcp": "127.0.0.1:8470"}})", [](ServeConfig& c) { c.listen.tcp = "127.0.0.1:8470"; }},
      {R"({"listen": {"tcp": "127.3.2.1:1"}})", [](ServeConfig& c) { c.listen.tcp = "127.3.2.1:1"; }},
      {R"({"listen": {"tcp": "[::1]:65535"}})", [](ServeConfig& c) { c.listen.tcp = "[::1]:65535"; }},
      {R"({"listen": {"tcp": "[::ffff:127.0.0.1]:8470"}})",
       [](ServeConfig& c) { c.listen.tcp = "[::ffff:127.0.0.1]:8470"; }},
      {R"({"listen": {"tcp": "0.0.0.0:8470", "allow_non_loopback": true}})",
       [](ServeConfig& c) {
         c.listen.tcp = "0.0.0.0:8470";
         c.listen.allow_non_loopback = true;
       }},
      {R"({"listen": {"tcp": "[2001:db8::5]:443", "allow_non_loopback": true}})",
       [](ServeConfig& c) {
         c.listen.tcp = "[2001:db8::5]:443";
         c.listen.allow_non_loopback = true;
       }},
      {R"({"listen": {"allow_non_loopback": false}})", [](ServeConfig&) {}},
      {R"({"limits": {"max_workers": 1, "max_activations_per_worker": 1, "queue_max": 1, "max_body_bytes": 1024,
                      "wait_max": "0s", "drain_timeout": "0s", "max_connections": 1, "idempotency_ttl": "1s",
                      "header_timeout": "1s", "body_timeout": "1s", "max_connections_per_client": 1,
                      "max_unsent_bytes": 4194304, "tail_subscribers": 1, "tail_buffer_bytes": 65536}})",
       [](ServeConfig& c) {
         c.limits = LimitsConfig{1, 1, 1, 1024, 0ms, 0ms, 1, 1s, 1s, 1s, 1, 4u << 20, 1, 64u << 10};
       }},
      {R"({"limits": {"max_workers": 1024, "max_activations_per_worker": 1000000, "queue_max": 1000000,
                      "max_body_bytes": 67108864, "wait_max": "1h", "drain_timeout": "60m",
                      "max_connections": 65536, "idempotency_ttl": "30d", "header_timeout": "10m",
                      "body_timeout": "1h", "max_connections_per_client": 65536, "max_unsent_bytes": 4294967296,
                      "tail_subscribers": 1024, "tail_buffer_bytes": 67108864}})",
       [](ServeConfig& c) {
         c.limits = LimitsConfig{1024, 1'000'000, 1'000'000, 64u << 20, 1h, 1h, 65536, 30 * 24h, 10min, 1h, 65536,
                                 size_t{4} << 30, 1024, 64u << 20};
       }},
      {R"({"triggers": []})", [](ServeConfig&) {}},
      {R"({"triggers": [{"name": "github", "webhook": {"flow": "on_push", "secret": "github_hook"}}]})",
       [](ServeConfig& c) { c.webhooks = {Webhook("github", "on_push", "github_hook")}; }},
      {R"({"triggers": [{"name": "ci-2", "webhook": {"flow": "build", "secret": "_ci", "window": "1h",
                          "max_body_bytes": 1048576, "respond": "wait", "wait": "10s"}}]})",
       [](ServeConfig& c) {
         WebhookTrigger w = Webhook("ci-2", "build", "_ci");
         w.window = 1h;
         w.max_body_bytes = 1u << 20;
         w.respond = WebhookTrigger::Respond::kWait;
         w.wait = 10s;
         c.webhooks = {w};
       }},
      {R"({"triggers": [{"name": "w", "webhook": {"flow": "f", "secret": "s", "respond": "wait"}}]})",
       [](ServeConfig& c) {
         WebhookTrigger w = Webhook("w", "f", "s");
         w.respond = WebhookTrigger::Respond::kWait;
         c.webhooks = {w};
       }},
      {R"({"triggers": [{"name": "w", "webhook": {"flow": "f", "secret": "s", "respond": "ack"}}]})",
       [](ServeConfig& c) { c.webhooks = {Webhook("w", "f", "s")}; }},
      {R"({"triggers": [{"name": "gh", "webhook": {"flow": "f", "secret": "s", "scheme": "github"}}]})",
       [](ServeConfig& c) {
         WebhookTrigger w = Webhook("gh", "f", "s");
         w.scheme = WebhookScheme::kGithub;
         c.webhooks = {w};
       }},
      {R"({"triggers": [{"name": "pay", "webhook": {"flow": "f", "secret": "s", "scheme": "stripe", "window": "10m",
                          "respond": "wait", "failure_status": 503}}]})",
       [](ServeConfig& c) {
         WebhookTrigger w = Webhook("pay", "f", "s");
         w.scheme = WebhookScheme::kStripe;
         w.window = 10min;
         w.respond = WebhookTrigger::Respond::kWait;
         w.failure_status = 503;
         c.webhooks = {w};
       }},
      {R"({"triggers": [{"name": "cmd", "webhook": {"flow": "f", "secret": "s", "scheme": "slack", "respond": "flow",
                          "wait": "2s", "failure_status": 200, "allow_set_cookie": true}}]})",
       [](ServeConfig& c) {
         WebhookTrigger w = Webhook("cmd", "f", "s");
         w.scheme = WebhookScheme::kSlack;
         w.respond = WebhookTrigger::Respond::kFlow;
         w.wait = 2s;
         w.failure_status = 200;
         w.allow_set_cookie = true;
         c.webhooks = {w};
       }},
      {R"({"triggers": [{"name": "nightly", "schedule": {"flow": "report", "cron": "0 3 * * *"}}]})",
       [](ServeConfig& c) { c.schedules = {Schedule("nightly", "report", "0 3 * * *")}; }},
      {R"({"triggers": [{"name": "nightly", "schedule": {"flow": "report", "cron": "0 3 * * *",
            "timezone": "America/Argentina/Buenos_Aires", "overlap": "buffer_one", "catch_up": "0s",
            "input": {"full": true, "days": [1, 2]}}}]})",
       [](ServeConfig& c) {
         ScheduleTrigger s = Schedule("nightly", "report", "0 3 * * *");
         s.timezone = "America/Argentina/Buenos_Aires";
         s.overlap = ScheduleTrigger::Overlap::kBufferOne;
         s.catch_up = 0ms;
         s.input = nlohmann::json{{"full", true}, {"days", {1, 2}}};
         c.schedules = {s};
       }},
      {R"({"triggers": [{"name": "t", "schedule": {"flow": "f", "cron": "* * * * *", "timezone": "Etc/GMT+5",
                                                    "input": null, "overlap": "skip", "catch_up": "7d"}}]})",
       [](ServeConfig& c) {
         ScheduleTrigger s = Schedule("t", "f", "* * * * *");
         s.timezone = "Etc/GMT+5";
         s.catch_up = 7 * 24h;
         c.schedules = {s};
       }},
      // Flow names: anything printable up to 128 bytes, UTF-8 included; checked against the
      // approved flows at start, not here.
      {R"({"triggers": [{"name": "a", "schedule": {"flow": "Bericht über Nacht", "cron": "0 3 * * *"}}]})",
       [](ServeConfig& c) { c.schedules = {Schedule("a", "Bericht über Nacht", "0 3 * * *")}; }},
      // Both kinds, in file order within each kind.
      {R"({"triggers": [{"name": "s1", "schedule": {"flow": "f", "cron": "1 * * * *"}},
                        {"name": "w1", "webhook": {"flow": "g", "secret": "k1"}},
                        {"name": "s2", "schedule": {"flow": "f", "cron": "2 * * * *"}},
                        {"name": "w2", "webhook": {"flow": "g", "secret": "k2"}}]})",
       [](ServeConfig& c) {
         c.webhooks = {Webhook("w1", "g", "k1"), Webhook("w2", "g", "k2")};
         c.schedules = {Schedule("s1", "f", "1 * * * *"), Schedule("s2", "f", "2 * * * *")};
       }},
      {"\xEF\xBB\xBF{\"db\": \"/x.db\"}", [](ServeConfig& c) { c.db = "/x.db"; }},  // a UTF-8 BOM
      {R"({"mcp": {"policy": "agents"}})", [](ServeConfig& c) { c.mcp = McpConfig{"agents", 8}; }},
      {R"({"mcp": {"policy": "Agenten für Bestellungen", "max_scripts": 1}})",
       [](ServeConfig& c) { c.mcp = McpConfig{"Agenten für Bestellungen", 1}; }},
  };
  for (const auto& c : cases) {
    ServeConfig expected;
    c.expect(expected);
    const ServeConfig parsed = MustParse(c.text);
    EXPECT_EQ(parsed, expected) << c.text << "\n got: " << ToJson(parsed).dump();
  }
}

TEST(ServeConfigTest, McpPolicyNamesUpTo128BytesAndUpTo256Scripts) {
  const std::string longest(128, 'p');
  const ServeConfig c = MustParse(R"({"mcp": {"max_scripts": 256, "policy": ")" + longest + R"("}})");
  EXPECT_EQ(c.mcp, (McpConfig{longest, 256}));
}

TEST(ServeConfigTest, TriggerNamesOfEveryAllowedCharacterAndLength) {
  const std::string longest(64, 'z');
  const ServeConfig c = MustParse(R"({"triggers": [{"name": "a-b_c-0123456789", "webhook": {"flow": "f", "secret": "s"}},
      {"name": ")" + longest + R"(", "webhook": {"flow": "f", "secret": "s"}}]})");
  ASSERT_EQ(c.webhooks.size(), 2u);
  EXPECT_EQ(c.webhooks[0].name, "a-b_c-0123456789");
  EXPECT_EQ(c.webhooks[1].name, longest);
}

// ---- bad configs ----

TEST(ServeConfigTest, BadConfigsAndTheirMessages) {
  const std::string duration_form = R"(use a number and a unit, e.g. "30s", "500ms", "5m", "1h")";
  const std::string hook = R"("webhook": {"flow": "f", "secret": "s")";
  const struct {
    std::string text;
    std::string message;
  } cases[] = {
      // The document.
      {"[]", R"(serve.json: the configuration: [] is not an object: write an object, e.g. {"listen": {"tcp": "127.0.0.1:8470"}})"},
      {"null", R"(serve.json: the configuration: null is not an object: write an object, e.g. {"listen": {"tcp": "127.0.0.1:8470"}})"},
      {R"({"db": "/a.db",})",
       "serve.json: not valid JSON (no comments, no trailing commas): parse error at line 1, column 16: syntax error "
       "while parsing object key - unexpected '}'; expected string literal"},
      {"{\"db\": \"/a.db\" // the journal\n}",
       "serve.json: not valid JSON (no comments, no trailing commas): parse error at line 1, column 16: syntax error "
       "while parsing object - invalid literal; last read: '\"/a.db\" /'; expected '}'"},
      {R"({"db": "/a.db", "db": "/b.db"})", "serve.json: db: duplicate key; each key may appear once"},
      {R"({"limits": {"max_workers": 2, "max_workers": 4}})",
       "serve.json: limits.max_workers: duplicate key; each key may appear once"},
      {R"({"triggers": [{"name": "a", "name": "b", "webhook": {}}]})",
       "serve.json: triggers[0].name: duplicate key; each key may appear once"},
      {R"({"triggers": [{"name": "a", "schedule": {"flow": "f", "cron": "* * * * *", "input": [1, {"x": 1, "x": 2}]}}]})",
       "serve.json: triggers[0].schedule.input[1].x: duplicate key; each key may appear once"},
      {R"({"triggers": [{"name": "a", "schedule": {"flow": "f", "cron": "* * * * *", "input": )" + std::string(70, '[') +
           std::string(70, ']') + "}}]}",
       // The 65th level: the document, triggers, [0], schedule, input, then 60 arrays.
       [] {
         std::string path = "serve.json: triggers[0].schedule.input";
         for (int i = 0; i < 60; ++i) path += "[0]";
         return path + ": nested deeper than 64 levels";
       }()},
      // Unknown keys, at every level.
      {R"({"database": "/a.db"})",
       "serve.json: database: unknown key; known keys: db, worker, secrets_dir, host_id, lease, queue_poll, listen, limits, triggers, mcp, console"},
      {R"({"listen": {"port": 8470}})",
       "serve.json: listen.port: unknown key; known keys: socket, allowed_groups, tcp, allow_non_loopback"},
      {R"({"limits": {"workers": 8}})",
       "serve.json: limits.workers: unknown key; known keys: max_workers, max_activations_per_worker, queue_max, "
       "max_body_bytes, wait_max, drain_timeout, max_connections, idempotency_ttl, header_timeout, body_timeout, "
       "max_connections_per_client, max_unsent_bytes, tail_subscribers, tail_buffer_bytes, "
       "max_parked_runs, max_parked_runs_per_flow, max_event_bytes, max_pending_events_per_run, event_retention"},
      {R"({"limits": {"max workers": 8}})",
       R"(serve.json: limits["max workers"]: unknown key; known keys: max_workers, max_activations_per_worker, )"
       "queue_max, max_body_bytes, wait_max, drain_timeout, max_connections, idempotency_ttl, header_timeout, "
       "body_timeout, max_connections_per_client, max_unsent_bytes, tail_subscribers, tail_buffer_bytes, "
       "max_parked_runs, max_parked_runs_per_flow, max_event_bytes, max_pending_events_per_run, event_retention"},
      {R"({"triggers": [{"name": "a", "cron": "* * * * *"}]})",
       "serve.json: triggers[0].cron: unknown key; known keys: name, webhook, schedule"},
      {R"({"triggers": [{"name": "a", )" + hook + R"(}}, {"name": "b", "schedule": {"flow": "f", "cron": "* * * * *"}},
                         {"name": "c", "schedule": {"flow": "f", "cron_expr": "0 3 * * *"}}]})",
       "serve.json: triggers[2].schedule.cron_expr: unknown key; known keys: flow, cron, timezone, input, overlap, "
       "catch_up"},
      {R"({"triggers": [{"name": "a", "webhook": {"flow": "f", "secret": "s", "hmac": "sha1"}}]})",
       "serve.json: triggers[0].webhook.hmac: unknown key; known keys: flow, secret, scheme, window, max_body_bytes, "
       "respond, wait, failure_status, allow_set_cookie, event"},
      // A webhook that delivers events (issue 26).
      {R"({"triggers": [{"name": "a", "webhook": {"flow": "f", "secret": "s", "event": {"name": "paid"}}}]})",
       R"(serve.json: triggers[0].webhook.event: needs "name" (the event waitForEvent names) and "key" (a JSON pointer )"
       R"(to the payload's value that picks the run, e.g. "/data/order_id"))"},
      {R"({"triggers": [{"name": "a", "webhook": {"flow": "f", "secret": "s", "event": {"name": "paid", "key": "order"}}}]})",
       R"(serve.json: triggers[0].webhook.event.key: "order" is not a JSON pointer (RFC 6901) to a value of the )"
       R"(payload: write e.g. "/data/order_id" ("~1" for a '/' in a name, "~0" for '~'))"},
      {R"({"triggers": [{"name": "a", "webhook": {"flow": "f", "secret": "s", "event": {"name": "paid", "key": "/a~2"}}}]})",
       R"(serve.json: triggers[0].webhook.event.key: "/a~2" is not a JSON pointer (RFC 6901) to a value of the )"
       R"(payload: write e.g. "/data/order_id" ("~1" for a '/' in a name, "~0" for '~'))"},
      {R"({"triggers": [{"name": "a", "webhook": {"flow": "f", "secret": "s", "event": {"name": "pa id", "key": "/a"}}}]})",
       R"(serve.json: triggers[0].webhook.event.name: "pa id" is not an event name: 1 to 128 letters, digits, '.', '_', )"
       R"('-' and ':')"},
      {R"({"triggers": [{"name": "a", "webhook": {"flow": "f", "secret": "s", "event": {"name": "p", "key": "/a", "x": 1}}}]})",
       "serve.json: triggers[0].webhook.event.x: unknown key; known keys: name, key"},
      {R"({"triggers": [{"name": "a", "webhook": {"flow": "f", "secret": "s", "respond": "wait",
                                                   "event": {"name": "p", "key": "/a"}}}]})",
       "serve.json: triggers[0].webhook.respond: a trigger that delivers events starts no run, so it has no result to "
       "wait for: remove respond (the sender gets 202 once the event is journaled)"},
      // Types.
      {R"({"listen": "/run/basal.sock"})",
       R"(serve.json: listen: "/run/basal.sock" is not an object: write {"socket": "/run/basal/basal.sock", "tcp": "127.0.0.1:8470"})"},
      {R"({"limits": []})", R"(serve.json: limits: [] is not an object: write {"max_workers": 8, "drain_timeout": "30s"})"},
      {R"({"triggers": {"name": "a"}})",
       R"(serve.json: triggers: {"name":"a"} is not an array: write a list of triggers, e.g. [{"name": "nightly", "schedule": {...}}])"},
      {R"({"triggers": ["nightly"]})",
       R"(serve.json: triggers[0]: "nightly" is not an object: write {"name": "github", "webhook": {...}} or {"name": "nightly", "schedule": {...}})"},
      {R"({"db": 5})",
       R"(serve.json: db: 5 is not a string: write "/var/lib/basal/journal.db" or "postgresql://basal@db.internal/basal")"},
      {R"({"db": "mysql://u:secret@h/db"})",
       R"(serve.json: db: store mysql://u:***@h/db: unknown scheme "mysql://"; give a file path (an SQLite journal) or a postgresql:// (or postgres://) locator)"},
      {R"({"listen": {"allow_non_loopback": "yes"}})",
       R"(serve.json: listen.allow_non_loopback: "yes" is not a boolean: write true or false)"},
      {R"({"listen": {"allowed_groups": "basal-ops"}})",
       R"(serve.json: listen.allowed_groups: "basal-ops" is not an array: write a list of group names, e.g. ["basal-ops"])"},
      {R"({"listen": {"allowed_groups": [1000]}})",
       R"(serve.json: listen.allowed_groups[0]: 1000 is not a string: write a group's name, e.g. "basal-ops")"},
      // Paths.
      {R"({"db": ""})", R"(serve.json: db: empty: leave the key out for the default, or write "/var/lib/basal/journal.db")"},
      {R"({"db": "journal.db"})",
       R"(serve.json: db: "journal.db" is not an absolute path: a daemon's working directory is not yours; write the full path, e.g. "/var/lib/basal/journal.db")"},
      {R"({"worker": "./ck-basal-worker"})",
       R"(serve.json: worker: "./ck-basal-worker" is not an absolute path: a daemon's working directory is not yours; write the full path, e.g. "/usr/libexec/basal/ck-basal-worker")"},
      {R"({"host_id": "web 1"})",
       R"(serve.json: host_id: "web 1" is not a host id: use 1 to 128 letters, digits, '.', '_' or '-', e.g. "web-1")"},
      {R"({"host_id": ""})",
       R"(serve.json: host_id: "" is not a host id: use 1 to 128 letters, digits, '.', '_' or '-', e.g. "web-1")"},
      {R"({"lease": "100ms"})", R"(serve.json: lease: "100ms" is out of range: use a duration from 300ms to 10m)"},
      {R"({"queue_poll": "10ms"})", R"(serve.json: queue_poll: "10ms" is out of range: use a duration from 100ms to 1m)"},
      {R"({"secrets_dir": "/a\nb"})",
       R"(serve.json: secrets_dir: "/a\nb" has a control character: write "/var/lib/basal/secrets")"},
      {R"({"listen": {"socket": "basal.sock"}})",
       R"(serve.json: listen.socket: "basal.sock" is not an absolute path: a daemon's working directory is not yours; write the full path, e.g. "/run/basal/basal.sock")"},
      {R"({"listen": {"socket": "/)" + std::string(107, 's') + R"("}})",
       R"(serve.json: listen.socket: "/)" + std::string(58, 's') + R"(... is 108 bytes; a Unix socket's path is at most 107: choose a shorter one)"},
      {R"({"listen": {"socket": "/run/basal/"}})",
       R"(serve.json: listen.socket: "/run/basal/" names a directory: write the socket's own path, e.g. "/run/basal/basal.sock")"},
      // Groups.
      {R"({"listen": {"allowed_groups": [""]}})",
       R"(serve.json: listen.allowed_groups[0]: "" is not a group name: it is empty)"},
      {R"({"listen": {"allowed_groups": ["ops", "wheel:x"]}})",
       R"(serve.json: listen.allowed_groups[1]: "wheel:x" is not a group name: it has ':', ',' or '/', which no group name has)"},
      {R"({"listen": {"allowed_groups": ["-ops"]}})",
       R"(serve.json: listen.allowed_groups[0]: "-ops" is not a group name: it starts with '-' or a space)"},
      {R"({"listen": {"allowed_groups": ["1000"]}})",
       R"(serve.json: listen.allowed_groups[0]: "1000" is not a group name: it is a number; write the group's name)"},
      {R"({"listen": {"allowed_groups": ["ops\t"]}})",
       R"(serve.json: listen.allowed_groups[0]: "ops\t" is not a group name: it has a control character)"},
      {R"({"listen": {"allowed_groups": ["ops", "dev", "ops"]}})",
       R"(serve.json: listen.allowed_groups[2]: "ops" is listed twice; list each group once)"},
      // TCP.
      {R"({"listen": {"tcp": "localhost:8470"}})",
       R"(serve.json: listen.tcp: "localhost:8470" is not a literal address and port: "localhost" is not an IPv4 address (host names are not resolved); write e.g. "127.0.0.1:8470" or "[::1]:8470")"},
      {R"({"listen": {"tcp": "127.0.0.1"}})",
       R"(serve.json: listen.tcp: "127.0.0.1" is not a literal address and port: no ":PORT" after the address; write e.g. "127.0.0.1:8470" or "[::1]:8470")"},
      {R"({"listen": {"tcp": "::1:8470"}})",
       R"(serve.json: listen.tcp: "::1:8470" is not a literal address and port: an IPv6 address goes in brackets; write e.g. "127.0.0.1:8470" or "[::1]:8470")"},
      {R"({"listen": {"tcp": "127.0.0.1:0"}})",
       R"(serve.json: listen.tcp: "127.0.0.1:0" is not a literal address and port: the port "0" is not from 1 to 65535; write e.g. "127.0.0.1:8470" or "[::1]:8470")"},
      {R"({"listen": {"tcp": 8470}})",
       R"(serve.json: listen.tcp: 8470 is not a string: write an address and port, e.g. "127.0.0.1:8470" or "[::1]:8470")"},
      {R"({"listen": {"tcp": "0.0.0.0:8470"}})",
       R"(serve.json: listen.tcp: "0.0.0.0:8470" is not a loopback address: other machines could reach the API; bind 127.0.0.1 or [::1], or set listen.allow_non_loopback to true if that is what you want)"},
      {R"({"listen": {"tcp": "[::]:8470", "allow_non_loopback": false}})",
       R"(serve.json: listen.tcp: "[::]:8470" is not a loopback address: other machines could reach the API; bind 127.0.0.1 or [::1], or set listen.allow_non_loopback to true if that is what you want)"},
      // Numbers.
      {R"({"limits": {"max_workers": 0}})",
       "serve.json: limits.max_workers: 0 is out of range: use an integer from 1 to 1024"},
      {R"({"limits": {"max_workers": 1025}})",
       "serve.json: limits.max_workers: 1025 is out of range: use an integer from 1 to 1024"},
      {R"({"limits": {"max_workers": -1}})",
       "serve.json: limits.max_workers: -1 is out of range: use an integer from 1 to 1024"},
      {R"({"limits": {"max_workers": 8.0}})",
       "serve.json: limits.max_workers: 8.0 is not an integer: use an integer from 1 to 1024"},
      {R"({"limits": {"max_workers": "8"}})",
       R"(serve.json: limits.max_workers: "8" is not an integer: use an integer from 1 to 1024)"},
      {R"({"limits": {"max_workers": 18446744073709551616}})",
       "serve.json: limits.max_workers: 1.8446744073709552e+19 is not an integer: use an integer from 1 to 1024"},
      {R"({"limits": {"max_activations_per_worker": 1000001}})",
       "serve.json: limits.max_activations_per_worker: 1000001 is out of range: use an integer from 1 to 1000000"},
      {R"({"limits": {"queue_max": 0}})",
       "serve.json: limits.queue_max: 0 is out of range: use an integer from 1 to 1000000"},
      {R"({"limits": {"max_body_bytes": 1023}})",
       "serve.json: limits.max_body_bytes: 1023 is out of range: use an integer from 1024 (1 KiB) to 67108864 (64 MiB)"},
      {R"({"limits": {"max_body_bytes": 67108865}})",
       "serve.json: limits.max_body_bytes: 67108865 is out of range: use an integer from 1024 (1 KiB) to 67108864 "
       "(64 MiB)"},
      {R"({"limits": {"max_connections": 65537}})",
       "serve.json: limits.max_connections: 65537 is out of range: use an integer from 1 to 65536"},
      {R"({"limits": {"max_unsent_bytes": 4194303}})",
       "serve.json: limits.max_unsent_bytes: 4194303 is out of range: use an integer from 4194304 (4 MiB) to "
       "4294967296 (4 GiB)"},
      {R"({"limits": {"max_parked_runs": 0}})",
       "serve.json: limits.max_parked_runs: 0 is out of range: use an integer from 1 to 100000000"},
      {R"({"limits": {"max_event_bytes": 16777217}})",
       "serve.json: limits.max_event_bytes: 16777217 is out of range: use an integer from 1 to 16777216 (16 MiB)"},
      {R"({"limits": {"max_pending_events_per_run": 100001}})",
       "serve.json: limits.max_pending_events_per_run: 100001 is out of range: use an integer from 1 to 100000"},
      {R"({"limits": {"max_connections_per_client": 0}})",
       "serve.json: limits.max_connections_per_client: 0 is out of range: use an integer from 1 to 65536"},
      // Durations.
      {R"({"limits": {"drain_timeout": "30x"}})", R"(serve.json: limits.drain_timeout: "30x" is not a duration: )" + duration_form},
      {R"({"limits": {"drain_timeout": 30}})",
       R"(serve.json: limits.drain_timeout: 30 is not a duration: write a string with a unit, e.g. "30s", "500ms", "5m", "1h")"},
      {R"({"limits": {"drain_timeout": "61m"}})",
       R"(serve.json: limits.drain_timeout: "61m" is out of range: use a duration from 0s to 1h)"},
      {R"({"limits": {"wait_max": "2h"}})", R"(serve.json: limits.wait_max: "2h" is out of range: use a duration from 0s to 1h)"},
      {R"({"limits": {"header_timeout": "0s"}})",
       R"(serve.json: limits.header_timeout: "0s" is out of range: use a duration from 1s to 10m)"},
      {R"({"limits": {"body_timeout": "2h"}})",
       R"(serve.json: limits.body_timeout: "2h" is out of range: use a duration from 1s to 1h)"},
      {R"({"limits": {"idempotency_ttl": "500ms"}})",
       R"(serve.json: limits.idempotency_ttl: "500ms" is out of range: use a duration from 1s to 30d)"},
      {R"({"limits": {"idempotency_ttl": "31d"}})",
       R"(serve.json: limits.idempotency_ttl: "31d" is out of range: use a duration from 1s to 30d)"},
      {R"({"limits": {"idempotency_ttl": "-1h"}})",
       R"(serve.json: limits.idempotency_ttl: "-1h" is negative: a duration is 0 or more, e.g. "0s", "30s")"},
      // Triggers.
      {R"({"triggers": [{"webhook": {"flow": "f", "secret": "s"}}]})",
       R"(serve.json: triggers[0].name: missing: every trigger has a name, e.g. "nightly")"},
      {R"({"triggers": [{"name": "Nightly", )" + hook + "}}]}",
       R"(serve.json: triggers[0].name: "Nightly" is not a trigger name: use 1 to 64 of a-z, 0-9, _ and -, e.g. "nightly")"},
      {R"({"triggers": [{"name": "", )" + hook + "}}]}",
       R"(serve.json: triggers[0].name: "" is not a trigger name: use 1 to 64 of a-z, 0-9, _ and -, e.g. "nightly")"},
      {R"({"triggers": [{"name": ")" + std::string(65, 'a') + R"(", )" + hook + "}}]}",
       R"(serve.json: triggers[0].name: ")" + std::string(59, 'a') +
           R"(... is not a trigger name: use 1 to 64 of a-z, 0-9, _ and -, e.g. "nightly")"},
      {R"({"triggers": [{"name": "a/b", )" + hook + "}}]}",
       R"(serve.json: triggers[0].name: "a/b" is not a trigger name: use 1 to 64 of a-z, 0-9, _ and -, e.g. "nightly")"},
      {R"({"triggers": [{"name": 7, )" + hook + "}}]}",
       R"(serve.json: triggers[0].name: 7 is not a string: write a name of a-z, 0-9, _ and -, e.g. "nightly")"},
      {R"({"triggers": [{"name": "a", )" + hook + R"(}}, {"name": "b", )" + hook + R"(}}, {"name": "a", )" + hook + "}}]}",
       R"(serve.json: triggers[2].name: "a" names an earlier trigger too; each trigger's name is unique)"},
      {R"({"triggers": [{"name": "a"}]})",
       R"(serve.json: triggers[0]: has neither "webhook" nor "schedule": add the one that starts its runs)"},
      {R"({"triggers": [{"name": "a", )" + hook + R"(}, "schedule": {"flow": "f", "cron": "* * * * *"}}]})",
       R"(serve.json: triggers[0]: has both "webhook" and "schedule": a trigger is one of them; make two triggers)"},
      {R"({"triggers": [{"name": "a", "webhook": "on_push"}]})",
       R"(serve.json: triggers[0].webhook: "on_push" is not an object: write {"flow": "on_push", "secret": "github_hook"})"},
      // Webhooks.
      {R"({"triggers": [{"name": "a", "webhook": {"secret": "s"}}]})",
       R"(serve.json: triggers[0].webhook.flow: missing: name the flow each delivery runs, e.g. "flow": "on_push")"},
      {R"({"triggers": [{"name": "a", "webhook": {"flow": "f"}}]})",
       "serve.json: triggers[0].webhook.secret: missing: name the secret deliveries are signed with (stored with "
       R"(`basal secret set NAME`), e.g. "secret": "github_hook")"},
      {R"({"triggers": [{"name": "a", "webhook": {"flow": "", "secret": "s"}}]})",
       R"(serve.json: triggers[0].webhook.flow: empty: name the flow to run, e.g. "on_push")"},
      {R"({"triggers": [{"name": "a", "webhook": {"flow": ")" + std::string(129, 'f') + R"(", "secret": "s"}}]})",
       R"(serve.json: triggers[0].webhook.flow: ")" + std::string(59, 'f') +
           R"(... is 129 bytes; a flow's name is at most 128)"},
      {R"({"triggers": [{"name": "a", "webhook": {"flow": "on\u001bpush", "secret": "s"}}]})",
       R"(serve.json: triggers[0].webhook.flow: "on\u001bpush" has a control character; a flow's name has none)"},
      {R"({"triggers": [{"name": "a", "webhook": {"flow": "f", "secret": "github-hook"}}]})",
       R"(serve.json: triggers[0].webhook.secret: secret name "github-hook" has '-' at byte 7; a secret's name is a letter or _, then letters, digits or _, at most 64 bytes)"},
      {R"({"triggers": [{"name": "a", "webhook": {"flow": "f", "secret": "9lives"}}]})",
       R"(serve.json: triggers[0].webhook.secret: secret name "9lives" starts with '9'; a secret's name is a letter or _, then letters, digits or _, at most 64 bytes)"},
      {R"({"triggers": [{"name": "a", "webhook": {"flow": "f", "secret": ""}}]})",
       R"(serve.json: triggers[0].webhook.secret: the secret's name is empty; a secret's name is a letter or _, then letters, digits or _, at most 64 bytes)"},
      {R"({"triggers": [{"name": "a", "webhook": {"flow": "f", "secret": "s", "respond": "sync"}}]})",
       R"(serve.json: triggers[0].webhook.respond: "sync" is not a way to respond: write "ack" (answer once the run is queued), "wait" (answer with its result) or "flow" (answer with the status, headers and body the flow returns))"},
      {R"({"triggers": [{"name": "a", "webhook": {"flow": "f", "secret": "s", "wait": "5s"}}]})",
       R"(serve.json: triggers[0].webhook.wait: applies only with "respond": "wait" or "flow"; remove it, or set respond)"},
      {R"({"triggers": [{"name": "a", "webhook": {"flow": "f", "secret": "s", "respond": "ack", "wait": "5s"}}]})",
       R"(serve.json: triggers[0].webhook.wait: applies only with "respond": "wait" or "flow"; remove it, or set respond)"},
      {R"({"triggers": [{"name": "a", "webhook": {"flow": "f", "secret": "s", "scheme": "gitlab"}}]})",
       R"(serve.json: triggers[0].webhook.scheme: "gitlab" is not a signing scheme: write "basal" (X-Basal-Signature, the default), "github", "stripe" or "slack" (the sender's own))"},
      {R"({"triggers": [{"name": "a", "webhook": {"flow": "f", "secret": "s", "scheme": "github", "window": "5m"}}]})",
       R"(serve.json: triggers[0].webhook.window: GitHub signs no time, so there is no window to check; remove it (scheme github))"},
      {R"({"triggers": [{"name": "a", "webhook": {"flow": "f", "secret": "s", "failure_status": 503}}]})",
       R"(serve.json: triggers[0].webhook.failure_status: applies only with "respond": "wait" or "flow" (an ack is sent before the run ends); remove it, or set respond)"},
      {R"({"triggers": [{"name": "a", "webhook": {"flow": "f", "secret": "s", "respond": "wait", "failure_status": 199}}]})",
       R"(serve.json: triggers[0].webhook.failure_status: 199 is out of range: use an integer from 200 to 599 (500 to 599 makes senders retry; 200 does not))"},
      {R"({"triggers": [{"name": "a", "webhook": {"flow": "f", "secret": "s", "respond": "wait", "allow_set_cookie": true}}]})",
       R"(serve.json: triggers[0].webhook.allow_set_cookie: applies only with "respond": "flow"; remove it, or set respond)"},
      {R"({"triggers": [{"name": "a", "webhook": {"flow": "f", "secret": "s", "respond": "wait", "wait": "0s"}}]})",
       R"(serve.json: triggers[0].webhook.wait: "0s" is out of range: use a duration from 1ms to 10m)"},
      {R"({"triggers": [{"name": "a", "webhook": {"flow": "f", "secret": "s", "window": "2d"}}]})",
       R"(serve.json: triggers[0].webhook.window: "2d" is out of range: use a duration from 1s to 24h)"},
      {R"({"triggers": [{"name": "a", "webhook": {"flow": "f", "secret": "s", "window": "1s500ms"}}]})",
       R"(serve.json: triggers[0].webhook.window: "1s500ms" is not whole seconds: the signature check counts seconds; write e.g. "5m" or "90s")"},
      {R"({"triggers": [{"name": "a", "webhook": {"flow": "f", "secret": "s", "max_body_bytes": 100}}]})",
       "serve.json: triggers[0].webhook.max_body_bytes: 100 is out of range: use an integer from 1024 (1 KiB) to "
       "67108864 (64 MiB)"},
      // Schedules.
      {R"({"triggers": [{"name": "a", "schedule": {"cron": "* * * * *"}}]})",
       R"(serve.json: triggers[0].schedule.flow: missing: name the flow each fire runs, e.g. "flow": "report")"},
      {R"({"triggers": [{"name": "a", "schedule": {"flow": "f"}}]})",
       R"(serve.json: triggers[0].schedule.cron: missing: write when it fires, five fields, e.g. "cron": "0 3 * * *")"},
      {R"({"triggers": [{"name": "a", "schedule": {"flow": "f", "cron": ""}}]})",
       R"(serve.json: triggers[0].schedule.cron: "" is not a cron expression: write five fields, e.g. "0 3 * * *")"},
      {R"({"triggers": [{"name": "a", "schedule": {"flow": "f", "cron": "0 3 * * *\n"}}]})",
       R"(serve.json: triggers[0].schedule.cron: "0 3 * * *\n" is not a cron expression: write five fields, e.g. "0 3 * * *")"},
      {R"({"triggers": [{"name": "a", "schedule": {"flow": "f", "cron": ["0", "3"]}}]})",
       R"(serve.json: triggers[0].schedule.cron: ["0","3"] is not a string: write five fields, e.g. "0 3 * * *")"},
      {R"({"triggers": [{"name": "a", "schedule": {"flow": "f", "cron": "* * * * *", "timezone": "../../etc/passwd"}}]})",
       R"(serve.json: triggers[0].schedule.timezone: "../../etc/passwd" is not a time zone name: write an IANA name, e.g. "UTC", "Europe/Berlin")"},
      {R"({"triggers": [{"name": "a", "schedule": {"flow": "f", "cron": "* * * * *", "timezone": "/usr/share/zoneinfo/UTC"}}]})",
       R"(serve.json: triggers[0].schedule.timezone: "/usr/share/zoneinfo/UTC" is not a time zone name: write an IANA name, e.g. "UTC", "Europe/Berlin")"},
      {R"({"triggers": [{"name": "a", "schedule": {"flow": "f", "cron": "* * * * *", "timezone": ""}}]})",
       R"(serve.json: triggers[0].schedule.timezone: "" is not a time zone name: write an IANA name, e.g. "UTC", "Europe/Berlin")"},
      {R"({"triggers": [{"name": "a", "schedule": {"flow": "f", "cron": "* * * * *", "overlap": "queue"}}]})",
       R"(serve.json: triggers[0].schedule.overlap: "queue" is not an overlap rule: write "skip" (a fire while the last run is still going is dropped) or "buffer_one" (one such fire waits for it))"},
      {R"({"triggers": [{"name": "a", "schedule": {"flow": "f", "cron": "* * * * *", "catch_up": "8d"}}]})",
       R"(serve.json: triggers[0].schedule.catch_up: "8d" is out of range: use a duration from 0s to 7d)"},
      // mcp.
      {R"({"mcp": "agents"})", R"(serve.json: mcp: "agents" is not an object: write {"policy": "agents"})"},
      {R"({"mcp": {}})",
       "serve.json: mcp.policy: missing: name the codemode policy the agents' scripts run under (approved with "
       R"(`basal policy approve NAME`), e.g. "policy": "agents")"},
      {R"({"mcp": {"max_scripts": 4}})",
       "serve.json: mcp.policy: missing: name the codemode policy the agents' scripts run under (approved with "
       R"(`basal policy approve NAME`), e.g. "policy": "agents")"},
      {R"({"mcp": {"policy": "agents", "servers": {}}})",
       "serve.json: mcp.servers: unknown key; known keys: policy, max_scripts"},
      {R"({"mcp": {"policy": ""}})", R"(serve.json: mcp.policy: empty: name the codemode policy, e.g. "agents")"},
      {R"({"mcp": {"policy": 7}})", R"(serve.json: mcp.policy: 7 is not a string: write the codemode policy's name, e.g. "agents")"},
      {R"({"mcp": {"policy": ")" + std::string(129, 'p') + R"("}})",
       R"(serve.json: mcp.policy: ")" + std::string(59, 'p') + R"(... is 129 bytes; a policy's name is at most 128)"},
      {R"({"mcp": {"policy": "a\tb"}})", R"(serve.json: mcp.policy: "a\tb" has a control character; a policy's name has none)"},
      {R"({"mcp": {"policy": "agents", "max_scripts": 0}})",
       "serve.json: mcp.max_scripts: 0 is out of range: use an integer from 1 to 256"},
      {R"({"mcp": {"policy": "agents", "max_scripts": 257}})",
       "serve.json: mcp.max_scripts: 257 is out of range: use an integer from 1 to 256"},
      {R"({"mcp": {"policy": "agents", "max_scripts": "8"}})",
       R"(serve.json: mcp.max_scripts: "8" is not an integer: use an integer from 1 to 256)"},
      {R"({"mcp": {"policy": "a", "policy": "b"}})", "serve.json: mcp.policy: duplicate key; each key may appear once"},
      // The console.
      {R"({"console": true})", R"(serve.json: console: true is not an object: write {"enabled": true, "session_idle": "1h"})"},
      {R"({"console": {"enabled": "yes"}})", R"(serve.json: console.enabled: "yes" is not a boolean: write true or false)"},
      {R"({"console": {"sessions": 5}})",
       "serve.json: console.sessions: unknown key; known keys: enabled, max_sessions, session_idle, session_max_age, "
       "max_streams_per_session, secure_cookie"},
      {R"({"console": {"max_sessions": 0}})", "serve.json: console.max_sessions: 0 is out of range: use an integer from 1 to 4096"},
      {R"({"console": {"max_sessions": 4097}})", "serve.json: console.max_sessions: 4097 is out of range: use an integer from 1 to 4096"},
      {R"({"console": {"max_streams_per_session": 65}})",
       "serve.json: console.max_streams_per_session: 65 is out of range: use an integer from 1 to 64"},
      {R"({"console": {"session_idle": "30s"}})", R"(serve.json: console.session_idle: "30s" is out of range: use a duration from 1m to 24h)"},
      {R"({"console": {"session_max_age": "31d"}})", R"(serve.json: console.session_max_age: "31d" is out of range: use a duration from 1m to 30d)"},
  };
  for (const auto& c : cases) EXPECT_EQ(ErrorOf(c.text), c.message) << c.text;
}

TEST(ServeConfigTest, OriginPrefixesMessagesOnlyWhenGiven) {
  auto named = ParseServeConfig(R"({"limits": {"max_workers": 0}})", "/etc/basal/serve.json");
  ASSERT_FALSE(named.ok());
  EXPECT_EQ(named.error().message,
            "/etc/basal/serve.json: limits.max_workers: 0 is out of range: use an integer from 1 to 1024");
  auto anonymous = ParseServeConfig(R"({"limits": {"max_workers": 0}})", "");
  ASSERT_FALSE(anonymous.ok());
  EXPECT_EQ(anonymous.error().message, "limits.max_workers: 0 is out of range: use an integer from 1 to 1024");
}

// ---- listen: the default socket, tcp, loopback ----

TEST(ResolveSocketPathTest, DefaultsInOrder) {
  const struct {
    std::string socket, runtime_directory, xdg_runtime_dir;
    uid_t euid;
    std::string expected;  // "" : an error
  } cases[] = {
      // Given in the config: used whatever the environment.
      {"/srv/b.sock", "/run/basal", "/run/user/1000", 1000, "/srv/b.sock"},
      {"/srv/b.sock", "", "", 1000, "/srv/b.sock"},
      // systemd's RuntimeDirectory= first, as root or not.
      {"", "/run/basal", "/run/user/1000", 1000, "/run/basal/basal.sock"},
      {"", "/run/basal", "", 0, "/run/basal/basal.sock"},
      {"", "/run/basal/", "", 0, "/run/basal/basal.sock"},
      {"", "/run/basal:/run/basal-extra", "", 0, "/run/basal/basal.sock"},
      // Then the session's runtime directory.
      {"", "", "/run/user/1000", 1000, "/run/user/1000/basal/basal.sock"},
      {"", "", "/run/user/0", 0, "/run/user/0/basal/basal.sock"},
      {"", "", "/", 1000, "/basal/basal.sock"},
      // Relative values are ignored, as both specifications say.
      {"", "basal", "/run/user/1000", 1000, "/run/user/1000/basal/basal.sock"},
      {"", "", "run/user/1000", 0, "/run/basal/basal.sock"},
      // Then root's fixed place; else an error.
      {"", "", "", 0, "/run/basal/basal.sock"},
      {"", "", "", 1000, ""},
      {"", "relative", "also/relative", 1000, ""},
      // Too long for sun_path.
      {"", "/" + std::string(95, 'r'), "", 0, "/" + std::string(95, 'r') + "/basal.sock"},  // 107 bytes
      {"", "/" + std::string(96, 'r'), "", 0, ""},
  };
  for (const auto& c : cases) {
    ListenConfig listen;
    listen.socket = c.socket;
    auto path = ResolveSocketPath(listen, SocketEnv{c.runtime_directory, c.xdg_runtime_dir, c.euid});
    const std::string what = "socket=" + c.socket + " RUNTIME_DIRECTORY=" + c.runtime_directory +
                             " XDG_RUNTIME_DIR=" + c.xdg_runtime_dir + " euid=" + std::to_string(c.euid);
    if (c.expected.empty()) {
      ASSERT_FALSE(path.ok()) << what << " -> " << *path;
      EXPECT_EQ(path.error().code, ErrorCode::kInvalidArgument);
      EXPECT_EQ(path.error().message.rfind("listen.socket: not set, and ", 0), 0u) << path.error().message;
    } else {
      ASSERT_TRUE(path.ok()) << what << ": " << path.error().message;
      EXPECT_EQ(*path, c.expected) << what;
    }
  }
}

TEST(ResolveSocketPathTest, ErrorsSayWhatToSet) {
  auto none = ResolveSocketPath(ListenConfig{}, SocketEnv{"", "", 1000});
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().message,
            "listen.socket: not set, and there is no default for uid 1000 (neither RUNTIME_DIRECTORY nor "
            "XDG_RUNTIME_DIR is set to an absolute path): set listen.socket to the socket's path, e.g. "
            "\"/var/lib/basal/basal.sock\"");
  auto long_one = ResolveSocketPath(ListenConfig{}, SocketEnv{"", "/" + std::string(100, 'x'), 1000});
  ASSERT_FALSE(long_one.ok());
  EXPECT_NE(long_one.error().message.find("is 118 bytes; a Unix socket's path is at most 107: set listen.socket to "
                                          "a shorter path"),
            std::string::npos)
      << long_one.error().message;
}

TEST(ResolveSocketPathTest, ProcessEnvironmentIsRead) {
  const char* old_runtime = std::getenv("RUNTIME_DIRECTORY");
  const std::string saved = old_runtime ? old_runtime : "";
  ASSERT_EQ(::setenv("RUNTIME_DIRECTORY", "/run/basal-test", 1), 0);
  const SocketEnv env = SocketEnvFromProcess();
  if (old_runtime) {
    ::setenv("RUNTIME_DIRECTORY", saved.c_str(), 1);
  } else {
    ::unsetenv("RUNTIME_DIRECTORY");
  }
  EXPECT_EQ(env.runtime_directory, "/run/basal-test");
  EXPECT_EQ(env.euid, ::geteuid());
}

TEST(TcpListenTest, ParsedAddressesAndPorts) {
  const struct {
    const char* text;
    const char* address;
    uint16_t port;
    bool ipv6;
  } good[] = {
      {"127.0.0.1:8470", "127.0.0.1", 8470, false},
      {"0.0.0.0:1", "0.0.0.0", 1, false},
      {"[::1]:65535", "::1", 65535, true},
      {"[2001:db8::1]:80", "2001:db8::1", 80, true},
      {"[::ffff:127.0.0.1]:8470", "::ffff:127.0.0.1", 8470, true},
      {"10.0.0.1:08470", "10.0.0.1", 8470, false},
  };
  for (const auto& c : good) {
    auto tcp = ParseTcpListen(c.text);
    ASSERT_TRUE(tcp.ok()) << c.text << ": " << tcp.error().message;
    EXPECT_EQ(tcp->address, c.address) << c.text;
    EXPECT_EQ(tcp->port, c.port) << c.text;
    EXPECT_EQ(tcp->ipv6, c.ipv6) << c.text;
  }
  const struct {
    const char* text;
    const char* why;
  } bad[] = {
      {"", "no \":PORT\" after the address"},
      {"8470", "no \":PORT\" after the address"},
      {":8470", "\"\" is not an IPv4 address (host names are not resolved)"},
      {"localhost:8470", "\"localhost\" is not an IPv4 address (host names are not resolved)"},
      {"127.1:8470", "\"127.1\" is not an IPv4 address (host names are not resolved)"},
      {"127.0.0.256:8470", "\"127.0.0.256\" is not an IPv4 address (host names are not resolved)"},
      {" 127.0.0.1:8470", "\" 127.0.0.1\" is not an IPv4 address (host names are not resolved)"},
      {"::1:8470", "an IPv6 address goes in brackets"},
      {"[::1]8470", "no \":PORT\" after the address"},
      {"[::1]", "no \":PORT\" after the address"},
      {"[::1:8470", "'[' without ']'"},
      {"[127.0.0.1]:8470", "\"127.0.0.1\" is not an IPv6 address"},
      {"[fe80::1%eth0]:8470", "\"fe80::1%eth0\" is not an IPv6 address"},
      {"127.0.0.1:", "the port \"\" is not from 1 to 65535"},
      {"127.0.0.1:0", "the port \"0\" is not from 1 to 65535"},
      {"127.0.0.1:65536", "the port \"65536\" is not from 1 to 65535"},
      {"127.0.0.1:123456", "the port \"123456\" is not from 1 to 65535"},
      {"127.0.0.1:+80", "the port \"+80\" is not from 1 to 65535"},
      {"127.0.0.1:http", "the port \"http\" is not from 1 to 65535"},
      {"[::1]:-1", "the port \"-1\" is not from 1 to 65535"},
  };
  for (const auto& c : bad) {
    auto tcp = ParseTcpListen(c.text);
    ASSERT_FALSE(tcp.ok()) << c.text;
    EXPECT_EQ(tcp.error().message, nlohmann::json(c.text).dump() + " is not a literal address and port: " + c.why +
                                       "; write e.g. \"127.0.0.1:8470\" or \"[::1]:8470\"")
        << c.text;
  }
}

TEST(TcpListenTest, LoopbackIsIpv4Net127AndIpv6One) {
  const struct {
    const char* tcp;
    bool loopback;
  } cases[] = {
      {"", true},  // no tcp listener: nothing non-loopback is bound
      {"127.0.0.1:8470", true},
      {"127.255.255.254:8470", true},
      {"[::1]:8470", true},
      {"[::ffff:127.0.0.1]:8470", true},   // the IPv4 loopback, mapped
      {"[::ffff:127.9.8.7]:8470", true},
      {"0.0.0.0:8470", false},
      {"128.0.0.1:8470", false},
      {"126.255.255.255:8470", false},
      {"10.0.0.1:8470", false},
      {"[::]:8470", false},
      {"[::2]:8470", false},
      {"[::127.0.0.1]:8470", false},       // IPv4-compatible (deprecated), not the loopback
      {"[::ffff:10.0.0.1]:8470", false},
      {"[fe80::1]:8470", false},
      {"localhost:8470", false},           // does not parse
  };
  for (const auto& c : cases) {
    ListenConfig listen;
    listen.tcp = c.tcp;
    EXPECT_EQ(IsLoopbackListen(listen), c.loopback) << c.tcp;
  }
}

// ---- ToJson ----

constexpr const char* kFullExample = R"({
  "db": "/var/lib/basal/journal.db",
  "worker": "/usr/libexec/basal/ck-basal-worker",
  "secrets_dir": "/etc/basal/secrets",
  "host_id": "web-1",
  "lease": "10s",
  "queue_poll": "2s",
  "listen": {"socket": "/run/basal/basal.sock", "allowed_groups": ["basal-ops"], "tcp": "127.0.0.1:8470"},
  "limits": {"max_workers": 8, "queue_max": 1000, "max_body_bytes": 1048576, "wait_max": "60s",
             "drain_timeout": "30s", "max_connections": 256, "idempotency_ttl": "24h"},
  "triggers": [
    {"name": "github", "webhook": {"flow": "on_push", "secret": "github_hook", "window": "5m",
                                   "max_body_bytes": 262144, "respond": "wait", "wait": "1m30s"}},
    {"name": "nightly", "schedule": {"flow": "report", "cron": "0 3 * * *", "timezone": "Europe/Berlin",
                                     "overlap": "buffer_one", "catch_up": "1h", "input": {"full": true}}}
  ],
  "mcp": {"policy": "agents", "max_scripts": 4}
})";

TEST(ToJsonTest, ReadsBackAsTheSameConfig) {
  for (const char* text : {kFullExample, "{}", R"({"mcp": {"policy": "agents"}})", R"({"console": {"enabled": false, "session_idle": "5m"}})",
                           R"({"triggers": [{"name": "w", "webhook": {"flow": "f", "secret": "s"}}]})"}) {
    const ServeConfig config = MustParse(text);
    const nlohmann::json json = ToJson(config);
    EXPECT_EQ(MustParse(json.dump()), config) << json.dump(2);
  }
}

TEST(ToJsonTest, TheEffectiveConfigInTheFilesShape) {
  const nlohmann::json json = ToJson(MustParse(kFullExample));
  EXPECT_EQ(json, nlohmann::json::parse(R"({
    "db": "/var/lib/basal/journal.db",
    "worker": "/usr/libexec/basal/ck-basal-worker",
    "secrets_dir": "/etc/basal/secrets",
    "host_id": "web-1",
    "lease": "10s",
    "queue_poll": "2s",
    "listen": {"socket": "/run/basal/basal.sock", "allowed_groups": ["basal-ops"], "tcp": "127.0.0.1:8470",
               "allow_non_loopback": false},
    "limits": {"max_workers": 8, "max_activations_per_worker": 256, "queue_max": 1000, "max_body_bytes": 1048576,
               "wait_max": "1m", "drain_timeout": "30s", "max_connections": 256, "idempotency_ttl": "1d",
               "header_timeout": "10s", "body_timeout": "1m", "max_connections_per_client": 32,
               "max_unsent_bytes": 67108864, "tail_subscribers": 32, "tail_buffer_bytes": 1048576,
               "max_parked_runs": 100000, "max_parked_runs_per_flow": 10000, "max_event_bytes": 65536,
               "max_pending_events_per_run": 100, "event_retention": "7d"},
    "triggers": [
      {"name": "github", "webhook": {"flow": "on_push", "secret": "github_hook", "window": "5m",
                                     "max_body_bytes": 262144, "respond": "wait", "wait": "1m30s", "scheme": "basal",
                                     "failure_status": 500}},
      {"name": "nightly", "schedule": {"flow": "report", "cron": "0 3 * * *", "timezone": "Europe/Berlin",
                                       "overlap": "buffer_one", "catch_up": "1h", "input": {"full": true}}}
    ],
    "mcp": {"policy": "agents", "max_scripts": 4},
    "console": {"enabled": true, "max_sessions": 64, "session_idle": "1h", "session_max_age": "12h",
                "max_streams_per_session": 4, "secure_cookie": false}})"))
      << json.dump(2);
  // Defaults: empty strings left out, everything else stated.
  EXPECT_EQ(ToJson(ServeConfig{}), nlohmann::json::parse(R"({
    "lease": "15s",
    "queue_poll": "1s",
    "listen": {"allowed_groups": [], "allow_non_loopback": false},
    "limits": {"max_workers": 8, "max_activations_per_worker": 256, "queue_max": 1000, "max_body_bytes": 1048576,
               "wait_max": "1m", "drain_timeout": "30s", "max_connections": 256, "idempotency_ttl": "1d",
               "header_timeout": "10s", "body_timeout": "1m", "max_connections_per_client": 32,
               "max_unsent_bytes": 67108864, "tail_subscribers": 32, "tail_buffer_bytes": 1048576,
               "max_parked_runs": 100000, "max_parked_runs_per_flow": 10000, "max_event_bytes": 65536,
               "max_pending_events_per_run": 100, "event_retention": "7d"},
    "triggers": [],
    "console": {"enabled": true, "max_sessions": 64, "session_idle": "1h", "session_max_age": "12h",
                "max_streams_per_session": 4, "secure_cookie": false}})"));
}

// Every cut and every one-byte deletion of the full example either parses or fails with a message
// that names the file (none crashes, throws or is left without its origin).
TEST(ServeConfigTest, DamagedTextFailsWithAMessage) {
  const std::string full = kFullExample;
  std::vector<std::string> damaged;
  for (size_t n = 0; n < full.size(); ++n) {
    damaged.push_back(full.substr(0, n));
    damaged.push_back(full.substr(0, n) + full.substr(n + 1));
  }
  size_t failed = 0;
  for (const std::string& text : damaged) {
    auto config = ParseServeConfig(text, "serve.json");
    if (config) continue;
    ++failed;
    EXPECT_EQ(config.error().code, ErrorCode::kInvalidArgument) << text;
    EXPECT_EQ(config.error().message.rfind("serve.json: ", 0), 0u) << config.error().message;
  }
  EXPECT_GT(failed, full.size()) << "most damaged texts fail";
}

// ---- LoadServeConfig ----

class LoadServeConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string t = (fs::temp_directory_path() / "basal-serve-config-XXXXXX").string();
    ASSERT_NE(::mkdtemp(t.data()), nullptr);
    dir_ = t;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  std::string dir_;
};

TEST_F(LoadServeConfigTest, ReadsAndParsesAFile) {
  const std::string path = Write("serve.json", kFullExample);
  auto config = LoadServeConfig(path);
  ASSERT_TRUE(config.ok()) << config.error().message;
  EXPECT_EQ(*config, MustParse(kFullExample));
  auto empty = LoadServeConfig(Write("empty.json", ""));
  ASSERT_TRUE(empty.ok()) << empty.error().message;
  EXPECT_EQ(*empty, ServeConfig{});
}

TEST_F(LoadServeConfigTest, MessagesNameTheFile) {
  const std::string path = Write("serve.json", R"({"limits": {"drain_timeout": "30x"}})");
  auto config = LoadServeConfig(path);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(config.error().message, path + R"(: limits.drain_timeout: "30x" is not a duration: use a number and a )"
                                           R"(unit, e.g. "30s", "500ms", "5m", "1h")");
}

TEST_F(LoadServeConfigTest, RefusesMissingOddAndLargeFiles) {
  auto missing = LoadServeConfig(dir_ + "/nope.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(missing.error().message,
            "the configuration file " + dir_ + "/nope.json does not exist: check the path given to --config");

  auto directory = LoadServeConfig(dir_);
  ASSERT_FALSE(directory.ok());
  EXPECT_EQ(directory.error().message, dir_ + " is not a regular file: --config takes a JSON file");

  // A FIFO is refused at once (it would block a plain open until a writer came).
  const std::string fifo = dir_ + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto from_fifo = LoadServeConfig(fifo);
  ASSERT_FALSE(from_fifo.ok());
  EXPECT_EQ(from_fifo.error().message, fifo + " is not a regular file: --config takes a JSON file");

  // 1 MiB is read (white space is a valid config); one byte more is refused.
  auto largest = LoadServeConfig(Write("largest.json", "{}" + std::string(kMaxServeConfigBytes - 2, ' ')));
  EXPECT_TRUE(largest.ok()) << largest.error().message;
  const std::string big = Write("big.json", "{}" + std::string(kMaxServeConfigBytes - 1, ' '));
  auto too_big = LoadServeConfig(big);
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(too_big.error().message, big + ": 1048577 bytes; a configuration file is at most 1048576 bytes (1 MiB)");

  if (::geteuid() != 0) {  // root reads any file
    const std::string unreadable = Write("unreadable.json", "{}");
    ASSERT_EQ(::chmod(unreadable.c_str(), 0), 0);
    auto denied = LoadServeConfig(unreadable);
    ASSERT_FALSE(denied.ok());
    EXPECT_EQ(denied.error().code, ErrorCode::kIo);
    EXPECT_EQ(denied.error().message, "cannot open the configuration file " + unreadable + ": Permission denied");
  }
}

// ---- the docs page ----

// Every ```json block of docs/serve-config.md is a complete configuration that parses (the page's
// messages are in ```text blocks).
TEST(ServeConfigDocsTest, EveryExampleOnThePageParses) {
  std::ifstream page(std::string(BASAL_SOURCE_DIR) + "/docs/serve-config.md");
  ASSERT_TRUE(page.good()) << "docs/serve-config.md is missing";
  std::string line, block;
  bool in_json = false;
  int blocks = 0;
  int line_number = 0;
  int block_line = 0;
  while (std::getline(page, line)) {
    ++line_number;
    if (!in_json && line == "```json") {
      in_json = true;
      block.clear();
      block_line = line_number;
    } else if (in_json && line == "```") {
      in_json = false;
      ++blocks;
      auto config = ParseServeConfig(block, "docs/serve-config.md:" + std::to_string(block_line));
      EXPECT_TRUE(config.ok()) << block << "\n -> " << (config ? "" : config.error().message);
    } else if (in_json) {
      block += line + "\n";
    }
  }
  EXPECT_GE(blocks, 2) << "the page shows a complete example and a minimal one";
}

}  // namespace
TEST(JsonPointerTest, TokensAndLookups) {
  EXPECT_EQ(ParseJsonPointer(""), std::vector<std::string>{});
  EXPECT_EQ(ParseJsonPointer("/a~1b/~0c/0"), (std::vector<std::string>{"a/b", "~c", "0"}));
  EXPECT_EQ(ParseJsonPointer("/"), std::vector<std::string>{""});
  EXPECT_FALSE(ParseJsonPointer("a").has_value());
  EXPECT_FALSE(ParseJsonPointer("/a~").has_value());
  EXPECT_FALSE(ParseJsonPointer("/a~2").has_value());
  const auto doc = nlohmann::json::parse(R"({"order": {"id": "A-1", "lines": [{"sku": 7}]}, "a/b": 1, "": 2})");
  const auto at = [&](const char* p) { return FindByPointer(doc, *ParseJsonPointer(p)); };
  ASSERT_NE(at("/order/id"), nullptr);
  EXPECT_EQ(*at("/order/id"), "A-1");
  EXPECT_EQ(*at("/order/lines/0/sku"), 7);
  EXPECT_EQ(*at("/a~1b"), 1);
  EXPECT_EQ(*at("/"), 2);
  EXPECT_EQ(at("/order/lines/1"), nullptr);
  EXPECT_EQ(at("/order/lines/01"), nullptr);
  EXPECT_EQ(at("/order/lines/-"), nullptr);
  EXPECT_EQ(at("/order/id/x"), nullptr);
  EXPECT_EQ(at("/missing"), nullptr);
}

}  // namespace basal::serve
