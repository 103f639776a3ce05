#include "worker/engine.h"

#include <malloc.h>
#include <time.h>
#include <unistd.h>
#include <sys/random.h>
#include <sys/syscall.h>

#include <charconv>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>
#include <string_view>
#include <vector>

#include "worker/durable.h"
#include "worker/js/engine_start_bytecode.h"
#include "worker/own_memory.h"
#include "worker/parent_frames.h"
#include "worker/script_host.h"
#include "worker/web_fetch.h"
#include "worker/web_timers.h"
#include "worker/web_globals.h"

extern "C" {
#include "quickjs.h"
}

namespace basal::worker {
namespace {

constexpr size_t kMallocOverhead = 8;

// `{"type":"done","activation":A,"cpu_us":C` in `out` (two integers of at most 20 characters each).
std::string_view DoneHead(char (&out)[96], int64_t activation, int64_t cpu_us) {
  constexpr std::string_view kType = "{\"type\":\"done\",\"activation\":";
  constexpr std::string_view kCpu = ",\"cpu_us\":";
  char a[24], c[24];  // an int64_t takes at most 20
  const size_t na = static_cast<size_t>(std::to_chars(a, a + sizeof a, activation).ptr - a);
  const size_t nc = static_cast<size_t>(std::to_chars(c, c + sizeof c, cpu_us).ptr - c);
  char* p = out;
  std::memcpy(p, kType.data(), kType.size());
  p += kType.size();
  std::memcpy(p, a, na);
  p += na;
  std::memcpy(p, kCpu.data(), kCpu.size());
  p += kCpu.size();
  std::memcpy(p, c, nc);
  p += nc;
  return std::string_view(out, static_cast<size_t>(p - out));
}

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

// A string QuickJS lends: for an ASCII string, its own bytes (no copy); otherwise a UTF-8 copy in
// the JavaScript heap. Freed when this goes out of scope.
class CString {
 public:
  CString(JSContext* ctx, JSValueConst v) : ctx_(ctx), s_(JS_ToCStringLen(ctx, &len_, v)) {}
  CString(const CString&) = delete;
  CString& operator=(const CString&) = delete;
  ~CString() {
    if (s_) JS_FreeCString(ctx_, s_);
  }
  bool ok() const { return s_ != nullptr; }
  std::string_view view() const { return s_ ? std::string_view(s_, len_) : std::string_view(); }

 private:
  JSContext* ctx_;
  size_t len_ = 0;
  const char* s_;
};

// QuickJS encodes lone surrogates as 3-byte sequences that are not UTF-8; the parent rejects
// invalid UTF-8, so replace them with U+FFFD rather than blame the script for a protocol fault.
void ReplaceLoneSurrogates(std::string& s, size_t from = 0) {
  for (size_t i = from; i + 2 < s.size(); ++i) {
    if (static_cast<unsigned char>(s[i]) == 0xED && (static_cast<unsigned char>(s[i + 1]) & 0xE0) == 0xA0) {
      s[i] = static_cast<char>(0xEF);
      s[i + 1] = static_cast<char>(0xBF);
      s[i + 2] = static_cast<char>(0xBD);
      i += 2;
    }
  }
}

// Error texts and console messages are cut to these sizes, so a script cannot make its own
// `done` or `log` frame too large for the protocol. A message the worker composes around a cut
// text (e.g. "...; the script caught it, then failed with ...") is bounded by twice the size.
constexpr size_t kMaxErrorTextBytes = 64 * 1024;
constexpr size_t kMaxComposedErrorBytes = 2 * kMaxErrorTextBytes;
constexpr size_t kMaxLogMessageBytes = 1024 * 1024;

// Text cut to at most about `max` bytes on a UTF-8 boundary, saying how much was cut. Only the
// first max + 1 bytes are ever copied, however long the text appended to it: a script's 500 MiB
// error message costs the worker 64 KiB, not two more copies of 500 MiB.
class ClippedText {
 public:
  explicit ClippedText(size_t max) : max_(max) {}
  void Append(std::string_view piece) {
    if (kept_.size() <= max_) {
      const size_t room = max_ + 1 - kept_.size();  // one byte past max shows where a character ends
      const size_t start = kept_.size();
      kept_.append(piece.substr(0, room));
      ReplaceLoneSurrogates(kept_, start);
    }
    total_ += piece.size();
  }
  void Append(char c) { Append(std::string_view(&c, 1)); }
  std::string Take() {
    if (total_ <= max_) return std::move(kept_);
    size_t cut = max_;
    while (cut > 0 && (static_cast<unsigned char>(kept_[cut]) & 0xC0) == 0x80) --cut;
    kept_.resize(cut);
    kept_ += " ... [" + std::to_string(total_ - cut) + " bytes cut]";
    return std::move(kept_);
  }

 private:
  size_t max_;
  size_t total_ = 0;
  std::string kept_;
};

std::string Clipped(std::string_view s, size_t max) {
  ClippedText t(max);
  t.Append(s);
  return t.Take();
}

// A JavaScript value's text, cut to `max` bytes while it is copied.
std::string ToClippedString(JSContext* ctx, JSValueConst v, size_t max) {
  CString s(ctx, v);
  if (!s.ok()) {
    JS_FreeValue(ctx, JS_GetException(ctx));
    return "(unprintable value)";
  }
  return Clipped(s.view(), max);
}

// Empties `s` and gives its memory back (assigning an empty string would keep the capacity).
void FreeString(std::string& s) { std::string().swap(s); }

// Sizes for messages: "512 bytes", "64 KiB", "15.0 MiB".
std::string SizeText(uint64_t bytes) {
  char buf[48];
  if (bytes >= 1024 * 1024) {
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  } else if (bytes >= 1024) {
    std::snprintf(buf, sizeof buf, "%" PRIu64 " KiB", bytes / 1024);
  } else {
    std::snprintf(buf, sizeof buf, "%" PRIu64 " bytes", bytes);
  }
  return buf;
}

}  // namespace

struct Engine::State {
  Channel* channel = nullptr;
  JSRuntime* rt = nullptr;
  JSContext* ctx = nullptr;
  Value flow_fn;    // the flow module's default export
  Value runner;     // (value, settle): settles once with what a returned object resolves to
  Value host;       // the frozen `host` object handed to every activation
  Value tools;      // the frozen `tools` object (codemode: the load's tool bindings; else empty)
  Value settle_fn;
  Value tools_builder;  // js/engine_start.js's, made ahead; called once at load with the load's tools

