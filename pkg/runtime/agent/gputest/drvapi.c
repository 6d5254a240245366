/* drvapi N ITERS SLEEP_MS: a driver-API program (links libcuda directly, so
 * the agent's exported definitions are what it calls) that JIT-loads PTX
 * with cuModuleLoadData, sets a .const d_N with cuModuleGetGlobal, launches
 * vectorAdd through cuModuleGetFunction + cuLaunchKernel and checks every
 * result. Prints "RESULT PASS" or "RESULT FAIL". */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static const char *ptx =
	".version 7.0\n.target sm_70\n.address_size 64\n"
	".const .align 4 .u32 d_N;\n"
	".visible .entry vectorAdd(.param .u64 pA, .param .u64 pB, .param .u64 pC)\n{\n"
	"  .reg .pred %p<2>; .reg .b32 %r<8>; .reg .f32 %f<4>; .reg .b64 %rd<16>;\n"
	"  ld.param.u64 %rd1, [pA]; ld.param.u64 %rd2, [pB]; ld.param.u64 %rd3, [pC];\n"
	"  mov.u32 %r1, %ntid.x; mov.u32 %r2, %ctaid.x; mov.u32 %r3, %tid.x;\n"
	"  mad.lo.s32 %r4, %r1, %r2, %r3; ld.const.u32 %r5, [d_N];\n"
	"  setp.ge.s32 %p1, %r4, %r5; @%p1 bra DONE;\n"
	"  cvta.to.global.u64 %rd4, %rd1; cvta.to.global.u64 %rd5, %rd2; cvta.to.global.u64 %rd6, %rd3;\n"
	"  mul.wide.s32 %rd7, %r4, 4; add.s64 %rd8, %rd4, %rd7; ld.global.f32 %f1, [%rd8];\n"
	"  add.s64 %rd9, %rd5, %rd7; ld.global.f32 %f2, [%rd9]; add.f32 %f3, %f1, %f2;\n"
	"  add.s64 %rd13, %rd6, %rd7; st.global.f32 [%rd13], %f3;\nDONE:\n  ret;\n}\n";

#define CK(x)                                                                     \
	do {                                                                      \
		CUresult e = (x);                                                 \
		if (e != CUDA_SUCCESS) {                                          \
			printf("CUDA error %d at line %d\nRESULT FAIL\n", e, __LINE__); \
			return 1;                                                 \
		}                                                                 \
	} while (0)

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 1 << 20;
	int iters = argc > 2 ? atoi(argv[2]) : 100;
	int sleep_ms = argc > 3 ? atoi(argv[3]) : 10;
	setvbuf(stdout, NULL, _IOLBF, 0);
	CUdevice dev;
	CUcontext ctx;
	CUmodule mod;
	CUfunction f;
	CUdeviceptr A, B, C, dN;
	size_t sz;
	CK(cuInit(0));
	CK(cuDeviceGet(&dev, 0));
	CK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CK(cuCtxSetCurrent(ctx));
	CK(cuModuleLoadData(&mod, ptx));
	CK(cuModuleGetFunction(&f, mod, "vectorAdd"));
	CK(cuModuleGetGlobal(&dN, &sz, mod, "d_N"));
	CK(cuMemcpyHtoD(dN, &n, 4));
	float *h = malloc((size_t)n * 4), *hc = malloc((size_t)n * 4);
	CK(cuMemAlloc(&A, (size_t)n * 4));
	CK(cuMemAlloc(&B, (size_t)n * 4));
	CK(cuMemAlloc(&C, (size_t)n * 4));
	for (int i = 0; i < n; i++)
		h[i] = (float)i;
	CK(cuMemcpyHtoD(A, h, (size_t)n * 4));
	for (int i = 0; i < n; i++)
		h[i] = (float)(2 * i);
	CK(cuMemcpyHtoD(B, h, (size_t)n * 4));
	printf("STARTED pid %d n %d\n", (int)getpid(), n);
	int bad = 0;
	void *args[] = {&A, &B, &C};
	for (int it = 0; it < iters; it++) {
		CK(cuMemsetD8(C, 0, (size_t)n * 4));
		CK(cuLaunchKernel(f, (n + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
		CK(cuMemcpyDtoH(hc, C, (size_t)n * 4));
		int wrong = 0;
		for (int i = 0; i < n; i++)
			if (hc[i] != 3.0f * i)
				wrong++;
		if (wrong) {
			bad++;
			printf("iter %d: %d wrong\n", it, wrong);
		}
		usleep(sleep_ms * 1000);
	}
	printf("RESULT %s iters=%d bad=%d\n", bad ? "FAIL" : "PASS", iters, bad);
	return bad != 0;
}
