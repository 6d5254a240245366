#!/usr/bin/env bash
# GPU checks of the fleet exports (issue 46):
#   1. each tool (and gpubpf run with the counter example on gatedA)
#      attached with -p --prometheus to samples/gated for one round of 5
#      launch steps: the scrape's counts equal the exact numbers (5
#      launches of gatedA and gatedB; 5 x 256 x 4 thread runs of each), and
#      promtool's lint (promcheck, carried in the bundle) accepts the text;
#   2. launchlate --all --prometheus: three CUDA programs started after it
#      (vec_add, launch_heavy, a PyTorch loop) each appear with its pid, and
#      each one's series are gone within 40 s of its exit;
#   3. cost at 1,000 launches/s (launch_heavy, 1 ms kernels on one stream):
#      launchlate with and without --prometheus, the program's rate and the
#      tool's CPU (% of one core), median of 3 alternating runs;
#   4. each GPU tool's CPU while attached to a CUDA process that launches
#      nothing (a measurement).
# Prints "SUMMARY: ..." last.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PATH=$PWD/bin:$PATH
pass=0 fail=0
ok() { echo "ok   $*"; pass=$((pass + 1)); }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }
for b in gpuevent_snoop threadhist kernelretsnoop kernel_trace launchlate; do [ -x "bin/$b" ] || { echo "missing bin/$b"; exit 1; }; done
[ -x samples/bin/gated ] || make -C samples >/dev/null 2>&1
T=${GPUBPF_GPU_LOGS:-$(mktemp -d)}/fleet
rm -rf "$T" && mkdir -p "$T"

