#!/usr/bin/env python3
"""The launch-rate ratio of scripts/gpu/launchrate-bench.sh, from its rates files.

A round is one untraced run followed by one run of each variant. The
estimate is the median over rounds of (variant rate / the round's untraced
rate): pairing a run with its neighbour cancels the drift of the machine
over minutes, the median ignores the odd slow run. Its 95% interval comes
from a bootstrap over rounds. The verdict against a goal (a least ratio)
is "met" only when the whole interval is at or above it, "missed" when the
whole interval is below it, and "not shown" otherwise: the spread of single
runs (+-20% on the machines measured) must not be read as a pass.

Usage: launchrate_stats.py DIR GOAL NAME...  (DIR/base.rates, DIR/NAME.rates:
one launches/s a line, a blank line for a failed run)
"""

import random
import statistics
import sys


def read_rates(path):
    """The rates of a file, None for a failed run's blank line."""
    with open(path) as f:
        return [float(x) if x.strip() else None for x in f]


def paired_ratios(variant, base):
    """Each round's variant / untraced, rounds where either run failed left out."""
    return [v / b for v, b in zip(variant, base) if v and b]


def median_interval(values, reps=4000, seed=1):
    """The median and a bootstrap 95% interval of it."""
    rng = random.Random(seed)
    boot = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(reps))
    return statistics.median(values), boot[int(0.025 * reps)], boot[int(0.975 * reps) - 1]


def verdict(lo, hi, goal):
    if lo >= goal:
        return "met"
    if hi < goal:
        return "missed"
    return "not shown"


def summarize(base, variants, goal):
    """Lines of the summary: the untraced spread, one line a variant, and
    last a line "brief: ..." of every variant's ratio and verdict."""
    ok = [b for b in base if b]
    if not ok:
        return ["untraced: no run finished", "brief: no untraced run finished"]
    bm = statistics.median(ok)
    lines = [
        f"untraced: median {bm:,.0f} launches/s [{min(ok):,.0f}-{max(ok):,.0f}], "
        f"runs against their median {min(ok) / bm:.2f}-{max(ok) / bm:.2f}, {len(ok)} of {len(base)} runs"
    ]
    brief = []
    for name, rates in variants:
        r = paired_ratios(rates, base)
        failed = sum(1 for v in rates if not v)
        if len(r) < 3:
            lines.append(f"  {name:12s} too few rounds ({len(r)}; {failed} failed runs)")
            brief.append(f"{name} too few rounds")
            continue
        m, lo, hi = median_interval(r)
        vm = statistics.median([v for v in rates if v])
        lines.append(
            f"  {name:12s} x{m:.3f} (95% {lo:.3f}-{hi:.3f}, {len(r)} rounds; rounds {min(r):.3f}-{max(r):.3f}); "
            f"medians x{vm / bm:.3f}; goal >= {goal:g}: {verdict(lo, hi, goal)}"
            + (f"; {failed} failed runs" if failed else "")
        )
        brief.append(f"{name} x{m:.3f} [{lo:.3f}-{hi:.3f}] {verdict(lo, hi, goal)}")
    lines.append(f"brief: {len(ok)} rounds, goal >= {goal:g}: " + "; ".join(brief))
    return lines


def main(argv):
    if len(argv) < 4:
        sys.exit(__doc__)
    d, goal, names = argv[1], float(argv[2]), argv[3:]
    base = read_rates(f"{d}/base.rates")
    for line in summarize(base, [(n, read_rates(f"{d}/{n}.rates")) for n in names], goal):
        print(line)


if __name__ == "__main__":
    main(sys.argv)
