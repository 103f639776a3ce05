// basal serve's web console (docs/console.md) in a real browser: Debian's headless Chromium driven
// by playwright-core (pinned in package-lock.json, installed beside this file by
// cmake/npm_test_packages.cmake) against a real daemon this test starts in a temporary directory,
// with a store of 10,000 runs and more. It signs in, filters runs and pages through them, opens a
// run and finds its denied call, sends cross-site POSTs that must change nothing, runs a schedule
// now, compares two versions of a flow, watches runs appear live, and hits the bound on a
// session's streams; along the way it saves screenshots (the ones docs/console.md shows:
// scripts/console-screenshots.sh copies them there). The ctest test `console_browser_test`:
//
//   BASAL_BIN=build/release/bin/basal BASAL_WORKER=build/release/bin/ck-basal-worker \
//     node --test build/release/console-test/console_test.mjs
//
// BASAL_CHROMIUM names the browser (default /usr/bin/chromium), BASAL_SCREENSHOTS where the
// screenshots go (default: the test's temporary directory), BASAL_PYTHON a python3.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { createServer as createHttpServer, request } from 'node:http';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

import { chromium } from 'playwright-core';

const run = promisify(execFile);
const BASAL = process.env.BASAL_BIN;
if (!BASAL || !existsSync(BASAL)) {
  throw new Error(`BASAL_BIN must name the basal binary under test (got ${JSON.stringify(BASAL)})`);
}
const WORKER_ARGS = process.env.BASAL_WORKER ? ['--worker', process.env.BASAL_WORKER] : [];
const CHROMIUM = process.env.BASAL_CHROMIUM || '/usr/bin/chromium';
if (!existsSync(CHROMIUM)) {
  throw new Error(`no Chromium at ${CHROMIUM}: install Debian's (apt-get install chromium; scripts/setup.sh does) ` +
                  'or name one with BASAL_CHROMIUM');
}
const PYTHON = process.env.BASAL_PYTHON || 'python3';
// How many runs the store holds before the daemon starts: the console must page through them.
const BULK_RUNS = 10_000;
const PAGE_SIZE = 50;  // runs.js
const MAX_STREAMS = 2;  // console.max_streams_per_session below
// Bounds on hangs, not timing assertions.
const WAIT_MS = 30_000;

const HELLO = `export default async (input) => {
  console.log('greeting ' + (input && input.name) + ' <img src=x onerror="window.__pwned = 1">');
  return {hello: input && input.name};
};
`;
const DENY = `export default async (input, host) => {
  console.log('about to write');
  try {
    await host.call('kv.put', {namespace: 'orders', key: 'o-1', value: {total: 12}});
  } catch (e) {
    console.error('refused: ' + e.message);
  }
  return 'done';
};
`;
// A durable flow whose charge the test holds until the daemon is killed under it: at the restart
// its run needs reconciliation, an operator's decision (docs/durable.md).
const PAY = `export default async (input, host) => {
  const r = await fetch('http://127.0.0.1:' + input.port + '/charge', {method: 'POST', body: JSON.stringify(input)});
  return {charged: await r.json()};
};
`;
// A durable flow that parks its run until an operator sends the event "approved" (issue 26).
const APPROVAL = `export default async (input) => {
  const decision = await waitForEvent('approved', {key: input.release, timeoutMs: 86400000});
  return {released: input.release, by: decision.sender};
};
`;
const BUDGETS = { deadline_ms: 20_000, cpu_ms: 10_000 };

function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

async function waitFor(what, check, timeoutMs = WAIT_MS) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

async function basal(args) {
  try {
    return await run(BASAL, args, { maxBuffer: 16 * 1024 * 1024 });
  } catch (e) {
    throw new Error(`basal ${args.join(' ')} failed (${e.code}):\n${e.stdout}\n${e.stderr}`);
  }
}

