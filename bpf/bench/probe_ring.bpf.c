// SPDX-License-Identifier: BSD-2-Clause
// probe_ring: the event path's cost in parts (scripts/gpu/event-bench.sh).
// ring_record is bpf/trace.bpf.c's per-thread record without its
// trace_printk from thread 0; ring_fields reads the same fields and keeps
// them in a per-thread counter array instead of a ring record, so that the
// difference between the two is the ring reservation and its stores.
#include "types.h"
#include "gpu.h"
#include <bpf/bpf_helpers.h>

#include "trace.h"

GPUBPF_MAP(sums, BPF_MAP_TYPE_PERGPUTD_ARRAY_MAP, u32, u64, 1);

SEC("kprobe/_Z9vectorAddPKfS0_Pfi")
int ring_record(void *ctx)
{
	struct event e = {};

	trace_fill(&e);
	bpf_perf_event_output(ctx, &events, 0, &e, sizeof(e));
	return 0;
}

SEC("kprobe/_Z9vectorAddPKfS0_Pfi")
int ring_fields(void *ctx)
{
	struct event e = {};
	u32 key = 0;
	u64 *s;

	trace_fill(&e);
	s = bpf_map_lookup_elem(&sums, &key);
	if (s)
		*s += e.ts + e.block_x + e.block_y + e.block_z + e.thread_x + e.thread_y + e.thread_z;
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
