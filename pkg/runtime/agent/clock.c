/* clock (op 23): the GPU's globaltimer against the CPU's clock. */
#define _GNU_SOURCE
#include "server.h"

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
void clk_release(struct clk *k)
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
		int kx = kt_agent_launch_begin();
		cr = D.cuLaunchKernel(k->fn, 1, 1, 1, 1, 1, 1, 0, k->st, args, NULL);
		kt_launch_end(kx);
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

int op_clock(struct session *s, uint32_t req, struct rbuf *r, struct wbuf *w)
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

