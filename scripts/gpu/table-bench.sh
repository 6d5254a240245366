#!/usr/bin/env bash
# The whole performance table (issue 17), on the GPU machine:
#   make bench                                  (scripts/gpu-check.sh --bench-only runs this)
#   bash scripts/gpu/table-bench.sh             (alone)
#   WORKLOADS="tiny small" MODES="empty counter hand_counter" bash scripts/gpu/table-bench.sh
#   bash scripts/gpu/table-bench.sh --selftest  (no GPU: the plumbing, on stub programs)
#
# Workloads: bpftime's vec_add presets (ELEMENTS ITERATIONS THREADS BLOCKS)
#   tiny 32 10000 32 1, small 1000 10000 256 4, medium 10000 10000 256 40,
#   large 100000 1000 512 196, xlarge 1000000 1000 512 1954;
# compute_bound (COMPUTE_BOUND_ARGS, default 16384 256 264 50: 50 launches
# of a FMA-bound kernel) and launch_heavy (LAUNCH_HEAVY_ARGS, default
# 200000 4 0 64: 200000 empty launches on 4 streams, the launch rate);
# attach_vec_add and attach_many_kernels ("attach": both).
#
# Modes, each run as a user runs it, interleaved with the untraced run
# ("base", once per repetition, first) in an order that rotates:
#   idle            the agent preloaded (LD_PRELOAD bin/libgpubpf-agent.so), nothing attached
#   empty           gpubpf run: empty entry and exit probes (bpf/bench/bench_empty.bpf.o)
#   globaltimer     gpubpf run: %globaltimer read at entry (bench_globaltimer.bpf.o)
#   counter         gpubpf run: per-thread counter (bench_counter.bpf.o)
#   ring            gpubpf run --summary: one 40-byte ring record per thread (bench_ring.bpf.o)
#   shared          gpubpf run: per-warp update of a CPU-shared kernel map, type 1504 (bench_shared.bpf.o):
#                   the adds gathered in device memory, folded into the map every 100 ms
#   shared_direct   the same with GPUBPF_SHARED_MAPS=direct: every add on the host link
#   threadhist, kernelretsnoop, kernel_trace, launchlate   TOOL -- CMD, default flags
#   gpuevent_snoop  gpuevent_snoop --summary -- CMD (tables, not the line per call)
#   hand_globaltimer, hand_counter, hand_ring, hand_shared   the same
#                   observations hand-written in CUDA (samples/bin/vec_add_ideal),
#                   vec_add presets only
# Attach workloads, modes "cmd" (gpubpf run -- CMD) and "p" (gpubpf run -p
# PID on a program started with the agent): tool exec -> probes active
# (the tool's -v "instrumented" line, stamped here), the tool's own
# first_attach_ms (from its trace start) and jit_ms; for vec_add and for
# samples/bin/many_kernels (one module of 200 kernels).
#
# Every run is bounded (LIMIT seconds, default 120) and appended at once as
# a row to bench/results/DATE-DEVICE.tsv (BENCH_TSV overrides; DATE is UTC,
# BENCH_DATE overrides); a run without the app's "RESULT <name> ok", or
# whose tool failed or instrumented nothing, is a row with status failed
# (or timeout), never dropped. Rows already in the file count: a second
# call the same day continues where the first stopped (FRESH=1 starts a new
# file), until every (workload, mode) has REPS rows (default 10;
# REPS_TOOLS, default REPS, for the five tools, the costliest runs). No new
# repetition starts once BUDGET_S seconds (default 540; 0: no limit) would
# be passed, so one call fits the device's 600 s; run it again to go on.
# At the end scripts/gpu/bench_table.py renders every row of the file into
# bench/results/DATE-DEVICE.md (with DRAIN_RATE, scripts/gpu/drain-rate.sh's
# output, when set, and bench/results/host-decode-*.txt, the
# host side, from `make bench-host` on a Go machine), copies both to
# $OUT/bench-results/ when $OUT is set, and the last line is
#   SUMMARY: ...
# Exit 0 unless a run of this call failed (missed targets are reported, not
# failures). Logs of failed runs: $GPUBPF_GPU_LOGS (or $OUT/gpu-check, or
# /tmp/gpu-check)/table-bench/.
set -uo pipefail
export LC_ALL=C # decimal points in $EPOCHREALTIME and printf
cd "$(dirname "$0")/../.." || exit 1
ROOT=$PWD

