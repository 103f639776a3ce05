// The console's one way to the daemon: its own HTTP API (docs/api.md), same origin, with the
// session's cookie and, on every request, the session's CSRF token. The cookie alone is worth
// nothing: a browser sends it to any page of this site and to every port of this host. The token
// came with the sign-in's answer and is kept in this origin's storage (scheme, host and port:
// nothing else can read it), so that the console's other tabs share the session. The console
// holds no other credential and can do nothing the token it was signed in with cannot.

const STORAGE_KEY = 'basal.console.session';
let session = null;
let signedOut = () => {};

// The session the sign-in answered (null: none), kept for the other tabs and the next load.
export function setSession(s) {
  session = s;
  try {
    if (s) localStorage.setItem(STORAGE_KEY, JSON.stringify(s));
    else localStorage.removeItem(STORAGE_KEY);
  } catch {
    // Storage refused (a private window's policy): this tab keeps the session alone.
  }
}

export function storedSession() {
  try {
    return JSON.parse(localStorage.getItem(STORAGE_KEY) || 'null');
  } catch {
    return null;
  }
}

// Called when the daemon says the session is gone (expired, signed out elsewhere, token revoked).
export function onSignedOut(callback) {
  signedOut = callback;
}

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

function headers(extra) {
  return {Accept: 'application/json', 'X-CSRF-Token': session ? session.csrf_token : '', ...extra};
}

async function answer(response) {
  let body = null;
  const text = await response.text();
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = text;
  }
  const error = body && body.error ? body.error : {code: String(response.status), message: response.statusText};
  if (response.status === 401 || (response.status === 403 && error.code === 'bad_csrf_token')) signedOut();
  if (!response.ok) throw new ApiError(response.status, error.code, error.message);
  return body;
}

export async function get(path) {
  return answer(await fetch(path, {credentials: 'same-origin', headers: headers()}));
}

export async function post(path, body) {
  return answer(await fetch(path, {
    method: 'POST',
    credentials: 'same-origin',
    headers: headers({'Content-Type': 'application/json'}),
    body: JSON.stringify(body === undefined ? {} : body),
  }));
}

export async function signIn(token) {
  const response = await fetch('/console/session', {
    method: 'POST',
    credentials: 'same-origin',
    headers: {'Content-Type': 'application/json', Accept: 'application/json'},
    body: JSON.stringify({token}),
  });
  const body = await response.json().catch(() => null);
  if (!response.ok) {
    const error = body && body.error ? body.error : {code: String(response.status), message: response.statusText};
    throw new ApiError(response.status, error.code, error.message);
  }
  return body;
}

export async function signOut() {
  return answer(await fetch('/console/session', {method: 'DELETE', credentials: 'same-origin', headers: headers()}));
}

// The query string of `params`, without its empty values.
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, v);
  const text = q.toString();
  return text ? '?' + text : '';
}

// A stream of server-sent events (GET /v1/tail), read with fetch so that it carries the session's
// token like every other request (EventSource sends no header). `on` maps event names to functions
// of their data (parsed JSON), and `open` to one called at each (re)connection: events may have
// been missed while it was down. `status(live, text)` says how it goes. After a break it connects
// again; the function returned ends it.
export function stream(path, on, status) {
  let controller = null;
  let stopped = false;
  let timer = null;

  function again(ms, text) {
    status(false, text);
    clearTimeout(timer);
    timer = setTimeout(() => {
      if (!stopped) connect();
    }, ms);
  }

  function dispatch(frame) {
    let event = 'message';
    const data = [];
    for (const line of frame.split('\n')) {
      if (line === '' || line.startsWith(':')) continue;  // a comment: the greeting, a keepalive
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? '' : line.slice(colon + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (field === 'event') event = value;
      else if (field === 'data') data.push(value);
    }
    if (!data.length || !on[event]) return;
    let parsed;
    try {
      parsed = JSON.parse(data.join('\n'));
    } catch {
      return;
    }
    on[event](parsed);
  }

  async function connect() {
    controller = new AbortController();
    let response;
    try {
      response = await fetch(path, {credentials: 'same-origin', headers: headers({Accept: 'text/event-stream'}),
        signal: controller.signal});
    } catch {
      if (!stopped) again(3000, 'reconnecting…');
      return;
    }
    if (!response.ok) {
      let message = response.statusText;
      try {
        await answer(response);
      } catch (e) {
        message = e.message;
      }
      if (!stopped && response.status !== 401) again(30000, 'live updates off: ' + message);
      return;
    }
    status(true, 'live');
    if (on.open) on.open();
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = '';
    try {
      for (;;) {
        const {value, done} = await reader.read();
        if (done) break;
        buffer = (buffer + decoder.decode(value, {stream: true})).replace(/\r\n?/g, '\n');
        for (let end = buffer.indexOf('\n\n'); end >= 0; end = buffer.indexOf('\n\n')) {
          dispatch(buffer.slice(0, end));
          buffer = buffer.slice(end + 2);
        }
      }
    } catch {
      // Aborted (the page moved on) or the connection broke.
    }
    if (!stopped) again(2000, 'reconnecting…');
  }

  connect();
  return () => {
    stopped = true;
    clearTimeout(timer);
    if (controller) controller.abort();
  };
}
