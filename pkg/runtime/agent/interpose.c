/* Interposition of the CUDA driver API: dlsym, every cuGetProcAddress
 * flavour, and direct exported definitions of the wrapped entry points.
 *
 * The launch wrappers are the hot path: with no probe active they cost one
 * relaxed atomic load and one predictable branch before forwarding. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"

void *(*real_dlsym)(void *, const char *);
struct drv D;
int g_debug;

#define LOADP(p) __atomic_load_n(&(p), __ATOMIC_ACQUIRE)
#define STOREP(p, v) __atomic_store_n(&(p), (v), __ATOMIC_RELEASE)

static void resolve_real_dlsym(void)
{
	if (real_dlsym)
		return;
	void *p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
	if (!p)
		p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
	STOREP(real_dlsym, (void *(*)(void *, const char *))p);
}

void *libcuda_handle(void)
{
	static void *h;
	void *x = LOADP(h);
	if (x)
		return x;
	x = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
	if (!x)
		x = dlopen("libcuda.so", RTLD_LAZY | RTLD_NOLOAD);
	if (x)
		STOREP(h, x);
	return x;
}

int cuda_loaded(void) { return libcuda_handle() != NULL; }

/* Looks a symbol up in libcuda itself (never our own definitions). */
static void *cuda_sym(const char *name)
{
	resolve_real_dlsym();
	void *h = libcuda_handle();
	if (!h || !real_dlsym)
		return NULL;
	return real_dlsym(h, name);
}

typedef CUresult (*gpa2_t)(const char *, void **, int, uint64_t, int *);
typedef CUresult (*gpa1_t)(const char *, void **, int, uint64_t);

/* Real cuGetProcAddress pointers (set at first sight or resolved). */
static gpa2_t real_gpa2;
static gpa1_t real_gpa1;

static void *drv_get(const char *name)
{
	gpa2_t g = LOADP(real_gpa2);
	if (!g)
		g = (gpa2_t)cuda_sym("cuGetProcAddress_v2");
	/* Ask for the CUDA 12.0 ABI our prototypes follow: newer drivers map
	 * some names to later versions with other signatures (CUDA 13:
	 * cuCtxGetDevice_v2 takes a context). Entry points added after 12.0
	 * have one version only: try 12.9 for those. */
	static const int vers[] = {12000, 12090};
	for (int i = 0; g && i < 2; i++) {
		void *p = NULL;
		int st = 0;
		if (g(name, &p, vers[i], 0, &st) == CUDA_SUCCESS && p)
			return p;
	}
	return g ? NULL : cuda_sym(name);
}

/* An entry point added after 12.9, asked for at the version that has it. */
static void *drv_get_at(const char *name, int ver)
{
	gpa2_t g = LOADP(real_gpa2);
	if (!g)
		g = (gpa2_t)cuda_sym("cuGetProcAddress_v2");
	void *p = NULL;
	int st = 0;
	if (g && g(name, &p, ver, 0, &st) == CUDA_SUCCESS && p)
		return p;
	return NULL;
}

int drv_init(void)
{
	static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	if (LOADP(D.ready))
		return 0;
	if (!cuda_loaded())
		return -1;
	pthread_mutex_lock(&mu);
	if (D.ready) {
		pthread_mutex_unlock(&mu);
		return 0;
	}
	D.cuDriverGetVersion = cuda_sym("cuDriverGetVersion");
	if (!D.cuDriverGetVersion || D.cuDriverGetVersion(&D.version) != CUDA_SUCCESS)
		D.version = 12000;
#define G(n) D.n = drv_get(#n)
	G(cuDeviceGetCount);
	G(cuDeviceGet);
	G(cuDeviceGetName);
	G(cuDeviceGetAttribute);
	G(cuDevicePrimaryCtxRetain);
	G(cuDevicePrimaryCtxRelease);
	G(cuDevicePrimaryCtxGetState);
	G(cuCtxGetCurrent);
	G(cuCtxSetCurrent);
	G(cuCtxGetDevice);
	G(cuCtxSynchronize);
	G(cuModuleLoadDataEx);
	G(cuModuleUnload);
	G(cuModuleGetFunction);
	G(cuModuleGetGlobal);
	G(cuLibraryGetGlobal);
	G(cuKernelGetName);
	G(cuFuncGetName);
	G(cuKernelGetLibrary);
	G(cuFuncGetModule);
	G(cuKernelGetAttribute);
	G(cuFuncGetAttribute);
	G(cuFuncSetAttribute);
	G(cuLibraryGetKernelCount);
	G(cuLibraryEnumerateKernels);
	G(cuModuleGetFunctionCount);
	G(cuModuleEnumerateFunctions);
	G(cuEventCreate);
	G(cuEventRecord);
	G(cuEventSynchronize);
	G(cuEventDestroy);
	G(cuEventQuery);
	G(cuEventElapsedTime);
	G(cuStreamIsCapturing);
	G(cuMemAlloc);
	G(cuMemFree);
	G(cuMemsetD8);
	G(cuMemcpyHtoD);
	G(cuMemcpyDtoH);
	G(cuMemHostRegister);
	G(cuMemHostUnregister);
	G(cuMemHostGetDevicePointer);
	G(cuStreamCreate);
	G(cuStreamDestroy);
	G(cuStreamSynchronize);
	G(cuMemsetD8Async);
	G(cuMemcpyHtoDAsync);
	G(cuMemcpyDtoHAsync);
	G(cuThreadExchangeStreamCaptureMode);
	G(cuStreamWaitEvent);
	G(cuStreamQuery);
	G(cuLaunchKernel);
	G(cuStreamWriteValue64);
	G(cuPointerGetAttribute);
	/* at 12.0 the driver hands out the v2 ABI; without cuGetProcAddress
	 * (a driver older than 11.3) there is none */
	D.cuStreamGetCaptureInfo =
		LOADP(real_gpa2) || cuda_sym("cuGetProcAddress_v2") ? drv_get("cuStreamGetCaptureInfo") : NULL;
	D.cuGraphNodeGetContainingGraph = drv_get_at("cuGraphNodeGetContainingGraph", 13010);
	/* execs.c: asked for at 12.0, the ABIs of its prototypes (drivers
	 * before 12.0 leave executable graphs made before the attach alone) */
	if (D.version >= 12000) {
		G(cuGraphClone);
		G(cuGraphDestroy);
		G(cuGraphGetNodes);
		G(cuGraphNodeGetType);
		G(cuGraphChildGraphNodeGetGraph);
		G(cuGraphNodeFindInClone);
		G(cuGraphKernelNodeGetParams);
		G(cuGraphKernelNodeSetParams);
		G(cuGraphExecUpdate);
	}
	/* Asked for at 12.8, the ABI with failIdx (13.0's _v2 dropped it).
	 * GPUBPF_AGENT_DRAIN_BATCH=0 leaves it unused (a drain then makes one
	 * call per copy: what the benchmarks compare it with). */
	const char *batch = getenv("GPUBPF_AGENT_DRAIN_BATCH");
	if (!batch || strcmp(batch, "0"))
		D.cuMemcpyBatchAsync = drv_get_at("cuMemcpyBatchAsync", 12080);
#undef G
	int ok = D.cuCtxGetCurrent && D.cuCtxSetCurrent && D.cuModuleLoadDataEx && D.cuModuleUnload &&
		 D.cuModuleGetFunction && D.cuDeviceGetCount && D.cuDeviceGet && D.cuStreamCreate &&
		 D.cuStreamDestroy && D.cuStreamSynchronize && D.cuMemsetD8Async && D.cuMemcpyHtoDAsync &&
		 D.cuMemcpyDtoHAsync && D.cuMemAlloc && D.cuMemFree;
	if (ok)
		STOREP(D.ready, 1);
	pthread_mutex_unlock(&mu);
	return ok ? 0 : -1;
}

/* ------------------------------------------------------------------ */
/* Real pointers of the wrapped entry points (one per exported name).  */

typedef CUresult (*launch_t)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
			     CUstream, void **, void **);
typedef CUresult (*launchcoop_t)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
				 CUstream, void **);
typedef CUresult (*launchex_t)(const CUlaunchConfig *, CUfunction, void **, void **);
typedef CUresult (*libload_t)(CUlibrary *, const void *, CUjit_option *, void **, unsigned, CUlibraryOption *,
			      void **, unsigned);
typedef CUresult (*libfile_t)(CUlibrary *, const char *, CUjit_option *, void **, unsigned, CUlibraryOption *,
			      void **, unsigned);
typedef CUresult (*libunload_t)(CUlibrary);
typedef CUresult (*modload_t)(CUmodule *, const void *);
typedef CUresult (*modloadex_t)(CUmodule *, const void *, unsigned, CUjit_option *, void **);
typedef CUresult (*modfile_t)(CUmodule *, const char *);
typedef CUresult (*modunload_t)(CUmodule);
typedef CUresult (*ctxretain_t)(CUcontext *, CUdevice);
typedef CUresult (*ctxcreate2_t)(CUcontext *, unsigned, CUdevice);
typedef CUresult (*ctxcreate3_t)(CUcontext *, void *, int, unsigned, CUdevice);
typedef CUresult (*ctxcreate4_t)(CUcontext *, void *, unsigned, CUdevice);
typedef CUresult (*ctxdestroy_t)(CUcontext);
typedef CUresult (*primctx_t)(CUdevice);
typedef CUresult (*libgetkernel_t)(CUkernel *, CUlibrary, const char *);
typedef CUresult (*kernelgetfn_t)(CUfunction *, CUkernel);
typedef CUresult (*modgetfn_t)(CUfunction *, CUmodule, const char *);
typedef CUresult (*graphadd_t)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, const void *);
typedef CUresult (*graphset_t)(CUgraphNode, const void *);
typedef CUresult (*graphexecset_t)(CUgraphExec, CUgraphNode, const void *);
typedef CUresult (*graphinst5_t)(CUgraphExec *, CUgraph, CUgraphNode *, char *, size_t);
typedef CUresult (*graphinstf_t)(CUgraphExec *, CUgraph, unsigned long long);
typedef CUresult (*graphinstp_t)(CUgraphExec *, CUgraph, void *);
typedef CUresult (*graphupd1_t)(CUgraphExec, CUgraph, CUgraphNode *, int *);
typedef CUresult (*graphupd2_t)(CUgraphExec, CUgraph, void *);
typedef CUresult (*graphlaunch_t)(CUgraphExec, CUstream);
typedef CUresult (*graphexecdestroy_t)(CUgraphExec);
typedef CUresult (*graphexecchange3_t)(CUgraphExec, CUgraphNode, const void *);
typedef CUresult (*graphexecchange4_t)(CUgraphExec, CUgraphNode, const void *, CUcontext);
typedef CUresult (*graphnodeenable_t)(CUgraphExec, CUgraphNode, unsigned);

