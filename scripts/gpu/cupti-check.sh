#!/usr/bin/env bash
# launchlate on kernels without PTX (issue 43), on the GPU machine: CUPTI's
# kernel records time them, joined with each launch call's CPU time.
#   - the agent's copy of CUPTI's ABI agrees with this toolkit's headers;
#   - sass_only (no PTX): every launch timed through CUPTI, with run times;
#     with GPUBPF_CUPTI=off none is, and one line says why;
#   - --timing both on launch_story (PTX): per launch, CUPTI's start and the
#     probe's agree within the probe's clock bound for >= 99% of launches;
#   - PyTorch (torch_train.py: PyTorch's and cuBLAS's kernels, no PTX): per
#     kernel, launchlate's timed + untimed equals the launches an injected
#     CUPTI tracer counts in a run of the same steps; -p on a loop started
#     without the agent: the loop runs on and its kernels are timed, none
#     untimed; torch.compile's Triton kernels are timed, started under the
#     tool and with -p, and threadhist sees inside them (PTX from Triton's
#     cache);
#   - cost: launch_heavy_sass's launch rate and torch_train's step time under
#     launchlate, as ratios to untraced runs in the same invocation (median of
#     COST_RUNS, default 5, alternating).
# Needs bin/launchlate (make gpu-bundle), samples/bin (make -C samples).
# Exit status: 0 all passed, 1 a check failed.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
export PATH=$PWD/bin:$PATH
LOGS=${GPUBPF_GPU_LOGS:-${OUT:-/tmp}/gpu-check}/cupti
rm -rf "$LOGS"
mkdir -p "$LOGS"
COST_RUNS=${COST_RUNS:-5}
TORCH_SECS=${TORCH_SECS:-10}
pass=0 fail=0
ok() { echo "ok   $*"; pass=$((pass + 1)); }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }
run() {
	local name=$1
	shift
	timeout --kill-after=5 240 "$@" >"$LOGS/$name.out" 2>"$LOGS/$name.err"
	echo $? >"$LOGS/$name.rc"
}
rc() { cat "$LOGS/$1.rc"; }
result_ok() { grep -aq "RESULT $2[a-z_]* ok" "$LOGS/$1.out"; }
field() { python3 - "$LOGS/$1.out" "$2" <<'PY'
import json, sys
v = "missing"
for line in open(sys.argv[1], errors="replace"):
    if line.startswith('{"type":"summary"'):
        v = json.loads(line).get(sys.argv[2], "missing")
print(v if not isinstance(v, dict) else json.dumps(v))
PY
}
echo "cupti-check: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"

# 1. The ABI the agent declares itself (it is built without CUDA headers).
inc=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")/include
[ -f "$inc/cupti_activity.h" ] || inc=/usr/local/cuda/include
if gcc -fsyntax-only -I"$inc" -Ipkg/runtime/agent pkg/runtime/agent/testdata/cuptiabi.c >"$LOGS/abi.txt" 2>&1; then
	ok "the agent's CUPTI declarations agree with $inc ($(grep -ho 'define CUPTI_API_VERSION [0-9]*' "$inc/cupti_version.h"))"
else
	bad "the agent's CUPTI declarations differ from $inc: $(grep error "$LOGS/abi.txt" | head -2 | tr '\n' ' ')"
fi

# 2. sass_only: no PTX, 50 launches.
run sass launchlate -j -- samples/bin/sass_only 4096 50
t=$(field sass cupti_timed) u=$(field sass cupti_untimed)
row=$(grep -a '"mangled":"_Z9sassScalePiii"' "$LOGS/sass.out" | tail -1)
if result_ok sass sass_only && [ "$t" = 50 ] && [[ "$row" == *'"launches":50,'* ]] && [[ "$row" == *'"dur_launches":50,'* ]]; then
	ok "sass_only (no PTX): 50 of 50 launches timed through CUPTI, run times for 50; $(grep -ao '"p50_ns":[0-9]*' <<<"$row"), $(grep -ao '"dur_p50_ns":[0-9]*' <<<"$row")"
else
	bad "sass_only: cupti_timed '$t' untimed '$u' (want 50), row '${row:0:300}', rc $(rc sass): $(tail -3 "$LOGS/sass.err" | tr '\n' ' ')"
fi
run sass-text launchlate -- samples/bin/sass_only 4096 50
sed -n '/kernels by p99/,$p' "$LOGS/sass-text.out"
grep -a 'launchlate:' "$LOGS/sass-text.err" | tail -2

