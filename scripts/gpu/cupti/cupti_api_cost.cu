// cupti_api_cost: what each way of tying CUPTI's kernel records to their
// launch calls costs a launch loop, and whether it ties them (issue 43).
// One process per mode (CUPTI's state is per process); the loop is
// launch_heavy_sass's: N empty launches round-robin over 4 streams from one
// thread. Before the loop, a second thread launches without pause while the
// mode is turned on, as in a program a tool attaches to (-p): setup_ms is
// how long turning it on took under that load.
//
//   cupti_api_cost MODE [N]
//
// MODE: none (no CUPTI), records (concurrent-kernel records alone),
// api-after (records + driver and runtime API records, every API turned off
// and the launch calls on, after enabling the kinds: Kineto's and Aerial's
// order), api-before (the same filters set before the kinds are enabled),
// api-all (API records of every call, no filter), callback (records +
// CUPTI's driver-domain launch callbacks, as the agent's callback join).
//
// Prints one line:
//   MODE mode=M setup_ms=S rate=R kernels=K api_launch=A api_other=O joined=J
// joined: kernel records whose correlation id has an API record.
// Diagnostic, run by scripts/gpu/cupti-check.sh, not a test.
#include <cuda_runtime.h>
#include <cupti.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <thread>
#include <unistd.h>
#include <vector>

__global__ void empty(int) {}

static double now_s()
{
	timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

#define CK(x)                                                                                  \
	do {                                                                                   \
		CUptiResult r_ = (x);                                                          \
		if (r_ != CUPTI_SUCCESS) {                                                     \
			const char *s_ = "?";                                                  \
			cuptiGetResultString(r_, &s_);                                         \
			fprintf(stderr, "cupti_api_cost: %s: %s (%d)\n", #x, s_, (int)r_);    \
			exit(1);                                                               \
		}                                                                              \
	} while (0)

static const CUpti_CallbackId driver_launch[] = {
	CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
	CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
	CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz,
	CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel, CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
};
static const CUpti_CallbackId runtime_launch[] = {
	CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000,
	CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060,
	CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000, CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000,
	CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000,
	CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000,
};

static bool is_launch(CUpti_ActivityKind k, uint32_t cbid)
{
	const CUpti_CallbackId *ids = k == CUPTI_ACTIVITY_KIND_DRIVER ? driver_launch : runtime_launch;
	for (int i = 0; i < 8; i++)
		if (ids[i] == cbid)
			return true;
	return false;
}

static std::vector<uint8_t> api_corr(1u << 24);
static std::vector<uint32_t> kernel_corr;
static unsigned long long n_api_launch, n_api_other;
static std::atomic<unsigned long long> stamps;

static void CUPTIAPI requested(uint8_t **b, size_t *size, size_t *max)
{
	*size = 8u << 20;
	*b = (uint8_t *)aligned_alloc(8, *size);
	*max = 0;
}

static void CUPTIAPI completed(CUcontext, uint32_t, uint8_t *b, size_t, size_t valid)
{
	CUpti_Activity *a = nullptr;
	while (cuptiActivityGetNextRecord(b, valid, &a) == CUPTI_SUCCESS) {
		if (a->kind == CUPTI_ACTIVITY_KIND_DRIVER || a->kind == CUPTI_ACTIVITY_KIND_RUNTIME) {
			auto *r = (CUpti_ActivityAPI *)a;
			if (is_launch(a->kind, r->cbid)) {
				n_api_launch++;
				api_corr[r->correlationId & (api_corr.size() - 1)] = 1;
			} else {
				n_api_other++;
			}
		} else if (a->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
			kernel_corr.push_back(((CUpti_ActivityKernel10 *)a)->correlationId);
		}
	}
	free(b);
}

static void CUPTIAPI on_launch(void *, CUpti_CallbackDomain, CUpti_CallbackId, const CUpti_CallbackData *d)
{
	if (d->callbackSite == CUPTI_API_ENTER) {
		timespec t;
		clock_gettime(CLOCK_MONOTONIC, &t);
		stamps.fetch_add(1, std::memory_order_relaxed);
	}
}

static void filters()
{
	for (CUpti_CallbackId id = 1; id < CUPTI_DRIVER_TRACE_CBID_SIZE; id++)
		cuptiActivityEnableDriverApi(id, 0);
	for (CUpti_CallbackId id = 1; id < CUPTI_RUNTIME_TRACE_CBID_SIZE; id++)
		cuptiActivityEnableRuntimeApi(id, 0);
	for (auto id : driver_launch)
		cuptiActivityEnableDriverApi(id, 1);
	for (auto id : runtime_launch)
		cuptiActivityEnableRuntimeApi(id, 1);
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "none";
	long n = argc > 2 ? atol(argv[2]) : 100000;
	cudaStream_t s[4];
	for (auto &x : s)
		cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking);
	empty<<<1, 32, 0, s[0]>>>(0);
	cudaDeviceSynchronize();

	// the load while the mode is turned on
	std::atomic<bool> stop{false};
	cudaStream_t bs;
	cudaStreamCreateWithFlags(&bs, cudaStreamNonBlocking);
	std::thread bg([&] {
		while (!stop.load(std::memory_order_relaxed))
			empty<<<1, 32, 0, bs>>>(1);
	});
	usleep(100000);

	double t0 = now_s();
	if (strcmp(mode, "none")) {
		CK(cuptiActivityRegisterCallbacks(requested, completed));
		CK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
	}
	if (!strcmp(mode, "api-after")) {
		CK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER));
		CK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME));
		filters();
	} else if (!strcmp(mode, "api-before")) {
		filters();
		CK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER));
		CK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME));
	} else if (!strcmp(mode, "api-all")) {
		CK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER));
		CK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME));
	} else if (!strcmp(mode, "callback")) {
		CUpti_SubscriberHandle sub;
		CK(cuptiSubscribe(&sub, (CUpti_CallbackFunc)on_launch, nullptr));
		for (auto id : driver_launch)
			CK(cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, id));
	} else if (strcmp(mode, "none") && strcmp(mode, "records")) {
		fprintf(stderr, "cupti_api_cost: unknown mode %s\n", mode);
		return 2;
	}
	double setup = now_s() - t0;
	stop = true;
	bg.join();
	cudaDeviceSynchronize();
	if (strcmp(mode, "none"))
		cuptiActivityFlushAll(1);
	kernel_corr.clear();
	n_api_launch = n_api_other = 0;
	std::fill(api_corr.begin(), api_corr.end(), 0);

	t0 = now_s();
	for (long i = 0; i < n; i++)
		empty<<<1, 32, 0, s[i & 3]>>>((int)i);
	double dt = now_s() - t0;
	cudaDeviceSynchronize();
	if (strcmp(mode, "none"))
		cuptiActivityFlushAll(1);
	unsigned long long joined = 0;
	for (auto c : kernel_corr)
		joined += api_corr[c & (api_corr.size() - 1)];
	printf("MODE mode=%s setup_ms=%.1f rate=%.0f kernels=%zu api_launch=%llu api_other=%llu joined=%llu stamps=%llu\n",
	       mode, setup * 1e3, n / dt, kernel_corr.size(), n_api_launch, n_api_other, joined,
	       (unsigned long long)stamps.load());
	return 0;
}
