/* Sessions (one thread per connected tool), frames, holds of the application
 * for tools, notifications, rescans for runtimes that start late, and the
 * listener. */
#define _GNU_SOURCE
#include "server.h"

/* ---------------- sessions ---------------- */

__thread int g_agent_thread;

struct session *g_sessions; /* g_mu */
uint64_t g_next_id = 1;     /* clones, regions */
static int g_listen_fd = -1;
static char g_sock_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
static pid_t g_sock_pid;
static int g_started;     /* server thread running for this process */
static int g_need_start;  /* after fork: start at next driver call */
static int g_hold_env;    /* GPUBPF_AGENT_HOLD=1 */
static int g_hold_waited; /* waited once for a tool to connect */
uint64_t g_dev_used; /* g_mu: devices the application uses (bit per ordinal) */
static int g_direct_taken;  /* g_mu: direct mode's one session has connected */
static long g_hold_ms = 10000;
/* Holds of modules loaded before the agent: each at most g_late_hold_ms,
 * all of the process's together at most g_late_budget_ms (g_mu). */
static long g_late_hold_ms = 200, g_late_budget_ms = 1000, g_late_spent_ms;

void wake(struct session *s)
{
	uint64_t one = 1;
	ssize_t w = write(s->efd, &one, 8);
	(void)w;
}

void server_note_graphs(void)
{
	pthread_mutex_lock(&g_mu);
	for (struct session *s = g_sessions; s; s = s->next)
		if (s->hello) {
			s->graphs_note = 1;
			wake(s);
		}
	pthread_mutex_unlock(&g_mu);
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

/* ms from now, as pthread_cond_timedwait takes it (CLOCK_REALTIME). */
static struct timespec deadline_after(long ms)
{
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += ms / 1000;
	dl.tv_nsec += (ms % 1000) * 1000000L;
	if (dl.tv_nsec >= 1000000000L) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000L;
	}
	return dl;
}

/* When a hold started now must end at the latest (GPUBPF_AGENT_HOLD_MS). */
static struct timespec hold_deadline(void) { return deadline_after(g_hold_ms); }

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

/* A session has state in this process worth a last look: clones, memory,
 * or CUPTI's kernel records still buffered. */
static int has_state(struct session *s)
{
	return s->hello && (s->clones || s->allocs || s->regions || kt_owned_by(s));
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
void register_exit_hold(void)
{
	static int done;
	if (__atomic_exchange_n(&done, 1, __ATOMIC_ACQ_REL))
		return;
	DBG("exit hold registered");
	atexit(exit_hold);
}

/* A module loaded before the agent (an agent injected into a running
 * program, -p), learnt at its first launch after the attach: the launch
 * waits for the tools as server_hold, but at most GPUBPF_AGENT_LATE_HOLD_MS
 * (200 ms), and all such waits of the process together at most five times
 * that. A tool may read that module's code from the process's files first,
 * which for PyTorch's libraries (GBs) took seconds on the H200: a training
 * loop attached to stood still for the whole 8 s trace (2026-11-28). Past
 * the bound the launch runs the original kernel, and the launches after
 * the tool is ready run instrumented. */
void server_hold_late(uint64_t id)
{
	if (!id)
		return;
	register_exit_hold();
	if (!__atomic_load_n(&g_sessions, __ATOMIC_RELAXED))
		return;
	pthread_mutex_lock(&g_mu);
	long ms = g_late_budget_ms - g_late_spent_ms;
	if (ms > g_late_hold_ms)
		ms = g_late_hold_ms;
	if (ms <= 0 || !hold_pending(id)) {
		pthread_mutex_unlock(&g_mu);
		return;
	}
	uint64_t t0 = mono_ns();
	struct timespec dl = deadline_after(ms);
	while (hold_pending(id))
		if (pthread_cond_timedwait(&g_cond, &g_mu, &dl) == ETIMEDOUT) {
			DBG("late module %llu: the tools did not answer within %ld ms; its launch goes on uninstrumented",
			    (unsigned long long)id, ms);
			break;
		}
	g_late_spent_ms += (long)((mono_ns() - t0) / 1000000);
	pthread_mutex_unlock(&g_mu);
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

int send_frame(struct session *s, uint16_t type, uint32_t req, struct wbuf *body)
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

int send_error(struct session *s, uint16_t type, uint32_t req, int st, int cu, const char *fmt, ...)
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

void late_rescan(void)
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

/* A tool says hello: look now (the tools here already hear of what is new),
 * and from then on from time to time (g_mu held). */
void rescan_start(void)
{
	if (late_mode() == 1 && !g_rescan_at) {
		g_rescan_every = RESCAN_FIRST_NS;
		g_rescan_at = mono_ns() + RESCAN_FIRST_NS;
	}
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

/* Runs the rescan if it is due (one session thread does). A scan reads
 * every object's data: in a large process (PyTorch's libraries) the next one
 * waits at least RESCAN_SHARE times as long as this one took, so rescans
 * never take more than 1% of a CPU. */
#define RESCAN_SHARE 100
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
	if (!due)
		return;
	late_rescan();
	uint64_t took = mono_ns() - now;
	pthread_mutex_lock(&g_mu);
	if (g_rescan_at && g_rescan_at < now + took * RESCAN_SHARE)
		g_rescan_at = now + took * RESCAN_SHARE;
	pthread_mutex_unlock(&g_mu);
}

/* Sends the notifications that are due: module-loaded, device-used,
 * unloading, late-tables, graphs, probe-failed. */
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
		if (!have && s->graphs_note) {
			s->graphs_note = 0;
			have = NOTE_GRAPHS;
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

/* When the session thread took the request being served off its socket. */
__thread uint64_t t_req_recv;
/* When the session thread was last ready for a request (done with the one
 * before): a tool tells waiting for the agent from waiting for the socket. */
__thread uint64_t t_ready;

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
			int r = op_dispatch(s, type, req, body, len);
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
	kt_release(s);
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
	if (s->hello)
		gx_session(s, -1);
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
	const char *lm = getenv("GPUBPF_AGENT_LATE_HOLD_MS");
	if (lm && atol(lm) >= 0) {
		g_late_hold_ms = atol(lm);
		g_late_budget_ms = 5 * g_late_hold_ms;
	}
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
	struct timespec dl = deadline_after(wait_ms);
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

