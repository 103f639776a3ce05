#include "worker/engine.h"

#include <malloc.h>
#include <time.h>
#include <unistd.h>
#include <sys/random.h>
#include <sys/syscall.h>

#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

extern "C" {
#include "quickjs.h"
}

namespace basal::worker {
namespace {

constexpr size_t kMallocOverhead = 8;

int64_t ThreadCpuNs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// Owns one JSValue. Nobody has to remember QuickJS's ownership rules outside this class.
class Value {
 public:
  Value() = default;
  Value(JSContext* ctx, JSValue v) : ctx_(ctx), v_(v) {}  // takes ownership
  Value(const Value&) = delete;
  Value& operator=(const Value&) = delete;
  Value(Value&& o) noexcept : ctx_(o.ctx_), v_(o.v_) { o.v_ = JS_UNDEFINED; }
  Value& operator=(Value&& o) noexcept {
    if (this != &o) {
      Reset();
      ctx_ = o.ctx_;
      v_ = o.v_;
      o.v_ = JS_UNDEFINED;
    }
    return *this;
  }
  ~Value() { Reset(); }
  void Reset() {
    if (ctx_) JS_FreeValue(ctx_, v_);
    v_ = JS_UNDEFINED;
  }
  JSValue get() const { return v_; }
  JSValue dup() const { return JS_DupValue(ctx_, v_); }
  bool exception() const { return JS_IsException(v_); }

 private:
  JSContext* ctx_ = nullptr;
  JSValue v_ = JS_UNDEFINED;
};

std::string ToStdString(JSContext* ctx, JSValueConst v) {
  size_t len = 0;
  const char* s = JS_ToCStringLen(ctx, &len, v);
  if (!s) {
    JS_FreeValue(ctx, JS_GetException(ctx));
    return "(unprintable value)";
  }
  std::string out(s, len);
  JS_FreeCString(ctx, s);
  return out;
}

// QuickJS encodes lone surrogates as 3-byte sequences that are not UTF-8; the parent rejects
// invalid UTF-8, so replace them with U+FFFD rather than blame the script for a protocol fault.
void ReplaceLoneSurrogates(std::string& s) {
  for (size_t i = 0; i + 2 < s.size(); ++i) {
    if (static_cast<unsigned char>(s[i]) == 0xED && (static_cast<unsigned char>(s[i + 1]) & 0xE0) == 0xA0) {
      s[i] = static_cast<char>(0xEF);
      s[i + 1] = static_cast<char>(0xBF);
      s[i + 2] = static_cast<char>(0xBD);
      i += 2;
    }
  }
}

// Error texts and console messages are cut to these sizes, so a script cannot make its own
// `done` or `log` frame too large for the protocol.
constexpr size_t kMaxErrorTextBytes = 64 * 1024;
constexpr size_t kMaxLogMessageBytes = 1024 * 1024;

// `s` cut to at most about `max` bytes on a UTF-8 boundary, saying how much was cut.
std::string Clipped(std::string s, size_t max) {
  if (s.size() <= max) return s;
  size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  const size_t dropped = s.size() - cut;
  s.resize(cut);
  s += " ... [" + std::to_string(dropped) + " bytes cut]";
  return s;
}

}  // namespace

struct Engine::State {
  Channel* channel = nullptr;
  JSRuntime* rt = nullptr;
  JSContext* ctx = nullptr;
  Value flow_fn;    // the flow module's default export
  Value runner;     // bootstrap: (fn, input, host, settle) => runs and settles once
  Value host;       // the frozen `host` object handed to every activation
  Value settle_fn;

  // Budgets.
  uint64_t heap_limit_bytes = 0;
  int64_t cpu_budget_ns = 0;
  int64_t cpu_start_ns = 0;
  bool cpu_armed = false;
  bool cpu_exhausted = false;
  uint64_t refused_allocations = 0;
  uint64_t random_state = 1;  // Math.random (xorshift64*), seeded from getrandom at load

