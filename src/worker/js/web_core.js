// The small web globals of a flow's context (docs/runtime.md): DOMException, TextEncoder,
// TextDecoder, atob, btoa, structuredClone, crypto, queueMicrotask, and __basal_internal (the byte
// helpers fetch's bodies use). Compiled to bytecode at build time by basal-js-bundle and run on
// the first read of any of those names (src/worker/web_globals.cpp). The byte work (UTF-8,
// base64, random bytes) is native ("basal:native", src/worker/web_natives.cpp); this file
// adds the Web IDL argument handling and the standards' errors around it.
"use strict";

const native = require("basal:native");

// The intrinsics used below, taken once: a script that later replaces a prototype's method does not
// change how these globals behave. (One that does so before their first use changes them only for
// itself: the flow's context is its own.)
const objectToString = Object.prototype.toString;
const hasOwn = Object.prototype.hasOwnProperty;
const typedArrayProto = Object.getPrototypeOf(Uint8Array.prototype);
const getter = (proto, key) => Object.getOwnPropertyDescriptor(proto, key).get;
const typedArrayTag = getter(typedArrayProto, Symbol.toStringTag);
const typedArrayBuffer = getter(typedArrayProto, "buffer");
const typedArrayByteOffset = getter(typedArrayProto, "byteOffset");
const typedArrayLength = getter(typedArrayProto, "length");
const dataViewBuffer = getter(DataView.prototype, "buffer");
const dataViewByteOffset = getter(DataView.prototype, "byteOffset");
const dataViewByteLength = getter(DataView.prototype, "byteLength");
const arrayBufferByteLength = getter(ArrayBuffer.prototype, "byteLength");
const sharedArrayBufferByteLength =
  typeof SharedArrayBuffer === "function" ? getter(SharedArrayBuffer.prototype, "byteLength") : null;
const mapSize = getter(Map.prototype, "size");
const setSize = getter(Set.prototype, "size");
const mapEntries = Map.prototype.entries;
const setValues = Set.prototype.values;
const mapSet = Map.prototype.set;
const setAdd = Set.prototype.add;
const regExpSource = getter(RegExp.prototype, "source");
const regExpFlagGetters = [
  ["global", "g"], ["ignoreCase", "i"], ["multiline", "m"], ["dotAll", "s"], ["unicode", "u"], ["sticky", "y"],
].filter(([key]) => Object.getOwnPropertyDescriptor(RegExp.prototype, key))
 .map(([key, flag]) => [getter(RegExp.prototype, key), flag]);
const dateGetTime = Date.prototype.getTime;
const booleanValueOf = Boolean.prototype.valueOf;
const numberValueOf = Number.prototype.valueOf;
const stringValueOf = String.prototype.valueOf;
const bigintValueOf = typeof BigInt === "function" ? BigInt.prototype.valueOf : null;
const symbolValueOf = Symbol.prototype.valueOf;
const typedArrayConstructors = {
  __proto__: null, Int8Array, Uint8Array, Uint8ClampedArray, Int16Array, Uint16Array, Int32Array, Uint32Array,
  Float32Array, Float64Array,
};
if (typeof BigInt64Array === "function") {
  typedArrayConstructors.BigInt64Array = BigInt64Array;
  typedArrayConstructors.BigUint64Array = BigUint64Array;
}
const integerTypedArrays = new Set(["Int8Array", "Uint8Array", "Uint8ClampedArray", "Int16Array", "Uint16Array",
                                    "Int32Array", "Uint32Array", "BigInt64Array", "BigUint64Array"]);
const errorConstructors = { __proto__: null, Error, EvalError, RangeError, ReferenceError, SyntaxError, TypeError, URIError };

// Whether `f(v)` succeeds: the brand checks of the built-in getters say which internal slots v has,
// whatever its prototype or Symbol.toStringTag claim.
function has(f, v) {
  try {
    f.call(v);
    return true;
  } catch {
    return false;
  }
}

// Web IDL's DOMString conversion: a symbol is a TypeError, anything else String(v).
function toDOMString(v) {
  return `${v}`;
}

