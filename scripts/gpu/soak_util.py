"""Reads a soak's logs (scripts/gpu/soak-check.sh) and judges one pair of
a program and a tool attached to it:

    soak_util.py judge DIR APP TOOL REF SOAK

DIR/APP-TOOL.app: the program's output, "RATE t=T ... per_s=X" lines (t in
seconds since it started) and its RESULT line; DIR/APP-TOOL.csv: samples
"t,tool_rss_kb,app_rss_kb,app_dev_mib" (t since the program started, empty
where the process was gone); DIR/APP-TOOL.err: the tool's stderr.

The phases: untraced (t < REF), traced from one minute after the attach
to the detach (REF + 60 <= t < REF + SOAK), and after the detach
(t >= REF + SOAK + 5). Prints one line: "ok ..." or "bad ...", with the
rate ratios (median traced / median untraced, after / untraced), each
memory curve's first-minute value and its growth after it, and the
tool's account of drops.
"""
import csv
import re
import statistics
import sys

# Flat: growth after the first minute of the attach at most this much (or
# this fraction of the value, whichever is larger).
FLAT_KB = 8 << 10
FLAT_FRAC = 0.05
DEV_FLAT_MIB = 4
# Within the noise: the traced median at least this fraction of the
# untraced one (what issue 44 asks of a long attach: no slower than the
# noise of the untraced run; the noise measured is printed beside it).
RATE_MIN = 0.9


def rates(path):
    out = []
    with open(path, errors="replace") as f:
        for line in f:
            m = re.search(r"RATE t=([0-9.]+) \S+ per_s=([0-9.]+)", line)
            if m:
                out.append((float(m.group(1)), float(m.group(2))))
    return out


def samples(path):
    rows = []
    with open(path) as f:
        for r in csv.reader(f):
            if len(r) != 4 or r[0] == "t":
                continue
            rows.append([float(r[0])] + [float(x) if x else None for x in r[1:]])
    return rows


def growth(rows, col, t_from, t_to):
    vals = [r[col] for r in rows if t_from <= r[0] < t_to and r[col] is not None]
    if len(vals) < 2:
        return None, None
    return vals[0], max(vals) - vals[0]


def judge(d, app, tool, ref, soak):
    base = f"{d}/{app}-{tool}"
    rs = rates(base + ".app")
    pre = [v for t, v in rs if t < ref]
    mid = [v for t, v in rs if ref + 60 <= t < ref + soak]
    post = [v for t, v in rs if t >= ref + soak + 5]
    problems = []
    if not pre or not mid:
        return "bad", f"rates: {len(pre)} untraced, {len(mid)} traced intervals"
    m0 = statistics.median(pre)
    noise = (max(pre) - min(pre)) / m0 if len(pre) > 1 else 0.0
    r_mid = statistics.median(mid) / m0
    r_post = statistics.median(post) / m0 if post else float("nan")
    if r_mid < RATE_MIN:
        problems.append(f"traced rate x{r_mid:.3f}")
    if post and r_post < RATE_MIN:
        problems.append(f"rate after the detach x{r_post:.3f}")
    with open(base + ".app", errors="replace") as f:
        app_text = f.read()
    if not re.search(r"RESULT \S+ ok", app_text):
        problems.append("the program's RESULT is not ok")
    rows = samples(base + ".csv")
    parts = []
    for col, name, limit in ((1, "tool RSS", None), (2, "program RSS (agent in it)", None), (3, "program device memory", DEV_FLAT_MIB)):
        first, g = growth(rows, col, ref + 60, ref + soak)
        if first is None:
            problems.append(f"no {name} samples")
            continue
        if col == 3:
            parts.append(f"{name} {first:.0f} MiB +{g:.0f}")
            if g > limit:
                problems.append(f"{name} grew {g:.0f} MiB")
        else:
            parts.append(f"{name} {first / 1024:.1f} MiB +{g / 1024:.1f}")
            if g > max(FLAT_KB, FLAT_FRAC * first):
                problems.append(f"{name} grew {g / 1024:.1f} MiB")
    with open(base + ".err", errors="replace") as f:
        err = f.read()
    drops = re.findall(r"[0-9]+ [^;,\n]*(?:dropped|lost)[^;,\n]*", err)
    verdict = "bad" if problems else "ok"
    line = (f"rate x{r_mid:.3f} attached, x{r_post:.3f} after (untraced {m0:.0f}/s, its spread {noise * 100:.1f}%); "
            + "; ".join(parts) + "; drops: " + ("; ".join(drops[:3]) if drops else "none said"))
    if problems:
        line = ", ".join(problems) + " | " + line
    return verdict, line


def main():
    if len(sys.argv) == 7 and sys.argv[1] == "judge":
        v, line = judge(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]), float(sys.argv[6]))
        print(v, line)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