  // The activation in progress.
  int64_t activation = 0;
  int64_t next_call_id = 1;
  struct Pending {
    Value resolve;
    Value reject;
    bool notify = false;  // console.* calls: nobody awaits the answer
  };
  std::map<int64_t, Pending> pending;
  bool settled = false;
  bool settled_ok = false;
  Value settled_value;

  // Allocator accounting (QuickJS's default allocator, plus a count of refusals).
  JSMallocState* malloc_state = nullptr;
};

namespace {

using State = Engine::State;

State* StateOf(JSContext* ctx) { return static_cast<State*>(JS_GetContextOpaque(ctx)); }

void* BudgetMalloc(JSMallocState* s, size_t size) {
  auto* st = static_cast<State*>(s->opaque);
  if (s->malloc_size + size > s->malloc_limit) {
    ++st->refused_allocations;
    return nullptr;
  }
  void* p = std::malloc(size);
  if (!p) {
    ++st->refused_allocations;
    return nullptr;
  }
  s->malloc_count++;
  s->malloc_size += malloc_usable_size(p) + kMallocOverhead;
  return p;
}

void BudgetFree(JSMallocState* s, void* p) {
  if (!p) return;
  s->malloc_count--;
  s->malloc_size -= malloc_usable_size(p) + kMallocOverhead;
  std::free(p);
}

void* BudgetRealloc(JSMallocState* s, void* p, size_t size) {
  auto* st = static_cast<State*>(s->opaque);
  if (!p) return size == 0 ? nullptr : BudgetMalloc(s, size);
  const size_t old = malloc_usable_size(p);
  if (size == 0) {
    BudgetFree(s, p);
    return nullptr;
  }
  if (s->malloc_size + size - old > s->malloc_limit) {
    ++st->refused_allocations;
    return nullptr;
  }
  void* q = std::realloc(p, size);
  if (!q) {
    ++st->refused_allocations;
    return nullptr;
  }
  s->malloc_size += malloc_usable_size(q) - old;
  return q;
}

size_t UsableSize(const void* p) { return malloc_usable_size(const_cast<void*>(p)); }

const JSMallocFunctions kBudgetMalloc = {BudgetMalloc, BudgetFree, BudgetRealloc, UsableSize};

// Called by QuickJS every few thousand bytecodes. Returning 1 raises an uncatchable error; once
// the CPU budget is gone it keeps returning 1, so no handler can resume the script.
int InterruptHandler(JSRuntime*, void* opaque) {
  auto* st = static_cast<State*>(opaque);
  if (st->cpu_exhausted) return 1;
  if (!st->cpu_armed) return 0;
  if (ThreadCpuNs() - st->cpu_start_ns > st->cpu_budget_ns) {
    st->cpu_exhausted = true;
    return 1;
  }
  return 0;
}

JSModuleDef* RefuseImport(JSContext* ctx, const char* name, void*) {
  JS_ThrowReferenceError(ctx, "import of '%s' refused: a flow is one module and imports nothing", name);
  return nullptr;
}

protocol::ScriptError DescribeThrown(JSContext* ctx, JSValueConst v) {
  protocol::ScriptError e;
  e.kind = "script_error";
  if (JS_IsObject(v)) {
    Value name(ctx, JS_GetPropertyStr(ctx, v, "name"));
    Value message(ctx, JS_GetPropertyStr(ctx, v, "message"));
    Value stack(ctx, JS_GetPropertyStr(ctx, v, "stack"));
    e.name = JS_IsUndefined(name.get()) || name.exception() ? "Error" : ToStdString(ctx, name.get());
    e.message = JS_IsUndefined(message.get()) || message.exception() ? ToStdString(ctx, v) : ToStdString(ctx, message.get());
    if (JS_IsString(stack.get())) e.stack = ToStdString(ctx, stack.get());
    JS_FreeValue(ctx, JS_GetException(ctx));  // a throwing getter leaves nothing behind
  } else {
    e.name = "Error";
    e.message = "non-error value thrown: " + ToStdString(ctx, v);
  }
  return e;
}

// An activation that saw a refused allocation and then failed in some other way still failed
// on its memory budget: the script caught the refusal but did not complete normally, and the
// engine's state is not trusted (so the parent retires the worker).
protocol::ScriptError AfterRefusedAllocation(const State* st, protocol::ScriptError e) {
  if (st->refused_allocations == 0 || e.kind == "budget_exhausted") return e;
  e.kind = "budget_exhausted";
  e.budget = "memory";
  e.message = "heap budget of " + std::to_string(st->heap_limit_bytes / (1024 * 1024)) +
              " MiB exhausted; the script caught it, then failed with " + e.name + ": " + e.message;
  return e;
}

// Turns a thrown value into the activation's error, recognising budget failures.
protocol::ScriptError ClassifyFailure(State* st, JSValueConst thrown) {
  if (st->cpu_exhausted) {
    protocol::ScriptError e;
    e.kind = "budget_exhausted";
    e.budget = "cpu";
    e.name = "InternalError";
    e.message = "CPU budget of " + std::to_string(st->cpu_budget_ns / 1'000'000) + " ms exhausted";
    return e;
  }
  protocol::ScriptError e = DescribeThrown(st->ctx, thrown);
  if (e.name == "InternalError" && e.message == "out of memory" && st->refused_allocations > 0) {
    e.kind = "budget_exhausted";
    e.budget = "memory";
    e.message = "heap budget of " + std::to_string(st->heap_limit_bytes / (1024 * 1024)) + " MiB exhausted";
  } else if (e.name == "InternalError" && e.message == "stack overflow") {
    e.kind = "budget_exhausted";
    e.budget = "stack";
    e.message = "stack budget exhausted (stack overflow)";
  } else if (JS_IsNull(thrown) && st->refused_allocations > 0) {
    // QuickJS throws null when it cannot even allocate the out-of-memory error.
    e.kind = "budget_exhausted";
    e.budget = "memory";
    e.name = "InternalError";
    e.message = "heap budget of " + std::to_string(st->heap_limit_bytes / (1024 * 1024)) + " MiB exhausted";
  } else {
    e = AfterRefusedAllocation(st, std::move(e));
  }
  return e;
}

std::string StringifyJson(JSContext* ctx, JSValueConst v, bool& ok, std::string& error) {
  Value s(ctx, JS_JSONStringify(ctx, v, JS_UNDEFINED, JS_UNDEFINED));
  if (s.exception()) {
    Value exc(ctx, JS_GetException(ctx));
    error = DescribeThrown(ctx, exc.get()).message;
    ok = false;
    return {};
  }
  ok = true;
  if (JS_IsUndefined(s.get())) return "null";
  std::string out = ToStdString(ctx, s.get());
  ReplaceLoneSurrogates(out);
  return out;
}

std::string JsonQuote(std::string_view s) { return protocol::DumpJson(protocol::Json(std::string(s))); }

// Sends a call frame and, unless `notify`, returns a promise for its answer.
JSValue StartCall(JSContext* ctx, std::string_view name, JSValueConst args, bool notify) {
  State* st = StateOf(ctx);
  bool ok = false;
  std::string error;
  std::string args_json = StringifyJson(ctx, args, ok, error);
  if (!ok) return JS_ThrowTypeError(ctx, "host.call: arguments are not JSON-serializable: %s", error.c_str());
  if (!protocol::FitsInMessage(args_json, error))
    return JS_ThrowTypeError(ctx, "host.call: arguments too large to send: %s", error.c_str());
  const int64_t id = st->next_call_id++;
  std::string payload;
  payload.reserve(64 + name.size() + args_json.size());
  payload += "{\"type\":\"call\",\"activation\":";
  payload += std::to_string(st->activation);
  payload += ",\"id\":";
  payload += std::to_string(id);
  payload += ",\"name\":";
  payload += JsonQuote(name);
  payload += ",\"args\":";
  payload += args_json;
  payload += '}';
  st->channel->Send(payload);
  State::Pending p;
  p.notify = notify;
  JSValue result = JS_UNDEFINED;
  if (!notify) {
    JSValue funcs[2];
    result = JS_NewPromiseCapability(ctx, funcs);
    if (JS_IsException(result)) return result;
    p.resolve = Value(ctx, funcs[0]);
    p.reject = Value(ctx, funcs[1]);
  }
  st->pending.emplace(id, std::move(p));
  return result;
}

// host.call(name, args) -> Promise
JSValue HostCall(JSContext* ctx, JSValueConst, int argc, JSValueConst* argv) {
  State* st = StateOf(ctx);
  if (st->activation == 0) return JS_ThrowTypeError(ctx, "host.call: no activation is running (module top level cannot call the host)");
  if (argc < 1 || !JS_IsString(argv[0])) return JS_ThrowTypeError(ctx, "host.call: the first argument must be the host-call name (a string)");
  const std::string name = ToStdString(ctx, argv[0]);
  if (name.empty() || name.size() > 128) return JS_ThrowTypeError(ctx, "host.call: the name must be 1 to 128 characters");
  return StartCall(ctx, name, argc >= 2 ? argv[1] : JS_UNDEFINED, /*notify=*/false);
}

// console.log/info/warn/error/debug -> a `log` host call nobody awaits.
JSValue ConsoleLog(JSContext* ctx, JSValueConst, int argc, JSValueConst* argv, int magic) {
  static const char* const kLevels[] = {"log", "info", "warn", "error", "debug"};
  State* st = StateOf(ctx);
  if (st->activation == 0) return JS_UNDEFINED;  // module top level: nowhere to journal it
  std::string message;
  for (int i = 0; i < argc; ++i) {
    if (i) message += ' ';
    if (JS_IsString(argv[i])) {
      message += ToStdString(ctx, argv[i]);
    } else {
      bool ok = false;
      std::string error;
      std::string j = JS_IsObject(argv[i]) && !JS_IsFunction(ctx, argv[i]) ? StringifyJson(ctx, argv[i], ok, error) : std::string();
      message += ok ? j : ToStdString(ctx, argv[i]);
    }
  }
  ReplaceLoneSurrogates(message);
  message = Clipped(std::move(message), kMaxLogMessageBytes);
  Value args(ctx, JS_NewObject(ctx));
  JS_SetPropertyStr(ctx, args.get(), "level", JS_NewString(ctx, kLevels[magic]));
  JS_SetPropertyStr(ctx, args.get(), "message", JS_NewStringLen(ctx, message.data(), message.size()));
  JSValue r = StartCall(ctx, "log", args.get(), /*notify=*/true);
  if (JS_IsException(r)) return r;
  return JS_UNDEFINED;
}

// settle(ok, value): the bootstrap calls it exactly once per activation.
// Math.random. QuickJS seeds its own generator from the time of day in microseconds, so workers
// started in the same microsecond would draw the same sequence; this one is seeded per worker
// from getrandom. Not for secrets: Math.random never is.
JSValue MathRandom(JSContext* ctx, JSValueConst, int, JSValueConst*) {
  State* st = StateOf(ctx);
  uint64_t x = st->random_state;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  st->random_state = x;
  const uint64_t bits = (x * 0x2545F4914F6CDD1DULL) >> 11;  // 53 random bits
  return JS_NewFloat64(ctx, static_cast<double>(bits) * 0x1.0p-53);
}

uint64_t RandomSeed() {
  uint64_t seed = 0;
  if (getrandom(&seed, sizeof seed, 0) != static_cast<ssize_t>(sizeof seed)) seed = 0;
  return seed != 0 ? seed : 0x9E3779B97F4A7C15ULL ^ static_cast<uint64_t>(getpid());
}

JSValue Settle(JSContext* ctx, JSValueConst, int argc, JSValueConst* argv) {
  State* st = StateOf(ctx);
  if (st->settled || argc < 2) return JS_UNDEFINED;
  st->settled = true;
  st->settled_ok = JS_ToBool(ctx, argv[0]) == 1;
  st->settled_value = Value(ctx, JS_DupValue(ctx, argv[1]));
  return JS_UNDEFINED;
}

#ifdef BASAL_TEST_HOOKS
// __basal_test.syscall(nr, ...args): stands for a subverted engine in the probe suite. Numbers
// pass as integers, strings as pointers to NUL-terminated copies. Test-hooks builds only.
JSValue TestSyscall(JSContext* ctx, JSValueConst, int argc, JSValueConst* argv) {
  if (argc < 1) return JS_ThrowTypeError(ctx, "__basal_test.syscall(nr, ...args)");
  int64_t nr = 0;
  if (JS_ToInt64(ctx, &nr, argv[0])) return JS_EXCEPTION;
  std::vector<std::string> strings;
  strings.reserve(6);
  long a[6] = {0, 0, 0, 0, 0, 0};
  for (int i = 1; i < argc && i <= 6; ++i) {
    if (JS_IsString(argv[i])) {
      strings.push_back(ToStdString(ctx, argv[i]));
      a[i - 1] = reinterpret_cast<long>(strings.back().c_str());
    } else {
      int64_t v = 0;
      if (JS_ToInt64(ctx, &v, argv[i])) return JS_EXCEPTION;
      a[i - 1] = static_cast<long>(v);
    }
  }
  const long r = syscall(static_cast<long>(nr), a[0], a[1], a[2], a[3], a[4], a[5]);
  return JS_NewInt64(ctx, r < 0 ? -errno : r);
}

// __basal_test.int80(nr, a, b, c): the i386 entry, to prove the filter kills it.
JSValue TestInt80(JSContext* ctx, JSValueConst, int argc, JSValueConst* argv) {
  int32_t v[4] = {0, 0, 0, 0};
  for (int i = 0; i < argc && i < 4; ++i)
    if (JS_ToInt32(ctx, &v[i], argv[i])) return JS_EXCEPTION;
  long r = v[0];
#if defined(__x86_64__)
  __asm__ volatile("int $0x80" : "+a"(r) : "b"(v[1]), "c"(v[2]), "d"(v[3]) : "memory");
#endif
  return JS_NewInt64(ctx, r);
}

JSValue TestAbort(JSContext*, JSValueConst, int, JSValueConst*) { std::abort(); }
#endif

constexpr const char* kConsoleMethods[] = {"log", "info", "warn", "error", "debug"};

// Runs fn(input, host) so that a synchronous throw, a rejection and a value all reach settle.
// `then` is captured before any flow code runs, so a flow cannot reroute it.
constexpr std::string_view kRunnerSource = R"JS((function () {
  const then = Promise.prototype.then;
  return function (fn, input, host, settle) {
    const p = new Promise(function (resolve) { resolve(fn(input, host)); });
    then.call(p, function (v) { settle(true, v); }, function (e) { settle(false, e); });
  };
})())JS";

