// fetch (see web_fetch.h): the byte natives js/fetch.js is given, and its installation. Bodies
// live in the JavaScript heap as ArrayBuffers; these natives only convert them (base64 for the
// host call's wire format, UTF-8 for text), so every byte a body holds is charged to the heap
// budget like any other script allocation.
#include "worker/web_fetch.h"

#include <new>
#include <optional>
#include <string>

#include "worker/codec.h"
#include "worker/js/fetch_js.h"
#include "worker/script_host.h"
#include "worker/web_install.h"

namespace basal::worker {
namespace {


// The bytes of an ArrayBuffer or a Uint8Array (js/fetch.js passes nothing else), borrowed.
bool BytesOf(JSContext* ctx, JSValueConst v, std::string_view& out) {
  size_t size = 0;
  if (uint8_t* p = JS_GetArrayBuffer(ctx, &size, v)) {
    out = std::string_view(reinterpret_cast<const char*>(p), size);
    return true;
  }
  JS_FreeValue(ctx, JS_GetException(ctx));  // not an ArrayBuffer: try a typed array
  size_t offset = 0, length = 0, element = 0;
  JSValue buffer = JS_GetTypedArrayBuffer(ctx, v, &offset, &length, &element);
  if (JS_IsException(buffer)) return false;
  uint8_t* p = JS_GetArrayBuffer(ctx, &size, buffer);
  JS_FreeValue(ctx, buffer);
  if (!p) return false;  // detached
  if (offset > size || length > size - offset) {
    JS_ThrowRangeError(ctx, "the typed array's view lies outside its buffer");
    return false;
  }
  out = std::string_view(reinterpret_cast<const char*>(p) + offset, length);
  return true;
}

// base64Encode(bytes) -> string (RFC 4648, padded): a request body on the wire.
JSValue Base64EncodeNative(JSContext* ctx, JSValueConst, int argc, JSValueConst* argv) {
  return Guarded(ctx, [&]() -> JSValue {
    std::string_view bytes;
    if (argc < 1 || !BytesOf(ctx, argv[0], bytes)) return JS_EXCEPTION;
    const std::string text = Base64Encode(bytes);
    return JS_NewStringLen(ctx, text.data(), text.size());
  });
}

// base64Decode(string) -> ArrayBuffer, or null for text that is not strict base64: a response
// body from the wire.
JSValue Base64DecodeNative(JSContext* ctx, JSValueConst, int argc, JSValueConst* argv) {
  return Guarded(ctx, [&]() -> JSValue {
    if (argc < 1 || !JS_IsString(argv[0])) return JS_NULL;
    size_t len = 0;
    const char* s = JS_ToCStringLen(ctx, &len, argv[0]);
    if (!s) return JS_EXCEPTION;
    std::optional<std::string> bytes;
    try {
      bytes = Base64Decode(std::string_view(s, len), /*forgiving=*/false);
    } catch (...) {
      JS_FreeCString(ctx, s);
      throw;
    }
    JS_FreeCString(ctx, s);
    if (!bytes) return JS_NULL;
    return JS_NewArrayBufferCopy(ctx, reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size());
  });
}

// utf8Encode(string) -> ArrayBuffer: the string's UTF-8, each lone surrogate as U+FFFD (WebIDL's
// USVString, which the Fetch standard's bodies are). QuickJS writes a lone surrogate as the three
// bytes ED A0..BF xx, which no valid UTF-8 holds: each becomes EF BF BD in place.
JSValue Utf8EncodeNative(JSContext* ctx, JSValueConst, int argc, JSValueConst* argv) {
  return Guarded(ctx, [&]() -> JSValue {
    size_t len = 0;
    const char* s = JS_ToCStringLen(ctx, &len, argc > 0 ? argv[0] : JS_UNDEFINED);
    if (!s) return JS_EXCEPTION;
    std::string_view text(s, len);
    std::string fixed;
    if (text.find('\xED') != std::string_view::npos) {
      try {
        fixed.assign(text);
      } catch (...) {
        JS_FreeCString(ctx, s);
        throw;
      }
      for (size_t i = 0; i + 2 < fixed.size(); ++i) {
        if (static_cast<unsigned char>(fixed[i]) == 0xED && (static_cast<unsigned char>(fixed[i + 1]) & 0xE0) == 0xA0) {
          fixed[i] = static_cast<char>(0xEF);
          fixed[i + 1] = static_cast<char>(0xBF);
          fixed[i + 2] = static_cast<char>(0xBD);
          i += 2;
        }
      }
      text = fixed;
    }
    JSValue out = JS_NewArrayBufferCopy(ctx, reinterpret_cast<const uint8_t*>(text.data()), text.size());
    JS_FreeCString(ctx, s);
    return out;
  });
}

// utf8Decode(ArrayBuffer) -> string: the WHATWG "UTF-8 decode" that text() and json() use: a
// leading byte order mark is dropped and each ill-formed sequence becomes U+FFFD.
JSValue Utf8DecodeNative(JSContext* ctx, JSValueConst, int argc, JSValueConst* argv) {
  return Guarded(ctx, [&]() -> JSValue {
    std::string_view bytes;
    if (argc < 1 || !BytesOf(ctx, argv[0], bytes)) return JS_EXCEPTION;
    if (bytes.substr(0, 3) == "\xEF\xBB\xBF") bytes.remove_prefix(3);
    if (IsValidUtf8(bytes)) return JS_NewStringLen(ctx, bytes.data(), bytes.size());
    const std::string text = Utf8Sanitize(bytes);
    return JS_NewStringLen(ctx, text.data(), text.size());
  });
}

}  // namespace

bool InstallFetchGlobals(JSContext* ctx, JSValueConst global, std::string& error) {
  JSValue natives = JS_NewObject(ctx);
  if (JS_IsException(natives)) return InstallFailed(ctx, "fetch", error);
  JS_SetPropertyStr(ctx, natives, "hostCall", NewHostCallFunction(ctx, /*background=*/false));
  JS_SetPropertyStr(ctx, natives, "fetchHostCall", JS_NewStringLen(ctx, kFetchHostCall.data(), kFetchHostCall.size()));
  JS_SetPropertyStr(ctx, natives, "base64Encode", JS_NewCFunction(ctx, Base64EncodeNative, "base64Encode", 1));
  JS_SetPropertyStr(ctx, natives, "base64Decode", JS_NewCFunction(ctx, Base64DecodeNative, "base64Decode", 1));
  JS_SetPropertyStr(ctx, natives, "utf8Encode", JS_NewCFunction(ctx, Utf8EncodeNative, "utf8Encode", 1));
  JS_SetPropertyStr(ctx, natives, "utf8Decode", JS_NewCFunction(ctx, Utf8DecodeNative, "utf8Decode", 1));
  return RunInstaller(ctx, js::kFetchSource, "<basal-fetch>", natives, global, "fetch", error);
}

}  // namespace basal::worker
