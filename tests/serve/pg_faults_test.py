#!/usr/bin/env python3
"""basal serve when its PostgreSQL fails under it (docs/postgres.md, "Faults"): the server stopped
and started again with runs in flight and more arriving, the daemon's connection killed with
pg_terminate_backend, and the cluster's disk full. Each with a private cluster
(tests/support/pg_cluster.py) and a real daemon; the runs' external effect is a POST to an HTTP
server of this test that counts them, so "nothing runs twice" is counted, not assumed.

What every fault must leave true (the promises of docs/postgres.md):
- every request is answered 202 (the run is in the database) or 5xx with an error code, never a
  success for a run that was not committed;
- every run answered 202 ends (or stops for an operator, needs_reconciliation), in the database,
  without a restart of the daemon;
- no run's effect happens twice, and a run that was refused had no effect;
- /readyz is 503 with the reason while the store fails, 200 again after, by itself.

Run by ctest: pg_faults_test.py --bin-dir DIR."""
import argparse
import http.server
import json
import os
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import pg_cluster  # noqa: E402
import serve_test  # noqa: E402

CLUSTER = None

# One external effect per run (a POST without an idempotency key: in doubt if it was in flight),
# then journaled calls after it, so a commit can fail before or after the effect.
EFFECT = """export default async (input, host) => {
  const r = await fetch("http://127.0.0.1:" + input.port + "/effect/" + input.tag, {method: "POST", body: "x"});
  await r.text();
  await host.call("kv.incr", {namespace: "c", key: "n"});
  await host.call("kv.put", {namespace: "c", key: "last", value: input.tag});
  return {tag: input.tag};
};
"""


class CountServer:
    """Counts POSTs by path; answers each after a short pause so that runs are in flight."""

    def __init__(self, test, pause=0.02):
        self.counts = {}
        self.lock = threading.Lock()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def do_POST(self):
                length = int(self.headers.get("content-length") or 0)
                if length:
                    self.rfile.read(length)
                with server.lock:
                    server.counts[self.path] = server.counts.get(self.path, 0) + 1
                time.sleep(pause)
                reply = b'{"ok":true}'
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(reply)))
                    self.end_headers()
                    self.wfile.write(reply)
                except OSError:
                    pass

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        test.addCleanup(self.httpd.shutdown)

    def count(self, tag):
        with self.lock:
            return self.counts.get("/effect/" + tag, 0)


def new_database(cluster, name, tablespace=None):
    cluster.psql("CREATE DATABASE %s OWNER basal%s" % (name, " TABLESPACE " + tablespace if tablespace else ""),
                 database="postgres", user="postgres")
    return cluster.locator(database=name)


def daemon_on(test, cluster, name, tablespace=None):
    """A daemon whose store is a new database `name` of `cluster`, with the EFFECT flow approved."""
    def store(d):
        d.db = new_database(cluster, name, tablespace)
        d.env = {"XDG_STATE_HOME": os.path.join(d.dir, "state")}

        def query(sql):
            return cluster.psql("SET search_path = basal", sql, database=name)
        d.query = query

    serve_test.STORE = store
    try:
        d = serve_test.Daemon(test, flows={}, config={"limits": {"max_workers": 4}})
    finally:
        serve_test.STORE = None
    manifest = {"durable": True,
                "grants": {"kv.incr": {"namespaces": ["c"]}, "kv.put": {"namespaces": ["c"]},
                           "http.fetch": {"rules": [{"url": "http://127.0.0.1:%d/" % test.server.port,
                                                     "methods": ["POST"], "allow_networks": ["127.0.0.0/8"],
                                                     "allow_plain_http": True}]}},
                "budgets": {"deadline_ms": 60000, "cpu_ms": 10000}}
    d.approve("effect", EFFECT, manifest)
    return d


class Clients:
    """Threads that start runs one after another until stopped; every answer is kept."""

    def __init__(self, test, d, threads=3):
        self.test, self.d = test, d
        self.answers = []  # (tag, code, body)
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.next = [0]
        self.threads = [threading.Thread(target=self.loop, daemon=True) for _ in range(threads)]

    def one(self):
        with self.lock:
            self.next[0] += 1
            tag = "t%d" % self.next[0]
        code, body, _ = self.d.curl("POST", "/v1/flows/effect/runs",
                                    {"input": {"port": self.test.server.port, "tag": tag}}, check=False, timeout=30)
        with self.lock:
            self.answers.append((tag, code, body))
        return tag, code, body

    def loop(self):
        while not self.stop.is_set():
            self.one()
            time.sleep(0.01)

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(60)

    def count(self):
        with self.lock:
            return len(self.answers)


