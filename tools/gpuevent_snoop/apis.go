package gpuevent_snoop

import "strconv"

// Kind is the class of a traced call; -e selects by these names.
type Kind uint8

const (
	KindMalloc Kind = iota
	KindFree
	KindMemcpy
	KindMemset
	KindLaunch
	KindGraph
	numKinds
)

var kindNames = [numKinds]string{"malloc", "free", "memcpy", "memset", "launch", "graph"}

func (k Kind) String() string { return kindNames[k] }

// Copy directions, cudaMemcpyKind's values; the driver's typed copies map
// onto them.
const (
	DirH2H     = 0
	DirH2D     = 1
	DirD2H     = 2
	DirD2D     = 3
	DirDefault = 4 // unified addressing decides (cudaMemcpyDefault, cuMemcpy)
)

var dirNames = [...]string{"H2H", "H2D", "D2H", "D2D", "default"}

func dirName(d uint64) string {
	if d < uint64(len(dirNames)) {
		return dirNames[d]
	}
	return "kind" + strconv.FormatUint(d, 10)
}

// Argument layouts: how user space reads a call's fields from the entry
// registers (regs: rdi rsi rdx rcx r8 r9) and stack words (stk[0] is the
// return address, stk[1] the 7th argument) the BPF program forwards.
type layout uint8

const (
	lAlloc      layout = iota // (void **ptr, size_t size, ...)
	lFree                     // (void *ptr, ...)
	lMemcpyRT                 // (dst, src, count, cudaMemcpyKind, [stream])
	lMemcpyDrv                // (dst, src, count, [stream]); direction fixed by the API
	lMemset                   // (ptr, value, count, [stream])
	lLaunchRT                 // (func, dim3 grid, dim3 block, void **args, size_t shmem, stream)
	lLaunchDrv                // (CUfunction, gx, gy, gz, bx, by, bz, shmem, stream, params, extra)
	lLaunchEx                 // (const CUlaunchConfig *, CUfunction, params, extra)
	lLaunchExRT               // (const cudaLaunchConfig_t *, const void *func, void **args)
	lGraph                    // (cudaGraphExec_t, stream)
	lHandle                   // (handle *out, parent, [const char *name]): a ges_name_event
)

// API is one traced function.
type API struct {
	Name   string
	Kind   Kind
	Driver bool // libcuda layer (CUresult) rather than cudart (cudaError_t)
	Layout layout
	Dir    uint8 // lMemcpyDrv
	Stream int8  // register index of the stream argument, -1 if none
	Async  bool
	// Lookup: a kernel-handle lookup, never shown; what it returns names
	// the kernels of later launches (runtime launches of CUDA 12.x/13
	// binaries pass a kernel handle, not the host stub).
	Lookup  bool
	cookieF uint64 // cookie flags for the BPF return program
}

