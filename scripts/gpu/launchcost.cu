// launchcost: what each driver call the agent may add to an instrumented
// launch costs the launching thread, on the same empty-kernel launch loop
// as launch_heavy (N launches round-robin over 4 streams, one thread).
// Variants alternate over ROUNDS rounds; medians of launches/s and the
// ratio to plain launches are printed. The cu* variants launch through the
// driver alone: cudart's own kernel, and the same empty kernel loaded from
// PTX by the driver's JIT (as the agent loads a clone), with and without
// two more u64 parameters (launchlate's launch words), as a parameter list
// and as a packed buffer. Diagnostic for the agent's per-launch path
// (issues 12 and 15), not a test.
//
//   launchcost [N [ROUNDS]]
#include <cuda.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <vector>

__global__ void empty(int) {}

static double now_s()
{
	timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

enum { PLAIN, EVREC, CAPT, CTX, CLOCK2, ALL, WV64D, WV64H, WV32H, DRV, DRVPTX, DRVPTXW, DRVPTXB, NVAR };
static const char *names[NVAR] = {"plain", "+cuEventRecord", "+cuStreamIsCapturing", "+cuCtxGetCurrent",
				  "+2 clock_gettime", "+all four", "+cuStreamWriteValue64 dev", "+cuStreamWriteValue64 host",
				  "+cuStreamWriteValue32 host", "cuLaunchKernel", "cuLaunchKernel PTX", "cuLaunchKernel PTX+2w",
				  "cuLaunchKernel PTX+2w buf"};

static const char ptx[] = ".version 7.8\n.target sm_90\n.address_size 64\n"
			  ".visible .entry e(.param .u32 a)\n{\n\tret;\n}\n"
			  ".visible .entry ew(.param .u32 a, .param .u64 w0, .param .u64 w1)\n{\n\tret;\n}\n";

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 200000;
	int rounds = argc > 2 ? atoi(argv[2]) : 5;
	cudaStream_t st[4];
	CUevent ev[4];
	cudaFree(0);
	for (int i = 0; i < 4; i++) {
		cudaStreamCreateWithFlags(&st[i], cudaStreamNonBlocking);
		cuEventCreate(&ev[i], CU_EVENT_DISABLE_TIMING);
	}
	CUdeviceptr dword, hword;
	cuMemAlloc(&dword, 64);
	void *hp;
	cuMemHostAlloc(&hp, 4096, CU_MEMHOSTALLOC_DEVICEMAP);
	cuMemHostGetDevicePointer(&hword, hp, 0);
	empty<<<1, 64>>>(0);
	cudaDeviceSynchronize();
	CUfunction fcu = NULL, fptx = NULL, fw = NULL;
	CUmodule mod;
	cudaGetFuncBySymbol((cudaFunction_t *)&fcu, (const void *)empty);
	if (cuModuleLoadData(&mod, ptx) != CUDA_SUCCESS || cuModuleGetFunction(&fptx, mod, "e") != CUDA_SUCCESS ||
	    cuModuleGetFunction(&fw, mod, "ew") != CUDA_SUCCESS || !fcu) {
		fprintf(stderr, "launchcost: loading the PTX kernels failed\n");
		return 1;
	}
	std::vector<double> r[NVAR];
	volatile unsigned long long sink = 0;
	for (int round = 0; round < rounds; round++)
		for (int v = 0; v < NVAR; v++) {
			double t0 = now_s();
			for (int i = 0; i < n; i++) {
				cudaStream_t s = st[i & 3];
				if (v >= DRV) {
					unsigned long long w[2] = {(unsigned long long)i, 0};
					void *p[3] = {&i, &w[0], &w[1]};
					struct {
						int a, pad;
						unsigned long long w[2];
					} buf = {i, 0, {w[0], w[1]}};
					size_t bsz = sizeof(buf);
					void *e[5] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &bsz,
						      CU_LAUNCH_PARAM_END};
					CUfunction f = v == DRV ? fcu : v == DRVPTX ? fptx : fw;
					cuLaunchKernel(f, 1, 1, 1, 64, 1, 1, 0, (CUstream)s, v == DRVPTXB ? NULL : p,
						       v == DRVPTXB ? e : NULL);
					continue;
				}
				empty<<<1, 64, 0, s>>>(i);
				if (v == EVREC || v == ALL)
					cuEventRecord(ev[i & 3], (CUstream)s);
				if (v == CAPT || v == ALL) {
					CUstreamCaptureStatus c;
					cuStreamIsCapturing((CUstream)s, &c);
					sink += c;
				}
				if (v == CTX || v == ALL) {
					CUcontext c;
					cuCtxGetCurrent(&c);
					sink += (unsigned long long)c;
				}
				if (v == WV64D)
					cuStreamWriteValue64((CUstream)s, dword + 8 * (i & 3), i, 0);
				if (v == WV64H)
					cuStreamWriteValue64((CUstream)s, hword + 64 * (i & 3), i, 0);
				if (v == WV32H)
					cuStreamWriteValue32((CUstream)s, hword + 64 * (i & 3), i, 0);
				if (v == CLOCK2 || v == ALL) {
					timespec a, b;
					clock_gettime(CLOCK_MONOTONIC, &a);
					clock_gettime(CLOCK_MONOTONIC, &b);
					sink += a.tv_nsec + b.tv_nsec;
				}
			}
			cudaDeviceSynchronize();
			r[v].push_back(n / (now_s() - t0));
		}
	auto med = [](std::vector<double> x) {
		std::sort(x.begin(), x.end());
		return x[x.size() / 2];
	};
	double base = med(r[PLAIN]);
	for (int v = 0; v < NVAR; v++)
		printf("%-22s median %9.0f launches/s  ratio %.3f  (%+.0f ns per launch)\n", names[v], med(r[v]),
		       med(r[v]) / base, 1e9 / med(r[v]) - 1e9 / base);
	return sink == 42 ? 1 : 0;
}