void DrainJobs(State* st) {
  for (;;) {
    JSContext* job_ctx = nullptr;
    const int r = JS_ExecutePendingJob(st->rt, &job_ctx);
    if (r == 0) return;
    if (r < 0) JS_FreeValue(st->ctx, JS_GetException(st->ctx));
    if (st->cpu_exhausted) return;
  }
}

std::string ErrorJson(const protocol::ScriptError& e) {
  protocol::Json j = {{"kind", e.kind}, {"name", Clipped(e.name, kMaxErrorTextBytes)},
                      {"message", Clipped(e.message, kMaxErrorTextBytes)}};
  if (!e.stack.empty()) j["stack"] = Clipped(e.stack, kMaxErrorTextBytes);
  if (!e.budget.empty()) j["budget"] = e.budget;
  return protocol::DumpJson(j);
}

}  // namespace

Engine::Engine(Channel& channel) : channel_(channel) {}

Engine::~Engine() {
  if (!state_) return;
  state_->pending.clear();
  state_->settled_value.Reset();
  state_->flow_fn.Reset();
  state_->runner.Reset();
  state_->host.Reset();
  state_->settle_fn.Reset();
  if (state_->ctx) JS_FreeContext(state_->ctx);
  if (state_->rt) JS_FreeRuntime(state_->rt);
}

