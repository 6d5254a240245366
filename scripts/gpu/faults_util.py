#!/usr/bin/env python3
"""Helpers of scripts/gpu/faults-check.sh (no GPU needed; `selftest` checks them).

    faults_util.py same REF GOT [--sub]
        REF is an untraced run's stdout, GOT the traced run's. Timings (a
        number with a time unit, key=value fields named like *_us, *_ns,
        *_per_s, gflops, ...) are masked. Without --sub the two must be equal
        line for line (the app wrote GOT alone: -p runs); with --sub REF's
        lines must appear in GOT in order (the tool's own output is
        interleaved: -- CMD runs). Exit 0 when they match, else 1 and one
        line saying where they differ.
    faults_util.py records ERRFILE
        From the tool's account line "records: P produced on the GPU = D
        delivered + X dropped (ring full) [+ N ...]" prints "P D X REST"
        (REST = the sum of the other terms); "none" without such a line.
    faults_util.py jsonsum FILE TYPE FIELD [KEY=VALUE]
        The sum of FIELD over the JSON objects of "type" TYPE (and KEY equal
        to VALUE) in FILE, one object per line.
    faults_util.py selftest
"""
import json
import re
import sys

_UNIT = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:e[-+]?\d+)?\s*(?:us|ms|ns|s|GB/s|GFLOP/s)\b")
_KEY = re.compile(
    r"\b(\w*(?:_us|_ns|_ms|_per_s|_per_launch|_per_graph|gflops|cycles_per_ns|spin_cycles|launches_per_s))=\S+"
)
_RATE = re.compile(r"(?<![\w.])\d+(?:\.\d+)?\s+launches/s\b")


def normalize(line):
    line = line.rstrip("\r\n")
    line = _KEY.sub(r"\1=<t>", line)
    line = _RATE.sub("<t> launches/s", line)
    line = _UNIT.sub("<t>", line)
    return line


def lines_of(path):
    with open(path, errors="replace") as f:
        return [normalize(l) for l in f]


def same(ref, got, sub):
    """'' when got matches ref, else where they differ."""
    if not ref:
        return "the untraced run printed nothing"
    if not sub:
        for i, (a, b) in enumerate(zip(ref, got)):
            if a != b:
                return "line %d differs: untraced %r, traced %r" % (i + 1, a, b)
        if len(ref) != len(got):
            return "untraced run printed %d lines, traced %d (first extra: %r)" % (
                len(ref),
                len(got),
                (got[len(ref)] if len(got) > len(ref) else ref[len(got)]),
            )
        return ""
    j = 0
    for i, a in enumerate(ref):
        while j < len(got) and got[j] != a:
            j += 1
        if j == len(got):
            return "untraced line %d %r is missing (in order) from the traced output" % (i + 1, a)
        j += 1
    return ""


_REC = re.compile(r"records: (\d+) produced on the GPU = (\d+) delivered \+ (\d+) dropped \(ring full\)((?:\s*\+ \d+ [^;+]*)*)")


def records(text):
    m = None
    for m in _REC.finditer(text):
        pass
    if not m:
        return None
    rest = sum(int(x) for x in re.findall(r"\+ (\d+)", m.group(4)))
    return int(m.group(1)), int(m.group(2)), int(m.group(3)), rest


def jsonsum(path, typ, field, cond=None):
    k, v = cond.split("=", 1) if cond else (None, None)
    s = 0
    with open(path, errors="replace") as f:
        for line in f:
            try:
                o = json.loads(line)
            except ValueError:
                continue
            if isinstance(o, dict) and o.get("type") == typ and (k is None or str(o.get(k)) == v):
                x = o.get(field, 0)
                s += x if isinstance(x, (int, float)) else 0
    return s


