/* Control socket: listener, one thread per connected tool, the protocol
 * of docs/agent-protocol.md, and cleanup when a tool goes away. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"

/* ---------------- wire encoding ---------------- */

enum {
	OP_HELLO = 1,
	OP_LIST = 2,
	OP_FETCH = 3,
	OP_GLOBALS = 4,
	OP_LOAD = 5,
	OP_UNLOAD = 6,
	OP_ALLOC = 7,
	OP_FREE = 8,
	OP_MEMSET = 9,
	OP_WRITE = 10,
	OP_READ = 11,
	OP_REGISTER_HOST = 12,
	OP_UNREGISTER_HOST = 13,
	OP_SNAPSHOT = 14,
	OP_ACTIVATE = 15,
	OP_DEACTIVATE = 16,
	OP_DETACH = 17,
	OP_STATS = 18,
	OP_CONTINUE = 19,
	OP_RELEASE_UNLOAD = 20,
	OP_DEVICE_READY = 21,
	OP_RING_DRAIN = 22,
	OP_CLOCK = 23,
	OP_LAUNCH = 24,
	OP_LAUNCH_EVENTS = 25,
	NOTE_MODULE = 0x40,
	NOTE_PROBE_FAILED = 0x41,
	NOTE_UNLOADING = 0x42,
	NOTE_DEVICE = 0x43,
	NOTE_LATE_TABLES = 0x44,
};

enum { ST_OK = 0, ST_BAD_REQUEST = 1, ST_NOT_FOUND = 2, ST_CUDA = 3, ST_UNSUPPORTED = 4, ST_INTERNAL = 5 };

struct wbuf {
	uint8_t *p;
	size_t n, cap;
	int oom;
};

static void wb_need(struct wbuf *w, size_t k)
{
	if (w->oom)
		return;
	if (w->n + k <= w->cap)
		return;
	size_t nc = w->cap ? w->cap : 256;
	while (nc < w->n + k)
		nc *= 2;
	if (nc > PROTO_MAX_FRAME + 16) {
		w->oom = 1;
		return;
	}
	uint8_t *q = realloc(w->p, nc);
	if (!q) {
		w->oom = 1;
		return;
	}
	w->p = q;
	w->cap = nc;
}
static void wb_raw(struct wbuf *w, const void *d, size_t k)
{
	wb_need(w, k);
	if (w->oom)
		return;
	if (k)
		memcpy(w->p + w->n, d, k);
	w->n += k;
}
static void wb_u32(struct wbuf *w, uint32_t v) { wb_raw(w, &v, 4); } /* little endian hosts only */
static void wb_u64(struct wbuf *w, uint64_t v) { wb_raw(w, &v, 8); }
static void wb_i32(struct wbuf *w, int32_t v) { wb_raw(w, &v, 4); }
static void wb_bytes(struct wbuf *w, const void *d, size_t k)
{
	wb_u32(w, (uint32_t)k);
	wb_raw(w, d, k);
}
static void wb_str(struct wbuf *w, const char *s) { wb_bytes(w, s ? s : "", s ? strlen(s) : 0); }

struct rbuf {
	const uint8_t *p;
	size_t n, off;
	int err;
};
static int rb_raw(struct rbuf *r, void *d, size_t k)
{
	if (r->err || r->n - r->off < k) {
		r->err = 1;
		memset(d, 0, k);
		return -1;
	}
	memcpy(d, r->p + r->off, k);
	r->off += k;
	return 0;
}
static uint32_t rb_u32(struct rbuf *r)
{
	uint32_t v;
	rb_raw(r, &v, 4);
	return v;
}
static uint64_t rb_u64(struct rbuf *r)
{
	uint64_t v;
	rb_raw(r, &v, 8);
	return v;
}
static int32_t rb_i32(struct rbuf *r) { return (int32_t)rb_u32(r); }
/* Returns a pointer into the frame (not NUL-terminated) and its length. */
static const uint8_t *rb_bytes(struct rbuf *r, size_t *len)
{
	uint32_t k = rb_u32(r);
	if (r->err || r->n - r->off < k) {
		r->err = 1;
		*len = 0;
		return NULL;
	}
	const uint8_t *p = r->p + r->off;
	r->off += k;
	*len = k;
	return p;
}
/* A NUL-terminated copy (caller frees). */
static char *rb_str(struct rbuf *r)
{
	size_t k;
	const uint8_t *p = rb_bytes(r, &k);
	if (!p)
		return NULL;
	if (memchr(p, 0, k)) {
		r->err = 1;
		return NULL;
	}
	char *s = malloc(k + 1);
	if (!s) {
		r->err = 1;
		return NULL;
	}
	memcpy(s, p, k);
	s[k] = 0;
	return s;
}

/* ---------------- sessions ---------------- */

struct alloc {
	CUdeviceptr p;
	CUcontext ctx;
	struct alloc *next;
};
struct region {
	uint64_t id;
	void *host;
	size_t size;
	CUdeviceptr dev;
	CUcontext ctx;
	int registered;
	struct region *next;
};
struct failure {
	uint64_t handle;
	int32_t err;
};

/* The clock op's kernel and mailbox in one context (see op_clock). */
struct clk {
	CUcontext ctx;
	CUmodule mod;
	CUfunction fn;
	CUstream st;
	uint64_t *mb; /* a page of our own, registered: the driver never frees it under us */
	size_t mbsize;
	CUdeviceptr dmb;
	uint32_t gen; /* handshake generation: a late kernel of an earlier call never matches */
};

struct session {
	int fd;
	int efd; /* eventfd: wakes the thread for notifications */
	uid_t uid;
	int hello;
	int hold;
	uint64_t sent_mod; /* modules notified up to this id */
	uint64_t acked_mod;
	uint64_t unload_id;    /* module the application is about to unload */
	int unload_pending;    /* NOTE_UNLOADING not sent yet */
	uint64_t acked_unload; /* the tool took its last look before that unload */
	uint64_t sent_dev;     /* devices in use notified (bit per ordinal) */
	uint64_t acked_dev;    /* devices the tool has set up (device-ready) */
	int pending_fd;
	struct clone *clones;
	struct alloc *allocs;
	struct region *regions;
	CUcontext prim[64];
	struct {
		CUcontext ctx;
		CUstream s;
	} streams[16]; /* our own non-blocking stream per context */
	/* driver pointers a rescan found after this tool came (a CUDA
	 * runtime that started after an injection): NOTE_LATE_TABLES */
	uint32_t late_new;
	char late_obj[1024];
	int nfail;
	struct failure fails[32];
	struct clk clocks[16];
	/* probes turned off (deactivate, or their context destroyed): their
	 * launch counts stay in the stats until the session ends */
	struct activation *retired;
	struct session *next;
};

__thread int g_agent_thread;

static struct session *g_sessions; /* g_mu */
static uint64_t g_next_id = 1;     /* clones, regions */
static int g_listen_fd = -1;
static char g_sock_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
static pid_t g_sock_pid;
static int g_started;     /* server thread running for this process */
static int g_need_start;  /* after fork: start at next driver call */
static int g_hold_env;    /* GPUBPF_AGENT_HOLD=1 */
static int g_hold_waited; /* waited once for a tool to connect */
static uint64_t g_dev_used; /* g_mu: devices the application uses (bit per ordinal) */
static int g_direct_taken;  /* g_mu: direct mode's one session has connected */
static long g_hold_ms = 10000;

static void wake(struct session *s)
{
	uint64_t one = 1;
	ssize_t w = write(s->efd, &one, 8);
	(void)w;
}

void server_notify_module(uint64_t id)
{
	(void)id;
	pthread_mutex_lock(&g_mu);
	for (struct session *s = g_sessions; s; s = s->next)
		if (s->hello)
			wake(s);
	pthread_mutex_unlock(&g_mu);
}

void server_notify_failure(struct activation *a, CUresult r)
{
	pthread_mutex_lock(&g_mu);
	for (struct session *s = g_sessions; s; s = s->next) {
		if (s == a->owner && s->nfail < 32) {
			s->fails[s->nfail].handle = (uint64_t)(uintptr_t)a->handle;
			s->fails[s->nfail].err = r;
			s->nfail++;
			wake(s);
		}
	}
	pthread_mutex_unlock(&g_mu);
}

static void register_exit_hold(void);

/* When a hold started now must end at the latest (GPUBPF_AGENT_HOLD_MS). */
static struct timespec hold_deadline(void)
{
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += g_hold_ms / 1000;
	dl.tv_nsec += (g_hold_ms % 1000) * 1000000L;
	if (dl.tv_nsec >= 1000000000L) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000L;
	}
	return dl;
}

static int hold_pending(uint64_t id)
{
	int any = 0;
	for (struct session *s = g_sessions; s; s = s->next)
		if (s->hold) {
			any = 1;
			if (s->acked_mod < id)
				return 1;
		}
	if (!any && g_hold_env && !g_hold_waited)
		return 1;
	return 0;
}

/* Holds the loading thread until every tool that asked for it has seen
 * (and instrumented) the module, or the timeout passes. */
void server_hold(uint64_t id)
{
	if (!id)
		return;
	register_exit_hold();
	if (!g_hold_env && !__atomic_load_n(&g_sessions, __ATOMIC_RELAXED))
		return;
	struct timespec dl = hold_deadline();
	pthread_mutex_lock(&g_mu);
	while (hold_pending(id))
		if (pthread_cond_timedwait(&g_cond, &g_mu, &dl) == ETIMEDOUT)
			break;
	g_hold_waited = 1;
	pthread_mutex_unlock(&g_mu);
}

static int dev_pending(uint64_t bit)
{
	for (struct session *s = g_sessions; s; s = s->next)
		if (s->hello && (s->hold || s->clones || s->allocs || s->regions) && !(s->acked_dev & bit))
			return 1;
	return 0;
}

/* The application retained a device's primary context: if it is the first
 * time, tell every tool and hold the application (bounded, only while a tool
 * holds or has state here) until they have placed their maps and clones on
 * that device, so its first launch there already runs instrumented. */
void server_device_used(CUdevice dev)
{
	int ord = -1, count = 0;
	if (drv_init() != 0 || D.cuDeviceGetCount(&count) != CUDA_SUCCESS)
		return;
	for (int i = 0; i < count && i < 64; i++) {
		CUdevice d;
		if (D.cuDeviceGet(&d, i) == CUDA_SUCCESS && d == dev) {
			ord = i;
			break;
		}
	}
	if (ord < 0)
		return;
	uint64_t bit = 1ULL << ord;
	pthread_mutex_lock(&g_mu);
	if (g_dev_used & bit) {
		pthread_mutex_unlock(&g_mu);
		return;
	}
	g_dev_used |= bit;
	for (struct session *s = g_sessions; s; s = s->next)
		if (s->hello)
			wake(s);
	struct timespec dl = hold_deadline();
	int held = 0, timedout = 0;
	while (dev_pending(bit)) {
		held = 1;
		if (pthread_cond_timedwait(&g_cond, &g_mu, &dl) == ETIMEDOUT) {
			timedout = 1;
			break;
		}
	}
	pthread_mutex_unlock(&g_mu);
	if (held)
		DBG("device %d in use: %s", ord, timedout ? "hold timed out" : "tools ready");
}

/* A session has state in this process worth a last look: clones or memory. */
static int has_state(struct session *s)
{
	return s->hello && (s->clones || s->allocs || s->regions);
}

static int unload_pending_for(uint64_t id)
{
	for (struct session *s = g_sessions; s; s = s->next)
		if (has_state(s) && s->unload_id == id && s->acked_unload != id)
			return 1;
	return 0;
}

/* Module id the exit hold announces: "the process is exiting". */
#define EXIT_MODULE_ID UINT64_MAX

static void exit_hold(void)
{
	DBG("exit: last look for attached tools");
	server_hold_id(EXIT_MODULE_ID);
}

/* Must run before cudart's own exit handlers (they tear the contexts
 * down), so it must be registered after them: at a module load (cudart
 * loads its modules inside its initialisation, after registering its
 * handlers) or at a hello that comes after one. A hello from a tool that
 * connected before CUDA was initialised (TOOL -- CMD) is too early. */
static void register_exit_hold(void)
{
	static int done;
	if (__atomic_exchange_n(&done, 1, __ATOMIC_ACQ_REL))
		return;
	DBG("exit hold registered");
	atexit(exit_hold);
}

/* Called by the application's thread before it unloads a module (at exit,
 * cudart unloads every module before the contexts go): every tool with
 * clones or memory here is told and may read its maps and drain its rings
 * before the application's state disappears; it answers release-unload.
 * Bounded by GPUBPF_AGENT_HOLD_MS (a tool that never answers costs the
 * application that long once per unload at most, and only while attached). */
void server_hold_unload(void *handle)
{
	if (!__atomic_load_n(&g_sessions, __ATOMIC_RELAXED))
		return;
	uint64_t id = inv_module_id(handle);
	if (id)
		server_hold_id(id);
	else
		DBG("module %p is not in the inventory: no last look", handle);
}

void server_hold_id(uint64_t id)
{
	if (!__atomic_load_n(&g_sessions, __ATOMIC_RELAXED))
		return;
	struct timespec dl = hold_deadline();
	pthread_mutex_lock(&g_mu);
	int any = 0;
	for (struct session *s = g_sessions; s; s = s->next)
		if (has_state(s)) {
			s->unload_id = id;
			s->unload_pending = 1;
			wake(s);
			any = 1;
		}
	int timedout = 0;
	while (any && unload_pending_for(id))
		if (pthread_cond_timedwait(&g_cond, &g_mu, &dl) == ETIMEDOUT) {
			timedout = 1;
			break;
		}
	pthread_mutex_unlock(&g_mu);
	if (any)
		DBG("last-look hold %llu: %s", (unsigned long long)id, timedout ? "timed out" : "released");
}

/* ---------------- frames ---------------- */

