"""soak_util.judge on made-up soak logs: a flat, unharmed pair passes; a
tool whose memory grows, a program slowed while attached or one whose
RESULT is not ok fail, each saying what."""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import soak_util  # noqa: E402

REF, SOAK = 60, 600


def write(d, name, rate=lambda t: 400000, tool_rss=lambda t: 50000, app_rss=lambda t: 300000, dev=lambda t: 500,
          result="RESULT launch_heavy ok", err=""):
    base = os.path.join(d, f"launch_heavy-{name}")
    with open(base + ".app", "w") as f:
        for t in range(10, REF + SOAK + 30, 10):
            f.write(f"RATE t={t:.1f} launches={rate(t) * 10:.0f} per_s={rate(t):.0f}\n")
        f.write(result + "\n")
    with open(base + ".csv", "w") as f:
        f.write("t,tool_rss_kb,app_rss_kb,app_dev_mib\n")
        for t in range(0, REF + SOAK + 30, 10):
            attached = REF <= t < REF + SOAK
            f.write(f"{t},{tool_rss(t) if attached else ''},{app_rss(t)},{dev(t)}\n")
    with open(base + ".err", "w") as f:
        f.write(err)


class JudgeTest(unittest.TestCase):
    def judge(self, **kw):
        with tempfile.TemporaryDirectory() as d:
            write(d, "t", **kw)
            return soak_util.judge(d, "launch_heavy", "t", REF, SOAK)

    def test_flat(self):
        v, line = self.judge(err="gpubpf: 10 kernels instrumented; 0 records dropped\n")
        self.assertEqual(v, "ok", line)
        self.assertIn("rate x1.000 attached", line)
        self.assertIn("0 records dropped", line)

    def test_first_minute_growth_allowed(self):
        v, line = self.judge(tool_rss=lambda t: 20000 if t < REF + 60 else 50000)
        self.assertEqual(v, "ok", line)

    def test_tool_grows(self):
        v, line = self.judge(tool_rss=lambda t: 50000 + (t - REF) * 100)
        self.assertEqual(v, "bad", line)
        self.assertIn("tool RSS grew", line)

    def test_device_memory_grows(self):
        v, line = self.judge(dev=lambda t: 500 + max(0, t - REF) // 10)
        self.assertEqual(v, "bad", line)
        self.assertIn("program device memory grew", line)

    def test_slowed(self):
        v, line = self.judge(rate=lambda t: 300000 if REF <= t < REF + SOAK else 400000)
        self.assertEqual(v, "bad", line)
        self.assertIn("traced rate x0.750", line)

    def test_result_bad(self):
        v, line = self.judge(result="RESULT launch_heavy FAIL reason=wrong_counters")
        self.assertEqual(v, "bad", line)
        self.assertIn("RESULT is not ok", line)


if __name__ == "__main__":
    unittest.main()
