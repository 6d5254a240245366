// atomics: kernels whose PTX has every kind of global memory access the
// memory probe reports (and shared-memory atomics it must not), built with
// nvcc 11.8 for the instrumentation tests (atomics_cuda118.ptx):
//   nvcc -ccbin clang-14 -allow-unsupported-compiler -arch=sm_80 -O2 --ptx \
//        atomics.cu -o atomics_cuda118.ptx   (Debian's CUDA 11.8)
#include <cuda_fp16.h>

__device__ unsigned long long d_total;

// Called by two kernels: its sites belong to no one kernel.
__device__ __noinline__ void bump(unsigned int *hist, unsigned int v)
{
	atomicAdd(&hist[v & 15], 1u); // result unused: red.global.add
}

__global__ void histogram(const unsigned int *in, unsigned int *hist, int n)
{
	__shared__ unsigned int local[16];
	if (threadIdx.x < 16)
		local[threadIdx.x] = 0;
	__syncthreads();
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) {
		unsigned int v = __ldg(&in[i]); // ld.global.nc
		atomicAdd(&local[v & 15], 1u);  // shared: not reported
		bump(hist, v);
	}
	__syncthreads();
	if (threadIdx.x < 16)
		atomicAdd(&hist[16 + threadIdx.x], local[threadIdx.x]);
	if (threadIdx.x == 0)
		atomicAdd_system(&d_total, 1ULL);
}

__global__ void mixed(float *f, double *d, int *x, unsigned long long *u, __half2 *h, volatile int *flag, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n)
		return;
	float old = atomicAdd(&f[0], 1.0f);              // atom.global.add.f32
	atomicAdd(&d[0], (double)old);                    // f64
	int prev = atomicCAS(&x[0], i, i + 1);            // atom.global.cas.b32
	atomicExch(&x[1], prev);                          // atom.global.exch.b32
	atomicMax(&x[2], i);                              // red/atom max
	unsigned long long p = atomicCAS(&u[0], 0ULL, (unsigned long long)i); // cas.b64
	atomicAdd_block(&u[1], p);                        // .cta scope
	atomicAdd(&h[0], __floats2half2_rn(1.0f, 2.0f)); // f16x2
	while (flag[0] == 0 && i == 0)                    // ld.volatile.global
		flag[0] = 1;                                  // st.volatile.global
	__stcs(&f[1 + i], __ldcs(&f[1 + i]) * 2.0f);     // ld/st.global.cs
	float4 v = __ldg((const float4 *)f + 4);          // ld.global.nc.v4.f32
	((float4 *)f)[5] = v;                             // st.global.v4.f32
	// Forms nvcc emits only from libraries or newer code, by hand:
	unsigned int *ux = (unsigned int *)x, a, b;
	unsigned long long pol;
	asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(a) : "l"(ux + 3) : "memory");
	asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(ux + 4), "r"(a) : "memory");
	asm volatile("ld.relaxed.gpu.global.L2::128B.u32 %0, [%1];" : "=r"(b) : "l"(ux + 5) : "memory");
	asm volatile("ld.global.L1::no_allocate.u32 %0, [%1];" : "=r"(a) : "l"(ux + 6) : "memory");
	asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
	asm volatile("ld.global.L2::cache_hint.u32 %0, [%1], %2;" : "=r"(b) : "l"(ux + 7), "l"(pol) : "memory");
	asm volatile("ldu.global.u32 %0, [%1];" : "=r"(a) : "l"(ux + 3) : "memory");
	asm volatile("red.global.add.u32 [%0], %1;" ::"l"(ux + 9), "r"(a + b) : "memory");
	asm volatile("red.relaxed.gpu.global.add.L2::cache_hint.u64 [%0], 1, %1;" ::"l"(u + 2), "l"(pol) : "memory");
	asm volatile("prefetch.global.L2 [%0];" ::"l"(ux + 10));
	bump((unsigned int *)x + 8, i);
}
