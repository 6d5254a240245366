#!/usr/bin/env bash
# Run every sample in both cudart flavours with small arguments, check its
# RESULT line and exit status, check that its binary embeds PTX (and, for
# vec_add_hook, the call of the hook stub), and print a compact table, then
#     samples: N passed, M failed
# Exits non-zero on any failure. Called by scripts/gpu-check.sh.
#
#   samples/check.sh [NAME...]      only these samples (default: all)
# Environment:
#   SAMPLES_BIN   binaries (default samples/bin)
#   SAMPLES_LOGS  where each run's full output is kept (default: a temp dir)
#   REQUIRE_GPU=1 fail instead of skipping when there is no NVIDIA GPU
#   CUOBJDUMP     cuobjdump to use for the PTX checks (default: from PATH or
#                 /usr/local/cuda/bin; the PTX checks are skipped without it)
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${SAMPLES_BIN:-$HERE/bin}
LOGS=${SAMPLES_LOGS:-$(mktemp -d /tmp/gpubpf-samples.XXXXXX)}
mkdir -p "$LOGS"

if [ ! -e /dev/nvidia0 ] && ! nvidia-smi -L >/dev/null 2>&1; then
	echo "samples: no NVIDIA GPU on this machine, nothing run"
	[ "${REQUIRE_GPU:-0}" = 1 ] && exit 1
	exit 0
fi

CUOBJDUMP=${CUOBJDUMP:-$(command -v cuobjdump || { [ -x /usr/local/cuda/bin/cuobjdump ] && echo /usr/local/cuda/bin/cuobjdump; })}

# name | arguments | RESULT key shown in the table
RUNS='
vec_add        | 1000 10 256 4      | host_us
vec_add        | 100000 20 512 196  | kernel_us
vec_add_hook   | 1000 10 256 4      | host_us
vec_add_probe  | 1000 10 256 4      | host_us
vec_add_ideal  | 1000 10 256 4 ring | observation
vec_add_ideal  | 1000 10 256 4 shared | observation
imbalance      | 10000 128 4 3      | checksum
lane_slow      | 64 2 750 3         | lane31_ns
launch_heavy   | 2000 4 20000       | launches_per_s
alloc_mix      | 2                  | leaked_bytes
compute_bound  | 4096 256 264 2     | gflops
multi_kernel   | 4096 2             | reduce_sum
graph_launch   | 5 4096             | checksum
empty_kernel   | 10000 async        | us_per_launch
empty_kernel   | 1000 sync          | us_per_launch
launch_story   | 40 200             | launches
gated          | - 5,*,3 256 4 2    | checksum
fork_exec      | fork - 5           | checksum
fork_exec      | exec - 5           | checksum
jit_limits     | 2                  | regheavy_sum
sass_only      | 4096 3             | checksum
modload        | 3                  | ptx_sum
many_kernels   | 0.2                | rounds
multimod       | 3                  | thread_runs
'