static int write_all(int fd, const void *p, size_t n)
{
	const uint8_t *b = p;
	while (n) {
		ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

static int read_all(int fd, void *p, size_t n)
{
	uint8_t *b = p;
	while (n) {
		ssize_t r = read(fd, b, n);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (r == 0)
			return -1;
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

static int send_frame(struct session *s, uint16_t type, uint32_t req, struct wbuf *body)
{
	if (body->oom)
		return -1;
	uint8_t h[12];
	uint32_t len = (uint32_t)body->n;
	uint16_t flags = 0;
	memcpy(h, &len, 4);
	memcpy(h + 4, &type, 2);
	memcpy(h + 6, &flags, 2);
	memcpy(h + 8, &req, 4);
	if (write_all(s->fd, h, 12) < 0)
		return -1;
	return write_all(s->fd, body->p, body->n);
}

/* What send_error returns once its reply is out: the request is answered
 * and handle() must not send the reply buffer as well. */
#define REPLIED 2

static int send_error(struct session *s, uint16_t type, uint32_t req, int st, int cu, const char *fmt, ...)
	__attribute__((format(printf, 6, 7)));
static int send_error(struct session *s, uint16_t type, uint32_t req, int st, int cu, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	struct wbuf w = {0};
	wb_i32(&w, st);
	wb_i32(&w, cu);
	wb_str(&w, msg);
	int r = send_frame(s, type, req, &w);
	free(w.p);
	return r < 0 ? -1 : REPLIED;
}

/* Reads one frame; an fd passed with it lands in s->pending_fd. */
static int recv_frame(struct session *s, uint16_t *type, uint32_t *req, uint8_t **body, uint32_t *len)
{
	uint8_t h[12];
	union {
		char buf[CMSG_SPACE(sizeof(int) * 4)];
		struct cmsghdr align;
	} cm;
	struct iovec iov = {h, sizeof(h)};
	struct msghdr mh = {0};
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = cm.buf;
	mh.msg_controllen = sizeof(cm.buf);
	ssize_t r;
	do
		r = recvmsg(s->fd, &mh, MSG_CMSG_CLOEXEC);
	while (r < 0 && errno == EINTR);
	if (r <= 0)
		return -1;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			int nfd = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
			int *fds = (int *)CMSG_DATA(c);
			for (int i = 0; i < nfd; i++) {
				if (i == 0) {
					if (s->pending_fd >= 0)
						close(s->pending_fd);
					s->pending_fd = fds[0];
				} else {
					close(fds[i]);
				}
			}
		}
	}
	if (r < (ssize_t)sizeof(h) && read_all(s->fd, h + r, sizeof(h) - (size_t)r) < 0)
		return -1;
	memcpy(len, h, 4);
	memcpy(type, h + 4, 2);
	memcpy(req, h + 8, 4);
	if (*len > PROTO_MAX_FRAME)
		return -1;
	*body = malloc(*len ? *len : 1);
	if (!*body)
		return -1;
	if (read_all(s->fd, *body, *len) < 0) {
		free(*body);
		return -1;
	}
	return 0;
}

/* ---------------- contexts ---------------- */

/* Contexts the application destroyed (g_mu): a tool may still name one in
 * a request, and the driver crashes on some calls with a dead handle. */
static CUcontext g_dead[64];
static unsigned g_ndead; /* g_mu; entries used: min(g_ndead, 64) */

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
static pthread_rwlock_t g_ctx_rw = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;

void server_ctx_lock(void)
{
	pthread_rwlock_wrlock(&g_ctx_rw);
}

void server_ctx_unlock(void)
{
	pthread_rwlock_unlock(&g_ctx_rw);
}

/* Makes ctx current, or the primary context of dev when ctx is 0. */
static CUresult use_ctx(struct session *s, int dev, uint64_t ctx, CUcontext *out)
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
static CUstream op_stream(struct session *s, CUcontext c, CUresult *err)
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
static void after_clone_launches(struct session *s, CUcontext c, CUstream st)
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
static void clones_finish(struct session *s)
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

static void clk_release(struct clk *k);

/* A clone's memory (never a pinned one's: a graph may still reach it). */
static void clone_free(struct clone *c)
{
	probe_clone_forget(c);
	if (c->pinned)
		return;
	pthread_mutex_destroy(&c->evmu);
	free(c->fns);
	free(c);
}

static void clone_unload(struct clone *c)
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
static int deactivate(struct session *s, void *handle)
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

static int clones_pinned(struct session *s)
{
	for (struct clone *c = s->clones; c; c = c->next)
		if (__atomic_load_n(&c->pinned, __ATOMIC_RELAXED))
			return 1;
	return 0;
}

/* Everything back as it was: probes off, clones unloaded once their
 * launches finished, memory freed (kept when a graph may still use it). */
static void detach_all(struct session *s)
{
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

/* ---------------- operations ---------------- */

static int ptx_isa_max(int v)
{
	int maj = v / 1000, min = (v % 1000) / 10;
	if (maj < 11)
		return 0;
	if (maj == 11)
		return 70 + (min > 8 ? 8 : min);
	if (maj == 12) {
		static const int t[] = {80, 81, 82, 83, 84, 85, 85, 86, 87, 88};
		return t[min > 9 ? 9 : min];
	}
	return 90 + (maj - 13) * 10 + (min > 9 ? 9 : min);
}

/* ---------------- rescans (late mode) ---------------- */

/* An agent injected into a running program swaps the driver pointers the
 * program's CUDA runtimes hold (late.c) when a tool comes. A runtime that
 * starts after that (a shared library with its own static cudart, making
 * its first CUDA call after the attach; a plugin dlopened later) fills a
 * table of its own with the driver's pointers, and its launches would pass
 * the agent by. Rescans find those: often at first, then every
 * RESCAN_MAX_NS; the tools that were attached already hear which object,
 * since its launches before the rescan went untraced. */
#define RESCAN_FIRST_NS 100000000ull
#define RESCAN_MAX_NS 2000000000ull
static uint64_t g_rescan_at, g_rescan_every; /* g_mu */

static void late_rescan(void)
{
	char obj[sizeof(((struct session *)0)->late_obj)] = "";
	int n = late_scan(obj, sizeof(obj));
	if (n <= 0)
		return;
	DBG("rescan: %d driver entry points of %s swapped", n, obj[0] ? obj : "?");
	pthread_mutex_lock(&g_mu);
	for (struct session *o = g_sessions; o; o = o->next) {
		if (!o->hello)
			continue;
		if (!o->late_new)
			snprintf(o->late_obj, sizeof(o->late_obj), "%s", obj);
		else if (!strstr(o->late_obj, obj)) {
			size_t used = strlen(o->late_obj);
			snprintf(o->late_obj + used, sizeof(o->late_obj) - used, ", %s", obj);
		}
		o->late_new += (uint32_t)n;
		wake(o);
	}
	pthread_mutex_unlock(&g_mu);
}

/* How long the session thread may sleep before the next rescan is due (-1:
 * none is: not injected, or no tool has come). */
static int rescan_wait_ms(void)
{
	if (late_mode() != 1)
		return -1;
	pthread_mutex_lock(&g_mu);
	uint64_t at = g_rescan_at;
	pthread_mutex_unlock(&g_mu);
	if (!at)
		return -1;
	uint64_t now = mono_ns();
	return now >= at ? 0 : (int)((at - now) / 1000000) + 1;
}

/* Runs the rescan if it is due (one session thread does). */
static void rescan_if_due(void)
{
	pthread_mutex_lock(&g_mu);
	uint64_t now = mono_ns();
	int due = g_rescan_at && now >= g_rescan_at;
	if (due) {
		g_rescan_every = g_rescan_every ? g_rescan_every * 2 : RESCAN_FIRST_NS;
		if (g_rescan_every > RESCAN_MAX_NS)
			g_rescan_every = RESCAN_MAX_NS;
		g_rescan_at = now + g_rescan_every;
	}
	pthread_mutex_unlock(&g_mu);
	if (due)
		late_rescan();
}

static void op_hello(struct session *s, struct rbuf *r, struct wbuf *w)
{
	uint32_t ver = rb_u32(r);
	uint32_t flags = rb_u32(r);
	free(rb_str(r));
	(void)ver;
	if (inv_module_count() > 0)
		register_exit_hold();
	/* Loaded into a running process: reach its driver calls now, before
	 * the tool goes on to instrument them (tools already here hear of
	 * what is new), and look again from time to time. */
	late_rescan();
	pthread_mutex_lock(&g_mu);
	if (late_mode() == 1 && !g_rescan_at) {
		g_rescan_every = RESCAN_FIRST_NS;
		g_rescan_at = mono_ns() + RESCAN_FIRST_NS;
	}
	s->hello = 1;
	s->hold = (flags & 1) != 0;
	pthread_cond_broadcast(&g_cond);
	pthread_mutex_unlock(&g_mu);
	wake(s);
	char exe[PATH_MAX] = "";
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	exe[n > 0 ? n : 0] = 0;
	wb_i32(w, ST_OK);
	wb_u32(w, PROTO_VERSION);
	wb_u32(w, (uint32_t)getpid());
	wb_u32(w, (uint32_t)getuid());
	wb_str(w, exe);
	wb_str(w, AGENT_VERSION);
	int ready = drv_init() == 0;
	int count = 0;
	if (ready && D.cuDeviceGetCount(&count) != CUDA_SUCCESS) {
		ready = 0;
		count = 0;
	}
	wb_i32(w, ready ? D.version : 0);
	wb_u32(w, ready ? (uint32_t)ptx_isa_max(D.version) : 0);
	wb_u32(w, (uint32_t)ready);
	wb_u32(w, (uint32_t)count);
	for (int i = 0; i < count; i++) {
		CUdevice d = 0;
		char name[256] = "";
		int maj = 0, min = 0;
		D.cuDeviceGet(&d, i);
		if (D.cuDeviceGetName)
			D.cuDeviceGetName(name, sizeof(name), d);
		if (D.cuDeviceGetAttribute) {
			D.cuDeviceGetAttribute(&maj, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d);
			D.cuDeviceGetAttribute(&min, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d);
		}
		wb_i32(w, i);
		wb_str(w, name);
		wb_i32(w, maj);
		wb_i32(w, min);
		/* A primary context active before the agent could see its
		 * retain (or retained by a library's own copy of the pointer)
		 * counts as in use too. */
		unsigned fl = 0;
		int active = 0;
		if (i < 64 && D.cuDevicePrimaryCtxGetState && D.cuDevicePrimaryCtxGetState(d, &fl, &active) == CUDA_SUCCESS &&
		    active) {
			pthread_mutex_lock(&g_mu);
			g_dev_used |= 1ULL << i;
			pthread_mutex_unlock(&g_mu);
		}
	}
	pthread_mutex_lock(&g_mu);
	uint64_t used = g_dev_used;
	pthread_mutex_unlock(&g_mu);
	wb_u64(w, used); /* protocol 2: devices in use */
	wb_u32(w, (uint32_t)g_direct); /* protocol 5: direct mode, and why CUDA is not ready there */
	wb_str(w, g_direct_err);
}

static void put_module(struct wbuf *w, const struct module *m)
{
	wb_u64(w, m->id);
	wb_u32(w, (uint32_t)m->kind);
	wb_u64(w, (uint64_t)(uintptr_t)m->handle);
	wb_u64(w, (uint64_t)(uintptr_t)m->ctx);
	wb_u32(w, (uint32_t)m->fmt);
	wb_u64(w, m->size);
	wb_u32(w, (uint32_t)m->unloaded);
	wb_str(w, m->path);
	wb_i32(w, m->dev);              /* protocol 9 */
	wb_u32(w, (uint32_t)m->primary); /* protocol 9 */
}

static void op_list(struct session *s, struct rbuf *r, struct wbuf *w)
{
	uint32_t flags = rb_u32(r);
	(void)s;
	CUcontext saved = NULL;
	int ready = drv_init() == 0;
	if (ready)
		D.cuCtxGetCurrent(&saved);
	pthread_mutex_lock(&g_mu);
	if (ready && !(flags & 1))
		inv_enumerate();
	wb_i32(w, ST_OK);
	wb_u32(w, (uint32_t)g_nmods);
	for (size_t i = 0; i < g_nmods; i++)
		put_module(w, &g_mods[i]);
	wb_u32(w, (uint32_t)g_nkerns);
	for (size_t i = 0; i < g_nkerns; i++) {
		struct kernel *k = &g_kerns[i];
		wb_u64(w, (uint64_t)(uintptr_t)k->handle);
		wb_u32(w, (uint32_t)k->kind);
		wb_u64(w, k->module_id);
		wb_u64(w, (uint64_t)(uintptr_t)k->ctx);
		wb_u64(w, (uint64_t)(uintptr_t)k->parent);
		wb_str(w, k->name);
	}
	pthread_mutex_unlock(&g_mu);
	if (ready)
		D.cuCtxSetCurrent(saved);
}

/* Copies n bytes of our own memory without faulting if it has gone. */
static int safe_copy(void *dst, const void *src, size_t n)
{
	struct iovec l = {dst, n}, rm = {(void *)src, n};
	ssize_t k = process_vm_readv(getpid(), &l, 1, &rm, 1, 0);
	if (k == (ssize_t)n)
		return 0;
	if (k < 0 && errno == ENOSYS) {
		memcpy(dst, src, n);
		return 0;
	}
	return -1;
}

static int op_fetch(struct session *s, uint32_t req, struct rbuf *r, struct wbuf *w)
{
	uint64_t id = rb_u64(r), off = rb_u64(r);
	uint32_t max = rb_u32(r);
	if (r->err)
		return send_error(s, OP_FETCH, req, ST_BAD_REQUEST, 0, "malformed fetch request");
	if (max > (16u << 20))
		max = 16u << 20;
	pthread_mutex_lock(&g_mu);
	struct module *m = inv_module_by_id(id);
	if (!m || m->unloaded || !m->image || !m->size) {
		int unl = m && m->unloaded;
		pthread_mutex_unlock(&g_mu);
		if (!m)
			return send_error(s, OP_FETCH, req, ST_NOT_FOUND, 0, "no module %llu", (unsigned long long)id);
		return send_error(s, OP_FETCH, req, ST_NOT_FOUND, 0, "module %llu has %s", (unsigned long long)id,
				  unl ? "been unloaded" : "no image in memory (loaded from a file: read its path)");
	}
	uint64_t total = m->size;
	uint64_t n = off >= total ? 0 : total - off;
	if (n > max)
		n = max;
	wb_i32(w, ST_OK);
	wb_u64(w, total);
	wb_u32(w, (uint32_t)n);
	wb_need(w, n);
	int bad = 0;
	if (!w->oom && n) {
		bad = safe_copy(w->p + w->n, m->image + off, n);
		w->n += n;
	}
	pthread_mutex_unlock(&g_mu);
	if (bad)
		return send_error(s, OP_FETCH, req, ST_INTERNAL, 0, "module %llu image is no longer readable",
				  (unsigned long long)id);
	return 1;
}

static int op_globals(struct session *s, uint32_t req, struct rbuf *r, struct wbuf *w)
{
	uint64_t id = rb_u64(r);
	int dev = rb_i32(r);
	uint64_t ctx = rb_u64(r);
	uint32_t n = rb_u32(r);
	if (r->err || n > 65536)
		return send_error(s, OP_GLOBALS, req, ST_BAD_REQUEST, 0, "malformed globals request");
	pthread_mutex_lock(&g_mu);
	struct module *m = inv_module_by_id(id);
	void *h = m && !m->unloaded ? m->handle : NULL;
	int islib = m && m->kind <= MK_LIBRARY_FILE;
	CUcontext mctx = m ? m->ctx : NULL;
	pthread_mutex_unlock(&g_mu);
	if (!h)
		return send_error(s, OP_GLOBALS, req, ST_NOT_FOUND, 0, "no loaded module %llu", (unsigned long long)id);
	if (!ctx && !islib && mctx)
		ctx = (uint64_t)(uintptr_t)mctx;
	CUcontext saved = NULL;
	D.cuCtxGetCurrent(&saved);
	CUresult cr = use_ctx(s, dev, ctx, NULL);
	if (cr != CUDA_SUCCESS) {
		D.cuCtxSetCurrent(saved);
		return send_error(s, OP_GLOBALS, req, ST_CUDA, cr, "cannot make the context of device %d current", dev);
	}
	wb_i32(w, ST_OK);
	wb_u32(w, n);
	for (uint32_t i = 0; i < n; i++) {
		char *name = rb_str(r);
		CUdeviceptr p = 0;
		size_t sz = 0;
		CUresult e = CUDA_ERROR_INVALID_VALUE;
		if (name) {
			if (islib && D.cuLibraryGetGlobal)
				e = D.cuLibraryGetGlobal(&p, &sz, h, name);
			else if (!islib && D.cuModuleGetGlobal)
				e = D.cuModuleGetGlobal(&p, &sz, h, name);
			else
				e = CUDA_ERROR_NOT_SUPPORTED;
		}
		wb_str(w, name);
		wb_i32(w, e);
		wb_u64(w, p);
		wb_u64(w, sz);
		free(name);
	}
	D.cuCtxSetCurrent(saved);
	if (r->err)
		return send_error(s, OP_GLOBALS, req, ST_BAD_REQUEST, 0, "malformed globals request");
	return 1;
}

static int op_load(struct session *s, uint32_t req, struct rbuf *r, struct wbuf *w)
{
	int dev = rb_i32(r);
	uint64_t ctx = rb_u64(r);
	size_t plen;
	const uint8_t *ptx = rb_bytes(r, &plen);
	uint32_t nf = rb_u32(r);
	if (r->err || !ptx || nf > 65536)
		return send_error(s, OP_LOAD, req, ST_BAD_REQUEST, 0, "malformed load request");
	char *text = malloc(plen + 1);
	if (!text)
		return send_error(s, OP_LOAD, req, ST_INTERNAL, 0, "out of memory for %zu bytes of PTX", plen);
	memcpy(text, ptx, plen);
	text[plen] = 0;
	CUcontext saved = NULL, c = NULL;
	D.cuCtxGetCurrent(&saved);
	CUresult cr = use_ctx(s, dev, ctx, &c);
	if (cr != CUDA_SUCCESS) {
		free(text);
		D.cuCtxSetCurrent(saved);
		return send_error(s, OP_LOAD, req, ST_CUDA, cr, "cannot make the context of device %d current", dev);
	}
	probe_defer_setup(); /* before the first clone: no launch can have run one */
	enum { LOGSZ = 1 << 16 };
	char *elog = calloc(1, LOGSZ), *ilog = calloc(1, LOGSZ);
	/* verbose: the info log says each function's registers and spills,
	 * which the tool shows with -v (a probe that raises a kernel's
	 * registers can lower its occupancy) */
	CUjit_option o[5] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_INFO_LOG_BUFFER,
			     CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_LOG_VERBOSE};
	void *v[5] = {elog, (void *)(uintptr_t)LOGSZ, ilog, (void *)(uintptr_t)LOGSZ, (void *)(uintptr_t)1};
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	CUmodule mod = NULL;
	cr = D.cuModuleLoadDataEx(&mod, text, (elog && ilog) ? 5 : 0, o, v);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	free(text);
	uint64_t ns = (uint64_t)(t1.tv_sec - t0.tv_sec) * 1000000000ull + (uint64_t)(t1.tv_nsec - t0.tv_nsec);
	if (cr != CUDA_SUCCESS) {
		D.cuCtxSetCurrent(saved);
		struct wbuf e = {0};
		wb_i32(&e, ST_CUDA);
		wb_i32(&e, cr);
		char head[96];
		snprintf(head, sizeof(head), "the driver JIT rejected the PTX (CUresult %d): ", cr);
		wb_u32(&e, (uint32_t)(strlen(head) + (elog ? strnlen(elog, LOGSZ) : 0)));
		wb_raw(&e, head, strlen(head));
		if (elog)
			wb_raw(&e, elog, strnlen(elog, LOGSZ));
		free(elog);
		free(ilog);
		int rr = send_frame(s, OP_LOAD, req, &e);
		free(e.p);
		return rr;
	}
	struct clone *cl = calloc(1, sizeof(*cl));
	if (!cl) {
		D.cuModuleUnload(mod);
		D.cuCtxSetCurrent(saved);
		free(elog);
		free(ilog);
		return send_error(s, OP_LOAD, req, ST_INTERNAL, 0, "out of memory");
	}
	pthread_mutex_init(&cl->evmu, NULL);
	cl->mod = mod;
	cl->ctx = c;
	cl->owner = s;
	pthread_mutex_lock(&g_mu);
	cl->id = g_next_id++;
	pthread_mutex_unlock(&g_mu);
	wb_i32(w, ST_OK);
	wb_u64(w, cl->id);
	wb_u64(w, (uint64_t)(uintptr_t)c);
	wb_u64(w, ns);
	wb_str(w, ilog);
	wb_u32(w, nf);
	int missing = 0;
	char miss[256] = "";
	cl->fns = nf ? calloc(nf, sizeof(*cl->fns)) : NULL;
	for (uint32_t i = 0; i < nf; i++) {
		char *name = rb_str(r);
		CUfunction f = NULL;
		CUresult e = name ? D.cuModuleGetFunction(&f, mod, name) : CUDA_ERROR_INVALID_VALUE;
		if (e != CUDA_SUCCESS && !missing) {
			missing = 1;
			snprintf(miss, sizeof(miss), "%s", name ? name : "?");
		}
		if (cl->fns)
			cl->fns[cl->nfns++] = f;
		wb_str(w, name);
		wb_u64(w, (uint64_t)(uintptr_t)f);
		free(name);
	}
	free(elog);
	free(ilog);
	if (missing || r->err) {
		D.cuModuleUnload(mod);
		D.cuCtxSetCurrent(saved);
		clone_free(cl);
		if (r->err)
			return send_error(s, OP_LOAD, req, ST_BAD_REQUEST, 0, "malformed load request");
		return send_error(s, OP_LOAD, req, ST_NOT_FOUND, CUDA_ERROR_NOT_FOUND,
				  "the loaded PTX has no entry named %s", miss);
	}
	D.cuCtxSetCurrent(saved);
	cl->next = s->clones;
	s->clones = cl;
	probe_clone_add(cl);
	DBG("clone %llu loaded in %.2f ms", (unsigned long long)cl->id, ns / 1e6);
	return 1;
}

static struct clone *find_clone(struct session *s, uint64_t id, struct clone ***prev)
{
	for (struct clone **pp = &s->clones; *pp; pp = &(*pp)->next)
		if ((*pp)->id == id) {
			if (prev)
				*prev = pp;
			return *pp;
		}
	return NULL;
}

static int op_unload(struct session *s, uint32_t req, struct rbuf *r, struct wbuf *w)
{
	uint64_t id = rb_u64(r);
	struct clone **pp;
	struct clone *c = find_clone(s, id, &pp);
	if (r->err || !c)
		return send_error(s, OP_UNLOAD, req, ST_NOT_FOUND, 0, "no instrumented module %llu in this session",
				  (unsigned long long)id);
	/* drop activations that use it first */
	pthread_rwlock_wrlock(&g_rw);
	pthread_mutex_lock(&g_mu);
	struct activation **ap = &g_acts;
	while (*ap) {
		if ((*ap)->clone == c) {
			struct activation *a = *ap;
			*ap = a->next;
			free(a);
		} else {
			ap = &(*ap)->next;
		}
	}
	probe_rebuild();
	pthread_mutex_unlock(&g_mu);
	pthread_rwlock_unlock(&g_rw);
	*pp = c->next;
	CUcontext saved = NULL;
	D.cuCtxGetCurrent(&saved);
	clone_unload(c);
	D.cuCtxSetCurrent(saved);
	clone_free(c);
	wb_i32(w, ST_OK);
	return 1;
}

/* ring-drain (op 22): one round trip per drain of a GPU event ring in device
 * memory. The ring at RING is N shards: [N 256-byte control blocks][shard 0:
 * S data, T tail]...[shard N-1: S data, T tail]; the tool's mirror, region
 * G, has the same layout. In stream order: publish each shard's new
 * released position at its control block + 128 (from the mirror's copy of
 * that block, so the async copy reads pinned memory), copy the control
 * blocks to the mirror, then each shard's data of positions [release, R).
 * No wait for the application's launches: this is a live copy of a buffer
 * kernels write into, and the tool validates records. */
#define RING_CTRL 256u
#define RING_OFF_RESERVED 64u
#define RING_OFF_RELEASED 128u
#define RING_HOST_DATA 1u /* flag: the data area is the region itself */
#define RING_MAX_SHARDS 65536u


static uint64_t ld64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

/* When the session thread took the request being served off its socket. */
static __thread uint64_t t_req_recv;
/* When the session thread was last ready for a request (done with the one
 * before): a tool tells waiting for the agent from waiting for the socket. */
static __thread uint64_t t_ready;

/* Set once a batch was refused: every later drain copies one call at a time. */
static int g_batch_off;

/* A drain's copies, all in one direction. */
struct copies {
	CUdeviceptr *dst, *src;
	size_t *len;
	size_t n;
	int dtoh; /* device to host (else host to device) */
};

static void copies_add(struct copies *c, CUdeviceptr dst, CUdeviceptr src, size_t len)
{
	c->dst[c->n] = dst;
	c->src[c->n] = src;
	c->len[c->n] = len;
	c->n++;
}

/* Queues c's copies on st and empties c: in one call where the driver has
 * cuMemcpyBatchAsync (CUDA 12.8), else one call each. A batch runs after
 * earlier work on st as a whole, its copies in no order among themselves:
 * callers batch only copies that touch distinct bytes. Each driver call
 * made here takes the driver's locks the application's launches wait for,
 * so a drain of many shards wants few of them. */
static CUresult copies_queue(struct copies *c, int dev, CUstream st, uint32_t *calls)
{
	size_t n = c->n;
	c->n = 0;
	if (!n)
		return CUDA_SUCCESS;
	if (n > 1 && D.cuMemcpyBatchAsync && !__atomic_load_n(&g_batch_off, __ATOMIC_RELAXED)) {
		CUmemLocation d = {CU_MEM_LOCATION_TYPE_DEVICE, dev}, h = {CU_MEM_LOCATION_TYPE_HOST, 0};
		CUmemcpyAttributes at = {CU_MEMCPY_SRC_ACCESS_ORDER_STREAM, c->dtoh ? d : h, c->dtoh ? h : d, 0};
		size_t first = 0, fail = (size_t)-1;
		CUresult r = D.cuMemcpyBatchAsync(c->dst, c->src, c->len, n, &at, &first, 1, &fail, st);
		(*calls)++;
		if (r == CUDA_SUCCESS) {
			static int said;
			if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
				DBG("ring drains batch their copies (cuMemcpyBatchAsync)");
			return r;
		}
		/* refused: the same copies again, one at a time (should the
		 * driver have queued some of them, copying those twice gives the
		 * same bytes: positions we wrote, data we read) */
		DBG("cuMemcpyBatchAsync of %zu copies: CUresult %d (copy %zu); one call per copy from now on", n, (int)r,
		    fail);
		__atomic_store_n(&g_batch_off, 1, __ATOMIC_RELAXED);
	}
	for (size_t i = 0; i < n; i++) {
		CUresult r = c->dtoh ? D.cuMemcpyDtoHAsync((void *)(uintptr_t)c->dst[i], c->src[i], c->len[i], st)
				     : D.cuMemcpyHtoDAsync(c->dst[i], (const void *)(uintptr_t)c->src[i], c->len[i], st);
		(*calls)++;
		if (r != CUDA_SUCCESS)
			return r;
	}
	return CUDA_SUCCESS;
}

static int ring_drain(struct session *s, uint32_t req, int dev, CUstream st, struct rbuf *r, struct wbuf *w)
{
	uint64_t ring = rb_u64(r), rid = rb_u64(r), S = rb_u64(r), T = rb_u64(r);
	uint32_t flags = rb_u32(r), n = rb_u32(r);
	if (r->err)
		return send_error(s, OP_RING_DRAIN, req, ST_BAD_REQUEST, 0, "malformed ring-drain request");
	if (flags & ~RING_HOST_DATA)
		return send_error(s, OP_RING_DRAIN, req, ST_BAD_REQUEST, 0, "ring-drain: unknown flags 0x%x",
				  flags & ~RING_HOST_DATA);
	if (S < 4096 || S > (1ull << 40) || (S & (S - 1)))
		return send_error(s, OP_RING_DRAIN, req, ST_BAD_REQUEST, 0,
				  "ring-drain: data size %llu is not a power of two of at least 4096",
				  (unsigned long long)S);
	if ((T & 7) || T > (1ull << 30))
		return send_error(s, OP_RING_DRAIN, req, ST_BAD_REQUEST, 0,
				  "ring-drain: tail size %llu is not a multiple of 8", (unsigned long long)T);
	if (n == 0 || n > RING_MAX_SHARDS || (n & (n - 1)))
		return send_error(s, OP_RING_DRAIN, req, ST_BAD_REQUEST, 0,
				  "ring-drain: %u shards: want a power of two up to %u", n, RING_MAX_SHARDS);
	uint64_t total = (uint64_t)n * (RING_CTRL + S + T);
	struct region *g = s->regions;
	while (g && g->id != rid)
		g = g->next;
	if (!g)
		return send_error(s, OP_RING_DRAIN, req, ST_BAD_REQUEST, 0,
				  "ring-drain: no region %llu in this session", (unsigned long long)rid);
	if (g->size < total)
		return send_error(s, OP_RING_DRAIN, req, ST_BAD_REQUEST, 0,
				  "ring-drain: region %llu has %zu bytes, the ring needs %u x (256 + %llu + %llu)",
				  (unsigned long long)rid, g->size, n, (unsigned long long)S, (unsigned long long)T);
	if (!ring || (ring & 7) || ring > UINT64_MAX - total)
		return send_error(s, OP_RING_DRAIN, req, ST_BAD_REQUEST, 0, "ring-drain: bad ring address 0x%llx",
				  (unsigned long long)ring);
	uint8_t *mirror = g->host;
	/* the releases, and room for 2n copies (a shard's data may wrap) */
	uint64_t *rel = malloc((size_t)n * sizeof *rel);
	CUdeviceptr *ptrs = malloc((size_t)n * 4 * sizeof *ptrs);
	size_t *lens = malloc((size_t)n * 2 * sizeof *lens);
	if (!rel || !ptrs || !lens) {
		free(rel);
		free(ptrs);
		free(lens);
		return send_error(s, OP_RING_DRAIN, req, ST_INTERNAL, 0, "ring-drain: out of memory");
	}
	struct copies cp = {ptrs, ptrs + 2 * (size_t)n, lens, 0, 0};
	uint32_t calls = 0;
	/* Check every release before queueing anything: a released position
	 * only moves forward, and never past what the last drain saw reserved. */
	for (uint32_t i = 0; i < n; i++) {
		uint8_t *c = mirror + (uint64_t)i * RING_CTRL;
		uint64_t old = ld64(c + RING_OFF_RELEASED), seen = ld64(c + RING_OFF_RESERVED);
		rel[i] = rb_u64(r);
		if (!r->err && (rel[i] < old || rel[i] > seen)) {
			free(rel);
			free(ptrs);
			free(lens);
			return send_error(s, OP_RING_DRAIN, req, ST_BAD_REQUEST, 0,
					  "ring-drain: shard %u: release %llu must be in [released %llu, reserved %llu]", i,
					  (unsigned long long)rel[i], (unsigned long long)old, (unsigned long long)seen);
		}
	}
	if (r->err) {
		free(rel);
		free(ptrs);
		free(lens);
		return send_error(s, OP_RING_DRAIN, req, ST_BAD_REQUEST, 0, "malformed ring-drain request (releases)");
	}

	const char *what = NULL;
	CUresult cr = CUDA_SUCCESS;
	int queued = 0; /* work on st that must finish before we return */
	uint64_t start = mono_ns();
	for (uint32_t i = 0; i < n && cr == CUDA_SUCCESS; i++) {
		uint8_t *c = mirror + (uint64_t)i * RING_CTRL;
		if (rel[i] == ld64(c + RING_OFF_RELEASED))
			continue;
		/* the source must stay put until the copy ran: the mirror is
		 * pinned, and the control-block copy below overwrites it only
		 * after this one in stream order */
		memcpy(c + RING_OFF_RELEASED, &rel[i], 8);
		copies_add(&cp, ring + (uint64_t)i * RING_CTRL + RING_OFF_RELEASED,
			   (CUdeviceptr)(uintptr_t)(c + RING_OFF_RELEASED), 8);
	}
	if (cp.n) {
		what = "copying the released positions to the ring";
		cr = copies_queue(&cp, dev, st, &calls);
		queued = 1;
	}
	if (cr == CUDA_SUCCESS) {
		what = "cuMemcpyDtoHAsync of the ring's control blocks";
		cr = D.cuMemcpyDtoHAsync(mirror, ring, (size_t)n * RING_CTRL, st);
		calls++;
		queued = 1;
	}
	uint64_t wait = 0, t0;
	if (cr == CUDA_SUCCESS) {
		what = "cuStreamSynchronize after reading the ring's control blocks";
		t0 = mono_ns();
		cr = D.cuStreamSynchronize(st);
		calls++;
		wait += mono_ns() - t0;
		queued = 0;
	}
	uint64_t copied = 0;
	cp.dtoh = 1;
	for (uint32_t i = 0; i < n && cr == CUDA_SUCCESS && !(flags & RING_HOST_DATA); i++) {
		uint64_t R = ld64(mirror + (uint64_t)i * RING_CTRL + RING_OFF_RESERVED);
		if (R <= rel[i])
			continue;
		uint64_t off = (uint64_t)n * RING_CTRL + (uint64_t)i * (S + T);
		CUdeviceptr data = ring + off;
		CUdeviceptr md = (CUdeviceptr)(uintptr_t)(mirror + off);
		uint64_t len = R - rel[i] < S ? R - rel[i] : S;
		uint64_t a = rel[i] & (S - 1);
		if (a + len <= S) {
			copies_add(&cp, md + a, data + a, len);
			copied += len;
		} else {
			/* through the end of the tail (records that ran on into it),
			 * then the wrapped part from the start */
			uint64_t b = (rel[i] + len) & (S - 1);
			copies_add(&cp, md + a, data + a, S + T - a);
			if (b)
				copies_add(&cp, md, data, b);
			copied += S + T - a + b;
		}
	}
	if (cr == CUDA_SUCCESS && cp.n) {
		what = "copying the ring's data";
		cr = copies_queue(&cp, dev, st, &calls);
		queued = 1;
	}
	if (cr == CUDA_SUCCESS && queued) {
		what = "cuStreamSynchronize after copying the ring's data";
		t0 = mono_ns();
		cr = D.cuStreamSynchronize(st);
		calls++;
		wait += mono_ns() - t0;
		queued = 0;
	}
	free(rel);
	free(ptrs);
	free(lens);
	if (cr != CUDA_SUCCESS) {
		if (queued)
			D.cuStreamSynchronize(st); /* nothing of ours left in flight */
		DBG("ring-drain of 0x%llx: %s: CUresult %d (driver call %u of the drain)", (unsigned long long)ring, what,
		    (int)cr, calls);
		return send_error(s, OP_RING_DRAIN, req, ST_CUDA, cr, "ring-drain: %s failed", what);
	}
	wb_i32(w, ST_OK);
	wb_u64(w, copied);
	wb_u64(w, wait);
	/* from the request's arrival: the lock and context switch before the
	 * first copy count, so that a tool can tell the agent's share of a
	 * drain from the socket's */
	wb_u64(w, mono_ns() - (t_req_recv && t_req_recv < start ? t_req_recv : start));
	return 1;
}

static int op_mem(struct session *s, uint16_t op, uint32_t req, struct rbuf *r, struct wbuf *w)
{
	int dev = rb_i32(r);
	uint64_t ctx = rb_u64(r);
	if (r->err)
		return send_error(s, op, req, ST_BAD_REQUEST, 0, "malformed request");
	CUcontext saved = NULL, c = NULL;
	D.cuCtxGetCurrent(&saved);
	CUresult cr = use_ctx(s, dev, ctx, &c);
	if (cr != CUDA_SUCCESS) {
		D.cuCtxSetCurrent(saved);
		return send_error(s, op, req, ST_CUDA, cr, "cannot make the context of device %d current", dev);
	}
	int ret = 1;
	CUstream st = op_stream(s, c, &cr);
	if (!st) {
		D.cuCtxSetCurrent(saved);
		return send_error(s, op, req, ST_CUDA, cr, "cannot create the agent's stream on device %d", dev);
	}
	switch (op) {
	case OP_ALLOC: {
		uint64_t size = rb_u64(r);
		CUdeviceptr p = 0;
		struct alloc *a = calloc(1, sizeof(*a));
		if (r->err || !size || !a) {
			free(a);
			ret = send_error(s, op, req, ST_BAD_REQUEST, 0, "bad allocation size");
			break;
		}
		cr = D.cuMemAlloc(&p, size);
		if (cr == CUDA_SUCCESS)
			cr = D.cuMemsetD8Async(p, 0, size, st);
		if (cr == CUDA_SUCCESS)
			cr = D.cuStreamSynchronize(st);
		if (cr != CUDA_SUCCESS) {
			if (p)
				D.cuMemFree(p);
			free(a);
			ret = send_error(s, op, req, ST_CUDA, cr, "cuMemAlloc of %llu bytes failed",
					 (unsigned long long)size);
			break;
		}
		a->p = p;
		a->ctx = c;
		a->next = s->allocs;
		s->allocs = a;
		wb_i32(w, ST_OK);
		wb_u64(w, p);
		break;
	}
	case OP_FREE: {
		uint64_t p = rb_u64(r);
		struct alloc **pp = &s->allocs;
		while (*pp && (*pp)->p != p)
			pp = &(*pp)->next;
		if (!*pp) {
			ret = send_error(s, op, req, ST_NOT_FOUND, 0, "0x%llx was not allocated by this session",
					 (unsigned long long)p);
			break;
		}
		if (clones_pinned(s)) {
			ret = send_error(s, op, req, ST_UNSUPPORTED, 0,
					 "memory kept: a CUDA graph may still use the instrumented code");
			break;
		}
		struct alloc *a = *pp;
		*pp = a->next;
		clones_finish(s); /* launches that may use it finish first */
		D.cuCtxSetCurrent(a->ctx);
		cr = D.cuMemFree(a->p);
		free(a);
		if (cr != CUDA_SUCCESS) {
			ret = send_error(s, op, req, ST_CUDA, cr, "cuMemFree failed");
			break;
		}
		wb_i32(w, ST_OK);
		break;
	}
	case OP_MEMSET: {
		uint64_t p = rb_u64(r);
		uint32_t v = rb_u32(r);
		uint64_t n = rb_u64(r);
		if (r->err) {
			ret = send_error(s, op, req, ST_BAD_REQUEST, 0, "malformed memset request");
			break;
		}
		cr = D.cuMemsetD8Async(p, (unsigned char)v, n, st);
		if (cr == CUDA_SUCCESS)
			cr = D.cuStreamSynchronize(st);
		if (cr != CUDA_SUCCESS) {
			ret = send_error(s, op, req, ST_CUDA, cr, "cuMemsetD8 failed");
			break;
		}
		wb_i32(w, ST_OK);
		break;
	}
	case OP_WRITE: {
		uint64_t p = rb_u64(r);
		size_t n;
		const uint8_t *d = rb_bytes(r, &n);
		if (r->err) {
			ret = send_error(s, op, req, ST_BAD_REQUEST, 0, "malformed write request");
			break;
		}
		cr = n ? D.cuMemcpyHtoDAsync(p, d, n, st) : CUDA_SUCCESS;
		if (cr == CUDA_SUCCESS)
			cr = D.cuStreamSynchronize(st);
		if (cr != CUDA_SUCCESS) {
			ret = send_error(s, op, req, ST_CUDA, cr, "cuMemcpyHtoD failed");
			break;
		}
		wb_i32(w, ST_OK);
		break;
	}
	case OP_READ: {
		uint64_t p = rb_u64(r);
		uint32_t n = rb_u32(r);
		if (r->err || n > (16u << 20)) {
			ret = send_error(s, op, req, ST_BAD_REQUEST, 0, "read of at most 16 MiB at a time");
			break;
		}
		wb_i32(w, ST_OK);
		wb_u32(w, n);
		wb_need(w, n);
		if (w->oom) {
			ret = send_error(s, op, req, ST_INTERNAL, 0, "out of memory");
			break;
		}
		after_clone_launches(s, c, st);
		cr = n ? D.cuMemcpyDtoHAsync(w->p + w->n, p, n, st) : CUDA_SUCCESS;
		if (cr == CUDA_SUCCESS)
			cr = D.cuStreamSynchronize(st);
		if (cr != CUDA_SUCCESS) {
			DBG("read of %u bytes at 0x%llx: CUresult %d", n, (unsigned long long)p, (int)cr);
			ret = send_error(s, op, req, ST_CUDA, cr, "cuMemcpyDtoH failed");
			break;
		}
		w->n += n;
		break;
	}
	case OP_REGISTER_HOST: {
		uint32_t kind = rb_u32(r);
		uint64_t size = rb_u64(r), off = rb_u64(r);
		int fd = s->pending_fd;
		s->pending_fd = -1;
		if (r->err || fd < 0 || !size || (off & 4095) || kind < 1 || kind > 2) {
			if (fd >= 0)
				close(fd);
			ret = send_error(s, op, req, ST_BAD_REQUEST, 0,
					 fd < 0 ? "no file descriptor came with the request (SCM_RIGHTS)"
						: "bad kind, size or offset (offset must be page aligned)");
			break;
		}
		size_t ps = (size_t)sysconf(_SC_PAGESIZE);
		size_t msize = (size + ps - 1) & ~(ps - 1);
		void *h = mmap(NULL, msize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)off);
		int merr = errno;
		close(fd);
		if (h == MAP_FAILED) {
			ret = send_error(s, op, req, ST_INTERNAL, 0, "mmap of the %s failed: %s",
					 kind == 2 ? "BPF map (is it BPF_F_MMAPABLE?)" : "memfd", strerror(merr));
			break;
		}
		CUdeviceptr dp = 0;
		cr = D.cuMemHostRegister ? D.cuMemHostRegister(h, msize, CU_MEMHOSTREGISTER_DEVICEMAP |
									  CU_MEMHOSTREGISTER_PORTABLE)
					 : CUDA_ERROR_NOT_SUPPORTED;
		if (cr == CUDA_SUCCESS) {
			cr = D.cuMemHostGetDevicePointer(&dp, h, 0);
			if (cr != CUDA_SUCCESS)
				D.cuMemHostUnregister(h);
		}
		struct region *g = cr == CUDA_SUCCESS ? calloc(1, sizeof(*g)) : NULL;
		if (!g) {
			munmap(h, msize);
			ret = send_error(s, op, req, ST_CUDA, cr, "cuMemHostRegister/GetDevicePointer failed");
			break;
		}
		g->host = h;
		g->size = msize;
		g->dev = dp;
		g->ctx = c;
		g->registered = 1;
		pthread_mutex_lock(&g_mu);
		g->id = g_next_id++;
		pthread_mutex_unlock(&g_mu);
		g->next = s->regions;
		s->regions = g;
		wb_i32(w, ST_OK);
		wb_u64(w, g->id);
		wb_u64(w, dp);
		wb_u64(w, (uint64_t)(uintptr_t)h);
		break;
	}
	case OP_SNAPSHOT: {
		uint64_t src = rb_u64(r), rid = rb_u64(r), roff = rb_u64(r), n = rb_u64(r);
		uint32_t flags = rb_u32(r);
		struct region *g = s->regions;
		while (g && g->id != rid)
			g = g->next;
		if (r->err || !g || roff > g->size || n > g->size - roff || (flags & ~SNAPSHOT_LIVE)) {
			ret = send_error(s, op, req, ST_BAD_REQUEST, 0,
					 r->err || (flags & ~SNAPSHOT_LIVE) ? "malformed snapshot request"
									    : "no such region or range outside it");
			break;
		}
		/* live: what kernels wrote so far, with none of the application's
		 * queued work to wait behind, nor its deferred events to record */
		if (!(flags & SNAPSHOT_LIVE))
			after_clone_launches(s, c, st);
		cr = D.cuMemcpyDtoHAsync((uint8_t *)g->host + roff, src, n, st);
		if (cr == CUDA_SUCCESS)
			cr = D.cuStreamSynchronize(st);
		if (cr != CUDA_SUCCESS) {
			ret = send_error(s, op, req, ST_CUDA, cr, "cuMemcpyDtoH failed");
			break;
		}
		wb_i32(w, ST_OK);
		break;
	}
	case OP_RING_DRAIN:
		ret = ring_drain(s, req, dev, st, r, w);
		break;
	}
	D.cuCtxSetCurrent(saved);
	if (op == OP_RING_DRAIN && ret == 1) {
		wb_u64(w, t_req_recv);
		wb_u64(w, mono_ns());
		wb_u64(w, t_ready);
	}
	return ret;
}

static int op_unregister(struct session *s, uint32_t req, struct rbuf *r, struct wbuf *w)
{
	uint64_t id = rb_u64(r);
	struct region **pp = &s->regions;
	while (*pp && (*pp)->id != id)
		pp = &(*pp)->next;
	if (r->err || !*pp)
		return send_error(s, OP_UNREGISTER_HOST, req, ST_NOT_FOUND, 0, "no region %llu", (unsigned long long)id);
	if (clones_pinned(s))
		return send_error(s, OP_UNREGISTER_HOST, req, ST_UNSUPPORTED, 0,
				  "region kept: a CUDA graph may still use the instrumented code");
	struct region *g = *pp;
	*pp = g->next;
	/* Launches read launch-word slots in it with g_rw read-held: once the
	 * pointers are cleared under the write lock, none can be reading. */
	pthread_rwlock_wrlock(&g_rw);
	for (struct activation *a = g_acts; a; a = a->next)
		if (a->owner == s && a->region == id) {
			a->slots = NULL;
			a->region = 0;
		}
	probe_lw_refresh();
	pthread_rwlock_unlock(&g_rw);
	clones_finish(s);
	CUcontext saved = NULL;
	D.cuCtxGetCurrent(&saved);
	if (g->registered && D.cuCtxSetCurrent(g->ctx) == CUDA_SUCCESS)
		D.cuMemHostUnregister(g->host);
	D.cuCtxSetCurrent(saved);
	munmap(g->host, g->size);
	free(g);
	wb_i32(w, ST_OK);
	return 1;
}

/* Largest parameter list and packed buffer a launch-word clone may
 * declare (the driver's own limit is 32764 bytes of parameters). */
#define LW_MAX_PARAMS 32768u
#define LW_MAX_BUFOFF 32768u

static int op_activate(struct session *s, uint32_t req, struct rbuf *r, struct wbuf *w)
{
	uint64_t h = rb_u64(r), cid = rb_u64(r), fn = rb_u64(r);
	/* protocol 3: launch words (a request that ends here has none) */
	uint32_t hidden = 0, nparams = 0, bufoff = 0, nslots = 0;
	uint64_t rid = 0, soff = 0;
	if (!r->err && r->off < r->n) {
		hidden = rb_u32(r);
		nparams = rb_u32(r);
		bufoff = rb_u32(r);
		rid = rb_u64(r);
		soff = rb_u64(r);
		nslots = rb_u32(r);
	}
	if (r->err || !h || !fn)
		return send_error(s, OP_ACTIVATE, req, ST_BAD_REQUEST, 0, "malformed activate request");
	if (hidden != 0 && hidden != 2)
		return send_error(s, OP_ACTIVATE, req, ST_BAD_REQUEST, 0,
				  "activate: %u hidden launch words; the agent passes 0 or 2", hidden);
	if (hidden && (nparams > LW_MAX_PARAMS || bufoff > LW_MAX_BUFOFF || (bufoff & 7)))
		return send_error(s, OP_ACTIVATE, req, ST_BAD_REQUEST, 0,
				  "activate: bad launch-word layout (%u parameters, buffer offset %u: at most %u, "
				  "8-byte aligned)",
				  nparams, bufoff, LW_MAX_BUFOFF);
	if (rid && !hidden)
		return send_error(s, OP_ACTIVATE, req, ST_BAD_REQUEST, 0,
				  "activate: a launch-word region without hidden launch words");
	uint64_t *slots = NULL;
	if (rid) {
		struct region *g = s->regions;
		while (g && g->id != rid)
			g = g->next;
		if (!g)
			return send_error(s, OP_ACTIVATE, req, ST_BAD_REQUEST, 0,
					  "activate: no registered host region %llu in this session (launch-word slots)",
					  (unsigned long long)rid);
		if (!nslots || (nslots & (nslots - 1)))
			return send_error(s, OP_ACTIVATE, req, ST_BAD_REQUEST, 0,
					  "activate: %u launch-word slots; the count must be a power of two", nslots);
		uint64_t need = (uint64_t)nslots * LW_SLOT_BYTES;
		if ((soff & 7) || soff > g->size || need > g->size - soff)
			return send_error(s, OP_ACTIVATE, req, ST_BAD_REQUEST, 0,
					  "activate: %u launch-word slots at offset %llu do not fit region %llu of %zu "
					  "bytes (or the offset is not 8-byte aligned)",
					  nslots, (unsigned long long)soff, (unsigned long long)rid, g->size);
		slots = (uint64_t *)((uint8_t *)g->host + soff);
	}
	struct clone *c = find_clone(s, cid, NULL);
	if (!c)
		return send_error(s, OP_ACTIVATE, req, ST_NOT_FOUND, 0, "no instrumented module %llu in this session",
				  (unsigned long long)cid);
	pthread_mutex_lock(&g_mu);
	struct kernel *k = inv_kernel_by_handle((void *)(uintptr_t)h);
	int kind = k ? k->kind : 0;
	pthread_mutex_unlock(&g_mu);
	if (!k)
		return send_error(s, OP_ACTIVATE, req, ST_NOT_FOUND, 0,
				  "kernel handle 0x%llx is not known to the agent (list kernels first)",
				  (unsigned long long)h);
	/* Carry the original's dynamic shared memory opt-in over to the clone. */
	CUcontext saved = NULL;
	D.cuCtxGetCurrent(&saved);
	if (D.cuCtxSetCurrent(c->ctx) == CUDA_SUCCESS && D.cuFuncSetAttribute) {
		int v = 0;
		CUdevice dev = 0;
		if (kind == KK_KERNEL && D.cuKernelGetAttribute && D.cuCtxGetDevice && D.cuCtxGetDevice(&dev) == 0)
			D.cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (CUkernel)(uintptr_t)h,
					       dev);
		else if (kind == KK_FUNCTION && D.cuFuncGetAttribute)
			D.cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
					     (CUfunction)(uintptr_t)h);
		if (v > 0)
			D.cuFuncSetAttribute((CUfunction)(uintptr_t)fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
					     v);
	}
	D.cuCtxSetCurrent(saved);
	struct activation *a = calloc(1, sizeof(*a));
	if (!a)
		return send_error(s, OP_ACTIVATE, req, ST_INTERNAL, 0, "out of memory");
	a->handle = (void *)(uintptr_t)h;
	a->ctx = c->ctx;
	a->fn = (CUfunction)(uintptr_t)fn;
	a->clone = c;
	a->owner = s;
	a->hidden = hidden;
	a->nparams = nparams;
	a->bufoff = bufoff;
	a->nslots = nslots;
	a->region = rid;
	a->slots = slots;
	pthread_rwlock_wrlock(&g_rw);
	pthread_mutex_lock(&g_mu);
	/* One tool per kernel: a second tool's clone would silently take the
	 * launches from the first (the newest activation wins), so the first
	 * would stop counting mid-trace without knowing. */
	for (struct activation *o = g_acts; o; o = o->next) {
		if (o->owner != s && o->handle == a->handle && o->ctx == a->ctx) {
			char name[160];
			snprintf(name, sizeof(name), "%s", k->name ? k->name : "?");
			pthread_mutex_unlock(&g_mu);
			pthread_rwlock_unlock(&g_rw);
			free(a);
			return send_error(s, OP_ACTIVATE, req, ST_UNSUPPORTED, 0,
					  "kernel %s is already instrumented by another gpubpf tool attached to this "
					  "process; one tool per kernel: end the other tool, or trace other kernels "
					  "(--kernel)",
					  name);
		}
	}
	/* replace an earlier activation of the same handle in that context */
	struct activation **pp = &g_acts;
	while (*pp) {
		if ((*pp)->owner == s && (*pp)->handle == a->handle && (*pp)->ctx == a->ctx) {
			struct activation *old = *pp;
			*pp = old->next;
			free(old);
		} else {
			pp = &(*pp)->next;
		}
	}
	a->next = g_acts;
	g_acts = a;
	probe_rebuild();
	int on = g_active & ACTIVE_PROBES;
	pthread_mutex_unlock(&g_mu);
	pthread_rwlock_unlock(&g_rw);
	if (!on)
		return send_error(s, OP_ACTIVATE, req, ST_INTERNAL, 0, "out of memory for the probe table");
	wb_i32(w, ST_OK);
	return 1;
}

