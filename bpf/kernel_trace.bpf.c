// SPDX-License-Identifier: BSD-2-Clause
// kernel_trace: one record per GPU thread entering an instrumented kernel
// (at entry, or at a __bpftime_cuda__kernel_trace() / __gpubpf_hook_*()
// stub call the kernel makes): globaltimer, launch, block, thread, SM, warp
// and lane. Threads outside the --block/--thread ranges, or not picked by
// --sample, return before touching memory.
#include "types.h"
#include <bpf/bpf_helpers.h>
#include "gputhread.h"

/* Set by the tool: linear block and thread-in-block ranges (inclusive),
 * and one thread in sample_every (by global thread id). */
const volatile u64 block_min = 0, block_max = ~0ULL;
const volatile u64 thread_min = 0, thread_max = ~0ULL;
const volatile u64 sample_every = 1;

struct {
	__uint(type, BPF_MAP_TYPE_GPU_RINGBUF_MAP);
	__uint(max_entries, 1 << 25);
	__type(key, u32);
	__type(value, u32);
} events SEC(".maps");

SEC("gpu/entry/*")
int kernel_trace_entry(void *ctx)
{
	u64 now = bpf_gpu_site_time();
	u64 tpb, t = gpu_thread_in_block(&tpb);
	u64 b = gpu_block_linear();
	struct gpu_thread_event e = {};

	if (b < block_min || b > block_max || t < thread_min || t > thread_max)
		return 0;
	if (sample_every > 1 && (b * tpb + t) % sample_every != 0)
		return 0;
	gpu_fill_event(&e, now);
	bpf_ringbuf_output(&events, &e, sizeof(e), 0);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
