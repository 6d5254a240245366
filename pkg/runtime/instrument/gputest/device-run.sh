#!/usr/bin/env bash
# Everything issue 4 needs from one GPU-machine call: CUDA 13 fixtures,
# Triton PTX, the driver-API check (scripts/gpu/ptx-check.sh), gpubpf
# kernels on the new binaries, and the ptx/instrument test binaries with
# CUDA 13's ptxas over the new PTX. Results go to $OUT (at most 8 files).
# Needs .gpu/ptx/{ptxinst,gpubpf,ptx.test,instrument.test} built on a Go
# machine with CGO_ENABLED=0.
set -u
cd "$(dirname "$0")/../../../.."
ROOT=$PWD
OUT=${OUT:-/tmp/ptx-out}
W=/tmp/gpubpf-ptx
mkdir -p "$OUT" "$W/fx" "$W/ptx13"
{
	date -u
	nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
	nvcc --version | tail -2
	bash pkg/runtime/instrument/gputest/build-fixtures.sh "$W/fx"
	cp "$W"/fx/*.ptx "$W/ptx13/"
	timeout 150 python3 pkg/runtime/instrument/gputest/triton_ptx.py "$W/ptx13"
} >"$OUT/build.log" 2>&1
echo "build rc=$? $(tail -1 "$OUT/build.log")"
GPUBPF_PTX_WORK=$W/check bash scripts/gpu/ptx-check.sh >"$OUT/ptx-check.log" 2>&1
echo "ptx-check rc=$?"
tail -12 "$OUT/ptx-check.log"
for f in "$W"/fx/*cuda13*; do .gpu/ptx/gpubpf kernels -v "$f"; done >"$OUT/kernels13.txt" 2>&1
echo "kernels rc=$?"
(cd pkg/runtime/ptx && GPUBPF_PTX_FIXTURES=$W/ptx13 CI=true "$ROOT/.gpu/ptx/ptx.test" -test.v) >"$OUT/ptx-test.log" 2>&1
echo "ptx.test rc=$? $(grep -E '^(ok|FAIL|PASS)' "$OUT/ptx-test.log" | tail -1)"
(cd pkg/runtime/instrument && GPUBPF_PTX_FIXTURES=$W/ptx13 CI=true "$ROOT/.gpu/ptx/instrument.test" -test.v) >"$OUT/instrument-test.log" 2>&1
echo "instrument.test rc=$? $(grep -E '^(ok|FAIL|PASS)' "$OUT/instrument-test.log" | tail -1)"
grep -E -- '--- (FAIL|SKIP)' "$OUT"/*-test.log | head -20
tar -C "$W" -czf "$OUT/fx.tgz" fx ptx13 check/clone.ptx 2>/dev/null
ls -la "$OUT"
