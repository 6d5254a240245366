/* Kernel times through CUPTI (op kernel-times, docs/agent-protocol.md).
 *
 * A kernel without PTX cannot carry a probe, but CUPTI's activity records
 * give every kernel's GPU start and end, and the launch call each came
 * from. While a tool asks for them:
 *   - the launch call's CPU time: by default from CUPTI's callback at the
 *     driver's launch calls (the stamp the probes take too), filed under
 *     the call's correlation id, which the kernel record carries. Measured
 *     against the ways without a callback on the H200 (2026-11-28,
 *     launch_heavy_sass, launch rate ratio to untraced, two calls): the
 *     callback x0.74 and x0.58, CUPTI's API records of the launch calls
 *     alone x0.68 both times (GPUBPF_CUPTI_JOIN=api:
 *     cuptiActivityEnableDriverApi/RuntimeApi, CUDA 12.5; runtime records
 *     too, as CUPTI writes no driver record for the driver calls the
 *     runtime makes; they name no stream), the agent's wrappers pushing
 *     their own id as external correlation x0.60 (GPUBPF_CUPTI_JOIN=external;
 *     CUPTI writes those records only with API records on): within the
 *     runs' spread, so the callback, which names the stream. CUPTI's kernel
 *     records themselves are most of the cost: x0.72 with nothing else
 *     (scripts/gpu/cuptijoin-bench.sh);
 *   - CUPTI's concurrent-kernel records, on CLOCK_MONOTONIC (a timestamp
 *     callback: CUPTI converts its GPU times to our clock), come back in
 *     buffers CUPTI fills; each kernel becomes one queued record with the
 *     launch's stamp, and the tool reads the queue every 100 ms.
 * libcupti is found at run time (never needed to build): the one already in
 * the process, the CUDA wheels next to the process's libraries (PyTorch's
 * nvidia-cuda-cupti), the toolkit's. CUPTI takes one subscriber per
 * process: one held by a profiler (the PyTorch profiler, Nsight) is left
 * alone and the tool told. When the last tool lets go, the records go off
 * and CUPTI is finalized from the next launch callback's exit (where
 * NVIDIA's dynamic detach says it must be), so the program runs on as
 * before.
 *
 * Locks: kt_life orders turning CUPTI on, off and finalizing it (never held
 * while CUPTI may call back into kt_mu's holders' way); kt_mu guards the
 * owner, the queue and the names, which the buffer callback fills. The stamp
 * table is written by launching threads without a lock (each slot's
 * id last, read first). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <glob.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cuptidefs.h"
#include "server.h"

#define KT_STAMPS (1u << 17)    /* launches in flight between a call and its record */
#define KT_QMAX (1u << 18)      /* records queued for a tool that reads late */
#define KT_BUF (4u << 20)       /* one CUPTI activity buffer */
#define KT_FLUSH_MS 100u

struct kt_stamp {
	uint64_t corr; /* correlation id (external id with KT_JOIN_EXTERNAL) + 1, stored last (0: empty) */
	uint64_t t;
	uint64_t stream;
	uint64_t ctx;
	uint32_t agent; /* the agent's own launch: no record for the tool */
	uint32_t join;  /* KT_JOIN_* of the stamp's maker: ids of the two kinds may be equal */
};

/* One kernel, as op kernel-times sends it (the wire's 64 bytes). */
struct kt_rec {
	uint64_t cpu, start, end, grid, stream, ctx;
	uint32_t name;
	int32_t dev;
	uint32_t graph, flags;
};
_Static_assert(sizeof(struct kt_rec) == 64, "kernel-time record size");

/* A kernel record waiting for its read: the stamp is found then, when
 * every buffer CUPTI completed (the external correlations among them) is
 * in. age: reads it has waited for a correlation that has not come. */
struct kt_raw {
	struct kt_rec r;
	uint32_t corr, age;
};

/* CUPTI's correlation id -> the external id a launch wrapper pushed, and
 * (KT_JOIN_API) the start of its driver API call. */
struct kt_corr {
	uint64_t corr; /* correlation id + 1 (0: empty) */
	uint64_t ext;
	uint64_t start;
};

#define KT_JOIN_EXTERNAL 0
#define KT_JOIN_CALLBACK 1
#define KT_JOIN_API 2
/* kt_rec.flags: the stream (and context) the launch named are not known. */
#define KT_FLAG_STREAM_UNKNOWN 1u
/* The external id of the agent's own launches (its clock): no record. */
#define KT_EXT_AGENT (1ull << 63)

static struct {
	void *lib;
	char path[PATH_MAX];
	uint32_t version;
	CUptiResult (*GetResultString)(CUptiResult, const char **);
	CUptiResult (*GetVersion)(uint32_t *);
	CUptiResult (*Subscribe)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *);
	CUptiResult (*Unsubscribe)(CUpti_SubscriberHandle);
	CUptiResult (*EnableCallback)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain, CUpti_CallbackId);
	CUptiResult (*ActivityEnable)(CUpti_ActivityKind);
	CUptiResult (*ActivityDisable)(CUpti_ActivityKind);
	CUptiResult (*ActivityRegisterCallbacks)(void (*)(uint8_t **, size_t *, size_t *),
						 void (*)(CUcontext, uint32_t, uint8_t *, size_t, size_t));
	CUptiResult (*ActivityRegisterTimestampCallback)(uint64_t (*)(void));
	CUptiResult (*ActivityFlushAll)(uint32_t);
	CUptiResult (*ActivityFlushPeriod)(uint32_t); /* optional */
	CUptiResult (*ActivityGetNextRecord)(uint8_t *, size_t, CUpti_Activity **);
	CUptiResult (*ActivityGetNumDroppedRecords)(CUcontext, uint32_t, size_t *);
	CUptiResult (*Finalize)(void);
	CUptiResult (*PushExternalCorrelationId)(uint32_t, uint64_t); /* optional */
	CUptiResult (*PopExternalCorrelationId)(uint32_t, uint64_t *); /* optional */
	CUptiResult (*ActivityEnableDriverApi)(CUpti_CallbackId, uint8_t); /* optional: CUDA 12.5 */
	CUptiResult (*ActivityEnableRuntimeApi)(CUpti_CallbackId, uint8_t); /* optional: CUDA 12.5 */
} C;

