#!/usr/bin/env bash
# The README's "CUDA graphs" outputs: the tools' text output with -p on
# processes that captured their CUDA graphs before the tool came.
#   1. a PyTorch torch.cuda.CUDAGraph replay loop started with the agent
#      preloaded: launchlate -p (its kernels have no PTX: CUPTI times them)
#   2. graph_replay (a graph of two PTX kernels) with the agent preloaded:
#      threadhist -p (every replay instrumented through the exec's update)
#   3. graph_replay started without the agent: threadhist -p says why its
#      graph is not instrumented, launchlate -p times it through CUPTI
# Each output goes to ${OUT:-/tmp}/graphs-demo-N.txt.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUTDIR=${OUT:-/tmp}
AGENT=$ROOT/bin/libgpubpf-agent.so
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done' EXIT

# start LOG CMD...: run CMD in the background, wait for its ready line
start() {
	local log=$1
	shift
	"$@" >"$log" 2>&1 &
	app=$!
	pids+=("$app")
	for _ in $(seq 600); do grep -q 'ready' "$log" && return 0; sleep 0.2; done
	echo "graphs-demo: $* never got ready" >&2
	return 1
}

# show N TITLE TOOL ARGS...: the tool's output (stdout and stderr) on $app
show() {
	local n=$1 title=$2
	shift 2
	{
		echo "\$ sudo $* -p $app -d 3    # $title"
		timeout 120 bin/"$@" -p "$app" -d 3 2>&1
	} >"$OUTDIR/graphs-demo-$n.txt"
	cat "$OUTDIR/graphs-demo-$n.txt"
}

if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
	start /tmp/graphs-demo-torch.log env LD_PRELOAD="$AGENT" PYTHONUNBUFFERED=1 python3 scripts/gpu/graph_torch.py cudagraph 200 &&
		show 1 "a PyTorch CUDAGraph replay loop, captured before the attach" launchlate
	kill -TERM "$app" 2>/dev/null
	wait "$app" 2>/dev/null
	grep -a RESULT /tmp/graphs-demo-torch.log
fi

start /tmp/graphs-demo-pre.log env LD_PRELOAD="$AGENT" samples/bin/graph_replay 60 1000 65536 &&
	show 2 "graph_replay, agent preloaded" threadhist
kill -TERM "$app" 2>/dev/null
wait "$app" 2>/dev/null
grep -a RESULT /tmp/graphs-demo-pre.log

start /tmp/graphs-demo-plain.log samples/bin/graph_replay 60 1000 65536 &&
	show 3 "graph_replay, started without the agent" threadhist &&
	show 4 "the same process" launchlate
kill -TERM "$app" 2>/dev/null
wait "$app" 2>/dev/null
grep -a RESULT /tmp/graphs-demo-plain.log
