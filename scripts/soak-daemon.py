#!/usr/bin/env python3
"""The soak's daemon phase (docs/soak.md#the-daemon-phase): a real `basal serve` in a temporary
directory (Unix socket, loopback TCP with a token, a webhook trigger, /mcp under a codemode policy)
under hostile and honest load at once for --seconds, while a monitor samples the daemon every second:
its RSS, its descriptors, and how long an honest client's /healthz and a trivial run take. Each
check is printed with its figures and PASS or FAIL; exit 1 on any FAIL. Not part of ctest: its
thresholds are timings on a machine, which a unit test must not hold.

Usage: soak-daemon.py --bin-dir build/release/bin [--seconds 60 | --quick] [--work-dir DIR] [--keep]
Only the Python standard library: the daemon is driven with raw sockets and http.client."""
import argparse
import hashlib
import hmac
import http.client
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zlib

# The daemon's limits for the soak, smaller than the defaults so that the load meets each of them
# within seconds on a 2-CPU machine. The bounds below are computed from these.
QUEUE_MAX = 64
MAX_CONNECTIONS = 128
MAX_UNSENT_BYTES = 16 << 20
HEADER_TIMEOUT_S = 5
MAX_SCRIPTS = 4

# The bounds the checks hold (docs/soak.md explains each).
FRAME_MIB, PARSED_MIB = 16, 40      # one worker's frame being read and its parsed message
CONN_POOL_KIB = 64                  # libmicrohttpd's memory per connection
RSS_SLACK_MIB = 64                  # SQLite's page caches, the allocator, threads' stacks
FDS_PER_WORKER = 8                  # pipes, pidfd, and the like
FD_SLACK = 32

HELLO = "export default async (input) => ({hello: input && input.name});\n"
HELLO_MANIFEST = {"budgets": {"deadline_ms": 10000, "cpu_ms": 1000}}

# Logs `count` lines of `size` bytes: a run with many host calls, whose /calls pages are large.
CHATTY = ("export default async (input) => { for (let i = 0; i < input.count; i++) "
          "console.log(String(i).padStart(8, '0') + 'x'.repeat(input.size)); return input.count; };\n")
CHATTY_MANIFEST = {"grants": {"log": {}}, "budgets": {"deadline_ms": 60000, "cpu_ms": 30000, "journal_kb": 65536,
                                                      "log_kb": 65536}}

SMALL = {"cpu_ms": 1000, "heap_mb": 16, "deadline_ms": 10000, "calls_in_flight": 1, "journal_kb": 16, "log_kb": 4}

