/* A program that launches through the driver the way Python (ctypes) or a
 * JIT does: libcuda opened with dlopen, the launch function found by a name
 * built at run time, so no file of the program imports or names it. The
 * kernel lookup from outside cudart is what tells gpuevent_snoop to probe
 * the driver's launch functions in it; the program gives it 1 s (a loaded
 * CI machine may take a while to attach). */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "fakecuda.h"

typedef CUresult (*getfn_t)(CUfunction *, CUmodule, const char *);
typedef CUresult (*launch_t)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
			     void **, void **);

int main(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW);
	if (!h)
		return 2;
	char name[] = "lenreKhcnuaLuc";
	size_t n = strlen(name);
	for (size_t i = 0; i < n / 2; i++) {
		char c = name[i];
		name[i] = name[n - 1 - i];
		name[n - 1 - i] = c;
	}
	getfn_t getfn = (getfn_t)dlsym(h, "cuModuleGetFunction");
	launch_t launch = (launch_t)dlsym(h, name);
	if (!getfn || !launch)
		return 3;
	CUfunction f = 0;
	getfn(&f, (CUmodule)0x30, "_Z7jitgemmv");
	usleep(1000 * 1000);
	launch(f, 8, 1, 1, 128, 1, 1, 0, (CUstream)0x77, 0, 0);
	printf("drvlookup done\n");
	fflush(stdout);
	usleep(200 * 1000);
	return 0;
}
