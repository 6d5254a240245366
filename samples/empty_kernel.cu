// empty_kernel: launch-rate micro benchmark (the agent's overhead goal).
//
//   empty_kernel [LAUNCHES [MODE]]   defaults: 10000 async
//
// Kernel: __global__ void emptyKernel()   mangled _Z11emptyKernelv
// MODE async: queue LAUNCHES launches of <<<1,1>>> on the default stream,
//             then one cudaDeviceSynchronize.
// MODE sync:  cudaDeviceSynchronize after every launch.
// Prints host microseconds per launch for the launch loop alone (CPU cost of
// cudaLaunchKernel) and launches/s including the final synchronisation.
#include "common.h"

#include <cstring>

__global__ void emptyKernel() {}

int main(int argc, char **argv)
{
	g_sample_name = "empty_kernel";
	usage_if_help(argc, argv, "[LAUNCHES [async|sync]]  (defaults 10000 async)");
	int launches = (int)arg_long(argc, argv, 1, 10000, 1, 1000000000, "LAUNCHES");
	const char *mode = argc > 2 ? argv[2] : "async";
	bool sync = strcmp(mode, "sync") == 0;
	if (!sync && strcmp(mode, "async") != 0) {
		fprintf(stderr, "empty_kernel: MODE must be async or sync, not '%s'\n", mode);
		return 2;
	}
	print_device();
	printf("empty_kernel: launches=%d mode=%s\n", launches, mode);

	for (int k = 0; k < 100; k++) // warm-up (module load, queue setup)
		emptyKernel<<<1, 1>>>();
	CHECK_LAUNCH();
	CHECK(cudaDeviceSynchronize());

	double t0 = now_ns();
	if (sync) {
		for (int k = 0; k < launches; k++) {
			emptyKernel<<<1, 1>>>();
			CHECK(cudaDeviceSynchronize());
		}
	} else {
		for (int k = 0; k < launches; k++)
			emptyKernel<<<1, 1>>>();
	}
	double t1 = now_ns();
	CHECK_LAUNCH();
	CHECK(cudaDeviceSynchronize());
	double t2 = now_ns();
	double us_per = (t1 - t0) / 1e3 / launches;
	double per_s = launches / ((t2 - t0) / 1e9);
	printf("launch loop: %.1f us for %d launches = %.3f us/launch; with the final sync %.1f us = %.0f launches/s\n",
	       (t1 - t0) / 1e3, launches, us_per, (t2 - t0) / 1e3, per_s);
	result(true, "launches=%d mode=%s us_per_launch=%.3f launches_per_s=%.0f", launches, mode, us_per, per_s);
}
