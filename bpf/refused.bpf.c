// SPDX-License-Identifier: BSD-2-Clause
// refused: a GPU program gpubpf refuses, on purpose (make demo, and the
// example of gpubpf verify): it counts vectorAdd's threads like counter.bpf.c
// but uses the map value without checking that the lookup found one, which
// on the GPU would be a store through a null pointer inside the
// application's kernel. The verifier names the line and what to add:
//   sudo gpubpf verify bpf/examples/refused_bpfel.o
#include "types.h"
#include "gpu.h"
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_MAP);
	__uint(max_entries, 2);
	__type(key, u32);
	__type(value, u64);
} calls SEC(".maps");

SEC("kprobe/_Z9vectorAddPKfS0_Pfi")
int vectorAdd_entry(void *ctx)
{
	u32 key = bpf_gpu_thread_id() & 1; /* even and odd threads */
	u64 *v = bpf_map_lookup_elem(&calls, &key);

	__sync_fetch_and_add(v, 1); /* no "if (v)": refused */
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
