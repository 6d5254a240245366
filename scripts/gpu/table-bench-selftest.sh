#!/usr/bin/env bash
# table-bench.sh --selftest: its plumbing on a machine without a GPU. Stub
# programs (shell scripts in a temporary directory) stand in for the
# samples and the tools and print the lines the real ones print; their
# numbers are made up, which is why they never leave the temporary
# directory. Checked: a row per run, failed runs recorded as failed (an app
# RESULT FAIL, a tool that instrumented nothing, a wrong shared-map sum),
# the counter's per-thread map dump not kept, the attach timings, resuming
# a results file, the time budget, unknown workloads refused, and the
# rendered table. Prints "selftest: ok" last when all hold.
set -uo pipefail
export LC_ALL=C
cd "$(dirname "$0")/../.." || exit 1
ROOT=$PWD
S=$(mktemp -d /tmp/table-bench-selftest.XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$S"' EXIT
mkdir -p "$S/samples" "$S/tools" "$S/results" "$S/logs"
fails=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }

# ---- stub samples ---------------------------------------------------------
# STUB_FACTOR (set by the stub tools) scales the times; STUB_APP_FAIL=1
# makes the app print RESULT FAIL.
cat >"$S/samples/common.sh" <<'EOF'
f=${STUB_FACTOR:-1}
jit() { awk -v b="$1" -v f="$f" -v r="$RANDOM" 'BEGIN { printf "%.2f", b * f * (0.99 + 0.02 * r / 32767) }'; }
echo "device 0: Stub GPU sm_90, runtime 13.0, driver 13.0"
finish() {
	echo "stub launches=$1 threads=$2"
	if [ "${STUB_APP_FAIL:-0}" = 1 ]; then echo "RESULT $3 FAIL reason=stub"; exit 1; fi
	echo "RESULT $3 ok stub=1"
}
EOF
cat >"$S/samples/vec_add" <<'EOF'
#!/usr/bin/env bash
. "$(dirname "$0")/common.sh"
name=$(basename "$0")
case ${5:-} in globaltimer) f=$(awk -v f="$f" 'BEGIN{print f*1.01}') ;; counter) f=$(awk -v f="$f" 'BEGIN{print f*1.05}') ;;
ring) f=$(awk -v f="$f" 'BEGIN{print f*1.2}') ;; shared) f=$(awk -v f="$f" 'BEGIN{print f*1.3}') ;; esac
# About 5 us of wall time per iteration, so that a long run can be attached to.
sleep "$(awk -v n="$2" 'BEGIN { s = n * 5e-6; print (s > 3 ? 3 : s) }')"
echo "Average kernel time: $(jit 10) us (host-timed launch + cudaDeviceSynchronize, $2 iterations)"
echo "Average CUDA-event kernel time: $(jit 4) us"
finish $(($2 + 1)) $(($3 * $4)) "$name"
EOF
cp "$S/samples/vec_add" "$S/samples/vec_add_ideal"
cat >"$S/samples/compute_bound" <<'EOF'
#!/usr/bin/env bash
. "$(dirname "$0")/common.sh"
echo "kernel time (CUDA events): $(jit 300) us per launch, 1.0 GFLOP/s"
echo "host-timed: $(jit 310) us per launch (the launches and cudaDeviceSynchronize)"
finish $(($4 + 1)) $(($2 * $3)) compute_bound
EOF
cat >"$S/samples/launch_heavy" <<'EOF'
#!/usr/bin/env bash
. "$(dirname "$0")/common.sh"
rate=$(awk -v f="$f" 'BEGIN { printf "%.0f", 400000 / f }')
echo "stub launches=$(($1 + 1)) threads=$4"
[ "${STUB_APP_FAIL:-0}" = 1 ] && { echo "RESULT launch_heavy FAIL reason=stub"; exit 1; }
echo "RESULT launch_heavy ok launches=$1 streams=$2 launches_per_s=$rate enqueue_us=2.00"
EOF
cat >"$S/samples/many_kernels" <<'EOF'
#!/usr/bin/env bash
. "$(dirname "$0")/common.sh"
echo "READY pid=$$ kernels=200"
end=$(awk -v s="$1" 'BEGIN { print int(s * 20) }')
for ((i = 0; i < end; i++)); do
	[ -n "${MANY_KERNELS_STOP:-}" ] && [ -e "$MANY_KERNELS_STOP" ] && break
	sleep 0.05
done
finish 10 32 many_kernels
EOF

