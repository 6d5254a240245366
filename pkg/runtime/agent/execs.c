/* Executable graphs (docs/graphs.md): every CUgraphExec the application
 * launches while a tool is attached is counted, and one whose graph the
 * agent saw instantiated has its kernel nodes swapped for the instrumented
 * clones and back, also when it was made long before the tool came.
 *
 * An executable graph hands out none of its nodes: the driver updates one
 * only through the nodes of the graph it was instantiated from, which
 * PyTorch destroys right after the instantiation. So at every instantiation
 * (and whole-graph update) the agent keeps a clone of the graph, its
 * snapshot: an exact copy of what the exec runs. With probes active, the
 * exec's next launch clones the snapshot, points its kernel nodes at the
 * instrumented clones (the same arguments, the launch words after them) and
 * hands that graph to cuGraphExecUpdate: one call, so a replay is all
 * original or all instrumented, never mixed. When the probes go (a
 * deactivate, the tool's exit or death), the next launch updates the exec
 * from the snapshot again: the application's own nodes, arguments included.
 * Both happen on the application's thread inside its cuGraphLaunch, the one
 * place where touching its exec cannot race with its own use of it (CUDA
 * graphs are not thread-safe: the application serializes its calls on an
 * exec, and ours ride inside one of them). Replays already queued keep what
 * they were launched with; the clones they run are pinned, never unloaded.
 *
 * An exec the application changes in place through a call the snapshot
 * does not follow (memcpy, memset, event, host, child-graph node updates,
 * node enable/disable) is left alone from then on: updating it from the
 * snapshot would undo the application's change. Kernel-node updates are
 * copied into the snapshot, and a whole-graph update replaces it.
 *
 * An exec launched that was never seen instantiated (made before an
 * injected agent came) is counted by launches only: its nodes cannot be
 * had, and the tools are told (NOTE_GRAPHS) so that launchlate times its
 * kernels through CUPTI. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server.h"

#define GX_BUCKETS 1024u
#define GX_DEPTH 8 /* child graphs followed this deep */
#define GX_DETAIL 128
#define CU_GRAPH_NODE_TYPE_KERNEL 0
#define CU_GRAPH_NODE_TYPE_GRAPH 4

struct gx {
	CUgraphExec x;
	CUgraph snap; /* what x runs, as the application made it; NULL: not known */
	int state;    /* GX_ORIGINAL or GX_SWAPPED */
	int why;      /* GXW_*: why x runs the original kernels */
	int err;      /* the driver's answer (GXW_REFUSED), or the update result */
	char detail[GX_DETAIL];
	uint32_t gen;          /* probe generation x's nodes were decided at (0: never) */
	uint32_t knodes;       /* kernel nodes of the snapshot (child graphs included); GX_UNKNOWN */
	uint32_t inodes;       /* of which run instrumented code now (swapped, or captured so) */
	int busy;              /* a launch is deciding x's nodes (gx_mu released) */
	int noted;             /* the tools attached were told of this unknown exec */
	struct gxs_ring *ring; /* its launch stamps by number (gxseq.c), once a node took an id */
	struct gxs_epoch *ep;  /* the launches running the nodes swapped in now with ids */
	struct gx_counts c;
	struct gx *next;
};

static pthread_mutex_t gx_mu = PTHREAD_MUTEX_INITIALIZER;
static struct gx *gx_tab[GX_BUCKETS];
static struct gx_counts gx_gone; /* execs destroyed: their counts live on here */
static uint32_t gx_nexecs;
int g_gx_on;      /* a tool is attached, or an exec is swapped (atomic) */
static int gx_sessions, gx_swapped; /* gx_mu */
static int gx_kt_seen; /* a graph was launched while CUPTI's kernel records were on (atomic) */

int gx_launched_under_cupti(void) { return __atomic_load_n(&gx_kt_seen, __ATOMIC_RELAXED); }

static size_t gx_hash(void *p) { return ptr_hash(p) & (GX_BUCKETS - 1); }

