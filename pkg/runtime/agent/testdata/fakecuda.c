/* A fake libcuda.so.1 for CI machines without a GPU: just enough of the
 * driver API for the agent's tests. Launches print "LAUNCH <name>" on
 * stdout (graph kernel nodes "GRAPHNODE <name>"), then "ARG <i> <value>"
 * for each parameter a loaded module's entry declares; clone unloads print
 * "UNLOAD <name>". The agent's clock kernel runs as a thread that answers
 * with a "globaltimer" FAKE_GLOBALTIMER_OFFSET ns ahead of CLOCK_MONOTONIC.
 * Launches of a direct run's kernels (gpubpf_direct_*) print "DIRECT <name>
 * grid X,Y,Z block X,Y,Z params N" instead; FAKECUDA_LAUNCH_STALL_MS=N makes
 * each such kernel "run" N ms (cuEventQuery answers not-ready until then).
 * FAKECUDA_EVENT_LOG=1 prints the event calls (see cuEventRecord).
 * Test double only. */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef struct obj {
	int magic;
	char name[64];
	int np;      /* parameters the PTX declares (loaded modules only) */
	int psz[8];  /* their sizes in bytes */
	void *owner; /* a loaded module's function: its module */
} obj;

static obj ctx0 = {1, "ctx0"};
static obj lib0 = {2, "lib0"};
static obj kerns[2] = {{3, "_Z6vecAddPfi"}, {3, "_Z5otherv"}};
static obj funcs[2] = {{4, "_Z6vecAddPfi"}, {4, "_Z5otherv"}};
static __thread void *cur;
static int d_N = 1000;

struct mod {
	obj o;
	int n;
	obj fn[8];
};

CUresult cuInit(unsigned f) { return 0; }
CUresult cuDriverGetVersion(int *v) { *v = 13000; return 0; }
/* FAKECUDA_DEVICES=2 gives a second device (contexts are all ctx0). */
static int ndev(void)
{
	const char *e = getenv("FAKECUDA_DEVICES");
	return e && e[0] == '2' ? 2 : 1;
}
static int retained[2];
static int ctx0_dead, ctx_gen; /* see ctx_kill */
CUresult cuDeviceGetCount(int *n) { *n = ndev(); return 0; }
CUresult cuDeviceGet(int *d, int o) { if (o < 0 || o >= ndev()) return 101; *d = o; return 0; }
CUresult cuDeviceGetName(char *n, int l, int d) { snprintf(n, l, "Fake GPU"); return 0; }
CUresult cuDeviceGetAttribute(int *v, int a, int d)
{
	*v = a == 75 ? 9 : a == 76 ? 0 : 0;
	return 0;
}
CUresult cuDevicePrimaryCtxRetain(void **c, int d)
{
	if (d < 0 || d >= ndev())
		return 101;
	retained[d]++;
	ctx0_dead = 0;
	*c = &ctx0;
	return 0;
}
/* cuCtxCreate's ABIs (v2: CUDA 3.2, v4: CUDA 12.5; cuGetProcAddress
 * hands out the one the caller's version asks for): a context of the
 * application's own on device d, not the primary one, made current. */
static obj own_ctx[2] = {{1, "own0"}, {1, "own1"}};
CUresult cuCtxCreate_v2(void **c, unsigned flags, int d)
{
	if (d < 0 || d >= ndev())
		return 101;
	*c = cur = &own_ctx[d];
	return 0;
}
CUresult cuCtxCreate_v4(void **c, void *params, unsigned flags, int d)
{
	return cuCtxCreate_v2(c, flags, d);
}
CUresult cuDevicePrimaryCtxGetState(int d, unsigned *flags, int *active)
{
	if (d < 0 || d >= ndev())
		return 101;
	*flags = 0;
	*active = retained[d] > 0;
	return 0;
}
/* Destroying ctx0 (its primary contexts' last release, a reset, or
 * cuCtxDestroy) makes any later use of it, or of a stream made in it, abort
 * the process, as the real driver may crash on a dead handle; a retain
 * brings it back. */
