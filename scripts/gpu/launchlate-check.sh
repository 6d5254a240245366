#!/usr/bin/env bash
# launchlate on the GPU machine: the story of samples/launch_story asserted
# from -j output, static and shared cudart with the agent's CPU stamps (the
# default) and static with --uprobe's, -p attach, and the cost
# (launch rate on launch_heavy, kernel time on vec_add presets) as ratios to
# the untraced run in the same invocation.
#   - idleTick (one launch at a time, GPU idle): p50 < 50 us
#   - queuedTick (behind a 500 us kernel and a copy): p50 > 300 us
#   - streamMark, --stream: stream i (1..4, from the sample's STREAM lines)
#     has p50 within [i*100 us, i*100 us + 80 us]: each launch attributed to
#     its own stream
#   - every kernel's latencies come with an error bound (bound_ns > 0)
#   - graphTick (captured into a CUDA graph, launched 200 times on an idle
#     GPU): all 200 starts timed from their cudaGraphLaunch, p50 < 50 us
#   - graph_launch: its three graph kernels timed at every graph launch, the
#     app's results unchanged
#   - CUPTI cross-check (scripts/gpu/launchlate-cupti.sh): per launch,
#     launchlate's latency and CUPTI's kernel start minus the same CPU stamp
#     agree within the error bound on >= 99% of launches (skipped, with a
#     line saying so, where no CUPTI is found)
# LAUNCHLATE_QUICK=1 skips PyTorch and the cost measurements.
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/gpu/lib.sh # kus
export PATH=$PWD/bin:$PATH
LOGS=${GPUBPF_GPU_LOGS:-${OUT:-/tmp}/gpu-check}/launchlate
rm -rf "$LOGS"; mkdir -p "$LOGS"
REPS=${REPS:-3}
pass=0 fail=0
ok() { echo "ok   $*"; pass=$((pass + 1)); }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }
[ -x bin/launchlate ] || { echo "missing bin/launchlate (make gpu-bundle)"; exit 1; }

run() {
	local name=$1; shift
	timeout --kill-after=5 120 "$@" >"$LOGS/$name.out" 2>"$LOGS/$name.err"
	echo $? >"$LOGS/$name.rc"
}
result_ok() { grep -aq "RESULT $2[a-z_]* ok" "$LOGS/$1.out"; }
# p50 KERNEL [STREAM] FILE: the p50_ns of a kernel (and stream) in -j output
p50() { python3 - "$@" <<'PY'
import json, sys
k, f = sys.argv[1], sys.argv[-1]
stream = sys.argv[2] if len(sys.argv) == 4 else None
for line in open(f, errors="replace"):
    try: o = json.loads(line)
    except Exception: continue
    if o.get("type") == "kernel" and o.get("kernel") == k and (stream is None or o.get("stream") == stream):
        print(o["p50_ns"], o["launches"], o["bound_ns"]); break
PY
}

