#!/usr/bin/env bash
# The long attach (issue 44, item 3), on the GPU machine:
#
#   scripts/gpu/soak.sh [launch_heavy] [torch] [kill]      (default: all three)
#
# launch_heavy, torch: each GPU tool attached with -p for SOAK_SECS (600) to
# a program started without it: launch_heavy launching for ever on 4
# streams, and a PyTorch training loop (torch_train.py). The five tools run
# side by side, each on its own instance of the program, all started
# together: REF_SECS (60) untraced, then SOAK_SECS attached, then POST_SECS
# (30) after the detach. Every INTERVAL (10) seconds the tool's RSS, the
# program's RSS (the agent lives in it) and its device memory are sampled
# (APP-TOOL.csv); the program prints its rate each interval. Judged by
# soak_util.py: the rate attached and after the detach against the untraced
# one, each memory curve flat after the attach's first minute, the drops
# the tool counted, the program's own RESULT.
#
# kill: one launch_heavy run (KILL_SECS, 150) and 20 attaches of the tools
# in turn, each killed with SIGKILL at a random moment (0.3-4 s): the
# program must run on, its counters right at the end, its rate back.
#
# SOAK_PARALLEL=1 runs the parts side by side (about 12 minutes in all).
# The device tool's calls end after 10 minutes: SOAK_BG=1 starts the whole
# run in a session of its own (setsid) and returns; `soak.sh wait SECS`
# waits for it at most SECS, then prints its summary and copies the logs
# to $OUT/soak. Logs in ${SOAK_DIR:-/tmp/soak}. Prints "SUMMARY: ..." last.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PATH=$PWD/bin:$PATH
D=${SOAK_DIR:-/tmp/soak}
SOAK_SECS=${SOAK_SECS:-600} REF_SECS=${REF_SECS:-60} POST_SECS=${POST_SECS:-30} INTERVAL=${INTERVAL:-10}
KILL_SECS=${KILL_SECS:-150}
TOOLS=(${SOAK_TOOLS:-launchlate threadhist kernelretsnoop kernel_trace gpuevent_snoop})

if [ "${1:-}" = wait ]; then
	limit=${2:-540}
	for _ in $(seq "$limit"); do [ -f "$D/done" ] && break; sleep 1; done
	[ -f "$D/done" ] || echo "soak: still running after ${limit} s; call 'soak.sh wait' again"
	if [ -n "${OUT:-}" ]; then mkdir -p "$OUT/soak" && tar czf "$OUT/soak/soak-logs.tgz" -C "$D" . 2>/dev/null; fi
	cat "$D/summary.txt" 2>/dev/null
	exit 0
fi
if [ "${SOAK_BG:-0}" = 1 ]; then
	rm -rf "$D" && mkdir -p "$D"
	SOAK_BG=0 setsid bash "$0" "$@" >"$D/run.log" 2>&1 </dev/null &
	echo "soak: started in the background (pid $!), logs in $D; 'scripts/gpu/soak.sh wait SECS' collects them"
	exit 0
fi
mkdir -p "$D"
SUM=$D/summary.txt
: >"$SUM"
pass=0 fail=0
ok() { echo "ok   $*" | tee -a "$SUM"; pass=$((pass + 1)); }
bad() { echo "FAIL $*" | tee -a "$SUM"; fail=$((fail + 1)); }
# what gpu-check.sh sets up, for a machine where it has not run yet: the
# carried Go binaries, the agent and the samples built here
if [ -f .gpupack/gpu.tgz ] && { [ ! -d .gpu/bin ] || [ .gpupack/gpu.tgz -nt .gpu/bin ]; }; then
	rm -rf .gpu && tar xzf .gpupack/gpu.tgz && touch .gpu/bin
