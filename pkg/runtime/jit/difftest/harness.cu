// harness: the GPU side of gpubpf's compiler differential test.
//
// It allocates one device buffer, prints "ADDR <hex> <bytes>", then serves
// lines on stdin:
//
//   RUN <module.ptx> <image> <out> <entries> <grid> <block>
//
// copies <image> into the buffer, loads the PTX with the driver's JIT,
// launches entries e_0 .. e_<entries-1> (each <grid> x <block> threads, no
// parameters; grid and block are X or XxYxZ) in order, copies the buffer to <out> and answers
// "OK <jit ms> <run ms>" or "ERR <message>". The Go test drives it and
// compares the buffer with what the Linux kernel computed.
//
// Build: nvcc -O2 -o harness harness.cu -lcuda
#include <cuda.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

static bool check(CUresult r, const char *what) {
	if (r == CUDA_SUCCESS)
		return true;
	const char *s = nullptr;
	cuGetErrorString(r, &s);
	printf("ERR %s: %s\n", what, s ? s : "?");
	fflush(stdout);
	return false;
}

static bool readFile(const char *p, std::vector<char> &out) {
	FILE *f = fopen(p, "rb");
	if (!f)
		return false;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	out.resize(n);
	bool ok = fread(out.data(), 1, n, f) == (size_t)n;
	fclose(f);
	return ok;
}

int main(int argc, char **argv) {
	if (argc < 2) {
		fprintf(stderr, "usage: harness BYTES\n");
		return 2;
	}
	size_t bytes = strtoull(argv[1], nullptr, 0);
	CUdevice dev;
	CUcontext ctx;
	CUdeviceptr buf;
	if (!check(cuInit(0), "cuInit") || !check(cuDeviceGet(&dev, 0), "cuDeviceGet") ||
	    !check(cuCtxCreate(&ctx, nullptr, 0, dev), "cuCtxCreate") || !check(cuMemAlloc(&buf, bytes), "cuMemAlloc"))
		return 1;
	printf("ADDR 0x%llx %zu\n", (unsigned long long)buf, bytes);
	fflush(stdout);
	char line[4096];
	std::vector<char> ptx, img, out(bytes);
	while (fgets(line, sizeof line, stdin)) {
		char ptxPath[1024], imgPath[1024], outPath[1024];
		char gridArg[64], blockArg[64];
		int entries, grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
		if (sscanf(line, "RUN %1023s %1023s %1023s %d %63s %63s", ptxPath, imgPath, outPath, &entries, gridArg, blockArg) != 6 ||
		    sscanf(gridArg, "%dx%dx%d", &grid[0], &grid[1], &grid[2]) < 1 ||
		    sscanf(blockArg, "%dx%dx%d", &block[0], &block[1], &block[2]) < 1) {
			printf("ERR bad command\n");
			fflush(stdout);
			continue;
		}
		if (!readFile(ptxPath, ptx) || !readFile(imgPath, img) || img.size() > bytes) {
			printf("ERR cannot read %s or %s\n", ptxPath, imgPath);
			fflush(stdout);
			continue;
		}
		ptx.push_back(0);
		if (!check(cuMemcpyHtoD(buf, img.data(), img.size()), "cuMemcpyHtoD"))
			return 1;
		char log[16384] = {0};
		CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
		void *vals[] = {log, (void *)(size_t)sizeof log};
		auto t0 = std::chrono::steady_clock::now();
		CUmodule mod;
		CUresult r = cuModuleLoadDataEx(&mod, ptx.data(), 2, opts, vals);
		if (r != CUDA_SUCCESS) {
			for (char *p = log; *p; p++)
				if (*p == '\n')
					*p = ' ';
			printf("ERR cuModuleLoadDataEx %d: %s\n", (int)r, log);
			fflush(stdout);
			continue;
		}
		auto t1 = std::chrono::steady_clock::now();
		for (int i = 0; i < entries; i++) {
			CUfunction fn;
			std::string name = "e_" + std::to_string(i);
			if (!check(cuModuleGetFunction(&fn, mod, name.c_str()), "cuModuleGetFunction"))
				return 1;
			if (!check(cuLaunchKernel(fn, grid[0], grid[1], grid[2], block[0], block[1], block[2], 0, nullptr, nullptr, nullptr), "cuLaunchKernel"))
				return 1;
		}
		if (!check(cuCtxSynchronize(), "kernel run"))
			return 1;
		auto t2 = std::chrono::steady_clock::now();
		if (!check(cuMemcpyDtoH(out.data(), buf, img.size()), "cuMemcpyDtoH"))
			return 1;
		FILE *f = fopen(outPath, "wb");
		fwrite(out.data(), 1, img.size(), f);
		fclose(f);
		cuModuleUnload(mod);
		printf("OK %.1f %.1f\n", std::chrono::duration<double, std::milli>(t1 - t0).count(),
		       std::chrono::duration<double, std::milli>(t2 - t1).count());
		fflush(stdout);
	}
	return 0;
}
