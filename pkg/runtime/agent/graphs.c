/* Graph stamp words: how a kernel of a CUDA graph learns when the graph
 * launch that runs it was called. A kernel node's parameters are fixed when
 * the node is made, long before any launch, so the node gets the address of
 * its graph's word instead of a stamp; the cuGraphLaunch wrapper writes the
 * launch's stamp to the word on the launch's stream right before the graph
 * (cuStreamWriteValue64) and 0 right after it. Stream order gives queued
 * replays each their own stamp, and a copy of the graph's nodes launched by
 * another path (a child graph, a clone) reads 0: untimed, never wrong.
 *
 * Words come from small slabs of device memory, zeroed when allocated,
 * one slab at a time per context, and are never freed: a graph whose nodes
 * hold the address may be launched at any time, as its pinned clones may. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"

#define GW_SLAB 4096u	    /* bytes per slab: 512 words */
#define GW_MAX (1u << 16)   /* graphs (and execs) remembered */
#define GW_CTXS 16	    /* contexts with a slab in use */
#define CU_POINTER_ATTRIBUTE_CONTEXT 1
#define CU_STREAM_CAPTURE_MODE_RELAXED 2

struct gw_ent {
	void *key; /* CUgraph or CUgraphExec */
	CUdeviceptr w;
	CUcontext ctx;
	int failed; /* no word could be made: not tried again */
};
struct gw_tab {
	struct gw_ent *e;
	size_t cap, n;
};

static pthread_mutex_t g_gw_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_gw_off = -1; /* GPUBPF_AGENT_GRAPH_WORDS=0: graph kernels keep "no stamp" */
static struct gw_tab g_graphs, g_execs;
static int g_gw_any;
static struct {
	CUcontext ctx;
	CUdeviceptr base;
	uint32_t used;
} g_slabs[GW_CTXS];

static struct gw_ent *tab_find(struct gw_tab *t, void *key)
{
	if (!t->cap || !key)
		return NULL;
	size_t m = t->cap - 1, i = ptr_hash(key) & m;
	while (t->e[i].key) {
		if (t->e[i].key == key)
			return &t->e[i];
		i = (i + 1) & m;
	}
	return NULL;
}

/* Adds key (not present); NULL when the table is full or out of memory. */
static struct gw_ent *tab_add(struct gw_tab *t, void *key)
{
	if (!key)
		return NULL;
	if ((t->n + 1) * 2 > t->cap) {
		if (t->n >= GW_MAX)
			return NULL;
		size_t cap = t->cap ? t->cap * 2 : 64;
		struct gw_ent *e = calloc(cap, sizeof(*e));
		if (!e)
			return NULL;
		for (size_t j = 0; j < t->cap; j++)
			if (t->e[j].key) {
				size_t i = ptr_hash(t->e[j].key) & (cap - 1);
				while (e[i].key)
					i = (i + 1) & (cap - 1);
				e[i] = t->e[j];
			}
		free(t->e);
		t->e = e;
		t->cap = cap;
	}
	size_t m = t->cap - 1, i = ptr_hash(key) & m;
	while (t->e[i].key)
		i = (i + 1) & m;
	t->e[i].key = key;
	t->n++;
	return &t->e[i];
}

/* Whether w is still memory of ctx (a context destroyed and another one
 * created at the same address would leave a dangling word). */
static int word_valid(CUdeviceptr w, CUcontext ctx)
{
	if (!D.cuPointerGetAttribute)
		return 1;
	CUcontext c = NULL;
	return D.cuPointerGetAttribute(&c, CU_POINTER_ATTRIBUTE_CONTEXT, w) == CUDA_SUCCESS && c == ctx;
}

/* A fresh zeroed word in ctx, the current context (g_gw_mu held); 0 when
 * it cannot have one. The application may be capturing a graph in global
 * mode on this thread: our calls run in relaxed mode, and the zeroing runs
 * on a non-blocking stream of our own, so its capture is left intact. */
