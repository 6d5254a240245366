/* Active probes: which launched handle (in which context) runs which
 * instrumented function, and the bookkeeping that lets a clone be unloaded
 * only once its launches have finished. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"

int g_active;
pthread_rwlock_t g_rw = PTHREAD_RWLOCK_INITIALIZER;
struct activation *g_acts;

struct slot {
	void *h;
	CUcontext ctx;
	struct activation *a;
};
static struct slot *g_tab;
static size_t g_tabcap;

static void tab_put(struct slot *t, size_t cap, void *h, struct activation *a)
{
	size_t m = cap - 1, i = ptr_hash(h) & m;
	while (t[i].h) {
		if (t[i].h == h && t[i].ctx == a->ctx)
			return; /* first activation wins */
		i = (i + 1) & m;
	}
	t[i].h = h;
	t[i].ctx = a->ctx;
	t[i].a = a;
}

static uint32_t g_probe_gen = 1;

uint32_t probe_gen(void) { return __atomic_load_n(&g_probe_gen, __ATOMIC_ACQUIRE); }

/* Rebuilds the lookup table from g_acts: the named handle, plus the
 * CUkernel <-> CUfunction aliases the inventory knows in that context.
 * Executable graphs decide their nodes again at their next launch. */
void probe_rebuild(void)
{
	size_t n = 0;
	uint32_t gen = __atomic_load_n(&g_probe_gen, __ATOMIC_RELAXED) + 1;
	__atomic_store_n(&g_probe_gen, gen ? gen : 1, __ATOMIC_RELEASE);
	for (struct activation *a = g_acts; a; a = a->next)
		if (!a->disabled)
			n++;
	probe_lw_refresh();
	if (n == 0) {
		__atomic_and_fetch(&g_active, ~ACTIVE_PROBES, __ATOMIC_RELEASE);
		free(g_tab);
		g_tab = NULL;
		g_tabcap = 0;
		return;
	}
	/* count aliases */
	size_t want = n;
	for (size_t i = 0; i < g_nkerns; i++)
		if (g_kerns[i].parent)
			want++;
	size_t cap = 64;
	while (cap < want * 2)
		cap <<= 1;
	struct slot *t = calloc(cap, sizeof(*t));
	if (!t) {
		/* cannot route safely: switch everything off */
		__atomic_and_fetch(&g_active, ~ACTIVE_PROBES, __ATOMIC_RELEASE);
		free(g_tab);
		g_tab = NULL;
		g_tabcap = 0;
		return;
	}
	for (struct activation *a = g_acts; a; a = a->next) {
		if (a->disabled)
			continue;
		tab_put(t, cap, a->handle, a);
		struct kernel *k = inv_kernel_by_handle(a->handle);
		void *kern = NULL;
		if (k && k->kind == KK_KERNEL)
			kern = k->handle;
		else if (k && k->parent)
			kern = k->parent;
		if (kern) {
			tab_put(t, cap, kern, a);
			for (size_t i = 0; i < g_nkerns; i++)
				if (g_kerns[i].parent == kern && (g_kerns[i].ctx == a->ctx || !g_kerns[i].ctx))
					tab_put(t, cap, g_kerns[i].handle, a);
		}
	}
	free(g_tab);
	g_tab = t;
	g_tabcap = cap;
	__atomic_or_fetch(&g_active, ACTIVE_PROBES, __ATOMIC_RELEASE);
}

CUfunction probe_lookup(void *f, struct activation **out)
{
	if (!g_tab || !f)
		return NULL;
	CUcontext cur = NULL;
	if (D.cuCtxGetCurrent(&cur) != CUDA_SUCCESS)
		return NULL;
	size_t m = g_tabcap - 1, i = ptr_hash(f) & m;
	while (g_tab[i].h) {
		if (g_tab[i].h == f && g_tab[i].ctx == cur) {
			struct activation *a = g_tab[i].a;
			if (__atomic_load_n(&a->disabled, __ATOMIC_RELAXED))
				return NULL;
			*out = a;
			return a->fn;
		}
		i = (i + 1) & m;
	}
	return NULL;
}

int probe_is_clone(const void *f)
{
	int found = 0;
	pthread_rwlock_rdlock(&g_rw);
	for (struct activation *a = g_acts; a && f && !found; a = a->next)
		found = !a->disabled && (const void *)a->fn == f;
	pthread_rwlock_unlock(&g_rw);
	return found;
}