static pthread_mutex_t kt_life = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t kt_mu = PTHREAD_MUTEX_INITIALIZER;
static struct session *kt_owner;          /* written under both locks */
static CUpti_SubscriberHandle kt_sub;     /* kt_life */
static int kt_on;                         /* records wanted (atomic) */
static int kt_finalize;                   /* finalize at the next callback exit (atomic) */
static struct kt_stamp *kt_stamps;        /* never freed once made */
static struct kt_raw *kt_q;               /* kt_mu */
static size_t kt_qn, kt_qcap;             /* kt_mu */
static uint64_t kt_dropped, kt_cupti_dropped; /* kt_mu */
static int kt_join;                       /* KT_JOIN_*, set at start (kt_life and kt_mu) */
static int kt_callbacks_on;               /* the launch callbacks are enabled (kt_life) */
static uint64_t kt_next_ext;              /* the last external id given (atomic) */
static struct kt_corr *kt_corrs;          /* KT_STAMPS of them, never freed once made; kt_mu */
/* What CUPTI handed over since the start (kt_mu): the read's one-line
 * account, for a process where no record comes. */
static struct {
	uint64_t buffers, kernels, corrs, other, unmatched, joined;
	uint64_t start_us; /* turning the records on took (kt_start_locked) */
	int fell_back;     /* the join joined nothing: the callback's now */
} kt_seen;
/* What CUPTI did apart from handing records over (atomic): its launch
 * callbacks and the buffers it asked for. They tell a CUPTI that saw no
 * launch from one whose records never came (they found why a -p attach to
 * PyTorch got no record: the tool asked for CUPTI too late; H200,
 * 2026-11-28). */
static uint64_t kt_ncallbacks, kt_nrequested;

/* Kernel records none of whose correlation ids came with a launch's record
 * (API record or external correlation), after which the join is given up
 * for CUPTI's callback. */
#define KT_FALLBACK_AFTER 64

/* Kernel names, interned: CUPTI's name pointers are its own, and a name
 * goes to the tool once. */
struct kt_name {
	char *s;
	uint64_t h;
	int sent; /* to the tool that has the records now */
};
static struct kt_name *kt_names; /* by id - 1; kt_mu */
static uint32_t kt_nnames, kt_names_cap;
static uint32_t *kt_index; /* open addressing: id, 0 empty */
static uint32_t kt_index_cap;

/* The runtime launch call the calling thread is in: the driver call it
 * makes files its stamp under the runtime call's correlation id too. */
static __thread uint32_t t_rt_corr;
static __thread int t_rt_in;

static const char *cupti_err(CUptiResult r)
{
	const char *s = NULL;
	if (!C.GetResultString || C.GetResultString(r, &s) != CUPTI_SUCCESS || !s)
		return "unknown CUPTI error";
	return s;
}

static uint64_t CUPTIAPI kt_clock(void) { return mono_ns(); }

/* ---- finding and loading libcupti ---- */

static int kt_try(const char *path, char *why, size_t whysz)
{
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();
		snprintf(why, whysz, "%s", e ? e : path);
		return -1;
	}
#define SYM(f, name) (*(void **)&C.f = dlsym(h, name))
	if (!SYM(GetResultString, "cuptiGetResultString") || !SYM(GetVersion, "cuptiGetVersion") ||
	    !SYM(Subscribe, "cuptiSubscribe") || !SYM(Unsubscribe, "cuptiUnsubscribe") ||
	    !SYM(EnableCallback, "cuptiEnableCallback") || !SYM(ActivityEnable, "cuptiActivityEnable") ||
	    !SYM(ActivityDisable, "cuptiActivityDisable") ||
	    !SYM(ActivityRegisterCallbacks, "cuptiActivityRegisterCallbacks") ||
	    !SYM(ActivityRegisterTimestampCallback, "cuptiActivityRegisterTimestampCallback") ||
	    !SYM(ActivityFlushAll, "cuptiActivityFlushAll") ||
	    !SYM(ActivityGetNextRecord, "cuptiActivityGetNextRecord") ||
	    !SYM(ActivityGetNumDroppedRecords, "cuptiActivityGetNumDroppedRecords") || !SYM(Finalize, "cuptiFinalize")) {
		snprintf(why, whysz, "%s lacks the CUPTI calls the agent needs (cuptiActivityRegisterTimestampCallback "
			 "came in CUDA 11.6)", path);
		memset(&C, 0, sizeof(C));
		return -1;
	}
	SYM(ActivityFlushPeriod, "cuptiActivityFlushPeriod");
	SYM(PushExternalCorrelationId, "cuptiActivityPushExternalCorrelationId");
	SYM(PopExternalCorrelationId, "cuptiActivityPopExternalCorrelationId");
	SYM(ActivityEnableDriverApi, "cuptiActivityEnableDriverApi");
	SYM(ActivityEnableRuntimeApi, "cuptiActivityEnableRuntimeApi");
#undef SYM
	C.lib = h;
	if (C.GetVersion(&C.version) != CUPTI_SUCCESS)
		C.version = 0;
	Dl_info di;
	if (dladdr(*(void **)&C.Subscribe, &di) && di.dli_fname)
		snprintf(C.path, sizeof(C.path), "%s", di.dli_fname);
	else
		snprintf(C.path, sizeof(C.path), "%s", path);
	return 0;
}

/* Tries each libcupti glob matches, newest name first. */
static int kt_try_glob(const char *pat, char *why, size_t whysz)
{
	glob_t g;
	if (glob(pat, 0, NULL, &g) != 0)
		return -1;
	int ok = -1;
	for (size_t i = g.gl_pathc; i-- > 0 && ok != 0;)
		ok = kt_try(g.gl_pathv[i], why, whysz);
	globfree(&g);
	return ok;
}

/* The directories worth a look, from the objects mapped in the process: a
 * libcupti already loaded (a profiler's or the framework's: the one to use,
 * two CUPTIs in one process fight over the driver), the CUDA wheels'
 * site-packages/nvidia/<pkg>/lib, a toolkit's lib64 with extras/CUPTI. */
static int kt_from_maps(char *why, size_t whysz)
{
	FILE *f = fopen("/proc/self/maps", "re");
	if (!f)
		return -1;
	char line[PATH_MAX + 128], pat[PATH_MAX + 64], seen[8][PATH_MAX];
	int nseen = 0, ok = -1;
	while (ok != 0 && fgets(line, sizeof(line), f)) {
		char *p = strchr(line, '/');
		if (!p)
			continue;
		p[strcspn(p, "\n")] = 0;
		if (strstr(p, "/libcupti.so")) {
			ok = kt_try(p, why, whysz);
			continue;
		}
		char *base = strrchr(p, '/');
		if (!strstr(base, "libcudart.so") && !strstr(base, "libcuda.so") && !strstr(base, "libtorch_cuda") &&
		    !strstr(base, "libcublas"))
			continue;
		*base = 0; /* p: the object's directory */
		int dup = 0;
		for (int i = 0; i < nseen; i++)
			dup |= strcmp(seen[i], p) == 0;
		if (dup || nseen == 8)
			continue;
		snprintf(seen[nseen++], PATH_MAX, "%s", p);
		char *sp = strstr(p, "/site-packages/");
		if (!sp)
			sp = strstr(p, "/dist-packages/");
		if (sp) {
			sp[strlen("/site-packages")] = 0;
			snprintf(pat, sizeof(pat), "%s/nvidia/*/lib/libcupti.so*", p);
			ok = kt_try_glob(pat, why, whysz);
			continue;
		}
		snprintf(pat, sizeof(pat), "%s/libcupti.so*", p);
		if ((ok = kt_try_glob(pat, why, whysz)) != 0) {
			snprintf(pat, sizeof(pat), "%s/../extras/CUPTI/lib64/libcupti.so*", p);
			ok = kt_try_glob(pat, why, whysz);
		}
	}
	fclose(f);
	return ok;
}

