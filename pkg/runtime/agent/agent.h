/* gpubpf agent: internal declarations shared by its C files. */
#ifndef GPUBPF_AGENT_H
#define GPUBPF_AGENT_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <time.h>

#include "cudefs.h"

#define AGENT_VERSION "0.1.0"
#define PROTO_VERSION 14u
#define PROTO_MAX_FRAME (64u << 20)
#define SNAPSHOT_LIVE 1u /* snapshot flag: do not wait for the application's launches */
#define HIDDEN __attribute__((visibility("hidden")))
#define EXPORT __attribute__((visibility("default")))
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)

extern int g_debug;
#define DBG(...)                                                      \
	do {                                                              \
		if (UNLIKELY(g_debug)) {                                      \
			fprintf(stderr, "gpubpf-agent[%d]: ", (int)getpid());     \
			fprintf(stderr, __VA_ARGS__);                             \
			fputc('\n', stderr);                                      \
		}                                                             \
	} while (0)

/* A handle's hash for the agent's tables (handles are aligned pointers). */
static inline size_t ptr_hash(const void *p) { return (size_t)(((uintptr_t)p >> 4) * 0x9E3779B97F4A7C15ull); }

/* CLOCK_MONOTONIC in ns: the clock uprobes (bpf_ktime_get_ns) and tools read. */
static inline uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Driver entry points the agent itself calls (real ones, never wrappers). */
struct drv {
	int ready;
	int version;
	CUresult (*cuDriverGetVersion)(int *);
	CUresult (*cuDeviceGetCount)(int *);
	CUresult (*cuDeviceGet)(CUdevice *, int);
	CUresult (*cuDeviceGetName)(char *, int, CUdevice);
	CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice);
	CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
	CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
	CUresult (*cuDevicePrimaryCtxGetState)(CUdevice, unsigned *, int *);
	CUresult (*cuCtxGetCurrent)(CUcontext *);
	CUresult (*cuCtxSetCurrent)(CUcontext);
	CUresult (*cuCtxGetDevice)(CUdevice *);
	CUresult (*cuCtxSynchronize)(void);
	CUresult (*cuModuleLoadDataEx)(CUmodule *, const void *, unsigned, CUjit_option *, void **);
	CUresult (*cuModuleUnload)(CUmodule);
	CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
	CUresult (*cuModuleGetGlobal)(CUdeviceptr *, size_t *, CUmodule, const char *);
	CUresult (*cuLibraryGetGlobal)(CUdeviceptr *, size_t *, CUlibrary, const char *);
	CUresult (*cuKernelGetName)(const char **, CUkernel);
	CUresult (*cuFuncGetName)(const char **, CUfunction);
	CUresult (*cuKernelGetLibrary)(CUlibrary *, CUkernel); /* late.c; optional */
	CUresult (*cuFuncGetModule)(CUmodule *, CUfunction);    /* late.c; optional */
	CUresult (*cuKernelGetAttribute)(int *, int, CUkernel, CUdevice);
	CUresult (*cuFuncGetAttribute)(int *, int, CUfunction);
	CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
	CUresult (*cuLibraryGetKernelCount)(unsigned *, CUlibrary);
	CUresult (*cuLibraryEnumerateKernels)(CUkernel *, unsigned, CUlibrary);
	CUresult (*cuModuleGetFunctionCount)(unsigned *, CUmodule);
	CUresult (*cuModuleEnumerateFunctions)(CUfunction *, unsigned, CUmodule);
	CUresult (*cuEventCreate)(CUevent *, unsigned);
	CUresult (*cuEventRecord)(CUevent, CUstream);
	CUresult (*cuEventSynchronize)(CUevent);
	CUresult (*cuEventDestroy)(CUevent);
	CUresult (*cuEventQuery)(CUevent);
	CUresult (*cuEventElapsedTime)(float *, CUevent, CUevent);
	CUresult (*cuStreamIsCapturing)(CUstream, int *);
	CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
	CUresult (*cuMemFree)(CUdeviceptr);
	CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t);
	CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
	CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
	CUresult (*cuMemHostRegister)(void *, size_t, unsigned);
	CUresult (*cuMemHostUnregister)(void *);
	CUresult (*cuMemHostGetDevicePointer)(CUdeviceptr *, void *, unsigned);
	CUresult (*cuStreamCreate)(CUstream *, unsigned);
	CUresult (*cuStreamDestroy)(CUstream);
	CUresult (*cuStreamSynchronize)(CUstream);
	CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
	CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
	CUresult (*cuMemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
	CUresult (*cuThreadExchangeStreamCaptureMode)(int *);
	CUresult (*cuStreamWaitEvent)(CUstream, CUevent, unsigned);
	CUresult (*cuStreamQuery)(CUstream);
	CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
				   CUstream, void **, void **);
	/* graph stamp words (graphs.c); all optional */
	CUresult (*cuStreamGetCaptureInfo)(CUstream, int *, uint64_t *, CUgraph *, const CUgraphNode **,
					   size_t *); /* the v2 ABI (CUDA 11.3 - 12.x) */
	CUresult (*cuStreamWriteValue64)(CUstream, CUdeviceptr, uint64_t, unsigned);
	CUresult (*cuPointerGetAttribute)(void *, int, CUdeviceptr);
	CUresult (*cuGraphNodeGetContainingGraph)(CUgraphNode, CUgraph *); /* CUDA 13.1 */
	/* executable graphs made before the attach (execs.c); 12.0 ABIs */
	CUresult (*cuGraphClone)(CUgraph *, CUgraph);
	CUresult (*cuGraphDestroy)(CUgraph);
	CUresult (*cuGraphGetNodes)(CUgraph, CUgraphNode *, size_t *);
	CUresult (*cuGraphNodeGetType)(CUgraphNode, int *);
	CUresult (*cuGraphChildGraphNodeGetGraph)(CUgraphNode, CUgraph *);
	CUresult (*cuGraphNodeFindInClone)(CUgraphNode *, CUgraphNode, CUgraph);
	CUresult (*cuGraphKernelNodeGetParams)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS_v2 *);
	CUresult (*cuGraphKernelNodeSetParams)(CUgraphNode, const CUDA_KERNEL_NODE_PARAMS_v2 *);
	CUresult (*cuGraphExecUpdate)(CUgraphExec, CUgraph, CUgraphExecUpdateResultInfo *);
	/* ring drains: many copies in one call (CUDA 12.8's ABI, with failIdx); optional */
	CUresult (*cuMemcpyBatchAsync)(CUdeviceptr *, CUdeviceptr *, size_t *, size_t, CUmemcpyAttributes *,
				       size_t *, size_t, size_t *, CUstream);
};
extern struct drv D;
HIDDEN int drv_init(void);         /* 0 when the driver entry points are usable */
HIDDEN int cuda_loaded(void);      /* libcuda present in the process */