static void ctx_kill(void)
{
	ctx0_dead = 1;
	ctx_gen++;
}
static void ctx_check(void *c, const char *what)
{
	if (c == &ctx0 && ctx0_dead) {
		fprintf(stderr, "FAKECUDA: %s on a destroyed context\n", what);
		abort();
	}
}
CUresult cuDevicePrimaryCtxRelease(int d)
{
	if (d < 0 || d >= ndev() || retained[d] == 0)
		return 201;
	if (--retained[d] == 0 && retained[0] + retained[1] == 0)
		ctx_kill();
	return 0;
}
CUresult cuDevicePrimaryCtxReset(int d)
{
	if (d < 0 || d >= ndev())
		return 101;
	retained[0] = retained[1] = 0;
	ctx_kill();
	return 0;
}
CUresult cuCtxDestroy_v2(void *c)
{
	if (c == &own_ctx[0] || c == &own_ctx[1])
		return 0;
	if (c != &ctx0)
		return 201;
	ctx_kill();
	return 0;
}
CUresult cuCtxGetCurrent(void **c) { *c = cur; return 0; }
CUresult cuCtxSetCurrent(void *c)
{
	ctx_check(c, "cuCtxSetCurrent");
	cur = c;
	return 0;
}
/* the current context's device (the primary contexts are all ctx0: 0) */
CUresult cuCtxGetDevice(int *d) { *d = cur == &own_ctx[1]; return 0; }
CUresult cuCtxSynchronize(void) { return 0; }
CUresult cuLibraryLoadData(void **lib, const void *code, void *a, void *b, unsigned c, void *d, void *e, unsigned f)
{
	*lib = &lib0;
	return 0;
}
CUresult cuLibraryUnload(void *l) { return 0; }
CUresult cuLibraryGetKernel(void **k, void *lib, const char *name)
{
	for (int i = 0; i < 2; i++)
		if (!strcmp(kerns[i].name, name)) {
			*k = &kerns[i];
			return 0;
		}
	return 500;
}
CUresult cuLibraryGetKernelCount(unsigned *n, void *lib) { *n = 2; return 0; }
CUresult cuLibraryEnumerateKernels(void **ks, unsigned n, void *lib)
{
	for (unsigned i = 0; i < n && i < 2; i++)
		ks[i] = &kerns[i];
	return 0;
}
CUresult cuKernelGetName(const char **n, void *k)
{
	if (((obj *)k)->magic != 3)
		return 400; /* CUDA_ERROR_INVALID_HANDLE, as the driver says for a CUfunction */
	*n = ((obj *)k)->name;
	return 0;
}
CUresult cuKernelGetLibrary(void **lib, void *k)
{
	if (((obj *)k)->magic != 3)
		return 400;
	*lib = &lib0;
	return 0;
}
static obj mod0 = {5, "mod0"}; /* the per-context module of lib0's functions */
CUresult cuFuncGetModule(void **m, void *f)
{
	if (((obj *)f)->magic != 4)
		return 400;
	*m = ((obj *)f)->owner ? ((obj *)f)->owner : &mod0;
	return 0;
}
CUresult cuKernelGetFunction(void **f, void *k) { *f = &funcs[(obj *)k - kerns]; return 0; }
CUresult cuKernelGetAttribute(int *v, int a, void *k, int d) { *v = 0; return 0; }
CUresult cuFuncGetAttribute(int *v, int a, void *f) { *v = 0; return 0; }
CUresult cuFuncSetAttribute(void *f, int a, int v) { return 0; }
CUresult cuFuncGetName(const char **n, void *f)
{
	if (((obj *)f)->magic != 4)
		return 400;
	*n = ((obj *)f)->name;
	return 0;
}
CUresult cuLibraryGetGlobal(uint64_t *p, size_t *s, void *lib, const char *name)
{
	if (strcmp(name, "d_N"))
		return 500;
	*p = (uint64_t)(uintptr_t)&d_N;
	*s = 4;
	return 0;
}
CUresult cuModuleGetGlobal(uint64_t *p, size_t *s, void *m, const char *name) { return 500; }
CUresult cuModuleLoadDataEx(void **m, const void *img, unsigned n, int *o, void **v)
{
	const char *t = img;
	/* FAKECUDA_JIT_STALL_MS=N: a JIT that takes N ms (a huge module) */
	const char *stall = getenv("FAKECUDA_JIT_STALL_MS");
	if (stall)
		usleep((useconds_t)atol(stall) * 1000);
	if (strstr(t, "SYNTAX_ERROR")) {
		for (unsigned i = 0; i < n; i++)
			if (o[i] == 5)
				snprintf(v[i], 64, "ptxas fatal: syntax error at line 1");
		return 218;
	}
	struct mod *md = calloc(1, sizeof(*md));
	md->o.magic = 5;
	const char *p = t;
	while ((p = strstr(p, ".entry ")) && md->n < 8) {
		p += 7;
		obj *f = &md->fn[md->n++];
		f->magic = 4;
		f->owner = md;
		int k = 0;
		while (*p && *p != '(' && *p != ' ' && *p != '\n' && k < 63)
			f->name[k++] = *p++;
		/* ".param .u64 a, .param .u32 n, ..." up to the closing ')' */
		const char *open = strchr(p, '('), *close = open ? strchr(open, ')') : NULL;
		for (const char *q = open; close && f->np < 8 && (q = strstr(q, ".param")) && q < close;) {
			q += 6;
			while (*q == ' ')
				q++;
			int bits = (q[0] == '.' && q[1]) ? atoi(q + 2) : 0;
			f->psz[f->np++] = bits >= 8 ? bits / 8 : 8;
		}
	}
	*m = md;
	return 0;
}
CUresult cuModuleLoadData(void **m, const void *img) { return cuModuleLoadDataEx(m, img, 0, NULL, NULL); }
CUresult cuModuleGetFunction(void **f, void *m, const char *name)
{
	struct mod *md = m;
	for (int i = 0; i < md->n; i++)
		if (!strcmp(md->fn[i].name, name)) {
			*f = &md->fn[i];
			return 0;
		}
	return 500;
}
/* CUDA 12.4's enumeration of a module's functions (the agent lists a
 * module's kernels before the application looks any up) */
CUresult cuModuleGetFunctionCount(unsigned *n, void *m)
{
	*n = m == (void *)&mod0 ? 0 : (unsigned)((struct mod *)m)->n;
	return 0;
}
CUresult cuModuleEnumerateFunctions(void **fs, unsigned n, void *m)
{
	for (unsigned i = 0; m != (void *)&mod0 && i < n && i < (unsigned)((struct mod *)m)->n; i++)
		fs[i] = &((struct mod *)m)->fn[i];
	return 0;
}
CUresult cuModuleUnload(void *m)
{
	struct mod *md = m;
	printf("UNLOAD %s\n", md->n ? md->fn[0].name : "?");
	fflush(stdout);
	free(md);
	return 0;
}
/* ---- the agent's clock kernel (op clock), as a thread ---- */
#define FAKE_GLOBALTIMER_OFFSET 12345
static pthread_mutex_t clock_mu = PTHREAD_MUTEX_INITIALIZER; /* one stream: one kernel at a time */
static int clock_busy;       /* kernels queued or running (cuStreamQuery) */
static int clock_stalled;    /* FAKECUDA_CLOCK_STALL=1: the first one starts after 1.1 s */
struct clock_job {
	uint64_t *mb;
	uint32_t rounds, gen;
	int stall;
};
static uint64_t mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
static void *clock_kernel(void *arg)
{
	struct clock_job *j = arg;
	pthread_mutex_lock(&clock_mu);
	if (j->stall)
		usleep(1100000);
	uint64_t last = mono();
	__atomic_store_n(&j->mb[0], (uint64_t)j->gen, __ATOMIC_RELEASE);
	for (uint32_t i = 1; i <= j->rounds; i++) {
		uint64_t want = (uint64_t)j->gen << 32 | i;
		while (__atomic_load_n(&j->mb[1], __ATOMIC_ACQUIRE) != want) {
			if (mono() - last > 200000000ull)
				goto out;
			sched_yield();
		}
		last = mono();
		__atomic_store_n(&j->mb[2], last + FAKE_GLOBALTIMER_OFFSET, __ATOMIC_RELAXED);
		__atomic_store_n(&j->mb[3], want, __ATOMIC_RELEASE);
	}
out:
	pthread_mutex_unlock(&clock_mu);
	__atomic_sub_fetch(&clock_busy, 1, __ATOMIC_ACQ_REL);
	free(j);
	return NULL;
}
static CUresult clock_launch(void **p)
{
	struct clock_job *j = calloc(1, sizeof(*j));
	j->mb = (uint64_t *)(uintptr_t) * (uint64_t *)p[0];
	j->rounds = *(uint32_t *)p[1];
	j->gen = *(uint32_t *)p[2];
	const char *st = getenv("FAKECUDA_CLOCK_STALL");
	j->stall = st && st[0] == '1' && !__atomic_exchange_n(&clock_stalled, 1, __ATOMIC_ACQ_REL);
	__atomic_add_fetch(&clock_busy, 1, __ATOMIC_ACQ_REL);
	pthread_t t;
	pthread_create(&t, NULL, clock_kernel, j);
	pthread_detach(t);
	return 0;
}
CUresult cuStreamQuery(void *s) { return __atomic_load_n(&clock_busy, __ATOMIC_ACQUIRE) ? 600 : 0; }