# scrape PORT FILE: the text exposition, as Prometheus asks for it
scrape() { python3 -c "
import sys, urllib.request
r = urllib.request.urlopen(urllib.request.Request('http://127.0.0.1:$1/metrics', headers={'Accept': 'text/plain;version=0.0.4'}), timeout=5)
sys.stdout.write(r.read().decode())" >"$2" 2>"$2.err"; }
# sample FILE NAME LABEL=VALUE...: the sum of the samples of NAME whose labels include those
sample() { python3 - "$@" <<'PY'
import re, sys
f, name, want = sys.argv[1], sys.argv[2], dict(a.split("=", 1) for a in sys.argv[3:])
tot, seen = 0.0, False
for line in open(f):
    m = re.match(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? ([^ ]+)', line)
    if not m or m.group(1) != name:
        continue
    labels = dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
    if all(labels.get(k) == v for k, v in want.items()):
        tot += float(m.group(4)); seen = True
print(f"{tot:g}" if seen else "missing")
PY
}
wait_for() { # FILE PATTERN SECS
	local i
	for ((i = 0; i < $3 * 20; i++)); do grep -qa "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
	return 1
}

# FLEET_PARTS picks sections (default all): scrape all cost idle
part() { [[ " ${FLEET_PARTS:-scrape all cost idle} " == *" $1 "* ]]; }

# CPU ns of every thread of a process (clock ticks, 10 ms, are too coarse
# for a tool that spends well under 1% of a core); without schedstat, the
# ticks of /proc/PID/stat
cpu_of() {
	local n
	n=$(cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{n += $1} END {if (NR && n) print n}')
	[ -n "$n" ] || n=$(awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) * 1e9 / hz}' "/proc/$1/stat" 2>/dev/null)
	echo "$n"
}
# pct C0 C1 T0 T1: CPU ns between two samples as % of one core
pct() { python3 -c "print(f'{100 * ($2 - $1) / 1e9 / ($4 - $3):.3f}')"; }

# ---- 1. each tool's scrape against exact counts -------------------------------
if part scrape; then
G=$T/gate
mkdir -p "$G"
# a sixth round, opened after the last tool's scrape, keeps the program
# (and so each tool) alive until then: a tool whose process exits ends
samples/bin/gated "$G" 5,5,5,5,5,5,1 256 4 1 >"$T/gated.out" 2>&1 &
app=$!
for _ in $(seq 600); do [ -e "$G/ready" ] && break; sleep 0.1; done
round=0 port=9460
RUNS=$((5 * 256 * 4))
for tool in launchlate gpuevent_snoop threadhist kernelretsnoop kernel_trace gpubpf; do
	round=$((round + 1)) port=$((port + 1))
	k=() cmd=("bin/$tool") obj=()
	case $tool in threadhist | kernelretsnoop | kernel_trace) k=(-k 'gated*') ;; esac
	# gpubpf run: the counter example retargeted to gatedA (its map's key 0
	# counts thread entries)
	[ $tool = gpubpf ] && k=(-k gatedA) cmd=(bin/gpubpf run) obj=(bpf/examples/counter_bpfel.o)
	"${cmd[@]}" -v -j "${k[@]}" -p "$app" --prometheus "127.0.0.1:$port" "${obj[@]}" >"$T/$tool.out" 2>"$T/$tool.err" &
	tp=$!
	if [ $tool = gpuevent_snoop ]; then wait_for "$T/$tool.err" 'Hit Ctrl-C' 30; else wait_for "$T/$tool.err" 'instrumented (' 30; fi
	touch "$G/go.$round"
	for _ in $(seq 600); do [ -e "$G/done.$round" ] && break; sleep 0.1; done
	sleep 11 # the GPU tools refresh their metrics every 10 s
	scrape $port "$T/$tool.prom"
	kill -INT $tp 2>/dev/null
	wait $tp
	case $tool in
	launchlate) a=$(sample "$T/$tool.prom" gpubpf_launchlate_latency_seconds_count kernel=gatedA) b=$(sample "$T/$tool.prom" gpubpf_launchlate_latency_seconds_count kernel=gatedB) want=5 ;;
	gpuevent_snoop) a=$(sample "$T/$tool.prom" gpubpf_gpuevent_snoop_launches_total kernel=gatedA) b=$(sample "$T/$tool.prom" gpubpf_gpuevent_snoop_launches_total kernel=gatedB) want=5 ;;
	threadhist) a=$(sample "$T/$tool.prom" gpubpf_threadhist_runs kernel=gatedA) b=$(sample "$T/$tool.prom" gpubpf_threadhist_runs kernel=gatedB) want=$RUNS ;;
	kernelretsnoop) a=$(sample "$T/$tool.prom" gpubpf_kernelretsnoop_exits kernel=gatedA) b=$(sample "$T/$tool.prom" gpubpf_kernelretsnoop_exits kernel=gatedB) want=$RUNS ;;
	kernel_trace) a=$(sample "$T/$tool.prom" gpubpf_kernel_trace_launches kernel=gatedA) b=$(sample "$T/$tool.prom" gpubpf_kernel_trace_launches kernel=gatedB) want=5 ;;
	gpubpf) a=$(sample "$T/$tool.prom" gpubpf_run_map_value map=calls key=0) b=$a want=$RUNS ;;
	esac
	lint="promcheck not carried"
	if command -v promcheck >/dev/null; then # promtool check metrics' linter (make gpu-bundle)
		if promcheck <"$T/$tool.prom" >"$T/$tool.lint" 2>&1; then lint="promtool's lint: clean"; else lint="promtool's lint: $(head -c 300 "$T/$tool.lint" | tr '\n' ' ')"; fi
	fi
	if [ "$a" = "$want" ] && [ "$b" = "$want" ] && [ "$lint" = "promtool's lint: clean" ]; then
		ok "$tool -p --prometheus: gatedA $a, gatedB $b (want $want each); $lint"
	else
		bad "$tool -p --prometheus: gatedA $a, gatedB $b (want $want); $lint; $(cat "$T/$tool.prom.err" 2>/dev/null | tail -1) $(tail -n 2 "$T/$tool.err" | tr '\n' ' ' | cut -c1-300)"
	fi
