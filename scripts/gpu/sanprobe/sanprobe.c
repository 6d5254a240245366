/*
 * sanprobe: a throwaway measurement library for issue 58, not part of the
 * product. It answers, on the GPU machine, what the Compute Sanitizer API lets
 * an in-process agent do: subscribe at start or late (as -p would), patch
 * SASS-only modules at block entry/exit or global accesses with callbacks from
 * a patch module that comes as a tools-patch fatbin, plain PTX, a cubin the
 * driver's JIT made, or a cubin nvJitLink made, and what each costs.
 *
 * Environment:
 *   SP_LATE=1          do not subscribe in the constructor; sanprobe_attach() does
 *   SP_IDLE=1          subscribe in the constructor with no domain on; attach turns them on
 *   SP_PATCH=FILE      patch module (.fatbin/.cubin loaded from the file, .ptx see SP_JIT)
 *   SP_JIT=text|drv|nvjitlink   how a .ptx patch module is loaded
 *   SP_WHERE=enter,exit,mem     instruction classes to patch (none: subscribe only)
 *   SP_CB=empty|count  callback flavour
 *   SP_SELECT=0        patched, but every launch gets NULL userdata (callbacks return at once)
 *   SP_LAUNCHCB=0      do not use the launch callback; patch at module load (start mode only)
 *   SP_UNPATCH=1       at report, time unpatch + repatch of every patched module
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <sanitizer.h>
#include <nvJitLink.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct sp_counts {
	unsigned long long enters, exits, mem;
};

static Sanitizer_SubscriberHandle sub;
static int subscribed, attached;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int w_enter, w_exit, w_mem, cb_count, select_all = 1, use_launchcb = 1;
static const char *patch_path, *jit = "text";

#define MAXMOD 4096
static struct mod {
	CUcontext ctx;
	CUmodule m;
	int state; /* 0 unseen, 1 patched, -1 failed */
	double ms;
} mods[MAXMOD];
static int nmods, npatched, nfailed;
static double patch_ms_total, patch_ms_max, load_ms;
static struct ctxs {
	CUcontext c;
	struct sp_counts *dev;
	int loaded;
} ctxs[16];
static int nctx;
static unsigned long long launches_seen, launches_patched, expect_threads;
static int first_err;

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static const char *serr(SanitizerResult r)
{
	const char *s = "?";
	sanitizerGetResultString(r, &s);
	return s;
}

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *b = malloc(n + 1);
	if (fread(b, 1, n, f) != (size_t)n) {
		fclose(f);
		free(b);
		return NULL;
	}
	b[n] = 0;
	fclose(f);
	*len = n;
	return b;
}

/* load_patches puts the patch module into ctx, the way SP_JIT says. */
static int load_patches(CUcontext ctx)
{
	double t0 = now_ms();
	SanitizerResult r;
	size_t len = 0;
	if (!strstr(patch_path, ".ptx")) {
		r = sanitizerAddPatchesFromFile(patch_path, ctx);
	} else {
		char *ptx = slurp(patch_path, &len);
		if (!ptx) {
			fprintf(stderr, "SANPROBE cannot read %s\n", patch_path);
			return -1;
		}
		if (!strcmp(jit, "text")) {
			r = sanitizerAddPatches(ptx, ctx);
		} else if (!strcmp(jit, "drv")) {
			CUlinkState ls;
			void *cubin;
			size_t cubin_len;
			CUresult cr = cuLinkCreate(0, NULL, NULL, &ls);
			if (cr == CUDA_SUCCESS)
				cr = cuLinkAddData(ls, CU_JIT_INPUT_PTX, ptx, len + 1, "patches", 0, NULL, NULL);
			if (cr == CUDA_SUCCESS)
				cr = cuLinkComplete(ls, &cubin, &cubin_len);
			if (cr != CUDA_SUCCESS) {
				fprintf(stderr, "SANPROBE driver link: CUresult %d\n", cr);
				return -1;
			}
			r = sanitizerAddPatches(cubin, ctx);
			cuLinkDestroy(ls);
		} else {
			nvJitLinkHandle h;
			int major = 0, minor = 0;
			CUdevice dev;
			cuCtxGetDevice(&dev);
			cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
			cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
			char arch[32];
			snprintf(arch, sizeof arch, "-arch=sm_%d%d", major, minor);
			const char *opts[] = {arch, "-Xptxas=--compile-as-tools-patch"};
			nvJitLinkResult jr = nvJitLinkCreate(&h, 2, opts);
			if (jr == NVJITLINK_SUCCESS)
				jr = nvJitLinkAddData(h, NVJITLINK_INPUT_PTX, ptx, len, "patches");
			if (jr == NVJITLINK_SUCCESS)
				jr = nvJitLinkComplete(h);
			if (jr != NVJITLINK_SUCCESS) {
				size_t n = 0;
				nvJitLinkGetErrorLogSize(h, &n);
				char *log = calloc(1, n + 1);
				nvJitLinkGetErrorLog(h, log);
				fprintf(stderr, "SANPROBE nvJitLink: %d: %s\n", jr, log);
				return -1;
			}
			size_t n = 0;
			nvJitLinkGetLinkedCubinSize(h, &n);
			char *cubin = malloc(n);
			nvJitLinkGetLinkedCubin(h, cubin);
			r = sanitizerAddPatches(cubin, ctx);
			nvJitLinkDestroy(&h);
		}
	}
	load_ms += now_ms() - t0;
	if (r != SANITIZER_SUCCESS) {
		fprintf(stderr, "SANPROBE add patches (%s, jit %s): %s (%d)\n", patch_path, jit, serr(r), r);
		return -1;
	}
	return 0;
}

