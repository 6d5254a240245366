#!/usr/bin/env bash
# CUDA graphs captured and instantiated BEFORE a gpubpf tool attached with
# -p PID: the graph launches the tools see, which of them were
# instrumented, and that the application's results stay right.
#
#   a. samples/bin/graph_replay and graph_replay_shared (a 2-kernel graph,
#      65536 threads per kernel, captured at start-up, replayed 1000 times a
#      second), each started two ways:
#        preloaded  LD_PRELOAD=bin/libgpubpf-agent.so: the agent saw the
#                   capture, so every replay is instrumented
#        plain      no agent at start: the tool injects it, the graph's
#                   nodes are unknown to it
#      then threadhist, launchlate, kernelretsnoop and kernel_trace in turn,
#      each `-p PID -d 3 -j`; at the end SIGTERM and the sample's RESULT ok.
#   b. every tool's {"type":"graphs",...} line (launches,
#      launches_instrumented, kernel_runs, kernel_runs_instrumented,
#      launches_unknown, execs, not_instrumented[{pid,exec,launches,
#      kernel_nodes,why}]) checked against the tool's own counts:
#        preloaded: launches >= 1500, launches_instrumented >= 0.9*launches
#          (the replays while the tool was still readying its probes ran the
#          originals: they must be the only ones not instrumented),
#          kernel_runs_instrumented == 2*launches_instrumented;
#          threadhist: sum of "runs" of its kernel lines == kernel_runs_instrumented*65536
#          kernelretsnoop: sum of "exits" of its kernel lines == kernel_runs_instrumented*65536
#          kernel_trace: grInc's and grMix's launches == launches_instrumented each
#          launchlate: graph_timed == kernel_runs_instrumented, every run
#            joined with its own graph launch (graph_no_stamp 0, the graph
#            kernels' p50 latency under 200 us: a neighbour's would read
#            about 1 ms)
#        plain: launches >= 1500;
#          threadhist, kernelretsnoop, kernel_trace: not_instrumented
#            non-empty, its first "why" non-empty
#          launchlate: launches_cupti (launched while CUPTI recorded) >=
#            0.9*launches, cupti_timed >= 0.99*2*launches_cupti
#   c. PyTorch (scripts/gpu/graph_torch.py; skipped, not failed, without
#      torch+CUDA): a torch.cuda.CUDAGraph replayed, plain and preloaded,
#      under launchlate -p: graph launches > 0, cupti_timed > 0, RESULT ok;
#      torch.compile(mode="reduce-overhead") preloaded under threadhist -p:
#      graph launches > 0, RESULT ok (the numbers printed); under launchlate
#      -p: its Triton kernels' probe-timed launches == kernel_runs_instrumented,
#      graph kernels timed >= 0.97 * kernel_runs (the rest through CUPTI).
# Every run is bounded by timeout, every background process is killed on
# exit. Logs: ${GPUBPF_GPU_LOGS:-${OUT:-/tmp}/gpu-check}/graphs/.
# Prints a table, then "SUMMARY: N passed, M failed"; exits non-zero on any
# failure.
#
# Environment: GRAPHS_APP_SECS (how long the samples would replay if not
# stopped, default 90: they are stopped with SIGTERM once the four tools
# are done), GRAPHS_TORCH_SECS (the same for the PyTorch loops, default
# 150), GRAPHS_TORCH=0 skips PyTorch.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
. scripts/gpu/lib.sh # summary_field, jsum
LOGS=${GPUBPF_GPU_LOGS:-${OUT:-/tmp}/gpu-check}/graphs
rm -rf "$LOGS"
mkdir -p "$LOGS"
AGENT=$ROOT/bin/libgpubpf-agent.so
ELEMS=65536
RATE=1000
APP_SECS=${GRAPHS_APP_SECS:-90}
TORCH_SECS=${GRAPHS_TORCH_SECS:-150}
TOOL_TIMEOUT=40       # each tool run on a sample
TORCH_TOOL_TIMEOUT=90 # on PyTorch: the tool reads libtorch's device code first
MIN_LAUNCHES=1500     # 3 s at 1000 replays/s, with room
TOOLS=(threadhist launchlate kernelretsnoop kernel_trace)

