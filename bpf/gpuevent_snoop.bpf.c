// SPDX-License-Identifier: BSD-2-Clause
// gpuevent_snoop: CUDA runtime and driver API calls (malloc, free, memcpy,
// memset, kernel launch, graph launch) as one event stream, from uprobes and
// uretprobes on libcudart, libcuda or an executable with static cudart.
//
// Every API uses the same two programs; the attachment's BPF cookie says which
// API it is (see gpuevent_snoop.h). The entry program remembers the argument
// registers per thread; the return program emits one event with the result
// and the duration. A call made while another traced call of the same thread
// is in flight (cudaMalloc going on to cuMemAlloc_v2) only deepens the
// per-thread record, so each user-level call is reported once.
#include "types.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "gpuevent_snoop.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Set by the loader before load. */
const volatile __u32 filter_pids = 0; /* only tgids present in `pids` */
const volatile __u32 want_nargs = 0; /* kernel argument words to copy (-a) */
const volatile __u32 want_stack = 0; /* user stacks (-s) */
/* Wake the reader only once this much is buffered: a wakeup per event
 * (irq_work, then the reader's epoll and a context switch) cost more than
 * the probe itself under launch-heavy load. The reader also polls on a
 * short timer, so a quiet stream is still shown within its period. */
const volatile __u64 wakeup_bytes = 0;
/* Cost breakdown for the launch-rate benchmark only (GPUEVENT_SNOOP_COST):
 * 1 = return at once (the probe hit alone), 2 = all but the ring buffer. */
const volatile __u32 cost_mode = 0;

struct inflight {
	__u64 ts;
	__u64 cookie;
	__u32 depth;
	__u32 pad;
	__u64 regs[6];
	__u64 stk[6];
	__u64 caller2;
	__u64 ip;
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20); /* resized by the loader (-b) */
} events SEC(".maps");

/* pid_tgid -> the outermost traced call the thread is in. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct inflight);
} inflight SEC(".maps");

/* pid_tgid -> a kernel-handle lookup in flight (GES_C_HANDLE). */
struct handle_call {
	__u64 cookie;
	__u64 regs[3];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct handle_call);
} handle_calls SEC(".maps");

/* Traced processes (tgid -> 1) when filter_pids is set. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u8);
} pids SEC(".maps");

/* Loss and folding counters (enum ges_counter), read at exit for the
 * completeness account. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, GES_CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

/* Only to make bpf2go emit the Go types of the events. */
const struct ges_event *unused_event __attribute__((unused));
const struct ges_name_event *unused_name_event __attribute__((unused));

static __always_inline void count(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &idx);
	if (v)
		__sync_fetch_and_add(v, 1);
}

/* Submits a record, waking the reader only when enough is buffered. */
static __always_inline void submit(void *e)
{
	__u64 flags = BPF_RB_NO_WAKEUP;
	if (bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= wakeup_bytes)
		flags = BPF_RB_FORCE_WAKEUP;
	bpf_ringbuf_submit(e, flags);
}

/* Emits the event of a call from its entry record; with ret_known, ctx is
 * the return's registers, else the entry's (entry-only APIs). */
static __always_inline void emit(struct pt_regs *ctx, __u64 id, struct inflight *in, bool ret_known)
{
	if (cost_mode == 2)
		return;
	struct ges_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count(GES_CNT_RINGBUF_FULL);
		return;
	}
	__u64 cookie = in->cookie;
	e->ts = in->ts;
	e->dur = ret_known ? bpf_ktime_get_ns() - in->ts : 0;
	e->pid = id >> 32;
	e->tid = (__u32)id;
	e->cookie = (__u32)cookie;
	e->ret = ret_known ? (__s32)PT_REGS_RC(ctx) : 0;
	__builtin_memcpy(e->regs, in->regs, sizeof(e->regs));
	__builtin_memcpy(e->stk, in->stk, sizeof(e->stk));
	e->caller2 = in->caller2;
	e->ip = in->ip;
	bpf_get_current_comm(e->comm, sizeof(e->comm));

	e->out = 0;
	if (ret_known && (cookie & GES_C_OUT_ARG0))
		bpf_probe_read_user(&e->out, sizeof(e->out), (void *)e->regs[0]);

	__builtin_memset(e->cfg, 0, sizeof(e->cfg));
	if (cookie & GES_C_LAUNCH_CONFIG)
		bpf_probe_read_user(e->cfg, sizeof(e->cfg), (void *)e->regs[0]);

	__u64 params = 0;
	switch ((cookie >> GES_C_PARAMS_SHIFT) & 0xf) {
	case GES_PARAMS_REG5:
		params = e->regs[5];
		break;
	case GES_PARAMS_STK4:
		params = e->stk[4];
		break;
	case GES_PARAMS_REG2:
		params = e->regs[2];
		break;
	}
	e->nargw = 0;
	__builtin_memset(e->argw, 0, sizeof(e->argw));
	if (params && want_nargs) {
		/* Each kernelParams[i] points at argument i; copy 8 bytes of it
		 * (a 4-byte argument comes with 4 bytes of whatever follows). */
#pragma unroll
		for (int i = 0; i < GES_MAX_ARGS; i++) {
			if (i >= want_nargs)
				break;
			__u64 p = 0;
			if (bpf_probe_read_user(&p, sizeof(p), (void *)(params + i * 8)) || !p)
				break;
			if (bpf_probe_read_user(&e->argw[i], sizeof(__u64), (void *)p))
				break;
			e->nargw = i + 1;
		}
	}

	e->nstack = 0;
	if (want_stack && (cookie & GES_C_STACK))
		e->nstack = bpf_get_stack(ctx, e->stack, sizeof(e->stack), BPF_F_USER_STACK);

	submit(e);
}

