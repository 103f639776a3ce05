#!/usr/bin/env python3
"""Summarizes several rounds of basal-bench output: per figure, the median over rounds and the
spread (min..max), for one build or two side by side (scripts/bench.sh --rounds, --compare).

It reads what basal-bench prints for people, not a format of its own, so that --compare can run a
revision older than this script. Two shapes are read:
- a full run's table (figure, measured p50 (p99), reference p50, ratio, target, met/MISSED), in
  the fixed columns basal_bench.cpp prints it;
- the lines of an --only run: "<what>  p50 X us  p99 ...", "<what>  N /s", "<what>  N KiB ...",
  "... = 2.85x".

  bench_summary.py [--label NAME=DIR]... [--load-start L] [--load-end L]
Each DIR holds round-1.txt, round-2.txt, ...: one basal-bench output each. Not a test of timing:
it prints figures, it never judges a machine.
"""
import argparse
import os
import re
import sys

# basal_bench.cpp: "%-28s %-26s %-26s %-7s %-12s %s"
_COLUMNS = [(0, 28), (29, 55), (56, 82), (83, 90), (91, 103), (104, None)]
_HEADER = re.compile(r"^figure\s+measured p50")
_SAMPLE = re.compile(r"^  (?P<label>\S.*?)\s+p50\s+(?P<p50>[\d.]+) us\s+p99\s+(?P<p99>[\d.]+) us")
_RATE = re.compile(r"^  (?P<label>\S.*?):?\s+(?P<value>[\d.]+) /s\b")
_RATIO = re.compile(r"^  (?P<label>\S.*?) = (?P<value>[\d.]+)x\b")
_KIB = re.compile(r"^  (?P<label>\S.*?)\s+(?P<value>\d+) KiB\b")
_QUANTITY = re.compile(r"(?P<number>-?[\d,]*\.?\d+)\s*(?P<unit>us|ms|s\b|KiB|MiB|/s|runs/s|x)?")


def median(values):
    """The median of a non-empty list (the mean of the two middle values for an even count)."""
    if not values:
        raise ValueError("median of no values")
    v = sorted(values)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def spread(values):
    return min(values), max(values)


def quantity(text):
    """The first number of a cell and its unit, times in microseconds: ("1.94 ms (p99 ..)") -> (1940.0, "us")."""
    m = _QUANTITY.search(text)
    if not m:
        return None
    number = float(m.group("number").replace(",", ""))
    unit = m.group("unit") or ""
    if unit == "ms":
        number, unit = number * 1000, "us"
    elif unit == "s":
        number, unit = number * 1e6, "us"
    elif unit == "MiB":
        number, unit = number * 1024, "KiB"
    elif unit == "runs/s":
        unit = "/s"
    return number, unit


class Figure:
    """One figure of one round: its measured value, its reference and the ratio, where printed."""

    def __init__(self, name, measured=None, unit="", reference=None, ratio=None, target=""):
        self.name, self.measured, self.unit = name, measured, unit
        self.reference, self.ratio, self.target = reference, ratio, target


def parse_round(text):
    """The figures of one basal-bench output, in the order printed. A full run yields its table's
    rows; an --only run yields its sample, rate and ratio lines."""
    lines = text.splitlines()
    table = [i for i, line in enumerate(lines) if _HEADER.match(line)]
    figures = []
    if table:
        for line in lines[table[-1] + 1:]:
            if not line.strip():
                break
            cells = [line[a:b].strip() if b else line[a:].strip() for a, b in _COLUMNS]
            name, measured, reference, ratio, target = cells[:5]
            m = quantity(measured)
            ref = quantity(reference) if reference != "-" else None
            r = quantity(ratio) if ratio != "-" else None
            figures.append(Figure(name, m[0] if m else None, m[1] if m else "", ref[0] if ref else None,
                                  r[0] if r else None, "" if target == "-" else target))
        return figures
    for line in lines:
        for pattern, unit in ((_SAMPLE, "us"), (_RATIO, "x"), (_RATE, "/s"), (_KIB, "KiB")):
            m = pattern.match(line)
            if m:
                if unit == "us":
                    figures.append(Figure(m.group("label"), float(m.group("p50")), "us"))
                elif unit == "x":
                    figures.append(Figure(m.group("label"), None, "", ratio=float(m.group("value"))))
                else:
                    figures.append(Figure(m.group("label"), float(m.group("value")), unit))
                break
    return figures


def target_met(target, value, ratio):
    """Whether a median meets a target cell such as "<= 1.3x", ">= 25000 /s", "< 2048 KiB"; None if
    the cell is not a target this can read."""
    m = re.match(r"^(<=|>=|<|>)\s*([\d.,]+)\s*(x|/s|KiB|us)?$", target.strip())
    if not m:
        return None
    op, bound, unit = m.group(1), float(m.group(2).replace(",", "")), m.group(3) or ""
    subject = ratio if unit == "x" else value
    if subject is None:
        return None
    return {"<=": subject <= bound, ">=": subject >= bound, "<": subject < bound, ">": subject > bound}[op]


def collect(rounds):
    """{name: [Figure per round]} in first-seen order, from the parsed rounds."""
    by_name = {}
    for figures in rounds:
        for f in figures:
            by_name.setdefault(f.name, []).append(f)
    return by_name


