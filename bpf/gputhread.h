/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * gputhread.h - thread identity helpers shared by the per-thread GPU tools
 * (threadhist, kernelretsnoop, kernel_trace).
 */
#ifndef __GPUBPF_GPUTHREAD_H
#define __GPUBPF_GPUTHREAD_H

#include "gpu.h"

/* Hardware slots: one per resident thread, (SM, warp slot, lane). A thread
 * keeps its slot from entry to exit, and no two resident threads share
 * one, whatever the grid or the number of concurrent launches. */
#define GPU_MAX_SMS 256
#define GPU_WARP_SLOTS 64
#define GPU_HW_SLOTS (GPU_MAX_SMS * GPU_WARP_SLOTS * 32)

static __always_inline u32 gpu_warp_slot(void)
{
	return (u32)bpf_get_sm_id() * GPU_WARP_SLOTS + (u32)bpf_get_warp_id();
}

/* The thread's hardware slot, below GPU_HW_SLOTS for SM ids below
 * GPU_MAX_SMS. */
static __always_inline u32 gpu_hw_slot(void)
{
	return gpu_warp_slot() * 32 + (u32)bpf_get_lane_id();
}

/* Adds n to value idx of a u64 array map (out-of-range idx: nothing). */
static __always_inline void gpu_array_add(void *map, u32 idx, u64 n)
{
	u64 *v = bpf_map_lookup_elem(map, &idx);

	if (v)
		__sync_fetch_and_add(v, n);
}

/* The lanes exiting (or entering) together: their mask, how many they
 * are and the lowest of them, which does the group's atomics. */
struct gpu_group {
	u32 mask, n, leader;
};

/* Set bits of x (BPF has no population count instruction). */
static __always_inline u32 gpu_popc(u32 x)
{
	x = x - ((x >> 1) & 0x55555555);
	x = (x & 0x33333333) + ((x >> 2) & 0x33333333);
	x = (x + (x >> 4)) & 0x0F0F0F0F;
	return (x * 0x01010101) >> 24;
}

static __always_inline struct gpu_group gpu_warp_group(void)
{
	struct gpu_group g;
	u32 m = bpf_gpu_active_mask(), b = m & -m, i = 0;

	if (b & 0xFFFF0000) i += 16;
	if (b & 0xFF00FF00) i += 8;
	if (b & 0xF0F0F0F0) i += 4;
	if (b & 0xCCCCCCCC) i += 2;
	if (b & 0xAAAAAAAA) i += 1;
	g.mask = m;
	g.n = gpu_popc(m);
	g.leader = i;
	return g;
}

/* The sum of v over the lanes of group g, in every lane of it: a butterfly
 * of five shuffles when the whole warp is there (a kernel's exit, mostly),
 * else one shuffle per lane of the group. Every lane of g must call it. */
static __always_inline u64 gpu_group_sum(struct gpu_group g, u64 v)
{
	u64 lane = bpf_get_lane_id(), sum = 0;
	u32 i;

	if (g.mask == 0xFFFFFFFF) {
		v += bpf_gpu_shfl(v, lane ^ 16, g.mask);
		v += bpf_gpu_shfl(v, lane ^ 8, g.mask);
		v += bpf_gpu_shfl(v, lane ^ 4, g.mask);
		v += bpf_gpu_shfl(v, lane ^ 2, g.mask);
		v += bpf_gpu_shfl(v, lane ^ 1, g.mask);
		return v;
	}
	for (i = 0; i < 32; i++)
		if (g.mask & (1U << i))
			sum += bpf_gpu_shfl(v, i, g.mask);
	return sum;
}

/* Linear thread index in the block, and the block's linear index. */
static __always_inline u64 gpu_thread_in_block(u64 *threads_per_block)
{
	u64 tx, ty, tz, bx, by, bz;

	bpf_get_thread_idx(&tx, &ty, &tz);
	bpf_get_block_dim(&bx, &by, &bz);
	*threads_per_block = bx * by * bz;
	return (tz * by + ty) * bx + tx;
}

static __always_inline u64 gpu_block_linear(void)
{
	u64 x, y, z, gx, gy, gz;

	bpf_get_block_idx(&x, &y, &z);
	bpf_get_grid_dim(&gx, &gy, &gz);
	return (z * gy + y) * gx + x;
}

/* One GPU thread at a probe: kernel_trace's and kernelretsnoop's record. */
struct gpu_thread_event {
	u64 ts;		/* %globaltimer */
	u64 grid;	/* %gridid: which launch */
	u32 block_x, block_y, block_z;
	u32 thread_x, thread_y, thread_z;
	u32 sm, warp, lane;
	u32 kernel;	/* bpf_gpu_kernel_index */
};

static __always_inline void gpu_fill_event(struct gpu_thread_event *e, u64 ts)
{
	u64 x, y, z;

	e->ts = ts;
	e->grid = bpf_gpu_grid_id();
	bpf_get_block_idx(&x, &y, &z);
	e->block_x = x, e->block_y = y, e->block_z = z;
	bpf_get_thread_idx(&x, &y, &z);
	e->thread_x = x, e->thread_y = y, e->thread_z = z;
	e->sm = bpf_get_sm_id();
	e->warp = bpf_get_warp_id();
	e->lane = bpf_get_lane_id();
	e->kernel = bpf_gpu_kernel_index();
}

/* Log-linear buckets (8 per power of two, exact below 16): ~12% wide, so
 * medians and p99s read from them are within 12%. The host's
 * toolkit.LinLogLower is the inverse. */
#define LINLOG_BUCKETS 320

static __always_inline u32 linlog_bucket(u64 v)
{
	/* floor(log2(v)) with no branch: smear the top bit down, count the
	 * ones. Branches here, inside the loops that call it, made the kernel's
	 * verifier (which checks every GPU program first) give up on the
	 * number of paths. */
	u64 x = v;
	u32 e, b;

	if (v < 16)
		return v;
	x |= x >> 1;
	x |= x >> 2;
	x |= x >> 4;
	x |= x >> 8;
	x |= x >> 16;
	x |= x >> 32;
	e = gpu_popc((u32)x) + gpu_popc((u32)(x >> 32)) - 1;
	b = 16 + (e - 4) * 8 + ((v >> (e - 3)) & 7);
	return b < LINLOG_BUCKETS ? b : LINLOG_BUCKETS - 1;
}

#endif /* __GPUBPF_GPUTHREAD_H */
