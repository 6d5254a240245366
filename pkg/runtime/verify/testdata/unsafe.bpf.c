// SPDX-License-Identifier: BSD-2-Clause
// GPU programs the verifier must refuse, one unsafe shape each. The test
// (verify_test.go) checks each is refused on the line marked BAD.
#include "types.h"
#include <bpf/bpf_helpers.h>
#include "gpu.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

GPUBPF_MAP(arr, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u64, 4);
GPUBPF_MAP(events, BPF_MAP_TYPE_GPU_RINGBUF_MAP, u32, u32, 1 << 20);

static __always_inline u64 tidx(void)
{
	u64 x, y, z;

	bpf_get_thread_idx(&x, &y, &z);
	return x;
}

/* A lookup with a key past the array, used without a NULL check. */
SEC("kprobe/vectorAdd")
int null_deref(void *ctx)
{
	u32 key = 100;
	u64 *v = bpf_map_lookup_elem(&arr, &key);

	*v += 1; /* BAD */
	return 0;
}

/* The stack read at an index from the thread index. */
SEC("kprobe/vectorAdd")
int stack_by_tid(void *ctx)
{
	volatile u64 buf[4] = {1, 2, 3, 4};

	return buf[tidx()]; /* BAD */
}

/* A loop that never ends for thread 0. */
SEC("kprobe/vectorAdd")
int endless(void *ctx)
{
	u64 x = tidx(), i = 0;

	while (i < x + 100 || x == 0) /* BAD */
		i++;
	return i;
}

/* The address of a map value stored into the map. */
SEC("kprobe/vectorAdd")
int leak_store(void *ctx)
{
	u32 key = 0;
	u64 *v = bpf_map_lookup_elem(&arr, &key);

	if (v)
		*v = (u64)v; /* BAD */
	return 0;
}

/* A stack address handed to the host in a map value. */
SEC("kprobe/vectorAdd")
int leak_update(void *ctx)
{
	u32 key = 0;
	u64 p = (u64)&key;

	bpf_map_update_elem(&arr, &key, &p, 0); /* BAD */
	return 0;
}

/* ctx read far past any kernel's parameters. */
SEC("kprobe/vectorAdd")
int ctx_far(void *ctx)
{
	return GPUBPF_ARG(ctx, u64, 8192); /* BAD */
}

/* A kernel argument dereferenced directly. */
SEC("kprobe/vectorAdd")
int deref_arg(void *ctx)
{
	const u64 *a = GPUBPF_ARG(ctx, u64 *, 0);

	return *a; /* BAD */
}

/* A ring record written without checking the reservation. */
SEC("kprobe/vectorAdd")
int ring_unchecked(void *ctx)
{
	u64 *e = bpf_ringbuf_reserve(&events, 8, 0);

	*e = 1; /* BAD */
	bpf_ringbuf_submit(e, 0);
	return 0;
}

/* A u64 read at an offset of 4 into a map value. */
SEC("kprobe/vectorAdd")
int misaligned(void *ctx)
{
	u32 key = 0;
	char *v = bpf_map_lookup_elem(&arr, &key);

	if (!v)
		return 0;
	return *(volatile u64 *)(v + 4); /* BAD */
}

/* A helper the GPU does not have. */
SEC("kprobe/vectorAdd")
int cpu_helper(void *ctx)
{
	char comm[16];

	bpf_get_current_comm(comm, sizeof(comm)); /* BAD */
	return comm[0];
}

/* A map value indexed past its end. */
SEC("kprobe/vectorAdd")
int value_oob(void *ctx)
{
	u32 key = 0;
	u64 *v = bpf_map_lookup_elem(&arr, &key);

	if (!v)
		return 0;
	return v[tidx() & 7]; /* BAD */
}

/* The atomic max helper on a lookup's result that may be NULL. */
SEC("kprobe/vectorAdd")
int max_unchecked(void *ctx)
{
	u32 key = 1;
	u64 *v = bpf_map_lookup_elem(&arr, &key);

	return bpf_gpu_atomic_max(v, tidx()); /* BAD */
}
