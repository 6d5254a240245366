// vec_add_hook: vec_add whose kernel calls the hook stub
// __bpftime_cuda__kernel_trace() first (see vec_add.cu for arguments/output).
#define VEC_ADD_HOOK 1
#include "vec_add.cu"
