#!/usr/bin/env python3
"""basal run and basal serve on PostgreSQL, end to end (docs/postgres.md): one private cluster for
the whole file (tests/support/pg_cluster.py: initdb and pg_ctl in a temporary directory, a Unix
socket, no TCP), a database of its own for each daemon or command. What runs here:

- basal run: kv.incr counted in the database, exactly, by processes writing at once; basal journal
  reads it back; the journal's views (basal journal, a read-only role) on the same locator.
- basal serve: runs through the API, an idempotency key, readiness that follows the server (a
  read-only database is not ready, and says why), a daemon killed with queued work, the webhook
  secrets' refusal at start (docs/postgres.md, "Secrets on several hosts").
- durable runs killed with SIGKILL in a held host call and resumed (durable_test.py's own tests,
  on this store), and one resolved through the CLI with --db naming the database; a durable run
  that waits for an event (sent by basal run signal --db naming the database) and sleeps;
  parked_test.py's long-lived runs (retries, sleeps across SIGKILL, events by the API, the CLI and a
  keyed webhook, timeouts, cancels, bounds) on this store.

Run by ctest: postgres_test.py --bin-dir DIR."""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import pg_cluster  # noqa: E402
import serve_test  # noqa: E402
import durable_test  # noqa: E402
import parked_test  # noqa: E402

CLUSTER = None
NEXT_DB = [0]


def new_database():
    """A new database in the cluster, owned by basal's role; its locator."""
    NEXT_DB[0] += 1
    name = "e2e_%d_%d" % (os.getpid(), NEXT_DB[0])
    CLUSTER.psql("CREATE DATABASE %s OWNER basal" % name, database="postgres", user="postgres")
    return name, CLUSTER.locator(database=name)


def literal(v):
    return str(v) if isinstance(v, int) else "'" + str(v).replace("'", "''") + "'"


def on_postgres(daemon):
    """serve_test.STORE: the daemon's store is a database of its own; its secrets live under its
    directory (the default for a PostgreSQL locator is $XDG_STATE_HOME/basal/secrets)."""
    name, daemon.db = new_database()
    daemon.env = {"XDG_STATE_HOME": os.path.join(daemon.dir, "state")}

    # The tests' queries name basal's tables unqualified, as SQLite has them; rows come as JSON so
    # that numbers stay numbers and texts texts, as sqlite3 gives them.
    def query(sql, *params):
        for p in params:
            sql = sql.replace("?", literal(p), 1)
        out = CLUSTER.psql("SET search_path = basal", "SELECT row_to_json(q) FROM (%s) q" % sql, database=name)
        return [tuple(json.loads(line, object_pairs_hook=lambda pairs: [v for _, v in pairs]))
                for line in out.splitlines() if line]

    daemon.query = query


def basal(*args, env=None, check=True, input=None):
    r = subprocess.run([os.path.join(serve_test.BIN, "basal"), *args], capture_output=True, text=True, timeout=120,
                       input=input, env=dict(os.environ, **(env or {})))
    if check and r.returncode != 0:
        raise AssertionError("basal %s: exit %d: %s" % (" ".join(args), r.returncode, r.stderr))
    return r


class RunOnPostgresTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="basal-pg-run-")
        self.addCleanup(subprocess.run, ["rm", "-rf", self.dir])
        self.name, self.db = new_database()
        self.flow = os.path.join(self.dir, "count.js")
        self.manifest = os.path.join(self.dir, "count.json")
        with open(self.flow, "w") as f:
            f.write("export default async (input, host) => {\n"
                    "  let n = 0;\n"
                    "  for (let i = 0; i < input.times; i++) n = await host.call('kv.incr', {namespace: 'c', key: 'n'});\n"
                    "  console.log('counted to ' + n);\n"
                    "  return n;\n"
                    "};\n")
        with open(self.manifest, "w") as f:
            json.dump({"grants": {"kv.incr": {"namespaces": ["c"]}, "log": {}}}, f)

    def run_flow(self, times):
        return basal("run", self.flow, "--manifest", self.manifest, "--db", self.db, "--input",
                     json.dumps({"times": times}))

    def test_runs_count_exactly_in_the_database_and_the_journal_reads_back(self):
        self.assertEqual(self.run_flow(3).stdout.strip(), "3")
        # Four processes at once, each adding 25: kv.incr is atomic across processes.
        procs = [subprocess.Popen([os.path.join(serve_test.BIN, "basal"), "run", self.flow, "--manifest", self.manifest,
                                   "--db", self.db, "--input", json.dumps({"times": 25})],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
        for p in procs:
            out, err = p.communicate(timeout=120)
            self.assertEqual(p.returncode, 0, err)
        self.assertEqual(CLUSTER.psql("SELECT value FROM basal.kv WHERE key = 'n'::bytea", database=self.name).strip(),
                         "103")
        journal = basal("journal", "--db", self.db, "--json", "--limit", "0").stdout.splitlines()
        activations = [json.loads(line) for line in journal]
        self.assertEqual(len(activations), 5)
        self.assertTrue(all(a["outcome"] == "ok" for a in activations), activations)
        self.assertEqual(sum(1 for a in activations for c in a["calls"] if c["name"] == "kv.incr"), 103)
        text = basal("journal", "--db", self.db, "--activation", str(activations[0]["id"])).stdout
        self.assertIn("counted to 3", text)

    def test_kv_from_the_command_line_is_checked_against_the_flows_quota_and_journaled(self):
        # An approved flow granted kv.incr on "c" with a quota of two keys: the operator's third key
        # is refused naming it; every write that happened is in basal.kv_audit with who made it.
        with open(self.manifest, "w") as f:
            json.dump({"grants": {"kv.incr": {"namespaces": ["c"], "quota": {"keys": 2}}, "log": {}}}, f)
        basal("flow", "approve", "count", self.flow, "--manifest", self.manifest, "--db", self.db, "--yes")
        env = {"BASAL_DB": self.db}
        basal("kv", "put", "--namespace", "c", "a", '{"v": 1}', "--reason", "seed", env=env)
        basal("kv", "put", "--namespace", "c", "b", "2", env=env)
        refused = basal("kv", "put", "--namespace", "c", "d", "3", env=env, check=False)
        self.assertEqual(refused.returncode, 4, refused.stderr)
        self.assertIn('flow "count" version 1 sets grants.kv.incr.quota.keys = 2', refused.stderr)
        self.assertEqual(basal("kv", "get", "--namespace", "c", "a", env=env).stdout, '{"v":1}\n')
        basal("kv", "rm", "--namespace", "c", "b", "--reason", "room", env=env)
        self.assertEqual(basal("kv", "list", "--namespace", "c", "--json", env=env).stdout, '{"key":"a","value":{"v":1}}\n')
        rows = CLUSTER.psql("SELECT op || ' ' || encode(key, 'escape') || ' ' || reason || ' ' || coalesce(value_sha256, '-') "
                            "|| ' ' || actor_uid FROM basal.kv_audit ORDER BY seq", database=self.name).split("\n")
        digest = "sha256:" + hashlib.sha256(b'{"v":1}').hexdigest()
        self.assertEqual([r for r in rows if r], ["put a seed %s %d" % (digest, os.getuid()),
                                                  "put b  sha256:%s %d" % (hashlib.sha256(b"2").hexdigest(), os.getuid()),
                                                  "delete b room - %d" % os.getuid()])
        history = [json.loads(line) for line in basal("kv", "history", "--namespace", "c", "--json", env=env).stdout.splitlines()]
        self.assertEqual([h["op"] for h in history], ["put", "put", "delete"])

    def test_a_role_that_may_only_read_reads_the_journal(self):
        self.run_flow(2)
        CLUSTER.psql("CREATE ROLE auditor_%s LOGIN" % self.name, "GRANT USAGE ON SCHEMA basal TO auditor_%s" % self.name,
                     "GRANT SELECT ON ALL TABLES IN SCHEMA basal TO auditor_%s" % self.name, database=self.name,
                     user="postgres")
        auditor = CLUSTER.locator(database=self.name, user="auditor_" + self.name)
        out = basal("journal", "--db", auditor).stdout
        self.assertIn("count.js", out)
        # It can read; it cannot write: a run through it is refused by the server.
        r = basal("run", self.flow, "--manifest", self.manifest, "--db", auditor, "--input", '{"times": 1}', check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("permission denied", r.stderr)

    def test_an_unknown_scheme_and_a_password_are_handled(self):
        r = basal("run", self.flow, "--manifest", self.manifest, "--db", "mysql://u:hunter2@h/db", check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn('unknown scheme "mysql://"', r.stderr)
        self.assertNotIn("hunter2", r.stderr)
        wrong = self.db.replace("basal@", "basal:hunter2@").replace("/" + self.name + "?", "/no_such_db?")
        r = basal("run", self.flow, "--manifest", self.manifest, "--db", wrong, check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("no_such_db", r.stderr)
        self.assertIn("basal:***@", r.stderr)
        self.assertNotIn("hunter2", r.stderr)


class ServeOnPostgresTest(unittest.TestCase):
    def test_readiness_follows_whether_the_server_takes_writes(self):
        d = serve_test.Daemon(self).start()
        self.assertEqual(d.curl("GET", "/readyz")[0], 200)
        self.assertIn("journal " + d.db, d.stderr(), "the serving line names the store")
        name = d.db.split("/")[3].split("?")[0]
        # The database turns read only and the daemon's session is ended (as a failover would): the
        # daemon reconnects and is not ready, and says why.
        CLUSTER.psql("ALTER DATABASE %s SET default_transaction_read_only = on" % name, database="postgres",
                     user="postgres")
        kill = ("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '%s' "
                "AND application_name = 'basal'" % name)
        CLUSTER.psql(kill, database="postgres", user="postgres")
        code, data, _ = d.curl("GET", "/readyz")
        self.assertEqual(code, 503, data)
        self.assertIn("read only", data["reason"])
        CLUSTER.psql("ALTER DATABASE %s RESET default_transaction_read_only" % name, database="postgres",
                     user="postgres")
        CLUSTER.psql(kill, database="postgres", user="postgres")
        serve_test.wait_until(lambda: d.curl("GET", "/readyz")[0] == 200)
        code, run, _ = d.curl("POST", "/v1/flows/hello/runs?wait=30s", {"input": {"name": "again"}})
        self.assertEqual((code, run["result"]), (200, {"hello": "again"}), run)
        self.assertEqual(d.stop(), 0)


# A durable run that parks twice: waiting for an event, then sleeping past a second.
PARKED = """export default async (input) => {
  const e = await waitForEvent("go");
  await sleep(1200);
  return {got: e.data, from: e.name};
};
"""


class ParkedRunsOnPostgresTest(unittest.TestCase):
    def test_a_run_waits_for_a_signal_sleeps_and_ends_on_postgres(self):
        d = serve_test.Daemon(self, flows={})
        d.approve("parked", PARKED, {"durable": True, "grants": {"log": {}},
                                     "budgets": {"deadline_ms": 60000, "cpu_ms": 10000}})
        d.start()
        code, run, _ = d.curl("POST", "/v1/flows/parked/runs", {"input": None})
        self.assertEqual(code, 202, run)
        run_id = run["id"]
        serve_test.wait_until(lambda: d.query("SELECT state FROM runs WHERE id=?", run_id) == [("waiting",)])
        self.assertEqual(d.query("SELECT waiting_for, coalesce(waiting_key, '') FROM runs WHERE id=?", run_id),
                         [("go", "")])
        d.cli("run", "signal", str(run_id), "go", "--data", '{"ok": 1}',
              "--worker", os.path.join(serve_test.BIN, "ck-basal-worker"))
        self.assertEqual(d.query("SELECT name, payload, delivered_us IS NOT NULL FROM run_events WHERE run_id=?",
                                 run_id), [("go", '{"ok":1}', True)])
        # Resumed, it parks again (sleeping) and the daemon wakes it at its time.
        serve_test.wait_until(lambda: d.query("SELECT state FROM runs WHERE id=?", run_id) == [("ended",)], timeout=60)
        code, ended, _ = d.curl("GET", "/v1/runs/%d" % run_id)
        self.assertEqual(code, 200, ended)
        self.assertEqual(ended["result"], {"got": {"ok": 1}, "from": "go"}, ended)
        self.assertEqual(d.query("SELECT state, wake_us, waiting_for FROM runs WHERE id=?", run_id),
                         [("ended", None, None)])
        self.assertEqual(d.stop(), 0)


def suite():
    s = unittest.TestSuite()
    loader = unittest.defaultTestLoader
    s.addTests(loader.loadTestsFromTestCase(RunOnPostgresTest))
    s.addTests(loader.loadTestsFromTestCase(ServeOnPostgresTest))
    s.addTests(loader.loadTestsFromTestCase(ParkedRunsOnPostgresTest))
    # Long-lived runs (parked_test.py) on this store, all but the 10,000-run scale test.
    for name in loader.getTestCaseNames(parked_test.ParkedRunTest):
        if "ten_thousand" not in name:
            s.addTest(parked_test.ParkedRunTest(name))
    for cls, names in [
        (serve_test.ApiTest, ["test_run_sync_and_async_and_read_back", "test_idempotency_key_gives_the_same_run",
                              "test_a_trigger_that_could_never_run_is_refused_at_start"]),
        (serve_test.WebhookTest, ["test_signatures_good_and_bad"]),
        (serve_test.LifecycleTest, ["test_sigkill_and_restart_with_queued_work", "test_readyz_and_metrics_add_up"]),
        (durable_test.DurableRunTest, ["test_a_kv_incr_sequence_resumes_and_the_counter_ends_exactly_right",
                                       "test_kills_at_random_moments_never_repeat_an_increment",
                                       "test_the_cli_resolves_and_the_daemon_resumes"]),
    ]:
        for n in names:
            s.addTest(cls(n))
    return s


def main_on_a_cluster(name, make_suite):
    """The main of a test file whose daemons keep their store on PostgreSQL: --bin-dir DIR and -k
    TEXT (only tests whose name contains it); one private cluster for the whole file, its server's
    log printed when a test failed."""
    global CLUSTER
    p = argparse.ArgumentParser()
    p.add_argument("--bin-dir", required=True)
    p.add_argument("-k", default=None, help="only tests whose name contains this")
    args = p.parse_args()
    serve_test.BIN = args.bin_dir
    serve_test.STORE = on_postgres
    started = time.monotonic()
    with pg_cluster.Cluster() as pg:
        CLUSTER = pg
        print("%s: a private cluster in %s (%.1f s to start)" % (name, pg.dir, time.monotonic() - started), flush=True)
        s = make_suite()
        if args.k:
            s = unittest.TestSuite([t for t in s if args.k in t.id()])
        result = unittest.TextTestRunner(verbosity=2).run(s)
        if not result.wasSuccessful():
            print("%s: the server's log ends with:\n%s" % (name, pg.server_log()[-4000:]), flush=True)
    sys.exit(0 if result.wasSuccessful() else 1)


def main():
    main_on_a_cluster("postgres_test", suite)


if __name__ == "__main__":
    main()