static void gx_on_update(void)
{
	__atomic_store_n(&g_gx_on, gx_sessions > 0 || gx_swapped > 0, __ATOMIC_RELEASE);
}

static struct gx *gx_find(CUgraphExec x)
{
	for (struct gx *e = gx_tab[gx_hash(x)]; e; e = e->next)
		if (e->x == x)
			return e;
	return NULL;
}

static struct gx *gx_add(CUgraphExec x)
{
	struct gx *e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	e->x = x;
	e->knodes = GX_UNKNOWN;
	size_t h = gx_hash(x);
	e->next = gx_tab[h];
	gx_tab[h] = e;
	gx_nexecs++;
	return e;
}

static void counts_add(struct gx_counts *to, const struct gx_counts *c)
{
	to->launches += c->launches;
	to->launches_instr += c->launches_instr;
	to->launches_kt += c->launches_kt;
	to->kruns += c->kruns;
	to->kruns_instr += c->kruns_instr;
	to->captured += c->captured;
}

/* Walks g's kernel nodes, its child graphs' too. With x: points each at its
 * instrumented clone where a probe is active (node_instrument), returns how
 * many it changed, and counts in *already the nodes that run a clone as
 * they are (captured while a probe was active). Without: returns how many
 * kernel nodes there are. */
static uint32_t walk_kernels(CUgraph g, CUgraphExec x, struct gxs_epoch *ep, int depth, uint32_t *already)
{
	size_t n = 0;
	if (depth > GX_DEPTH || D.cuGraphGetNodes(g, NULL, &n) != CUDA_SUCCESS || n == 0)
		return 0;
	CUgraphNode *nodes = malloc(n * sizeof(*nodes));
	if (!nodes)
		return 0;
	uint32_t k = 0;
	if (D.cuGraphGetNodes(g, nodes, &n) == CUDA_SUCCESS)
		for (size_t i = 0; i < n; i++) {
			int t = -1;
			CUgraph child = NULL;
			if (D.cuGraphNodeGetType(nodes[i], &t) != CUDA_SUCCESS)
				continue;
			if (t == CU_GRAPH_NODE_TYPE_KERNEL && !x) {
				k++;
			} else if (t == CU_GRAPH_NODE_TYPE_KERNEL) {
				int r = node_instrument(nodes[i], x, ep);
				k += r == 1;
				*already += r == 2;
			} else if (t == CU_GRAPH_NODE_TYPE_GRAPH &&
				   D.cuGraphChildGraphNodeGetGraph(nodes[i], &child) == CUDA_SUCCESS) {
				k += walk_kernels(child, x, ep, depth + 1, already);
			}
		}
	free(nodes);
	return k;
}

static int gx_usable(void)
{
	return D.ready && D.version >= 12000 && D.cuGraphClone && D.cuGraphDestroy && D.cuGraphGetNodes &&
	       D.cuGraphNodeGetType && D.cuGraphKernelNodeGetParams && D.cuGraphKernelNodeSetParams &&
	       D.cuGraphExecUpdate && D.cuGraphChildGraphNodeGetGraph;
}

static const char *update_result(int r)
{
	switch (r) {
	case 2:
		return "topology changed";
	case 3:
		return "node type changed";
	case 4:
	case 7:
		return "kernel function change refused";
	case 5:
		return "parameters changed";
	case 6:
		return "a node the update does not support (memory, conditional or device-launch nodes)";
	case 8:
		return "attributes changed";
	default:
		return "update refused";
	}
}

/* What x should run now that the probes are at generation gen: decided
 * on the application's thread with no agent lock held (e->busy keeps
 * other launches of x from deciding too). *state and *inodes come in as
 * they are and go out as they became; *why, *err and detail say why x
 * runs its original kernels. Nodes for a tool with launch words take ids
 * of epoch ep. restore: only put the original nodes back. Returns whether
 * x's nodes changed. */
