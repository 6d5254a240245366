// launch_story: launchlate's story in four phases, each with its own kernel
// so the tool's per-kernel view tells them apart.
//
//   launch_story [LAUNCHES [BUSY_US]]   defaults: 200 500
//
//   idleTick      (_Z8idleTickPj)      launched one at a time on an idle GPU
//                                      (synchronised after each): starts in a
//                                      few microseconds.
//   queuedTick    (_Z10queuedTickPj)   launched right behind a BUSY_US kernel
//                                      (longBusy) and a 64 MiB copy on the same
//                                      stream: each waits for them, hundreds
//                                      of microseconds.
//   graphTick     (_Z9graphTickPj)     the queued phase's work captured once as
//                                      a CUDA graph and launched LAUNCHES times.
//   streamMark    (_Z10streamMarkPj)   four host threads, one stream each:
//                                      thread i (1..4) launches longBusy for
//                                      i*100 us, then streamMark, LAUNCHES/4
//                                      times; streamMark on stream i starts
//                                      about i*100 us after its launch call.
//                                      Prints "STREAM i 0x<handle>" per thread.
// Every tick kernel adds 1 per thread to a counter, checked at the end.
#include "common.h"

#include <thread>
#include <vector>

__device__ static inline unsigned long long gtimer()
{
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

__global__ void longBusy(long long ns)
{
	unsigned long long t0 = gtimer();
	while ((long long)(gtimer() - t0) < ns)
		;
}
__global__ void idleTick(unsigned *c) { atomicAdd(c, 1u); }
__global__ void queuedTick(unsigned *c) { atomicAdd(c, 1u); }
__global__ void graphTick(unsigned *c) { atomicAdd(c, 1u); }
__global__ void streamMark(unsigned *c) { atomicAdd(c, 1u); }

int main(int argc, char **argv)
{
	g_sample_name = "launch_story";
	long launches = arg_long(argc, argv, 1, 200, 4, 1000000, "LAUNCHES");
	long busy_us = arg_long(argc, argv, 2, 500, 1, 1000000, "BUSY_US");
	const int threads = 32;
	unsigned *c;
	CHECK(cudaMalloc(&c, 4 * sizeof(unsigned)));
	CHECK(cudaMemset(c, 0, 4 * sizeof(unsigned)));
	size_t bytes = 64 << 20;
	void *hbuf, *dbuf;
	CHECK(cudaMallocHost(&hbuf, bytes));
	CHECK(cudaMalloc(&dbuf, bytes));
	cudaStream_t s;
	CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

	double t0 = now_ns() / 1e3;
	for (long i = 0; i < launches; i++) {
		idleTick<<<1, threads, 0, s>>>(c);
		CHECK_LAUNCH();
		CHECK(cudaStreamSynchronize(s));
	}
	double t1 = now_ns() / 1e3;
	for (long i = 0; i < launches; i++) {
		longBusy<<<1, 1, 0, s>>>(busy_us * 1000);
		CHECK(cudaMemcpyAsync(dbuf, hbuf, bytes / 16, cudaMemcpyHostToDevice, s));
		queuedTick<<<1, threads, 0, s>>>(c + 1);
		CHECK_LAUNCH();
		if (i % 8 == 7)
			CHECK(cudaStreamSynchronize(s));
	}
	CHECK(cudaStreamSynchronize(s));
	double t2 = now_ns() / 1e3;
	cudaGraph_t g;
	cudaGraphExec_t ge;
	CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
	graphTick<<<1, threads, 0, s>>>(c + 2);
	CHECK(cudaStreamEndCapture(s, &g));
	CHECK(cudaGraphInstantiate(&ge, g, 0));
	for (long i = 0; i < launches; i++) {
		CHECK(cudaGraphLaunch(ge, s));
		CHECK(cudaStreamSynchronize(s));
	}
	double t3 = now_ns() / 1e3;

	std::vector<std::thread> ths;
	std::vector<cudaStream_t> ss(4);
	for (int i = 0; i < 4; i++)
		CHECK(cudaStreamCreateWithFlags(&ss[i], cudaStreamNonBlocking));
	for (int i = 0; i < 4; i++)
		printf("STREAM %d %p\n", i + 1, (void *)ss[i]);
	for (int i = 0; i < 4; i++) {
		ths.emplace_back([&, i] {
			for (long k = 0; k < launches / 4; k++) {
				longBusy<<<1, 1, 0, ss[i]>>>((long long)(i + 1) * 100000);
				streamMark<<<1, threads, 0, ss[i]>>>(c + 3);
				cudaStreamSynchronize(ss[i]);
			}
		});
	}
	for (auto &t : ths)
		t.join();
	CHECK(cudaDeviceSynchronize());
	double t4 = now_ns() / 1e3;

	unsigned h[4];
	CHECK(cudaMemcpy(h, c, sizeof(h), cudaMemcpyDeviceToHost));
	unsigned want = (unsigned)(launches * threads), want4 = (unsigned)(launches / 4 * 4 * threads);
	printf("phases (ms): idle %.1f, queued %.1f, graph %.1f, streams %.1f\n", (t1 - t0) / 1e3, (t2 - t1) / 1e3,
	       (t3 - t2) / 1e3, (t4 - t3) / 1e3);
	bool ok = h[0] == want && h[1] == want && h[2] == want && h[3] == want4;
	result(ok, "launches=%ld idle=%u queued=%u graph=%u streams=%u want=%u/%u", launches, h[0], h[1], h[2], h[3], want,
	       want4);
}