run sass-off env GPUBPF_CUPTI=off launchlate -j -- samples/bin/sass_only 4096 50
t=$(field sass-off cupti_timed) why=$(field sass-off cupti_off)
n=$(grep -ac 'not timed' "$LOGS/sass-off.err")
if result_ok sass-off sass_only && [ "$t" = 0 ] && [[ "$why" == *GPUBPF_CUPTI=off* ]] && [ "$n" -ge 1 ]; then
	ok "GPUBPF_CUPTI=off: 0 timed through CUPTI; said: $(grep -a 'not timed' "$LOGS/sass-off.err" | head -1 | cut -c1-200)"
else
	bad "GPUBPF_CUPTI=off: cupti_timed '$t', reason '$why', $n lines; $(tail -2 "$LOGS/sass-off.err" | tr '\n' ' ')"
fi

# 3. Both paths side by side on kernels with PTX.
run both launchlate --timing both --events -j -- samples/bin/launch_story 200 500
xc=$(python3 - "$LOGS/both.out" <<'PY'
import json, statistics, sys
probe, cupti = {}, {}
for line in open(sys.argv[1], errors="replace"):
    if not line.startswith('{"type":"launch"'):
        continue
    o = json.loads(line)
    k = (o["pid"], o["device"], o["grid"], o["mangled"])
    (cupti if o.get("source") == "cupti" else probe)[k] = o
both = [k for k in probe if k in cupti]
if not both:
    print(f"bad no launch timed both ways (probe {len(probe)}, cupti {len(cupti)})"); sys.exit()
d = [cupti[k]["gpu_ns"] - probe[k]["gpu_ns"] for k in both]
within = sum(1 for k, x in zip(both, d) if abs(x) <= probe[k]["bound_ns"])
med = statistics.median(d)
within_med = sum(1 for k, x in zip(both, d) if abs(x - med) <= probe[k]["bound_ns"])
bounds = sorted(probe[k]["bound_ns"] for k in both)
ad = sorted(abs(x) for x in d)
share = within / len(both)
verdict = "ok" if share >= 0.99 and len(both) >= 0.99 * len(probe) else "bad"
print(f"{verdict} {len(both)} of {len(probe)} probe-timed launches also timed by CUPTI; CUPTI start - probe start: median {med:.0f} ns, "
      f"|d| p99 {ad[int(0.99*(len(ad)-1))]} ns; within the probe's bound (p50 {bounds[len(bounds)//2]} ns): {100*share:.1f}%, "
      f"{100*within_med/len(both):.1f}% around the median")
PY
)
if result_ok both launch_story && [[ "$xc" == ok* ]]; then ok "--timing both: ${xc#ok }"; else bad "--timing both: ${xc:-no result} (rc $(rc both)) $(tail -2 "$LOGS/both.err" | tr '\n' ' ')"; fi

# 4. Cost on the no-PTX path: launch_heavy_sass, alternating; the parts:
#    CUPTI alone (the activity tracer injected), the agent alone (--timing
#    probe), launchlate stamping from CUPTI's API records of the launch calls
#    (GPUBPF_CUPTI_JOIN=api) and from the agent's wrappers through external
#    correlation (GPUBPF_CUPTI_JOIN=external); the default stamps from
#    CUPTI's launch callback.
LH=(samples/bin/launch_heavy_sass 100000 4 2000 64)
CUPTI_LIB=""
scripts/gpu/cupti/build.sh >"$LOGS/tracer-build.txt" 2>&1 && CUPTI_LIB=$PWD/scripts/gpu/cupti/libcupti_trace.so
declare -A rates
for i in $(seq "$COST_RUNS"); do
	run lh0-$i "${LH[@]}"
	run lh1-$i launchlate -j -- "${LH[@]}"
	run lhp-$i launchlate --timing probe -- "${LH[@]}"
	run lhd-$i env GPUBPF_CUPTI_JOIN=api launchlate -j -- "${LH[@]}"
	run lhe-$i env GPUBPF_CUPTI_JOIN=external launchlate -j -- "${LH[@]}"
	[ -n "$CUPTI_LIB" ] && run lhc-$i env CUDA_INJECTION64_PATH="$CUPTI_LIB" CUPTI_TRACE_OUT=/dev/null "${LH[@]}"
	for v in 0 1 p d e c; do
		[ -f "$LOGS/lh$v-$i.out" ] && rates[$v]+=" $(grep -ao '[0-9.]* launches/s' "$LOGS/lh$v-$i.out" | awk '{print $1}')"
	done
