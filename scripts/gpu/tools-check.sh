#!/usr/bin/env bash
# GPU checks of the per-thread tools (issue 11): threadhist, kernelretsnoop
# and kernel_trace as a user runs them, on the samples, with numbers
# asserted, not eyeballed:
#   - threadhist: runs sum to threads x launches on vec_add (static and
#     shared cudart, --by thread.x, global, block and warp), imbalance, multi_kernel,
#     graph_launch; the app's RESULT stays ok;
#   - kernelretsnoop: lane 31 marked late on lane_slow and in its exit spread,
#     no lane on vec_add;
#   - kernel_trace: every thread of a small launch seen exactly once, and
#     the stub-hook variant;
#   - each tool attached with -p to a running vec_add, detached, app ok;
#   - overhead at medium/large/xlarge: CUDA-event kernel time ratio to the
#     untraced run in the same invocation (median of REPS).
# Prints "SUMMARY: ..." last.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PATH=$PWD/bin:$PATH
AGENT=$PWD/bin/libgpubpf-agent.so
LOGS=${GPUBPF_GPU_LOGS:-${OUT:-/tmp}/gpu-check}/tools
rm -rf "$LOGS"; mkdir -p "$LOGS"
REPS=${REPS:-3}
pass=0 fail=0
ok() { echo "ok   $*"; pass=$((pass + 1)); }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }
for b in threadhist kernelretsnoop kernel_trace; do [ -x bin/$b ] || { echo "missing bin/$b (make gpu-bundle)"; exit 1; }; done

# run NAME TOOL ARGS... -- CMD: run a tool with a time bound, keep its output.
run() {
	local name=$1; shift
	timeout --kill-after=5 120 "$@" >"$LOGS/$name.out" 2>"$LOGS/$name.err"
	echo $? >"$LOGS/$name.rc"
}
result_ok() { grep -aq "RESULT $2[a-z_]* ok" "$LOGS/$1.out"; }
. scripts/gpu/lib.sh # jsum, kus, med

# ---- threadhist ------------------------------------------------------------
ITER=20 THR=256 BLK=16
WANT=$(((ITER + 1) * THR * BLK)) # vec_add launches once to warm up
for v in vec_add vec_add_shared; do
	for by in thread.x global block warp; do
		n=th-$v-$by
		run $n threadhist -j --by $by -- samples/bin/$v 4096 $ITER $THR $BLK
		got=$(jsum "$LOGS/$n.out" kernel runs)
		if result_ok $n vec_add && [ "$got" = "$WANT" ]; then ok "threadhist --by $by $v: $got runs = $WANT threads x launches"; else bad "threadhist --by $by $v: runs $got want $WANT (rc $(cat $LOGS/$n.rc))"; tail -3 "$LOGS/$n.err"; fi
	done
done
run th-text threadhist -- samples/bin/vec_add 4096 $ITER $THR $BLK
grep -q 'imbalance:' "$LOGS/th-text.out" && grep -q 'thread runs counted' "$LOGS/th-text.err" && ok "threadhist text view" || bad "threadhist text view"
# imbalance: 10000 elements over 512 threads: 272 threads get 20, 240 get 19.
run th-imb threadhist --by global -- samples/bin/imbalance 10000 128 4 3
got=$(grep -ao 'runs per global: min [0-9]*, max [0-9]*, [0-9]* in all' "$LOGS/th-imb.out" | head -1 | awk '{print $(NF-2)}')
if result_ok th-imb imbalance && [ "$got" = $((512 * 3)) ] && grep -q 'imbalance: busy per global' "$LOGS/th-imb.out"; then ok "threadhist imbalance: $got runs, imbalance line"; else bad "threadhist imbalance: runs $got"; fi
run th-multi threadhist -j -- samples/bin/multi_kernel
k=$(grep -c '"type":"kernel"' "$LOGS/th-multi.out")
result_ok th-multi multi_kernel && [ "$k" -ge 5 ] && ok "threadhist multi_kernel: $k kernels" || bad "threadhist multi_kernel: $k kernels"
run th-graph threadhist -j -- samples/bin/graph_launch
k=$(grep -c '"type":"kernel"' "$LOGS/th-graph.out")
result_ok th-graph graph_launch && [ "$k" -ge 1 ] && ok "threadhist graph_launch: $k kernels" || bad "threadhist graph_launch: $k kernels"