# The hostile flows: the shapes of tests/soak/soak_flows.cpp, as the daemon's approved flows, each
# with its input and what it must end as.
HOSTILE = {
    "log_flood": {
        "source": """export default function (input) {
  const line = "x".repeat(input.line_bytes);
  for (let i = 0; i < input.lines; i++) console.log(i + " " + line);
  console.warn("y".repeat(100 * 1024));
  return {lines: input.lines};
}""",
        "manifest": {"grants": {"log": {}}, "budgets": dict(SMALL, cpu_ms=2000, calls_in_flight=4, journal_kb=256,
                                                            log_kb=32)},
        "input": lambda rng: {"lines": rng.randint(500, 3000), "line_bytes": 1024},
        "ends": {"ok"},
    },
    "kv_amp": {
        "source": """export default async function (input, host) {
  const ns = "amp";
  const big = "v".repeat(input.value_bytes);
  const out = {put: 0, refused: 0, over_refused: false, listed: -1};
  for (let i = 0; i < input.puts; i++) {
    try { await host.call("kv.put", {namespace: ns, key: "big" + ((input.n * 7 + i) % 40), value: big + i}); out.put++; }
    catch (e) { out.refused++; }
  }
  try { await host.call("kv.put", {namespace: ns, key: "over", value: big + big + big}); } catch (e) { out.over_refused = true; }
  try { out.listed = (await host.call("kv.list", {namespace: ns, limit: 1000})).length; } catch (e) { out.listed = -1; }
  return out;
}""",
        "manifest": {"grants": {"kv.list": {"namespaces": ["amp"]},
                                "kv.put": {"namespaces": ["amp"], "max_value_bytes": 524288,
                                           "quota": {"bytes": 12582912, "keys": 64}}},
                     "budgets": dict(SMALL, cpu_ms=3000, heap_mb=128, calls_in_flight=4, journal_kb=64)},
        "input": lambda rng: {"n": rng.randint(0, 1 << 20), "value_bytes": 524288 - 64, "puts": rng.randint(4, 10)},
        "ends": {"ok"},
    },
    "cpu_bomb": {
        "source": "export default function () { for (;;) {} }",
        "manifest": {"budgets": dict(SMALL, cpu_ms=100, deadline_ms=5000)},
        "input": lambda rng: None,
        "ends": {"budget_exhausted"},
    },
    "regexp_bomb": {
        "source": 'export default function (input) { return /^(a+)+$/.test("a".repeat(input.a) + "b"); }',
        "manifest": {"budgets": dict(SMALL, cpu_ms=100, deadline_ms=3000)},
        "input": lambda rng: {"a": 40},
        "ends": {"budget_exhausted"},
    },
    "memory_bomb": {
        "source": """export default function (input) {
  const keep = [];
  for (let i = 0;; i++) {
    if (input.mode === 0) keep.push(new Array(4096).fill(i));
    else if (input.mode === 1) keep.push("m".repeat(65536) + i);
    else keep.push(new Uint8Array(1 << 20));
  }
}""",
        "manifest": {"budgets": dict(SMALL, cpu_ms=2000)},
        "input": lambda rng: {"mode": rng.randint(0, 2)},
        "ends": {"budget_exhausted"},
    },
    # Endless calls: a granted call in a loop that never ends, until the deadline.
    "endless_calls": {
        "source": """export default async function (input, host) {
  for (let i = 0;; i++) await host.call("kv.get", {namespace: "endless", key: "k" + (i % 8)});
}""",
        "manifest": {"grants": {"kv.get": {"namespaces": ["endless"]}},
                     "budgets": dict(SMALL, deadline_ms=1500, journal_kb=256)},
        "input": lambda rng: None,
        "ends": {"deadline", "budget_exhausted"},
    },
    "journal_bomb": {
        "source": """export default async function (input, host) {
  const big = "j".repeat(input.bytes);
  for (let i = 0;; i++) {
    try { await host.call("soak.nope", {i, big}); } catch (e) { if (e.name !== "PermissionDenied") throw e; }
  }
}""",
        "manifest": {"budgets": dict(SMALL, cpu_ms=2000, journal_kb=64)},
        "input": lambda rng: {"bytes": 200 * 1024},
        "ends": {"budget_exhausted"},
    },
    # Huge values: a 512 KiB result, and a huge input (most of max_body_bytes) echoed back.
    "big_result": {
        "source": 'export default function (input) { return "r".repeat(input.bytes) + input.pad.length; }',
        "manifest": {"budgets": SMALL},
        "input": lambda rng: {"bytes": 512 * 1024, "pad": "p" * (768 * 1024)},
        "ends": {"ok"},
    },
    "throws": {
        "source": 'export default function (input) { throw new TypeError("soak: thrown on purpose"); }',
        "manifest": {"budgets": SMALL},
        "input": lambda rng: None,
        "ends": {"script_error"},
    },
}

POLICY = {"grants": {"kv.get": {"namespaces": ["orders"]}}, "budgets": {"cpu_ms": 2000, "deadline_ms": 10000}}
MCP_SCRIPTS = [
    "return 40 + 2",
    'const o = await tools.kv.get({namespace: "orders", key: "o-1"}); return o === null ? "none" : o;',
    'let s = 0; for (let i = 0; i < 200000; i++) s += i; return s;',
    'for (;;) {}',  # ended by the policy's cpu_ms
]


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("basal", timeout=timeout)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix_path)


class Stats:
    """Counters every load thread adds to, under one lock."""

    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.notes = []

    def add(self, key, n=1):
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + n

    def note(self, text):
        with self.lock:
            if len(self.notes) < 20:
                self.notes.append(text)

    def get(self, key):
        with self.lock:
            return self.counts.get(key, 0)


