/* Graph launch numbers (docs/graphs.md): how launchlate times the kernel
 * nodes of an executable graph the agent swapped (execs.c) without a stream
 * operation per graph launch.
 *
 * Writing each launch's stamp to a word in device memory in stream order
 * (graphs.c) costs a cuStreamWriteValue64 per launch: 2.8 us a replay, half
 * the replay rate of a graph of short kernels (H200, 2026-11-29). Instead,
 * each kernel node swapped in gets an id of the tool's session (launch word
 * 1: LW_KIND_GRAPH_SEQ | id); its probe takes the node's run index from a
 * counter of that id in device memory and records the index. The replays
 * of one exec never overlap on the GPU (each launch is ordered behind the
 * exec's previous ones), and every launch runs each kernel node once, so
 * run k of a node swapped in at the exec's launch `base` is launch base + k.
 * The agent keeps each exec's launch stamps by launch number, a plain store
 * per launch, and hands them to the tool (op 28), which joins.
 *
 * An epoch is a run of an exec's launches with the same nodes: it begins at
 * a swap and ends (end = the launch number it stopped at) when the exec's
 * nodes change again or the exec is changed in place, destroyed, launched
 * into a capture. Runs past an epoch's end are not the launches after it:
 * the tool leaves them untimed. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "server.h"

#define GXS_RING0 256u        /* a ring's first size (stamps) */
#define GXS_RING_MAX (1u << 20) /* and its largest: 8 MiB, 3 s at 315,000 launches a second */
#define GXS_REPLY_MAX (4u << 20) /* stamps in one reply: 32 MiB of the frame's 64 */

struct gxs_ring {
	uint64_t *st; /* launch n's stamp at st[n & (cap - 1)] */
	uint32_t cap;
	uint32_t key; /* the ring's number for the tool (never reused) */
	uint64_t n;   /* launches stamped */
	uint64_t lo;  /* the oldest launch still held */
	uint64_t minc; /* no session's cursor is below this (a hint: recomputed when in the way) */
	int refs;
};

struct gxs_epoch {
	struct gxs_ring *ring;  /* NULL until a node takes an id */
	struct gxs_ring **home; /* the exec's ring pointer, while the swap is decided */
	uint64_t base, end; /* launch numbers; end GXS_OPEN while current */
	int refs;
};
#define GXS_OPEN UINT64_MAX

/* One tool's ids (id i + 1 is ids[i]) and how far it has read each ring. */
struct gxs_cursor {
	struct gxs_ring *ring;
	uint64_t cur;
};
struct gxs_sess {
	struct session *s;
	struct gxs_epoch **ids;
	uint64_t *sent_end; /* the end the tool was told, per id (0: the id not told yet) */
	uint32_t nids, capids;
	struct gxs_cursor *cur;
	uint32_t ncur, capcur;
	struct gxs_sess *next;
};

static pthread_mutex_t gxs_mu = PTHREAD_MUTEX_INITIALIZER;
static struct gxs_sess *gxs_sessions;
static uint32_t gxs_keys;

/* GPUBPF_AGENT_GRAPH_SEQ, to measure one way against another: 0 gives
 * swapped nodes stamp words (a stream write per graph launch, graphs.c);
 * "host" keeps the launch numbers and stamps but has the nodes' probes
 * take their untimed path (the agent's share of the cost alone). */
int gxs_mode(void)
{
	static int mode = -1;
	int m = __atomic_load_n(&mode, __ATOMIC_RELAXED);
	if (m < 0) {
		const char *s = getenv("GPUBPF_AGENT_GRAPH_SEQ");
		m = !s ? GXS_ON : s[0] == '0' ? GXS_OFF : !strcmp(s, "host") ? GXS_HOST : GXS_ON;
		__atomic_store_n(&mode, m, __ATOMIC_RELAXED);
	}
	return m;
}

static void ring_unref(struct gxs_ring *r)
{
	if (r && --r->refs == 0) {
		free(r->st);
		free(r);
	}
}

static void epoch_unref(struct gxs_epoch *ep)
{
	if (ep && --ep->refs == 0) {
		ring_unref(ep->ring);
		free(ep);
	}
}

struct gxs_epoch *gxs_begin(struct gxs_ring **rp)
{
	pthread_mutex_lock(&gxs_mu);
	struct gxs_epoch *ep = calloc(1, sizeof(*ep));
	if (ep) {
		ep->ring = *rp;
		ep->home = rp;
		if (ep->ring) {
			ep->ring->refs++;
			ep->base = ep->ring->n;
		}
		ep->end = GXS_OPEN;
		ep->refs = 1; /* the caller's */
	}
	pthread_mutex_unlock(&gxs_mu);
	return ep;
}

/* The exec's ring, made at its first id (gxs_mu held): an exec no tool
 * with launch words ever swapped keeps none. ep->home is the exec's, which
 * no one else touches while its swap is decided. */
