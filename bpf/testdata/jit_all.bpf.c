// SPDX-License-Identifier: BSD-2-Clause
// jit_all: one GPU program that uses every map kind, the GPU helpers, the
// standard helpers, atomics, a loop, a subprogram, globals and ctx. The
// compiler tests check that it compiles and that ptxas accepts the result.
// Rebuild: make -C pkg/runtime/jit testdata (or see jit_c_test.go).
#include "types.h"
#include "gpu.h"
#include <bpf/bpf_helpers.h>

GPUBPF_MAP(arr, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u64, 8);
GPUBPF_MAP(per_thread, BPF_MAP_TYPE_PERGPUTD_ARRAY_MAP, u32, u64, 1);
GPUBPF_MAP(hash, BPF_MAP_TYPE_GPU_HASH_MAP, u64, u64, 1024);
GPUBPF_MAP(shared, BPF_MAP_TYPE_GPU_KERNEL_SHARED_ARRAY_MAP, u32, u64, 4);
GPUBPF_MAP(std_hash, BPF_MAP_TYPE_HASH, u32, u32, 64);

struct {
	__uint(type, BPF_MAP_TYPE_GPU_RINGBUF_MAP);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u32);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 16);
} rb SEC(".maps");

u64 total = 0;
volatile const u32 limit = 100;

struct ev {
	u64 ts, tid, n;
};

static __noinline u64 mix(u64 a, u64 b)
{
	u64 r = a * 31 + b;
	for (int i = 0; i < 4; i++)
		r ^= r >> (7 + i);
	return r;
}

SEC("kprobe/_Z9vectorAddPKfS0_Pfi")
int all(void *ctx)
{
	u64 bx, by, bz, tx, ty, tz, dx, dy, dz;
	u32 key = 1;
	u64 *v, one = 1;

	bpf_get_block_idx(&bx, &by, &bz);
	bpf_get_block_dim(&dx, &dy, &dz);
	bpf_get_thread_idx(&tx, &ty, &tz);
	u64 tid = bx * dx + tx;
	int n = GPUBPF_ARG(ctx, int, 24);

	v = bpf_map_lookup_elem(&arr, &key);
	if (v)
		__sync_fetch_and_add(v, 1);
	v = bpf_map_lookup_elem(&per_thread, &key);
	if (v)
		*v += 1;
	v = bpf_map_lookup_elem(&shared, &key);
	if (v)
		__sync_fetch_and_add(v, tid);
	u64 hk = tid & 127;
	v = bpf_map_lookup_elem(&hash, &hk);
	if (v)
		__sync_fetch_and_add(v, 1);
	else
		bpf_map_update_elem(&hash, &hk, &one, BPF_NOEXIST);
	u32 k32 = tid & 63, v32 = n;
	bpf_map_update_elem(&std_hash, &k32, &v32, BPF_ANY);
	if (tid == 5)
		bpf_map_delete_elem(&hash, &hk);

	u64 old = __sync_val_compare_and_swap(&total, 0, tid);
	__sync_lock_test_and_set(&total, old + 1);
	__sync_fetch_and_or(&total, 2);
	__sync_fetch_and_and(&total, ~1ULL);
	__sync_fetch_and_xor(&total, 4);

	struct ev e = { .ts = bpf_ktime_get_ns(), .tid = tid, .n = mix(n, limit) };
	bpf_perf_event_output(ctx, &events, BPF_F_CURRENT_CPU, &e, sizeof(e));
	struct ev *r = bpf_ringbuf_reserve(&rb, sizeof(*r), 0);
	if (r) {
		r->ts = bpf_get_globaltimer();
		r->tid = bpf_get_prandom_u32();
		r->n = bpf_get_current_pid_tgid();
		if (tid & 1)
			bpf_ringbuf_submit(r, 0);
		else
			bpf_ringbuf_discard(r, 0);
	}
	bpf_ringbuf_output(&rb, &e, sizeof(e), 0);
	if (tid == 0) {
		bpf_printk("n=%d sm=%u lane=%u", n, bpf_get_smp_processor_id(), bpf_get_lane_id());
		bpf_puts("hello from the GPU");
		bpf_gpu_membar();
	}
	if (bpf_get_warp_id() > 1000)
		bpf_gpu_exit();
	return 0;
}

SEC("kretprobe/cuda__Z9vectorAddPKfS0_Pfi")
int all_exit(void *ctx)
{
	u32 key = 0;
	u64 *v = bpf_map_lookup_elem(&arr, &key);
	if (v)
		__sync_fetch_and_add(v, bpf_get_sm_id());
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
