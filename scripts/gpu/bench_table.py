#!/usr/bin/env python3
"""Render the rows of scripts/gpu/table-bench.sh into the performance table.

    bench_table.py ROWS.tsv [MORE.tsv ...] [-o OUT.md] [--host HOST.txt] [--brief]

ROWS.tsv: the raw rows table-bench.sh appends (bench/results/README.md has
the format). Several files (the parts of one table run in several calls) are
merged; a row that appears in more than one is counted once. Without -o the
markdown goes to stdout. --host: `make bench-host` output (go test -bench
of the host-side decoders, from a machine with Go) for the host section.
--brief: print the targets and failed runs as plain text (the markdown is
still written to -o), ending with a line "targets: N met, M MISSED, K not
measured".

Ratios: each run of a mode is divided by the median of the untraced (base)
runs of the same workload in the same invocation of table-bench.sh (its
"inv"), so machine drift between calls cancels; the table shows the median
of those ratios, their min-max and n. A run whose status is not ok is
never dropped: it is counted and listed, and it gives no ratio.

Standard library only: the GPU machine has python3 and nothing else.
"""

import argparse
import math
import os
import re
import statistics
import sys

COLS = ["utc", "inv", "workload", "args", "mode", "rep", "status", "kernel_us", "host_us", "rate",
        "attach_ms", "first_attach_ms", "jit_ms", "secs", "note"]

VEC = ["tiny", "small", "medium", "large", "xlarge"]
KERNEL_TIMED = VEC + ["compute_bound"]
ATTACH = ["attach_vec_add", "attach_many_kernels"]
WORKLOAD_ORDER = VEC + ["compute_bound", "launch_heavy"] + ATTACH
MODE_ORDER = ["base", "idle", "empty", "globaltimer", "counter", "ring", "ring_nodrop", "shared", "shared_direct",
              "threadhist", "kernelretsnoop", "kernel_trace", "launchlate", "gpuevent_snoop",
              "hand_globaltimer", "hand_counter", "hand_ring", "hand_shared", "cmd", "p"]
# probe mode -> its hand-written twin (None: the ideal is no code at all,
# i.e. the untraced run, so probe / hand-written is the probe's ratio).
HAND = {"empty": None, "globaltimer": "hand_globaltimer", "counter": "hand_counter",
        "ring": "hand_ring", "ring_nodrop": "hand_ring", "shared": "hand_shared", "shared_direct": "hand_shared"}
MODE_TEXT = {
    "base": "untraced (its runs against their own median: the noise)",
    "idle": "agent loaded, idle (LD_PRELOAD, nothing attached)",
    "empty": "empty entry + exit probe",
    "globaltimer": "globaltimer probe",
    "counter": "per-thread counter probe",
    "ring": "one ring record per thread (--summary)",
    "ring_nodrop": "one ring record per thread, --no-drop: a warp waits for room, no record lost",
    "shared": "GPU update of a CPU-shared kernel map (1504), per warp, gathered in device memory",
    "shared_direct": "the same, every update on the host link (GPUBPF_SHARED_MAPS=direct)",
    "threadhist": "threadhist -- CMD",
    "kernelretsnoop": "kernelretsnoop -- CMD",
    "kernel_trace": "kernel_trace -- CMD",
    "launchlate": "launchlate -- CMD",
    "gpuevent_snoop": "gpuevent_snoop --summary -- CMD",
    "hand_globaltimer": "hand-written: globaltimer",
    "hand_counter": "hand-written: per-thread counter",
    "hand_ring": "hand-written: ring record (GPU side only)",
    "hand_shared": "hand-written: shared host-memory update",
    "cmd": "gpubpf run -- CMD",
    "p": "gpubpf run -p PID",
}


class Target:
    """One of issue 17's targets, judged on the median over the runs."""

    def __init__(self, name, mode, metric, op, limit, workloads):
        self.name, self.mode, self.metric, self.op, self.limit, self.workloads = name, mode, metric, op, limit, workloads

    def judge(self, value):
        if value is None:
            return None
        return value <= self.limit if self.op == "<=" else value >= self.limit


