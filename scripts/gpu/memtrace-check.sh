#!/usr/bin/env bash
# GPU check of memory-access probes (issue 14): bpf/examples/mem_trace_bpfel.o
# (SEC("kprobe/__memcapture"), every kernel) under `gpubpf run -j` on
# samples/vec_add, static and -cudart shared (samples/bin/vec_add,
# samples/bin/vec_add_shared):
#   - counts exact. Per launch, from the kernel's own PTX (cuobjdump -ptx of
#     the binary; its ld/ldu, st, atom/red instructions as the memory pass
#     counts them: L, S, A) and the launch shape: vectorAdd's grid-stride
#     loop hands every element i < n (d_N = n) to exactly one thread, which
#     loads A[i] and B[i] and stores C[i] (L/S = 2 loads per store, however
#     nvcc unrolled the loop); threads past n skip the loop; thread 0 of
#     every block does the atomicAdd on d_calls (A = 1). So loads = L/S * n,
#     stores = n, atomics = A * BLOCKS, times ITERATIONS + 1 launches (vec_add
#     warms up once). The d_N/d_scale reads are __constant__: not counted.
#     Also: the sizes map (4-byte loads and stores, 8-byte atomics), nothing
#     under another kernel index, every launch instrumented;
#   - the app's output equals the untraced run's (timings masked);
#   - cost on bpftime's presets tiny/small/medium: CUDA-event kernel time of
#     the traced run as a ratio to the untraced run in the same invocation
#     (runs interleaved, median of REPS), counts checked in those runs too.
# Prints "SUMMARY: ..." last.
#   memtrace-check.sh --selftest   checks the helpers on this machine (no GPU)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
UTIL=scripts/gpu/memtrace_util.py
if [ "${1:-}" = --selftest ]; then
	python3 "$UTIL" selftest pkg/runtime/instrument/testdata
	exit
fi
export PATH=$PWD/bin:$PATH
OBJ=bpf/examples/mem_trace_bpfel.o
KERNEL=_Z9vectorAddPKfS0_Pfi
LOGS=${GPUBPF_GPU_LOGS:-${OUT:-/tmp}/gpu-check}/memtrace
rm -rf "$LOGS"; mkdir -p "$LOGS"
REPS=${REPS:-3}
pass=0 fail=0
ok() { echo "ok   $*"; pass=$((pass + 1)); }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }
for f in bin/gpubpf samples/bin/vec_add samples/bin/vec_add_shared; do
	[ -x "$f" ] || { echo "SUMMARY: FAIL missing $f (make gpu-bundle on a Go machine, make -C samples here)"; exit 1; }
done
CUOBJDUMP=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
[ -x "$CUOBJDUMP" ] || { echo "SUMMARY: FAIL cuobjdump not found (CUDA toolkit)"; exit 1; }

# run NAME CMD...: one bounded run, stdout/stderr/rc kept under $LOGS.
run() {
	local name=$1; shift
	timeout --kill-after=5 180 "$@" >"$LOGS/$name.out" 2>"$LOGS/$name.err"
	echo $? >"$LOGS/$name.rc"
}
rc() { cat "$LOGS/$1.rc"; }
kus() { grep -ao 'Average CUDA-event kernel time: [0-9.]*' "$LOGS/$1.out" | awk '{print $NF}'; }

# Per-launch expectations from a binary's PTX: "LOADS_PER_ELEMENT ATOMICS_PER_BLOCK", or a reason.
declare -A PER
model() {
	local v=$1
	"$CUOBJDUMP" -ptx "samples/bin/$v" >"$LOGS/$v.ptx" 2>"$LOGS/$v.ptx.err" || { echo "cuobjdump -ptx failed: $(tail -1 "$LOGS/$v.ptx.err")"; return; }
	local c
	c=$(python3 "$UTIL" ptxcount "$LOGS/$v.ptx" $KERNEL) || { echo "no $KERNEL in its PTX"; return; }
	set -- $c
	if [ "$2" -gt 0 ] && [ $(($1 % $2)) = 0 ] && [ $(($1 / $2)) = 2 ] && [ "$3" = 1 ]; then
		echo "$(($1 / $2)) $3 (PTX: $1 loads, $2 stores, $3 atomic)"
	else
		echo "PTX has $1 loads, $2 stores, $3 atomics: not 2 loads per store and 1 atomic, as vec_add.cu's kernel should be"
	fi
}
for v in vec_add vec_add_shared; do
	m=$(model $v)
	case $m in
	[0-9]*) PER[$v]=${m%% (*}; ok "$v: per element ${m%% *} loads and 1 store, ${PER[$v]#* } atomic per block (${m#* (}" ;;
	*) bad "$v: $m" ;;
	esac
done

