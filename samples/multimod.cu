// multimod: one process whose kernels live in four CUDA modules, as real
// programs' do (an executable and its libraries, PyTorch with an extension,
// NVRTC, Numba and CuPy users):
//
//   exeScale   the executable's own fatbin          <<<4, 256>>>  1024 threads
//   libScale   libmultimod.so's fatbin (its cudart) <<<2, 256>>>   512 threads
//   rtScale    PTX text loaded with cuModuleLoadData
//              before the wait                      <<<3, 128>>>   384 threads
//   lateScale  PTX text loaded after the wait       <<<1, 160>>>   160 threads
//
// All four run in the device's primary context (cudart's), so a tool's map is
// one object for all of them. Each kernel is launched LAUNCHES times; then
// rtScale's module is unloaded, loaded again and rtScale launched LAUNCHES
// times more (2464 threads a round in all). Every launch is checked.
//
//   multimod [LAUNCHES] [WAITFILE]      default 10 launches of each kernel
//
// With WAITFILE, multimod loads rtScale, prints "WAITING <pid>" and waits (60 s
// at most) until WAITFILE exists before it loads lateScale and launches
// anything: a tool attached with -p in between sees every launch, and the
// last module load after its attach. Reads multimod_rt.ptx and
// multimod_late.ptx from the directory of its executable.
#include "drv.h"

#include <cstring>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

extern "C" int multimod_lib_run(unsigned *a, int n, int blocks, int threads, int launches);

__global__ void exeScale(unsigned *a, int n, unsigned f)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		a[i] = a[i] * f + (unsigned)i;
}

static std::string slurp(const std::string &path)
{
	FILE *f = fopen(path.c_str(), "rb");
	if (!f) {
		perror(path.c_str());
		result(false, "reason=missing_file file=%s", path.c_str());
	}
	std::string b;
	char buf[65536];
	size_t k;
	while ((k = fread(buf, 1, sizeof(buf), f)) > 0)
		b.append(buf, k);
	fclose(f);
	return b;
}

// One kernel's work: its own buffer, LAUNCHES launches, then a check of
// every element against the host's a = a * 3 + i.
struct work {
	const char *name;
	int blocks, threads;
	unsigned *d;
	std::vector<unsigned> want;
};

static void prepare(work &w)
{
	int n = w.blocks * w.threads;
	w.want.resize(n);
	for (int i = 0; i < n; i++)
		w.want[i] = (unsigned)i * 40503u + 1u;
	CHECK(cudaMalloc(&w.d, n * sizeof(unsigned)));
	CHECK(cudaMemcpy(w.d, w.want.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice));
}

static long check(work &w, int launches)
{
	int n = w.blocks * w.threads;
	for (int l = 0; l < launches; l++)
		for (int i = 0; i < n; i++)
			w.want[i] = w.want[i] * 3u + (unsigned)i;
	std::vector<unsigned> h(n);
	CHECK(cudaMemcpy(h.data(), w.d, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
	long bad = 0;
	for (int i = 0; i < n; i++)
		bad += h[i] != w.want[i];
	printf("%s: %d launches of <<<%d, %d>>> (%d threads each), %ld wrong\n", w.name, launches, w.blocks, w.threads,
	       n, bad);
	return bad;
}

static void run_module(CUmodule m, work &w, int launches)
{
	CUfunction fn;
	DRV(cuModuleGetFunction(&fn, m, w.name));
	int n = w.blocks * w.threads;
	unsigned f = 3;
	void *args[] = {&w.d, &n, &f};
	for (int l = 0; l < launches; l++)
		DRV(cuLaunchKernel(fn, w.blocks, 1, 1, w.threads, 1, 1, 0, nullptr, args, nullptr));
	DRV(cuCtxSynchronize());
}

int main(int argc, char **argv)
{
	g_sample_name = "multimod";
	usage_if_help(argc, argv, "[LAUNCHES] [WAITFILE]  (default 10 launches of each of 4 kernels)");
	int launches = (int)arg_long(argc, argv, 1, 10, 1, 1000000, "LAUNCHES");
	const char *waitfile = argc > 2 ? argv[2] : nullptr;
	std::string dir = exe_dir();
	std::string rt = slurp(dir + "/multimod_rt.ptx"), late = slurp(dir + "/multimod_late.ptx");

	work ws[4] = {{"exeScale", 4, 256}, {"libScale", 2, 256}, {"rtScale", 3, 128}, {"lateScale", 1, 160}};
	CHECK(cudaFree(nullptr)); // cudart's primary context, current from here on
	for (auto &w : ws)
		prepare(w);
	CUmodule mrt, mlate;
	DRV(cuModuleLoadData(&mrt, rt.c_str()));
	if (waitfile) {
		printf("WAITING %d\n", (int)getpid());
		fflush(stdout);
		struct stat st;
		int waited = 0;
		while (stat(waitfile, &st) != 0 && waited < 60000) {
			usleep(10000);
			waited += 10;
		}
		if (waited >= 60000)
			result(false, "reason=no_waitfile file=%s", waitfile);
	}
	DRV(cuModuleLoadData(&mlate, late.c_str()));

	for (int l = 0; l < launches; l++) {
		exeScale<<<ws[0].blocks, ws[0].threads>>>(ws[0].d, ws[0].blocks * ws[0].threads, 3);
		CHECK_LAUNCH();
	}
	CHECK(cudaDeviceSynchronize());
	int le = multimod_lib_run(ws[1].d, ws[1].blocks * ws[1].threads, ws[1].blocks, ws[1].threads, launches);
	if (le != 0)
		result(false, "reason=lib_error error=%d", le);
	run_module(mrt, ws[2], launches);
	run_module(mlate, ws[3], launches);
	// a module unloaded and loaded again (NVRTC caches, Triton's reloads)
	DRV(cuModuleUnload(mrt));
	DRV(cuModuleLoadData(&mrt, rt.c_str()));
	run_module(mrt, ws[2], launches);
	long bad = 0;
	for (int i = 0; i < 4; i++)
		bad += check(ws[i], i == 2 ? 2 * launches : launches);
	DRV(cuModuleUnload(mrt));
	DRV(cuModuleUnload(mlate));
	for (auto &w : ws)
		CHECK(cudaFree(w.d));
	if (bad)
		result(false, "reason=wrong_result wrong=%ld", bad);
	result(true, "launches=%d kernels=4 threads_per_round=2464 thread_runs=%lld", launches, 2464LL * launches);
}