/* Prints the parameters a loaded entry declares, from kernelParams or from
 * the packed buffer of `extra` (natural alignment). */
static void print_args(obj *f, void **p, void **x)
{
	if (f->magic != 4 || !f->np)
		return;
	const unsigned char *buf = NULL;
	size_t size = 0, off = 0;
	if (!p && x) {
		for (int i = 0; x[i]; i += 2) {
			if (x[i] == (void *)1)
				buf = x[i + 1];
			else if (x[i] == (void *)2)
				size = *(size_t *)x[i + 1];
		}
		printf("XSIZE %zu\n", size);
	}
	for (int i = 0; i < f->np; i++) {
		uint64_t v = 0;
		size_t n = f->psz[i] < 8 ? f->psz[i] : 8;
		if (p) {
			memcpy(&v, p[i], n);
		} else if (buf) {
			off = (off + n - 1) / n * n;
			if (off + n <= size)
				memcpy(&v, buf + off, n);
			off += n;
		}
		printf("ARG %d %llu\n", i, (unsigned long long)v);
	}
}

/* Registered host memory. With FAKECUDA_HOST_BUMP=1 every launch adds 1
 * to value 0 of each registered gpubpf Array map (a header with magic
 * "GBPF" and kind 1): a stand-in for GPU threads counting in a host-backed
 * map (type 1513), which the tool must see through its own mapping. */
static struct { void *p; size_t n; } hostmem[64];
static int nhostmem;
CUresult cuMemHostRegister(void *p, size_t n, unsigned f)
{
	if (nhostmem < 64)
		hostmem[nhostmem].p = p, hostmem[nhostmem++].n = n;
	return 0;
}
CUresult cuMemHostUnregister(void *p)
{
	for (int i = 0; i < nhostmem; i++)
		if (hostmem[i].p == p)
			hostmem[i].p = NULL;
	return 0;
}
static void bump_host_maps(void)
{
	static int on = -1;
	if (on < 0)
		on = getenv("FAKECUDA_HOST_BUMP") != NULL;
	for (int i = 0; on && i < nhostmem; i++) {
		uint32_t *h = hostmem[i].p;
		if (h && hostmem[i].n >= 264 && h[0] == 0x46504247 && h[1] == 1)
			__atomic_fetch_add((uint64_t *)((char *)h + 256), 1, __ATOMIC_SEQ_CST);
	}
}
static uint64_t direct_done; /* mono() when the last direct kernel "ends" */

static CUresult direct_launch(obj *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
			      void **x)
{
	size_t size = 0;
	for (int i = 0; x && x[i]; i += 2)
		if (x[i] == (void *)2)
			size = *(size_t *)x[i + 1];
	printf("DIRECT %s grid %u,%u,%u block %u,%u,%u params %zu\n", f->name, gx, gy, gz, bx, by, bz, size);
	fflush(stdout);
	const char *stall = getenv("FAKECUDA_LAUNCH_STALL_MS");
	__atomic_store_n(&direct_done, mono() + (stall ? (uint64_t)atol(stall) * 1000000ull : 0), __ATOMIC_RELEASE);
	return 0;
}

/* FAKECUDA_DRIVER_LOCK=1 models the driver lock seen on the GPU machine
 * (a reader-preferring rwlock): a launch holds it shared for about 20 us,
 * allocations and copies need it exclusive, so back-to-back launches from
 * many threads starve them. fakecuda_quiet (set by the app) makes launches
 * print nothing. */
int fakecuda_quiet;
/* launches that took the lock while an exclusive operation waited for it:
 * how long the agent's requests were starved, in launches, not in time */
long fakecuda_overtakes;
static int drv_writers; /* exclusive operations waiting for the lock */
static pthread_rwlock_t drv_lock = PTHREAD_RWLOCK_INITIALIZER;
static int drv_lock_on = -1;
static int drv_locking(void)
{
	if (drv_lock_on < 0)
		drv_lock_on = getenv("FAKECUDA_DRIVER_LOCK") != NULL;
	return drv_lock_on;
}
static void drv_exclusive(int on)
{
	if (drv_locking()) {
		if (on) {
			__atomic_add_fetch(&drv_writers, 1, __ATOMIC_RELAXED);
			pthread_rwlock_wrlock(&drv_lock);
			__atomic_sub_fetch(&drv_writers, 1, __ATOMIC_RELAXED);
		} else
			pthread_rwlock_unlock(&drv_lock);
	}
}
static void drv_launch_hold(void)
{
	if (!drv_locking())
		return;
	struct timespec t0, t;
	pthread_rwlock_rdlock(&drv_lock);
	if (__atomic_load_n(&drv_writers, __ATOMIC_RELAXED))
		__atomic_add_fetch(&fakecuda_overtakes, 1, __ATOMIC_RELAXED);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do
		clock_gettime(CLOCK_MONOTONIC, &t);
	while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 20000);
	pthread_rwlock_unlock(&drv_lock);
}

static CUresult launch(void *f, void **p, void **x)
{
	if (!strcmp(((obj *)f)->name, "gpubpf_clock"))
		return clock_launch(p);
	drv_launch_hold();
	if (__atomic_load_n(&fakecuda_quiet, __ATOMIC_RELAXED))
		return 0;
	bump_host_maps();
	printf("LAUNCH %s\n", ((obj *)f)->name);
	print_args(f, p, x);
	fflush(stdout);
	return 0;
}
/* standin_hook is fn of the stand-in library the environment variable env
 * names, once the agent has loaded it (NULL before). */
static void *standin_hook(const char *env, const char *fn)
{
	const char *path = getenv(env);
	void *h = path && path[0] == '/' ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : NULL;
	return h ? dlsym(h, fn) : NULL;
}
/* The stand-in CUPTI (fakecupti.c), once the agent has loaded it (it
 * names it in GPUBPF_CUPTI): told of each launch, as CUPTI is by the driver. */
