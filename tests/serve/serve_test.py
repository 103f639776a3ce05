#!/usr/bin/env python3
"""basal serve, end to end: a real daemon, talked to with a real HTTP client (curl) over its Unix
socket and its loopback TCP listener. Run by ctest: serve_test.py --bin-dir DIR."""
import argparse
import hashlib
import hmac
import http.client
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import unittest

BIN = None

HELLO = "export default async (input, host) => { console.log('hi ' + JSON.stringify(input)); return {hello: input && input.name}; };\n"
SLOW = "export default async (input) => { const t = Date.now(); while (Date.now() - t < (input && input.ms || 1500)) {} return 'slept'; };\n"
MANIFEST = {"grants": {"log": {}}, "budgets": {"deadline_ms": 20000, "cpu_ms": 15000}}
# Where a Daemon keeps its store: None, a journal.db in its directory; else a function called with
# the Daemon (its directory made) that sets its db (a locator), env (for every basal it runs) and
# query (SQL on its store). postgres_test.py sets it.
STORE = None


def children_of(pid):
    """The pids of a process's children (its workers, for basal serve)."""
    out = []
    for task in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/children" % (pid, task)) as f:
            out += [int(p) for p in f.read().split()]
    return out


def wait_until(done, timeout=30):
    """Polls `done` until it holds (a guard against a hang, not a timing assertion)."""
    deadline = time.time() + timeout
    while not done():
        if time.time() > deadline:
            raise AssertionError("never happened: %s" % done)
        time.sleep(0.1)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Daemon:
    """A basal serve process with its own store, socket and (optionally) config."""

    def __init__(self, test, config=None, flows=None, tcp=False):
        self.dir = tempfile.mkdtemp(prefix="basal-serve-test-")
        test.addCleanup(self.cleanup)
        self.db = os.path.join(self.dir, "journal.db")
        self.env = {}
        if STORE:
            STORE(self)
        self.socket = os.path.join(self.dir, "basal.sock")
        self.port = free_port() if tcp else None
        self.config = dict(config or {})
        if tcp:
            self.config.setdefault("listen", {})["tcp"] = "127.0.0.1:%d" % self.port
        self.proc = None
        for name, source in (flows or {"hello": HELLO}).items():
            self.approve(name, source)

    def cli(self, *args, input=None, check=True):
        r = subprocess.run([os.path.join(BIN, "basal"), *args, "--db", self.db], input=input,
                           capture_output=True, text=True, timeout=60, env=dict(os.environ, **self.env))
        if check and r.returncode != 0:
            raise AssertionError("basal %s: exit %d: %s" % (" ".join(args), r.returncode, r.stderr))
        return r

    def approve(self, name, source, manifest=MANIFEST):
        src = os.path.join(self.dir, name + ".js")
        man = os.path.join(self.dir, name + ".manifest.json")
        with open(src, "w") as f:
            f.write(source)
        with open(man, "w") as f:
            json.dump(manifest, f)
        self.cli("flow", "approve", name, src, "--manifest", man, "--yes")

    def approve_policy(self, name, manifest):
        path = os.path.join(self.dir, name + ".policy.json")
        with open(path, "w") as f:
            json.dump(manifest, f)
        self.cli("policy", "approve", name, "--manifest", path, "--yes")

    def seed_kv(self, entries, namespace="orders"):
        """Writes kv entries the ordinary way: an ad hoc flow granted kv.put."""
        src = os.path.join(self.dir, "seed.js")
        man = os.path.join(self.dir, "seed.manifest.json")
        with open(src, "w") as f:
            f.write("export default async (input, host) => { for (const [key, value] of Object.entries(input)) "
                    "await host.call('kv.put', {namespace: %s, key, value}); };\n" % json.dumps(namespace))
        with open(man, "w") as f:
            json.dump({"grants": {"kv.put": {"namespaces": [namespace]}}}, f)
        self.cli("run", "--manifest", man, src, "--input", json.dumps(entries))

    def write_config(self, text=None):
        """Writes serve.json: the config as JSON, or `text` as it is (a broken config, say)."""
        self.config_path = os.path.join(self.dir, "serve.json")
        with open(self.config_path, "w") as f:
            if text is None:
                json.dump(self.config, f)
            else:
                f.write(text)

    def start(self, env=None):
        args = [os.path.join(BIN, "basal"), "serve", "--socket", self.socket, "--db", self.db]
        if self.config:
            self.write_config()
            args += ["--config", self.config_path]
        self.stderr_path = os.path.join(self.dir, "stderr.txt")
        # The child keeps its own copy of the descriptor; ours is closed at once.
        with open(self.stderr_path, "a") as err:
            self.proc = subprocess.Popen(args, stderr=err, stdout=subprocess.DEVNULL,
                                         env=dict(os.environ, **self.env, **(env or {})))
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("basal serve exited %d: %s" % (self.proc.returncode, self.stderr()))
            if os.path.exists(self.socket):
                code, _, _ = self.curl("GET", "/healthz", check=False)
                if code == 200:
                    return self
            time.sleep(0.05)
        raise AssertionError("basal serve did not come up: " + self.stderr())

    def stderr(self):
        try:
            with open(self.stderr_path) as f:
                return f.read()
        except OSError:
            return ""

    def curl(self, method, path, body=None, headers=None, tcp=False, check=True, timeout=60):
        args = ["curl", "-sS", "-X", method, "-o", "-", "-D", os.path.join(self.dir, "headers.txt"),
                "-w", "\n%{http_code}", "--max-time", str(timeout)]
        if tcp:
            url = "http://127.0.0.1:%d%s" % (self.port, path)
        else:
            args += ["--unix-socket", self.socket]
            url = "http://basal" + path
        for k, v in (headers or {}).items():
            args += ["-H", "%s: %s" % (k, v)]
        if body is not None:
            args += ["--data-binary", body if isinstance(body, str) else json.dumps(body), "-H", "Content-Type: application/json"]
        r = subprocess.run(args + [url], capture_output=True, text=True, timeout=timeout + 10)
        if r.returncode != 0:
            if check:
                raise AssertionError("curl failed: " + r.stderr)
            return 0, None, {}
        text, _, code = r.stdout.rpartition("\n")
        hdrs = {}
        with open(os.path.join(self.dir, "headers.txt")) as f:
            for line in f:
                if ":" in line:
                    k, v = line.split(":", 1)
                    hdrs[k.strip().lower()] = v.strip()
        try:
            data = json.loads(text) if text else None
        except ValueError:
            data = text
        return int(code), data, hdrs

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=timeout)
        return self.proc.returncode

    def cleanup(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        subprocess.run(["rm", "-rf", self.dir])

    def wait_for_log(self, text, count=1, timeout=30):
        """Waits until the daemon's stderr holds `text` at least `count` times."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.stderr().count(text) >= count:
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError("basal serve never logged %r (x%d): %s" % (text, count, self.stderr()))

    def metric(self, name):
        """The value of one sample of /metrics (0 when absent)."""
        code, text, _ = self.curl("GET", "/metrics")
        assert code == 200, text
        for line in text.splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                if key == name:
                    return float(value)
        return 0.0

    def sign(self, secret, body, ts=None):
        ts = str(int(time.time()) if ts is None else ts)
        mac = hmac.new(secret.encode(), (ts + ".").encode() + body.encode(), hashlib.sha256).hexdigest()
        return {"X-Basal-Timestamp": ts, "X-Basal-Signature": "sha256=" + mac}

    def query(self, sql, *params):
        con = sqlite3.connect(self.db, timeout=10)
        try:
            return con.execute(sql, params).fetchall()
        finally:
            con.close()


class ApiTest(unittest.TestCase):
    def test_run_sync_and_async_and_read_back(self):
        d = Daemon(self).start()
        code, run, hdrs = d.curl("POST", "/v1/flows/hello/runs?wait=30s", {"input": {"name": "ada"}})
        self.assertEqual(code, 200, run)
        self.assertEqual(run["state"], "ended")
        self.assertEqual(run["outcome"], "ok")
        self.assertEqual(run["result"], {"hello": "ada"})
        self.assertIn("cpu_ms", run)
        self.assertEqual(hdrs.get("location"), "/v1/runs/%d" % run["id"])
        # Async: 202 at once, then poll the run until it ends.
        code, run2, _ = d.curl("POST", "/v1/flows/hello/runs", {"input": {"name": "bob"}})
        self.assertEqual(code, 202, run2)
        self.assertIn(run2["state"], ("queued", "running"))
        code, ended, _ = d.curl("GET", "/v1/runs/%d?wait=30s" % run2["id"])
        self.assertEqual(code, 200, ended)
        self.assertEqual(ended["result"], {"hello": "bob"})
        code, calls, _ = d.curl("GET", "/v1/runs/%d/calls" % run2["id"])
        self.assertEqual(code, 200)
        self.assertEqual([c["name"] for c in calls["calls"]], ["log"])
        self.assertEqual(calls["calls"][0]["decision"], "allow")
        code, flows, _ = d.curl("GET", "/v1/flows")
        self.assertEqual([f["name"] for f in flows["flows"]], ["hello"])
        code, flow, _ = d.curl("GET", "/v1/flows/hello")
        self.assertEqual(flow["version"], 1)
        self.assertEqual(flow["manifest"], MANIFEST)
        code, journal, _ = d.curl("GET", "/v1/journal?after=0")
        self.assertEqual(code, 200)
        self.assertEqual(len(journal["activations"]), 2)
        self.assertEqual(journal["next"], journal["activations"][-1]["activation_id"])
        self.assertEqual(d.stop(), 0)

    def test_errors_have_real_codes(self):
        d = Daemon(self).start()
        cases = [
            ("POST", "/v1/flows/nope/runs", {"input": 1}, 404, "flow_not_found"),
            ("POST", "/v1/flows/hello/runs", "not json", 400, "bad_body"),
            ("POST", "/v1/flows/hello/runs", {"inputs": 1}, 400, "bad_body"),
            ("POST", "/v1/flows/hello/runs?wait=forever", {"input": 1}, 400, "bad_wait"),
            ("GET", "/v1/runs/999999", None, 404, "run_not_found"),
            ("GET", "/v1/runs/abc", None, 400, "bad_run_id"),
            ("GET", "/v2/anything", None, 404, "not_found"),
            ("DELETE", "/v1/flows", None, 405, "method_not_allowed"),
        ]
        for method, path, body, status, code in cases:
            with self.subTest(path=path):
                got, data, _ = d.curl(method, path, body)
                self.assertEqual(got, status, data)
                self.assertEqual(data["error"]["code"], code)
                self.assertTrue(data["error"]["message"])
        # 413: a body over limits.max_body_bytes is refused before it is read.
        d2 = Daemon(self, config={"limits": {"max_body_bytes": 1024}}).start()
        got, data, _ = d2.curl("POST", "/v1/flows/hello/runs", {"input": "x" * 5000})
        self.assertEqual(got, 413, data)
        got, data, _ = d2.curl("POST", "/v1/flows/hello/runs?wait=30s", {"input": "x" * 100})
        self.assertEqual(got, 200, data)

    def test_bad_bodies_are_400_and_a_good_one_runs(self):
        d = Daemon(self).start()
        cases = [
            ("not json", "bad_body"),
            ('{"input": 1', "bad_body"),            # truncated JSON
            ("[1, 2]", "bad_body"),                 # not an object
            ("{}", "bad_body"),                     # no "input"
            ("", "bad_body"),                       # no body at all
            ('{"input": 1, "x": 2}', "bad_body"),   # an unknown key
        ]
        for body, code in cases:
            with self.subTest(body=body):
                got, data, _ = d.curl("POST", "/v1/flows/hello/runs", body)
                self.assertEqual(got, 400, data)
                self.assertEqual(data["error"]["code"], code)
                self.assertIn("input", data["error"]["message"])
        self.assertEqual(d.query("SELECT count(*) FROM runs")[0][0], 0)  # nothing was journaled
        got, data, _ = d.curl("POST", "/v1/flows/hello/runs?wait=30s", '{"input": null}')
        self.assertEqual((got, data["outcome"]), (200, "ok"), data)
        self.assertIsNone(data["input"])

    def test_revoked_flow_is_409_until_a_new_version_is_approved(self):
        d = Daemon(self, config={"triggers": [
            {"name": "push", "webhook": {"flow": "hello", "secret": "hook_secret", "respond": "wait"}}]})
        d.cli("secret", "set", "hook_secret", input="s3cret\n")
        d.start()
        got, data, _ = d.curl("POST", "/v1/flows/hello/runs?wait=30s", {"input": {"name": "before"}})
        self.assertEqual((got, data["result"]), (200, {"hello": "before"}), data)
        d.cli("flow", "revoke", "hello", "--note", "test")
        got, data, _ = d.curl("POST", "/v1/flows/hello/runs", {"input": 1})
        self.assertEqual(got, 409, data)
        self.assertEqual(data["error"]["code"], "flow_revoked")
        self.assertIn("revoked", data["error"]["message"])
        body = json.dumps({"name": "hook"})
        got, data, _ = d.curl("POST", "/hooks/push", body, headers=d.sign("s3cret", body))
        self.assertEqual(got, 409, data)
        got, flow, _ = d.curl("GET", "/v1/flows/hello")
        self.assertEqual((got, flow["revoked"]), (200, True))
        # Only the refused requests' runs are missing: one run in all.
        self.assertEqual(d.query("SELECT count(*) FROM runs")[0][0], 1)
        # A new approval lets it run again.
        d.approve("hello", HELLO)
        got, data, _ = d.curl("POST", "/v1/flows/hello/runs?wait=30s", {"input": {"name": "after"}})
        self.assertEqual((got, data["result"]), (200, {"hello": "after"}), data)
        got, flow, _ = d.curl("GET", "/v1/flows/hello")
        self.assertEqual((flow["version"], flow["revoked"], len(flow["versions"])), (2, False, 2))

    def test_a_run_queued_before_a_revocation_never_starts(self):
        # The approval is read once per run when the run starts in the batch that admitted it; a run
        # that waited for a worker is looked at again when a worker takes it, so a `basal flow revoke`
        # from another process meanwhile refuses it, and a run admitted after it is refused at once.
        d = Daemon(self, config={"limits": {"max_workers": 1}}, flows={"slow": SLOW}).start()
        code, busy, _ = d.curl("POST", "/v1/flows/slow/runs", {"input": {"ms": 1500}})
        self.assertEqual(code, 202, busy)
        code, queued, _ = d.curl("POST", "/v1/flows/slow/runs", {"input": {"ms": 1}})
        self.assertEqual((code, queued["state"]), (202, "queued"), queued)
        d.cli("flow", "revoke", "slow", "--note", "test")
        code, ended, _ = d.curl("GET", "/v1/runs/%d?wait=30s" % queued["id"])
        self.assertEqual((code, ended["outcome"]), (200, "cancelled"), ended)
        self.assertIn("revoked", ended["error"]["message"])
        self.assertNotIn("activation_id", ended)  # it never started
        code, first, _ = d.curl("GET", "/v1/runs/%d?wait=30s" % busy["id"])
        self.assertEqual((code, first["outcome"], first["result"]), (200, "ok", "slept"), first)
        code, refused, _ = d.curl("POST", "/v1/flows/slow/runs?wait=30s", {"input": {"ms": 1}})
        self.assertEqual((code, refused["error"]["code"]), (409, "flow_revoked"), refused)
        self.assertEqual(d.stop(), 0)

    def test_a_flows_error_is_answered_and_journaled_once(self):
        throws = "export default async () => { throw new Error('x'.repeat(100000)); };\n"
        d = Daemon(self, flows={"throws": throws}).start()
        code, run, _ = d.curl("POST", "/v1/flows/throws/runs?wait=30s", {"input": None})
        self.assertEqual((code, run["outcome"]), (200, "script_error"), run)
        self.assertIn("xxxx", json.dumps(run["error"]))
        # The error is the activation's (capped there), not copied into the run's row.
        self.assertEqual(d.query("SELECT coalesce(error, '') FROM runs WHERE id=?", run["id"])[0][0], "")

    def test_a_waited_answer_is_the_run_as_journaled(self):
        # ?wait answers a plain run from what the daemon wrote at its end, without reading it back
        # (docs/performance.md): the answer must be exactly what the store then says of the run,
        # for a result, a thrown error, a result past the journal's value cap, a keyed run, and
        # a webhook that answers with the run.
        big = "export default async () => 'y'.repeat(100000);\n"
        throws = "export default async () => { throw new TypeError('no ' + 'luck'); };\n"
        d = Daemon(self, flows={"hello": HELLO, "big": big, "throws": throws}, config={"triggers": [
            {"name": "push", "webhook": {"flow": "hello", "secret": "hook_secret", "respond": "wait"}}]})
        d.cli("secret", "set", "hook_secret", input="s3cret\n")
        d.start()
        cases = [("hello", {"input": {"name": "ada"}}, {}, "ok"),
                 ("throws", {"input": [1, "two", None]}, {}, "script_error"),
                 ("big", {"input": None}, {}, "ok"),
                 ("hello", {"input": {"name": "key"}}, {"Idempotency-Key": "k-1"}, "ok")]
        answers = {}
        for flow, body, headers, outcome in cases:
            with self.subTest(flow=flow, headers=headers):
                code, waited, _ = d.curl("POST", "/v1/flows/%s/runs?wait=30s" % flow, body, headers=headers)
                self.assertEqual((code, waited["outcome"]), (200, outcome), waited)
                code, read, _ = d.curl("GET", "/v1/runs/%d" % waited["id"])
                self.assertEqual(code, 200, read)
                self.assertEqual(waited, read)
                answers[flow] = waited
        self.assertIn("basal_truncated", answers["big"]["result"])
        self.assertEqual(answers["throws"]["error"]["name"], "TypeError")
        self.assertEqual(answers["hello"]["idempotency_key"], "k-1")
        payload = json.dumps({"name": "hook"})
        code, waited, _ = d.curl("POST", "/hooks/push", payload, headers=d.sign("s3cret", payload))
        self.assertEqual((code, waited["outcome"], waited["input"]["body"]), (200, "ok", {"name": "hook"}), waited)
        self.assertEqual(waited, d.curl("GET", "/v1/runs/%d" % waited["id"])[1])
        self.assertEqual(d.stop(), 0)

    def test_idempotency_key_gives_the_same_run(self):
        d = Daemon(self).start()
        h = {"Idempotency-Key": "order-17"}
        c1, r1, _ = d.curl("POST", "/v1/flows/hello/runs?wait=30s", {"input": {"name": "x"}}, headers=h)
        c2, r2, hdrs = d.curl("POST", "/v1/flows/hello/runs?wait=30s", {"input": {"name": "x"}}, headers=h)
        self.assertEqual((c1, c2), (200, 200))
        self.assertEqual(r1["id"], r2["id"])
        self.assertEqual(hdrs.get("idempotent-replayed"), "true")
        self.assertEqual(d.query("SELECT count(*) FROM activations")[0][0], 1)
        c3, r3, _ = d.curl("POST", "/v1/flows/hello/runs", {"input": {"name": "other"}}, headers=h)
        self.assertEqual(c3, 409, r3)
        self.assertEqual(r3["error"]["code"], "idempotency_key_reused")

    def test_queue_full_is_429(self):
        d = Daemon(self, config={"limits": {"max_workers": 1, "queue_max": 2}}, flows={"slow": SLOW}).start()
        codes = []
        for i in range(5):
            c, data, _ = d.curl("POST", "/v1/flows/slow/runs", {"input": {"ms": 3000}})
            codes.append(c)
        self.assertEqual(codes.count(202), 3, codes)  # one running, two queued
        self.assertEqual(codes[3:], [429, 429])

    def test_connections_past_max_connections_wait_in_the_backlog(self):
        d = Daemon(self, config={"limits": {"max_connections": 3}}).start()
        idle = []
        for _ in range(3):
            s = socket.socket(socket.AF_UNIX)
            s.connect(d.socket)
            idle.append(s)
        # The fourth is not served while three are open: it waits in the kernel's backlog, not in
        # the daemon's memory.
        code, _, _ = d.curl("GET", "/healthz", check=False, timeout=2)
        self.assertEqual(code, 0)
        # One waits now; when a slot frees it is served, and so is everything after.
        waiting = {}
        t = threading.Thread(target=lambda: waiting.setdefault("r", d.curl("GET", "/healthz", timeout=30)))
        t.start()
        time.sleep(0.5)
        for s in idle:
            s.close()
        t.join(timeout=40)
        self.assertEqual(waiting["r"][0], 200)
        for _ in range(5):
            self.assertEqual(d.curl("GET", "/healthz")[0], 200)

    def test_request_headers_are_bounded(self):
        d = Daemon(self).start()
        code, _, _ = d.curl("GET", "/healthz", headers={"X-Big": "a" * 100_000})
        self.assertEqual(code, 431)  # libmicrohttpd's own answer: its 64 KiB per connection is full
        code, data, _ = d.curl("GET", "/healthz", headers={"X-Big": "a" * 10_000})
        self.assertEqual((code, data["status"]), (200, "alive"))

    def test_unix_socket_is_owner_only_and_peer_checked(self):
        d = Daemon(self).start()
        mode = os.stat(d.socket).st_mode & 0o777
        self.assertEqual(mode, 0o600)
        if os.geteuid() == 0:
            # Another uid may not use it even when the file mode would let it (root connects as nobody).
            os.chmod(d.socket, 0o666)
            os.chmod(d.dir, 0o755)
            r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "curl", "-sS",
                                "--unix-socket", d.socket, "-w", "\n%{http_code}", "http://basal/v1/flows"],
                               capture_output=True, text=True, timeout=30)
            self.assertTrue(r.stdout.endswith("403"), r.stdout + r.stderr)
        code, _, _ = d.curl("GET", "/v1/flows")
        self.assertEqual(code, 200)

    def test_tcp_needs_a_token_with_the_scope(self):
        d = Daemon(self, tcp=True)
        token_run = d.cli("token", "create", "--name", "ci", "--scope", "run", "--scope", "read").stdout.strip()
        token_metrics = d.cli("token", "create", "--name", "prom", "--scope", "metrics").stdout.strip()
        self.assertTrue(token_run.startswith("bsl_"))
        # Only the hash is stored.
        for path in (d.db, d.db + "-wal"):
            if os.path.exists(path):
                with open(path, "rb") as f:
                    self.assertNotIn(token_run, f.read().decode("latin-1"))
        d.start()
        code, data, hdrs = d.curl("POST", "/v1/flows/hello/runs?wait=30s", {"input": 1}, tcp=True)
        self.assertEqual(code, 401)
        self.assertEqual(hdrs.get("www-authenticate"), 'Bearer realm="basal", scope="run"')
        code, data, _ = d.curl("GET", "/v1/flows", tcp=True, headers={"Authorization": "Bearer bsl_" + "A" * 43})
        self.assertEqual(code, 401)
        code, data, _ = d.curl("POST", "/v1/flows/hello/runs?wait=30s", {"input": {"name": "t"}}, tcp=True,
                               headers={"Authorization": "Bearer " + token_metrics})
        self.assertEqual(code, 403, data)
        code, data, _ = d.curl("POST", "/v1/flows/hello/runs?wait=30s", {"input": {"name": "t"}}, tcp=True,
                               headers={"Authorization": "Bearer " + token_run})
        self.assertEqual(code, 200, data)
        self.assertEqual(data["result"], {"hello": "t"})
        code, _, _ = d.curl("GET", "/metrics", tcp=True, headers={"Authorization": "Bearer " + token_metrics})
        self.assertEqual(code, 200)
        code, _, _ = d.curl("GET", "/healthz", tcp=True)
        self.assertEqual(code, 200)
        d.cli("token", "revoke", "ci")
        code, _, _ = d.curl("GET", "/v1/flows", tcp=True, headers={"Authorization": "Bearer " + token_run})
        self.assertEqual(code, 401)

    def test_non_loopback_tcp_is_refused(self):
        d = Daemon(self, config={"listen": {"tcp": "0.0.0.0:%d" % free_port()}})
        with self.assertRaises(AssertionError) as e:
            d.start()
        self.assertIn("not a loopback address", str(e.exception))


    def test_a_trigger_that_could_never_run_is_refused_at_start(self):
        hook = {"triggers": [{"name": "push", "webhook": {"flow": "hello", "secret": "hook_secret"}}]}
        cases = [
            ({"triggers": [{"name": "push", "webhook": {"flow": "nope", "secret": "hook_secret"}}]},
             "trigger push: no flow named nope is approved"),
            (hook, "trigger push: its secret hook_secret cannot be read"),
            ({"triggers": [{"name": "tick", "schedule": {"flow": "nope", "cron": "* * * * *"}}]},
             "trigger tick: no flow named nope is approved"),
        ]
        for config, message in cases:
            with self.subTest(message=message):
                d = Daemon(self, config=config)
                with self.assertRaises(AssertionError) as e:
                    d.start()
                self.assertIn(message, str(e.exception))
        # Once the secret is stored, the same configuration starts.
        d = Daemon(self, config=hook)
        d.cli("secret", "set", "hook_secret", input="s3cret\n")
        d.start()
        self.assertEqual(d.curl("GET", "/readyz")[0], 200)

class WebhookTest(unittest.TestCase):
    def sign(self, secret, body, ts=None):
        ts = str(int(time.time()) if ts is None else ts)
        mac = hmac.new(secret.encode(), (ts + ".").encode() + body.encode(), hashlib.sha256).hexdigest()
        return {"X-Basal-Timestamp": ts, "X-Basal-Signature": "sha256=" + mac}

    def test_signatures_good_and_bad(self):
        d = Daemon(self, config={"triggers": [
            {"name": "push", "webhook": {"flow": "hello", "secret": "hook_secret", "respond": "wait"}},
            {"name": "ack", "webhook": {"flow": "hello", "secret": "hook_secret", "max_body_bytes": 2048}}]})
        d.cli("secret", "set", "hook_secret", input="s3cret\n")
        d.start()
        body = json.dumps({"name": "hook"})
        code, data, _ = d.curl("POST", "/hooks/push", body, headers=self.sign("s3cret", body))
        self.assertEqual(code, 200, data)
        self.assertEqual(data["outcome"], "ok")
        self.assertEqual(data["trigger"], "webhook:push")
        self.assertEqual(data["input"]["body"], {"name": "hook"})
        code, data, _ = d.curl("POST", "/hooks/ack", body, headers=self.sign("s3cret", body))
        self.assertEqual(code, 202, data)
        bad = [
            (self.sign("wrong", body), "bad_signature"),
            (self.sign("s3cret", body + " "), "bad_signature"),
            (self.sign("s3cret", body, ts=int(time.time()) - 3600), "stale_timestamp"),
            ({"X-Basal-Timestamp": str(int(time.time()))}, "missing_signature"),
            ({}, "missing_timestamp"),
        ]
        for headers, reason in bad:
            with self.subTest(reason=reason):
                code, data, _ = d.curl("POST", "/hooks/push", body, headers=headers)
                self.assertEqual(code, 401, data)
                self.assertEqual(data["error"]["code"], reason)
        big = json.dumps({"name": "x" * 4000})
        code, data, _ = d.curl("POST", "/hooks/ack", big, headers=self.sign("s3cret", big))
        self.assertEqual(code, 413, data)
        code, data, _ = d.curl("POST", "/hooks/nope", body, headers=self.sign("s3cret", body))
        self.assertEqual(code, 404)
        # Nothing ran for the refused deliveries: two runs, both accepted ones.
        self.assertEqual(d.query("SELECT count(*) FROM runs")[0][0], 2)


    def test_a_delivery_sent_again_gets_the_run_it_has(self):
        d = Daemon(self, config={"triggers": [
            {"name": "push", "webhook": {"flow": "hello", "secret": "hook_secret"}}]})
        d.cli("secret", "set", "hook_secret", input="s3cret\n")
        d.start()
        body = json.dumps({"name": "once"})
        headers = self.sign("s3cret", body)
        code, first, _ = d.curl("POST", "/hooks/push", body, headers=headers)
        self.assertEqual(code, 202, first)
        self.assertEqual(first["input"]["signed_at"],
                         time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(int(headers["X-Basal-Timestamp"]))))
        # The same delivery again (a retry, or a replay inside the window), and again with another
        # value beside the good signature: the same run, said so, and no second run.
        padded = dict(headers, **{"X-Basal-Signature": headers["X-Basal-Signature"] + ",sha256=" + "0" * 64})
        for again in (headers, padded):
            code, data, hdrs = d.curl("POST", "/hooks/push", body, headers=again)
            self.assertIn(code, (200, 202), data)
            self.assertEqual(data["id"], first["id"])
            self.assertEqual(hdrs.get("idempotent-replayed"), "true")
        # A new delivery of the same body (signed at another second) is a new run.
        later = self.sign("s3cret", body, ts=int(headers["X-Basal-Timestamp"]) + 1)
        code, data, hdrs = d.curl("POST", "/hooks/push", body, headers=later)
        self.assertEqual(code, 202, data)
        self.assertNotEqual(data["id"], first["id"])
        self.assertEqual(d.query("SELECT count(*) FROM runs")[0][0], 2)
        self.assertEqual(d.metric('basal_webhooks_total{trigger="push",verdict="replayed"}'), 2)
        self.assertEqual(d.metric('basal_webhooks_total{trigger="push",verdict="accepted"}'), 2)

class LifecycleTest(unittest.TestCase):
    def test_sigterm_drains_work_in_flight(self):
        d = Daemon(self, config={"limits": {"max_workers": 1, "drain_timeout": "20s"}}, flows={"slow": SLOW}).start()
        code, running, _ = d.curl("POST", "/v1/flows/slow/runs", {"input": {"ms": 1500}})
        code2, queued, _ = d.curl("POST", "/v1/flows/slow/runs", {"input": {"ms": 10}})
        self.assertEqual((code, code2), (202, 202))
        time.sleep(0.3)
        d.proc.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        code, ready, _ = d.curl("GET", "/readyz", check=False)  # the socket may already be closed
        self.assertIn(code, (0, 503))
        self.assertEqual(d.proc.wait(timeout=60), 0, d.stderr())
        rows = dict(d.query("SELECT id, state FROM runs"))
        self.assertEqual(rows[running["id"]], "ended")   # finished within the drain
        self.assertEqual(rows[queued["id"]], "queued")   # kept for the next start
        out = d.query("SELECT outcome FROM runs WHERE id=?", running["id"])[0][0]
        self.assertEqual(out, "ok")
        # The next start runs the queued one.
        d.start()
        code, data, _ = d.curl("GET", "/v1/runs/%d?wait=30s" % queued["id"])
        self.assertEqual(code, 200, data)
        self.assertEqual(data["result"], "slept")

    def test_sigkill_and_restart_with_queued_work(self):
        d = Daemon(self, config={"limits": {"max_workers": 1}}, flows={"slow": SLOW}).start()
        ids = []
        for ms in (4000, 10, 10):
            code, data, _ = d.curl("POST", "/v1/flows/slow/runs", {"input": {"ms": ms}})
            self.assertEqual(code, 202)
            ids.append(data["id"])
        time.sleep(0.5)
        d.proc.kill()
        d.proc.wait()
        d.start()
        code, first, _ = d.curl("GET", "/v1/runs/%d" % ids[0])
        self.assertEqual(first["state"], "ended")
        self.assertEqual(first["outcome"], "abandoned")
        for rid in ids[1:]:
            code, data, _ = d.curl("GET", "/v1/runs/%d?wait=30s" % rid)
            self.assertEqual((code, data["outcome"]), (200, "ok"), data)

    def test_systemd_notify_ready_watchdog_stopping(self):
        d = Daemon(self)
        path = os.path.join(d.dir, "notify.sock")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(path)
        sock.settimeout(10)
        d.start(env={"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "200000"})
        seen = []
        while not (any("READY=1" in m for m in seen) and sum("WATCHDOG=1" in m for m in seen) >= 3):
            seen.append(sock.recv(4096).decode())
        d.proc.send_signal(signal.SIGTERM)
        while not any("STOPPING=1" in m for m in seen):
            seen.append(sock.recv(4096).decode())
        code = d.proc.wait(timeout=30)
        with open(d.stderr_path) as f:
            self.assertEqual(code, 0, f.read())
        sock.close()

    def test_readyz_and_metrics_add_up(self):
        d = Daemon(self).start()
        code, data, _ = d.curl("GET", "/readyz")
        self.assertEqual((code, data["status"]), (200, "ready"))
        for i in range(3):
            d.curl("POST", "/v1/flows/hello/runs?wait=30s", {"input": {"name": str(i)}})
        d.curl("POST", "/v1/flows/nope/runs", {"input": 1})
        code, text, hdrs = d.curl("GET", "/metrics")
        self.assertEqual(code, 200)
        self.assertTrue(hdrs["content-type"].startswith("text/plain; version=0.0.4"))
        samples = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                samples[name] = float(value)
        self.assertEqual(samples['basal_activations_total{flow="hello",outcome="ok"}'], 3)
        self.assertEqual(samples['basal_activation_duration_seconds_count{flow="hello"}'], 3)
        self.assertEqual(samples['basal_runs_accepted_total{flow="hello",trigger="api"}'], 3)
        self.assertEqual(samples['basal_host_calls_total{name="log",decision="allow"}'], 3)
        self.assertEqual(samples['basal_http_requests_total{listener="unix",route="/v1",code="200"}'], 3)  # the runs
        self.assertEqual(samples['basal_http_requests_total{listener="unix",route="/healthz",code="200"}'], 1)  # at start
        self.assertEqual(samples['basal_http_requests_total{listener="unix",route="/readyz",code="200"}'], 1)
        self.assertEqual(samples['basal_http_requests_total{listener="unix",route="/v1",code="404"}'], 1)
        self.assertEqual(samples["basal_queue_length"], 0)
        self.assertEqual(samples["basal_ready"], 1)


class ScheduleTest(unittest.TestCase):
    def test_catch_up_after_downtime(self):
        config = {"triggers": [{"name": "every_minute", "schedule": {
            "flow": "hello", "cron": "* * * * *", "timezone": "UTC", "catch_up": "90s", "input": {"name": "cron"}}}]}
        d = Daemon(self, config=config).start()
        self.assertEqual(d.stop(), 0)
        # Ten minutes of downtime: move the mark back.
        con = sqlite3.connect(d.db)
        con.execute("UPDATE schedule_marks SET fire_us = fire_us - 600000000")
        con.commit()
        con.close()
        d.start()
        deadline = time.time() + 30
        while time.time() < deadline:
            ok = d.query("SELECT count(*) FROM runs WHERE triggered_by='schedule:every_minute' AND outcome='ok'")[0][0]
            if ok >= 1:
                break
            time.sleep(0.2)
        missed = d.query("SELECT count(*) FROM runs WHERE triggered_by='schedule:every_minute' AND outcome='missed'")[0][0]
        ran = d.query("SELECT count(*) FROM runs WHERE triggered_by='schedule:every_minute' AND outcome='ok'")[0][0]
        self.assertGreaterEqual(ran, 1)
        self.assertGreaterEqual(missed, 8)
        self.assertLessEqual(missed, 10)


ECHO = "export default async (input) => input && input.body;\n"


class UnixHttp(http.client.HTTPConnection):
    """One keep-alive HTTP connection over the daemon's Unix socket (curl opens one per run)."""

    def __init__(self, path):
        super().__init__("basal", timeout=60)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(60)
        self.sock.connect(self.path)

    def call(self, method, url, body=None):
        headers = {"Content-Type": "application/json"} if body is not None else {}
        self.request(method, url, body=None if body is None else json.dumps(body), headers=headers)
        r = self.getresponse()
        return r.status, json.loads(r.read() or b"null")


class ReadApiTest(unittest.TestCase):
    def test_calls_flows_and_flow_detail_and_404s(self):
        d = Daemon(self, flows={"hello": HELLO, "echo": ECHO}).start()
        code, run, _ = d.curl("POST", "/v1/flows/hello/runs?wait=30s", {"input": {"name": "ada"}})
        self.assertEqual(code, 200, run)
        code, calls, _ = d.curl("GET", "/v1/runs/%d/calls" % run["id"])
        self.assertEqual(code, 200, calls)
        self.assertEqual((calls["run_id"], calls["activation_id"]), (run["id"], run["activation_id"]))
        self.assertEqual(len(calls["calls"]), 1)
        call = calls["calls"][0]
        self.assertEqual((call["name"], call["decision"], call["state"]), ("log", "allow", "answered"), call)
        self.assertIn("hi {\"name\":\"ada\"}", json.dumps(call["args"]).replace("\\\"", "\""))
        code, err, _ = d.curl("GET", "/v1/runs/999999/calls")
        self.assertEqual((code, err["error"]["code"]), (404, "run_not_found"))
        code, err, _ = d.curl("GET", "/v1/runs/%d/nothing" % run["id"])
        self.assertEqual(code, 404)

        code, flows, _ = d.curl("GET", "/v1/flows")
        self.assertEqual(code, 200)
        by_name = {f["name"]: f for f in flows["flows"]}
        self.assertEqual(sorted(by_name), ["echo", "hello"])
        self.assertEqual(by_name["hello"]["url"], "/v1/flows/hello")
        self.assertEqual((by_name["hello"]["version"], by_name["hello"]["revoked"]), (1, False))
        code, flow, _ = d.curl("GET", "/v1/flows/echo")
        self.assertEqual(code, 200)
        self.assertEqual((flow["name"], flow["version"], flow["revoked"]), ("echo", 1, False))
        self.assertEqual(flow["manifest"], MANIFEST)
        self.assertEqual(flow["runs_url"], "/v1/flows/echo/runs")
        self.assertEqual(flow["source_hash"], "sha256:" + hashlib.sha256(ECHO.encode()).hexdigest())
        self.assertEqual(len(flow["versions"]), 1)
        code, err, _ = d.curl("GET", "/v1/flows/nope")
        self.assertEqual((code, err["error"]["code"]), (404, "flow_not_found"))
        self.assertIn("nope", err["error"]["message"])


class ConsoleTest(unittest.TestCase):
    """The web console's server side (docs/console.md): its files and the headers that keep a
    browser strict with them, the sign-in and its session cookie, CSRF, the sessions' bounds, and
    the read endpoints its pages use. The pages themselves run in Chromium: tests/console/."""

    CONSOLE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "serve", "console")

    def http(self, d, method, path, body=None, headers=None):
        """One request to the TCP listener: (status, headers as a list of (lower name, value), body)."""
        c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=60)
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            data = r.read()
            return r.status, [(k.lower(), v) for k, v in r.getheaders()], data
        finally:
            c.close()

    def sign_in(self, d, token, headers=None):
        code, hdrs, body = self.http(d, "POST", "/console/session", json.dumps({"token": token}),
                                     dict({"Content-Type": "application/json"}, **(headers or {})))
        return code, dict(hdrs).get("set-cookie", ""), json.loads(body)

    def cookie_of(self, set_cookie):
        return set_cookie.split(";")[0]

    def test_its_files_are_built_in_and_served_on_tcp_under_a_strict_policy(self):
        d = Daemon(self, tcp=True).start()
        code, hdrs, page = self.http(d, "GET", "/console/")
        h = dict(hdrs)
        self.assertEqual(code, 200)
        self.assertEqual(h["content-type"], "text/html; charset=utf-8")
        csp = h["content-security-policy"]
        for rule in ("default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'",
                     "frame-ancestors 'none'", "base-uri 'none'", "form-action 'self'"):
            self.assertIn(rule, csp)
        self.assertNotIn("unsafe", csp)
        self.assertNotIn("nonce", csp)
        self.assertEqual(h["x-frame-options"], "DENY")
        self.assertEqual(h["x-content-type-options"], "nosniff")
        self.assertEqual(h["referrer-policy"], "no-referrer")
        # No inline script or style: every script has a src, no element a style attribute.
        text = page.decode()
        self.assertEqual(text.count("<script"), text.count("<script type=\"module\" src=\"/console/"))
        self.assertNotIn("style=", text)
        self.assertNotIn("<style", text)
        # Every file is served as it is in the source tree, from the binary itself.
        with open(os.path.join(BIN, "basal"), "rb") as f:
            binary = f.read()
        names = sorted(os.listdir(self.CONSOLE_DIR))
        self.assertIn("app.js", names)
        for name in names:
            with open(os.path.join(self.CONSOLE_DIR, name), "rb") as f:
                source = f.read()
            code, hdrs, body = self.http(d, "GET", "/console/" + name)
            self.assertEqual((code, body), (200, source), name)
            self.assertIn(source[:200], binary, name)
            if name.endswith(".js"):
                self.assertEqual(dict(hdrs)["content-type"], "text/javascript; charset=utf-8")
                for banned in (b"innerHTML", b"outerHTML", b"insertAdjacentHTML", b"eval(", b"new Function",
                               b"document.write"):
                    self.assertNotIn(banned, source, name)
                # Nothing from another host (SVG's namespace is a name, never fetched).
                self.assertEqual(re.findall(rb"https?://(?!www\.w3\.org/2000/svg)", source), [], name)
        # Revalidated by its ETag.
        etag = h["etag"]
        code, _, body = self.http(d, "GET", "/console/", headers={"If-None-Match": etag})
        self.assertEqual((code, body), (304, b""))
        code, _, body = self.http(d, "GET", "/console/nope.js")
        self.assertEqual((code, json.loads(body)["error"]["code"]), (404, "not_found"))
        # Not on the Unix socket: no browser there, and every peer is the operator.
        code, data, hdrs = d.curl("GET", "/console/")
        self.assertEqual((code, data["error"]["code"]), (404, "console_not_on_socket"))
        self.assertNotIn("x-content-type-options", hdrs)
        # The API's answers on TCP are kept from being run as documents, refusals too.
        code, hdrs, _ = self.http(d, "GET", "/v1/flows")
        self.assertEqual(code, 401)
        self.assertEqual(dict(hdrs)["x-content-type-options"], "nosniff")
        self.assertIn("sandbox", dict(hdrs)["content-security-policy"])

    def test_a_token_is_traded_for_a_session_with_its_scopes_and_a_csrf_token(self):
        d = Daemon(self, tcp=True)
        op = d.cli("token", "create", "--name", "op", "--scope", "read", "--scope", "run").stdout.strip()
        viewer = d.cli("token", "create", "--name", "viewer", "--scope", "read").stdout.strip()
        prom = d.cli("token", "create", "--name", "prom", "--scope", "metrics").stdout.strip()
        d.start()
        # Only a JSON body, from this origin: another site's page can send neither unasked.
        code, _, body = self.http(d, "POST", "/console/session", "token=" + op,
                                  {"Content-Type": "application/x-www-form-urlencoded"})
        self.assertEqual((code, json.loads(body)["error"]["code"]), (415, "unsupported_media_type"))
        code, _, data = self.sign_in(d, op, {"Origin": "http://evil.example"})
        self.assertEqual((code, data["error"]["code"]), (403, "forbidden_origin"))
        code, _, data = self.sign_in(d, "bsl_" + "A" * 43)
        self.assertEqual(code, 401)
        code, _, data = self.sign_in(d, prom)
        self.assertEqual(code, 403)
        self.assertIn("lacks the scope \"read\"", data["error"]["message"])

        code, set_cookie, session = self.sign_in(d, op, {"Origin": "http://127.0.0.1:%d" % d.port})
        self.assertEqual(code, 200, session)
        self.assertEqual((session["token"], sorted(session["scopes"])), ("op", ["read", "run"]))
        self.assertRegex(set_cookie, r"^basal_session=[A-Za-z0-9_-]{43}; Path=/; Max-Age=43200; HttpOnly; SameSite=Strict$")
        self.assertNotIn(op, set_cookie)
        csrf = session["csrf_token"]
        cookie = {"Cookie": self.cookie_of(set_cookie), "X-CSRF-Token": csrf}
        code, _, body = self.http(d, "GET", "/console/session", headers=cookie)
        self.assertEqual((code, json.loads(body)["token"]), (200, "op"))
        self.assertNotIn("csrf_token", json.loads(body), "only the sign-in's answer holds it")
        # The cookie alone reads nothing: a browser sends it to every port of this host.
        cookie_alone = {"Cookie": self.cookie_of(set_cookie)}
        for path in ("/console/session", "/v1/flows", "/v1/runs"):
            code, _, body = self.http(d, "GET", path, headers=cookie_alone)
            self.assertEqual((code, json.loads(body)["error"]["code"]), (403, "bad_csrf_token"), path)
        # Behind a TLS proxy the cookie is sent over HTTPS only.
        _, secure_cookie, _ = self.sign_in(d, op, {"X-Forwarded-Proto": "https"})
        self.assertTrue(secure_cookie.endswith("; Secure"), secure_cookie)

        # The cookie admits what the token admits.
        code, _, _ = self.http(d, "GET", "/v1/flows", headers=cookie)
        self.assertEqual(code, 200)
        code, _, _ = self.http(d, "GET", "/v1/flows", headers={"Cookie": "basal_session=" + "A" * 43, "X-CSRF-Token": csrf})
        self.assertEqual(code, 401)
        code, _, _ = self.http(d, "GET", "/metrics", headers=cookie)
        self.assertEqual(code, 403)
        # A change without the session's CSRF token is refused before anything runs; with it, it runs.
        start = json.dumps({"input": {"name": "console"}})
        json_cookie = dict(cookie_alone, **{"Content-Type": "application/json"})
        for headers in (json_cookie, dict(json_cookie, **{"X-CSRF-Token": csrf[:-1] + "x"})):
            code, _, body = self.http(d, "POST", "/v1/flows/hello/runs?wait=30s", start, headers)
            self.assertEqual((code, json.loads(body)["error"]["code"]), (403, "bad_csrf_token"))
        self.assertEqual(d.metric('basal_runs_accepted_total{flow="hello",trigger="api"}'), 0)
        code, _, body = self.http(d, "POST", "/v1/flows/hello/runs?wait=30s", start,
                                  dict(json_cookie, **{"X-CSRF-Token": csrf}))
        self.assertEqual(code, 200, body)
        self.assertEqual(json.loads(body)["result"], {"hello": "console"})
        # A read-only token's session reads, and starts nothing even with its CSRF token.
        _, viewer_cookie, viewer_session = self.sign_in(d, viewer)
        code, _, body = self.http(d, "POST", "/v1/flows/hello/runs", start,
                                  {"Cookie": self.cookie_of(viewer_cookie), "Content-Type": "application/json",
                                   "X-CSRF-Token": viewer_session["csrf_token"]})
        self.assertEqual((code, json.loads(body)["error"]["code"]), (403, "forbidden"))

        # Signing out takes the CSRF token too, then the cookie is worth nothing.
        code, _, body = self.http(d, "DELETE", "/console/session", headers=cookie_alone)
        self.assertEqual((code, json.loads(body)["error"]["code"]), (403, "bad_csrf_token"))
        code, hdrs, _ = self.http(d, "DELETE", "/console/session", headers=cookie)
        self.assertEqual(code, 200)
        self.assertIn("Max-Age=0", dict(hdrs)["set-cookie"])
        code, _, _ = self.http(d, "GET", "/v1/flows", headers=cookie)
        self.assertEqual(code, 401)
        # Revoking the token ends its sessions at their next request.
        _, again, again_session = self.sign_in(d, op)
        again = {"Cookie": self.cookie_of(again), "X-CSRF-Token": again_session["csrf_token"]}
        code, _, _ = self.http(d, "GET", "/v1/flows", headers=again)
        self.assertEqual(code, 200)
        d.cli("token", "revoke", "op")
        code, _, _ = self.http(d, "GET", "/v1/flows", headers=again)
        self.assertEqual(code, 401)

    def test_signing_out_ends_the_sessions_live_streams(self):
        d = Daemon(self, tcp=True)
        op = d.cli("token", "create", "--name", "op", "--scope", "read").stdout.strip()
        d.start()
        _, set_cookie, session = self.sign_in(d, op)
        auth = {"Cookie": self.cookie_of(set_cookie), "X-CSRF-Token": session["csrf_token"]}
        c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=30)
        self.addCleanup(c.close)
        c.request("GET", "/v1/tail", headers=auth)
        r = c.getresponse()
        self.assertEqual(r.status, 200)
        self.assertEqual(r.read(len(b": basal tail\n")), b": basal tail\n")
        code, _, _ = self.http(d, "DELETE", "/console/session", headers=auth)
        self.assertEqual(code, 200)
        # The stream ends (the chunked answer's last chunk), rather than going on for a signed-out
        # session. Read until its end or 20 s (a keepalive comes every 15 s, so a stream left open
        # would keep a plain read waiting for ever).
        deadline = time.monotonic() + 20
        rest = b""
        while not r.isclosed() and time.monotonic() < deadline:
            c.sock.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                chunk = r.read1(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            rest += chunk
        self.assertTrue(r.isclosed(), "the signed-out session's stream still open after 20 s: %r" % rest)
        self.assertNotIn(b"event:", rest)

    def test_revoking_the_token_ends_its_sessions_live_streams(self):
        d = Daemon(self, tcp=True)
        op = d.cli("token", "create", "--name", "op", "--scope", "read").stdout.strip()
        d.start()
        _, set_cookie, session = self.sign_in(d, op)
        auth = {"Cookie": self.cookie_of(set_cookie), "X-CSRF-Token": session["csrf_token"]}
        c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=30)
        self.addCleanup(c.close)
        c.request("GET", "/v1/tail", headers=auth)
        r = c.getresponse()
        self.assertEqual(r.status, 200)
        self.assertEqual(r.read(len(b": basal tail\n")), b": basal tail\n")
        d.cli("token", "revoke", "op")
        # The session's next request is refused, naming the revocation, and ends the stream it had open.
        code, _, body = self.http(d, "GET", "/v1/flows", headers=auth)
        self.assertEqual(code, 401)
        self.assertIn("revoked", json.loads(body)["error"]["message"])
        deadline = time.monotonic() + 20
        while not r.isclosed() and time.monotonic() < deadline:
            c.sock.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                if not r.read1(65536):
                    break
            except TimeoutError:
                break
        self.assertTrue(r.isclosed(), "the revoked token's stream still open after 20 s")
        code, _, _ = self.http(d, "GET", "/v1/flows", headers=auth)
        self.assertEqual(code, 401)

    def test_sessions_are_bounded_and_the_console_can_be_turned_off(self):
        d = Daemon(self, tcp=True, config={"console": {"max_sessions": 2}})
        op = d.cli("token", "create", "--name", "op", "--scope", "read").stdout.strip()
        d.start()
        signed = [self.sign_in(d, op) for _ in range(3)]
        codes = [self.http(d, "GET", "/v1/flows", headers={"Cookie": self.cookie_of(c), "X-CSRF-Token": s["csrf_token"]})[0]
                 for _, c, s in signed]
        self.assertEqual(codes, [401, 200, 200], "the session used longest ago ended for the third")
        d.stop()
        off = Daemon(self, tcp=True, config={"console": {"enabled": False}})
        op = off.cli("token", "create", "--name", "op", "--scope", "read").stdout.strip()
        off.start()
        code, _, body = self.http(off, "GET", "/console/")
        self.assertEqual((code, json.loads(body)["error"]["code"]), (404, "console_not_enabled"))
        code, _, data = self.sign_in(off, op)
        self.assertEqual((code, data["error"]["code"]), (404, "console_not_enabled"))
        code, _, _ = self.http(off, "GET", "/v1/flows", headers={"Authorization": "Bearer " + op})
        self.assertEqual(code, 200, "the API itself is the same")

    def test_a_flows_versions_and_the_review_between_two(self):
        d = Daemon(self)
        wider = {"grants": {"log": {}, "kv.get": {"namespaces": ["greetings"]}},
                 "budgets": {"deadline_ms": 20000, "cpu_ms": 15000, "heap_mb": 32}}
        d.approve("hello", HELLO, wider)
        d.cli("flow", "revoke", "hello", "--version", "2", "--note", "too wide")
        d.start()
        code, v1, _ = d.curl("GET", "/v1/flows/hello/versions/1")
        self.assertEqual(code, 200, v1)
        self.assertEqual((v1["version"], v1["manifest"], v1["revoked"]), (1, MANIFEST, None))
        self.assertNotIn("review", v1)
        code, v2, _ = d.curl("GET", "/v1/flows/hello/versions/2?against=1")
        self.assertEqual(code, 200, v2)
        self.assertEqual((v2["against"], v2["manifest"], v2["source_changed"]), (1, wider, False))
        self.assertEqual((v2["revoke_note"], bool(v2["revoked_by"])), ("too wide", True))
        review = v2["review"]
        self.assertTrue(review["widens"])
        self.assertEqual([(g["name"], g["kind"]) for g in review["grants"]], [("kv.get", "added")])
        self.assertEqual([(b["name"], b["change"]) for b in review["budgets"]], [("heap_mb", "lowered")])
        code, back, _ = d.curl("GET", "/v1/flows/hello/versions/1?against=2")
        self.assertEqual([(g["name"], g["kind"]) for g in back["review"]["grants"]], [("kv.get", "removed")])
        self.assertEqual([(b["name"], b["change"]) for b in back["review"]["budgets"]], [("heap_mb", "raised")])
        code, flow, _ = d.curl("GET", "/v1/flows/hello")
        self.assertEqual(flow["versions"][1]["revoke_note"], "too wide")
        for path, status, error in (("/v1/flows/hello/versions/3", 404, "version_not_found"),
                                    ("/v1/flows/hello/versions/two", 400, "version_not_found"),
                                    ("/v1/flows/hello/versions/1?against=0", 400, "version_not_found"),
                                    ("/v1/flows/nope/versions/1", 404, "flow_not_found")):
            code, data, _ = d.curl("GET", path)
            self.assertEqual((code, data["error"]["code"]), (status, error), path)
        self.assertIn("versions 1 to 2", d.curl("GET", "/v1/flows/hello/versions/3")[1]["error"]["message"])

    def test_health_history_has_a_sample_at_start(self):
        d = Daemon(self).start()
        code, history, _ = d.curl("GET", "/v1/health/history")
        self.assertEqual(code, 200, history)
        self.assertEqual((history["interval_ms"], history["capacity"]), (10000, 360))
        self.assertGreaterEqual(len(history["samples"]), 1)
        self.assertEqual(sorted(history["samples"][0]),
                         ["activations_failed", "activations_ok", "at", "calls", "calls_refused", "in_flight",
                          "queued", "workers_busy", "workers_live"])