def selftest():
    ref = [
        "device 0: NVIDIA H100 80GB HBM3 sm_90, runtime 13.0, driver 13.0",
        "vec_add: elements=1000 iterations=10 threads=256 blocks=4",
        "Average kernel time: 11.85 us (host-timed launch + cudaDeviceSynchronize, 10 iterations)",
        "Average CUDA-event kernel time: 6.24 us",
        "checked 1000 elements (C = 2.0 * (A + B)): 0 wrong; d_calls=40 (want 40)",
        "RESULT vec_add ok sum=1001500.0 elements=1000 d_calls=40 host_us=11.85 kernel_us=6.24",
    ]
    got = [
        ref[0],
        ref[1],
        "Average kernel time: 13.02 us (host-timed launch + cudaDeviceSynchronize, 10 iterations)",
        "Average CUDA-event kernel time: 7.5 us",
        ref[4],
        "RESULT vec_add ok sum=1001500.0 elements=1000 d_calls=40 host_us=13.02 kernel_us=7.50",
    ]
    n = [normalize(l) for l in ref]
    g = [normalize(l) for l in got]
    assert same(n, g, False) == "", same(n, g, False)
    bad = list(g)
    bad[5] = normalize("RESULT vec_add FAIL reason=wrong_result wrong=3")
    assert "line 6 differs" in same(n, bad, False)
    assert "printed 6 lines, traced 5" in same(n, g[:5], False)
    tool = ["Tracing ...", g[0], '{"type":"kernel","runs":5}', g[1], g[2], g[3], "table", g[4], g[5], "summary"]
    assert same(n, tool, True) == ""
    assert "is missing" in same(n, tool[:-3], True)
    assert "is missing" in same(n, [g[1], g[0]] + g[2:], True)
    assert same([], g, True) != ""
    assert normalize("empty_kernel: launches_per_s=172753 us_per_launch=2.798") == "empty_kernel: launches_per_s=<t> us_per_launch=<t>"
    assert normalize("ROUND 3 ok steps=20") == "ROUND 3 ok steps=20"
    assert normalize("RESULT gated ok rounds=3 threads=256 blocks=4 hostthreads=2 checksum=123") == (
        "RESULT gated ok rounds=3 threads=256 blocks=4 hostthreads=2 checksum=123"
    )
    assert normalize("queued 2000 launches in 11.6 us") == "queued 2000 launches in <t>"
    line = (
        "gpubpf: 1 process(es); kernels instrumented: _Z9vectorAddPKfS0_Pfi; skipped: none; 21 instrumented launches; "
        "records: 2107392 produced on the GPU = 40960 delivered + 2066432 dropped (ring full); JIT 6.1 ms"
    )
    assert records(line) == (2107392, 40960, 2066432, 0), records(line)
    line2 = "records: 10 produced on the GPU = 4 delivered + 3 dropped (ring full) + 2 discarded by the program + 1 not read by the tool; x"
    assert records(line2) == (10, 4, 3, 3), records(line2)
    line3 = ("records: 10 produced on the GPU = 4 delivered + 6 dropped (ring full); a larger --ring-mb holds a longer "
             "burst, --no-drop loses none (the kernel waits for room)")
    assert records(line3) == (10, 4, 6, 0), records(line3)
    assert records("no account") is None
    print("faults_util selftest: ok")
    return 0


def main(argv):
    if len(argv) >= 4 and argv[1] == "same":
        why = same(lines_of(argv[2]), lines_of(argv[3]), "--sub" in argv[4:])
        if why:
            print(why)
            return 1
        return 0
    if len(argv) == 3 and argv[1] == "records":
        with open(argv[2], errors="replace") as f:
            r = records(f.read())
        print("none" if r is None else "%d %d %d %d" % r)
        return 0
    if len(argv) in (5, 6) and argv[1] == "jsonsum":
        print(jsonsum(argv[2], argv[3], argv[4], argv[5] if len(argv) == 6 else None))
        return 0
    if len(argv) == 2 and argv[1] == "selftest":
        return selftest()
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