// The API over the daemon's Unix socket (the operator's door: no token): {status, body}.
function socketApi(socketPath, method, path, body) {
  return new Promise((resolve, reject) => {
    const req = request({ socketPath, method, path, headers: { 'Content-Type': 'application/json' } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk) => { text += chunk; });
      res.on('end', () => {
        let parsed = text;
        try { parsed = JSON.parse(text); } catch { /* not JSON */ }
        resolve({ status: res.statusCode, body: parsed });
      });
    });
    req.on('error', reject);
    if (body !== undefined) req.write(JSON.stringify(body));
    req.end();
  });
}

// 10,000 ended runs in the store, as skipped fires of a schedule "bulk" (a run without an
// activation, as the daemon journals one), written before the daemon opens it: starting that many
// activations would be most of this test's time.
async function seedRuns(db, count) {
  const script = `
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1])
n = int(sys.argv[2])
t = int(time.time() * 1e6) - n * 60_000_000  # one a minute, the newest a minute ago
db.executemany(
    "INSERT INTO runs(flow, input, triggered_by, state, created_us, ended_us, outcome, error) "
    "VALUES ('bulk', 'null', 'schedule:bulk', 'ended', ?, ?, 'skipped', ?)",
    [(t + i * 60_000_000, t + i * 60_000_000,
      '{"kind":"skipped","message":"bulk fire %d was skipped: the previous run had not ended"}' % i)
     for i in range(n)])
db.commit()
`;
  await run(PYTHON, ['-c', script, db, String(count)]);
}

// An HTTP server that holds the first request it gets until released, and answers the others.
function startHoldServer() {
  return new Promise((resolve) => {
    const hold = { requests: 0, release: null };
    const released = new Promise((r) => { hold.release = r; });
    hold.server = createHttpServer(async (req, res) => {
      req.resume();
      hold.requests += 1;
      if (hold.requests === 1) await released;
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify({ ok: true, attempt: hold.requests }));
    });
    hold.server.listen(0, '127.0.0.1', () => {
      hold.port = hold.server.address().port;
      resolve(hold);
    });
  });
}

function launch(daemon) {
  const child = spawn(BASAL, ['serve', '--config', join(daemon.root, 'serve.json'), '--socket', daemon.socket,
                              '--db', daemon.db, ...WORKER_ARGS], { stdio: ['ignore', 'ignore', 'pipe'] });
  daemon.child = child;
  child.stderr.on('data', (chunk) => { daemon.stderr = (daemon.stderr + chunk).slice(-16384); });
  return waitFor('basal serve ready', async () => {
    if (child.exitCode !== null) throw new Error(`basal serve exited ${child.exitCode}: ${daemon.stderr}`);
    try {
      return (await daemon.api('GET', '/readyz')).status === 200;
    } catch {
      return false;
    }
  });
}

async function startDaemon(hold) {
  const root = realpathSync(mkdtempSync(join(tmpdir(), 'basal-console-')));
  const db = join(root, 'journal.db');
  const write = (name, text) => { writeFileSync(join(root, name), text); return join(root, name); };
  write('hello.js', HELLO);
  write('deny.js', DENY);
  const approve = (name, source, manifest) =>
    basal(['flow', 'approve', name, join(root, source), '--manifest', write(name + '.json', JSON.stringify(manifest)),
           '--yes', '--db', db]);
  await approve('hello', 'hello.js', { grants: { log: {} }, budgets: BUDGETS });
  await approve('hello', 'hello.js', { grants: { log: {}, 'kv.get': { namespaces: ['greetings'] } },
                                       budgets: { ...BUDGETS, deadline_ms: 30_000 } });
  await approve('deny', 'deny.js', { grants: { log: {} }, budgets: BUDGETS });
  write('pay.js', PAY);
  await approve('pay', 'pay.js', { durable: true, budgets: BUDGETS, grants: { 'http.fetch': { rules: [{
    url: `http://127.0.0.1:${hold.port}/`, methods: ['POST'], allow_networks: ['127.0.0.0/8'], allow_plain_http: true }] } } });
  write('approval.js', APPROVAL);
  await approve('approval', 'approval.js', { durable: true, grants: {}, budgets: BUDGETS });
  await seedRuns(db, BULK_RUNS);
  const token = (await basal(['token', 'create', '--name', 'operator', '--scope', 'read', '--scope', 'run',
                              '--db', db])).stdout.trim();
  const port = await freePort();
  write('serve.json', JSON.stringify({
    listen: { tcp: `127.0.0.1:${port}` },
    limits: { drain_timeout: '0s' },
    console: { max_streams_per_session: MAX_STREAMS },
    // A schedule that fires on 1 January only: during the test, only "Run now" starts it.
    triggers: [{ name: 'nightly', schedule: { flow: 'hello', cron: '0 0 1 1 *', timezone: 'Europe/Berlin',
                                              input: { name: 'nightly' } } }],
  }));
  const socket = join(root, 'basal.sock');
  const daemon = { root, db, port, token, socket, stderr: '', base: `http://127.0.0.1:${port}` };
  daemon.api = (method, path, body) => socketApi(socket, method, path, body);
  await launch(daemon);
  return daemon;
}

