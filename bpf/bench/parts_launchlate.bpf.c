// SPDX-License-Identifier: BSD-2-Clause
// parts_launchlate: launchlate's GPU entry probe taken apart, to measure
// what each part costs an instrumented launch (scripts/gpu/parts-bench.sh,
// docs/gpu-results.md):
//   ll_first   only the launch's first thread goes on, and stops
//   ll_store   the first thread stores %globaltimer and the grid id per
//              launch in device memory (no launch words)
//   ll_words   the same plus the agent's launch words (the hidden
//              parameters launchlate's stamps ride on)
// (fifteenth session, to split ll_store:)
//   ll_timer   the first thread reads %globaltimer, stores it only if 0
//   ll_const   the first thread stores a constant and the grid id (no
//              %globaltimer)
// (sixteenth session, the start table moved to host memory:)
//   ll_hstore  ll_store's stores into pinned host memory (type 1513), as
//              launchlate's table is kept
//   ll_hwords  the same plus the agent's launch words
// (nineteenth session, the block test before the thread test:)
//   ll_never   ll_const's code, but its stores are behind a test of the
//              grid id that never holds: the code's presence without its
//              execution
#include "types.h"
#include <bpf/bpf_helpers.h>
#include "gpu.h"

struct start {
	u64 gpu, cpu, info, grid;
};
GPUBPF_MAP(starts, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, struct start, 1 << 16);
GPUBPF_MAP(hstarts, BPF_MAP_TYPE_GPU_ARRAY_HOST_MAP, u32, struct start, 1 << 16);

static __always_inline int part(int words, int host)
{
	if (bpf_gpu_thread_id() != 0)
		return 0;
	u64 grid = bpf_gpu_grid_id();
	u32 slot = grid & ((1 << 16) - 1);
	struct start *s = bpf_map_lookup_elem(host ? (void *)&hstarts : (void *)&starts, &slot);

	if (!s)
		return 0;
	s->gpu = bpf_ktime_get_ns();
	s->grid = grid;
	if (words) {
		s->cpu = bpf_gpu_launch_word(0);
		s->info = bpf_gpu_launch_word(1);
	}
	return 0;
}

SEC("gpu/entry/*")
int ll_first(void *ctx)
{
	return bpf_gpu_thread_id() != 0 ? 0 : 0;
}
SEC("gpu/entry/*")
int ll_store(void *ctx) { return part(0, 0); }

static __always_inline struct start *first_slot(void)
{
	u32 slot = bpf_gpu_grid_id() & ((1 << 16) - 1);

	return bpf_map_lookup_elem(&starts, &slot);
}

SEC("gpu/entry/*")
int ll_timer(void *ctx)
{
	if (bpf_gpu_thread_id() != 0)
		return 0;
	u64 now = bpf_ktime_get_ns();
	struct start *s;

	if (now == 0 && (s = first_slot()))
		s->gpu = now;
	return 0;
}

/* The first thread stores a constant and the grid id; with never, only
 * past a test of the grid id that never holds (grid ids are far larger). */
static __always_inline int const_stores(int never)
{
	if (bpf_gpu_thread_id() != 0)
		return 0;
	if (never && bpf_gpu_grid_id() != 7)
		return 0;
	struct start *s = first_slot();

	if (s) {
		s->gpu = 1;
		s->grid = bpf_gpu_grid_id();
	}
	return 0;
}

SEC("gpu/entry/*")
int ll_const(void *ctx) { return const_stores(0); }
SEC("gpu/entry/*")
int ll_never(void *ctx) { return const_stores(1); }
SEC("gpu/entry/*")
int ll_words(void *ctx) { return part(1, 0); }
SEC("gpu/entry/*")
int ll_hstore(void *ctx) { return part(0, 1); }
SEC("gpu/entry/*")
int ll_hwords(void *ctx) { return part(1, 1); }

char LICENSE[] SEC("license") = "Dual BSD/GPL";
