// vec_add_ideal: vec_add with hand-written CUDA doing what each benchmark
// probe of bpf/bench/bench_*.bpf.c does, the ideal the compiled eBPF probe
// is measured against (scripts/gpu/table-bench.sh, "probe / hand-written").
//
//   vec_add_ideal [ELEMENTS [ITERATIONS [THREADS [BLOCKS [OBSERVATION]]]]]
//                 defaults: 1000 10 256 4 counter
//
// OBSERVATION, picked once at start; each is its own instantiation of the
// kernel template, so the observations not taken cost the kernel nothing:
//   none         vec_add's kernel unchanged (checks that this copy times
//                like samples/bin/vec_add)
//   globaltimer  read %globaltimer at entry, store only if it reads 0
//                (never): bench_globaltimer.bpf.c
//   counter      globaltimer, thread index, per-thread counter and last
//                timestamp in a per-thread array (vec_add_probe's probe):
//                bench_counter.bpf.c
//   ring         one 40-byte record per thread (timestamp, block and thread
//                index) into a device ring of 32 shards picked by SM, one
//                reservation atomic per warp; the ring wraps and is never
//                copied out (the GPU side of bench_ring.bpf.c alone)
//   shared       per warp, the lowest active lane adds the warp's active
//                lanes to slot (SM id % 64) of a u64[64] array in mapped
//                pinned host memory, with a system-scope atomic:
//                bench_shared.bpf.c's update of a 1504 (kernel-shared) map
//
// The kernel body, its globals and the host loop are vec_add.cu's (same
// launches, same timing lines: "Average kernel time", "Average CUDA-event
// kernel time"), and every observation is checked before RESULT ok.
#include "common.h"

#include <cstring>
#include <vector>

__constant__ int d_N;
__constant__ float d_scale;
__device__ unsigned long long d_calls;

enum Observation { OBS_NONE, OBS_GLOBALTIMER, OBS_COUNTER, OBS_RING, OBS_SHARED };
static const char *const obs_names[] = {"none", "globaltimer", "counter", "ring", "shared"};

// globaltimer: stays 0 unless %globaltimer ever reads 0.
__device__ unsigned long long d_never;

// counter: vec_add_probe's slots.
struct probe_slot {
	unsigned long long count, last_ts;
};
__device__ probe_slot *d_probe_slots;
__device__ unsigned long long d_probe_nslots;

// ring: trace.h's struct event, 40 bytes.
struct ring_rec {
	unsigned long long ts;
	unsigned block_x, block_y, block_z;
	unsigned thread_x, thread_y, thread_z;
	unsigned pad;
};
static_assert(sizeof(ring_rec) == 40, "the record of bench_ring.bpf.c is 40 bytes");
#define RING_SHARDS 32
#define RING_SHARD_RECS (1u << 15) // 1.25 MiB per shard, 40 MiB in all
__device__ ring_rec *d_ring;
__device__ unsigned long long d_ring_heads[RING_SHARDS];

// shared: host memory the GPU reaches over the host link.
#define SHARED_SLOTS 64
__device__ unsigned long long *d_shared;

