/* A tiny "CUDA application" for the agent's CI tests: reaches the driver
 * the way cudart does (dlsym of cuGetProcAddress_v2, then everything
 * through cuGetProcAddress) and launches on command from stdin. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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

/* GPUBPF_TEST_FATBIN=FILE loads a real fatbin (nvcc/fatbinary output)
 * instead, so the runtime's whole pipeline can run against this driver. */
static void use_fatbin_file(void)
{
	/* GPUBPF_TEST_FATBIN_SO=LIB: the fatbin is LIB's gpubpf_test_fatbin,
	 * in its .nv_fatbin section, as nvcc places device code in a file */
	const char *so = getenv("GPUBPF_TEST_FATBIN_SO");
	if (so) {
		void *h = dlopen(so, RTLD_NOW);
		void *fb = h ? dlsym(h, "gpubpf_test_fatbin") : NULL;
		if (!fb) {
			fprintf(stderr, "app: %s: %s\n", so, dlerror());
			exit(2);
		}
		wrapper.data = fb;
		return;
	}
	const char *path = getenv("GPUBPF_TEST_FATBIN");
	if (!path)
		return;
	FILE *f = fopen(path, "rb");
	if (!f) {
		perror(path);
		exit(2);
	}
	static unsigned char buf[1 << 20];
	size_t n = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	if (n < 16) {
		fprintf(stderr, "app: %s: too short\n", path);
		exit(2);
	}
	wrapper.data = buf;
}

/* The stream the kp/xp launches pass: its top byte is not the stream's. */
#define APP_STREAM ((void *)0xAB007f00dead0010ull)
/* The stream the tests capture into a graph ("capbegin v2 0xca970000"
 * first: the fake driver, like the real one, captures only once begun). */
#define CAPTURE_STREAM ((void *)0xCA970000ull)

/* "CMD [ADDR SLOTS TID KIND DT]": with ADDR, stamp this thread's launch-word
 * slot as launchlate's uprobe would (time now + DT, tag TID or our own
 * thread id << 32 | KIND) just before the launch. Prints "STAMP <time>". */
static void stamp(const char *args)
{
	unsigned long long addr = 0, slots = 0, tid = 0, kind = 0;
	long long dt = 0;
	if (sscanf(args, "%llu %llu %llu %llu %lld", &addr, &slots, &tid, &kind, &dt) < 4 || !addr || !slots)
		return;
	uint64_t me = (uint64_t)syscall(SYS_gettid);
	volatile uint64_t *sl = (volatile uint64_t *)(uintptr_t)addr + 2 * ((me * 4) & (slots - 1));
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	uint64_t t = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec + (uint64_t)dt;
	sl[0] = t;
	sl[1] = (tid ? tid : me) << 32 | kind;
	printf("STAMP %llu\n", (unsigned long long)t);
}

/* CUDA_KERNEL_NODE_PARAMS_v2 */
struct node_params {
	void *func;
	unsigned gx, gy, gz, bx, by, bz, sh;
	void **kernelParams, **extra;
	void *kern, *ctx;
};

static gpa_t gpa;

/* "storm N MS": N threads launch back to back for MS ms, quietly (the
 * driver's fakecuda_quiet), as a launch-bound program with many threads. */
static void *storm_k;
static long storm_ms, storm_launches;
static long *storm_overtakes; /* the stand-in's fakecuda_overtakes */
static int storm_n;
static CUresult (*launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
			     void **, void **);
