// SPDX-License-Identifier: BSD-2-Clause
// cudainit: the pid of every process that calls libcuda's cuInit, for the
// tools' --all (pkg/runtime/cudawatch): one uprobe on the library, any
// process that maps it, so new CUDA processes are found without reading
// /proc in a loop.
#include "types.h"
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 16);
} inits SEC(".maps");

SEC("uprobe")
int cuinit(void *ctx)
{
	u32 *pid = bpf_ringbuf_reserve(&inits, sizeof(*pid), 0);

	if (!pid)
		return 0;
	*pid = bpf_get_current_pid_tgid() >> 32;
	bpf_ringbuf_submit(pid, 0);
	return 0;
}
