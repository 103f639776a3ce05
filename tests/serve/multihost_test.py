#!/usr/bin/env python3
"""Several basal serve hosts on one PostgreSQL database (docs/postgres.md, "Several hosts"): one
private cluster for the file (tests/support/pg_cluster.py), two daemons against one database per
test, each with its own socket, secrets and host id, a short lease (2 s) so that takeovers happen
within the test. What runs here:

- a host killed with SIGKILL while a durable run waits in a held host call: the other host takes
  the run over and finishes it, every increment once (the time from the kill to the resumed call
  is printed, not asserted: docs/postgres.md quotes it);
- a host SIGSTOPped past its lease while a durable run waits in a held host call: the other host
  takes the run over and finishes it; the stopped host, continued, writes nothing more for that run
  (no call record, no end), the other host's result stands, and it goes on serving other runs;
- a schedule's fire time fired by both hosts (the second one read the schedule's mark as the
  first had it before firing, as when two hosts race): exactly one run for it;
- the same webhook delivery to both hosts gives one run; kv.incr from both hosts at once counts
  exactly; a token revoked through one host (or the CLI) is refused by the other at the next request;
- queued runs: a host with one worker, busy, given more runs: the other host, idle, runs some of
  them (it hears the first host's offer, and claims them); a host SIGKILLed with runs waiting in its
  queue: the other host, running all along, runs each of them once (the time from the kill to the
  first of them starting is printed, not asserted: docs/postgres.md quotes it).

Run by ctest: multihost_test.py --bin-dir DIR."""
import hashlib
import hmac
import json
import os
import signal
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import serve_test  # noqa: E402
import durable_test  # noqa: E402
from durable_test import HoldServer, durable_manifest, COUNTER  # noqa: E402
from serve_test import Daemon  # noqa: E402
import postgres_test  # noqa: E402

# The lease of both hosts; MULTIHOST_LEASE=15s measures with the default (docs/postgres.md).
LEASE = os.environ.get("MULTIHOST_LEASE", "2s")


def two_hosts(test, flows, manifest=serve_test.MANIFEST, config=None, tcp=False):
    """Two daemons on one new database: `a` approves the flows (they are in the database, so `b`
    sees them too). Not started."""
    a = Daemon(test, config=dict(config or {}, host_id="host-a", lease=LEASE), flows={}, tcp=tcp)
    for name, source in flows.items():
        a.approve(name, source, manifest)
    b = Daemon(test, config=dict(config or {}, host_id="host-b", lease=LEASE), flows={}, tcp=tcp)
    b.db, b.query = a.db, a.query
    return a, b


def start_run(test, d, flow, input):
    code, run, _ = d.curl("POST", "/v1/flows/%s/runs" % flow, {"input": input})
    test.assertEqual(code, 202, run)
    return run["id"]


def wait_run(test, d, run_id, timeout=60):
    code, run, _ = d.curl("GET", "/v1/runs/%d?wait=%ds" % (run_id, timeout), timeout=timeout + 5)
    test.assertIn(code, (200, 202), run)
    return run


def activations_of(d, run_id):
    """The run's activations, oldest first: (id, owner_pid, outcome)."""
    return d.query("SELECT id, owner_pid, outcome FROM activations WHERE run_id=? ORDER BY id", run_id)