done
ratio() { python3 -c "
import statistics, sys
a=[float(x) for x in sys.argv[1].split()]; b=[float(x) for x in sys.argv[2].split()]
print(f'{statistics.median(b)/statistics.median(a):.3f}')" "$1" "$2" 2>/dev/null || echo nan; }
lh="$(ratio "${rates[0]}" "${rates[1]}") (untraced $(python3 -c "import statistics,sys; print(f'{statistics.median(float(x) for x in sys.argv[1:]):.0f}')" ${rates[0]})/s, median of $COST_RUNS)"
echo "  launch_heavy_sass launch rate, ratio to untraced: launchlate $(ratio "${rates[0]}" "${rates[1]}"); its parts: the agent alone (--timing probe) $(ratio "${rates[0]}" "${rates[p]}"), CUPTI's activity records alone (injected tracer) $(ratio "${rates[0]}" "${rates[c]:-}"), launchlate stamping from CUPTI's API records (GPUBPF_CUPTI_JOIN=api) $(ratio "${rates[0]}" "${rates[d]}"), from the agent's wrappers (GPUBPF_CUPTI_JOIN=external) $(ratio "${rates[0]}" "${rates[e]}")"
t1=$(field lh1-1 cupti_timed) u1=$(field lh1-1 cupti_untimed) td=$(field lhd-1 cupti_timed) ud=$(field lhd-1 cupti_untimed)
te=$(field lhe-1 cupti_timed) ue=$(field lhe-1 cupti_untimed)
echo "  stamps: CUPTI's callback (default) $t1 timed / $u1 untimed; CUPTI's API records $td timed / $ud untimed; external correlation $te timed / $ue untimed"
for v in 1 d e; do grep -ao 'CUPTI, on in [^"]*' "$LOGS/lh$v-1.out" | tail -1 | sed "s/^/  lh$v: /"; done
if result_ok lh1-1 launch_heavy && [ "${t1:-0}" = 100001 ]; then
	ok "launch_heavy_sass under launchlate: all $t1 starts timed through CUPTI; launch rate ratio $lh (goal >= 0.9)"
else
	bad "launch_heavy_sass: cupti_timed '$t1' untimed '$u1' (want 100001); rate $lh; $(tail -2 "$LOGS/lh1-1.err" | tr '\n' ' ')"
fi

if ! python3 -c 'import torch' 2>/dev/null; then
	echo "skip: no PyTorch here: the PyTorch checks"
	echo "SUMMARY: cupti $pass ok, $fail failed | no PyTorch"
	[ $fail = 0 ]
	exit
fi

# 5. PyTorch, every launch accounted for per kernel: launchlate against an
#    injected CUPTI tracer counting the same 100 steps.
run torch launchlate -j -- python3 scripts/gpu/torch_train.py --steps 100
run torch-ref env CUDA_INJECTION64_PATH="$PWD/scripts/gpu/cupti/libcupti_trace.so" CUPTI_TRACE_OUT="$LOGS/torch-ref.cupti" python3 scripts/gpu/torch_train.py --steps 100
cmp=$(python3 - "$LOGS/torch.out" "$LOGS/torch-ref.cupti" <<'PY'
import collections, json, sys
ll = {}
for line in open(sys.argv[1], errors="replace"):
    if line.startswith('{"type":"kernel"'):
        o = json.loads(line)
        ll[o["mangled"]] = ll.get(o["mangled"], 0) + o["launches"] + o["untimed"]
ref = collections.Counter()
for line in open(sys.argv[2], errors="replace"):
    if line.startswith("grid="):
        ref[line.rstrip("\n").split(" name=", 1)[1]] += 1
for k in list(ref):
    if k.startswith("gpubpf_"):
        del ref[k]
diff = {k: (ll.get(k, 0), ref.get(k, 0)) for k in set(ll) | set(ref) if ll.get(k, 0) != ref.get(k, 0)}
timed = sum(ll.values())
verdict = "ok" if not diff and ref else "bad"
print(f"{verdict} {len(ref)} kernels, {sum(ref.values())} launches by the reference tracer; launchlate {timed}; differing kernels {len(diff)}: {list(diff.items())[:3]}")
PY
)
if result_ok torch torch_train && [[ "$cmp" == ok* ]]; then ok "PyTorch, per kernel timed + untimed = launches: ${cmp#ok }"; else bad "PyTorch per kernel: ${cmp:-no result}; rc $(rc torch)/$(rc torch-ref) $(tail -2 "$LOGS/torch.err" | tr '\n' ' ')"; fi
echo "  $(field torch cupti_timed) timed through CUPTI, $(field torch cupti_untimed) untimed, $(field torch cupti_dropped) dropped"
run torch-text launchlate -- python3 scripts/gpu/torch_train.py --steps 100
sed -n '/kernels by p99/,$p' "$LOGS/torch-text.out" | head -30
grep -a 'launchlate:' "$LOGS/torch-text.err" | tail -3

# 6. -p on a loop started without the agent: every kernel it runs timed
#    through CUPTI turned on mid-run (the H100's and the first H200's 0
#    timed came from CUPTI asked for only after PyTorch's libraries had been
#    read: scripts/gpu/cupti-midrun.sh). Wants at least 15 kernels timed
#    (the loop runs 21-22), none untimed, and the loop unharmed.
gate=$LOGS/torch-p.gate
rm -f "$gate"
GPUBPF_AGENT_DEBUG=1 timeout 120 python3 scripts/gpu/torch_train.py --seconds 12 --gate "$gate" >"$LOGS/torch-p-app.out" 2>&1 &
waiter=$!
for _ in $(seq 600); do grep -q GATED "$LOGS/torch-p-app.out" 2>/dev/null && break; sleep 0.1; done
app=$(grep -ao 'GATED pid=[0-9]*' "$LOGS/torch-p-app.out" | cut -d= -f2)
(sleep 3; touch "$gate") &
run torch-p launchlate -d 8 -p "${app:-0}"
wait $waiter
apprc=$?
tp=$(grep -ao '[0-9]* kernel starts timed through CUPTI' "$LOGS/torch-p.err" | awk '{print $1}')
tu=$(grep -ao '[0-9]* CUPTI kernel records without a launch stamp' "$LOGS/torch-p.err" | awk '{print $1}')
nk=$(sed -n '/kernels by p99/,$p' "$LOGS/torch-p.out" | grep -c ' us \| ns \| ms ')
grep -ao 'CUPTI, on in [^,]*, asked [^;]*' "$LOGS/torch-p.err" | head -1 | sed 's/^/  -p on PyTorch: /'
sed -n '/kernels by p99/,$p' "$LOGS/torch-p.out" | head -30
if [ $apprc = 0 ] && grep -aq "RESULT torch_train ok" "$LOGS/torch-p-app.out" && [ "${tp:-0}" -gt 0 ] && [ "${tu:-0}" = 0 ] && [ "$nk" -ge 15 ]; then
	ok "-p on PyTorch started without the agent: ${tp} starts of ${nk} kernels timed through CUPTI, none untimed, the loop ran on ($(grep -ao 'median step [0-9.]* ms' "$LOGS/torch-p-app.out"))"
else
	bad "-p on PyTorch: ${tp:-0} timed, ${tu:-0} untimed, ${nk} kernels in the table, app rc $apprc: $(tail -1 "$LOGS/torch-p-app.out"); $(grep -v skipping "$LOGS/torch-p.err" | tail -3 | tr '\n' ' ' | cut -c1-400)"
fi

# 7. torch.compile: Triton's cubins.
run triton launchlate -j -- python3 scripts/gpu/torch_train.py --steps 50 --compile
tri=$(grep -a '"type":"kernel"' "$LOGS/triton.out" | grep -a '"kernel":"triton_' | grep -ac '"cupti":[1-9]')
if result_ok triton torch_train && [ "$tri" -gt 0 ]; then
	ok "torch.compile: $tri Triton kernels timed through CUPTI ($(grep -a '"type":"kernel"' "$LOGS/triton.out" | grep -ao '"kernel":"triton_[^"]*"' | head -2 | tr '\n' ' '))"
else
	bad "torch.compile: $tri Triton kernel rows timed; rc $(rc triton) $(tail -2 "$LOGS/triton.err" | tr '\n' ' ')"
fi

# 7b. Triton's kernels instrumented from the PTX in Triton's cache (the
#     cubin loaded is byte for byte the cached one): threadhist sees inside
#     them, and the training still converges.
run triton-th threadhist -j -k 'triton_*' -- python3 scripts/gpu/torch_train.py --steps 20 --compile
thr=$(python3 - "$LOGS/triton-th.out" <<'PY'
import json, sys
rows = {}
for line in open(sys.argv[1], errors="replace"):
    if line.startswith('{"type":"kernel"'):
        o = json.loads(line)
        rows[o.get("mangled") or o.get("kernel")] = o.get("runs", 0)
print(" ".join(f"{k}={v}" for k, v in sorted(rows.items()) if v > 0))
PY
)
if result_ok triton-th torch_train && [ -n "$thr" ]; then
	ok "torch.compile: threadhist inside Triton's kernels (PTX from Triton's cache): ${thr:0:300}"
else
	bad "torch.compile, threadhist -k 'triton_*': no kernel with runs ('$thr'); rc $(rc triton-th); $(grep -a 'skipped\|threadhist:' "$LOGS/triton-th.err" | tail -3 | tr '\n' ' ' | cut -c1-400)"
fi

# 7c. -p on a torch.compile'd loop started without the agent: Triton's
#     kernels (loaded before the agent) timed through CUPTI with the rest.
gate=$LOGS/triton-p.gate
rm -f "$gate"
timeout 180 python3 scripts/gpu/torch_train.py --seconds 12 --compile --gate "$gate" >"$LOGS/triton-p-app.out" 2>&1 &
waiter=$!
for _ in $(seq 1200); do grep -q GATED "$LOGS/triton-p-app.out" 2>/dev/null && break; sleep 0.1; done
app=$(grep -ao 'GATED pid=[0-9]*' "$LOGS/triton-p-app.out" | cut -d= -f2)
(sleep 3; touch "$gate") &
run triton-p launchlate -j -d 8 -p "${app:-0}"
wait $waiter
apprc=$?
trp=$(grep -a '"type":"kernel"' "$LOGS/triton-p.out" | grep -a '"kernel":"triton_' | grep -ac '"cupti":[1-9]')
all=$(grep -a '"type":"kernel"' "$LOGS/triton-p.out" | grep -ac '"cupti":[1-9]')
if [ $apprc = 0 ] && grep -aq "RESULT torch_train ok" "$LOGS/triton-p-app.out" && [ "${trp:-0}" -gt 0 ]; then
	ok "-p on a torch.compile'd loop: $trp Triton kernels among $all timed through CUPTI, the loop ran on"
else
	bad "-p on a torch.compile'd loop: ${trp:-0} Triton kernels of ${all:-0} timed; app rc $apprc: $(tail -1 "$LOGS/triton-p-app.out"); $(grep -av skipping "$LOGS/triton-p.err" | tail -2 | tr '\n' ' ' | cut -c1-300)"
fi

# 8. Cost: a training step under launchlate, alternating; its parts: the
#    agent and the tool without CUPTI (--timing probe), CUPTI's kernel
#    records alone (the tracer injected), so a miss says where the step's
#    time goes.
s0=() s1=() sp=() sc=()
step_of() { grep -ao 'step_ms_median=[0-9.]*' "$LOGS/$1.out" | cut -d= -f2; }
for i in $(seq "$COST_RUNS"); do
	run tc0-$i python3 scripts/gpu/torch_train.py --seconds "$TORCH_SECS"
	run tc1-$i launchlate -- python3 scripts/gpu/torch_train.py --seconds "$TORCH_SECS"
	run tcp-$i launchlate --timing probe -- python3 scripts/gpu/torch_train.py --seconds "$TORCH_SECS"
	[ -n "$CUPTI_LIB" ] && run tcc-$i env CUDA_INJECTION64_PATH="$CUPTI_LIB" CUPTI_TRACE_OUT=/dev/null python3 scripts/gpu/torch_train.py --seconds "$TORCH_SECS"
	s0+=("$(step_of tc0-$i)") s1+=("$(step_of tc1-$i)") sp+=("$(step_of tcp-$i)")
	[ -n "$CUPTI_LIB" ] && sc+=("$(step_of tcc-$i)")
done
echo "  PyTorch step, ratio to untraced: launchlate $(ratio "${s0[*]}" "${s1[*]}"); its parts: the agent and the tool without CUPTI (--timing probe) $(ratio "${s0[*]}" "${sp[*]}"), CUPTI's kernel records alone (injected tracer) $(ratio "${s0[*]}" "${sc[*]:-}")"
tc=$(python3 -c "
import statistics, sys
a=[float(x) for x in sys.argv[1].split()]; b=[float(x) for x in sys.argv[2].split()]
m0, m1 = statistics.median(a), statistics.median(b)
print(f'{m1/m0:.3f} untraced {m0:.3f} ms, launchlate {m1:.3f} ms (median of {len(a)} loops of ${TORCH_SECS} s; runs {a} / {b})')" "${s0[*]}" "${s1[*]}" 2>/dev/null)
if result_ok tc1-1 torch_train && [ -n "$tc" ]; then ok "PyTorch step time under launchlate: ratio $tc (goal <= 1.05)"; else bad "PyTorch cost: '$tc'; $(tail -2 "$LOGS/tc1-1.err" | tr '\n' ' ')"; fi
echo "SUMMARY: cupti $pass ok, $fail failed | launch_heavy_sass rate x${lh%% *}; torch step x${tc%% *}"
[ $fail = 0 ]
