/* A stand-in for libsanitizer-public.so: the calls of the agent's sanitizer
 * path (san.c), for its CPU tests. The stand-in driver (fakecuda.c) reports
 * each launch here (fakesan_launch), as the real driver does to the
 * sanitizer: with the launch domain on, the subscriber's callback gets a
 * Sanitizer_LaunchData-shaped record first; then the launch "runs": a kernel
 * of a patched module prints "SANRUN <name> index=<the word its callback
 * data points to, or -1 with none>", any other "SANRUN <name> unpatched".
 * "Device" memory is host memory.
 *   FAKESAN_BUSY=1      another tool holds the slot (subscribe fails)
 *   FAKESAN_REFUSE=1    the patch module is refused (sanitizerAddPatches fails)
 *   FAKESAN_LOG=F       appends "subscribe", "domain 5 1", "add N", "instr I NAME",
 *                       "patch", "unpatch" to F
 * Build: gcc -shared -fPIC -pthread -o libfakesan.so fakesanitizer.c */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*cb_fn)(void *, int, uint32_t, const void *);
typedef struct {
	void *context, *stream, *hStream, *module, *function;
	const char *functionName;
	uint32_t gx, gy, gz, bx, by, bz, cx, cy, cz;
	uint64_t gridId;
	void *hLaunch;
	int device;
} launch_data;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static cb_fn callback;
static void *cb_ud;
static int launch_on;
static void *patched[64];
static int npatched;
static struct {
	void *fn;
	const void *ud;
} data[256];
static int ndata;

static void logf_(const char *fmt, const char *s, long n)
{
	const char *p = getenv("FAKESAN_LOG");
	FILE *f = p ? fopen(p, "a") : NULL;
	if (!f)
		return;
	fprintf(f, fmt, s, n);
	fputc('\n', f);
	fclose(f);
}

int sanitizerSubscribe(void **h, cb_fn cb, void *ud)
{
	if (getenv("FAKESAN_BUSY"))
		return 6; /* SANITIZER_ERROR_INVALID_OPERATION */
	pthread_mutex_lock(&mu);
	callback = cb;
	cb_ud = ud;
	*h = (void *)&callback;
	pthread_mutex_unlock(&mu);
	logf_("subscribe%s", "", 0);
	return 0;
}
int sanitizerEnableDomain(uint32_t on, void *h, int dom)
{
	if (dom == 5)
		__atomic_store_n(&launch_on, (int)on, __ATOMIC_RELEASE);
	logf_("domain 5 %s%ld", "", (long)on);
	return 0;
}
int sanitizerAddPatches(const void *img, void *ctx)
{
	if (getenv("FAKESAN_REFUSE"))
		return 1;
	logf_("add %s%ld", "", img ? (long)((const unsigned char *)img)[0] : -1);
	return 0;
}
int sanitizerPatchInstructions(int id, void *mod, const char *name)
{
	logf_("instr %s %ld", name, id);
	return 0;
}
int sanitizerPatchModule(void *mod)
{
	pthread_mutex_lock(&mu);
	if (npatched < 64)
		patched[npatched++] = mod;
	pthread_mutex_unlock(&mu);
	logf_("patch%s", "", 0);
	return 0;
}
int sanitizerUnpatchModule(void *mod)
{
	pthread_mutex_lock(&mu);
	for (int i = 0; i < npatched; i++)
		if (patched[i] == mod)
			patched[i] = patched[--npatched];
	pthread_mutex_unlock(&mu);
	logf_("unpatch%s", "", 0);
	return 0;
}
int sanitizerSetCallbackData(void *fn, const void *ud)
{
	pthread_mutex_lock(&mu);
	int i = 0;
	while (i < ndata && data[i].fn != fn)
		i++;
	if (i < 256) {
		data[i].fn = fn;
		data[i].ud = ud;
		if (i == ndata)
			ndata++;
	}
	pthread_mutex_unlock(&mu);
	return 0;
}
int sanitizerAlloc(void *ctx, void **p, size_t n)
{
	*p = calloc(1, n);
	return *p ? 0 : 7;
}
int sanitizerMemcpyHostToDeviceAsync(void *dst, void *src, size_t n, void *st)
{
	memcpy(dst, src, n);
	return 0;
}
int sanitizerGetResultString(int r, const char **s)
{
	*s = r == 1 ? "One or more of the parameters is invalid" : r == 6 ? "Invalid operation" : "error";
	return 0;
}

void fakesan_launch(const char *name, void *mod, void *fn, void *ctx, void *stream, unsigned gx, unsigned gy,
		    unsigned gz, unsigned bx, unsigned by, unsigned bz)
{
	launch_data d = {ctx, stream, stream, mod, fn, name, gx, gy, gz, bx, by, bz, 1, 1, 1, 0, NULL, 0};
	pthread_mutex_lock(&mu);
	cb_fn cb = __atomic_load_n(&launch_on, __ATOMIC_ACQUIRE) ? callback : NULL;
	void *u = cb_ud;
	pthread_mutex_unlock(&mu);
	if (cb)
		cb(u, 5, 1, &d); /* SANITIZER_CB_DOMAIN_LAUNCH, SANITIZER_CBID_LAUNCH_BEGIN */
	pthread_mutex_lock(&mu);
	int on = 0;
	for (int i = 0; i < npatched; i++)
		on |= patched[i] == mod;
	const void *ud = NULL;
	for (int i = 0; i < ndata; i++)
		if (data[i].fn == fn)
			ud = data[i].ud;
	pthread_mutex_unlock(&mu);
	if (on)
		printf("SANRUN %s index=%ld\n", name, ud ? (long)(int32_t) * (const uint32_t *)ud : -1L);
	else
		printf("SANRUN %s unpatched\n", name);
	fflush(stdout);
}
