#!/usr/bin/env bash
# Builds, on this (Go) machine, what the GPU machine runs but cannot build:
# the tools (bin/, by make) and the Go test binaries of packages with GPU
# tests (.gpu/tests/). Carry bin and .gpu to the GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .gpu/tests
# Packages whose tests do something on a GPU (testenv.GPU / GPUBPF_GPU_*).
pkgs=$(grep -rl --include='*_test.go' -e 'testenv.GPU(' pkg tools 2>/dev/null | xargs -r -n1 dirname | sort -u)
for d in $pkgs; do
	name=$(echo "$d" | tr / _)
	CGO_ENABLED=0 go test -c -o ".gpu/tests/$name.test" "./$d"
	echo "built .gpu/tests/$name.test"
done
du -sh bin .gpu 2>/dev/null
