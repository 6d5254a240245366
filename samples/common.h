// Shared helpers of the gpubpf sample workloads: error checks, argument
// parsing, a monotonic host clock and the RESULT line every sample prints.
//
// Every sample ends with exactly one line
//     RESULT <name> ok key=value ...      (exit status 0)
// or  RESULT <name> FAIL reason=... ...   (exit status 1)
// so tests can prove that an application still computes correctly while a
// gpubpf tool traces it. Every number printed is measured or computed by the
// sample itself.
#pragma once

#include <cuda_runtime.h>

#include <cerrno>
#include <climits>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <ctime>

static const char *g_sample_name = "sample";

// result prints the RESULT line (printf-style details) and exits.
static void result(bool ok, const char *fmt, ...)
{
	fflush(stdout);
	printf("RESULT %s %s", g_sample_name, ok ? "ok" : "FAIL");
	if (fmt && *fmt) {
		va_list ap;
		va_start(ap, fmt);
		printf(" ");
		vprintf(fmt, ap);
		va_end(ap);
	}
	printf("\n");
	fflush(stdout);
	exit(ok ? 0 : 1);
}

#define CHECK(call)                                                                \
	do {                                                                       \
		cudaError_t err_ = (call);                                         \
		if (err_ != cudaSuccess) {                                         \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,  \
				cudaGetErrorString(err_));                         \
			result(false, "reason=cuda_error call=%s error=%s", #call,    \
			       cudaGetErrorName(err_));                            \
		}                                                                  \
	} while (0)

// CHECK_LAUNCH checks a kernel launch (configuration errors show at once).
#define CHECK_LAUNCH() CHECK(cudaGetLastError())

// arg_long returns argv[i] as a number in [lo, hi], or def when absent.
static long arg_long(int argc, char **argv, int i, long def, long lo, long hi, const char *what)
{
	if (i >= argc)
		return def;
	char *end = nullptr;
	errno = 0;
	long v = strtol(argv[i], &end, 0);
	if (errno || !end || *end || v < lo || v > hi) {
		fprintf(stderr, "%s: bad %s '%s' (want %ld..%ld)\n", g_sample_name, what, argv[i], lo, hi);
		exit(2);
	}
	return v;
}

// usage_if_help prints usage and exits 0 on -h/--help.
static void usage_if_help(int argc, char **argv, const char *usage)
{
	for (int i = 1; i < argc; i++) {
		if (argv[i][0] == '-' && (argv[i][1] == 'h' || (argv[i][1] == '-' && argv[i][2] == 'h'))) {
			printf("usage: %s %s\n", g_sample_name, usage);
			exit(0);
		}
	}
}

// now_ns is the host's monotonic clock in nanoseconds.
static inline double now_ns()
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

// print_device names the GPU the sample runs on (one line).
static void print_device()
{
	int dev = 0, rt = 0, drv = 0;
	cudaDeviceProp p;
	CHECK(cudaGetDevice(&dev));
	CHECK(cudaGetDeviceProperties(&p, dev));
	CHECK(cudaRuntimeGetVersion(&rt));
	CHECK(cudaDriverGetVersion(&drv));
	printf("device %d: %s sm_%d%d, runtime %d.%d, driver %d.%d\n", dev, p.name, p.major, p.minor,
	       rt / 1000, (rt % 1000) / 10, drv / 1000, (drv % 1000) / 10);
}