/* ---------------- clock (op 23) ---------------- */

/* The offset of the GPU's %globaltimer from CLOCK_MONOTONIC, by round
 * trips through a mailbox in mapped host memory: the host writes request i
 * (generation << 32 | i) to word 1, the kernel answers with its timer in
 * word 2 and i in word 3; the round with the shortest trip bounds the error.
 * Word 0 is "ready" (the generation). A kernel of an earlier call that ran
 * late (its call gave up) answers only its own generation, and it returns by
 * itself 200 ms after its last request, so nothing of ours spins forever. */
#define CLOCK_MAX_ROUNDS 64u
#define CLOCK_READY_NS 1000000000ull /* the kernel must start within 1 s */
#define CLOCK_ROUND_NS 100000000ull  /* and answer each request within 100 ms */

static const char clock_ptx[] =
	".version 6.0\n"
	".target sm_50\n"
	".address_size 64\n"
	"\n"
	".visible .entry gpubpf_clock(.param .u64 gpubpf_clock_mb, .param .u32 gpubpf_clock_rounds,\n"
	"\t.param .u32 gpubpf_clock_gen)\n"
	"{\n"
	"\t.reg .pred %p<4>;\n"
	"\t.reg .b32 %r<4>;\n"
	"\t.reg .b64 %rd<10>;\n"
	"\tld.param.u64 %rd1, [gpubpf_clock_mb];\n"
	"\tld.param.u32 %r1, [gpubpf_clock_rounds];\n"
	"\tld.param.u32 %r2, [gpubpf_clock_gen];\n"
	"\tcvta.to.global.u64 %rd1, %rd1;\n"
	"\tcvt.u64.u32 %rd2, %r2;\n"
	"\tshl.b64 %rd3, %rd2, 32;\n"
	"\tmov.u64 %rd4, %globaltimer;\n"
	"\tst.volatile.global.u64 [%rd1], %rd2;\n"
	"\tmembar.sys;\n"
	"\tmov.u32 %r3, 1;\n"
	"NEXT:\n"
	"\tsetp.gt.u32 %p1, %r3, %r1;\n"
	"\t@%p1 bra DONE;\n"
	"\tcvt.u64.u32 %rd5, %r3;\n"
	"\tor.b64 %rd5, %rd5, %rd3;\n"
	"WAIT:\n"
	"\tld.volatile.global.u64 %rd6, [%rd1+8];\n"
	"\tsetp.eq.u64 %p2, %rd6, %rd5;\n"
	"\t@%p2 bra ANSWER;\n"
	"\tmov.u64 %rd7, %globaltimer;\n"
	"\tsub.u64 %rd8, %rd7, %rd4;\n"
	"\tsetp.gt.u64 %p3, %rd8, 200000000;\n"
	"\t@%p3 bra DONE;\n"
	"\tbra.uni WAIT;\n"
	"ANSWER:\n"
	"\tmov.u64 %rd7, %globaltimer;\n"
	"\tst.volatile.global.u64 [%rd1+16], %rd7;\n"
	"\tmembar.sys;\n"
	"\tst.volatile.global.u64 [%rd1+24], %rd5;\n"
	"\tmembar.sys;\n"
	"\tmov.u64 %rd4, %rd7;\n"
	"\tadd.u32 %r3, %r3, 1;\n"
	"\tbra.uni NEXT;\n"
	"DONE:\n"
	"\tret;\n"
	"}\n";

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

