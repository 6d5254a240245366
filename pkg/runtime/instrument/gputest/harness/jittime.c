// jittime: how long the driver JIT takes to load each PTX file given
// (cuModuleLoadDataEx, best of 3, a fresh context each time so nothing is
// shared; the driver's on-disk JIT cache is disabled via
// CUDA_CACHE_DISABLE=1 by the caller). Shows why the clone must be small.
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ms(void) {
	struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
	CUdevice dev; CUcontext ctx;
	if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) { printf("SUMMARY: FAIL no CUDA device\n"); return 1; }
	for (int i = 1; i < argc; i++) {
		FILE *f = fopen(argv[i], "rb");
		if (!f) { perror(argv[i]); return 1; }
		fseek(f, 0, SEEK_END); long n = ftell(f); fseek(f, 0, SEEK_SET);
		char *b = malloc(n + 1);
		if (fread(b, 1, n, f) != (size_t)n) { perror(argv[i]); return 1; }
		b[n] = 0; fclose(f);
		double best = 1e30;
		for (int r = 0; r < 3; r++) {
			char log[8192] = "";
			CUjit_option o[] = { CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES };
			void *v[] = { log, (void *)(size_t)sizeof log };
			CUmodule m;
			double t0 = now_ms();
			CUresult e = cuModuleLoadDataEx(&m, b, 2, o, v);
			double dt = now_ms() - t0;
			if (e) { printf("%s: JIT failed (%d): %.300s\n", argv[i], e, log); return 1; }
			cuModuleUnload(m);
			if (dt < best) best = dt;
		}
		printf("%s: %ld bytes PTX, driver JIT %.1f ms (best of 3)\n", argv[i], n, best);
		free(b);
	}
	return 0;
}
