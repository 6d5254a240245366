// gated: kernel launches in rounds that a test opens from outside, so that
// tools can be attached, killed and detached between (or during) rounds and
// the runs they count compared with exact numbers (scripts/gpu/faults-check.sh).
//
//   gated DIR SPEC [THREADS [BLOCKS [HOSTTHREADS]]]     defaults: 256 4 1
//
// SPEC is a comma-separated list of rounds: N runs N launch steps, '*' runs
// launch steps until the file DIR/stop.R exists (at least one). The program
// initialises CUDA, runs one warm-up step (so its module is loaded and its
// kernels known to the agent), creates DIR/ready, and then for each round R
// (1-based) waits for DIR/go.R (polling every 2 ms, 300 s at most), runs the
// round, checks every output and creates DIR/done.R. DIR "-" runs without
// gates (no files; a '*' round runs one step): the untraced reference run.
//
// A launch step is, on each of HOSTTHREADS host threads (each with its own
// non-blocking stream and its own buffers): gatedA<<<BLOCKS, THREADS>>> then
// gatedB<<<BLOCKS, THREADS>>>, one element per GPU thread. Every step of a
// round writes the same values, so a round's result does not depend on how
// many steps a '*' round ran. So a tool attached for the whole of a round of
// N steps sees exactly N x HOSTTHREADS launches of each kernel and
// N x HOSTTHREADS x THREADS x BLOCKS thread runs of each.
//
// Output (nothing timing-dependent, so traced and untraced runs print the
// same): "READY", then "ROUND R ok steps=N" (or "ROUND R ok" for a '*'
// round) per round, then
//   RESULT gated ok rounds=R threads=T blocks=B hostthreads=H checksum=C
//
// Kernels (extern "C", names as the driver reports them):
//   gatedA(unsigned *a, int n, unsigned salt)
//   gatedB(const unsigned *a, unsigned *b, int n, unsigned salt)
#include "common.h"
#include "gates.h"

#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

extern "C" __global__ void gatedA(unsigned *a, int n, unsigned salt)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		a[i] = ((unsigned)i * 2654435761u) ^ salt;
}

extern "C" __global__ void gatedB(const unsigned *a, unsigned *b, int n, unsigned salt)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		b[i] = a[i] * 3u + salt;
}

static unsigned salt_of(int round, int host) { return (unsigned)round * 65537u + (unsigned)host; }

struct host {
	cudaStream_t s;
	unsigned *a, *b;
	std::vector<unsigned> out;
	cudaError_t err = cudaSuccess;
};

int main(int argc, char **argv)
{
	g_sample_name = "gated";
	usage_if_help(argc, argv, "DIR SPEC [THREADS [BLOCKS [HOSTTHREADS]]]  (SPEC e.g. '*,20,5'; defaults 256 4 1)");
	if (argc < 3) {
		fprintf(stderr, "usage: gated DIR SPEC [THREADS [BLOCKS [HOSTTHREADS]]]\n");
		return 2;
	}
	std::string dir = argv[1];
	no_gates = dir == "-";
	std::vector<long> rounds; // -1: until stop.R
	for (const char *p = argv[2]; *p;) {
		if (*p == '*') {
			rounds.push_back(-1);
			p++;
		} else {
			char *end = nullptr;
			long v = strtol(p, &end, 10);
			if (end == p || v < 1 || v > 10000000) {
				fprintf(stderr, "gated: bad SPEC '%s'\n", argv[2]);
				return 2;
			}
			rounds.push_back(v);
			p = end;
		}
		if (*p == ',')
			p++;
		else if (*p) {
			fprintf(stderr, "gated: bad SPEC '%s'\n", argv[2]);
			return 2;
		}
	}
	int threads = (int)arg_long(argc, argv, 3, 256, 1, 1024, "THREADS");
	int blocks = (int)arg_long(argc, argv, 4, 4, 1, 65535, "BLOCKS");
	int nhost = (int)arg_long(argc, argv, 5, 1, 1, 64, "HOSTTHREADS");
	int n = threads * blocks;
	print_device();

	std::vector<host> hs(nhost);
	for (auto &h : hs) {
		CHECK(cudaStreamCreateWithFlags(&h.s, cudaStreamNonBlocking));
		CHECK(cudaMalloc(&h.a, n * sizeof(unsigned)));
		CHECK(cudaMalloc(&h.b, n * sizeof(unsigned)));
		h.out.resize(n);
	}
	auto step = [&](host &h, unsigned salt) {
		gatedA<<<blocks, threads, 0, h.s>>>(h.a, n, salt);
		cudaError_t e = cudaGetLastError();
		if (e == cudaSuccess) {
			gatedB<<<blocks, threads, 0, h.s>>>(h.a, h.b, n, salt);
			e = cudaGetLastError();
		}
		if (e != cudaSuccess && h.err == cudaSuccess)
			h.err = e;
	};
	// Warm-up: module loaded, kernels looked up, before any tool attaches.
	for (int k = 0; k < nhost; k++) {
		step(hs[k], salt_of(0, k));
		CHECK(hs[k].err);
		CHECK(cudaStreamSynchronize(hs[k].s));
	}
	printf("READY\n");
	fflush(stdout);
	touch(dir + "/ready");

	unsigned long long checksum = 0;
	for (size_t r = 1; r <= rounds.size(); r++) {
		wait_for(dir + "/go." + std::to_string(r));
		long steps = rounds[r - 1];
		std::string stop = dir + "/stop." + std::to_string(r);
		std::vector<std::thread> ts;
		for (int k = 0; k < nhost; k++) {
			ts.emplace_back([&, k] {
				host &h = hs[k];
				if (cudaSetDevice(0) != cudaSuccess) {
					h.err = cudaErrorInvalidDevice;
					return;
				}
				unsigned salt = salt_of((int)r, k);
				if (steps > 0) {
					for (long i = 0; i < steps && h.err == cudaSuccess; i++)
						step(h, salt);
				} else {
					do
						step(h, salt);
					while (h.err == cudaSuccess && !exists(stop));
				}
				cudaError_t e = cudaStreamSynchronize(h.s);
				if (e != cudaSuccess && h.err == cudaSuccess)
					h.err = e;
			});
		}
		for (auto &t : ts)
			t.join();
		long bad = 0;
		checksum = 0;
		for (int k = 0; k < nhost; k++) {
			host &h = hs[k];
			if (h.err != cudaSuccess)
				result(false, "reason=cuda_error round=%zu host=%d error=%s", r, k, cudaGetErrorName(h.err));
			CHECK(cudaMemcpy(h.out.data(), h.b, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
			unsigned salt = salt_of((int)r, k);
			for (int i = 0; i < n; i++) {
				unsigned want = (((unsigned)i * 2654435761u) ^ salt) * 3u + salt;
				if (h.out[i] != want)
					bad++;
				checksum += h.out[i];
			}
		}
		if (bad)
			result(false, "reason=wrong_result round=%zu wrong=%ld", r, bad);
		if (steps > 0)
			printf("ROUND %zu ok steps=%ld\n", r, steps);
		else
			printf("ROUND %zu ok\n", r);
		fflush(stdout);
		touch(dir + "/done." + std::to_string(r));
	}
	for (auto &h : hs) {
		CHECK(cudaFree(h.a));
		CHECK(cudaFree(h.b));
		CHECK(cudaStreamDestroy(h.s));
	}
	result(true, "rounds=%zu threads=%d blocks=%d hostthreads=%d checksum=%llu", rounds.size(), threads, blocks, nhost,
	       checksum);
}
