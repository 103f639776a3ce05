#!/usr/bin/env python3
"""The burn-down benchmark (issue 27 item 9), as River and graphile-worker publish theirs: N trivial
runs queued in the store before any daemon runs, then `basal serve` started and timed until every
one has ended. In one run, on the same machine: 1 host on SQLite, 1 host on PostgreSQL, 2 hosts on
PostgreSQL (two daemons on one database), and the latency of one batch commit on each store.

The runs are queued with SQL (one INSERT of N rows of `runs` in state queued, triggered by "api"),
which is what an API client's accepted runs leave there; a daemon takes the queued runs of its
store at start (RunQueue::Recover) and works them off with limits.max_workers workers.

Figures, per store, from the store's own rows (not from client clocks):
- runs/s: N / (the last run's end - the first run's start);
- pickup p50/p99: a run's activation start - its created time (queued -> start). Every run was
  queued before the daemon started, so this is the wait in line of a burn-down (it grows with N),
  not the pickup of a lone run;
- commit p50/p99: `basal-bench --only commit --journal LOCATOR` (a batch of one activation's start,
  committed, 2,000 times), against the same store.

PostgreSQL runs in a private cluster (tests/support/pg_cluster.py) with fsync and
synchronous_commit on, as a server should (the tests' clusters turn fsync off). Run through
scripts/bench.sh --only burndown [--runs N]; not part of ctest.

    bench/burndown.py --bin-dir build/release/bin [--runs 20000] [--workers 4] [--only sqlite,pg1,pg2]
"""
import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "support"))
import pg_cluster  # noqa: E402

FLOW = "export default (input) => input;\n"


def pct(values, p):
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100.0 * (len(s) - 1))))]


class Store:
    """Where the runs are: an SQLite file, or a database of the private cluster."""

    def __init__(self, kind, work, cluster=None, name=None):
        self.kind, self.work, self.cluster, self.name = kind, work, cluster, name
        if kind == "sqlite":
            self.locator = os.path.join(work, "journal.db")
        else:
            cluster.psql("CREATE DATABASE %s OWNER basal" % name, database="postgres", user="postgres")
            self.locator = cluster.locator(database=name)

    def sql(self, statement):
        if self.kind == "sqlite":
            con = sqlite3.connect(self.locator, timeout=30)
            try:
                rows = con.execute(statement).fetchall()
                con.commit()
                return rows
            finally:
                con.close()
        out = self.cluster.psql("SET search_path = basal", statement, database=self.name)
        return [tuple(line.split("|")) for line in out.splitlines() if line]

    def queue(self, n, now_us):
        if self.kind == "sqlite":
            self.sql("WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < %d) "
                     "INSERT INTO runs(flow, input, triggered_by, state, created_us) "
                     "SELECT 'bench', '1', 'api', 'queued', %d FROM s" % (n, now_us))
        else:
            self.sql("INSERT INTO runs(flow, input, triggered_by, state, created_us) "
                     "SELECT 'bench', '1', 'api', 'queued', %d FROM generate_series(1, %d)" % (now_us, n))

    def ended(self):
        return int(self.sql("SELECT count(*) FROM runs WHERE state = 'ended'")[0][0])

    def figures(self):
        rows = self.sql("SELECT r.created_us, a.start_us, r.ended_us, r.outcome FROM runs r "
                        "JOIN activations a ON a.id = r.activation_id WHERE r.state = 'ended'")
        rows = [(int(c), int(s), int(e), o) for c, s, e, o in rows]
        return rows


def basal(bin_dir, *args, env=None):
    r = subprocess.run([os.path.join(bin_dir, "basal"), *args], capture_output=True, text=True,
                       env=dict(os.environ, **(env or {})), timeout=600)
    if r.returncode != 0:
        raise SystemExit("burndown: basal %s failed: %s" % (" ".join(args[:2]), r.stderr))
    return r.stdout


