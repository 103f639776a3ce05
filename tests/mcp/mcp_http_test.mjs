// `basal serve`'s /mcp (MCP over Streamable HTTP) driven by the official MCP TypeScript SDK's client
// (@modelcontextprotocol/client, its StreamableHTTPClientTransport) against a real daemon on
// loopback TCP, with a bearer token as the transport's request header. The codemode policy lists
// the reference filesystem server (@modelcontextprotocol/server-filesystem) as its downstream `fs`,
// which the daemon starts when it starts and stops when it stops. Both packages are pinned in
// package-lock.json and installed beside this file by cmake/mcp_test_packages.cmake, which runs it
// as the ctest test `mcp_http_test`:
//
//   BASAL_BIN=build/release/bin/basal node --test build/release/mcp-test/mcp_http_test.mjs
//
// BASAL_BIN is the basal binary under test; BASAL_WORKER, when set, its ck-basal-worker.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

import { BASAL, CALL_TIMEOUT_MS, FS_SERVER, STDERR_TAIL_BYTES, WORKER_ARGS, basal, processesWithArg } from './mcp_test_support.mjs';

const START_TIMEOUT_MS = 60_000;

// A loopback port nobody listens on now.
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

async function waitFor(what, check) {
  // A bound on a hang, not a timing assertion.
  for (let i = 0; i < 600; i++) {
    const value = await check();
    if (value) return value;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`${what}: not within 60 s`);
}

