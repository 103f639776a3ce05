// What the MCP end-to-end tests share (mcp_client_test.mjs over stdio, mcp_http_test.mjs over
// basal serve's /mcp): the basal binary under test, the reference filesystem server installed
// beside these files (cmake/mcp_test_packages.cmake), running basal, and finding processes.
import { execFile } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

export const run = promisify(execFile);

// BASAL_BIN is the basal binary under test; BASAL_WORKER, when set, its ck-basal-worker.
export const BASAL = process.env.BASAL_BIN;
if (!BASAL || !existsSync(BASAL)) {
  throw new Error(`BASAL_BIN must name the basal binary under test (got ${JSON.stringify(BASAL)}); ` +
                  'e.g. BASAL_BIN=build/release/bin/basal node --test build/release/mcp-test/mcp_client_test.mjs');
}
export const WORKER_ARGS = process.env.BASAL_WORKER ? ['--worker', process.env.BASAL_WORKER] : [];
export const FS_SERVER = fileURLToPath(
  new URL('./node_modules/@modelcontextprotocol/server-filesystem/dist/index.js', import.meta.url));
if (!existsSync(FS_SERVER)) {
  throw new Error(`the reference server is not installed at ${FS_SERVER}: run the tests from the build tree ` +
                  '(cmake/mcp_test_packages.cmake installs the packages beside them)');
}

// Generous: the asan build's parent is several times slower. They bound a hang, nothing else.
export const CALL_TIMEOUT_MS = 120_000;
export const STDERR_TAIL_BYTES = 16 * 1024;

// `basal ARGS...`: its {stdout, stderr}, or an error with both.
export async function basal(args) {
  try {
    return await run(BASAL, args, { maxBuffer: 64 * 1024 * 1024 });
  } catch (e) {
    throw new Error(`basal ${args.join(' ')} failed (${e.code}):\n${e.stdout}\n${e.stderr}`);
  }
}

// The processes (other than zombies) whose command line has `arg` as one argument: {pid, cmdline}.
export function processesWithArg(arg) {
  const found = [];
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid) || Number(pid) === process.pid) continue;
    let cmdline;
    try {
      cmdline = readFileSync(`/proc/${pid}/cmdline`, 'latin1');
    } catch {
      continue;  // gone meanwhile
    }
    if (cmdline.split('\0').includes(arg)) found.push({ pid: Number(pid), cmdline: cmdline.split('\0').join(' ') });
  }
  return found;
}