function requireArguments(count, needed, what) {
  if (count < needed)
    throw new TypeError(`${what}: ${needed} argument${needed > 1 ? "s" : ""} required, but only ${count} present`);
}

// ---- DOMException (Web IDL) -------------------------------------------------------------------

const legacyCodes = {
  __proto__: null, IndexSizeError: 1, HierarchyRequestError: 3, WrongDocumentError: 4, InvalidCharacterError: 5,
  NoModificationAllowedError: 7, NotFoundError: 8, NotSupportedError: 9, InvalidStateError: 11, SyntaxError: 12,
  InvalidModificationError: 13, NamespaceError: 14, InvalidAccessError: 15, TypeMismatchError: 17, SecurityError: 18,
  NetworkError: 19, AbortError: 20, URLMismatchError: 21, QuotaExceededError: 22, TimeoutError: 23,
  InvalidNodeTypeError: 24, DataCloneError: 25,
};

class DOMException extends Error {
  constructor(message = "", name = "Error") {
    super(toDOMString(message));
    Object.defineProperty(this, "name", { value: toDOMString(name), writable: true, configurable: true });
  }
  get code() {
    return legacyCodes[this.name] || 0;
  }
}
Object.defineProperty(DOMException.prototype, Symbol.toStringTag, { value: "DOMException", configurable: true });

// ---- TextEncoder / TextDecoder (Encoding Standard, UTF-8 only) --------------------------------

class TextEncoder {
  get encoding() {
    return "utf-8";
  }
  // Lone surrogates become U+FFFD, as USVString conversion says.
  encode(input = "") {
    return new Uint8Array(native.utf8Encode(toDOMString(input)));
  }
  encodeInto(source, destination) {
    requireArguments(arguments.length, 2, "TextEncoder.encodeInto");
    if (typedArrayTag.call(destination) !== "Uint8Array")
      throw new TypeError("TextEncoder.encodeInto: the destination must be a Uint8Array");
    return native.utf8EncodeInto(toDOMString(source), destination);
  }
}
Object.defineProperty(TextEncoder.prototype, Symbol.toStringTag, { value: "TextEncoder", configurable: true });

// The Encoding Standard's labels of UTF-8, the only encoding here.
const utf8Labels = new Set(["unicode-1-1-utf-8", "unicode11utf8", "unicode20utf8", "utf-8", "utf8", "x-unicode20utf8"]);

// The bytes of a BufferSource, as a Uint8Array over the same memory.
function bytesOf(input, what) {
  const tag = typedArrayTag.call(input);
  if (tag === "Uint8Array") return input;
  if (tag !== undefined)
    return new Uint8Array(typedArrayBuffer.call(input), typedArrayByteOffset.call(input),
                          typedArrayLength.call(input) * typedArrayConstructors[tag].BYTES_PER_ELEMENT);
  if (has(arrayBufferByteLength, input)) return new Uint8Array(input);
  if (has(dataViewByteLength, input))
    return new Uint8Array(dataViewBuffer.call(input), dataViewByteOffset.call(input), dataViewByteLength.call(input));
  if (sharedArrayBufferByteLength && has(sharedArrayBufferByteLength, input)) return new Uint8Array(input);
  throw new TypeError(`${what}: expected an ArrayBuffer, a typed array or a DataView`);
}

// How many bytes at the end of `bytes` begin a UTF-8 sequence that more bytes could complete: a
// streaming decode keeps them for the next call instead of replacing them.
function incompleteTail(bytes) {
  const n = bytes.length;
  for (let back = 1; back <= 3 && back <= n; ++back) {
    const b = bytes[n - back];
    if ((b & 0xc0) === 0x80) continue;  // a continuation byte: look further back
    const need = b >= 0xf0 && b <= 0xf4 ? 4 : b >= 0xe0 ? 3 : b >= 0xc2 && b <= 0xdf ? 2 : 0;
    if (need <= back) return 0;  // complete (or not a lead byte at all): nothing to keep
    // The second byte's range depends on the lead byte (no overlongs, surrogates or > U+10FFFF).
    if (back >= 2) {
      const c = bytes[n - back + 1];
      const lo = b === 0xe0 ? 0xa0 : b === 0xf0 ? 0x90 : 0x80;
      const hi = b === 0xed ? 0x9f : b === 0xf4 ? 0x8f : 0xbf;
      if (c < lo || c > hi) return 0;
    }
    return back;
  }
  return 0;
}

