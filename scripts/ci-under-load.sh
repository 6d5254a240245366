#!/usr/bin/env bash
# Runs .ci/run on fresh clones of this repository's HEAD, N times in a row,
# while other processes keep every CPU busy (issue 44: make test must not
# depend on the machine's load). One line per run in the summary.
#   scripts/ci-under-load.sh [N] [LOGDIR]
# The load: one busy loop per CPU (sha256sum of /dev/zero), at the same
# priority as the tests, for the whole of each run.
set -uo pipefail
n=${1:-10}
logs=${2:-/tmp/ci-under-load}
repo=$(cd "$(dirname "$0")/.." && pwd)
rev=$(git -C "$repo" rev-parse --short HEAD)
mkdir -p "$logs"
summary=$logs/summary.txt
echo "# .ci/run under load: $rev, $(nproc) CPUs each kept busy by a sha256sum of /dev/zero, $(date -u +%FT%TZ)" >"$summary"
load=()
stop_load() { for p in "${load[@]}"; do kill "$p" 2>/dev/null; done; load=(); }
trap stop_load EXIT
for i in $(seq 1 "$n"); do
	dir=$logs/clone$i
	rm -rf "$dir" && git clone -q "$repo" "$dir"
	for _ in $(seq 1 "$(nproc)"); do sha256sum /dev/zero & load+=($!); done
	t0=$(date +%s)
	(cd "$dir" && bash .ci/run) >"$logs/run$i.log" 2>&1
	rc=$?
	stop_load
	line="run $i ($(git -C "$repo" rev-parse --short HEAD) as cloned: $(git -C "$dir" rev-parse --short HEAD 2>/dev/null)): rc=$rc $(( $(date +%s) - t0 ))s"
	[ $rc -ne 0 ] && line+=" failing: $(grep -E '^(--- FAIL|FAIL)' "$logs/run$i.log" | head -5 | tr '\n' ' ')"
	echo "$line" | tee -a "$summary"
	rm -rf "$dir"
done
echo "passed $(grep -c 'rc=0' "$summary")/$n" | tee -a "$summary"
