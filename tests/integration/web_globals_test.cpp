// The web-standard globals of a flow's context (docs/runtime.md), through the real parent and real
// confined workers: each table runs its cases in one flow and asserts the value the script saw (or
// the name of the error it caught). Then laziness (a flow that never reads a global never loads
// it), and the heap budget against URL's implementation.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "integration/test_support.h"

namespace basal::testing {
namespace {

using Json = nlohmann::json;

// One JavaScript expression (it may use `await`) and what the script must see: a JSON value, or
// the `name` of the error it throws.
struct Case {
  std::string expr;
  Json expected;
  std::string throws;
};

Case Is(std::string expr, Json expected) { return {std::move(expr), std::move(expected), ""}; }
Case Throws(std::string expr, std::string name) { return {std::move(expr), nullptr, std::move(name)}; }

class WebGlobalsTest : public ModuleFixture {
 protected:
  // Runs every case in one activation of one flow, then checks each.
  void Check(const std::vector<Case>& cases, const std::string& manifest = "{}") {
    std::string source = "const cases = [\n";
    for (const Case& c : cases) source += "  async () => (" + c.expr + "),\n";
    source +=
        "];\n"
        "export default async function () {\n"
        "  const out = [];\n"
        "  for (const f of cases) {\n"
        "    try { out.push({value: await f()}); }\n"
        "    catch (e) { out.push({threw: String(e && e.name), message: String(e && e.message)}); }\n"
        "  }\n"
        "  return out;\n"
        "}\n";
    FlowRef f = Add(source, manifest, "cases" + std::to_string(++flows_) + ".js");
    ActivationResult r = module_->Run(f, nullptr);
    ASSERT_TRUE(r.ok()) << r.message;
    ASSERT_EQ(r.result.size(), cases.size());
    for (size_t i = 0; i < cases.size(); ++i) {
      const Json& got = r.result[i];
      if (!cases[i].throws.empty()) {
        EXPECT_EQ(got.value("threw", "(nothing thrown)"), cases[i].throws) << cases[i].expr << "\n  saw " << got.dump();
      } else {
        EXPECT_FALSE(got.contains("threw")) << cases[i].expr << "\n  threw " << got.dump();
        EXPECT_EQ(got.value("value", Json()), cases[i].expected) << cases[i].expr;
      }
    }
  }
  int flows_ = 0;
};

TEST_F(WebGlobalsTest, Url) {
  Open();
  Check({
      Is("new URL('http://example.com/a/b?c#d').href", "http://example.com/a/b?c#d"),
      // Relative references against a base.
      Is("new URL('../x?y', 'http://h.com/a/b/c').href", "http://h.com/a/x?y"),
      Is("new URL('//other.org/p', 'https://h.com/a').href", "https://other.org/p"),
      Is("new URL('?q=1', 'http://h.com/a/b').href", "http://h.com/a/b?q=1"),
      Is("new URL('#f', 'http://h.com/a?x').href", "http://h.com/a?x#f"),
      Is("new URL('/root', new URL('http://h.com/a/b')).href", "http://h.com/root"),
      Is("new URL('http://h.com/a/./b/../c').pathname", "/a/c"),
      // Hosts: the IPv4 forms an SSRF check must see through, IPv6, IDN to punycode, case.
      Is("new URL('http://0x7f.1/').href", "http://127.0.0.1/"),
      Is("new URL('http://2130706433/').host", "127.0.0.1"),
      Is("new URL('http://0177.0.0.1/').hostname", "127.0.0.1"),
      Is("new URL('http://127.1/').hostname", "127.0.0.1"),
      Is("new URL('http://[0:0::1]:8080/').host", "[::1]:8080"),
      Is("new URL('http://[::ffff:127.0.0.1]/').hostname", "[::ffff:7f00:1]"),
      Is("new URL('http://münchen.de/').hostname", "xn--mnchen-3ya.de"),
      Is("new URL('https://bücher.example/ä?ö#ü').href", "https://xn--bcher-kva.example/%C3%A4?%C3%B6#%C3%BC"),
      Is("new URL('http://EXAMPLE.com./').hostname", "example.com."),
      Is("new URL('HTTP://u:p@H.com:80/').href", "http://u:p@h.com/"),
      Is("[new URL('https://h.com:8443/x').port, new URL('https://h.com:443/').port]", Json::parse(R"(["8443", ""])")),
      Is("new URL('https://h.com/a').origin", "https://h.com"),
      Is("new URL('data:text/plain,hi').pathname", "text/plain,hi"),
      Is("new URL('mailto:a@b.c').protocol", "mailto:"),
      // What is not a URL.
      Throws("new URL('not a url')", "TypeError"),
      Throws("new URL('/relative')", "TypeError"),
      Throws("new URL('http://exa mple.com/')", "TypeError"),
      Throws("new URL('http://[::1/')", "TypeError"),
      Throws("new URL('http://256.0.0.1/')", "TypeError"),
      Throws("new URL('http://xn--a.com/')", "TypeError"),
      Is("[URL.canParse('http://x'), URL.canParse('x'), URL.canParse('x', 'http://h/')]", Json::parse("[true, false, true]")),
      // Setters, serialization.
      Is("(() => { const u = new URL('http://h.com/p'); u.pathname = 'a b'; u.hash = 'x'; u.port = '81'; return u.href; })()",
         "http://h.com:81/a%20b#x"),
      Is("[new URL('http://h.com').toJSON(), String(new URL('http://h.com')), JSON.stringify({u: new URL('http://h.com/x')})]",
         Json::parse(R"(["http://h.com/", "http://h.com/", "{\"u\":\"http://h.com/x\"}"])")),
      Is("Object.prototype.toString.call(new URL('http://h.com'))", "[object URL]"),
      // searchParams is live both ways and always the same object.
      Is("(() => { const u = new URL('http://h.com/?a=1'); u.searchParams.append('b', '2 3'); const s1 = u.href;"
         " u.search = '?c=4'; return [s1, u.searchParams.get('c'), u.searchParams.has('a'), u.searchParams === u.searchParams]; })()",
         Json::parse(R"(["http://h.com/?a=1&b=2+3", "4", false, true])")),
      Is("(() => { const u = new URL('http://h.com/?a=1'); u.searchParams.delete('a'); return u.href; })()", "http://h.com/"),
  });
}

TEST_F(WebGlobalsTest, UrlSearchParams) {
  Open();
  Check({
      Is("new URLSearchParams('a=1&b=2&a=3').getAll('a')", Json::parse(R"(["1", "3"])")),
      Is("new URLSearchParams('?a=b%20c+d').get('a')", "b c d"),
      Is("new URLSearchParams('a=1').get('missing')", nullptr),
      Is("new URLSearchParams({x: 'é', y: '&='}).toString()", "x=%C3%A9&y=%26%3D"),
      Is("new URLSearchParams([['a', '1'], ['b', '2']]).toString()", "a=1&b=2"),
      Is("new URLSearchParams('a= b*-._~!').toString()", "a=+b*-._%7E%21"),
      Is("new URLSearchParams('a=%zz&b=%41').toString()", "a=%25zz&b=A"),
      // sort(): stable, by UTF-16 code units (so U+1F308's surrogates sort before U+FB03).
      Is("(() => { const p = new URLSearchParams('z=1&a=2&z=0&b=3'); p.sort(); return p.toString(); })()", "a=2&b=3&z=1&z=0"),
      Is(R"((() => { const p = new URLSearchParams('\uFB03&\u{1F308}'); p.sort(); return [...p.keys()]; })())",
         Json::parse(R"(["🌈", "ﬃ"])")),
      Is("(() => { const p = new URLSearchParams('a=1&a=2&b=3'); p.delete('a', '2'); p.set('b', 'x'); return p.toString(); })()",
         "a=1&b=x"),
      Is("[...new URLSearchParams('a=1&b=2')]", Json::parse(R"([["a", "1"], ["b", "2"]])")),
      Is("new URLSearchParams('a=1&b=2').size", 2),
      Throws("new URLSearchParams([['a']])", "TypeError"),
  });
}

TEST_F(WebGlobalsTest, TextEncoderAndTextDecoder) {
  Open();
  Check({
      Is("Array.from(new TextEncoder().encode('aé€😀'))", Json::parse("[97, 195, 169, 226, 130, 172, 240, 159, 152, 128]")),
      // Lone surrogates (not UTF-8) become U+FFFD.
      Is(R"(Array.from(new TextEncoder().encode('\uD800x')))", Json::parse("[239, 191, 189, 120]")),
      Is(R"(Array.from(new TextEncoder().encode('a\uDC00')))", Json::parse("[97, 239, 191, 189]")),
      Is("[new TextEncoder().encoding, new TextEncoder().encode().length]", Json::parse(R"(["utf-8", 0])")),
      // encodeInto writes whole characters only; `read` counts UTF-16 code units.
      Is("(() => { const u = new Uint8Array(5); const r = new TextEncoder().encodeInto('a€😀', u); return [r.read, r.written, Array.from(u)]; })()",
         Json::parse("[2, 4, [97, 226, 130, 172, 0]]")),
      Is(R"((() => { const r = new TextEncoder().encodeInto('😀\uD800', new Uint8Array(8)); return [r.read, r.written]; })())",
         Json::parse("[3, 7]")),
      Throws("new TextEncoder().encodeInto('a', [])", "TypeError"),
      // BOM: stripped unless ignoreBOM.
      Is("new TextDecoder().decode(new Uint8Array([0xEF, 0xBB, 0xBF, 0x68, 0x69]))", "hi"),
      Is("new TextDecoder('utf-8', {ignoreBOM: true}).decode(new Uint8Array([0xEF, 0xBB, 0xBF, 0x68])) === '\\uFEFFh'", true),
      Is("new TextDecoder().decode(new Uint8Array([0x68, 0xEF, 0xBB, 0xBF])) === 'h\\uFEFF'", true),
      // Invalid UTF-8: one U+FFFD per maximal subpart, or TypeError when fatal.
      Is("new TextDecoder().decode(new Uint8Array([0x61, 0xFF, 0x62, 0xC3]))", "a\uFFFDb\uFFFD"),
      Is("new TextDecoder().decode(new Uint8Array([0xF0, 0x9F, 0x98]))", "\uFFFD"),
      Is("new TextDecoder().decode(new Uint8Array([0xED, 0xA0, 0x80]))", "\uFFFD\uFFFD\uFFFD"),
      Is("new TextDecoder().decode(new Uint8Array([0xC0, 0xAF]))", "\uFFFD\uFFFD"),
      Throws("new TextDecoder('utf-8', {fatal: true}).decode(new Uint8Array([0xFF]))", "TypeError"),
      Throws("new TextDecoder('utf-8', {fatal: true}).decode(new Uint8Array([0xED, 0xA0, 0x80]))", "TypeError"),
      Is("new TextDecoder('utf-8', {fatal: true}).decode(new Uint8Array([0xE2, 0x82, 0xAC]))", "€"),
      // Labels.
      Is("[new TextDecoder(' UTF8 ').encoding, new TextDecoder('unicode-1-1-utf-8').encoding, new TextDecoder().encoding]",
         Json::parse(R"(["utf-8", "utf-8", "utf-8"])")),
      Throws("new TextDecoder('latin1')", "RangeError"),
      Throws("new TextDecoder('utf-16le')", "RangeError"),
      Is("[new TextDecoder('utf-8', {fatal: true}).fatal, new TextDecoder().fatal, new TextDecoder('utf8', {ignoreBOM: 1}).ignoreBOM]",
         Json::parse("[true, false, true]")),
      // Streaming keeps an incomplete sequence for the next call, and a BOM split across calls.
      Is("(() => { const d = new TextDecoder(); return d.decode(new Uint8Array([0xE2, 0x82]), {stream: true}) + '|' + d.decode(new Uint8Array([0xAC])); })()",
         "|€"),
      Is("(() => { const d = new TextDecoder(); return d.decode(new Uint8Array([0xEF, 0xBB]), {stream: true}) + d.decode(new Uint8Array([0xBF, 0x41])); })()",
         "A"),
      Is("(() => { const d = new TextDecoder(); return d.decode(new Uint8Array([0xE2, 0x82]), {stream: true}) + d.decode(); })()", "\uFFFD"),
      // Every BufferSource.
      Is("new TextDecoder().decode(new Uint8Array([104, 105]).buffer)", "hi"),
      Is("new TextDecoder().decode(new DataView(new Uint8Array([0, 104, 105]).buffer, 1))", "hi"),
      Is("new TextDecoder().decode(new Uint16Array([0x6968]))", "hi"),
      Is("new TextDecoder().decode(new Uint8Array([0, 104, 105, 0]).subarray(1, 3))", "hi"),
      Is("new TextDecoder().decode()", ""),
      Throws("new TextDecoder().decode('hi')", "TypeError"),
      Is("new TextDecoder().decode(new TextEncoder().encode('x'.repeat(100000) + '€')).length", 100001),
  });
}

TEST_F(WebGlobalsTest, AtobAndBtoa) {
  Open();
  Check({
      Is("btoa('hello')", "aGVsbG8="),
      Is(R"(btoa('\xff\xfe'))", "//4="),
      Is("btoa('')", ""),
      Throws("btoa('€')", "InvalidCharacterError"),
      Throws("btoa()", "TypeError"),
      Is("atob('aGVsbG8=')", "hello"),
      Is("atob(' aGVs\\tbG8\\n ')", "hello"),  // ASCII whitespace is ignored
      Is("atob('aGVsbG8')", "hello"),          // padding is optional
      Is("atob('YQ')", "a"),
      Is("atob('//4=') === '\\xff\\xfe'", true),
      Is("atob(null).length", 3),  // "null" is valid base64
      Throws("atob('a')", "InvalidCharacterError"),
      Throws("atob('aGVsbG8==')", "InvalidCharacterError"),
      Throws("atob('YQ===')", "InvalidCharacterError"),
      Throws("atob('ab=c')", "InvalidCharacterError"),
      Throws("atob('a*bc')", "InvalidCharacterError"),
      Throws("atob('YWJj\\u00e9')", "InvalidCharacterError"),
      Throws("atob(undefined)", "InvalidCharacterError"),
      Throws("atob()", "TypeError"),
      Is("(() => { try { atob('*'); } catch (e) { return [e instanceof DOMException, e instanceof Error, e.name, e.code]; } })()",
         Json::parse(R"([true, true, "InvalidCharacterError", 5])")),
      Is("atob(btoa(String.fromCharCode(...Array.from({length: 256}, (_, i) => i)))).length", 256),
  });
}

TEST_F(WebGlobalsTest, StructuredClone) {
  Open();
  Check({
      // Cycles and shared references are kept.
      Is("(() => { const a = {n: 1}; a.self = a; const c = structuredClone(a); return [c !== a, c.self === c, c.n]; })()",
         Json::parse("[true, true, 1]")),
      Is("(() => { const x = {}; const c = structuredClone([x, x]); return [c[0] === c[1], c[0] !== x]; })()", Json::parse("[true, true]")),
      Is("(() => { const k = {id: 1}; const m = new Map([[k, 'v'], ['s', new Set([1, k])]]); const c = structuredClone(m);"
         " const ck = [...c.keys()][0]; return [c instanceof Map, c.get(ck), c.get('s') instanceof Set, c.get('s').has(ck), ck !== k]; })()",
         Json::parse(R"([true, "v", true, true, true])")),
      Is("(() => { const d = new Date(1700000000000); const c = structuredClone(d); return [c instanceof Date, c.getTime(), c !== d]; })()",
         Json::parse("[true, 1700000000000, true]")),
      Is("(() => { const r = /a+b/gi; r.lastIndex = 3; const c = structuredClone(r); return [c instanceof RegExp, c.source, c.flags, c.lastIndex, c !== r]; })()",
         Json::parse(R"([true, "a+b", "gi", 0, true])")),
      // Views of one buffer stay views of one (new) buffer.
      Is("(() => { const buf = new ArrayBuffer(8); const a = new Uint8Array(buf, 2, 4); a[0] = 7; const b = new Uint16Array(buf);"
         " const c = structuredClone({a, b}); c.a[1] = 9;"
         " return [c.a instanceof Uint8Array, c.a.byteOffset, c.a.length, c.a[0], c.a.buffer === c.b.buffer, c.b.buffer !== buf, new Uint8Array(buf)[3]]; })()",
         Json::parse("[true, 2, 4, 7, true, true, 0]")),
      Is("(() => { const d = new DataView(new ArrayBuffer(4), 1, 2); d.setUint8(0, 5); const c = structuredClone(d);"
         " return [c instanceof DataView, c.byteOffset, c.byteLength, c.getUint8(0)]; })()",
         Json::parse("[true, 1, 2, 5]")),
      Is("(() => { const c = structuredClone(new BigInt64Array([-5n])); return [c instanceof BigInt64Array, String(c[0])]; })()",
         Json::parse(R"([true, "-5"])")),
      Is("(() => { const c = structuredClone([Object(1), Object('s'), Object(false), Object(2n)]);"
         " return [typeof c[0], c[0] + 1, c[1] + '!', c[2].valueOf(), typeof c[3]]; })()",
         Json::parse(R"(["object", 2, "s!", false, "object"])")),
      Is("(() => { const c = structuredClone(new RangeError('bad')); return [c instanceof RangeError, c.name, c.message]; })()",
         Json::parse(R"([true, "RangeError", "bad"])")),
      // A class instance is copied as a plain object of its own properties (as in browsers).
      Is("(() => { class P { #secret = 1; constructor() { this.x = 2; } get s() { return this.#secret; } }"
         " const c = structuredClone(new P()); return [Object.getPrototypeOf(c) === Object.prototype, c.x, 's' in c]; })()",
         Json::parse("[true, 2, false]")),
      Is("(() => { const a = [1, , 3]; a.extra = 'e'; const c = structuredClone(a); return [Array.isArray(c), c.length, 1 in c, c.extra]; })()",
         Json::parse(R"([true, 3, false, "e"])")),
      Is("[structuredClone(null), structuredClone('s'), Object.is(structuredClone(-0), -0), typeof structuredClone(10n),"
         " structuredClone(undefined) === undefined, structuredClone(NaN) !== structuredClone(NaN)]",
         Json::parse(R"([null, "s", true, "bigint", true, true])")),
      // What cannot be cloned: a DataCloneError DOMException.
      Is("(() => { try { structuredClone({f() {}}); } catch (e) { return [e.name, e instanceof DOMException, e.code]; } })()",
         Json::parse(R"(["DataCloneError", true, 25])")),
      Throws("structuredClone(() => 1)", "DataCloneError"),
      Throws("structuredClone(Symbol('x'))", "DataCloneError"),
      Throws("structuredClone({s: Symbol.iterator})", "DataCloneError"),
      Throws("structuredClone(new WeakMap())", "DataCloneError"),
      Throws("structuredClone(Promise.resolve(1))", "DataCloneError"),
      Throws("structuredClone()", "TypeError"),
      // transfer detaches the original buffer.
      Is("(() => { const b = new Uint8Array([1, 2, 3]).buffer; const c = structuredClone(b, {transfer: [b]});"
         " let usable = true; try { new Uint8Array(b); } catch { usable = false; } return [usable, new Uint8Array(c)[2]]; })()",
         Json::parse("[false, 3]")),
      Throws("structuredClone(1, {transfer: [{}]})", "DataCloneError"),
  });
}

TEST_F(WebGlobalsTest, Crypto) {
  Open();
  Check({
      Is("crypto.getRandomValues(new Uint8Array(16)).length", 16),
      Is("(() => { const a = new Uint32Array(4); return crypto.getRandomValues(a) === a; })()", true),
      // 512 random bits all zero has probability 2^-512.
      Is("crypto.getRandomValues(new Uint8Array(64)).some(x => x !== 0)", true),
      Is("(() => { const b = new Uint8Array(8); crypto.getRandomValues(b.subarray(4)); return b.slice(0, 4).every(x => x === 0); })()", true),
      Is("[crypto.getRandomValues(new BigUint64Array(2)).length, crypto.getRandomValues(new Int16Array(3)).length, crypto.getRandomValues(new Uint8ClampedArray(1)).length]",
         Json::parse("[2, 3, 1]")),
      // The quota is 65536 bytes, whatever the element size.
      Is("crypto.getRandomValues(new Uint8Array(65536)).length", 65536),
      Throws("crypto.getRandomValues(new Uint8Array(65537))", "QuotaExceededError"),
      Throws("crypto.getRandomValues(new Uint32Array(16385))", "QuotaExceededError"),
      Is("(() => { try { crypto.getRandomValues(new Uint8Array(65537)); } catch (e) { return [e instanceof DOMException, e.code]; } })()",
         Json::parse("[true, 22]")),
      // Integer typed arrays only.
      Throws("crypto.getRandomValues(new Float32Array(4))", "TypeMismatchError"),
      Throws("crypto.getRandomValues(new Float64Array(4))", "TypeMismatchError"),
      Throws("crypto.getRandomValues(new DataView(new ArrayBuffer(4)))", "TypeError"),
      Throws("crypto.getRandomValues(new ArrayBuffer(4))", "TypeError"),
      Throws("crypto.getRandomValues([1, 2])", "TypeError"),
      Throws("crypto.getRandomValues()", "TypeError"),
      Is("/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/.test(crypto.randomUUID())", true),
      Is("new Set(Array.from({length: 100}, () => crypto.randomUUID())).size", 100),
      Is("[Object.prototype.toString.call(crypto), typeof crypto.subtle]", Json::parse(R"(["[object Crypto]", "undefined"])")),
  });
}

// A live worker's performance: the monotonic clock since the worker loaded its flow (a durable
// worker's is its run's clock: durable_worker_test.cpp).
TEST_F(WebGlobalsTest, Performance) {
  Open();
  Check({
      Is("[typeof performance, typeof performance.now(), typeof performance.timeOrigin]",
         Json::parse(R"(["object", "number", "number"])")),
      Is("(() => { const a = performance.now(); const b = performance.now(); return a >= 0 && b >= a; })()", true),
      // A million additions take more than the microsecond performance.now() counts in.
      Is("(() => { const a = performance.now(); let s = 0; for (let i = 0; i < 1e6; i++) s += i;"
         " return s > 0 && performance.now() > a; })()",
         true),
      // timeOrigin is when the worker loaded the flow, by the realtime clock: before now, after 2020.
      Is("performance.timeOrigin <= Date.now() && performance.timeOrigin > 1577836800000", true),
      Is("performance.toJSON().timeOrigin === performance.timeOrigin", true),
      Is("JSON.parse(JSON.stringify(performance)).timeOrigin === performance.timeOrigin", true),
      Is("Object.keys(performance).sort()", Json::parse(R"(["now", "timeOrigin", "toJSON"])")),
      Throws("(() => { performance.timeOrigin = 1; })()", "TypeError"),  // read-only (a module is strict)
  });
}

TEST_F(WebGlobalsTest, QueueMicrotask) {
  Open();
  Check({
      // A microtask runs after the current job, in order with promise reactions.
      Is("(async () => { const order = []; queueMicrotask(() => order.push('micro')); Promise.resolve().then(() => order.push('promise'));"
         " order.push('sync'); await null; await null; return order; })()",
         Json::parse(R"(["sync", "micro", "promise"])")),
      Is("(async () => { let ran = false; queueMicrotask(() => { ran = true; }); const before = ran; await null; return [before, ran]; })()",
         Json::parse("[false, true]")),
      // A callback that throws does not end the activation.
      Is("(async () => { queueMicrotask(() => { throw new Error('x'); }); await null; await null; return 'alive'; })()", "alive"),
      Throws("queueMicrotask('not a function')", "TypeError"),
      Throws("queueMicrotask()", "TypeError"),
  });
}

TEST_F(WebGlobalsTest, InternalHelpersForTheRuntimesOwnCode) {
  Open();
  Check({
      Is("Array.from(__basal_internal.base64ToBytes('AQID'))", Json::parse("[1, 2, 3]")),
      Is("Array.from(__basal_internal.base64ToBytes(' AQ ID '))", Json::parse("[1, 2, 3]")),
      Throws("__basal_internal.base64ToBytes('*')", "InvalidCharacterError"),
      Is("[__basal_internal.bytesToBase64(new Uint8Array([1, 2, 3])), __basal_internal.bytesToBase64(new Uint8Array([255]).buffer)]",
         Json::parse(R"(["AQID", "/w=="])")),
      Is("Array.from(__basal_internal.utf8Encode('é'))", Json::parse("[195, 169]")),
      Is("__basal_internal.utf8Decode(new Uint8Array([0xEF, 0xBB, 0xBF, 0x41, 0xFF]))", "A\uFFFD"),
      // Frozen and fixed: the runtime's code can rely on it once loaded.
      Is("(() => { const d = Object.getOwnPropertyDescriptor(globalThis, '__basal_internal');"
         " return [Object.isFrozen(__basal_internal), d.writable, d.configurable, d.enumerable]; })()",
         Json::parse("[true, false, false, false]")),
  });
}

// The script never reads a web global: none of them is loaded, in this activation or the next of
// the same worker. Reading one loads its group only, and then it is a plain global like the web's.
TEST_F(WebGlobalsTest, GlobalsAreLoadedOnFirstUseOnlyAndAreNotEnumerable) {
  Open();
  const std::string shape =
      "const names = ['URL', 'URLSearchParams', 'TextEncoder', 'TextDecoder', 'atob', 'btoa', 'structuredClone', 'crypto',"
      " 'queueMicrotask', 'DOMException', '__basal_internal', 'fetch', 'Request', 'Response', 'Headers', 'setTimeout',"
      " 'clearTimeout', 'setInterval', 'clearInterval', 'performance'];\n"
      "const shape = n => { const d = Object.getOwnPropertyDescriptor(globalThis, n); if (!d) return 'absent';"
      " return ('get' in d ? 'accessor' : 'data') + (d.enumerable ? '+enumerable' : '') + (d.configurable ? '+configurable' : '')"
      " + (d.writable ? '+writable' : ''); };\n"
      "const shapes = () => Object.fromEntries(names.map(n => [n, shape(n)]));\n";
  FlowRef untouched = Add(shape + "export default () => ({shapes: shapes(), keys: Object.keys(globalThis)});", "{}", "untouched.js");
  for (int i = 0; i < 2; ++i) {
    ActivationResult r = module_->Run(untouched, nullptr);
    ASSERT_TRUE(r.ok()) << r.message;
    for (const auto& [name, s] : r.result["shapes"].items()) EXPECT_EQ(s, "accessor+configurable") << name;
    for (const auto& key : r.result["keys"]) EXPECT_EQ(r.result["shapes"].count(key.get<std::string>()), 0u) << key;
  }

  FlowRef used = Add(shape +
                         "export default (input) => {\n"
                         "  if (input === 'core') { const v = atob('YQ=='); return [v, shapes()]; }\n"
                         "  if (input === 'url') { const v = new URL('http://h/').href; return [v, shapes()]; }\n"
                         "  return [null, shapes()];\n"
                         "};",
                     "{}", "used.js");
  ActivationResult core = module_->Run(used, "core");
  ASSERT_TRUE(core.ok()) << core.message;
  EXPECT_EQ(core.result[0], "a");
  for (const char* n : {"TextEncoder", "TextDecoder", "atob", "btoa", "structuredClone", "crypto", "queueMicrotask", "DOMException"})
    EXPECT_EQ(core.result[1][n], "data+configurable+writable") << n;
  EXPECT_EQ(core.result[1]["__basal_internal"], "data");
  EXPECT_EQ(core.result[1]["URL"], "accessor+configurable") << "reading atob must not load URL";
  EXPECT_EQ(core.result[1]["URLSearchParams"], "accessor+configurable");
  for (const char* n :
       {"fetch", "Request", "Response", "Headers", "setTimeout", "clearTimeout", "setInterval", "clearInterval", "performance"})
    EXPECT_EQ(core.result[1][n], "accessor+configurable") << "reading atob must not load " << n;
  ActivationResult url = module_->Run(used, "url");
  ASSERT_TRUE(url.ok()) << url.message;
  EXPECT_EQ(url.result[0], "http://h/");
  EXPECT_EQ(url.result[1]["URL"], "data+configurable+writable");
  EXPECT_EQ(url.result[1]["URLSearchParams"], "data+configurable+writable");
  ActivationResult later = module_->Run(used, nullptr);  // the same worker keeps what it loaded
  ASSERT_TRUE(later.ok()) << later.message;
  EXPECT_EQ(later.result[1]["URL"], "data+configurable+writable");
  EXPECT_EQ(module_->HealthReport()["spawned"], 2) << "one worker per flow, kept across its activations";
}

// docs/runtime.md lists the whole global object a flow sees; the list is the worker's.
TEST_F(WebGlobalsTest, TheGlobalObjectIsWhatRuntimeMdLists) {
  Open();
  std::ifstream page(std::string(BASAL_SOURCE_DIR) + "/docs/runtime.md");
  const std::string text((std::istreambuf_iterator<char>(page)), std::istreambuf_iterator<char>());
  const std::string intro = "is what `Object.getOwnPropertyNames(globalThis)` returns:\n`";
  const size_t start = text.find(intro);
  ASSERT_NE(start, std::string::npos) << "docs/runtime.md no longer lists the global object";
  const size_t end = text.find('`', start + intro.size());
  ASSERT_NE(end, std::string::npos);
  std::istringstream words(text.substr(start + intro.size(), end - start - intro.size()));
  Json documented = Json::array();
  for (std::string w; words >> w;) documented.push_back(w);
  FlowRef f = Add("export default () => Object.getOwnPropertyNames(globalThis).sort();", "{}", "globals.js");
  ActivationResult r = module_->Run(f, nullptr);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.result, documented) << "the worker's globals: " << r.result.dump();
}

TEST_F(WebGlobalsTest, AScriptMayReplaceOrDeleteAGlobalBeforeItLoads) {
  Open();
  Check({
      Is("(() => { globalThis.URL = 'mine'; const d = Object.getOwnPropertyDescriptor(globalThis, 'URL');"
         " return [URL, 'value' in d, d.writable, d.enumerable]; })()",
         Json::parse(R"(["mine", true, true, false])")),
      Is("(() => { delete globalThis.btoa; return [typeof btoa, 'btoa' in globalThis]; })()", Json::parse(R"(["undefined", false])")),
      Is("(() => { globalThis.crypto = {mine: true}; return crypto.mine; })()", true),
      // What was not replaced still loads; the replaced URL does not come back.
      Is("[atob('YQ=='), URL]", Json::parse(R"(["a", "mine"])")),
  });
}

// What a flow's context does not have (docs/runtime.md says so; fetch and the timers come from
// their own installers).
TEST_F(WebGlobalsTest, WhatTheRuntimeDoesNotHave) {
  Open();
  Check({
      Is("[typeof require, typeof module, typeof exports, typeof process, typeof Buffer, typeof global]",
         Json::parse(R"(["undefined", "undefined", "undefined", "undefined", "undefined", "undefined"])")),
      Is("[typeof ReadableStream, typeof WebAssembly, typeof Blob, typeof FormData, typeof AbortController, typeof Intl]",
         Json::parse(R"(["undefined", "undefined", "undefined", "undefined", "undefined", "undefined"])")),
      Is("[typeof std, typeof os, typeof print, typeof scriptArgs]",
         Json::parse(R"(["undefined", "undefined", "undefined", "undefined"])")),
      Is("[typeof globalThis, typeof Proxy, typeof Reflect, typeof BigInt, typeof WeakRef, typeof eval]",
         Json::parse(R"(["object", "function", "object", "function", "undefined", "function"])")),
  });
}

// URL's implementation (whatwg-url, tr46's mapping table) is the largest of the globals. It loads
// under a small heap budget, and under a budget too small for it the activation ends on that
// budget, as for any allocation the script causes, while the same budget still runs a flow that
// does not load it.
TEST_F(WebGlobalsTest, UrlUnderTheHeapBudget) {
  Open();
  const std::string source =
      "export default (input) => input ? new URL('https://bücher.example/a?b').hostname : 'no url';";
  ActivationResult small = module_->Run(Add(source, R"({"budgets": {"heap_mb": 4}})", "small.js"), true);
  ASSERT_TRUE(small.ok()) << small.message;
  EXPECT_EQ(small.result, "xn--bcher-kva.example");

  FlowRef tiny = Add(source, R"({"budgets": {"heap_mb": 1}})", "tiny.js");
  ActivationResult without = module_->Run(tiny, false);
  ASSERT_TRUE(without.ok()) << without.message;
  EXPECT_EQ(without.result, "no url");
  ActivationResult with = module_->Run(tiny, true);
  EXPECT_EQ(with.outcome, Outcome::kBudgetExhausted) << with.message;
  ASSERT_TRUE(with.budget.has_value()) << with.message;
  EXPECT_EQ(*with.budget, Budget::kMemory) << with.message;
}

}  // namespace
}  // namespace basal::testing
