// SPDX-License-Identifier: BSD-2-Clause
// threadhist: per-thread run counts and busy time of GPU kernels, counted
// on the GPU. At each exit a thread adds one run and (exit - its kernel
// entry time, bpf_gpu_entry_time) nanoseconds to its key,
// in the segment of the kernel it runs in. Nothing is shipped per thread:
// the tool reads the arrays per interval.
#include "types.h"
#include <bpf/bpf_helpers.h>
#include "gputhread.h"

enum { BY_THREAD_X = 0, BY_GLOBAL = 1, BY_BLOCK = 2, BY_WARP = 3 };

/* Set by the tool before loading. */
const volatile u32 by = BY_THREAD_X;
const volatile u32 keys = 1024;		/* keys per kernel segment */
const volatile u32 max_kernels = 64;	/* segments */
/* Copies of each kernel's segment, picked by SM: with few keys (thread.x)
 * every block adds to the same addresses, and one copy per SM group keeps
 * the atomics on one address to a few per launch. The tool sums them. */
const volatile u32 shards = 1;

/* Sized by the tool: max_kernels * shards * keys entries. */
GPUBPF_MAP(runs, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u64, 1);
GPUBPF_MAP(nsecs, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u64, 1);
/* [0] runs whose key was beyond the table, [1] runs in a kernel beyond
 * max_kernels (or unknown), [2] runs with no entry time (the probe was
 * called, not pasted into the kernel: GPUBPF_NO_INLINE). */
GPUBPF_MAP(lost, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u64, 4);

SEC("gpu/exit/*")
int threadhist_exit(void *ctx)
{
	u64 now = bpf_gpu_site_time();
	/* read into a register at the kernel's entry: no entry probe storing
	 * it through memory for this exit to load back */
	u64 start = bpf_gpu_entry_time();
	u64 kernel = bpf_gpu_kernel_index();
	u64 tpb, t, key;

	if (kernel >= max_kernels) {
		gpu_array_add(&lost, 1, 1);
		return 0;
	}
	switch (by) {
	case BY_GLOBAL:
		t = gpu_thread_in_block(&tpb);
		key = gpu_block_linear() * tpb + t;
		break;
	case BY_BLOCK:
		key = gpu_block_linear();
		break;
	case BY_WARP:
		t = gpu_thread_in_block(&tpb);
		key = gpu_block_linear() * ((tpb + 31) / 32) + t / 32;
		break;
	default: {
		u64 x, y, z;
		bpf_get_thread_idx(&x, &y, &z);
		key = x;
	}
	}
	if (key >= keys) {
		gpu_array_add(&lost, 0, 1);
		return 0;
	}
	u32 idx = (kernel * shards + bpf_get_sm_id() % shards) * keys + key;
	u64 *r, *ns;
	if (by == BY_BLOCK || by == BY_WARP) {
		/* Every lane of a warp has the warp's key: the lanes exiting
		 * together add once, through their lowest lane, instead of a
		 * block's threads one by one on one address. Busy ns below bit
		 * 58 (a lane's < 2^53), lanes without an entry time above: one
		 * sum carries both. */
		struct gpu_group g = gpu_warp_group();
		u64 ok = start && start <= now;
		u64 sum = gpu_group_sum(g, ok ? now - start : 1ULL << 58);

		if (bpf_get_lane_id() != g.leader)
			return 0;
		r = bpf_map_lookup_elem(&runs, &idx);
		ns = bpf_map_lookup_elem(&nsecs, &idx);
		if (!r || !ns)
			return 0;
		__sync_fetch_and_add(r, g.n);
		__sync_fetch_and_add(ns, sum & ((1ULL << 58) - 1));
		if (sum >> 58)
			gpu_array_add(&lost, 2, sum >> 58);
		return 0;
	}
	r = bpf_map_lookup_elem(&runs, &idx);
	ns = bpf_map_lookup_elem(&nsecs, &idx);
	if (!r || !ns)
		return 0;
	__sync_fetch_and_add(r, 1);
	if (start && start <= now) {
		__sync_fetch_and_add(ns, now - start);
	} else {
		gpu_array_add(&lost, 2, 1);
	}
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
