#!/usr/bin/env python3
"""Tests of the performance table's plumbing, on a machine without a GPU:

- scripts/gpu/bench_table.py on synthetic rows: ratios to the same
  invocation's untraced median, spreads, probe / hand-written, every
  target met and missed, failed runs counted and listed (never dropped),
  merged files, the host-side file;
- scripts/gpu/table-bench.sh --selftest (its runs, rows, resume, budget and
  failure handling, on stub programs);
- the benchmark BPF objects (bpf/bench/bench_*.bpf.o): the kernel's
  verifier (as root), gpubpf ptx and ptxas, where Go and ptxas are here.

Run: python3 -m unittest scripts/gpu/test_bench_table.py (make test does).
"""

import io
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from contextlib import redirect_stdout

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import bench_table  # noqa: E402

HEADER = "\t".join(bench_table.COLS)


def row(inv, w, mode, rep, status="ok", k="", h="", rate="", at="", fa="", jit="", note="", args="a b"):
    return "\t".join(["00:00:00", inv, w, args, mode, str(rep), status, str(k), str(h), str(rate),
                      str(at), str(fa), str(jit), "1.0", note])


def synthetic():
    """Two invocations whose untraced times differ by 2x (machine drift):
    ratios must come out the same from both."""
    L = ["# test rows", HEADER, "#meta\tdevice\tNVIDIA H100 80GB HBM3", "#meta\tdriver\t580.1",
         "#meta\tcuda_driver_api\t13.0", "#meta\tdate\t2026-11-23",
         "#inv\tA\treps=3", "#inv\tB\treps=2"]
    for inv, scale, reps in (("A", 1.0, 3), ("B", 2.0, 2)):
        for rep in range(1, reps + 1):
            j = 1 + 0.01 * (rep - 2)  # spread: 0.99, 1.00, 1.01
            for w in ("tiny", "large", "medium"):
                L.append(row(inv, w, "base", rep, k=10 * scale, h=20 * scale))
                L.append(row(inv, w, "empty", rep, k=10.1 * scale * j, h=20 * scale))
                L.append(row(inv, w, "globaltimer", rep, k=10.6 * scale, h=20 * scale))
                L.append(row(inv, w, "counter", rep, k=12 * scale, h=22 * scale, note="1001 launches instrumented"))
                L.append(row(inv, w, "hand_counter", rep, k=11.5 * scale, h=21 * scale))
                L.append(row(inv, w, "ring", rep, k=14 * scale, h=30 * scale))
                L.append(row(inv, w, "shared", rep, k=25 * scale, h=40 * scale))
            L.append(row(inv, "launch_heavy", "base", rep, rate=400000 * scale, h=2.5 / scale))
            L.append(row(inv, "launch_heavy", "idle", rep, rate=392000 * scale, h=2.55 / scale))
            L.append(row(inv, "attach_vec_add", "p", rep, at=50 + rep, fa=20, jit=8))
            L.append(row(inv, "attach_many_kernels", "p", rep, at=150, fa=120, jit=90))
            L.append(row(inv, "attach_many_kernels", "cmd", rep, at=400, fa=380, jit=90))
    # A failed run, a timed-out one, and a mode whose only run failed.
    L.append(row("A", "tiny", "counter", 4, status="failed", note="no 'RESULT vec_add ok' (exit 1)"))
    L.append(row("B", "large", "ring", 3, status="timeout", note="killed after 120s"))
    L.append(row("A", "tiny", "kernel_trace", 1, status="failed", note="no instrumented launch reported (0)"))
    L.append(row("A", "medium", "counter", 9, k=12, h=22, note="PARTIAL: 900 of 1001 launches instrumented"))
    return "\n".join(L) + "\n"


HOST = """# make bench-host, 2026-11-23T10:00Z, gpubpf v1, go1.26
# CPU: AMD EPYC 9654, 16 CPUs
goos: linux
cpu: AMD EPYC
BenchmarkScan 	444340147	         2.687 ns/op	 372194433 records/s
BenchmarkScan 	443006906	         2.785 ns/op	 359128771 records/s
BenchmarkScan 	439278417	         2.732 ns/op	 366051822 records/s
BenchmarkDecodePrint/text-1         	11803006	        99.43 ns/op	  10057443 events/s	       0 B/op	       0 allocs/op
BenchmarkCompile4096-1   	     200	   5000000 ns/op
PASS
ok  	github.com/gpubpf/gpubpf/pkg/runtime/gpumap	4.486s
"""


class RendererTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.tsv = os.path.join(self.dir, "2026-11-23-H100.tsv")
        with open(self.tsv, "w") as f:
            f.write(synthetic())
        self.host = os.path.join(self.dir, "host-decode-2026-11-23.txt")
        with open(self.host, "w") as f:
            f.write(HOST)

    def tearDown(self):
        shutil.rmtree(self.dir)

    def stats(self, *paths):
        rows, meta, invs = bench_table.read_rows(list(paths) or [self.tsv])
        return bench_table.analyse(rows), meta, invs

    def test_ratios_cancel_drift_between_invocations(self):
        st, _, _ = self.stats()
        c = st["large"]["counter"]["kernel"]
        self.assertEqual(c.n, 5)
        self.assertAlmostEqual(c.median, 1.2)
        self.assertAlmostEqual(c.values[0], 1.2)
        self.assertAlmostEqual(c.values[-1], 1.2)
        # The absolute median mixes the two machines' speeds.
        self.assertAlmostEqual(st["large"]["counter"]["kernel_abs"].median, 12.0)
        self.assertAlmostEqual(st["large"]["counter"]["host"].median, 1.1)

    def test_spread(self):
        st, _, _ = self.stats()
        e = st["tiny"]["empty"]["kernel"]
        self.assertAlmostEqual(e.values[0], 1.01 * 0.99)
        self.assertAlmostEqual(e.values[-1], 1.01 * 1.01)
        self.assertEqual(e.text(), "1.010 [1.000-1.020]")

    def test_probe_over_hand(self):
        st, _, _ = self.stats()
        self.assertAlmostEqual(bench_table.probe_over_hand(st["large"], "counter", "kernel"), 12 / 11.5)
        self.assertAlmostEqual(bench_table.probe_over_hand(st["large"], "counter", "host"), 22 / 21)
        # empty: the ideal is the untraced run, probe / hand is its ratio
        self.assertAlmostEqual(bench_table.probe_over_hand(st["large"], "empty", "kernel"), 1.01)
        # no twin measured
        self.assertIsNone(bench_table.probe_over_hand(st["large"], "ring", "kernel"))

    def test_targets(self):
        st, _, _ = self.stats()
        got = {(t.name, w): (v, ok) for t, w, v, ok in bench_table.judge_all(st)}
        self.assertEqual(got[("empty probe <= 1.02x", "tiny")][1], True)
        self.assertEqual(got[("globaltimer probe <= 1.05x", "large")][1], False)  # 1.06
        self.assertEqual(got[("per-thread counter <= 1.15x at large", "large")][1], False)  # 1.2
        self.assertEqual(got[("counter probe / hand-written <= 1.10", "large")][1], True)  # 1.043
        self.assertEqual(got[("ring record per thread <= 1.5x at medium", "medium")][1], True)  # 1.4
        self.assertEqual(got[("CPU-shared map update from the GPU <= 2x", "tiny")][1], False)  # 2.5
        self.assertAlmostEqual(got[("agent idle >= 0.99 of the launch rate", "launch_heavy")][0], 0.98)
        self.assertEqual(got[("agent idle >= 0.99 of the launch rate", "launch_heavy")][1], False)
        self.assertEqual(got[("attach with -p <= 100 ms", "attach_vec_add")], (52, True))
        self.assertEqual(got[("attach with -p <= 100 ms", "attach_many_kernels")][1], False)
        # Workloads with no rows are not judged at all.
        self.assertNotIn(("empty probe <= 1.02x", "xlarge"), got)
        self.assertNotIn(("empty probe <= 1.02x", "compute_bound"), got)

    def test_failed_runs_counted_never_dropped(self):
        st, _, _ = self.stats()
        c = st["tiny"]["counter"]
        self.assertEqual(c["runs"], 6)
        self.assertEqual(c["ok"], 5)
        self.assertEqual(len(c["failed"]), 1)
        self.assertEqual(c["kernel"].n, 5)
        kt = st["tiny"]["kernel_trace"]
        self.assertEqual((kt["ok"], len(kt["failed"]), kt["kernel"].n), (0, 1, 0))
        md, judged, failed = bench_table.render(st, {}, {}, None, [self.tsv])
        self.assertEqual(len(failed), 3)
        self.assertIn("| tiny | counter | 4 | failed | A | no 'RESULT vec_add ok' (exit 1) |", md)
        self.assertIn("| large | ring | 3 | timeout | B | killed after 120s |", md)
        self.assertIn("**1 FAILED**", md)
        self.assertIn("medium counter rep 9: PARTIAL: 900 of 1001 launches instrumented", md)
        self.assertIn("1 partial", md)

    def test_render_markdown(self):
        st, meta, invs = self.stats()
        md, judged, failed = bench_table.render(st, meta, invs, self.host, [self.tsv])
        for want in ("# gpubpf performance table: NVIDIA H100 80GB HBM3, 2026-11-23",
                     "- Driver: 580.1", "- CUDA (driver API, nvidia-smi): 13.0", "- Invocations of table-bench.sh: 2",
                     "## Targets (issues 17 and 47)", "| per-thread counter <= 1.15x at large | large | 1.200 | MISSED |",
                     "| counter probe / hand-written <= 1.10 | large | 1.043 | met |",
                     "| attach with -p <= 100 ms | attach_many_kernels | 150.0 ms | MISSED |",
                     "## large (a b)", "## launch_heavy (a b)", "## Attach: tool start -> probes active",
                     "1.043, 1.048", "(ideal: untraced)", "agent idle >= 0.99: MISSED",
                     "| BenchmarkScan |", "366,051,822 records/s", "| BenchmarkCompile4096 |", "200 ops/s (from ns/op)",
                     "- CPU: AMD EPYC 9654, 16 CPUs"):
            self.assertIn(want, md, want)
        # The workload sections come in the order.
        self.assertLess(md.index("## tiny"), md.index("## medium"))
        self.assertLess(md.index("## medium"), md.index("## large"))
        self.assertLess(md.index("## large"), md.index("## launch_heavy"))
        # Every markdown table row has as many cells as its header.
        cells = None
        for line in md.splitlines():
            if line.startswith("| ") and line.endswith("|"):
                n = line.count("|")
                if cells is None:
                    cells = n
                self.assertEqual(n, cells, line)
            else:
                cells = None

    def test_render_drain(self):
        drain = os.path.join(self.dir, "drain-rate.txt")
        with open(drain, "w") as f:
            f.write("base: vec_add 10000 50000 256 40, kernel 6.56 us\n\n"
                    "r256: x1.58 kernel; steady 213 M records/s (8.5 GB/s) over 1377 ms\n"
                    "SUMMARY: vec_add medium x 50000: r256 213M/s 42.4% dropped\n")
        st, meta, invs = self.stats()
        md, _, _ = bench_table.render(st, meta, invs, self.host, [self.tsv], drain)
        self.assertIn("## Ring delivery in steady state (issue 47)", md)
        self.assertIn("- r256: x1.58 kernel; steady 213 M records/s (8.5 GB/s) over 1377 ms", md)
        self.assertIn("- SUMMARY: vec_add medium x 50000: r256 213M/s 42.4% dropped", md)
        self.assertLess(md.index("## Ring delivery"), md.index("## Host side"))
        md, _, _ = bench_table.render(st, meta, invs, self.host, [self.tsv])
        self.assertNotIn("## Ring delivery", md)

    def test_merge_counts_a_row_once(self):
        copy = os.path.join(self.dir, "part2.tsv")
        shutil.copy(self.tsv, copy)
        with open(copy, "a") as f:
            f.write(row("C", "tiny", "base", 1, k=5, h=10) + "\n" + row("C", "tiny", "counter", 1, k=6, h=11) + "\n")
        one, _, _ = self.stats(self.tsv)
        both, _, _ = self.stats(self.tsv, copy)
        self.assertEqual(one["tiny"]["counter"]["runs"] + 1, both["tiny"]["counter"]["runs"])
        self.assertEqual(both["tiny"]["counter"]["kernel"].n, 6)

    def test_main_brief_and_output(self):
        out = os.path.join(self.dir, "t.md")
        buf = io.StringIO()
        with redirect_stdout(buf):
            rc = bench_table.main([self.tsv, "-o", out, "--host", self.host, "--brief"])
        self.assertEqual(rc, 0)
        text = buf.getvalue().splitlines()
        self.assertTrue(os.path.getsize(out) > 1000)
        self.assertRegex(text[-1], r"^targets: \d+ met, \d+ MISSED, \d+ not measured; 3 failed runs in the table$")
        met = sum(1 for l in text if l.startswith("target met"))
        missed = sum(1 for l in text if l.startswith("target MISSED"))
        self.assertIn(f"targets: {met} met, {missed} MISSED", text[-1])
        self.assertTrue(any(l.startswith("failed run: tiny counter rep 4") for l in text))

    def test_empty_and_garbage_input(self):
        p = os.path.join(self.dir, "empty.tsv")
        with open(p, "w") as f:
            f.write("# nothing yet\n" + HEADER + "\n" + row("A", "tiny", "base", 1, k="", h="nan") + "\n")
        st, meta, invs = self.stats(p)
        md, judged, failed = bench_table.render(st, meta, invs, None, [p])
        self.assertIn("No host-side file", md)
        self.assertEqual(st["tiny"]["base"]["kernel"].n, 0)


