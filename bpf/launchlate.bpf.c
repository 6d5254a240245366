// SPDX-License-Identifier: BSD-2-Clause
// launchlate: how long after the CPU called a launch API each kernel
// started on the GPU. The agent stamps each launch as it reaches the
// driver; with --uprobe, a Linux uprobe on the runtime launch APIs stamps
// the calling thread's slot of a kernel map shared with the GPU as the
// application calls them (the tool leaves these programs out otherwise);
// the agent hands the stamp to the instrumented launch (its hidden launch
// words), and the entry
// probe of the kernel's first thread (global thread id 0) stores the pair
// with %globaltimer, per launch, in device memory. Kernels of CUDA graphs
// get the address of their graph's stamp word instead (kind LL_GRAPH_WORD):
// the agent writes the graph launch's stamp there in stream order just
// before each graph launch; nodes the agent swapped into an executable
// graph made before the probes get an id (kind LL_GRAPH_SEQ) whose runs
// the probe counts, and the tool joins run k with the stamp of the graph's
// launch k since the swap, which the agent kept (no stream operation per
// graph launch). The tool reads the starts, converts globaltimer to the
// CPU clock with its calibration and keeps the histograms.
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

/* In device memory: a store across the host link costs each launch
 * 0.10-0.13 us of GPU time however it is written (the kernel's end waits
 * for it), one into device memory 0-0.06 (H100, ptxab). The tool reads the
 * table every 100 ms live (a copy-engine snapshot that does not wait for
 * the application's queued launches, nor hold them up). */
GPUBPF_MAP(starts, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, struct ll_start, LL_STARTS + LL_GRAPH_STARTS);
/* Kernel starts recorded (the tool compares with what it read). */
GPUBPF_MAP(nstarts, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u64, 1);
/* Timed starts of graph kernels so far: their turn in the graph part of
 * starts. */
GPUBPF_MAP(graph_seq, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u64, 1);
/* Starts of kernels launched by CUDA graphs without a stamp (a node made
 * before the trace began, a graph launched by a path the agent did not
 * stamp), per kernel index: counted, not timed. */
#define LL_KERNELS 256
GPUBPF_MAP(graph_starts, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u64, LL_KERNELS);
/* Runs of each swapped graph kernel node so far, by its id (LL_GRAPH_SEQ):
 * a node's runs follow its exec's launches one for one. */
GPUBPF_MAP(node_runs, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u64, LL_SEQ_IDS);

static __always_inline void count(u32 i)
{
	u64 *n = bpf_map_lookup_elem(&calls, &i);

	if (n)
		*n += 1;
}

/* Only the runtime API is probed: a driver-API launch reaches the agent's
 * wrapper before any uprobe in libcuda could fire, so the agent stamps
 * those itself, and probing libcuda too would cost every runtime launch a
 * second trap (cudart calls the driver underneath). */
static __always_inline int stamp(u32 kind)
{
	u64 now = bpf_ktime_get_ns();
	u32 tid = (u32)bpf_get_current_pid_tgid();
	u32 slot = (tid * 4) & (LL_SLOTS - 1); /* a cache line per thread: see the agent */
	struct ll_stamp *s = bpf_map_lookup_elem(&launch_stamps, &slot);

	if (!s)
		return 0;
	s->t = now;
	s->tag = (u64)tid << 32 | kind | LL_PENDING;
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
	u64 kind = info >> 56;
	u64 cpu, grid = bpf_gpu_grid_id();
	u32 zero = 0, slot;

	if (kind == LL_GRAPH_NODE || kind == LL_GRAPH_WORD || kind == LL_GRAPH_SEQ) {
		/* The graph launch's stamp, which the agent wrote to the
		 * graph's word in stream order before the launch, or the run's
		 * index (LL_GRAPH_SEQ). The word's address is a number to the
		 * verifier: read it with the helper (a failed read leaves 0,
		 * no stamp). */
		u64 word = 0; /* its own variable: the read takes its address,
			       * which keeps it in local memory, and the
			       * common path's cpu stays in a register */
		u32 id = info & (LL_SEQ_IDS - 1);
		u64 *runs = 0;

		if (kind == LL_GRAPH_SEQ && id && (info & ((1ULL << 56) - 1)) < LL_SEQ_IDS)
			runs = bpf_map_lookup_elem(&node_runs, &id);
		if (kind == LL_GRAPH_WORD && (info & ((1ULL << 56) - 1)))
			bpf_probe_read_kernel(&word, sizeof(word), (void *)(info & ((1ULL << 56) - 1)));
		cpu = word;
		if (!cpu && !runs) {
			u32 k = kernel < LL_KERNELS ? kernel : LL_KERNELS - 1;
			u64 *g = bpf_map_lookup_elem(&graph_starts, &k);

			if (g)
				__sync_fetch_and_add(g, 1);
			return 0;
		}
		u64 *q = bpf_map_lookup_elem(&graph_seq, &zero);

		if (!q)
			return 0;
		/* Both atomics go out before either answer is used: the
		 * launch's first thread waits one round trip to L2, not two
		 * (the kernel's end waits for that thread). */
		if (runs) {
			cpu = __sync_fetch_and_add(runs, 1);
			info = (u64)LL_GRAPH_SEQ << 56 | id;
		} else {
			info = (u64)LL_GRAPH_WORD << 56; /* the stream is not known */
		}
		slot = LL_STARTS + (__sync_fetch_and_add(q, 1) & (LL_GRAPH_STARTS - 1));
	} else {
		cpu = bpf_gpu_launch_word(0);
		slot = grid & (LL_STARTS - 1);
	}
	struct ll_start *s = bpf_map_lookup_elem(&starts, &slot);

	if (!s)
		return 0;
	s->gpu = now;
	s->cpu = cpu;
	s->info = info;
	s->grid = (grid & ((1ULL << 48) - 1)) | kernel << 48;
	u64 *n = bpf_map_lookup_elem(&nstarts, &zero);
	if (n)
		__sync_fetch_and_add(n, 1);
	return 0;
}
