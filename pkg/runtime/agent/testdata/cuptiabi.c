/* Checks cuptidefs.h (the agent's copy of the part of CUPTI's ABI it uses)
 * against a CUDA toolkit's CUPTI headers: compiles only where they agree.
 *   gcc -fsyntax-only -I$CUDA/include -Ipkg/runtime/agent pkg/runtime/agent/testdata/cuptiabi.c
 * (the launch calls' parameter blocks need the CUDA 12+ headers their
 * generated_*_meta.h were made with)
 * (scripts/gpu/cupti-check.sh runs it on the GPU machine). */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cupti_activity.h>
#include <cupti_callbacks.h>
#if CUDA_VERSION >= 13000
/* CUDA 13's cuda.h dropped the CUDA 3.x types that CUPTI 13.0's
 * generated_cuda_meta.h still names (the removed _v1 calls' parameters):
 * declared here so the header compiles; nothing below uses them. */
typedef unsigned int CUdeviceptr_v1;
typedef struct CUDA_MEMCPY2D_v1_st CUDA_MEMCPY2D_v1;
typedef struct CUDA_MEMCPY3D_v1_st CUDA_MEMCPY3D_v1;
typedef struct CUDA_ARRAY_DESCRIPTOR_v1_st CUDA_ARRAY_DESCRIPTOR_v1;
typedef struct CUDA_ARRAY3D_DESCRIPTOR_v1_st CUDA_ARRAY3D_DESCRIPTOR_v1;
#endif
#include <generated_cuda_meta.h>
#include <generated_cuda_runtime_api_meta.h>
#include <cupti_driver_cbid.h>
#include <cupti_runtime_cbid.h>
#include <stddef.h>

/* CUPTI's values, kept before cuptidefs.h defines its names as macros */
enum {
	real_SUCCESS = CUPTI_SUCCESS,
	real_MAX_LIMIT = CUPTI_ERROR_MAX_LIMIT_REACHED,
	real_NOT_INIT = CUPTI_ERROR_NOT_INITIALIZED,
	real_MULTI = CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED,
	real_DRV = CUPTI_CB_DOMAIN_DRIVER_API,
	real_RT = CUPTI_CB_DOMAIN_RUNTIME_API,
	real_ENTER = CUPTI_API_ENTER,
	real_EXIT = CUPTI_API_EXIT,
	real_KERNEL = CUPTI_ACTIVITY_KIND_KERNEL,
	real_CK = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
	real_FORCED = CUPTI_ACTIVITY_FLAG_FLUSH_FORCED,
	real_EXTCORR = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
	real_DRIVER = CUPTI_ACTIVITY_KIND_DRIVER,
	real_RUNTIME = CUPTI_ACTIVITY_KIND_RUNTIME,
	real_CUSTOM2 = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2,
};

#define GPUBPF_CUDEFS_H /* cuda.h's types are the real ones here */
#define GPUBPF_REAL_CUPTI
#include "cuptidefs.h"

_Static_assert(real_SUCCESS == CUPTI_SUCCESS, "CUPTI_SUCCESS");
_Static_assert(real_MAX_LIMIT == CUPTI_ERROR_MAX_LIMIT_REACHED, "CUPTI_ERROR_MAX_LIMIT_REACHED");
_Static_assert(real_NOT_INIT == CUPTI_ERROR_NOT_INITIALIZED, "CUPTI_ERROR_NOT_INITIALIZED");
_Static_assert(real_MULTI == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, "MULTIPLE_SUBSCRIBERS");
_Static_assert(real_DRV == CUPTI_CB_DOMAIN_DRIVER_API, "CUPTI_CB_DOMAIN_DRIVER_API");
_Static_assert(real_RT == CUPTI_CB_DOMAIN_RUNTIME_API, "CUPTI_CB_DOMAIN_RUNTIME_API");
_Static_assert(real_ENTER == CUPTI_API_ENTER && real_EXIT == CUPTI_API_EXIT, "callback sites");
_Static_assert(real_KERNEL == CUPTI_ACTIVITY_KIND_KERNEL && real_CK == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, "kinds");
_Static_assert(real_FORCED == CUPTI_ACTIVITY_FLAG_FLUSH_FORCED, "CUPTI_ACTIVITY_FLAG_FLUSH_FORCED");
_Static_assert(real_EXTCORR == CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION && real_CUSTOM2 == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2,
	       "external correlation kinds");
_Static_assert(real_DRIVER == CUPTI_ACTIVITY_KIND_DRIVER, "CUPTI_ACTIVITY_KIND_DRIVER");
_Static_assert(real_RUNTIME == CUPTI_ACTIVITY_KIND_RUNTIME, "CUPTI_ACTIVITY_KIND_RUNTIME");
/* the ids the filters turn off: a later CUPTI only adds */
_Static_assert(CBID_DRIVER_SIZE <= CUPTI_DRIVER_TRACE_CBID_SIZE && CBID_RUNTIME_SIZE <= CUPTI_RUNTIME_TRACE_CBID_SIZE,
	       "callback id ranges");