if [ "${1:-}" = --selftest ]; then
	exec bash scripts/gpu/table-bench-selftest.sh
fi

REPS=${REPS:-10}
REPS_TOOLS=${REPS_TOOLS:-$REPS}
LIMIT=${LIMIT:-120}
BUDGET_S=${BUDGET_S:-540}
ALL_WORKLOADS="tiny small medium large xlarge compute_bound launch_heavy attach_vec_add attach_many_kernels"
WORKLOADS=${WORKLOADS:-$ALL_WORKLOADS}
[[ " $WORKLOADS " == *" attach "* ]] && WORKLOADS=$(echo " $WORKLOADS " | sed 's/ attach / attach_vec_add attach_many_kernels /')
ALL_MODES="idle empty globaltimer counter ring ring_nodrop shared shared_direct threadhist kernelretsnoop kernel_trace launchlate gpuevent_snoop hand_globaltimer hand_counter hand_ring hand_shared"
MODES=${MODES:-$ALL_MODES}
ATTACH_MODES=${ATTACH_MODES:-"cmd p"}
RESULTS=${BENCH_RESULTS:-bench/results}
# Where the programs are: the selftest points these at stubs.
SBIN=${TABLE_BENCH_SAMPLES:-$ROOT/samples/bin}
TBIN=${TABLE_BENCH_TOOLS:-$ROOT/bin}
AGENT=${TABLE_BENCH_AGENT:-$ROOT/bin/libgpubpf-agent.so}
OBJ=$ROOT/bpf/bench
STUBS=${TABLE_BENCH_STUBS:-0}
export PATH=$TBIN:$PATH
LOGS=${GPUBPF_GPU_LOGS:-${OUT:-/tmp}/gpu-check}/table-bench
mkdir -p "$LOGS" "$RESULTS"
T=$(mktemp -d /tmp/table-bench.XXXXXX)
trap 'rm -rf "$T"' EXIT

declare -A WARGS=(
	[tiny]="32 10000 32 1" [small]="1000 10000 256 4" [medium]="10000 10000 256 40"
	[large]="100000 1000 512 196" [xlarge]="1000000 1000 512 1954"
	[compute_bound]="${COMPUTE_BOUND_ARGS:-16384 256 264 50}"
	[launch_heavy]="${LAUNCH_HEAVY_ARGS:-200000 4 0 64}"
	[attach_vec_add]="1000 10000 256 4" [attach_many_kernels]="0.5"
)
for w in $WORKLOADS; do
	[ -n "${WARGS[$w]:-}" ] || { echo "table-bench: unknown workload '$w' (known: $ALL_WORKLOADS, attach)"; echo "SUMMARY: FAIL unknown workload $w"; exit 1; }
done
for m in $MODES; do
	[[ " $ALL_MODES " == *" $m "* ]] || { echo "table-bench: unknown mode '$m' (known: $ALL_MODES)"; echo "SUMMARY: FAIL unknown mode $m"; exit 1; }
done

if [ "$STUBS" != 1 ] && [ ! -e /dev/nvidia0 ] && ! nvidia-smi -L >/dev/null 2>&1; then
	echo "table-bench: no NVIDIA GPU on this machine: nothing was run (--selftest checks the plumbing without one)"
	echo "SUMMARY: skipped, no GPU"
	exit 0
fi
# The tools need root (kernel eBPF); the selftest's stubs do not.
SUDO=()
[ "$(id -u)" = 0 ] || [ "$STUBS" = 1 ] || SUDO=(sudo -n)

# ---- what the chosen workloads need -------------------------------------
kind_of() { # workload -> vec | compute | launch | attach
	case $1 in
	tiny | small | medium | large | xlarge) echo vec ;;
	compute_bound) echo compute ;;
	launch_heavy) echo launch ;;
	attach_*) echo attach ;;
	esac
}
need_samples=() need_tools=(gpubpf)
for w in $WORKLOADS; do
	case $(kind_of "$w") in
	vec) need_samples+=(vec_add vec_add_ideal) ;;
	compute) need_samples+=(compute_bound) ;;
	launch) need_samples+=(launch_heavy) ;;
	attach) need_samples+=(vec_add many_kernels) ;;
	esac
