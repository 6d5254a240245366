// ptxcheck: the GPU check of the instrumentation passes, with the driver API
// only (what the agent does). It loads the original vec_add module, sets its
// __constant__ d_N the way cudaMemcpyToSymbol would (cuModuleGetGlobal +
// copy), runs it, then asks ptxinst for an instrumented clone that aliases
// d_N and d_counter to the original's addresses and carries counting probes,
// loads the clone through the driver JIT, runs it and checks: same results,
// probe counts equal to the thread/access counts, the clone's atomics land in
// the original's d_counter.
//
//   ptxcheck ORIGINAL(fatbin|ptx|cubin) PTXINST INPUT_FOR_PTXINST WORKDIR
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { const char *s_ = "?"; \
	cuGetErrorString(r_, &s_); fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, s_); \
	printf("SUMMARY: FAIL %s: %s\n", #x, s_); exit(1); } } while (0)

static char *slurp(const char *p, size_t *n) {
	FILE *f = fopen(p, "rb");
	if (!f) { perror(p); exit(1); }
	fseek(f, 0, SEEK_END); long sz = ftell(f); fseek(f, 0, SEEK_SET);
	char *b = malloc(sz + 1);
	if (fread(b, 1, sz, f) != (size_t)sz) { perror(p); exit(1); }
	b[sz] = 0; fclose(f);
	if (n) *n = sz;
	return b;
}

static double now_ms(void) {
	struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

enum { N = 1024, LIM = 1000, THREADS = 256, BLOCKS = 4, SLOTS = 8 };
static const char *KERNEL = "_Z9vectorAddPKfS0_Pfi";

static void run(CUfunction f, CUdeviceptr A, CUdeviceptr B, CUdeviceptr C) {
	int n = N;
	void *args[] = { &A, &B, &C, &n };
	CK(cuLaunchKernel(f, BLOCKS, 1, 1, THREADS, 1, 1, 0, 0, args, 0));
	CK(cuCtxSynchronize());
}

int main(int argc, char **argv) {
	if (argc != 5) { fprintf(stderr, "usage: ptxcheck ORIGINAL PTXINST PTXINST_INPUT WORKDIR\n"); return 2; }
	CUdevice dev; CUcontext ctx;
	CK(cuInit(0));
	CK(cuDeviceGet(&dev, 0));
	CK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CK(cuCtxSetCurrent(ctx));
	int maj, min, drv;
	CK(cuDeviceGetAttribute(&maj, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
	CK(cuDeviceGetAttribute(&min, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
	CK(cuDriverGetVersion(&drv));

	char *orig = slurp(argv[1], NULL);
	CUmodule mo; CUfunction fo;
	CK(cuModuleLoadData(&mo, orig));
	CK(cuModuleGetFunction(&fo, mo, KERNEL));
	CUdeviceptr dN, dCounter; size_t sz;
	CK(cuModuleGetGlobal(&dN, &sz, mo, "d_N"));
	CK(cuModuleGetGlobal(&dCounter, &sz, mo, "d_counter"));
	int lim = LIM; unsigned long long zero = 0;
	CK(cuMemcpyHtoD(dN, &lim, sizeof lim)); // what cudaMemcpyToSymbol does
	CK(cuMemcpyHtoD(dCounter, &zero, sizeof zero));

	float hA[N], hB[N], ref[N], got[N];
	for (int i = 0; i < N; i++) { hA[i] = i * 0.5f; hB[i] = 1000.0f - i; }
	CUdeviceptr A, B, C, counters;
	CK(cuMemAlloc(&A, sizeof hA)); CK(cuMemAlloc(&B, sizeof hB)); CK(cuMemAlloc(&C, sizeof ref));
	CK(cuMemAlloc(&counters, SLOTS * 8));
	CK(cuMemcpyHtoD(A, hA, sizeof hA)); CK(cuMemcpyHtoD(B, hB, sizeof hB));
	CK(cuMemsetD8(C, 0, sizeof ref)); CK(cuMemsetD8(counters, 0, SLOTS * 8));
	run(fo, A, B, C);
	CK(cuMemcpyDtoH(ref, C, sizeof ref));
	unsigned long long cnt1;
	CK(cuMemcpyDtoH(&cnt1, dCounter, 8));
	int fails = 0;
	for (int i = 0; i < N; i++) {
		float want = i < LIM ? hA[i] + hB[i] : 0;
		if (ref[i] != want) { if (fails++ < 5) fprintf(stderr, "original: C[%d]=%g want %g\n", i, ref[i], want); }
	}
	if (cnt1 != LIM) { fprintf(stderr, "original: d_counter=%llu want %d\n", cnt1, LIM); fails++; }

	// The clone, made by the Go passes with the original's addresses.
	char cmd[4096], clonePath[1024];
	snprintf(clonePath, sizeof clonePath, "%s/clone.ptx", argv[4]);
	snprintf(cmd, sizeof cmd, "%s -in %s -kernel vectorAdd -counters 0x%llx -argoff 24 -global d_N=0x%llx -global d_counter=0x%llx -o %s",
		argv[2], argv[3], (unsigned long long)counters, (unsigned long long)dN, (unsigned long long)dCounter, clonePath);
	fprintf(stderr, "+ %s\n", cmd);
	double t0 = now_ms();
	if (system(cmd) != 0) { printf("SUMMARY: FAIL ptxinst failed\n"); return 1; }
	double tInst = now_ms() - t0;
	char *clone = slurp(clonePath, NULL);
	char log[16384] = "", info[4096] = "";
	CUjit_option opts[] = { CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES };
	void *vals[] = { log, (void *)(size_t)sizeof log, info, (void *)(size_t)sizeof info };
	CUmodule mc; CUfunction fc;
	t0 = now_ms();
	CUresult r = cuModuleLoadDataEx(&mc, clone, 4, opts, vals);
	double tJit = now_ms() - t0;
	if (r != CUDA_SUCCESS) { fprintf(stderr, "JIT of the clone failed (%d):\n%s\n", r, log); printf("SUMMARY: FAIL driver JIT rejected the clone: %.200s\n", log); return 1; }
	CK(cuModuleGetFunction(&fc, mc, KERNEL));
	CK(cuMemsetD8(C, 0, sizeof got));
	run(fc, A, B, C);
	CK(cuMemcpyDtoH(got, C, sizeof got));
	unsigned long long cnt2, slot[SLOTS];
	CK(cuMemcpyDtoH(&cnt2, dCounter, 8));
	CK(cuMemcpyDtoH(slot, counters, sizeof slot));
	if (memcmp(got, ref, sizeof got) != 0) { fprintf(stderr, "clone: results differ from the original's\n"); fails++; }
	unsigned long long T = BLOCKS * THREADS, addrSum = 0;
	// Each of the LIM threads in range loads A[i] and B[i], stores C[i]
	// and adds to d_counter (an 8-byte atomic).
	for (int i = 0; i < LIM; i++) addrSum += (A + 4 * i) + (B + 4 * i) + (C + 4 * i) + dCounter;
	struct { const char *what; unsigned long long got, want; } checks[] = {
		{ "original d_counter after clone (aliased __device__)", cnt2, 2 * LIM },
		{ "entry probe calls", slot[0], T },
		{ "entry ctx n (kernelParams layout)", slot[1], T * N },
		{ "exit probe calls", slot[2], T },
		{ "global loads", slot[3], 2 * LIM },
		{ "global stores", slot[4], LIM },
		{ "global atomics", slot[5], LIM },
		{ "sum of accessed addresses", slot[6], addrSum },
		{ "sum of access sizes", slot[7], (3 * 4 + 8) * LIM },
	};
	for (unsigned i = 0; i < sizeof checks / sizeof checks[0]; i++) {
		int ok = checks[i].got == checks[i].want;
		fprintf(stderr, "%-55s %12llu want %12llu %s\n", checks[i].what, checks[i].got, checks[i].want, ok ? "ok" : "FAIL");
		if (!ok) fails++;
	}
	fprintf(stderr, "device sm_%d%d, driver %d, clone PTX %zu bytes, ptxinst %.1f ms, driver JIT of clone %.2f ms\n", maj, min, drv, strlen(clone), tInst, tJit);
	if (fails) { printf("SUMMARY: FAIL %d check(s) failed on sm_%d%d\n", fails, maj, min); return 1; }
	printf("SUMMARY: PASS instrumented vec_add == original, d_N/d_counter aliased, probes counted %llu threads, %llu loads, %llu stores, %llu atomics; clone JIT %.1f ms (sm_%d%d, driver %d)\n",
		T, slot[3], slot[4], slot[5], tJit, maj, min, drv);
	return 0;
}