static int gx_decide(CUgraphExec x, CUgraph snap, struct gxs_epoch *ep, int restore, int *state, uint32_t *inodes,
		     int *why, int *err, char *detail)
{
	/* our calls run in relaxed capture mode: another thread's global
	 * capture must neither fail them nor be broken by them */
	int mode = 2;
	if (D.cuThreadExchangeStreamCaptureMode)
		D.cuThreadExchangeStreamCaptureMode(&mode);
	CUgraph ig = NULL;
	uint32_t k = 0, already = 0;
	CUgraphExecUpdateResultInfo info = {0};
	int changed = 0;
	CUresult r = restore ? CUDA_SUCCESS : D.cuGraphClone(&ig, snap);
	if (restore) {
		*why = GXW_NONE;
	} else if (r != CUDA_SUCCESS) {
		*why = GXW_REFUSED;
		*err = r;
		snprintf(detail, GX_DETAIL, "cuGraphClone");
	} else if ((k = walk_kernels(ig, x, ep, 0, &already)) == 0) {
		*why = already ? GXW_NONE : GXW_NO_PROBE;
	} else if ((r = D.cuGraphExecUpdate(x, ig, &info)) == CUDA_SUCCESS) {
		changed = 1;
		*state = GX_SWAPPED;
		*inodes = k + already;
		*why = GXW_NONE;
	} else {
		*why = GXW_REFUSED;
		*err = r;
		snprintf(detail, GX_DETAIL, "%s", update_result(info.result));
		k = 0;
	}
	if (*state == GX_ORIGINAL)
		*inodes = already;
	if (*state == GX_SWAPPED && k == 0) {
		/* the probes went (or the new ones were refused): the
		 * application's own nodes back */
		if ((r = D.cuGraphExecUpdate(x, snap, &info)) == CUDA_SUCCESS) {
			changed = 1;
			*state = GX_ORIGINAL;
			*inodes = already;
		} else {
			/* still the instrumented nodes (pinned clones: the same
			 * results); tried again at the next generation */
			*why = GXW_RESTORE_FAILED;
			*err = r;
			snprintf(detail, GX_DETAIL, "%s", update_result(info.result));
		}
	}
	if (ig)
		D.cuGraphDestroy(ig);
	if (D.cuThreadExchangeStreamCaptureMode)
		D.cuThreadExchangeStreamCaptureMode(&mode);
	DBG("graph exec %p: %u kernel nodes instrumented (state %d, why %d, err %d %s)", (void *)x, *inodes, *state,
	    *why, *err, detail);
	return changed;
}

/* x's launches stop running the nodes of its epoch (gx_mu held). */
static void end_epoch(struct gx *e)
{
	gxs_end(e->ep);
	e->ep = NULL;
}

