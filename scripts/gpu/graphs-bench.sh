#!/usr/bin/env bash
# Replay rate of a CUDA graph captured before the tool came (issue 56's
# cost goal: >= 0.95 of untraced under launchlate -p), and what the
# per-thread tools and an idle preloaded agent cost it.
#
# samples/bin/graph_replay replays its 2-kernel graph (65536 threads per
# kernel, PTX) as fast as it can; its replays are read with SIGUSR1 at the
# start and end of a 3 s window while the tool is attached (after a 3 s
# settle: attach, JIT, the exec's update). Rounds alternate untraced and
# traced, ROUNDS each (default 3); the ratio is median traced / median
# untraced of the same start mode:
#   preloaded  LD_PRELOAD'ed agent: the graph's nodes are swapped for probes
#   plain      the tool injects the agent: the nodes are not known, launchlate
#              times them through CUPTI
# and "idle agent": preloaded untraced / plain untraced.
# Prints "SUMMARY: ..." last; logs under ${OUT:-/tmp}/gpu-check/graphs-bench.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
. scripts/gpu/lib.sh # med
LOGS=${GPUBPF_GPU_LOGS:-${OUT:-/tmp}/gpu-check}/graphs-bench
rm -rf "$LOGS"
mkdir -p "$LOGS"
ROUNDS=${ROUNDS:-3}
APP=samples/bin/graph_replay
AGENT=$ROOT/bin/libgpubpf-agent.so
[ -x "$APP" ] || { echo "graphs-bench: $APP missing (make -C samples)"; exit 1; }
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done' EXIT

# replays LOG: the last "replays=N" the sample printed
replays() { grep -ao 'replays=[0-9]*' "$1" | tail -1 | cut -d= -f2; }

# rate MODE TOOL LOG: replays/s over a 3 s window (TOOL "-" for none)
rate() {
	local mode=$1 tool=$2 log=$3 pre=()
	[ "$mode" = preloaded ] && pre=(env "LD_PRELOAD=$AGENT")
	"${pre[@]}" "$APP" 60 0 65536 >"$log" 2>&1 &
	local app=$!
	pids+=("$app")
	local i
	for i in $(seq 200); do grep -q 'ready' "$log" && break; sleep 0.1; done
	local tpid=
	if [ "$tool" != - ]; then
		timeout 60 bin/"$tool" -p "$app" -d 9 -j >"$log.$tool.out" 2>"$log.$tool.err" &
		tpid=$!
		sleep 3
	else
		sleep 1
	fi
	kill -USR1 "$app"; local t0 n0 t1 n1
	t0=$(date +%s.%N); sleep 0.2; n0=$(replays "$log")
	sleep 2.8
	kill -USR1 "$app"; t1=$(date +%s.%N); sleep 0.2; n1=$(replays "$log")
	[ -n "$tpid" ] && wait "$tpid"
	kill -TERM "$app" 2>/dev/null
	wait "$app" 2>/dev/null
	if ! grep -q 'RESULT graph_replay ok' "$log"; then
		echo "graphs-bench: $mode $tool: the sample did not end ok" >&2
	fi
	python3 -c "import sys; n0,n1,t0,t1=map(float,sys.argv[1:]); print(f'{(n1-n0)/(t1-t0):.0f}')" "$n0" "$n1" "$t0" "$t1"
}

declare -A R
for mode in preloaded plain; do
	tools=(launchlate threadhist)
	[ "$mode" = plain ] && tools=(launchlate)
	for r in $(seq "$ROUNDS"); do
		R[$mode,-]+=" $(rate "$mode" - "$LOGS/$mode-untraced-$r.log")"
		for t in "${tools[@]}"; do
			R[$mode,$t]+=" $(rate "$mode" "$t" "$LOGS/$mode-$t-$r.log")"
		done
	done
done

echo
echo "== graph replay rate (replays/s, median of $ROUNDS; ratio to untraced of the same start) =="
printf '%-10s %-12s %12s %8s  %s\n' start tool median ratio rounds
summary=""
for key in preloaded,- preloaded,launchlate preloaded,threadhist plain,- plain,launchlate; do
	mode=${key%,*} tool=${key#*,}
	m=$(med ${R[$key]})
	base=$(med ${R[$mode,-]})
	ratio=$(python3 -c "import sys; print(f'{float(sys.argv[1])/float(sys.argv[2]):.3f}')" "$m" "$base" 2>/dev/null || echo nan)
	printf '%-10s %-12s %12s %8s  %s\n' "$mode" "${tool/-/untraced}" "$m" "$ratio" "${R[$key]}"
	[ "$tool" != - ] && summary+="$mode/$tool x$ratio "
done
idle=$(python3 -c "import sys; print(f'{float(sys.argv[1])/float(sys.argv[2]):.3f}')" "$(med ${R[preloaded,-]})" "$(med ${R[plain,-]})" 2>/dev/null || echo nan)
echo "idle preloaded agent / no agent: x$idle"
echo "SUMMARY: graph replays/s vs untraced: ${summary}idle-agent x$idle (goal launchlate >= 0.95)"
