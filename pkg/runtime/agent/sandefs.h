/* The few Compute Sanitizer API declarations san.c uses (the library is
 * dlopen'ed at run time; no NVIDIA header is needed to build the agent).
 * Layouts from sanitizer_callbacks.h / sanitizer_patching.h; the GPU check
 * (scripts/gpu/sanitizer-check.sh) compiles sandefs_check.c against the
 * toolkit's own headers to prove them. */
#ifndef GPUBPF_SANDEFS_H
#define GPUBPF_SANDEFS_H
#include <stdint.h>
#include "cudefs.h"

typedef int SanitizerResult; /* 0: SANITIZER_SUCCESS */
typedef struct Sanitizer_Subscriber_st *Sanitizer_SubscriberHandle;
typedef struct Sanitizer_Stream_st *Sanitizer_StreamHandle;
typedef struct Sanitizer_Launch_st *Sanitizer_LaunchHandle;
typedef void (*Sanitizer_CallbackFunc)(void *userdata, int domain, uint32_t cbid, const void *cbdata);

#define SANITIZER_CB_DOMAIN_LAUNCH 5
#define SANITIZER_CBID_LAUNCH_BEGIN 1
#define SANITIZER_INSTRUCTION_BLOCK_ENTER 1
#define SANITIZER_INSTRUCTION_BLOCK_EXIT 2

/* Sanitizer_LaunchData up to the fields read here (later fields vary). */
typedef struct {
	CUcontext context;
	CUstream stream;
	Sanitizer_StreamHandle hStream;
	CUmodule module;
	CUfunction function;
	const char *functionName;
	uint32_t gridDim_x, gridDim_y, gridDim_z;
	uint32_t blockDim_x, blockDim_y, blockDim_z;
} san_launch_data;
_Static_assert(offsetof(san_launch_data, module) == 24 && offsetof(san_launch_data, functionName) == 40 &&
		       offsetof(san_launch_data, gridDim_x) == 48 && offsetof(san_launch_data, blockDim_z) == 68,
	       "Sanitizer_LaunchData prefix");
#endif
