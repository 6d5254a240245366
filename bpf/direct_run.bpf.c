// SPDX-License-Identifier: BSD-2-Clause
// direct_run: GPU programs that are kernels of their own, run with no
// application at all (bpftime's SEC("kprobe/__directly_run"), or gpubpf's
// SEC("gpu/direct")): gpubpf run --direct fills the maps, launches each
// program once over the grid it is given, and prints the maps.
//
//   vec_add  C[i] = A[i] + B[i] for i < N, one thread per element:
//     gpubpf run --direct --program vec_add --threads 1048576 \
//       --map 'vec_A={"start":0,"step":1}' --map 'vec_B={"start":0,"step":2}' \
//       --map 'vec_N=[1048576]' --dump out.json bpf/examples/direct_run_bpfel.o
//   gemm     C = A x B (M x K times K x N, u32, at most 64 x 64), one thread
//            per element of C over a 2-D grid (x: columns, y: rows):
//     gpubpf run --direct --program gemm --grid 4,4 --block 16,16 \
//       --map 'gemm_dims=[[64,64,64]]' --map-file ab.json bpf/examples/direct_run_bpfel.o
//   hello    thread 0 says hello through bpf_printk.
#include "types.h"
#include "gpu.h"
#include <bpf/bpf_helpers.h>

#define VEC_MAX (1 << 20)
#define GEMM_MAX 64

GPUBPF_MAP(vec_A, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u32, VEC_MAX);
GPUBPF_MAP(vec_B, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u32, VEC_MAX);
GPUBPF_MAP(vec_C, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u32, VEC_MAX);
/* the element count N */
GPUBPF_MAP(vec_N, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u32, 1);

/* row-major: A is M x K, B is K x N, C is M x N */
GPUBPF_MAP(gemm_A, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u32, GEMM_MAX * GEMM_MAX);
GPUBPF_MAP(gemm_B, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u32, GEMM_MAX * GEMM_MAX);
GPUBPF_MAP(gemm_C, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u32, GEMM_MAX * GEMM_MAX);
/* M, N, K */
GPUBPF_MAP(gemm_dims, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u32[3], 1);

/* This thread's position in the grid: x and y of block * dim + thread. */
static __always_inline void position(u32 *x, u32 *y)
{
	u64 bx, by, bz, dx, dy, dz, tx, ty, tz;
	bpf_get_block_idx(&bx, &by, &bz);
	bpf_get_block_dim(&dx, &dy, &dz);
	bpf_get_thread_idx(&tx, &ty, &tz);
	*x = bx * dx + tx;
	*y = by * dy + ty;
}

SEC("kprobe/__directly_run")
int vec_add(void *ctx)
{
	u32 idx, row, zero = 0;
	position(&idx, &row);
	u32 *n = bpf_map_lookup_elem(&vec_N, &zero);
	if (!n || idx >= *n)
		return 0;
	u32 *a = bpf_map_lookup_elem(&vec_A, &idx);
	u32 *b = bpf_map_lookup_elem(&vec_B, &idx);
	if (!a || !b)
		return 0;
	u32 c = *a + *b;
	bpf_map_update_elem(&vec_C, &idx, &c, BPF_ANY);
	return 0;
}

SEC("kprobe/__directly_run")
int gemm(void *ctx)
{
	u32 col, row, zero = 0;
	position(&col, &row);
	u32 *dims = bpf_map_lookup_elem(&gemm_dims, &zero);
	if (!dims)
		return 0;
	u32 m = dims[0], n = dims[1], k = dims[2];
	if (row >= m || col >= n || k > GEMM_MAX)
		return 0;
	u32 sum = 0;
	for (u32 i = 0; i < GEMM_MAX; i++) {
		if (i >= k)
			break;
		u32 ai = row * k + i, bi = i * n + col;
		u32 *a = bpf_map_lookup_elem(&gemm_A, &ai);
		u32 *b = bpf_map_lookup_elem(&gemm_B, &bi);
		if (!a || !b)
			return 0;
		sum += *a * *b;
	}
	u32 ci = row * n + col;
	bpf_map_update_elem(&gemm_C, &ci, &sum, BPF_ANY);
	return 0;
}

SEC("gpu/direct")
int hello(void *ctx)
{
	u64 bx, by, bz, tx, ty, tz, gx, gy, gz, dx, dy, dz;
	bpf_get_block_idx(&bx, &by, &bz);
	bpf_get_thread_idx(&tx, &ty, &tz);
	if (bx | by | bz | tx | ty | tz)
		return 0;
	bpf_get_grid_dim(&gx, &gy, &gz);
	bpf_get_block_dim(&dx, &dy, &dz);
	bpf_printk("hello from the GPU: %d blocks of %d threads", gx * gy * gz, dx * dy * dz);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