# check NAME VARIANT N ITER THREADS BLOCKS: the traced run NAME's counts
# against the model; echoes a line and counts ok/bad.
check_counts() {
	local name=$1 v=$2 n=$3 iter=$4 thr=$5 blk=$6
	[ -n "${PER[$v]:-}" ] || { bad "$name: no model for $v"; return; }
	local lpe apb launches
	read -r lpe apb <<<"${PER[$v]}"
	launches=$((iter + 1))
	local wl=$((lpe * n * launches)) ws=$((n * launches)) wa=$((apb * blk * launches))
	local got
	got=$(python3 "$UTIL" counts "$LOGS/$name.out" $KERNEL)
	local want="$wl $ws $wa none atomic/8=$wa,load/4=$wl,store/4=$ws"
	local il
	il=$(grep -ao '"instrumented_launches":[0-9]*' "$LOGS/$name.out" | tail -1 | cut -d: -f2)
	if [ "$(rc "$name")" = 0 ] && [ "$got" = "$want" ] && [ "$il" = "$launches" ]; then
		ok "$name: $n elements x $launches launches ($thr x $blk threads): loads $wl stores $ws atomics $wa, sizes exact, $il launches instrumented"
	else
		bad "$name: rc $(rc "$name"), got [$got] instrumented launches ${il:-?}; want [$want] $launches"
		tail -n 5 "$LOGS/$name.err"
	fi
}

# same REF GOT: the app's lines of the traced run are the untraced run's.
same() {
	if python3 scripts/gpu/faults_util.py same "$LOGS/$1.out" "$LOGS/$2.out" --sub >"$LOGS/$2.same" 2>&1; then
		ok "$2: app output as untraced ($(grep -ao 'RESULT vec_add[a-z_]* [a-z]*' "$LOGS/$2.out" | head -1))"
	else
		bad "$2: app output differs from the untraced run: $(cat "$LOGS/$2.same")"
	fi
}

# ---- exact counts: threads that skip the loop, several strides, odd n -----
for v in vec_add vec_add_shared; do
	for shape in "1000 3 256 8" "5003 2 128 4" "32 10 32 1"; do
		read -r n iter thr blk <<<"$shape"
		tag=$v-$n-$thr-$blk
		run base-$tag samples/bin/$v $n $iter $thr $blk
		grep -aq "RESULT vec_add[a-z_]* ok" "$LOGS/base-$tag.out" || { bad "$tag: the untraced run failed (rc $(rc base-$tag))"; continue; }
		run mt-$tag gpubpf run -j $OBJ -- samples/bin/$v $n $iter $thr $blk
		check_counts mt-$tag $v $n $iter $thr $blk
		same base-$tag mt-$tag
	done
done

# ---- -k narrows it: only vectorAdd, same counts -------------------------------
run mt-k gpubpf run -j -k vectorAdd $OBJ -- samples/bin/vec_add 1000 3 256 8
check_counts mt-k vec_add 1000 3 256 8

# ---- the text view names the kernel behind index 0 ---------------------------
run mt-text gpubpf run $OBJ -- samples/bin/vec_add 1000 3 256 8
if grep -aq '{kernel=0 kind=load}: ' "$LOGS/mt-text.out" && grep -aq '  0: vectorAdd (_Z9vectorAddPKfS0_Pfi)' "$LOGS/mt-text.out" &&
	grep -aq 'memory-access program(s) at every global load/store/atomic of every kernel' "$LOGS/mt-text.err"; then
	ok "text view: counts by {kernel, kind}, index 0 named vectorAdd, start line says where it runs"
else
	bad "text view"; tail -n 12 "$LOGS/mt-text.out"
fi

# ---- cost on bpftime's presets ------------------------------------------------
. scripts/gpu/lib.sh # med
PRESETS=${PRESETS:-"tiny:32 10000 32 1;small:1000 10000 256 4;medium:10000 1000 256 40"}
declare -A K
IFS=';' read -ra PS <<<"$PRESETS"
perf=""
for ps in "${PS[@]}"; do
	name=${ps%%:*} P=${ps#*:}
	for rep in $(seq "$REPS"); do
		run p-$name-base-$rep samples/bin/vec_add $P
		run p-$name-mt-$rep gpubpf run -j $OBJ -- samples/bin/vec_add $P
		K[$name.base]+=" $(kus p-$name-base-$rep)"
		K[$name.mt]+=" $(kus p-$name-mt-$rep)"
	done
	read -r n iter thr blk <<<"$P"
	check_counts p-$name-mt-1 vec_add $n $iter $thr $blk
	b=$(med ${K[$name.base]}) t=$(med ${K[$name.mt]})
	r=$(python3 -c "print(f'{$t/$b:.2f}' if $b > 0 else 'nan')" 2>/dev/null || echo nan)
	echo "perf: $name ($P) untraced ${b} us, mem_trace ${t} us per launch: x$r (CUDA-event kernel time, median of $REPS; runs:${K[$name.base]} |${K[$name.mt]})"
	perf+="$name x$r; "
done

echo "SUMMARY: $pass ok, $fail failed | mem_trace cost: $perf"
[ $fail = 0 ]