/* ---- direct mode (direct.c) ---- */
/* Set only by the library's own entry point (the agent run as a program:
 * the host process of `gpubpf run --direct`), never by the environment of
 * an application it is preloaded into: op launch runs the tool's kernels,
 * which the agent does in its own process only. */
extern int g_direct;
/* Why CUDA cannot be used in direct mode ("" when it can): told to the
 * tool in hello and in the reply to every driver op. */
extern char g_direct_err[512];
HIDDEN void agent_setup(void); /* what the constructor does, once */

/* ---- inventory (inventory.c) ---- */
enum mod_kind { MK_LIBRARY_DATA = 1, MK_LIBRARY_FILE, MK_MODULE_DATA, MK_MODULE_FILE, MK_MODULE_FATBIN };
enum img_fmt { IF_UNKNOWN = 0, IF_FATBIN = 1, IF_ELF = 2, IF_PTX = 3 };
enum kern_kind { KK_KERNEL = 1, KK_FUNCTION = 2 };

struct module {
	uint64_t id;
	int kind;
	void *handle; /* CUlibrary or CUmodule */
	CUcontext ctx;
	/* ctx's device ordinal (-1: a library, or unknown) and whether ctx is
	 * that device's primary context: a tool places one copy of its maps per
	 * device's primary context, whatever module the kernel came from */
	int dev;
	int primary;
	int fmt;
	const uint8_t *image; /* borrowed or owned (owned_image) */
	uint64_t size;
	int owned_image;
	int unloaded;
	char *path;
};

struct kernel {
	void *handle;
	int kind;
	uint64_t module_id;
	CUcontext ctx;
	void *parent; /* CUkernel of a CUfunction from cuKernelGetFunction */
	char *name;
};

extern pthread_mutex_t g_mu; /* inventory, sessions, clones */
extern pthread_cond_t g_cond;
extern struct module *g_mods;
extern size_t g_nmods;
extern struct kernel *g_kerns;
extern size_t g_nkerns;

