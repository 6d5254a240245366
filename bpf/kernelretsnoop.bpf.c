// SPDX-License-Identifier: BSD-2-Clause
// kernelretsnoop: when each GPU thread exits, relative to the others.
// At every exit (also predicated and early returns) each lane takes the
// time it reached the exit (bpf_gpu_site_time: read before the probe's own
// branch, so lanes that leave early are not timed after the lanes the warp
// ran first); the lowest lane of the lanes exiting together does the
// group's atomics. A warp that exits as one group makes one atomic add: its
// 32 exits into the launch spread (the tool counts on-time warps as the
// spread's exits less the lane table's, so they need no counter of their
// own). In a warp whose lanes exit apart, each group makes one atomic max
// on the warp's hardware slot word, tagged with the warp (its launch and
// block): the first group leaves its time there, every later group gets it
// back from the same atomic, and each lane counts its own lateness per
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
/* The split warp in each hardware warp slot: its tag (launch and block,
 * split_tag) << 32 | the complement of its first group's exit time (low 32
 * bits), so that an atomic max installs a newer warp's first exit and,
 * within one warp, keeps the earliest. No group resets it: the next warp
 * in the slot has another tag. */
struct warp_exits {
	u64 first;
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
 * SM beyond the slot table, [2] exits of a split warp whose slot word
 * other warps kept taking (not counted per lane). */
GPUBPF_MAP(lost, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u64, 4);

struct {
	__uint(type, BPF_MAP_TYPE_GPU_RINGBUF_MAP);
	__uint(max_entries, 1 << 25);
	__type(key, u32);
	__type(value, u32);
} exits SEC(".maps");

#define T40 ((1ULL << 40) - 1)

/* The warp's tag in its slot word: its launch (low 16 bits of the grid id)
 * and block (low 16 bits). Warps of one block hold their slots together,
 * so two warps in one slot differ in tag but for 65536 launches, or 65536
 * blocks of one launch, apart with no split warp in that slot between
 * them. A later occupant's tag is larger but for the wraps and blocks
 * started out of order, which split_exit mends with a swap. (A 40-bit tag
 * with the time in 24 bits of 32 ns ticks cost vec_add 1.7 us more at a
 * million threads, H100.) */
static __always_inline u64 split_tag(void)
{
	return (bpf_gpu_grid_id() & 0xFFFF) << 16 | (gpu_block_linear() & 0xFFFF);
}

/* A warp whose lanes exit apart: out of line (a called function, not pasted
 * at every exit), so the common case of whole warps carries none of its
 * code. The lanes exiting together call it together. Their leader makes
 * one atomic max on the warp's slot word: it installs this group's exit
 * when the group is the warp's first, and otherwise returns the first's
 * (one round trip to L2 per group; no group waits for another's). */
static __noinline void split_exit(u64 now, u64 kernel)
{
	struct gpu_group g = gpu_warp_group();
	u32 lane = bpf_get_lane_id();
	u32 ws = gpu_warp_slot();
	struct warp_exits *w = bpf_map_lookup_elem(&wexits, &ws);
	u64 first = 0;

	if (!w) {
		if (lane == g.leader)
			gpu_array_add(&lost, 1, g.n);
		return;
	}
	if (lane == g.leader) {
		u64 tag = split_tag();
		u64 mine = tag << 32 | (~now & 0xFFFFFFFFULL);
		u64 old = bpf_gpu_atomic_max(&w->first, mine);

		/* A larger tag of another warp (a wrap, a block started out
		 * of order): swap this warp's in, or take the first exit of a
		 * group of this warp that did so meanwhile. */
		for (int i = 0; i < 4 && old >> 32 > tag; i++) {
			u64 cur = __sync_val_compare_and_swap(&w->first, old, mine);
			old = cur == old ? 0 : cur;
		}
		if (old >> 32 == tag) {
			u32 f = ~(u32)old;
			/* 32-bit clock arithmetic: a group timed a little
			 * before an earlier one (its leader got to the word
			 * later) is the first */
			first = (s32)(f - (u32)now) < 0 ? f : (u32)now;
		} else if (old >> 32 > tag) {
			gpu_array_add(&lost, 2, g.n);
			first = ~0ULL; /* not counted */
		} else {
			first = now & 0xFFFFFFFFULL;
		}
	}
	first = bpf_gpu_shfl(first, g.leader, g.mask);
	if (first == ~0ULL)
		return;
	/* lateness below 2 s */
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

	/* Launch spread: the first exit of this launch, tagged with its grid
	 * id. Read first, swapped only while it is another launch's: every
	 * warp's atomic on the one word would be served one after another. */
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