pass=0 fail=0
ROWS=()
ok() { echo "ok   $*"; pass=$((pass + 1)); }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }
# row CASE TOOL LAUNCHES INSTRUMENTED KERNEL_RUNS TOTAL VERDICT
row() { ROWS+=("$(printf '%-30s %-14s %-8s %-8s %-13s %-34s %s' "$@")"); }

# Background processes (samples, python, tools under timeout): all killed on
# exit, whatever ends the script.
BG=()
alive() { # PID: running (not gone, not a zombie)
	local s
	s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	s=${s##*) }
	[ "${s:0:1}" != Z ] && [ "${s:0:1}" != X ]
}
forget() { # PID: reaped, no longer ours to kill
	local p keep=()
	for p in "${BG[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
	BG=(${keep[@]+"${keep[@]}"})
}
cleanup() {
	local p
	[ ${#BG[@]} -gt 0 ] || return 0
	for p in "${BG[@]}"; do alive "$p" && kill -TERM "$p" 2>/dev/null; done
	sleep 0.5
	for p in "${BG[@]}"; do alive "$p" && kill -KILL "$p" 2>/dev/null; done
	return 0
}
trap cleanup EXIT
trap 'echo "graphs-check: interrupted"; exit 143' INT TERM

# wait_ready PID LOG PATTERN SECS: until LOG has PATTERN (0), PID is gone
# or SECS pass (1).
wait_ready() {
	local pid=$1 log=$2 pat=$3 end=$((SECONDS + $4))
	while [ $SECONDS -lt $end ]; do
		grep -aq "$pat" "$log" 2>/dev/null && return 0
		alive "$pid" || { grep -aq "$pat" "$log" 2>/dev/null; return; }
		sleep 0.2
	done
	return 1
}

# stop_app PID: SIGTERM, up to 60 s for it to finish its check and exit,
# then SIGKILL; reaps it.
stop_app() {
	local pid=$1 end=$((SECONDS + 60))
	alive "$pid" && kill -TERM "$pid" 2>/dev/null
	while alive "$pid" && [ $SECONDS -lt $end ]; do sleep 0.2; done
	if alive "$pid"; then
		echo "  pid $pid still running 60 s after SIGTERM: SIGKILL"
		kill -KILL "$pid" 2>/dev/null
		sleep 0.2
	fi
	wait "$pid" 2>/dev/null
	forget "$pid"
	return 0
}

# bounded SECS OUT ERR CMD...: CMD under timeout, in the background so a
# signal to this script is handled at once; its exit status.
bounded() {
	local secs=$1 out=$2 err=$3; shift 3
	timeout --kill-after=5 "$secs" "$@" >"$out" 2>"$err" &
	local p=$! rc
	BG+=("$p")
	wait "$p"
	rc=$?
	forget "$p"
	return $rc
}

# graphs_field FILE KEY: KEY of the last {"type":"graphs",...} line of FILE
# ("missing" when there is none or it lacks KEY). KEY is a dotted path:
# not_instrumented.0.why; "#" is a list's length (not_instrumented.#); "-"
# prints the whole line. Lists and objects print as JSON.
graphs_field() { python3 - "$@" <<'PY'
import json, sys
f, key = sys.argv[1:3]
g = None
try:
    for line in open(f, errors="replace"):
        if '"graphs"' not in line: continue
        try: o = json.loads(line)
        except ValueError: continue
        if isinstance(o, dict) and o.get("type") == "graphs": g = o
except OSError: pass
v = g
if v is not None and key != "-":
    for part in key.split("."):
        if part == "#":
            v = len(v) if isinstance(v, (list, dict)) else None
        elif isinstance(v, list):
            try: v = v[int(part)]
            except (ValueError, IndexError): v = None
        elif isinstance(v, dict):
            v = v.get(part)
        else:
            v = None
        if v is None: break
if v is None: print("missing")
elif isinstance(v, bool): print(str(v).lower())
elif isinstance(v, (list, dict)): print(json.dumps(v, separators=(",", ":")))
else: print(str(v).replace("\n", " "))
PY
}

# graph_p50 FILE: the largest p50_ns of launchlate's graph kernel rows
graph_p50() { python3 - "$@" <<'PY'
import json, sys
v = None
for line in open(sys.argv[1], errors="replace"):
    try: o = json.loads(line)
    except ValueError: continue
    if o.get("type") == "kernel" and o.get("graph") and o.get("launches", 0) > 0:
        v = max(v or 0, o.get("p50_ns", 0))
print("missing" if v is None else v)
PY
}

isnum() { [[ ${1:-} =~ ^[0-9]+$ ]]; }
num0() { if isnum "${1:-}"; then echo "$1"; else echo 0; fi; } # missing/None as 0

for t in "${TOOLS[@]}"; do [ -x bin/$t ] || { echo "missing bin/$t (make gpu-bundle)"; exit 1; }; done
[ -f "$AGENT" ] || { echo "missing $AGENT (make agent)"; exit 1; }

# judge CASE MODE TOOL OUT RC: the assertions of one tool run on a sample.
judge() {
	local case=$1 mode=$2 tool=$3 out=$4 rc=$5
	local L LI KR KRI LU NI why total="-" errs=()
	L=$(graphs_field "$out" launches) LI=$(graphs_field "$out" launches_instrumented)
	KR=$(graphs_field "$out" kernel_runs) KRI=$(graphs_field "$out" kernel_runs_instrumented)
	LU=$(graphs_field "$out" launches_unknown)
	NI=$(graphs_field "$out" not_instrumented.#) why=$(graphs_field "$out" not_instrumented.0.why)
	echo "  $case $tool (rc $rc): graphs: $(graphs_field "$out" - | cut -c1-600)"
	{ [ "$rc" = 124 ] || [ "$rc" = 137 ]; } && errs+=("timed out after ${TOOL_TIMEOUT}s")
	if [ "$(graphs_field "$out" -)" = missing ]; then
		errs+=("no {\"type\":\"graphs\"} line")
	elif ! isnum "$L" || [ "$L" -lt $MIN_LAUNCHES ]; then
		errs+=("launches=$L (want >= $MIN_LAUNCHES)")
	fi
	if [ "$mode" = preloaded ]; then
		[ "$rc" = 0 ] || errs+=("exit status $rc")
		if isnum "$L" && isnum "$LI"; then
			[ $((LI * 10)) -ge $((L * 9)) ] || errs+=("launches_instrumented=$LI < 0.9*launches=$L")
			{ isnum "$KRI" && [ "$KRI" -eq $((2 * LI)) ]; } || errs+=("kernel_runs_instrumented=$KRI != 2*launches_instrumented=$((2 * LI))")
			if [ "$(num0 "$NI")" -gt 0 ] && [ "$why" != "launched while the probes were being readied or taken down" ]; then
				errs+=("not instrumented: $why")
			fi
		fi
		local want=-1
		isnum "$KRI" && want=$((KRI * ELEMS))
		case $tool in
		threadhist)
			# threadhist -j: one {"type":"kernel"} line per kernel, "runs":
			# its thread runs (exits) counted (tools/threadhist/report.go json)
			total=$(jsum "$out" kernel runs)
			[ "$total" = "$want" ] || errs+=("threadhist runs=$total != kernel_runs_instrumented*$ELEMS=$want")
			total="runs=$total"
			;;
		kernelretsnoop)
			# kernelretsnoop -j: {"type":"kernel"} per kernel, "exits": its
			# thread exits (tools/kernelretsnoop/report.go json)
			total=$(jsum "$out" kernel exits)
			[ "$total" = "$want" ] || errs+=("kernelretsnoop exits=$total != kernel_runs_instrumented*$ELEMS=$want")
			total="exits=$total"
			;;
		kernel_trace)
			# kernel_trace -j has no per-kernel launch total: it prints a
			# {"type":"launch"} line per kept launch (--launches of them), keyed
			# by %gridid, which a graph's kernel keeps from one replay to the
			# next (launchlate's help), so lines are not launches. It runs with
			# --sample $ELEMS (only global thread 0 of each launch records)
			# and --launches 1000000 (none retired): then each launch is one
			# record and a kernel's launches are the sum of "threads" over
			# its launch lines (tools/kernel_trace/trace.go report).
			local gi gm
			gi=$(jsum "$out" launch threads grInc) gm=$(jsum "$out" launch threads grMix)
			{ [ "$gi" = "$LI" ] && [ "$gm" = "$LI" ]; } || errs+=("kernel_trace launches grInc=$gi grMix=$gm (want launches_instrumented=$LI each)")
			total="grInc=$gi,grMix=$gm"
			;;
		launchlate)
			# launchlate -j summary: graph_timed (graph kernels timed from
			# the stamp of their graph launch), cupti_timed (from CUPTI's
			# records; absent without CUPTI) (tools/launchlate/report.go
			# summaryJSON). The exact rule is to be tightened later.
			local gt ct tm
			gt=$(summary_field "$out" graph_timed) ct=$(summary_field "$out" cupti_timed) tm=$(summary_field "$out" timed)
			total="gt=$gt,ct=$ct,timed=$tm"
			if isnum "$L"; then
				[ "$gt" = "$KRI" ] || errs+=("graph_timed=$gt != kernel_runs_instrumented=$KRI")
				echo "  $case launchlate: graph_timed=$gt cupti_timed=$ct timed=$tm graph_untimed=$(summary_field "$out" graph_untimed) vs 2*launches=$((2 * L))"
				# the join of each run with its own graph launch: the sample
				# replays every millisecond, so a run joined with the launch
				# before or after its own would read about 1 ms (or 0)
				local p50 nost
				p50=$(graph_p50 "$out") nost=$(summary_field "$out" graph_no_stamp)
				echo "  $case launchlate: graph kernels' p50 latency ${p50} ns, runs without their launch's stamp $nost"
				{ isnum "$p50" && [ "$p50" -gt 0 ] && [ "$p50" -lt 200000 ]; } || errs+=("graph kernels' p50 latency $p50 ns (want 0 < p50 < 200 us: each run joined with its own launch)")
				[ "$nost" = 0 ] || errs+=("graph_no_stamp=$nost (want 0)")
			fi
			;;
		esac
	else # plain
		case $rc in 0) ;; 124 | 137) ;; *) echo "  note: $tool exited with status $rc (plain: not a failure by itself)" ;; esac
		case $tool in
		threadhist | kernelretsnoop | kernel_trace)
			if isnum "$NI" && [ "$NI" -gt 0 ] && [ "$why" != missing ] && [ -n "$why" ]; then
				echo "  $case $tool: not instrumented ($NI exec(s)), why: $why"
			else
				errs+=("not_instrumented=$NI, first why='$why' (want a non-empty list with a reason)")
			fi
			case $tool in
			threadhist) total="runs=$(jsum "$out" kernel runs)" ;;
			kernelretsnoop) total="exits=$(jsum "$out" kernel exits)" ;;
			kernel_trace) total="grInc=$(jsum "$out" launch threads grInc),grMix=$(jsum "$out" launch threads grMix)" ;;
			esac
			;;
		launchlate)
			local gt ct tm
			gt=$(summary_field "$out" graph_timed) ct=$(summary_field "$out" cupti_timed) tm=$(summary_field "$out" timed)
			total="gt=$gt,ct=$ct,timed=$tm"
			echo "  $case launchlate: cupti_timed=$ct graph_timed=$gt timed=$tm vs 2*launches=$((2 * $(num0 "$L")))"
			local LK
			LK=$(graphs_field "$out" launches_cupti)
			echo "  $case launchlate: launches_cupti=$LK of launches=$L"
			if isnum "$L" && isnum "$LK"; then
				[ $((LK * 10)) -ge $((L * 9)) ] || errs+=("launches_cupti=$LK < 0.9*launches=$L (CUPTI came on late)")
				{ isnum "$ct" && [ $((ct * 100)) -ge $((2 * LK * 99)) ]; } || errs+=("cupti_timed=$ct < 0.99*2*launches_cupti=$((2 * LK * 99 / 100))")
			fi
			;;
		esac
	fi
	local v=PASS
	if [ ${#errs[@]} -eq 0 ]; then
		ok "$case $tool: launches=$L instrumented=$LI kernel_runs=$KR/$KRI unknown=$LU; $total"
	else
		v=FAIL
		local IFS=';'
		bad "$case $tool: ${errs[*]}"
		tail -n 3 "${out%.out}.err" 2>/dev/null | sed 's/^/    /'
	fi
	row "$case" "$tool" "$L" "$LI" "$KR/$KRI" "${total:0:34}" "$v"
}

# a. + b.: the samples.
run_sample() { # EXE MODE
	local exe=$1 mode=$2
	local case tag log app pid
	case="$(basename "$exe")/$mode" tag="$(basename "$exe").$mode"
	log=$LOGS/$tag.app
	if [ ! -x "$exe" ]; then
		bad "$case: $exe not built (make -C samples)"
		row "$case" app - - - "not built" FAIL
		return
	fi
	echo "---- $case"
	if [ "$mode" = preloaded ]; then
		LD_PRELOAD=$AGENT "$exe" "$APP_SECS" $RATE $ELEMS >"$log" 2>&1 &
	else
		"$exe" "$APP_SECS" $RATE $ELEMS >"$log" 2>&1 &
	fi
	app=$!
	BG+=("$app")
	if ! wait_ready "$app" "$log" 'graph_replay: ready pid=' 20; then
		bad "$case: no ready line within 20 s: $(tail -n 2 "$log" | tr '\n' ' ')"
		row "$case" app - - - "not ready" FAIL
		stop_app "$app"
		return
	fi
	pid=$(grep -ao 'graph_replay: ready pid=[0-9]*' "$log" | head -1 | sed 's/.*pid=//')
	[ "$pid" = "$app" ] || echo "  note: ready line says pid $pid, started pid $app"
	sleep 1
	local tool rc extra
	for tool in "${TOOLS[@]}"; do
		extra=()
		[ "$tool" = kernel_trace ] && extra=(--max-events 0 --sample $ELEMS --launches 1000000)
		alive "$pid" || echo "  note: $case exited before $tool ran"
		bounded $TOOL_TIMEOUT "$LOGS/$tag.$tool.out" "$LOGS/$tag.$tool.err" bin/$tool -p "$pid" -d 3 -j ${extra[@]+"${extra[@]}"}
		rc=$?
		judge "$case" "$mode" "$tool" "$LOGS/$tag.$tool.out" "$rc"
	done
	kill -USR1 "$pid" 2>/dev/null
	sleep 0.2
	stop_app "$app"
	local res
	res=$(grep -a '^RESULT ' "$log" | tail -1)
	if [[ "$res" == "RESULT graph_replay ok"* ]]; then
		ok "$case: $res"
		row "$case" app - - - "$(echo "$res" | grep -o 'replays=[0-9]*')" PASS
	else
		bad "$case: app's result under tracing: '${res:-none}' ($(tail -n 2 "$log" | tr '\n' ' '))"
		row "$case" app - - - "${res:-no RESULT}" FAIL
	fi
}

for exe in samples/bin/graph_replay samples/bin/graph_replay_shared; do
	for mode in preloaded plain; do
		run_sample "$exe" "$mode"
	done
done

# c. PyTorch.
run_torch() { # MODE(cudagraph|compile) HOW(plain|preloaded) TOOL READY_SECS
	local tmode=$1 how=$2 tool=$3 rsecs=$4
	local case="torch-$tmode/$how" tag="torch-$tmode.$how" log app pid rc out
	log=$LOGS/$tag.app out=$LOGS/$tag.$tool.out
	echo "---- $case"
	if [ "$how" = preloaded ]; then
		LD_PRELOAD=$AGENT python3 scripts/gpu/graph_torch.py "$tmode" "$TORCH_SECS" >"$log" 2>&1 &
	else
		python3 scripts/gpu/graph_torch.py "$tmode" "$TORCH_SECS" >"$log" 2>&1 &
	fi
	app=$!
	BG+=("$app")
	if ! wait_ready "$app" "$log" 'graph_torch: ready pid=' "$rsecs"; then
		bad "$case: no ready line within $rsecs s: $(tail -n 3 "$log" | tr '\n' ' ' | cut -c1-400)"
		row "$case" app - - - "not ready" FAIL
		stop_app "$app"
		return
	fi
	pid=$(grep -ao 'graph_torch: ready pid=[0-9]*' "$log" | head -1 | sed 's/.*pid=//')
	sleep 1
	bounded $TORCH_TOOL_TIMEOUT "$out" "$LOGS/$tag.$tool.err" bin/$tool -p "$pid" -d 3 -j
	rc=$?
	local L LI KR KRI total errs=()
	L=$(graphs_field "$out" launches) LI=$(graphs_field "$out" launches_instrumented)
	KR=$(graphs_field "$out" kernel_runs) KRI=$(graphs_field "$out" kernel_runs_instrumented)
	echo "  $case $tool (rc $rc): graphs: $(graphs_field "$out" - | cut -c1-600)"
	{ [ "$rc" = 124 ] || [ "$rc" = 137 ]; } && errs+=("$tool timed out after ${TORCH_TOOL_TIMEOUT}s")
	{ isnum "$L" && [ "$L" -gt 0 ]; } || errs+=("graph launches=$L (want > 0)")
	if [ "$tool" = launchlate ]; then
		local gt ct tm
		gt=$(summary_field "$out" graph_timed) ct=$(summary_field "$out" cupti_timed) tm=$(summary_field "$out" timed)
		total="gt=$gt,ct=$ct,timed=$tm"
		echo "  $case launchlate: cupti_timed=$ct graph_timed=$gt timed=$tm cupti_records=$(summary_field "$out" cupti_records) graph launches=$L"
		{ isnum "$ct" && [ "$ct" -gt 0 ]; } || errs+=("cupti_timed=$ct (want > 0)")
		# preloaded, the graph's nodes are known: (almost) every kernel-node
		# run is timed (the replays before CUPTI came on are not)
		if [ "$how" = preloaded ] && isnum "$KR" && isnum "$gt"; then
			[ $((gt * 100)) -ge $((KR * 97)) ] || errs+=("graph_timed=$gt < 0.97*kernel_runs=$KR")
		fi
		# torch.compile: its Triton kernels (PTX from Triton's cache) run
		# the probe inside the graph, the other nodes are timed by CUPTI
		if [ "$tmode" = compile ]; then
			local tri
			tri=$(jsum "$out" kernel launches 'triton_*')
			echo "  $case launchlate: Triton kernels' launches $tri, kernel_runs_instrumented $KRI"
			[ "$tri" = "$KRI" ] && [ "$(num0 "$KRI")" -gt 0 ] || errs+=("Triton kernels' launches=$tri != kernel_runs_instrumented=$KRI")
		fi
	else
		total="runs=$(jsum "$out" kernel runs)"
		echo "  $case threadhist: thread runs $(jsum "$out" kernel runs) over $(grep -ac '"type":"kernel"' "$out") kernel line(s); kernel_runs_instrumented=$KRI (x threads per kernel varies)"
	fi
	stop_app "$app"
	local res
	res=$(grep -a '^RESULT ' "$log" | tail -1)
	[[ "$res" == "RESULT graph_torch ok"* ]] || errs+=("app's result: '${res:-none}'")
	local v=PASS
	if [ ${#errs[@]} -eq 0 ]; then
		ok "$case $tool: launches=$L instrumented=$LI kernel_runs=$KR/$KRI; $total; $res"
	else
		v=FAIL
		local IFS=';'
		bad "$case $tool: ${errs[*]}"
		tail -n 3 "$LOGS/$tag.$tool.err" "$log" 2>/dev/null | sed 's/^/    /'
	fi
	row "$case" "$tool" "$L" "$LI" "$KR/$KRI" "${total:0:34}" "$v"
}

torch_note=""
if [ "${GRAPHS_TORCH:-1}" = 0 ]; then
	torch_note="PyTorch skipped (GRAPHS_TORCH=0)"
elif ! timeout 120 python3 -c 'import torch; assert torch.cuda.is_available()' >"$LOGS/torch-probe.log" 2>&1; then
	torch_note="PyTorch skipped: no torch with CUDA here ($(tail -n 1 "$LOGS/torch-probe.log" | cut -c1-120))"
else
	run_torch cudagraph plain launchlate 120
	run_torch cudagraph preloaded launchlate 120
	run_torch compile preloaded threadhist 300
	run_torch compile preloaded launchlate 300
fi
[ -n "$torch_note" ] && echo "$torch_note"

echo
printf '%-30s %-14s %-8s %-8s %-13s %-34s %s\n' CASE TOOL LAUNCHES INSTR KRUNS/INSTR "TOOL'S TOTAL" VERDICT
printf '%s\n' "${ROWS[@]}"
echo "SUMMARY: $pass passed, $fail failed${torch_note:+ ($torch_note)}"
[ $fail -eq 0 ]
