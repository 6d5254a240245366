// emptybench LAUNCHES: launches an empty kernel LAUNCHES times and prints
// the launch rate (launches per second, CPU side, synchronised at the end).
#include <chrono>
#include <cstdio>
#include <cstdlib>

__global__ void empty() {}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 200000;
	for (int i = 0; i < 2000; i++)
		empty<<<1, 1>>>();
	cudaDeviceSynchronize();
	auto t0 = std::chrono::steady_clock::now();
	for (int i = 0; i < n; i++)
		empty<<<1, 1>>>();
	cudaDeviceSynchronize();
	auto t1 = std::chrono::steady_clock::now();
	double s = std::chrono::duration<double>(t1 - t0).count();
	cudaError_t e = cudaGetLastError();
	printf("RATE %.0f launches/s (%.3f us/launch) %s\n", n / s, s * 1e6 / n, cudaGetErrorString(e));
	return e != cudaSuccess;
}