/* Frees a context's clock kernel, stream and mailbox, unless a kernel of a
 * call that gave up may still poll the mailbox: then all of it stays (a
 * page and a tiny module), never freed under a running kernel. */
static void clk_release(struct clk *k)
{
	if (!k->st)
		return;
	CUcontext saved = NULL;
	D.cuCtxGetCurrent(&saved);
	int busy = 0;
	if (D.cuCtxSetCurrent(k->ctx) == CUDA_SUCCESS)
		busy = D.cuStreamQuery(k->st) == CUDA_ERROR_NOT_READY;
	if (busy) {
		DBG("clock kernel still queued or running: its mailbox and module are left in place");
	} else {
		D.cuStreamDestroy(k->st);
		D.cuModuleUnload(k->mod);
		D.cuMemHostUnregister(k->mb);
		munmap(k->mb, k->mbsize);
	}
	D.cuCtxSetCurrent(saved);
	memset(k, 0, sizeof(*k));
}

/* The session's clock kernel in the current context c, set up at first use.
 * On failure *err and *what say why (log: the JIT's error log, if any). */
static struct clk *clk_get(struct session *s, CUcontext c, int *fresh, CUresult *err, const char **what, char *log,
			   size_t logsz)
{
	int free_i = -1;
	for (int i = 0; i < 16; i++) {
		if (s->clocks[i].st && s->clocks[i].ctx == c) {
			*fresh = 0;
			return &s->clocks[i];
		}
		if (!s->clocks[i].st && free_i < 0)
			free_i = i;
	}
	*fresh = 1;
	if (free_i < 0) {
		*err = CUDA_ERROR_NOT_SUPPORTED;
		*what = "a clock kernel in more than 16 contexts";
		return NULL;
	}
	struct clk n = {0};
	n.ctx = c;
	n.mbsize = (size_t)sysconf(_SC_PAGESIZE);
	/* our own memory rather than cuMemHostAlloc's: a context the
	 * application destroys cannot free it while we still point at it */
	void *mb = mmap(NULL, n.mbsize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mb == MAP_FAILED) {
		*err = CUDA_ERROR_OUT_OF_MEMORY;
		*what = "mmap of the clock mailbox";
		return NULL;
	}
	*what = "cuMemHostRegister of the clock mailbox";
	CUresult cr = D.cuMemHostRegister(mb, n.mbsize, CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE);
	if (cr == CUDA_SUCCESS) {
		*what = "cuMemHostGetDevicePointer of the clock mailbox";
		cr = D.cuMemHostGetDevicePointer(&n.dmb, mb, 0);
		if (cr != CUDA_SUCCESS)
			D.cuMemHostUnregister(mb);
	}
	if (cr != CUDA_SUCCESS) {
		munmap(mb, n.mbsize);
		*err = cr;
		return NULL;
	}
	n.mb = mb;
	CUjit_option o[2] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
	void *v[2] = {log, (void *)(uintptr_t)logsz};
	*what = "the driver JIT of the clock kernel";
	cr = D.cuModuleLoadDataEx(&n.mod, clock_ptx, log && logsz ? 2 : 0, o, v);
	if (cr == CUDA_SUCCESS) {
		*what = "cuModuleGetFunction of the clock kernel";
		cr = D.cuModuleGetFunction(&n.fn, n.mod, "gpubpf_clock");
	}
	if (cr == CUDA_SUCCESS) {
		*what = "cuStreamCreate for the clock kernel";
		cr = D.cuStreamCreate(&n.st, CU_STREAM_NON_BLOCKING);
	}
	if (cr != CUDA_SUCCESS) {
		if (n.mod)
			D.cuModuleUnload(n.mod);
		D.cuMemHostUnregister(mb);
		munmap(mb, n.mbsize);
		*err = cr;
		return NULL;
	}
	s->clocks[free_i] = n;
	return &s->clocks[free_i];
}