static void cupti_report(void *f, void *s, unsigned cbid)
{
	static void (*report)(const char *, void *, void *, unsigned);
	if (!report)
		*(void **)&report = standin_hook("GPUBPF_CUPTI", "fakecupti_launch");
	if (report)
		report(((obj *)f)->name, s, cur, cbid);
}
/* The stand-in sanitizer (fakesanitizer.c), once the agent has loaded it
 * (it names it in GPUBPF_SANITIZER): told of each launch, as the sanitizer
 * is by the driver. A library's kernel stands for its own module. */
static void san_report(void *f, void *s, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz)
{
	static void (*report)(const char *, void *, void *, void *, void *, unsigned, unsigned, unsigned, unsigned,
			      unsigned, unsigned);
	if (!report)
		*(void **)&report = standin_hook("GPUBPF_SANITIZER", "fakesan_launch");
	if (report)
		report(((obj *)f)->name, ((obj *)f)->owner ? ((obj *)f)->owner : f, f, cur, s, gx, gy, gz, bx, by, bz);
}
CUresult cuLaunchKernel(void *f, unsigned a, unsigned b, unsigned c, unsigned d, unsigned e, unsigned g,
			unsigned sh, void *s, void **p, void **x)
{
	if (!strncmp(((obj *)f)->name, "gpubpf_direct_", 14))
		return direct_launch(f, a, b, c, d, e, g, x);
	cupti_report(f, s, 307);
	san_report(f, s, a, b, c, d, e, g);
	return launch(f, p, x);
}
CUresult cuLaunchKernel_ptsz(void *f, unsigned a, unsigned b, unsigned c, unsigned d, unsigned e, unsigned g,
			     unsigned sh, void *s, void **p, void **x)
{
	cupti_report(f, s, 442);
	return launch(f, p, x);
}
/* A kernel node (CUDA_KERNEL_NODE_PARAMS, v1 or v2: the same prefix)
 * "runs" at once. */
struct node_params {
	void *func;
	unsigned gx, gy, gz, bx, by, bz, sh;
	void **kernelParams, **extra;
};
/* Graphs made with cuGraphCreate (magic 8) hold their kernel nodes (magic
 * 9): each a copy of its params with the argument values (the sizes a
 * loaded entry declares, or vecAdd's), so that an exec (magic 7)
 * instantiated from one runs them at every launch: "GRAPHRUN <exec>
 * <name>", then the ARG lines of a loaded entry. cuGraphClone copies a
 * graph (its nodes remember their originals: cuGraphNodeFindInClone);
 * cuGraphExecUpdate copies a graph of as many nodes into an exec, and
 * FAKECUDA_GRAPH_UPDATE=refuse refuses it (CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE,
 * result "not supported"). Other graphs (a capture's) keep nothing. */
#define GRAPH_MAGIC 8
#define GNODE_MAGIC 9
struct gnode {
	obj o;
	struct fgraph *g;
	struct gnode *orig;
	void *func;
	unsigned dim[7];
	int nargs;
	uint64_t vals[8];
	void *pp[8];
};
struct fgraph {
	obj o;
	int n;
	struct gnode *nodes[16];
};
struct fexec {
	obj o;
	int n; /* -1: not from a graph made here */
	struct gnode nodes[16];
};
static int arg_sizes(obj *f, int psz[8])
{
	if (f->magic == 4 && f->np) {
		memcpy(psz, f->psz, sizeof(f->psz));
		return f->np;
	}
	if (!strcmp(f->name, "_Z6vecAddPfi")) {
		psz[0] = 8, psz[1] = 4;
		return 2;
	}
	return 0;
}
/* n's params from np: the argument values copied out of kernelParams or
 * extra's packed buffer */
static void gnode_set(struct gnode *n, const struct node_params *np)
{
	int psz[8] = {0};
	n->func = np->func;
	memcpy(n->dim, &np->gx, sizeof(n->dim));
	n->nargs = arg_sizes(np->func, psz);
	const unsigned char *buf = NULL;
	size_t size = 0, off = 0;
	if (!np->kernelParams && np->extra)
		for (int i = 0; np->extra[i]; i += 2) {
			if (np->extra[i] == (void *)1)
				buf = np->extra[i + 1];
			else if (np->extra[i] == (void *)2)
				size = *(size_t *)np->extra[i + 1];
		}
	uint64_t vals[8] = {0}; /* np may point into n itself */
	for (int i = 0; i < n->nargs && i < 8; i++) {
		size_t k = psz[i] < 8 ? psz[i] : 8;
		if (np->kernelParams) {
			memcpy(&vals[i], np->kernelParams[i], k);
		} else if (buf) {
			off = (off + k - 1) / k * k;
			if (off + k <= size)
				memcpy(&vals[i], buf + off, k);
			off += k;
		}
	}
	memcpy(n->vals, vals, sizeof(vals));
	for (int i = 0; i < 8; i++)
		n->pp[i] = &n->vals[i];
}
static int in_set(void **set, int n, void *s);
/* graphs made here: others (a capture's, a test's made-up handle) are
 * never looked into */
