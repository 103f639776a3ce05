#!/usr/bin/env python3
"""Hosts whose clocks are off by seconds, on one PostgreSQL database (issue 27 item 8;
docs/postgres.md, "Several hosts"). Whole daemons and `basal run`, not the store alone: each
skewed process runs under libfaketime (Debian's `faketime`, which scripts/setup.sh installs), its
wall clock FAKETIME seconds off the server's and its monotonic clock left alone (a machine whose
NTP is off, not one whose timers run at another rate).

The worker never sees the preload: the daemon spawns ck-basal-worker with an empty environment
(src/parent/platform/linux/linux_launcher.cpp), so LD_PRELOAD stops at the parent and the
worker's confinement is the same as anywhere. One artefact of libfaketime in the parent: it moves
every clock it does not know by the offset, CPU-time clocks included, so the parent reads a fresh
worker's CPU clock (clock_getcpuclockid) as the offset plus what it used (90 s ahead: "the worker
used 90001 ms of CPU"). A machine whose wall clock is off has no such thing; the flows here get a
CPU budget (CPU_MS) that the offset cannot exhaust, and nothing else is loosened.

What runs here:
- three `basal serve` hosts on one database with a 2 s lease: A honest, B SKEW seconds ahead, C
  SKEW seconds behind (SKEW > the lease, so a host judging leases by its own clock would see
  every other host's lapsed, or write its own lapsed). Each holds a durable run in a held HTTP call
  across a cron minute: no host closes another's activation (each run ends ok in its first
  activation, no resume), the minute fires exactly once across the three, and runs go through
  every host;
- `basal run` on PostgreSQL writes, renews and judges leases by the server's clock
  (docs/postgres.md): one 90 s behind holds a call while an honest host with a 2 s lease
  heartbeats, and keeps its activation; one 90 s ahead starts while another machine's activation
  has 30 s of lease left, and closes nothing.

Run by ctest: clock_skew_test.py --bin-dir DIR."""
import json
import os
import shutil
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import serve_test  # noqa: E402
from durable_test import HoldServer, durable_manifest, COUNTER  # noqa: E402
import postgres_test  # noqa: E402
from multihost_test import start_run, wait_run  # noqa: E402

LEASE = "2s"
SKEW = 5  # seconds; more than the lease
# Above every offset here (libfaketime's CPU clock artefact, above); deadlines stay as they were.
CPU_MS = 600000


def budgeted(manifest):
    return dict(manifest, budgets=dict(manifest.get("budgets", {}), cpu_ms=CPU_MS))


def faketime_env(offset):
    """The environment the `faketime` wrapper gives a program, with `offset` (e.g. "+5s"), its
    monotonic clock left as it is. Read from the wrapper itself (it knows where Debian put the
    library); the daemon is then started directly, so its pid is the test's to signal."""
    wrapper = shutil.which("faketime")
    if not wrapper:
        raise AssertionError("no `faketime`: install Debian's faketime (scripts/setup.sh does)")
    out = subprocess.run([wrapper, "--exclude-monotonic", "-f", offset, "env"], capture_output=True, text=True,
                         check=True, timeout=30).stdout
    env = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    wanted = {k: env[k] for k in ("LD_PRELOAD", "FAKETIME", "FAKETIME_DONT_FAKE_MONOTONIC") if k in env}
    if "LD_PRELOAD" not in wanted or wanted.get("FAKETIME") != offset:
        raise AssertionError("faketime set no LD_PRELOAD/FAKETIME: %s" % out)
    # The asan build (scripts/test.sh) links ASan's runtime dynamically, and ASan refuses to start
    # when another preload comes before it ("ASan runtime does not come first"); the order does not
    # matter here (libfaketime replaces only time functions). Ignored by a build without ASan.
    wanted["ASAN_OPTIONS"] = ":".join(o for o in (os.environ.get("ASAN_OPTIONS"), "verify_asan_link_order=0") if o)
    return wanted


def clock_of(env):
    """This machine's time as a process under `env` sees it, minus the real time, in seconds."""
    seen = subprocess.run(["date", "+%s.%N"], capture_output=True, text=True, env=dict(os.environ, **env),
                          check=True, timeout=30).stdout
    return float(seen) - time.time()