HIDDEN uint64_t inv_add_module(int kind, void *handle, const void *image, const char *path);
/* A module loaded before the agent came, learnt with one of its kernels: both
 * are in the inventory before the tools hear of the module. */
HIDDEN uint64_t inv_add_late_module(int kind, void *handle, int kkind, void *kernel, const char *name);
HIDDEN void inv_module_unloaded(void *handle);
HIDDEN uint64_t inv_module_id(void *handle);
HIDDEN size_t inv_module_count(void);
HIDDEN void inv_add_kernel(void *handle, int kind, void *module_handle, void *parent, const char *name);
HIDDEN struct module *inv_module_by_id(uint64_t id);   /* g_mu held */
HIDDEN struct kernel *inv_kernel_by_handle(void *h);   /* g_mu held */
HIDDEN void inv_enumerate(void);                       /* g_mu held */
HIDDEN void inv_reset(void);

/* ---- launch events (events.c) ---- */
enum { LEV_LAUNCH, LEV_LAUNCH_PTSZ, LEV_LAUNCH_EX, LEV_LAUNCH_EX_PTSZ, LEV_COOP, LEV_COOP_PTSZ };
HIDDEN int lev_attach(void *owner, int fd, uint64_t size, char *why, size_t whysz, uint64_t *attach_ns);
HIDDEN void lev_detach(void *owner);
/* One launch, after the driver returned r (g_rw read held); t0 from mono_ns. */
HIDDEN void lev_record(int api, const void *f, const unsigned grid[3], const unsigned block[3], unsigned shmem,
		       CUstream s, CUresult r, uint64_t t0, const void *caller);
HIDDEN void lev_atfork_child(void);

/* ---- probes (probes.c) ---- */
struct clone {
	uint64_t id;
	struct session *owner;
	CUmodule mod;
	CUcontext ctx;
	int pinned;   /* referenced by a graph: never unloaded */
	int overflow; /* more streams than events: synchronise the context */
	CUfunction *fns; /* the entries load resolved (op launch runs only these) */
	uint32_t nfns;
	pthread_mutex_t evmu;
	int nev;
	struct {
		CUstream s; /* EV_GONE once the application destroyed it */
		CUevent e;
		int dirty; /* launched on since e was last recorded (atomic) */
	} ev[16];
	struct clone *next;
	struct clone *all_next; /* every clone with events (probes.c) */
};
#define EV_GONE ((CUstream)(uintptr_t)-1)

struct activation {
	void *handle;     /* what the tool named */
	CUcontext ctx;    /* the clone's context */
	CUfunction fn;    /* instrumented function */
	struct clone *clone; /* NULL once retired */
	uint64_t clone_id;   /* retired: its clone's id (the clone may be gone) */
	struct session *owner;
	uint64_t launches, failures; /* atomics */
	int last_err;
	int disabled;
	/* Launch words (launchlate): the clone takes `hidden` (0 or 2) more
	 * u64 parameters after the kernel's own `nparams` (at byte `bufoff`
	 * of a packed `extra` buffer): the CPU time its launching thread's
	 * uprobe stamped into slot ((tid * 4) & (nslots - 1)) of `slots`, and the
	 * stream with the API kind. `slots` lies in the session's registered
	 * region `region`; it is cleared (g_rw write-held) before that region
	 * goes away, and read only with g_rw read-held. */
	uint32_t hidden, nparams, bufoff, nslots;
	uint64_t region;
	uint64_t *slots;
	struct activation *next;
};

/* Launch words: slot layout and the second word's kind byte. */
#define LW_SLOT_BYTES 16u
#define LW_STREAM_MASK ((1ULL << 56) - 1)
#define LW_KIND_DRIVER 2ull /* a driver-API launch, stamped by the agent itself */
#define LW_KIND_GRAPH 0xFFull /* launched by a graph: no per-launch stamp */
#define LW_KIND_GRAPH_WORD 0xFEull /* a graph's kernel node: the low 56 bits are
				    * the device address of its graph's stamp word */
#define LW_KIND_GRAPH_SEQ 0xFDull /* a kernel node of a graph the agent swapped:
				   * the low 56 bits are the session's id of the
				   * node, whose runs its probe counts (gxseq.c) */
#define LW_SEQ_IDS (1u << 18) /* ids a session may have (launchlate's node_runs) */
#define LW_KIND_PENDING 0x80ull /* in a slot's tag: a runtime-API stamp whose
				 * driver call has not been reached yet */
#define LW_MAX_AGE_NS 1000000ull /* an older stamp is not this launch's */

