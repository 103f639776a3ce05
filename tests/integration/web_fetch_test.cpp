// fetch, Request, Response and Headers in real flows (src/worker/js/fetch.js), against a FAKE
// `http.fetch` host call that speaks the parent's wire format (docs/runtime.md) and
// records the arguments it got. Each case of the table is one activation of one flow: what the
// script returns, and what reached the host.
//
// The fake replaces the module's real http.fetch (HostCallRegistry::Replace) so that each case
// controls the answer exactly; tests/integration/http_fetch_test.cpp runs fetch() against the real
// one and a loopback server.
#include <gtest/gtest.h>

#include <optional>

#include "integration/test_support.h"
#include "worker/codec.h"

namespace basal::testing {
namespace {

using Json = nlohmann::json;

constexpr const char* kFakeFetchName = "http.fetch";

std::string Base64Of(std::string_view bytes) { return worker::Base64Encode(bytes); }

// One flow, one function per case; the activation's input names the case.
constexpr const char* kFlow = R"JS(
const topLevel = fetch('https://example.com/top');
topLevel.catch(() => {});
const pairs = (h) => [...h];
const failure = async (p) => { try { await p; return 'no error'; } catch (e) { return [e.name, e.message]; } };
const thrown = (f) => { try { f(); return 'no error'; } catch (e) { return [e.name, e.message]; } };
class URLSearchParams {  // stands for the real one: recognised by its tag
  toString() { return 'a=1&b=%C3%A9'; }
  get [Symbol.toStringTag]() { return 'URLSearchParams'; }
}
const cases = {
  async wire() {
    const r = await fetch('https://example.com/a?b=1#frag', {
      method: 'post', headers: { 'X-One': ' 1 ', 'Content-Type': 'application/json' }, body: '{"k":1}' });
    return [r.status, r.ok, r.statusText, r.url, r.redirected, r.type, r.body, await r.text()];
  },
  async methods() {
    const out = [];
    for (const m of ['get', 'Delete', 'options', 'put', 'head', 'patch', 'Custom']) {
      const r = await fetch('https://example.com/', { method: m, body: m === 'put' || m === 'patch' ? 'x' : undefined });
      out.push(r.status);
    }
    return out;
  },
  async stringBody() { await fetch('https://example.com/', { method: 'POST', body: 'h\u00e9\uD800' }); return 'sent'; },
  async byteBodies() {
    await fetch('https://example.com/1', { method: 'POST', body: new Uint8Array([0, 255, 1]) });
    await fetch('https://example.com/2', { method: 'POST', body: new Uint8Array([9, 0, 255, 1, 9]).subarray(1, 4).buffer.slice(2, 5) });
    await fetch('https://example.com/3', { method: 'POST', body: new DataView(new Uint8Array([7, 0, 255, 1]).buffer, 1) });
    await fetch('https://example.com/4', { method: 'POST', body: new Uint16Array([0xff00, 0x0001]) });
    return 'sent';
  },
  async variants() {
    await fetch('https://example.com/v', { method: 'POST', body: null, headers: new Headers({ 'X-H': '1' }), redirect: 'error' });
    return 'sent';
  },
  async tooLarge() {
    return failure(fetch('https://example.com/big', { method: 'PUT', body: new Uint8Array(13 << 20) }));
  },
  async formBody() { await fetch('https://example.com/', { method: 'POST', body: new URLSearchParams() }); return 'sent'; },
  async givenContentType() {
    await fetch('https://example.com/', { method: 'POST', headers: [['content-TYPE', 'text/csv']], body: 'a,b' });
    return 'sent';
  },
  async refusedBeforeSending() {
    return [
      await failure(fetch('https://example.com/', { method: 'GET', body: 'x' })),
      await failure(fetch('https://example.com/', { method: 'HEAD', body: new Uint8Array(1) })),
      await failure(fetch('/relative/path')),
      await failure(fetch('example.com/no-scheme')),
      await failure(fetch('https://example.com/', { signal: {} })),
      await failure(fetch('https://example.com/', { headers: { 'bad name': 'x' } })),
      await failure(fetch('https://example.com/', { headers: { 'x-a': 'line\nbreak' } })),
      await failure(fetch('https://example.com/', { headers: { 'x-a': '\u0100' } })),
      await failure(fetch('https://example.com/', { method: 'CONNECT' })),
      await failure(fetch('https://example.com/', { method: 'bad method' })),
      await failure(fetch('https://example.com/', { redirect: 'sometimes' })),
      await failure(fetch('https://example.com/', 5)),
      await failure(fetch()),
    ].map(([name, message]) => name + ': ' + message);
  },
  async hostError() {
    try { await fetch('https://10.0.0.1/'); return 'no error'; } catch (e) {
      return [e instanceof TypeError, e.name, e.message, e.cause.name, e.cause.message];
    }
  },
  async topLevel() { return failure(topLevel); },
  async urlLike() {
    const r = await fetch({ toString() { return 'https://example.com/from-object'; } });
    return r.url;
  },
  async response() {
    const r = await fetch('https://example.com/r');
    const h = r.headers;
    return {
      status: r.status, ok: r.ok, statusText: r.statusText, url: r.url, redirected: r.redirected, type: r.type,
      contentType: h.get('Content-Type'), xb: h.get('X-B'), cookie: h.get('set-cookie'), cookies: h.getSetCookie(),
      pairs: pairs(h), keys: [...h.keys()], values: [...h.values()], has: [h.has('x-b'), h.has('x-c')],
      immutable: thrown(() => h.set('x-c', '1')),
      json: await r.json(), bodyUsed: r.bodyUsed,
      again: await failure(r.text()), cloneAfter: thrown(() => r.clone()),
    };
  },
  async readers() {
    const r = await fetch('https://example.com/r');
    const c = r.clone();
    const c2 = r.clone();
    const bytes = await r.bytes();
    const ab = await c.arrayBuffer();
    return [bytes instanceof Uint8Array, [...bytes], ab instanceof ArrayBuffer, ab.byteLength, await c2.text(),
            await failure(c2.blob())];
  },
  async badJson() { return failure((await fetch('https://example.com/r')).json()); },
  async decoding() { return [await (await fetch('https://example.com/r')).text()]; },
  async redirects() {
    const r = await fetch('https://example.com/start', { redirect: 'manual' });
    return [r.status, r.url, r.redirected, r.headers.get('location'), r.body, await r.text()];
  },
  async malformed() { return failure(fetch('https://example.com/r')); },
  async request() {
    const q = new Request('https://example.com/q#f', { method: 'put', headers: { 'X-A': '1' }, body: 'body' });
    const copy = q.clone();
    const derived = new Request(q, { headers: { 'X-B': '2' } });
    const out = {
      url: q.url, method: q.method, redirect: q.redirect, headers: pairs(q.headers), bodyUsedAfterDerive: q.bodyUsed,
      derived: [derived.url, derived.method, pairs(derived.headers)],
      copyText: await copy.text(), copyUsed: copy.bodyUsed, copyAgain: await failure(copy.text()),
      reuse: thrown(() => new Request(q)),
    };
    await fetch(derived);
    out.derivedUsedAfterFetch = derived.bodyUsed;
    out.getWithBody = thrown(() => new Request('https://example.com/', { body: 'x' }));
    return out;
  },
  async responses() {
    const r = new Response('hi', { status: 201, statusText: 'Created', headers: { 'X-A': 'b' } });
    const j = Response.json({ a: [1] }, { status: 202 });
    const e = Response.error();
    const d = Response.redirect('https://example.com/next', 301);
    const empty = new Response();
    return {
      r: [r.status, r.ok, r.statusText, r.type, r.url, r.redirected, pairs(r.headers), await r.text()],
      j: [j.status, j.headers.get('content-type'), await j.json()],
      e: [e.type, e.status, e.ok, thrown(() => e.headers.append('a', 'b'))[0]],
      d: [d.status, d.headers.get('location'), d.type],
      empty: [empty.status, empty.statusText, pairs(empty.headers), await empty.text(), await empty.text(), empty.bodyUsed],
      errors: [
        thrown(() => new Response('x', { status: 99 }))[0],
        thrown(() => new Response('x', { status: 600 }))[0],
        thrown(() => new Response('x', { status: 204 }))[0],
        thrown(() => new Response('x', { statusText: 'a\nb' }))[0],
        thrown(() => Response.redirect('https://example.com/', 200))[0],
        thrown(() => Response.redirect('/relative'))[0],
        thrown(() => Response.json(undefined))[0],
      ],
      nullBody: new Response(null, { status: 204 }).status,
    };
  },
  async headers() {
    const h = new Headers([['B', '1'], ['a', '2'], ['b', '3'], ['Set-Cookie', 'x=1'], ['set-cookie', 'y=2']]);
    const seen = [];
    h.forEach((value, name, self) => seen.push([name, value, self === h]));
    h.set('b', '4');
    h.append('c', '\t 5 \t');
    h.delete('A');
    const fromHeaders = new Headers(h);
    const fromRecord = new Headers({ 'Z': '1', 'y': '2' });
    return {
      seen, after: pairs(h), get: [h.get('B'), h.get('missing'), h.get('C')], copy: pairs(fromHeaders),
      record: pairs(fromRecord), tag: Object.prototype.toString.call(h),
      errors: [
        thrown(() => new Headers([['a', 'b', 'c']]))[0],
        thrown(() => new Headers([['a']]))[0],
        thrown(() => new Headers('a: b'))[0],
        thrown(() => h.get('bad name'))[0],
        thrown(() => h.append('x', 'a\rb'))[0],
        thrown(() => h.append('\u00e9', 'x'))[0],
      ],
    };
  },
  // Request's URL beside the URL class's href, for URLs the parser keeps as written and for URLs
  // it rewrites (fetch.js reads the first kind without the URL class).
  async urlForms() {
    const urls = [
      'http://127.0.0.1:8080/item', 'https://api.example.com/v1/items?page=2&sort=-date', 'http://a-b.c9.example/x/',
      'https://example.com/a:b@c/~_!$&()*+,;=-.x?q=/?:@', 'http://255.255.255.255/', 'http://0.0.0.0:1/',
      'http://example.com//double//slash', 'https://example.com/.hidden/..name/a..', 'https://example.com/?',
      'http://127.0.0.1:80/', 'https://example.com:443/x', 'http://example.com:080/', 'HTTP://Example.COM/A',
      'http://example.com', 'http://example.com/a/./b', 'http://example.com/a/../b', 'http://example.com/a/..',
      'http://example.com/a/%2e%2e/b', 'http://127.1/', 'http://0x7f.0.0.1/', 'http://010.0.0.1/',
      'http://1.2.3.4./', 'http://example.com./', 'http://a..b/', 'http://xn--nxasmq6b.com/',
      'http://example.123/', 'http://example.0x/', 'http://exämple.com/', 'http://example.com/a b',
      "http://example.com/it's?q='x'", 'http://example.com/a\\b', 'http://example.com/{x}|^`',
      'http://example.com/p#frag', 'http://user:pw@example.com/', ' http://example.com/ ', 'http://exa\tmple.com/',
      'http://example.com:65535/', 'http://example.com:65536/', 'https://example.com/%41%zz',
    ];
    const out = [];
    for (const u of urls) {
      let viaRequest, viaUrl;
      try { viaRequest = new Request(u).url; } catch (e) { viaRequest = e.name; }
      try { viaUrl = new URL(u).href; } catch (e) { viaUrl = 'TypeError'; }
      out.push([u, viaRequest, viaUrl]);
    }
    return out;
  },
};
export default async (name) => cases[name]();
)JS";

struct FetchCase {
  const char* name;
  std::optional<Json> answer;                         // the fake's answer; else it echoes
  std::optional<std::pair<std::string, std::string>> error;  // the fake's error (name, message)
  Json expected;                                      // what the activation returns
  Json sent = nullptr;                                // the args the fake got, when checked
};

class WebFetchTest : public ModuleFixture {
 protected:
  void SetUp() override {
    ModuleFixture::SetUp();
    ModuleOptions o;
    o.max_workers = 1;
    Open(o);
    HostCallSpec spec;
    spec.name = kFakeFetchName;
    spec.effect = Effect::kExternal;
    spec.handler = [this](const HostCallContext&, const Json& args, HostCallReply reply) {
      sent_.push_back(args);
      if (error_) return reply.Error(error_->first, error_->second);
      if (answer_) return reply.Ok(*answer_);
      // The echo: the request's body back, or "hello".
      const bool has_body = args.contains("body") && args["body"].is_object();
      reply.Ok({{"status", 200},
                {"status_text", "OK"},
                {"url", args.value("url", "")},
                {"redirected", false},
                {"headers", Json::array({Json::array({"content-type", "text/plain"})})},
                {"body_base64", has_body ? args["body"]["base64"].get<std::string>() : Base64Of("hello")}});
    };
    ASSERT_TRUE(module_->registry().Replace(std::move(spec)));
    flow_ = Add(kFlow, std::string(R"J({"grants": {")J") + kFakeFetchName + R"J(": {}}})J", "fetch.js");
  }
  ActivationResult RunCase(const FetchCase& c) {
    sent_.clear();
    answer_ = c.answer;
    error_ = c.error;
    return module_->Run(flow_, c.name);
  }
  FlowRef flow_;
  std::vector<Json> sent_;
  std::optional<Json> answer_;
  std::optional<std::pair<std::string, std::string>> error_;
};

Json Sent(const std::string& url, const std::string& method, Json headers, Json body, const std::string& redirect = "follow") {
  return {{"url", url}, {"method", method}, {"headers", std::move(headers)}, {"body", std::move(body)}, {"redirect", redirect}};
}

Json FetchAnswer(int status, Json headers, std::string_view body, const std::string& url = "https://example.com/r",
                 bool redirected = false, const std::string& status_text = "OK") {
  return {{"status", status}, {"status_text", status_text}, {"url", url}, {"redirected", redirected},
          {"headers", std::move(headers)}, {"body_base64", Base64Of(body)}};
}

TEST_F(WebFetchTest, EveryCaseReturnsWhatTheStandardSaysAndSendsTheWireFormat) {
  const Json kResponseHeaders = Json::parse(R"J([["content-type", "application/json"], ["set-cookie", "a=1"],
      ["x-b", "2"], ["Set-Cookie", "b=2"], ["x-b", "3"]])J");
  const std::vector<FetchCase> cases = {
      {"wire", std::nullopt, std::nullopt,
       Json::parse(R"J([200, true, "OK", "https://example.com/a?b=1", false, "basic", null, "{\"k\":1}"])J"),
       Sent("https://example.com/a?b=1", "POST",
            Json::parse(R"J([["x-one", "1"], ["content-type", "application/json"]])J"), {{"base64", Base64Of("{\"k\":1}")}})},
      {"methods", std::nullopt, std::nullopt, Json::parse("[200, 200, 200, 200, 200, 200, 200]")},
      {"stringBody", std::nullopt, std::nullopt, "sent",
       Sent("https://example.com/", "POST", Json::parse(R"J([["content-type", "text/plain;charset=UTF-8"]])J"),
            {{"base64", Base64Of("h\xC3\xA9\xEF\xBF\xBD")}})},
      {"variants", std::nullopt, std::nullopt, "sent",
       Sent("https://example.com/v", "POST", Json::parse(R"J([["x-h", "1"]])J"), nullptr, "error")},
      {"formBody", std::nullopt, std::nullopt, "sent",
       Sent("https://example.com/", "POST",
            Json::parse(R"J([["content-type", "application/x-www-form-urlencoded;charset=UTF-8"]])J"),
            {{"base64", Base64Of("a=1&b=%C3%A9")}})},
      {"givenContentType", std::nullopt, std::nullopt, "sent",
       Sent("https://example.com/", "POST", Json::parse(R"J([["content-type", "text/csv"]])J"), {{"base64", Base64Of("a,b")}})},
      {"refusedBeforeSending", std::nullopt, std::nullopt,
       Json::parse(R"J([
         "TypeError: new Request: a GET request cannot have a body (send one with POST or PUT)",
         "TypeError: new Request: a HEAD request cannot have a body (send one with POST or PUT)",
         "TypeError: new Request: \"/relative/path\" is not an absolute URL; a flow has no base URL to resolve a relative one against: write it whole, e.g. \"https://example.com/path\"",
         "TypeError: new Request: \"example.com/no-scheme\" is not an absolute URL; a flow has no base URL to resolve a relative one against: write it whole, e.g. \"https://example.com/path\"",
         "TypeError: new Request: signal is not supported in a flow (there is no AbortController); the parent bounds every request with its own timeout and the activation's deadline",
         "TypeError: new Request: \"bad name\" is not a valid header name (a token: letters, digits and !#$%&'*+-.^_`|~)",
         "TypeError: new Request: the header value \"line\\nbreak\" holds a NUL, CR or LF character",
         "TypeError: new Request: the header value \"Ā\" holds a character above U+00FF; header names and values are bytes (encode other text, e.g. with encodeURIComponent)",
         "TypeError: new Request: the method CONNECT is forbidden",
         "TypeError: new Request: \"bad method\" is not a valid HTTP method (a token)",
         "TypeError: new Request: redirect must be \"follow\", \"error\" or \"manual\" (got \"sometimes\")",
         "TypeError: new Request: init must be an object (got number)",
         "TypeError: fetch: the URL (or a Request) to fetch is missing"])J"),
       // Nothing was sent: every one was refused in the worker.
       nullptr},
      {"hostError", std::nullopt, std::make_pair(std::string("TypeError"), std::string("blocked by the SSRF guard: 10.0.0.1 is private")),
       Json::parse(R"J([true, "TypeError", "blocked by the SSRF guard: 10.0.0.1 is private", "TypeError",
                       "blocked by the SSRF guard: 10.0.0.1 is private"])J")},
      {"hostError", std::nullopt, std::make_pair(std::string("PermissionDenied"), std::string("no grant admits GET https://10.0.0.1/")),
       Json::parse(R"J([true, "TypeError", "no grant admits GET https://10.0.0.1/", "PermissionDenied",
                       "no grant admits GET https://10.0.0.1/"])J")},
      {"topLevel", std::nullopt, std::nullopt,
       Json::parse(R"J(["TypeError", "fetch: host.call: no activation is running (module top level cannot call the host)"])J")},
      {"urlLike", std::nullopt, std::nullopt, "https://example.com/from-object"},
      {"response", FetchAnswer(200, kResponseHeaders, "{\"n\": [1, 2]}", "https://example.com/r#x"), std::nullopt,
       Json::parse(R"J({
         "status": 200, "ok": true, "statusText": "OK", "url": "https://example.com/r", "redirected": false,
         "type": "basic", "contentType": "application/json", "xb": "2, 3", "cookie": "a=1, b=2",
         "cookies": ["a=1", "b=2"],
         "pairs": [["content-type", "application/json"], ["set-cookie", "a=1"], ["set-cookie", "b=2"], ["x-b", "2, 3"]],
         "keys": ["content-type", "set-cookie", "set-cookie", "x-b"],
         "values": ["application/json", "a=1", "b=2", "2, 3"], "has": [true, false],
         "immutable": ["TypeError", "Headers.set: these headers are immutable (those of a fetch() response, Response.error() or Response.redirect()); copy them with new Headers(h)"],
         "json": {"n": [1, 2]}, "bodyUsed": true,
         "again": ["TypeError", "Response.text: the body was already read (bodyUsed is true); clone() before reading a body twice"],
         "cloneAfter": ["TypeError", "Response.clone: the body was already read (bodyUsed is true)"]})J")},
      {"readers", FetchAnswer(200, Json::array(), "ab"), std::nullopt,
       Json::parse(R"J([true, [97, 98], true, 2, "ab",
                       ["TypeError", "Response.blob: a flow has no Blob; read the body with arrayBuffer() or bytes()"]])J")},
      {"badJson", FetchAnswer(200, Json::array(), "{not json"), std::nullopt, nullptr},
      // Ill-formed UTF-8 reads as U+FFFD, one per maximal subpart; a leading BOM is dropped.
      {"decoding", FetchAnswer(200, Json::array(), "\xEF\xBB\xBF" "a\xFF" "b\xE2\x82" "c"), std::nullopt,
       Json::array({"a\xEF\xBF\xBD" "b\xEF\xBF\xBD" "c"})},
      {"redirects", FetchAnswer(302, Json::parse(R"J([["location", "https://example.com/next"]])J"), "", "https://example.com/start", false, "Found"),
       std::nullopt, Json::parse(R"J([302, "https://example.com/start", false, "https://example.com/next", null, ""])J"),
       Sent("https://example.com/start", "GET", Json::array(), nullptr, "manual")},
      {"malformed", Json{{"status", "200"}}, std::nullopt, nullptr},
      {"request", std::nullopt, std::nullopt,
       Json::parse(R"J({
         "url": "https://example.com/q#f", "method": "PUT", "redirect": "follow",
         "headers": [["content-type", "text/plain;charset=UTF-8"], ["x-a", "1"]], "bodyUsedAfterDerive": true,
         "derived": ["https://example.com/q#f", "PUT", [["x-b", "2"]]],
         "copyText": "body", "copyUsed": true,
         "copyAgain": ["TypeError", "Request.text: the body was already read (bodyUsed is true); clone() before reading a body twice"],
         "reuse": ["TypeError", "new Request: the input Request's body was already read (bodyUsed is true)"],
         "derivedUsedAfterFetch": true,
         "getWithBody": ["TypeError", "new Request: a GET request cannot have a body (send one with POST or PUT)"]})J"),
       Sent("https://example.com/q", "PUT", Json::parse(R"J([["x-b", "2"]])J"), {{"base64", Base64Of("body")}})},
      {"responses", std::nullopt, std::nullopt,
       Json::parse(R"J({
         "r": [201, true, "Created", "default", "", false, [["content-type", "text/plain;charset=UTF-8"], ["x-a", "b"]], "hi"],
         "j": [202, "application/json", {"a": [1]}],
         "e": ["error", 0, false, "TypeError"],
         "d": [301, "https://example.com/next", "default"],
         "empty": [200, "", [], "", "", false],
         "errors": ["RangeError", "RangeError", "TypeError", "TypeError", "RangeError", "TypeError", "TypeError"],
         "nullBody": 204})J")},
      {"headers", std::nullopt, std::nullopt,
       Json::parse(R"J({
         "seen": [["a", "2", true], ["b", "1, 3", true], ["set-cookie", "x=1", true], ["set-cookie", "y=2", true]],
         "after": [["b", "4"], ["c", "5"], ["set-cookie", "x=1"], ["set-cookie", "y=2"]],
         "get": ["4", null, "5"],
         "copy": [["b", "4"], ["c", "5"], ["set-cookie", "x=1"], ["set-cookie", "y=2"]],
         "record": [["y", "2"], ["z", "1"]], "tag": "[object Headers]",
         "errors": ["TypeError", "TypeError", "TypeError", "TypeError", "TypeError", "TypeError"]})J")},
  };
  for (const FetchCase& c : cases) {
    SCOPED_TRACE(c.name);
    ActivationResult r = RunCase(c);
    ASSERT_TRUE(r.ok()) << r.message << "\n" << r.stack;
    if (std::string(c.name) == "badJson") {
      EXPECT_EQ(r.result[0], "SyntaxError") << r.result;
    } else if (std::string(c.name) == "malformed") {
      EXPECT_EQ(r.result[0], "TypeError") << r.result;
      EXPECT_NE(r.result[1].get<std::string>().find("malformed (status)"), std::string::npos) << r.result;
    } else {
      EXPECT_EQ(r.result, c.expected) << r.result.dump();
    }
    if (!c.sent.is_null()) {
      ASSERT_FALSE(sent_.empty());
      EXPECT_EQ(sent_.back(), c.sent) << sent_.back().dump();
    }
  }
}

TEST_F(WebFetchTest, ARequestsUrlIsTheUrlClassesHrefWhetherOrNotTheParserRewritesIt) {
  ActivationResult r = RunCase({"urlForms", std::nullopt, std::nullopt, nullptr});
  ASSERT_TRUE(r.ok()) << r.message;
  ASSERT_TRUE(r.result.is_array());
  ASSERT_EQ(r.result.size(), 39u);
  size_t kept = 0, rewritten = 0, refused = 0;
  for (const Json& row : r.result) {
    const std::string& written = row[0].get_ref<const std::string&>();
    EXPECT_EQ(row[1], row[2]) << written;
    if (row[2] == "TypeError") {
      ++refused;
    } else if (row[2] == written) {
      ++kept;
    } else {
      ++rewritten;
    }
  }
  // The table holds every kind: so a fast path that wrongly kept a URL as written shows here.
  EXPECT_GE(kept, 8u);
  EXPECT_GE(rewritten, 15u);
  EXPECT_GE(refused, 2u);
}

TEST_F(WebFetchTest, MethodsAreNormalizedAndBytesSentAsTheyAre) {
  ActivationResult r = RunCase({"methods", std::nullopt, std::nullopt, nullptr});
  ASSERT_TRUE(r.ok()) << r.message;
  ASSERT_EQ(sent_.size(), 7u);
  std::vector<std::string> methods;
  for (const Json& a : sent_) methods.push_back(a["method"]);
  EXPECT_EQ(methods, (std::vector<std::string>{"GET", "DELETE", "OPTIONS", "PUT", "HEAD", "patch", "Custom"}));

  r = RunCase({"byteBodies", std::nullopt, std::nullopt, nullptr});
  ASSERT_TRUE(r.ok()) << r.message;
  ASSERT_EQ(sent_.size(), 4u);
  const std::string bodies[] = {std::string("\0\xFF\x01", 3), std::string("\xFF\x01\x09", 3),
                                std::string("\0\xFF\x01", 3), std::string("\x00\xFF\x01\x00", 4)};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(sent_[i]["body"]["base64"], Base64Of(bodies[i])) << i;
    EXPECT_EQ(sent_[i]["headers"], Json::array()) << "bytes get no content-type";
  }
}

TEST_F(WebFetchTest, ABodyTooLargeForOneFrameIsRefusedInTheWorkerWithATypeError) {
  // 13 MiB is 17.3 MiB of base64: past the 16 MiB frame. The heap budget leaves room for the
  // copies (bytes, base64, JSON), so the frame limit is what refuses it.
  FlowRef roomy = Add(kFlow, std::string(R"J({"grants": {")J") + kFakeFetchName + R"J(": {}}, "budgets": {"heap_mb": 256}})J",
                      "roomy.js");
  ActivationResult r = module_->Run(roomy, "tooLarge");
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.result[0], "TypeError");
  EXPECT_EQ(r.result[1].get<std::string>().rfind("fetch: host.call: arguments too large to send", 0), 0u) << r.result;
  EXPECT_TRUE(sent_.empty()) << "nothing reached the host";
}

TEST_F(WebFetchTest, WithoutAGrantTheParentRefusesAndFetchRejectsWithATypeErrorCausedByIt) {
  FlowRef ungranted = Add(kFlow, "{}", "ungranted.js");
  ActivationResult r = module_->Run(ungranted, "hostError");
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.result[0], true);
  EXPECT_EQ(r.result[1], "TypeError");
  EXPECT_EQ(r.result[3], "PermissionDenied");
  EXPECT_NE(r.result[2].get<std::string>().find("not granted"), std::string::npos) << r.result;
  EXPECT_TRUE(sent_.empty()) << "the handler never ran";
}

}  // namespace
}  // namespace basal::testing