static pthread_mutex_t graphs_mu = PTHREAD_MUTEX_INITIALIZER;
static void *graphs_made[256];
static int ngraphs_made;
CUresult cuGraphCreate(void **g, unsigned flags)
{
	struct fgraph *f = calloc(1, sizeof(*f));
	f->o.magic = GRAPH_MAGIC;
	snprintf(f->o.name, sizeof(f->o.name), "graph");
	pthread_mutex_lock(&graphs_mu);
	if (ngraphs_made < 256)
		graphs_made[ngraphs_made++] = f;
	pthread_mutex_unlock(&graphs_mu);
	*g = f;
	return 0;
}
static struct fgraph *fgraph(void *g)
{
	pthread_mutex_lock(&graphs_mu);
	int known = g && in_set(graphs_made, ngraphs_made, g);
	pthread_mutex_unlock(&graphs_mu);
	return known && ((obj *)g)->magic == GRAPH_MAGIC ? g : NULL;
}
CUresult cuGraphAddKernelNode(void **node, void *g, void *deps, size_t n, const struct node_params *np)
{
	printf("GRAPHNODE %s\n", ((obj *)np->func)->name);
	print_args(np->func, np->kernelParams, np->extra);
	fflush(stdout);
	struct fgraph *f = fgraph(g);
	if (!f) {
		*node = (void *)1;
		return 0;
	}
	if (f->n == 16)
		return 2;
	struct gnode *gn = calloc(1, sizeof(*gn));
	gn->o.magic = GNODE_MAGIC;
	gn->g = f;
	gnode_set(gn, np);
	f->nodes[f->n++] = gn;
	*node = gn;
	return 0;
}
CUresult cuGraphDestroy(void *g)
{
	struct fgraph *f = fgraph(g);
	if (!f)
		return 1;
	for (int i = 0; i < f->n; i++)
		free(f->nodes[i]);
	f->o.magic = 0;
	pthread_mutex_lock(&graphs_mu);
	for (int i = 0; i < ngraphs_made; i++)
		if (graphs_made[i] == f)
			graphs_made[i] = graphs_made[--ngraphs_made];
	pthread_mutex_unlock(&graphs_mu);
	free(f);
	return 0;
}
CUresult cuGraphClone(void **out, void *g)
{
	struct fgraph *f = fgraph(g);
	if (!f)
		return 1;
	struct fgraph *c;
	cuGraphCreate((void **)&c, 0);
	for (int i = 0; i < f->n; i++) {
		struct gnode *gn = malloc(sizeof(*gn));
		*gn = *f->nodes[i];
		gn->g = c;
		gn->orig = f->nodes[i];
		for (int j = 0; j < 8; j++)
			gn->pp[j] = &gn->vals[j];
		c->nodes[c->n++] = gn;
	}
	*out = c;
	return 0;
}
CUresult cuGraphGetNodes(void *g, void **nodes, size_t *n)
{
	struct fgraph *f = fgraph(g);
	if (!f)
		return 1;
	if (nodes)
		for (int i = 0; i < f->n && (size_t)i < *n; i++)
			nodes[i] = f->nodes[i];
	*n = f->n;
	return 0;
}
static struct gnode *gnode(void *n) { return n && ((obj *)n)->magic == GNODE_MAGIC ? n : NULL; }
CUresult cuGraphNodeGetType(void *n, int *t)
{
	if (!gnode(n))
		return 1;
	*t = 0; /* CU_GRAPH_NODE_TYPE_KERNEL */
	return 0;
}
CUresult cuGraphChildGraphNodeGetGraph(void *n, void **g) { return 1; }
CUresult cuGraphNodeFindInClone(void **out, void *n, void *clone)
{
	struct fgraph *c = fgraph(clone);
	for (int i = 0; c && i < c->n; i++)
		if (c->nodes[i]->orig == n) {
			*out = c->nodes[i];
			return 0;
		}
	return 1;
}
/* CUDA_KERNEL_NODE_PARAMS_v2: node_params and kern, ctx */
struct node_params_v2 {
	struct node_params p;
	void *kern, *ctx;
};
CUresult cuGraphKernelNodeGetParams_v2(void *n, struct node_params_v2 *out)
{
	struct gnode *gn = gnode(n);
	if (!gn)
		return 1;
	memset(out, 0, sizeof(*out));
	out->p.func = gn->func;
	memcpy(&out->p.gx, gn->dim, sizeof(gn->dim));
	out->p.kernelParams = gn->nargs ? gn->pp : NULL;
	return 0;
}
CUresult cuGraphKernelNodeSetParams_v2(void *n, const struct node_params_v2 *np)
{
	struct gnode *gn = gnode(n);
	if (!gn)
		return 1;
	gnode_set(gn, &np->p);
	return 0;
}
static CUresult exec_copy(struct fexec *e, struct fgraph *f)
{
	if (f->n > 16)
		return 2;
	e->n = f->n;
	for (int i = 0; i < f->n; i++) {
		e->nodes[i] = *f->nodes[i];
		for (int j = 0; j < 8; j++)
			e->nodes[i].pp[j] = &e->nodes[i].vals[j];
	}
	return 0;
}
/* CUgraphExecUpdateResultInfo */
struct upd_info {
	int result;
	void *node, *from;
};
CUresult cuGraphExecUpdate_v2(void *x, void *g, struct upd_info *info)
{
	struct fexec *e = x;
	struct fgraph *f = fgraph(g);
	const char *how = getenv("FAKECUDA_GRAPH_UPDATE");
	int refuse = how && !strcmp(how, "refuse");
	if (info)
		memset(info, 0, sizeof(*info));
	printf("EXECUPDATE %p %s\n", x, refuse ? "refused" : f && f->n == e->n ? "ok" : "topology");
	fflush(stdout);
	if (refuse || !f || f->n != e->n) {
		if (info)
			info->result = refuse ? 6 : 2;
		return 910; /* CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE */
	}
	return exec_copy(e, f);
}
CUresult cuGraphExecKernelNodeSetParams_v2(void *x, void *n, const struct node_params_v2 *np)
{
	struct fexec *e = x;
	struct gnode *gn = gnode(n);
	/* the node is the i-th of the graph the exec was made from */
	for (int i = 0; gn && i < gn->g->n && i < e->n; i++)
		if (gn->g->nodes[i] == gn) {
			gnode_set(&e->nodes[i], &np->p);
			return 0;
		}
	return 1;
}
CUresult cuGraphExecMemsetNodeSetParams(void *x, void *n, const void *p, void *ctx) { return 0; }
CUresult cuGraphExecDestroy(void *x)
{
	printf("EXECDESTROY %p\n", x);
	fflush(stdout);
	free(x);
	return 0;
}
CUresult cuMemAlloc(uint64_t *p, size_t n)
{
	drv_exclusive(1);
	*p = (uint64_t)(uintptr_t)calloc(1, n);
	drv_exclusive(0);
	return 0;
}
CUresult cuMemFree(uint64_t p) { free((void *)(uintptr_t)p); return 0; }
CUresult cuMemsetD8(uint64_t p, unsigned char v, size_t n) { memset((void *)(uintptr_t)p, v, n); return 0; }
CUresult cuMemcpyHtoD(uint64_t d, const void *s, size_t n)
{
	drv_exclusive(1);
	memcpy((void *)(uintptr_t)d, s, n);
	drv_exclusive(0);
	return 0;
}
CUresult cuMemcpyDtoH(void *d, uint64_t s, size_t n) { memcpy(d, (void *)(uintptr_t)s, n); return 0; }
CUresult cuMemHostGetDevicePointer(uint64_t *d, void *p, unsigned f) { *d = (uint64_t)(uintptr_t)p; return 0; }
CUresult cuEventCreate(void **e, unsigned f) { *e = malloc(1); return 0; }
/* Streams the application destroyed, and those being captured (begun with
 * cuStreamBeginCapture*, as on the real driver: the agent counts the
 * captures it sees begin, and asks a stream's status only while one is). */