extern int g_active; /* fast-path flags: */
#define ACTIVE_PROBES 1   /* an activation is present */
#define ACTIVE_DISCOVER 2 /* loaded late: learn the kernels launched (late.c) */
#define ACTIVE_GATE 4     /* a tool request is in the driver: see drv_gate */
#define ACTIVE_EVENTS 8   /* a tool takes every launch as an event (events.c) */
#define ACTIVE_KTIMES 16  /* CUPTI's kernel records joined to the wrappers' stamps (cupti.c) */
/* cupti.c: the launch on stream s about to reach the driver is stamped and
 * its id pushed as CUPTI's external correlation; kt_launch_end(what it
 * returned) pops it after the call. */
HIDDEN int kt_launch_begin(CUstream s);
HIDDEN void kt_launch_end(int pushed);
HIDDEN int kt_agent_launch_begin(void); /* around the agent's own launches */
HIDDEN int kt_recording(void);          /* CUPTI's kernel records are on */
static inline int kt_begin(CUstream s)
{
	return __builtin_expect(__atomic_load_n(&g_active, __ATOMIC_RELAXED) & ACTIVE_KTIMES, 0) ? kt_launch_begin(s)
												: 0;
}
/* Called by the launch paths: pauses the calling thread (bounded) while a
 * tool request has waited long in the driver (gate.c). */
HIDDEN void drv_gate(void);
extern pthread_rwlock_t g_rw;
HIDDEN CUfunction probe_lookup(void *f, struct activation **out); /* g_rw read held */
HIDDEN void probe_rebuild(void);                                  /* g_rw write held, g_mu held */
/* cap: the stream's capture status if the caller knows it, else -1 */
HIDDEN void probe_after_launch(struct activation *a, CUstream s, CUresult r, int cap);
HIDDEN void probe_pin(struct activation *a);
HIDDEN int probe_is_clone(const void *f); /* an active probe's instrumented function (takes g_rw) */
HIDDEN void probes_reset(void);
/* Deferred event records: an instrumented launch marks its (clone, stream)
 * entry dirty, and the agent records the dirty entries' events only when it
 * needs ordering after them (probe_flush, before a read, unload or free).
 * probe_defer_setup decides once, on the agent's thread before its first
 * clone, whether launches may defer; clones are known from load
 * (probe_clone_add) until freed (probe_clone_forget). */
HIDDEN void probe_defer_setup(void);
HIDDEN void probe_clone_add(struct clone *c);
HIDDEN void probe_clone_forget(struct clone *c);
HIDDEN void probe_flush(struct clone *c); /* the agent's thread; may switch contexts and back */
/* The application's capture and stream wrappers (interpose.c): before a
 * capture begins, after one ended (or failed to begin), before a stream
 * goes. */
HIDDEN void probe_capture_begin(void);
HIDDEN int probe_captures_active(void); /* a capture the wrappers saw begin has not ended */
HIDDEN void probe_capture_end(void);
HIDDEN void probe_stream_gone(CUstream s);
/* The application made a blocking stream (or used the per-thread default
 * stream): legacy-stream launches record their events at once after this. */
HIDDEN void probe_blocking_stream(void);
/* The two launch words of an activation with hidden words (g_rw read held):
 * s as the application passed it, evs the stream work on it runs in. */
/* returns the stream's capture status (probe_after_launch takes it) */
HIDDEN int probe_launch_words(const struct activation *a, CUstream s, CUstream evs, uint64_t w[2]);
HIDDEN void probe_tid_reset(void); /* fork child: the cached thread id is the parent's */
HIDDEN uint32_t probe_tid(void);    /* the calling thread's Linux id, cached */
/* Graph launches (g_rw held): whether an active probe has launch-word
 * slots, and the stamp of the calling thread's graph launch: its slot's
 * time when that is a fresh pending runtime-API stamp of this thread (the
 * cudaGraphLaunch this driver call is part of), else the time now. */
HIDDEN void probe_lw_refresh(void); /* g_rw write held */
HIDDEN int probe_lw_on(void);
HIDDEN uint64_t probe_graph_stamp(void);
extern struct activation *g_acts;

/* ---- graph stamp words (graphs.c) ---- */
/* Each CUDA graph with instrumented kernel nodes has an 8-byte word in
 * device memory (in the nodes' context); its nodes get its address as
 * launch word 1 (kind LW_KIND_GRAPH_WORD), and each graph launch writes the
 * launch's stamp there in stream order before the graph and 0 after it.
 * Words are never freed: a graph may run at any time. 0: no word. */
