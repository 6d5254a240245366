// SPDX-License-Identifier: BSD-2-Clause
// bench_empty: an entry and an exit probe that do nothing, in every kernel
// (scripts/gpu/table-bench.sh, mode "empty"; its attach measurements use
// empty_entry alone). What being instrumented costs before a probe does
// anything: the clone of the module, the launch of the clone, the probe
// call sites. The compiled empty probe inlines to no instruction, so the
// ideal is the untraced kernel itself (goal: <= 1.02x).
#include "types.h"
#include "gpu.h"
#include <bpf/bpf_helpers.h>

SEC("gpu/entry/*")
int empty_entry(void *ctx)
{
	return 0;
}

/* Before every exit of the kernel (also predicated and early returns). */
SEC("gpu/exit/*")
int empty_exit(void *ctx)
{
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
