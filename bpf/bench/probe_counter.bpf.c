// SPDX-License-Identifier: BSD-2-Clause
// probe_counter: the probe of the performance goal (issue 3): read
// globaltimer and the thread index, bump a per-thread counter. Compare with
// bench/probe_counter.cu's hand-written CUDA doing the same on vec_add.
#include "types.h"
#include "gpu.h"
#include <bpf/bpf_helpers.h>

struct slot {
	u64 count;
	u64 last_ts;
};

GPUBPF_MAP(counters, BPF_MAP_TYPE_PERGPUTD_ARRAY_MAP, u32, struct slot, 1);

SEC("kprobe/_Z9vectorAddPKfS0_Pfi")
int probe_counter(void *ctx)
{
	u32 key = 0;
	u64 x, y, z;
	struct slot *s = bpf_map_lookup_elem(&counters, &key);

	if (!s)
		return 0;
	bpf_get_thread_idx(&x, &y, &z);
	s->count += 1 + (x & 0); /* reads the thread index, as the goal says */
	s->last_ts = bpf_get_globaltimer();
	return 0;
}

SEC("kprobe/_Z9vectorAddPKfS0_Pfi")
int probe_empty(void *ctx)
{
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
