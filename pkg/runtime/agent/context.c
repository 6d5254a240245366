/* Contexts tools name in requests, and the cleanup when a tool or a context
 * goes. */
#define _GNU_SOURCE
#include "server.h"

/* ---------------- contexts ---------------- */

/* Contexts the application destroyed (g_mu): a tool may still name one in
 * a request, and the driver crashes on some calls with a dead handle. */
static CUcontext g_dead[64];
unsigned g_ndead; /* g_mu; entries used: min(g_ndead, 64) */

static int ctx_dead(CUcontext c)
{
	int dead = 0;
	pthread_mutex_lock(&g_mu);
	for (unsigned i = 0; i < g_ndead && i < 64; i++)
		if (g_dead[i] == c)
			dead = 1;
	pthread_mutex_unlock(&g_mu);
	return dead;
}

void server_ctx_born(CUcontext c)
{
	if (!c || !__atomic_load_n(&g_ndead, __ATOMIC_RELAXED))
		return;
	pthread_mutex_lock(&g_mu);
	for (unsigned i = 0; i < g_ndead && i < 64; i++)
		if (g_dead[i] == c)
			g_dead[i] = NULL;
	pthread_mutex_unlock(&g_mu);
}

/* Held shared while a tool request is served, exclusively while the
 * application destroys a context: no request is ever inside a context as
 * it goes. Writers first, or a busy tool could hold a destroy off. */
pthread_rwlock_t g_ctx_rw = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;

void server_ctx_lock(void)
{
	pthread_rwlock_wrlock(&g_ctx_rw);
}

void server_ctx_unlock(void)
{
	pthread_rwlock_unlock(&g_ctx_rw);
}

/* Makes ctx current, or the primary context of dev when ctx is 0. */
CUresult use_ctx(struct session *s, int dev, uint64_t ctx, CUcontext *out)
{
	if (drv_init() != 0)
		return CUDA_ERROR_NOT_INITIALIZED;
	CUcontext c = (CUcontext)(uintptr_t)ctx;
	if (c && ctx_dead(c))
		return CUDA_ERROR_CONTEXT_IS_DESTROYED;
	if (!c) {
		if (dev < 0 || dev >= 64)
			return CUDA_ERROR_INVALID_VALUE;
		if (!s->prim[dev]) {
			CUdevice d;
			CUresult r = D.cuDeviceGet(&d, dev);
			if (r != CUDA_SUCCESS)
				return r;
			if (!D.cuDevicePrimaryCtxRetain)
				return CUDA_ERROR_NOT_SUPPORTED;
			r = D.cuDevicePrimaryCtxRetain(&s->prim[dev], d);
			if (r != CUDA_SUCCESS)
				return r;
			server_ctx_born(s->prim[dev]);
		}
		c = s->prim[dev];
	}
	CUresult r = D.cuCtxSetCurrent(c);
	if (r == CUDA_SUCCESS && out)
		*out = c;
	return r;
}

/* The session's own non-blocking stream in the current context c: memory
 * ops never touch the legacy stream, so they neither wait for the app's
 * work nor break an app's stream capture (cudaErrorStreamCaptureImplicit). */
CUstream op_stream(struct session *s, CUcontext c, CUresult *err)
{
	int i, free_i = -1;
	for (i = 0; i < 16; i++) {
		if (s->streams[i].ctx == c && s->streams[i].s)
			return s->streams[i].s;
		if (!s->streams[i].s && free_i < 0)
			free_i = i;
	}
	if (free_i < 0) {
		*err = CUDA_ERROR_NOT_SUPPORTED;
		return NULL;
	}
	CUstream st = NULL;
	*err = D.cuStreamCreate(&st, 1 /* CU_STREAM_NON_BLOCKING */);
	if (*err != CUDA_SUCCESS)
		return NULL;
	s->streams[free_i].ctx = c;
	s->streams[free_i].s = st;
	return st;
}

/* Orders work on st after every instrumented launch this session's clones
 * in context c (current) have made so far (reads and snapshots then see
 * complete kernels), without a host wait and without the legacy stream. */