class JournalPollTest(unittest.TestCase):
    def test_long_poll_returns_at_once_with_news_and_waits_for_a_run_to_end(self):
        d = Daemon(self, flows={"hello": HELLO, "slow": SLOW}).start()
        code, run, _ = d.curl("POST", "/v1/flows/hello/runs?wait=30s", {"input": {"name": "a"}})
        self.assertEqual(code, 200)
        # News already there: answered at once (it would otherwise wait out wait_max, 60 s, past
        # curl's 30 s).
        code, page, _ = d.curl("GET", "/v1/journal?after=0&wait=60s", timeout=30)
        self.assertEqual(code, 200, page)
        self.assertEqual([(a["activation_id"], a["outcome"]) for a in page["activations"]],
                         [(run["activation_id"], "ok")])
        self.assertEqual(page["next"], run["activation_id"])
        # Nothing new: the long-poll waits; a run that starts during the wait does not end it, the
        # run's end does.
        got = {}

        def poll():
            got["reply"] = d.curl("GET", "/v1/journal?after=%d&wait=60s" % page["next"], timeout=90)

        t = threading.Thread(target=poll)
        t.start()
        code, slow, _ = d.curl("POST", "/v1/flows/slow/runs", {"input": {"ms": 1500}})
        self.assertEqual(code, 202)
        self.assertTrue(t.is_alive())  # still waiting: the slow run takes 1.5 s
        t.join(timeout=90)
        code, page2, _ = got["reply"]
        self.assertEqual(code, 200, page2)
        ended = [a for a in page2["activations"] if a["outcome"] is not None]
        self.assertEqual([(a["flow"], a["outcome"]) for a in ended], [("slow", "ok")], page2)
        self.assertEqual(page2["next"], ended[0]["activation_id"])
        # The run's own record agrees.
        code, r, _ = d.curl("GET", "/v1/runs/%d" % slow["id"])
        self.assertEqual((r["state"], r["activation_id"]), ("ended", ended[0]["activation_id"]))
        # No wait: an empty page at once.
        code, page3, _ = d.curl("GET", "/v1/journal?after=%d" % page2["next"])
        self.assertEqual((code, page3["activations"], page3["next"]), (200, [], page2["next"]))
        code, err, _ = d.curl("GET", "/v1/journal?after=-1")
        self.assertEqual((code, err["error"]["code"]), (400, "bad_after"))


