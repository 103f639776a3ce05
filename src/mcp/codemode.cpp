// Codemode over MCP (codemode.h, docs/codemode.md): run_script, list_tools, describe_tools, and the
// `mcp.*` host calls that reach the policy's downstream servers.
#include "mcp/codemode.h"

#include <cstdlib>
#include <utility>

#include "parent/host_calls/mcp.h"
#include "parent/module_host.h"
#include "protocol/messages.h"
#include "parent/secrets/secret_store.h"
#include "parent/store/store.h"

namespace basal::mcp {
namespace {

constexpr size_t kMaxHostCallNameBytes = 128;  // the protocol's bound on a call's name
constexpr size_t kMaxToolErrorBytes = 4096;    // a downstream tool's isError text, as the script's error

std::string CodemodeDump(const Json& value) { return value.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string_view TrimLeft(std::string_view line) {
  while (!line.empty() && (line.front() == ' ' || line.front() == '\t' || line.front() == '\r')) line.remove_prefix(1);
  return line;
}

// Descriptions and argument schemas of basal's own host calls, for describe_tools (an embedder's
// own come from HostCallSpec::description and input_schema).
Json Obj(std::initializer_list<std::pair<const std::string, Json>> properties, std::vector<std::string> required) {
  Json props = Json::object();
  for (const auto& [k, v] : properties) props[k] = v;
  return Json{{"type", "object"}, {"properties", props}, {"required", required}, {"additionalProperties", false}};
}

struct Builtin {
  const char* name;
  const char* description;
  Json input;
  Json result;
};

const std::vector<Builtin>& Builtins() {
  static const std::vector<Builtin> kBuiltins = [] {
    const Json ns = {{"type", "string"}, {"description", "A namespace the policy grants"}};
    const Json key = {{"type", "string"}, {"description", "1 to 1024 bytes"}};
    const Json any = Json::object();
    std::vector<Builtin> out;
    out.push_back({"kv.get", "Read the JSON value of a key; null when absent.", Obj({{"namespace", ns}, {"key", key}}, {"namespace", "key"}), any});
    out.push_back({"kv.put", "Store a JSON value under a key.", Obj({{"namespace", ns}, {"key", key}, {"value", any}}, {"namespace", "key", "value"}), Json{{"type", "null"}}});
    out.push_back({"kv.delete", "Delete a key; answers whether it existed.", Obj({{"namespace", ns}, {"key", key}}, {"namespace", "key"}), Json{{"type", "boolean"}}});
    out.push_back({"kv.list", "List keys and values in key byte order.",
                   Obj({{"namespace", ns}, {"prefix", {{"type", "string"}}}, {"limit", {{"type", "integer"}, {"minimum", 1}, {"maximum", 1000}}}}, {"namespace"}),
                   Json{{"type", "array"}, {"items", Obj({{"key", {{"type", "string"}}}, {"value", any}}, {"key", "value"})}}});
    out.push_back({"kv.cas", "Store value only if the key holds expected (null: absent); answers {swapped, current}.",
                   Obj({{"namespace", ns}, {"key", key}, {"expected", any}, {"value", any}}, {"namespace", "key", "expected", "value"}),
                   Obj({{"swapped", {{"type", "boolean"}}}, {"current", any}}, {"swapped", "current"})});
    out.push_back({"kv.incr", "Add `by` (default 1) to the integer a key holds (absent: 0); answers the sum.",
                   Obj({{"namespace", ns}, {"key", key}, {"by", {{"type", "integer"}}}}, {"namespace", "key"}), Json{{"type", "integer"}}});
    out.push_back({"http.fetch", "An HTTP request the policy's rules allow (prefer the fetch() global, which calls this).",
                   Obj({{"url", {{"type", "string"}}}, {"method", {{"type", "string"}}}, {"headers", {{"type", "object"}, {"additionalProperties", {{"type", "string"}}}}},
                        {"body", {{"type", "string"}}}}, {"url"}),
                   any});
    return out;
  }();
  return kBuiltins;
}

const Builtin* FindBuiltin(std::string_view name) {
  for (const Builtin& b : Builtins()) {
    if (name == b.name) return &b;
  }
  return nullptr;
}

// What a downstream tool's result is to the script: its structured content when it has one, else
// its text (the text items joined), else the content array as sent.
Json ValueOfToolResult(const Json& result) {
  if (auto structured = result.find("structuredContent"); structured != result.end() && !structured->is_null())
    return *structured;
  const Json content = result.value("content", Json::array());
  if (!content.is_array()) return content;
  std::string text;
  for (const Json& item : content) {
    if (!item.is_object() || item.value("type", "") != "text" || !item.contains("text") || !item["text"].is_string())
      return content;
    if (!text.empty()) text += "\n";
    text += item["text"].get<std::string>();
  }
  return text;
}

std::string TextOfToolResult(const Json& result) {
  const Json value = ValueOfToolResult(result);
  return value.is_string() ? value.get<std::string>() : CodemodeDump(value);
}

Json TextContent(std::string text) { return Json::array({Json{{"type", "text"}, {"text", std::move(text)}}}); }

Json ToolError(std::string status, std::string message) {
  Json structured = {{"status", status}, {"result", nullptr}, {"logs", Json::array()}, {"run_id", 0},
                     {"calls", Json::array()}, {"error", Json{{"name", status}, {"message", message}}}};
  return Json{{"content", TextContent(status + ": " + message)}, {"structuredContent", std::move(structured)}, {"isError", true}};
}

}  // namespace

// ---- pure parts -----------------------------------------------------------------------------

std::string WrapScript(std::string_view code) {
  // On the first line, so that the engine's line numbers are the agent's.
  std::string out = "export default async function (input, host, tools) {";
  out.append(code);
  out += "\n}\n";
  return out;
}

namespace {

// `code` with every comment and string literal blanked to spaces (newlines kept, so lines and
// columns hold): what is left is what the engine parses as code. Template literals' ${...} parts
// are blanked too (simpler, and evidence in them is rare). Regular-expression literals are not
// recognised: a quote inside one may blank some code after it.
std::string CodeOnly(std::string_view code) {
  std::string out(code);
  enum class In { kCode, kLine, kBlock, kSingle, kDouble, kTemplate } in = In::kCode;
  for (size_t i = 0; i < out.size(); ++i) {
    const char c = out[i];
    const char next = i + 1 < out.size() ? out[i + 1] : '\0';
    switch (in) {
      case In::kCode:
        if (c == '/' && next == '/') in = In::kLine;
        else if (c == '/' && next == '*') in = In::kBlock;
        else if (c == '\'') in = In::kSingle;
        else if (c == '"') in = In::kDouble;
        else if (c == '`') in = In::kTemplate;
        else continue;
        out[i] = ' ';
        if (in == In::kLine || in == In::kBlock) out[++i] = ' ';
        continue;
      case In::kLine:
        if (c == '\n') in = In::kCode;
        else out[i] = ' ';
        continue;
      case In::kBlock:
        if (c == '*' && next == '/') {
          out[i] = out[i + 1] = ' ';
          ++i;
          in = In::kCode;
        } else if (c != '\n') {
          out[i] = ' ';
        }
        continue;
      case In::kSingle:
      case In::kDouble:
      case In::kTemplate: {
        const char quote = in == In::kSingle ? '\'' : in == In::kDouble ? '"' : '`';
        if (c == '\\' && next != '\0') {
          out[i] = ' ';
          if (out[i + 1] != '\n') out[i + 1] = ' ';
          ++i;
        } else if (c == quote) {
          out[i] = ' ';
          in = In::kCode;
        } else if (c == '\n' && in != In::kTemplate) {
          in = In::kCode;  // an unterminated string ends at its line, as the engine would complain
        } else if (c != '\n') {
          out[i] = ' ';
        }
        continue;
      }
    }
  }
  return out;
}

bool IsIdentifierChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '$';
}

// "type Name =", "type Name<", "interface Name {", "interface Name<", "enum Name {" at the start of
// a statement (after `export ` or `declare ` at most).
bool DeclaresType(std::string_view line, std::string_view keyword, std::string_view follow) {
  line = TrimLeft(line);
  for (std::string_view lead : {"export ", "declare "}) {
    if (line.starts_with(lead)) line = TrimLeft(line.substr(lead.size()));
  }
  if (!line.starts_with(keyword)) return false;
  line = TrimLeft(line.substr(keyword.size()));
  size_t name = 0;
  while (name < line.size() && IsIdentifierChar(line[name])) ++name;
  if (name == 0) return false;
  line = TrimLeft(line.substr(name));
  return !line.empty() && follow.find(line.front()) != std::string_view::npos;
}

}  // namespace

bool IsModuleSource(std::string_view source) {
  // Comments and strings do not count: a script that builds Python text with "import os" is a body.
  const std::string plain = CodeOnly(source);
  const std::string_view code = plain;
  size_t start = 0;
  while (start <= code.size()) {
    size_t end = code.find('\n', start);
    if (end == std::string_view::npos) end = code.size();
    const std::string_view line = TrimLeft(code.substr(start, end - start));
    for (std::string_view word : {"export", "import"}) {
      if (line.starts_with(word) && line.size() > word.size() &&
          (line[word.size()] == ' ' || line[word.size()] == '{' || line[word.size()] == '\t' || line[word.size()] == '*'))
        return true;
    }
    start = end + 1;
  }
  return false;
}

std::string TypeScriptEvidence(std::string_view code) {
  // Only asked about code that failed to compile: these are what TypeScript has and JavaScript
  // does not, as they appear in the code agents write.
  static constexpr std::string_view kMarkers[] = {
      ": string", ": number", ": boolean", ": any", ": unknown", ": void", ": never", ": Record<", ": Promise<",
      ": Array<", " as const", " as any", " as string", " as number", " as unknown", "import type ", "implements ",
      "readonly ", "private ", "public ", "protected ", "<T>", "<T,", "): Promise", "!.",
  };
  const std::string plain = CodeOnly(code);
  size_t start = 0;
  int line_no = 1;
  while (start <= plain.size()) {
    size_t end = plain.find('\n', start);
    if (end == std::string::npos) end = plain.size();
    const std::string_view line = std::string_view(plain).substr(start, end - start);
    auto found = [&](std::string_view shown) { return "line " + std::to_string(line_no) + ": `" + std::string(shown) + "`"; };
    if (DeclaresType(line, "type", "=<")) return found("type");
    if (DeclaresType(line, "interface", "{<")) return found("interface");
    if (DeclaresType(line, "enum", "{")) return found("enum");
    for (std::string_view marker : kMarkers) {
      if (line.find(marker) == std::string_view::npos) continue;
      std::string shown(marker);
      while (!shown.empty() && shown.back() == ' ') shown.pop_back();
      while (!shown.empty() && shown.front() == ' ') shown.erase(0, 1);
      return found(shown);
    }
    start = end + 1;
    ++line_no;
  }
  return "";
}

std::string CutText(std::string_view text, size_t max) {
  if (text.size() <= max) return std::string(text);
  size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return std::string(text.substr(0, cut)) + " ... [" + std::to_string(text.size() - cut) + " bytes cut]";
}

// ---- DownstreamHub --------------------------------------------------------------------------

void DownstreamHub::StartAll(const std::map<std::string, Json>& servers, const std::string& secrets_dir,
                             const std::function<void(const std::function<bool()>& ready)>& drive) {
  configs_ = servers;
  size_t pending = 0;
  for (const auto& [name, server] : servers) {
    DownstreamConfig config;
    config.name = name;
    config.command = server.value("command", "");
    for (const Json& arg : server["args"]) config.args.push_back(arg.get<std::string>());
    config.cwd = server.value("cwd", "/");
    config.client_version = client_version_;
    config.call_timeout = std::chrono::milliseconds(server.value("call_timeout_ms", 60'000));
    config.start_timeout = std::chrono::milliseconds(server.value("start_timeout_ms", 30'000));
    // The server gets no more of basal's environment than where programs are and whose home it
    // is: a token in basal's own environment is not the server's unless the policy gives it.
    const char* path = std::getenv("PATH");
    const char* home = std::getenv("HOME");
    config.env.emplace_back("PATH", path && *path ? path : "/usr/local/bin:/usr/bin:/bin");
    if (home && *home) config.env.emplace_back("HOME", home);
    std::string failure;
    for (const auto& [var, value] : server["env"].items()) {
      std::string text = value.get<std::string>();
      if (text.starts_with("${secret:")) {
        const std::string secret = text.substr(9, text.size() - 10);
        auto store = SecretStore::Open(secrets_dir, /*create=*/false);
        auto read = store ? store->Get(secret) : Result<std::string>(store.error());
        if (!read) {
          failure = "env " + var + ": secret \"" + secret + "\" cannot be read: " + read.error().message +
                    " (store it with: basal secret set " + secret + ")";
          break;
        }
        text = std::move(*read);
      }
      bool replaced = false;
      for (auto& [k, v] : config.env) {
        if (k == var) {
          v = text;
          replaced = true;
        }
      }
      if (!replaced) config.env.emplace_back(var, std::move(text));
    }
    if (!failure.empty()) {
      failed_[name] = failure;
      continue;
    }
    DownstreamLimits limits;
    limits.shared_tools = shared_tools_;
    auto downstream = std::make_unique<Downstream>(loop_, std::move(config), limits);
    Downstream* raw = downstream.get();
    servers_.emplace(name, std::move(downstream));
    ++pending;
    raw->Start([this, server_name = name, &pending](const Result<void>& ready) {
      if (!ready) start_errors_[server_name] = ready.error().message;
      --pending;
    });
  }
  drive([&pending] { return pending == 0; });
}

Downstream* DownstreamHub::Find(std::string_view name) {
  auto it = servers_.find(name);
  return it == servers_.end() ? nullptr : it->second.get();
}

std::map<std::string, std::string> DownstreamHub::Unavailable() const {
  std::map<std::string, std::string> out = failed_;
  for (const auto& [name, server] : servers_) {
    if (server->state() == Downstream::State::kReady) continue;
    auto why = start_errors_.find(name);
    out[name] = why != start_errors_.end() ? why->second : "not running (it is restarted by the next call)";
  }
  return out;
}

void DownstreamHub::StopAll() {
  for (auto& [name, server] : servers_) server->Stop();
}

// ---- Codemode -------------------------------------------------------------------------------

struct Codemode::Run {
  RunId run = 0;  // its row in the store's runs (trigger "mcp"): the run_id the agent is told
  FlowRef flow;
  std::string code;
  std::vector<std::string> logs;
  size_t log_bytes = 0;
  size_t logs_cut = 0;
  std::function<void(Json)> done;
};

Codemode::Codemode(Module& module, std::string policy, std::string basal_version, CodemodeLimits limits)
    : module_(module), policy_(std::move(policy)), basal_version_(std::move(basal_version)), limits_(limits) {}

Codemode::~Codemode() {
  *alive_ = false;
  if (hub_) hub_->StopAll();
}

Result<void> Codemode::Start(const std::string& secrets_dir) {
  auto policy = module_.ApprovedPolicy(policy_);
  if (!policy) return policy.error();
  policy_version_ = policy->version;
  budgets_ = policy->manifest.budgets();
  // Scripts come one after another: each leaves a welcomed worker for the next (docs/codemode.md).
  module_.host().KeepCodemodeSpares(true);

  // The `mcp.*` host calls reach this policy's servers from now on.
  std::weak_ptr<bool> alive = alive_;
  HostCallSpec spec = McpFamilySpec([this, alive](const HostCallContext& context, const Json& args, HostCallReply reply) {
    if (alive.expired() || !*alive.lock()) return reply.Error("HostError", "basal mcp is shutting down");
    ServeDownstream(context, args, std::move(reply));
  });
  spec.activation_ended = [this, alive](int64_t activation) {
    if (alive.expired() || !*alive.lock()) return;
    auto it = downstream_calls_.find(activation);
    if (it == downstream_calls_.end()) return;
    auto calls = std::move(it->second);
    downstream_calls_.erase(it);
    for (const auto& [server, token] : calls) {
      if (Downstream* d = hub_ ? hub_->Find(server) : nullptr) d->Cancel(token, "the script's activation ended");
    }
  };
  if (auto replaced = module_.registry().Replace(std::move(spec)); !replaced) return replaced.error();

  hub_ = std::make_unique<DownstreamHub>(module_.host().loop(), basal_version_);
  hub_->StartAll(policy->manifest.mcp_servers(), secrets_dir, [this](const std::function<bool()>& ready) {
    while (!ready()) module_.RunFor(std::chrono::milliseconds(50));
  });
  return Ok();
}

void Codemode::OnLog(const HostCallContext& context, std::string_view level, std::string_view message) {
  // Every console line of the module comes here (basal serve runs other flows beside the scripts).
  if (runs_.empty() || context.flow != kScriptName) return;
  auto key = run_of_activation_.find(context.activation_id);
  if (key == run_of_activation_.end()) {
    // A script's first line: its activation began when a worker took its run. Which run, the
    // journal says (the activation's row is in the open batch, which this reader sees).
    auto rows = module_.host().reader().Activations(context.activation_id, 1);
    if (!rows || rows->empty()) return;
    auto call = call_of_run_.find(rows->front().run_id);
    if (call == call_of_run_.end()) return;
    key = run_of_activation_.emplace(context.activation_id, call->second).first;
  }
  auto run = runs_.find(key->second);
  if (run == runs_.end()) return;
  Run& r = *run->second;
  std::string line = level == "log" ? std::string(message) : "[" + std::string(level) + "] " + std::string(message);
  if (r.logs.size() >= limits_.max_log_lines || r.log_bytes + line.size() > limits_.max_log_bytes) {
    ++r.logs_cut;
    return;
  }
  r.log_bytes += line.size();
  r.logs.push_back(std::move(line));
}

std::vector<ScriptTool> Codemode::ScriptTools() {
  auto policy = module_.ApprovedPolicy(policy_);
  if (!policy) return {};
  return ScriptTools(policy->manifest);
}

std::vector<ScriptTool> Codemode::ScriptTools(const Manifest& manifest) {
  std::vector<ScriptTool> out;
  for (const auto& [name, constraints] : manifest.grants()) {
    if (name == "log" || name == "timer.sleep" || name.starts_with("mcp.") || name.find('.') == std::string::npos) continue;
    const protocol::ToolBinding binding = protocol::BindingFor(name);
    ScriptTool tool{name, binding.group, binding.member, "", nullptr, nullptr};
    const auto text = [](const Json& schema) {
      return schema.is_null() ? SchemaText() : std::make_shared<const std::string>(CodemodeDump(schema));
    };
    if (const HostCallSpec* spec = module_.registry().Find(name); spec && !spec->description.empty()) {
      tool.description = spec->description;
      tool.input_schema = text(spec->input_schema);
    } else if (const Builtin* builtin = FindBuiltin(name)) {
      tool.description = builtin->description;
      tool.input_schema = text(builtin->input);
      tool.result_schema = text(builtin->result);
    }
    out.push_back(std::move(tool));
  }
  if (!hub_) return out;
  for (const auto& [server, config] : hub_->configs()) {
    Downstream* d = hub_->Find(server);
    if (d == nullptr) continue;
    for (const DownstreamTool& t : d->tools()) {
      const std::string name = "mcp." + server + "." + t.name;
      if (name.size() > kMaxHostCallNameBytes || manifest.GrantKeyFor(name).empty()) continue;
      // A tool without an output schema answers its text (a string); with one, its structured content.
      static const SchemaText kString = std::make_shared<const std::string>(R"({"type":"string"})");
      out.push_back({name, server, t.name, t.description, t.input_schema, t.output_schema ? t.output_schema : kString});
    }
  }
  // The worker takes at most this many tools (the load message's bound); list_tools says so.
  if (out.size() > protocol::kMaxToolBindings) out.resize(protocol::kMaxToolBindings);
  return out;
}

std::string Codemode::Instructions() const {
  return "basal runs your JavaScript in a confined sandbox under the operator's codemode policy \"" + policy_ +
         "\". Write ONE script that calls many tools and returns only what you need: run_script {code}. "
         "In the script, `await tools.<group>.<tool>(args)` calls a tool (list_tools lists them; describe_tools "
         "gives their TypeScript declarations). The script has no file system, network or imports except through "
         "its tools; every tool call is checked against the policy and journaled. JavaScript only, not TypeScript.";
}

Json Codemode::ListTools() {
  // The newest version's budgets (a script runs under them), else those read at the start.
  Budgets budgets_now = budgets_;
  if (auto policy = module_.ApprovedPolicy(policy_)) budgets_now = policy->manifest.budgets();
  const std::string budgets = "cpu " + std::to_string(budgets_now.cpu.count()) + " ms, deadline " +
                              std::to_string(budgets_now.deadline.count()) + " ms, heap " +
                              std::to_string(budgets_now.heap_limit_bytes >> 20) + " MiB, " +
                              std::to_string(budgets_now.calls_in_flight) + " tool calls in flight";
  Json call_item = {{"type", "object"},
                    {"properties", {{"name", {{"type", "string"}}}, {"decision", {{"type", "string"}}}, {"ms", {{"type", "number"}}}}},
                    {"required", {"name", "decision", "ms"}}};
  Json run_output = {
      {"type", "object"},
      {"properties",
       {{"status", {{"type", "string"}, {"description", "ok, script_error, denied, budget_exhausted, deadline, typescript, ..."}}},
        {"result", Json::object()},
        {"logs", {{"type", "array"}, {"items", {{"type", "string"}}}}},
        {"run_id", {{"type", "integer"}, {"description", "the run in basal's store: basal journal --run RUN_ID"}}},
        {"activation_id", {{"type", "integer"}}},
        {"calls", {{"type", "array"}, {"items", call_item}}},
        {"error", {{"type", "object"}}}}},
      {"required", {"status", "logs", "run_id", "calls"}}};
  Json tools = Json::array();
  tools.push_back(Json{
      {"name", "run_script"},
      {"title", "Run a script in basal's sandbox"},
      {"description",
       "Run JavaScript (not TypeScript) confined by basal under codemode policy \"" + policy_ +
           "\". `code` is either the body of an async function in which `input`, `host` and `tools` are in scope "
           "(end it with `return VALUE`), or an ES module whose default export is `async function (input, host, tools)`. "
           "Call tools as `await tools.<group>.<tool>({...})` (see list_tools and describe_tools); a call the policy "
           "does not allow throws PermissionDenied. No imports, no file system or network except through tools. "
           "console.log lines come back in `logs`. Budgets: " + budgets + ". Returns {status, result, logs, run_id, calls}."},
      {"inputSchema",
       {{"type", "object"},
        {"properties",
         {{"code", {{"type", "string"}, {"description", "JavaScript: a function body or a module with a default export"}}},
          {"input", {{"description", "Any JSON value, the script's `input`"}}}}},
        {"required", {"code"}},
        {"additionalProperties", false}}},
      {"outputSchema", run_output}});
  tools.push_back(Json{
      {"name", "list_tools"},
      {"title", "List the script's tools"},
      {"description", "One line per tool a run_script script can call, as tools.<group>.<tool>(args)."},
      {"inputSchema", {{"type", "object"}, {"properties", Json::object()}, {"additionalProperties", false}}},
      {"outputSchema",
       {{"type", "object"},
        {"properties", {{"tools", {{"type", "array"}}}, {"unavailable", {{"type", "array"}}}}},
        {"required", {"tools", "unavailable"}}}},
      {"annotations", {{"readOnlyHint", true}}}});
  tools.push_back(Json{
      {"name", "describe_tools"},
      {"title", "TypeScript declarations of tools"},
      {"description", "TypeScript declarations (argument and result types, descriptions) of the named tools, "
                      "e.g. [\"fs.read_text_file\"]; a group name (\"fs\") names all of its tools."},
      {"inputSchema",
       {{"type", "object"},
        {"properties", {{"names", {{"type", "array"}, {"items", {{"type", "string"}}}, {"maxItems", limits_.max_describe_names}}}}},
        {"required", {"names"}},
        {"additionalProperties", false}}},
      {"outputSchema",
       {{"type", "object"},
        {"properties", {{"declarations", {{"type", "string"}}}, {"unknown", {{"type", "array"}, {"items", {{"type", "string"}}}}}}},
        {"required", {"declarations", "unknown"}}}},
      {"annotations", {{"readOnlyHint", true}}}});
  return tools;
}

bool Codemode::CallTool(uint64_t call_key, const std::string& name, const Json& arguments,
                        std::function<void(Json result)> done) {
  if (name == "run_script") {
    RunScript(call_key, arguments, std::move(done));
  } else if (name == "list_tools") {
    done(ListToolsResult());
  } else if (name == "describe_tools") {
    done(DescribeToolsResult(arguments));
  } else {
    return false;
  }
  return true;
}

Json Codemode::ListToolsResult() {
  Json tools = Json::array();
  std::string text;
  for (const ScriptTool& t : ScriptTools()) {
    // One tool's schema parsed at a time, for its line only.
    const std::string line = SummaryLine({t.group, t.member, t.description, ParseSchema(t.input_schema), Json()});
    tools.push_back(Json{{"name", t.group + "." + t.member}, {"host_call", t.host_call}, {"summary", line}});
    text += "tools." + line + "\n";
  }
  Json unavailable = Json::array();
  if (hub_) {
    for (const auto& [server, why] : hub_->Unavailable()) {
      unavailable.push_back(Json{{"server", server}, {"reason", why}});
      text += "(server " + server + " is unavailable: " + CutText(why, 300) + ")\n";
    }
  }
  if (tools.empty()) {
    auto policy = module_.ApprovedPolicy(policy_);
    text += policy ? "No tools: the policy grants none. A script can still compute and return values.\n"
                   : "No tools: " + policy.error().message + "\n";
  }
  if (tools.size() == protocol::kMaxToolBindings)
    text += "(a script gets at most " + std::to_string(protocol::kMaxToolBindings) + " tools: the rest are not offered)\n";
  return Json{{"content", TextContent(std::move(text))},
              {"structuredContent", Json{{"tools", std::move(tools)}, {"unavailable", std::move(unavailable)}}}};
}

Json Codemode::DescribeToolsResult(const Json& arguments) {
  auto names = arguments.find("names");
  if (names == arguments.end() || !names->is_array() || names->size() > limits_.max_describe_names) {
    return ToolError("invalid", "describe_tools needs `names`: an array of at most " +
                                    std::to_string(limits_.max_describe_names) + " tool names such as \"fs.read_text_file\"");
  }
  const std::vector<ScriptTool> all = ScriptTools();
  std::vector<ToolDeclaration> chosen;
  Json unknown = Json::array();
  // The schemas of the chosen tools are parsed together (the declaration groups them): at most
  // max_describe_values values of them in one answer.
  size_t values = 0;
  std::vector<std::string> not_described;
  const auto values_of = [](const SchemaText& text) {
    return text ? protocol::CountJsonValues(*text) : size_t{0};
  };
  for (const Json& n : *names) {
    if (!n.is_string()) return ToolError("invalid", "describe_tools: every name must be a string (got " + CutText(CodemodeDump(n), 60) + ")");
    const std::string wanted = n.get<std::string>();
    bool found = false;
    for (const ScriptTool& t : all) {
      const std::string dotted = t.group + "." + t.member;
      if (wanted == dotted || wanted == "tools." + dotted || wanted == t.host_call || wanted == t.group) {
        bool seen = false;
        for (const ToolDeclaration& c : chosen) seen = seen || (c.group == t.group && c.member == t.member);
        const size_t more = seen ? 0 : values_of(t.input_schema) + values_of(t.result_schema);
        if (!seen && values + more > limits_.max_describe_values) {
          not_described.push_back(dotted);
        } else if (!seen) {
          values += more;
          chosen.push_back({t.group, t.member, t.description, ParseSchema(t.input_schema), ParseSchema(t.result_schema)});
        }
        found = true;
      }
    }
    if (!found) unknown.push_back(wanted);
  }
  std::string text = DeclareTools(chosen, limits_.max_declaration_bytes);
  if (!unknown.empty()) text += "\n// not tools of this policy: " + CutText(CodemodeDump(unknown), 1000) + " (list_tools lists them)\n";
  if (!not_described.empty())
    text += "\n// not described: " + std::to_string(not_described.size()) + " tool(s) whose schemas pass the " +
            std::to_string(limits_.max_describe_values) + " JSON values one answer parses (" +
            CutText(CodemodeDump(not_described), 1000) + "): ask describe_tools for fewer tools at once\n";
  return Json{{"content", TextContent(text)},
              {"structuredContent", Json{{"declarations", text}, {"unknown", std::move(unknown)}}}};
}

void Codemode::RunScript(uint64_t call_key, const Json& arguments, std::function<void(Json)> done) {
  auto code = arguments.find("code");
  if (code == arguments.end() || !code->is_string())
    return done(ToolError("invalid", "run_script needs `code`: the JavaScript to run, as a string"));
  const std::string& text = code->get_ref<const std::string&>();
  if (text.size() > limits_.max_code_bytes)
    return done(ToolError("invalid", "the script is " + std::to_string(text.size()) + " bytes; run_script takes at most " +
                                         std::to_string(limits_.max_code_bytes) + ": write a shorter script"));
  if (runs_.size() >= limits_.max_scripts_running)
    return done(ToolError("busy", std::to_string(runs_.size()) + " scripts are running, the most basal mcp runs at once; "
                                  "wait for one to finish"));
  // The policy may have changed since basal mcp started: grants and budgets apply at once, but
  // its servers are the ones started then.
  auto policy = module_.ApprovedPolicy(policy_);
  if (!policy) return done(ToolError("refused", policy.error().message));
  if (hub_ && policy->manifest.mcp_servers() != hub_->configs()) {
    return done(ToolError("refused", "codemode policy \"" + policy_ + "\" version " + std::to_string(policy->version) +
                                         " lists other mcp_servers than version " + std::to_string(policy_version_) +
                                         ", whose servers this basal mcp started; restart basal mcp to run them"));
  }
  std::vector<std::string> tool_names;
  for (const ScriptTool& t : ScriptTools(policy->manifest)) tool_names.push_back(t.host_call);
  const std::string source = IsModuleSource(text) ? text : WrapScript(text);
  auto flow = module_.AddCodemodeScript(policy_, kScriptName, source, std::move(tool_names));
  if (!flow) return done(ToolError("refused", flow.error().message));
  Json input = arguments.value("input", Json());
  auto run = std::make_unique<Run>();
  run->flow = *flow;
  run->code = text;
  run->done = std::move(done);
  Run* raw = run.get();
  runs_[call_key] = std::move(run);
  std::weak_ptr<bool> alive = alive_;
  // A run, as every other in the store (trigger "mcp"): its id is the one GET /v1/runs/{id} and
  // `basal journal --run` know, and the one the agent is told.
  RunOptions options;
  options.trigger = "mcp";
  auto accepted = module_.host().StartRun(*flow, std::move(input), std::move(options),
                                          [this, alive, call_key](const RunStop& stop) {
                                            if (alive.expired() || !*alive.lock()) return;
                                            if (on_run_stopped_) on_run_stopped_(stop);
                                            Finish(call_key, stop.result);
                                          });
  if (!accepted) {
    auto done_now = std::move(raw->done);
    (void)module_.RemoveFlow(raw->flow);
    runs_.erase(call_key);
    return done_now(ToolError("refused", accepted.error().message));
  }
  raw->run = accepted->run.id;
  call_of_run_[raw->run] = call_key;
}

void Codemode::Finish(uint64_t call_key, const ActivationResult& result) {
  auto it = runs_.find(call_key);
  if (it == runs_.end()) return;
  std::unique_ptr<Run> run = std::move(it->second);
  runs_.erase(it);
  call_of_run_.erase(run->run);
  run_of_activation_.erase(result.activation_id);
  downstream_calls_.erase(result.activation_id);

  std::string status = OutcomeName(result.outcome);
  std::string message = result.message;
  // A script error's message starts with its name ("PermissionDenied: ..."): said once.
  if (!result.error_name.empty() && message.starts_with(result.error_name + ": "))
    message.erase(0, result.error_name.size() + 2);
  if (result.outcome == Outcome::kScriptError) {
    status = "script_error";
    if (result.error_name == "PermissionDenied") status = "denied";
    if (result.error_name == "SyntaxError") {
      const std::string evidence = TypeScriptEvidence(run->code);
      if (!evidence.empty()) {
        status = "typescript";
        message = "TypeScript is not supported: basal runs JavaScript only (" + evidence +
                  " is TypeScript); remove the type annotations and run it again. The engine said: " + result.message;
      }
    }
  }

  // The calls, from the journal (committed before this runs).
  Json calls = Json::array();
  size_t calls_cut = 0;
  std::string calls_text;
  if (auto rows = module_.host().reader().Calls(result.activation_id)) {
    for (const CallRow& row : *rows) {
      if (row.name == "log") continue;  // console lines are in `logs`
      if (calls.size() >= limits_.max_calls_listed) {
        ++calls_cut;
        continue;
      }
      const double ms = row.end_unix_us ? static_cast<double>(*row.end_unix_us - row.start_unix_us) / 1000.0 : 0.0;
      Json call = {{"name", row.name}, {"decision", VerdictName(row.decision.verdict)}, {"ms", static_cast<int64_t>(ms * 10) / 10.0}};
      if (!row.error_json.empty()) {
        Json error = Json::parse(row.error_json, nullptr, false);
        if (error.is_object() && error.contains("name")) call["error"] = error["name"];
      }
      calls_text += (calls_text.empty() ? "" : ", ") + row.name + " " + VerdictName(row.decision.verdict);
      calls.push_back(std::move(call));
    }
  }

  Json structured = {{"status", status},        {"run_id", run->run}, {"activation_id", result.activation_id},
                     {"logs", run->logs},        {"calls", calls}};
  std::string text = status + " (run " + std::to_string(run->run) + ")";
  if (result.ok()) {
    const std::string json = CodemodeDump(result.result);
    if (json.size() > limits_.max_result_bytes) {
      structured["result"] = CutText(json, limits_.max_result_bytes);
      structured["result_cut"] = true;
    } else {
      structured["result"] = result.result;
    }
    text += "\nresult: " + CutText(json, limits_.max_text_result_bytes);
  } else {
    structured["result"] = nullptr;
    Json error = {{"name", result.error_name.empty() ? status : result.error_name}, {"message", message}};
    if (result.budget) error["budget"] = BudgetName(*result.budget);
    if (!result.stack.empty()) error["stack"] = CutText(result.stack, 2048);
    structured["error"] = error;
    text += "\nerror: " + error["name"].get<std::string>() + ": " + CutText(message, limits_.max_text_result_bytes);
  }
  if (run->logs_cut > 0 || result.logs_dropped > 0) {
    const size_t cut = run->logs_cut + static_cast<size_t>(result.logs_dropped);
    structured["logs_cut"] = cut;
    structured["logs"].push_back("... [" + std::to_string(cut) + " more log lines cut]");
  }
  if (calls_cut > 0) structured["calls_cut"] = calls_cut;
  if (!run->logs.empty()) {
    std::string logs;
    for (const std::string& line : run->logs) logs += "\n  " + line;
    text += "\nlogs:" + CutText(logs, limits_.max_text_result_bytes);
  }
  if (!calls.empty()) text += "\ncalls: " + CutText(calls_text, 1024) + (calls_cut ? " (+" + std::to_string(calls_cut) + " more)" : "");
  // The script's flow (and so its worker) goes after the answer: the worker's kill and reap
  // (100-200 us) are not the agent's wait. Nothing can start on that flow meanwhile (its one run
  // ended), and its worker still counts against max_workers until then, in this same pass.
  const FlowRef flow = run->flow;
  std::weak_ptr<bool> alive = alive_;
  run->done(Json{{"content", TextContent(std::move(text))}, {"structuredContent", std::move(structured)}, {"isError", !result.ok()}});
  if (!alive.expired() && *alive.lock()) (void)module_.RemoveFlow(flow);
}

void Codemode::Cancel(uint64_t call_key) {
  auto it = runs_.find(call_key);
  if (it == runs_.end()) return;
  // Its end arrives through Finish (a run not started yet ends at once, cancelled).
  (void)module_.host().CancelRun(it->second->run, "cancelled: the agent's request went away (its client left or basal stopped)");
}

void Codemode::ServeDownstream(const HostCallContext& context, const Json& args, HostCallReply reply) {
  // "mcp.<server>.<tool>": the registry sent only names below "mcp.".
  const std::string& name = context.name;
  const size_t dot = name.find('.', 4);
  if (dot == std::string::npos) return reply.Error("TypeError", "\"" + name + "\" is not mcp.<server>.<tool>");
  const std::string server = name.substr(4, dot - 4);
  const std::string tool_name = name.substr(dot + 1);
  Downstream* downstream = hub_ ? hub_->Find(server) : nullptr;
  if (downstream == nullptr) {
    const auto unavailable = hub_ ? hub_->Unavailable() : std::map<std::string, std::string>{};
    auto why = unavailable.find(server);
    return reply.Error("HostError", "downstream MCP server \"" + server + "\" is not running" +
                                        (why != unavailable.end() ? ": " + why->second : std::string(" under this basal mcp")));
  }
  const DownstreamTool* tool = downstream->FindTool(tool_name);
  if (tool == nullptr) {
    if (downstream->state() != Downstream::State::kReady) {
      const auto unavailable = hub_->Unavailable();
      auto why = unavailable.find(server);
      return reply.Error("HostError", "downstream MCP server \"" + server + "\" is not running" +
                                          (why != unavailable.end() ? ": " + why->second : std::string()));
    }
    return reply.Error("TypeError", "downstream MCP server \"" + server + "\" has no tool \"" + tool_name +
                                        "\" (list_tools shows the tools)");
  }
  if (!args.is_object()) return reply.Error("TypeError", name + ": the arguments must be an object");
  if (auto problem = CheckAgainstSchema(ParseSchema(tool->input_schema), args, "args"))
    return reply.Error("TypeError", name + ": " + *problem + " (describe_tools gives the tool's declaration)");
  auto shared = std::make_shared<HostCallReply>(std::move(reply));
  const int64_t activation = context.activation_id;
  std::weak_ptr<bool> alive = alive_;
  auto token = std::make_shared<uint64_t>(0);
  *token = downstream->Call(tool_name, args, [this, alive, shared, activation, server, token, name](Result<Json> answer) {
    if (!alive.expired() && *alive.lock()) {
      auto it = downstream_calls_.find(activation);
      if (it != downstream_calls_.end()) {
        auto& list = it->second;
        for (auto entry = list.begin(); entry != list.end(); ++entry) {
          if (entry->first == server && entry->second == *token) {
            list.erase(entry);
            break;
          }
        }
        if (list.empty()) downstream_calls_.erase(it);
      }
    }
    if (!answer) return shared->Error("HostError", name + ": " + answer.error().message);
    const Json& result = *answer;
    if (result.value("isError", false)) return shared->Error("ToolError", CutText(TextOfToolResult(result), kMaxToolErrorBytes));
    shared->Ok(ValueOfToolResult(result));
  });
  if (!shared->answered()) downstream_calls_[activation].emplace_back(server, *token);
}

}  // namespace basal::mcp
