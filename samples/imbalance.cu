// imbalance: grid-stride workload whose threads do unequal work (threadhist's story).
//
//   imbalance [ELEMENTS [THREADS [BLOCKS [LAUNCHES]]]]   defaults: 10000 128 4 3
//
// Kernel: __global__ void imbalance(const unsigned *in, unsigned *out, unsigned *work, int n)
//         mangled _Z9imbalancePKjPjS1_i
// ELEMENTS are spread over THREADS*BLOCKS threads with a grid-stride loop, so
// with ELEMENTS % (THREADS*BLOCKS) != 0 the first threads get one element
// more; each element then runs a data-dependent inner loop of 1 + in[i] % 64
// hash rounds, so threads differ again. Each thread adds its own number of
// inner rounds to work[tid]; the host checks every out[i] and every work[tid]
// against its own computation and prints the per-thread spread (ground truth
// for per-thread histograms).
#include "common.h"

#include <algorithm>
#include <vector>

__host__ __device__ static inline unsigned rounds_of(unsigned v) { return 1 + v % 64; }

__host__ __device__ static inline unsigned hash_rounds(unsigned x, unsigned rounds)
{
	for (unsigned r = 0; r < rounds; r++) {
		x ^= x >> 16;
		x *= 0x7feb352du;
		x ^= x >> 15;
		x *= 0x846ca68bu;
		x ^= x >> 16;
	}
	return x;
}

__global__ void imbalance(const unsigned *in, unsigned *out, unsigned *work, int n)
{
	int tid = blockIdx.x * blockDim.x + threadIdx.x;
	int stride = blockDim.x * gridDim.x;
	unsigned mine = 0;
	for (int i = tid; i < n; i += stride) {
		unsigned r = rounds_of(in[i]);
		out[i] = hash_rounds(in[i] + (unsigned)i, r);
		mine += r;
	}
	work[tid] += mine;
}

int main(int argc, char **argv)
{
	g_sample_name = "imbalance";
	usage_if_help(argc, argv, "[ELEMENTS [THREADS [BLOCKS [LAUNCHES]]]]  (defaults 10000 128 4 3)");
	int n = (int)arg_long(argc, argv, 1, 10000, 1, 1 << 26, "ELEMENTS");
	int threads = (int)arg_long(argc, argv, 2, 128, 1, 1024, "THREADS");
	int blocks = (int)arg_long(argc, argv, 3, 4, 1, 1 << 16, "BLOCKS");
	int launches = (int)arg_long(argc, argv, 4, 3, 1, 1000000, "LAUNCHES");
	int T = threads * blocks;
	print_device();
	printf("imbalance: elements=%d threads=%d blocks=%d (%d threads, %d elements left over) launches=%d\n", n, threads,
	       blocks, T, n % T, launches);

	std::vector<unsigned> in(n), out(n), work(T);
	unsigned s = 12345;
	for (int i = 0; i < n; i++) {
		s = s * 1664525u + 1013904223u;
		in[i] = s >> 8;
	}
	unsigned *dIn, *dOut, *dWork;
	CHECK(cudaMalloc(&dIn, n * sizeof(unsigned)));
	CHECK(cudaMalloc(&dOut, n * sizeof(unsigned)));
	CHECK(cudaMalloc(&dWork, T * sizeof(unsigned)));
	CHECK(cudaMemcpy(dIn, in.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice));
	CHECK(cudaMemset(dOut, 0, n * sizeof(unsigned)));
	CHECK(cudaMemset(dWork, 0, T * sizeof(unsigned)));

	cudaEvent_t e0, e1;
	CHECK(cudaEventCreate(&e0));
	CHECK(cudaEventCreate(&e1));
	CHECK(cudaEventRecord(e0));
	for (int l = 0; l < launches; l++) {
		imbalance<<<blocks, threads>>>(dIn, dOut, dWork, n);
		CHECK_LAUNCH();
	}
	CHECK(cudaEventRecord(e1));
	CHECK(cudaDeviceSynchronize());
	float ms = 0;
	CHECK(cudaEventElapsedTime(&ms, e0, e1));
	CHECK(cudaMemcpy(out.data(), dOut, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
	CHECK(cudaMemcpy(work.data(), dWork, T * sizeof(unsigned), cudaMemcpyDeviceToHost));

	// Host reference.
	std::vector<unsigned long long> want_work(T, 0);
	unsigned long long checksum = 0;
	long bad_out = 0, bad_work = 0;
	std::vector<int> elems(T, 0);
	for (int i = 0; i < n; i++) {
		unsigned r = rounds_of(in[i]);
		unsigned want = hash_rounds(in[i] + (unsigned)i, r);
		if (out[i] != want)
			bad_out++;
		checksum += out[i];
		want_work[i % T] += r;
		elems[i % T]++;
	}
	unsigned long long total = 0;
	for (int t = 0; t < T; t++) {
		if ((unsigned long long)work[t] != want_work[t] * launches)
			bad_work++;
		total += work[t];
	}
	auto mm = std::minmax_element(work.begin(), work.end());
	auto me = std::minmax_element(elems.begin(), elems.end());
	int more = 0;
	for (int t = 0; t < T; t++)
		more += elems[t] == *me.second;
	printf("elements per thread: %d..%d (%d threads have %d)\n", *me.first, *me.second, more, *me.second);
	printf("inner rounds per thread over %d launches: min=%u max=%u mean=%.1f total=%llu\n", launches, *mm.first,
	       *mm.second, (double)total / T, total);
	printf("kernel time (CUDA events, %d launches): %.1f us\n", launches, ms * 1e3);
	printf("checked %d outputs and %d per-thread work counters: %ld + %ld wrong\n", n, T, bad_out, bad_work);
	if (bad_out || bad_work)
		result(false, "reason=wrong_result wrong_out=%ld wrong_work=%ld checksum=%llu", bad_out, bad_work,
		       checksum);
	CHECK(cudaFree(dIn));
	CHECK(cudaFree(dOut));
	CHECK(cudaFree(dWork));
	result(true, "checksum=%llu rounds_min=%u rounds_max=%u total_rounds=%llu kernel_us=%.1f", checksum, *mm.first,
	       *mm.second, total, ms * 1e3);
}
