#!/usr/bin/env bash
# make demo: trace the bundled vec_add sample with a real gpubpf tool.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -e /dev/nvidia0 ] && ! nvidia-smi -L >/dev/null 2>&1; then
	echo "demo: this machine has no NVIDIA GPU (no /dev/nvidia0), so there is nothing to trace."
	echo "demo: on a GPU machine 'make demo' builds the samples and runs:"
	echo "  sudo bin/gpubpf run bpf/examples/counter_bpfel.o -- samples/bin/vec_add"
	exit 0
fi
if [ ! -x samples/bin/vec_add ]; then
	echo "demo: samples/bin/vec_add was not built (is nvcc on PATH?)" >&2
	exit 1
fi
sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
echo "+ $sudo bin/gpubpf run bpf/examples/counter_bpfel.o -- samples/bin/vec_add"
$sudo bin/gpubpf run bpf/examples/counter_bpfel.o -- samples/bin/vec_add