enum {
	R_cuGetProcAddress,
	R_cuGetProcAddress_v2,
	R_cuLibraryLoadData,
	R_cuLibraryLoadFromFile,
	R_cuLibraryUnload,
	R_cuModuleLoadData,
	R_cuModuleLoadDataEx,
	R_cuModuleLoadFatBinary,
	R_cuModuleLoad,
	R_cuModuleUnload,
	R_cuLibraryGetKernel,
	R_cuKernelGetFunction,
	R_cuModuleGetFunction,
	R_cuLaunchKernel,
	R_cuLaunchKernel_ptsz,
	R_cuLaunchKernelEx,
	R_cuLaunchKernelEx_ptsz,
	R_cuLaunchCooperativeKernel,
	R_cuLaunchCooperativeKernel_ptsz,
	R_cuGraphAddKernelNode,
	R_cuGraphAddKernelNode_v2,
	R_cuGraphKernelNodeSetParams,
	R_cuGraphKernelNodeSetParams_v2,
	R_cuGraphExecKernelNodeSetParams,
	R_cuGraphExecKernelNodeSetParams_v2,
	R_cuGraphInstantiate,
	R_cuGraphInstantiate_v2,
	R_cuGraphInstantiateWithFlags,
	R_cuGraphInstantiateWithParams,
	R_cuGraphInstantiateWithParams_ptsz,
	R_cuGraphExecUpdate,
	R_cuGraphExecUpdate_v2,
	R_cuGraphLaunch,
	R_cuGraphLaunch_ptsz,
	R_cuGraphExecDestroy,
	R_cuGraphExecNodeSetParams,
	R_cuGraphNodeSetEnabled,
	R_cuGraphExecMemcpyNodeSetParams,
	R_cuGraphExecMemsetNodeSetParams,
	R_cuGraphExecHostNodeSetParams,
	R_cuGraphExecChildGraphNodeSetParams,
	R_cuGraphExecEventRecordNodeSetEvent,
	R_cuGraphExecEventWaitNodeSetEvent,
	R_cuGraphExecExternalSemaphoresSignalNodeSetParams,
	R_cuGraphExecExternalSemaphoresWaitNodeSetParams,
	R_cuGraphExecBatchMemOpNodeSetParams,
	R_cuDevicePrimaryCtxRetain,
	R_cuCtxCreate_v2,
	R_cuCtxCreate_v3,
	R_cuCtxCreate_v4,
	R_cuCtxDestroy,
	R_cuCtxDestroy_v2,
	R_cuDevicePrimaryCtxRelease,
	R_cuDevicePrimaryCtxRelease_v2,
	R_cuDevicePrimaryCtxReset,
	R_cuDevicePrimaryCtxReset_v2,
	R_cuStreamBeginCapture,
	R_cuStreamBeginCapture_ptsz,
	R_cuStreamBeginCapture_v2,
	R_cuStreamBeginCapture_v2_ptsz,
	R_cuStreamBeginCaptureToGraph,
	R_cuStreamBeginCaptureToGraph_ptsz,
	R_cuStreamEndCapture,
	R_cuStreamEndCapture_ptsz,
	R_cuStreamDestroy,
	R_cuStreamDestroy_v2,
	R_cuStreamCreate,
	R_cuStreamCreateWithPriority,
	R_COUNT
};

static void *reals[R_COUNT];
static const char *const real_names[R_COUNT] = {
#define N(x) [R_##x] = #x
	N(cuGetProcAddress),
	N(cuGetProcAddress_v2),
	N(cuLibraryLoadData),
	N(cuLibraryLoadFromFile),
	N(cuLibraryUnload),
	N(cuModuleLoadData),
	N(cuModuleLoadDataEx),
	N(cuModuleLoadFatBinary),
	N(cuModuleLoad),
	N(cuModuleUnload),
	N(cuLibraryGetKernel),
	N(cuKernelGetFunction),
	N(cuModuleGetFunction),
	N(cuLaunchKernel),
	N(cuLaunchKernel_ptsz),
	N(cuLaunchKernelEx),
	N(cuLaunchKernelEx_ptsz),
	N(cuLaunchCooperativeKernel),
	N(cuLaunchCooperativeKernel_ptsz),
	N(cuGraphAddKernelNode),
	N(cuGraphAddKernelNode_v2),
	N(cuGraphKernelNodeSetParams),
	N(cuGraphKernelNodeSetParams_v2),
	N(cuGraphExecKernelNodeSetParams),
	N(cuGraphExecKernelNodeSetParams_v2),
	N(cuGraphInstantiate),
	N(cuGraphInstantiate_v2),
	N(cuGraphInstantiateWithFlags),
	N(cuGraphInstantiateWithParams),
	N(cuGraphInstantiateWithParams_ptsz),
	N(cuGraphExecUpdate),
	N(cuGraphExecUpdate_v2),
	N(cuGraphLaunch),
	N(cuGraphLaunch_ptsz),
	N(cuGraphExecDestroy),
	N(cuGraphExecNodeSetParams),
	N(cuGraphNodeSetEnabled),
	N(cuGraphExecMemcpyNodeSetParams),
	N(cuGraphExecMemsetNodeSetParams),
	N(cuGraphExecHostNodeSetParams),
	N(cuGraphExecChildGraphNodeSetParams),
	N(cuGraphExecEventRecordNodeSetEvent),
	N(cuGraphExecEventWaitNodeSetEvent),
	N(cuGraphExecExternalSemaphoresSignalNodeSetParams),
	N(cuGraphExecExternalSemaphoresWaitNodeSetParams),
	N(cuGraphExecBatchMemOpNodeSetParams),
	N(cuDevicePrimaryCtxRetain),
	N(cuCtxCreate_v2),
	N(cuCtxCreate_v3),
	N(cuCtxCreate_v4),
	N(cuCtxDestroy),
	N(cuCtxDestroy_v2),
	N(cuDevicePrimaryCtxRelease),
	N(cuDevicePrimaryCtxRelease_v2),
	N(cuDevicePrimaryCtxReset),
	N(cuDevicePrimaryCtxReset_v2),
	N(cuStreamBeginCapture),
	N(cuStreamBeginCapture_ptsz),
	N(cuStreamBeginCapture_v2),
	N(cuStreamBeginCapture_v2_ptsz),
	N(cuStreamBeginCaptureToGraph),
	N(cuStreamBeginCaptureToGraph_ptsz),
	N(cuStreamEndCapture),
	N(cuStreamEndCapture_ptsz),
	N(cuStreamDestroy),
	N(cuStreamDestroy_v2),
	N(cuStreamCreate),
	N(cuStreamCreateWithPriority),
#undef N
};
static void *wrappers[R_COUNT];

static inline void *real(int i)
{
	void *p = LOADP(reals[i]);
	if (LIKELY(p != NULL))
		return p;
	p = cuda_sym(real_names[i]);
	if (p && p != wrappers[i])
		STOREP(reals[i], p);
	return p == wrappers[i] ? NULL : p;
}

#define REAL(T, n) ((T)real(R_##n))
#define NOFUNC 999 /* CUDA_ERROR_UNKNOWN: libcuda missing entirely */

/* ---------------- module loads ---------------- */

/* The application loaded a module: record it and, if a tool asked, hold
 * until the tool has instrumented it. Loads by the agent's own threads
 * (clones) are not the application's; they reach these wrappers only when
 * the driver's own entry points resolve to the agent's exports, and must
 * never wait on themselves. */
static void app_module_loaded(int kind, void *handle, const void *image, const char *path)
{
	if (!g_agent_thread)
		server_hold(inv_add_module(kind, handle, image, path));
}

/* The application is about to unload a module: let tools take a last look. */
static void app_module_unloading(void *handle)
{
	if (g_agent_thread)
		return;
	DBG("application unloads module %p", handle);
	server_hold_unload(handle);
	inv_module_unloaded(handle);
}

EXPORT CUresult cuLibraryLoadData(CUlibrary *lib, const void *code, CUjit_option *jo, void **jv, unsigned nj,
				  CUlibraryOption *lo, void **lv, unsigned nl)
{
	libload_t f = REAL(libload_t, cuLibraryLoadData);
	if (!f)
		return NOFUNC;
	CUresult r = f(lib, code, jo, jv, nj, lo, lv, nl);
	if (r == CUDA_SUCCESS && lib)
		app_module_loaded(MK_LIBRARY_DATA, *lib, code, NULL);
	return r;
}

EXPORT CUresult cuLibraryLoadFromFile(CUlibrary *lib, const char *file, CUjit_option *jo, void **jv, unsigned nj,
				      CUlibraryOption *lo, void **lv, unsigned nl)
{
	libfile_t f = REAL(libfile_t, cuLibraryLoadFromFile);
	if (!f)
		return NOFUNC;
	CUresult r = f(lib, file, jo, jv, nj, lo, lv, nl);
	if (r == CUDA_SUCCESS && lib)
		app_module_loaded(MK_LIBRARY_FILE, *lib, NULL, file);
	return r;
}

