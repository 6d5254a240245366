#!/usr/bin/env bash
# What each driver call the agent may add to an instrumented launch costs
# the launching thread (scripts/gpu/launchcost.cu): empty-kernel launches on
# 4 streams, one thread, each variant alternating with plain launches,
# medians of ROUNDS rounds. Diagnostic for the agent's per-launch path
# (docs/gpu-results.md); prints a table, asserts nothing.
set -uo pipefail
cd "$(dirname "$0")/../.."
B=$(mktemp -d)
trap 'rm -rf "$B"' EXIT
nvcc -O2 -arch=native -o "$B/launchcost" scripts/gpu/launchcost.cu -lcuda || { echo "SUMMARY: FAIL building launchcost"; exit 1; }
echo "launchcost: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1), $(date -u +%FT%TZ)"
timeout 120 "$B/launchcost" "${LAUNCHES:-200000}" "${ROUNDS:-7}" | tee "$B/out"
echo "SUMMARY: $(grep -E '^\+cuEventRecord|^\+cuStreamIsCapturing|^\+2 clock' "$B/out" | sed -E "s/^(\+[^ ]+( [^ ]+)?) +median.*\(([+-][0-9]+) ns.*/\1 \3 ns;/" | tr "\n" " ")"
