// fetch, Request, Response, Headers for flows: the Fetch standard where it applies, over the
// `http.fetch` host call (the parent does the network: its grants, its SSRF guard, its limits).
// Installed by web_fetch.cpp: this file evaluates to a function that takes the worker's natives
// and the global object.
//
// What does not apply in a flow: streams (QuickJS has no ReadableStream: `body` is always null and
// bodies are read whole with text(), json(), arrayBuffer(), bytes()), AbortSignal (refused),
// Blob and FormData (none), CORS, credentials and caches (there is no browser), the "request"
// guard's forbidden header names (the parent decides what a request may carry).
// docs/runtime.md lists what flows can rely on.
(function (natives, global) {
  'use strict';
  const { hostCall, fetchHostCall, base64Encode, base64Decode, utf8Encode, utf8Decode } = natives;
  const TypeErrorCtor = TypeError;
  const RangeErrorCtor = RangeError;
  const InternalErrorCtor = global.InternalError;
  const defineProperty = Object.defineProperty;
  const toStringOf = Object.prototype.toString;
  const quote = JSON.stringify;

  const kTokenRe = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
  const kSchemeRe = /^[A-Za-z][A-Za-z0-9+.\-]*:/;
  const kNullBodyStatus = [101, 103, 204, 205, 304];
  const kRedirectStatus = [301, 302, 303, 307, 308];
  const kRedirectModes = ['follow', 'error', 'manual'];
  const kNormalizedMethods = ['DELETE', 'GET', 'HEAD', 'OPTIONS', 'POST', 'PUT'];
  const kForbiddenMethods = ['CONNECT', 'TRACE', 'TRACK'];
  const kInternal = Symbol('basal internal');

  function shown(v) {
    const s = String(v);
    return quote(s.length > 60 ? s.slice(0, 60) + '...' : s);
  }

  // WebIDL ByteString: every code unit at most U+00FF.
  function byteString(v, who, what) {
    const s = String(v);
    for (let i = 0; i < s.length; i++) {
      if (s.charCodeAt(i) > 0xff) {
        throw new TypeErrorCtor(`${who}: the ${what} ${shown(s)} holds a character above U+00FF; ` +
                                'header names and values are bytes (encode other text, e.g. with encodeURIComponent)');
      }
    }
    return s;
  }

  // WebIDL dictionaries: undefined and null are empty; anything else must be an object.
  function dictionary(init, who) {
    if (init === undefined || init === null) return {};
    if (typeof init !== 'object' && typeof init !== 'function') {
      throw new TypeErrorCtor(`${who}: init must be an object (got ${typeof init})`);
    }
    return init;
  }

  // ---- Headers ----
  const headersState = new WeakMap();  // Headers -> {list: [[lowercase name, value]], guard, sorted}

  function headerName(name, who) {
    const n = byteString(name, who, 'header name');
    if (!kTokenRe.test(n)) {
      throw new TypeErrorCtor(`${who}: ${shown(n)} is not a valid header name ` +
                              "(a token: letters, digits and !#$%&'*+-.^_`|~)");
    }
    return n.toLowerCase();
  }

  function headerValue(value, who) {
    // Leading and trailing HTTP whitespace is removed; what is left may hold no NUL, CR or LF.
    const v = byteString(value, who, 'header value').replace(/^[\t\n\r ]+|[\t\n\r ]+$/g, '');
    if (/[\0\r\n]/.test(v)) {
      throw new TypeErrorCtor(`${who}: the header value ${shown(v)} holds a NUL, CR or LF character`);
    }
    return v;
  }

  function headersOf(h, who) {
    const st = headersState.get(h);
    if (st === undefined) throw new TypeErrorCtor(`${who}: 'this' is not a Headers object`);
    return st;
  }

  function mutable(st, who) {
    if (st.guard === 'immutable') {
      throw new TypeErrorCtor(`${who}: these headers are immutable (those of a fetch() response, ` +
                              'Response.error() or Response.redirect()); copy them with new Headers(h)');
    }
    st.sorted = null;
  }

  function appendHeader(st, name, value, who) {
    const n = headerName(name, who);
    const v = headerValue(value, who);
    mutable(st, who);
    st.list.push([n, v]);
  }

  function fillHeaders(st, init, who) {
    if (init === null || (typeof init !== 'object' && typeof init !== 'function')) {
      throw new TypeErrorCtor(`${who}: headers must be a Headers, an array of [name, value] pairs or an ` +
                              `object of names to values (got ${init === null ? 'null' : typeof init})`);
    }
    const iterator = init[Symbol.iterator];
    if (iterator !== undefined && iterator !== null) {
      if (typeof iterator !== 'function') throw new TypeErrorCtor(`${who}: headers[Symbol.iterator] is not a function`);
      for (const pair of init) {
        if (pair === null || typeof pair !== 'object') {
          throw new TypeErrorCtor(`${who}: each header must be a [name, value] pair (got ${shown(pair)})`);
        }
        const items = [...pair];
        if (items.length !== 2) {
          throw new TypeErrorCtor(`${who}: each header must be a [name, value] pair of exactly two items ` +
                                  `(got ${items.length})`);
        }
        appendHeader(st, items[0], items[1], who);
      }
      return;
    }
    for (const key of Reflect.ownKeys(init)) {
      const desc = Reflect.getOwnPropertyDescriptor(init, key);
      if (desc === undefined || !desc.enumerable) continue;
      if (typeof key === 'symbol') throw new TypeErrorCtor(`${who}: a header name cannot be a symbol`);
      appendHeader(st, key, init[key], who);
    }
  }

  // The standard's "sort and combine": by name; values of one name joined with ", ", except
  // set-cookie, whose values stay apart.
  function sortedHeaders(st) {
    if (st.sorted !== null) return st.sorted;
    const names = [];
    const seen = new Set();
    for (const [n] of st.list) {
      if (!seen.has(n)) {
        seen.add(n);
        names.push(n);
      }
    }
    names.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    const out = [];
    for (const n of names) {
      if (n === 'set-cookie') {
        for (const [m, v] of st.list) if (m === n) out.push([n, v]);
      } else {
        out.push([n, combined(st, n)]);
      }
    }
    st.sorted = out;
    return out;
  }

  function combined(st, n) {
    let value = null;
    for (const [m, v] of st.list) if (m === n) value = value === null ? v : value + ', ' + v;
    return value;
  }

  function newHeaders(guard, list) {
    const h = Object.create(Headers.prototype);
    headersState.set(h, { list, guard, sorted: null });
    return h;
  }

  const headersIteratorState = new WeakMap();
  const HeadersIteratorPrototype = Object.create(Object.getPrototypeOf(Object.getPrototypeOf([][Symbol.iterator]())), {
    next: {
      value: function next() {
        const it = headersIteratorState.get(this);
        if (it === undefined) throw new TypeErrorCtor("Headers Iterator.next: 'this' is not a Headers iterator");
        const pairs = sortedHeaders(it.st);
        if (it.index >= pairs.length) return { value: undefined, done: true };
        const [n, v] = pairs[it.index++];
        return { value: it.kind === 'key' ? n : it.kind === 'value' ? v : [n, v], done: false };
      },
      writable: true, configurable: true,
    },
    [Symbol.toStringTag]: { value: 'Headers Iterator', configurable: true },
  });
  function headersIterator(h, kind, who) {
    const it = Object.create(HeadersIteratorPrototype);
    headersIteratorState.set(it, { st: headersOf(h, who), kind, index: 0 });
    return it;
  }

  class Headers {
    constructor(init = undefined) {
      const st = { list: [], guard: 'none', sorted: null };
      headersState.set(this, st);
      if (init !== undefined) fillHeaders(st, init, 'new Headers');
    }
    append(name, value) {
      appendHeader(headersOf(this, 'Headers.append'), name, value, 'Headers.append');
    }
    delete(name) {
      const st = headersOf(this, 'Headers.delete');
      const n = headerName(name, 'Headers.delete');
      mutable(st, 'Headers.delete');
      st.list = st.list.filter(([m]) => m !== n);
    }
    get(name) {
      const st = headersOf(this, 'Headers.get');
      return combined(st, headerName(name, 'Headers.get'));
    }
    getSetCookie() {
      const st = headersOf(this, 'Headers.getSetCookie');
      const out = [];
      for (const [n, v] of st.list) if (n === 'set-cookie') out.push(v);
      return out;
    }
    has(name) {
      const st = headersOf(this, 'Headers.has');
      const n = headerName(name, 'Headers.has');
      return st.list.some(([m]) => m === n);
    }
    set(name, value) {
      const st = headersOf(this, 'Headers.set');
      const n = headerName(name, 'Headers.set');
      const v = headerValue(value, 'Headers.set');
      mutable(st, 'Headers.set');
      const i = st.list.findIndex(([m]) => m === n);
      if (i < 0) {
        st.list.push([n, v]);
      } else {
        st.list[i] = [n, v];
        st.list = st.list.filter(([m], j) => m !== n || j === i);
      }
    }
    forEach(callback, thisArg = undefined) {
      const st = headersOf(this, 'Headers.forEach');
      if (typeof callback !== 'function') throw new TypeErrorCtor('Headers.forEach: the callback must be a function');
      for (let i = 0; i < sortedHeaders(st).length; i++) {
        const [n, v] = sortedHeaders(st)[i];
        callback.call(thisArg, v, n, this);
      }
    }
    entries() { return headersIterator(this, 'key+value', 'Headers.entries'); }
    keys() { return headersIterator(this, 'key', 'Headers.keys'); }
    values() { return headersIterator(this, 'value', 'Headers.values'); }
  }
  defineProperty(Headers.prototype, Symbol.iterator,
                 { value: Headers.prototype.entries, writable: true, configurable: true });
  defineProperty(Headers.prototype, Symbol.toStringTag, { value: 'Headers', configurable: true });

  function copyHeaders(h, guard) {
    return newHeaders(guard, headersState.get(h).list.map(([n, v]) => [n, v]));
  }

  // ---- bodies ----
  function isURLSearchParams(v) {
    const U = global.URLSearchParams;
    if (typeof U === 'function' && v instanceof U) return true;
    return toStringOf.call(v) === '[object URLSearchParams]';
  }

  // BodyInit -> {bytes: an ArrayBuffer of our own, type: the default content-type or null}.
  function extractBody(body) {
    if (body instanceof ArrayBuffer) return { bytes: body.slice(0), type: null };
    if (ArrayBuffer.isView(body)) {
      return { bytes: new Uint8Array(body.buffer, body.byteOffset, body.byteLength).slice().buffer, type: null };
    }
    if (typeof body === 'object' && body !== null && isURLSearchParams(body)) {
      return { bytes: utf8Encode(String(body)), type: 'application/x-www-form-urlencoded;charset=UTF-8' };
    }
    // Strings, and (as WebIDL converts them) anything else: its string, as UTF-8.
    return { bytes: utf8Encode(String(body)), type: 'text/plain;charset=UTF-8' };
  }

  // The standard's "consume body": a null body reads as empty (and is never "used"); a body reads
  // once. The buffer is handed out as it is: clone() and extractBody copy, so nobody else holds it.
  function consume(st, who) {
    if (st.body === null) return new ArrayBuffer(0);
    if (st.used) {
      throw new TypeErrorCtor(`${who}: the body was already read (bodyUsed is true); ` +
                              'clone() before reading a body twice');
    }
    st.used = true;
    const bytes = st.body;
    st.body = new ArrayBuffer(0);  // the text or value read is all that is kept
    return bytes;
  }

  function parseJson(text) {
    return JSON.parse(text);  // a SyntaxError for text that is not JSON
  }

  function bodyMethods(proto, stateOf, kind) {
    const methods = {
      async text() { return utf8Decode(consume(stateOf(this, `${kind}.text`), `${kind}.text`)); },
      async json() { return parseJson(utf8Decode(consume(stateOf(this, `${kind}.json`), `${kind}.json`))); },
      async arrayBuffer() { return consume(stateOf(this, `${kind}.arrayBuffer`), `${kind}.arrayBuffer`); },
      async bytes() { return new Uint8Array(consume(stateOf(this, `${kind}.bytes`), `${kind}.bytes`)); },
      async blob() {
        throw new TypeErrorCtor(`${kind}.blob: a flow has no Blob; read the body with arrayBuffer() or bytes()`);
      },
      async formData() {
        throw new TypeErrorCtor(`${kind}.formData: a flow has no FormData; read the body with text() and parse it`);
      },
    };
    for (const name of Object.keys(methods)) {
      defineProperty(proto, name, { value: methods[name], writable: true, enumerable: true, configurable: true });
    }
    defineProperty(proto, 'body', {
      // No ReadableStream in QuickJS: the body is read whole through the methods above.
      get() { stateOf(this, `${kind}.body`); return null; },
      enumerable: true, configurable: true,
    });
    defineProperty(proto, 'bodyUsed', {
      get() { return stateOf(this, `${kind}.bodyUsed`).used; },
      enumerable: true, configurable: true,
    });
  }

  // ---- URLs and methods ----
  // An http(s) URL already written the way the URL parser writes it back is its own href: a
  // lowercase scheme and host (a name of ASCII letters, digits and hyphens with no "xn--" label,
  // or a dotted-quad IPv4 address without leading zeros), no user info, no default port, a path,
  // an optional query, only printable ASCII the parser keeps as it is (no percent sign, quote,
  // backslash, space or control), no "." or ".." segment and no fragment. Parsing such a URL with
  // the URL class (whatwg-url, interpreted by QuickJS) costs about 200 us, more than half of what
  // a fetch() costs the worker; anything else is parsed. WebFetchTest's urlForms case checks both
  // give the same href.
  const kPlainUrlRe =
    /^(https?):\/\/([a-z0-9.-]+)(?::([1-9][0-9]{0,4}))?(\/[A-Za-z0-9._~!$&()*+,;=:@\/-]*)(?:\?[A-Za-z0-9._~!$&()*+,;=:@\/?-]*)?$/;
  const kDottedQuadRe = /^(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])$/;
  const kDotSegmentRe = /\/\.\.?(?:\/|$)/;
  const kNumberLabelRe = /^(?:[0-9]+|0x[0-9a-f]*)$/;  // the URL parser reads such a host as IPv4
  function isPlainUrl(s) {
    const m = kPlainUrlRe.exec(s);
    if (m === null) return false;
    const scheme = m[1], host = m[2], port = m[3], path = m[4];
    if (port !== undefined && (Number(port) > 65535 || Number(port) === (scheme === 'http' ? 80 : 443))) return false;
    if (kDotSegmentRe.test(path)) return false;
    const labels = host.split('.');
    if (kNumberLabelRe.test(labels[labels.length - 1])) return kDottedQuadRe.test(host);
    for (const label of labels) {
      if (label === '' || label.startsWith('xn--')) return false;
    }
    return true;
  }

  // An absolute URL, through the URL class when there is one. A flow has no base URL: a relative
  // one is refused.
  function parseUrl(input, who) {
    const s = String(input);
    if (isPlainUrl(s)) return s;
    const refused = () => new TypeErrorCtor(`${who}: ${shown(s)} is not an absolute URL; a flow has no base URL ` +
                                            'to resolve a relative one against: write it whole, e.g. "https://example.com/path"');
    const URLCtor = global.URL;
    if (typeof URLCtor === 'function') {
      try {
        return new URLCtor(s).href;
      } catch (e) {
        throw refused();
      }
    }
    // No URL class: the URL parser's first steps (no C0 controls or spaces around it, no tabs or
    // newlines inside), and a scheme.
    const trimmed = s.replace(/^[\0-\x20]+|[\0-\x20]+$/g, '').replace(/[\t\n\r]/g, '');
    if (!kSchemeRe.test(trimmed)) throw refused();
    return trimmed;
  }

  function withoutFragment(url) {
    const i = url.indexOf('#');
    return i < 0 ? url : url.slice(0, i);
  }

  function normalizeMethod(method, who) {
    const m = byteString(method, who, 'method');
    if (!kTokenRe.test(m)) throw new TypeErrorCtor(`${who}: ${shown(m)} is not a valid HTTP method (a token)`);
    const upper = m.toUpperCase();
    if (kForbiddenMethods.includes(upper)) throw new TypeErrorCtor(`${who}: the method ${upper} is forbidden`);
    return kNormalizedMethods.includes(upper) ? upper : m;
  }

  // ---- Request ----
  const requestState = new WeakMap();  // Request -> {url, method, headers, body, used, redirect}
  function requestOf(r, who) {
    const st = requestState.get(r);
    if (st === undefined) throw new TypeErrorCtor(`${who}: 'this' is not a Request`);
    return st;
  }

  class Request {
    constructor(input, init = undefined) {
      if (arguments.length === 0) throw new TypeErrorCtor('new Request: the URL (or a Request) is missing');
      const options = dictionary(init, 'new Request');
      const from = requestState.get(input);
      if (from !== undefined && from.used) {
        throw new TypeErrorCtor('new Request: the input Request\'s body was already read (bodyUsed is true)');
      }
      let url = from !== undefined ? from.url : parseUrl(input, 'new Request');
      let method = from !== undefined ? from.method : 'GET';
      let redirect = from !== undefined ? from.redirect : 'follow';
      if (options.method !== undefined) method = normalizeMethod(options.method, 'new Request');
      if (options.redirect !== undefined) {
        redirect = String(options.redirect);
        if (!kRedirectModes.includes(redirect)) {
          throw new TypeErrorCtor(`new Request: redirect must be "follow", "error" or "manual" (got ${shown(redirect)})`);
        }
      }
      if (options.signal !== undefined && options.signal !== null) {
        throw new TypeErrorCtor('new Request: signal is not supported in a flow (there is no AbortController); ' +
                                'the parent bounds every request with its own timeout and the activation\'s deadline');
      }
      const headers = options.headers !== undefined ? newHeaders('request', [])
                                                    : from !== undefined ? copyHeaders(from.headers, 'request')
                                                                          : newHeaders('request', []);
      if (options.headers !== undefined) fillHeaders(headersState.get(headers), options.headers, 'new Request');
      let body = null;
      let takesInputBody = false;
      if (options.body !== undefined && options.body !== null) {
        const extracted = extractBody(options.body);
        body = extracted.bytes;
        if (extracted.type !== null && !headers.has('content-type')) {
          headersState.get(headers).list.push(['content-type', extracted.type]);
        }
      } else if (from !== undefined && from.body !== null) {
        body = from.body;
        takesInputBody = true;
      }
      if (body !== null && (method === 'GET' || method === 'HEAD')) {
        throw new TypeErrorCtor(`new Request: a ${method} request cannot have a body (send one with POST or PUT)`);
      }
      if (takesInputBody) {
        // The standard moves the body: the input Request reads as used from now on.
        from.used = true;
        from.body = null;
      }
      requestState.set(this, { url, method, headers, body, used: false, redirect });
    }
    get url() { return requestOf(this, 'Request.url').url; }
    get method() { return requestOf(this, 'Request.method').method; }
    get headers() { return requestOf(this, 'Request.headers').headers; }
    get redirect() { return requestOf(this, 'Request.redirect').redirect; }
    clone() {
      const st = requestOf(this, 'Request.clone');
      if (st.used) throw new TypeErrorCtor('Request.clone: the body was already read (bodyUsed is true)');
      const r = Object.create(Request.prototype);
      requestState.set(r, { url: st.url, method: st.method, headers: copyHeaders(st.headers, 'request'),
                            body: st.body === null ? null : st.body.slice(0), used: false, redirect: st.redirect });
      return r;
    }
  }
  bodyMethods(Request.prototype, requestOf, 'Request');
  defineProperty(Request.prototype, Symbol.toStringTag, { value: 'Request', configurable: true });

  // ---- Response ----
  const responseState = new WeakMap();  // Response -> {type, url, status, statusText, headers, body, used, redirected}
  function responseOf(r, who) {
    const st = responseState.get(r);
    if (st === undefined) throw new TypeErrorCtor(`${who}: 'this' is not a Response`);
    return st;
  }

  function newResponse(st) {
    const r = Object.create(Response.prototype);
    responseState.set(r, st);
    return r;
  }

  // The standard's "initialize a response": status, statusText, headers, then the body.
  function initResponse(init, body, who) {
    const options = dictionary(init, who);
    const status = options.status === undefined ? 200 : Number(options.status) & 0xffff;  // WebIDL unsigned short
    if (status < 200 || status > 599) {
      throw new RangeErrorCtor(`${who}: status must be from 200 to 599 (got ${shown(options.status)})`);
    }
    const statusText = options.statusText === undefined ? '' : byteString(options.statusText, who, 'statusText');
    if (/[^\t\x20-\x7e\x80-\xff]/.test(statusText)) {
      throw new TypeErrorCtor(`${who}: statusText ${shown(statusText)} holds a control character`);
    }
    const headers = newHeaders('response', []);
    if (options.headers !== undefined) fillHeaders(headersState.get(headers), options.headers, who);
    let bytes = null;
    if (body !== null) {
      if (kNullBodyStatus.includes(status)) {
        throw new TypeErrorCtor(`${who}: a response with status ${status} cannot have a body`);
      }
      bytes = body.bytes;
      if (body.type !== null && !headers.has('content-type')) {
        headersState.get(headers).list.push(['content-type', body.type]);
      }
    }
    return { type: 'default', url: '', status, statusText, headers, body: bytes, used: false, redirected: false };
  }

  class Response {
    constructor(body = null, init = undefined) {
      const extracted = body === null || body === undefined ? null : extractBody(body);
      responseState.set(this, initResponse(init, extracted, 'new Response'));
    }
    static error() {
      return newResponse({ type: 'error', url: '', status: 0, statusText: '', headers: newHeaders('immutable', []),
                           body: null, used: false, redirected: false });
    }
    static redirect(url, status = 302) {
      const location = parseUrl(url, 'Response.redirect');
      const code = Number(status) & 0xffff;
      if (!kRedirectStatus.includes(code)) {
        throw new RangeErrorCtor(`Response.redirect: status must be 301, 302, 303, 307 or 308 (got ${shown(status)})`);
      }
      return newResponse({ type: 'default', url: '', status: code, statusText: '',
                           headers: newHeaders('immutable', [['location', location]]), body: null, used: false,
                           redirected: false });
    }
    static json(data, init = undefined) {
      const text = JSON.stringify(data);
      if (text === undefined) {
        throw new TypeErrorCtor('Response.json: the data cannot be serialized as JSON (undefined, a function or a symbol)');
      }
      return newResponse(initResponse(init, { bytes: utf8Encode(text), type: 'application/json' }, 'Response.json'));
    }
    get type() { return responseOf(this, 'Response.type').type; }
    get url() { return responseOf(this, 'Response.url').url; }
    get redirected() { return responseOf(this, 'Response.redirected').redirected; }
    get status() { return responseOf(this, 'Response.status').status; }
    get ok() {
      const s = responseOf(this, 'Response.ok').status;
      return s >= 200 && s <= 299;
    }
    get statusText() { return responseOf(this, 'Response.statusText').statusText; }
    get headers() { return responseOf(this, 'Response.headers').headers; }
    clone() {
      const st = responseOf(this, 'Response.clone');
      if (st.used) throw new TypeErrorCtor('Response.clone: the body was already read (bodyUsed is true)');
      return newResponse({ type: st.type, url: st.url, status: st.status, statusText: st.statusText,
                           headers: copyHeaders(st.headers, headersState.get(st.headers).guard),
                           body: st.body === null ? null : st.body.slice(0), used: false, redirected: st.redirected });
    }
  }
  bodyMethods(Response.prototype, responseOf, 'Response');
  defineProperty(Response.prototype, Symbol.toStringTag, { value: 'Response', configurable: true });

  // ---- fetch ----
  function malformed(what) {
    return new TypeErrorCtor(`fetch: the parent's answer to ${fetchHostCall} is malformed (${what}); ` +
                             'this is a bug in the host, not in the flow');
  }

  // The host's answer (its wire format: docs/runtime.md) as a Response.
  function responseFromHost(r, method) {
    if (r === null || typeof r !== 'object') throw malformed('not an object');
    const { status, status_text: statusText, url, redirected, headers, body_base64: body64 } = r;
    if (!Number.isInteger(status) || status < 0 || status > 999) throw malformed('status');
    if (typeof statusText !== 'string') throw malformed('status_text');
    if (typeof url !== 'string') throw malformed('url');
    if (typeof redirected !== 'boolean') throw malformed('redirected');
    if (!Array.isArray(headers)) throw malformed('headers');
    const list = [];
    for (const pair of headers) {
      if (!Array.isArray(pair) || pair.length !== 2 || typeof pair[0] !== 'string' || typeof pair[1] !== 'string') {
        throw malformed('a header');
      }
      list.push([pair[0].toLowerCase(), pair[1]]);
    }
    if (typeof body64 !== 'string') throw malformed('body_base64');
    let body = base64Decode(body64);
    if (body === null) throw malformed('body_base64 is not base64');
    if (method === 'HEAD' || kNullBodyStatus.includes(status)) body = null;
    return newResponse({ type: 'basic', url: withoutFragment(url), status, statusText,
                         headers: newHeaders('immutable', list), body, used: false, redirected });
  }

  // The standard's network error: a TypeError whose message is the host's (it names the reason:
  // the grant, the SSRF guard, a timeout, a size limit) and whose cause is the host's error.
  function networkError(e) {
    const message = e !== null && typeof e === 'object' && typeof e.message === 'string' ? e.message : String(e);
    const err = new TypeErrorCtor(message);
    defineProperty(err, 'cause', { value: e, writable: true, configurable: true });
    return err;
  }

  async function fetch(input, init = undefined) {
    if (arguments.length === 0) throw new TypeErrorCtor('fetch: the URL (or a Request) to fetch is missing');
    const request = new Request(input, init);
    const st = requestState.get(request);
    const args = {
      url: withoutFragment(st.url),
      method: st.method,
      headers: headersState.get(st.headers).list.map(([n, v]) => [n, v]),
      body: st.body === null ? null : { base64: base64Encode(st.body) },
      redirect: st.redirect,
    };
    st.used = st.body !== null;
    st.body = null;
    let pending;
    try {
      pending = hostCall(fetchHostCall, args);
    } catch (e) {
      // Refused before it left the worker: no activation (module top level), too large to send.
      if (InternalErrorCtor !== undefined && e instanceof InternalErrorCtor) throw e;  // budgets, a stop
      const err = new TypeErrorCtor('fetch: ' + (e !== null && typeof e === 'object' ? e.message : String(e)));
      defineProperty(err, 'cause', { value: e, writable: true, configurable: true });
      throw err;
    }
    let answer;
    try {
      answer = await pending;
    } catch (e) {
      throw networkError(e);
    }
    return responseFromHost(answer, st.method);
  }

  function install(name, value, enumerable) {
    defineProperty(global, name, { value, writable: true, enumerable, configurable: true });
  }
  install('fetch', fetch, true);
  install('Headers', Headers, false);
  install('Request', Request, false);
  install('Response', Response, false);
})