static CUdeviceptr word_new(CUcontext ctx)
{
	int free_i = -1;
	for (int i = 0; i < GW_CTXS; i++) {
		if (g_slabs[i].ctx == ctx && g_slabs[i].base) {
			if (g_slabs[i].used < GW_SLAB / 8 && word_valid(g_slabs[i].base, ctx))
				return g_slabs[i].base + 8 * (CUdeviceptr)g_slabs[i].used++;
			free_i = i; /* full or gone: a new slab in its place (the old one stays) */
			break;
		}
		if (!g_slabs[i].base && free_i < 0)
			free_i = i;
	}
	if (free_i < 0 || !D.cuMemAlloc || !D.cuStreamCreate || !D.cuMemsetD8Async || !D.cuStreamSynchronize ||
	    !D.cuStreamDestroy)
		return 0;
	int mode = CU_STREAM_CAPTURE_MODE_RELAXED;
	if (D.cuThreadExchangeStreamCaptureMode)
		D.cuThreadExchangeStreamCaptureMode(&mode);
	CUdeviceptr p = 0;
	CUstream st = NULL;
	int ok = D.cuMemAlloc(&p, GW_SLAB) == CUDA_SUCCESS && p;
	ok = ok && D.cuStreamCreate(&st, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS;
	ok = ok && D.cuMemsetD8Async(p, 0, GW_SLAB, st) == CUDA_SUCCESS && D.cuStreamSynchronize(st) == CUDA_SUCCESS;
	if (st)
		D.cuStreamDestroy(st);
	if (!ok && p) {
		D.cuMemFree(p);
		p = 0;
	}
	if (D.cuThreadExchangeStreamCaptureMode)
		D.cuThreadExchangeStreamCaptureMode(&mode);
	DBG("graph stamp words: slab 0x%llx in context %p", (unsigned long long)p, (void *)ctx);
	if (!p)
		return 0;
	g_slabs[free_i].ctx = ctx;
	g_slabs[free_i].base = p;
	g_slabs[free_i].used = 1;
	return p;
}

/* key's word in t, made when missing (g_gw_mu held). A word of another
 * context is not handed out: the node keeps "no stamp". */
static CUdeviceptr word_of(struct gw_tab *t, void *key, CUcontext ctx)
{
	struct gw_ent *e = tab_find(t, key);
	if (e && e->w && e->ctx == ctx && word_valid(e->w, ctx))
		return e->w;
	if (e && ((e->w && e->ctx != ctx) || (e->failed && e->ctx == ctx)))
		return 0;
	if (!e && !(e = tab_add(t, key)))
		return 0;
	e->w = word_new(ctx);
	e->ctx = ctx;
	e->failed = !e->w;
	if (e->w)
		__atomic_store_n(&g_gw_any, 1, __ATOMIC_RELEASE);
	return e->w;
}

static int gw_off(void)
{
	int off = __atomic_load_n(&g_gw_off, __ATOMIC_RELAXED);
	if (off < 0) {
		const char *e = getenv("GPUBPF_AGENT_GRAPH_WORDS");
		off = e && e[0] == '0';
		__atomic_store_n(&g_gw_off, off, __ATOMIC_RELAXED);
	}
	return off;
}

CUdeviceptr gw_graph(CUgraph g, CUcontext ctx)
{
	if (!g || !ctx || !D.cuStreamWriteValue64 || gw_off())
		return 0;
	pthread_mutex_lock(&g_gw_mu);
	CUdeviceptr w = word_of(&g_graphs, g, ctx);
	pthread_mutex_unlock(&g_gw_mu);
	return w;
}

CUdeviceptr gw_exec(CUgraphExec x, CUcontext ctx)
{
	if (!x || !ctx || !D.cuStreamWriteValue64 || gw_off())
		return 0;
	pthread_mutex_lock(&g_gw_mu);
	CUdeviceptr w = word_of(&g_execs, x, ctx);
	pthread_mutex_unlock(&g_gw_mu);
	return w;
}

CUdeviceptr gw_node(CUgraphNode n, CUcontext ctx)
{
	CUgraph g = NULL;
	if (!n || !D.cuGraphNodeGetContainingGraph || D.cuGraphNodeGetContainingGraph(n, &g) != CUDA_SUCCESS)
		return 0;
	return gw_graph(g, ctx);
}

CUdeviceptr gw_exec_word(CUgraphExec x)
{
	pthread_mutex_lock(&g_gw_mu);
	struct gw_ent *e = tab_find(&g_execs, x);
	CUdeviceptr w = e ? e->w : 0;
	pthread_mutex_unlock(&g_gw_mu);
	return w;
}

void gw_instantiated(CUgraphExec x, CUgraph g)
{
	if (!x)
		return;
	pthread_mutex_lock(&g_gw_mu);
	struct gw_ent *ge = tab_find(&g_graphs, g);
	CUdeviceptr w = ge ? ge->w : 0;
	CUcontext ctx = ge ? ge->ctx : NULL;
	if (w && !word_valid(w, ctx))
		w = 0;
	struct gw_ent *e = tab_find(&g_execs, x);
	if (!e && w)
		e = tab_add(&g_execs, x);
	if (e) {
		/* an exec handle used again: it runs this graph's nodes now */
		e->w = w;
		e->ctx = ctx;
		e->failed = 0;
	}
	pthread_mutex_unlock(&g_gw_mu);
	DBG("graph exec %p of graph %p: stamp word 0x%llx", (void *)x, (void *)g, (unsigned long long)w);
}

int gw_any(void) { return __atomic_load_n(&g_gw_any, __ATOMIC_ACQUIRE); }

void gw_reset(void)
{
	/* fork child: the parent's contexts (and their memory) are not ours */
	pthread_mutex_init(&g_gw_mu, NULL);
	free(g_graphs.e);
	free(g_execs.e);
	memset(&g_graphs, 0, sizeof(g_graphs));
	memset(&g_execs, 0, sizeof(g_execs));
	memset(g_slabs, 0, sizeof(g_slabs));
	g_gw_any = 0;
}
