/* Compiled on the GPU machine against the toolkit's own sanitizer headers:
 * the layouts and numbers pkg/runtime/agent/sandefs.h declares by hand. */
#include <stddef.h>
#include <sanitizer.h>
_Static_assert(offsetof(Sanitizer_LaunchData, context) == 0, "context");
_Static_assert(offsetof(Sanitizer_LaunchData, hStream) == 16, "hStream");
_Static_assert(offsetof(Sanitizer_LaunchData, module) == 24, "module");
_Static_assert(offsetof(Sanitizer_LaunchData, function) == 32, "function");
_Static_assert(offsetof(Sanitizer_LaunchData, functionName) == 40, "functionName");
_Static_assert(offsetof(Sanitizer_LaunchData, gridDim_x) == 48, "gridDim_x");
_Static_assert(offsetof(Sanitizer_LaunchData, blockDim_z) == 68, "blockDim_z");
_Static_assert(SANITIZER_CB_DOMAIN_LAUNCH == 5 && SANITIZER_CBID_LAUNCH_BEGIN == 1, "launch callback ids");
_Static_assert(SANITIZER_INSTRUCTION_BLOCK_ENTER == 1 && SANITIZER_INSTRUCTION_BLOCK_EXIT == 2, "instruction ids");
_Static_assert(SANITIZER_SUCCESS == 0, "success");
int main(void) { return 0; }