static struct ctxs *ctx_of(CUcontext c)
{
	for (int i = 0; i < nctx; i++)
		if (ctxs[i].c == c)
			return &ctxs[i];
	if (nctx == 16)
		return NULL;
	struct ctxs *x = &ctxs[nctx++];
	x->c = c;
	return x;
}

static struct mod *mod_of(CUcontext c, CUmodule m)
{
	for (int i = 0; i < nmods; i++)
		if (mods[i].m == m && mods[i].ctx == c)
			return &mods[i];
	if (nmods == MAXMOD)
		return NULL;
	struct mod *x = &mods[nmods++];
	x->ctx = c;
	x->m = m;
	return x;
}

static int patch_one(struct mod *md)
{
	struct ctxs *cx = ctx_of(md->ctx);
	if (!cx)
		return -1;
	if (!cx->loaded) {
		cx->loaded = load_patches(md->ctx) == 0 ? 1 : -1;
		if (cx->loaded > 0) {
			SanitizerResult r = sanitizerAlloc(md->ctx, (void **)&cx->dev, sizeof(struct sp_counts));
			if (r != SANITIZER_SUCCESS) {
				fprintf(stderr, "SANPROBE sanitizerAlloc: %s\n", serr(r));
				cx->loaded = -1;
			} else if ((r = sanitizerMemset(cx->dev, 0, sizeof(struct sp_counts), NULL)) != SANITIZER_SUCCESS) {
				fprintf(stderr, "SANPROBE sanitizerMemset: %s\n", serr(r));
				cx->loaded = -1;
			}
		}
	}
	if (cx->loaded < 0)
		return -1;
	const char *sfx = cb_count ? "count" : "empty";
	char name[64];
	SanitizerResult r = SANITIZER_SUCCESS;
	double t0 = now_ms();
	if (w_enter && r == SANITIZER_SUCCESS) {
		snprintf(name, sizeof name, "sp_enter_%s", sfx);
		r = sanitizerPatchInstructions(SANITIZER_INSTRUCTION_BLOCK_ENTER, md->m, name);
	}
	if (w_exit && r == SANITIZER_SUCCESS) {
		snprintf(name, sizeof name, "sp_exit_%s", sfx);
		r = sanitizerPatchInstructions(SANITIZER_INSTRUCTION_BLOCK_EXIT, md->m, name);
	}
	if (w_mem && r == SANITIZER_SUCCESS)
		r = sanitizerPatchInstructions(SANITIZER_INSTRUCTION_GLOBAL_MEMORY_ACCESS, md->m, "sp_mem_count");
	if (r == SANITIZER_SUCCESS)
		r = sanitizerPatchModule(md->m);
	double ms = now_ms() - t0;
	if (r != SANITIZER_SUCCESS) {
		if (!first_err++)
			fprintf(stderr, "SANPROBE patch module %p: %s (%d)\n", (void *)md->m, serr(r), r);
		nfailed++;
		return -1;
	}
	md->ms = ms;
	patch_ms_total += ms;
	if (ms > patch_ms_max)
		patch_ms_max = ms;
	npatched++;
	return 0;
}

static void SANITIZERAPI callback(void *ud, Sanitizer_CallbackDomain dom, Sanitizer_CallbackId id, const void *data)
{
	if (!(w_enter || w_exit || w_mem))
		return;
	pthread_mutex_lock(&mu);
	if (dom == SANITIZER_CB_DOMAIN_RESOURCE && id == SANITIZER_CBID_RESOURCE_MODULE_LOADED) {
		const Sanitizer_ResourceModuleData *m = data;
		struct mod *md = mod_of(m->context, m->module);
		if (md && !use_launchcb && md->state == 0)
			md->state = patch_one(md) == 0 ? 1 : -1;
	} else if (dom == SANITIZER_CB_DOMAIN_LAUNCH && id == SANITIZER_CBID_LAUNCH_BEGIN) {
		const Sanitizer_LaunchData *l = data;
		launches_seen++;
		struct mod *md = mod_of(l->context, l->module);
		if (md && md->state == 0)
			md->state = patch_one(md) == 0 ? 1 : -1;
		if (md && md->state == 1) {
			struct ctxs *cx = ctx_of(l->context);
			launches_patched++;
			expect_threads += (unsigned long long)l->gridDim_x * l->gridDim_y * l->gridDim_z * l->blockDim_x *
					  l->blockDim_y * l->blockDim_z;
			sanitizerSetCallbackData(l->function, select_all ? cx->dev : NULL);
		}
	}
	pthread_mutex_unlock(&mu);
}