static pthread_mutex_t streams_mu = PTHREAD_MUTEX_INITIALIZER;
static void *dead[256], *capturing[16];
static int ndead, ncapturing;
static int in_set(void **set, int n, void *s)
{
	for (int i = 0; i < n; i++)
		if (set[i] == s)
			return 1;
	return 0;
}
static int evlog = -1;
static int event_log(void)
{
	if (evlog < 0)
		evlog = getenv("FAKECUDA_EVENT_LOG") != NULL;
	return evlog;
}
/* The calling thread: the application's commands run on its main thread. */
static const char *who(void) { return syscall(SYS_gettid) == getpid() ? "main" : "other"; }
/* With FAKECUDA_EVENT_LOG=1: "EVREC <event> <stream> main|other" (the
 * calling thread). Refused as the driver refuses it (and said on stderr,
 * "FAKECUDA: ..."): a record on a destroyed stream; while a capture is
 * active, one on the legacy stream (it would invalidate the capture) or into
 * a capturing stream (the agent never means to). */
CUresult cuEventRecord(void *e, void *s)
{
	pthread_mutex_lock(&streams_mu);
	int gone = s && in_set(dead, ndead, s), cap = ncapturing > 0, into = s && in_set(capturing, ncapturing, s);
	pthread_mutex_unlock(&streams_mu);
	if (event_log()) {
		printf("EVREC %p %p %s\n", e, s, who());
		fflush(stdout);
	}
	if (gone) {
		fprintf(stderr, "FAKECUDA: cuEventRecord on destroyed stream %p\n", s);
		return 400;
	}
	if (cap && (!s || s == (void *)1 || into)) {
		fprintf(stderr, "FAKECUDA: cuEventRecord on stream %p while a capture is active\n", s);
		return 906; /* CUDA_ERROR_STREAM_CAPTURE_IMPLICIT */
	}
	return 0;
}
CUresult cuEventSynchronize(void *e)
{
	if (event_log()) {
		printf("EVSYNC %p\n", e);
		fflush(stdout);
	}
	return 0;
}
CUresult cuEventDestroy(void *e) { free(e); return 0; }
CUresult cuEventQuery(void *e) { return mono() < __atomic_load_n(&direct_done, __ATOMIC_ACQUIRE) ? 600 : 0; }
CUresult cuEventElapsedTime(float *ms, void *a, void *b) { *ms = 0.0125f; return 0; }
/* A capture's graph is capgraph. */
static obj capgraph = {6, "capgraph"};
CUresult cuStreamIsCapturing(void *s, int *st)
{
	pthread_mutex_lock(&streams_mu);
	*st = s && in_set(capturing, ncapturing, s);
	pthread_mutex_unlock(&streams_mu);
	if (event_log()) {
		printf("ISCAPTURING %p\n", s);
		fflush(stdout);
	}
	return 0;
}
/* Captures: "BEGINCAPTURE <stream>" and "ENDCAPTURE <stream>" with
 * FAKECUDA_EVENT_LOG=1; the _ptsz flavours' stream 0 is the per-thread
 * default stream (0x2). */
static CUresult capture_begin(void *s)
{
	pthread_mutex_lock(&streams_mu);
	CUresult r = 0;
	if (!s || s == (void *)1 || in_set(capturing, ncapturing, s) || ncapturing == 16)
		r = 401; /* CUDA_ERROR_ILLEGAL_STATE */
	else
		capturing[ncapturing++] = s;
	pthread_mutex_unlock(&streams_mu);
	if (event_log() && !r) {
		printf("BEGINCAPTURE %p\n", s);
		fflush(stdout);
	}
	return r;
}
CUresult cuStreamBeginCapture(void *s) { return capture_begin(s); }
CUresult cuStreamBeginCapture_ptsz(void *s) { return capture_begin(s ? s : (void *)2); }
CUresult cuStreamBeginCapture_v2(void *s, int mode) { return capture_begin(s); }
CUresult cuStreamBeginCapture_v2_ptsz(void *s, int mode) { return capture_begin(s ? s : (void *)2); }
CUresult cuStreamBeginCaptureToGraph(void *s, void *g, const void *deps, const void *data, size_t n, int mode)
{
	return capture_begin(s);
}
CUresult cuStreamBeginCaptureToGraph_ptsz(void *s, void *g, const void *deps, const void *data, size_t n, int mode)
{
	return capture_begin(s ? s : (void *)2);
}
static CUresult capture_end(void *s, void **g)
{
	pthread_mutex_lock(&streams_mu);
	CUresult r = 401;
	for (int i = 0; i < ncapturing; i++)
		if (capturing[i] == s) {
			capturing[i] = capturing[--ncapturing];
			r = 0;
			break;
		}
	pthread_mutex_unlock(&streams_mu);
	if (g)
		*g = r ? NULL : &capgraph;
	if (event_log() && !r) {
		printf("ENDCAPTURE %p\n", s);
		fflush(stdout);
	}
	return r;
}
CUresult cuStreamEndCapture(void *s, void **g) { return capture_end(s, g); }
CUresult cuStreamEndCapture_ptsz(void *s, void **g) { return capture_end(s ? s : (void *)2, g); }
CUresult cuStreamGetCaptureInfo_v2(void *s, int *st, uint64_t *id, void **g, const void **deps, size_t *n)
{
	pthread_mutex_lock(&streams_mu);
	*st = s && in_set(capturing, ncapturing, s);
	pthread_mutex_unlock(&streams_mu);
	if (id)
		*id = 1;
	if (g)
		*g = *st ? &capgraph : NULL;
	if (deps)
		*deps = NULL;
	if (n)
		*n = 0;
	return 0;
}
/* Stream memory writes happen at once: "WRITE <stream> <addr> <value>". */
CUresult cuStreamWriteValue64(void *s, uint64_t addr, uint64_t v, unsigned f)
{
	printf("WRITE %p 0x%llx %llu\n", s, (unsigned long long)addr, (unsigned long long)v);
	fflush(stdout);
	*(volatile uint64_t *)(uintptr_t)addr = v;
	return 0;
}
CUresult cuPointerGetAttribute(void *data, int attr, uint64_t p)
{
	if (attr != 1) /* CU_POINTER_ATTRIBUTE_CONTEXT */
		return 1;
	*(void **)data = &ctx0;
	return 0;
}
/* Graph execs: "INSTANTIATE <graph> <exec>", launches "GRAPHLAUNCH <exec>
 * <stream>", then each node of an exec made from a graph made here runs. */
