// SPDX-License-Identifier: BSD-2-Clause
// probe_counter: the probe of the performance goal (issue 3): read
// globaltimer and the thread index, bump a per-thread counter. Compare with
// bench/probe_counter.cu's hand-written CUDA doing the same on vec_add.
#include "types.h"
#include "gpu.h"
#include <bpf/bpf_helpers.h>

#include "counter.h"

SEC("kprobe/_Z9vectorAddPKfS0_Pfi")
int probe_counter(void *ctx)
{
	return count_thread();
}

SEC("kprobe/_Z9vectorAddPKfS0_Pfi")
int probe_empty(void *ctx)
{
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