# ---- stub tools -----------------------------------------------------------
# gpubpf run [-j] [-v] [--summary] [-P NAME]... [-d S] OBJ (-- CMD... | -p PID)
cat >"$S/tools/gpubpf" <<'EOF'
#!/usr/bin/env bash
[ "${1:-}" = --version ] && { echo "gpubpf version stub"; exit 0; }
shift # run
v=0 pid="" obj=""
while [ $# -gt 0 ]; do
	case $1 in
	-v) v=1 ;; -j | --summary) ;; -P | -d) shift ;; -p) pid=$2; shift ;;
	--) shift; break ;; *) obj=$1 ;;
	esac
	shift
done
o=$(basename "$obj" .bpf.o)
case $o in bench_empty) f=1.005 ;; bench_globaltimer) f=1.02 ;; bench_counter) f=1.08 ;; bench_ring) f=1.3 ;; *) f=1.5 ;; esac
[ "${STUB_FAIL:-}" = "$o" ] && export STUB_APP_FAIL=1
summary() { echo "{\"first_attach_ms\":$2,\"instrumented_launches\":$1,\"jit_ms\":7.5,\"records\":$3,\"records_dropped_gpu\":0,\"records_produced\":$3,\"type\":\"summary\"}"; }
if [ -n "$pid" ]; then
	sleep 0.03
	[ $v = 1 ] && echo "process $pid: manyK instrumented (200 handle(s), JIT 7.5 ms, 0 variable(s) aliased)" >&2
	sleep 0.1
	summary 500 21.0 0
	exit 0
fi
[ $v = 1 ] && { sleep 0.02; echo "process 4242: vectorAdd instrumented (1 handle(s), JIT 7.5 ms, 0 variable(s) aliased)" >&2; }
out=$(STUB_FACTOR=$f "$@")
rc=$?
echo "$out"
n=$(echo "$out" | grep -o 'stub launches=[0-9]*' | cut -d= -f2)
t=$(echo "$out" | grep -o 'threads=[0-9]*' | head -1 | cut -d= -f2)
# an instrumentation that saw nothing
[ "${STUB_ZERO:-}" = "$o" ] && n=0
case $o in
bench_counter) for i in 1 2 3; do echo "{\"device\":0,\"key\":\"thread $i key 0\",\"map\":\"counters\",\"pid\":1,\"type\":\"map\",\"value\":\"{count: 1}\"}"; done ;;
bench_shared)
	sum=$((n * t)); [ "${STUB_BADSUM:-0}" = 1 ] && sum=$((sum - 1))
	echo "{\"device\":0,\"key\":\"0\",\"map\":\"shared_counts\",\"pid\":0,\"type\":\"map\",\"value\":\"$((sum - 5))\"}"
	echo "{\"device\":0,\"key\":\"7\",\"map\":\"shared_counts\",\"pid\":0,\"type\":\"map\",\"value\":\"5\"}" ;;