  // Budgets.
  uint64_t heap_limit_bytes = 0;
  int64_t cpu_budget_ns = 0;
  int64_t cpu_start_ns = 0;
  // The thread's CPU clock as the last activation's `done` read it (-1: none yet). The next
  // activation's budget starts there, not at a reading of its own: one system call less per
  // activation (a thread's CPU clock has no vDSO path), at the price of counting the worker's own
  // work between the two (writing that `done`, the end hooks, reading the next frame) into the
  // next activation's `cpu_us` and budget: stricter, never looser.
  int64_t last_done_cpu_ns = -1;
  bool cpu_armed = false;
  bool cpu_exhausted = false;
  uint64_t refused_allocations = 0;
  uint64_t random_state = 1;  // Math.random (xorshift64*), seeded from getrandom at load

  // The heap budget covers the JavaScript heap and what the worker's own code holds for the
  // activation beyond what it held at rest (own_rest_bytes): frames queued to and from the parent,
  // host-call records, JSON texts. Charged only while an activation runs.
  bool charging_own_bytes = false;
  uint64_t own_rest_bytes = 0;
  // What the worker is doing for the script, when it is more than running its code: a refusal in
  // the middle of it is reported as this (e.g. "a host call's result" of `bytes`).
  struct Activity {
    const char* what = nullptr;
    uint64_t bytes = 0;
  };
  Activity activity;
  // The activation's first refused allocation, for the message that reports it.
  struct Refusal {
    const char* what = nullptr;  // e.g. "a host call's message"
    uint64_t request_bytes = 0;
    uint64_t js_heap_bytes = 0;
    uint64_t own_bytes = 0;
  };
  Refusal first_refusal;

  // The activation in progress.
  int64_t activation = 0;
  int64_t next_call_id = 1;
  struct Pending {
    Value resolve;
    Value reject;
    bool notify = false;  // console.* calls: nobody awaits the answer
    bool background = false;  // does not keep the activation open (script_host.h)
  };
  std::map<int64_t, Pending> pending;
  bool settled = false;
  bool settled_ok = false;
  Value settled_value;
  std::vector<Value> activation_end_hooks;  // AddActivationEndHook
  std::vector<Value> idle_hooks;            // AddIdleHook
  // Set when the parent's channel closed or broke in the middle of the activation: the script is
  // stopped (uncatchably, like a CPU kill) and Activate returns this status without a `done`.
  Engine::Status channel_status = Engine::Status::kOk;
  std::string channel_error;
  // Set when the address-space limit refused the worker's own code an allocation it could not turn
  // into an error the script sees: the script is stopped the same way, and the activation ends on
  // its memory budget.
  bool address_space_exhausted = false;

  // Whether the script must be stopped (see the interrupt handler).
  bool stopping() const { return cpu_exhausted || channel_status != Engine::Status::kOk || address_space_exhausted; }

  // QuickJS's allocator state, as the allocator last saw it (the runtime's own, after the first call).
  JSMallocState* malloc_state = nullptr;
};

namespace {

using State = Engine::State;

State* StateOf(JSContext* ctx) { return static_cast<State*>(JS_GetContextOpaque(ctx)); }

// Host calls a script may have sent and not yet seen answered before it must wait: the call that
// would pass this reads answers from the parent first (resolving their promises; the reactions run
// later, as always). So a flood of unawaited calls is paced by the parent instead of piling up
// answers in the parent and records in the worker. One more than the largest calls_in_flight
// budget a manifest may set (1024): with this many unanswered, the parent has answered one of them
// or ended the activation on that budget, so the wait always ends.
constexpr size_t kMaxUnansweredCalls = 1025;
// Frames are written as soon as this much is queued, so a burst of calls does not pile up in the
// worker either; smaller bursts go out together when the script next waits.
constexpr size_t kFlushBytes = 64 * 1024;

uint64_t JsHeapBytes(const State* st) { return st->malloc_state ? st->malloc_state->malloc_size : 0; }

uint64_t ChargedOwnBytes(const State* st) {
  if (!st->charging_own_bytes) return 0;
  const uint64_t now = OwnHeapBytes();
  return now > st->own_rest_bytes ? now - st->own_rest_bytes : 0;
}

// Counts a refused allocation; the first of the activation is the one its message describes.
void Refuse(State* st, const char* what, uint64_t request_bytes, uint64_t js_heap_bytes, uint64_t own_bytes) {
  ++st->refused_allocations;
  if (!st->first_refusal.what) st->first_refusal = {what, request_bytes, js_heap_bytes, own_bytes};
}

// A JavaScript allocation the budget refuses: described as the activity in progress, if any.
void RefuseJs(State* st, const char* why, uint64_t size, uint64_t js_heap_bytes, uint64_t own_bytes) {
  if (st->activity.what) return Refuse(st, st->activity.what, st->activity.bytes, js_heap_bytes, own_bytes);
  Refuse(st, why, size, js_heap_bytes, own_bytes);
}

// Names what the worker does for the script while it lasts (see State::activity).
class ScopedActivity {
 public:
  ScopedActivity(State* st, const char* what, uint64_t bytes) : st_(st), saved_(st->activity) {
    st->activity = {what, bytes};
  }
  ~ScopedActivity() { st_->activity = saved_; }
  ScopedActivity(const ScopedActivity&) = delete;
  ScopedActivity& operator=(const ScopedActivity&) = delete;