TARGETS = [
    Target("empty probe <= 1.02x", "empty", "kernel", "<=", 1.02, KERNEL_TIMED),
    Target("globaltimer probe <= 1.05x", "globaltimer", "kernel", "<=", 1.05, KERNEL_TIMED),
    Target("per-thread counter <= 1.15x at large", "counter", "kernel", "<=", 1.15, ["large"]),
    Target("counter probe / hand-written <= 1.10", "counter", "kernel/hand", "<=", 1.10, VEC),
    Target("ring record per thread <= 1.5x at medium", "ring", "kernel", "<=", 1.5, ["medium"]),
    Target("CPU-shared map update from the GPU <= 2x", "shared", "kernel", "<=", 2.0, KERNEL_TIMED),
    Target("agent idle >= 0.99 of the launch rate", "idle", "rate", ">=", 0.99, ["launch_heavy"]),
    Target("attach with -p <= 100 ms", "p", "attach_ms", "<=", 100.0, ATTACH),
    # issue 47: the same sizes' rows at a million threads
    Target("threadhist <= 1.20x at xlarge", "threadhist", "kernel", "<=", 1.20, ["xlarge"]),
    Target("kernelretsnoop <= 1.25x at xlarge", "kernelretsnoop", "kernel", "<=", 1.25, ["xlarge"]),
    Target("kernel_trace <= 1.25x at xlarge", "kernel_trace", "kernel", "<=", 1.25, ["xlarge"]),
    Target("per-thread counter <= 1.20x at xlarge", "counter", "kernel", "<=", 1.20, ["xlarge"]),
]


def num(s):
    try:
        v = float(s)
    except (TypeError, ValueError):
        return None
    return v if v == v else None  # NaN is no number


def read_rows(paths):
    """Rows (dicts), meta (key -> value, the last one seen) and the
    invocations' descriptions, from every file."""
    rows, meta, invs, seen = [], {}, {}, set()
    for path in paths:
        with open(path, errors="replace") as f:
            for line in f:
                line = line.rstrip("\n")
                if not line:
                    continue
                if line.startswith("#meta\t"):
                    parts = line.split("\t", 2)
                    if len(parts) == 3 and parts[2]:
                        meta[parts[1]] = parts[2]
                    continue
                if line.startswith("#inv\t"):
                    parts = line.split("\t", 2)
                    if len(parts) == 3:
                        invs[parts[1]] = parts[2]
                    continue
                if line.startswith("#") or line.startswith("utc\t"):
                    continue
                fields = line.split("\t")
                if len(fields) < len(COLS):
                    fields += [""] * (len(COLS) - len(fields))
                key = tuple(fields[:len(COLS)])
                if key in seen:
                    continue
                seen.add(key)
                rows.append(dict(zip(COLS, fields)))
    return rows, meta, invs


def rep_key(r):
    n = num(r["rep"])
    return (0, n) if n is not None else (1, r["rep"])


def order_key(order, name):
    return (order.index(name), name) if name in order else (len(order), name)


class Stat:
    """Ratios (or plain values) of one metric over the runs of a mode."""

    def __init__(self, values):
        self.values = sorted(v for v in values if v is not None)

    @property
    def n(self):
        return len(self.values)

    @property
    def median(self):
        return statistics.median(self.values) if self.values else None

    def text(self, fmt="{:.3f}"):
        if not self.values:
            return "-"
        if len(self.values) == 1:
            return fmt.format(self.values[0])
        return (fmt + " [" + fmt + "-" + fmt + "]").format(self.median, self.values[0], self.values[-1])


def fmt_abs(v, digits=2):
    return "-" if v is None else f"{v:.{digits}f}"


