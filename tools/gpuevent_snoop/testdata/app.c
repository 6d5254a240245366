/* The traced program of gpuevent_snoop's tests: a known sequence of CUDA calls
 * with a planted leak (leaky_alloc), a failing allocation and driver calls
 * made directly. "wait" as argv[1] makes it block on stdin first (for -p);
 * "loop N" makes N launches and nothing else (ring-buffer overflow test);
 * "handles" launches through kernel handles the way CUDA 12.x/13 code does;
 * "stub" keeps a handle in a static named like nvcc 13's host-stub static,
 * then waits on stdin (for -p) and launches it; "planted" allocates and
 * launches plantedKernel, then exits at once (before the tool has read its
 * mappings); "fail N" makes N good launches, N failing ones (no function),
 * N good ones. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "fakecuda.h"

/* A host stub with the mangled name nvcc gives vecAdd(const float*, const float*, float*, int). */
__attribute__((noinline)) void vec_add_stub(const float *a, const float *b, float *c, int n) __asm__("_Z6vecAddPKfS0_Pfi");
__attribute__((noinline)) void vec_add_stub(const float *a, const float *b, float *c, int n) { (void)a; (void)b; (void)c; (void)n; }

/* The stub of __global__ void plantedKernel(float *, int). */
__attribute__((noinline)) void planted_stub(float *p, int n) __asm__("_Z13plantedKernelPfi");
__attribute__((noinline)) void planted_stub(float *p, int n) { (void)p; (void)n; }

/* nvcc 13's host stub keeps its kernel handle in a local static named so. */
static void *stub_handle __asm__("_ZZ35__device_stub__Z9vectorAddPKfS0_PfiPKfS0_PfiE8__handle") __attribute__((used));

__attribute__((noinline)) void *leaky_alloc(size_t n)
{
	void *p = 0;
	cudaMalloc(&p, n);
	return p;
}

static void *worker(void *arg)
{
	void *p = 0;
	cudaMalloc(&p, 2048);
	cudaFree(p);
	return arg;
}

int main(int argc, char **argv)
{
	if (argc > 2 && argv[1][0] == 'l') {
		long n = atol(argv[2]);
		dim3 g = {1, 1, 1}, bl = {32, 1, 1};
		for (long i = 0; i < n; i++)
			cudaLaunchKernel((const void *)vec_add_stub, g, bl, 0, 0, 0);
		return 0;
	}
	if (argc > 1 && argv[1][0] == 'p') {
		dim3 g = {2, 1, 1}, bl = {64, 1, 1};
		void *p = 0;
		cudaMalloc(&p, 4096);
		cudaLaunchKernel((const void *)planted_stub, g, bl, 0, 0, 0);
		return 0;
	}
	if (argc > 2 && argv[1][0] == 'f') {
		long n = atol(argv[2]);
		dim3 g = {1, 1, 1}, bl = {32, 1, 1};
		for (long i = 0; i < 3 * n; i++)
			cudaLaunchKernel(i / n == 1 ? 0 : (const void *)vec_add_stub, g, bl, 0, 0, 0);
		usleep(200 * 1000);
		return 0;
	}
	if (argc > 1 && argv[1][0] == 'h') {
		dim3 g = {1, 1, 1}, bl = {32, 1, 1};
		/* nvcc 13's stubs launch a kernel handle through the runtime. */
		CUkernel k = 0;
		cuLibraryGetKernel(&k, (CUlibrary)0x10, "_Z5scalePfi");
		cudaLaunchKernel((const void *)k, g, bl, 0, 0, 0);
		/* The driver API: a function of a kernel, and of a module. */
		CUfunction f = 0, f2 = 0;
		cuKernelGetFunction(&f, k);
		cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, 0, 0, 0);
		cuModuleGetFunction(&f2, (CUmodule)0x20, "_ZN4gemm6kernelIfEEvPT_");
		cuLaunchKernel(f2, 1, 1, 1, 32, 1, 1, 0, 0, 0, 0);
		usleep(200 * 1000);
		return 0;
	}
	if (argc > 1 && argv[1][0] == 's') {
		stub_handle = malloc(64); /* looked up before any tool attached */
		char c;
		if (read(0, &c, 1) != 1)
			return 3;
		dim3 g = {1, 1, 1}, bl = {32, 1, 1};
		cudaLaunchKernel((const void *)stub_handle, g, bl, 0, 0, 0);
		usleep(200 * 1000);
		return 0;
	}
	if (argc > 1 && argv[1][0] == 'w') {
		char c;
		if (read(0, &c, 1) != 1)
			return 3;
	}
	static char host[1 << 20];
	void *a = 0, *b = 0, *huge = 0;
	cudaMalloc(&a, 1 << 20);
	cudaMalloc(&b, 4096);
	leaky_alloc(12345);
	cudaMemcpy(a, host, 1 << 20, cudaMemcpyHostToDevice);
	cudaMemcpy(host, a, 65536, cudaMemcpyDeviceToHost);
	cudaMemcpyAsync(b, a, 4096, cudaMemcpyDeviceToDevice, (cudaStream_t)0x1234);
	cudaMemset(a, 7, 1000);
	float *pa = a, *pb = b;
	int n = 1000;
	void *args[] = {&pa, &pb, &pa, &n};
	dim3 grid = {4, 2, 1}, block = {256, 1, 1};
	cudaLaunchKernel((const void *)vec_add_stub, grid, block, args, 128, (cudaStream_t)0x1234);
	if (cudaMalloc(&huge, 1ULL << 40) != 2)
		return 4;
	CUdeviceptr d = 0;
	cuMemAlloc_v2(&d, 777);
	cuLaunchKernel((CUfunction)0xf00, 1, 2, 3, 32, 4, 1, 64, (CUstream)0x55, args, 0);
	cuMemFree_v2(d);
	pthread_t th;
	pthread_create(&th, 0, worker, 0);
	pthread_join(th, 0);
	cudaFree(a);
	cudaFree(b);
	printf("app done\n");
	fflush(stdout);
	/* Outlive the ring buffer's delivery a little, so the tool still reads
	 * /proc/PID/maps to name the stubs and call sites. */
	usleep(200 * 1000);
	return 0;
}
