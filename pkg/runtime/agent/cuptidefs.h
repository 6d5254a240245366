/* The part of CUPTI's ABI the agent uses (cupti.c), declared here because
 * the agent is built without CUDA headers and loads libcupti at run time.
 * Values and layouts are CUPTI's (cupti_result.h, cupti_callbacks.h,
 * cupti_activity.h, cupti_driver_cbid.h, cupti_runtime_cbid.h): stable
 * across CUPTI versions (callback ids only grow; the kernel record's prefix
 * up to name is the same from CUpti_ActivityKernel4 on, graphId from 5).
 * testdata/cuptiabi.c checks them against a toolkit's headers (CUDA 13.0's
 * agree). */
#ifndef GPUBPF_CUPTIDEFS_H
#define GPUBPF_CUPTIDEFS_H
#include <stddef.h>
#include <stdint.h>

#include "cudefs.h"

#define CUPTIAPI

/* testdata/cuptiabi.c has CUPTI's own types and defines GPUBPF_REAL_CUPTI */
#ifndef GPUBPF_REAL_CUPTI
typedef int CUptiResult;
typedef struct CUpti_Subscriber_st *CUpti_SubscriberHandle;
typedef uint32_t CUpti_CallbackId;
typedef int CUpti_CallbackDomain;
typedef int CUpti_ApiCallbackSite;
typedef void(CUPTIAPI *CUpti_CallbackFunc)(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
					   const void *cbdata);
typedef struct {
	CUpti_ApiCallbackSite callbackSite;
	const char *functionName;
	const void *functionParams;
	void *functionReturnValue;
	const char *symbolName;
	CUcontext context;
	uint32_t contextUid;
	uint64_t *correlationData;
	uint32_t correlationId;
} CUpti_CallbackData;
typedef int CUpti_ActivityKind;
typedef int CUpti_ActivityFlag;
typedef struct {
	CUpti_ActivityKind kind;
} CUpti_Activity;
#endif

#define CUPTI_SUCCESS 0
#define CUPTI_ERROR_MAX_LIMIT_REACHED 12
#define CUPTI_ERROR_NOT_INITIALIZED 15
#define CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED 39

#define CUPTI_CB_DOMAIN_DRIVER_API 1
#define CUPTI_CB_DOMAIN_RUNTIME_API 2
#define CUPTI_API_ENTER 0
#define CUPTI_API_EXIT 1
#define CUPTI_ACTIVITY_KIND_KERNEL 3
#define CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL 10
#define CUPTI_ACTIVITY_FLAG_FLUSH_FORCED (1 << 0)
#define CUPTI_ACTIVITY_KIND_DRIVER 4
#define CUPTI_ACTIVITY_KIND_RUNTIME 5
#define CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION 39

/* CUpti_ActivityAPI: a driver API call (CUPTI_ACTIVITY_KIND_DRIVER), its
 * start on the timestamp callback's clock. */
typedef struct {
	CUpti_ActivityKind kind;
	CUpti_CallbackId cbid;
	uint64_t start;
	uint64_t end;
	uint32_t processId;
	uint32_t threadId;
	uint32_t correlationId;
	uint32_t returnValue;
} cupti_api_record;
_Static_assert(offsetof(cupti_api_record, start) == 8 && offsetof(cupti_api_record, correlationId) == 32,
	       "CUPTI API record");
#define CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2 5

/* CUpti_ActivityExternalCorrelation: the id a thread pushed
 * (cuptiActivityPushExternalCorrelationId) when it made the API call of
 * CUPTI's correlation id. */
typedef struct {
	CUpti_ActivityKind kind;
	uint32_t externalKind;
	uint64_t externalId;
	uint32_t correlationId;
	uint32_t reserved;
} cupti_ext_corr;
_Static_assert(offsetof(cupti_ext_corr, externalId) == 8 && offsetof(cupti_ext_corr, correlationId) == 16,
	       "CUPTI external correlation record");

