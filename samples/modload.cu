// modload: a driver-API program whose modules are not fatbins: PTX text and
// a raw cubin, each loaded from memory with cuModuleLoadData
// (scripts/gpu/faults-check.sh, case 7).
//
//   modload [LAUNCHES]      default 3
//
// Reads modload.ptx and modload.cubin from the directory of its executable
// (the Makefile builds them from modload_kernel.cu) and launches, through
// cuModuleGetFunction + cuLaunchKernel, <<<4, 256>>> LAUNCHES times each:
//   ptxScale    from the PTX module: the driver JIT-compiles it; gpubpf can
//               instrument it from that PTX
//   cubinScale  from the cubin module: SASS only, gpubpf must list it as
//               skipped
// Both compute a[i] = a[i] * 3 + i per launch; every output is checked.
#include "drv.h"

#include <cstring>
#include <string>
#include <unistd.h>
#include <vector>

static std::vector<char> slurp(const std::string &path, bool text)
{
	FILE *f = fopen(path.c_str(), "rb");
	if (!f) {
		perror(path.c_str());
		result(false, "reason=missing_file file=%s", path.c_str());
	}
	std::vector<char> b;
	char buf[65536];
	size_t k;
	while ((k = fread(buf, 1, sizeof(buf), f)) > 0)
		b.insert(b.end(), buf, buf + k);
	fclose(f);
	if (text)
		b.push_back(0);
	return b;
}

static unsigned long long run(CUmodule m, const char *name, int launches, long *bad)
{
	const int threads = 256, blocks = 4, n = threads * blocks;
	CUfunction fn;
	DRV(cuModuleGetFunction(&fn, m, name));
	CUdeviceptr d;
	DRV(cuMemAlloc(&d, n * sizeof(unsigned)));
	std::vector<unsigned> h(n), want(n);
	for (int i = 0; i < n; i++)
		h[i] = want[i] = (unsigned)i * 40503u + 1u;
	DRV(cuMemcpyHtoD(d, h.data(), n * sizeof(unsigned)));
	int nn = n;
	unsigned f = 3;
	void *args[] = {&d, &nn, &f};
	for (int l = 0; l < launches; l++) {
		DRV(cuLaunchKernel(fn, blocks, 1, 1, threads, 1, 1, 0, nullptr, args, nullptr));
		for (int i = 0; i < n; i++)
			want[i] = want[i] * 3u + (unsigned)i;
	}
	DRV(cuCtxSynchronize());
	DRV(cuMemcpyDtoH(h.data(), d, n * sizeof(unsigned)));
	DRV(cuMemFree(d));
	unsigned long long sum = 0;
	for (int i = 0; i < n; i++) {
		if (h[i] != want[i])
			(*bad)++;
		sum += h[i];
	}
	printf("%s: %d launches of <<<%d, %d>>> checked\n", name, launches, blocks, threads);
	return sum;
}

int main(int argc, char **argv)
{
	g_sample_name = "modload";
	(void)print_device; // a driver-API program: no cudart here
	usage_if_help(argc, argv, "[LAUNCHES]  (default 3)");
	int launches = (int)arg_long(argc, argv, 1, 3, 1, 100000, "LAUNCHES");
	std::string dir = exe_dir();
	std::vector<char> ptx = slurp(dir + "/modload.ptx", true), cubin = slurp(dir + "/modload.cubin", false);
	printf("modload: launches=%d, PTX text %s, raw cubin %s\n", launches,
	       std::string(ptx.data()).find(".entry ptxScale") != std::string::npos ? "with ptxScale" : "WITHOUT ptxScale",
	       cubin.size() > 4 && !memcmp(cubin.data(), "\177ELF", 4) ? "(ELF)" : "(NOT ELF)");

	CUdevice dev;
	CUcontext ctx;
	DRV(cuInit(0));
	DRV(cuDeviceGet(&dev, 0));
	DRV(cuDevicePrimaryCtxRetain(&ctx, dev));
	DRV(cuCtxSetCurrent(ctx));
	CUmodule mp, mc;
	DRV(cuModuleLoadData(&mp, ptx.data()));
	DRV(cuModuleLoadData(&mc, cubin.data()));
	long bad = 0;
	unsigned long long sp = run(mp, "ptxScale", launches, &bad);
	unsigned long long sc = run(mc, "cubinScale", launches, &bad);
	DRV(cuModuleUnload(mp));
	DRV(cuModuleUnload(mc));
	DRV(cuDevicePrimaryCtxRelease(dev));
	if (bad)
		result(false, "reason=wrong_result wrong=%ld", bad);
	result(true, "launches=%d ptx_sum=%llu cubin_sum=%llu", launches, sp, sc);
}
