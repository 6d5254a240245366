/* Kernel launches from several threads against the gpubpf agent's stand-in
 * driver (pkg/runtime/agent/testdata/fakecuda.c), reached as cudart reaches
 * the driver: dlopen, then every entry point from cuGetProcAddress (so with
 * the agent preloaded every launch passes its wrapper). Quiet: nothing
 * printed, so no line lands in the middle of the tool's JSON, and the
 * number of launches is known to the test.
 *
 *   agentstorm THREADS LAUNCHES [wait]
 *
 * THREADS threads make LAUNCHES launches each, odd threads through the
 * per-thread-stream entry point (cuLaunchKernel_ptsz), with grids of 1 to 4
 * blocks in turn, each launch taking 4 us, as a real one does on the H100
 * host (about 230 000 a second from one thread): the stand-in driver's take
 * nothing, and unthrottled threads would outrun any reader of the agent's
 * launch ring. "wait": read a line from stdin first (the
 * test lets the launches start once the tool has switched to the agent). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef CUresult (*gpa_t)(const char *, void **, int, uint64_t, int *);
typedef CUresult (*launch_t)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
			     void **, void **);

/* A fatbin wrapper as nvcc emits it, pointing at a (tiny) fatbin. */
static const struct {
	uint32_t magic, version;
	uint64_t size;
	unsigned char payload[32];
} fatbin = {0xBA55ED50u, 0x00100001u, 32, "fake fatbin payload 0123456789"};
static struct {
	uint32_t magic, version;
	const void *data, *unused;
} wrapper = {0x466243b1u, 1, &fatbin, NULL};

static gpa_t gpa;
static launch_t launch, launch_ptsz;
static void *kernel;
static long per_thread;

static void *get(const char *n, uint64_t flags)
{
	void *p = NULL;
	int st;
	if (gpa(n, &p, 12080, flags, &st) != 0 || !p) {
		fprintf(stderr, "agentstorm: no %s\n", n);
		exit(2);
	}
	return p;
}

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void *run(void *arg)
{
	launch_t fn = (intptr_t)arg & 1 ? launch_ptsz : launch;
	for (long i = 0; i < per_thread; i++) {
		uint64_t t0 = now_ns();
		if (fn(kernel, 1 + (unsigned)(i & 3), 1, 1, 32, 1, 1, 0, NULL, NULL, NULL) != 0) {
			fprintf(stderr, "agentstorm: launch failed\n");
			exit(4);
		}
		while (now_ns() - t0 < 4000)
			;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 3)
		return 1;
	int threads = atoi(argv[1]);
	per_thread = atol(argv[2]);
	if (threads < 1 || threads > 64)
		return 1;
	void *h = dlopen("libcuda.so.1", RTLD_NOW);
	if (!h) {
		fprintf(stderr, "agentstorm: %s\n", dlerror());
		return 2;
	}
	int *quiet = dlsym(h, "fakecuda_quiet");
	gpa_t g0 = (gpa_t)dlsym(h, "cuGetProcAddress_v2");
	if (!quiet || !g0 || g0("cuGetProcAddress", (void **)&gpa, 12080, 0, NULL) != 0)
		return 2;
	*quiet = 1;
	CUresult (*init)(unsigned) = get("cuInit", 0);
	CUresult (*retain)(void **, int) = get("cuDevicePrimaryCtxRetain", 0);
	CUresult (*setcur)(void *) = get("cuCtxSetCurrent", 0);
	CUresult (*libload)(void **, const void *, void *, void *, unsigned, void *, void *, unsigned) =
		get("cuLibraryLoadData", 0);
	CUresult (*getk)(void **, void *, const char *) = get("cuLibraryGetKernel", 0);
	launch = get("cuLaunchKernel", 0);
	launch_ptsz = get("cuLaunchKernel", 2);
	void *ctx, *lib;
	if (init(0) || retain(&ctx, 0) || setcur(ctx) || libload(&lib, &wrapper, 0, 0, 0, 0, 0, 0) ||
	    getk(&kernel, lib, "_Z6vecAddPfi"))
		return 3;
	if (argc > 3 && !strcmp(argv[3], "wait")) {
		char line[16];
		if (!fgets(line, sizeof(line), stdin))
			return 5;
	}
	pthread_t th[64];
	for (int i = 0; i < threads; i++)
		pthread_create(&th[i], NULL, run, (void *)(intptr_t)i);
	for (int i = 0; i < threads; i++)
		pthread_join(th[i], NULL);
	return 0;
}
