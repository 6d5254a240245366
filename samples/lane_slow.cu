// lane_slow: warp lane 31 takes a slower branch (kernelretsnoop's story).
//
//   lane_slow [THREADS [BLOCKS [SPIN_NS [LAUNCHES]]]]   defaults: 64 2 750 3
//
// Kernel: laneSlow(float *out, unsigned long long *cycles, long long spin, int n)
//         mangled _Z8laneSlowPfPyxi
// Every thread computes out[i] = 3*i + 1 (checked) and records its cycles.
// Lanes 0..30 then return; lane 31 of each warp spins on clock64() for
// SPIN_NS worth of SM cycles before it returns (the rate is calibrated
// against %globaltimer by a separate one-thread kernel,
// calibrate(unsigned long long *, long long), mangled _Z9calibratePyx).
// Each thread stores how many cycles it spent; the host prints the mean for
// lane 31 and for the other lanes, and fails unless every lane 31 spun at
// least the requested number of cycles and (for SPIN_NS >= 200) lane 31's
// mean is above the other lanes' mean.
#include "common.h"

#include <vector>

__device__ static inline unsigned long long gtimer()
{
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

// calibrate: one thread spins `spin` cycles and reports the globaltimer span.
__global__ void calibrate(unsigned long long *res, long long spin)
{
	unsigned long long g0 = gtimer();
	long long c0 = clock64(), c1;
	do {
		c1 = clock64();
	} while (c1 - c0 < spin);
	unsigned long long g1 = gtimer();
	res[0] = (unsigned long long)(c1 - c0);
	res[1] = g1 - g0;
}

__global__ void laneSlow(float *out, unsigned long long *cycles, long long spin, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n)
		return;
	long long c0 = clock64();
	out[i] = (float)(3 * i + 1);
	// Every lane records its cycles *before* the lanes diverge, then lanes
	// 0..30 leave (a predicated EXIT). Had the fast lanes recorded inside
	// an if/else, the warp could run lane 31's spin first and the fast lanes
	// after it (measured on an H200: 796 ns for lanes 0..30, 757 for lane 31).
	cycles[i] = (unsigned long long)(clock64() - c0);
	if ((threadIdx.x & 31) != 31)
		return;
	long long c; // lane 31: the slow path, it leaves SPIN cycles later
	do {
		c = clock64();
	} while (c - c0 < spin);
	cycles[i] = (unsigned long long)(c - c0);
}

int main(int argc, char **argv)
{
	g_sample_name = "lane_slow";
	usage_if_help(argc, argv, "[THREADS [BLOCKS [SPIN_NS [LAUNCHES]]]]  (defaults 64 2 750 3)");
	int threads = (int)arg_long(argc, argv, 1, 64, 32, 1024, "THREADS");
	int blocks = (int)arg_long(argc, argv, 2, 2, 1, 1 << 16, "BLOCKS");
	long spin_ns = arg_long(argc, argv, 3, 750, 0, 100000000, "SPIN_NS");
	int launches = (int)arg_long(argc, argv, 4, 3, 1, 1000000, "LAUNCHES");
	int n = threads * blocks;
	print_device();
	printf("lane_slow: threads=%d blocks=%d spin_ns=%ld launches=%d\n", threads, blocks, spin_ns, launches);

	// Calibrate SM cycles per ns (about 10 ms of spinning).
	unsigned long long *dCal, cal[2];
	CHECK(cudaMalloc(&dCal, sizeof(cal)));
	calibrate<<<1, 1>>>(dCal, 20000000LL);
	CHECK_LAUNCH();
	CHECK(cudaMemcpy(cal, dCal, sizeof(cal), cudaMemcpyDeviceToHost));
	if (cal[1] == 0)
		result(false, "reason=calibration globaltimer_ns=0");
	double cyc_per_ns = (double)cal[0] / (double)cal[1];
	long long spin = (long long)(spin_ns * cyc_per_ns + 0.5);
	printf("calibration: %llu cycles in %llu ns of %%globaltimer = %.3f cycles/ns; spin = %lld cycles\n", cal[0], cal[1],
	       cyc_per_ns, spin);

	float *dOut;
	unsigned long long *dCyc;
	CHECK(cudaMalloc(&dOut, n * sizeof(float)));
	CHECK(cudaMalloc(&dCyc, n * sizeof(unsigned long long)));
	std::vector<float> out(n);
	std::vector<unsigned long long> cyc(n);
	long bad = 0, short_spins = 0;
	double slow_sum = 0, fast_sum = 0;
	long slow_n = 0, fast_n = 0;
	cudaEvent_t e0, e1;
	CHECK(cudaEventCreate(&e0));
	CHECK(cudaEventCreate(&e1));
	float ms_total = 0;
	for (int l = 0; l < launches; l++) {
		CHECK(cudaMemset(dOut, 0, n * sizeof(float)));
		CHECK(cudaEventRecord(e0));
		laneSlow<<<blocks, threads>>>(dOut, dCyc, spin, n);
		CHECK_LAUNCH();
		CHECK(cudaEventRecord(e1));
		CHECK(cudaMemcpy(out.data(), dOut, n * sizeof(float), cudaMemcpyDeviceToHost));
		CHECK(cudaMemcpy(cyc.data(), dCyc, n * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
		float ms = 0;
		CHECK(cudaEventElapsedTime(&ms, e0, e1));
		ms_total += ms;
		for (int i = 0; i < n; i++) {
			if (out[i] != (float)(3 * i + 1))
				bad++;
			if ((i % threads) % 32 == 31) {
				slow_sum += cyc[i];
				slow_n++;
				if ((long long)cyc[i] < spin)
					short_spins++;
			} else {
				fast_sum += cyc[i];
				fast_n++;
			}
		}
	}
	double slow_ns = slow_n ? slow_sum / slow_n / cyc_per_ns : 0;
	double fast_ns = fast_n ? fast_sum / fast_n / cyc_per_ns : 0;
	printf("lane 31: %ld thread runs, mean %.0f cycles = %.0f ns; other lanes: %ld runs, mean %.0f cycles = %.0f ns\n",
	       slow_n, slow_n ? slow_sum / slow_n : 0, slow_ns, fast_n, fast_n ? fast_sum / fast_n : 0, fast_ns);
	printf("kernel time (CUDA events): mean %.2f us over %d launches\n", ms_total * 1e3 / launches, launches);
	printf("checked %d outputs x %d launches: %ld wrong; lane-31 runs shorter than the spin: %ld\n", n, launches, bad,
	       short_spins);
	bool slower = spin_ns < 200 || slow_n == 0 || slow_sum / slow_n > (fast_n ? fast_sum / fast_n : 0);
	if (bad || short_spins || !slower)
		result(false, "reason=%s wrong=%ld short_spins=%ld lane31_ns=%.0f other_ns=%.0f",
		       bad ? "wrong_result" : "lane31_not_slow", bad, short_spins, slow_ns, fast_ns);
	CHECK(cudaFree(dOut));
	CHECK(cudaFree(dCyc));
	CHECK(cudaFree(dCal));
	result(true, "lane31_ns=%.0f other_ns=%.0f spin_cycles=%lld cycles_per_ns=%.3f kernel_us=%.2f", slow_ns, fast_ns,
	       spin, cyc_per_ns, ms_total * 1e3 / launches);
}