esac
summary "${n:-0}" 350.0 $((${n:-0} * ${t:-0}))
exit $rc
EOF
cat >"$S/tools/threadhist" <<'EOF'
#!/usr/bin/env bash
# TOOL [flags] -- CMD: the app's output, then the account line on stderr.
while [ $# -gt 0 ] && [ "$1" != -- ]; do shift; done
shift
t=$(basename "$0")
[ "${STUB_FAIL:-}" = "$t" ] && export STUB_APP_FAIL=1
out=$(STUB_FACTOR=1.1 "$@")
rc=$?
echo "$out"
n=$(echo "$out" | grep -o 'stub launches=[0-9]*' | cut -d= -f2)
if [ "$t" = gpuevent_snoop ]; then echo "gpuevent_snoop: 1.00 probe hits per launch" >&2
else echo "$t: 1 kernels instrumented, ${n:-0} instrumented launches" >&2; fi
exit $rc
EOF
for t in kernelretsnoop kernel_trace launchlate gpuevent_snoop; do cp "$S/tools/threadhist" "$S/tools/$t"; done
chmod +x "$S"/samples/* "$S"/tools/*
: >"$S/agent.so"

# tb ENV...: table-bench.sh on the stubs; its output in $S/tb.out, its
# status in $rc.
tb() {
	env -u OUT TABLE_BENCH_STUBS=1 TABLE_BENCH_SAMPLES="$S/samples" TABLE_BENCH_TOOLS="$S/tools" \
		TABLE_BENCH_AGENT="$S/agent.so" BENCH_RESULTS="$S/results" GPUBPF_GPU_LOGS="$S/logs" \
		BENCH_DEVICE=Stub-GPU BENCH_DATE=2000-01-01 LIMIT=30 "$@" bash "$ROOT/scripts/gpu/table-bench.sh" >"$S/tb.out" 2>&1
	rc=$?
}
TSV=$S/results/2000-01-01-Stub-GPU.tsv
MD=$S/results/2000-01-01-Stub-GPU.md
rows() { # WORKLOAD MODE [STATUS]: rows in the file
	awk -F'\t' -v w="$1" -v m="$2" -v s="${3:-}" '!/^#/ && $3 == w && $5 == m && (s == "" || $7 == s)' "$TSV" | wc -l
}

# 1. Two repetitions of everything; the ring probe's app fails, threadhist
#    instruments nothing, the shared map sums wrong on compute_bound.
tb REPS=2 BUDGET_S=0 WORKLOADS="tiny compute_bound launch_heavy attach" STUB_FAIL=bench_ring
[ $rc = 1 ] && ok "failed runs: exit 1" || bad "failed runs: exit $rc, want 1"
last=$(tail -1 "$S/tb.out")
[[ $last == "SUMMARY: "* ]] && ok "last line: ${last:0:150}" || bad "last line is not SUMMARY: $last"
[[ $last == *complete* ]] && [[ $last != *INCOMPLETE* ]] && ok "complete" || bad "not complete: $last"
for m in base idle empty globaltimer counter ring shared threadhist kernelretsnoop kernel_trace launchlate gpuevent_snoop hand_globaltimer hand_counter hand_ring hand_shared; do
	[ "$(rows tiny $m)" = 2 ] || bad "tiny $m: $(rows tiny $m) rows, want 2"
done
[ "$(rows compute_bound hand_counter)" = 0 ] && [ "$(rows compute_bound counter)" = 2 ] && ok "hand-written modes on vec_add presets only" || bad "compute_bound hand rows $(rows compute_bound hand_counter)"
[ "$(rows tiny ring failed)" = 2 ] && [ "$(rows launch_heavy ring failed)" = 2 ] && ok "app RESULT FAIL recorded as failed" || bad "ring failed rows: $(rows tiny ring failed)"
[ "$(rows tiny counter ok)" = 2 ] && ok "counter rows ok" || bad "counter rows: $(grep -a counter "$TSV" | head -2)"
grep -aq '"map":"counters"' "$TSV" "$S/logs/table-bench/"* 2>/dev/null && bad "per-thread map dump kept" || ok "per-thread map dump dropped"
grep -aq 'tiny-ring-1' <(ls "$S/logs/table-bench/") && ok "failed run's log kept" || bad "no log of the failed run in $S/logs/table-bench: $(ls "$S/logs/table-bench/")"
k=$(awk -F'\t' '!/^#/ && $3 == "tiny" && $5 == "counter" { print $8; exit }' "$TSV")
[ -n "$k" ] && ok "tiny counter kernel_us $k" || bad "tiny counter: no kernel_us"
r=$(awk -F'\t' '!/^#/ && $3 == "launch_heavy" && $5 == "idle" { print $10; exit }' "$TSV")
[ -n "$r" ] && ok "launch_heavy rate $r" || bad "launch_heavy idle: no rate"
for w in attach_vec_add attach_many_kernels; do
	for m in cmd p; do
		a=$(awk -F'\t' -v w=$w -v m=$m '!/^#/ && $3 == w && $5 == m && $7 == "ok" { print $11 "/" $12 "/" $13 }' "$TSV" | head -1)
		[[ $a =~ ^[0-9.]+/[0-9.]+/7.5$ ]] && ok "$w $m: exec->active/first_attach/jit $a ms" || bad "$w $m: '$a' ($(grep -a "$w	[^	]*	$m" "$TSV" | head -1))"
	done
done
sh=$(awk -F'\t' '!/^#/ && $3 == "tiny" && $5 == "shared" { print $15; exit }' "$TSV")
[[ $sh == *"shared map sum 320032"* ]] && ok "shared map sum checked: $sh" || bad "shared note: $sh (want 320032 = 10001 launches x 32 threads)"
[ -s "$MD" ] && ok "table rendered" || bad "no $MD"
for want in "## tiny (32 10000 32 1)" "## launch_heavy" "## Attach" "probe / hand-written" "FAILED" "## Targets" "empty probe <= 1.02x" "| counter: per-thread counter probe |"; do
	grep -qF -- "$want" "$MD" || bad "table lacks '$want'"
done
grep -a '^target' "$S/tb.out" | head -3

# 2. The same call again: every (workload, mode) has its rows, nothing runs.
n0=$(grep -vc '^#' "$TSV")
tb REPS=2 BUDGET_S=0 WORKLOADS="tiny compute_bound launch_heavy attach"
n1=$(grep -vc '^#' "$TSV")
[ $rc = 0 ] && [ "$n0" = "$n1" ] && ok "resume: nothing left to run, exit 0" || bad "resume: exit $rc, rows $n0 -> $n1"

# 3. A budget too small for one repetition stops at once; the next call
#    without one does the third repetition only.
tb REPS=3 BUDGET_S=1 WORKLOADS="tiny"
[ $rc = 0 ] && grep -q 'INCOMPLETE' "$S/tb.out" && [ "$(rows tiny counter)" = 2 ] && ok "budget: stopped before a repetition, INCOMPLETE" || bad "budget: exit $rc, counter rows $(rows tiny counter); $(tail -1 "$S/tb.out")"
tb REPS=3 BUDGET_S=0 WORKLOADS="tiny" MODES="counter hand_counter" STUB_ZERO=bench_counter
[ "$(rows tiny counter)" = 3 ] && [ "$(rows tiny hand_counter)" = 3 ] && [ "$(rows tiny ring)" = 2 ] && [ "$(rows tiny base)" = 3 ] &&
	ok "resume: one more repetition of the modes chosen" || bad "resume: counter $(rows tiny counter) hand $(rows tiny hand_counter) ring $(rows tiny ring) base $(rows tiny base)"
[ $rc = 1 ] && [ "$(rows tiny counter failed)" = 1 ] && grep -aq 'no instrumented launch' "$TSV" && ok "a tool that instrumented nothing: failed" || bad "zero instrumented launches: exit $rc, failed rows $(rows tiny counter failed)"

# REPS_TOOLS: the tools' repetitions apart from the others'.
tb REPS=1 REPS_TOOLS=2 BUDGET_S=0 WORKLOADS="medium" MODES="counter threadhist"
[ $rc = 0 ] && [ "$(rows medium counter)" = 1 ] && [ "$(rows medium threadhist)" = 2 ] && [ "$(rows medium base)" = 2 ] &&
	ok "REPS_TOOLS: 1 counter, 2 threadhist, 2 untraced runs" || bad "REPS_TOOLS: exit $rc, counter $(rows medium counter) threadhist $(rows medium threadhist) base $(rows medium base)"

# 4. A wrong shared-map sum fails the run. With $OUT set, the file and
#    the table are copied there (each row as it is made).
mkdir -p "$S/out"
tb REPS=1 BUDGET_S=0 WORKLOADS="small" MODES="shared" STUB_BADSUM=1 OUT="$S/out"
[ $rc = 1 ] && [ "$(rows small shared failed)" = 1 ] && ok "wrong shared-map sum: failed" || bad "bad sum: exit $rc, $(rows small shared failed) failed rows"
cmp -s "$TSV" "$S/out/bench-results/$(basename "$TSV")" && cmp -s "$MD" "$S/out/bench-results/$(basename "$MD")" &&
	ok "rows and table copied to \$OUT/bench-results" || bad "\$OUT/bench-results: $(ls "$S/out/bench-results" 2>&1)"

# 5. Unknown names are refused before anything runs.
tb WORKLOADS="tiny huge"
[ $rc = 1 ] && grep -q "unknown workload 'huge'" "$S/tb.out" && ok "unknown workload refused" || bad "unknown workload: exit $rc"
tb WORKLOADS="tiny" MODES="counter nonsense"
[ $rc = 1 ] && grep -q "unknown mode 'nonsense'" "$S/tb.out" && ok "unknown mode refused" || bad "unknown mode: exit $rc"

# 6. The renderer reads the file back the same (merging a copy adds nothing).
cp "$TSV" "$S/copy.tsv"
python3 "$ROOT/scripts/gpu/bench_table.py" "$TSV" "$S/copy.tsv" -o "$S/merged.md" &&
	diff <(grep -v '^Made by\|^- Invocations\|^  - `' "$MD") <(grep -v '^Made by\|^- Invocations\|^  - `' "$S/merged.md") >"$S/merged.diff" &&
	ok "merging a copy of the rows changes nothing" || bad "merged table differs: $(head -c 1500 "$S/merged.diff")"

if [ $fails = 0 ]; then echo "selftest: ok"; else echo "selftest: $fails FAILED (table-bench output: below)"; tail -30 "$S/tb.out"; exit 1; fi