/* Runs the handshake in the current context c. */
static int clock_run(struct session *s, uint32_t req, CUcontext c, uint32_t rounds, struct wbuf *w)
{
	struct clk *k;
	uint32_t gen;
	for (int attempt = 0;; attempt++) {
		int fresh = 0;
		const char *what = "";
		char log[256] = "";
		CUresult cr = CUDA_SUCCESS;
		k = clk_get(s, c, &fresh, &cr, &what, log, sizeof(log));
		if (!k)
			return send_error(s, OP_CLOCK, req, ST_CUDA, cr, "clock: %s failed%s%.256s", what,
					  log[0] ? ": " : "", log);
		if (++k->gen == 0)
			k->gen = 1;
		gen = k->gen;
		for (int i = 0; i < 4; i++)
			__atomic_store_n(&k->mb[i], 0, __ATOMIC_RELAXED);
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		void *args[3] = {&k->dmb, &rounds, &gen};
		cr = D.cuLaunchKernel(k->fn, 1, 1, 1, 1, 1, 1, 0, k->st, args, NULL);
		if (cr == CUDA_SUCCESS)
			break;
		/* the context these were made in may be gone (and its handle
		 * reused): set up afresh, once */
		clk_release(k);
		if (fresh || attempt)
			return send_error(s, OP_CLOCK, req, ST_CUDA, cr, "clock: cannot launch the clock kernel");
	}
	uint64_t t0 = mono_ns();
	while (__atomic_load_n(&k->mb[0], __ATOMIC_ACQUIRE) != gen) {
		CUresult q = D.cuStreamQuery(k->st);
		if (q == CUDA_SUCCESS && __atomic_load_n(&k->mb[0], __ATOMIC_ACQUIRE) != gen)
			return send_error(s, OP_CLOCK, req, ST_INTERNAL, 0, "clock: the clock kernel ended without answering");
		if (q != CUDA_SUCCESS && q != CUDA_ERROR_NOT_READY)
			return send_error(s, OP_CLOCK, req, ST_CUDA, q, "clock: the clock kernel failed");
		if (mono_ns() - t0 > CLOCK_READY_NS)
			return send_error(s, OP_CLOCK, req, ST_INTERNAL, 0,
					  "the GPU did not start the clock kernel within 1 s: it is busy; try again");
		struct timespec d = {0, 20000};
		nanosleep(&d, NULL);
	}
	uint64_t best = UINT64_MAX, bt1 = 0, bt2 = 0, bg = 0;
	for (uint32_t i = 1; i <= rounds; i++) {
		uint64_t want = (uint64_t)gen << 32 | i;
		uint64_t t1 = mono_ns();
		__atomic_store_n(&k->mb[1], want, __ATOMIC_RELEASE);
		for (uint32_t spin = 1; __atomic_load_n(&k->mb[3], __ATOMIC_ACQUIRE) != want; spin++) {
			if (!(spin & 255) && mono_ns() - t1 > CLOCK_ROUND_NS)
				return send_error(s, OP_CLOCK, req, ST_INTERNAL, 0,
						  "clock: the clock kernel stopped answering in round %u of %u (the GPU "
						  "is busy?); try again",
						  i, rounds);
			cpu_relax();
		}
		uint64_t t2 = mono_ns();
		uint64_t g = __atomic_load_n(&k->mb[2], __ATOMIC_RELAXED);
		if (t2 - t1 < best) {
			best = t2 - t1;
			bt1 = t1;
			bt2 = t2;
			bg = g;
		}
	}
	uint64_t mid = bt1 + (bt2 - bt1) / 2;
	wb_i32(w, ST_OK);
	wb_u64(w, bg - mid); /* int64: globaltimer - CLOCK_MONOTONIC */
	wb_u64(w, (bt2 - bt1 + 1) / 2);
	wb_u64(w, mid);
	return 1;
}