/* Loads libcupti once; why says what was tried when it fails. */
static int kt_load(char *why, size_t whysz)
{
	if (C.lib)
		return 0;
	const char *env = getenv("GPUBPF_CUPTI");
	if (env && *env) {
		if (!strcmp(env, "off") || !strcmp(env, "0") || !strcmp(env, "none")) {
			snprintf(why, whysz, "CUPTI is off in this process (GPUBPF_CUPTI=%s)", env);
			return -1;
		}
		if (kt_try(env, why, whysz) == 0)
			return 0;
		char e[512];
		snprintf(e, sizeof(e), "%.500s", why);
		snprintf(why, whysz, "GPUBPF_CUPTI=%.300s: %s", env, e);
		return -1;
	}
	char last[512] = "";
	if (kt_from_maps(last, sizeof(last)) == 0)
		return 0;
	static const char *const names[] = {"libcupti.so", "libcupti.so.13", "libcupti.so.12", "libcupti.so.11.8"};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (kt_try(names[i], last, sizeof(last)) == 0)
			return 0;
	static const char *const pats[] = {"/usr/local/cuda/extras/CUPTI/lib64/libcupti.so*",
					   "/usr/local/cuda/lib64/libcupti.so*",
					   "/usr/local/cuda/targets/*-linux/lib/libcupti.so*",
					   "/usr/local/cuda-*/extras/CUPTI/lib64/libcupti.so*",
					   "/usr/lib/*-linux-gnu/libcupti.so*"};
	for (size_t i = 0; i < sizeof(pats) / sizeof(pats[0]); i++)
		if (kt_try_glob(pats[i], last, sizeof(last)) == 0)
			return 0;
	snprintf(why, whysz,
		 "no libcupti found (looked beside the process's CUDA libraries, in its Python's nvidia wheels, the "
		 "loader's path and /usr/local/cuda; set GPUBPF_CUPTI=/path/to/libcupti.so in the program's "
		 "environment)%s%s",
		 last[0] ? "; last error: " : "", last);
	return -1;
}

/* ---- the launch callback: a stamp per launch call ---- */

static void kt_file(uint64_t corr, uint64_t t, uint64_t stream, uint64_t ctx, int join)
{
	struct kt_stamp *e = &kt_stamps[corr & (KT_STAMPS - 1)];
	__atomic_store_n(&e->corr, 0, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	e->t = t;
	e->stream = stream;
	e->ctx = ctx;
	e->agent = g_agent_thread;
	e->join = (uint32_t)join;
	__atomic_store_n(&e->corr, corr + 1, __ATOMIC_RELEASE);
}

/* Threads between a push and its pop, counted in slots a thread keeps to
 * itself (by thread id): CUPTI is finalized only while none is, since a
 * CUPTI call after the finalize would bring it back up in the process.
 * Dekker-style: a thread counts itself in, then looks at kt_on; the
 * finalize comes after kt_on went 0 and finds every slot empty. */
#define KT_SLOTS 64
static struct {
	uint64_t n;
	char pad[56];
} kt_inflight[KT_SLOTS];
static __thread int t_kt_slot = -1;

static uint64_t *kt_my_slot(void)
{
	if (t_kt_slot < 0)
		t_kt_slot = (int)((unsigned)syscall(SYS_gettid) % KT_SLOTS);
	return &kt_inflight[t_kt_slot].n;
}

static int kt_none_inflight(void)
{
	for (int i = 0; i < KT_SLOTS; i++)
		if (__atomic_load_n(&kt_inflight[i].n, __ATOMIC_SEQ_CST))
			return 0;
	return 1;
}

/* Counts the thread in and pushes id; 0 (counted out again) when the
 * records are off or CUPTI refuses. */
static int kt_push_id(uint64_t id)
{
	uint64_t *n = kt_my_slot();
	__atomic_add_fetch(n, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&kt_on, __ATOMIC_SEQ_CST) && C.PushExternalCorrelationId &&
	    C.PushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2, id) == CUPTI_SUCCESS)
		return 1;
	__atomic_sub_fetch(n, 1, __ATOMIC_RELEASE);
	return 0;
}

/* The launch wrappers' side of KT_JOIN_EXTERNAL (ACTIVE_KTIMES set): the
 * launch on stream s is stamped and its id pushed for the driver call the
 * caller makes next; kt_launch_end pops it. Returns whether it pushed. */
int kt_launch_begin(CUstream s)
{
	if (!__atomic_load_n(&kt_on, __ATOMIC_RELAXED))
		return 0;
	uint64_t id = __atomic_add_fetch(&kt_next_ext, 1, __ATOMIC_RELAXED) & ~KT_EXT_AGENT;
	CUcontext ctx = NULL;
	if (D.cuCtxGetCurrent)
		D.cuCtxGetCurrent(&ctx);
	kt_file(id, mono_ns(), (uint64_t)(uintptr_t)s, (uint64_t)(uintptr_t)ctx, KT_JOIN_EXTERNAL);
	return kt_push_id(id);
}

void kt_launch_end(int pushed)
{
	uint64_t last;
	if (!pushed)
		return;
	C.PopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2, &last);
	__atomic_sub_fetch(kt_my_slot(), 1, __ATOMIC_RELEASE);
}

/* Around the agent's own launches: their records are left out. */
int kt_agent_launch_begin(void)
{
	if (!__atomic_load_n(&kt_on, __ATOMIC_RELAXED) || kt_join == KT_JOIN_CALLBACK)
		return 0;
	return kt_push_id(KT_EXT_AGENT);
}

