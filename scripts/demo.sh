#!/usr/bin/env bash
# make demo: trace the bundled vec_add sample with a real gpubpf tool; on a
# machine without a GPU, what runs without one: the compiler and the
# verifier on the bundled example objects, then what the GPU run prints.
set -euo pipefail
cd "$(dirname "$0")/.."
step() { echo; echo "+ $*"; }
sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
if [ ! -e /dev/nvidia0 ] && ! nvidia-smi -L >/dev/null 2>&1; then
	echo "demo: this machine has no NVIDIA GPU (no /dev/nvidia0): nothing to trace, but gpubpf's compiler"
	echo "demo: and verifier run here, on bpf/counter.bpf.c (counts vectorAdd's threads on the GPU)."
	step "bin/gpubpf ptx bpf/examples/counter_bpfel.o   # the PTX a run pastes into vectorAdd (its head, its atomics)"
	bin/gpubpf ptx bpf/examples/counter_bpfel.o >/tmp/gpubpf-demo.$$.ptx
	head -12 /tmp/gpubpf-demo.$$.ptx
	echo "   ..."
	grep -nE 'atom|red\.' /tmp/gpubpf-demo.$$.ptx | sed 's/^/   line /'
	echo "   ($(wc -l </tmp/gpubpf-demo.$$.ptx) lines in all)"
	rm -f /tmp/gpubpf-demo.$$.ptx
	ptxas=$(command -v ptxas || true)
	[ -z "$ptxas" ] && [ -x "${GPUBPF_CUDA_BIN:-}/ptxas" ] && ptxas=$GPUBPF_CUDA_BIN/ptxas
	if [ -n "$ptxas" ]; then
		step "bin/gpubpf ptx bpf/examples/counter_bpfel.o > counter.ptx && ptxas -arch=sm_90 -c counter.ptx"
		t=$(mktemp -d)
		bin/gpubpf ptx bpf/examples/counter_bpfel.o >"$t/counter.ptx"
		"$ptxas" -arch=sm_90 -c -o "$t/counter.o" "$t/counter.ptx" && echo "ptxas: assembled for sm_90 ($(stat -c %s "$t/counter.o") bytes)"
		rm -rf "$t"
	fi
	if [ -n "$sudo" ] && ! sudo -n true 2>/dev/null; then
		echo; echo "demo: gpubpf verify loads each program into the Linux kernel's verifier, which needs root: sudo make demo"
	else
		step "${sudo:+$sudo }bin/gpubpf verify bpf/examples/counter_bpfel.o"
		$sudo bin/gpubpf verify bpf/examples/counter_bpfel.o
		step "${sudo:+$sudo }bin/gpubpf verify bpf/examples/refused_bpfel.o   # a program that would crash the application"
		$sudo bin/gpubpf verify bpf/examples/refused_bpfel.o || true
	fi
	echo
	echo "demo: on a GPU machine 'make demo' builds the samples and runs the counter in vec_add's kernels;"
	echo "demo: there it printed (docs/demo-gpu.txt):"
	sed 's/^/    /' docs/demo-gpu.txt
	exit 0
fi
if [ ! -x samples/bin/vec_add ]; then
	echo "demo: samples/bin/vec_add was not built (is nvcc on PATH?)" >&2
	exit 1
fi
echo "+ $sudo bin/gpubpf run bpf/examples/counter_bpfel.o -- samples/bin/vec_add"
$sudo bin/gpubpf run bpf/examples/counter_bpfel.o -- samples/bin/vec_add
