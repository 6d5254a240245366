/* SPDX-License-Identifier: BSD-2-Clause */
/* trace's record and ring, shared with bench/probe_ring.bpf.c (which
 * measures the same record in parts) and bench/bench_ring.bpf.c (the record
 * on every kernel). Include after gpu.h. */
#ifndef __TRACE_H
#define __TRACE_H

struct event {
	u64 ts;
	u32 block_x, block_y, block_z;
	u32 thread_x, thread_y, thread_z;
	u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_GPU_RINGBUF_MAP);
	__uint(max_entries, 16);
	__type(key, u32);
	__type(value, u32);
} events SEC(".maps");

/* The record's fields for the calling thread. */
static __always_inline void trace_fill(struct event *e)
{
	u64 x, y, z;

	bpf_get_block_idx(&x, &y, &z);
	e->block_x = x, e->block_y = y, e->block_z = z;
	bpf_get_thread_idx(&x, &y, &z);
	e->thread_x = x, e->thread_y = y, e->thread_z = z;
	e->ts = bpf_get_globaltimer();
}

#endif