class LimitsTest(unittest.TestCase):
    def test_bodies_over_the_limits_are_413(self):
        d = Daemon(self, config={"limits": {"max_body_bytes": 1024}, "triggers": [
            {"name": "ack", "webhook": {"flow": "hello", "secret": "hook_secret", "max_body_bytes": 2048}}]})
        d.cli("secret", "set", "hook_secret", input="s3cret\n")
        d.start()
        code, data, _ = d.curl("POST", "/v1/flows/hello/runs", {"input": "x" * 1100})
        self.assertEqual((code, data["error"]["code"]), (413, "body_too_large"), data)
        # Chunked (no Content-Length): counted while read, refused at the end.
        code, data, _ = d.curl("POST", "/v1/flows/hello/runs", {"input": "x" * 1100},
                               headers={"Transfer-Encoding": "chunked"})
        self.assertEqual((code, data["error"]["code"]), (413, "body_too_large"), data)
        code, data, _ = d.curl("POST", "/v1/flows/hello/runs?wait=30s", {"input": "x" * 900},
                               headers={"Transfer-Encoding": "chunked"})
        self.assertEqual((code, data["outcome"]), (200, "ok"), data)
        # A webhook has its own limit, above the API's here.
        body = json.dumps({"name": "x" * 1500})
        code, data, _ = d.curl("POST", "/hooks/ack", body, headers=d.sign("s3cret", body))
        self.assertEqual(code, 202, data)
        body = json.dumps({"name": "x" * 2100})
        code, data, _ = d.curl("POST", "/hooks/ack", body, headers=d.sign("s3cret", body))
        self.assertEqual((code, data["error"]["code"]), (413, "body_too_large"), data)
        self.assertEqual(d.query("SELECT count(*) FROM runs")[0][0], 2)

    def test_new_runs_are_503_while_draining(self):
        d = Daemon(self, config={"limits": {"max_workers": 1, "drain_timeout": "20s"}},
                   flows={"hello": HELLO, "slow": SLOW}).start()
        conn = UnixHttp(d.socket)
        self.addCleanup(conn.close)
        status, run = conn.call("POST", "/v1/flows/slow/runs", {"input": {"ms": 2000}})
        self.assertEqual(status, 202, run)
        status, _ = conn.call("GET", "/readyz")
        self.assertEqual(status, 200)
        d.proc.send_signal(signal.SIGTERM)
        d.wait_for_log("draining")
        # The listening socket is closed; this connection was open before and is still served.
        status, ready = conn.call("GET", "/readyz")
        self.assertEqual((status, ready["reason"]), (503, "draining"))
        status, err = conn.call("POST", "/v1/flows/hello/runs", {"input": 1})
        self.assertEqual((status, err["error"]["code"]), (503, "draining"), err)
        status, now = conn.call("GET", "/v1/runs/%d" % run["id"])  # reading still works
        self.assertEqual((status, now["state"]), (202, "running"), now)
        self.assertEqual(d.proc.wait(timeout=60), 0, d.stderr())
        self.assertEqual(d.query("SELECT id, outcome FROM runs"), [(run["id"], "ok")])


