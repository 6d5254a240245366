// fork_exec: a CUDA program that forks and execs while a tool may be
// attached to it (scripts/gpu/faults-check.sh).
//
//   fork_exec fork DIR [STEPS]       default STEPS 20
//       CUDA first (one warm-up launch of forkParent), creates DIR/ready,
//       waits for DIR/go.1; then forks two children: one that does CPU work
//       only and _exits 0 (CUDA cannot be used in a child forked after the
//       parent initialised it), and one that execs "fork_exec child STEPS"
//       (a fresh CUDA program that prints "CHILD ok ..."). Meanwhile the
//       parent launches forkParent STEPS times; it waits for both children
//       (each must exit 0) and launches forkParent STEPS times more.
//   fork_exec exec DIR [STEPS]
//       CUDA first (warm-up launch of execBefore), creates DIR/ready, waits
//       for DIR/go.1, launches execBefore STEPS times, creates DIR/done.1,
//       waits for DIR/go.2 and execs "fork_exec child STEPS DIR" in the same
//       process: the new image does a warm-up launch of forkChild, creates
//       DIR/ready.child, waits for DIR/go.child, launches forkChild STEPS
//       times and prints the RESULT line.
//   fork_exec child STEPS [DIR]      the exec'd program (see above)
// DIR "-" runs without gates (no files): the untraced reference run.
//
// Every kernel runs THREADS=256 x BLOCKS=4 threads, one element each; every
// launch's output is checked. Output has nothing timing-dependent; the RESULT
// line is "RESULT fork_exec ok mode=M steps=N checksum=C".
//
// Kernels (extern "C"): forkParent, execBefore, forkChild, each
// (unsigned *out, int n, unsigned salt).
#include "common.h"
#include "gates.h"

#include <cstring>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

static const int kThreads = 256, kBlocks = 4, kN = kThreads * kBlocks;

#define FILL(name)                                                                                                     \
	extern "C" __global__ void name(unsigned *out, int n, unsigned salt)                                          \
	{                                                                                                              \
		int i = blockIdx.x * blockDim.x + threadIdx.x;                                                         \
		if (i < n)                                                                                             \
			out[i] = (unsigned)i * 2246822519u + salt;                                                     \
	}
FILL(forkParent)
FILL(execBefore)
FILL(forkChild)

// launches runs kernel k STEPS times (salt = base + step), checks the last
// output and returns its sum.
static unsigned long long launches(void (*k)(unsigned *, int, unsigned), unsigned *d, long steps, unsigned base)
{
	static unsigned h[kN];
	for (long s = 0; s < steps; s++) {
		k<<<kBlocks, kThreads>>>(d, kN, base + (unsigned)s);
		CHECK_LAUNCH();
	}
	CHECK(cudaDeviceSynchronize());
	CHECK(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
	unsigned last = base + (unsigned)(steps - 1);
	unsigned long long sum = 0;
	long bad = 0;
	for (int i = 0; i < kN; i++) {
		if (h[i] != (unsigned)i * 2246822519u + last)
			bad++;
		sum += h[i];
	}
	if (bad)
		result(false, "reason=wrong_result wrong=%ld", bad);
	return sum;
}

static unsigned *setup(void (*warm)(unsigned *, int, unsigned))
{
	unsigned *d;
	CHECK(cudaMalloc(&d, kN * sizeof(unsigned)));
	launches(warm, d, 1, 7); // module loaded, kernel known to the agent
	return d;
}

static void exec_child(const char *self, long steps, const char *dir)
{
	std::string s = std::to_string(steps);
	fflush(stdout);
	if (dir)
		execl(self, "fork_exec", "child", s.c_str(), dir, (char *)nullptr);
	else
		execl(self, "fork_exec", "child", s.c_str(), (char *)nullptr);
	perror("exec");
	_exit(127);
}

int main(int argc, char **argv)
{
	g_sample_name = "fork_exec";
	usage_if_help(argc, argv, "fork DIR [STEPS] | exec DIR [STEPS] | child STEPS [DIR]");
	if (argc < 3) {
		fprintf(stderr, "usage: fork_exec fork DIR [STEPS] | exec DIR [STEPS] | child STEPS [DIR]\n");
		return 2;
	}
	std::string mode = argv[1];
	char self[4096];
	ssize_t sl = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (sl <= 0)
		result(false, "reason=no_self_exe");
	self[sl] = 0;

	if (mode == "child") {
		long steps = arg_long(argc, argv, 2, 20, 1, 1000000, "STEPS");
		const char *dir = argc > 3 ? argv[3] : nullptr;
		no_gates = dir && !strcmp(dir, "-");
		unsigned *d = setup(forkChild);
		if (dir) {
			touch(std::string(dir) + "/ready.child");
			wait_for(std::string(dir) + "/go.child");
		}
		unsigned long long sum = launches(forkChild, d, steps, 3000);
		CHECK(cudaFree(d));
		if (!dir) { // forked and exec'd by "fork": the parent prints RESULT
			printf("CHILD ok steps=%ld checksum=%llu\n", steps, sum);
			fflush(stdout);
			return 0;
		}
		result(true, "mode=exec steps=%ld checksum=%llu", steps, sum);
	}

	long steps = arg_long(argc, argv, 3, 20, 1, 1000000, "STEPS");
	print_device();
	std::string dir = argv[2];
	no_gates = dir == "-";
	if (mode == "fork") {
		unsigned *d = setup(forkParent);
		printf("READY\n");
		fflush(stdout);
		touch(dir + "/ready");
		wait_for(dir + "/go.1");
		pid_t cpu = fork();
		if (cpu < 0)
			result(false, "reason=fork_failed");
		if (cpu == 0) { // no CUDA here: a child of an initialised parent cannot use it
			volatile unsigned long long x = 0;
			for (unsigned long long i = 0; i < 50000000ull; i++)
				x += i ^ (x >> 3);
			_exit(0);
		}
		pid_t ex = fork();
		if (ex < 0)
			result(false, "reason=fork_failed");
		if (ex == 0)
			exec_child(self, steps, nullptr);
		unsigned long long s1 = launches(forkParent, d, steps, 1000);
		int st1 = 0, st2 = 0;
		if (waitpid(cpu, &st1, 0) != cpu || waitpid(ex, &st2, 0) != ex)
			result(false, "reason=waitpid_failed");
		if (!WIFEXITED(st1) || WEXITSTATUS(st1) != 0 || !WIFEXITED(st2) || WEXITSTATUS(st2) != 0)
			result(false, "reason=child_failed cpu_status=%d exec_status=%d", st1, st2);
		unsigned long long s2 = launches(forkParent, d, steps, 2000);
		CHECK(cudaFree(d));
		printf("PARENT ok children=2\n");
		result(true, "mode=fork steps=%ld checksum=%llu", steps, s1 + s2);
	}
	if (mode == "exec") {
		unsigned *d = setup(execBefore);
		printf("READY\n");
		fflush(stdout);
		touch(dir + "/ready");
		wait_for(dir + "/go.1");
		unsigned long long s = launches(execBefore, d, steps, 1000);
		printf("BEFORE ok steps=%ld checksum=%llu\n", steps, s);
		fflush(stdout);
		touch(dir + "/done.1");
		wait_for(dir + "/go.2");
		exec_child(self, steps, dir.c_str());
	}
	fprintf(stderr, "fork_exec: unknown mode '%s'\n", mode.c_str());
	return 2;
}
