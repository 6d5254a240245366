#!/usr/bin/env bash
# Builds the fatbin/PTX fixtures with the nvcc on PATH into DIR (default
# $OUT/fx): small executables and libraries with host symbols stripped, a
# raw fatbin, PTX files, and cuobjdump's listing of each for comparison.
# Used on the GPU machine (CUDA 13) to refresh pkg/runtime/fatbin/testdata.
set -euo pipefail
cd "$(dirname "$0")"
D=${1:-${OUT:-/tmp}/fx}
mkdir -p "$D"
V=$(nvcc --version | grep -o 'release [0-9]*' | grep -o '[0-9]*')
S=cuda$V
F=../../fatbin/testdata
nvcc -cudart shared -o "$D/vec_add_default_$S" $F/vec_add.cu
nvcc -cudart shared -arch=sm_90 -o "$D/vec_add_sm90_$S" $F/vec_add.cu
nvcc -cudart shared -gencode arch=compute_90,code=sm_90 -o "$D/vec_add_sm90sass_$S" $F/vec_add.cu
nvcc -cudart shared -arch=sm_90 -o "$D/multi_sm90_$S" $F/multi.cu
nvcc -o "$D/vec_add_static_$S" $F/vec_add.cu
nvcc -shared -Xcompiler -fPIC -cudart shared -o "$D/libmulti_$S.so" $F/multi.cu
nvcc -rdc=true -arch=sm_90 -c -o "$D/multi_rdc_$S.o" $F/multi.cu
nvcc -fatbin -arch=sm_90 -o "$D/vec_add_$S.fatbin" $F/vec_add.cu
nvcc -ptx -arch=sm_90 -o "$D/vec_add_$S.ptx" $F/vec_add.cu
nvcc -ptx -arch=sm_90 -o "$D/multi_$S.ptx" $F/multi.cu
for f in "$D"/vec_add_default_$S "$D"/vec_add_sm90_$S "$D"/vec_add_sm90sass_$S "$D"/multi_sm90_$S "$D"/vec_add_static_$S "$D"/libmulti_$S.so; do
	strip "$f"
done
for f in "$D"/*_$S "$D"/*_$S.so "$D"/*_$S.o "$D"/*.fatbin; do
	echo "== $(basename "$f")"
	cuobjdump -lelf -lptx "$f" 2>&1 || true
	cuobjdump -all -symbols "$f" 2>&1 | grep -E 'STO_ENTRY|FUNC' || true
done >"$D/cuobjdump-$S.txt"
ls -la "$D"