HIDDEN CUdeviceptr gw_graph(CUgraph g, CUcontext ctx);   /* made on first use */
HIDDEN CUdeviceptr gw_exec(CUgraphExec x, CUcontext ctx); /* made on first use */
HIDDEN CUdeviceptr gw_node(CUgraphNode n, CUcontext ctx); /* its graph's, when the driver says which */
HIDDEN CUdeviceptr gw_exec_word(CUgraphExec x);          /* the launch path: never made */
HIDDEN void gw_instantiated(CUgraphExec x, CUgraph g);    /* x runs g's nodes (instantiate, update) */
HIDDEN int gw_any(void);                                  /* some graph has a word */
HIDDEN void gw_reset(void);                               /* fork child */

/* ---- executable graphs (execs.c) ---- */
/* Every exec launched while a tool is attached is counted; one whose
 * instantiation the agent saw keeps a snapshot of its graph, and its next
 * launch after the probes changed points its kernel nodes at the
 * instrumented clones (or back) with one cuGraphExecUpdate. */
struct gx_counts {
	uint64_t launches;       /* graph launches (while a tool was attached) */
	uint64_t launches_instr; /* of which ran instrumented kernel nodes */
	uint64_t launches_kt;    /* of which while CUPTI's kernel records were on */
	uint64_t kruns;          /* kernel-node runs of those launches (snapshot known) */
	uint64_t kruns_instr;    /* of which instrumented */
	uint64_t captured;       /* launches into a stream capture (not run then) */
};
#define GX_UNKNOWN 0xFFFFFFFFu /* kernel nodes not known */
enum { GX_ORIGINAL = 0, GX_SWAPPED = 1 };
/* why an exec runs its original kernel nodes */
enum { GXW_NONE, GXW_BEFORE_AGENT, GXW_NO_SNAPSHOT, GXW_STALE, GXW_REFUSED, GXW_RESTORE_FAILED, GXW_NO_PROBE };
extern int g_gx_on; /* graph launches take the counting path (atomic) */
/* Before the launch reaches the driver; *cap: evs's capture status, -1
 * until someone asked the driver (then filled in). */
HIDDEN int gx_launch(CUgraphExec x, CUstream evs, int *cap); /* 1: its stamp was kept (gxseq.c) */
HIDDEN void gx_launch_failed(CUgraphExec x);                  /* the driver refused it: the stamp goes */
/* evs's capture status, asked of the driver only when a capture may be
 * active (-1 when it cannot say) */
HIDDEN int stream_capture_status(CUstream evs);
HIDDEN void gx_instantiated(CUgraphExec x, CUgraph g);
HIDDEN void gx_updated(CUgraphExec x, CUgraph g); /* the application's whole-graph update */
HIDDEN void gx_kernel_node_set(CUgraphExec x, CUgraphNode n, const CUDA_KERNEL_NODE_PARAMS_v2 *p, int v2);
HIDDEN void gx_changed(CUgraphExec x, const char *how); /* changed in place some other way */
HIDDEN void gx_destroyed(CUgraphExec x);
struct session;
HIDDEN void gx_session(struct session *s, int delta); /* a tool came (1) or went (-1) */
HIDDEN int gx_launched_under_cupti(void); /* a graph launch while CUPTI's records were on */
HIDDEN void gx_reset(void);        /* fork child */
HIDDEN void san_setup(void);       /* san.c: the sanitizer subscription, at load */
HIDDEN void san_atfork_child(void);
/* interpose.c: points kernel node n (of a graph to update exec x from) at
 * its instrumented clone when a probe is active: 1 if it did, 2 if n runs
 * an active clone already (captured so), 0 if no probe, -1 on an error */
struct gxs_epoch;
HIDDEN int node_instrument(CUgraphNode n, CUgraphExec x, struct gxs_epoch *ep);
/* probes.c: bumped whenever the active probes change */
HIDDEN uint32_t probe_gen(void);

/* ---- graph launch numbers (gxseq.c) ---- */
/* A kernel node swapped into an exec for a tool with launch words gets an
 * id of that tool (launch word 1: LW_KIND_GRAPH_SEQ | id) instead of a
 * stamp word: its probe counts its runs, run k is the exec's launch
 * base + k, and the agent keeps each exec's launch stamps by number.
 * gxseq's lock is the innermost: taken under gx_mu, g_rw or g_mu, and
 * nothing is taken under it. */
