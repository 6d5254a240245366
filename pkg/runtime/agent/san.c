/* The second way into kernels: NVIDIA's Compute Sanitizer patching API
 * (op 29, docs/sanitizer.md). Kernels that come without PTX (cuBLAS,
 * cuDNN, PyTorch's own) cannot be cloned from PTX; the sanitizer patches
 * their SASS in place to call the tool's patch module (our compiler's PTX,
 * assembled by ptxas --compile-as-tools-patch on the tool's side) at every
 * thread's block entry and exit.
 *
 * What the measurements of 2026-11-29 (H200, CUDA 13.0) fixed here:
 * - the subscription must exist before the program's first CUDA context: a
 *   subscription made later is accepted but every patch is then refused.
 *   So the agent subscribes as it is preloaded, idle (no domain on: no cost
 *   measurable), when GPUBPF_SANITIZER asks it to, and turns the launch
 *   callbacks on only while a tool has kernels selected;
 * - the sanitizer and CUPTI share the driver's one tools slot: whichever
 *   subscribes first, the other gets nothing (CUPTI: error 39). Hence
 *   opt-in, so that CUPTI (launchlate) keeps working by default;
 * - patching is per module, at the first launch of a selected kernel, in
 *   the launching thread, with that launch already patched: counts are
 *   exact from it on. Kernels nobody selected in a patched module get NULL
 *   callback data and return at once (their cost stays: the patch is the
 *   cost, not the callback's body).
 *
 * Locking: S.mu guards everything here. The launch callback runs inside the
 * application's launch and calls the sanitizer with S.mu held; the server
 * thread never calls the sanitizer or the driver with S.mu held (it could
 * wait for a driver lock that a launching thread holds while it waits for
 * S.mu). */
#define _GNU_SOURCE
#include <dlfcn.h>

#include "sandefs.h"
#include "server.h"

#define SAN_MAXSEL 16384u /* kernels selected (slots of the per-context index table) */
#define SAN_HASH (2 * SAN_MAXSEL)
#define SAN_MAXCTX 64
#define SAN_MAXMOD 4096
#define SAN_MAXOWN 1024
#define SAN_LATE 0xFFFFFFFEu    /* index given from the pool at the kernel's first patched launch */
#define SAN_UNKNOWN 0xFFFFFFFFu /* bpf_gpu_kernel_index's unknown kernel */

struct san_sel {
	char *name;
	uint32_t index; /* bpf_gpu_kernel_index in that kernel */
	uint32_t slot;  /* its word in each context's table: the callback data */
};

struct san_ctx {
	CUcontext c;
	int patches;     /* the program's patch module: 1 added, -1 refused */
	void *table;     /* device: u32 per slot, the kernel index */
	uint32_t *host;  /* the table's host copy (the source of async copies: never freed) */
	uint32_t written; /* slots copied to the device */
};

struct san_mod {
	CUcontext c;
	CUmodule m;
	int state; /* 0 not patched, 1 patched, -1 refused */
};

static struct {
	pthread_mutex_t mu;
	int state; /* 1: subscribed; 0: unavailable (why) */
	char why[384];
	void *lib;
	Sanitizer_SubscriberHandle sub;
	SanitizerResult (*Subscribe)(Sanitizer_SubscriberHandle *, Sanitizer_CallbackFunc, void *);
	SanitizerResult (*EnableDomain)(uint32_t, Sanitizer_SubscriberHandle, int);
	SanitizerResult (*AddPatches)(const void *, CUcontext);
	SanitizerResult (*PatchInstructions)(int, CUmodule, const char *);
	SanitizerResult (*PatchModule)(CUmodule);
	SanitizerResult (*UnpatchModule)(CUmodule);
	SanitizerResult (*SetCallbackData)(CUfunction, const void *);
	SanitizerResult (*Alloc)(CUcontext, void **, size_t);
	SanitizerResult (*MemcpyHtoD)(void *, void *, size_t, Sanitizer_StreamHandle);
	SanitizerResult (*ResultString)(SanitizerResult, const char **);

