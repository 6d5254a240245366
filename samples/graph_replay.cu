// graph_replay: a CUDA graph captured and instantiated at start-up, before
// any gpubpf tool attaches (as PyTorch does: the graph itself is destroyed
// right away, only its executable graph remains), then replayed at a steady
// rate, so that a tool attached with -p finds only replays of a graph made
// before it came (scripts/gpu/graphs-check.sh).
//
//   graph_replay [SECONDS [RATE [ELEMENTS]]]   defaults: 30 1000 65536
//
// SECONDS: how long to replay; RATE: replays per second (0: as fast as
// possible); ELEMENTS: a multiple of 256.
//
// Kernels (captured in this order, each <<<ELEMENTS/256, 256>>> on one
// non-blocking stream, global capture mode):
//   grInc(int *a, int n)                 _Z5grIncPii      a[i] += 1
//   grMix(int *a, const int *b, int n)   _Z5grMixPiPKii   a[i] = (a[i] + b[i]) % 1000003
// a starts at i % 17 and b at i % 5, so after n replays
//   a[i] = (i % 17 + n * (1 + i % 5)) % 1000003
// which the host checks for every element at the end.
//
// Lines printed:
//   graph_replay: ready pid=PID threads_per_replay=2*ELEMENTS kernel_nodes=2
//       once the exec exists, before the first replay (scripts wait for it)
//   graph_replay: replays=N      on SIGUSR1 (and once at the end)
//   RESULT graph_replay ok replays=N threads=N*2*ELEMENTS kernel_runs=2N
// SIGTERM or SIGINT ends the replays early; the check still runs.
#include "common.h"

#include <csignal>
#include <cstdint>
#include <vector>

#include <unistd.h>

static const int MOD = 1000003;

__global__ void grInc(int *a, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		a[i] += 1;
}

__global__ void grMix(int *a, const int *b, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		a[i] = (a[i] + b[i]) % 1000003;
}

static volatile sig_atomic_t g_stop = 0;
static volatile sig_atomic_t g_report = 0;

static void on_stop(int) { g_stop = 1; }
static void on_usr1(int) { g_report = 1; }

static void handle(int sig, void (*fn)(int))
{
	struct sigaction sa;
	sa.sa_handler = fn;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = 0; // no SA_RESTART: a sleep ends early on a signal
	if (sigaction(sig, &sa, nullptr) != 0) {
		perror("sigaction");
		exit(2);
	}
}

static inline int64_t mono_ns()
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

// sleep_until sleeps until the monotonic clock reads t (ns), or a stop
// signal came.
static void sleep_until(int64_t t)
{
	struct timespec ts;
	ts.tv_sec = (time_t)(t / 1000000000LL);
	ts.tv_nsec = (long)(t % 1000000000LL);
	while (!g_stop) {
		int rc = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr);
		if (rc == 0 || rc != EINTR)
			return;
	}
}