static int op_clock(struct session *s, uint32_t req, struct rbuf *r, struct wbuf *w)
{
	int dev = rb_i32(r);
	uint64_t ctx = rb_u64(r);
	uint32_t rounds = rb_u32(r);
	if (r->err)
		return send_error(s, OP_CLOCK, req, ST_BAD_REQUEST, 0, "malformed clock request");
	if (rounds < 1 || rounds > CLOCK_MAX_ROUNDS)
		return send_error(s, OP_CLOCK, req, ST_BAD_REQUEST, 0, "clock: %u rounds; ask for 1 to %u", rounds,
				  CLOCK_MAX_ROUNDS);
	if (!D.cuLaunchKernel || !D.cuStreamQuery || !D.cuMemHostRegister || !D.cuMemHostUnregister ||
	    !D.cuMemHostGetDevicePointer)
		return send_error(s, OP_CLOCK, req, ST_UNSUPPORTED, 0,
				  "clock: the driver lacks cuLaunchKernel, cuStreamQuery or cuMemHostRegister");
	CUcontext saved = NULL, c = NULL;
	D.cuCtxGetCurrent(&saved);
	CUresult cr = use_ctx(s, dev, ctx, &c);
	if (cr != CUDA_SUCCESS) {
		D.cuCtxSetCurrent(saved);
		return send_error(s, OP_CLOCK, req, ST_CUDA, cr, "cannot make the context of device %d current", dev);
	}
	int ret = clock_run(s, req, c, rounds, w);
	D.cuCtxSetCurrent(saved);
	return ret;
}

/* ---------------- launch (op 24, direct mode only) ---------------- */

#define LAUNCH_MAX_PARAMS 32764u    /* the driver's own limit on a kernel's parameters */
#define LAUNCH_DEFAULT_MS 60000u    /* a request's timeout 0 */
#define LAUNCH_MAX_MS 86400000u

/* The clone of this session that resolved function fn, if any. */
static struct clone *clone_of_function(struct session *s, uint64_t fn)
{
	for (struct clone *c = s->clones; c; c = c->next)
		for (uint32_t i = 0; i < c->nfns; i++)
			if ((uint64_t)(uintptr_t)c->fns[i] == fn)
				return c;
	return NULL;
}

/* Launches a function the tool loaded, on the session's own stream, and
 * waits for it: events around it time the kernel; the wait polls, so that
 * a kernel that never ends costs the tool its timeout, not the session. A
 * kernel that faults leaves the context unusable: the tool ends the run. */
static int launch_run(struct session *s, uint32_t req, CUcontext c, CUfunction f, const uint32_t g[3],
		      const uint32_t b[3], uint32_t shmem, const uint8_t *params, size_t plen, uint32_t ms,
		      struct wbuf *w)
{
	CUresult cr;
	CUstream st = op_stream(s, c, &cr);
	if (!st)
		return send_error(s, OP_LAUNCH, req, ST_CUDA, cr, "launch: cannot create the agent's stream");
	CUevent e0 = NULL, e1 = NULL;
	const char *what = "cuEventCreate";
	cr = D.cuEventCreate(&e0, 0);
	if (cr == CUDA_SUCCESS)
		cr = D.cuEventCreate(&e1, 0);
	if (cr == CUDA_SUCCESS) {
		what = "cuEventRecord";
		cr = D.cuEventRecord(e0, st);
	}
	/* The packed buffer goes by `extra`, as the driver takes one the
	 * tool built without knowing the kernel's parameter list. */
	void *buf = NULL;
	size_t bsz = plen;
	void *extra[5] = {CU_LAUNCH_PARAM_BUFFER_POINTER, NULL, CU_LAUNCH_PARAM_BUFFER_SIZE, &bsz, CU_LAUNCH_PARAM_END};
	if (cr == CUDA_SUCCESS && plen) {
		if (posix_memalign(&buf, 16, plen) != 0) {
			buf = NULL;
			cr = CUDA_ERROR_OUT_OF_MEMORY;
			what = "allocating the parameter buffer";
		} else {
			memcpy(buf, params, plen);
			extra[1] = buf;
		}
	}
	uint64_t t0 = mono_ns();
	int refused = 0;
	if (cr == CUDA_SUCCESS) {
		cr = D.cuLaunchKernel(f, g[0], g[1], g[2], b[0], b[1], b[2], shmem, st, NULL, plen ? extra : NULL);
		refused = cr != CUDA_SUCCESS;
	}
	if (cr == CUDA_SUCCESS) {
		what = "cuEventRecord";
		cr = D.cuEventRecord(e1, st);
	}
	free(buf);
	CUresult q = cr;
	uint64_t wall = 0, sleep_ns = 10000;
	if (cr == CUDA_SUCCESS) {
		while ((q = D.cuEventQuery(e1)) == CUDA_ERROR_NOT_READY) {
			wall = mono_ns() - t0;
			if (wall > (uint64_t)ms * 1000000ull)
				break;
			struct timespec d = {0, (long)sleep_ns};
			nanosleep(&d, NULL);
			if (sleep_ns < 1000000)
				sleep_ns *= 2;
		}
		wall = mono_ns() - t0;
	}
	float gpu_ms = 0;
	int timed = q == CUDA_SUCCESS && D.cuEventElapsedTime(&gpu_ms, e0, e1) == CUDA_SUCCESS;
	/* Destroying an event still pending is allowed: the driver frees it
	 * once the work before it completes. */
	if (e0)
		D.cuEventDestroy(e0);
	if (e1)
		D.cuEventDestroy(e1);
	if (cr != CUDA_SUCCESS) {
		if (refused)
			return send_error(s, OP_LAUNCH, req, ST_CUDA, cr,
					  "cuLaunchKernel refused grid (%u,%u,%u) block (%u,%u,%u) with %u bytes of dynamic "
					  "shared memory",
					  g[0], g[1], g[2], b[0], b[1], b[2], shmem);
		return send_error(s, OP_LAUNCH, req, ST_CUDA, cr, "launch: %s failed", what);
	}
	if (q == CUDA_ERROR_NOT_READY)
		return send_error(s, OP_LAUNCH, req, ST_CUDA, q,
				  "the kernel did not finish within %u ms; it still runs until its process ends", ms);
	if (q != CUDA_SUCCESS)
		return send_error(s, OP_LAUNCH, req, ST_CUDA, q,
				  "the kernel failed while running (CUresult %d); the context cannot be used any more", q);
	wb_i32(w, ST_OK);
	wb_u64(w, timed ? (uint64_t)((double)gpu_ms * 1e6) : wall); /* kernel time, ns */
	wb_u64(w, wall);
	wb_u32(w, (uint32_t)timed);
	return 1;
}

