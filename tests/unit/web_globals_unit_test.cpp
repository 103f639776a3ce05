// The lazy-global mechanism and the web globals' native code in-process, without a worker: built
// into this test (sanitized in the asan build, unlike the worker) and fed what a hostile script
// can pass them: detached buffers, wrong types, deep nesting, a heap limit hit while loading.
#include <gtest/gtest.h>

#include <string>

#include "worker/web_globals.h"
#include "worker/web_natives.h"

namespace basal::worker {
namespace {

// The worker's table less fetch and the timers, which need the engine (web_globals_table.cpp).
constexpr LazyGlobal kNativeGlobals[] = {{kUrlNames, InstallUrl}, {kCoreNames, InstallCore}};

class Context {
 public:
  explicit Context(size_t heap_limit_bytes = 64 << 20) {
    rt_ = JS_NewRuntime();
    JS_SetMemoryLimit(rt_, heap_limit_bytes);
    JS_SetMaxStackSize(rt_, 256 * 1024);
    ctx_ = JS_NewContext(rt_);
  }
  ~Context() {
    JS_FreeContext(ctx_);
    JS_FreeRuntime(rt_);
  }
  JSContext* ctx() { return ctx_; }
  JSRuntime* rt() { return rt_; }
  // The expression's value as JSON, or "threw NAME: MESSAGE".
  std::string Eval(const std::string& expr) {
    const std::string code = "JSON.stringify(" + expr + ")";
    JSValue v = JS_Eval(ctx_, code.data(), code.size(), "<test>", JS_EVAL_TYPE_GLOBAL);
    std::string out;
    if (JS_IsException(v)) {
      JSValue e = JS_GetException(ctx_);
      out = "threw " + Text(JS_GetPropertyStr(ctx_, e, "name")) + ": " + Text(JS_GetPropertyStr(ctx_, e, "message"));
      JS_FreeValue(ctx_, e);
    } else {
      out = JS_IsUndefined(v) ? "undefined" : Text(JS_DupValue(ctx_, v));
    }
    JS_FreeValue(ctx_, v);
    for (;;) {  // jobs queued by the expression (queueMicrotask)
      JSContext* c = nullptr;
      const int r = JS_ExecutePendingJob(rt_, &c);
      if (r == 0) break;
      if (r < 0) JS_FreeValue(ctx_, JS_GetException(ctx_));
    }
    return out;
  }