void probe_pin(struct activation *a)
{
	__atomic_store_n(&a->clone->pinned, 1, __ATOMIC_RELAXED);
}

/* ---------------- launch events ---------------- */

/* Recording an event after every instrumented launch costs a driver call
 * (0.3-0.5 us of a ~3.9 us launch on an H100). A launch marks its entry
 * dirty instead, and the event is recorded when the agent needs ordering
 * after the launches (a read, an unload, a free). That record comes later
 * and from another thread, which is safe only while no stream capture is
 * active anywhere in the process: on the legacy stream it would make the
 * capture fail (cudaErrorStreamCaptureImplicit). So the capture wrappers
 * count captures (g_captures), and before one begins every dirty entry is
 * recorded; while any capture is active launches record at once, as they
 * all did before.
 *
 * A launch decides under its clone's evmu, which a capture's start takes
 * for each clone after counting the capture: a launch either marked its
 * entry before that (and the start records it) or sees the count. No
 * launch lock is taken for writing on the application's thread (readers
 * come first on g_rw: a thread launching without pause could hold it off
 * indefinitely). */
static int g_defer;         /* launches may defer their records (atomic) */
static int g_captures;      /* captures begun and not ended (atomic) */

int probe_captures_active(void) { return __atomic_load_n(&g_captures, __ATOMIC_ACQUIRE) != 0; }
static int g_blocking;      /* the application has made a blocking stream (atomic) */
static struct clone *g_clones; /* g_capmu */
/* Held by whoever records another thread's dirty entries, and while a
 * capture's start counts it and records them: a flush never records after
 * a capture began. */
static pthread_mutex_t g_capmu = PTHREAD_MUTEX_INITIALIZER;

static pthread_once_t g_defer_once = PTHREAD_ONCE_INIT;

static void defer_setup(void)
{
	const char *e = getenv("GPUBPF_AGENT_DEFER_EVENTS");
	const char *why = NULL;
	if (e && !strcmp(e, "0"))
		why = "GPUBPF_AGENT_DEFER_EVENTS=0";
	else if (!D.cuEventRecord || !D.cuEventCreate || !D.cuStreamIsCapturing)
		why = "the driver lacks event or capture entry points";
	else if (!capture_wrapped())
		why = "stream captures may begin unseen (loaded late, or no capture entry points)";
	__atomic_store_n(&g_defer, !why, __ATOMIC_RELEASE);
	if (why) {
		DBG("launch events: recorded at each instrumented launch (%s)", why);
	} else {
		DBG("launch events: deferred until a read, unload or free needs them");
	}
}

void probe_defer_setup(void) { pthread_once(&g_defer_once, defer_setup); }

/* Read before written: every launch on the per-thread default stream calls
 * it, and a store each time would bounce the line between launching threads. */
void probe_blocking_stream(void)
{
	if (!__atomic_load_n(&g_blocking, __ATOMIC_RELAXED))
		__atomic_store_n(&g_blocking, 1, __ATOMIC_RELEASE);
}

void probe_clone_add(struct clone *c)
{
	pthread_mutex_lock(&g_capmu);
	c->all_next = g_clones;
	g_clones = c;
	pthread_mutex_unlock(&g_capmu);
}

void probe_clone_forget(struct clone *c)
{
	pthread_mutex_lock(&g_capmu);
	for (struct clone **pp = &g_clones; *pp; pp = &(*pp)->all_next)
		if (*pp == c) {
			*pp = c->all_next;
			break;
		}
	pthread_mutex_unlock(&g_capmu);
}

/* The context current in the calling thread while dirty entries are
 * recorded (the legacy stream is the current context's), and the one to
 * put back afterwards. */
struct ctxsw {
	int got;
	CUcontext saved, cur;
};

static int ctx_use(struct ctxsw *w, CUcontext c)
{
	if (!w->got) {
		if (D.cuCtxGetCurrent(&w->saved) != CUDA_SUCCESS)
			return -1;
		w->cur = w->saved;
		w->got = 1;
	}
	if (w->cur == c)
		return 0;
	if (D.cuCtxSetCurrent(c) != CUDA_SUCCESS)
		return -1;
	w->cur = c;
	return 0;
}

static void ctx_back(struct ctxsw *w)
{
	if (w->got && w->cur != w->saved)
		D.cuCtxSetCurrent(w->saved);
}