 private:
  State* st_;
  State::Activity saved_;
};

// Whether `bytes` more for the worker's own code fit in the heap budget beside what is in use. If
// not, the refusal is counted and described as `what` of `bytes` (or as the activity in progress).
bool OwnRoomFor(State* st, uint64_t bytes, const char* what) {
  const uint64_t js = JsHeapBytes(st);
  const uint64_t own = ChargedOwnBytes(st);
  if (js + own + bytes <= st->heap_limit_bytes) return true;
  RefuseJs(st, what, bytes, js, own);
  return false;
}

// "heap budget of 64 MiB exhausted: a host call's message of 15.0 MiB did not fit beside ..."
std::string HeapBudgetMessage(const State* st) {
  std::string m = "heap budget of " + std::to_string(st->heap_limit_bytes / (1024 * 1024)) + " MiB exhausted";
  const State::Refusal& r = st->first_refusal;
  if (r.what) {
    m += ": ";
    m += r.what;
    if (r.request_bytes > 0) m += " of " + SizeText(r.request_bytes);
    m += " did not fit beside " + SizeText(r.js_heap_bytes) + " of JavaScript heap";
    if (r.own_bytes > 0) m += " and " + SizeText(r.own_bytes) + " held by the worker (frames, call records, JSON texts)";
  }
  return m;
}

void* BudgetMalloc(JSMallocState* s, size_t size) {
  auto* st = static_cast<State*>(s->opaque);
  st->malloc_state = s;
  const uint64_t own = ChargedOwnBytes(st);
  if (s->malloc_size + own + size > s->malloc_limit) {
    RefuseJs(st, "a JavaScript allocation", size, s->malloc_size, own);
    return nullptr;
  }
  void* p = std::malloc(size);
  if (!p) {
    RefuseJs(st, "a JavaScript allocation (refused by the worker's address-space limit)", size, s->malloc_size, own);
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
  st->malloc_state = s;
  const uint64_t own = ChargedOwnBytes(st);
  if (s->malloc_size + own + size - old > s->malloc_limit) {
    RefuseJs(st, "a JavaScript allocation", size, s->malloc_size, own);
    return nullptr;
  }
  void* q = std::realloc(p, size);
  if (!q) {
    RefuseJs(st, "a JavaScript allocation (refused by the worker's address-space limit)", size, s->malloc_size, own);
    return nullptr;
  }
  s->malloc_size += malloc_usable_size(q) - old;
  return q;
}

size_t UsableSize(const void* p) { return malloc_usable_size(const_cast<void*>(p)); }

const JSMallocFunctions kBudgetMalloc = {BudgetMalloc, BudgetFree, BudgetRealloc, UsableSize};

// Called by QuickJS every few thousand bytecodes. Returning 1 raises an uncatchable error; once
// the CPU budget is gone (or the parent's channel failed) it keeps returning 1, so no handler can
// resume the script.
int InterruptHandler(JSRuntime*, void* opaque) {
  auto* st = static_cast<State*>(opaque);
  if (st->stopping()) return 1;
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
    e.name = JS_IsUndefined(name.get()) || name.exception() ? "Error" : ToClippedString(ctx, name.get(), kMaxErrorTextBytes);
    e.message = JS_IsUndefined(message.get()) || message.exception() ? ToClippedString(ctx, v, kMaxErrorTextBytes)
                                                                       : ToClippedString(ctx, message.get(), kMaxErrorTextBytes);
    if (JS_IsString(stack.get())) e.stack = ToClippedString(ctx, stack.get(), kMaxErrorTextBytes);
    JS_FreeValue(ctx, JS_GetException(ctx));  // a throwing getter leaves nothing behind
  } else {
    e.name = "Error";
    e.message = "non-error value thrown: " + ToClippedString(ctx, v, kMaxErrorTextBytes);
  }
  return e;
}

// The line QuickJS's parser put on the error it threw while compiling `file` (its `lineNumber`,
// set beside `fileName` for a syntax error), or 0 when the error carries none for that file.
int64_t CompileErrorLine(JSContext* ctx, JSValueConst error, const std::string& file) {
  if (!JS_IsObject(error)) return 0;
  Value file_name(ctx, JS_GetPropertyStr(ctx, error, "fileName"));
  Value line(ctx, JS_GetPropertyStr(ctx, error, "lineNumber"));
  JS_FreeValue(ctx, JS_GetException(ctx));  // nothing a getter could throw is left behind
  if (!JS_IsString(file_name.get()) || JS_VALUE_GET_TAG(line.get()) != JS_TAG_INT) return 0;
  const char* name = JS_ToCString(ctx, file_name.get());
  const bool same = name != nullptr && file == name;
  JS_FreeCString(ctx, name);
  const int32_t n = JS_VALUE_GET_INT(line.get());
  return same && n >= 1 ? n : 0;
}

protocol::ScriptError MemoryExhausted(const State* st) {
  return {"budget_exhausted", "memory", "InternalError", HeapBudgetMessage(st), ""};
}

// An activation that saw a refused allocation and then failed in some other way still failed
// on its memory budget: the script caught the refusal but did not complete normally, and the
// engine's state is not trusted (so the parent retires the worker).
protocol::ScriptError AfterRefusedAllocation(const State* st, protocol::ScriptError e) {
  if (st->refused_allocations == 0 || e.kind == "budget_exhausted") return e;
  e.kind = "budget_exhausted";
  e.budget = "memory";
  e.message = HeapBudgetMessage(st) + "; the script caught it, then failed with " + e.name + ": " + e.message;
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
  // QuickJS throws null when it cannot even allocate the out-of-memory error.
  if (JS_IsNull(thrown) && st->refused_allocations > 0) return MemoryExhausted(st);
  protocol::ScriptError e = DescribeThrown(st->ctx, thrown);
  if (e.name == "InternalError" && e.message == "out of memory" && st->refused_allocations > 0) {
    e = MemoryExhausted(st);
  } else if (e.name == "InternalError" && e.message == "stack overflow") {
    e.kind = "budget_exhausted";
    e.budget = "stack";
    e.message = "stack budget exhausted (stack overflow)";
  } else {
    e = AfterRefusedAllocation(st, std::move(e));
  }
  return e;
}

// Whether an exception must reach the script as it is, not be reworded: the engine's
// out-of-memory error (or the null it throws when even that could not be allocated), and the
// uncatchable error of a CPU kill or a failed channel.
bool MustPropagate(State* st, JSValueConst thrown) {
  if (st->stopping()) return true;
  if (st->refused_allocations == 0) return false;
  if (JS_IsNull(thrown)) return true;
  const protocol::ScriptError e = DescribeThrown(st->ctx, thrown);
  return e.name == "InternalError" && e.message == "out of memory";
}

// JSON.stringify(v) as a JavaScript string (in the budgeted heap); undefined for a value JSON
// cannot represent (a function, say). On an exception, `error` holds its message, unless it must
// propagate (MustPropagate): then it is left pending and `propagate` is set.
Value StringifyToJs(JSContext* ctx, JSValueConst v, std::string& error, bool& propagate) {
  Value s(ctx, JS_JSONStringify(ctx, v, JS_UNDEFINED, JS_UNDEFINED));
  propagate = false;
  if (s.exception()) {
    Value exc(ctx, JS_GetException(ctx));
    if (MustPropagate(StateOf(ctx), exc.get())) {
      propagate = true;
      JS_Throw(ctx, exc.dup());
    } else {
      error = DescribeThrown(ctx, exc.get()).message;
    }
  }
  return s;
}

// JSON text borrowed from a JavaScript string (undefined: "null"), with lone surrogates replaced
// (only then copied).
class JsonText {
 public:
  JsonText(JSContext* ctx, JSValueConst json) {
    if (JS_IsUndefined(json)) {
      text_ = "null";
      return;
    }
    c_.emplace(ctx, json);
    text_ = c_->view();
    if (text_.find('\xED') != std::string_view::npos) {
      fixed_.assign(text_);
      ReplaceLoneSurrogates(fixed_);
      text_ = fixed_;
    }
  }
  // False when QuickJS could not lend the text (out of memory; the exception is pending).
  bool ok() const { return text_.data() != nullptr; }
  std::string_view text() const { return text_; }