static struct gxs_ring *ring_of(struct gxs_epoch *ep)
{
	if (ep->ring || !ep->home)
		return ep->ring;
	struct gxs_ring *r = calloc(1, sizeof(*r));
	if (r && !(r->st = calloc(GXS_RING0, sizeof(*r->st)))) {
		free(r);
		r = NULL;
	}
	if (!r)
		return NULL;
	r->cap = GXS_RING0;
	r->key = ++gxs_keys;
	r->refs = 2; /* the exec's and the epoch's */
	ep->base = r->n;
	ep->ring = *ep->home = r;
	return r;
}

int gxs_used(struct gxs_epoch *ep)
{
	pthread_mutex_lock(&gxs_mu);
	int used = ep && ep->refs > 1;
	pthread_mutex_unlock(&gxs_mu);
	return used;
}

void gxs_end(struct gxs_epoch *ep)
{
	if (!ep)
		return;
	pthread_mutex_lock(&gxs_mu);
	if (ep->end == GXS_OPEN)
		ep->end = ep->ring ? ep->ring->n : 0;
	ep->home = NULL;
	epoch_unref(ep);
	pthread_mutex_unlock(&gxs_mu);
}

void gxs_ring_drop(struct gxs_ring *r)
{
	pthread_mutex_lock(&gxs_mu);
	ring_unref(r);
	pthread_mutex_unlock(&gxs_mu);
}

static struct gxs_sess *sess_of(struct session *s, int make)
{
	for (struct gxs_sess *q = gxs_sessions; q; q = q->next)
		if (q->s == s)
			return q;
	if (!make)
		return NULL;
	struct gxs_sess *q = calloc(1, sizeof(*q));
	if (q) {
		q->s = s;
		q->next = gxs_sessions;
		gxs_sessions = q;
	}
	return q;
}

static int grow(void **p, uint32_t *cap, uint32_t need, size_t size)
{
	if (need <= *cap)
		return 0;
	uint32_t c = *cap ? *cap * 2 : 64;
	while (c < need)
		c *= 2;
	void *q = realloc(*p, (size_t)c * size);
	if (!q)
		return -1;
	*p = q;
	*cap = c;
	return 0;
}

uint32_t gxs_id(struct session *s, struct gxs_epoch *ep)
{
	if (!s || !ep)
		return 0;
	uint32_t id = 0;
	pthread_mutex_lock(&gxs_mu);
	struct gxs_sess *q = sess_of(s, 1);
	if (!q || q->nids + 1 >= LW_SEQ_IDS || !ring_of(ep))
		goto out; /* the tool's counters are all taken: the caller falls back */
	uint32_t capids = q->capids;
	if (grow((void **)&q->ids, &q->capids, q->nids + 1, sizeof(*q->ids)) != 0)
		goto out;
	if (q->capids != capids) {
		uint64_t *se = realloc(q->sent_end, (size_t)q->capids * sizeof(*se));
		if (!se) {
			q->capids = capids; /* ids stays larger: harmless */
			goto out;
		}
		q->sent_end = se;
	}
	uint32_t i;
	for (i = 0; i < q->ncur && q->cur[i].ring != ep->ring; i++)
		;
	if (i == q->ncur) {
		if (grow((void **)&q->cur, &q->capcur, q->ncur + 1, sizeof(*q->cur)) != 0)
			goto out;
		q->cur[i].ring = ep->ring;
		q->cur[i].cur = ep->base; /* the launches before are not this tool's */
		ep->ring->refs++;
		q->ncur++;
		if (ep->base < ep->ring->minc)
			ep->ring->minc = ep->base;
	}
	q->ids[q->nids] = ep;
	q->sent_end[q->nids] = 0;
	ep->refs++;
	id = ++q->nids;
out:
	pthread_mutex_unlock(&gxs_mu);
	return id;
}

/* The lowest cursor of any tool on r (gxs_mu held). */
static uint64_t min_cursor(struct gxs_ring *r)
{
	uint64_t m = r->n;
	for (struct gxs_sess *q = gxs_sessions; q; q = q->next)
		for (uint32_t i = 0; i < q->ncur; i++)
			if (q->cur[i].ring == r && q->cur[i].cur < m)
				m = q->cur[i].cur;
	return m;
}

