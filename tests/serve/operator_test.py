#!/usr/bin/env python3
"""basal serve as an operator sees it (issue 28), end to end against a real daemon: the run history
(GET /v1/runs, GET /v1/flows/{name}/runs), the schedules (GET /v1/schedules, POST
/v1/schedules/{name}/run), the live tail (GET /v1/tail, server-sent events) with its bounds, the
log line per run end. Run by ctest: operator_test.py --bin-dir DIR. The daemon harness is
serve_test.py's."""
import argparse
import hashlib
import hmac
import json
import os
import socket
import subprocess
import sqlite3
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_test  # noqa: E402
from serve_test import Daemon, HELLO, MANIFEST, wait_until  # noqa: E402

FAILS = ("export default async (input, host) => { console.log('about to fail', input && input.n); "
         "await host.call('kv.get', {namespace: 'secret', key: 'k'}).catch(() => null); "
         "throw new TypeError('no such thing: ' + (input && input.n)); };\n")
CHATTY = ("export default async (input) => { const line = 'x'.repeat(input.bytes || 1000); "
          "for (let i = 0; i < (input.lines || 1); i++) console.log(i + ' ' + line); return input.lines; };\n")
CHATTY_MANIFEST = {"grants": {"log": {}}, "budgets": {"deadline_ms": 20000, "cpu_ms": 15000, "log_kb": 4096,
                                                       "journal_kb": 8192}}


class Tail:
    """One GET /v1/tail over the daemon's Unix socket, read as server-sent events on a thread."""

    def __init__(self, daemon, query=""):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(60)
        self.sock.connect(daemon.socket)
        self.sock.sendall(("GET /v1/tail%s HTTP/1.1\r\nHost: basal\r\n\r\n" % query).encode())
        self.raw = b""
        self.events = []  # (event, data) in order; comments as (":", text)
        self.lock = threading.Lock()
        self.status = None
        self.closed = False
        self.reading = threading.Event()
        self.thread = None

    def start(self):
        self.reading.set()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        return self

    def _read(self):
        buf = b""
        head_done = False
        body = b""
        while True:
            self.reading.wait()
            try:
                chunk = self.sock.recv(65536)
            except OSError:
                break
            if not chunk:
                break
            buf += chunk
            if not head_done:
                if b"\r\n\r\n" not in buf:
                    continue
                head, _, buf = buf.partition(b"\r\n\r\n")
                self.status = int(head.split(b" ")[1])
                self.headers = head.decode()
                head_done = True
            # Chunked transfer coding: size line, data, CRLF.
            while True:
                line, sep, rest = buf.partition(b"\r\n")
                if not sep:
                    break
                size = int(line.split(b";")[0], 16)
                if len(rest) < size + 2:
                    break
                body += rest[:size]
                buf = rest[size + 2:]
                if size == 0:
                    self.closed = True
            while b"\n\n" in body:
                block, _, body = body.partition(b"\n\n")
                self._event(block.decode())
            if self.closed:
                break
        self.closed = True

    def _event(self, block):
        name, data = None, None
        for line in block.split("\n"):
            if line.startswith(":"):
                with self.lock:
                    self.events.append((":", line[1:].strip()))
            elif line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
        if name:
            with self.lock:
                self.events.append((name, data))

    def named(self, *names):
        with self.lock:
            return [(n, d) for n, d in self.events if n in names]

    def wait_for(self, test, timeout=30):
        wait_until(lambda: any(test(n, d) for n, d in list(self.events)), timeout)

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the reading thread; close alone may not
        except OSError:
            pass
        self.sock.close()