int main(int argc, char **argv)
{
	g_sample_name = "graph_replay";
	usage_if_help(argc, argv, "[SECONDS [RATE [ELEMENTS]]]  (defaults 30 1000 65536; ELEMENTS a multiple of 256, RATE 0: as fast as possible)");
	long seconds = arg_long(argc, argv, 1, 30, 1, 7 * 86400, "SECONDS");
	long rate = arg_long(argc, argv, 2, 1000, 0, 10000000, "RATE");
	long n_l = arg_long(argc, argv, 3, 65536, 256, 1 << 26, "ELEMENTS");
	const int TB = 256;
	if (n_l % TB != 0) {
		fprintf(stderr, "graph_replay: ELEMENTS %ld is not a multiple of %d\n", n_l, TB);
		exit(2);
	}
	int n = (int)n_l;
	int blocks = n / TB;

	handle(SIGTERM, on_stop);
	handle(SIGINT, on_stop);
	handle(SIGUSR1, on_usr1);

	print_device();
	printf("graph_replay: seconds=%ld rate=%ld elements=%d\n", seconds, rate, n);

	std::vector<int> a(n), b(n), got(n);
	for (int i = 0; i < n; i++) {
		a[i] = i % 17;
		b[i] = i % 5;
	}
	int *dA = nullptr, *dB = nullptr;
	CHECK(cudaMalloc(&dA, (size_t)n * sizeof(int)));
	CHECK(cudaMalloc(&dB, (size_t)n * sizeof(int)));
	CHECK(cudaMemcpy(dA, a.data(), (size_t)n * sizeof(int), cudaMemcpyHostToDevice));
	CHECK(cudaMemcpy(dB, b.data(), (size_t)n * sizeof(int), cudaMemcpyHostToDevice));

	cudaStream_t st;
	CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	cudaGraph_t graph;
	cudaGraphExec_t exec;
	CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
	grInc<<<blocks, TB, 0, st>>>(dA, n);
	CHECK_LAUNCH();
	grMix<<<blocks, TB, 0, st>>>(dA, dB, n);
	CHECK_LAUNCH();
	CHECK(cudaStreamEndCapture(st, &graph));

	// The graph must be exactly the two kernel nodes.
	size_t nnodes = 0;
	CHECK(cudaGraphGetNodes(graph, nullptr, &nnodes));
	std::vector<cudaGraphNode_t> nodes(nnodes);
	if (nnodes > 0)
		CHECK(cudaGraphGetNodes(graph, nodes.data(), &nnodes));
	int kernel_nodes = 0;
	for (size_t i = 0; i < nnodes; i++) {
		cudaGraphNodeType t;
		CHECK(cudaGraphNodeGetType(nodes[i], &t));
		if (t == cudaGraphNodeTypeKernel)
			kernel_nodes++;
	}
	if (nnodes != 2 || kernel_nodes != 2)
		result(false, "reason=unexpected_graph nodes=%zu kernel_nodes=%d", nnodes, kernel_nodes);

#if CUDART_VERSION >= 12000
	CHECK(cudaGraphInstantiate(&exec, graph, 0));
#else
	CHECK(cudaGraphInstantiate(&exec, graph, nullptr, nullptr, 0));
#endif
	// As PyTorch's CUDAGraph does: only the executable graph is kept.
	CHECK(cudaGraphDestroy(graph));

	printf("graph_replay: ready pid=%d threads_per_replay=%lld kernel_nodes=%d\n", (int)getpid(), 2LL * n,
	       kernel_nodes);
	fflush(stdout);

	const int64_t period = rate > 0 ? 1000000000LL / rate : 0;
	const int64_t t0 = mono_ns();
	const int64_t t_end = t0 + (int64_t)seconds * 1000000000LL;
	int64_t next = t0;
	long long replays = 0;
	while (!g_stop) {
		if (g_report) {
			g_report = 0;
			printf("graph_replay: replays=%lld\n", replays);
			fflush(stdout);
		}
		int64_t now = mono_ns();
		if (now >= t_end)
			break;
		if (period > 0) {
			if (now < next) {
				sleep_until(next < t_end ? next : t_end);
				if (g_stop)
					break;
				if (mono_ns() >= t_end)
					break;
			} else if (now - next > 100000000LL) {
				// more than 100 ms behind (a stopped process, a slow
				// sync): carry on at the rate, no catch-up burst
				next = now;
			}
			next += period;
		}
		CHECK(cudaGraphLaunch(exec, st));
		replays++;
		if (replays % 256 == 0)
			CHECK(cudaStreamSynchronize(st));
	}
	CHECK(cudaStreamSynchronize(st));
	double secs = (double)(mono_ns() - t0) / 1e9;
	printf("graph_replay: replays=%lld\n", replays);
	printf("graph_replay: %lld replays in %.2f s (%.0f per second)%s\n", replays, secs, secs > 0 ? replays / secs : 0.0,
	       g_stop ? ", stopped by a signal" : "");
	fflush(stdout);

	CHECK(cudaMemcpy(got.data(), dA, (size_t)n * sizeof(int), cudaMemcpyDeviceToHost));
	long wrong = 0;
	long first_bad = -1;
	long long want_first = 0;
	const unsigned long long rn = (unsigned long long)replays;
	for (int i = 0; i < n; i++) {
		unsigned long long want = ((unsigned long long)a[i] + rn * (1ULL + (unsigned long long)b[i])) % MOD;
		if (got[i] < 0 || (unsigned long long)got[i] != want) {
			if (first_bad < 0) {
				first_bad = i;
				want_first = (long long)want;
			}
			wrong++;
		}
	}
	CHECK(cudaGraphExecDestroy(exec));
	CHECK(cudaStreamDestroy(st));
	CHECK(cudaFree(dA));
	CHECK(cudaFree(dB));
	if (wrong)
		result(false, "reason=wrong_result index=%ld got=%d want=%lld wrong=%ld replays=%lld", first_bad,
		       got[first_bad], want_first, wrong, replays);
	result(true, "replays=%lld threads=%lld kernel_runs=%lld", replays, replays * 2LL * n, 2LL * replays);
}
