#!/usr/bin/env bash
# GPU check of issue 42: one map per process, whatever module a kernel came
# from. samples/bin/multimod runs four kernels from four CUDA modules (the
# executable's fatbin, a shared library's, PTX text loaded at run time, and
# PTX loaded after a wait, where a -p attach happens; the third module is
# unloaded and loaded again halfway); every tool must count
# every thread of every kernel, exactly, in every run:
#   - gpubpf run counter: calls[0] = calls[1] = 2464 x launches, one record
#     per (pid, device, map, key);
#   - threadhist runs and kernelretsnoop exits per kernel = threads x launches;
#   - launchlate: every launch timed, none untimed or lost;
#   - kernel_trace: every thread of every kernel once;
# RUNS runs of each (static and shared cudart), then each tool attached with
# -p before the last module loads, then a torch extension with PTX in a
# PyTorch process beside PyTorch's own (SASS-only) modules.
# Prints "SUMMARY: ..." last.
set -uo pipefail
set -f # kernel patterns stay patterns
cd "$(dirname "$0")/../.."
export PATH=$PWD/bin:$PATH
. scripts/gpu/lib.sh # map_value, summary_field
AGENT=$PWD/bin/libgpubpf-agent.so
LOGS=${GPUBPF_GPU_LOGS:-${OUT:-/tmp}/gpu-check}/multimod
rm -rf "$LOGS"; mkdir -p "$LOGS"
RUNS=${RUNS:-10} L=${L:-10}
pass=0 fail=0
ok() { echo "ok   $*"; pass=$((pass + 1)); }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }
for b in gpubpf threadhist kernelretsnoop kernel_trace launchlate; do [ -x bin/$b ] || { echo "missing bin/$b (make gpu-bundle)"; exit 1; }; done
[ -x samples/bin/multimod ] || { echo "missing samples/bin/multimod (make -C samples)"; exit 1; }

counts() { python3 scripts/gpu/multimod_util.py "$@"; }
# want L: the per-kernel thread counts of L launches of each kernel (rtScale
# 2L: its module is unloaded and loaded again, then launched L times more)
want() { echo "exeScale=$((1024 * $1)) libScale=$((512 * $1)) rtScale=$((768 * $1)) lateScale=$((160 * $1))"; }
# records FILE MAP KEY: how many records of MAP[KEY] `gpubpf run -j` printed
records() { grep -c "\"key\":\"$3\",\"map\":\"$2\"" "$1"; }

# verify TOOL NAME LAUNCHES: did the run logged as NAME see every thread of
# every kernel? Prints what it found; status 0 when exact.
verify() {
	local tool=$1 n=$2 l=$3 out=$LOGS/$2.out got
	grep -aq "RESULT multimod ok" "$LOGS/$n.app" 2>/dev/null || grep -aq "RESULT multimod ok" "$out" || { echo "app not ok"; return 1; }
	case $tool in
	gpubpf)
		local e x r0 r1
		e=$(map_value "$out" calls 0) x=$(map_value "$out" calls 1) r0=$(records "$out" calls 0) r1=$(records "$out" calls 1)
		echo "entries=$e exits=$x records=$r0,$r1"
		[ "$e" = $((2464 * l)) ] && [ "$x" = $((2464 * l)) ] && [ "$r0" = 1 ] && [ "$r1" = 1 ] ;;
	launchlate)
		got=$(counts launchlate "$out")
		local t u lost
		t=$(summary_field "$out" timed) u=$(summary_field "$out" untimed) lost=$(summary_field "$out" lost)
		echo "$got timed=$t untimed=$u lost=$lost"
		[ "$got" = "exeScale=$l libScale=$l rtScale=$((2 * l)) lateScale=$l" ] && [ "$t" = $((5 * l)) ] && [ "$u" = 0 ] && [ "$lost" = 0 ] ;;
	kernel_trace)
		got=$(counts kernel_trace "$out")
		echo "$got"
		[ "$got" = "$(want $l) lines=$((2464 * l)) dups=0" ] ;;
	*)
		got=$(counts "$tool" "$out")
		echo "$got"
		[ "$got" = "$(want $l)" ] ;;
	esac
}

# toolcmd TOOL FLAG...: the tool's command line, JSON out, kernels KPAT
KPAT='*'
toolcmd() {
	local t=$1; shift
	case $t in
	gpubpf) echo "gpubpf run -j $* -k $KPAT bpf/examples/counter_bpfel.o" ;;
	kernel_trace) echo "kernel_trace -j --max-events -1 --launches 100000 -k $KPAT $*" ;;
	*) echo "$t -j -k $KPAT $*" ;;
	esac
}