class RunHistoryTest(unittest.TestCase):
    def test_listing_pages_newest_first_and_stays_stable(self):
        d = Daemon(self, flows={"hello": HELLO, "fails": FAILS}).start()
        ids = []
        for i in range(7):
            code, run, _ = d.curl("POST", "/v1/flows/%s/runs?wait=30s" % ("fails" if i % 3 == 0 else "hello"),
                                  {"input": {"n": i}})
            self.assertEqual(code, 200, run)
            ids.append(run["id"])
        # Pages of 3 follow `next` to the end, newest first; a run started meanwhile is not on a later page.
        seen = []
        code, page, _ = d.curl("GET", "/v1/runs?limit=3")
        self.assertEqual(code, 200, page)
        code, newer, _ = d.curl("POST", "/v1/flows/hello/runs?wait=30s", {"input": {"n": 99}})
        while True:
            seen += [r["id"] for r in page["runs"]]
            self.assertLessEqual(len(page["runs"]), 3)
            if page["next"] is None:
                break
            self.assertIsInstance(page["next"], str)
            code, page, _ = d.curl("GET", "/v1/runs?limit=3&cursor=" + page["next"])
            self.assertEqual(code, 200, page)
        self.assertEqual(seen, list(reversed(ids)))
        # Each run is as GET /v1/runs/{id} gives it.
        code, one, _ = d.curl("GET", "/v1/runs/%d" % ids[0])
        code, listed, _ = d.curl("GET", "/v1/runs?limit=1&cursor=%d" % ids[1])
        self.assertEqual(listed["runs"], [one])
        # The newest page has the run started meanwhile.
        code, top, _ = d.curl("GET", "/v1/runs?limit=1")
        self.assertEqual([r["id"] for r in top["runs"]], [newer["id"]])

    def test_filters_and_their_refusals(self):
        d = Daemon(self, flows={"hello": HELLO, "fails": FAILS}, config={"triggers": [
            {"name": "nightly", "schedule": {"flow": "hello", "cron": "0 3 * * *", "input": {"name": "n"}}}]}).start()
        ok = [d.curl("POST", "/v1/flows/hello/runs?wait=30s", {"input": {"name": str(i)}})[1]["id"] for i in range(2)]
        failed = d.curl("POST", "/v1/flows/fails/runs?wait=30s", {"input": {"n": 1}})[1]["id"]
        code, by_hand, _ = d.curl("POST", "/v1/schedules/nightly/run?wait=30s")
        self.assertEqual(code, 200, by_hand)

        def ids(query):
            code, page, _ = d.curl("GET", "/v1/runs" + query)
            self.assertEqual(code, 200, (query, page))
            return [r["id"] for r in page["runs"]]

        self.assertEqual(ids("?flow=hello"), [by_hand["id"]] + list(reversed(ok)))
        self.assertEqual(ids("?outcome=script_error"), [failed])
        self.assertEqual(ids("?flow=fails&outcome=ok"), [])
        self.assertEqual(ids("?state=ended&trigger=schedule"), [by_hand["id"]])
        self.assertEqual(ids("?trigger=schedule:nightly"), [by_hand["id"]])
        self.assertEqual(ids("?trigger=api&outcome=ok"), list(reversed(ok)))
        self.assertEqual(ids("?since=1h"), [by_hand["id"], failed] + list(reversed(ok)))
        self.assertEqual(ids("?since=2999-01-01"), [])
        # GET /v1/flows/{name}/runs: the same with the flow fixed; POST still starts a run.
        code, page, _ = d.curl("GET", "/v1/flows/fails/runs")
        self.assertEqual((code, [r["id"] for r in page["runs"]], page["next"]), (200, [failed], None))
        code, run, _ = d.curl("POST", "/v1/flows/fails/runs?wait=30s", {"input": {"n": 2}})
        self.assertEqual((code, run["outcome"]), (200, "script_error"))
        code, page, _ = d.curl("GET", "/v1/flows/fails/runs?outcome=script_error&limit=1")
        self.assertEqual([r["id"] for r in page["runs"]], [run["id"]])
        self.assertEqual(page["next"], str(run["id"]))
        # Unknown values are 400 with a code; an unknown flow in the path is 404.
        for query, code_word in [("?outcome=fine", "bad_outcome"), ("?state=done", "bad_state"),
                                 ("?trigger=cron", "bad_trigger"), ("?since=yesterday", "bad_since"),
                                 ("?cursor=x", "bad_cursor"), ("?limit=0", "bad_limit"), ("?limit=501", "bad_limit"),
                                 ("?flow=nope", "bad_flow")]:
            code, err, _ = d.curl("GET", "/v1/runs" + query)
            self.assertEqual((code, err["error"]["code"]), (400, code_word), query)
        code, err, _ = d.curl("GET", "/v1/flows/nope/runs")
        self.assertEqual((code, err["error"]["code"]), (404, "flow_not_found"))
        code, err, _ = d.curl("GET", "/v1/flows/hello/runs?flow=fails")
        self.assertEqual((code, err["error"]["code"]), (400, "bad_flow"))

    def test_a_read_token_lists_runs_but_cannot_start_one(self):
        d = Daemon(self, tcp=True)
        read = d.cli("token", "create", "--name", "viewer", "--scope", "read").stdout.strip()
        d.start()
        auth = {"Authorization": "Bearer " + read}
        code, page, _ = d.curl("GET", "/v1/flows/hello/runs", tcp=True, headers=auth)
        self.assertEqual((code, page["runs"]), (200, []))
        code, err, _ = d.curl("POST", "/v1/flows/hello/runs", {"input": 1}, tcp=True, headers=auth)
        self.assertEqual((code, err["error"]["code"]), (403, "forbidden"))
        code, page, _ = d.curl("GET", "/v1/runs", tcp=True)
        self.assertEqual(code, 401)


