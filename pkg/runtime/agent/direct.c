/* Direct mode: the agent library run as a program of its own, the host
 * process of `gpubpf run --direct`. There is no application: the tool
 * starts this library (it is executable, the way glibc's libc.so.6 is),
 * which loads the driver itself and serves one tool session; the tool
 * places its maps, loads its programs as kernels and launches them with op
 * launch. One artifact for both roles: preloaded into an application, none
 * of this runs. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "agent.h"

/* The kernel starts an ELF with a program interpreter through it; the
 * linker makes PT_INTERP of this section even in a shared object. */
#ifndef AGENT_INTERP
#if defined(__x86_64__)
#define AGENT_INTERP "/lib64/ld-linux-x86-64.so.2"
#elif defined(__aarch64__)
#define AGENT_INTERP "/lib/ld-linux-aarch64.so.1"
#else
#error "set AGENT_INTERP to this platform's dynamic loader (readelf -l /bin/sh names it)"
#endif
#endif
__attribute__((used, section(".interp"))) static const char agent_interp[] = AGENT_INTERP;

int g_direct;
char g_direct_err[512];

/* How long the host waits for its tool to connect: the tool connects at
 * once, so this only ends a host whose tool died before it could. */
#define DIRECT_WAIT_MS 10000L

static const char *cu_name(CUresult r)
{
	switch (r) {
	case 3:
		return "CUDA_ERROR_NOT_INITIALIZED";
	case 35:
		return "CUDA_ERROR_INSUFFICIENT_DRIVER: the driver is older than this libcuda";
	case 100:
		return "CUDA_ERROR_NO_DEVICE: no CUDA-capable GPU is visible (check CUDA_VISIBLE_DEVICES and nvidia-smi)";
	case 101:
		return "CUDA_ERROR_INVALID_DEVICE";
	case 304:
		return "CUDA_ERROR_OPERATING_SYSTEM: the kernel driver could not be reached (is the nvidia module loaded?)";
	case 999:
		return "CUDA_ERROR_UNKNOWN";
	}
	return "see cuda.h";
}

/* Loads libcuda and initialises the driver; on failure g_direct_err says
 * why, in the user's terms (the tool prints it as it is). */
static void direct_cuda(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
	if (!h) {
		const char *e = dlerror();
		snprintf(g_direct_err, sizeof(g_direct_err),
			 "the host process cannot load the CUDA driver library libcuda.so.1 (%s): --direct runs on a "
			 "machine with an NVIDIA GPU and its driver installed",
			 e ? e : "not found");
		return;
	}
	CUresult (*init)(unsigned) = (CUresult(*)(unsigned))dlsym(h, "cuInit");
	if (!init) {
		snprintf(g_direct_err, sizeof(g_direct_err),
			 "libcuda.so.1 has no cuInit: it is not an NVIDIA driver library; check which libcuda.so.1 "
			 "the loader finds (ldconfig -p | grep libcuda)");
		return;
	}
	CUresult r = init(0);
	if (r != CUDA_SUCCESS) {
		snprintf(g_direct_err, sizeof(g_direct_err), "cuInit failed with CUresult %d (%s)", r, cu_name(r));
		return;
	}
	if (drv_init() != 0)
		snprintf(g_direct_err, sizeof(g_direct_err),
			 "the CUDA driver lacks entry points the agent needs (driver too old?); update the NVIDIA driver");
}

/* The entry point when the library is executed. The kernel enters it with
 * the stack as _start sees it (16-byte aligned, no return address): the
 * attribute realigns it for the calls below. It must never return: there
 * is no caller to return to. */
__attribute__((force_align_arg_pointer, noreturn, used)) void gpubpf_agent_main(void)
{
	const char *mode = getenv("GPUBPF_AGENT_DIRECT");
	if (!mode || strcmp(mode, "1") != 0) {
		fprintf(stderr, "libgpubpf-agent.so %s (protocol %u): the gpubpf in-process agent, not a program to run by "
				"hand.\n  Preload it into a CUDA program: LD_PRELOAD=/path/to/libgpubpf-agent.so CMD\n  or let a "
				"gpubpf tool start it: gpubpf run PROG.bpf.o -- CMD, gpubpf run --direct PROG.bpf.o\n",
			AGENT_VERSION, PROTO_VERSION);
		_exit(2);
	}
	/* The tool that started us owns us: gone, so are we (a kernel still
	 * running goes with the process's context). */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	g_direct = 1;
	direct_cuda();
	agent_setup();
	long wait = DIRECT_WAIT_MS;
	const char *w = getenv("GPUBPF_AGENT_DIRECT_WAIT_MS");
	if (w && atol(w) > 0)
		wait = atol(w);
	exit(server_direct_serve(wait));
}