/* Records entry i if it is dirty (evmu held). A record that fails leaves
 * the clone's unload to synchronise its context. */
static void ev_flush(struct clone *c, int i, struct ctxsw *w)
{
	if (!__atomic_load_n(&c->ev[i].dirty, __ATOMIC_RELAXED))
		return;
	__atomic_store_n(&c->ev[i].dirty, 0, __ATOMIC_RELAXED);
	CUresult r = ctx_use(w, c->ctx) == 0 ? D.cuEventRecord(c->ev[i].e, c->ev[i].s) : CUDA_ERROR_INVALID_VALUE;
	if (r != CUDA_SUCCESS) {
		c->overflow = 1;
		DBG("clone %llu: deferred event record on stream %p failed (CUresult %d): its unload synchronises "
		    "the context",
		    (unsigned long long)c->id, (void *)c->ev[i].s, (int)r);
	}
}

/* g_capmu held */
static void clone_flush(struct clone *c, struct ctxsw *w)
{
	pthread_mutex_lock(&c->evmu);
	for (int i = 0; i < c->nev; i++)
		ev_flush(c, i, w);
	pthread_mutex_unlock(&c->evmu);
}

void probe_flush(struct clone *c)
{
	struct ctxsw w = {0};
	pthread_mutex_lock(&g_capmu);
	/* nothing is dirty while a capture is active (its start recorded
	 * everything, and launches since recorded at once); never record then */
	if (!__atomic_load_n(&g_captures, __ATOMIC_ACQUIRE))
		clone_flush(c, &w);
	pthread_mutex_unlock(&g_capmu);
	ctx_back(&w);
}

/* Nothing is dirty while a capture is active: the first one's start
 * records what is (from the application's thread, no capture active yet). */
void probe_capture_begin(void)
{
	struct ctxsw w = {0};
	pthread_mutex_lock(&g_capmu);
	if (__atomic_fetch_add(&g_captures, 1, __ATOMIC_SEQ_CST) == 0)
		for (struct clone *c = g_clones; c; c = c->all_next)
			clone_flush(c, &w);
	ctx_back(&w);
	pthread_mutex_unlock(&g_capmu);
}