static CUstream kt_stream(CUpti_CallbackDomain dom, CUpti_CallbackId cbid, const void *params)
{
	if (!params)
		return NULL;
	if (dom == CUPTI_CB_DOMAIN_DRIVER_API) {
		switch (cbid) {
		case CBID_cuLaunchKernel:
		case CBID_cuLaunchKernel_ptsz:
		case CBID_cuLaunchCooperativeKernel:
		case CBID_cuLaunchCooperativeKernel_ptsz:
			return ((const struct p_cuLaunchKernel *)params)->hStream;
		case CBID_cuLaunchKernelEx:
		case CBID_cuLaunchKernelEx_ptsz: {
			const CUlaunchConfig *c = ((const struct p_cuLaunchKernelEx *)params)->config;
			return c ? c->hStream : NULL;
		}
		case CBID_cuGraphLaunch:
		case CBID_cuGraphLaunch_ptsz:
			return ((const struct p_cuGraphLaunch *)params)->hStream;
		case CBID_cuLaunchGridAsync:
			return ((const struct p_cuLaunchGridAsync *)params)->hStream;
		}
		return NULL;
	}
	switch (cbid) {
	case CBID_cudaLaunchKernel_v7000:
	case CBID_cudaLaunchKernel_ptsz_v7000:
	case CBID_cudaLaunchCooperativeKernel_v9000:
	case CBID_cudaLaunchCooperativeKernel_ptsz_v9000:
		return ((const struct p_cudaLaunchKernel *)params)->stream;
	case CBID_cudaLaunchKernelExC_v11060:
	case CBID_cudaLaunchKernelExC_ptsz_v11060: {
		const struct rt_launch_config *c = ((const struct p_cudaLaunchKernelExC *)params)->config;
		return c ? c->stream : NULL;
	}
	case CBID_cudaGraphLaunch_v10000:
	case CBID_cudaGraphLaunch_ptsz_v10000:
		return ((const struct p_cudaGraphLaunch *)params)->stream;
	}
	return NULL;
}

static void CUPTIAPI kt_callback(void *ud, CUpti_CallbackDomain dom, CUpti_CallbackId cbid, const void *data)
{
	const CUpti_CallbackData *cb = data;
	(void)ud;
	if (cb->callbackSite == CUPTI_API_EXIT) {
		if (dom == CUPTI_CB_DOMAIN_RUNTIME_API)
			t_rt_in = 0;
		/* The dynamic detach: the last tool went; CUPTI lets go of the
		 * process from an API's exit in one of its threads. */
		if (UNLIKELY(__atomic_load_n(&kt_finalize, __ATOMIC_ACQUIRE)) &&
		    __atomic_exchange_n(&kt_finalize, 0, __ATOMIC_ACQ_REL)) {
			/* never wait here, inside the application's call: a
			 * tool starting meanwhile may be in CUPTI; try again at
			 * the next exit */
			if (pthread_mutex_trylock(&kt_life) != 0) {
				__atomic_store_n(&kt_finalize, 1, __ATOMIC_RELEASE);
				return;
			}
			if (!kt_owner && kt_sub && !kt_none_inflight()) {
				/* a thread is between its push and its pop */
				__atomic_store_n(&kt_finalize, 1, __ATOMIC_RELEASE);
			} else if (!kt_owner && kt_sub) {
				CUptiResult r = C.Finalize();
				DBG("CUPTI finalized: %s", r == CUPTI_SUCCESS ? "ok" : cupti_err(r));
				if (r == CUPTI_SUCCESS) {
					kt_sub = NULL;
					kt_callbacks_on = 0;
				}
			}
			pthread_mutex_unlock(&kt_life);
		}
		return;
	}
	if (!__atomic_load_n(&kt_on, __ATOMIC_RELAXED) || kt_join != KT_JOIN_CALLBACK)
		return;
	__atomic_fetch_add(&kt_ncallbacks, 1, __ATOMIC_RELAXED);
	uint64_t t = mono_ns();
	uint64_t st = (uint64_t)(uintptr_t)kt_stream(dom, cbid, cb->functionParams);
	uint64_t ctx = (uint64_t)(uintptr_t)cb->context;
	if (dom == CUPTI_CB_DOMAIN_RUNTIME_API) {
		t_rt_in = 1;
		t_rt_corr = cb->correlationId;
	} else if (t_rt_in && t_rt_corr != cb->correlationId) {
		/* the runtime call's driver call: the launch reaches the driver
		 * now (the stamp the probes take too) */
		kt_file(t_rt_corr, t, st, ctx, KT_JOIN_CALLBACK);
	}
	kt_file(cb->correlationId, t, st, ctx, KT_JOIN_CALLBACK);
}

static const CUpti_CallbackId kt_driver_cbids[] = {
	CBID_cuLaunch, CBID_cuLaunchGrid, CBID_cuLaunchGridAsync, CBID_cuLaunchKernel, CBID_cuLaunchKernel_ptsz,
	CBID_cuLaunchCooperativeKernel, CBID_cuLaunchCooperativeKernel_ptsz, CBID_cuLaunchCooperativeKernelMultiDevice,
	CBID_cuGraphLaunch, CBID_cuGraphLaunch_ptsz, CBID_cuLaunchKernelEx, CBID_cuLaunchKernelEx_ptsz,
};
static const CUpti_CallbackId kt_runtime_cbids[] = {
	CBID_cudaLaunch_v3020, CBID_cudaLaunchKernel_v7000, CBID_cudaLaunch_ptsz_v7000,
	CBID_cudaLaunchKernel_ptsz_v7000, CBID_cudaLaunchCooperativeKernel_v9000,
	CBID_cudaLaunchCooperativeKernel_ptsz_v9000, CBID_cudaLaunchCooperativeKernelMultiDevice_v9000,
	CBID_cudaGraphLaunch_v10000, CBID_cudaGraphLaunch_ptsz_v10000, CBID_cudaLaunchKernelExC_v11060,
	CBID_cudaLaunchKernelExC_ptsz_v11060,
};

#define KT_NDRIVER (sizeof(kt_driver_cbids) / sizeof(kt_driver_cbids[0]))
#define KT_NRUNTIME (sizeof(kt_runtime_cbids) / sizeof(kt_runtime_cbids[0]))

/* Whether an API record (kind DRIVER or RUNTIME) is of a launch call. */
static int kt_is_launch(CUpti_ActivityKind kind, CUpti_CallbackId cbid)
{
	const CUpti_CallbackId *ids = kind == CUPTI_ACTIVITY_KIND_DRIVER ? kt_driver_cbids : kt_runtime_cbids;
	size_t n = kind == CUPTI_ACTIVITY_KIND_DRIVER ? KT_NDRIVER : KT_NRUNTIME;
	for (size_t i = 0; i < n; i++)
		if (ids[i] == cbid)
			return 1;
	return 0;
}

/* ---- activity buffers ---- */

static void CUPTIAPI kt_buffer_requested(uint8_t **buf, size_t *size, size_t *max)
{
	void *p = NULL;
	*max = 0;
	__atomic_fetch_add(&kt_nrequested, 1, __ATOMIC_RELAXED);
	if (posix_memalign(&p, 8, KT_BUF) != 0)
		p = NULL; /* CUPTI drops records without a buffer, and counts them */
	*buf = p;
	*size = p ? KT_BUF : 0;
}