static void *storm_thread(void *arg)
{
	struct timespec t0, t;
	long n = 0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		launch_fn(storm_k, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
		n++;
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < storm_ms);
	__atomic_add_fetch(&storm_launches, n, __ATOMIC_RELAXED);
	return arg;
}
static void *storm_main(void *quiet)
{
	pthread_t th[64];
	int n = storm_n > 64 ? 64 : storm_n;
	__atomic_store_n((int *)quiet, 1, __ATOMIC_RELAXED);
	for (int i = 0; i < n; i++)
		pthread_create(&th[i], NULL, storm_thread, NULL);
	for (int i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	__atomic_store_n((int *)quiet, 0, __ATOMIC_RELAXED);
	printf("STORMED %ld %ld\n", storm_launches, storm_overtakes ? __atomic_load_n(storm_overtakes, __ATOMIC_RELAXED) : -1L);
	fflush(stdout);
	return NULL;
}
/* n as cudart of version ver asks for it */
static void *get_at(const char *n, int ver, uint64_t flags)
{
	void *p = NULL;
	int st;
	if (gpa(n, &p, ver, flags, &st) != 0 || !p) {
		fprintf(stderr, "app: no %s\n", n);
		exit(2);
	}
	return p;
}
static void *get(const char *n, uint64_t flags) { return get_at(n, 12080, flags); }

/* The driver entry points, kept in static data as cudart keeps its table
 * (the agent's late interposition finds them there). */
static CUresult (*init)(unsigned);
static CUresult (*retain)(void **, int);
static CUresult (*setcur)(void *);
static CUresult (*libload)(void **, const void *, void *, void *, unsigned, void *, void *, unsigned);
static CUresult (*getk)(void **, void *, const char *);
static launch_t launch, launchp;
static CUresult (*libunload)(void *);
static CUresult (*graphadd)(void **, void *, const void *, size_t, const struct node_params *);
static CUresult (*instantiate)(void **, void *, unsigned long long);
static CUresult (*glaunch)(void *, void *);
static void *modmod, *modfn; /* modload's module and kernel */
/* the driver pointers of a CUDA runtime that starts late (rtinit): after an
 * agent was injected, as a shared library's static cudart does */
static void *late_tbl[1];
/* a module loaded from PTX text at run time, as NVRTC, Numba and CuPy
 * users load theirs */
static const char modptx[] = ".version 7.8\n.target sm_90\n.address_size 64\n\n"
			     ".visible .entry _Z6modKerv()\n{\n\tret;\n}\n";
static CUresult (*glaunchp)(void *, void *);

int main(void)
{
	use_fatbin_file();
	/* APP_CUDA_GLOBAL=1: the driver in the global scope, as for a
	 * program linked with -lcuda */
	void *h = dlopen("libcuda.so.1", getenv("APP_CUDA_GLOBAL") ? RTLD_NOW | RTLD_GLOBAL : RTLD_NOW);
	if (!h) {
		fprintf(stderr, "app: %s\n", dlerror());
		return 2;
	}
	gpa_t g0 = (gpa_t)dlsym(h, "cuGetProcAddress_v2");
	if (!g0 || g0("cuGetProcAddress", (void **)&gpa, 12080, 0, NULL) != 0)
		return 2;
	init = get("cuInit", 0);
	retain = get("cuDevicePrimaryCtxRetain", 0);
	setcur = get("cuCtxSetCurrent", 0);
	libload = get("cuLibraryLoadData", 0);
	getk = get("cuLibraryGetKernel", 0);
	launch = get("cuLaunchKernel", 0);
	launchp = get("cuLaunchKernel", 2);
	libunload = get("cuLibraryUnload", 0);
	graphadd = get("cuGraphAddKernelNode", 0);
	instantiate = get("cuGraphInstantiate", 0);
	glaunch = get("cuGraphLaunch", 0);
	glaunchp = get("cuGraphLaunch", 2);
	/* vecAdd(float *, int)'s arguments, as kernelParams and packed */
	uint64_t a_ptr = 0x1234;
	int a_n = 77;
	void *kparams[2] = {&a_ptr, &a_n};
	struct {
		uint64_t ptr;
		int n;
	} packed = {0x1234, 77};
	size_t packed_size = 12;
	void *extra[5] = {(void *)1, &packed, (void *)2, &packed_size, (void *)0};
	void *ctx, *lib, *k;
	if (init(0) || retain(&ctx, 0) || setcur(ctx) || libload(&lib, &wrapper, 0, 0, 0, 0, 0, 0) ||
	    getk(&k, lib, "_Z6vecAddPfi"))
		return 3;
	printf("READY\n");
	fflush(stdout);
	char line[256];
	while (fgets(line, sizeof(line), stdin)) {
		if (!strncmp(line, "kp", 2) && (line[2] == '\n' || line[2] == ' ')) {
			stamp(line + 2);
			launch(k, 1, 1, 1, 32, 1, 1, 0, APP_STREAM, kparams, NULL);
		} else if (!strncmp(line, "xp", 2) && (line[2] == '\n' || line[2] == ' ')) {
			stamp(line + 2);
			launch(k, 1, 1, 1, 32, 1, 1, 0, APP_STREAM, NULL, extra);
		} else if (!strcmp(line, "gk\n") || !strcmp(line, "gx\n")) {
			struct node_params np = {k, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL, NULL};
			if (line[1] == 'k')
				np.kernelParams = kparams;
			else
				np.extra = extra;
			void *node;
			graphadd(&node, NULL, NULL, 0, &np);
		} else if (!strncmp(line, "gn ", 3)) {
			/* "gn GRAPH": a kernel node (kernelParams) added to GRAPH */
			struct node_params np = {k, 1, 1, 1, 32, 1, 1, 0, kparams, NULL, NULL, NULL};
			void *node;
			graphadd(&node, (void *)(uintptr_t)strtoull(line + 3, NULL, 0), NULL, 0, &np);
		} else if (!strcmp(line, "cap\n")) {
			/* a launch into the graph being captured */
			launch(k, 1, 1, 1, 32, 1, 1, 0, CAPTURE_STREAM, kparams, NULL);
		} else if (!strcmp(line, "capgraph\n")) {
			CUresult (*info)(void *, int *, uint64_t *, void **, const void **, size_t *) =
				get("cuStreamGetCaptureInfo", 0);
			int st = 0;
			uint64_t id = 0;
			void *g = NULL;
			info(CAPTURE_STREAM, &st, &id, &g, NULL, NULL);
			printf("CAPGRAPH %p\n", g);
		} else if (!strncmp(line, "nap ", 4)) {
			usleep((useconds_t)strtoul(line + 4, NULL, 0) * 1000); /* "nap MS" */
		} else if (!strcmp(line, "gmade\n") || !strcmp(line, "glast\n")) {
			/* "gmade": a graph of two vecAdd nodes made, instantiated
			 * and destroyed (as PyTorch does); "glast": launch its exec
			 * (for a script that cannot read handles back) */
			static void *last;
			if (line[1] == 'm') {
				CUresult (*create)(void **, unsigned) = get("cuGraphCreate", 0);
				CUresult (*destroy)(void *) = get("cuGraphDestroy", 0);
				struct node_params np = {k, 1, 1, 1, 32, 1, 1, 0, kparams, NULL, NULL, NULL};
				void *gr = NULL, *node;
				create(&gr, 0);
				graphadd(&node, gr, NULL, 0, &np);
				graphadd(&node, gr, NULL, 0, &np);
				printf("EXEC %d %p\n", instantiate(&last, gr, 0), last);
				destroy(gr);
			} else {
				printf("GRAPHLAUNCHED %d\n", glaunch(last, APP_STREAM));
			}
		} else if (!strcmp(line, "mkgraph\n")) {
			/* a graph of the driver's own (cuGraphCreate) */
			CUresult (*create)(void **, unsigned) = get("cuGraphCreate", 0);
			void *gr = NULL;
			CUresult r = create(&gr, 0);
			printf("GRAPH %d %p\n", r, gr);
		} else if (!strncmp(line, "gdestroy ", 9)) {
			CUresult (*destroy)(void *) = get("cuGraphDestroy", 0);
			printf("GDESTROYED %d\n", destroy((void *)(uintptr_t)strtoull(line + 9, NULL, 0)));
		} else if (!strncmp(line, "xdestroy ", 9)) {
			CUresult (*destroy)(void *) = get("cuGraphExecDestroy", 0);
			printf("XDESTROYED %d\n", destroy((void *)(uintptr_t)strtoull(line + 9, NULL, 0)));
		} else if (!strncmp(line, "xmemset ", 8)) {
			/* the application changes an exec in place (a memset node) */
			CUresult (*set)(void *, void *, const void *, void *) = get("cuGraphExecMemsetNodeSetParams", 0);
			printf("XMEMSET %d\n", set((void *)(uintptr_t)strtoull(line + 8, NULL, 0), NULL, NULL, NULL));
		} else if (!strncmp(line, "xupdate ", 8)) {
			/* "xupdate EXEC GRAPH": the application's whole-graph update */
			char *rest;
			void *x = (void *)(uintptr_t)strtoull(line + 8, &rest, 0);
			CUresult (*upd)(void *, void *, void *) = get("cuGraphExecUpdate", 0);
			int info[6] = {0};
			printf("XUPDATED %d\n", upd(x, (void *)(uintptr_t)strtoull(rest, NULL, 0), info));
		} else if (!strncmp(line, "inst ", 5)) {
			void *x = NULL;
			CUresult r = instantiate(&x, (void *)(uintptr_t)strtoull(line + 5, NULL, 0), 0);
			printf("EXEC %d %p\n", r, x);
		} else if (!strncmp(line, "gl", 2) && (line[2] == ' ' || line[3] == ' ')) {
			/* "gl EXEC [stamp]": on APP_STREAM; "glp EXEC": _ptsz on
			 * stream 0; "glc EXEC": into the capturing stream */
			char *rest;
			int m = line[2] == ' ' ? 0 : line[2];
			void *x = (void *)(uintptr_t)strtoull(line + (m ? 4 : 3), &rest, 0);
			stamp(rest);
			CUresult r = m == 'p' ? glaunchp(x, NULL) : glaunch(x, m == 'c' ? CAPTURE_STREAM : APP_STREAM);
			printf("GRAPHLAUNCHED %d\n", r);
		} else if (!strcmp(line, "mkstream\n") || !strcmp(line, "mkstreamnb\n")) {
			/* a blocking stream (mkstreamnb: CU_STREAM_NON_BLOCKING) */
			CUresult (*create)(void **, unsigned) = get("cuStreamCreate", 0);
			void *st = NULL;
			CUresult r = create(&st, line[8] == 'n' ? 1 : 0);
			printf("STREAM %d %p\n", r, st);
		} else if (!strncmp(line, "ks ", 3)) {
			/* "ks STREAM": a launch on STREAM (0x2: the per-thread
			 * default stream named explicitly) */
			launch(k, 1, 1, 1, 32, 1, 1, 0, (void *)(uintptr_t)strtoull(line + 3, NULL, 0), NULL, NULL);
		} else if (!strncmp(line, "sdestroy ", 9)) {
			CUresult (*sdestroy)(void *) = get("cuStreamDestroy", 0);
			printf("SDESTROYED %d\n", sdestroy((void *)(uintptr_t)strtoull(line + 9, NULL, 0)));
		} else if (!strncmp(line, "capbegin", 8) || !strncmp(line, "capend", 6)) {
			/* "capbegin HOW STREAM", "capend HOW STREAM": HOW is v2 (as
			 * cudart 12 asks), v1 (cudart 10.0: no mode), ptsz (the
			 * per-thread flavour; stream 0 is this thread's default
			 * stream) or graph (cuStreamBeginCaptureToGraph, 12.3) */
			char how[16] = "";
			int begin = line[3] == 'b', at = 0;
			const char *args = line + (begin ? 8 : 6);
			sscanf(args, "%15s %n", how, &at);
			void *st = (void *)(uintptr_t)strtoull(args + at, NULL, 0);
			uint64_t fl = !strcmp(how, "ptsz") ? 2 : 0;
			CUresult r;
			if (!begin) {
				CUresult (*end)(void *, void **) = get("cuStreamEndCapture", fl);
				void *g = NULL;
				r = end(st, &g);
			} else if (!strcmp(how, "v1")) {
				r = ((CUresult(*)(void *))get_at("cuStreamBeginCapture", 10000, 0))(st);
			} else if (!strcmp(how, "graph")) {
				CUresult (*tog)(void *, void *, const void *, const void *, size_t, int) =
					get("cuStreamBeginCaptureToGraph", 0);
				r = tog(st, (void *)0x9a9, NULL, NULL, 0, 0);
			} else {
				r = ((CUresult(*)(void *, int))get("cuStreamBeginCapture", fl))(st, 0);
			}
			printf("%s %d\n", begin ? "CAPBEGUN" : "CAPENDED", r);
		} else if (!strcmp(line, "launch\n"))
			launch(k, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
		else if (!strcmp(line, "launchp\n"))
			launchp(k, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
		else if (!strcmp(line, "fork\n")) {
			pid_t c = fork();
			if (c == 0) {
				/* the child touches the driver again: gets its own socket */
				dlsym(h, "cuGetProcAddress_v2");
				launch(k, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
				printf("CHILD %d\n", (int)getpid());
				fflush(stdout);
				sleep(3);
				_exit(0);
			}
			printf("FORKED %d\n", (int)c);
		} else if (!strcmp(line, "retain1\n")) {
			/* starts using a second device: the agent may hold us here */
			void *c1;
			printf("RETAINED 1 %d\n", retain(&c1, 1));
		} else if (!strcmp(line, "create1\n")) {
			/* a context of its own on the second device (CUDA 12.5+ ABI) */
			CUresult (*create4)(void **, void *, unsigned, int) = get("cuCtxCreate", 0);
			void *c1;
			printf("CREATED 1 %d\n", create4(&c1, NULL, 0, 1));
		} else if (!strcmp(line, "release0\n")) {
			/* its last use of the primary context: the driver destroys it */
			CUresult (*release)(int) = get("cuDevicePrimaryCtxRelease", 0);
			printf("RELEASED 0 %d\n", release(0));
		} else if (!strcmp(line, "reset0\n")) {
			/* cudaDeviceReset */
			CUresult (*reset)(int) = get("cuDevicePrimaryCtxReset", 0);
			printf("RESET 0 %d\n", reset(0));
		} else if (!strcmp(line, "destroy\n")) {
			CUresult (*destroy)(void *) = get("cuCtxDestroy", 0);
			printf("DESTROYED %d\n", destroy(ctx));
		} else if (!strncmp(line, "storm ", 6)) {
			int *quiet = dlsym(h, "fakecuda_quiet");
			pthread_t th;
			storm_k = k;
			storm_overtakes = dlsym(h, "fakecuda_overtakes");
			if (storm_overtakes)
				__atomic_store_n(storm_overtakes, 0, __ATOMIC_RELAXED);
			launch_fn = launch;
			storm_launches = 0;
			if (!quiet || sscanf(line + 6, "%d %ld", &storm_n, &storm_ms) != 2 ||
			    pthread_create(&th, NULL, storm_main, quiet) != 0) {
				printf("STORM failed\n");
			} else {
				pthread_detach(th);
				printf("STORMING\n");
			}
		} else if (!strcmp(line, "ownctx\n")) {
			/* a context of its own on device 0 (cuCtxCreate), made current */
			CUresult (*create4)(void **, void *, unsigned, int) = get("cuCtxCreate", 0);
			void *c;
			printf("OWNCTX %d\n", create4(&c, NULL, 0, 0));
		} else if (!strcmp(line, "primary\n")) {
			printf("PRIMARY %d\n", setcur(ctx));
		} else if (!strcmp(line, "modload\n")) {
			/* modload's PTX, in the current context */
			CUresult (*load)(void **, const void *) = get("cuModuleLoadData", 0);
			CUresult (*getfn)(void **, void *, const char *) = get("cuModuleGetFunction", 0);
			CUresult r = load(&modmod, modptx);
			if (r == 0)
				r = getfn(&modfn, modmod, "_Z6modKerv");
			printf("MODLOADED %d\n", r);
		} else if (!strcmp(line, "modget\n")) {
			/* modload's kernel looked up again */
			CUresult (*getfn)(void **, void *, const char *) = get("cuModuleGetFunction", 0);
			printf("MODGOT %d\n", modmod ? getfn(&modfn, modmod, "_Z6modKerv") : -1);
		} else if (!strcmp(line, "modunload\n")) {
			CUresult (*unload)(void *) = get("cuModuleUnload", 0);
			CUresult r = modmod ? unload(modmod) : -1;
			modmod = modfn = NULL;
			printf("MODUNLOADED %d\n", r);
		} else if (!strcmp(line, "rtinit\n")) {
			__atomic_store_n(&late_tbl[0], dlsym(h, "cuLaunchKernel"), __ATOMIC_RELEASE);
			printf("RTINIT %d\n", late_tbl[0] != NULL);
		} else if (!strcmp(line, "rtlaunch\n")) {
			launch_t l = (launch_t)__atomic_load_n(&late_tbl[0], __ATOMIC_ACQUIRE);
			printf("RTLAUNCHED %d\n", l ? l(k, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL) : -1);
		} else if (!strcmp(line, "modlaunch\n")) {
			printf("MODLAUNCHED %d\n", modfn ? launch(modfn, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL) : -1);
		} else if (!strcmp(line, "ctx\n")) {
			printf("CTX %p\n", ctx);
		} else if (!strcmp(line, "retain0\n")) {
			printf("RETAINED 0 %d\n", retain(&ctx, 0));
		} else if (!strcmp(line, "unload\n")) {
			/* what cudart does at exit: the agent may hold us here */
			printf("UNLOADED %d\n", libunload(lib));
		} else if (!strcmp(line, "quit\n"))
			break;
		printf("DONE\n");
		fflush(stdout);
	}
	return 0;
}
