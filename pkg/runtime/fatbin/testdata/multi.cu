#include <cstdio>
__device__ int g_arr[16];
__device__ __noinline__ float helper(float x) { return x * 2.0f + g_arr[3]; }
__global__ void scale(float *x, int n) { int i = blockIdx.x*blockDim.x+threadIdx.x; if (i < n) x[i] = helper(x[i]); }
__global__ void fill(int *x, int v, int n) { int i = blockIdx.x*blockDim.x+threadIdx.x; if (i >= n) return; x[i] = v + g_arr[i & 15]; }
template <typename T> __global__ void axpy(T a, const T *x, T *y, int n) { int i = blockIdx.x*blockDim.x+threadIdx.x; if (i < n) y[i] += a * x[i]; }
template __global__ void axpy<float>(float, const float*, float*, int);
template __global__ void axpy<double>(double, const double*, double*, int);
namespace ns { __global__ void reduce(const float *in, float *out, int n) { __shared__ float s[256]; int t = threadIdx.x; s[t] = t < n ? in[t] : 0; __syncthreads(); for (int k = 128; k > 0; k >>= 1) { if (t < k) s[t] += s[t+k]; __syncthreads(); } if (t == 0) *out = s[0]; } }
int main() { float *p; cudaMalloc(&p, 1024); scale<<<1,32>>>(p, 32); fill<<<1,32>>>((int*)p,1,32); axpy<float><<<1,1>>>(1.f,p,p,1); axpy<double><<<1,1>>>(1.0,(double*)p,(double*)p,1); ns::reduce<<<1,256>>>(p,p,1); cudaDeviceSynchronize(); printf("ok\n"); }
