// vecadd N ITERS SLEEP_MS [graph|multi]: adds two vectors ITERS times with a
// __constant__ bound, checks every result, and prints "RESULT PASS" or
// "RESULT FAIL". With "graph", each iteration captures the memset and the
// launch into a CUDA graph on its own stream and launches that. With
// "multi", every iteration runs on each visible GPU in turn.
// The agent's GPU check attaches to it while it runs.
#include <cstdio>
#include <cstdlib>
#include <unistd.h>

__constant__ int d_N;
__device__ unsigned long long d_calls;

__global__ void vectorAdd(const float *A, const float *B, float *C)
{
	int i = blockDim.x * blockIdx.x + threadIdx.x;
	if (i < d_N)
		C[i] = A[i] + B[i];
}

#define CK(x)                                                                       \
	do {                                                                        \
		cudaError_t e = (x);                                                \
		if (e != cudaSuccess) {                                             \
			printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__); \
			printf("RESULT FAIL\n");                                    \
			return 1;                                                   \
		}                                                                   \
	} while (0)

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 1 << 20;
	int iters = argc > 2 ? atoi(argv[2]) : 100;
	int sleep_ms = argc > 3 ? atoi(argv[3]) : 10;
	bool graph = argc > 4 && argv[4][0] == 'g';
	int ndev = 1;
	if (argc > 4 && argv[4][0] == 'm')
		CK(cudaGetDeviceCount(&ndev));
	if (ndev > 8)
		ndev = 8;
	setvbuf(stdout, NULL, _IOLBF, 0);
	float *hA = (float *)malloc(n * 4), *hB = (float *)malloc(n * 4), *hC = (float *)malloc(n * 4);
	for (int i = 0; i < n; i++) {
		hA[i] = (float)i;
		hB[i] = (float)(2 * i);
	}
	float *dA[8], *dB[8], *dC[8];
	for (int d = 0; d < ndev; d++) {
		CK(cudaSetDevice(d));
		CK(cudaMalloc(&dA[d], n * 4));
		CK(cudaMalloc(&dB[d], n * 4));
		CK(cudaMalloc(&dC[d], n * 4));
		CK(cudaMemcpy(dA[d], hA, n * 4, cudaMemcpyHostToDevice));
		CK(cudaMemcpy(dB[d], hB, n * 4, cudaMemcpyHostToDevice));
		CK(cudaMemcpyToSymbol(d_N, &n, sizeof(n)));
	}
	printf("STARTED pid %d n %d devices %d\n", (int)getpid(), n, ndev);
	int bad = 0;
	for (int it = 0; it < iters * ndev; it++) {
		int dev = it % ndev;
		float *A = dA[dev], *B = dB[dev], *C = dC[dev];
		CK(cudaSetDevice(dev));
		if (graph) {
			cudaStream_t st;
			cudaGraph_t g;
			cudaGraphExec_t ge;
			CK(cudaStreamCreate(&st));
			CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
			CK(cudaMemsetAsync(C, 0, n * 4, st));
			vectorAdd<<<(n + 255) / 256, 256, 0, st>>>(A, B, C);
			CK(cudaStreamEndCapture(st, &g));
			CK(cudaGraphInstantiate(&ge, g, 0));
			CK(cudaGraphLaunch(ge, st));
			CK(cudaStreamSynchronize(st));
			CK(cudaGraphExecDestroy(ge));
			CK(cudaGraphDestroy(g));
			CK(cudaStreamDestroy(st));
		} else {
			CK(cudaMemset(C, 0, n * 4));
			vectorAdd<<<(n + 255) / 256, 256>>>(A, B, C);
		}
		CK(cudaGetLastError());
		CK(cudaMemcpy(hC, C, n * 4, cudaMemcpyDeviceToHost));
		int wrong = 0;
		for (int i = 0; i < n; i++)
			if (hC[i] != 3.0f * i)
				wrong++;
		if (wrong) {
			bad++;
			printf("iter %d: %d wrong results\n", it, wrong);
		}
		if (it % 50 == 0)
			printf("iter %d ok=%d\n", it, !wrong);
		if (dev == ndev - 1)
			usleep(sleep_ms * 1000);
	}
	printf("RESULT %s iters=%d bad=%d\n", bad ? "FAIL" : "PASS", iters, bad);
	return bad != 0;
}