EXPORT CUresult cuLibraryUnload(CUlibrary lib)
{
	libunload_t f = REAL(libunload_t, cuLibraryUnload);
	if (!f)
		return NOFUNC;
	app_module_unloading(lib);
	return f(lib);
}

EXPORT CUresult cuModuleLoadData(CUmodule *m, const void *image)
{
	modload_t f = REAL(modload_t, cuModuleLoadData);
	if (!f)
		return NOFUNC;
	CUresult r = f(m, image);
	if (r == CUDA_SUCCESS && m)
		app_module_loaded(MK_MODULE_DATA, *m, image, NULL);
	return r;
}

EXPORT CUresult cuModuleLoadDataEx(CUmodule *m, const void *image, unsigned n, CUjit_option *o, void **v)
{
	modloadex_t f = REAL(modloadex_t, cuModuleLoadDataEx);
	if (!f)
		return NOFUNC;
	CUresult r = f(m, image, n, o, v);
	if (r == CUDA_SUCCESS && m)
		app_module_loaded(MK_MODULE_DATA, *m, image, NULL);
	return r;
}

EXPORT CUresult cuModuleLoadFatBinary(CUmodule *m, const void *fatbin)
{
	modload_t f = REAL(modload_t, cuModuleLoadFatBinary);
	if (!f)
		return NOFUNC;
	CUresult r = f(m, fatbin);
	if (r == CUDA_SUCCESS && m)
		app_module_loaded(MK_MODULE_FATBIN, *m, fatbin, NULL);
	return r;
}

EXPORT CUresult cuModuleLoad(CUmodule *m, const char *fname)
{
	modfile_t f = REAL(modfile_t, cuModuleLoad);
	if (!f)
		return NOFUNC;
	CUresult r = f(m, fname);
	if (r == CUDA_SUCCESS && m)
		app_module_loaded(MK_MODULE_FILE, *m, NULL, fname);
	return r;
}

EXPORT CUresult cuModuleUnload(CUmodule m)
{
	modunload_t f = REAL(modunload_t, cuModuleUnload);
	if (!f)
		return NOFUNC;
	app_module_unloading(m);
	return f(m);
}

/* ---------------- contexts ---------------- */

/* The application starts using a device (cudart retains its primary
 * context on first use): tools place their maps and clones of
 * context-independent modules there, and only there. */
EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	ctxretain_t f = REAL(ctxretain_t, cuDevicePrimaryCtxRetain);
	if (!f)
		return NOFUNC;
	CUresult r = f(pctx, dev);
	if (r == CUDA_SUCCESS)
		server_ctx_born(*pctx);
	if (r == CUDA_SUCCESS && !g_agent_thread)
		server_device_used(dev);
	return r;
}

/* A context the application creates itself counts as using its device. */
EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned flags, CUdevice dev)
{
	ctxcreate2_t f = REAL(ctxcreate2_t, cuCtxCreate_v2);
	if (!f)
		return NOFUNC;
	CUresult r = f(pctx, flags, dev);
	if (r == CUDA_SUCCESS)
		server_ctx_born(*pctx);
	if (r == CUDA_SUCCESS && !g_agent_thread)
		server_device_used(dev);
	return r;
}

EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, void *params, int n, unsigned flags, CUdevice dev)
{
	ctxcreate3_t f = REAL(ctxcreate3_t, cuCtxCreate_v3);
	if (!f)
		return NOFUNC;
	CUresult r = f(pctx, params, n, flags, dev);
	if (r == CUDA_SUCCESS)
		server_ctx_born(*pctx);
	if (r == CUDA_SUCCESS && !g_agent_thread)
		server_device_used(dev);
	return r;
}

EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, void *params, unsigned flags, CUdevice dev)
{
	ctxcreate4_t f = REAL(ctxcreate4_t, cuCtxCreate_v4);
	if (!f)
		return NOFUNC;
	CUresult r = f(pctx, params, flags, dev);
	if (r == CUDA_SUCCESS)
		server_ctx_born(*pctx);
	if (r == CUDA_SUCCESS && !g_agent_thread)
		server_device_used(dev);
	return r;
}

/* A context the application destroys takes along what tools placed in it
 * (maps, clones, streams): the agent forgets those first, with every tool
 * request held off, so none ever reaches a dead context (the driver can
 * crash on one). A primary context goes with its last release or a reset
 * (cudaDeviceReset). */
static CUresult ctx_destroy(int slot, CUcontext c)
{
	ctxdestroy_t f = (ctxdestroy_t)real(slot);
	if (!f)
		return NOFUNC;
	if (g_agent_thread || !c)
		return f(c);
	server_ctx_lock();
	server_ctx_gone(c);
	CUresult r = f(c);
	server_ctx_unlock();
	return r;
}
EXPORT CUresult cuCtxDestroy(CUcontext c) { return ctx_destroy(R_cuCtxDestroy, c); }
EXPORT CUresult cuCtxDestroy_v2(CUcontext c) { return ctx_destroy(R_cuCtxDestroy_v2, c); }

CUcontext primary_of(CUdevice dev)
{
	unsigned fl = 0;
	int active = 0;
	CUcontext c = NULL;
	if (drv_init() != 0 || !D.cuDevicePrimaryCtxGetState || !D.cuDevicePrimaryCtxRetain ||
	    !D.cuDevicePrimaryCtxRelease || D.cuDevicePrimaryCtxGetState(dev, &fl, &active) != CUDA_SUCCESS || !active)
		return NULL;
	if (D.cuDevicePrimaryCtxRetain(&c, dev) != CUDA_SUCCESS)
		return NULL;
	D.cuDevicePrimaryCtxRelease(dev);
	return c;
}

static int primary_active(CUdevice dev)
{
	unsigned fl = 0;
	int active = 1;
	if (D.cuDevicePrimaryCtxGetState)
		D.cuDevicePrimaryCtxGetState(dev, &fl, &active);
	return active;
}

/* A release destroys the primary context only when it was the last use
 * (known after it returns: no request ran meanwhile); a reset always does. */
static CUresult primary_end(int slot, CUdevice dev, int reset)
{
	primctx_t f = (primctx_t)real(slot);
	if (!f)
		return NOFUNC;
	if (g_agent_thread)
		return f(dev);
	server_ctx_lock();
	CUcontext c = primary_of(dev);
	if (reset)
		server_ctx_gone(c);
	CUresult r = f(dev);
	if (!reset && c && r == CUDA_SUCCESS && !primary_active(dev))
		server_ctx_gone(c);
	server_ctx_unlock();
	return r;
}
EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return primary_end(R_cuDevicePrimaryCtxRelease, dev, 0); }
EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) { return primary_end(R_cuDevicePrimaryCtxRelease_v2, dev, 0); }
EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev) { return primary_end(R_cuDevicePrimaryCtxReset, dev, 1); }
EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) { return primary_end(R_cuDevicePrimaryCtxReset_v2, dev, 1); }

/* ---------------- kernel handles ---------------- */

EXPORT CUresult cuLibraryGetKernel(CUkernel *k, CUlibrary lib, const char *name)
{
	libgetkernel_t f = REAL(libgetkernel_t, cuLibraryGetKernel);
	if (!f)
		return NOFUNC;
	CUresult r = f(k, lib, name);
	if (r == CUDA_SUCCESS && k)
		inv_add_kernel(*k, KK_KERNEL, lib, NULL, name);
	return r;
}

EXPORT CUresult cuKernelGetFunction(CUfunction *fn, CUkernel k)
{
	kernelgetfn_t f = REAL(kernelgetfn_t, cuKernelGetFunction);
	if (!f)
		return NOFUNC;
	CUresult r = f(fn, k);
	if (r == CUDA_SUCCESS && fn)
		inv_add_kernel(*fn, KK_FUNCTION, NULL, k, NULL);
	return r;
}

EXPORT CUresult cuModuleGetFunction(CUfunction *fn, CUmodule m, const char *name)
{
	modgetfn_t f = REAL(modgetfn_t, cuModuleGetFunction);
	if (!f)
		return NOFUNC;
	CUresult r = f(fn, m, name);
	if (r == CUDA_SUCCESS && fn)
		inv_add_kernel(*fn, KK_FUNCTION, m, NULL, name);
	return r;
}

/* ---------------- launches ---------------- */

/* The stream an event must be recorded on to follow a launch: the
 * per-thread default stream when a _ptsz entry point got stream 0. */
static inline CUstream ev_stream(CUstream s, int ptds) { return (!s && ptds) ? CU_STREAM_PER_THREAD : s; }

/* ---------------- launch words ---------------- */

/* Argument lists up to this many parameters (and packed buffers up to this
 * many bytes) are built on the stack; larger ones are allocated. */
#define HW_STACK_PARAMS 64
#define HW_STACK_BUF 512

/* The clone's arguments when it takes two hidden launch words: lives until
 * the wrapped call returns (the driver copies arguments at the call). */
struct hidden_args {
	uint64_t w[2];  /* the words, filled in by the caller */
	void *heap;     /* allocated list or buffer, freed after the call */
	size_t size;    /* packed buffer size (extra form) */
	void *extra[5]; /* extra form */
	union {
		void *params[HW_STACK_PARAMS + 2];
		uint64_t buf[HW_STACK_BUF / 8];
	} u;
};

/* Builds the clone's arguments from the application's p (kernelParams) or
 * e (extra) with h->w appended. Returns 0 with *pp and *pe set, or -1 when
 * it cannot (the caller then launches the original, untouched). */
