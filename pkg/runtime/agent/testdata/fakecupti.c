/* A stand-in for libcupti: the calls the agent's kernel times use
 * (cupti.c), for its CPU tests. The stand-in driver (fakecuda.c) reports
 * each kernel launch here (fakecupti_launch), as the real driver reports to
 * CUPTI: the subscriber's callback at the call's entry and exit, and, with
 * kernel records on, a CUpti_ActivityKernel10-shaped record that the next
 * flush hands over in a buffer the client gave; with external correlation
 * records on and an id pushed on the launching thread, the record tying
 * the launch's correlation id to it (before the kernel's, as CUPTI writes
 * it at the call); with driver API records on (kind 4) and the launch's
 * entry point enabled (cuptiActivityEnableDriverApi), the call's record,
 * its start on the timestamp callback's clock.
 *   FAKECUPTI_BUSY=1   another subscriber holds CUPTI (subscribe fails, 39)
 *   FAKECUPTI_NOEXT=1  external correlation records refused (enable fails)
 *   FAKECUPTI_NOAPI=1  per-call driver API records refused
 *   FAKECUPTI_CORR_LATE=1  correlation and API records held back one flush
 *   FAKECUPTI_NOCORR=1 correlation and API records enabled but never written
 *   FAKECUPTI_LOG=F    appends "subscribe", "enable", "finalize"... to F
 * Build: gcc -shared -fPIC -o libfakecupti.so fakecupti.c */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REC 216 /* sizeof(CUpti_ActivityKernel10), CUDA 13.0 */
#define XREC 24 /* sizeof(CUpti_ActivityExternalCorrelation) */
#define AREC 40 /* sizeof(CUpti_ActivityAPI) */

typedef void (*cb_fn)(void *, int, uint32_t, const void *);
typedef struct {
	int site;
	const char *functionName;
	const void *functionParams;
	void *functionReturnValue;
	const char *symbolName;
	void *context;
	uint32_t contextUid;
	uint64_t *correlationData;
	uint32_t correlationId;
} cb_data;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int subscribed, records_on, corr_on, api_kind_on;
static uint8_t api_on[2048];
static cb_fn callback;
static void *userdata;
static uint8_t driver_on[1024];
static void (*req)(uint8_t **, size_t *, size_t *);
static void (*done)(void *, uint32_t, uint8_t *, size_t, size_t);
static uint64_t (*clock_fn)(void);
static uint8_t *pending, *late; /* records, back to back; late: correlations held back */
static size_t npending, nlate;  /* bytes */
static __thread uint64_t xstack[8];
static __thread int nx;
static uint32_t corr;
static int64_t grid;

static void note(const char *what)
{
	const char *p = getenv("FAKECUPTI_LOG");
	FILE *f = p ? fopen(p, "a") : NULL;
	if (f) {
		fprintf(f, "%s\n", what);
		fclose(f);
	}
}

int cuptiGetResultString(int r, const char **s)
{
	*s = r == 39 ? "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED" : r ? "CUPTI_ERROR" : "CUPTI_SUCCESS";
	return 0;
}
int cuptiGetVersion(uint32_t *v)
{
	*v = 130001;
	return 0;
}
int cuptiSubscribe(void **h, cb_fn f, void *ud)
{
	const char *busy = getenv("FAKECUPTI_BUSY");
	if ((busy && *busy == '1') || subscribed)
		return 39;
	subscribed = 1;
	callback = f;
	userdata = ud;
	*h = &subscribed;
	note("subscribe");
	return 0;
}
int cuptiUnsubscribe(void *h)
{
	subscribed = 0;
	memset(driver_on, 0, sizeof(driver_on));
	note("unsubscribe");
	return 0;
}
int cuptiEnableCallback(uint32_t on, void *h, int domain, uint32_t cbid)
{
	if (domain == 1 && cbid < sizeof(driver_on))
		driver_on[cbid] = (uint8_t)on;
	return 0;
}
int cuptiActivityEnable(int kind)
{
	if (kind == 10) {
		records_on = 1;
		note("enable");
	}
	if (kind == 4) {
		api_kind_on = 1;
		memset(api_on, 1, sizeof(api_on)); /* every call, until told */
		note("enable driver");
	}
	if (kind == 39) {
		const char *no = getenv("FAKECUPTI_NOEXT");
		if (no && *no == '1')
			return 1;
		corr_on = 1;
		note("enable correlation");
	}
	return 0;
}
int cuptiActivityDisable(int kind)
{
	if (kind == 10) {
		records_on = 0;
		note("disable");
	}
	if (kind == 39 && corr_on) {
		corr_on = 0;
		note("disable correlation");
	}
	if (kind == 4 && api_kind_on) {
		api_kind_on = 0;
		note("disable driver");
	}
	return 0;
}
int cuptiActivityEnableDriverApi(uint32_t cbid, uint8_t on)
{
	const char *no = getenv("FAKECUPTI_NOAPI");
	if ((no && *no == '1') || cbid >= sizeof(api_on))
		return 1;
	api_on[cbid] = on;
	return 0;
}
/* Runtime API records: accepted, none written (the stand-in driver has no
 * runtime above it). */
int cuptiActivityEnableRuntimeApi(uint32_t cbid, uint8_t on)
{
	(void)on;
	return cbid < 1024 ? 0 : 1;
}
int cuptiActivityPushExternalCorrelationId(int kind, uint64_t id)
{
	if (kind != 5 || nx == 8)
		return 1;
	xstack[nx++] = id;
	return 0;
}
int cuptiActivityPopExternalCorrelationId(int kind, uint64_t *last)
{
	if (kind != 5 || nx == 0)
		return 1;
	*last = xstack[--nx];
	return 0;
}

