// SPDX-License-Identifier: BSD-2-Clause
// bench_ring: one ring-buffer record per thread at the entry of every
// kernel: trace.bpf.c's 40-byte record (globaltimer, block and thread
// index) without its trace_printk, i.e. probe_ring.bpf.c's ring_record for
// any kernel (scripts/gpu/table-bench.sh, mode "ring", run with --summary:
// every record crosses to the tool, which counts it; goal <= 1.5x at
// medium). Hand-written twin (the GPU side only): samples/vec_add_ideal.cu,
// observation ring.
#include "types.h"
#include "gpu.h"
#include <bpf/bpf_helpers.h>

#include "trace.h"

SEC("gpu/entry/*")
int ring_entry(void *ctx)
{
	struct event e = {};

	trace_fill(&e);
	bpf_perf_event_output(ctx, &events, 0, &e, sizeof(e));
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