static uint32_t kt_name_id(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (const char *c = s; *c; c++)
		h = (h ^ (uint8_t)*c) * 1099511628211ull;
	if (kt_index_cap) {
		for (uint32_t i = (uint32_t)h & (kt_index_cap - 1);; i = (i + 1) & (kt_index_cap - 1)) {
			uint32_t id = kt_index[i];
			if (!id)
				break;
			if (kt_names[id - 1].h == h && !strcmp(kt_names[id - 1].s, s))
				return id;
		}
	}
	if ((kt_nnames + 1) * 2 > kt_index_cap) {
		uint32_t cap = kt_index_cap ? kt_index_cap * 2 : 1024;
		uint32_t *ix = calloc(cap, sizeof(*ix));
		if (!ix)
			return 0;
		for (uint32_t id = 1; id <= kt_nnames; id++) {
			uint32_t i = (uint32_t)kt_names[id - 1].h & (cap - 1);
			while (ix[i])
				i = (i + 1) & (cap - 1);
			ix[i] = id;
		}
		free(kt_index);
		kt_index = ix;
		kt_index_cap = cap;
	}
	if (kt_nnames == kt_names_cap) {
		uint32_t cap = kt_names_cap ? kt_names_cap * 2 : 256;
		struct kt_name *n = realloc(kt_names, cap * sizeof(*n));
		if (!n)
			return 0;
		kt_names = n;
		kt_names_cap = cap;
	}
	char *d = strdup(s);
	if (!d)
		return 0;
	kt_names[kt_nnames] = (struct kt_name){d, h, 0};
	uint32_t id = ++kt_nnames;
	uint32_t i = (uint32_t)h & (kt_index_cap - 1);
	while (kt_index[i])
		i = (i + 1) & (kt_index_cap - 1);
	kt_index[i] = id;
	return id;
}

static void kt_push(const struct kt_raw *r)
{
	if (kt_qn == kt_qcap) {
		size_t cap = kt_qcap ? kt_qcap * 2 : 4096;
		struct kt_raw *q = cap <= KT_QMAX ? realloc(kt_q, cap * sizeof(*q)) : NULL;
		if (!q) {
			kt_dropped++;
			return;
		}
		kt_q = q;
		kt_qcap = cap;
	}
	kt_q[kt_qn++] = *r;
}

/* The correlation slot of corr (kt_mu held), emptied first when it held
 * another's. */
static struct kt_corr *kt_corr_of(uint32_t corr)
{
	struct kt_corr *c = &kt_corrs[corr & (KT_STAMPS - 1)];
	if (c->corr != (uint64_t)corr + 1)
		*c = (struct kt_corr){.corr = (uint64_t)corr + 1};
	return c;
}

static void CUPTIAPI kt_buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size, size_t valid)
{
	(void)size;
	if (!buf)
		return;
	CUpti_Activity *a = NULL;
	pthread_mutex_lock(&kt_mu);
	int keep = kt_owner != NULL;
	if (keep)
		kt_seen.buffers++;
	while (keep && C.ActivityGetNextRecord(buf, valid, &a) == CUPTI_SUCCESS) {
		if (a->kind == CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) {
			const cupti_ext_corr *x = (const void *)a;
			if (x->externalKind != CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2)
				continue;
			kt_seen.corrs++;
			kt_corr_of(x->correlationId)->ext = x->externalId;
			continue;
		}
		if (a->kind == CUPTI_ACTIVITY_KIND_DRIVER || a->kind == CUPTI_ACTIVITY_KIND_RUNTIME) {
			const cupti_api_record *api = (const void *)a;
			if (!kt_is_launch(a->kind, api->cbid)) {
				kt_seen.other++; /* an API a newer CUPTI added, on by default */
				continue;
			}
			kt_seen.corrs++;
			/* a driver API program's launch has the driver's record,
			 * a runtime one's the runtime's; both, the later start
			 * (the driver's: where the probes stamp) */
			struct kt_corr *c = kt_corr_of(api->correlationId);
			if (api->start > c->start)
				c->start = api->start;
			continue;
		}
		if (a->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && a->kind != CUPTI_ACTIVITY_KIND_KERNEL) {
			kt_seen.other++;
			continue;
		}
		kt_seen.kernels++;
		const cupti_kernel_prefix *k = (const void *)a;
		struct kt_raw r = {.corr = k->correlationId};
		r.r.start = k->start;
		r.r.end = k->end;
		r.r.grid = (uint64_t)k->gridId;
		r.r.dev = (int32_t)k->deviceId;
		r.r.name = k->name ? kt_name_id(k->name) : 0;
		uint32_t graph = 0;
		memcpy(&graph, (const uint8_t *)a + CUPTI_KERNEL_GRAPH_ID_OFF, sizeof(graph));
		r.r.graph = graph;
		kt_push(&r);
	}
	size_t dropped = 0;
	if (C.ActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS)
		kt_cupti_dropped += dropped;
	pthread_mutex_unlock(&kt_mu);
	free(buf);
}

/* The launch stamp of a kernel record (kt_mu held): 1 with r's cpu, stream
 * and context filled, 0 when there is none (r goes untimed), -1 for the
 * agent's own kernel, 2 when its launch's record (API record or external
 * correlation) has not come yet. */
static int kt_resolve(struct kt_raw *r)
{
	uint64_t id = r->corr;
	if (kt_join != KT_JOIN_CALLBACK) {
		const struct kt_corr *c = &kt_corrs[r->corr & (KT_STAMPS - 1)];
		if (c->corr != (uint64_t)r->corr + 1)
			return 2;
		if (c->ext == KT_EXT_AGENT)
			return -1;
		if (kt_join == KT_JOIN_API) {
			if (!c->start)
				return 2;
			/* the stream and context the call named are not in
			 * the API record: said (flags), the context taken for
			 * the primary */
			r->r.cpu = c->start;
			r->r.flags |= KT_FLAG_STREAM_UNKNOWN;
			return 1;
		}
		if (!c->ext)
			return 2;
		id = c->ext; /* the wrapper's stamp */
	}
	struct kt_stamp *e = &kt_stamps[id & (KT_STAMPS - 1)];
	if (__atomic_load_n(&e->corr, __ATOMIC_ACQUIRE) != id + 1)
		return 0;
	uint64_t t = e->t, st = e->stream, ctx = e->ctx;
	int agent = e->agent, join = (int)e->join;
	/* the slot may have been filed again as it was read */
	if (__atomic_load_n(&e->corr, __ATOMIC_ACQUIRE) != id + 1)
		return 0;
	if (join != kt_join)
		return 0;
	if (agent)
		return -1; /* the agent's own kernel (its clock) */
	r->r.cpu = t;
	r->r.stream = st;
	r->r.ctx = ctx;
	return 1;
}

/* ---- on and off ---- */

