/* Encoding and decoding of the fields of the agent protocol's frames. */
#define _GNU_SOURCE
#include "server.h"

void wb_need(struct wbuf *w, size_t k)
{
	if (w->oom)
		return;
	if (w->n + k <= w->cap)
		return;
	size_t nc = w->cap ? w->cap : 256;
	while (nc < w->n + k)
		nc *= 2;
	if (nc > PROTO_MAX_FRAME + 16) {
		w->oom = 1;
		return;
	}
	uint8_t *q = realloc(w->p, nc);
	if (!q) {
		w->oom = 1;
		return;
	}
	w->p = q;
	w->cap = nc;
}
void wb_raw(struct wbuf *w, const void *d, size_t k)
{
	wb_need(w, k);
	if (w->oom)
		return;
	if (k)
		memcpy(w->p + w->n, d, k);
	w->n += k;
}
void wb_u32(struct wbuf *w, uint32_t v) { wb_raw(w, &v, 4); } /* little endian hosts only */
void wb_u64(struct wbuf *w, uint64_t v) { wb_raw(w, &v, 8); }
void wb_i32(struct wbuf *w, int32_t v) { wb_raw(w, &v, 4); }
static void wb_bytes(struct wbuf *w, const void *d, size_t k)
{
	wb_u32(w, (uint32_t)k);
	wb_raw(w, d, k);
}
void wb_str(struct wbuf *w, const char *s) { wb_bytes(w, s ? s : "", s ? strlen(s) : 0); }

static int rb_raw(struct rbuf *r, void *d, size_t k)
{
	if (r->err || r->n - r->off < k) {
		r->err = 1;
		memset(d, 0, k);
		return -1;
	}
	memcpy(d, r->p + r->off, k);
	r->off += k;
	return 0;
}
uint32_t rb_u32(struct rbuf *r)
{
	uint32_t v;
	rb_raw(r, &v, 4);
	return v;
}
uint64_t rb_u64(struct rbuf *r)
{
	uint64_t v;
	rb_raw(r, &v, 8);
	return v;
}
int32_t rb_i32(struct rbuf *r) { return (int32_t)rb_u32(r); }
const uint8_t *rb_bytes(struct rbuf *r, size_t *len)
{
	uint32_t k = rb_u32(r);
	if (r->err || r->n - r->off < k) {
		r->err = 1;
		*len = 0;
		return NULL;
	}
	const uint8_t *p = r->p + r->off;
	r->off += k;
	*len = k;
	return p;
}
char *rb_str(struct rbuf *r)
{
	size_t k;
	const uint8_t *p = rb_bytes(r, &k);
	if (!p)
		return NULL;
	if (memchr(p, 0, k)) {
		r->err = 1;
		return NULL;
	}
	char *s = malloc(k + 1);
	if (!s) {
		r->err = 1;
		return NULL;
	}
	memcpy(s, p, k);
	s[k] = 0;
	return s;
}