_Static_assert(offsetof(cupti_api_record, cbid) == offsetof(CUpti_ActivityAPI, cbid) &&
		       offsetof(cupti_api_record, start) == offsetof(CUpti_ActivityAPI, start) &&
		       offsetof(cupti_api_record, correlationId) == offsetof(CUpti_ActivityAPI, correlationId) &&
		       sizeof(cupti_api_record) == sizeof(CUpti_ActivityAPI),
	       "driver API record");
_Static_assert(offsetof(cupti_ext_corr, externalKind) == offsetof(CUpti_ActivityExternalCorrelation, externalKind) &&
		       offsetof(cupti_ext_corr, externalId) == offsetof(CUpti_ActivityExternalCorrelation, externalId) &&
		       offsetof(cupti_ext_corr, correlationId) ==
			       offsetof(CUpti_ActivityExternalCorrelation, correlationId) &&
		       sizeof(cupti_ext_corr) == sizeof(CUpti_ActivityExternalCorrelation),
	       "external correlation record");

#define OFF(f) _Static_assert(offsetof(cupti_kernel_prefix, f) == offsetof(CUpti_ActivityKernel10, f), "kernel record " #f)
OFF(start);
OFF(end);
OFF(deviceId);
OFF(correlationId);
OFF(gridId);
OFF(name);
_Static_assert(CUPTI_KERNEL_GRAPH_ID_OFF == offsetof(CUpti_ActivityKernel10, graphId), "kernel record graphId");
_Static_assert(CUPTI_KERNEL_GRAPH_ID_OFF == offsetof(CUpti_ActivityKernel5, graphId), "kernel record 5 graphId");
_Static_assert(offsetof(CUpti_CallbackData, correlationId) == 64 && offsetof(CUpti_CallbackData, context) == 40 &&
		       offsetof(CUpti_CallbackData, functionParams) == 16,
	       "callback data");

#define D(n) _Static_assert(CBID_##n == CUPTI_DRIVER_TRACE_CBID_##n, #n)
D(cuLaunch);
D(cuLaunchGrid);
D(cuLaunchGridAsync);
D(cuLaunchKernel);
D(cuLaunchKernel_ptsz);
D(cuLaunchCooperativeKernel);
D(cuLaunchCooperativeKernel_ptsz);
D(cuLaunchCooperativeKernelMultiDevice);
D(cuGraphLaunch);
D(cuGraphLaunch_ptsz);
D(cuLaunchKernelEx);
D(cuLaunchKernelEx_ptsz);
#define R(n) _Static_assert(CBID_##n == CUPTI_RUNTIME_TRACE_CBID_##n, #n)
R(cudaLaunch_v3020);
R(cudaLaunchKernel_v7000);
R(cudaLaunch_ptsz_v7000);
R(cudaLaunchKernel_ptsz_v7000);
R(cudaLaunchCooperativeKernel_v9000);
R(cudaLaunchCooperativeKernel_ptsz_v9000);
R(cudaLaunchCooperativeKernelMultiDevice_v9000);
R(cudaGraphLaunch_v10000);
R(cudaGraphLaunch_ptsz_v10000);
R(cudaLaunchKernelExC_v11060);
R(cudaLaunchKernelExC_ptsz_v11060);

/* the launch calls' parameters, where the callback reads the stream */
#define P(mine, real, f) _Static_assert(offsetof(struct mine, f) == offsetof(real, f), #real "." #f)
P(p_cuLaunchKernel, cuLaunchKernel_params, hStream);
P(p_cuLaunchKernelEx, cuLaunchKernelEx_params, config);
P(p_cuGraphLaunch, cuGraphLaunch_params, hStream);
P(p_cuLaunchGridAsync, cuLaunchGridAsync_params, hStream);
_Static_assert(offsetof(struct p_cuLaunchKernel, hStream) == offsetof(cuLaunchCooperativeKernel_params, hStream), "coop");
P(p_cudaLaunchKernel, cudaLaunchKernel_v7000_params, stream);
_Static_assert(offsetof(struct p_cudaLaunchKernel, stream) == offsetof(cudaLaunchCooperativeKernel_v9000_params, stream), "rt coop");
P(p_cudaLaunchKernelExC, cudaLaunchKernelExC_v11060_params, config);
P(p_cudaGraphLaunch, cudaGraphLaunch_v10000_params, stream);
_Static_assert(offsetof(struct rt_launch_config, stream) == offsetof(cudaLaunchConfig_t, stream), "cudaLaunchConfig_t.stream");
_Static_assert(offsetof(CUlaunchConfig, hStream) == 32, "CUlaunchConfig.hStream (cudefs.h)");