/* The driver's launch calls: a runtime launch is stamped as its driver call
 * comes (the stamp the probes take too). On the H100 that stamped all
 * 100,001 of launch_heavy_sass's runtime launches, for a launch rate of
 * x0.67 against x0.63 with the runtime API's callbacks as well (2026-11-28).
 * GPUBPF_CUPTI_CALLBACKS=all adds those (a launch path the driver's
 * callbacks would miss). */
static void kt_enable_callbacks(int on)
{
	if (kt_callbacks_on == on)
		return;
	kt_callbacks_on = on;
	for (size_t i = 0; i < KT_NDRIVER; i++)
		C.EnableCallback((uint32_t)on, kt_sub, CUPTI_CB_DOMAIN_DRIVER_API, kt_driver_cbids[i]);
	const char *which = getenv("GPUBPF_CUPTI_CALLBACKS");
	if (on && (!which || strcmp(which, "all")))
		return;
	for (size_t i = 0; i < KT_NRUNTIME; i++)
		C.EnableCallback((uint32_t)on, kt_sub, CUPTI_CB_DOMAIN_RUNTIME_API, kt_runtime_cbids[i]);
}

/* How launches are stamped, in words (the read's account, the log). */
static const char *kt_join_name(int join, int fell_back)
{
	if (fell_back)
		return "by CUPTI's callback (the first kernel records joined none of the launches' records)";
	switch (join) {
	case KT_JOIN_API:
		return "by CUPTI's API records of the launch calls";
	case KT_JOIN_EXTERNAL:
		return "by the agent (external correlation)";
	}
	return "by CUPTI's callback";
}

/* API records (driver and runtime) for the launch entry points alone (on:
 * 1), or none. Returns -1 when CUPTI refuses them. Enabling a kind turns
 * every call of it on: each other call is turned off, up to the last id of
 * the CUPTI the agent was written against (a call a newer one added stays
 * on; its records are counted as other). */
static int kt_api_records(int on)
{
	if (!on) {
		C.ActivityDisable(CUPTI_ACTIVITY_KIND_RUNTIME);
		return C.ActivityDisable(CUPTI_ACTIVITY_KIND_DRIVER) == CUPTI_SUCCESS ? 0 : -1;
	}
	CUptiResult r = C.ActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER);
	if (r == CUPTI_SUCCESS && (r = C.ActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME)) != CUPTI_SUCCESS)
		C.ActivityDisable(CUPTI_ACTIVITY_KIND_DRIVER);
	if (r != CUPTI_SUCCESS) {
		DBG("CUPTI refused API records (%s): launches stamped from its callback", cupti_err(r));
		return -1;
	}
	for (CUpti_CallbackId id = 1; id < CBID_DRIVER_SIZE; id++)
		C.ActivityEnableDriverApi(id, 0);
	for (CUpti_CallbackId id = 1; id < CBID_RUNTIME_SIZE; id++)
		C.ActivityEnableRuntimeApi(id, 0);
	for (size_t i = 0; i < KT_NRUNTIME; i++)
		C.ActivityEnableRuntimeApi(kt_runtime_cbids[i], 1);
	for (size_t i = 0; i < KT_NDRIVER; i++)
		if ((r = C.ActivityEnableDriverApi(kt_driver_cbids[i], 1)) != CUPTI_SUCCESS &&
		    kt_driver_cbids[i] == CBID_cuLaunchKernel) {
			DBG("CUPTI refused API records for cuLaunchKernel (%s): launches stamped from its callback",
			    cupti_err(r));
			kt_api_records(0);
			return -1;
		}
	return 0;
}

/* How launches are stamped: CUPTI's launch callback (the default, the
 * cheapest measured); GPUBPF_CUPTI_JOIN=api: CUPTI's API records of the
 * launch calls, where CUPTI can keep them to those calls (12.5) and mark
 * the agent's own launches (external correlation); =external: the agent's
 * wrappers, which see every launch of a program the agent was preloaded
 * into and of one it was injected into (late.c). */
static int kt_join_wanted(void)
{
	const char *j = getenv("GPUBPF_CUPTI_JOIN");
	int ext = C.PushExternalCorrelationId && C.PopExternalCorrelationId;
	if (j && !strcmp(j, "external"))
		return ext ? KT_JOIN_EXTERNAL : KT_JOIN_CALLBACK;
	if (j && !strcmp(j, "api"))
		return C.ActivityEnableDriverApi && C.ActivityEnableRuntimeApi && ext ? KT_JOIN_API : KT_JOIN_CALLBACK;
	return KT_JOIN_CALLBACK;
}

/* The records a join other than the callback's turned on, off again (the
 * external correlation records, refused or not: disabling is harmless). */
static void kt_join_records_off(int join)
{
	if (join == KT_JOIN_API)
		kt_api_records(0);
	if (join != KT_JOIN_CALLBACK)
		C.ActivityDisable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION);
}