class WebhookWaitTest(unittest.TestCase):
    def test_respond_wait_returns_the_result_and_ack_does_not_wait(self):
        d = Daemon(self, flows={"echo": ECHO}, config={"triggers": [
            {"name": "sync", "webhook": {"flow": "echo", "secret": "hook_secret", "respond": "wait", "wait": "30s"}},
            {"name": "async", "webhook": {"flow": "echo", "secret": "hook_secret"}}]})
        d.cli("secret", "set", "hook_secret", input="s3cret\n")
        d.start()
        body = json.dumps({"order": 17})
        code, data, _ = d.curl("POST", "/hooks/sync", body, headers=d.sign("s3cret", body))
        self.assertEqual(code, 200, data)
        self.assertEqual((data["state"], data["outcome"], data["result"]), ("ended", "ok", {"order": 17}))
        code, data, _ = d.curl("POST", "/hooks/async", body, headers=d.sign("s3cret", body))
        # "ack" is 202 once the run is journaled, never a wait for its end: the run as it stands
        # then, which has a result only if its worker answered before the accepting commit did.
        self.assertEqual(code, 202, data)
        if data["state"] != "ended":
            self.assertNotIn("result", data)
        code, ended, _ = d.curl("GET", "/v1/runs/%d?wait=30s" % data["id"])
        self.assertEqual((code, ended["result"]), (200, {"order": 17}))


