#!/usr/bin/env bash
# Builds ptxab (nvcc, the GPU machine) and runs it under the CUPTI tracer:
#   scripts/gpu/ptxab/run.sh "ELEMENTS ITERATIONS THREADS BLOCKS" REPS NAME=FILE.ptx...
# Prints per variant the CUDA-event time and the kernels' own GPU duration
# (CUPTI, median), each also as a ratio to the first variant.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
preset=$1 reps=$2
shift 2
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
"$nvcc" -O2 -o "$T/ptxab" "$here/ptxab.cu" -lcuda
"$root/scripts/gpu/cupti/build.sh" >"$T/cupti.txt" 2>&1 || { cat "$T/cupti.txt"; exit 1; }
# shellcheck disable=SC2086
CUDA_INJECTION64_PATH="$root/scripts/gpu/cupti/libcupti_trace.so" CUPTI_TRACE_OUT="$T/k.txt" \
	"$T/ptxab" $preset "$reps" "$@" >"$T/ev.txt"
python3 - "$T/k.txt" "$T/ev.txt" "$@" <<'PY'
import statistics, sys
kt, ev, names = sys.argv[1], sys.argv[2], [a.split("=", 1)[0] for a in sys.argv[3:]]
d = {}
for line in open(kt):
    head, _, name = line.partition(" name=")
    f = dict(kv.split("=", 1) for kv in head.split())
    d.setdefault(name.strip(), []).append(int(f["end"]) - int(f["start"]))
e = {l.split()[0]: float(l.split()[2]) for l in open(ev)}
g = {n: statistics.median(next(v for k, v in d.items() if k.endswith("_" + n))) / 1e3 for n in names}
b = names[0]
for n in names:
    print(f"{n:12s} event {e[n]:7.3f} us x{e[n]/e[b]:.3f}   GPU {g[n]:7.3f} us x{g[n]/g[b]:.3f}")
PY