/* CUpti_ActivityKernel4..10's common prefix (the fields read here). */
typedef struct {
	CUpti_ActivityKind kind;
	uint8_t cacheConfig;
	uint8_t sharedMemoryConfig;
	uint16_t registersPerThread;
	int partitionedGlobalCacheRequested;
	int partitionedGlobalCacheExecuted;
	uint64_t start;
	uint64_t end;
	uint64_t completed;
	uint32_t deviceId;
	uint32_t contextId;
	uint32_t streamId;
	int32_t gridX, gridY, gridZ;
	int32_t blockX, blockY, blockZ;
	int32_t staticSharedMemory;
	int32_t dynamicSharedMemory;
	uint32_t localMemoryPerThread;
	uint32_t localMemoryTotal;
	uint32_t correlationId;
	int64_t gridId;
	const char *name;
} cupti_kernel_prefix;
_Static_assert(offsetof(cupti_kernel_prefix, start) == 16, "CUPTI kernel record: start");
_Static_assert(offsetof(cupti_kernel_prefix, deviceId) == 40, "CUPTI kernel record: deviceId");
_Static_assert(offsetof(cupti_kernel_prefix, correlationId) == 92, "CUPTI kernel record: correlationId");
_Static_assert(offsetof(cupti_kernel_prefix, gridId) == 96, "CUPTI kernel record: gridId");
_Static_assert(offsetof(cupti_kernel_prefix, name) == 104, "CUPTI kernel record: name");

/* graphId in CUpti_ActivityKernel5 and later (CUDA 11.0+). */
#define CUPTI_KERNEL_GRAPH_ID_OFF 156

/* Launch entry points, by callback id (CUPTI_DRIVER_TRACE_CBID_* and
 * CUPTI_RUNTIME_TRACE_CBID_*). */
#define CBID_cuLaunch 115
#define CBID_cuLaunchGrid 116
#define CBID_cuLaunchGridAsync 117
#define CBID_cuLaunchKernel 307
#define CBID_cuLaunchKernel_ptsz 442
#define CBID_cuLaunchCooperativeKernel 477
#define CBID_cuLaunchCooperativeKernel_ptsz 478
#define CBID_cuLaunchCooperativeKernelMultiDevice 480
#define CBID_cuGraphLaunch 514
#define CBID_cuGraphLaunch_ptsz 515
#define CBID_cuLaunchKernelEx 652
#define CBID_cuLaunchKernelEx_ptsz 653

#define CBID_cudaLaunch_v3020 13
#define CBID_cudaLaunchKernel_v7000 211
#define CBID_cudaLaunch_ptsz_v7000 213
#define CBID_cudaLaunchKernel_ptsz_v7000 214
#define CBID_cudaLaunchCooperativeKernel_v9000 269
#define CBID_cudaLaunchCooperativeKernel_ptsz_v9000 270
#define CBID_cudaLaunchCooperativeKernelMultiDevice_v9000 272
#define CBID_cudaGraphLaunch_v10000 311
#define CBID_cudaGraphLaunch_ptsz_v10000 312
#define CBID_cudaLaunchKernelExC_v11060 430
#define CBID_cudaLaunchKernelExC_ptsz_v11060 431

/* One past the last callback id of each domain in CUPTI 13.0
 * (CUPTI_DRIVER_TRACE_CBID_SIZE, CUPTI_RUNTIME_TRACE_CBID_SIZE). */
#define CBID_DRIVER_SIZE 807
#define CBID_RUNTIME_SIZE 523

/* The launch calls' parameters (cupti's generated_cuda_meta.h,
 * generated_cuda_runtime_api_meta.h): the stream each names. */
struct p_cuLaunchKernel {
	CUfunction f;
	unsigned gx, gy, gz, bx, by, bz, sh;
	CUstream hStream;
	void **kernelParams;
	void **extra;
};
struct p_cuLaunchKernelEx {
	const CUlaunchConfig *config;
	CUfunction f;
	void **kernelParams;
	void **extra;
};
struct p_cuGraphLaunch {
	void *hGraphExec;
	CUstream hStream;
};
struct p_cuLaunchGridAsync {
	CUfunction f;
	int grid_width, grid_height;
	CUstream hStream;
};
struct dim3_ {
	unsigned x, y, z;
};
struct p_cudaLaunchKernel {
	const void *func;
	struct dim3_ gridDim, blockDim;
	void **args;
	size_t sharedMem;
	CUstream stream;
};
struct p_cudaLaunchKernelExC {
	const void *config; /* cudaLaunchConfig_t: gridDim, blockDim, dynamicSmemBytes, stream, ... */
	const void *func;
	void **args;
};
struct rt_launch_config {
	struct dim3_ gridDim, blockDim;
	size_t dynamicSmemBytes;
	CUstream stream;
};
struct p_cudaGraphLaunch {
	void *graphExec;
	CUstream stream;
};

#endif
