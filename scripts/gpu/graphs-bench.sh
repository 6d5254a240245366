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
# and "idle agent": preloaded untraced / plain untraced. Further rows take
# launchlate's cost apart (the agent's share alone: launch numbers and
# stamps kept, the probes' untimed path; graph kernels timed through a stamp
# word written per graph launch, the way before launch numbers; a tool
# attached whose probes match no kernel) and give the per-thread tools'
# cost.
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

# rate MODE ENV TOOL ARGS ELEMENTS LOG: replays/s over a 3 s window (TOOL
# "-" for none; ENV: the application's extra environment, "-" for none)
rate() {
	local mode=$1 env=$2 tool=$3 args=$4 elems=$5 log=$6 pre=(env)
	[ "$mode" = preloaded ] && pre+=("LD_PRELOAD=$AGENT")
	[ "$env" != - ] && pre+=($env)
	"${pre[@]}" "$APP" 60 0 "$elems" >"$log" 2>&1 &
	local app=$!
	pids+=("$app")
	local i
	for i in $(seq 200); do grep -q 'ready' "$log" && break; sleep 0.1; done
	local tpid=
	if [ "$tool" != - ]; then
		# shellcheck disable=SC2086
		timeout 60 bin/"$tool" -p "$app" -d 9 -j $args >"$log.$tool.out" 2>"$log.$tool.err" &
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

# name | start | application env | tool | tool flags [| threads per kernel]:
# the untraced run of a start mode (and size) is its baseline ("-" tool);
# the rows after the first two of each mode take the cost apart (CONFIGS
# overrides the list). The last five: the same graph with 1 M and 4 M
# threads per kernel (a replay of about 8 us and 23 us instead of 3.2 us).
DEFAULT_CONFIGS="untraced|preloaded|-|-|-
launchlate|preloaded|-|launchlate|-
launchlate, agent's bookkeeping only|preloaded|GPUBPF_AGENT_GRAPH_SEQ=host|launchlate|-
launchlate, stamp words (the old way)|preloaded|GPUBPF_AGENT_GRAPH_SEQ=0|launchlate|-
tool attached, no probe|preloaded|-|launchlate|-k nomatch --timing probe
threadhist|preloaded|-|threadhist|-
kernelretsnoop|preloaded|-|kernelretsnoop|-
untraced|plain|-|-|-
launchlate (CUPTI)|plain|-|launchlate|-
untraced, 1M threads|preloaded|-|-|-|1048576
launchlate, 1M threads|preloaded|-|launchlate|-|1048576
threadhist, 1M threads|preloaded|-|threadhist|-|1048576
untraced, 4M threads|preloaded|-|-|-|4194304
launchlate, 4M threads|preloaded|-|launchlate|-|4194304"
CONFIGS=${CONFIGS:-$DEFAULT_CONFIGS}

declare -A R
mapfile -t cfgs <<<"$CONFIGS"
for r in $(seq "$ROUNDS"); do
	for i in "${!cfgs[@]}"; do
		IFS='|' read -r name mode env tool args elems <<<"${cfgs[$i]}"
		[ "$args" = - ] && args=
		R[$i]+=" $(rate "$mode" "$env" "$tool" "$args" "${elems:-65536}" "$LOGS/$i-$r.log")"
	done
done

echo
echo "== graph replay rate (replays/s, median of $ROUNDS, rounds alternating; ratio to untraced of the same start) =="
printf '%-36s %-10s %12s %8s  %s\n' config start median ratio rounds
summary=""
declare -A BASE
for i in "${!cfgs[@]}"; do
	IFS='|' read -r name mode env tool args elems <<<"${cfgs[$i]}"
	[ "$tool" = - ] && BASE[$mode,${elems:-65536}]=$(med ${R[$i]})
done
for i in "${!cfgs[@]}"; do
	IFS='|' read -r name mode env tool args elems <<<"${cfgs[$i]}"
	m=$(med ${R[$i]})
	ratio=$(python3 -c "import sys; print(f'{float(sys.argv[1])/float(sys.argv[2]):.3f}')" "$m" "${BASE[$mode,${elems:-65536}]:-nan}" 2>/dev/null || echo nan)
	printf '%-36s %-10s %12s %8s  %s\n' "$name" "$mode" "$m" "$ratio" "${R[$i]}"
	[ "$tool" != - ] && summary+="$mode/$name x$ratio; "
done
idle=$(python3 -c "import sys; print(f'{float(sys.argv[1])/float(sys.argv[2]):.3f}')" "${BASE[preloaded,65536]:-nan}" "${BASE[plain,65536]:-nan}" 2>/dev/null || echo nan)
echo "idle preloaded agent / no agent: x$idle"
echo "SUMMARY: graph replays/s vs untraced: ${summary}idle agent x$idle (goal: launchlate >= 0.95)"