// apis is indexed by the API id carried in the BPF cookie (low 8 bits).
var apis = []API{
	// CUDA runtime (libcudart.so*, or the executable with static cudart).
	{Name: "cudaMalloc", Kind: KindMalloc, Layout: lAlloc, Stream: -1, cookieF: cOutArg0 | cStack | cCaller2},
	{Name: "cudaMallocManaged", Kind: KindMalloc, Layout: lAlloc, Stream: -1, cookieF: cOutArg0 | cStack | cCaller2},
	{Name: "cudaMallocAsync", Kind: KindMalloc, Layout: lAlloc, Stream: 2, Async: true, cookieF: cOutArg0 | cStack | cCaller2},
	{Name: "cudaMallocAsync_ptsz", Kind: KindMalloc, Layout: lAlloc, Stream: 2, Async: true, cookieF: cOutArg0 | cStack | cCaller2},
	{Name: "cudaFree", Kind: KindFree, Layout: lFree, Stream: -1, cookieF: cStack},
	{Name: "cudaFreeAsync", Kind: KindFree, Layout: lFree, Stream: 1, Async: true, cookieF: cStack},
	{Name: "cudaFreeAsync_ptsz", Kind: KindFree, Layout: lFree, Stream: 1, Async: true, cookieF: cStack},
	{Name: "cudaMemcpy", Kind: KindMemcpy, Layout: lMemcpyRT, Stream: -1, cookieF: cStack},
	{Name: "cudaMemcpy_ptds", Kind: KindMemcpy, Layout: lMemcpyRT, Stream: -1, cookieF: cStack},
	{Name: "cudaMemcpyAsync", Kind: KindMemcpy, Layout: lMemcpyRT, Stream: 4, Async: true, cookieF: cStack},
	{Name: "cudaMemcpyAsync_ptsz", Kind: KindMemcpy, Layout: lMemcpyRT, Stream: 4, Async: true, cookieF: cStack},
	{Name: "cudaMemset", Kind: KindMemset, Layout: lMemset, Stream: -1, cookieF: cStack},
	{Name: "cudaMemset_ptds", Kind: KindMemset, Layout: lMemset, Stream: -1, cookieF: cStack},
	{Name: "cudaMemsetAsync", Kind: KindMemset, Layout: lMemset, Stream: 3, Async: true, cookieF: cStack},
	{Name: "cudaMemsetAsync_ptsz", Kind: KindMemset, Layout: lMemset, Stream: 3, Async: true, cookieF: cStack},
	{Name: "cudaLaunchKernel", Kind: KindLaunch, Layout: lLaunchRT, Stream: -1, Async: true, cookieF: cStack | paramsReg5},
	{Name: "cudaLaunchKernel_ptsz", Kind: KindLaunch, Layout: lLaunchRT, Stream: -1, Async: true, cookieF: cStack | paramsReg5},
	{Name: "cudaLaunchCooperativeKernel", Kind: KindLaunch, Layout: lLaunchRT, Stream: -1, Async: true, cookieF: cStack | paramsReg5},
	{Name: "cudaLaunchKernelExC", Kind: KindLaunch, Layout: lLaunchExRT, Stream: -1, Async: true, cookieF: cStack | paramsReg2 | cLaunchConfig},
	{Name: "cudaLaunchKernelExC_ptsz", Kind: KindLaunch, Layout: lLaunchExRT, Stream: -1, Async: true, cookieF: cStack | paramsReg2 | cLaunchConfig},
	{Name: "cudaGraphLaunch", Kind: KindGraph, Layout: lGraph, Stream: 1, Async: true, cookieF: cStack},
	{Name: "cudaGraphLaunch_ptsz", Kind: KindGraph, Layout: lGraph, Stream: 1, Async: true, cookieF: cStack},
	// CUDA driver (libcuda.so*), for programs that call it directly.
	{Name: "cuMemAlloc_v2", Kind: KindMalloc, Driver: true, Layout: lAlloc, Stream: -1, cookieF: cOutArg0 | cStack | cCaller2},
	{Name: "cuMemAllocManaged", Kind: KindMalloc, Driver: true, Layout: lAlloc, Stream: -1, cookieF: cOutArg0 | cStack | cCaller2},
	{Name: "cuMemAllocAsync", Kind: KindMalloc, Driver: true, Layout: lAlloc, Stream: 2, Async: true, cookieF: cOutArg0 | cStack | cCaller2},
	// Virtual memory management (PyTorch's expandable segments): the
	// "pointer" is the physical allocation handle.
	{Name: "cuMemCreate", Kind: KindMalloc, Driver: true, Layout: lAlloc, Stream: -1, cookieF: cOutArg0 | cStack | cCaller2},
	{Name: "cuMemRelease", Kind: KindFree, Driver: true, Layout: lFree, Stream: -1, cookieF: cStack},
	{Name: "cuMemFree_v2", Kind: KindFree, Driver: true, Layout: lFree, Stream: -1, cookieF: cStack},
	{Name: "cuMemFreeAsync", Kind: KindFree, Driver: true, Layout: lFree, Stream: 1, Async: true, cookieF: cStack},
	{Name: "cuMemcpy", Kind: KindMemcpy, Driver: true, Layout: lMemcpyDrv, Dir: DirDefault, Stream: -1, cookieF: cStack},
	{Name: "cuMemcpyAsync", Kind: KindMemcpy, Driver: true, Layout: lMemcpyDrv, Dir: DirDefault, Stream: 3, Async: true, cookieF: cStack},
	{Name: "cuMemcpyHtoD_v2", Kind: KindMemcpy, Driver: true, Layout: lMemcpyDrv, Dir: DirH2D, Stream: -1, cookieF: cStack},
	{Name: "cuMemcpyDtoH_v2", Kind: KindMemcpy, Driver: true, Layout: lMemcpyDrv, Dir: DirD2H, Stream: -1, cookieF: cStack},
	{Name: "cuMemcpyDtoD_v2", Kind: KindMemcpy, Driver: true, Layout: lMemcpyDrv, Dir: DirD2D, Stream: -1, cookieF: cStack},
	{Name: "cuMemcpyHtoDAsync_v2", Kind: KindMemcpy, Driver: true, Layout: lMemcpyDrv, Dir: DirH2D, Stream: 3, Async: true, cookieF: cStack},
	{Name: "cuMemcpyDtoHAsync_v2", Kind: KindMemcpy, Driver: true, Layout: lMemcpyDrv, Dir: DirD2H, Stream: 3, Async: true, cookieF: cStack},
	{Name: "cuMemcpyDtoDAsync_v2", Kind: KindMemcpy, Driver: true, Layout: lMemcpyDrv, Dir: DirD2D, Stream: 3, Async: true, cookieF: cStack},
	{Name: "cuLaunchKernel", Kind: KindLaunch, Driver: true, Layout: lLaunchDrv, Stream: -1, Async: true, cookieF: cStack | paramsStk4},
	{Name: "cuLaunchKernel_ptsz", Kind: KindLaunch, Driver: true, Layout: lLaunchDrv, Stream: -1, Async: true, cookieF: cStack | paramsStk4},
	{Name: "cuLaunchKernelEx", Kind: KindLaunch, Driver: true, Layout: lLaunchEx, Stream: -1, Async: true, cookieF: cStack | paramsReg2 | cLaunchConfig},
	{Name: "cuLaunchKernelEx_ptsz", Kind: KindLaunch, Driver: true, Layout: lLaunchEx, Stream: -1, Async: true, cookieF: cStack | paramsReg2 | cLaunchConfig},
	// Kernel-handle lookups: handle -> name, for naming launches.
	{Name: "cuLibraryGetKernel", Kind: KindLaunch, Driver: true, Layout: lHandle, Stream: -1, Lookup: true, cookieF: cHandle | cNameArg2},
	{Name: "cuModuleGetFunction", Kind: KindLaunch, Driver: true, Layout: lHandle, Stream: -1, Lookup: true, cookieF: cHandle | cNameArg2},
	{Name: "cuKernelGetFunction", Kind: KindLaunch, Driver: true, Layout: lHandle, Stream: -1, Lookup: true, cookieF: cHandle},
}

