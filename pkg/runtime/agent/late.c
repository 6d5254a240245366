/* Late interposition: an agent loaded into a process that was already
 * running (pkg/inject, dlopen from a ptrace'd thread) is not in the symbol
 * lookup scope, so none of its exported cu* wrappers and neither its dlsym
 * are ever called. The program's CUDA runtime (cudart, static or shared;
 * PyTorch's copy; cuBLAS's own) keeps the driver entry points it got from
 * cuGetProcAddress in tables in its writable data. Those tables are found
 * here by value: every aligned word in the loaded objects' data that equals
 * one of libcuda's entry points the agent wraps is swapped for the wrapper
 * with one aligned atomic store, and put back when the last tool leaves.
 *
 * Only the objects' own data is searched (their writable mappings, the
 * anonymous .bss after them, and RELRO pages, made writable for the store
 * and read-only again): not the heap, not stacks, not libcuda, the C
 * library, the dynamic loader or the agent. A word that equals a function
 * entry address of libcuda exactly is a pointer to it; nothing else in a
 * data section holds such a value. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "agent.h"

#define target late_target

/* A word swapped, and what it held; ro: on a RELRO page. */
struct swapped {
	uintptr_t *at;
	uintptr_t old, now;
	int ro;
};

static pthread_mutex_t late_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_late = -1;       /* -1: not decided yet */
static struct swapped *g_sw;  /* late_mu */
static size_t g_nsw, g_capsw; /* late_mu */

static int cmp_target(const void *a, const void *b)
{
	uintptr_t x = ((const struct target *)a)->real, y = ((const struct target *)b)->real;
	return x < y ? -1 : x > y;
}

static const struct target *find(const struct target *t, size_t n, uintptr_t v)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (t[mid].real < v)
			lo = mid + 1;
		else if (t[mid].real > v)
			hi = mid;
		else
			return &t[mid];
	}
	return NULL;
}

int late_mode(void)
{
	if (__atomic_load_n(&g_late, __ATOMIC_ACQUIRE) >= 0)
		return g_late;
	/* Preloaded, the agent's cuGetProcAddress_v2 is the one the global
	 * scope (the main program's handle) finds; dlopen'ed late, RTLD_LOCAL,
	 * it is libcuda's or none. (RTLD_DEFAULT would search the agent's own
	 * scope too.) */
	void *(*ds)(void *, const char *) = real_dlsym ? real_dlsym : dlsym;
	void *main_h = dlopen(NULL, RTLD_NOW);
	void *seen = main_h ? ds(main_h, "cuGetProcAddress_v2") : NULL;
	int late = seen != (void *)&cuGetProcAddress_v2;
	__atomic_store_n(&g_late, late, __ATOMIC_RELEASE);
	return late;
}

/* skip_object: mappings of these files are never searched. */
static int skip_object(const char *path, const char *self)
{
	const char *base = strrchr(path, '/');
	base = base ? base + 1 : path;
	if (self[0] && strcmp(path, self) == 0)
		return 1;
	/* shared memory (a tool's memfds) and device files (the driver's own
	 * mappings) are no program's data; the anonymous memory after them is
	 * no object's .bss either */
	if (strncmp(path, "/memfd:", 7) == 0 || strncmp(path, "/dev/", 5) == 0 || strncmp(path, "/SYSV", 5) == 0)
		return 1;
	return strncmp(base, "libcuda.so", 10) == 0 || strncmp(base, "libc.so", 7) == 0 ||
	       strncmp(base, "libc-", 5) == 0 || strncmp(base, "ld-linux", 8) == 0 ||
	       strncmp(base, "libpthread", 10) == 0 || strncmp(base, "libdl.", 6) == 0 ||
	       strncmp(base, "libnvidia-", 10) == 0;
}

static void record(uintptr_t *at, uintptr_t old, uintptr_t now, int ro)
{
	for (size_t i = 0; i < g_nsw; i++)
		if (g_sw[i].at == at) {
			g_sw[i].now = now;
			return;
		}
	if (g_nsw == g_capsw) {
		size_t cap = g_capsw ? g_capsw * 2 : 64;
		struct swapped *n = realloc(g_sw, cap * sizeof(*n));
		if (!n)
			return;
		g_sw = n;
		g_capsw = cap;
	}
	g_sw[g_nsw++] = (struct swapped){at, old, now, ro};
}

/* Searches [lo, hi) and swaps matches; ro: the pages are read-only (RELRO)
 * and are made writable around each store. Returns the number swapped. */