done
for m in $MODES; do
	case $m in threadhist | kernelretsnoop | kernel_trace | launchlate | gpuevent_snoop) need_tools+=("$m") ;; esac
done
if [ "$STUBS" != 1 ]; then
	# Go binaries come from a build machine (make gpu-bundle), as for gpu-check.
	if [ ! -d .gpu/bin ] && [ -f .gpupack/gpu.tgz ]; then tar xzf .gpupack/gpu.tgz; fi
	if [ -d .gpu/bin ] && ! command -v go >/dev/null; then mkdir -p bin && cp -fP .gpu/bin/* bin/; fi
	# make is a no-op for what is built and current (compute_bound.cu and
	# the new samples rebuild once).
	mapfile -t build_targets < <(printf 'bin/%s\n' "${need_samples[@]}" | sort -u)
	make -s -C samples REQUIRE_NVCC=1 "${build_targets[@]}" >"$LOGS/build.log" 2>&1 || { tail -20 "$LOGS/build.log"; echo "SUMMARY: FAIL building samples ${build_targets[*]} (log $LOGS/build.log)"; exit 1; }
	[ -f "$AGENT" ] || make -s agent >>"$LOGS/build.log" 2>&1
fi
missing=""
for s in "${need_samples[@]}"; do [ -x "$SBIN/$s" ] || missing+=" $SBIN/$s"; done
for t in "${need_tools[@]}"; do [ -x "$TBIN/$t" ] || missing+=" $TBIN/$t"; done
[ -f "$AGENT" ] || missing+=" $AGENT"
if [ -n "$missing" ]; then
	echo "table-bench: missing$missing (make gpu-bundle on a build machine, carry .gpupack; make -C samples; make agent)"
	echo "SUMMARY: FAIL missing$missing"
	exit 1
fi

# ---- the results file -----------------------------------------------------
slug() { sed -e 's/^NVIDIA //' -e 's/[^A-Za-z0-9.]\{1,\}/-/g' -e 's/^-//' -e 's/-$//'; }
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
DEVICE=${BENCH_DEVICE:-$(printf '%s' "${GPU_NAME:-unknown GPU}" | slug)}
DATE=${BENCH_DATE:-$(date -u +%Y-%m-%d)}
TSV=${BENCH_TSV:-$RESULTS/$DATE-$DEVICE.tsv}
MD=${TSV%.tsv}.md
COLS="utc	inv	workload	args	mode	rep	status	kernel_us	host_us	rate	attach_ms	first_attach_ms	jit_ms	secs	note"
# append LINE: to the results file and, when $OUT is set (the device
# tool brings back what is under it), to its copy there at once, so a call
# killed at the device's time limit still brings back every row it made.
MIRROR=""
append() {
	printf '%s\n' "$1" >>"$TSV"
	[ -z "$MIRROR" ] || printf '%s\n' "$1" >>"$MIRROR"
}
meta() { append "$(printf '#meta\t%s\t%s' "$1" "$2")"; }
if [ "${FRESH:-0}" = 1 ] || [ ! -s "$TSV" ]; then
	{
		echo "# gpubpf table-bench rows (scripts/gpu/table-bench.sh; bench/results/README.md says what each column is)"
		echo "$COLS"
	} >"$TSV"
	meta date "$DATE"
	meta device "${GPU_NAME:-unknown}"
	meta driver "$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)"
	meta cuda_driver_api "$(nvidia-smi 2>/dev/null | grep -o 'CUDA Version: [0-9.]*' | head -1 | cut -d' ' -f3)"
	meta nvcc "$(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' | cut -d' ' -f2)"
	meta gpu_clocks "$(nvidia-smi --query-gpu=clocks.max.sm,clocks.max.mem,power.limit --format=csv,noheader 2>/dev/null | head -1)"
	meta host "$(uname -r); $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | sed 's/^ //'); $(nproc) CPUs"
fi
head -2 "$TSV" | grep -qx "$COLS" || { echo "table-bench: $TSV is not a table-bench file with today's columns (move it away or FRESH=1)"; echo "SUMMARY: FAIL $TSV has other columns"; exit 1; }
if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then
	mkdir -p "$OUT/bench-results" && cp -f "$TSV" "$OUT/bench-results/" && MIRROR=$OUT/bench-results/$(basename "$TSV")
fi
INV=$(date -u +%Y%m%dT%H%M%SZ)-$$
append "$(printf '#inv\t%s\tstart=%s reps=%s reps_tools=%s limit=%s budget=%s workloads=%s modes=%s gpubpf=%s' "$INV" "$(date -u +%FT%TZ)" "$REPS" "$REPS_TOOLS" "$LIMIT" "$BUDGET_S" \
	"$(echo $WORKLOADS)" "$(echo $MODES)" "$("$TBIN/gpubpf" --version 2>/dev/null | tail -1)")"

# done_count W M: rows already in the file for workload W, mode M (any status).
declare -A NDONE=()
while IFS=$'\t' read -r w m n; do NDONE[$w.$m]=$n; done < <(awk -F'\t' '!/^#/ && NR > 2 && $3 != "" { c[$3 "\t" $5]++ } END { for (k in c) print k "\t" c[k] }' "$TSV")
done_count() { echo "${NDONE[$1.$2]:-0}"; }

clean() { tr '\t\n\r' '   ' | cut -c1-300; }
row() { # fields of COLS after utc and inv
	local IFS=$'\t'
	append "$(printf '%s\t%s\t%s' "$(date -u +%H:%M:%S)" "$INV" "$*")"
}
# limit: a run's time bound, LIMIT, or less near the end of the budget, so
# that the call ends by BUDGET_S + 45 s whatever hangs.
limit() {
	local l=$LIMIT left
	if [ "$BUDGET_S" -gt 0 ]; then
		left=$((BUDGET_S + 45 - (SECONDS - T_START)))
		[ $left -gt 10 ] || left=10
		[ $left -lt "$l" ] && l=$left
	fi
	echo "$l"
}
T_START=$SECONDS
RUNS_OK=0 RUNS_FAILED=0 FAILED_LIST=""
say() { printf '[%4ds] %s\n' "$((SECONDS - T_START))" "$*"; }
ms_between() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", (b - a) * 1000 }'; }
# stamp: each line of stdin with the time it arrived (bash 5's
# $EPOCHREALTIME: no process per line).
if [ -n "${EPOCHREALTIME:-}" ]; then
	stamp() { local l; while IFS= read -r l; do printf '%s %s\n' "$EPOCHREALTIME" "$l"; done; }
else
	EPOCHREALTIME_MISSING=1
	stamp() { local l; while IFS= read -r l; do printf '%s %s\n' "$(date +%s.%N)" "$l"; done; }
fi
now() { if [ -z "${EPOCHREALTIME_MISSING:-}" ]; then echo "$EPOCHREALTIME"; else date +%s.%N; fi; }
jnum() { grep -ao "\"$2\":[0-9.e+-]*" "$1" | tail -1 | cut -d: -f2; }

# keep_log NAME FILES...: the last 64 KiB of each file of a failed run.
keep_log() {
	local n=$1 f; shift
	for f in "$@"; do [ -f "$f" ] && tail -c 65536 "$f" >"$LOGS/$n.$(basename "$f")"; done
}

# ---- one measured run -----------------------------------------------------
# run_mode W M REP: run mode M of workload W once, append its row.
run_mode() {
	local w=$1 m=$2 rep=$3 kind args app bin
	local -a A
	kind=$(kind_of "$w") args=${WARGS[$w]}
	read -r -a A <<<"$args"
	case $kind in
	vec) bin=vec_add app=vec_add ;;
	compute) bin=compute_bound app=compute_bound ;;
	launch) bin=launch_heavy app=launch_heavy ;;
	esac
	# Launches the probes must see (the warm-up launch included) and
	# threads per launch.
	local want_launches threads
	case $kind in
	vec) want_launches=$((A[1] + 1)) threads=$((A[2] * A[3])) ;;
	compute) want_launches=$((A[3] + 1)) threads=$((A[1] * A[2])) ;;
	launch) want_launches=$((A[0] + 1)) threads=${A[3]} ;;
	esac
	local -a CMD=() APP=("$SBIN/$bin" "${A[@]}")
	local check=none
	case $m in
	base) CMD=("${APP[@]}") ;;
	idle) CMD=(env LD_PRELOAD="$AGENT" "${APP[@]}") ;;
	empty) CMD=("${SUDO[@]}" "$TBIN/gpubpf" run -j --summary -P empty_entry -P empty_exit "$OBJ/bench_empty.bpf.o" -- "${APP[@]}") check=json ;;
	globaltimer | counter | shared) CMD=("${SUDO[@]}" "$TBIN/gpubpf" run -j "$OBJ/bench_$m.bpf.o" -- "${APP[@]}") check=json ;;
	shared_direct) CMD=("${SUDO[@]}" env GPUBPF_SHARED_MAPS=direct "$TBIN/gpubpf" run -j "$OBJ/bench_shared.bpf.o" -- "${APP[@]}") check=json ;;
	ring) CMD=("${SUDO[@]}" "$TBIN/gpubpf" run -j --summary "$OBJ/bench_ring.bpf.o" -- "${APP[@]}") check=json ;;
	ring_nodrop) CMD=("${SUDO[@]}" "$TBIN/gpubpf" run -j --summary --no-drop "$OBJ/bench_ring.bpf.o" -- "${APP[@]}") check=json ;;
	threadhist | kernelretsnoop | kernel_trace | launchlate) CMD=("${SUDO[@]}" "$TBIN/$m" -- "${APP[@]}") check=account ;;
	gpuevent_snoop) CMD=("${SUDO[@]}" "$TBIN/gpuevent_snoop" --summary -- "${APP[@]}") ;;
	hand_*) CMD=("$SBIN/vec_add_ideal" "${A[@]}" "${m#hand_}") app=vec_add_ideal ;;
	esac
	local out=$T/run.out err=$T/run.err t0 t1 rc
	t0=$(now)
	# The per-thread counter's map dump (a line per thread: a million at
	# xlarge) is not kept.
	local lim
	lim=$(limit)
	timeout --kill-after=5 "$lim" "${CMD[@]}" 2>"$err" </dev/null | grep -av '"map":"counters"' >"$out"
	rc=${PIPESTATUS[0]}
	t1=$(now)
	local secs kus="" hus="" rate="" status=ok note=""
	secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
	case $kind in
	vec)
		kus=$(grep -ao 'Average CUDA-event kernel time: [0-9.]*' "$out" | tail -1 | awk '{print $NF}')
		hus=$(grep -ao 'Average kernel time: [0-9.]*' "$out" | tail -1 | awk '{print $NF}') ;;
	compute)
		kus=$(grep -ao 'kernel time (CUDA events): [0-9.]*' "$out" | tail -1 | awk '{print $NF}')
		hus=$(grep -ao 'host-timed: [0-9.]*' "$out" | tail -1 | awk '{print $NF}') ;;
	launch)
		rate=$(grep -ao 'launches_per_s=[0-9.]*' "$out" | tail -1 | cut -d= -f2)
		[ -n "$rate" ] && hus=$(awk -v r="$rate" 'BEGIN { if (r > 0) printf "%.3f", 1e6 / r }') ;;
	esac
	if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
		status=timeout note="killed after ${lim}s"
	elif ! grep -aq "RESULT $app ok" "$out"; then
		status=failed note="no 'RESULT $app ok' (exit $rc): $(grep -a 'RESULT' "$out" | tail -1 | clean) $(tail -2 "$err" | clean)"
	elif [ "$rc" != 0 ]; then
		status=failed note="exit status $rc: $(tail -2 "$err" | clean)"
	elif [ -z "$kus$rate" ] || [ -z "$hus" ]; then
		status=failed note="no timing line in the app's output"
	fi
	# Proof that the probes ran: a run that instrumented nothing measured
	# the original kernels.
	local il=""
	case $check in
	json) il=$(jnum "$out" instrumented_launches) ;;
	account) il=$(grep -ao '[0-9]* instrumented launches' "$err" | tail -1 | awk '{print $1}') ;;
	esac
	if [ $check != none ] && [ $status = ok ]; then
		if [ -z "$il" ] || [ "$il" = 0 ]; then
			status=failed note="no instrumented launch reported (${il:-no count})"
		elif [ "$il" -lt "$want_launches" ]; then
			note="PARTIAL: $il of $want_launches launches instrumented"
		else
			note="$il launches instrumented"
		fi
	fi
	case $m in
	ring | ring_nodrop)
		local prod rec drop
		prod=$(jnum "$out" records_produced) rec=$(jnum "$out" records) drop=$(jnum "$out" records_dropped_gpu)
		note+="; records produced ${prod:-?}, delivered ${rec:-?}, dropped on the GPU ${drop:-?}"
		[ "$m" = ring_nodrop ] && note+=", warps waited $(jnum "$out" ring_waits), gave up $(jnum "$out" ring_wait_drops)" ;;
	shared | shared_direct)
		# The slots of the shared map sum to the threads that entered.
		local sum want=$((threads * want_launches))
		sum=$(python3 - "$out" <<'PY'
import json, sys
v = {}
for line in open(sys.argv[1], errors="replace"):
    if '"shared_counts"' not in line: continue
    try: o = json.loads(line)
    except ValueError: continue
    if o.get("type") == "map" and o.get("map") == "shared_counts":
        try: v[(o.get("pid"), o.get("device"), o.get("key"))] = int(str(o.get("value", 0)), 0)
        except ValueError: print("unreadable value " + str(o.get("value"))[:40]); sys.exit()
print(sum(v.values()) if v else "")
PY
)
		if [ -z "$sum" ]; then
			note+="; shared map not in the output"
		elif [[ $sum == unreadable* ]]; then
			note+="; shared map: $sum"
		elif [ "$sum" != "$want" ] && [ $status = ok ]; then
			status=failed note+="; shared map sums to $sum, want $want (threads x launches)"
		else
			note+="; shared map sum $sum"
		fi ;;
	gpuevent_snoop) note=$(grep -ao '[0-9.]* probe hits per launch' "$err" | tail -1) ;;
	esac
	[ -n "$WANT_RUNTIME" ] || WANT_RUNTIME=$(grep -ao 'runtime [0-9.]*, driver [0-9.]*' "$out" | head -1)
	row "$w" "$args" "$m" "$rep" "$status" "$kus" "$hus" "$rate" "" "" "" "$secs" "$(printf '%s' "$note" | clean)"
	if [ $status = ok ]; then
		RUNS_OK=$((RUNS_OK + 1))
		say "$w rep $rep $m ok ${kus:+kernel ${kus}us }${hus:+host ${hus}us }${rate:+rate ${rate}/s }(${secs}s)"
	else
		RUNS_FAILED=$((RUNS_FAILED + 1)) FAILED_LIST+=" $w/$m/$rep"
		keep_log "$w-$m-$rep" "$out" "$err"
		say "$w rep $rep $m $status: $note"
	fi
}
WANT_RUNTIME=""

# ---- attach ---------------------------------------------------------------
# attach_fields OUT ERR T0: "attach_ms first_attach_ms jit_ms" of a run with
# -j -v; attach_ms from the tool's exec (T0) to its "instrumented" line.
attach_fields() {
	local at t
	t=$(grep -a ' instrumented (' "$2" | head -1 | cut -d' ' -f1)
	[ -n "$t" ] && [ -n "$3" ] && at=$(ms_between "$3" "$t")
	echo "${at:-} $(jnum "$1" first_attach_ms) $(jnum "$1" jit_ms)"
}
VEC_P_ITERS=""
# run_attach W M REP
run_attach() {
	local w=$1 m=$2 rep=$3 args=${WARGS[$1]} out=$T/at.out err=$T/at.err app_out=$T/at.app rc t0="" status=ok note="" at fa jit
	local -a A
	local -a PROBE=(-j -v -P empty_entry "$OBJ/bench_empty.bpf.o")
	local appname=${w#attach_} startsec=$SECONDS lim
	lim=$(limit)
	read -r -a A <<<"$args"
	: >"$app_out"
	if [ "$m" = cmd ]; then
		t0=$(now)
		timeout --kill-after=5 "$lim" "${SUDO[@]}" "$TBIN/gpubpf" run "${PROBE[@]}" -- "$SBIN/$appname" "${A[@]}" 2>&1 >"$out" </dev/null | stamp >"$err"
		rc=${PIPESTATUS[0]}
		cp "$out" "$app_out"
	else
		local app pid="" stopf=$T/stop.$rep
		rm -f "$stopf"
		if [ "$appname" = vec_add ]; then
			# No gate in vec_add: enough iterations to run about 4 s
			# (from its per-iteration time here), attach after 1.2 s.
			if [ -z "$VEC_P_ITERS" ]; then
				timeout 60 "$SBIN/vec_add" 1000 20000 256 4 >"$T/cal.out" 2>&1
				local us
				us=$(grep -ao 'Average kernel time: [0-9.]*' "$T/cal.out" | awk '{print $NF}')
				VEC_P_ITERS=$(awk -v u="${us:-10}" 'BEGIN { n = int(3.5e6 / (u > 0.5 ? u : 0.5)); if (n < 100000) n = 100000; if (n > 20000000) n = 20000000; print n }')
			fi
			timeout --kill-after=5 "$lim" env LD_PRELOAD="$AGENT" "$SBIN/vec_add" 1000 "$VEC_P_ITERS" 256 4 >"$app_out" 2>&1 </dev/null &
			app=$!
			sleep 1.2
			pid=$(pgrep -P "$app" 2>/dev/null | head -1)
			[ -n "$pid" ] || pid=$(awk '{print $1}' "/proc/$app/task/$app/children" 2>/dev/null)
		else
			MANY_KERNELS_STOP=$stopf timeout --kill-after=5 "$lim" env LD_PRELOAD="$AGENT" "$SBIN/many_kernels" 60 >"$app_out" 2>&1 </dev/null &
			app=$!
			local i
			for ((i = 0; i < 600; i++)); do grep -aq '^READY' "$app_out" && break; kill -0 "$app" 2>/dev/null || break; sleep 0.05; done
			pid=$(grep -ao '^READY pid=[0-9]*' "$app_out" | head -1 | cut -d= -f2)
		fi
		if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
			status=failed note="the program was not running when the tool was to attach (pid '${pid}'): $(tail -2 "$app_out" | clean)"
			rc=1
			: >"$out"; : >"$err"
		else
			t0=$(now)
			timeout --kill-after=5 "$lim" "${SUDO[@]}" "$TBIN/gpubpf" run "${PROBE[@]}" -d 1 -p "$pid" 2>&1 >"$out" </dev/null | stamp >"$err"
			rc=${PIPESTATUS[0]}
		fi
		touch "$stopf"
		wait "$app"
		local arc=$?
		[ $arc = 0 ] || [ $status != ok ] || { status=failed note="the program exited with $arc while traced with -p"; }
	fi
	read -r at fa jit <<<"$(attach_fields "$out" "$err" "$t0")"
	if [ $status = ok ]; then
		if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
			status=timeout note="killed after ${lim}s"
		elif ! grep -aq "RESULT $appname ok" "$app_out"; then
			status=failed note="no 'RESULT $appname ok': $(grep -a RESULT "$app_out" | tail -1 | clean) $(tail -2 "$err" | clean)"
		elif [ "$rc" != 0 ]; then
			status=failed note="gpubpf exit status $rc: $(tail -2 "$err" | clean)"
		elif [ -z "${at:-}" ]; then
			status=failed note="no 'instrumented' line from gpubpf -v: nothing was attached"
		else
			note="$(jnum "$out" instrumented_launches) launches instrumented; $(grep -ao 'instrumented ([0-9]* handle' "$err" | head -1 | grep -o '[0-9]*') handle(s)"
		fi
	fi
	row "$w" "$args" "$m" "$rep" "$status" "" "" "" "${at:-}" "${fa:-}" "${jit:-}" "$((SECONDS - startsec))" "$(printf '%s' "$note" | clean)"
	if [ $status = ok ]; then
		RUNS_OK=$((RUNS_OK + 1))
		say "$w rep $rep $m ok: probes active ${at}ms after the tool's exec (tool's own first_attach ${fa}ms, JIT ${jit}ms)"
	else
		RUNS_FAILED=$((RUNS_FAILED + 1)) FAILED_LIST+=" $w/$m/$rep"
		keep_log "$w-$m-$rep" "$out" "$err" "$app_out"
		say "$w rep $rep $m $status: $note"
	fi
}

# ---- the repetitions ------------------------------------------------------
reps_of() { # repetitions wanted of mode M
	case $1 in threadhist | kernelretsnoop | kernel_trace | launchlate | gpuevent_snoop) echo "$REPS_TOOLS" ;; *) echo "$REPS" ;; esac
}
modes_of() { # the modes of workload W still short of their repetitions
	local w=$1 m kind
	kind=$(kind_of "$w")
	local list=$MODES
	[ "$kind" = attach ] && list=$ATTACH_MODES
	for m in $list; do
		[[ $m == hand_* ]] && [ "$kind" != vec ] && continue
		[ "$(done_count "$w" "$m")" -lt "$(reps_of "$m")" ] && printf '%s ' "$m"
	done
}
LAST_REP_S=0 STOPPED=""
for w in $WORKLOADS; do
	[ -z "$STOPPED" ] || break
	kind=$(kind_of "$w")
	W_REP_S=0 # this workload's last repetition, seconds
	while :; do
		read -r -a todo <<<"$(modes_of "$w")"
		[ ${#todo[@]} -gt 0 ] || break
		# A repetition's time: this workload's last one, else twice the
		# last one of another (a bigger preset), at least 30 s.
		est=$W_REP_S
		if [ "$est" -eq 0 ]; then est=$((2 * LAST_REP_S)); [ "$est" -ge 30 ] || est=30; fi
		if [ "$BUDGET_S" -gt 0 ] && [ $((SECONDS - T_START + est + est / 4)) -gt "$BUDGET_S" ]; then
			STOPPED="$w (budget ${BUDGET_S}s: a repetition takes about ${est}s)"
			break
		fi
		rep_start=$SECONDS
		# Rotate the order so no mode always runs right after base.
		n=${#todo[@]} r=$(done_count "$w" "${todo[0]}")
		order=()
		for ((i = 0; i < n; i++)); do order+=("${todo[$(((i + r) % n))]}"); done
		if [ "$kind" != attach ]; then
			NDONE[$w.base]=$(($(done_count "$w" base) + 1))
			run_mode "$w" base "${NDONE[$w.base]}"
		fi
		for m in "${order[@]}"; do
			NDONE[$w.$m]=$(($(done_count "$w" "$m") + 1))
			if [ "$kind" = attach ]; then run_attach "$w" "$m" "${NDONE[$w.$m]}"; else run_mode "$w" "$m" "${NDONE[$w.$m]}"; fi
		done
		W_REP_S=$((SECONDS - rep_start)) LAST_REP_S=$((SECONDS - rep_start))
	done
done
[ -z "$WANT_RUNTIME" ] || meta cuda_runtime "$WANT_RUNTIME"

# ---- what is left, the table ----------------------------------------------
left=0 total=0
for w in $WORKLOADS; do
	kind=$(kind_of "$w") list=$MODES
	[ "$kind" = attach ] && list=$ATTACH_MODES
	for m in $list; do
		[[ $m == hand_* ]] && [ "$kind" != vec ] && continue
		want=$(reps_of "$m") c=$(done_count "$w" "$m")
		total=$((total + want))
		[ "$c" -lt "$want" ] && left=$((left + want - c))
	done
done
HOST=$(ls "$RESULTS"/host-decode-*.txt 2>/dev/null | sort | tail -1)
DRAIN=${DRAIN_RATE:-}
python3 scripts/gpu/bench_table.py "$TSV" -o "$MD" ${HOST:+--host "$HOST"} ${DRAIN:+--drain "$DRAIN"} --brief >"$T/brief" 2>"$T/render.err"
rrc=$?
cat "$T/brief"
[ $rrc = 0 ] || { echo "table-bench: rendering $MD failed:"; cat "$T/render.err"; }
if [ -n "$MIRROR" ]; then
	cp -f "$TSV" "$MIRROR" && { [ ! -f "$MD" ] || cp -f "$MD" "$OUT/bench-results/"; }
fi
targets=$(grep -a '^targets:' "$T/brief" | tail -1)
state="complete"
[ $left -eq 0 ] || state="INCOMPLETE: $left of $total runs of the chosen workloads still to do${STOPPED:+, stopped at $STOPPED}; run again to continue"
echo "SUMMARY: this call $RUNS_OK runs ok, $RUNS_FAILED failed${FAILED_LIST:+ ($(echo $FAILED_LIST | cut -c1-120))} | ${targets:-targets: not rendered} | $state | $MD"
[ $RUNS_FAILED -eq 0 ] && [ $rrc -eq 0 ]