want() { # is sample $1 selected?
	[ $# -gt 0 ] || return 0
	local n=$1; shift
	[ $# -eq 0 ] && return 0
	local s; for s in "$@"; do [ "$s" = "$n" ] && return 0; done
	return 1
}

pass=0 fail=0
ROWS=()
row() { ROWS+=("$(printf '%-14s %-7s %-14s %-6s %s' "$@")"); }

while IFS='|' read -r name args key; do
	name=$(echo "$name" | xargs); args=$(echo "$args" | xargs); key=$(echo "$key" | xargs)
	[ -n "$name" ] || continue
	want "$name" "$@" || continue
	for flavour in static shared; do
		exe=$BIN/$name
		[ $flavour = shared ] && exe=${exe}_shared
		label="$name${args:+ $args}"
		log=$LOGS/${name}_${flavour}_$(echo "$args" | tr ' ' '_').log
		if [ ! -x "$exe" ]; then
			row "$name" $flavour "FAIL(missing)" "-" "$exe not built"
			fail=$((fail + 1)); continue
		fi
		t0=$(date +%s%N)
		# shellcheck disable=SC2086
		timeout --kill-after=5 60 "$exe" $args >"$log" 2>&1
		rc=$?
		secs=$(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN { printf "%.2f", (b - a) / 1e9 }')
		line=$(grep -E "^RESULT $name " "$log" | tail -1)
		verdict=$(echo "$line" | awk '{print $3}')
		val=$(echo "$line" | tr ' ' '\n' | grep -E "^$key=" | head -1)
		if [ $rc -eq 0 ] && [ "$verdict" = ok ]; then
			row "$name" $flavour ok "$secs" "$val  [$args]"
			pass=$((pass + 1))
		else
			why="rc=$rc"; [ $rc -eq 124 ] && why=timeout
			row "$name" $flavour "FAIL($why)" "$secs" "${line:-no RESULT line}  [$args]"
			fail=$((fail + 1))
			echo "---- $label ($flavour) failed; last lines of $log:" >&2
			tail -n 15 "$log" >&2
		fi
	done
done <<<"$RUNS"

# PTX checks: every binary must embed PTX for gpubpf to patch; the hook
# variant's PTX must call the stub. Exceptions made on purpose: sass_only
# and launch_heavy_sass have no PTX (scripts/gpu/faults-check.sh,
# cupti-check.sh), and modload (driver API) reads its kernels from
# modload.ptx and modload.cubin.
if [ -n "$CUOBJDUMP" ]; then
	for exe in "$BIN"/*; do
		[ -x "$exe" ] && [ -f "$exe" ] || continue
		n=$(basename "$exe"); base=${n%_shared}; flavour=static; [ "$n" != "$base" ] && flavour=shared
		want "$base" "$@" || continue
		nptx=$("$CUOBJDUMP" -lptx "$exe" 2>/dev/null | grep -c '^PTX file')
		nelf=$("$CUOBJDUMP" -lelf "$exe" 2>/dev/null | grep -c '^ELF file')
		if [ "$base" = sass_only ] || [ "$base" = launch_heavy_sass ]; then
			# built without PTX on purpose (faults-check.sh case 6;
			# cupti-check.sh times launch_heavy_sass through CUPTI only)
			detail="$nptx PTX, $nelf ELF (SASS only on purpose)"
			ok=1; [ "$nptx" = 0 ] && [ "$nelf" -ge 1 ] || ok=0
		elif [ "$base" = modload ]; then
			# a driver-API program: its kernels are in modload.ptx and modload.cubin
			ok=1 detail="modload.ptx defines ptxScale, modload.cubin is ELF"
			grep -q '^\.visible \.entry ptxScale' "$BIN/modload.ptx" 2>/dev/null || { ok=0 detail="modload.ptx lacks ptxScale"; }
			[ "$(head -c 4 "$BIN/modload.cubin" 2>/dev/null | tail -c 3)" = ELF ] || { ok=0 detail="modload.cubin is not ELF"; }
		elif [ "$nptx" -ge 1 ]; then
			detail="$nptx PTX, $nelf ELF"
			ok=1
			if [ "$base" = vec_add_hook ]; then
				calls=$("$CUOBJDUMP" -ptx "$exe" 2>/dev/null | grep -A1 -E '^\s*call' | grep -c '__bpftime_cuda__kernel_trace')
				detail="$detail, $calls call(s) of __bpftime_cuda__kernel_trace"
				[ "$calls" -ge 1 ] || ok=0
			fi
		else
			detail="no PTX embedded ($nelf ELF)"; ok=0
		fi
		if [ $ok = 1 ]; then
			row "$base" $flavour "ptx-ok" "-" "$detail"; pass=$((pass + 1))
		else
			row "$base" $flavour "FAIL(ptx)" "-" "$detail"; fail=$((fail + 1))
		fi
	done
else
	echo "samples: cuobjdump not found, PTX checks skipped" >&2
fi

echo
dev=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
echo "samples: $(date -u +%Y-%m-%dT%H:%MZ) on ${dev:-unknown GPU}"
printf '%-14s %-7s %-14s %-6s %s\n' sample flavour result secs key
printf '%s\n' "${ROWS[@]}"
echo "samples: logs in $LOGS"
echo "samples: $pass passed, $fail failed"
[ $fail -eq 0 ]