int gx_launch(CUgraphExec x, CUstream evs, int *capst)
{
	if (!x || drv_init() != 0)
		return 0;
	/* launched into a capture: the capture takes a copy of the exec's
	 * graph; its nodes are the capture's business (captured while traced:
	 * already instrumented) */
	if (*capst < 0)
		*capst = stream_capture_status(evs);
	int cap = *capst > CU_STREAM_CAPTURE_STATUS_NONE; /* unknown (-1): taken as not */
	uint32_t gen = probe_gen();
	int note = 0, stamped = 0;
	pthread_mutex_lock(&gx_mu);
	struct gx *e = gx_find(x);
	if (!e && (e = gx_add(x)) != NULL)
		/* preloaded, the agent saw every instantiation: it kept no copy */
		e->why = late_mode() ? GXW_BEFORE_AGENT : GXW_NO_SNAPSHOT;
	if (!e) {
		pthread_mutex_unlock(&gx_mu);
		return 0;
	}
	if (!e->snap && !e->noted && gx_sessions > 0) {
		e->noted = 1;
		note = 1;
	}
	/* Into a capture, nodes with ids would count runs that are not this
	 * exec's launches (the captured copy's): the originals go back first,
	 * and the next launch swaps again with new ids. */
	int restore = cap && e->ep && e->state == GX_SWAPPED;
	if (e->snap && !e->busy && gx_usable() &&
	    (restore || (!cap && e->gen != gen && e->why != GXW_STALE))) {
		CUgraph snap = e->snap;
		int state = e->state, why = GXW_NONE, err = 0;
		uint32_t inodes = e->inodes;
		char detail[GX_DETAIL] = "";
		struct gxs_epoch *ep = restore || gxs_mode() == GXS_OFF ? NULL : gxs_begin(&e->ring);
		e->busy = 1;
		if (e->knodes == GX_UNKNOWN)
			e->knodes = walk_kernels(snap, NULL, NULL, 0, NULL);
		pthread_mutex_unlock(&gx_mu);
		int changed = gx_decide(x, snap, ep, restore, &state, &inodes, &why, &err, detail);
		pthread_mutex_lock(&gx_mu);
		e->busy = 0;
		e->gen = restore ? 0 : gen;
		e->inodes = inodes;
		e->why = why;
		e->err = err;
		snprintf(e->detail, sizeof(e->detail), "%s", detail);
		if (state != e->state) {
			gx_swapped += state == GX_SWAPPED ? 1 : -1;
			gx_on_update();
		}
		e->state = state;
		if (changed || restore) {
			/* a refused restore still ends it: the captured copy
			 * counts runs that are not this exec's launches */
			end_epoch(e);
			if (ep && gxs_used(ep)) {
				e->ep = ep;
				ep = NULL;
			}
		}
		gxs_end(ep); /* no node took an id, or the update was refused */
	}
	if (gx_sessions > 0) {
		e->c.launches++;
		if (cap) {
			e->c.captured++;
		} else {
			if (e->knodes != GX_UNKNOWN)
				e->c.kruns += e->knodes;
			if (e->inodes > 0) {
				e->c.launches_instr++;
				e->c.kruns_instr += e->inodes;
			}
			if (kt_recording()) {
				e->c.launches_kt++;
				__atomic_store_n(&gx_kt_seen, 1, __ATOMIC_RELAXED);
			}
		}
	}
	int want = e->ep && !cap;
	pthread_mutex_unlock(&gx_mu);
	if (want) {
		/* the stamp of the exec's next launch number: taken after any
		 * swap above (its cost is ours), with g_rw but not gx_mu held
		 * (g_rw comes before g_mu, and g_mu before gx_mu) */
		pthread_rwlock_rdlock(&g_rw);
		uint64_t t = probe_graph_stamp();
		pthread_rwlock_unlock(&g_rw);
		pthread_mutex_lock(&gx_mu);
		if ((e = gx_find(x)) != NULL && e->ep) {
			gxs_put(e->ring, t);
			stamped = 1;
		}
		pthread_mutex_unlock(&gx_mu);
	}
	if (note)
		server_note_graphs();
	return stamped;
}

void gx_launch_failed(CUgraphExec x)
{
	pthread_mutex_lock(&gx_mu);
	struct gx *e = gx_find(x);
	if (e && e->ep)
		gxs_unput(e->ring);
	pthread_mutex_unlock(&gx_mu);
}

/* Replaces x's snapshot with a clone of g (NULL: none); gx_mu held. */
static void set_snapshot(struct gx *e, CUgraph g)
{
	if (e->snap)
		D.cuGraphDestroy(e->snap);
	e->snap = NULL;
	e->knodes = GX_UNKNOWN;
	e->gen = 0;
	if (g && D.cuGraphClone(&e->snap, g) != CUDA_SUCCESS)
		e->snap = NULL;
	e->why = e->snap ? GXW_NONE : GXW_NO_SNAPSHOT;
}

