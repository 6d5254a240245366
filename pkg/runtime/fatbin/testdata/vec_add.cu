// The application of the GPU check: vec_add reading a __constant__ that the
// host sets with cudaMemcpyToSymbol and counting into a __device__ variable.
#include <cstdio>
__constant__ int d_N;
__device__ unsigned long long d_counter;
__global__ void vectorAdd(const float *A, const float *B, float *C, int n) {
	int i = blockDim.x * blockIdx.x + threadIdx.x;
	if (i < d_N && i < n) {
		C[i] = A[i] + B[i];
		atomicAdd(&d_counter, 1ULL);
	}
}
int main() {
	int n = 1024, lim = 1000;
	cudaMemcpyToSymbol(d_N, &lim, sizeof lim);
	float *a, *c;
	cudaMalloc(&a, 4 * n);
	cudaMalloc(&c, 4 * n);
	cudaMemset(a, 0, 4 * n);
	vectorAdd<<<4, 256>>>(a, a, c, n);
	unsigned long long k = 0;
	cudaMemcpyFromSymbol(&k, d_counter, sizeof k);
	printf("vec_add: d_counter=%llu (want %d)\n", k, lim);
	return k == (unsigned long long)lim ? 0 : 1;
}
