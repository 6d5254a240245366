/* The CPU proxy of samples/launch_heavy.cu: LAUNCHES launches of one kernel
 * on STREAMS streams through the stand-in cudart, then the launch rate in
 * the sample's RESULT format.
 *
 *   launch_heavy [LAUNCHES [STREAMS [quiet]]]   defaults 200000 4
 *
 * quiet: no output but the exit status (its lines would land in the middle
 * of the tool's JSON when both write to one pipe). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "../fakecuda.h"

cudaError_t cudaGetLastError(void);

/* The host stub nvcc emits for __global__ void tick(unsigned *, int, long long). */
__attribute__((noinline)) void tick_stub(unsigned *c, int s, long long ns) __asm__("_Z4tickPjix");
__attribute__((noinline)) void tick_stub(unsigned *c, int s, long long ns) { (void)c; (void)s; (void)ns; }

void __cudaRegisterFunction(void **fatbin, const char *hostFun, char *deviceFun, const char *deviceName,
			    int threadLimit, void *tid, void *bid, void *bDim, void *gDim, int *wSize);

/* What nvcc's generated module constructor does: register each kernel's
 * host stub with its device name, by which the runtime looks it up. */
__attribute__((constructor)) static void register_kernels(void)
{
	__cudaRegisterFunction(0, (const char *)tick_stub, (char *)"_Z4tickPjix", "_Z4tickPjix", -1, 0, 0, 0, 0, 0);
}

static double now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv)
{
	long launches = argc > 1 ? atol(argv[1]) : 200000;
	int nstreams = argc > 2 ? atoi(argv[2]) : 4;
	if (argc > 3 && argv[3][0] == 'q')
		freopen("/dev/null", "w", stdout);
	void *counters = 0;
	if (cudaMalloc(&counters, 64) != 0) {
		printf("RESULT launch_heavy fail reason=malloc\n");
		return 1;
	}
	long long ns = 0;
	int s = 0;
	void *args[] = {&counters, &s, &ns};
	dim3 grid = {1, 1, 1}, block = {64, 1, 1};
	/* Warm-up launch (the stub's kernel lookup), as the sample does. */
	cudaLaunchKernel((const void *)tick_stub, grid, block, args, 0, (cudaStream_t)0x1000);
	double t0 = now_ns();
	for (long k = 0; k < launches; k++) {
		s = k % nstreams;
		cudaLaunchKernel((const void *)tick_stub, grid, block, args, 0, (cudaStream_t)(0x1000 + 0x100 * (long)s));
	}
	double t1 = now_ns();
	int err = cudaGetLastError();
	cudaFree(counters);
	if (err) {
		printf("RESULT launch_heavy fail reason=launch error=%d\n", err);
		return 1;
	}
	printf("queued %ld launches in %.1f us (%.2f us per launch)\n", launches, (t1 - t0) / 1e3, (t1 - t0) / 1e3 / launches);
	printf("RESULT launch_heavy ok launches=%ld streams=%d launches_per_s=%.0f enqueue_us=%.2f\n", launches, nstreams,
	       launches / ((t1 - t0) / 1e9), (t1 - t0) / 1e3 / launches);
	return 0;
}
