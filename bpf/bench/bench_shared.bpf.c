// SPDX-License-Identifier: BSD-2-Clause
// bench_shared: the GPU updates a map shared with the CPU, a real kernel
// BPF array (type 1504, BPF_MAP_TYPE_GPU_KERNEL_SHARED_ARRAY_MAP) that the
// GPU reaches in host memory over the host link, at the entry of every
// kernel (scripts/gpu/table-bench.sh, mode "shared"; goal <= 2x). As a
// tool would, each warp updates it once: the lowest lane of the lanes
// entering together adds their number to slot (SM id % 64), a system-scope
// atomic; so the slots sum to the threads that entered. (One atomic per
// thread on host memory would serialise a launch's million threads on the
// host link.) Hand-written twin: samples/vec_add_ideal.cu, observation
// shared (atomicAdd_system on mapped pinned memory).
#include "types.h"
#include <bpf/bpf_helpers.h>
#include "gputhread.h"

#define SHARED_SLOTS 64

GPUBPF_MAP(shared_counts, BPF_MAP_TYPE_GPU_KERNEL_SHARED_ARRAY_MAP, u32, u64, SHARED_SLOTS);

SEC("gpu/entry/*")
int shared_entry(void *ctx)
{
	struct gpu_group g = gpu_warp_group();
	u32 slot;
	u64 *v;

	if (bpf_get_lane_id() != g.leader)
		return 0;
	slot = bpf_get_sm_id() % SHARED_SLOTS;
	v = bpf_map_lookup_elem(&shared_counts, &slot);
	if (v)
		__sync_fetch_and_add(v, g.n);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