def burn(bin_dir, store, n, hosts, workers, work):
    env = {"XDG_STATE_HOME": os.path.join(work, "state")}
    src, man = os.path.join(work, "bench.js"), os.path.join(work, "bench.json")
    with open(src, "w") as f:
        f.write(FLOW)
    with open(man, "w") as f:
        json.dump({"grants": {}}, f)
    basal(bin_dir, "flow", "approve", "bench", src, "--manifest", man, "--yes", "--db", store.locator, env=env)
    store.queue(n, int(time.time() * 1e6))
    daemons = []
    started = time.monotonic()
    for h in range(hosts):
        # Several hosts on one database each name themselves (host_id: whose claims are whose).
        config = os.path.join(work, "serve%d.json" % h)
        with open(config, "w") as f:
            settings = {"limits": {"max_workers": workers, "queue_max": max(n, 1000)}}
            if hosts > 1:
                settings["host_id"] = "bench-%d" % h
            json.dump(settings, f)
        err = open(os.path.join(work, "host%d.log" % h), "w")
        daemons.append(subprocess.Popen([os.path.join(bin_dir, "basal"), "serve", "--socket",
                                         os.path.join(work, "host%d.sock" % h), "--db", store.locator,
                                         "--config", config],
                                        stdout=subprocess.DEVNULL, stderr=err, env=dict(os.environ, **env)))
        err.close()
    try:
        deadline = time.monotonic() + 600
        while store.ended() < n:
            for d in daemons:
                if d.poll() is not None:
                    raise SystemExit("burndown: a daemon exited %d" % d.returncode)
            if time.monotonic() > deadline:
                raise SystemExit("burndown: %d of %d runs ended in 600 s" % (store.ended(), n))
            time.sleep(0.25)
        wall = time.monotonic() - started
    finally:
        for d in daemons:
            d.terminate()
        for d in daemons:
            d.wait(60)
    rows = store.figures()
    first_start = min(s for _, s, _, _ in rows)
    last_end = max(e for _, _, e, _ in rows)
    pickup_ms = [(s - c) / 1000.0 for c, s, _, _ in rows]
    not_ok = sum(1 for *_, o in rows if o != "ok")
    return {"runs": n, "hosts": hosts, "workers": workers, "runs_per_s": n / ((last_end - first_start) / 1e6),
            "wall_s": wall, "pickup_p50_ms": pct(pickup_ms, 50), "pickup_p99_ms": pct(pickup_ms, 99),
            "not_ok": not_ok, "not_ok_why": why_not_ok(store, hosts, work) if not_ok else [],
            "events": host_events(hosts, work)}


def host_events(hosts, work):
    """What the hosts' logs say went wrong, counted over all hosts: runs another host took over (a
    lease that lapsed: the host was starved past its lease) and outages of the commits (a failed
    commit fails its batch; the log tells the first of each outage, the module counts the rest)."""
    counts = {"taken_over": 0, "commit_outages": 0}
    for h in range(hosts):
        with open(os.path.join(work, "host%d.log" % h), errors="replace") as f:
            for line in f:
                counts["taken_over"] += "another host took over run" in line
                counts["commit_outages"] += "journal_failure:" in line
    return counts


def why_not_ok(store, hosts, work, most=20):
    """What each run that did not end ok is (the first `most`): its row, its activations (owner,
    outcome, error) and every line of each host's log that names it. Printed, never hidden."""
    out = []
    runs = store.sql("SELECT id, outcome, replace(coalesce(error, ''), '|', '/'), resumes FROM runs WHERE state = 'ended' "
                     "AND outcome <> 'ok' ORDER BY id LIMIT %d" % most)
    logs = []
    for h in range(hosts):
        with open(os.path.join(work, "host%d.log" % h), errors="replace") as f:
            logs.append(f.read().splitlines())
    for run_id, outcome, error, resumes in runs:
        acts = store.sql("SELECT id, owner_host, owner_pid, coalesce(outcome, '(open)'), replace(coalesce(error, ''), '|', '/') "
                         "FROM activations WHERE run_id = %s ORDER BY id" % run_id)
        lines = ["host%d: %s" % (h, line) for h, log in enumerate(logs) for line in log
                 if ("run %s " % run_id) in line or ("run %s:" % run_id) in line]
        out.append({"run": int(run_id), "outcome": outcome, "error": error[:300], "resumes": int(resumes),
                    "activations": [list(a) for a in acts], "log": lines[:10]})
    return out