// Cookie flags, mirrored from bpf/gpuevent_snoop.h.
const (
	cOutArg0      = 1 << 8
	cStack        = 1 << 9
	cLaunchConfig = 1 << 10
	cEntryOnly    = 1 << 11
	cHandle       = 1 << 12
	cNameArg2     = 1 << 13
	cCaller2      = 1 << 14
	cLaunch       = 1 << 15
	cDriverLaunch = 1 << 20
	paramsReg5    = 1 << 16
	paramsStk4    = 2 << 16
	paramsReg2    = 3 << 16
)

// cookie is what the BPF programs get for API i.
func cookie(i int) uint64 {
	c := uint64(i) | apis[i].cookieF
	if apis[i].IsLaunch() {
		c |= cLaunch
		if apis[i].Driver {
			c |= cDriverLaunch
		}
	}
	return c
}

// IsLaunch reports whether the API launches kernels (not a lookup, not a
// graph launch).
func (a *API) IsLaunch() bool { return a.Kind == KindLaunch && !a.Lookup }

// isDriverLaunch reports whether the API is one of the driver's launch
// functions: cudart calls them for every runtime launch, so they are probed
// only in processes that also call them from elsewhere (see Attacher).
func (a *API) isDriverLaunch() bool { return a.Driver && a.IsLaunch() }

