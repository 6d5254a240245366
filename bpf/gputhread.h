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

#endif /* __GPUBPF_GPUTHREAD_H */
