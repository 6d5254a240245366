// What the driver-API samples (-lcuda: modload, multimod) share: DRV checks
// a driver call as CHECK (common.h) does a runtime call; exe_dir is where
// they find the modules they load (built next to the executable).
#pragma once

#include <cuda.h>

#include "common.h"

#include <string>
#include <unistd.h>

#define DRV(call)                                                                                   \
	do {                                                                                        \
		CUresult r_ = (call);                                                               \
		if (r_ != CUDA_SUCCESS) {                                                           \
			const char *n_ = "?";                                                       \
			cuGetErrorName(r_, &n_);                                                    \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, n_);          \
			result(false, "reason=cuda_error call=%s error=%s", #call, n_);             \
		}                                                                                   \
	} while (0)

// exe_dir is the directory of the running executable.
static std::string exe_dir()
{
	char self[4096];
	ssize_t sl = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (sl <= 0)
		result(false, "reason=no_self_exe");
	self[sl] = 0;
	std::string dir(self);
	return dir.substr(0, dir.rfind('/'));
}