static int op_launch(struct session *s, uint32_t req, struct rbuf *r, struct wbuf *w)
{
	int dev = rb_i32(r);
	uint64_t ctx = rb_u64(r), fn = rb_u64(r);
	uint32_t g[3], b[3];
	for (int i = 0; i < 3; i++)
		g[i] = rb_u32(r);
	for (int i = 0; i < 3; i++)
		b[i] = rb_u32(r);
	uint32_t shmem = rb_u32(r);
	size_t plen = 0;
	const uint8_t *params = rb_bytes(r, &plen);
	uint32_t ms = rb_u32(r);
	if (r->err)
		return send_error(s, OP_LAUNCH, req, ST_BAD_REQUEST, 0, "malformed launch request");
	if (!g[0] || !g[1] || !g[2] || !b[0] || !b[1] || !b[2])
		return send_error(s, OP_LAUNCH, req, ST_BAD_REQUEST, 0,
				  "launch: grid (%u,%u,%u) block (%u,%u,%u): every dimension must be at least 1", g[0], g[1],
				  g[2], b[0], b[1], b[2]);
	if (plen > LAUNCH_MAX_PARAMS)
		return send_error(s, OP_LAUNCH, req, ST_BAD_REQUEST, 0,
				  "launch: %zu bytes of parameters; the driver takes at most %u", plen, LAUNCH_MAX_PARAMS);
	if (!ms)
		ms = LAUNCH_DEFAULT_MS;
	if (ms > LAUNCH_MAX_MS)
		return send_error(s, OP_LAUNCH, req, ST_BAD_REQUEST, 0, "launch: timeout %u ms; at most %u", ms,
				  LAUNCH_MAX_MS);
	if (!D.cuLaunchKernel || !D.cuEventCreate || !D.cuEventRecord || !D.cuEventQuery || !D.cuEventElapsedTime ||
	    !D.cuEventDestroy)
		return send_error(s, OP_LAUNCH, req, ST_UNSUPPORTED, 0,
				  "launch: the driver lacks cuLaunchKernel or the cuEvent entry points");
	struct clone *cl = clone_of_function(s, fn);
	if (!fn || !cl)
		return send_error(s, OP_LAUNCH, req, ST_NOT_FOUND, 0,
				  "launch: function 0x%llx was not loaded by this session (op load returns the handles)",
				  (unsigned long long)fn);
	CUcontext saved = NULL, c = NULL;
	D.cuCtxGetCurrent(&saved);
	CUresult cr = use_ctx(s, dev, ctx, &c);
	if (cr != CUDA_SUCCESS) {
		D.cuCtxSetCurrent(saved);
		return send_error(s, OP_LAUNCH, req, ST_CUDA, cr, "cannot make the context of device %d current", dev);
	}
	int ret;
	if (c != cl->ctx)
		ret = send_error(s, OP_LAUNCH, req, ST_BAD_REQUEST, 0,
				 "launch: function 0x%llx was loaded in another context than the request's target",
				 (unsigned long long)fn);
	else
		ret = launch_run(s, req, c, (CUfunction)(uintptr_t)fn, g, b, shmem, params, plen, ms, w);
	D.cuCtxSetCurrent(saved);
	return ret;
}

static void op_stats_one(struct wbuf *w, struct activation *a)
{
	wb_u64(w, (uint64_t)(uintptr_t)a->handle);
	wb_u64(w, a->clone ? a->clone->id : a->clone_id);
	wb_u64(w, (uint64_t)(uintptr_t)a->ctx);
	wb_u64(w, __atomic_load_n(&a->launches, __ATOMIC_RELAXED));
	wb_u64(w, __atomic_load_n(&a->failures, __ATOMIC_RELAXED));
	wb_i32(w, a->last_err);
	wb_u32(w, (uint32_t)__atomic_load_n(&a->disabled, __ATOMIC_RELAXED));
}

/* The session's probes, live and retired (a kernel probed again after a
 * deactivate appears twice: the tool adds them up). */
static void op_stats(struct session *s, struct wbuf *w)
{
	pthread_rwlock_rdlock(&g_rw);
	pthread_mutex_lock(&g_mu); /* the retired list */
	uint32_t n = 0;
	for (struct activation *a = g_acts; a; a = a->next)
		if (a->owner == s)
			n++;
	for (struct activation *a = s->retired; a; a = a->next)
		n++;
	wb_i32(w, ST_OK);
	wb_u32(w, n);
	for (struct activation *a = s->retired; a; a = a->next)
		op_stats_one(w, a);
	for (struct activation *a = g_acts; a; a = a->next) {
		if (a->owner != s)
			continue;
		op_stats_one(w, a);
	}
	pthread_mutex_unlock(&g_mu);
	pthread_rwlock_unlock(&g_rw);
}

static int handle(struct session *s, uint16_t type, uint32_t req, uint8_t *body, uint32_t len)
{
	struct rbuf r = {body, len, 0, 0};
	struct wbuf w = {0};
	int ret = 0;
	DBG("request %u (%u bytes)", type, len);
	if (D.ready && D.cuThreadExchangeStreamCaptureMode) {
		/* the app may be capturing a graph in global mode: our calls
		 * must neither fail nor invalidate its capture */
		int mode = 2; /* CU_STREAM_CAPTURE_MODE_RELAXED */
		D.cuThreadExchangeStreamCaptureMode(&mode);
	}
	if (!s->hello && type != OP_HELLO)
		return send_error(s, type, req, ST_BAD_REQUEST, 0, "say hello first");
	if (type == OP_LAUNCH && !g_direct)
		return send_error(s, type, req, ST_UNSUPPORTED, 0,
				  "launch runs a tool's own kernels, which the agent does only as the host process of a "
				  "direct run (gpubpf run --direct), never inside an application");
	if (type != OP_HELLO && type != OP_LIST && type != OP_FETCH && type != OP_STATS && type != OP_CONTINUE && type != OP_DEVICE_READY &&
	    type != OP_RELEASE_UNLOAD &&
	    type != OP_DEACTIVATE && type != OP_DETACH && type != OP_LAUNCH_EVENTS && drv_init() != 0) {
		if (g_direct)
			return send_error(s, type, req, ST_UNSUPPORTED, CUDA_ERROR_NOT_INITIALIZED, "%s",
					  g_direct_err[0] ? g_direct_err : "the CUDA driver could not be initialised");
		return send_error(s, type, req, ST_UNSUPPORTED, CUDA_ERROR_NOT_INITIALIZED,
				  "the process has not initialised CUDA yet");
	}
	switch (type) {
	case OP_HELLO:
		op_hello(s, &r, &w);
		break;
	case OP_LIST:
		op_list(s, &r, &w);
		break;
	case OP_FETCH:
		ret = op_fetch(s, req, &r, &w);
		break;
	case OP_GLOBALS:
		ret = op_globals(s, req, &r, &w);
		break;
	case OP_LOAD:
		ret = op_load(s, req, &r, &w);
		break;
	case OP_UNLOAD:
		ret = op_unload(s, req, &r, &w);
		break;
	case OP_ALLOC:
	case OP_FREE:
	case OP_MEMSET:
	case OP_WRITE:
	case OP_READ:
	case OP_REGISTER_HOST:
	case OP_SNAPSHOT:
	case OP_RING_DRAIN:
		ret = op_mem(s, type, req, &r, &w);
		break;
	case OP_UNREGISTER_HOST:
		ret = op_unregister(s, req, &r, &w);
		break;
	case OP_ACTIVATE:
		ret = op_activate(s, req, &r, &w);
		break;
	case OP_CLOCK:
		ret = op_clock(s, req, &r, &w);
		break;
	case OP_LAUNCH:
		ret = op_launch(s, req, &r, &w);
		break;
	case OP_DEACTIVATE: {
		uint64_t h = rb_u64(&r);
		int n = deactivate(s, (void *)(uintptr_t)h);
		wb_i32(&w, ST_OK);
		wb_u32(&w, (uint32_t)n);
		break;
	}
	case OP_DETACH:
		detach_all(s);
		wb_i32(&w, ST_OK);
		break;
	case OP_STATS:
		op_stats(s, &w);
		break;
	case OP_CONTINUE: {
		uint64_t id = rb_u64(&r);
		pthread_mutex_lock(&g_mu);
		if (id > s->acked_mod)
			s->acked_mod = id;
		pthread_cond_broadcast(&g_cond);
		pthread_mutex_unlock(&g_mu);
		wb_i32(&w, ST_OK);
		break;
	}
	case OP_DEVICE_READY: {
		uint32_t ord = rb_u32(&r);
		if (r.err || ord >= 64) {
			ret = send_error(s, type, req, ST_BAD_REQUEST, 0, "device-ready: bad device ordinal");
			break;
		}
		pthread_mutex_lock(&g_mu);
		s->acked_dev |= 1ULL << ord;
		pthread_cond_broadcast(&g_cond);
		pthread_mutex_unlock(&g_mu);
		wb_i32(&w, ST_OK);
		break;
	}
	case OP_LAUNCH_EVENTS: {
		/* u64 size and the ring's fd: every launch from now on is a
		 * record (events.c); size 0: no more. The reply's attach_ns
		 * (protocol 7) tells the tool from when it has them all. */
		uint64_t size = rb_u64(&r);
		int fd = s->pending_fd;
		s->pending_fd = -1;
		if (r.err) {
			if (fd >= 0)
				close(fd);
			ret = send_error(s, type, req, ST_BAD_REQUEST, 0, "malformed launch-events request");
			break;
		}
		if (size == 0) {
			if (fd >= 0)
				close(fd);
			lev_detach(s);
			wb_i32(&w, ST_OK);
			break;
		}
		if (fd < 0) {
			ret = send_error(s, type, req, ST_BAD_REQUEST, 0, "launch-events: no ring fd came with the request");
			break;
		}
		char why[256];
		uint64_t attach_ns = 0;
		int rc = lev_attach(s, fd, size, why, sizeof(why), &attach_ns);
		close(fd); /* the mapping keeps the memory */
		if (rc != 0) {
			ret = send_error(s, type, req, ST_UNSUPPORTED, 0, "%s", why);
			break;
		}
		wb_i32(&w, ST_OK);
		wb_u64(&w, attach_ns);
		break;
	}
	case OP_RELEASE_UNLOAD: {
		uint64_t id = rb_u64(&r);
		/* Reply first: releasing the exit hold lets the process exit,
		 * and the tool would then see EOF instead of its answer. */
		wb_i32(&w, ST_OK);
		ret = w.oom ? -1 : send_frame(s, type, req, &w);
		free(w.p);
		pthread_mutex_lock(&g_mu);
		s->acked_unload = id;
		pthread_cond_broadcast(&g_cond);
		pthread_mutex_unlock(&g_mu);
		return ret < 0 ? -1 : 0;
	}
	default:
		ret = send_error(s, type, req, ST_UNSUPPORTED, 0, "unknown operation %u (agent %s, protocol %u)", type,
				 AGENT_VERSION, PROTO_VERSION);
	}
	/* ret: 0 or 1, the reply is in w; REPLIED, an error went out instead
	 * (and nothing more may: one reply per request); < 0, the connection
	 * failed. */
	if (ret >= 0 && ret != REPLIED)
		ret = w.oom ? send_error(s, type, req, ST_INTERNAL, 0, "reply too large or out of memory")
			    : send_frame(s, type, req, &w);
	free(w.p);
	return ret < 0 ? -1 : 0;
}

/* Sends module-loaded and probe-failed notifications that are due. */
static int flush_notes(struct session *s)
{
	for (;;) {
		struct wbuf w = {0};
		int have = 0;
		pthread_mutex_lock(&g_mu);
		for (size_t i = 0; i < g_nmods; i++)
			if (g_mods[i].id > s->sent_mod) {
				put_module(&w, &g_mods[i]);
				s->sent_mod = g_mods[i].id;
				have = NOTE_MODULE;
				break;
			}
		int dev = -1;
		if (!have && (g_dev_used & ~s->sent_dev)) {
			dev = __builtin_ctzll(g_dev_used & ~s->sent_dev);
			s->sent_dev |= 1ULL << dev;
			have = NOTE_DEVICE;
		}
		if (!have && s->unload_pending) {
			s->unload_pending = 0;
			wb_u64(&w, s->unload_id);
			have = NOTE_UNLOADING;
		}
		if (!have && s->late_new) {
			wb_u32(&w, s->late_new);
			wb_str(&w, s->late_obj);
			s->late_new = 0;
			have = NOTE_LATE_TABLES;
		}
		if (!have && s->nfail) {
			s->nfail--;
			wb_u64(&w, s->fails[s->nfail].handle);
			wb_i32(&w, s->fails[s->nfail].err);
			have = NOTE_PROBE_FAILED;
		}
		pthread_mutex_unlock(&g_mu);
		if (!have) {
			free(w.p);
			return 0;
		}
		if (have == NOTE_DEVICE) {
			CUdevice d = 0;
			char name[256] = "";
			int maj = 0, min = 0;
			if (D.cuDeviceGet(&d, dev) == CUDA_SUCCESS) {
				if (D.cuDeviceGetName)
					D.cuDeviceGetName(name, sizeof(name), d);
				if (D.cuDeviceGetAttribute) {
					D.cuDeviceGetAttribute(&maj, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d);
					D.cuDeviceGetAttribute(&min, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d);
				}
			}
			wb_i32(&w, dev);
			wb_str(&w, name);
			wb_i32(&w, maj);
			wb_i32(&w, min);
		}
		int r = send_frame(s, (uint16_t)have, 0, &w);
		free(w.p);
		if (r < 0)
			return -1;
	}
}

