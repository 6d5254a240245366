// alloc_mix: a cudaMalloc/cudaFree/cudaMemcpy mix with a deliberate leak
// (gpuevent_snoop's story).
//
//   alloc_mix [ROUNDS]   default: 2
//
// Kernel: __global__ void addOne(int *a, int n)   mangled _Z6addOnePii
// Each round: cudaMalloc 3 buffers (256 KiB, 256 KiB, 64 KiB), cudaMemcpy
// H2D, cudaMemcpy D2D, cudaMemset, one addOne launch, cudaMemcpyAsync D2H on
// a stream + cudaStreamSynchronize, cudaMemcpy D2H, check the data,
// cudaFree all 3. Then, once, 3 allocations of 4096, 65536 and 1048576 bytes
// that are never freed: the program prints them as
//     LEAK planned: 3 allocations, 1118208 bytes
//     LEAK ptr=0x... size=...
// and counts every CUDA API call it makes (printed as "calls: ...").
#include "common.h"

#include <vector>

__global__ void addOne(int *a, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		a[i] += 1;
}

static int n_malloc, n_free, n_memcpy, n_memcpy_async, n_memset, n_launch;

int main(int argc, char **argv)
{
	g_sample_name = "alloc_mix";
	usage_if_help(argc, argv, "[ROUNDS]  (default 2)");
	int rounds = (int)arg_long(argc, argv, 1, 2, 1, 1000000, "ROUNDS");
	print_device();
	printf("alloc_mix: rounds=%d\n", rounds);

	const int n = 64 * 1024; // ints: 256 KiB
	const size_t bytes = n * sizeof(int), small = 64 * 1024;
	std::vector<int> h(n), back(n), back2(n);
	for (int i = 0; i < n; i++)
		h[i] = i * 7;
	cudaStream_t st;
	CHECK(cudaStreamCreate(&st));
	long bad = 0;
	for (int r = 0; r < rounds; r++) {
		int *a, *b;
		unsigned char *c;
		CHECK(cudaMalloc(&a, bytes)); n_malloc++;
		CHECK(cudaMalloc(&b, bytes)); n_malloc++;
		CHECK(cudaMalloc(&c, small)); n_malloc++;
		CHECK(cudaMemcpy(a, h.data(), bytes, cudaMemcpyHostToDevice)); n_memcpy++;
		CHECK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice)); n_memcpy++;
		CHECK(cudaMemset(c, 0x5a, small)); n_memset++;
		addOne<<<(n + 255) / 256, 256>>>(b, n); n_launch++;
		CHECK_LAUNCH();
		CHECK(cudaDeviceSynchronize());
		CHECK(cudaMemcpyAsync(back.data(), b, bytes, cudaMemcpyDeviceToHost, st)); n_memcpy_async++;
		CHECK(cudaStreamSynchronize(st));
		CHECK(cudaMemcpy(back2.data(), a, bytes, cudaMemcpyDeviceToHost)); n_memcpy++;
		std::vector<unsigned char> cb(small);
		CHECK(cudaMemcpy(cb.data(), c, small, cudaMemcpyDeviceToHost)); n_memcpy++;
		for (int i = 0; i < n; i++)
			bad += (back[i] != h[i] + 1) + (back2[i] != h[i]);
		for (size_t i = 0; i < small; i++)
			bad += cb[i] != 0x5a;
		CHECK(cudaFree(a)); n_free++;
		CHECK(cudaFree(b)); n_free++;
		CHECK(cudaFree(c)); n_free++;
	}
	CHECK(cudaStreamDestroy(st));

	const size_t leak_sizes[3] = {4096, 65536, 1048576};
	size_t leak_total = 0;
	void *leaks[3];
	for (int k = 0; k < 3; k++) {
		CHECK(cudaMalloc(&leaks[k], leak_sizes[k])); n_malloc++;
		CHECK(cudaMemset(leaks[k], k + 1, leak_sizes[k])); n_memset++;
		leak_total += leak_sizes[k];
	}
	CHECK(cudaDeviceSynchronize());
	printf("LEAK planned: 3 allocations, %zu bytes\n", leak_total);
	for (int k = 0; k < 3; k++)
		printf("LEAK ptr=%p size=%zu\n", leaks[k], leak_sizes[k]);
	printf("calls: cudaMalloc=%d cudaFree=%d cudaMemcpy=%d cudaMemcpyAsync=%d cudaMemset=%d launches=%d\n", n_malloc,
	       n_free, n_memcpy, n_memcpy_async, n_memset, n_launch);
	printf("checked %d rounds of copies: %ld wrong values\n", rounds, bad);
	if (bad)
		result(false, "reason=wrong_data wrong=%ld", bad);
	result(true, "rounds=%d mallocs=%d frees=%d memcpys=%d memcpy_async=%d memsets=%d leaked_allocs=3 leaked_bytes=%zu",
	       rounds, n_malloc, n_free, n_memcpy, n_memcpy_async, n_memset, leak_total);
}
