// SPDX-License-Identifier: BSD-2-Clause
// parts_kernelretsnoop: kernelretsnoop's exit probe and the design tried
// against it on 2026-11-23 (fourteenth session), to measure what each part
// costs the kernel (scripts/gpu/parts-bench.sh; docs/gpu-results.md
// "fourteenth session"). Maps are sized for two kernels (vec_add has one),
// so that gpubpf run's dump of them stays short.
// The tool itself (bpf/kernelretsnoop.bpf.c: split warps out of line, a
// compare-and-swap, then an or and an exchange returning the lanes so far,
// every lane counted into one lane table, the launch spread's load after
// them) is the variant to compare with: `kernelretsnoop -- CMD`.
//   krs_max         the design tried: one atomic max per group on the slot
//                   word tagged with the warp's entry time
//                   (bpf_gpu_atomic_max), the first group counting one
//                   split warp instead of a count per lane, lane table
//                   sharded by SM, the spread's load issued first. Not
//                   faster (x2.86 against x2.93 at xlarge), and on
//                   samples/lane_slow the compiler reconverged the warp
//                   before the exit, hiding lane 31's lateness
//   krs_max_inline  the same with the split warps' code pasted in
//   krs_max_warps   krs_max without the launch spread
// and, to bisect what every exit of a whole warp costs:
//   krs_site        the site's %globaltimer, stored only if it reads 0
//   krs_red         the site time, the lanes exiting together, their
//                   lowest lane adding one to an SM-sharded counter
//   krs_knob        krs_red plus a tool knob (const volatile) read at
//                   every exit, as the tool reads max_kernels and events
//   krs_redpad      krs_red with each shard's counter in its own 128-byte
//                   line (krs_red's 32 shards share two lines)
// and what the launch spread adds to that (fifteenth session):
//   krs_spread      krs_redpad plus the tool's launch spread (the leader
//                   loads the launch's first exit, swaps its own in where
//                   the tag is another launch's, adds to spreadhist)
//   krs_spread_load the same without the compare-and-swap (its lateness is
//                   wrong where the tag is stale: the cost of the load alone)
//   krs_spread_shard the first exit kept per SM shard, each in its own
//                   line (lateness from the shard's first exit)
// and (seventeenth session):
//   krs_spread_nw   krs_spread whose leader, finding another launch's tag,
//                   swaps its own exit in without waiting for the swap's
//                   answer and counts itself on time (one round trip to L2
//                   less at the kernel's tail; a warp that found a stale
//                   copy after another warp's swap counts 0 late)
#include "types.h"
#include <bpf/bpf_helpers.h>
#include "gputhread.h"

#define KERNELS 2
#define SHARDS 32
#define LANE_SHARDS 16
#define LAUNCH_SLOTS 256
#define T40 ((1ULL << 40) - 1)

GPUBPF_MAP(wexits, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u64, GPU_MAX_SMS * GPU_WARP_SLOTS);
GPUBPF_MAP(lanehist, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u64, KERNELS * LANE_SHARDS * 32 * LINLOG_BUCKETS);
GPUBPF_MAP(ontime, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u64, KERNELS * SHARDS);
GPUBPF_MAP(never, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u64, 1);
GPUBPF_MAP(padded, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u64, KERNELS * SHARDS * 16);
const volatile u32 knob = KERNELS;
GPUBPF_MAP(splitwarps, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u64, KERNELS * SHARDS * 32);
GPUBPF_MAP(spreadhist, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u64, KERNELS * SHARDS * LINLOG_BUCKETS);
GPUBPF_MAP(launchfirst, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u64, LAUNCH_SLOTS);
#define SHARD_SLOTS 16
GPUBPF_MAP(shardfirst, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u64, SHARD_SLOTS * SHARDS * 16);

/* krs_max's split warps. */
static __always_inline void split_body(u64 now, u64 kernel, u64 entry, u32 shard)
{
	struct gpu_group g = gpu_warp_group();
	u32 lane = bpf_get_lane_id();
	u32 ws = gpu_warp_slot();
	u64 *w = bpf_map_lookup_elem(&wexits, &ws);
	u64 first = 0, tpb, t;

	if (!w || !entry)
		return;
	if (lane == g.leader) {
		u64 mine = (entry & 0xFFFFFFFFULL) << 32 | (~now & 0xFFFFFFFFULL);
		u64 old = bpf_gpu_atomic_max(w, mine);

		if (old >> 32 == mine >> 32) {
			u32 f = ~(u32)old;
			first = 1ULL << 32 | ((s32)(f - (u32)now) < 0 ? f : (u32)now);
		} else {
			if (old > mine)
				*w = mine;
			t = gpu_thread_in_block(&tpb);
			tpb -= t & ~31ULL;
			gpu_array_add(&splitwarps, (kernel * SHARDS + shard) * 32 + (tpb > 32 ? 31 : tpb - 1), 1);
		}
	}
	first = bpf_gpu_shfl(first, g.leader, g.mask);
	if (!(first >> 32))
		return;
	u32 late = (u32)now - (u32)first;
	if (late > 0x80000000U)
		late = 0;
	u32 ls = bpf_get_sm_id() % LANE_SHARDS;
	gpu_array_add(&lanehist, ((kernel * LANE_SHARDS + ls) * 32 + lane) * LINLOG_BUCKETS + linlog_bucket(late), 1);
}

static __noinline void split_exit(u64 now, u64 kernel, u64 entry, u32 shard) { split_body(now, kernel, entry, shard); }

