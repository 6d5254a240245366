// SPDX-License-Identifier: BSD-2-Clause
// bench_counter: probe_counter.bpf.c's per-thread counter (globaltimer,
// thread index, a count and the last timestamp in a per-GPU-thread array)
// at the entry of every kernel, not only vectorAdd, so that one object
// serves every workload of scripts/gpu/table-bench.sh (mode "counter";
// goals: <= 1.15x at vec_add large, probe / hand-written <= 1.10 at every
// preset). Hand-written twin: samples/vec_add_ideal.cu, observation counter
// (the same code as samples/vec_add_probe.cu).
#include "types.h"
#include "gpu.h"
#include <bpf/bpf_helpers.h>

struct slot {
	u64 count;
	u64 last_ts;
};

GPUBPF_MAP(counters, BPF_MAP_TYPE_PERGPUTD_ARRAY_MAP, u32, struct slot, 1);

SEC("gpu/entry/*")
int counter_entry(void *ctx)
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

char LICENSE[] SEC("license") = "Dual BSD/GPL";