static int hidden_args(const struct activation *a, void **p, void **e, struct hidden_args *h, void ***pp,
		       void ***pe)
{
	h->heap = NULL;
	if (p && e)
		return -1; /* the driver refuses both: the original reports it */
	if (p || !e) {
		uint32_t n = a->nparams;
		if (!p && n)
			return -1; /* a kernel with parameters launched without any */
		void **q = h->u.params;
		if (n > HW_STACK_PARAMS) {
			q = h->heap = malloc(((size_t)n + 2) * sizeof(void *));
			if (!q)
				return -1;
		}
		if (n)
			memcpy(q, p, (size_t)n * sizeof(void *));
		q[n] = &h->w[0];
		q[n + 1] = &h->w[1];
		*pp = q;
		*pe = NULL;
		return 0;
	}
	/* extra: {BUFFER_POINTER, buf, BUFFER_SIZE, &size, END}, in any order */
	const void *src = NULL;
	size_t sz = 0;
	int have_size = 0, end = 0;
	for (int i = 0; i < 16 && !end; i += 2) {
		if (e[i] == CU_LAUNCH_PARAM_END) {
			end = 1;
		} else if (e[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
			src = e[i + 1];
		} else if (e[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
			if (!e[i + 1])
				return -1;
			sz = *(const size_t *)e[i + 1];
			have_size = 1;
		} else {
			return -1; /* a key we do not know: cannot rewrite safely */
		}
	}
	if (!end || !have_size || (sz && !src) || sz > (64u << 10))
		return -1;
	size_t need = (size_t)a->bufoff + 16, nsz = sz > need ? sz : need;
	uint8_t *b = (uint8_t *)h->u.buf;
	if (nsz > sizeof(h->u.buf)) {
		b = h->heap = malloc(nsz);
		if (!b)
			return -1;
	}
	if (sz)
		memcpy(b, src, sz);
	if (nsz > sz)
		memset(b + sz, 0, nsz - sz);
	memcpy(b + a->bufoff, h->w, 16);
	h->size = nsz;
	h->extra[0] = CU_LAUNCH_PARAM_BUFFER_POINTER;
	h->extra[1] = b;
	h->extra[2] = CU_LAUNCH_PARAM_BUFFER_SIZE;
	h->extra[3] = &h->size;
	h->extra[4] = CU_LAUNCH_PARAM_END;
	*pp = NULL;
	*pe = h->extra;
	return 0;
}

/* The clone's arguments for an instrumented launch on stream s: the
 * application's p/e, with the launch words appended when the probe reads
 * them (*cap: the stream's capture status, -1 when not asked). Returns -1
 * when the words cannot be passed: the original kernel runs instead. */
static int clone_args(struct activation *a, CUstream s, int ptds, void **p, void **e, struct hidden_args *h,
		      void ***cp, void ***ce, int *cap)
{
	h->heap = NULL;
	*cp = p;
	*ce = e;
	*cap = -1;
	if (!a->hidden)
		return 0;
	*cap = probe_launch_words(a, s, ev_stream(s, ptds), h->w);
	return hidden_args(a, p, e, h, cp, ce);
}

/* Entry of the launch slow paths: pauses for a starved tool request
 * (drv_gate); *t0 is the launch's start when launches are recorded. Returns
 * 0 when that pause was all there was to do (no probe, discovery or launch
 * events): the launch then goes straight to the driver, without the lock
 * and the lookup. */
static inline int launch_enter(uint64_t *t0)
{
	drv_gate();
	int act = __atomic_load_n(&g_active, __ATOMIC_RELAXED);
	*t0 = act & ACTIVE_EVENTS ? mono_ns() : 0;
	return act & ~(ACTIVE_GATE | ACTIVE_KTIMES);
}

static __attribute__((noinline)) CUresult launch_slow(launch_t real_fn, int ptds, CUfunction f, unsigned gx,
						      unsigned gy, unsigned gz, unsigned bx, unsigned by,
						      unsigned bz, unsigned sh, CUstream s, void **p, void **e,
						      const void *caller)
{
	uint64_t t0;
	int act = launch_enter(&t0), kx = kt_begin(s);
	if (!act) {
		CUresult r = real_fn(f, gx, gy, gz, bx, by, bz, sh, s, p, e);
		kt_launch_end(kx);
		return r;
	}
	late_seen(f);
	struct activation *a = NULL;
	pthread_rwlock_rdlock(&g_rw);
	CUfunction c = probe_lookup(f, &a);
	CUresult r;
	if (c) {
		struct hidden_args h;
		void **cp, **ce;
		int cap;
		if (clone_args(a, s, ptds, p, e, &h, &cp, &ce, &cap) != 0)
			c = f; /* cannot pass the words: the original runs */
		if (c != f) {
			r = real_fn(c, gx, gy, gz, bx, by, bz, sh, s, cp, ce);
			probe_after_launch(a, ev_stream(s, ptds), r, cap);
		}
		if (c == f || r != CUDA_SUCCESS) /* never harm the app: run the original */
			r = real_fn(f, gx, gy, gz, bx, by, bz, sh, s, p, e);
		free(h.heap);
	} else {
		r = real_fn(f, gx, gy, gz, bx, by, bz, sh, s, p, e);
	}
	if (t0) {
		unsigned g[3] = {gx, gy, gz}, b[3] = {bx, by, bz};
		lev_record(ptds ? LEV_LAUNCH_PTSZ : LEV_LAUNCH, f, g, b, sh, s, r, t0, caller);
	}
	pthread_rwlock_unlock(&g_rw);
	kt_launch_end(kx);
	return r;
}

#define LAUNCH_WRAPPER(NAME, PTDS)                                                                             \
	EXPORT CUresult NAME(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,     \
			     unsigned bz, unsigned sh, CUstream s, void **p, void **e)                          \
	{                                                                                                       \
		launch_t r = (launch_t)LOADP(reals[R_##NAME]);                                                  \
		if (UNLIKELY(!r) && !(r = REAL(launch_t, NAME)))                                                \
			return NOFUNC;                                                                          \
		if (LIKELY(!__atomic_load_n(&g_active, __ATOMIC_RELAXED)))                                      \
			return r(f, gx, gy, gz, bx, by, bz, sh, s, p, e);                                       \
		return launch_slow(r, PTDS, f, gx, gy, gz, bx, by, bz, sh, s, p, e, __builtin_return_address(0)); \
	}
LAUNCH_WRAPPER(cuLaunchKernel, 0)
LAUNCH_WRAPPER(cuLaunchKernel_ptsz, 1)

static __attribute__((noinline)) CUresult coop_slow(launchcoop_t real_fn, int ptds, CUfunction f, unsigned gx,
						    unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
						    unsigned sh, CUstream s, void **p, const void *caller)
{
	uint64_t t0;
	int act = launch_enter(&t0), kx = kt_begin(s);
	if (!act) {
		CUresult r = real_fn(f, gx, gy, gz, bx, by, bz, sh, s, p);
		kt_launch_end(kx);
		return r;
	}
	late_seen(f);
	struct activation *a = NULL;
	pthread_rwlock_rdlock(&g_rw);
	CUfunction c = probe_lookup(f, &a);
	CUresult r;
	if (c) {
		struct hidden_args h;
		void **cp, **ce;
		int cap;
		if (clone_args(a, s, ptds, p, NULL, &h, &cp, &ce, &cap) != 0)
			c = f; /* cannot pass the words: the original runs */
		if (c != f) {
			r = real_fn(c, gx, gy, gz, bx, by, bz, sh, s, cp);
			probe_after_launch(a, ev_stream(s, ptds), r, cap);
		}
		if (c == f || r != CUDA_SUCCESS)
			r = real_fn(f, gx, gy, gz, bx, by, bz, sh, s, p);
		free(h.heap);
	} else {
		r = real_fn(f, gx, gy, gz, bx, by, bz, sh, s, p);
	}
	if (t0) {
		unsigned g[3] = {gx, gy, gz}, b[3] = {bx, by, bz};
		lev_record(ptds ? LEV_COOP_PTSZ : LEV_COOP, f, g, b, sh, s, r, t0, caller);
	}
	pthread_rwlock_unlock(&g_rw);
	kt_launch_end(kx);
	return r;
}

#define COOP_WRAPPER(NAME, PTDS)                                                                               \
	EXPORT CUresult NAME(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,     \
			     unsigned bz, unsigned sh, CUstream s, void **p)                                    \
	{                                                                                                       \
		launchcoop_t r = (launchcoop_t)LOADP(reals[R_##NAME]);                                          \
		if (UNLIKELY(!r) && !(r = REAL(launchcoop_t, NAME)))                                            \
			return NOFUNC;                                                                          \
		if (LIKELY(!__atomic_load_n(&g_active, __ATOMIC_RELAXED)))                                      \
			return r(f, gx, gy, gz, bx, by, bz, sh, s, p);                                          \
		return coop_slow(r, PTDS, f, gx, gy, gz, bx, by, bz, sh, s, p, __builtin_return_address(0));   \
	}
COOP_WRAPPER(cuLaunchCooperativeKernel, 0)
COOP_WRAPPER(cuLaunchCooperativeKernel_ptsz, 1)

static __attribute__((noinline)) CUresult ex_slow(launchex_t real_fn, int ptds, const CUlaunchConfig *cfg,
						  CUfunction f, void **p, void **e, const void *caller)
{
	uint64_t t0;
	int act = launch_enter(&t0), kx = kt_begin(cfg ? cfg->hStream : NULL);
	if (!act) {
		CUresult r = real_fn(cfg, f, p, e);
		kt_launch_end(kx);
		return r;
	}
	late_seen(f);
	struct activation *a = NULL;
	pthread_rwlock_rdlock(&g_rw);
	CUfunction c = probe_lookup(f, &a);
	CUresult r;
	if (c) {
		CUstream s = cfg ? cfg->hStream : NULL;
		struct hidden_args h;
		void **cp, **ce;
		int cap;
		if (clone_args(a, s, ptds, p, e, &h, &cp, &ce, &cap) != 0)
			c = f; /* cannot pass the words: the original runs */
		if (c != f) {
			r = real_fn(cfg, c, cp, ce);
			probe_after_launch(a, ev_stream(s, ptds), r, cap);
		}
		if (c == f || r != CUDA_SUCCESS)
			r = real_fn(cfg, f, p, e);
		free(h.heap);
	} else {
		r = real_fn(cfg, f, p, e);
	}
	if (t0 && cfg) {
		unsigned g[3] = {cfg->gridDimX, cfg->gridDimY, cfg->gridDimZ};
		unsigned b[3] = {cfg->blockDimX, cfg->blockDimY, cfg->blockDimZ};
		lev_record(ptds ? LEV_LAUNCH_EX_PTSZ : LEV_LAUNCH_EX, f, g, b, cfg->sharedMemBytes, cfg->hStream, r, t0,
			   caller);
	}
	pthread_rwlock_unlock(&g_rw);
	kt_launch_end(kx);
	return r;
}

#define EX_WRAPPER(NAME, PTDS)                                                                                 \
	EXPORT CUresult NAME(const CUlaunchConfig *cfg, CUfunction f, void **p, void **e)                       \
	{                                                                                                       \
		launchex_t r = (launchex_t)LOADP(reals[R_##NAME]);                                              \
		if (UNLIKELY(!r) && !(r = REAL(launchex_t, NAME)))                                              \
			return NOFUNC;                                                                          \
		if (LIKELY(!__atomic_load_n(&g_active, __ATOMIC_RELAXED)))                                      \
			return r(cfg, f, p, e);                                                                 \
		return ex_slow(r, PTDS, cfg, f, p, e, __builtin_return_address(0));                             \
	}
EX_WRAPPER(cuLaunchKernelEx, 0)
EX_WRAPPER(cuLaunchKernelEx_ptsz, 1)

/* ---------------- graph kernel nodes ---------------- */

/* What graph_params hands the driver instead of the application's params:
 * lives until the wrapped call returns (the driver copies it). */
struct graph_tmp {
	CUDA_KERNEL_NODE_PARAMS_v2 p;
	struct hidden_args h;
};

/* Copies params and swaps the function when the kernel has an active
 * probe; the clone is pinned (graphs may be relaunched at any time). A
 * clone with launch words swapped into an exec by the agent (ep) gets an id
 * of the tool's (kind LW_KIND_GRAPH_SEQ, gxseq.c); any other its graph's
 * stamp word (kind LW_KIND_GRAPH_WORD): the node runs at every replay, long
 * after this call, and reads the stamp each graph launch writes there. The
 * graph is g (a node added), or x's (an exec's node set), or n's (a node
 * set: known to CUDA 13.1 drivers); without one the node gets "launched by
 * a graph, no stamp". */
static const void *graph_params(const void *params, int v2, struct graph_tmp *tmp, CUgraph g, CUgraphNode n,
				CUgraphExec x, struct gxs_epoch *ep)
{
	tmp->h.heap = NULL;
	if (!params || LIKELY(!__atomic_load_n(&g_active, __ATOMIC_RELAXED)))
		return params;
	const CUDA_KERNEL_NODE_PARAMS_v2 *in = params;
	void *h = (void *)in->func;
	if (!h && v2)
		h = (void *)in->kern;
	if (!h)
		return params;
	const void *out = params;
	struct activation *a = NULL;
	late_seen(h);
	pthread_rwlock_rdlock(&g_rw);
	CUfunction c = probe_lookup(h, &a);
	void **cp = c ? in->kernelParams : NULL, **ce = c ? in->extra : NULL;
	if (c && a->hidden) {
		uint32_t id = ep ? gxs_id(a->owner, ep) : 0;
		CUdeviceptr gw = id ? 0 : g ? gw_graph(g, a->ctx) : x ? gw_exec(x, a->ctx) : gw_node(n, a->ctx);
		tmp->h.w[0] = 0;
		tmp->h.w[1] = id && gxs_mode() == GXS_HOST ? LW_KIND_GRAPH << 56
			      : id ? LW_KIND_GRAPH_SEQ << 56 | id
			      : gw ? LW_KIND_GRAPH_WORD << 56 | (gw & LW_STREAM_MASK) : LW_KIND_GRAPH << 56;
		if (hidden_args(a, in->kernelParams, in->extra, &tmp->h, &cp, &ce) != 0)
			c = NULL; /* cannot pass the words: the node keeps the original */
	}
	if (c) {
		memset(&tmp->p, 0, sizeof(tmp->p));
		memcpy(&tmp->p, in, v2 ? sizeof(CUDA_KERNEL_NODE_PARAMS_v2) : sizeof(CUDA_KERNEL_NODE_PARAMS_v1));
		tmp->p.func = c;
		tmp->p.kernelParams = cp;
		tmp->p.extra = ce;
		if (v2) {
			tmp->p.kern = NULL;
			tmp->p.ctx = NULL;
		}
		probe_pin(a);
		out = &tmp->p;
	}
	pthread_rwlock_unlock(&g_rw);
	return out;
}

int node_instrument(CUgraphNode n, CUgraphExec x, struct gxs_epoch *ep)
{
	CUDA_KERNEL_NODE_PARAMS_v2 p;
	memset(&p, 0, sizeof(p));
	if (D.cuGraphKernelNodeGetParams(n, &p) != CUDA_SUCCESS)
		return -1;
	if (probe_is_clone(p.func))
		return 2;
	struct graph_tmp tmp;
	const void *out = graph_params(&p, 1, &tmp, NULL, NULL, x, ep);
	if (out == &p && p.func && p.kern) {
		/* a CUfunction the inventory does not know: try the CUkernel */
		free(tmp.h.heap);
		CUfunction f = p.func;
		p.func = NULL;
		out = graph_params(&p, 1, &tmp, NULL, NULL, x, ep);
		p.func = f;
	}
	int done = 0;
	if (out != &p)
		done = D.cuGraphKernelNodeSetParams(n, out) == CUDA_SUCCESS ? 1 : -1;
	free(tmp.h.heap);
	return done;
}

#define GRAPH_ADD(NAME, V2)                                                                                    \
	EXPORT CUresult NAME(CUgraphNode *n, CUgraph g, const CUgraphNode *d, size_t nd, const void *params)    \
	{                                                                                                       \
		graphadd_t r = REAL(graphadd_t, NAME);                                                          \
		if (!r)                                                                                         \
			return NOFUNC;                                                                          \
		struct graph_tmp tmp;                                                                           \
		CUresult res = r(n, g, d, nd, graph_params(params, V2, &tmp, g, NULL, NULL, NULL));                   \
		free(tmp.h.heap);                                                                               \
		return res;                                                                                     \
	}
GRAPH_ADD(cuGraphAddKernelNode, 0)
GRAPH_ADD(cuGraphAddKernelNode_v2, 1)

#define GRAPH_SET(NAME, V2)                                                                                    \
	EXPORT CUresult NAME(CUgraphNode n, const void *params)                                                 \
	{                                                                                                       \
		graphset_t r = REAL(graphset_t, NAME);                                                          \
		if (!r)                                                                                         \
			return NOFUNC;                                                                          \
		struct graph_tmp tmp;                                                                           \
		CUresult res = r(n, graph_params(params, V2, &tmp, NULL, n, NULL, NULL));                             \
		free(tmp.h.heap);                                                                               \
		return res;                                                                                     \
	}
GRAPH_SET(cuGraphKernelNodeSetParams, 0)
GRAPH_SET(cuGraphKernelNodeSetParams_v2, 1)

#define GRAPH_EXECSET(NAME, V2)                                                                                \
	EXPORT CUresult NAME(CUgraphExec x, CUgraphNode n, const void *params)                                  \
	{                                                                                                       \
		graphexecset_t r = REAL(graphexecset_t, NAME);                                                  \
		if (!r)                                                                                         \
			return NOFUNC;                                                                          \
		struct graph_tmp tmp;                                                                           \
		CUresult res = r(x, n, graph_params(params, V2, &tmp, NULL, n, x, NULL));                             \
		free(tmp.h.heap);                                                                               \
		if (res == CUDA_SUCCESS)                                                                        \
			gx_kernel_node_set(x, n, params, V2);                                                   \
		return res;                                                                                     \
	}
GRAPH_EXECSET(cuGraphExecKernelNodeSetParams, 0)
GRAPH_EXECSET(cuGraphExecKernelNodeSetParams_v2, 1)

/* ---------------- graph instantiation and launch ---------------- */

/* An exec runs its graph's nodes: it takes the graph's stamp word (only
 * once some graph has one; an exec handle used again is updated). */
static inline void instantiated(CUresult r, CUgraphExec *x, CUgraph g)
{
	if (r != CUDA_SUCCESS || !x)
		return;
	if (UNLIKELY(gw_any()))
		gw_instantiated(*x, g);
	gx_instantiated(*x, g);
}

#define GRAPH_INST5(NAME)                                                                                      \
	EXPORT CUresult NAME(CUgraphExec *x, CUgraph g, CUgraphNode *en, char *log, size_t n)                  \
	{                                                                                                       \
		graphinst5_t r = REAL(graphinst5_t, NAME);                                                      \
		if (!r)                                                                                         \
			return NOFUNC;                                                                          \
		CUresult res = r(x, g, en, log, n);                                                             \
		instantiated(res, x, g);                                                                        \
		return res;                                                                                     \
	}
GRAPH_INST5(cuGraphInstantiate)
GRAPH_INST5(cuGraphInstantiate_v2)

EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *x, CUgraph g, unsigned long long flags)
{
	graphinstf_t r = REAL(graphinstf_t, cuGraphInstantiateWithFlags);
	if (!r)
		return NOFUNC;
	CUresult res = r(x, g, flags);
	instantiated(res, x, g);
	return res;
}

#define GRAPH_INSTP(NAME)                                                                                      \
	EXPORT CUresult NAME(CUgraphExec *x, CUgraph g, void *params)                                           \
	{                                                                                                       \
		graphinstp_t r = REAL(graphinstp_t, NAME);                                                      \
		if (!r)                                                                                         \
			return NOFUNC;                                                                          \
		CUresult res = r(x, g, params);                                                                 \
		instantiated(res, x, g);                                                                        \
		return res;                                                                                     \
	}
GRAPH_INSTP(cuGraphInstantiateWithParams)
GRAPH_INSTP(cuGraphInstantiateWithParams_ptsz)

/* An updated exec runs the new graph's nodes (a failed update leaves the
 * old ones, or an exec that cannot be launched). */
static inline void updated(CUresult r, CUgraphExec x, CUgraph g)
{
	if (r != CUDA_SUCCESS)
		return;
	if (UNLIKELY(gw_any()))
		gw_instantiated(x, g);
	gx_updated(x, g);
}

EXPORT CUresult cuGraphExecUpdate(CUgraphExec x, CUgraph g, CUgraphNode *en, int *res_out)
{
	graphupd1_t r = REAL(graphupd1_t, cuGraphExecUpdate);
	if (!r)
		return NOFUNC;
	CUresult res = r(x, g, en, res_out);
	updated(res, x, g);
	return res;
}

EXPORT CUresult cuGraphExecUpdate_v2(CUgraphExec x, CUgraph g, void *info)
{
	graphupd2_t r = REAL(graphupd2_t, cuGraphExecUpdate_v2);
	if (!r)
		return NOFUNC;
	CUresult res = r(x, g, info);
	updated(res, x, g);
	return res;
}

#define CU_STREAM_WRITE_VALUE_DEFAULT 0

int stream_capture_status(CUstream evs)
{
	/* preloaded, the wrappers see every capture begin and end: none
	 * active, no stream is capturing (a driver call saved per launch) */
	if (capture_wrapped() && !probe_captures_active())
		return CU_STREAM_CAPTURE_STATUS_NONE;
	int st = CU_STREAM_CAPTURE_STATUS_ACTIVE;
	if (!D.cuStreamIsCapturing || D.cuStreamIsCapturing(evs, &st) != CUDA_SUCCESS)
		return -1;
	return st;
}

/* A launch of an exec with a stamp word, while a probe with launch-word
 * slots is active: the stamp goes to the word in stream order right before
 * the graph. One stream write per graph launch (each is a stream operation
 * of its own: a second one to clear the word after the graph cost as much
 * again on back-to-back graphs), so a copy of the nodes launched another
 * way (a child graph, a clone) reads the graph's last stamp. Not into a
 * stream being captured (the write would be replayed with a stale stamp).
 * Never in the way: when the write fails the graph launches as asked. */
static __attribute__((noinline)) CUresult graph_launch_slow(graphlaunch_t real_fn, int ptds, CUgraphExec x,
							    CUstream s)
{
	drv_gate();
	CUstream evs = ev_stream(s, ptds);
	int cap = -1; /* asked once, when something needs it */
	int stamped = 0;
	if (__atomic_load_n(&g_gx_on, __ATOMIC_ACQUIRE) && !g_agent_thread)
		stamped = gx_launch(x, evs, &cap);
	CUdeviceptr w = 0;
	pthread_rwlock_rdlock(&g_rw);
	if (probe_lw_on() && D.cuStreamWriteValue64 && (w = gw_exec_word(x)) != 0) {
		if (cap < 0)
			cap = stream_capture_status(evs);
		/* fenced: without the fence (CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER)
		 * the graph's kernels read no stamp at all (H200, CUDA 13.0) */
		if (cap != CU_STREAM_CAPTURE_STATUS_NONE ||
		    D.cuStreamWriteValue64(evs, w, probe_graph_stamp(), CU_STREAM_WRITE_VALUE_DEFAULT) != CUDA_SUCCESS)
			w = 0;
	}
	pthread_rwlock_unlock(&g_rw);
	int kx = kt_begin(s);
	CUresult r = real_fn(x, s);
	kt_launch_end(kx);
	if (UNLIKELY(stamped && r != CUDA_SUCCESS))
		gx_launch_failed(x); /* its nodes never run: the next launch is this number */
	return r;
}

/* Slow path: a probe, CUPTI's records or a graph word want the launch, or a
 * tool counts graph launches (or an exec still runs instrumented nodes:
 * its next launch puts the originals back). */
#define GRAPH_LAUNCH(NAME, PTDS)                                                                               \
	EXPORT CUresult NAME(CUgraphExec x, CUstream s)                                                         \
	{                                                                                                       \
		graphlaunch_t r = (graphlaunch_t)LOADP(reals[R_##NAME]);                                        \
		if (UNLIKELY(!r) && !(r = REAL(graphlaunch_t, NAME)))                                           \
			return NOFUNC;                                                                          \
		int act = __atomic_load_n(&g_active, __ATOMIC_RELAXED);                                        \
		if ((LIKELY(!act) || (LIKELY(!gw_any()) && !(act & ACTIVE_KTIMES))) &&                          \
		    LIKELY(!__atomic_load_n(&g_gx_on, __ATOMIC_RELAXED)))                                       \
			return r(x, s);                                                                         \
		return graph_launch_slow(r, PTDS, x, s);                                                        \
	}
GRAPH_LAUNCH(cuGraphLaunch, 0)
GRAPH_LAUNCH(cuGraphLaunch_ptsz, 1)

EXPORT CUresult cuGraphExecDestroy(CUgraphExec x)
{
	graphexecdestroy_t r = REAL(graphexecdestroy_t, cuGraphExecDestroy);
	if (!r)
		return NOFUNC;
	gx_destroyed(x);
	return r(x);
}

/* The application changes an exec in place in a way its snapshot does not
 * follow: execs.c leaves that exec alone from then on. */
#define GRAPH_EXEC_CHANGE3(NAME)                                                                               \
	EXPORT CUresult NAME(CUgraphExec x, CUgraphNode n, const void *p)                                       \
	{                                                                                                       \
		graphexecchange3_t r = REAL(graphexecchange3_t, NAME);                                          \
		if (!r)                                                                                         \
			return NOFUNC;                                                                          \
		CUresult res = r(x, n, p);                                                                      \
		if (res == CUDA_SUCCESS)                                                                        \
			gx_changed(x, #NAME);                                                                   \
		return res;                                                                                     \
	}
GRAPH_EXEC_CHANGE3(cuGraphExecNodeSetParams)
GRAPH_EXEC_CHANGE3(cuGraphExecHostNodeSetParams)
GRAPH_EXEC_CHANGE3(cuGraphExecChildGraphNodeSetParams)
GRAPH_EXEC_CHANGE3(cuGraphExecEventRecordNodeSetEvent)
GRAPH_EXEC_CHANGE3(cuGraphExecEventWaitNodeSetEvent)
GRAPH_EXEC_CHANGE3(cuGraphExecExternalSemaphoresSignalNodeSetParams)
GRAPH_EXEC_CHANGE3(cuGraphExecExternalSemaphoresWaitNodeSetParams)
GRAPH_EXEC_CHANGE3(cuGraphExecBatchMemOpNodeSetParams)

#define GRAPH_EXEC_CHANGE4(NAME)                                                                               \
	EXPORT CUresult NAME(CUgraphExec x, CUgraphNode n, const void *p, CUcontext c)                          \
	{                                                                                                       \
		graphexecchange4_t r = REAL(graphexecchange4_t, NAME);                                          \
		if (!r)                                                                                         \
			return NOFUNC;                                                                          \
		CUresult res = r(x, n, p, c);                                                                   \
		if (res == CUDA_SUCCESS)                                                                        \
			gx_changed(x, #NAME);                                                                   \
		return res;                                                                                     \
	}
GRAPH_EXEC_CHANGE4(cuGraphExecMemcpyNodeSetParams)
GRAPH_EXEC_CHANGE4(cuGraphExecMemsetNodeSetParams)

EXPORT CUresult cuGraphNodeSetEnabled(CUgraphExec x, CUgraphNode n, unsigned on)
{
	graphnodeenable_t r = REAL(graphnodeenable_t, cuGraphNodeSetEnabled);
	if (!r)
		return NOFUNC;
	CUresult res = r(x, n, on);
	if (res == CUDA_SUCCESS)
		gx_changed(x, "cuGraphNodeSetEnabled");
	return res;
}

/* ---------------- stream captures and stream ends ---------------- */

/* Launches may leave their events to be recorded later, from the agent's
 * thread (probes.c): these wrappers tell it when that would break an
 * application's capture, and when a stream it would record on goes. The
 * agent's own calls are not the application's. */

typedef CUresult (*capbegin1_t)(CUstream);
typedef CUresult (*capbegin2_t)(CUstream, int);
typedef CUresult (*capgraph_t)(CUstream, CUgraph, const CUgraphNode *, const void *, size_t, int);
typedef CUresult (*capend_t)(CUstream, CUgraph *);
typedef CUresult (*streamdestroy_t)(CUstream);

static inline void capture_begin(void)
{
	if (!g_agent_thread)
		probe_capture_begin();
}

static inline CUresult capture_begun(CUresult r)
{
	if (r != CUDA_SUCCESS && !g_agent_thread)
		probe_capture_end();
	return r;
}

#define CAPTURE_BEGIN1(NAME)                                                                                   \
	EXPORT CUresult NAME(CUstream s)                                                                        \
	{                                                                                                       \
		capbegin1_t f = REAL(capbegin1_t, NAME);                                                        \
		if (!f)                                                                                         \
			return NOFUNC;                                                                          \
		capture_begin();                                                                                \
		return capture_begun(f(s));                                                                     \
	}
CAPTURE_BEGIN1(cuStreamBeginCapture)
CAPTURE_BEGIN1(cuStreamBeginCapture_ptsz)

#define CAPTURE_BEGIN2(NAME)                                                                                   \
	EXPORT CUresult NAME(CUstream s, int mode)                                                              \
	{                                                                                                       \
		capbegin2_t f = REAL(capbegin2_t, NAME);                                                        \
		if (!f)                                                                                         \
			return NOFUNC;                                                                          \
		capture_begin();                                                                                \
		return capture_begun(f(s, mode));                                                               \
	}
CAPTURE_BEGIN2(cuStreamBeginCapture_v2)
CAPTURE_BEGIN2(cuStreamBeginCapture_v2_ptsz)

/* CUDA 12.3: dependencyData is a const CUgraphEdgeData * */
#define CAPTURE_TO_GRAPH(NAME)                                                                                 \
	EXPORT CUresult NAME(CUstream s, CUgraph g, const CUgraphNode *deps, const void *data, size_t n, int mode) \
	{                                                                                                       \
		capgraph_t f = REAL(capgraph_t, NAME);                                                          \
		if (!f)                                                                                         \
			return NOFUNC;                                                                          \
		capture_begin();                                                                                \
		return capture_begun(f(s, g, deps, data, n, mode));                                             \
	}
CAPTURE_TO_GRAPH(cuStreamBeginCaptureToGraph)
CAPTURE_TO_GRAPH(cuStreamBeginCaptureToGraph_ptsz)

/* A capture counts as ended when its stream was capturing before the call
 * and is not after it: an end that fails (another thread's capture, a
 * stream that was not capturing) ends nothing, and one that reports an
 * invalidated capture ends it. Unsure counts as not ended: deferring with a
 * capture active could break it, recording at once costs only time. */
static CUresult capture_end(int slot, int ptds, CUstream s, CUgraph *g)
{
	capend_t f = (capend_t)real(slot);
	if (!f)
		return NOFUNC;
	if (g_agent_thread)
		return f(s, g);
	drv_init();
	CUstream qs = ev_stream(s, ptds);
	int before = CU_STREAM_CAPTURE_STATUS_NONE, after = CU_STREAM_CAPTURE_STATUS_ACTIVE;
	int known = D.cuStreamIsCapturing && D.cuStreamIsCapturing(qs, &before) == CUDA_SUCCESS;
	CUresult r = f(s, g);
	if (known && before != CU_STREAM_CAPTURE_STATUS_NONE && D.cuStreamIsCapturing(qs, &after) == CUDA_SUCCESS &&
	    after == CU_STREAM_CAPTURE_STATUS_NONE)
		probe_capture_end();
	return r;
}
EXPORT CUresult cuStreamEndCapture(CUstream s, CUgraph *g) { return capture_end(R_cuStreamEndCapture, 0, s, g); }
EXPORT CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph *g)
{
	return capture_end(R_cuStreamEndCapture_ptsz, 1, s, g);
}

static CUresult stream_destroy(int slot, CUstream s)
{
	streamdestroy_t f = (streamdestroy_t)real(slot);
	if (!f)
		return NOFUNC;
	if (!g_agent_thread)
		probe_stream_gone(s);
	return f(s);
}
EXPORT CUresult cuStreamDestroy(CUstream s) { return stream_destroy(R_cuStreamDestroy, s); }

/* A blocking stream (one made without CU_STREAM_NON_BLOCKING) waits for the
 * legacy stream and it for them: from then on the agent records a
 * legacy-stream launch's event at once (probes.c). */
typedef CUresult (*streamcreate_t)(CUstream *, unsigned);
typedef CUresult (*streamcreateprio_t)(CUstream *, unsigned, int);
static inline void stream_create(unsigned flags)
{
	if (!(flags & CU_STREAM_NON_BLOCKING) && !g_agent_thread)
		probe_blocking_stream();
}
EXPORT CUresult cuStreamCreate(CUstream *s, unsigned flags)
{
	streamcreate_t f = REAL(streamcreate_t, cuStreamCreate);
	if (!f)
		return NOFUNC;
	stream_create(flags);
	return f(s, flags);
}
EXPORT CUresult cuStreamCreateWithPriority(CUstream *s, unsigned flags, int prio)
{
	streamcreateprio_t f = REAL(streamcreateprio_t, cuStreamCreateWithPriority);
	if (!f)
		return NOFUNC;
	stream_create(flags);
	return f(s, flags, prio);
}
EXPORT CUresult cuStreamDestroy_v2(CUstream s) { return stream_destroy(R_cuStreamDestroy_v2, s); }

int capture_wrapped(void)
{
	/* loaded late, captures may have begun before, or begin through a
	 * pointer the program keeps where late_scan does not look */
	if (late_mode())
		return 0;
	static const int need[] = {R_cuStreamBeginCapture_v2, R_cuStreamEndCapture, R_cuStreamDestroy_v2};
	for (size_t k = 0; k < sizeof(need) / sizeof(need[0]); k++)
		if (!real(need[k]))
			return 0;
	return 1;
}

/* ---------------- cuGetProcAddress ---------------- */

static int wrapped_index(const char *name)
{
	if (!name || name[0] != 'c' || name[1] != 'u')
		return -1;
	if (strcmp(name, "cuCtxCreate") == 0)
		return R_cuCtxCreate_v2; /* which ABI: told by the pointer (swap_in) */
	for (int i = 0; i < R_COUNT; i++)
		if (strcmp(name, real_names[i]) == 0)
			return i;
	return -1;
}

/* Which exported name a cuGetProcAddress(symbol, version, flags) lookup
 * stands for. */
static int gpa_index(const char *sym, int ver, uint64_t flags)
{
	int i = wrapped_index(sym);
	if (i < 0)
		return -1;
	int ptds = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
	switch (i) {
	case R_cuGetProcAddress:
		return ver >= 12000 ? R_cuGetProcAddress_v2 : R_cuGetProcAddress;
	case R_cuLaunchKernel:
		return ptds ? R_cuLaunchKernel_ptsz : i;
	case R_cuLaunchKernelEx:
		return ptds ? R_cuLaunchKernelEx_ptsz : i;
	case R_cuLaunchCooperativeKernel:
		return ptds ? R_cuLaunchCooperativeKernel_ptsz : i;
	case R_cuGraphAddKernelNode:
		return ver >= 12000 ? R_cuGraphAddKernelNode_v2 : i;
	case R_cuGraphKernelNodeSetParams:
		return ver >= 12000 ? R_cuGraphKernelNodeSetParams_v2 : i;
	case R_cuGraphExecKernelNodeSetParams:
		return ver >= 12000 ? R_cuGraphExecKernelNodeSetParams_v2 : i;
	case R_cuGraphInstantiate:
		/* 12.0 gave the name cuGraphInstantiateWithFlags' ABI; 11.0
		 * introduced _v2 (the same five arguments as the first) */
		return ver >= 12000 ? R_cuGraphInstantiateWithFlags : ver >= 11000 ? R_cuGraphInstantiate_v2 : i;
	case R_cuGraphInstantiateWithParams:
		return ptds ? R_cuGraphInstantiateWithParams_ptsz : i;
	case R_cuGraphExecUpdate:
		return ver >= 12000 ? R_cuGraphExecUpdate_v2 : i;
	case R_cuGraphLaunch:
		return ptds ? R_cuGraphLaunch_ptsz : i;
	case R_cuCtxDestroy:
		return ver >= 4000 ? R_cuCtxDestroy_v2 : i;
	case R_cuDevicePrimaryCtxRelease:
		return ver >= 11000 ? R_cuDevicePrimaryCtxRelease_v2 : i;
	case R_cuDevicePrimaryCtxReset:
		return ver >= 11000 ? R_cuDevicePrimaryCtxReset_v2 : i;
	case R_cuStreamBeginCapture:
		/* 10.1 added the mode argument (_v2) */
		if (ver >= 10010)
			return ptds ? R_cuStreamBeginCapture_v2_ptsz : R_cuStreamBeginCapture_v2;
		return ptds ? R_cuStreamBeginCapture_ptsz : i;
	case R_cuStreamBeginCaptureToGraph:
		return ptds ? R_cuStreamBeginCaptureToGraph_ptsz : i;
	case R_cuStreamEndCapture:
		return ptds ? R_cuStreamEndCapture_ptsz : i;
	case R_cuStreamDestroy:
		return ver >= 4000 ? R_cuStreamDestroy_v2 : i;
	default:
		return i;
	}
}

/* cuCtxCreate's ABIs differ by version: the slot is the variant whose
 * export the driver's pointer is, never a guess (a wrong one would pass the
 * application's arguments wrongly). Unknown pointers are left unwrapped. */
static int ctx_create_index(void *realp)
{
	static const int slots[] = {R_cuCtxCreate_v2, R_cuCtxCreate_v3, R_cuCtxCreate_v4};
	for (size_t k = 0; k < sizeof(slots) / sizeof(slots[0]); k++) {
		void *p = cuda_sym(real_names[slots[k]]);
		if (p && p == realp)
			return slots[k];
	}
	return -1;
}

/* Records the real pointer for slot i and returns our wrapper instead. */
static void *swap_in(int i, void *realp)
{
	if (!realp || i < 0)
		return realp;
	if (i == R_cuCtxCreate_v2 || i == R_cuCtxCreate_v3 || i == R_cuCtxCreate_v4) {
		for (int j = R_cuCtxCreate_v2; j <= R_cuCtxCreate_v4; j++)
			if (realp == wrappers[j])
				return realp;
		if ((i = ctx_create_index(realp)) < 0)
			return realp;
	}
	for (int j = 0; j < R_COUNT; j++)
		if (realp == wrappers[j])
			return realp; /* already ours */
	void *old = NULL;
	__atomic_compare_exchange_n(&reals[i], &old, realp, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
	gpa2_t none2 = NULL;
	gpa1_t none1 = NULL;
	if (i == R_cuGetProcAddress_v2)
		__atomic_compare_exchange_n(&real_gpa2, &none2, (gpa2_t)realp, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
	if (i == R_cuGetProcAddress)
		__atomic_compare_exchange_n(&real_gpa1, &none1, (gpa1_t)realp, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
	/* The driver may hand out another pointer for a name already seen
	 * (e.g. its internal cuGetProcAddress): the same entry point, so the
	 * first one stays the one we forward to. Versioned ABIs (graph node
	 * params, cuGetProcAddress) have their own slots (gpa_index). */
	return wrappers[i];
}

EXPORT CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, uint64_t flags, int *status)
{
	server_ensure();
	gpa2_t g = REAL(gpa2_t, cuGetProcAddress_v2);
	if (!g)
		return NOFUNC;
	CUresult r = g(sym, pfn, ver, flags, status);
	if (r == CUDA_SUCCESS && pfn && *pfn) {
		int i = gpa_index(sym, ver, flags);
		if (i >= 0)
			*pfn = swap_in(i, *pfn);
	}
	return r;
}

EXPORT CUresult cuGetProcAddress(const char *sym, void **pfn, int ver, uint64_t flags)
{
	server_ensure();
	gpa1_t g = REAL(gpa1_t, cuGetProcAddress);
	if (!g)
		return NOFUNC;
	CUresult r = g(sym, pfn, ver, flags);
	if (r == CUDA_SUCCESS && pfn && *pfn) {
		int i = gpa_index(sym, ver, flags);
		if (i >= 0)
			*pfn = swap_in(i, *pfn);
	}
	return r;
}

/* ---------------- late interposition (late.c) ---------------- */

static void add_target(struct late_target *t, size_t *n, size_t cap, int i, void *realp)
{
	if (!realp || i < 0 || *n == cap)
		return;
	void *w = swap_in(i, realp);
	if (w == realp)
		return; /* ours already, or an ABI we do not wrap */
	for (size_t k = 0; k < *n; k++)
		if (t[k].real == (uintptr_t)realp)
			return;
	t[(*n)++] = (struct late_target){(uintptr_t)realp, (uintptr_t)w};
}

/* Every libcuda address a program may hold for an entry point the agent
 * wraps: its exports, and what cuGetProcAddress hands out for each name at
 * the versions and flags cudart asks with (the driver may give internal
 * addresses there). */
size_t late_targets(struct late_target **out)
{
	drv_init();
	/* what cudart 11.3-13.x asks with, and the driver's own version */
	int vers[] = {11030, 12000, 12080, 12090, 13000, 13010, D.version ? D.version : 13000};
	static const uint64_t flags[] = {0, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM};
	size_t cap = R_COUNT * 16, n = 0;
	struct late_target *t = calloc(cap, sizeof(*t));
	*out = t;
	if (!t || !cuda_loaded())
		return 0;
	gpa2_t g = LOADP(real_gpa2);
	if (!g)
		g = (gpa2_t)cuda_sym("cuGetProcAddress_v2");
	for (int i = 0; i < R_COUNT; i++) {
		add_target(t, &n, cap, i, cuda_sym(real_names[i]));
		if (!g)
			continue;
		/* the name cudart asks for: without the ABI suffix */
		char base[64];
		snprintf(base, sizeof(base), "%s", real_names[i]);
		for (const char *suf = NULL; (suf = strrchr(base, '_')) != NULL;) {
			if (strcmp(suf, "_ptsz") && strcmp(suf, "_v2") && strcmp(suf, "_v3") && strcmp(suf, "_v4"))
				break;
			base[suf - base] = 0;
		}
		for (size_t v = 0; v < sizeof(vers) / sizeof(vers[0]); v++)
			for (size_t f = 0; f < sizeof(flags) / sizeof(flags[0]); f++) {
				void *p = NULL;
				int st = 0;
				if (g(base, &p, vers[v], flags[f], &st) == CUDA_SUCCESS && p)
					add_target(t, &n, cap, gpa_index(base, vers[v], flags[f]), p);
			}
	}
	return n;
}

/* ---------------- dlsym ---------------- */

EXPORT void *dlsym(void *handle, const char *name)
{
	resolve_real_dlsym();
	if (!real_dlsym)
		return NULL;
	void *p = real_dlsym(handle, name);
	const char *volatile nm = name; /* callers do pass NULL sometimes */
	if (p && nm && nm[0] == 'c' && nm[1] == 'u') {
		int i = wrapped_index(name);
		if (i >= 0) {
			server_ensure();
			p = swap_in(i, p);
		}
	}
	return p;
}

/* ---------------- setup ---------------- */

static void fill_wrappers(void)
{
#define W(x) wrappers[R_##x] = (void *)&x
	W(cuGetProcAddress);
	W(cuGetProcAddress_v2);
	W(cuLibraryLoadData);
	W(cuLibraryLoadFromFile);
	W(cuLibraryUnload);
	W(cuModuleLoadData);
	W(cuModuleLoadDataEx);
	W(cuModuleLoadFatBinary);
	W(cuModuleLoad);
	W(cuModuleUnload);
	W(cuLibraryGetKernel);
	W(cuKernelGetFunction);
	W(cuModuleGetFunction);
	W(cuLaunchKernel);
	W(cuLaunchKernel_ptsz);
	W(cuLaunchKernelEx);
	W(cuLaunchKernelEx_ptsz);
	W(cuLaunchCooperativeKernel);
	W(cuLaunchCooperativeKernel_ptsz);
	W(cuGraphAddKernelNode);
	W(cuGraphAddKernelNode_v2);
	W(cuGraphKernelNodeSetParams);
	W(cuGraphKernelNodeSetParams_v2);
	W(cuGraphExecKernelNodeSetParams);
	W(cuGraphExecKernelNodeSetParams_v2);
	W(cuGraphInstantiate);
	W(cuGraphInstantiate_v2);
	W(cuGraphInstantiateWithFlags);
	W(cuGraphInstantiateWithParams);
	W(cuGraphInstantiateWithParams_ptsz);
	W(cuGraphExecUpdate);
	W(cuGraphExecUpdate_v2);
	W(cuGraphLaunch);
	W(cuGraphLaunch_ptsz);
	W(cuGraphExecDestroy);
	W(cuGraphExecNodeSetParams);
	W(cuGraphNodeSetEnabled);
	W(cuGraphExecMemcpyNodeSetParams);
	W(cuGraphExecMemsetNodeSetParams);
	W(cuGraphExecHostNodeSetParams);
	W(cuGraphExecChildGraphNodeSetParams);
	W(cuGraphExecEventRecordNodeSetEvent);
	W(cuGraphExecEventWaitNodeSetEvent);
	W(cuGraphExecExternalSemaphoresSignalNodeSetParams);
	W(cuGraphExecExternalSemaphoresWaitNodeSetParams);
	W(cuGraphExecBatchMemOpNodeSetParams);
	W(cuDevicePrimaryCtxRetain);
	W(cuCtxCreate_v2);
	W(cuCtxCreate_v3);
	W(cuCtxCreate_v4);
	W(cuCtxDestroy);
	W(cuCtxDestroy_v2);
	W(cuDevicePrimaryCtxRelease);
	W(cuDevicePrimaryCtxRelease_v2);
	W(cuDevicePrimaryCtxReset);
	W(cuDevicePrimaryCtxReset_v2);
	W(cuStreamBeginCapture);
	W(cuStreamBeginCapture_ptsz);
	W(cuStreamBeginCapture_v2);
	W(cuStreamBeginCapture_v2_ptsz);
	W(cuStreamBeginCaptureToGraph);
	W(cuStreamBeginCaptureToGraph_ptsz);
	W(cuStreamEndCapture);
	W(cuStreamEndCapture_ptsz);
	W(cuStreamDestroy);
	W(cuStreamDestroy_v2);
	W(cuStreamCreate);
	W(cuStreamCreateWithPriority);
#undef W
}

static void atfork_prepare(void)
{
	pthread_mutex_lock(&g_mu);
}
static void atfork_parent(void)
{
	pthread_mutex_unlock(&g_mu);
}
static void atfork_child(void)
{
	pthread_mutex_init(&g_mu, NULL);
	pthread_cond_init(&g_cond, NULL);
	pthread_rwlock_init(&g_rw, NULL);
	/* The child cannot use its parent's CUDA contexts: drop everything
	 * inherited and serve its own socket once it touches the driver. */
	probes_reset();
	lev_atfork_child();
	kt_atfork_child();
	probe_tid_reset();
	gw_reset();
	gx_reset();
	inv_reset();
	san_atfork_child();
	server_atfork_child();
}

void agent_setup(void)
{
	static int done;
	if (__atomic_exchange_n(&done, 1, __ATOMIC_ACQ_REL))
		return;
	const char *d = getenv("GPUBPF_AGENT_DEBUG");
	g_debug = d && d[0] == '1';
	fill_wrappers();
	resolve_real_dlsym();
	if (!real_dlsym) {
		DBG("cannot find the real dlsym; CUDA calls made through dlsym are not traced");
	}
	pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
	san_setup();
	server_start();
}

/* Run as a program (direct mode), the library is the main executable,
 * whose constructors the dynamic loader leaves to a libc start-up code it
 * does not have: its entry point calls agent_setup itself. */
__attribute__((constructor)) static void agent_init(void) { agent_setup(); }
