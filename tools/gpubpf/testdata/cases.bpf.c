// SPDX-License-Identifier: BSD-2-Clause
// BPF objects for gpubpf's tests, one per set of -D flags (compiled at test
// time with clang): bare uprobes for --attach, and the mistakes a user can
// make that gpubpf run and gpubpf ptx must explain.
#include "types.h"
#include "gpu.h"
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, u32);
	__type(value, u64);
} hits SEC(".maps");

static __always_inline void bump(void *map, u32 key)
{
	u64 *v = bpf_map_lookup_elem(map, &key);
	if (v)
		__sync_fetch_and_add(v, 1);
}

#ifdef WITH_BARE
/* libbpf style: the loader picks the function at run time. */
SEC("uprobe")
int enter(void *ctx)
{
	bump(&hits, 0);
	return 0;
}

SEC("uretprobe")
int leave(void *ctx)
{
	bump(&hits, 1);
	return 0;
}
#endif

#ifdef WITH_NAMED
SEC("uprobe/exe:target_fn")
int named(void *ctx)
{
	bump(&hits, 0);
	return 0;
}
#endif

#ifdef WITH_GPU
struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_MAP);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} calls SEC(".maps");

SEC("kprobe/_Z6vecAddPfi")
int vecadd_entry(void *ctx)
{
	bump(&calls, 0);
	return 0;
}
#endif

#ifdef WITH_MEM_RETURN
/* a memory-access probe has no return */
SEC("kretprobe/__memcapture")
int mem_ret(void *ctx)
{
	bump(&hits, 0);
	return 0;
}
#endif

#ifdef WITH_MEM_EMPTY
/* gpu/mem/ with no kernel */
SEC("gpu/mem/")
int mem_none(void *ctx)
{
	bump(&hits, 0);
	return 0;
}
#endif

#ifdef WITH_TRACEPOINT
SEC("tracepoint/syscalls/sys_enter_write")
int on_write(void *ctx)
{
	bump(&hits, 0);
	return 0;
}
#endif

#ifdef WITH_BAD_UPROBE
/* no PATH:SYMBOL after uprobe/ */
SEC("uprobe/target_fn")
int bad_uprobe(void *ctx)
{
	bump(&hits, 0);
	return 0;
}
#endif

#ifdef WITH_LRU
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 64);
	__type(key, u32);
	__type(value, u64);
} recent SEC(".maps");

SEC("kprobe/_Z6vecAddPfi")
int lru_entry(void *ctx)
{
	bump(&recent, 0);
	return 0;
}
#endif

#ifdef WITH_PERCPU
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 4);
	__type(key, u32);
	__type(value, u64);
} percpu SEC(".maps");

SEC("kprobe/_Z6vecAddPfi")
int percpu_entry(void *ctx)
{
	bump(&percpu, 0);
	return 0;
}
#endif

#ifdef WITH_HOST_MAP
/* bpftime's BPF_MAP_TYPE_PERGPUTD_ARRAY_HOST_MAP: 512 bytes per thread,
 * 512 MiB of pinned host memory per million threads. */
struct {
	__uint(type, BPF_MAP_TYPE_PERGPUTD_ARRAY_HOST_MAP);
	__uint(max_entries, 4);
	__type(key, u32);
	__type(value, u64[16]);
} perthread_counter SEC(".maps");

SEC("kretprobe/_Z6vecAddPfi")
int host_map_exit(void *ctx)
{
	bump(&perthread_counter, 0);
	return 0;
}
#endif

#ifdef WITH_HOST_MAP_ON_CPU
/* A host-backed GPU map is no kernel map: CPU programs cannot share it. */
struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_HOST_MAP);
	__uint(max_entries, 2);
	__type(key, u32);
	__type(value, u64);
} shared_counter SEC(".maps");

SEC("kprobe/_Z6vecAddPfi")
int gpu_side(void *ctx)
{
	bump(&shared_counter, 0);
	return 0;
}

SEC("uprobe/exe:target_fn")
int cpu_side(void *ctx)
{
	bump(&shared_counter, 1);
	return 0;
}
#endif

char LICENSE[] SEC("license") = "GPL";