# Static and shared cudart with the agent's stamps (the default), static
# with --uprobe's.
for cfg in ":" "_shared:" ":--uprobe"; do
	v=${cfg%%:*} flag=${cfg#*:}
	bin=samples/bin/launch_story$v
	[ -n "$flag" ] && v+=_uprobe
	# shellcheck disable=SC2086
	run story$v launchlate $flag -v -j --stream -- $bin 200 500
	grep -a 'uprobe' "$LOGS/story$v.err" | sed "s/^/  story$v: /"
	f=$LOGS/story$v.out
	result_ok story$v launch_story || { bad "launch_story$v: app failed under launchlate ($(tail -1 $f))"; continue; }
	read -r idle n1 b1 <<<"$(p50 idleTick "$f")"
	read -r queued n2 b2 <<<"$(p50 queuedTick "$f")"
	[ -n "${idle:-}" ] && [ "$idle" -lt 50000 ] && [ "${b1:-0}" -gt 0 ] && ok "launch_story$v idle: p50 $idle ns over $n1 launches (bound $b1 ns)" || bad "launch_story$v idle: p50 '${idle:-none}' ns (want < 50 us, bound > 0)"
	[ -n "${queued:-}" ] && [ "$queued" -gt 300000 ] && ok "launch_story$v queued: p50 $queued ns over $n2 launches" || bad "launch_story$v queued: p50 '${queued:-none}' ns (want > 300 us)"
	read -r graph n3 b3 <<<"$(p50 graphTick graph "$f")"
	gu=$(python3 -c "import json,sys; print(sum(o.get('untimed',0) for o in map(json.loads, (l for l in open(sys.argv[1], errors='replace') if l.startswith('{\"type\":\"kernel\"'))) if o.get('kernel')=='graphTick' and o.get('graph')))" "$f" 2>/dev/null)
	{ [ -n "${graph:-}" ] && [ "$graph" -lt 50000 ] && [ "${n3:-0}" = 200 ] && [ "${gu:-1}" = 0 ] && [ "${b3:-0}" -gt 0 ]; } &&
		ok "launch_story$v graph: p50 $graph ns over $n3 graph launches (bound $b3 ns; idle p50 ${idle:-none} ns)" ||
		bad "launch_story$v graph: p50 '${graph:-none}' ns over '${n3:-0}' starts timed, ${gu:-?} untimed (want 200 timed, p50 < 50 us)"
	streams_ok=1 detail=""
	while read -r _ i h; do
		read -r p n b <<<"$(p50 streamMark "$(printf '0x%x' "$h")" "$f")"
		lo=$((i * 100000)) hi=$((i * 100000 + 80000))
		detail+=" s$i=${p:-none}/${n:-0}"
		{ [ -n "${p:-}" ] && [ "$p" -ge "$lo" ] && [ "$p" -le "$hi" ]; } || streams_ok=0
	done < <(grep -a '^STREAM ' "$f" | awk '{print $1, $2, $3}')
	[ $streams_ok = 1 ] && ok "launch_story$v streams: p50 ns/launches$detail" || bad "launch_story$v streams: p50 ns/launches$detail (want stream i in [i*100, i*100+80] us)"
done

# graph_launch: three kernels captured into one graph, launched 50 times:
# every start timed from its graph launch, the app's results unchanged.
run graph launchlate -j -- samples/bin/graph_launch 50
gk=$(python3 - "$LOGS/graph.out" <<'PY'
import json, sys
ks = {}
for l in open(sys.argv[1], errors="replace"):
    try: o = json.loads(l)
    except Exception: continue
    if o.get("type") == "kernel" and o.get("graph"): ks[o["kernel"]] = (o["launches"], o["untimed"], o["p50_ns"])
ok = len(ks) == 3 and all(v[0] == 50 and v[1] == 0 for v in ks.values())
print(" ".join(f"{k}={v[0]}/{v[1]}/{v[2]}" for k, v in sorted(ks.items())) + (" ALL" if ok else ""))
PY
)
result_ok graph graph_launch && [[ "$gk" == *ALL ]] && ok "graph_launch: ${gk% ALL} (kernel=timed/untimed/p50 ns)" || bad "graph_launch: '$gk' (want 3 graph kernels, 50 timed each); app: $(tail -1 $LOGS/graph.out)"

# Text view, pasted into the README by hand.
run story-text launchlate -- samples/bin/launch_story 100 500
result_ok story-text launch_story && grep -q "kernels by p99" "$LOGS/story-text.out" && ok "text view" || bad "text view ($(tail -2 $LOGS/story-text.err))"
cat "$LOGS/story-text.out" "$LOGS/story-text.err" | grep -v '^STREAM\|^phases' | head -80

# -p: attach to a running program started with the agent.
AGENT=$PWD/bin/libgpubpf-agent.so
LD_PRELOAD=$AGENT samples/bin/launch_heavy 400000 4 20000 64 >"$LOGS/p-app.out" 2>&1 &
app=$!
sleep 1
run attach launchlate -j -d 2 -p $app
wait $app
n=$(python3 -c "import json,sys; print(sum(json.loads(l).get('launches',0) for l in open(sys.argv[1]) if l.startswith('{\"type\":\"kernel\"')))" "$LOGS/attach.out" 2>/dev/null)
result_ok p-app launch_heavy && [ "${n:-0}" -gt 0 ] && ok "-p: $n launches timed, app ok" || bad "-p: '${n:-0}' launches timed ($(tail -1 $LOGS/attach.err)); app: $(tail -1 $LOGS/p-app.out)"

# CUPTI cross-check: its own logs (launchlate-cupti beside these), its whole
# report here under "cupti:".
scripts/gpu/launchlate-cupti.sh >"$LOGS/cupti.txt" 2>&1
crc=$?
sed 's/^/  cupti: /' "$LOGS/cupti.txt"
case $crc in
0) ok "CUPTI cross-check: $(grep -a '^SUMMARY' "$LOGS/cupti.txt" | cut -d'|' -f2- | cut -c2-400)" ;;
3) grep -a '^skip' "$LOGS/cupti.txt" | tail -1 ;;
*) bad "CUPTI cross-check: $(grep -a '^FAIL\|^missing\|^bin/launchlate' "$LOGS/cupti.txt" | head -3 | tr '\n' ' ' | cut -c1-400)" ;;
esac

