// ptxab: what a change to an instrumented kernel's PTX costs on the GPU,
// without the tool around it. Loads each PTX file as its own module through
// the driver's JIT (as the agent loads a clone), runs its vectorAdd
// (samples/vec_add.cu's kernel, as the fixture's PTX names it) in turns with
// the others, and prints each variant's CUDA-event kernel time; run it under
// the CUPTI tracer (scripts/gpu/cupti) for each kernel's own GPU duration:
// every variant's kernel gets its own name (vectorAdd_<variant>).
//
//   ptxab ELEMENTS ITERATIONS THREADS BLOCKS REPS NAME=FILE.ptx...
//
// The variants: `gpubpf ptx -P PROG --into samples/bin/vec_add OBJ` (the
// clone a run loads), and the original module (cuobjdump -ptx).
//
// Probes compiled with placeholder map addresses (gpubpf ptx, the JIT's
// tests) find memory there: 1 GiB mapped at 0x7f0000000000 and 256 MiB at
// 0x7e0000000000 (the printk ring's placeholder). PTXAB_HOST_MB=N makes
// the first N MiB at 0x7f0000000000 pinned host memory instead of device
// memory (maps of types 1512/1513 live there).
// A diagnostic for choosing code shapes (docs/gpu-results.md), not a check.
#include <cuda.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

static void check(CUresult r, const char *what)
{
	if (r != CUDA_SUCCESS) {
		const char *s = "?";
		cuGetErrorString(r, &s);
		fprintf(stderr, "ptxab: %s: %s\n", what, s);
		exit(1);
	}
}

// at maps SIZE bytes of device memory (of pinned host memory if host) at
// exactly ADDR.
static void at(CUdeviceptr addr, size_t size, CUdevice dev, bool host = false)
{
	CUdeviceptr got = 0;
	check(cuMemAddressReserve(&got, size, 0, addr, 0), "cuMemAddressReserve");
	if (got != addr) {
		fprintf(stderr, "ptxab: wanted memory at %#llx, the driver gave %#llx\n", (unsigned long long)addr,
			(unsigned long long)got);
		exit(1);
	}
	CUmemAllocationProp p = {};
	p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.location.type = host ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE;
	p.location.id = host ? 0 : dev;
	CUmemGenericAllocationHandle h;
	check(cuMemCreate(&h, size, &p, 0), host ? "cuMemCreate (host)" : "cuMemCreate");
	check(cuMemMap(addr, size, 0, h, 0), "cuMemMap");
	CUmemAccessDesc a = {};
	a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	a.location.id = dev;
	a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	check(cuMemSetAccess(addr, size, &a, 1), "cuMemSetAccess");
	check(cuMemsetD8(addr, 0, size), "cuMemsetD8");
}

struct variant {
	std::string name;
	CUmodule mod;
	CUfunction fn;
	std::vector<float> ms;
};