# ---- kernelretsnoop --------------------------------------------------------
run kr-slow kernelretsnoop -j -k laneSlow -- samples/bin/lane_slow 64 2 750 3
late=$(python3 - "$LOGS/kr-slow.out" <<'PY'
import json, sys
for line in open(sys.argv[1], errors="replace"):
    try: o = json.loads(line)
    except ValueError: continue
    if o.get("type") == "kernel": print(",".join(str(l["lane"]) for l in o["lanes"] if l["late"]))
PY
)
result_ok kr-slow lane_slow && [ "$late" = 31 ] && ok "kernelretsnoop lane_slow: late lanes [$late]" || bad "kernelretsnoop lane_slow: late lanes [$late]"
# The launch spread must hold lane 31's wait too (1 exit in 32 is late: its
# p99): a probe that lets the late lane take the launch's first exit shows 0.
p99=$(grep -ao '"spread_p99_ns":[0-9]*' "$LOGS/kr-slow.out" | tail -1 | cut -d: -f2)
[ "${p99:-0}" -ge 600 ] && ok "kernelretsnoop lane_slow: exit spread p99 ${p99} ns" || bad "kernelretsnoop lane_slow: exit spread p99 '${p99}' ns, want >= 600 (lane 31 spins 750 ns)"
run kr-slow-text kernelretsnoop -k laneSlow -- samples/bin/lane_slow 64 2 750 3
for v in vec_add vec_add_shared; do
	run kr-$v kernelretsnoop -j -- samples/bin/$v 4096 $ITER $THR $BLK
	late=$(grep -ao '"late":true' "$LOGS/kr-$v.out" | wc -l)
	exits=$(jsum "$LOGS/kr-$v.out" kernel exits)
	result_ok kr-$v vec_add && [ "$late" = 0 ] && [ "$exits" = "$WANT" ] && ok "kernelretsnoop $v: no late lane, $exits exits" || bad "kernelretsnoop $v: $late late lanes, $exits exits (want $WANT)"
done
run kr-events kernelretsnoop --events -- samples/bin/vec_add 64 2 32 2
n=$(grep -c '^Thread (' "$LOGS/kr-events.out")
[ "$n" = $((3 * 64)) ] && ok "kernelretsnoop --events: $n lines" || bad "kernelretsnoop --events: $n lines, want $((3 * 64))"

# ---- kernel_trace ----------------------------------------------------------
for v in vec_add vec_add_hook vec_add_shared; do
	run kt-$v kernel_trace -j --max-events -1 -- samples/bin/$v 64 2 32 2
	dup=$(python3 - "$LOGS/kt-$v.out" <<'PY'
import json, sys, collections
c = collections.Counter()
for line in open(sys.argv[1], errors="replace"):
    try: o = json.loads(line)
    except ValueError: continue
    if o.get("type") == "thread": c[(o["grid"], tuple(o["block"]), tuple(o["thread"]))] += 1
launches = len({k[0] for k in c})
print(len(c), launches, sum(1 for v in c.values() if v != 1))
PY
)
	set -- $dup
	if result_ok kt-$v vec_add && [ "$1" = $((3 * 64)) ] && [ "$2" = 3 ] && [ "$3" = 0 ]; then ok "kernel_trace $v: $1 threads in $2 launches, each once"; else bad "kernel_trace $v: threads/launches/dups = $dup (want 192 3 0)"; fi
done
run kt-text kernel_trace -- samples/bin/vec_add 1000 3 256 4
grep -q '^\[kernel_trace\] ts=' "$LOGS/kt-text.out" && grep -q 'LAST SM STARTED' "$LOGS/kt-text.out" && ok "kernel_trace text view" || bad "kernel_trace text view"

# ---- attach with -p, detach, the app runs on -------------------------------
for tool in threadhist kernelretsnoop kernel_trace; do
	LD_PRELOAD=$AGENT samples/bin/vec_add 4096 300000 $THR $BLK >"$LOGS/p-$tool.app" 2>&1 &
	app=$!
	sleep 1.5
	timeout 30 $tool -p $app -d 2 >"$LOGS/p-$tool.out" 2>"$LOGS/p-$tool.err"
	rc=$?
	wait $app
	arc=$?
	if [ $rc = 0 ] && [ $arc = 0 ] && grep -aq "RESULT vec_add ok" "$LOGS/p-$tool.app" && grep -q 'instrumented launches' "$LOGS/p-$tool.err"; then
		ok "$tool -p: attached, detached, app ok ($(grep -o '[0-9]* instrumented launches' "$LOGS/p-$tool.err"))"
	else bad "$tool -p: tool rc $rc, app rc $arc"; tail -3 "$LOGS/p-$tool.err"; fi
done

# ---- overhead ---------------------------------------------------------------
PRESETS=${PRESETS:-"medium:10000 1000 256 40;large:100000 1000 512 196;xlarge:1000000 1000 512 1954"}
declare -A K
IFS=';' read -ra PS <<<"$PRESETS"
perf=""
for ps in "${PS[@]}"; do
	name=${ps%%:*} P=${ps#*:}
	for rep in $(seq "$REPS"); do
		samples/bin/vec_add $P >"$LOGS/b.out" 2>&1; K[$name.base]+=" $(kus "$LOGS/b.out")"
		for tool in threadhist kernelretsnoop "kernel_trace --max-events 0"; do
			t=${tool%% *}
			timeout 120 $tool -- samples/bin/vec_add $P >"$LOGS/perf-$name-$t.out" 2>&1
			K[$name.$t]+=" $(kus "$LOGS/perf-$name-$t.out")"
		done
	done
	b=$(med ${K[$name.base]})
	line="$name base ${b}us"
	for t in threadhist kernelretsnoop kernel_trace; do
		r=$(python3 -c "print(f'{$(med ${K[$name.$t]})/$b:.2f}')")
		line+=" $t x$r"
	done
	echo "perf: $line"
	perf+="$line; "
done
echo "SUMMARY: $pass ok, $fail failed | $perf"
[ $fail = 0 ]
