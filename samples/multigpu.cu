// multigpu: different work on every GPU of the machine from one process
// (issue 45: a launch is (process, device, context, grid id); two GPUs hand
// out the same grid ids).
//
//   multigpu [MODE]      MODE: serial (default: one host thread switches
//                        devices) or threads (one host thread per GPU)
//
// Kernels: work(unsigned *count) (mangled _Z4workPj): every thread adds 1;
//          spin(long long ns) (_Z4spinx): busy-waits ns on %globaltimer;
//          tick(unsigned *count) (_Z4tickPj): one thread adds 1.
// Device d runs 10*(d+1) launches of work<<<8*(d+1), 256>>> (2048*(d+1)
// threads each), then 5 times a 1 ms spin followed by a tick (the tick waits
// about 1 ms in its stream). Prints, per device, "EXPECT device=D kernel=work
// launches=L threads=T" (and the same for tick), checks every counter, and
// the RESULT line.
#include "common.h"

#include <cstring>
#include <thread>
#include <vector>

__global__ void work(unsigned *count) { atomicAdd(count, 1u); }

__global__ void spin(long long ns)
{
	unsigned long long t0, t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
	do
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	while ((long long)(t - t0) < ns);
}

__global__ void tick(unsigned *count) { atomicAdd(count, 1u); }

// run does device d's share and returns whether its counters are right.
static bool run(int d)
{
	CHECK(cudaSetDevice(d));
	unsigned *c;
	CHECK(cudaMalloc(&c, 2 * sizeof(unsigned)));
	CHECK(cudaMemset(c, 0, 2 * sizeof(unsigned)));
	int launches = 10 * (d + 1), blocks = 8 * (d + 1);
	for (int i = 0; i < launches; i++)
		work<<<blocks, 256>>>(c);
	CHECK_LAUNCH();
	for (int i = 0; i < 5; i++) {
		spin<<<1, 1>>>(1000000);
		tick<<<1, 1>>>(c + 1);
	}
	CHECK_LAUNCH();
	CHECK(cudaDeviceSynchronize());
	unsigned h[2];
	CHECK(cudaMemcpy(h, c, sizeof(h), cudaMemcpyDeviceToHost));
	CHECK(cudaFree(c));
	unsigned want = (unsigned)(launches * blocks * 256);
	if (h[0] != want || h[1] != 5) {
		printf("device %d: work counted %u (want %u), tick %u (want 5)\n", d, h[0], want, h[1]);
		return false;
	}
	return true;
}

int main(int argc, char **argv)
{
	g_sample_name = "multigpu";
	usage_if_help(argc, argv, "[serial|threads]");
	bool threads = argc > 1 && !strcmp(argv[1], "threads");
	int n = 0;
	CHECK(cudaGetDeviceCount(&n));
	printf("multigpu: %d GPU(s), %s\n", n, threads ? "one host thread per GPU" : "one host thread");
	for (int d = 0; d < n; d++) {
		cudaDeviceProp p;
		CHECK(cudaGetDeviceProperties(&p, d));
		printf("device %d: %s\n", d, p.name);
		printf("EXPECT device=%d kernel=work launches=%d threads=%d\n", d, 10 * (d + 1), 2048 * (d + 1));
		printf("EXPECT device=%d kernel=tick launches=5 threads=1\n", d);
	}
	fflush(stdout);
	std::vector<char> ok(n, 0);
	if (threads) {
		std::vector<std::thread> ts;
		for (int d = 0; d < n; d++)
			ts.emplace_back([d, &ok] { ok[d] = run(d); });
		for (auto &t : ts)
			t.join();
	} else {
		for (int d = 0; d < n; d++)
			ok[d] = run(d);
	}
	for (int d = 0; d < n; d++)
		if (!ok[d])
			result(false, "reason=wrong_counters device=%d", d);
	result(true, "gpus=%d mode=%s", n, threads ? "threads" : "serial");
}
