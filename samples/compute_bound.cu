// compute_bound: a kernel dominated by FP32 FMAs.
//
//   compute_bound [ITERS [THREADS [BLOCKS [LAUNCHES]]]]   defaults: 16384 256 264 3
//
// Kernel: __global__ void computeBound(float *out, int iters)
//         mangled _Z12computeBoundPfi
// Each thread runs CHAINS=8 independent chains of ITERS fmaf steps
// x = fmaf(x, a, b) from thread-dependent seeds and stores their sum. The
// host recomputes 64 threads spread over the grid with fmaf (both sides are
// IEEE fused multiply-add, so results match bit for bit) and prints the
// CUDA-event-timed GFLOP/s (2 flops per FMA), and the host-timed
// microseconds per launch (from before the first launch to after the
// synchronisation, divided by LAUNCHES).
#include "common.h"

#include <cmath>
#include <vector>

#define CHAINS 8

__host__ __device__ static inline float chain_sum(int tid, int iters)
{
	float x[CHAINS];
	float b[CHAINS];
	for (int c = 0; c < CHAINS; c++) {
		x[c] = (float)((tid * CHAINS + c) % 1021) * 0.001f;
		b[c] = 0.0001f * (float)(c + 1);
	}
	const float a = 0.9995f;
	for (int k = 0; k < iters; k++) {
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
		for (int c = 0; c < CHAINS; c++)
			x[c] = fmaf(x[c], a, b[c]);
	}
	float s = 0;
	for (int c = 0; c < CHAINS; c++)
		s += x[c];
	return s;
}

__global__ void computeBound(float *out, int iters)
{
	int tid = blockIdx.x * blockDim.x + threadIdx.x;
	out[tid] = chain_sum(tid, iters);
}

int main(int argc, char **argv)
{
	g_sample_name = "compute_bound";
	usage_if_help(argc, argv, "[ITERS [THREADS [BLOCKS [LAUNCHES]]]]  (defaults 16384 256 264 3)");
	int iters = (int)arg_long(argc, argv, 1, 16384, 1, 1 << 30, "ITERS");
	int threads = (int)arg_long(argc, argv, 2, 256, 1, 1024, "THREADS");
	int blocks = (int)arg_long(argc, argv, 3, 264, 1, 1 << 20, "BLOCKS");
	int launches = (int)arg_long(argc, argv, 4, 3, 1, 100000, "LAUNCHES");
	int T = threads * blocks;
	print_device();
	printf("compute_bound: iters=%d threads=%d blocks=%d launches=%d (%d FMAs per thread)\n", iters, threads, blocks,
	       launches, iters * CHAINS);

	float *dOut;
	CHECK(cudaMalloc(&dOut, (size_t)T * sizeof(float)));
	computeBound<<<blocks, threads>>>(dOut, 1); // warm-up
	CHECK_LAUNCH();
	CHECK(cudaDeviceSynchronize());
	CHECK(cudaMemset(dOut, 0, (size_t)T * sizeof(float)));

	cudaEvent_t e0, e1;
	CHECK(cudaEventCreate(&e0));
	CHECK(cudaEventCreate(&e1));
	double h0 = now_ns();
	CHECK(cudaEventRecord(e0));
	for (int l = 0; l < launches; l++)
		computeBound<<<blocks, threads>>>(dOut, iters);
	CHECK_LAUNCH();
	CHECK(cudaEventRecord(e1));
	CHECK(cudaDeviceSynchronize());
	double h1 = now_ns();
	float ms = 0;
	CHECK(cudaEventElapsedTime(&ms, e0, e1));
	std::vector<float> out(T);
	CHECK(cudaMemcpy(out.data(), dOut, (size_t)T * sizeof(float), cudaMemcpyDeviceToHost));

	long bad = 0, checked = 0;
	int step = T > 64 ? T / 64 : 1;
	for (int t = 0; t < T; t += step, checked++) {
		float want = chain_sum(t, iters);
		if (out[t] != want) {
			if (!bad)
				printf("thread %d: got %.9g want %.9g\n", t, out[t], want);
			bad++;
		}
	}
	double sum = 0;
	for (int t = 0; t < T; t++)
		sum += out[t];
	double flops = 2.0 * CHAINS * (double)iters * T * launches;
	double gflops = flops / (ms * 1e-3) / 1e9;
	double kernel_us = ms * 1e3 / launches;
	printf("kernel time (CUDA events): %.1f us per launch, %.1f GFLOP/s\n", kernel_us, gflops);
	printf("host-timed: %.1f us per launch (the launches and cudaDeviceSynchronize)\n", (h1 - h0) / 1e3 / launches);
	printf("checked %ld of %d threads against the host: %ld wrong; sum of all outputs %.3f\n", checked, T, bad, sum);
	if (bad)
		result(false, "reason=wrong_result wrong=%ld checked=%ld", bad, checked);
	CHECK(cudaFree(dOut));
	result(true, "gflops=%.1f kernel_us=%.1f sum=%.3f checked=%ld", gflops, kernel_us, sum, checked);
}