class FaultTest(unittest.TestCase):
    def setUp(self):
        self.server = CountServer(self)

    def check_promises(self, d, answers):
        """Every answer is 202 or 5xx with a code; every 202 run ends once; a refused run had no effect."""
        accepted = []
        for tag, code, body in answers:
            if code == 202:
                accepted.append((tag, body["id"]))
                continue
            self.assertTrue(500 <= code < 600, "run %s answered %s: %s" % (tag, code, body))
            self.assertIsInstance(body, dict, body)
            self.assertTrue(body.get("error", {}).get("code"), body)
            self.assertIn("store", body["error"].get("message", ""), body)
            self.assertEqual(self.server.count(tag), 0, "run %s was refused (%s) but its effect happened" % (tag, body))
        self.assertTrue(accepted, "no run was accepted at all")
        states = {}
        for tag, run_id in accepted:
            code, run, _ = d.curl("GET", "/v1/runs/%d?wait=30s" % run_id, timeout=40)
            if code != 200:
                said = [line for line in d.stderr().splitlines() if "run %d " % run_id in line]
                self.fail("run %d (%s) did not end: %s; the daemon said of it: %s" % (run_id, tag, run, said))
            self.assertIn(run["state"], ("ended", "needs_reconciliation"), run)
            effects = self.server.count(tag)
            self.assertLessEqual(effects, 1, "run %d's effect happened %d times" % (run_id, effects))
            if run["state"] == "ended" and run["outcome"] == "ok":
                self.assertEqual(effects, 1, run)
                self.assertEqual(run["result"], {"tag": tag}, run)
            states[run["state"] + ":" + str(run.get("outcome"))] = states.get(run["state"] + ":" + str(run.get("outcome")), 0) + 1
        # The database agrees: nothing of theirs is left running or queued.
        left = d.query("SELECT count(*) FROM runs WHERE state IN ('queued', 'running')").strip()
        self.assertEqual(left, "0", "runs left unfinished in the database")
        return states

    def wait_ready(self, d, timeout=30):
        deadline = time.time() + timeout
        while True:
            code, body, _ = d.curl("GET", "/readyz", check=False)
            if code == 200:
                return
            if time.time() > deadline:
                raise AssertionError("never ready again: %s %s; the daemon's log ends with:\n%s"
                                     % (code, body, d.stderr()[-3000:]))
            time.sleep(0.1)

    def wait_told(self, d, failed, back, timeout=30):
        """Until every `failed` line of the daemon's log has its `back` line (the next heartbeat tells)."""
        deadline = time.time() + timeout
        while True:
            log = d.stderr()
            if log.count(failed) == log.count(back) or time.time() > deadline:
                return
            time.sleep(0.2)

    def assert_ok_run(self, d, tag):
        code, run, _ = d.curl("POST", "/v1/flows/effect/runs?wait=30s",
                              {"input": {"port": self.server.port, "tag": tag}}, timeout=40)
        self.assertEqual(code, 200, run)
        self.assertEqual((run["state"], run["outcome"], run["result"]), ("ended", "ok", {"tag": tag}), run)
        self.assertEqual(self.server.count(tag), 1)


class RestartTest(FaultTest):
    def test_the_server_restarted_under_runs_in_flight(self):
        d = daemon_on(self, CLUSTER, "restart").start()
        self.assert_ok_run(d, "before")
        clients = Clients(self, d).start()
        serve_test.wait_until(lambda: clients.count() >= 15)
        # Stopped (fast: sessions are ended, what is in flight fails), looked at, started again.
        CLUSTER.pg_ctl("stop", "-m", "fast")
        code, body, _ = d.curl("GET", "/readyz")
        self.assertEqual(code, 503, body)
        self.assertIn("store", body["reason"])
        seen = clients.count()
        serve_test.wait_until(lambda: clients.count() >= seen + 5)
        code, body, _ = d.curl("POST", "/v1/flows/effect/runs", {"input": {"port": self.server.port, "tag": "down"}})
        self.assertTrue(500 <= code < 600, body)
        self.assertTrue(body["error"]["code"], body)
        self.assertIn("store postgresql://basal@", body["error"]["message"], "the error names the store")
        self.assertEqual(self.server.count("down"), 0)
        CLUSTER.pg_ctl("start")
        self.wait_ready(d)
        seen = clients.count()
        serve_test.wait_until(lambda: clients.count() >= seen + 10)
        # And once more, as an operator's restart: in one step.
        CLUSTER.pg_ctl("restart", "-m", "fast")
        seen = clients.count()
        serve_test.wait_until(lambda: clients.count() >= seen + 10)
        clients.finish()
        self.wait_ready(d)
        states = self.check_promises(d, clients.answers)
        print("restart: %d requests, %s" % (len(clients.answers), states), file=sys.stderr)
        self.assert_ok_run(d, "after")
        self.assertIsNone(d.proc.poll(), "the daemon is still up")
        # Each outage is told once, and its end once, however many commits failed in it; the
        # takeover of lapsed leases (on its own connection, at each heartbeat) the same way.
        log = d.stderr()
        self.wait_told(d, "journal_failure: lapsed leases", "journal_recovered: lapsed leases")
        failures, recoveries = log.count("journal_failure: journal commit"), log.count("journal_recovered: journal commits")
        self.assertEqual(failures, recoveries, log[-3000:])
        self.assertGreaterEqual(failures, 1)
        self.assertLessEqual(failures, 2, "an outage told more than once: " + log[-3000:])
        log = d.stderr()
        takeover_failed, takeover_back = log.count("journal_failure: lapsed leases"), log.count("journal_recovered: lapsed leases")
        self.assertEqual(takeover_failed, takeover_back, log[-3000:])
        self.assertLessEqual(takeover_failed, 2, "an outage told more than once: " + log[-3000:])
        self.assertEqual(d.stop(), 0)


