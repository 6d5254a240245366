// DRV checks a CUDA driver API call of a sample that links the driver
// (-lcuda: modload, multimod), as CHECK (common.h) does a runtime call.
#pragma once

#include <cuda.h>

#include "common.h"

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
