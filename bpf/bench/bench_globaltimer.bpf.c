// SPDX-License-Identifier: BSD-2-Clause
// bench_globaltimer: every thread reads %globaltimer at kernel entry, in
// every kernel (scripts/gpu/table-bench.sh, mode "globaltimer"; goal
// <= 1.05x). The time is kept only if it reads 0, which it never does: the
// branch keeps the read from being optimised away while nothing is stored.
// Hand-written twin: samples/vec_add_ideal.cu, observation globaltimer.
#include "types.h"
#include "gpu.h"
#include <bpf/bpf_helpers.h>

GPUBPF_MAP(never, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u64, 1);

SEC("gpu/entry/*")
int globaltimer_entry(void *ctx)
{
	u32 zero = 0;

	if (bpf_get_globaltimer() == 0) {
		u64 *n = bpf_map_lookup_elem(&never, &zero);

		if (n)
			__sync_fetch_and_add(n, 1);
	}
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