static size_t rec_size(const uint8_t *r)
{
	uint32_t kind;
	memcpy(&kind, r, 4);
	return kind == 39 ? XREC : kind == 4 ? AREC : REC;
}

/* mu held */
static void append(uint8_t **buf, size_t *n, const uint8_t *r, size_t sz)
{
	uint8_t *p = realloc(*buf, *n + sz);
	if (!p)
		return;
	memcpy(p + *n, r, sz);
	*buf = p;
	*n += sz;
}
int cuptiActivityRegisterCallbacks(void (*r)(uint8_t **, size_t *, size_t *),
				   void (*d)(void *, uint32_t, uint8_t *, size_t, size_t))
{
	req = r;
	done = d;
	return 0;
}
int cuptiActivityRegisterTimestampCallback(uint64_t (*f)(void))
{
	clock_fn = f;
	return 0;
}
int cuptiActivityFlushPeriod(uint32_t ms) { return 0; }
int cuptiActivityFlushAll(uint32_t flag)
{
	pthread_mutex_lock(&mu);
	uint8_t *held = late;
	size_t nheld = nlate;
	late = NULL;
	nlate = 0;
	pthread_mutex_unlock(&mu);
	for (;;) {
		pthread_mutex_lock(&mu);
		if (!npending || !req || !done) {
			pthread_mutex_unlock(&mu);
			break;
		}
		uint8_t *buf = NULL;
		size_t size = 0, max = 0;
		req(&buf, &size, &max);
		size_t n = 0;
		while (buf && n < npending && n + rec_size(pending + n) <= size)
			n += rec_size(pending + n);
		memcpy(buf, pending, n);
		memmove(pending, pending + n, npending - n);
		npending -= n;
		pthread_mutex_unlock(&mu);
		done(NULL, 0, buf, size, n);
		if (!n)
			break;
	}
	/* what was held back comes with the next flush */
	pthread_mutex_lock(&mu);
	if (nheld)
		append(&pending, &npending, held, nheld);
	pthread_mutex_unlock(&mu);
	free(held);
	return 0;
}
int cuptiActivityGetNextRecord(uint8_t *buf, size_t valid, void **rec)
{
	uint8_t *next = *rec ? (uint8_t *)*rec + rec_size(*rec) : buf;
	if (next + 4 > buf + valid || next + rec_size(next) > buf + valid)
		return 12; /* CUPTI_ERROR_MAX_LIMIT_REACHED */
	*rec = next;
	return 0;
}
int cuptiActivityGetNumDroppedRecords(void *ctx, uint32_t stream, size_t *n)
{
	*n = 0;
	return 0;
}
int cuptiFinalize(void)
{
	subscribed = records_on = corr_on = api_kind_on = 0;
	memset(driver_on, 0, sizeof(driver_on));
	note("finalize");
	return 0;
}

/* The stand-in driver's launch of a kernel named name on stream s in
 * context ctx through cbid (307 cuLaunchKernel, 442 its _ptsz). */
void fakecupti_launch(const char *name, void *s, void *ctx, uint32_t cbid)
{
	struct {
		void *f;
		unsigned g[7];
		void *stream;
		void **p, **x;
	} params = {0};
	params.stream = s;
	pthread_mutex_lock(&mu);
	uint32_t id = ++corr;
	int on = subscribed && cbid < sizeof(driver_on) && driver_on[cbid];
	cb_fn f = callback;
	pthread_mutex_unlock(&mu);
	cb_data d = {0, "cuLaunchKernel", &params, NULL, name, ctx, 1, NULL, id};
	if (on)
		f(userdata, 1, cbid, &d);
	pthread_mutex_lock(&mu);
	const char *nocorr = getenv("FAKECUPTI_NOCORR");
	const char *lt = getenv("FAKECUPTI_CORR_LATE");
	int late_on = lt && *lt == '1';
	if (records_on && api_kind_on && cbid < sizeof(api_on) && api_on[cbid] && clock_fn && !(nocorr && *nocorr == '1')) {
		uint8_t x[AREC] = {0};
		uint32_t kind = 4;
		uint64_t t = clock_fn(), end = t + 100;
		memcpy(x, &kind, 4);
		memcpy(x + 4, &cbid, 4);
		memcpy(x + 8, &t, 8);
		memcpy(x + 16, &end, 8);
		memcpy(x + 32, &id, 4);
		if (late_on)
			append(&late, &nlate, x, AREC);
		else
			append(&pending, &npending, x, AREC);
	}
	if (records_on && corr_on && nx && !(nocorr && *nocorr == '1')) {
		uint8_t x[XREC] = {0};
		uint32_t kind = 39, xkind = 5;
		memcpy(x, &kind, 4);
		memcpy(x + 4, &xkind, 4);
		memcpy(x + 8, &xstack[nx - 1], 8);
		memcpy(x + 16, &id, 4);
		if (late_on)
			append(&late, &nlate, x, XREC);
		else
			append(&pending, &npending, x, XREC);
	}
	if (records_on && clock_fn) {
		uint8_t r[REC] = {0};
		uint32_t kind = 10, dev = 0;
		uint64_t start = clock_fn() + 2000, end = start + 500;
		int64_t g = ++grid;
		memcpy(r, &kind, 4);
		memcpy(r + 16, &start, 8);
		memcpy(r + 24, &end, 8);
		memcpy(r + 40, &dev, 4);
		memcpy(r + 92, &id, 4);
		memcpy(r + 96, &g, 8);
		memcpy(r + 104, &name, sizeof(name));
		append(&pending, &npending, r, REC);
	}
	pthread_mutex_unlock(&mu);
	d.site = 1;
	if (on && subscribed)
		f(userdata, 1, cbid, &d);
}
