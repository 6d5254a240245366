// SPDX-License-Identifier: BSD-2-Clause
// gpuevent_snoop: CUDA runtime and driver API calls (malloc, free, memcpy,
// memset, kernel launch, graph launch) as one event stream, from uprobes on
// libcudart, libcuda or an executable with static cudart.
//
// Every API uses the same programs; the attachment's BPF cookie says which
// API it is (see gpuevent_snoop.h). The entry remembers the argument
// registers per thread; the return emits one event with the result and the
// duration. A call made while another traced call of the same thread is in
// flight (cudaMalloc going on to cuMemAlloc_v2) is folded into it, so each
// user-level call is reported once.
//
// Two attachments: ges_session for uprobe_multi sessions (kernel 6.13+), where
// the entry decides whether the return is taken at all, and the ges_enter /
// ges_exit pair for older kernels. Under sessions a launch is reported from
// its entry alone unless its result is worth checking (want_return): a
// return probe costs more than the entry, and launch-bound programs make
// hundreds of thousands of launches a second.
#include "types.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
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
/* Under sessions: never take a launch's return (--launch-entry). */
const volatile __u32 launch_entry_only = 0;
/* Under sessions: also take the return of one launch in (sample_mask + 1)
 * per CPU, so the summary's launch times are an estimate over many calls
 * rather than over first launches (which include module loading). 0: none. */
const volatile __u64 sample_mask = 0;
/* Without a pid filter (tracing all) every process may have its driver
 * launches probed, so every runtime launch records its frame. */
const volatile __u32 all_driver_launches = 0;

/* When a traced call last failed (any process). For a second after that
 * every launch's return is taken: failures come in runs (a sticky error,
 * a bad configuration in a loop), and each must be reported as such. */
__u64 last_fail_ns = 0;
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
	__u64 caller;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct handle_call);
} handle_calls SEC(".maps");

/* Traced processes (tgid -> GES_PID_* flags) when filter_pids is set. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u8);
} pids SEC(".maps");

/* Loss, folding and probe-hit counters (enum ges_counter), per CPU so that
 * counting every hit shares no cache line; summed at exit. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, GES_CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2 * GES_MAX_APIS);
	__type(key, __u32);
	__type(value, __u64);
} api_hits SEC(".maps");

/* Launch configurations (process, function, grid, block, shared memory,
 * stream) already launched once with their return taken. Most launch
 * failures are properties of the configuration (too many threads or
 * registers, no image for the device, a bad stream), so the first launch of
 * each shows them. LRU: a long-running process's configurations age out and
 * are checked again. */
struct launch_key {
	__u32 tgid;
	__u32 pad;
	__u64 hash;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct launch_key);
	__type(value, __u8);
} launch_configs SEC(".maps");

/* pid_tgid -> the frame of the thread's last runtime launch reported from
 * its entry: the stack pointer at entry and the return address stored
 * there. A driver launch made while that frame is live (deeper stack, same
 * return address in place) is the one cudart makes on the runtime launch's
 * behalf, and is folded like any nested call. Once the runtime launch has
 * returned, the next call its caller makes overwrites that slot with
 * another return address (only an indirect call from the very same call
 * instruction could put the same one back). */
struct launch_frame {
	__u64 sp;
	__u64 ret;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct launch_frame);
} launch_frames SEC(".maps");

/* Only to make bpf2go emit the Go types of the events. */
const struct ges_event *unused_event __attribute__((unused));
const struct ges_name_event *unused_name_event __attribute__((unused));

/* Just the fields read, relocated against the running kernel's BTF. */
struct mm_struct___ges {
	unsigned long start_code;
} __attribute__((preserve_access_index));

struct task_struct___ges {
	struct mm_struct___ges *mm;
} __attribute__((preserve_access_index));

#ifndef GES_NO_BTF
extern bool bpf_session_is_return(void) __ksym __weak;
#endif

static __always_inline __u64 *counter(__u32 idx)
{
	return bpf_map_lookup_elem(&counters, &idx);
}

static __always_inline void count(__u32 idx)
{
	__u64 *v = counter(idx);
	if (v)
		(*v)++;
}

