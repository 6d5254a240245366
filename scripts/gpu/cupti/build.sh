#!/usr/bin/env bash
# Builds the CUPTI activity tracer of launchlate's cross-check
# (scripts/gpu/launchlate-cupti.sh) on the GPU machine, where CUPTI ships
# with the CUDA toolkit:
#   scripts/gpu/cupti/build.sh   ->   scripts/gpu/cupti/libcupti_trace.so
# CUDA: $CUDA_HOME, else the toolkit of the nvcc on PATH (as found, then
# through links), else /usr/local/cuda.
# CUPTI: the first of $CUDA/extras/CUPTI/{include,lib64}, $CUDA/{include,lib64}
# and $CUDA/targets/ARCH-linux/{include,lib} that has cupti.h and libcupti.so;
# CUPTI_INC and CUPTI_LIB override the search. Compiler: nvcc (CUPTI_TRACE_CC
# overrides it, e.g. CUPTI_TRACE_CC=gcc for a compile check without nvcc).
# Exit status: 0 built; 2 no CUPTI or no compiler here (callers skip); 1 the
# build failed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$here/libcupti_trace.so
src=$here/cupti_trace.c

nvcc=$(command -v nvcc || true)
if [ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ]; then nvcc=/usr/local/cuda/bin/nvcc; fi
# CUDA homes to try, in order: CUDA_HOME; the toolkit of nvcc as found and
# through its links (/usr/bin/nvcc -> /usr/local/cuda-13.0/bin/nvcc);
# /usr/local/cuda.
homes=()
if [ -n "${CUDA_HOME:-}" ]; then
	homes=("$CUDA_HOME")
else
	if [ -n "$nvcc" ]; then
		homes+=("$(dirname "$(dirname "$nvcc")")")
		real=$(dirname "$(dirname "$(readlink -f "$nvcc")")")
		[ "$real" != "${homes[0]}" ] && homes+=("$real")
	fi
	homes+=(/usr/local/cuda)
fi

has_cupti() { [ -f "$1/cupti.h" ] && compgen -G "$2/libcupti.so*" >/dev/null; }
inc="" lib="" cuda=""
if [ -n "${CUPTI_INC:-}" ] || [ -n "${CUPTI_LIB:-}" ]; then
	cuda=${homes[0]}
	inc=${CUPTI_INC:-$cuda/include} lib=${CUPTI_LIB:-$cuda/lib64}
	has_cupti "$inc" "$lib" || { echo "cupti build: no cupti.h in $inc or no libcupti.so in $lib (CUPTI_INC/CUPTI_LIB)"; exit 2; }
	echo "cupti build: CUDA $cuda; CUPTI from CUPTI_INC/CUPTI_LIB: headers $inc, library $lib"
else
	for home in "${homes[@]}"; do
		for pair in "$home/extras/CUPTI/include:$home/extras/CUPTI/lib64" "$home/include:$home/lib64" \
			"$home/targets/$(uname -m)-linux/include:$home/targets/$(uname -m)-linux/lib"; do
			if has_cupti "${pair%%:*}" "${pair#*:}"; then
				cuda=$home inc=${pair%%:*} lib=${pair#*:}
				break 2
			fi
			echo "cupti build: no CUPTI in ${pair%%:*} + ${pair#*:}"
		done
	done
	[ -n "$inc" ] || { echo "cupti build: no CUPTI (cupti.h + libcupti.so) under ${homes[*]}; set CUPTI_INC/CUPTI_LIB if it is elsewhere"; exit 2; }
	echo "cupti build: CUDA $cuda; CUPTI headers $inc, library $lib"
fi
# libcupti.so is a development link; a runtime-only install has only
# libcupti.so.VERSION, which -lcupti cannot find.
if [ -e "$lib/libcupti.so" ]; then link=(-lcupti); else link=("$(compgen -G "$lib/libcupti.so.*" | sort -V | tail -1)"); fi

# CUPTI fills its newest kernel record (CUpti_ActivityKernelN, N growing
# with the toolkit); the non-deprecated header names it.
n=$(grep -ho '} *CUpti_ActivityKernel[0-9][0-9]* *;' "$inc/cupti_activity.h" 2>/dev/null | grep -o '[0-9][0-9]*' | sort -n | tail -1)
if [ -z "$n" ]; then
	n=$(cat "$inc"/cupti_activity*.h 2>/dev/null | grep -o '} *CUpti_ActivityKernel[0-9][0-9]* *;' | grep -o '[0-9][0-9]*' | sort -n | tail -1)
fi
if [ -n "$n" ]; then
	rec=(-DCUPTI_KERNEL_RECORD=CUpti_ActivityKernel"$n")
	echo "cupti build: kernel record CUpti_ActivityKernel$n"
else
	rec=()
	echo "cupti build: no CUpti_ActivityKernelN found in $inc/cupti_activity*.h; using the source's fallback"
fi
ver=$(grep -o 'define CUPTI_API_VERSION [0-9]*' "$inc/cupti_version.h" 2>/dev/null | awk '{print $3}')
[ -n "$ver" ] && echo "cupti build: CUPTI_API_VERSION $ver"

cc=${CUPTI_TRACE_CC:-$nvcc}
[ -n "$cc" ] || { echo "cupti build: no nvcc on PATH or in /usr/local/cuda/bin (CUPTI_TRACE_CC names another compiler)"; exit 2; }
# The commas are the compilers' own option syntax, not array separators.
# shellcheck disable=SC2054
if [ "$(basename "$cc")" = nvcc ]; then
	flags=(-O2 -shared -Xcompiler -fPIC,-Wall,-Wextra -Xlinker -rpath,"$lib")
else
	flags=(-O2 -shared -fPIC -Wall -Wextra -Wl,-rpath,"$lib")
fi
# rpath: the driver dlopens the tracer by path; libcupti must be found
# without LD_LIBRARY_PATH, which the traced program may not have.
tmp=$out.tmp.$$
if ! "$cc" "${flags[@]}" "${rec[@]}" -I"$inc" -I"$cuda/include" -o "$tmp" "$src" -L"$lib" "${link[@]}"; then
	rm -f "$tmp"
	echo "cupti build: $cc failed on $src"
	exit 1
fi
mv -f "$tmp" "$out"
echo "cupti build: $out"

# The join-cost diagnostic (cupti_api_cost.cu, scripts/gpu/cuptijoin-bench.sh):
# a CUDA program, so nvcc only.
if [ "$(basename "$cc")" = nvcc ]; then
	cost=$here/cupti_api_cost
	if "$cc" -O2 -std=c++17 -I"$inc" -I"$cuda/include" -o "$cost.tmp.$$" "$here/cupti_api_cost.cu" -L"$lib" "${link[@]}" \
		-Xlinker -rpath,"$lib"; then
		mv -f "$cost.tmp.$$" "$cost"
		echo "cupti build: $cost"
	else
		rm -f "$cost.tmp.$$"
		echo "cupti build: $cc failed on cupti_api_cost.cu (the tracer is built)"
	fi
fi