__device__ inline unsigned long long gtimer()
{
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

__device__ inline unsigned smid()
{
	unsigned s;
	asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
	return s;
}

__device__ inline unsigned laneid()
{
	unsigned l;
	asm volatile("mov.u32 %0, %%laneid;" : "=r"(l));
	return l;
}

template <int OBS> __device__ __forceinline__ void observe()
{
	if constexpr (OBS == OBS_GLOBALTIMER) {
		if (gtimer() == 0)
			atomicAdd(&d_never, 1ULL);
	} else if constexpr (OBS == OBS_COUNTER) {
		unsigned long long ts = gtimer();
		unsigned long long t =
			((unsigned long long)(blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x) *
				(blockDim.x * blockDim.y * blockDim.z) +
			(threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
		if (t < d_probe_nslots) {
			d_probe_slots[t].count += 1 + (threadIdx.x & 0);
			d_probe_slots[t].last_ts = ts;
		}
	} else if constexpr (OBS == OBS_RING) {
		ring_rec r;
		r.ts = gtimer();
		r.block_x = blockIdx.x, r.block_y = blockIdx.y, r.block_z = blockIdx.z;
		r.thread_x = threadIdx.x, r.thread_y = threadIdx.y, r.thread_z = threadIdx.z;
		r.pad = 0;
		unsigned mask = __activemask(), lane = laneid(), leader = __ffs(mask) - 1;
		unsigned shard = smid() % RING_SHARDS;
		unsigned long long base = 0;
		if (lane == leader)
			base = atomicAdd(&d_ring_heads[shard], (unsigned long long)__popc(mask));
		base = __shfl_sync(mask, base, leader);
		unsigned long long pos = (base + __popc(mask & ((1u << lane) - 1))) & (RING_SHARD_RECS - 1);
		d_ring[(unsigned long long)shard * RING_SHARD_RECS + pos] = r;
	} else if constexpr (OBS == OBS_SHARED) {
		unsigned mask = __activemask();
		if (laneid() == (unsigned)(__ffs(mask) - 1))
			atomicAdd_system(&d_shared[smid() % SHARED_SLOTS], (unsigned long long)__popc(mask));
	}
}

template <int OBS> __global__ void vectorAdd(const float *A, const float *B, float *C, int n)
{
	(void)n; // the bound is d_N, on purpose (as in vec_add.cu)
	observe<OBS>();
	int stride = blockDim.x * gridDim.x;
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < d_N; i += stride)
		C[i] = d_scale * (A[i] + B[i]);
	if (threadIdx.x == 0)
		atomicAdd(&d_calls, 1ULL);
}

typedef void (*kernel_t)(const float *, const float *, float *, int);

int main(int argc, char **argv)
{
	g_sample_name = "vec_add_ideal";
	usage_if_help(argc, argv,
		      "[ELEMENTS [ITERATIONS [THREADS [BLOCKS [none|globaltimer|counter|ring|shared]]]]]  "
		      "(defaults 1000 10 256 4 counter)");
	int n = (int)arg_long(argc, argv, 1, 1000, 1, 1 << 28, "ELEMENTS");
	int iters = (int)arg_long(argc, argv, 2, 10, 1, 100000000, "ITERATIONS");
	int threads = (int)arg_long(argc, argv, 3, 256, 1, 1024, "THREADS");
	int blocks = (int)arg_long(argc, argv, 4, 4, 1, 1 << 20, "BLOCKS");
	int obs = -1;
	const char *want = argc > 5 ? argv[5] : "counter";
	for (int i = 0; i < (int)(sizeof(obs_names) / sizeof(obs_names[0])); i++)
		if (strcmp(want, obs_names[i]) == 0)
			obs = i;
	if (obs < 0) {
		fprintf(stderr, "vec_add_ideal: unknown observation '%s' (want none, globaltimer, counter, ring or shared)\n",
			want);
		exit(2);
	}
	kernel_t kernels[] = {vectorAdd<OBS_NONE>, vectorAdd<OBS_GLOBALTIMER>, vectorAdd<OBS_COUNTER>,
			      vectorAdd<OBS_RING>, vectorAdd<OBS_SHARED>};
	kernel_t kernel = kernels[obs];
	print_device();
	printf("%s: elements=%d iterations=%d threads=%d blocks=%d observation=%s\n", g_sample_name, n, iters, threads,
	       blocks, obs_names[obs]);

	const float scale = 2.0f;
	const unsigned long long zero = 0;
	CHECK(cudaMemcpyToSymbol(d_N, &n, sizeof(n)));
	CHECK(cudaMemcpyToSymbol(d_scale, &scale, sizeof(scale)));

	size_t bytes = (size_t)n * sizeof(float);
	std::vector<float> hA(n), hB(n), hC(n);
	for (int i = 0; i < n; i++) { // small integers and quarters: every sum is exact
		hA[i] = (float)(i % 1000);
		hB[i] = (float)(i % 7) * 0.25f;
	}
	float *dA, *dB, *dC;
	CHECK(cudaMalloc(&dA, bytes));
	CHECK(cudaMalloc(&dB, bytes));
	CHECK(cudaMalloc(&dC, bytes));
	CHECK(cudaMemcpy(dA, hA.data(), bytes, cudaMemcpyHostToDevice));
	CHECK(cudaMemcpy(dB, hB.data(), bytes, cudaMemcpyHostToDevice));

	// Every observation's memory is set up whatever the one taken, so the
	// runs differ only in the kernel.
	unsigned long long nslots = (unsigned long long)threads * blocks;
	probe_slot *slots;
	CHECK(cudaMalloc(&slots, nslots * sizeof(probe_slot)));
	CHECK(cudaMemset(slots, 0, nslots * sizeof(probe_slot)));
	CHECK(cudaMemcpyToSymbol(d_probe_slots, &slots, sizeof(slots)));
	CHECK(cudaMemcpyToSymbol(d_probe_nslots, &nslots, sizeof(nslots)));
	ring_rec *ring;
	size_t ring_bytes = (size_t)RING_SHARDS * RING_SHARD_RECS * sizeof(ring_rec);
	CHECK(cudaMalloc(&ring, ring_bytes));
	CHECK(cudaMemset(ring, 0, ring_bytes));
	CHECK(cudaMemcpyToSymbol(d_ring, &ring, sizeof(ring)));
	unsigned long long *host_shared, *dev_shared;
	CHECK(cudaHostAlloc(&host_shared, SHARED_SLOTS * sizeof(unsigned long long), cudaHostAllocMapped));
	memset(host_shared, 0, SHARED_SLOTS * sizeof(unsigned long long));
	CHECK(cudaHostGetDevicePointer(&dev_shared, host_shared, 0));
	CHECK(cudaMemcpyToSymbol(d_shared, &dev_shared, sizeof(dev_shared)));

	// Warm-up (module load, first-launch costs), then start from a clean slate.
	kernel<<<blocks, threads>>>(dA, dB, dC, n);
	CHECK_LAUNCH();
	CHECK(cudaDeviceSynchronize());
	CHECK(cudaMemset(dC, 0, bytes));
	CHECK(cudaMemcpyToSymbol(d_calls, &zero, sizeof(zero)));
	CHECK(cudaDeviceSynchronize());

	cudaEvent_t ev0, ev1;
	CHECK(cudaEventCreate(&ev0));
	CHECK(cudaEventCreate(&ev1));
	double host_ns = 0, kern_ms = 0;
	for (int it = 0; it < iters; it++) {
		double t0 = now_ns();
		CHECK(cudaEventRecord(ev0));
		kernel<<<blocks, threads>>>(dA, dB, dC, n);
		CHECK(cudaEventRecord(ev1));
		CHECK(cudaDeviceSynchronize());
		double t1 = now_ns();
		CHECK_LAUNCH();
		float ms = 0;
		CHECK(cudaEventElapsedTime(&ms, ev0, ev1));
		host_ns += t1 - t0;
		kern_ms += ms;
	}
	double host_us = host_ns / iters / 1e3;
	double kernel_us = kern_ms * 1e3 / iters;
	printf("Average kernel time: %.2f us (host-timed launch + cudaDeviceSynchronize, %d iterations)\n", host_us, iters);
	printf("Average CUDA-event kernel time: %.2f us\n", kernel_us);

	CHECK(cudaMemcpy(hC.data(), dC, bytes, cudaMemcpyDeviceToHost));
	unsigned long long calls = 0;
	CHECK(cudaMemcpyFromSymbol(&calls, d_calls, sizeof(calls)));
	double sum = 0;
	long bad = 0, first_bad = -1;
	for (int i = 0; i < n; i++) {
		float w = scale * (hA[i] + hB[i]);
		if (hC[i] != w) {
			if (first_bad < 0)
				first_bad = i;
			bad++;
		}
		sum += hC[i];
	}
	unsigned long long want_calls = (unsigned long long)iters * blocks;
	printf("checked %d elements (C = %.1f * (A + B)): %ld wrong; d_calls=%llu (want %llu)\n", n, scale, bad, calls,
	       want_calls);
	if (bad)
		result(false, "reason=wrong_result wrong=%ld first=%ld got=%g want=%g sum=%.1f", bad, first_bad,
		       hC[first_bad], scale * (hA[first_bad] + hB[first_bad]), sum);
	if (calls != want_calls)
		result(false, "reason=wrong_d_calls d_calls=%llu want=%llu", calls, want_calls);

	// The observation's own check: what it left behind after iters + 1
	// launches (the warm-up included) of threads x blocks threads.
	unsigned long long launches = (unsigned long long)iters + 1, observed = 0, want_obs = 0;
	switch (obs) {
	case OBS_GLOBALTIMER:
		CHECK(cudaMemcpyFromSymbol(&observed, d_never, sizeof(observed)));
		want_obs = 0;
		break;
	case OBS_COUNTER: {
		probe_slot last;
		CHECK(cudaMemcpy(&last, slots + nslots - 1, sizeof(last), cudaMemcpyDeviceToHost));
		observed = last.count, want_obs = launches;
		break;
	}
	case OBS_RING: {
		unsigned long long heads[RING_SHARDS];
		CHECK(cudaMemcpyFromSymbol(heads, d_ring_heads, sizeof(heads)));
		for (int s = 0; s < RING_SHARDS; s++)
			observed += heads[s];
		want_obs = launches * nslots;
		break;
	}
	case OBS_SHARED:
		for (int s = 0; s < SHARED_SLOTS; s++)
			observed += ((volatile unsigned long long *)host_shared)[s];
		want_obs = launches * nslots;
		break;
	}
	printf("observation %s: %llu (want %llu)\n", obs_names[obs], observed, want_obs);
	if (observed != want_obs)
		result(false, "reason=observation observation=%s got=%llu want=%llu", obs_names[obs], observed, want_obs);
	CHECK(cudaFree(slots));
	CHECK(cudaFree(ring));
	CHECK(cudaFreeHost(host_shared));
	CHECK(cudaFree(dA));
	CHECK(cudaFree(dB));
	CHECK(cudaFree(dC));
	result(true, "sum=%.1f elements=%d d_calls=%llu observation=%s host_us=%.2f kernel_us=%.2f", sum, n, calls,
	       obs_names[obs], host_us, kernel_us);
}