done
touch "$G/go.7"
wait $app
grep -q "RESULT gated ok" "$T/gated.out" && ok "gated ran its 6 rounds right under the six tools" || bad "gated: $(tail -n 2 "$T/gated.out" | tr '\n' ' ')"

fi

# ---- 2. launchlate --all ----------------------------------------------------
if part all; then
launchlate --all --prometheus 127.0.0.1:9400 -d 90 >"$T/all.out" 2>"$T/all.err" &
lp=$!
sleep 3
samples/bin/vec_add 4096 20000 256 16 >"$T/all-vec.out" 2>&1 &
p1=$!
LAUNCH_HEAVY_SECONDS=8 samples/bin/launch_heavy 1 4 20000 64 >"$T/all-lh.out" 2>&1 &
p2=$!
python3 scripts/gpu/torch_train.py --seconds 8 >"$T/all-torch.out" 2>&1 &
p3=$!
declare -A seen=() gone=()
: >"$T/all.log"
for i in $(seq 45); do
	scrape 9400 "$T/all.prom"
	for p in $p1 $p2 $p3; do
		n=$(grep -c "pid=\"$p\"" "$T/all.prom" 2>/dev/null)
		echo "t=$((i * 2)) pid $p series $n $(kill -0 $p 2>/dev/null && echo running || echo exited)" >>"$T/all.log"
		if [ "${n:-0}" -gt 0 ]; then seen[$p]=$((i * 2)); elif [ -n "${seen[$p]:-}" ] && [ -z "${gone[$p]:-}" ]; then gone[$p]=$((i * 2)); fi
	done
	[ ${#gone[@]} = 3 ] && break
	sleep 2
done
wait $p1 $p2 $p3
kill -INT $lp 2>/dev/null
wait $lp
for p in $p1 $p2 $p3; do
	what=$(case $p in $p1) echo vec_add ;; $p2) echo launch_heavy ;; *) echo PyTorch ;; esac)
	if [ -n "${seen[$p]:-}" ] && [ -n "${gone[$p]:-}" ]; then
		ok "launchlate --all: $what (pid $p) started after the tool, its series seen (last at t=${seen[$p]} s), gone at t=${gone[$p]} s"
	else
		bad "launchlate --all: $what (pid $p): seen '${seen[$p]:-no}', gone '${gone[$p]:-no}'; $(grep "pid $p" "$T/all.log" | tail -2 | tr '\n' ' ')"
	fi
done

fi

# ---- 3. cost at 1,000 launches/s --------------------------------------------
if part cost; then
LH=(samples/bin/launch_heavy 8000 1 1000000 32)
declare -A rate cpu
for i in 1 2 3; do
	"${LH[@]}" >"$T/cost0-$i.out" 2>&1
	rate[0]+=" $(grep -ao '[0-9.]* launches/s' "$T/cost0-$i.out" | awk '{print $1}')"
	for v in plain prom; do
		extra=()
		[ $v = prom ] && extra=(--prometheus 127.0.0.1:9401)
		"${LH[@]}" >"$T/cost-$v-$i.out" 2>&1 &
		ap=$!
		sleep 0.5
		# one run's profile: where the tool's CPU goes (go tool pprof)
		prof=()
		[ "$i$v" = 1plain ] && prof=(env GPUBPF_CPUPROFILE="$T/cost-steady.pprof")
		"${prof[@]}" launchlate -p $ap "${extra[@]}" >"$T/cost-$v-$i.tool" 2>&1 &
		tp=$!
		# the tool's CPU while it traces, the program at 1,000 launches/s:
		# from its start line (the attach done: injecting, reading and
		# instrumenting the module are the attach's cost, not the
		# trace's) for 4 s. At its end the tool exits with the program,
		# and /proc/PID/stat of a reaped tool reads nothing (the first
		# H200 run said 0.000%; the second, sampling from 1 s after the
		# start, 7% with the attach in it).
		for _ in $(seq 40); do grep -q '^Tracing' "$T/cost-$v-$i.tool" && break; sleep 0.1; done
		sleep 0.5
		t0=$(date +%s.%N) c0=$(cpu_of $tp)
		sleep 4
		t1=$(date +%s.%N) c1=$(cpu_of $tp)
		wait $ap
		kill -INT $tp 2>/dev/null
		wait $tp
		rate[$v]+=" $(grep -ao '[0-9.]* launches/s' "$T/cost-$v-$i.out" | awk '{print $1}')"
		if [ -n "$c0" ] && [ -n "$c1" ]; then
			cpu[$v]+=" $(pct "$c0" "$c1" "$t0" "$t1")"
		else
			echo "  cost: the tool (pid $tp) was gone before its CPU was sampled: $(tail -2 "$T/cost-$v-$i.tool" | tr '\n' ' ')"
		fi
	done