class ReloadTest(unittest.TestCase):
    def test_sighup_reloads_triggers_and_limits_and_refuses_a_broken_config(self):
        d = Daemon(self, config={"limits": {"max_body_bytes": 4096}, "triggers": [
            {"name": "a", "webhook": {"flow": "hello", "secret": "hook_secret", "respond": "wait"}}]})
        d.cli("secret", "set", "hook_secret", input="s3cret\n")
        d.start()
        body = json.dumps({"name": "b"})
        code, data, _ = d.curl("POST", "/hooks/b", body, headers=d.sign("s3cret", body))
        self.assertEqual((code, data["error"]["code"]), (404, "trigger_not_found"))
        code, data, _ = d.curl("POST", "/v1/flows/hello/runs?wait=30s", {"input": "x" * 2000})
        self.assertEqual(code, 200, data)
        # Add a webhook trigger, lower a limit, SIGHUP.
        d.config["triggers"].append({"name": "b", "webhook": {"flow": "hello", "secret": "hook_secret", "respond": "wait"}})
        d.config["limits"]["max_body_bytes"] = 1024
        d.write_config()
        d.proc.send_signal(signal.SIGHUP)
        d.wait_for_log("SIGHUP: reloaded")
        self.assertIn("2 webhooks", d.stderr())
        code, data, _ = d.curl("POST", "/hooks/b", body, headers=d.sign("s3cret", body))
        self.assertEqual((code, data["trigger"], data["outcome"]), (200, "webhook:b", "ok"), data)
        code, data, _ = d.curl("POST", "/v1/flows/hello/runs?wait=30s", {"input": "x" * 2000})
        self.assertEqual((code, data["error"]["code"]), (413, "body_too_large"), data)
        code, data, _ = d.curl("POST", "/v1/flows/hello/runs?wait=30s", {"input": "x" * 500})
        self.assertEqual(code, 200, data)
        # A broken config: refused with a log line; the running one stays.
        d.write_config('{"limits": {"max_body_bytes": "lots"}, "triggers": [}')
        d.proc.send_signal(signal.SIGHUP)
        d.wait_for_log("the config was not reloaded")
        d.write_config(json.dumps({"triggers": [{"name": "c", "webhook": {"flow": "hello", "secret": "hook_secret",
                                                                          "respond": "not-a-mode"}}]}))
        d.proc.send_signal(signal.SIGHUP)
        d.wait_for_log("the config was not reloaded", count=2)
        # Well-formed, but its trigger names a flow that is not approved: refused the same way.
        d.write_config(json.dumps({"triggers": [{"name": "c", "webhook": {"flow": "nope", "secret": "hook_secret"}}]}))
        d.proc.send_signal(signal.SIGHUP)
        d.wait_for_log("the config was not reloaded", count=3)
        self.assertIn("trigger c: no flow named nope is approved", d.stderr())
        for hook in ("a", "b"):
            code, data, _ = d.curl("POST", "/hooks/" + hook, body, headers=d.sign("s3cret", body))
            self.assertEqual((code, data["outcome"]), (200, "ok"), data)
        code, data, _ = d.curl("POST", "/hooks/c", body, headers=d.sign("s3cret", body))
        self.assertEqual(code, 404)
        code, data, _ = d.curl("POST", "/v1/flows/hello/runs", {"input": "x" * 2000})
        self.assertEqual(code, 413)
        self.assertIsNone(d.proc.poll())
        self.assertEqual(d.stop(), 0)


