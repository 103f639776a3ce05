#!/usr/bin/env python3
"""Durable runs end to end (docs/durable.md): a real basal serve killed with SIGKILL while a run
waits in a host call, started again, and the run resumed from its journal: nothing done twice,
nothing lost, every decision recorded. Run by ctest: durable_test.py --bin-dir DIR.

The moment of the kill is chosen, not guessed: the flow's run waits in an HTTP request to a server
of this test that holds it until the test lets it go, so the daemon dies with that call in flight."""
import argparse
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
import unittest

import serve_test
from serve_test import Daemon


class HoldServer:
    """An HTTP server that answers each request only once the test releases it (or at once for
    paths under /now/), and remembers every request: method, path, Idempotency-Key."""

    def __init__(self, test):
        self.requests = []
        self.lock = threading.Lock()
        self.released = threading.Event()
        self.arrived = threading.Condition(self.lock)
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def handle_one(self):
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                with server.lock:
                    server.requests.append({"method": self.command, "path": self.path,
                                            "key": self.headers.get("Idempotency-Key"), "body": body.decode()})
                    server.arrived.notify_all()
                if not self.path.startswith("/now/"):
                    server.released.wait(60)
                reply = json.dumps({"path": self.path, "seen": len(server.requests)}).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(reply)))
                    self.end_headers()
                    self.wfile.write(reply)
                except OSError:
                    pass  # the daemon that asked is gone

            def do_GET(self):
                self.handle_one()

            def do_POST(self):
                self.handle_one()

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        test.addCleanup(self.close)

    def close(self):
        self.released.set()
        self.httpd.shutdown()

    def wait_for(self, count, timeout=30):
        """Waits until `count` requests have arrived."""
        deadline = time.time() + timeout
        with self.lock:
            while len(self.requests) < count:
                left = deadline - time.time()
                if left <= 0:
                    raise AssertionError("only %d of %d requests arrived" % (len(self.requests), count))
                self.arrived.wait(left)
            return list(self.requests)

    def rule(self, **extra):
        r = {"url": "http://127.0.0.1:%d/" % self.port, "methods": ["GET", "POST"],
             "allow_networks": ["127.0.0.0/8"], "allow_plain_http": True}
        r.update(extra)
        return r


def durable_manifest(server, kv=("c",), rule_extra=None):
    return {"durable": True,
            "grants": {"kv.incr": {"namespaces": list(kv)}, "kv.put": {"namespaces": list(kv)},
                       "kv.get": {"namespaces": list(kv)},
                       "http.fetch": {"rules": [server.rule(**(rule_extra or {}))]}},
            "budgets": {"deadline_ms": 60000, "cpu_ms": 10000}}


# Ten increments, a request the test holds after the fifth, and what the counter says at the end.
COUNTER = """export default async (input, host) => {
  const base = "http://127.0.0.1:" + input.port;
  for (let i = 0; i < 5; i++) await host.call("kv.incr", {namespace: "c", key: "n"});
  await fetch(base + "/hold/" + input.tag);
  for (let i = 0; i < 5; i++) await host.call("kv.incr", {namespace: "c", key: "n"});
  return await host.call("kv.get", {namespace: "c", key: "n"});
};
"""

# Every value a script could see differently on a second execution, stored before the held request
# (a kv.put whose arguments would differ if any value did: a replay would then diverge).
CLOCKS = """export default async (input, host) => {
  const seen = {now: Date.now(), date: new Date().toISOString(), perf: performance.now(),
                random: [Math.random(), Math.random()], uuid: crypto.randomUUID(),
                bytes: Array.from(crypto.getRandomValues(new Uint8Array(8)))};
  await host.call("kv.put", {namespace: "c", key: "seen", value: seen});
  await fetch("http://127.0.0.1:" + input.port + "/hold/clocks");
  const after = {now: Date.now(), random: Math.random()};
  return {seen, after};
};
"""