fi
[ -d .gpu/bin ] && ! command -v go >/dev/null && mkdir -p bin && cp -fP .gpu/bin/* bin/
[ -f bin/libgpubpf-agent.so ] || make agent >/dev/null 2>&1
[ -x samples/bin/launch_heavy ] || make -C samples >/dev/null 2>&1
for t in "${TOOLS[@]}"; do [ -x "bin/$t" ] || { echo "missing bin/$t (make gpu-bundle)"; exit 1; }; done
echo "soak: $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1); ${SOAK_SECS} s attached, ${REF_SECS} s before, ${POST_SECS} s after" | tee -a "$SUM"

rss() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null; }

# start_app APP NAME SECS: one instance, its output in $D/NAME.app; sets APP_PID
start_app() {
	local app=$1 name=$2 secs=$3
	case $app in
	launch_heavy)
		LAUNCH_HEAVY_SECONDS=$secs LAUNCH_HEAVY_REPORT_S=$INTERVAL \
			samples/bin/launch_heavy 1 4 2000 32 >"$D/$name.app" 2>&1 </dev/null &
		;;
	torch)
		PYTHONUNBUFFERED=1 python3 scripts/gpu/torch_train.py --seconds "$secs" --report "$INTERVAL" >"$D/$name.app" 2>&1 </dev/null &
		;;
	esac
	APP_PID=$!
}

soak_group() {
	local app=$1 total=$((REF_SECS + SOAK_SECS + POST_SECS)) t0 i
	declare -A apid tpid
	t0=$(date +%s)
	for tool in "${TOOLS[@]}"; do
		start_app "$app" "$app-$tool" "$total"
		apid[$tool]=$APP_PID
		echo "t,tool_rss_kb,app_rss_kb,app_dev_mib" >"$D/$app-$tool.csv"
	done
	# the sampler: every INTERVAL, every pair
	(
		while :; do
			now=$(($(date +%s) - t0))
			smi=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null)
			for tool in "${TOOLS[@]}"; do
				p=${apid[$tool]} tp=""
				[ -f "$D/$app-$tool.toolpid" ] && tp=$(cat "$D/$app-$tool.toolpid")
				dev=$(echo "$smi" | awk -F', *' -v p="$p" '$1 == p {print $2}')
				echo "$now,${tp:+$(rss "$tp")},$(rss "$p"),$dev" >>"$D/$app-$tool.csv"
			done
			sleep "$INTERVAL"
		done
	) &
	local sampler=$!
	sleep "$REF_SECS"
	for tool in "${TOOLS[@]}"; do
		"bin/$tool" -p "${apid[$tool]}" -d "$SOAK_SECS" > >(tail -n 100 >"$D/$app-$tool.out") 2>"$D/$app-$tool.err" &
		tpid[$tool]=$!
		echo "${tpid[$tool]}" >"$D/$app-$tool.toolpid"
	done
	for tool in "${TOOLS[@]}"; do
		wait "${tpid[$tool]}"
		echo "$?" >"$D/$app-$tool.toolrc"
	done
	for tool in "${TOOLS[@]}"; do wait "${apid[$tool]}"; echo "$?" >"$D/$app-$tool.apprc"; done
	kill "$sampler" 2>/dev/null
	wait "$sampler" 2>/dev/null
	for tool in "${TOOLS[@]}"; do
		local trc arc verdict line
		trc=$(cat "$D/$app-$tool.toolrc") arc=$(cat "$D/$app-$tool.apprc")
		read -r verdict line < <(python3 scripts/gpu/soak_util.py judge "$D" "$app" "$tool" "$REF_SECS" "$SOAK_SECS")
		if [ "$verdict" = ok ] && [ "$trc" = 0 ] && [ "$arc" = 0 ]; then
			ok "$app, $tool -p ${SOAK_SECS} s: $line"
		else
			bad "$app, $tool -p ${SOAK_SECS} s (tool rc $trc, program rc $arc): $line; $(tail -n 2 "$D/$app-$tool.err" | tr '\n' ' ' | cut -c1-300)"
		fi
	done
}

kill_round() {
	start_app launch_heavy kill "$KILL_SECS"
	local app=$APP_PID died=0 i tool tp pause
	sleep 10
	for i in $(seq 20); do
		tool=${TOOLS[$((i % ${#TOOLS[@]}))]}
		"bin/$tool" -p "$app" -d 60 >/dev/null 2>"$D/kill-$i.err" &
		tp=$!
		pause=$(python3 -c 'import random; print(f"{random.uniform(0.3, 4.0):.2f}")')
		sleep "$pause"
		kill -9 "$tp" 2>/dev/null
		wait "$tp" 2>/dev/null
		echo "kill $i: $tool after $pause s" >>"$D/kill.log"
		sleep 0.5
		kill -0 "$app" 2>/dev/null || { died=$i; break; }
	done
	wait "$app"
	local rc=$?
	local last first
	first=$(grep -ao 'per_s=[0-9]*' "$D/kill.app" | head -1 | cut -d= -f2)
	last=$(grep -ao 'per_s=[0-9]*' "$D/kill.app" | tail -1 | cut -d= -f2)
	if [ "$died" = 0 ] && [ $rc = 0 ] && grep -q "RESULT launch_heavy ok" "$D/kill.app"; then
		ok "20 tools killed with SIGKILL at random moments while attached: launch_heavy ran on, counters right ($(grep -ao 'checked [0-9]* stream counters: [0-9]* wrong' "$D/kill.app")); rate first ${first}/s, last ${last}/s"
	else
		bad "SIGKILL round: program gone after kill $died, rc $rc: $(tail -n 3 "$D/kill.app" | tr '\n' ' ')"
	fi
}

part() {
	case $1 in
	launch_heavy | torch) soak_group "$1" ;;
	kill) kill_round ;;
	esac
}
for w in ${*:-launch_heavy torch kill}; do
	case $w in
	launch_heavy | torch | kill) ;;
	*) echo "soak: unknown part '$w' (launch_heavy, torch, kill)"; exit 2 ;;
	esac
done
# SOAK_PARALLEL=1: the parts side by side (11 programs and their tools on
# one GPU: the whole soak in one device session, the rates judged against
# each instance's own untraced minute under the same load)
if [ "${SOAK_PARALLEL:-0}" = 1 ]; then
	# the kill round's program runs as long as the soaks, so their
	# untraced minute and their attached ten share one load (the first
	# H200 run's kill round ended 160 s in: every soaked program sped up
	# by 10-15% then, which read as a faster program while traced)
	KILL_SECS=$((REF_SECS + SOAK_SECS + POST_SECS))
	for w in ${*:-launch_heavy torch kill}; do part "$w" & done
	wait
else
	for w in ${*:-launch_heavy torch kill}; do part "$w"; done
fi
# counted from the summary: the parallel parts count in subshells
pass=$(grep -c '^ok ' "$SUM") fail=$(grep -c '^FAIL ' "$SUM")
echo "SUMMARY: soak $pass ok, $fail failed" | tee -a "$SUM"
touch "$D/done"
[ $fail = 0 ]
