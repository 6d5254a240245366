// cupti_midrun: does CUPTI, loaded and turned on in a program that has run
// CUDA for a while, see that program's kernels? launchlate -p on PyTorch got
// no kernel record at all (H100 and H200, 2026-11-28); this separates CUPTI
// itself from the way the agent reaches the process (issue 43).
//
//   cupti_midrun plain SECS          launch an empty kernel (SASS only) in a
//                                    loop for SECS seconds: a process for -p
//   cupti_midrun self SECS LIBCUPTI  the same, and 1 s in a second thread
//                                    dlopens LIBCUPTI (never linked), turns
//                                    on kernel records and the driver's
//                                    launch callback, as the agent does;
//                                    flushes 0.5 s before the end
//
// Prints "MIDRUN mode=M launches=L after_on=A callbacks=C requested=R
// completed=B kernels=K" (A: launches after CUPTI was on).
// Diagnostic, run by scripts/gpu/cupti-midrun.sh, not a test.
#include <cuda_runtime.h>
#include <cupti.h>
#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <thread>
#include <unistd.h>

__global__ void empty(int) {}

static double now_s()
{
	timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static std::atomic<long> callbacks, requested, completed, kernels;

static CUptiResult (*pGetNextRecord)(uint8_t *, size_t, CUpti_Activity **);

static void CUPTIAPI on_requested(uint8_t **b, size_t *size, size_t *max)
{
	requested++;
	*size = 8u << 20;
	*b = (uint8_t *)aligned_alloc(8, *size);
	*max = 0;
}

static void CUPTIAPI on_completed(CUcontext, uint32_t, uint8_t *b, size_t, size_t valid)
{
	completed++;
	CUpti_Activity *a = nullptr;
	while (pGetNextRecord(b, valid, &a) == CUPTI_SUCCESS)
		if (a->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
			kernels++;
	free(b);
}

static void CUPTIAPI on_launch(void *, CUpti_CallbackDomain, CUpti_CallbackId, const CUpti_CallbackData *d)
{
	if (d->callbackSite == CUPTI_API_ENTER)
		callbacks++;
}

#define SYM(var, name)                                                                      \
	auto var = (decltype(&name))dlsym(h, #name);                                        \
	if (!var) {                                                                         \
		fprintf(stderr, "cupti_midrun: %s not in %s\n", #name, lib);                \
		exit(1);                                                                    \
	}
#define CK(x)                                                                               \
	do {                                                                                \
		CUptiResult r_ = (x);                                                       \
		if (r_ != CUPTI_SUCCESS) {                                                  \
			fprintf(stderr, "cupti_midrun: %s: %d\n", #x, (int)r_);             \
			exit(1);                                                            \
		}                                                                           \
	} while (0)

static void (*flush_all)(void);

static void turn_on(const char *lib)
{
	void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "cupti_midrun: %s\n", dlerror());
		exit(1);
	}
	SYM(sub_fn, cuptiSubscribe);
	SYM(enable_cb, cuptiEnableCallback);
	SYM(reg, cuptiActivityRegisterCallbacks);
	SYM(enable, cuptiActivityEnable);
	SYM(flush, cuptiActivityFlushAll);
	SYM(next, cuptiActivityGetNextRecord);
	pGetNextRecord = next;
	static decltype(&cuptiActivityFlushAll) f;
	f = flush;
	flush_all = [] { f(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED); };
	CUpti_SubscriberHandle sub;
	CK(sub_fn(&sub, (CUpti_CallbackFunc)on_launch, nullptr));
	CK(reg(on_requested, on_completed));
	CK(enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
	CK(enable_cb(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel));
	CK(enable_cb(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz));
	CK(enable_cb(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx));
	CK(enable_cb(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz));
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "plain";
	double secs = argc > 2 ? atof(argv[2]) : 5;
	const char *lib = argc > 3 ? argv[3] : "libcupti.so.13";
	bool self = !strcmp(mode, "self");
	std::atomic<bool> on{false};
	std::atomic<long> launches{0}, after_on{0};
	cudaStream_t s;
	cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
	double t0 = now_s();
	std::thread tool;
	if (self)
		tool = std::thread([&] {
			while (now_s() - t0 < 1)
				usleep(1000);
			turn_on(lib);
			on = true;
			while (now_s() - t0 < secs - 0.5)
				usleep(1000);
			flush_all();
		});
	printf("MIDRUN_READY pid=%d\n", (int)getpid());
	fflush(stdout);
	while (now_s() - t0 < secs) {
		for (int i = 0; i < 100; i++) {
			empty<<<1, 32, 0, s>>>(i);
			launches++;
			if (on)
				after_on++;
		}
		cudaStreamSynchronize(s);
	}
	if (self)
		tool.join();
	cudaError_t e = cudaDeviceSynchronize();
	printf("MIDRUN mode=%s launches=%ld after_on=%ld callbacks=%ld requested=%ld completed=%ld kernels=%ld cuda=%s\n",
	       mode, launches.load(), after_on.load(), callbacks.load(), requested.load(), completed.load(),
	       kernels.load(), cudaGetErrorString(e));
	return e == cudaSuccess ? 0 : 1;
}
