// `basal mcp` driven by MCP software nobody here wrote: the official MCP TypeScript SDK's client
// (@modelcontextprotocol/client) connects over stdio, lists the tools and runs agents' scripts; a
// reference MCP server (@modelcontextprotocol/server-filesystem) is the codemode policy's
// downstream `fs`, started and supervised by basal. Both are pinned in package-lock.json and
// installed beside this file by cmake/mcp_test_packages.cmake, which runs it as the ctest test
// `mcp_client_test`:
//
//   BASAL_BIN=build/release/bin/basal node --test build/release/mcp-test/mcp_client_test.mjs
//
// BASAL_BIN is the basal binary under test; BASAL_WORKER, when set, its ck-basal-worker.
// Each session gets its own temporary directory: a journal, an approved policy, a data folder the
// downstream server may serve, and a secret file outside it.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { Client } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';

import { BASAL, CALL_TIMEOUT_MS, FS_SERVER, STDERR_TAIL_BYTES, WORKER_ARGS, basal, processesWithArg } from './mcp_test_support.mjs';

const CONNECT_TIMEOUT_MS = 60_000;
const HUGE_BYTES = 5 * 1024 * 1024;
const SECRET_TEXT = 'outside the granted folder: the agent must never read this line';

// A temporary directory (its real path: the reference server resolves its allowed folder through
// realpath, and /tmp may be a link) holding the journal, a data folder and a secret outside it.
function makeWorld(label) {
  const root = realpathSync(mkdtempSync(join(tmpdir(), `basal-mcp-${label}-`)));
  const data = join(root, 'data');
  mkdirSync(join(data, 'sub'), { recursive: true });
  writeFileSync(join(data, 'hello.txt'), 'hello from the data folder\n');
  writeFileSync(join(data, 'notes.md'), '# notes\n');
  writeFileSync(join(root, 'secret.txt'), SECRET_TEXT + '\n');
  return { root, data, db: join(root, 'journal.db') };
}

function fsPolicy(world) {
  return {
    mcp_servers: { fs: { command: process.execPath, args: [FS_SERVER, world.data] } },
    grants: {
      'mcp.fs.read_text_file': { args: { path: { path_under: world.data } } },
      'mcp.fs.list_directory': {},
      'kv.get': { namespaces: ['orders'] },
    },
    budgets: { cpu_ms: 500 },
  };
}

async function approve(world, name, manifest) {
  const file = join(world.root, `${name}.json`);
  writeFileSync(file, JSON.stringify(manifest, null, 2));
  const { stdout } = await basal(['policy', 'approve', name, '--manifest', file, '--yes', '--db', world.db]);
  assert.match(stdout, new RegExp(`approved codemode policy "${name}"`));
}

// kv values a script reads, written the ordinary way: an ad hoc flow granted kv.put.
async function seedKv(world, entries) {
  const manifest = join(world.root, 'seed.json');
  const flow = join(world.root, 'seed.js');
  writeFileSync(manifest, JSON.stringify({ grants: { 'kv.put': { namespaces: ['orders'] } } }));
  writeFileSync(flow, `export default async function (input, host) {
  for (const [key, value] of Object.entries(input)) await host.call("kv.put", {namespace: "orders", key, value});
  return "seeded";
}\n`);
  await basal(['run', '--manifest', manifest, flow, '--db', world.db, '--input', JSON.stringify(entries)]);
}

// A script's activation, found by its run: the run_id the agent is told is the run basal's store
// and `basal journal --run` know (one id everywhere).
async function journal(world, runId) {
  const { stdout } = await basal(['journal', '--run', String(runId), '--json', '--db', world.db]);
  const lines = stdout.split('\n').filter((l) => l.trim() !== '');
  assert.equal(lines.length, 1, `basal journal --run ${runId} --json printed ${lines.length} lines:\n${stdout}`);
  const activation = JSON.parse(lines[0]);
  assert.equal(activation.run, runId, `the activation of run ${runId}:\n${stdout}`);
  return activation;
}