def analyse(rows):
    """Per workload: the stats of each mode (ratios to the same
    invocation's base median, absolute medians, counts)."""
    by_w = {}
    for r in rows:
        by_w.setdefault(r["workload"], []).append(r)
    out = {}
    for w, wrows in by_w.items():
        base = {}  # inv -> metric -> median of its ok base runs
        for inv in sorted({r["inv"] for r in wrows}):
            b = [r for r in wrows if r["inv"] == inv and r["mode"] == "base" and r["status"] == "ok"]
            base[inv] = {}
            for m in ("kernel_us", "host_us", "rate"):
                vals = [num(r[m]) for r in b if num(r[m]) is not None]
                base[inv][m] = statistics.median(vals) if vals else None
        modes = {}
        # sorted: a set's order changes with each process's string hashing,
        # and the float sums over modes (wall time) with it
        for mode in sorted({r["mode"] for r in wrows}):
            mrows = [r for r in wrows if r["mode"] == mode]
            ok = [r for r in mrows if r["status"] == "ok"]
            s = {"runs": len(mrows), "ok": len(ok), "failed": [r for r in mrows if r["status"] != "ok"],
                 "partial": [r for r in ok if r["note"].startswith("PARTIAL")]}
            for m, key in (("kernel_us", "kernel"), ("host_us", "host"), ("rate", "rate")):
                ratios = []
                for r in ok:
                    v, b = num(r[m]), base[r["inv"]].get(m)
                    if v is not None and b:
                        ratios.append(v / b)
                s[key] = Stat(ratios)
                s[key + "_abs"] = Stat([num(r[m]) for r in ok])
            for m in ("attach_ms", "first_attach_ms", "jit_ms"):
                s[m] = Stat([num(r[m]) for r in ok])
            s["jit_share"] = Stat([num(r["jit_ms"]) / num(r["attach_ms"]) for r in ok
                                   if num(r["jit_ms"]) is not None and num(r["attach_ms"])])
            s["args"] = mrows[0]["args"]
            s["secs"] = sum(num(r["secs"]) or 0 for r in mrows)
            s["notes"] = [r["note"] for r in ok if r["note"]]
            modes[mode] = s
        out[w] = modes
    return out


def wall_seconds(modes):
    # fsum: the same total whatever the order (the table rendered twice
    # from the same rows must not differ by a rounding)
    return math.fsum(s["secs"] for s in modes.values())


def probe_over_hand(modes, mode, metric):
    """probe / hand-written for one metric: the quotient of the two median
    ratios (both to the same base, which cancels)."""
    if mode not in HAND or mode not in modes:
        return None
    p = modes[mode][metric].median
    if HAND[mode] is None:
        return p
    h = modes.get(HAND[mode])
    if p is None or h is None or not h[metric].median:
        return None
    return p / h[metric].median


def target_value(t, modes):
    if t.mode not in modes:
        return None
    if t.metric == "kernel/hand":
        return probe_over_hand(modes, t.mode, "kernel")
    if t.metric == "attach_ms":
        return modes[t.mode]["attach_ms"].median
    return modes[t.mode][t.metric].median


def judge_all(stats):
    """(target, workload, value, verdict) for every target and every
    workload it concerns that has rows; verdict True, False or None (not
    measured: the mode did not run, or no run of it was ok)."""
    res = []
    for t in TARGETS:
        for w in t.workloads:
            if w not in stats:
                continue
            v = target_value(t, stats[w])
            res.append((t, w, v, t.judge(v)))
    return res


def verdict_text(ok):
    return {True: "met", False: "MISSED", None: "not measured"}[ok]


def value_text(t, v):
    if v is None:
        return "-"
    return f"{v:.1f} ms" if t.metric == "attach_ms" else f"{v:.3f}"


