/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Shared between gpuevent_snoop.bpf.c and its Go decoder (bpf2go -type).
 *
 * One generic entry program and one generic return program serve every
 * traced CUDA API: the BPF cookie of each attachment says which API it is and
 * what the return program must read (an out-pointer, the kernel-parameter
 * array, a launch config). The raw argument registers and the first stack
 * words travel to user space, which interprets them per API, so adding an API
 * needs no new BPF code.
 */
#ifndef __GPUEVENT_SNOOP_H
#define __GPUEVENT_SNOOP_H

#define GES_MAX_ARGS 8
#define GES_MAX_STACK 16
#define GES_COMM_LEN 16

/* Cookie layout: bits 0-7 API id (user space's table index), bits 24-31 the
 * index of the probed object in user space's list (255: unknown). */
#define GES_C_API_MASK 0xffULL
/* After return, read a u64 from the pointer in the first argument
 * (cudaMalloc's devPtr, cuMemAlloc's dptr). */
#define GES_C_OUT_ARG0 (1ULL << 8)
/* Capture the user stack (only when want_stack is set). */
#define GES_C_STACK (1ULL << 9)
/* The first argument points to a CUlaunchConfig: copy its first 40 bytes. */
#define GES_C_LAUNCH_CONFIG (1ULL << 10)
/* Entry probe only (no uretprobe): emit the event at entry, with no return
 * code or duration (--launch-entry: about half the cost per launch). */
#define GES_C_ENTRY_ONLY (1ULL << 11)
/* A kernel-handle lookup (cuLibraryGetKernel, cuModuleGetFunction,
 * cuKernelGetFunction): at return, emit a struct ges_name_event with the
 * handle written to *arg0 and, with GES_C_NAME_ARG2, the name in arg2.
 * These calls are tracked apart from the API calls (they happen inside
 * cudaLaunchKernel's first call, which must not fold them away). */
#define GES_C_HANDLE (1ULL << 12)
#define GES_C_NAME_ARG2 (1ULL << 13)
/* Read [rbp+8] at entry (allocations only: it names the call site behind
 * cuda_runtime.h's inline wrappers). Without a frame pointer rbp holds
 * anything, and a read that faults costs more than the rest of the probe. */
#define GES_C_CALLER2 (1ULL << 14)
/* A kernel launch. Under uprobe sessions the entry program decides per call
 * whether to take the return (see want_return in the BPF program); the
 * others always take it. */
#define GES_C_LAUNCH (1ULL << 15)
/* A driver launch: it may run inside an unchecked runtime launch (no
 * in-flight record), which the thread's launch frame reveals. */
#define GES_C_DRIVER_LAUNCH (1ULL << 20)
/* Bits 16-19: where the kernel-parameter array (void **) is. */
#define GES_C_PARAMS_SHIFT 16
#define GES_PARAMS_NONE 0
#define GES_PARAMS_REG5 1 /* cudaLaunchKernel: 6th register argument */
#define GES_PARAMS_STK4 2 /* cuLaunchKernel: 10th argument, 4th stack word */
#define GES_PARAMS_REG2 3 /* cuLaunchKernelEx: 3rd register argument */

/* Flags of a traced process in the pids map. */
#define GES_PID_TRACED 1
/* Its driver launch functions are probed: runtime launches record their
 * frame so that the driver launch they make is folded. */
#define GES_PID_DRIVER_LAUNCH 2

/* Indexes of the (per-CPU) counters array. */
enum ges_counter {
	GES_CNT_RINGBUF_FULL = 0, /* bpf_ringbuf_reserve failed: event lost */
	GES_CNT_INFLIGHT_FULL = 1, /* no room to remember a call's entry: event lost */
	GES_CNT_NESTED = 2, /* a traced call made inside another (e.g. cudaMalloc -> cuMemAlloc_v2): folded */
	GES_CNT_NO_ENTRY = 3, /* a return without its entry (the call began before attach): skipped */
	GES_CNT_LAUNCH = 4, /* launches (not folded into another call) */
	GES_CNT_LAUNCH_CHECKED = 5, /* launches whose return was taken: result and duration known */
	GES_CNT_MAX = 6,
};

/* Probe hits in traced processes, per API id: [2 * id] at entry,
 * [2 * id + 1] at return. What tracing costs a program is these traps. */
#define GES_MAX_APIS 64

struct ges_event {
	__u64 ts; /* entry, bpf_ktime_get_ns (CLOCK_MONOTONIC) */
	__u64 dur; /* entry to return, ns */
	__u32 pid; /* tgid */
	__u32 tid;
	__u32 cookie;
	__s32 ret; /* cudaError_t / CUresult */
	__u64 regs[6]; /* rdi rsi rdx rcx r8 r9 at entry */
	__u64 stk[6]; /* [sp] at entry: return address, then stack arguments 7.. */
	__u64 out; /* *(u64 *)arg0 after return (GES_C_OUT_ARG0) */
	__u64 cfg[5]; /* CUlaunchConfig head (GES_C_LAUNCH_CONFIG) */
	__u64 argw[GES_MAX_ARGS]; /* first kernel argument words */
	__u32 nargw;
	__s32 nstack; /* bytes from bpf_get_stack, or a negative error */
	__u64 stack[GES_MAX_STACK];
	char comm[GES_COMM_LEN];
	/* [rbp+8] at entry: the caller's caller when the caller keeps a frame
	 * pointer (cuda_runtime.h's inline template wrappers such as
	 * cudaMalloc<T> do in unoptimised host code); 0 if unreadable. */
	__u64 caller2;
	/* Address of the probed function in the process: with the object index
	 * in the cookie it gives the object's load bias, so addresses can be
	 * named after the process has exited and /proc/PID/maps is gone. */
	__u64 ip;
	/* mm->start_code: where the executable's code was loaded. With only
	 * libcudart probed, the kernel stubs and call sites are in the
	 * executable, which no probe's ip locates. */
	__u64 exe_start;
};

#define GES_NAME_LEN 256

/* What a kernel-handle lookup returned: handle -> name (or, for
 * cuKernelGetFunction, CUfunction -> CUkernel in aux). Told apart from
 * ges_event by its size. */
struct ges_name_event {
	__u32 pid;
	__u32 cookie;
	__s32 ret;
	__u32 pad;
	__u64 handle; /* *arg0 after return */
	__u64 aux; /* arg1: the CUlibrary, CUmodule or CUkernel */
	__u64 caller; /* return address: a lookup made outside cudart means the
			 program launches through the driver itself */
	char name[GES_NAME_LEN]; /* arg2, NUL-terminated (GES_C_NAME_ARG2) */
};

#endif
