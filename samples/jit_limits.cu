// jit_limits: kernels whose instrumented copies the driver cannot take,
// while the originals run fine (scripts/gpu/faults-check.sh, case 4).
//
//   jit_limits [LAUNCHES]      default 3
//
//   regHeavy(const unsigned *in, unsigned *out, int n)     extern "C"
//       keeps 96 values live. The Makefile builds this sample with
//       -maxrregcount=64, so its SASS fits 64 registers (it spills) and
//       launches with 1024-thread blocks; its PTX carries no register limit,
//       so a copy JIT-compiled from the PTX takes as many registers as it
//       likes and a 1024-thread launch of it needs more than the 65536 an SM
//       has: the driver refuses the launch (CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,
//       701). Launched as <<<4, 1024>>>.
//   bigParam(struct big p, unsigned *out)                  extern "C"
//       32752 bytes of parameters plus a pointer: 32760 of the 32764 bytes a
//       kernel may take (CUDA 12.1+). An instrumented copy that adds hidden
//       launch parameters (16 bytes) is over the limit: the driver's JIT
//       rejects it ("uses too much parameter space"). Launched as <<<1, 256>>>.
//       Built only with CUDA 12.1 or newer (older toolkits limit parameters
//       to 4 KiB); the RESULT line says bigparam=0 then.
//
// Every output is checked on the host; nothing timing-dependent is printed.
#include "common.h"

#include <vector>

#define NV 96
// Unrolled on the GPU (the values stay in registers), plain loops on the host.
#ifdef __CUDA_ARCH__
#define UNROLL _Pragma("unroll")
#else
#define UNROLL
#endif

__host__ __device__ static inline unsigned heavy(const unsigned *in, int n, int i)
{
	unsigned acc[NV];
UNROLL
	for (int k = 0; k < NV; k++)
		acc[k] = in[(i + k * 37) % n] + (unsigned)k;
UNROLL
	for (int r = 0; r < 6; r++) {
UNROLL
		for (int k = 0; k < NV; k++)
			acc[k] = acc[k] * 2654435761u + (acc[(k + r + 1) % NV] >> 3);
	}
	unsigned s = 0;
UNROLL
	for (int k = 0; k < NV; k++)
		s ^= acc[k] * (unsigned)(k + 1);
	return s;
}

extern "C" __global__ void regHeavy(const unsigned *in, unsigned *out, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		out[i] = heavy(in, n, i);
}

#if CUDART_VERSION >= 12010
#define BIG_WORDS 8188 // 32752 bytes
struct big {
	unsigned w[BIG_WORDS];
};
extern "C" __global__ void bigParam(struct big p, unsigned *out)
{
	unsigned s = 0;
	for (int k = threadIdx.x; k < BIG_WORDS; k += blockDim.x)
		s += p.w[k] * (unsigned)(k + 1);
	out[threadIdx.x] = s;
}
#endif

int main(int argc, char **argv)
{
	g_sample_name = "jit_limits";
	usage_if_help(argc, argv, "[LAUNCHES]  (default 3)");
	int launches = (int)arg_long(argc, argv, 1, 3, 1, 100000, "LAUNCHES");
	const int threads = 1024, blocks = 4, n = threads * blocks;
	print_device();
	printf("jit_limits: launches=%d regHeavy<<<%d, %d>>>\n", launches, blocks, threads);

	std::vector<unsigned> hin(n), hout(n);
	for (int i = 0; i < n; i++)
		hin[i] = (unsigned)i * 7919u + 13u;
	unsigned *din, *dout;
	CHECK(cudaMalloc(&din, n * sizeof(unsigned)));
	CHECK(cudaMalloc(&dout, n * sizeof(unsigned)));
	CHECK(cudaMemcpy(din, hin.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice));
	unsigned long long sum = 0;
	long bad = 0;
	for (int l = 0; l < launches; l++) {
		CHECK(cudaMemset(dout, 0, n * sizeof(unsigned)));
		regHeavy<<<blocks, threads>>>(din, dout, n);
		CHECK_LAUNCH();
		CHECK(cudaDeviceSynchronize());
		CHECK(cudaMemcpy(hout.data(), dout, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
		for (int i = 0; i < n; i++) {
			if (hout[i] != heavy(hin.data(), n, i))
				bad++;
			sum += hout[i];
		}
	}
	printf("regHeavy: %d launches checked, %ld wrong\n", launches, bad);
	if (bad)
		result(false, "reason=wrong_regheavy wrong=%ld", bad);

	int bigparam = 0;
	unsigned long long bsum = 0;
#if CUDART_VERSION >= 12010
	bigparam = 1;
	{
		static big p;
		for (int k = 0; k < BIG_WORDS; k++)
			p.w[k] = (unsigned)k * 31u + 5u;
		std::vector<unsigned> want(256), got(256);
		for (int t = 0; t < 256; t++) {
			unsigned s = 0;
			for (int k = t; k < BIG_WORDS; k += 256)
				s += p.w[k] * (unsigned)(k + 1);
			want[t] = s;
		}
		long bbad = 0;
		for (int l = 0; l < launches; l++) {
			CHECK(cudaMemset(dout, 0, 256 * sizeof(unsigned)));
			bigParam<<<1, 256>>>(p, dout);
			CHECK_LAUNCH();
			CHECK(cudaDeviceSynchronize());
			CHECK(cudaMemcpy(got.data(), dout, 256 * sizeof(unsigned), cudaMemcpyDeviceToHost));
			for (int t = 0; t < 256; t++) {
				if (got[t] != want[t])
					bbad++;
				bsum += got[t];
			}
		}
		printf("bigParam: %zu bytes of parameters, %d launches checked, %ld wrong\n", sizeof(big) + sizeof(void *),
		       launches, bbad);
		if (bbad)
			result(false, "reason=wrong_bigparam wrong=%ld", bbad);
	}
#endif
	CHECK(cudaFree(din));
	CHECK(cudaFree(dout));
	result(true, "launches=%d regheavy_sum=%llu bigparam=%d bigparam_sum=%llu", launches, sum, bigparam, bsum);
}