class TerminateTest(FaultTest):
    def test_the_daemons_connection_killed(self):
        d = daemon_on(self, CLUSTER, "terminate").start()
        self.assert_ok_run(d, "before")
        clients = Clients(self, d).start()
        kill = ("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = 'terminate' "
                "AND application_name = 'basal'")
        for _ in range(3):
            seen = clients.count()
            serve_test.wait_until(lambda: clients.count() >= seen + 10)
            CLUSTER.psql(kill, database="postgres", user="postgres")
        seen = clients.count()
        serve_test.wait_until(lambda: clients.count() >= seen + 10)
        clients.finish()
        self.wait_ready(d)
        states = self.check_promises(d, clients.answers)
        print("terminate: %d requests, %s" % (len(clients.answers), states), file=sys.stderr)
        self.assert_ok_run(d, "after")
        self.assertIsNone(d.proc.poll())
        self.assertEqual(d.stop(), 0)


class DiskFullTest(FaultTest):
    def test_the_clusters_disk_full_and_freed(self):
        mount = os.path.join(CLUSTER.dir, "small")
        os.mkdir(mount)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m,mode=0700", "tmpfs", mount],
                           capture_output=True, text=True)
        if r.returncode != 0:
            self.skipTest("cannot mount a small tmpfs for the tablespace (%s): the disk-full case needs root "
                          "and mount" % r.stderr.strip())
        self.addCleanup(subprocess.run, ["umount", "-l", mount])
        os.chown(mount, *CLUSTER.owner_ids())
        CLUSTER.psql("CREATE TABLESPACE small LOCATION '%s'" % mount, database="postgres", user="postgres")
        d = daemon_on(self, CLUSTER, "fulldisk", tablespace="small").start()
        self.assert_ok_run(d, "before")
        # Fill what is left, as another tenant of the disk would.
        filler = os.path.join(mount, "filler")
        subprocess.run(["dd", "if=/dev/zero", "of=" + filler, "bs=64k"], capture_output=True)
        big = "y" * 60000
        source = ("export default async (input, host) => { for (let i = 0; i < 400; i++) "
                  "await host.call('kv.put', {namespace: 'c', key: 'k' + input.n + '_' + i, value: input.big}); };\n")
        d.approve("writer", source, {"grants": {"kv.put": {"namespaces": ["c"]}},
                                     "budgets": {"deadline_ms": 60000, "cpu_ms": 20000, "journal_kb": 65536}})
        failed = None
        for n in range(6):
            code, body, _ = d.curl("POST", "/v1/flows/writer/runs?wait=30s", {"input": {"n": n, "big": big}},
                                   timeout=40)
            if code != 200 or body.get("outcome") != "ok":
                failed = (code, body)
                break
        self.assertIsNotNone(failed, "the disk never filled")
        self.assertIn("No space left on device", json.dumps(failed[1]), failed)
        self.assertIsNone(d.proc.poll(), "the daemon did not crash")
        code, body, _ = d.curl("GET", "/readyz")
        self.assertEqual(code, 503, body)
        self.assertIn("No space left on device", body["reason"])
        self.assertIn("store", body["reason"])
        # A run asked for now is refused with a code, or accepted and ended; never a false success.
        asking = Clients(self, d)
        answers = [asking.one() for _ in range(3)]
        os.unlink(filler)
        self.wait_ready(d)
        self.check_promises(d, answers)
        self.assert_ok_run(d, "after")
        self.assertIsNone(d.proc.poll())
        self.assertEqual(d.stop(), 0)
        CLUSTER.psql("DROP DATABASE fulldisk", database="postgres", user="postgres")
        CLUSTER.psql("DROP TABLESPACE small", database="postgres", user="postgres")


def main():
    global CLUSTER
    p = argparse.ArgumentParser()
    p.add_argument("--bin-dir", required=True)
    p.add_argument("tests", nargs="*")
    args = p.parse_args()
    serve_test.BIN = args.bin_dir
    started = time.monotonic()
    with pg_cluster.Cluster() as pg:
        CLUSTER = pg
        print("pg_faults_test: a private cluster in %s (%.1f s to start)" % (pg.dir, time.monotonic() - started),
              flush=True)
        loader = unittest.defaultTestLoader
        if args.tests:
            suite = loader.loadTestsFromNames(args.tests, sys.modules[__name__])
        else:
            suite = unittest.TestSuite(loader.loadTestsFromTestCase(c) for c in (RestartTest, TerminateTest, DiskFullTest))
        result = unittest.TextTestRunner(verbosity=2).run(suite)
        if not result.wasSuccessful():
            print("pg_faults_test: the server's log ends with:\n" + pg.server_log()[-4000:], flush=True)
    sys.exit(0 if result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