// A run of `flow` with `input`, through the socket, waited for: its id.
async function startRun(daemon, flow, input) {
  const r = await daemon.api('POST', `/v1/flows/${flow}/runs?wait=30s`, { input });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body.id;
}

// A page of another origin, served by this test: what a hostile site would make the browser send.
// It keeps the cookies the browser sends it: cookies do not keep to a port, so a server on another
// port of this host is sent the console's.
function startAttacker(html) {
  return new Promise((resolve) => {
    const server = createHttpServer((req, res) => {
      if (req.headers.cookie) server.cookies.push(req.headers.cookie);
      res.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8' });
      res.end(html(req));
    });
    server.cookies = [];
    server.listen(0, '127.0.0.1', () => resolve(server));
  });
}

// GET `path` of the daemon's TCP listener with these headers: {status, body}.
function tcpGet(daemon, path, headers) {
  return new Promise((resolve, reject) => {
    request(daemon.base + path, { headers }, (res) => {
      let text = '';
      res.on('data', (chunk) => { text += chunk; });
      res.on('end', () => resolve({ status: res.statusCode, body: text }));
    }).on('error', reject).end();
  });
}

describe('the web console in Chromium', () => {
  let daemon;
  let hold;
  let browser;
  let page;
  let shots;
  const problems = [];  // CSP violations, script errors and dialogs: none may happen
  const ids = {};

  before(async () => {
    hold = await startHoldServer();
    daemon = await startDaemon(hold);
    shots = process.env.BASAL_SCREENSHOTS || join(daemon.root, 'screenshots');
    mkdirSync(shots, { recursive: true });
    // The durable run: its charge held, the daemon killed under it, started again.
    const pay = await daemon.api('POST', '/v1/flows/pay/runs', { input: { port: hold.port, amount: 12 } });
    assert.equal(pay.status, 202, JSON.stringify(pay.body));
    ids.pay = pay.body.id;
    await waitFor('the charge held', () => hold.requests === 1);
    daemon.child.kill('SIGKILL');
    await new Promise((resolve) => (daemon.child.exitCode !== null || daemon.child.signalCode ? resolve() : daemon.child.on('exit', resolve)));
    await launch(daemon);
    await waitFor('the run needs reconciliation', async () =>
      (await daemon.api('GET', `/v1/runs/${ids.pay}`)).body.state === 'needs_reconciliation');
    // Runs of this daemon (its health counts them since it started).
    ids.hello = await startRun(daemon, 'hello', { name: 'operator' });
    ids.deny = await startRun(daemon, 'deny', null);
    // A run parked until its event comes (its worker let go).
    const approval = await daemon.api('POST', '/v1/flows/approval/runs', { input: { release: 'r-42' } });
    assert.equal(approval.status, 202, JSON.stringify(approval.body));
    ids.approval = approval.body.id;
    await waitFor('the run parked, waiting for its event', async () =>
      (await daemon.api('GET', `/v1/runs/${ids.approval}`)).body.state === 'waiting');
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-gpu'] });
    const context = await browser.newContext({ viewport: { width: 1280, height: 860 }, colorScheme: 'light' });
    page = await context.newPage();
    page.setDefaultTimeout(WAIT_MS);
    page.on('console', (m) => {
      if (m.type() === 'error' && /Content.Security.Policy|Refused to/i.test(m.text())) problems.push('CSP: ' + m.text());
    });
    page.on('pageerror', (e) => problems.push('script error: ' + e.message));
    page.on('dialog', (d) => {
      problems.push('a dialog opened: ' + d.message());
      d.dismiss();
    });
  });

  after(async () => {
    if (browser) await browser.close();
    if (hold) {
      hold.release();
      hold.server.close();
    }
    if (daemon) {
      daemon.child.kill('SIGTERM');
      await new Promise((resolve) => (daemon.child.exitCode !== null || daemon.child.signalCode ? resolve() : daemon.child.on('exit', resolve)));
      rmSync(daemon.root, { recursive: true, force: true });
    }
  });

  // The whole page, or (fullPage false) what a browser window shows of it.
  const shot = (name, fullPage = true) => page.screenshot({ path: join(shots, name + '.png'), fullPage });
  const rows = (selector) => page.locator(selector + ' > tr');

  it('refuses a wrong token and signs in with a right one; the cookie is HttpOnly and SameSite=Strict', async () => {
    await page.goto(daemon.base + '/console/');
    await page.waitForSelector('#sign-in');
    await shot('sign-in');
    await page.fill('#token', 'bsl_' + 'A'.repeat(43));
    await page.click('#sign-in button[type=submit]');
    await page.waitForSelector('#sign-in .error');
    assert.match(await page.textContent('#sign-in .error'), /not known or was revoked/);
    await page.fill('#token', daemon.token);
    await page.click('#sign-in button[type=submit]');
    await page.waitForSelector('#nav:not([hidden])');
    assert.match(await page.textContent('#who'), /operator/);
    const [cookie] = (await page.context().cookies()).filter((c) => c.name === 'basal_session');
    assert.ok(cookie, 'a session cookie is set');
    assert.equal(cookie.httpOnly, true);
    assert.equal(cookie.sameSite, 'Strict');
    assert.equal(cookie.path, '/');
    assert.notEqual(cookie.value, daemon.token, 'the cookie is a session id, not the token');
    assert.ok(!(await page.evaluate(() => document.cookie)).includes('basal_session'), 'scripts cannot read it');
  });

  it(`pages through ${BULK_RUNS} runs ${PAGE_SIZE} at a time`, async () => {
    await page.goto(daemon.base + '/console/#/runs?flow=bulk');
    await page.waitForSelector('#runs > tr[data-run]');
    assert.equal(await rows('#runs').count(), PAGE_SIZE);
    assert.equal(await rows('#runs').first().getAttribute('data-run'), String(BULK_RUNS));
    await page.click('#older');
    await page.waitForSelector(`#runs > tr[data-run="${BULK_RUNS - PAGE_SIZE}"]`);
    assert.equal(await rows('#runs').count(), PAGE_SIZE);
    assert.equal(await rows('#runs').last().getAttribute('data-run'), String(BULK_RUNS - 2 * PAGE_SIZE + 1));
    assert.match(await page.textContent('#page-number'), /page 2/);
    await page.click('#newer');
    await page.waitForSelector(`#runs > tr[data-run="${BULK_RUNS}"]`);
    assert.match(await page.textContent('#page-number'), /page 1/);
  });

  it('filters runs by flow and outcome', async () => {
    await page.goto(daemon.base + '/console/#/runs');
    await page.waitForSelector('#runs > tr[data-run]');
    await page.waitForSelector('#filter-flow option[value="deny"]', { state: 'attached' });
    await page.selectOption('#filter-flow', 'deny');
    await page.click('#run-filters button[type=submit]');
    await page.waitForFunction(() => location.hash === '#/runs?flow=deny');
    await page.waitForSelector(`#runs > tr[data-run="${ids.deny}"]`);
    assert.equal(await rows('#runs').count(), 1);
    await page.goto(daemon.base + '/console/#/runs?flow=hello&outcome=ok');
    await page.waitForSelector(`#runs > tr[data-run="${ids.hello}"]`);
    assert.equal(await rows('#runs').count(), 1);
    await page.goto(daemon.base + '/console/#/runs?flow=hello&outcome=script_error');
    await page.waitForSelector('.status:text("No runs match.")');
    assert.equal(await rows('#runs').count(), 0);
    await page.goto(daemon.base + '/console/#/runs');
    await page.waitForSelector(`#runs > tr[data-run="${ids.deny}"]`);
    await shot('runs', false);
  });

  it('opens a run and shows its denied call and its logs, as text', async () => {
    await page.click(`#runs > tr[data-run="${ids.deny}"] a[href="#/runs/${ids.deny}"]`);
    await page.waitForSelector('#calls > tr[data-call]');
    const denied = page.locator('#calls > tr[data-decision="deny"]');
    assert.equal(await denied.count(), 1);
    assert.match(await denied.textContent(), /kv\.put/);
    assert.match(await denied.textContent(), /not granted/);
    await denied.locator('summary').click();
    assert.match(await denied.locator('pre.json').first().textContent(), /"namespace": "orders"/);
    assert.match(await page.textContent('#logs'), /refused: .*kv\.put/);
    await shot('run');
    // What a flow logged is shown as text: its markup does nothing.
    await page.goto(daemon.base + `/console/#/runs/${ids.hello}`);
    await page.waitForSelector('#logs .log');
    assert.match(await page.textContent('#logs'), /<img src=x onerror="window.__pwned = 1">/);
    assert.equal(await page.locator('#logs img').count(), 0);
    assert.equal(await page.evaluate(() => window.__pwned), undefined);
  });

  it('refuses cross-site POSTs with the session cookie, and the cookie alone: nothing starts, nothing is read', async () => {
    const before = (await daemon.api('GET', '/metrics')).body;
    const accepted = (text) => (text.match(/^basal_runs_accepted_total\{[^}]*\} (\d+)/gm) || [])
      .reduce((sum, line) => sum + Number(line.split(' ').pop()), 0);
    // A form of a page on another port of this host: same site (the cookie goes along), another
    // origin (it cannot know the CSRF token). Its text/plain body is valid JSON for the API.
    const form = (action) => `<!doctype html><form id="f" method="POST" enctype="text/plain" action="${action}">` +
      `<input name='{"input": {"name": "forged", "x": "' value='"}}'></form>` +
      `<script>document.getElementById('f').submit()</script>`;
    const attacker = await startAttacker((req) => form(daemon.base + decodeURIComponent(req.url.slice(1))));
    const { port } = attacker.address();
    try {
      const tab = await page.context().newPage();
      for (const target of ['/v1/flows/hello/runs', '/v1/schedules/nightly/run', `/v1/runs/${ids.deny}/cancel`]) {
        await tab.goto(`http://127.0.0.1:${port}/${encodeURIComponent(target)}`);
        await tab.waitForURL(daemon.base + target);
        const body = JSON.parse(await tab.textContent('body'));
        assert.equal(body.error.code, 'bad_csrf_token', target + ': ' + JSON.stringify(body));
      }
      // From another site (localhost is not 127.0.0.1) the browser does not even send the cookie.
      await tab.goto(`http://localhost:${port}/${encodeURIComponent('/v1/flows/hello/runs')}`);
      await tab.waitForURL(daemon.base + '/v1/flows/hello/runs');
      assert.equal(JSON.parse(await tab.textContent('body')).error.code, 'unauthorized');
      // A script of the other origin may send a request, but not read the session's CSRF token:
      // with a guessed one the browser asks first (CORS), and nothing answers yes.
      const outcome = await tab.evaluate(async (base) => {
        try {
          await fetch(base + '/console/session', { credentials: 'include' });
          return 'read the session';
        } catch {
          try {
            await fetch(base + '/v1/flows/hello/runs', { method: 'POST', credentials: 'include',
              headers: { 'X-CSRF-Token': 'guess', 'Content-Type': 'application/json' }, body: '{"input": null}' });
            return 'sent a run';
          } catch {
            return 'blocked';
          }
        }
      }, daemon.base);
      assert.equal(outcome, 'blocked');
      await tab.close();
      // The server on the other port was sent the session's cookie; with it alone, it reads nothing.
      const leaked = attacker.cookies.map((c) => c.match(/basal_session=([^;]+)/)).find(Boolean);
      assert.ok(leaked, 'the browser sends the cookie to another port of the host: ' + JSON.stringify(attacker.cookies));
      for (const path of ['/v1/runs', '/v1/flows', '/console/session']) {
        const r = await tcpGet(daemon, path, { Cookie: `basal_session=${leaked[1]}` });
        assert.equal(r.status, 403, path);
        assert.equal(JSON.parse(r.body).error.code, 'bad_csrf_token', path);
      }
    } finally {
      attacker.close();
    }
    const after = (await daemon.api('GET', '/metrics')).body;
    assert.equal(accepted(after), accepted(before), 'no run was accepted');
    const run = (await daemon.api('GET', `/v1/runs/${ids.deny}`)).body;
    assert.equal(run.outcome, 'ok', 'the run was not cancelled');
  });

  it('runs a schedule now', async () => {
    await page.goto(daemon.base + '/console/#/schedules');
    const row = page.locator('#schedules > tr[data-schedule="nightly"]');
    await row.waitFor();
    assert.match(await row.textContent(), /0 0 1 1 \*/);
    assert.match(await row.textContent(), /Europe\/Berlin/);
    assert.match(await row.textContent(), /in \d+ (d|h|min)/, 'the next fire time, ahead');
    await shot('schedules');
    await row.locator('button.run-now').click();
    await row.locator('[data-confirm=yes]').click();
    const link = page.locator('#started-run');
    await link.waitFor();
    const id = (await link.textContent()).replace(/\D/g, '');
    const ended = await waitFor('the scheduled run ended', async () => {
      const r = (await daemon.api('GET', `/v1/runs/${id}`)).body;
      return r.state === 'ended' ? r : null;
    });
    assert.equal(ended.outcome, 'ok');
    assert.deepEqual(ended.result, { hello: 'nightly' });
    await link.click();
    await page.waitForSelector('#run-result');
    assert.match(await page.textContent('#run-head'), /schedule:nightly/);
  });

  it('shows a flow\'s versions and the grant diff between two of them', async () => {
    await page.goto(daemon.base + '/console/#/flows/hello');
    await page.waitForSelector('#grant-diff');
    assert.equal(await rows('#versions').count(), 2);
    const grant = page.locator('#grant-diff tr[data-grant="kv.get"]');
    assert.equal(await grant.getAttribute('data-kind'), 'added');
    assert.match(await grant.textContent(), /greetings/);
    assert.match(await page.textContent('#diff-summary'), /grants more/);
    assert.match(await page.textContent('#diff'), /deadline_ms/);
    await shot('flow');
  });

  it('shows health and the last hour as charts', async () => {
    await page.goto(daemon.base + '/console/#/health');
    await page.waitForSelector('#chart-activations svg');
    assert.equal(await page.locator('figure.chart').count(), 4);
    assert.equal(await page.textContent('#n-denied .value'), '1', 'the denied kv.put');
    await shot('health');
  });

  it('resolves a durable run that waits for an operator: the call did not happen, run it again', async () => {
    await page.goto(daemon.base + `/console/#/runs/${ids.pay}`);
    const call = page.locator('#run-actions .resolve[data-call="1"]');
    await call.waitFor();
    assert.match(await page.textContent('#run-head'), /needs_reconciliation/);
    assert.match(await call.textContent(), /http\.fetch/);
    assert.match(await call.textContent(), /\/charge/);
    await shot('run-durable');
    assert.equal(hold.requests, 1, 'nothing was sent again without the operator');
    hold.release();
    await call.locator('button', { hasText: 'Run it again' }).click();
    await call.locator('[data-confirm=yes]').click();
    const ended = await waitFor('the run resumed and ended', async () => {
      const r = (await daemon.api('GET', `/v1/runs/${ids.pay}`)).body;
      return r.state === 'ended' ? r : null;
    });
    assert.equal(ended.outcome, 'ok', JSON.stringify(ended));
    assert.deepEqual(ended.result, { charged: { ok: true, attempt: 2 } });
    await page.reload();
    await page.waitForSelector('#run-result');
    assert.equal(await page.locator('#run-actions').isHidden(), true, 'an ended run has no actions');
  });

  it('shows a parked run waiting for its event, finds it by state, and cancels it only when confirmed', async () => {
    await page.goto(daemon.base + '/console/#/runs?state=waiting');
    await page.locator(`#runs > tr[data-run="${ids.approval}"]`).waitFor();
    assert.equal(await rows('#runs').count(), 1, 'only the waiting run');
    await page.goto(daemon.base + `/console/#/runs/${ids.approval}`);
    await page.waitForSelector('#run-waiting-for');
    assert.equal(await page.textContent('#run-waiting-for'), 'the event approved with key r-42');
    assert.match(await page.textContent('#run-head'), /waiting/);
    await page.click('#cancel-run');
    await page.locator('#run-actions [data-confirm=no]').click();
    assert.equal((await daemon.api('GET', `/v1/runs/${ids.approval}`)).body.state, 'waiting', 'No cancels nothing');
    await page.click('#cancel-run');
    await page.locator('#run-actions [data-confirm=yes]').click();
    const ended = await waitFor('the parked run cancelled', async () => {
      const r = (await daemon.api('GET', `/v1/runs/${ids.approval}`)).body;
      return r.state === 'ended' ? r : null;
    });
    assert.equal(ended.outcome, 'cancelled', JSON.stringify(ended));
  });

  it('shows a new run on the newest page as it happens, without a reload', async () => {
    await page.goto(daemon.base + '/console/#/runs?flow=hello');
    await page.waitForSelector('#live-status .dot.live');
    const id = await startRun(daemon, 'hello', { name: 'live' });
    await page.waitForSelector(`#runs > tr[data-run="${id}"]`);
  });

  it(`holds at most ${MAX_STREAMS} live streams per session`, async () => {
    await page.goto(daemon.base + '/console/#/flows');  // a page without a stream of its own
    await page.waitForSelector('#flows > tr');
    // The session's token, as the console's own page keeps it.
    const headers = await page.evaluate(() =>
      ({ 'X-CSRF-Token': JSON.parse(localStorage.getItem('basal.console.session')).csrf_token }));
    const statuses = await page.evaluate(async ({ n, headers }) => {
      const open = [];
      const statuses = [];
      for (let i = 0; i < n + 1; i++) {
        const controller = new AbortController();
        const response = await fetch('/v1/tail', { headers, signal: controller.signal });
        statuses.push(response.status);
        open.push(controller);
      }
      for (const c of open) c.abort();
      return statuses;
    }, { n: MAX_STREAMS, headers });
    assert.deepEqual(statuses, [...Array(MAX_STREAMS).fill(200), 429]);
    // The daemon notices the streams that ended: the session may open one again.
    await waitFor('a stream after the others ended', () => page.evaluate(async (headers) => {
      const controller = new AbortController();
      const response = await fetch('/v1/tail', { headers, signal: controller.signal });
      controller.abort();
      return response.status === 200;
    }, headers));
  });

  it('keeps the session across a reload and in a new tab, and signs out of both', async () => {
    const [cookie] = (await page.context().cookies()).filter((c) => c.name === 'basal_session');
    const { csrf_token: csrf } = await page.evaluate(() => JSON.parse(localStorage.getItem('basal.console.session')));
    await page.goto(daemon.base + '/console/#/runs');
    await page.reload();
    await page.waitForSelector('#sign-out');
    const other = await page.context().newPage();
    await other.goto(daemon.base + '/console/#/flows');
    await other.waitForSelector('#flows > tr');
    await page.click('#sign-out');
    await page.waitForSelector('#sign-in');
    await other.waitForSelector('#sign-in');  // told by the storage both tabs share
    await other.close();
    const r = await tcpGet(daemon, '/v1/flows', { Cookie: `basal_session=${cookie.value}`, 'X-CSRF-Token': csrf });
    assert.equal(r.status, 401, 'the session ended: its cookie and token are worth nothing');
  });

  it('broke no rule of its Content-Security-Policy and ran nothing it was sent', () => {
    assert.deepEqual(problems, []);
  });
});
