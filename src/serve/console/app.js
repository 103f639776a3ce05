// The console's shell: sign-in, the navigation, and the pages by the address's #fragment
// (#/runs, #/runs/42, #/flows, #/flows/NAME, #/schedules, #/health). Each page is a function
// that fills the main element and returns what stops it (its live stream, its timers) when
// another page takes over.

import * as api from './api.js';
import {h, replace} from './dom.js';
import {runsPage} from './runs.js';
import {runPage} from './run.js';
import {flowsPage, flowPage} from './flows.js';
import {schedulesPage} from './schedules.js';
import {healthPage} from './health.js';

const main = document.getElementById('main');
const nav = document.getElementById('nav');
const who = document.getElementById('who');
let stopPage = () => {};
let session = null;

const pages = [
  [/^#\/runs\/(\d+)$/, (m) => runPage(main, m[1], session)],
  [/^#\/runs(?:\?(.*))?$/, (m) => runsPage(main, new URLSearchParams(m[1] || ''))],
  [/^#\/flows\/([^/?]+)$/, (m) => flowPage(main, decodeURIComponent(m[1]))],
  [/^#\/flows$/, () => flowsPage(main)],
  [/^#\/schedules$/, () => schedulesPage(main, session)],
  [/^#\/health$/, () => healthPage(main)],
];

function route() {
  if (!session) return;
  stopPage();
  stopPage = () => {};
  const hash = location.hash || '#/runs';
  for (const [pattern, page] of pages) {
    const m = hash.match(pattern);
    if (!m) continue;
    const section = hash.split(/[/?]/)[1];
    for (const a of nav.querySelectorAll('a')) a.classList.toggle('current', a.dataset.page === section);
    stopPage = page(m) || (() => {});
    return;
  }
  replace(main, h('p', {class: 'error'}, 'No such page: ', hash), h('a', {href: '#/runs'}, 'the runs'));
}

function showSignedIn(s) {
  session = s;
  api.setSession(s);
  nav.hidden = false;
  replace(who,
    h('span', {class: 'token', title: 'scopes: ' + s.scopes.join(', ') + '; the session ends ' + s.expires},
      'token ', h('strong', {}, s.token), ' ', h('span', {class: 'muted'}, '(' + s.scopes.join(', ') + ')')),
    ' ',
    h('button', {type: 'button', id: 'sign-out', onclick: async () => {
      try {
        await api.signOut();
      } finally {
        showSignIn('Signed out.');
      }
    }}, 'Sign out'));
  route();
}

function showSignIn(message) {
  stopPage();
  stopPage = () => {};
  session = null;
  api.setSession(null);
  nav.hidden = true;
  replace(who);
  const input = h('input', {type: 'password', id: 'token', name: 'token', autocomplete: 'off', required: true,
    placeholder: 'bsl_…', size: 52});
  const status = h('p', {class: 'status', role: 'status'}, message || '');
  const form = h('form', {id: 'sign-in', class: 'sign-in', onsubmit: async (event) => {
    event.preventDefault();
    replace(status, 'Signing in…');
    try {
      const s = await api.signIn(input.value.trim());
      input.value = '';
      showSignedIn(s);
    } catch (e) {
      replace(status, h('span', {class: 'error'}, e.message));
    }
  }},
  h('h1', {}, 'Sign in to basal serve'),
  h('p', {}, 'Paste an API token with the scope ', h('code', {}, 'read'),
    ' (and ', h('code', {}, 'run'), ' to start, resolve, resume or cancel runs). ',
    'Make one with ', h('code', {}, 'basal token create --name NAME --scope read --scope run'), '.'),
  h('label', {for: 'token'}, 'Token '), input, ' ', h('button', {type: 'submit'}, 'Sign in'),
  status,
  h('p', {class: 'muted'}, 'The browser does not keep the token: it is traded for a session, which ends when you sign ',
    'out, or once it has gone unused or lasted too long (the daemon\'s console.session_idle and session_max_age).'));
  replace(main, form);
  input.focus();
}

api.onSignedOut(() => {
  if (session) showSignIn('The session has ended (expired, signed out, or its token revoked): sign in again.');
});

window.addEventListener('hashchange', route);
// Another tab of the console signed in or out.
window.addEventListener('storage', () => {
  const stored = api.storedSession();
  if (!stored && session) showSignIn('Signed out in another tab.');
  else if (stored && !session) start();
});

// The session this origin keeps (another tab's sign-in, or this tab's before a reload), if the
// daemon still knows it; else the sign-in.
async function start() {
  const stored = api.storedSession();
  if (!stored) return showSignIn('');
  api.setSession(stored);
  try {
    showSignedIn({...stored, ...(await api.get('/console/session'))});
  } catch (e) {
    if (e.status === 401 || e.status === 403) showSignIn('');
    else replace(main, h('p', {class: 'error'}, 'The console could not start: ', e.message));
  }
}

start();
