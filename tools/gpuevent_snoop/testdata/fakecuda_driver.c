/* Fake libcuda: hands out distinct fake device addresses. */
#include <stdlib.h>
#include "fakecuda.h"

static CUdeviceptr next_ptr = 0x7f0000000000ULL;
static volatile unsigned long long sink;

#define API __attribute__((noinline, visibility("default")))

API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	if (bytesize > (1ULL << 36))
		return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
	*dptr = __atomic_fetch_add(&next_ptr, (bytesize + 0xfffff) & ~0xfffffULL, __ATOMIC_SEQ_CST);
	return 0;
}
API CUresult cuMemFree_v2(CUdeviceptr dptr) { sink = dptr; return dptr ? 0 : 1; }
API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) { sink = dst + n; return 0; }
API CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) { sink = src + n; return 0; }
API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) { sink = dst + src + n; return 0; }
API CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) { sink = dst + src + n; return 0; }
API CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
	unsigned int bx, unsigned int by, unsigned int bz, unsigned int sharedMemBytes,
	CUstream hStream, void **kernelParams, void **extra)
{
	sink = (unsigned long long)f + gx + gy + gz + bx + by + bz + sharedMemBytes + (unsigned long long)hStream;
	return f ? 0 : 400; /* CUDA_ERROR_INVALID_HANDLE */
}
API CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **kernelParams, void **extra)
{
	sink = c->gridDimX + (unsigned long long)f;
	return 0;
}

/* Handles are heap objects, as the driver's are: no symbol names them. */
API CUresult cuLibraryGetKernel(CUkernel *k, CUlibrary lib, const char *name)
{
	sink = (unsigned long long)lib + (unsigned long long)name;
	*k = malloc(64);
	return 0;
}
API CUresult cuModuleGetFunction(CUfunction *f, CUmodule mod, const char *name)
{
	sink = (unsigned long long)mod + (unsigned long long)name;
	*f = malloc(64);
	return 0;
}
API CUresult cuKernelGetFunction(CUfunction *f, CUkernel k)
{
	sink = (unsigned long long)k;
	*f = malloc(64);
	return 0;
}