bool Engine::Load(const protocol::Load& load, protocol::ScriptError& error) {
  auto st = std::make_unique<State>();
  st->channel = &channel_;
  st->heap_limit_bytes = static_cast<uint64_t>(load.heap_bytes);
  st->cpu_budget_ns = load.cpu_ms * 1'000'000;
  st->rt = JS_NewRuntime2(&kBudgetMalloc, st.get());
  if (!st->rt) {
    error = {"budget_exhausted", "memory", "InternalError", "cannot create the JavaScript runtime", ""};
    return false;
  }
  JS_SetMemoryLimit(st->rt, st->heap_limit_bytes);
  JS_SetMaxStackSize(st->rt, static_cast<size_t>(load.stack_bytes));
  JS_SetInterruptHandler(st->rt, InterruptHandler, st.get());
  JS_SetModuleLoaderFunc(st->rt, nullptr, RefuseImport, nullptr);
  st->ctx = JS_NewContext(st->rt);
  if (!st->ctx) {
    error = {"budget_exhausted", "memory", "InternalError", "cannot create the JavaScript context", ""};
    state_ = std::move(st);
    return false;
  }
  JSContext* ctx = st->ctx;
  JS_SetContextOpaque(ctx, st.get());
  state_ = std::move(st);
  State* s = state_.get();

  Value global(ctx, JS_GetGlobalObject(ctx));
  Value console(ctx, JS_NewObject(ctx));
  for (int i = 0; i < 5; ++i)
    JS_SetPropertyStr(ctx, console.get(), kConsoleMethods[i],
                      JS_NewCFunctionMagic(ctx, ConsoleLog, kConsoleMethods[i], 0, JS_CFUNC_generic_magic, i));
  JS_SetPropertyStr(ctx, global.get(), "console", console.dup());
  s->random_state = RandomSeed();
  {
    Value math(ctx, JS_GetPropertyStr(ctx, global.get(), "Math"));
    JS_DefinePropertyValueStr(ctx, math.get(), "random", JS_NewCFunction(ctx, MathRandom, "random", 0),
                              JS_PROP_WRITABLE | JS_PROP_CONFIGURABLE);
  }
#ifdef BASAL_TEST_HOOKS
  Value test(ctx, JS_NewObject(ctx));
  JS_SetPropertyStr(ctx, test.get(), "syscall", JS_NewCFunction(ctx, TestSyscall, "syscall", 1));
  JS_SetPropertyStr(ctx, test.get(), "int80", JS_NewCFunction(ctx, TestInt80, "int80", 1));
  JS_SetPropertyStr(ctx, test.get(), "abort", JS_NewCFunction(ctx, TestAbort, "abort", 0));
  JS_SetPropertyStr(ctx, global.get(), "__basal_test", test.dup());
#endif

  s->host = Value(ctx, JS_NewObject(ctx));
  JS_SetPropertyStr(ctx, s->host.get(), "call", JS_NewCFunction(ctx, HostCall, "call", 2));
  s->settle_fn = Value(ctx, JS_NewCFunction(ctx, Settle, "settle", 2));
  s->runner = Value(ctx, JS_Eval(ctx, kRunnerSource.data(), kRunnerSource.size(), "<basal>", JS_EVAL_TYPE_GLOBAL));
  if (s->runner.exception()) {
    Value exc(ctx, JS_GetException(ctx));
    error = ClassifyFailure(s, exc.get());
    return false;
  }
  {
    Value freeze(ctx, JS_Eval(ctx, "Object.freeze", 13, "<basal>", JS_EVAL_TYPE_GLOBAL));
    JSValue h = s->host.get();
    JS_FreeValue(ctx, JS_Call(ctx, freeze.get(), JS_UNDEFINED, 1, &h));
  }

  // The flow module, then a bootstrap module that imports its default export.
  const std::string flow_name = load.flow.empty() ? std::string("flow.js") : load.flow;
  s->cpu_start_ns = ThreadCpuNs();
  s->cpu_armed = true;
  Value module(ctx, JS_Eval(ctx, load.source.data(), load.source.size(), flow_name.c_str(),
                            JS_EVAL_TYPE_MODULE | JS_EVAL_FLAG_COMPILE_ONLY));
  if (module.exception()) {
    s->cpu_armed = false;
    Value exc(ctx, JS_GetException(ctx));
    error = ClassifyFailure(s, exc.get());
    return false;
  }
  Value evaluated(ctx, JS_EvalFunction(ctx, module.dup()));
  module.Reset();
  if (evaluated.exception()) {
    s->cpu_armed = false;
    Value exc(ctx, JS_GetException(ctx));
    error = ClassifyFailure(s, exc.get());
    return false;
  }
  const std::string bootstrap = "import f from " + JsonQuote(flow_name) + "; globalThis.__basal_default = f;";
  Value boot(ctx, JS_Eval(ctx, bootstrap.data(), bootstrap.size(), "<basal-bootstrap>", JS_EVAL_TYPE_MODULE));
  DrainJobs(s);
  s->cpu_armed = false;
  if (boot.exception()) {
    Value exc(ctx, JS_GetException(ctx));
    error = ClassifyFailure(s, exc.get());
    if (error.kind == "script_error" && error.name == "SyntaxError")
      error.message = "the flow module has no default export (" + error.message + ")";
    return false;
  }
  JSAtom atom = JS_NewAtom(ctx, "__basal_default");
  s->flow_fn = Value(ctx, JS_GetProperty(ctx, global.get(), atom));
  JS_DeleteProperty(ctx, global.get(), atom, 0);
  JS_FreeAtom(ctx, atom);
  if (!JS_IsFunction(ctx, s->flow_fn.get())) {
    error = {"script_error", "", "TypeError", "the flow module's default export must be a function (input, host)", ""};
    return false;
  }
  return true;
}