class TakeoverTest(unittest.TestCase):
    def test_a_host_killed_mid_call_its_durable_run_is_resumed_by_the_other(self):
        server = HoldServer(self)
        a, b = two_hosts(self, {"counter": COUNTER}, durable_manifest(server))
        a.start()
        b.start()
        code, health, _ = a.curl("GET", "/v1/health")
        self.assertEqual(health["serve"]["host"], "host-a", health)
        self.assertIn('basal_host_info{host="host-b"} 1', b.curl("GET", "/metrics")[1])
        run_id = start_run(self, a, "counter", {"port": server.port, "tag": "k"})
        server.wait_for(1)
        first = activations_of(a, run_id)
        self.assertEqual([(pid, outcome) for _, pid, outcome in first], [(a.proc.pid, None)])
        killed = time.monotonic()
        a.stop(signal.SIGKILL)
        # b takes the run over and asks again (the request is idempotent: GET).
        server.wait_for(2, timeout=30)
        resumed = time.monotonic() - killed
        server.released.set()
        run = wait_run(self, b, run_id)
        self.assertEqual((run["state"], run["outcome"], run["result"]), ("ended", "ok", 10), run)
        self.assertEqual(run["resumes"], 1, run)
        acts = activations_of(b, run_id)
        self.assertEqual(len(acts), 2, acts)
        self.assertEqual(acts[0][2], "abandoned")
        self.assertEqual((acts[1][1], acts[1][2]), (b.proc.pid, "ok"))
        self.assertEqual(b.query("SELECT value FROM kv WHERE namespace='c' AND key='n'"), [("10",)])
        print("multihost: SIGKILL to the resumed call on the other host: %.2f s (lease %s, same machine)"
              % (resumed, LEASE), flush=True)
        self.assertEqual(b.stop(), 0)

    def test_a_host_paused_past_its_lease_writes_nothing_more_for_the_run_it_lost(self):
        server = HoldServer(self)
        hello = serve_test.HELLO
        a, b = two_hosts(self, {"counter": COUNTER}, durable_manifest(server))
        a.approve("hello", hello)
        a.start()
        b.start()
        run_id = start_run(self, a, "counter", {"port": server.port, "tag": "s"})
        server.wait_for(1)
        a_activation = activations_of(a, run_id)[0][0]
        stopped = time.monotonic()
        a.proc.send_signal(signal.SIGSTOP)
        try:
            # b sees a's lease lapse (2 s by the server's clock), takes the run and asks again.
            server.wait_for(2, timeout=30)
            taken = time.monotonic() - stopped
            calls_before = a.query("SELECT call_id, name, state FROM calls WHERE activation_id=? ORDER BY call_id",
                                   a_activation)
            self.assertEqual(calls_before[-1][1:], ("http.fetch", "unknown"), calls_before)
            # Both held requests are answered now: a's sits in its socket until it continues.
            server.released.set()
            run = wait_run(self, b, run_id)
            self.assertEqual((run["state"], run["outcome"], run["result"]), ("ended", "ok", 10), run)
        finally:
            a.proc.send_signal(signal.SIGCONT)
        # a continues: it learns that its lease lapsed before it handles the answer, and stops the run.
        a.wait_for_log("another host took over run %d" % run_id)
        # a still serves: a new run on a ends ok (its own lease is renewed).
        code, out, _ = a.curl("POST", "/v1/flows/hello/runs?wait=30s", {"input": {"name": "ada"}})
        self.assertEqual(code, 200, out)
        self.assertEqual(out["outcome"], "ok", out)
        # Nothing of a's for the lost run after the takeover: its calls as the takeover left them,
        # its activation closed by b, the run ended by b with b's result, the counter exact.
        self.assertEqual(a.query("SELECT call_id, name, state FROM calls WHERE activation_id=? ORDER BY call_id",
                                 a_activation), calls_before)
        acts = activations_of(a, run_id)
        self.assertEqual([outcome for _, _, outcome in acts], ["abandoned", "ok"], acts)
        self.assertEqual(acts[1][1], b.proc.pid)
        row = a.query("SELECT state, outcome, activation_id FROM runs WHERE id=?", run_id)
        self.assertEqual(row, [("ended", "ok", acts[1][0])])
        self.assertEqual(a.query("SELECT value FROM kv WHERE namespace='c' AND key='n'"), [("10",)])
        print("multihost: SIGSTOP to the call resumed on the other host: %.2f s (lease %s)" % (taken, LEASE), flush=True)
        self.assertEqual(a.stop(), 0)
        self.assertEqual(b.stop(), 0)


# Asks the test's HTTP server for input.path (held until the test releases it, unless under /now/),
# and returns its tag.
FETCH = """export default async (input, host) => {
  await fetch("http://127.0.0.1:" + input.port + "/" + input.path);
  return input.path;
};
"""