static void config(void)
{
	const char *w = getenv("SP_WHERE");
	if (!w)
		w = "exit";
	w_enter = strstr(w, "enter") != NULL;
	w_exit = strstr(w, "exit") != NULL;
	w_mem = strstr(w, "mem") != NULL;
	cb_count = getenv("SP_CB") && !strcmp(getenv("SP_CB"), "count");
	select_all = !(getenv("SP_SELECT") && !strcmp(getenv("SP_SELECT"), "0"));
	use_launchcb = !(getenv("SP_LAUNCHCB") && !strcmp(getenv("SP_LAUNCHCB"), "0"));
	patch_path = getenv("SP_PATCH");
	if (getenv("SP_JIT"))
		jit = getenv("SP_JIT");
	if (!patch_path)
		w_enter = w_exit = w_mem = 0;
}

static int enable(void)
{
	SanitizerResult r = sanitizerEnableDomain(1, sub, SANITIZER_CB_DOMAIN_RESOURCE);
	if (r == SANITIZER_SUCCESS)
		r = sanitizerEnableDomain(1, sub, SANITIZER_CB_DOMAIN_LAUNCH);
	if (r != SANITIZER_SUCCESS) {
		fprintf(stderr, "SANPROBE enable domains: %s (%d)\n", serr(r), r);
		return -1;
	}
	return 0;
}

static int do_subscribe(void)
{
	SanitizerResult r = sanitizerSubscribe(&sub, callback, NULL);
	if (r != SANITIZER_SUCCESS) {
		fprintf(stderr, "SANPROBE subscribe: %s (%d)\n", serr(r), r);
		return -1;
	}
	subscribed = 1;
	return 0;
}

/* sanprobe_attach: what a tool attaching with -p would make the agent do. */
int sanprobe_attach(void)
{
	double t0 = now_ms();
	int rc = 0;
	if (!subscribed)
		rc = do_subscribe();
	if (rc == 0 && !attached)
		rc = enable();
	attached = rc == 0;
	fprintf(stderr, "SANPROBE attach: pid %d: %s in %.1f ms (subscribed %s)\n", (int)getpid(), rc ? "FAILED" : "ok", now_ms() - t0,
		getenv("SP_IDLE") ? "at start, idle" : (getenv("SP_LATE") ? "now" : "at start"));
	return rc;
}

void sanprobe_report(void)
{
	struct sp_counts tot = {0}, c;
	cuCtxSynchronize();
	for (int i = 0; i < nctx; i++) {
		if (ctxs[i].loaded <= 0)
			continue;
		CUcontext old;
		cuCtxGetCurrent(&old);
		cuCtxSetCurrent(ctxs[i].c);
		SanitizerResult r = sanitizerMemcpyDeviceToHost(&c, ctxs[i].dev, sizeof c, NULL);
		if (r != SANITIZER_SUCCESS)
			fprintf(stderr, "SANPROBE read counters: %s\n", serr(r));
		else {
			tot.enters += c.enters;
			tot.exits += c.exits;
			tot.mem += c.mem;
		}
		cuCtxSetCurrent(old);
	}
	printf("SANPROBE enters=%llu exits=%llu mem=%llu expect_threads=%llu launches_seen=%llu launches_patched=%llu "
	       "modules=%d patched=%d failed=%d patch_ms_total=%.1f patch_ms_max=%.2f load_ms=%.1f\n",
	       tot.enters, tot.exits, tot.mem, expect_threads, launches_seen, launches_patched, nmods, npatched,
	       nfailed, patch_ms_total, patch_ms_max, load_ms);
	if (getenv("SP_UNPATCH")) {
		double un = 0, re = 0, unmax = 0;
		int n = 0;
		for (int i = 0; i < nmods; i++) {
			if (mods[i].state != 1)
				continue;
			double t0 = now_ms();
			SanitizerResult r = sanitizerUnpatchModule(mods[i].m);
			double t1 = now_ms();
			if (r != SANITIZER_SUCCESS) {
				fprintf(stderr, "SANPROBE unpatch: %s\n", serr(r));
				continue;
			}
			if (t1 - t0 > unmax)
				unmax = t1 - t0;
			un += t1 - t0;
			r = sanitizerPatchModule(mods[i].m);
			re += now_ms() - t1;
			n++;
		}
		printf("SANPROBE unpatch modules=%d unpatch_ms_total=%.2f unpatch_ms_max=%.2f repatch_ms_total=%.2f\n", n,
		       un, unmax, re);
	}
	fflush(stdout);
}

__attribute__((constructor)) static void sanprobe_init(void)
{
	config();
	if (getenv("SP_LATE"))
		return;
	if (do_subscribe() == 0 && !getenv("SP_IDLE"))
		sanprobe_attach();
}