def render(stats, meta, invs, host, paths, drain=None):
    L = []
    dev = meta.get("device", "unknown GPU")
    L.append(f"# gpubpf performance table: {dev}, {meta.get('date', '?')}")
    L.append("")
    L.append("Made by `scripts/gpu/table-bench.sh` (`make bench` on the GPU machine) and "
             "`scripts/gpu/bench_table.py` from " + ", ".join(f"`{os.path.basename(p)}`" for p in paths) +
             "; bench/results/README.md says how to run it and what each number is.")
    L.append("")
    for k, label in (("device", "Device"), ("driver", "Driver"), ("cuda_driver_api", "CUDA (driver API, nvidia-smi)"),
                     ("cuda_runtime", "CUDA runtime of the samples"), ("nvcc", "nvcc"), ("gpu_clocks", "Max SM clock, memory clock, power limit"),
                     ("host", "Host"), ("date", "Date (UTC)")):
        if meta.get(k):
            L.append(f"- {label}: {meta[k]}")
    if invs:
        L.append(f"- Invocations of table-bench.sh: {len(invs)}")
        for inv, desc in sorted(invs.items()):
            L.append(f"  - `{inv}`: {desc}")
    L.append("")
    L.append("Each mode's runs are interleaved with untraced runs of the same workload (one untraced run first in "
             "every repetition, the modes' order rotating); a run's ratio is its time divided by the median untraced "
             "time of the same workload in the same invocation. Shown: median ratio [min-max] over the runs, n = "
             "runs with a ratio. CUDA-event: the sample's CUDA-event kernel time per launch; host-timed: launch + "
             "synchronisation per launch on the host clock (launch_heavy: launches per second, higher is better). "
             "probe / hand-written: the probe's median ratio over the hand-written CUDA twin's (same observation, "
             "`samples/vec_add_ideal.cu`); for the empty probe the ideal is no code, the untraced kernel.")
    L.append("")

    judged = judge_all(stats)
    L.append("## Targets (issues 17 and 47)")
    L.append("")
    if judged:
        L.append("| target | workload | value | verdict |")
        L.append("|---|---|---|---|")
        for t, w, v, ok in judged:
            L.append(f"| {t.name} | {w} | {value_text(t, v)} | {verdict_text(ok)} |")
    else:
        L.append("No workload a target concerns has rows yet.")
    L.append("")

    for w in sorted(stats, key=lambda x: order_key(WORKLOAD_ORDER, x)):
        modes = stats[w]
        if w in ATTACH:
            continue
        args = modes.get("base", next(iter(modes.values())))["args"]
        L.append(f"## {w} ({args})")
        L.append("")
        L.append(f"{sum(s['runs'] for s in modes.values())} runs, {wall_seconds(modes):.0f} s of wall time in all.")
        L.append("")
        launch = any(s["rate"].n for s in modes.values()) or w == "launch_heavy"
        if launch:
            L.append("| mode | launches/s (median) | rate ratio | host us per launch | n | failed | target |")
            L.append("|---|---|---|---|---|---|---|")
        else:
            L.append("| mode | CUDA-event us | CUDA-event ratio | host-timed us | host-timed ratio | n | failed | probe / hand-written (event, host) | target |")
            L.append("|---|---|---|---|---|---|---|---|---|")
        for mode in sorted(modes, key=lambda x: order_key(MODE_ORDER, x)):
            s = modes[mode]
            fails = len(s["failed"])
            ftxt = f"**{fails} FAILED**" if fails else "0"
            if s["partial"]:
                ftxt += f", {len(s['partial'])} partial"
            tg = "; ".join(f"{t.name.split(' <=')[0].split(' >=')[0]} {t.op} {t.limit:g}: {verdict_text(ok)}"
                           for t, tw, v, ok in judged if tw == w and t.mode == mode)
            label = f"{mode}: {MODE_TEXT.get(mode, mode)}"
            if launch:
                L.append(f"| {label} | {fmt_abs(s['rate_abs'].median, 0)} | {s['rate'].text()} | "
                         f"{fmt_abs(s['host_abs'].median, 3)} | {s['rate'].n} | {ftxt} | {tg} |")
            else:
                ph = "-"
                if mode in HAND:
                    pk, phh = probe_over_hand(modes, mode, "kernel"), probe_over_hand(modes, mode, "host")
                    ph = f"{fmt_abs(pk, 3)}, {fmt_abs(phh, 3)}"
                    if HAND[mode] is None:
                        ph += " (ideal: untraced)"
                L.append(f"| {label} | {fmt_abs(s['kernel_abs'].median)} | {s['kernel'].text()} | "
                         f"{fmt_abs(s['host_abs'].median)} | {s['host'].text()} | {s['kernel'].n} | {ftxt} | {ph} | {tg} |")
        notes = {m: s["notes"][-1] for m, s in modes.items() if s["notes"]}
        if notes:
            L.append("")
            L.append("Last run's account per mode: " + "; ".join(
                f"{m}: {notes[m]}" for m in sorted(notes, key=lambda x: order_key(MODE_ORDER, x))) + ".")
        L.append("")

    att = [w for w in ATTACH if w in stats] + sorted(w for w in stats if w.startswith("attach_") and w not in ATTACH)
    if att:
        L.append("## Attach: tool start -> probes active")
        L.append("")
        L.append("exec -> active: from the tool's exec to its `-v` line saying the kernels are instrumented "
                 "(stamped by table-bench.sh as it arrives; a program launching every few microseconds makes its "
                 "next launch instrumented right after); first_attach: the tool's own count from its trace start "
                 "to the first probe active (`-j` summary); JIT: the driver's compile of the instrumented module; "
                 "JIT share: JIT / (exec -> active). Probe: bench_empty's empty_entry on every kernel. "
                 "many_kernels is one module of 200 kernels.")
        L.append("")
        L.append("| workload | mode | exec -> active ms | first_attach ms | JIT ms | JIT share | n | failed | target |")
        L.append("|---|---|---|---|---|---|---|---|---|")
        for w in att:
            for mode in sorted(stats[w], key=lambda x: order_key(MODE_ORDER, x)):
                s = stats[w][mode]
                fails = len(s["failed"])
                tg = "; ".join(f"<= {t.limit:g} ms: {verdict_text(ok)}" for t, tw, v, ok in judged if tw == w and t.mode == mode)
                L.append(f"| {w} ({s['args']}) | {mode}: {MODE_TEXT.get(mode, mode)} | {s['attach_ms'].text('{:.1f}')} | "
                         f"{s['first_attach_ms'].text('{:.1f}')} | {s['jit_ms'].text('{:.1f}')} | "
                         f"{fmt_abs(s['jit_share'].median, 2)} | {s['attach_ms'].n} | "
                         f"{('**%d FAILED**' % fails) if fails else '0'} | {tg} |")
        L.append("")

    if drain:
        L.extend(render_drain(drain))
        L.append("")

    L.append("## Host side: records decoded per second per core")
    L.append("")
    if host:
        L.extend(render_host(host))
    else:
        L.append("No host-side file (`make bench-host` on a machine with Go writes bench/results/host-decode-DATE.txt; "
                 "pass it with --host).")
    L.append("")

    failed = [r for w in stats.values() for s in w.values() for r in s["failed"]]
    partial = [r for w in stats.values() for s in w.values() for r in s["partial"]]
    L.append("## Failed runs")
    L.append("")
    if failed:
        L.append("| workload | mode | rep | status | inv | why |")
        L.append("|---|---|---|---|---|---|")
        for r in sorted(failed, key=lambda r: (order_key(WORKLOAD_ORDER, r["workload"]), order_key(MODE_ORDER, r["mode"]), rep_key(r))):
            L.append(f"| {r['workload']} | {r['mode']} | {r['rep']} | {r['status']} | {r['inv']} | {r['note'].replace('|', '/')} |")
    else:
        L.append("None.")
    if partial:
        L.append("")
        L.append("Runs where the tool instrumented fewer launches than the program made (counted, their ratios kept):")
        for r in partial:
            L.append(f"- {r['workload']} {r['mode']} rep {r['rep']}: {r['note']}")
    L.append("")
    return "\n".join(L), judged, failed


