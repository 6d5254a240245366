// sass_only: a kernel shipped as SASS only, with no PTX in the binary (the
// Makefile builds it with -gencode arch=compute_90,code=sm_90 and nothing
// else), like much of PyTorch, cuBLAS and Triton's cubins: gpubpf cannot
// instrument it and must say so (scripts/gpu/faults-check.sh, case 6).
//
//   sass_only [ELEMENTS [LAUNCHES]]     defaults: 4096 3
//
// Kernel: sassScale(int *a, int n, int f)   mangled _Z9sassScalePiii
// Each launch multiplies every element by 3 (mod 2^32); checked at the end.
#include "common.h"

#include <vector>

__global__ void sassScale(int *a, int n, int f)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		a[i] = (int)((unsigned)a[i] * (unsigned)f);
}

int main(int argc, char **argv)
{
	g_sample_name = "sass_only";
	usage_if_help(argc, argv, "[ELEMENTS [LAUNCHES]]  (defaults 4096 3)");
	int n = (int)arg_long(argc, argv, 1, 4096, 1, 1 << 26, "ELEMENTS");
	int launches = (int)arg_long(argc, argv, 2, 3, 1, 100000, "LAUNCHES");
	print_device();
	printf("sass_only: elements=%d launches=%d\n", n, launches);
	std::vector<int> h(n);
	for (int i = 0; i < n; i++)
		h[i] = i + 1;
	int *d;
	CHECK(cudaMalloc(&d, n * sizeof(int)));
	CHECK(cudaMemcpy(d, h.data(), n * sizeof(int), cudaMemcpyHostToDevice));
	for (int l = 0; l < launches; l++) {
		sassScale<<<(n + 255) / 256, 256>>>(d, n, 3);
		CHECK_LAUNCH();
	}
	CHECK(cudaDeviceSynchronize());
	CHECK(cudaMemcpy(h.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost));
	unsigned f = 1;
	for (int l = 0; l < launches; l++)
		f *= 3u;
	long bad = 0;
	unsigned long long sum = 0;
	for (int i = 0; i < n; i++) {
		if ((unsigned)h[i] != (unsigned)(i + 1) * f)
			bad++;
		sum += (unsigned)h[i];
	}
	printf("checked %d elements: %ld wrong\n", n, bad);
	CHECK(cudaFree(d));
	if (bad)
		result(false, "reason=wrong_result wrong=%ld", bad);
	result(true, "elements=%d launches=%d checksum=%llu", n, launches, sum);
}