def server_now_us(d):
    return d.query("SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint")[0][0]


SCHEDULED = "export default async (input, host) => ({fired: true});\n"


class SkewedHostsTest(unittest.TestCase):
    def test_skewed_hosts_keep_their_leases_and_fire_each_minute_once(self):
        ahead, behind = faketime_env("+%ds" % SKEW), faketime_env("-%ds" % SKEW)
        self.assertGreater(clock_of(ahead), SKEW - 1, "faketime moved the clock ahead")
        self.assertLess(clock_of(behind), -(SKEW - 1), "faketime moved the clock behind")
        server = HoldServer(self)
        config = {"triggers": [{"name": "tick", "schedule": {"cron": "* * * * *", "flow": "tick", "timezone": "UTC"}}]}
        hosts = {}
        for name in ("a", "b", "c"):
            d = serve_test.Daemon(self, config=dict(config, host_id="host-" + name, lease=LEASE), flows={})
            if hosts:
                d.db, d.query = hosts["a"].db, hosts["a"].query
            hosts[name] = d
        a, b, c = hosts["a"], hosts["b"], hosts["c"]
        a.approve("counter", COUNTER, budgeted(durable_manifest(server)))
        a.approve("hello", serve_test.HELLO, budgeted(serve_test.MANIFEST))
        a.approve("tick", SCHEDULED, budgeted(serve_test.MANIFEST))
        # Start between 40 and 48 s past a minute (real time): B, ahead by SKEW, is then still
        # before the next minute, which B fires first, A SKEW seconds later and C last.
        while not 40 <= time.time() % 60 < 48:
            time.sleep(0.2)
        minute = (int(time.time()) // 60 + 1) * 60
        a.start()
        b.start(env=ahead)
        c.start(env=behind)
        runs = {}
        for name, d in hosts.items():
            runs[name] = start_run(self, d, "counter", {"port": server.port, "tag": name})
        server.wait_for(3)
        # Every host's activation stays with it across the minute, many heartbeats (lease/3) long.
        while time.time() < minute + SKEW + 4:
            time.sleep(0.5)
        for name, d in hosts.items():
            acts = d.query("SELECT owner_pid, outcome FROM activations WHERE run_id=? ORDER BY id", runs[name])
            self.assertEqual(acts, [(d.proc.pid, None)], "host %s's run %d: %s" % (name, runs[name], acts))
        server.released.set()
        for name, d in hosts.items():
            run = wait_run(self, d, runs[name])
            self.assertEqual((run["state"], run["outcome"], run["resumes"]), ("ended", "ok", 0), run)
        self.assertEqual(a.query("SELECT value FROM kv WHERE namespace='c' AND key='n'"), [("30",)])
        # Runs go through every host, and each run's times are its host's clock.
        for name, d in hosts.items():
            code, out, _ = d.curl("POST", "/v1/flows/hello/runs?wait=30s", {"input": {"name": name}})
            self.assertEqual((code, out["outcome"]), (200, "ok"), out)
            created = d.query("SELECT created_us FROM runs WHERE id=?", out["id"])[0][0] / 1e6
            skew = {"a": 0, "b": SKEW, "c": -SKEW}[name]
            self.assertLess(abs(created - time.time() - skew), 3, "host %s's clock is %+d s" % (name, skew))
        # The minute fired once across the three hosts (by whichever saw it first), and no fire
        # time has two runs.
        deadline = time.time() + 30
        while time.time() < deadline and a.query("SELECT count(*) FROM runs WHERE state <> 'ended'")[0][0] > 0:
            time.sleep(0.1)
        rows = a.query("SELECT state_detail, outcome FROM runs WHERE triggered_by='schedule:tick'")
        fires = [json.loads(r[0])["scheduled_for"] for r in rows]
        expected = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(minute))
        self.assertEqual(sum(1 for f in fires if f.startswith(expected)), 1, rows)
        self.assertEqual(len(fires), len(set(fires)), "a fire time has two runs: %s" % rows)
        self.assertEqual({r[1] for r in rows}, {"ok"}, rows)
        for name, d in hosts.items():
            self.assertNotIn("took over", d.stderr(), "host %s" % name)
            self.assertEqual(d.stop(), 0)