def commit_latency(bin_dir, locator, work):
    out = subprocess.run([os.path.join(bin_dir, "basal-bench"), "--work-dir", work, "--only", "commit", "--journal",
                          locator], capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise SystemExit("burndown: basal-bench --only commit failed: " + out.stderr + out.stdout)
    for line in out.stdout.splitlines():
        if line.startswith("commit "):
            _, p50, p99 = line.split()
            return float(p50), float(p99)
    raise SystemExit("burndown: basal-bench printed no commit line: " + out.stdout)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin-dir", required=True)
    p.add_argument("--runs", type=int, default=20000)
    p.add_argument("--workers", type=int, default=4)
    # pg2: two daemons on one database, each with its host_id. Each host takes every queued run at
    # its start (docs/postgres.md, "Not built yet"); the claim of each run lets one start it, the
    # other journals a cancelled activation of it. Runs that do not end ok are counted and each is
    # shown (its activations and the hosts' log lines), never hidden.
    p.add_argument("--only", default="sqlite,pg1,pg2")
    args = p.parse_args()
    if args.runs < 1:
        raise SystemExit("burndown: --runs takes a whole number from 1")
    wanted = args.only.split(",")
    with open("/proc/loadavg") as f:
        load_start = " ".join(f.read().split()[:3])
    print("burndown: %d runs queued before the daemon starts, limits.max_workers %d; load average %s"
          % (args.runs, args.workers, load_start), flush=True)
    top = tempfile.mkdtemp(prefix="basal-burndown.")
    results = []
    cluster = None
    try:
        if any(w.startswith("pg") for w in wanted):
            cluster = pg_cluster.Cluster({"fsync": "on", "full_page_writes": "on", "synchronous_commit": "on",
                                          "max_connections": "40", "shared_buffers": "128MB"})
            cluster.start()
        for i, what in enumerate(wanted):
            work = os.path.join(top, what)
            os.makedirs(work)
            if what == "sqlite":
                store = Store("sqlite", work)
                label, hosts = "1 host, SQLite", 1
            elif what in ("pg1", "pg2"):
                store = Store("pg", work, cluster, "burn_%s" % what)
                hosts = 1 if what == "pg1" else 2
                label = "%d host%s, PostgreSQL" % (hosts, "s" if hosts > 1 else "")
            else:
                raise SystemExit("burndown: --only takes sqlite, pg1, pg2, not %r" % what)
            fig = burn(args.bin_dir, store, args.runs, hosts, args.workers, work)
            commit_store = os.path.join(work, "commit.db") if what == "sqlite" else None
            if commit_store is None:
                cluster.psql("CREATE DATABASE commit_%s OWNER basal" % what, database="postgres", user="postgres")
                commit_store = cluster.locator(database="commit_" + what)
            fig["commit_p50_us"], fig["commit_p99_us"] = commit_latency(args.bin_dir, commit_store, work)
            fig["label"] = label
            results.append(fig)
            print("  %-22s %8.0f runs/s   pickup p50 %8.1f ms  p99 %8.1f ms   commit p50 %7.0f us  p99 %7.0f us"
                  "   (%d runs, %.1f s wall, %d not ok; %d taken over, %d commit outages)"
                  % (label, fig["runs_per_s"], fig["pickup_p50_ms"], fig["pickup_p99_ms"], fig["commit_p50_us"],
                     fig["commit_p99_us"], fig["runs"], fig["wall_s"], fig["not_ok"], fig["events"]["taken_over"],
                     fig["events"]["commit_outages"]), flush=True)
            for why in fig["not_ok_why"]:
                print("    not ok: run %d ended %s (%d resumes): %s" % (why["run"], why["outcome"], why["resumes"],
                                                                     why["error"]), flush=True)
                for a in why["activations"]:
                    print("      activation %s of %s pid %s: %s %s" % tuple(a), flush=True)
                for line in why["log"]:
                    print("      " + line, flush=True)
    finally:
        if cluster:
            cluster.stop()
        shutil.rmtree(top, ignore_errors=True)
    with open("/proc/loadavg") as f:
        print("burndown: load average at the end %s" % " ".join(f.read().split()[:3]))
    print("burndown-json: " + json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