static int snapshots_off(void)
{
	static int off = -1;
	int v = __atomic_load_n(&off, __ATOMIC_RELAXED);
	if (v < 0) {
		const char *s = getenv("GPUBPF_AGENT_GRAPH_SNAPSHOTS");
		v = s && s[0] == '0';
		__atomic_store_n(&off, v, __ATOMIC_RELAXED);
	}
	return v;
}

/* e runs g's nodes now, the application's (an instantiation, a whole-graph
 * update): its snapshot becomes a copy of g; gx_mu held. */
static void resnapshot(struct gx *e, CUgraph g)
{
	if (e->busy) {
		/* another thread launches it meanwhile, against CUDA's rules:
		 * what it runs cannot be told; leave it alone */
		e->why = GXW_STALE;
		snprintf(e->detail, sizeof(e->detail), "changed while being launched");
		return;
	}
	if (e->state == GX_SWAPPED) {
		gx_swapped--;
		gx_on_update();
	}
	e->state = GX_ORIGINAL;
	e->inodes = 0;
	e->noted = 0;
	end_epoch(e);
	set_snapshot(e, g);
}

void gx_instantiated(CUgraphExec x, CUgraph g)
{
	if (!x || g_agent_thread || snapshots_off() || drv_init() != 0 || !gx_usable())
		return;
	pthread_mutex_lock(&gx_mu);
	struct gx *e = gx_find(x);
	if (!e)
		e = gx_add(x);
	if (e) /* a handle the driver hands out again: a new exec */
		resnapshot(e, g);
	pthread_mutex_unlock(&gx_mu);
}

void gx_updated(CUgraphExec x, CUgraph g)
{
	if (!x || g_agent_thread || drv_init() != 0 || !gx_usable())
		return;
	pthread_mutex_lock(&gx_mu);
	struct gx *e = gx_find(x);
	if (!e)
		e = gx_add(x); /* made before the agent came: known from now on */
	if (e)
		resnapshot(e, snapshots_off() ? NULL : g);
	pthread_mutex_unlock(&gx_mu);
}

void gx_kernel_node_set(CUgraphExec x, CUgraphNode n, const CUDA_KERNEL_NODE_PARAMS_v2 *p, int v2)
{
	if (!x || g_agent_thread || !p || drv_init() != 0)
		return;
	pthread_mutex_lock(&gx_mu);
	struct gx *e = gx_find(x);
	if (e && e->snap) {
		CUDA_KERNEL_NODE_PARAMS_v2 q;
		memset(&q, 0, sizeof(q));
		memcpy(&q, p, v2 ? sizeof(q) : sizeof(CUDA_KERNEL_NODE_PARAMS_v1));
		CUgraphNode sn = NULL;
		if (!D.cuGraphNodeFindInClone || D.cuGraphNodeFindInClone(&sn, n, e->snap) != CUDA_SUCCESS ||
		    D.cuGraphKernelNodeSetParams(sn, &q) != CUDA_SUCCESS) {
			e->why = GXW_STALE;
			snprintf(e->detail, sizeof(e->detail), "cuGraphExecKernelNodeSetParams");
		}
	}
	pthread_mutex_unlock(&gx_mu);
}

void gx_changed(CUgraphExec x, const char *how)
{
	if (!x || g_agent_thread)
		return;
	pthread_mutex_lock(&gx_mu);
	struct gx *e = gx_find(x);
	if (e && (e->snap || e->state == GX_SWAPPED)) {
		e->why = GXW_STALE;
		snprintf(e->detail, sizeof(e->detail), "%s", how);
		end_epoch(e); /* a node disabled, say, would skip runs */
	}
	pthread_mutex_unlock(&gx_mu);
}

