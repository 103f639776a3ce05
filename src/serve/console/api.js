// The console's one way to the daemon: its own HTTP API (docs/api.md), same origin, with the
// session's cookie. Every request that can change something carries the session's CSRF token,
// which the daemon checks; the console holds no other credential and can do nothing the token it
// was signed in with cannot.

let csrfToken = '';
let signedOut = () => {};

export function setSession(session) {
  csrfToken = session ? session.csrf_token : '';
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

async function answer(response) {
  let body = null;
  const text = await response.text();
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = text;
  }
  if (response.status === 401) signedOut();
  if (!response.ok) {
    const error = body && body.error ? body.error : {code: String(response.status), message: response.statusText};
    throw new ApiError(response.status, error.code, error.message);
  }
  return body;
}

export async function get(path) {
  return answer(await fetch(path, {credentials: 'same-origin', headers: {Accept: 'application/json'}}));
}

export async function post(path, body) {
  return answer(await fetch(path, {
    method: 'POST',
    credentials: 'same-origin',
    headers: {'Content-Type': 'application/json', Accept: 'application/json', 'X-CSRF-Token': csrfToken},
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
  if (response.status === 401) {
    const body = await response.json().catch(() => null);
    throw new ApiError(401, 'unauthorized', body && body.error ? body.error.message : 'the token was refused');
  }
  return answer(response);
}

export async function signOut() {
  return answer(await fetch('/console/session', {
    method: 'DELETE',
    credentials: 'same-origin',
    headers: {'X-CSRF-Token': csrfToken},
  }));
}

// The query string of `params`, without its empty values.
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, v);
  const text = q.toString();
  return text ? '?' + text : '';
}