class SkewedBasalRunTest(unittest.TestCase):
    def test_basal_run_leases_are_the_servers_clock(self):
        server = HoldServer(self)
        a = serve_test.Daemon(self, config={"host_id": "host-a", "lease": LEASE}, flows={})
        a.approve("counter", COUNTER, budgeted(durable_manifest(server)))
        a.start()
        held = start_run(self, a, "counter", {"port": server.port, "tag": "serve"})
        server.wait_for(1)
        # 90 s ahead (more than basal run's 60 s lease): starting, it closes no live lease of A's.
        hello = os.path.join(a.dir, "hello-adhoc.js")
        with open(hello, "w") as f:
            f.write("export default (input) => input;\n")
        manifest = os.path.join(a.dir, "adhoc.json")
        with open(manifest, "w") as f:
            json.dump(budgeted({"grants": {"http.fetch": {"rules": [server.rule()]}}}), f)
        # A live lease of a process on another machine (30 s left by the server's clock): a process
        # on this machine is judged by whether it is alive, one elsewhere only by its lease.
        name = a.db.rsplit("/", 1)[-1].split("?")[0]
        elsewhere = postgres_test.CLUSTER.psql(
            "INSERT INTO basal.activations(flow, source_hash, manifest_hash, input, start_us, owner_host, owner_pid, "
            "owner_start_ticks, lease_until_us) VALUES ('elsewhere', 'h', 'h', 'null', %d, 'another-machine', 4242, 1, "
            "(extract(epoch FROM clock_timestamp()) * 1000000)::bigint + 30000000) RETURNING id"
            % int(time.time() * 1e6), database=name).split()[0]
        r = subprocess.run([os.path.join(serve_test.BIN, "basal"), "run", hello, "--manifest", manifest, "--input",
                            "7", "--db", a.db], capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, **a.env, **faketime_env("+90s")))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(a.query("SELECT outcome FROM activations WHERE id=?", int(elsewhere)), [(None,)],
                         "a basal run 90 s ahead closed a live lease of another machine")
        self.assertEqual(a.query("SELECT outcome FROM activations WHERE run_id=?", held), [(None,)])
        # 90 s behind, holding a call while A heartbeats: its lease is the server's now + 60 s,
        # so A never takes its activation.
        fetcher = os.path.join(a.dir, "fetch-adhoc.js")
        with open(fetcher, "w") as f:
            f.write("export default async (input) => (await fetch('http://127.0.0.1:%d/hold/run')).status;\n"
                    % server.port)
        proc = subprocess.Popen([os.path.join(serve_test.BIN, "basal"), "run", fetcher, "--manifest", manifest,
                                 "--db", a.db], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=dict(os.environ, **a.env, **faketime_env("-90s")))
        try:
            server.wait_for(2)
            mine = a.query("SELECT id, lease_until_us FROM activations WHERE owner_pid=? AND outcome IS NULL",
                           proc.pid)
            self.assertEqual(len(mine), 1, mine)
            left_s = (mine[0][1] - server_now_us(a)) / 1e6
            self.assertGreater(left_s, 30, "basal run's lease by the server's clock: now + 60 s, not its own")
            time.sleep(4)  # two of A's leases: six of its heartbeats, each a takeover pass
            self.assertEqual(a.query("SELECT outcome FROM activations WHERE id=?", mine[0][0]), [(None,)])
            server.released.set()
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self.assertEqual(proc.returncode, 0, err)
        self.assertEqual(a.query("SELECT outcome FROM activations WHERE id=?", mine[0][0]), [("ok",)])
        run = wait_run(self, a, held)
        self.assertEqual((run["outcome"], run["resumes"]), ("ok", 0), run)
        self.assertNotIn("took over", a.stderr())
        self.assertEqual(a.stop(), 0)


def suite():
    s = unittest.TestSuite()
    for case in (SkewedBasalRunTest, SkewedHostsTest):
        s.addTests(unittest.defaultTestLoader.loadTestsFromTestCase(case))
    return s


def main():
    postgres_test.main_on_a_cluster("clock_skew_test", suite)


if __name__ == "__main__":
    main()
