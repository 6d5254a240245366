#!/usr/bin/env python3
"""Helpers of scripts/gpu/memtrace-check.sh (no GPU needed; `selftest` checks them).

    memtrace_util.py ptxcount PTXFILE KERNEL
        Counts the instructions of .entry KERNEL in PTXFILE (cuobjdump -ptx
        output or a .ptx file) that the memory-access pass instruments, by
        the pass's rules (pkg/runtime/instrument memAccess): ld/ldu (loads),
        st (stores), atom/red (atomics), not in the param, local, shared,
        const or tex state spaces, not async/bulk. Prints "LOADS STORES
        ATOMICS".
    memtrace_util.py counts OUTFILE KERNEL
        From `gpubpf run -j bpf/examples/mem_trace_bpfel.o` output: the
        kernel index of KERNEL (its "kernel_index" line), then the map
        "accesses" summed over processes and devices for that index by
        kind, the entries of any other index, and the map "sizes". Prints
        "LOADS STORES ATOMICS OTHER SIZES" (OTHER: "none" or
        index:kind=count,...; SIZES: kind/bytes=count,... sorted).
    memtrace_util.py selftest TESTDATA
        TESTDATA is pkg/runtime/instrument/testdata: samples/vec_add.cu's
        nvcc 11.8 PTX has 10 loads, 5 stores, 1 atomic; the atomics
        fixture's counts agree with the Go test's (TestMemAccessAtomicsFixture).
"""
import json
import re
import sys

_SKIP = {"param", "local", "shared", "const", "tex", "async", "bulk"}
_KIND = {"ld": "load", "ldu": "load", "st": "store", "atom": "atomic", "red": "atomic"}


def access(op):
    """The kind of access opcode op is for the memory probe, or None."""
    parts = op.split(".")
    kind = _KIND.get(parts[0])
    if kind is None:
        return None
    for p in parts[1:]:
        if p.split("::")[0] in _SKIP:
            return None
    return kind


def entry_body(text, kernel):
    m = re.search(r"\.entry\s+" + re.escape(kernel) + r"\b", text)
    if not m:
        raise SystemExit("no .entry %s in the PTX" % kernel)
    i = text.index("{", m.end())
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j]
    raise SystemExit("unterminated .entry %s" % kernel)


def ptxcount(text, kernel):
    body = re.sub(r"//[^\n]*", "", entry_body(text, kernel))
    # cuobjdump -ptx keeps .loc/.file debug directives, which end without a
    # ';' and would swallow the instruction after them.
    body = re.sub(r"^\s*\.(loc|file)\b[^\n]*", "", body, flags=re.M)
    n = {"load": 0, "store": 0, "atomic": 0}
    for stmt in body.split(";"):
        s = stmt.replace("{", " ").replace("}", " ").strip()
        s = re.sub(r"^([$%\w]+:\s*)+", "", s)  # labels
        s = re.sub(r"^@!?%\w+\s+", "", s)  # predicate
        if not s or s.startswith("."):
            continue
        k = access(s.split()[0])
        if k:
            n[k] += 1
    return n["load"], n["store"], n["atomic"]


def counts(lines, kernel):
    index = None
    acc, sizes = {}, {}
    for line in lines:
        try:
            o = json.loads(line)
        except ValueError:
            continue
        if not isinstance(o, dict):
            continue
        if o.get("type") == "kernel_index" and o.get("kernel") == kernel:
            index = o.get("index")
        if o.get("type") != "map":
            continue
        where = (o.get("pid"), o.get("device"), o.get("key"))
        if o.get("map") == "accesses":
            acc[where] = int(o["value"])
        elif o.get("map") == "sizes":
            sizes[where] = int(o["value"])
    by = {"load": 0, "store": 0, "atomic": 0}
    other = {}
    for (_, _, key), v in acc.items():
        m = re.search(r"kernel=(\d+) kind=(\w+)", key)
        if not m:
            other[key] = other.get(key, 0) + v
            continue
        if index is not None and int(m.group(1)) == index and m.group(2) in by:
            by[m.group(2)] += v
        else:
            k = "%s:%s" % (m.group(1), m.group(2))
            other[k] = other.get(k, 0) + v
    sz = {}
    for (_, _, key), v in sizes.items():
        m = re.search(r"kind=(\w+) bytes=(\d+)", key)
        k = "%s/%s" % (m.group(1), m.group(2)) if m else key
        sz[k] = sz.get(k, 0) + v
    fmt = lambda d: ",".join("%s=%d" % (k, d[k]) for k in sorted(d)) or "none"
    return by["load"], by["store"], by["atomic"], fmt(other), fmt(sz)


def selftest(testdata):
    got = ptxcount(open(testdata + "/vec_add_sample_cuda118.ptx").read(), "_Z9vectorAddPKfS0_Pfi")
    assert got == (10, 5, 1), got
    atomics = open(testdata + "/atomics_cuda118.ptx").read()
    got = ptxcount(atomics, "_Z5mixedPfPdPiPyP7__half2PVii"), ptxcount(atomics, "_Z9histogramPKjPji")
    assert got == ((9, 4, 10), (1, 0, 2)), got
    assert access("ld.global.nc.v4.f32") == "load"
    assert access("ld.shared::cta.u32") is None and access("ld.param::entry.u64") is None
    assert access("red.global.add.u64") == "atomic" and access("atom.shared.add.u32") is None
    assert access("st.async.shared::cluster.u32") is None and access("prefetch.global.L2") is None
    out = [
        "RESULT vec_add ok sum=1",
        '{"type":"map","map":"accesses","pid":7,"device":0,"key":"{kernel=0 kind=load}","value":"20"}',
        '{"type":"map","map":"accesses","pid":7,"device":0,"key":"{kernel=0 kind=store}","value":"10"}',
        '{"type":"map","map":"accesses","pid":7,"device":0,"key":"{kernel=0 kind=atomic}","value":"4"}',
        '{"type":"map","map":"accesses","pid":7,"device":0,"key":"{kernel=4294967295 kind=load}","value":"3"}',
        '{"type":"map","map":"sizes","pid":7,"device":0,"key":"{kind=load bytes=4}","value":"23"}',
        '{"type":"map","map":"sizes","pid":7,"device":0,"key":"{kind=atomic bytes=8}","value":"4"}',
        '{"type":"kernel_index","index":0,"kernel":"_Z9vectorAddPKfS0_Pfi","name":"vectorAdd"}',
    ]
    got = counts(out, "_Z9vectorAddPKfS0_Pfi")
    assert got == (20, 10, 4, "4294967295:load=3", "atomic/8=4,load/4=23"), got
    assert counts(out[:1], "k") == (0, 0, 0, "none", "none")
    print("selftest: ok")


def main(argv):
    if len(argv) >= 3 and argv[0] == "ptxcount":
        print("%d %d %d" % ptxcount(open(argv[1]).read(), argv[2]))
    elif len(argv) >= 3 and argv[0] == "counts":
        print("%d %d %d %s %s" % counts(open(argv[1], errors="replace"), argv[2]))
    elif len(argv) >= 2 and argv[0] == "selftest":
        selftest(argv[1])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