	struct session *owner;
	CUcontext only; /* the context the program's maps are in: nothing else is patched */
	uint8_t *cubin;
	size_t ncubin;
	char enter[128], exit[128];
	struct san_sel *sel; /* SAN_HASH entries, open addressing */
	uint32_t nsel;
	struct san_ctx ctx[SAN_MAXCTX];
	int nctx;
	struct san_mod mods[SAN_MAXMOD];
	int nmods;
	CUmodule own[SAN_MAXOWN]; /* the agent's clones: never patched */
	int nown;
	uint32_t *pool; /* SAN_MAXSEL indexes the tool gave for SAN_LATE kernels */
	uint32_t npool, pool_next;
	uint32_t *assigned; /* slots given an index since the owner's last request */
	uint32_t nassigned;
	uint64_t launches, threads, refused_launches;
	uint32_t patched, failures;
	char last_err[256];
} S = {.mu = PTHREAD_MUTEX_INITIALIZER};

static const char *san_str(SanitizerResult r)
{
	const char *s = NULL;
	if (S.ResultString)
		S.ResultString(r, &s);
	return s ? s : "unknown error";
}

static uint32_t fnv(const char *s)
{
	uint32_t h = 2166136261u;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 16777619u;
	return h;
}

static struct san_sel *sel_slot(const char *name)
{
	if (!S.sel)
		return NULL;
	for (uint32_t i = fnv(name) % SAN_HASH, n = 0; n < SAN_HASH; i = (i + 1) % SAN_HASH, n++)
		if (!S.sel[i].name || !strcmp(S.sel[i].name, name))
			return &S.sel[i];
	return NULL;
}

static int is_own(CUmodule m)
{
	for (int i = 0; i < S.nown; i++)
		if (S.own[i] == m)
			return 1;
	return 0;
}

void san_own_module(CUmodule m, int add)
{
	pthread_mutex_lock(&S.mu);
	if (add && S.nown < SAN_MAXOWN && !is_own(m))
		S.own[S.nown++] = m;
	for (int i = 0; !add && i < S.nown; i++)
		if (S.own[i] == m)
			S.own[i] = S.own[--S.nown];
	pthread_mutex_unlock(&S.mu);
}

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(S.last_err, sizeof(S.last_err), fmt, ap);
	va_end(ap);
	S.failures++;
	DBG("sanitizer: %s", S.last_err);
}

static struct san_ctx *ctx_of(CUcontext c)
{
	for (int i = 0; i < S.nctx; i++)
		if (S.ctx[i].c == c)
			return &S.ctx[i];
	if (S.nctx == SAN_MAXCTX)
		return NULL;
	struct san_ctx *x = &S.ctx[S.nctx++];
	x->c = c;
	return x;
}

static struct san_mod *mod_of(CUcontext c, CUmodule m)
{
	for (int i = 0; i < S.nmods; i++)
		if (S.mods[i].m == m && S.mods[i].c == c)
			return &S.mods[i];
	if (S.nmods == SAN_MAXMOD)
		return NULL;
	struct san_mod *x = &S.mods[S.nmods++];
	x->c = c;
	x->m = m;
	return x;
}

/* fill_host makes a context's host copy of the kernel index table. */
static int fill_host(struct san_ctx *cx)
{
	if (cx->host)
		return 0;
	if (!(cx->host = calloc(SAN_MAXSEL, sizeof(uint32_t))))
		return -1;
	for (uint32_t i = 0; i < SAN_HASH && S.sel; i++)
		if (S.sel[i].name)
			cx->host[S.sel[i].slot] = S.sel[i].index == SAN_LATE ? SAN_UNKNOWN : S.sel[i].index;
	return 0;
}

/* give_index gives kernel e its index from the pool at its first patched
 * launch, in the launch's stream before the kernel (S.mu held). */
static void give_index(struct san_sel *e, struct san_ctx *cx, Sanitizer_StreamHandle st)
{
	if (e->index != SAN_LATE || S.pool_next == S.npool)
		return; /* the kernel runs as the unknown one until the tool adds to the pool */
	e->index = S.pool[S.pool_next++];
	S.assigned[S.nassigned++] = (uint32_t)(e - S.sel);
	cx->host[e->slot] = e->index;
	SanitizerResult r = S.MemcpyHtoD((uint32_t *)cx->table + e->slot, cx->host + e->slot, sizeof(uint32_t), st);
	if (r)
		fail("writing a kernel's index: %s", san_str(r));
}

