// SPDX-License-Identifier: BSD-2-Clause
// kernelretsnoop: when each GPU thread exits, relative to the others.
// At every exit (also predicated and early returns) a thread reads
// %globaltimer and learns its warp's first exit from the warp's hardware
// slot (compare-and-swap from 0: the first exit group sets it; the warp's
// last lane clears it for the next warp in that slot). Its lateness is
// counted per (kernel, lane) in log-linear buckets on the GPU, and its exit
// relative to its launch's first exit per kernel, so the default view ships
// no record per thread. With events set, every exit is also a ring record.
#include "types.h"
#include <bpf/bpf_helpers.h>
#include "gputhread.h"

const volatile u32 max_kernels = 64;
const volatile u32 events = 0;

/* First exit time and exited lanes of the warp in each hardware warp slot. */
GPUBPF_MAP(wfirst, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u64, GPU_MAX_SMS * GPU_WARP_SLOTS);
GPUBPF_MAP(wexited, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u64, GPU_MAX_SMS * GPU_WARP_SLOTS);
/* Per kernel: 32 lanes x LINLOG_BUCKETS of (exit - warp's first exit). */
GPUBPF_MAP(lanehist, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u64, 1);
/* Per kernel: LINLOG_BUCKETS of (exit - launch's first exit). */
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

static __always_inline void count(void *map, u32 idx)
{
	u64 *v = bpf_map_lookup_elem(map, &idx);
	if (v)
		__sync_fetch_and_add(v, 1);
}

#define T40 ((1ULL << 40) - 1)

SEC("gpu/exit/*")
int kernelretsnoop_exit(void *ctx)
{
	u64 now = bpf_ktime_get_ns();
	u64 kernel = bpf_gpu_kernel_index();
	u32 lane = bpf_get_lane_id();
	u32 ws = gpu_warp_slot();
	u64 tpb, first, late, lanes;
	u64 t = gpu_thread_in_block(&tpb);
	u64 *wf, *we, *lf;

	if (events) {
		struct gpu_thread_event e = {};
		gpu_fill_event(&e, now);
		bpf_ringbuf_output(&exits, &e, sizeof(e), 0);
	}
	if (kernel >= max_kernels) {
		count(&lost, 0);
		return 0;
	}
	wf = bpf_map_lookup_elem(&wfirst, &ws);
	we = bpf_map_lookup_elem(&wexited, &ws);
	if (!wf || !we) {
		count(&lost, 1);
		return 0;
	}
	first = __sync_val_compare_and_swap(wf, 0, now);
	if (first == 0 || first > now)
		first = now;
	late = now - first;
	count(&lanehist, (kernel * 32 + lane) * LINLOG_BUCKETS + linlog_bucket(late));
	/* The warp's last lane to exit frees the slot for the next warp. */
	lanes = tpb - (t & ~31ULL);
	if (lanes > 32)
		lanes = 32;
	if (__sync_fetch_and_add(we, 1) + 1 >= lanes) {
		__sync_lock_test_and_set(we, 0);
		__sync_lock_test_and_set(wf, 0);
	}

	/* Launch spread: the first exit of this launch, tagged with its grid id. */
	u64 grid = bpf_gpu_grid_id() & 0xFFFFFF;
	u32 ls = grid % LAUNCH_SLOTS;
	lf = bpf_map_lookup_elem(&launchfirst, &ls);
	if (lf) {
		u64 cur = *lf, mine = grid << 40 | (now & T40);
		if (cur >> 40 != grid) {
			u64 old = __sync_val_compare_and_swap(lf, cur, mine);
			cur = old == cur ? mine : old;
		}
		u64 lfirst = cur & T40;
		late = ((now & T40) - lfirst) & T40;
		if (cur >> 40 != grid || late > (1ULL << 39))
			late = 0;
		count(&spreadhist, kernel * LINLOG_BUCKETS + linlog_bucket(late));
	}
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
