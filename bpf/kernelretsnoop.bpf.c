// SPDX-License-Identifier: BSD-2-Clause
// kernelretsnoop: when each GPU thread exits, relative to the others.
// At every exit (also predicated and early returns) the lanes exiting
// together read %globaltimer; their lowest lane does the group's atomics:
// a warp that exits as one group only counts one on-time warp; a warp
// whose lanes exit apart learns its first exit from its hardware warp slot
// (compare-and-swap from 0 by the first group; the last group clears it
// for the next warp in that slot) and counts each lane's lateness per
// (kernel, lane) in log-linear buckets. The exit relative to the launch's
// first exit is counted per kernel. Counters hit by every warp are sharded
// by SM, so no address takes an atomic from every warp of a launch. The
// default view ships no record per thread; with events set every exit is
// also a ring record.
#include "types.h"
#include <bpf/bpf_helpers.h>
#include "gputhread.h"

const volatile u32 max_kernels = 16;
const volatile u32 events = 0;

#define SHARDS 32
/* First exit time and exited lanes of the warp in each hardware warp slot. */
GPUBPF_MAP(wfirst, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u64, GPU_MAX_SMS * GPU_WARP_SLOTS);
GPUBPF_MAP(wexited, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u64, GPU_MAX_SMS * GPU_WARP_SLOTS);
/* Per kernel: 32 lanes x LINLOG_BUCKETS of (exit - warp's first exit), for
 * warps whose lanes exit apart. */
GPUBPF_MAP(lanehist, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u64, 1);
/* Per kernel x SHARDS: full warps whose 32 lanes exited together. */
GPUBPF_MAP(ontime, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u64, 1);
/* Per kernel x SHARDS: LINLOG_BUCKETS of (exit - launch's first exit). */
GPUBPF_MAP(spreadhist, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u64, 1);
/* First exit of recent launches: (grid id low 24 bits) << 40 | time low 40 bits. */
#define LAUNCH_SLOTS 256
GPUBPF_MAP(launchfirst, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u64, LAUNCH_SLOTS);
/* [0] exits in a kernel beyond max_kernels (or unknown), [1] exits on an
 * SM beyond the slot table. */
GPUBPF_MAP(lost, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u64, 4);

struct {
	__uint(type, BPF_MAP_TYPE_GPU_RINGBUF_MAP);
	__uint(max_entries, 1 << 25);
	__type(key, u32);
	__type(value, u32);
} exits SEC(".maps");

#define T40 ((1ULL << 40) - 1)

SEC("gpu/exit/*")
int kernelretsnoop_exit(void *ctx)
{
	u64 now = bpf_ktime_get_ns();
	struct gpu_group g = gpu_warp_group();
	u32 lane = bpf_get_lane_id();
	int leader = lane == g.leader;
	u64 kernel = bpf_gpu_kernel_index();
	u32 sm = bpf_get_sm_id();
	u32 shard = sm % SHARDS;

	if (events) {
		struct gpu_thread_event e = {};
		gpu_fill_event(&e, now);
		bpf_ringbuf_output(&exits, &e, sizeof(e), 0);
	}
	if (kernel >= max_kernels) {
		if (leader)
			gpu_array_add(&lost, 0, g.n);
		return 0;
	}
	if (g.n == 32) {
		if (leader)
			gpu_array_add(&ontime, kernel * SHARDS + shard, 1);
	} else {
		u64 tpb, t = gpu_thread_in_block(&tpb), first = 0, late = 0, lanes;
		u32 ws = gpu_warp_slot();
		u64 *wf = bpf_map_lookup_elem(&wfirst, &ws);
		u64 *we = bpf_map_lookup_elem(&wexited, &ws);

		if (!wf || !we) {
			if (leader)
				gpu_array_add(&lost, 1, g.n);
			return 0;
		}
		lanes = tpb - (t & ~31ULL);
		if (lanes > 32)
			lanes = 32;
		if (leader) {
			first = __sync_val_compare_and_swap(wf, 0, now);
			/* The warp's last group frees the slot for the next warp. */
			if (__sync_fetch_and_add(we, g.n) + g.n >= lanes) {
				__sync_lock_test_and_set(we, 0);
				__sync_lock_test_and_set(wf, 0);
			}
		}
		first = bpf_gpu_shfl(first, g.leader, g.mask);
		if (first != 0 && first < now)
			late = now - first;
		gpu_array_add(&lanehist, (kernel * 32 + lane) * LINLOG_BUCKETS + linlog_bucket(late), 1);
	}

	/* Launch spread: the first exit of this launch, tagged with its grid id. */
	if (leader) {
		u64 grid = bpf_gpu_grid_id() & 0xFFFFFF;
		u32 ls = grid % LAUNCH_SLOTS;
		u64 *lf = bpf_map_lookup_elem(&launchfirst, &ls);
		if (lf) {
			u64 cur = *lf, mine = grid << 40 | (now & T40), late;
			if (cur >> 40 != grid) {
				u64 old = __sync_val_compare_and_swap(lf, cur, mine);
				cur = old == cur ? mine : old;
			}
			late = ((now & T40) - (cur & T40)) & T40;
			if (cur >> 40 != grid || late > (1ULL << 39))
				late = 0;
			gpu_array_add(&spreadhist, (kernel * SHARDS + shard) * LINLOG_BUCKETS + linlog_bucket(late), g.n);
		}
	}
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