/* The launch spread from the first exit in lf (cur: its value loaded). */
static __always_inline void spread(u64 now, u64 n, u64 kernel, u32 shard, u64 *lf, u64 cur, u64 grid)
{
	u64 mine = grid << 40 | (now & T40), late;

	if (cur >> 40 != grid) {
		u64 old = __sync_val_compare_and_swap(lf, cur, mine);
		cur = old == cur ? mine : old;
	}
	late = ((now & T40) - (cur & T40)) & T40;
	if (cur >> 40 != grid || late > (1ULL << 39))
		late = 0;
	gpu_array_add(&spreadhist, (kernel * SHARDS + shard) * LINLOG_BUCKETS + linlog_bucket(late), n);
}

enum { MAX, MAX_WARPS, MAX_INLINE };

static __always_inline int exit_part(int part)
{
	u64 now = bpf_gpu_site_time();
	u64 entry = bpf_gpu_entry_time();
	struct gpu_group g = gpu_warp_group();
	int leader = bpf_get_lane_id() == g.leader;
	u64 kernel = bpf_gpu_kernel_index();
	u32 shard = bpf_get_sm_id() % SHARDS;
	u64 grid = bpf_gpu_grid_id() & 0xFFFFFF;
	u32 ls = grid % LAUNCH_SLOTS;
	u64 *lf = bpf_map_lookup_elem(&launchfirst, &ls);
	u64 cur = 0;

	if (kernel >= KERNELS)
		return 0;
	if ((part == MAX || part == MAX_INLINE) && lf && leader)
		cur = *lf;
	if (g.n == 32) {
		if (leader)
			gpu_array_add(&ontime, kernel * SHARDS + shard, 1);
	} else if (part == MAX_INLINE) {
		split_body(now, kernel, entry, shard);
	} else {
		split_exit(now, kernel, entry, shard);
	}
	if (part == MAX_WARPS || !leader || !lf)
		return 0;
	spread(now, g.n, kernel, shard, lf, cur, grid);
	return 0;
}

SEC("gpu/exit/*")
int krs_max(void *ctx) { return exit_part(MAX); }
SEC("gpu/exit/*")
int krs_max_warps(void *ctx) { return exit_part(MAX_WARPS); }
SEC("gpu/exit/*")
int krs_max_inline(void *ctx) { return exit_part(MAX_INLINE); }

SEC("gpu/exit/*")
int krs_site(void *ctx)
{
	if (bpf_gpu_site_time() == 0)
		gpu_array_add(&never, 0, 1);
	return 0;
}

static __always_inline int whole(int read_knob, int pad)
{
	u64 now = bpf_gpu_site_time();
	struct gpu_group g = gpu_warp_group();
	u64 kernel = bpf_gpu_kernel_index();

	if (read_knob && kernel >= knob)
		return 0;
	u32 i = (kernel * SHARDS + bpf_get_sm_id() % SHARDS) & (KERNELS * SHARDS - 1);
	if (bpf_get_lane_id() == g.leader)
		gpu_array_add(pad ? (void *)&padded : (void *)&ontime, pad ? i * 16 : i, now ? 1 : 0);
	return 0;
}

SEC("gpu/exit/*")
int krs_red(void *ctx) { return whole(0, 0); }
SEC("gpu/exit/*")
int krs_knob(void *ctx) { return whole(1, 0); }
SEC("gpu/exit/*")
int krs_redpad(void *ctx) { return whole(0, 1); }

enum { SPREAD, SPREAD_LOAD, SPREAD_SHARD, SPREAD_NW };

static __always_inline int with_spread(int how)
{
	u64 now = bpf_gpu_site_time();
	struct gpu_group g = gpu_warp_group();
	u64 kernel = bpf_gpu_kernel_index();
	u32 shard = bpf_get_sm_id() % SHARDS;

	if (kernel >= KERNELS || bpf_get_lane_id() != g.leader)
		return 0;
	gpu_array_add(&padded, (kernel * SHARDS + shard) * 16, 1);
	u64 grid = bpf_gpu_grid_id() & 0xFFFFFF;
	u32 ls = how == SPREAD_SHARD ? ((grid % SHARD_SLOTS) * SHARDS + shard) * 16 : grid % LAUNCH_SLOTS;
	u64 *lf = bpf_map_lookup_elem(how == SPREAD_SHARD ? (void *)&shardfirst : (void *)&launchfirst, &ls);
	if (!lf)
		return 0;
	u64 cur = *lf, late;
	if (how == SPREAD_LOAD) {
		late = ((now & T40) - (cur & T40)) & T40;
		gpu_array_add(&spreadhist, (kernel * SHARDS + shard) * LINLOG_BUCKETS + linlog_bucket(late), g.n);
		return 0;
	}
	if (how == SPREAD_NW) {
		u64 mine = grid << 40 | (now & T40);

		if (cur >> 40 != grid) {
			__sync_val_compare_and_swap(lf, cur, mine);
			cur = mine;
		}
		late = ((now & T40) - (cur & T40)) & T40;
		if (late > (1ULL << 39))
			late = 0;
		gpu_array_add(&spreadhist, (kernel * SHARDS + shard) * LINLOG_BUCKETS + linlog_bucket(late), g.n);
		return 0;
	}
	spread(now, g.n, kernel, shard, lf, cur, grid);
	return 0;
}

SEC("gpu/exit/*")
int krs_spread_nw(void *ctx) { return with_spread(SPREAD_NW); }
SEC("gpu/exit/*")
int krs_spread(void *ctx) { return with_spread(SPREAD); }
SEC("gpu/exit/*")
int krs_spread_load(void *ctx) { return with_spread(SPREAD_LOAD); }
SEC("gpu/exit/*")
int krs_spread_shard(void *ctx) { return with_spread(SPREAD_SHARD); }

char LICENSE[] SEC("license") = "Dual BSD/GPL";
