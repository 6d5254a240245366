#!/usr/bin/env bash
# Builds, on this (Go) machine, what the GPU machine runs but cannot build:
# the tools that have GPU checks and the Go test/helper binaries the
# scripts/gpu/*.sh checks use, all under .gpu/ (git-ignored). Carry .gpu to
# the GPU machine; scripts/gpu-check.sh installs .gpu/bin into bin/.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .gpu
mkdir -p .gpu/bin .gpu/agent .gpu/jit .gpu/ptx
ver=$(git describe --always --dirty 2>/dev/null || echo dev)
ld="-s -w -X github.com/gpubpf/gpubpf/pkg/toolkit.Version=$ver"
export CGO_ENABLED=0
# one binary; the tools are links to it (as make install puts them)
go build -trimpath -ldflags "$ld" -o .gpu/bin/gpubpf ./tools/gpubpf
for t in gpuevent_snoop threadhist kernelretsnoop kernel_trace launchlate; do
	ln -sfn gpubpf .gpu/bin/$t
done
go build -trimpath -ldflags "-s -w" -o .gpu/agent/agentcheck ./pkg/runtime/agent/gputest/agentcheck
go build -trimpath -ldflags "-s -w" -o .gpu/ptx/ptxinst ./pkg/runtime/instrument/gputest/ptxinst
go test -c -trimpath -ldflags "-s -w" -o .gpu/jit/difftest.test ./pkg/runtime/jit/difftest
go test -c -trimpath -ldflags "-s -w" -o .gpu/jit/jit.test ./pkg/runtime/jit
# promtool's check of the metrics text (the client library's promlint) for
# fleet-check.sh: promtool itself (48 MB) would not fit the device tool's 64 MiB
go build -trimpath -ldflags "-s -w" -o .gpu/bin/promcheck ./pkg/promexport/gputest/promcheck
# .gpu is larger than the device tool carries (64 MiB): carry .gpupack,
# this archive of it (about 30 MB); scripts/gpu-check.sh unpacks it.
mkdir -p .gpupack
tar czf .gpupack/gpu.tgz .gpu
du -sh .gpu .gpupack/gpu.tgz
