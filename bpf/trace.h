/* SPDX-License-Identifier: BSD-2-Clause */
/* trace's record and ring, shared with bench/probe_ring.bpf.c (which
 * measures the same record in parts). */
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

#endif