SEC("uprobe")
int ges_enter(struct pt_regs *ctx)
{
	if (cost_mode == 1)
		return 0;
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;

	if (filter_pids && !bpf_map_lookup_elem(&pids, &tgid))
		return 0;

	__u64 cookie = bpf_get_attach_cookie(ctx);
	if (cookie & GES_C_HANDLE) {
		struct handle_call hc = {
			.cookie = cookie,
			.regs = { ctx->di, ctx->si, ctx->dx },
		};
		if (bpf_map_update_elem(&handle_calls, &id, &hc, BPF_ANY))
			count(GES_CNT_INFLIGHT_FULL);
		return 0;
	}
	struct inflight *cur = bpf_map_lookup_elem(&inflight, &id);
	if (cur) {
		/* Inside another traced call of this thread: fold it. An
		 * entry-only API has no return to undo the depth. */
		if (!(cookie & GES_C_ENTRY_ONLY))
			cur->depth++;
		count(GES_CNT_NESTED);
		return 0;
	}

	struct inflight in = {};
	in.ts = bpf_ktime_get_ns();
	in.cookie = cookie;
	in.depth = 1;
	in.ip = ctx->ip;
	in.regs[0] = ctx->di;
	in.regs[1] = ctx->si;
	in.regs[2] = ctx->dx;
	in.regs[3] = ctx->cx;
	in.regs[4] = ctx->r8;
	in.regs[5] = ctx->r9;
	/* Return address and stack-passed arguments (cuLaunchKernel has 11). */
	bpf_probe_read_user(in.stk, sizeof(in.stk), (void *)ctx->sp);
	if ((cookie & GES_C_CALLER2) && bpf_probe_read_user(&in.caller2, sizeof(in.caller2), (void *)(ctx->bp + 8)))
		in.caller2 = 0;
	if (in.cookie & GES_C_ENTRY_ONLY) {
		emit(ctx, id, &in, false);
		return 0;
	}
	if (bpf_map_update_elem(&inflight, &id, &in, BPF_NOEXIST))
		count(GES_CNT_INFLIGHT_FULL);
	return 0;
}

/* Emits what a kernel-handle lookup returned (GES_C_HANDLE). */
static __always_inline void emit_handle(struct pt_regs *ctx, __u64 id)
{
	struct handle_call *hc = bpf_map_lookup_elem(&handle_calls, &id);
	if (!hc)
		return;
	struct ges_name_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count(GES_CNT_RINGBUF_FULL);
		bpf_map_delete_elem(&handle_calls, &id);
		return;
	}
	e->pid = id >> 32;
	e->cookie = (__u32)hc->cookie;
	e->ret = (__s32)PT_REGS_RC(ctx);
	e->pad = 0;
	e->handle = 0;
	e->aux = hc->regs[1];
	e->name[0] = 0;
	if (e->ret == 0) {
		bpf_probe_read_user(&e->handle, sizeof(e->handle), (void *)hc->regs[0]);
		if (hc->cookie & GES_C_NAME_ARG2)
			bpf_probe_read_user_str(e->name, sizeof(e->name), (void *)hc->regs[2]);
	}
	submit(e);
	bpf_map_delete_elem(&handle_calls, &id);
}

SEC("uretprobe")
int ges_exit(struct pt_regs *ctx)
{
	if (cost_mode == 1)
		return 0;
	__u64 id = bpf_get_current_pid_tgid();
	if (bpf_get_attach_cookie(ctx) & GES_C_HANDLE) {
		emit_handle(ctx, id);
		return 0;
	}
	struct inflight *in = bpf_map_lookup_elem(&inflight, &id);
	if (!in) {
		/* Entered before the probes were attached, or filtered. */
		__u32 tgid = id >> 32;
		if (!filter_pids || bpf_map_lookup_elem(&pids, &tgid))
			count(GES_CNT_NO_ENTRY);
		return 0;
	}
	if (in->depth > 1) {
		in->depth--;
		return 0;
	}
	emit(ctx, id, in, true);
	bpf_map_delete_elem(&inflight, &id);
	return 0;
}
