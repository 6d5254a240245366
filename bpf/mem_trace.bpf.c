// SPDX-License-Identifier: BSD-2-Clause
// mem_trace: counts, on the GPU, every global load, store and atomic of
// every instrumented kernel, by kernel and kind, and how many accesses of
// each size there were. bpftime's section name (its mem_trace example's),
// so it runs in every kernel; -k narrows it:
//   sudo gpubpf run bpf/examples/mem_trace_bpfel.o -- samples/bin/vec_add
//   sudo gpubpf run -k vectorAdd bpf/examples/mem_trace_bpfel.o -- samples/bin/vec_add
// gpubpf run prints both maps at the end, e.g. "{kernel=0 kind=load}: 2000",
// and which kernel each index stands for.
#include "types.h"
#include <bpf/bpf_helpers.h>
#include "gputhread.h"

enum mem_kind {
	load = GPUBPF_MEM_LOAD,
	store = GPUBPF_MEM_STORE,
	atomic = GPUBPF_MEM_ATOMIC,	/* atom and red: read-modify-write */
};

struct mem_key {
	/* bpf_gpu_kernel_index(): numbered as kernels get instrumented
	 * (gpubpf run names them after the maps). 4294967295 counts the
	 * accesses of device functions that several instrumented kernels
	 * call: which kernel ran them is not known where the probe is placed. */
	u32 kernel;
	enum mem_kind kind;
};

struct size_key {
	enum mem_kind kind;
	u32 bytes;	/* 1, 2, 4, 8; 16 for .v4.f32, .v2.f64, .b128; 32 for .v8.f32 */
};

GPUBPF_MAP(accesses, BPF_MAP_TYPE_GPU_HASH_MAP, struct mem_key, u64, 1024);
GPUBPF_MAP(sizes, BPF_MAP_TYPE_GPU_HASH_MAP, struct size_key, u64, 64);

/* Adds n to the counter of key, making it on first use. Concurrent first
 * uses of one key make one entry (the GPU hash map's insert waits for a
 * slot being written and compares keys), so no count is lost. */
static __always_inline void count(void *map, void *key, u64 n)
{
	u64 *v = bpf_map_lookup_elem(map, key);

	if (!v) {
		u64 zero = 0;

		bpf_map_update_elem(map, key, &zero, BPF_NOEXIST);
		v = bpf_map_lookup_elem(map, key);
		if (!v)
			return;	/* table full: gpubpf run shows the map's error count */
	}
	__sync_fetch_and_add(v, n);
}

SEC("kprobe/__memcapture")
int mem_trace(struct gpubpf_mem_access *ctx)
{
	/* This runs after every memory access of the kernel, so its own
	 * atomics must be few. The probe is pasted in at each access, and
	 * the lanes that run it together are at one access: same kernel,
	 * kind and size. The lowest of them counts for all of them, one pair
	 * of atomics per warp and access instead of one per thread. */
	struct gpu_group g = gpu_warp_group();

	if ((u32)bpf_get_lane_id() != g.leader)
		return 0;

	struct mem_key k = { .kernel = bpf_gpu_kernel_index(), .kind = ctx->kind };
	struct size_key s = { .kind = ctx->kind, .bytes = ctx->size };

	count(&accesses, &k, g.n);
	count(&sizes, &s, g.n);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
