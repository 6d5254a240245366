/* The runtime of the CPU proxy benchmark: a cudaLaunchKernel that does on
 * the CPU what CUDA 12/13's does, as far as the driver sees it. Like real
 * cudart it opens libcuda.so.1 itself at its first call and takes every
 * driver entry point from cuGetProcAddress (so its calls go through
 * function pointers, not the PLT); per launch it reads its thread state,
 * maps the host stub to the kernel handle it looked up at the stub's first
 * launch (cuLibraryGetKernel + cuKernelGetFunction, as lazy loading does) by
 * the device name the program registered for the stub at start-up
 * (__cudaRegisterFunction, which nvcc's generated code calls), asks the
 * driver for the current context and calls cuLaunchKernel.
 * Linked into the program (static cudart, nvcc's default) or built as
 * libcudart.so.12. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include "../fakecuda.h"

#define API __attribute__((noinline, visibility("default")))

typedef CUresult (*getproc_t)(const char *, void **, int, unsigned long long, int *);
static struct {
	CUresult (*init)(unsigned int);
	CUresult (*ctx_get_current)(void **);
	CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
			   void **, void **);
	CUresult (*library_get_kernel)(CUkernel *, CUlibrary, const char *);
	CUresult (*kernel_get_function)(CUfunction *, CUkernel);
	CUresult (*mem_alloc)(CUdeviceptr *, size_t);
	CUresult (*mem_free)(CUdeviceptr);
} drv;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int init_error;

static void load_driver(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	getproc_t getproc = h ? (getproc_t)dlsym(h, "cuGetProcAddress") : 0;
	if (!getproc) {
		init_error = 35; /* cudaErrorInsufficientDriver */
		return;
	}
	getproc("cuInit", (void **)&drv.init, 12000, 0, 0);
	getproc("cuCtxGetCurrent", (void **)&drv.ctx_get_current, 12000, 0, 0);
	getproc("cuLaunchKernel", (void **)&drv.launch, 12000, 0, 0);
	getproc("cuLibraryGetKernel", (void **)&drv.library_get_kernel, 12000, 0, 0);
	getproc("cuKernelGetFunction", (void **)&drv.kernel_get_function, 12000, 0, 0);
	getproc("cuMemAlloc", (void **)&drv.mem_alloc, 12000, 0, 0);
	getproc("cuMemFree", (void **)&drv.mem_free, 12000, 0, 0);
	drv.init(0);
}

/* Host stub -> device name (registered) and CUfunction (filled at the
 * stub's first launch). */
#define NSTUBS 64
static struct {
	const void *stub;
	const char *name;
	CUfunction fn;
} stubs[NSTUBS];
static pthread_mutex_t stubs_mu = PTHREAD_MUTEX_INITIALIZER;

/* What nvcc's module constructor calls for each kernel of the program. */
API void __cudaRegisterFunction(void **fatbin, const char *hostFun, char *deviceFun, const char *deviceName,
				int threadLimit, void *tid, void *bid, void *bDim, void *gDim, int *wSize)
{
	(void)fatbin, (void)deviceFun, (void)threadLimit, (void)tid, (void)bid, (void)bDim, (void)gDim, (void)wSize;
	pthread_mutex_lock(&stubs_mu);
	for (unsigned i = 0; i < NSTUBS; i++)
		if (!stubs[i].name) {
			stubs[i].name = deviceName;
			__atomic_store_n(&stubs[i].stub, (const void *)hostFun, __ATOMIC_RELEASE);
			break;
		}
	pthread_mutex_unlock(&stubs_mu);
}

struct thread_state {
	int last_error;
	void *ctx;
};
static __thread struct thread_state ts;

/* 0 for a stub nobody registered (cudaErrorInvalidDeviceFunction). */
static CUfunction function_of(const void *stub)
{
	unsigned i;
	for (i = 0; i < NSTUBS && __atomic_load_n(&stubs[i].stub, __ATOMIC_ACQUIRE); i++)
		if (stubs[i].stub == stub) {
			CUfunction f = __atomic_load_n(&stubs[i].fn, __ATOMIC_ACQUIRE);
			if (f)
				return f;
			break;
		}
	if (i == NSTUBS || !stubs[i].stub)
		return 0;
	pthread_mutex_lock(&stubs_mu);
	if (!stubs[i].fn) {
		CUkernel k = 0;
		CUfunction f = 0;
		drv.library_get_kernel(&k, (CUlibrary)0x10, stubs[i].name);
		drv.kernel_get_function(&f, k);
		__atomic_store_n(&stubs[i].fn, f, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&stubs_mu);
	return stubs[i].fn;
}

API cudaError_t cudaLaunchKernel(const void *func, dim3 g, dim3 b, void **args, size_t sharedMem, cudaStream_t stream)
{
	pthread_once(&once, load_driver);
	if (init_error)
		return ts.last_error = init_error;
	CUfunction f = function_of(func);
	if (!f)
		return ts.last_error = 98; /* cudaErrorInvalidDeviceFunction */
	if (drv.ctx_get_current(&ts.ctx) != 0 || !ts.ctx)
		return ts.last_error = 201;
	CUresult r = drv.launch(f, g.x, g.y, g.z, b.x, b.y, b.z, (unsigned)sharedMem, (CUstream)stream, args, 0);
	if (r != 0)
		return ts.last_error = 9; /* cudaErrorInvalidConfiguration */
	return 0;
}

API cudaError_t cudaMalloc(void **p, size_t n)
{
	pthread_once(&once, load_driver);
	CUdeviceptr d = 0;
	if (init_error || drv.mem_alloc(&d, n))
		return 2;
	*p = (void *)d;
	return 0;
}

API cudaError_t cudaFree(void *p)
{
	pthread_once(&once, load_driver);
	return init_error || drv.mem_free((CUdeviceptr)p) ? 1 : 0;
}

API cudaError_t cudaGetLastError(void)
{
	int e = ts.last_error;
	ts.last_error = 0;
	return e;
}