static __always_inline void count_hit(__u64 cookie, __u32 ret)
{
	__u32 idx = 2 * (cookie & (GES_MAX_APIS - 1)) + ret;
	__u64 *v = bpf_map_lookup_elem(&api_hits, &idx);
	if (v)
		(*v)++;
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
 * the return's registers, else the entry's (a launch reported at entry). */
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
	e->cookie = (__u32)(ret_known ? cookie : cookie | GES_C_ENTRY_ONLY);
	e->ret = ret_known ? (__s32)PT_REGS_RC(ctx) : 0;
	__builtin_memcpy(e->regs, in->regs, sizeof(e->regs));
	__builtin_memcpy(e->stk, in->stk, sizeof(e->stk));
	e->caller2 = in->caller2;
	e->ip = in->ip;
#ifndef GES_NO_BTF
	/* Plain loads through the task's BTF pointer (the verifier turns
	 * them into faulting-safe reads), cheaper than probe-read helpers. */
	struct task_struct___ges *task = (void *)bpf_get_current_task_btf();
	struct mm_struct___ges *mm = task->mm;
	e->exe_start = mm ? mm->start_code : 0;
#else
	e->exe_start = 0; /* no kernel BTF: user space reads /proc/PID/maps */
#endif
	bpf_get_current_comm(e->comm, sizeof(e->comm));

	e->out = 0;
	if (ret_known && (cookie & GES_C_OUT_ARG0))
		bpf_probe_read_user(&e->out, sizeof(e->out), (void *)e->regs[0]);

	/* cfg, argw and stack are left as the ring buffer had them unless
	 * filled: the decoder reads them only per the cookie and the counts,
	 * and at hundreds of thousands of launches a second every store
	 * counts. */
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

static __always_inline __u64 mix(__u64 h, __u64 v)
{
	return (h ^ v) * 0x9e3779b97f4a7c15ULL;
}

/* Whether a launch's result is worth a return probe: the first launch of its
 * configuration, any launch within a second of a failure, and a sample. */
static __always_inline bool want_return(__u32 tgid, struct inflight *in)
{
	if (launch_entry_only)
		return false;
	__u64 *n = counter(GES_CNT_LAUNCH);
	if (n && sample_mask && ((*n) & sample_mask) == 0)
		return true;
	if (in->ts - last_fail_ns < 1000000000ULL)
		return true;

	/* The configuration from the registers and stack words the layout
	 * keeps it in: function, grid, block, shared memory, stream. */
	__u64 h = 0;
	switch ((in->cookie >> GES_C_PARAMS_SHIFT) & 0xf) {
	case GES_PARAMS_REG5: /* cudaLaunchKernel: func, dim3 x2 in 4 regs; shmem, stream on the stack */
		h = mix(mix(mix(mix(mix(mix(h, in->regs[0]), in->regs[1]), in->regs[2]), in->regs[3]), in->regs[4]), in->stk[1]);
		h = mix(h, in->stk[2]);
		break;
	case GES_PARAMS_STK4: /* cuLaunchKernel: f, gx..bz in 6 regs + 1 stack word, shmem, stream */
		h = mix(mix(mix(mix(mix(mix(h, in->regs[0]), in->regs[1]), in->regs[2]), in->regs[3]), in->regs[4]), in->regs[5]);
		h = mix(mix(mix(h, in->stk[1]), in->stk[2]), in->stk[3]);
		break;
	default: { /* a launch config struct: its first 40 bytes, and the function */
		__u64 cfg[5] = {};
		bpf_probe_read_user(cfg, sizeof(cfg), (void *)in->regs[0]);
		h = mix(mix(mix(mix(mix(mix(h, in->regs[1]), cfg[0]), cfg[1]), cfg[2]), cfg[3]), cfg[4]);
	}
	}
	struct launch_key k = { .tgid = tgid, .hash = h };
	if (bpf_map_lookup_elem(&launch_configs, &k))
		return false;
	__u8 one = 1;
	bpf_map_update_elem(&launch_configs, &k, &one, BPF_ANY);
	return true;
}

/* Whether a driver launch runs inside the thread's last runtime launch
 * reported from its entry (see launch_frames). */
static __always_inline bool in_launch_frame(struct pt_regs *ctx, __u64 id)
{
	struct launch_frame *f = bpf_map_lookup_elem(&launch_frames, &id);
	if (!f || ctx->sp >= f->sp)
		return false;
	__u64 ret = 0;
	if (bpf_probe_read_user(&ret, sizeof(ret), (void *)f->sp))
		return false;
	return ret == f->ret;
}

/* The entry of a traced call. Returns whether the return is wanted (0, as
 * sessions read it) or not (1); the ges_enter/ges_exit pair ignores it. */
static __always_inline int enter(struct pt_regs *ctx, bool session)
{
	if (cost_mode == 1)
		return session ? 1 : 0;
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;

	__u8 pidflags = GES_PID_TRACED;
	if (filter_pids) {
		__u8 *pf = bpf_map_lookup_elem(&pids, &tgid);
		if (!pf)
			return 1;
		pidflags = *pf;
	}
	__u64 cookie = bpf_get_attach_cookie(ctx);
	count_hit(cookie, 0);
	if (cookie & GES_C_HANDLE) {
		struct handle_call hc = {
			.cookie = cookie,
			.regs = { ctx->di, ctx->si, ctx->dx },
		};
		bpf_probe_read_user(&hc.caller, sizeof(hc.caller), (void *)ctx->sp);
		if (bpf_map_update_elem(&handle_calls, &id, &hc, BPF_ANY)) {
			count(GES_CNT_INFLIGHT_FULL);
			return 1;
		}
		return 0;
	}
	struct inflight *cur = bpf_map_lookup_elem(&inflight, &id);
	if (cur || ((cookie & GES_C_DRIVER_LAUNCH) && in_launch_frame(ctx, id))) {
		/* Inside another traced call of this thread: fold it. Under
		 * sessions its return is not taken at all; otherwise an
		 * entry-only API has no return to undo the depth. */
		if (cur && !session && !(cookie & GES_C_ENTRY_ONLY))
			cur->depth++;
		count(GES_CNT_NESTED);
		return 1;
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

	bool entry_only = cookie & GES_C_ENTRY_ONLY;
	if (cookie & GES_C_LAUNCH) {
		if (session && !want_return(tgid, &in))
			entry_only = true;
		count(GES_CNT_LAUNCH);
		if (!entry_only)
			count(GES_CNT_LAUNCH_CHECKED);
	}
	if (entry_only) {
		if ((cookie & GES_C_LAUNCH) && !(cookie & GES_C_DRIVER_LAUNCH) &&
		    (all_driver_launches || (pidflags & GES_PID_DRIVER_LAUNCH))) {
			struct launch_frame f = { .sp = ctx->sp, .ret = in.stk[0] };
			bpf_map_update_elem(&launch_frames, &id, &f, BPF_ANY);
		}
		emit(ctx, id, &in, false);
		return 1;
	}
	if (bpf_map_update_elem(&inflight, &id, &in, BPF_NOEXIST)) {
		count(GES_CNT_INFLIGHT_FULL);
		return 1;
	}
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
	e->caller = hc->caller;
	e->name[0] = 0;
	if (e->ret == 0) {
		bpf_probe_read_user(&e->handle, sizeof(e->handle), (void *)hc->regs[0]);
		if (hc->cookie & GES_C_NAME_ARG2)
			bpf_probe_read_user_str(e->name, sizeof(e->name), (void *)hc->regs[2]);
	}
	/* Rare, and user space may act on it (probe the driver's launch
	 * functions in this process): no batching. */
	bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
	bpf_map_delete_elem(&handle_calls, &id);
}

static __always_inline void leave(struct pt_regs *ctx)
{
	if (cost_mode == 1)
		return;
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	if (filter_pids && !bpf_map_lookup_elem(&pids, &tgid))
		return;
	__u64 cookie = bpf_get_attach_cookie(ctx);
	count_hit(cookie, 1);
	if (cookie & GES_C_HANDLE) {
		emit_handle(ctx, id);
		return;
	}
	struct inflight *in = bpf_map_lookup_elem(&inflight, &id);
	if (!in) {
		/* Entered before the probes were attached. */
		count(GES_CNT_NO_ENTRY);
		return;
	}
	if (in->depth > 1) {
		in->depth--;
		return;
	}
	if ((__s32)PT_REGS_RC(ctx) != 0)
		last_fail_ns = bpf_ktime_get_ns();
	emit(ctx, id, in, true);
	bpf_map_delete_elem(&inflight, &id);
}

SEC("uprobe")
int ges_enter(struct pt_regs *ctx)
{
	enter(ctx, false);
	return 0;
}

SEC("uretprobe")
int ges_exit(struct pt_regs *ctx)
{
	leave(ctx);
	return 0;
}

#ifndef GES_NO_BTF
/* One program for both ends of a uprobe_multi session (the loader sets its
 * attach type): at entry its result says whether to take the return.
 * (Sessions need kernel BTF for their kfunc; so does exe_start.) */
SEC("uprobe.multi")
int ges_session(struct pt_regs *ctx)
{
	if (bpf_session_is_return()) {
		leave(ctx);
		return 0;
	}
	return enter(ctx, true);
}
#endif
