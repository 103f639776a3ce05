#!/usr/bin/env python3
"""scripts/bench.sh's rounds without a timing in sight: its argument handling (--plan: the rounds'
order, interleaved and alternated for --compare; bad arguments refused with exit 64) and
scripts/bench_summary.py's reading of basal-bench's output and its median and spread, on canned
outputs in basal_bench.cpp's formats."""
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import bench_summary  # noqa: E402

BENCH_SH = os.path.join(ROOT, "scripts", "bench.sh")


def row(figure, measured, reference, ratio, target, met):
    # basal_bench.cpp: "%-28s %-26s %-26s %-7s %-12s %s\n"
    return "%-28s %-26s %-26s %-7s %-12s %s" % (figure, measured, reference, ratio, target, met)


def full_output(host_us, host_ref_us, ratio, throughput, rss_kib, serve="324.0 us (p99 2.45 ms)"):
    return "\n".join([
        "basal-bench: worker /x/ck-basal-worker, journals in /tmp/w",
        "",
        "references",
        "  pipe round trip, 64 bytes, forked echo child p50      47.0 us   p99      60.1 us   max      90.0 us   (n=20000)",
        "",
        "figures",
        "  host-call round trip (trivial host call)     p50      40.0 us   p99      70.0 us   max     100.0 us   (n=9950)",
        "",
        "%-28s %-26s %-26s %-7s %-12s %s" % ("figure", "measured p50 (p99)", "reference p50", "ratio", "target", ""),
        row("host-call round trip", f"{host_us:.1f} us (p99 70.0 us)", f"{host_ref_us:.1f} us pipe+1 commit",
            f"{ratio:.2f}x", "<= 1.3x", "met" if ratio <= 1.3 else "MISSED"),
        row("serve: run with ?wait", serve, "133.6 us healthz+warm", "2.43x", "<= 1.5x", "MISSED"),
        row("serve: 16 clients", "5948 runs/s", "-", "-", "-", "met"),
        row("durable: resume, 1,000 calls", "12.30 ms (p99 15.00 ms)", "20.00 ms the run live", "0.61x", "-", "met"),
        row("pool throughput (defaults)", f"{throughput:.0f} /s", "-", "-", ">= 25000 /s",
            "met" if throughput >= 25000 else "MISSED"),
        row("idle worker RSS", f"{rss_kib:.0f} KiB", "-", "-", "< 2048 KiB", "met" if rss_kib < 2048 else "MISSED"),
        "",
    ])


ONLY_SERVE = """basal-bench: worker /x/ck-basal-worker, journals in /tmp/w

  warm activation (reference)                  p50      60.0 us   p99     120.0 us   max     300.0 us   (n=5000)
  basal serve: GET /healthz (reference)        p50      50.0 us   p99      90.0 us   max     200.0 us   (n=2000)
  basal serve: POST a run with ?wait           p50     300.0 us   p99    2000.0 us   max    5000.0 us   (n=2000)
  basal serve: runs with ?wait, concurrent     5000 /s (16 clients)
  run with ?wait p50 / (healthz p50 + warm activation p50) = %sx (target 1.5x)
"""


class Arithmetic(unittest.TestCase):
    def test_median_of_odd_and_even_counts(self):
        self.assertEqual(bench_summary.median([3.0, 1.0, 2.0]), 2.0)
        self.assertEqual(bench_summary.median([4.0, 1.0, 3.0, 2.0]), 2.5)
        self.assertEqual(bench_summary.median([7.0]), 7.0)
        with self.assertRaises(ValueError):
            bench_summary.median([])

    def test_spread_is_min_and_max(self):
        self.assertEqual(bench_summary.spread([1.5, 0.9, 2.1]), (0.9, 2.1))

    def test_quantities_are_read_in_one_unit(self):
        self.assertEqual(bench_summary.quantity("1.94 ms (p99 4.01 ms)"), (1940.0, "us"))
        self.assertEqual(bench_summary.quantity("58.0 us pipe+1 commit"), (58.0, "us"))
        self.assertEqual(bench_summary.quantity("5948 runs/s"), (5948.0, "/s"))
        self.assertEqual(bench_summary.quantity("2128 KiB"), (2128.0, "KiB"))
        self.assertEqual(bench_summary.quantity("1.07x"), (1.07, "x"))

    def test_targets_are_judged_on_the_median(self):
        self.assertTrue(bench_summary.target_met("<= 1.3x", 40.0, 1.3))
        self.assertFalse(bench_summary.target_met("<= 1.3x", 40.0, 1.31))
        self.assertTrue(bench_summary.target_met(">= 25000 /s", 25000.0, None))
        self.assertFalse(bench_summary.target_met("< 2048 KiB", 2128.0, None))
        self.assertIsNone(bench_summary.target_met("-", 1.0, 1.0))