async function waitUntilNoProcessWithArg(arg, what) {
  // A bound on a hang, not a timing assertion: a supervised child is reaped when basal exits.
  for (let i = 0; i < 300; i++) {
    if (processesWithArg(arg).length === 0) return;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  assert.deepEqual(processesWithArg(arg), [], `${what} still running 30 s after basal mcp ended`);
}

// One `basal mcp` session through the SDK's stdio transport, its stderr kept (tail) for messages.
async function openSession(world, policy, versionNegotiation) {
  const transport = new StdioClientTransport({
    command: BASAL,
    args: ['mcp', '--policy', policy, '--db', world.db, ...WORKER_ARGS],
    env: { ...process.env },
    stderr: 'pipe',
  });
  const session = { transport, stderr: '' };
  transport.stderr.on('data', (chunk) => {
    session.stderr = (session.stderr + chunk.toString('utf8')).slice(-STDERR_TAIL_BYTES);
  });
  const client = new Client({ name: 'basal-mcp-client-test', version: '1.0.0' }, { versionNegotiation });
  session.client = client;
  try {
    await client.connect(transport, { timeout: CONNECT_TIMEOUT_MS });
  } catch (e) {
    throw new Error(`connecting to basal mcp failed: ${e.stack}\nbasal mcp stderr:\n${session.stderr}`);
  }
  return session;
}

function context(session, res) {
  return `\nresponse: ${JSON.stringify(res, null, 1).slice(0, 4000)}\nbasal mcp stderr (tail):\n${session.stderr}`;
}

function textOf(res) {
  assert.ok(Array.isArray(res.content), 'a tool result has a content array');
  return res.content.filter((c) => c.type === 'text').map((c) => c.text).join('\n');
}

async function callTool(session, name, args) {
  return session.client.callTool({ name, arguments: args }, { timeout: CALL_TIMEOUT_MS });
}

async function runScript(session, code, input) {
  const args = input === undefined ? { code } : { code, input };
  const res = await callTool(session, 'run_script', args);
  const sc = res.structuredContent;
  assert.ok(sc && typeof sc === 'object', 'run_script returns structuredContent' + context(session, res));
  assert.equal(typeof sc.status, 'string', 'structuredContent.status' + context(session, res));
  assert.ok(Array.isArray(sc.logs), 'structuredContent.logs is an array' + context(session, res));
  assert.ok(Array.isArray(sc.calls), 'structuredContent.calls is an array' + context(session, res));
  assert.ok(Number.isInteger(sc.run_id) && sc.run_id > 0, 'structuredContent.run_id is a run id' + context(session, res));
  assert.ok(textOf(res).length > 0, 'run_script returns a text summary too' + context(session, res));
  return res;
}

function expectOk(session, res) {
  assert.equal(res.structuredContent.status, 'ok', 'status' + context(session, res));
  assert.ok(!res.isError, 'a script that succeeds is not isError' + context(session, res));
}

function expectFailure(session, res, status) {
  assert.equal(res.structuredContent.status, status, 'status' + context(session, res));
  assert.equal(res.isError, true, `a ${status} result is isError` + context(session, res));
  assert.ok(res.structuredContent.error && typeof res.structuredContent.error === 'object',
            'a failure names its error' + context(session, res));
}

function callsNamed(sc, name) {
  return sc.calls.filter((c) => c.name === name);
}

describe('basal mcp with a 2025-11-25 (initialize handshake) client', () => {
  let world;
  let session;

  before(async () => {
    world = makeWorld('legacy');
    await approve(world, 'agents', fsPolicy(world));
    await seedKv(world, { 'o-1': { qty: 3, item: 'widget' } });
    session = await openSession(world, 'agents', { mode: 'legacy' });
  });

  after(async () => {
    await session?.client.close();
    if (world) rmSync(world.root, { recursive: true, force: true });
  });

  it('connects with the initialize handshake and lists run_script, list_tools and describe_tools with input schemas', async () => {
    assert.equal(session.client.getProtocolEra(), 'legacy');
    assert.equal(session.client.getNegotiatedProtocolVersion(), '2025-11-25');
    const { tools } = await session.client.listTools(undefined, { timeout: CALL_TIMEOUT_MS });
    const byName = new Map(tools.map((t) => [t.name, t]));
    for (const name of ['run_script', 'list_tools', 'describe_tools']) {
      const tool = byName.get(name);
      assert.ok(tool, `tools/list has ${name}: ${JSON.stringify(tools.map((t) => t.name))}`);
      assert.equal(tool.inputSchema?.type, 'object', `${name} has an object input schema`);
      assert.ok(typeof tool.description === 'string' && tool.description.length > 0, `${name} has a description`);
    }
    const runScriptSchema = byName.get('run_script').inputSchema;
    assert.equal(runScriptSchema.properties?.code?.type, 'string');
    assert.ok(runScriptSchema.required?.includes('code'), 'run_script requires code');
    assert.equal(byName.get('describe_tools').inputSchema.properties?.names?.type, 'array');
  });

  it('runs a script that succeeds: its result, console lines, calls and run id, journaled as codemode', async () => {
    const res = await runScript(session, `
      console.log("order", input.order, "x", input.factor);
      console.log("second line");
      const order = await tools.kv.get({namespace: "orders", key: input.order});
      const missing = await tools.kv.get({namespace: "orders", key: "no-such-order"});
      return {total: order.qty * input.factor, item: order.item, missing};
    `, { order: 'o-1', factor: 7 });
    expectOk(session, res);
    const sc = res.structuredContent;
    assert.deepEqual(sc.result, { total: 21, item: 'widget', missing: null }, context(session, res));
    assert.ok(sc.logs.some((l) => l.includes('order o-1 x 7')), 'the first console line' + context(session, res));
    assert.ok(sc.logs.some((l) => l.includes('second line')), 'the second console line' + context(session, res));
    const kv = callsNamed(sc, 'kv.get');
    assert.equal(kv.length, 2, 'both kv.get calls are reported' + context(session, res));
    for (const call of kv) {
      assert.equal(call.decision, 'allow');
      assert.equal(typeof call.ms, 'number');
    }

    const activation = await journal(world, sc.run_id);
    assert.equal(activation.id, sc.activation_id);
    assert.equal(activation.origin, 'codemode');
    assert.equal(activation.outcome, 'ok');
    assert.equal(activation.approval?.name, 'agents');
    assert.equal(activation.calls.filter((c) => c.name === 'kv.get' && c.verdict === 'allow').length, 2,
                 JSON.stringify(activation.calls));
  });

  it('runs a module with a default export, and host.call reaches the same host calls', async () => {
    const res = await runScript(session, `
      export default async function (input, host, tools) {
        const viaHost = await host.call("kv.get", {namespace: "orders", key: "o-1"});
        const viaTools = await tools.kv.get({namespace: "orders", key: "o-1"});
        return {viaHost, same: JSON.stringify(viaHost) === JSON.stringify(viaTools), n: input.n + 1};
      }
    `, { n: 41 });
    expectOk(session, res);
    assert.deepEqual(res.structuredContent.result, { viaHost: { qty: 3, item: 'widget' }, same: true, n: 42 },
                     context(session, res));
  });

  it('reports a script that throws as script_error with the thrown message', async () => {
    const res = await runScript(session, 'console.log("about to fail"); throw new RangeError("order 42 is out of stock");');
    expectFailure(session, res, 'script_error');
    const { error, logs } = res.structuredContent;
    assert.equal(error.name, 'RangeError', context(session, res));
    assert.ok(error.message.includes('order 42 is out of stock'), context(session, res));
    assert.ok(logs.some((l) => l.includes('about to fail')), 'console lines before the throw are kept' + context(session, res));
  });

  it('denies a read outside the granted folder while a granted read in the same script works, and journals both', async () => {
    const outside = join(world.root, 'secret.txt');
    const res = await runScript(session, `
      const granted = await tools.fs.read_text_file({path: input.inside});
      console.log("granted read:", JSON.stringify(granted));
      await tools.fs.read_text_file({path: input.outside});
      return "the denied read returned";
    `, { inside: join(world.data, 'hello.txt'), outside });
    expectFailure(session, res, 'denied');
    const sc = res.structuredContent;
    assert.ok(!JSON.stringify(res).includes(SECRET_TEXT), 'the file outside the grant is never read' + context(session, res));
    assert.ok(sc.logs.some((l) => l.includes('hello from the data folder')), 'the granted read returned the file' + context(session, res));
    assert.deepEqual(callsNamed(sc, 'mcp.fs.read_text_file').map((c) => c.decision), ['allow', 'deny'], context(session, res));

    const activation = await journal(world, sc.run_id);
    const reads = activation.calls.filter((c) => c.name === 'mcp.fs.read_text_file');
    assert.deepEqual(reads.map((c) => c.verdict), ['allow', 'deny'], JSON.stringify(activation.calls));
    assert.equal(reads[0].args.path, join(world.data, 'hello.txt'));
    assert.ok(JSON.stringify(reads[0].result).includes('hello from the data folder'), JSON.stringify(reads[0]));
    assert.equal(reads[1].args.path, outside);
    assert.equal(reads[1].error?.name, 'PermissionDenied', JSON.stringify(reads[1]));
    assert.ok(!JSON.stringify(activation).includes(SECRET_TEXT));
  });

  it('denies a path that climbs out of the granted folder with ".." (the parent refuses it, not the server)', async () => {
    const res = await runScript(session, 'return await tools.fs.read_text_file({path: input.path});',
                                { path: `${world.data}/../secret.txt` });
    expectFailure(session, res, 'denied');
    assert.ok(!JSON.stringify(res).includes(SECRET_TEXT), context(session, res));
    assert.deepEqual(callsNamed(res.structuredContent, 'mcp.fs.read_text_file').map((c) => c.decision), ['deny'],
                     context(session, res));
  });

  it('denies a downstream tool the policy does not grant (write_file): nothing is written', async () => {
    const target = join(world.data, 'written-by-agent.txt');
    const res = await runScript(session, 'return await host.call("mcp.fs.write_file", {path: input.path, content: "pwned"});',
                                { path: target });
    expectFailure(session, res, 'denied');
    assert.equal(existsSync(target), false, 'the file was not written');
    const activation = await journal(world, res.structuredContent.run_id);
    assert.deepEqual(activation.calls.filter((c) => c.name === 'mcp.fs.write_file').map((c) => c.verdict), ['deny'],
                     JSON.stringify(activation.calls));
  });

  it('reads a granted file through the reference server', async () => {
    const res = await runScript(session, 'return await tools.fs.read_text_file({path: input.path});',
                                { path: join(world.data, 'hello.txt') });
    expectOk(session, res);
    assert.ok(JSON.stringify(res.structuredContent.result).includes('hello from the data folder'), context(session, res));
    assert.deepEqual(callsNamed(res.structuredContent, 'mcp.fs.read_text_file').map((c) => c.decision), ['allow']);
  });

  it('lists the data folder through the reference server (list_directory)', async () => {
    const res = await runScript(session, 'return await tools.fs.list_directory({path: input.path});', { path: world.data });
    expectOk(session, res);
    const listing = JSON.stringify(res.structuredContent.result);
    for (const name of ['hello.txt', 'notes.md', 'sub']) {
      assert.ok(listing.includes(name), `the listing names ${name}` + context(session, res));
    }
    assert.ok(!listing.includes('secret.txt'), context(session, res));
  });

  it('turns a downstream tool\'s error result into an error the script can catch, and an uncaught one into script_error', async () => {
    const missing = join(world.data, 'missing.txt');
    const caught = await runScript(session, `
      try {
        await tools.fs.read_text_file({path: input});
        return "no error";
      } catch (e) {
        return {isError: e instanceof Error, message: e.message};
      }
    `, missing);
    expectOk(session, caught);
    assert.equal(caught.structuredContent.result?.isError, true, context(session, caught));
    assert.match(caught.structuredContent.result.message, /ENOENT/, 'the server\'s own message' + context(session, caught));

    const uncaught = await runScript(session, 'return await tools.fs.read_text_file({path: input});', missing);
    expectFailure(session, uncaught, 'script_error');
    assert.match(uncaught.structuredContent.error.message, /ENOENT/, context(session, uncaught));
    const activation = await journal(world, uncaught.structuredContent.run_id);
    const reads = activation.calls.filter((c) => c.name === 'mcp.fs.read_text_file');
    assert.equal(reads.length, 1, JSON.stringify(activation.calls));
    assert.equal(reads[0].verdict, 'allow');
    assert.match(JSON.stringify(reads[0].error), /ENOENT/, 'the journal keeps the tool\'s error');
  });

  it('checks a downstream call\'s arguments against the tool\'s input schema in the parent', async () => {
    const res = await runScript(session, 'return await tools.fs.list_directory({path: 42});');
    expectFailure(session, res, 'script_error');
    const { error } = res.structuredContent;
    assert.equal(error.name, 'TypeError', 'refused by basal, not by the server' + context(session, res));
    assert.match(error.message, /path/, context(session, res));
    assert.match(error.message, /string/, context(session, res));
  });

  it('stops a script that exhausts its CPU budget, and the session serves the next script', async () => {
    const res = await runScript(session, 'for (;;) {}');
    expectFailure(session, res, 'budget_exhausted');
    assert.equal(res.structuredContent.error.budget, 'cpu', context(session, res));
    const activation = await journal(world, res.structuredContent.run_id);
    assert.notEqual(activation.outcome, 'ok');

    const next = await runScript(session, 'return 1 + 1');
    expectOk(session, next);
    assert.equal(next.structuredContent.result, 2);
    assert.notEqual(next.structuredContent.run_id, res.structuredContent.run_id);
  });

  it('refuses TypeScript, saying basal runs JavaScript only', async () => {
    const res = await runScript(session, 'const x: number = 1; return x');
    expectFailure(session, res, 'typescript');
    assert.match(res.structuredContent.error.message ?? '', /JavaScript/, context(session, res));
  });

  it('cuts a 5 MB result with a "bytes cut" marker', async () => {
    const res = await runScript(session, `return "x".repeat(${HUGE_BYTES})`);
    const wire = JSON.stringify(res);
    assert.ok(wire.includes('bytes cut'), 'the cut is marked' + context(session, { ...res, content: '(omitted)', structuredContent: '(omitted)' }));
    assert.ok(wire.length < HUGE_BYTES, `the answer is cut (${wire.length} bytes)`);
  });

  it('list_tools lists the granted tools with their host-call names', async () => {
    const res = await callTool(session, 'list_tools', {});
    assert.ok(!res.isError, context(session, res));
    const sc = res.structuredContent;
    assert.ok(sc && Array.isArray(sc.tools), 'structuredContent.tools' + context(session, res));
    const byName = new Map(sc.tools.map((t) => [t.name, t]));
    for (const [name, hostCall] of [['fs.read_text_file', 'mcp.fs.read_text_file'],
                                    ['fs.list_directory', 'mcp.fs.list_directory'],
                                    ['kv.get', 'kv.get']]) {
      assert.equal(byName.get(name)?.host_call, hostCall, `${name}` + context(session, res));
      assert.equal(typeof byName.get(name).summary, 'string');
    }
    assert.deepEqual(sc.unavailable, [], 'the reference server is up' + context(session, res));
    const text = textOf(res);
    assert.ok(text.includes('fs.read_text_file') && text.includes('kv.get'), context(session, res));
  });

  it('describe_tools returns TypeScript declarations from the tools\' schemas', async () => {
    const res = await callTool(session, 'describe_tools', { names: ['fs.read_text_file', 'kv.get'] });
    assert.ok(!res.isError, context(session, res));
    const text = textOf(res);
    assert.match(text, /declare const tools/, context(session, res));
    assert.match(text, /read_text_file\s*\(/, context(session, res));
    assert.ok(text.includes('path: string'), context(session, res));
    assert.match(text, /\bkv\b[\s\S]*\bget\s*\(/, context(session, res));
    assert.ok(!text.includes('write_file'), 'only what was asked for' + context(session, res));
  });

  it('leaves no downstream server running once the client has closed', async () => {
    assert.ok(processesWithArg(world.data).length > 0, 'the downstream server runs while the session does');
    await session.client.close();
    session = undefined;
    await waitUntilNoProcessWithArg(world.data, 'the downstream server');
  });
});

describe('basal mcp with a 2026-07-28 (stateless) client', () => {
  let world;
  let session;

  before(async () => {
    world = makeWorld('modern');
    await approve(world, 'agents', fsPolicy(world));
    session = await openSession(world, 'agents', { mode: { pin: '2026-07-28' } });
  });

  after(async () => {
    await session?.client.close();
    if (world) rmSync(world.root, { recursive: true, force: true });
  });

  it('connects through server/discover, lists the tools and runs a script that reaches the downstream server', async () => {
    assert.equal(session.client.getProtocolEra(), 'modern');
    assert.equal(session.client.getNegotiatedProtocolVersion(), '2026-07-28');
    assert.ok(session.client.getDiscoverResult()?.supportedVersions?.includes('2026-07-28'));
    const { tools } = await session.client.listTools(undefined, { timeout: CALL_TIMEOUT_MS });
    assert.deepEqual(['describe_tools', 'list_tools', 'run_script'].filter((n) => tools.some((t) => t.name === n)),
                     ['describe_tools', 'list_tools', 'run_script'], JSON.stringify(tools.map((t) => t.name)));

    const res = await runScript(session, `
      const text = await tools.fs.read_text_file({path: input.path});
      return {sum: input.a + input.b, read: JSON.stringify(text).includes("hello from the data folder")};
    `, { a: 2, b: 3, path: join(world.data, 'hello.txt') });
    expectOk(session, res);
    assert.deepEqual(res.structuredContent.result, { sum: 5, read: true }, context(session, res));
  });

  it('leaves no downstream server running once the client has closed (the negotiation probe\'s included)', async () => {
    await session.client.close();
    session = undefined;
    await waitUntilNoProcessWithArg(world.data, 'the downstream server');
  });
});

describe('basal mcp with a client that negotiates (versionNegotiation auto)', () => {
  it('settles on 2026-07-28 and runs a script', async () => {
    const world = makeWorld('auto');
    let session;
    try {
      await approve(world, 'agents', fsPolicy(world));
      session = await openSession(world, 'agents', { mode: 'auto' });
      assert.equal(session.client.getProtocolEra(), 'modern');
      assert.equal(session.client.getNegotiatedProtocolVersion(), '2026-07-28');
      const res = await runScript(session, 'return input * 6', 7);
      expectOk(session, res);
      assert.equal(res.structuredContent.result, 42);
    } finally {
      await session?.client.close();
      rmSync(world.root, { recursive: true, force: true });
    }
  });
});

// Below the SDK: the stdio transport as the spec writes it, and what basal leaves behind.
describe('basal mcp on the wire', () => {
  it('writes only JSON-RPC lines to stdout, exits 0 when stdin closes, and leaves no downstream server running', async () => {
    const world = makeWorld('wire');
    let child;
    try {
      await approve(world, 'agents', fsPolicy(world));
      child = spawn(BASAL, ['mcp', '--policy', 'agents', '--db', world.db, ...WORKER_ARGS],
                          { stdio: ['pipe', 'pipe', 'pipe'] });
      let stdout = '';
      let stderr = '';
      const messages = [];  // every line of stdout, parsed
      const waiting = new Map();  // request id -> resolve
      // A write after basal ended fails with EPIPE; the exit handler below says why it ended.
      child.stdin.on('error', () => {});
      child.stderr.on('data', (c) => { stderr = (stderr + c.toString('utf8')).slice(-STDERR_TAIL_BYTES); });
      child.stdout.on('data', (c) => {
        stdout += c.toString('utf8');
        let nl;
        while ((nl = stdout.indexOf('\n')) >= 0) {
          const line = stdout.slice(0, nl);
          stdout = stdout.slice(nl + 1);
          let message;
          try {
            message = JSON.parse(line);
          } catch {
            message = { not_json: line.slice(0, 200) };
          }
          messages.push(message);
          const resolve = waiting.get(message.id);
          if (resolve) {
            waiting.delete(message.id);
            resolve(message);
          }
        }
      });
      let ended = null;  // why no answer can come any more
      const exited = new Promise((resolve) => child.on('exit', (code, signal) => {
        ended = `basal mcp ended (code ${code}, signal ${signal}):\n${stderr}`;
        for (const resolve of waiting.values()) resolve({ ended });
        waiting.clear();
        resolve({ code, signal });
      }));
      const request = (id, method, params) => new Promise((resolve) => {
        if (ended) return resolve({ ended });
        waiting.set(id, resolve);
        child.stdin.write(JSON.stringify({ jsonrpc: '2.0', id, method, params }) + '\n');
      });

      const init = await request(1, 'initialize', {
        protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'raw', version: '1' } });
      assert.equal(init.result?.protocolVersion, '2025-11-25', JSON.stringify(init) + stderr);
      child.stdin.write(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }) + '\n');
      const call = await request(2, 'tools/call', { name: 'run_script', arguments: {
        code: 'console.log("a line for the logs, not for stdout"); return await tools.fs.list_directory({path: input});',
        input: world.data } });
      assert.equal(call.result?.structuredContent?.status, 'ok', JSON.stringify(call) + stderr);
      assert.ok(processesWithArg(world.data).length > 0, 'the downstream server runs while the session does');

      child.stdin.end();
      const { code, signal } = await exited;
      assert.deepEqual({ code, signal }, { code: 0, signal: null }, stderr);
      assert.deepEqual(messages.filter((m) => m.jsonrpc !== '2.0'), [], 'every stdout line is a JSON-RPC message');
      assert.deepEqual(messages.filter((m) => m.id !== undefined).map((m) => m.id), [1, 2], 'one response per request');
      assert.equal(stdout, '', 'stdout ended at a line end');
      await waitUntilNoProcessWithArg(world.data, 'the downstream server');
    } finally {
      if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      rmSync(world.root, { recursive: true, force: true });
    }
  });
});
