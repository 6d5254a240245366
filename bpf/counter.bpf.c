// SPDX-License-Identifier: BSD-2-Clause
// counter: counts, on the GPU, how many threads enter and leave vectorAdd.
// bpftime-style sections, so `gpubpf run` must run it unchanged:
//   sudo gpubpf run bpf/examples/counter_bpfel.o -- samples/bin/vec_add
#include "types.h"
#include "gpu.h"
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_MAP);
	__uint(max_entries, 2);
	__type(key, u32);
	__type(value, u64);
} calls SEC(".maps");

static __always_inline void bump(u32 key)
{
	u64 *v = bpf_map_lookup_elem(&calls, &key);
	if (v)
		__sync_fetch_and_add(v, 1);
}

SEC("kprobe/_Z9vectorAddPKfS0_Pfi")
int vectorAdd_entry(void *ctx)
{
	bump(0);
	return 0;
}

SEC("kretprobe/_Z9vectorAddPKfS0_Pfi")
int vectorAdd_exit(void *ctx)
{
	bump(1);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
