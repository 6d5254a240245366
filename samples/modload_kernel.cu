// The kernel of modload (not a program): the Makefile compiles it twice
// into files next to modload's binary,
//   bin/modload.ptx     nvcc -ptx   -DMODLOAD_KERNEL=ptxScale    (PTX text)
//   bin/modload.cubin   nvcc -cubin -DMODLOAD_KERNEL=cubinScale  (sm_XX SASS)
extern "C" __global__ void MODLOAD_KERNEL(unsigned *a, int n, unsigned f)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		a[i] = a[i] * f + (unsigned)i;
}
