// SPDX-License-Identifier: BSD-2-Clause
// launchword: counts the launches of every kernel it is attached to, from
// each launch's first thread, and reads the launch's second launch word.
// A program that calls bpf_gpu_launch_word makes the runtime give every
// instrumented kernel two hidden trailing .u64 parameters; the fault suite
// (scripts/gpu/faults-check.sh, case 4) attaches it with `gpubpf run -k` to
// a kernel that has no room left for them (samples/jit_limits.cu bigParam),
// so that the driver's JIT rejects the instrumented copy.
// Rebuild: see the go:generate line in pkg/runtime/jit/jit_c_test.go.
#include "types.h"
#include "gpu.h"
#include <bpf/bpf_helpers.h>

GPUBPF_MAP(launches, BPF_MAP_TYPE_GPU_ARRAY_MAP, u32, u64, 2);

SEC("gpu/entry/*")
int launchword_entry(void *ctx)
{
	u32 k = 0;
	u64 *v;

	if (bpf_gpu_thread_id() != 0)
		return 0;
	/* key 0: launches; key 1: launches whose word 1 (stream | kind << 56)
	 * was non-zero */
	if (bpf_gpu_launch_word(1) != 0)
		k = 1;
	v = bpf_map_lookup_elem(&launches, &k);
	if (v)
		__sync_fetch_and_add(v, 1);
	if (k == 1) {
		k = 0;
		v = bpf_map_lookup_elem(&launches, &k);
		if (v)
			__sync_fetch_and_add(v, 1);
	}
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