/* patch puts the program into module m (S.mu held, in a launching thread). */
static int patch(struct san_ctx *cx, struct san_mod *m, const char *kernel)
{
	SanitizerResult r;
	if (!cx->patches) {
		r = S.AddPatches(S.cubin, cx->c);
		cx->patches = r == 0 ? 1 : -1;
		if (r) {
			fail("loading the patch module (sanitizerAddPatches): %s", san_str(r));
			return -1;
		}
	}
	if (cx->patches < 0)
		return -1;
	if (!cx->table) {
		if (fill_host(cx)) {
			fail("out of memory for the kernel index table");
			return -1;
		}
		if ((r = S.Alloc(cx->c, &cx->table, SAN_MAXSEL * sizeof(uint32_t))) != 0) {
			cx->table = NULL;
			fail("sanitizerAlloc of the kernel index table: %s", san_str(r));
			return -1;
		}
	}
	r = 0;
	if (S.enter[0])
		r = S.PatchInstructions(SANITIZER_INSTRUCTION_BLOCK_ENTER, m->m, S.enter);
	if (!r && S.exit[0])
		r = S.PatchInstructions(SANITIZER_INSTRUCTION_BLOCK_EXIT, m->m, S.exit);
	if (!r)
		r = S.PatchModule(m->m);
	if (r) {
		fail("patching the module of %s: %s", kernel, san_str(r));
		return -1;
	}
	S.patched++;
	return 0;
}

static void san_cb(void *u, int dom, uint32_t cbid, const void *data)
{
	(void)u;
	if (dom != SANITIZER_CB_DOMAIN_LAUNCH || cbid != SANITIZER_CBID_LAUNCH_BEGIN)
		return;
	const san_launch_data *l = data;
	if (!l || !l->functionName || !l->module)
		return;
	pthread_mutex_lock(&S.mu);
	struct san_sel *e = S.owner ? sel_slot(l->functionName) : NULL;
	if (!e || !e->name || is_own(l->module)) {
		/* A kernel nobody selected in a module patched for another: its
		 * callbacks must find no data and return at once. */
		for (int i = 0; S.owner && i < S.nmods; i++)
			if (S.mods[i].m == l->module && S.mods[i].c == l->context && S.mods[i].state == 1)
				S.SetCallbackData(l->function, NULL);
		goto out;
	}
	if (l->context != S.only) { /* another device: the program's maps are not there */
		S.refused_launches++;
		goto out;
	}
	struct san_ctx *cx = ctx_of(l->context);
	struct san_mod *m = cx ? mod_of(l->context, l->module) : NULL;
	if (!m) {
		fail("more than %d contexts or %d modules", SAN_MAXCTX, SAN_MAXMOD);
		S.refused_launches++;
		goto out;
	}
	if (m->state == 0)
		m->state = patch(cx, m, l->functionName) == 0 ? 1 : -1;
	if (m->state != 1) {
		S.refused_launches++;
		goto out;
	}
	if (cx->written < S.nsel) {
		SanitizerResult r = S.MemcpyHtoD((uint32_t *)cx->table + cx->written, cx->host + cx->written,
						 (S.nsel - cx->written) * sizeof(uint32_t), l->hStream);
		if (r) {
			fail("writing the kernel index table: %s", san_str(r));
			S.refused_launches++;
			goto out;
		}
		cx->written = S.nsel;
	}
	give_index(e, cx, l->hStream);
	S.SetCallbackData(l->function, (uint32_t *)cx->table + e->slot);
	S.launches++;
	S.threads += (uint64_t)l->gridDim_x * l->gridDim_y * l->gridDim_z * l->blockDim_x * l->blockDim_y * l->blockDim_z;
out:
	pthread_mutex_unlock(&S.mu);
}

static void *sym(const char *name, int *missing)
{
	void *p = dlsym(S.lib, name);
	if (!p)
		*missing = 1;
	return p;
}

/* san_setup subscribes, idle, when GPUBPF_SANITIZER asks for it: it must be
 * before the program's first CUDA context (the constructor of a preloaded
 * agent). */
