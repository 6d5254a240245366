/* ring-drain (op 22). */
#define _GNU_SOURCE
#include "server.h"

/* ring-drain (op 22): one round trip per drain of a GPU event ring in device
 * memory. The ring at RING is N shards: [N 256-byte control blocks][shard 0:
 * S data, T tail]...[shard N-1: S data, T tail]; the tool's mirror, region
 * G, has the same layout. In stream order: publish each shard's new
 * released position at its control block + 128 (from the mirror's copy of
 * that block, so the async copy reads pinned memory), copy the control
 * blocks to the mirror, then each shard's data of positions [from, R): from
 * (protocol 11) is where the tool's copy must begin, at or after release:
 * the records between were handed to the tool, which still reads them in
 * the mirror.
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

int ring_drain(struct session *s, uint32_t req, int dev, CUstream st, struct rbuf *r, struct wbuf *w)
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
	/* the releases and copy starts, and room for 2n copies (a shard's
	 * data may wrap) */
	uint64_t *rel = malloc((size_t)n * 2 * sizeof *rel), *from = rel + n;
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
	/* Check every release and copy start before queueing anything: a
	 * released position only moves forward, and never past what the last
	 * drain saw reserved; a copy starts between the two. */
	char why[200] = "";
	for (uint32_t i = 0; i < n && !why[0]; i++) {
		uint8_t *c = mirror + (uint64_t)i * RING_CTRL;
		uint64_t old = ld64(c + RING_OFF_RELEASED), seen = ld64(c + RING_OFF_RESERVED);
		rel[i] = rb_u64(r);
		if (!r->err && (rel[i] < old || rel[i] > seen))
			snprintf(why, sizeof why, "ring-drain: shard %u: release %llu must be in [released %llu, reserved %llu]",
				 i, (unsigned long long)rel[i], (unsigned long long)old, (unsigned long long)seen);
	}
	uint32_t nf = why[0] ? 0 : rb_u32(r);
	if (!r->err && nf != 0 && nf != n)
		snprintf(why, sizeof why, "ring-drain: %u copy starts for %u shards (want one per shard, or none)", nf, n);
	for (uint32_t i = 0; i < n && !r->err && !why[0]; i++) {
		from[i] = nf ? rb_u64(r) : rel[i];
		uint64_t seen = ld64(mirror + (uint64_t)i * RING_CTRL + RING_OFF_RESERVED);
		if (!r->err && (from[i] < rel[i] || from[i] > seen))
			snprintf(why, sizeof why, "ring-drain: shard %u: copy start %llu must be in [release %llu, reserved %llu]",
				 i, (unsigned long long)from[i], (unsigned long long)rel[i], (unsigned long long)seen);
	}
	if (why[0] || r->err) {
		free(rel);
		free(ptrs);
		free(lens);
		return send_error(s, OP_RING_DRAIN, req, ST_BAD_REQUEST, 0, "%s",
				  why[0] ? why : "malformed ring-drain request (releases)");
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
		if (R <= from[i])
			continue;
		uint64_t off = (uint64_t)n * RING_CTRL + (uint64_t)i * (S + T);
		CUdeviceptr data = ring + off;
		CUdeviceptr md = (CUdeviceptr)(uintptr_t)(mirror + off);
		uint64_t len = R - from[i] < S ? R - from[i] : S;
		uint64_t a = from[i] & (S - 1);
		if (a + len <= S) {
			copies_add(&cp, md + a, data + a, len);
			copied += len;
		} else {
			/* through the end of the tail (records that ran on into it),
			 * then the wrapped part from the start */
			uint64_t b = (from[i] + len) & (S - 1);
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

