"""Per-kernel counts from the tools' -j output, for multimod-check.sh.

    multimod_util.py TOOL FILE   prints "exeScale=N libScale=N rtScale=N lateScale=N"
                                 and, for kernel_trace, " lines=N dups=N"

What is counted per kernel: threadhist runs, kernelretsnoop exits, launchlate
launches (timed), kernel_trace threads (summed over its launch records; every
thread line is also checked to be there once). A kernel a tool did not report
counts 0. The last record of a kernel stands for it (the tools print totals
at the end); threadhist and kernelretsnoop print one per kernel.
"""
import collections
import json
import sys

KERNELS = ("exeScale", "libScale", "rtScale", "lateScale")
FIELD = {"threadhist": "runs", "kernelretsnoop": "exits", "launchlate": "launches"}


def main():
    tool, path = sys.argv[1], sys.argv[2]
    counts = collections.Counter()
    lines, seen = 0, collections.Counter()
    for line in open(path, errors="replace"):
        try:
            o = json.loads(line)
        except ValueError:
            continue
        if not isinstance(o, dict):
            continue
        if tool == "kernel_trace":
            if o.get("type") == "launch":
                counts[o.get("kernel")] += o.get("threads", 0)
            elif o.get("type") == "thread":
                lines += 1
                seen[(o["pid"], o["grid"], tuple(o["block"]), tuple(o["thread"]))] += 1
        elif o.get("type") == "kernel":
            counts[o.get("kernel")] = o.get(FIELD[tool], 0)
    out = " ".join(f"{k}={counts.get(k, 0)}" for k in KERNELS)
    others = sorted(k for k in counts if k not in KERNELS)
    if others:
        out += " others=" + ",".join(others)
    if tool == "kernel_trace":
        out += f" lines={lines} dups={sum(1 for v in seen.values() if v != 1)}"
    print(out)


if __name__ == "__main__":
    main()
