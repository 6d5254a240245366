/* The driver of the CPU proxy benchmark (libcuda.so.1): what cudart's launch
 * path does in it, with the real signatures. A launch costs a fixed busy
 * wait that stands for the driver's work of a real launch (2.5 us by
 * default: the CPU time of an empty-kernel launch on an H100, CUDA 13);
 * FAKECUDA_LAUNCH_NS changes it. */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "../fakecuda.h"

#define API __attribute__((noinline, visibility("default")))

static long launch_ns = 2500;
static volatile unsigned long long sink;
static __thread void *current_ctx = (void *)0xc0;

__attribute__((constructor)) static void init(void)
{
	const char *s = getenv("FAKECUDA_LAUNCH_NS");
	if (s)
		launch_ns = atol(s);
}

static inline long long now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* The work of a launch: validate, write the launch into the stream's queue. */
static void launch_work(unsigned long long key)
{
	long long t0 = now_ns();
	while (now_ns() - t0 < launch_ns)
		sink += key;
}

API CUresult cuInit(unsigned int flags) { sink = flags; return 0; }
API CUresult cuCtxGetCurrent(void **ctx) { *ctx = current_ctx; return 0; }
/* The exported entry point is a thunk into the implementation, and its
 * first instruction is one the kernel cannot emulate: a probe on it is
 * single-stepped. On the GPU machine a probe on the real cuLaunchKernel cost
 * about seven times one on cudaLaunchKernel, which a single step explains;
 * gpuevent_snoop -j reports which launch probes are single-stepped
 * ("single_stepped" in the account) for the real libraries. */
__attribute__((noinline, used)) static CUresult launch_impl(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
	unsigned int bx, unsigned int by, unsigned int bz, unsigned int sharedMemBytes,
	CUstream hStream, void **kernelParams, void **extra)
{
	if (!f || !gx || !bx)
		return 1; /* CUDA_ERROR_INVALID_VALUE */
	launch_work((unsigned long long)f + gx * gy * gz + bx * by * bz + sharedMemBytes + (unsigned long long)hStream +
		    (unsigned long long)kernelParams + (unsigned long long)extra);
	return 0;
}
__attribute__((naked, visibility("default"))) CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy,
	unsigned int gz, unsigned int bx, unsigned int by, unsigned int bz, unsigned int sharedMemBytes, CUstream hStream,
	void **kernelParams, void **extra)
{
	__asm__ volatile("mov %rdi, %rax\n\tjmp launch_impl");
}

API CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **kernelParams, void **extra)
{
	return cuLaunchKernel(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ,
			      c->sharedMemBytes, c->hStream, kernelParams, extra);
}
API CUresult cuLibraryGetKernel(CUkernel *k, CUlibrary lib, const char *name)
{
	sink = (unsigned long long)lib + strlen(name);
	*k = malloc(64);
	return 0;
}
API CUresult cuKernelGetFunction(CUfunction *f, CUkernel k)
{
	sink = (unsigned long long)k;
	*f = malloc(64);
	return 0;
}
API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	*dptr = 0x7f0000000000ULL + bytesize;
	return 0;
}
API CUresult cuMemFree_v2(CUdeviceptr dptr) { sink = dptr; return 0; }

/* cudart asks for each driver entry point by name once, at start-up. */
API CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, unsigned long long flags, int *status)
{
	static const struct { const char *name; void *fn; } table[] = {
		{"cuInit", (void *)cuInit},
		{"cuCtxGetCurrent", (void *)cuCtxGetCurrent},
		{"cuLaunchKernel", (void *)cuLaunchKernel},
		{"cuLaunchKernelEx", (void *)cuLaunchKernelEx},
		{"cuLibraryGetKernel", (void *)cuLibraryGetKernel},
		{"cuKernelGetFunction", (void *)cuKernelGetFunction},
		{"cuMemAlloc", (void *)cuMemAlloc_v2},
		{"cuMemFree", (void *)cuMemFree_v2},
	};
	sink = version + flags;
	for (unsigned i = 0; i < sizeof(table) / sizeof(table[0]); i++)
		if (!strcmp(symbol, table[i].name)) {
			*pfn = table[i].fn;
			if (status)
				*status = 1;
			return 0;
		}
	*pfn = 0;
	if (status)
		*status = 0;
	return 500; /* CUDA_ERROR_NOT_FOUND */
}