/* kt_life held. */
static int kt_start_locked(struct session *s, char *why, size_t whysz)
{
	if (kt_owner == s)
		return 0;
	if (kt_owner) {
		snprintf(why, whysz, "another gpubpf tool already takes this process's kernel times");
		return -1;
	}
	/* A CUPTI tool the driver loaded (Nsight, a tracer) may use the
	 * activity API without a subscriber: registering ours would take its
	 * records. */
	const char *inj = getenv("CUDA_INJECTION64_PATH");
	if (inj && *inj) {
		snprintf(why, whysz, "CUPTI belongs to a tool injected into this process (CUDA_INJECTION64_PATH=%.600s)", inj);
		return -1;
	}
	/* each step's time in the log (-p on PyTorch, the H200, 2026-11-28:
	 * CUPTI on in 23-35 ms, most of it the subscribe) */
	uint64_t t0 = mono_ns();
#define KT_STEP(what) DBG("kernel times: %s at %.1f ms", what, (mono_ns() - t0) / 1e6)
	KT_STEP("loading CUPTI");
	if (kt_load(why, whysz) != 0)
		return -1;
	KT_STEP("CUPTI loaded");
	if ((!kt_stamps && !(kt_stamps = calloc(KT_STAMPS, sizeof(*kt_stamps)))) ||
	    (!kt_corrs && !(kt_corrs = calloc(KT_STAMPS, sizeof(*kt_corrs))))) {
		snprintf(why, whysz, "no memory for the launch stamps (%zu KiB)",
			 KT_STAMPS * (sizeof(*kt_stamps) + sizeof(*kt_corrs)) >> 10);
		return -1;
	}
	/* CUPTI may number its correlations from 1 again after a finalize */
	memset(kt_stamps, 0, KT_STAMPS * sizeof(*kt_stamps));
	memset(kt_corrs, 0, KT_STAMPS * sizeof(*kt_corrs));
	int join = kt_join_wanted();
	CUptiResult r;
	__atomic_store_n(&kt_finalize, 0, __ATOMIC_RELEASE);
	/* Subscribed with every join, though only the callback's enables a
	 * callback: a profiler holding CUPTI refuses the subscriber, where
	 * registering our buffers would take its records. */
	if (!kt_sub) {
		r = C.Subscribe(&kt_sub, kt_callback, NULL);
		if (r != CUPTI_SUCCESS) {
			kt_sub = NULL;
			if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
				snprintf(why, whysz,
					 "CUPTI is held by another subscriber in this process (a profiler: the PyTorch "
					 "profiler, Nsight Systems or Compute, ...)");
			else
				snprintf(why, whysz, "CUPTI (%.600s) refused a subscriber: %s (%d)", C.path, cupti_err(r), r);
			return -1;
		}
		kt_callbacks_on = 0;
		KT_STEP("subscribed");
	}
	if ((r = C.ActivityRegisterTimestampCallback(kt_clock)) != CUPTI_SUCCESS ||
	    (r = C.ActivityRegisterCallbacks(kt_buffer_requested, kt_buffer_completed)) != CUPTI_SUCCESS ||
	    (r = C.ActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)) != CUPTI_SUCCESS) {
		snprintf(why, whysz, "CUPTI (%.600s) refused kernel records: %s (%d)", C.path, cupti_err(r), r);
		C.ActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
		kt_enable_callbacks(0);
		C.Unsubscribe(kt_sub);
		kt_sub = NULL;
		return -1;
	}
	KT_STEP("kernel records on");
	if (join == KT_JOIN_API && kt_api_records(1) != 0)
		join = KT_JOIN_CALLBACK;
	if (join != KT_JOIN_CALLBACK && (r = C.ActivityEnable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION)) != CUPTI_SUCCESS) {
		DBG("CUPTI refused external correlation records (%s): launches stamped from its callback", cupti_err(r));
		kt_join_records_off(join);
		join = KT_JOIN_CALLBACK;
	}
	kt_enable_callbacks(join == KT_JOIN_CALLBACK);
	KT_STEP("launch stamps on");
#undef KT_STEP
	if (C.ActivityFlushPeriod)
		C.ActivityFlushPeriod(KT_FLUSH_MS);
	pthread_mutex_lock(&kt_mu);
	kt_owner = s;
	kt_qn = 0;
	kt_dropped = kt_cupti_dropped = 0;
	for (uint32_t i = 0; i < kt_nnames; i++)
		kt_names[i].sent = 0; /* a new tool learns every name */
	kt_join = join;
	memset(&kt_seen, 0, sizeof(kt_seen));
	__atomic_store_n(&kt_ncallbacks, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&kt_nrequested, 0, __ATOMIC_RELAXED);
	kt_seen.start_us = (mono_ns() - t0) / 1000;
	pthread_mutex_unlock(&kt_mu);
	__atomic_store_n(&kt_on, 1, __ATOMIC_RELEASE);
	if (join == KT_JOIN_EXTERNAL)
		__atomic_or_fetch(&g_active, ACTIVE_KTIMES, __ATOMIC_RELEASE);
	DBG("kernel times on in %.1f ms: %s (CUPTI %u), launches stamped %s", (mono_ns() - t0) / 1e6, C.path, C.version,
	    kt_join_name(join, 0));
	return 0;
}

/* The join joined nothing: CUPTI's launch callback stamps the launches
 * from now on, and the wrappers stop pushing. */
static void kt_fall_back(struct session *s)
{
	pthread_mutex_lock(&kt_life);
	if (kt_owner == s && kt_join != KT_JOIN_CALLBACK) {
		int was = kt_join;
		__atomic_and_fetch(&g_active, ~ACTIVE_KTIMES, __ATOMIC_RELEASE);
		kt_enable_callbacks(1);
		pthread_mutex_lock(&kt_mu);
		kt_join = KT_JOIN_CALLBACK;
		kt_seen.fell_back = 1;
		pthread_mutex_unlock(&kt_mu);
		kt_join_records_off(was);
		DBG("kernel times: launches stamped %s, and none of %llu kernel records joined: CUPTI's callback stamps "
		    "them from now on",
		    kt_join_name(was, 0), (unsigned long long)kt_seen.unmatched);
	}
	pthread_mutex_unlock(&kt_life);
}

int kt_recording(void) { return __atomic_load_n(&kt_on, __ATOMIC_RELAXED); }

/* Whether CUPTI must stay subscribed when the last tool lets go. Finalizing
 * CUPTI while a CUDA graph it recorded kernels of is being replayed made
 * the replay fail (a PyTorch torch.cuda.CUDAGraph under launchlate -p,
 * H200, CUDA 13.0, 2026-11-29: "unspecified launch failure" within 64
 * replays of the detach, twice): in a process that launched graphs while
 * the records were on, CUPTI is kept with its records and callbacks off.
 * GPUBPF_CUPTI_FINALIZE=1 finalizes anyway, =0 never. */
static int kt_keep_subscribed(void)
{
	const char *e = getenv("GPUBPF_CUPTI_FINALIZE");
	if (e && e[0] == '1')
		return 0;
	if (e && e[0] == '0')
		return 1;
	return gx_launched_under_cupti();
}

/* Turns the records off if s has them (NULL: whoever has them). */
void kt_release(struct session *s)
{
	pthread_mutex_lock(&kt_life);
	if (!kt_owner || (s && kt_owner != s)) {
		pthread_mutex_unlock(&kt_life);
		return;
	}
	__atomic_store_n(&kt_on, 0, __ATOMIC_RELEASE);
	__atomic_and_fetch(&g_active, ~ACTIVE_KTIMES, __ATOMIC_RELEASE);
	pthread_mutex_lock(&kt_mu);
	kt_owner = NULL; /* buffers completed from now on are dropped */
	pthread_mutex_unlock(&kt_mu);
	/* outside kt_mu: a flush hands buffers to kt_buffer_completed */
	C.ActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
	kt_join_records_off(kt_join);
	if (C.ActivityFlushPeriod)
		C.ActivityFlushPeriod(0);
	C.ActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
	pthread_mutex_lock(&kt_mu);
	free(kt_q);
	kt_q = NULL;
	kt_qn = kt_qcap = 0;
	pthread_mutex_unlock(&kt_mu);
	if (kt_keep_subscribed()) {
		/* CUDA graphs ran with CUPTI's kernel records on: CUPTI stays
		 * (records off, no callback) rather than finalize under them */
		kt_enable_callbacks(0);
		DBG("CUPTI kept, its records and callbacks off: graphs were launched while it recorded");
	} else {
		__atomic_store_n(&kt_finalize, 1, __ATOMIC_RELEASE);
		/* the finalize waits for a launch callback's exit */
		kt_enable_callbacks(1);
	}
	pthread_mutex_unlock(&kt_life);
}