class Soak:
    def __init__(self, args):
        self.args = args
        self.bin = os.path.abspath(args.bin_dir)
        self.dir = tempfile.mkdtemp(prefix="soak-daemon-", dir=args.work_dir)
        self.db = os.path.join(self.dir, "journal.db")
        self.sock = os.path.join(self.dir, "basal.sock")
        self.port = None
        self.proc = None
        self.stop = threading.Event()
        self.stats = Stats()
        self.threads_made = 0
        self.samples = []  # (t, rss_kib, fds), one a second
        self.unix_healthz = []
        self.probes = []   # (t, healthz_s or None, run_s or None, problem or None), one a second
        self.mcp = None    # None: skipped, with self.mcp_skip saying why
        self.mcp_skip = None

    # --- setup -----------------------------------------------------------------------------------
    def basal(self, *argv, input=None):
        r = subprocess.run([os.path.join(self.bin, "basal"), *argv, "--db", self.db], input=input,
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError("basal %s: exit %d: %s" % (" ".join(argv), r.returncode, r.stderr.strip()))
        return r.stdout

    def approve(self, name, source, manifest):
        src, man = os.path.join(self.dir, name + ".js"), os.path.join(self.dir, name + ".manifest.json")
        with open(src, "w") as f:
            f.write(source)
        with open(man, "w") as f:
            json.dump(manifest, f)
        self.basal("flow", "approve", name, src, "--manifest", man, "--yes")

    def setup(self):
        self.approve("hello", HELLO, HELLO_MANIFEST)
        self.approve("chatty", CHATTY, CHATTY_MANIFEST)
        for name, flow in HOSTILE.items():
            self.approve(name, flow["source"], flow["manifest"])
        self.basal("secret", "set", "hook_secret", input="s0ak-secret\n")
        self.token = self.basal("token", "create", "--name", "soak", "--scope", "run", "--scope", "read",
                                "--scope", "metrics").strip()
        config = {"listen": {"tcp": "127.0.0.1:%d" % self.free_port()},
                  "limits": {"max_workers": self.args.max_workers, "queue_max": QUEUE_MAX, "max_connections": MAX_CONNECTIONS,
                             "max_unsent_bytes": MAX_UNSENT_BYTES, "header_timeout": "%ds" % HEADER_TIMEOUT_S,
                             "drain_timeout": "5s"},
                  "triggers": [{"name": "push", "webhook": {"flow": "hello", "secret": "hook_secret"}}]}
        self.port = int(config["listen"]["tcp"].rsplit(":", 1)[1])
        # /mcp needs only an approved codemode policy (no downstream server): skip it only if the
        # policy cannot be approved here.
        try:
            pol = os.path.join(self.dir, "agents.json")
            with open(pol, "w") as f:
                json.dump(POLICY, f)
            self.basal("policy", "approve", "agents", "--manifest", pol, "--yes")
            config["mcp"] = {"policy": "agents", "max_scripts": MAX_SCRIPTS}
            self.mcp = True
        except RuntimeError as e:
            self.mcp_skip = "the codemode policy could not be approved: %s" % e
        self.config_path = os.path.join(self.dir, "serve.json")
        with open(self.config_path, "w") as f:
            json.dump(config, f)

    @staticmethod
    def free_port():
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        return port

    def start(self):
        self.stderr_path = os.path.join(self.dir, "serve.log")
        with open(self.stderr_path, "w") as err:
            self.proc = subprocess.Popen([os.path.join(self.bin, "basal"), "serve", "--socket", self.sock, "--db", self.db,
                                          "--config", self.config_path], stdout=subprocess.DEVNULL, stderr=err)
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("basal serve exited %d: %s" % (self.proc.returncode, self.log()))
            try:
                if self.request("GET", "/healthz", timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("basal serve did not come up: " + self.log())

    def log(self):
        with open(self.stderr_path) as f:
            return f.read()[-4000:]

    # --- HTTP ------------------------------------------------------------------------------------
    def request(self, method, path, body=None, headers=None, tcp=False, timeout=30, source=None, connected=None):
        """One request on a new connection: (status, parsed body or text, headers)."""
        if tcp:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout,
                                              source_address=(source, 0) if source else None)
        else:
            conn = UnixConnection(self.sock, timeout)
        h = dict(headers or {})
        if tcp:
            h.setdefault("Authorization", "Bearer " + self.token)
        data = None
        if body is not None:
            data = body if isinstance(body, (str, bytes)) else json.dumps(body)
            h["Content-Type"] = "application/json"
        try:
            if connected is not None:
                conn.connect()
                connected.append(time.monotonic())
            conn.request(method, path, body=data, headers=h)
            r = conn.getresponse()
            raw = r.read()
            try:
                parsed = json.loads(raw) if raw else None
            except ValueError:
                parsed = raw.decode("utf-8", "replace")
            return r.status, parsed, {k.lower(): v for k, v in r.getheaders()}
        finally:
            conn.close()

    def guarded(self, name, fn):
        """Runs a load loop until the soak stops; an exception is counted, never the soak's end."""
        self.threads_made += 1
        seed = zlib.crc32(name.encode()) ^ (self.args.seed << 8) ^ self.threads_made

        def loop():
            rng = random.Random(seed)
            while not self.stop.is_set():
                try:
                    fn(rng)
                except (OSError, http.client.HTTPException) as e:
                    self.stats.add(name + ".transport_error")
                    self.stats.note("%s: %s: %s" % (name, type(e).__name__, e))
                    time.sleep(0.05)
                except Exception as e:  # an answer of an unexpected shape: counted, and the part goes on
                    self.stats.add("load.unexpected")
                    self.stats.note("%s: %s: %s" % (name, type(e).__name__, e))
                    time.sleep(0.05)
        t = threading.Thread(target=loop, name=name, daemon=True)
        t.start()
        return t

    # --- load --------------------------------------------------------------------------------------
    def api_client(self, rng):
        """Starts runs of the hostile flows (and hello), some keyed, waiting for each: its flows
        meet their bounds while at most one of its runs is in the queue."""
        name = rng.choice(list(HOSTILE) + ["hello"])
        flow = HOSTILE.get(name)
        body = {"input": flow["input"](rng) if flow else {"name": "api"}}
        headers = {}
        if rng.random() < 0.3:
            # A small key space: some keys repeat (same input: the same run; hello only, whose input
            # is fixed), most are new.
            if name == "hello":
                headers["Idempotency-Key"] = "soak-%d" % rng.randint(0, 20)
            else:
                headers["Idempotency-Key"] = "soak-%s-%d" % (name, rng.getrandbits(48))
        tcp = rng.random() < 0.5
        code, data, hdrs = self.request("POST", "/v1/flows/%s/runs?wait=20s" % name, body, headers, tcp=tcp, timeout=40)
        self.stats.add("api.%d" % code)
        if not tcp and code == 503:
            self.stats.add("api_unix_503")
        if hdrs.get("idempotent-replayed") == "true":
            self.stats.add("api.replayed")
        if code == 200 and flow and data.get("outcome") not in flow["ends"]:
            self.stats.add("api.wrong_outcome")
            self.stats.note("%s ended %s: %s" % (name, data.get("outcome"), json.dumps(data.get("error"))[:300]))
        if code == 429:
            time.sleep(float(hdrs.get("retry-after", "1")))

    def sign(self, body, ts):
        mac = hmac.new(b"s0ak-secret", (str(ts) + ".").encode() + body.encode(), hashlib.sha256).hexdigest()
        return {"X-Basal-Timestamp": str(ts), "X-Basal-Signature": "sha256=" + mac}

    def webhook_sender(self, rng):
        """Valid signed deliveries, each new; and replays of the first, with a new Idempotency-Key."""
        n = self.stats.get("hook.sent")
        body = json.dumps({"name": "hook", "delivery": n})
        code, data, hdrs = self.request("POST", "/hooks/push", body, self.sign(body, int(time.time())), tcp=True)
        self.stats.add("hook.sent")
        self.stats.add("hook.%d" % code)
        if code == 429:
            time.sleep(1)
        # At most about 10 deliveries a second: unpaced, this sender alone fills queue_max (each
        # delivery is queued at once) and the soak would measure the queue, not the daemon.
        time.sleep(0.1)

    def webhook_replayer(self, rng):
        body, headers, first = self.captured_delivery
        h = dict(headers, **{"Idempotency-Key": "replay-%d" % rng.getrandbits(48)})
        code, data, hdrs = self.request("POST", "/hooks/push", body, h, tcp=True)
        self.stats.add("replay.%d" % code)
        if code in (200, 202):
            if data["id"] == first and hdrs.get("idempotent-replayed") == "true":
                self.stats.add("replay.same_run")
            else:
                self.stats.add("replay.new_run")
                self.stats.note("a replay got run %s, not %s" % (data.get("id"), first))
        time.sleep(0.02)

    def mcp_client(self, rng):
        code = rng.choice(MCP_SCRIPTS)
        msg = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": "run_script", "arguments": {"code": code}}}
        status, data, _ = self.request("POST", "/mcp", msg, {"MCP-Protocol-Version": "2025-11-25",
                                                            "Accept": "application/json, text/event-stream"},
                                       tcp=rng.random() < 0.5, timeout=40)
        self.stats.add("mcp.%d" % status)
        if status == 200:
            self.stats.add("mcp.status." + str(data.get("result", {}).get("structuredContent", {}).get("status")))

    def non_reader(self, rng):
        """Asks for a 1 MiB page of a run with many calls and never reads the answer; leaves after a
        few seconds, then comes back."""
        s = socket.socket(socket.AF_UNIX)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        try:
            s.connect(self.sock)
            s.sendall(("GET /v1/runs/%d/calls?limit=1000 HTTP/1.1\r\nHost: basal\r\n\r\n" % self.chatty_id).encode())
            self.stats.add("nonreader.asked")
            self.stop.wait(rng.uniform(2, 6))
        finally:
            s.close()

    def slow_senders(self):
        """Connections from many loopback addresses that send a request head a byte at a time and
        never end it; each one the daemon closes is opened again."""
        head = b"GET /healthz HTTP/1.1\r\nHost: basal\r\nX-Slow: " + b"a" * 1000000
        count = MAX_CONNECTIONS + MAX_CONNECTIONS // 2
        addrs = ["127.0.%d.%d" % (1 + i // 200, 10 + i % 200) for i in range(count)]
        conns = [None] * count  # (socket, bytes sent)

        def open_(i):
            s = socket.socket()
            s.bind((addrs[i], 0))
            s.setblocking(False)
            try:
                s.connect(("127.0.0.1", self.port))
            except BlockingIOError:
                pass
            except OSError:
                s.close()
                self.stats.add("slow.connect_failed")
                return None
            self.stats.add("slow.opened")
            return [s, 0]

        while not self.stop.is_set():
            for i in range(count):
                c = conns[i]
                if c is None:
                    conns[i] = open_(i)
                    continue
                s = c[0]
                try:
                    if s.recv(4096, socket.MSG_PEEK) == b"":
                        raise ConnectionResetError
                    # An answer (a 408, say) before the head ended: the daemon is done with it.
                    raise ConnectionAbortedError
                except BlockingIOError:
                    pass
                except OSError:
                    s.close()
                    conns[i] = None
                    self.stats.add("slow.closed_by_daemon")
                    continue
                try:
                    c[1] += s.send(head[c[1]:c[1] + 1])
                except BlockingIOError:
                    pass
                except OSError:
                    s.close()
                    conns[i] = None
                    self.stats.add("slow.closed_by_daemon")
            self.stop.wait(0.2)
        for c in conns:
            if c:
                c[0].close()

    # --- the monitor -------------------------------------------------------------------------------
    def rss_kib(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def fds(self):
        return len(os.listdir("/proc/%d/fd" % self.proc.pid))

    def probe(self, n):
        """One honest probe: /healthz over TCP (and, as a figure, over the socket), then a trivial run.
        Returns (healthz seconds or None if not a 200, run seconds or None, what went wrong or None)."""
        t0 = time.monotonic()
        problem = None
        healthz = run = None
        try:
            connected = []
            code, data, _ = self.request("GET", "/healthz", tcp=True, timeout=10, connected=connected)
            healthz = time.monotonic() - t0
            if healthz >= self.args.healthz_bound:
                connect = connected[0] - t0
                problem = "/healthz took %s, %s of it to connect%s" % (
                    fmt_s(healthz), fmt_s(connect),
                    # Linux resends a dropped SYN after 1 s: the listen backlog was full.
                    " (a SYN resent: the listen backlog was full)" if connect >= 0.9 else "")
            if code != 200:
                healthz = None
                problem = "/healthz answered %d" % code
        except (OSError, http.client.HTTPException) as e:
            problem = "/healthz: %s" % e
        # The unix /healthz as a figure: it tells the TCP listener's contention from the daemon's
        # loop (or the machine) being slow, since no slow sender reaches the socket.
        tu = time.monotonic()
        try:
            if self.request("GET", "/healthz", timeout=10)[0] == 200:
                self.unix_healthz.append(time.monotonic() - tu)
        except (OSError, http.client.HTTPException):
            pass
        t1 = time.monotonic()
        try:
            code, data, _ = self.request("POST", "/v1/flows/hello/runs?wait=%ds" % int(self.args.run_bound * 2),
                                         {"input": {"name": "probe-%d" % n}}, tcp=True, timeout=20)
            run = time.monotonic() - t1
            if code != 200 or not isinstance(data, dict) or data.get("outcome") != "ok":
                problem = (problem or "") + " trivial run answered %d %s" % (code, json.dumps(data)[:200])
        except (OSError, http.client.HTTPException, ValueError) as e:
            problem = (problem or "") + " trivial run: %s" % e
        return healthz, run, problem

    def monitor(self, seconds):
        """Every second: the daemon's RSS and descriptors, and a new honest probe in a thread of its
        own, so that a slow answer delays no later sample."""
        start = time.monotonic()
        probes = []
        lock = threading.Lock()

        def probe(n, at):
            healthz, run, problem = self.probe(n)
            with lock:
                self.probes.append((at, healthz, run, problem))
            if self.args.verbose:
                print("  probe t=%5.1fs healthz %s run %s %s" % (at, fmt_s(healthz), fmt_s(run), problem or ""), flush=True)

        n = 0
        while time.monotonic() - start < seconds:
            at = time.monotonic() - start
            rss, fds = self.rss_kib(), self.fds()
            self.samples.append((at, rss, fds))
            if self.args.verbose:
                print("  t=%5.1fs rss %6.1f MiB fds %4d" % (at, rss / 1024, fds), flush=True)
            t = threading.Thread(target=probe, args=(n, at), daemon=True)
            t.start()
            probes.append(t)
            n += 1
            time.sleep(max(0.0, start + n - time.monotonic()))
        for t in probes:
            t.join(timeout=60)
        self.probes.sort()

    # --- the run ----------------------------------------------------------------------------------
    def run(self):
        self.setup()
        self.start()
        # The run whose calls the non-readers ask for: 3,000 calls of 1 KB (a page of 1,000 is about 1 MiB).
        code, chatty, _ = self.request("POST", "/v1/flows/chatty/runs?wait=60s", {"input": {"count": 3000, "size": 1000}},
                                       timeout=90)
        if code != 200 or chatty.get("outcome") != "ok":
            raise RuntimeError("the chatty run did not end ok: %d %s" % (code, chatty))
        self.chatty_id = chatty["id"]
        body = json.dumps({"name": "captured"})
        headers = self.sign(body, int(time.time()))
        code, first, _ = self.request("POST", "/hooks/push", body, headers, tcp=True)
        if code != 202:
            raise RuntimeError("the captured delivery was not accepted: %d %s" % (code, first))
        self.captured_delivery = (body, headers, first["id"])
        time.sleep(1)  # let the start settle before the baseline is taken
        self.rss0, self.fds0 = self.rss_kib(), self.fds()
        print("daemon: pid %d, RSS at start %.1f MiB, %d descriptors; %s" % (
            self.proc.pid, self.rss0 / 1024, self.fds0,
            "MCP at /mcp under policy agents" if self.mcp else "MCP skipped: " + self.mcp_skip), flush=True)
        threads = []
        on = lambda part: part not in self.args.without
        for i in range(3 if on("api") else 0):
            threads.append(self.guarded("api", self.api_client))
        if on("hook"):
            threads.append(self.guarded("hook", self.webhook_sender))
            threads.append(self.guarded("replay", self.webhook_replayer))
        for i in range(16 if on("nonreader") else 0):
            threads.append(self.guarded("nonreader", self.non_reader))
        if self.mcp and on("mcp"):
            for i in range(2):
                threads.append(self.guarded("mcp", self.mcp_client))
        if on("slow"):
            slow = threading.Thread(target=self.slow_senders, name="slow", daemon=True)
            slow.start()
            threads.append(slow)
        if self.args.without:
            print("without: %s (the checks of those parts fail: this is for finding what costs what)" %
                  ", ".join(sorted(self.args.without)))
        cpu0 = self.cpu_s()
        wall0 = time.monotonic()
        load0 = os.getloadavg()
        self.monitor(self.args.seconds)
        self.wall = time.monotonic() - wall0
        self.cpu = self.cpu_s() - cpu0
        self.load = (load0, os.getloadavg())
        self.stop.set()
        for t in threads:
            t.join(timeout=60)
        self.metrics = self.read_metrics()
        self.rss_end, self.fds_end = self.rss_kib(), self.fds()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.exit_code = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.exit_code = "did not exit within 60 s of SIGTERM"
        return self.report()

    def cpu_s(self):
        with open("/proc/%d/stat" % self.proc.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def read_metrics(self):
        out = {}
        try:
            code, text, _ = self.request("GET", "/metrics", timeout=30)
        except OSError:
            return out
        if code == 200 and isinstance(text, str):
            for line in text.splitlines():
                if line and not line.startswith("#"):
                    key, _, value = line.rpartition(" ")
                    out[key] = float(value)
        return out

    def metric_sum(self, prefix, contains=""):
        return int(sum(v for k, v in self.metrics.items() if k.startswith(prefix) and contains in k))

    # --- the report -------------------------------------------------------------------------------
    def report(self):
        s = self.stats
        checks = []

        def check(name, ok, figures):
            checks.append(ok)
            print("%s  %s: %s" % ("PASS" if ok else "FAIL", name, figures), flush=True)

        rss = [x[1] for x in self.samples]
        fds = [x[2] for x in self.samples]
        healthz = [x[1] for x in self.probes if x[1] is not None]
        runs = [x[2] for x in self.probes if x[2] is not None]
        problems = [(x[0], x[3]) for x in self.probes if x[3]]
        rss_bound = self.rss0 + 1024 * (MAX_UNSENT_BYTES // (1 << 20) + self.args.max_workers * (FRAME_MIB + PARSED_MIB) +
                                        2 * MAX_CONNECTIONS * CONN_POOL_KIB // 1024 + RSS_SLACK_MIB)
        fd_bound = self.fds0 + 2 * MAX_CONNECTIONS + FDS_PER_WORKER * self.args.max_workers + FD_SLACK

        print("load: %d samples and %d probes over %.1f s; daemon CPU %.1f s; load average %.2f at start, %.2f at end (%d CPUs)" % (
            len(self.samples), len(self.probes), self.wall, self.cpu, self.load[0][0], self.load[1][0], os.cpu_count()))
        codes = lambda p: ", ".join("%s %d" % (k[len(p):], v) for k, v in sorted(s.counts.items()) if k.startswith(p))
        print("  API runs: %s; idempotent replays %d; outcomes not as the flow must end %d" % (
            codes("api."), s.get("api.replayed"), s.get("api.wrong_outcome")))
        print("  webhook deliveries: %s" % codes("hook."))
        print("  replays of one captured delivery: %s" % codes("replay."))
        print("  slow senders: %s" % codes("slow."))
        print("  non-readers: %d asks" % s.get("nonreader.asked"))
        if self.mcp:
            print("  MCP run_script: %s" % codes("mcp."))
        else:
            print("  MCP: skipped: %s" % self.mcp_skip)
        for note in s.notes:
            print("  note: " + note)

        check("daemon RSS", max(rss) <= rss_bound,
              "start %.1f MiB, peak %.1f MiB, end %.1f MiB; bound %.1f MiB (start + max_unsent_bytes %d MiB + "
              "%d workers x (%d + %d) MiB + %d connections x %d KiB + %d MiB)" % (
                  self.rss0 / 1024, max(rss) / 1024, self.rss_end / 1024, rss_bound / 1024,
                  MAX_UNSENT_BYTES >> 20, self.args.max_workers, FRAME_MIB, PARSED_MIB, 2 * MAX_CONNECTIONS, CONN_POOL_KIB,
                  RSS_SLACK_MIB))
        third = max(1, len(rss) // 3)
        print("  figure: daemon RSS, median of the first third %.1f MiB, of the last third %.1f MiB (not checked: "
              "growth that goes on across thirds, run after run, is a leak to look for)" % (
                  median(rss[:third]) / 1024, median(rss[-third:]) / 1024))
        check("daemon descriptors", max(fds) <= fd_bound,
              "start %d, peak %d, end %d; bound %d (start + 2 x max_connections %d + %d workers x %d + %d)" % (
                  self.fds0, max(fds), self.fds_end, fd_bound, MAX_CONNECTIONS, self.args.max_workers, FDS_PER_WORKER, FD_SLACK))
        check("honest /healthz over TCP, every second", len(healthz) == len(self.probes) and max(healthz) < self.args.healthz_bound,
              "%d of %d answered 200; median %s, max %s; bound %s" % (
                  len(healthz), len(self.probes), fmt_s(median(healthz)), fmt_s(max(healthz or [0])),
                  fmt_s(self.args.healthz_bound)))
        print("  figure: /healthz over the Unix socket (not checked): median %s, max %s" % (
            fmt_s(median(self.unix_healthz)), fmt_s(max(self.unix_healthz or [0]))))
        for at, problem in [p for p in problems if "/healthz" in p[1]][:10]:
            print("  at t=%.0fs: %s" % (at, problem))
        check("honest trivial run (?wait=) over TCP, every second",
              len(runs) == len(self.probes) and not [p for p in problems if "trivial" in p[1]] and max(runs) < self.args.run_bound,
              "%d of %d ended ok; median %s, max %s; bound %s%s" % (
                  len(runs) - len([p for p in problems if "trivial" in p[1]]), len(self.probes), fmt_s(median(runs)),
                  fmt_s(max(runs or [0])), fmt_s(self.args.run_bound),
                  "".join("; at %.0fs: %s" % p for p in problems if "trivial" in p[1])[:1000]))
        check("the hostile flows ended as they must", s.get("api.wrong_outcome") == 0 and s.get("api.200") > 0,
              "%d runs answered, %d ended otherwise" % (s.get("api.200"), s.get("api.wrong_outcome")))
        check("replays of a captured delivery started no run",
              s.get("replay.new_run") == 0 and s.get("replay.same_run") > 0,
              "%d got the captured delivery's run, %d another" % (s.get("replay.same_run"), s.get("replay.new_run")))
        check("slow senders were closed (header_timeout %ds, or the idle share of max_connections)" % HEADER_TIMEOUT_S,
              s.get("slow.closed_by_daemon") > 0,
              "%d opened, %d closed by the daemon" % (s.get("slow.opened"), s.get("slow.closed_by_daemon")))
        busy = self.metric_sum('basal_http_requests_total{listener="unix",route="/v1",code="503"') - s.get("api_unix_503")
        check("non-readers met max_unsent_bytes (503 busy)", busy > 0,
              "%d of their asks answered 503 (the daemon's count on the socket, less the API clients' own)" % busy)
        check("every answer had the shape the API documents", s.get("load.unexpected") == 0,
              "%d did not (see the notes)" % s.get("load.unexpected"))
        errors = self.metric_sum("basal_http_requests_total", 'code="500"')
        check("no 500 answers", errors == 0, "%d" % errors)
        if self.mcp:
            check("MCP run_script answered", s.get("mcp.200") > 0 and s.get("mcp.status.ok") > 0,
                  "%d answered 200 (%d ok)" % (s.get("mcp.200"), s.get("mcp.status.ok")))
        check("SIGTERM: the daemon drained and exited 0", self.exit_code == 0, "exit %s" % self.exit_code)
        failed = checks.count(False)
        print("daemon phase: %d of %d checks passed" % (len(checks) - failed, len(checks)), flush=True)
        if failed:
            print("the daemon's log (tail):\n" + self.log())
        return 1 if failed else 0


def fmt_s(x):
    return "-" if x is None else ("%.0f ms" % (x * 1000) if x < 10 else "%.1f s" % x)


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else None


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bin-dir", required=True, help="where basal and ck-basal-worker are")
    p.add_argument("--seconds", type=float, default=60, help="how long the load runs (default 60)")
    p.add_argument("--quick", action="store_true", help="15 seconds")
    p.add_argument("--work-dir", default=None, help="where the temporary directory goes (default: the system's)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--keep", action="store_true", help="keep the temporary directory (store, config, log)")
    p.add_argument("--max-workers", type=int, default=4, help="the daemon's limits.max_workers (default 4)")
    p.add_argument("--healthz-bound", type=float, default=1.0, help="seconds an honest /healthz may take (default 1)")
    p.add_argument("--run-bound", type=float, default=5.0, help="seconds an honest trivial run may take (default 5)")
    p.add_argument("--without", default="", type=lambda v: set(filter(None, v.split(","))),
                   help="leave out some of the load: api,hook,nonreader,mcp,slow (comma separated)")
    p.add_argument("--verbose", action="store_true", help="print every sample")
    args = p.parse_args()
    if args.quick:
        args.seconds = 15
    soak = Soak(args)
    code = 1
    try:
        code = soak.run()
    except RuntimeError as e:
        print("FAIL  daemon phase: %s" % e)
    finally:
        if soak.proc and soak.proc.poll() is None:
            soak.proc.kill()
            soak.proc.wait()
        if args.keep:
            print("kept: %s" % soak.dir)
        else:
            shutil.rmtree(soak.dir, ignore_errors=True)
    sys.exit(code)


if __name__ == "__main__":
    main()