static int search(uintptr_t lo, uintptr_t hi, int ro, const struct target *t, size_t nt)
{
	int n = 0;
	long page = sysconf(_SC_PAGESIZE);
	/* Read through process_vm_readv, a chunk at a time: a library the
	 * program unloads meanwhile makes the read fail, not the program. */
	static uintptr_t buf[8192];
	for (uintptr_t at = lo; at < hi;) {
		size_t len = hi - at < sizeof(buf) ? hi - at : sizeof(buf);
		struct iovec local = {buf, len}, remote = {(void *)at, len};
		ssize_t got = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
		if (got <= 0)
			break;
		for (size_t i = 0; i < (size_t)got / sizeof(uintptr_t); i++) {
			uintptr_t v = buf[i];
			if (v < t[0].real || v > t[nt - 1].real)
				continue;
			const struct target *m = find(t, nt, v);
			if (!m)
				continue;
			uintptr_t *w = (uintptr_t *)at + i;
			void *pg = (void *)((uintptr_t)w & ~(uintptr_t)(page - 1));
			if (ro && mprotect(pg, (size_t)page, PROT_READ | PROT_WRITE) != 0)
				continue;
			/* only if it still holds the driver's pointer */
			uintptr_t want = v;
			int done = __atomic_compare_exchange_n(w, &want, m->wrapper, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
			if (ro)
				mprotect(pg, (size_t)page, PROT_READ);
			if (done) {
				record(w, v, m->wrapper, ro);
				n++;
			}
		}
		at += (size_t)got;
	}
	return n;
}

int late_scan(char *obj, size_t objsz)
{
	if (!late_mode() || !cuda_loaded()) {
		DBG("late_scan: late %d, libcuda loaded %d", late_mode(), cuda_loaded());
		return 0;
	}
	/* From now on launches of kernels the agent never saw loaded are
	 * learnt at their first launch (late_discover). */
	__atomic_or_fetch(&g_active, ACTIVE_DISCOVER, __ATOMIC_RELEASE);
	struct target *t = NULL;
	size_t nt = late_targets(&t);
	DBG("late interposition: %zu driver entry points to look for", nt);
	if (nt == 0) {
		free(t);
		return 0;
	}
	qsort(t, nt, sizeof(*t), cmp_target);
	char self[4096] = "";
	Dl_info di;
	if (dladdr((void *)&late_scan, &di) && di.dli_fname)
		snprintf(self, sizeof(self), "%s", di.dli_fname);
	FILE *f = fopen("/proc/self/maps", "re");
	if (!f) {
		free(t);
		return 0;
	}
	pthread_mutex_lock(&late_mu);
	int n = 0;
	char line[4096 + 128], prev[4096] = "";
	int prev_skip = 1;
	uintptr_t prev_end = 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi, off;
		char perms[8], path[4096] = "";
		if (sscanf(line, "%lx-%lx %7s %lx %*s %*s %4095[^\n]", &lo, &hi, perms, &off, path) < 4)
			continue;
		char *p = path;
		while (*p == ' ')
			p++;
		/* a file unlinked since it was mapped: the agent itself when a
		 * tool copied it into a container and removed the copy */
		size_t pl = strlen(p);
		if (pl > 10 && strcmp(p + pl - 10, " (deleted)") == 0)
			p[pl - 10] = 0;
		int anon = p[0] == 0;
		int file = p[0] == '/';
		int skip;
		if (file) {
			skip = skip_object(p, self);
			snprintf(prev, sizeof(prev), "%s", p);
		} else if (anon && lo == prev_end && prev[0]) {
			skip = prev_skip; /* the .bss right after an object's data */
		} else {
			skip = 1; /* heap, stacks, vdso, other anonymous memory */
			prev[0] = 0;
		}
		prev_skip = skip;
		prev_end = hi;
		if (skip || perms[0] != 'r' || perms[2] == 'x' || perms[3] != 'p')
			continue;
		int ro = perms[1] != 'w';
		if (ro && !file)
			continue;
		int k = search(lo, hi, ro, t, nt);
		if (k && obj && objsz && !strstr(obj, prev)) {
			size_t used = strlen(obj);
			snprintf(obj + used, objsz - used, "%s%s", used ? ", " : "", prev);
		}
		n += k;
	}
	fclose(f);
	pthread_mutex_unlock(&late_mu);
	free(t);
	if (n)
		DBG("late interposition: %d driver entry points swapped for the agent's", n);
	return n;
}

