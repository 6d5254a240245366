#!/usr/bin/env bash
# GPU check of the instrumentation passes (issue 4): build vec_add and the
# driver-API harness with nvcc, let ptxinst (Go, prebuilt: CGO_ENABLED=0 go
# build -o .gpu/ptx/ptxinst ./pkg/runtime/instrument/gputest/ptxinst) make
# the instrumented clone from the executable's own fatbin (zstd PTX on
# CUDA 13) with the original module's variable addresses, run both and
# compare. Prints one SUMMARY: line; exit status 0 only on PASS.
set -uo pipefail
cd "$(dirname "$0")/../.."
G=pkg/runtime/instrument/gputest
VEC_ADD=pkg/runtime/fatbin/testdata/vec_add.cu # the kernel of the fatbin fixtures too
PTXINST=${PTXINST:-$PWD/.gpu/ptx/ptxinst}
W=${GPUBPF_PTX_WORK:-$(mktemp -d /tmp/ptx-check.XXXXXX)}
mkdir -p "$W"
if [ ! -x "$PTXINST" ]; then
	echo "SUMMARY: FAIL $PTXINST is missing: build it on a Go machine with CGO_ENABLED=0 go build -o .gpu/ptx/ptxinst ./$G/ptxinst"
	exit 1
fi
if ! command -v nvcc >/dev/null; then
	echo "SUMMARY: FAIL nvcc not found (CUDA toolkit needed to build the harness)"
	exit 1
fi
set -e
nvcc -o "$W/vec_add" "$VEC_ADD"
nvcc -fatbin -o "$W/vec_add.fatbin" "$VEC_ADD"
nvcc -o "$W/ptxcheck" "$G/harness/ptxcheck.c" -L/usr/local/cuda/lib64/stubs -lcuda
set +e
"$W/vec_add" || { echo "SUMMARY: FAIL the uninstrumented vec_add itself failed"; exit 1; }
"$W/ptxcheck" "$W/vec_add.fatbin" "$PTXINST" "$W/vec_add" "$W"