# ---- RUNS runs of each tool with -- CMD, both cudarts -----------------------
for v in multimod multimod_shared; do
	for tool in gpubpf threadhist kernelretsnoop launchlate kernel_trace; do
		good=0 first=""
		for r in $(seq "$RUNS"); do
			n=$tool-$v-$r
			# shellcheck disable=SC2046
			timeout --kill-after=5 120 $(toolcmd $tool) -- samples/bin/$v $L >"$LOGS/$n.out" 2>"$LOGS/$n.err"
			echo $? >"$LOGS/$n.rc"
			if got=$(verify $tool $n $L); then
				good=$((good + 1)); rm -f "$LOGS/$n.out" # keep the logs of failed runs only
			else
				[ -n "$first" ] || first="run $r: $got (rc $(cat "$LOGS/$n.rc")); $(tail -n 2 "$LOGS/$n.err" | tr '\n' ' ')"
			fi
		done
		if [ $good = "$RUNS" ]; then ok "$tool $v: $good/$RUNS runs exact ($got)"; else bad "$tool $v: $good/$RUNS runs exact; first miss: $first"; fi
	done
done

# ---- -p: attached after three modules loaded, before the fourth -------------
for v in multimod multimod_shared; do
	for tool in gpubpf threadhist kernelretsnoop launchlate kernel_trace; do
		n=p-$tool-$v
		rm -f "$LOGS/$n.go"
		LD_PRELOAD=$AGENT samples/bin/$v $L "$LOGS/$n.go" >"$LOGS/$n.app" 2>&1 &
		app=$!
		for _ in $(seq 300); do grep -q WAITING "$LOGS/$n.app" && break; sleep 0.05; done
		# shellcheck disable=SC2046
		timeout --kill-after=5 60 $(toolcmd $tool -v -p $app) >"$LOGS/$n.out" 2>"$LOGS/$n.err" &
		tp=$!
		# go on once the tool has attached: rtScale's module, loaded and
		# enumerated, is instrumented at the attach (the fatbins' kernels,
		# which cudart looks up at their first launch, then)
		for _ in $(seq 400); do
			grep -q 'rtScale instrumented' "$LOGS/$n.err" && break
			sleep 0.05
		done
		touch "$LOGS/$n.go"
		wait $app; wait $tp
		if got=$(verify $tool $n $L); then ok "$tool -p $v: every thread of the four modules ($got)"; else bad "$tool -p $v: $got"; tail -n 3 "$LOGS/$n.err"; fi
	done
done

# ---- -p on a process started without the agent (injected) --------------------
# What an agent injected into a running program can see is less than a
# preloaded one: the first rtScale module was loaded from memory before it
# came (nothing holds its code); libmultimod.so's own static cudart, and the
# driver calls multimod binds lazily, start after the attach and pass the
# agent by until its rescan finds them. threadhist must count whole launches
# of each kernel, never more than ran, and say what it did not trace
# whenever a kernel comes out short.
for v in multimod multimod_shared; do
	n=inject-threadhist-$v
	rm -f "$LOGS/$n.go"
	samples/bin/$v $L "$LOGS/$n.go" >"$LOGS/$n.app" 2>&1 &
	app=$!
	for _ in $(seq 300); do grep -q WAITING "$LOGS/$n.app" && break; sleep 0.05; done
	# shellcheck disable=SC2046
	timeout --kill-after=5 60 $(toolcmd threadhist -v -p $app) >"$LOGS/$n.out" 2>"$LOGS/$n.err" &
	tp=$!
	for _ in $(seq 400); do grep -q "agent .*driver" "$LOGS/$n.err" && break; sleep 0.05; done
	touch "$LOGS/$n.go"
	wait $app; wait $tp
	got=$(counts threadhist "$LOGS/$n.out")
	verdict=$(python3 - "$L" "$got" "$LOGS/$n.err" <<'PY'
import sys
l, got, err = int(sys.argv[1]), sys.argv[2], open(sys.argv[3], errors="replace").read()
per = {"exeScale": (1024, l), "libScale": (512, l), "rtScale": (384, 2 * l), "lateScale": (160, l)}
c = dict(kv.split("=") for kv in got.split() if kv.split("=")[0] in per)
why, short = [], []
for k, (t, full) in per.items():
    n = int(c.get(k, 0))
    if n % t or n > t * full: why.append(f"{k}={n} is not a whole number of its launches")
    elif n < t * full: short.append(f"{k} {n // t}/{full}")
said = "not traced" in err or "after the attach" in err or "loaded before the agent" in err
if short and not said: why.append("short with nothing said: " + ", ".join(short))
print("ok" if not why else "bad", "launches seen: " + (", ".join(short) if short else "all") + ("; the tool said what it left out" if short and said else ""), "; ".join(why))
PY
)
	if grep -aq "RESULT multimod ok" "$LOGS/$n.app" && [ "${verdict%% *}" = ok ]; then ok "threadhist -p $v, agent injected: ${verdict#ok }"; else bad "threadhist -p $v, agent injected: ${verdict#* } ($got) $(tail -n 2 "$LOGS/$n.err" | tr '\n' ' ')"; fi