if [ "${LAUNCHLATE_QUICK:-0}" = 1 ]; then
	echo "SUMMARY: $pass ok, $fail failed | quick: no PyTorch, no cost measurements"
	[ $fail = 0 ]; exit
fi

# PyTorch: SASS-only kernels are listed as skipped; where PTX exists (or
# none does) the script still runs correctly, and the CPU side counts every
# launch call.
if python3 -c 'import torch' 2>/dev/null; then
	run torch launchlate -- python3 scripts/gpu/torch_alloc.py
	if [ "$(cat "$LOGS/torch.rc")" = 0 ] && grep -aq "^torch_alloc: torch" "$LOGS/torch.out" && grep -aq "CPU times taken by the gpubpf agent" "$LOGS/torch.err"; then
		ok "PyTorch: $(grep -a 'launchlate:' "$LOGS/torch.err" | tail -1 | cut -c1-300)"
	else
		bad "PyTorch: rc $(cat "$LOGS/torch.rc"), $(tail -2 "$LOGS/torch.err" | tr '\n' ' ' | cut -c1-300); app: $(tail -1 "$LOGS/torch.out")"
	fi
else
	echo "skip: no PyTorch here"
fi

# Cost: launch rate on launch_heavy, kernel time on vec_add presets. The
# launch rate here is a breakdown by set-up from a few runs; the goal's
# measurement is scripts/gpu/launchrate-bench.sh (a hundred paired rounds).
med() { python3 -c "import statistics,sys; v=[float(x) for x in sys.argv[1:] if x]; print(f'{statistics.median(v):.3f}' if v else 'nan')" "$@"; }
# Breakdown: threadhist instruments the same kernel with no launch words
# (the agent's instrumented-launch path alone); --uprobe -k noSuchKernel
# keeps --uprobe's uprobes and instruments nothing.
B="" T="" H="" U="" P=""
for rep in $(seq "$REPS"); do
	samples/bin/launch_heavy 200000 4 2000 64 >"$LOGS/lh-base.out" 2>&1; B+=" $(lrate $LOGS/lh-base.out)"
	timeout 120 launchlate -- samples/bin/launch_heavy 200000 4 2000 64 >"$LOGS/lh-ll.out" 2>"$LOGS/lh-ll.err"; T+=" $(lrate $LOGS/lh-ll.out)"
	timeout 120 launchlate --uprobe -- samples/bin/launch_heavy 200000 4 2000 64 >"$LOGS/lh-llu.out" 2>"$LOGS/lh-llu.err"; P+=" $(lrate $LOGS/lh-llu.out)"
	timeout 120 threadhist -- samples/bin/launch_heavy 200000 4 2000 64 >"$LOGS/lh-th.out" 2>"$LOGS/lh-th.err"; H+=" $(lrate $LOGS/lh-th.out)"
	timeout 120 launchlate --uprobe -k noSuchKernel -- samples/bin/launch_heavy 200000 4 2000 64 >"$LOGS/lh-up.out" 2>"$LOGS/lh-up.err"; U+=" $(lrate $LOGS/lh-up.out)"
