#!/usr/bin/env bash
# Issue 58, step 1: what the Compute Sanitizer API can do for gpubpf, measured
# on the GPU machine with a throwaway library (scripts/gpu/sanprobe/), before
# anything is built on it. Not a check: a measurement whose log is read by a
# person (docs/sanitizer.md records what it said).
#   scripts/gpu/sanitizer-probe.sh [LOGDIR]
set -uo pipefail
cd "$(dirname "$0")/sanprobe"
LOG=${1:-${OUT:-/tmp}/sanprobe}
mkdir -p "$LOG"
C=${CUDA_HOME:-/usr/local/cuda}
S=$C/compute-sanitizer
B=$(mktemp -d /tmp/sanprobe.XXXX)
CAP=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
{
	echo "sanitizer-probe: $(date -u +%Y-%m-%dT%H:%MZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1) sm_$CAP"
	nvcc --version | grep release
	ls -l $S/libsanitizer-public.so
} | tee "$LOG/build.txt"
set -x
nvcc --fatbin --keep-device-functions -Xptxas --compile-as-tools-patch -gencode arch=compute_$CAP,code=sm_$CAP \
	-I$S/include patches.cu -o $B/patches.fatbin &&
	nvcc -ptx --keep-device-functions -arch=compute_$CAP -I$S/include patches.cu -o $B/patches.ptx &&
	gcc -shared -fPIC -O2 -Wall -I$C/include -I$S/include sanprobe.c -o $B/libsanprobe.so \
		-L$S -lsanitizer-public -L$C/lib64/stubs -lcuda -L$C/lib64 -lnvJitLink -lpthread \
		-Wl,-rpath,$S -Wl,-rpath,$C/lib64 &&
	nvcc -O2 -gencode arch=compute_$CAP,code=sm_$CAP -I$C/extras/CUPTI/include sanbench.cu -o $B/sanbench \
		-L$C/extras/CUPTI/lib64 -lcupti -Xlinker -rpath,$C/extras/CUPTI/lib64 -ldl -lpthread >>"$LOG/build.txt" 2>&1 || {
	echo "build failed" | tee -a "$LOG/build.txt"
	exit 1
}
set +x
cuobjdump --list-ptx $B/sanbench >>"$LOG/build.txt" 2>&1 && echo "(sanbench ptx listed above: should be none)" >>"$LOG/build.txt"
grep -c "\.func" $B/patches.ptx >>"$LOG/build.txt"
cuobjdump -res-usage $B/patches.fatbin >>"$LOG/build.txt" 2>&1
cp $B/patches.ptx "$LOG/" 2>/dev/null

