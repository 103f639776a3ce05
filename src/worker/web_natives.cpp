#include "worker/web_natives.h"

#include <errno.h>
#include <sys/random.h>

#include <cstdint>
#include <cstring>
#include <new>
#include <optional>
#include <string_view>

#include "worker/codec.h"
#include "worker/durable.h"
#include "worker/web_install.h"
#include "worker/js/web_core_bytecode.h"
#include "worker/js/web_url_bytecode.h"

namespace basal::worker {
namespace {


// Owns one JSValue (like engine.cpp's Value, which is private to the engine).
class Owned {
 public:
  Owned(JSContext* ctx, JSValue v) : ctx_(ctx), v_(v) {}
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  ~Owned() { JS_FreeValue(ctx_, v_); }
  JSValue get() const { return v_; }
  JSValue take() {
    JSValue v = v_;
    v_ = JS_UNDEFINED;
    return v;
  }
  bool exception() const { return JS_IsException(v_); }

 private:
  JSContext* ctx_;
  JSValue v_;
};

// A string QuickJS lends as UTF-8 (lone surrogates as 3-byte ED A0..ED BF sequences), freed on
// scope exit.
class Utf8Of {
 public:
  Utf8Of(JSContext* ctx, JSValueConst v) : ctx_(ctx), s_(JS_ToCStringLen(ctx, &len_, v)) {}
  Utf8Of(const Utf8Of&) = delete;
  Utf8Of& operator=(const Utf8Of&) = delete;
  ~Utf8Of() {
    if (s_) JS_FreeCString(ctx_, s_);
  }
  bool ok() const { return s_ != nullptr; }
  std::string_view view() const { return {s_, len_}; }

