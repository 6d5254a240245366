/* Smoke test of the agent's cuCtxCreate wrappers on the real driver: a
 * program that makes its own context, directly (CUDA 13's cuda.h maps
 * cuCtxCreate to cuCtxCreate_v4) and through cuGetProcAddress, must work
 * unchanged with the agent preloaded.
 *   nvcc -o ctxcreate ctxcreate.c -lcuda && LD_PRELOAD=libgpubpf-agent.so ./ctxcreate */
#include <cuda.h>
#include <stdio.h>

#define CK(x)                                                                  \
	do {                                                                       \
		CUresult r_ = (x);                                                     \
		if (r_ != CUDA_SUCCESS) {                                              \
			fprintf(stderr, "%s: CUresult %d\n", #x, (int)r_);                 \
			return 1;                                                          \
		}                                                                      \
	} while (0)

int main(void)
{
	CUdevice dev;
	CUcontext c1, c2, cur;
	CK(cuInit(0));
	CK(cuDeviceGet(&dev, 0));
#if CUDA_VERSION >= 13000
	CK(cuCtxCreate(&c1, NULL, 0, dev)); /* cuCtxCreate_v4 */
#else
	CK(cuCtxCreate(&c1, 0, dev)); /* cuCtxCreate_v2 */
#endif
	CK(cuCtxGetCurrent(&cur));
	if (cur != c1) {
		fprintf(stderr, "the created context is not current\n");
		return 1;
	}
	CK(cuCtxDestroy(c1));
#if CUDA_VERSION >= 12000
	CUdriverProcAddressQueryResult q;
#define GPA(sym, p) cuGetProcAddress(sym, p, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &q)
#else
#define GPA(sym, p) cuGetProcAddress(sym, p, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT)
#endif
#if CUDA_VERSION >= 12050
	CUresult (*create)(CUcontext *, CUctxCreateParams *, unsigned, CUdevice) = NULL;
	CK(GPA("cuCtxCreate", (void **)&create));
	CK(create(&c2, NULL, 0, dev));
#else
	CUresult (*create)(CUcontext *, unsigned, CUdevice) = NULL;
	CK(GPA("cuCtxCreate", (void **)&create));
	CK(create(&c2, 0, dev));
#endif
	CK(cuCtxGetCurrent(&cur));
	if (cur != c2) {
		fprintf(stderr, "the context from cuGetProcAddress's cuCtxCreate is not current\n");
		return 1;
	}
	CK(cuCtxDestroy(c2));
	printf("CTX OK\n");
	return 0;
}