void late_restore(void)
{
	if (g_late != 1)
		return;
	__atomic_and_fetch(&g_active, ~ACTIVE_DISCOVER, __ATOMIC_RELEASE);
	pthread_mutex_lock(&late_mu);
	long page = sysconf(_SC_PAGESIZE);
	size_t back = 0;
	for (size_t i = 0; i < g_nsw; i++) {
		uintptr_t *w = g_sw[i].at;
		uintptr_t want = g_sw[i].now;
		void *pg = (void *)((uintptr_t)w & ~(uintptr_t)(page - 1));
		if (g_sw[i].ro && mprotect(pg, (size_t)page, PROT_READ | PROT_WRITE) != 0)
			continue;
		/* the program may have stored something else since: keep that */
		if (__atomic_compare_exchange_n(w, &want, g_sw[i].old, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			back++;
		if (g_sw[i].ro)
			mprotect(pg, (size_t)page, PROT_READ);
	}
	g_nsw = 0;
	pthread_mutex_unlock(&late_mu);
	if (back)
		DBG("late interposition undone: %zu entry points restored", back);
}

/* Handles already looked at (lock-free; a full table only costs an
 * inventory lookup per launch). */
#define SEEN_CAP 8192
static uintptr_t g_seen[SEEN_CAP];

static int seen_has(uintptr_t h)
{
	size_t i = (h >> 4) * 0x9E3779B97F4A7C15ull >> 51; /* 13 bits */
	for (size_t k = 0; k < 32; k++, i = (i + 1) & (SEEN_CAP - 1)) {
		uintptr_t v = __atomic_load_n(&g_seen[i], __ATOMIC_ACQUIRE);
		if (v == h)
			return 1;
		if (v == 0)
			return 0;
	}
	return 0;
}

static void seen_add(uintptr_t h)
{
	size_t i = (h >> 4) * 0x9E3779B97F4A7C15ull >> 51;
	for (size_t k = 0; k < 32; k++, i = (i + 1) & (SEEN_CAP - 1)) {
		uintptr_t v = 0;
		if (__atomic_compare_exchange_n(&g_seen[i], &v, h, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) || v == h)
			return;
	}
}

void late_discover(void *h)
{
	if (!h || g_agent_thread || seen_has((uintptr_t)h) || drv_init() != 0)
		return;
	pthread_mutex_lock(&g_mu);
	int known = inv_kernel_by_handle(h) != NULL;
	pthread_mutex_unlock(&g_mu);
	if (known) {
		seen_add((uintptr_t)h);
		return;
	}
	/* A CUkernel (cudart 12+ launches those) or a CUfunction: ask the
	 * driver which, its name, and the library or module it comes from. */
	const char *name = NULL;
	void *mod = NULL;
	int kind = 0, mkind = 0;
	CUlibrary lib = NULL;
	CUmodule m = NULL;
	if (D.cuKernelGetName && D.cuKernelGetName(&name, (CUkernel)h) == CUDA_SUCCESS && name) {
		kind = KK_KERNEL;
		if (D.cuKernelGetLibrary && D.cuKernelGetLibrary(&lib, (CUkernel)h) == CUDA_SUCCESS)
			mod = lib, mkind = MK_LIBRARY_DATA;
	} else if (D.cuFuncGetName && D.cuFuncGetName(&name, (CUfunction)h) == CUDA_SUCCESS && name) {
		kind = KK_FUNCTION;
		if (D.cuFuncGetModule && D.cuFuncGetModule(&m, (CUfunction)h) == CUDA_SUCCESS)
			mod = m, mkind = MK_MODULE_DATA;
	}
	seen_add((uintptr_t)h);
	if (!kind)
		return;
	uint64_t id = 0;
	if (mod) {
		id = inv_module_id(mod);
		if (!id) {
			/* loaded before the agent: its image is unknown here
			 * (the tool finds it in the files the process maps) */
			id = inv_add_late_module(mkind, mod, kind, h, name);
			DBG("late: module %p of %s (loaded before the agent) is module %llu", mod, name,
			    (unsigned long long)id);
			if (id)
				server_hold_late(id); /* tools instrument it, maybe before this launch */
			return;
		}
	}
	inv_add_kernel(h, kind, mod, NULL, name);
	if (id)
		server_hold_late(id); /* as above (a module loaded after the agent was held at its load) */
}
