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
 *   SEC("kprobe/__memcapture")  right after every global load, store and atomic of
 *                               every kernel (bpftime's name), ctx: struct
 *                               gpubpf_mem_access (below)
 *   SEC("gpu/mem/<kernel>")     the same in the named kernels only
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
/* One copy of the array per global GPU thread id (linear over the 3-D grid);
 * on the GPU, lookup/update address the calling thread's copy (key selects
 * the value within it, 0 for the usual max_entries 1). Threads beyond the
 * map's thread capacity get NULL and are counted, never written. */
#define BPF_MAP_TYPE_PERGPUTD_ARRAY_MAP 1502
/* One array shared by all GPU threads, in device memory. */
#define BPF_MAP_TYPE_GPU_ARRAY_MAP 1503
/* A real kernel BPF array (BPF_F_MMAPABLE) that GPU and CPU programs share. */
#define BPF_MAP_TYPE_GPU_KERNEL_SHARED_ARRAY_MAP 1504
/* The same two arrays in pinned host memory (bpftime's types): the tool
 * reads them live, while the kernels run, with no copy (gpubpf run -i N
 * prints them every N seconds); every GPU access crosses PCIe, far slower
 * than device memory, so keep them for values read often from the host.
 * gpubpf pins at most 1 GiB of them per GPU context. */
#define BPF_MAP_TYPE_PERGPUTD_ARRAY_HOST_MAP 1512 /* per-thread, like 1502 */
#define BPF_MAP_TYPE_GPU_ARRAY_HOST_MAP 1513	  /* shared, like 1503 */
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

/* ---- gpubpf extensions (IDs 600+) ------------------------------------------ */

/* Which kernel this probe runs in: a small number the tool maps back to the
 * kernel's name (runtime Session.KernelName), the same in every process of
 * one tool run. 0xFFFFFFFF where it cannot be known when the probe is placed:
 * in a __noinline subprogram, or at a site inside a device function that
 * several instrumented kernels call. */
static u64 (*const bpf_gpu_kernel_index)(void) = (void *)600;
/* %gridid: the launch's temporal grid id, distinct for every launch in one
 * CUDA context (per-launch attribution). */
static u64 (*const bpf_gpu_grid_id)(void) = (void *)601;
/* __activemask(): the lanes of the warp running this call together. */
static u64 (*const bpf_gpu_active_mask)(void) = (void *)602;
/* __shfl_sync(mask, value, src_lane) on 64 bits: every lane in mask must
 * make the same call. With bpf_gpu_active_mask, lets one lane (the lowest
 * of the mask) do a warp's atomics and hand the result to the others. */
static u64 (*const bpf_gpu_shfl)(u64 value, u64 src_lane, u64 mask) = (void *)603;
/* %globaltimer (ns) as the thread reached the probe's site, read before any
 * code of the probe runs, even its guard. Where a warp's lanes diverge (an
 * early return for some lanes), the warp runs one path and then the other:
 * bpf_ktime_get_ns would time the lanes it runs second after the first
 * path, this one times each lane where it got to the site. In a
 * __noinline subprogram (or with GPUBPF_NO_INLINE) it is the time of the
 * call. */
static u64 (*const bpf_gpu_site_time)(void) = (void *)604;
/* The launch words the agent passed with this launch (i = 0 or 1), for
 * tools that stamp launches on the CPU (runtime Options.LaunchWords): word
 * 0 is the launching thread's CPU stamp (0: none), word 1 the stream |
 * kind << 56. 0 in a __noinline subprogram or a device function, where
 * the kernel's parameters are out of reach. */
static u64 (*const bpf_gpu_launch_word)(u64 i) = (void *)605;
/* The thread's global linear id: (block linear index) * (threads per
 * block) + (thread linear index in its block); 0 for the first thread of
 * the launch. Computed from special registers, with no stack traffic. */
static u64 (*const bpf_gpu_thread_id)(void) = (void *)606;
/* %globaltimer (ns) as this thread entered its kernel, read before any of
 * the kernel's own code: an exit probe gets its thread's start without an
 * entry probe storing it to memory and the exit loading it back. 0 in a
 * __noinline subprogram, in a device function, or where several programs
 * share a site (they are called, not pasted into the kernel). */
static u64 (*const bpf_gpu_entry_time)(void) = (void *)607;
/* Atomically *p = max(*p, v) (unsigned), returning the old *p: one
 * atom.max, which BPF's atomic instructions lack. p points into a map
 * value (or the stack) with 8 bytes to write. */
static u64 (*const bpf_gpu_atomic_max)(u64 *p, u64 v) = (void *)608;

/* ---- probe context ------------------------------------------------------ */

/*
 * A GPU probe's ctx argument points to a per-thread copy of the launch
 * parameters of the kernel it is injected into, laid out exactly like
 * CUDA's kernelParams buffer: every parameter of the kernel's PTX entry, in
 * declaration order, each at its natural alignment (a .u32 at a multiple of
 * 4, a .u64 or pointer at a multiple of 8, a .align N .b8 array at a
 * multiple of N). For vectorAdd(const float *A, const float *B, float *C,
 * int n): A at 0, B at 8, C at 16, n at 24.
 *
 *   const float *a = GPUBPF_ARG(ctx, const float *, 0);
 *   int n = GPUBPF_ARG(ctx, int, 24);
 *
 * Pointers read this way are device addresses: read through them with
 * bpf_probe_read_kernel (see its limit below), not with a plain load,
 * which the verifier refuses.
 * A probe that never reads ctx costs nothing for it (the compiler tells the
 * injector, which then builds no copy and passes 0).
 *
 * ctx may be read anywhere in its first 4096 bytes (CUDA's classic limit on
 * a kernel's parameters; the verifier holds every ctx access to it). Past
 * the kernel's parameters it reads zeros, and so does all of it where the
 * parameters are out of reach: an exit (or a stub hook) inside a device
 * function. The copy is as long as the program's furthest ctx access at a
 * constant offset; a ctx pointer moved by a variable, stored anywhere but
 * the stack, or passed to a __noinline function or to a helper that reads
 * through it (a map key, bpf_probe_read's src) costs the full 4096 bytes,
 * zero-filled, in every thread.
 *
 * The memory-access probe gets struct gpubpf_mem_access instead (zeros
 * after it, likewise).
 */
#define GPUBPF_ARG(ctx, type, offset) \
	(*(const type *)((const char *)(ctx) + (offset)))

/*
 * A memory-access probe's ctx: one global memory access of the kernel's
 * own code, as the thread made it (the probe runs right after it).
 * Reported: ld, ldu, st (global or generic addresses, any ordering, cache
 * or vector qualifier), atom and red. Not reported: shared, local, param
 * and constant memory, prefetches, cp.async and bulk/TMA copies, texture
 * and surface access. A generic address may point to shared or local
 * memory: it is reported as the generic address the thread used.
 */
struct gpubpf_mem_access {
	u64 addr;	/* generic address accessed (the first byte) */
	u32 size;	/* bytes: the whole vector for .v2/.v4/.v8 forms */
	u32 kind;	/* GPUBPF_MEM_LOAD, _STORE or _ATOMIC */
};

/* Values of gpubpf_mem_access.kind. The field was is_store (0 load, 1
 * store) and keeps its place and values: a program that tests it for
 * non-zero sees stores, and atomics, which write too, as stores. */
#define GPUBPF_MEM_LOAD   0
#define GPUBPF_MEM_STORE  1
#define GPUBPF_MEM_ATOMIC 2	/* read-modify-write: atom.* and red.* */

/* ---- standard helpers as they behave on the GPU ---------------------------
 *
 * bpf_map_lookup_elem/update/delete  every GPU map kind (array, per-thread
 *     array: the calling thread's copy, hash, kernel-shared array)
 * bpf_trace_printk / bpf_printk  a record in the printk ring (format + up
 *     to 3 integer args; the host formats %d %u %x %p %c; %s is not supported)
 * bpf_get_current_pid_tgid  the traced application's tgid<<32 | tgid
 * bpf_ktime_get_ns          %globaltimer (same as bpf_get_globaltimer)
 * bpf_get_smp_processor_id  %smid
 * bpf_get_prandom_u32       per-thread, stateless (timer, clock, thread id)
 * bpf_perf_event_output, bpf_ringbuf_output/reserve/submit/discard
 *     records in a GPU ring buffer (drops are counted, never waited for)
 * bpf_probe_read_kernel/_user, bpf_probe_read (dst, size, src)
 *     copy size bytes from the device (generic) address src and return 0;
 *     user and kernel are one address space on the GPU. This is how a
 *     program reads through a pointer it got from ctx or a launch word:
 *     the verifier refuses a plain load through such a number.
 * bpf_probe_read_kernel_str/_user_str, bpf_probe_read_str (dst, size, src)
 *     copy up to size-1 bytes, stopping after a NUL; dst is always
 *     NUL-terminated (size > 0) and the rest of it left as it was; return
 *     the bytes written including the NUL (0 when size is 0).
 *     Limit of both: only src in the first page (NULL, or a field of a NULL
 *     struct pointer) is caught (dst zeroed, -EFAULT, as in Linux). A GPU
 *     load cannot fail softly: any other address not mapped on the device
 *     still faults, and that ends the application's CUDA context.
 * Not available on the GPU (refused at compile time, naming the C line):
 * bpf_tail_call, kfuncs, callbacks (bpf_loop), may_goto.
 */

/* ---- map definition helper ---------------------------------------------- */

#define GPUBPF_MAP(_name, _type, _key, _value, _max)   \
	struct {                                       \
		__uint(type, _type);                   \
		__uint(max_entries, _max);             \
		__type(key, _key);                     \
		__type(value, _value);                 \
	} _name SEC(".maps")

#endif /* __GPUBPF_GPU_H */
