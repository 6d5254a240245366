// SPDX-License-Identifier: BSD-2-Clause
// host_map: bpftime's host-backed GPU maps (types 1512 and 1513), which the
// tool reads live while the kernels run, with no copy through the agent:
//   sudo gpubpf run -i 1 bpf/examples/host_map_bpfel.o -- samples/bin/vec_add 1000 100000 256 4
// prints every second how many threads have entered vectorAdd so far, and
// per GPU thread its calls, last run time and id. Modelled on bpftime's
// host_map_test example; the shared counts use atomic adds, so they are
// exact (bpftime's lookup + update loses increments when threads race).
#include "types.h"
#include "gpu.h"
#include <bpf/bpf_helpers.h>

/* Per GPU thread: when its current run of vectorAdd entered (globaltimer). */
struct {
	__uint(type, BPF_MAP_TYPE_PERGPUTD_ARRAY_HOST_MAP);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} thread_start SEC(".maps");

/* Per GPU thread: key 0 calls, key 1 last run time in ns (entry to exit),
 * key 2 the thread's global id (shows which slot is whose). */
struct {
	__uint(type, BPF_MAP_TYPE_PERGPUTD_ARRAY_HOST_MAP);
	__uint(max_entries, 3);
	__type(key, u32);
	__type(value, u64);
} per_thread SEC(".maps");

/* Shared by all threads: key 0 thread entries, key 1 entries of threads
 * with an element to add (global id < n, vectorAdd's 4th argument). */
struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_HOST_MAP);
	__uint(max_entries, 2);
	__type(key, u32);
	__type(value, u64);
} shared_counter SEC(".maps");

enum { CALLS, LAST_NS, THREAD_ID };

static __always_inline void count(u32 key)
{
	u64 *v = bpf_map_lookup_elem(&shared_counter, &key);
	if (v)
		__sync_fetch_and_add(v, 1);
}

SEC("kprobe/_Z9vectorAddPKfS0_Pfi")
int host_map_entry(void *ctx)
{
	u32 zero = 0;
	u64 now = bpf_get_globaltimer();
	int n = GPUBPF_ARG(ctx, int, 24);

	bpf_map_update_elem(&thread_start, &zero, &now, BPF_ANY);
	count(0);
	if (n > 0 && bpf_gpu_thread_id() < (u64)n)
		count(1);
	return 0;
}

SEC("kretprobe/_Z9vectorAddPKfS0_Pfi")
int host_map_exit(void *ctx)
{
	u32 zero = 0, key = CALLS;
	u64 *start = bpf_map_lookup_elem(&thread_start, &zero);
	u64 *calls = bpf_map_lookup_elem(&per_thread, &key);
	u64 v;

	if (!start || !calls)
		return 0; /* a thread past the maps' capacity (counted) */
	/* Only this thread writes its slots: no atomics needed. */
	*calls += 1;
	v = bpf_get_globaltimer() - *start;
	key = LAST_NS;
	bpf_map_update_elem(&per_thread, &key, &v, BPF_ANY);
	v = bpf_gpu_thread_id();
	key = THREAD_ID;
	bpf_map_update_elem(&per_thread, &key, &v, BPF_ANY);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