 private:
  JSContext* ctx_;
  size_t len_ = 0;
  const char* s_;
};

// ---- natives for web_core.js ("basal:native") --------------------------------------------------

// A typed array's bytes (nullptr with an exception pending when it is not one, or detached).
uint8_t* TypedArrayBytes(JSContext* ctx, JSValueConst array, size_t& length) {
  size_t offset = 0, bytes = 0, per_element = 0;
  Owned buffer(ctx, JS_GetTypedArrayBuffer(ctx, array, &offset, &bytes, &per_element));
  if (buffer.exception()) return nullptr;
  size_t buffer_size = 0;
  uint8_t* base = JS_GetArrayBuffer(ctx, &buffer_size, buffer.get());
  if (!base) return nullptr;
  if (offset > buffer_size || bytes > buffer_size - offset) {  // QuickJS keeps views in bounds; never trust it blindly
    JS_ThrowRangeError(ctx, "the typed array lies outside its buffer");
    return nullptr;
  }
  length = bytes;
  return base + offset;
}


// QuickJS writes a lone surrogate as ED A0-BF xx, which is not UTF-8: U+FFFD has the same length.
void ReplaceLoneSurrogates(uint8_t* p, size_t n) {
  for (size_t i = 0; i + 2 < n; ++i) {
    if (p[i] == 0xED && (p[i + 1] & 0xE0) == 0xA0) {
      p[i] = 0xEF;
      p[i + 1] = 0xBF;
      p[i + 2] = 0xBD;
      i += 2;
    }
  }
}

// utf8Encode(string) -> ArrayBuffer
JSValue NativeUtf8Encode(JSContext* ctx, JSValueConst, int argc, JSValueConst* argv) {
  Utf8Of s(ctx, argc > 0 ? argv[0] : JS_UNDEFINED);
  if (!s.ok()) return JS_EXCEPTION;
  JSValue buffer = JS_NewArrayBufferCopy(ctx, reinterpret_cast<const uint8_t*>(s.view().data()), s.view().size());
  if (JS_IsException(buffer)) return buffer;
  size_t size = 0;
  if (uint8_t* p = JS_GetArrayBuffer(ctx, &size, buffer)) ReplaceLoneSurrogates(p, size);
  return buffer;
}

// utf8EncodeInto(string, Uint8Array) -> {read, written}: whole characters only, `read` in UTF-16
// code units.
JSValue NativeUtf8EncodeInto(JSContext* ctx, JSValueConst, int argc, JSValueConst* argv) {
  if (argc < 2) return JS_ThrowTypeError(ctx, "utf8EncodeInto(string, Uint8Array)");
  Utf8Of s(ctx, argv[0]);
  if (!s.ok()) return JS_EXCEPTION;
  size_t room = 0;
  uint8_t* out = TypedArrayBytes(ctx, argv[1], room);
  if (!out) return JS_EXCEPTION;
  const auto* in = reinterpret_cast<const uint8_t*>(s.view().data());
  const size_t n = s.view().size();
  size_t i = 0, written = 0;
  int64_t read = 0;
  while (i < n) {
    const uint8_t b = in[i];
    const size_t len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    if (i + len > n || written + len > room) break;
    std::memcpy(out + written, in + i, len);
    if (len == 3 && b == 0xED && (in[i + 1] & 0xE0) == 0xA0) {  // a lone surrogate: U+FFFD
      out[written] = 0xEF;
      out[written + 1] = 0xBF;
      out[written + 2] = 0xBD;
    }
    read += len == 4 ? 2 : 1;
    written += len;
    i += len;
  }
  Owned result(ctx, JS_NewObject(ctx));
  if (result.exception()) return JS_EXCEPTION;
  if (JS_SetPropertyStr(ctx, result.get(), "read", JS_NewInt64(ctx, read)) < 0 ||
      JS_SetPropertyStr(ctx, result.get(), "written", JS_NewInt64(ctx, static_cast<int64_t>(written))) < 0)
    return JS_EXCEPTION;
  return result.take();
}

// utf8Decode(Uint8Array, fatal) -> string, or null when fatal and the bytes are not UTF-8. A BOM is
// kept (TextDecoder decides).
JSValue NativeUtf8Decode(JSContext* ctx, JSValueConst, int argc, JSValueConst* argv) {
  if (argc < 2) return JS_ThrowTypeError(ctx, "utf8Decode(Uint8Array, fatal)");
  size_t n = 0;
  const uint8_t* p = TypedArrayBytes(ctx, argv[0], n);
  if (!p) return JS_EXCEPTION;
  const std::string_view bytes(reinterpret_cast<const char*>(p), n);
  if (IsValidUtf8(bytes)) return JS_NewStringLen(ctx, bytes.data(), bytes.size());
  if (JS_ToBool(ctx, argv[1])) return JS_NULL;
  return Guarded(ctx, [&] {
    const std::string text = Utf8Sanitize(bytes);
    return JS_NewStringLen(ctx, text.data(), text.size());
  });
}

// A string of code units U+0000..U+00FF from the UTF-8 QuickJS lends: false if one is above U+00FF.
bool Latin1Bytes(std::string_view utf8, std::string& out) {
  out.reserve(utf8.size());
  for (size_t i = 0; i < utf8.size(); ++i) {
    const auto b = static_cast<unsigned char>(utf8[i]);
    if (b < 0x80) {
      out += static_cast<char>(b);
    } else if ((b == 0xC2 || b == 0xC3) && i + 1 < utf8.size()) {
      out += static_cast<char>(((b & 0x03) << 6) | (static_cast<unsigned char>(utf8[i + 1]) & 0x3F));
      ++i;
    } else {
      return false;
    }
  }
  return true;
}

// Bytes as a JavaScript string of code units 0..255 (a "binary string").
JSValue NewLatin1String(JSContext* ctx, std::string_view bytes) {
  std::string utf8;
  utf8.reserve(bytes.size() * 2);
  for (const char c : bytes) {
    const auto b = static_cast<unsigned char>(c);
    if (b < 0x80) {
      utf8 += c;
    } else {
      utf8 += static_cast<char>(0xC0 | (b >> 6));
      utf8 += static_cast<char>(0x80 | (b & 0x3F));
    }
  }
  return JS_NewStringLen(ctx, utf8.data(), utf8.size());
}

// atob(string) -> binary string, or null when not forgiving-base64.
JSValue NativeAtob(JSContext* ctx, JSValueConst, int argc, JSValueConst* argv) {
  Utf8Of s(ctx, argc > 0 ? argv[0] : JS_UNDEFINED);
  if (!s.ok()) return JS_EXCEPTION;
  return Guarded(ctx, [&] {
    const std::optional<std::string> bytes = Base64Decode(s.view(), /*forgiving=*/true);
    return bytes ? NewLatin1String(ctx, *bytes) : JS_NULL;
  });
}

// btoa(string) -> base64, or null when a code unit is above U+00FF.
JSValue NativeBtoa(JSContext* ctx, JSValueConst, int argc, JSValueConst* argv) {
  Utf8Of s(ctx, argc > 0 ? argv[0] : JS_UNDEFINED);
  if (!s.ok()) return JS_EXCEPTION;
  return Guarded(ctx, [&] {
    std::string bytes;
    if (!Latin1Bytes(s.view(), bytes)) return JS_NULL;
    const std::string b64 = Base64Encode(bytes);
    return JS_NewStringLen(ctx, b64.data(), b64.size());
  });
}

// base64ToBytes(string) -> ArrayBuffer, or null when not forgiving-base64.
JSValue NativeBase64ToBytes(JSContext* ctx, JSValueConst, int argc, JSValueConst* argv) {
  Utf8Of s(ctx, argc > 0 ? argv[0] : JS_UNDEFINED);
  if (!s.ok()) return JS_EXCEPTION;
  return Guarded(ctx, [&] {
    const std::optional<std::string> bytes = Base64Decode(s.view(), /*forgiving=*/true);
    if (!bytes) return JS_NULL;
    return JS_NewArrayBufferCopy(ctx, reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size());
  });
}

// bytesToBase64(Uint8Array) -> string
JSValue NativeBytesToBase64(JSContext* ctx, JSValueConst, int argc, JSValueConst* argv) {
  size_t n = 0;
  const uint8_t* p = TypedArrayBytes(ctx, argc > 0 ? argv[0] : JS_UNDEFINED, n);
  if (!p) return JS_EXCEPTION;
  return Guarded(ctx, [&] {
    const std::string b64 = Base64Encode(std::string_view(reinterpret_cast<const char*>(p), n));
    return JS_NewStringLen(ctx, b64.data(), b64.size());
  });
}

// Web Crypto's quota for one getRandomValues call.
constexpr size_t kMaxRandomBytes = 65536;

// fillRandom(typed array) -> bytes written, or minus the length when it is above the quota. The
// bytes come from getrandom(GRND_NONBLOCK), which the seccomp table already allows (the kernel's
// pool is ready long before a worker starts; if it is not, the script sees an error); in a durable
// run, from the crypto keystream of the run's seed (durable.h), so a replay draws the same bytes.
JSValue NativeFillRandom(JSContext* ctx, JSValueConst, int argc, JSValueConst* argv) {
  size_t n = 0;
  uint8_t* p = TypedArrayBytes(ctx, argc > 0 ? argv[0] : JS_UNDEFINED, n);
  if (!p) return JS_EXCEPTION;
  if (n > kMaxRandomBytes) return JS_NewInt64(ctx, -static_cast<int64_t>(n));
  if (DurableRun* run = ActiveDurableRun()) {
    run->FillCryptoRandom(p, n);
    return JS_NewInt64(ctx, static_cast<int64_t>(n));
  }
  size_t done = 0;
  while (done < n) {
    const ssize_t r = getrandom(p + done, n - done, GRND_NONBLOCK);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return JS_ThrowInternalError(ctx, "crypto: the kernel's random source is not ready (getrandom: %s)", strerror(errno));
    done += static_cast<size_t>(r);
  }
  return JS_NewInt64(ctx, static_cast<int64_t>(n));
}

// The job queueMicrotask enqueues: calls the callback with no arguments. What it throws goes where
// any job's exception goes (the engine drops it, as it does for a rejected promise nobody handles).
JSValue RunMicrotask(JSContext* ctx, int, JSValueConst* argv) {
  return JS_Call(ctx, argv[0], JS_UNDEFINED, 0, nullptr);
}

JSValue NativeQueueMicrotask(JSContext* ctx, JSValueConst, int argc, JSValueConst* argv) {
  if (argc < 1 || !JS_IsFunction(ctx, argv[0]))
    return JS_ThrowTypeError(ctx, "queueMicrotask: the argument must be a function");
  if (JS_EnqueueJob(ctx, RunMicrotask, 1, argv) < 0) return JS_EXCEPTION;
  return JS_UNDEFINED;
}

JSValue NativeIsError(JSContext* ctx, JSValueConst, int argc, JSValueConst* argv) {
  return JS_NewBool(ctx, argc > 0 && JS_IsError(ctx, argv[0]));
}

// isDetached(arrayBuffer): only asked of a value already known to be an ArrayBuffer.
JSValue NativeIsDetached(JSContext* ctx, JSValueConst, int argc, JSValueConst* argv) {
  size_t size = 0;
  if (argc < 1 || JS_GetArrayBuffer(ctx, &size, argv[0])) return JS_FALSE;
  JS_FreeValue(ctx, JS_GetException(ctx));
  return JS_TRUE;
}

JSValue NativeDetach(JSContext* ctx, JSValueConst, int argc, JSValueConst* argv) {
  if (argc > 0) JS_DetachArrayBuffer(ctx, argv[0]);
  return JS_UNDEFINED;
}

struct NativeFunction {
  const char* name;
  JSCFunction* fn;
  int length;
};

constexpr NativeFunction kNatives[] = {
    {"utf8Encode", NativeUtf8Encode, 1},       {"utf8EncodeInto", NativeUtf8EncodeInto, 2},
    {"utf8Decode", NativeUtf8Decode, 2},       {"atob", NativeAtob, 1},
    {"btoa", NativeBtoa, 1},                   {"base64ToBytes", NativeBase64ToBytes, 1},
    {"bytesToBase64", NativeBytesToBase64, 1}, {"fillRandom", NativeFillRandom, 1},
    {"queueMicrotask", NativeQueueMicrotask, 1}, {"isError", NativeIsError, 1},
    {"isDetached", NativeIsDetached, 1},       {"detach", NativeDetach, 1},
};

// ---- installers ----------------------------------------------------------------------------------

// Runs a bundle and defines `names` from its exports on `global`, with `flags`.
bool InstallFromBundle(JSContext* ctx, JSValueConst global, const unsigned char* bytecode, size_t size,
                       JSValueConst native, std::span<const char* const> names, std::string& error) {
  Owned exports(ctx, RunBundle(ctx, bytecode, size, native));
  if (exports.exception()) return false;
  for (const char* name : names) {
    JSValue v = JS_GetPropertyStr(ctx, exports.get(), name);
    if (JS_IsException(v)) return false;
    if (JS_IsUndefined(v)) {
      error = std::string("the bundle does not export ") + name;
      return false;
    }
    // The internal helpers cannot be replaced once loaded; the web globals can, as in a browser.
    const int flags = std::string_view(name) == "__basal_internal" ? 0 : kWebGlobalFlags;
    if (JS_DefinePropertyValueStr(ctx, global, name, v, flags) < 0) return false;
  }
  return true;
}

}  // namespace

bool InstallUrl(JSContext* ctx, JSValueConst global, std::string& error) {
  return InstallFromBundle(ctx, global, bytecode::kweb_url, bytecode::kweb_urlSize, JS_UNDEFINED, kUrlNames, error);
}

bool InstallCore(JSContext* ctx, JSValueConst global, std::string& error) {
  Owned native(ctx, JS_NewObject(ctx));
  if (native.exception()) return false;
  for (const NativeFunction& f : kNatives)
    if (JS_DefinePropertyValueStr(ctx, native.get(), f.name, JS_NewCFunction(ctx, f.fn, f.name, f.length), 0) < 0)
      return false;
  return InstallFromBundle(ctx, global, bytecode::kweb_core, bytecode::kweb_coreSize, native.get(), kCoreNames, error);
}

namespace {

// performance.now(): milliseconds since performance.timeOrigin, to the microsecond (durable.h).
JSValue PerformanceNow(JSContext* ctx, JSValueConst, int, JSValueConst*) {
  return JS_NewFloat64(ctx, TheWorkerClocks().PerformanceNowMs());
}

JSValue TimeOrigin(JSContext* ctx) { return JS_NewFloat64(ctx, TheWorkerClocks().PerformanceTimeOriginMs()); }

// performance.toJSON(), as High Resolution Time defines it: {timeOrigin}.
JSValue PerformanceToJson(JSContext* ctx, JSValueConst, int, JSValueConst*) {
  Owned json(ctx, JS_NewObject(ctx));
  if (json.exception() || JS_DefinePropertyValueStr(ctx, json.get(), "timeOrigin", TimeOrigin(ctx), JS_PROP_C_W_E) < 0)
    return JS_EXCEPTION;
  return json.take();
}

}  // namespace

bool InstallPerformance(JSContext* ctx, JSValueConst global, std::string&) {
  Owned performance(ctx, JS_NewObject(ctx));
  if (performance.exception()) return false;
  // The methods are enumerable, as WebIDL operations are; timeOrigin is read-only, as its attribute.
  const JSValueConst p = performance.get();
  if (JS_DefinePropertyValueStr(ctx, p, "now", JS_NewCFunction(ctx, PerformanceNow, "now", 0), JS_PROP_C_W_E) < 0 ||
      JS_DefinePropertyValueStr(ctx, p, "timeOrigin", TimeOrigin(ctx), JS_PROP_ENUMERABLE | JS_PROP_CONFIGURABLE) < 0 ||
      JS_DefinePropertyValueStr(ctx, p, "toJSON", JS_NewCFunction(ctx, PerformanceToJson, "toJSON", 0), JS_PROP_C_W_E) < 0)
    return false;
  return JS_DefinePropertyValueStr(ctx, global, "performance", performance.take(), kWebGlobalFlags) >= 0;
}

JSValue RunBundle(JSContext* ctx, const unsigned char* bytecode, size_t size, JSValueConst native) {
  JSValue fn = JS_ReadObject(ctx, bytecode, size, JS_READ_OBJ_BYTECODE);
  if (JS_IsException(fn)) return fn;
  Owned factory(ctx, JS_EvalFunction(ctx, fn));  // takes fn
  if (factory.exception()) return JS_EXCEPTION;
  JSValue arg = JS_DupValue(ctx, native);
  JSValue exports = JS_Call(ctx, factory.get(), JS_UNDEFINED, 1, &arg);
  JS_FreeValue(ctx, arg);
  return exports;
}

}  // namespace basal::worker
