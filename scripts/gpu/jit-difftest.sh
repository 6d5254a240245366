#!/usr/bin/env bash
# GPU half of the eBPF -> PTX compiler's differential test (issue 3).
#
# Run on the GPU machine from the repository root, as root, with the test
# binaries built elsewhere (no Go there):
#   CGO_ENABLED=0 go test -c -o .gpu/jit/difftest.test ./pkg/runtime/jit/difftest
#   CGO_ENABLED=0 go test -c -o .gpu/jit/jit.test ./pkg/runtime/jit
# It builds the CUDA harness with nvcc, runs GPUBPF_DIFFTEST_N (default
# 10000) generated programs in the Linux kernel and on the GPU, the
# multi-threaded map tests, and the ptxas tests against this CUDA, and prints
#   difftest: N programs, M mismatches
set -euo pipefail
N=${GPUBPF_DIFFTEST_N:-10000}
BIN=${GPUBPF_JIT_BIN:-.gpu/jit}
WORK=${OUT:-$(mktemp -d)}
mkdir -p "$WORK"
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
"$NVCC" -O2 -o "$WORK/harness" pkg/runtime/jit/difftest/harness.cu -lcuda
export GPUBPF_DIFFTEST_HARNESS="$WORK/harness" GPUBPF_DIFFTEST_N="$N" GPUBPF_DIFFTEST_DUMP="$WORK"
export GPUBPF_CUDA_BIN=${GPUBPF_CUDA_BIN:-$(dirname "$NVCC")}
rc=0
"$BIN/difftest.test" -test.run 'TestDifferential|TestGPUMaps|TestProbeRead' -test.v -test.timeout 250s >"$WORK/difftest.log" 2>&1 || rc=$?
grep -E '^difftest:|^(---|ok|FAIL|PASS)|harness:|gpumaps_test|kernel side|compile:|module 0:' "$WORK/difftest.log" | cut -c1-300 || true
if [ "$rc" != 0 ]; then
	grep -B2 -A30 -E 'differs|Error|error' "$WORK/difftest.log" | head -150 || true
fi
if [ -x "$BIN/jit.test" ]; then
	# Like go test: run in the package directory (its tests read ../../../bpf).
	bin=$(cd "$BIN" && pwd)/jit.test
	(cd pkg/runtime/jit && "$bin" -test.v) >"$WORK/jit.log" 2>&1 || rc=$?
	grep -E '^(--- FAIL|ok|FAIL|PASS)|empty probe|sass' "$WORK/jit.log" | head -40 || true
fi
exit "$rc"
