#!/usr/bin/env bash
# One-call GPU check (make test-gpu / make bench): on the GPU machine, build
# the CUDA samples and the agent, run every GPU test and benchmark that
# exists under scripts/gpu/, and print a short table last.
#
# The GPU machine has no Go: Go binaries come prebuilt from `make gpu-bundle`
# (bin/ and .gpu/), carried along with the working tree.
#
#   scripts/gpu-check.sh               every check
#   scripts/gpu-check.sh --bench-only  only the benchmarks
#   scripts/gpu-check.sh NAME...       only these checks (samples, agent, jit, ptx, hostmap, memtrace, direct, ...)
#
# A check NAME is scripts/gpu/NAME-check.sh (e.g. direct: direct-check.sh,
# gpubpf run --direct); every such script runs by default.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

if [ ! -e /dev/nvidia0 ] && ! nvidia-smi -L >/dev/null 2>&1; then
	echo "gpu-check: no NVIDIA GPU on this machine (no /dev/nvidia0, nvidia-smi finds none): nothing was run."
	echo "gpu-check: run 'make gpu-bundle' on a build machine, then 'make test-gpu' on a GPU machine."
	exit 0
fi

# Go binaries built elsewhere by scripts/gpu-bundle.sh (carried packed). A
# warm machine keeps the last call's .gpu: unpack whenever the pack is newer.
if [ -f .gpupack/gpu.tgz ] && { [ ! -d .gpu/bin ] || [ .gpupack/gpu.tgz -nt .gpu/bin ]; }; then
	rm -rf .gpu && tar xzf .gpupack/gpu.tgz && touch .gpu/bin
fi
if [ -d .gpu/bin ] && ! command -v go >/dev/null; then
	mkdir -p bin && cp -fP .gpu/bin/* bin/ # -P: the tools stay links to gpubpf
fi

LOGDIR=${GPUBPF_GPU_LOGS:-${OUT:-/tmp}/gpu-check}
mkdir -p "$LOGDIR"
RESULTS=$LOGDIR/results.tsv
: >"$RESULTS"
DEVICE=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
NVCC=$(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo "nvcc missing")
echo "gpu-check: $(date -u +%Y-%m-%dT%H:%MZ) on ${DEVICE:-unknown GPU} ($NVCC), logs in $LOGDIR"

# check NAME TIMEOUT CMD...: run CMD, keep its log, record pass/fail and the
# last line that starts with "SUMMARY:" (or the last line) as its summary.
# GPUBPF_CHECK_BUDGET=SECONDS: the whole run's time (a device call's limit):
# each check gets at most what is left of it less 20 s for the table, and
# one that would get under 30 s is skipped, so the table always prints.
check() {
	local name=$1 limit=$2; shift 2
	local log=$LOGDIR/$name.log t0=$SECONDS rc
	if [ -n "${GPUBPF_CHECK_BUDGET:-}" ]; then
		local left=$((GPUBPF_CHECK_BUDGET - SECONDS - 20))
		if [ $left -lt 30 ]; then
			echo "---- $name: skipped, ${left}s of GPUBPF_CHECK_BUDGET=$GPUBPF_CHECK_BUDGET left"
			printf '%s\t%s\t%s\t%s\n' "$name" "SKIP" 0 "no time left (GPUBPF_CHECK_BUDGET=$GPUBPF_CHECK_BUDGET)" >>"$RESULTS"
			return
		fi
		[ $left -lt "$limit" ] && limit=$left
	fi
	echo "---- $name: $*"
	timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1
	rc=$?
	local secs=$((SECONDS - t0))
	local summary
	summary=$(grep -E '^SUMMARY:' "$log" | tail -1 | sed 's/^SUMMARY:[[:space:]]*//')
	[ -n "$summary" ] || summary=$(grep -v '^[[:space:]]*$' "$log" | tail -1)
	local verdict=PASS
	[ $rc -eq 0 ] || verdict="FAIL($rc)"
	# exit 3: the check cannot run here (a 2-GPU check on one GPU); its
	# "skip:" line says why
	if [ $rc -eq 3 ]; then
		verdict=SKIP
		summary=$(grep -a '^skip:' "$log" | tail -1)
	fi
	[ $rc -eq 124 ] && verdict="TIMEOUT"
	tail -n 40 "$log"
	printf '%s\t%s\t%s\t%s\n' "$name" "$verdict" "$secs" "${summary:0:90}" >>"$RESULTS"
}

want() { # is check $1 selected?
	[ ${#SELECTED[@]} -eq 0 ] && return 0
	local s; for s in "${SELECTED[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1
}

BENCH_ONLY=0
SELECTED=()
for a in "$@"; do
	case $a in
	--bench-only) BENCH_ONLY=1 ;;
	*) SELECTED+=("$a") ;;
	esac
done

# Builds first: everything after needs them.
if want build || [ ${#SELECTED[@]} -gt 0 ]; then
	check build-samples 600 make -C samples REQUIRE_NVCC=1 -j"$(nproc)"
	check build-agent 120 make agent
fi

# Checks run in the order given on the command line (default: samples, then
# scripts/gpu/*-check.sh and *-difftest.sh alphabetically).
script_of() { # check name -> script
	local f
	for f in scripts/gpu/$1-check.sh scripts/gpu/$1-difftest.sh scripts/gpu/$1.sh; do
		[ -f "$f" ] && { echo "$f"; return; }
	done
}
if [ $BENCH_ONLY -eq 0 ]; then
	if [ ${#SELECTED[@]} -eq 0 ]; then
		SELECTED=(samples)
		for s in scripts/gpu/*-check.sh scripts/gpu/*-difftest.sh; do
			[ -f "$s" ] || continue
			name=$(basename "$s" .sh)
			SELECTED+=("${name%-check}")
		done
	fi
	for name in "${SELECTED[@]}"; do
		case $name in
		build | *-bench) ;;
		samples) [ -x samples/check.sh ] && check samples 300 samples/check.sh ;;
		*)
			s=$(script_of "$name")
			if [ -n "$s" ]; then check "$name" "${GPUBPF_CHECK_TIMEOUT:-420}" bash "$s"; else echo "gpu-check: no check named $name"; fi
			;;
		esac
	done
fi
for s in scripts/gpu/*-bench.sh; do
	[ -f "$s" ] || continue
	name=$(basename "$s" .sh)
	want "$name" && check "$name" 600 bash "$s"
done

echo
echo "== gpubpf GPU check: $(date -u +%Y-%m-%d) ${DEVICE:-unknown GPU}, $NVCC =="
{
	printf 'check\tresult\tsecs\tsummary\n'
	cat "$RESULTS"
} | awk -F'\t' '{ printf "%-16s %-10s %5s  %s\n", $1, $2, $3, $4 }'
fails=$(awk -F'\t' '$2 != "PASS" && $2 != "SKIP"' "$RESULTS" | wc -l)
skips=$(awk -F'\t' '$2 == "SKIP"' "$RESULTS" | wc -l)
total=$(wc -l <"$RESULTS")
echo "$((total - fails - skips)) passed, $fails failed, $skips skipped"
[ "$fails" -eq 0 ]