void san_setup(void)
{
	const char *e = getenv("GPUBPF_SANITIZER");
	if (!e || !*e) {
		snprintf(S.why, sizeof(S.why),
			 "the program was not started with GPUBPF_SANITIZER=on (the sanitizer must be set up before its "
			 "first CUDA call; it then holds the slot CUPTI would use)");
		return;
	}
	if (!strcmp(e, "off") || !strcmp(e, "0")) {
		snprintf(S.why, sizeof(S.why), "GPUBPF_SANITIZER=%s in the program's environment", e);
		return;
	}
	if (late_mode()) {
		snprintf(S.why, sizeof(S.why),
			 "the agent was loaded into the running program: the sanitizer must be set up before its first "
			 "CUDA call; restart it with the agent preloaded and GPUBPF_SANITIZER=on");
		return;
	}
	static const char *const dirs[] = {"CUDA_HOME", "CUDA_PATH", NULL};
	char path[PATH_MAX];
	if (strchr(e, '/')) {
		S.lib = dlopen(e, RTLD_NOW | RTLD_LOCAL);
	} else {
		for (int i = 0; !S.lib && dirs[i]; i++) {
			const char *d = getenv(dirs[i]);
			if (d && *d) {
				snprintf(path, sizeof(path), "%s/compute-sanitizer/libsanitizer-public.so", d);
				S.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
			}
		}
		if (!S.lib)
			S.lib = dlopen("/usr/local/cuda/compute-sanitizer/libsanitizer-public.so", RTLD_NOW | RTLD_LOCAL);
		if (!S.lib)
			S.lib = dlopen("libsanitizer-public.so", RTLD_NOW | RTLD_LOCAL);
	}
	if (!S.lib) {
		snprintf(S.why, sizeof(S.why),
			 "libsanitizer-public.so not found (%s): install the CUDA toolkit's compute-sanitizer or the "
			 "nvidia-cuda-sanitizer-api wheel and set GPUBPF_SANITIZER=/path/to/libsanitizer-public.so",
			 strchr(e, '/') ? e : "$CUDA_HOME/compute-sanitizer, /usr/local/cuda/compute-sanitizer, the "
					      "library path");
		return;
	}
	int missing = 0;
	S.Subscribe = sym("sanitizerSubscribe", &missing);
	S.EnableDomain = sym("sanitizerEnableDomain", &missing);
	S.AddPatches = sym("sanitizerAddPatches", &missing);
	S.PatchInstructions = sym("sanitizerPatchInstructions", &missing);
	S.PatchModule = sym("sanitizerPatchModule", &missing);
	S.UnpatchModule = sym("sanitizerUnpatchModule", &missing);
	S.SetCallbackData = sym("sanitizerSetCallbackData", &missing);
	S.Alloc = sym("sanitizerAlloc", &missing);
	S.MemcpyHtoD = sym("sanitizerMemcpyHostToDeviceAsync", &missing);
	S.ResultString = sym("sanitizerGetResultString", &missing);
	if (missing) {
		snprintf(S.why, sizeof(S.why), "libsanitizer-public.so lacks the patching API (too old a toolkit)");
		return;
	}
	SanitizerResult r = S.Subscribe(&S.sub, san_cb, NULL);
	if (r) {
		snprintf(S.why, sizeof(S.why),
			 "sanitizerSubscribe: %s (another CUDA tool, CUPTI or a debugger, holds the tools slot)",
			 san_str(r));
		return;
	}
	S.state = 1;
	DBG("sanitizer subscribed (idle)");
}

void san_atfork_child(void)
{
	pthread_mutex_init(&S.mu, NULL);
	if (S.state)
		snprintf(S.why, sizeof(S.why), "a forked child: its parent's sanitizer set-up does not carry over");
	S.state = 0;
	S.owner = NULL;
}

/* The kernel indexes given and not said yet, kept for the reply to an end
 * (the selection they name is gone by then). */
struct san_given {
	char *name;
	uint32_t index;
};

/* san_end takes the program out of every module it patched (S.mu not held)
 * and returns the indexes given since the owner's last request (*ngiven of
 * them; the caller frees them), taken as the selection ends, so that no
 * first launch falls between. */
static struct san_given *san_end(struct session *s, uint32_t *ngiven)
{
	*ngiven = 0;
	pthread_mutex_lock(&S.mu);
	if (S.owner != s || !s) {
		pthread_mutex_unlock(&S.mu);
		return NULL;
	}
	S.owner = NULL;
	struct san_given *given = S.nassigned ? calloc(S.nassigned, sizeof(*given)) : NULL;
	for (uint32_t i = 0; given && i < S.nassigned; i++) {
		struct san_sel *e = &S.sel[S.assigned[i]];
		given[i].name = e->name;
		given[i].index = e->index;
		e->name = NULL; /* the caller has it now */
	}
	*ngiven = given ? S.nassigned : 0;
	for (uint32_t i = 0; i < SAN_HASH && S.sel; i++) {
		free(S.sel[i].name);
		S.sel[i].name = NULL;
	}
	S.nsel = 0;
	S.npool = S.pool_next = S.nassigned = 0;
	int n = 0;
	CUmodule *ms = calloc(S.nmods + 1, sizeof(*ms));
	for (int i = 0; i < S.nmods; i++) {
		if (S.mods[i].state == 1 && ms)
			ms[n++] = S.mods[i].m;
		S.mods[i].state = 0;
	}
	for (int i = 0; i < S.nctx; i++) {
		S.ctx[i].patches = 0; /* a next program is added again */
		S.ctx[i].written = 0;
	}
	pthread_mutex_unlock(&S.mu);
	S.EnableDomain(0, S.sub, SANITIZER_CB_DOMAIN_LAUNCH);
	for (int i = 0; i < n; i++)
		S.UnpatchModule(ms[i]);
	free(ms);
	return given;
}