class Parsing(unittest.TestCase):
    def test_a_full_run_yields_its_table_rows(self):
        figures = bench_summary.parse_round(full_output(40.0, 58.0, 0.69, 14300, 2128))
        by_name = {f.name: f for f in figures}
        self.assertEqual(list(by_name), ["host-call round trip", "serve: run with ?wait", "serve: 16 clients",
                                         "durable: resume, 1,000 calls", "pool throughput (defaults)",
                                         "idle worker RSS"])
        host = by_name["host-call round trip"]
        self.assertEqual((host.measured, host.unit, host.reference, host.ratio, host.target),
                         (40.0, "us", 58.0, 0.69, "<= 1.3x"))
        self.assertEqual(by_name["durable: resume, 1,000 calls"].measured, 12300.0)
        self.assertEqual((by_name["serve: 16 clients"].measured, by_name["serve: 16 clients"].unit), (5948.0, "/s"))
        self.assertIsNone(by_name["serve: 16 clients"].ratio)
        self.assertEqual(by_name["idle worker RSS"].target, "< 2048 KiB")

    def test_an_only_run_yields_its_sample_rate_and_ratio_lines(self):
        figures = bench_summary.parse_round(ONLY_SERVE % "2.73")
        self.assertEqual([(f.name, f.measured, f.ratio) for f in figures], [
            ("warm activation (reference)", 60.0, None),
            ("basal serve: GET /healthz (reference)", 50.0, None),
            ("basal serve: POST a run with ?wait", 300.0, None),
            ("basal serve: runs with ?wait, concurrent", 5000.0, None),
            ("run with ?wait p50 / (healthz p50 + warm activation p50)", None, 2.73),
        ])


    def test_an_only_warm_run_yields_the_idle_worker_rss(self):
        text = ("  warm activation                              p50      62.5 us   p99     120.0 us   max     300.0 us   (n=5000)\n"
                "  idle worker VmRSS                            2134 KiB (anon 212, file 1922), pid 4242\n")
        self.assertEqual([(f.name, f.measured, f.unit) for f in bench_summary.parse_round(text)],
                         [("warm activation", 62.5, "us"), ("idle worker VmRSS", 2134.0, "KiB")])


class Summary(unittest.TestCase):
    def rounds(self):
        return [bench_summary.parse_round(full_output(*args)) for args in
                [(40.0, 58.0, 0.69, 14300, 2128), (52.0, 40.0, 1.30, 8400, 2120), (45.0, 50.0, 0.90, 12000, 2140)]]

    def test_one_build_prints_median_and_spread_per_figure(self):
        lines = bench_summary.summarize_one(self.rounds())
        host = next(line for line in lines if line.startswith("host-call round trip"))
        self.assertIn("45.0 us (40.0..52.0 us)", host)
        self.assertIn("50.0 us (40.0..58.0 us)", host)
        self.assertIn("0.90x (0.69x..1.30x)", host)
        self.assertTrue(host.rstrip().endswith("met"))
        tp = next(line for line in lines if line.startswith("pool throughput (defaults)"))
        self.assertIn("12,000 /s (8,400..14,300 /s)", tp)
        self.assertTrue(tp.rstrip().endswith("MISSED"))
        self.assertIn(" 3 ", tp)  # the round count

    def test_two_builds_are_compared_round_by_round(self):
        a = self.rounds()
        b = [bench_summary.parse_round(full_output(*args)) for args in
             [(20.0, 58.0, 0.34, 28600, 1064), (26.0, 40.0, 0.65, 16800, 1060), (30.0, 50.0, 0.60, 24000, 1070)]]
        lines = bench_summary.summarize_two("this", a, "old", b)
        host = next(line for line in lines if line.startswith("host-call round trip"))
        # Paired: 40/20, 52/26, 45/30 = 2.0, 2.0, 1.5.
        self.assertIn("2.00x (1.50x..2.00x)", host)
        self.assertIn("0.90x (0.69x..1.30x) | 0.60x (0.34x..0.65x)", host)
        rss = next(line for line in lines if line.startswith("idle worker RSS"))
        self.assertIn("2.00x (2.00x..2.00x)", rss)

    def test_the_command_reads_round_files_and_states_rounds_and_load(self):
        with tempfile.TemporaryDirectory() as d:
            for i, args in enumerate([(40.0, 58.0, 0.69, 14300, 2128), (52.0, 40.0, 1.30, 8400, 2120)], 1):
                with open(os.path.join(d, f"round-{i}.txt"), "w") as f:
                    f.write(full_output(*args))
            out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "bench_summary.py"), "--label",
                                  f"this={d}", "--load-start", "3.10 2.00 1.00", "--load-end", "4.00 3.00 2.00"],
                                 capture_output=True, text=True, check=True).stdout
        self.assertIn("summary: 2 interleaved rounds; load average at start 3.10 2.00 1.00, at end 4.00 3.00 2.00", out)
        self.assertIn("46.0 us (40.0..52.0 us)", out)


