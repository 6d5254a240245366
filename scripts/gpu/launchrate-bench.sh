#!/usr/bin/env bash
# The launch rate of launch_heavy with a tool attached, as a ratio to
# untraced runs of the same invocation, measured so that the ratio is
# sharper than the run-to-run spread of the untraced rate (+-20% on the
# machines measured): rounds of one untraced run followed by each variant
# (order rotated per round). scripts/gpu/launchrate_stats.py gives the
# median of each round's variant / untraced ratio with a bootstrap 95%
# interval, and a verdict against GOAL: met only when the whole interval
# is at or above it.
#
# PIN=CPU runs the application on that CPU and the tool on the CPUs other
# than it and its SMT siblings, the untraced runs on that CPU too (PIN=auto:
# the second CPU near the GPU). Default none: on the one-socket VM measured,
# pinning left the spread as it was.
#
#   ROUNDS (default 150)  ARGS (launch_heavy's, default "200000 4 2000 64")
#   VARIANTS="name=command;..."  each run as COMMAND -- launch_heavy ARGS;
#     the command "idle" preloads the agent with nothing attached (default
#     "launchlate=launchlate;idle=idle": issue 12's goal, and the agent's
#     share of it)
#   GOAL (default 0.9)  LIMIT (seconds a run, default 120)
#   BUDGET_S: start no round after this many seconds (default 420: about
#     a hundred rounds of the default variants; 0: no bound)
# The rates go to $GPUBPF_GPU_LOGS/launchrate/NAME.rates as the runs end (a
# run cut short keeps them; launchrate_stats.py DIR GOAL NAME... reads
# them). Prints one line per variant and "SUMMARY: launchrate-bench ok|FAIL";
# fails only when a run loses launch_heavy's RESULT line.
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/gpu/lib.sh # lrate
export PATH=$PWD/bin:$PATH
ROUNDS=${ROUNDS:-150}
BUDGET_S=${BUDGET_S:-420}
ARGS=${ARGS:-"200000 4 2000 64"}
LIMIT=${LIMIT:-120}
VARIANTS=${VARIANTS:-"launchlate=launchlate;idle=idle"}
PIN=${PIN:-none}
GOAL=${GOAL:-0.9}
LOGS=${GPUBPF_GPU_LOGS:-${OUT:-/tmp}/gpu-check}
R=$LOGS/launchrate
rm -rf "$R"
mkdir -p "$R"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
AGENT=$PWD/bin/libgpubpf-agent.so
APP=$PWD/samples/bin/launch_heavy

# cpus LIST: the CPU numbers of a sysfs list such as "0-3,8".
cpus() { python3 -c "import sys
for p in sys.argv[1].split(','):
    a, _, b = p.partition('-')
    print(*range(int(a), int(b or a) + 1))" "$1" | tr ' ' '\n'; }
online=$(cpus "$(cat /sys/devices/system/cpu/online)")
app_pin=() tool_pin=()
if [ "$PIN" != none ]; then
	if [ "$PIN" = auto ]; then
		bus=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader 2>/dev/null | head -1 | tr 'A-F' 'a-f')
		near=$(cat "/sys/bus/pci/devices/${bus#0000}/local_cpulist" 2>/dev/null || cat /sys/devices/system/cpu/online)
		# the second CPU near the GPU: CPU 0 takes more of the interrupts
		PIN=$(cpus "$near" | sed -n 2p)
		[ -n "$PIN" ] || PIN=$(cpus "$near" | head -1)
	fi
	sib=$(cpus "$(cat /sys/devices/system/cpu/cpu$PIN/topology/thread_siblings_list 2>/dev/null || echo $PIN)")
	rest=$(comm -23 <(echo "$online" | sort) <(echo "$sib" | sort) | sort -n | paste -sd,)
	app_pin=(taskset -c "$PIN")
	tool_pin=(taskset -c "$rest")
fi
echo "launchrate-bench: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1), $(date -u +%FT%TZ), $(echo "$online" | wc -l) CPUs, launch_heavy $ARGS, ROUNDS=$ROUNDS, application on CPU ${PIN}${rest:+, tools on $rest}"

IFS=';' read -ra VS <<<"$VARIANTS"
fail=0
# run NAME COMMAND...: one run, its launches/s appended to $R/NAME.rates.
run() {
	local vn=$1
	shift
	timeout "$LIMIT" "$@" >"$T/$vn.out" 2>"$T/$vn.err"
	if ! grep -aq "RESULT launch_heavy ok" "$T/$vn.out"; then
		echo "FAIL $vn round $round:"
		tail -n 4 "$T/$vn.out" "$T/$vn.err" | cut -c1-300
		cp "$T/$vn.out" "$R/$vn-$round.out" 2>/dev/null
		cp "$T/$vn.err" "$R/$vn-$round.err" 2>/dev/null
		fail=1
		echo "" >>"$R/$vn.rates"
		return
	fi
	lrate "$T/$vn.out" >>"$R/$vn.rates"
}
n=${#VS[@]}
start=$SECONDS
for round in $(seq "$ROUNDS"); do
	if [ "$BUDGET_S" -gt 0 ] && [ $((SECONDS - start)) -ge "$BUDGET_S" ]; then
		echo "budget: $((round - 1)) of $ROUNDS rounds in ${BUDGET_S}s"
		break
	fi
	run base "${app_pin[@]}" "$APP" $ARGS
	for i in $(seq 0 $((n - 1))); do
		v=${VS[$(((i + round) % n))]} # rotate the variants' order per round
		vn=${v%%=*} cmd=${v#*=}
		if [ "$cmd" = idle ]; then
			run "$vn" env LD_PRELOAD="$AGENT" "${app_pin[@]}" "$APP" $ARGS
		else
			# shellcheck disable=SC2086 # the command is words
			run "$vn" "${tool_pin[@]}" $cmd -- "${app_pin[@]}" "$APP" $ARGS
		fi
	done
done
names=()
for v in "${VS[@]}"; do names+=("${v%%=*}"); done
stats=$(python3 scripts/gpu/launchrate_stats.py "$R" "$GOAL" "${names[@]}")
echo "$stats" | grep -v '^brief: '
brief=$(echo "$stats" | sed -n 's/^brief: //p')
[ $fail = 0 ] && echo "SUMMARY: launchrate-bench ok | $brief" || echo "SUMMARY: launchrate-bench FAIL (a run lost its RESULT line) | $brief"
exit $fail