void gx_destroyed(CUgraphExec x)
{
	if (!x || g_agent_thread)
		return;
	pthread_mutex_lock(&gx_mu);
	size_t h = gx_hash(x);
	for (struct gx **pp = &gx_tab[h]; *pp; pp = &(*pp)->next) {
		struct gx *e = *pp;
		if (e->x != x)
			continue;
		if (e->busy)
			break; /* the application destroys what it launches on another thread: leave it */
		*pp = e->next;
		counts_add(&gx_gone, &e->c);
		if (e->state == GX_SWAPPED) {
			gx_swapped--;
			gx_on_update();
		}
		if (e->snap && D.ready)
			D.cuGraphDestroy(e->snap);
		end_epoch(e);
		gxs_ring_drop(e->ring);
		free(e);
		gx_nexecs--;
		break;
	}
	pthread_mutex_unlock(&gx_mu);
}

void gx_session(struct session *s, int delta)
{
	if (delta < 0)
		gxs_session_end(s);
	pthread_mutex_lock(&gx_mu);
	if (delta > 0)
		/* a new tool hears of the execs it cannot reach too */
		for (size_t b = 0; b < GX_BUCKETS; b++)
			for (struct gx *e = gx_tab[b]; e; e = e->next)
				e->noted = 0;
	gx_sessions += delta;
	gx_on_update();
	pthread_mutex_unlock(&gx_mu);
}

static const char *why_text(const struct gx *e)
{
	switch (e->why) {
	case GXW_BEFORE_AGENT:
		return "instantiated before the gpubpf agent was loaded into the process (an executable graph hands out "
		       "no nodes to update): start the program with the agent preloaded, LD_PRELOAD=$(gpubpf agent-path), "
		       "to trace graphs it makes at start-up";
	case GXW_NO_SNAPSHOT:
		return "the agent keeps no copy of its graph (GPUBPF_AGENT_GRAPH_SNAPSHOTS=0, a driver before CUDA 12.0, "
		       "or cuGraphClone failed)";
	case GXW_STALE:
		return "the application changes this executable graph in place";
	case GXW_REFUSED:
		return "the driver refused the update of its nodes";
	case GXW_RESTORE_FAILED:
		return "the driver refused to put its original nodes back (the instrumented ones stay: same results)";
	case GXW_NO_PROBE:
		return "no probe for any of its kernels";
	default:
		return "";
	}
}

static void put_entry(struct wbuf *w, uint64_t x, const struct gx_counts *c, uint32_t knodes, uint32_t inodes,
		      int state, int why, int err, const char *text, const char *detail)
{
	wb_u64(w, x);
	wb_u64(w, c->launches);
	wb_u64(w, c->launches_instr);
	wb_u64(w, c->launches_kt);
	wb_u64(w, c->kruns);
	wb_u64(w, c->kruns_instr);
	wb_u64(w, c->captured);
	wb_u32(w, knodes);
	wb_u32(w, inodes);
	wb_u32(w, (uint32_t)state);
	wb_u32(w, (uint32_t)why);
	wb_i32(w, err);
	wb_str(w, text);
	wb_str(w, detail);
}

int op_graphs(struct session *s, struct wbuf *w)
{
	pthread_mutex_lock(&gx_mu);
	wb_i32(w, ST_OK);
	wb_u32(w, gx_nexecs + 1);
	/* the destroyed execs' counts, as exec 0 */
	put_entry(w, 0, &gx_gone, GX_UNKNOWN, 0, GX_ORIGINAL, GXW_NONE, 0, "", "");
	for (size_t b = 0; b < GX_BUCKETS; b++)
		for (struct gx *e = gx_tab[b]; e; e = e->next)
			put_entry(w, (uint64_t)(uintptr_t)e->x, &e->c, e->knodes, e->inodes,
				  e->state, e->why, e->err, why_text(e), e->detail);
	pthread_mutex_unlock(&gx_mu);
	return 0;
}

void gx_reset(void)
{
	/* fork child: the parent's graphs are not the child's to update */
	pthread_mutex_init(&gx_mu, NULL);
	memset(gx_tab, 0, sizeof(gx_tab));
	memset(&gx_gone, 0, sizeof(gx_gone));
	gx_nexecs = 0;
	gx_sessions = gx_swapped = 0;
	g_gx_on = gx_kt_seen = 0;
	gxs_reset();
}
