// multimod's shared library (not a program): a kernel of its own, in the
// library's own fatbin, registered by the library's own cudart (the static
// one linked into libmultimod.so, or libcudart.so for libmultimod_shared.so)
// when the library is loaded. See multimod.cu.
#include <cuda_runtime.h>

__global__ void libScale(unsigned *a, int n, unsigned f)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		a[i] = a[i] * f + (unsigned)i;
}

// multimod_lib_run launches libScale<<<blocks, threads>>> on a (device
// memory of the caller's, in the same primary context) launches times.
extern "C" int multimod_lib_run(unsigned *a, int n, int blocks, int threads, int launches)
{
	for (int l = 0; l < launches; l++) {
		libScale<<<blocks, threads>>>(a, n, 3);
		cudaError_t e = cudaGetLastError();
		if (e != cudaSuccess)
			return (int)e;
	}
	return (int)cudaDeviceSynchronize();
}