def fetch_manifest(server):
    return {"grants": {"http.fetch": {"rules": [server.rule()]}}, "budgets": {"deadline_ms": 60000}}


def ended_ok_once(test, d, run_ids):
    """Waits for each run to end ok; returns {run: pid of the host whose activation ran it}, after
    checking that each has exactly one activation, which ended ok (a host that lost a run from its
    queue to another host and tried to start it anyway would have journaled a cancelled one)."""
    ran_by = {}
    for rid in run_ids:
        run = wait_run(test, d, rid)
        test.assertEqual((run["state"], run["outcome"]), ("ended", "ok"), run)
        acts = activations_of(d, rid)
        test.assertEqual([outcome for _, _, outcome in acts], ["ok"], acts)
        ran_by[rid] = acts[0][1]
    return ran_by


def wait_queued(test, d, count, timeout=30):
    """Waits until `d` holds `count` runs in its queue (/v1/health's serve.queued_runs)."""
    deadline = time.time() + timeout
    while True:
        queued = d.curl("GET", "/v1/health")[1]["serve"]["queued_runs"]
        if queued == count or time.time() > deadline:
            test.assertEqual(queued, count)
            return
        time.sleep(0.05)


class QueuedRunsTest(unittest.TestCase):
    def test_an_idle_host_runs_what_a_busy_one_cannot_start(self):
        server = HoldServer(self)
        # The poll is a minute: b can only learn of a's runs from a's offer (NOTIFY) within the test.
        a, b = two_hosts(self, {"fetch": FETCH}, fetch_manifest(server),
                         config={"limits": {"max_workers": 1}, "queue_poll": "1m"})
        a.start()
        b.start()
        # a's one worker is held; three more runs wait in a's queue. b, idle, hears a's offer and
        # takes one for its one worker; a hears b's claim and drops that run from its queue.
        first = start_run(self, a, "fetch", {"port": server.port, "path": "hold/0"})
        server.wait_for(1)
        waiting = [start_run(self, a, "fetch", {"port": server.port, "path": "hold/%d" % i}) for i in (1, 2, 3)]
        server.wait_for(2)
        wait_queued(self, a, 2)
        server.released.set()
        ran_by = ended_ok_once(self, a, [first] + waiting)
        self.assertEqual(ran_by[first], a.proc.pid)
        self.assertIn(b.proc.pid, ran_by.values(), ran_by)
        paths = sorted(r["path"] for r in server.requests)
        self.assertEqual(paths, ["/hold/0", "/hold/1", "/hold/2", "/hold/3"], "each run asked once")
        # A host that stops ends its row: the runs it held are any host's at the next poll.
        self.assertEqual(a.stop(), 0)
        self.assertEqual(b.query("SELECT lease_until_us FROM hosts WHERE host_id='host-a'"), [(0,)])
        self.assertEqual(b.stop(), 0)

    def test_a_host_killed_with_runs_in_its_queue_the_other_runs_each_once(self):
        server = HoldServer(self)
        a, b = two_hosts(self, {"fetch": FETCH}, fetch_manifest(server), config={"limits": {"max_workers": 1}})
        a.start()
        b.start()
        # Both hosts' one worker held (b takes nothing of a's while it has no room), then three
        # runs wait in a's queue, held by a in the database.
        b_run = start_run(self, b, "fetch", {"port": server.port, "path": "hold/b"})
        server.wait_for(1)
        a_run = start_run(self, a, "fetch", {"port": server.port, "path": "hold/a"})
        server.wait_for(2)
        waiting = [start_run(self, a, "fetch", {"port": server.port, "path": "now/%d" % i}) for i in (1, 2, 3)]
        holders = a.query("SELECT state, queued_by FROM runs WHERE id IN (?, ?, ?) ORDER BY id", *waiting)
        self.assertEqual(holders, [("queued", "host-a")] * 3)
        killed = time.monotonic()
        a.stop(signal.SIGKILL)
        server.released.set()  # b's worker is free from now on
        server.wait_for(3, timeout=60)
        started = time.monotonic() - killed
        ran_by = ended_ok_once(self, b, waiting)
        self.assertEqual(set(ran_by.values()), {b.proc.pid}, ran_by)
        paths = sorted(r["path"] for r in server.requests if r["path"].startswith("/now/"))
        self.assertEqual(paths, ["/now/1", "/now/2", "/now/3"], "each waiting run ran once")
        self.assertEqual(wait_run(self, b, b_run)["outcome"], "ok")
        # a's running run (not durable) ends with its lapsed lease, as before.
        deadline = time.time() + 30
        while time.time() < deadline and b.query("SELECT state FROM runs WHERE id=?", a_run) != [("ended",)]:
            time.sleep(0.1)
        self.assertEqual(b.query("SELECT state, outcome FROM runs WHERE id=?", a_run), [("ended", "abandoned")])
        print("multihost: SIGKILL to the first of the killed host's queued runs starting on the other: %.2f s "
              "(lease %s, queue_poll 1s)" % (started, LEASE), flush=True)
        self.assertEqual(b.stop(), 0)