R=$LOG/runs.txt
: >"$R"
# run NAME ENV... -- CMD...: one process, its RESULT/SANPROBE/CUPTI lines and errors on one record.
run() {
	local name=$1
	shift
	local envs=()
	while [ "$1" != "--" ]; do
		envs+=("$1")
		shift
	done
	shift
	local t0=$SECONDS out rc
	out=$(env "${envs[@]}" timeout 120 "$@" 2>&1)
	rc=$?
	{
		echo "== $name rc=$rc wall=$((SECONDS - t0))s env: ${envs[*]}"
		echo "$out" | grep -E "RESULT|SANPROBE|CUPTI|rror|fault|Abort" | head -12
	} >>"$R"
}
P="SP_PATCH=$B/patches.fatbin"
SB=$B/sanbench
L=$B/libsanprobe.so
# Our compiler's route: PTX -> ptxas --compile-as-tools-patch -> cubin. Which
# ptxas a machine without a toolkit has: Triton's (PyTorch installs Triton).
TP=$(python3 -c 'import triton,os;print(os.path.dirname(triton.__file__))' 2>/dev/null)/backends/nvidia/bin/ptxas
echo "triton ptxas: $TP $($TP --version 2>&1 | tail -1)" >>"$LOG/build.txt"
ptxas --compile-as-tools-patch -arch=sm_$CAP $B/patches.ptx -o $B/patches-tk.cubin >>"$LOG/build.txt" 2>&1
[ -x "$TP" ] && $TP --compile-as-tools-patch -arch=sm_$CAP $B/patches.ptx -o $B/patches-triton.cubin >>"$LOG/build.txt" 2>&1
ptxas -arch=sm_$CAP $B/patches.ptx -o $B/patches-plain.cubin >>"$LOG/build.txt" 2>&1
ls -l $B/*.cubin >>"$LOG/build.txt" 2>&1
# Correctness first: every thread's entry and exit counted (ew's last block
# has 100 threads that return early), outputs identical to base.
run base X=1 -- $SB
run count-enter-exit LD_PRELOAD=$L $P SP_WHERE=enter,exit SP_CB=count -- $SB
run count-mem LD_PRELOAD=$L $P SP_WHERE=mem SP_CB=count -- $SB
run cubin-toolkit-ptxas LD_PRELOAD=$L SP_PATCH=$B/patches-tk.cubin SP_WHERE=enter,exit SP_CB=count -- $SB
run cubin-toolkit-ptxas-mem LD_PRELOAD=$L SP_PATCH=$B/patches-tk.cubin SP_WHERE=mem SP_CB=count -- $SB
run cubin-triton-ptxas LD_PRELOAD=$L SP_PATCH=$B/patches-triton.cubin SP_WHERE=enter,exit SP_CB=count -- $SB
run cubin-plain-ptxas LD_PRELOAD=$L SP_PATCH=$B/patches-plain.cubin SP_WHERE=enter,exit SP_CB=count -- $SB
# When must the subscription happen?
run early-from-main SP_LATE=1 SP_LIB=$L $P SP_WHERE=enter,exit SP_CB=count -- $SB early
run late-after-idle LD_PRELOAD=$L SP_IDLE=1 SP_LIB=$L $P SP_WHERE=enter,exit SP_CB=count -- $SB late
# Beside CUPTI, both orders.
run cupti-alone X=1 -- $SB cupti
run cupti-then-sanitizer SP_LATE=1 SP_LIB=$L $P SP_WHERE=enter,exit SP_CB=count -- $SB cupti early
run sanitizer-then-cupti LD_PRELOAD=$L $P SP_WHERE=enter,exit SP_CB=count -- $SB cupti
run sanitizer-idle-then-cupti LD_PRELOAD=$L SP_IDLE=1 $P -- $SB cupti
# What an idle subscription costs a program nobody traces (longer loops, alternating).
for i in 1 2 3 4 5; do
	run cost-base SB_ITERS=2000 SB_TINY=100000 -- $SB
	run cost-idle LD_PRELOAD=$L SP_IDLE=1 $P SB_ITERS=2000 SB_TINY=100000 -- $SB
	run cost-domains LD_PRELOAD=$L $P SP_WHERE=none SB_ITERS=2000 SB_TINY=100000 -- $SB
done
echo "sanbench done $(date -u +%H:%M:%SZ)" >>"$R"
T="python3 $PWD/san_torch.py 300"
export PYTHONUNBUFFERED=1
for i in 1 2 3; do
	run torch-base X=1 -- $T
	run torch-idle LD_PRELOAD=$L SP_IDLE=1 $P -- $T
	run torch-enter-count LD_PRELOAD=$L SP_LIB=$L $P SP_WHERE=enter SP_CB=count -- $T
	run torch-enter-exit-count LD_PRELOAD=$L SP_LIB=$L $P SP_WHERE=enter,exit SP_CB=count -- $T
done
run torch-late-after-idle LD_PRELOAD=$L SP_IDLE=1 SP_LIB=$L $P SP_WHERE=enter,exit SP_CB=count -- $T late
echo "all done $(date -u +%H:%M:%SZ)" >>"$R"
cat "$R"
