// SPDX-License-Identifier: BSD-2-Clause
// Loops whose bound comes from data (a map value), as bpftime's direct-run
// GEMM has. The test (verify_test.go) checks that a direct run accepts them,
// that a probe accepts them with the GPU's loop budget (and a loop the
// verifier can bound without one), and that an unsafe access in such a loop
// is refused either way on the line marked BAD.
#include "types.h"
#include <bpf/bpf_helpers.h>
#include "gpu.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

GPUBPF_MAP(dims, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u32, 1);
GPUBPF_MAP(mat, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, s32, 4096);
GPUBPF_MAP(out, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, s64, 4096);
GPUBPF_MAP(spin, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u32, 1);

/* out[row] = the dot product of mat's row and its first column, K long */
static __always_inline int dot(void)
{
	u32 k0 = 0;
	u32 *K = bpf_map_lookup_elem(&dims, &k0);
	u64 x, y, z;

	if (!K)
		return 0;
	bpf_get_thread_idx(&x, &y, &z);
	u32 row = x;
	s64 acc = 0;
	for (u32 k = 0; k < *K; k++) {
		u32 a = row * *K + k, b = k * *K;
		s32 *ap = bpf_map_lookup_elem(&mat, &a);
		s32 *bp = bpf_map_lookup_elem(&mat, &b);

		acc += (s64)(ap ? *ap : 0) * (s64)(bp ? *bp : 0);
	}
	bpf_map_update_elem(&out, &row, &acc, BPF_ANY);
	return 0;
}

SEC("kprobe/__directly_run")
int data_bounded(void *ctx)
{
	return dot();
}

SEC("kprobe/vectorAdd")
int data_bounded_probe(void *ctx)
{
	return dot();
}

/* A constant bound the verifier follows: no budget needed. */
SEC("kprobe/vectorAdd")
int bounded_probe(void *ctx)
{
	u32 k0 = 0;
	u32 *K = bpf_map_lookup_elem(&dims, &k0);
	s64 acc = 0;

	if (!K)
		return 0;
	for (u32 k = 0; k < 16; k++)
		acc += (s64)k * *K;
	bpf_map_update_elem(&out, &k0, &acc, BPF_ANY);
	return 0;
}

/* On vec_add (scripts/gpu/runtime-check.sh): K from a map value the probe
 * seeds (40), so the verifier cannot bound the loop; each thread adds the
 * hash h(40) (h = h * 31 + k for k < 40, from 0, mod 2^64) to its slot of
 * out at every launch. */
SEC("kprobe/vectorAdd")
int map_bounded_probe(void *ctx)
{
	u32 k0 = 0;
	u32 *K = bpf_map_lookup_elem(&dims, &k0);

	if (!K)
		return 0;
	if (*K == 0)
		*K = 40;
	u32 id = bpf_gpu_thread_id();
	s64 *slot = bpf_map_lookup_elem(&out, &id);
	s64 acc = 0;

	if (!slot)
		return 0;
	for (u32 k = 0; k < *K; k++)
		acc = acc * 31 + k;
	*slot += acc;
	return 0;
}

/* Never ends: spin[0] stays 0. Memory-safe, so a probe runs it with the
 * loop budget, which every thread spends once per launch. */
SEC("kprobe/vectorAdd")
int endless_probe(void *ctx)
{
	u32 k0 = 0;
	u32 *flag = bpf_map_lookup_elem(&spin, &k0);
	u64 n = 0;

	if (!flag)
		return 0;
	while (*(volatile u32 *)flag == 0)
		n++;
	return n;
}

/* The loop's index used on the stack: unsafe however the loop is bounded. */
SEC("kprobe/__directly_run")
int data_bounded_unsafe(void *ctx)
{
	u32 k0 = 0;
	u32 *K = bpf_map_lookup_elem(&dims, &k0);
	volatile s32 buf[8] = {};

	if (!K)
		return 0;
	for (u32 k = 0; k < *K; k++) {
		s32 *ap = bpf_map_lookup_elem(&mat, &k);

		buf[k] = ap ? *ap : 0; /* BAD */
	}
	return buf[0];
}
