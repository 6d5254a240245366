/* Fake libcudart: every runtime call goes on to the fake driver, as the real
 * one does, so the test proves that such a call is reported once. */
#include "fakecuda.h"

#define API __attribute__((noinline, visibility("default")))

API cudaError_t cudaMalloc(void **devPtr, size_t size)
{
	CUdeviceptr p = 0;
	if (cuMemAlloc_v2(&p, size) != 0)
		return 2; /* cudaErrorMemoryAllocation */
	*devPtr = (void *)p;
	return 0;
}
API cudaError_t cudaFree(void *devPtr) { return cuMemFree_v2((CUdeviceptr)devPtr) ? 1 : 0; }
API cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
	switch (kind) {
	case cudaMemcpyHostToDevice: return cuMemcpyHtoD_v2((CUdeviceptr)dst, src, count);
	case cudaMemcpyDeviceToHost: return cuMemcpyDtoH_v2(dst, (CUdeviceptr)src, count);
	case cudaMemcpyDeviceToDevice: return cuMemcpyDtoDAsync_v2((CUdeviceptr)dst, (CUdeviceptr)src, count, 0);
	default: return cuMemcpy((CUdeviceptr)dst, (CUdeviceptr)src, count);
	}
}
API cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream)
{
	return cuMemcpyDtoDAsync_v2((CUdeviceptr)dst, (CUdeviceptr)src, count, (CUstream)stream);
}
API cudaError_t cudaMemset(void *devPtr, int value, size_t count) { return devPtr ? 0 : 1; }
API cudaError_t cudaLaunchKernel(const void *func, dim3 g, dim3 b, void **args, size_t sharedMem, cudaStream_t stream)
{
	/* The real cudart maps the host stub to a CUfunction and calls the driver. */
	return cuLaunchKernel((CUfunction)func, g.x, g.y, g.z, b.x, b.y, b.z, (unsigned)sharedMem, (CUstream)stream, args, 0) ? 98 : 0;
}
API cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) { return exec ? 0 : 400; }
