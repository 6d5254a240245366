// SPDX-License-Identifier: BSD-2-Clause
/*
 * cupti_trace: a CUPTI activity tracer to cross-check launchlate (issue 12).
 * It records every kernel's start and end as CUPTI sees them, in
 * CLOCK_MONOTONIC ns, the clock of launchlate's launch stamps, so that per
 * launch CUPTI's start minus launchlate's cpu_ns is a second measurement of
 * the same latency.
 *
 * Loaded by the CUDA driver at cuInit, not linked into the app, so it works
 * for static-cudart programs too:
 *
 *   CUDA_INJECTION64_PATH=/abs/path/libcupti_trace.so CUPTI_TRACE_OUT=k.txt ./app
 *
 * One line per kernel, appended to $CUPTI_TRACE_OUT (appended: a program
 * that starts other CUDA programs writes them all, told apart by pid=):
 *
 *   grid=<gridId> start=<ns> end=<ns> stream=<streamId> dev=<deviceId> ctx=<contextId> pid=<pid> threads=<grid x block> name=<mangled name>
 *
 * name is last because a name is the one field that may hold blanks.
 * Errors go to stderr with CUPTI's own words; the app always runs on
 * (nothing here exits or aborts, and the injection entry point always
 * reports success so cuInit is not failed on our account).
 *
 * Build: scripts/gpu/cupti/build.sh (it picks the newest kernel record the
 * headers define and passes it as CUPTI_KERNEL_RECORD).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cupti.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* CUPTI writes its newest kernel record (CUpti_ActivityKernel9 in CUDA
 * 12.4, 10 in 13.0, ...), as named in the headers of the same toolkit.
 * build.sh passes that one. The fallback reads the same bytes as far as
 * the fields used here go (start, end, deviceId, contextId, streamId,
 * gridId, name: the same prefix in versions 4 to 9 of CUDA 12.4's headers;
 * later versions were not compared). */
#ifndef CUPTI_KERNEL_RECORD
#define CUPTI_KERNEL_RECORD CUpti_ActivityKernel4
#endif
typedef CUPTI_KERNEL_RECORD kernel_record;

#define BUF_SIZE (8u << 20)
#define BUF_ALIGN 8 /* ACTIVITY_RECORD_ALIGNMENT */

static FILE *out;
static const char *out_path;
static int initialized;
/* Added to from whichever thread CUPTI hands a buffer back on (its own, or
 * the one flushing at exit); read at exit after the forced flush. */
static unsigned long long n_kernels, n_dropped;

static void report(const char *what, CUptiResult r)
{
	const char *s = NULL;

	if (cuptiGetResultString(r, &s) != CUPTI_SUCCESS || !s)
		s = "unknown CUPTI error";
	fprintf(stderr, "cupti_trace: %s failed: %s (%d)\n", what, s, (int)r);
}

/* Gives up on tracing, in the same words whatever went wrong, and returns
 * what InitializeInjection then returns: success, so cuInit goes on. */
static int untraced(void)
{
	fprintf(stderr, "cupti_trace: tracing nothing in pid %d (the program runs on untraced)\n", (int)getpid());
	return 1;
}

#define TRY(call) ((r = (call)) == CUPTI_SUCCESS ? 1 : (report(#call, r), 0))

/* CUPTI's CPU clock. Its default on Linux is CLOCK_REALTIME; CUPTI takes
 * GPU timestamps and converts them to this clock itself, so with this
 * callback a kernel's start and end come out in CLOCK_MONOTONIC, as
 * bpf_ktime_get_ns() (launchlate's launch stamp) reads it. */