# An external effect: a POST without an idempotency key (the rule names none).
PAYMENT = """export default async (input, host) => {
  const r = await fetch("http://127.0.0.1:" + input.port + "/charge", {method: "POST", body: JSON.stringify(input)});
  const answer = await r.json();
  await host.call("kv.put", {namespace: "c", key: "charged", value: answer});
  return {charged: answer};
};
"""


def kill_while_held(test, d, server, count):
    """Kills the daemon with SIGKILL once `count` requests reached the server (the last one held)."""
    server.wait_for(count)
    d.stop(signal.SIGKILL)


class DurableRunTest(unittest.TestCase):
    def daemon(self, flows, manifest):
        d = Daemon(self, flows={})
        for name, source in flows.items():
            d.approve(name, source, manifest)
        return d

    def start_run(self, d, flow, input):
        code, run, _ = d.curl("POST", "/v1/flows/%s/runs" % flow, {"input": input})
        self.assertEqual(code, 202, run)
        return run["id"]

    def wait_run(self, d, run_id, timeout=60):
        code, run, _ = d.curl("GET", "/v1/runs/%d?wait=%ds" % (run_id, timeout), timeout=timeout + 5)
        self.assertIn(code, (200, 202), run)
        return run

    def test_a_kv_incr_sequence_resumes_and_the_counter_ends_exactly_right(self):
        server = HoldServer(self)
        d = self.daemon({"counter": COUNTER}, durable_manifest(server)).start()
        run_id = self.start_run(d, "counter", {"port": server.port, "tag": "a"})
        kill_while_held(self, d, server, 1)
        # The parent died between the fifth and sixth increment: five are committed with their answers.
        self.assertEqual(d.query("SELECT value FROM kv WHERE namespace='c' AND key='n'"), [("5",)])
        self.assertEqual(d.query("SELECT state FROM runs WHERE id=?", run_id), [("running",)])
        server.released.set()
        d.start()
        run = self.wait_run(d, run_id)
        self.assertEqual((run["state"], run["outcome"]), ("ended", "ok"), run)
        self.assertEqual(run["result"], 10, "each increment happened once: none replayed twice, none lost")
        self.assertEqual(run["resumes"], 1)
        self.assertIn("durable runs of a previous daemon resume", d.stderr())
        # The record: the first activation's five increments and its request (unknown: the parent died
        # with it in flight); the resumed activation re-ran only the idempotent request, then went on.
        code, calls, _ = d.curl("GET", "/v1/runs/%d/calls" % run_id)
        self.assertEqual(code, 200, calls)
        activations = sorted({c["activation_id"] for c in calls["calls"]})
        self.assertEqual(len(activations), 2)
        first = [c for c in calls["calls"] if c["activation_id"] == activations[0]]
        second = [c for c in calls["calls"] if c["activation_id"] == activations[1]]
        self.assertEqual([c["name"] for c in first], ["kv.incr"] * 5 + ["http.fetch"])
        self.assertEqual(first[-1]["state"], "unknown")
        self.assertEqual([c["call_id"] for c in second], [6, 7, 8, 9, 10, 11, 12])
        self.assertEqual([c["name"] for c in second], ["http.fetch"] + ["kv.incr"] * 5 + ["kv.get"])
        # The held request was sent twice (GET is idempotent) with the same key: the run's, not the activation's.
        self.assertEqual(len(server.requests), 2)
        keys = [r["key"] for r in server.requests]
        self.assertEqual(keys[0], keys[1])
        self.assertEqual(d.stop(), 0)

    def test_kills_at_random_moments_never_repeat_an_increment(self):
        # No held request: the daemon is killed wherever it happens to be, three times.
        source = """export default async (input, host) => {
  for (let i = 0; i < 300; i++) await host.call("kv.incr", {namespace: "c", key: "n"});
  return await host.call("kv.get", {namespace: "c", key: "n"});
};
"""
        manifest = {"durable": True, "grants": {"kv.incr": {"namespaces": ["c"]}, "kv.get": {"namespaces": ["c"]}},
                    "budgets": {"deadline_ms": 60000, "journal_kb": 8192}}
        d = Daemon(self, flows={})
        d.approve("many", source, manifest)
        d.start()
        run_id = self.start_run(d, "many", None)
        for delay in (0.05, 0.12, 0.08):
            time.sleep(delay)
            d.stop(signal.SIGKILL)
            d.start()
        run = self.wait_run(d, run_id)
        self.assertEqual((run["state"], run["outcome"]), ("ended", "ok"), run)
        self.assertEqual(run["result"], 300)
        self.assertEqual(d.query("SELECT value FROM kv WHERE namespace='c' AND key='n'"), [("300",)])
        self.assertEqual(d.stop(), 0)

    def test_an_idempotent_call_in_flight_is_repeated_with_the_same_key(self):
        server = HoldServer(self)
        source = """export default async (input, host) => {
  const r = await fetch("http://127.0.0.1:" + input.port + "/orders", {method: "POST", body: "{\\"sku\\": 7}"});
  return await r.json();
};
"""
        d = self.daemon({"order": source}, durable_manifest(server, rule_extra={"idempotency_key": "Idempotency-Key"}))
        d.start()
        run_id = self.start_run(d, "order", {"port": server.port})
        kill_while_held(self, d, server, 1)
        server.released.set()
        d.start()
        run = self.wait_run(d, run_id)
        self.assertEqual((run["state"], run["outcome"]), ("ended", "ok"), run)
        posts = [r for r in server.requests if r["path"] == "/orders"]
        self.assertEqual(len(posts), 2, "the request in doubt was sent again")
        self.assertTrue(posts[0]["key"])
        self.assertEqual(posts[0]["key"], posts[1]["key"], "with the same idempotency key: the server can drop it")
        self.assertTrue(posts[0]["key"].endswith(":run:%d:1" % run_id), posts[0]["key"])
        # What a server that honours the key does: one effect per key.
        self.assertEqual(len({p["key"] for p in posts}), 1)
        self.assertEqual(d.stop(), 0)

    def test_an_external_call_in_flight_waits_for_the_operator(self):
        server = HoldServer(self)
        d = self.daemon({"pay": PAYMENT}, durable_manifest(server)).start()
        run_id = self.start_run(d, "pay", {"port": server.port, "amount": 12})
        kill_while_held(self, d, server, 1)
        d.start()
        # Nothing external is executed twice without an operator saying so.
        run = self.wait_run(d, run_id, timeout=2)
        self.assertEqual(run["state"], "needs_reconciliation", run)
        in_doubt = run["detail"]["in_doubt"]
        self.assertEqual([(c["call"], c["name"], c["effect"]) for c in in_doubt], [(1, "http.fetch", "external")])
        self.assertEqual(in_doubt[0]["args"]["url"], "http://127.0.0.1:%d/charge" % server.port)
        self.assertIn("basal run resolve %d" % run_id, run["detail"]["message"])
        time.sleep(1.5)  # the daemon's scan of interrupted runs must not touch it either
        self.assertEqual(len(server.requests), 1, "the charge was not sent again")
        # A call that is not in doubt cannot be resolved; a bad body is refused.
        code, err, _ = d.curl("POST", "/v1/runs/%d/resolve" % run_id, {"call": 2, "retry": True})
        self.assertEqual((code, err["error"]["code"]), (409, "not_in_doubt"), err)
        code, err, _ = d.curl("POST", "/v1/runs/%d/resolve" % run_id, {"call": 1})
        self.assertEqual(code, 400, err)
        # The operator checked the payment provider: it charged. The answer the flow gets is theirs.
        answer = {"status": 200, "status_text": "OK", "url": "http://127.0.0.1:%d/charge" % server.port,
                  "redirected": False, "headers": [["content-type", "application/json"]],
                  "body_base64": "eyJvayI6dHJ1ZX0=", "basal": {"hops": []}}
        code, resolved, _ = d.curl("POST", "/v1/runs/%d/resolve" % run_id,
                                   {"call": 1, "result": answer, "note": "seen at the provider"})
        self.assertEqual(code, 202, resolved)
        run = self.wait_run(d, run_id)
        self.assertEqual((run["state"], run["outcome"]), ("ended", "ok"), run)
        self.assertEqual(run["result"], {"charged": {"ok": True}})
        self.assertEqual(len(server.requests), 1, "resolving with a result sends nothing")
        # The decision is journaled with who made it.
        rows = d.query("SELECT call_id, kind, actor_name, note FROM call_resolutions WHERE run_id=?", run_id)
        self.assertEqual(len(rows), 1)
        self.assertEqual(rows[0][0:2], (1, "result"))
        self.assertTrue(rows[0][2])
        self.assertEqual(rows[0][3], "seen at the provider")
        self.assertEqual(d.stop(), 0)

    def test_the_cli_resolves_and_the_daemon_resumes(self):
        server = HoldServer(self)
        d = self.daemon({"pay": PAYMENT}, durable_manifest(server)).start()
        run_id = self.start_run(d, "pay", {"port": server.port})
        kill_while_held(self, d, server, 1)
        server.released.set()
        d.start()
        self.assertEqual(self.wait_run(d, run_id, timeout=2)["state"], "needs_reconciliation")
        # --retry: the operator knows it did not happen. The daemon resumes it within a second.
        r = d.cli("run", "resolve", str(run_id), "--call", "1", "--retry", "--note", "not at the provider")
        self.assertIn("basal serve", r.stderr)
        run = self.wait_run(d, run_id)
        self.assertEqual((run["state"], run["outcome"]), ("ended", "ok"), run)
        self.assertEqual(len(server.requests), 2, "retried once, as the operator said")
        self.assertEqual(d.stop(), 0)

    def test_clocks_and_randomness_are_the_same_on_resume(self):
        server = HoldServer(self)
        d = self.daemon({"clocks": CLOCKS}, durable_manifest(server)).start()
        run_id = self.start_run(d, "clocks", {"port": server.port})
        kill_while_held(self, d, server, 1)
        stored = json.loads(d.query("SELECT value FROM kv WHERE namespace='c' AND key='seen'")[0][0])
        server.released.set()
        d.start()
        run = self.wait_run(d, run_id)
        # The replayed kv.put had the same arguments (else the run would have diverged), and the
        # script's values are those of the first execution.
        self.assertEqual((run["state"], run["outcome"]), ("ended", "ok"), run)
        self.assertEqual(run["result"]["seen"], stored)
        seen = run["result"]["seen"]
        self.assertNotEqual(seen["random"][0], seen["random"][1])
        self.assertGreaterEqual(run["result"]["after"]["now"], seen["now"])
        self.assertEqual(d.stop(), 0)

    def test_a_resume_under_an_edited_flow_diverges_and_says_where(self):
        server = HoldServer(self)
        manifest = durable_manifest(server)
        d = self.daemon({"counter": COUNTER}, manifest).start()
        run_id = self.start_run(d, "counter", {"port": server.port, "tag": "b"})
        kill_while_held(self, d, server, 1)
        # Version 2 increments another key; version 1 is revoked, so the run cannot resume as it was.
        d.approve("counter", COUNTER.replace('key: "n"', 'key: "m"'), manifest)
        d.cli("flow", "revoke", "counter", "--version", "1")
        server.released.set()
        d.start()
        d.wait_for_log("run %d cannot resume" % run_id)
        code, run, _ = d.curl("GET", "/v1/runs/%d" % run_id)
        self.assertEqual(run["state"], "interrupted", run)
        # The operator asks for the newest version: the replay finds the first call that differs.
        code, resumed, _ = d.curl("POST", "/v1/runs/%d/resume" % run_id, {"newest_version": True})
        self.assertEqual(code, 202, resumed)
        run = self.wait_run(d, run_id)
        self.assertEqual((run["state"], run["outcome"]), ("ended", "diverged"), run)
        message = run["error"]["message"]
        self.assertIn("call 1", message)
        self.assertIn("kv.incr", message)
        self.assertIn("sha256:", message)
        # Nothing of version 2 ran: the key it would increment was never written.
        self.assertEqual(d.query("SELECT count(*) FROM kv WHERE key='m'"), [(0,)])
        self.assertEqual(d.stop(), 0)

    def test_basal_replay_checks_a_clean_and_a_broken_version(self):
        server = HoldServer(self)
        source = COUNTER.replace('fetch(base + "/hold/" + input.tag)', 'fetch(base + "/now/" + input.tag)')
        d = self.daemon({"counter": source}, durable_manifest(server)).start()
        run_ids = [self.start_run(d, "counter", {"port": server.port, "tag": str(i)}) for i in range(3)]
        for run_id in run_ids:
            self.assertEqual(self.wait_run(d, run_id)["outcome"], "ok")
        self.assertEqual(d.stop(), 0)
        requests_before = len(server.requests)
        kv_before = d.query("SELECT value FROM kv WHERE key='n'")
        r = d.cli("replay", str(run_ids[0]))
        self.assertIn("replays cleanly", r.stdout)
        broken = os.path.join(d.dir, "broken.js")
        with open(broken, "w") as f:
            f.write(source.replace("i < 5; i++) await host.call(\"kv.incr\"", "i < 4; i++) await host.call(\"kv.incr\"", 1))
        man = os.path.join(d.dir, "counter.manifest.json")
        r = d.cli("replay", str(run_ids[1]), "--flow", broken, "--manifest", man, check=False)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("diverged", r.stdout)
        self.assertIn("call 5", r.stdout)
        # The last runs against an approved version: the check before approving a change.
        r = d.cli("flow", "approve", "counter", broken, "--manifest", man, "--yes", "--replay", "3")
        self.assertIn("0 of 3 run(s) replay cleanly", r.stdout)
        self.assertIn("3 run(s) diverge", r.stdout)
        r = d.cli("replay", "--flow", "counter", "--version", "1", "--last", "3")
        self.assertIn("3 of 3 run(s) replay cleanly", r.stdout)
        r = d.cli("replay", "--flow", "counter", "--version", "2", "--last", "3", check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("0 of 3 run(s) replay cleanly", r.stdout)
        # A replay calls nothing and writes nothing.
        self.assertEqual(len(server.requests), requests_before)
        self.assertEqual(d.query("SELECT value FROM kv WHERE key='n'"), kv_before)

    def test_a_run_resumed_too_often_ends_resume_exhausted(self):
        server = HoldServer(self)
        d = self.daemon({"counter": COUNTER}, durable_manifest(server)).start()
        run_id = self.start_run(d, "counter", {"port": server.port, "tag": "c"})
        for i in range(11):  # the first execution and ten resumes, each killed in the held request
            kill_while_held(self, d, server, i + 1)
            d.start()
        run = self.wait_run(d, run_id, timeout=5)
        self.assertEqual((run["state"], run["outcome"]), ("ended", "resume_exhausted"), run)
        self.assertEqual(run["resumes"], 10)
        self.assertIn("resumed 10 times", run["error"]["message"])
        self.assertEqual(len(server.requests), 11, "no twelfth execution")
        self.assertEqual(d.query("SELECT value FROM kv WHERE key='n'"), [("5",)], "the increments happened once")
        self.assertEqual(d.stop(), 0)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin-dir", required=True)
    args, rest = p.parse_known_args()
    serve_test.BIN = args.bin_dir
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