void after_clone_launches(struct session *s, CUcontext c, CUstream st)
{
	if (!D.cuStreamWaitEvent)
		return;
	for (struct clone *cl = s->clones; cl; cl = cl->next) {
		if (cl->ctx != c)
			continue;
		probe_flush(cl);
		pthread_mutex_lock(&cl->evmu);
		for (int i = 0; i < cl->nev; i++)
			D.cuStreamWaitEvent(st, cl->ev[i].e, 0);
		pthread_mutex_unlock(&cl->evmu);
	}
}

/* Waits on the host until every launch this session's clones made so far
 * has finished (before memory they may use goes). */
void clones_finish(struct session *s)
{
	for (struct clone *cl = s->clones; cl; cl = cl->next) {
		probe_flush(cl);
		pthread_mutex_lock(&cl->evmu);
		for (int i = 0; i < cl->nev; i++)
			D.cuEventSynchronize(cl->ev[i].e);
		pthread_mutex_unlock(&cl->evmu);
	}
}

/* ---------------- cleanup ---------------- */

/* A clone's memory (never a pinned one's: a graph may still reach it). */
void clone_free(struct clone *c)
{
	probe_clone_forget(c);
	if (c->pinned)
		return;
	pthread_mutex_destroy(&c->evmu);
	free(c->fns);
	free(c);
}

void clone_unload(struct clone *c)
{
	if (__atomic_load_n(&c->pinned, __ATOMIC_RELAXED)) {
		DBG("clone %llu is referenced by a CUDA graph: kept loaded", (unsigned long long)c->id);
		return;
	}
	if (D.cuCtxSetCurrent(c->ctx) != CUDA_SUCCESS)
		return;
	probe_flush(c);
	pthread_mutex_lock(&c->evmu);
	for (int i = 0; i < c->nev; i++) {
		D.cuEventSynchronize(c->ev[i].e);
		D.cuEventDestroy(c->ev[i].e);
	}
	c->nev = 0;
	pthread_mutex_unlock(&c->evmu);
	if (c->overflow && D.cuCtxSynchronize)
		D.cuCtxSynchronize();
	CUresult r = D.cuModuleUnload(c->mod);
	if (r == CUDA_SUCCESS)
		san_own_module(c->mod, 0);
	DBG("clone %llu unloaded: %d", (unsigned long long)c->id, r);
	(void)r;
}

/* Takes the activations of owner s (any when NULL) on handle (any when
 * NULL) in context ctx (any when NULL) off the launch path; each goes to
 * its owner's retired list, where its counts stay. g_rw write held, g_mu
 * held. */
static int retire(struct session *s, void *handle, CUcontext ctx)
{
	int n = 0;
	struct activation **pp = &g_acts;
	while (*pp) {
		struct activation *a = *pp;
		if ((!s || a->owner == s) && (!handle || a->handle == handle) && (!ctx || a->ctx == ctx)) {
			*pp = a->next;
			a->clone_id = a->clone ? a->clone->id : 0;
			a->clone = NULL;
			a->slots = NULL;
			a->region = 0;
			a->next = a->owner->retired;
			a->owner->retired = a;
			n++;
		} else {
			pp = &a->next;
		}
	}
	if (n)
		probe_rebuild();
	return n;
}

/* Removes the session's activations matching handle (all when NULL). */
int deactivate(struct session *s, void *handle)
{
	pthread_rwlock_wrlock(&g_rw);
	pthread_mutex_lock(&g_mu);
	int n = retire(s, handle, NULL);
	pthread_mutex_unlock(&g_mu);
	pthread_rwlock_unlock(&g_rw);
	return n;
}

/* The application destroys c (or has: the caller holds g_ctx_rw, so no
 * request used it since). Every session forgets what it had there, without
 * a driver call on it: the context takes its streams, memory, modules and
 * events along, and later requests naming it get CONTEXT_IS_DESTROYED. */
