#!/usr/bin/env python3
"""Long-lived durable runs end to end (docs/durable.md: retries, sleep, events) with a real basal
serve: a step retried against a flaky server without repeating what came before it, a sleep across
SIGKILL and a restart, a person's approval arriving through the API after a restart, an event that
comes first, a timeout, cancel while parked, the bounds, and 10,000 parked runs holding no worker.
Run by ctest: parked_test.py --bin-dir DIR."""
import argparse
import http.client
import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest

import serve_test
from serve_test import Daemon


class FlakyServer:
    """An HTTP server that answers 500 to the first `failures` requests, then 200; and remembers
    each request's path."""

    def __init__(self, test, failures):
        self.requests = []
        self.lock = threading.Lock()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def do_GET(self):
                with server.lock:
                    server.requests.append(self.path)
                    n = len(server.requests)
                status = 500 if n <= failures else 200
                reply = json.dumps({"attempt": n}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            do_POST = do_GET

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        test.addCleanup(self.httpd.shutdown)

    def rule(self):
        return {"url": "http://127.0.0.1:%d/" % self.port, "methods": ["GET", "POST"],
                "allow_networks": ["127.0.0.0/8"], "allow_plain_http": True}


def manifest(**extra):
    m = {"durable": True, "grants": {"kv.incr": {"namespaces": ["c"]}, "kv.get": {"namespaces": ["c"]}},
         "budgets": {"deadline_ms": 60000}}
    m.update(extra)
    return m


def pids_of_workers(daemon_pid):
    """The workers under this daemon (other tests on the machine have workers of their own)."""
    parent = {}
    names = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                stat = f.read()
        except OSError:
            continue
        # comm is in parentheses and may hold spaces; the fields after it are space separated.
        names[int(entry)] = stat[stat.index("(") + 1:stat.rindex(")")]
        parent[int(entry)] = int(stat[stat.rindex(")") + 2:].split()[1])

    def under_daemon(pid):
        while pid > 1:
            pid = parent.get(pid, 0)
            if pid == daemon_pid:
                return True
        return False

    return sorted(p for p, name in names.items() if name.startswith("ck-basal-worke") and under_daemon(p))


def status_kib(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError("no %s in /proc/%d/status" % (field, pid))


class UnixConnection(http.client.HTTPConnection):
    """HTTP/1.1 over the daemon's Unix socket, kept open: 10,000 runs started without 10,000 curls."""

    def __init__(self, path):
        super().__init__("basal", timeout=60)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(60)
        self.sock.connect(self.path)


class ParkedRunTest(unittest.TestCase):
    def start_run(self, d, flow, input=None):
        code, run, _ = d.curl("POST", "/v1/flows/%s/runs" % flow, {"input": input})
        self.assertEqual(code, 202, run)
        return run["id"]

    def run_now(self, d, run_id):
        code, run, _ = d.curl("GET", "/v1/runs/%d" % run_id)
        self.assertEqual(code, 200 if run["state"] == "ended" else 202, run)
        return run

    def wait_state(self, d, run_id, state, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            run = self.run_now(d, run_id)
            if run["state"] == state:
                return run
            time.sleep(0.05)
        raise AssertionError("run %d never became %s: %s" % (run_id, state, self.run_now(d, run_id)))

    def wait_end(self, d, run_id, timeout=60):
        code, run, _ = d.curl("GET", "/v1/runs/%d?wait=%ds" % (run_id, timeout), timeout=timeout + 5)
        self.assertIn(code, (200, 202), run)
        if run["state"] != "ended":
            run = self.wait_state(d, run_id, "ended", timeout)
        return run

    def calls(self, d, run_id):
        code, page, _ = d.curl("GET", "/v1/runs/%d/calls?limit=1000" % run_id)
        self.assertEqual(code, 200, page)
        return page["calls"]

    # -- retries ----------------------------------------------------------------------------------

    def test_a_step_that_fails_twice_succeeds_on_the_third_attempt_without_repeating_what_came_before(self):
        server = FlakyServer(self, failures=2)
        source = """export default async (input, host) => {
  // An effect that must not repeat: an increment before the step.
  await host.call("kv.incr", {namespace: "c", key: "before"});
  const got = await step("fetch order", async () => {
    const r = await fetch("http://127.0.0.1:" + input.port + "/order/7");
    if (r.status !== 200) throw new Error("the order service answered " + r.status);
    return await r.json();
  });
  return {got, before: await host.call("kv.get", {namespace: "c", key: "before"})};
};
"""
        m = manifest(retry={"max_attempts": 3, "backoff": {"initial_ms": 300, "factor": 2}})
        m["grants"]["http.fetch"] = {"rules": [server.rule()]}
        d = Daemon(self, flows={})
        d.approve("order", source, m)
        d.start()
        run_id = self.start_run(d, "order", {"port": server.port})
        # Between attempts the run is visible as retrying, with its next attempt's time.
        retrying = self.wait_state(d, run_id, "retrying")
        self.assertEqual(retrying["attempt"], 1)
        self.assertIn("wakes", retrying)
        self.assertEqual(retrying["detail"]["attempt"], 2)
        self.assertEqual(retrying["detail"]["failed"]["outcome"], "script_error")
        self.assertIn("answered 500", retrying["detail"]["failed"]["message"])
        run = self.wait_end(d, run_id)
        self.assertEqual((run["outcome"], run["attempt"]), ("ok", 3), run)
        self.assertEqual(run["result"], {"got": {"attempt": 3}, "before": 1},
                         "the increment before the step happened once over three attempts")
        self.assertEqual(len(server.requests), 3)
        # The journal: three activations; the increment journaled once, the step's calls each attempt.
        calls = self.calls(d, run_id)
        self.assertEqual(len({c["activation_id"] for c in calls}), 3)
        self.assertEqual([c["name"] for c in calls].count("kv.incr"), 1)
        self.assertEqual([c["name"] for c in calls].count("http.fetch"), 3)
        ends = [c["args"] for c in calls if c["name"] == "run.step" and c["args"]["phase"] == "end"]
        self.assertEqual([e["ok"] for e in ends], [False, False, True])
        # The attempts are in basal journal too.
        out = d.cli("journal", "--run", str(run_id)).stdout
        heads = [line for line in out.splitlines() if line.startswith("activation ")]
        self.assertEqual([h.split()[-1] for h in heads], ["script_error", "script_error", "ok"], out)
        self.assertEqual(d.stop(), 0)

    def test_retries_end_when_the_attempts_are_spent_and_a_run_can_be_cancelled_between_attempts(self):
        source = """export default async () => { await step("always", async () => { throw new Error("no"); }); };"""
        d = Daemon(self, flows={})
        d.approve("fails", source, manifest(retry={"max_attempts": 2, "backoff": {"initial_ms": 100}}))
        d.approve("slow", source, manifest(retry={"max_attempts": 5, "backoff": {"initial_ms": 3600000}}))
        d.start()
        run_id = self.start_run(d, "fails")
        run = self.wait_end(d, run_id)
        self.assertEqual((run["outcome"], run["attempt"]), ("script_error", 2), run)
        # A run waiting an hour for its next attempt is cancelled there.
        slow = self.start_run(d, "slow")
        self.wait_state(d, slow, "retrying")
        journal = d.cli("journal", "--run", str(slow)).stdout
        self.assertRegex(journal, r"parked    attempt 2 at \d{4}-\d\d-\d\d", journal)
        code, run, _ = d.curl("POST", "/v1/runs/%d/cancel" % slow)
        self.assertEqual(code, 200, run)
        self.assertEqual((run["state"], run["outcome"]), ("ended", "cancelled"), run)
        self.assertEqual(d.stop(), 0)

    def test_a_post_the_deadline_cut_short_is_in_doubt_not_sent_again_by_a_retry(self):
        hits = []

        class Slow(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def do_POST(self):
                hits.append(self.path)
                time.sleep(3)
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
        httpd.daemon_threads = True
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        self.addCleanup(httpd.shutdown)
        source = """export default async (input, host) => {
  await fetch("http://127.0.0.1:%d/charge", {method: "POST", body: "42"});
};
""" % httpd.server_address[1]
        rule = {"url": "http://127.0.0.1:%d/" % httpd.server_address[1], "methods": ["POST"],
                "allow_networks": ["127.0.0.0/8"]}
        d = Daemon(self, flows={})
        d.approve("charge", source, manifest(grants={"http.fetch": {"rules": [rule]}}, budgets={"deadline_ms": 500},
                                             retry={"max_attempts": 3, "on": ["deadline"],
                                                    "backoff": {"initial_ms": 100}}))
        d.start()
        run_id = self.start_run(d, "charge")
        run = self.wait_state(d, run_id, "needs_reconciliation")
        self.assertEqual(hits, ["/charge"], "the POST was sent once")
        self.assertEqual([c["name"] for c in run["detail"]["in_doubt"]], ["http.fetch"], run)
        self.assertIn("its activation ended while it ran", run["detail"]["message"])
        self.assertEqual(d.stop(), 0)

    # -- sleep ------------------------------------------------------------------------------------

    def test_a_run_sleeping_across_a_sigkill_and_a_restart_wakes_at_its_time(self):
        source = """export default async (input, host) => {
  const before = Date.now();
  await host.call("kv.incr", {namespace: "c", key: "n"});
  await sleep(3000);
  await host.call("kv.incr", {namespace: "c", key: "n"});
  return {slept: Date.now() - before, n: await host.call("kv.get", {namespace: "c", key: "n"})};
};
"""
        d = Daemon(self, flows={})
        d.approve("nap", source, manifest())
        d.start()
        run_id = self.start_run(d, "nap")
        run = self.wait_state(d, run_id, "sleeping")
        wakes = run["wakes"]
        self.assertEqual(pids_of_workers(d.proc.pid), [], "a sleeping run holds no worker")
        journal = d.cli("journal", "--run", str(run_id)).stdout
        self.assertRegex(journal, r"parked    sleeping until \d{4}-\d\d-\d\d", journal)
        d.stop(signal.SIGKILL)
        self.assertEqual(d.query("SELECT state FROM runs WHERE id=?", run_id), [("sleeping",)])
        d.start()
        run = self.wait_end(d, run_id)
        self.assertEqual(run["outcome"], "ok", run)
        self.assertGreaterEqual(run["result"]["slept"], 3000)
        self.assertEqual(run["result"]["n"], 2, "the increment before the sleep was not repeated")
        self.assertGreaterEqual(run["ended"], wakes, "it did not wake before its time")
        self.assertEqual(d.stop(), 0)

    # -- events -----------------------------------------------------------------------------------

    def test_an_approval_flow_parks_the_daemon_restarts_and_the_event_arrives_through_the_api(self):
        source = """export default async (input, host) => {
  console.log("please approve deploy " + input.version + ": POST /v1/runs/<id>/events/approved");
  const decision = await waitForEvent("approved", {timeoutMs: 86400000});
  return {deployed: input.version, approved_by: decision.sender, note: decision.data.note};
};
"""
        d = Daemon(self, flows={})
        d.approve("deploy", source, manifest())
        d.start()
        run_id = self.start_run(d, "deploy", {"version": "1.4.2"})
        run = self.wait_state(d, run_id, "waiting")
        self.assertEqual(run["waiting_for"], {"event": "approved"})
        self.assertIn("wakes", run)
        # Visible: the gauge by flow and state, and basal journal.
        self.assertEqual(d.metric('basal_runs{flow="deploy",state="waiting"}'), 1)
        journal = d.cli("journal", "--run", str(run_id)).stdout
        self.assertRegex(journal, r"parked    waiting for event approved, at most until \d{4}-\d\d-\d\d", journal)
        self.assertEqual(d.stop(), 0)
        d.start()
        # An event of another name is kept; the wait goes on.
        code, sent, _ = d.curl("POST", "/v1/runs/%d/events/rejected" % run_id, {"note": "not this one"})
        self.assertEqual((code, sent["delivered"]), (202, False), sent)
        self.assertEqual(self.run_now(d, run_id)["state"], "waiting")
        code, sent, _ = d.curl("POST", "/v1/runs/%d/events/approved" % run_id, {"note": "go"})
        self.assertEqual((code, sent["delivered"]), (202, True), sent)
        self.assertEqual(sent["run"]["state"], "queued", sent)
        self.assertNotIn("outcome", sent["run"], "the parked activation's end is not the run's outcome")
        run = self.wait_end(d, run_id)
        self.assertEqual(run["outcome"], "ok", run)
        self.assertEqual(run["result"]["deployed"], "1.4.2")
        self.assertEqual(run["result"]["note"], "go")
        self.assertTrue(run["result"]["approved_by"], run)
        # The event and who sent it are journaled with the wait's answer.
        rows = d.query("SELECT name, sender, delivered_call IS NOT NULL FROM run_events WHERE run_id=? ORDER BY id", run_id)
        self.assertEqual([(r[0], r[2]) for r in rows], [("rejected", 0), ("approved", 1)])
        self.assertEqual(rows[1][1], run["result"]["approved_by"])
        self.assertEqual(d.metric('basal_runs{flow="deploy",state="waiting"}'), 0)
        self.assertEqual(d.stop(), 0)

    def test_an_event_that_arrives_before_the_run_waits_is_kept_for_it(self):
        source = """export default async (input, host) => {
  await sleep(2000);
  const e = await waitForEvent("paid", {timeoutMs: 60000});
  return e.data;
};
"""
        d = Daemon(self, flows={})
        d.approve("order", source, manifest())
        d.start()
        run_id = self.start_run(d, "order")
        self.wait_state(d, run_id, "sleeping")
        code, sent, _ = d.curl("POST", "/v1/runs/%d/events/paid" % run_id, {"amount": 12})
        self.assertEqual((code, sent["delivered"]), (202, False), sent)
        run = self.wait_end(d, run_id)
        self.assertEqual((run["outcome"], run["result"]), ("ok", {"amount": 12}), run)
        # Its wait never parked: the kept event answered it at once.
        self.assertEqual(len({c["activation_id"] for c in self.calls(d, run_id)}), 2)
        self.assertEqual(d.stop(), 0)

    def test_a_webhook_delivers_a_keyed_event_to_the_run_that_waits_for_its_key(self):
        source = """export default async (input) => {
  const e = await waitForEvent("paid", {key: input.order, timeoutMs: 60000});
  return {order: input.order, amount: e.data.amount, sender: e.sender};
};
"""
        d = Daemon(self, flows={}, config={"triggers": [
            {"name": "payments", "webhook": {"flow": "checkout", "secret": "pay_hook",
                                             "event": {"name": "paid", "key": "/order/id"}}}]})
        d.approve("checkout", source, manifest())
        d.cli("secret", "set", "pay_hook", input="s3cret\n")
        d.start()

        def deliver(payload):
            body = json.dumps(payload)
            return d.curl("POST", "/hooks/payments", body, headers=d.sign("s3cret", body))

        waiting = self.start_run(d, "checkout", {"order": "A-17"})
        other = self.start_run(d, "checkout", {"order": "A-18"})
        self.wait_state(d, waiting, "waiting")
        self.wait_state(d, other, "waiting")
        self.assertEqual(self.run_now(d, waiting)["waiting_for"], {"event": "paid", "key": "A-17"})
        body = json.dumps({"order": {"id": "A-17"}, "amount": 12})
        headers = d.sign("s3cret", body)
        code, sent, _ = d.curl("POST", "/hooks/payments", body, headers=headers)
        self.assertEqual((code, sent["delivered"], sent["run_id"]), (202, True, waiting), sent)
        self.assertNotIn("run", sent, "the sender learns the run's id, not its input or result")
        run = self.wait_end(d, waiting)
        self.assertEqual(run["result"], {"order": "A-17", "amount": 12, "sender": "webhook:payments"}, run)
        self.assertEqual(self.run_now(d, other)["state"], "waiting", "the other key's run still waits")
        # The sender's retry of the same delivery is not a second event.
        code, again, _ = d.curl("POST", "/hooks/payments", body, headers=headers)
        self.assertEqual((code, again["event_id"], again["replayed"]), (202, sent["event_id"], True), again)
        self.assertEqual(d.query("SELECT count(*) FROM run_events WHERE flow='checkout'"), [(1,)])
        # An event whose run has not waited yet is kept for it (an integer key too).
        code, early, _ = deliver({"order": {"id": 19}, "amount": 7})
        self.assertEqual((code, early["delivered"]), (202, False), early)
        late = self.start_run(d, "checkout", {"order": "19"})
        run = self.wait_end(d, late)
        self.assertEqual(run["result"]["amount"], 7, run)
        # A payload without the key, or not JSON, is refused and names what is missing.
        code, err, _ = deliver({"order": {}, "amount": 1})
        self.assertEqual((code, err["error"]["code"]), (400, "no_event_key"), err)
        self.assertIn("/order/id", err["error"]["message"])
        code, err, _ = d.curl("POST", "/hooks/payments", "not json", headers=d.sign("s3cret", "not json"))
        self.assertEqual((code, err["error"]["code"]), (400, "bad_event"), err)
        # And an unsigned one never reaches the runs.
        code, err, _ = d.curl("POST", "/hooks/payments", body)
        self.assertEqual(code, 401, err)
        self.assertEqual(d.metric('basal_webhooks_total{trigger="payments",verdict="event"}'), 2)
        self.assertEqual(d.metric('basal_webhooks_total{trigger="payments",verdict="no_event_key"}'), 1)
        self.assertEqual(self.run_now(d, other)["state"], "waiting")
        self.assertEqual(d.stop(), 0)
        # The store keeps the delivery's id with its event: a retry after a restart is still the
        # same event, not a second one.
        d.start()
        code, again, _ = d.curl("POST", "/hooks/payments", body, headers=headers)
        self.assertEqual((code, again["event_id"], again["replayed"]), (202, sent["event_id"], True), again)
        self.assertEqual(d.query("SELECT count(*) FROM run_events WHERE flow='checkout' AND delivery_id <> ''"), [(2,)])
        self.assertEqual(d.stop(), 0)

    def test_a_wait_that_times_out_throws_a_timeout_error_the_script_catches(self):
        source = """export default async () => {
  try {
    await waitForEvent("never", {timeoutMs: 1500});
    return "no timeout";
  } catch (e) {
    return e.name + ": " + e.message;
  }
};
"""
        d = Daemon(self, flows={})
        d.approve("late", source, manifest())
        d.start()
        run_id = self.start_run(d, "late")
        self.wait_state(d, run_id, "waiting")
        run = self.wait_end(d, run_id)
        self.assertEqual(run["outcome"], "ok", run)
        self.assertTrue(run["result"].startswith("TimeoutError: "), run)
        self.assertIn("never", run["result"])
        self.assertEqual(d.stop(), 0)

    def test_cancel_while_parked_through_the_api_and_the_cli(self):
        source = """export default async () => { await sleep(3600000); await waitForEvent("x"); };"""
        d = Daemon(self, flows={})
        d.approve("parks", source, manifest())
        d.start()
        sleeping = self.start_run(d, "parks")
        self.wait_state(d, sleeping, "sleeping")
        code, run, _ = d.curl("POST", "/v1/runs/%d/cancel" % sleeping)
        self.assertEqual(code, 200, run)
        self.assertEqual((run["state"], run["outcome"]), ("ended", "cancelled"), run)
        # An event for a run that has ended is refused.
        code, err, _ = d.curl("POST", "/v1/runs/%d/events/x" % sleeping, {})
        self.assertEqual((code, err["error"]["code"]), (409, "run_not_waiting"), err)
        other = self.start_run(d, "parks")
        self.wait_state(d, other, "sleeping")
        r = d.cli("run", "cancel", str(other), "--note", "not needed")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.run_now(d, other)["outcome"], "cancelled")
        self.assertEqual(d.stop(), 0)

    def test_basal_run_signal_delivers_an_event_and_the_daemon_resumes_the_run(self):
        source = """export default async () => (await waitForEvent("go")).data;"""
        d = Daemon(self, flows={})
        d.approve("signal", source, manifest())
        d.start()
        run_id = self.start_run(d, "signal")
        self.wait_state(d, run_id, "waiting")
        r = d.cli("run", "signal", str(run_id), "go", "--data", '{"from": "cli"}')
        self.assertIn("basal serve resumes it", r.stderr)
        run = self.wait_end(d, run_id)
        self.assertEqual((run["outcome"], run["result"]), ("ok", {"from": "cli"}), run)
        # Bad input is refused before anything is written.
        r = d.cli("run", "signal", str(run_id), "go", "--data", "{not json", check=False)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertEqual(d.stop(), 0)

    # -- bounds -----------------------------------------------------------------------------------

    def test_the_bounds_on_parked_runs_and_events(self):
        source = """export default async () => {
  try { await sleep(3600000); } catch (e) { return e.name + ": " + e.message; }
};
"""
        waiter = """export default async () => (await waitForEvent("e")).data;"""
        d = Daemon(self, flows={}, config={"limits": {"max_parked_runs_per_flow": 2, "max_pending_events_per_run": 2,
                                                      "max_event_bytes": 1024}})
        d.approve("sleeper", source, manifest())
        d.approve("waiter", waiter, manifest())
        d.start()
        parked = [self.start_run(d, "sleeper") for _ in range(2)]
        for run_id in parked:
            self.wait_state(d, run_id, "sleeping")
        third = self.start_run(d, "sleeper")
        run = self.wait_end(d, third)
        self.assertEqual(run["outcome"], "ok", run)
        self.assertTrue(run["result"].startswith("LimitError: "), run)
        self.assertIn("max_parked_runs_per_flow", run["result"])
        # Events: a payload past max_event_bytes is 413; past max_pending_events_per_run, 429.
        run_id = parked[0]
        code, err, _ = d.curl("POST", "/v1/runs/%d/events/e" % run_id, {"x": "y" * 2000})
        self.assertEqual((code, err["error"]["code"]), (413, "event_too_large"), err)
        for _ in range(2):
            code, sent, _ = d.curl("POST", "/v1/runs/%d/events/e" % run_id, {"n": 1})
            self.assertEqual(code, 202, sent)
        code, err, headers = d.curl("POST", "/v1/runs/%d/events/e" % run_id, {"n": 1})
        self.assertEqual((code, err["error"]["code"]), (429, "too_many_events"), err)
        self.assertIn("max_pending_events_per_run", err["error"]["message"])
        code, err, _ = d.curl("POST", "/v1/runs/%d/events/no%%20spaces" % run_id, {})
        self.assertEqual((code, err["error"]["code"]), (400, "bad_event"), err)
        code, err, _ = d.curl("POST", "/v1/runs/%d/events/e" % run_id, "{broken")
        self.assertEqual((code, err["error"]["code"]), (400, "bad_event"), err)
        code, err, _ = d.curl("POST", "/v1/runs/999999/events/e", {})
        self.assertEqual((code, err["error"]["code"]), (404, "run_not_found"), err)
        # The allowed path still works: a waiting run takes an event within the bounds.
        w = self.start_run(d, "waiter")
        self.wait_state(d, w, "waiting")
        code, sent, _ = d.curl("POST", "/v1/runs/%d/events/e" % w, {"ok": True})
        self.assertEqual((code, sent["delivered"]), (202, True), sent)
        self.assertEqual(self.wait_end(d, w)["result"], {"ok": True})
        self.assertEqual(d.stop(), 0)

    def test_an_event_nobody_waits_for_is_dropped_after_its_retention(self):
        source = """export default async () => {
  await sleep(2500);
  try { return (await waitForEvent("late", {timeoutMs: 0})).data; } catch (e) { return e.name; }
};
"""
        d = Daemon(self, flows={}, config={"limits": {"event_retention": "1s"}})
        d.approve("kept", source, manifest())
        d.start()
        run_id = self.start_run(d, "kept")
        self.wait_state(d, run_id, "sleeping")
        code, sent, _ = d.curl("POST", "/v1/runs/%d/events/late" % run_id, {"v": 1})
        self.assertEqual((code, sent["delivered"]), (202, False), sent)
        run = self.wait_end(d, run_id)
        self.assertEqual(run["result"], "TimeoutError", "the event expired before the run waited for it")
        self.assertEqual(d.query("SELECT count(*) FROM run_events WHERE run_id=?", run_id), [(0,)])
        self.assertEqual(d.stop(), 0)

    # -- scale ------------------------------------------------------------------------------------

    def test_ten_thousand_parked_runs_cost_rows_not_workers(self):
        source = """export default async () => { await sleep(86400000); };"""
        d = Daemon(self, flows={}, config={"limits": {"queue_max": 20000, "max_workers": 8}})
        d.approve("idle", source, manifest())
        d.start()
        pid = d.proc.pid

        connection = UnixConnection(d.socket)
        self.addCleanup(connection.close)

        def park(count):
            ids = []
            for _ in range(count):
                connection.request("POST", "/v1/flows/idle/runs", body=json.dumps({"input": None}),
                                   headers={"Content-Type": "application/json"})
                answer = connection.getresponse()
                run = json.loads(answer.read())
                self.assertEqual(answer.status, 202, run)
                ids.append(run["id"])
            deadline = time.time() + 600
            while time.time() < deadline:
                n = d.query("SELECT count(*) FROM runs WHERE flow='idle' AND state='sleeping'")[0][0]
                if n >= len(ids) + parked_before[0]:
                    break
                time.sleep(0.5)
            parked_before[0] += len(ids)
            return ids

        parked_before = [0]
        park(1000)
        rss_1k = status_kib(pid, "VmRSS")
        fds_1k = len(os.listdir("/proc/%d/fd" % pid))
        park(9000)
        self.assertEqual(d.query("SELECT count(*) FROM runs WHERE state='sleeping'"), [(10000,)])
        rss_10k = status_kib(pid, "VmRSS")
        fds_10k = len(os.listdir("/proc/%d/fd" % pid))
        self.assertEqual(pids_of_workers(pid), [], "no worker is held by a parked run")
        self.assertLessEqual(fds_10k, fds_1k + 4, "descriptors flat")
        # Memory flat: 9,000 more parked runs add no per-run state to the daemon (the store's page
        # cache may grow a little).
        self.assertLess(rss_10k - rss_1k, 16 * 1024, "RSS %d KiB at 1,000 parked, %d KiB at 10,000" % (rss_1k, rss_10k))
        self.assertEqual(d.metric('basal_runs{flow="idle",state="sleeping"}'), 10000)
        self.assertEqual(d.stop(), 0)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin-dir", required=True)
    # ctest runs the scale test apart (it takes minutes): "main" is every other test, "scale" it alone.
    parser.add_argument("--part", choices=["all", "main", "scale"], default="all")
    args, rest = parser.parse_known_args()
    serve_test.BIN = args.bin_dir
    if args.part != "all":
        names = unittest.TestLoader().getTestCaseNames(ParkedRunTest)
        chosen = [n for n in names if ("ten_thousand" in n) == (args.part == "scale")]
        suite = unittest.TestSuite(ParkedRunTest(n) for n in chosen)
        result = unittest.TextTestRunner(verbosity=2).run(suite)
        sys.exit(0 if result.wasSuccessful() and result.testsRun == len(chosen) > 0 else 1)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
