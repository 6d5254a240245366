// Patch functions for the Compute Sanitizer measurements (issue 58): what a
// callback at block entry, block exit or a global memory access costs, empty
// and counting, and whether the patch module can come from PTX.
#include <sanitizer_patching.h>

struct sp_counts {
	unsigned long long enters, exits, mem;
};

static __device__ __forceinline__ void sp_add(unsigned long long *p)
{
	unsigned mask = __activemask();
	unsigned lane;
	asm("mov.u32 %0, %%laneid;" : "=r"(lane));
	// One atomic per warp: the leader adds the warp's active lanes.
	if (lane == (unsigned)(__ffs(mask) - 1))
		atomicAdd(p, (unsigned long long)__popc(mask));
}

extern "C" __device__ __noinline__ SanitizerPatchResult sp_enter_empty(void *ud, uint64_t pc)
{
	return SANITIZER_PATCH_SUCCESS;
}

extern "C" __device__ __noinline__ SanitizerPatchResult sp_exit_empty(void *ud, uint64_t pc)
{
	return SANITIZER_PATCH_SUCCESS;
}

extern "C" __device__ __noinline__ SanitizerPatchResult sp_enter_count(void *ud, uint64_t pc)
{
	if (ud)
		sp_add(&((sp_counts *)ud)->enters);
	return SANITIZER_PATCH_SUCCESS;
}

extern "C" __device__ __noinline__ SanitizerPatchResult sp_exit_count(void *ud, uint64_t pc)
{
	if (ud)
		sp_add(&((sp_counts *)ud)->exits);
	return SANITIZER_PATCH_SUCCESS;
}

extern "C" __device__ __noinline__ SanitizerPatchResult sp_mem_count(void *ud, uint64_t pc, void *ptr,
	uint32_t size, uint32_t flags, const void *nv)
{
	if (ud)
		sp_add(&((sp_counts *)ud)->mem);
	return SANITIZER_PATCH_SUCCESS;
}