void probe_capture_end(void)
{
	int n = __atomic_load_n(&g_captures, __ATOMIC_ACQUIRE);
	while (n > 0 && !__atomic_compare_exchange_n(&g_captures, &n, n - 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		;
}

/* The application destroys stream s: its pending launches get their record
 * while the handle is still valid, and no later flush names it (the handle
 * may be dead, or another stream's). The event stays: it still orders
 * them. A launch on s the application made before the destroy marked its
 * entry before it returned; one racing with the destroy is the
 * application's own use of a dead stream. */
void probe_stream_gone(CUstream s)
{
	if (!s || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD || s == EV_GONE)
		return;
	struct ctxsw w = {0};
	pthread_mutex_lock(&g_capmu);
	for (struct clone *c = g_clones; c; c = c->all_next) {
		pthread_mutex_lock(&c->evmu);
		for (int i = 0; i < c->nev; i++)
			if (c->ev[i].s == s) {
				ev_flush(c, i, &w);
				c->ev[i].s = EV_GONE;
			}
		pthread_mutex_unlock(&c->evmu);
	}
	ctx_back(&w);
	pthread_mutex_unlock(&g_capmu);
}

/* The agent sees every capture begin (g_defer) and none is active: no
 * stream is capturing, and launch events may be recorded later. */
static inline int no_capture(void)
{
	return __atomic_load_n(&g_defer, __ATOMIC_RELAXED) && !__atomic_load_n(&g_captures, __ATOMIC_SEQ_CST);
}

/* Stream s's capture status, -1 where the driver cannot tell. With
 * no_capture() the driver is not asked (28-44 ns a launch on an H100). A
 * capture that another thread begins on s while the launch is under way
 * races with the launch in the application itself. */
static int capture_status(CUstream s)
{
	if (no_capture())
		return CU_STREAM_CAPTURE_STATUS_NONE;
	int st = CU_STREAM_CAPTURE_STATUS_NONE;
	if (!(D.cuStreamIsCapturing && D.cuStreamIsCapturing(s, &st) == CUDA_SUCCESS))
		return -1;
	return st;
}

/* The entry of stream s (evmu held), made on first use; -1 when there is
 * none to be had. A full table takes the slot of a destroyed stream whose
 * launches have finished, asked (cuEventQuery) only when quiet: every
 * capture is seen, and none is active or can begin before evmu is free. */
static int ev_entry(struct clone *c, CUstream s, int quiet)
{
	int i;
	for (i = 0; i < c->nev; i++)
		if (c->ev[i].s == s)
			return i;
	if (c->nev == (int)(sizeof(c->ev) / sizeof(c->ev[0]))) {
		if (!D.cuEventQuery || !quiet)
			return -1;
		for (i = 0; i < c->nev; i++)
			if (c->ev[i].s == EV_GONE && !__atomic_load_n(&c->ev[i].dirty, __ATOMIC_RELAXED) &&
			    D.cuEventQuery(c->ev[i].e) == CUDA_SUCCESS) {
				c->ev[i].s = s;
				return i;
			}
		return -1;
	}
	if (D.cuEventCreate(&c->ev[i].e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
		return -1;
	c->ev[i].s = s;
	c->ev[i].dirty = 0;
	c->nev++;
	return i;
}

/* Called with g_rw read-held after the instrumented launch. */
void probe_after_launch(struct activation *a, CUstream s, CUresult r, int cap)
{
	if (r != CUDA_SUCCESS) {
		__atomic_add_fetch(&a->failures, 1, __ATOMIC_RELAXED);
		a->last_err = r;
		/* an instrumented copy that cannot launch is switched off */
		__atomic_store_n(&a->disabled, 1, __ATOMIC_RELAXED);
		server_notify_failure(a, r);
		return;
	}
	__atomic_add_fetch(&a->launches, 1, __ATOMIC_RELAXED);
	struct clone *c = a->clone;
	int capturing = cap < 0 ? capture_status(s) : cap;
	if (capturing < 0)
		capturing = CU_STREAM_CAPTURE_STATUS_NONE;
	if (capturing != CU_STREAM_CAPTURE_STATUS_NONE) {
		/* captured into a graph: it may run at any later time */
		probe_pin(a);
		return;
	}
	if (!D.cuEventRecord || !D.cuEventCreate) {
		c->overflow = 1;
		return;
	}
	if (s == CU_STREAM_PER_THREAD)
		probe_blocking_stream();
	pthread_mutex_lock(&c->evmu);
	/* Launches record at once while a capture is active; on the
	 * per-thread default stream (only this thread can name it); and on
	 * the legacy stream once the application has a blocking stream, where
	 * a record made later would be a new barrier between its blocking
	 * streams (its work queued on them since would wait for each other),
	 * while right behind the application's own legacy launch it adds
	 * none. Without one (a program of the legacy stream alone, or of
	 * non-blocking streams), a legacy record made later orders nothing
	 * but the legacy stream's own work: it waits like the others (a
	 * record costs a launch 0.5 us on an H100). */
	int quiet = no_capture();
	int legacy = s == NULL || s == CU_STREAM_LEGACY;
	int defer = quiet && s != CU_STREAM_PER_THREAD && (!legacy || !__atomic_load_n(&g_blocking, __ATOMIC_RELAXED));
	int i = ev_entry(c, s, quiet);
	if (i < 0)
		c->overflow = 1;
	else if (defer)
		__atomic_store_n(&c->ev[i].dirty, 1, __ATOMIC_RELAXED);
	else if (D.cuEventRecord(c->ev[i].e, s) != CUDA_SUCCESS)
		c->overflow = 1;
	else
		__atomic_store_n(&c->ev[i].dirty, 0, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&c->evmu);
}

/* ---------------- launch words (launchlate) ---------------- */

/* The Linux thread id: what the uprobe keys its slot by. One syscall per
 * thread; reset in a fork child, whose thread has another id. */
static __thread uint32_t t_tid;

void probe_tid_reset(void) { t_tid = 0; }

uint32_t probe_tid(void)
{
	uint32_t t = t_tid;
	if (UNLIKELY(!t))
		t_tid = t = (uint32_t)syscall(SYS_gettid);
	return t;
}

/* The stamp slots of the first active probe that has them (any will do:
 * every launch-word session's uprobes stamp the same CPU clock). */
static const uint64_t *g_lw_slots;
static uint32_t g_lw_nslots;

void probe_lw_refresh(void)
{
	g_lw_slots = NULL;
	g_lw_nslots = 0;
	for (struct activation *a = g_acts; a; a = a->next)
		if (!a->disabled && a->hidden && a->slots && a->nslots) {
			g_lw_slots = a->slots;
			g_lw_nslots = a->nslots;
			return;
		}
}

int probe_lw_on(void) { return g_lw_slots != NULL; }

uint64_t probe_graph_stamp(void)
{
	uint64_t now = mono_ns();
	const uint64_t *base = g_lw_slots;
	if (!base)
		return now;
	uint32_t tid = probe_tid();
	const uint64_t *sl = base + 2 * ((tid * 4) & (g_lw_nslots - 1));
	uint64_t t = __atomic_load_n(&sl[0], __ATOMIC_RELAXED);
	uint64_t tag = __atomic_load_n(&sl[1], __ATOMIC_RELAXED);
	/* A driver-API graph launch reaches this wrapper before its uprobe
	 * (in libcuda) fires: a slot without the pending mark holds an
	 * earlier call's stamp, and this call's time is now. */
	if (t && (uint32_t)(tag >> 32) == tid && (tag & LW_KIND_PENDING) && t <= now && now - t <= LW_MAX_AGE_NS) {
		__atomic_store_n((uint64_t *)&sl[1], tag & ~(uint64_t)LW_KIND_PENDING, __ATOMIC_RELAXED);
		return t;
	}
	return now;
}

int probe_launch_words(const struct activation *a, CUstream s, CUstream evs, uint64_t w[2])
{
	int capturing = capture_status(evs); /* -1, unknown: probe_after_launch asks again */
	if (capturing > 0) {
		/* captured into a graph: it runs at replays, whose launches
		 * this stamp and this stream are not; it reads the stamp the
		 * graph's launches write to the graph's word */
		CUgraph g = NULL;
		CUdeviceptr gw = 0;
		int st = 0;
		uint64_t id = 0;
		if (capturing == CU_STREAM_CAPTURE_STATUS_ACTIVE && D.cuStreamGetCaptureInfo &&
		    D.cuStreamGetCaptureInfo(evs, &st, &id, &g, NULL, NULL) == CUDA_SUCCESS &&
		    st == CU_STREAM_CAPTURE_STATUS_ACTIVE)
			gw = gw_graph(g, a->ctx);
		w[0] = 0;
		w[1] = gw ? LW_KIND_GRAPH_WORD << 56 | (gw & LW_STREAM_MASK) : LW_KIND_GRAPH << 56;
		return capturing;
	}
	uint64_t stamp = 0, kind = 0;
	uint64_t *base = a->slots;
	if (base) {
		uint32_t tid = probe_tid();
		/* tid * 4: threads launching side by side (consecutive tids)
		 * do not share a cache line with each other's uprobes */
		uint64_t *sl = base + 2 * ((tid * 4) & (a->nslots - 1));
		uint64_t t = __atomic_load_n(&sl[0], __ATOMIC_RELAXED);
		uint64_t tag = __atomic_load_n(&sl[1], __ATOMIC_RELAXED);
		uint64_t now = mono_ns();
		if (t && (uint32_t)(tag >> 32) == tid && (tag & LW_KIND_PENDING) && t <= now && now - t <= LW_MAX_AGE_NS) {
			/* the runtime call this driver launch is part of, stamped
			 * by its uprobe: its time is the user's launch time. The
			 * mark is taken so that a later direct driver launch of
			 * this thread does not reuse it. */
			stamp = t;
			kind = tag & 0x7f;
			__atomic_store_n(&sl[1], tag & ~(uint64_t)LW_KIND_PENDING, __ATOMIC_RELAXED);
		} else {
			/* a driver-API launch reaches this wrapper before its
			 * uprobe (in libcuda) fires: the slot holds an earlier
			 * call's stamp, and this call's time is now */
			stamp = now;
			kind = LW_KIND_DRIVER;
		}
	}
	w[0] = stamp;
	w[1] = ((uint64_t)(uintptr_t)s & LW_STREAM_MASK) | kind << 56;
	return capturing;
}

void probes_reset(void)
{
	pthread_mutex_init(&g_capmu, NULL);
	g_clones = NULL;
	g_captures = 0;
	g_acts = NULL;
	g_tab = NULL;
	g_tabcap = 0;
	g_active = 0;
	probe_lw_refresh();
}