CUresult cuGraphInstantiateWithFlags(void **x, void *g, unsigned long long flags)
{
	struct fexec *e = calloc(1, sizeof(*e));
	e->o.magic = 7;
	e->n = -1;
	if (fgraph(g))
		exec_copy(e, g);
	*x = e;
	printf("INSTANTIATE %p %p\n", g, (void *)e);
	fflush(stdout);
	return 0;
}
CUresult cuGraphInstantiate_v2(void **x, void *g, void **en, char *log, size_t n) { return cuGraphInstantiateWithFlags(x, g, 0); }
/* FAKECUDA_GRAPH_LAUNCH_FAIL=N: the Nth graph launch fails (700), runs nothing */
CUresult cuGraphLaunch(void *x, void *s)
{
	struct fexec *e = x;
	static int launches;
	const char *fail = getenv("FAKECUDA_GRAPH_LAUNCH_FAIL");
	if (fail && ++launches == atoi(fail))
		return 700;
	printf("GRAPHLAUNCH %p %p\n", x, s);
	for (int i = 0; i < e->n; i++) {
		printf("GRAPHRUN %p %s\n", x, ((obj *)e->nodes[i].func)->name);
		print_args(e->nodes[i].func, e->nodes[i].nargs ? e->nodes[i].pp : NULL, NULL);
	}
	fflush(stdout);
	return 0;
}
CUresult cuGraphLaunch_ptsz(void *x, void *s) { return cuGraphLaunch(x, s ? s : (void *)2); }
/* Streams made here carry their context's generation: one used after its
 * context was destroyed aborts (see ctx_kill). Others (the app's own
 * handles) are not looked at. */
#define STREAM_MAGIC 0x57524541u
struct fstream {
	unsigned magic;
	int gen;
};
static void stream_check(void *s, const char *what)
{
	struct fstream *f = s;
	if ((uintptr_t)s > 4096 && f->magic == STREAM_MAGIC && f->gen != ctx_gen) {
		fprintf(stderr, "FAKECUDA: %s on a stream of a destroyed context\n", what);
		abort();
	}
}
CUresult cuStreamCreate(void **s, unsigned f)
{
	struct fstream *st = malloc(sizeof(*st));
	st->magic = STREAM_MAGIC;
	st->gen = ctx_gen;
	*s = st;
	pthread_mutex_lock(&streams_mu);
	for (int i = 0; i < ndead; i++)
		if (dead[i] == st)
			dead[i] = dead[--ndead]; /* the handle is a stream again */
	pthread_mutex_unlock(&streams_mu);
	return 0;
}
CUresult cuStreamDestroy(void *s)
{
	stream_check(s, "cuStreamDestroy");
	pthread_mutex_lock(&streams_mu);
	if (s && !in_set(dead, ndead, s) && ndead < 256)
		dead[ndead++] = s;
	pthread_mutex_unlock(&streams_mu);
	free(s);
	return 0;
}
CUresult cuStreamDestroy_v2(void *s) { return cuStreamDestroy(s); }
CUresult cuStreamSynchronize(void *s)
{
	stream_check(s, "cuStreamSynchronize");
	return 0;
}
CUresult cuMemsetD8Async(uint64_t p, unsigned char v, size_t n, void *s)
{
	stream_check(s, "cuMemsetD8Async");
	return cuMemsetD8(p, v, n);
}
CUresult cuMemcpyHtoDAsync(uint64_t d, const void *src, size_t n, void *s)
{
	stream_check(s, "cuMemcpyHtoDAsync");
	return cuMemcpyHtoD(d, src, n);
}
CUresult cuMemcpyDtoHAsync(void *d, uint64_t src, size_t n, void *s)
{
	stream_check(s, "cuMemcpyDtoHAsync");
	return cuMemcpyDtoH(d, src, n);
}
/* CUDA 12.8's ABI. Checks what the real one refuses (no attributes, an
 * access order unset, attrsIdxs not starting at 0); FAKECUDA_BATCH_FAIL
 * refuses every batch (the agent then copies one call at a time). */
struct fmemloc {
	int type, id;
};
struct fmemcpyattr {
	int order;
	struct fmemloc src, dst;
	unsigned flags;
};
CUresult cuMemcpyBatchAsync(uint64_t *dst, uint64_t *src, size_t *len, size_t n, struct fmemcpyattr *at,
			    size_t *idx, size_t nat, size_t *fail, void *s)
{
	stream_check(s, "cuMemcpyBatchAsync");
	if (getenv("FAKECUDA_BATCH_FAIL") || !n || !nat || !at || !idx || idx[0] != 0) {
		if (fail)
			*fail = 0;
		return 1;
	}
	for (size_t i = 0; i < nat; i++)
		if (at[i].order < 1 || at[i].order > 3 || at[i].src.type < 1 || at[i].dst.type < 1)
			return 1;
	for (size_t i = 0; i < n; i++)
		memcpy((void *)(uintptr_t)dst[i], (const void *)(uintptr_t)src[i], len[i]);
	return 0;
}
CUresult cuThreadExchangeStreamCaptureMode(int *m) { *m = 0; return 0; }
CUresult cuStreamWaitEvent(void *s, void *e, unsigned f)
{
	if (event_log()) {
		printf("EVWAIT %p %p\n", s, e);
		fflush(stdout);
	}
	return 0;
}

