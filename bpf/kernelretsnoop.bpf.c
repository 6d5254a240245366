// SPDX-License-Identifier: BSD-2-Clause
// kernelretsnoop: when each GPU thread exits, relative to the others.
// At every exit (also predicated and early returns) each lane takes the
// time it reached the exit (bpf_gpu_site_time: read before the probe's own
// branch, so lanes that leave early are not timed after the lanes the warp
// ran first); the lowest lane of the lanes exiting together does the
// group's atomics. A warp that exits as one group makes one atomic add: its
// 32 exits into the launch spread (the tool counts on-time warps as the
// spread's exits less the lane table's, so they need no counter of their
// own). In a warp whose lanes exit apart, the first group leaves its time
// in the warp's hardware slot with its lanes (one atomic per group); every
// later group reads it back and each lane counts its own lateness per
// (kernel, lane) in log-linear buckets. The exit relative to the launch's first exit is
// counted per kernel. Counters hit by every warp are sharded by SM, so no
// address takes an atomic from every warp of a launch. The default view
// ships no record per thread; with events set every exit is also a ring
// record.
#include "types.h"
#include <bpf/bpf_helpers.h>
#include "gputhread.h"

const volatile u32 max_kernels = 16;
const volatile u32 events = 0;

#define SHARDS 32
/* The split warp in each hardware warp slot: the low 32 bits of its first
 * group's exit time << 32 | the lanes that exited so far (bit per lane). */
struct warp_exits {
	u64 exited;
};
GPUBPF_MAP(wexits, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, struct warp_exits, GPU_MAX_SMS * GPU_WARP_SLOTS);
/* Per kernel: 32 lanes x LINLOG_BUCKETS of (exit - warp's first exit), for
 * warps whose lanes exit apart. */
GPUBPF_MAP(lanehist, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u64, 1);
/* Per kernel x SHARDS: LINLOG_BUCKETS of (exit - launch's first exit), every
 * exit counted once (also those of split warps, which lanehist counts too). */
GPUBPF_MAP(spreadhist, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u64, 1);
/* First exit of recent launches: (grid id low 24 bits) << 40 | time low 40 bits. */
#define LAUNCH_SLOTS 256
GPUBPF_MAP(launchfirst, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u64, LAUNCH_SLOTS);
/* [0] exits in a kernel beyond max_kernels (or unknown), [1] exits on an
 * SM beyond the slot table, [2] exits of a split warp whose other exits
 * were never seen (not counted per lane). */
GPUBPF_MAP(lost, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u64, 4);

struct {
	__uint(type, BPF_MAP_TYPE_GPU_RINGBUF_MAP);
	__uint(max_entries, 1 << 25);
	__type(key, u32);
	__type(value, u32);
} exits SEC(".maps");

#define T40 ((1ULL << 40) - 1)

/* A warp whose lanes exit apart: out of line (a called function, not pasted
 * at every exit), so the common case of whole warps carries none of its
 * code. The lanes exiting together call it together. The first group to
 * exit leaves its time in the warp's slot word with its lanes; each later
 * group reads it back with its own lanes' bits and every lane counts its
 * own lateness: no lane waits for the others, none counts for 32. */
static __noinline void split_exit(u64 now, u64 kernel)
{
	struct gpu_group g = gpu_warp_group();
	u32 lane = bpf_get_lane_id();
	u64 tpb, t = gpu_thread_in_block(&tpb), lanes, all, old = 0, first = 0;
	u32 ws = gpu_warp_slot();
	struct warp_exits *w = bpf_map_lookup_elem(&wexits, &ws);

	if (!w) {
		if (lane == g.leader)
			gpu_array_add(&lost, 1, g.n);
		return;
	}
	lanes = tpb - (t & ~31ULL);
	if (lanes > 32)
		lanes = 32;
	all = lanes == 32 ? 0xFFFFFFFFULL : (1ULL << lanes) - 1;
	if (lane == g.leader) {
		u64 mine = (now & 0xFFFFFFFFULL) << 32 | g.mask;

		/* one compare-and-swap when this group is the warp's first */
		old = __sync_val_compare_and_swap(&w->exited, 0, mine);
		if (old)
			old = __sync_fetch_and_or(&w->exited, (u64)g.mask);
		if (old & g.mask) {
			/* Lanes left by a warp whose exits were not all seen:
			 * count them lost and start this warp afresh. */
			gpu_array_add(&lost, 2, gpu_popc((u32)old & ~g.mask));
			__sync_lock_test_and_set(&w->exited, mine);
			old = 0;
		}
		first = old ? old >> 32 : now & 0xFFFFFFFFULL;
		if ((((u32)old | g.mask) & all) == all)
			__sync_lock_test_and_set(&w->exited, 0);
	}
	first = bpf_gpu_shfl(first, g.leader, g.mask);
	/* 32-bit clock arithmetic: lateness below 4 s; a lane of the first
	 * group a little before its leader is on time */
	u32 late = (u32)now - (u32)first;
	if (late > 0x80000000U)
		late = 0;
	gpu_array_add(&lanehist, (kernel * 32 + lane) * LINLOG_BUCKETS + linlog_bucket(late), 1);
}

SEC("gpu/exit/*")
int kernelretsnoop_exit(void *ctx)
{
	u64 now = bpf_gpu_site_time();
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
	if (g.n != 32)
		split_exit(now, kernel);

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
