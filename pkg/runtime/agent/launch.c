/* launch (op 24, direct mode only). */
#define _GNU_SOURCE
#include "server.h"

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
		int kx = kt_agent_launch_begin();
		cr = D.cuLaunchKernel(f, g[0], g[1], g[2], b[0], b[1], b[2], shmem, st, NULL, plen ? extra : NULL);
		kt_launch_end(kx);
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

int op_launch(struct session *s, uint32_t req, struct rbuf *r, struct wbuf *w)
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