class SelftestTest(unittest.TestCase):
    def test_table_bench_selftest(self):
        p = subprocess.run(["bash", os.path.join(HERE, "table-bench.sh"), "--selftest"], capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertEqual(p.stdout.strip().splitlines()[-1], "selftest: ok", p.stdout)


class BenchObjectsTest(unittest.TestCase):
    """Every bpf/bench/bench_*.bpf.o passes the kernel's verifier (as
    root), compiles to PTX and assembles: the first GPU run must not be
    spent on a probe that does not build. (pkg/runtime/jit's tests compile
    the kprobe-section objects only.)"""

    def test_objects_compile(self):
        go = shutil.which("go")
        ptxas = os.path.join(os.environ.get("GPUBPF_CUDA_BIN", "/opt/cudadeb/root/usr/bin"), "ptxas")
        if not go:
            self.skipTest("no Go here")
        objs = sorted(f for f in os.listdir(os.path.join(ROOT, "bpf", "bench")) if f.startswith("bench_") and f.endswith(".bpf.o"))
        self.assertGreaterEqual(len(objs), 5, objs)
        d = tempfile.mkdtemp()
        try:
            exe = os.path.join(d, "gpubpf")
            b = subprocess.run([go, "build", "-o", exe, "./tools/gpubpf"], cwd=ROOT, capture_output=True, text=True)
            self.assertEqual(b.returncode, 0, b.stderr)
            for o in objs:
                path = os.path.join(ROOT, "bpf", "bench", o)
                if os.geteuid() == 0:
                    v = subprocess.run([exe, "verify", path], capture_output=True, text=True)
                    self.assertEqual(v.returncode, 0, f"{o}: {v.stdout}{v.stderr}")
                    self.assertNotIn("REFUSED", v.stdout)
                p = subprocess.run([exe, "ptx", path], capture_output=True, text=True)
                self.assertEqual(p.returncode, 0, f"{o}: {p.stderr}")
                self.assertIn(".func", p.stdout)
                if os.access(ptxas, os.X_OK):
                    src = os.path.join(d, o + ".ptx")
                    with open(src, "w") as f:
                        f.write(p.stdout)
                    a = subprocess.run([ptxas, "-arch=sm_90", src, "-o", os.path.join(d, o + ".cubin")], capture_output=True, text=True)
                    self.assertEqual(a.returncode, 0, f"{o}: ptxas: {a.stderr}")
        finally:
            shutil.rmtree(d)


if __name__ == "__main__":
    unittest.main()