 private:
  std::optional<CString> c_;
  std::string_view text_;
  std::string fixed_;
};

// The JSON text of a value whose text JSON.stringify would write without looking at anything
// (an integer QuickJS holds as one, a boolean, null; undefined, as the result's "null"): the
// common result of a flow, sent without JSON.stringify's holder object and string buffer.
bool PlainJson(JSValueConst v, std::string& text) {
  switch (JS_VALUE_GET_TAG(v)) {
    case JS_TAG_INT:
      text = std::to_string(JS_VALUE_GET_INT(v));
      return true;
    case JS_TAG_BOOL:
      text = JS_VALUE_GET_BOOL(v) ? "true" : "false";
      return true;
    case JS_TAG_NULL:
    case JS_TAG_UNDEFINED:
      text = "null";
      return true;
    default:
      return false;
  }
}

// JSON.parse of `text`. The texts most answers and inputs are (null, a boolean, an integer of up
// to 9 digits without a leading zero) are made without the parser, as it would make them; any
// other text (-0, a fraction, anything longer) goes through JS_ParseJSON.
JSValue ParseJsonText(JSContext* ctx, std::string_view text, const char* filename) {
  if (text == "null") return JS_NULL;
  if (text == "true") return JS_TRUE;
  if (text == "false") return JS_FALSE;
  const bool negative = !text.empty() && text[0] == '-';
  const std::string_view digits = text.substr(negative ? 1 : 0);
  bool integer = !digits.empty() && digits.size() <= 9 && (digits[0] != '0' || (digits.size() == 1 && !negative));
  int32_t v = 0;
  for (size_t i = 0; integer && i < digits.size(); ++i) {
    integer = digits[i] >= '0' && digits[i] <= '9';
    v = v * 10 + (digits[i] - '0');
  }
  if (integer) return JS_NewInt32(ctx, negative ? -v : v);
  return JS_ParseJSON(ctx, text.data(), text.size(), filename);
}

// Printable ASCII without a quote or backslash (every name basal's host calls have): a JSON
// string's text as it is, between its quotes.
bool IsPlainName(std::string_view s) {
  for (const char c : s)
    if (c < 0x20 || c > 0x7e || c == '"' || c == '\\') return false;
  return true;
}

// A host call's name as a JSON string, as protocol::DumpJson writes it. A plain name is written as
// is, without a tree and a serializer per call; any other goes through DumpJson, which escapes and
// repairs it.
std::string JsonQuote(std::string_view s) {
  if (!IsPlainName(s)) return protocol::DumpJson(protocol::Json(std::string(s)));
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  out += s;
  out += '"';
  return out;
}

// The refusal of an allocation by the address-space limit, outside any JavaScript call.
void AddressSpaceExhausted(State* st) {
  Refuse(st, "an allocation of the worker's own (refused by its address-space limit)", 0, JsHeapBytes(st),
         ChargedOwnBytes(st));
  st->address_space_exhausted = true;
}

bool ApplyNextAnswer(State* st);

// Blocks for the next frame from the parent and applies it: an answer to a call in flight
// resolves or rejects its promise (whose reactions run when the script next yields). False if the
// script must stop: the channel closed or broke (channel_status says which), or the address-space
// limit refused what reading the frame needed.
bool ReceiveAnswer(State* st) {
  try {
    return ApplyNextAnswer(st);
  } catch (const std::bad_alloc&) {
    AddressSpaceExhausted(st);
    return false;
  }
}

bool ApplyNextAnswer(State* st) {
  JSContext* ctx = st->ctx;
  const bool cpu_armed = st->cpu_armed;
  st->cpu_armed = false;  // time spent waiting for the parent is not the script's CPU
  if (!st->channel->Flush()) {
    st->channel_status = Engine::Status::kChannelClosed;
    return false;
  }
  std::string payload;
  switch (st->channel->Read(payload)) {
    case Channel::ReadStatus::kEof:
      st->channel_status = Engine::Status::kChannelClosed;
      return false;
    case Channel::ReadStatus::kError:
      st->channel_status = Engine::Status::kChannelError;
      st->channel_error = st->channel->error();
      return false;
    case Channel::ReadStatus::kFrame:
      break;
  }
  st->cpu_armed = cpu_armed;
  protocol::ParentMessage msg;
  std::string value_json;
  std::string error;
  if (!ParseParentFrame(std::move(payload), msg, value_json, error)) {
    st->channel_status = Engine::Status::kChannelError;
    st->channel_error = "bad frame from parent: " + error;
    return false;
  }
  if (std::holds_alternative<protocol::Poll>(msg)) {
    // An answer that took long is on its way (its journaling and commit still ahead): poll for it
    // before blocking again (wait_spin.h), so that this wake-up overlaps them.
    st->channel->PollNextWait();
    return true;
  }
  auto* result = std::get_if<protocol::CallResult>(&msg);
  if (!result) {
    st->channel_status = Engine::Status::kChannelError;
    st->channel_error = "parent sent a load or activate while an activation was running";
    return false;
  }
  st->channel->set_may_poll(result->poll);
  // A durable run's clock moves with the answer before anything it settles runs.
  if (!TakeAnswerClock(result->clock_us, error)) {
    st->channel_status = Engine::Status::kChannelError;
    st->channel_error = "bad frame from parent: " + error;
    return false;
  }
  if (result->activation != st->activation) return true;  // an answer for a finished activation
  auto it = st->pending.find(result->id);
  if (it == st->pending.end()) {
    st->channel_status = Engine::Status::kChannelError;
    st->channel_error = "parent answered call " + std::to_string(result->id) + ", which is not in flight";
    return false;
  }
  State::Pending p = std::move(it->second);
  st->pending.erase(it);
  if (p.notify) return true;
  if (p.background && st->settled) return true;  // the activation is ending: nobody waits for it
  Value outcome;
  bool ok = false;
  if (result->ok) {
    // The result's text is already held (and charged) here; its value goes into the JavaScript heap.
    ScopedActivity doing(st, "a host call's result", value_json.size());
    Value v(ctx, OwnRoomFor(st, 0, nullptr) ? ParseJsonText(ctx, value_json, "<result>") : JS_ThrowOutOfMemory(ctx));
    FreeString(value_json);
    if (v.exception()) {
      outcome = Value(ctx, JS_GetException(ctx));
    } else {
      outcome = std::move(v);
      ok = true;
    }
  } else {
    outcome = Value(ctx, JS_NewError(ctx));
    JS_SetPropertyStr(ctx, outcome.get(), "name",
                      JS_NewStringLen(ctx, result->error_name.data(), result->error_name.size()));
    JS_SetPropertyStr(ctx, outcome.get(), "message",
                      JS_NewStringLen(ctx, result->error_message.data(), result->error_message.size()));
  }
  JSValue a = outcome.get();
  JS_FreeValue(ctx, JS_Call(ctx, ok ? p.resolve.get() : p.reject.get(), JS_UNDEFINED, 1, &a));
  return true;
}

// Sends a call frame and, unless `notify`, returns a promise for its answer.
JSValue StartCall(JSContext* ctx, std::string_view name, JSValueConst args, bool notify, bool background = false) {
  State* st = StateOf(ctx);
  while (st->pending.size() >= kMaxUnansweredCalls && !st->stopping()) ReceiveAnswer(st);
  if (st->stopping()) return JS_ThrowInternalError(ctx, "host.call: the activation is being stopped");
  std::string error;
  // Arguments JSON.stringify writes without looking at anything (none, null, a boolean, an
  // integer) are written without it; any other value goes through JSON.stringify.
  std::string plain_args;
  const bool plain = PlainJson(args, plain_args);
  bool propagate = false;
  Value json;
  if (!plain) {
    ScopedActivity doing(st, "a host call's arguments", 0);
    json = StringifyToJs(ctx, args, error, propagate);
  }
  if (propagate) return JS_EXCEPTION;
  if (json.exception()) return JS_ThrowTypeError(ctx, "host.call: arguments are not JSON-serializable: %s", error.c_str());
  std::optional<JsonText> stringified;
  if (!plain) {
    stringified.emplace(ctx, json.get());
    if (!stringified->ok()) return JS_EXCEPTION;
  }
  const std::string_view args_text = plain ? std::string_view(plain_args) : stringified->text();
  if (!protocol::FitsInMessage(args_text, error))
    return JS_ThrowTypeError(ctx, "host.call: arguments too large to send: %s", error.c_str());
  // The promise first: a call is sent only once nothing can fail before its record exists.
  State::Pending p;
  p.notify = notify;
  p.background = background;
  JSValue result = JS_UNDEFINED;
  if (!notify) {
    JSValue funcs[2];
    result = JS_NewPromiseCapability(ctx, funcs);
    if (JS_IsException(result)) return result;
    p.resolve = Value(ctx, funcs[0]);
    p.reject = Value(ctx, funcs[1]);
  }
  Value promise(ctx, result);
  // The frame is copied into the channel's queue, and the record kept until the answer comes.
  constexpr size_t kFrameFieldsBytes = 128;  // {"type":"call",...} around the name and arguments
  constexpr size_t kRecordBytes = 128;       // the pending-call record
  if (!OwnRoomFor(st, name.size() + args_text.size() + kFrameFieldsBytes + kRecordBytes,
                  "a host call's message to the parent"))
    return JS_ThrowOutOfMemory(ctx);
  const int64_t id = st->next_call_id;
  char activation_digits[24], id_digits[24];
  const char* activation_end = std::to_chars(activation_digits, activation_digits + 24, st->activation).ptr;
  const char* id_end = std::to_chars(id_digits, id_digits + 24, id).ptr;
  // The name in its quotes as it is (every name basal's host calls have), or escaped by JsonQuote.
  const bool plain_name = IsPlainName(name);
  const std::string escaped_name = plain_name ? std::string() : JsonQuote(name);
  auto [it, inserted] = st->pending.emplace(id, std::move(p));
  try {
    st->channel->Send({"{\"type\":\"call\",\"activation\":",
                       std::string_view(activation_digits, static_cast<size_t>(activation_end - activation_digits)),
                       ",\"id\":", std::string_view(id_digits, static_cast<size_t>(id_end - id_digits)),
                       plain_name ? ",\"name\":\"" : ",\"name\":", plain_name ? name : std::string_view(escaped_name),
                       plain_name ? "\",\"args\":" : ",\"args\":", args_text, "}"});
  } catch (const std::bad_alloc&) {
    st->pending.erase(it);
    throw;
  }
  ++st->next_call_id;
  if (st->channel->queued_bytes() >= kFlushBytes && !st->channel->Flush()) {
    st->channel_status = Engine::Status::kChannelClosed;
    return JS_ThrowInternalError(ctx, "host.call: the activation is being stopped");
  }
  return notify ? JS_UNDEFINED : promise.dup();
}

// Runs a native function's body; an allocation that the worker's address-space limit refuses
// becomes the engine's out-of-memory error in the script rather than a C++ exception through
// QuickJS's C frames (which would abort the worker).
template <typename Body>
JSValue Guarded(JSContext* ctx, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    State* st = StateOf(ctx);
    Refuse(st, "an allocation of the worker's own (refused by its address-space limit)", 0, JsHeapBytes(st),
           ChargedOwnBytes(st));
    return JS_ThrowOutOfMemory(ctx);  // the script may catch it, as it may catch any refusal
  }
}

// host.call(name, args) -> Promise. magic 1: a background call (script_host.h).
JSValue HostCall(JSContext* ctx, JSValueConst, int argc, JSValueConst* argv, int magic) {
  return Guarded(ctx, [&]() -> JSValue {
    State* st = StateOf(ctx);
    if (st->activation == 0)
      return JS_ThrowTypeError(ctx, "host.call: no activation is running (module top level cannot call the host)");
    if (argc < 1 || !JS_IsString(argv[0]))
      return JS_ThrowTypeError(ctx, "host.call: the first argument must be the host-call name (a string)");
    CString name(ctx, argv[0]);
    if (!name.ok()) return JS_EXCEPTION;
    if (name.view().empty() || name.view().size() > 128)
      return JS_ThrowTypeError(ctx, "host.call: the name must be 1 to 128 characters");
    return StartCall(ctx, name.view(), argc >= 2 ? argv[1] : JS_UNDEFINED, /*notify=*/false,
                     /*background=*/magic == 1);
  });
}

// console.log/info/warn/error/debug -> a `log` host call nobody awaits.
JSValue ConsoleLog(JSContext* ctx, JSValueConst, int argc, JSValueConst* argv, int magic) {
  static const char* const kLevels[] = {"log", "info", "warn", "error", "debug"};
  return Guarded(ctx, [&]() -> JSValue {
    State* st = StateOf(ctx);
    if (st->activation == 0) return JS_UNDEFINED;  // module top level: nowhere to journal it
    std::string m;
    {
      ClippedText message(kMaxLogMessageBytes);
      ScopedActivity doing(st, "a console message", 0);
      for (int i = 0; i < argc; ++i) {
        if (i) message.Append(' ');
        // Objects as JSON (undefined from JSON.stringify as null; one it cannot serialize as
        // String(value)); anything else as String(value).
        Value json;
        bool as_json = false;
        if (JS_IsObject(argv[i]) && !JS_IsFunction(ctx, argv[i])) {
          std::string error;
          bool propagate = false;
          json = StringifyToJs(ctx, argv[i], error, propagate);
          if (propagate) return JS_EXCEPTION;
          if (!json.exception()) {
            if (JS_IsUndefined(json.get())) {
              message.Append("null");
              continue;
            }
            as_json = true;
          }
        }
        CString text(ctx, as_json ? json.get() : argv[i]);
        if (!text.ok()) {
          Value exc(ctx, JS_GetException(ctx));
          if (MustPropagate(st, exc.get())) return JS_Throw(ctx, exc.dup());
          message.Append("(unprintable value)");
          continue;
        }
        message.Append(text.view());
      }
      m = message.Take();
    }
    Value args(ctx, JS_NewObject(ctx));
    JS_SetPropertyStr(ctx, args.get(), "level", JS_NewString(ctx, kLevels[magic]));
    JS_SetPropertyStr(ctx, args.get(), "message", JS_NewStringLen(ctx, m.data(), m.size()));
    JSValue r = StartCall(ctx, "log", args.get(), /*notify=*/true);
    if (JS_IsException(r)) return r;
    return JS_UNDEFINED;
  });
}

// Math.random. QuickJS seeds its own generator from the time of day in microseconds, so workers
// started in the same microsecond would draw the same sequence; this one is seeded per worker
// from getrandom. A durable run draws from its seed's keystream instead (durable.h). Not for
// secrets: Math.random never is.
JSValue MathRandom(JSContext* ctx, JSValueConst, int, JSValueConst*) {
  if (DurableRun* run = ActiveDurableRun()) return JS_NewFloat64(ctx, run->NextMathRandom());
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

// settle(ok, value): the bootstrap calls it exactly once per activation.
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
      strings.emplace_back(CString(ctx, argv[i]).view());
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

void DrainJobs(State* st) {
  for (;;) {
    JSContext* job_ctx = nullptr;
    const int r = JS_ExecutePendingJob(st->rt, &job_ctx);
    if (r == 0) return;
    if (r < 0) JS_FreeValue(st->ctx, JS_GetException(st->ctx));
    if (st->stopping()) return;
  }
}

std::string ErrorJson(const protocol::ScriptError& e) {
  protocol::Json j = {{"kind", e.kind}, {"name", Clipped(e.name, kMaxComposedErrorBytes)},
                      {"message", Clipped(e.message, kMaxComposedErrorBytes)}};
  if (!e.stack.empty()) j["stack"] = Clipped(e.stack, kMaxComposedErrorBytes);
  if (!e.budget.empty()) j["budget"] = e.budget;
  return protocol::DumpJson(j);
}

// Whether every call in flight is a background one (or none is): then a settled activation ends.
bool OnlyBackgroundPending(const State* st) {
  for (const auto& [id, p] : st->pending)
    if (!p.background) return false;
  return true;
}

// After the activation: the web globals drop what it left. Runs with no CPU budget armed, so the
// hooks must be trivial (they only drop references) and no job the flow queued runs here.
void RunActivationEndHooks(State* st) {
  for (const Value& hook : st->activation_end_hooks) {
    Value r(st->ctx, JS_Call(st->ctx, hook.get(), JS_UNDEFINED, 0, nullptr));
    if (r.exception()) JS_FreeValue(st->ctx, JS_GetException(st->ctx));
  }
}

// The script has no job left: each idle hook may run one piece of script (a due timer). True if
// one did, so its jobs run before the engine next waits for the parent. A hook that throws ends
// the activation with what it threw, as the export's rejection would.
bool RunIdleHooks(State* st) {
  for (const Value& hook : st->idle_hooks) {
    Value r(st->ctx, JS_Call(st->ctx, hook.get(), JS_UNDEFINED, 0, nullptr));
    if (r.exception()) {
      Value exc(st->ctx, JS_GetException(st->ctx));
      if (!st->settled) {
        st->settled = true;
        st->settled_ok = false;
        st->settled_value = std::move(exc);
      }
      return true;
    }
    if (JS_ToBool(st->ctx, r.get()) == 1) return true;
  }
  return false;
}

}  // namespace

JSValue NewHostCallFunction(JSContext* ctx, bool background) {
  return JS_NewCFunctionMagic(ctx, HostCall, "call", 2, JS_CFUNC_generic_magic, background ? 1 : 0);
}

int64_t RunningActivation(JSContext* ctx) { return StateOf(ctx)->activation; }

void FailActivation(JSContext* ctx, JSValueConst error) {
  State* st = StateOf(ctx);
  if (st->activation == 0 || st->settled) return;
  st->settled = true;
  st->settled_ok = false;
  st->settled_value = Value(ctx, JS_DupValue(ctx, error));
}

void AddActivationEndHook(JSContext* ctx, JSValueConst fn) {
  StateOf(ctx)->activation_end_hooks.emplace_back(ctx, JS_DupValue(ctx, fn));
}

void AddIdleHook(JSContext* ctx, JSValueConst fn) { StateOf(ctx)->idle_hooks.emplace_back(ctx, JS_DupValue(ctx, fn)); }

Engine::Engine(Channel& channel) : channel_(channel) {}

Engine::~Engine() {
  if (!state_) return;
  state_->pending.clear();
  state_->settled_value.Reset();
  state_->activation_end_hooks.clear();
  state_->idle_hooks.clear();
  state_->flow_fn.Reset();
  state_->runner.Reset();
  state_->host.Reset();
  state_->tools.Reset();
  state_->settle_fn.Reset();
  state_->tools_builder.Reset();
  if (state_->ctx) JS_FreeContext(state_->ctx);
  if (state_->rt) JS_FreeRuntime(state_->rt);
}

bool Engine::Load(const protocol::Load& load, protocol::ScriptError& error) {
  try {
    return LoadFlow(load, error);
  } catch (const std::bad_alloc&) {
    error = {"budget_exhausted", "memory", "InternalError",
             "the worker's address-space limit refused an allocation while it loaded the flow", ""};
    return false;
  }
}

void Engine::Prepare() {
  if (state_ || prepare_error_) return;
  try {
    Build();
  } catch (const std::bad_alloc&) {
    prepare_error_ = protocol::ScriptError{"budget_exhausted", "memory", "InternalError",
                                           "the worker's address-space limit refused an allocation while it made the "
                                           "JavaScript runtime",
                                           ""};
  }
}

// Everything of the engine that no load decides: the runtime, the context, the globals, the
// runner and the host object, made before any script exists (a worker runs one script for life).
// No budget is in force yet, and none is needed: nothing here runs a script's code; the
// runtime's allocations so far are counted in its heap (malloc_size) and so charged to the budget
// the load sets. QuickJS reads the time once here (JS_NewContext seeds its own Math.random from
// gettimeofday; made ahead of a load, before a durable run's clock has started); that generator
// is unreachable, since Math.random is replaced below.
void Engine::Build() {
  auto st = std::make_unique<State>();
  st->channel = &channel_;
  st->rt = JS_NewRuntime2(&kBudgetMalloc, st.get());
  if (!st->rt) {
    prepare_error_ = protocol::ScriptError{"budget_exhausted", "memory", "InternalError", "cannot create the JavaScript runtime", ""};
    return;
  }
  JS_SetInterruptHandler(st->rt, InterruptHandler, st.get());
  JS_SetModuleLoaderFunc(st->rt, nullptr, RefuseImport, nullptr);
  st->ctx = JS_NewContext(st->rt);
  if (!st->ctx) {
    prepare_error_ = protocol::ScriptError{"budget_exhausted", "memory", "InternalError", "cannot create the JavaScript context", ""};
    state_ = std::move(st);
    return;
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
  // A durable run draws from its own stream instead (MathRandom); the seed is then never read.
  s->random_state = RandomSeed();
  {
    Value math(ctx, JS_GetPropertyStr(ctx, global.get(), "Math"));
    JS_DefinePropertyValueStr(ctx, math.get(), "random", JS_NewCFunction(ctx, MathRandom, "random", 0),
                              JS_PROP_WRITABLE | JS_PROP_CONFIGURABLE);
  }
  if (!InstallLazyGlobals(ctx, WebGlobals())) {  // accessors only: nothing loads before first use
    prepare_error_ = protocol::ScriptError{"budget_exhausted", "memory", "InternalError", "cannot install the web globals", ""};
    return;
  }
#ifdef BASAL_TEST_HOOKS
  Value test(ctx, JS_NewObject(ctx));
  JS_SetPropertyStr(ctx, test.get(), "syscall", JS_NewCFunction(ctx, TestSyscall, "syscall", 1));
  JS_SetPropertyStr(ctx, test.get(), "int80", JS_NewCFunction(ctx, TestInt80, "int80", 1));
  JS_SetPropertyStr(ctx, test.get(), "abort", JS_NewCFunction(ctx, TestAbort, "abort", 0));
  JS_SetPropertyStr(ctx, global.get(), "__basal_test", test.dup());
#endif

  s->host = Value(ctx, JS_NewObject(ctx));
  JS_SetPropertyStr(ctx, s->host.get(), "call", NewHostCallFunction(ctx, /*background=*/false));
  s->settle_fn = Value(ctx, JS_NewCFunction(ctx, Settle, "settle", 2));
  // The runner, the tools builder and Object.freeze, from bytecode compiled at build time
  // (js/engine_start.js): no parse at a worker's start. Read only from the worker's own image.
  const JSValue code = JS_ReadObject(ctx, bytecode::kengine_start, bytecode::kengine_startSize, JS_READ_OBJ_BYTECODE);
  Value start(ctx, JS_IsException(code) ? code : JS_EvalFunction(ctx, code));  // JS_EvalFunction takes `code`
  if (start.exception()) {
    Value exc(ctx, JS_GetException(ctx));
    prepare_error_ = ClassifyFailure(s, exc.get());
    return;
  }
  s->runner = Value(ctx, JS_GetPropertyUint32(ctx, start.get(), 0));
  s->tools_builder = Value(ctx, JS_GetPropertyUint32(ctx, start.get(), 1));
  Value freeze(ctx, JS_GetPropertyUint32(ctx, start.get(), 2));
  JSValue h = s->host.get();
  Value frozen(ctx, JS_Call(ctx, freeze.get(), JS_UNDEFINED, 1, &h));
  if (s->runner.exception() || s->tools_builder.exception() || freeze.exception() || frozen.exception()) {
    Value exc(ctx, JS_GetException(ctx));
    prepare_error_ = ClassifyFailure(s, exc.get());
    return;
  }
}

bool Engine::LoadFlow(const protocol::Load& load, protocol::ScriptError& error) {
  // Before any script runs: everything the script reads of the time, from its module's top level
  // on, reads a durable run's clock.
  StartClocks(load.durable);
  Prepare();  // unless it was made ahead
  if (prepare_error_) {
    error = *prepare_error_;
    return false;
  }
  State* s = state_.get();
  JSContext* ctx = s->ctx;
  // The load's budgets, in force before anything of the script exists. The stack is measured from
  // here, as it was when the runtime was made at load.
  s->heap_limit_bytes = static_cast<uint64_t>(load.heap_bytes);
  s->cpu_budget_ns = load.cpu_ms * 1'000'000;
  if (JsHeapBytes(s) > s->heap_limit_bytes) {
    // What the runtime already holds would not have fitted had it been made under this budget.
    error = {"budget_exhausted", "memory", "InternalError", "cannot create the JavaScript context", ""};
    return false;
  }
  JS_SetMemoryLimit(s->rt, s->heap_limit_bytes);
  JS_UpdateStackTop(s->rt);
  JS_SetMaxStackSize(s->rt, static_cast<size_t>(load.stack_bytes));
  Value global(ctx, JS_GetGlobalObject(ctx));
  {
    protocol::Json list = protocol::Json::array();
    for (const protocol::ToolBinding& t : load.tools) list.push_back(protocol::Json::array({t.group, t.member, t.name}));
    const std::string list_json = protocol::DumpJson(list);
    Value parsed(ctx, JS_ParseJSON(ctx, list_json.data(), list_json.size(), "<tools>"));
    if (!parsed.exception()) {
      JSValue args[2] = {s->host.get(), parsed.get()};
      s->tools = Value(ctx, JS_Call(ctx, s->tools_builder.get(), JS_UNDEFINED, 2, args));
    }
    s->tools_builder.Reset();
    if (parsed.exception() || s->tools.exception()) {
      Value exc(ctx, JS_GetException(ctx));
      error = ClassifyFailure(s, exc.get());
      return false;
    }
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
    if (error.kind == "script_error") error.line = CompileErrorLine(ctx, exc.get(), flow_name);
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

Engine::Status Engine::Activate(int64_t activation, std::string input_json) {
  State* s = state_.get();
  s->activation = activation;
  s->next_call_id = 1;
  s->settled = false;
  s->settled_value.Reset();
  s->refused_allocations = 0;
  s->first_refusal = {};
  s->activity = {};
  s->address_space_exhausted = false;
  s->cpu_start_ns = s->last_done_cpu_ns >= 0 ? s->last_done_cpu_ns : ThreadCpuNs();
  s->cpu_armed = true;
  Status status = Status::kOk;
  try {
    status = RunActivation(std::move(input_json));
  } catch (const std::bad_alloc&) {
    // Last resort: everything the worker builds for a script is checked against the heap budget
    // before it is built, so only the address-space limit (RLIMIT_AS, the budget plus headroom)
    // refusing an allocation lands here. The activation ends on its memory budget all the same;
    // what it held is released by now, so the small `done` below fits.
    s->last_done_cpu_ns = ThreadCpuNs();
    const int64_t cpu_ns = s->last_done_cpu_ns - s->cpu_start_ns;
    AddressSpaceExhausted(s);
    s->pending.clear();
    s->settled_value.Reset();
    channel_.Send("{\"type\":\"done\",\"activation\":" + std::to_string(s->activation) +
                  ",\"cpu_us\":" + std::to_string(cpu_ns > 0 ? cpu_ns / 1000 : 0) +
                  ",\"error\":" + ErrorJson(MemoryExhausted(s)) + "}");
    status = channel_.Flush() ? Status::kOk : Status::kChannelClosed;
  }
  s->charging_own_bytes = false;
  s->cpu_armed = false;
  s->activation = 0;
  if (status == Status::kOk) RunActivationEndHooks(s);
  return status;
}

Engine::Status Engine::RunActivation(std::string input_json) {
  State* s = state_.get();
  JSContext* ctx = s->ctx;
  Value input;
  {
    ScopedActivity doing(s, "the activation's input", input_json.size());
    input = Value(ctx, ParseJsonText(ctx, input_json, "<input>"));
  }
  FreeString(input_json);
  // From here on, what the worker's own code holds beyond this is charged to the heap budget.
  s->own_rest_bytes = OwnHeapBytes();
  s->charging_own_bytes = true;
  if (input.exception()) {
    // Only the budget can refuse an input the parent checked: the activation fails on it.
    s->settled = true;
    s->settled_ok = false;
    s->settled_value = Value(ctx, JS_GetException(ctx));
  } else {
    // The export is called here, not inside a promise's executor: a throw and a value that is no
    // object settle the activation at once, as the jobs of `new Promise(r => r(fn(...)))` would
    // settle it once drained (the loop below drains every job before it asks whether the
    // activation settled), without the promise, its closures and their jobs on every activation.
    JSValue args[3] = {input.get(), s->host.get(), s->tools.get()};
    Value returned(ctx, JS_Call(ctx, s->flow_fn.get(), JS_UNDEFINED, 3, args));
    Value ran;
    if (!returned.exception() && JS_IsObject(returned.get())) {
      JSValue settle_args[2] = {returned.get(), s->settle_fn.get()};
      ran = Value(ctx, JS_Call(ctx, s->runner.get(), JS_UNDEFINED, 2, settle_args));
    }
    if (returned.exception() || ran.exception()) {
      Value exc(ctx, JS_GetException(ctx));
      if (!s->settled) {
        s->settled = true;
        s->settled_ok = false;
        s->settled_value = std::move(exc);
      }
    } else if (!JS_IsObject(returned.get()) && !s->settled) {
      s->settled = true;
      s->settled_ok = true;
      s->settled_value = std::move(returned);
    }
  }
  input.Reset();

  bool never_settled = false;
  for (;;) {
    DrainJobs(s);
    if (s->stopping()) break;
    if (!s->settled && RunIdleHooks(s)) continue;  // a due timer ran: its jobs first
    if (s->settled && OnlyBackgroundPending(s)) break;
    if (s->pending.empty()) {
      never_settled = true;
      break;
    }
    if (!ReceiveAnswer(s)) break;
  }
  if (s->channel_status != Status::kOk) {
    channel_error_ = s->channel_error;
    s->pending.clear();
    s->settled_value.Reset();
    return s->channel_status;
  }
  s->last_done_cpu_ns = ThreadCpuNs();
  const int64_t cpu_ns = s->last_done_cpu_ns - s->cpu_start_ns;
  s->cpu_armed = false;

  // Written on the stack: the `done` of every activation, with no allocation for its head.
  char head_text[96];
  const std::string_view head = DoneHead(head_text, s->activation, cpu_ns > 0 ? cpu_ns / 1000 : 0);
  std::string error;  // the `error` field's JSON, unless the result is sent
  std::string plain;  // a result JSON.stringify need not write (PlainJson)
  if (s->cpu_exhausted) {
    error = ErrorJson(ClassifyFailure(s, JS_UNDEFINED));
  } else if (s->address_space_exhausted) {
    error = ErrorJson(MemoryExhausted(s));
  } else if (never_settled) {
    protocol::ScriptError e{"script_error", "", "Error",
                            "the activation never settled: it awaits a promise that nothing will resolve "
                            "(no timer is pending and no host call is in flight)",
                            ""};
    error = ErrorJson(AfterRefusedAllocation(s, std::move(e)));
  } else if (s->settled_ok && PlainJson(s->settled_value.get(), plain)) {
    if (!OwnRoomFor(s, plain.size() + head.size() + 64, "the activation's result")) {
      error = ErrorJson(MemoryExhausted(s));
    } else {
      const bool caught = s->refused_allocations > 0;
      channel_.Send({head, ",\"ok\":", plain, caught ? ",\"caught_budget_failure\":true}" : "}"});
    }
  } else if (s->settled_ok) {
    std::string why;
    bool propagate = false;
    Value json;
    {
      ScopedActivity doing(s, "the activation's result", 0);
      json = StringifyToJs(ctx, s->settled_value.get(), why, propagate);
    }
    if (propagate) {
      Value exc(ctx, JS_GetException(ctx));
      error = ErrorJson(ClassifyFailure(s, exc.get()));
    } else if (json.exception()) {
      error = ErrorJson(AfterRefusedAllocation(
          s, {"script_error", "", "TypeError", "the activation's result is not JSON-serializable: " + why, ""}));
    } else {
      JsonText result(ctx, json.get());
      if (!result.ok()) {
        Value exc(ctx, JS_GetException(ctx));
        error = ErrorJson(ClassifyFailure(s, exc.get()));
      } else if (!protocol::FitsInMessage(result.text(), why)) {
        error = ErrorJson(AfterRefusedAllocation(
            s, {"script_error", "", "TypeError", "the activation's result is too large to send: " + why, ""}));
      } else if (!OwnRoomFor(s, result.text().size() + head.size() + 64, "the activation's result")) {
        error = ErrorJson(MemoryExhausted(s));
      } else {
        // The result goes from the JavaScript string straight into the channel's queue.
        const bool caught = s->refused_allocations > 0;
        channel_.Send({head, ",\"ok\":", result.text(), caught ? ",\"caught_budget_failure\":true}" : "}"});
      }
    }
  } else {
    error = ErrorJson(ClassifyFailure(s, s->settled_value.get()));
  }
  s->settled_value.Reset();
  s->pending.clear();  // answers still in flight after a CPU kill are ignored by activation id
  if (!error.empty()) channel_.Send({head, ",\"error\":", error, "}"});
  if (!channel_.Flush()) return Status::kChannelClosed;
  return Status::kOk;
}

}  // namespace basal::worker