def fmt_value(v, unit):
    if v is None:
        return "-"
    if unit == "us":
        return f"{v / 1000:.2f} ms" if v >= 1000 else f"{v:.1f} us"
    if unit == "/s":
        return f"{v:,.0f} /s"
    if unit == "KiB":
        return f"{v:,.0f} KiB"
    if unit == "x":
        return f"{v:.2f}x"
    return f"{v:g}"


def fmt_spread(values, unit):
    """ "median (min..max)" of the non-missing values; "-" when none."""
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    lo, hi = spread(values)
    if len(values) == 1:
        return fmt_value(values[0], unit)
    low, high = fmt_value(lo, unit), fmt_value(hi, unit)
    if " " in low and low.split(" ")[-1] == high.split(" ")[-1]:
        low = low.rsplit(" ", 1)[0]  # "40.2..50.3 us", the unit once
    return f"{fmt_value(median(values), unit)} ({low}..{high})"


def summarize_one(rounds):
    """The table for one build: per figure the median and spread over rounds of its measured value,
    its reference and its ratio, and the target judged on the median."""
    by_name = collect(rounds)
    out = ["%-30s %-6s %-30s %-30s %-24s %-12s %s" % ("figure", "rounds", "measured p50: median (min..max)",
                                                      "reference: median (min..max)", "ratio: median (min..max)",
                                                      "target", "")]
    for name, figs in by_name.items():
        unit = figs[0].unit
        measured = [f.measured for f in figs]
        ratios = [f.ratio for f in figs]
        ref_unit = "/s" if unit == "/s" else ("KiB" if unit == "KiB" else "us")
        target = figs[0].target
        med_m = median([v for v in measured if v is not None]) if any(v is not None for v in measured) else None
        med_r = median([v for v in ratios if v is not None]) if any(v is not None for v in ratios) else None
        met = target_met(target, med_m, med_r) if target else None
        out.append("%-30s %-6d %-30s %-30s %-24s %-12s %s" % (
            name, len(figs), fmt_spread(measured, unit), fmt_spread([f.reference for f in figs], ref_unit),
            fmt_spread(ratios, "x"), target or "-", "" if met is None else ("met" if met else "MISSED")))
    return out


def summarize_two(label_a, rounds_a, label_b, rounds_b):
    """Two builds side by side: each one's ratio to its own same-run reference (median and spread),
    and the ratio between them, round by round (round r of A over round r of B), median and spread."""
    a, b = collect(rounds_a), collect(rounds_b)
    names = list(a) + [n for n in b if n not in a]
    out = ["%-30s %-26s %-26s %-24s %-24s" % ("figure", f"{label_a}: measured", f"{label_b}: measured",
                                              f"ratio to ref: {label_a} | {label_b}", f"{label_a}/{label_b}, paired")]
    for name in names:
        fa, fb = a.get(name, []), b.get(name, [])
        unit = (fa or fb)[0].unit
        pairs = [x.measured / y.measured for x, y in zip(fa, fb)
                 if x.measured is not None and y.measured not in (None, 0)]
        if not pairs:  # a ratio-only line (--only serve's "= 2.85x"): compare the ratios
            pairs = [x.ratio / y.ratio for x, y in zip(fa, fb) if x.ratio is not None and y.ratio not in (None, 0)]
        ratio_a = fmt_spread([f.ratio for f in fa], "x")
        ratio_b = fmt_spread([f.ratio for f in fb], "x")
        out.append("%-30s %-26s %-26s %-24s %-24s" % (
            name, fmt_spread([f.measured for f in fa], unit) if fa else "(absent)",
            fmt_spread([f.measured for f in fb], unit) if fb else "(absent)",
            f"{ratio_a} | {ratio_b}", fmt_spread(pairs, "x") if pairs else "-"))
    return out


def read_rounds(directory):
    files = sorted((f for f in os.listdir(directory) if re.fullmatch(r"round-\d+\.txt", f)),
                   key=lambda f: int(re.findall(r"\d+", f)[0]))
    if not files:
        raise SystemExit(f"bench_summary.py: no round-N.txt in {directory}")
    rounds = []
    for f in files:
        with open(os.path.join(directory, f), encoding="utf-8", errors="replace") as fh:
            rounds.append(parse_round(fh.read()))
    return rounds


def main(argv):
    p = argparse.ArgumentParser(description="median and spread of basal-bench rounds")
    p.add_argument("--label", action="append", required=True, metavar="NAME=DIR",
                   help="a build's name and the directory of its round-N.txt files (one or two)")
    p.add_argument("--load-start", default="?")
    p.add_argument("--load-end", default="?")
    args = p.parse_args(argv)
    builds = []
    for item in args.label:
        name, sep, directory = item.partition("=")
        if not sep or not name or not directory:
            p.error(f"--label takes NAME=DIR, not {item!r}")
        builds.append((name, read_rounds(directory)))
    if len(builds) > 2:
        p.error("at most two builds (--label twice)")
    n = len(builds[0][1])
    print(f"\nsummary: {n} interleaved round{'s' if n != 1 else ''}; load average at start {args.load_start}, "
          f"at end {args.load_end}")
    if len(builds) == 1:
        lines = summarize_one(builds[0][1])
    else:
        lines = summarize_two(builds[0][0], builds[0][1], builds[1][0], builds[1][1])
        lines += ["", f"{builds[0][0]} alone:"] + summarize_one(builds[0][1])
        lines += ["", f"{builds[1][0]} alone:"] + summarize_one(builds[1][1])
    print("\n".join(line.rstrip() for line in lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
