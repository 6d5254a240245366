/* The agent's control socket, shared by its parts (docs/agent-protocol.md):
 *   wire.c     encoding of frames' fields
 *   session.c  sessions, frames, holds, notifications, rescans, the listener
 *   context.c  contexts tools name, and what goes when a tool or a context goes
 *   ops.c      the operations and their dispatch
 *   ring.c     ring drains (op 22)
 *   clock.c    clock calibration (op 23)
 *   launch.c   direct-mode launches (op 24)
 *   gate.c     the driver's lock: launches pause for a starved request
 *   cupti.c    kernel times from CUPTI (op 26)
 *   execs.c    executable graphs: counted, swapped, restored (op 27)
 *   gxseq.c    graph launch numbers: the stamps of swapped execs' launches (op 28)
 *   san.c      kernels without PTX through the Compute Sanitizer's patching (op 29) */
#ifndef GPUBPF_SERVER_H
#define GPUBPF_SERVER_H
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
	OP_KERNEL_TIMES = 26,
	OP_GRAPHS = 27,
	OP_GRAPH_STAMPS = 28,
	OP_SANITIZE = 29,
	NOTE_MODULE = 0x40,
	NOTE_PROBE_FAILED = 0x41,
	NOTE_UNLOADING = 0x42,
	NOTE_DEVICE = 0x43,
	NOTE_LATE_TABLES = 0x44,
	NOTE_GRAPHS = 0x45,
};

enum { ST_OK = 0, ST_BAD_REQUEST = 1, ST_NOT_FOUND = 2, ST_CUDA = 3, ST_UNSUPPORTED = 4, ST_INTERNAL = 5 };

/* What send_error returns once its reply is out: the request is answered
 * and op_dispatch must not send the reply buffer as well. */
#define REPLIED 2

struct wbuf {
	uint8_t *p;
	size_t n, cap;
	int oom;
};

struct rbuf {
	const uint8_t *p;
	size_t n, off;
	int err;
};

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
	int graphs_note; /* NOTE_GRAPHS due */
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

extern struct session *g_sessions; /* session.c */
extern uint64_t g_next_id; /* session.c */
extern uint64_t g_dev_used; /* session.c */
extern unsigned g_ndead; /* context.c */
extern pthread_rwlock_t g_ctx_rw; /* context.c */
extern __thread uint64_t t_req_recv, t_ready; /* session.c: the request's timing */

/* wire.c: fields of a reply (an allocation failure sets oom: the reply
 * becomes an error) and of a request (a short frame sets err: zeros read) */
void wb_need(struct wbuf *w, size_t k);
void wb_raw(struct wbuf *w, const void *d, size_t k);
void wb_u32(struct wbuf *w, uint32_t v); /* little endian hosts only */
void wb_u64(struct wbuf *w, uint64_t v);
void wb_i32(struct wbuf *w, int32_t v);
void wb_str(struct wbuf *w, const char *s);
uint32_t rb_u32(struct rbuf *r);
uint64_t rb_u64(struct rbuf *r);
int32_t rb_i32(struct rbuf *r);
const uint8_t *rb_bytes(struct rbuf *r, size_t *len); /* into the frame, not NUL-terminated */
char *rb_str(struct rbuf *r);                         /* a NUL-terminated copy (caller frees) */

/* session.c */
void wake(struct session *s);
void register_exit_hold(void);
int send_frame(struct session *s, uint16_t type, uint32_t req, struct wbuf *body);
int send_error(struct session *s, uint16_t type, uint32_t req, int st, int cu, const char *fmt, ...)
	__attribute__((format(printf, 6, 7)));
void late_rescan(void);  /* rescans (late.c's late_scan), the tools told */
void rescan_start(void); /* g_mu held */

/* context.c */
CUresult use_ctx(struct session *s, int dev, uint64_t ctx, CUcontext *out);
CUstream op_stream(struct session *s, CUcontext c, CUresult *err);
void after_clone_launches(struct session *s, CUcontext c, CUstream st);
void clones_finish(struct session *s);
void clone_free(struct clone *c);
void clone_unload(struct clone *c);
int deactivate(struct session *s, void *handle);
int clones_pinned(struct session *s);
void detach_all(struct session *s);

/* ops.c, ring.c, clock.c, launch.c, cupti.c: the operations */
void put_module(struct wbuf *w, const struct module *m);
int op_dispatch(struct session *s, uint16_t type, uint32_t req, uint8_t *body, uint32_t len);
int ring_drain(struct session *s, uint32_t req, int dev, CUstream st, struct rbuf *r, struct wbuf *w);
void clk_release(struct clk *k);
int op_clock(struct session *s, uint32_t req, struct rbuf *r, struct wbuf *w);
int op_launch(struct session *s, uint32_t req, struct rbuf *r, struct wbuf *w);
int op_kernel_times(struct session *s, uint32_t req, struct rbuf *r, struct wbuf *w);
void kt_release(struct session *s); /* NULL: whoever has them */
int kt_owned_by(struct session *s);
int op_graphs(struct session *s, struct wbuf *w);        /* execs.c */
int op_graph_stamps(struct session *s, struct wbuf *w); /* gxseq.c */

/* gate.c: a request in the driver */
void req_begin(void);
void req_end(void);

/* san.c: the sanitizer path */
int op_sanitize(struct session *s, uint32_t req, struct rbuf *r, struct wbuf *w);
void san_session_gone(struct session *s);
void san_own_module(CUmodule m, int add);
#endif