 private:
  std::string Text(JSValue v) {
    const char* s = JS_ToCString(ctx_, v);
    std::string out = s ? s : "(unprintable)";
    if (s) JS_FreeCString(ctx_, s);
    JS_FreeValue(ctx_, v);
    return out;
  }
  JSRuntime* rt_;
  JSContext* ctx_;
};

TEST(WebGlobalsUnitTest, NativesRefuseWhatAScriptCanPassThemWithoutCrashing) {
  Context c;
  ASSERT_TRUE(InstallLazyGlobals(c.ctx(), kNativeGlobals));
  struct Case {
    const char* expr;
    const char* expected;
  } cases[] = {
      // A detached buffer: QuickJS's TypeError, as its own typed-array methods throw; no read or
      // write of freed memory.
      {"(() => { const u = new Uint8Array(8); structuredClone(u.buffer, {transfer: [u.buffer]}); return new TextDecoder().decode(u); })()",
       "threw TypeError: ArrayBuffer is detached"},
      {"(() => { const u = new Uint8Array(8); structuredClone(u.buffer, {transfer: [u.buffer]}); return new TextEncoder().encodeInto('abc', u); })()",
       "threw TypeError: ArrayBuffer is detached"},
      {"(() => { const u = new Uint8Array(8); structuredClone(u.buffer, {transfer: [u.buffer]}); return crypto.getRandomValues(u); })()",
       "threw TypeError: ArrayBuffer is detached"},
      {"(() => { const u = new Uint8Array(8); structuredClone(u.buffer, {transfer: [u.buffer]}); return __basal_internal.bytesToBase64(u); })()",
       "threw TypeError: ArrayBuffer is detached"},
      {"(() => { const b = new ArrayBuffer(4); structuredClone(b, {transfer: [b]}); try { structuredClone(b); } catch (e) { return e.name; } })()",
       "\"DataCloneError\""},
      {"(() => { const b = new ArrayBuffer(4); structuredClone(b, {transfer: [b]}); return new TextDecoder().decode(b); })()",
       "threw TypeError: ArrayBuffer is detached"},
      // Wrong types reach the natives only through the checks of web_core.js.
      {"(() => { try { new TextEncoder().encodeInto('a', new Uint16Array(4)); } catch (e) { return e.name; } })()", "\"TypeError\""},
      {"(() => { try { __basal_internal.bytesToBase64(42); } catch (e) { return e.name; } })()", "\"TypeError\""},
      {"(() => { try { __basal_internal.utf8Decode({length: 1e9}); } catch (e) { return e.name; } })()", "\"TypeError\""},
      // Large and odd inputs.
      {"atob('QUJD'.repeat(250000)).length", "750000"},
      {"(() => { try { atob('QUJD'.repeat(250000) + '\\u0100'); } catch (e) { return e.name; } })()", "\"InvalidCharacterError\""},
      {"btoa('\\xff'.repeat(300000)).length", "400000"},
      // A lone low surrogate, then 999 pairs (each D800 meets the next DC00), then a lone high one.
      {"new TextEncoder().encode('\\uDC00\\uD800'.repeat(1000)).length", "4002"},
      {"new TextDecoder().decode(new Uint8Array(100000).fill(0xFF)).length", "100000"},
      // Nesting deeper than the stack: QuickJS's stack check, caught like any error.
      {"(() => { let a = []; for (let i = 0; i < 100000; ++i) a = [a]; try { structuredClone(a); return 'cloned'; } catch (e) { return e.name; } })()",
       "\"InternalError\""},
  };
  for (const Case& k : cases) EXPECT_EQ(c.Eval(k.expr), k.expected) << k.expr;
}

// A table of our own, to see the mechanism fail the ways an installer can.
bool DefinesX(JSContext* ctx, JSValueConst global, std::string&) {
  return JS_DefinePropertyValueStr(ctx, global, "lazyX", JS_NewInt32(ctx, 42), JS_PROP_WRITABLE | JS_PROP_CONFIGURABLE) >= 0;
}
bool ForgetsToDefine(JSContext*, JSValueConst, std::string&) { return true; }
bool FailsWithAMessage(JSContext*, JSValueConst, std::string& error) {
  error = "no bytecode for it";
  return false;
}
bool ReadsItself(JSContext* ctx, JSValueConst global, std::string&) {
  JSValue v = JS_GetPropertyStr(ctx, global, "lazySelf");
  const bool ok = !JS_IsException(v);
  JS_FreeValue(ctx, v);
  return ok;
}
bool ThrowsItsOwn(JSContext* ctx, JSValueConst, std::string&) {
  JS_ThrowRangeError(ctx, "its own error");
  return false;
}
constexpr const char* kX[] = {"lazyX"};
constexpr const char* kForgets[] = {"lazyForgets"};
constexpr const char* kFails[] = {"lazyFails"};
constexpr const char* kSelf[] = {"lazySelf"};
constexpr const char* kThrows[] = {"lazyThrows"};
constexpr LazyGlobal kTable[] = {
    {kX, DefinesX}, {kForgets, ForgetsToDefine}, {kFails, FailsWithAMessage}, {kSelf, ReadsItself}, {kThrows, ThrowsItsOwn},
};

TEST(WebGlobalsUnitTest, TheMechanismReportsEachWayAnInstallerCanFail) {
  Context c;
  ASSERT_TRUE(InstallLazyGlobals(c.ctx(), kTable));
  EXPECT_EQ(c.Eval("typeof Object.getOwnPropertyDescriptor(globalThis, 'lazyX').get"), "\"function\"");
  EXPECT_EQ(c.Eval("[lazyX, lazyX + 1, typeof Object.getOwnPropertyDescriptor(globalThis, 'lazyX').get]"), "[42,43,\"undefined\"]");
  EXPECT_EQ(c.Eval("lazyForgets"), "threw InternalError: the installer of lazyForgets did not define it");
  EXPECT_EQ(c.Eval("lazyFails"), "threw InternalError: the global lazyFails could not be loaded: no bytecode for it");
  EXPECT_EQ(c.Eval("lazySelf"), "threw InternalError: lazySelf was read while it was being loaded");
  EXPECT_EQ(c.Eval("lazyThrows"), "threw RangeError: its own error");
  // A getter kept by the script loads nothing once the name was replaced or deleted (lazySelf's
  // installer would throw if it ran).
  EXPECT_EQ(c.Eval("(() => { globalThis.keptGet = Object.getOwnPropertyDescriptor(globalThis, 'lazySelf').get;"
                   " globalThis.lazySelf = 'mine'; return [keptGet(), lazySelf]; })()"),
            "[\"mine\",\"mine\"]");
  EXPECT_EQ(c.Eval("(() => { delete globalThis.lazySelf; return [keptGet() === undefined, 'lazySelf' in globalThis]; })()"), "[true,false]");
  // A failed install leaves the accessor: the next read tries again.
  EXPECT_EQ(c.Eval("typeof Object.getOwnPropertyDescriptor(globalThis, 'lazyFails').get"), "\"function\"");
}

// Loading URL under a heap limit too small for it fails with QuickJS's out-of-memory error, leaves
// the accessor in place, and works once the limit allows it.
TEST(WebGlobalsUnitTest, LoadingUnderTooSmallAHeapLimitFailsCleanlyAndCanBeRetried) {
  Context c(1 << 20);
  ASSERT_TRUE(InstallLazyGlobals(c.ctx(), kNativeGlobals));
  const std::string code = "new URL('http://h/').href";
  JSValue v = JS_Eval(c.ctx(), code.data(), code.size(), "<test>", JS_EVAL_TYPE_GLOBAL);
  ASSERT_TRUE(JS_IsException(v));
  JSValue e = JS_GetException(c.ctx());
  JS_SetMemoryLimit(c.rt(), 64 << 20);  // room to read the error
  // QuickJS's out-of-memory error, or null when even that error could not be allocated.
  const char* text = JS_ToCString(c.ctx(), e);
  ASSERT_NE(text, nullptr);
  EXPECT_TRUE(std::string(text) == "InternalError: out of memory" || std::string(text) == "null") << text;
  JS_FreeCString(c.ctx(), text);
  JS_FreeValue(c.ctx(), e);
  EXPECT_EQ(c.Eval("typeof Object.getOwnPropertyDescriptor(globalThis, 'URL').get"), "\"function\"");
  EXPECT_EQ(c.Eval("new URL('http://0x7f.1/').href"), "\"http://127.0.0.1/\"");
}

}  // namespace
}  // namespace basal::worker
