/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * gpu.h - what a gpubpf GPU program may call and which maps it may use.
 *
 * A GPU program is an ordinary eBPF program in a section that names a CUDA
 * kernel; gpubpf compiles it to PTX and runs it inside every thread of that
 * kernel:
 *
 *   SEC("kprobe/<kernel>")      at kernel entry (or at a stub-hook call, below)
 *   SEC("kretprobe/<kernel>")   before every exit of the kernel
 *   (a "cuda_" prefix before a mangled name, e.g. "kretprobe/cuda__Z9vectorAddPKfS0_Pf",
 *   is accepted and stripped, as bpftime does)
 *   SEC("gpu/entry/<kernel>"), SEC("gpu/exit/<kernel>")   the same, spelled for GPUs
 *
 * <kernel> is a mangled name, a demangled name or a glob; tools may retarget
 * a program at run time with --kernel.
 *
 * Stub hook: a kernel that calls a __noinline__ device function named
 * __bpftime_cuda__kernel_trace() (or __gpubpf_hook_<name>()) gets the entry
 * probe at that call instead of at kernel entry.
 *
 * The helper numbers and map type numbers are bpftime's, so its GPU programs
 * run unchanged.
 */
#ifndef __GPUBPF_GPU_H
#define __GPUBPF_GPU_H

#include "types.h"

/* ---- map types ---------------------------------------------------------- */

/* Device-resident hash map: lock-free insert/lookup/delete, bounded probing. */
#define BPF_MAP_TYPE_GPU_HASH_MAP 1501
/* One value slot per global GPU thread id (key is ignored on the GPU side). */
#define BPF_MAP_TYPE_PERGPUTD_ARRAY_MAP 1502
/* One array shared by all GPU threads, in device memory. */
#define BPF_MAP_TYPE_GPU_ARRAY_MAP 1503
/* A real kernel BPF array (BPF_F_MMAPABLE) that GPU and CPU programs share. */
#define BPF_MAP_TYPE_GPU_KERNEL_SHARED_ARRAY_MAP 1504
/* GPU ring buffer: events out through bpf_perf_event_output/bpf_ringbuf_*. */
#define BPF_MAP_TYPE_GPU_RINGBUF_MAP 1527

/* ---- GPU helpers (IDs 501-511) ------------------------------------------ */

/* Print a NUL-terminated string; becomes a ring-buffer record the host prints. */
static long (*const bpf_puts)(const char *str) = (void *)501;
/* Kept for bpftime programs. */
static long (*const ebpf_puts)(const char *str) = (void *)501;
/* %globaltimer: nanoseconds, epoch-like but NOT CLOCK_REALTIME (see DESIGN). */
static u64 (*const bpf_get_globaltimer)(void) = (void *)502;
/* blockIdx, blockDim, threadIdx, gridDim: each writes x, y, z. Returns 0. */
static long (*const bpf_get_block_idx)(u64 *x, u64 *y, u64 *z) = (void *)503;
static long (*const bpf_get_block_dim)(u64 *x, u64 *y, u64 *z) = (void *)504;
static long (*const bpf_get_thread_idx)(u64 *x, u64 *y, u64 *z) = (void *)505;
/* System-scope memory fence (membar.sys). */
static long (*const bpf_gpu_membar)(void) = (void *)506;
/* End the calling GPU thread (the kernel's own code does not run on). */
static long (*const bpf_gpu_exit)(void) = (void *)507;
static long (*const bpf_get_grid_dim)(u64 *x, u64 *y, u64 *z) = (void *)508;
/* %smid, %warpid, %laneid. */
static u64 (*const bpf_get_sm_id)(void) = (void *)509;
static u64 (*const bpf_get_warp_id)(void) = (void *)510;
static u64 (*const bpf_get_lane_id)(void) = (void *)511;

/* ---- map definition helper ---------------------------------------------- */

#define GPUBPF_MAP(_name, _type, _key, _value, _max)   \
	struct {                                       \
		__uint(type, _type);                   \
		__uint(max_entries, _max);             \
		__type(key, _key);                     \
		__type(value, _value);                 \
	} _name SEC(".maps")

#endif /* __GPUBPF_GPU_H */