Engine::Status Engine::Activate(const protocol::Activate& activate) {
  State* s = state_.get();
  JSContext* ctx = s->ctx;
  s->activation = activate.activation;
  s->next_call_id = 1;
  s->settled = false;
  s->settled_value.Reset();
  s->refused_allocations = 0;
  s->cpu_start_ns = ThreadCpuNs();
  s->cpu_armed = true;

  const std::string input_text = protocol::DumpJson(activate.input);
  Value input(ctx, JS_ParseJSON(ctx, input_text.data(), input_text.size(), "<input>"));
  if (input.exception()) {
    Value exc(ctx, JS_GetException(ctx));
    input = Value(ctx, JS_NULL);
  }
  JSValue args[4] = {s->flow_fn.get(), input.get(), s->host.get(), s->settle_fn.get()};
  Value ran(ctx, JS_Call(ctx, s->runner.get(), JS_UNDEFINED, 4, args));
  if (ran.exception()) {
    Value exc(ctx, JS_GetException(ctx));
    if (!s->settled) {
      s->settled = true;
      s->settled_ok = false;
      s->settled_value = std::move(exc);
    }
  }
  input.Reset();

  Status status = Status::kOk;
  bool never_settled = false;
  for (;;) {
    DrainJobs(s);
    if (s->cpu_exhausted) break;
    if (s->settled && s->pending.empty()) break;
    if (s->pending.empty()) {
      never_settled = true;
      break;
    }
    s->cpu_armed = false;  // time spent waiting for the parent is not the script's CPU
    if (!channel_.Flush()) return Status::kChannelClosed;
    std::string payload;
    switch (channel_.Read(payload)) {
      case Channel::ReadStatus::kEof:
        return Status::kChannelClosed;
      case Channel::ReadStatus::kError:
        channel_error_ = channel_.error();
        return Status::kChannelError;
      case Channel::ReadStatus::kFrame:
        break;
    }
    protocol::ParentMessage msg;
    std::string error;
    if (!protocol::ParseParentMessage(payload, msg, error)) {
      channel_error_ = "bad frame from parent: " + error;
      return Status::kChannelError;
    }
    auto* result = std::get_if<protocol::CallResult>(&msg);
    if (!result) {
      channel_error_ = "parent sent a load or activate while an activation was running";
      return Status::kChannelError;
    }
    s->cpu_armed = true;
    if (result->activation != s->activation) continue;  // an answer for a finished activation
    auto it = s->pending.find(result->id);
    if (it == s->pending.end()) {
      channel_error_ = "parent answered call " + std::to_string(result->id) + ", which is not in flight";
      return Status::kChannelError;
    }
    State::Pending p = std::move(it->second);
    s->pending.erase(it);
    if (p.notify) continue;
    if (result->ok) {
      const std::string text = protocol::DumpJson(result->value);
      Value v(ctx, JS_ParseJSON(ctx, text.data(), text.size(), "<result>"));
      if (v.exception()) {
        Value exc(ctx, JS_GetException(ctx));
        JSValue e = exc.get();
        JS_FreeValue(ctx, JS_Call(ctx, p.reject.get(), JS_UNDEFINED, 1, &e));
      } else {
        JSValue a = v.get();
        JS_FreeValue(ctx, JS_Call(ctx, p.resolve.get(), JS_UNDEFINED, 1, &a));
      }
    } else {
      Value err(ctx, JS_NewError(ctx));
      JS_SetPropertyStr(ctx, err.get(), "name",
                        JS_NewStringLen(ctx, result->error_name.data(), result->error_name.size()));
      JS_SetPropertyStr(ctx, err.get(), "message",
                        JS_NewStringLen(ctx, result->error_message.data(), result->error_message.size()));
      JSValue e = err.get();
      JS_FreeValue(ctx, JS_Call(ctx, p.reject.get(), JS_UNDEFINED, 1, &e));
    }
  }
  const int64_t cpu_ns = ThreadCpuNs() - s->cpu_start_ns;
  s->cpu_armed = false;

  std::string done = "{\"type\":\"done\",\"activation\":" + std::to_string(s->activation) +
                     ",\"cpu_us\":" + std::to_string(cpu_ns > 0 ? cpu_ns / 1000 : 0);
  bool ok_result = false;
  if (s->cpu_exhausted) {
    done += ",\"error\":" + ErrorJson(ClassifyFailure(s, JS_UNDEFINED));
  } else if (never_settled) {
    protocol::ScriptError e{"script_error", "", "Error",
                            "the activation never settled: it awaits a promise that nothing will resolve "
                            "(there are no timers and no host call is in flight)",
                            ""};
    done += ",\"error\":" + ErrorJson(AfterRefusedAllocation(s, std::move(e)));
  } else if (s->settled_ok) {
    bool ok = false;
    std::string error;
    std::string result = StringifyJson(ctx, s->settled_value.get(), ok, error);
    std::string unsendable;
    if (ok && !protocol::FitsInMessage(result, unsendable)) ok = false;
    if (ok) {
      ok_result = true;
      done += ",\"ok\":" + result;
    } else {
      protocol::ScriptError e{"script_error", "", "TypeError",
                              unsendable.empty() ? "the activation's result is not JSON-serializable: " + error
                                                 : "the activation's result is too large to send: " + unsendable,
                              ""};
      done += ",\"error\":" + ErrorJson(AfterRefusedAllocation(s, std::move(e)));
    }
  } else {
    done += ",\"error\":" + ErrorJson(ClassifyFailure(s, s->settled_value.get()));
  }
  if (s->refused_allocations > 0 && s->settled_ok && ok_result) done += ",\"caught_budget_failure\":true";
  done += '}';
  s->settled_value.Reset();
  s->pending.clear();  // answers still in flight after a CPU kill are ignored by activation id
  s->activation = 0;
  channel_.Send(done);
  if (!channel_.Flush()) return Status::kChannelClosed;
  return status;
}

}  // namespace basal::worker
