// launch_heavy: many small kernel launches queued on several streams
// (launchlate's story: launches wait in queues before they start).
//
//   launch_heavy [LAUNCHES [STREAMS [KERNEL_NS [THREADS]]]]   defaults: 2000 4 20000 64
//
// Kernel: __global__ void tick(unsigned *counters, int stream_idx, long long ns)
//         mangled _Z4tickPjix
// Launch k goes to stream k % STREAMS (non-blocking streams). Each kernel
// busy-waits KERNEL_NS on %globaltimer (longer than a launch costs the CPU,
// so launches pile up in the stream queues), then every thread adds 1 to
// counters[stream_idx]: each counter must end at (launches on that stream) *
// THREADS. Prints the time to queue all launches, launches/s up to the final
// synchronisation, and checks the counters. LAUNCH_HEAVY_GATE=FILE: after the
// warm-up, print "GATED pid=PID" and wait (60 s at most) for FILE before the
// timed launches, so a test can attach a tool with -p first.
// LAUNCH_HEAVY_SECONDS=S: launch for S seconds instead of LAUNCHES times;
// LAUNCH_HEAVY_REPORT_S=R: every R seconds print "RATE t=T launches=N
// per_s=X" for that interval (a soak: scripts/gpu/soak-check.sh). Keep
// THREADS x launches per stream under 2^32 (the counters are 32-bit).
#include "common.h"

#include <cstdlib>
#include <unistd.h>
#include <vector>

__device__ static inline long long gtimer()
{
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return (long long)t;
}

__global__ void tick(unsigned *counters, int stream_idx, long long ns)
{
	long long t0 = gtimer();
	while (gtimer() - t0 < ns)
		;
	atomicAdd(&counters[stream_idx], 1u);
}

int main(int argc, char **argv)
{
	g_sample_name = "launch_heavy";
	usage_if_help(argc, argv, "[LAUNCHES [STREAMS [KERNEL_NS [THREADS]]]]  (defaults 2000 4 20000 64)");
	int launches = (int)arg_long(argc, argv, 1, 2000, 1, 100000000, "LAUNCHES");
	int nstreams = (int)arg_long(argc, argv, 2, 4, 1, 128, "STREAMS");
	long long kns = arg_long(argc, argv, 3, 20000, 0, 1000000000L, "KERNEL_NS");
	int threads = (int)arg_long(argc, argv, 4, 64, 1, 1024, "THREADS");
	print_device();
	printf("launch_heavy: launches=%d streams=%d kernel_ns=%lld threads=%d\n", launches, nstreams, kns, threads);

	std::vector<cudaStream_t> st(nstreams);
	for (auto &s : st)
		CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	unsigned *dCnt;
	CHECK(cudaMalloc(&dCnt, nstreams * sizeof(unsigned)));
	// Warm-up launch (module load), then reset the counters.
	tick<<<1, threads, 0, st[0]>>>(dCnt, 0, kns);
	CHECK_LAUNCH();
	CHECK(cudaDeviceSynchronize());
	CHECK(cudaMemset(dCnt, 0, nstreams * sizeof(unsigned)));
	CHECK(cudaDeviceSynchronize());
	if (const char *gate = getenv("LAUNCH_HEAVY_GATE")) {
		printf("GATED pid=%d\n", (int)getpid());
		fflush(stdout);
		for (int i = 0; i < 30000 && access(gate, F_OK) != 0; i++)
			usleep(2000);
	}

	const char *secs_env = getenv("LAUNCH_HEAVY_SECONDS"), *report_env = getenv("LAUNCH_HEAVY_REPORT_S");
	double secs = secs_env ? atof(secs_env) : 0, report = report_env ? atof(report_env) : 0;
	double t0 = now_ns(), since = t0;
	int k = 0, at_since = 0;
	for (; secs > 0 ? k < 2000000000 : k < launches; k++) {
		if ((secs > 0 || report > 0) && (k & 1023) == 0) {
			double t = now_ns();
			if (report > 0 && t - since >= report * 1e9) {
				printf("RATE t=%.1f launches=%d per_s=%.0f\n", (t - t0) / 1e9, k - at_since,
				       (k - at_since) / ((t - since) / 1e9));
				fflush(stdout);
				since = t;
				at_since = k;
			}
			if (secs > 0 && t - t0 >= secs * 1e9)
				break;
		}
		int s = k % nstreams;
		tick<<<1, threads, 0, st[s]>>>(dCnt, s, kns);
	}
	launches = k;
	double t1 = now_ns();
	CHECK_LAUNCH();
	CHECK(cudaDeviceSynchronize());
	double t2 = now_ns();

	std::vector<unsigned> cnt(nstreams);
	CHECK(cudaMemcpy(cnt.data(), dCnt, nstreams * sizeof(unsigned), cudaMemcpyDeviceToHost));
	long bad = 0;
	for (int s = 0; s < nstreams; s++) {
		unsigned on_s = launches / nstreams + (s < launches % nstreams ? 1 : 0);
		if (cnt[s] != on_s * (unsigned)threads) {
			printf("stream %d: counter %u, want %u\n", s, cnt[s], on_s * (unsigned)threads);
			bad++;
		}
	}
	double enqueue_us = (t1 - t0) / 1e3 / launches;
	double per_s = launches / ((t2 - t0) / 1e9);
	printf("queued %d launches in %.1f us (%.2f us per launch); all done after %.1f us: %.0f launches/s\n", launches,
	       (t1 - t0) / 1e3, enqueue_us, (t2 - t0) / 1e3, per_s);
	printf("checked %d stream counters: %ld wrong\n", nstreams, bad);
	if (bad)
		result(false, "reason=wrong_counters wrong=%ld", bad);
	for (auto &s : st)
		CHECK(cudaStreamDestroy(s));
	CHECK(cudaFree(dCnt));
	result(true, "launches=%d streams=%d launches_per_s=%.0f enqueue_us=%.2f", launches, nstreams, per_s, enqueue_us);
}