done

# ---- a torch extension with PTX beside PyTorch's own modules ----------------
if [ "${TORCH:-1}" = 1 ] && python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
	T=$LOGS/torch; mkdir -p "$T/ext"
	cat >"$T/ext.py" <<'PY'
# Two kernels of a C++ extension (with PTX) among PyTorch's own, SASS-only ones:
# gpubpf_ext_add <<<4,256>>> and gpubpf_ext_mul <<<2,128>>>, N launches each.
import sys, torch
from torch.utils.cpp_extension import load_inline
cuda = r"""
__global__ void gpubpf_ext_add(float *x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] += 1.0f; }
__global__ void gpubpf_ext_mul(float *x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 1.0f; }
void ext_add(torch::Tensor x) { gpubpf_ext_add<<<4, 256>>>(x.data_ptr<float>(), x.numel()); }
void ext_mul(torch::Tensor x) { gpubpf_ext_mul<<<2, 128>>>(x.data_ptr<float>(), x.numel()); }
"""
cc = torch.cuda.get_device_capability()
m = load_inline("gpubpf_mm_ext", cpp_sources="void ext_add(torch::Tensor x); void ext_mul(torch::Tensor x);",
                cuda_sources=cuda, functions=["ext_add", "ext_mul"],
                extra_cuda_cflags=["-gencode=arch=compute_%d%d,code=compute_%d%d" % (cc * 2)],
                build_directory=sys.argv[1], verbose=False)
n = int(sys.argv[2])
x = torch.zeros(1024, device="cuda")
w = torch.randn(256, 256, device="cuda")
for _ in range(n):
    m.ext_add(x); m.ext_mul(x)
    y = torch.relu(w @ w).sum()  # PyTorch's own kernels between
torch.cuda.synchronize()
print("RESULT ext", n, bool((x == n).all().item()), bool(torch.isfinite(y).item()), flush=True)
PY
	TN=20
	timeout 600 python3 "$T/ext.py" "$T/ext" $TN >"$T/build.log" 2>&1 # builds the extension once
	if ! grep -q "RESULT ext $TN True True" "$T/build.log"; then
		bad "torch extension: build or untraced run failed: $(tail -n 3 "$T/build.log" | tr '\n' ' ')"
	else
		KPAT='gpubpf_ext_*'
		for tool in gpubpf threadhist kernelretsnoop launchlate; do
			n=torch-$tool
			# shellcheck disable=SC2046
			timeout --kill-after=5 180 $(toolcmd $tool) -- python3 "$T/ext.py" "$T/ext" $TN >"$LOGS/$n.out" 2>"$LOGS/$n.err"
			rc=$?
			grep -q "RESULT ext $TN True True" "$LOGS/$n.out" || { bad "torch $tool: the script's result changed (rc $rc)"; continue; }
			case $tool in
			gpubpf) e=$(map_value "$LOGS/$n.out" calls 0) r=$(records "$LOGS/$n.out" calls 0)
				got="entries=$e records=$r"; exp="entries=$((TN * 1280)) records=1" ;;
			launchlate) got=$(python3 - "$LOGS/$n.out" <<'PY'
import json, sys
k = {}
for line in open(sys.argv[1], errors="replace"):
    try: o = json.loads(line)
    except ValueError: continue
    if isinstance(o, dict) and o.get("type") == "kernel": k[o["kernel"]] = o["launches"]
print(" ".join(f"{n}={k.get(n, 0)}" for n in ("gpubpf_ext_add", "gpubpf_ext_mul")))
PY
)
				exp="gpubpf_ext_add=$TN gpubpf_ext_mul=$TN" ;;
			*) f=runs; [ $tool = kernelretsnoop ] && f=exits
				got=$(python3 - "$LOGS/$n.out" $f <<'PY'
import json, sys
k = {}
for line in open(sys.argv[1], errors="replace"):
    try: o = json.loads(line)
    except ValueError: continue
    if isinstance(o, dict) and o.get("type") == "kernel": k[o["kernel"]] = o[sys.argv[2]]
print(" ".join(f"{n}={k.get(n, 0)}" for n in ("gpubpf_ext_add", "gpubpf_ext_mul")))
PY
)
				exp="gpubpf_ext_add=$((TN * 1024)) gpubpf_ext_mul=$((TN * 256))" ;;
			esac
			if [ "$got" = "$exp" ]; then ok "torch $tool: extension kernels exact beside PyTorch's ($got)"; else bad "torch $tool: $got, want $exp"; tail -n 3 "$LOGS/$n.err"; fi
		done
	fi
else
	echo "no torch with CUDA: the PyTorch part was not run"
fi

echo "SUMMARY: multimod $pass ok, $fail failed (RUNS=$RUNS, $L launches of each of 4 kernels in 4 modules)"
[ $fail -eq 0 ]