// cudaErrorNames are cudaError_t's names (CUDA 11-13 runtime headers).
var cudaErrorNames = map[int32]string{
	0: "cudaSuccess", 1: "cudaErrorInvalidValue", 2: "cudaErrorMemoryAllocation",
	3: "cudaErrorInitializationError", 4: "cudaErrorCudartUnloading", 5: "cudaErrorProfilerDisabled",
	9: "cudaErrorInvalidConfiguration", 12: "cudaErrorInvalidPitchValue", 13: "cudaErrorInvalidSymbol",
	16: "cudaErrorInvalidHostPointer", 17: "cudaErrorInvalidDevicePointer", 18: "cudaErrorInvalidTexture",
	21: "cudaErrorInvalidMemcpyDirection", 34: "cudaErrorStubLibrary",
	35: "cudaErrorInsufficientDriver", 36: "cudaErrorCallRequiresNewerDriver",
	37: "cudaErrorInvalidSurface", 43: "cudaErrorDuplicateVariableName",
	46: "cudaErrorDevicesUnavailable", 49: "cudaErrorIncompatibleDriverContext",
	52: "cudaErrorMissingConfiguration", 53: "cudaErrorPriorLaunchFailure",
	65: "cudaErrorLaunchMaxDepthExceeded", 98: "cudaErrorInvalidDeviceFunction",
	100: "cudaErrorNoDevice", 101: "cudaErrorInvalidDevice", 102: "cudaErrorDeviceNotLicensed",
	103: "cudaErrorSoftwareValidityNotEstablished", 127: "cudaErrorStartupFailure",
	200: "cudaErrorInvalidKernelImage", 201: "cudaErrorDeviceUninitialized",
	205: "cudaErrorMapBufferObjectFailed", 206: "cudaErrorUnmapBufferObjectFailed",
	209: "cudaErrorNoKernelImageForDevice", 214: "cudaErrorECCUncorrectable",
	218: "cudaErrorInvalidPtx", 219: "cudaErrorInvalidGraphicsContext",
	220: "cudaErrorNvlinkUncorrectable", 221: "cudaErrorJitCompilerNotFound",
	222: "cudaErrorUnsupportedPtxVersion", 223: "cudaErrorJitCompilationDisabled",
	224: "cudaErrorUnsupportedExecAffinity", 225: "cudaErrorUnsupportedDevSideSync",
	300: "cudaErrorInvalidSource", 301: "cudaErrorFileNotFound",
	302: "cudaErrorSharedObjectSymbolNotFound", 303: "cudaErrorSharedObjectInitFailed",
	304: "cudaErrorOperatingSystem", 400: "cudaErrorInvalidResourceHandle",
	401: "cudaErrorIllegalState", 402: "cudaErrorLossyQuery", 500: "cudaErrorSymbolNotFound",
	600: "cudaErrorNotReady", 700: "cudaErrorIllegalAddress", 701: "cudaErrorLaunchOutOfResources",
	702: "cudaErrorLaunchTimeout", 703: "cudaErrorLaunchIncompatibleTexturing",
	704: "cudaErrorPeerAccessAlreadyEnabled", 705: "cudaErrorPeerAccessNotEnabled",
	708: "cudaErrorSetOnActiveProcess", 709: "cudaErrorContextIsDestroyed", 710: "cudaErrorAssert",
	711: "cudaErrorTooManyPeers", 712: "cudaErrorHostMemoryAlreadyRegistered",
	713: "cudaErrorHostMemoryNotRegistered", 714: "cudaErrorHardwareStackError",
	715: "cudaErrorIllegalInstruction", 716: "cudaErrorMisalignedAddress",
	717: "cudaErrorInvalidAddressSpace", 718: "cudaErrorInvalidPc", 719: "cudaErrorLaunchFailure",
	720: "cudaErrorCooperativeLaunchTooLarge", 800: "cudaErrorNotPermitted",
	801: "cudaErrorNotSupported", 802: "cudaErrorSystemNotReady",
	803: "cudaErrorSystemDriverMismatch", 804: "cudaErrorCompatNotSupportedOnDevice",
	900: "cudaErrorStreamCaptureUnsupported", 901: "cudaErrorStreamCaptureInvalidated",
	902: "cudaErrorStreamCaptureMerge", 903: "cudaErrorStreamCaptureUnmatched",
	904: "cudaErrorStreamCaptureUnjoined", 905: "cudaErrorStreamCaptureIsolation",
	906: "cudaErrorStreamCaptureImplicit", 907: "cudaErrorCapturedEvent",
	908: "cudaErrorStreamCaptureWrongThread", 909: "cudaErrorTimeout",
	910: "cudaErrorGraphExecUpdateFailure", 911: "cudaErrorExternalDevice",
	912: "cudaErrorInvalidClusterSize", 913: "cudaErrorFunctionNotLoaded",
	914: "cudaErrorInvalidResourceType", 915: "cudaErrorInvalidResourceConfiguration",
	999: "cudaErrorUnknown",
}

