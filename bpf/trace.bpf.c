// SPDX-License-Identifier: BSD-2-Clause
// trace: one ring-buffer record per GPU thread entering vectorAdd (block,
// thread, globaltimer), and a trace_printk from thread 0 of block 0 — the
// seed's kernel_trace demo, written the bpftime way.
#include "types.h"
#include "gpu.h"
#include <bpf/bpf_helpers.h>

#include "trace.h"

SEC("kprobe/_Z9vectorAddPKfS0_Pfi")
int cuda__probe(void *ctx)
{
	struct event e = {};
	u64 x, y, z;

	bpf_get_block_idx(&x, &y, &z);
	e.block_x = x, e.block_y = y, e.block_z = z;
	bpf_get_thread_idx(&x, &y, &z);
	e.thread_x = x, e.thread_y = y, e.thread_z = z;
	e.ts = bpf_get_globaltimer();
	bpf_perf_event_output(ctx, &events, 0, &e, sizeof(e));
	if (e.block_x == 0 && e.thread_x == 0)
		bpf_printk("vectorAdd entered, globaltimer %llu", e.ts);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
