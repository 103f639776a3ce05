#!/usr/bin/env python3
"""basal serve, end to end: a real daemon, talked to with a real HTTP client (curl) over its Unix
socket and its loopback TCP listener. Run by ctest: serve_test.py --bin-dir DIR."""
import argparse
import hashlib
import hmac
import json
import os
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
                           capture_output=True, text=True, timeout=60)
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

    def start(self, env=None):
        args = [os.path.join(BIN, "basal"), "serve", "--socket", self.socket, "--db", self.db]
        if self.config:
            path = os.path.join(self.dir, "serve.json")
            with open(path, "w") as f:
                json.dump(self.config, f)
            args += ["--config", path]
        self.stderr_path = os.path.join(self.dir, "stderr.txt")
        self.proc = subprocess.Popen(args, stderr=open(self.stderr_path, "w"), stdout=subprocess.DEVNULL,
                                     env=dict(os.environ, **(env or {})))
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
        # 409: a revoked flow does not run.
        d.cli("flow", "revoke", "hello", "--yes", check=False)
        r = d.cli("flow", "revoke", "hello", "--version", "1", "--note", "test", check=False)
        got, data, _ = d.curl("POST", "/v1/flows/hello/runs", {"input": 1})
        self.assertEqual(got, 409, (data, r.stderr))
        self.assertEqual(data["error"]["code"], "flow_revoked")

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
        self.assertNotIn(token_run, open(d.db, "rb").read().decode("latin-1"))
        d.start()
        code, data, hdrs = d.curl("POST", "/v1/flows/hello/runs?wait=30s", {"input": 1}, tcp=True)
        self.assertEqual(code, 401)
        self.assertEqual(hdrs.get("www-authenticate"), "Bearer")
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
        self.assertEqual(d.proc.wait(timeout=30), 0)
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
        self.assertEqual(samples['basal_http_requests_total{listener="unix",code="200"}'], 3 + 2)  # runs, healthz at start, readyz
        self.assertEqual(samples['basal_http_requests_total{listener="unix",code="404"}'], 1)
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


def main():
    global BIN
    p = argparse.ArgumentParser()
    p.add_argument("--bin-dir", required=True)
    args, rest = p.parse_known_args()
    BIN = args.bin_dir
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