/* ---------------- the driver's lock ---------------- */

/* The driver takes a lock shared for launches and exclusively for memory
 * operations, and lets new sharers in while a writer waits: a program that
 * launches back to back from many threads starves a tool's request (seen on
 * the H100: an allocation not done after 30 s with 8 launching threads,
 * fault case 2d). So while a request has been in the driver for GATE_AFTER_NS,
 * each launching thread pauses for at most GATE_WAIT_NS, at most once every
 * GATE_EVERY_NS: the lock comes free, and a program's launch rate loses at
 * most a tenth while a request takes long (a JIT, a wait for its kernels). */
#define GATE_AFTER_NS 2000000ull
#define GATE_WAIT_NS 2000000ull
#define GATE_EVERY_NS 20000000ull
static uint64_t g_req_since; /* when the request in the driver began (0: none) */
static int g_req_busy;       /* requests being served */
static __thread uint64_t t_gate_next;

static void req_begin(void)
{
	__atomic_add_fetch(&g_req_busy, 1, __ATOMIC_ACQ_REL);
	__atomic_store_n(&g_req_since, mono_ns(), __ATOMIC_RELEASE);
	__atomic_or_fetch(&g_active, ACTIVE_GATE, __ATOMIC_RELEASE);
}

static void req_end(void)
{
	if (__atomic_sub_fetch(&g_req_busy, 1, __ATOMIC_ACQ_REL) == 0) {
		__atomic_store_n(&g_req_since, 0, __ATOMIC_RELEASE);
		__atomic_and_fetch(&g_active, ~ACTIVE_GATE, __ATOMIC_RELEASE);
	}
}

void drv_gate(void)
{
	uint64_t since = __atomic_load_n(&g_req_since, __ATOMIC_ACQUIRE);
	if (LIKELY(!since) || g_agent_thread)
		return;
	uint64_t now = mono_ns();
	if (now < since + GATE_AFTER_NS || now < t_gate_next)
		return;
	t_gate_next = now + GATE_EVERY_NS;
	uint64_t until = now + GATE_WAIT_NS;
	struct timespec nap = {0, 50000};
	while (__atomic_load_n(&g_req_since, __ATOMIC_ACQUIRE) == since && mono_ns() < until)
		nanosleep(&nap, NULL);
}

static void *session_main(void *arg)
{
	struct session *s = arg;
	g_agent_thread = 1;
	for (;;) {
		struct pollfd p[2] = {{s->fd, POLLIN, 0}, {s->efd, POLLIN, 0}};
		t_ready = mono_ns();
		int n = poll(p, 2, rescan_wait_ms());
		if (n < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (n == 0) {
			rescan_if_due();
			continue;
		}
		if (p[1].revents & POLLIN) {
			uint64_t v;
			ssize_t rr = read(s->efd, &v, 8);
			(void)rr;
			if (s->hello && flush_notes(s) < 0)
				break;
		}
		if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
			uint16_t type;
			uint32_t req, len;
			uint8_t *body;
			if (recv_frame(s, &type, &req, &body, &len) < 0)
				break;
			t_req_recv = mono_ns();
			pthread_rwlock_rdlock(&g_ctx_rw);
			req_begin();
			int r = handle(s, type, req, body, len);
			req_end();
			/* never keep a context current between requests: the
			 * application may destroy it meanwhile (most ops restore
			 * none themselves: no driver call then) */
			CUcontext cur = NULL;
			if (D.ready && D.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur)
				D.cuCtxSetCurrent(NULL);
			pthread_rwlock_unlock(&g_ctx_rw);
			free(body);
			if (s->pending_fd >= 0) {
				/* it came with a request that takes none: a later
				 * register-host must not pick it up */
				close(s->pending_fd);
				s->pending_fd = -1;
			}
			if (r < 0)
				break;
		}
	}
	/* The tool is gone (exit, crash or SIGKILL): put everything back. */
	DBG("tool disconnected: restoring original kernels");
	lev_detach(s);
	pthread_rwlock_rdlock(&g_ctx_rw);
	detach_all(s);
	if (D.ready)
		D.cuCtxSetCurrent(NULL);
	pthread_rwlock_unlock(&g_ctx_rw);
	pthread_mutex_lock(&g_mu);
	for (struct session **pp = &g_sessions; *pp; pp = &(*pp)->next)
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	int last = g_sessions == NULL;
	if (last)
		g_rescan_at = g_rescan_every = 0; /* no rescans without a tool */
	pthread_cond_broadcast(&g_cond);
	pthread_mutex_unlock(&g_mu);
	if (last)
		late_restore(); /* the program goes on exactly as before */
	while (s->retired) {
		struct activation *a = s->retired;
		s->retired = a->next;
		free(a);
	}
	close(s->fd);
	close(s->efd);
	if (s->pending_fd >= 0)
		close(s->pending_fd);
	free(s);
	return NULL;
}

/* ---------------- listener ---------------- */

static int make_dir(const char *dir)
{
	if (mkdir(dir, 0700) == 0)
		return 0;
	if (errno != EEXIST)
		return -1;
	struct stat st;
	if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
		return -1;
	if (st.st_uid != 0 && st.st_uid != geteuid())
		return -1; /* somebody else's directory: not ours to trust */
	return 0;
}

static int bind_socket(void)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	struct sockaddr_un a = {0};
	a.sun_family = AF_UNIX;
	const char *dir = getenv("GPUBPF_AGENT_SOCKET_DIR");
	if (!dir || !*dir)
		dir = "/run/gpubpf";
	int n = snprintf(a.sun_path, sizeof(a.sun_path), "%s/%d.sock", dir, (int)getpid());
	if (n > 0 && (size_t)n < sizeof(a.sun_path) && make_dir(dir) == 0) {
		unlink(a.sun_path);
		mode_t old = umask(0);
		int br = bind(fd, (struct sockaddr *)&a, sizeof(a));
		umask(old);
		if (br == 0) {
			snprintf(g_sock_path, sizeof(g_sock_path), "%s", a.sun_path);
			g_sock_pid = getpid();
			return fd;
		}
	}
	/* Fallback: abstract socket "@gpubpf/<pid>" (same peer checks). */
	memset(&a, 0, sizeof(a));
	a.sun_family = AF_UNIX;
	n = snprintf(a.sun_path + 1, sizeof(a.sun_path) - 1, "gpubpf/%d", (int)getpid());
	if (bind(fd, (struct sockaddr *)&a, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n)) == 0) {
		g_sock_path[0] = 0;
		return fd;
	}
	close(fd);
	return -1;
}

static void *listener_main(void *arg)
{
	int lfd = (int)(intptr_t)arg;
	g_agent_thread = 1;
	static int refused_logged;
	for (;;) {
		int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0) {
			if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE ||
			    errno == ENOBUFS || errno == ENOMEM) {
				if (errno != EINTR && errno != ECONNABORTED)
					usleep(100000);
				continue;
			}
			DBG("accept: %s; control socket closed", strerror(errno));
			return NULL;
		}
		struct ucred cr;
		socklen_t cl = sizeof(cr);
		if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cr, &cl) != 0 || (cr.uid != 0 && cr.uid != geteuid())) {
			if (!refused_logged) {
				refused_logged = 1;
				fprintf(stderr,
					"gpubpf-agent[%d]: refused a control connection from uid %d (pid %d): only root "
					"or uid %d may attach\n",
					(int)getpid(), (int)cr.uid, (int)cr.pid, (int)geteuid());
			}
			close(c);
			continue;
		}
		/* A direct host serves the tool that started it, and exits when
		 * that session ends: a second tool would share its kernels' maps. */
		pthread_mutex_lock(&g_mu);
		int taken = g_direct && g_direct_taken;
		pthread_mutex_unlock(&g_mu);
		if (taken) {
			fprintf(stderr,
				"gpubpf-agent[%d]: direct mode serves one tool; refused a second connection (pid %d)\n",
				(int)getpid(), (int)cr.pid);
			close(c);
			continue;
		}
		struct session *s = calloc(1, sizeof(*s));
		int efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (!s || efd < 0) {
			free(s);
			if (efd >= 0)
				close(efd);
			close(c);
			continue;
		}
		s->fd = c;
		s->efd = efd;
		s->uid = cr.uid;
		s->pending_fd = -1;
		pthread_mutex_lock(&g_mu);
		s->next = g_sessions;
		g_sessions = s;
		if (g_direct) {
			g_direct_taken = 1;
			pthread_cond_broadcast(&g_cond);
		}
		pthread_mutex_unlock(&g_mu);
		pthread_t th;
		pthread_attr_t at;
		pthread_attr_init(&at);
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		pthread_attr_setstacksize(&at, 256 << 10);
		if (pthread_create(&th, &at, session_main, s) != 0) {
			pthread_mutex_lock(&g_mu);
			for (struct session **pp = &g_sessions; *pp; pp = &(*pp)->next)
				if (*pp == s) {
					*pp = s->next;
					break;
				}
			pthread_mutex_unlock(&g_mu);
			close(c);
			close(efd);
			free(s);
		}
		pthread_attr_destroy(&at);
	}
}

static void cleanup_socket(void)
{
	if (g_sock_path[0] && g_sock_pid == getpid())
		unlink(g_sock_path);
}

void server_start(void)
{
	if (__atomic_exchange_n(&g_started, 1, __ATOMIC_ACQ_REL))
		return;
	const char *off = getenv("GPUBPF_AGENT_DISABLE");
	if (off && off[0] == '1')
		return;
	const char *h = getenv("GPUBPF_AGENT_HOLD");
	g_hold_env = h && h[0] == '1';
	const char *hm = getenv("GPUBPF_AGENT_HOLD_MS");
	if (hm && atol(hm) > 0)
		g_hold_ms = atol(hm);
	int fd = bind_socket();
	if (fd < 0 || listen(fd, 16) != 0) {
		DBG("cannot serve a control socket: %s", strerror(errno));
		if (fd >= 0)
			close(fd);
		return;
	}
	g_listen_fd = fd;
	/* our threads take no signals meant for the application */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_t th;
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&at, 128 << 10);
	int e = pthread_create(&th, &at, listener_main, (void *)(intptr_t)fd);
	pthread_attr_destroy(&at);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (e != 0) {
		close(fd);
		g_listen_fd = -1;
		cleanup_socket();
		return;
	}
	static int registered;
	if (!registered) {
		registered = 1;
		atexit(cleanup_socket);
	}
	DBG("serving %s", g_sock_path[0] ? g_sock_path : "abstract socket @gpubpf/<pid>");
}

void server_ensure(void)
{
	if (UNLIKELY(__atomic_load_n(&g_need_start, __ATOMIC_RELAXED))) {
		__atomic_store_n(&g_need_start, 0, __ATOMIC_RELAXED);
		server_start();
	}
}

void server_atfork_child(void)
{
	/* Sessions and the listener belong to the parent. */
	for (struct session *s = g_sessions; s; s = s->next) {
		close(s->fd);
		close(s->efd);
	}
	g_sessions = NULL;
	if (g_listen_fd >= 0)
		close(g_listen_fd);
	g_listen_fd = -1;
	g_sock_path[0] = 0;
	g_hold_waited = 0;
	g_dev_used = 0; /* the child has no contexts of its own yet */
	g_ndead = 0;
	pthread_rwlock_t fresh = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
	g_ctx_rw = fresh; /* a request of the parent's may have held it */
	__atomic_store_n(&g_started, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&g_need_start, 1, __ATOMIC_RELAXED);
}

int server_direct_serve(long wait_ms)
{
	if (g_listen_fd < 0) {
		fprintf(stderr, "gpubpf-agent[%d]: direct mode: cannot serve a control socket (in %s): %s\n", (int)getpid(),
			getenv("GPUBPF_AGENT_SOCKET_DIR") ? getenv("GPUBPF_AGENT_SOCKET_DIR") : "/run/gpubpf",
			strerror(errno));
		return 1;
	}
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += wait_ms / 1000;
	dl.tv_nsec += (wait_ms % 1000) * 1000000L;
	if (dl.tv_nsec >= 1000000000L) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&g_mu);
	while (!g_direct_taken)
		if (pthread_cond_timedwait(&g_cond, &g_mu, &dl) == ETIMEDOUT)
			break;
	if (!g_direct_taken) {
		pthread_mutex_unlock(&g_mu);
		fprintf(stderr,
			"gpubpf-agent[%d]: direct mode: no gpubpf tool connected within %.1f s; exiting (the host process "
			"is started by gpubpf run --direct, not by hand)\n",
			(int)getpid(), wait_ms / 1000.0);
		return 3;
	}
	/* The session's thread takes itself off the list once it has put
	 * everything back (detach): then the process may go. */
	while (g_sessions)
		pthread_cond_wait(&g_cond, &g_mu);
	pthread_mutex_unlock(&g_mu);
	DBG("direct mode: the tool's session ended");
	return 0;
}