class ScheduleApiTest(unittest.TestCase):
    def test_list_shows_fire_times_and_a_run_by_hand(self):
        config = {"triggers": [
            {"name": "nightly", "schedule": {"flow": "hello", "cron": "0 3 * * *", "timezone": "Europe/Berlin",
                                             "overlap": "buffer_one", "input": {"name": "night"}}},
            {"name": "github", "webhook": {"flow": "hello", "secret": "gh"}}]}
        d = Daemon(self, config=config)
        d.cli("secret", "set", "gh", input="s3cret")
        d.start()
        code, data, _ = d.curl("GET", "/v1/schedules")
        self.assertEqual(code, 200, data)
        [s] = data["schedules"]  # webhooks are not schedules
        self.assertEqual((s["name"], s["flow"], s["cron"], s["timezone"], s["overlap"]),
                         ("nightly", "hello", "0 3 * * *", "Europe/Berlin", "buffer_one"))
        self.assertEqual((s["last_fire"], s["last_run_id"]), (None, None))
        # 03:00 in Berlin is 01:00 or 02:00 UTC, within a day from now.
        next_fire = time.mktime(time.strptime(s["next_fire"][:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
        self.assertGreater(next_fire, time.time())
        self.assertLessEqual(next_fire, time.time() + 86400 + 60)
        self.assertIn(s["next_fire"][11:13], ("01", "02"))
        # By hand: the flow runs now with the schedule's input, and says who asked.
        code, run, hdrs = d.curl("POST", "/v1/schedules/nightly/run?wait=30s")
        self.assertEqual(code, 200, run)
        self.assertEqual((run["trigger"], run["outcome"], run["result"]), ("schedule:nightly", "ok", {"hello": "night"}))
        self.assertEqual(run["detail"]["by_hand"], True)
        self.assertTrue(run["detail"]["by"])
        self.assertEqual(hdrs.get("location"), "/v1/runs/%d" % run["id"])
        code, data, _ = d.curl("GET", "/v1/schedules")
        self.assertEqual(data["schedules"][0]["last_run_id"], run["id"])
        self.assertIsNone(data["schedules"][0]["last_fire"])  # a run by hand is no fire
        # Without a wait: 202 at once, the run as POST /v1/flows/{name}/runs answers it.
        code, run2, _ = d.curl("POST", "/v1/schedules/nightly/run")
        self.assertEqual(code, 202, run2)
        self.assertIn(run2["state"], ("queued", "running"))
        code, err, _ = d.curl("POST", "/v1/schedules/github/run")
        self.assertEqual((code, err["error"]["code"]), (404, "schedule_not_found"))
        code, err, _ = d.curl("POST", "/v1/schedules/nightly/run", {"input": 1})
        self.assertEqual((code, err["error"]["code"]), (400, "bad_body"))
        code, err, _ = d.curl("GET", "/v1/schedules/nightly/run")
        self.assertEqual(code, 405)

    def test_last_fire_is_the_newest_fire_among_its_runs(self):
        t = time.gmtime(time.time() - 120)
        config = {"triggers": [{"name": "daily", "schedule": {
            "flow": "hello", "cron": "%d %d * * *" % (t.tm_min, t.tm_hour), "catch_up": "10m"}}]}
        d = Daemon(self, config=config).start()
        self.assertEqual(d.stop(), 0)  # the trigger's mark is now
        con = sqlite3.connect(d.db)
        con.execute("UPDATE schedule_marks SET fire_us = fire_us - 86400000000")
        con.commit()
        con.close()
        d.start()  # the fire two minutes ago runs now
        d.wait_for_log("starts now")
        code, data, _ = d.curl("GET", "/v1/schedules")
        s = data["schedules"][0]
        self.assertEqual(s["last_fire"], time.strftime("%Y-%m-%dT%H:%M:00.000Z", t))
        self.assertIsNotNone(s["last_run_id"])
        code, run, _ = d.curl("GET", "/v1/runs/%d" % s["last_run_id"])
        self.assertEqual(run["detail"], {"scheduled_for": s["last_fire"]})


class TailTest(unittest.TestCase):
    def test_events_of_a_run_as_they_happen(self):
        d = Daemon(self, flows={"hello": HELLO, "fails": FAILS}).start()
        every = Tail(d).start()
        only_hello = Tail(d, "?flow=hello").start()
        wait_until(lambda: every.named(":") and only_hello.named(":"))
        self.assertEqual(every.status, 200)
        self.assertIn("text/event-stream", every.headers)
        code, run, _ = d.curl("POST", "/v1/flows/fails/runs?wait=30s", {"input": {"n": 7}})
        self.assertEqual(run["outcome"], "script_error")
        code, ok, _ = d.curl("POST", "/v1/flows/hello/runs?wait=30s", {"input": {"name": "ada"}})
        every.wait_for(lambda n, e: n == "activation_end" and e["run_id"] == ok["id"])
        only_hello.wait_for(lambda n, e: n == "activation_end" and e["run_id"] == ok["id"])
        mine = [(n, e) for n, e in every.named("activation_start", "log", "call", "activation_end")
                if e["run_id"] == run["id"]]
        self.assertEqual([n for n, _ in mine], ["activation_start", "log", "call", "activation_end"], mine)
        start, log, call, end = [e for _, e in mine]
        self.assertEqual((start["flow"], start["activation_id"]), ("fails", run["activation_id"]))
        self.assertEqual((log["level"], log["message"]), ("log", "about to fail 7"))
        self.assertEqual((call["name"], call["decision"], call["rule"], call["state"]),
                         ("kv.get", "deny", "no grant", "answered"))
        self.assertEqual(end["outcome"], "script_error")
        self.assertEqual(end["error"]["message"], "TypeError: no such thing: 7")
        self.assertGreaterEqual(end["ms"], 0)
        # The flow's filter: nothing of `fails` on the other tail.
        self.assertEqual({e["flow"] for n, e in only_hello.events if n != ":"}, {"hello"})
        code, err, _ = d.curl("GET", "/v1/tail?flow=no%20such")
        self.assertEqual((code, err["error"]["code"]), (400, "bad_flow"))
        every.close()
        only_hello.close()
        # A tail that left is forgotten: the subscriber bound counts it no more (below).

    def test_subscribers_are_bounded_and_a_client_that_leaves_frees_its_place(self):
        d = Daemon(self, config={"limits": {"tail_subscribers": 2}}).start()
        a, b = Tail(d).start(), Tail(d).start()
        wait_until(lambda: a.named(":") and b.named(":"))
        code, err, hdrs = d.curl("GET", "/v1/tail")
        self.assertEqual((code, err["error"]["code"]), (503, "tail_full"), err)
        self.assertEqual(hdrs.get("retry-after"), "5")
        a.close()
        c = None
        deadline = time.time() + 30
        while time.time() < deadline:  # the daemon notices the close at once; the guard is for a hang
            c = Tail(d).start()
            wait_until(lambda: c.status is not None)
            if c.status == 200:
                break
            c.close()
            time.sleep(0.1)
        self.assertEqual(c.status, 200)
        # Draining ends every stream: the client sees the answer end.
        d.stop()
        wait_until(lambda: b.closed and c.closed)

    def test_a_client_that_does_not_read_loses_events_and_is_told_how_many(self):
        # 64 KiB of buffer: a client that reads nothing while a flow logs about 2 MB loses most of it.
        d = Daemon(self, flows={"chatty": CHATTY}, config={"limits": {"tail_buffer_bytes": 65536}})
        d.approve("chatty", CHATTY, CHATTY_MANIFEST)
        d.start()
        slow = Tail(d)
        slow.reading.clear()
        slow.start()
        for _ in range(2):
            code, run, _ = d.curl("POST", "/v1/flows/chatty/runs?wait=60s", {"input": {"lines": 1000, "bytes": 1000}})
            self.assertEqual((code, run["outcome"]), (200, "ok"), run)
        # Now it reads: what was kept, then (with the first event that fits again) `dropped`. Small
        # runs until the notice came; then one more, whose events all arrive.
        slow.reading.set()
        probes = 0

        def small_run():
            code, run, _ = d.curl("POST", "/v1/flows/chatty/runs?wait=60s", {"input": {"lines": 1}})
            self.assertEqual(code, 200, run)
            return run

        def probe():
            nonlocal probes
            if slow.named("dropped"):
                return True
            small_run()
            probes += 1
            return False

        wait_until(probe, timeout=60)
        last = small_run()
        slow.wait_for(lambda n, e: n == "activation_end" and e["run_id"] == last["id"])
        names = [n for n, _ in slow.events if n != ":"]
        lost = sum(e["count"] for _, e in slow.named("dropped"))
        self.assertGreater(lost, 0)
        # Every event is accounted for, received or counted: 2 runs of 1000 lines with their start
        # and end, then the small runs' one line, start and end each.
        received = len([n for n in names if n != "dropped"])
        self.assertEqual(received + lost, 2 * 1002 + 3 * (probes + 1))
        # After the last notice, nothing more was lost: the last run came whole.
        after = names[len(names) - 1 - names[::-1].index("dropped") + 1:]
        self.assertEqual(after[-3:], ["activation_start", "log", "activation_end"])


class RunEndLogTest(unittest.TestCase):
    def test_one_journald_friendly_line_per_run_end(self):
        d = Daemon(self, flows={"hello": HELLO, "fails": FAILS}).start()
        code, ok, _ = d.curl("POST", "/v1/flows/hello/runs?wait=30s", {"input": {"name": "a"}})
        code, bad, _ = d.curl("POST", "/v1/flows/fails/runs?wait=30s", {"input": {"n": "line1\nline2\x1b[31m"}})
        d.wait_for_log("run %d ended" % bad["id"])
        lines = [l for l in d.stderr().splitlines() if " ended: " in l and l.startswith("basal serve: run ")]
        self.assertEqual(len(lines), 2, d.stderr())
        self.assertRegex(lines[0], r"^basal serve: run %d ended: flow=hello outcome=ok ms=[0-9.]+ trigger=api$" % ok["id"])
        self.assertRegex(lines[1], r"^basal serve: run %d ended: flow=fails outcome=script_error ms=[0-9.]+ trigger=api "
                                   r"error=\"TypeError: no such thing: line1\?line2\?\[31m\"$" % bad["id"])
        for line in lines:
            self.assertFalse(any(ord(c) < 0x20 for c in line), line)


def post(d, path, body, headers):
    """POST raw bytes over the daemon's socket with exactly these headers: (status, headers, body)."""
    conn = serve_test.UnixHttp(d.socket)
    try:
        conn.request("POST", path, body=body.encode() if isinstance(body, str) else body, headers=headers)
        r = conn.getresponse()
        data = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data
    finally:
        conn.close()


def as_json(data):
    return json.loads(data or b"null")


GITHUB_SECRET = "It's a Secret to Everybody"
# GitHub's documented test values ("Validating webhook deliveries", "Testing the webhook payload
# validation": docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries).
GITHUB_BODY = "Hello, World!"
GITHUB_SIGNATURE = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
ECHO = "export default async (input) => input;\n"
FLAKY = ("export default async (input, host) => { const n = await host.call('kv.incr', {namespace: 'tries', key: 'k'}); "
         "if (n < 2) throw new Error('attempt ' + n + ' fails'); return {attempt: n}; };\n")
FLAKY_MANIFEST = {"grants": {"kv.incr": {"namespaces": ["tries"]}}, "budgets": {"deadline_ms": 20000}}
RESPONDS = ("export default async (input) => { const b = input.body; if (b && b.bad) return {status: 200, headers: "
            "{'X-Bad': 'a\\r\\nInjected: 1'}}; return {status: 201, headers: {'Content-Type': 'application/json', "
            "'X-Custom': 'yes', 'Set-Cookie': 'session=1', 'Connection': 'close', 'Content-Length': '1'}, "
            "body: {text: 'hi ' + (typeof b === 'string' ? b.length : 'json')}}; };\n")


def stripe_header(secret, body, t=None):
    t = int(time.time()) if t is None else t
    mac = hmac.new(secret.encode(), ("%d." % t).encode() + body.encode(), hashlib.sha256).hexdigest()
    return "t=%d,v1=%s" % (t, mac)


def slack_headers(secret, body, t=None):
    t = int(time.time()) if t is None else t
    mac = hmac.new(secret.encode(), ("v0:%d:" % t).encode() + body.encode(), hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": str(t), "X-Slack-Signature": "v0=" + mac}


class WebhookSchemesTest(unittest.TestCase):
    def daemon(self, triggers, flows, secrets):
        d = Daemon(self, flows={}, config={"triggers": triggers})
        for name, source in flows.items():
            d.approve(name, *source) if isinstance(source, tuple) else d.approve(name, source)
        for name, value in secrets.items():
            d.cli("secret", "set", name, input=value)
        return d.start()

    def test_github_delivers_with_its_documented_signature_and_a_redelivery_gets_its_run(self):
        d = self.daemon([{"name": "gh", "webhook": {"flow": "echo", "secret": "gh", "scheme": "github"}}],
                        {"echo": ECHO}, {"gh": GITHUB_SECRET})
        headers = {"X-Hub-Signature-256": GITHUB_SIGNATURE, "X-GitHub-Event": "ping",
                   "X-GitHub-Delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958", "Content-Type": "text/plain"}
        status, _, data = post(d, "/hooks/gh", GITHUB_BODY, headers)
        self.assertEqual(status, 202, data)
        run = as_json(data)
        code, ended, _ = d.curl("GET", "/v1/runs/%d?wait=30s" % run["id"])
        self.assertEqual(ended["result"], {"body": "Hello, World!", "content_type": "text/plain", "delivery":
                                           "72d3162e-cc78-11e3-81ab-4c9367dc0958", "event": "ping", "scheme": "github",
                                           "trigger": "gh"})
        status, hdrs, data = post(d, "/hooks/gh", GITHUB_BODY, headers)  # GitHub's "Redeliver"
        self.assertEqual((status, as_json(data)["id"], hdrs.get("idempotent-replayed")), (200, run["id"], "true"))
        for changed, reason in [({"X-Hub-Signature-256": "sha256=" + "0" * 64}, "bad_signature"),
                                ({"X-GitHub-Delivery": ""}, "missing_delivery_id")]:
            status, _, data = post(d, "/hooks/gh", GITHUB_BODY, dict(headers, **changed))
            self.assertEqual((status, as_json(data)["error"]["code"]), (401, reason))
        # basal's own headers are not GitHub's: a trigger takes its scheme only.
        status, _, data = post(d, "/hooks/gh", GITHUB_BODY, d.sign(GITHUB_SECRET, GITHUB_BODY))
        self.assertEqual((status, as_json(data)["error"]["code"]), (401, "missing_signature"))
        self.assertEqual(d.metric('basal_webhooks_total{trigger="gh",verdict="bad_signature"}'), 1)

    def test_stripe_checks_its_tolerance_and_a_retried_event_gets_its_run(self):
        d = self.daemon([{"name": "pay", "webhook": {"flow": "echo", "secret": "stripe_hook", "scheme": "stripe",
                                                      "window": "10m", "respond": "wait"}}],
                        {"echo": ECHO}, {"stripe_hook": "whsec_test_secret"})
        body = json.dumps({"id": "evt_1", "object": "event", "type": "payment_intent.succeeded"})
        now = int(time.time())
        status, _, data = post(d, "/hooks/pay", body, {"Stripe-Signature": stripe_header("whsec_test_secret", body, now - 500),
                                                        "Content-Type": "application/json"})
        self.assertEqual(status, 200, data)  # within 10 minutes
        run = as_json(data)
        self.assertEqual(run["result"]["body"]["id"], "evt_1")
        self.assertEqual(run["result"]["signed_at"][:16], time.strftime("%Y-%m-%dT%H:%M", time.gmtime(now - 500)))
        # Stripe retries an event with a new timestamp: the same run.
        status, hdrs, data = post(d, "/hooks/pay", body, {"Stripe-Signature": stripe_header("whsec_test_secret", body),
                                                          "Content-Type": "application/json"})
        self.assertEqual((status, as_json(data)["id"], hdrs.get("idempotent-replayed")), (200, run["id"], "true"))
        status, _, data = post(d, "/hooks/pay", body, {"Stripe-Signature": stripe_header("whsec_test_secret", body, now - 700)})
        self.assertEqual((status, as_json(data)["error"]["code"]), (401, "stale_timestamp"))
        status, _, data = post(d, "/hooks/pay", body, {"Stripe-Signature": stripe_header("whsec_other", body)})
        self.assertEqual((status, as_json(data)["error"]["code"]), (401, "bad_signature"))

    def test_slack_url_verification_and_a_flow_that_answers_for_itself(self):
        d = self.daemon([{"name": "cmd", "webhook": {"flow": "responds", "secret": "slack_signing", "scheme": "slack",
                                                      "respond": "flow", "wait": "20s"}}],
                        {"responds": RESPONDS}, {"slack_signing": "8f742231b10e8888abcd99yyyzzz85a5"})
        check = json.dumps({"token": "x", "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P",
                            "type": "url_verification"})
        status, _, data = post(d, "/hooks/cmd", check, dict(slack_headers("8f742231b10e8888abcd99yyyzzz85a5", check),
                                                           **{"Content-Type": "application/json"}))
        self.assertEqual((status, as_json(data)), (200, {"challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}))
        self.assertEqual(d.query("SELECT count(*) FROM runs"), [(0,)])  # no run for it
        status, _, data = post(d, "/hooks/cmd", check, {"Content-Type": "application/json"})  # unsigned: no challenge
        self.assertEqual((status, as_json(data)["error"]["code"]), (401, "missing_timestamp"))
        # A slash command (a form body): the flow's {status, headers, body} is the answer, filtered.
        form = "command=%2Fhello&text=there&trigger_id=1.2.3"
        status, hdrs, data = post(d, "/hooks/cmd", form, dict(slack_headers("8f742231b10e8888abcd99yyyzzz85a5", form),
                                                              **{"Content-Type": "application/x-www-form-urlencoded"}))
        self.assertEqual(status, 201, data)
        self.assertEqual(as_json(data), {"text": "hi %d" % len(form)})
        self.assertEqual(hdrs.get("content-type"), "application/json")
        self.assertEqual(hdrs.get("x-custom"), "yes")
        self.assertNotIn("set-cookie", hdrs)
        self.assertNotEqual(hdrs.get("connection"), "close")
        self.assertEqual(hdrs.get("content-length"), str(len(data)))
        # A header that would smuggle another is refused, whole.
        bad = json.dumps({"bad": True})
        status, hdrs, data = post(d, "/hooks/cmd", bad, slack_headers("8f742231b10e8888abcd99yyyzzz85a5", bad))
        self.assertEqual((status, as_json(data)["error"]["code"]), (502, "bad_flow_response"), data)
        self.assertNotIn("injected", hdrs)

    def test_a_failed_run_answers_5xx_and_the_senders_retry_runs_again(self):
        d = self.daemon([{"name": "job", "webhook": {"flow": "flaky", "secret": "job_hook", "respond": "wait"}}],
                        {"flaky": (FLAKY, FLAKY_MANIFEST)}, {"job_hook": "s3cret"})
        body = json.dumps({"job": 1})
        headers = dict(d.sign("s3cret", body), **{"Content-Type": "application/json"})
        status, _, data = post(d, "/hooks/job", body, headers)
        first = as_json(data)
        self.assertEqual((status, first["outcome"]), (500, "script_error"), data)
        self.assertEqual(first["error"]["message"], "Error: attempt 1 fails")
        status, hdrs, data = post(d, "/hooks/job", body, headers)  # the sender retries: a new run
        second = as_json(data)
        self.assertEqual((status, second["outcome"], second["result"]), (200, "ok", {"attempt": 2}), data)
        self.assertNotEqual(second["id"], first["id"])
        self.assertIsNone(hdrs.get("idempotent-replayed"))
        status, hdrs, data = post(d, "/hooks/job", body, headers)  # and once it worked, that run
        self.assertEqual((status, as_json(data)["id"], hdrs.get("idempotent-replayed")), (200, second["id"], "true"))
        keys = [k for (k,) in d.query("SELECT idempotency_key FROM runs ORDER BY id")]
        self.assertEqual(keys[1], keys[0] + "#2")

    def test_a_delivery_sent_again_with_another_content_type_gets_the_same_run(self):
        # docs/serve.md once showed an openssl example that sent no Content-Type, and a sender that
        # then added one got 409 journal: the same signed body is the same delivery.
        d = self.daemon([{"name": "hook", "webhook": {"flow": "echo", "secret": "hook", "respond": "wait"}}],
                        {"echo": ECHO}, {"hook": "s3cret"})
        body = json.dumps({"n": 1})
        signed = d.sign("s3cret", body)
        status, _, data = post(d, "/hooks/hook", body, signed)  # no Content-Type at all
        first = as_json(data)
        self.assertEqual(status, 200, data)
        self.assertEqual(first["result"]["content_type"], "")
        status, hdrs, data = post(d, "/hooks/hook", body, dict(signed, **{"Content-Type": "application/json"}))
        self.assertEqual((status, as_json(data)["id"], hdrs.get("idempotent-replayed")), (200, first["id"], "true"), data)


def basal(*args, env=None, input=None):
    return subprocess.run([os.path.join(serve_test.BIN, "basal"), *args], capture_output=True, text=True, timeout=120,
                          input=input, env=dict(os.environ, **(env or {})))


class Lines:
    """A command's stdout read line by line on a thread (a follower that never ends on its own)."""

    def __init__(self, test, *args, env=None):
        self.proc = subprocess.Popen([os.path.join(serve_test.BIN, "basal"), *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=dict(os.environ, **(env or {})))
        test.addCleanup(lambda: self.proc.poll() is None and self.proc.kill())
        self.lines = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, pattern, timeout=30):
        import re
        wait_until(lambda: any(re.search(pattern, l) for l in list(self.lines)), timeout)
        return [l for l in self.lines if re.search(pattern, l)]


SHOUTS = ("export default async (input, host) => { console.warn('red \\x1b[31m alert'); "
          "if (input && input.fail) throw new TypeError('bad\\nline'); return 1; };\n")


class OperatorCliTest(unittest.TestCase):
    def test_runs_lists_filters_and_reads_basal_db(self):
        d = Daemon(self, flows={"hello": HELLO, "fails": FAILS}).start()
        ok = d.curl("POST", "/v1/flows/hello/runs?wait=30s", {"input": {"name": "a"}})[1]
        bad = d.curl("POST", "/v1/flows/fails/runs?wait=30s", {"input": {"n": 3}})[1]
        # BASAL_DB stands for --db; the flag wins over it.
        r = basal("runs", env={"BASAL_DB": d.db})
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertRegex(lines[0], r"^RUN +FLOW +TRIGGER +STATE +OUTCOME +CREATED +MS +ERROR$")
        self.assertRegex(lines[1], r"^%d +fails +api +ended +script_error +\S+Z +[0-9.]+ +TypeError: no such thing: 3$" % bad["id"])
        self.assertRegex(lines[2], r"^%d +hello +api +ended +ok +\S+Z +[0-9.]+$" % ok["id"])
        r = basal("runs", "--db", d.db, env={"BASAL_DB": "/nonexistent/journal.db"})
        self.assertEqual(r.returncode, 0, r.stderr)
        r = basal("runs", env={"BASAL_DB": "/nonexistent/journal.db"})
        self.assertEqual(r.returncode, 3)
        self.assertIn("no journal at /nonexistent/journal.db", r.stderr)
        # --json: the runs as the API gives them.
        r = basal("runs", "--db", d.db, "--outcome", "script_error", "--json")
        [line] = r.stdout.splitlines()
        code, api_run, _ = d.curl("GET", "/v1/runs/%d" % bad["id"])
        self.assertEqual(json.loads(line), api_run)
        self.assertEqual(basal("runs", "--db", d.db, "--flow", "hello", "--since", "1h", "--json").stdout.count("\n"), 1)
        self.assertIn("no runs in", basal("runs", "--db", d.db, "--trigger", "schedule").stdout)
        r = basal("runs", "--db", d.db, "--limit", "1")
        self.assertIn("(the newest 1; older ones: --before %d)" % bad["id"], r.stdout)
        r = basal("runs", "--db", d.db, "--limit", "1", "--before", str(bad["id"]))
        self.assertIn("\n%d " % ok["id"], r.stdout)
        for args, words in [(("--since", "yesterday"), "--since"), (("--flow", "nope"), "--flow nope"),
                            (("--outcome", "fine"), "--outcome"), (("--trigger", "cron"), "--trigger")]:
            r = basal("runs", "--db", d.db, *args)
            self.assertEqual(r.returncode, 2, (args, r.stderr))
            self.assertTrue(r.stderr.startswith("basal: usage: " + words), r.stderr)

    def test_tail_prints_each_event_escaped_and_ends_with_the_daemon(self):
        d = Daemon(self, flows={"shouts": SHOUTS}).start()
        tail = Lines(self, "tail", env={"BASAL_SOCKET": d.socket})  # the socket from the environment
        for _ in range(300):  # until the tail is subscribed (it prints nothing before a first event)
            d.curl("POST", "/v1/flows/shouts/runs?wait=30s", {"input": {}})
            if tail.lines:
                break
            time.sleep(0.1)
        code, run, _ = d.curl("POST", "/v1/flows/shouts/runs?wait=30s", {"input": {"fail": True}})
        self.assertEqual(run["outcome"], "script_error")
        [end] = tail.wait_for(r"shouts run %d ended" % run["id"])
        self.assertRegex(end, r"^\d\d:\d\d:\d\dZ shouts run %d ended script_error in [0-9.]+ ms: TypeError: bad\\nline$" % run["id"])
        [warn] = tail.wait_for(r"shouts run %d warn:" % run["id"])
        self.assertTrue(warn.endswith("warn: red \\x1b[31m alert"), warn)
        self.assertFalse(any("\x1b" in l for l in tail.lines))
        tail.wait_for(r"shouts run %d started \(activation %d\)" % (run["id"], run["activation_id"]))
        self.assertEqual(d.stop(), 0)
        out, err = tail.proc.communicate(timeout=30)
        self.assertEqual(tail.proc.returncode, 0, err)
        self.assertIn("ended the stream (it is stopping)", err)

    def test_tail_over_tcp_with_a_token_file_and_its_refusals(self):
        d = Daemon(self, tcp=True)
        token = d.cli("token", "create", "--name", "viewer", "--scope", "read").stdout.strip()
        token_file = os.path.join(d.dir, "token")
        with open(token_file, "w") as f:
            f.write(token + "\n")
        d.start()
        url = "http://127.0.0.1:%d" % d.port
        tail = Lines(self, "tail", "--url", url, "--token-file", token_file, "--flow", "hello", "--json")
        code, run = 0, None
        for _ in range(300):  # until the tail is subscribed: its run's events then reach it
            code, run, _ = d.curl("POST", "/v1/flows/hello/runs?wait=30s", {"input": {"name": "t"}})
            if any('"activation_end"' in l for l in tail.lines):
                break
            time.sleep(0.1)
        event = json.loads(tail.wait_for(r'"event":"activation_end"')[0])
        self.assertEqual((event["data"]["flow"], event["data"]["outcome"]), ("hello", "ok"))
        r = basal("tail", "--url", url, env={"BASAL_TOKEN": ""})
        self.assertEqual(r.returncode, 3)
        self.assertIn("401 unauthorized", r.stderr)
        r = basal("tail", "--url", url, "--socket", d.socket)
        self.assertEqual(r.returncode, 2, r.stderr)
        r = basal("tail", "--token-file", token_file)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--token-file requires --url", r.stderr)

    def test_a_revoked_tokens_tail_ends_within_a_keepalive_and_another_tokens_goes_on(self):
        # `basal token revoke` runs in another process: the daemon admits each TCP stream again at
        # every keepalive tick (15 s), so the revoked token's tail ends with the reason, and the
        # tail of a token still valid, checked at the same tick, goes on.
        d = Daemon(self, tcp=True)
        files = {}
        for name in ("revoked", "kept"):
            token = d.cli("token", "create", "--name", name, "--scope", "read").stdout.strip()
            files[name] = os.path.join(d.dir, name)
            with open(files[name], "w") as f:
                f.write(token + "\n")
        d.start()
        url = "http://127.0.0.1:%d" % d.port
        tails = {n: Lines(self, "tail", "--url", url, "--token-file", f, "--json") for n, f in files.items()}
        for _ in range(300):  # until both tails are subscribed
            d.curl("POST", "/v1/flows/hello/runs?wait=30s", {"input": {"name": "t"}})
            if all(any('"activation_end"' in l for l in t.lines) for t in tails.values()):
                break
            time.sleep(0.1)
        self.assertEqual(d.cli("token", "revoke", "revoked").returncode, 0)
        out, err = tails["revoked"].proc.communicate(timeout=40)  # one keepalive tick is 15 s
        self.assertEqual(tails["revoked"].proc.returncode, 3, err)
        self.assertIn("ended the stream: the bearer token is not known or was revoked", err)
        kept = tails["kept"]
        self.assertIsNone(kept.proc.poll())
        before = len(kept.lines)
        code, run, _ = d.curl("POST", "/v1/flows/hello/runs?wait=30s", {"input": {"name": "after"}})
        kept.wait_for(r'"run_id":%d' % run["id"])
        self.assertGreater(len(kept.lines), before)

    def test_schedule_list_and_run_from_the_command_line(self):
        d = Daemon(self, flows={"hello": HELLO, "fails": FAILS}, config={"triggers": [
            {"name": "nightly", "schedule": {"flow": "hello", "cron": "0 3 * * *", "input": {"name": "n"}}},
            {"name": "broken", "schedule": {"flow": "fails", "cron": "0 4 * * *", "input": {"n": 9}}}]}).start()
        r = basal("schedule", "list", "--socket", d.socket)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertRegex(lines[0], r"^NAME +FLOW +CRON +TIMEZONE +OVERLAP +NEXT FIRE +LAST FIRE +LAST RUN$")
        self.assertRegex(lines[1], r"^broken +fails ")  # by name
        self.assertRegex(lines[2], r"^nightly +hello +0 3 \* \* \* +UTC +skip +\S+T03:00:00.000Z +- +-$")
        r = basal("schedule", "run", "nightly", "--wait", "30s", "--socket", d.socket)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"^run (\d+) of schedule nightly \(flow hello\): ended, ok\n$")
        r = basal("schedule", "run", "broken", "--wait", "30s", "--json", "--socket", d.socket)
        self.assertEqual(r.returncode, 1, r.stderr)  # the flow failed
        self.assertEqual(json.loads(r.stdout)["outcome"], "script_error")
        r = basal("schedule", "list", "--json", "--socket", d.socket)
        listed = {j["name"]: j for j in map(json.loads, r.stdout.splitlines())}
        self.assertIsNotNone(listed["broken"]["last_run_id"])
        r = basal("schedule", "run", "nope", "--socket", d.socket)
        self.assertEqual(r.returncode, 2)
        self.assertIn("schedule_not_found", r.stderr)
        d.stop()
        r = basal("schedule", "list", "--socket", d.socket)
        self.assertEqual(r.returncode, 3)
        self.assertIn("cannot reach basal serve at " + d.socket, r.stderr)

    def test_journal_follow_prints_the_error_of_a_failed_activation(self):
        d = Daemon(self, flows={"fails": FAILS}).start()
        follow = Lines(self, "journal", "--follow", "--socket", d.socket)
        for _ in range(300):  # until it follows: then a run's end reaches it
            code, run, _ = d.curl("POST", "/v1/flows/fails/runs?wait=30s", {"input": {"n": 5}})
            if follow.lines:
                break
            time.sleep(0.1)
        line = follow.wait_for(r"fails +script_error")[0]
        self.assertRegex(line, r"^activation \d+ +fails +script_error +ended \S+ +error: TypeError: no such thing: 5$")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin-dir", required=True)
    args, rest = p.parse_known_args()
    serve_test.BIN = args.bin_dir
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