static uint64_t CUPTIAPI monotonic_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
	void *p = NULL;

	*max_records = 0; /* as many as fit */
	if (posix_memalign(&p, BUF_ALIGN, BUF_SIZE) != 0) {
		/* CUPTI drops records while it has no buffer, and counts them. */
		fprintf(stderr, "cupti_trace: no memory for an activity buffer\n");
		*buffer = NULL;
		*size = 0;
		return;
	}
	*buffer = (uint8_t *)p;
	*size = BUF_SIZE;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid)
{
	CUpti_Activity *rec = NULL;
	CUptiResult r;
	size_t dropped = 0;
	unsigned long long n = 0;

	(void)size;
	if (!buffer)
		return;
	for (;;) {
		r = cuptiActivityGetNextRecord(buffer, valid, &rec);
		if (r == CUPTI_ERROR_MAX_LIMIT_REACHED)
			break; /* the end of the buffer */
		if (r != CUPTI_SUCCESS) {
			report("cuptiActivityGetNextRecord", r);
			break;
		}
		if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && rec->kind != CUPTI_ACTIVITY_KIND_KERNEL)
			continue;
		const kernel_record *k = (const kernel_record *)rec;
		if (out)
			fprintf(out, "grid=%" PRId64 " start=%" PRIu64 " end=%" PRIu64 " stream=%" PRIu32 " dev=%" PRIu32
				     " ctx=%" PRIu32 " pid=%d threads=%llu name=%s\n",
				(int64_t)k->gridId, (uint64_t)k->start, (uint64_t)k->end, (uint32_t)k->streamId,
				(uint32_t)k->deviceId, (uint32_t)k->contextId, (int)getpid(),
				(unsigned long long)k->gridX * k->gridY * k->gridZ * k->blockX * k->blockY * k->blockZ,
				k->name ? k->name : "?");
		n++;
	}
	__atomic_add_fetch(&n_kernels, n, __ATOMIC_RELAXED);
	if (TRY(cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped)) && dropped > 0) {
		fprintf(stderr, "cupti_trace: CUPTI dropped %zu activity records (buffers full)\n", dropped);
		__atomic_add_fetch(&n_dropped, (unsigned long long)dropped, __ATOMIC_RELAXED);
	}
	free(buffer);
}

/* Registered during cuInit, after whatever the program registered before
 * its first CUDA call, so it runs before that teardown, while CUPTI can
 * still flush (the scheme of NVIDIA's injection samples). */
static void at_exit(void)
{
	CUptiResult r;

	if (!TRY(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED)))
		fprintf(stderr, "cupti_trace: the last activity buffers were not flushed\n");
	if (out) {
		if (fflush(out) != 0)
			perror("cupti_trace: writing CUPTI_TRACE_OUT");
		fprintf(stderr, "cupti_trace: pid %d: %llu kernel records written to %s, %llu dropped\n", (int)getpid(),
			n_kernels, out_path, n_dropped);
	}
}

/* The entry point the driver calls for CUDA_INJECTION64_PATH (C linkage
 * even if a compiler takes this file for C++). */
#ifdef __cplusplus
extern "C"
#endif
int InitializeInjection(void)
{
	CUptiResult r;

	if (initialized)
		return 1;
	initialized = 1;
	out_path = getenv("CUPTI_TRACE_OUT");
	if (!out_path || !*out_path) {
		fprintf(stderr, "cupti_trace: CUPTI_TRACE_OUT is not set: set it to the file to write kernel records to\n");
		return untraced();
	}
	out = fopen(out_path, "a");
	if (!out) {
		fprintf(stderr, "cupti_trace: cannot open CUPTI_TRACE_OUT=%s: %m\n", out_path);
		return untraced();
	}
	/* The clock first: CUPTI keeps the one in force when a kind is
	 * enabled, and records taken with its default clock would be off by
	 * the REALTIME-MONOTONIC difference. */
	if (!TRY(cuptiActivityRegisterTimestampCallback(monotonic_ns)))
		return untraced();
	if (!TRY(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed)))
		return untraced();
	/* CONCURRENT_KERNEL, not KERNEL: KERNEL serialises every kernel on the
	 * GPU, which would change the very latencies being compared. */
	if (!TRY(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)))
		return untraced();
	if (atexit(at_exit) != 0)
		fprintf(stderr, "cupti_trace: atexit failed: the last kernel records will be lost\n");
	return 1;
}