class CliTest(unittest.TestCase):
    def test_health_talks_to_the_daemon(self):
        d = Daemon(self).start()
        r = subprocess.run([os.path.join(BIN, "basal"), "health", "--socket", d.socket],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        h = json.loads(r.stdout)
        self.assertEqual((h["serve"]["ready"], h["serve"]["draining"], h["serve"]["queued_runs"]), (True, False, 0))
        # No daemon there: an error naming the address, not a hang.
        r = subprocess.run([os.path.join(BIN, "basal"), "health", "--socket", os.path.join(d.dir, "none.sock")],
                           capture_output=True, text=True, timeout=60)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("none.sock", r.stderr)

    def test_journal_follow_prints_a_run_that_ends_after_it_started(self):
        d = Daemon(self, flows={"hello": HELLO, "slow": SLOW}).start()
        code, before, _ = d.curl("POST", "/v1/flows/hello/runs?wait=30s", {"input": {"name": "before"}})
        self.assertEqual(code, 200)
        ok200 = 'basal_http_requests_total{listener="unix",route="/v1",code="200"}'
        base = d.metric(ok200)
        follow = subprocess.Popen([os.path.join(BIN, "basal"), "journal", "--follow", "--socket", d.socket],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: follow.poll() is None and follow.kill())
        # Wait until it has read the journal up to now (two pages answered: the one activation,
        # then none) and so is long-polling.
        deadline = time.time() + 30
        while time.time() < deadline:
            if d.metric(ok200) - base >= 2:
                break
            time.sleep(0.05)
        else:
            self.fail("basal journal --follow did not read the journal: " + follow.stderr.read())
        code, slow, _ = d.curl("POST", "/v1/flows/slow/runs", {"input": {"ms": 1000}})
        self.assertEqual(code, 202)
        line = {}
        t = threading.Thread(target=lambda: line.setdefault("text", follow.stdout.readline()))
        t.start()
        t.join(timeout=60)
        code, ended, _ = d.curl("GET", "/v1/runs/%d?wait=30s" % slow["id"])
        self.assertEqual(ended["state"], "ended")
        self.assertRegex(line.get("text", ""), r"^activation %d +slow +ok +ended " % ended["activation_id"])
        follow.send_signal(signal.SIGINT)
        out, err = follow.communicate(timeout=30)
        # It ends as an interrupted command does (killed by SIGINT, or exit 0/130 if it catches it),
        # with nothing on stderr and its line already written.
        self.assertIn(follow.returncode, (0, -signal.SIGINT, 130), err)
        self.assertEqual(err, "")
        # What ran before it started is not its to print.
        self.assertNotIn("activation %d " % before["activation_id"], line["text"] + out)
        self.assertIsNone(d.proc.poll())  # the daemon is unaffected


    def test_journal_follow_prints_a_run_already_running_when_it_started(self):
        d = Daemon(self, flows={"hello": HELLO, "slow": SLOW}).start()
        code, before, _ = d.curl("POST", "/v1/flows/hello/runs?wait=30s", {"input": {"name": "before"}})
        self.assertEqual(code, 200)
        code, slow, _ = d.curl("POST", "/v1/flows/slow/runs", {"input": {"ms": 1500}})
        self.assertEqual(code, 202)
        follow = subprocess.Popen([os.path.join(BIN, "basal"), "journal", "--follow", "--socket", d.socket],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: follow.poll() is None and follow.kill())
        line = {}
        t = threading.Thread(target=lambda: line.setdefault("text", follow.stdout.readline()))
        t.start()
        code, ended, _ = d.curl("GET", "/v1/runs/%d?wait=30s" % slow["id"])
        self.assertEqual((code, ended["state"]), (200, "ended"))
        t.join(timeout=60)
        # The run that was running when --follow started is printed once it ends; the one that had
        # ended before is not.
        self.assertRegex(line.get("text", ""), r"^activation %d +slow +ok +ended " % ended["activation_id"])
        follow.send_signal(signal.SIGINT)
        out, err = follow.communicate(timeout=30)
        self.assertNotIn("activation %d " % before["activation_id"], line["text"] + out)


class ScheduleOverlapTest(unittest.TestCase):
    def fire_again(self, d, count):
        """Moves the trigger's mark a day back and reloads: the daily fire two minutes ago is due again."""
        con = sqlite3.connect(d.db, timeout=30)
        con.execute("UPDATE schedule_marks SET fire_us = fire_us - 86400000000")
        con.commit()
        con.close()
        d.proc.send_signal(signal.SIGHUP)
        d.wait_for_log("SIGHUP: reloaded", count=count)

    def runs(self, d):
        return d.query("SELECT id, state, outcome, error FROM runs WHERE triggered_by='schedule:daily' ORDER BY id")

    def start_daily(self, overlap):
        # A daily fire two minutes ago (UTC): no real fire comes during the test.
        t = time.gmtime(time.time() - 120)
        config = {"limits": {"max_workers": 2}, "triggers": [{"name": "daily", "schedule": {
            "flow": "slow", "cron": "%d %d * * *" % (t.tm_min, t.tm_hour), "timezone": "UTC",
            "catch_up": "10m", "overlap": overlap, "input": {"ms": 4000}}}]}
        d = Daemon(self, config=config, flows={"slow": SLOW}).start()
        self.assertEqual(d.stop(), 0)  # the trigger's mark is now
        con = sqlite3.connect(d.db)
        con.execute("UPDATE schedule_marks SET fire_us = fire_us - 86400000000")
        con.commit()
        con.close()
        d.start()  # catch-up: the fire two minutes ago runs
        d.wait_for_log("starts now")
        return d

    def test_overlap_skip_journals_a_skipped_run(self):
        d = self.start_daily("skip")
        self.fire_again(d, 1)  # the first run still runs (4 s): skipped
        rows = self.runs(d)
        self.assertEqual(len(rows), 2, rows)
        self.assertIn(rows[0][1], ("queued", "running"))
        self.assertEqual(rows[1][1:3], ("ended", "skipped"))
        self.assertIn("overlap: skip", json.loads(rows[1][3])["message"])
        self.assertEqual(d.metric('basal_schedule_events_total{trigger="daily",event="skipped"}'), 1)
        code, first, _ = d.curl("GET", "/v1/runs/%d?wait=30s" % rows[0][0])
        self.assertEqual((code, first["outcome"]), (200, "ok"), first)
        self.assertEqual(d.metric('basal_schedule_events_total{trigger="daily",event="run"}'), 1)

    def test_overlap_buffer_one_runs_one_fire_after_the_open_run(self):
        d = self.start_daily("buffer_one")
        self.fire_again(d, 1)  # buffered behind the running one
        self.fire_again(d, 2)  # one runs, one waits: skipped
        rows = self.runs(d)
        self.assertEqual([r[1] for r in rows[1:]], ["queued", "ended"], rows)
        self.assertEqual(rows[2][2], "skipped")
        self.assertIn("overlap: buffer_one", json.loads(rows[2][3])["message"])
        code, first, _ = d.curl("GET", "/v1/runs/%d?wait=30s" % rows[0][0])
        code, second, _ = d.curl("GET", "/v1/runs/%d?wait=30s" % rows[1][0])
        self.assertEqual((first["outcome"], second["outcome"]), ("ok", "ok"), (second, d.stderr()))
        # The buffered run started only once the first had ended (max_workers would allow both).
        self.assertGreaterEqual(second["started"], first["ended"])


# Waits without using CPU (setTimeout is the parent's timer.sleep): a run that holds its worker.
NAP = "export default async (input) => { await new Promise(r => setTimeout(r, (input && input.ms) || 1000)); return 'napped'; };\n"


class QueueMaxTest(unittest.TestCase):
    """limits.queue_max holds on every path into the queue (issue 25)."""

    def test_keyed_runs_webhooks_and_schedules_meet_queue_max(self):
        t = time.gmtime(time.time() - 120)  # a daily fire two minutes ago: no real fire during the test
        config = {"limits": {"max_workers": 1, "queue_max": 2}, "triggers": [
            {"name": "push", "webhook": {"flow": "nap", "secret": "hook_secret"}},
            {"name": "daily", "schedule": {"flow": "nap", "cron": "%d %d * * *" % (t.tm_min, t.tm_hour),
                                           "timezone": "UTC", "catch_up": "10m", "input": {"ms": 10}}}]}
        d = Daemon(self, config=config, flows={"nap": NAP})
        d.cli("secret", "set", "hook_secret", input="s3cret\n")
        d.start()
        # One run holds the worker, two wait: the queue is full.
        code, running, _ = d.curl("POST", "/v1/flows/nap/runs", {"input": {"ms": 60000}})
        self.assertEqual(code, 202, running)
        code, keyed, _ = d.curl("POST", "/v1/flows/nap/runs", {"input": {"ms": 10}}, headers={"Idempotency-Key": "k-queued"})
        self.assertEqual(code, 202, keyed)
        code, third, _ = d.curl("POST", "/v1/flows/nap/runs", {"input": {"ms": 10}})
        self.assertEqual(code, 202, third)
        # New keyed requests are refused like any other: 429 with Retry-After, nothing journaled.
        for i in range(30):
            code, data, hdrs = d.curl("POST", "/v1/flows/nap/runs", {"input": {"ms": 10}},
                                      headers={"Idempotency-Key": "k-%d" % i})
            self.assertEqual((code, data["error"]["code"]), (429, "queue_full"), data)
            self.assertEqual(hdrs.get("retry-after"), "1")
        self.assertEqual(d.query("SELECT count(*) FROM runs")[0][0], 3)
        # A key that names a run already there adds nothing: that run, even now.
        code, again, hdrs = d.curl("POST", "/v1/flows/nap/runs", {"input": {"ms": 10}}, headers={"Idempotency-Key": "k-queued"})
        self.assertEqual((code, again["id"]), (202, keyed["id"]), again)
        self.assertEqual(hdrs.get("idempotent-replayed"), "true")
        # Webhook deliveries: 429 with Retry-After, so that senders retry; counted.
        for i in range(5):
            body = json.dumps({"delivery": i})
            code, data, hdrs = d.curl("POST", "/hooks/push", body, headers=d.sign("s3cret", body))
            self.assertEqual((code, data["error"]["code"]), (429, "queue_full"), data)
            self.assertEqual(hdrs.get("retry-after"), "1")
        self.assertEqual(d.metric('basal_webhooks_total{trigger="push",verdict="queue_full"}'), 5)
        self.assertEqual(d.query("SELECT count(*) FROM runs WHERE triggered_by='webhook:push'")[0][0], 0)
        # A schedule's fire that finds the queue full is journaled as skipped, saying why.
        con = sqlite3.connect(d.db, timeout=30)
        con.execute("UPDATE schedule_marks SET fire_us = fire_us - 86400000000")
        con.commit()
        con.close()
        d.proc.send_signal(signal.SIGHUP)
        d.wait_for_log("SIGHUP: reloaded")
        # The skipped fire's row holds no answer, so its batch may be grouped for up to 2 ms after
        # the log line while runs wait in the queue (docs/journal.md): read until it is there.
        deadline = time.monotonic() + 30
        rows = []
        while not rows and time.monotonic() < deadline:
            rows = d.query("SELECT state, outcome, error FROM runs WHERE triggered_by='schedule:daily'")
        self.assertEqual([(r[0], r[1]) for r in rows], [("ended", "skipped")], rows)
        self.assertIn("queue_max", json.loads(rows[0][2])["message"])
        self.assertEqual(d.metric('basal_schedule_events_total{trigger="daily",event="skipped"}'), 1)
        # Room again once the queue moves: the long run's worker is killed, the two queued runs run,
        # and the same keyed request is accepted.
        for pid in children_of(d.proc.pid):
            os.kill(pid, signal.SIGKILL)
        for run in (keyed, third):
            code, data, _ = d.curl("GET", "/v1/runs/%d?wait=30s" % run["id"])
            self.assertEqual((code, data["outcome"]), (200, "ok"), data)
        code, data, _ = d.curl("POST", "/v1/flows/nap/runs", {"input": {"ms": 10}}, headers={"Idempotency-Key": "k-0"})
        self.assertEqual(code, 202, data)


class WebhookReplayTest(unittest.TestCase):
    def test_a_replayed_delivery_with_new_idempotency_keys_starts_one_run(self):
        d = Daemon(self, config={"triggers": [{"name": "push", "webhook": {"flow": "hello", "secret": "hook_secret"}}]})
        d.cli("secret", "set", "hook_secret", input="s3cret\n")
        d.start()
        body = json.dumps({"name": "captured"})
        headers = d.sign("s3cret", body)
        code, first, _ = d.curl("POST", "/hooks/push", body, headers=headers)
        self.assertEqual(code, 202, first)
        # The same signed delivery, replayed inside the window with a new Idempotency-Key each time:
        # the header is not signed, so it is not the key. Each gets the run the delivery has.
        for i in range(50):
            code, data, hdrs = d.curl("POST", "/hooks/push", body, headers=dict(headers, **{"Idempotency-Key": "replay-%d" % i}))
            self.assertIn(code, (200, 202), data)
            self.assertEqual(data["id"], first["id"])
            self.assertEqual(hdrs.get("idempotent-replayed"), "true")
        self.assertEqual(d.query("SELECT count(*) FROM runs")[0][0], 1)
        self.assertEqual(d.metric('basal_webhooks_total{trigger="push",verdict="replayed"}'), 50)
        # A new delivery (signed anew) is a new run, with or without the header.
        later = d.sign("s3cret", body, ts=int(headers["X-Basal-Timestamp"]) + 1)
        code, data, _ = d.curl("POST", "/hooks/push", body, headers=dict(later, **{"Idempotency-Key": "replay-0"}))
        self.assertEqual(code, 202, data)
        self.assertNotEqual(data["id"], first["id"])
        self.assertEqual(d.query("SELECT count(*) FROM runs")[0][0], 2)


class SlowSenders:
    """Connections to the TCP listener that send a request head one byte at a time and never end it."""

    HEAD = b"GET /healthz HTTP/1.1\r\nHost: basal\r\nX-Slow: " + b"a" * 100000

    def __init__(self, port, addresses):
        self.socks = []
        self.refused = 0
        for address in addresses:
            s = socket.socket()
            s.bind((address, 0))
            s.settimeout(2)  # a listener that stopped accepting leaves connect() waiting in the backlog
            try:
                s.connect(("127.0.0.1", port))
            except OSError:
                self.refused += 1
                s.close()
                continue
            s.setblocking(False)
            self.socks.append(s)
        self.sent = 0

    def trickle(self):
        """One more byte on each connection still open; returns how many are open."""
        open_ = 0
        for s in self.socks:
            if s.fileno() < 0:
                continue
            try:
                if s.recv(1, socket.MSG_PEEK) == b"":  # the server closed it
                    s.close()
                    continue
            except BlockingIOError:
                pass
            except OSError:
                s.close()
                continue
            try:
                s.send(self.HEAD[self.sent:self.sent + 1])
                open_ += 1
            except OSError:
                s.close()
        self.sent += 1
        return open_

    def close(self):
        for s in self.socks:
            s.close()


class SlowClientTest(unittest.TestCase):
    """Clients that send their request head slowly cannot hold the TCP listener (issue 25)."""

    def test_slow_senders_cannot_take_the_listener_from_an_honest_client(self):
        # A header_timeout far longer than the test: only the per-client cap and the reserve keep room.
        d = Daemon(self, tcp=True, config={"limits": {"max_connections": 64, "max_connections_per_client": 8,
                                                     "header_timeout": "10m"}}).start()
        # From one address: past max_connections_per_client, connections are closed at once.
        one = SlowSenders(d.port, ["127.0.0.2"] * 40)
        self.addCleanup(one.close)
        # (A connection the kernel has completed but the daemon not yet accepted looks open too.)
        wait_until(lambda: one.trickle() <= 8)
        # From many addresses (127.0.0.10 to 127.0.0.209): four times max_connections.
        many = SlowSenders(d.port, ["127.0.0.%d" % (10 + i % 200) for i in range(256)])
        self.addCleanup(many.close)
        self.assertEqual(many.refused, 0)  # the listener kept accepting
        wait_until(lambda: many.trickle() <= 64)
        # While they trickle, an honest client is answered, every time, within curl's 3 s.
        for _ in range(10):
            self.assertLessEqual(one.trickle(), 8)
            self.assertLessEqual(many.trickle(), 64)
            code, data, _ = d.curl("GET", "/healthz", tcp=True, check=False, timeout=3)
            self.assertEqual(code, 200, data)
        code, data, _ = d.curl("GET", "/readyz", tcp=True)
        self.assertEqual((code, data["status"]), (200, "ready"))

    def test_a_slow_head_is_closed_at_header_timeout(self):
        d = Daemon(self, tcp=True, config={"limits": {"header_timeout": "2s"}}).start()
        slow = SlowSenders(d.port, ["127.0.0.1"] * 10)
        self.addCleanup(slow.close)
        self.assertEqual(slow.trickle(), 10)
        started = time.time()
        while time.time() - started < 20 and slow.trickle() > 0:
            code, data, _ = d.curl("GET", "/healthz", tcp=True)
            self.assertEqual(code, 200, data)
            time.sleep(0.3)
        # Each was still sending, a byte at a time; none had finished its head within 2 s.
        self.assertEqual(slow.trickle(), 0)
        self.assertGreaterEqual(time.time() - started, 1.5)

    def test_a_slow_body_is_closed_at_body_timeout(self):
        d = Daemon(self, tcp=True, config={"limits": {"body_timeout": "2s"}}).start()
        token = d.cli("token", "create", "--name", "ci", "--scope", "run").stdout.strip()
        s = socket.create_connection(("127.0.0.1", d.port))
        self.addCleanup(s.close)
        s.sendall(b"POST /v1/flows/hello/runs HTTP/1.1\r\nHost: basal\r\nAuthorization: Bearer " + token.encode() +
                  b"\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"input\": ")
        s.settimeout(1)
        closed = False
        deadline = time.time() + 10
        while time.time() < deadline and not closed:
            try:
                s.send(b" ")
                closed = s.recv(4096, socket.MSG_PEEK) == b""
            except socket.timeout:
                pass
            except OSError:
                closed = True
        self.assertTrue(closed, "the slow body's connection is still open")
        self.assertEqual(d.query("SELECT count(*) FROM runs")[0][0], 0)
        code, data, _ = d.curl("POST", "/v1/flows/hello/runs?wait=30s", {"input": {"name": "quick"}}, tcp=True,
                               headers={"Authorization": "Bearer " + token})
        self.assertEqual((code, data["outcome"]), (200, "ok"), data)


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS for pid %d" % pid)


# Logs `count` lines of `size` bytes: a run with many, and large, host calls.
CHATTY = ("export default async (input) => { for (let i = 0; i < input.count; i++) "
          "console.log(String(i).padStart(8, '0') + 'x'.repeat(input.size)); return input.count; };\n")
CHATTY_MANIFEST = {"grants": {"log": {}}, "budgets": {"deadline_ms": 60000, "cpu_ms": 30000, "journal_kb": 65536,
                                                      "log_kb": 65536}}


class CallsPagingTest(unittest.TestCase):
    """GET /v1/runs/ID/calls is paged, and answers nobody reads are bounded (issue 25)."""

    def chatty_run(self, d, count, size):
        code, run, _ = d.curl("POST", "/v1/flows/chatty/runs?wait=60s", {"input": {"count": count, "size": size}})
        self.assertEqual((code, run["outcome"]), (200, "ok"), run)
        return run

    def test_pages_follow_the_next_cursor(self):
        d = Daemon(self, flows={})
        d.approve("chatty", CHATTY, CHATTY_MANIFEST)
        d.start()
        run = self.chatty_run(d, 250, 10)
        seen, after, pages = [], 0, 0
        while True:
            code, page, _ = d.curl("GET", "/v1/runs/%d/calls?after=%d" % (run["id"], after))
            self.assertEqual(code, 200, page)
            self.assertEqual((page["run_id"], page["activation_id"]), (run["id"], run["activation_id"]))
            self.assertLessEqual(len(page["calls"]), 100)  # the default limit
            seen += [c["call_id"] for c in page["calls"]]
            pages += 1
            if page["next"] is None:
                break
            self.assertEqual(page["next"], page["calls"][-1]["call_id"])
            after = page["next"]
        self.assertEqual(pages, 3)
        self.assertEqual(len(seen), 250)
        self.assertEqual(seen, sorted(set(seen)))  # in order, none twice
        code, page, _ = d.curl("GET", "/v1/runs/%d/calls?limit=7" % run["id"])
        self.assertEqual((len(page["calls"]), page["next"]), (7, seen[6]))
        code, page, _ = d.curl("GET", "/v1/runs/%d/calls?after=%d" % (run["id"], seen[-1]))
        self.assertEqual((page["calls"], page["next"]), ([], None))
        for query, error in (("limit=0", "bad_limit"), ("limit=1001", "bad_limit"), ("limit=x", "bad_limit"),
                             ("after=-1", "bad_after"), ("after=x", "bad_after")):
            code, data, _ = d.curl("GET", "/v1/runs/%d/calls?%s" % (run["id"], query))
            self.assertEqual((code, data["error"]["code"]), (400, error), data)
        # Large calls: a page stops at about 1 MiB, whatever the limit.
        big = self.chatty_run(d, 40, 60000)
        code, page, _ = d.curl("GET", "/v1/runs/%d/calls?limit=1000" % big["id"])
        self.assertEqual(code, 200)
        self.assertLess(len(json.dumps(page)), (1 << 20) + 200000)
        self.assertLess(len(page["calls"]), 40)
        self.assertIsNotNone(page["next"])

    def test_answers_nobody_reads_are_bounded(self):
        d = Daemon(self, flows={}, config={"limits": {"max_unsent_bytes": 4 << 20}})
        d.approve("chatty", CHATTY, CHATTY_MANIFEST)
        # In a sanitized build, ASan keeps freed memory in quarantine (256 MiB): none here, so that
        # RSS measures what the daemon holds. (A release build ignores the variable.)
        asan = os.environ.get("ASAN_OPTIONS", "")
        d.start(env={"ASAN_OPTIONS": (asan + ":" if asan else "") + "quarantine_size_mb=0"})
        run = self.chatty_run(d, 64, 60000)  # about 4 MB of calls
        url = "/v1/runs/%d/calls?limit=1000" % run["id"]
        code, page, _ = d.curl("GET", url)
        self.assertEqual(code, 200)
        before = rss_kib(d.proc.pid)
        # 40 clients ask for a page of the calls and never read the answer.
        quiet = []
        for _ in range(40):
            s = socket.socket(socket.AF_UNIX)
            s.connect(d.socket)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.sendall(("GET %s HTTP/1.1\r\nHost: basal\r\n\r\n" % url).encode())
            quiet.append(s)
            self.addCleanup(s.close)
        # Every one of them was answered or refused: the daemon still serves.
        wait_until(lambda: d.metric('basal_http_requests_total{listener="unix",route="/v1",code="503"}') >= 30)
        code, data, _ = d.curl("GET", "/healthz")
        self.assertEqual(code, 200)
        busy = d.metric('basal_http_requests_total{listener="unix",route="/v1",code="503"}')
        self.assertGreaterEqual(busy, 30)
        # What the daemon holds for them is bounded by max_unsent_bytes, not by 40 answers.
        grown_kib = rss_kib(d.proc.pid) - before
        self.assertLess(grown_kib, 24 << 10, "RSS grew by %d KiB" % grown_kib)
        # A refused client reads 503 with Retry-After; once the others are gone, it is served.
        for s in quiet:
            s.close()
        code, page, hdrs = d.curl("GET", url)
        self.assertEqual(code, 200, page)


# A codemode policy for /mcp: kv.get of one namespace, budgets roomy enough that a script looping for
# ever is ended by the test (its client leaving), not by a budget.
POLICY = {"grants": {"kv.get": {"namespaces": ["orders"]}}, "budgets": {"cpu_ms": 60000, "deadline_ms": 60000}}
LOOP = "for (;;) {}"
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}


