/* The operations of docs/agent-protocol.md and their dispatch. */
#define _GNU_SOURCE
#include "server.h"

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
	if (!s->hello)
		gx_session(s, 1); /* graph launches are counted from now on */
	pthread_mutex_lock(&g_mu);
	rescan_start();
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

void put_module(struct wbuf *w, const struct module *m)
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
	san_own_module(mod, 1);
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

int op_dispatch(struct session *s, uint16_t type, uint32_t req, uint8_t *body, uint32_t len)
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
	if (type != OP_HELLO && type != OP_LIST && type != OP_FETCH && type != OP_STATS && type != OP_GRAPHS && type != OP_GRAPH_STAMPS && type != OP_SANITIZE && type != OP_CONTINUE && type != OP_DEVICE_READY &&
	    type != OP_RELEASE_UNLOAD &&
	    type != OP_DEACTIVATE && type != OP_DETACH && type != OP_LAUNCH_EVENTS && type != OP_KERNEL_TIMES &&
	    drv_init() != 0) {
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
	case OP_KERNEL_TIMES:
		ret = op_kernel_times(s, req, &r, &w);
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
	case OP_GRAPHS:
		ret = op_graphs(s, &w);
		break;
	case OP_GRAPH_STAMPS:
		ret = op_graph_stamps(s, &w);
		break;
	case OP_SANITIZE:
		ret = op_sanitize(s, req, &r, &w);
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