BENCH_RE = re.compile(r"^(Benchmark\S+?)(?:-(\d+))?\s+(\d+)\s+([\d.]+) ns/op(.*)$")
METRIC_RE = re.compile(r"([\d.e+]+) (\S+/s)")
HOST_TEXT = {
    "BenchmarkScan": "GPU ring records (40 bytes, trace/kernel_trace event) parsed out of a drained ring (pkg/runtime/gpumap)",
    "BenchmarkAppendTraceEvent": "gpubpf run: a ring record printed through its BTF type, compiled formatter (pkg/btffmt)",
    "BenchmarkFormatTraceEvent": "gpubpf run: the same, Format per record (pkg/btffmt)",
    "BenchmarkRefFormatTraceEvent": "gpubpf run: the same, the original type-walking formatter (pkg/btffmt)",
    "BenchmarkDecodePrint/text": "gpuevent_snoop: a CUDA API event decoded and printed as text",
    "BenchmarkDecodePrint/json": "gpuevent_snoop: a CUDA API event decoded and printed as JSON",
}


def parse_host(path):
    """(header lines, {benchmark: {"rate": [...], "unit": str, "ns": [...]}})"""
    head, benches = [], {}
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("# "):
                head.append(line[2:])
                continue
            if line.startswith(("goos:", "goarch:", "cpu:")):
                head.append(line)
                continue
            m = BENCH_RE.match(line)
            if not m:
                continue
            b = benches.setdefault(m.group(1), {"rate": [], "unit": "", "ns": []})
            b["ns"].append(float(m.group(4)))
            for val, unit in METRIC_RE.findall(m.group(5)):
                if unit in ("records/s", "events/s"):
                    b["rate"].append(float(val))
                    b["unit"] = unit
    return list(dict.fromkeys(head)), benches