SCHEDULED = """export default async (input, host) => ({fired: true});
"""


class OnceAcrossHostsTest(unittest.TestCase):
    def test_a_schedule_on_two_hosts_fires_once_per_fire_time(self):
        # Cron is by the minute, so the fire both hosts meet is the one each catches up at its start:
        # the schedule's mark (the last fire handled) is put just before the latest minute, so both
        # hosts find that fire due when they start, one after the other, and both fire it.
        config = {"triggers": [{"name": "tick", "schedule": {"cron": "* * * * *", "flow": "tick",
                                                             "timezone": "UTC", "catch_up": "10m"}}]}
        a, b = two_hosts(self, {"tick": SCHEDULED}, config=config)
        # Not near the end of a minute: a new minute before a's start would make two fires due, and a
        # would run the newest as another run than the one this test follows.
        if time.time() % 60 > 45:
            time.sleep(61 - time.time() % 60)
        minute = int(time.time()) // 60 * 60
        name = a.db.rsplit("/", 1)[-1].split("?")[0]
        mark = "INSERT INTO basal.schedule_marks VALUES ('tick', %d) ON CONFLICT (trigger_name) DO UPDATE " \
               "SET fire_us = excluded.fire_us" % ((minute - 1) * 1000000)
        postgres_test.CLUSTER.psql(mark, database=name)
        a.start()
        a.wait_for_log("run 1 ended")
        # b reads the mark as a had it before firing (the two hosts raced for it): b fires the same
        # fire time again, and finds a's run for it.
        postgres_test.CLUSTER.psql(mark, database=name)
        b.start()
        b.wait_for_log("was run by another host (run 1)")
        deadline = time.time() + 30
        while time.time() < deadline and a.query("SELECT count(*) FROM runs WHERE state <> 'ended'")[0][0] > 0:
            time.sleep(0.1)
        a.stop()
        b.stop()
        rows = a.query("SELECT state_detail, outcome FROM runs WHERE triggered_by='schedule:tick'")
        fires = [json.loads(r[0])["scheduled_for"] for r in rows]
        self.assertIn(time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(minute)), " ".join(fires), rows)
        self.assertEqual(len(fires), len(set(fires)), "a fire time has two runs: %s" % rows)
        self.assertEqual({r[1] for r in rows}, {"ok"}, rows)

    def test_kv_incr_from_two_hosts_at_once_counts_exactly(self):
        source = """export default async (input, host) => {
  for (let i = 0; i < input.n; i++) await host.call("kv.incr", {namespace: "c", key: "n"});
  return true;
};
"""
        manifest = {"grants": {"kv.incr": {"namespaces": ["c"]}}}
        a, b = two_hosts(self, {"incr": source}, manifest)
        a.start()
        b.start()
        ids = []
        lock = threading.Lock()

        def submit(d):
            for _ in range(5):
                rid = start_run(self, d, "incr", {"n": 20})
                with lock:
                    ids.append((d, rid))

        threads = [threading.Thread(target=submit, args=(d,)) for d in (a, b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for d, rid in ids:
            run = wait_run(self, d, rid)
            self.assertEqual(run["outcome"], "ok", run)
        self.assertEqual(a.query("SELECT value FROM kv WHERE namespace='c' AND key='n'"), [("200",)])
        a.stop()
        b.stop()

    def test_a_revoked_token_and_flow_are_refused_by_the_other_host_at_once(self):
        a, b = two_hosts(self, {"hello": serve_test.HELLO}, tcp=True)
        token = a.cli("token", "create", "--name", "ci", "--scope", "run", "--scope", "read").stdout.strip()
        auth = {"Authorization": "Bearer " + token}
        a.start()
        b.start()
        code, out, _ = b.curl("POST", "/v1/flows/hello/runs?wait=30s", {"input": {"name": "t"}}, tcp=True, headers=auth)
        self.assertEqual(code, 200, out)
        self.assertEqual(out["result"], {"hello": "t"})
        self.assertEqual(a.curl("GET", "/v1/flows", tcp=True, headers=auth)[0], 200)
        # Revoked through the CLI on a's side of the database: b refuses the very next request
        # (tokens are read from the store at each request, never cached).
        a.cli("token", "revoke", "ci")
        self.assertEqual(b.curl("GET", "/v1/flows", tcp=True, headers=auth)[0], 401)
        self.assertEqual(a.curl("GET", "/v1/flows", tcp=True, headers=auth)[0], 401)
        # A flow revoked through the CLI: b refuses its next run (a flow's versions are read at each
        # run's start), and a does too.
        self.assertEqual(b.curl("POST", "/v1/flows/hello/runs?wait=30s", {"input": {"name": "x"}})[0], 200)
        a.cli("flow", "revoke", "hello", "--note", "test")
        for d in (b, a):
            code, out, _ = d.curl("POST", "/v1/flows/hello/runs?wait=30s", {"input": {"name": "x"}})
            self.assertNotIn(code, (200, 202), out)
        a.stop()
        b.stop()

    def test_the_same_webhook_delivery_to_both_hosts_gives_one_run(self):
        config = {"triggers": [{"name": "push", "webhook": {"flow": "hello", "secret": "hook_secret"}}]}
        a, b = two_hosts(self, {"hello": serve_test.HELLO}, config=config)
        for d in (a, b):  # every host has the same secrets (docs/postgres.md, "Secrets on several hosts")
            d.cli("secret", "set", "hook_secret", input="s3cret\n")
        a.start()
        b.start()
        body = json.dumps({"name": "once"})
        ts = str(int(time.time()))
        headers = {"X-Basal-Timestamp": ts, "X-Basal-Signature": "sha256=" + hmac.new(
            b"s3cret", (ts + ".").encode() + body.encode(), hashlib.sha256).hexdigest()}
        code, first, _ = a.curl("POST", "/hooks/push", body, headers=headers)
        self.assertEqual(code, 202, first)
        code, again, hdrs = b.curl("POST", "/hooks/push", body, headers=headers)
        self.assertIn(code, (200, 202), again)
        self.assertEqual(again["id"], first["id"])
        self.assertEqual(hdrs.get("idempotent-replayed"), "true")
        self.assertEqual(a.query("SELECT count(*) FROM runs")[0][0], 1)
        a.stop()
        b.stop()


def suite():
    s = unittest.TestSuite()
    loader = unittest.defaultTestLoader
    s.addTests(loader.loadTestsFromTestCase(TakeoverTest))
    s.addTests(loader.loadTestsFromTestCase(OnceAcrossHostsTest))
    s.addTests(loader.loadTestsFromTestCase(QueuedRunsTest))
    return s


def main():
    postgres_test.main_on_a_cluster("multihost_test", suite)


if __name__ == "__main__":
    main()