// cuResultNames are CUresult's names (CUDA 11-13 cuda.h).
var cuResultNames = map[int32]string{
	0: "CUDA_SUCCESS", 1: "CUDA_ERROR_INVALID_VALUE", 2: "CUDA_ERROR_OUT_OF_MEMORY",
	3: "CUDA_ERROR_NOT_INITIALIZED", 4: "CUDA_ERROR_DEINITIALIZED", 5: "CUDA_ERROR_PROFILER_DISABLED",
	34: "CUDA_ERROR_STUB_LIBRARY", 46: "CUDA_ERROR_DEVICE_UNAVAILABLE",
	100: "CUDA_ERROR_NO_DEVICE", 101: "CUDA_ERROR_INVALID_DEVICE", 102: "CUDA_ERROR_DEVICE_NOT_LICENSED",
	200: "CUDA_ERROR_INVALID_IMAGE", 201: "CUDA_ERROR_INVALID_CONTEXT",
	202: "CUDA_ERROR_CONTEXT_ALREADY_CURRENT", 205: "CUDA_ERROR_MAP_FAILED", 206: "CUDA_ERROR_UNMAP_FAILED",
	207: "CUDA_ERROR_ARRAY_IS_MAPPED", 208: "CUDA_ERROR_ALREADY_MAPPED", 209: "CUDA_ERROR_NO_BINARY_FOR_GPU",
	210: "CUDA_ERROR_ALREADY_ACQUIRED", 211: "CUDA_ERROR_NOT_MAPPED", 214: "CUDA_ERROR_ECC_UNCORRECTABLE",
	215: "CUDA_ERROR_UNSUPPORTED_LIMIT", 216: "CUDA_ERROR_CONTEXT_ALREADY_IN_USE",
	217: "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED", 218: "CUDA_ERROR_INVALID_PTX",
	219: "CUDA_ERROR_INVALID_GRAPHICS_CONTEXT", 220: "CUDA_ERROR_NVLINK_UNCORRECTABLE",
	221: "CUDA_ERROR_JIT_COMPILER_NOT_FOUND", 222: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
	223: "CUDA_ERROR_JIT_COMPILATION_DISABLED", 300: "CUDA_ERROR_INVALID_SOURCE",
	301: "CUDA_ERROR_FILE_NOT_FOUND", 302: "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND",
	303: "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED", 304: "CUDA_ERROR_OPERATING_SYSTEM",
	400: "CUDA_ERROR_INVALID_HANDLE", 401: "CUDA_ERROR_ILLEGAL_STATE", 402: "CUDA_ERROR_LOSSY_QUERY",
	500: "CUDA_ERROR_NOT_FOUND", 600: "CUDA_ERROR_NOT_READY", 700: "CUDA_ERROR_ILLEGAL_ADDRESS",
	701: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", 702: "CUDA_ERROR_LAUNCH_TIMEOUT",
	703: "CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING", 704: "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED",
	705: "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED", 708: "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE",
	709: "CUDA_ERROR_CONTEXT_IS_DESTROYED", 710: "CUDA_ERROR_ASSERT", 711: "CUDA_ERROR_TOO_MANY_PEERS",
	712: "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", 713: "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
	714: "CUDA_ERROR_HARDWARE_STACK_ERROR", 715: "CUDA_ERROR_ILLEGAL_INSTRUCTION",
	716: "CUDA_ERROR_MISALIGNED_ADDRESS", 717: "CUDA_ERROR_INVALID_ADDRESS_SPACE",
	718: "CUDA_ERROR_INVALID_PC", 719: "CUDA_ERROR_LAUNCH_FAILED",
	720: "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE", 800: "CUDA_ERROR_NOT_PERMITTED",
	801: "CUDA_ERROR_NOT_SUPPORTED", 802: "CUDA_ERROR_SYSTEM_NOT_READY",
	803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", 804: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
	900: "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", 901: "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
	909: "CUDA_ERROR_TIMEOUT", 910: "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE",
	911: "CUDA_ERROR_EXTERNAL_DEVICE", 912: "CUDA_ERROR_INVALID_CLUSTER_SIZE",
	913: "CUDA_ERROR_FUNCTION_NOT_LOADED", 999: "CUDA_ERROR_UNKNOWN",
}

// errorName names a return code in the layer's own vocabulary.
func errorName(driver bool, code int32) string {
	names := cudaErrorNames
	if driver {
		names = cuResultNames
	}
	if n, ok := names[code]; ok {
		return n
	}
	if driver {
		return "CUresult(" + strconv.Itoa(int(code)) + ")"
	}
	return "cudaError(" + strconv.Itoa(int(code)) + ")"
}