def render_host(path):
    head, benches = parse_host(path)
    L = [f"From `{os.path.basename(path)}` (`make bench-host`: go test -bench, -cpu 1, on the build machine, not the GPU machine):", ""]
    for h in head:
        L.append(f"- {h}")
    L.append("")
    if not benches:
        L.append("No benchmark lines in the file.")
        return L
    L.append("| benchmark | what | per second per core (median) | ns each | runs |")
    L.append("|---|---|---|---|---|")
    for name in sorted(benches):
        b = benches[name]
        if b["rate"]:
            rate = f"{statistics.median(b['rate']):,.0f} {b['unit']}"
        else:
            rate = f"{1e9 / statistics.median(b['ns']):,.0f} ops/s (from ns/op)"
        L.append(f"| {name} | {HOST_TEXT.get(name, '')} | {rate} | {statistics.median(b['ns']):.1f} | {len(b['ns'])} |")
    L.append("")
    L.append("Not covered by a host benchmark yet: kernel_trace's and kernelretsnoop's per-record output; "
             "threadhist and launchlate ship no record per thread (they read maps).")
    return L


def render_drain(path):
    """The ring's delivery in steady state: scripts/gpu/drain-rate.sh's
    output (issue 47), its lines as they are, under the goal."""
    L = ["## Ring delivery in steady state (issue 47)", "",
         f"From `{os.path.basename(path)}` (`scripts/gpu/drain-rate.sh` on the GPU machine, same device): "
         "one 40-byte record per thread (bpf/examples/trace_bpfel.o) on vec_add medium launched back to back "
         "for seconds; delivered/s over the window from the first drain that handed records to the tool to the "
         "last. Goal: >= 500 M records (20 GB) a second delivered, drops at medium below 50%. "
         "CPU and minor faults are /usr/bin/time's: the tool and the program it started together.", ""]
    for line in open(path, errors="replace"):
        line = line.rstrip()
        if line:
            L.append(f"- {line}")
    return L


def brief(judged, failed, stats=None):
    out = []
    for t, w, v, ok in judged:
        out.append(f"target {verdict_text(ok):12s} {t.name} [{w}]: {value_text(t, v)}")
    shown = 20
    for r in failed[:shown]:
        out.append(f"failed run: {r['workload']} {r['mode']} rep {r['rep']} ({r['status']}): {r['note'][:160]}")
    if len(failed) > shown:
        out.append(f"... and {len(failed) - shown} more failed runs (the table lists them all)")
    met = sum(1 for *_, ok in judged if ok is True)
    missed = sum(1 for *_, ok in judged if ok is False)
    unmeasured = sum(1 for *_, ok in judged if ok is None)
    if stats:
        out.append("wall time so far: " + ", ".join(f"{w} {wall_seconds(stats[w]):.0f} s"
                                                     for w in sorted(stats, key=lambda x: order_key(WORKLOAD_ORDER, x))))
    out.append(f"targets: {met} met, {missed} MISSED, {unmeasured} not measured; {len(failed)} failed runs in the table")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Render table-bench.sh rows into bench/results/DATE-DEVICE.md")
    ap.add_argument("tsv", nargs="+")
    ap.add_argument("-o", "--output")
    ap.add_argument("--host")
    ap.add_argument("--drain", help="scripts/gpu/drain-rate.sh's output, rendered as the ring's steady-state section")
    ap.add_argument("--brief", action="store_true")
    a = ap.parse_args(argv)
    rows, meta, invs = read_rows(a.tsv)
    stats = analyse(rows)
    md, judged, failed = render(stats, meta, invs, a.host, a.tsv, a.drain)
    if a.output:
        tmp = a.output + ".tmp"
        with open(tmp, "w") as f:
            f.write(md)
        os.replace(tmp, a.output)
    elif not a.brief:
        sys.stdout.write(md)
    if a.brief:
        print(brief(judged, failed, stats))
    return 0


if __name__ == "__main__":
    sys.exit(main())
