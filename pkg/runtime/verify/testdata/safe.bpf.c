// SPDX-License-Identifier: BSD-2-Clause
// GPU programs near the unsafe ones that the verifier must accept.
#include "types.h"
#include <bpf/bpf_helpers.h>
#include "gpu.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

GPUBPF_MAP(arr, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u64, 4);
GPUBPF_MAP(hist, BPF_MAP_TYPE_GPU_HASH_MAP, u64, u64, 64);
GPUBPF_MAP(per_thread, BPF_MAP_TYPE_PERGPUTD_ARRAY_MAP, u32, u64, 1);
GPUBPF_MAP(events, BPF_MAP_TYPE_GPU_RINGBUF_MAP, u32, u32, 1 << 20);

struct rec {
	u64 addr, tid, value;
};

SEC("kprobe/vectorAdd")
int checked(void *ctx)
{
	u64 x, y, z, one = 1;
	u32 key = 1;
	u64 *v = bpf_map_lookup_elem(&arr, &key);

	bpf_get_thread_idx(&x, &y, &z);
	if (v)
		__sync_fetch_and_add(v, 1);
	u64 *h = bpf_map_lookup_elem(&hist, &x);
	if (h)
		*h += 1;
	else
		bpf_map_update_elem(&hist, &x, &one, BPF_NOEXIST);
	u32 zero = 0;
	u64 *p = bpf_map_lookup_elem(&per_thread, &zero);
	if (p)
		*p = bpf_get_globaltimer();
	return 0;
}

/* A kernel argument read with bpf_probe_read_kernel and recorded: a device
 * address is data, not a leak. */
SEC("kretprobe/vectorAdd")
int deref_checked(void *ctx)
{
	const u64 *a = GPUBPF_ARG(ctx, u64 *, 0);
	u32 n = GPUBPF_ARG(ctx, u32, 24);
	struct rec *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	if (!e)
		return 0;
	e->addr = (u64)a;
	e->tid = bpf_gpu_thread_id();
	if (bpf_probe_read_kernel(&e->value, sizeof(e->value), a))
		e->value = n;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("kprobe/vectorAdd")
int bounded(void *ctx)
{
	u64 x, y, z, sum = 0;
	volatile u64 buf[8] = {};

	bpf_get_thread_idx(&x, &y, &z);
	for (int i = 0; i < 64 && i < x; i++)
		sum = sum * 31 + i;
	buf[x & 7] = sum;
	struct rec r = {.tid = x, .value = buf[(x + 1) & 7]};
	bpf_perf_event_output(ctx, &events, BPF_F_CURRENT_CPU, &r, sizeof(r));
	bpf_printk("sum %llu", sum);
	return 0;
}
