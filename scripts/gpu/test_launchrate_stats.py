#!/usr/bin/env python3
"""Tests of scripts/gpu/launchrate_stats.py (make test runs them; no GPU)."""

import os
import random
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import launchrate_stats as ls  # noqa: E402


def noisy(n, level, spread, seed):
    rng = random.Random(seed)
    return [level * (1 + rng.uniform(-spread, spread)) for _ in range(n)]


def jitter(n, spread, seed):
    rng = random.Random(seed)
    return [rng.uniform(-spread, spread) for _ in range(n)]


class Stats(unittest.TestCase):
    def test_pairs_skip_failed_runs(self):
        self.assertEqual(ls.paired_ratios([90, None, 50], [100, 100, None]), [0.9])

    def test_verdicts(self):
        self.assertEqual(ls.verdict(0.91, 0.99, 0.9), "met")
        self.assertEqual(ls.verdict(0.80, 0.89, 0.9), "missed")
        self.assertEqual(ls.verdict(0.85, 0.95, 0.9), "not shown")

    def test_interval_narrows_with_rounds(self):
        base = noisy(400, 250e3, 0.2, 1)
        traced = [b * 0.95 * (1 + e) for b, e in zip(base, jitter(400, 0.15, 2))]
        r = ls.paired_ratios(traced, base)
        _, lo10, hi10 = ls.median_interval(r[:10])
        m, lo, hi = ls.median_interval(r)
        self.assertLess(hi - lo, hi10 - lo10)
        self.assertTrue(lo <= m <= hi)
        self.assertAlmostEqual(m, 0.95, delta=0.02)

    def test_summary_lines(self):
        base = noisy(60, 250e3, 0.2, 3)
        fast = [b * 0.97 for b in base]  # 3% slower, no noise of its own: met
        slow = [b * 0.80 for b in base]  # 20% slower: missed
        noisy_one = [b * (0.9 + e) for b, e in zip(base, jitter(60, 0.3, 4))]
        noisy_one[5] = None
        out = ls.summarize(base, [("fast", fast), ("slow", slow), ("noisy", noisy_one), ("gone", [None] * 60)], 0.9)
        self.assertIn("60 of 60 runs", out[0])
        self.assertRegex(out[1], r"fast +x0\.970 \(95% 0\.970-0\.970, 60 rounds.*goal >= 0\.9: met$")
        self.assertRegex(out[2], r"slow .*goal >= 0\.9: missed$")
        self.assertRegex(out[3], r"noisy .*59 rounds.*not shown; 1 failed runs$")
        self.assertIn("too few rounds (0; 60 failed runs)", out[4])
        self.assertRegex(
            out[5],
            r"^brief: 60 rounds, goal >= 0\.9: fast x0\.970 \[0\.970-0\.970\] met; slow x0\.800 \[0\.800-0\.800\] missed; "
            r"noisy x[0-9.]+ \[[0-9.]+-[0-9.]+\] not shown; gone too few rounds$",
        )

    def test_files(self):
        with tempfile.TemporaryDirectory() as d:
            with open(f"{d}/base.rates", "w") as f:
                f.write("100\n\n200\n")
            self.assertEqual(ls.read_rates(f"{d}/base.rates"), [100.0, None, 200.0])


if __name__ == "__main__":
    unittest.main()
