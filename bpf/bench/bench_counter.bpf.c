// SPDX-License-Identifier: BSD-2-Clause
// bench_counter: probe_counter.bpf.c's per-thread counter (globaltimer,
// thread index, a count and the last timestamp in a per-GPU-thread array)
// at the entry of every kernel, not only vectorAdd, so that one object
// serves every workload of scripts/gpu/table-bench.sh (mode "counter";
// goals: <= 1.15x at vec_add large, probe / hand-written <= 1.10 at every
// preset). Hand-written twin: samples/vec_add_ideal.cu, observation counter
// (the same code as samples/vec_add_probe.cu).
#include "types.h"
#include "gpu.h"
#include <bpf/bpf_helpers.h>

#include "counter.h"

SEC("gpu/entry/*")
int counter_entry(void *ctx)
{
	return count_thread();
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
