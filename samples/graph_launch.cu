// graph_launch: kernel launches captured into a CUDA graph (stream capture),
// then the graph is launched several times.
//
//   graph_launch [GRAPH_LAUNCHES [ELEMENTS]]   defaults: 5 4096
//
// Kernels (captured in this order, each <<<ceil(n/256), 256>>> on one stream):
//   graphInc(int *a, int n)            _Z8graphIncPii        a[i] += 1
//   graphMul(int *a, int n, int f)     _Z8graphMulPiii       a[i] *= 3
//   graphMix(int *a, const int *b, int n)  _Z8graphMixPiPKii  a[i] = (a[i] + b[i]) % 1000003
// a starts at i % 17 and b at i % 5; the host replays the graph's arithmetic
// GRAPH_LAUNCHES times and checks every element.
#include "common.h"

#include <vector>

__global__ void graphInc(int *a, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		a[i] += 1;
}

__global__ void graphMul(int *a, int n, int f)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		a[i] *= f;
}

__global__ void graphMix(int *a, const int *b, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		a[i] = (a[i] + b[i]) % 1000003;
}

int main(int argc, char **argv)
{
	g_sample_name = "graph_launch";
	usage_if_help(argc, argv, "[GRAPH_LAUNCHES [ELEMENTS]]  (defaults 5 4096)");
	int glaunches = (int)arg_long(argc, argv, 1, 5, 1, 10000000, "GRAPH_LAUNCHES");
	int n = (int)arg_long(argc, argv, 2, 4096, 1, 1 << 26, "ELEMENTS");
	print_device();
	printf("graph_launch: graph_launches=%d elements=%d\n", glaunches, n);
	const int TB = 256;
	int blocks = (n + TB - 1) / TB;

	std::vector<int> a(n), b(n), got(n);
	for (int i = 0; i < n; i++) {
		a[i] = i % 17;
		b[i] = i % 5;
	}
	int *dA, *dB;
	CHECK(cudaMalloc(&dA, n * sizeof(int)));
	CHECK(cudaMalloc(&dB, n * sizeof(int)));
	CHECK(cudaMemcpy(dA, a.data(), n * sizeof(int), cudaMemcpyHostToDevice));
	CHECK(cudaMemcpy(dB, b.data(), n * sizeof(int), cudaMemcpyHostToDevice));

	cudaStream_t st;
	CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	cudaGraph_t graph;
	cudaGraphExec_t exec;
	CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
	graphInc<<<blocks, TB, 0, st>>>(dA, n);
	graphMul<<<blocks, TB, 0, st>>>(dA, n, 3);
	graphMix<<<blocks, TB, 0, st>>>(dA, dB, n);
	CHECK(cudaStreamEndCapture(st, &graph));
	size_t nodes = 0;
	CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
#if CUDART_VERSION >= 12000
	CHECK(cudaGraphInstantiate(&exec, graph, 0));
#else
	CHECK(cudaGraphInstantiate(&exec, graph, nullptr, nullptr, 0));
#endif

	double t0 = now_ns();
	for (int g = 0; g < glaunches; g++)
		CHECK(cudaGraphLaunch(exec, st));
	CHECK(cudaStreamSynchronize(st));
	double t1 = now_ns();
	CHECK(cudaMemcpy(got.data(), dA, n * sizeof(int), cudaMemcpyDeviceToHost));

	long bad = 0;
	unsigned long long checksum = 0;
	for (int i = 0; i < n; i++) {
		long long v = a[i];
		for (int g = 0; g < glaunches; g++)
			v = ((v + 1) * 3 + b[i]) % 1000003;
		if (got[i] != (int)v)
			bad++;
		checksum += (unsigned)got[i];
	}
	double us_per = (t1 - t0) / 1e3 / glaunches;
	printf("graph of %zu kernel nodes launched %d times: %.2f us per graph launch (host, incl. final sync)\n", nodes,
	       glaunches, us_per);
	printf("checked %d elements: %ld wrong, checksum %llu\n", n, bad, checksum);
	if (bad)
		result(false, "reason=wrong_result wrong=%ld checksum=%llu", bad, checksum);
	CHECK(cudaGraphExecDestroy(exec));
	CHECK(cudaGraphDestroy(graph));
	CHECK(cudaStreamDestroy(st));
	CHECK(cudaFree(dA));
	CHECK(cudaFree(dB));
	result(true, "graph_launches=%d nodes=%zu checksum=%llu us_per_graph=%.2f", glaunches, nodes, checksum, us_per);
}
