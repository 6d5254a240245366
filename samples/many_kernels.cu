// many_kernels: one module of 200 small kernels (instantiations of one
// template), launched round after round: what attaching to a big module
// costs (scripts/gpu/table-bench.sh, attach: tool start -> probes active,
// and the JIT's share of it, for 200 kernels at once).
//
//   many_kernels [SECONDS [KERNELS]]   defaults: 1 200
//
// Kernels: template <int K> __global__ void manyK(unsigned long long *counts)
//          mangled _Z5manyKILi0EEvPy ... _Z5manyKILi199EEvPy
// A round launches manyK<0> .. manyK<KERNELS-1> once each (<<<1, 32>>>, one
// stream) and synchronises; manyK<K> adds K + 1 to counts[K] (thread 0).
// After the first round it prints "READY pid=PID kernels=N" (so a script
// can attach with -p once every kernel has a launch handle), then runs
// rounds until SECONDS have passed since READY or, with
// MANY_KERNELS_STOP=FILE, until FILE exists (SECONDS then only bounds the
// wait). Checks counts[K] = rounds x (K + 1) for every kernel.
#include "common.h"

#include <cstdlib>
#include <unistd.h>
#include <utility>
#include <vector>

#define MAX_KERNELS 200

template <int K> __global__ void manyK(unsigned long long *counts)
{
	if (threadIdx.x == 0)
		counts[K] += K + 1;
}

typedef void (*kernel_t)(unsigned long long *);

template <int... Ks> static std::vector<kernel_t> kernel_table(std::integer_sequence<int, Ks...>)
{
	return {manyK<Ks>...};
}

int main(int argc, char **argv)
{
	g_sample_name = "many_kernels";
	usage_if_help(argc, argv, "[SECONDS [KERNELS]]  (defaults 1 200; MANY_KERNELS_STOP=FILE: stop when FILE exists)");
	double seconds = 1;
	if (argc > 1) {
		char *end = nullptr;
		seconds = strtod(argv[1], &end);
		if (!end || *end || seconds < 0 || seconds > 3600) {
			fprintf(stderr, "many_kernels: bad SECONDS '%s' (want 0..3600)\n", argv[1]);
			exit(2);
		}
	}
	int nk = (int)arg_long(argc, argv, 2, MAX_KERNELS, 1, MAX_KERNELS, "KERNELS");
	const char *stop = getenv("MANY_KERNELS_STOP");
	std::vector<kernel_t> kernels = kernel_table(std::make_integer_sequence<int, MAX_KERNELS>{});
	print_device();
	printf("many_kernels: kernels=%d seconds=%.2f%s%s\n", nk, seconds, stop ? " stop file " : "", stop ? stop : "");

	unsigned long long *dCounts;
	CHECK(cudaMalloc(&dCounts, MAX_KERNELS * sizeof(unsigned long long)));
	CHECK(cudaMemset(dCounts, 0, MAX_KERNELS * sizeof(unsigned long long)));
	auto round = [&]() {
		for (int k = 0; k < nk; k++)
			kernels[k]<<<1, 32>>>(dCounts);
		CHECK_LAUNCH();
		CHECK(cudaDeviceSynchronize());
	};
	round(); // every kernel loaded and launched once
	long rounds = 1;
	printf("READY pid=%d kernels=%d\n", (int)getpid(), nk);
	fflush(stdout);
	double t0 = now_ns(), t1 = t0;
	while ((t1 - t0) / 1e9 < seconds) {
		if (stop && access(stop, F_OK) == 0)
			break;
		round();
		rounds++;
		t1 = now_ns();
	}
	std::vector<unsigned long long> counts(MAX_KERNELS);
	CHECK(cudaMemcpy(counts.data(), dCounts, MAX_KERNELS * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
	long bad = 0;
	for (int k = 0; k < MAX_KERNELS; k++) {
		unsigned long long want = k < nk ? (unsigned long long)rounds * (k + 1) : 0;
		if (counts[k] != want) {
			if (!bad)
				printf("kernel %d: count %llu, want %llu\n", k, counts[k], want);
			bad++;
		}
	}
	double us_per_round = rounds > 1 ? (t1 - t0) / 1e3 / (rounds - 1) : 0;
	printf("%ld rounds of %d launches (%.1f us per round after READY); checked %d counters: %ld wrong\n", rounds, nk,
	       us_per_round, MAX_KERNELS, bad);
	if (bad)
		result(false, "reason=wrong_counts wrong=%ld rounds=%ld", bad, rounds);
	CHECK(cudaFree(dCounts));
	result(true, "kernels=%d rounds=%ld us_per_round=%.1f", nk, rounds, us_per_round);
}