class TextDecoder {
  #fatal;
  #ignoreBOM;
  #pending = null;  // the incomplete sequence a streaming decode kept
  #bomSeen = false;

  constructor(label = "utf-8", options = undefined) {
    const name = toDOMString(label).replace(/^[\t\n\f\r ]+|[\t\n\f\r ]+$/g, "").toLowerCase();
    if (!utf8Labels.has(name))
      throw new RangeError(`TextDecoder: the encoding "${toDOMString(label)}" is not supported: ` +
                           "this runtime decodes UTF-8 only (label \"utf-8\")");
    if (options !== undefined && options !== null && typeof options !== "object" && typeof options !== "function")
      throw new TypeError("TextDecoder: the options must be an object, e.g. {fatal: true}");
    this.#fatal = Boolean(options?.fatal);
    this.#ignoreBOM = Boolean(options?.ignoreBOM);
  }
  get encoding() {
    return "utf-8";
  }
  get fatal() {
    return this.#fatal;
  }
  get ignoreBOM() {
    return this.#ignoreBOM;
  }
  decode(input = undefined, options = undefined) {
    const stream = Boolean(options?.stream);
    let bytes = input === undefined ? new Uint8Array(0) : bytesOf(input, "TextDecoder.decode");
    if (this.#pending) {
      const joined = new Uint8Array(this.#pending.length + bytes.length);
      joined.set(this.#pending);
      joined.set(bytes, this.#pending.length);
      bytes = joined;
      this.#pending = null;
    }
    if (stream) {
      const keep = incompleteTail(bytes);
      if (keep > 0) {
        this.#pending = bytes.slice(bytes.length - keep);
        bytes = bytes.subarray(0, bytes.length - keep);
      }
    }
    let text = native.utf8Decode(bytes, this.#fatal);
    if (text === null) {
      this.#pending = null;
      this.#bomSeen = false;
      throw new TypeError("TextDecoder.decode: the input is not valid UTF-8 (the decoder was made with fatal: true)");
    }
    if (!this.#ignoreBOM && !this.#bomSeen && text.length > 0) {
      if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
      this.#bomSeen = true;
    }
    if (!stream) this.#bomSeen = false;
    return text;
  }
}
Object.defineProperty(TextDecoder.prototype, Symbol.toStringTag, { value: "TextDecoder", configurable: true });

// ---- atob / btoa (HTML, forgiving-base64) -----------------------------------------------------

function atob(data) {
  requireArguments(arguments.length, 1, "atob");
  const s = native.atob(toDOMString(data));
  if (s === null)
    throw new DOMException("atob: the string is not valid base64 (A-Z a-z 0-9 + /, ASCII whitespace ignored, " +
                           "at most two '=' and only at the end, length not 1 more than a multiple of 4)",
                           "InvalidCharacterError");
  return s;
}

function btoa(data) {
  requireArguments(arguments.length, 1, "btoa");
  const s = native.btoa(toDOMString(data));
  if (s === null)
    throw new DOMException("btoa: the string has a character above U+00FF; encode the text to bytes first " +
                           "(new TextEncoder().encode(text)) and base64 the bytes", "InvalidCharacterError");
  return s;
}

// ---- structuredClone (HTML's StructuredSerialize + StructuredDeserialize, in one walk) -------

function dataCloneError(what) {
  return new DOMException(`structuredClone: ${what} could not be cloned`, "DataCloneError");
}

// Objects with internal slots this runtime cannot copy (the HTML standard throws for them).
const uncloneableTags = new Set(["WeakMap", "WeakSet", "WeakRef", "FinalizationRegistry", "Promise", "Generator",
                                 "AsyncGenerator", "Module", "Symbol", "SharedArrayBuffer"]);

function copyArrayBuffer(buffer) {
  const length = arrayBufferByteLength.call(buffer);
  const copy = new Uint8Array(length);
  copy.set(new Uint8Array(buffer, 0, length));
  return copy.buffer;
}

function cloneValue(value, memory) {
  const type = typeof value;
  if (type === "symbol") throw dataCloneError(`the symbol ${String(value)}`);
  if (type === "function") throw dataCloneError(`the function ${value.name || "(anonymous)"}`);
  if (value === null || type !== "object") return value;
  if (memory.has(value)) return memory.get(value);
  let out;
  let copyProperties = false;
  if (has(booleanValueOf, value)) {
    out = Object(booleanValueOf.call(value));
  } else if (has(numberValueOf, value)) {
    out = Object(numberValueOf.call(value));
  } else if (bigintValueOf && has(bigintValueOf, value)) {
    out = Object(bigintValueOf.call(value));
  } else if (has(stringValueOf, value)) {
    out = Object(stringValueOf.call(value));
  } else if (has(symbolValueOf, value)) {
    throw dataCloneError("a Symbol object");
  } else if (has(dateGetTime, value)) {
    out = new Date(dateGetTime.call(value));
  } else if (value !== RegExp.prototype && has(regExpSource, value)) {
    let flags = "";
    for (const [get, flag] of regExpFlagGetters) if (get.call(value)) flags += flag;
    out = new RegExp(regExpSource.call(value), flags);
  } else if (has(arrayBufferByteLength, value)) {
    if (native.isDetached(value)) throw dataCloneError("a detached ArrayBuffer");
    out = copyArrayBuffer(value);
  } else if (sharedArrayBufferByteLength && has(sharedArrayBufferByteLength, value)) {
    throw dataCloneError("a SharedArrayBuffer (there is no other agent to share it with)");
  } else if (typedArrayTag.call(value) !== undefined) {
    const tag = typedArrayTag.call(value);
    const buffer = cloneValue(typedArrayBuffer.call(value), memory);
    out = new typedArrayConstructors[tag](buffer, typedArrayByteOffset.call(value), typedArrayLength.call(value));
  } else if (has(dataViewByteLength, value)) {
    const buffer = cloneValue(dataViewBuffer.call(value), memory);
    out = new DataView(buffer, dataViewByteOffset.call(value), dataViewByteLength.call(value));
  } else if (has(mapSize, value)) {
    out = new Map();
    memory.set(value, out);
    const entries = [...mapEntries.call(value)];  // the standard copies the list before cloning its members
    for (const [k, v] of entries) mapSet.call(out, cloneValue(k, memory), cloneValue(v, memory));
    return out;
  } else if (has(setSize, value)) {
    out = new Set();
    memory.set(value, out);
    const members = [...setValues.call(value)];
    for (const v of members) setAdd.call(out, cloneValue(v, memory));
    return out;
  } else if (native.isError(value)) {
    // HTML: the name picks the prototype (one of the standard ones, else Error); message only if own.
    const name = value.name;
    const Ctor = typeof name === "string" && errorConstructors[name] ? errorConstructors[name] : Error;
    out = Object.create(Ctor.prototype);
    const message = Object.getOwnPropertyDescriptor(value, "message");
    if (message && "value" in message)
      Object.defineProperty(out, "message", { value: String(message.value), writable: true, configurable: true });
    const stack = value.stack;
    if (typeof stack === "string")
      Object.defineProperty(out, "stack", { value: stack, writable: true, configurable: true });
  } else if (Array.isArray(value)) {
    out = new Array(value.length);
    copyProperties = true;
  } else {
    const tag = objectToString.call(value).slice(8, -1);
    if (uncloneableTags.has(tag)) throw dataCloneError(`a ${tag}`);
    // Any other object, a class instance included, is copied as a plain object of its own
    // enumerable string-keyed properties: its prototype and private fields are not, as in browsers.
    out = {};
    copyProperties = true;
  }
  memory.set(value, out);
  if (copyProperties) {
    for (const key of Object.keys(value)) {
      if (!hasOwn.call(value, key)) continue;  // a getter deleted it
      out[key] = cloneValue(value[key], memory);
    }
  }
  return out;
}

function structuredClone(value, options = undefined) {
  requireArguments(arguments.length, 1, "structuredClone");
  const transfer = options?.transfer === undefined ? [] : [...options.transfer];
  const memory = new Map();
  const transferred = new Set();
  for (const buffer of transfer) {
    if (!has(arrayBufferByteLength, buffer))
      throw dataCloneError("a transfer list member that is not an ArrayBuffer");
    if (transferred.has(buffer)) throw dataCloneError("an ArrayBuffer listed twice for transfer");
    if (native.isDetached(buffer)) throw dataCloneError("a detached ArrayBuffer in the transfer list");
    transferred.add(buffer);
    memory.set(buffer, copyArrayBuffer(buffer));
  }
  const result = cloneValue(value, memory);
  for (const buffer of transferred) native.detach(buffer);
  return result;
}

// ---- crypto (Web Crypto: getRandomValues and randomUUID; no subtle) ---------------------------

function getRandomValues(array) {
  requireArguments(arguments.length, 1, "crypto.getRandomValues");
  const tag = typedArrayTag.call(array);
  if (tag === undefined)
    throw new TypeError("crypto.getRandomValues: the argument must be an integer typed array (e.g. a Uint8Array)");
  if (!integerTypedArrays.has(tag))
    throw new DOMException(`crypto.getRandomValues: a ${tag} is not an integer typed array`, "TypeMismatchError");
  const filled = native.fillRandom(array);
  if (filled < 0)
    throw new DOMException(`crypto.getRandomValues: ${-filled} bytes asked for; at most 65536 per call`,
                           "QuotaExceededError");
  return array;
}

const hex = [];
for (let i = 0; i < 256; ++i) hex.push((i + 0x100).toString(16).slice(1));

function randomUUID() {
  const b = new Uint8Array(16);
  native.fillRandom(b);
  b[6] = (b[6] & 0x0f) | 0x40;  // version 4
  b[8] = (b[8] & 0x3f) | 0x80;  // variant 10
  return hex[b[0]] + hex[b[1]] + hex[b[2]] + hex[b[3]] + "-" + hex[b[4]] + hex[b[5]] + "-" + hex[b[6]] + hex[b[7]] +
         "-" + hex[b[8]] + hex[b[9]] + "-" + hex[b[10]] + hex[b[11]] + hex[b[12]] + hex[b[13]] + hex[b[14]] + hex[b[15]];
}

const crypto = Object.create(Object.prototype, {
  getRandomValues: { value: getRandomValues, writable: true, enumerable: true, configurable: true },
  randomUUID: { value: randomUUID, writable: true, enumerable: true, configurable: true },
  [Symbol.toStringTag]: { value: "Crypto", configurable: true },
});

// ---- __basal_internal: byte helpers for the runtime's own code (fetch bodies) ----------------

const internal = Object.freeze({
  __proto__: null,
  // Forgiving-base64 (as atob) to bytes; InvalidCharacterError DOMException when invalid.
  base64ToBytes(text) {
    const buffer = native.base64ToBytes(toDOMString(text));
    if (buffer === null) throw new DOMException("base64ToBytes: the string is not valid base64", "InvalidCharacterError");
    return new Uint8Array(buffer);
  },
  // Standard padded base64 of a BufferSource's bytes.
  bytesToBase64(bytes) {
    return native.bytesToBase64(bytesOf(bytes, "bytesToBase64"));
  },
  // TextEncoder's encode: UTF-8, lone surrogates as U+FFFD.
  utf8Encode(text) {
    return new Uint8Array(native.utf8Encode(toDOMString(text)));
  },
  // The Encoding Standard's "UTF-8 decode" (what Body.text() uses): a leading BOM dropped, invalid
  // sequences replaced by U+FFFD.
  utf8Decode(bytes) {
    const text = native.utf8Decode(bytesOf(bytes, "utf8Decode"), false);
    return text.charCodeAt(0) === 0xfeff ? text.slice(1) : text;
  },
});

module.exports = {
  DOMException,
  TextEncoder,
  TextDecoder,
  atob,
  btoa,
  structuredClone,
  crypto,
  queueMicrotask: native.queueMicrotask,
  __basal_internal: internal,
};
