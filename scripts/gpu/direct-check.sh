#!/usr/bin/env bash
# GPU checks of direct runs (issue 14, part 3): `gpubpf run --direct` runs the
# programs of bpf/examples/direct_run_bpfel.o as kernels of their own, with no
# application, the way a user runs them:
#   1. vec_add over 1M elements with A = k, B = 2k (start/step fills): the
#      --dump file has C[k] == 3k for every k, exactly;
#   2. gemm 64x64x64 over a 4x4 grid of 16x16 blocks, A and B from a
#      --map-file, against a reference computed here in python (u32 wrap);
#      and 48x64 (K = 32) over a 4x3 grid, to catch swapped rows and columns;
#   2b. a loop whose bound is read from a map (bpftime's direct-run GEMM's
#      shape) against a python reference;
#   3. hello: its bpf_printk line arrives ("4 blocks of 256 threads");
#   4. a GPU the machine does not have: a clear error, exit status 1;
#   5. no host process is left running after the runs.
# Every run is bounded by `timeout`. Prints "SUMMARY: ..." last.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
export PATH=$PWD/bin:$PATH
OBJ=bpf/examples/direct_run_bpfel.o
pass=0 fail=0
ok() { echo "ok   $*"; pass=$((pass + 1)); }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }
[ -x bin/gpubpf ] || { echo "missing bin/gpubpf (make gpu-bundle on a build machine, carry bin/)"; exit 1; }
[ -f bin/libgpubpf-agent.so ] || { echo "missing bin/libgpubpf-agent.so (make agent)"; exit 1; }
command -v python3 >/dev/null || { echo "missing python3"; exit 1; }

T=${GPUBPF_GPU_LOGS:-$(mktemp -d)}/direct
rm -rf "$T"
mkdir -p "$T"
TO=120 # seconds per run: each is a host start, a JIT and one kernel

# kernel_ns FILE PROGRAM: the kernel time gpubpf run -j reported
kernel_ns() { python3 - "$@" <<'PY'
import json, sys
v = "missing"
for line in open(sys.argv[1]):
    try: o = json.loads(line)
    except ValueError: continue
    if o.get("type") == "direct" and o.get("program") == sys.argv[2]: v = o.get("kernel_ns")
print(v)
PY
}

# 1. vector add over 1M elements
N=1048576
timeout --kill-after=10 $TO gpubpf run -j --direct --program vec_add --threads $N \
	--map 'vec_A={"start":0,"step":1}' --map 'vec_B={"start":0,"step":2}' --map "vec_N=[$N]" \
	--dump "$T/vec.json" "$OBJ" >"$T/vec.out" 2>"$T/vec.err"
rc=$?
VEC_NS=$(kernel_ns "$T/vec.out" vec_add)
verdict=$(python3 - "$T/vec.json" $N <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    print("no dump: %s" % e); sys.exit()
n = int(sys.argv[2])
a, b, c = d.get("vec_A", []), d.get("vec_B", []), d.get("vec_C", [])
if len(c) != n or len(a) != n or len(b) != n:
    print("dump has %d/%d/%d values, want %d" % (len(a), len(b), len(c), n)); sys.exit()
wrong = [k for k in range(n) if a[k] != k or b[k] != 2 * k or c[k] != 3 * k]
print("ok" if not wrong else "%d wrong, first: C[%d] = %s, want %d" % (len(wrong), wrong[0], c[wrong[0]], 3 * wrong[0]))
PY
)
if [ $rc -eq 0 ] && [ "$verdict" = ok ]; then
	ok "vec_add: C[k] == 3k for all $N keys; kernel $VEC_NS ns"
else
	bad "vec_add: rc=$rc: $verdict"; tail -n 5 "$T/vec.out" "$T/vec.err"
fi

# 2. GEMM against a python reference
gemm() { # NAME M N K GRID: run gemm on inputs made here, check C
	local name=$1 m=$2 n=$3 k=$4 grid=$5
	python3 - "$T/$name.in.json" "$m" "$n" "$k" <<'PY'
import json, sys
f, m, n, k = sys.argv[1], *map(int, sys.argv[2:5])
a = [(i * 7 + 3) % 1000 for i in range(m * k)]
b = [(i * 13 + 5) % 1000 for i in range(k * n)]
json.dump({"gemm_A": a, "gemm_B": b, "gemm_dims": [[m, n, k]]}, open(f, "w"))
PY
	timeout --kill-after=10 $TO gpubpf run -j --direct --program gemm --grid "$grid" --block 16,16 \
		--map-file "$T/$name.in.json" --dump "$T/$name.json" "$OBJ" >"$T/$name.out" 2>"$T/$name.err"
	local rc=$?
	local v
	v=$(python3 - "$T/$name.in.json" "$T/$name.json" <<'PY'
import json, sys
i = json.load(open(sys.argv[1]))
try:
    d = json.load(open(sys.argv[2]))
except Exception as e:
    print("no dump: %s" % e); sys.exit()
m, n, k = i["gemm_dims"][0]
a, b, c = i["gemm_A"], i["gemm_B"], d.get("gemm_C", [])
wrong = []
for r in range(m):
    for col in range(n):
        want = sum(a[r * k + x] * b[x * n + col] for x in range(k)) % (1 << 32)
        if r * n + col >= len(c) or c[r * n + col] != want:
            wrong.append((r, col, want))
rest = [x for x in c[m * n:] if x != 0]
if wrong:
    r, col, want = wrong[0]
    print("%d of %d wrong, first C[%d][%d] = %s, want %d" % (len(wrong), m * n, r, col, c[r * n + col] if r * n + col < len(c) else None, want))
elif rest:
    print("%d values written past C's %d x %d" % (len(rest), m, n))
else:
    print("ok")
PY
)
	if [ $rc -eq 0 ] && [ "$v" = ok ]; then
		ok "gemm ${m}x${n} (K=$k) over grid $grid of 16x16: C equals the python reference; kernel $(kernel_ns "$T/$name.out" gemm) ns"
	else
		bad "gemm ${m}x${n} (K=$k): rc=$rc: $v"; tail -n 5 "$T/$name.out" "$T/$name.err"
	fi
}
gemm gemm64 64 64 64 4,4
gemm gemm48 48 64 32 4,3
GEMM_NS=$(kernel_ns "$T/gemm64.out" gemm)