/* Whether s has the kernel records (its last look at exit reads them). */
int kt_owned_by(struct session *s)
{
	pthread_mutex_lock(&kt_mu);
	int mine = kt_owner == s;
	pthread_mutex_unlock(&kt_mu);
	return mine;
}

/* A fork child has none of its parent's tool. */
void kt_atfork_child(void)
{
	__atomic_store_n(&kt_on, 0, __ATOMIC_RELAXED);
	kt_owner = NULL;
	kt_qn = 0;
	memset(kt_inflight, 0, sizeof(kt_inflight)); /* the parent's other threads are not here */
	pthread_mutex_init(&kt_mu, NULL);
	pthread_mutex_init(&kt_life, NULL);
}

/* op kernel-times: u32 action, u32 flags (agentproto.KernelTimesRequest). */
int op_kernel_times(struct session *s, uint32_t req, struct rbuf *r, struct wbuf *w)
{
	uint32_t action = rb_u32(r), flags = rb_u32(r);
	char why[1024];
	if (r->err)
		return send_error(s, OP_KERNEL_TIMES, req, ST_BAD_REQUEST, 0, "malformed kernel-times request");
	switch (action) {
	case 1: { /* start */
		pthread_mutex_lock(&kt_life);
		int rc = kt_start_locked(s, why, sizeof(why));
		pthread_mutex_unlock(&kt_life);
		if (rc != 0)
			return send_error(s, OP_KERNEL_TIMES, req, ST_UNSUPPORTED, 0, "%s", why);
		wb_i32(w, ST_OK);
		wb_str(w, C.path);
		wb_u32(w, C.version);
		wb_u64(w, 0);
		wb_u64(w, 0);
		wb_u32(w, 0);
		wb_u32(w, 0);
		return 0;
	}
	case 2: { /* read */
		pthread_mutex_lock(&kt_mu);
		int mine = kt_owner == s;
		pthread_mutex_unlock(&kt_mu);
		if (!mine)
			return send_error(s, OP_KERNEL_TIMES, req, ST_BAD_REQUEST, 0, "kernel-times: not started");
		/* CUPTI hands over what completed (all it holds when final) */
		C.ActivityFlushAll((flags & 1) ? CUPTI_ACTIVITY_FLAG_FLUSH_FORCED : 0);
		pthread_mutex_lock(&kt_mu);
		struct kt_raw *raw = kt_q;
		size_t nraw = kt_qn;
		kt_q = NULL;
		kt_qn = kt_qcap = 0;
		/* joined now that every buffer CUPTI completed is in; one whose
		 * correlation is not waits for the next read (not the last) */
		struct kt_rec *q = nraw ? malloc(nraw * sizeof(*q)) : NULL;
		size_t n = 0;
		if (nraw && !q) {
			kt_dropped += nraw;
			nraw = 0;
		}
		for (size_t i = 0; i < nraw; i++) {
			struct kt_raw cur = raw[i];
			int rc = kt_resolve(&cur);
			if (rc == 2 && !(flags & 1) && cur.age == 0) {
				cur.age = 1;
				kt_push(&cur);
				continue;
			}
			if (rc == 2)
				kt_seen.unmatched++;
			else if (rc >= 0)
				kt_seen.joined++;
			if (rc < 0)
				continue;
			q[n++] = cur.r;
		}
		free(raw);
		uint64_t cd = kt_cupti_dropped, d = kt_dropped;
		kt_cupti_dropped = kt_dropped = 0;
		/* the names of the kernels sent, the first time each is */
		uint32_t nnew = 0;
		for (size_t i = 0; i < n; i++) {
			struct kt_name *nm = q[i].name ? &kt_names[q[i].name - 1] : NULL;
			if (nm && !nm->sent) {
				nm->sent = 2;
				nnew++;
			}
		}
		/* CUPTI gives kernel records but none is tied to a launch the
		 * wrappers pushed: stamp from its callback from now on */
		int fall_back = kt_join != KT_JOIN_CALLBACK && kt_seen.joined == 0 &&
				kt_seen.unmatched >= KT_FALLBACK_AFTER;
		char account[768];
		snprintf(account, sizeof(account),
			 "CUPTI, on in %.1f ms, asked for %llu buffers, handed over %llu: %llu kernel records, %llu launch "
			 "records, %llu other; %llu launch callbacks; %llu kernels without their launch's record; launches "
			 "stamped %s",
			 kt_seen.start_us / 1e3, (unsigned long long)__atomic_load_n(&kt_nrequested, __ATOMIC_RELAXED),
			 (unsigned long long)kt_seen.buffers, (unsigned long long)kt_seen.kernels,
			 (unsigned long long)kt_seen.corrs, (unsigned long long)kt_seen.other,
			 (unsigned long long)__atomic_load_n(&kt_ncallbacks, __ATOMIC_RELAXED),
			 (unsigned long long)kt_seen.unmatched,
			 kt_join_name(kt_join, kt_seen.fell_back || fall_back));
		wb_i32(w, ST_OK);
		wb_str(w, account);
		wb_u32(w, 0);
		wb_u64(w, cd);
		wb_u64(w, d);
		wb_u32(w, nnew);
		for (uint32_t id = 1; nnew && id <= kt_nnames; id++) {
			if (kt_names[id - 1].sent == 2) {
				kt_names[id - 1].sent = 1;
				wb_u32(w, id);
				wb_str(w, kt_names[id - 1].s);
			}
		}
		pthread_mutex_unlock(&kt_mu);
		if (fall_back)
			kt_fall_back(s);
		/* A primary context's records go by device (the placement the
		 * tools read maps by), another context's by its handle. */
		struct {
			uint64_t ctx;
			int dev;
			int primary;
		} seen[16];
		int nseen = 0;
		wb_u32(w, (uint32_t)n);
		for (size_t i = 0; i < n; i++) {
			struct kt_rec *k = &q[i];
			if (k->ctx) {
				int j = 0;
				while (j < nseen && (seen[j].ctx != k->ctx || seen[j].dev != k->dev))
					j++;
				if (j == nseen && nseen < 16) {
					seen[j].ctx = k->ctx;
					seen[j].dev = k->dev;
					seen[j].primary = (uint64_t)(uintptr_t)primary_of(k->dev) == k->ctx;
					nseen++;
				}
				if (j < nseen && seen[j].primary)
					k->ctx = 0;
			}
			wb_raw(w, k, sizeof(*k));
		}
		free(q);
		return 0;
	}
	case 3: /* stop */
		kt_release(s);
		wb_i32(w, ST_OK);
		return 0;
	}
	return send_error(s, OP_KERNEL_TIMES, req, ST_BAD_REQUEST, 0, "kernel-times: unknown action %u", action);
}