done
rb=$(med $B) rt=$(med $T) rh=$(med $H) ru=$(med $U) rp=$(med $P)
r3() { python3 -c "print(f'{$1/$2:.3f}')" 2>/dev/null; }
lr=$(r3 $rt $rb)
echo "perf: launch_heavy launches/s untraced $rb, launchlate $rt, ratio $lr (goal >= 0.9; from $REPS runs each, inside the runs' +-20% spread: the verdict is scripts/gpu/launchrate-bench.sh's), --uprobe $(r3 $rp $rb); breakdown: uprobes alone (--uprobe -k noSuchKernel) $(r3 $ru $rb), agent instrumented launches alone (threadhist) $(r3 $rh $rb)"
# Graph launches: the stamp words cost two stream writes per graph launch.
G="" L=""
gpl() { grep -ao '[0-9.]* us per graph launch' "$1" | awk '{print $1}'; }
for rep in $(seq "$REPS"); do
	samples/bin/graph_launch 5000 >"$LOGS/g-base.out" 2>&1; G+=" $(gpl $LOGS/g-base.out)"
	timeout 120 launchlate -- samples/bin/graph_launch 5000 >"$LOGS/g-ll.out" 2>"$LOGS/g-ll.err"; L+=" $(gpl $LOGS/g-ll.out)"
done
echo "perf: graph_launch 5000 back-to-back graphs: untraced $(med $G) us per graph, launchlate $(med $L) us (x$(r3 $(med $L) $(med $G)))"
tail -1 "$LOGS/lh-ll.err"
perf="launch rate x$lr"
# Kernel time, two ways: the sample's CUDA-event time (launch path and
# kernel) and, under the CUPTI tracer (built by the cross-check above), the
# kernel's own GPU duration, each a median ratio to the untraced runs.
cupti=$PWD/scripts/gpu/cupti/libcupti_trace.so
for ps in "tiny:32 10000 32 1" "small:1000 10000 256 4" "medium:10000 1000 256 40" "large:100000 1000 512 196" "xlarge:1000000 1000 512 1954"; do
	name=${ps%%:*} P=${ps#*:} iters=$(echo $P | cut -d' ' -f2)
	# Breakdown: --uprobe; --uprobe -k nothing keeps the uprobes and
	# attaches no GPU probe.
	B="" T="" U="" V="" GB="" GT=""
	for rep in $(seq "$REPS"); do
		samples/bin/vec_add $P >"$LOGS/b.out" 2>&1; B+=" $(kus $LOGS/b.out)"
		timeout 120 launchlate -- samples/bin/vec_add $P >"$LOGS/v.out" 2>"$LOGS/v.err"; T+=" $(kus $LOGS/v.out)"
		timeout 120 launchlate --uprobe -- samples/bin/vec_add $P >"$LOGS/vu.out" 2>"$LOGS/vu.err"; V+=" $(kus $LOGS/vu.out)"
		timeout 120 launchlate --uprobe -k noSuchKernel -- samples/bin/vec_add $P >"$LOGS/u.out" 2>"$LOGS/u.err"; U+=" $(kus $LOGS/u.out)"
		if [ -f "$cupti" ]; then
			rm -f "$LOGS"/g*.cupti
			CUDA_INJECTION64_PATH=$cupti CUPTI_TRACE_OUT=$LOGS/gb.cupti samples/bin/vec_add $P >"$LOGS/gb.out" 2>&1; GB+=" $(gus $LOGS/gb.cupti $iters)"
			CUDA_INJECTION64_PATH=$cupti CUPTI_TRACE_OUT=$LOGS/gt.cupti timeout 120 launchlate -- samples/bin/vec_add $P >"$LOGS/gt.out" 2>"$LOGS/gt.err"; GT+=" $(gus $LOGS/gt.cupti $iters)"
		fi
	done
	r=$(r3 $(med $T) $(med $B)) rv=$(r3 $(med $V) $(med $B)) ru=$(r3 $(med $U) $(med $B))
	g="no CUPTI here"
	[ -n "$GB" ] && g="GPU duration (CUPTI) untraced $(med $GB) us, launchlate $(med $GT) us, x$(r3 $(med $GT) $(med $GB))"
	echo "perf: vec_add $name base $(med $B)us launchlate x$r (goal <= 1.03), --uprobe x$rv; uprobes only, no GPU probe x$ru; $g"
	perf+="; $name x$r"
	[ -n "$GB" ] && perf+=" (GPU x$(r3 $(med $GT) $(med $GB)))"
done
echo "SUMMARY: $pass ok, $fail failed | $perf"
[ $fail = 0 ]