done
med() { python3 -c "import statistics,sys; v=[float(x) for x in sys.argv[1:] if x]; print(f'{statistics.median(v):.3f}' if v else 'nan')" "$@"; }
r0=$(med ${rate[0]}) rp=$(med ${rate[plain]}) rq=$(med ${rate[prom]})
cp=$(med ${cpu[plain]}) cq=$(med ${cpu[prom]})
line="untraced ${r0}/s; launchlate -p ${rp}/s (x$(python3 -c "print(f'{$rp/$r0:.3f}')" 2>/dev/null)), with --prometheus ${rq}/s (x$(python3 -c "print(f'{$rq/$r0:.3f}')" 2>/dev/null)); tool CPU ${cp}% and ${cq}% of a core"
if python3 -c "import sys; sys.exit(0 if $cq < 2.0 and $rq / $rp > 0.97 else 1)" 2>/dev/null; then
	ok "cost at 1,000 launches/s: $line (goals: CPU < 2%, the exporter within the noise)"
else
	bad "cost at 1,000 launches/s: $line (goals: CPU < 2%, the exporter within the noise)"
fi
fi

# ---- 4. an idle process: each tool's own CPU ---------------------------------
# Each GPU tool attached with -p to a CUDA process that launches nothing
# (gated before its one round): the tool's CPU over 5 s once attached.
# Production attaches sit on idle processes for hours: what waiting costs
# (drains, table reads, clocks). A measurement; it fails only where a tool
# could not be measured.
if part idle; then
G=$T/idle-gate
mkdir -p "$G"
samples/bin/gated "$G" 1 256 4 1 >"$T/idle-gated.out" 2>&1 &
app=$!
for _ in $(seq 600); do [ -e "$G/ready" ] && break; sleep 0.1; done
line="" missing=""
for tool in launchlate gpuevent_snoop threadhist kernelretsnoop kernel_trace; do
	k=()
	case $tool in threadhist | kernelretsnoop | kernel_trace) k=(-k 'gated*') ;; esac
	"bin/$tool" "${k[@]}" -p "$app" >"$T/idle-$tool.out" 2>"$T/idle-$tool.err" &
	tp=$!
	wait_for "$T/idle-$tool.err" 'Hit Ctrl-C' 30
	sleep 1
	t0=$(date +%s.%N) c0=$(cpu_of $tp)
	sleep 5
	t1=$(date +%s.%N) c1=$(cpu_of $tp)
	kill -INT $tp 2>/dev/null
	wait $tp
	if [ -n "$c0" ] && [ -n "$c1" ]; then line+=" $tool $(pct "$c0" "$c1" "$t0" "$t1")%"; else missing+=" $tool"; fi
done
touch "$G/go.1"
wait $app
if [ -z "$missing" ]; then
	ok "idle process, each tool -p, its CPU over 5 s (% of one core):$line"
else
	bad "idle process: not measured:$missing;$line"
fi
fi

echo "SUMMARY: fleet $pass ok, $fail failed"
[ $fail = 0 ]