static void free_given(struct san_given *g, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		free(g[i].name);
	free(g);
}

void san_session_gone(struct session *s)
{
	uint32_t n = 0;
	if (S.state) {
		struct san_given *g = san_end(s, &n);
		free_given(g, n);
	}
}

/* op 29: select kernels for the sanitizer path, or ask how it went.
 *   request: i32 device, u64 context (the one context patched: the programs
 *            address its device's maps), u32 flags (1: only the account, 2: end), str enter callback, str exit callback,
 *            bytes patch module (empty: keep), u32 n, n x (str kernel, u32 kernel index or
 *            SAN_LATE), u32 m, m x u32 indexes for SAN_LATE kernels (the pool)
 *   reply:   i32 status, u32 ready, str why, u64 launches, u64 threads, u64 refused launches,
 *            u32 modules patched, u32 failures, str last failure, u32 kernels selected,
 *            u32 pool left, u32 k, k x (str kernel, u32 index): indexes given since the owner's
 *            last request */
int op_sanitize(struct session *s, uint32_t req, struct rbuf *r, struct wbuf *w)
{
	int dev = rb_i32(r);
	uint64_t ctxh = rb_u64(r);
	uint32_t flags = rb_u32(r);
	char *enter = rb_str(r), *exit = rb_str(r);
	size_t nc = 0;
	const uint8_t *cubin = rb_bytes(r, &nc);
	uint32_t n = rb_u32(r);
	int ret = 1;
	if (r->err || !enter || !exit || strlen(enter) >= sizeof(S.enter) || strlen(exit) >= sizeof(S.exit)) {
		ret = send_error(s, OP_SANITIZE, req, ST_BAD_REQUEST, 0, "malformed sanitize request");
		goto done;
	}
	struct san_given *given = NULL;
	uint32_t ngiven = 0;
	if (flags & 2) {
		pthread_mutex_lock(&S.mu);
		CUcontext c = S.owner == s ? S.only : NULL;
		pthread_mutex_unlock(&S.mu);
		if (S.state)
			given = san_end(s, &ngiven);
		/* Launches patched before the end finish before the reply: the
		 * tool's last read of the maps then holds every run the account
		 * counts (as reads wait for a clone's launches). */
		CUcontext saved = NULL;
		if (c && D.ready && D.cuCtxSynchronize && D.cuCtxGetCurrent(&saved) == CUDA_SUCCESS &&
		    D.cuCtxSetCurrent(c) == CUDA_SUCCESS) {
			D.cuCtxSynchronize();
			D.cuCtxSetCurrent(saved);
		}
	} else if (!(flags & 1)) {
		if (!S.state) {
			ret = send_error(s, OP_SANITIZE, req, ST_UNSUPPORTED, 0, "%s", S.why);
			goto done;
		}
		int on = 0;
		CUcontext saved = NULL, only = NULL;
		D.cuCtxGetCurrent(&saved);
		CUresult cr = use_ctx(s, dev, ctxh, &only);
		D.cuCtxSetCurrent(saved);
		if (cr != CUDA_SUCCESS) {
			ret = send_error(s, OP_SANITIZE, req, ST_CUDA, cr, "sanitize: no context of device %d", dev);
			goto done;
		}
		pthread_mutex_lock(&S.mu);
		if (S.owner == s && S.only != only) {
			pthread_mutex_unlock(&S.mu);
			ret = send_error(s, OP_SANITIZE, req, ST_UNSUPPORTED, 0,
					 "the sanitizer path patches one context per process (its programs address one "
					 "device's maps); device %d is another",
					 dev);
			goto done;
		}
		if (S.owner && S.owner != s) {
			pthread_mutex_unlock(&S.mu);
			ret = send_error(s, OP_SANITIZE, req, ST_UNSUPPORTED, 0,
					 "another gpubpf tool attached to this process holds the sanitizer path: end it first");
			goto done;
		}
		if (!S.pool)
			S.pool = calloc(SAN_MAXSEL, sizeof(*S.pool));
		if (!S.assigned)
			S.assigned = calloc(SAN_MAXSEL, sizeof(*S.assigned));
		if (!S.pool || !S.assigned || (!S.sel && !(S.sel = calloc(SAN_HASH, sizeof(*S.sel))))) {
			pthread_mutex_unlock(&S.mu);
			ret = send_error(s, OP_SANITIZE, req, ST_INTERNAL, 0, "out of memory");
			goto done;
		}
		if (nc) {
			uint8_t *c = malloc(nc);
			if (!c) {
				pthread_mutex_unlock(&S.mu);
				ret = send_error(s, OP_SANITIZE, req, ST_INTERNAL, 0, "out of memory");
				goto done;
			}
			memcpy(c, cubin, nc);
			free(S.cubin);
			S.cubin = c;
			S.ncubin = nc;
			snprintf(S.enter, sizeof(S.enter), "%s", enter);
			snprintf(S.exit, sizeof(S.exit), "%s", exit);
		}
		if (!S.cubin) {
			pthread_mutex_unlock(&S.mu);
			ret = send_error(s, OP_SANITIZE, req, ST_BAD_REQUEST, 0, "sanitize: no patch module given yet");
			goto done;
		}
		if (!S.owner) {
			S.owner = s;
			S.only = only;
			on = 1;
			/* the account is this tool's */
			S.launches = S.threads = S.refused_launches = 0;
			S.patched = S.failures = 0;
			S.last_err[0] = 0;
		}
		uint32_t full = 0;
		for (uint32_t i = 0; i < n && !r->err; i++) {
			char *name = rb_str(r);
			uint32_t idx = rb_u32(r);
			struct san_sel *e = name ? sel_slot(name) : NULL;
			if (e && !e->name && S.nsel < SAN_MAXSEL) {
				e->name = name;
				e->index = idx;
				e->slot = S.nsel++;
				for (int c = 0; c < S.nctx; c++)
					if (S.ctx[c].host)
						S.ctx[c].host[e->slot] = idx == SAN_LATE ? SAN_UNKNOWN : idx;
				name = NULL;
			} else if (e && e->name) {
				/* selected before: keep the index it has */
			} else {
				full++;
			}
			free(name);
		}
		uint32_t np = rb_u32(r);
		for (uint32_t i = 0; i < np && !r->err; i++) {
			uint32_t v = rb_u32(r);
			if (S.npool < SAN_MAXSEL)
				S.pool[S.npool++] = v;
		}
		if (full)
			fail("%u kernels past the %u the sanitizer path selects", full, SAN_MAXSEL);
		pthread_mutex_unlock(&S.mu);
		if (on) {
			SanitizerResult er = S.EnableDomain(1, S.sub, SANITIZER_CB_DOMAIN_LAUNCH);
			if (er) {
				pthread_mutex_lock(&S.mu);
				fail("sanitizerEnableDomain(launch): %s", san_str(er));
				pthread_mutex_unlock(&S.mu);
			}
		}
	}
	pthread_mutex_lock(&S.mu);
	wb_i32(w, ST_OK);
	wb_u32(w, (uint32_t)S.state);
	wb_str(w, S.state ? "" : S.why);
	wb_u64(w, S.launches);
	wb_u64(w, S.threads);
	wb_u64(w, S.refused_launches);
	wb_u32(w, S.patched);
	wb_u32(w, S.failures);
	wb_str(w, S.last_err);
	wb_u32(w, S.nsel);
	wb_u32(w, S.npool - S.pool_next);
	uint32_t na = S.owner == s ? S.nassigned : 0;
	wb_u32(w, na + ngiven);
	for (uint32_t i = 0; i < na; i++) {
		wb_str(w, S.sel[S.assigned[i]].name);
		wb_u32(w, S.sel[S.assigned[i]].index);
	}
	for (uint32_t i = 0; i < ngiven; i++) {
		wb_str(w, given[i].name);
		wb_u32(w, given[i].index);
	}
	if (S.owner == s)
		S.nassigned = 0;
	pthread_mutex_unlock(&S.mu);
	free_given(given, ngiven);
done:
	free(enter);
	free(exit);
	return ret;
}
