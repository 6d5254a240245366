// SPDX-License-Identifier: BSD-2-Clause
// tailcall: bpf_tail_call has no GPU equivalent; the compiler must refuse it
// and name this file's line in its error.
#include "types.h"
#include "gpu.h"
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 4);
	__type(key, u32);
	__type(value, u32);
} progs SEC(".maps");

SEC("kprobe/_Z9vectorAddPKfS0_Pfi")
int tail(void *ctx)
{
	bpf_tail_call(ctx, &progs, 0); /* refused on the GPU */
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