// A daemon with its own store, an approved codemode policy `agents` (kv.get of "orders", the
// reference server's read_text_file and list_directory under data/), loopback TCP, and two tokens:
// `run` (what an agent needs) and `read` (the test's view of /v1/journal).
async function startDaemon() {
  const root = realpathSync(mkdtempSync(join(tmpdir(), 'basal-mcp-http-')));
  const data = join(root, 'data');
  mkdirSync(data);
  writeFileSync(join(data, 'hello.txt'), 'hello over http\n');
  const db = join(root, 'journal.db');
  const policy = {
    mcp_servers: { fs: { command: process.execPath, args: [FS_SERVER, data] } },
    grants: {
      'mcp.fs.read_text_file': { args: { path: { path_under: data } } },
      'mcp.fs.list_directory': {},
      'kv.get': { namespaces: ['orders'] },
    },
    budgets: { cpu_ms: 60_000, deadline_ms: 60_000 },
  };
  writeFileSync(join(root, 'agents.json'), JSON.stringify(policy));
  await basal(['policy', 'approve', 'agents', '--manifest', join(root, 'agents.json'), '--yes', '--db', db]);
  const token = (await basal(['token', 'create', '--name', 'agent', '--scope', 'run', '--db', db])).stdout.trim();
  const reader = (await basal(['token', 'create', '--name', 'test', '--scope', 'read', '--db', db])).stdout.trim();
  const port = await freePort();
  writeFileSync(join(root, 'serve.json'), JSON.stringify({
    listen: { tcp: `127.0.0.1:${port}` },
    limits: { drain_timeout: '0s' },
    mcp: { policy: 'agents', max_scripts: 4 },
  }));
  const child = spawn(BASAL, ['serve', '--config', join(root, 'serve.json'), '--socket', join(root, 'basal.sock'),
                              '--db', db, ...WORKER_ARGS], { stdio: ['ignore', 'ignore', 'pipe'] });
  const daemon = { root, data, db, port, token, reader, child, stderr: '', url: new URL(`http://127.0.0.1:${port}/mcp`) };
  child.stderr.on('data', (chunk) => {
    daemon.stderr = (daemon.stderr + chunk.toString('utf8')).slice(-STDERR_TAIL_BYTES);
  });
  daemon.exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  const deadline = Date.now() + START_TIMEOUT_MS;  // bounds a hang
  for (;;) {
    if (child.exitCode !== null) throw new Error(`basal serve exited ${child.exitCode}:\n${daemon.stderr}`);
    try {
      if ((await fetch(`http://127.0.0.1:${port}/healthz`)).ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw new Error(`basal serve did not come up:\n${daemon.stderr}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return daemon;
}

async function stopDaemon(daemon) {
  if (!daemon) return;
  if (daemon.child.exitCode === null && daemon.child.signalCode === null) daemon.child.kill('SIGTERM');
  const ended = await daemon.exited;
  rmSync(daemon.root, { recursive: true, force: true });
  return ended;
}

async function connect(daemon, versionNegotiation) {
  const transport = new StreamableHTTPClientTransport(daemon.url, {
    requestInit: { headers: { Authorization: `Bearer ${daemon.token}` } },
  });
  const client = new Client({ name: 'basal-mcp-http-test', version: '1.0.0' }, { versionNegotiation });
  try {
    await client.connect(transport, { timeout: CALL_TIMEOUT_MS });
  } catch (e) {
    throw new Error(`connecting to ${daemon.url} failed: ${e.stack}\nbasal serve stderr:\n${daemon.stderr}`);
  }
  return client;
}

function context(daemon, res) {
  return `\nresponse: ${JSON.stringify(res, null, 1).slice(0, 4000)}\nbasal serve stderr (tail):\n${daemon.stderr}`;
}

async function runScript(daemon, client, code, input, options = {}) {
  const args = input === undefined ? { code } : { code, input };
  const res = await client.callTool({ name: 'run_script', arguments: args }, { timeout: CALL_TIMEOUT_MS, ...options });
  assert.ok(res.structuredContent && typeof res.structuredContent === 'object',
            'run_script returns structuredContent' + context(daemon, res));
  return res;
}

// The journal's activations as GET /v1/journal lists them (a token with scope read).
async function activations(daemon) {
  const res = await fetch(`http://127.0.0.1:${daemon.port}/v1/journal?after=0&limit=1000`,
                          { headers: { Authorization: `Bearer ${daemon.reader}` } });
  assert.equal(res.status, 200, await res.clone().text());
  return (await res.json()).activations;
}

// Both clients against one daemon: the legacy (2025-11-25, initialize handshake) one and the
// pinned stateless (2026-07-28) one.
describe('basal serve /mcp with the SDK\'s Streamable HTTP client', () => {
  let daemon;

  before(async () => {
    daemon = await startDaemon();
  });

  after(async () => {
    await stopDaemon(daemon);
  });

  for (const [label, negotiation, era, version] of [
    ['a 2025-11-25 client (initialize handshake)', { mode: 'legacy' }, 'legacy', '2025-11-25'],
    ['a 2026-07-28 client (stateless)', { mode: { pin: '2026-07-28' } }, 'modern', '2026-07-28'],
  ]) {
    it(`${label} lists the tools and runs a script that calls the downstream server`, async () => {
      const client = await connect(daemon, negotiation);
      try {
        assert.equal(client.getProtocolEra(), era);
        assert.equal(client.getNegotiatedProtocolVersion(), version);
        const { tools } = await client.listTools(undefined, { timeout: CALL_TIMEOUT_MS });
        assert.deepEqual(tools.map((t) => t.name).sort(), ['describe_tools', 'list_tools', 'run_script']);

        const listed = await client.callTool({ name: 'list_tools', arguments: {} }, { timeout: CALL_TIMEOUT_MS });
        const names = listed.structuredContent?.tools?.map((t) => t.name) ?? [];
        for (const name of ['fs.read_text_file', 'fs.list_directory', 'kv.get']) {
          assert.ok(names.includes(name), `list_tools names ${name}` + context(daemon, listed));
        }
        assert.deepEqual(listed.structuredContent.unavailable, [], 'the downstream server is up' + context(daemon, listed));

        const res = await runScript(daemon, client, `
          console.log("reading", input.file);
          const text = await tools.fs.read_text_file({path: input.file});
          return {text, era: input.era};
        `, { file: join(daemon.data, 'hello.txt'), era });
        assert.equal(res.structuredContent.status, 'ok', context(daemon, res));
        assert.ok(!res.isError, context(daemon, res));
        assert.equal(res.structuredContent.result.era, era);
        assert.match(JSON.stringify(res.structuredContent.result.text), /hello over http/, context(daemon, res));
        assert.ok(res.structuredContent.logs.some((l) => l.includes('reading')), context(daemon, res));
        assert.deepEqual(res.structuredContent.calls.map((c) => [c.name, c.decision]),
                         [['mcp.fs.read_text_file', 'allow']], context(daemon, res));

        const denied = await runScript(daemon, client, 'return await tools.fs.read_text_file({path: input});',
                                       join(daemon.root, 'agents.json'));
        assert.equal(denied.structuredContent.status, 'denied', context(daemon, denied));
        assert.equal(denied.isError, true);
      } finally {
        await client.close();
      }
    });
  }

  it('a 2026-07-28 client that aborts a call closes its request, and the script is cancelled', async () => {
    const client = await connect(daemon, { mode: { pin: '2026-07-28' } });
    try {
      const before = new Set((await activations(daemon)).map((a) => a.activation_id));
      const abort = new AbortController();
      const pending = runScript(daemon, client, 'for (;;) {}', undefined, { signal: abort.signal });
      pending.catch(() => {});  // rejected by the abort below
      const started = await waitFor('the looping script starts',
        async () => (await activations(daemon)).find((a) => !before.has(a.activation_id) && a.outcome === null));
      abort.abort();
      await assert.rejects(pending);
      const ended = await waitFor('the looping script ends', async () => (await activations(daemon))
        .find((a) => a.activation_id === started.activation_id && a.outcome !== null));
      assert.equal(ended.outcome, 'cancelled', JSON.stringify(ended) + daemon.stderr);

      // The daemon serves the next script as before.
      const next = await runScript(daemon, client, 'return "after the abort"');
      assert.equal(next.structuredContent.result, 'after the abort', context(daemon, next));
    } finally {
      await client.close();
    }
  });

  it('a client without the token is refused (401), and SIGTERM stops the downstream server with the daemon', async () => {
    const transport = new StreamableHTTPClientTransport(daemon.url);
    const client = new Client({ name: 'no-token', version: '1.0.0' }, { versionNegotiation: { mode: 'legacy' } });
    await assert.rejects(client.connect(transport, { timeout: CALL_TIMEOUT_MS }), (e) => {
      assert.match(String(e), /401|nauthorized/, String(e));
      return true;
    });

    assert.ok(processesWithArg(daemon.data).length > 0, 'the downstream server runs while the daemon does');
    daemon.child.kill('SIGTERM');
    assert.deepEqual(await daemon.exited, { code: 0, signal: null }, daemon.stderr);
    await waitFor('the downstream server ends with the daemon', () => processesWithArg(daemon.data).length === 0);
  });
});