void gxs_put(struct gxs_ring *r, uint64_t stamp)
{
	pthread_mutex_lock(&gxs_mu);
	if (r->n - r->lo >= r->cap) {
		/* full: grow while a tool has not read what would go */
		if (r->minc <= r->lo && r->cap < GXS_RING_MAX)
			r->minc = min_cursor(r);
		if (r->minc <= r->lo && r->cap < GXS_RING_MAX) {
			uint64_t *st = calloc((size_t)r->cap * 2, sizeof(*st));
			if (st) {
				for (uint64_t k = r->lo; k < r->n; k++)
					st[k & (r->cap * 2 - 1)] = r->st[k & (r->cap - 1)];
				free(r->st);
				r->st = st;
				r->cap *= 2;
			}
		}
		if (r->n - r->lo >= r->cap) {
			r->lo = r->n - r->cap + 1; /* lost to a slow reader: it is told */
			if (r->minc < r->lo)
				r->minc = r->lo;
		}
	}
	r->st[r->n & (r->cap - 1)] = stamp;
	r->n++;
	pthread_mutex_unlock(&gxs_mu);
}

void gxs_unput(struct gxs_ring *r)
{
	pthread_mutex_lock(&gxs_mu);
	if (r->n > r->lo)
		r->n--;
	pthread_mutex_unlock(&gxs_mu);
}

void gxs_session_end(struct session *s)
{
	pthread_mutex_lock(&gxs_mu);
	for (struct gxs_sess **pp = &gxs_sessions; *pp; pp = &(*pp)->next) {
		struct gxs_sess *q = *pp;
		if (q->s != s)
			continue;
		*pp = q->next;
		for (uint32_t i = 0; i < q->nids; i++)
			epoch_unref(q->ids[i]);
		for (uint32_t i = 0; i < q->ncur; i++) {
			q->cur[i].ring->minc = 0; /* recomputed when in the way */
			ring_unref(q->cur[i].ring);
		}
		free(q->ids);
		free(q->sent_end);
		free(q->cur);
		free(q);
		break;
	}
	pthread_mutex_unlock(&gxs_mu);
}

/* The reply: the ids whose epoch the tool has not been told (or whose end
 * it was told before it came), then per ring the stamps the tool has not
 * read: u32 count; per id u32 id, u32 ring, u64 base, u64 end; u32 count;
 * per ring u32 ring, u64 first launch, u64 launches lost before it (the
 * ring overwrote them unread), u32 count, count x u64 stamps. */
int op_graph_stamps(struct session *s, struct wbuf *w)
{
	pthread_mutex_lock(&gxs_mu);
	struct gxs_sess *q = sess_of(s, 0);
	wb_i32(w, ST_OK);
	uint32_t nid = 0;
	if (q)
		for (uint32_t i = 0; i < q->nids; i++)
			nid += q->sent_end[i] != q->ids[i]->end;
	wb_u32(w, nid);
	if (q)
		for (uint32_t i = 0; i < q->nids; i++) {
			struct gxs_epoch *ep = q->ids[i];
			if (q->sent_end[i] == ep->end)
				continue;
			q->sent_end[i] = ep->end;
			wb_u32(w, i + 1);
			wb_u32(w, ep->ring->key);
			wb_u64(w, ep->base);
			wb_u64(w, ep->end);
		}
	/* at most GXS_REPLY_MAX stamps a reply (the frame's limit): the rest
	 * come with the next */
	uint32_t nr = 0;
	uint64_t budget = GXS_REPLY_MAX;
	if (q)
		for (uint32_t i = 0; i < q->ncur && budget; i++) {
			struct gxs_ring *r = q->cur[i].ring;
			uint64_t from = q->cur[i].cur > r->lo ? q->cur[i].cur : r->lo;
			if (q->cur[i].cur < r->n) {
				nr++;
				budget -= r->n - from < budget ? r->n - from : budget;
			}
		}
	wb_u32(w, nr);
	budget = GXS_REPLY_MAX;
	for (uint32_t i = 0; q && i < q->ncur && nr; i++) {
		struct gxs_ring *r = q->cur[i].ring;
		uint64_t from = q->cur[i].cur;
		if (from >= r->n)
			continue;
		nr--;
		uint64_t lost = 0;
		if (from < r->lo) {
			lost = r->lo - from;
			from = r->lo;
		}
		uint64_t k = r->n - from < budget ? r->n - from : budget;
		budget -= k;
		wb_u32(w, r->key);
		wb_u64(w, from);
		wb_u64(w, lost);
		wb_u32(w, (uint32_t)k);
		/* at most two runs of the ring (little-endian host, as wb_u64) */
		uint64_t a = from & (r->cap - 1);
		uint64_t first = k < r->cap - a ? k : r->cap - a;
		wb_raw(w, &r->st[a], first * sizeof(*r->st));
		wb_raw(w, r->st, (k - first) * sizeof(*r->st));
		q->cur[i].cur = from + k;
		r->minc = 0; /* recomputed when in the way */
	}
	pthread_mutex_unlock(&gxs_mu);
	return 0;
}

void gxs_reset(void)
{
	/* fork child: the parent's execs and tools are not the child's */
	pthread_mutex_init(&gxs_mu, NULL);
	gxs_sessions = NULL;
}