int main(int argc, char **argv)
{
	if (argc < 7) {
		fprintf(stderr, "usage: ptxab ELEMENTS ITERATIONS THREADS BLOCKS REPS NAME=FILE.ptx...\n");
		return 2;
	}
	int n = atoi(argv[1]), iters = atoi(argv[2]), threads = atoi(argv[3]), blocks = atoi(argv[4]),
	    reps = atoi(argv[5]);
	const char *kernel = "_Z9vectorAddPKfS0_Pfi";
	check(cuInit(0), "cuInit");
	CUdevice dev;
	check(cuDeviceGet(&dev, 0), "cuDeviceGet");
	CUcontext ctx;
	check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
	check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
	size_t hostBytes = (size_t)atoi(getenv("PTXAB_HOST_MB") ? getenv("PTXAB_HOST_MB") : "0") << 20;
	if (hostBytes)
		at(0x7f0000000000ull, hostBytes, dev, true);
	at(0x7f0000000000ull + hostBytes, (1ull << 30) - hostBytes, dev);
	at(0x7e0000000000ull, 1ull << 28, dev);

	std::vector<variant> vs;
	for (int i = 6; i < argc; i++) {
		std::string arg = argv[i];
		size_t eq = arg.find('=');
		if (eq == std::string::npos) {
			fprintf(stderr, "ptxab: want NAME=FILE.ptx, got %s\n", argv[i]);
			return 2;
		}
		variant v;
		v.name = arg.substr(0, eq);
		std::ifstream f(arg.substr(eq + 1));
		std::stringstream ss;
		ss << f.rdbuf();
		std::string src = ss.str(), from = kernel, to = std::string(kernel) + "_" + v.name;
		if (src.find(from) == std::string::npos) {
			fprintf(stderr, "ptxab: %s has no %s\n", arg.c_str(), kernel);
			return 1;
		}
		for (size_t p = 0; (p = src.find(from, p)) != std::string::npos; p += to.size())
			src.replace(p, from.size(), to);
		check(cuModuleLoadData(&v.mod, src.c_str()), arg.c_str());
		check(cuModuleGetFunction(&v.fn, v.mod, to.c_str()), "cuModuleGetFunction");
		CUdeviceptr g;
		size_t sz;
		if (cuModuleGetGlobal(&g, &sz, v.mod, "d_N") == CUDA_SUCCESS)
			check(cuMemcpyHtoD(g, &n, sizeof n), "d_N");
		float scale = 1;
		if (cuModuleGetGlobal(&g, &sz, v.mod, "d_scale") == CUDA_SUCCESS)
			check(cuMemcpyHtoD(g, &scale, sizeof scale), "d_scale");
		int regs = 0, local = 0;
		cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, v.fn);
		cuFuncGetAttribute(&local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, v.fn);
		fprintf(stderr, "ptxab: %s: %d registers, %d bytes local\n", v.name.c_str(), regs, local);
		vs.push_back(v);
	}
	CUdeviceptr a, b, c;
	check(cuMemAlloc(&a, n * sizeof(float)), "cuMemAlloc");
	check(cuMemAlloc(&b, n * sizeof(float)), "cuMemAlloc");
	check(cuMemAlloc(&c, n * sizeof(float)), "cuMemAlloc");
	std::vector<float> ha(n, 1.0f), hb(n, 2.0f);
	check(cuMemcpyHtoD(a, ha.data(), n * sizeof(float)), "A");
	check(cuMemcpyHtoD(b, hb.data(), n * sizeof(float)), "B");
	CUevent e0, e1;
	check(cuEventCreate(&e0, 0), "cuEventCreate");
	check(cuEventCreate(&e1, 0), "cuEventCreate");
	// Past the kernel's four: zeros for the hidden launch words a clone of
	// a program that reads them takes (the driver reads as many as the
	// kernel has).
	unsigned long long zero = 0;
	void *args[] = {&a, &b, &c, &n, &zero, &zero, &zero, &zero};
	for (int r = 0; r < reps; r++) {
		for (size_t k = 0; k < vs.size(); k++) {
			variant &v = vs[(k + r) % vs.size()]; // a different order each round
			for (int i = 0; i < iters; i++) {
				check(cuEventRecord(e0, 0), "cuEventRecord");
				check(cuLaunchKernel(v.fn, blocks, 1, 1, threads, 1, 1, 0, 0, args, 0), v.name.c_str());
				check(cuEventRecord(e1, 0), "cuEventRecord");
				check(cuEventSynchronize(e1), "cuEventSynchronize");
				float ms;
				check(cuEventElapsedTime(&ms, e0, e1), "cuEventElapsedTime");
				v.ms.push_back(ms);
			}
		}
	}
	std::vector<float> out(n);
	check(cuMemcpyDtoH(out.data(), c, n * sizeof(float)), "C");
	for (int i = 0; i < n; i++)
		if (out[i] != 3.0f && out[i] != 6.0f) { // d_scale 1, or a kernel without it
			fprintf(stderr, "ptxab: C[%d] = %g, want 3\n", i, out[i]);
			return 1;
		}
	for (auto &v : vs) {
		std::sort(v.ms.begin(), v.ms.end());
		printf("%-12s event %.3f us (median of %zu)\n", v.name.c_str(), v.ms[v.ms.size() / 2] * 1e3, v.ms.size());
	}
	return 0;
}