class Arguments(unittest.TestCase):
    def plan(self, *args):
        return subprocess.run(["bash", BENCH_SH, "--plan", *args], capture_output=True, text=True)

    def test_rounds_are_interleaved_and_default_to_three(self):
        r = self.plan("--only", "warm")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual([line for line in r.stdout.splitlines() if line.startswith("round")],
                         ["round 1/3: this basal-bench --only warm", "round 2/3: this basal-bench --only warm",
                          "round 3/3: this basal-bench --only warm"])

    def test_compare_alternates_which_build_runs_first(self):
        r = self.plan("--rounds", "2", "--compare", "HEAD~1", "--quick")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("build: HEAD~1 in a temporary worktree (basal-bench)", r.stdout)
        self.assertEqual([line for line in r.stdout.splitlines() if line.startswith("round")],
                         ["round 1/2: this basal-bench --quick", "round 1/2: HEAD~1 basal-bench --quick",
                          "round 2/2: HEAD~1 basal-bench --quick", "round 2/2: this basal-bench --quick"])

    def test_the_burndown_runs_once_with_its_run_count_unless_told(self):
        r = self.plan("--only", "burndown", "--runs", "500")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual([line for line in r.stdout.splitlines() if line.startswith("round")],
                         ["round 1/1: bench/burndown.py --runs 500"])
        r = self.plan("--only", "burndown", "--rounds", "2")
        self.assertEqual([line for line in r.stdout.splitlines() if line.startswith("round")],
                         ["round 1/2: bench/burndown.py --runs 20000", "round 2/2: bench/burndown.py --runs 20000"])
        r = self.plan("--only", "burndown", "--compare", "HEAD~1")
        self.assertEqual(r.returncode, 64)
        self.assertIn("--only burndown does not take --compare", r.stderr)

    def test_postgres_runs_every_round_in_a_cluster_of_its_own(self):
        r = self.plan("--postgres", "--rounds", "2", "--only", "hostcall")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual([line for line in r.stdout.splitlines() if line.startswith("round")],
                         ["round 1/2: this basal-bench --only hostcall --journal (a new private PostgreSQL cluster)",
                          "round 2/2: this basal-bench --only hostcall --journal (a new private PostgreSQL cluster)"])
        r = self.plan("--only", "burndown", "--postgres")
        self.assertEqual(r.returncode, 64)
        self.assertIn("--only burndown runs on both stores already", r.stderr)

    def test_bad_arguments_are_refused_with_64(self):
        for args, message in [(["--rounds", "0"], "--rounds takes a whole number"),
                              (["--rounds", "two"], "--rounds takes a whole number"),
                              (["--rounds"], "--rounds needs a number"),
                              (["--compare"], "--compare needs a revision"),
                              (["--only"], "--only needs a figure"),
                              (["--only", "burndown", "--runs", "0"], "--runs takes a whole number"),
                              (["--frobnicate"], "unknown argument '--frobnicate'")]:
            r = self.plan(*args)
            self.assertEqual(r.returncode, 64, (args, r.stdout, r.stderr))
            self.assertIn(message, r.stderr)


if __name__ == "__main__":
    unittest.main()