struct gxs_ring;
HIDDEN struct gxs_epoch *gxs_begin(struct gxs_ring **ring); /* from the exec's next launch; ring made when NULL */
HIDDEN int gxs_used(struct gxs_epoch *ep);                  /* some node took an id of it */
HIDDEN void gxs_end(struct gxs_epoch *ep);                  /* ends it at the ring's launch count, drops a ref */
HIDDEN void gxs_ring_drop(struct gxs_ring *r);              /* the exec is gone */
HIDDEN uint32_t gxs_id(struct session *s, struct gxs_epoch *ep); /* 0: none left (the caller falls back) */
HIDDEN void gxs_put(struct gxs_ring *r, uint64_t stamp);    /* the next launch's stamp */
HIDDEN void gxs_unput(struct gxs_ring *r);                  /* that launch failed */
HIDDEN void gxs_session_end(struct session *s);
HIDDEN void gxs_reset(void); /* fork child */
enum { GXS_OFF, GXS_ON, GXS_HOST };
HIDDEN int gxs_mode(void); /* GPUBPF_AGENT_GRAPH_SEQ */

/* ---- control socket (server.h: session.c, context.c, ops.c, ...) ---- */
struct session;
HIDDEN void server_start(void);
HIDDEN void server_ensure(void);
HIDDEN void server_notify_module(uint64_t id);
HIDDEN void server_hold_unload(void *handle);
HIDDEN void server_hold_id(uint64_t id);
/* Set in the agent's own threads: the driver calls they make (loading
 * clones, unloading them) are not the application's and must not be
 * inventoried or held. */
extern HIDDEN __thread int g_agent_thread;
HIDDEN void server_notify_failure(struct activation *a, CUresult r);
HIDDEN void server_hold(uint64_t id);
HIDDEN void server_hold_late(uint64_t id);
/* An exec whose nodes the agent does not know was launched: the tools hear
 * of it (NOTE_GRAPHS) and read op graphs. */
HIDDEN void server_note_graphs(void);
HIDDEN void server_device_used(CUdevice dev);
/* The application destroys a context (context.c): server_ctx_lock holds
 * every tool request off meanwhile; server_ctx_gone (lock held) makes the
 * sessions forget what they had in c without touching it; server_ctx_born
 * clears a handle the driver hands out again. */
HIDDEN void server_ctx_lock(void);
HIDDEN void server_ctx_unlock(void);
HIDDEN void server_ctx_gone(CUcontext c);
HIDDEN void server_ctx_born(CUcontext c);
HIDDEN void server_atfork_child(void);
HIDDEN void kt_atfork_child(void); /* cupti.c */
/* Direct mode: serve one tool session; returns the exit status (0 after a
 * session, non-zero when none came within wait_ms). */
HIDDEN int server_direct_serve(long wait_ms);

/* ---- interposition (interpose.c) ---- */
extern void *(*real_dlsym)(void *, const char *);
HIDDEN void *libcuda_handle(void);
/* dev's primary context if it is active (NULL if not), its use count left as it was */
HIDDEN CUcontext primary_of(CUdevice dev);
/* Whether every capture and stream-destroy entry point the application can
 * reach goes through the agent's wrappers (deferred records rely on it). */
HIDDEN int capture_wrapped(void);
EXPORT CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, uint64_t flags, int *status);

/* ---- late interposition (late.c) ---- */
/* libcuda's address of a wrapped entry point, and the wrapper for it */
struct late_target {
	uintptr_t real, wrapper;
};
HIDDEN size_t late_targets(struct late_target **out); /* interpose.c; malloc'ed */
HIDDEN int late_mode(void);     /* loaded into a running process (not preloaded) */
/* Swaps the program's cached driver pointers not swapped yet; returns how
 * many, and names in obj (if given) the objects they were found in. */
HIDDEN int late_scan(char *obj, size_t objsz);
HIDDEN void late_restore(void); /* put them back (the last tool left) */
/* A launch of handle h (CUfunction or CUkernel) while ACTIVE_DISCOVER is
 * set: an unknown handle gets its module and kernels inventoried and the
 * tools told (which may hold the launch until they have instrumented it).
 * Call with no agent lock held. */
HIDDEN void late_discover(void *h);
static inline void late_seen(void *h)
{
	if (UNLIKELY(__atomic_load_n(&g_active, __ATOMIC_RELAXED) & ACTIVE_DISCOVER))
		late_discover(h);
}

#endif
