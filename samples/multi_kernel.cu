// multi_kernel: one module with several kernels of different names, linkage
// and signatures, launched in sequence.
//
//   multi_kernel [ELEMENTS [ROUNDS]]   defaults: 4096 2
//
// Kernels (mangled names as the driver reports them):
//   fillKernel(int *a, int n, int v)                  _Z10fillKernelPiii
//   scaleKernel<int>(int *a, int n, int f)            _Z11scaleKernelIiEvPT_iS0_
//   scaleKernel<float>(float *a, int n, float f)      _Z11scaleKernelIfEvPT_iS0_
//   gpubpf_samples::saxpy(float, const float *, float *, int)
//                                                     _ZN14gpubpf_samples5saxpyEfPKfPfi
//   extern "C" reduce_sum(const int *a, int n, unsigned long long *out)
//                                                     reduce_sum
// Per round: fill a with v, scale it by 3 (int), reduce it; load x on the
// host, scale it by 0.5 (float), y = 2*x + y (saxpy). Both results checked.
#include "common.h"

#include <vector>

__global__ void fillKernel(int *a, int n, int v)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		a[i] = v + i % 10;
}

template <typename T> __global__ void scaleKernel(T *a, int n, T f)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		a[i] = a[i] * f;
}
template __global__ void scaleKernel<int>(int *, int, int);
template __global__ void scaleKernel<float>(float *, int, float);

namespace gpubpf_samples {
__global__ void saxpy(float alpha, const float *x, float *y, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		y[i] = alpha * x[i] + y[i];
}
} // namespace gpubpf_samples

extern "C" __global__ void reduce_sum(const int *a, int n, unsigned long long *out)
{
	__shared__ unsigned long long part[256];
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	part[threadIdx.x] = i < n ? (unsigned long long)a[i] : 0;
	__syncthreads();
	for (int s = blockDim.x / 2; s > 0; s >>= 1) {
		if ((int)threadIdx.x < s)
			part[threadIdx.x] += part[threadIdx.x + s];
		__syncthreads();
	}
	if (threadIdx.x == 0)
		atomicAdd(out, part[0]);
}

int main(int argc, char **argv)
{
	g_sample_name = "multi_kernel";
	usage_if_help(argc, argv, "[ELEMENTS [ROUNDS]]  (defaults 4096 2)");
	int n = (int)arg_long(argc, argv, 1, 4096, 1, 1 << 26, "ELEMENTS");
	int rounds = (int)arg_long(argc, argv, 2, 2, 1, 1000000, "ROUNDS");
	print_device();
	printf("multi_kernel: elements=%d rounds=%d\n", n, rounds);
	const int TB = 256; // reduce_sum's shared array is sized for this
	int blocks = (n + TB - 1) / TB;

	int *dA;
	float *dX, *dY;
	unsigned long long *dSum;
	CHECK(cudaMalloc(&dA, n * sizeof(int)));
	CHECK(cudaMalloc(&dX, n * sizeof(float)));
	CHECK(cudaMalloc(&dY, n * sizeof(float)));
	CHECK(cudaMalloc(&dSum, sizeof(unsigned long long)));
	std::vector<float> hx(n), hy(n), y(n);
	long bad = 0;
	unsigned long long sum = 0, want_sum = 0;
	int kernel_launches = 0;
	for (int r = 0; r < rounds; r++) {
		int v = 100 + r;
		for (int i = 0; i < n; i++) {
			hx[i] = (float)(i % 100);
			hy[i] = (float)(i % 3);
		}
		CHECK(cudaMemcpy(dX, hx.data(), n * sizeof(float), cudaMemcpyHostToDevice));
		CHECK(cudaMemcpy(dY, hy.data(), n * sizeof(float), cudaMemcpyHostToDevice));
		CHECK(cudaMemset(dSum, 0, sizeof(unsigned long long)));

		fillKernel<<<blocks, TB>>>(dA, n, v);
		scaleKernel<int><<<blocks, TB>>>(dA, n, 3);
		reduce_sum<<<blocks, TB>>>(dA, n, dSum);
		scaleKernel<float><<<blocks, TB>>>(dX, n, 0.5f);
		gpubpf_samples::saxpy<<<blocks, TB>>>(2.0f, dX, dY, n);
		kernel_launches += 5;
		CHECK_LAUNCH();
		CHECK(cudaDeviceSynchronize());

		CHECK(cudaMemcpy(&sum, dSum, sizeof(sum), cudaMemcpyDeviceToHost));
		CHECK(cudaMemcpy(y.data(), dY, n * sizeof(float), cudaMemcpyDeviceToHost));
		want_sum = 0;
		for (int i = 0; i < n; i++)
			want_sum += (unsigned long long)(3 * (v + i % 10));
		if (sum != want_sum) {
			printf("round %d: reduce_sum %llu, want %llu\n", r, sum, want_sum);
			bad++;
		}
		for (int i = 0; i < n; i++) { // all values are small halves: exact
			float want = 2.0f * (hx[i] * 0.5f) + hy[i];
			if (y[i] != want)
				bad++;
		}
	}
	double ysum = 0;
	for (int i = 0; i < n; i++)
		ysum += y[i];
	printf("%d launches of 5 kernels; last round: reduce_sum=%llu (want %llu), sum(y)=%.1f; %ld wrong\n",
	       kernel_launches, sum, want_sum, ysum, bad);
	if (bad)
		result(false, "reason=wrong_result wrong=%ld", bad);
	CHECK(cudaFree(dA));
	CHECK(cudaFree(dX));
	CHECK(cudaFree(dY));
	CHECK(cudaFree(dSum));
	result(true, "kernels=5 launches=%d reduce_sum=%llu ysum=%.1f", kernel_launches, sum, ysum);
}
