// SPDX-License-Identifier: BSD-2-Clause
// launchlate: how long after the CPU called a launch API each kernel
// started on the GPU. A Linux uprobe on the launch APIs stamps the calling
// thread's slot of a kernel map shared with the GPU; the agent hands the
// slot to the instrumented launch (its hidden launch words), and the entry
// probe of the kernel's first thread (global thread id 0) stores the pair
// with %globaltimer, per launch, in device memory. The tool reads the
// starts, converts globaltimer to the CPU clock with its calibration and
// keeps the histograms.
#include "types.h"
#include <bpf/bpf_helpers.h>
#include "gpu.h"
#include "launchlate.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

GPUBPF_MAP(launch_stamps, BPF_MAP_TYPE_GPU_KERNEL_SHARED_ARRAY_MAP, u32, struct ll_stamp, LL_SLOTS);
/* Launch API calls seen on the CPU, by kind (index 0: driver calls whose
 * runtime call had stamped already); per CPU, so threads launching side
 * by side do not contend for one counter. */
GPUBPF_MAP(calls, BPF_MAP_TYPE_PERCPU_ARRAY, u32, u64, 8);

GPUBPF_MAP(starts, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, struct ll_start, LL_STARTS);
/* Kernel starts recorded (the tool compares with what it read). */
GPUBPF_MAP(nstarts, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u64, 1);
/* Starts of kernels launched by CUDA graphs, per kernel index: a graph's
 * kernel keeps its grid id from one graph launch to the next, so they
 * cannot take a slot of their own; they are counted, not timed. */
#define LL_KERNELS 256
GPUBPF_MAP(graph_starts, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u64, LL_KERNELS);

#define NESTED_NS 200000ULL /* a driver call this soon after its runtime call is part of it */

static __always_inline void count(u32 i)
{
	u64 *n = bpf_map_lookup_elem(&calls, &i);

	if (n)
		*n += 1;
}

static __always_inline int stamp(u32 kind)
{
	u64 now = bpf_ktime_get_ns();
	u32 tid = (u32)bpf_get_current_pid_tgid();
	u32 slot = (tid * 4) & (LL_SLOTS - 1); /* a cache line per thread: see the agent */
	struct ll_stamp *s = bpf_map_lookup_elem(&launch_stamps, &slot);

	if (!s)
		return 0;
	if (kind == LL_DRIVER || kind == LL_GRAPH_DRV) {
		u64 tag = s->tag;

		/* Inside cudaLaunchKernel: keep the runtime call's time. */
		if ((tag >> 32) == tid && (tag & LL_PENDING) && now - s->t < NESTED_NS) {
			s->tag = tag & ~(u64)LL_PENDING;
			count(0);
			return 0;
		}
	}
	s->t = now;
	s->tag = (u64)tid << 32 | kind | (kind == LL_RUNTIME || kind == LL_GRAPH_RT ? LL_PENDING : 0);
	count(kind);
	return 0;
}

SEC("uprobe/libcudart.so:cudaLaunchKernel")
int ll_cudaLaunchKernel(void *ctx) { return stamp(LL_RUNTIME); }
SEC("uprobe/libcudart.so:cudaLaunchKernel_ptsz")
int ll_cudaLaunchKernel_ptsz(void *ctx) { return stamp(LL_RUNTIME); }
SEC("uprobe/libcudart.so:cudaLaunchKernelExC")
int ll_cudaLaunchKernelExC(void *ctx) { return stamp(LL_RUNTIME); }
SEC("uprobe/libcudart.so:cudaLaunchCooperativeKernel")
int ll_cudaLaunchCooperativeKernel(void *ctx) { return stamp(LL_RUNTIME); }
SEC("uprobe/libcudart.so:cudaGraphLaunch")
int ll_cudaGraphLaunch(void *ctx) { return stamp(LL_GRAPH_RT); }
SEC("uprobe/libcuda.so:cuLaunchKernel")
int ll_cuLaunchKernel(void *ctx) { return stamp(LL_DRIVER); }
SEC("uprobe/libcuda.so:cuLaunchKernel_ptsz")
int ll_cuLaunchKernel_ptsz(void *ctx) { return stamp(LL_DRIVER); }
SEC("uprobe/libcuda.so:cuLaunchKernelEx")
int ll_cuLaunchKernelEx(void *ctx) { return stamp(LL_DRIVER); }
SEC("uprobe/libcuda.so:cuLaunchKernelEx_ptsz")
int ll_cuLaunchKernelEx_ptsz(void *ctx) { return stamp(LL_DRIVER); }
SEC("uprobe/libcuda.so:cuLaunchCooperativeKernel")
int ll_cuLaunchCooperativeKernel(void *ctx) { return stamp(LL_DRIVER); }
SEC("uprobe/libcuda.so:cuGraphLaunch")
int ll_cuGraphLaunch(void *ctx) { return stamp(LL_GRAPH_DRV); }

SEC("gpu/entry/*")
int launchlate_entry(void *ctx)
{
	/* Every thread gets here; only the launch's first thread does more
	 * (and reads the clock): special registers, no memory. */
	if (bpf_gpu_thread_id() != 0)
		return 0;

	u64 now = bpf_ktime_get_ns();
	u64 info = bpf_gpu_launch_word(1);
	u64 kernel = bpf_gpu_kernel_index();
	u32 zero = 0;

	if ((info >> 56) == LL_GRAPH_NODE) {
		u32 k = kernel < LL_KERNELS ? kernel : LL_KERNELS - 1;
		u64 *g = bpf_map_lookup_elem(&graph_starts, &k);

		if (g)
			__sync_fetch_and_add(g, 1);
		return 0;
	}
	u64 grid = bpf_gpu_grid_id();
	u32 slot = grid & (LL_STARTS - 1);
	struct ll_start *s = bpf_map_lookup_elem(&starts, &slot);

	if (!s)
		return 0;
	s->gpu = now;
	s->cpu = bpf_gpu_launch_word(0);
	s->info = info;
	s->grid = (grid & ((1ULL << 48) - 1)) | kernel << 48;
	u64 *n = bpf_map_lookup_elem(&nstarts, &zero);
	if (n)
		__sync_fetch_and_add(n, 1);
	return 0;
}