# 2b. a loop bounded by data, as bpftime's direct-run GEMM has (K from a map;
# pkg/runtime/verify/testdata/loops.bpf.c, data_bounded): thread x of one
# block of 64 is a row, out[row] = sum over k < K of mat[row*K+k] * mat[k*K]
LOOPS=pkg/runtime/verify/testdata/loops.bpf.o
K=40
python3 - "$T/loops.in.json" $K <<'PY'
import json, sys
k = int(sys.argv[2])
json.dump({"dims": [k], "mat": [(i * 37 + 11) % 2001 - 1000 for i in range(64 * k)]}, open(sys.argv[1], "w"))
PY
timeout --kill-after=10 $TO gpubpf run -j --direct --program data_bounded --grid 1 --block 64 \
	--map-file "$T/loops.in.json" --dump "$T/loops.json" "$LOOPS" >"$T/loops.out" 2>"$T/loops.err"
rc=$?
v=$(python3 - "$T/loops.in.json" "$T/loops.json" <<'PY'
import json, sys
i = json.load(open(sys.argv[1]))
try:
    d = json.load(open(sys.argv[2]))
except Exception as e:
    print("no dump: %s" % e); sys.exit()
k, mat, out = i["dims"][0], i["mat"], d.get("out", [])
at = lambda x: mat[x] if x < len(mat) else 0
wrong = [r for r in range(64) if r >= len(out) or out[r] != sum(at(r * k + x) * at(x * k) for x in range(k))]
print("ok" if not wrong else "%d of 64 rows wrong, first out[%d] = %s" % (len(wrong), wrong[0], out[wrong[0]] if wrong[0] < len(out) else None))
PY
)
if [ $rc -eq 0 ] && [ "$v" = ok ]; then
	ok "a loop bounded by a map value (K=$K): 64 rows equal the python reference; kernel $(kernel_ns "$T/loops.out" data_bounded) ns"
else
	bad "data-bounded loop: rc=$rc: $v"; tail -n 5 "$T/loops.out" "$T/loops.err"
fi

# 3. printk from a direct program
timeout --kill-after=10 $TO gpubpf run -j --direct --program hello --threads 1024 "$OBJ" >"$T/hello.out" 2>"$T/hello.err"
rc=$?
want="hello from the GPU: 4 blocks of 256 threads"
n=$(grep '"type":"printk"' "$T/hello.out" | grep -c "$want")
if [ $rc -eq 0 ] && [ "$n" = 1 ]; then
	ok "hello: its bpf_printk line arrived once: $want"
else
	bad "hello: rc=$rc, $n lines saying '$want'"; tail -n 5 "$T/hello.out" "$T/hello.err"
fi

# 4. a GPU the machine does not have
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
timeout --kill-after=10 $TO gpubpf run --direct --program hello --device "$ngpu" "$OBJ" >"$T/nodev.out" 2>"$T/nodev.err"
rc=$?
if [ $rc -eq 1 ] && grep -q "^gpubpf: --device $ngpu: this machine has $ngpu GPU(s)" "$T/nodev.err"; then
	ok "--device $ngpu on a $ngpu-GPU machine: $(head -c 150 "$T/nodev.err")"
else
	bad "--device $ngpu: rc=$rc: $(cat "$T/nodev.err")"
fi

# 5. no host left behind
sleep 0.5
left=$(find /proc -maxdepth 2 -name exe -lname '*libgpubpf-agent*' 2>/dev/null | wc -l)
if [ "$left" -eq 0 ]; then ok "no direct-run host process left running"; else bad "$left direct-run host process(es) still running"; fi

echo "SUMMARY: $pass passed, $fail failed; vec_add 1M kernel ${VEC_NS} ns, gemm 64x64 kernel ${GEMM_NS} ns"
[ $fail -eq 0 ]