void server_ctx_gone(CUcontext c)
{
	if (!c)
		return;
	DBG("the application destroys context %p: the sessions forget what they had there", (void *)c);
	pthread_rwlock_wrlock(&g_rw);
	pthread_mutex_lock(&g_mu);
	unsigned i;
	for (i = 0; i < g_ndead && i < 64; i++)
		if (!g_dead[i] || g_dead[i] == c)
			break;
	if (i == g_ndead || i >= 64)
		i = g_ndead++ % 64;
	g_dead[i] = c;
	retire(NULL, NULL, c);
	for (struct session *s = g_sessions; s; s = s->next) {
		for (struct clone **pp = &s->clones; *pp;) {
			struct clone *cl = *pp;
			if (cl->ctx != c) {
				pp = &cl->next;
				continue;
			}
			*pp = cl->next;
			clone_free(cl);
		}
		for (struct alloc **pp = &s->allocs; *pp;) {
			struct alloc *a = *pp;
			if (a->ctx != c) {
				pp = &a->next;
				continue;
			}
			*pp = a->next;
			free(a);
		}
		for (struct region *g = s->regions; g; g = g->next)
			if (g->ctx == c) {
				g->registered = 0; /* the host memory stays the tool's */
				g->ctx = NULL;
				g->dev = 0;
			}
		for (int k = 0; k < 16; k++) {
			if (s->clocks[k].ctx == c) {
				if (s->clocks[k].mb)
					munmap(s->clocks[k].mb, s->clocks[k].mbsize);
				memset(&s->clocks[k], 0, sizeof(s->clocks[k]));
			}
			if (s->streams[k].ctx == c) {
				s->streams[k].s = NULL;
				s->streams[k].ctx = NULL;
			}
		}
		for (int d = 0; d < 64; d++)
			if (s->prim[d] == c)
				s->prim[d] = NULL;
	}
	pthread_mutex_unlock(&g_mu);
	pthread_rwlock_unlock(&g_rw);
}

int clones_pinned(struct session *s)
{
	for (struct clone *c = s->clones; c; c = c->next)
		if (__atomic_load_n(&c->pinned, __ATOMIC_RELAXED))
			return 1;
	return 0;
}

/* Everything back as it was: probes off, clones unloaded once their
 * launches finished, memory freed (kept when a graph may still use it). */
void detach_all(struct session *s)
{
	san_session_gone(s);
	deactivate(s, NULL);
	if (!D.ready) {
		s->clones = NULL;
		return;
	}
	int pinned = clones_pinned(s);
	CUcontext saved = NULL;
	D.cuCtxGetCurrent(&saved);
	while (s->clones) {
		struct clone *c = s->clones;
		s->clones = c->next;
		clone_unload(c);
		clone_free(c);
	}
	while (s->regions) {
		struct region *g = s->regions;
		s->regions = g->next;
		if (!pinned) {
			if (g->registered && D.cuCtxSetCurrent(g->ctx) == CUDA_SUCCESS)
				D.cuMemHostUnregister(g->host);
			munmap(g->host, g->size);
		}
		free(g);
	}
	while (s->allocs) {
		struct alloc *a = s->allocs;
		s->allocs = a->next;
		if (!pinned && D.cuCtxSetCurrent(a->ctx) == CUDA_SUCCESS)
			D.cuMemFree(a->p);
		free(a);
	}
	for (int i = 0; i < 16; i++)
		clk_release(&s->clocks[i]);
	for (int i = 0; i < 16; i++)
		if (s->streams[i].s) {
			if (D.cuCtxSetCurrent(s->streams[i].ctx) == CUDA_SUCCESS)
				D.cuStreamDestroy(s->streams[i].s);
			s->streams[i].s = NULL;
			s->streams[i].ctx = NULL;
		}
	for (int d = 0; d < 64; d++)
		if (s->prim[d]) {
			CUdevice dev;
			if (D.cuDevicePrimaryCtxRelease && D.cuDeviceGet(&dev, d) == CUDA_SUCCESS)
				D.cuDevicePrimaryCtxRelease(dev);
			s->prim[d] = NULL;
		}
	D.cuCtxSetCurrent(saved);
}