#define E(n) {#n, (void *)n}
static const struct {
	const char *n;
	void *p;
} table[] = {
	E(cuInit), E(cuDriverGetVersion), E(cuDeviceGetCount), E(cuDeviceGet), E(cuDeviceGetName),
	E(cuDeviceGetAttribute), E(cuDevicePrimaryCtxRetain), E(cuDevicePrimaryCtxRelease), E(cuDevicePrimaryCtxGetState), E(cuCtxGetCurrent),
	E(cuCtxSetCurrent), E(cuCtxGetDevice), E(cuCtxSynchronize), E(cuLibraryLoadData), E(cuLibraryUnload),
	E(cuLibraryGetKernel), E(cuLibraryGetKernelCount), E(cuLibraryEnumerateKernels), E(cuKernelGetName), E(cuKernelGetLibrary), E(cuFuncGetModule),
	E(cuKernelGetFunction), E(cuKernelGetAttribute), E(cuFuncGetAttribute), E(cuFuncSetAttribute),
	E(cuFuncGetName), E(cuLibraryGetGlobal), E(cuModuleGetGlobal), E(cuModuleLoadDataEx), E(cuModuleLoadData),
	E(cuModuleGetFunction), E(cuModuleGetFunctionCount), E(cuModuleEnumerateFunctions), E(cuModuleUnload), E(cuLaunchKernel), E(cuMemAlloc), E(cuMemFree), E(cuMemsetD8),
	E(cuMemcpyHtoD), E(cuMemcpyDtoH), E(cuMemHostRegister), E(cuMemHostUnregister), E(cuMemHostGetDevicePointer),
	E(cuEventCreate), E(cuEventRecord), E(cuEventSynchronize), E(cuEventDestroy), E(cuEventQuery),
	E(cuEventElapsedTime), E(cuStreamIsCapturing),
	E(cuStreamCreate), E(cuStreamDestroy), E(cuStreamSynchronize), E(cuMemsetD8Async), E(cuMemcpyHtoDAsync),
	E(cuMemcpyDtoHAsync), E(cuMemcpyBatchAsync), E(cuThreadExchangeStreamCaptureMode), E(cuStreamWaitEvent), E(cuStreamQuery),
	E(cuGraphAddKernelNode), E(cuStreamWriteValue64), E(cuPointerGetAttribute), E(cuGraphInstantiateWithFlags),
	E(cuGraphInstantiate_v2), E(cuGraphLaunch), E(cuGraphLaunch_ptsz), E(cuDevicePrimaryCtxReset), E(cuCtxDestroy_v2),
	E(cuGraphCreate), E(cuGraphDestroy), E(cuGraphClone), E(cuGraphGetNodes), E(cuGraphNodeGetType),
	E(cuGraphChildGraphNodeGetGraph), E(cuGraphNodeFindInClone), E(cuGraphExecDestroy), E(cuGraphExecMemsetNodeSetParams),
};
/* the driver's versioned exports (cuda.h maps the plain names to them) */
CUresult cuDevicePrimaryCtxRelease_v2(int d) { return cuDevicePrimaryCtxRelease(d); }
CUresult cuDevicePrimaryCtxReset_v2(int d) { return cuDevicePrimaryCtxReset(d); }

CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, uint64_t flags, int *st);
CUresult cuGetProcAddress(const char *sym, void **pfn, int ver, uint64_t flags)
{
	return cuGetProcAddress_v2(sym, pfn, ver, flags, NULL);
}
CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, uint64_t flags, int *st)
{
	if (st)
		*st = 0;
	if (!strcmp(sym, "cuGetProcAddress")) {
		*pfn = ver >= 12000 ? (void *)cuGetProcAddress_v2 : (void *)cuGetProcAddress;
		return 0;
	}
	if (!strcmp(sym, "cuCtxDestroy")) {
		*pfn = (void *)cuCtxDestroy_v2;
		return 0;
	}
	if (!strcmp(sym, "cuCtxCreate")) {
		*pfn = ver >= 12050 ? (void *)cuCtxCreate_v4 : (void *)cuCtxCreate_v2;
		return 0;
	}
	/* the 12.0 ABIs (kernel node params v2, update result info) */
	if (!strcmp(sym, "cuGraphKernelNodeGetParams") && ver >= 12000) {
		*pfn = (void *)cuGraphKernelNodeGetParams_v2;
		return 0;
	}
	if (!strcmp(sym, "cuGraphKernelNodeSetParams") && ver >= 12000) {
		*pfn = (void *)cuGraphKernelNodeSetParams_v2;
		return 0;
	}
	if (!strcmp(sym, "cuGraphExecKernelNodeSetParams") && ver >= 12000) {
		*pfn = (void *)cuGraphExecKernelNodeSetParams_v2;
		return 0;
	}
	if (!strcmp(sym, "cuGraphExecUpdate") && ver >= 12000) {
		*pfn = (void *)cuGraphExecUpdate_v2;
		return 0;
	}
	if (!strcmp(sym, "cuGraphInstantiate")) {
		*pfn = ver >= 12000 ? (void *)cuGraphInstantiateWithFlags : (void *)cuGraphInstantiate_v2;
		return 0;
	}
	if (!strcmp(sym, "cuStreamGetCaptureInfo") && ver >= 11030) {
		*pfn = (void *)cuStreamGetCaptureInfo_v2;
		return 0;
	}
	if (!strcmp(sym, "cuGraphLaunch") && (flags & 2)) {
		*pfn = (void *)cuGraphLaunch_ptsz;
		return 0;
	}
	if (!strcmp(sym, "cuLaunchKernel") && (flags & 2)) {
		*pfn = (void *)cuLaunchKernel_ptsz;
		return 0;
	}
	if (!strcmp(sym, "cuStreamBeginCapture")) {
		if (ver >= 10010)
			*pfn = flags & 2 ? (void *)cuStreamBeginCapture_v2_ptsz : (void *)cuStreamBeginCapture_v2;
		else
			*pfn = flags & 2 ? (void *)cuStreamBeginCapture_ptsz : (void *)cuStreamBeginCapture;
		return 0;
	}
	if (!strcmp(sym, "cuStreamBeginCaptureToGraph") && ver >= 12030) {
		*pfn = flags & 2 ? (void *)cuStreamBeginCaptureToGraph_ptsz : (void *)cuStreamBeginCaptureToGraph;
		return 0;
	}
	if (!strcmp(sym, "cuStreamEndCapture")) {
		*pfn = flags & 2 ? (void *)cuStreamEndCapture_ptsz : (void *)cuStreamEndCapture;
		return 0;
	}
	if (!strcmp(sym, "cuStreamDestroy")) {
		*pfn = ver >= 4000 ? (void *)cuStreamDestroy_v2 : (void *)cuStreamDestroy;
		return 0;
	}
	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
		if (!strcmp(table[i].n, sym)) {
			*pfn = table[i].p;
			return 0;
		}
	*pfn = NULL;
	if (st)
		*st = 1;
	return 500;
}