def rpc(method, params=None, id=1):
    message = {"jsonrpc": "2.0", "method": method, "params": params or {}}
    if id is not None:
        message["id"] = id
    return message


INITIALIZE = rpc("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                "clientInfo": {"name": "serve-test", "version": "1"}})


class McpTest(unittest.TestCase):
    """MCP over Streamable HTTP at /mcp: codemode under the policy the config names."""

    def daemon(self, mcp=None, tcp=False, config=None, policy=POLICY):
        config = dict(config or {})
        config["mcp"] = dict(mcp or {"policy": "agents"})
        d = Daemon(self, config=config, tcp=tcp)
        if policy is not None:
            d.approve_policy("agents", policy)
        return d

    def post(self, d, message, version=None, **kw):
        headers = dict(kw.pop("headers", {}))
        if version:
            headers["MCP-Protocol-Version"] = version
        return d.curl("POST", "/mcp", message, headers=headers, **kw)

    def run_script(self, d, code, **kw):
        return self.post(d, rpc("tools/call", {"name": "run_script", "arguments": {"code": code}}, id=7),
                         version="2025-11-25", **kw)

    def wait_running(self, d, count):
        """Waits until `count` activations have started and not ended (/v1/journal lists them)."""
        deadline = time.time() + 60
        while time.time() < deadline:
            code, page, _ = d.curl("GET", "/v1/journal?after=0&limit=1000")
            running = [a for a in page["activations"] if a["outcome"] is None]
            if len(running) >= count:
                return running
            time.sleep(0.05)
        raise AssertionError("no %d scripts running: %s" % (count, d.stderr()))

    def test_initialize_then_run_script_over_the_socket(self):
        d = self.daemon()
        d.seed_kv({"o-1": {"qty": 3}})
        d.start()
        code, data, hdrs = self.post(d, INITIALIZE)
        self.assertEqual(code, 200, data)
        self.assertTrue(hdrs["content-type"].startswith("application/json"), hdrs)
        self.assertNotIn("mcp-session-id", hdrs)  # basal keeps no sessions
        self.assertEqual((data["id"], data["result"]["protocolVersion"]), (1, "2025-11-25"), data)
        self.assertIn("agents", data["result"]["instructions"])
        code, data, hdrs = self.post(d, rpc("notifications/initialized", id=None), version="2025-11-25")
        self.assertEqual((code, data), (202, None))
        code, data, hdrs = self.run_script(
            d, 'console.log("reading"); const o = await tools.kv.get({namespace: "orders", key: "o-1"}); return o.qty * 2;')
        self.assertEqual(code, 200, data)
        self.assertTrue(hdrs["content-type"].startswith("application/json"), hdrs)
        self.assertEqual(data["id"], 7)
        result = data["result"]
        sc = result["structuredContent"]
        self.assertEqual((sc["status"], sc["result"], result["isError"]), ("ok", 6, False), data)
        self.assertEqual(sc["logs"], ["reading"])
        self.assertEqual([(c["name"], c["decision"]) for c in sc["calls"]], [("kv.get", "allow")])
        self.assertIn("ok", result["content"][0]["text"])
        # A codemode activation in the store's journal, under the policy.
        # One id everywhere: the run_id is the run /v1/runs knows and `basal journal --run` shows.
        activation = json.loads(d.cli("journal", "--run", str(sc["run_id"]), "--json").stdout)
        self.assertEqual((activation["run"], activation["id"]), (sc["run_id"], sc["activation_id"]))
        self.assertEqual((activation["origin"], activation["outcome"]), ("codemode", "ok"), activation)
        code, run, _ = d.curl("GET", "/v1/runs/%d" % sc["run_id"])
        self.assertEqual((code, run["trigger"], run["flow"], run["activation_id"], run["outcome"]),
                         (200, "mcp", "run_script.js", sc["activation_id"], "ok"), run)
        d.wait_for_log("run %d ended: flow=run_script.js outcome=ok ms=" % sc["run_id"])
        self.assertEqual(activation["approval"]["name"], "agents")
        # A denied call fails the script, named so.
        code, data, _ = self.run_script(d, 'return await tools.kv.get({namespace: "users", key: "x"});')
        self.assertEqual(code, 200, data)
        self.assertEqual((data["result"]["structuredContent"]["status"], data["result"]["isError"]), ("denied", True))
        self.assertEqual(d.metric('basal_http_requests_total{listener="unix",route="/mcp",code="200"}'), 3)
        self.assertEqual(d.metric('basal_http_requests_total{listener="unix",route="/mcp",code="202"}'), 1)
        self.assertEqual(d.stop(), 0)

    def test_a_request_without_initialize_in_this_post_is_served_as_in_its_session(self):
        d = self.daemon().start()
        # The header names the session's revision: tools/list is served without a new initialize.
        code, data, _ = self.post(d, rpc("tools/list"), version="2025-06-18")
        self.assertEqual(code, 200, data)
        self.assertIn("run_script", [t["name"] for t in data["result"]["tools"]])
        # Without the header, the transport's default revision (2025-03-26) is assumed.
        code, data, _ = self.post(d, rpc("tools/list"))
        self.assertEqual(code, 200, data)
        self.assertIn("run_script", [t["name"] for t in data["result"]["tools"]])
        # A revision basal does not speak, in the header: 400 with MCP's -32022.
        code, data, _ = self.post(d, rpc("tools/list"), version="2024-01-01")
        self.assertEqual((code, data["error"]["code"]), (400, -32022), data)
        self.assertEqual(data["error"]["data"]["requested"], "2024-01-01")
        self.assertIn("2026-07-28", data["error"]["data"]["supported"])
        # Bytes that are not UTF-8 in the header are shown replaced, and the daemon serves on.
        code, data, _ = self.post(d, rpc("tools/list"), version="2025-\udcff\udcfe")
        self.assertEqual((code, data["error"]["code"]), (400, -32022), data)
        self.assertEqual(data["error"]["data"]["requested"], "2025-\ufffd\ufffd")
        code, data, _ = self.post(d, rpc("tools/list"), version="2025-11-25")
        self.assertEqual(code, 200, data)

    def test_stateless_requests_name_their_revision(self):
        d = self.daemon().start()
        for version in (None, "2026-07-28"):
            with self.subTest(header=version):
                code, data, _ = self.post(d, rpc("tools/list", {"_meta": META}, id="a"), version=version)
                self.assertEqual(code, 200, data)
                self.assertEqual(data["id"], "a")
                self.assertEqual(data["result"]["resultType"], "complete")
                self.assertEqual(sorted(t["name"] for t in data["result"]["tools"]),
                                 ["describe_tools", "list_tools", "run_script"])
        code, data, _ = self.post(d, rpc("server/discover", {"_meta": META}), version="2026-07-28")
        self.assertEqual(code, 200, data)
        self.assertIn("2026-07-28", data["result"]["supportedVersions"])
        code, data, _ = self.post(d, rpc("tools/call", {"_meta": META, "name": "run_script",
                                                        "arguments": {"code": "return [1, 2].length"}}))
        self.assertEqual((code, data["result"]["structuredContent"]["result"]), (200, 2), data)
        # A stateless revision basal does not speak: 400, with the error as the body.
        code, data, _ = self.post(d, rpc("tools/list", {"_meta": {"io.modelcontextprotocol/protocolVersion": "2099-01-01"}}))
        self.assertEqual((code, data["error"]["code"]), (400, -32022), data)
        self.assertEqual(data["error"]["data"]["requested"], "2099-01-01")

    def test_what_is_not_a_request(self):
        d = self.daemon(config={"limits": {"max_body_bytes": 4096}}).start()
        for method in ("GET", "DELETE"):
            code, data, hdrs = d.curl(method, "/mcp")
            self.assertEqual((code, hdrs.get("allow")), (405, "POST"), data)
            self.assertIn("POST", data["error"]["message"])
        code, data, _ = self.post(d, rpc("notifications/cancelled", {"requestId": 3}, id=None))
        self.assertEqual((code, data), (202, None))
        code, data, _ = self.post(d, {"jsonrpc": "2.0", "id": 9, "result": {}})  # a client's response
        self.assertEqual((code, data), (202, None))
        code, data, _ = self.post(d, "{not json")
        self.assertEqual((code, data["error"]["code"], data["id"]), (400, -32700, None), data)
        code, data, _ = self.post(d, [INITIALIZE])  # batches are gone from MCP
        self.assertEqual((code, data["error"]["code"]), (400, -32600), data)
        code, data, _ = d.curl("POST", "/mcp", json.dumps(INITIALIZE), headers={"Content-Type": "text/plain"})
        self.assertEqual((code, data["error"]["code"]), (415, "unsupported_media_type"), data)
        code, data, _ = self.post(d, INITIALIZE, headers={"Accept": "text/html"})
        self.assertEqual((code, data["error"]["code"]), (406, "not_acceptable"), data)
        # The body bound is limits.max_body_bytes.
        code, data, _ = self.run_script(d, "return '" + "x" * 5000 + "'")
        self.assertEqual((code, data["error"]["code"]), (413, "body_too_large"), data)
        code, data, _ = self.post(d, rpc("no/such/method"), version="2025-11-25")
        self.assertEqual((code, data["error"]["code"]), (200, -32601), data)

    def test_without_an_mcp_config_it_is_404_saying_how_to_enable_it(self):
        d = Daemon(self).start()
        code, data, _ = d.curl("POST", "/mcp", INITIALIZE)
        self.assertEqual((code, data["error"]["code"]), (404, "mcp_not_enabled"), data)
        self.assertIn('"mcp": {"policy": "NAME"}', data["error"]["message"])

    def test_tcp_needs_a_token_with_scope_run(self):
        d = self.daemon(tcp=True)
        run = d.cli("token", "create", "--name", "agent", "--scope", "run").stdout.strip()
        read = d.cli("token", "create", "--name", "reader", "--scope", "read").stdout.strip()
        d.start()
        code, data, hdrs = self.post(d, INITIALIZE, tcp=True)
        # A clear error an MCP client can show: which token, and that there is no OAuth server to find.
        self.assertEqual((code, hdrs.get("www-authenticate")), (401, 'Bearer realm="basal", scope="run"'), data)
        self.assertIn("basal has no OAuth authorization server", data["error"]["message"])
        code, data, _ = self.post(d, INITIALIZE, tcp=True, headers={"Authorization": "Bearer " + read})
        self.assertEqual(code, 403, data)
        self.assertIn('"run"', data["error"]["message"])
        code, data, _ = d.curl("GET", "/mcp", tcp=True, headers={"Authorization": "Bearer " + read})
        self.assertEqual(code, 403, data)
        code, data, _ = self.post(d, INITIALIZE, tcp=True, headers={"Authorization": "Bearer " + run})
        self.assertEqual((code, data["result"]["protocolVersion"]), (200, "2025-11-25"), data)
        code, data, _ = self.run_script(d, "return 40 + 2", tcp=True, headers={"Authorization": "Bearer " + run})
        self.assertEqual((code, data["result"]["structuredContent"]["result"]), (200, 42), data)
        self.assertEqual(d.metric('basal_http_requests_total{listener="tcp",route="/mcp",code="401"}'), 1)

    def test_an_origin_other_than_this_machine_is_refused(self):
        d = self.daemon().start()
        for origin in ("http://evil.example", "https://localhost.evil.example", "http://127.0.0.1.evil.example:80",
                       "null", "http://localhost/x", "ftp://localhost"):
            with self.subTest(origin=origin):
                code, data, _ = self.post(d, INITIALIZE, headers={"Origin": origin})
                self.assertEqual((code, data["error"]["code"]), (403, "forbidden_origin"), data)
        for origin in ("http://localhost", "http://localhost:5173", "https://127.0.0.1:8443", "http://[::1]:3000"):
            with self.subTest(origin=origin):
                code, data, _ = self.post(d, INITIALIZE, headers={"Origin": origin})
                self.assertEqual(code, 200, data)

    def test_a_client_that_leaves_cancels_its_script(self):
        d = self.daemon().start()
        code, _, _ = self.run_script(d, LOOP, check=False, timeout=1)  # curl gives up after a second
        self.assertEqual(code, 0)
        deadline = time.time() + 60
        while time.time() < deadline:
            _, page, _ = d.curl("GET", "/v1/journal?after=0")
            ended = [a for a in page["activations"] if a["outcome"] is not None]
            if ended:
                break
            time.sleep(0.05)
        self.assertEqual([a["outcome"] for a in ended], ["cancelled"], page)
        self.assertEqual(d.metric('basal_http_requests_total{listener="unix",route="/mcp",code="499"}'), 1)
        code, data, _ = self.run_script(d, "return 'next'")
        self.assertEqual((code, data["result"]["structuredContent"]["result"]), (200, "next"), data)

    def test_max_scripts_bounds_the_scripts_running_at_once(self):
        d = self.daemon(mcp={"policy": "agents", "max_scripts": 1}, config={"limits": {"drain_timeout": "0s"}}).start()
        first = {}
        t = threading.Thread(target=lambda: first.setdefault("r", self.run_script(d, LOOP, check=False, timeout=60)))
        t.start()
        self.wait_running(d, 1)
        code, health, _ = d.curl("GET", "/v1/health")
        self.assertEqual(health["serve"]["mcp"], {"policy": "agents", "scripts_running": 1, "max_scripts": 1}, health)
        code, data, _ = self.run_script(d, "return 1")
        self.assertEqual(code, 200, data)
        result = data["result"]
        self.assertEqual((result["isError"], result["structuredContent"]["status"]), (True, "busy"), data)
        self.assertIn("wait for one to finish", json.dumps(result))
        # SIGTERM with a 0s drain: the running script is cancelled and its client answered.
        self.assertEqual(d.stop(), 0)
        t.join(timeout=60)
        code, data, _ = first["r"]
        self.assertEqual((code, data["result"]["structuredContent"]["status"]), (200, "cancelled"), data)

    def test_a_policy_that_is_not_approved_refuses_the_start(self):
        d = self.daemon(mcp={"policy": "nobody"})
        with self.assertRaises(AssertionError) as e:
            d.start()
        self.assertEqual(d.proc.returncode, 3)
        self.assertIn("mcp.policy nobody", str(e.exception))
        self.assertIn("basal policy approve nobody", str(e.exception))
        d.cli("policy", "revoke", "agents", "--note", "test")
        d2 = self.daemon(policy=None)
        d2.db = d.db
        with self.assertRaises(AssertionError) as e:
            d2.start()
        self.assertEqual(d2.proc.returncode, 3)
        self.assertIn("mcp.policy agents", str(e.exception))
        self.assertIn("revoked", str(e.exception))

    def test_sighup_refuses_a_changed_mcp_section_and_reloads_the_same_one(self):
        d = self.daemon(config={"limits": {"max_body_bytes": 4096}}).start()
        d.config["mcp"] = {"policy": "agents", "max_scripts": 2}
        d.write_config()
        d.proc.send_signal(signal.SIGHUP)
        d.wait_for_log("the config was not reloaded")
        self.assertIn("restart basal serve to change mcp", d.stderr())
        del d.config["mcp"]
        d.write_config()
        d.proc.send_signal(signal.SIGHUP)
        d.wait_for_log("the config was not reloaded", count=2)
        code, data, _ = self.run_script(d, "return 'still served'")
        self.assertEqual((code, data["result"]["structuredContent"]["result"]), (200, "still served"), data)
        d.config["mcp"] = {"policy": "agents"}
        d.config["limits"]["max_body_bytes"] = 8192
        d.write_config()
        d.proc.send_signal(signal.SIGHUP)
        d.wait_for_log("SIGHUP: reloaded")
        code, data, _ = self.run_script(d, "return '" + "x" * 5000 + "'")
        self.assertEqual((code, data["result"]["structuredContent"]["status"]), (200, "ok"), data)


def main():
    global BIN
    p = argparse.ArgumentParser()
    p.add_argument("--bin-dir", required=True)
    args, rest = p.parse_known_args()
    BIN = args.bin_dir
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
